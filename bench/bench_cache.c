/*
 * mla_bench cache-write and cache-gather: the paged-cache ops, each timed
 * alternately with a memcpy of the same traffic (--no-probe: the memcpy first).
 */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { CACHE_L = 512, CACHE_R = 64, CACHE_WIDTH = CACHE_L + CACHE_R, CACHE_REQS = 16 };

typedef enum cache_kind { CACHE_WRITE, CACHE_GATHER, CACHE_CP_GATHER } cache_kind;

/* One case: the cache dtype and the other side's (source or workspace). */
typedef struct cache_case {
    cache_kind kind;
    mla_dtype cache, other;
} cache_case;

static const cache_case write_cases[] = {
    {CACHE_WRITE, MLA_DTYPE_BF16, MLA_DTYPE_BF16},     {CACHE_WRITE, MLA_DTYPE_BF16, MLA_DTYPE_F32},
    {CACHE_WRITE, MLA_DTYPE_F32, MLA_DTYPE_F32},       {CACHE_WRITE, MLA_DTYPE_F16, MLA_DTYPE_F16},
    {CACHE_WRITE, MLA_DTYPE_FP8_E4M3, MLA_DTYPE_BF16}, {CACHE_WRITE, MLA_DTYPE_FP8_E5M2, MLA_DTYPE_F32},
};
static const cache_case gather_cases[] = {
    {CACHE_GATHER, MLA_DTYPE_BF16, MLA_DTYPE_BF16},        {CACHE_GATHER, MLA_DTYPE_BF16, MLA_DTYPE_F32},
    {CACHE_GATHER, MLA_DTYPE_F32, MLA_DTYPE_F32},          {CACHE_GATHER, MLA_DTYPE_FP8_E4M3, MLA_DTYPE_BF16},
    {CACHE_GATHER, MLA_DTYPE_FP8_E5M2, MLA_DTYPE_F32},     {CACHE_CP_GATHER, MLA_DTYPE_BF16, MLA_DTYPE_BF16},
    {CACHE_CP_GATHER, MLA_DTYPE_FP8_E4M3, MLA_DTYPE_FP8_E4M3},
};

/* Buffers of a cache case. Tokens fill random whole blocks, as a prefill's
 * or a chunk's do; the cache has twice the slots the tokens need. */
typedef struct cache_bench {
    const cache_case *c;
    int64_t tokens, block_size, num_blocks;
    mla_kv_cache cache;
    void *rows;       /* [tokens, 576] source (write) or workspace (gathers) */
    int64_t *slots;   /* [tokens] */
    int32_t *block_table, cu_seq_lens[CACHE_REQS + 1], *token_to_seq;
    mla_gather_spec spec;
    int threads;
} cache_bench;

static bool cache_bench_init(cache_bench *cb, const cache_case *c, int64_t tokens, int64_t bs,
                             int threads)
{
    uint32_t rng = 777;
    int64_t used_blocks = (tokens + bs - 1) / bs, cols = used_blocks / CACHE_REQS + 2;
    *cb = (cache_bench){.c = c, .tokens = tokens, .block_size = bs, .num_blocks = 2 * used_blocks,
                        .threads = threads};
    size_t cache_bytes = (size_t)(cb->num_blocks * bs * CACHE_WIDTH * mla_dtype_size(c->cache));
    size_t row_bytes = (size_t)(tokens * CACHE_WIDTH * mla_dtype_size(c->other));
    int64_t *perm = alloc((size_t)cb->num_blocks * sizeof *perm);
    cb->cache = (mla_kv_cache){.data = alloc(cache_bytes), .dtype = c->cache,
                               .num_blocks = cb->num_blocks, .block_size = bs,
                               .width = CACHE_WIDTH, .scale = 0.5f};
    cb->rows = alloc(row_bytes);
    cb->slots = alloc((size_t)tokens * sizeof *cb->slots);
    cb->block_table = alloc((size_t)(CACHE_REQS * cols) * sizeof *cb->block_table);
    cb->token_to_seq = alloc((size_t)tokens * sizeof *cb->token_to_seq);
    if (!perm || !cb->cache.data || !cb->rows || !cb->slots || !cb->block_table || !cb->token_to_seq) {
        free(perm);
        return false;
    }
    /* small finite values in every dtype; touched by the threads that use them */
    first_touch(cb->cache.data, cache_bytes, threads);
    first_touch(cb->rows, row_bytes, threads);
    memset(cb->cache.data, 0x3c, cache_bytes);
    memset(cb->rows, 0x3c, row_bytes);
    shuffle(perm, cb->num_blocks, &rng);
    for (int64_t t = 0; t < tokens; t++)
        cb->slots[t] = perm[t / bs] * bs + t % bs;
    /* CACHE_REQS equal requests; request r owns blocks r*cols/... of perm */
    for (int r = 0; r <= CACHE_REQS; r++)
        cb->cu_seq_lens[r] = (int32_t)(tokens * r / CACHE_REQS);
    for (int r = 0; r < CACHE_REQS; r++)
        for (int64_t k = 0; k < cols; k++)
            cb->block_table[r * cols + k] = (int32_t)perm[(r * cols + k) % cb->num_blocks];
    for (int r = 0; r < CACHE_REQS; r++)
        for (int64_t t = cb->cu_seq_lens[r]; t < cb->cu_seq_lens[r + 1]; t++)
            cb->token_to_seq[t] = r;
    cb->spec = (mla_gather_spec){.block_table = cb->block_table, .block_table_cols = cols,
                                 .num_reqs = CACHE_REQS, .cu_seq_lens = cb->cu_seq_lens};
    free(perm);
    return true;
}

