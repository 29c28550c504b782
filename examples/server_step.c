/*
 * How an inference server drives libmla: the attention of a small MLA model
 * (two layers of one DeepSeek-V3-shaped shard) over a paged bf16 latent
 * cache, for three scheduler steps of a mixed batch. Copy its shape:
 *
 *   at load     each layer's cache (mla_kv_cache_shape) and weights, prepared
 *               once (mla_pack_kv_b_proj for prefill, mla_prepare_weights
 *               for the absorbed decode); one workspace and one context
 *               gather buffer for the server's lifetime, sized from its
 *               limits
 *   each step   the scheduler's requests -> mla_reorder_batch (decodes first)
 *               -> mla_build_batch_metadata (block table, slot mapping,
 *               seq_lens) -> mla_split_batch -> a chunk plan for the
 *               prefills' cached context (mla_chunk_plan_create_lean)
 *   each layer  mla_concat_and_cache (the step's new latent rows into the
 *               cache), mla_decode_forward for the decodes, mla_prefill for
 *               the rest
 *
 * Every call's status is checked; on failure mla_last_error() says why.
 * The model around attention is a stand-in: q and the latent rows of a token
 * are a function of (layer, request, position), so the naive reference at
 * the end can recompute any of them and check every output of every step.
 *
 * Built against an installed libmla (README.md, "Using it from a server"):
 *   cc examples/server_step.c -o server_step $(pkg-config --cflags --libs mla) -lm
 * In this repository `make` builds build/examples/server_step and
 * `make test` runs it.
 */
#define _POSIX_C_SOURCE 200809L /* clock_gettime, under -std=c11 as well */

#include <mla.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* One tensor-parallel rank's shard of a DeepSeek-V3-shaped layer: the latent
 * width L, the rope width R, the per-head no-rope query width P and value
 * width V are the model's; HEADS is what this rank holds (4 of 128 keeps
 * the reference check quick). */
enum { LAYERS = 2, HEADS = 4, L = 512, R = 64, P = 128, V = 128 };
#define DTYPE MLA_DTYPE_BF16 /* activations, cache and weights, as served */

/* The server's limits, fixed at startup: everything below is sized from
 * them once. A decode is one new token (no speculative drafts), so the
 * reorder and split threshold is 1. */
enum {
    BLOCK = 16,              /* tokens per cache block */
    MAX_REQS = 8,            /* requests in a step (vLLM's max_num_seqs) */
    MAX_MODEL_LEN = 256,     /* tokens of one request */
    MAX_BATCHED_TOKENS = 256, /* new tokens in a step */
    MAX_BLOCKS_PER_REQ = MAX_MODEL_LEN / BLOCK,
    NUM_BLOCKS = MAX_REQS * MAX_BLOCKS_PER_REQ,
    DECODE_THRESHOLD = 1,
};

/* A failed call stops the example with libmla's reason; a server would fail
 * the step instead. Nothing was written by the failed call. */
#define CHECK(call)                                                                      \
    do {                                                                                 \
        mla_status st_ = (call);                                                         \
        if (st_ != MLA_OK) {                                                             \
            fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #call,            \
                    mla_status_str(st_), mla_last_error());                              \
            exit(1);                                                                     \
        }                                                                                \
    } while (0)

/* Memory is the caller's; 64-byte alignment reads fastest (any works). */
static void *alloc(size_t bytes)
{
    void *p = aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", bytes);
        exit(1);
    }
    return p;
}

static double seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- the stand-in model ------------------------------------------------- */

/* A value in [-1, 1) from a hash of its coordinates: k / 128 for an integer
 * k, which bf16 holds exactly, so the reference sees what the kernels see. */
static float model_value(uint32_t kind, uint32_t a, uint32_t b, uint32_t c)
{
    uint32_t h = kind * 0x9e3779b1u ^ a * 0x85ebca77u ^ b * 0xc2b2ae3du ^ c * 0x27d4eb2fu;
    h ^= h >> 15;
    h *= 0x2c1b3c6du;
    h ^= h >> 12;
    h *= 0x297a2d39u;
    h ^= h >> 15;
    return (float)((int)(h >> 24) - 128) / 128.0f;
}

/* Query element d < P + R of head h (q_nope, then q_pe after RoPE), the
 * latent row element d < L + R (kv_c, then k_pe) of a request's token at
 * position pos, and kv_b_proj [H*(P+V), L] as nn.Linear stores it. Powers
 * of two scale them to attention-like magnitudes, keeping them exact. */
