/*
 * libFuzzer target: the metadata builders (docs/semantics.md §2, §5.3) and
 * the library's queries (fuzz.h says what every call is checked for).
 *
 *   batch    mla_build_batch_metadata, then mla_update_block_table on the
 *            metadata it built, against §2.1-2.3 computed here
 *   reorder  mla_reorder_batch against §2.4's minimal reorder
 *   split    mla_split_batch against §2.4's four rules
 *   chunks   mla_chunk_workspace_tokens, mla_chunk_workspace_bytes,
 *            mla_chunk_plan_create (info, destroy) against §2.6
 *   sched    mla_build_decode_sched: every block of every request in
 *            exactly one part, in order, split slots and flags as §5.3 says
 *   queries  mla_kv_cache_shape, mla_block_size_supported,
 *            mla_backend_validate, mla_force_backend, mla_caps_format, the
 *            name lookups (with values no enum has), mla_cpu_caps,
 *            mla_config_default, mla_default_threads
 *   backends mla_backend.h's entry points: mla_cpu_caps_decode (pure, and
 *            clearing a CPUID or XCR0 bit never adds a capability),
 *            mla_backend_find, mla_select_backend (what it picks validates
 *            the config), mla_backend_route, mla_register_backend (bad
 *            descriptors refused; new backends that never outrank ref, so
 *            the other entry points' choices stay as they were)
 */
#include "fuzz.h"

#include <limits.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

static int64_t max64(int64_t a, int64_t b)
{
    return a > b ? a : b;
}

/* a + b wrapped to int32, as a caller's buggy offsets might be. */
static int32_t wrap32(int64_t a, int64_t b)
{
    return (int32_t)(uint32_t)((uint64_t)a + (uint64_t)b);
}

/* a / b rounded up, a >= 0, b >= 1. */
static int64_t ceil_div(int64_t a, int64_t b)
{
    return a / b + (a % b != 0);
}

#define MAX_REQS 8

/* ---- batch metadata ------------------------------------------------------------ */

typedef struct batch_case {
    mla_request reqs[MAX_REQS];
    int32_t ids[MAX_REQS][64];
    int64_t B;
    mla_block_layout layout;
    int64_t m, span; /* kernel blocks per manager block; positions per kernel block */
} batch_case;

/* The layout: kernel blocks of 1..8, managers of 1..3 of them, context
 * parallelism now and then. */
static void make_layout(fz *f, batch_case *c)
{
    mla_block_layout *l = &c->layout;
    l->kernel_block_size = fz_edge(f, fz_in(f, 1, 8));
    const int64_t m = fz_in(f, 1, 3);
    l->manager_block_size = fz_edge(f, fz_mul(l->kernel_block_size, m) > 0
                                           ? l->kernel_block_size * m : 1);
    l->cp_world_size = 1, l->cp_rank = 0, l->cp_interleave = 1;
    if (fz_u8(f) < 64) {
        l->cp_world_size = fz_in(f, 2, 3);
        l->cp_rank = fz_in(f, 0, l->cp_world_size - 1);
        const int64_t bs = l->kernel_block_size > 0 ? l->kernel_block_size : 1;
        int64_t i = fz_in(f, 1, 8);
        while (bs % i != 0)
            i--;
        l->cp_interleave = i;
    }
    l->cp_world_size = fz_edge(f, l->cp_world_size);
    l->cp_rank = fz_edge(f, l->cp_rank);
    l->cp_interleave = fz_edge(f, l->cp_interleave);
}

/* The layout the call reads (mla.h): a block size of 0 is the other one
 * (when that one is positive), a world size or interleave of 0 is 1. */
static mla_block_layout resolved_layout(const mla_block_layout *given)
{
    const int64_t kernel = given->kernel_block_size, manager = given->manager_block_size;
    mla_block_layout l = *given;
    l.manager_block_size = manager == 0 && kernel > 0 ? kernel : manager;
    l.kernel_block_size = kernel == 0 && manager > 0 ? manager : kernel;
    l.cp_world_size = given->cp_world_size == 0 ? 1 : given->cp_world_size;
    l.cp_interleave = given->cp_interleave == 0 ? 1 : given->cp_interleave;
    return l;
}

/* Requests whose block ids hold their sequences (clean); cols fits them. */
static void make_requests(fz *f, batch_case *c)
{
    const mla_block_layout resolved = resolved_layout(&c->layout), *l = &resolved;
    /* m as the library expands block ids, whatever the context parallelism
     * (a hostile cp_world_size of 2^63 - 1 is valid with 1-token blocks) */
    const bool blocks_sane = l->kernel_block_size >= 1 && l->manager_block_size >= 1 &&
                             l->manager_block_size % l->kernel_block_size == 0;
    c->m = blocks_sane ? l->manager_block_size / l->kernel_block_size : 1;
    c->span = blocks_sane && l->cp_world_size >= 1 ? fz_mul(l->kernel_block_size, l->cp_world_size)
                                                   : 1;
    c->B = fz_edge(f, fz_in(f, 0, 6));
    int64_t cols = 0;
    for (int64_t r = 0; r < MAX_REQS; r++) {
        mla_request *q = &c->reqs[r];
        q->num_computed_tokens = fz_edge(f, fz_in(f, 0, 40));
        q->num_scheduled_tokens = fz_edge(f, fz_in(f, 0, 12));
        q->num_prompt_tokens = fz_edge(f, fz_in(f, 0, 60));
        const int64_t len = fz_add(q->num_computed_tokens, q->num_scheduled_tokens);
        int64_t need = len >= 0 && c->span > 0 && c->m > 0 ? ceil_div(ceil_div(len, c->span), c->m)
                                                           : 0;
        need = min64(fz_pad(need, fz_in(f, 0, 1)), 64);
        for (int64_t k = 0; k < need; k++)
            c->ids[r][k] = (int32_t)fz_edge(f, fz_in(f, 0, 60));
        q->num_block_ids = fz_edge(f, need);
        q->block_ids = fz_null(f) ? NULL : c->ids[r];
        cols = max64(cols, fz_mul(need, c->m));
    }
    c->layout.max_blocks_per_req = fz_edge(f, fz_pad(cols, fz_in(f, 0, 2)));
}

/* The documented rules for the layout and the requests (mla.h,
 * docs/semantics.md §2). */
