/*
 * Chunked-context prefill metadata (docs/semantics.md §2.6): the workspace size vLLM's
 * determine_chunked_prefill_workspace_size picks, the bytes such a workspace
 * takes, and the context-chunk plan of MLACommonMetadataBuilder.build (starts,
 * chunk lengths, cu_seq_lens, per-chunk totals and maxima, token_to_seq), with
 * the chunk size M always rounded down to the block size (docs/semantics.md §8). A plan is
 * one heap allocation holding its info and every array, plus, on request, a
 * separate 64-byte aligned workspace. A lean plan leaves token_to_seq out:
 * mla_chunk_token_to_seq writes one chunk's row when that chunk is gathered.
 * Everything is validated before the first allocation, so a failure leaves
 * nothing behind.
 */
#include "core/error.h"
#include "core/parallel.h"
#include "core/policy.h"
#include "core/size.h"
#include "metadata/metadata.h"
#include "metadata/trace.h"

#include <omp.h>
#include <stdlib.h>

/* vLLM's cap on the workspace rows (older versions used 128 * 1024). */
#define DEFAULT_WORKSPACE_CAP 65536

/* Allocation sizes below are int64_t; only 64-bit targets are built. */
_Static_assert(sizeof(size_t) >= sizeof(int64_t), "size_t narrower than int64_t");

struct mla_chunk_plan {
    mla_chunk_plan_info info;
    int32_t data[]; /* the arrays info points to, in chunk_arrays order */
};

/* Writable views of a plan's arrays. */
typedef struct chunk_arrays {
    int32_t *starts, *chunk_seq_lens, *cu_seq_lens, *seq_tot, *max_seq_lens, *token_to_seq;
} chunk_arrays;

/* What validation derives from the inputs before anything is allocated. */
typedef struct chunk_dims {
    int64_t n_ctx, c_max, m, num_chunks, stride;
    bool lean;               /* no token_to_seq */
    int64_t data_elems;      /* int32 elements of all arrays together */
    int64_t workspace_bytes; /* 0: no workspace */
} chunk_dims;

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

static int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

/* a * b for non-negative sizes, clamped to INT64_MAX: a term that only
 * competes with a cap may be as large as it likes. */
static int64_t mul_saturated(int64_t a, int64_t b)
{
    int64_t r;
    return mla_mul_size(a, b, &r) ? r : INT64_MAX;
}

mla_status mla_chunk_workspace_tokens(int64_t max_model_len, int64_t max_num_seqs,
                                      int64_t block_size, int64_t cap, int64_t *tokens)
{
    static const char fn[] = "mla_chunk_workspace_tokens";
    if (!tokens)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: NULL tokens", fn);
    if (max_model_len < 1 || max_num_seqs < 1 || block_size < 1)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT,
                        "%s: max_model_len = %lld, max_num_seqs = %lld, block_size = %lld "
                        "must all be >= 1", fn, (long long)max_model_len,
                        (long long)max_num_seqs, (long long)block_size);
    int64_t one_page_each;
    if (!mla_mul_size(max_num_seqs, block_size, &one_page_each))
        return mla_fail(MLA_ERR_OVERFLOW, "%s: max_num_seqs * block_size = %lld * %lld overflows int64",
                        fn, (long long)max_num_seqs, (long long)block_size);
    int64_t w = max64(mul_saturated(max_model_len, 8), mul_saturated(one_page_each, 4));
    w = min64(w, cap > 0 ? cap : DEFAULT_WORKSPACE_CAP);
    *tokens = max64(w, one_page_each); /* every request can hold one page */
    return MLA_OK;
}

/* tokens * width * size(dtype) into *bytes, or a failure naming fn. */
static mla_status workspace_size(const char *fn, int64_t tokens, int64_t width, mla_dtype dtype,
                                 int64_t *bytes)
{
    if (mla_dtype_size(dtype) == 0)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: dtype %d is not a valid mla_dtype", fn,
                        (int)dtype);
    int64_t elems;
    if (!mla_mul_size(tokens, width, &elems) || !mla_mul_size(elems, mla_dtype_size(dtype), bytes))
        return mla_fail(MLA_ERR_OVERFLOW, "%s: workspace of %lld x %lld %s overflows int64 bytes",
                        fn, (long long)tokens, (long long)width, mla_dtype_name(dtype));
    return MLA_OK;
}

