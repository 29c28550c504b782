#include "parallel.h"

#include <omp.h>

/* The server's pool (mla_set_parallel_for): its callback and context.
 * Atomic so that a call reading them while another thread sets them reads
 * one or the other pointer, never a torn one; mla.h asks for the hook to be
 * set while no call runs, so the pair a call reads belongs together. */
static _Atomic(mla_parallel_for_fn) pool_fn;
static _Atomic(void *) pool_ctx;

void mla_set_parallel_for(mla_parallel_for_fn fn, void *ctx)
{
    atomic_store_explicit(&pool_ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&pool_fn, fn, memory_order_release);
}

static void run_here(const mla_parallel_loop *loop, void *ctx)
{
    for (int64_t i = 0; i < loop->tasks; i++)
        loop->fn(i, ctx);
}

void mla_parallel_run(int threads, const mla_parallel_loop *loops, int count, void *ctx)
{
    int64_t most = 0;
    for (int l = 0; l < count; l++)
        most = loops[l].tasks > most ? loops[l].tasks : most;
    const int team = most < threads ? (int)most : threads;
    if (team <= 1) {
        for (int l = 0; l < count; l++)
            run_here(&loops[l], ctx);
        return;
    }
    const mla_parallel_for_fn pool = atomic_load_explicit(&pool_fn, memory_order_acquire);
    if (pool) {
        void *pool_state = atomic_load_explicit(&pool_ctx, memory_order_relaxed);
        for (int l = 0; l < count; l++) {
            if (loops[l].tasks <= 1)
                run_here(&loops[l], ctx);
            else
                pool(pool_state, loops[l].tasks, loops[l].tasks < team ? (int)loops[l].tasks : team,
                     loops[l].fn, ctx);
        }
        return;
    }
#pragma omp parallel num_threads(team)
    for (int l = 0; l < count; l++) {
#pragma omp for schedule(static)
        for (int64_t i = 0; i < loops[l].tasks; i++)
            loops[l].fn(i, ctx);
    }
}
