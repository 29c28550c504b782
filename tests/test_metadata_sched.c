/*
 * Split-KV decode schedules (docs/semantics.md §5.3-5.5). The default mode is compared
 * field by field with a literal transcription of docs/semantics.md §5.3's pseudocode (and
 * with the worked example of docs/semantics.md §5.3); both modes are walked as a driver would
 * walk them (§5.4: per part, per request, per split) over thousands of random
 * batches, checking that every KV block lands in exactly one split, that
 * parts are contiguous and in order, that slots, split indices and partial
 * flags agree with split_prefix, and that part loads stay within proven
 * bounds. Batch-invariant mode must also give each request the same splits
 * whatever the batch around it and the part count.
 */
#include "support.h"

#include <omp.h>
#include <stdlib.h>
#include <string.h>

/* ---- helpers ------------------------------------------------------------------ */

static int64_t random_below(int64_t n)
{
    return (int64_t)(support_random() % (uint32_t)n);
}

static int64_t div_up(int64_t a, int64_t b)
{
    return a / b + (a % b != 0);
}

/* Blocks holding tokens: the end of a request's last range (docs/semantics.md §5.4). */
static int64_t kv_blocks(int32_t len, int64_t block_n)
{
    return div_up(len, block_n);
}

/* docs/semantics.md §5.3's nblk, the cost in blocks of a whole request (>= 1). */
static int64_t spec_nblk(int32_t len, int64_t block_n)
{
    return (len > 1 ? len - 1 : 0) / block_n + 1;
}

enum { MAX_REQS = 64, MAX_PARTS = 256 };

/* Builds with the given params and expects MLA_OK; returns the part count. */
static int64_t build(const int32_t *lens, int64_t num_reqs, const mla_decode_sched_params *p,
                     mla_sched_part *parts, int64_t capacity, int32_t *prefix)
{
    int64_t np = -1;
    mla_status st = mla_build_decode_sched(lens, num_reqs, p, parts, capacity, &np, prefix);
    if (st != MLA_OK)
        fail_msg("mla_build_decode_sched: %s: %s", mla_status_str(st), mla_last_error());
    return np;
}

static void assert_part(const mla_sched_part *got, int begin_req, int end_req, int begin_block,
                        int end_block, int begin_split, int first_partial, int last_partial)
{
    const mla_sched_part want = {begin_req, end_req, begin_block, end_block,
                                 begin_split, first_partial, last_partial, 0};
    if (memcmp(got, &want, sizeof want) != 0)
        fail_msg("part {req %d..%d, blocks %d..%d, split %d, partial %d/%d, pad %d}, want "
                 "{req %d..%d, blocks %d..%d, split %d, partial %d/%d, pad 0}",
                 got->begin_req, got->end_req, got->begin_block, got->end_block, got->begin_split,
                 got->first_partial, got->last_partial, got->pad, begin_req, end_req, begin_block,
                 end_block, begin_split, first_partial, last_partial);
}

static bool is_idle(const mla_sched_part *part, int64_t num_reqs)
{
    return part->begin_req >= num_reqs;
}

/* ---- oracle: docs/semantics.md §5.3 as written ------------------------------------------------ */

/* The pseudocode line by line (lastblk, the len == 0 cases and all). Idle
 * parts get whatever the pseudocode leaves in them; callers compare only
 * their begin_req. */
static void spec_sched(const int32_t *len, int64_t B, int64_t num_parts, int64_t block_n,
                       int64_t overhead, mla_sched_part *meta, int32_t *prefix)
{
    int64_t nblk[MAX_REQS], lastblk[MAX_REQS], total = 0;
    for (int64_t b = 0; b < B; b++) {
        nblk[b] = spec_nblk(len[b], block_n);
        lastblk[b] = nblk[b] - 1;
        total += nblk[b] + overhead;
    }
    int64_t payload = div_up(total, num_parts) + overhead;
    int64_t req = 0, blk = 0, split = 0, cum = 0;
    prefix[0] = 0;
    for (int64_t part = 0; part < num_parts; part++) {
        mla_sched_part *m = &meta[part];
        memset(m, 0, sizeof *m);
        m->begin_req = (int32_t)req;
        m->begin_block = (int32_t)blk;
        m->begin_split = (int32_t)split;
        m->first_partial = blk != 0;
        int64_t budget = payload;
        while (req < B) {
            int64_t remaining = nblk[req] - blk;
            if (budget >= remaining + overhead) {
                cum += split + 1;
                prefix[req + 1] = (int32_t)cum;
                budget -= remaining + overhead;
                req += 1;
                blk = 0;
                split = 0;
            } else {
                if (budget - overhead > 0) {
                    blk += budget - overhead;
                    split += 1;
                }
                break;
            }
        }
        if (m->begin_req >= B)
            continue; /* idle: "parts with begin_req >= B do nothing" */
        if (blk > 0) {
            m->end_req = (int32_t)req;
            m->end_block = (int32_t)blk;
        } else {
            m->end_req = (int32_t)(req - 1);
            m->end_block = (int32_t)(len[req - 1] == 0 ? 0 : lastblk[req - 1] + 1);
        }
        m->last_partial = m->end_block != lastblk[m->end_req] + 1 && len[m->end_req] != 0;
        if (m->begin_req == m->end_req)
            m->first_partial = m->last_partial = m->first_partial || m->last_partial;
    }
}

