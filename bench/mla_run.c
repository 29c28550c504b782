/*
 * The main job (`make run`): what libmla detected on this machine, which
 * backends it has, which one each op will use, the OpenMP threads, and one
 * absorbed decode step of a DeepSeek-V3 layer shard through the public API
 * (cache write, weight preparation, mla_decode_forward).
 */
#include <mla.h>
#include <mla_backend.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* One tensor-parallel shard of DeepSeek V3 (128 heads / TP 8). */
enum { HEADS = 16, L = 512, R = 64, P = 128, V = 128, BLOCK = 64, REQS = 4, CTX = 2048 };

static float uniform(unsigned *state)
{
    *state = *state * 1664525u + 1013904223u;
    return (float)(*state >> 8) / (float)(1u << 24) - 0.5f;
}

static double seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Writes REQS requests of CTX tokens into a bf16 cache, prepares bf16
 * weights and times one decode step with f32 activations. */
static mla_status decode_step(void)
{
    const int64_t blocks_per_req = CTX / BLOCK, tokens = REQS * CTX;
    unsigned seed = 1;
    float *kv_c = malloc(sizeof(float) * tokens * L), *k_pe = malloc(sizeof(float) * tokens * R);
    float *kv_b = malloc(sizeof(float) * HEADS * (P + V) * L), *q = malloc(sizeof(float) * REQS * HEADS * (P + R));
    float *out = malloc(sizeof(float) * REQS * HEADS * V), *lse = malloc(sizeof(float) * REQS * HEADS);
    uint16_t *cache_data = malloc(sizeof(uint16_t) * tokens * (L + R));
    uint16_t *w_uk_t = malloc(sizeof(uint16_t) * HEADS * P * L), *w_uv = malloc(sizeof(uint16_t) * HEADS * L * V);
    int64_t *slots = malloc(sizeof(int64_t) * tokens);
    int32_t table[REQS * CTX / BLOCK], lens[REQS];
    for (int64_t i = 0; i < tokens * L; i++)
        kv_c[i] = uniform(&seed);
    for (int64_t i = 0; i < tokens * R; i++)
        k_pe[i] = uniform(&seed);
    for (int64_t i = 0; i < HEADS * (P + V) * L; i++)
        kv_b[i] = 0.05f * uniform(&seed);
    for (int64_t i = 0; i < REQS * HEADS * (P + R); i++)
        q[i] = uniform(&seed);
    for (int64_t b = 0; b < REQS; b++) {
        lens[b] = (int32_t)(CTX - 100 * b);
        for (int64_t c = 0; c < blocks_per_req; c++) /* request b's blocks, interleaved */
            table[b * blocks_per_req + c] = (int32_t)(c * REQS + b);
    }
    for (int64_t t = 0; t < tokens; t++) {
        int64_t b = t / CTX, pos = t % CTX;
        slots[t] = table[b * blocks_per_req + pos / BLOCK] * (int64_t)BLOCK + pos % BLOCK;
    }
    mla_kv_cache cache = {.data = cache_data, .dtype = MLA_DTYPE_BF16, .num_blocks = tokens / BLOCK,
                          .block_size = BLOCK, .width = L + R};
    mla_decode_forward_args f = {
        .qk_nope_dim = P, .v_head_dim = V, .q = q, .q_token_stride = HEADS * (P + R),
        .q_head_stride = P + R, .w_uk_t = w_uk_t, .w_uv = w_uv, .w_dtype = MLA_DTYPE_BF16,
        .out = out, .out_token_stride = HEADS * V,
        .attn = {.num_reqs = REQS, .s_q = 1, .num_heads = HEADS, .kv_lora_rank = L, .rope_dim = R,
                 .scale = 0.1352f, .q_dtype = MLA_DTYPE_F32, .cache = &cache, .block_table = table,
                 .block_table_cols = blocks_per_req, .seq_lens = lens, .lse = lse}};
    int64_t bytes = 0;
    void *workspace = NULL;
    mla_status st = mla_concat_and_cache(&cache, kv_c, L, k_pe, R, MLA_DTYPE_F32, L, R, slots, tokens, 0);
    if (st == MLA_OK)
        st = mla_prepare_weights(kv_b, MLA_DTYPE_F32, HEADS, L, P, V, w_uk_t, w_uv, MLA_DTYPE_BF16, 0);
    if (st == MLA_OK)
        st = mla_decode_forward_workspace_size(&f, 0, &bytes);
    if (st == MLA_OK && !(workspace = malloc((size_t)bytes)))
        st = MLA_ERR_CAPACITY;
    double best = INFINITY;
    for (int rep = 0; rep < 5 && st == MLA_OK; rep++) {
        double t0 = seconds();
        st = mla_decode_forward(&f, workspace, bytes, 0);
        best = fmin(best, seconds() - t0);
    }
    if (st == MLA_OK) {
        double sum = 0.0;
        for (int64_t i = 0; i < REQS * HEADS * V; i++)
            sum += fabs(out[i]);
        printf("\ndecode step (DeepSeek-V3 shard: %d heads, L=%d R=%d P=%d V=%d; %d requests of "
               "%d..%d cached tokens, bf16 cache and weights, f32 q):\n  %.3f ms on %s, "
               "mean |out| %.4f, lse[0] %.4f\n", HEADS, L, R, P, V, REQS, lens[REQS - 1], CTX,
               best * 1e3, mla_last_backend(), sum / (REQS * HEADS * V), (double)lse[0]);
    }
    free(kv_c), free(k_pe), free(kv_b), free(q), free(out), free(lse), free(cache_data);
    free(w_uk_t), free(w_uv), free(slots), free(workspace);
    return st;
}

