/* AVX-512 fp8 conversions with a scale, bit-exact with the ref kernels;
 * avx2/fp8.c explains the method. Masks do the blends and the tails. */
#include "kernels/fp8_format.h"
#include "kernels/kernels.h"

#include "util.h"

/* 16 quotients -> 16 fp8 codes, one per 32-bit lane. */
static inline __m512i round_to_fp8(const mla_fp8_format *c, __m512 q)
{
    const __m512i x = _mm512_castps_si512(q);
    const __m512i abs = _mm512_and_si512(x, _mm512_set1_epi32(0x7fffffff));
    /* saturate first: the largest finite value rounds to its own code */
    const __m512i a = _mm512_min_epu32(abs, _mm512_set1_epi32(c->max_bits));
    const int shift = 23 - c->man_bits;
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(a, shift), _mm512_set1_epi32(1));
    const __m512i biased = _mm512_add_epi32(a, _mm512_set1_epi32((int32_t)mla_fp8_round_bias(c)));
    const __m512i normal = _mm512_srli_epi32(_mm512_add_epi32(biased, lsb), shift);
    const __m512 magic = _mm512_set1_ps(c->denormal_magic);
    const __m512i denormal = _mm512_sub_epi32(
        _mm512_castps_si512(_mm512_add_ps(_mm512_castsi512_ps(a), magic)), _mm512_castps_si512(magic));
    __m512i code = _mm512_mask_blend_epi32(_mm512_cmplt_epi32_mask(a, _mm512_set1_epi32(c->min_normal)),
                                           normal, denormal);
    code = _mm512_mask_mov_epi32(code, _mm512_cmpgt_epi32_mask(abs, _mm512_set1_epi32(0x7f800000)),
                                 _mm512_set1_epi32(c->nan_code));
    /* code | (x >> 24 & 0x80): the sign */
    return _mm512_ternarylogic_epi32(code, _mm512_srli_epi32(x, 24), _mm512_set1_epi32(0x80), 0xf8);
}

static inline void narrow(const mla_fp8_format *c, const float *src, uint8_t *dst, int64_t n, float scale)
{
    float inv;
    const bool multiply = mla_fp8_exact_reciprocal(scale, &inv);
    const __m512 s = _mm512_set1_ps(multiply ? inv : scale);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = mla_tail_mask16(n - i);
        /* masked-off lanes load 1.0f: no division faults or NaN work in them */
        __m512 x = _mm512_mask_loadu_ps(_mm512_set1_ps(1.0f), m, src + i);
        __m512 q = multiply ? _mm512_mul_ps(x, s) : _mm512_div_ps(x, s);
        _mm_mask_storeu_epi8(dst + i, m, _mm512_cvtepi32_epi8(round_to_fp8(c, q)));
    }
}

void mla_cvt_f32_e4m3__avx512(const float *src, uint8_t *dst, int64_t n, float scale)
{
    narrow(&MLA_FP8_E4M3, src, dst, n, scale);
}

void mla_cvt_f32_e5m2__avx512(const float *src, uint8_t *dst, int64_t n, float scale)
{
    narrow(&MLA_FP8_E5M2, src, dst, n, scale);
}

/* 16 fp8 codes -> 16 floats times scale, rounded once. */
typedef __m512 widen_fn(__m128i bytes, __m512 scale);

/* e4m3, as neon/fp8.c: a normal code's magnitude bits moved up 20 with the
 * exponent rebiased by 120 are its f32, a denormal's mantissa times 2^-9 is
 * exact, and multiplying by scale rounds once. Nothing on the way is an f32
 * denormal, which Intel cores take a microcode assist for (fp8 decode ran
 * 2.4x slower with many denormal codes) and which DAZ would read as 0. */
static inline __m512 widen_e4m3(__m128i bytes, __m512 scale)
{
    const __m512i b = _mm512_cvtepu8_epi32(bytes);
    const __m512i mag = _mm512_and_si512(b, _mm512_set1_epi32(0x7f));
    const __m512i normal = _mm512_add_epi32(_mm512_slli_epi32(mag, 20), _mm512_set1_epi32(120 << 23));
    const __m512 denormal = _mm512_mul_ps(_mm512_cvtepi32_ps(mag), _mm512_set1_ps(0x1p-9f));
    __m512 v = _mm512_mask_mov_ps(_mm512_castsi512_ps(normal),
                                  _mm512_cmplt_epi32_mask(mag, _mm512_set1_epi32(8)), denormal);
    v = _mm512_mul_ps(v, scale);
    v = _mm512_mask_mov_ps(v, _mm512_cmpeq_epi32_mask(mag, _mm512_set1_epi32(0x7f)),
                           _mm512_castsi512_ps(_mm512_set1_epi32(0x7ff00000)));
    const __m512i sign = _mm512_slli_epi32(_mm512_and_si512(b, _mm512_set1_epi32(0x80)), 24);
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(v), sign));
}

/* e5m2: each code is the high byte of an f16, widened exactly, then one
 * multiply by scale. */
