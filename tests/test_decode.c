/*
 * Absorbed MLA decode (SPEC §1.3, §1.6, §5, §8) on every backend this CPU can
 * run, forced in turn:
 *   - mla_decode against a double-precision latent oracle
 *     (oracle_decode_latent: plain loops over the cache rows as stored);
 *   - mla_decode_forward against the non-absorbed oracle of SPEC §1.7 item 7
 *     (oracle_decode_mha: k_nope and v up-projected per head, plain
 *     attention), so the absorption identities are tested too;
 *   - mla_prepare_weights bit for bit;
 *   - split-KV schedules (thread counts, num_parts, the LSE combine) and the
 *     batch-invariant mode (bit-identical across threads and batches);
 *   - bad input (a status, a message, nothing written), workspace sizing
 *     (exact bytes, guard bytes, unaligned pointers).
 * Outputs live in buffers with guard bytes around and between rows; memory
 * the kernels must not read (q padding, cache padding, rows past seq_len,
 * block-table columns past ceil(len / bs), unused blocks) holds values that
 * would spoil any result they got into (+-1000, or NaN in one test).
 *
 * Tolerances (checked element by element; a NaN fails). u is the unit
 * roundoff of a 16-bit dtype: 2^-8 for bf16 (8 significant bits), 2^-11 for
 * f16 (11).
 *   out, mla_decode: |got - oracle| <= tol(q_dtype, len) * max|V| of the
 *     request (max over its rows of |row[0:L]|, dequantized). The oracle
 *     reads the cache as stored (fp8 dequantized with its scale), so every
 *     cache dtype gets the tolerance of its q/out dtype:
 *       f32:  1e-5 + 2e-7 * sqrt(len). Logits are f32 dot products of up to
 *             576 terms |q k| <= 1: a rounding walk of ~2^-24 * 0.5 * D /
 *             sqrt(2) ~ 1e-5 on the dot product, ~1e-6 after the scale; the
 *             softmax turns logit errors d_j into output errors below
 *             2 max|d| max|V|; the P.V and normaliser sums over len rows add a
 *             walk ~ 2^-24 sqrt(len) max|V|. 1e-5 is ~10x that at 512+64; the
 *             sqrt(len) term covers 8K rows (2.8e-5 at 8192).
 *       bf16: 1e-2 (2.56 u): out rounded to bf16 (<= u of |out| <= max|V|),
 *             and P may be rounded to bf16 for a bf16 dot product
 *             (vdpbf16ps), <= u of the weighted sum.
 *       f16:  2e-3 (4 u), for the same two roundings.
 *     A query that sees no key must get exactly 0.
 *   lse, mla_decode: |got - oracle| <= 1e-4 absolute for every q dtype (the
 *     logits are f32 dot products of the stored q values, whatever their
 *     dtype: ~1e-6 as above, and the lse's own rounding ~1e-6); a query that
 *     sees no key must get exactly -inf.
 *   out, mla_decode_forward: |got - oracle| <= tol * max|out| of the
 *     request. f32: 1e-4 (two extra GEMMs with f32 accumulation, ql_nope
 *     over P and out over L, each ~2^-24 sqrt(n) relative). 16-bit q: 4 u
 *     (1.6e-2 bf16, 2e-3 f16): the call keeps ql_nope and o_lat in q's dtype
 *     as vLLM does, so ql_nope, o_lat and out are each rounded (<= u), plus
 *     the logit shift the rounded ql_nope causes. The oracle gets the same
 *     quantized inputs as the library (weights rounded to w_dtype, the cache
 *     as mla_concat_and_cache stored it, q in its dtype), so input
 *     quantization needs no allowance.
 *   lse, mla_decode_forward: 1e-4 plus, for 16-bit q, a per-row bound on
 *     the shift from rounding ql_nope: to first order dlse = scale *
 *     sum_l dql_l o_lat_l with |dql_l| <= u |ql_l|, standard deviation
 *     <= scale * u / sqrt(3) * |ql o_lat|_2; 4 of those are allowed.
 * Worst errors seen (x86: avx512_bf16, avx512, avx2, ref; AArch64 under
 * qemu: neon, ref), printed as [ ACCURACY ] lines: decode out / max|V| f32
 * 4.5e-7, bf16 2.0e-3, f16 2.4e-4, lse 8.3e-7; forward out / max|out| f32
 * 1.2e-6, bf16 4.8e-3, f16 3.5e-4; forward 16-bit lse at 0.44 of its bound.
 *
 * Debugging aids: TDEC_FILTER=<cmocka pattern> runs matching tests only;
 * TDEC_SHOW=1 prints every rejection message.
 */
#include "oracle.h"
#include "support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define COUNT(a) (int)(sizeof(a) / sizeof((a)[0]))
#define GUARD 0xab
#define MARGIN 64 /* guard bytes before and after every output buffer */
#define LSE_TOL 1e-4

static const mla_dtype q_dtypes[] = {MLA_DTYPE_F32, MLA_DTYPE_BF16, MLA_DTYPE_F16};
static const mla_dtype cache_dtypes[] = {MLA_DTYPE_F32, MLA_DTYPE_BF16, MLA_DTYPE_F16,
                                         MLA_DTYPE_FP8_E4M3, MLA_DTYPE_FP8_E5M2};

/* ---- tolerances and the accuracy seen ------------------------------------------ */

static double out_tol(mla_dtype q_dtype, int64_t len)
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

/* ---- memory and values ---------------------------------------------------------- */

/* 64-byte aligned, with 64 bytes of slack for deliberately misaligned views. */
static void *xalloc(size_t bytes)
{
    size_t n = (bytes + 64 + 63) / 64 * 64;
    void *p = aligned_alloc(64, n);
    assert_non_null(p);
    return p;
}

static double uniform(void) /* [-1, 1) */
{
    return (double)(support_random() >> 11) * 0x1p-52 - 1.0;
}

/* The scale of fp8 caches (not 1, so it is applied). */
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

static void put_random(mla_dtype dtype, void *array, int64_t i)
{
    if (dtype == MLA_DTYPE_F32) {
        ((float *)array)[i] = (float)uniform();
        return;
    }
    if (!table_built[dtype]) {
        for (int k = 0; k < TABLE; k++)
            oracle_store(dtype, code_table[dtype], k, (float)uniform(), cache_scale(dtype));
        table_built[dtype] = true;
    }
    size_t size = (size_t)mla_dtype_size(dtype);
    memcpy((char *)array + (size_t)i * size, code_table[dtype] + (support_random() % TABLE) * size, size);
}

typedef enum junk_kind { JUNK_BIG, JUNK_NAN } junk_kind;

/* n elements of values that spoil any result they get into: +-1000
 * alternating (fp8 saturates), or NaN. */
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

/* Every byte of buf is GUARD; fails naming the first that is not. */
static void expect_guards(const unsigned char *buf, size_t bytes, const char *what)
{
    for (size_t i = 0; i < bytes; i++)
        if (buf[i] != GUARD)
            fail_msg("%s: guard byte %zu of %zu is 0x%02x", what, i, bytes, buf[i]);
}

/* ---- workspaces ------------------------------------------------------------------ */

typedef struct wsbuf {
    unsigned char *base;
    void *ptr;
    int64_t bytes, misalign;
} wsbuf;

/* Exactly `bytes` at an address misalign bytes past a 64-byte boundary,
 * guard bytes right before and after. */
static wsbuf ws_make(int64_t bytes, int64_t misalign)
{
    wsbuf w = {.bytes = bytes, .misalign = misalign};
    w.base = xalloc((size_t)bytes + 2 * MARGIN);
    memset(w.base, GUARD, (size_t)bytes + 2 * MARGIN + 64);
    w.ptr = w.base + MARGIN + misalign;
    return w;
}

static void ws_free(wsbuf *w, const char *what)
{
    char text[300];
    snprintf(text, sizeof text, "%s: before the workspace", what);
    expect_guards(w->base, (size_t)(MARGIN + w->misalign), text);
    snprintf(text, sizeof text, "%s: after the workspace of %lld bytes", what, (long long)w->bytes);
    expect_guards(w->base + MARGIN + w->misalign + w->bytes, (size_t)(MARGIN + 64 - w->misalign), text);
    free(w->base);
}

/* mla_decode with a workspace of exactly the queried size. */
static mla_status run_decode(const mla_decode_args *a, int threads, int64_t misalign, const char *what)
{
    int64_t bytes = -1;
    mla_status st = mla_decode_workspace_size(a, threads, &bytes);
    if (st != MLA_OK)
        fail_msg("%s: mla_decode_workspace_size: %s: %s", what, mla_status_str(st), mla_last_error());
    assert_true(bytes >= 0);
    wsbuf w = ws_make(bytes, misalign);
    st = mla_decode(a, w.ptr, bytes, threads);
    ws_free(&w, what);
    return st;
}

static mla_status run_forward(const mla_decode_forward_args *f, int threads, int64_t misalign,
                              const char *what)
{
    int64_t bytes = -1;
    mla_status st = mla_decode_forward_workspace_size(f, threads, &bytes);
    if (st != MLA_OK)
        fail_msg("%s: mla_decode_forward_workspace_size: %s: %s", what, mla_status_str(st),
                 mla_last_error());
    assert_true(bytes >= 0);
    wsbuf w = ws_make(bytes, misalign);
    st = mla_decode_forward(f, w.ptr, bytes, threads);
    ws_free(&w, what);
    return st;
}

static void expect_ok(mla_status st, const char *backend, const char *what)
{
    if (st != MLA_OK)
        fail_msg("%s: %s: %s: %s", backend, what, mla_status_str(st), mla_last_error());
}

/* ---- backends --------------------------------------------------------------------- */

/* Prints each distinct skip reason once. */
static void note_skip(const char *backend, const mla_reasons *why)
{
    static char seen[64][MLA_REASON_LEN + 32];
    static int n_seen;
    char line[MLA_REASON_LEN + 32];
    snprintf(line, sizeof line, "%s: %s", backend, why->text[0]);
    for (int i = 0; i < n_seen; i++)
        if (strcmp(seen[i], line) == 0)
            return;
    if (n_seen < 64)
        strcpy(seen[n_seen++], line);
    print_message("[ SKIPPED  ] backend %s:", backend);
    for (int i = 0; i < why->count; i++)
        print_message(" %s%s", why->text[i], i + 1 < why->count ? ";" : "\n");
}

static mla_config config_of(const mla_decode_args *a)
{
    return (mla_config){.q_dtype = a->q_dtype, .cache_dtype = a->cache->dtype,
                        .kv_lora_rank = a->kv_lora_rank, .rope_dim = a->rope_dim,
                        .num_heads = a->num_heads, .block_size = a->cache->block_size};
}

static bool is_ref(int i)
{
    return strcmp(mla_backend_at(i)->isa, "ref") == 0;
}

/* Forces backend i onto MLA_OP_DECODE if it can run cfg; false (printing
 * why, once) if it cannot. */
static bool force_decode_backend(int i, const mla_config *cfg)
{
    const mla_backend_desc *b = mla_backend_at(i);
    if (!(b->ops & (1u << MLA_OP_DECODE)))
        return false;
    mla_reasons why;
    assert_int_equal(mla_backend_validate(b->name, MLA_OP_DECODE, cfg, &why), MLA_OK);
    if (why.count > 0) {
        note_skip(b->name, &why);
        return false;
    }
    mla_status st = mla_force_backend(MLA_OP_DECODE, b->name);
    if (st != MLA_OK)
        fail_msg("mla_force_backend(decode, %s): %s: %s", b->name, mla_status_str(st), mla_last_error());
    return true;
}