static fz_expect batch_verdict(const batch_case *c, int64_t *tokens)
{
    const mla_block_layout resolved = resolved_layout(&c->layout), *l = &resolved;
    fz_expect e = FZ_OK;
    if (c->B > MAX_REQS)
        return FZ_EITHER; /* more requests than the case holds (the library would read them): skipped */
    e = fz_unless(c->B < 0, e);
    e = fz_unless(l->kernel_block_size < 1 || l->manager_block_size < 1, e);
    if (e == FZ_REJECT)
        return e;
    e = fz_unless(l->manager_block_size % l->kernel_block_size != 0 || l->max_blocks_per_req < 0 ||
                      l->cp_world_size < 1 || l->cp_rank < 0 || l->cp_rank >= l->cp_world_size ||
                      l->cp_interleave < 1 ||
                      (l->cp_world_size > 1 && l->kernel_block_size % l->cp_interleave != 0) ||
                      fz_mul(l->kernel_block_size, l->cp_world_size) < 0,
                  e);
    if (e == FZ_REJECT)
        return e;
    const int64_t m = l->manager_block_size / l->kernel_block_size;
    const int64_t span = l->kernel_block_size * l->cp_world_size;
    int64_t total = 0;
    for (int64_t r = 0; r < c->B; r++) {
        const mla_request *q = &c->reqs[r];
        e = fz_unless(q->num_computed_tokens < 0 || q->num_scheduled_tokens < 0 ||
                          q->num_prompt_tokens < 0,
                      e);
        if (e == FZ_REJECT)
            return e;
        const int64_t len = fz_add(q->num_computed_tokens, q->num_scheduled_tokens);
        total = fz_add(total, q->num_scheduled_tokens);
        e = fz_unless(len < 0 || len > INT32_MAX || total < 0 || total > INT32_MAX, e);
        e = fz_unless(q->num_block_ids < 0 || (q->num_block_ids > 0 && !q->block_ids), e);
        const int64_t kernel_blocks = fz_mul(q->num_block_ids, m);
        e = fz_unless(kernel_blocks < 0 || kernel_blocks > l->max_blocks_per_req, e);
        if (e == FZ_REJECT)
            return e;
        if (q->num_block_ids > 64)
            return FZ_EITHER; /* valid, but more ids than the case holds: skipped */
        e = fz_unless(ceil_div(len, span) > kernel_blocks, e);
        for (int64_t k = 0; k < q->num_block_ids; k++) {
            const int64_t b = q->block_ids[k];
            /* its kernel ids fit int32, its slots int64 */
            e = fz_unless(b < 0 || fz_mul(b + 1, m) < 0 || fz_mul(b + 1, m) - 1 > INT32_MAX ||
                              fz_mul(b + 1, l->manager_block_size) < 0,
                          e);
        }
    }
    *tokens = total;
    return e;
}

/* §2.3: the slot of position p of request r, -1 when another rank keeps it. */
static int64_t slot_of(const batch_case *c, int64_t r, int64_t p)
{
    const mla_block_layout resolved = resolved_layout(&c->layout), *l = &resolved;
    const int64_t bs = l->kernel_block_size, W = l->cp_world_size, I = l->cp_interleave;
    const int64_t vb = bs * W, off = p % vb, blk = p / vb;
    if (W > 1 && (off / I) % W != l->cp_rank)
        return -1;
    const int64_t local = W > 1 ? off / (W * I) * I + off % I : off;
    const int64_t kernel_block = (int64_t)c->reqs[r].block_ids[blk / c->m] * c->m + blk % c->m;
    return kernel_block * bs + local;
}

typedef struct md_bufs {
    fz_buf *qsl, *seq_lens, *positions, *slots, *table;
    int64_t slots_len;
} md_bufs;

static void expect_i64(const char *fn, const char *what, int64_t i, int64_t got, int64_t want)
{
    if (got != want)
        fz_fail("%s: %s[%lld] = %lld, want %lld", fn, what, (long long)i, (long long)got,
                (long long)want);
}

/* block_table and slot_mapping of md against the layout, from the positions
 * md holds. */
static void check_slots_and_table(const char *fn, const batch_case *c, const mla_batch_metadata *md,
                                  int64_t T)
{
    const int64_t cols = c->layout.max_blocks_per_req;
    for (int64_t r = 0; r < c->B; r++) {
        const mla_request *q = &c->reqs[r];
        for (int64_t k = 0; k < cols; k++) {
            int64_t want = k < q->num_block_ids * c->m
                               ? (int64_t)q->block_ids[k / c->m] * c->m + k % c->m
                               : 0;
            expect_i64(fn, "block_table", r * cols + k, md->block_table[r * cols + k], want);
        }
        for (int64_t t = md->query_start_loc[r]; t < md->query_start_loc[r + 1]; t++)
            expect_i64(fn, "slot_mapping", t, md->slot_mapping[t], slot_of(c, r, md->positions[t]));
    }
    for (int64_t t = T; t < md->slot_mapping_len; t++)
        expect_i64(fn, "slot_mapping (padding)", t, md->slot_mapping[t], -1);
}

static void run_batch(fz *f)
{
    batch_case c;
    memset(&c, 0, sizeof c);
    make_layout(f, &c);
    make_requests(f, &c);
    int64_t T = 0;
    fz_expect e = batch_verdict(&c, &T);
    if (e == FZ_REJECT && !f->hostile)
        fz_fail("harness: a clean batch is invalid");
    if (e == FZ_EITHER)
        return;
    const int64_t B = c.B >= 0 && c.B <= MAX_REQS ? c.B : 0;
    const int64_t cols = c.layout.max_blocks_per_req;
    const int64_t cells = fz_mul(B, cols);
    if (e != FZ_REJECT && (T > 4096 || !fz_fits(fz_mul(cells, 4))))
        return;
    md_bufs b;
    b.slots_len = fz_edge(f, fz_pad(T, fz_in(f, 0, 3)));
    b.qsl = fz_alloc("query_start_loc", (size_t)(B + 1) * 4, 0, true);
    b.seq_lens = fz_alloc("seq_lens", (size_t)B * 4, 0, true);
    b.positions = fz_alloc("positions", (size_t)(e != FZ_REJECT ? T : 0) * 8, 0, true);
    b.slots = fz_alloc("slot_mapping",
                       (size_t)(e != FZ_REJECT && b.slots_len >= T && b.slots_len <= T + 3
                                    ? b.slots_len : 0) * 8, 0, true);
    b.table = fz_alloc("block_table", (size_t)(cells > 0 && cells <= (1 << 16) ? cells : 0) * 4, 0,
                       true);
    if (!b.qsl || !b.seq_lens || !b.positions || !b.slots || !b.table)
        return;
    if (e != FZ_REJECT && b.slots_len > T + 3)
        return; /* valid, but more padding than allocated */
    mla_batch_metadata md = {
        .query_start_loc = fz_null(f) ? NULL : (int32_t *)b.qsl->p,
        .seq_lens = fz_null(f) ? NULL : (int32_t *)b.seq_lens->p,
        .positions = fz_null(f) ? NULL : (int64_t *)b.positions->p,
        .slot_mapping = fz_null(f) ? NULL : (int64_t *)b.slots->p,
        .slot_mapping_len = b.slots_len,
        .block_table = fz_null(f) ? NULL : (int32_t *)b.table->p,
        .num_actual_tokens = -7, .max_query_len = -7, .max_seq_len = -7};
    e = fz_unless(!md.query_start_loc || (B > 0 && !md.seq_lens) || (T > 0 && !md.positions) ||
                      b.slots_len < T || (b.slots_len > 0 && !md.slot_mapping) ||
                      (cells > 0 && !md.block_table),
                  e);
    e = fz_unless(cells < 0, e);
    if (e != FZ_REJECT) {
        fz_allow(b.qsl, 0, b.qsl->bytes);
        fz_allow(b.seq_lens, 0, b.seq_lens->bytes);
        fz_allow(b.positions, 0, b.positions->bytes);
        fz_allow(b.slots, 0, b.slots->bytes);
        fz_allow(b.table, 0, b.table->bytes);
    }
    const bool no_layout = fz_null(f), no_md = fz_null(f), no_reqs = fz_null(f);
    e = fz_unless(no_layout || no_md || (no_reqs && c.B > 0), e);
    const mla_batch_metadata md_in = md;
    fz_before();
    mla_status st = mla_build_batch_metadata(no_reqs ? NULL : c.reqs, c.B,
                                             no_layout ? NULL : &c.layout, no_md ? NULL : &md);
    if (!fz_after("mla_build_batch_metadata", st, e, NULL)) {
        if (memcmp(&md, &md_in, sizeof md) != 0)
            fz_fail("mla_build_batch_metadata failed but changed *md");
        return;
    }
    /* §2.1 */
    static const char fn[] = "mla_build_batch_metadata";
    int64_t start = 0, max_q = 0, max_s = 0;
    for (int64_t r = 0; r < B; r++) {
        const mla_request *q = &c.reqs[r];
        const int64_t len = q->num_computed_tokens + q->num_scheduled_tokens;
        expect_i64(fn, "query_start_loc", r, md.query_start_loc[r], start);
        expect_i64(fn, "seq_lens", r, md.seq_lens[r], len);
        for (int64_t j = 0; j < q->num_scheduled_tokens; j++)
            expect_i64(fn, "positions", start + j, md.positions[start + j],
                       q->num_computed_tokens + j);
        start += q->num_scheduled_tokens;
        max_q = max64(max_q, q->num_scheduled_tokens);
        max_s = max64(max_s, len);
    }
    expect_i64(fn, "query_start_loc", B, md.query_start_loc[B], T);
    expect_i64(fn, "num_actual_tokens", 0, md.num_actual_tokens, T);
    expect_i64(fn, "max_query_len", 0, md.max_query_len, max_q);
    expect_i64(fn, "max_seq_len", 0, md.max_seq_len, max_s);
    check_slots_and_table(fn, &c, &md, T);

    /* a second KV-cache group: new block ids over the same requests, and
     * (hostile) query_start_loc or a position spoiled */
    for (int64_t r = 0; r < B; r++)
        for (int64_t k = 0; k < c.reqs[r].num_block_ids; k++)
            c.ids[r][k] = (int32_t)fz_edge(f, fz_in(f, 0, 60));
    const uint8_t spoil = f->hostile ? fz_u8(f) : 255;
    if (spoil < 16 && T > 0)
        md.positions[spoil % T] = fz_edge(f, -1);
    else if (spoil < 32)
        md.query_start_loc[spoil % (B + 1)] += 1;
    fz_expect u = batch_verdict(&c, &T); /* ids change, their count does not */
    u = fz_unless(md.query_start_loc[0] != 0, u);
    for (int64_t r = 0; r < B && u != FZ_REJECT; r++) {
        u = fz_unless((int64_t)md.query_start_loc[r + 1] - md.query_start_loc[r] !=
                          c.reqs[r].num_scheduled_tokens,
                      u);
        for (int64_t t = md.query_start_loc[r]; t < md.query_start_loc[r + 1] && u != FZ_REJECT; t++)
            u = fz_unless(md.positions[t] < 0 || md.positions[t] >= c.reqs[r].num_computed_tokens +
                                                                      c.reqs[r].num_scheduled_tokens,
                          u);
    }
    /* update writes only the block table and the slots */
    memset(b.qsl->allowed, 0, b.qsl->total);
    memset(b.seq_lens->allowed, 0, b.seq_lens->total);
    memset(b.positions->allowed, 0, b.positions->total);
    const mla_batch_metadata before = md;
    fz_before();
    st = mla_update_block_table(c.reqs, c.B, &c.layout, &md);
    if (memcmp(&md, &before, sizeof md) != 0)
        fz_fail("mla_update_block_table changed a field of *md");
    if (fz_after("mla_update_block_table", st, u, NULL))
        check_slots_and_table("mla_update_block_table", &c, &md, T);
}

