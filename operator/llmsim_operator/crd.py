"""The LLMSimulator CustomResourceDefinition: the one source of truth for crds/ and the chart.

``llmsim-operator crd`` prints it; a test checks that ``crds/llmsim.io_llmsimulators.yaml`` and the
chart's copy equal it. The operator applies the schema's defaults itself (:mod:`.defaulting`) and
re-checks the CEL rules (:mod:`.spec`), because kube-apiserver < 1.25 does not know
``x-kubernetes-validations`` (``llmsim-operator crd --kube-version 1.24`` leaves them out).
"""

from __future__ import annotations

from typing import Any

import llmsim_capacity
from llmsim_operator.conventions import GROUP, KIND, PLURAL, SHORT_NAMES, SINGULAR, VERSION

Schema = dict[str, Any]

#: A Kubernetes object name usable as a Service name (DNS-1035 label).
NAME_PATTERN = "^[a-z]([-a-z0-9]*[a-z0-9])?$"
NAME_MAX_LENGTH = 63
DURATION_PATTERN = "^([0-9]+(\\.[0-9]+)?(ms|s|m|h))+$"

# CEL rules, each mirrored by a check in spec.py (the message is the same text).
RULE_NAME = (
    f"self.metadata.name.matches('{NAME_PATTERN}') && size(self.metadata.name) <= {NAME_MAX_LENGTH}",
    f"metadata.name must be a DNS-1035 label of at most {NAME_MAX_LENGTH} characters (it names the Service)",
)
RULE_SCHEDULER_MODEL = (
    "self.engine != 'scheduler' || has(self.model.profile) || "
    "(has(self.model.parametersBillions) && has(self.model.kvBytesPerToken))",
    "the scheduler engine needs model.profile, or both model.parametersBillions and model.kvBytesPerToken",
)
RULE_HARDWARE = (
    "has(self.profile) || (has(self.hbmGiB) && has(self.memoryBandwidthGBps) && has(self.peakTFLOPS))",
    "hardware needs a profile, or all of hbmGiB, memoryBandwidthGBps and peakTFLOPS",
)
RULE_RESPONSES = (
    "!(has(self.inline) && has(self.configMapRef))",
    "responses takes either inline or configMapRef, not both",
)
RULE_DISRUPTION_BUDGET = (
    "!(has(self.maxUnavailable) && has(self.minAvailable))",
    "podDisruptionBudget takes maxUnavailable or minAvailable, not both",
)
#: Fault kinds as CR fields (camelCase) -> models.yml's ``faults.rates`` keys.
FAULT_RATES = {
    "rateLimit": "rate_limit",
    "serverError": "server_error",
    "unavailable": "unavailable",
    "badRequest": "bad_request",
    "abortMidStream": "abort_mid_stream",
    "stall": "stall",
    "slow": "slow",
    "crash": "crash",
}
# One fault per request: the rates add up to at most 1 (with room for float rounding, as llmsim).
RULE_FAULT_RATES = (
    " + ".join(f"(has(self.{k}) ? self.{k} : 0.0)" for k in FAULT_RATES) + " <= 1.000000001",
    "faults.rates add up to more than 1 (a request gets at most one fault)",
)


def _rules(*rules: tuple[str, str]) -> dict[str, Any]:
    return {"x-kubernetes-validations": [{"rule": rule, "message": message} for rule, message in rules]}


def _obj(description: str, properties: dict[str, Schema], **extra: Any) -> Schema:
    return {"type": "object", "description": description, "properties": properties, **extra}


def _str(description: str, **extra: Any) -> Schema:
    return {"type": "string", "description": description, **extra}


def _int(description: str, minimum: int | None = 1, **extra: Any) -> Schema:
    out: Schema = {"type": "integer", "format": "int32", "description": description, **extra}
    if minimum is not None:
        out["minimum"] = minimum
    return out


def _positive(description: str, **extra: Any) -> Schema:
    return {"type": "number", "description": description, "exclusiveMinimum": True, "minimum": 0, **extra}


def _fraction(description: str, **extra: Any) -> Schema:
    return _positive(description, maximum=1, **extra)


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
    {
        "name": _str("Model name served on /v1/models and expected in requests' `model` field.", minLength=1),
        "profile": _str(
            "Built-in model profile (llmsim's model_profiles.yml), e.g. llama-3.1-8b, qwen2.5-7b, llama-2-7b."
        ),
        "parametersBillions": _positive("Parameter count in billions (sets the weights' size in HBM)."),
        "bytesPerParameter": _positive(
            f"Bytes per weight: 2 for fp16/bf16, 1 for fp8 (default {llmsim_capacity.DEFAULT_BYTES_PER_PARAMETER:g})."
        ),
        "kvBytesPerToken": _int("KV-cache bytes per token: layers x KV heads x head_dim x 2 (K and V) x dtype bytes."),
        "contextLength": _int(
            "Maximum context length in tokens (default: the profile's, else "
            f"{llmsim_capacity.DEFAULT_CONTEXT_LENGTH}). One request of this length must fit in the KV cache."
        ),
    },
    required=["name"],
)