/* parts [np] and prefix are the pseudocode's schedule. */
static void expect_spec(const int32_t *lens, int64_t B, int64_t np, int64_t block_n,
                        int64_t overhead, const mla_sched_part *parts, const int32_t *prefix)
{
    mla_sched_part *want = malloc((size_t)np * sizeof *want);
    int32_t want_prefix[MAX_REQS + 1];
    spec_sched(lens, B, np, block_n, overhead, want, want_prefix);
    assert_memory_equal(prefix, want_prefix, (size_t)(B + 1) * sizeof *prefix);
    for (int64_t i = 0; i < np; i++) {
        if (is_idle(&want[i], B))
            assert_true(is_idle(&parts[i], B));
        else
            assert_memory_equal(&parts[i], &want[i], sizeof want[i]);
    }
    free(want);
}

/* ---- the driver's walk and its checks ------------------------------------------- */

/* What checking one schedule found, accumulated over many. */
typedef struct sched_stats {
    int64_t schedules, pieces;
    int64_t worst_over_ideal;     /* max over parts of load - ceil(total / num_parts) */
    int64_t worst_over_bound;     /* max of load - the bound asserted (<= 0)          */
    int64_t over_brief_bound;     /* parts with load > ideal + 1 + overhead           */
} sched_stats;

static sched_stats new_stats(void)
{
    return (sched_stats){.worst_over_ideal = INT64_MIN, .worst_over_bound = INT64_MIN};
}

/* A schedule to check, with its resolved parameters. */
typedef struct sched_case {
    const int32_t *lens;
    int64_t num_reqs, num_parts, block_n, overhead, split_blocks;
    const mla_sched_part *parts;
    const int32_t *prefix;
} sched_case;

/* Per-request progress of the walk. */
typedef struct walk_state {
    int64_t covered[MAX_REQS];   /* next block expected                */
    int64_t splits[MAX_REQS];    /* next split index expected          */
    int64_t touching[MAX_REQS];  /* parts whose range includes the req */
} walk_state;

static int64_t slot_count(const sched_case *c, int64_t b)
{
    return c->prefix[b + 1] - c->prefix[b];
}

/* The driver's unit of work: [begin, end) of request b as split `split`,
 * written to slot prefix[b] + split (or the output if b has one split).
 * Checks it continues where the request's last piece ended, and in
 * batch-invariant mode that it is exactly split `split` of the fixed grid.
 * Returns its cost in the units of docs/semantics.md §5.3 (an empty piece costs a block). */
static int64_t take_piece(const sched_case *c, walk_state *w, int64_t b, int64_t begin, int64_t end,
                          int64_t (*slot_range)[2])
{
    int64_t kv = kv_blocks(c->lens[b], c->block_n), split = w->splits[b];
    assert_int_equal(begin, w->covered[b]);
    assert_true(begin < end || (kv == 0 && end == 0)); /* empty only for an empty request */
    assert_true(end <= kv);
    assert_true(split < slot_count(c, b));
    if (c->split_blocks > 0) {
        assert_int_equal(begin, split * c->split_blocks);
        assert_int_equal(end, kv - begin < c->split_blocks ? kv : begin + c->split_blocks);
    }
    slot_range[c->prefix[b] + split][0] = begin;
    slot_range[c->prefix[b] + split][1] = end;
    w->covered[b] = end;
    w->splits[b] = split + 1;
    return (end > begin ? end - begin : 1) + c->overhead;
}

/* Request b's range in part `part` (docs/semantics.md §5.4), cut into pieces: one in the
 * default mode, one per split_blocks-aligned split in batch-invariant mode.
 * Returns the cost of the pieces; *max_piece gets the largest. */
