"""libmla's ops on torch CPU tensors, in vLLM's layouts (docs/semantics.md).

Every tensor is used where it lies, with its own strides: nothing is copied
or made contiguous behind the caller's back. A tensor whose layout libmla
cannot take (its last dimension not dense, an index array not contiguous)
raises ValueError, and so does one whose shape does not fit the others;
what libmla itself rejects raises MlaError with libmla's message. Either
way nothing was written.

threads=None runs an op on torch.get_num_threads() threads, the count a
server sets with torch.set_num_threads(), so libmla uses the cores torch
does (a gcc build of libmla shares torch's OpenMP runtime, libgomp);
threads=0 is libmla's own default, mla_default_threads() (OpenMP's).
"""

import ctypes

import torch

from . import _capi

_FLOAT_DTYPES = {torch.float32: _capi.DTYPE_F32, torch.bfloat16: _capi.DTYPE_BF16,
                 torch.float16: _capi.DTYPE_F16}
# vLLM's kv_cache_dtype names for a uint8 cache (torch 1.13 has no float8 dtype;
# vLLM keeps fp8 caches as uint8 on every torch)
_FP8_CACHE_DTYPES = {"fp8": _capi.DTYPE_FP8_E4M3, "fp8_e4m3": _capi.DTYPE_FP8_E4M3,
                     "fp8_e5m2": _capi.DTYPE_FP8_E5M2}


class Workspace:
    """Scratch memory kept between calls: it grows to the largest size a call
    asks for and is reused after that. Pass the same one to every call of a
    thread (a Workspace must not serve two calls running at once)."""

    def __init__(self):
        self.buffer = torch.empty(0, dtype=torch.uint8)

    def take(self, nbytes):
        if self.buffer.numel() < nbytes:
            self.buffer = torch.empty(nbytes, dtype=torch.uint8)
        return self.buffer


def version():
    """The linked library's version ("0.1.0")."""
    return _capi.lib.mla_version().decode()


def last_backend():
    """The backend whose kernels ran this thread's last successful op ("avx512")."""
    return _capi.lib.mla_last_backend().decode()


# ---- argument checks --------------------------------------------------------

def _cpu(name, t):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name}: a torch.Tensor is needed, got {type(t).__name__}")
    if t.device.type != "cpu":
        raise ValueError(f"{name}: a CPU tensor is needed, got one on {t.device}")


def _float_dtype(name, t):
    if t.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"{name}: float32, bfloat16 or float16 needed, got {t.dtype}")
    return _FLOAT_DTYPES[t.dtype]


def _rows(name, t, ndim, shape=None):
    """A float tensor of ndim dims whose last one is dense; shape (None: any
    size) checked where given. Returns libmla's dtype."""
    _cpu(name, t)
    if t.dim() != ndim:
        raise ValueError(f"{name}: {ndim} dims needed, got shape {tuple(t.shape)}")
    if shape is not None and any(want is not None and got != want
                                 for got, want in zip(t.shape, shape)):
        want = tuple("*" if w is None else w for w in shape)
        raise ValueError(f"{name}: shape {want} needed, got {tuple(t.shape)}")
    if t.shape[-1] > 1 and t.stride(-1) != 1:
        raise ValueError(f"{name}: its last dimension must be dense (stride 1), "
                         f"got strides {t.stride()}")
    return _float_dtype(name, t)


def _dense(name, t, dtype, shape):
    """A contiguous tensor of dtype and shape (an int entry of None: any)."""
    _cpu(name, t)
    if t.dtype != dtype:
        raise TypeError(f"{name}: {dtype} needed, got {t.dtype}")
    if t.dim() != len(shape) or any(w is not None and g != w for g, w in zip(t.shape, shape)):
        want = tuple("*" if w is None else w for w in shape)
        raise ValueError(f"{name}: shape {want} needed, got {tuple(t.shape)}")
    if not t.is_contiguous():
        raise ValueError(f"{name}: a contiguous tensor is needed (libmla takes it as a C "
                         f"array), got strides {t.stride()}")


def _block_table(t, min_rows):
    _dense("block_table", t, torch.int32, (None, None))
    if t.shape[0] < min_rows:
        raise ValueError(f"block_table: at least {min_rows} rows needed, got {t.shape[0]}")
    return t.data_ptr(), t.shape[1]


