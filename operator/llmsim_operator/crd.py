"""The LLMSimulator CustomResourceDefinition: the one source of truth for crds/ and the chart.

Every field that is a models.yml field comes from llmsim's pydantic schema (:data:`MODELS_FIELDS`
says where each goes in the spec, :mod:`.simulator_schema` converts it): its type, bounds, default
and description are written once, in ``simulator/llmsim/config/schema.py``. This module adds what
only Kubernetes has (replicas, Service, probes, Secrets, ConfigMaps), the section descriptions and
the CEL rules.

``make generate`` writes ``crds/llmsim.io_llmsimulators.yaml``, the chart's copy and
``deploy/llmsim-operator.yaml``; a test checks they equal it. The operator applies the schema's
defaults itself (:mod:`.defaulting`) and re-checks the CEL rules (:mod:`.spec`), because
kube-apiserver < 1.25 does not know ``x-kubernetes-validations`` (``llmsim-operator crd
--kube-version 1.24`` leaves them out).
"""

from __future__ import annotations

from typing import Any

from llmsim_operator.conventions import GROUP, KIND, PLURAL, SHORT_NAMES, SINGULAR, VERSION
from llmsim_operator.rules import Matches, NeedsOneGroup, NotBoth, OnlyWhen, ShorterWhen, SumAtMost, attach
from llmsim_operator.simulator_schema import Layout, Place, Schema

#: Where the spec takes llmsim's models.yml fields from (paths from a model entry; "/": the document).
#: A field added to a section of llmsim's schema appears here by itself (``make generate``).
MODELS_FIELDS = (
    Place("model", "name"),
    Place("model", "profile"),
    Place("model", "context_length"),
    Place("model", "weights.parameters_billions"),
    Place("model", "weights.bytes_per_parameter"),
    Place("model", "kv_cache.bytes_per_token", name="kvBytesPerToken"),
    # Rendered under the name the operator gives the entry (a profile's, or "custom").
    Place(
        "hardware",
        "/hardware{}.*",
        exclude=("description",),
        rename={"hbm_gib": "hbmGiB", "memory_bandwidth_gbps": "memoryBandwidthGBps", "peak_tflops": "peakTFLOPS"},
        render=False,
    ),
    Place("", "engine"),
    Place("scheduler", "scheduler.*"),
    Place("scheduler", "kv_cache.*", exclude=("bytes_per_token",)),
    Place("latency", "latency.*"),
    Place("efficiency", "efficiency.*"),
    Place("", "legacy_metrics"),
    Place("", "faults"),
    Place("", "/startup_seconds"),
    Place("", "enable_prompt_tokens_details"),
    Place("", "lora"),
    # The operator writes kv_events and tokenizer itself (endpoint from the port, path from the mount).
    Place("kvEvents", "kv_events.enable_kv_cache_events", name="enabled", render=False),
    Place("kvEvents", "kv_events.event_format", render=False),
    Place("tokenizer", "tokenizer.chat_template", render=False),
    # Disaggregated prefill/decode: the operator adds each role's kv_role and its side-channel host.
    Place("disaggregation", "kv_transfer.kv_connector", name="connector"),
    Place("disaggregation", "kv_transfer.abort_request_timeout_s", name="abortRequestTimeoutSeconds"),
    Place("disaggregation", "kv_transfer.side_channel_port"),
    Place("disaggregation", "kv_transfer.kv_load_failure_policy"),
    Place("disaggregation.link", "kv_transfer.bandwidth_gbps", name="bandwidthGbps"),
    Place("disaggregation.link", "kv_transfer.latency_ms"),
    Place("dataParallel", "data_parallel.size"),
    Place("dataParallel", "data_parallel.load_balancing"),
)
MODELS = Layout(MODELS_FIELDS)

#: A Kubernetes object name usable as a Service name (DNS-1035 label).
NAME_PATTERN = "^[a-z]([-a-z0-9]*[a-z0-9])?$"
NAME_MAX_LENGTH = 63
DURATION_PATTERN = "^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$"