static int64_t walk_request(const sched_case *c, walk_state *w, const mla_sched_part *part,
                            int64_t b, int64_t (*slot_range)[2], int64_t *max_piece)
{
    int64_t begin = b == part->begin_req ? part->begin_block : 0;
    int64_t end = b == part->end_req ? part->end_block : kv_blocks(c->lens[b], c->block_n);
    int64_t first_split = b == part->begin_req ? part->begin_split : 0;
    assert_int_equal(first_split, w->splits[b]);
    w->touching[b]++;
    int64_t cost = 0;
    do {
        int64_t cut = end;
        if (c->split_blocks > 0 && (begin / c->split_blocks + 1) * c->split_blocks < end)
            cut = (begin / c->split_blocks + 1) * c->split_blocks;
        int64_t piece = take_piece(c, w, b, begin, cut, slot_range);
        *max_piece = piece > *max_piece ? piece : *max_piece;
        cost += piece;
        begin = cut;
    } while (begin < end);
    return cost;
}

/* Idle parts are a suffix, and look the same: nothing to walk. */
static void check_idle(const sched_case *c, const mla_sched_part *part)
{
    int n = (int)c->num_reqs;
    assert_part(part, n, n - 1, 0, 0, 0, 0, 0);
}

/* The bound on a part's load asserted for this schedule: the default mode
 * never spends more than its payload, ideal + overhead; batch-invariant
 * parts hold whole splits, ideal - 1 + the largest split (see sched.c). */
static int64_t load_bound(const sched_case *c, int64_t ideal, int64_t max_piece)
{
    if (c->split_blocks <= 0)
        return ideal + c->overhead;
    return max_piece > 0 ? ideal + max_piece - 1 : ideal; /* no splits: all idle */
}

/* Walks every part and checks the schedule; slot_range [prefix[B]][2] gets
 * each slot's block range. */
static void check_schedule(const sched_case *c, sched_stats *stats, int64_t (*slot_range)[2])
{
    int64_t B = c->num_reqs, np = c->num_parts;
    walk_state w = {{0}, {0}, {0}};
    int64_t loads[MAX_PARTS], max_piece = 0, total = 0, spec_total = 0;
    int64_t next_req = 0, next_block = 0;
    bool idle_seen = false;
    assert_int_equal(c->prefix[0], 0);
    for (int64_t i = 0; i < np; i++) {
        const mla_sched_part *part = &c->parts[i];
        loads[i] = 0;
        if (is_idle(part, B)) {
            check_idle(c, part);
            idle_seen = true;
            continue;
        }
        assert_false(idle_seen);
        assert_int_equal(part->begin_req, next_req);
        assert_int_equal(part->begin_block, next_block);
        assert_true(part->begin_req <= part->end_req && part->end_req < B);
        assert_int_equal(part->pad, 0);
        for (int64_t b = part->begin_req; b <= part->end_req; b++)
            loads[i] += walk_request(c, &w, part, b, slot_range, &max_piece);
        /* the side of a request that is split is partial, in every part */
        assert_int_equal(part->first_partial, slot_count(c, part->begin_req) > 1);
        assert_int_equal(part->last_partial, slot_count(c, part->end_req) > 1);
        bool ends_request = part->end_block == kv_blocks(c->lens[part->end_req], c->block_n);
        next_req = ends_request ? part->end_req + 1 : part->end_req;
        next_block = ends_request ? 0 : part->end_block;
        total += loads[i];
    }
    assert_int_equal(next_req, B); /* every request reached its end */
    for (int64_t b = 0; b < B; b++) {
        assert_int_equal(w.covered[b], kv_blocks(c->lens[b], c->block_n));
        assert_int_equal(w.splits[b], slot_count(c, b));
        spec_total += spec_nblk(c->lens[b], c->block_n) + c->overhead;
        if (c->split_blocks > 0) {
            int64_t want = div_up(kv_blocks(c->lens[b], c->block_n), c->split_blocks);
            assert_int_equal(slot_count(c, b), want > 0 ? want : 1);
        } else {
            assert_int_equal(slot_count(c, b), w.touching[b]);
        }
    }
    if (c->split_blocks <= 0) {
        assert_true(c->prefix[B] <= B + np - 1); /* a part boundary cuts at most one request */
        assert_int_equal(total, spec_total + (c->prefix[B] - B) * c->overhead);
        total = spec_total;
    }
    int64_t ideal = div_up(total, np), bound = load_bound(c, ideal, max_piece);
    for (int64_t i = 0; i < np; i++) {
        if (loads[i] > bound)
            fail_msg("part %lld load %lld > bound %lld (ideal %lld)", (long long)i,
                     (long long)loads[i], (long long)bound, (long long)ideal);
        if (loads[i] - ideal > stats->worst_over_ideal)
            stats->worst_over_ideal = loads[i] - ideal;
        if (loads[i] - bound > stats->worst_over_bound)
            stats->worst_over_bound = loads[i] - bound;
        stats->over_brief_bound += loads[i] > ideal + 1 + c->overhead;
    }
    stats->schedules++;
    stats->pieces += c->prefix[B];
}

