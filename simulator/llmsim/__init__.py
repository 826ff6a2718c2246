"""llmsim: an OpenAI-compatible LLM server whose timing follows a simulated GPU.

The generator (:mod:`llmsim.llm`) decides what is said, an engine (:mod:`llmsim.engine`) decides
when each token is sent, :mod:`llmsim.api` serves HTTP, and :mod:`llmsim.runtime` wires them.
"""

__version__ = "0.1.0"