_HARDWARE = _obj(
    "The simulated GPU: a built-in profile, or explicit datasheet figures (explicit figures override the profile's).",
    {
        "profile": _str(
            "Built-in GPU profile (llmsim's hardware.yml), e.g. h100-80gb, a100-80gb, l4-24gb.",
        ),
        "hbmGiB": _positive("GPU memory in GiB."),
        "memoryBandwidthGBps": _positive("Memory bandwidth in GB/s (1e9 bytes/s)."),
        "peakTFLOPS": _positive("Dense FP16/BF16 tensor throughput in TFLOPS (no sparsity)."),
    },
    default={"profile": "h100-80gb"},
    **_rules(RULE_HARDWARE),
)

_SCHEDULER = _obj(
    "Continuous-batching limits and KV-cache sizing of the scheduler engine (vLLM's names in parentheses).",
    {
        "maxBatchTokens": _int("Token budget of one step (max_num_batched_tokens; default by GPU size)."),
        "maxNumSequences": _int("Sequences running at once (max_num_seqs; default by GPU size)."),
        "maxWaitingRequests": _int("Waiting requests beyond this get HTTP 503 (default: unbounded)."),
        "blockSize": _int("Tokens per KV-cache block.", default=llmsim_capacity.DEFAULT_BLOCK_SIZE),
        "gpuMemoryUtilization": _fraction(
            "Fraction of GPU memory for weights and KV cache (gpu_memory_utilization).",
            default=llmsim_capacity.DEFAULT_GPU_MEMORY_UTILIZATION,
        ),
        "watermark": {
            "type": "number",
            "description": "Fraction of KV blocks kept free when admitting new requests.",
            "minimum": 0,
            "maximum": 1,
            "exclusiveMaximum": True,
            "default": 0.0,
        },
        "enablePrefixCaching": {
            "type": "boolean",
            "description": "Reuse cached KV blocks of shared prompt prefixes (enable_prefix_caching; the simulator's "
            "default, as vLLM V1's, is on).",
        },
        "asyncScheduling": {
            "type": "boolean",
            "description": "Schedule step k+1 while step k runs (async_scheduling; default on, as in vLLM since late 2025).",
        },
    },
    default={},
)

_LORA = _obj(
    "LoRA adapters served on the model (vLLM's --enable-lora, --max-loras, --max-cpu-loras, --lora-modules). "
    "Requests name an adapter in `model`.",
    {
        "maxLoras": _int("Distinct adapters in one running batch (max_loras; default 1)."),
        "maxCpuLoras": _int("Adapters kept loaded (max_cpu_loras; default maxLoras); must be >= maxLoras."),
        "loadMs": {
            "type": "number",
            "minimum": 0,
            "description": "Simulated time to load an adapter that is not loaded (ms, default 0).",
        },
        "adapters": {
            "type": "array",
            "description": "Adapters loaded at startup, in order.",
            "items": _obj(
                "One adapter.",
                {
                    "name": _str("Adapter name, as requests give it in `model`.", minLength=1),
                    "path": _str("Where vLLM would load it from (part of the prefix-cache block hash)."),
                },
                required=["name"],
            ),
        },
    },
)

