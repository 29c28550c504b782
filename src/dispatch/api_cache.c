/* Public paged-cache ops (docs/semantics.md §3): check every argument and index -> pick the
 * MLA_OP_CONVERT backend -> run the driver. Nothing is written unless every
 * check passes. */
#include "dispatch.h"
#include "checks.h"
#include "trace.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/size.h"
#include "kernels/common/cache.h"


static mla_status pick_kernels(const mla_kernels **k, const char **backend)
{
    return mla_dispatch(MLA_OP_CONVERT, NULL, k, backend);
}

static mla_status concat_and_cache(const mla_kv_cache *cache, const void *kv_c, int64_t kv_c_stride,
                                   const void *k_pe, int64_t k_pe_stride, mla_dtype src_dtype,
                                   int64_t kv_lora_rank, int64_t rope_dim,
                                   const int64_t *slot_mapping, int64_t num_tokens, int threads)
{
    static const char fn[] = "mla_concat_and_cache";
    mla_kv_cache c;
    mla_status st = mla_check_cache(fn, cache, &c);
    if (st != MLA_OK)
        return st;
    if (!mla_dtype_is_float(src_dtype))
        return mla_fail(MLA_ERR_UNSUPPORTED, "%s: source dtype %s (need f32, bf16 or f16)", fn,
                        mla_dtype_name(src_dtype));
    if (kv_lora_rank < 1 || rope_dim < 0 || num_tokens < 0)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: kv_lora_rank %lld, rope_dim %lld, "
                        "num_tokens %lld (need >= 1, >= 0, >= 0)", fn, (long long)kv_lora_rank,
                        (long long)rope_dim, (long long)num_tokens);
    if (kv_lora_rank > c.width || rope_dim != c.width - kv_lora_rank)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: kv_lora_rank + rope_dim = %lld + %lld is "
                        "not the cache width %lld", fn, (long long)kv_lora_rank,
                        (long long)rope_dim, (long long)c.width);
    if ((st = mla_check_rows(fn, "kv_c", kv_c, num_tokens, kv_c_stride, kv_lora_rank, src_dtype)) ||
        (st = mla_check_rows(fn, "k_pe", k_pe, num_tokens, k_pe_stride, rope_dim, src_dtype)))
        return st;
    if (num_tokens > 0 && !slot_mapping)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: slot_mapping is NULL", fn);
    const int64_t slots = c.num_blocks * c.block_size; /* fits: check_cache bounded the span */
    for (int64_t t = 0; t < num_tokens; t++) {
        if (slot_mapping[t] >= slots)
            return mla_fail(MLA_ERR_OUT_OF_RANGE, "%s: slot_mapping[%lld] = %lld is at or past "
                            "num_blocks x block_size = %lld", fn, (long long)t,
                            (long long)slot_mapping[t], (long long)slots);
    }
    const mla_kernels *k;
    const char *backend;
    if ((st = pick_kernels(&k, &backend)) != MLA_OK)
        return st;
    mla_cache_write(k, &c, kv_c, kv_c_stride, k_pe, k_pe_stride, src_dtype, kv_lora_rank,
                    slot_mapping, num_tokens, mla_resolve_threads(threads));
    mla_note_backend(backend);
    return MLA_OK;
}

mla_status mla_concat_and_cache(const mla_kv_cache *cache, const void *kv_c, int64_t kv_c_stride,
                                const void *k_pe, int64_t k_pe_stride, mla_dtype src_dtype,
                                int64_t kv_lora_rank, int64_t rope_dim,
                                const int64_t *slot_mapping, int64_t num_tokens, int threads)
{
    if (!mla_tracing())
        return concat_and_cache(cache, kv_c, kv_c_stride, k_pe, k_pe_stride, src_dtype,
                                kv_lora_rank, rope_dim, slot_mapping, num_tokens, threads);
    double start = mla_trace_begin();
    mla_status st = concat_and_cache(cache, kv_c, kv_c_stride, k_pe, k_pe_stride, src_dtype,
                                     kv_lora_rank, rope_dim, slot_mapping, num_tokens, threads);
    mla_trace_concat_and_cache(start, st, cache, src_dtype, kv_lora_rank, rope_dim, num_tokens,
                               threads);
    return st;
}

