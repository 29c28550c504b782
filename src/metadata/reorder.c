/*
 * Batch reordering and the decode/prefill split (docs/semantics.md §2.4), as vLLM's
 * reorder_batch_to_split_decodes_and_prefills and split_decodes_and_prefills
 * do them. Reordering sorts requests into the regions decode, short_extend,
 * long_extend, prefill with the fewest moves and returns the permutation
 * instead of swapping a batch in place; the split then finds where the
 * decodes of an ordered batch end, from query_start_loc alone. Inputs are
 * checked before the first write.
 */
#include "core/error.h"
#include "metadata/request_check.h"
#include "metadata/trace.h"

/* vLLM's classification: no context is a prefill whatever its length; with
 * context, more than tau tokens is a long extend; otherwise it is a decode
 * once the prompt is done (is_prefilling = computed < prompt). */
static mla_region region_of(const mla_request *q, int64_t threshold)
{
    if (q->num_computed_tokens == 0)
        return MLA_REGION_PREFILL;
    if (q->num_scheduled_tokens > threshold)
        return MLA_REGION_LONG_EXTEND;
    if (q->num_computed_tokens < q->num_prompt_tokens)
        return MLA_REGION_SHORT_EXTEND;
    return MLA_REGION_DECODE;
}

/* The region position i belongs to in the ordered batch: the first
 * counts[0] positions are decodes, the next counts[1] short extends, ... */
static mla_region target_region(const int64_t counts[MLA_REGION_COUNT], int64_t i)
{
    int64_t end = 0;
    for (int region = 0; region < MLA_REGION_PREFILL; region++) {
        end += counts[region];
        if (i < end)
            return (mla_region)region;
    }
    return MLA_REGION_PREFILL;
}

static bool misplaced(const mla_request *reqs, int64_t threshold,
                      const int64_t counts[MLA_REGION_COUNT], int64_t i)
{
    return region_of(&reqs[i], threshold) != target_region(counts, i);
}

/* vLLM's minimal reorder: requests already inside their region stay; the
 * others, region by region and in index order within a region (a stable sort
 * by region), fill the positions they vacated in ascending order. The
 * misplaced positions and the misplaced requests are the same set of indices,
 * so the cursor never runs past the batch. */
static void place(const mla_request *reqs, int64_t num_reqs, int64_t threshold,
                  const int64_t counts[MLA_REGION_COUNT], int32_t *new_order)
{
    for (int64_t i = 0; i < num_reqs; i++)
        new_order[i] = (int32_t)i;
    int64_t cursor = 0;
    for (int region = 0; region < MLA_REGION_COUNT; region++) {
        for (int64_t i = 0; i < num_reqs; i++) {
            if ((int)region_of(&reqs[i], threshold) != region ||
                !misplaced(reqs, threshold, counts, i))
                continue;
            while (!misplaced(reqs, threshold, counts, cursor))
                cursor++;
            new_order[cursor++] = (int32_t)i;
        }
    }
}

static mla_status reorder_batch(const mla_request *reqs, int64_t num_reqs, int64_t threshold,
                                int32_t *new_order, int64_t *region_counts)
{
    static const char fn[] = "mla_reorder_batch";
    if (num_reqs < 0)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: num_reqs = %lld is negative", fn,
                        (long long)num_reqs);
    if (num_reqs > INT32_MAX)
        return mla_fail(MLA_ERR_OVERFLOW, "%s: num_reqs = %lld does not fit new_order (int32)", fn,
                        (long long)num_reqs);
    if (num_reqs > 0 && (!reqs || !new_order))
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: NULL %s with num_reqs = %lld", fn,
                        reqs ? "new_order" : "reqs", (long long)num_reqs);
    if (threshold < 1)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: threshold = %lld < 1", fn,
                        (long long)threshold);
    int64_t counts[MLA_REGION_COUNT] = {0};
    for (int64_t r = 0; r < num_reqs; r++) {
        mla_status st = mla_check_request_counts(fn, reqs, r);
        if (st != MLA_OK)
            return st;
        counts[region_of(&reqs[r], threshold)]++;
    }
    place(reqs, num_reqs, threshold, counts, new_order);
    for (int region = 0; region < MLA_REGION_COUNT && region_counts; region++)
        region_counts[region] = counts[region];
    return MLA_OK;
}

