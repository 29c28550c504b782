/*
 * Conversions and exp on every backend this CPU can run, forced in turn.
 * The expected values come from double-precision oracles written the plain
 * way (nearest representable value by search, ties to the even code), not
 * from the ref kernels, so ref is tested too.
 */
#include "oracle.h"
#include "support.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <xmmintrin.h>
#endif

/* ---- inputs --------------------------------------------------------------- */

/* f32 values on and around every rounding boundary of the format (each
 * representable value, each midpoint and the floats either side of it),
 * both signs, plus specials and random bit patterns. */
static float *boundary_inputs(const format16 *f, int64_t *count)
{
    static const uint32_t specials[] = {
        0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000, 0x7f800001,
        0xff800001, 0x7fbfffff, 0x7fc12345, 0x7fa0e000, 0x00000001, 0x007fffff, 0x80000001,
        0x00800000, 0x7f7fffff, 0xff7fffff, 0x477fe000, 0x477fefff, 0x477ff000, 0x477fffff,
        0x33000000, 0x33000001, 0x32ffffff, 0x337fffff, 0x33800000, 0x7f7f8000, 0x7f7f7fff,
    };
    enum { RANDOM = 1 << 18 };
    int64_t codes = oracle_inf_code16(f), n = 0;
    int64_t cap = codes * 8 + (int64_t)(sizeof specials / sizeof specials[0]) + RANDOM;
    float *x = malloc((size_t)cap * sizeof *x);
    for (int64_t c = 0; c < codes; c++) {
        double v = oracle_value16(f, (uint16_t)c), mid = (v + oracle_value16(f, (uint16_t)(c + 1))) / 2;
        float m = (float)mid; /* exact: f32 has more mantissa bits */
        float xs[4] = {(float)v, m, nextafterf(m, 0.0f), nextafterf(m, INFINITY)};
        for (int k = 0; k < 4; k++) {
            x[n++] = xs[k];
            x[n++] = -xs[k];
        }
    }
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++)
        x[n++] = oracle_f32_from(specials[i]);
    for (int i = 0; i < RANDOM; i++)
        x[n++] = oracle_f32_from((uint32_t)support_random());
    *count = n;
    return x;
}

/* ---- conversions on every backend ----------------------------------------- */

static void check_narrow(const format16 *f, const char *backend)
{
    int64_t n;
    float *x = boundary_inputs(f, &n);
    uint16_t *got = malloc((size_t)n * sizeof *got);
    for (int threads = 1; threads <= 2; threads++) {
        memset(got, 0xab, (size_t)n * sizeof *got);
        assert_int_equal(mla_convert(f->dtype, got, MLA_DTYPE_F32, x, n, threads), MLA_OK);
        assert_string_equal(mla_last_backend(), backend);
        for (int64_t i = 0; i < n; i++) {
            uint16_t want = oracle_narrow16(f, x[i]);
            if (got[i] != want)
                fail_msg("%s: f32 0x%08x -> %s: got 0x%04x, want 0x%04x", backend, oracle_f32_bits(x[i]),
                         f->name, got[i], want);
        }
    }
    free(got);
    free(x);
}

static void check_widen(const format16 *f, const char *backend)
{
    enum { N = 65536 };
    uint16_t *codes = malloc(N * sizeof *codes);
    float *got = malloc(N * sizeof *got);
    for (int i = 0; i < N; i++)
        codes[i] = (uint16_t)i;
    assert_int_equal(mla_convert(MLA_DTYPE_F32, got, f->dtype, codes, N, 1), MLA_OK);
    assert_string_equal(mla_last_backend(), backend);
    for (int i = 0; i < N; i++) {
        uint32_t want = oracle_widen16(f, (uint16_t)i);
        if (oracle_f32_bits(got[i]) != want)
            fail_msg("%s: %s 0x%04x -> f32: got 0x%08x, want 0x%08x", backend, f->name, i,
                     oracle_f32_bits(got[i]), want);
    }
    free(got);
    free(codes);
}

/* Every length 0..67 at two alignments: vector bodies, tails, and guards
 * either side of the output that must stay untouched. */