# CEL rules; spec.py runs each one's Python twin (rules.py) wherever the schema attaches it.
RULE_NAME = Matches(
    f"metadata.name must be a DNS-1035 label of at most {NAME_MAX_LENGTH} characters (it names the Service)",
    "metadata.name",
    NAME_PATTERN,
    NAME_MAX_LENGTH,
)
RULE_SCHEDULER_MODEL = NeedsOneGroup(
    "the scheduler engine needs model.profile, or both model.parametersBillions and model.kvBytesPerToken",
    [["model.profile"], ["model.parametersBillions", "model.kvBytesPerToken"]],
    when=("engine", "scheduler"),
)
RULE_HARDWARE = NeedsOneGroup(
    "hardware needs a profile, or all of hbmGiB, memoryBandwidthGBps and peakTFLOPS",
    [["profile"], ["hbmGiB", "memoryBandwidthGBps", "peakTFLOPS"]],
)
RULE_RESPONSES = NotBoth("responses takes either inline or configMapRef, not both", "inline", "configMapRef")
RULE_DISRUPTION_BUDGET = NotBoth(
    "podDisruptionBudget takes maxUnavailable or minAvailable, not both", "maxUnavailable", "minAvailable"
)
#: Fault kinds as spec fields (camelCase), from models.yml's ``faults.rates``.
FAULT_RATES = tuple(MODELS.properties("")["faults"]["properties"]["rates"]["properties"])
# One fault per request (llmsim's FaultRates checks the same).
RULE_FAULT_RATES = SumAtMost("faults.rates add up to more than 1 (a request gets at most one fault)", FAULT_RATES, 1.0)
#: The longest role suffix ("-prefill") must still leave a Service name of at most 63 characters.
ROLE_SUFFIX_LENGTH = len("-prefill")
RULE_ROLE_NAME = ShorterWhen(
    f"a disaggregated LLMSimulator's name is at most {NAME_MAX_LENGTH - ROLE_SUFFIX_LENGTH} characters "
    "(its Services are <name>-prefill and <name>-decode)",
    "metadata.name",
    NAME_MAX_LENGTH - ROLE_SUFFIX_LENGTH,
    "spec.disaggregation",
)
# What the pods would refuse at startup (llmsim's ModelConfig): only the scheduler engine has a KV
# cache to hand over and a GPU to be one rank of.
RULE_DISAGGREGATION_ENGINE = OnlyWhen(
    "disaggregation needs engine: scheduler (the other engines have no KV cache to hand over)",
    "disaggregation",
    "engine",
    "scheduler",
)
RULE_DATA_PARALLEL_ENGINE = OnlyWhen(
    "dataParallel.size > 1 needs engine: scheduler (each rank is a simulated GPU)",
    "dataParallel.size",
    "engine",
    "scheduler",
    above=1,
)
#: Every rule (spec.py re-checks them, on clusters without CEL too).
RULES = (
    RULE_NAME,
    RULE_ROLE_NAME,
    RULE_SCHEDULER_MODEL,
    RULE_DISAGGREGATION_ENGINE,
    RULE_DATA_PARALLEL_ENGINE,
    RULE_HARDWARE,
    RULE_RESPONSES,
    RULE_DISRUPTION_BUDGET,
    RULE_FAULT_RATES,
)


def _obj(description: str, properties: dict[str, Schema], **extra: Any) -> Schema:
    return {"type": "object", "description": description, "properties": properties, **extra}


def _str(description: str, **extra: Any) -> Schema:
    return {"type": "string", "description": description, **extra}


def _int(description: str, minimum: int | None = 1, **extra: Any) -> Schema:
    out: Schema = {"type": "integer", "format": "int32", "description": description, **extra}
    if minimum is not None:
        out["minimum"] = minimum
    return out


def _bool(description: str, default: bool) -> Schema:
    return {"type": "boolean", "description": description, "default": default}


def _string_map(description: str) -> Schema:
    return {"type": "object", "description": description, "additionalProperties": {"type": "string"}}


def _int_or_percent(description: str) -> Schema:
    """A count of pods or a percentage of them (IntOrString, as in a PodDisruptionBudget)."""
    return {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "x-kubernetes-int-or-string": True,
        "minimum": 0,
        "pattern": "^[0-9]+%$",
        "description": description,
    }


def _quantities(description: str) -> Schema:
    quantity = {
        "anyOf": [{"type": "integer"}, {"type": "string"}],
        "pattern": "^(\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))(([KMGTPE]i)|[numkMGTPE]|([eE](\\+|-)?(([0-9]+(\\.[0-9]*)?)|(\\.[0-9]+))))?$",
        "x-kubernetes-int-or-string": True,
    }
    return {"type": "object", "description": description, "additionalProperties": quantity}


