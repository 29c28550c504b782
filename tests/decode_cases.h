/*
 * The decode suites' shared case builder: paged caches with shuffled blocks
 * and junk wherever the kernels must not read, q in the layouts callers use,
 * outputs inside guard bytes, workspaces of exactly the queried size, the
 * double-precision oracles (oracle_decode_latent, oracle_decode_mha) and the
 * checks of results against them.
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
 *   Large logits (test_numerics.c: |lse| up to 1e4): the lse is an f32,
 *     rounded at its own magnitude (2^-24 |lse| a rounding), so every lse
 *     bound adds LSE_REL_TOL |lse|. A request the schedule may split (any
 *     schedule but one part) weighs its partials by e^(lse_i - m) from
 *     those f32 partial lses: a weight's relative error reaches
 *     2^-23 |lse|, so its out bound adds LSE_REL_TOL |lse| max|V|.
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
#ifndef MLA_TEST_DECODE_CASES_H
#define MLA_TEST_DECODE_CASES_H

#include "support.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define COUNT(a) (int)(sizeof(a) / sizeof((a)[0]))
#define GUARD 0xab
#define MARGIN 64 /* guard bytes before and after every output buffer */
#define LSE_TOL 1e-4
#define LSE_REL_TOL 0x1p-22 /* of |lse| (two f32 roundings) */
/* The out tolerance above, relative to max|V|, for `len` keys. */
double case_out_tol(mla_dtype q_dtype, int64_t len);

/* Whether got is the oracle's want: within tol of a finite want; NaN for
 * NaN and the same infinity for an infinity (inputs holding inf or NaN,
 * docs/semantics.md §8). */
bool case_close(double want, double got, double tol);

extern const mla_dtype case_q_dtypes[3];     /* f32, bf16, f16      */
extern const mla_dtype case_cache_dtypes[5]; /* those and both fp8s */

/* ---- memory, values, guards ------------------------------------------------ */

/* 64-byte aligned, with 64 bytes of slack for deliberately misaligned views. */
void *case_alloc(size_t bytes);
/* Room for a workspace of `bytes` at base + MARGIN + ws_misalign (any
 * ws_misalign < 64), guard bytes all around; the free checks the guards
 * outside the workspace, naming `what`, and frees base. */
unsigned char *case_guarded_workspace(int64_t bytes);
void case_free_guarded_workspace(unsigned char *base, int64_t bytes, int64_t ws_misalign,
                                 const char *what);
double case_uniform(void); /* [-1, 1) */
/* Element i of array = a random value in [-1, 1) as dtype stores it. */
void case_put_random(mla_dtype dtype, void *array, int64_t i);
/* Every byte of buf is GUARD; fails naming the first that is not. */
void case_expect_guards(const unsigned char *buf, size_t bytes, const char *what);
/* Random kv_b_proj values: uniform, times amp, spread over some exponents so
 * rounding to bf16 is exercised. */
void *case_random_kvb(mla_dtype dtype, int64_t n, double amp);

/* ---- running ----------------------------------------------------------------- */

mla_config case_config_of(const mla_decode_args *a);
mla_config case_config_of_forward(const mla_decode_forward_args *f);
/* Forward args with a's attention (sizes, scale, dtype, cache, block table,
 * seq_lens, lse, sched, bf16_compute); P, V, q, weights and out left 0. */
mla_decode_forward_args case_forward_of(const mla_decode_args *a);
/* mla_decode / mla_decode_forward with a workspace of exactly the queried
 * size, ws_misalign bytes past a 64-byte boundary, guard bytes right outside
 * it (checked after the call); returns the call's status. */
mla_status case_run_decode(const mla_decode_args *a, int threads, int64_t ws_misalign,
                           const char *what);
mla_status case_run_forward(const mla_decode_forward_args *f, int threads, int64_t ws_misalign,
                            const char *what);

