/*
 * Split-KV decode schedules (docs/semantics.md §5.3-5.5): which KV blocks of which
 * requests each of num_parts workers runs, and which partial-result slots each
 * request owns. Default mode is FlashMLA's tile scheduler, step for step: every
 * request costs its blocks plus a fixed overhead, each part gets an equal
 * budget, and a request that does not fit is cut wherever the budget runs out,
 * so cut points move with the batch and the part count. Batch-invariant mode
 * (split_blocks > 0) cuts every request every split_blocks blocks from its own
 * start; parts then take whole splits, balanced by cost: each split goes to the
 * part whose equal share of the total cost holds the split's midpoint (and
 * every part takes at least one split while any remain). Since the split
 * points depend only on a request's own length, a driver that computes each
 * split on its own and combines splits in index order gets bit-identical
 * results for any batch and thread count. In both modes a part covers
 * requests begin_req..end_req (end_req inclusive, as in FlashMLA); its range in
 * request b is [begin_block if b == begin_req else 0, end_block if b ==
 * end_req else ceil(len_b / block_n)). In batch-invariant mode that range may
 * hold several splits: the driver cuts it at multiples of split_blocks, split
 * k of request b going to slot split_prefix[b] + k. Parts with no work come
 * last and read begin_req = num_reqs, end_req = num_reqs - 1, every other
 * field 0: a driver skips parts with begin_req >= num_reqs, and a walk from
 * begin_req to end_req does nothing anyway.
 */
#include "core/error.h"
#include "core/policy.h"
#include "core/size.h"
#include "metadata/metadata.h"
#include "metadata/trace.h"

#include <omp.h>

static const char build_fn[] = "mla_build_decode_sched";

typedef struct sched_cfg {
    int64_t num_parts, block_n, overhead, split_blocks;
} sched_cfg;

/* ---- sizes ------------------------------------------------------------------ */

/* Blocks that hold tokens: where a part's walk of a whole request ends. */
static int64_t kv_blocks(int32_t len, int64_t block_n)
{
    return mla_ceil_div(len, block_n);
}

/* FlashMLA's nblk: an empty request still costs one block, because its
 * output row (zeros) is still written. */
static int64_t cost_blocks(int32_t len, int64_t block_n)
{
    return (len > 0 ? len - 1 : 0) / block_n + 1;
}

/* Splits of a request in batch-invariant mode; an empty request has one
 * empty split, so every request owns at least one slot. */
static int64_t split_count(int32_t len, const sched_cfg *cfg)
{
    int64_t n = mla_ceil_div(kv_blocks(len, cfg->block_n), cfg->split_blocks);
    return n > 0 ? n : 1;
}

/* ---- arguments -------------------------------------------------------------- */

/* Fills in the defaults (a zero field means its default, and
 * MLA_SCHED_NO_OVERHEAD an overhead of 0); check_params says whether the
 * values are usable. */
static sched_cfg resolve_cfg(const mla_decode_sched_params *p)
{
    int64_t threads = omp_get_max_threads();
    return (sched_cfg){
        .num_parts = p->num_parts > 0 ? p->num_parts : threads < MLA_SCHED_MAX_PARTS ? threads : MLA_SCHED_MAX_PARTS,
        .block_n = p->block_n > 0 ? p->block_n : MLA_SCHED_BLOCK_N,
        .overhead = p->overhead > 0 ? p->overhead : p->overhead == 0 ? MLA_SCHED_OVERHEAD : 0,
        .split_blocks = p->split_blocks > 0 ? p->split_blocks : 0,
    };
}

/* num_reqs fits the int32 part fields (idle parts store begin_req =
 * num_reqs) and seq_lens is there when needed (reads_lens). */