/* ---- reorder and split ---------------------------------------------------------- */

static mla_region region_of(const mla_request *q, int64_t tau)
{
    if (q->num_computed_tokens == 0)
        return MLA_REGION_PREFILL;
    if (q->num_scheduled_tokens > tau)
        return MLA_REGION_LONG_EXTEND;
    return q->num_computed_tokens < q->num_prompt_tokens ? MLA_REGION_SHORT_EXTEND
                                                         : MLA_REGION_DECODE;
}

static void run_reorder(fz *f)
{
    const int64_t B = fz_edge(f, fz_in(f, 0, MAX_REQS));
    const int64_t tau = fz_edge(f, fz_in(f, 1, 4));
    mla_request reqs[MAX_REQS];
    memset(reqs, 0, sizeof reqs);
    for (int r = 0; r < MAX_REQS; r++) {
        reqs[r].num_computed_tokens = fz_edge(f, fz_u8(f) < 80 ? 0 : fz_in(f, 1, 6));
        reqs[r].num_scheduled_tokens = fz_edge(f, fz_in(f, 0, 6));
        reqs[r].num_prompt_tokens = fz_edge(f, fz_in(f, 0, 8));
    }
    const bool counts_wanted = fz_bit(f);
    fz_buf *order = fz_alloc("new_order", MAX_REQS * 4, 0, true);
    fz_buf *counts = fz_alloc("region_counts", MLA_REGION_COUNT * 8, 0, true);
    const bool no_reqs = fz_null(f), no_order = fz_null(f);
    fz_expect e = fz_unless(B < 0 || B > INT32_MAX || (B > 0 && (no_reqs || no_order)) || tau < 1,
                            FZ_OK);
    for (int64_t r = 0; r < B && r < MAX_REQS; r++)
        e = fz_unless(reqs[r].num_computed_tokens < 0 || reqs[r].num_scheduled_tokens < 0 ||
                          reqs[r].num_prompt_tokens < 0,
                      e);
    if (e != FZ_REJECT && B > MAX_REQS)
        return;
    if (e != FZ_REJECT) {
        fz_allow(order, 0, (size_t)B * 4);
        if (counts_wanted)
            fz_allow(counts, 0, counts->bytes);
    }
    fz_before();
    mla_status st = mla_reorder_batch(no_reqs ? NULL : reqs, B, tau,
                                      no_order ? NULL : (int32_t *)order->p,
                                      counts_wanted ? (int64_t *)counts->p : NULL);
    if (!fz_after("mla_reorder_batch", st, e, NULL))
        return;
    /* §2.4: requests inside their region stay; the misplaced ones, region
     * by region and in index order, fill the vacated positions in order */
    int64_t n[MLA_REGION_COUNT] = {0};
    mla_region region[MAX_REQS], target[MAX_REQS];
    for (int64_t r = 0; r < B; r++)
        n[region[r] = region_of(&reqs[r], tau)]++;
    int64_t at = 0;
    for (int g = 0; g < MLA_REGION_COUNT; g++)
        for (int64_t k = 0; k < n[g]; k++)
            target[at++] = (mla_region)g;
    int32_t want[MAX_REQS];
    int64_t vacated[MAX_REQS], nv = 0, next = 0;
    for (int64_t i = 0; i < B; i++) {
        want[i] = (int32_t)i;
        if (region[i] != target[i])
            vacated[nv++] = i;
    }
    for (int g = 0; g < MLA_REGION_COUNT; g++)
        for (int64_t r = 0; r < B; r++)
            if (region[r] == (mla_region)g && region[r] != target[r])
                want[vacated[next++]] = (int32_t)r;
    const int32_t *got = (const int32_t *)order->p;
    for (int64_t i = 0; i < B; i++)
        expect_i64("mla_reorder_batch", "new_order", i, got[i], want[i]);
    if (counts_wanted)
        for (int g = 0; g < MLA_REGION_COUNT; g++)
            expect_i64("mla_reorder_batch", "region_counts", g, ((int64_t *)counts->p)[g], n[g]);
}

