/* Public element-wise ops: check arguments -> pick backend -> run driver. */
#include "checks.h"
#include "dispatch.h"
#include "trace.h"
#include "core/dtype.h"
#include "core/error.h"
#include "core/size.h"
#include "kernels/common/elementwise.h"

#include <stdint.h>

/* True if [a, a+an) and [b, b+bn) share a byte. */
static bool overlaps(const void *a, int64_t an, const void *b, int64_t bn)
{
    uintptr_t pa = (uintptr_t)a, pb = (uintptr_t)b;
    return pa < pb + (uintptr_t)bn && pb < pa + (uintptr_t)an;
}

static mla_status run(mla_elementwise_kind kind, void *dst, const void *src, int64_t n, float scale,
                      int threads)
{
    const mla_kernels *k;
    const char *backend;
    mla_status st = mla_dispatch(MLA_OP_CONVERT, NULL, &k, &backend);
    if (st != MLA_OK)
        return st;
    mla_elementwise(k, kind, dst, src, n, scale, mla_resolve_threads(threads));
    mla_note_backend(backend);
    return MLA_OK;
}

/* Both conversions, their messages naming the entry point called. */
static mla_status convert(const char *fn, mla_dtype dst_dtype, void *dst, mla_dtype src_dtype,
                          const void *src, int64_t n, float scale, int threads)
{
    if (n < 0)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: n = %lld < 0", fn, (long long)n);
    if (n > 0 && (!dst || !src))
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: NULL %s", fn, dst ? "src" : "dst");
    mla_elementwise_kind kind;
    if (!mla_conversion_kind(dst_dtype, src_dtype, &kind))
        return mla_fail(MLA_ERR_UNSUPPORTED, "%s: %s -> %s not supported (supported: "
                        "f32 <-> bf16, f16, fp8_e4m3, fp8_e5m2; fp8_e4m3, fp8_e5m2 -> bf16)", fn,
                        mla_dtype_name(src_dtype), mla_dtype_name(dst_dtype));
    if (!mla_fp8_scale_ok(scale))
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: scale %g is not finite and > 0", fn,
                        (double)scale);
    if (scale != 1.0f && !mla_dtype_is_fp8(src_dtype) && !mla_dtype_is_fp8(dst_dtype))
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: scale %g given for %s -> %s "
                        "(only fp8 conversions are scaled)", fn, (double)scale,
                        mla_dtype_name(src_dtype), mla_dtype_name(dst_dtype));
    int64_t src_bytes, dst_bytes;
    if (!mla_mul_size(n, mla_dtype_size(src_dtype), &src_bytes) ||
        !mla_mul_size(n, mla_dtype_size(dst_dtype), &dst_bytes))
        return mla_fail(MLA_ERR_OVERFLOW, "%s: n = %lld elements overflows", fn, (long long)n);
    if (n > 0 && overlaps(dst, dst_bytes, src, src_bytes))
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: src and dst overlap", fn);
    return run(kind, dst, src, n, scale, threads);
}

mla_status mla_convert_scaled(mla_dtype dst_dtype, void *dst, mla_dtype src_dtype, const void *src,
                              int64_t n, float scale, int threads)
{
    static const char fn[] = "mla_convert_scaled";
    if (!mla_tracing())
        return convert(fn, dst_dtype, dst, src_dtype, src, n, scale, threads);
    double start = mla_trace_begin();
    mla_status st = convert(fn, dst_dtype, dst, src_dtype, src, n, scale, threads);
    mla_trace_convert_scaled(start, st, dst_dtype, src_dtype, n, scale, threads);
    return st;
}

mla_status mla_convert(mla_dtype dst_dtype, void *dst, mla_dtype src_dtype, const void *src,
                       int64_t n, int threads)
{
    static const char fn[] = "mla_convert";
    if (!mla_tracing())
        return convert(fn, dst_dtype, dst, src_dtype, src, n, 1.0f, threads);
    double start = mla_trace_begin();
    mla_status st = convert(fn, dst_dtype, dst, src_dtype, src, n, 1.0f, threads);
    mla_trace_convert(start, st, dst_dtype, src_dtype, n, threads);
    return st;
}

static mla_status exp_f32(float *dst, const float *src, int64_t n, int threads)
{
    if (n < 0)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "mla_exp_f32: n = %lld < 0", (long long)n);
    if (n > 0 && (!dst || !src))
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "mla_exp_f32: NULL %s", dst ? "src" : "dst");
    int64_t bytes;
    if (!mla_mul_size(n, (int64_t)sizeof(float), &bytes))
        return mla_fail(MLA_ERR_OVERFLOW, "mla_exp_f32: n = %lld elements overflows", (long long)n);
    /* in place is fine (each lane reads before it writes); partial overlap is not */
    if (n > 0 && dst != src && overlaps(dst, bytes, src, bytes))
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "mla_exp_f32: src and dst partially overlap");
    return run(MLA_EW_EXP_F32, dst, src, n, 1.0f, threads);
}

mla_status mla_exp_f32(float *dst, const float *src, int64_t n, int threads)
{
    if (!mla_tracing())
        return exp_f32(dst, src, n, threads);
    double start = mla_trace_begin();
    mla_status st = exp_f32(dst, src, n, threads);
    mla_trace_exp_f32(start, st, n, threads);
    return st;
}
