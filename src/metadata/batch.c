/*
 * Per-step batch metadata (docs/semantics.md §2.1-2.3) as vLLM builds it: query_start_loc
 * (prefix sums of the scheduled tokens), seq_lens (computed + scheduled),
 * positions, the block table (manager block ids expanded to kernel block ids,
 * unused entries 0) and the slot mapping of _compute_slot_mapping_kernel,
 * context parallelism included, padded with -1; plus update_block_table, which
 * redoes only the block table and slots for a second KV-cache group; plus the
 * incremental forms for a block table kept from step to step, which write
 * only the ids that changed (docs/semantics.md §2.2). Every input is checked
 * before the first write, so a rejected call leaves all the caller's buffers
 * as they were.
 */
#include "core/error.h"
#include "core/parallel.h"
#include "core/policy.h"
#include "core/size.h"
#include "metadata/metadata.h"
#include "metadata/request_check.h"
#include "metadata/trace.h"

#include <omp.h>
#include <string.h>

/* vLLM's PAD_SLOT_ID: padding tokens and tokens another CP rank stores. */
#define PAD_SLOT (-1)

/* The layout, reduced to what slot arithmetic needs. */
typedef struct geometry {
    int64_t bs;         /* kernel block size: slots count in these          */
    int64_t manager_bs; /* block size of mla_request.block_ids             */
    int64_t m;          /* kernel blocks per manager block                 */
    int64_t cols;       /* block_table columns                             */
    int64_t world, rank, interleave;
    int64_t span; /* positions one kernel block covers: bs * world (vLLM's
                     "virtual block"; each rank keeps bs of them) */
    int64_t max_block_id; /* largest id whose kernel ids fit int32 and whose
                             slots fit int64 (what check_block_id tests);
                             -1 when none does */
} geometry;

/* The layout with its zero fields' defaults (mla.h): a block size of 0 is
 * the other one, a world size or interleave of 0 is 1. */
static mla_block_layout with_defaults(const mla_block_layout *given)
{
    mla_block_layout l = *given;
    if (l.manager_block_size == 0 && l.kernel_block_size > 0)
        l.manager_block_size = l.kernel_block_size;
    if (l.kernel_block_size == 0 && l.manager_block_size > 0)
        l.kernel_block_size = l.manager_block_size;
    if (l.cp_world_size == 0)
        l.cp_world_size = 1;
    if (l.cp_interleave == 0)
        l.cp_interleave = 1;
    return l;
}

static mla_status check_layout(const char *fn, const mla_block_layout *given, geometry *g)
{
    const mla_block_layout resolved = with_defaults(given), *l = &resolved;
    if (l->kernel_block_size < 1 || l->manager_block_size < 1)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT,
                        "%s: layout->kernel_block_size = %lld and layout->manager_block_size = "
                        "%lld (need >= 1, or one of them 0 for the other's value)",
                        fn, (long long)l->kernel_block_size, (long long)l->manager_block_size);
    if (l->manager_block_size % l->kernel_block_size != 0)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT,
                        "%s: layout->kernel_block_size = %lld does not divide "
                        "layout->manager_block_size = %lld",
                        fn, (long long)l->kernel_block_size, (long long)l->manager_block_size);
    if (l->max_blocks_per_req < 0)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT,
                        "%s: layout->max_blocks_per_req = %lld is negative", fn,
                        (long long)l->max_blocks_per_req);
    if (l->cp_world_size < 1)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT,
                        "%s: layout->cp_world_size = %lld < 1 (0 or 1 = no "
                        "context parallelism)",
                        fn, (long long)l->cp_world_size);
    if (l->cp_rank < 0 || l->cp_rank >= l->cp_world_size)
        return mla_fail(MLA_ERR_OUT_OF_RANGE, "%s: layout->cp_rank = %lld is outside [0, %lld)", fn,
                        (long long)l->cp_rank, (long long)l->cp_world_size);
    if (l->cp_interleave < 1)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: layout->cp_interleave = %lld < 1", fn,
                        (long long)l->cp_interleave);
    /* vLLM asserts this too: otherwise a rank's share of a virtual block
     * spills past its kernel block. */
    if (l->cp_world_size > 1 && l->kernel_block_size % l->cp_interleave != 0)
        return mla_fail(
            MLA_ERR_INVALID_ARGUMENT,
            "%s: layout->cp_interleave = %lld does not divide layout->kernel_block_size "
            "= %lld (required with cp_world_size > 1)",
            fn, (long long)l->cp_interleave, (long long)l->kernel_block_size);
    *g = (geometry){
        .bs = l->kernel_block_size,
        .manager_bs = l->manager_block_size,
        .m = l->manager_block_size / l->kernel_block_size,
        .cols = l->max_blocks_per_req,
        .world = l->cp_world_size,
        .rank = l->cp_rank,
        .interleave = l->cp_interleave,
    };
    int64_t by_kernel_id = ((int64_t)INT32_MAX + 1) / g->m - 1;
    int64_t by_slot = INT64_MAX / g->manager_bs - 1;
    g->max_block_id = by_kernel_id < by_slot ? by_kernel_id : by_slot;
    if (!mla_mul_size(g->bs, g->world, &g->span))
        return mla_fail(MLA_ERR_OVERFLOW,
                        "%s: kernel_block_size * cp_world_size = %lld * %lld "
                        "overflows int64",
                        fn, (long long)g->bs, (long long)g->world);
    return MLA_OK;
}

