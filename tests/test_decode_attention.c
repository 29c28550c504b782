/*
 * mla_decode (docs/semantics.md §1.3, §5, §8) on every backend this CPU can run, forced
 * in turn, against a double-precision latent oracle (oracle_decode_latent:
 * plain loops over the cache rows as stored): every q dtype with every cache
 * dtype, MTP (s_q > 1, causal), q in the layouts callers use, split-KV
 * schedules (thread counts, num_parts, the LSE combine), the batch-invariant
 * mode (bit-identical across threads and batches), LSE, rows that see no key,
 * strided and unaligned buffers, workspace sizing (exact bytes, guard bytes,
 * unaligned pointers).
 * Outputs live in buffers with guard bytes around and between rows; memory
 * the kernels must not read (q padding, cache padding, rows past seq_len,
 * block-table columns past ceil(len / bs), unused blocks) holds values that
 * would spoil any result they got into (+-1000, or NaN in one test).
 * The case builder and the tolerances: decode_cases.h.
 */
#include "decode_cases.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is_ref(const mla_backend_desc *b)
{
    return strcmp(b->isa, "ref") == 0;
}

/* ---- the case on every backend ----------------------------------------------------- */

typedef struct everywhere {
    dcase *c;
    int64_t ws_misalign;
    int ran;
} everywhere;

static void run_everywhere(const mla_backend_desc *b, void *ctx)
{
    everywhere *e = ctx;
    if (is_ref(b) && e->c->s.big && e->ran > 0)
        return;
    dcase_run_on(e->c, b, e->c->s.threads, e->ws_misalign);
    e->ran++;
}

/* Runs the case on every backend that can (ref only if none other could, for
 * big cases), with workspaces ws_misalign bytes past 64; returns how many
 * ran. */
static int run_case_everywhere(dcase *c, int64_t ws_misalign)
{
    everywhere e = {.c = c, .ws_misalign = ws_misalign};
    mla_config cfg = case_config_of(&c->args);
    support_each_backend(MLA_OP_DECODE, &cfg, run_everywhere, &e);
    return e.ran;
}

/* ---- the main sweep on every backend ------------------------------------------------ */

