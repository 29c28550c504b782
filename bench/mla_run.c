/*
 * The main job (`make run`): what libmla detected on this machine, which
 * backends it has, which one each op will use, the OpenMP threads, then one
 * whole attention step of a DeepSeek-V3 layer shard through the public API,
 * as a server runs it: the scheduler's requests reordered and split, the
 * step's metadata built, the new tokens written to the paged cache, the MTP
 * decodes on the absorbed decode forward and everything else (a decode of
 * another query length, extends of cached context, fresh prompts) on the
 * prefill op, each request on the path its cost model picks.
 */
#include <mla.h>
#include <mla_backend.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One tensor-parallel shard of DeepSeek V3 (128 heads / TP 8); MTP with one
 * draft token, so decodes schedule 1 + 1 tokens (the reorder threshold). */
enum { HEADS = 16, L = 512, R = 64, P = 128, V = 128, BLOCK = 64, MTP_TOKENS = 2 };
/* The context-chunk workspace: vLLM's rule for these limits, capped at
 * CHUNK_CAP rows (a server's memory bound) so that long contexts take
 * several chunks. */
enum { REQS = 8, MAX_MODEL_LEN = 8192, CHUNK_CAP = 2048, REPS = 3 };
#define DTYPE MLA_DTYPE_BF16 /* activations, cache and weights, as served */

/* The scheduler's view of the step: tokens already cached, scheduled now,
 * the prompt's length; listed out of order, as a scheduler hands them over. */
static const struct {
    const char *what;
    int64_t computed, scheduled, prompt;
} requests[REQS] = {
    {"decode, MTP", 3000, MTP_TOKENS, 1000},
    {"prompt, fresh", 0, 700, 700},
    {"extend, chunked prompt", 4000, 512, 6000},
    {"decode (no draft)", 2200, 1, 2000},
    {"decode, MTP", 1500, MTP_TOKENS, 900},
    {"extend, short", 5000, 3, 5003},
    {"decode, MTP", 4095, MTP_TOKENS, 4000},
    {"prompt, fresh", 0, 40, 40},
};

static double seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* n random values in [-amp/2, amp/2) as bf16. */
static void *random_bf16(int64_t n, float amp, unsigned *state)
{
    float *f = malloc(sizeof(float) * (size_t)n);
    void *x = malloc(2 * (size_t)n);
    if (f && x) {
        for (int64_t i = 0; i < n; i++) {
            *state = *state * 1664525u + 1013904223u;
            f[i] = amp * ((float)(*state >> 8) / (float)(1u << 24) - 0.5f);
        }
        mla_convert(DTYPE, x, MLA_DTYPE_F32, f, n, 0);
    }
    free(f);
    return x;
}

/* The layer's weights, prepared once at load: kv_b_proj packed for the MHA
 * path, W_UK^T and W_UV for the absorbed one. */
typedef struct weights {
    void *kv_b_proj, *packed, *w_uk_t, *w_uv;
} weights;

static mla_status prepare_weights(weights *w, unsigned *seed)
{
    mla_up_proj_args u = {.num_heads = HEADS, .kv_lora_rank = L, .qk_nope_dim = P,
                          .v_head_dim = V, .w_dtype = DTYPE, .kv_c_dtype = DTYPE};
    int64_t bytes = 0;
    u.kv_b_proj = w->kv_b_proj = random_bf16(HEADS * (P + V) * L, 0.1f, seed);
    w->w_uk_t = malloc(2 * (size_t)(HEADS * P * L));
    w->w_uv = malloc(2 * (size_t)(HEADS * L * V));
    mla_status st = mla_pack_kv_b_proj_size(&u, &bytes);
    if (st != MLA_OK)
        return st;
    if (!w->kv_b_proj || !w->w_uk_t || !w->w_uv || !(w->packed = malloc((size_t)bytes)))
        return MLA_ERR_CAPACITY;
    if ((st = mla_pack_kv_b_proj(&u, w->packed, bytes, 0)) != MLA_OK)
        return st;
    return mla_prepare_weights(w->kv_b_proj, DTYPE, HEADS, L, P, V, w->w_uk_t, w->w_uv, DTYPE, 0);
}