/* A persistent block table's rows as the incremental forms receive them
 * (mla.h); the dense forms pass none. */
typedef struct table_rows {
    const int64_t *first_new; /* NULL: every row continues its request */
    int64_t *row_ids;         /* ids each row holds; updated once written */
} table_rows;

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

static int64_t seq_len(const mla_request *q)
{
    return q->num_computed_tokens + q->num_scheduled_tokens;
}

/* The first of request r's ids its row lacks: 0 for a dense write. */
static int64_t first_new_id(const table_rows *rows, const mla_request *q, int64_t r)
{
    if (!rows)
        return 0;
    return rows->first_new ? rows->first_new[r] : min64(rows->row_ids[r], q->num_block_ids);
}

/* The counts must fit the int32 outputs: seq_lens holds computed +
 * scheduled, query_start_loc the running total of scheduled tokens. */
static mla_status check_tokens(const char *fn, const mla_request *reqs, int64_t r, int64_t *total)
{
    mla_status st = mla_check_request_counts(fn, reqs, r);
    if (st != MLA_OK)
        return st;
    const mla_request *q = &reqs[r];
    if (q->num_computed_tokens > INT32_MAX - q->num_scheduled_tokens)
        return mla_fail(MLA_ERR_OVERFLOW,
                        "%s: reqs[%lld]: num_computed_tokens + "
                        "num_scheduled_tokens = %lld + %lld does not fit seq_lens (int32)",
                        fn, (long long)r, (long long)q->num_computed_tokens,
                        (long long)q->num_scheduled_tokens);
    if (q->num_scheduled_tokens > INT32_MAX - *total)
        return mla_fail(MLA_ERR_OVERFLOW,
                        "%s: scheduled tokens of reqs[0..%lld] total %lld, past "
                        "query_start_loc's int32",
                        fn, (long long)r, (long long)(*total + q->num_scheduled_tokens));
    *total += q->num_scheduled_tokens;
    return MLA_OK;
}

/* Block id b becomes kernel ids b*m .. b*m+m-1, which block_table stores as
 * int32, and the slots up to (b+1)*manager_bs - 1, stored as int64. */
static mla_status check_block_id(const char *fn, const mla_request *q, int64_t r, int64_t k,
                                 const geometry *g)
{
    int64_t b = q->block_ids[k], kernel_end, slot_end;
    if (b < 0)
        return mla_fail(MLA_ERR_OUT_OF_RANGE, "%s: reqs[%lld].block_ids[%lld] = %lld is negative",
                        fn, (long long)r, (long long)k, (long long)b);
    if (!mla_mul_size(b + 1, g->m, &kernel_end) || kernel_end - 1 > INT32_MAX ||
        !mla_mul_size(b + 1, g->manager_bs, &slot_end))
        return mla_fail(MLA_ERR_OVERFLOW,
                        "%s: reqs[%lld].block_ids[%lld] = %lld expands past "
                        "int32 kernel block ids or int64 slots (%lld kernel blocks of %lld each)",
                        fn, (long long)r, (long long)k, (long long)b, (long long)g->m,
                        (long long)g->bs);
    return MLA_OK;
}

