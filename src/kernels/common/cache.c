#include "cache.h"

#include "core/policy.h"
#include "elementwise.h"

#include <omp.h>
#include <string.h>

/* Byte address of cache row (blk, off). */
static inline char *cache_row(const mla_kv_cache *c, int64_t elem_size, int64_t blk, int64_t off)
{
    return (char *)c->data + (blk * c->block_stride + off * c->entry_stride) * elem_size;
}

/* Puts n elements of src_dtype into a cache row of dst_dtype: converted in
 * L1 first if the dtypes differ, then streamed to the row, whose lines are
 * not read first (a large write would otherwise read as much as it writes). */
static void stream_row(const mla_kernels *k, void *row, mla_dtype dst_dtype, const void *src,
                       mla_dtype src_dtype, int64_t n, float scale)
{
    if (dst_dtype == src_dtype) {
        k->copy_stream(row, src, n * mla_dtype_size(dst_dtype));
        return;
    }
    _Alignas(64) float stage[MLA_CONVERT_STAGE]; /* MLA_CONVERT_STAGE f32s hold MLA_CONVERT_STAGE elements of any dtype */
    int64_t src_size = mla_dtype_size(src_dtype), dst_size = mla_dtype_size(dst_dtype);
    for (int64_t i = 0; i < n; i += MLA_CONVERT_STAGE) {
        int64_t m = n - i < MLA_CONVERT_STAGE ? n - i : MLA_CONVERT_STAGE;
        mla_convert_run(k, stage, dst_dtype, (const char *)src + i * src_size, src_dtype, m, scale);
        k->copy_stream((char *)row + i * dst_size, stage, m * dst_size);
    }
}

void mla_cache_write(const mla_kernels *k, const mla_kv_cache *cache, const void *kv_c,
                     int64_t kv_c_stride, const void *k_pe, int64_t k_pe_stride,
                     mla_dtype src_dtype, int64_t kv_lora_rank, const int64_t *slot_mapping,
                     int64_t num_tokens, int threads)
{
    const int64_t L = kv_lora_rank, R = cache->width - L;
    const int64_t src_size = mla_dtype_size(src_dtype), cache_size = mla_dtype_size(cache->dtype);
#pragma omp parallel num_threads(mla_team_size(num_tokens, MLA_FORK_MIN_ROWS, threads))
    {
#pragma omp for schedule(static)
        for (int64_t t = 0; t < num_tokens; t++) {
            int64_t slot = slot_mapping[t];
            if (slot < 0)
                continue;
            char *row = cache_row(cache, cache_size, slot / cache->block_size, slot % cache->block_size);
            stream_row(k, row, cache->dtype, (const char *)kv_c + t * kv_c_stride * src_size,
                       src_dtype, L, cache->scale);
            if (R > 0)
                stream_row(k, row + L * cache_size, cache->dtype,
                           (const char *)k_pe + t * k_pe_stride * src_size, src_dtype, R, cache->scale);
        }
        k->store_fence(); /* the rows are visible once the op returns */
    }
}

/* Splits rows [begin, end) into `parts` contiguous slices; slice i. */
static void slice(int64_t begin, int64_t end, int parts, int i, int64_t *lo, int64_t *hi)
{
    int64_t n = end - begin;
    *lo = begin + n * i / parts;
    *hi = begin + n * (i + 1) / parts;
}

/* Copies/converts `rows` consecutive positions of one block into consecutive
 * dst rows: one call when both sides are dense, else row by row. */
static void copy_rows(const mla_kernels *k, const mla_kv_cache *cache, const char *src, char *dst,
                      mla_dtype dst_dtype, int64_t dst_stride, int64_t rows)
{
    int64_t width = cache->width;
    if (cache->entry_stride == width && dst_stride == width) {
        mla_convert_run(k, dst, dst_dtype, src, cache->dtype, rows * width, cache->scale);
        return;
    }
    int64_t src_step = cache->entry_stride * mla_dtype_size(cache->dtype);
    int64_t dst_step = dst_stride * mla_dtype_size(dst_dtype);
    for (int64_t i = 0; i < rows; i++)
        mla_convert_run(k, dst + i * dst_step, dst_dtype, src + i * src_step, cache->dtype, width,
                        cache->scale);
}

