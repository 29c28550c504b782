/*
 * The prefill op (docs/semantics.md §1.7) against the double-precision oracle
 * of the whole non-absorbed prefill: token i of request r (at position
 * context + i) attends to every cached row j <= context + i, with k_nope and
 * v up-projected from the latent row as the cache holds it (fp8 dequantized)
 * and k_pe its last R values:
 *   o[t, h] = sum_j softmax_j(scale (q_nope . k_nope[j, h] + q_pe . k_pe[j])) v[j, h]
 * Batches mix prefills with and without context (and empty ones), contexts
 * span many chunks (workspaces down to one block per request), block sizes
 * 1 / 16 / 64, every cache dtype, q in f32 / bf16 / f16, both paths forced
 * and the automatic choice, every backend the CPU has. The new tokens'
 * kv_c / k_pe given to the op are read back from the cache, so the two paths
 * see the same latent and agree within the tolerances below.
 *
 * Tolerance, relative to max|v| of the request: f32 2e-4 (the GEMMs, the
 * softmax and the merges each add f32 rounding); 16-bit dtypes keep k, v,
 * the partial results and (absorbed) ql_nope / o_lat in their dtype as vLLM
 * does, each a rounding of u (2^-8 bf16, 2^-11 f16) of values <= max|v| or
 * logit shifts of that order: 6 u (2.4e-2 bf16, 3e-3 f16).
 */
#include "decode_cases.h"
#include "oracle.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct pspec {
    mla_dtype dtype, cache_dtype;
    int64_t H, L, R, P, V, block_size, reqs;
    int32_t ctx[6], news[6];
    int64_t workspace_tokens; /* the plan's W */
    int threads;
} pspec;

typedef struct pcase {
    pspec s;
    int64_t T, rows_per_req, elem;
    int32_t qsl[7];
    mla_kv_cache cache;
    void *cache_data;
    int32_t *table;
    void *q, *kv_c, *k_pe, *kvb, *w_uk_t, *w_uv, *out;
    size_t out_bytes;
    mla_dtype kvb_dtype, w_dtype;
    mla_chunk_plan *plan;
    double *want, *max_v; /* [T, H, V], [reqs] */
} pcase;

static void *zalloc(size_t bytes)
{
    void *p = calloc(1, bytes ? bytes : 1);
    assert_non_null(p);
    return p;
}

/* mla_convert, or a copy between equal dtypes (which it leaves to memcpy). */
static void convert(mla_dtype dst_dtype, void *dst, mla_dtype src_dtype, const void *src, int64_t n)
{
    if (dst_dtype == src_dtype)
        memcpy(dst, src, (size_t)(n * mla_dtype_size(src_dtype)));
    else
        assert_int_equal(mla_convert(dst_dtype, dst, src_dtype, src, n, 1), MLA_OK);
}

/* n random values in [-amp, amp) stored as dtype. */
static void *random_array(mla_dtype dtype, int64_t n, double amp)
{
    float *f = zalloc((size_t)n * sizeof(float));
    for (int64_t i = 0; i < n; i++)
        f[i] = (float)(amp * case_uniform());
    void *x = zalloc((size_t)(n * mla_dtype_size(dtype)));
    convert(dtype, x, MLA_DTYPE_F32, f, n);
    free(f);
    return x;
}

static float *as_f32(mla_dtype dtype, const void *x, int64_t n)
{
    float *f = zalloc((size_t)n * sizeof(float));
    convert(MLA_DTYPE_F32, f, dtype, x, n);
    return f;
}

/* Request r's len cache rows, dequantized to f32 [len, L+R]. */
static float *cache_rows(const pcase *c, int64_t r, int64_t len)
{
    const int64_t width = c->s.L + c->s.R;
    float *rows = zalloc((size_t)(len * width) * sizeof(float));
    int32_t cu[2] = {0, (int32_t)len}, *t2s = zalloc((size_t)len * sizeof(int32_t));
    mla_gather_spec spec = {.block_table = c->table + r * c->rows_per_req,
                            .block_table_cols = c->rows_per_req, .num_reqs = 1, .cu_seq_lens = cu};
    assert_int_equal(mla_gather_cache(&c->cache, &spec, t2s, len, rows, MLA_DTYPE_F32, width, 1),
                     MLA_OK);
    free(t2s);
    return rows;
}

/* The oracle: every request's rows up-projected in double, causal softmax. */
static void oracle(pcase *c)
{
    const pspec *s = &c->s;
    const int64_t H = s->H, L = s->L, R = s->R, P = s->P, V = s->V, width = L + R;
    float *w = as_f32(c->kvb_dtype, c->kvb, H * (P + V) * L);
    float *q = as_f32(s->dtype, c->q, c->T * H * (P + R));
    for (int64_t r = 0; r < s->reqs; r++) {
        const int64_t len = s->ctx[r] + s->news[r];
        float *rows = cache_rows(c, r, len);
        double *kv = zalloc((size_t)(len * H * (P + V)) * sizeof(double));
        c->max_v[r] = 0;
        for (int64_t j = 0; j < len; j++)
            for (int64_t h = 0; h < H; h++)
                for (int64_t e = 0; e < P + V; e++) {
                    double acc = 0;
                    for (int64_t l = 0; l < L; l++)
                        acc += (double)rows[j * width + l] * w[(h * (P + V) + e) * L + l];
                    kv[(j * H + h) * (P + V) + e] = acc;
                    if (e >= P)
                        c->max_v[r] = fmax(c->max_v[r], fabs(acc));
                }
        double *logit = zalloc((size_t)(len > 0 ? len : 1) * sizeof(double));
        for (int64_t i = 0; i < s->news[r]; i++) {
            const int64_t t = c->qsl[r] + i, seen = s->ctx[r] + i + 1;
            for (int64_t h = 0; h < H; h++) {
                const float *qr = q + (t * H + h) * (P + R);
                double m = -INFINITY, sum = 0;
                for (int64_t j = 0; j < seen; j++) {
                    double d = 0;
                    for (int64_t p = 0; p < P; p++)
                        d += (double)qr[p] * kv[(j * H + h) * (P + V) + p];
                    for (int64_t e = 0; e < R; e++)
                        d += (double)qr[P + e] * rows[j * width + L + e];
                    logit[j] = (double)0.1352f * d;
                    m = fmax(m, logit[j]);
                }
                for (int64_t j = 0; j < seen; j++)
                    sum += exp(logit[j] - m);
                for (int64_t e = 0; e < V; e++) {
                    double o = 0;
                    for (int64_t j = 0; j < seen; j++)
                        o += exp(logit[j] - m) * kv[(j * H + h) * (P + V) + P + e];
                    c->want[(t * H + h) * V + e] = o / sum;
                }
            }
        }
        free(logit);
        free(kv);
        free(rows);
    }
    free(q);
    free(w);
}