/* ---- a paged cache ------------------------------------------------------------------ */

typedef struct paged {
    mla_kv_cache cache;
    unsigned char *base;
    size_t bytes; /* from cache.data */
    int32_t *block_table;
    int64_t cols;
} paged;

/* Blocks for B requests of lens, in a shuffled order, with 3 blocks nobody
 * uses; block-table columns past what a request needs (2 more than the
 * longest needs) hold ids far out of range, which must never be read. The
 * whole cache holds junk; pad: rows 3 elements and blocks 5 elements apart
 * beyond their contents. */
static void make_paged(paged *p, mla_dtype dtype, const int32_t *lens, int64_t B, int64_t width,
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
            p->block_table[b * p->cols + c] = c < need ? perm[k++] : (int32_t)(1000000 + c * 7919);
    }
    free(perm);
    const int64_t entry = width + (pad ? 3 : 0), block = block_size * entry + (pad ? 5 : 0);
    const int64_t n = num_blocks * block, size = mla_dtype_size(dtype);
    p->bytes = (size_t)(n * size);
    p->base = xalloc(p->bytes);
    p->cache = (mla_kv_cache){.data = p->base + misalign * size, .dtype = dtype,
                              .num_blocks = num_blocks, .block_size = block_size, .width = width,
                              .block_stride = pad ? block : 0, .entry_stride = pad ? entry : 0,
                              .scale = cache_scale(dtype)};
    fill_junk(dtype, p->cache.data, n, junk);
}

static int64_t row_at(const paged *p, int64_t b, int64_t j)
{
    const int64_t bs = p->cache.block_size;
    return oracle_cache_row(&p->cache, p->block_table[b * p->cols + j / bs], j % bs);
}

static void free_paged(paged *p)
{
    free(p->base);
    free(p->block_table);
}

static int64_t visible(int64_t len, int64_t s_q, int64_t i)
{
    int64_t n = len - s_q + i + 1;
    return n < 0 ? 0 : n;
}

/* ---- decode cases ---------------------------------------------------------------------- */

typedef enum q_form {
    Q_CONCAT, /* one q [Td, H, L+R]; q_pe = q + L                                   */
    Q_SPLIT,  /* ql_nope and q_pe in their own buffers, padded, different strides  */
    Q_VLLM,   /* ql_nope [H, Td, L] (bmm output transposed: head stride Td*L,
                 token stride L); q_pe inside q [Td, H, P+R] at + P               */
} q_form;

static const char *const form_names[] = {"concat", "split", "vllm"};

typedef struct dspec {
    mla_dtype q_dtype, cache_dtype;
    int64_t s_q, H, L, R, block_size, num_reqs;
    int32_t lens[8];
    q_form form;
    bool pad;  /* strided out (guards between rows), padded cache rows/blocks */
    bool lse;  /* lse requested */
    bool big;  /* ref backend skipped when another ran */
    int threads;
    int64_t misalign; /* q, out and cache pointers this many elements off 64 bytes */
    junk_kind junk;
    const mla_decode_sched_params *sched;
} dspec;

typedef struct dcase {
    dspec s;
    paged pg;
    int32_t *lens;
    void *qn_base, *qp_base;
    unsigned char *out_buf, *lse_buf;
    size_t out_bytes, lse_bytes;
    size_t qn_bytes, qp_bytes;
    uint64_t inputs_sum; /* cache and q: the call only reads them */
    mla_decode_args args;
    double *want_out, *want_lse, *max_v;
    char label[200];
} dcase;

static uint64_t inputs_checksum(const dcase *c)
{
    return oracle_checksum(c->pg.cache.data, c->pg.bytes) ^
           (oracle_checksum(c->qn_base, c->qn_bytes) * 3) ^ (oracle_checksum(c->qp_base, c->qp_bytes) * 5);
}

/* edge lengths around the block size, and one random */
static void edge_lens(dspec *s)
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
        a->q_nope_token_stride = a->q_pe_token_stride = H * a->q_nope_head_stride + (s->pad ? 1 : 0);
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
    c->qn_base = xalloc(c->qn_bytes);
    memset(c->qn_base, GUARD, c->qn_bytes);
    fill_junk(s->q_dtype, (char *)c->qn_base + off, nn, s->junk);
    a->q_nope = (char *)c->qn_base + off;
    if (np > 0) {
        c->qp_bytes = (size_t)((np + 1) * size);
        c->qp_base = xalloc(c->qp_bytes);
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
                put_random(s->q_dtype, (void *)a->q_nope, t * a->q_nope_token_stride + h * a->q_nope_head_stride + d);
            for (int64_t d = 0; d < R; d++)
                put_random(s->q_dtype, (void *)a->q_pe, t * a->q_pe_token_stride + h * a->q_pe_head_stride + d);
        }
}

static void reset_outputs(dcase *c)
{
    memset(c->out_buf, GUARD, c->out_bytes);
    memset(c->lse_buf, GUARD, c->lse_bytes);
}

/* The expected results, from the oracle, and max|V| per request. */
static void case_oracle(dcase *c)
{
    const dspec *s = &c->s;
    const int64_t Td = s->num_reqs * s->s_q;
    c->want_out = malloc(sizeof(double) * (size_t)(Td * s->H * s->L + 1));
    c->want_lse = malloc(sizeof(double) * (size_t)(s->num_reqs * s->H * s->s_q + 1));
    c->max_v = malloc(sizeof(double) * (size_t)(s->num_reqs + 1));
    oracle_decode_latent(&c->args, c->want_out, c->want_lse);
    for (int64_t b = 0; b < s->num_reqs; b++) {
        double m = 0.0;
        for (int64_t j = 0; j < c->lens[b]; j++) {
            int64_t at = row_at(&c->pg, b, j);
            for (int64_t l = 0; l < s->L; l++) {
                double v = fabs(oracle_load_table(s->cache_dtype, c->pg.cache.data, at + l, c->pg.cache.scale));
                m = v > m ? v : m;
            }
        }
        c->max_v[b] = m;
    }
}

static void make_case(dcase *c, const dspec *s, bool with_oracle)
{
    memset(c, 0, sizeof *c);
    c->s = *s;
    const int64_t B = s->num_reqs, Td = B * s->s_q, H = s->H, L = s->L, D = s->L + s->R;
    c->lens = malloc(sizeof(int32_t) * (size_t)(B + 1));
    memcpy(c->lens, s->lens, sizeof(int32_t) * (size_t)B);
    make_paged(&c->pg, s->cache_dtype, c->lens, B, D, s->block_size, s->pad,
               s->misalign, s->junk);
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < c->lens[b]; j++) {
            int64_t at = row_at(&c->pg, b, j);
            for (int64_t d = 0; d < D; d++)
                put_random(s->cache_dtype, c->pg.cache.data, at + d);
        }
    mla_decode_args *a = &c->args;
    *a = (mla_decode_args){.num_reqs = B, .s_q = s->s_q, .num_heads = H, .kv_lora_rank = L,
                           .rope_dim = s->R, .scale = 1.7f / sqrtf((float)D), .q_dtype = s->q_dtype,
                           .cache = &c->pg.cache, .block_table = c->pg.block_table,
                           .block_table_cols = c->pg.cols, .seq_lens = c->lens, .sched = s->sched};
    make_q(c);
    const int64_t size = mla_dtype_size(s->q_dtype);
    a->out_head_stride = L + (s->pad ? 3 : 0);
    a->out_token_stride = H * a->out_head_stride + (s->pad ? 5 : 0);
    int64_t n_out = Td > 0 ? (Td - 1) * a->out_token_stride + (H - 1) * a->out_head_stride + L : 0;
    c->out_bytes = (size_t)((n_out + s->misalign) * size + 2 * MARGIN);
    c->out_buf = xalloc(c->out_bytes);
    a->out = c->out_buf + MARGIN + s->misalign * size;
    c->lse_bytes = (size_t)(B * H * s->s_q) * sizeof(float) + 2 * MARGIN;
    c->lse_buf = xalloc(c->lse_bytes);
    a->lse = s->lse ? (float *)(c->lse_buf + MARGIN) : NULL;
    reset_outputs(c);
    c->inputs_sum = inputs_checksum(c);
    snprintf(c->label, sizeof c->label,
             "q %s, cache %s, B %lld, s_q %lld, H %lld, L %lld, R %lld, bs %lld, q %s%s%s, %d threads",
             mla_dtype_name(s->q_dtype), mla_dtype_name(s->cache_dtype), (long long)B,
             (long long)s->s_q, (long long)H, (long long)L, (long long)s->R,
             (long long)s->block_size, form_names[s->form], s->pad ? ", padded" : "",
             s->lse ? ", lse" : "", s->threads);
    if (with_oracle)
        case_oracle(c);
}

static void free_case(dcase *c)
{
    free_paged(&c->pg);
    free(c->lens);
    free(c->qn_base);
    free(c->qp_base);
    free(c->out_buf);
    free(c->lse_buf);
    free(c->want_out);
    free(c->want_lse);
    free(c->max_v);
}

/* out and lse against the oracle; every other output byte untouched. */
static void check_case(const dcase *c, const char *backend)
{
    const mla_decode_args *a = &c->args;
    const int64_t H = a->num_heads, L = a->kv_lora_rank, s_q = a->s_q;
    const int64_t size = mla_dtype_size(a->q_dtype);
    unsigned char *mask = malloc(c->out_bytes);
    memcpy(mask, c->out_buf, c->out_bytes);
    for (int64_t b = 0; b < a->num_reqs; b++) {
        const int64_t len = c->lens[b];
        const double tol = out_tol(a->q_dtype, len) * c->max_v[b];
        for (int64_t i = 0; i < s_q; i++) {
            const int64_t t = b * s_q + i, n = visible(len, s_q, i);
            for (int64_t h = 0; h < H; h++) {
                const int64_t at = t * a->out_token_stride + h * a->out_head_stride;
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
                    double err = fabs((double)got - want);
                    if (!(err <= tol))
                        fail_msg("%s: %s: request %lld (len %lld) query %lld: out[%lld][%lld][%lld] = "
                                 "%.9g, want %.9g: |err| %.3g > %.3g x max|V| %.4g", backend,
                                 c->label, (long long)b, (long long)len, (long long)i, (long long)t,
                                 (long long)h, (long long)l, got, want, err,
                                 out_tol(a->q_dtype, len), c->max_v[b]);
                    worst = err > worst ? err : worst;
                }
                if (n > 0 && c->max_v[b] > 0)
                    note_worst(&worst_out[a->q_dtype], worst / c->max_v[b]);
                memset(mask + ((unsigned char *)a->out - c->out_buf) + at * size, GUARD,
                       (size_t)(L * size));
                if (a->lse) {
                    float got = a->lse[(b * H + h) * s_q + i];
                    double want = c->want_lse[(b * H + h) * s_q + i];
                    if (n == 0) {
                        if (!(isinf(got) && got < 0))
                            fail_msg("%s: %s: request %lld (len %lld) query %lld head %lld sees no "
                                     "key: lse %g, want -inf", backend, c->label, (long long)b,
                                     (long long)len, (long long)i, (long long)h, got);
                        continue;
                    }
                    double err = fabs((double)got - want);
                    if (!(err <= LSE_TOL))
                        fail_msg("%s: %s: request %lld (len %lld) query %lld head %lld: lse %.9g, "
                                 "want %.9g (|err| %.3g > %g)", backend, c->label, (long long)b,
                                 (long long)len, (long long)i, (long long)h, got, want, err, LSE_TOL);
                    note_worst(&worst_lse, err);
                }
            }
        }
    }
    if (inputs_checksum(c) != c->inputs_sum)
        fail_msg("%s: %s: the cache or q changed", backend, c->label);
    char what[300];
    snprintf(what, sizeof what, "%s: %s: out buffer (%lld-byte margin)", backend, c->label,
             (long long)MARGIN);
    expect_guards(mask, c->out_bytes, what);
    free(mask);
    snprintf(what, sizeof what, "%s: %s: lse buffer", backend, c->label);
    if (a->lse) {
        expect_guards(c->lse_buf, MARGIN, what);
        expect_guards(c->lse_buf + c->lse_bytes - MARGIN, MARGIN, what);
    } else {
        expect_guards(c->lse_buf, c->lse_bytes, what);
    }
}