_MODEL = _obj(
    "The served model: its name, and its size from a built-in profile or explicit numbers (explicit numbers win).",
    MODELS.properties("model"),
    required=["name"],
)
_HARDWARE = _obj(
    "The simulated GPU: a built-in profile, or explicit datasheet figures (explicit figures override the profile's).",
    {
        "profile": _str(
            "Built-in GPU profile (llmsim's hardware.yml), e.g. h100-80gb, a100-80gb, l4-24gb.",
        ),
        **MODELS.properties("hardware"),
    },
    default={"profile": "h100-80gb"},
    **attach(RULE_HARDWARE),
)

_SCHEDULER = _obj(
    "Continuous-batching limits and KV-cache sizing of the scheduler engine (vLLM's names in parentheses).",
    MODELS.properties("scheduler"),
    default={},
)

_KV_EVENTS = _obj(
    "KV-cache events for KV-aware routers (vLLM's --kv-events-config): a ZMQ PUB socket on each pod.",
    {
        **MODELS.properties("kvEvents"),
        "port": _int("Container port the PUB socket binds (named `kv-events`; default 5557).", maximum=65535),
        "topic": _str(
            "ZMQ topic; {pod_ip} and {model} are filled in on each pod (default kv@{pod_ip}@{model}, "
            "the topic shape llm-d's KV-cache indexer parses)."
        ),
    },
)

_TOKENIZER = _obj(
    "A Hugging Face tokenizer.json for prompt counts, output tokens and block hashes (default: the built-in "
    "regex tokenizer). Mounted from a ConfigMap in the same namespace (ConfigMaps hold at most 1 MiB).",
    {
        "configMapRef": _obj(
            "The ConfigMap holding tokenizer.json (mounted as is; restart the pods after changing it).",
            {
                "name": _str("ConfigMap name.", minLength=1),
                "key": _str("Key holding the tokenizer file.", default="tokenizer.json", minLength=1),
            },
            required=["name"],
        ),
        **MODELS.properties("tokenizer"),
    },
    required=["configMapRef"],
)

_DISAGGREGATION = _obj(
    "Disaggregated prefill/decode (vLLM's --kv-transfer-config, llm-d's P/D): a prefill Deployment "
    "(kv_producer) and a decode Deployment (kv_consumer), each labelled llm-d.ai/role and with its own "
    "Service <name>-prefill / <name>-decode. spec.replicas (the scale subresource) counts decode pods; "
    "prefill.replicas counts prefill pods. Needs the scheduler engine.",
    {
        **MODELS.properties("disaggregation"),
        "link": _obj(
            "The link a KV pull crosses between a prefill and a decode pod.", MODELS.properties("disaggregation.link")
        ),
        "prefill": _obj(
            "The prefill role.",
            {
                "replicas": _int(
                    "Prefill pods (kubectl patch; the scale subresource scales decode).", minimum=0, default=1
                )
            },
            default={},
        ),
    },
)

_DATA_PARALLEL = _obj(
    "Data-parallel ranks per pod (vLLM's --data-parallel-size): each rank a simulated GPU with its own engine. "
    "internal: one port (`http`), the server balances ranks; external: rank r listens on container port "
    "8000 + r, named `http` (rank 0) and `http-<r>`, with a Service port and a ServiceMonitor endpoint each.",
    MODELS.properties("dataParallel"),
)

_TLS = _obj(
    "Serve HTTPS (vLLM's --ssl-certfile/--ssl-keyfile) with the certificate of a kubernetes.io/tls Secret "
    "(keys tls.crt, tls.key); probes and the ServiceMonitor switch to HTTPS. Restart the pods after renewing it.",
    {"secretName": _str("A kubernetes.io/tls Secret in the same namespace.", minLength=1)},
    required=["secretName"],
)

_LATENCY = _obj(
    "Fixed costs. stepOverheadMs, stepOverheadPerSequenceMs and requestOverheadMs apply to the scheduler engine "
    "(default: llmsim's calibration of the model profile on the hardware profile, fitted to published vLLM runs; "
    "else 0); the others define the fixed engine's timeline.",
    MODELS.properties("latency"),
)

_EFFICIENCY = _obj(
    "Achieved fraction of the GPU's peak (calibration knobs of the roofline cost model). Default: llmsim's "
    "calibration of the model profile on the hardware profile (a built-in GPU named without explicit figures), "
    "fitted to published vLLM runs; else 1.",
    MODELS.properties("efficiency"),
)