/* Cache rows written by mla_concat_and_cache in shuffled blocks; the new
 * tokens' kv_c / k_pe read back from it; weights prepared; the plan. */
static void pcase_make(pcase *c, const pspec *s)
{
    memset(c, 0, sizeof *c);
    c->s = *s;
    const int64_t H = s->H, L = s->L, R = s->R, P = s->P, V = s->V, width = L + R;
    c->elem = mla_dtype_size(s->dtype);
    c->kvb_dtype = s->dtype == MLA_DTYPE_BF16 ? MLA_DTYPE_BF16 : s->dtype;
    c->w_dtype = s->dtype == MLA_DTYPE_BF16 ? MLA_DTYPE_BF16 : MLA_DTYPE_F32;
    int64_t max_len = 0;
    for (int64_t r = 0; r < s->reqs; r++) {
        c->qsl[r + 1] = c->qsl[r] + s->news[r];
        max_len = s->ctx[r] + s->news[r] > max_len ? s->ctx[r] + s->news[r] : max_len;
    }
    c->T = c->qsl[s->reqs];
    c->rows_per_req = (max_len + s->block_size - 1) / s->block_size + 1;
    const int64_t blocks = s->reqs * c->rows_per_req;
    c->cache = (mla_kv_cache){.dtype = s->cache_dtype, .num_blocks = blocks,
                              .block_size = s->block_size, .width = width, .scale = 0.02f};
    c->cache_data = zalloc((size_t)(blocks * s->block_size * width * mla_dtype_size(s->cache_dtype)));
    c->cache.data = c->cache_data;
    c->table = zalloc((size_t)blocks * sizeof(int32_t));
    for (int64_t i = 0; i < blocks; i++) /* a permutation: requests interleave */
        c->table[i] = (int32_t)((i * 7 + 3) % blocks);
    for (int64_t r = 0; r < s->reqs; r++) {
        const int64_t len = s->ctx[r] + s->news[r];
        float *latent = zalloc((size_t)(len * width + 1) * sizeof(float));
        int64_t *slots = zalloc((size_t)(len + 1) * sizeof(int64_t));
        for (int64_t j = 0; j < len * width; j++)
            latent[j] = (float)case_uniform();
        for (int64_t j = 0; j < len; j++)
            slots[j] = (int64_t)c->table[r * c->rows_per_req + j / s->block_size] * s->block_size +
                       j % s->block_size;
        assert_int_equal(mla_concat_and_cache(&c->cache, latent, width, latent + L, width,
                                              MLA_DTYPE_F32, L, R, slots, len, 1), MLA_OK);
        free(slots);
        free(latent);
    }
    /* the new tokens' latent, as the cache holds it, in dtype */
    c->kv_c = zalloc((size_t)(c->T * L * c->elem));
    c->k_pe = zalloc((size_t)(c->T * (R ? R : 1) * c->elem));
    for (int64_t r = 0; r < s->reqs; r++) {
        float *rows = cache_rows(c, r, s->ctx[r] + s->news[r]);
        for (int64_t i = 0; i < s->news[r]; i++) {
            const float *row = rows + (s->ctx[r] + i) * width;
            const int64_t t = c->qsl[r] + i;
            convert(s->dtype, (char *)c->kv_c + t * L * c->elem, MLA_DTYPE_F32, row, L);
            if (R)
                convert(s->dtype, (char *)c->k_pe + t * R * c->elem, MLA_DTYPE_F32, row + L, R);
        }
        free(rows);
    }
    c->q = random_array(s->dtype, c->T * H * (P + R) + 1, 1.0);
    c->kvb = random_array(c->kvb_dtype, H * (P + V) * L, 1.0 / sqrt((double)L));
    c->w_uk_t = zalloc((size_t)(H * P * L * mla_dtype_size(c->w_dtype)));
    c->w_uv = zalloc((size_t)(H * L * V * mla_dtype_size(c->w_dtype)));
    assert_int_equal(mla_prepare_weights(c->kvb, c->kvb_dtype, H, L, P, V, c->w_uk_t, c->w_uv,
                                         c->w_dtype, 1), MLA_OK);
    assert_int_equal(mla_chunk_plan_create(s->ctx, c->qsl, s->reqs, s->workspace_tokens,
                                           s->block_size, width, s->dtype, &c->plan), MLA_OK);
    c->out_bytes = (size_t)(c->T * H * V * c->elem) + 2 * MARGIN;
    c->out = zalloc(c->out_bytes);
    c->want = zalloc((size_t)(c->T * H * V + 1) * sizeof(double));
    c->max_v = zalloc((size_t)s->reqs * sizeof(double));
    oracle(c);
}