/* Runs the case on every backend that can; returns how many ran. */
static int run_case_everywhere(dcase *c)
{
    mla_config cfg = config_of(&c->args);
    int ran = 0;
    for (int i = 0; i < mla_backend_count(); i++) {
        if (is_ref(i) && c->s.big && ran > 0)
            continue;
        if (!force_decode_backend(i, &cfg))
            continue;
        const char *name = mla_backend_at(i)->name;
        reset_outputs(c);
        mla_status st = run_decode(&c->args, c->s.threads, 0, c->label);
        if (st != MLA_OK)
            fail_msg("%s: %s: mla_decode: %s: %s", name, c->label, mla_status_str(st), mla_last_error());
        assert_string_equal(mla_last_backend(), name);
        check_case(c, name);
        ran++;
    }
    assert_int_equal(mla_force_backend(MLA_OP_DECODE, NULL), MLA_OK);
    return ran;
}

/* ---- 1, 3: the main sweep on every backend ------------------------------------------------- */

static int sweep_specs(dspec *sp)
{
    static const int64_t s_qs[] = {1, 2, 4}, block_sizes[] = {16, 1, 64}, heads[] = {3, 1, 16, 3};
    int n = 0;
    /* every q dtype x every cache dtype at a small general shape (L 40, R 8),
     * the other dimensions rotating through their values */
    for (int k = 0; k < 15; k++) {
        dspec s = {.q_dtype = q_dtypes[k / 5], .cache_dtype = cache_dtypes[k % 5],
                   .s_q = s_qs[k % 3], .H = heads[k % 4], .L = 40, .R = 8,
                   .block_size = block_sizes[(k / 3) % 3], .form = (q_form)((k / 2) % 3),
                   .pad = k % 2 == 0, .lse = k % 4 != 3, .threads = k % 3};
        edge_lens(&s);
        sp[n++] = s;
    }
    /* L 7, R 0: no rope part, q_pe NULL */
    sp[n] = (dspec){.q_dtype = MLA_DTYPE_F32, .cache_dtype = MLA_DTYPE_BF16, .s_q = 2, .H = 3, .L = 7,
                    .block_size = 1, .form = Q_SPLIT, .pad = true, .lse = true, .threads = 2};
    edge_lens(&sp[n++]);
    sp[n] = (dspec){.q_dtype = MLA_DTYPE_F16, .cache_dtype = MLA_DTYPE_FP8_E5M2, .s_q = 1, .H = 1,
                    .L = 7, .block_size = 16, .form = Q_VLLM, .lse = true, .threads = 1};
    edge_lens(&sp[n++]);
    /* 150 query rows: the driver's passes over the cache (at most 128 rows
     * each) split a token's heads */
    sp[n] = (dspec){.q_dtype = MLA_DTYPE_F32, .cache_dtype = MLA_DTYPE_BF16, .s_q = 3, .H = 50,
                    .L = 40, .R = 8, .block_size = 16, .form = Q_SPLIT, .pad = true, .lse = true,
                    .threads = 2};
    edge_lens(&sp[n++]);
    /* DeepSeek 512 + 64 */
    sp[n] = (dspec){.q_dtype = MLA_DTYPE_F16, .cache_dtype = MLA_DTYPE_FP8_E4M3, .s_q = 4, .H = 16,
                    .L = 512, .R = 64, .block_size = 16, .form = Q_SPLIT, .pad = true, .threads = 2};
    edge_lens(&sp[n++]);
    sp[n] = (dspec){.q_dtype = MLA_DTYPE_F32, .cache_dtype = MLA_DTYPE_FP8_E5M2, .s_q = 1, .H = 3,
                    .L = 512, .R = 64, .block_size = 1, .form = Q_CONCAT, .lse = true};
    edge_lens(&sp[n++]);
    /* long random lengths at H 16 */
    sp[n++] = (dspec){.q_dtype = MLA_DTYPE_F32, .cache_dtype = MLA_DTYPE_BF16, .s_q = 1, .H = 16,
                      .L = 512, .R = 64, .block_size = 64, .num_reqs = 3,
                      .lens = {(int32_t)support_random_in(6000, 8192), (int32_t)support_random_in(1, 8192),
                               (int32_t)support_random_in(1, 3000)},
                      .form = Q_CONCAT, .pad = true, .lse = true, .big = true};
    sp[n++] = (dspec){.q_dtype = MLA_DTYPE_BF16, .cache_dtype = MLA_DTYPE_BF16, .s_q = 2, .H = 16,
                      .L = 512, .R = 64, .block_size = 64, .num_reqs = 3,
                      .lens = {(int32_t)support_random_in(1, 2000), (int32_t)support_random_in(1, 2000),
                               (int32_t)support_random_in(1, 2000)},
                      .form = Q_VLLM, .lse = true, .big = true, .threads = 3};
    /* H 128 */
    sp[n++] = (dspec){.q_dtype = MLA_DTYPE_BF16, .cache_dtype = MLA_DTYPE_BF16, .s_q = 1, .H = 128,
                      .L = 512, .R = 64, .block_size = 64, .num_reqs = 1,
                      .lens = {(int32_t)support_random_in(4000, 4200)}, .form = Q_VLLM, .pad = true,
                      .lse = true, .big = true};
    sp[n++] = (dspec){.q_dtype = MLA_DTYPE_F32, .cache_dtype = MLA_DTYPE_F32, .s_q = 2, .H = 128,
                      .L = 512, .R = 64, .block_size = 16, .num_reqs = 3, .lens = {700, 0, 65},
                      .form = Q_CONCAT, .lse = true, .big = true, .threads = 2};
    return n;
}

static void test_decode_sweep(void **state)
{
    (void)state;
    dspec specs[32];
    int n = sweep_specs(specs);
    for (int k = 0; k < n; k++) {
        dcase c;
        make_case(&c, &specs[k], true);
        int ran = run_case_everywhere(&c);
        if (ran == 0)
            fail_msg("%s: no backend can run this", c.label);
        free_case(&c);
    }
    print_message("[ ACCURACY ] decode, worst |out - oracle| / max|V|: f32 %.2e (tol >= %.0e), "
                  "bf16 %.2e (tol %.0e), f16 %.2e (tol %.0e); worst |lse - oracle| %.2e (tol %.0e)\n",
                  worst_out[MLA_DTYPE_F32], out_tol(MLA_DTYPE_F32, 0), worst_out[MLA_DTYPE_BF16],
                  out_tol(MLA_DTYPE_BF16, 0), worst_out[MLA_DTYPE_F16], out_tol(MLA_DTYPE_F16, 0),
                  worst_lse, LSE_TOL);
}

/* ---- 3: every backend, forced, is the one that runs ------------------------------------------ */

static void test_every_backend(void **state)
{
    (void)state;
    /* bf16 q with a bf16 cache, then f16 with f16: between them every
     * backend has a dtype pair it runs (the half-precision ones only theirs) */
    static const mla_dtype pairs[] = {MLA_DTYPE_BF16, MLA_DTYPE_F16};
    bool ran[64] = {false};
    for (int d = 0; d < COUNT(pairs); d++) {
        dspec s = {.q_dtype = pairs[d], .cache_dtype = pairs[d], .s_q = 2, .H = 5, .L = 64, .R = 16,
                   .block_size = 16, .form = Q_CONCAT, .pad = true, .lse = true, .threads = 2};
        edge_lens(&s);
        dcase c;
        make_case(&c, &s, true);
        mla_config cfg = config_of(&c.args);
        for (int i = 0; i < mla_backend_count() && i < COUNT(ran); i++) {
            const mla_backend_desc *b = mla_backend_at(i);
            mla_reasons why;
            assert_int_equal(mla_backend_validate(b->name, MLA_OP_DECODE, NULL, &why), MLA_OK);
            if (why.count > 0) { /* the CPU cannot run it: forcing it fails, naming a reason */
                if (d == 0)
                    note_skip(b->name, &why);
                assert_int_equal(mla_force_backend(MLA_OP_DECODE, b->name), MLA_ERR_BACKEND_INVALID);
                assert_true(support_contains(mla_last_error(), why.text[0]));
                continue;
            }
            if (!force_decode_backend(i, &cfg))
                continue;
            reset_outputs(&c);
            expect_ok(run_decode(&c.args, 2, 0, c.label), b->name, c.label);
            assert_string_equal(mla_last_backend(), b->name);
            check_case(&c, b->name);
            ran[i] = true;
        }
        /* auto-selection runs what mla_select_backend names */
        assert_int_equal(mla_force_backend(MLA_OP_DECODE, NULL), MLA_OK);
        const mla_backend_desc *chosen = NULL;
        assert_int_equal(mla_select_backend(MLA_OP_DECODE, &cfg, &chosen), MLA_OK);
        reset_outputs(&c);
        expect_ok(run_decode(&c.args, 0, 0, c.label), "auto-selected", c.label);
        assert_string_equal(mla_last_backend(), chosen->name);
        check_case(&c, chosen->name);
        free_case(&c);
    }
    int count = 0;
    for (int i = 0; i < mla_backend_count() && i < COUNT(ran); i++) {
        if (!ran[i])
            continue;
        print_message("[ BACKEND  ] %s: decode matches the oracle and is the backend that ran\n",
                      mla_backend_at(i)->name);
        count++;
    }
    assert_true(count >= 1);
}

/* ---- 4: split-KV ---------------------------------------------------------------------------- */

static void test_split_kv(void **state)
{
    (void)state;
    dspec s = {.q_dtype = MLA_DTYPE_F32, .cache_dtype = MLA_DTYPE_BF16, .s_q = 2, .H = 16, .L = 128,
               .R = 32, .block_size = 16, .num_reqs = 6, .lens = {1000, 3, 0, 260, 64, 1},
               .form = Q_CONCAT, .pad = true, .lse = true};
    dcase c;
    make_case(&c, &s, true);
    mla_config cfg = config_of(&c.args);
    /* the default schedule (one part per thread); then explicit ones: more
     * parts than needed (a request with one split writes straight to out,
     * others go through the LSE combine), one part, small block_n without
     * overhead, batch-invariant splits */
    static const mla_decode_sched_params params[] = {
        {.num_parts = 13, .overhead = -1},
        {.num_parts = 1, .overhead = -1},
        {.num_parts = 5, .block_n = 16, .overhead = 0},
        {.num_parts = 0, .block_n = 16, .overhead = -1, .split_blocks = 3},
    };
    static const int threads[] = {1, 2, 3, 4, 7};
    int ran = 0;
    for (int i = 0; i < mla_backend_count(); i++) {
        if (!force_decode_backend(i, &cfg))
            continue;
        const char *name = mla_backend_at(i)->name;
        for (int k = 0; k < COUNT(threads); k++) {
            if (is_ref(i) && k % 2 == 1)
                continue; /* ref: 1, 3, 7 threads */
            c.args.sched = NULL;
            reset_outputs(&c);
            snprintf(c.label, sizeof c.label, "split-KV, default schedule, %d threads", threads[k]);
            expect_ok(run_decode(&c.args, threads[k], 0, c.label), name, c.label);
            assert_string_equal(mla_last_backend(), name);
            check_case(&c, name);
        }
        for (int p = 0; p < COUNT(params); p++) {
            c.args.sched = &params[p];
            reset_outputs(&c);
            snprintf(c.label, sizeof c.label, "split-KV, num_parts %lld block_n %lld overhead %lld "
                     "split_blocks %lld, 2 threads", (long long)params[p].num_parts,
                     (long long)params[p].block_n, (long long)params[p].overhead,
                     (long long)params[p].split_blocks);
            expect_ok(run_decode(&c.args, 2, 0, c.label), name, c.label);
            check_case(&c, name);
        }
        ran++;
    }
    assert_int_equal(mla_force_backend(MLA_OP_DECODE, NULL), MLA_OK);
    assert_true(ran >= 1);
    free_case(&c);
}