static void run_split(fz *f)
{
    const int64_t B = fz_edge(f, fz_in(f, 0, MAX_REQS));
    const int64_t tau = fz_edge(f, fz_in(f, 1, 4));
    const bool uniform = fz_bit(f);
    fz_buf *qsl_buf = fz_alloc("query_start_loc", (MAX_REQS + 1) * 4, 0, false);
    fz_buf *out_buf = fz_alloc("out", sizeof(mla_batch_split), 0, true);
    int32_t *qsl = (int32_t *)qsl_buf->p;
    const int64_t first = fz_in(f, 0, 5); /* a uniform batch now and then */
    qsl[0] = (int32_t)fz_edge(f, 0);
    for (int r = 0; r < MAX_REQS; r++) {
        const int64_t len = fz_u8(f) < 128 ? first : fz_in(f, 0, 6);
        qsl[r + 1] = wrap32(qsl[r], fz_edge(f, len));
    }
    const bool no_qsl = fz_null(f), no_out = fz_null(f);
    fz_expect e = fz_unless(no_qsl || no_out || B < 0 || tau < 1, FZ_OK);
    if (e != FZ_REJECT && B > MAX_REQS)
        return;
    e = fz_unless(qsl[0] != 0, e);
    for (int64_t r = 0; r < B && e != FZ_REJECT; r++)
        e = fz_unless(qsl[r + 1] < qsl[r], e);
    if (e != FZ_REJECT)
        fz_allow(out_buf, 0, out_buf->bytes);
    fz_before();
    mla_status st = mla_split_batch(no_qsl ? NULL : qsl, B, tau, uniform,
                                    no_out ? NULL : (mla_batch_split *)out_buf->p);
    if (!fz_after("mla_split_batch", st, e, NULL))
        return;
    /* §2.4, rule by rule */
    int64_t max_len = 0, decodes = B;
    for (int64_t r = 0; r < B; r++)
        max_len = max64(max_len, (int64_t)qsl[r + 1] - qsl[r]);
    const int64_t len0 = B > 0 ? (int64_t)qsl[1] - qsl[0] : 0;
    if (B == 0 || (max_len <= tau && (!uniform || tau <= 1))) {
        decodes = B;
    } else if (len0 > tau) {
        decodes = 0;
    } else if (uniform) {
        for (int64_t r = 1; r < B && decodes == B; r++) {
            const int64_t len = (int64_t)qsl[r + 1] - qsl[r];
            if (len != len0 && len != 0)
                decodes = -1; /* not uniform: the first length that differs */
        }
        if (decodes == -1) {
            decodes = B;
            for (int64_t r = B - 1; r >= 1; r--)
                if ((int64_t)qsl[r + 1] - qsl[r] != len0)
                    decodes = r;
        }
    } else {
        for (int64_t r = B - 1; r >= 1; r--)
            if ((int64_t)qsl[r + 1] - qsl[r] > tau)
                decodes = r;
    }
    mla_batch_split got;
    memcpy(&got, out_buf->p, sizeof got);
    const char *fn = "mla_split_batch";
    expect_i64(fn, "num_decodes", 0, got.num_decodes, decodes);
    expect_i64(fn, "num_prefills", 0, got.num_prefills, B - decodes);
    expect_i64(fn, "num_decode_tokens", 0, got.num_decode_tokens, qsl[decodes]);
    expect_i64(fn, "num_prefill_tokens", 0, got.num_prefill_tokens, qsl[B] - qsl[decodes]);
}

/* ---- chunked-context metadata ------------------------------------------------------ */