static int sweep_specs(dspec *sp)
{
    static const int64_t s_qs[] = {1, 2, 4}, block_sizes[] = {16, 1, 64}, heads[] = {3, 1, 16, 3};
    int n = 0;
    /* every q dtype x every cache dtype at a small general shape (L 40, R 8),
     * the other dimensions rotating through their values */
    for (int k = 0; k < 15; k++) {
        dspec s = {.q_dtype = case_q_dtypes[k / 5], .cache_dtype = case_cache_dtypes[k % 5],
                   .s_q = s_qs[k % 3], .H = heads[k % 4], .L = 40, .R = 8,
                   .block_size = block_sizes[(k / 3) % 3], .form = (q_form)((k / 2) % 3),
                   .pad = k % 2 == 0, .lse = k % 4 != 3, .threads = k % 3};
        dspec_edge_lens(&s);
        sp[n++] = s;
    }
    /* L 7, R 0: no rope part, q_pe NULL */
    sp[n] = (dspec){.q_dtype = MLA_DTYPE_F32, .cache_dtype = MLA_DTYPE_BF16, .s_q = 2, .H = 3,
                    .L = 7, .block_size = 1, .form = Q_SPLIT, .pad = true, .lse = true,
                    .threads = 2};
    dspec_edge_lens(&sp[n++]);
    sp[n] = (dspec){.q_dtype = MLA_DTYPE_F16, .cache_dtype = MLA_DTYPE_FP8_E5M2, .s_q = 1, .H = 1,
                    .L = 7, .block_size = 16, .form = Q_VLLM, .lse = true, .threads = 1};
    dspec_edge_lens(&sp[n++]);
    /* 150 query rows: the driver's passes over the cache (at most 128 rows
     * each) split a token's heads */
    sp[n] = (dspec){.q_dtype = MLA_DTYPE_F32, .cache_dtype = MLA_DTYPE_BF16, .s_q = 3, .H = 50,
                    .L = 40, .R = 8, .block_size = 16, .form = Q_SPLIT, .pad = true, .lse = true,
                    .threads = 2};
    dspec_edge_lens(&sp[n++]);
    /* DeepSeek 512 + 64 */
    sp[n] = (dspec){.q_dtype = MLA_DTYPE_F16, .cache_dtype = MLA_DTYPE_FP8_E4M3, .s_q = 4,
                    .H = 16, .L = 512, .R = 64, .block_size = 16, .form = Q_SPLIT, .pad = true,
                    .threads = 2};
    dspec_edge_lens(&sp[n++]);
    sp[n] = (dspec){.q_dtype = MLA_DTYPE_F32, .cache_dtype = MLA_DTYPE_FP8_E5M2, .s_q = 1, .H = 3,
                    .L = 512, .R = 64, .block_size = 1, .form = Q_CONCAT, .lse = true};
    dspec_edge_lens(&sp[n++]);
    /* long random lengths at H 16 */
    sp[n++] = (dspec){.q_dtype = MLA_DTYPE_F32, .cache_dtype = MLA_DTYPE_BF16, .s_q = 1, .H = 16,
                      .L = 512, .R = 64, .block_size = 64, .num_reqs = 3,
                      .lens = {(int32_t)support_random_in(6000, 8192),
                               (int32_t)support_random_in(1, 8192),
                               (int32_t)support_random_in(1, 3000)},
                      .form = Q_CONCAT, .pad = true, .lse = true, .big = true};
    sp[n++] = (dspec){.q_dtype = MLA_DTYPE_BF16, .cache_dtype = MLA_DTYPE_BF16, .s_q = 2, .H = 16,
                      .L = 512, .R = 64, .block_size = 64, .num_reqs = 3,
                      .lens = {(int32_t)support_random_in(1, 2000),
                               (int32_t)support_random_in(1, 2000),
                               (int32_t)support_random_in(1, 2000)},
                      .form = Q_VLLM, .lse = true, .big = true, .threads = 3};
    /* H 128 */
    sp[n++] = (dspec){.q_dtype = MLA_DTYPE_BF16, .cache_dtype = MLA_DTYPE_BF16, .s_q = 1,
                      .H = 128, .L = 512, .R = 64, .block_size = 64, .num_reqs = 1,
                      .lens = {(int32_t)support_random_in(4000, 4200)}, .form = Q_VLLM,
                      .pad = true, .lse = true, .big = true};
    sp[n++] = (dspec){.q_dtype = MLA_DTYPE_F32, .cache_dtype = MLA_DTYPE_F32, .s_q = 2,
                      .H = 128, .L = 512, .R = 64, .block_size = 16, .num_reqs = 3,
                      .lens = {700, 0, 65}, .form = Q_CONCAT, .lse = true, .big = true,
                      .threads = 2};
    return n;
}

static void test_decode_sweep(void **state)
{
    (void)state;
    dspec specs[32];
    int n = sweep_specs(specs);
    for (int k = 0; k < n; k++) {
        dcase c;
        dcase_make(&c, &specs[k], true);
        if (run_case_everywhere(&c, 0) == 0)
            fail_msg("%s: no backend can run this", c.label);
        dcase_free(&c);
    }
    dcase_print_accuracy();
}

/* ---- every backend, forced, is the one that runs ------------------------------------- */

/* The backends that ran, in the order they first did. */
typedef struct ran_set {
    dcase *c;
    const mla_backend_desc *ran[64];
    int count;
} ran_set;

static void run_and_note(const mla_backend_desc *b, void *ctx)
{
    ran_set *set = ctx;
    dcase_run_on(set->c, b, 2, 0);
    for (int i = 0; i < set->count; i++)
        if (set->ran[i] == b)
            return;
    if (set->count < COUNT(set->ran))
        set->ran[set->count++] = b;
}