_RESPONSES = _obj(
    "Scripted responses (responses.yml); without it the simulator's built-in responses are served.",
    {
        "inline": _str("The responses.yml content itself."),
        "configMapRef": _obj(
            "A ConfigMap in the same namespace holding responses.yml; its content is copied into the "
            "simulator's config (the operator watches it: a change rolls the pods).",
            {
                "name": _str("ConfigMap name.", minLength=1),
                "key": _str("Key holding the responses file.", default="responses.yml", minLength=1),
            },
            required=["name"],
        ),
    },
    default={},
    **attach(RULE_RESPONSES),
)


def _secret_key_ref(description: str, default_key: str) -> Schema:
    return _obj(
        description,
        {
            "name": _str("Secret in the same namespace.", minLength=1),
            "key": _str(
                "Key in the Secret; several keys may be given comma-separated.", default=default_key, minLength=1
            ),
        },
        required=["name"],
    )


_TOLERATION = _obj(
    "A pod toleration (core/v1 Toleration).",
    {
        "key": _str("Taint key the toleration applies to (empty with operator Exists: all taints)."),
        "operator": _str("Exists or Equal.", enum=["Exists", "Equal"]),
        "value": _str("Taint value the toleration matches."),
        "effect": _str(
            "NoSchedule, PreferNoSchedule or NoExecute.", enum=["NoSchedule", "PreferNoSchedule", "NoExecute"]
        ),
        "tolerationSeconds": {
            "type": "integer",
            "format": "int64",
            "description": "How long a NoExecute taint is tolerated.",
        },
    },
)

_POD_TEMPLATE = _obj(
    "Extras merged into the simulator pods (the operator's own labels and annotations win on conflict).",
    {
        "labels": _string_map("Pod labels, e.g. to match a Gateway API InferencePool selector."),
        "annotations": _string_map("Pod annotations."),
        "nodeSelector": _string_map("Node selector of the pods."),
        "tolerations": {"type": "array", "description": "Pod tolerations.", "items": _TOLERATION},
    },
    default={},
)

_SERVICE = _obj(
    "The Service in front of the replicas (one port named `http`).",
    {
        "type": _str("Service type.", enum=["ClusterIP", "NodePort", "LoadBalancer"], default="ClusterIP"),
        "port": _int("Service port.", maximum=65535, default=8000),
    },
    default={},
)

_MONITORING = _obj(
    "Prometheus scraping. Pods always carry prometheus.io/* annotations.",
    {
        "serviceMonitor": _obj(
            "A prometheus-operator ServiceMonitor, created only when the monitoring.coreos.com API exists.",
            {
                "enabled": _bool("Create the ServiceMonitor.", False),
                "interval": _str("Scrape interval.", pattern=DURATION_PATTERN, default="30s"),
                "labels": _string_map(
                    "Extra ServiceMonitor labels, e.g. to match a Prometheus serviceMonitorSelector."
                ),
            },
            default={},
        ),
    },
    default={},
)

_DISRUPTION_BUDGET = _obj(
    "A PodDisruptionBudget over the simulator pods, kept while the fleet has more than one replica (or an "
    "external autoscaler sets them): a budget over a single pod would only block node drains.",
    {
        "enabled": _bool("Create the PodDisruptionBudget.", False),
        "maxUnavailable": _int_or_percent(
            "Pods that voluntary disruptions (drains, evictions) may take down at once, e.g. 1 or 25% (default 1)."
        ),
        "minAvailable": _int_or_percent("Pods that must stay up instead, e.g. 2 or 50% (excludes maxUnavailable)."),
    },
    default={},
    **attach(RULE_DISRUPTION_BUDGET),
)

_AUTOSCALING = _obj(
    "Who sets the Deployment's replicas. An HPA targeting this LLMSimulator's scale subresource needs nothing here.",
    {
        "external": _bool(
            "An autoscaler (HPA, KEDA) scales the Deployment directly: the operator never sets its replicas "
            "and spec.replicas is ignored.",
            False,
        ),
    },
    default={},
)