static void pcase_free(pcase *c)
{
    mla_chunk_plan_destroy(c->plan);
    void *bufs[] = {c->cache_data, c->table, c->q, c->kv_c, c->k_pe, c->kvb, c->w_uk_t,
                    c->w_uv, c->out, c->want, c->max_v};
    for (int i = 0; i < COUNT(bufs); i++)
        free(bufs[i]);
}

static mla_prefill_args pcase_args(const pcase *c, mla_prefill_path path)
{
    const pspec *s = &c->s;
    return (mla_prefill_args){
        .num_prefills = s->reqs, .num_tokens = c->T, .num_heads = s->H, .kv_lora_rank = s->L,
        .rope_dim = s->R, .qk_nope_dim = s->P, .v_head_dim = s->V, .scale = 0.1352f,
        .dtype = s->dtype, .query_start_loc = c->qsl, .context_lens = s->ctx, .plan = c->plan,
        .cache = &c->cache, .block_table = c->table, .block_table_cols = c->rows_per_req,
        .q = c->q, .q_token_stride = s->H * (s->P + s->R), .q_head_stride = s->P + s->R,
        .kv_c = c->kv_c, .kv_c_stride = s->L, .k_pe = c->k_pe, .k_pe_stride = s->R,
        .kv_b_proj = c->kvb, .kv_b_proj_dtype = c->kvb_dtype, .w_uk_t = c->w_uk_t,
        .w_uv = c->w_uv, .w_dtype = c->w_dtype, .out = (char *)c->out + MARGIN,
        .out_token_stride = s->H * s->V, .path = path};
}

/* mla_prefill with a workspace of exactly the queried size; the guard
 * bytes around out and the workspace survive. */
static mla_status run(pcase *c, const mla_prefill_args *a, int threads)
{
    int64_t bytes = -1;
    assert_int_equal(mla_prefill_workspace_size(a, threads, &bytes), MLA_OK);
    unsigned char *ws = case_guarded_workspace(bytes);
    memset(c->out, GUARD, c->out_bytes);
    mla_status st = mla_prefill(a, ws + MARGIN, bytes, threads);
    case_free_guarded_workspace(ws, bytes, 0, "mla_prefill");
    case_expect_guards(c->out, MARGIN, "mla_prefill: before out");
    case_expect_guards((unsigned char *)c->out + c->out_bytes - MARGIN, MARGIN,
                       "mla_prefill: after out");
    return st;
}

static double tolerance(mla_dtype dtype)
{
    return dtype == MLA_DTYPE_F32 ? 2e-4 : dtype == MLA_DTYPE_BF16 ? 6.0 / 256 : 6.0 / 2048;
}

/* out against the oracle; returns the worst error / max|v|. */
static double check(const pcase *c, const char *what)
{
    const pspec *s = &c->s;
    float *got = as_f32(s->dtype, (char *)c->out + MARGIN, c->T * s->H * s->V);
    double worst = 0;
    for (int64_t r = 0; r < s->reqs; r++)
        for (int64_t t = c->qsl[r]; t < c->qsl[r + 1]; t++)
            for (int64_t e = 0; e < s->H * s->V; e++) {
                const double want = c->want[t * s->H * s->V + e], scale = c->max_v[r] > 0 ? c->max_v[r] : 1;
                double err = fabs(got[t * s->H * s->V + e] - want) / scale; /* NaN: not noted */
                if (!case_close(want, got[t * s->H * s->V + e], tolerance(s->dtype) * scale))
                    fail_msg("%s: %s q / %s cache, token %lld element %lld: got %g, want %g "
                             "(error %.3g of max|v|, tolerance %.3g)", what,
                             mla_dtype_name(s->dtype), mla_dtype_name(s->cache_dtype),
                             (long long)t, (long long)e, (double)got[t * s->H * s->V + e],
                             c->want[t * s->H * s->V + e], err, tolerance(s->dtype));
                worst = fmax(worst, err);
            }
    free(got);
    return worst;
}

static const char *path_name(mla_prefill_path p)
{
    return p == MLA_PREFILL_PATH_MHA ? "mha" : p == MLA_PREFILL_PATH_ABSORBED ? "absorbed" : "auto";
}

static double worst_error[3]; /* by dtype index: f32, bf16, f16 */

static int dtype_index(mla_dtype d)
{
    return d == MLA_DTYPE_F32 ? 0 : d == MLA_DTYPE_BF16 ? 1 : 2;
}

/* Every path on one case. */
static void run_paths(pcase *c, const char *label)
{
    static const mla_prefill_path paths[] = {MLA_PREFILL_PATH_MHA, MLA_PREFILL_PATH_ABSORBED,
                                             MLA_PREFILL_PATH_AUTO};
    for (int i = 0; i < COUNT(paths); i++) {
        mla_prefill_args a = pcase_args(c, paths[i]);
        char what[200];
        snprintf(what, sizeof what, "%s, %s path, bs %lld, W %lld", label, path_name(paths[i]),
                 (long long)c->s.block_size, (long long)c->s.workspace_tokens);
        mla_status st = run(c, &a, c->s.threads);
        if (st != MLA_OK)
            fail_msg("%s: %s: %s", what, mla_status_str(st), mla_last_error());
        double e = check(c, what);
        int k = dtype_index(c->s.dtype);
        worst_error[k] = fmax(worst_error[k], e);
    }
}

