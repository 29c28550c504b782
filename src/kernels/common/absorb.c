/*
 * The W_UK / W_UV absorption around the latent attention (docs/semantics.md §1.3, §1.6):
 * weight re-layout, and the per-head batched GEMMs on the backend's gemm
 * kernels (f32 weights through gemm_f32, bf16 weights through gemm_bf16,
 * which widens them in registers). Heads are independent, so the threads
 * split them; each GEMM reads its head's weights once for all Td tokens. As in
 * vLLM, ql_nope and o_lat are stored in the activation dtype (a bf16 model
 * then decodes bf16 q over the cache); the GEMMs accumulate in f32.
 */
#include "absorb.h"

#include "core/parallel.h"
#include "elementwise.h"

#include <string.h>

/* Columns of W_UV converted per piece (on the stack). */
#define PIECE 256

/* A parallel weight preparation: each of `parts` tasks takes a slice of
 * the heads. */
typedef struct prepare_call {
    const mla_kernels *k;
    const void *kv_b_proj;
    void *w_uk_t, *w_uv;
    mla_dtype src_dtype, w_dtype;
    int64_t heads, L, P, V, parts;
} prepare_call;

static void prepare_heads(int64_t part, void *ctx)
{
    const prepare_call *c = ctx;
    const mla_kernels *k = c->k;
    const int64_t L = c->L, P = c->P, V = c->V;
    const int64_t src_size = mla_dtype_size(c->src_dtype), w_size = mla_dtype_size(c->w_dtype);
    int64_t lo, hi;
    mla_part_range(c->heads, c->parts, part, &lo, &hi);
    for (int64_t h = lo; h < hi; h++) {
        const char *src = (const char *)c->kv_b_proj + h * (P + V) * L * src_size;
        /* W_UK_T[h] is the head's first P rows, as they are */
        mla_convert_run(k, (char *)c->w_uk_t + h * P * L * w_size, c->w_dtype, src, c->src_dtype,
                        P * L, 1.0f);
        /* W_UV[h] = the next V rows, transposed: a piece of a row in, a
         * piece of a column out */
        char *dst = (char *)c->w_uv + h * L * V * w_size;
        float piece[PIECE], narrow[PIECE]; /* narrow holds PIECE elements of any dtype */
        for (int64_t v = 0; v < V; v++) {
            for (int64_t l0 = 0; l0 < L; l0 += PIECE) {
                int64_t n = L - l0 < PIECE ? L - l0 : PIECE;
                mla_convert_run(k, piece, MLA_DTYPE_F32, src + ((P + v) * L + l0) * src_size,
                                c->src_dtype, n, 1.0f);
                mla_convert_run(k, narrow, c->w_dtype, piece, MLA_DTYPE_F32, n, 1.0f);
                for (int64_t l = 0; l < n; l++)
                    memcpy(dst + ((l0 + l) * V + v) * w_size, (char *)narrow + l * w_size, (size_t)w_size);
            }
        }
    }
}

/* Parts of `heads` on `threads` threads: one a thread, or one a head. */
static int64_t head_parts(int64_t heads, int threads)
{
    return heads < threads ? heads : threads;
}

void mla_absorb_prepare_weights(const mla_kernels *k, const void *kv_b_proj, mla_dtype src_dtype,
                                int64_t heads, int64_t L, int64_t P, int64_t V, void *w_uk_t,
                                void *w_uv, mla_dtype w_dtype, int threads)
{
    prepare_call c = {.k = k, .kv_b_proj = kv_b_proj, .w_uk_t = w_uk_t, .w_uv = w_uv,
                      .src_dtype = src_dtype, .w_dtype = w_dtype, .heads = heads, .L = L, .P = P,
                      .V = V, .parts = head_parts(heads, threads)};
    mla_parallel_for(c.parts, threads, prepare_heads, &c);
}

/* c[m x n] = a[m x k] (rows rs_a apart) . w[k x n] (dense) in the weights' dtype. */
static void gemm_weights(const mla_kernels *k, int64_t m, int64_t n, int64_t depth, const float *a,
                         int64_t rs_a, const void *w, mla_dtype w_dtype, float *c, int64_t ldc)
{
    if (w_dtype == MLA_DTYPE_BF16)
        k->gemm_bf16(m, n, depth, a, rs_a, 1, w, n, c, ldc, NULL);
    else
        k->gemm_f32(m, n, depth, a, rs_a, 1, w, n, c, ldc, NULL);
}

/* `rows` rows of `width` elements of dtype, `stride` apart, as f32: in place
 * when already f32 (*rs = stride), else widened into wide (*rs = width). */
static const float *rows_f32(const mla_kernels *k, const void *src, mla_dtype dtype, int64_t rows,
                             int64_t width, int64_t stride, float *wide, int64_t *rs)
{
    if (dtype == MLA_DTYPE_F32) {
        *rs = stride;
        return src;
    }
    for (int64_t r = 0; r < rows; r++)
        mla_convert_run(k, wide + r * width, MLA_DTYPE_F32,
                        (const char *)src + r * stride * mla_dtype_size(dtype), dtype, width, 1.0f);
    *rs = width;
    return wide;
}

/* GEMM into `rows` rows of dtype `stride` apart: directly when f32, else
 * through f32 rows in c_wide, narrowed after. */