_INFERENCE_POOL = _obj(
    "A Gateway API Inference Extension InferencePool (inference.networking.k8s.io/v1) selecting exactly this "
    "fleet's serving pods (targetPorts: their ports named http and http-<n>), and InferenceObjectives "
    "(inference.networking.x-k8s.io/v1alpha2) pointing at it; created only while those APIs are served "
    "(condition InferencePool says which).",
    {
        "endpointPickerRef": _obj(
            "The pool's Endpoint Picker, as InferencePool's spec.endpointPickerRef.",
            {
                "group": _str("API group of the picker (empty: the core group, for a Service)."),
                "kind": _str("Kind of the picker.", default="Service"),
                "name": _str("Name of the picker."),
                "port": _obj(
                    "Port of the picker (required for a Service).",
                    {"number": _int("Port number.", maximum=65535)},
                    required=["number"],
                ),
                "failureMode": _str(
                    "What the gateway does when the picker fails.", enum=["FailOpen", "FailClose"], default="FailClose"
                ),
            },
            required=["name"],
        ),
        "appProtocol": _str("Protocol to the model servers.", enum=["http", "kubernetes.io/h2c"]),
        "objectives": {
            "type": "array",
            "description": "One InferenceObjective per entry, for the model or one of its LoRA adapters.",
            "items": _obj(
                "An InferenceObjective.",
                {
                    "model": _str("model.name or a lora.adapters name (default: model.name)."),
                    "name": _str(
                        "Its name, which requests send in x-gateway-inference-objective (default: the model's "
                        "name as a DNS-1123 name).",
                        pattern="^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
                    ),
                    "priority": _int("Priority against other objectives of the pool (higher first).", minimum=None),
                },
            ),
        },
    },
)

#: The spec's own models.yml fields: engine, legacyMetrics, faults, startupSeconds, lora, ...
_MODELS_TOP = MODELS.properties("")
# models.yml requires an engine; an LLMSimulator gets the scheduler unless it says otherwise.
_MODELS_TOP["engine"] = {**_MODELS_TOP["engine"], "default": "scheduler"}
_MODELS_TOP["faults"]["properties"]["rates"].update(attach(RULE_FAULT_RATES))