static void run_chunks(fz *f)
{
    /* the workspace size (§2.6): products that only compete with the cap
     * saturate; max_num_seqs x block_size must fit */
    const int64_t mml = fz_edge(f, fz_in(f, 1, 9000)), mns = fz_edge(f, fz_in(f, 1, 300));
    const int64_t bs = fz_edge(f, fz_in(f, 1, 64)), cap = fz_edge(f, fz_in(f, -1, 65000));
    fz_buf *out = fz_alloc("tokens", 8, 0, true);
    const bool no_out = fz_null(f);
    const int64_t page = fz_mul(mns, bs);
    fz_expect e = fz_unless(no_out || mml < 1 || mns < 1 || bs < 1 || page < 0, FZ_OK);
    if (e != FZ_REJECT)
        fz_allow(out, 0, 8);
    fz_before();
    mla_status st = mla_chunk_workspace_tokens(mml, mns, bs, cap, no_out ? NULL : (int64_t *)out->p);
    if (fz_after("mla_chunk_workspace_tokens", st, e, NULL)) {
        const int64_t a = fz_mul(mml, 8), b = fz_mul(page, 4);
        int64_t w = max64(a < 0 ? INT64_MAX : a, b < 0 ? INT64_MAX : b);
        w = max64(min64(w, cap > 0 ? cap : 65536), page);
        expect_i64("mla_chunk_workspace_tokens", "tokens", 0, *(int64_t *)out->p, w);
    }

    /* the bytes of a [tokens, width] workspace */
    static const mla_dtype dtypes[] = {MLA_DTYPE_F32, MLA_DTYPE_BF16, MLA_DTYPE_F16,
                                       MLA_DTYPE_FP8_E4M3, MLA_DTYPE_FP8_E5M2};
    const int64_t tokens = fz_edge(f, fz_in(f, 1, 5000)), width = fz_edge(f, fz_in(f, 1, 600));
    const mla_dtype dt = fz_pick_dtype(f, dtypes, 5);
    fz_buf *sizes = fz_alloc("bytes and alignment", 16, 0, true);
    const bool no_bytes = fz_null(f), no_align = fz_null(f);
    const bool dt_ok = (unsigned)dt < MLA_DTYPE_COUNT;
    const int64_t bytes = dt_ok ? fz_bytes(fz_mul(tokens, width), dt) : -1;
    e = fz_unless(no_bytes || no_align || tokens < 1 || width < 1 || !dt_ok || bytes < 0, FZ_OK);
    if (e != FZ_REJECT)
        fz_allow(sizes, 0, 16);
    int64_t *sz = (int64_t *)sizes->p;
    fz_before();
    st = mla_chunk_workspace_bytes(tokens, width, dt, no_bytes ? NULL : sz, no_align ? NULL : sz + 1);
    if (fz_after("mla_chunk_workspace_bytes", st, e, NULL)) {
        expect_i64("mla_chunk_workspace_bytes", "bytes", 0, sz[0], bytes);
        expect_i64("mla_chunk_workspace_bytes", "alignment", 0, sz[1], 64);
    }

    /* a plan (§2.6) */
    const int64_t P = fz_edge(f, fz_in(f, 0, 6));
    const int64_t Pn = P >= 0 && P <= MAX_REQS ? P : 0;
    fz_buf *ctx_buf = fz_alloc("context_lens", MAX_REQS * 4, 0, false);
    fz_buf *qsl_buf = fz_alloc("query_start_loc", (MAX_REQS + 1) * 4, 0, false);
    int32_t *ctx = (int32_t *)ctx_buf->p, *qsl = (int32_t *)qsl_buf->p;
    qsl[0] = (int32_t)fz_edge(f, 0);
    for (int r = 0; r < MAX_REQS; r++) {
        ctx[r] = (int32_t)fz_edge(f, fz_u8(f) < 64 ? 0 : fz_in(f, 1, 60));
        qsl[r + 1] = wrap32(qsl[r], fz_edge(f, fz_in(f, 0, 9)));
    }
    const int64_t W = fz_edge(f, fz_in(f, 1, 80)), block = fz_edge(f, fz_in(f, 1, 8));
    const int64_t ws_width = fz_edge(f, fz_u8(f) < 128 ? 0 : fz_in(f, 1, 8));
    const mla_dtype ws_dt = fz_pick_dtype(f, dtypes, 5);
    const bool no_ctx = fz_null(f), no_qsl = fz_null(f), no_plan = fz_null(f);
    e = fz_unless(no_plan || P < 0 || P > INT32_MAX || (P > 0 && (no_ctx || no_qsl)) || W < 1 ||
                      block < 1 || ws_width < 0,
                  FZ_OK);
    if (e != FZ_REJECT && P > MAX_REQS)
        return;
    int64_t n_ctx = 0, c_max = 0;
    for (int64_t r = 0; r < Pn && e != FZ_REJECT; r++) {
        e = fz_unless(ctx[r] < 0, e);
        n_ctx += ctx[r] > 0;
        c_max = max64(c_max, ctx[r]);
    }
    e = fz_unless(!no_qsl && qsl[0] != 0, e);
    for (int64_t r = 0; r < Pn && e != FZ_REJECT && !no_qsl; r++)
        e = fz_unless(qsl[r + 1] < qsl[r], e);
    int64_t M = 0, chunks = 0, stride = 0;
    if (e != FZ_REJECT && c_max > 0) {
        M = W / n_ctx / block * block;
        e = fz_unless(M == 0, e);
        chunks = M ? ceil_div(c_max, M) : 0;
        for (int64_t r = 0; r < Pn; r++)
            stride += min64(ctx[r], M);
    }
    /* arrays: per chunk starts, lengths, cu_seq_lens, seq_tot, max and
     * token_to_seq (an edge context length makes millions of chunks) */
    if (e != FZ_REJECT && fz_mul(chunks, 3 * Pn + 3 + stride) > (1 << 22))
        return;
    int64_t ws_bytes = 0;
    if (e != FZ_REJECT && ws_width > 0) {
        ws_bytes = (unsigned)ws_dt < MLA_DTYPE_COUNT ? fz_bytes(fz_mul(W, ws_width), ws_dt) : -1;
        e = fz_unless(ws_bytes < 0 || ws_bytes > INT64_MAX - 63, e);
        if (e != FZ_REJECT && ws_bytes > (1 << 24))
            return; /* valid, but the plan would allocate too much */
    }
    fz_buf *plan_buf = fz_alloc("plan", sizeof(mla_chunk_plan *), 0, true);
    if (e != FZ_REJECT)
        fz_allow(plan_buf, 0, plan_buf->bytes);
    mla_chunk_plan **plan = no_plan ? NULL : (mla_chunk_plan **)plan_buf->p;
    fz_before();
    st = mla_chunk_plan_create(no_ctx ? NULL : ctx, no_qsl ? NULL : qsl, P, W, block, ws_width, ws_dt,
                               plan);
    if (!fz_after("mla_chunk_plan_create", st, e, NULL))
        return;
    mla_chunk_plan_info info;
    mla_chunk_plan_info_get(*plan, &info);
    const char *fn = "mla_chunk_plan_create";
    expect_i64(fn, "num_prefills", 0, info.num_prefills, P);
    expect_i64(fn, "num_with_context", 0, info.num_with_context, n_ctx);
    expect_i64(fn, "max_context_len", 0, info.max_context_len, c_max);
    expect_i64(fn, "max_chunk_len", 0, info.max_chunk_len, M);
    expect_i64(fn, "num_chunks", 0, info.num_chunks, chunks);
    expect_i64(fn, "token_to_seq_stride", 0, info.token_to_seq_stride, stride);
    expect_i64(fn, "prefill_tokens_with_context", 0, info.prefill_tokens_with_context,
               no_qsl ? 0 : qsl[n_ctx]);
    expect_i64(fn, "workspace_tokens", 0, info.workspace_tokens, W);
    expect_i64(fn, "workspace_width", 0, info.workspace_width, ws_width);
    if ((ws_width > 0) != (info.workspace != NULL) || ((uintptr_t)info.workspace & 63))
        fz_fail("%s: workspace %p for width %lld", fn, info.workspace, (long long)ws_width);
    if (ws_width > 0) /* the plan's workspace is the caller's to fill */
        memset(info.workspace, 0x5a, (size_t)ws_bytes);
    for (int64_t i = 0; i < chunks; i++) {
        int64_t total = 0, longest = 0, row = 0;
        expect_i64(fn, "cu_seq_lens", i * (P + 1), info.cu_seq_lens[i * (P + 1)], 0);
        for (int64_t r = 0; r < P; r++) {
            const int64_t len = max64(min64(ctx[r], i * M + M) - i * M, 0);
            expect_i64(fn, "starts", i * P + r, info.starts[i * P + r], i * M);
            expect_i64(fn, "chunk_seq_lens", i * P + r, info.chunk_seq_lens[i * P + r], len);
            total += len;
            longest = max64(longest, len);
            expect_i64(fn, "cu_seq_lens", i * (P + 1) + r + 1, info.cu_seq_lens[i * (P + 1) + r + 1],
                       total);
            for (int64_t t = 0; t < len; t++, row++)
                expect_i64(fn, "token_to_seq", i * stride + row,
                           info.token_to_seq[i * stride + row], r);
        }
        for (; row < stride; row++)
            expect_i64(fn, "token_to_seq (padding)", i * stride + row,
                       info.token_to_seq[i * stride + row], 0);
        expect_i64(fn, "seq_tot", i, info.seq_tot[i], total);
        expect_i64(fn, "max_seq_lens", i, info.max_seq_lens[i], longest);
    }
    mla_chunk_plan_info_get(*plan, NULL);
    mla_chunk_plan_destroy(*plan);
    mla_chunk_plan_info_get(NULL, &info);
    if (info.num_prefills || info.num_chunks || info.workspace)
        fz_fail("mla_chunk_plan_info_get(NULL) is not an empty plan");
    mla_chunk_plan_destroy(NULL);
}

/* ---- the split-KV decode schedule ------------------------------------------------ */