static float model_q(int layer, int req, int64_t pos, int h, int d)
{
    return 4.0f * model_value(1, (uint32_t)(layer * 64 + req), (uint32_t)pos, (uint32_t)(h * 1024 + d));
}

static float model_latent(int layer, int req, int64_t pos, int d)
{
    return model_value(2, (uint32_t)(layer * 64 + req), (uint32_t)pos, (uint32_t)d);
}

static float model_weight(int layer, int row, int col)
{
    return model_value(3, (uint32_t)layer, (uint32_t)row, (uint32_t)col) / 16.0f;
}

/* ---- what the server keeps ------------------------------------------------ */

/* One layer: its paged cache [NUM_BLOCKS, BLOCK, L + R] and its weights in
 * the two forms the paths read. Every layer's cache is addressed by the same
 * block ids, so one step's metadata serves all layers. */
typedef struct layer {
    mla_kv_cache cache;
    void *kv_b_proj_packed; /* prefill's MHA path: kv_b_proj packed once */
    void *w_uk_t, *w_uv;    /* the absorbed path and decode: W_UK^T, W_UV */
} layer;

static void load_layer(layer *ly, int index)
{
    /* the cache: shape, bytes and alignment from libmla */
    int64_t shape[3], bytes, alignment;
    CHECK(mla_kv_cache_shape(NUM_BLOCKS, BLOCK, L + R, DTYPE, shape, &bytes, &alignment));
    ly->cache = (mla_kv_cache){.data = alloc((size_t)bytes), .dtype = DTYPE,
                               .num_blocks = shape[0], .block_size = shape[1], .width = shape[2]};

    /* the checkpoint's kv_b_proj, in f32 here and bf16 as served */
    const int64_t n = (int64_t)HEADS * (P + V) * L;
    float *w = alloc(sizeof(float) * (size_t)n);
    for (int row = 0; row < HEADS * (P + V); row++)
        for (int col = 0; col < L; col++)
            w[(int64_t)row * L + col] = model_weight(index, row, col);
    void *kv_b_proj = alloc(2 * (size_t)n);
    CHECK(mla_convert(DTYPE, kv_b_proj, MLA_DTYPE_F32, w, n, 0));

    /* Packed once at load, so that mla_prefill does not pack it again for
     * the new tokens and for every context chunk. The packing fits the
     * prefill backend selected now: force backends before loading. */
    mla_up_proj_args pack = {.num_heads = HEADS, .kv_lora_rank = L, .qk_nope_dim = P,
                             .v_head_dim = V, .kv_b_proj = kv_b_proj, .w_dtype = DTYPE,
                             .kv_c_dtype = DTYPE};
    CHECK(mla_pack_kv_b_proj_size(&pack, &bytes));
    ly->kv_b_proj_packed = alloc((size_t)bytes);
    CHECK(mla_pack_kv_b_proj(&pack, ly->kv_b_proj_packed, bytes, 0));

    /* W_UK^T [H, P, L] and W_UV [H, L, V] for the absorbed forward */
    ly->w_uk_t = alloc(2 * (size_t)HEADS * P * L);
    ly->w_uv = alloc(2 * (size_t)HEADS * L * V);
    CHECK(mla_prepare_weights(kv_b_proj, DTYPE, HEADS, L, P, V, ly->w_uk_t, ly->w_uv, DTYPE, 0));

    /* neither path reads kv_b_proj itself any more */
    free(kv_b_proj);
    free(w);
}

/* A request as the server tracks it: its cache blocks grow as it does. */
typedef struct request {
    const char *name;
    int64_t prompt_len, computed; /* computed: tokens already in the cache */
    int32_t blocks[MAX_BLOCKS_PER_REQ];
    int64_t num_blocks;
} request;

/* Free cache blocks, a stack. Requests grow and finish in any order, so a
 * request's blocks are rarely adjacent: here they interleave as requests
 * grow from step to step. */
typedef struct block_pool {
    int32_t free[NUM_BLOCKS];
    int64_t count;
} block_pool;

static void grow_blocks(request *r, int64_t tokens, block_pool *pool)
{
    while (r->num_blocks * BLOCK < tokens) {
        if (pool->count == 0 || r->num_blocks == MAX_BLOCKS_PER_REQ) {
            fprintf(stderr, "%s: no cache block left for %lld tokens\n", r->name, (long long)tokens);
            exit(1);
        }
        r->blocks[r->num_blocks++] = pool->free[--pool->count];
    }
}