/* Batch-invariant mode: request X's out and lse are the same bits alone,
 * first in a batch, last in a batch of other lengths, in other cache blocks,
 * for 1..8 threads and any part count. */
static void copy_request(dcase *dst, int64_t bd, const dcase *src, int64_t bs_)
{
    const dspec *s = &src->s;
    const int64_t D = s->L + s->R, size = mla_dtype_size(s->cache_dtype);
    assert_int_equal(dst->lens[bd], src->lens[bs_]);
    for (int64_t j = 0; j < src->lens[bs_]; j++)
        memcpy((char *)dst->pg.cache.data + row_at(&dst->pg, bd, j) * size,
               (const char *)src->pg.cache.data + row_at(&src->pg, bs_, j) * size, (size_t)(D * size));
    const int64_t qsize = mla_dtype_size(s->q_dtype), ts = src->args.q_nope_token_stride;
    memcpy((char *)dst->args.q_nope + bd * s->s_q * ts * qsize,
           (const char *)src->args.q_nope + bs_ * s->s_q * ts * qsize, (size_t)(s->s_q * ts * qsize));
}

static void test_batch_invariant(void **state)
{
    (void)state;
    typedef struct inv_set {
        int64_t block_size, block_n, split_blocks;
        int32_t x_len, first[4], last[3]; /* batches: [X, first...], [last..., X] */
    } inv_set;
    static const inv_set sets[] = {
        {64, 16, 2, 300, {200, 0, 50}, {400, 17}},   /* 10 splits of 32 rows */
        {16, 64, 2, 600, {333, 0, 50}, {260, 17}},   /* 5 splits of 128 rows */
    };
    static const mla_dtype pairs[][2] = {{MLA_DTYPE_F32, MLA_DTYPE_BF16}, {MLA_DTYPE_BF16, MLA_DTYPE_BF16}};
    int runs = 0;
    for (int pi = 0; pi < COUNT(pairs); pi++) {
        for (int si = 0; si < COUNT(sets); si++) {
            const inv_set *set = &sets[si];
            dspec base = {.q_dtype = pairs[pi][0], .cache_dtype = pairs[pi][1], .s_q = 2, .H = 16,
                          .L = 128, .R = 32, .block_size = set->block_size, .form = Q_CONCAT,
                          .lse = true};
            dspec s0 = base, s1 = base, s2 = base;
            s0.num_reqs = 1;
            s0.lens[0] = set->x_len;
            s1.num_reqs = 4;
            s1.lens[0] = set->x_len;
            memcpy(&s1.lens[1], set->first, 3 * sizeof(int32_t));
            s2.num_reqs = 3;
            memcpy(s2.lens, set->last, 2 * sizeof(int32_t));
            s2.lens[2] = set->x_len;
            dcase c[3];
            make_case(&c[0], &s0, true);
            make_case(&c[1], &s1, false);
            make_case(&c[2], &s2, false);
            copy_request(&c[1], 0, &c[0], 0);
            copy_request(&c[2], 2, &c[0], 0);
            c[1].inputs_sum = inputs_checksum(&c[1]);
            c[2].inputs_sum = inputs_checksum(&c[2]);
            const int64_t x_req[3] = {0, 0, 2};
            const int64_t H = base.H, s_q = base.s_q, L = base.L;
            const size_t out_x = (size_t)(s_q * H * L * mla_dtype_size(base.q_dtype));
            const size_t lse_x = (size_t)(H * s_q) * sizeof(float);
            unsigned char *ref_out = malloc(out_x), *ref_lse = malloc(lse_x);
            mla_config cfg = config_of(&c[0].args);
            for (int i = 0; i < mla_backend_count(); i++) {
                if (!force_decode_backend(i, &cfg))
                    continue;
                const char *name = mla_backend_at(i)->name;
                bool have_ref = false;
                for (int k = 0; k < 3; k++) {
                    for (int threads = 1; threads <= 8; threads++) {
                        if (is_ref(i) && threads != 1 && threads != 3 && threads != 8)
                            continue;
                        /* part counts: from the thread count, explicit, more than needed */
                        mla_decode_sched_params p = {.num_parts = threads % 2 ? threads : 0,
                                                     .block_n = set->block_n, .overhead = -1,
                                                     .split_blocks = set->split_blocks};
                        if (threads == 8)
                            p.num_parts = 13;
                        if (threads == 5)
                            p.overhead = 0;
                        c[k].args.sched = &p;
                        reset_outputs(&c[k]);
                        snprintf(c[k].label, sizeof c[k].label,
                                 "batch-invariant (block_n %lld, split_blocks %lld, q %s), batch %d, "
                                 "%d threads, num_parts %lld", (long long)set->block_n,
                                 (long long)set->split_blocks, mla_dtype_name(base.q_dtype), k,
                                 threads, (long long)p.num_parts);
                        mla_status st = run_decode(&c[k].args, threads, 0, c[k].label);
                        if (st != MLA_OK)
                            fail_msg("%s: %s: %s: %s", name, c[k].label, mla_status_str(st), mla_last_error());
                        assert_string_equal(mla_last_backend(), name);
                        const unsigned char *out = (const unsigned char *)c[k].args.out +
                                                   (size_t)x_req[k] * out_x;
                        const unsigned char *lse = (const unsigned char *)(c[k].args.lse + x_req[k] * H * s_q);
                        if (!have_ref) {
                            check_case(&c[0], name);
                            memcpy(ref_out, out, out_x);
                            memcpy(ref_lse, lse, lse_x);
                            have_ref = true;
                            continue;
                        }
                        if (memcmp(out, ref_out, out_x) != 0 || memcmp(lse, ref_lse, lse_x) != 0) {
                            size_t at = 0;
                            const char *which = memcmp(out, ref_out, out_x) != 0 ? "out" : "lse";
                            const unsigned char *g = which[0] == 'o' ? out : lse,
                                                *w = which[0] == 'o' ? ref_out : ref_lse;
                            while (g[at] == w[at])
                                at++;
                            fail_msg("%s: %s: request X's %s differs from X alone on 1 thread "
                                     "(first at byte %zu)", name, c[k].label, which, at);
                        }
                        runs++;
                    }
                }
            }
            assert_int_equal(mla_force_backend(MLA_OP_DECODE, NULL), MLA_OK);
            free(ref_out);
            free(ref_lse);
            for (int k = 0; k < 3; k++) {
                c[k].args.sched = NULL;
                free_case(&c[k]);
            }
        }
    }
    assert_true(runs > 0);
}

/* ---- 5: unaligned pointers, NaN in memory that is not read ----------------------------------- */

static void test_unaligned(void **state)
{
    (void)state;
    /* q, out and cache data this many elements past a 64-byte boundary
     * (f32: 4 or 12 bytes; bf16/f16: 2, 6 or 10 bytes; fp8: 1 to 3 bytes);
     * workspaces 1, 4, 33 bytes past one */
    static const struct {
        mla_dtype q, cache;
        int64_t misalign, ws_misalign;
        q_form form;
    } cases[] = {
        {MLA_DTYPE_F32, MLA_DTYPE_FP8_E4M3, 3, 1, Q_SPLIT},
        {MLA_DTYPE_F32, MLA_DTYPE_F32, 1, 4, Q_CONCAT},
        {MLA_DTYPE_BF16, MLA_DTYPE_BF16, 1, 33, Q_CONCAT},
        {MLA_DTYPE_F16, MLA_DTYPE_F16, 5, 2, Q_VLLM},
        {MLA_DTYPE_BF16, MLA_DTYPE_FP8_E5M2, 1, 1, Q_SPLIT},
    };
    for (int k = 0; k < COUNT(cases); k++) {
        dspec s = {.q_dtype = cases[k].q, .cache_dtype = cases[k].cache, .s_q = 2, .H = 5, .L = 72,
                   .R = 8, .block_size = 16, .form = cases[k].form, .pad = k % 2 == 1, .lse = true,
                   .threads = 2, .misalign = cases[k].misalign};
        edge_lens(&s);
        dcase c;
        make_case(&c, &s, true);
        mla_config cfg = config_of(&c.args);
        for (int i = 0; i < mla_backend_count(); i++) {
            if (!force_decode_backend(i, &cfg))
                continue;
            const char *name = mla_backend_at(i)->name;
            reset_outputs(&c);
            char what[256];
            snprintf(what, sizeof what, "%s, pointers +%lld elements, workspace +%lld bytes", c.label,
                     (long long)cases[k].misalign, (long long)cases[k].ws_misalign);
            mla_status st = run_decode(&c.args, 2, cases[k].ws_misalign, what);
            if (st != MLA_OK)
                fail_msg("%s: %s: %s: %s", name, what, mla_status_str(st), mla_last_error());
            check_case(&c, name);
        }
        assert_int_equal(mla_force_backend(MLA_OP_DECODE, NULL), MLA_OK);
        free_case(&c);
    }
}

/* NaN in every element the kernels must not use: q padding, cache row and
 * block padding, rows past seq_len in a request's last block, unused
 * blocks. A kernel that reads them and masks by multiplying (p = 0 times a
 * NaN row) gets NaN. */
static void test_nan_in_unused_memory(void **state)
{
    (void)state;
    static const mla_dtype pairs[][2] = {{MLA_DTYPE_F32, MLA_DTYPE_F32},
                                         {MLA_DTYPE_F32, MLA_DTYPE_BF16},
                                         {MLA_DTYPE_BF16, MLA_DTYPE_BF16},
                                         {MLA_DTYPE_F16, MLA_DTYPE_FP8_E4M3}};
    for (int k = 0; k < COUNT(pairs); k++) {
        dspec s = {.q_dtype = pairs[k][0], .cache_dtype = pairs[k][1], .s_q = 2, .H = 3, .L = 40,
                   .R = 8, .block_size = 16, .num_reqs = 5, .lens = {5, 16, 21, 0, 47},
                   .form = k % 2 ? Q_VLLM : Q_SPLIT, .pad = true, .lse = true, .threads = 2,
                   .junk = JUNK_NAN};
        dcase c;
        make_case(&c, &s, true);
        snprintf(c.label + strlen(c.label), sizeof c.label - strlen(c.label), ", NaN in unused memory");
        run_case_everywhere(&c);
        free_case(&c);
    }
}

/* ---- 6: workspace ----------------------------------------------------------------------------- */