_KV_EVENTS = _obj(
    "KV-cache events for KV-aware routers (vLLM's --kv-events-config): a ZMQ PUB socket on each pod.",
    {
        "enabled": _bool("Publish BlockStored/BlockRemoved/AllBlocksCleared events.", False),
        "port": _int("Container port the PUB socket binds (named `kv-events`; default 5557).", maximum=65535),
        "topic": _str(
            "ZMQ topic; {pod_ip} and {model} are filled in on each pod (default kv@{pod_ip}@{model}, "
            "the topic shape llm-d's KV-cache indexer parses)."
        ),
        "eventFormat": _str(
            "map: events as msgpack maps (vLLM now); array: positional arrays (vLLM up to 0.23).",
            enum=["map", "array"],
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
        "chatTemplate": _str("Chat template rendered around messages.", enum=["chatml", "llama-3"]),
    },
    required=["configMapRef"],
)

_LATENCY = _obj(
    "Fixed costs. stepOverheadMs, stepOverheadPerSequenceMs and requestOverheadMs apply to the scheduler engine "
    "(default: llmsim's calibration of the model profile on the hardware profile, fitted to published vLLM runs; "
    "else 0); the others define the fixed engine's timeline.",
    {
        "stepOverheadMs": {"type": "number", "minimum": 0, "description": "Cost added to every scheduler step (ms)."},
        "stepOverheadPerSequenceMs": {
            "type": "number",
            "minimum": 0,
            "description": "Cost added to a scheduler step for each sequence in its batch (ms).",
        },
        "requestOverheadMs": {
            "type": "number",
            "minimum": 0,
            "description": "Time from a request's arrival to the scheduler (HTTP, chat template, tokenization) (ms).",
        },
        "ttftOverheadMs": {"type": "number", "minimum": 0, "description": "Fixed engine: TTFT before prefill (ms)."},
        "prefillTokensPerSecond": _positive("Fixed engine: prompt tokens processed per second (adds to TTFT)."),
        "itlMs": {"type": "number", "minimum": 0, "description": "Fixed engine: time between output tokens (ms)."},
    },
)

_EFFICIENCY = _obj(
    "Achieved fraction of the GPU's peak (calibration knobs of the roofline cost model). Default: llmsim's "
    "calibration of the model profile on the hardware profile (a built-in GPU named without explicit figures), "
    "fitted to published vLLM runs; else 1.",
    {
        "compute": _fraction("Fraction of peak TFLOPS achieved."),
        "memory": _fraction("Fraction of peak memory bandwidth achieved."),
    },
)

_RESPONSES = _obj(
    "Scripted responses (responses.yml); without it the simulator's built-in responses are served.",
    {
        "inline": _str("The responses.yml content itself."),
        "configMapRef": _obj(
            "A ConfigMap in the same namespace holding responses.yml; its content is copied into the "
            "simulator's config (changes are picked up at the next drift check and roll the pods).",
            {
                "name": _str("ConfigMap name.", minLength=1),
                "key": _str("Key holding the responses file.", default="responses.yml", minLength=1),
            },
            required=["name"],
        ),
    },
    default={},
    **_rules(RULE_RESPONSES),
)


def _rate(description: str) -> Schema:
    return {"type": "number", "minimum": 0, "maximum": 1, "description": description}


_FAULTS = _obj(
    "Fault injection (llmsim's models.yml `faults`): per request, at most one fault drawn from (seed, request id "
    "or number) at these rates, so a run is reproducible. See llmsim's docs/faults.md.",
    {
        "seed": {"type": "integer", "format": "int64", "description": "Seed of the draws (default 0)."},
        "rates": _obj(
            "Probability of each fault per request (0-1; together at most 1).",
            {
                "rateLimit": _rate("429 with Retry-After."),
                "serverError": _rate("500."),
                "unavailable": _rate("503 with Retry-After."),
                "badRequest": _rate("400."),
                "abortMidStream": _rate("The connection drops after some tokens (a truncated response)."),
                "stall": _rate("The stream pauses stallMs before one of its tokens."),
                "slow": _rate("The request's whole timeline is stretched by slowFactor."),
                "crash": _rate("The simulator process exits (the pod restarts)."),
            },
            **_rules(RULE_FAULT_RATES),
        ),
        # NOTE: the maxima are llmsim.config.schema's MAX_STALL_MS and MAX_SLOW_FACTOR (a test compares them).
        "stallMs": {
            "type": "number",
            "minimum": 0,
            "maximum": 3_600_000,
            "description": "Length of a stall in ms (default 1000, at most an hour).",
        },
        "slowFactor": {
            "type": "number",
            "minimum": 1,
            "maximum": 1000,
            "description": "Latency multiplier of slow (default 2, at most 1000).",
        },
        "headerOverride": _bool(
            "Obey the x-llmsim-fault request header (one fault forced on one request). Off: clients cannot "
            "trigger faults.",
            False,
        ),
    },
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
    **_rules(RULE_DISRUPTION_BUDGET),
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

SPEC_SCHEMA = _obj(
    "Desired state of a fleet of simulated LLM servers.",
    {
        "model": _MODEL,
        "hardware": _HARDWARE,
        "engine": _str(
            "Timing engine: scheduler (continuous batching on the simulated GPU), fixed (per-request "
            "timeline, load-independent) or instant (no delay).",
            enum=["scheduler", "fixed", "instant"],
            default="scheduler",
        ),
        "scheduler": _SCHEDULER,
        "latency": _LATENCY,
        "efficiency": _EFFICIENCY,
        "legacyMetrics": _bool("Also expose deprecated vLLM metric names some routers still read.", False),
        "faults": _FAULTS,
        "startupSeconds": {
            "type": "number",
            "minimum": 0,
            "description": "Simulated model load: pods bind at once but stay unready (/health 503) this long.",
        },
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
        "enablePromptTokensDetails": {
            "type": "boolean",
            "description": "Report usage.prompt_tokens_details.cached_tokens (vLLM's --enable-prompt-tokens-details; "
            "default off, as vLLM).",
        },
        "lora": _LORA,
        "kvEvents": _KV_EVENTS,
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
    },
    required=["model"],
    **_rules(RULE_SCHEDULER_MODEL),
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
        "replicas": _int("Pods of the Deployment (the scale subresource's status path).", minimum=0),
        "readyReplicas": _int("Pods passing their readiness probe (/health).", minimum=0),
        "ready": _str("readyReplicas/desired replicas, for kubectl get."),
        "selector": _str("Label selector of the pods (the scale subresource's selector, used by HPAs)."),
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
    **_rules(RULE_NAME),
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