mla_status mla_chunk_workspace_bytes(int64_t tokens, int64_t width, mla_dtype dtype,
                                     int64_t *bytes, int64_t *alignment)
{
    static const char fn[] = "mla_chunk_workspace_bytes";
    if (!bytes || !alignment)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: NULL %s", fn, bytes ? "alignment" : "bytes");
    if (tokens < 1 || width < 1)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: tokens = %lld and width = %lld must be >= 1",
                        fn, (long long)tokens, (long long)width);
    int64_t b = 0;
    mla_status st = workspace_size(fn, tokens, width, dtype, &b);
    if (st != MLA_OK)
        return st;
    *bytes = b;
    *alignment = MLA_ALIGN;
    return MLA_OK;
}

/* ---- plan: validation ------------------------------------------------------ */

static mla_status check_scalars(const char *fn, const int32_t *context_lens,
                                const int32_t *query_start_loc, int64_t num_prefills,
                                int64_t workspace_tokens, int64_t block_size,
                                int64_t workspace_width)
{
    if (num_prefills < 0)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: num_prefills = %lld is negative", fn,
                        (long long)num_prefills);
    /* token_to_seq holds prefill indices as int32 */
    if (num_prefills > INT32_MAX)
        return mla_fail(MLA_ERR_OVERFLOW, "%s: num_prefills = %lld does not fit in int32",
                        fn, (long long)num_prefills);
    if (num_prefills > 0 && (!context_lens || !query_start_loc))
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: NULL %s with num_prefills = %lld", fn,
                        context_lens ? "query_start_loc" : "context_lens", (long long)num_prefills);
    if (workspace_tokens < 1)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: workspace_tokens = %lld must be >= 1",
                        fn, (long long)workspace_tokens);
    if (block_size < 1)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: block_size = %lld must be >= 1", fn,
                        (long long)block_size);
    if (workspace_width < 0)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: workspace_width = %lld is negative",
                        fn, (long long)workspace_width);
    return MLA_OK;
}

static mla_status check_arrays(const char *fn, const int32_t *context_lens,
                               const int32_t *query_start_loc, int64_t num_prefills)
{
    for (int64_t r = 0; r < num_prefills; r++)
        if (context_lens[r] < 0)
            return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: context_lens[%lld] = %d is negative",
                            fn, (long long)r, (int)context_lens[r]);
    if (query_start_loc && query_start_loc[0] != 0)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: query_start_loc[0] = %d, must be 0",
                        fn, (int)query_start_loc[0]);
    for (int64_t r = 0; r < num_prefills; r++)
        if (query_start_loc[r + 1] < query_start_loc[r])
            return mla_fail(MLA_ERR_INVALID_ARGUMENT,
                            "%s: query_start_loc[%lld] = %d < query_start_loc[%lld] = %d (decreasing)",
                            fn, (long long)(r + 1), (int)query_start_loc[r + 1], (long long)r,
                            (int)query_start_loc[r]);
    return MLA_OK;
}

/* n_ctx, C_max, M, the chunk count and the token_to_seq stride. */
static mla_status derive_chunking(const char *fn, const int32_t *context_lens,
                                  int64_t num_prefills, int64_t workspace_tokens,
                                  int64_t block_size, chunk_dims *d)
{
    for (int64_t r = 0; r < num_prefills; r++) {
        d->n_ctx += context_lens[r] > 0;
        d->c_max = max64(d->c_max, context_lens[r]);
    }
    if (d->c_max == 0)
        return MLA_OK;
    /* the workspace is shared equally by the prefills with context */
    d->m = workspace_tokens / d->n_ctx / block_size * block_size;
    if (d->m == 0)
        return mla_fail(MLA_ERR_CAPACITY,
                        "%s: workspace_tokens = %lld cannot hold one block of %lld tokens for each "
                        "of the %lld prefills with context", fn, (long long)workspace_tokens,
                        (long long)block_size, (long long)d->n_ctx);
    d->num_chunks = mla_ceil_div(d->c_max, d->m);
    /* A request's share min(ctx - i*M, M) never grows with i, so chunk 0 is
     * the fullest: its total is the stride and bounds every cu_seq_lens. */
    for (int64_t r = 0; r < num_prefills; r++)
        d->stride += min64(context_lens[r], d->m);
    if (d->stride > INT32_MAX)
        return mla_fail(MLA_ERR_OVERFLOW, "%s: chunk 0 holds %lld tokens, more than int32 "
                        "cu_seq_lens can count", fn, (long long)d->stride);
    return MLA_OK;
}