/* A step: the requests in the order the reorder leaves them, their block
 * ids, the step's metadata, the split, the new tokens' activations (q, and
 * the latent rows kv_c | k_pe the model computed for them), the cache. */
typedef struct step {
    int32_t order[REQS];
    mla_request reqs[REQS];
    int32_t *block_ids;
    int64_t cols, tokens;
    mla_batch_metadata md;
    mla_batch_split split;
    mla_kv_cache cache;
    void *q, *latent, *out;
    int32_t context_lens[REQS], prefill_qsl[REQS + 1];
    mla_chunk_plan *plan;
} step;

static int64_t blocks_of(int64_t tokens)
{
    return (tokens + BLOCK - 1) / BLOCK;
}

/* Orders the requests, hands each its blocks (interleaved through the
 * cache, as a long-running server's free list leaves them) and builds the
 * step's metadata and its decode/prefill split. */
static mla_status plan_step(step *s)
{
    mla_request given[REQS];
    int64_t total_blocks = 0;
    s->cols = 0;
    for (int i = 0; i < REQS; i++) {
        int64_t need = blocks_of(requests[i].computed + requests[i].scheduled);
        given[i] = (mla_request){.num_computed_tokens = requests[i].computed,
                                 .num_scheduled_tokens = requests[i].scheduled,
                                 .num_prompt_tokens = requests[i].prompt,
                                 .num_block_ids = need};
        total_blocks += need;
        s->cols = need > s->cols ? need : s->cols;
    }
    s->block_ids = malloc(sizeof(int32_t) * (size_t)(REQS * s->cols));
    if (!s->block_ids)
        return MLA_ERR_CAPACITY;
    for (int i = 0; i < REQS; i++) {
        given[i].block_ids = s->block_ids + i * s->cols;
        for (int64_t c = 0; c < given[i].num_block_ids; c++)
            s->block_ids[i * s->cols + c] = (int32_t)((c * REQS + i) % total_blocks);
    }
    mla_status st = mla_reorder_batch(given, REQS, MTP_TOKENS, s->order, NULL);
    if (st != MLA_OK)
        return st;
    s->tokens = 0;
    for (int i = 0; i < REQS; i++) {
        s->reqs[i] = given[s->order[i]];
        s->tokens += s->reqs[i].num_scheduled_tokens;
    }
    s->md = (mla_batch_metadata){
        .query_start_loc = malloc(sizeof(int32_t) * (REQS + 1)),
        .seq_lens = malloc(sizeof(int32_t) * REQS),
        .positions = malloc(sizeof(int64_t) * (size_t)s->tokens),
        .slot_mapping = malloc(sizeof(int64_t) * (size_t)s->tokens),
        .slot_mapping_len = s->tokens,
        .block_table = malloc(sizeof(int32_t) * (size_t)(REQS * s->cols))};
    if (!s->md.query_start_loc || !s->md.seq_lens || !s->md.positions || !s->md.slot_mapping ||
        !s->md.block_table)
        return MLA_ERR_CAPACITY;
    const mla_block_layout layout = {.manager_block_size = BLOCK, .kernel_block_size = BLOCK,
                                     .max_blocks_per_req = s->cols, .cp_world_size = 1,
                                     .cp_rank = 0, .cp_interleave = 1};
    if ((st = mla_build_batch_metadata(s->reqs, REQS, &layout, &s->md)) != MLA_OK)
        return st;
    /* FlashMLA runs decodes of one query length: the rest go to prefill */
    if ((st = mla_split_batch(s->md.query_start_loc, REQS, MTP_TOKENS, true, &s->split)) != MLA_OK)
        return st;
    s->cache = (mla_kv_cache){.dtype = DTYPE, .num_blocks = total_blocks, .block_size = BLOCK,
                              .width = L + R};
    s->cache.data = malloc(2 * (size_t)(total_blocks * BLOCK * (L + R)));
    return s->cache.data ? MLA_OK : MLA_ERR_CAPACITY;
}