static void test_every_backend(void **state)
{
    (void)state;
    /* the CPU cannot run it: forcing it fails, naming a reason */
    for (int i = 0; i < mla_backend_count(); i++) {
        const mla_backend_desc *b = mla_backend_at(i);
        mla_reasons why;
        assert_int_equal(mla_backend_validate(b->name, MLA_OP_DECODE, NULL, &why), MLA_OK);
        if (why.count == 0)
            continue;
        support_expect_reject("mla_force_backend", "backend the CPU cannot run",
                              mla_force_backend(MLA_OP_DECODE, b->name), MLA_ERR_BACKEND_INVALID,
                              why.text[0]);
    }
    /* bf16 q with a bf16 cache, then f16 with f16: between them every
     * backend has a dtype pair it runs (the half-precision ones only theirs) */
    static const mla_dtype pairs[] = {MLA_DTYPE_BF16, MLA_DTYPE_F16};
    ran_set set = {0};
    for (int d = 0; d < COUNT(pairs); d++) {
        dspec s = {.q_dtype = pairs[d], .cache_dtype = pairs[d], .s_q = 2, .H = 5, .L = 64,
                   .R = 16, .block_size = 16, .form = Q_CONCAT, .pad = true, .lse = true,
                   .threads = 2};
        dspec_edge_lens(&s);
        dcase c;
        dcase_make(&c, &s, true);
        mla_config cfg = case_config_of(&c.args);
        set.c = &c;
        assert_true(support_each_backend(MLA_OP_DECODE, &cfg, run_and_note, &set) >= 1);
        /* auto-selection runs what mla_select_backend names */
        const mla_backend_desc *chosen = NULL;
        assert_int_equal(mla_select_backend(MLA_OP_DECODE, &cfg, &chosen), MLA_OK);
        dcase_decode(&c, "auto-selected", 0, 0);
        support_expect_ran(chosen);
        dcase_check(&c, chosen->name);
        dcase_free(&c);
    }
    for (int i = 0; i < set.count; i++)
        print_message("[ BACKEND  ] %s: decode matches the oracle and is the backend that ran\n",
                      set.ran[i]->name);
    assert_true(set.count >= 1);
}

/* ---- the bf16 compute opt-in (f32 q) ------------------------------------------------------- */

typedef struct opt_in_run {
    dcase *c;
    int bf16_routes; /* backends that took a bf16 route for it */
} opt_in_run;

/* Opted in: within bf16 tolerance where the backend has a route that takes
 * it (q and keys rounded to bf16), else f32's tolerance, and the very bits
 * of the call without the opt-in where the backend takes that too. */
static void run_opted_in(const mla_backend_desc *b, void *ctx)
{
    opt_in_run *r = ctx;
    dcase *c = r->c;
    mla_config cfg = case_config_of(&c->args);
    const bool f32 = strcmp(mla_backend_route(b->name, &cfg), "f32") == 0;
    dcase_run_on(c, b, 2, 0);
    r->bf16_routes += !f32;
    mla_reasons plain;
    cfg.bf16_compute = false;
    assert_int_equal(mla_backend_validate(b->name, MLA_OP_DECODE, &cfg, &plain), MLA_OK);
    if (!f32 || plain.count > 0)
        return;
    unsigned char *opted = malloc(c->out_bytes);
    assert_non_null(opted);
    memcpy(opted, c->out_buf, c->out_bytes);
    c->args.bf16_compute = false;
    dcase_decode(c, b->name, 2, 0);
    c->args.bf16_compute = true;
    if (memcmp(opted, c->out_buf, c->out_bytes) != 0)
        fail_msg("%s: %s: opting into bf16 compute on the f32 route changed the output",
                 b->name, c->label);
    free(opted);
}