static void check_tails(const format16 *f, const char *backend)
{
    enum { MAXN = 67, GUARD = 16 };
    float src[MAXN + 1], wide[MAXN + 2 * GUARD];
    uint16_t narrow[MAXN + 2 * GUARD], codes[MAXN + 1];
    for (int i = 0; i <= MAXN; i++) {
        src[i] = (float)(i - 30) * 1.37f;
        codes[i] = oracle_narrow16(f, src[i]);
    }
    for (int off = 0; off < 2; off++) {
        for (int n = 0; n <= MAXN - off; n++) {
            memset(narrow, 0xab, sizeof narrow);
            memset(wide, 0xab, sizeof wide);
            assert_int_equal(mla_convert(f->dtype, narrow + GUARD, MLA_DTYPE_F32, src + off, n, 1), MLA_OK);
            assert_int_equal(mla_convert(MLA_DTYPE_F32, wide + GUARD, f->dtype, codes + off, n, 1), MLA_OK);
            assert_string_equal(mla_last_backend(), backend);
            for (int i = 0; i < MAXN + 2 * GUARD; i++) {
                bool inside = i >= GUARD && i < GUARD + n;
                uint16_t want16 = inside ? codes[off + i - GUARD] : 0xabab;
                uint32_t want32 = inside ? oracle_widen16(f, codes[off + i - GUARD]) : 0xabababab;
                if (narrow[i] != want16 || oracle_f32_bits(wide[i]) != want32)
                    fail_msg("%s %s n=%d off=%d: element %d wrong or guard touched", backend,
                             f->name, n, off, i - GUARD);
            }
        }
    }
}

/* Scales a KV cache might use: 1, powers of two, and inexact ones whose
 * quotients land between the representable boundaries. */
static const float fp8_scales[] = {1.0f, 0.25f, 4.0f, 0.0173f, 3.7f, 1e-3f, 448.0f / 3.0f};
#define FP8_SCALES (int)(sizeof fp8_scales / sizeof fp8_scales[0])

/* x near every rounding boundary of the format after division by scale:
 * each code's value and each midpoint times scale, +-2 floats around it,
 * both signs; then values around saturation, specials and random bits. */
static float *fp8_inputs(const format8 *f, float scale, int64_t *count)
{
    static const uint32_t specials[] = {
        0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0xffc00000, 0x7f800001,
        0xff812345, 0x00000001, 0x807fffff, 0x00800000, 0x7f7fffff, 0xff7fffff,
    };
    enum { RANDOM = 1 << 16, AROUND = 5 };
    int64_t cap = (int64_t)(f->max_code + 2) * 2 * AROUND * 2 + 64 + RANDOM;
    float *x = malloc((size_t)cap * sizeof *x);
    int64_t n = 0;
    double top = oracle_fp8_value(f, f->max_code);
    for (int c = 0; c <= f->max_code + 1; c++) {
        /* past the largest code: the midpoint to where the next one would be */
        double v = c <= f->max_code ? oracle_fp8_value(f, (uint8_t)c) : top * 1.0625;
        double next = c < f->max_code ? oracle_fp8_value(f, (uint8_t)(c + 1)) : top * 1.125;
        double points[2] = {v, (v + next) / 2};
        for (int p = 0; p < 2; p++) {
            float at = (float)(points[p] * (double)scale);
            float lo = nextafterf(nextafterf(at, 0.0f), 0.0f);
            for (int k = 0; k < AROUND; k++, lo = nextafterf(lo, INFINITY)) {
                x[n++] = lo;
                x[n++] = -lo;
            }
        }
    }
    for (size_t i = 0; i < sizeof specials / sizeof specials[0]; i++)
        x[n++] = oracle_f32_from(specials[i]);
    for (int i = 0; i < RANDOM; i++)
        x[n++] = oracle_f32_from((uint32_t)support_random());
    *count = n;
    return x;
}

