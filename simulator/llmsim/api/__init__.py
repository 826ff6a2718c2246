"""The HTTP edge: OpenAI's endpoints over the engines, in OpenAI's and vLLM's shapes.

Request bodies are parsed here (pydantic) and handed on as plain records; engines never see HTTP.
"""

from llmsim.api.app import LlmsimApp, create_app
from llmsim.api.served import EngineInfo, ServedModel
from llmsim.api.state import ApiState

__all__ = ["ApiState", "EngineInfo", "LlmsimApp", "ServedModel", "create_app"]