static mla_status check_counts(const char *fn, const int32_t *seq_lens, int64_t num_reqs,
                               bool reads_lens)
{
    if (num_reqs < 0)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: num_reqs = %lld is negative", fn,
                        (long long)num_reqs);
    if (num_reqs > INT32_MAX)
        return mla_fail(MLA_ERR_OVERFLOW, "%s: num_reqs = %lld does not fit int32", fn,
                        (long long)num_reqs);
    if (!seq_lens && num_reqs > 0 && reads_lens)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: NULL seq_lens", fn);
    return MLA_OK;
}

static mla_status check_params(const char *fn, const mla_decode_sched_params *p)
{
    if (p->num_parts > MLA_SCHED_MAX_PARTS)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: num_parts = %lld exceeds %lld", fn,
                        (long long)p->num_parts, (long long)MLA_SCHED_MAX_PARTS);
    if (p->overhead < 0 && p->overhead != MLA_SCHED_NO_OVERHEAD)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: overhead = %lld (need >= 0, 0 for the "
                        "default %d, or MLA_SCHED_NO_OVERHEAD)", fn, (long long)p->overhead,
                        MLA_SCHED_OVERHEAD);
    /* keeps the int64 cost totals exact: B, blocks and overhead all fit int32 */
    if (p->overhead > INT32_MAX)
        return mla_fail(MLA_ERR_OVERFLOW, "%s: overhead = %lld does not fit int32", fn,
                        (long long)p->overhead);
    return MLA_OK;
}

/* Every length is >= 0 and every slot index fits the int32 split_prefix;
 * *slots gets the slot count. The default mode has at most B + num_parts - 1
 * slots (each part boundary cuts at most one request), whatever the lengths,
 * which it then need not read (seq_lens may be NULL); batch-invariant mode
 * has exactly the sum of the split counts. B and num_parts are checked
 * already, so neither sum can overflow. */
static mla_status check_lens(const char *fn, const int32_t *seq_lens, int64_t num_reqs,
                             const sched_cfg *cfg, int64_t *slots)
{
    int64_t n = cfg->split_blocks > 0 || num_reqs == 0 ? 0 : num_reqs + cfg->num_parts - 1;
    if (n > INT32_MAX)
        return mla_fail(MLA_ERR_OVERFLOW, "%s: num_reqs + num_parts - 1 = %lld split slots do not fit int32",
                        fn, (long long)n);
    for (int64_t b = 0; seq_lens && b < num_reqs; b++) {
        if (seq_lens[b] < 0)
            return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: seq_lens[%lld] = %d is negative", fn,
                            (long long)b, (int)seq_lens[b]);
        if (cfg->split_blocks > 0)
            n += split_count(seq_lens[b], cfg);
    }
    if (n > INT32_MAX)
        return mla_fail(MLA_ERR_OVERFLOW, "%s: %lld splits do not fit int32 split_prefix", fn,
                        (long long)n);
    *slots = n;
    return MLA_OK;
}

static mla_status check_args(const int32_t *seq_lens, int64_t num_reqs,
                             const mla_decode_sched_params *params, const mla_sched_part *parts,
                             int64_t parts_capacity, const int64_t *num_parts,
                             const int32_t *split_prefix, const sched_cfg *cfg)
{
    mla_status st = check_counts(build_fn, seq_lens, num_reqs, true);
    if (st != MLA_OK)
        return st;
    if (!parts || !num_parts || !split_prefix)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: NULL %s", build_fn,
                        !parts ? "parts" : !num_parts ? "num_parts" : "split_prefix");
    if ((st = check_params(build_fn, params)) != MLA_OK)
        return st;
    if (parts_capacity < cfg->num_parts)
        return mla_fail(MLA_ERR_CAPACITY, "%s: parts_capacity = %lld < num_parts = %lld%s", build_fn,
                        (long long)parts_capacity, (long long)cfg->num_parts,
                        params->num_parts > 0 ? "" : " (omp_get_max_threads())");
    int64_t slots;
    return check_lens(build_fn, seq_lens, num_reqs, cfg, &slots);
}

/* ---- parts ------------------------------------------------------------------ */