SPEC_SCHEMA = _obj(
    "Desired state of a fleet of simulated LLM servers.",
    {
        "model": _MODEL,
        "hardware": _HARDWARE,
        "scheduler": _SCHEDULER,
        "latency": _LATENCY,
        "efficiency": _EFFICIENCY,
        **_MODELS_TOP,
        "shutdownTimeoutSeconds": _int(
            "On termination, seconds running requests get to finish before they are aborted (vLLM's "
            "--shutdown-timeout; 0: abort at once). The pod's terminationGracePeriodSeconds is this plus 10.",
            minimum=0,
            default=0,
        ),
        "apiKeySecretRef": _secret_key_ref(
            "Secret holding the API key clients must send as `Authorization: Bearer` on /v1/* (vLLM's --api-key).",
            "api-key",
        ),
        "adminKeySecretRef": _secret_key_ref(
            "Secret holding the key for /admin/faults, /sleep and /wake_up. Without it those are open only "
            "when no API key is set.",
            "admin-key",
        ),
        "kvEvents": _KV_EVENTS,
        "disaggregation": _DISAGGREGATION,
        "dataParallel": _DATA_PARALLEL,
        "tls": _TLS,
        "tokenizer": _TOKENIZER,
        "responses": _RESPONSES,
        "replicas": _int("Number of simulator pods (the scale subresource's spec path).", minimum=0, default=1),
        "autoscaling": _AUTOSCALING,
        "podDisruptionBudget": _DISRUPTION_BUDGET,
        "image": _str("Simulator image (default: the operator's --simulator-image)."),
        "imagePullPolicy": _str("Image pull policy.", enum=["Always", "IfNotPresent", "Never"]),
        "resources": _obj(
            "Compute resources of the simulator container.",
            {"requests": _quantities("Requested resources."), "limits": _quantities("Resource limits.")},
            default={"requests": {"cpu": "100m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        ),
        "podTemplate": _POD_TEMPLATE,
        "service": _SERVICE,
        "monitoring": _MONITORING,
        "inferencePool": _INFERENCE_POOL,
    },
    required=["model"],
    **attach(RULE_SCHEDULER_MODEL, RULE_DISAGGREGATION_ENGINE, RULE_DATA_PARALLEL_ENGINE),
)

_CONDITION = _obj(
    "A status condition (metav1.Condition).",
    {
        "type": _str("Ready, Progressing or Degraded."),
        "status": _str("True, False or Unknown.", enum=["True", "False", "Unknown"]),
        "reason": _str("CamelCase reason."),
        "message": _str("Human-readable detail."),
        "lastTransitionTime": _str("When status last changed.", format="date-time"),
    },
    required=["type", "status"],
)

STATUS_SCHEMA = _obj(
    "Observed state, written by the operator.",
    {
        "observedGeneration": {
            "type": "integer",
            "format": "int64",
            "description": "metadata.generation of the spec last reconciled.",
        },
        "replicas": _int(
            "Pods of the Deployment spec.replicas drives (decode when disaggregated; the scale subresource's "
            "status path).",
            minimum=0,
        ),
        "readyReplicas": _int("Those pods passing their readiness probe (/health).", minimum=0),
        "ready": _str("readyReplicas/desired replicas, for kubectl get."),
        "selector": _str(
            "Label selector of those pods (the scale subresource's selector, used by HPAs; decode pods when "
            "disaggregated)."
        ),
        "roles": {
            "type": "object",
            "description": "A disaggregated fleet's roles (prefill, decode): each one's pods, ready pods and Service.",
            "additionalProperties": _obj(
                "One role's Deployment and Service.",
                {
                    "replicas": _int("Pods of the role's Deployment.", minimum=0),
                    "readyReplicas": _int("Ready pods of the role.", minimum=0),
                    "ready": _str("readyReplicas/desired replicas."),
                    "endpoint": _str("In-cluster base URL of the role's Service."),
                },
            ),
        },
        "gpus": _int("Simulated GPUs: pods x dataParallel.size, over every role.", minimum=0),
        "kvCacheBlocks": _int(
            "KV-cache capacity in blocks: floor((hbm x gpuMemoryUtilization - weights) / (kvBytesPerToken x blockSize)).",
            minimum=0,
        ),
        "endpoint": _str("In-cluster base URL of the OpenAI-compatible API."),
        "configHash": _str("Hash of the rendered config (also a pod-template annotation)."),
        "conditions": {
            "type": "array",
            "description": "Ready, Progressing and Degraded.",
            "items": _CONDITION,
            "x-kubernetes-list-type": "map",
            "x-kubernetes-list-map-keys": ["type"],
        },
    },
)

PRINTER_COLUMNS = [
    {"name": "Model", "type": "string", "jsonPath": ".spec.model.name", "description": "Served model name."},
    {"name": "Hardware", "type": "string", "jsonPath": ".spec.hardware.profile", "description": "GPU profile."},
    {"name": "Engine", "type": "string", "jsonPath": ".spec.engine", "description": "Timing engine."},
    {"name": "Ready", "type": "string", "jsonPath": ".status.ready", "description": "Ready/desired replicas."},
    {
        "name": "Prefill",
        "type": "string",
        "jsonPath": ".status.roles.prefill.ready",
        "description": "Ready/desired prefill pods (disaggregated; Ready counts decode pods then).",
        "priority": 1,
    },
    {"name": "GPUs", "type": "integer", "jsonPath": ".status.gpus", "description": "Simulated GPUs.", "priority": 1},
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
]

ROOT_SCHEMA = _obj(
    "LLMSimulator runs a fleet of llmsim servers: OpenAI-compatible, GPU-free, with vLLM-like latency and metrics.",
    {
        "apiVersion": _str("Versioned schema of this object: llmsim.io/v1alpha1."),
        "kind": _str("LLMSimulator."),
        "metadata": {"type": "object"},
        "spec": SPEC_SCHEMA,
        "status": STATUS_SCHEMA,
    },
    required=["spec"],
    **attach(RULE_NAME, RULE_ROLE_NAME),
)


def without_cel_rules(schema: Any) -> Any:
    """A copy of ``schema`` without ``x-kubernetes-validations`` (for API servers before 1.25)."""
    if isinstance(schema, dict):
        return {k: without_cel_rules(v) for k, v in schema.items() if k != "x-kubernetes-validations"}
    if isinstance(schema, list):
        return [without_cel_rules(v) for v in schema]
    return schema


def custom_resource_definition(*, cel: bool = True) -> dict[str, Any]:
    """The CRD manifest (apiextensions.k8s.io/v1).

    ``cel=False`` leaves out the CEL rules, which API servers before 1.25 do not know (1.20–1.22
    refuse them under server-side apply); the operator re-checks each rule anyway.
    """
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{PLURAL}.{GROUP}",
            "labels": {"app.kubernetes.io/name": "llmsim-operator", "app.kubernetes.io/part-of": "llmsim"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": list(SHORT_NAMES),
                "categories": ["llmsim"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": ROOT_SCHEMA if cel else without_cel_rules(ROOT_SCHEMA)},
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                }
            ],
        },
    }