/* ---- a step ------------------------------------------------------------------ */

/* The step's batch as the attention calls see it. */
typedef struct step {
    int64_t num_reqs;
    int32_t order[MAX_REQS];        /* batch position -> index into the server's requests */
    mla_request batch[MAX_REQS];    /* in that order */
    mla_batch_metadata md;          /* query_start_loc, seq_lens, positions, slots, block table */
    mla_batch_split split;          /* the first num_decodes requests decode */
    int32_t prefill_qsl[MAX_REQS + 1], context_lens[MAX_REQS];
    mla_chunk_plan *plan;           /* the prefills' context chunks */
    int64_t chunk_tokens;           /* W, the context gather buffer's rows */
} step;

/* The buffers a step's tokens pass through, sized for MAX_BATCHED_TOKENS. */
typedef struct activations {
    float *staging;             /* the stand-in model's f32 values */
    void *q;                    /* [T, H, P + R]: q_nope then q_pe, per head */
    void *latent;               /* [T, L + R]: kv_c then k_pe, per token */
    void *out;                  /* [T, H * V] */
    void *workspace;            /* every call's scratch */
    int64_t workspace_bytes;
    void *context_rows;         /* [W, L + R]: prefill gathers cached context here */
} activations;

/* The step's metadata, from what the scheduler decided: scheduled[i] new
 * tokens for reqs[i] (0: not in this step). */
static void plan_step(step *s, request *reqs, const int64_t *scheduled, int64_t count,
                      block_pool *pool)
{
    mla_request given[MAX_REQS];
    int32_t given_index[MAX_REQS];
    s->num_reqs = 0;
    for (int64_t i = 0; i < count; i++) {
        if (scheduled[i] == 0)
            continue;
        request *r = &reqs[i];
        grow_blocks(r, r->computed + scheduled[i], pool);
        given_index[s->num_reqs] = (int32_t)i;
        given[s->num_reqs++] = (mla_request){.num_computed_tokens = r->computed,
                                             .num_scheduled_tokens = scheduled[i],
                                             .num_prompt_tokens = r->prompt_len,
                                             .block_ids = r->blocks,
                                             .num_block_ids = r->num_blocks};
    }

    /* decode -> short extend -> long extend -> prefill, as the split and
     * mla_prefill expect (prefills with cached context first) */
    int32_t new_order[MAX_REQS];
    CHECK(mla_reorder_batch(given, s->num_reqs, DECODE_THRESHOLD, new_order, NULL));
    for (int64_t i = 0; i < s->num_reqs; i++) {
        s->batch[i] = given[new_order[i]];
        s->order[i] = given_index[new_order[i]];
    }

    /* Block table, slot mapping (where each new token's latent row goes),
     * seq_lens and positions. The cache's block ids are its blocks: the
     * manager and kernel block sizes are one. slot_mapping_len stays at the
     * buffer's length; entries past the step's tokens are -1 (padding). */
    const mla_block_layout layout = {.manager_block_size = BLOCK, .kernel_block_size = BLOCK,
                                     .max_blocks_per_req = MAX_BLOCKS_PER_REQ};
    s->md.slot_mapping_len = MAX_BATCHED_TOKENS;
    CHECK(mla_build_batch_metadata(s->batch, s->num_reqs, &layout, &s->md));
    CHECK(mla_split_batch(s->md.query_start_loc, s->num_reqs, DECODE_THRESHOLD, true, &s->split));

    /* The prefills' part of the batch counted from their first token, and
     * the context each had cached before this step. One chunk plan serves
     * every layer: a lean one (no token_to_seq, no buffer of its own: a few
     * hundred bytes) that chunks the context through the server's
     * context_rows. */
    const int64_t d = s->split.num_decodes, n = s->split.num_prefills;
    const int32_t *qsl = s->md.query_start_loc;
    for (int64_t r = 0; r <= n; r++)
        s->prefill_qsl[r] = qsl[d + r] - qsl[d];
    for (int64_t r = 0; r < n; r++)
        s->context_lens[r] = s->md.seq_lens[d + r] - (qsl[d + r + 1] - qsl[d + r]);
    CHECK(mla_chunk_plan_create_lean(s->context_lens, s->prefill_qsl, n, s->chunk_tokens, BLOCK, 0,
                                     DTYPE, &s->plan));
}