static mla_sched_part idle_part(int64_t num_reqs)
{
    return (mla_sched_part){.begin_req = (int32_t)num_reqs, .end_req = (int32_t)(num_reqs - 1)};
}

/* A request alone in a part is partial if cut on either side, so both flags
 * must say so (FlashMLA's rule; batch-invariant flags already agree). */
static void set_partial(mla_sched_part *part, bool first, bool last)
{
    if (part->begin_req == part->end_req)
        first = last = first || last;
    part->first_partial = first;
    part->last_partial = last;
}

/* ---- default mode: FlashMLA's scheduler ------------------------------------- */

/* The scheduler's cursor: the next block to schedule, the split index it
 * starts, and the slots handed out so far. */
typedef struct default_walk {
    const int32_t *lens;
    int64_t num_reqs, block_n, overhead;
    int64_t req, blk, split, slots;
    int32_t *prefix;
} default_walk;

/* Fills one part with `payload` budget from the cursor. Whole rests of
 * requests cost blocks + overhead; the request that does not fit gets what is
 * left after its overhead, if anything. A part's first request always takes a
 * block, since payload - overhead = ceil(total / num_parts) >= 1, and no part
 * costs more than payload. */
static void default_part(default_walk *w, int64_t payload, mla_sched_part *part)
{
    *part = (mla_sched_part){.begin_req = (int32_t)w->req, .begin_block = (int32_t)w->blk,
                             .begin_split = (int32_t)w->split};
    bool first = w->blk != 0;
    int64_t budget = payload;
    while (w->req < w->num_reqs) {
        int64_t remaining = cost_blocks(w->lens[w->req], w->block_n) - w->blk;
        if (budget < remaining + w->overhead) {
            if (budget > w->overhead) {
                w->blk += budget - w->overhead;
                w->split++;
            }
            break;
        }
        w->slots += w->split + 1;
        w->prefix[w->req + 1] = (int32_t)w->slots;
        budget -= remaining + w->overhead;
        w->req++;
        w->blk = 0;
        w->split = 0;
    }
    /* stopped inside request req, or after the whole of req - 1 */
    int64_t end_req = w->blk > 0 ? w->req : w->req - 1;
    part->end_req = (int32_t)end_req;
    part->end_block = (int32_t)(w->blk > 0 ? w->blk : kv_blocks(w->lens[end_req], w->block_n));
    /* an empty request ends at block 0 = kv_blocks, so it is never partial */
    set_partial(part, first, part->end_block != kv_blocks(w->lens[part->end_req], w->block_n));
}

static void build_default(const int32_t *lens, int64_t num_reqs, const sched_cfg *cfg,
                          mla_sched_part *parts, int32_t *prefix)
{
    int64_t total = 0;
    for (int64_t b = 0; b < num_reqs; b++)
        total += cost_blocks(lens[b], cfg->block_n) + cfg->overhead;
    int64_t payload = mla_ceil_div(total, cfg->num_parts) + cfg->overhead;
    default_walk w = {.lens = lens, .num_reqs = num_reqs, .block_n = cfg->block_n,
                      .overhead = cfg->overhead, .prefix = prefix};
    prefix[0] = 0;
    for (int64_t i = 0; i < cfg->num_parts; i++) {
        if (w.req < num_reqs)
            default_part(&w, payload, &parts[i]);
        else
            parts[i] = idle_part(num_reqs);
    }
}

/* ---- batch-invariant mode --------------------------------------------------- */

/* The next split to hand out: its request, its index there, and the cost of
 * all splits before it. */
typedef struct split_walk {
    const int32_t *lens;
    int64_t num_reqs;
    const sched_cfg *cfg;
    int64_t req, split, start;
} split_walk;

/* Block range [*begin, *end) of the cursor's split. */
static void split_range(const split_walk *w, int64_t *begin, int64_t *end)
{
    int64_t kv = kv_blocks(w->lens[w->req], w->cfg->block_n);
    *begin = w->split * w->cfg->split_blocks;
    *end = kv - *begin < w->cfg->split_blocks ? kv : *begin + w->cfg->split_blocks;
}