static void cache_bench_free(cache_bench *cb)
{
    free(cb->cache.data);
    free(cb->rows);
    free(cb->slots);
    free(cb->block_table);
    free(cb->token_to_seq);
}

static bool run_cache(void *ctx)
{
    const cache_bench *cb = ctx;
    switch (cb->c->kind) {
    case CACHE_WRITE: {
        const char *src = cb->rows;
        return check(mla_concat_and_cache(&cb->cache, src, CACHE_WIDTH,
                                          src + CACHE_L * mla_dtype_size(cb->c->other), CACHE_WIDTH,
                                          cb->c->other, CACHE_L, CACHE_R, cb->slots, cb->tokens,
                                          cb->threads), "mla_concat_and_cache");
    }
    case CACHE_GATHER:
        return check(mla_gather_cache(&cb->cache, &cb->spec, cb->token_to_seq, cb->tokens, cb->rows,
                                      cb->c->other, CACHE_WIDTH, cb->threads), "mla_gather_cache");
    default:
        return check(mla_cp_gather_cache(&cb->cache, &cb->spec, cb->rows, CACHE_WIDTH, cb->threads),
                     "mla_cp_gather_cache");
    }
}

static bool cache_case_selected(const options *o, const cache_case *c)
{
    return (o->cache_dtype < 0 || o->cache_dtype == (int)c->cache) &&
           (o->other_dtype < 0 || o->other_dtype == (int)c->other);
}

/* Every selected case at every thread count on every backend, each timed
 * alternately with a memcpy of its traffic (bytes read + written) on as many
 * threads. */
static int run_cache_cases(const options *o, const plan *p, const cache_case *cases, int count)
{
    bool ok = true;
    print_header(o->json);
    for (int i = 0; ok && i < count; i++) {
        const cache_case *c = &cases[i];
        if (!cache_case_selected(o, c))
            continue;
        static const char *names[] = {"cache_write", "cache_gather", "cache_cp_gather"};
        char op[48];
        snprintf(op, sizeof op, "%s_%s_%s", names[c->kind],
                 mla_dtype_name(c->kind == CACHE_WRITE ? c->other : c->cache),
                 mla_dtype_name(c->kind == CACHE_WRITE ? c->cache : c->other));
        size_t traffic = (size_t)(o->tokens * CACHE_WIDTH *
                                  (mla_dtype_size(c->cache) + mla_dtype_size(c->other)));
        for (int t = 0; ok && t < p->nthreads; t++) {
            cache_bench cb;
            char *copy_src = alloc(traffic / 2), *copy_dst = alloc(traffic / 2);
            ok = copy_src && copy_dst &&
                 cache_bench_init(&cb, c, o->tokens, o->block_size, p->threads[t]);
            if (ok) {
                first_touch(copy_src, traffic / 2, p->threads[t]);
                first_touch(copy_dst, traffic / 2, p->threads[t]);
                copy_run copy = {copy_dst, copy_src, traffic / 2, p->threads[t]};
                for (int b = 0; ok && b < p->nbackends; b++) {
                    stats s, copy_s;
                    ok = force_backend(MLA_OP_CONVERT, p->backends[b]->name) &&
                         time_beside(o, run_cache, &cb, &(ceiling){run_copy, &copy, &copy_s}, 1, &s) &&
                         ran_on(p->backends[b], op);
                    if (!ok)
                        break;
                    row r = {.op = op, .backend = p->backends[b]->name, .probe = probe_mode(o),
                             .threads = p->threads[t], .n = o->tokens, .time = s,
                             .gbps = giga_per_s((double)traffic, s.median),
                             .peak_gflops = p->peaks[b * p->nthreads + t].gflops,
                             .copy_gbps = giga_per_s((double)traffic, copy_s.median)};
                    print_row(&r, o->json);
                }
                cache_bench_free(&cb);
            }
            free(copy_src);
            free(copy_dst);
        }
    }
    ok = force_backend(MLA_OP_CONVERT, NULL) && ok;
    return ok ? 0 : 1;
}

int cmd_cache_write(const options *o, const plan *p)
{
    return run_cache_cases(o, p, write_cases, (int)(sizeof write_cases / sizeof write_cases[0]));
}

int cmd_cache_gather(const options *o, const plan *p)
{
    return run_cache_cases(o, p, gather_cases, (int)(sizeof gather_cases / sizeof gather_cases[0]));
}
