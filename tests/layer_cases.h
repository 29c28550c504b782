/*
 * A layer's step for the thread suites (layer_cases.c): its inputs, the
 * arguments of every op of the step, and one arena holding everything the
 * calls write.
 */
#ifndef MLA_TEST_LAYER_CASES_H
#define MLA_TEST_LAYER_CASES_H

#include "decode_cases.h"

#define LAYER_MAX_REQS 8

/* B requests of lens[b] tokens, the last news[b] of each new this step
 * (what concat_and_cache writes and the prefill ops take as new tokens;
 * decode reads every token, s_q queries per request); the chunk plan's
 * workspace tokens; extra_bytes of the arena left for the suite's own
 * outputs (layer_carve). */
typedef struct layer_shape {
    int64_t num_reqs, H, L, R, P, V, block_size, s_q, chunk_tokens, extra_bytes;
    int32_t lens[LAYER_MAX_REQS], news[LAYER_MAX_REQS];
} layer_shape;

typedef struct layer_spec {
    mla_dtype dtype, cache_dtype;
    int threads;
    bool bf16_compute;
} layer_spec;

/* The calls of a step, in order; later ones read what earlier ones wrote. */
typedef enum call {
    CONCAT, GATHER, CP_GATHER, DECODE, FORWARD, UP_PROJ, FLASH, FLASH_CAUSAL, MERGE,
    PREFILL_MHA, PREFILL_ABSORBED, CALLS
} call;
extern const char *const call_names[CALLS];

/* One layer: its inputs, and an arena holding everything its calls write
 * (the cache first), compared whole after every call. */
typedef struct layer {
    layer_spec s;
    layer_shape shape;
    int64_t elem, td, tp, ctx_total, cols;
    int32_t ctx[LAYER_MAX_REQS], qsl[LAYER_MAX_REQS + 1], cu_ctx[LAYER_MAX_REQS + 1], *table, *to_seq;
    int64_t *slots;
    void *new_kv_c, *new_k_pe, *q_lat, *q_fwd, *q_pre, *kvb, *w_uk_t, *w_uv;
    mla_dtype w_dtype;
    mla_chunk_plan *plan;
    unsigned char *arena, *initial, *end;
    size_t arena_bytes;
    mla_kv_cache cache;
    mla_gather_spec gather;
    void *gathered, *cp_gathered;
    mla_decode_args decode;
    mla_decode_forward_args forward;
    mla_up_proj_args up;
    mla_flash_attn_args flash[2];
    mla_merge_attn_args merge;
    mla_prefill_args prefill[2];
    void *ws;
    int64_t ws_bytes;
    /* per round */
    bool runs[CALLS];           /* the forced backend accepts the call */
    unsigned char *want[CALLS]; /* the arena after each call, run alone */
} layer;

/* calloc that fails the test when it fails (0 bytes: 1). */
void *layer_alloc_or_fail(size_t bytes);
/* n random values in [-1, 1) as dtype (fp8: with scale) stores them. */
void *layer_random_values(mla_dtype dtype, int64_t n, float scale);
/* The next 64-byte aligned region of the arena. */
void *layer_carve(layer *ly, int64_t bytes);

/* The layer's inputs (random), its arena (guard bytes, then the cache)
 * and a workspace for every call at s->threads threads. ly->initial is
 * the arena before any call: a suite that carves its own outputs
 * (extra_bytes) takes it again after. */
void layer_make(layer *ly, const layer_shape *shape, const layer_spec *s);
void layer_free(layer *ly);
/* Call k of the step at `threads`. */
mla_status layer_call(layer *ly, call k, int threads);
const char *layer_label(const layer *ly, char *buf, size_t size);

#endif