/* Each split is computed and written on its own, so each pays the overhead;
 * the empty split of an empty request costs one block, as in the default mode. */
static int64_t split_cost(const split_walk *w)
{
    int64_t begin, end;
    split_range(w, &begin, &end);
    return (end > begin ? end - begin : 1) + w->cfg->overhead;
}

/* Appends the cursor's split to `part` and moves to the next one. */
static void take_split(split_walk *w, mla_sched_part *part)
{
    int64_t begin, end;
    split_range(w, &begin, &end);
    w->start += split_cost(w);
    part->end_req = (int32_t)w->req;
    part->end_block = (int32_t)end;
    if (++w->split == split_count(w->lens[w->req], w->cfg)) {
        w->req++;
        w->split = 0;
    }
}

/* take_split repeated while the cursor is on one of its request's full
 * splits (all but the request's last, each split_blocks + overhead) whose
 * midpoint lies before `limit`: all at once, so that a part costs O(1) per
 * request and not O(splits) (a request may have 2^31 of them). */
static void take_full_splits(split_walk *w, int64_t limit, mla_sched_part *part)
{
    if (w->req >= w->num_reqs)
        return;
    const int64_t full = split_count(w->lens[w->req], w->cfg) - 1 - w->split;
    if (full <= 0)
        return; /* on the request's last split, or split_blocks may be anything */
    /* split_blocks < a request's blocks < 2^31 */
    const int64_t cost = w->cfg->split_blocks + w->cfg->overhead;
    const int64_t room = limit - w->start - cost / 2; /* split i is taken while i * cost < room */
    if (room <= 0)
        return;
    const int64_t n = mla_ceil_div(room, cost) < full ? mla_ceil_div(room, cost) : full;
    w->start += n * cost;
    w->split += n;
    part->end_req = (int32_t)w->req;
    part->end_block = (int32_t)(w->split * w->cfg->split_blocks);
}

/* floor(p * total / n) without forming p * total. */
static int64_t share_end(int64_t p, int64_t total, int64_t n)
{
    return p * (total / n) + p * (total % n) / n;
}

/* Fills one part: its first split, then every split whose midpoint lies
 * before `limit` (the end of this part's share); the last part takes all.
 * Taking the first split unconditionally keeps idle parts at the end; a part
 * then costs at most ceil(total / num_parts) - 1 + the costliest split. */
static void invariant_part(split_walk *w, int64_t limit, bool last, mla_sched_part *part)
{
    *part = (mla_sched_part){.begin_req = (int32_t)w->req,
                             .begin_block = (int32_t)(w->split * w->cfg->split_blocks),
                             .begin_split = (int32_t)w->split};
    do {
        take_split(w, part);
        take_full_splits(w, last ? INT64_MAX : limit, part);
    } while (w->req < w->num_reqs && (last || w->start + split_cost(w) / 2 < limit));
    set_partial(part, split_count(w->lens[part->begin_req], w->cfg) > 1,
                split_count(w->lens[part->end_req], w->cfg) > 1);
}

static void build_invariant(const int32_t *lens, int64_t num_reqs, const sched_cfg *cfg,
                            mla_sched_part *parts, int32_t *prefix)
{
    int64_t total = 0;
    prefix[0] = 0;
    for (int64_t b = 0; b < num_reqs; b++) {
        int64_t n = split_count(lens[b], cfg);
        prefix[b + 1] = (int32_t)(prefix[b] + n);
        total += cost_blocks(lens[b], cfg->block_n) + n * cfg->overhead;
    }
    split_walk w = {.lens = lens, .num_reqs = num_reqs, .cfg = cfg};
    int64_t np = cfg->num_parts;
    for (int64_t i = 0; i < np; i++) {
        if (w.req < num_reqs)
            invariant_part(&w, share_end(i + 1, total, np), i == np - 1, &parts[i]);
        else
            parts[i] = idle_part(num_reqs);
    }
}

