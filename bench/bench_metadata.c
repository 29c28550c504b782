/*
 * mla_bench metadata: the per-step metadata builders on a large server's
 * step, dense (every step rewrites the block table and plans token_to_seq
 * up front) and incremental (a persistent block table gets the new ids, a
 * lean plan leaves token_to_seq to each chunk's gather).
 */
#include "bench.h"

#include <stdlib.h>

/* A decode-heavy step of a large server: 256 requests with contexts up to
 * 128K tokens in 64-token blocks, 248 decoding one token each and 8
 * prefilling 512 tokens on top of cached context (so chunking plans too). */
enum { META_REQS = 256, META_PREFILLS = 8, META_PREFILL_TOKENS = 512, META_BLOCK = 64,
       META_MAX_CTX = 128 * 1024, META_MAX_BLOCKS = META_MAX_CTX / META_BLOCK + 8,
       META_INNER = 20, /* builds per timed run: each takes microseconds */
       /* a decode step of one token per request fills a 64-token block for
        * about 1 in 64 requests: 4 of 256 get a new block id each step */
       META_GROWN = META_REQS / META_BLOCK };

typedef struct meta_step {
    mla_request reqs[META_REQS];
    int32_t *block_ids; /* every request's ids, back to back */
    mla_block_layout layout;
    mla_batch_metadata md;
    int32_t new_order[META_REQS], context_lens[META_PREFILLS], qsl_p[META_PREFILLS + 1];
    int64_t workspace_tokens;
    mla_sched_part *parts;
    int64_t parts_capacity;
    int32_t split_prefix[META_REQS + 1];
    /* the incremental forms: md.block_table kept from step to step, the
     * ids each row holds, the next rows to grow; a lean plan and a buffer
     * for one chunk's token_to_seq */
    int64_t row_ids[META_REQS], next_grown;
    mla_chunk_plan *lean_plan;
    int32_t *chunk_token_to_seq;
} meta_step;

static bool meta_step_init(meta_step *m, int threads)
{
    uint32_t rng = 12345;
    int64_t tokens = 0, ids = 0;
    m->block_ids = alloc((size_t)META_REQS * META_MAX_BLOCKS * sizeof *m->block_ids);
    m->parts_capacity = threads;
    m->parts = alloc((size_t)threads * sizeof *m->parts);
    m->md.query_start_loc = alloc((META_REQS + 1) * sizeof(int32_t));
    m->md.seq_lens = alloc(META_REQS * sizeof(int32_t));
    m->md.positions = alloc((size_t)META_REQS * META_PREFILL_TOKENS * sizeof(int64_t));
    m->md.slot_mapping = alloc((size_t)META_REQS * META_PREFILL_TOKENS * sizeof(int64_t));
    m->md.block_table = alloc((size_t)META_REQS * META_MAX_BLOCKS * sizeof(int32_t));
    if (!m->block_ids || !m->parts || !m->md.query_start_loc || !m->md.seq_lens ||
        !m->md.positions || !m->md.slot_mapping || !m->md.block_table)
        return false;
    for (int r = 0; r < META_REQS; r++) {
        bool prefill = r >= META_REQS - META_PREFILLS; /* last: the reorder has work */
        int64_t scheduled = prefill ? META_PREFILL_TOKENS : 1;
        int64_t computed = 1 + xorshift32(&rng) % (META_MAX_CTX - scheduled);
        int64_t nblk = (computed + scheduled + META_BLOCK - 1) / META_BLOCK;
        mla_request *q = &m->reqs[r];
        *q = (mla_request){.num_computed_tokens = computed, .num_scheduled_tokens = scheduled,
                           .num_prompt_tokens = prefill ? computed + scheduled : computed,
                           .block_ids = m->block_ids + ids, .num_block_ids = nblk};
        for (int64_t b = 0; b < nblk; b++)
            m->block_ids[ids + b] = (int32_t)(ids + b);
        ids += nblk;
        tokens += scheduled;
        if (prefill) {
            int p = r - (META_REQS - META_PREFILLS);
            m->context_lens[p] = (int32_t)computed;
            m->qsl_p[p + 1] = (int32_t)(m->qsl_p[p] + scheduled);
        }
    }
    m->layout = (mla_block_layout){.manager_block_size = META_BLOCK, .kernel_block_size = META_BLOCK,
                                   .max_blocks_per_req = META_MAX_BLOCKS, .cp_world_size = 1,
                                   .cp_interleave = 1};
    m->md.slot_mapping_len = tokens;
    mla_chunk_plan_info info;
    if (!check(mla_chunk_workspace_tokens(META_MAX_CTX, META_REQS, META_BLOCK, 0,
                                          &m->workspace_tokens), "mla_chunk_workspace_tokens") ||
        !check(mla_chunk_plan_create_lean(m->context_lens, m->qsl_p, META_PREFILLS,
                                          m->workspace_tokens, META_BLOCK, 0, MLA_DTYPE_BF16,
                                          &m->lean_plan), "mla_chunk_plan_create_lean"))
        return false;
    mla_chunk_plan_info_get(m->lean_plan, &info);
    m->chunk_token_to_seq = alloc((size_t)info.token_to_seq_stride * sizeof(int32_t));
    return m->chunk_token_to_seq != NULL;
}

static void meta_step_free(meta_step *m)
{
    free(m->block_ids);
    free(m->parts);
    free(m->md.query_start_loc);
    free(m->md.seq_lens);
    free(m->md.positions);
    free(m->md.slot_mapping);
    free(m->md.block_table);
    mla_chunk_plan_destroy(m->lean_plan);
    free(m->chunk_token_to_seq);
}