/* The request's row fits the block table and its blocks hold every
 * position up to its seq_len (each kernel block covers g->span positions). */
static mla_status check_blocks(const char *fn, const mla_request *reqs, int64_t r,
                               const geometry *g)
{
    const mla_request *q = &reqs[r];
    if (q->num_block_ids < 0)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: reqs[%lld].num_block_ids = %lld is negative",
                        fn, (long long)r, (long long)q->num_block_ids);
    if (q->num_block_ids > 0 && !q->block_ids)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT,
                        "%s: reqs[%lld].block_ids is NULL with "
                        "num_block_ids = %lld",
                        fn, (long long)r, (long long)q->num_block_ids);
    int64_t kernel_blocks;
    if (!mla_mul_size(q->num_block_ids, g->m, &kernel_blocks) || kernel_blocks > g->cols)
        return mla_fail(MLA_ERR_CAPACITY,
                        "%s: reqs[%lld]: %lld block ids of %lld kernel blocks "
                        "each do not fit max_blocks_per_req = %lld",
                        fn, (long long)r, (long long)q->num_block_ids, (long long)g->m,
                        (long long)g->cols);
    int64_t len = seq_len(q), needed = mla_ceil_div(len, g->span);
    if (needed > kernel_blocks)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT,
                        "%s: reqs[%lld]: %lld tokens need %lld kernel "
                        "blocks of %lld positions, but its %lld block ids give %lld",
                        fn, (long long)r, (long long)len, (long long)needed, (long long)g->span,
                        (long long)q->num_block_ids, (long long)kernel_blocks);
    return MLA_OK;
}

/* Ids from..to-1 of request r are valid block ids. A branch-free pass (it
 * vectorizes) decides: as unsigned, a negative id is at or past the end of
 * the valid ones, which is 0 when not even id 0 fits (m > 2^31). Only a
 * failing range is walked again to name its first bad id. */
static mla_status check_block_ids(const char *fn, const mla_request *q, int64_t r, int64_t from,
                                  int64_t to, const geometry *g)
{
    uint32_t end = (uint32_t)(g->max_block_id + 1), bad = 0;
    for (int64_t k = from; k < to; k++)
        bad |= (uint32_t)q->block_ids[k] >= end;
    if (!bad)
        return MLA_OK;
    for (int64_t k = from; k < to; k++) {
        mla_status st = check_block_id(fn, q, r, k, g);
        if (st != MLA_OK)
            return st;
    }
    return MLA_OK;
}

/* An incremental form's row r: it holds row_ids[r] ids (which fit the
 * row) and the first new one is no later than the ids it and the request
 * share. */
static mla_status check_row(const char *fn, const table_rows *rows, const mla_request *q,
                            int64_t r, const geometry *g)
{
    int64_t held = rows->row_ids[r];
    if (held < 0 || held > g->cols / g->m)
        return mla_fail(MLA_ERR_OUT_OF_RANGE,
                        "%s: row_ids[%lld] = %lld is outside [0, %lld], the block ids a row of "
                        "%lld kernel blocks holds",
                        fn, (long long)r, (long long)held, (long long)(g->cols / g->m),
                        (long long)g->cols);
    int64_t shared = min64(held, q->num_block_ids);
    if (rows->first_new && (rows->first_new[r] < 0 || rows->first_new[r] > shared))
        return mla_fail(MLA_ERR_OUT_OF_RANGE,
                        "%s: first_new[%lld] = %lld is outside [0, %lld] (row_ids[%lld] = %lld, "
                        "reqs[%lld].num_block_ids = %lld)",
                        fn, (long long)r, (long long)rows->first_new[r], (long long)shared,
                        (long long)r, (long long)held, (long long)r, (long long)q->num_block_ids);
    return MLA_OK;
}

/* The ids a call writes into the table (from first_new_id on) and those
 * holding this step's positions [computed, seq_len), which the slots read:
 * every id for the dense forms, a decode's last few for the incremental
 * ones (the ids a row keeps were checked when they were written). */
