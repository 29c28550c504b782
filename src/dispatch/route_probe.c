/* Whether a backend's half-precision GEMM (bf16 dot, or f16 x f16 with f32
 * accumulation) pays on this CPU: vdpbf16ps runs at twice the f32 FMA's
 * FLOP rate on Zen 4 but at about half of it on Sapphire Rapids, and BFDOT
 * and FMLAL against FMLA vary among Arm cores too, so which decode route is
 * faster is a property of the CPU. Timed once per backend at init, on the
 * decode scores shape. */
#include "dispatch.h"

#include <stdbool.h>
#include <stdlib.h>
#include <time.h>

enum { M = 64, N = 128, K = 576, REPS = 5 };

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *mla_half_route_name(const mla_kernels *k)
{
    return k->gemm_bf16dot ? "bf16 dot" : k->gemm_f16f16 ? "f16" : NULL;
}

double mla_half_route_speedup(const mla_kernels *k)
{
    float *a = calloc(M * K + N * K + M * N, sizeof(float));
    uint16_t *a16 = calloc(M * K + N * K, sizeof(uint16_t));
    if (!a || !a16) {
        free(a);
        free(a16);
        return 0.0; /* unknown: keep the f32 route */
    }
    float *b = a + M * K, *c = b + N * K;
    uint16_t *b16 = a16 + M * K;
    const bool bf16 = k->gemm_bf16dot != NULL;
    for (int i = 0; i < M * K + N * K; i++) { /* 1 .. 1.76: no denormal slow paths */
        a16[i] = (uint16_t)((bf16 ? 0x3f80u : 0x3c00u) + (unsigned)(i % 97) * (bf16 ? 1u : 8u));
        a[i] = 1.0f + (float)(i % 97) / 128.0f;
    }
    /* alternate the two so both see the same clock and neighbours; min of each */
    double best_f32 = 1e30, best_half = 1e30;
    for (int r = 0; r < REPS; r++) {
        double t0 = now();
        k->gemm_f32(M, N, K, a, K, 1, b, N, c, N, NULL);
        double t1 = now();
        if (bf16) /* B pair-packed */
            k->gemm_bf16dot(M, N, K, a16, K / 2, 1, b16, 2 * N, c, N, NULL);
        else
            k->gemm_f16f16(M, N, K, a16, K, 1, b16, N, c, N, NULL);
        double t2 = now();
        best_f32 = t1 - t0 < best_f32 ? t1 - t0 : best_f32;
        best_half = t2 - t1 < best_half ? t2 - t1 : best_half;
    }
    free(a);
    free(a16);
    return best_f32 / best_half;
}
