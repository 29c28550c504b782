/* The decode suites' case builder and checks (decode_cases.h says what and
 * how close). */
#include "decode_cases.h"

#include "core/dtype.h"
#include "oracle.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const mla_dtype case_q_dtypes[3] = {MLA_DTYPE_F32, MLA_DTYPE_BF16, MLA_DTYPE_F16};
const mla_dtype case_cache_dtypes[5] = {MLA_DTYPE_F32, MLA_DTYPE_BF16, MLA_DTYPE_F16,
                                        MLA_DTYPE_FP8_E4M3, MLA_DTYPE_FP8_E5M2};

/* ---- tolerances and the accuracy seen ---------------------------------------- */

double case_out_tol(mla_dtype q_dtype, int64_t len)
{
    switch (q_dtype) {
    case MLA_DTYPE_F32:
        return 1e-5 + 2e-7 * sqrt((double)len);
    case MLA_DTYPE_BF16:
        return 1e-2;
    default:
        return 2e-3;
    }
}

bool case_close(double want, double got, double tol)
{
    if (isnan(want))
        return isnan(got);
    if (isinf(want))
        return got == want;
    return fabs(got - want) <= tol;
}

static double forward_tol(mla_dtype q_dtype)
{
    return q_dtype == MLA_DTYPE_F32 ? 1e-4 : q_dtype == MLA_DTYPE_BF16 ? 4 * 0x1p-8 : 4 * 0x1p-11;
}

/* Largest |error| / max|V| (decode) or / max|out| (forward) seen per q dtype,
 * and the largest LSE error: printed, so the margins are visible. */
static double worst_out[MLA_DTYPE_COUNT], worst_fwd[MLA_DTYPE_COUNT], worst_lse;
static double worst_fwd_lse[MLA_DTYPE_COUNT];

static void note_worst(double *slot, double value)
{
    if (value > *slot)
        *slot = value;
}

/* ---- memory and values ------------------------------------------------------- */

void *case_alloc(size_t bytes)
{
    size_t n = (bytes + 64 + 63) / 64 * 64;
    void *p = aligned_alloc(64, n);
    assert_non_null(p);
    return p;
}

double case_uniform(void)
{
    return (double)(support_random() >> 11) * 0x1p-52 - 1.0;
}

/* The scale of fp8 caches (not 1, so it is applied); 1 for the others. */
static float cache_scale(mla_dtype dtype)
{
    return dtype == MLA_DTYPE_FP8_E4M3 ? 0.37f : dtype == MLA_DTYPE_FP8_E5M2 ? 1.7f : 1.0f;
}

/* Codes of 4096 uniform values in [-1, 1) per dtype, rounded by the oracle once
 * (fp8: value / cache_scale); random draws pick among them, which keeps
 * multi-megabyte caches cheap to fill. */
#define TABLE 4096
static unsigned char code_table[MLA_DTYPE_COUNT][TABLE * 2];
static bool table_built[MLA_DTYPE_COUNT];

void case_put_random(mla_dtype dtype, void *array, int64_t i)
{
    if (dtype == MLA_DTYPE_F32) {
        ((float *)array)[i] = (float)case_uniform();
        return;
    }
    if (!table_built[dtype]) {
        for (int k = 0; k < TABLE; k++)
            oracle_store(dtype, code_table[dtype], k, (float)case_uniform(),
                         cache_scale(dtype));
        table_built[dtype] = true;
    }
    size_t size = (size_t)mla_dtype_size(dtype);
    memcpy((char *)array + (size_t)i * size,
           code_table[dtype] + (support_random() % TABLE) * size, size);
}

/* n elements of junk (junk_kind). */
static void fill_junk(mla_dtype dtype, void *array, int64_t n, junk_kind kind)
{
    unsigned char codes[2][4];
    float scale = cache_scale(dtype);
    oracle_store(dtype, codes[0], 0, kind == JUNK_NAN ? NAN : 1000.0f, scale);
    oracle_store(dtype, codes[1], 0, kind == JUNK_NAN ? NAN : -1000.0f, scale);
    size_t size = (size_t)mla_dtype_size(dtype);
    for (int64_t i = 0; i < n; i++)
        memcpy((char *)array + (size_t)i * size, codes[i & 1], size);
}