/* The scale on q.k: 1/sqrt of the query head width (DeepSeek's YaRN factor
 * would multiply it). */
static float softmax_scale(void)
{
    return 1.0f / sqrtf((float)(P + R));
}

static mla_decode_forward_args decode_args(const step *s, const layer *ly, const activations *a)
{
    return (mla_decode_forward_args){
        .num_reqs = s->split.num_decodes,
        .s_q = s->split.num_decodes ? s->split.num_decode_tokens / s->split.num_decodes : 1,
        .num_heads = HEADS, .kv_lora_rank = L, .rope_dim = R, .qk_nope_dim = P, .v_head_dim = V,
        .scale = softmax_scale(), .dtype = DTYPE,
        .q = a->q, .q_token_stride = HEADS * (P + R), .q_head_stride = P + R,
        .w_uk_t = ly->w_uk_t, .w_uv = ly->w_uv, .w_dtype = DTYPE,
        .out = a->out, .out_token_stride = HEADS * V,
        .cache = &ly->cache, .block_table = s->md.block_table,
        .block_table_cols = MAX_BLOCKS_PER_REQ, .seq_lens = s->md.seq_lens};
}

/* The prefills are the batch after the decodes: their rows of the block
 * table, their tokens of q, latent and out. */
static mla_prefill_args prefill_args(const step *s, const layer *ly, const activations *a)
{
    const int64_t t0 = s->split.num_decode_tokens, d = s->split.num_decodes;
    const int64_t q_row = HEADS * (P + R), elem = mla_dtype_size(DTYPE);
    return (mla_prefill_args){
        .num_prefills = s->split.num_prefills, .num_tokens = s->split.num_prefill_tokens,
        .num_heads = HEADS, .kv_lora_rank = L, .rope_dim = R, .qk_nope_dim = P, .v_head_dim = V,
        .scale = softmax_scale(), .dtype = DTYPE,
        .query_start_loc = s->prefill_qsl, .context_lens = s->context_lens, .plan = s->plan,
        .context_workspace = a->context_rows, .cache = &ly->cache, .block_table = s->md.block_table + d * MAX_BLOCKS_PER_REQ,
        .block_table_cols = MAX_BLOCKS_PER_REQ,
        .q = (char *)a->q + elem * t0 * q_row, .q_token_stride = q_row, .q_head_stride = P + R,
        .kv_c = (char *)a->latent + elem * t0 * (L + R), .kv_c_stride = L + R,
        .k_pe = (char *)a->latent + elem * (t0 * (L + R) + L), .k_pe_stride = L + R,
        .kv_b_proj_packed = ly->kv_b_proj_packed, .kv_b_proj_dtype = DTYPE,
        .w_uk_t = ly->w_uk_t, .w_uv = ly->w_uv, .w_dtype = DTYPE,
        .out = (char *)a->out + elem * t0 * HEADS * V, .out_token_stride = HEADS * V,
        .path = MLA_PREFILL_PATH_AUTO};
}

/* The stand-in for the model's projections before attention: q and the
 * latent row (kv_c | k_pe) of every new token, in the batch's order. */
static void model_inputs(int index, const step *s, activations *a)
{
    const int64_t T = s->md.num_actual_tokens;
    float *q = a->staging, *latent = a->staging + T * HEADS * (P + R);
    for (int64_t i = 0; i < s->num_reqs; i++)
        for (int64_t t = s->md.query_start_loc[i]; t < s->md.query_start_loc[i + 1]; t++) {
            const int64_t pos = s->md.positions[t];
            for (int h = 0; h < HEADS; h++)
                for (int d = 0; d < P + R; d++)
                    q[(t * HEADS + h) * (P + R) + d] = model_q(index, s->order[i], pos, h, d);
            for (int d = 0; d < L + R; d++)
                latent[t * (L + R) + d] = model_latent(index, s->order[i], pos, d);
        }
    CHECK(mla_convert(DTYPE, a->q, MLA_DTYPE_F32, q, T * HEADS * (P + R), 0));
    CHECK(mla_convert(DTYPE, a->latent, MLA_DTYPE_F32, latent, T * (L + R), 0));
}

/* The backends that ran a step's decode and prefill (mla_last_backend()
 * names the calling thread's last op, in a buffer the next op reuses). */
typedef struct ran_on {
    char decode[32], prefill[32];
} ran_on;