static void check_fp8(const format8 *f, const char *backend)
{
    uint8_t codes[256];
    float wide[256];
    for (int i = 0; i < 256; i++)
        codes[i] = (uint8_t)i;
    for (int si = 0; si < FP8_SCALES; si++) {
        float scale = fp8_scales[si];
        /* every code widens exactly */
        assert_int_equal(mla_convert_scaled(MLA_DTYPE_F32, wide, f->dtype, codes, 256, scale, 1), MLA_OK);
        assert_string_equal(mla_last_backend(), backend);
        for (int i = 0; i < 256; i++) {
            uint32_t want = oracle_fp8_widen(f, (uint8_t)i, scale);
            if (oracle_f32_bits(wide[i]) != want)
                fail_msg("%s: %s 0x%02x * %g -> f32: got 0x%08x, want 0x%08x", backend, f->name,
                         i, (double)scale, oracle_f32_bits(wide[i]), want);
        }
        /* every boundary narrows to the nearest even code, threads or not */
        int64_t n;
        float *x = fp8_inputs(f, scale, &n);
        uint8_t *got = malloc((size_t)n);
        for (int threads = 1; threads <= 2; threads++) {
            memset(got, 0xab, (size_t)n);
            assert_int_equal(mla_convert_scaled(f->dtype, got, MLA_DTYPE_F32, x, n, scale, threads), MLA_OK);
            for (int64_t i = 0; i < n; i++) {
                uint8_t want = oracle_fp8_narrow(f, x[i], scale);
                if (got[i] != want)
                    fail_msg("%s: f32 0x%08x / %g -> %s: got 0x%02x, want 0x%02x", backend,
                             oracle_f32_bits(x[i]), (double)scale, f->name, got[i], want);
            }
        }
        free(got);
        free(x);
    }
}

/* fp8 -> bf16 of a code: its widened f32 rounded to bf16, as two
 * conversions in turn give it. */
static uint16_t fp8_bf16_want(const format8 *f, uint8_t code, float scale)
{
    return oracle_narrow16(&ORACLE_BF16, oracle_f32_from(oracle_fp8_widen(f, code, scale)));
}

/* Every code at every scale converts straight to bf16 as it would through
 * f32 (the one-pass kernels), on one thread and two, and bodies and tails
 * of lengths 0..67 at two alignments leave the guards untouched. */
static void check_fp8_bf16(const format8 *f, const char *backend)
{
    enum { CODES = 256 * 3 + 5, GUARD = 16 };
    uint8_t codes[CODES];
    uint16_t got[CODES + 2 * GUARD];
    for (int i = 0; i < CODES; i++) /* each code thrice, in bodies and tails */
        codes[i] = (uint8_t)(i * 101 + i / 256);
    for (int si = 0; si < FP8_SCALES; si++) {
        const float scale = fp8_scales[si];
        for (int threads = 1; threads <= 2; threads++) {
            for (int off = 0; off < 2; off++) {
                for (int len = 0; len <= 68; len++) {
                    const int n = len <= 67 ? len : CODES - off;
                    memset(got, 0xab, sizeof got);
                    assert_int_equal(mla_convert_scaled(MLA_DTYPE_BF16, got + GUARD, f->dtype,
                                                        codes + off, n, scale, threads), MLA_OK);
                    assert_string_equal(mla_last_backend(), backend);
                    for (int i = 0; i < CODES + 2 * GUARD; i++) {
                        bool inside = i >= GUARD && i < GUARD + n;
                        uint16_t want = inside ? fp8_bf16_want(f, codes[off + i - GUARD], scale) : 0xabab;
                        if (got[i] != want)
                            fail_msg("%s: %s -> bf16 scale %g n=%d off=%d threads=%d: element %d "
                                     "got 0x%04x, want 0x%04x", backend, f->name, (double)scale, n,
                                     off, threads, i - GUARD, got[i], want);
                    }
                }
            }
        }
    }
}

/* The calling thread's floating-point mode with denormals flushed (x86:
 * DAZ and FTZ in MXCSR; Arm: FPCR.FZ), and back. */
#if defined(__x86_64__) || defined(__i386__)
typedef unsigned fp_mode;
static fp_mode flush_denormals(void)
{
    fp_mode old = _mm_getcsr();
    _mm_setcsr(old | 0x8040u);
    return old;
}
static void restore_fp_mode(fp_mode old)
{
    _mm_setcsr(old);
}
#elif defined(__aarch64__)
typedef uint64_t fp_mode;
static fp_mode flush_denormals(void)
{
    fp_mode old;
    __asm__ volatile("mrs %0, fpcr" : "=r"(old));
    __asm__ volatile("msr fpcr, %0" : : "r"(old | (1u << 24)));
    return old;
}
static void restore_fp_mode(fp_mode old)
{
    __asm__ volatile("msr fpcr, %0" : : "r"(old));
}
#else
typedef int fp_mode;
static fp_mode flush_denormals(void)
{
    return 0; /* no flushing mode known here: the check runs as plain */
}
static void restore_fp_mode(fp_mode old)
{
    (void)old;
}
#endif