/* What earlier steps left in the cache: each request's computed tokens. */
static mla_status fill_context(step *s, unsigned *seed)
{
    for (int i = 0; i < REQS; i++) {
        const int64_t n = s->reqs[i].num_computed_tokens;
        int64_t *slots = malloc(sizeof(int64_t) * (size_t)(n > 0 ? n : 1));
        void *rows = random_bf16(n * (L + R) + 1, 2.0f, seed);
        mla_status st = slots && rows ? MLA_OK : MLA_ERR_CAPACITY;
        for (int64_t pos = 0; pos < n && st == MLA_OK; pos++)
            slots[pos] = (int64_t)s->reqs[i].block_ids[pos / BLOCK] * BLOCK + pos % BLOCK;
        if (st == MLA_OK)
            st = mla_concat_and_cache(&s->cache, rows, L + R, (char *)rows + 2 * L, L + R, DTYPE,
                                      L, R, slots, n, 0);
        free(slots);
        free(rows);
        if (st != MLA_OK)
            return st;
    }
    return MLA_OK;
}

/* The prefill part's context lengths, query_start_loc from 0 and chunk plan. */
static mla_status plan_prefill(step *s)
{
    const int64_t d = s->split.num_decodes, n = s->split.num_prefills;
    const int32_t *qsl = s->md.query_start_loc;
    for (int64_t r = 0; r <= n; r++)
        s->prefill_qsl[r] = qsl[d + r] - qsl[d];
    for (int64_t r = 0; r < n; r++)
        s->context_lens[r] = s->md.seq_lens[d + r] - (qsl[d + r + 1] - qsl[d + r]);
    int64_t W = 0;
    mla_status st = mla_chunk_workspace_tokens(MAX_MODEL_LEN, REQS, BLOCK, CHUNK_CAP, &W);
    if (st != MLA_OK)
        return st;
    return mla_chunk_plan_create(s->context_lens, s->prefill_qsl, n, W, BLOCK, L + R, DTYPE,
                                 &s->plan);
}

/* The decodes' query length: one for all of them (the split's rule). */
static int64_t decode_s_q(const step *s)
{
    return s->split.num_decodes ? s->split.num_decode_tokens / s->split.num_decodes : 1;
}

static mla_decode_forward_args decode_args(const step *s, const weights *w)
{
    const int64_t q_row = HEADS * (P + R);
    return (mla_decode_forward_args){
        .num_reqs = s->split.num_decodes, .s_q = decode_s_q(s), .num_heads = HEADS,
        .kv_lora_rank = L, .rope_dim = R, .qk_nope_dim = P, .v_head_dim = V, .scale = 0.1352f,
        .dtype = DTYPE, .q = s->q, .q_token_stride = q_row, .q_head_stride = P + R,
        .w_uk_t = w->w_uk_t, .w_uv = w->w_uv, .w_dtype = DTYPE, .out = s->out,
        .out_token_stride = HEADS * V, .cache = &s->cache, .block_table = s->md.block_table,
        .block_table_cols = s->cols, .seq_lens = s->md.seq_lens};
}

