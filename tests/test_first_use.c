/*
 * First use from many threads at once (mla.h: initialization happens on
 * first use, once, thread-safely). A process initializes once, so main()
 * does it before cmocka runs: FIRST_THREADS threads wait at a barrier and
 * then each makes its very first library call, a different entry point per
 * thread (mla_init, queries, workspace sizes, a cache op, a conversion,
 * selection, decode). Each then asks which backend every op group takes
 * and runs one small decode. The tests check that every call succeeded,
 * that all threads saw the same capabilities and choices as a call made
 * afterwards, and that their decodes gave the same bits. make test-tsan
 * runs this under ThreadSanitizer, which also sees the init race itself.
 */
#include "decode_cases.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FIRST_THREADS 8

/* A small f32 decode: B requests over a paged cache, built without any
 * library call (the threads' calls must be the first). */
enum { FB = 2, FH = 2, FL = 16, FR = 8, FD = FL + FR, FBS = 4, FBLOCKS = 5 };
static const int32_t first_lens[FB] = {7, 9};
static int32_t first_table[FB * 3] = {3, 0, 0, 1, 4, 2};
static float first_q[FB * FH * FD], first_cache[FBLOCKS * FBS * FD];

typedef enum first_call {
    FIRST_INIT, FIRST_CAPS, FIRST_COUNT, FIRST_DECODE_SIZE, FIRST_CONCAT, FIRST_CONVERT,
    FIRST_SELECT, FIRST_DECODE, FIRST_CALLS
} first_call;
static const char *const first_names[FIRST_CALLS] = {
    "mla_init", "mla_cpu_caps", "mla_backend_count", "mla_decode_workspace_size",
    "mla_concat_and_cache", "mla_convert", "mla_select_backend", "mla_decode",
};

typedef struct first_thread {
    first_call first;
    pthread_barrier_t *start;
    mla_status first_status, decode_status;
    char error[200];
    mla_caps caps;
    char chosen[MLA_OP_COUNT][32];
    float out[FB * FH * FL], lse[FB * FH];
} first_thread;

static first_thread threads[FIRST_THREADS];

static mla_decode_args first_decode(float *out, float *lse)
{
    return (mla_decode_args){
        .num_reqs = FB, .s_q = 1, .num_heads = FH, .kv_lora_rank = FL, .rope_dim = FR,
        .scale = 0.25f, .q_dtype = MLA_DTYPE_F32, .q_nope = first_q, .q_nope_token_stride = FH * FD,
        .q_nope_head_stride = FD, .q_pe = first_q + FL, .q_pe_token_stride = FH * FD,
        .q_pe_head_stride = FD, .block_table = first_table, .block_table_cols = 3,
        .seq_lens = first_lens, .out = out, .out_token_stride = FH * FL, .out_head_stride = FL,
        .lse = lse};
}

/* mla_decode into out and lse, with a workspace of the queried size. */
static mla_status run_decode(mla_decode_args *a, const mla_kv_cache *cache, float *out,
                             float *lse)
{
    *a = first_decode(out, lse);
    a->cache = cache;
    int64_t bytes;
    mla_status st = mla_decode_workspace_size(a, 2, &bytes);
    if (st != MLA_OK)
        return st;
    void *ws = malloc((size_t)bytes);
    st = ws ? mla_decode(a, ws, bytes, 2) : MLA_ERR_CAPACITY;
    free(ws);
    return st;
}

static const mla_config first_configs[MLA_OP_COUNT] = {
    [MLA_OP_DECODE] = {.q_dtype = MLA_DTYPE_F32, .cache_dtype = MLA_DTYPE_F32, .kv_lora_rank = FL,
                       .rope_dim = FR, .num_heads = FH, .block_size = FBS},
    [MLA_OP_PREFILL] = {.q_dtype = MLA_DTYPE_BF16, .cache_dtype = MLA_DTYPE_BF16,
                        .kv_lora_rank = 40, .rope_dim = 8, .num_heads = FH, .block_size = 1},
};

/* The backend each op group takes (convert: no config). */
static void note_choices(char chosen[MLA_OP_COUNT][32])
{
    for (int op = 0; op < MLA_OP_COUNT; op++) {
        const mla_backend_desc *b = NULL;
        const mla_status st = mla_select_backend((mla_op)op,
                                                 op == MLA_OP_CONVERT ? NULL : &first_configs[op],
                                                 &b);
        snprintf(chosen[op], sizeof chosen[op], "%s", st == MLA_OK ? b->name : "(none)");
    }
}