static mla_status check_written_ids(const char *fn, const table_rows *rows, const mla_request *q,
                                    int64_t r, const geometry *g)
{
    int64_t from = first_new_id(rows, q, r);
    if (q->num_scheduled_tokens > 0)
        from = min64(from, q->num_computed_tokens / g->span / g->m);
    return check_block_ids(fn, q, r, from, q->num_block_ids, g);
}

/* Arguments and requests, shared by every entry point; *total gets T. */
static mla_status check_batch(const char *fn, const mla_request *reqs, int64_t num_reqs,
                              const mla_block_layout *layout, const table_rows *rows, geometry *g,
                              int64_t *total)
{
    if (!layout)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: NULL layout", fn);
    if (num_reqs < 0)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: num_reqs = %lld is negative", fn,
                        (long long)num_reqs);
    if (num_reqs > 0 && !reqs)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: NULL reqs with num_reqs = %lld", fn,
                        (long long)num_reqs);
    if (rows && num_reqs > 0 && !rows->row_ids)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: NULL row_ids with num_reqs = %lld", fn,
                        (long long)num_reqs);
    mla_status st = check_layout(fn, layout, g);
    *total = 0;
    for (int64_t r = 0; r < num_reqs && st == MLA_OK; r++) {
        st = check_tokens(fn, reqs, r, total);
        if (st == MLA_OK)
            st = check_blocks(fn, reqs, r, g);
        if (st == MLA_OK && rows)
            st = check_row(fn, rows, &reqs[r], r, g);
        if (st == MLA_OK)
            st = check_written_ids(fn, rows, &reqs[r], r, g);
    }
    return st;
}

/* The persistent or dense block table [num_reqs, cols]. */
static mla_status check_table_output(const char *fn, const int32_t *table, const char *name,
                                     int64_t num_reqs, const geometry *g)
{
    int64_t cells;
    if (!mla_mul_size(num_reqs, g->cols, &cells))
        return mla_fail(MLA_ERR_OVERFLOW,
                        "%s: block table of %lld rows x %lld columns overflows "
                        "int64",
                        fn, (long long)num_reqs, (long long)g->cols);
    if (cells > 0 && !table)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: NULL %s for %lld x %lld entries", fn, name,
                        (long long)num_reqs, (long long)g->cols);
    return MLA_OK;
}

/* The buffers the batch entry points write: slot_mapping and block_table. */
static mla_status check_slot_outputs(const char *fn, const mla_batch_metadata *md, int64_t num_reqs,
                                     int64_t tokens, const geometry *g)
{
    if (md->slot_mapping_len < tokens)
        return mla_fail(MLA_ERR_CAPACITY,
                        "%s: md->slot_mapping_len = %lld is less than the %lld "
                        "scheduled tokens",
                        fn, (long long)md->slot_mapping_len, (long long)tokens);
    if (md->slot_mapping_len > 0 && !md->slot_mapping)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT,
                        "%s: NULL md->slot_mapping with slot_mapping_len "
                        "= %lld",
                        fn, (long long)md->slot_mapping_len);
    return check_table_output(fn, md->block_table, "md->block_table", num_reqs, g);
}

static mla_status check_build_outputs(const char *fn, const mla_batch_metadata *md,
                                      int64_t num_reqs, int64_t tokens, const geometry *g)
{
    const char *missing = !md->query_start_loc            ? "query_start_loc"
                          : num_reqs > 0 && !md->seq_lens ? "seq_lens"
                          : tokens > 0 && !md->positions  ? "positions"
                                                          : NULL;
    if (missing)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: NULL md->%s", fn, missing);
    return check_slot_outputs(fn, md, num_reqs, tokens, g);
}

/* update_block_table reuses md's query_start_loc and positions: they must
 * belong to these requests (each row spans its num_scheduled_tokens, each
 * position lies inside its request's sequence, which its blocks hold). */
