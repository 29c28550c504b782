/*
 * mla_bench gemm: mla_up_proj, the kv_b_proj up-projection on libmla's
 * packed GEMM (M = tokens, K = L, N = H * (P + V)), against each backend's
 * FMA peak from the plan, measured first in the same run (on the AMX route
 * the AMX-BF16 probe's, measured after it).
 */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The prefill chunk and the head count of one rank (DeepSeek V3 over 8). */
#define GEMM_DEFAULT_TOKENS 2048
#define GEMM_DEFAULT_HEADS 16
/* DeepSeek V2/V3's qk_nope_head_dim and v_head_dim. */
#define HEAD_DIM 128

typedef struct gemm_bench {
    mla_up_proj_args args;
    void *workspace;
    int64_t workspace_bytes;
    int threads; /* of the next run */
} gemm_bench;

static bool run_up_proj(void *ctx)
{
    const gemm_bench *gb = ctx;
    return check(mla_up_proj(&gb->args, gb->workspace, gb->workspace_bytes, gb->threads),
                 "mla_up_proj");
}

/* n values in [-1, 1), a fixed pattern, stored as dtype (through f32). */
static bool fill(void *dst, mla_dtype dtype, int64_t n, int threads)
{
    bool f32 = dtype == MLA_DTYPE_F32;
    float *f = f32 ? dst : alloc((size_t)n * sizeof *f);
    if (!f)
        return false;
    uint32_t rng = 12345;
    for (int64_t i = 0; i < n; i++)
        f[i] = (float)(xorshift32(&rng) >> 8) * 0x1p-23f - 1.0f;
    bool ok = f32 || check(mla_convert(dtype, dst, MLA_DTYPE_F32, f, n, threads), "mla_convert");
    if (!f32)
        free(f);
    return ok;
}

/* kv_c [M, K] and W [N, K] in dtype, out [M, H, P] and [M, H, V] dense in
 * out_dtype (the attention's inputs), workspace for the plan's most threads. */
static bool gemm_bench_init(gemm_bench *gb, int64_t m, int64_t heads, int64_t k, mla_dtype dtype,
                            mla_dtype out_dtype, int threads)
{
    const int64_t n = heads * 2 * HEAD_DIM, size = mla_dtype_size(dtype);
    const size_t out_bytes = (size_t)(m * heads * HEAD_DIM * mla_dtype_size(out_dtype));
    void *kv_c = alloc((size_t)(m * k * size)), *w = alloc((size_t)(n * k * size));
    void *k_nope = alloc(out_bytes), *v = alloc(out_bytes);
    gb->args = (mla_up_proj_args){
        .num_tokens = m, .num_heads = heads, .kv_lora_rank = k, .qk_nope_dim = HEAD_DIM,
        .v_head_dim = HEAD_DIM, .kv_c = kv_c, .kv_c_dtype = dtype, .kv_c_stride = k,
        .kv_b_proj = w, .w_dtype = dtype, .out_dtype = out_dtype,
        .k_nope = k_nope, .k_nope_token_stride = heads * HEAD_DIM, .k_nope_head_stride = HEAD_DIM,
        .v = v, .v_token_stride = heads * HEAD_DIM, .v_head_stride = HEAD_DIM};
    if (!kv_c || !w || !k_nope || !v || !fill(kv_c, dtype, m * k, threads) ||
        !fill(w, dtype, n * k, threads) ||
        !check(mla_up_proj_workspace_size(&gb->args, threads, &gb->workspace_bytes),
               "mla_up_proj_workspace_size"))
        return false;
    gb->workspace = alloc((size_t)gb->workspace_bytes);
    return gb->workspace != NULL;
}

static void gemm_bench_free(gemm_bench *gb)
{
    free((void *)gb->args.kv_c);
    free((void *)gb->args.kv_b_proj);
    free(gb->args.k_nope);
    free(gb->args.v);
    free(gb->workspace);
}

