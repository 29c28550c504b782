/* Argument checks shared by the public entry points: each returns MLA_OK or
 * records a message naming the function and the argument (error.h). */
#include "checks.h"

#include "core/dtype.h"
#include "core/error.h"
#include "core/size.h"
#include "dispatch.h"

#include <omp.h>

/* A row-major operand of `rows` rows: non-NULL when it has rows, a stride of
 * at least `width`, a span that fits int64_t. */
mla_status mla_check_rows(const char *fn, const char *what, const void *p, int64_t rows,
                          int64_t stride, int64_t width, mla_dtype dtype)
{
    int64_t bytes;
    if (rows > 0 && width > 0 && !p)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, what);
    if (stride < width)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: %s row stride %lld < row width %lld", fn,
                        what, (long long)stride, (long long)width);
    if (!mla_span_bytes(rows, stride, width, mla_dtype_size(dtype), &bytes))
        return mla_fail(MLA_ERR_OVERFLOW, "%s: %s of %lld rows x stride %lld overflows", fn, what,
                        (long long)rows, (long long)stride);
    return MLA_OK;
}

/* Checks the cache and resolves its zero (dense) strides into *out. */
mla_status mla_check_cache(const char *fn, const mla_kv_cache *cache, mla_kv_cache *out)
{
    if (!cache || !cache->data)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: cache%s is NULL", fn, cache ? " data" : "");
    mla_kv_cache c = *cache;
    if ((unsigned)c.dtype >= MLA_DTYPE_COUNT)
        return mla_fail(MLA_ERR_UNSUPPORTED, "%s: cache dtype %d is not an mla_dtype", fn, (int)c.dtype);
    if (c.num_blocks < 0 || c.block_size < 1 || c.width < 1)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: cache num_blocks %lld, block_size %lld, "
                        "width %lld (need >= 0, >= 1, >= 1)", fn, (long long)c.num_blocks,
                        (long long)c.block_size, (long long)c.width);
    if (c.entry_stride == 0)
        c.entry_stride = c.width;
    if (c.block_stride == 0 && __builtin_mul_overflow(c.block_size, c.entry_stride, &c.block_stride))
        return mla_fail(MLA_ERR_OVERFLOW, "%s: cache block_size x entry_stride overflows", fn);
    int64_t block_span, bytes;
    if (!mla_span_bytes(c.block_size, c.entry_stride, c.width, 1, &block_span) ||
        !mla_span_bytes(c.num_blocks, c.block_stride, block_span, mla_dtype_size(c.dtype), &bytes))
        return mla_fail(MLA_ERR_OVERFLOW, "%s: cache of %lld blocks x stride %lld overflows", fn,
                        (long long)c.num_blocks, (long long)c.block_stride);
    if (c.entry_stride < c.width || (c.num_blocks > 1 && c.block_stride < block_span))
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: cache rows overlap (entry_stride %lld, "
                        "block_stride %lld for width %lld, block_size %lld)", fn,
                        (long long)c.entry_stride, (long long)c.block_stride, (long long)c.width,
                        (long long)c.block_size);
    if (mla_dtype_is_fp8(c.dtype) && !mla_fp8_scale_ok(c.scale))
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: %s cache scale %g is not finite and > 0", fn,
                        mla_dtype_name(c.dtype), (double)c.scale);
    *out = c;
    return MLA_OK;
}

mla_status mla_check_block_table(const char *fn, const int32_t *block_table, int64_t rows,
                                 int64_t cols)
{
    int64_t cells;
    if (cols < 0)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: block_table has negative cols %lld", fn,
                        (long long)cols);
    if (!mla_mul_size(rows, cols, &cells))
        return mla_fail(MLA_ERR_OVERFLOW, "%s: block_table of %lld x %lld overflows", fn,
                        (long long)rows, (long long)cols);
    if (cells > 0 && !block_table)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: block_table is NULL", fn);
    return MLA_OK;
}

mla_status mla_check_block_id(const char *fn, const mla_kv_cache *cache, const int32_t *block_table,
                              int64_t cols, int64_t row, int64_t col)
{
    int32_t blk = block_table[row * cols + col];
    if (blk < 0 || blk >= cache->num_blocks)
        return mla_fail(MLA_ERR_OUT_OF_RANGE, "%s: block_table[%lld][%lld] = %d is outside [0, %lld)",
                        fn, (long long)row, (long long)col, blk, (long long)cache->num_blocks);
    return MLA_OK;
}

