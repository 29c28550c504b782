"""ctypes view of include/mla.h: the library, its status codes and dtypes, the
structs the wrappers fill (field for field as the header declares them;
tests/test_mla.py compiles the header and checks every offset) and the
prototypes of the functions they call."""

import ctypes
import ctypes.util
import os
from pathlib import Path

# The header this module mirrors; a library of another MAJOR has another ABI.
HEADER_VERSION = "0.1.0"


def _find_library():
    """MLA_LIBRARY, else the repository's own build (make), else the system's."""
    path = os.environ.get("MLA_LIBRARY")
    if path:
        return path
    built = Path(__file__).resolve().parents[2] / "build" / "libmla.so"
    if built.exists():
        return str(built)
    path = ctypes.util.find_library("mla")
    if path:
        return path
    raise OSError("libmla not found: run make in the repository (build/libmla.so), "
                  "install it, or set MLA_LIBRARY to the library's path")


lib = ctypes.CDLL(_find_library())
LIBRARY_PATH = lib._name

# ---- status and dtypes ---------------------------------------------------
MLA_OK = 0
DTYPE_F32, DTYPE_BF16, DTYPE_F16, DTYPE_FP8_E4M3, DTYPE_FP8_E5M2 = range(5)
PREFILL_PATHS = {"auto": 0, "mha": 1, "absorbed": 2}


class MlaError(RuntimeError):
    """A libmla call failed: function is the C function, status its mla_status
    name ("MLA_ERR_OUT_OF_RANGE"), message libmla's own (mla_last_error(),
    which names the function). libmla wrote nothing: outputs, cache and
    workspace are as they were."""

    def __init__(self, function, status, message):
        self.function = function
        self.status = status
        self.message = message
        super().__init__(f"{message} [{status}]")


# ---- structs --------------------------------------------------------------
_i64, _f32, _ptr, _enum = ctypes.c_int64, ctypes.c_float, ctypes.c_void_p, ctypes.c_int


class _Struct(ctypes.Structure):
    """A C struct whose constructor takes its field names only (ctypes would
    keep a misspelled one as a plain attribute and leave the field 0)."""

    def __init__(self, **fields):
        unknown = set(fields) - {name for name, _ in self._fields_}
        if unknown:
            raise TypeError(f"{type(self).__name__}: no field {', '.join(sorted(unknown))}")
        super().__init__(**fields)


class KvCache(_Struct):  # mla_kv_cache
    _fields_ = [("data", _ptr), ("dtype", _enum), ("num_blocks", _i64), ("block_size", _i64),
                ("width", _i64), ("block_stride", _i64), ("entry_stride", _i64),
                ("scale", _f32)]


class GatherSpec(_Struct):  # mla_gather_spec
    _fields_ = [("block_table", _ptr), ("block_table_cols", _i64), ("num_reqs", _i64),
                ("cu_seq_lens", _ptr), ("seq_starts", _ptr)]


class DecodeArgs(_Struct):  # mla_decode_args
    _fields_ = [("num_reqs", _i64), ("s_q", _i64), ("num_heads", _i64),
                ("kv_lora_rank", _i64), ("rope_dim", _i64), ("scale", _f32),
                ("q_dtype", _enum),
                ("q_nope", _ptr), ("q_nope_token_stride", _i64), ("q_nope_head_stride", _i64),
                ("q_pe", _ptr), ("q_pe_token_stride", _i64), ("q_pe_head_stride", _i64),
                ("cache", ctypes.POINTER(KvCache)), ("block_table", _ptr),
                ("block_table_cols", _i64), ("seq_lens", _ptr),
                ("out", _ptr), ("out_token_stride", _i64), ("out_head_stride", _i64),
                ("lse", _ptr), ("sched", _ptr), ("bf16_compute", ctypes.c_bool)]


class DecodeForwardArgs(_Struct):  # mla_decode_forward_args
    _fields_ = [("num_reqs", _i64), ("s_q", _i64), ("num_heads", _i64),
                ("kv_lora_rank", _i64), ("rope_dim", _i64), ("qk_nope_dim", _i64),
                ("v_head_dim", _i64), ("scale", _f32), ("dtype", _enum),
                ("q", _ptr), ("q_token_stride", _i64), ("q_head_stride", _i64),
                ("w_uk_t", _ptr), ("w_uv", _ptr), ("w_dtype", _enum),
                ("out", _ptr), ("out_token_stride", _i64), ("lse", _ptr),
                ("cache", ctypes.POINTER(KvCache)), ("block_table", _ptr),
                ("block_table_cols", _i64), ("seq_lens", _ptr), ("sched", _ptr),
                ("bf16_compute", ctypes.c_bool)]