/* Whether b takes this config for prefill; says why not when it does not. */
static bool runs_config(const mla_backend_desc *b, const mla_config *cfg)
{
    mla_reasons r;
    if (!check(mla_backend_validate(b->name, MLA_OP_PREFILL, cfg, &r), "mla_backend_validate"))
        return false;
    if (r.count > 0)
        fprintf(stderr, "mla_bench: gemm skips %s: %s\n", b->name, r.text[0]);
    return r.count == 0;
}

int cmd_gemm(const options *o, const plan *p)
{
    const int64_t m = o->tokens_set ? o->tokens : GEMM_DEFAULT_TOKENS;
    const int64_t heads = o->heads_set ? o->heads : GEMM_DEFAULT_HEADS, k = o->kv_lora_rank;
    const mla_dtype dtype = o->q_dtype < 0 ? MLA_DTYPE_F32 : (mla_dtype)o->q_dtype;
    const mla_dtype out = o->out_dtype < 0 ? MLA_DTYPE_F32 : (mla_dtype)o->out_dtype;
    const double flops = 2.0 * (double)m * (double)(heads * 2 * HEAD_DIM) * (double)k;
    const mla_config cfg = {.q_dtype = dtype, .cache_dtype = dtype, .kv_lora_rank = k,
                            .num_heads = heads, .block_size = 1};
    char name[40], op[2][56];
    snprintf(name, sizeof name, "up_proj_%s%s%s", mla_dtype_name(dtype),
             out == MLA_DTYPE_F32 ? "" : "_out_", out == MLA_DTYPE_F32 ? "" : mla_dtype_name(out));
    snprintf(op[0], sizeof op[0], "%s", name);
    snprintf(op[1], sizeof op[1], "%s_packed", name);
    gemm_bench gb = {0};
    bool ok = gemm_bench_init(&gb, m, heads, k, dtype, out, most_threads(p));
    if (ok)
        print_header(o->json);
    for (int b = 0; ok && b < p->nbackends; b++) {
        if (!runs_config(p->backends[b], &cfg))
            continue;
        /* W packed ahead under this backend, as a server packs it once */
        int64_t bytes = 0;
        void *packed = NULL;
        ok = force_backend(MLA_OP_PREFILL, p->backends[b]->name) &&
             check(mla_pack_kv_b_proj_size(&gb.args, &bytes), "mla_pack_kv_b_proj_size") &&
             (packed = alloc((size_t)bytes)) != NULL &&
             check(mla_pack_kv_b_proj(&gb.args, packed, bytes, most_threads(p)),
                   "mla_pack_kv_b_proj");
        /* on AMX tiles the peak is the AMX-BF16 probe's, timed after it */
        const char *route = mla_backend_route(p->backends[b]->name, &cfg);
        const bool amx = route && strcmp(route, "amx-bf16") == 0;
        for (int t = 0; ok && t < p->nthreads; t++) {
            for (int ahead = 0; ok && ahead < 2; ahead++) {
                stats s;
                gb.threads = p->threads[t];
                gb.args.kv_b_proj_packed = ahead ? packed : NULL;
                ok = time_region(run_up_proj, &gb, o->reps, o->seconds, &s) &&
                     ran_on(p->backends[b], "up_proj");
                if (!ok)
                    break;
                row r = {.op = op[ahead], .backend = p->backends[b]->name, .probe = "separate",
                         .threads = gb.threads, .n = m, .time = s,
                         .gflops = giga_per_s(flops, s.median),
                         .peak_gflops = amx ? measure_amx_peak(gb.threads, o->reps).gflops
                                            : p->peaks[b * p->nthreads + t].gflops};
                print_row(&r, o->json);
            }
        }
        gb.args.kv_b_proj_packed = NULL;
        free(packed);
    }
    ok = force_backend(MLA_OP_PREFILL, NULL) && ok;
    gemm_bench_free(&gb);
    return ok ? 0 : 1;
}