static void run_sched(fz *f)
{
    const int64_t B = fz_edge(f, fz_in(f, 0, MAX_REQS));
    const int64_t Bn = B >= 0 && B <= MAX_REQS ? B : 0;
    fz_buf *lens_buf = fz_alloc("seq_lens", MAX_REQS * 4, 0, false);
    int32_t *lens = (int32_t *)lens_buf->p;
    for (int r = 0; r < MAX_REQS; r++)
        lens[r] = (int32_t)fz_edge(f, fz_u8(f) < 32 ? 0 : fz_in(f, 1, 400));
    const bool defaults = fz_u8(f) < 40;
    mla_decode_sched_params p = {
        .num_parts = fz_edge(f, fz_in(f, -1, 9)), .block_n = fz_edge(f, fz_in(f, -1, 40)),
        .overhead = fz_edge(f, fz_in(f, -2, 8)),
        .split_blocks = fz_edge(f, fz_u8(f) < 128 ? 0 : fz_in(f, 1, 6))};
    const int64_t capacity = fz_edge(f, fz_in(f, 0, 12));
    /* what the call resolves (mla.h) */
    const int threads = omp_get_max_threads();
    const int64_t np = defaults || p.num_parts <= 0 ? min64(threads, 1 << 20) : p.num_parts;
    const int64_t block_n = defaults || p.block_n <= 0 ? 16 : p.block_n;
    const int64_t split = defaults || p.split_blocks <= 0 ? 0 : p.split_blocks;
    const bool no_lens = fz_null(f), no_parts = fz_null(f), no_np = fz_null(f), no_prefix = fz_null(f);
    fz_expect e = fz_unless(B < 0 || B > INT32_MAX || (B > 0 && no_lens) || no_parts || no_np ||
                                no_prefix,
                            FZ_OK);
    e = fz_unless(!defaults && (p.num_parts > (1 << 20) || p.overhead > INT32_MAX ||
                                (p.overhead < 0 && p.overhead != MLA_SCHED_NO_OVERHEAD)),
                  e);
    e = fz_unless(capacity < np, e);
    if (e != FZ_REJECT && (B > MAX_REQS || np > 64))
        return;
    int64_t slots = split || Bn == 0 ? 0 : fz_add(Bn, np - 1);
    for (int64_t b = 0; b < Bn; b++) {
        e = fz_unless(lens[b] < 0, e);
        if (split && lens[b] >= 0)
            slots = fz_add(slots, max64(ceil_div(ceil_div(lens[b], block_n), split), 1));
    }
    e = fz_unless(slots < 0 || slots > INT32_MAX, e);
    fz_buf *parts_buf = fz_alloc("parts", 64 * sizeof(mla_sched_part), 0, true);
    fz_buf *np_buf = fz_alloc("num_parts", 8, 0, true);
    fz_buf *prefix_buf = fz_alloc("split_prefix", (MAX_REQS + 1) * 4, 0, true);
    if (e != FZ_REJECT) {
        fz_allow(parts_buf, 0, (size_t)np * sizeof(mla_sched_part));
        fz_allow(np_buf, 0, 8);
        fz_allow(prefix_buf, 0, (size_t)(Bn + 1) * 4);
    }
    mla_sched_part *parts = (mla_sched_part *)parts_buf->p;
    int32_t *prefix = (int32_t *)prefix_buf->p;
    fz_before();
    mla_status st = mla_build_decode_sched(no_lens ? NULL : lens, B, defaults ? NULL : &p,
                                           no_parts ? NULL : parts, capacity,
                                           no_np ? NULL : (int64_t *)np_buf->p,
                                           no_prefix ? NULL : prefix);
    if (!fz_after("mla_build_decode_sched", st, e, NULL))
        return;
    const char *fn = "mla_build_decode_sched";
    expect_i64(fn, "*num_parts", 0, *(int64_t *)np_buf->p, np);
    expect_i64(fn, "split_prefix", 0, prefix[0], 0);
    for (int64_t b = 0; b < Bn; b++) {
        const int64_t kv = ceil_div(lens[b], block_n), owned = prefix[b + 1] - prefix[b];
        if (owned < 1 || (split && owned != max64(ceil_div(kv, split), 1)))
            fz_fail("%s: request %lld (%d tokens) owns %lld split slots", fn, (long long)b, lens[b],
                    (long long)owned);
    }
    if (!split && Bn > 0 && prefix[Bn] > Bn + np - 1)
        fz_fail("%s: %d split slots for %lld requests and %lld parts", fn, prefix[Bn],
                (long long)Bn, (long long)np);
    /* every block of every request in exactly one part, in order: the walk
     * is at request `req`, block `next_block`; pieces[b] counts the parts
     * that had a piece of request b */
    int64_t req = 0, next_block = 0, pieces[MAX_REQS] = {0};
    bool idle = false;
    for (int64_t i = 0; i < np; i++) {
        const mla_sched_part *q = &parts[i];
        if (q->begin_req >= Bn) {
            if (q->begin_req != Bn || q->end_req != Bn - 1 || q->begin_block || q->end_block ||
                q->begin_split || q->first_partial || q->last_partial)
                fz_fail("%s: idle part %lld is not {B, B - 1, 0...}", fn, (long long)i);
            idle = true;
            continue;
        }
        if (idle || q->begin_req != req || q->begin_block != next_block ||
            q->end_req < q->begin_req || q->end_req >= Bn)
            fz_fail("%s: part %lld covers requests %d..%d from block %d; the walk is at request "
                    "%lld block %lld", fn, (long long)i, q->begin_req, q->end_req, q->begin_block,
                    (long long)req, (long long)next_block);
        const int64_t first_kv = ceil_div(lens[q->begin_req], block_n);
        const int64_t end_kv = ceil_div(lens[q->end_req], block_n);
        const int64_t want_split = split ? q->begin_block / split : pieces[q->begin_req];
        if (q->begin_split != want_split || (split && q->begin_block % split != 0))
            fz_fail("%s: part %lld begins request %d at block %d as split %d, want split %lld", fn,
                    (long long)i, q->begin_req, q->begin_block, q->begin_split,
                    (long long)want_split);
        if (split && q->end_block % split != 0 && q->end_block != end_kv)
            fz_fail("%s: part %lld ends request %d at block %d, not at a split", fn, (long long)i,
                    q->end_req, q->end_block);
        bool first_cut = q->begin_block != 0, last_cut = q->end_block != end_kv;
        if (split) {
            first_cut = max64(ceil_div(first_kv, split), 1) > 1;
            last_cut = max64(ceil_div(end_kv, split), 1) > 1;
        }
        if (q->begin_req == q->end_req)
            first_cut = last_cut = first_cut || last_cut;
        if (q->first_partial != first_cut || q->last_partial != last_cut)
            fz_fail("%s: part %lld flags first %d last %d, want %d %d", fn, (long long)i,
                    q->first_partial, q->last_partial, first_cut, last_cut);
        for (int64_t b = q->begin_req; b <= q->end_req; b++) {
            const int64_t kv = ceil_div(lens[b], block_n);
            const int64_t lo = b == q->begin_req ? q->begin_block : 0;
            const int64_t hi = b == q->end_req ? q->end_block : kv;
            if (hi < lo || hi > kv || (hi == lo && kv > 0))
                fz_fail("%s: part %lld has blocks [%lld, %lld) of request %lld (%lld blocks)", fn,
                        (long long)i, (long long)lo, (long long)hi, (long long)b, (long long)kv);
            pieces[b]++;
            req = b, next_block = hi;
            if (hi < kv)
                break; /* only the part's last request may go on in the next */
            if (!split && pieces[b] != prefix[b + 1] - prefix[b])
                fz_fail("%s: request %lld is in %lld parts but owns %d slots", fn, (long long)b,
                        (long long)pieces[b], prefix[b + 1] - prefix[b]);
            req = b + 1, next_block = 0;
        }
    }
    if (req != Bn)
        fz_fail("%s: the parts end at request %lld of %lld", fn, (long long)req, (long long)Bn);
}

/* ---- queries ------------------------------------------------------------------- */