/* What both gathers need of a spec: non-NULL arrays, sizes >= 0. */
static mla_status check_spec(const char *fn, const mla_gather_spec *spec)
{
    if (!spec)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: spec is NULL", fn);
    if (spec->num_reqs < 0 || spec->block_table_cols < 0)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: num_reqs %lld, block_table_cols %lld "
                        "(need >= 0)", fn, (long long)spec->num_reqs,
                        (long long)spec->block_table_cols);
    if (!spec->cu_seq_lens)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: cu_seq_lens is NULL", fn);
    return mla_check_block_table(fn, spec->block_table, spec->num_reqs, spec->block_table_cols);
}

/* Position pos of request r must have a block table column and a valid
 * block id there. */
static mla_status check_position(const char *fn, const mla_kv_cache *c, const mla_gather_spec *spec,
                                 int64_t r, int64_t pos)
{
    int64_t col = pos / c->block_size;
    if (col >= spec->block_table_cols)
        return mla_fail(MLA_ERR_OUT_OF_RANGE, "%s: request %lld position %lld needs block_table "
                        "column %lld, past block_table_cols %lld", fn, (long long)r,
                        (long long)pos, (long long)col, (long long)spec->block_table_cols);
    return mla_check_block_id(fn, c, spec->block_table, spec->block_table_cols, r, col);
}

static mla_status check_seq_start(const char *fn, const mla_gather_spec *spec, int64_t r,
                                  int64_t *start)
{
    *start = spec->seq_starts ? spec->seq_starts[r] : 0;
    if (*start < 0)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: seq_starts[%lld] = %lld < 0", fn,
                        (long long)r, (long long)*start);
    return MLA_OK;
}

/* Every row the gather will write: request in range, row not before its
 * request, block column and block id in range. Consecutive rows of one
 * request and block are checked once. */
static mla_status check_gather_rows(const char *fn, const mla_kv_cache *c,
                                    const mla_gather_spec *spec, const int32_t *token_to_seq,
                                    int64_t num_tokens)
{
    int64_t checked_req = -1, checked_col = -1;
    for (int64_t t = 0; t < num_tokens; t++) {
        int64_t r = token_to_seq[t];
        if (r < 0 || r >= spec->num_reqs)
            return mla_fail(MLA_ERR_OUT_OF_RANGE, "%s: token_to_seq[%lld] = %lld is outside "
                            "[0, %lld)", fn, (long long)t, (long long)r, (long long)spec->num_reqs);
        if (t >= spec->cu_seq_lens[r + 1])
            continue; /* skipped row */
        if (t < spec->cu_seq_lens[r])
            return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: row %lld maps to request %lld, which "
                            "starts at cu_seq_lens[%lld] = %d", fn, (long long)t, (long long)r,
                            (long long)r, spec->cu_seq_lens[r]);
        int64_t start;
        mla_status st = check_seq_start(fn, spec, r, &start);
        if (st != MLA_OK)
            return st;
        int64_t pos = t - spec->cu_seq_lens[r] + start, col = pos / c->block_size;
        if (r == checked_req && col == checked_col)
            continue;
        if ((st = check_position(fn, c, spec, r, pos)) != MLA_OK)
            return st;
        checked_req = r;
        checked_col = col;
    }
    return MLA_OK;
}

static mla_status gather_cache(const mla_kv_cache *cache, const mla_gather_spec *spec,
                               const int32_t *token_to_seq, int64_t num_tokens, void *dst,
                               mla_dtype dst_dtype, int64_t dst_stride, int threads)
{
    static const char fn[] = "mla_gather_cache";
    mla_kv_cache c;
    mla_status st = mla_check_cache(fn, cache, &c);
    if (st != MLA_OK || (st = check_spec(fn, spec)) != MLA_OK)
        return st;
    if (!mla_dtype_is_float(dst_dtype))
        return mla_fail(MLA_ERR_UNSUPPORTED, "%s: workspace dtype %s (need f32, bf16 or f16; "
                        "mla_cp_gather_cache copies raw fp8)", fn, mla_dtype_name(dst_dtype));
    if (num_tokens < 0)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: num_tokens %lld < 0", fn, (long long)num_tokens);
    if (num_tokens > 0 && !token_to_seq)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: token_to_seq is NULL", fn);
    if ((st = mla_check_rows(fn, "dst", dst, num_tokens, dst_stride, c.width, dst_dtype)) != MLA_OK ||
        (st = check_gather_rows(fn, &c, spec, token_to_seq, num_tokens)) != MLA_OK)
        return st;
    const mla_kernels *k;
    const char *backend;
    if ((st = pick_kernels(&k, &backend)) != MLA_OK)
        return st;
    mla_cache_gather(k, &c, spec, token_to_seq, num_tokens, dst, dst_dtype, dst_stride,
                     mla_resolve_threads(threads));
    mla_note_backend(backend);
    return MLA_OK;
}