static mla_status check_reused(const char *fn, const mla_request *reqs, int64_t num_reqs,
                               const mla_batch_metadata *md)
{
    const int32_t *qsl = md->query_start_loc;
    if (!qsl)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: NULL md->query_start_loc", fn);
    if (qsl[0] != 0)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: md->query_start_loc[0] = %d, not 0", fn,
                        (int)qsl[0]);
    for (int64_t r = 0; r < num_reqs; r++)
        if ((int64_t)qsl[r + 1] - qsl[r] != reqs[r].num_scheduled_tokens)
            return mla_fail(MLA_ERR_INVALID_ARGUMENT,
                            "%s: md->query_start_loc[%lld..%lld] = "
                            "%d..%d does not span reqs[%lld].num_scheduled_tokens = %lld",
                            fn, (long long)r, (long long)(r + 1), (int)qsl[r], (int)qsl[r + 1],
                            (long long)r, (long long)reqs[r].num_scheduled_tokens);
    if (qsl[num_reqs] > 0 && !md->positions)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: NULL md->positions", fn);
    for (int64_t r = 0; r < num_reqs; r++)
        for (int64_t t = qsl[r]; t < qsl[r + 1]; t++)
            if (md->positions[t] < 0 || md->positions[t] >= seq_len(&reqs[r]))
                return mla_fail(MLA_ERR_OUT_OF_RANGE,
                                "%s: md->positions[%lld] = %lld is outside "
                                "[0, %lld), the sequence of reqs[%lld]",
                                fn, (long long)t, (long long)md->positions[t],
                                (long long)seq_len(&reqs[r]), (long long)r);
    return MLA_OK;
}

/* ---- writing (inputs already checked) ------------------------------------ */

/* Kernel block k of a request: manager block k / m, kernel part k % m. */
static int64_t kernel_block_id(const mla_request *q, const geometry *g, int64_t k)
{
    return (int64_t)q->block_ids[k / g->m] * g->m + k % g->m;
}

/* A row from the request's id `from` on: its kernel ids, then zeros up to
 * kernel entry `end` (past it the row is zero already, or ends). */
static void write_row(const mla_request *q, const geometry *g, int64_t from, int64_t end,
                      int32_t *row)
{
    int64_t used = q->num_block_ids * g->m;
    if (g->m == 1 && used > from) /* the common case: ids are kernel ids (NULL when none) */
        memcpy(row + from, q->block_ids + from, (size_t)(used - from) * sizeof *row);
    else
        for (int64_t j = from; j < q->num_block_ids; j++)
            for (int64_t p = 0; p < g->m; p++)
                row[j * g->m + p] = (int32_t)(q->block_ids[j] * g->m + p);
    if (end > used)
        memset(row + used, 0, (size_t)(end - used) * sizeof *row);
}

/* A parallel table write: each of `parts` tasks writes a slice of the rows. */
typedef struct table_write {
    const mla_request *reqs;
    int64_t num_reqs, parts;
    const geometry *g;
    const table_rows *rows;
    int32_t *table;
} table_write;

static void write_table_rows(int64_t part, void *ctx)
{
    const table_write *w = ctx;
    const geometry *g = w->g;
    int64_t lo, hi;
    mla_part_range(w->num_reqs, w->parts, part, &lo, &hi);
    for (int64_t r = lo; r < hi; r++) {
        const mla_request *q = &w->reqs[r];
        int64_t end = w->rows ? w->rows->row_ids[r] * g->m : g->cols;
        write_row(q, g, first_new_id(w->rows, q, r), end, w->table + r * g->cols);
    }
}

/* Kernel entries a write stores: the whole table for a dense one, the
 * changed ids and the zeros after a shrunk row for an incremental one. */
static int64_t entries_written(const mla_request *reqs, int64_t num_reqs, const geometry *g,
                               const table_rows *rows)
{
    if (!rows)
        return num_reqs * g->cols;
    int64_t ids = 0;
    for (int64_t r = 0; r < num_reqs; r++) {
        const mla_request *q = &reqs[r];
        int64_t last = q->num_block_ids > rows->row_ids[r] ? q->num_block_ids : rows->row_ids[r];
        ids += last - first_new_id(rows, q, r);
    }
    return ids * g->m;
}

/* A dense table is B x max_blocks int32s, megabytes for long contexts;
 * rows are independent, so a large write is made by every thread. An
 * incremental one then records each row's new id count. */
