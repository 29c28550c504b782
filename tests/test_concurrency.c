/*
 * Threads (mla.h: threads; docs/semantics.md §8, threads):
 *
 *   * server threads, one per layer (each its own cache, outputs and
 *     workspaces, on 1 or 2 OpenMP threads of its own), run a step's ops
 *     at once: the cache ops (concat_and_cache, gather, cp_gather), decode
 *     and decode_forward, the prefill kernels (up_proj, flash attention
 *     causal and not, merge_attn_states) and mla_prefill on both paths.
 *     Every call gives the bits the same call gave run alone, checked
 *     after each call; one round with automatic selection, then one with
 *     every op forced onto each backend this CPU runs (forcing is
 *     process-wide, so between rounds), where each layer runs what the
 *     backend accepts;
 *   * decode called from inside the caller's own OpenMP parallel region
 *     (4 threads, each a decode of 2 threads): with max-active-levels 1,
 *     OpenMP's default, the call's region is inactive and runs on the
 *     calling thread alone; with 2 it gets a team of its own; either way
 *     the call returns the bits of the same call made outside any region.
 *
 * First use from many threads at once is test_first_use.c (a process
 * initializes once). make test-tsan runs this suite under ThreadSanitizer.
 */
#include "layer_cases.h"

#include <omp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LAYERS 8
#define ITERATIONS 3 /* steps each server thread runs per round */

/* Shapes: B requests of lens tokens, the last news of each new this step. */
static const layer_shape shape = {.num_reqs = 3, .H = 4, .L = 48, .R = 16, .P = 32, .V = 24,
                                  .block_size = 16, .s_q = 2, .chunk_tokens = 64,
                                  .lens = {37, 17, 70}, .news = {4, 2, 9}};

/* Every backend gets two layers or more of its dtypes (avx512_bf16 and
 * neon_bf16 bf16, neon_fhm f16, avx512_amx bf16 q). */
static const layer_spec specs[LAYERS] = {
    {MLA_DTYPE_BF16, MLA_DTYPE_BF16, 1, false},    {MLA_DTYPE_BF16, MLA_DTYPE_BF16, 2, false},
    {MLA_DTYPE_F32, MLA_DTYPE_F32, 2, false},      {MLA_DTYPE_F16, MLA_DTYPE_F16, 1, false},
    {MLA_DTYPE_F16, MLA_DTYPE_F16, 2, false},      {MLA_DTYPE_BF16, MLA_DTYPE_FP8_E4M3, 2, false},
    {MLA_DTYPE_F32, MLA_DTYPE_BF16, 1, true},      {MLA_DTYPE_F32, MLA_DTYPE_FP8_E5M2, 1, false},
};

/* ---- a round: each layer alone, then all at once -------------------------------------- */

/* Each call of the step in order from the initial arena, alone; the arena
 * after each is its `want`. A forced backend that cannot run a call (its
 * dtypes) leaves it out of the round; any other failure fails the test. */
static void run_alone(layer *ly, const char *forced)
{
    memcpy(ly->arena, ly->initial, ly->arena_bytes);
    for (int k = 0; k < CALLS; k++) {
        const mla_status st = layer_call(ly, (call)k, ly->s.threads);
        ly->runs[k] = st == MLA_OK;
        char label[120];
        if (st != MLA_OK && !(forced && st == MLA_ERR_BACKEND_INVALID))
            fail_msg("%s, backend %s: %s alone: %s: %s", layer_label(ly, label, sizeof label),
                     forced ? forced : "auto", call_names[k], mla_status_str(st), mla_last_error());
        if (!ly->want[k])
            ly->want[k] = layer_alloc_or_fail(ly->arena_bytes);
        memcpy(ly->want[k], ly->arena, ly->arena_bytes);
    }
}

typedef struct server {
    layer *ly;
    const char *forced;
    pthread_barrier_t *start;
    int failures;
    char error[300];
} server;

static void server_error(server *sv, call k, int step, const char *what)
{
    if (sv->failures++ == 0)
        snprintf(sv->error, sizeof sv->error, "step %d, %s: %s", step, call_names[k], what);
}

/* ITERATIONS steps of the layer, started with the others; every call is
 * checked against its `want` (cmocka's checks are for the main thread:
 * failures are noted and reported after the join). */
