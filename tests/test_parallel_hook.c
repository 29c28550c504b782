/*
 * The server's thread pool (mla.h: mla_set_parallel_for; docs/semantics.md
 * §8, a server's own thread pool):
 *
 *   * a small pthread pool (POOL_WORKERS workers taking task indices from an
 *     atomic counter; the calling thread only waits) registered as the hook
 *     runs every op, each at threads 1, 2 and 4: the cache ops
 *     (concat_and_cache, gather, cp_gather), convert and exp, weight
 *     preparation, decode (the default schedule) and decode_forward (a
 *     split schedule, so the combine runs), up_proj, flash attention causal
 *     and not, merge, mla_prefill on both paths, and the metadata builders
 *     (batch metadata, update_block_table, the chunk plan). Every call
 *     writes bit for bit what the same call wrote on OpenMP;
 *   * the hook is called, for every op at threads 2 and 4 (the metadata
 *     builders, which take no thread count, at every count), with n >= 2
 *     tasks and threads <= min(n, the call's threads); at threads 1 it is
 *     not called;
 *   * the work runs on the pool: a backend that wraps some kernels
 *     (softmax_tile, copy_stream, store_fence, the bf16 conversions and
 *     GEMM, exp) notes which thread ran each call: with the hook set, none
 *     ran on another thread than the pool's or the caller's, and the pool
 *     ran some; with the hook cleared (NULL), the ops are back on OpenMP:
 *     the hook is not called and the pool runs nothing;
 *   * a hook that runs every task on the calling thread, last index first,
 *     gives the same bits too (tasks are independent and carry their own
 *     scratch).
 *
 * make test-tsan runs this suite under ThreadSanitizer: a task that shared
 * scratch with another, or read what another writes, races there.
 */
#include "layer_cases.h"

#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- the pool ------------------------------------------------------------------------- */

#define POOL_WORKERS 4

enum { ROLE_OTHER, ROLE_CALLER, ROLE_POOL };
static _Thread_local int role; /* what the thread running a kernel is */

typedef struct pool {
    pthread_t ids[POOL_WORKERS];
    pthread_mutex_t lock, submit;
    pthread_cond_t wake, finished;
    /* the job (under lock); workers take indices from next */
    mla_task_fn task;
    void *task_ctx;
    int64_t n, done;
    int active; /* workers inside the job: the next one waits for them */
    unsigned generation;
    bool stop;
    atomic_int_least64_t next;
    atomic_long calls, tasks; /* what the hook was given */
} pool;

/* Hook calls outside the contract: fewer than 2 tasks, threads below 1 or
 * above the task count or the threads of the call under way (its
 * call_threads; 0 for the metadata builders, which take no count). */
static atomic_long bad_calls;
static atomic_int call_threads;

static void check_hook_call(int64_t n, int threads)
{
    const int most = atomic_load(&call_threads);
    if (n < 2 || threads < 1 || threads > n || (most > 0 && threads > most))
        atomic_fetch_add(&bad_calls, 1);
}