mla_status mla_check_request_blocks(const char *fn, const mla_kv_cache *cache,
                                    const int32_t *block_table, int64_t cols, int64_t row,
                                    const char *len_name, int64_t len)
{
    const int64_t blocks = mla_ceil_div(len, cache->block_size);
    if (blocks > cols)
        return mla_fail(MLA_ERR_OUT_OF_RANGE, "%s: %s[%lld] = %lld needs %lld blocks of %lld, past "
                        "block_table_cols %lld", fn, len_name, (long long)row, (long long)len,
                        (long long)blocks, (long long)cache->block_size, (long long)cols);
    for (int64_t col = 0; col < blocks; col++) {
        mla_status st = mla_check_block_id(fn, cache, block_table, cols, row, col);
        if (st != MLA_OK)
            return st;
    }
    return MLA_OK;
}

/* OpenMP starts every thread a region asks for, and libgomp exits the
 * process when it cannot (threads = INT_MAX: "out of memory"; tens of
 * thousands: thread creation fails or a stack overflows). Past what OpenMP
 * runs by default, the processors and MLA_THREAD_CAP_MIN, more threads
 * gain nothing: the count is cut there. */
int mla_resolve_threads(int threads)
{
    const int usual = mla_default_threads();
    if (threads <= 0)
        return usual;
    if (threads <= usual || threads <= MLA_THREAD_CAP_MIN)
        return threads;
    const int procs = omp_get_num_procs();
    int cap = usual > procs ? usual : procs;
    cap = cap > MLA_THREAD_CAP_MIN ? cap : MLA_THREAD_CAP_MIN;
    return threads < cap ? threads : cap;
}

/* A [tokens, heads, width] view with token and head strides: strides >= 0,
 * the span fits int64_t; when `rows_disjoint`, no two (token, head) rows
 * overlap (heads inside tokens, or tokens inside heads). */
mla_status mla_check_view(const char *fn, const char *what, const void *p, int64_t tokens,
                             int64_t heads, int64_t width, int64_t token_stride, int64_t head_stride,
                             mla_dtype dtype, bool rows_disjoint)
{
    if (tokens == 0 || width == 0)
        return MLA_OK;
    if (!p)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: %s is NULL", fn, what);
    if (token_stride < 0 || head_stride < 0)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: %s strides %lld, %lld are negative", fn,
                        what, (long long)token_stride, (long long)head_stride);
    int64_t last, span;
    if (__builtin_mul_overflow(tokens - 1, token_stride, &last) ||
        __builtin_mul_overflow(heads - 1, head_stride, &span) ||
        __builtin_add_overflow(last, span, &last) || __builtin_add_overflow(last, width, &last) ||
        !mla_mul_size(last, mla_dtype_size(dtype), &span))
        return mla_fail(MLA_ERR_OVERFLOW, "%s: %s of %lld tokens x %lld heads overflows", fn, what,
                        (long long)tokens, (long long)heads);
    if (!rows_disjoint)
        return MLA_OK;
    bool heads_inside = (heads == 1 || head_stride >= width) &&
                        (tokens == 1 || token_stride >= (heads - 1) * head_stride + width);
    bool tokens_inside = (tokens == 1 || token_stride >= width) &&
                         (heads == 1 || head_stride >= (tokens - 1) * token_stride + width);
    if (!heads_inside && !tokens_inside)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: %s rows overlap (token stride %lld, head "
                        "stride %lld, width %lld)", fn, what, (long long)token_stride,
                        (long long)head_stride, (long long)width);
    return MLA_OK;
}

mla_status mla_check_workspace(const char *fn, const void *workspace, int64_t bytes, int64_t need)
{
    if (!workspace)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: workspace is NULL", fn);
    if (bytes < need)
        return mla_fail(MLA_ERR_CAPACITY, "%s: workspace of %lld bytes, need %lld (its "
                        "*_workspace_size query)", fn, (long long)bytes, (long long)need);
    return MLA_OK;
}

mla_span mla_view_span(const void *p, int64_t tokens, int64_t heads, int64_t width,
                       int64_t token_stride, int64_t head_stride, mla_dtype dtype)
{
    if (!p || tokens == 0 || heads == 0 || width == 0)
        return (mla_span){NULL, NULL};
    int64_t last = (tokens - 1) * token_stride + (heads - 1) * head_stride + width;
    return (mla_span){p, (const char *)p + last * mla_dtype_size(dtype)};
}

mla_status mla_check_apart(const char *fn, const char *out, mla_span o, const char *in, mla_span i)
{
    if (o.lo < o.hi && i.lo < i.hi && o.lo < i.hi && i.lo < o.hi)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: %s overlaps %s", fn, out, in);
    return MLA_OK;
}