/* ---- random batches ------------------------------------------------------------- */

/* Lengths a server sees: empty, tiny, on and beside block boundaries, long. */
static int32_t random_len(int64_t block_n)
{
    int64_t scale = block_n > 1 ? 1 : 0; /* block_n = 1 stays short: a block per token */
    switch (random_below(6)) {
    case 0: return 0;
    case 1: return (int32_t)(1 + random_below(3));
    case 2: return (int32_t)(block_n * (1 + random_below(40)) + random_below(3) - 1);
    case 3: return (int32_t)random_below(scale ? 4096 : 300);
    case 4: return (int32_t)random_below(scale ? 40000 : 300);
    default: return (int32_t)random_below(300);
    }
}

static int64_t random_block_n(void)
{
    static const int64_t choices[] = {64, 64, 64, 1, 16, 100};
    return choices[random_below(6)];
}

static int64_t random_parts(void)
{
    switch (random_below(3)) {
    case 0: return 1 + random_below(8);
    case 1: return 1 + random_below(64);
    default: return 1 + random_below(MAX_PARTS);
    }
}

/* The overhead params ask for (0 is the default, 2; MLA_SCHED_NO_OVERHEAD
 * is 0) and the one they get. */
static int64_t random_overhead(void)
{
    static const int64_t choices[] = {MLA_SCHED_NO_OVERHEAD, 0, 1, 5, 5, 17};
    return choices[random_below(6)];
}

static int64_t overhead_used(int64_t asked)
{
    return asked == MLA_SCHED_NO_OVERHEAD ? 0 : asked == 0 ? 2 : asked;
}

static int64_t random_split_blocks(void)
{
    static const int64_t choices[] = {1, 2, 3, 4, 8, 16, 64, 1000};
    return choices[random_below(8)];
}

/* random_len keeps a request within 2600 blocks (40000 tokens of 16). */
enum { MAX_SPLITS_PER_REQ = 2600, MAX_SLOTS = MAX_REQS * MAX_SPLITS_PER_REQ + MAX_PARTS };

/* Builds and checks one random schedule in the given mode. */
static void random_schedule(bool invariant, sched_stats *stats, int64_t (*slot_range)[2])
{
    int32_t lens[MAX_REQS], prefix[MAX_REQS + 1];
    mla_sched_part parts[MAX_PARTS];
    mla_decode_sched_params p = {
        .num_parts = random_parts(),
        .block_n = random_block_n(),
        .overhead = random_overhead(),
        .split_blocks = invariant ? random_split_blocks() : 0,
    };
    int64_t B = random_below(MAX_REQS + 1);
    for (int64_t b = 0; b < B; b++)
        lens[b] = random_len(p.block_n);
    int64_t np = build(lens, B, &p, parts, MAX_PARTS, prefix);
    assert_int_equal(np, p.num_parts);
    sched_case c = {lens, B, np, p.block_n, overhead_used(p.overhead), p.split_blocks, parts,
                    prefix};
    check_schedule(&c, stats, slot_range);
    if (invariant)
        return;
    expect_spec(lens, B, np, p.block_n, overhead_used(p.overhead), parts, prefix);
}

static void report(const char *mode, const sched_stats *s)
{
    print_message("           %s: %lld schedules, %lld splits; worst load - ideal = %lld, "
                  "worst load - asserted bound = %lld, parts over ideal + 1 + overhead: %lld\n",
                  mode, (long long)s->schedules, (long long)s->pieces,
                  (long long)s->worst_over_ideal, (long long)s->worst_over_bound,
                  (long long)s->over_brief_bound);
}

static void test_random_default(void **state)
{
    (void)state;
    int64_t (*slot_range)[2] = malloc(MAX_SLOTS * sizeof *slot_range);
    sched_stats stats = new_stats();
    for (int t = 0; t < 10000; t++)
        random_schedule(false, &stats, slot_range);
    report("default", &stats);
    free(slot_range);
}

