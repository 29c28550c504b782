/*
 * mla_bench merge: mla_merge_attn_states, which is memory bound, next to a
 * memcpy moving the same bytes, timed alternately rep by rep in the same run
 * (--no-probe: the memcpy first, then the merge alone).
 */
#include "bench.h"

#include <stdlib.h>
#include <string.h>

/* T = 32768 tokens of 16 heads x 128: each f32 array 256 MiB, the three
 * 768 MiB (bf16: 384 MiB), past the largest last-level caches (480 MiB on
 * the machine RESULTS.md reports), so the merge streams from DRAM. */
#define MERGE_TOKENS 32768
#define MERGE_HEADS 16
#define MERGE_HEAD_DIM 128

typedef struct merge_bench {
    mla_merge_attn_args args;
    int threads;
} merge_bench;

static bool run_merge(void *ctx)
{
    const merge_bench *m = ctx;
    return check(mla_merge_attn_states(&m->args, m->threads), "mla_merge_attn_states");
}

/* dst = n f32 values stored as dtype. */
static bool store_as(mla_dtype dtype, void *dst, const float *src, int64_t n, int threads)
{
    if (dtype == MLA_DTYPE_F32) {
        memcpy(dst, src, (size_t)n * sizeof(float));
        return true;
    }
    return check(mla_convert(dtype, dst, MLA_DTYPE_F32, src, n, threads), "mla_convert");
}

/* Finite rows and LSEs within a few units of each other: every row takes
 * the weighted sum, none an empty-partial shortcut. */
static bool fill_inputs(mla_merge_attn_args *a, float *lse, int threads)
{
    const int64_t n = a->num_tokens * a->num_heads * a->head_dim, lses = a->num_tokens * a->num_heads;
    float *row = alloc((size_t)n * sizeof(float));
    if (!row)
        return false;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < n; i++)
        row[i] = (float)(i % 1999 - 999) / 512.0f;
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < 2 * lses; i++)
        lse[i] = (float)(i % 37) / 8.0f;
    bool ok = store_as(a->dtype, (void *)a->prefix, row, n, threads) &&
              store_as(a->dtype, (void *)a->suffix, row, n, threads);
    free(row);
    return ok;
}

/* One thread count: every backend that takes the dtype, each timed
 * alternately with the memcpy. */
static bool bench_threads(const options *o, const plan *p, int t, merge_bench *m,
                          copy_run *copy, double traffic)
{
    mla_config cfg = {.q_dtype = m->args.dtype, .cache_dtype = m->args.dtype,
                      .kv_lora_rank = m->args.head_dim, .num_heads = m->args.num_heads,
                      .block_size = 1};
    for (int b = 0; b < p->nbackends; b++) {
        stats s, copy_s;
        mla_reasons why;
        if (!check(mla_backend_validate(p->backends[b]->name, MLA_OP_PREFILL, &cfg, &why),
                   "mla_backend_validate"))
            return false;
        if (why.count > 0) /* avx512_bf16 takes only bf16 */
            continue;
        m->threads = copy->threads = p->threads[t];
        if (!force_backend(MLA_OP_PREFILL, p->backends[b]->name) ||
            !time_beside(o, run_merge, m, &(ceiling){run_copy, copy, &copy_s}, 1, &s) ||
            !ran_on(p->backends[b], "merge"))
            return false;
        row r = {.op = m->args.dtype == MLA_DTYPE_F32 ? "merge_f32"
                       : m->args.dtype == MLA_DTYPE_BF16 ? "merge_bf16" : "merge_f16",
                 .backend = p->backends[b]->name, .probe = probe_mode(o),
                 .threads = p->threads[t], .n = m->args.num_tokens, .time = s,
                 .gbps = giga_per_s(traffic, s.median),
                 .peak_gflops = p->peaks[b * p->nthreads + t].gflops,
                 .copy_gbps = giga_per_s(traffic, copy_s.median)};
        print_row(&r, o->json);
    }
    return true;
}

int cmd_merge(const options *o, const plan *p)
{
    const int64_t T = o->tokens_set ? o->tokens : MERGE_TOKENS;
    const int64_t H = o->heads_set ? o->heads : MERGE_HEADS, D = MERGE_HEAD_DIM;
    const mla_dtype dtype = o->q_dtype < 0 ? MLA_DTYPE_F32 : (mla_dtype)o->q_dtype;
    const size_t array = (size_t)(T * H * D * mla_dtype_size(dtype)), lses = (size_t)(T * H) * 4;
    /* prefix and suffix read, out written, and the three LSE arrays */
    const double traffic = 3.0 * (double)array + 3.0 * (double)lses;
    const size_t copy_bytes = (size_t)(traffic / 2); /* a memcpy moves it twice */
    char *prefix = alloc(array), *suffix = alloc(array), *out = alloc(array);
    float *lse = alloc(3 * lses);
    char *copy_src = alloc(copy_bytes), *copy_dst = alloc(copy_bytes);
    merge_bench m = {.args = {.num_tokens = T, .num_heads = H, .head_dim = D, .dtype = dtype,
                              .prefix = prefix, .suffix = suffix, .token_stride = H * D,
                              .head_stride = D, .prefix_lse = lse, .suffix_lse = lse + T * H,
                              .out = out, .out_token_stride = H * D, .out_head_stride = D,
                              .out_lse = lse + 2 * T * H,
                              .prefill_tokens_with_context = MLA_MERGE_ALL_TOKENS}};
    bool ok = prefix && suffix && out && lse && copy_src && copy_dst;
    if (ok) {
        int most = most_threads(p);
        first_touch(prefix, array, most);
        first_touch(suffix, array, most);
        first_touch(out, array, most);
        first_touch((char *)lse, 3 * lses, most);
        first_touch(copy_src, copy_bytes, most);
        first_touch(copy_dst, copy_bytes, most);
        ok = fill_inputs(&m.args, lse, most);
    }
    copy_run copy = {copy_dst, copy_src, copy_bytes, 1};
    if (ok)
        print_header(o->json);
    for (int t = 0; ok && t < p->nthreads; t++)
        ok = bench_threads(o, p, t, &m, &copy, traffic);
    ok = force_backend(MLA_OP_PREFILL, NULL) && ok;
    free(prefix);
    free(suffix);
    free(out);
    free(lse);
    free(copy_src);
    free(copy_dst);
    return ok ? 0 : 1;
}