static uint16_t bf16_rne(float x) /* finite x */
{
    uint32_t u = oracle_f32_bits(x);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

void case_expect_guards(const unsigned char *buf, size_t bytes, const char *what)
{
    for (size_t i = 0; i < bytes; i++)
        if (buf[i] != GUARD)
            fail_msg("%s: guard byte %zu of %zu is 0x%02x", what, i, bytes, buf[i]);
}

void *case_random_kvb(mla_dtype dtype, int64_t n, double amp)
{
    void *p = malloc((size_t)(n * mla_dtype_size(dtype)) + 1);
    for (int64_t i = 0; i < n; i++) {
        float x = (float)(case_uniform() * amp);
        if (dtype == MLA_DTYPE_F32)
            ((float *)p)[i] = x;
        else if (dtype == MLA_DTYPE_BF16)
            ((uint16_t *)p)[i] = bf16_rne(x);
        else
            oracle_store(dtype, p, i, x, 1.0f);
    }
    return p;
}

/* ---- workspaces --------------------------------------------------------------- */

unsigned char *case_guarded_workspace(int64_t bytes)
{
    unsigned char *base = case_alloc((size_t)bytes + 2 * MARGIN);
    memset(base, GUARD, (size_t)bytes + 2 * MARGIN + 64);
    return base;
}

void case_free_guarded_workspace(unsigned char *base, int64_t bytes, int64_t ws_misalign,
                                 const char *what)
{
    char text[400];
    snprintf(text, sizeof text, "%s: before the workspace", what);
    case_expect_guards(base, (size_t)(MARGIN + ws_misalign), text);
    snprintf(text, sizeof text, "%s: after the workspace of %lld bytes", what, (long long)bytes);
    case_expect_guards(base + MARGIN + ws_misalign + bytes, (size_t)(MARGIN + 64 - ws_misalign),
                       text);
    free(base);
}

/* mla_decode(a), or mla_decode_forward(f) when f is given, with a workspace
 * of exactly the queried size ws_misalign bytes past a 64-byte boundary,
 * whose guard bytes right before and after must survive the call. */
static mla_status run_in_workspace(const mla_decode_args *a, const mla_decode_forward_args *f,
                                   int threads, int64_t ws_misalign, const char *what)
{
    int64_t bytes = -1;
    mla_status st = f ? mla_decode_forward_workspace_size(f, threads, &bytes)
                      : mla_decode_workspace_size(a, threads, &bytes);
    if (st != MLA_OK)
        fail_msg("%s: %s: %s: %s", what,
                 f ? "mla_decode_forward_workspace_size" : "mla_decode_workspace_size",
                 mla_status_str(st), mla_last_error());
    assert_true(bytes >= 0);
    unsigned char *base = case_guarded_workspace(bytes);
    void *ws = base + MARGIN + ws_misalign;
    st = f ? mla_decode_forward(f, ws, bytes, threads) : mla_decode(a, ws, bytes, threads);
    case_free_guarded_workspace(base, bytes, ws_misalign, what);
    return st;
}

mla_status case_run_decode(const mla_decode_args *a, int threads, int64_t ws_misalign,
                           const char *what)
{
    return run_in_workspace(a, NULL, threads, ws_misalign, what);
}

mla_status case_run_forward(const mla_decode_forward_args *f, int threads, int64_t ws_misalign,
                            const char *what)
{
    return run_in_workspace(NULL, f, threads, ws_misalign, what);
}

mla_config case_config_of(const mla_decode_args *a)
{
    return (mla_config){.q_dtype = a->q_dtype, .cache_dtype = a->cache->dtype,
                        .kv_lora_rank = a->kv_lora_rank, .rope_dim = a->rope_dim,
                        .num_heads = a->num_heads, .block_size = a->cache->block_size,
                        .bf16_compute = a->bf16_compute};
}

mla_decode_forward_args case_forward_of(const mla_decode_args *a)
{
    return (mla_decode_forward_args){
        .num_reqs = a->num_reqs, .s_q = a->s_q, .num_heads = a->num_heads,
        .kv_lora_rank = a->kv_lora_rank, .rope_dim = a->rope_dim, .scale = a->scale,
        .dtype = a->q_dtype, .lse = a->lse, .cache = a->cache, .block_table = a->block_table,
        .block_table_cols = a->block_table_cols, .seq_lens = a->seq_lens, .sched = a->sched,
        .bf16_compute = a->bf16_compute};
}

mla_config case_config_of_forward(const mla_decode_forward_args *f)
{
    return (mla_config){.q_dtype = f->dtype, .cache_dtype = f->cache->dtype,
                        .kv_lora_rank = f->kv_lora_rank, .rope_dim = f->rope_dim,
                        .num_heads = f->num_heads, .block_size = f->cache->block_size,
                        .bf16_compute = f->bf16_compute};
}

/* Query i of a request of len rows with s_q queries sees this many rows. */
static int64_t visible(int64_t len, int64_t s_q, int64_t i)
{
    int64_t n = len - s_q + i + 1;
    return n < 0 ? 0 : n;
}

/* ---- a paged cache ------------------------------------------------------------- */

/* Blocks for B requests of lens, in a shuffled order, with 3 blocks nobody
 * uses; block-table columns past what a request needs (2 more than the
 * longest needs) hold ids far out of range, which must never be read. The
 * whole cache holds junk; pad: rows 3 elements and blocks 5 elements apart
 * beyond their contents. */
static void paged_make(paged *p, mla_dtype dtype, const int32_t *lens, int64_t B, int64_t width,
                       int64_t block_size, bool pad, int64_t misalign, junk_kind junk)
{
    int64_t total = 0, most = 0;
    for (int64_t b = 0; b < B; b++) {
        int64_t need = (lens[b] + block_size - 1) / block_size;
        total += need;
        most = need > most ? need : most;
    }
    p->cols = most + 2;
    const int64_t num_blocks = total + 3;
    int32_t *perm = malloc(sizeof(int32_t) * (size_t)num_blocks);
    for (int64_t i = 0; i < num_blocks; i++)
        perm[i] = (int32_t)i;
    for (int64_t i = num_blocks - 1; i > 0; i--) {
        int64_t j = support_random_in(0, i);
        int32_t tmp = perm[i];
        perm[i] = perm[j];
        perm[j] = tmp;
    }
    p->block_table = malloc(sizeof(int32_t) * (size_t)(B * p->cols + 1));
    int64_t k = 0;
    for (int64_t b = 0; b < B; b++) {
        int64_t need = (lens[b] + block_size - 1) / block_size;
        for (int64_t c = 0; c < p->cols; c++)
            p->block_table[b * p->cols + c] =
                c < need ? perm[k++] : (int32_t)(1000000 + c * 7919);
    }
    free(perm);
    const int64_t entry = width + (pad ? 3 : 0), block = block_size * entry + (pad ? 5 : 0);
    const int64_t n = num_blocks * block, size = mla_dtype_size(dtype);
    p->bytes = (size_t)(n * size);
    p->base = case_alloc(p->bytes);
    p->cache = (mla_kv_cache){.data = p->base + misalign * size, .dtype = dtype,
                              .num_blocks = num_blocks, .block_size = block_size, .width = width,
                              .block_stride = pad ? block : 0, .entry_stride = pad ? entry : 0,
                              .scale = cache_scale(dtype)};
    fill_junk(dtype, p->cache.data, n, junk);
}

int64_t paged_row(const paged *p, int64_t b, int64_t j)
{
    const int64_t bs = p->cache.block_size;
    return oracle_cache_row(&p->cache, p->block_table[b * p->cols + j / bs], j % bs);
}

static void paged_free(paged *p)
{
    free(p->base);
    free(p->block_table);
}

/* ---- mla_decode cases ------------------------------------------------------------ */

static const char *const form_names[] = {"concat", "split", "vllm"};

uint64_t dcase_inputs_checksum(const dcase *c)
{
    return oracle_checksum(c->pg.cache.data, c->pg.bytes) ^
           (oracle_checksum(c->qn_base, c->qn_bytes) * 3) ^
           (oracle_checksum(c->qp_base, c->qp_bytes) * 5);
}

void dcase_store_q(dcase *c, int64_t t, int64_t h, int64_t d, float x)
{
    const mla_decode_args *a = &c->args;
    const int64_t L = a->kv_lora_rank;
    if (d < L)
        oracle_store(a->q_dtype, (void *)a->q_nope,
                     t * a->q_nope_token_stride + h * a->q_nope_head_stride + d, x, 1.0f);
    else
        oracle_store(a->q_dtype, (void *)a->q_pe,
                     t * a->q_pe_token_stride + h * a->q_pe_head_stride + d - L, x, 1.0f);
}

void dcase_inputs_changed(dcase *c)
{
    c->inputs_sum = dcase_inputs_checksum(c);
    dcase_oracle(c);
}

void dspec_edge_lens(dspec *s)
{
    const int32_t bs = (int32_t)s->block_size;
    const int32_t lens[6] = {0, 1, bs - 1, bs, bs + 1, (int32_t)support_random_in(2, 300)};
    s->num_reqs = 6;
    memcpy(s->lens, lens, sizeof lens);
}

static void make_q(dcase *c)
{
    const dspec *s = &c->s;
    const int64_t Td = s->num_reqs * s->s_q, H = s->H, L = s->L, R = s->R, D = L + R;
    const int64_t size = mla_dtype_size(s->q_dtype), off = s->misalign * size;
    mla_decode_args *a = &c->args;
    int64_t nn = 0, np = 0; /* elements of each buffer */
    switch (s->form) {
    case Q_CONCAT:
        a->q_nope_head_stride = a->q_pe_head_stride = D + (s->pad ? 3 : 0);
        a->q_nope_token_stride = a->q_pe_token_stride =
            H * a->q_nope_head_stride + (s->pad ? 1 : 0);
        nn = Td * a->q_nope_token_stride;
        break;
    case Q_SPLIT:
        a->q_nope_head_stride = L + 5;
        a->q_nope_token_stride = H * (L + 5) + 2;
        a->q_pe_head_stride = R + 1;
        a->q_pe_token_stride = H * (R + 1) + 7;
        nn = Td * a->q_nope_token_stride;
        np = Td * a->q_pe_token_stride;
        break;
    case Q_VLLM: {
        const int64_t P = 16; /* the un-absorbed q_nope in front of q_pe: junk here */
        a->q_nope_head_stride = Td * L;
        a->q_nope_token_stride = L;
        a->q_pe_head_stride = P + R;
        a->q_pe_token_stride = H * (P + R);
        nn = H * Td * L;
        np = Td * H * (P + R);
        break;
    }
    }
    c->qn_bytes = (size_t)((nn + 1) * size);
    c->qn_base = case_alloc(c->qn_bytes);
    memset(c->qn_base, GUARD, c->qn_bytes);
    fill_junk(s->q_dtype, (char *)c->qn_base + off, nn, s->junk);
    a->q_nope = (char *)c->qn_base + off;
    if (np > 0) {
        c->qp_bytes = (size_t)((np + 1) * size);
        c->qp_base = case_alloc(c->qp_bytes);
        memset(c->qp_base, GUARD, c->qp_bytes);
        fill_junk(s->q_dtype, (char *)c->qp_base + off, np, s->junk);
    }
    a->q_pe = s->form == Q_CONCAT ? (const char *)a->q_nope + L * size
              : s->form == Q_SPLIT ? (const char *)c->qp_base + off
                                   : (const char *)c->qp_base + off + 16 * size;
    if (R == 0)
        a->q_pe = NULL;
    for (int64_t t = 0; t < Td; t++)
        for (int64_t h = 0; h < H; h++) {
            for (int64_t d = 0; d < L; d++)
                case_put_random(s->q_dtype, (void *)a->q_nope,
                                t * a->q_nope_token_stride + h * a->q_nope_head_stride + d);
            for (int64_t d = 0; d < R; d++)
                case_put_random(s->q_dtype, (void *)a->q_pe,
                                t * a->q_pe_token_stride + h * a->q_pe_head_stride + d);
        }
}

void dcase_reset_outputs(dcase *c)
{
    memset(c->out_buf, GUARD, c->out_bytes);
    memset(c->lse_buf, GUARD, c->lse_bytes);
}

void dcase_oracle(dcase *c)
{
    const dspec *s = &c->s;
    const int64_t Td = s->num_reqs * s->s_q;
    free(c->want_out);
    free(c->want_lse);
    free(c->max_v);
    free(c->max_k);
    c->want_out = malloc(sizeof(double) * (size_t)(Td * s->H * s->L + 1));
    c->want_lse = malloc(sizeof(double) * (size_t)(s->num_reqs * s->H * s->s_q + 1));
    c->max_v = malloc(sizeof(double) * (size_t)(s->num_reqs + 1));
    c->max_k = malloc(sizeof(double) * (size_t)(s->num_reqs + 1));
    oracle_decode_latent(&c->args, c->want_out, c->want_lse);
    for (int64_t b = 0; b < s->num_reqs; b++) {
        double mv = 0.0, mk = 0.0;
        for (int64_t j = 0; j < c->lens[b]; j++) {
            int64_t at = paged_row(&c->pg, b, j);
            for (int64_t d = 0; d < s->L + s->R; d++) {
                double v = fabs(oracle_load_table(s->cache_dtype, c->pg.cache.data, at + d,
                                                  c->pg.cache.scale));
                v = isfinite(v) ? v : 0.0; /* tolerances scale with finite values */
                mv = d < s->L && v > mv ? v : mv;
                mk = v > mk ? v : mk;
            }
        }
        c->max_v[b] = mv;
        c->max_k[b] = mk;
    }
}

void dcase_make(dcase *c, const dspec *s, bool with_oracle)
{
    memset(c, 0, sizeof *c);
    c->s = *s;
    const int64_t B = s->num_reqs, Td = B * s->s_q, H = s->H, L = s->L, D = s->L + s->R;
    c->lens = malloc(sizeof(int32_t) * (size_t)(B + 1));
    memcpy(c->lens, s->lens, sizeof(int32_t) * (size_t)B);
    paged_make(&c->pg, s->cache_dtype, c->lens, B, D, s->block_size, s->pad, s->misalign,
               s->junk);
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < c->lens[b]; j++) {
            int64_t at = paged_row(&c->pg, b, j);
            for (int64_t d = 0; d < D; d++)
                case_put_random(s->cache_dtype, c->pg.cache.data, at + d);
        }
    mla_decode_args *a = &c->args;
    *a = (mla_decode_args){.num_reqs = B, .s_q = s->s_q, .num_heads = H, .kv_lora_rank = L,
                           .rope_dim = s->R, .scale = 1.7f / sqrtf((float)D),
                           .q_dtype = s->q_dtype, .cache = &c->pg.cache,
                           .block_table = c->pg.block_table, .block_table_cols = c->pg.cols,
                           .seq_lens = c->lens, .sched = s->sched,
                           .bf16_compute = s->bf16_compute};
    make_q(c);
    const int64_t size = mla_dtype_size(s->q_dtype);
    a->out_head_stride = L + (s->pad ? 3 : 0);
    a->out_token_stride = H * a->out_head_stride + (s->pad ? 5 : 0);
    int64_t n_out =
        Td > 0 ? (Td - 1) * a->out_token_stride + (H - 1) * a->out_head_stride + L : 0;
    c->out_bytes = (size_t)((n_out + s->misalign) * size + 2 * MARGIN);
    c->out_buf = case_alloc(c->out_bytes);
    a->out = c->out_buf + MARGIN + s->misalign * size;
    c->lse_bytes = (size_t)(B * H * s->s_q) * sizeof(float) + 2 * MARGIN;
    c->lse_buf = case_alloc(c->lse_bytes);
    a->lse = s->lse ? (float *)(c->lse_buf + MARGIN) : NULL;
    dcase_reset_outputs(c);
    c->inputs_sum = dcase_inputs_checksum(c);
    snprintf(c->label, sizeof c->label,
             "q %s, cache %s, B %lld, s_q %lld, H %lld, L %lld, R %lld, bs %lld, q %s%s%s, "
             "%d threads", mla_dtype_name(s->q_dtype), mla_dtype_name(s->cache_dtype),
             (long long)B, (long long)s->s_q, (long long)H, (long long)L, (long long)s->R,
             (long long)s->block_size, form_names[s->form], s->pad ? ", padded" : "",
             s->lse ? ", lse" : "", s->threads);
    if (with_oracle)
        dcase_oracle(c);
}