static void test_random_invariant(void **state)
{
    (void)state;
    int64_t (*slot_range)[2] = malloc(MAX_SLOTS * sizeof *slot_range);
    sched_stats stats = new_stats();
    for (int t = 0; t < 4000; t++)
        random_schedule(true, &stats, slot_range);
    report("batch-invariant", &stats);
    free(slot_range);
}

/* ---- batch invariance ----------------------------------------------------------- */

/* One probe request placed at random in random batches, with random part
 * counts and overheads: its slots and their block ranges never change. */
static void test_invariant_across_batches(void **state)
{
    (void)state;
    int64_t (*slot_range)[2] = malloc(MAX_SLOTS * sizeof *slot_range);
    static int64_t first[MAX_SPLITS_PER_REQ][2];
    sched_stats stats = new_stats();
    for (int trial = 0; trial < 200; trial++) {
        int64_t block_n = random_block_n(), split_blocks = random_split_blocks();
        int32_t probe = random_len(block_n);
        int64_t probe_slots = 0;
        for (int batch = 0; batch < 16; batch++) {
            int32_t lens[MAX_REQS], prefix[MAX_REQS + 1];
            mla_sched_part parts[MAX_PARTS];
            mla_decode_sched_params p = {random_parts(), block_n, random_overhead(), split_blocks};
            int64_t B = 1 + random_below(MAX_REQS), at = random_below(B);
            for (int64_t b = 0; b < B; b++)
                lens[b] = b == at ? probe : random_len(block_n);
            int64_t np = build(lens, B, &p, parts, MAX_PARTS, prefix);
            sched_case c = {lens, B, np, block_n, overhead_used(p.overhead), split_blocks, parts,
                            prefix};
            check_schedule(&c, &stats, slot_range);
            int64_t n = prefix[at + 1] - prefix[at];
            if (batch == 0) {
                probe_slots = n;
                memcpy(first, slot_range + prefix[at], (size_t)n * sizeof *first);
            }
            assert_int_equal(n, probe_slots);
            assert_memory_equal(slot_range + prefix[at], first, (size_t)n * sizeof *first);
        }
    }
    report("invariance", &stats);
    free(slot_range);
}

/* ---- fixed examples ------------------------------------------------------------- */

/* docs/semantics.md §5.3's worked example, every field. */
static void test_spec_example(void **state)
{
    (void)state;
    const int32_t lens[4] = {1000, 64, 0, 300};
    mla_decode_sched_params p = {.num_parts = 4, .block_n = 64, .overhead = 5};
    mla_sched_part parts[4];
    int32_t prefix[5];
    assert_int_equal(build(lens, 4, &p, parts, 4, prefix), 4);
    assert_part(&parts[0], 0, 0, 0, 11, 0, 1, 1);  /* req 0 [0, 11) as split 0        */
    assert_part(&parts[1], 0, 1, 11, 1, 1, 1, 0);  /* req 0 [11, 16) split 1, req 1   */
    assert_part(&parts[2], 2, 3, 0, 5, 0, 0, 0);   /* reqs 2 (empty) and 3            */
    assert_part(&parts[3], 4, 3, 0, 0, 0, 0, 0);   /* idle                            */
    const int32_t want_prefix[5] = {0, 2, 3, 4, 5};
    assert_memory_equal(prefix, want_prefix, sizeof want_prefix);
}

/* The same batch in batch-invariant mode, split_blocks = 4: request 0 has
 * splits [0,4) [4,8) [8,12) [12,16), request 3 [0,4) [4,5). Split costs are
 * 9 9 9 9 | 6 | 6 | 9 6 (blocks + 5, the empty request costing a block), 63
 * in all; shares end at 15, 31, 47; a split joins a part while its midpoint
 * is before the share's end. */
static void test_invariant_example(void **state)
{
    (void)state;
    const int32_t lens[4] = {1000, 64, 0, 300};
    mla_decode_sched_params p = {.num_parts = 4, .block_n = 64, .overhead = 5, .split_blocks = 4};
    mla_sched_part parts[4];
    int32_t prefix[5];
    assert_int_equal(build(lens, 4, &p, parts, 4, prefix), 4);
    assert_part(&parts[0], 0, 0, 0, 8, 0, 1, 1);   /* splits 0-1 of req 0 (mids 4, 13) */
    assert_part(&parts[1], 0, 0, 8, 12, 2, 1, 1);  /* split 2 (mid 22); split 3 at 31  */
    assert_part(&parts[2], 0, 2, 12, 0, 3, 1, 0);  /* split 3, reqs 1 and 2            */
    assert_part(&parts[3], 3, 3, 0, 5, 0, 1, 1);   /* both splits of req 3             */
    const int32_t want_prefix[5] = {0, 4, 5, 6, 8};
    assert_memory_equal(prefix, want_prefix, sizeof want_prefix);
}

