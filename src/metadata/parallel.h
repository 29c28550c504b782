/* When a metadata builder spreads a fill over OpenMP threads. */
#ifndef MLA_METADATA_PARALLEL_H
#define MLA_METADATA_PARALLEL_H

/* Output entries (int32) below which a fill stays on the calling thread: a
 * fork/join costs a few microseconds, about what one thread writes in 256K
 * entries' worth of memory bandwidth. */
#define MLA_METADATA_PARALLEL_MIN ((int64_t)1 << 18)

#endif