int main(void)
{
    mla_status st = mla_init();
    if (st != MLA_OK)
        printf("init: %s: %s\n", mla_status_str(st), mla_last_error());

    char caps[256];
    mla_caps_format(mla_cpu_caps_detected(), caps, sizeof caps);
    printf("cpu capabilities: %s\n", caps[0] ? caps : "(none)");
    if (mla_cpu_caps() != mla_cpu_caps_detected()) {
        mla_caps_format(mla_cpu_caps(), caps, sizeof caps);
        printf("in use (MLA_MAX_ISA): %s\n", caps[0] ? caps : "(none)");
    }

    mla_config cfg = mla_config_default();
    printf("\nbackends (priority order), checked against the DeepSeek-V3 decode config\n"
           "(q %s, cache %s, L=%lld, R=%lld, heads=%lld, block_size=%lld):\n",
           mla_dtype_name(cfg.q_dtype), mla_dtype_name(cfg.cache_dtype), (long long)cfg.kv_lora_rank,
           (long long)cfg.rope_dim, (long long)cfg.num_heads, (long long)cfg.block_size);
    for (int i = 0; i < mla_backend_count(); i++) {
        const mla_backend_desc *b = mla_backend_at(i);
        mla_reasons why;
        mla_backend_validate(b->name, MLA_OP_DECODE, &cfg, &why);
        printf("  %-12s isa %-12s priority %2d  %s", b->name, b->isa, b->priority,
               why.count ? "not valid:" : "valid");
        for (int r = 0; r < why.count; r++)
            printf("%s %s", r ? ";" : "", why.text[r]);
        printf("\n");
    }

    printf("\nbackend per op:\n");
    for (int op = 0; op < MLA_OP_COUNT; op++) {
        const mla_backend_desc *b;
        const mla_config *c = op == MLA_OP_CONVERT ? NULL : &cfg;
        if (mla_select_backend((mla_op)op, c, &b) == MLA_OK)
            printf("  %-8s -> %s (%s micro-kernels)\n", mla_op_name((mla_op)op), b->name, b->isa);
        else
            printf("  %-8s -> error: %s\n", mla_op_name((mla_op)op), mla_last_error());
    }
    printf("\nOpenMP threads: %d\n", mla_default_threads());
    if (st == MLA_OK && (st = decode_step()) != MLA_OK)
        printf("decode step: %s: %s\n", mla_status_str(st), mla_last_error());
    return st == MLA_OK ? 0 : 1;
}