/* A mixed batch: long contexts (many chunks), short ones, a one-token
 * extend, no context, an empty request. */
static pspec mixed(mla_dtype dtype, mla_dtype cache_dtype, int64_t bs, int64_t W)
{
    return (pspec){.dtype = dtype, .cache_dtype = cache_dtype, .H = 3, .L = 40, .R = 8, .P = 24,
                   .V = 16, .block_size = bs, .reqs = 6,
                   .ctx = {301, 64, 17, 1, 0, 0}, .news = {19, 1, 0, 70, 33, 1},
                   .workspace_tokens = W, .threads = 2};
}

static void test_oracle_every_dtype(void **state)
{
    (void)state;
    static const mla_dtype dtypes[] = {MLA_DTYPE_F32, MLA_DTYPE_BF16, MLA_DTYPE_F16};
    static const mla_dtype caches[] = {MLA_DTYPE_F32, MLA_DTYPE_BF16, MLA_DTYPE_F16,
                                       MLA_DTYPE_FP8_E4M3, MLA_DTYPE_FP8_E5M2};
    for (int d = 0; d < COUNT(dtypes); d++)
        for (int k = 0; k < COUNT(caches); k++) {
            pcase c;
            pspec s = mixed(dtypes[d], caches[k], 16, 128);
            pcase_make(&c, &s);
            run_paths(&c, "mixed batch");
            pcase_free(&c);
        }
    printf("[ ACCURACY ] worst out error / max|v|: f32 %.2g, bf16 %.2g, f16 %.2g\n",
           worst_error[0], worst_error[1], worst_error[2]);
}

/* NaN in the latent of a new token (its cache row and kv_c or k_pe) that
 * only the request's later tokens see: the earlier ones, and every other
 * request, match the oracle, finite; those that see it are NaN, on both
 * paths (the MHA path's causal flash attention, the absorbed path's decode
 * pieces). */
static void test_nan_in_later_tokens(void **state)
{
    (void)state;
    static const mla_dtype dtypes[][2] = {{MLA_DTYPE_F32, MLA_DTYPE_F32},
                                          {MLA_DTYPE_BF16, MLA_DTYPE_BF16},
                                          {MLA_DTYPE_F16, MLA_DTYPE_FP8_E4M3}};
    for (int k = 0; k < COUNT(dtypes); k++) {
        pcase c;
        pspec s = mixed(dtypes[k][0], dtypes[k][1], 16, 128);
        pcase_make(&c, &s);
        const int64_t width = s.L + s.R;
        for (int64_t r = 0; r < s.reqs; r++) {
            if (s.news[r] < 2)
                continue;
            const int64_t i = 1 + r % (s.news[r] - 1), pos = s.ctx[r] + i, t = c.qsl[r] + i;
            const int64_t d = (r * 11 + k) % width; /* latent or rope */
            const int64_t row = (int64_t)c.table[r * c.rows_per_req + pos / s.block_size] *
                                s.block_size + pos % s.block_size;
            oracle_store(s.cache_dtype, c.cache_data, row * width + d, NAN, c.cache.scale);
            if (d < s.L)
                oracle_store(s.dtype, c.kv_c, t * s.L + d, NAN, 1.0f);
            else
                oracle_store(s.dtype, c.k_pe, t * s.R + d - s.L, NAN, 1.0f);
        }
        oracle(&c);
        run_paths(&c, "NaN in a later token");
        pcase_free(&c);
    }
}

/* Block sizes 1 / 16 / 64 and workspaces from one block per request with
 * context (the smallest plan) to one chunk for everything. */
static void test_chunking(void **state)
{
    (void)state;
    static const int64_t sizes[] = {1, 16, 64};
    for (int b = 0; b < COUNT(sizes); b++) {
        const int64_t bs = sizes[b];
        const int64_t workspaces[] = {4 * bs, 4 * bs + bs - 1, 1024};
        for (int w = 0; w < COUNT(workspaces); w++) {
            pcase c;
            pspec s = mixed(MLA_DTYPE_F32, MLA_DTYPE_BF16, bs, workspaces[w]);
            pcase_make(&c, &s);
            mla_chunk_plan_info info;
            mla_chunk_plan_info_get(c.plan, &info);
            if (w == 0)
                assert_true(info.num_chunks >= 301 / bs); /* one block per request per chunk */
            run_paths(&c, "chunking");
            pcase_free(&c);
        }
    }
}

/* A chunked prefill gives the unchunked result within f32 rounding, and
 * the MHA path the same bits on any thread count. */
static void test_chunked_equals_unchunked(void **state)
{
    (void)state;
    pcase c;
    pspec s = mixed(MLA_DTYPE_F32, MLA_DTYPE_F32, 16, 4096);
    pcase_make(&c, &s);
    mla_chunk_plan *many;
    assert_int_equal(mla_chunk_plan_create(s.ctx, c.qsl, s.reqs, 64, s.block_size, s.L + s.R,
                                           s.dtype, &many), MLA_OK);
    mla_chunk_plan_info info;
    mla_chunk_plan_info_get(many, &info);
    assert_true(info.num_chunks >= 10);
    const size_t n = (size_t)(c.T * s.H * s.V);
    float *once = zalloc(n * sizeof(float)), *first = zalloc(n * sizeof(float));
    const float *got = (const float *)((char *)c.out + MARGIN);
    mla_prefill_args a = pcase_args(&c, MLA_PREFILL_PATH_MHA);
    assert_int_equal(run(&c, &a, 2), MLA_OK);
    memcpy(once, got, n * sizeof(float));
    a.plan = many;
    for (int threads = 1; threads <= 3; threads++) {
        assert_int_equal(run(&c, &a, threads), MLA_OK);
        for (size_t i = 0; i < n; i++)
            if (!(fabs(once[i] - got[i]) <= 1e-5 * (fabs(once[i]) + 1e-2)))
                fail_msg("element %zu: unchunked %g, chunked %g", i, (double)once[i],
                         (double)got[i]);
        if (threads == 1)
            memcpy(first, got, n * sizeof(float));
        else
            assert_memory_equal(first, got, n * sizeof(float));
    }
    free(first);
    free(once);
    mla_chunk_plan_destroy(many);
    pcase_free(&c);
}