class PrefillArgs(_Struct):  # mla_prefill_args
    _fields_ = [("num_prefills", _i64), ("num_tokens", _i64), ("num_heads", _i64),
                ("kv_lora_rank", _i64), ("rope_dim", _i64), ("qk_nope_dim", _i64),
                ("v_head_dim", _i64), ("scale", _f32), ("dtype", _enum),
                ("query_start_loc", _ptr), ("context_lens", _ptr), ("plan", _ptr),
                ("context_workspace", _ptr),
                ("cache", ctypes.POINTER(KvCache)), ("block_table", _ptr),
                ("block_table_cols", _i64),
                ("q", _ptr), ("q_token_stride", _i64), ("q_head_stride", _i64),
                ("kv_c", _ptr), ("kv_c_stride", _i64), ("k_pe", _ptr), ("k_pe_stride", _i64),
                ("kv_b_proj", _ptr), ("kv_b_proj_dtype", _enum), ("kv_b_proj_packed", _ptr),
                ("w_uk_t", _ptr), ("w_uv", _ptr), ("w_dtype", _enum),
                ("out", _ptr), ("out_token_stride", _i64), ("path", _enum)]


STRUCTS = {"mla_kv_cache": KvCache, "mla_gather_spec": GatherSpec,
           "mla_decode_args": DecodeArgs, "mla_decode_forward_args": DecodeForwardArgs,
           "mla_prefill_args": PrefillArgs}

# ---- prototypes -------------------------------------------------------------
_int = ctypes.c_int
_i64p = ctypes.POINTER(_i64)
_status = ctypes.c_int


def _proto(name, restype, *argtypes):
    fn = getattr(lib, name)
    fn.restype, fn.argtypes = restype, list(argtypes)


_proto("mla_version", ctypes.c_char_p)
_proto("mla_status_str", ctypes.c_char_p, _status)
_proto("mla_last_error", ctypes.c_char_p)
_proto("mla_last_backend", ctypes.c_char_p)
_proto("mla_concat_and_cache", _status, ctypes.POINTER(KvCache), _ptr, _i64, _ptr, _i64, _enum,
       _i64, _i64, _ptr, _i64, _int)
_proto("mla_gather_cache", _status, ctypes.POINTER(KvCache), ctypes.POINTER(GatherSpec), _ptr,
       _i64, _ptr, _enum, _i64, _int)
_proto("mla_decode_workspace_size", _status, ctypes.POINTER(DecodeArgs), _int, _i64p)
_proto("mla_decode", _status, ctypes.POINTER(DecodeArgs), _ptr, _i64, _int)
_proto("mla_prepare_weights", _status, _ptr, _enum, _i64, _i64, _i64, _i64, _ptr, _ptr, _enum,
       _int)
_proto("mla_decode_forward_workspace_size", _status, ctypes.POINTER(DecodeForwardArgs), _int,
       _i64p)
_proto("mla_decode_forward", _status, ctypes.POINTER(DecodeForwardArgs), _ptr, _i64, _int)
_proto("mla_chunk_plan_create", _status, _ptr, _ptr, _i64, _i64, _i64, _i64, _enum,
       ctypes.POINTER(_ptr))
_proto("mla_chunk_plan_destroy", None, _ptr)
_proto("mla_prefill_workspace_size", _status, ctypes.POINTER(PrefillArgs), _int, _i64p)
_proto("mla_prefill", _status, ctypes.POINTER(PrefillArgs), _ptr, _i64, _int)


def check(function, status):
    """Raises MlaError with libmla's message when status is not MLA_OK."""
    if status != MLA_OK:
        raise MlaError(function, lib.mla_status_str(status).decode(),
                       lib.mla_last_error().decode())


def call(name, *args):
    """lib.name(*args), raising MlaError on failure."""
    check(name, getattr(lib, name)(*args))


if lib.mla_version().decode().split(".")[0] != HEADER_VERSION.split(".")[0]:
    raise ImportError(f"{LIBRARY_PATH} is libmla {lib.mla_version().decode()}; this module "
                      f"mirrors mla.h {HEADER_VERSION} (another major version has another ABI)")