static void *pool_worker(void *arg)
{
    pool *p = arg;
    role = ROLE_POOL;
    unsigned seen = 0;
    pthread_mutex_lock(&p->lock);
    for (;;) {
        while (p->generation == seen && !p->stop)
            pthread_cond_wait(&p->wake, &p->lock);
        if (p->stop)
            break;
        seen = p->generation;
        /* a job whose tasks have all run may be over (the hook returned, its
         * task_ctx gone): only a job still running is joined, and the hook
         * waits for every worker that joined it to leave */
        if (p->done == p->n)
            continue;
        const mla_task_fn task = p->task;
        void *ctx = p->task_ctx;
        const int64_t n = p->n;
        p->active++;
        pthread_mutex_unlock(&p->lock);
        int64_t ran = 0;
        for (int64_t i; (i = atomic_fetch_add(&p->next, 1)) < n; ran++)
            task(i, ctx);
        atomic_fetch_add(&p->tasks, ran);
        pthread_mutex_lock(&p->lock);
        p->done += ran;
        if (--p->active == 0 && p->done == n)
            pthread_cond_signal(&p->finished);
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

/* The hook: the job to the workers, then wait until every task has run and
 * every worker has left the job. */
static void pool_parallel_for(void *pool_ctx, int64_t n, int threads, mla_task_fn task,
                              void *task_ctx)
{
    pool *p = pool_ctx;
    atomic_fetch_add(&p->calls, 1);
    check_hook_call(n, threads);
    pthread_mutex_lock(&p->submit);
    pthread_mutex_lock(&p->lock);
    p->task = task;
    p->task_ctx = task_ctx;
    p->n = n;
    p->done = 0;
    atomic_store(&p->next, 0);
    p->generation++;
    pthread_cond_broadcast(&p->wake);
    while (p->done < n || p->active > 0)
        pthread_cond_wait(&p->finished, &p->lock);
    pthread_mutex_unlock(&p->lock);
    pthread_mutex_unlock(&p->submit);
}

static void pool_start(pool *p)
{
    memset(p, 0, sizeof *p);
    pthread_mutex_init(&p->lock, NULL);
    pthread_mutex_init(&p->submit, NULL);
    pthread_cond_init(&p->wake, NULL);
    pthread_cond_init(&p->finished, NULL);
    for (int i = 0; i < POOL_WORKERS; i++)
        assert_int_equal(pthread_create(&p->ids[i], NULL, pool_worker, p), 0);
}

static void pool_stop(pool *p)
{
    pthread_mutex_lock(&p->lock);
    p->stop = true;
    pthread_cond_broadcast(&p->wake);
    pthread_mutex_unlock(&p->lock);
    for (int i = 0; i < POOL_WORKERS; i++)
        assert_int_equal(pthread_join(p->ids[i], NULL), 0);
    pthread_cond_destroy(&p->wake);
    pthread_cond_destroy(&p->finished);
    pthread_mutex_destroy(&p->lock);
    pthread_mutex_destroy(&p->submit);
}

/* A hook with no threads: every task on the calling thread, the last
 * index first. */
static atomic_long serial_calls;
static void serial_parallel_for(void *pool_ctx, int64_t n, int threads, mla_task_fn task,
                                void *task_ctx)
{
    (void)pool_ctx;
    atomic_fetch_add(&serial_calls, 1);
    check_hook_call(n, threads);
    for (int64_t i = n - 1; i >= 0; i--)
        task(i, task_ctx);
}

/* ---- the observing backend ------------------------------------------------------------ */

static atomic_long kernel_calls[3]; /* by role */
static mla_kernels base_kernels;

static void note(void)
{
    atomic_fetch_add(&kernel_calls[role], 1);
}

static void obs_cvt_bf16_f32(const uint16_t *src, float *dst, int64_t n)
{
    note();
    base_kernels.cvt_bf16_f32(src, dst, n);
}

static void obs_cvt_f32_bf16(const float *src, uint16_t *dst, int64_t n)
{
    note();
    base_kernels.cvt_f32_bf16(src, dst, n);
}

static void obs_exp_f32(const float *src, float *dst, int64_t n)
{
    note();
    base_kernels.exp_f32(src, dst, n);
}

static void obs_copy_stream(void *dst, const void *src, int64_t bytes)
{
    note();
    base_kernels.copy_stream(dst, src, bytes);
}

static void obs_store_fence(void)
{
    note();
    base_kernels.store_fence();
}

static void obs_gemm_bf16(int64_t m, int64_t n, int64_t k, const float *a, int64_t rs_a,
                          int64_t cs_a, const uint16_t *b, int64_t ldb, float *c, int64_t ldc,
                          const float *c_scale)
{
    note();
    base_kernels.gemm_bf16(m, n, k, a, rs_a, cs_a, b, ldb, c, ldc, c_scale);
}

static void obs_softmax_tile(float *s, int64_t n, int64_t ld, int64_t nr, float score_scale,
                             const int64_t *hidden, float *m, float *l, float *alpha)
{
    note();
    base_kernels.softmax_tile(s, n, ld, nr, score_scale, hidden, m, l, alpha);
}

/* ---- the ops ------------------------------------------------------------------------------ */

/* B requests with context and new tokens, large enough that every op
 * splits its work 4 ways at threads 4 (rows, elements and metadata entries
 * past the fork thresholds); bf16 throughout. */
enum { H = 8, L = 64, R = 16, P = 32, V = 32, BS = 16, D = L + R };
enum { CONVERT_N = 1 << 17 };
/* metadata: MD_REQS x MD_COLS = 2^18 block-table entries */
enum { MD_REQS = 64, MD_COLS = 4096 };
/* the chunk plan: two prefills of CHUNK_CTX context tokens in 4 chunks of
 * CHUNK_WS / 2 each; its arrays (starts, lengths, cu_seq_lens, seq_tot,
 * max_seq_lens, token_to_seq) hold 4 x (2 + 2 + 3 + 1 + 1 + CHUNK_WS) int32 */
enum { CHUNK_CTX = 200000, CHUNK_WS = 131072, CHUNKS = 4 };
#define PLAN_COPY_BYTES ((int64_t)sizeof(int32_t) * CHUNKS * (9 + CHUNK_WS))
#define EXTRA_BYTES                                                                        \
    (CONVERT_N * (2 + 4) + 2 * H * P * L * 2 +                                             \
     (int64_t)sizeof(int32_t) * (2 * MD_REQS + 1 + MD_REQS * MD_COLS) +                    \
     (int64_t)sizeof(int64_t) * 2 * MD_REQS + PLAN_COPY_BYTES + 64 * 16)
static const layer_shape shape = {.num_reqs = 4, .H = H, .L = L, .R = R, .P = P, .V = V,
                                  .block_size = BS, .s_q = 2, .chunk_tokens = 256,
                                  .extra_bytes = EXTRA_BYTES, .lens = {380, 214, 520, 130},
                                  .news = {80, 64, 100, 40}};
static const layer_spec spec = {MLA_DTYPE_BF16, MLA_DTYPE_BF16, 4, false}; /* 4: the most */

/* The layer's step (layer_cases.h), then the calls outside it. */
enum {
    CONVERT = CALLS, EXP, PREPARE, METADATA, UPDATE_TABLE, CHUNK_PLAN, ALL_CALLS
};
static const char *const extra_names[ALL_CALLS - CALLS] = {
    "mla_convert", "mla_exp_f32", "mla_prepare_weights", "mla_build_batch_metadata",
    "mla_update_block_table", "mla_chunk_plan_create",
};

static const char *name_of(int k)
{
    return k < CALLS ? call_names[k] : extra_names[k - CALLS];
}

/* The layer, and the inputs of the other calls, whose outputs lie in the
 * layer's arena too. */
typedef struct world {
    layer ly;
    float *convert_src;
    void *convert_dst, *exp_dst, *prep_uk, *prep_uv, *plan_copy;
    mla_request md_reqs[MD_REQS];
    int32_t *md_ids;
    mla_block_layout md_layout;
    mla_batch_metadata md;
    int32_t chunk_ctx[2], chunk_qsl[3];
    unsigned char *want[ALL_CALLS]; /* the arena after each call, on OpenMP */
} world;

static world *world_make(void)
{
    world *w = layer_alloc_or_fail(sizeof *w);
    layer *ly = &w->ly;
    layer_make(ly, &shape, &spec);
    w->convert_src = layer_random_values(MLA_DTYPE_F32, CONVERT_N, 4.0f);
    w->convert_dst = layer_carve(ly, CONVERT_N * 2);
    w->exp_dst = layer_carve(ly, CONVERT_N * (int64_t)sizeof(float));
    w->prep_uk = layer_carve(ly, H * P * L * 2);
    w->prep_uv = layer_carve(ly, H * L * V * 2);
    w->md_ids = layer_alloc_or_fail(sizeof(int32_t) * MD_REQS * MD_COLS);
    for (int64_t i = 0; i < MD_REQS * MD_COLS; i++) /* a permutation: 7919 is prime */
        w->md_ids[i] = (int32_t)((i * 7919) % (MD_REQS * MD_COLS));
    for (int r = 0; r < MD_REQS; r++)
        w->md_reqs[r] = (mla_request){.num_computed_tokens = 1000 + r, .num_scheduled_tokens = 1,
                                      .num_prompt_tokens = 900, .block_ids = w->md_ids + r * MD_COLS,
                                      .num_block_ids = MD_COLS};
    w->md_layout = (mla_block_layout){.manager_block_size = BS, .kernel_block_size = BS,
                                      .max_blocks_per_req = MD_COLS, .cp_world_size = 1,
                                      .cp_interleave = 1};
    w->md = (mla_batch_metadata){
        .query_start_loc = layer_carve(ly, sizeof(int32_t) * (MD_REQS + 1)),
        .seq_lens = layer_carve(ly, sizeof(int32_t) * MD_REQS),
        .positions = layer_carve(ly, sizeof(int64_t) * MD_REQS),
        .slot_mapping = layer_carve(ly, sizeof(int64_t) * MD_REQS), .slot_mapping_len = MD_REQS,
        .block_table = layer_carve(ly, sizeof(int32_t) * MD_REQS * MD_COLS)};
    w->chunk_ctx[0] = w->chunk_ctx[1] = CHUNK_CTX;
    w->chunk_qsl[1] = 1;
    w->chunk_qsl[2] = 2;
    w->plan_copy = layer_carve(ly, PLAN_COPY_BYTES);
    memcpy(ly->initial, ly->arena, ly->arena_bytes);
    return w;
}

static void world_free(world *w)
{
    free(w->convert_src);
    free(w->md_ids);
    for (int k = 0; k < ALL_CALLS; k++)
        free(w->want[k]);
    layer_free(&w->ly);
    free(w);
}

/* The chunk plan, its arrays copied into the arena. */
static mla_status chunk_plan(world *w)
{
    mla_chunk_plan *plan = NULL;
    mla_status st = mla_chunk_plan_create(w->chunk_ctx, w->chunk_qsl, 2, CHUNK_WS, BS, 0,
                                          MLA_DTYPE_BF16, &plan);
    if (st != MLA_OK)
        return st;
    mla_chunk_plan_info info;
    mla_chunk_plan_info_get(plan, &info);
    assert_int_equal(info.num_chunks, CHUNKS);
    const int64_t n = info.num_chunks;
    const struct { const int32_t *p; int64_t count; } parts[] = {
        {info.starts, 2 * n}, {info.chunk_seq_lens, 2 * n}, {info.cu_seq_lens, 3 * n},
        {info.seq_tot, n}, {info.max_seq_lens, n}, {info.token_to_seq, n * info.token_to_seq_stride}};
    int32_t *dst = w->plan_copy;
    for (int i = 0; i < COUNT(parts); i++) {
        memcpy(dst, parts[i].p, sizeof(int32_t) * (size_t)parts[i].count);
        dst += parts[i].count;
    }
    assert_true((char *)dst <= (char *)w->plan_copy + PLAN_COPY_BYTES);
    mla_chunk_plan_destroy(plan);
    return MLA_OK;
}

static mla_status world_call(world *w, int k, int threads)
{
    if (k < CALLS)
        return layer_call(&w->ly, k, threads);
    switch (k) {
    case CONVERT:
        return mla_convert(MLA_DTYPE_BF16, w->convert_dst, MLA_DTYPE_F32, w->convert_src, CONVERT_N,
                           threads);
    case EXP:
        return mla_exp_f32(w->exp_dst, w->convert_src, CONVERT_N, threads);
    case PREPARE:
        return mla_prepare_weights(w->ly.kvb, MLA_DTYPE_BF16, H, L, P, V, w->prep_uk, w->prep_uv,
                                   MLA_DTYPE_BF16, threads);
    case METADATA:
        return mla_build_batch_metadata(w->md_reqs, MD_REQS, &w->md_layout, &w->md);
    case UPDATE_TABLE:
        return mla_update_block_table(w->md_reqs, MD_REQS, &w->md_layout, &w->md);
    case CHUNK_PLAN:
        return chunk_plan(w);
    }
    return MLA_ERR_INVALID_ARGUMENT;
}

/* The metadata builders take no thread count: they split on OpenMP's
 * default count (set to 4 by main) whatever runs the loops. */
static bool takes_threads(int k)
{
    return k < METADATA;
}

/* ---- rounds ------------------------------------------------------------------------------------ */

/* Every call in order on OpenMP (no hook) at `threads`; the arena after
 * each is its want. */
static void run_on_openmp(world *w, int threads)
{
    memcpy(w->ly.arena, w->ly.initial, w->ly.arena_bytes);
    for (int k = 0; k < ALL_CALLS; k++) {
        const mla_status st = world_call(w, k, threads);
        if (st != MLA_OK)
            fail_msg("%s, %d threads, OpenMP: %s: %s", name_of(k), threads,
                     mla_status_str(st), mla_last_error());
        if (!w->want[k])
            w->want[k] = layer_alloc_or_fail(w->ly.arena_bytes);
        memcpy(w->want[k], w->ly.arena, w->ly.arena_bytes);
    }
}

/* Every call in order with `hook` set: the bits of OpenMP's, and hook
 * calls (counted in *calls) exactly where the loops have 2 or more tasks:
 * every call at threads >= 2, the metadata builders always. Kernels run
 * on the caller or the pool, never on another thread. */
static void run_on_hook(world *w, int threads, const char *hook, atomic_long *calls)
{
    memcpy(w->ly.arena, w->ly.initial, w->ly.arena_bytes);
    for (int k = 0; k < ALL_CALLS; k++) {
        const long before = atomic_load(calls), others = atomic_load(&kernel_calls[ROLE_OTHER]);
        atomic_store(&call_threads, takes_threads(k) ? threads : 0);
        const mla_status st = world_call(w, k, threads);
        if (st != MLA_OK)
            fail_msg("%s, %d threads, %s: %s: %s", name_of(k), threads, hook,
                     mla_status_str(st), mla_last_error());
        if (memcmp(w->ly.arena, w->want[k], w->ly.arena_bytes) != 0)
            fail_msg("%s, %d threads, %s: other bits than on OpenMP", name_of(k), threads, hook);
        const bool forks = threads >= 2 || !takes_threads(k);
        const long made = atomic_load(calls) - before;
        if (forks ? made == 0 : made != 0)
            fail_msg("%s, %d threads, %s: %ld calls of the hook, want %s", name_of(k), threads,
                     hook, made, forks ? "some" : "none");
        if (atomic_load(&kernel_calls[ROLE_OTHER]) != others)
            fail_msg("%s, %d threads, %s: kernels ran on a thread neither the caller's nor the pool's",
                     name_of(k), threads, hook);
    }
}

static void register_observer(void)
{
    if (mla_backend_find("observed"))
        return;
    const mla_config cfg = {.q_dtype = MLA_DTYPE_BF16, .cache_dtype = MLA_DTYPE_BF16,
                            .kv_lora_rank = L, .rope_dim = R, .num_heads = H, .block_size = BS};
    const mla_backend_desc *base;
    assert_int_equal(mla_select_backend(MLA_OP_DECODE, &cfg, &base), MLA_OK);
    mla_backend_desc d = *base;
    base_kernels = base->kernels;
    d.name = "observed";
    d.priority = base->priority + 1000; /* chosen wherever its base would be */
    d.kernels.cvt_bf16_f32 = obs_cvt_bf16_f32;
    d.kernels.cvt_f32_bf16 = obs_cvt_f32_bf16;
    d.kernels.exp_f32 = obs_exp_f32;
    d.kernels.copy_stream = obs_copy_stream;
    d.kernels.store_fence = obs_store_fence;
    d.kernels.gemm_bf16 = obs_gemm_bf16;
    d.kernels.softmax_tile = obs_softmax_tile;
    assert_int_equal(mla_register_backend(&d, false), MLA_OK);
}

static void reset_kernel_calls(void)
{
    for (int r = 0; r < 3; r++)
        atomic_store(&kernel_calls[r], 0);
}

/* OpenMP, the pool, OpenMP again (hook cleared), the serial hook: at 1, 2
 * and 4 threads, every call the same bits on each. */
static void test_pool_runs_every_op(void **state)
{
    (void)state;
    role = ROLE_CALLER;
    register_observer();
    world *w = world_make();
    pool *p = layer_alloc_or_fail(sizeof *p);
    pool_start(p);
    static const int counts[] = {1, 2, 4};
    for (int c = 0; c < COUNT(counts); c++) {
        const int t = counts[c];
        run_on_openmp(w, t);

        mla_set_parallel_for(pool_parallel_for, p);
        reset_kernel_calls();
        const long tasks = atomic_load(&p->tasks);
        run_on_hook(w, t, "pool", &p->calls);
        if (atomic_load(&p->tasks) == tasks)
            fail_msg("%d threads: the pool ran no task", t);
        /* at 1 thread only the metadata builders (no kernels) fork */
        if (t >= 2 && atomic_load(&kernel_calls[ROLE_POOL]) == 0)
            fail_msg("%d threads: no kernel ran on the pool", t);
        if (t == 1 && atomic_load(&kernel_calls[ROLE_CALLER]) == 0)
            fail_msg("1 thread: no kernel ran on the calling thread");

        /* NULL: OpenMP again, the pool idle */
        mla_set_parallel_for(NULL, NULL);
        const long calls = atomic_load(&p->calls);
        reset_kernel_calls();
        memcpy(w->ly.arena, w->ly.initial, w->ly.arena_bytes);
        for (int k = 0; k < ALL_CALLS; k++) {
            assert_int_equal(world_call(w, k, t), MLA_OK);
            if (memcmp(w->ly.arena, w->want[k], w->ly.arena_bytes) != 0)
                fail_msg("%s, %d threads, OpenMP after the pool: other bits", name_of(k), t);
        }
        assert_int_equal(atomic_load(&p->calls), calls);
        assert_int_equal(atomic_load(&kernel_calls[ROLE_POOL]), 0);
        if (t >= 2 && atomic_load(&kernel_calls[ROLE_OTHER]) == 0)
            fail_msg("%d threads, OpenMP after the pool: no kernel ran on an OpenMP thread", t);

        mla_set_parallel_for(serial_parallel_for, NULL);
        run_on_hook(w, t, "serial hook, last task first", &serial_calls);
        mla_set_parallel_for(NULL, NULL);
    }
    assert_int_equal(atomic_load(&bad_calls), 0);
    print_message("[ POOL     ] %ld hook calls, %ld tasks on %d workers\n",
                  atomic_load(&p->calls), atomic_load(&p->tasks), POOL_WORKERS);
    pool_stop(p);
    free(p);
    world_free(w);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        CASE_TEST(test_pool_runs_every_op),
    };
    omp_set_num_threads(4); /* the metadata builders' count, on any machine */
    case_apply_filter();
    return cmocka_run_group_tests_name("parallel_hook", tests, NULL, NULL);
}