static void test_bf16_compute(void **state)
{
    (void)state;
    static const mla_dtype caches[] = {MLA_DTYPE_F32, MLA_DTYPE_BF16, MLA_DTYPE_F16,
                                       MLA_DTYPE_FP8_E4M3};
    int bf16_routes = 0;
    for (int k = 0; k < COUNT(caches); k++) {
        dspec s = {.q_dtype = MLA_DTYPE_F32, .cache_dtype = caches[k], .s_q = 2, .H = 5,
                   .L = 64, .R = 16, .block_size = 16, .form = Q_CONCAT, .pad = true,
                   .lse = true, .threads = 2, .bf16_compute = true};
        dspec_edge_lens(&s);
        dcase c;
        dcase_make(&c, &s, true);
        const mla_config cfg = case_config_of(&c.args);
        opt_in_run r = {.c = &c};
        assert_true(support_each_backend(MLA_OP_DECODE, &cfg, run_opted_in, &r) >= 1);
        bf16_routes += r.bf16_routes;
        dcase_free(&c);
    }
    print_message("[ BF16     ] f32 q opted into bf16 compute: %d (backend, cache dtype) runs on a "
                  "bf16 route, within bf16 tolerance; the rest kept the f32 route's bits\n",
                  bf16_routes);
}

/* ---- split-KV ------------------------------------------------------------------------- */

static void run_split_kv(const mla_backend_desc *b, void *ctx)
{
    dcase *c = ctx;
    /* the default schedule (one part per thread); then explicit ones: more
     * parts than needed (a request with one split writes straight to out,
     * others go through the LSE combine), one part, small block_n without
     * overhead, batch-invariant splits */
    static const mla_decode_sched_params params[] = {
        {.num_parts = 13},
        {.num_parts = 1},
        {.num_parts = 5, .block_n = 16, .overhead = MLA_SCHED_NO_OVERHEAD},
        {.num_parts = 0, .block_n = 16, .split_blocks = 3},
    };
    static const int threads[] = {1, 2, 3, 4, 7};
    for (int k = 0; k < COUNT(threads); k++) {
        if (is_ref(b) && k % 2 == 1)
            continue; /* ref: 1, 3, 7 threads */
        c->args.sched = NULL;
        snprintf(c->label, sizeof c->label, "split-KV, default schedule, %d threads", threads[k]);
        dcase_run_on(c, b, threads[k], 0);
    }
    for (int p = 0; p < COUNT(params); p++) {
        c->args.sched = &params[p];
        snprintf(c->label, sizeof c->label, "split-KV, num_parts %lld block_n %lld overhead %lld "
                 "split_blocks %lld, 2 threads", (long long)params[p].num_parts,
                 (long long)params[p].block_n, (long long)params[p].overhead,
                 (long long)params[p].split_blocks);
        dcase_run_on(c, b, 2, 0);
    }
}

/* 16 heads x 2 queries fill a pass (its O lives in the partial's rows); 5
 * heads leave padding rows (O in scratch, copied). The request of 49 keys
 * ends in a split of one key (split_blocks 3 x block_n 16) that the first
 * query's rows do not see: an empty partial row beside full ones. */
static void test_split_kv(void **state)
{
    (void)state;
    static const int64_t heads[] = {16, 5};
    for (int k = 0; k < COUNT(heads); k++) {
        dspec s = {.q_dtype = MLA_DTYPE_F32, .cache_dtype = MLA_DTYPE_BF16, .s_q = 2,
                   .H = heads[k], .L = 128, .R = 32, .block_size = 16, .num_reqs = 7,
                   .lens = {1000, 3, 0, 260, 64, 1, 49}, .form = Q_CONCAT, .pad = true,
                   .lse = true};
        dcase c;
        dcase_make(&c, &s, true);
        mla_config cfg = case_config_of(&c.args);
        assert_true(support_each_backend(MLA_OP_DECODE, &cfg, run_split_kv, &c) >= 1);
        dcase_free(&c);
    }
}

/* ---- batch invariance ------------------------------------------------------------------ */

/* Batch-invariant mode: request X's out and lse are the same bits alone,
 * first in a batch, last in a batch of other lengths, in other cache blocks,
 * for 1..8 threads and any part count. */
typedef struct inv_set {
    int64_t block_size, block_n, split_blocks;
    int32_t x_len, first[4], last[3]; /* batches: [X, first...], [last..., X] */
} inv_set;