static void run_queries(fz *f)
{
    static const mla_dtype dtypes[] = {MLA_DTYPE_F32, MLA_DTYPE_BF16, MLA_DTYPE_F16,
                                       MLA_DTYPE_FP8_E4M3, MLA_DTYPE_FP8_E5M2};
    /* the cache shape */
    const int64_t nb = fz_edge(f, fz_in(f, 0, 4000)), bs = fz_edge(f, fz_in(f, 1, 128));
    const int64_t width = fz_edge(f, fz_in(f, 1, 600));
    const mla_dtype dt = fz_pick_dtype(f, dtypes, 5);
    fz_buf *out = fz_alloc("shape, bytes, alignment", 5 * 8, 0, true);
    int64_t *o = (int64_t *)out->p;
    const bool no_shape = fz_null(f), no_bytes = fz_null(f), no_align = fz_null(f);
    const bool dt_ok = (unsigned)dt < MLA_DTYPE_COUNT;
    const int64_t bytes = dt_ok ? fz_bytes(fz_mul(fz_mul(nb, bs), width), dt) : -1;
    fz_expect e = fz_unless(no_shape || no_bytes || no_align || nb < 0 || bs < 1 || width < 1 ||
                                !dt_ok || bytes < 0,
                            FZ_OK);
    if (e != FZ_REJECT)
        fz_allow(out, 0, out->bytes);
    fz_before();
    mla_status st = mla_kv_cache_shape(nb, bs, width, dt, no_shape ? NULL : o,
                                       no_bytes ? NULL : o + 3, no_align ? NULL : o + 4);
    if (fz_after("mla_kv_cache_shape", st, e, NULL))
        if (o[0] != nb || o[1] != bs || o[2] != width || o[3] != bytes || o[4] != 64)
            fz_fail("mla_kv_cache_shape: [%lld, %lld, %lld] %lld bytes, alignment %lld",
                    (long long)o[0], (long long)o[1], (long long)o[2], (long long)o[3],
                    (long long)o[4]);

    /* a config, the backends' verdicts on it and the block size they need */
    mla_config cfg = {.q_dtype = fz_pick_dtype(f, dtypes, 3),
                      .cache_dtype = fz_pick_dtype(f, dtypes, 5),
                      .kv_lora_rank = fz_edge(f, fz_in(f, 1, 600)),
                      .rope_dim = fz_edge(f, fz_in(f, 0, 64)),
                      .num_heads = fz_edge(f, fz_in(f, 1, 128)),
                      .block_size = fz_edge(f, fz_in(f, 1, 128)), .bf16_compute = fz_bit(f)};
    const bool cfg_ok = (unsigned)cfg.q_dtype < MLA_DTYPE_COUNT &&
                        (unsigned)cfg.cache_dtype < MLA_DTYPE_COUNT && cfg.kv_lora_rank >= 1 &&
                        cfg.rope_dim >= 0 && cfg.num_heads >= 1 && cfg.block_size >= 1 &&
                        fz_add(cfg.kv_lora_rank, cfg.rope_dim) >= 0;
    const int backends = mla_backend_count();
    const int which = fz_in(f, 0, backends + 1);
    const char *name = which < backends ? mla_backend_at(which)->name : which == backends ? "nope" : NULL;
    static const int ops[] = {MLA_OP_CONVERT, MLA_OP_DECODE, MLA_OP_PREFILL, -1, MLA_OP_COUNT, 77};
    const mla_op op = (mla_op)ops[fz_in(f, 0, f->hostile ? 5 : 2)];
    const bool op_ok = (unsigned)op < MLA_OP_COUNT, with_cfg = fz_bit(f), no_out = fz_null(f);
    fz_buf *reasons = fz_alloc("reasons", sizeof(mla_reasons), 0, true);
    e = fz_unless(!name || no_out || !op_ok || (with_cfg && !cfg_ok) || which == backends, FZ_OK);
    if (e != FZ_REJECT)
        fz_allow(reasons, 0, reasons->bytes);
    fz_before();
    st = mla_backend_validate(name, op, with_cfg ? &cfg : NULL,
                              no_out ? NULL : (mla_reasons *)reasons->p);
    if (fz_after("mla_backend_validate", st, e, NULL)) {
        const mla_reasons *r = (const mla_reasons *)reasons->p;
        if (r->count < 0 || r->count > MLA_MAX_REASONS)
            fz_fail("mla_backend_validate: %d reasons", r->count);
        for (int i = 0; i < r->count; i++)
            if (!memchr(r->text[i], '\0', MLA_REASON_LEN) || !r->text[i][0])
                fz_fail("mla_backend_validate: reason %d is empty or unterminated", i);
    } else if (st == MLA_ERR_UNKNOWN_BACKEND && !strstr(mla_last_error(), mla_backend_at(0)->name)) {
        fz_fail("mla_backend_validate: unknown name, but the message lists no names: %s",
                mla_last_error());
    }
    fz_before();
    st = mla_force_backend(op, name);
    fz_after("mla_force_backend", st, fz_unless(!op_ok || which == backends, FZ_EITHER), NULL);
    if (st == MLA_OK && name && !fz_backend_takes(name, op, NULL))
        fz_fail("mla_force_backend(%s, %s) took a backend that cannot run here", mla_op_name(op),
                name);
    if (op_ok)
        mla_force_backend(op, NULL);

    fz_buf *answer = fz_alloc("supported, multiple", 16, 0, true);
    const bool no_cfg = fz_null(f), no_sup = fz_null(f), no_mult = fz_null(f);
    /* auto-selection: ref runs every float q and every cache */
    e = fz_unless(no_cfg || no_sup || no_mult || !cfg_ok, FZ_OK);
    if (e != FZ_REJECT)
        fz_allow(answer, 0, 16);
    fz_before();
    st = mla_block_size_supported(no_cfg ? NULL : &cfg, no_sup ? NULL : (bool *)answer->p,
                                  no_mult ? NULL : (int64_t *)(answer->p + 8));
    if (fz_after("mla_block_size_supported", st, e, NULL)) {
        int64_t mult;
        bool sup;
        memcpy(&mult, answer->p + 8, 8);
        memcpy(&sup, answer->p, sizeof sup);
        if (mult < 1 || sup != (cfg.block_size % mult == 0))
            fz_fail("mla_block_size_supported: multiple %lld, supported %d for block size %lld",
                    (long long)mult, sup, (long long)cfg.block_size);
    }

    /* names of anything, and the capability list into a short buffer */
    const int x = (int)fz_edge(f, fz_in(f, -2, 20));
    if (!mla_status_str((mla_status)x) || !mla_dtype_name((mla_dtype)x) || !mla_op_name((mla_op)x) ||
        !mla_cap_name((mla_cap)x))
        fz_fail("a name lookup gave NULL for %d", x);
    const int64_t size = mla_dtype_size((mla_dtype)x);
    if (size != ((unsigned)x < MLA_DTYPE_COUNT ? (int64_t[]){4, 2, 2, 1, 1}[x] : 0))
        fz_fail("mla_dtype_size(%d) = %lld", x, (long long)size);
    const mla_caps caps = (mla_caps)fz_random(f);
    char full[1024] = "";
    size_t len = 0;
    for (int bit = 0; bit < 32; bit++) {
        const char *cap = mla_cap_name((mla_cap)(1u << bit));
        if (caps & (1u << bit) && strcmp(cap, "?") != 0)
            len += (size_t)snprintf(full + len, sizeof full - len, "%s%s", len ? " " : "", cap);
    }
    const size_t room = (size_t)fz_in(f, 0, 200);
    fz_buf *text = fz_alloc("caps text", room, 0, true);
    fz_allow(text, 0, room);
    fz_before();
    const size_t need = mla_caps_format(caps, room ? (char *)text->p : NULL, room);
    if (need != len || (room && (strnlen((char *)text->p, room) == room ||
                                 strncmp((char *)text->p, full, room - 1) != 0)))
        fz_fail("mla_caps_format(0x%x, %zu bytes) = %zu, \"%.*s\"; want %zu, \"%s\"", caps, room,
                need, (int)room, (char *)text->p, len, full);
    if ((mla_cpu_caps() & ~mla_cpu_caps_detected()) != 0)
        fz_fail("mla_cpu_caps 0x%x has bits mla_cpu_caps_detected 0x%x lacks", mla_cpu_caps(),
                mla_cpu_caps_detected());
    const mla_config d = mla_config_default();
    if (d.q_dtype != MLA_DTYPE_F32 || d.cache_dtype != MLA_DTYPE_BF16 || d.kv_lora_rank != 512 ||
        d.rope_dim != 64 || d.num_heads != 128 || d.block_size != 64 || mla_default_threads() < 1)
        fz_fail("mla_config_default or mla_default_threads is off");
}

/* ---- mla_backend.h: CPU decoding, lookup, selection, registration ------------------ */

static uint32_t fz_u32(fz *f)
{
    return (uint32_t)fz_random(f) ^ ((uint32_t)fz_u8(f) << 24 | (uint32_t)fz_u8(f));
}