def _cache(kv_cache, kv_cache_dtype, scale):
    """mla_kv_cache of a [num_blocks, block_size, width] tensor (any block and
    entry strides). kv_cache_dtype is vLLM's: "auto" (the tensor's dtype) or,
    for a uint8 tensor, "fp8" / "fp8_e4m3" / "fp8_e5m2"."""
    _cpu("kv_cache", kv_cache)
    if kv_cache.dim() != 3:
        raise ValueError(f"kv_cache: [num_blocks, block_size, width] needed, got shape "
                         f"{tuple(kv_cache.shape)}")
    if kv_cache.shape[2] > 1 and kv_cache.stride(2) != 1:
        raise ValueError(f"kv_cache: rows must be dense (stride 1), got strides "
                         f"{kv_cache.stride()}")
    if kv_cache_dtype == "auto":
        if kv_cache.dtype == torch.uint8:
            raise TypeError("kv_cache: a uint8 cache needs kv_cache_dtype 'fp8_e4m3' "
                            "(or 'fp8') or 'fp8_e5m2'")
        dtype = _float_dtype("kv_cache", kv_cache)
    elif kv_cache_dtype in _FP8_CACHE_DTYPES:
        if kv_cache.dtype != torch.uint8:
            raise TypeError(f"kv_cache: kv_cache_dtype {kv_cache_dtype!r} needs a uint8 "
                            f"tensor, got {kv_cache.dtype}")
        dtype = _FP8_CACHE_DTYPES[kv_cache_dtype]
    else:
        raise ValueError(f"kv_cache_dtype: 'auto', 'fp8', 'fp8_e4m3' or 'fp8_e5m2' needed, "
                         f"got {kv_cache_dtype!r}")
    num_blocks, block_size, width = kv_cache.shape
    return _capi.KvCache(data=kv_cache.data_ptr(), dtype=dtype, num_blocks=num_blocks,
                         block_size=block_size, width=width, block_stride=kv_cache.stride(0),
                         entry_stride=kv_cache.stride(1), scale=float(scale))


def _threads(threads):
    return torch.get_num_threads() if threads is None else int(threads)


def _ptr(t):
    return None if t is None else t.data_ptr()


def _run_with_workspace(op, args, workspace, threads):
    """Sizes the workspace for args (mla_<op>_workspace_size), then runs op."""
    nbytes = ctypes.c_int64()
    _capi.call(f"{op}_workspace_size", ctypes.byref(args), threads, ctypes.byref(nbytes))
    buffer = (workspace or Workspace()).take(nbytes.value)
    _capi.call(op, ctypes.byref(args), buffer.data_ptr(), buffer.numel(), threads)


def _decode_batch(q_tokens, seq_lens, block_table, lse, num_heads):
    """B, s_q and the pointers shared by decode and decode_forward."""
    _dense("seq_lens", seq_lens, torch.int32, (None,))
    num_reqs = seq_lens.numel()
    if num_reqs == 0 and q_tokens != 0 or num_reqs and q_tokens % num_reqs:
        raise ValueError(f"q: its {q_tokens} tokens must be s_q for each of the "
                         f"{num_reqs} requests of seq_lens")
    s_q = q_tokens // num_reqs if num_reqs else 1
    table, cols = _block_table(block_table, num_reqs)
    if lse is not None:
        _dense("lse", lse, torch.float32, (num_reqs, num_heads, s_q))
    return num_reqs, s_q, table, cols


# ---- cache ops (docs/semantics.md §3) ----------------------------------------

def concat_and_cache(kv_c, k_pe, kv_cache, slot_mapping, kv_cache_dtype="auto", scale=1.0,
                     *, threads=None):
    """vLLM's concat_and_cache_mla: kv_cache row slot_mapping[t] = [kv_c[t], k_pe[t]]
    for t < slot_mapping.numel(), converted to the cache dtype (fp8: x / scale,
    saturated). kv_c [T, L] and k_pe [T, R] (f32, bf16 or f16, one dtype, any row
    stride); slot_mapping int64; a negative slot skips its token."""
    _dense("slot_mapping", slot_mapping, torch.int64, (None,))
    num_tokens = slot_mapping.numel()
    src_dtype = _rows("kv_c", kv_c, 2)
    if _rows("k_pe", k_pe, 2) != src_dtype:
        raise TypeError(f"k_pe: kv_c's dtype {kv_c.dtype} needed, got {k_pe.dtype}")
    for name, t in ("kv_c", kv_c), ("k_pe", k_pe):
        if t.shape[0] < num_tokens:
            raise ValueError(f"{name}: a row for each of the {num_tokens} slots needed, "
                             f"got {t.shape[0]}")
    cache = _cache(kv_cache, kv_cache_dtype, scale)
    _capi.call("mla_concat_and_cache", ctypes.byref(cache), kv_c.data_ptr(), kv_c.stride(0),
               k_pe.data_ptr(), k_pe.stride(0), src_dtype, kv_c.shape[1], k_pe.shape[1],
               slot_mapping.data_ptr(), num_tokens, _threads(threads))