typedef struct inv_run {
    const inv_set *set;
    dcase c[3];          /* X alone, X first, X last */
    int64_t x_req[3];    /* X's request in each */
    size_t out_x, lse_x; /* bytes of X's out and lse */
    unsigned char *ref_out, *ref_lse;
    int runs;
} inv_run;

static void copy_request(dcase *dst, int64_t bd, const dcase *src, int64_t bs_)
{
    const dspec *s = &src->s;
    const int64_t D = s->L + s->R, size = mla_dtype_size(s->cache_dtype);
    assert_int_equal(dst->lens[bd], src->lens[bs_]);
    for (int64_t j = 0; j < src->lens[bs_]; j++)
        memcpy((char *)dst->pg.cache.data + paged_row(&dst->pg, bd, j) * size,
               (const char *)src->pg.cache.data + paged_row(&src->pg, bs_, j) * size,
               (size_t)(D * size));
    const int64_t qsize = mla_dtype_size(s->q_dtype), ts = src->args.q_nope_token_stride;
    memcpy((char *)dst->args.q_nope + bd * s->s_q * ts * qsize,
           (const char *)src->args.q_nope + bs_ * s->s_q * ts * qsize,
           (size_t)(s->s_q * ts * qsize));
}

/* Fails, naming the first byte, unless X's out and lse are the reference's. */
static void expect_same_x(const inv_run *r, const unsigned char *out, const unsigned char *lse,
                          const char *backend, const char *label)
{
    if (memcmp(out, r->ref_out, r->out_x) == 0 && memcmp(lse, r->ref_lse, r->lse_x) == 0)
        return;
    size_t at = 0;
    const char *which = memcmp(out, r->ref_out, r->out_x) != 0 ? "out" : "lse";
    const unsigned char *g = which[0] == 'o' ? out : lse, *w = which[0] == 'o' ? r->ref_out
                                                                               : r->ref_lse;
    while (g[at] == w[at])
        at++;
    fail_msg("%s: %s: request X's %s differs from X alone on 1 thread (first at byte %zu)",
             backend, label, which, at);
}

static void run_invariant(const mla_backend_desc *b, void *ctx)
{
    inv_run *r = ctx;
    const inv_set *set = r->set;
    const int64_t H = r->c[0].s.H, s_q = r->c[0].s.s_q;
    bool have_ref = false;
    for (int k = 0; k < 3; k++) {
        dcase *c = &r->c[k];
        for (int threads = 1; threads <= 8; threads++) {
            if (is_ref(b) && threads != 1 && threads != 3 && threads != 8)
                continue;
            /* part counts: from the thread count, explicit, more than needed */
            mla_decode_sched_params p = {.num_parts = threads % 2 ? threads : 0,
                                         .block_n = set->block_n,
                                         .split_blocks = set->split_blocks};
            if (threads == 8)
                p.num_parts = 13;
            if (threads == 5)
                p.overhead = MLA_SCHED_NO_OVERHEAD;
            c->args.sched = &p;
            snprintf(c->label, sizeof c->label,
                     "batch-invariant (block_n %lld, split_blocks %lld, q %s), batch %d, "
                     "%d threads, num_parts %lld", (long long)set->block_n,
                     (long long)set->split_blocks, mla_dtype_name(c->s.q_dtype), k, threads,
                     (long long)p.num_parts);
            dcase_decode(c, b->name, threads, 0);
            support_expect_ran(b);
            c->args.sched = NULL;
            const unsigned char *out =
                (const unsigned char *)c->args.out + (size_t)r->x_req[k] * r->out_x;
            const unsigned char *lse = (const unsigned char *)(c->args.lse + r->x_req[k] * H * s_q);
            if (!have_ref) {
                dcase_check(&r->c[0], b->name);
                memcpy(r->ref_out, out, r->out_x);
                memcpy(r->ref_lse, lse, r->lse_x);
                have_ref = true;
                continue;
            }
            expect_same_x(r, out, lse, b->name, c->label);
            r->runs++;
        }
    }
}