static void write_block_table(const mla_request *reqs, int64_t num_reqs, const geometry *g,
                              const table_rows *rows, int32_t *table)
{
    if (g->cols == 0)
        return; /* no columns: table may be NULL, and every row holds 0 ids */
    bool large = num_reqs > 1 && entries_written(reqs, num_reqs, g, rows) >= MLA_FORK_MIN_ENTRIES;
    int threads = large ? omp_get_max_threads() : 1;
    table_write w = {.reqs = reqs, .num_reqs = num_reqs, .g = g, .rows = rows, .table = table,
                     .parts = num_reqs < threads ? num_reqs : threads};
    mla_parallel_for(w.parts, threads, write_table_rows, &w);
    if (rows)
        for (int64_t r = 0; r < num_reqs; r++)
            rows->row_ids[r] = reqs[r].num_block_ids;
}

/* docs/semantics.md §2.3. Position p sits at offset off = p % span of virtual block
 * blk = p / span; interleave-sized runs of that block go round-robin over the
 * ranks, and a rank packs its runs into its own kernel block. With one rank
 * this is block * bs + off. */
static int64_t slot_at(const mla_request *q, const geometry *g, int64_t blk, int64_t off)
{
    if (g->world > 1 && (off / g->interleave) % g->world != g->rank)
        return PAD_SLOT;
    int64_t local = g->world > 1 ? off / (g->world * g->interleave) * g->interleave + off % g->interleave
                                 : off;
    int64_t kernel_block = g->m == 1 ? q->block_ids[blk] : kernel_block_id(q, g, blk);
    return kernel_block * g->bs + local;
}

/* A request's positions are almost always consecutive: step (blk, off)
 * along them and divide only where they jump. */
static void write_slots(const mla_request *reqs, int64_t num_reqs, const geometry *g,
                        const mla_batch_metadata *md)
{
    const int32_t *qsl = md->query_start_loc;
    for (int64_t r = 0; r < num_reqs; r++) {
        int64_t prev = -2, blk = 0, off = 0;
        for (int64_t t = qsl[r]; t < qsl[r + 1]; t++) {
            int64_t p = md->positions[t];
            if (p == prev + 1 && off + 1 < g->span) {
                off++;
            } else {
                blk = p / g->span;
                off = p % g->span;
            }
            prev = p;
            md->slot_mapping[t] = slot_at(&reqs[r], g, blk, off);
        }
    }
    for (int64_t t = qsl[num_reqs]; t < md->slot_mapping_len; t++)
        md->slot_mapping[t] = PAD_SLOT;
}

/* query_start_loc, seq_lens, positions and the maxima. */
static void write_common(const mla_request *reqs, int64_t num_reqs, mla_batch_metadata *md)
{
    int64_t max_query = 0, max_seq = 0;
    md->query_start_loc[0] = 0;
    for (int64_t r = 0; r < num_reqs; r++) {
        const mla_request *q = &reqs[r];
        int64_t start = md->query_start_loc[r];
        md->query_start_loc[r + 1] = (int32_t)(start + q->num_scheduled_tokens);
        md->seq_lens[r] = (int32_t)seq_len(q);
        for (int64_t j = 0; j < q->num_scheduled_tokens; j++)
            md->positions[start + j] = q->num_computed_tokens + j;
        max_query = q->num_scheduled_tokens > max_query ? q->num_scheduled_tokens : max_query;
        max_seq = seq_len(q) > max_seq ? seq_len(q) : max_seq;
    }
    md->num_actual_tokens = md->query_start_loc[num_reqs];
    md->max_query_len = max_query;
    md->max_seq_len = max_seq;
}

/* Both batch builders: dense with rows NULL, else incremental. */
static mla_status build_batch(const char *fn, const mla_request *reqs, int64_t num_reqs,
                              const mla_block_layout *layout, const table_rows *rows,
                              mla_batch_metadata *md)
{
    if (!md)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: NULL md", fn);
    geometry g;
    int64_t tokens = 0;
    mla_status st = check_batch(fn, reqs, num_reqs, layout, rows, &g, &tokens);
    if (st == MLA_OK)
        st = check_build_outputs(fn, md, num_reqs, tokens, &g);
    if (st != MLA_OK)
        return st;
    write_common(reqs, num_reqs, md);
    write_block_table(reqs, num_reqs, &g, rows, md->block_table);
    write_slots(reqs, num_reqs, &g, md);
    return MLA_OK;
}

