/* Argument checks shared by the public entry points. */
#ifndef MLA_DISPATCH_CHECKS_H
#define MLA_DISPATCH_CHECKS_H

#include "mla.h"

/* A row-major operand of `rows` rows: non-NULL when it has rows, a stride of
 * at least `width`, a span that fits int64_t. */
mla_status mla_check_rows(const char *fn, const char *what, const void *p, int64_t rows,
                          int64_t stride, int64_t width, mla_dtype dtype);

/* A [tokens, heads, width] view with token and head strides: non-NULL when
 * it has elements, strides >= 0, a span that fits int64_t; when
 * `rows_disjoint`, no two (token, head) rows overlap (heads inside tokens,
 * or tokens inside heads). */
mla_status mla_check_view(const char *fn, const char *what, const void *p, int64_t tokens,
                          int64_t heads, int64_t width, int64_t token_stride, int64_t head_stride,
                          mla_dtype dtype, bool rows_disjoint);

/* The bytes [lo, hi) a [tokens, heads, width] view spans (empty without
 * elements). The view must have passed mla_check_view. */
typedef struct mla_span {
    const char *lo, *hi;
} mla_span;
mla_span mla_view_span(const void *p, int64_t tokens, int64_t heads, int64_t width,
                       int64_t token_stride, int64_t head_stride, mla_dtype dtype);

/* An output must not share a byte with an input it is computed from. */
mla_status mla_check_apart(const char *fn, const char *out, mla_span o, const char *in, mla_span i);

/* Checks a cache and copies it to *out with its zero (dense) strides
 * resolved. */
mla_status mla_check_cache(const char *fn, const mla_kv_cache *cache, mla_kv_cache *out);

/* A block table of `rows` rows of `cols` int32 block ids: cols >= 0, not
 * NULL when it has entries, rows x cols fits int64_t. */
mla_status mla_check_block_table(const char *fn, const int32_t *block_table, int64_t rows,
                                 int64_t cols);

/* Entry `col` of block table row `row` (a cache's row of `cols` block ids)
 * must name a block of the cache. */
mla_status mla_check_block_id(const char *fn, const mla_kv_cache *cache, const int32_t *block_table,
                              int64_t cols, int64_t row, int64_t col);

/* Request `row` of len tokens (>= 0; len_name[row] in messages) fits its
 * block table row and every block it occupies (columns below
 * ceil(len / block_size)) is a cache block. */
mla_status mla_check_request_blocks(const char *fn, const mla_kv_cache *cache,
                                    const int32_t *block_table, int64_t cols, int64_t row,
                                    const char *len_name, int64_t len);

/* A caller's workspace: non-NULL and at least `need` bytes. */
mla_status mla_check_workspace(const char *fn, const void *workspace, int64_t bytes, int64_t need);

/* The thread count a call runs on (mla.h, mla_default_threads): threads <= 0
 * means mla_default_threads(); a count above the largest of that,
 * omp_get_num_procs() and MLA_THREAD_CAP_MIN is cut to it. Every entry
 * point that takes threads resolves it here, its workspace query too. */
int mla_resolve_threads(int threads);

#endif