static void *serve(void *arg)
{
    server *sv = arg;
    layer *ly = sv->ly;
    pthread_barrier_wait(sv->start);
    for (int step = 0; step < ITERATIONS; step++) {
        memcpy(ly->arena, ly->initial, ly->arena_bytes);
        for (int k = 0; k < CALLS; k++) {
            if (!ly->runs[k])
                continue;
            const mla_status st = layer_call(ly, (call)k, ly->s.threads);
            if (st != MLA_OK)
                server_error(sv, (call)k, step, mla_last_error());
            else if (sv->forced && strcmp(mla_last_backend(), sv->forced) != 0)
                server_error(sv, (call)k, step, "ran on another backend than the forced one");
            else if (memcmp(ly->arena, ly->want[k], ly->arena_bytes) != 0)
                server_error(sv, (call)k, step, "other bits than the same call made alone");
        }
    }
    return NULL;
}

static void run_round(layer *layers, const char *forced)
{
    pthread_barrier_t start;
    assert_int_equal(pthread_barrier_init(&start, NULL, LAYERS), 0);
    server sv[LAYERS];
    pthread_t id[LAYERS];
    for (int i = 0; i < LAYERS; i++) {
        run_alone(&layers[i], forced);
        sv[i] = (server){.ly = &layers[i], .forced = forced, .start = &start};
    }
    for (int i = 0; i < LAYERS; i++)
        assert_int_equal(pthread_create(&id[i], NULL, serve, &sv[i]), 0);
    for (int i = 0; i < LAYERS; i++)
        assert_int_equal(pthread_join(id[i], NULL), 0);
    pthread_barrier_destroy(&start);
    for (int i = 0; i < LAYERS; i++) {
        char label[120];
        if (sv[i].failures)
            fail_msg("backend %s, %s: %d failed calls, the first at %s", forced ? forced : "auto",
                     layer_label(&layers[i], label, sizeof label), sv[i].failures, sv[i].error);
    }
}

static layer *make_layers(void)
{
    layer *layers = layer_alloc_or_fail(sizeof(layer) * LAYERS);
    for (int i = 0; i < LAYERS; i++)
        layer_make(&layers[i], &shape, &specs[i]);
    return layers;
}

static void free_layers(layer *layers)
{
    for (int i = 0; i < LAYERS; i++)
        layer_free(&layers[i]);
    free(layers);
}

/* Forces every op group onto backend b (the convert group too: the cache
 * ops and the prefill op's gathers). */
static void force_all(const char *name)
{
    for (int op = 0; op < MLA_OP_COUNT; op++) {
        mla_status st = mla_force_backend((mla_op)op, name);
        if (st != MLA_OK)
            fail_msg("forcing %s onto %s: %s", mla_op_name((mla_op)op), name, mla_last_error());
    }
}

/* Automatic selection: every call of every layer runs, all layers at
 * once; then each backend this CPU runs, forced, with the calls it
 * accepts, two layers at least running decode. */
static void test_layers_at_once(void **state)
{
    (void)state;
    layer *layers = make_layers();
    run_round(layers, NULL);
    for (int i = 0; i < LAYERS; i++)
        for (int k = 0; k < CALLS; k++)
            assert_true(layers[i].runs[k]);
    int rounds = 0;
    for (int i = 0; i < mla_backend_count(); i++) {
        const char *name = mla_backend_at(i)->name;
        mla_reasons why;
        assert_int_equal(mla_backend_validate(name, MLA_OP_DECODE, NULL, &why), MLA_OK);
        if (why.count > 0)
            continue;
        force_all(name);
        run_round(layers, name);
        int decoding = 0;
        for (int l = 0; l < LAYERS; l++) {
            decoding += layers[l].runs[DECODE];
            assert_true(layers[l].runs[CONCAT] && layers[l].runs[GATHER]);
        }
        if (decoding < 2)
            fail_msg("backend %s: %d layers decode, want 2 at once", name, decoding);
        rounds++;
    }
    print_message("[ ROUNDS   ] auto and %d backends, %d layers each\n", rounds, LAYERS);
    free_layers(layers);
}

/* ---- inside the caller's OpenMP region ---------------------------------------------------- */

#define OUTER 4 /* the caller's threads */

/* A copy of the f32 decode backend whose softmax_tile notes, for the
 * caller's thread whose call it serves (the region's ancestor at level 1),
 * the largest team it ran in and whether it ran on another thread. */
static mla_softmax_tile_fn *observed_softmax;
static pthread_t callers[OUTER];
static atomic_int team_most[OUTER];
static atomic_bool off_caller[OUTER];