/* A zero field is its default, as is NULL params: num_parts
 * omp_get_max_threads(), block_n 16, overhead 2 (what mla_decode runs
 * without a schedule of the caller's), no splits; negative num_parts,
 * block_n and split_blocks are defaults too. MLA_SCHED_NO_OVERHEAD is an
 * overhead of 0, checked against the docs/semantics.md §5.3 pseudocode. */
static void test_defaults(void **state)
{
    (void)state;
    const int32_t lens[6] = {1000, 64, 0, 300, 4097, 1};
    int64_t threads = omp_get_max_threads();
    mla_sched_part *want = malloc((size_t)threads * sizeof *want);
    mla_sched_part *got = malloc((size_t)threads * sizeof *got);
    int32_t want_prefix[7], got_prefix[7];
    const mla_decode_sched_params spelled = {threads, 16, 2, 0};
    assert_int_equal(build(lens, 6, &spelled, want, threads, want_prefix), threads);
    expect_spec(lens, 6, threads, 16, 2, want, want_prefix);
    const mla_decode_sched_params zeroed = {0}, negative = {-3, -64, 0, -2};
    const mla_decode_sched_params *all[3] = {NULL, &zeroed, &negative};
    for (int k = 0; k < 3; k++) {
        memset(got, 0x5a, (size_t)threads * sizeof *got);
        assert_int_equal(build(lens, 6, all[k], got, threads, got_prefix), threads);
        assert_memory_equal(got, want, (size_t)threads * sizeof *got);
        assert_memory_equal(got_prefix, want_prefix, sizeof want_prefix);
    }
    const mla_decode_sched_params no_overhead = {.overhead = MLA_SCHED_NO_OVERHEAD};
    assert_int_equal(build(lens, 6, &no_overhead, got, threads, got_prefix), threads);
    expect_spec(lens, 6, threads, 16, 0, got, got_prefix);
    free(got);
    free(want);
}

/* No requests (seq_lens may be NULL): every part idle, one slot count of 0.
 * Entries past num_parts and past split_prefix[B] are never touched. */
static void test_empty_batch_and_guards(void **state)
{
    (void)state;
    mla_sched_part parts[6];
    int32_t prefix[4];
    memset(parts, 0x5a, sizeof parts);
    memset(prefix, 0x5a, sizeof prefix);
    mla_decode_sched_params p = {.num_parts = 5, .block_n = 64, .overhead = 5};
    assert_int_equal(build(NULL, 0, &p, parts, 6, prefix), 5);
    for (int i = 0; i < 5; i++)
        assert_part(&parts[i], 0, -1, 0, 0, 0, 0, 0);
    assert_int_equal(prefix[0], 0);
    const int32_t lens[2] = {5000, 0};
    p.num_parts = 3;
    memset(parts, 0x5a, sizeof parts);
    assert_int_equal(build(lens, 2, &p, parts, 3, prefix), 3);
    unsigned char guard[sizeof parts[0]];
    memset(guard, 0x5a, sizeof guard);
    for (int i = 3; i < 6; i++)
        assert_memory_equal(&parts[i], guard, sizeof guard);
    /* nblk [79, 1], payload 35: request 0 is cut at 30 and 60 */
    assert_part(&parts[0], 0, 0, 0, 30, 0, 1, 1);
    assert_part(&parts[1], 0, 0, 30, 60, 1, 1, 1);
    assert_part(&parts[2], 0, 1, 60, 0, 2, 1, 0);
    assert_int_equal(prefix[1], 3);
    assert_int_equal(prefix[2], 4);
    assert_int_equal(prefix[3], 0x5a5a5a5a);
}

/* The largest legal sizes stay exact: lengths of INT32_MAX tokens with one
 * token per block, and an overhead of INT32_MAX. */
