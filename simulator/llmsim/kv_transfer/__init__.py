"""Disaggregated prefill/decode between llmsim processes: the side channel a decode replica uses to
check, and then release, the KV blocks a prefill replica holds for it (docs/pd.md).

vLLM's NIXL connector reads the blocks straight from the prefill GPU's memory and notifies the
prefill side when done; llmsim has no memory to read, so the pull's *time* is simulated by the
decode engine (``engine/scheduler/kv_link.py``) and this channel carries what remains real: does
the prefill replica still hold the request's blocks, and the notice that frees them.
"""

from llmsim.kv_transfer.side_channel import SideChannelPeer, SideChannelServer

__all__ = ["SideChannelPeer", "SideChannelServer"]