static void observing_softmax(float *s, int64_t n, int64_t ld, int64_t nr, float score_scale,
                              const int64_t *hidden, float *m, float *l, float *alpha)
{
    const int caller = omp_get_level() >= 2 ? omp_get_ancestor_thread_num(1) : -1;
    if (caller >= 0 && caller < OUTER) {
        const int team = omp_get_num_threads();
        int most = atomic_load(&team_most[caller]);
        while (team > most && !atomic_compare_exchange_weak(&team_most[caller], &most, team))
            ;
        if (!pthread_equal(pthread_self(), callers[caller]))
            atomic_store(&off_caller[caller], true);
    }
    observed_softmax(s, n, ld, nr, score_scale, hidden, m, l, alpha);
}

static void register_observer(void)
{
    if (mla_backend_find("observed"))
        return;
    const mla_config cfg = {.q_dtype = MLA_DTYPE_F32, .cache_dtype = MLA_DTYPE_F32,
                            .kv_lora_rank = shape.L, .rope_dim = shape.R, .num_heads = shape.H,
                            .block_size = shape.block_size};
    const mla_backend_desc *base;
    assert_int_equal(mla_select_backend(MLA_OP_DECODE, &cfg, &base), MLA_OK);
    mla_backend_desc d = *base;
    d.name = "observed";
    d.priority = -100;
    observed_softmax = base->kernels.softmax_tile;
    d.kernels.softmax_tile = observing_softmax;
    assert_int_equal(mla_register_backend(&d, false), MLA_OK);
}

/* Decode of OUTER layers, each called by one thread of the caller's
 * parallel region with threads = 2, under max-active-levels `levels`:
 * every call returns its bits from outside any region (`want`, from the
 * arena state `before`). With 1 level, the call's region is inactive:
 * every kernel runs on the calling thread, in a team of one. */
static void decode_in_region(layer *layers, unsigned char **before, unsigned char **want,
                             int levels)
{
    const int old_levels = omp_get_max_active_levels();
    omp_set_max_active_levels(levels);
    mla_status st[OUTER];
    bool same[OUTER];
    for (int i = 0; i < OUTER; i++) {
        atomic_store(&team_most[i], 0);
        atomic_store(&off_caller[i], false);
        st[i] = MLA_ERR_INVALID_ARGUMENT;
        same[i] = false;
    }
    int outer = 0;
#pragma omp parallel num_threads(OUTER)
    {
        const int i = omp_get_thread_num();
#pragma omp single
        outer = omp_get_num_threads();
        layer *ly = &layers[i];
        memcpy(ly->arena, before[i], ly->arena_bytes);
        callers[i] = pthread_self();
        st[i] = layer_call(ly, DECODE, 2);
        same[i] = memcmp(ly->arena, want[i], ly->arena_bytes) == 0;
    }
    omp_set_max_active_levels(old_levels);
    assert_int_equal(outer, OUTER);
    for (int i = 0; i < OUTER; i++) {
        if (st[i] != MLA_OK)
            fail_msg("levels %d, caller %d: mla_decode: %s: %s", levels, i,
                     mla_status_str(st[i]), mla_last_error());
        if (!same[i])
            fail_msg("levels %d, caller %d: other bits than the call outside the region",
                     levels, i);
        const int team = atomic_load(&team_most[i]);
        if (team < 1 || team > (levels == 1 ? 1 : 2))
            fail_msg("levels %d, caller %d: the call's kernels ran in a team of %d", levels, i,
                     team);
        if (levels == 1 && atomic_load(&off_caller[i]))
            fail_msg("levels 1, caller %d: a kernel ran off the calling thread", i);
    }
}

static void test_decode_inside_callers_region(void **state)
{
    (void)state;
    register_observer();
    layer *layers = make_layers();
    unsigned char *before[OUTER], *want[OUTER];
    assert_int_equal(mla_force_backend(MLA_OP_DECODE, "observed"), MLA_OK);
    for (int i = 0; i < OUTER; i++) {
        layer *ly = &layers[i];
        run_alone(ly, "observed");
        assert_true(ly->runs[DECODE]);
        before[i] = ly->want[DECODE - 1];
        want[i] = ly->want[DECODE];
    }
    decode_in_region(layers, before, want, 1);
    decode_in_region(layers, before, want, 2);
    free_layers(layers);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        CASE_TEST(test_layers_at_once),
        CASE_TEST(test_decode_inside_callers_region),
    };
    case_apply_filter();
    return cmocka_run_group_tests_name("concurrency", tests, NULL, NULL);
}