def gather_cache(kv_cache, dst, block_table, cu_seq_lens, token_to_seq, num_tokens=None,
                 kv_cache_dtype="auto", scale=1.0, seq_starts=None, *, threads=None):
    """vLLM's gather_and_maybe_dequant_cache: dst row t (t < num_tokens, default
    all of dst) = the cache row of position t - cu_seq_lens[r] + seq_starts[r] of
    request r = token_to_seq[t], converted to dst's dtype (fp8: times scale).
    block_table [B, cols], cu_seq_lens [B + 1], token_to_seq and seq_starts int32."""
    cache = _cache(kv_cache, kv_cache_dtype, scale)
    dst_dtype = _rows("dst", dst, 2, (None, cache.width))
    num_tokens = dst.shape[0] if num_tokens is None else int(num_tokens)
    if not 0 <= num_tokens <= dst.shape[0]:
        raise ValueError(f"num_tokens: 0 .. {dst.shape[0]} (dst's rows) needed, got {num_tokens}")
    _dense("cu_seq_lens", cu_seq_lens, torch.int32, (None,))
    num_reqs = cu_seq_lens.numel() - 1
    if num_reqs < 0:
        raise ValueError("cu_seq_lens: [num_reqs + 1] entries needed, got none")
    _dense("token_to_seq", token_to_seq, torch.int32, (None,))
    if token_to_seq.numel() < num_tokens:
        raise ValueError(f"token_to_seq: at least {num_tokens} entries needed, "
                         f"got {token_to_seq.numel()}")
    if seq_starts is not None:
        _dense("seq_starts", seq_starts, torch.int32, (num_reqs,))
    table, cols = _block_table(block_table, num_reqs)
    spec = _capi.GatherSpec(block_table=table, block_table_cols=cols, num_reqs=num_reqs,
                            cu_seq_lens=cu_seq_lens.data_ptr(), seq_starts=_ptr(seq_starts))
    _capi.call("mla_gather_cache", ctypes.byref(cache), ctypes.byref(spec),
               token_to_seq.data_ptr(), num_tokens, dst.data_ptr(), dst_dtype, dst.stride(0),
               _threads(threads))


# ---- decode (docs/semantics.md §1.6, §5) --------------------------------------

def decode(q_nope, q_pe, kv_cache, block_table, seq_lens, scale, *, out=None, lse=None,
           kv_cache_dtype="auto", k_scale=1.0, bf16_compute=False, workspace=None,
           threads=None):
    """Absorbed latent attention (mla_decode): q_nope, the absorbed query
    (vLLM's ql_nope) [T, H, L], and q_pe [T, H, R] (None when R = 0) with any
    token and head strides (slices of one q [T, H, L + R] will do), T = B * s_q
    tokens (query i of request b is token
    b * s_q + i, causal), over kv_cache rows of block_table [B, cols] and
    seq_lens [B] (int32, this step's tokens included). Returns out [T, H, L] in
    q's dtype (allocated unless given; any token and head strides). lse, if
    given, gets [B, H, s_q] float32 natural-log LSEs."""
    q_dtype = _rows("q_nope", q_nope, 3)
    num_tokens, num_heads, kv_lora_rank = q_nope.shape
    rope_dim = 0
    if q_pe is not None:
        if _rows("q_pe", q_pe, 3, (num_tokens, num_heads, None)) != q_dtype:
            raise TypeError(f"q_pe: q_nope's dtype {q_nope.dtype} needed, got {q_pe.dtype}")
        rope_dim = q_pe.shape[2]
    num_reqs, s_q, table, cols = _decode_batch(num_tokens, seq_lens, block_table, lse, num_heads)
    if out is None:
        out = torch.empty(num_tokens, num_heads, kv_lora_rank, dtype=q_nope.dtype)
    elif _rows("out", out, 3, (num_tokens, num_heads, kv_lora_rank)) != q_dtype:
        raise TypeError(f"out: q's dtype {q_nope.dtype} needed, got {out.dtype}")
    cache = _cache(kv_cache, kv_cache_dtype, k_scale)
    args = _capi.DecodeArgs(
        num_reqs=num_reqs, s_q=s_q, num_heads=num_heads, kv_lora_rank=kv_lora_rank,
        rope_dim=rope_dim, scale=float(scale), q_dtype=q_dtype, q_nope=q_nope.data_ptr(),
        q_nope_token_stride=q_nope.stride(0), q_nope_head_stride=q_nope.stride(1),
        q_pe=_ptr(q_pe), q_pe_token_stride=q_pe.stride(0) if rope_dim else 0,
        q_pe_head_stride=q_pe.stride(1) if rope_dim else 0, cache=ctypes.pointer(cache),
        block_table=table, block_table_cols=cols, seq_lens=seq_lens.data_ptr(),
        out=out.data_ptr(), out_token_stride=out.stride(0), out_head_stride=out.stride(1),
        lse=_ptr(lse), bf16_compute=bf16_compute)
    _run_with_workspace("mla_decode", args, workspace, _threads(threads))
    return out


