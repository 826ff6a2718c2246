"""llmsim_operator: a kopf operator that reconciles LLMSimulator resources into simulator fleets.

It reaches the simulator only through the config format and container image, never by import:
it reads llmsim's shipped data files (GPU and model profiles) and nothing else of it. Pure modules
(crd, spec, simulator_config, render, status, manifests) hold all decisions and are tested as
plain dicts; kube, reconciler, handlers and cli do I/O.
"""

from llmsim_operator.conventions import RELEASE_VERSION as __version__
from llmsim_operator.crd import custom_resource_definition
from llmsim_operator.manifests import install_manifests
from llmsim_operator.render import Children, Owner, render_children
from llmsim_operator.simulator_config import config_data, config_hash, models_yaml
from llmsim_operator.spec import InvalidSpec, SimulatorSpec, parse_spec

__all__ = [
    "Children",
    "InvalidSpec",
    "Owner",
    "SimulatorSpec",
    "__version__",
    "config_data",
    "config_hash",
    "custom_resource_definition",
    "install_manifests",
    "models_yaml",
    "parse_spec",
    "render_children",
]
