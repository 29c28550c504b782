/* Double-precision oracles for number formats, written the plain way
 * (nearest representable value by search, ties to the even code), not from
 * the library's kernels, so ref is tested too. */
#ifndef MLA_TEST_ORACLE_H
#define MLA_TEST_ORACLE_H

#include <mla.h>

#include <stdbool.h>
#include <stdint.h>

/* A 16-bit float format: f16 (5 exponent bits, 10 mantissa) or bf16 (8, 7). */
typedef struct format16 {
    const char *name;
    mla_dtype dtype;
    int exp_bits, man_bits;
} format16;

extern const format16 ORACLE_F16, ORACLE_BF16;

/* An fp8 format: e4m3fn (no infinities, NaN 0x7f) or e5m2 (IEEE-like). */
typedef struct format8 {
    const char *name;
    mla_dtype dtype;
    int exp_bits, man_bits;
    uint8_t max_code, nan_code; /* largest finite; the NaN narrowing makes */
} format8;

extern const format8 ORACLE_E4M3, ORACLE_E5M2;

uint32_t oracle_f32_bits(float x);
float oracle_f32_from(uint32_t bits);
/* The value of a bf16 (its bits are the top half of an f32). */
float oracle_bf16_value(uint16_t h);

/* The infinity code of a 16-bit format. */
uint16_t oracle_inf_code16(const format16 *f);
/* Magnitude of a non-negative code, reading the infinity code as the next
 * power of two after the largest finite value (where rounding ties to it). */
double oracle_value16(const format16 *f, uint16_t code);
/* f32 -> 16-bit code, round to nearest, ties to even; NaN quieted. */
uint16_t oracle_narrow16(const format16 *f, float x);
/* 16-bit code -> f32 bits: exact; f16 NaNs come back quiet, bf16 NaNs unchanged. */
uint32_t oracle_widen16(const format16 *f, uint16_t code);

/* Magnitude of a finite non-negative fp8 code. */
double oracle_fp8_value(const format8 *f, uint8_t code);
/* f32 x -> fp8 of x / scale: the quotient rounded once to f32, then the
 * nearest code, ties to even, saturating at the largest finite value. */
uint8_t oracle_fp8_narrow(const format8 *f, float x, float scale);
/* fp8 code -> f32 bits of value * scale, rounded once; NaNs quiet with the
 * fp8 mantissa on top. */
uint32_t oracle_fp8_widen(const format8 *f, uint8_t code, float scale);

/* Element i of an array of any dtype, as f32 (fp8 times scale). */
float oracle_load(mla_dtype dtype, const void *array, int64_t i, float scale);
/* Stores x into element i of an array of any dtype (fp8: x / scale). */
void oracle_store(mla_dtype dtype, void *array, int64_t i, float x, float scale);

/* FNV-1a of n bytes: a checksum for "nothing was written". */
uint64_t oracle_checksum(const void *p, size_t n);

/* ---- attention oracles (double precision, plain loops) -------------------- */

/* oracle_load through a table of every code of the dtype (built with
 * oracle_load, rebuilt when the dtype or scale changes): the same values,
 * cheap enough for multi-megabyte caches. Not thread-safe. */
float oracle_load_table(mla_dtype dtype, const void *array, int64_t i, float scale);

/* Element offset of cache row (blk, off), resolving 0 strides to dense. */
int64_t oracle_cache_row(const mla_kv_cache *cache, int64_t blk, int64_t off);

/* Latent decode (docs/semantics.md §1.6 step 4, §5.2, §8) the plain way: for token
 * t = b*s_q + i and head h, logits scale * <q(t,h,:), row_j> over the cache
 * rows j <= seq_lens[b] - s_q + i of request b as stored (dequantized with
 * the fp8 scale), softmax, o = sum_j p_j row_j[0:L]. q is read through a's
 * pointers, strides and q_dtype; a->out, a->lse and a->sched are not used.
 * out [Td, H, L] dense; lse [B, H, s_q] (natural log of the scaled logits);
 * a row that sees no key, or whose every logit is -inf, gets 0 and -inf.
 * Keys a query may not see are never read; inf and NaN in what it reads go
 * through the plain IEEE arithmetic (docs/semantics.md §8). */
void oracle_decode_latent(const mla_decode_args *a, double *out, double *lse);

/* The non-absorbed MLA of docs/semantics.md §1.7 item 7 for the decode tokens of f:
 * k_nope[j,h] = W_k[h] c_j and v[j,h] = W_v[h] c_j up-projected from each
 * cache row's latent c_j = row_j[0:L] with kv_b_proj [H*(P+V), L] (f32,
 * row-major: rows h*(P+V) .. +P-1 are W_k[h], the next V rows W_v[h]);
 * logits scale * (q_nope . k_nope + q_pe . row_j[L:L+R]), causal as above.
 * q (t, h, d < P+R) is read through f->q, its strides and f->dtype.
 * out [Td, H*V] dense; lse [B, H, s_q]; rows that see no key get 0, -inf.
 * o_lat (NULL: not wanted) [Td, H, L] gets sum_j p_j c_j with the same
 * softmax weights, the latent output (for error bounds, not checking). */
void oracle_decode_mha(const mla_decode_forward_args *f, const float *kv_b_proj, double *out,
                       double *lse, double *o_lat);

/* |got - e^x| in units of the float spacing at e^x (an infinite got is
 * exact where e^x overflows float). */
double oracle_exp_ulp_error(float x, float got);

#endif
