/* Internals shared by the metadata builders. */
#ifndef MLA_METADATA_METADATA_H
#define MLA_METADATA_METADATA_H

#include "mla.h"

#include <stdint.h>

/* params with every default filled in, as mla_build_decode_sched reads
 * them (num_parts <= 0: omp_get_max_threads()). Its overhead is the value
 * used, 0 included: read it, never pass it back as params (where 0 means
 * the default). */
mla_decode_sched_params mla_decode_sched_resolved(const mla_decode_sched_params *params);

/* Checks seq_lens [B] and params (as mla_build_decode_sched resolves them)
 * as that builder does, naming fn in messages, and gives *slots, the
 * partial-result rows (split_prefix[B]) it will hand out: exact in
 * batch-invariant mode, the B + num_parts - 1 bound otherwise, where
 * seq_lens is not read (and may be NULL). With capacity for the resolved
 * num_parts, the builder accepts what this accepts, so a caller can check
 * a schedule before anything is written. */
mla_status mla_decode_sched_check(const char *fn, const int32_t *seq_lens, int64_t num_reqs,
                                  const mla_decode_sched_params *params, int64_t *slots);

/* The most partial-result rows a schedule with params hands out for up to
 * num_reqs requests of up to max_seq_len tokens each: at least what
 * mla_decode_sched_check gives for any such batch. */
mla_status mla_decode_sched_slot_bound(const char *fn, int64_t num_reqs, int64_t max_seq_len,
                                       const mla_decode_sched_params *params, int64_t *slots);

#endif