void dcase_free(dcase *c)
{
    paged_free(&c->pg);
    free(c->lens);
    free(c->qn_base);
    free(c->qp_base);
    free(c->out_buf);
    free(c->lse_buf);
    free(c->want_out);
    free(c->want_lse);
    free(c->max_v);
    free(c->max_k);
}

void dcase_decode(dcase *c, const char *backend, int threads, int64_t ws_misalign)
{
    dcase_reset_outputs(c);
    mla_status st = case_run_decode(&c->args, threads, ws_misalign, c->label);
    if (st != MLA_OK)
        fail_msg("%s: %s: mla_decode: %s: %s", backend, c->label, mla_status_str(st),
                 mla_last_error());
}

/* The guards of an lse buffer: all of it without lse, the margins with. */
static void expect_lse_guards(const unsigned char *buf, size_t bytes, bool written,
                              const char *what)
{
    if (written) {
        case_expect_guards(buf, MARGIN, what);
        case_expect_guards(buf + bytes - MARGIN, MARGIN, what);
    } else {
        case_expect_guards(buf, bytes, what);
    }
}

/* Whether backend computes c in bf16 from operands of other dtypes: q
 * (f32, opted in) and the keys (fp8, or f32 and f16 opted in). */
typedef struct rounding {
    bool q, keys;
} rounding;