static void test_workspace(void **state)
{
    (void)state;
    dspec s = {.q_dtype = MLA_DTYPE_BF16, .cache_dtype = MLA_DTYPE_BF16, .s_q = 2, .H = 16,
               .L = 512, .R = 64, .block_size = 64, .num_reqs = 3, .lens = {600, 7, 130},
               .form = Q_CONCAT, .lse = true};
    dcase c;
    make_case(&c, &s, true);
    static const int64_t misaligns[] = {0, 1, 2, 4, 8, 36};
    static const int threads[] = {1, 4};
    for (int k = 0; k < COUNT(threads); k++) {
        int64_t bytes = -1;
        assert_int_equal(mla_decode_workspace_size(&c.args, threads[k], &bytes), MLA_OK);
        if (bytes <= 0)
            fail_msg("mla_decode_workspace_size (%s, %d threads) = %lld, want > 0", c.label,
                     threads[k], (long long)bytes);
        for (int m = 0; m < COUNT(misaligns); m++) {
            /* exactly `bytes`, guards right outside (ws_make/ws_free) */
            reset_outputs(&c);
            char what[256];
            snprintf(what, sizeof what, "%s, workspace of %lld bytes at +%lld", c.label,
                     (long long)bytes, (long long)misaligns[m]);
            mla_status st = run_decode(&c.args, threads[k], misaligns[m], what);
            if (st != MLA_OK)
                fail_msg("%s: %s: %s", what, mla_status_str(st), mla_last_error());
            check_case(&c, mla_last_backend());
        }
    }
    free_case(&c);
}

/* ---- 2: mla_prepare_weights and mla_decode_forward --------------------------------------------- */

/* Random kv_b_proj values: uniform, times amp, spread over some exponents so
 * rounding to bf16 is exercised. */
static void *random_kvb(mla_dtype dtype, int64_t n, double amp)
{
    void *p = malloc((size_t)(n * mla_dtype_size(dtype)) + 1);
    for (int64_t i = 0; i < n; i++) {
        float x = (float)(uniform() * amp);
        if (dtype == MLA_DTYPE_F32)
            ((float *)p)[i] = x;
        else if (dtype == MLA_DTYPE_BF16)
            ((uint16_t *)p)[i] = bf16_rne(x);
        else
            oracle_store(dtype, p, i, x, 1.0f);
    }
    return p;
}

static void check_prepare(mla_dtype src, mla_dtype w, int64_t H, int64_t L, int64_t P, int64_t V,
                          int threads)
{
    const int64_t n = H * (P + V) * L, wsize = mla_dtype_size(w);
    void *kvb = random_kvb(src, n, 3.0);
    const size_t uk_bytes = (size_t)(H * P * L * wsize), uv_bytes = (size_t)(H * L * V * wsize);
    unsigned char *uk = xalloc(uk_bytes + 2 * MARGIN), *uv = xalloc(uv_bytes + 2 * MARGIN);
    unsigned char *want_uk = malloc(uk_bytes), *want_uv = malloc(uv_bytes);
    memset(uk, GUARD, uk_bytes + 2 * MARGIN);
    memset(uv, GUARD, uv_bytes + 2 * MARGIN);
    for (int64_t h = 0; h < H; h++)
        for (int64_t l = 0; l < L; l++) {
            for (int64_t p = 0; p < P; p++) /* w_uk_t[h][p][l] = kv_b_proj[h*(P+V) + p][l] */
                oracle_store(w, want_uk, (h * P + p) * L + l,
                             oracle_load(src, kvb, (h * (P + V) + p) * L + l, 1.0f), 1.0f);
            for (int64_t v = 0; v < V; v++) /* w_uv[h][l][v] = kv_b_proj[h*(P+V) + P + v][l] */
                oracle_store(w, want_uv, (h * L + l) * V + v,
                             oracle_load(src, kvb, (h * (P + V) + P + v) * L + l, 1.0f), 1.0f);
        }
    mla_status st = mla_prepare_weights(kvb, src, H, L, P, V, uk + MARGIN, uv + MARGIN, w, threads);
    if (st != MLA_OK)
        fail_msg("mla_prepare_weights %s -> %s: %s: %s", mla_dtype_name(src), mla_dtype_name(w),
                 mla_status_str(st), mla_last_error());
    char what[160];
    snprintf(what, sizeof what, "prepare %s -> %s, H %lld L %lld P %lld V %lld, %d threads",
             mla_dtype_name(src), mla_dtype_name(w), (long long)H, (long long)L, (long long)P,
             (long long)V, threads);
    for (int which = 0; which < 2; which++) {
        const unsigned char *got = (which ? uv : uk) + MARGIN, *want = which ? want_uv : want_uk;
        size_t bytes = which ? uv_bytes : uk_bytes;
        if (memcmp(got, want, bytes) != 0) {
            size_t e = 0;
            while (memcmp(got + e * (size_t)wsize, want + e * (size_t)wsize, (size_t)wsize) == 0)
                e++;
            int64_t h = which ? (int64_t)e / (L * V) : (int64_t)e / (P * L);
            int64_t i1 = which ? ((int64_t)e / V) % L : ((int64_t)e / L) % P;
            int64_t i2 = which ? (int64_t)e % V : (int64_t)e % L;
            fail_msg("%s: %s[%lld][%lld][%lld] = %g, want %g", what, which ? "w_uv" : "w_uk_t",
                     (long long)h, (long long)i1, (long long)i2, oracle_load(w, got, (int64_t)e, 1.0f),
                     oracle_load(w, want, (int64_t)e, 1.0f));
        }
        expect_guards((which ? uv : uk), MARGIN, what);
        expect_guards((which ? uv : uk) + MARGIN + bytes, MARGIN, what);
    }
    free(kvb);
    free(uk);
    free(uv);
    free(want_uk);
    free(want_uv);
}

static void test_prepare_weights(void **state)
{
    (void)state;
    static const mla_dtype w_dtypes[] = {MLA_DTYPE_F32, MLA_DTYPE_BF16};
    for (int si = 0; si < COUNT(q_dtypes); si++)
        for (int wi = 0; wi < COUNT(w_dtypes); wi++)
            for (int threads = 1; threads <= 2; threads++)
                check_prepare(q_dtypes[si], w_dtypes[wi], 3, 40, 16, 8, threads);
    check_prepare(MLA_DTYPE_F32, MLA_DTYPE_BF16, 2, 512, 128, 128, 0); /* DeepSeek's per-head shape */
    check_prepare(MLA_DTYPE_BF16, MLA_DTYPE_F32, 1, 7, 3, 5, 1);
}

static void test_prepare_weights_rejects(void **state)
{
    (void)state;
    enum { H = 2, L = 8, P = 4, V = 3 };
    float kvb[H * (P + V) * L];
    for (int i = 0; i < H * (P + V) * L; i++)
        kvb[i] = (float)i;
    unsigned char uk[H * P * L * 4], uv[H * L * V * 4];
    memset(uk, GUARD, sizeof uk);
    memset(uv, GUARD, sizeof uv);
    assert_int_equal(mla_prepare_weights(kvb, MLA_DTYPE_F32, H, L, P, V, uk, uv, MLA_DTYPE_F32, 1), MLA_OK);
    memset(uk, GUARD, sizeof uk);
    memset(uv, GUARD, sizeof uv);
    const struct {
        const void *kvb;
        mla_dtype src, w;
        int64_t h, l, p, v;
        void *uk, *uv;
        mla_status status;
        const char *needle;
    } bad[] = {
        {NULL, MLA_DTYPE_F32, MLA_DTYPE_F32, H, L, P, V, uk, uv, MLA_ERR_INVALID_ARGUMENT, "kv_b_proj"},
        {kvb, MLA_DTYPE_F32, MLA_DTYPE_F32, H, L, P, V, NULL, uv, MLA_ERR_INVALID_ARGUMENT, "w_uk_t"},
        {kvb, MLA_DTYPE_F32, MLA_DTYPE_F32, H, L, P, V, uk, NULL, MLA_ERR_INVALID_ARGUMENT, "w_uv"},
        {kvb, MLA_DTYPE_FP8_E4M3, MLA_DTYPE_F32, H, L, P, V, uk, uv, MLA_ERR_UNSUPPORTED, "fp8_e4m3"},
        {kvb, MLA_DTYPE_F32, MLA_DTYPE_F16, H, L, P, V, uk, uv, MLA_ERR_UNSUPPORTED, "f16"},
        {kvb, MLA_DTYPE_F32, MLA_DTYPE_FP8_E5M2, H, L, P, V, uk, uv, MLA_ERR_UNSUPPORTED, "fp8_e5m2"},
        {kvb, MLA_DTYPE_F32, MLA_DTYPE_F32, 0, L, P, V, uk, uv, MLA_ERR_INVALID_ARGUMENT, "num_heads"},
        {kvb, MLA_DTYPE_F32, MLA_DTYPE_F32, H, 0, P, V, uk, uv, MLA_ERR_INVALID_ARGUMENT, "kv_lora_rank"},
        {kvb, MLA_DTYPE_F32, MLA_DTYPE_F32, H, L, 0, V, uk, uv, MLA_ERR_INVALID_ARGUMENT, "qk_nope_dim"},
        {kvb, MLA_DTYPE_F32, MLA_DTYPE_F32, H, L, P, -1, uk, uv, MLA_ERR_INVALID_ARGUMENT, "v_head_dim"},
        {kvb, MLA_DTYPE_F32, MLA_DTYPE_F32, INT64_MAX / 4, L, P, V, uk, uv, MLA_ERR_OVERFLOW, ""},
    };
    for (int k = 0; k < COUNT(bad); k++) {
        mla_status st = mla_prepare_weights(bad[k].kvb, bad[k].src, bad[k].h, bad[k].l, bad[k].p,
                                            bad[k].v, bad[k].uk, bad[k].uv, bad[k].w, 1);
        if (st != bad[k].status)
            fail_msg("prepare_weights case %d: %s, want %s (%s)", k, mla_status_str(st),
                     mla_status_str(bad[k].status), mla_last_error());
        assert_true(mla_last_error()[0] != '\0');
        assert_true(support_contains(mla_last_error(), bad[k].needle));
        expect_guards(uk, sizeof uk, "w_uk_t after a rejected call");
        expect_guards(uv, sizeof uv, "w_uv after a rejected call");
    }
}

typedef struct fspec {
    mla_dtype q_dtype, cache_dtype, kvb_dtype, w_dtype;
    int64_t s_q, H, L, R, P, V, block_size, num_reqs;
    int32_t lens[4];
    bool pad, lse;
    int threads;
} fspec;

typedef struct fcase {
    fspec s;
    paged pg;
    int32_t *lens;
    float *w_eff;
    void *kvb, *w_uk_t, *w_uv, *q;
    unsigned char *out_buf, *lse_buf;
    size_t out_bytes, lse_bytes;
    size_t q_bytes, uk_bytes, uv_bytes;
    uint64_t inputs_sum; /* cache, q, weights: the call only reads them */
    mla_decode_forward_args f;
    double *want_out, *want_lse, *max_out, *lse_tol;
    char label[200];
} fcase;

static uint64_t forward_inputs_checksum(const fcase *c)
{
    return oracle_checksum(c->pg.cache.data, c->pg.bytes) ^ (oracle_checksum(c->q, c->q_bytes) * 3) ^
           (oracle_checksum(c->w_uk_t, c->uk_bytes) * 5) ^ (oracle_checksum(c->w_uv, c->uv_bytes) * 7);
}

