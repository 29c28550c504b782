#include "elementwise.h"

#include "core/parallel.h"
#include "core/policy.h"
#include "core/size.h"

#include <string.h>

bool mla_conversion_kind(mla_dtype dst_dtype, mla_dtype src_dtype, mla_elementwise_kind *kind)
{
    static const struct {
        mla_dtype src, dst;
        mla_elementwise_kind kind;
    } pairs[] = {
        {MLA_DTYPE_BF16, MLA_DTYPE_F32, MLA_EW_CVT_BF16_F32},
        {MLA_DTYPE_F32, MLA_DTYPE_BF16, MLA_EW_CVT_F32_BF16},
        {MLA_DTYPE_F16, MLA_DTYPE_F32, MLA_EW_CVT_F16_F32},
        {MLA_DTYPE_F32, MLA_DTYPE_F16, MLA_EW_CVT_F32_F16},
        {MLA_DTYPE_FP8_E4M3, MLA_DTYPE_F32, MLA_EW_CVT_E4M3_F32},
        {MLA_DTYPE_F32, MLA_DTYPE_FP8_E4M3, MLA_EW_CVT_F32_E4M3},
        {MLA_DTYPE_FP8_E5M2, MLA_DTYPE_F32, MLA_EW_CVT_E5M2_F32},
        {MLA_DTYPE_F32, MLA_DTYPE_FP8_E5M2, MLA_EW_CVT_F32_E5M2},
        {MLA_DTYPE_FP8_E4M3, MLA_DTYPE_BF16, MLA_EW_CVT_E4M3_BF16},
        {MLA_DTYPE_FP8_E5M2, MLA_DTYPE_BF16, MLA_EW_CVT_E5M2_BF16},
    };
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        if (pairs[i].src == src_dtype && pairs[i].dst == dst_dtype) {
            *kind = pairs[i].kind;
            return true;
        }
    }
    return false;
}

void mla_elementwise_run(const mla_kernels *k, mla_elementwise_kind kind, void *dst, const void *src,
                         int64_t n, float scale)
{
    switch (kind) {
    case MLA_EW_CVT_BF16_F32:
        k->cvt_bf16_f32(src, dst, n);
        break;
    case MLA_EW_CVT_F32_BF16:
        k->cvt_f32_bf16(src, dst, n);
        break;
    case MLA_EW_CVT_F16_F32:
        k->cvt_f16_f32(src, dst, n);
        break;
    case MLA_EW_CVT_F32_F16:
        k->cvt_f32_f16(src, dst, n);
        break;
    case MLA_EW_CVT_F32_E4M3:
        k->cvt_f32_e4m3(src, dst, n, scale);
        break;
    case MLA_EW_CVT_E4M3_F32:
        k->cvt_e4m3_f32(src, dst, n, scale);
        break;
    case MLA_EW_CVT_F32_E5M2:
        k->cvt_f32_e5m2(src, dst, n, scale);
        break;
    case MLA_EW_CVT_E5M2_F32:
        k->cvt_e5m2_f32(src, dst, n, scale);
        break;
    case MLA_EW_EXP_F32:
        k->exp_f32(src, dst, n);
        break;
    case MLA_EW_CVT_E4M3_BF16:
        k->cvt_e4m3_bf16(src, dst, n, scale);
        break;
    case MLA_EW_CVT_E5M2_BF16:
        k->cvt_e5m2_bf16(src, dst, n, scale);
        break;
    }
}

