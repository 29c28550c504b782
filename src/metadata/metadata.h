/* Internals shared by the metadata builders. */
#ifndef MLA_METADATA_METADATA_H
#define MLA_METADATA_METADATA_H

#include "mla.h"

#include <stdint.h>

/* params with every default filled in, as mla_build_decode_sched reads
 * them (num_parts <= 0: omp_get_max_threads()). */
mla_decode_sched_params mla_decode_sched_resolved(const mla_decode_sched_params *params);

/* Partial-result slots (split_prefix[B]) mla_build_decode_sched will need
 * for these lengths: exact in batch-invariant mode, the B + num_parts - 1
 * bound otherwise. params as mla_build_decode_sched resolves them. */
int64_t mla_decode_sched_slots(const int32_t *seq_lens, int64_t num_reqs,
                               const mla_decode_sched_params *params);

#endif
