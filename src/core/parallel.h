/* The one place libmla's loops go parallel. Every parallel loop of the
 * drivers and builders is a set of tasks run through mla_parallel_run:
 * on an OpenMP team by default, on the server's own pool when it set one
 * (mla_set_parallel_for, mla.h). A task's work depends only on its index
 * and the loop's task count, which the caller derives from `threads`, never
 * on which thread runs it: scratch is indexed by task, so a loop gives the
 * same bits on OpenMP, on a pool, or one task after another on one thread. */
#ifndef MLA_CORE_PARALLEL_H
#define MLA_CORE_PARALLEL_H

#include <mla.h>

#include <stdatomic.h>
#include <stdint.h>

/* One loop of a run: fn(i, ctx) for every i in [0, tasks), independent. */
typedef struct mla_parallel_loop {
    int64_t tasks;
    mla_task_fn fn;
} mla_parallel_loop;

/* Runs the loops in order on up to `threads` threads, each loop once every
 * task of the previous one has returned, and returns when the last loop's
 * have. On OpenMP the loops share one parallel region (a barrier between
 * them, not a second fork); on the server's pool each loop is one call of
 * its parallel_for. A loop of one task, and every loop when the run gets one
 * thread, runs on the calling thread. */
void mla_parallel_run(int threads, const mla_parallel_loop *loops, int count, void *ctx);

/* A run of one loop. */
static inline void mla_parallel_for(int64_t tasks, int threads, mla_task_fn fn, void *ctx)
{
    const mla_parallel_loop loop = {tasks, fn};
    mla_parallel_run(threads, &loop, 1, ctx);
}

/* Rows [*lo, *hi) of `n`, part `part` of `parts` contiguous slices. */
static inline void mla_part_range(int64_t n, int64_t parts, int64_t part, int64_t *lo, int64_t *hi)
{
    *lo = n * part / parts;
    *hi = n * (part + 1) / parts;
}

/* Dynamic scheduling inside tasks: a loop of one task per thread whose
 * tasks take items from a shared counter (the first item is 0) until it
 * passes the item count, as OpenMP's schedule(dynamic, 1) hands them out.
 * Where an item runs does not change its bytes. */
static inline int64_t mla_parallel_claim(atomic_int_least64_t *next)
{
    return atomic_fetch_add_explicit(next, 1, memory_order_relaxed);
}

#endif