def prepare_weights(kv_b_proj, qk_nope_head_dim, v_head_dim, w_dtype=None, *, threads=None):
    """kv_b_proj.weight [H * (P + V), L] (contiguous, f32, bf16 or f16) ->
    (w_uk_t [H, P, L], w_uv [H, L, V]), the absorbed decode's weights (and the
    prefill's absorbed path's), in w_dtype: torch.float32 or torch.bfloat16
    (None: bfloat16 for a bfloat16 kv_b_proj, else float32)."""
    src_dtype = _rows("kv_b_proj", kv_b_proj, 2)
    rows, kv_lora_rank = kv_b_proj.shape
    head_rows = qk_nope_head_dim + v_head_dim
    if qk_nope_head_dim < 1 or v_head_dim < 1 or rows % head_rows:
        raise ValueError(f"kv_b_proj: H * ({qk_nope_head_dim} + {v_head_dim}) rows needed, "
                         f"got {rows}")
    _dense("kv_b_proj", kv_b_proj, kv_b_proj.dtype, (rows, kv_lora_rank))
    if w_dtype is None:
        w_dtype = torch.bfloat16 if kv_b_proj.dtype == torch.bfloat16 else torch.float32
    num_heads = rows // head_rows
    w_uk_t = torch.empty(num_heads, qk_nope_head_dim, kv_lora_rank, dtype=w_dtype)
    w_uv = torch.empty(num_heads, kv_lora_rank, v_head_dim, dtype=w_dtype)
    _capi.call("mla_prepare_weights", kv_b_proj.data_ptr(), src_dtype, num_heads, kv_lora_rank,
               qk_nope_head_dim, v_head_dim, w_uk_t.data_ptr(), w_uv.data_ptr(),
               _float_dtype("w_dtype", w_uk_t), _threads(threads))
    return w_uk_t, w_uv


def _absorbed_weights(w_uk_t, w_uv):
    """(H, P, L, V, libmla dtype) of prepare_weights' pair, checked against each other."""
    _cpu("w_uk_t", w_uk_t)
    if w_uk_t.dim() != 3:
        raise ValueError(f"w_uk_t: [H, P, L] needed, got shape {tuple(w_uk_t.shape)}")
    num_heads, qk_nope_dim, kv_lora_rank = w_uk_t.shape
    _dense("w_uk_t", w_uk_t, w_uk_t.dtype, w_uk_t.shape)
    _dense("w_uv", w_uv, w_uk_t.dtype, (num_heads, kv_lora_rank, None))
    return num_heads, qk_nope_dim, kv_lora_rank, w_uv.shape[2], _float_dtype("w_uk_t", w_uk_t)