/* Element count of the plan's arrays and bytes of its workspace. */
static mla_status derive_sizes(const char *fn, int64_t num_prefills, int64_t workspace_tokens,
                               int64_t workspace_width, mla_dtype workspace_dtype,
                               chunk_dims *d)
{
    /* per chunk: starts and lengths [P], cu_seq_lens [P+1], seq_tot and max
     * [1], token_to_seq [stride] unless lean */
    int64_t per_chunk = 3 * num_prefills + 3 + (d->lean ? 0 : d->stride), bytes;
    if (!mla_mul_size(d->num_chunks, per_chunk, &d->data_elems) ||
        !mla_mul_size(d->data_elems, (int64_t)sizeof(int32_t), &bytes) ||
        bytes > INT64_MAX - (int64_t)sizeof(mla_chunk_plan))
        return mla_fail(MLA_ERR_OVERFLOW, "%s: %lld chunks of %lld int32 each overflow int64 bytes",
                        fn, (long long)d->num_chunks, (long long)per_chunk);
    if (workspace_width == 0)
        return MLA_OK;
    mla_status st = workspace_size(fn, workspace_tokens, workspace_width, workspace_dtype,
                                   &d->workspace_bytes);
    if (st != MLA_OK)
        return st;
    /* aligned_alloc wants a multiple of the alignment */
    if (d->workspace_bytes > INT64_MAX - (MLA_ALIGN - 1))
        return mla_fail(MLA_ERR_OVERFLOW, "%s: workspace of %lld bytes overflows when aligned",
                        fn, (long long)d->workspace_bytes);
    d->workspace_bytes = mla_round_up(d->workspace_bytes, MLA_ALIGN);
    return MLA_OK;
}

/* ---- plan: construction -------------------------------------------------------- */

static chunk_arrays layout(mla_chunk_plan *p, int64_t num_prefills, const chunk_dims *d)
{
    chunk_arrays a = {0};
    if (d->num_chunks == 0)
        return a; /* no context: the arrays stay NULL */
    int64_t n = d->num_chunks, per_req = n * num_prefills;
    a.starts = p->data;
    a.chunk_seq_lens = a.starts + per_req;
    a.cu_seq_lens = a.chunk_seq_lens + per_req;
    a.seq_tot = a.cu_seq_lens + per_req + n;
    a.max_seq_lens = a.seq_tot + n;
    a.token_to_seq = d->lean ? NULL : a.max_seq_lens + n;
    return a;
}

/* A token_to_seq row of n entries: each of the P prefills' index repeated
 * its length in the chunk (lens [P]), then zeros. */
static void write_token_to_seq(const int32_t *lens, int64_t num_prefills, int64_t n, int32_t *t2s)
{
    int64_t total = 0;
    for (int64_t r = 0; r < num_prefills; r++)
        for (int64_t t = 0; t < lens[r]; t++)
            t2s[total++] = (int32_t)r;
    for (int64_t t = total; t < n; t++)
        t2s[t] = 0;
}

/* Chunk i: request r's slice of its context [i*M, min(ctx, i*M + M)). */
static void fill_chunk(const chunk_arrays *a, const int32_t *context_lens, int64_t num_prefills,
                       const chunk_dims *d, int64_t i)
{
    /* start < C_max fits int32; start + M cannot overflow, since with more
     * than one chunk M < C_max */
    int64_t start = i * d->m;
    int32_t *starts = a->starts + i * num_prefills, *lens = a->chunk_seq_lens + i * num_prefills;
    int32_t *cu = a->cu_seq_lens + i * (num_prefills + 1);
    int64_t total = 0, longest = 0;
    cu[0] = 0;
    for (int64_t r = 0; r < num_prefills; r++) {
        int64_t len = max64(min64(context_lens[r], start + d->m) - start, 0);
        starts[r] = (int32_t)start;
        lens[r] = (int32_t)len;
        total += len;
        cu[r + 1] = (int32_t)total;
        longest = max64(longest, len);
    }
    if (a->token_to_seq)
        write_token_to_seq(lens, num_prefills, d->stride, a->token_to_seq + i * d->stride);
    a->seq_tot[i] = (int32_t)total;
    a->max_seq_lens[i] = (int32_t)longest;
}