static void test_batch_invariant(void **state)
{
    (void)state;
    static const inv_set sets[] = {
        {64, 16, 2, 300, {200, 0, 50}, {400, 17}}, /* 10 splits of 32 rows */
        {16, 64, 2, 600, {333, 0, 50}, {260, 17}}, /* 5 splits of 128 rows */
    };
    static const mla_dtype pairs[][2] = {{MLA_DTYPE_F32, MLA_DTYPE_BF16},
                                         {MLA_DTYPE_BF16, MLA_DTYPE_BF16}};
    int runs = 0;
    for (int pi = 0; pi < COUNT(pairs); pi++) {
        for (int si = 0; si < COUNT(sets); si++) {
            const inv_set *set = &sets[si];
            dspec base = {.q_dtype = pairs[pi][0], .cache_dtype = pairs[pi][1], .s_q = 2,
                          .H = 16, .L = 128, .R = 32, .block_size = set->block_size,
                          .form = Q_CONCAT, .lse = true};
            dspec s0 = base, s1 = base, s2 = base;
            s0.num_reqs = 1;
            s0.lens[0] = set->x_len;
            s1.num_reqs = 4;
            s1.lens[0] = set->x_len;
            memcpy(&s1.lens[1], set->first, 3 * sizeof(int32_t));
            s2.num_reqs = 3;
            memcpy(s2.lens, set->last, 2 * sizeof(int32_t));
            s2.lens[2] = set->x_len;
            inv_run r = {.set = set, .x_req = {0, 0, 2}};
            dcase_make(&r.c[0], &s0, true);
            dcase_make(&r.c[1], &s1, false);
            dcase_make(&r.c[2], &s2, false);
            copy_request(&r.c[1], 0, &r.c[0], 0);
            copy_request(&r.c[2], 2, &r.c[0], 0);
            r.c[1].inputs_sum = dcase_inputs_checksum(&r.c[1]);
            r.c[2].inputs_sum = dcase_inputs_checksum(&r.c[2]);
            r.out_x = (size_t)(base.s_q * base.H * base.L * mla_dtype_size(base.q_dtype));
            r.lse_x = (size_t)(base.H * base.s_q) * sizeof(float);
            r.ref_out = malloc(r.out_x);
            r.ref_lse = malloc(r.lse_x);
            mla_config cfg = case_config_of(&r.c[0].args);
            support_each_backend(MLA_OP_DECODE, &cfg, run_invariant, &r);
            runs += r.runs;
            free(r.ref_out);
            free(r.ref_lse);
            for (int k = 0; k < 3; k++)
                dcase_free(&r.c[k]);
        }
    }
    assert_true(runs > 0);
}

/* ---- unaligned pointers, NaN in memory that is not read -------------------------------- */

static void test_unaligned(void **state)
{
    (void)state;
    /* q, out and cache data this many elements past a 64-byte boundary
     * (f32: 4 or 12 bytes; bf16/f16: 2, 6 or 10 bytes; fp8: 1 to 3 bytes);
     * workspaces 1, 4, 33 bytes past one */
    static const struct {
        mla_dtype q, cache;
        int64_t misalign, ws_misalign;
        q_form form;
    } cases[] = {
        {MLA_DTYPE_F32, MLA_DTYPE_FP8_E4M3, 3, 1, Q_SPLIT},
        {MLA_DTYPE_F32, MLA_DTYPE_F32, 1, 4, Q_CONCAT},
        {MLA_DTYPE_BF16, MLA_DTYPE_BF16, 1, 33, Q_CONCAT},
        {MLA_DTYPE_F16, MLA_DTYPE_F16, 5, 2, Q_VLLM},
        {MLA_DTYPE_BF16, MLA_DTYPE_FP8_E5M2, 1, 1, Q_SPLIT},
    };
    for (int k = 0; k < COUNT(cases); k++) {
        dspec s = {.q_dtype = cases[k].q, .cache_dtype = cases[k].cache, .s_q = 2, .H = 5,
                   .L = 72, .R = 8, .block_size = 16, .form = cases[k].form, .pad = k % 2 == 1,
                   .lse = true, .threads = 2, .misalign = cases[k].misalign};
        dspec_edge_lens(&s);
        dcase c;
        dcase_make(&c, &s, true);
        size_t used = strlen(c.label);
        snprintf(c.label + used, sizeof c.label - used,
                 ", pointers +%lld elements, workspace +%lld bytes",
                 (long long)cases[k].misalign, (long long)cases[k].ws_misalign);
        run_case_everywhere(&c, cases[k].ws_misalign);
        dcase_free(&c);
    }
}

