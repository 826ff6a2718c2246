"""KV-cache events for KV-aware routers, in vLLM's wire format (``--kv-events-config``).

The engine records what happens to its prefix cache (:class:`~llmsim.types.BlockStored`,
:class:`~llmsim.types.BlockRemoved`, :class:`~llmsim.types.AllBlocksCleared`) in each step's
stats; :class:`KVEventStream` (an engine observer, wired in runtime.py) encodes each step's
events as one batch (:mod:`.wire`) and sends it on a ZMQ PUB socket (:mod:`.publisher`).
"""

from llmsim.kv_events.publisher import KVEventStream, ZmqPublisher, offset_endpoint_port
from llmsim.kv_events.wire import EventFormat, encode_batch

__all__ = ["EventFormat", "KVEventStream", "ZmqPublisher", "encode_batch", "offset_endpoint_port"]