/* DeepSeek's dims (L 512, R 64, P 128, V 128) on every backend: the MHA
 * path forced onto each prefill backend, the absorbed path onto each
 * decode backend. */
typedef struct backend_ctx {
    pcase *c;
    mla_prefill_path path;
} backend_ctx;

/* c's kv_b_proj packed by mla_pack_kv_b_proj for the backend forced now. */
static void *pack_kv_b_proj(const pcase *c)
{
    const pspec *s = &c->s;
    mla_up_proj_args u = {.num_heads = s->H, .kv_lora_rank = s->L, .qk_nope_dim = s->P,
                          .v_head_dim = s->V, .kv_b_proj = c->kvb, .w_dtype = c->kvb_dtype,
                          .kv_c_dtype = s->dtype};
    int64_t bytes = 0;
    assert_int_equal(mla_pack_kv_b_proj_size(&u, &bytes), MLA_OK);
    void *packed = case_alloc((size_t)bytes);
    assert_int_equal(mla_pack_kv_b_proj(&u, packed, bytes, 2), MLA_OK);
    return packed;
}

/* The path forced onto b against the oracle; the MHA path also with
 * kv_b_proj packed ahead (and kv_b_proj NULL), to the same bits. */
static void on_backend(const mla_backend_desc *b, void *ctx)
{
    backend_ctx *x = ctx;
    mla_prefill_args a = pcase_args(x->c, x->path);
    char what[160];
    snprintf(what, sizeof what, "%s on %s", path_name(x->path), b->name);
    mla_status st = run(x->c, &a, 2);
    if (st != MLA_OK)
        fail_msg("%s: %s: %s", what, mla_status_str(st), mla_last_error());
    support_expect_ran(b);
    check(x->c, what);
    printf("[ BACKEND  ] %s: prefill matches the oracle\n", what);
    if (x->path != MLA_PREFILL_PATH_MHA)
        return;
    const size_t n = x->c->out_bytes - 2 * MARGIN;
    unsigned char *unpacked = case_alloc(n);
    memcpy(unpacked, (char *)x->c->out + MARGIN, n);
    a.kv_b_proj_packed = pack_kv_b_proj(x->c);
    a.kv_b_proj = NULL;
    if ((st = run(x->c, &a, 2)) != MLA_OK)
        fail_msg("%s, packed kv_b_proj: %s: %s", what, mla_status_str(st), mla_last_error());
    assert_memory_equal(unpacked, (char *)x->c->out + MARGIN, n);
    free((void *)a.kv_b_proj_packed);
    free(unpacked);
}

static void test_every_backend(void **state)
{
    (void)state;
    static const mla_dtype dtypes[] = {MLA_DTYPE_F32, MLA_DTYPE_BF16};
    for (int d = 0; d < COUNT(dtypes); d++) {
        pcase c;
        pspec s = {.dtype = dtypes[d], .cache_dtype = MLA_DTYPE_BF16, .H = 2, .L = 512, .R = 64,
                   .P = 128, .V = 128, .block_size = 64, .reqs = 3, .ctx = {200, 0, 0},
                   .news = {9, 130, 2}, .workspace_tokens = 128, .threads = 2};
        pcase_make(&c, &s);
        mla_config cfg = {.q_dtype = s.dtype, .cache_dtype = s.dtype, .kv_lora_rank = 512,
                          .rope_dim = 0, .num_heads = s.H, .block_size = 1};
        backend_ctx mha = {&c, MLA_PREFILL_PATH_MHA}, absorbed = {&c, MLA_PREFILL_PATH_ABSORBED};
        assert_true(support_each_backend(MLA_OP_PREFILL, &cfg, on_backend, &mha) >= 1);
        cfg.cache_dtype = s.cache_dtype;
        cfg.rope_dim = 64;
        cfg.block_size = 64;
        assert_true(support_each_backend(MLA_OP_DECODE, &cfg, on_backend, &absorbed) >= 1);
        pcase_free(&c);
    }
}

/* The cost model: a short extend of a long context is absorbed, a long
 * prefill is not, and a forced path is taken whatever the cost. */
static void test_choose_path(void **state)
{
    (void)state;
    int32_t qsl[3] = {0, 4, 4 + 2048}, ctx[2] = {8192, 0};
    mla_prefill_args a = {.num_prefills = 2, .num_tokens = qsl[2], .num_heads = 16,
                          .kv_lora_rank = 512, .rope_dim = 64, .qk_nope_dim = 128,
                          .v_head_dim = 128, .dtype = MLA_DTYPE_BF16, .query_start_loc = qsl,
                          .context_lens = ctx};
    assert_int_equal(mla_prefill_choose_path(&a, 0), MLA_PREFILL_PATH_ABSORBED);
    assert_int_equal(mla_prefill_choose_path(&a, 1), MLA_PREFILL_PATH_MHA);
    a.path = MLA_PREFILL_PATH_MHA;
    assert_int_equal(mla_prefill_choose_path(&a, 0), MLA_PREFILL_PATH_MHA);
    a.path = MLA_PREFILL_PATH_ABSORBED;
    assert_int_equal(mla_prefill_choose_path(&a, 1), MLA_PREFILL_PATH_ABSORBED);
}

