"""models.yml: hardware profiles and served models, parsed and checked before traffic.

Only :mod:`llmsim.runtime` reads the parsed config; engines receive plain numbers.
"""

from llmsim.config.loader import load_models_config
from llmsim.config.schema import HardwareProfile, ModelConfig, ModelsConfig
from llmsim.errors import ConfigError

__all__ = ["ConfigError", "HardwareProfile", "ModelConfig", "ModelsConfig", "load_models_config"]