/* Every fp8 code (all of whose values times 1 are normal f32) widens to the
 * same bits with denormals flushed: the widening forms no f32 denormal on
 * the way, which Intel cores take a microcode assist for (an fp8 cache of
 * many denormal codes ran decode 2.4x slower) and which DAZ reads as 0. One
 * thread, so the conversion runs where the mode is set. */
static void check_fp8_flushed(const format8 *f, const char *backend)
{
    uint8_t codes[256];
    uint32_t want[256];
    float wide[256];
    uint16_t half[256];
    for (int i = 0; i < 256; i++) {
        codes[i] = (uint8_t)i;
        want[i] = oracle_fp8_widen(f, (uint8_t)i, 1.0f);
    }
    const fp_mode old = flush_denormals();
    mla_status st = mla_convert_scaled(MLA_DTYPE_F32, wide, f->dtype, codes, 256, 1.0f, 1);
    mla_status st16 = mla_convert_scaled(MLA_DTYPE_BF16, half, f->dtype, codes, 256, 1.0f, 1);
    restore_fp_mode(old);
    assert_int_equal(st, MLA_OK);
    assert_int_equal(st16, MLA_OK);
    for (int i = 0; i < 256; i++) {
        if (oracle_f32_bits(wide[i]) != want[i])
            fail_msg("%s: %s 0x%02x -> f32 with denormals flushed: got 0x%08x, want 0x%08x",
                     backend, f->name, i, oracle_f32_bits(wide[i]), want[i]);
        if (half[i] != fp8_bf16_want(f, (uint8_t)i, 1.0f))
            fail_msg("%s: %s 0x%02x -> bf16 with denormals flushed: got 0x%04x, want 0x%04x",
                     backend, f->name, i, half[i], fp8_bf16_want(f, (uint8_t)i, 1.0f));
    }
}

/* fp8 bodies and tails: lengths 0..67 at two alignments, guards untouched. */
static void check_fp8_tails(const format8 *f, const char *backend)
{
    enum { MAXN = 67, GUARD = 16 };
    const float scale = 0.37f;
    float src[MAXN + 1], wide[MAXN + 2 * GUARD];
    uint8_t narrow[MAXN + 2 * GUARD], codes[MAXN + 1];
    for (int i = 0; i <= MAXN; i++) {
        src[i] = (float)(i - 30) * 3.3f;
        codes[i] = (uint8_t)(i * 37 + 11);
    }
    for (int off = 0; off < 2; off++) {
        for (int n = 0; n <= MAXN - off; n++) {
            memset(narrow, 0xab, sizeof narrow);
            memset(wide, 0xab, sizeof wide);
            assert_int_equal(mla_convert_scaled(f->dtype, narrow + GUARD, MLA_DTYPE_F32, src + off,
                                                n, scale, 1), MLA_OK);
            assert_int_equal(mla_convert_scaled(MLA_DTYPE_F32, wide + GUARD, f->dtype, codes + off,
                                                n, scale, 1), MLA_OK);
            assert_string_equal(mla_last_backend(), backend);
            for (int i = 0; i < MAXN + 2 * GUARD; i++) {
                bool inside = i >= GUARD && i < GUARD + n;
                uint8_t want8 = inside ? oracle_fp8_narrow(f, src[off + i - GUARD], scale) : 0xab;
                uint32_t want32 = inside ? oracle_fp8_widen(f, codes[off + i - GUARD], scale) : 0xabababab;
                if (narrow[i] != want8 || oracle_f32_bits(wide[i]) != want32)
                    fail_msg("%s %s n=%d off=%d: element %d wrong or guard touched", backend,
                             f->name, n, off, i - GUARD);
            }
        }
    }
}

enum { SHIFT_N = 67, SHIFT_GUARD = 16 };

/* mla_convert_scaled of n elements `from` -> `to` with src and dst `shift`
 * bytes past an element boundary (src: `src`, SHIFT_N elements, copied
 * there) gives the bytes `want` of the aligned call, and writes nothing
 * outside dst. */