static rounding rounding_of(const dcase *c, const char *backend)
{
    const mla_decode_args *a = &c->args;
    const mla_config cfg = case_config_of(a);
    const char *route = mla_backend_route(backend, &cfg);
    if (!route || strcmp(route, "f32") == 0)
        return (rounding){false, false};
    return (rounding){a->q_dtype == MLA_DTYPE_F32, a->cache->dtype != MLA_DTYPE_BF16};
}

/* The dtype whose output tolerance applies: bf16 where q was rounded to it. */
static mla_dtype tol_dtype(const dcase *c, const char *backend)
{
    return rounding_of(c, backend).q ? MLA_DTYPE_BF16 : c->args.q_dtype;
}

/* The lse bound for query row (token t, head h) of request b. A route that
 * computes in bf16 rounds q and keys of other dtypes to bf16 (relative
 * error 2^-9 each), which moves every score by at most 2^-9 |scale|
 * sum_d |q_d| max|K| per rounded operand, and the lse by no more than the
 * largest score moves. */
static double lse_tol_of(const dcase *c, const char *backend, int64_t b, int64_t t, int64_t h)
{
    const mla_decode_args *a = &c->args;
    const rounding r = rounding_of(c, backend);
    if (!r.q && !r.keys)
        return LSE_TOL;
    double q1 = 0.0;
    for (int64_t d = 0; d < a->kv_lora_rank; d++)
        q1 += fabs(oracle_load_table(a->q_dtype, a->q_nope,
                                     t * a->q_nope_token_stride + h * a->q_nope_head_stride + d, 1.0f));
    for (int64_t d = 0; d < a->rope_dim; d++)
        q1 += fabs(oracle_load_table(a->q_dtype, a->q_pe,
                                     t * a->q_pe_token_stride + h * a->q_pe_head_stride + d, 1.0f));
    return LSE_TOL + (r.q + r.keys) * 0x1p-9 * fabs((double)a->scale) * q1 * c->max_k[b];
}

