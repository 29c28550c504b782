"""libmla from Python: its cache ops, decode and prefill on torch CPU tensors in
vLLM's layouts, through ctypes over libmla.so (no compiled extension).
python/README.md has the usage; docs/semantics.md the behaviour."""

from ._capi import LIBRARY_PATH, MlaError
from .ops import (Workspace, concat_and_cache, decode, decode_forward, gather_cache,
                  last_backend, prefill, prepare_weights, version)

__all__ = ["LIBRARY_PATH", "MlaError", "Workspace", "concat_and_cache", "decode",
           "decode_forward", "gather_cache", "last_backend", "prefill", "prepare_weights",
           "version"]