/* One layer's attention for the step. The cache write comes first: decode
 * and prefill both read this step's tokens from the cache. */
static void attention(const step *s, layer *ly, activations *a, ran_on *ran)
{
    const int64_t elem = mla_dtype_size(DTYPE);
    CHECK(mla_concat_and_cache(&ly->cache, a->latent, L + R, (char *)a->latent + elem * L, L + R,
                               DTYPE, L, R, s->md.slot_mapping, s->md.num_actual_tokens, 0));
    if (s->split.num_decodes > 0) {
        mla_decode_forward_args d = decode_args(s, ly, a);
        CHECK(mla_decode_forward(&d, a->workspace, a->workspace_bytes, 0));
        snprintf(ran->decode, sizeof ran->decode, "%s", mla_last_backend());
    }
    if (s->split.num_prefills > 0) {
        mla_prefill_args p = prefill_args(s, ly, a);
        CHECK(mla_prefill(&p, a->workspace, a->workspace_bytes, 0));
        snprintf(ran->prefill, sizeof ran->prefill, "%s", mla_last_backend());
    }
}

/* ---- the reference: not part of a server ------------------------------------ */

/* Head h of the token at position pos, in double, from the model's
 * definition: with W = kv_b_proj and c_j = the request's latent row j,
 *   score_j = scale * (q_nope . (W_UK c_j[0:L]) + q_pe . c_j[L:L+R]), j <= pos
 *   out     = W_UV (sum_j softmax(score)_j c_j[0:L])
 * W_UK c_j is never formed: q_nope W_UK is one row for every j. */
static void reference_row(const float *w, const float *c, const float *q, int64_t pos, int h,
                          double out[V])
{
    static double ql[L], o_lat[L], score[MAX_MODEL_LEN];
    for (int l = 0; l < L; l++) {
        ql[l] = o_lat[l] = 0;
        for (int p = 0; p < P; p++)
            ql[l] += (double)q[p] * w[(int64_t)(h * (P + V) + p) * L + l];
    }
    double max_score = -INFINITY, sum = 0;
    for (int64_t j = 0; j <= pos; j++) {
        const float *row = c + j * (L + R);
        double dot = 0;
        for (int l = 0; l < L; l++)
            dot += ql[l] * row[l];
        for (int e = 0; e < R; e++)
            dot += (double)q[P + e] * row[L + e];
        score[j] = softmax_scale() * dot;
        max_score = fmax(max_score, score[j]);
    }
    for (int64_t j = 0; j <= pos; j++) {
        const double weight = exp(score[j] - max_score);
        sum += weight;
        for (int l = 0; l < L; l++)
            o_lat[l] += weight * c[j * (L + R) + l];
    }
    for (int v = 0; v < V; v++) {
        out[v] = 0;
        for (int l = 0; l < L; l++)
            out[v] += o_lat[l] / sum * w[(int64_t)(h * (P + V) + P + v) * L + l];
    }
}

/* Every output row of one layer's step against the reference: the largest
 * difference goes into *err (if larger), the largest |out| is returned. */
static double check_layer(int index, const step *s, const activations *a, double *err)
{
    const int64_t T = s->md.num_actual_tokens;
    float *got = a->staging;
    CHECK(mla_convert(MLA_DTYPE_F32, got, DTYPE, a->out, T * HEADS * V, 0));
    float *w = alloc(sizeof(float) * HEADS * (P + V) * L);
    float *c = alloc(sizeof(float) * MAX_MODEL_LEN * (L + R));
    float q[P + R];
    double out[V], largest = 0;
    for (int row = 0; row < HEADS * (P + V); row++)
        for (int l = 0; l < L; l++)
            w[(int64_t)row * L + l] = model_weight(index, row, l);
    for (int64_t i = 0; i < s->num_reqs; i++) {
        const int req = s->order[i];
        for (int64_t j = 0; j < s->md.seq_lens[i]; j++)
            for (int d = 0; d < L + R; d++)
                c[j * (L + R) + d] = model_latent(index, req, j, d);
        for (int64_t t = s->md.query_start_loc[i]; t < s->md.query_start_loc[i + 1]; t++)
            for (int h = 0; h < HEADS; h++) {
                const int64_t pos = s->md.positions[t];
                for (int d = 0; d < P + R; d++)
                    q[d] = model_q(index, req, pos, h, d);
                reference_row(w, c, q, pos, h, out);
                for (int v = 0; v < V; v++) {
                    const double diff = fabs(out[v] - got[(t * HEADS + h) * V + v]);
                    if (!(diff <= *err)) /* a NaN too, which fmax would drop */
                        *err = diff;
                    if (fabs(out[v]) > largest)
                        largest = fabs(out[v]);
                }
            }
    }
    free(w);
    free(c);
    return largest;
}

