#include "elementwise.h"

#include <omp.h>

/* Below this many elements per thread, a fork/join costs more than it saves. */
#define MIN_ELEMENTS_PER_THREAD 16384
/* Chunk starts are multiples of this, so every thread but the last runs only
 * full vectors and no two threads share a cache line of the output. */
#define CHUNK_ALIGN 64

static void run_range(const mla_kernels *k, mla_elementwise_kind kind, void *dst, const void *src,
                      int64_t begin, int64_t end, float scale)
{
    int64_t n = end - begin;
    switch (kind) {
    case MLA_EW_CVT_BF16_F32:
        k->cvt_bf16_f32((const uint16_t *)src + begin, (float *)dst + begin, n);
        break;
    case MLA_EW_CVT_F32_BF16:
        k->cvt_f32_bf16((const float *)src + begin, (uint16_t *)dst + begin, n);
        break;
    case MLA_EW_CVT_F16_F32:
        k->cvt_f16_f32((const uint16_t *)src + begin, (float *)dst + begin, n);
        break;
    case MLA_EW_CVT_F32_F16:
        k->cvt_f32_f16((const float *)src + begin, (uint16_t *)dst + begin, n);
        break;
    case MLA_EW_CVT_F32_E4M3:
        k->cvt_f32_e4m3((const float *)src + begin, (uint8_t *)dst + begin, n, scale);
        break;
    case MLA_EW_CVT_E4M3_F32:
        k->cvt_e4m3_f32((const uint8_t *)src + begin, (float *)dst + begin, n, scale);
        break;
    case MLA_EW_CVT_F32_E5M2:
        k->cvt_f32_e5m2((const float *)src + begin, (uint8_t *)dst + begin, n, scale);
        break;
    case MLA_EW_CVT_E5M2_F32:
        k->cvt_e5m2_f32((const uint8_t *)src + begin, (float *)dst + begin, n, scale);
        break;
    case MLA_EW_EXP_F32:
        k->exp_f32((const float *)src + begin, (float *)dst + begin, n);
        break;
    }
}

void mla_elementwise(const mla_kernels *k, mla_elementwise_kind kind, void *dst, const void *src,
                     int64_t n, float scale, int threads)
{
    int64_t useful = n / MIN_ELEMENTS_PER_THREAD;
    int nt = useful < threads ? (int)useful : threads;
    if (nt <= 1) {
        run_range(k, kind, dst, src, 0, n, scale);
        return;
    }
    int64_t per = (n + nt - 1) / nt;
    per = (per + CHUNK_ALIGN - 1) / CHUNK_ALIGN * CHUNK_ALIGN;
#pragma omp parallel for num_threads(nt) schedule(static)
    for (int t = 0; t < nt; t++) {
        int64_t begin = (int64_t)t * per;
        int64_t end = begin + per < n ? begin + per : n;
        if (begin < end)
            run_range(k, kind, dst, src, begin, end, scale);
    }
}