static void gemm_into(const mla_kernels *k, int64_t rows, int64_t width, int64_t depth,
                      const float *a, int64_t rs_a, const void *w, mla_dtype w_dtype, void *dst,
                      mla_dtype dtype, int64_t stride, float *c_wide)
{
    if (dtype == MLA_DTYPE_F32) {
        gemm_weights(k, rows, width, depth, a, rs_a, w, w_dtype, dst, stride);
        return;
    }
    gemm_weights(k, rows, width, depth, a, rs_a, w, w_dtype, c_wide, width);
    for (int64_t r = 0; r < rows; r++)
        mla_convert_run(k, (char *)dst + r * stride * mla_dtype_size(dtype), dtype, c_wide + r * width,
                        MLA_DTYPE_F32, width, 1.0f);
}

int64_t mla_absorb_scratch_floats(const mla_absorb_shape *s)
{
    int64_t a = s->P > s->L ? s->P : s->L, c = s->L > s->V ? s->L : s->V;
    return s->tokens * (a + c);
}

/* A parallel absorption GEMM: each of `parts` tasks takes a slice of the
 * heads and scratch of its own. */
typedef struct absorb_call {
    const mla_kernels *k;
    const mla_absorb_shape *s;
    const void *src; /* q or o_lat */
    const void *w;   /* W_UK_T or W_UV */
    void *dst;       /* q_lat or out */
    mla_dtype src_dtype, w_dtype;
    int64_t src_token_stride, src_head_stride, dst_token_stride, parts;
    float *scratch;
} absorb_call;

/* q_lat[:, h, :L] = q_nope[:, h] . W_UK_T[h] and q_pe after it, for the
 * task's heads. */
static void absorb_query_heads(int64_t part, void *ctx)
{
    const absorb_call *c = ctx;
    const mla_absorb_shape *s = c->s;
    const int64_t size = mla_dtype_size(c->src_dtype), w_size = mla_dtype_size(c->w_dtype);
    const int64_t lat = s->L + s->R, lat_stride = s->heads * lat;
    float *a_wide = c->scratch + part * mla_absorb_scratch_floats(s);
    float *c_wide = a_wide + s->tokens * (s->P > s->L ? s->P : s->L);
    int64_t lo, hi;
    mla_part_range(s->heads, c->parts, part, &lo, &hi);
    for (int64_t h = lo; h < hi; h++) {
        const char *qh = (const char *)c->src + h * c->src_head_stride * size;
        char *dst = (char *)c->dst + h * lat * size;
        int64_t rs_a;
        const float *a = rows_f32(c->k, qh, c->src_dtype, s->tokens, s->P, c->src_token_stride,
                                  a_wide, &rs_a);
        gemm_into(c->k, s->tokens, s->L, s->P, a, rs_a,
                  (const char *)c->w + h * s->P * s->L * w_size, c->w_dtype, dst, c->src_dtype,
                  lat_stride, c_wide);
        for (int64_t t = 0; t < s->tokens; t++) /* q_pe rides along */
            memcpy(dst + (t * lat_stride + s->L) * size,
                   qh + (t * c->src_token_stride + s->P) * size, (size_t)(s->R * size));
    }
}

void mla_absorb_queries(const mla_kernels *k, const mla_absorb_shape *s, const void *q,
                        int64_t q_token_stride, int64_t q_head_stride, mla_dtype dtype,
                        const void *w_uk_t, mla_dtype w_dtype, void *q_lat, float *scratch,
                        int threads)
{
    if (s->tokens == 0)
        return; /* q may be NULL and its strides anything (mla.h) */
    absorb_call c = {.k = k, .s = s, .src = q, .dst = q_lat, .w = w_uk_t, .src_dtype = dtype,
                     .w_dtype = w_dtype, .src_token_stride = q_token_stride,
                     .src_head_stride = q_head_stride, .scratch = scratch,
                     .parts = head_parts(s->heads, threads)};
    mla_parallel_for(c.parts, threads, absorb_query_heads, &c);
}

/* out[:, h, :] = o_lat[:, h] . W_UV[h], for the task's heads. */
static void absorb_value_heads(int64_t part, void *ctx)
{
    const absorb_call *c = ctx;
    const mla_absorb_shape *s = c->s;
    const int64_t size = mla_dtype_size(c->src_dtype), w_size = mla_dtype_size(c->w_dtype);
    float *a_wide = c->scratch + part * mla_absorb_scratch_floats(s);
    float *c_wide = a_wide + s->tokens * (s->P > s->L ? s->P : s->L);
    int64_t lo, hi;
    mla_part_range(s->heads, c->parts, part, &lo, &hi);
    for (int64_t h = lo; h < hi; h++) {
        int64_t rs_a;
        const float *a = rows_f32(c->k, (const char *)c->src + h * s->L * size, c->src_dtype,
                                  s->tokens, s->L, s->heads * s->L, a_wide, &rs_a);
        gemm_into(c->k, s->tokens, s->V, s->L, a, rs_a,
                  (const char *)c->w + h * s->L * s->V * w_size, c->w_dtype,
                  (char *)c->dst + h * s->V * size, c->src_dtype, c->dst_token_stride, c_wide);
    }
}

void mla_absorb_values(const mla_kernels *k, const mla_absorb_shape *s, const void *o_lat,
                       const void *w_uv, mla_dtype w_dtype, void *out, int64_t out_token_stride,
                       mla_dtype dtype, float *scratch, int threads)
{
    if (s->tokens == 0)
        return; /* out may be NULL (mla.h) */
    absorb_call c = {.k = k, .s = s, .src = o_lat, .dst = out, .w = w_uv, .src_dtype = dtype,
                     .w_dtype = w_dtype, .dst_token_stride = out_token_stride,
                     .scratch = scratch, .parts = head_parts(s->heads, threads)};
    mla_parallel_for(c.parts, threads, absorb_value_heads, &c);
}