/* ---- the server ------------------------------------------------------------ */

/* What the scheduler hands over: the tokens each request has scheduled at
 * each step (0: not in the batch), in arrival order. Step 1 prefills three
 * prompts, two of them in part (chunked prefill); step 2 mixes a decode, an
 * extend of each partial prompt and a new prompt; step 3 decodes them all. */
enum { STEPS = 3, NUM_REQS = 4 };
static const struct {
    const char *name;
    int64_t prompt_len, scheduled[STEPS];
} schedule[NUM_REQS] = {
    {"prompt in 2 chunks", 214, {64, 150, 1}},
    {"long prompt, 3 left", 153, {150, 3, 1}},
    {"short prompt", 23, {23, 1, 1}},
    {"prompt at step 2", 9, {0, 9, 1}},
};

/* The bf16 tolerance the test suites hold libmla to against double
 * precision, relative to the largest |out|. */
#define TOLERANCE 1e-2

static const char *region_name(const step *s, int64_t i)
{
    const mla_request *r = &s->batch[i];
    if (i < s->split.num_decodes)
        return "decode";
    if (r->num_computed_tokens == 0)
        return "prefill, no context";
    return "prefill, cached context";
}

int main(void)
{
    /* Optional (the first call initializes), but it reports a malformed
     * MLA_* environment variable at startup rather than at the first step. */
    CHECK(mla_init());

    layer layers[LAYERS];
    for (int i = 0; i < LAYERS; i++)
        load_layer(&layers[i], i);

    /* Metadata buffers for the largest step. */
    step s = {.md = {.query_start_loc = alloc(sizeof(int32_t) * (MAX_REQS + 1)),
                     .seq_lens = alloc(sizeof(int32_t) * MAX_REQS),
                     .positions = alloc(sizeof(int64_t) * MAX_BATCHED_TOKENS),
                     .slot_mapping = alloc(sizeof(int64_t) * MAX_BATCHED_TOKENS),
                     .block_table = alloc(sizeof(int32_t) * MAX_REQS * MAX_BLOCKS_PER_REQ)}};
    /* The context-chunk workspace's rows: vLLM's rule for these limits. */
    CHECK(mla_chunk_workspace_tokens(MAX_MODEL_LEN, MAX_REQS, BLOCK, 0, &s.chunk_tokens));

    activations a = {
        .staging = alloc(sizeof(float) * MAX_BATCHED_TOKENS * (HEADS * (P + R) + L + R)),
        .q = alloc(2 * (size_t)MAX_BATCHED_TOKENS * HEADS * (P + R)),
        .latent = alloc(2 * (size_t)MAX_BATCHED_TOKENS * (L + R)),
        .out = alloc(2 * (size_t)MAX_BATCHED_TOKENS * HEADS * V)};

    /* One workspace for the server's lifetime, shared by decode and prefill
     * (they run one after the other): each bound covers every call within
     * the server's limits. Threads 0 here and in the calls: OMP_NUM_THREADS's
     * count. And one buffer for the prefills' context chunks, W rows of the
     * cache's width. */
    const mla_decode_limits decode_limits = {
        .max_reqs = MAX_REQS, .max_s_q = DECODE_THRESHOLD, .max_seq_len = MAX_MODEL_LEN,
        .num_heads = HEADS, .kv_lora_rank = L, .rope_dim = R, .qk_nope_dim = P, .v_head_dim = V,
        .q_dtype = DTYPE, .max_threads = 0};
    const mla_prefill_limits prefill_limits = {
        .max_prefills = MAX_REQS, .max_tokens = MAX_BATCHED_TOKENS,
        .context_workspace_tokens = s.chunk_tokens, .num_heads = HEADS, .kv_lora_rank = L,
        .rope_dim = R, .qk_nope_dim = P, .v_head_dim = V, .dtype = DTYPE, .max_threads = 0};
    int64_t decode_bytes, prefill_bytes, context_bytes, context_alignment;
    CHECK(mla_decode_workspace_bound(&decode_limits, &decode_bytes));
    CHECK(mla_prefill_workspace_bound(&prefill_limits, &prefill_bytes));
    CHECK(mla_chunk_workspace_bytes(s.chunk_tokens, L + R, DTYPE, &context_bytes,
                                    &context_alignment));
    if (context_alignment > 64) { /* alloc aligns to 64 bytes */
        fprintf(stderr, "the context buffer wants %lld-byte alignment\n",
                (long long)context_alignment);
        return 1;
    }
    a.context_rows = alloc((size_t)context_bytes);
    a.workspace_bytes = decode_bytes > prefill_bytes ? decode_bytes : prefill_bytes;
    a.workspace = alloc((size_t)a.workspace_bytes);

    request reqs[NUM_REQS];
    block_pool pool = {.count = NUM_BLOCKS};
    for (int32_t b = 0; b < NUM_BLOCKS; b++)
        pool.free[b] = b;
    for (int i = 0; i < NUM_REQS; i++)
        reqs[i] = (request){.name = schedule[i].name, .prompt_len = schedule[i].prompt_len};

    printf("libmla %s, %d threads: %d layers of %d heads (L=%d R=%d P=%d V=%d), bf16, "
           "block size %d; workspace %.1f MiB\n", mla_version(), mla_default_threads(), LAYERS,
           HEADS, L, R, P, V, BLOCK, (double)a.workspace_bytes / (1 << 20));
    double worst = 0;
    for (int n = 0; n < STEPS; n++) {
        int64_t scheduled[NUM_REQS];
        for (int i = 0; i < NUM_REQS; i++)
            scheduled[i] = schedule[i].scheduled[n];
        plan_step(&s, reqs, scheduled, NUM_REQS, &pool);

        double seconds_in_libmla = 0, err = 0, largest_out = 0;
        ran_on ran = {"-", "-"};
        for (int i = 0; i < LAYERS; i++) {
            model_inputs(i, &s, &a);
            double t0 = seconds();
            attention(&s, &layers[i], &a, &ran);
            seconds_in_libmla += seconds() - t0;
            largest_out = fmax(largest_out, check_layer(i, &s, &a, &err));
        }
        const double relative = err / largest_out;
        if (!(relative <= worst))
            worst = relative;
        printf("step %d: %lld tokens; decode requests %lld, prefill requests %lld; %d layers in %.2f ms "
               "(decode %s, prefill %s); max |out| %.3g, max error %.2g of it\n", n + 1,
               (long long)s.md.num_actual_tokens, (long long)s.split.num_decodes,
               (long long)s.split.num_prefills, LAYERS, seconds_in_libmla * 1e3, ran.decode,
               ran.prefill, largest_out, relative);
        mla_prefill_args p = prefill_args(&s, &layers[0], &a);
        for (int64_t i = 0; i < s.num_reqs; i++) {
            const mla_request *r = &s.batch[i];
            const int64_t pr = i - s.split.num_decodes;
            printf("  %-20s %4lld cached + %3lld new: %s%s\n", reqs[s.order[i]].name,
                   (long long)r->num_computed_tokens, (long long)r->num_scheduled_tokens,
                   region_name(&s, i),
                   pr < 0 ? ""
                   : mla_prefill_choose_path(&p, pr) == MLA_PREFILL_PATH_ABSORBED ? ", absorbed path"
                                                                                   : ", MHA path");
            reqs[s.order[i]].computed += r->num_scheduled_tokens;
        }
        mla_chunk_plan_destroy(s.plan);
        s.plan = NULL;
    }

    for (int i = 0; i < LAYERS; i++) {
        free(layers[i].cache.data);
        free(layers[i].kv_b_proj_packed);
        free(layers[i].w_uk_t);
        free(layers[i].w_uv);
    }
    void *bufs[] = {s.md.query_start_loc, s.md.seq_lens, s.md.positions, s.md.slot_mapping,
                    s.md.block_table, a.staging, a.q, a.latent, a.out, a.workspace,
                    a.context_rows};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++)
        free(bufs[i]);

    if (!(worst <= TOLERANCE)) {
        printf("FAIL: an output differs from the reference by %.2g of max |out| (tolerance %.0e)\n",
               worst, TOLERANCE);
        return 1;
    }
    printf("every output within %.2g of the double-precision reference (tolerance %.0e)\n", worst,
           TOLERANCE);
    return 0;
}