/* ---- entry points ----------------------------------------------------------- */

mla_decode_sched_params mla_decode_sched_resolved(const mla_decode_sched_params *params)
{
    sched_cfg c = resolve_cfg(params);
    return (mla_decode_sched_params){.num_parts = c.num_parts, .block_n = c.block_n,
                                     .overhead = c.overhead, .split_blocks = c.split_blocks};
}

mla_status mla_decode_sched_check(const char *fn, const int32_t *seq_lens, int64_t num_reqs,
                                  const mla_decode_sched_params *params, int64_t *slots)
{
    sched_cfg cfg = resolve_cfg(params);
    const bool reads_lens = cfg.split_blocks > 0;
    mla_status st = check_counts(fn, seq_lens, num_reqs, reads_lens);
    if (st == MLA_OK)
        st = check_params(fn, params);
    return st == MLA_OK ? check_lens(fn, reads_lens ? seq_lens : NULL, num_reqs, &cfg, slots) : st;
}

mla_status mla_decode_sched_slot_bound(const char *fn, int64_t num_reqs, int64_t max_seq_len,
                                       const mla_decode_sched_params *params, int64_t *slots)
{
    sched_cfg cfg = resolve_cfg(params);
    mla_status st = check_counts(fn, NULL, num_reqs, false); /* the calls' own cap: int32 */
    if (st == MLA_OK)
        st = check_params(fn, params);
    if (st != MLA_OK)
        return st;
    if (max_seq_len < 0)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: max_seq_len %lld (need >= 0)", fn,
                        (long long)max_seq_len);
    if (cfg.split_blocks == 0) {
        *slots = num_reqs > 0 ? num_reqs + cfg.num_parts - 1 : 0; /* num_parts <= 2^20 */
        return MLA_OK;
    }
    /* split_count grows with the length; a length past int32 is no request's */
    int32_t longest = max_seq_len < INT32_MAX ? (int32_t)max_seq_len : INT32_MAX;
    if (!mla_mul_size(num_reqs, split_count(longest, &cfg), slots))
        return mla_fail(MLA_ERR_OVERFLOW, "%s: %lld requests x their splits overflow", fn,
                        (long long)num_reqs);
    return MLA_OK;
}

/* NULL params means every default, as does a zeroed struct. */
static mla_status build_decode_sched(const int32_t *seq_lens, int64_t num_reqs,
                                     const mla_decode_sched_params *params,
                                     mla_sched_part *parts, int64_t parts_capacity,
                                     int64_t *num_parts, int32_t *split_prefix)
{
    static const mla_decode_sched_params defaults = {0};
    const mla_decode_sched_params *p = params ? params : &defaults;
    sched_cfg cfg = resolve_cfg(p);
    mla_status st = check_args(seq_lens, num_reqs, p, parts, parts_capacity, num_parts,
                               split_prefix, &cfg);
    if (st != MLA_OK)
        return st;
    if (cfg.split_blocks > 0)
        build_invariant(seq_lens, num_reqs, &cfg, parts, split_prefix);
    else
        build_default(seq_lens, num_reqs, &cfg, parts, split_prefix);
    *num_parts = cfg.num_parts;
    return MLA_OK;
}

mla_status mla_build_decode_sched(const int32_t *seq_lens, int64_t num_reqs,
                                  const mla_decode_sched_params *params, mla_sched_part *parts,
                                  int64_t parts_capacity, int64_t *num_parts, int32_t *split_prefix)
{
    if (!mla_tracing())
        return build_decode_sched(seq_lens, num_reqs, params, parts, parts_capacity, num_parts,
                                  split_prefix);
    double start = mla_trace_begin();
    mla_status st = build_decode_sched(seq_lens, num_reqs, params, parts, parts_capacity, num_parts,
                                       split_prefix);
    mla_trace_build_decode_sched(start, st, num_reqs, parts_capacity);
    return st;
}