static void test_extremes(void **state)
{
    (void)state;
    const int32_t lens[4] = {INT32_MAX, 0, INT32_MAX, 1};
    static int64_t slot_range[4 + MAX_PARTS][2];
    sched_stats stats = new_stats();
    const int64_t overheads[3] = {MLA_SCHED_NO_OVERHEAD, 5, INT32_MAX};
    const int64_t splits[3] = {0, INT64_C(1) << 29, INT64_C(1) << 40};
    for (int k = 0; k < 9; k++) {
        mla_decode_sched_params p = {MAX_PARTS, 1, overheads[k % 3], splits[k / 3]};
        mla_sched_part parts[MAX_PARTS];
        int32_t prefix[5];
        int64_t np = build(lens, 4, &p, parts, MAX_PARTS, prefix);
        sched_case c = {lens, 4, np, 1, overhead_used(p.overhead), p.split_blocks, parts, prefix};
        check_schedule(&c, &stats, slot_range);
    }
}

/* Batch-invariant mode with 2^31 - 1 splits (blocks and splits of one
 * token): a part's walk skips a request's full splits at once, so the
 * schedule takes microseconds, not the seconds (a minute under ASan) of a
 * walk split by split. Four parts split the cost of (overhead 0) INT32_MAX - 2
 * + 1 + 1 blocks at their midpoints: parts 0-2 each end inside request 0 at
 * the next quarter, the last takes the rest (a part's ends are partial where
 * their request has more than one split). */
static void test_invariant_many_splits(void **state)
{
    (void)state;
    const int32_t lens[3] = {INT32_MAX - 2, 0, 1};
    const mla_decode_sched_params p = {4, 1, MLA_SCHED_NO_OVERHEAD, 1};
    mla_sched_part parts[4];
    int32_t prefix[4];
    double t0 = omp_get_wtime();
    assert_int_equal(build(lens, 3, &p, parts, 4, prefix), 4);
    double seconds = omp_get_wtime() - t0;
    if (seconds > 1.0)
        fail_msg("2^31 splits scheduled in %.1f s: walked split by split", seconds);
    assert_int_equal(prefix[1], INT32_MAX - 2);
    assert_int_equal(prefix[2], INT32_MAX - 1);
    assert_int_equal(prefix[3], INT32_MAX);
    const int64_t total = (int64_t)INT32_MAX - 2 + 1 + 1;
    int64_t begin = 0;
    for (int i = 0; i < 3; i++) {
        /* the split [j, j + 1) is taken while j + 1/2 < the share's end, cost 1 each (1/2 -> 0) */
        const int64_t end = (i + 1) * (total / 4) + (i + 1) * (total % 4) / 4;
        assert_part(&parts[i], 0, 0, (int)begin, (int)end, (int)begin, 1, 1); /* request 0 split */
        begin = end;
    }
    assert_part(&parts[3], 0, 2, (int)begin, 1, (int)begin, 1, 0);
}

/* ---- bad input ------------------------------------------------------------------ */

/* Calls, given bad_input, with sentinels in every output; expects
 * `status`, a message holding `needle`, and every sentinel intact. */
static void expect_failure(const char *bad_input, const int32_t *lens, int64_t num_reqs,
                           const mla_decode_sched_params *p, int64_t capacity, mla_status status,
                           const char *needle)
{
    mla_sched_part parts[8];
    int32_t prefix[8];
    int64_t np = -77;
    memset(parts, 0x5a, sizeof parts);
    memset(prefix, 0x5a, sizeof prefix);
    support_expect_reject("mla_build_decode_sched", bad_input,
                          mla_build_decode_sched(lens, num_reqs, p, parts, capacity, &np, prefix),
                          status, needle);
    unsigned char guard[sizeof parts];
    memset(guard, 0x5a, sizeof guard);
    assert_memory_equal(parts, guard, sizeof parts);
    assert_memory_equal(prefix, guard, sizeof prefix);
    assert_int_equal(np, -77);
}