static void run_backends(fz *f)
{
    /* decoding: raw words from the input, then the same with bits cleared */
    mla_cpu_raw raw = {.arch = (mla_arch)fz_in(f, 0, 2), .max_leaf = (uint32_t)fz_in(f, 0, 40),
                       .leaf1_ecx = fz_u32(f), .leaf1_edx = fz_u32(f), .leaf7_ebx = fz_u32(f),
                       .leaf7_ecx = fz_u32(f), .leaf7_edx = fz_u32(f), .leaf7_1_eax = fz_u32(f),
                       .xcr0 = (uint64_t)fz_u32(f) << 32 | fz_u32(f), .amx_permitted = fz_bit(f),
                       .hwcap = (uint64_t)fz_u32(f) << 32 | fz_u32(f),
                       .hwcap2 = (uint64_t)fz_u32(f) << 32 | fz_u32(f)};
    const mla_caps caps = mla_cpu_caps_decode(&raw);
    if (mla_cpu_caps_decode(&raw) != caps)
        fz_fail("mla_cpu_caps_decode: two answers for one reading");
    mla_cpu_raw less = raw;
    less.leaf1_ecx &= fz_u32(f), less.leaf1_edx &= fz_u32(f), less.leaf7_ebx &= fz_u32(f);
    less.leaf7_ecx &= fz_u32(f), less.leaf7_edx &= fz_u32(f), less.leaf7_1_eax &= fz_u32(f);
    less.xcr0 &= (uint64_t)fz_u32(f) << 32 | fz_u32(f);
    less.hwcap &= (uint64_t)fz_u32(f) << 32 | fz_u32(f);
    less.hwcap2 &= (uint64_t)fz_u32(f) << 32 | fz_u32(f);
    less.amx_permitted = less.amx_permitted && fz_bit(f);
    const mla_caps fewer = mla_cpu_caps_decode(&less);
    if (fewer & ~caps)
        fz_fail("mla_cpu_caps_decode: clearing bits added capabilities 0x%x (0x%x -> 0x%x)",
                fewer & ~caps, caps, fewer);

    /* lookup by any name: a descriptor of that name, or NULL */
    const int backends = mla_backend_count();
    char name[48];
    const int pick = fz_in(f, 0, backends + 2);
    if (pick < backends) {
        snprintf(name, sizeof name, "%s", mla_backend_at(pick)->name);
    } else {
        const int64_t len = fz_in(f, 0, (int64_t)sizeof name - 1);
        for (int64_t i = 0; i < len; i++)
            name[i] = (char)(1 + fz_u8(f) % 255);
        name[len] = '\0';
    }
    const bool no_name = pick == backends + 2;
    const mla_backend_desc *found = mla_backend_find(no_name ? NULL : name);
    if (found && (no_name || strcmp(found->name, name) != 0))
        fz_fail("mla_backend_find(\"%s\") gave \"%s\"", no_name ? "(NULL)" : name, found->name);
    if (pick < backends && !found)
        fz_fail("mla_backend_find(\"%s\"): not found, but listed", name);

    /* selection: what it picks takes the config (NULL: any it can run) */
    static const mla_dtype dtypes[] = {MLA_DTYPE_F32, MLA_DTYPE_BF16, MLA_DTYPE_F16,
                                       MLA_DTYPE_FP8_E4M3, MLA_DTYPE_FP8_E5M2};
    mla_config cfg = {.q_dtype = fz_dtype(f, fz_pick_dtype(f, dtypes, 3)),
                      .cache_dtype = fz_dtype(f, fz_pick_dtype(f, dtypes, 5)),
                      .kv_lora_rank = fz_edge(f, fz_in(f, 1, 600)),
                      .rope_dim = fz_edge(f, fz_in(f, 0, 64)),
                      .num_heads = fz_edge(f, fz_in(f, 1, 128)),
                      .block_size = fz_edge(f, fz_in(f, 1, 128)), .bf16_compute = fz_bit(f)};
    static const int ops[] = {MLA_OP_CONVERT, MLA_OP_DECODE, MLA_OP_PREFILL, -1, MLA_OP_COUNT};
    const mla_op op = (mla_op)ops[fz_in(f, 0, f->hostile ? 4 : 2)];
    const bool with_cfg = fz_bit(f), no_out = fz_null(f);
    fz_buf *out = fz_alloc("selected", sizeof(const mla_backend_desc *), 0, true);
    if (!no_out)
        fz_allow(out, 0, out->bytes); /* checked below: a valid pick, or unchanged */
    fz_before();
    mla_status st = mla_select_backend(op, with_cfg ? &cfg : NULL,
                                       no_out ? NULL : (const mla_backend_desc **)out->p);
    fz_after("mla_select_backend", st,
             fz_unless(no_out || (unsigned)op >= MLA_OP_COUNT, FZ_EITHER), NULL);
    if (st == MLA_OK) {
        const mla_backend_desc *d;
        memcpy(&d, out->p, sizeof d);
        if (!d || mla_backend_find(d->name) != d || !fz_backend_takes(d->name, op, with_cfg ? &cfg : NULL))
            fz_fail("mla_select_backend(%s) picked %s, which does not take the config",
                    mla_op_name(op), d ? d->name : "(NULL)");
        if (with_cfg && (unsigned)cfg.q_dtype < MLA_DTYPE_COUNT &&
            (unsigned)cfg.cache_dtype < MLA_DTYPE_COUNT && !mla_backend_route(d->name, &cfg))
            fz_fail("mla_backend_route(%s): no route for a config it takes", d->name);
    } else if (!no_out && memcmp(out->p, out->snap + out->offset, out->bytes) != 0) {
        fz_fail("mla_select_backend failed but wrote *out");
    }
    if (mla_backend_route(no_name ? NULL : name, NULL) != NULL)
        fz_fail("mla_backend_route with a NULL config is not NULL");

    /* registration: a copy of ref's descriptor with what the input changes */
    static int serial;
    mla_backend_desc d = *mla_backend_find("ref");
    char new_name[48];
    snprintf(new_name, sizeof new_name, "fz_%d", serial++);
    const uint8_t how = fz_u8(f);
    bool bad = false;
    d.name = new_name;
    d.priority = INT_MIN;                 /* never above ref, */
    d.ops &= (uint32_t)fz_random(f);      /* and never more than ref takes */
    d.q_dtypes &= (uint32_t)fz_random(f);
    d.cache_dtypes &= (uint32_t)fz_random(f);
    if (fz_bit(f))
        memset(&d.kernels, 0, sizeof d.kernels); /* NULL base kernels: ref's */
    switch (f->hostile ? how % 8 : 7) {
    case 0: d.name = NULL, bad = true; break;
    case 1: d.name = "", bad = true; break;
    case 2: memset(new_name, 'n', 40), new_name[40] = '\0', bad = true; break;
    case 3: d.size = (size_t)fz_in(f, 0, 64), bad = true; break;
    case 4: d.size = sizeof d + 1 + (size_t)fz_in(f, 0, 64), bad = true; break;
    case 5: d.name = "ref", bad = true; break; /* taken, no override */
    case 6: d.isa = "an isa name of forty characters or so....", bad = true; break;
    default: break;
    }
    fz_before();
    st = mla_register_backend(fz_null(f) ? (bad = true, NULL) : &d, false);
    fz_after("mla_register_backend", st, bad ? FZ_REJECT : FZ_EITHER, NULL);
    if (st == MLA_OK) {
        const mla_backend_desc *got = mla_backend_find(new_name);
        if (!got || got->priority != INT_MIN || got->ops != d.ops)
            fz_fail("mla_register_backend: %s not found as registered", new_name);
    } else if (!bad && st != MLA_ERR_CAPACITY) {
        fz_fail("mla_register_backend(%s): %s: %s", new_name, mla_status_str(st), mla_last_error());
    }
}

const fz_entry fz_entries[] = {
    {"batch", run_batch}, {"reorder", run_reorder}, {"split", run_split},
    {"chunks", run_chunks}, {"sched", run_sched},   {"queries", run_queries},
    {"backends", run_backends},
};
const int fz_entry_count = sizeof fz_entries / sizeof fz_entries[0];