static mla_prefill_args prefill_args(const step *s, const weights *w, mla_prefill_path path)
{
    const int64_t d = s->split.num_decodes, t0 = s->split.num_decode_tokens;
    const int64_t q_row = HEADS * (P + R);
    return (mla_prefill_args){
        .num_prefills = s->split.num_prefills, .num_tokens = s->split.num_prefill_tokens,
        .num_heads = HEADS, .kv_lora_rank = L, .rope_dim = R, .qk_nope_dim = P,
        .v_head_dim = V, .scale = 0.1352f, .dtype = DTYPE, .query_start_loc = s->prefill_qsl,
        .context_lens = s->context_lens, .plan = s->plan, .cache = &s->cache,
        .block_table = s->md.block_table + d * s->cols, .block_table_cols = s->cols,
        .q = (char *)s->q + 2 * t0 * q_row, .q_token_stride = q_row, .q_head_stride = P + R,
        .kv_c = (char *)s->latent + 2 * t0 * (L + R), .kv_c_stride = L + R,
        .k_pe = (char *)s->latent + 2 * (t0 * (L + R) + L), .k_pe_stride = L + R,
        .kv_b_proj_packed = w->packed, .kv_b_proj_dtype = DTYPE, .w_uk_t = w->w_uk_t,
        .w_uv = w->w_uv, .w_dtype = DTYPE, .out = (char *)s->out + 2 * t0 * HEADS * V,
        .out_token_stride = HEADS * V, .path = path};
}

/* The step's three calls; each phase's best time over REPS runs. */
typedef struct timings {
    double cache, decode, prefill;
} timings;

static mla_status run_step(step *s, const weights *w, mla_prefill_path path, void *workspace,
                           int64_t bytes, timings *best)
{
    mla_decode_forward_args f = decode_args(s, w);
    mla_prefill_args p = prefill_args(s, w, path);
    *best = (timings){INFINITY, INFINITY, INFINITY};
    mla_status st = MLA_OK;
    for (int rep = 0; rep < REPS && st == MLA_OK; rep++) {
        double t0 = seconds();
        st = mla_concat_and_cache(&s->cache, s->latent, L + R, (char *)s->latent + 2 * L, L + R,
                                  DTYPE, L, R, s->md.slot_mapping, s->tokens, 0);
        double t1 = seconds();
        if (st == MLA_OK)
            st = mla_decode_forward(&f, workspace, bytes, 0);
        double t2 = seconds();
        if (st == MLA_OK)
            st = mla_prefill(&p, workspace, bytes, 0);
        double t3 = seconds();
        best->cache = fmin(best->cache, t1 - t0);
        best->decode = fmin(best->decode, t2 - t1);
        best->prefill = fmin(best->prefill, t3 - t2);
    }
    return st;
}

/* One workspace for both calls of the step, sized from shapes. */
static mla_status workspace_bytes(const step *s, const weights *w, int64_t *bytes)
{
    mla_decode_forward_args f = decode_args(s, w);
    mla_prefill_args p = prefill_args(s, w, MLA_PREFILL_PATH_AUTO);
    int64_t decode = 0, prefill = 0;
    mla_status st = mla_decode_forward_workspace_size(&f, 0, &decode);
    if (st == MLA_OK) {
        st = mla_prefill_workspace_size(&p, 0, &prefill);
    }
    *bytes = decode > prefill ? decode : prefill;
    return st;
}

/* Largest |a - b| over the step's outputs, and largest |a|. */
static void compare(const void *a, const void *b, int64_t n, double *diff, double *max_abs)
{
    float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
    *diff = *max_abs = NAN;
    if (x && y && mla_convert(MLA_DTYPE_F32, x, DTYPE, a, n, 0) == MLA_OK &&
        mla_convert(MLA_DTYPE_F32, y, DTYPE, b, n, 0) == MLA_OK) {
        *diff = *max_abs = 0;
        for (int64_t i = 0; i < n; i++) {
            *diff = fmax(*diff, fabs((double)x[i] - y[i]));
            *max_abs = fmax(*max_abs, fabs((double)x[i]));
        }
    }
    free(x);
    free(y);
}