static mla_status make_first_call(first_thread *t, const mla_kv_cache *cache)
{
    mla_decode_args a = first_decode(t->out, t->lse);
    a.cache = cache;
    int64_t bytes;
    switch (t->first) {
    case FIRST_INIT:
        return mla_init();
    case FIRST_CAPS: /* compared with the others' below */
        t->caps = mla_cpu_caps();
        return MLA_OK;
    case FIRST_COUNT:
        return mla_backend_count() > 0 ? MLA_OK : MLA_ERR_NO_BACKEND;
    case FIRST_DECODE_SIZE:
        return mla_decode_workspace_size(&a, 2, &bytes);
    case FIRST_CONCAT: {
        const int64_t slot = 5;
        return mla_concat_and_cache(cache, first_q, FD, first_q + FL, FD, MLA_DTYPE_F32, FL, FR,
                                    &slot, 1, 2);
    }
    case FIRST_CONVERT: {
        uint16_t half[FD];
        return mla_convert(MLA_DTYPE_BF16, half, MLA_DTYPE_F32, first_q, FD, 2);
    }
    case FIRST_SELECT: {
        const mla_backend_desc *b;
        return mla_select_backend(MLA_OP_DECODE, &first_configs[MLA_OP_DECODE], &b);
    }
    case FIRST_DECODE:
    case FIRST_CALLS:
        break;
    }
    return run_decode(&a, cache, t->out, t->lse);
}

/* Waits for the others, makes its first call, then notes the choices and
 * decodes (on a cache of its own: the concat call writes into its copy). */
static void *first_use(void *arg)
{
    first_thread *t = arg;
    float *data = malloc(sizeof first_cache);
    if (data)
        memcpy(data, first_cache, sizeof first_cache);
    const mla_kv_cache cache = {.data = data, .dtype = MLA_DTYPE_F32, .num_blocks = FBLOCKS,
                                .block_size = FBS, .width = FD};
    pthread_barrier_wait(t->start);
    t->first_status = data ? make_first_call(t, &cache) : MLA_ERR_CAPACITY;
    if (t->first_status != MLA_OK)
        snprintf(t->error, sizeof t->error, "%s", mla_last_error());
    if (t->caps == 0)
        t->caps = mla_cpu_caps();
    note_choices(t->chosen);
    memcpy(data, first_cache, sizeof first_cache);
    mla_decode_args a;
    t->decode_status = run_decode(&a, &cache, t->out, t->lse);
    free(data);
    return NULL;
}

static void test_first_calls_succeed(void **state)
{
    (void)state;
    for (int i = 0; i < FIRST_THREADS; i++) {
        if (threads[i].first_status != MLA_OK)
            fail_msg("thread %d, first call %s: %s: %s", i, first_names[threads[i].first],
                     mla_status_str(threads[i].first_status), threads[i].error);
        assert_int_equal(threads[i].decode_status, MLA_OK);
    }
}

/* Every thread saw the capabilities and choices a call makes now. */
static void test_same_choices(void **state)
{
    (void)state;
    char now[MLA_OP_COUNT][32];
    note_choices(now);
    for (int i = 0; i < FIRST_THREADS; i++) {
        assert_int_equal(threads[i].caps, mla_cpu_caps());
        for (int op = 0; op < MLA_OP_COUNT; op++)
            if (strcmp(threads[i].chosen[op], now[op]) != 0)
                fail_msg("thread %d (first call %s): %s -> %s, now %s", i,
                         first_names[threads[i].first], mla_op_name((mla_op)op),
                         threads[i].chosen[op], now[op]);
    }
}

/* Their decodes gave the bits of one made now. */
static void test_same_results(void **state)
{
    (void)state;
    float out[FB * FH * FL], lse[FB * FH];
    const mla_kv_cache cache = {.data = first_cache, .dtype = MLA_DTYPE_F32,
                                .num_blocks = FBLOCKS, .block_size = FBS, .width = FD};
    mla_decode_args a;
    assert_int_equal(run_decode(&a, &cache, out, lse), MLA_OK);
    for (int i = 0; i < FIRST_THREADS; i++)
        if (memcmp(threads[i].out, out, sizeof out) != 0 ||
            memcmp(threads[i].lse, lse, sizeof lse) != 0)
            fail_msg("thread %d (first call %s): other decode bits than a call made now", i,
                     first_names[threads[i].first]);
}

int main(void)
{
    for (int i = 0; i < FB * FH * FD; i++)
        first_q[i] = (float)case_uniform();
    for (int i = 0; i < FBLOCKS * FBS * FD; i++)
        first_cache[i] = (float)case_uniform();
    pthread_barrier_t start;
    pthread_t id[FIRST_THREADS];
    if (pthread_barrier_init(&start, NULL, FIRST_THREADS) != 0)
        return 1;
    for (int i = 0; i < FIRST_THREADS; i++) {
        threads[i] = (first_thread){.first = (first_call)(i % FIRST_CALLS), .start = &start};
        if (pthread_create(&id[i], NULL, first_use, &threads[i]) != 0)
            return 1;
    }
    for (int i = 0; i < FIRST_THREADS; i++)
        pthread_join(id[i], NULL);
    pthread_barrier_destroy(&start);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_calls_succeed),
        cmocka_unit_test(test_same_choices),
        cmocka_unit_test(test_same_results),
    };
    return cmocka_run_group_tests_name("first_use", tests, NULL, NULL);
}