/* Whether the call's schedule may split a request (decode_cases.h). */
static bool may_split(const mla_decode_args *a)
{
    return !a->sched || a->sched->num_parts != 1;
}

void dcase_check(const dcase *c, const char *backend)
{
    const mla_decode_args *a = &c->args;
    const int64_t H = a->num_heads, L = a->kv_lora_rank, s_q = a->s_q;
    const int64_t size = mla_dtype_size(a->q_dtype);
    unsigned char *mask = malloc(c->out_bytes);
    memcpy(mask, c->out_buf, c->out_bytes);
    for (int64_t b = 0; b < a->num_reqs; b++) {
        const int64_t len = c->lens[b];
        const mla_dtype td = tol_dtype(c, backend);
        const double row_tol = case_out_tol(td, len) * c->max_v[b];
        for (int64_t i = 0; i < s_q; i++) {
            const int64_t t = b * s_q + i, n = visible(len, s_q, i);
            for (int64_t h = 0; h < H; h++) {
                const int64_t at = t * a->out_token_stride + h * a->out_head_stride;
                const double want_lse = c->want_lse[(b * H + h) * s_q + i];
                const double tol = row_tol + (may_split(a) && isfinite(want_lse)
                                                  ? LSE_REL_TOL * fabs(want_lse) * c->max_v[b]
                                                  : 0.0);
                double worst = 0.0;
                for (int64_t l = 0; l < L; l++) {
                    float got = oracle_load(a->q_dtype, a->out, at + l, 1.0f);
                    double want = c->want_out[(t * H + h) * L + l];
                    if (n == 0) {
                        if (got != 0.0f)
                            fail_msg("%s: %s: request %lld (len %lld) query %lld sees no key: "
                                     "out[%lld][%lld][%lld] = %g, want 0", backend, c->label,
                                     (long long)b, (long long)len, (long long)i, (long long)t,
                                     (long long)h, (long long)l, got);
                        continue;
                    }
                    double err = isfinite(want) ? fabs((double)got - want) : 0.0;
                    if (!case_close(want, got, tol))
                        fail_msg("%s: %s: request %lld (len %lld) query %lld: "
                                 "out[%lld][%lld][%lld] = %.9g, want %.9g: |err| %.3g > %.3g x "
                                 "max|V| %.4g", backend, c->label, (long long)b, (long long)len,
                                 (long long)i, (long long)t, (long long)h, (long long)l, got,
                                 want, err, tol / c->max_v[b], c->max_v[b]);
                    worst = err > worst ? err : worst;
                }
                if (n > 0 && c->max_v[b] > 0)
                    note_worst(&worst_out[td], worst / c->max_v[b]);
                memset(mask + ((unsigned char *)a->out - c->out_buf) + at * size, GUARD,
                       (size_t)(L * size));
                if (a->lse) {
                    float got = a->lse[(b * H + h) * s_q + i];
                    double want = want_lse;
                    if (n == 0) {
                        if (!(isinf(got) && got < 0))
                            fail_msg("%s: %s: request %lld (len %lld) query %lld head %lld "
                                     "sees no key: lse %g, want -inf", backend, c->label,
                                     (long long)b, (long long)len, (long long)i, (long long)h,
                                     got);
                        continue;
                    }
                    double err = isfinite(want) ? fabs((double)got - want) : 0.0;
                    double lse_tol = lse_tol_of(c, backend, b, b * s_q + i, h) +
                                     (isfinite(want) ? LSE_REL_TOL * fabs(want) : 0.0);
                    if (!case_close(want, got, lse_tol))
                        fail_msg("%s: %s: request %lld (len %lld) query %lld head %lld: "
                                 "lse %.9g, want %.9g (|err| %.3g > %g)", backend, c->label,
                                 (long long)b, (long long)len, (long long)i, (long long)h, got,
                                 want, err, lse_tol);
                    note_worst(&worst_lse, err);
                }
            }
        }
    }
    if (dcase_inputs_checksum(c) != c->inputs_sum)
        fail_msg("%s: %s: the cache or q changed", backend, c->label);
    char what[300];
    snprintf(what, sizeof what, "%s: %s: out buffer (%lld-byte margin)", backend, c->label,
             (long long)MARGIN);
    case_expect_guards(mask, c->out_bytes, what);
    free(mask);
    snprintf(what, sizeof what, "%s: %s: lse buffer", backend, c->label);
    expect_lse_guards(c->lse_buf, c->lse_bytes, a->lse != NULL, what);
}