/* A parallel fill: each of `parts` tasks fills a slice of the chunks. */
typedef struct chunk_fill {
    const chunk_arrays *a;
    const int32_t *context_lens;
    int64_t num_prefills;
    const chunk_dims *d;
    int64_t parts;
} chunk_fill;

static void fill_chunks(int64_t part, void *ctx)
{
    const chunk_fill *f = ctx;
    int64_t lo, hi;
    mla_part_range(f->d->num_chunks, f->parts, part, &lo, &hi);
    for (int64_t i = lo; i < hi; i++)
        fill_chunk(f->a, f->context_lens, f->num_prefills, f->d, i);
}

static mla_status out_of_memory(const char *fn, int64_t bytes)
{
    return mla_fail(MLA_ERR_CAPACITY, "%s: out of memory allocating %lld bytes", fn,
                    (long long)bytes);
}

/* Both plan builders; a lean plan has no token_to_seq. */
static mla_status create_plan(const char *fn, const int32_t *context_lens,
                              const int32_t *query_start_loc, int64_t num_prefills,
                              int64_t workspace_tokens, int64_t block_size,
                              int64_t workspace_width, mla_dtype workspace_dtype, bool lean,
                              mla_chunk_plan **plan)
{
    if (!plan)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: NULL plan", fn);
    chunk_dims d = {.lean = lean};
    mla_status st = check_scalars(fn, context_lens, query_start_loc, num_prefills,
                                  workspace_tokens, block_size, workspace_width);
    if (st == MLA_OK)
        st = check_arrays(fn, context_lens, query_start_loc, num_prefills);
    if (st == MLA_OK)
        st = derive_chunking(fn, context_lens, num_prefills, workspace_tokens, block_size, &d);
    if (st == MLA_OK)
        st = derive_sizes(fn, num_prefills, workspace_tokens, workspace_width, workspace_dtype,
                          &d);
    if (st != MLA_OK)
        return st;

    int64_t plan_bytes = (int64_t)sizeof(mla_chunk_plan) + d.data_elems * (int64_t)sizeof(int32_t);
    mla_chunk_plan *p = malloc((size_t)plan_bytes);
    if (!p)
        return out_of_memory(fn, plan_bytes);
    void *workspace = NULL;
    if (d.workspace_bytes > 0) {
        workspace = aligned_alloc(MLA_ALIGN, (size_t)d.workspace_bytes);
        if (!workspace) {
            free(p);
            return out_of_memory(fn, d.workspace_bytes);
        }
    }

    chunk_arrays a = layout(p, num_prefills, &d);
    /* token_to_seq is num_chunks x stride int32s (megabytes at long
     * contexts): chunks fill independently, so large plans use every thread */
    bool large = !lean && d.num_chunks > 1 && d.num_chunks * d.stride >= MLA_FORK_MIN_ENTRIES;
    int threads = large ? omp_get_max_threads() : 1;
    chunk_fill fill = {.a = &a, .context_lens = context_lens, .num_prefills = num_prefills, .d = &d,
                       .parts = d.num_chunks < threads ? d.num_chunks : threads};
    mla_parallel_for(fill.parts, threads, fill_chunks, &fill);
    p->info = (mla_chunk_plan_info){
        .num_prefills = num_prefills,
        .num_with_context = d.n_ctx,
        .max_context_len = d.c_max,
        .max_chunk_len = d.m,
        .num_chunks = d.num_chunks,
        .starts = a.starts,
        .chunk_seq_lens = a.chunk_seq_lens,
        .cu_seq_lens = a.cu_seq_lens,
        .seq_tot = a.seq_tot,
        .max_seq_lens = a.max_seq_lens,
        .token_to_seq = a.token_to_seq,
        .token_to_seq_stride = d.stride,
        /* the with-context prefills come first (docs/semantics.md §2.4); vLLM does not check */
        .prefill_tokens_with_context = query_start_loc ? query_start_loc[d.n_ctx] : 0,
        .workspace = workspace,
        .workspace_tokens = workspace_tokens,
        .workspace_width = workspace ? workspace_width : 0,
        .workspace_dtype = workspace_dtype,
    };
    *plan = p;
    return MLA_OK;
}