void mla_cache_gather(const mla_kernels *k, const mla_kv_cache *cache, const mla_gather_spec *spec,
                      const int32_t *token_to_seq, int64_t num_tokens, void *dst,
                      mla_dtype dst_dtype, int64_t dst_stride, int threads)
{
    const int64_t bs = cache->block_size, cache_size = mla_dtype_size(cache->dtype);
    const int64_t dst_row = dst_stride * mla_dtype_size(dst_dtype);
    int team = mla_team_size(num_tokens, MLA_FORK_MIN_ROWS, threads);
#pragma omp parallel for num_threads(team) schedule(static)
    for (int part = 0; part < team; part++) {
        int64_t t, end;
        slice(0, num_tokens, team, part, &t, &end);
        while (t < end) {
            int32_t r = token_to_seq[t];
            int64_t seq_end = spec->cu_seq_lens[r + 1];
            if (t >= seq_end) { /* past its request: skipped, as in vLLM */
                t++;
                continue;
            }
            int64_t pos = t - spec->cu_seq_lens[r] + (spec->seq_starts ? spec->seq_starts[r] : 0);
            int64_t off = pos % bs, blk = spec->block_table[r * spec->block_table_cols + pos / bs];
            /* the run of rows that stay in this block and this request */
            int64_t limit = end - t;
            limit = limit < bs - off ? limit : bs - off;
            limit = limit < seq_end - t ? limit : seq_end - t;
            int64_t rows = 1;
            while (rows < limit && token_to_seq[t + rows] == r)
                rows++;
            copy_rows(k, cache, cache_row(cache, cache_size, blk, off), (char *)dst + t * dst_row,
                      dst_dtype, dst_stride, rows);
            t += rows;
        }
    }
}

/* The request owning row `row`: the last b with cu_seq_lens[b] <= row. */
static int64_t request_of_row(const int32_t *cu_seq_lens, int64_t num_reqs, int64_t row)
{
    int64_t lo = 0, hi = num_reqs; /* answer in [lo, hi) */
    while (hi - lo > 1) {
        int64_t mid = (lo + hi) / 2;
        if (cu_seq_lens[mid] <= row)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

void mla_cache_cp_gather(const mla_kernels *k, const mla_kv_cache *cache,
                         const mla_gather_spec *spec, void *dst, int64_t dst_stride, int threads)
{
    const int32_t *cu = spec->cu_seq_lens;
    const int64_t bs = cache->block_size, elem_size = mla_dtype_size(cache->dtype);
    const int64_t first = cu[0], last = cu[spec->num_reqs];
    int team = mla_team_size(last - first, MLA_FORK_MIN_ROWS, threads);
#pragma omp parallel for num_threads(team) schedule(static)
    for (int part = 0; part < team; part++) {
        int64_t row, end;
        slice(first, last, team, part, &row, &end);
        for (int64_t b = row < end ? request_of_row(cu, spec->num_reqs, row) : 0; row < end; b++) {
            const int32_t *blocks = spec->block_table + b * spec->block_table_cols;
            int64_t start = spec->seq_starts ? spec->seq_starts[b] : 0;
            int64_t req_end = cu[b + 1] < end ? cu[b + 1] : end;
            while (row < req_end) {
                int64_t pos = start + row - cu[b], off = pos % bs;
                int64_t rows = bs - off < req_end - row ? bs - off : req_end - row;
                copy_rows(k, cache, cache_row(cache, elem_size, blocks[pos / bs], off),
                          (char *)dst + row * dst_stride * elem_size, cache->dtype, dst_stride, rows);
                row += rows;
            }
        }
    }
}