static inline __m512 widen_e5m2(__m128i bytes, __m512 scale)
{
    return _mm512_mul_ps(_mm512_cvtph_ps(_mm256_slli_epi16(_mm256_cvtepu8_epi16(bytes), 8)), scale);
}

/* fp8 -> f32, 16 codes a step, the tail masked. */
static inline void widen_f32(widen_fn *widen, const uint8_t *src, float *dst, int64_t n,
                             float scale)
{
    const __m512 s = _mm512_set1_ps(scale);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = mla_tail_mask16(n - i);
        _mm512_mask_storeu_ps(dst + i, m, widen(_mm_maskz_loadu_epi8(m, src + i), s));
    }
}

void mla_cvt_e4m3_f32__avx512(const uint8_t *src, float *dst, int64_t n, float scale)
{
    widen_f32(widen_e4m3, src, dst, n, scale);
}

void mla_cvt_e5m2_f32__avx512(const uint8_t *src, float *dst, int64_t n, float scale)
{
    widen_f32(widen_e5m2, src, dst, n, scale);
}

/* Scale 1 (decode's fp8 rows: it folds the scale into the scores and the
 * output): every e4m3 and e5m2 value is a bf16 normal, so the conversion is
 * exact and stays on 16-bit lanes, 32 codes a step. A normal code is its
 * magnitude bits moved up 7 - m with the exponent rebiased by 127 - bias;
 * zero, the denormals (magnitude below 2^m) and inf and NaN (the top
 * magnitudes) come from a table indexed by the magnitude's low five bits,
 * filled by the scaled path at scale 1 from codes 0-15 and 0x70-0x7f, so
 * that both paths give the same bits by construction. About 8 operations
 * per 32 values against 20 per 16 on the f32 path. */
typedef struct bf16_lanes {
    __m512i table, rebias, low, high;
    int shift;
} bf16_lanes;

static bf16_lanes lanes_of(const mla_fp8_format *f, widen_fn *widen)
{
    const __m128i lo = _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512i t0 = mla_round_bf16_epi32(widen(lo, one));
    const __m512i t1 = mla_round_bf16_epi32(widen(_mm_or_si128(lo, _mm_set1_epi8(0x70)), one));
    const int top = f->has_inf ? 0x7f & ~((1 << f->man_bits) - 1) : 0x7f;
    return (bf16_lanes){
        .table = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(t0)),
                                    _mm512_cvtepi32_epi16(t1), 1),
        .rebias = _mm512_set1_epi16((short)((127 - f->bias) << 7)),
        .low = _mm512_set1_epi16((short)(1 << f->man_bits)),
        .high = _mm512_set1_epi16((short)top),
        .shift = 7 - f->man_bits,
    };
}

static inline __m512i bf16_bits(const bf16_lanes *t, __m256i codes)
{
    const __m512i x = _mm512_cvtepu8_epi16(codes);
    const __m512i mag = _mm512_and_si512(x, _mm512_set1_epi16(0x7f));
    const __m512i normal = _mm512_add_epi16(_mm512_slli_epi16(mag, (unsigned)t->shift), t->rebias);
    const __mmask32 special = _mm512_cmplt_epu16_mask(mag, t->low) |
                              _mm512_cmpge_epu16_mask(mag, t->high);
    const __m512i v = _mm512_mask_permutexvar_epi16(normal, special, mag, t->table);
    /* v | (x << 8 & 0x8000): the sign */
    return _mm512_ternarylogic_epi32(v, _mm512_slli_epi16(x, 8), _mm512_set1_epi16((short)0x8000),
                                     0xf8);
}

/* fp8 -> bf16: at scale 1 on 16-bit lanes as above; at other scales
 * widened and rounded to bf16 in registers, with no f32 row between. */
static inline void widen_bf16(const mla_fp8_format *f, widen_fn *widen, const uint8_t *src,
                              uint16_t *dst, int64_t n, float scale)
{
    if (scale == 1.0f) {
        const bf16_lanes t = lanes_of(f, widen);
        for (int64_t i = 0; i < n; i += 32) {
            const __mmask32 m = mla_tail_mask32(n - i);
            const __m512i bits = bf16_bits(&t, _mm256_maskz_loadu_epi8(m, src + i));
            _mm512_mask_storeu_epi16(dst + i, m, bits);
        }
        return;
    }
    const __m512 s = _mm512_set1_ps(scale);
    for (int64_t i = 0; i < n; i += 16) {
        __mmask16 m = mla_tail_mask16(n - i);
        __m512i r = mla_round_bf16_epi32(widen(_mm_maskz_loadu_epi8(m, src + i), s));
        _mm256_mask_storeu_epi16(dst + i, m, _mm512_cvtepi32_epi16(r));
    }
}

void mla_cvt_e4m3_bf16__avx512(const uint8_t *src, uint16_t *dst, int64_t n, float scale)
{
    widen_bf16(&MLA_FP8_E4M3, widen_e4m3, src, dst, n, scale);
}

void mla_cvt_e5m2_bf16__avx512(const uint8_t *src, uint16_t *dst, int64_t n, float scale)
{
    widen_bf16(&MLA_FP8_E5M2, widen_e5m2, src, dst, n, scale);
}