static void test_bad_input(void **state)
{
    (void)state;
    const int32_t lens[6] = {100, 0, 5000, 64, -3, 7};
    const int32_t huge[2] = {INT32_MAX, INT32_MAX};
    mla_decode_sched_params p = {.num_parts = 4};
    expect_failure("seq_lens entry -3", lens, 6, &p, 8, MLA_ERR_INVALID_ARGUMENT,
                   "seq_lens[4] = -3 is negative");
    p.split_blocks = 2;
    expect_failure("seq_lens entry -3 with params split_blocks 2", lens, 6, &p, 8,
                   MLA_ERR_INVALID_ARGUMENT, "seq_lens[4] = -3 is negative");
    p.split_blocks = 0;
    expect_failure("num_reqs -1", lens, -1, &p, 8, MLA_ERR_INVALID_ARGUMENT,
                   "num_reqs = -1 is negative");
    expect_failure("seq_lens NULL", NULL, 3, &p, 8, MLA_ERR_INVALID_ARGUMENT, "NULL seq_lens");
    expect_failure("parts_capacity 3 below params num_parts 4", lens, 4, &p, 3, MLA_ERR_CAPACITY,
                   "parts_capacity = 3 < num_parts = 4");
    expect_failure("parts_capacity -1", lens, 4, &p, -1, MLA_ERR_CAPACITY,
                   "parts_capacity = -1 < num_parts = 4");
    mla_decode_sched_params threads = {0};
    expect_failure("parts_capacity below the default params num_parts (threads)", lens, 4, &threads,
                   omp_get_max_threads() - 1, MLA_ERR_CAPACITY, "(omp_get_max_threads())");
    mla_decode_sched_params absurd = {.num_parts = (INT64_C(1) << 20) + 1};
    expect_failure("params num_parts 2^20 + 1", lens, 4, &absurd, INT64_MAX,
                   MLA_ERR_INVALID_ARGUMENT, "num_parts = 1048577 exceeds 1048576");
    /* sizes the int32 fields cannot hold; none of these reads seq_lens past [1] */
    expect_failure("num_reqs 2^31 (past int32)", lens, (int64_t)INT32_MAX + 1, &p, 8,
                   MLA_ERR_OVERFLOW, "num_reqs = 2147483648 does not fit int32");
    p.num_parts = 2;
    expect_failure("num_reqs + params num_parts - 1 past int32", lens, INT32_MAX, &p, 8,
                   MLA_ERR_OVERFLOW,
                   "num_reqs + num_parts - 1 = 2147483648 split slots do not fit int32");
    mla_decode_sched_params fine = {.num_parts = 2, .block_n = 1, .split_blocks = 1};
    expect_failure("splits of long requests past int32", huge, 2, &fine, 8, MLA_ERR_OVERFLOW,
                   "4294967294 splits do not fit int32");
    mla_decode_sched_params heavy = {.num_parts = 2, .overhead = (int64_t)INT32_MAX + 1};
    expect_failure("params overhead past int32", lens, 4, &heavy, 8, MLA_ERR_OVERFLOW,
                   "overhead = 2147483648 does not fit int32");
    mla_decode_sched_params negative = {.num_parts = 2, .overhead = -2};
    expect_failure("params overhead -2 (neither a cost nor MLA_SCHED_NO_OVERHEAD)", lens, 4,
                   &negative, 8, MLA_ERR_INVALID_ARGUMENT, "overhead = -2");

    mla_sched_part parts[4];
    int32_t prefix[8];
    int64_t np;
    support_expect_reject("mla_build_decode_sched", "parts NULL",
                          mla_build_decode_sched(lens, 4, &p, NULL, 4, &np, prefix),
                          MLA_ERR_INVALID_ARGUMENT, "NULL parts");
    support_expect_reject("mla_build_decode_sched", "num_parts (the output) NULL",
                          mla_build_decode_sched(lens, 4, &p, parts, 4, NULL, prefix),
                          MLA_ERR_INVALID_ARGUMENT, "NULL num_parts");
    support_expect_reject("mla_build_decode_sched", "split_prefix NULL",
                          mla_build_decode_sched(lens, 4, &p, parts, 4, &np, NULL),
                          MLA_ERR_INVALID_ARGUMENT, "NULL split_prefix");
}

/* The largest explicit part count is accepted. */
static void test_max_parts(void **state)
{
    (void)state;
    int64_t n = INT64_C(1) << 20;
    mla_sched_part *parts = malloc((size_t)n * sizeof *parts);
    const int32_t lens[3] = {70000, 1, 0};
    int32_t prefix[4];
    mla_decode_sched_params p = {.num_parts = n};
    assert_int_equal(build(lens, 3, &p, parts, n, prefix), n);
    assert_true(prefix[3] <= 3 + n - 1);
    assert_true(is_idle(&parts[n - 1], 3));
    free(parts);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_example),
        cmocka_unit_test(test_invariant_many_splits),
        cmocka_unit_test(test_invariant_example),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_empty_batch_and_guards),
        cmocka_unit_test(test_random_default),
        cmocka_unit_test(test_random_invariant),
        cmocka_unit_test(test_invariant_across_batches),
        cmocka_unit_test(test_extremes),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_max_parts),
    };
    return cmocka_run_group_tests_name("metadata_sched", tests, NULL, NULL);
}