static bool meta_batch(meta_step *m)
{
    return check(mla_build_batch_metadata(m->reqs, META_REQS, &m->layout, &m->md),
                 "mla_build_batch_metadata");
}

/* The step again with a persistent table: META_GROWN rows (in turn) lack
 * their last id, as if their requests had just filled a block. */
static bool meta_batch_append(meta_step *m)
{
    for (int i = 0; i < META_GROWN; i++, m->next_grown = (m->next_grown + 1) % META_REQS)
        m->row_ids[m->next_grown] = m->reqs[m->next_grown].num_block_ids - 1;
    return check(mla_build_batch_metadata_append(m->reqs, META_REQS, &m->layout, NULL, m->row_ids,
                                                 &m->md),
                 "mla_build_batch_metadata_append");
}

static bool meta_reorder_split(meta_step *m)
{
    mla_batch_split split;
    return check(mla_reorder_batch(m->reqs, META_REQS, 1, m->new_order, NULL), "mla_reorder_batch") &&
           check(mla_split_batch(m->md.query_start_loc, META_REQS, 1, true, &split), "mla_split_batch");
}

static bool meta_chunk_plan(meta_step *m)
{
    mla_chunk_plan *plan;
    if (!check(mla_chunk_plan_create(m->context_lens, m->qsl_p, META_PREFILLS, m->workspace_tokens,
                                     META_BLOCK, 0, MLA_DTYPE_BF16, &plan),
               "mla_chunk_plan_create"))
        return false;
    mla_chunk_plan_destroy(plan);
    return true;
}

static bool meta_chunk_plan_lean(meta_step *m)
{
    mla_chunk_plan *plan;
    if (!check(mla_chunk_plan_create_lean(m->context_lens, m->qsl_p, META_PREFILLS,
                                          m->workspace_tokens, META_BLOCK, 0, MLA_DTYPE_BF16,
                                          &plan),
               "mla_chunk_plan_create_lean"))
        return false;
    mla_chunk_plan_destroy(plan);
    return true;
}

/* One chunk's token_to_seq, as a server writes it before that chunk's
 * gather: chunk 0, the fullest. */
static bool meta_chunk_token_to_seq(meta_step *m)
{
    mla_chunk_plan_info info;
    mla_chunk_plan_info_get(m->lean_plan, &info);
    return check(mla_chunk_token_to_seq(m->lean_plan, 0, m->chunk_token_to_seq,
                                        info.seq_tot[0]),
                 "mla_chunk_token_to_seq");
}

static bool meta_decode_sched(meta_step *m)
{
    mla_decode_sched_params params = {.num_parts = m->parts_capacity};
    int64_t parts;
    return check(mla_build_decode_sched(m->md.seq_lens, META_REQS - META_PREFILLS, &params, m->parts,
                                        m->parts_capacity, &parts, m->split_prefix),
                 "mla_build_decode_sched");
}

static bool meta_all(meta_step *m)
{
    return meta_batch(m) && meta_reorder_split(m) && meta_chunk_plan(m) && meta_decode_sched(m);
}

/* The step's metadata before its first kernel; each chunk's token_to_seq
 * comes later, with its gather (metadata_token_to_seq). */
static bool meta_all_incremental(meta_step *m)
{
    return meta_batch_append(m) && meta_reorder_split(m) && meta_chunk_plan_lean(m) &&
           meta_decode_sched(m);
}

typedef struct meta_case {
    const char *op;
    bool (*build)(meta_step *m);
} meta_case;

static const meta_case meta_cases[] = {
    {"metadata_batch", meta_batch},           {"metadata_reorder_split", meta_reorder_split},
    {"metadata_chunk_plan", meta_chunk_plan}, {"metadata_decode_sched", meta_decode_sched},
    {"metadata_all", meta_all},
    {"metadata_batch_append", meta_batch_append},
    {"metadata_chunk_plan_lean", meta_chunk_plan_lean},
    {"metadata_token_to_seq", meta_chunk_token_to_seq},
    {"metadata_all_incremental", meta_all_incremental},
};

typedef struct meta_run {
    const meta_case *c;
    meta_step *m;
} meta_run;

static bool run_meta(void *ctx)
{
    const meta_run *r = ctx;
    for (int i = 0; i < META_INNER; i++)
        if (!r->c->build(r->m))
            return false;
    return true;
}

/* Metadata builders are single-threaded pure C: one row per builder, with
 * the decode schedule cut into as many parts as the thread count. */
int cmd_metadata(const options *o, const plan *p)
{
    (void)p;
    int threads = o->threads > 0 ? o->threads : mla_default_threads();
    meta_step m = {0};
    bool ok = meta_step_init(&m, threads) && meta_all(&m); /* sizes the outputs once */
    for (int r = 0; r < META_REQS; r++) /* the dense table holds every id */
        m.row_ids[r] = m.reqs[r].num_block_ids;
    if (ok)
        print_header(o->json);
    for (size_t c = 0; ok && c < sizeof meta_cases / sizeof meta_cases[0]; c++) {
        meta_run run = {&meta_cases[c], &m};
        stats s;
        ok = time_region(run_meta, &run, o->reps, o->seconds, &s);
        row r = {.op = meta_cases[c].op, .backend = "ref", .threads = threads, .n = META_REQS,
                 .time = scale_stats(s, 1.0 / META_INNER)};
        if (ok)
            print_row(&r, o->json);
    }
    meta_step_free(&m);
    return ok ? 0 : 1;
}