static void make_forward(fcase *c, const fspec *s)
{
    memset(c, 0, sizeof *c);
    c->s = *s;
    const int64_t B = s->num_reqs, Td = B * s->s_q, H = s->H, L = s->L, R = s->R, P = s->P, V = s->V;
    c->lens = malloc(sizeof(int32_t) * (size_t)B);
    memcpy(c->lens, s->lens, sizeof(int32_t) * (size_t)B);
    make_paged(&c->pg, s->cache_dtype, c->lens, B, L + R, s->block_size, s->pad, 0, JUNK_BIG);
    /* the cache, written by concat_and_cache from f32 kv_c and k_pe */
    int64_t tokens = 0;
    for (int64_t b = 0; b < B; b++)
        tokens += c->lens[b];
    float *kv_c = malloc(sizeof(float) * (size_t)(tokens * L + 1));
    float *k_pe = malloc(sizeof(float) * (size_t)(tokens * R + 1));
    int64_t *slots = malloc(sizeof(int64_t) * (size_t)(tokens + 1));
    for (int64_t i = 0; i < tokens * L; i++)
        kv_c[i] = (float)uniform();
    for (int64_t i = 0; i < tokens * R; i++)
        k_pe[i] = (float)uniform();
    int64_t t = 0;
    for (int64_t b = 0; b < B; b++)
        for (int64_t j = 0; j < c->lens[b]; j++)
            slots[t++] = (int64_t)c->pg.block_table[b * c->pg.cols + j / s->block_size] * s->block_size +
                         j % s->block_size;
    mla_status st = mla_concat_and_cache(&c->pg.cache, kv_c, L, R ? k_pe : NULL, R, MLA_DTYPE_F32, L, R,
                                         slots, tokens, 0);
    if (st != MLA_OK)
        fail_msg("mla_concat_and_cache: %s: %s", mla_status_str(st), mla_last_error());
    free(kv_c);
    free(k_pe);
    free(slots);
    /* weights: k_nope = W_k c has variance ~ 1/3 of c's */
    const int64_t nw = H * (P + V) * L;
    c->kvb = random_kvb(s->kvb_dtype, nw, sqrt(3.0 / (double)L));
    c->w_eff = malloc(sizeof(float) * (size_t)nw);
    for (int64_t i = 0; i < nw; i++) {
        float x = oracle_load(s->kvb_dtype, c->kvb, i, 1.0f);
        c->w_eff[i] = s->w_dtype == MLA_DTYPE_BF16 ? oracle_f32_from((uint32_t)bf16_rne(x) << 16) : x;
    }
    const int64_t wsize = mla_dtype_size(s->w_dtype);
    c->uk_bytes = (size_t)(H * P * L * wsize);
    c->uv_bytes = (size_t)(H * L * V * wsize);
    c->w_uk_t = xalloc(c->uk_bytes);
    c->w_uv = xalloc(c->uv_bytes);
    st = mla_prepare_weights(c->kvb, s->kvb_dtype, H, L, P, V, c->w_uk_t, c->w_uv, s->w_dtype, s->threads);
    if (st != MLA_OK)
        fail_msg("mla_prepare_weights: %s: %s", mla_status_str(st), mla_last_error());
    /* q [Td, H, P+R], padded heads and tokens, junk in the gaps */
    mla_decode_forward_args *f = &c->f;
    f->qk_nope_dim = P;
    f->v_head_dim = V;
    f->q_head_stride = P + R + (s->pad ? 2 : 0);
    f->q_token_stride = H * f->q_head_stride + (s->pad ? 3 : 0);
    const int64_t nq = Td * f->q_token_stride;
    c->q_bytes = (size_t)(nq * mla_dtype_size(s->q_dtype));
    c->q = xalloc(c->q_bytes);
    fill_junk(s->q_dtype, c->q, nq, JUNK_BIG);
    for (int64_t tt = 0; tt < Td; tt++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t d = 0; d < P + R; d++)
                put_random(s->q_dtype, c->q, tt * f->q_token_stride + h * f->q_head_stride + d);
    f->q = c->q;
    f->w_uk_t = c->w_uk_t;
    f->w_uv = c->w_uv;
    f->w_dtype = s->w_dtype;
    f->out_token_stride = H * V + (s->pad ? 5 : 0);
    const int64_t size = mla_dtype_size(s->q_dtype);
    c->out_bytes = (size_t)((Td > 0 ? (Td - 1) * f->out_token_stride + H * V : 0) * size) + 2 * MARGIN;
    c->out_buf = xalloc(c->out_bytes);
    f->out = c->out_buf + MARGIN;
    c->lse_bytes = (size_t)(B * H * s->s_q) * sizeof(float) + 2 * MARGIN;
    c->lse_buf = xalloc(c->lse_bytes);
    f->attn = (mla_decode_args){.num_reqs = B, .s_q = s->s_q, .num_heads = H, .kv_lora_rank = L,
                                .rope_dim = R, .scale = 2.0f / sqrtf((float)(P + R)),
                                .q_dtype = s->q_dtype, .cache = &c->pg.cache,
                                .block_table = c->pg.block_table, .block_table_cols = c->pg.cols,
                                .seq_lens = c->lens, .lse = s->lse ? (float *)(c->lse_buf + MARGIN) : NULL};
    snprintf(c->label, sizeof c->label,
             "forward: q %s, cache %s, kv_b_proj %s -> w %s, B %lld, s_q %lld, H %lld, L %lld, R %lld, "
             "P %lld, V %lld, bs %lld%s", mla_dtype_name(s->q_dtype), mla_dtype_name(s->cache_dtype),
             mla_dtype_name(s->kvb_dtype), mla_dtype_name(s->w_dtype), (long long)B, (long long)s->s_q,
             (long long)H, (long long)L, (long long)R, (long long)P, (long long)V,
             (long long)s->block_size, s->pad ? ", padded" : "");
    c->inputs_sum = forward_inputs_checksum(c);
    /* the oracle, fed the same quantized inputs */
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
    const double u = s->q_dtype == MLA_DTYPE_BF16 ? 0x1p-8 : s->q_dtype == MLA_DTYPE_F16 ? 0x1p-11 : 0.0;
    c->lse_tol = malloc(sizeof(double) * (size_t)(B * H * s->s_q + 1));
    for (int64_t t = 0; t < Td; t++)
        for (int64_t h = 0; h < H; h++) {
            double sum = 0.0;
            for (int64_t l = 0; l < L; l++) {
                double ql = 0.0; /* the absorbed query, in double */
                for (int64_t p = 0; p < P; p++)
                    ql += (double)oracle_load(s->q_dtype, c->q, t * f->q_token_stride + h * f->q_head_stride + p, 1.0f) *
                          c->w_eff[(h * (P + V) + p) * L + l];
                double x = ql * o_lat[(t * H + h) * L + l];
                sum += x * x;
            }
            int64_t b = t / s->s_q, i = t % s->s_q;
            c->lse_tol[(b * H + h) * s->s_q + i] =
                LSE_TOL + 4.0 * (double)f->attn.scale * u / sqrt(3.0) * sqrt(sum);
        }
    free(o_lat);
}

static void free_forward(fcase *c)
{
    free_paged(&c->pg);
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

static void check_forward(const fcase *c, const char *backend)
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
                    fail_msg("%s: %s: request %lld (len %lld) query %lld: out[%lld][%lld] (head %lld, "
                             "v %lld) = %.9g, want %.9g: |err| %.3g > %.0e x max|out| %.4g", backend,
                             c->label, (long long)b, (long long)len, (long long)i, (long long)t,
                             (long long)e, (long long)(e / V), (long long)(e % V), got, want, err, rel,
                             c->max_out[b]);
                worst = err > worst ? err : worst;
            }
            if (n > 0 && c->max_out[b] > 0)
                note_worst(&worst_fwd[c->s.q_dtype], worst / c->max_out[b]);
            memset(mask + MARGIN + t * f->out_token_stride * size, GUARD, (size_t)(H * V * size));
            for (int64_t h = 0; f->attn.lse && h < H; h++) {
                float got = f->attn.lse[(b * H + h) * s_q + i];
                double want = c->want_lse[(b * H + h) * s_q + i];
                /* ql_nope is kept in q's dtype (as vLLM does), so a 16-bit
                 * forward's logits, and its lse, carry that rounding: a
                 * per-row bound (make_forward) */
                double lse_tol = c->lse_tol[(b * H + h) * s_q + i], err = fabs((double)got - want);
                if (n > 0)
                    note_worst(&worst_fwd_lse[c->s.q_dtype], err / lse_tol);
                if (n == 0 ? !(isinf(got) && got < 0) : !(err <= lse_tol))
                    fail_msg("%s: %s: request %lld (len %lld) query %lld head %lld: lse %.9g, want %.9g "
                             "(|err| %.3g > %.3g)", backend, c->label, (long long)b, (long long)len,
                             (long long)i, (long long)h, got, want, err, lse_tol);
            }
        }
    }
    if (forward_inputs_checksum(c) != c->inputs_sum)
        fail_msg("%s: %s: the cache, q or the weights changed", backend, c->label);
    char what[300];
    snprintf(what, sizeof what, "%s: %s: out buffer", backend, c->label);
    expect_guards(mask, c->out_bytes, what);
    free(mask);
    snprintf(what, sizeof what, "%s: %s: lse buffer", backend, c->label);
    if (f->attn.lse) {
        expect_guards(c->lse_buf, MARGIN, what);
        expect_guards(c->lse_buf + c->lse_bytes - MARGIN, MARGIN, what);
    } else {
        expect_guards(c->lse_buf, c->lse_bytes, what);
    }
}

static void test_forward(void **state)
{
    (void)state;
    const mla_dtype F32 = MLA_DTYPE_F32, BF16 = MLA_DTYPE_BF16, F16 = MLA_DTYPE_F16;
    const fspec specs[] = {
        {F32, F32, F32, F32, 2, 3, 32, 8, 16, 8, 16, 3, {1, 17, 40}, true, true, 1},
        {F32, BF16, F32, BF16, 1, 3, 32, 8, 16, 8, 1, 2, {5, 33}, false, true, 2},
        {BF16, BF16, BF16, BF16, 2, 3, 32, 8, 16, 8, 64, 3, {0, 2, 70}, true, false, 0},
        {F16, MLA_DTYPE_FP8_E4M3, F32, F32, 1, 3, 32, 8, 16, 8, 16, 2, {9, 16}, false, true, 2},
        {F32, F16, BF16, F32, 4, 3, 32, 8, 16, 8, 16, 3, {0, 3, 9}, true, true, 3},
        {F32, MLA_DTYPE_FP8_E5M2, F16, BF16, 1, 2, 24, 0, 16, 8, 16, 2, {7, 30}, false, true, 1},
        /* DeepSeek-like: 512 + 64 latent, 128 + 64 q, 128 v, 16 heads, short contexts */
        {F32, BF16, F32, BF16, 2, 16, 512, 64, 128, 128, 64, 2, {20, 45}, true, true, 0},
        {BF16, BF16, BF16, BF16, 1, 16, 512, 64, 128, 128, 64, 2, {33, 64}, false, true, 2},
    };
    /* A backend that validates for the caller's config (q dtype, cache
     * dtype, L, R, H, block size) must run the forward call. Refusals are
     * collected so the other backends and cases still get checked; the test
     * fails at the end if there were any. */
    int refused = 0;
    char first_refusal[400] = "";
    for (int k = 0; k < COUNT(specs); k++) {
        fcase c;
        make_forward(&c, &specs[k]);
        mla_config cfg = config_of(&c.f.attn);
        int ran = 0;
        for (int i = 0; i < mla_backend_count(); i++) {
            if (!force_decode_backend(i, &cfg))
                continue;
            const char *name = mla_backend_at(i)->name;
            memset(c.out_buf, GUARD, c.out_bytes);
            memset(c.lse_buf, GUARD, c.lse_bytes);
            mla_status st = run_forward(&c.f, specs[k].threads, 0, c.label);
            if (st == MLA_ERR_BACKEND_INVALID) {
                if (refused++ == 0)
                    snprintf(first_refusal, sizeof first_refusal, "%s: %s: %s", name, c.label,
                             mla_last_error());
                print_message("[ REFUSED  ] %s: %s: %s\n", name, c.label, mla_last_error());
                expect_guards(c.out_buf, c.out_bytes, "out after a refused forward call");
                continue;
            }
            if (st != MLA_OK)
                fail_msg("%s: %s: mla_decode_forward: %s: %s", name, c.label, mla_status_str(st),
                         mla_last_error());
            assert_string_equal(mla_last_backend(), name);
            check_forward(&c, name);
            ran++;
        }
        assert_int_equal(mla_force_backend(MLA_OP_DECODE, NULL), MLA_OK);
        if (ran == 0)
            fail_msg("%s: no backend can run this", c.label);
        free_forward(&c);
    }
    print_message("[ ACCURACY ] forward, worst |out - oracle| / max|out|: f32 %.2e (tol %.1e), "
                  "bf16 %.2e (tol %.1e), f16 %.2e (tol %.1e)\n", worst_fwd[MLA_DTYPE_F32],
                  forward_tol(MLA_DTYPE_F32), worst_fwd[MLA_DTYPE_BF16], forward_tol(MLA_DTYPE_BF16),
                  worst_fwd[MLA_DTYPE_F16], forward_tol(MLA_DTYPE_F16));
    print_message("[ ACCURACY ] forward, worst |lse - oracle| / its bound: f32 %.2f, bf16 %.2f, f16 %.2f\n",
                  worst_fwd_lse[MLA_DTYPE_F32], worst_fwd_lse[MLA_DTYPE_BF16], worst_fwd_lse[MLA_DTYPE_F16]);
    if (refused > 0)
        fail_msg("%d forward call(s) refused by a forced backend that mla_backend_validate accepts "
                 "for the call's config; first: %s", refused, first_refusal);
}

