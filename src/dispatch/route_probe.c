/* Whether a backend's bf16 dot GEMM pays on this CPU: vdpbf16ps runs at
 * twice the f32 FMA's FLOP rate on Zen 4 but at about half of it on Sapphire
 * Rapids (and BFDOT's rate against FMLA varies among Arm cores too), so
 * which decode route is faster is a property of the CPU. Timed
 * once per backend at init, on the decode scores shape. */
#include "dispatch.h"

#include <stdlib.h>
#include <time.h>

enum { M = 64, N = 128, K = 576, REPS = 5 };

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

double mla_bf16dot_speedup(const mla_kernels *k)
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
    for (int i = 0; i < M * K + N * K; i++) {
        a16[i] = (uint16_t)(0x3f80u + (unsigned)(i % 97)); /* 1 .. 1.76: no denormal slow paths */
        a[i] = 1.0f + (float)(i % 97) / 128.0f;
    }
    /* alternate the two so both see the same clock and neighbours; min of each */
    double best_f32 = 1e30, best_dot = 1e30;
    for (int r = 0; r < REPS; r++) {
        double t0 = now();
        k->gemm_f32(M, N, K, a, K, 1, b, N, c, N, NULL);
        double t1 = now();
        k->gemm_bf16dot(M, N, K, a16, K / 2, 1, b16, 2 * N, c, N, NULL);
        double t2 = now();
        best_f32 = t1 - t0 < best_f32 ? t1 - t0 : best_f32;
        best_dot = t2 - t1 < best_dot ? t2 - t1 : best_dot;
    }
    free(a);
    free(a16);
    return best_f32 / best_dot;
}