/* ---- a paged cache ------------------------------------------------------------ */

typedef struct paged {
    mla_kv_cache cache;
    unsigned char *base;
    size_t bytes; /* from cache.data */
    int32_t *block_table;
    int64_t cols;
} paged;

/* Element offset of row j of request b. */
int64_t paged_row(const paged *p, int64_t b, int64_t j);

/* ---- mla_decode cases ----------------------------------------------------------- */

/* What fills memory the kernels must not read: values that spoil any result
 * they get into, +-1000 alternating (fp8 saturates), or NaN. */
typedef enum junk_kind { JUNK_BIG, JUNK_NAN } junk_kind;

typedef enum q_form {
    Q_CONCAT, /* one q [Td, H, L+R]; q_pe = q + L                                   */
    Q_SPLIT,  /* ql_nope and q_pe in their own buffers, padded, different strides  */
    Q_VLLM,   /* ql_nope [H, Td, L] (bmm output transposed: head stride Td*L,
                 token stride L); q_pe inside q [Td, H, P+R] at + P               */
} q_form;

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
    bool bf16_compute; /* mla_decode_args.bf16_compute */
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
    double *want_out, *want_lse, *max_v, *max_k; /* max|V|, max|K| per request */
    char label[200];
} dcase;

/* Edge lengths around the block size, and one random: 6 requests. */
void dspec_edge_lens(dspec *s);
/* Random rows in the cache and q; the oracle's answers if with_oracle. */
void dcase_make(dcase *c, const dspec *s, bool with_oracle);
/* The oracle's answers (again, after the cache or q changed), and max|V|
 * and max|K| (the whole row) per request over their finite values. */
void dcase_oracle(dcase *c);
void dcase_free(dcase *c);
/* Checksum of the cache and q (compared with inputs_sum). */
uint64_t dcase_inputs_checksum(const dcase *c);
/* Element d (< L + R) of query row (t, h), through the case's q pointers
 * and strides, = x as q's dtype stores it. */
void dcase_store_q(dcase *c, int64_t t, int64_t h, int64_t d, float x);
/* The case's inputs changed (a test wrote into q or the cache): the
 * checksum and the oracle again. */
void dcase_inputs_changed(dcase *c);
void dcase_reset_outputs(dcase *c);
/* Outputs reset, then mla_decode (as case_run_decode); fails, naming
 * `backend`, unless it succeeds. */
void dcase_decode(dcase *c, const char *backend, int threads, int64_t ws_misalign);
/* out and lse against the oracle; every other output byte untouched; the
 * inputs unchanged. */
void dcase_check(const dcase *c, const char *backend);
/* dcase_decode on the forced backend b, b the one that ran, dcase_check. */
void dcase_run_on(dcase *c, const mla_backend_desc *b, int threads, int64_t ws_misalign);
/* The worst errors dcase_check saw, as an [ ACCURACY ] line. */
void dcase_print_accuracy(void);

/* ---- mla_decode_forward cases ---------------------------------------------------- */

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

/* The cache written by mla_concat_and_cache, weights by
 * mla_prepare_weights, random q, and the non-absorbed oracle's answers. */
void fcase_make(fcase *c, const fspec *s);
void fcase_free(fcase *c);
void fcase_check(const fcase *c, const char *backend);
void fcase_print_accuracy(void);

/* ---- suites ------------------------------------------------------------------------ */

/* Appends to a case's label (size: its array's) what a test did to it. */
void case_label_add(char *label, size_t size, const char *format, ...)
    __attribute__((format(printf, 3, 4)));

/* A failed test leaves its forced backend behind: every test starts clean. */
int case_unforce(void **state);
#define CASE_TEST(f) cmocka_unit_test_setup_teardown(f, case_unforce, case_unforce)
/* Applies TDEC_FILTER (e.g. TDEC_FILTER='test_forward*'), if set. */
void case_apply_filter(void);

#endif
