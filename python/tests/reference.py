"""Plain torch references in float64 for the tests (docs/semantics.md §1.6,
§1.7, §3): no libmla, no kernels, just the definitions."""

import math

import torch


def _fp8_values(exp_bits, man_bits, has_inf):
    """The float64 value of each of the 256 bytes of an fp8 format: e4m3fn
    (no infinities, S.1111.111 is NaN) or e5m2 (IEEE-style inf and NaN)."""
    bias, values = (1 << (exp_bits - 1)) - 1, []
    for byte in range(256):
        sign = -1.0 if byte & 0x80 else 1.0
        exp, man = (byte >> man_bits) & ((1 << exp_bits) - 1), byte & ((1 << man_bits) - 1)
        top = (1 << exp_bits) - 1
        if has_inf and exp == top:
            values.append(sign * math.inf if man == 0 else math.nan)
        elif not has_inf and exp == top and man == (1 << man_bits) - 1:
            values.append(math.nan)
        elif exp == 0:
            values.append(sign * man / (1 << man_bits) * 2.0 ** (1 - bias))
        else:
            values.append(sign * (1 + man / (1 << man_bits)) * 2.0 ** (exp - bias))
    return torch.tensor(values, dtype=torch.float64)


FP8_VALUES = {"fp8_e4m3": _fp8_values(4, 3, False), "fp8_e5m2": _fp8_values(5, 2, True)}


def dequantize(kv_cache, kv_cache_dtype="auto", scale=1.0):
    """The cache as float64 values: fp8 bytes decoded and times scale."""
    if kv_cache_dtype == "auto":
        return kv_cache.double()
    return FP8_VALUES[kv_cache_dtype][kv_cache.long()] * scale


def cache_rows(cache64, block_table, request, length):
    """Positions 0 .. length-1 of a request, [length, width]."""
    pos = torch.arange(length)
    block_size = cache64.shape[1]
    return cache64[block_table[request, pos // block_size].long(), pos % block_size]


def attention(q, k, v, scale, visible):
    """softmax(scale * q k^T) v per query row, row i seeing k[:visible[i]];
    q [..., n, D], k [S, D] or [..., S, D], v likewise with width Dv; a row that
    sees nothing gets 0 and LSE -inf. Returns (out [..., n, Dv], lse [..., n])."""
    logits = scale * q @ k.transpose(-1, -2)
    hidden = torch.arange(k.shape[-2]) >= visible.unsqueeze(-1)
    logits = logits.masked_fill(hidden, -math.inf)
    lse = torch.logsumexp(logits, -1)
    weights = torch.exp(logits - lse.unsqueeze(-1)).nan_to_num(0.0)
    return weights @ v, lse


def decode(q_nope, q_pe, cache64, block_table, seq_lens, scale):
    """Latent attention of B * s_q tokens: out [T, H, L], lse [B, H, s_q]."""
    num_reqs = seq_lens.numel()
    num_tokens, num_heads, kv_lora_rank = q_nope.shape
    s_q = num_tokens // num_reqs
    q = torch.cat([q_nope.double(), q_pe.double()], -1).view(num_reqs, s_q, num_heads, -1)
    out = torch.empty(num_reqs, s_q, num_heads, kv_lora_rank, dtype=torch.float64)
    lse = torch.empty(num_reqs, num_heads, s_q, dtype=torch.float64)
    for b in range(num_reqs):
        length = int(seq_lens[b])
        rows = cache_rows(cache64, block_table, b, length)
        visible = (length - s_q + 1 + torch.arange(s_q)).clamp(min=0)
        o, l = attention(q[b].transpose(0, 1), rows, rows[:, :kv_lora_rank], scale, visible)
        out[b], lse[b] = o.transpose(0, 1), l
    return out.view(num_tokens, num_heads, kv_lora_rank), lse


def split_weights(kv_b_proj, qk_nope_head_dim, v_head_dim):
    """W_UK_T [H, P, L] and W_UV [H, L, V] of kv_b_proj [H*(P+V), L], float64 (§1.3)."""
    w = kv_b_proj.double().view(-1, qk_nope_head_dim + v_head_dim, kv_b_proj.shape[1])
    return w[:, :qk_nope_head_dim], w[:, qk_nope_head_dim:].transpose(1, 2)


def decode_forward(q, w_uk_t, w_uv, cache64, block_table, seq_lens, scale):
    """§1.6 steps 2-6 with split_weights' pair: out [T, H*V], lse [B, H, s_q]."""
    qk_nope_dim = w_uk_t.shape[1]
    q = q.double()
    ql_nope = torch.einsum("thp,hpl->thl", q[..., :qk_nope_dim], w_uk_t)
    o_lat, lse = decode(ql_nope, q[..., qk_nope_dim:], cache64, block_table, seq_lens, scale)
    return torch.einsum("thl,hlv->thv", o_lat, w_uv).reshape(q.shape[0], -1), lse


def prefill(q, w_uk_t, w_uv, cache64, block_table, query_start_loc, context_lens, scale):
    """§1.7's oracle with split_weights' pair: token i of request r (at position
    ctx_r + i) attends over positions 0 .. ctx_r + i of its cache rows,
    up-projected. out [T, H*V]."""
    num_tokens, num_heads, _ = q.shape
    qk_nope_dim, kv_lora_rank = w_uk_t.shape[1:]
    out = torch.empty(num_tokens, num_heads, w_uv.shape[2], dtype=torch.float64)
    for r in range(context_lens.numel()):
        start, end, ctx = int(query_start_loc[r]), int(query_start_loc[r + 1]), int(context_lens[r])
        rows = cache_rows(cache64, block_table, r, ctx + end - start)
        latent, k_pe = rows[:, :kv_lora_rank], rows[:, kv_lora_rank:]
        k_nope = torch.einsum("sl,hpl->hsp", latent, w_uk_t)
        k = torch.cat([k_nope, k_pe.expand(num_heads, -1, -1)], -1)
        v = torch.einsum("sl,hlv->hsv", latent, w_uv)
        visible = ctx + 1 + torch.arange(end - start)
        o, _ = attention(q[start:end].double().transpose(0, 1), k, v, scale, visible)
        out[start:end] = o.transpose(0, 1)
    return out.view(num_tokens, -1)