void dcase_run_on(dcase *c, const mla_backend_desc *b, int threads, int64_t ws_misalign)
{
    dcase_decode(c, b->name, threads, ws_misalign);
    support_expect_ran(b);
    dcase_check(c, b->name);
}

void dcase_print_accuracy(void)
{
    print_message("[ ACCURACY ] decode, worst |out - oracle| / max|V|: f32 %.2e (tol >= %.0e), "
                  "bf16 %.2e (tol %.0e), f16 %.2e (tol %.0e); worst |lse - oracle| %.2e "
                  "(tol %.0e, more where q or keys are rounded to bf16)\n", worst_out[MLA_DTYPE_F32], case_out_tol(MLA_DTYPE_F32, 0),
                  worst_out[MLA_DTYPE_BF16], case_out_tol(MLA_DTYPE_BF16, 0),
                  worst_out[MLA_DTYPE_F16], case_out_tol(MLA_DTYPE_F16, 0), worst_lse, LSE_TOL);
}

/* ---- mla_decode_forward cases ------------------------------------------------------ */

static uint64_t forward_inputs_checksum(const fcase *c)
{
    return oracle_checksum(c->pg.cache.data, c->pg.bytes) ^
           (oracle_checksum(c->q, c->q_bytes) * 3) ^
           (oracle_checksum(c->w_uk_t, c->uk_bytes) * 5) ^
           (oracle_checksum(c->w_uv, c->uv_bytes) * 7);
}

/* The cache of c->pg, written by mla_concat_and_cache from random f32 kv_c
 * and k_pe, as a server fills it. */
static void fill_cache_as_server(fcase *c)
{
    const fspec *s = &c->s;
    const int64_t L = s->L, R = s->R;
    int64_t tokens = 0;
    for (int64_t b = 0; b < s->num_reqs; b++)
        tokens += c->lens[b];
    float *kv_c = malloc(sizeof(float) * (size_t)(tokens * L + 1));
    float *k_pe = malloc(sizeof(float) * (size_t)(tokens * R + 1));
    int64_t *slots = malloc(sizeof(int64_t) * (size_t)(tokens + 1));
    for (int64_t i = 0; i < tokens * L; i++)
        kv_c[i] = (float)case_uniform();
    for (int64_t i = 0; i < tokens * R; i++)
        k_pe[i] = (float)case_uniform();
    int64_t t = 0;
    for (int64_t b = 0; b < s->num_reqs; b++)
        for (int64_t j = 0; j < c->lens[b]; j++)
            slots[t++] =
                (int64_t)c->pg.block_table[b * c->pg.cols + j / s->block_size] * s->block_size +
                j % s->block_size;
    mla_status st = mla_concat_and_cache(&c->pg.cache, kv_c, L, R ? k_pe : NULL, R,
                                         MLA_DTYPE_F32, L, R, slots, tokens, 0);
    if (st != MLA_OK)
        fail_msg("mla_concat_and_cache: %s: %s", mla_status_str(st), mla_last_error());
    free(kv_c);
    free(k_pe);
    free(slots);
}

/* kv_b_proj, its values as w_dtype holds them (what the oracle gets) and
 * the prepared weights. */
static void make_weights(fcase *c)
{
    const fspec *s = &c->s;
    const int64_t H = s->H, L = s->L, P = s->P, V = s->V, nw = H * (P + V) * L;
    /* k_nope = W_k c has variance ~ 1/3 of c's */
    c->kvb = case_random_kvb(s->kvb_dtype, nw, sqrt(3.0 / (double)L));
    c->w_eff = malloc(sizeof(float) * (size_t)nw);
    for (int64_t i = 0; i < nw; i++) {
        float x = oracle_load(s->kvb_dtype, c->kvb, i, 1.0f);
        c->w_eff[i] = s->w_dtype == MLA_DTYPE_BF16
                          ? oracle_f32_from((uint32_t)bf16_rne(x) << 16)
                          : x;
    }
    const int64_t wsize = mla_dtype_size(s->w_dtype);
    c->uk_bytes = (size_t)(H * P * L * wsize);
    c->uv_bytes = (size_t)(H * L * V * wsize);
    c->w_uk_t = case_alloc(c->uk_bytes);
    c->w_uv = case_alloc(c->uv_bytes);
    mla_status st = mla_prepare_weights(c->kvb, s->kvb_dtype, H, L, P, V, c->w_uk_t, c->w_uv,
                                        s->w_dtype, s->threads);
    if (st != MLA_OK)
        fail_msg("mla_prepare_weights: %s: %s", mla_status_str(st), mla_last_error());
}

/* The oracle's out and lse, fed the same quantized inputs, max|out| per
 * request, and each lse's bound. */