static void print_plan(const step *s, const weights *w)
{
    mla_prefill_args p = prefill_args(s, w, MLA_PREFILL_PATH_AUTO);
    printf("\nserver step (DeepSeek-V3 shard: %d heads, L=%d R=%d P=%d V=%d; bf16 activations, "
           "cache and weights; block size %d):\n", HEADS, L, R, P, V, BLOCK);
    for (int i = 0; i < REQS; i++) {
        const mla_request *r = &s->reqs[i];
        const bool decode = i < s->split.num_decodes;
        const bool absorbed = !decode && mla_prefill_choose_path(&p, i - s->split.num_decodes) ==
                                             MLA_PREFILL_PATH_ABSORBED;
        printf("  %-22s %5lld cached + %3lld new -> %s\n", requests[s->order[i]].what,
               (long long)r->num_computed_tokens, (long long)r->num_scheduled_tokens,
               decode ? "decode forward" : absorbed ? "prefill, absorbed path"
                                                    : "prefill, MHA path");
    }
    mla_chunk_plan_info info;
    mla_chunk_plan_info_get(s->plan, &info);
    printf("  %lld tokens: %lld decode requests of %lld tokens (decodes run one query length; "
           "the rest go to prefill), %lld prefill tokens; a plan of %lld context chunks of up to "
           "%lld rows\n",
           (long long)s->tokens, (long long)s->split.num_decodes, (long long)decode_s_q(s),
           (long long)s->split.num_prefill_tokens, (long long)info.num_chunks,
           (long long)info.workspace_tokens);
}

static mla_status server_step(void)
{
    unsigned seed = 1;
    step s = {0};
    weights w = {0};
    void *workspace = NULL, *mha_out = NULL;
    int64_t bytes = 0;
    timings t, t_mha;
    mla_status st = prepare_weights(&w, &seed);
    if (st == MLA_OK && (st = plan_step(&s)) == MLA_OK && (st = fill_context(&s, &seed)) == MLA_OK &&
        (st = plan_prefill(&s)) == MLA_OK) {
        s.q = random_bf16(s.tokens * HEADS * (P + R), 2.0f, &seed);
        s.latent = random_bf16(s.tokens * (L + R), 2.0f, &seed);
        s.out = malloc(2 * (size_t)(s.tokens * HEADS * V));
        mha_out = malloc(2 * (size_t)(s.tokens * HEADS * V));
        if ((st = workspace_bytes(&s, &w, &bytes)) == MLA_OK &&
            (!s.q || !s.latent || !s.out || !mha_out || !(workspace = malloc((size_t)bytes))))
            st = MLA_ERR_CAPACITY;
    }
    if (st == MLA_OK) {
        print_plan(&s, &w);
        /* every prefill request on the MHA path first, for the comparison */
        st = run_step(&s, &w, MLA_PREFILL_PATH_MHA, workspace, bytes, &t_mha);
    }
    if (st == MLA_OK) {
        memcpy(mha_out, s.out, 2 * (size_t)(s.tokens * HEADS * V));
        st = run_step(&s, &w, MLA_PREFILL_PATH_AUTO, workspace, bytes, &t);
    }
    if (st == MLA_OK) {
        double diff, max_abs;
        compare(s.out, mha_out, s.tokens * HEADS * V, &diff, &max_abs);
        printf("  cache write %.2f ms, decode forward %.2f ms, prefill %.2f ms (all on the MHA "
               "path: %.2f ms); step %.2f ms on %d threads\n", t.cache * 1e3, t.decode * 1e3,
               t.prefill * 1e3, t_mha.prefill * 1e3, (t.cache + t.decode + t.prefill) * 1e3,
               mla_default_threads());
        printf("  outputs: max |out| %.4f; the chosen paths and the MHA path differ by at most "
               "%.2g (bf16)\n", max_abs, diff);
    }
    mla_chunk_plan_destroy(s.plan);
    void *bufs[] = {w.kv_b_proj, w.packed, w.w_uk_t, w.w_uv, s.block_ids, s.md.query_start_loc,
                    s.md.seq_lens, s.md.positions, s.md.slot_mapping, s.md.block_table,
                    s.cache.data, s.q, s.latent, s.out, mha_out, workspace};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);
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
    if (st == MLA_OK && (st = server_step()) != MLA_OK)
        printf("server step: %s: %s\n", mla_status_str(st), mla_last_error());
    return st == MLA_OK ? 0 : 1;
}