mla_status mla_reorder_batch(const mla_request *reqs, int64_t num_reqs, int64_t threshold,
                             int32_t *new_order, int64_t *region_counts)
{
    if (!mla_tracing())
        return reorder_batch(reqs, num_reqs, threshold, new_order, region_counts);
    double start = mla_trace_begin();
    mla_status st = reorder_batch(reqs, num_reqs, threshold, new_order, region_counts);
    mla_trace_reorder_batch(start, st, num_reqs, threshold);
    return st;
}

static int64_t query_len(const int32_t *query_start_loc, int64_t r)
{
    return (int64_t)query_start_loc[r + 1] - query_start_loc[r];
}

/* Every query length equals the first one or is 0 (a padding request of a
 * uniform batch captured at a larger size). */
static bool uniform_with_padding(const int32_t *qsl, int64_t num_reqs)
{
    for (int64_t r = 1; r < num_reqs; r++)
        if (query_len(qsl, r) != query_len(qsl, 0) && query_len(qsl, r) != 0)
            return false;
    return true;
}

/* Index of the first prefill, num_reqs when all are decodes (docs/semantics.md §2.4). */
static int64_t first_prefill(const int32_t *qsl, int64_t num_reqs, int64_t threshold,
                             bool require_uniform)
{
    if (num_reqs == 0)
        return 0;
    int64_t max_len = 0;
    for (int64_t r = 0; r < num_reqs; r++)
        max_len = query_len(qsl, r) > max_len ? query_len(qsl, r) : max_len;
    if (max_len <= threshold && (!require_uniform || threshold <= 1))
        return num_reqs;
    if (query_len(qsl, 0) > threshold)
        return 0;
    if (require_uniform && uniform_with_padding(qsl, num_reqs))
        return num_reqs;
    for (int64_t r = 1; r < num_reqs; r++) {
        bool starts = require_uniform ? query_len(qsl, r) != query_len(qsl, 0)
                                      : query_len(qsl, r) > threshold;
        if (starts)
            return r;
    }
    return num_reqs;
}

static mla_status split_batch(const int32_t *query_start_loc, int64_t num_reqs, int64_t threshold,
                              bool require_uniform, mla_batch_split *out)
{
    static const char fn[] = "mla_split_batch";
    if (!query_start_loc || !out)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: NULL %s", fn,
                        out ? "query_start_loc" : "out");
    if (num_reqs < 0)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: num_reqs = %lld is negative", fn,
                        (long long)num_reqs);
    if (threshold < 1)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: threshold = %lld < 1", fn,
                        (long long)threshold);
    if (query_start_loc[0] != 0)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: query_start_loc[0] = %d, not 0", fn,
                        (int)query_start_loc[0]);
    for (int64_t r = 0; r < num_reqs; r++)
        if (query_len(query_start_loc, r) < 0)
            return mla_fail(MLA_ERR_INVALID_ARGUMENT,
                            "%s: query_start_loc[%lld] = %d < "
                            "query_start_loc[%lld] = %d",
                            fn, (long long)(r + 1), (int)query_start_loc[r + 1], (long long)r,
                            (int)query_start_loc[r]);
    int64_t decodes = first_prefill(query_start_loc, num_reqs, threshold, require_uniform);
    int64_t tokens = query_start_loc[num_reqs];
    *out = (mla_batch_split){
        .num_decodes = decodes,
        .num_prefills = num_reqs - decodes,
        .num_decode_tokens = query_start_loc[decodes],
        .num_prefill_tokens = tokens - query_start_loc[decodes],
    };
    return MLA_OK;
}

mla_status mla_split_batch(const int32_t *query_start_loc, int64_t num_reqs, int64_t threshold,
                           bool require_uniform, mla_batch_split *out)
{
    if (!mla_tracing())
        return split_batch(query_start_loc, num_reqs, threshold, require_uniform, out);
    double start = mla_trace_begin();
    mla_status st = split_batch(query_start_loc, num_reqs, threshold, require_uniform, out);
    mla_trace_split_batch(start, st, num_reqs, threshold);
    return st;
}