/* Both plan builders, traced when MLA_VERBOSE asks. */
static mla_status create_plan_traced(const char *fn, const int32_t *context_lens,
                                     const int32_t *query_start_loc, int64_t num_prefills,
                                     int64_t workspace_tokens, int64_t block_size,
                                     int64_t workspace_width, mla_dtype workspace_dtype, bool lean,
                                     mla_chunk_plan **plan)
{
    if (!mla_tracing())
        return create_plan(fn, context_lens, query_start_loc, num_prefills, workspace_tokens,
                           block_size, workspace_width, workspace_dtype, lean, plan);
    double start = mla_trace_begin();
    mla_status st = create_plan(fn, context_lens, query_start_loc, num_prefills, workspace_tokens,
                                block_size, workspace_width, workspace_dtype, lean, plan);
    mla_trace_chunk_plan_create(start, fn, st, num_prefills, workspace_tokens, block_size,
                                workspace_width, workspace_dtype);
    return st;
}

mla_status mla_chunk_plan_create(const int32_t *context_lens, const int32_t *query_start_loc,
                                 int64_t num_prefills, int64_t workspace_tokens,
                                 int64_t block_size, int64_t workspace_width,
                                 mla_dtype workspace_dtype, mla_chunk_plan **plan)
{
    return create_plan_traced("mla_chunk_plan_create", context_lens, query_start_loc,
                              num_prefills, workspace_tokens, block_size, workspace_width,
                              workspace_dtype, false, plan);
}

mla_status mla_chunk_plan_create_lean(const int32_t *context_lens,
                                      const int32_t *query_start_loc, int64_t num_prefills,
                                      int64_t workspace_tokens, int64_t block_size,
                                      int64_t workspace_width, mla_dtype workspace_dtype,
                                      mla_chunk_plan **plan)
{
    return create_plan_traced("mla_chunk_plan_create_lean", context_lens, query_start_loc,
                              num_prefills, workspace_tokens, block_size, workspace_width,
                              workspace_dtype, true, plan);
}

static mla_status chunk_token_to_seq(const mla_chunk_plan *plan, int64_t chunk, int32_t *out,
                                     int64_t out_len)
{
    static const char fn[] = "mla_chunk_token_to_seq";
    if (!plan)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: NULL plan", fn);
    const mla_chunk_plan_info *in = &plan->info;
    if (chunk < 0 || chunk >= in->num_chunks)
        return mla_fail(MLA_ERR_OUT_OF_RANGE, "%s: chunk = %lld is outside [0, %lld)", fn,
                        (long long)chunk, (long long)in->num_chunks);
    if (out_len < in->seq_tot[chunk])
        return mla_fail(MLA_ERR_CAPACITY, "%s: out_len = %lld is less than chunk %lld's %d tokens",
                        fn, (long long)out_len, (long long)chunk, (int)in->seq_tot[chunk]);
    if (out_len > 0 && !out)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: NULL out with out_len = %lld", fn,
                        (long long)out_len);
    write_token_to_seq(in->chunk_seq_lens + chunk * in->num_prefills, in->num_prefills, out_len,
                       out);
    return MLA_OK;
}

mla_status mla_chunk_token_to_seq(const mla_chunk_plan *plan, int64_t chunk, int32_t *out,
                                  int64_t out_len)
{
    if (!mla_tracing())
        return chunk_token_to_seq(plan, chunk, out, out_len);
    double start = mla_trace_begin();
    mla_status st = chunk_token_to_seq(plan, chunk, out, out_len);
    mla_trace_chunk_token_to_seq(start, st, chunk, out_len);
    return st;
}

/* A NULL plan reads as an empty one (no prefills, no chunks). */
void mla_chunk_plan_info_get(const mla_chunk_plan *plan, mla_chunk_plan_info *info)
{
    if (info)
        *info = plan ? plan->info : (mla_chunk_plan_info){0};
}

void mla_chunk_plan_destroy(mla_chunk_plan *plan)
{
    if (!plan)
        return;
    free(plan->info.workspace);
    free(plan);
}
