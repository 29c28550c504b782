#include "oracle.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const format16 ORACLE_F16 = {"f16", MLA_DTYPE_F16, 5, 10};
const format16 ORACLE_BF16 = {"bf16", MLA_DTYPE_BF16, 8, 7};
const format8 ORACLE_E4M3 = {"fp8_e4m3", MLA_DTYPE_FP8_E4M3, 4, 3, 0x7e, 0x7f};
const format8 ORACLE_E5M2 = {"fp8_e5m2", MLA_DTYPE_FP8_E5M2, 5, 2, 0x7b, 0x7e};

/* Magnitude of code in a format of exp_bits and man_bits (IEEE layout). */
static double magnitude(int exp_bits, int man_bits, unsigned code)
{
    int bias = (1 << (exp_bits - 1)) - 1;
    int e = (int)(code >> man_bits);
    double m = code & ((1u << man_bits) - 1u);
    if (e == 0)
        return ldexp(m, 1 - bias - man_bits);
    return ldexp(1.0 + m / (double)(1u << man_bits), e - bias);
}

/* The code in [0, hi] nearest to a (value(0) <= a < value(hi)), ties to the
 * even code: a search over the format's own values, not bit tricks. */
static unsigned nearest_code(int exp_bits, int man_bits, unsigned hi, double a)
{
    unsigned lo = 0;
    while (hi - lo > 1) {
        unsigned mid = (lo + hi) / 2;
        if (magnitude(exp_bits, man_bits, mid) <= a)
            lo = mid;
        else
            hi = mid;
    }
    double below = a - magnitude(exp_bits, man_bits, lo), above = magnitude(exp_bits, man_bits, hi) - a;
    return below < above ? lo : above < below ? hi : (lo & 1u) ? hi : lo;
}

uint16_t oracle_inf_code16(const format16 *f)
{
    return (uint16_t)(((1u << f->exp_bits) - 1u) << f->man_bits);
}

/* Magnitude of a non-negative code, reading the infinity code as the next
 * power of two after the largest finite value (where rounding ties to it). */
double oracle_value16(const format16 *f, uint16_t code)
{
    return magnitude(f->exp_bits, f->man_bits, code);
}

uint32_t oracle_f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

