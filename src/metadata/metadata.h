/* Internals shared by the metadata builders. */
#ifndef MLA_METADATA_METADATA_H
#define MLA_METADATA_METADATA_H

#include "mla.h"

#include <stdint.h>

/* Output entries (int32) below which a fill stays on the calling thread: a
 * fork/join costs a few microseconds, about what one thread writes in 256K
 * entries' worth of memory bandwidth. */
#define MLA_METADATA_PARALLEL_MIN ((int64_t)1 << 18)

/* a / b rounded up, for a >= 0 and b >= 1, without overflowing a + b. */
static inline int64_t mla_ceil_div(int64_t a, int64_t b)
{
    return a / b + (a % b != 0);
}

/* x rounded up to a multiple of `to` (x >= 0, to >= 1; the caller knows it
 * fits). */
static inline int64_t mla_round_up(int64_t x, int64_t to)
{
    return mla_ceil_div(x, to) * to;
}

/* params with every default filled in, as mla_build_decode_sched reads
 * them (num_parts <= 0: omp_get_max_threads()). */
mla_decode_sched_params mla_decode_sched_resolved(const mla_decode_sched_params *params);

/* Partial-result slots (split_prefix[B]) mla_build_decode_sched will need
 * for these lengths: exact in batch-invariant mode, the B + num_parts - 1
 * bound otherwise. params as mla_build_decode_sched resolves them. */
int64_t mla_decode_sched_slots(const int32_t *seq_lens, int64_t num_reqs,
                               const mla_decode_sched_params *params);

#endif
