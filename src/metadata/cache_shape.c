/*
 * KV-cache shape query (vLLM's get_kv_cache_shape for MLA): the latent cache
 * is [num_blocks, block_size, width] of one dtype, with width = L + R. A
 * server asks for its shape, bytes and alignment before it allocates; the
 * byte count is overflow-checked so a bad configuration fails here rather
 * than in the allocator.
 */
#include "core/error.h"
#include "core/size.h"

mla_status mla_kv_cache_shape(int64_t num_blocks, int64_t block_size, int64_t width,
                              mla_dtype dtype, int64_t shape[3], int64_t *bytes,
                              int64_t *alignment)
{
    static const char fn[] = "mla_kv_cache_shape";
    if (!shape || !bytes || !alignment)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: NULL %s", fn,
                        !shape ? "shape" : !bytes ? "bytes" : "alignment");
    if (num_blocks < 0)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: num_blocks = %lld is negative", fn,
                        (long long)num_blocks);
    if (block_size < 1 || width < 1)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: block_size = %lld and width = %lld must be >= 1",
                        fn, (long long)block_size, (long long)width);
    if (mla_dtype_size(dtype) == 0)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: dtype %d is not a valid mla_dtype", fn,
                        (int)dtype);
    int64_t slots, elems, b;
    if (!mla_mul_size(num_blocks, block_size, &slots) || !mla_mul_size(slots, width, &elems) ||
        !mla_mul_size(elems, mla_dtype_size(dtype), &b))
        return mla_fail(MLA_ERR_OVERFLOW, "%s: [%lld, %lld, %lld] %s overflows int64 bytes", fn,
                        (long long)num_blocks, (long long)block_size, (long long)width,
                        mla_dtype_name(dtype));
    shape[0] = num_blocks;
    shape[1] = block_size;
    shape[2] = width;
    *bytes = b;
    *alignment = MLA_ALIGN;
    return MLA_OK;
}