/* mla_prefill(a), a given bad_input, in a workspace of `bytes` and out
 * both full of guard bytes: it fails with `want` and a message naming
 * `needle`, and every guard byte survives. */
static void expect_reject_in(pcase *c, const char *bad_input, const mla_prefill_args *a,
                             int64_t bytes, mla_status want, const char *needle)
{
    unsigned char *ws = case_alloc((size_t)bytes);
    memset(ws, GUARD, (size_t)bytes);
    memset(c->out, GUARD, c->out_bytes);
    support_expect_reject("mla_prefill", bad_input, mla_prefill(a, ws, bytes, 1), want, needle);
    case_expect_guards(c->out, c->out_bytes, "rejected call: out");
    case_expect_guards(ws, (size_t)bytes, "rejected call: workspace");
    free(ws);
}

/* Bad input: status, a message naming the problem, out and the workspace
 * untouched. */
static void expect_reject(pcase *c, const char *bad_input, const mla_prefill_args *a,
                          mla_status want, const char *needle)
{
    int64_t bytes = 0;
    mla_prefill_args sized = pcase_args(c, MLA_PREFILL_PATH_AUTO); /* the most any path needs */
    assert_int_equal(mla_prefill_workspace_size(&sized, 1, &bytes), MLA_OK);
    expect_reject_in(c, bad_input, a, bytes, want, needle);
}

static void test_rejects(void **state)
{
    (void)state;
    pcase c, other;
    pspec s = mixed(MLA_DTYPE_F32, MLA_DTYPE_BF16, 16, 64);
    pcase_make(&c, &s);
    pspec t = s;
    t.ctx[0] = 300; /* a plan for another batch */
    pcase_make(&other, &t);
    mla_prefill_args a = pcase_args(&c, MLA_PREFILL_PATH_MHA);
    a.plan = other.plan;
    expect_reject(&c, "plan made for another batch", &a, MLA_ERR_INVALID_ARGUMENT, "cover");
    a = pcase_args(&c, MLA_PREFILL_PATH_MHA);
    a.plan = NULL;
    expect_reject(&c, "plan NULL with context on the MHA path", &a, MLA_ERR_INVALID_ARGUMENT,
                  "plan is NULL");
    int64_t bytes = 0;
    a = pcase_args(&c, MLA_PREFILL_PATH_AUTO);
    assert_int_equal(mla_prefill_workspace_size(&a, 1, &bytes), MLA_OK);
    expect_reject_in(&c, "workspace 1 byte short", &a, bytes - 1, MLA_ERR_CAPACITY, "workspace");
    int32_t saved = c.table[1];
    c.table[1] = (int32_t)c.cache.num_blocks; /* request 0's second block */
    a = pcase_args(&c, MLA_PREFILL_PATH_ABSORBED);
    expect_reject(&c, "block_table id past num_blocks", &a, MLA_ERR_OUT_OF_RANGE, "block");
    c.table[1] = saved;
    a = pcase_args(&c, MLA_PREFILL_PATH_AUTO);
    a.q = NULL;
    expect_reject(&c, "q NULL", &a, MLA_ERR_INVALID_ARGUMENT, "q");
    a = pcase_args(&c, MLA_PREFILL_PATH_MHA);
    a.kv_b_proj = NULL;
    expect_reject(&c, "kv_b_proj NULL on the MHA path", &a, MLA_ERR_INVALID_ARGUMENT, "kv_b_proj");
    a = pcase_args(&c, MLA_PREFILL_PATH_MHA);
    a.kv_b_proj_packed = pack_kv_b_proj(&other);
    a.num_heads = 1; /* packed for 3 */
    a.q_token_stride = a.q_head_stride = s.P + s.R;
    a.out_token_stride = s.V;
    expect_reject(&c, "kv_b_proj_packed for another shape", &a, MLA_ERR_INVALID_ARGUMENT,
                  "kv_b_proj_packed is for 3 heads");
    free((void *)a.kv_b_proj_packed);
    a = pcase_args(&c, MLA_PREFILL_PATH_ABSORBED);
    a.w_uv = NULL;
    expect_reject(&c, "w_uv NULL on the absorbed path", &a, MLA_ERR_INVALID_ARGUMENT, "w_uv");
    int32_t ctx[6];
    memcpy(ctx, s.ctx, sizeof ctx);
    ctx[5] = 5; /* context after a request without */
    a = pcase_args(&c, MLA_PREFILL_PATH_MHA);
    a.context_lens = ctx;
    expect_reject(&c, "a request with context after one without", &a, MLA_ERR_INVALID_ARGUMENT,
                  "come first");
    a = pcase_args(&c, MLA_PREFILL_PATH_MHA);
    a.path = (mla_prefill_path)7;
    expect_reject(&c, "path not an mla_prefill_path", &a, MLA_ERR_INVALID_ARGUMENT, "path");
    a = pcase_args(&c, MLA_PREFILL_PATH_MHA);
    a.out = c.q; /* out over q */
    expect_reject(&c, "out over q", &a, MLA_ERR_INVALID_ARGUMENT, "overlap");
    /* the weights' sizes bound every per-head product: checked first, by
     * the size query too */
    a = pcase_args(&c, MLA_PREFILL_PATH_ABSORBED);
    a.num_heads = INT64_C(1) << 60;
    expect_reject(&c, "num_heads 2^60 (weight sizes past int64)", &a, MLA_ERR_OVERFLOW,
                  "mla_prefill: kv_b_proj of 1152921504606846976 heads");
    support_expect_reject("mla_prefill_workspace_size", "num_heads 2^60 (weight sizes past int64)",
                          mla_prefill_workspace_size(&a, 1, &bytes), MLA_ERR_OVERFLOW,
                          "mla_prefill_workspace_size: kv_b_proj of");
    /* weights that fit, but not the absorbed path's 64 queries x H rows */
    const mla_prefill_args narrow = {.num_heads = INT64_C(1) << 59, .kv_lora_rank = 1,
                                     .qk_nope_dim = 1, .v_head_dim = 1, .scale = 1.0f,
                                     .dtype = MLA_DTYPE_F32, .path = MLA_PREFILL_PATH_ABSORBED};
    support_expect_reject("mla_prefill_workspace_size",
                          "num_heads 2^59 (the absorbed path's rows past int64)",
                          mla_prefill_workspace_size(&narrow, 1, &bytes), MLA_ERR_OVERFLOW,
                          "overflows");
    pcase_free(&other);
    pcase_free(&c);
}

