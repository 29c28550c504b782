#include "cache.h"

#include "core/parallel.h"
#include "core/policy.h"
#include "elementwise.h"

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

/* A parallel cache write: each of `parts` tasks writes a slice of the tokens. */
typedef struct cache_write {
    const mla_kernels *k;
    const mla_kv_cache *cache;
    const void *kv_c, *k_pe;
    int64_t kv_c_stride, k_pe_stride, kv_lora_rank, num_tokens, parts;
    mla_dtype src_dtype;
    const int64_t *slot_mapping;
} cache_write;

static void write_rows(int64_t part, void *ctx)
{
    const cache_write *w = ctx;
    const mla_kv_cache *cache = w->cache;
    const int64_t L = w->kv_lora_rank, R = cache->width - L;
    const int64_t src_size = mla_dtype_size(w->src_dtype), cache_size = mla_dtype_size(cache->dtype);
    int64_t lo, hi;
    mla_part_range(w->num_tokens, w->parts, part, &lo, &hi);
    for (int64_t t = lo; t < hi; t++) {
        int64_t slot = w->slot_mapping[t];
        if (slot < 0)
            continue;
        char *row = cache_row(cache, cache_size, slot / cache->block_size, slot % cache->block_size);
        stream_row(w->k, row, cache->dtype, (const char *)w->kv_c + t * w->kv_c_stride * src_size,
                   w->src_dtype, L, cache->scale);
        if (R > 0)
            stream_row(w->k, row + L * cache_size, cache->dtype,
                       (const char *)w->k_pe + t * w->k_pe_stride * src_size, w->src_dtype, R,
                       cache->scale);
    }
    w->k->store_fence(); /* the rows are visible once the op returns */
}

void mla_cache_write(const mla_kernels *k, const mla_kv_cache *cache, const void *kv_c,
                     int64_t kv_c_stride, const void *k_pe, int64_t k_pe_stride,
                     mla_dtype src_dtype, int64_t kv_lora_rank, const int64_t *slot_mapping,
                     int64_t num_tokens, int threads)
{
    cache_write w = {.k = k, .cache = cache, .kv_c = kv_c, .k_pe = k_pe, .kv_c_stride = kv_c_stride,
                     .k_pe_stride = k_pe_stride, .kv_lora_rank = kv_lora_rank,
                     .num_tokens = num_tokens, .src_dtype = src_dtype, .slot_mapping = slot_mapping,
                     .parts = mla_team_size(num_tokens, MLA_FORK_MIN_ROWS, threads)};
    mla_parallel_for(w.parts, w.parts, write_rows, &w);
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
    /* offsets of rows that exist: a stride alone, in bytes, may not fit
     * int64_t (one row of dst or of a block has any stride) */
    const int64_t src_size = mla_dtype_size(cache->dtype), dst_size = mla_dtype_size(dst_dtype);
    for (int64_t i = 0; i < rows; i++)
        mla_convert_run(k, dst + i * dst_stride * dst_size, dst_dtype,
                        src + i * cache->entry_stride * src_size, cache->dtype, width, cache->scale);
}

/* A parallel gather: each of `parts` tasks gathers a slice of dst's rows. */
typedef struct cache_gather {
    const mla_kernels *k;
    const mla_kv_cache *cache;
    const mla_gather_spec *spec;
    const int32_t *token_to_seq;
    int64_t num_tokens, dst_stride, parts;
    void *dst;
    mla_dtype dst_dtype;
} cache_gather;

static void gather_rows(int64_t part, void *ctx)
{
    const cache_gather *g = ctx;
    const mla_kv_cache *cache = g->cache;
    const mla_gather_spec *spec = g->spec;
    const int32_t *token_to_seq = g->token_to_seq;
    const int64_t bs = cache->block_size, cache_size = mla_dtype_size(cache->dtype);
    const int64_t dst_size = mla_dtype_size(g->dst_dtype);
    int64_t t, end;
    mla_part_range(g->num_tokens, g->parts, part, &t, &end);
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
        copy_rows(g->k, cache, cache_row(cache, cache_size, blk, off),
                  (char *)g->dst + t * g->dst_stride * dst_size, g->dst_dtype, g->dst_stride, rows);
        t += rows;
    }
}

void mla_cache_gather(const mla_kernels *k, const mla_kv_cache *cache, const mla_gather_spec *spec,
                      const int32_t *token_to_seq, int64_t num_tokens, void *dst,
                      mla_dtype dst_dtype, int64_t dst_stride, int threads)
{
    cache_gather g = {.k = k, .cache = cache, .spec = spec, .token_to_seq = token_to_seq,
                      .num_tokens = num_tokens, .dst_stride = dst_stride, .dst = dst,
                      .dst_dtype = dst_dtype,
                      .parts = mla_team_size(num_tokens, MLA_FORK_MIN_ROWS, threads)};
    mla_parallel_for(g.parts, g.parts, gather_rows, &g);
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

/* A parallel raw gather: each of `parts` tasks copies a slice of the rows
 * cu_seq_lens[0] .. cu_seq_lens[num_reqs]. */
typedef struct cache_cp_gather {
    const mla_kernels *k;
    const mla_kv_cache *cache;
    const mla_gather_spec *spec;
    void *dst;
    int64_t dst_stride, parts;
} cache_cp_gather;

static void cp_gather_rows(int64_t part, void *ctx)
{
    const cache_cp_gather *g = ctx;
    const mla_kv_cache *cache = g->cache;
    const mla_gather_spec *spec = g->spec;
    const int32_t *cu = spec->cu_seq_lens;
    const int64_t bs = cache->block_size, elem_size = mla_dtype_size(cache->dtype);
    int64_t row, end;
    mla_part_range(cu[spec->num_reqs] - cu[0], g->parts, part, &row, &end);
    row += cu[0];
    end += cu[0];
    for (int64_t b = row < end ? request_of_row(cu, spec->num_reqs, row) : 0; row < end; b++) {
        const int32_t *blocks = spec->block_table + b * spec->block_table_cols;
        int64_t start = spec->seq_starts ? spec->seq_starts[b] : 0;
        int64_t req_end = cu[b + 1] < end ? cu[b + 1] : end;
        while (row < req_end) {
            int64_t pos = start + row - cu[b], off = pos % bs;
            int64_t rows = bs - off < req_end - row ? bs - off : req_end - row;
            copy_rows(g->k, cache, cache_row(cache, elem_size, blocks[pos / bs], off),
                      (char *)g->dst + row * g->dst_stride * elem_size, cache->dtype, g->dst_stride,
                      rows);
            row += rows;
        }
    }
}

void mla_cache_cp_gather(const mla_kernels *k, const mla_kv_cache *cache,
                         const mla_gather_spec *spec, void *dst, int64_t dst_stride, int threads)
{
    const int64_t rows = spec->cu_seq_lens[spec->num_reqs] - spec->cu_seq_lens[0];
    cache_cp_gather g = {.k = k, .cache = cache, .spec = spec, .dst = dst, .dst_stride = dst_stride,
                         .parts = mla_team_size(rows, MLA_FORK_MIN_ROWS, threads)};
    mla_parallel_for(g.parts, g.parts, cp_gather_rows, &g);
}
