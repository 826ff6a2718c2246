"""llmsim: an OpenAI-compatible LLM server whose timing follows a simulated GPU.

The generator (:mod:`llmsim.llm`) decides what is said, an engine (:mod:`llmsim.engine`) decides
when each token is sent, :mod:`llmsim.api` serves HTTP, and :mod:`llmsim.runtime` wires them.
"""

# The project's one version: the package's (pyproject.toml reads it), `llmsim --version`, the images'
# org.opencontainers.image.version (hack/version.sh passes it as VERSION). Bump it here, then the
# copies tests/test_version.py names, then CHANGELOG.md.
__version__ = "0.1.0"