/* The paths AUTO takes for c: both, or the test is not testing them. */
static void expect_both_paths(const pcase *c)
{
    mla_prefill_args a = pcase_args(c, MLA_PREFILL_PATH_AUTO);
    bool mha = false, absorbed = false;
    for (int64_t r = 0; r < c->s.reqs; r++) {
        if (c->s.news[r] == 0)
            continue;
        bool abs = mla_prefill_choose_path(&a, r) == MLA_PREFILL_PATH_ABSORBED;
        absorbed |= abs;
        mha |= !abs;
    }
    assert_true(mha && absorbed);
}

/* A step that would fail only after earlier steps wrote fails the call
 * before anything is written (the MHA steps write out before the absorbed
 * path's decode runs): a forced backend that cannot run one of the steps,
 * and a workspace that shares bytes with an input. */
static void test_rejects_before_any_step(void **state)
{
    (void)state;
    pcase c;
    pspec s = mixed(MLA_DTYPE_F32, MLA_DTYPE_BF16, 16, 64);
    pcase_make(&c, &s);
    expect_both_paths(&c);
    mla_prefill_args a = pcase_args(&c, MLA_PREFILL_PATH_AUTO);
    const mla_op ops[] = {MLA_OP_PREFILL, MLA_OP_DECODE};
    /* what the steps ask each op group for: f32 everywhere but the bf16 cache */
    const mla_config cfgs[] = {
        {.q_dtype = MLA_DTYPE_F32, .cache_dtype = MLA_DTYPE_F32, .kv_lora_rank = s.L,
         .num_heads = s.H, .block_size = 1},
        {.q_dtype = MLA_DTYPE_F32, .cache_dtype = MLA_DTYPE_BF16, .kv_lora_rank = s.L,
         .rope_dim = s.R, .num_heads = s.H, .block_size = s.block_size},
    };
    int forced = 0;
    support_unfit_backend(); /* refuses both steps on any CPU */
    for (int o = 0; o < COUNT(ops); o++)
        for (int i = 0; i < mla_backend_count(); i++) {
            const char *name = mla_backend_at(i)->name;
            mla_reasons cpu, why;
            assert_int_equal(mla_backend_validate(name, ops[o], NULL, &cpu), MLA_OK);
            assert_int_equal(mla_backend_validate(name, ops[o], &cfgs[o], &why), MLA_OK);
            if (cpu.count > 0 || why.count == 0)
                continue;
            assert_int_equal(mla_force_backend(ops[o], name), MLA_OK);
            expect_reject(&c, "forced decode or prefill backend that cannot run a step", &a,
                          MLA_ERR_BACKEND_INVALID, why.text[0]);
            assert_int_equal(mla_force_backend(ops[o], NULL), MLA_OK);
            printf("[ FORCED   ] %s on %s: rejected before any step: %s\n", mla_op_name(ops[o]),
                   name, mla_last_error());
            forced++;
        }
    assert_true(forced >= 2);

    /* kv_c inside the workspace, where the up-projection would write */
    int64_t bytes = 0;
    assert_int_equal(mla_prefill_workspace_size(&a, 1, &bytes), MLA_OK);
    const size_t kv_c_bytes = (size_t)(c.T * s.L * c.elem);
    unsigned char *ws = case_alloc((size_t)bytes);
    memset(ws, GUARD, (size_t)bytes);
    memcpy(ws, c.kv_c, kv_c_bytes);
    a.kv_c = ws;
    memset(c.out, GUARD, c.out_bytes);
    support_expect_reject("mla_prefill", "kv_c inside the workspace", mla_prefill(&a, ws, bytes, 1),
                          MLA_ERR_INVALID_ARGUMENT, "mla_prefill: workspace overlaps kv_c");
    assert_memory_equal(ws, c.kv_c, kv_c_bytes);
    case_expect_guards(ws + kv_c_bytes, (size_t)bytes - kv_c_bytes, "kv_c in it: workspace");
    case_expect_guards(c.out, c.out_bytes, "kv_c in the workspace: out");
    free(ws);
    pcase_free(&c);
}

/* A request's length (context + new tokens) past int32 cannot be a seq_lens
 * entry of the absorbed path: refused before the MHA request next to it
 * writes its rows of out. The cache is declared with blocks of 2^31 rows
 * and never read. */