def decode_forward(q, w_uk_t, w_uv, kv_cache, block_table, seq_lens, scale, *, out=None,
                   lse=None, kv_cache_dtype="auto", k_scale=1.0, bf16_compute=False,
                   workspace=None, threads=None):
    """The absorbed decode forward (mla_decode_forward): q [T, H, P + R] (any
    token and head strides) -> out [T, H * V] in q's dtype: q_nope absorbed
    through w_uk_t, latent attention as decode() runs it, then w_uv (the pair
    from prepare_weights). Batch, cache, lse and options as decode()."""
    dtype = _rows("q", q, 3)
    num_heads, qk_nope_dim, kv_lora_rank, v_head_dim, w_dtype = _absorbed_weights(w_uk_t, w_uv)
    num_tokens = q.shape[0]
    if q.shape[1] != num_heads or q.shape[2] < qk_nope_dim:
        raise ValueError(f"q: [T, {num_heads}, {qk_nope_dim} + R] needed (the weights' heads "
                         f"and P), got shape {tuple(q.shape)}")
    num_reqs, s_q, table, cols = _decode_batch(num_tokens, seq_lens, block_table, lse, num_heads)
    out = _merged_heads_out(out, num_tokens, num_heads * v_head_dim, q.dtype)
    cache = _cache(kv_cache, kv_cache_dtype, k_scale)
    args = _capi.DecodeForwardArgs(
        num_reqs=num_reqs, s_q=s_q, num_heads=num_heads, kv_lora_rank=kv_lora_rank,
        rope_dim=q.shape[2] - qk_nope_dim, qk_nope_dim=qk_nope_dim, v_head_dim=v_head_dim,
        scale=float(scale), dtype=dtype, q=q.data_ptr(), q_token_stride=q.stride(0),
        q_head_stride=q.stride(1), w_uk_t=w_uk_t.data_ptr(), w_uv=w_uv.data_ptr(),
        w_dtype=w_dtype, out=out.data_ptr(), out_token_stride=out.stride(0), lse=_ptr(lse),
        cache=ctypes.pointer(cache), block_table=table, block_table_cols=cols,
        seq_lens=seq_lens.data_ptr(), bf16_compute=bf16_compute)
    _run_with_workspace("mla_decode_forward", args, workspace, _threads(threads))
    return out


def _merged_heads_out(out, num_tokens, width, dtype):
    """out [T, H * V] (any token stride), allocated when None."""
    if out is None:
        return torch.empty(num_tokens, width, dtype=dtype)
    if _rows("out", out, 2, (num_tokens, width)) != _FLOAT_DTYPES[dtype]:
        raise TypeError(f"out: q's dtype {dtype} needed, got {out.dtype}")
    return out


# ---- prefill (docs/semantics.md §1.7) ------------------------------------------

def prefill(q, kv_c, k_pe, kv_cache, block_table, query_start_loc, context_lens, scale, *,
            kv_b_proj=None, w_uk_t=None, w_uv=None, path="auto", out=None,
            kv_cache_dtype="auto", k_scale=1.0, context_chunk_tokens=None, workspace=None,
            threads=None):
    """The prefill requests of a step (mla_prefill), those with cached context
    first: request r has new tokens query_start_loc[r] .. query_start_loc[r+1]
    of q [T, H, P + R] (any strides), kv_c [T, L] and k_pe [T, R] (their latent
    rows, already written to kv_cache by concat_and_cache), after context_lens[r]
    cached tokens; block_table [num_prefills, cols]; index arrays int32. Token t
    sees its context and its new tokens up to itself. Returns out [T, H * V] in
    q's dtype.

    path "mha" up-projects context and new tokens through kv_b_proj
    [H * (P + V), L] (contiguous); "absorbed" attends in latent space with
    prepare_weights' (w_uk_t, w_uv); "auto" picks per request, and needs both.
    The MHA path gathers the context in chunks of context_chunk_tokens rows
    (vLLM's chunked-prefill workspace; None: the whole context at once)."""
    dtype = _rows("q", q, 3)
    num_tokens, num_heads, qk_dim = q.shape
    for name, t in ("kv_c", kv_c), ("k_pe", k_pe):
        if _rows(name, t, 2, (num_tokens, None)) != dtype:
            raise TypeError(f"{name}: q's dtype {q.dtype} needed, got {t.dtype}")
    kv_lora_rank, rope_dim = kv_c.shape[1], k_pe.shape[1]
    qk_nope_dim = qk_dim - rope_dim
    _dense("context_lens", context_lens, torch.int32, (None,))
    num_prefills = context_lens.numel()
    _dense("query_start_loc", query_start_loc, torch.int32, (num_prefills + 1,))
    table, cols = _block_table(block_table, num_prefills)
    if path not in _capi.PREFILL_PATHS:
        raise ValueError(f"path: one of {', '.join(_capi.PREFILL_PATHS)} needed, got {path!r}")
    v_head_dim, kv_b_proj_dtype, w_dtype = _prefill_weights(kv_b_proj, w_uk_t, w_uv, num_heads,
                                                            qk_nope_dim, kv_lora_rank)
    out = _merged_heads_out(out, num_tokens, num_heads * v_head_dim, q.dtype)
    cache = _cache(kv_cache, kv_cache_dtype, k_scale)
    args = _capi.PrefillArgs(
        num_prefills=num_prefills, num_tokens=num_tokens, num_heads=num_heads,
        kv_lora_rank=kv_lora_rank, rope_dim=rope_dim, qk_nope_dim=qk_nope_dim,
        v_head_dim=v_head_dim, scale=float(scale), dtype=dtype,
        query_start_loc=query_start_loc.data_ptr(), context_lens=context_lens.data_ptr(),
        cache=ctypes.pointer(cache), block_table=table, block_table_cols=cols,
        q=q.data_ptr(), q_token_stride=q.stride(0), q_head_stride=q.stride(1),
        kv_c=kv_c.data_ptr(), kv_c_stride=kv_c.stride(0), k_pe=k_pe.data_ptr(),
        k_pe_stride=k_pe.stride(0), kv_b_proj=_ptr(kv_b_proj), kv_b_proj_dtype=kv_b_proj_dtype,
        w_uk_t=_ptr(w_uk_t), w_uv=_ptr(w_uv), w_dtype=w_dtype, out=out.data_ptr(),
        out_token_stride=out.stride(0), path=_capi.PREFILL_PATHS[path])
    plan = _chunk_plan(context_lens, query_start_loc, path, context_chunk_tokens, cache, dtype)
    try:
        args.plan = plan
        _run_with_workspace("mla_prefill", args, workspace, _threads(threads))
    finally:
        _capi.lib.mla_chunk_plan_destroy(plan)
    return out