/* NaN in every element the kernels must not use: q padding, cache row and
 * block padding, rows past seq_len in a request's last block, unused
 * blocks. A kernel that reads them and masks by multiplying (p = 0 times a
 * NaN row) gets NaN. */
static void test_nan_in_unused_memory(void **state)
{
    (void)state;
    static const mla_dtype pairs[][2] = {{MLA_DTYPE_F32, MLA_DTYPE_F32},
                                         {MLA_DTYPE_F32, MLA_DTYPE_BF16},
                                         {MLA_DTYPE_BF16, MLA_DTYPE_BF16},
                                         {MLA_DTYPE_F16, MLA_DTYPE_FP8_E4M3}};
    for (int k = 0; k < COUNT(pairs); k++) {
        dspec s = {.q_dtype = pairs[k][0], .cache_dtype = pairs[k][1], .s_q = 2, .H = 3,
                   .L = 40, .R = 8, .block_size = 16, .num_reqs = 5, .lens = {5, 16, 21, 0, 47},
                   .form = k % 2 ? Q_VLLM : Q_SPLIT, .pad = true, .lse = true, .threads = 2,
                   .junk = JUNK_NAN};
        dcase c;
        dcase_make(&c, &s, true);
        size_t used = strlen(c.label);
        snprintf(c.label + used, sizeof c.label - used, ", NaN in unused memory");
        run_case_everywhere(&c, 0);
        dcase_free(&c);
    }
}

/* ---- workspace ---------------------------------------------------------------------------- */

static void test_workspace(void **state)
{
    (void)state;
    dspec s = {.q_dtype = MLA_DTYPE_BF16, .cache_dtype = MLA_DTYPE_BF16, .s_q = 2, .H = 16,
               .L = 512, .R = 64, .block_size = 64, .num_reqs = 3, .lens = {600, 7, 130},
               .form = Q_CONCAT, .lse = true};
    dcase c;
    dcase_make(&c, &s, true);
    static const int64_t misaligns[] = {0, 1, 2, 4, 8, 36};
    static const int threads[] = {1, 4};
    for (int k = 0; k < COUNT(threads); k++) {
        int64_t bytes = -1;
        assert_int_equal(mla_decode_workspace_size(&c.args, threads[k], &bytes), MLA_OK);
        if (bytes <= 0)
            fail_msg("mla_decode_workspace_size (%s, %d threads) = %lld, want > 0", c.label,
                     threads[k], (long long)bytes);
        for (int m = 0; m < COUNT(misaligns); m++) {
            /* exactly `bytes`, guards right outside (case_run_decode) */
            dcase_reset_outputs(&c);
            char what[256];
            snprintf(what, sizeof what, "%s, workspace of %lld bytes at +%lld", c.label,
                     (long long)bytes, (long long)misaligns[m]);
            mla_status st = case_run_decode(&c.args, threads[k], misaligns[m], what);
            if (st != MLA_OK)
                fail_msg("%s: %s: %s", what, mla_status_str(st), mla_last_error());
            dcase_check(&c, mla_last_backend());
        }
    }
    dcase_free(&c);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        CASE_TEST(test_every_backend),
        CASE_TEST(test_bf16_compute),
        CASE_TEST(test_decode_sweep),
        CASE_TEST(test_split_kv),
        CASE_TEST(test_batch_invariant),
        CASE_TEST(test_unaligned),
        CASE_TEST(test_nan_in_unused_memory),
        CASE_TEST(test_workspace),
    };
    case_apply_filter();
    return cmocka_run_group_tests_name("decode_attention", tests, NULL, NULL);
}