static void test_long_request(void **state)
{
    (void)state;
    enum { H = 1, L = 8, P = 4, V = 4, NEW = 600, T = NEW + 2 };
    static float q[T * H * P], kv_c[T * L], kvb[H * (P + V) * L], w_uk_t[H * P * L],
        w_uv[H * L * V];
    static uint16_t rows[64];
    for (int i = 0; i < T * H * P; i++)
        q[i] = (float)case_uniform();
    for (int i = 0; i < T * L; i++)
        kv_c[i] = (float)case_uniform();
    for (int i = 0; i < H * (P + V) * L; i++)
        kvb[i] = (float)case_uniform();
    assert_int_equal(mla_prepare_weights(kvb, MLA_DTYPE_F32, H, L, P, V, w_uk_t, w_uv,
                                         MLA_DTYPE_F32, 1), MLA_OK);
    mla_kv_cache cache = {.data = rows, .dtype = MLA_DTYPE_BF16, .num_blocks = 2,
                          .block_size = INT64_C(1) << 31, .width = L, .scale = 1.0f};
    int32_t qsl[3] = {0, 2, T}, ctx[2] = {INT32_MAX - 1, 0}, table[4] = {0, 1, 1, 0};
    pcase c = {.out_bytes = T * H * V * sizeof(float) + 2 * MARGIN};
    c.out = case_alloc(c.out_bytes);
    mla_prefill_args a = {
        .num_prefills = 2, .num_tokens = T, .num_heads = H, .kv_lora_rank = L, .rope_dim = 0,
        .qk_nope_dim = P, .v_head_dim = V, .scale = 0.3f, .dtype = MLA_DTYPE_F32,
        .query_start_loc = qsl, .context_lens = ctx, .cache = &cache, .block_table = table,
        .block_table_cols = 2, .q = q, .q_token_stride = H * P, .q_head_stride = P,
        .kv_c = kv_c, .kv_c_stride = L, .kv_b_proj = kvb, .kv_b_proj_dtype = MLA_DTYPE_F32,
        .w_uk_t = w_uk_t, .w_uv = w_uv, .w_dtype = MLA_DTYPE_F32,
        .out = (char *)c.out + MARGIN, .out_token_stride = H * V};
    assert_int_equal(mla_prefill_choose_path(&a, 0), MLA_PREFILL_PATH_ABSORBED);
    assert_int_equal(mla_prefill_choose_path(&a, 1), MLA_PREFILL_PATH_MHA);
    int64_t bytes = 0;
    assert_int_equal(mla_prefill_workspace_size(&a, 1, &bytes), MLA_OK);
    expect_reject_in(&c, "context + new tokens of a request past int32", &a, bytes,
                     MLA_ERR_OVERFLOW,
                     "request 0 has 2147483646 context + 2 new tokens, past int32");
    free(c.out);
}

/* The caller's context_workspace, allocated once, stands in for the
 * plan's own: a lean plan without a workspace gives the same bits, step
 * after step with the same buffer; without either the call is refused; a
 * context_workspace over another buffer of the call is refused, nothing
 * written. */
static void test_caller_context_workspace(void **state)
{
    (void)state;
    pcase c;
    pspec s = mixed(MLA_DTYPE_BF16, MLA_DTYPE_BF16, 16, 64);
    pcase_make(&c, &s);
    const size_t n = (size_t)(c.T * s.H * s.V) * (size_t)c.elem;
    unsigned char *owned = zalloc(n);
    const unsigned char *got = (const unsigned char *)c.out + MARGIN;
    mla_prefill_args a = pcase_args(&c, MLA_PREFILL_PATH_MHA);
    assert_int_equal(run(&c, &a, 2), MLA_OK);
    memcpy(owned, got, n);

    mla_chunk_plan *lean;
    assert_int_equal(mla_chunk_plan_create_lean(s.ctx, c.qsl, s.reqs, s.workspace_tokens,
                                                s.block_size, 0, s.dtype, &lean), MLA_OK);
    int64_t bytes, alignment;
    assert_int_equal(mla_chunk_workspace_bytes(s.workspace_tokens, s.L + s.R, s.dtype, &bytes,
                                               &alignment), MLA_OK);
    void *rows = zalloc((size_t)bytes);
    a.plan = lean;
    a.context_workspace = NULL;
    expect_reject(&c, "a plan without a workspace and context_workspace NULL", &a,
                  MLA_ERR_INVALID_ARGUMENT, "context_workspace is NULL");
    a.context_workspace = rows;
    for (int step = 0; step < 2; step++) {
        memset(rows, GUARD, (size_t)bytes); /* what the last step left */
        assert_int_equal(run(&c, &a, 2), MLA_OK);
        assert_memory_equal(owned, got, n);
    }
    a.context_workspace = (char *)c.q + c.elem; /* over q, one element in */
    expect_reject(&c, "context_workspace over q", &a, MLA_ERR_INVALID_ARGUMENT,
                  "context_workspace");
    a.context_workspace = c.cache_data;
    expect_reject(&c, "context_workspace over the cache", &a, MLA_ERR_INVALID_ARGUMENT,
                  "context_workspace");
    free(rows);
    mla_chunk_plan_destroy(lean);
    free(owned);
    pcase_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_oracle_every_dtype), cmocka_unit_test(test_chunking),
        cmocka_unit_test(test_chunked_equals_unchunked),
        cmocka_unit_test(test_caller_context_workspace), cmocka_unit_test(test_every_backend),
        cmocka_unit_test(test_choose_path), cmocka_unit_test(test_rejects),
        CASE_TEST(test_rejects_before_any_step), CASE_TEST(test_long_request),
        cmocka_unit_test(test_nan_in_later_tokens),
    };
    return cmocka_run_group_tests_name("prefill", tests, NULL, NULL);
}