/* Bytes per source and per destination element of a kind. */
static void element_sizes(mla_elementwise_kind kind, int64_t *src_size, int64_t *dst_size)
{
    static const int8_t sizes[][2] = {
        [MLA_EW_CVT_BF16_F32] = {2, 4}, [MLA_EW_CVT_F32_BF16] = {4, 2},
        [MLA_EW_CVT_F16_F32] = {2, 4},  [MLA_EW_CVT_F32_F16] = {4, 2},
        [MLA_EW_CVT_F32_E4M3] = {4, 1}, [MLA_EW_CVT_E4M3_F32] = {1, 4},
        [MLA_EW_CVT_F32_E5M2] = {4, 1}, [MLA_EW_CVT_E5M2_F32] = {1, 4},
        [MLA_EW_EXP_F32] = {4, 4},
        [MLA_EW_CVT_E4M3_BF16] = {1, 2}, [MLA_EW_CVT_E5M2_BF16] = {1, 2},
    };
    *src_size = sizes[kind][0];
    *dst_size = sizes[kind][1];
}

/* A parallel call: task t runs elements [t * per, (t + 1) * per). */
typedef struct ew_call {
    const mla_kernels *k;
    mla_elementwise_kind kind;
    void *dst;
    const void *src;
    int64_t n, per, src_size, dst_size;
    float scale;
} ew_call;

static void run_chunk(int64_t t, void *ctx)
{
    const ew_call *c = ctx;
    int64_t begin = t * c->per;
    int64_t end = begin + c->per < c->n ? begin + c->per : c->n;
    if (begin < end)
        mla_elementwise_run(c->k, c->kind, (char *)c->dst + begin * c->dst_size,
                            (const char *)c->src + begin * c->src_size, end - begin, c->scale);
}

void mla_elementwise(const mla_kernels *k, mla_elementwise_kind kind, void *dst, const void *src,
                     int64_t n, float scale, int threads)
{
    if (n == 0)
        return; /* src and dst may be NULL: not even NULL + 0 is formed */
    int nt = mla_team_size(n, MLA_FORK_MIN_ELEMENTS, threads);
    if (nt == 1) {
        mla_elementwise_run(k, kind, dst, src, n, scale);
        return;
    }
    ew_call c = {.k = k, .kind = kind, .dst = dst, .src = src, .n = n, .scale = scale,
                 /* chunk starts on MLA_ALIGN elements: every task but the last runs
                  * only full vectors, and no two share a cache line of the output */
                 .per = mla_round_up(mla_ceil_div(n, nt), MLA_ALIGN)};
    element_sizes(kind, &c.src_size, &c.dst_size);
    mla_parallel_for(nt, nt, run_chunk, &c);
}

void mla_convert_run(const mla_kernels *k, void *dst, mla_dtype dst_dtype, const void *src,
                     mla_dtype src_dtype, int64_t n, float scale)
{
    mla_elementwise_kind kind;
    if (dst_dtype == src_dtype) {
        memcpy(dst, src, (size_t)(n * mla_dtype_size(src_dtype)));
    } else if (mla_conversion_kind(dst_dtype, src_dtype, &kind)) {
        mla_elementwise_run(k, kind, dst, src, n, scale);
    } else {
        float stage[MLA_CONVERT_STAGE];
        int64_t src_size = mla_dtype_size(src_dtype), dst_size = mla_dtype_size(dst_dtype);
        for (int64_t i = 0; i < n; i += MLA_CONVERT_STAGE) {
            int64_t m = n - i < MLA_CONVERT_STAGE ? n - i : MLA_CONVERT_STAGE;
            mla_convert_run(k, stage, MLA_DTYPE_F32, (const char *)src + i * src_size, src_dtype, m, scale);
            mla_convert_run(k, (char *)dst + i * dst_size, dst_dtype, stage, MLA_DTYPE_F32, m, scale);
        }
    }
}

const float *mla_widen_piece(const mla_kernels *k, const void *row, mla_dtype dtype, int64_t first,
                             int64_t n, float *buf)
{
    const char *src = (const char *)row + first * mla_dtype_size(dtype);
    if (dtype == MLA_DTYPE_F32)
        return (const float *)src;
    mla_convert_run(k, buf, MLA_DTYPE_F32, src, dtype, n, 1.0f);
    return buf;
}