mla_status mla_gather_cache(const mla_kv_cache *cache, const mla_gather_spec *spec,
                            const int32_t *token_to_seq, int64_t num_tokens, void *dst,
                            mla_dtype dst_dtype, int64_t dst_stride, int threads)
{
    if (!mla_tracing())
        return gather_cache(cache, spec, token_to_seq, num_tokens, dst, dst_dtype, dst_stride,
                            threads);
    double start = mla_trace_begin();
    mla_status st = gather_cache(cache, spec, token_to_seq, num_tokens, dst, dst_dtype, dst_stride,
                                 threads);
    mla_trace_gather_cache(start, st, cache, spec, num_tokens, dst_dtype, threads);
    return st;
}

/* cu_seq_lens non-decreasing from >= 0; each request's positions covered by
 * its block table row with valid ids. */
static mla_status check_cp_requests(const char *fn, const mla_kv_cache *c, const mla_gather_spec *spec)
{
    const int32_t *cu = spec->cu_seq_lens;
    if (cu[0] < 0)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: cu_seq_lens[0] = %d < 0", fn, cu[0]);
    for (int64_t b = 0; b < spec->num_reqs; b++) {
        if (cu[b + 1] < cu[b])
            return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: cu_seq_lens[%lld] = %d < "
                            "cu_seq_lens[%lld] = %d", fn, (long long)b + 1, cu[b + 1],
                            (long long)b, cu[b]);
        int64_t start, len = cu[b + 1] - cu[b];
        mla_status st = check_seq_start(fn, spec, b, &start);
        if (st != MLA_OK)
            return st;
        if (len == 0)
            continue;
        int64_t last = start + len - 1;
        /* one position per block, then the last one (its column may be past the table) */
        for (int64_t pos = start; pos <= last; pos = (pos / c->block_size + 1) * c->block_size)
            if ((st = check_position(fn, c, spec, b, pos)) != MLA_OK)
                return st;
    }
    return MLA_OK;
}

static mla_status cp_gather_cache(const mla_kv_cache *cache, const mla_gather_spec *spec, void *dst,
                                  int64_t dst_stride, int threads)
{
    static const char fn[] = "mla_cp_gather_cache";
    mla_kv_cache c;
    mla_status st = mla_check_cache(fn, cache, &c);
    if (st != MLA_OK || (st = check_spec(fn, spec)) != MLA_OK ||
        (st = check_cp_requests(fn, &c, spec)) != MLA_OK)
        return st;
    int64_t rows = spec->cu_seq_lens[spec->num_reqs];
    if ((st = mla_check_rows(fn, "dst", dst, rows, dst_stride, c.width, c.dtype)) != MLA_OK)
        return st;
    const mla_kernels *k;
    const char *backend;
    if ((st = pick_kernels(&k, &backend)) != MLA_OK)
        return st;
    mla_cache_cp_gather(k, &c, spec, dst, dst_stride, mla_resolve_threads(threads));
    mla_note_backend(backend);
    return MLA_OK;
}

mla_status mla_cp_gather_cache(const mla_kv_cache *cache, const mla_gather_spec *spec, void *dst,
                               int64_t dst_stride, int threads)
{
    if (!mla_tracing())
        return cp_gather_cache(cache, spec, dst, dst_stride, threads);
    double start = mla_trace_begin();
    mla_status st = cp_gather_cache(cache, spec, dst, dst_stride, threads);
    mla_trace_cp_gather_cache(start, st, cache, spec, threads);
    return st;
}