/* ---- 5: bad input: a status, a message, and not one byte written ------------------------------ */

typedef struct bad_env {
    mla_kv_cache cache;
    uint16_t cache_data[6 * 4 * 10];
    uint64_t cache_sum;
    int32_t lens[2], block_table[6];
    float q[4 * 3 * 10];
    unsigned char out[MARGIN + 4 * 3 * 8 * 4 + MARGIN], lse[MARGIN + 12 * 4 + MARGIN];
    mla_decode_args a;
    unsigned char *ws;
    int64_t ws_bytes; /* plenty */
    int64_t need;     /* what the good call needs on 1 thread */
    int mismatches;   /* rejected, but with another status than documented */
    char mismatch_text[1024];
} bad_env;

static void bad_env_reset(bad_env *e)
{
    memset(e->out, GUARD, sizeof e->out);
    memset(e->lse, GUARD, sizeof e->lse);
}

/* B 2, s_q 2, H 3, L 8, R 2, bf16 cache of 6 blocks of 4 rows, 3 block-table
 * columns; lens 5 and 9: request 0 reads columns 0-1 (column 2 holds 1000,
 * which is never read), request 1 columns 0-2. */
static void bad_env_init(bad_env *e)
{
    memset(e, 0, sizeof *e);
    for (int i = 0; i < 6 * 4 * 10; i++)
        put_random(MLA_DTYPE_BF16, e->cache_data, i);
    e->cache = (mla_kv_cache){.data = e->cache_data, .dtype = MLA_DTYPE_BF16, .num_blocks = 6,
                              .block_size = 4, .width = 10, .scale = 1.0f};
    e->cache_sum = oracle_checksum(e->cache_data, sizeof e->cache_data);
    e->lens[0] = 5;
    e->lens[1] = 9;
    const int32_t bt[6] = {4, 1, 1000, 0, 5, 2};
    memcpy(e->block_table, bt, sizeof bt);
    for (int i = 0; i < 4 * 3 * 10; i++)
        e->q[i] = (float)uniform();
    e->a = (mla_decode_args){.num_reqs = 2, .s_q = 2, .num_heads = 3, .kv_lora_rank = 8, .rope_dim = 2,
                             .scale = 0.3f, .q_dtype = MLA_DTYPE_F32, .q_nope = e->q,
                             .q_nope_token_stride = 30, .q_nope_head_stride = 10, .q_pe = e->q + 8,
                             .q_pe_token_stride = 30, .q_pe_head_stride = 10, .cache = &e->cache,
                             .block_table = e->block_table, .block_table_cols = 3, .seq_lens = e->lens,
                             .out = e->out + MARGIN, .out_token_stride = 24, .out_head_stride = 8,
                             .lse = (float *)(e->lse + MARGIN)};
    assert_int_equal(mla_decode_workspace_size(&e->a, 1, &e->need), MLA_OK);
    e->ws_bytes = e->need * 8 + (1 << 20);
    e->ws = xalloc((size_t)e->ws_bytes);
    bad_env_reset(e);
}

/* The call failed with `status` and a message naming the problem (says
 * `needle`), and wrote nothing. Acceptance, an empty message or a write fail
 * at once; another failure status or a message without the needle is
 * collected and reported at the end (bad_env_finish), so every case runs. */
static void expect_rejected(bad_env *e, mla_status got, mla_status status, const char *needle)
{
    if (got == MLA_OK)
        fail_msg("accepted, want %s (%s)", mla_status_str(status), needle);
    if (mla_last_error()[0] == '\0')
        fail_msg("%s: empty mla_last_error()", needle);
    if (got != status || !strstr(mla_last_error(), needle)) {
        size_t used = strlen(e->mismatch_text);
        if (got != status)
            snprintf(e->mismatch_text + used, sizeof e->mismatch_text - used, "%s%s, want %s: \"%s\"",
                     e->mismatches ? "; " : "", mla_status_str(got), mla_status_str(status),
                     mla_last_error());
        else
            snprintf(e->mismatch_text + used, sizeof e->mismatch_text - used,
                     "%s\"%s\" does not say \"%s\"", e->mismatches ? "; " : "", mla_last_error(), needle);
        e->mismatches++;
    }
    if (getenv("TDEC_SHOW"))
        print_message("[ REJECTED ] %s: %s\n", mla_status_str(got), mla_last_error());
    assert_true(oracle_checksum(e->cache_data, sizeof e->cache_data) == e->cache_sum);
    expect_guards(e->out, sizeof e->out, "out after a rejected call");
    expect_guards(e->lse, sizeof e->lse, "lse after a rejected call");
}

static void bad_env_finish(bad_env *e)
{
    free(e->ws);
    if (e->mismatches > 0)
        fail_msg("%d rejection(s) with another status than documented or a message not naming "
                 "the problem: %s", e->mismatches, e->mismatch_text);
}

static mla_status decode_with(bad_env *e, const mla_decode_args *a)
{
    return mla_decode(a, e->ws, e->ws_bytes, 1);
}

/* The good call's out and lse against the oracle (f32 tolerances). */
static void expect_good(bad_env *e, const mla_decode_args *a, const char *what)
{
    double want_out[4 * 3 * 8], want_lse[12];
    oracle_decode_latent(a, want_out, want_lse);
    for (int64_t t = 0; t < a->num_reqs * 2; t++)
        for (int64_t h = 0; h < 3; h++)
            for (int64_t l = 0; l < 8; l++) {
                double err = fabs(((const float *)a->out)[t * 24 + h * 8 + l] - want_out[(t * 3 + h) * 8 + l]);
                if (!(err <= 1e-5))
                    fail_msg("%s: out[%lld][%lld][%lld] off by %g", what, (long long)t, (long long)h,
                             (long long)l, err);
            }
    for (int64_t i = 0; a->lse && i < a->num_reqs * 6; i++)
        if (!(fabs(a->lse[i] - want_lse[i]) <= LSE_TOL))
            fail_msg("%s: lse[%lld] = %g, want %g", what, (long long)i, a->lse[i], want_lse[i]);
    assert_true(oracle_checksum(e->cache_data, sizeof e->cache_data) == e->cache_sum);
}