static void check_shifted(const char *backend, mla_dtype to, mla_dtype from, const void *src,
                          const void *want, int n, int shift, float scale)
{
    unsigned char in[SHIFT_N * 4 + 3], out[SHIFT_N * 4 + 2 * SHIFT_GUARD];
    const size_t out_bytes = (size_t)n * (size_t)mla_dtype_size(to);
    memcpy(in + shift, src, (size_t)SHIFT_N * (size_t)mla_dtype_size(from));
    memset(out, 0xab, sizeof out);
    assert_int_equal(mla_convert_scaled(to, out + SHIFT_GUARD + shift, from, in + shift, n, scale, 1),
                     MLA_OK);
    assert_string_equal(mla_last_backend(), backend);
    for (size_t i = 0; i < sizeof out; i++) {
        size_t at = i - SHIFT_GUARD - (size_t)shift;
        bool inside = i >= SHIFT_GUARD + (size_t)shift && at < out_bytes;
        if (out[i] != (inside ? ((const unsigned char *)want)[at] : 0xab))
            fail_msg("%s: %s -> %s, n %d, %d bytes off: byte %zu wrong or guard touched", backend,
                     mla_dtype_name(from), mla_dtype_name(to), n, shift, i);
    }
}

/* Callers' buffers may start at any byte (mla.h): each conversion with src
 * and dst 1 and 3 bytes past an element boundary (vector bodies and tails)
 * gives the bytes of the aligned call and writes nothing else. */
static void check_byte_offsets(const char *backend)
{
    enum { N = SHIFT_N };
    static const mla_dtype narrow[] = {MLA_DTYPE_BF16, MLA_DTYPE_F16, MLA_DTYPE_FP8_E4M3,
                                       MLA_DTYPE_FP8_E5M2};
    float src[N], back[N];
    for (int i = 0; i < N; i++)
        src[i] = (float)(i - 30) * 1.37f;
    for (size_t d = 0; d < sizeof narrow / sizeof narrow[0]; d++) {
        const mla_dtype dtype = narrow[d];
        const bool fp8 = mla_dtype_size(dtype) == 1;
        const float scale = fp8 ? 0.37f : 1.0f;
        unsigned char codes[N * 2];
        uint16_t half[N]; /* fp8 -> bf16 */
        assert_int_equal(mla_convert_scaled(dtype, codes, MLA_DTYPE_F32, src, N, scale, 1), MLA_OK);
        assert_int_equal(mla_convert_scaled(MLA_DTYPE_F32, back, dtype, codes, N, scale, 1), MLA_OK);
        if (fp8)
            assert_int_equal(mla_convert_scaled(MLA_DTYPE_BF16, half, dtype, codes, N, scale, 1), MLA_OK);
        for (int shift = 1; shift <= 3; shift += 2) {
            for (int n = 0; n <= N; n++) {
                check_shifted(backend, dtype, MLA_DTYPE_F32, src, codes, n, shift, scale);
                check_shifted(backend, MLA_DTYPE_F32, dtype, codes, back, n, shift, scale);
                if (fp8)
                    check_shifted(backend, MLA_DTYPE_BF16, dtype, codes, half, n, shift, scale);
            }
        }
    }
}