float oracle_f32_from(uint32_t u)
{
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

float oracle_bf16_value(uint16_t h)
{
    return oracle_f32_from((uint32_t)h << 16);
}

/* f32 -> 16-bit code, round to nearest, ties to even; NaN quieted. */
uint16_t oracle_narrow16(const format16 *f, float x)
{
    uint32_t u = oracle_f32_bits(x);
    uint16_t sign = (uint16_t)((u >> 31) << 15);
    if (isnan(x)) /* keep the top payload bits, set the quiet bit */
        return (uint16_t)(sign | oracle_inf_code16(f) | (1u << (f->man_bits - 1)) |
                          ((u & 0x7fffffu) >> (23 - f->man_bits)));
    double a = fabs((double)x);
    if (a >= oracle_value16(f, oracle_inf_code16(f)))
        return (uint16_t)(sign | oracle_inf_code16(f));
    return (uint16_t)(sign | nearest_code(f->exp_bits, f->man_bits, oracle_inf_code16(f), a));
}

/* 16-bit code -> f32: exact; f16 NaNs come back quiet, bf16 NaNs unchanged. */
uint32_t oracle_widen16(const format16 *f, uint16_t code)
{
    uint32_t sign = (uint32_t)(code >> 15) << 31;
    uint16_t mag = code & 0x7fffu;
    if (mag > oracle_inf_code16(f)) {
        uint32_t payload = (uint32_t)(mag & ((1u << f->man_bits) - 1u)) << (23 - f->man_bits);
        uint32_t quiet = f->dtype == MLA_DTYPE_F16 ? 0x400000u : 0;
        return sign | 0x7f800000u | quiet | payload;
    }
    if (mag == oracle_inf_code16(f))
        return sign | 0x7f800000u;
    return sign | oracle_f32_bits((float)oracle_value16(f, mag));
}

/* Magnitude of a finite non-negative code. */
double oracle_fp8_value(const format8 *f, uint8_t code)
{
    return magnitude(f->exp_bits, f->man_bits, code);
}

/* f32 x -> fp8 of x / scale: the quotient rounded once to f32 (a double
 * quotient rounded to float is exactly that), then the nearest code, ties to
 * the even code, saturating at the largest finite value. */
uint8_t oracle_fp8_narrow(const format8 *f, float x, float scale)
{
    float q = (float)((double)x / (double)scale);
    uint8_t sign = signbit(q) ? 0x80 : 0;
    if (isnan(q))
        return sign | f->nan_code;
    double a = fabs((double)q);
    if (a >= oracle_fp8_value(f, f->max_code))
        return sign | f->max_code;
    return (uint8_t)(sign | nearest_code(f->exp_bits, f->man_bits, f->max_code, a));
}

/* fp8 code -> f32 bits of value * scale (the exact double product of two
 * floats, rounded once); NaNs quiet with the fp8 mantissa on top. */
uint32_t oracle_fp8_widen(const format8 *f, uint8_t code, float scale)
{
    uint32_t sign = (uint32_t)(code >> 7) << 31;
    uint8_t mag = code & 0x7f, man = mag & ((1u << f->man_bits) - 1u);
    bool e5m2 = f->dtype == MLA_DTYPE_FP8_E5M2;
    if (e5m2 ? mag > 0x7c : mag == 0x7f)
        return sign | 0x7fc00000u | ((uint32_t)man << (23 - f->man_bits));
    if (e5m2 && mag == 0x7c)
        return sign | 0x7f800000u;
    return sign | oracle_f32_bits((float)(oracle_fp8_value(f, mag) * (double)scale));
}

float oracle_load(mla_dtype dtype, const void *array, int64_t i, float scale)
{
    switch (dtype) {
    case MLA_DTYPE_F32:
        return ((const float *)array)[i];
    case MLA_DTYPE_BF16:
        return oracle_f32_from(oracle_widen16(&ORACLE_BF16, ((const uint16_t *)array)[i]));
    case MLA_DTYPE_F16:
        return oracle_f32_from(oracle_widen16(&ORACLE_F16, ((const uint16_t *)array)[i]));
    case MLA_DTYPE_FP8_E4M3:
        return oracle_f32_from(oracle_fp8_widen(&ORACLE_E4M3, ((const uint8_t *)array)[i], scale));
    default:
        return oracle_f32_from(oracle_fp8_widen(&ORACLE_E5M2, ((const uint8_t *)array)[i], scale));
    }
}

void oracle_store(mla_dtype dtype, void *array, int64_t i, float x, float scale)
{
    switch (dtype) {
    case MLA_DTYPE_F32:
        ((float *)array)[i] = x;
        break;
    case MLA_DTYPE_BF16:
        ((uint16_t *)array)[i] = oracle_narrow16(&ORACLE_BF16, x);
        break;
    case MLA_DTYPE_F16:
        ((uint16_t *)array)[i] = oracle_narrow16(&ORACLE_F16, x);
        break;
    case MLA_DTYPE_FP8_E4M3:
        ((uint8_t *)array)[i] = oracle_fp8_narrow(&ORACLE_E4M3, x, scale);
        break;
    default:
        ((uint8_t *)array)[i] = oracle_fp8_narrow(&ORACLE_E5M2, x, scale);
        break;
    }
}

uint64_t oracle_checksum(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* ---- attention oracles ------------------------------------------------------- */

float oracle_load_table(mla_dtype dtype, const void *array, int64_t i, float scale)
{
    static float table[65536];
    static mla_dtype table_dtype = MLA_DTYPE_COUNT;
    static float table_scale;
    if (dtype == MLA_DTYPE_F32)
        return ((const float *)array)[i];
    const bool wide = mla_dtype_size(dtype) == 2;
    if (dtype != table_dtype || oracle_f32_bits(scale) != oracle_f32_bits(table_scale)) {
        for (uint32_t code = 0; code < (wide ? 65536u : 256u); code++) {
            union { uint16_t c16; uint8_t c8; float f; } holder = {.f = 0.0f};
            if (wide)
                holder.c16 = (uint16_t)code;
            else
                holder.c8 = (uint8_t)code;
            table[code] = oracle_load(dtype, &holder, 0, scale);
        }
        table_dtype = dtype;
        table_scale = scale;
    }
    return table[wide ? ((const uint16_t *)array)[i] : ((const uint8_t *)array)[i]];
}

int64_t oracle_cache_row(const mla_kv_cache *cache, int64_t blk, int64_t off)
{
    int64_t entry = cache->entry_stride ? cache->entry_stride : cache->width;
    int64_t block = cache->block_stride ? cache->block_stride : cache->block_size * entry;
    return blk * block + off * entry;
}

/* The first n rows of a request (block table row bt) as stored, dequantized:
 * [n, width] doubles, and transposed ([width, n]) into *cols when cols is
 * not NULL (so dot products with every row run along contiguous memory). */
static double *request_rows(const mla_kv_cache *c, const int32_t *bt, int64_t n, double **cols)
{
    double *rows = malloc(sizeof(double) * (size_t)(n > 0 ? n * c->width : 1));
    for (int64_t j = 0; j < n; j++) {
        int64_t at = oracle_cache_row(c, bt[j / c->block_size], j % c->block_size);
        for (int64_t d = 0; d < c->width; d++)
            rows[j * c->width + d] = oracle_load_table(c->dtype, c->data, at + d, c->scale);
    }
    if (cols) {
        *cols = malloc(sizeof(double) * (size_t)(n > 0 ? n * c->width : 1));
        for (int64_t j = 0; j < n; j++)
            for (int64_t d = 0; d < c->width; d++)
                (*cols)[d * n + j] = rows[j * c->width + d];
    }
    return rows;
}

/* Keys query i of a request of length len with s_q queries sees (§5.2). */
static int64_t visible_keys(int64_t len, int64_t s_q, int64_t i)
{
    int64_t n = len - s_q + i + 1;
    return n < 0 ? 0 : n > len ? len : n;
}

/* Logits x[0..n) -> softmax weights in place; returns the log-sum-exp.
 * -inf for an empty row: n == 0, or every logit -inf (then the caller
 * leaves the output 0 and reads no value row). NaN and +inf logits go
 * through the plain arithmetic: the row comes out NaN. */
static double softmax(double *x, int64_t n)
{
    double m = -INFINITY, sum = 0.0;
    bool empty = true;
    for (int64_t j = 0; j < n; j++) {
        m = x[j] > m ? x[j] : m;
        empty = empty && x[j] == -INFINITY;
    }
    if (empty)
        return -INFINITY;
    for (int64_t j = 0; j < n; j++) {
        x[j] = exp(x[j] - m);
        sum += x[j];
    }
    for (int64_t j = 0; j < n; j++)
        x[j] /= sum;
    return m + log(sum);
}

void oracle_decode_latent(const mla_decode_args *a, double *out, double *lse)
{
    const int64_t H = a->num_heads, L = a->kv_lora_rank, R = a->rope_dim, D = L + R;
    const int64_t JB = 32; /* rows per block: every head's use of a block while it is in cache */
    const mla_kv_cache *c = a->cache;
    double *q = malloc(sizeof(double) * (size_t)(H * D));
    for (int64_t b = 0; b < a->num_reqs; b++) {
        const int64_t len = a->seq_lens[b];
        double *cols, *rows = request_rows(c, a->block_table + b * a->block_table_cols, len, &cols);
        double *p = malloc(sizeof(double) * (size_t)(H * (len > 0 ? len : 1))); /* [H, len] */
        for (int64_t i = 0; i < a->s_q; i++) {
            const int64_t t = b * a->s_q + i, n = visible_keys(len, a->s_q, i);
            for (int64_t h = 0; h < H; h++) {
                for (int64_t d = 0; d < L; d++)
                    q[h * D + d] = oracle_load(a->q_dtype, a->q_nope,
                                               t * a->q_nope_token_stride + h * a->q_nope_head_stride + d, 1.0f);
                for (int64_t d = 0; d < R; d++)
                    q[h * D + L + d] = oracle_load(a->q_dtype, a->q_pe,
                                                   t * a->q_pe_token_stride + h * a->q_pe_head_stride + d, 1.0f);
                for (int64_t j = 0; j < n; j++)
                    p[h * len + j] = 0.0;
            }
            /* p[h][j] = sum_d q[h][d] row_j[d], summed over d in order */
            for (int64_t j0 = 0; j0 < n; j0 += JB) {
                const int64_t j1 = j0 + JB < n ? j0 + JB : n;
                for (int64_t h = 0; h < H; h++)
                    for (int64_t d = 0; d < D; d++)
                        for (int64_t j = j0; j < j1; j++)
                            p[h * len + j] += q[h * D + d] * cols[d * len + j];
            }
            for (int64_t h = 0; h < H; h++) {
                for (int64_t j = 0; j < n; j++)
                    p[h * len + j] *= (double)a->scale;
                lse[(b * H + h) * a->s_q + i] = softmax(p + h * len, n);
                for (int64_t l = 0; l < L; l++)
                    out[(t * H + h) * L + l] = 0.0;
            }
            /* o[h] = sum_j p[h][j] row_j[0:L], summed over j in order */
            for (int64_t j0 = 0; j0 < n; j0 += JB) {
                const int64_t j1 = j0 + JB < n ? j0 + JB : n;
                for (int64_t h = 0; h < H; h++) {
                    double *o = out + (t * H + h) * L;
                    if (lse[(b * H + h) * a->s_q + i] == -INFINITY)
                        continue; /* empty */
                    for (int64_t j = j0; j < j1; j++)
                        for (int64_t l = 0; l < L; l++)
                            o[l] += p[h * len + j] * rows[j * D + l];
                }
            }
        }
        free(p);
        free(cols);
        free(rows);
    }
    free(q);
}

void oracle_decode_mha(const mla_decode_forward_args *f, const float *kv_b_proj, double *out,
                       double *lse, double *o_lat)
{
    const mla_decode_forward_args *a = f;
    const int64_t H = a->num_heads, L = a->kv_lora_rank, R = a->rope_dim, D = L + R;
    const int64_t P = f->qk_nope_dim, V = f->v_head_dim;
    const mla_kv_cache *c = a->cache;
    double *q = malloc(sizeof(double) * (size_t)(P + R));
    for (int64_t b = 0; b < a->num_reqs; b++) {
        const int64_t len = a->seq_lens[b];
        double *cols, *rows = request_rows(c, a->block_table + b * a->block_table_cols, len, &cols);
        /* up-projection of every latent: k_nope [len, H, P], v [len, H, V];
         * each sum over l in order, for all rows at once */
        double *k_nope = malloc(sizeof(double) * (size_t)(len > 0 ? len * H * P : 1));
        double *v = malloc(sizeof(double) * (size_t)(len > 0 ? len * H * V : 1));
        double *acc = malloc(sizeof(double) * (size_t)(len > 0 ? len : 1));
        for (int64_t h = 0; h < H; h++) {
            for (int64_t e = 0; e < P + V; e++) {
                const float *w = kv_b_proj + (h * (P + V) + e) * L;
                for (int64_t j = 0; j < len; j++)
                    acc[j] = 0.0;
                for (int64_t l = 0; l < L; l++)
                    for (int64_t j = 0; j < len; j++)
                        acc[j] += (double)w[l] * cols[l * len + j];
                for (int64_t j = 0; j < len; j++) {
                    if (e < P)
                        k_nope[(j * H + h) * P + e] = acc[j];
                    else
                        v[(j * H + h) * V + e - P] = acc[j];
                }
            }
        }
        free(acc);
        double *p = malloc(sizeof(double) * (size_t)(len > 0 ? len : 1));
        for (int64_t i = 0; i < a->s_q; i++) {
            const int64_t t = b * a->s_q + i, n = visible_keys(len, a->s_q, i);
            for (int64_t h = 0; h < H; h++) {
                for (int64_t d = 0; d < P + R; d++)
                    q[d] = oracle_load(a->dtype, f->q, t * f->q_token_stride + h * f->q_head_stride + d,
                                       1.0f);
                for (int64_t j = 0; j < n; j++) {
                    double dot = 0.0;
                    for (int64_t d = 0; d < P; d++)
                        dot += q[d] * k_nope[(j * H + h) * P + d];
                    for (int64_t d = 0; d < R; d++)
                        dot += q[P + d] * rows[j * D + L + d];
                    p[j] = (double)a->scale * dot;
                }
                lse[(b * H + h) * a->s_q + i] = softmax(p, n);
                const int64_t seen = lse[(b * H + h) * a->s_q + i] == -INFINITY ? 0 : n;
                double *o = out + t * H * V + h * V;
                for (int64_t e = 0; e < V; e++)
                    o[e] = 0.0;
                for (int64_t j = 0; j < seen; j++)
                    for (int64_t e = 0; e < V; e++)
                        o[e] += p[j] * v[(j * H + h) * V + e];
                if (o_lat) {
                    double *ol = o_lat + (t * H + h) * L;
                    for (int64_t l = 0; l < L; l++)
                        ol[l] = 0.0;
                    for (int64_t j = 0; j < seen; j++)
                        for (int64_t l = 0; l < L; l++)
                            ol[l] += p[j] * rows[j * D + l];
                }
            }
        }
        free(p);
        free(v);
        free(k_nope);
        free(cols);
        free(rows);
    }
    free(q);
}

double oracle_exp_ulp_error(float x, float got)
{
    double exact = exp((double)x);
    if (isinf(got))
        return exact > FLT_MAX ? 0.0 : INFINITY;
    float near = (float)exact;
    double ulp = near < FLT_MIN ? 0x1p-149 : (double)nextafterf(near, INFINITY) - near;
    return fabs((double)got - exact) / ulp;
}