static void test_decode_rejects(void **state)
{
    (void)state;
    bad_env e;
    bad_env_init(&e);
    mla_decode_args b;

    /* the good calls: an out-of-range id in a column past ceil(len / bs) is
     * not read (1000, then -7); seq_len may fill the block table exactly;
     * lse may be NULL; no requests writes nothing */
    assert_int_equal(decode_with(&e, &e.a), MLA_OK);
    expect_good(&e, &e.a, "block_table[0][2] = 1000 past ceil(5 / 4) = 2 columns");
    e.block_table[2] = -7;
    bad_env_reset(&e);
    assert_int_equal(decode_with(&e, &e.a), MLA_OK);
    expect_good(&e, &e.a, "block_table[0][2] = -7 past ceil(5 / 4) = 2 columns");
    e.lens[1] = 12;
    b = e.a;
    b.lse = NULL;
    bad_env_reset(&e);
    assert_int_equal(decode_with(&e, &b), MLA_OK);
    expect_good(&e, &b, "seq_lens[1] = 12 = 3 columns x 4");
    expect_guards(e.lse, sizeof e.lse, "lse NULL: lse buffer");
    e.lens[1] = 9;
    b = e.a;
    b.num_reqs = 0;
    bad_env_reset(&e);
    assert_int_equal(decode_with(&e, &b), MLA_OK);
    expect_guards(e.out, sizeof e.out, "no requests: out");
    expect_guards(e.lse, sizeof e.lse, "no requests: lse");
    bad_env_reset(&e);

    /* block table and lengths */
    e.lens[1] = 13; /* 4 columns' worth, the table has 3 */
    expect_rejected(&e, decode_with(&e, &e.a), MLA_ERR_OUT_OF_RANGE, "seq_lens[1]");
    e.lens[1] = 9;
    b = e.a;
    b.block_table_cols = 2; /* request 1 needs 3 */
    b.block_table = (const int32_t[]){4, 1, 0, 5};
    expect_rejected(&e, decode_with(&e, &b), MLA_ERR_OUT_OF_RANGE, "seq_lens[1]");
    e.block_table[5] = 6; /* request 1, column 2: one past num_blocks */
    expect_rejected(&e, decode_with(&e, &e.a), MLA_ERR_OUT_OF_RANGE, "block_table[1][2]");
    e.block_table[5] = -1;
    expect_rejected(&e, decode_with(&e, &e.a), MLA_ERR_OUT_OF_RANGE, "block_table[1][2]");
    e.block_table[5] = 2;
    e.block_table[1] = INT32_MAX;
    expect_rejected(&e, decode_with(&e, &e.a), MLA_ERR_OUT_OF_RANGE, "block_table[0][1]");
    e.block_table[1] = 1;
    e.lens[0] = -1;
    expect_rejected(&e, decode_with(&e, &e.a), MLA_ERR_INVALID_ARGUMENT, "seq_lens[0]");
    e.lens[0] = 5;

    /* sizes */
    b = e.a;
    b.s_q = 0;
    expect_rejected(&e, decode_with(&e, &b), MLA_ERR_INVALID_ARGUMENT, "s_q");
    b.s_q = -2;
    expect_rejected(&e, decode_with(&e, &b), MLA_ERR_INVALID_ARGUMENT, "s_q");
    b = e.a;
    b.num_heads = 0;
    expect_rejected(&e, decode_with(&e, &b), MLA_ERR_INVALID_ARGUMENT, "num_heads");
    b = e.a;
    b.num_reqs = -1;
    expect_rejected(&e, decode_with(&e, &b), MLA_ERR_INVALID_ARGUMENT, "num_reqs");
    b = e.a;
    b.kv_lora_rank = 0;
    b.rope_dim = 10; /* L + R is still the width */
    expect_rejected(&e, decode_with(&e, &b), MLA_ERR_INVALID_ARGUMENT, "kv_lora_rank");
    b = e.a;
    b.rope_dim = 3;
    expect_rejected(&e, decode_with(&e, &b), MLA_ERR_INVALID_ARGUMENT, "width");
    b = e.a;
    b.kv_lora_rank = 9;
    b.rope_dim = 2;
    expect_rejected(&e, decode_with(&e, &b), MLA_ERR_INVALID_ARGUMENT, "width");
    b = e.a;
    b.rope_dim = -1;
    b.kv_lora_rank = 11;
    expect_rejected(&e, decode_with(&e, &b), MLA_ERR_INVALID_ARGUMENT, "rope_dim");
    b = e.a;
    b.block_table_cols = -1;
    expect_rejected(&e, decode_with(&e, &b), MLA_ERR_INVALID_ARGUMENT, "block_table");
    b = e.a;
    b.q_nope_token_stride = INT64_MAX / 2;
    expect_rejected(&e, decode_with(&e, &b), MLA_ERR_OVERFLOW, "q_nope");

    /* NULLs */
    b = e.a;
    b.q_nope = NULL;
    expect_rejected(&e, decode_with(&e, &b), MLA_ERR_INVALID_ARGUMENT, "q_nope");
    b = e.a;
    b.q_pe = NULL; /* R = 2 */
    expect_rejected(&e, decode_with(&e, &b), MLA_ERR_INVALID_ARGUMENT, "q_pe");
    b = e.a;
    b.cache = NULL;
    expect_rejected(&e, decode_with(&e, &b), MLA_ERR_INVALID_ARGUMENT, "cache");
    b = e.a;
    b.block_table = NULL;
    expect_rejected(&e, decode_with(&e, &b), MLA_ERR_INVALID_ARGUMENT, "block_table");
    b = e.a;
    b.seq_lens = NULL;
    expect_rejected(&e, decode_with(&e, &b), MLA_ERR_INVALID_ARGUMENT, "seq_lens");
    b = e.a;
    b.out = NULL;
    expect_rejected(&e, decode_with(&e, &b), MLA_ERR_INVALID_ARGUMENT, "out");
    expect_rejected(&e, decode_with(&e, NULL), MLA_ERR_INVALID_ARGUMENT, "args");

    /* dtypes, scale, the cache descriptor */
    b = e.a;
    b.q_dtype = MLA_DTYPE_FP8_E4M3;
    expect_rejected(&e, decode_with(&e, &b), MLA_ERR_UNSUPPORTED, "fp8_e4m3");
    b = e.a;
    b.scale = NAN;
    expect_rejected(&e, decode_with(&e, &b), MLA_ERR_INVALID_ARGUMENT, "scale");
    b.scale = INFINITY;
    expect_rejected(&e, decode_with(&e, &b), MLA_ERR_INVALID_ARGUMENT, "scale");
    b.scale = -INFINITY;
    expect_rejected(&e, decode_with(&e, &b), MLA_ERR_INVALID_ARGUMENT, "scale");
    mla_kv_cache bad_cache = e.cache;
    bad_cache.dtype = MLA_DTYPE_FP8_E4M3; /* same bytes seen as fp8, with no scale */
    bad_cache.scale = 0.0f;
    b = e.a;
    b.cache = &bad_cache;
    expect_rejected(&e, decode_with(&e, &b), MLA_ERR_INVALID_ARGUMENT, "scale");
    bad_cache = e.cache;
    bad_cache.block_size = 0;
    expect_rejected(&e, decode_with(&e, &b), MLA_ERR_INVALID_ARGUMENT, "block_size");
    bad_cache = e.cache;
    bad_cache.data = NULL;
    expect_rejected(&e, decode_with(&e, &b), MLA_ERR_INVALID_ARGUMENT, "cache");

    /* schedule parameters */
    mla_decode_sched_params huge = {.num_parts = INT64_C(1) << 40, .overhead = -1};
    b = e.a;
    b.sched = &huge;
    expect_rejected(&e, decode_with(&e, &b), MLA_ERR_INVALID_ARGUMENT, "num_parts");

    /* workspace */
    if (e.need > 0) {
        expect_rejected(&e, mla_decode(&e.a, e.ws, e.need - 1, 1), MLA_ERR_CAPACITY, "workspace");
        expect_rejected(&e, mla_decode(&e.a, NULL, e.need, 1), MLA_ERR_INVALID_ARGUMENT, "workspace");
    }
    int64_t bytes = 0;
    assert_int_equal(mla_decode_workspace_size(NULL, 1, &bytes), MLA_ERR_INVALID_ARGUMENT);
    assert_int_equal(mla_decode_workspace_size(&e.a, 1, NULL), MLA_ERR_INVALID_ARGUMENT);

    /* a forced backend that runs on this CPU but not this config: an error
     * listing the reasons, nothing written */
    mla_config cfg = config_of(&e.a);
    for (int i = 0; i < mla_backend_count(); i++) {
        const char *name = mla_backend_at(i)->name;
        mla_reasons cpu, why;
        assert_int_equal(mla_backend_validate(name, MLA_OP_DECODE, NULL, &cpu), MLA_OK);
        assert_int_equal(mla_backend_validate(name, MLA_OP_DECODE, &cfg, &why), MLA_OK);
        if (cpu.count > 0 || why.count == 0)
            continue;
        assert_int_equal(mla_force_backend(MLA_OP_DECODE, name), MLA_OK);
        expect_rejected(&e, decode_with(&e, &e.a), MLA_ERR_BACKEND_INVALID, why.text[0]);
        print_message("[ FORCED   ] %s cannot run %s q / %s cache: rejected with \"%s\"\n", name,
                      mla_dtype_name(cfg.q_dtype), mla_dtype_name(cfg.cache_dtype), mla_last_error());
    }
    assert_int_equal(mla_force_backend(MLA_OP_DECODE, NULL), MLA_OK);
    bad_env_finish(&e);
}

static void test_forward_rejects(void **state)
{
    (void)state;
    bad_env e;
    bad_env_init(&e);
    enum { H = 3, L = 8, P = 4, V = 3 };
    float q[4 * H * (P + 2)], w_uk_t[H * P * L], w_uv[H * L * V];
    for (int i = 0; i < COUNT(q); i++)
        q[i] = (float)uniform();
    for (int i = 0; i < COUNT(w_uk_t); i++)
        w_uk_t[i] = (float)uniform();
    for (int i = 0; i < COUNT(w_uv); i++)
        w_uv[i] = (float)uniform();
    mla_decode_forward_args good = {.qk_nope_dim = P, .v_head_dim = V, .q = q, .q_token_stride = H * (P + 2),
                                    .q_head_stride = P + 2, .w_uk_t = w_uk_t, .w_uv = w_uv,
                                    .w_dtype = MLA_DTYPE_F32, .out = e.out + MARGIN,
                                    .out_token_stride = H * V, .attn = e.a};
    good.attn.q_nope = good.attn.q_pe = NULL;
    good.attn.out = NULL;
    good.attn.q_nope_token_stride = good.attn.q_nope_head_stride = 0;
    good.attn.q_pe_token_stride = good.attn.q_pe_head_stride = 0;
    good.attn.out_token_stride = good.attn.out_head_stride = 0;
    int64_t need = 0;
    assert_int_equal(mla_decode_forward_workspace_size(&good, 1, &need), MLA_OK);
    assert_true(need > 0); /* ql_nope and o_lat live there */
    unsigned char *ws = xalloc((size_t)need * 8 + (1 << 20));
    const int64_t ws_bytes = need * 8 + (1 << 20);
    assert_int_equal(mla_decode_forward(&good, ws, ws_bytes, 1), MLA_OK);
    bad_env_reset(&e);
    mla_decode_forward_args f;
#define FWD_REJECT(edit, status, needle)                                                          \
    do {                                                                                          \
        f = good;                                                                                 \
        edit;                                                                                     \
        expect_rejected(&e, mla_decode_forward(&f, ws, ws_bytes, 1), status, needle);             \
    } while (0)
    /* the caller's field is q (attn.q_nope is unused and must be left 0) */
    FWD_REJECT(f.q = NULL, MLA_ERR_INVALID_ARGUMENT, "q is NULL");
    FWD_REJECT(f.w_uk_t = NULL, MLA_ERR_INVALID_ARGUMENT, "w_uk_t");
    FWD_REJECT(f.w_uv = NULL, MLA_ERR_INVALID_ARGUMENT, "w_uv");
    FWD_REJECT(f.out = NULL, MLA_ERR_INVALID_ARGUMENT, "out");
    FWD_REJECT(f.w_dtype = MLA_DTYPE_F16, MLA_ERR_UNSUPPORTED, "f16");
    FWD_REJECT(f.qk_nope_dim = 0, MLA_ERR_INVALID_ARGUMENT, "qk_nope_dim");
    FWD_REJECT(f.v_head_dim = 0, MLA_ERR_INVALID_ARGUMENT, "v_head_dim");
    FWD_REJECT(f.out_token_stride = H * V - 1, MLA_ERR_INVALID_ARGUMENT, "stride");
    FWD_REJECT(f.attn.q_dtype = MLA_DTYPE_FP8_E4M3, MLA_ERR_UNSUPPORTED, "fp8_e4m3");
    FWD_REJECT(f.attn.num_heads = 0, MLA_ERR_INVALID_ARGUMENT, "num_heads");
    FWD_REJECT(f.attn.scale = NAN, MLA_ERR_INVALID_ARGUMENT, "scale");
    e.block_table[5] = 6;
    FWD_REJECT((void)0, MLA_ERR_OUT_OF_RANGE, "block_table[1][2]");
    e.block_table[5] = 2;
    e.lens[1] = 13;
    FWD_REJECT((void)0, MLA_ERR_OUT_OF_RANGE, "seq_lens[1]");
    e.lens[1] = 9;
#undef FWD_REJECT
    expect_rejected(&e, mla_decode_forward(NULL, ws, ws_bytes, 1), MLA_ERR_INVALID_ARGUMENT, "args");
    expect_rejected(&e, mla_decode_forward(&good, ws, need - 1, 1), MLA_ERR_CAPACITY, "workspace");
    expect_rejected(&e, mla_decode_forward(&good, NULL, need, 1), MLA_ERR_INVALID_ARGUMENT, "workspace");
    free(ws);
    bad_env_finish(&e);
}

/* A failed test leaves its forced backend behind: every test starts clean. */
static int unforce(void **state)
{
    (void)state;
    return mla_force_backend(MLA_OP_DECODE, NULL) == MLA_OK ? 0 : -1;
}

#define TEST(f) cmocka_unit_test_setup_teardown(f, unforce, unforce)

int main(void)
{
    const struct CMUnitTest tests[] = {
        TEST(test_prepare_weights),
        TEST(test_prepare_weights_rejects),
        TEST(test_every_backend),
        TEST(test_decode_sweep),
        TEST(test_split_kv),
        TEST(test_batch_invariant),
        TEST(test_unaligned),
        TEST(test_nan_in_unused_memory),
        TEST(test_workspace),
        TEST(test_forward),
        TEST(test_decode_rejects),
        TEST(test_forward_rejects),
    };
    if (getenv("TDEC_FILTER")) /* e.g. TDEC_FILTER='test_forward*' */
        cmocka_set_test_filter(getenv("TDEC_FILTER"));
    return cmocka_run_group_tests_name("decode", tests, NULL, NULL);
}