def _prefill_weights(kv_b_proj, w_uk_t, w_uv, num_heads, qk_nope_dim, kv_lora_rank):
    """V and the weights' dtypes (kv_b_proj's, w_uk_t's) of the prefill, each
    path's weights checked against q's shapes."""
    v_head_dims, kv_b_proj_dtype, w_dtype = set(), _capi.DTYPE_F32, _capi.DTYPE_F32
    if kv_b_proj is not None:
        kv_b_proj_dtype = _rows("kv_b_proj", kv_b_proj, 2)
        rows = kv_b_proj.shape[0]
        if rows % num_heads or rows // num_heads <= qk_nope_dim:
            raise ValueError(f"kv_b_proj: {num_heads} * ({qk_nope_dim} + V) rows needed, "
                             f"got {rows}")
        v_head_dims.add(rows // num_heads - qk_nope_dim)
        _dense("kv_b_proj", kv_b_proj, kv_b_proj.dtype, (rows, kv_lora_rank))
    if w_uk_t is not None or w_uv is not None:
        if w_uk_t is None or w_uv is None:
            raise ValueError("w_uk_t and w_uv: both needed (prepare_weights gives the pair)")
        heads, p, l, v, w_dtype = _absorbed_weights(w_uk_t, w_uv)
        if (heads, p, l) != (num_heads, qk_nope_dim, kv_lora_rank):
            raise ValueError(f"w_uk_t: [{num_heads}, {qk_nope_dim}, {kv_lora_rank}] needed "
                             f"(q's heads and P, kv_c's L), got {tuple(w_uk_t.shape)}")
        v_head_dims.add(v)
    if len(v_head_dims) != 1:
        raise ValueError("kv_b_proj or (w_uk_t, w_uv) needed, with one V between them"
                         if v_head_dims else "kv_b_proj or (w_uk_t, w_uv) needed")
    return v_head_dims.pop(), kv_b_proj_dtype, w_dtype


def _chunk_plan(context_lens, query_start_loc, path, chunk_tokens, cache, dtype):
    """The MHA path's context-chunk plan (owning its [W, L + R] workspace in q's
    dtype), or None where no request has context or none takes that path."""
    with_context = context_lens[context_lens > 0]
    if path == "absorbed" or with_context.numel() == 0:
        return None
    if chunk_tokens is None:  # one chunk: every request's context, whole blocks
        blocks = (int(with_context.max()) + cache.block_size - 1) // cache.block_size
        chunk_tokens = with_context.numel() * blocks * cache.block_size
    plan = ctypes.c_void_p()
    _capi.call("mla_chunk_plan_create", context_lens.data_ptr(), query_start_loc.data_ptr(),
               context_lens.numel(), chunk_tokens, cache.block_size, cache.width, dtype,
               ctypes.byref(plan))
    return plan