static void forward_oracle(fcase *c)
{
    const fspec *s = &c->s;
    const mla_decode_forward_args *f = &c->f;
    const int64_t B = s->num_reqs, Td = B * s->s_q, H = s->H, L = s->L, P = s->P, V = s->V;
    c->want_out = malloc(sizeof(double) * (size_t)(Td * H * V + 1));
    c->want_lse = malloc(sizeof(double) * (size_t)(B * H * s->s_q + 1));
    c->max_out = calloc((size_t)B + 1, sizeof(double));
    double *o_lat = malloc(sizeof(double) * (size_t)(Td * H * L + 1));
    oracle_decode_mha(f, c->w_eff, c->want_out, c->want_lse, o_lat);
    for (int64_t i = 0; i < Td * H * V; i++) {
        int64_t b = i / (s->s_q * H * V);
        c->max_out[b] = fabs(c->want_out[i]) > c->max_out[b] ? fabs(c->want_out[i]) : c->max_out[b];
    }
    /* lse bound: the call keeps ql_nope in q's dtype, rounding each ql_l by
     * at most u |ql_l| (u = 2^-8 bf16, 2^-11 f16, 0 f32); to first order
     * that moves the lse by scale * sum_l dql_l o_lat_l (o_lat = the softmax
     * mean of the latents), whose standard deviation is at most
     * scale * u / sqrt(3) * |ql o_lat|_2. Allowed: LSE_TOL + 4 sigma. */
    const double u = s->q_dtype == MLA_DTYPE_BF16 ? 0x1p-8
                     : s->q_dtype == MLA_DTYPE_F16 ? 0x1p-11
                                                   : 0.0;
    c->lse_tol = malloc(sizeof(double) * (size_t)(B * H * s->s_q + 1));
    for (int64_t t = 0; t < Td; t++)
        for (int64_t h = 0; h < H; h++) {
            double sum = 0.0;
            for (int64_t l = 0; l < L; l++) {
                double ql = 0.0; /* the absorbed query, in double */
                for (int64_t p = 0; p < P; p++)
                    ql += (double)oracle_load(s->q_dtype, c->q,
                                              t * f->q_token_stride + h * f->q_head_stride + p,
                                              1.0f) *
                          c->w_eff[(h * (P + V) + p) * L + l];
                double x = ql * o_lat[(t * H + h) * L + l];
                sum += x * x;
            }
            int64_t b = t / s->s_q, i = t % s->s_q;
            c->lse_tol[(b * H + h) * s->s_q + i] =
                LSE_TOL + 4.0 * (double)f->scale * u / sqrt(3.0) * sqrt(sum);
        }
    free(o_lat);
}

void fcase_make(fcase *c, const fspec *s)
{
    memset(c, 0, sizeof *c);
    c->s = *s;
    const int64_t B = s->num_reqs, Td = B * s->s_q, H = s->H, L = s->L, R = s->R, P = s->P;
    const int64_t V = s->V;
    c->lens = malloc(sizeof(int32_t) * (size_t)B);
    memcpy(c->lens, s->lens, sizeof(int32_t) * (size_t)B);
    paged_make(&c->pg, s->cache_dtype, c->lens, B, L + R, s->block_size, s->pad, 0, JUNK_BIG);
    fill_cache_as_server(c);
    make_weights(c);
    /* q [Td, H, P+R], padded heads and tokens, junk in the gaps */
    mla_decode_forward_args *f = &c->f;
    f->qk_nope_dim = P;
    f->v_head_dim = V;
    f->q_head_stride = P + R + (s->pad ? 2 : 0);
    f->q_token_stride = H * f->q_head_stride + (s->pad ? 3 : 0);
    const int64_t nq = Td * f->q_token_stride;
    c->q_bytes = (size_t)(nq * mla_dtype_size(s->q_dtype));
    c->q = case_alloc(c->q_bytes);
    fill_junk(s->q_dtype, c->q, nq, JUNK_BIG);
    for (int64_t t = 0; t < Td; t++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t d = 0; d < P + R; d++)
                case_put_random(s->q_dtype, c->q, t * f->q_token_stride + h * f->q_head_stride + d);
    f->q = c->q;
    f->w_uk_t = c->w_uk_t;
    f->w_uv = c->w_uv;
    f->w_dtype = s->w_dtype;
    f->out_token_stride = H * V + (s->pad ? 5 : 0);
    const int64_t size = mla_dtype_size(s->q_dtype);
    c->out_bytes =
        (size_t)((Td > 0 ? (Td - 1) * f->out_token_stride + H * V : 0) * size) + 2 * MARGIN;
    c->out_buf = case_alloc(c->out_bytes);
    f->out = c->out_buf + MARGIN;
    c->lse_bytes = (size_t)(B * H * s->s_q) * sizeof(float) + 2 * MARGIN;
    c->lse_buf = case_alloc(c->lse_bytes);
    f->num_reqs = B;
    f->s_q = s->s_q;
    f->num_heads = H;
    f->kv_lora_rank = L;
    f->rope_dim = R;
    f->scale = 2.0f / sqrtf((float)(P + R));
    f->dtype = s->q_dtype;
    f->cache = &c->pg.cache;
    f->block_table = c->pg.block_table;
    f->block_table_cols = c->pg.cols;
    f->seq_lens = c->lens;
    f->lse = s->lse ? (float *)(c->lse_buf + MARGIN) : NULL;
    snprintf(c->label, sizeof c->label,
             "forward: q %s, cache %s, kv_b_proj %s -> w %s, B %lld, s_q %lld, H %lld, L %lld, "
             "R %lld, P %lld, V %lld, bs %lld%s", mla_dtype_name(s->q_dtype),
             mla_dtype_name(s->cache_dtype), mla_dtype_name(s->kvb_dtype),
             mla_dtype_name(s->w_dtype), (long long)B, (long long)s->s_q, (long long)H,
             (long long)L, (long long)R, (long long)P, (long long)V, (long long)s->block_size,
             s->pad ? ", padded" : "");
    c->inputs_sum = forward_inputs_checksum(c);
    forward_oracle(c);
}