static void check_exp(const char *backend)
{
    /* the edges, random values, then every STRIDE-th float of [-110, 90]
     * by bit pattern (a prime stride, so every low-bit residue comes up) */
    enum { RANDOM = 1 << 18, STRIDE = 509 };
    static const float edges[] = {0.0f, -0.0f, 1.0f, -1.0f, 88.72283f, 88.7229f, 89.0f, -87.33654f,
                                  -95.0f, -103.27893f, -103.9721f, -104.0f, -110.0f, 1e-30f, -1e-30f};
    const uint32_t top[2] = {0x42b40000u /* 90 */, 0x42dc0000u /* 110 */};
    const int e = sizeof edges / sizeof edges[0];
    const int N = e + RANDOM + (int)(top[0] / STRIDE + top[1] / STRIDE + 2);
    float *x = malloc(N * sizeof *x), *got = malloc(N * sizeof *got), *again = malloc(N * sizeof *again);
    memcpy(x, edges, sizeof edges);
    for (int i = e; i < e + RANDOM; i++)
        x[i] = -104.0f + 193.0f * (float)((uint32_t)support_random() >> 8) * 0x1p-24f;
    int at = e + RANDOM;
    for (int sign = 0; sign < 2; sign++)
        for (uint32_t bits = 0; bits <= top[sign]; bits += STRIDE)
            x[at++] = oracle_f32_from(bits | (sign ? 0x80000000u : 0u));
    assert_int_equal(at, N);
    assert_int_equal(mla_exp_f32(got, x, N, 1), MLA_OK);
    assert_string_equal(mla_last_backend(), backend);
    double worst = 0.0;
    for (int i = 0; i < N; i++) {
        double err = oracle_exp_ulp_error(x[i], got[i]);
        if (err > 1.0)
            fail_msg("%s: exp(%a) = %a, error %.3f ulp > 1", backend, (double)x[i], (double)got[i], err);
        worst = err > worst ? err : worst;
    }
    /* threads split the array but never change a lane's result */
    assert_int_equal(mla_exp_f32(again, x, N, 2), MLA_OK);
    assert_memory_equal(got, again, N * sizeof *got);
    /* in place */
    assert_int_equal(mla_exp_f32(x, x, N, 1), MLA_OK);
    assert_memory_equal(got, x, N * sizeof *got);

    float special[3] = {-INFINITY, INFINITY, NAN}, out[3];
    assert_int_equal(mla_exp_f32(out, special, 3, 1), MLA_OK);
    assert_true(out[0] == 0.0f && !signbit(out[0]));
    assert_true(isinf(out[1]) && out[1] > 0);
    assert_true(isnan(out[2]));
    print_message("           %s: exp worst error %.3f ulp over %d inputs\n", backend, worst, N);
    free(again);
    free(got);
    free(x);
}

static void check_backend(const mla_backend_desc *backend, void *ctx)
{
    (void)ctx;
    const char *name = backend->name;
    check_widen(&ORACLE_BF16, name);
    check_widen(&ORACLE_F16, name);
    check_narrow(&ORACLE_BF16, name);
    check_narrow(&ORACLE_F16, name);
    check_tails(&ORACLE_BF16, name);
    check_tails(&ORACLE_F16, name);
    check_fp8(&ORACLE_E4M3, name);
    check_fp8(&ORACLE_E5M2, name);
    check_fp8_tails(&ORACLE_E4M3, name);
    check_fp8_tails(&ORACLE_E5M2, name);
    check_fp8_flushed(&ORACLE_E4M3, name);
    check_fp8_flushed(&ORACLE_E5M2, name);
    check_fp8_bf16(&ORACLE_E4M3, name);
    check_fp8_bf16(&ORACLE_E5M2, name);
    check_byte_offsets(name);
    check_exp(name);
    print_message("[ BACKEND  ] %s: bf16/f16/fp8 conversions (fp8 -> bf16 too) bit-exact, exp within 1 ulp\n", name);
}

static void test_every_backend(void **state)
{
    (void)state;
    /* ref always runs */
    assert_true(support_each_backend(MLA_OP_CONVERT, NULL, check_backend, NULL) >= 1);
}

/* ---- bad input -------------------------------------------------------------- */