mla_status mla_build_batch_metadata(const mla_request *reqs, int64_t num_reqs,
                                    const mla_block_layout *layout, mla_batch_metadata *md)
{
    static const char fn[] = "mla_build_batch_metadata";
    if (!mla_tracing())
        return build_batch(fn, reqs, num_reqs, layout, NULL, md);
    double start = mla_trace_begin();
    mla_status st = build_batch(fn, reqs, num_reqs, layout, NULL, md);
    mla_trace_batch_builder(start, "mla_build_batch_metadata", st, num_reqs);
    return st;
}

mla_status mla_build_batch_metadata_append(const mla_request *reqs, int64_t num_reqs,
                                           const mla_block_layout *layout,
                                           const int64_t *first_new, int64_t *row_ids,
                                           mla_batch_metadata *md)
{
    static const char fn[] = "mla_build_batch_metadata_append";
    table_rows rows = {.first_new = first_new, .row_ids = row_ids};
    if (!mla_tracing())
        return build_batch(fn, reqs, num_reqs, layout, &rows, md);
    double start = mla_trace_begin();
    mla_status st = build_batch(fn, reqs, num_reqs, layout, &rows, md);
    mla_trace_batch_builder(start, "mla_build_batch_metadata_append", st, num_reqs);
    return st;
}

static mla_status append_block_table(const mla_request *reqs, int64_t num_reqs,
                                     const mla_block_layout *layout, const int64_t *first_new,
                                     int64_t *row_ids, int32_t *block_table)
{
    static const char fn[] = "mla_append_block_table";
    table_rows rows = {.first_new = first_new, .row_ids = row_ids};
    geometry g;
    int64_t tokens = 0;
    mla_status st = check_batch(fn, reqs, num_reqs, layout, &rows, &g, &tokens);
    if (st == MLA_OK)
        st = check_table_output(fn, block_table, "block_table", num_reqs, &g);
    if (st != MLA_OK)
        return st;
    write_block_table(reqs, num_reqs, &g, &rows, block_table);
    return MLA_OK;
}

mla_status mla_append_block_table(const mla_request *reqs, int64_t num_reqs,
                                  const mla_block_layout *layout, const int64_t *first_new,
                                  int64_t *row_ids, int32_t *block_table)
{
    if (!mla_tracing())
        return append_block_table(reqs, num_reqs, layout, first_new, row_ids, block_table);
    double start = mla_trace_begin();
    mla_status st = append_block_table(reqs, num_reqs, layout, first_new, row_ids, block_table);
    mla_trace_batch_builder(start, "mla_append_block_table", st, num_reqs);
    return st;
}

static mla_status update_block_table(const mla_request *reqs, int64_t num_reqs,
                                     const mla_block_layout *layout, mla_batch_metadata *md)
{
    static const char fn[] = "mla_update_block_table";
    if (!md)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "%s: NULL md", fn);
    geometry g;
    int64_t tokens = 0;
    mla_status st = check_batch(fn, reqs, num_reqs, layout, NULL, &g, &tokens);
    if (st == MLA_OK)
        st = check_reused(fn, reqs, num_reqs, md);
    if (st == MLA_OK)
        st = check_slot_outputs(fn, md, num_reqs, tokens, &g);
    if (st != MLA_OK)
        return st;
    write_block_table(reqs, num_reqs, &g, NULL, md->block_table);
    write_slots(reqs, num_reqs, &g, md);
    return MLA_OK;
}

mla_status mla_update_block_table(const mla_request *reqs, int64_t num_reqs,
                                  const mla_block_layout *layout, mla_batch_metadata *md)
{
    if (!mla_tracing())
        return update_block_table(reqs, num_reqs, layout, md);
    double start = mla_trace_begin();
    mla_status st = update_block_table(reqs, num_reqs, layout, md);
    mla_trace_batch_builder(start, "mla_update_block_table", st, num_reqs);
    return st;
}