void fcase_free(fcase *c)
{
    paged_free(&c->pg);
    free(c->lens);
    free(c->w_eff);
    free(c->kvb);
    free(c->w_uk_t);
    free(c->w_uv);
    free(c->q);
    free(c->out_buf);
    free(c->lse_buf);
    free(c->want_out);
    free(c->want_lse);
    free(c->max_out);
    free(c->lse_tol);
}

void fcase_check(const fcase *c, const char *backend)
{
    const mla_decode_forward_args *f = &c->f;
    const int64_t H = c->s.H, V = c->s.V, s_q = c->s.s_q, size = mla_dtype_size(c->s.q_dtype);
    const double rel = forward_tol(c->s.q_dtype);
    unsigned char *mask = malloc(c->out_bytes);
    memcpy(mask, c->out_buf, c->out_bytes);
    for (int64_t b = 0; b < c->s.num_reqs; b++) {
        const int64_t len = c->lens[b];
        for (int64_t i = 0; i < s_q; i++) {
            const int64_t t = b * s_q + i, n = visible(len, s_q, i);
            double worst = 0.0;
            for (int64_t e = 0; e < H * V; e++) {
                float got = oracle_load(c->s.q_dtype, f->out, t * f->out_token_stride + e, 1.0f);
                double want = c->want_out[t * H * V + e], err = fabs((double)got - want);
                bool bad = n == 0 ? got != 0.0f : !(err <= rel * c->max_out[b]);
                if (bad)
                    fail_msg("%s: %s: request %lld (len %lld) query %lld: out[%lld][%lld] "
                             "(head %lld, v %lld) = %.9g, want %.9g: |err| %.3g > %.0e x "
                             "max|out| %.4g", backend, c->label, (long long)b, (long long)len,
                             (long long)i, (long long)t, (long long)e, (long long)(e / V),
                             (long long)(e % V), got, want, err, rel, c->max_out[b]);
                worst = err > worst ? err : worst;
            }
            if (n > 0 && c->max_out[b] > 0)
                note_worst(&worst_fwd[c->s.q_dtype], worst / c->max_out[b]);
            memset(mask + MARGIN + t * f->out_token_stride * size, GUARD, (size_t)(H * V * size));
            for (int64_t h = 0; f->lse && h < H; h++) {
                float got = f->lse[(b * H + h) * s_q + i];
                double want = c->want_lse[(b * H + h) * s_q + i];
                /* ql_nope is kept in q's dtype (as vLLM does), so a 16-bit
                 * forward's logits, and its lse, carry that rounding: a
                 * per-row bound (forward_oracle) */
                double lse_tol = c->lse_tol[(b * H + h) * s_q + i];
                double err = fabs((double)got - want);
                if (n > 0)
                    note_worst(&worst_fwd_lse[c->s.q_dtype], err / lse_tol);
                if (n == 0 ? !(isinf(got) && got < 0) : !(err <= lse_tol))
                    fail_msg("%s: %s: request %lld (len %lld) query %lld head %lld: lse %.9g, "
                             "want %.9g (|err| %.3g > %.3g)", backend, c->label, (long long)b,
                             (long long)len, (long long)i, (long long)h, got, want, err,
                             lse_tol);
            }
        }
    }
    if (forward_inputs_checksum(c) != c->inputs_sum)
        fail_msg("%s: %s: the cache, q or the weights changed", backend, c->label);
    char what[300];
    snprintf(what, sizeof what, "%s: %s: out buffer", backend, c->label);
    case_expect_guards(mask, c->out_bytes, what);
    free(mask);
    snprintf(what, sizeof what, "%s: %s: lse buffer", backend, c->label);
    expect_lse_guards(c->lse_buf, c->lse_bytes, f->lse != NULL, what);
}

void fcase_print_accuracy(void)
{
    print_message("[ ACCURACY ] forward, worst |out - oracle| / max|out|: f32 %.2e (tol %.1e), "
                  "bf16 %.2e (tol %.1e), f16 %.2e (tol %.1e)\n", worst_fwd[MLA_DTYPE_F32],
                  forward_tol(MLA_DTYPE_F32), worst_fwd[MLA_DTYPE_BF16],
                  forward_tol(MLA_DTYPE_BF16), worst_fwd[MLA_DTYPE_F16],
                  forward_tol(MLA_DTYPE_F16));
    print_message("[ ACCURACY ] forward, worst |lse - oracle| / its bound: f32 %.2f, bf16 %.2f, "
                  "f16 %.2f\n", worst_fwd_lse[MLA_DTYPE_F32], worst_fwd_lse[MLA_DTYPE_BF16],
                  worst_fwd_lse[MLA_DTYPE_F16]);
}

/* ---- suites ----------------------------------------------------------------------- */

int case_unforce(void **state)
{
    (void)state;
    for (int op = 0; op < MLA_OP_COUNT; op++)
        if (mla_force_backend((mla_op)op, NULL) != MLA_OK)
            return -1;
    return 0;
}

void case_label_add(char *label, size_t size, const char *format, ...)
{
    va_list args;
    va_start(args, format);
    size_t used = strlen(label);
    vsnprintf(label + used, size - used, format, args);
    va_end(args);
}

void case_apply_filter(void)
{
    if (getenv("TDEC_FILTER"))
        cmocka_set_test_filter(getenv("TDEC_FILTER"));
}