static void test_bad_input(void **state)
{
    (void)state;
    float src[8] = {1, 2, 3, 4, 5, 6, 7, 8}, dst[8];
    uint16_t h[8];
    memset(dst, 0x5a, sizeof dst);
    memset(h, 0x5a, sizeof h);
    const mla_dtype F32 = MLA_DTYPE_F32, BF16 = MLA_DTYPE_BF16, E4M3 = MLA_DTYPE_FP8_E4M3;
    const mla_status INVALID = MLA_ERR_INVALID_ARGUMENT, UNSUPPORTED = MLA_ERR_UNSUPPORTED;
    support_expect_reject("mla_convert", "n -1", mla_convert(BF16, h, F32, src, -1, 1), INVALID,
                          "n = -1 < 0");
    support_expect_reject("mla_convert", "dst NULL", mla_convert(BF16, NULL, F32, src, 8, 1),
                          INVALID, "NULL dst");
    support_expect_reject("mla_convert", "src NULL", mla_convert(BF16, h, F32, NULL, 8, 1), INVALID,
                          "NULL src");
    support_expect_reject("mla_convert", "bf16 to f16 (neither side f32)",
                          mla_convert(MLA_DTYPE_F16, h, BF16, h, 4, 1), UNSUPPORTED,
                          "bf16 -> f16 not supported");
    support_expect_reject("mla_convert", "bf16 to fp8_e4m3 (neither side f32)",
                          mla_convert(E4M3, h, BF16, src, 4, 1), UNSUPPORTED, "not supported");
    static const struct {
        float scale;
        const char *bad_input;
    } bad_scales[] = {
        {0.0f, "fp8 scale 0"},  {-1.0f, "fp8 scale -1"}, {INFINITY, "fp8 scale inf"},
        {NAN, "fp8 scale NaN"}, {-0.0f, "fp8 scale -0"},
    };
    for (size_t i = 0; i < sizeof bad_scales / sizeof bad_scales[0]; i++)
        support_expect_reject("mla_convert_scaled", bad_scales[i].bad_input,
                              mla_convert_scaled(E4M3, h, F32, src, 4, bad_scales[i].scale, 1),
                              INVALID, "is not finite and > 0");
    support_expect_reject("mla_convert_scaled", "scale 2 without an fp8 side",
                          mla_convert_scaled(BF16, h, F32, src, 4, 2.0f, 1), INVALID,
                          "only fp8 conversions are scaled");
    support_expect_reject("mla_convert", "dst overlapping src",
                          mla_convert(BF16, (uint16_t *)src + 2, F32, src, 4, 1), INVALID,
                          "overlap");
    support_expect_reject("mla_convert", "n whose bytes pass int64",
                          mla_convert(BF16, h, F32, src, INT64_MAX / 2, 1), MLA_ERR_OVERFLOW,
                          "overflows");
    support_expect_reject("mla_exp_f32", "n -3", mla_exp_f32(dst, src, -3, 1), INVALID,
                          "n = -3 < 0");
    support_expect_reject("mla_exp_f32", "dst NULL", mla_exp_f32(NULL, src, 3, 1), INVALID,
                          "NULL dst");
    support_expect_reject("mla_exp_f32", "dst overlapping src one element off",
                          mla_exp_f32(src + 1, src, 4, 1), INVALID, "partially overlap");
    support_expect_reject("mla_exp_f32", "n whose bytes pass int64",
                          mla_exp_f32(dst, src, INT64_MAX / 2, 1), MLA_ERR_OVERFLOW, "overflows");
    for (int i = 0; i < 8; i++) { /* nothing was written */
        assert_int_equal(h[i], 0x5a5a);
        assert_int_equal(oracle_f32_bits(dst[i]), 0x5a5a5a5au);
    }
    assert_true(src[0] == 1.0f && src[7] == 8.0f);
    /* n == 0 with NULL pointers is a no-op */
    assert_int_equal(mla_convert(MLA_DTYPE_BF16, NULL, MLA_DTYPE_F32, NULL, 0, 1), MLA_OK);
    assert_int_equal(mla_exp_f32(NULL, NULL, 0, 0), MLA_OK);
}

/* n = 0 is valid with NULL buffers (mla.h) and reaches no kernel, which
 * would offset NULL by 0 (undefined; clang's -fsanitize=undefined sees it). */
static void empty_on(const mla_backend_desc *b, void *ctx)
{
    (void)b;
    (void)ctx;
    static const mla_dtype narrow[] = {MLA_DTYPE_BF16, MLA_DTYPE_F16, MLA_DTYPE_FP8_E4M3,
                                       MLA_DTYPE_FP8_E5M2};
    for (int i = 0; i < 4; i++) {
        assert_int_equal(mla_convert(narrow[i], NULL, MLA_DTYPE_F32, NULL, 0, 1), MLA_OK);
        assert_int_equal(mla_convert(MLA_DTYPE_F32, NULL, narrow[i], NULL, 0, 2), MLA_OK);
        assert_int_equal(mla_convert_scaled(MLA_DTYPE_F32, NULL, narrow[i], NULL, 0,
                                            i >= 2 ? 0.5f : 1.0f, 1),
                         MLA_OK);
    }
    assert_int_equal(mla_exp_f32(NULL, NULL, 0, 1), MLA_OK);
}

static void test_empty_every_backend(void **state)
{
    (void)state;
    assert_true(support_each_backend(MLA_OP_CONVERT, NULL, empty_on, NULL) >= 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_backend),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_empty_every_backend),
    };
    return cmocka_run_group_tests_name("convert", tests, NULL, NULL);
}
