/*
 * Batch metadata, block tables, slot mappings, reordering and the
 * decode/prefill split (docs/semantics.md §2.1-2.4): the worked examples; every rejected
 * input, each with all outputs checked untouched; and property tests over
 * thousands of seeded random batches against re-derivations written plainly
 * from docs/semantics.md (a rank keeps its positions contiguously across its
 * blocks; vLLM's swap loop run on a copy of the batch; the split rules as
 * listed), not against the library's own arithmetic. The incremental
 * forms (a block table kept from step to step) are run over random
 * multi-step sequences, requests growing, finishing, arriving and trading
 * rows, and must give exactly what the dense builder gives every step.
 */
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- random numbers -------------------------------------------------------- */

static bool chance(int percent)
{
    return support_random_in(0, 99) < percent;
}

/* ---- a small fixed batch and the rejection harness -------------------------- */

enum { FX_REQS = 4, FX_COLS = 8, FX_TOKENS = 10, FX_SLOTS = 12 };

/* Four requests, kernel blocks of 16 inside manager blocks of 32 (m = 2):
 * r0 decodes-ish (30 computed + 4), r1 is a fresh prefill of 5, r2 a decode
 * of 1 after 40, r3 is idle (0 scheduled). Every buffer starts at 0x5a. */
typedef struct fixture {
    mla_request reqs[FX_REQS];
    int32_t ids[FX_REQS][4];
    mla_block_layout layout;
    int32_t qsl[FX_REQS + 1], seq_lens[FX_REQS], table[FX_REQS * FX_COLS];
    int64_t positions[FX_TOKENS], slots[FX_SLOTS];
    mla_batch_metadata md;
    /* the incremental forms' rows: each holds its request's ids already */
    int64_t row_ids[FX_REQS], first_new[FX_REQS];
    /* what the call under test receives (the fixture's own by default) */
    const mla_request *reqs_arg;
    int64_t num_reqs_arg;
    const mla_block_layout *layout_arg;
    mla_batch_metadata *md_arg;
    int64_t *row_ids_arg;
    const int64_t *first_new_arg;
    int32_t *table_arg;
} fixture;

static void fixture_init(fixture *f)
{
    memset(f, 0x5a, sizeof *f);
    static const int32_t ids[FX_REQS][4] = {{5, 2}, {1}, {0, 6}, {3}};
    memcpy(f->ids, ids, sizeof ids);
    /* computed, scheduled, prompt, block ids */
    static const int64_t counts[FX_REQS][4] = {
        {30, 4, 30, 2},
        {0, 5, 5, 1},
        {40, 1, 41, 2},
        {10, 0, 10, 1},
    };
    for (int r = 0; r < FX_REQS; r++)
        f->reqs[r] =
            (mla_request){counts[r][0], counts[r][1], counts[r][2], f->ids[r], counts[r][3]};
    f->layout = (mla_block_layout){.manager_block_size = 32,
                                   .kernel_block_size = 16,
                                   .max_blocks_per_req = FX_COLS,
                                   .cp_world_size = 1,
                                   .cp_rank = 0,
                                   .cp_interleave = 1};
    f->md = (mla_batch_metadata){.query_start_loc = f->qsl,
                                 .seq_lens = f->seq_lens,
                                 .positions = f->positions,
                                 .slot_mapping = f->slots,
                                 .slot_mapping_len = FX_SLOTS,
                                 .block_table = f->table,
                                 .num_actual_tokens = -7,
                                 .max_query_len = -7,
                                 .max_seq_len = -7};
    for (int r = 0; r < FX_REQS; r++)
        f->row_ids[r] = f->first_new[r] = counts[r][3];
    f->reqs_arg = f->reqs;
    f->num_reqs_arg = FX_REQS;
    f->layout_arg = &f->layout;
    f->md_arg = &f->md;
    f->row_ids_arg = f->row_ids;
    f->first_new_arg = f->first_new;
    f->table_arg = f->table;
}

typedef enum { CALL_BUILD, CALL_UPDATE, CALL_BUILD_APPEND, CALL_APPEND_TABLE } call_kind;

static const char *const call_names[] = {"mla_build_batch_metadata", "mla_update_block_table",
                                         "mla_build_batch_metadata_append",
                                         "mla_append_block_table"};

static mla_status call(fixture *f, call_kind kind)
{
    switch (kind) {
    case CALL_BUILD:
        return mla_build_batch_metadata(f->reqs_arg, f->num_reqs_arg, f->layout_arg, f->md_arg);
    case CALL_UPDATE:
        return mla_update_block_table(f->reqs_arg, f->num_reqs_arg, f->layout_arg, f->md_arg);
    case CALL_BUILD_APPEND:
        return mla_build_batch_metadata_append(f->reqs_arg, f->num_reqs_arg, f->layout_arg,
                                               f->first_new_arg, f->row_ids_arg, f->md_arg);
    case CALL_APPEND_TABLE:
        return mla_append_block_table(f->reqs_arg, f->num_reqs_arg, f->layout_arg,
                                      f->first_new_arg, f->row_ids_arg, f->table_arg);
    }
    return MLA_ERR_INVALID_ARGUMENT;
}

/* The call, given bad_input, fails with `want`, its message names `needle`,
 * and not one byte of the fixture (inputs, every output buffer, md's
 * scalars) changed. */
static void expect_rejected(fixture *f, call_kind kind, const char *bad_input, mla_status want,
                            const char *needle)
{
    fixture before;
    memcpy(&before, f, sizeof before);
    const char *entry = call_names[kind];
    support_expect_reject(entry, bad_input, call(f, kind), want, needle);
    assert_true(support_contains(mla_last_error(), entry));
    assert_memory_equal(&before, f, sizeof before);
}

/* ---- worked examples ---------------------------------------------------------- */

/* docs/semantics.md §2.3: bs = 16, row [7, 3, 9], positions 30..33 -> 62, 63, 144, 145. */
static void test_spec_worked_example(void **state)
{
    (void)state;
    int32_t ids[3] = {7, 3, 9}, qsl[2], seq_lens[1], table[5];
    int64_t positions[4], slots[6];
    mla_request req = {30, 4, 30, ids, 3};
    mla_block_layout layout = {16, 16, 5, 1, 0, 1};
    mla_batch_metadata md = {qsl, seq_lens, positions, slots, 6, table, 0, 0, 0};
    assert_int_equal(mla_build_batch_metadata(&req, 1, &layout, &md), MLA_OK);
    static const int64_t want_slots[6] = {62, 63, 144, 145, -1, -1};
    static const int64_t want_positions[4] = {30, 31, 32, 33};
    static const int32_t want_table[5] = {7, 3, 9, 0, 0};
    assert_memory_equal(slots, want_slots, sizeof want_slots);
    assert_memory_equal(positions, want_positions, sizeof want_positions);
    assert_memory_equal(table, want_table, sizeof want_table);
    assert_int_equal(qsl[0], 0);
    assert_int_equal(qsl[1], 4);
    assert_int_equal(seq_lens[0], 34);
    assert_int_equal(md.num_actual_tokens, 4);
    assert_int_equal(md.max_query_len, 4);
    assert_int_equal(md.max_seq_len, 34);
}

/* Builds the worked example's request (and a second one) with `layout`
 * into md's buffers, which hold sentinels first. */
static mla_status build_with(const mla_block_layout *layout, int32_t table[2 * 6],
                             int64_t slots[12], int64_t positions[10])
{
    static int32_t ids0[3] = {7, 3, 9}, ids1[2] = {4, 1};
    const mla_request reqs[2] = {{30, 4, 30, ids0, 3}, {0, 6, 6, ids1, 2}};
    int32_t qsl[3], seq_lens[2];
    memset(table, 0x5a, 2 * 6 * sizeof *table);
    memset(slots, 0x5a, 12 * sizeof *slots);
    mla_batch_metadata md = {qsl, seq_lens, positions, slots, 12, table, 0, 0, 0};
    return mla_build_batch_metadata(reqs, 2, layout, &md);
}

/* A zero block size is the other one and zero context-parallel fields
 * mean none (mla.h): a zero-initialised layout with only a block size and
 * the table width builds what the spelled-out layout builds. */
static void test_layout_zero_fields_are_defaults(void **state)
{
    (void)state;
    static const struct {
        mla_block_layout spelled, zeroed;
    } cases[] = {
        {{16, 16, 6, 1, 0, 1}, {.manager_block_size = 16, .max_blocks_per_req = 6}},
        {{16, 16, 6, 1, 0, 1}, {.kernel_block_size = 16, .max_blocks_per_req = 6}},
        {{16, 16, 6, 1, 0, 1}, {16, 16, 6, 0, 0, 0}},
        {{16, 16, 6, 2, 1, 1}, {.manager_block_size = 16, .max_blocks_per_req = 6,
                                .cp_world_size = 2, .cp_rank = 1}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int32_t want_table[12], got_table[12];
        int64_t want_slots[12], got_slots[12], want_pos[10], got_pos[10];
        assert_int_equal(build_with(&cases[i].spelled, want_table, want_slots, want_pos), MLA_OK);
        assert_int_equal(build_with(&cases[i].zeroed, got_table, got_slots, got_pos), MLA_OK);
        assert_memory_equal(got_table, want_table, sizeof want_table);
        assert_memory_equal(got_slots, want_slots, sizeof want_slots);
    }
}

/* Manager blocks of 64 over kernel blocks of 16: id b becomes 4b .. 4b+3. */
static void test_block_expansion_example(void **state)
{
    (void)state;
    int32_t ids_a[2] = {2, 5}, ids_b[1] = {1}, qsl[3], seq_lens[2], table[2 * 10];
    int64_t positions[5], slots[5];
    mla_request reqs[2] = {{66, 3, 66, ids_a, 2}, {0, 2, 2, ids_b, 1}};
    mla_block_layout layout = {64, 16, 10, 1, 0, 1};
    mla_batch_metadata md = {qsl, seq_lens, positions, slots, 5, table, 0, 0, 0};
    assert_int_equal(mla_build_batch_metadata(reqs, 2, &layout, &md), MLA_OK);
    static const int32_t want_table[20] = {
        8, 9, 10, 11, 20, 21, 22, 23, 0, 0,
        4, 5, 6, 7, 0, 0, 0, 0, 0, 0,
    };
    assert_memory_equal(table, want_table, sizeof want_table);
    /* positions 66, 67, 68 of request a sit in kernel block 4 (= 20) at
     * offsets 2, 3, 4; positions 0, 1 of b in kernel block 4 at 0, 1 */
    static const int64_t want_slots[5] = {20 * 16 + 2, 20 * 16 + 3, 20 * 16 + 4, 64, 65};
    assert_memory_equal(slots, want_slots, sizeof want_slots);
    static const int32_t want_qsl[3] = {0, 3, 5}, want_seq[2] = {69, 2};
    assert_memory_equal(qsl, want_qsl, sizeof want_qsl);
    assert_memory_equal(seq_lens, want_seq, sizeof want_seq);
    assert_int_equal(md.max_query_len, 3);
    assert_int_equal(md.max_seq_len, 69);
}

/* Context parallelism, bs = 4 over 2 ranks: a virtual block is 8 positions.
 * Interleave 1 deals single positions round-robin; interleave 2 deals pairs. */
static void test_cp_examples(void **state)
{
    (void)state;
    int32_t ids[2] = {5, 7}, qsl[2], seq_lens[1], table[2];
    int64_t positions[16], slots[16];
    mla_request req = {0, 16, 16, ids, 2};
    mla_batch_metadata md = {qsl, seq_lens, positions, slots, 16, table, 0, 0, 0};
    static const int64_t want[2][2][16] = {
        {/* interleave 1: rank 0 keeps even positions, rank 1 odd ones */
         {20, -1, 21, -1, 22, -1, 23, -1, 28, -1, 29, -1, 30, -1, 31, -1},
         {-1, 20, -1, 21, -1, 22, -1, 23, -1, 28, -1, 29, -1, 30, -1, 31}},
        {/* interleave 2: rank 0 keeps 0,1 4,5 8,9 12,13 */
         {20, 21, -1, -1, 22, 23, -1, -1, 28, 29, -1, -1, 30, 31, -1, -1},
         {-1, -1, 20, 21, -1, -1, 22, 23, -1, -1, 28, 29, -1, -1, 30, 31}}};
    for (int il = 0; il < 2; il++) {
        for (int rank = 0; rank < 2; rank++) {
            mla_block_layout layout = {4, 4, 2, 2, rank, il + 1};
            assert_int_equal(mla_build_batch_metadata(&req, 1, &layout, &md), MLA_OK);
            assert_memory_equal(slots, want[il][rank], sizeof want[il][rank]);
            assert_int_equal(table[0], 5);
            assert_int_equal(table[1], 7);
            assert_int_equal(seq_lens[0], 16); /* global lengths, as vLLM keeps them */
        }
    }
    /* 16 positions over 2 ranks need 2 blocks of 4; one block is too few */
    req.num_block_ids = 1;
    mla_block_layout layout = {4, 4, 2, 2, 0, 1};
    support_expect_reject("mla_build_batch_metadata",
                          "num_block_ids too few for the tokens under context parallelism",
                          mla_build_batch_metadata(&req, 1, &layout, &md), MLA_ERR_INVALID_ARGUMENT,
                          "16 tokens need 2 kernel blocks of 8 positions");
}

/* No requests: query_start_loc = [0], every slot padding, maxima 0. */
static void test_empty_batch(void **state)
{
    (void)state;
    int32_t qsl[1] = {99};
    int64_t slots[3] = {5, 5, 5};
    mla_block_layout layout = {16, 16, 4, 1, 0, 1};
    mla_batch_metadata md = {qsl, NULL, NULL, slots, 3, NULL, 9, 9, 9};
    assert_int_equal(mla_build_batch_metadata(NULL, 0, &layout, &md), MLA_OK);
    assert_int_equal(qsl[0], 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(slots[i], -1);
    assert_int_equal(md.num_actual_tokens, 0);
    assert_int_equal(md.max_query_len, 0);
    assert_int_equal(md.max_seq_len, 0);
    assert_int_equal(mla_update_block_table(NULL, 0, &layout, &md), MLA_OK);
}

/* Requests without block ids (block_ids NULL, nothing scheduled) and a
 * table without columns (block_table NULL): nothing is copied from or into
 * a NULL array (memcpy with NULL is undefined even for 0 bytes; the
 * suites under -fsanitize=undefined see it). */
static void test_no_block_ids(void **state)
{
    (void)state;
    const mla_request reqs[2] = {{.num_prompt_tokens = 4}, {.num_prompt_tokens = 7}};
    int32_t qsl[3], seq_lens[2], table[2 * 3];
    int64_t slots[2] = {5, 5};
    memset(table, 0x7f, sizeof table);
    mla_block_layout layout = {16, 16, 3, 1, 0, 1};
    mla_batch_metadata md = {qsl, seq_lens, NULL, slots, 2, table, 0, 0, 0};
    assert_int_equal(mla_build_batch_metadata(reqs, 2, &layout, &md), MLA_OK);
    for (int i = 0; i < 2 * 3; i++)
        assert_int_equal(table[i], 0);
    assert_int_equal(mla_update_block_table(reqs, 2, &layout, &md), MLA_OK);
    layout.max_blocks_per_req = 0;
    md.block_table = NULL;
    assert_int_equal(mla_build_batch_metadata(reqs, 2, &layout, &md), MLA_OK);
    assert_int_equal(mla_update_block_table(reqs, 2, &layout, &md), MLA_OK);
    assert_int_equal(qsl[2], 0);
    assert_int_equal(slots[0], -1);
    assert_int_equal(slots[1], -1);
}

/* The fixture itself is valid, and so is its second-group update. */
static void test_fixture_valid(void **state)
{
    (void)state;
    fixture f;
    fixture_init(&f);
    assert_int_equal(call(&f, CALL_BUILD), MLA_OK);
    static const int32_t want_qsl[5] = {0, 4, 9, 10, 10}, want_seq[4] = {34, 5, 41, 10};
    assert_memory_equal(f.qsl, want_qsl, sizeof want_qsl);
    assert_memory_equal(f.seq_lens, want_seq, sizeof want_seq);
    static const int32_t want_table[FX_REQS * FX_COLS] = {
        10, 11, 4, 5, 0, 0, 0, 0,  /* ids 5, 2  */
        2, 3, 0, 0, 0, 0, 0, 0,    /* id 1      */
        0, 1, 12, 13, 0, 0, 0, 0,  /* ids 0, 6  */
        6, 7, 0, 0, 0, 0, 0, 0,    /* id 3      */
    };
    assert_memory_equal(f.table, want_table, sizeof want_table);
    static const int64_t want_slots[FX_SLOTS] = {
        11 * 16 + 14, 11 * 16 + 15, 4 * 16, 4 * 16 + 1, /* r0: 30..33, kernel blocks 11, 4 */
        32, 33, 34, 35, 36,                              /* r1: 0..4 in kernel block 2 */
        12 * 16 + 8,                                     /* r2: 40 in kernel block 12 */
        -1, -1,                                          /* padding */
    };
    assert_memory_equal(f.slots, want_slots, sizeof want_slots);
    assert_int_equal(f.md.num_actual_tokens, 10);
    assert_int_equal(f.md.max_query_len, 5);
    assert_int_equal(f.md.max_seq_len, 41);

    /* a second KV-cache group with kernel blocks of 8 (m = 1) and new ids */
    int32_t ids2[FX_REQS][8] = {{9, 8, 7, 6, 5}, {4}, {20, 21, 22, 23, 24, 25}, {30, 31}};
    static const int64_t nids2[FX_REQS] = {5, 1, 6, 2};
    for (int r = 0; r < FX_REQS; r++) {
        f.reqs[r].block_ids = ids2[r];
        f.reqs[r].num_block_ids = nids2[r];
    }
    mla_block_layout layout2 = {8, 8, FX_COLS, 1, 0, 1};
    f.layout_arg = &layout2;
    assert_int_equal(call(&f, CALL_UPDATE), MLA_OK);
    assert_memory_equal(f.qsl, want_qsl, sizeof want_qsl);
    assert_memory_equal(f.seq_lens, want_seq, sizeof want_seq);
    /* r0: positions 30, 31 -> block 3 = id 6, offsets 6, 7; 32, 33 -> block 4
     * = id 5, offsets 0, 1. r1: 0..4 -> id 4. r2: 40 -> block 5 = id 25. */
    static const int64_t want[FX_SLOTS] = {
        6 * 8 + 6, 6 * 8 + 7, 5 * 8, 5 * 8 + 1, 32, 33, 34, 35, 36, 25 * 8, -1, -1,
    };
    assert_memory_equal(f.slots, want, sizeof want);
    assert_int_equal(f.table[0 * FX_COLS + 4], 5);
    assert_int_equal(f.table[0 * FX_COLS + 5], 0);
    assert_int_equal(f.table[2 * FX_COLS + 5], 25);
    assert_int_equal(f.md.num_actual_tokens, 10); /* untouched by update */
}

/* ---- rejected input ----------------------------------------------------------- */

static void test_build_rejects_arguments(void **state)
{
    (void)state;
    fixture f;
    fixture_init(&f);
    f.md_arg = NULL;
    expect_rejected(&f, CALL_BUILD, "md NULL", MLA_ERR_INVALID_ARGUMENT, "NULL md");
    fixture_init(&f);
    f.layout_arg = NULL;
    expect_rejected(&f, CALL_BUILD, "layout NULL", MLA_ERR_INVALID_ARGUMENT, "NULL layout");
    fixture_init(&f);
    f.num_reqs_arg = -1;
    expect_rejected(&f, CALL_BUILD, "num_reqs -1", MLA_ERR_INVALID_ARGUMENT,
                    "num_reqs = -1 is negative");
    fixture_init(&f);
    f.reqs_arg = NULL;
    expect_rejected(&f, CALL_BUILD, "reqs NULL with num_reqs 4", MLA_ERR_INVALID_ARGUMENT,
                    "NULL reqs with num_reqs = 4");
}

static void test_build_rejects_layout(void **state)
{
    (void)state;
    static const struct {
        mla_block_layout layout;
        const char *bad_input;
        mla_status status;
        const char *needle;
    } cases[] = {
        {{0, 0, 8, 1, 0, 1},
         "kernel_block_size and manager_block_size 0",
         MLA_ERR_INVALID_ARGUMENT,
         "kernel_block_size = 0 and layout->manager_block_size = 0"},
        {{32, -16, 8, 1, 0, 1},
         "kernel_block_size -16",
         MLA_ERR_INVALID_ARGUMENT,
         "kernel_block_size = -16"},
        {{0, -16, 8, 1, 0, 1},
         "manager_block_size 0 and kernel_block_size -16",
         MLA_ERR_INVALID_ARGUMENT,
         "manager_block_size = 0"},
        {{32, 12, 8, 1, 0, 1},
         "kernel_block_size 12 not dividing manager_block_size 32",
         MLA_ERR_INVALID_ARGUMENT,
         "kernel_block_size = 12 does not divide"},
        {{16, 32, 8, 1, 0, 1},
         "kernel_block_size 32 above manager_block_size 16",
         MLA_ERR_INVALID_ARGUMENT,
         "kernel_block_size = 32 does not divide"},
        {{32, 16, -1, 1, 0, 1},
         "max_blocks_per_req -1",
         MLA_ERR_INVALID_ARGUMENT,
         "max_blocks_per_req = -1 is negative"},
        {{32, 16, 8, -1, 0, 1},
         "cp_world_size -1",
         MLA_ERR_INVALID_ARGUMENT,
         "cp_world_size = -1 < 1"},
        {{32, 16, 8, 2, 2, 1},
         "cp_rank 2 of cp_world_size 2",
         MLA_ERR_OUT_OF_RANGE,
         "cp_rank = 2 is outside [0, 2)"},
        {{32, 16, 8, 2, -1, 1},
         "cp_rank -1",
         MLA_ERR_OUT_OF_RANGE,
         "cp_rank = -1 is outside [0, 2)"},
        {{32, 16, 8, 1, 0, -2},
         "cp_interleave -2",
         MLA_ERR_INVALID_ARGUMENT,
         "cp_interleave = -2 < 1"},
        {{32, 16, 8, 2, 1, 3},
         "cp_interleave 3 not dividing kernel_block_size 16",
         MLA_ERR_INVALID_ARGUMENT,
         "cp_interleave = 3 does not divide"},
        {{INT64_C(1) << 62, INT64_C(1) << 62, 8, 4, 0, 1},
         "kernel_block_size x cp_world_size past int64",
         MLA_ERR_OVERFLOW,
         "kernel_block_size * cp_world_size"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        fixture f;
        fixture_init(&f);
        f.layout = cases[i].layout;
        expect_rejected(&f, CALL_BUILD, cases[i].bad_input, cases[i].status, cases[i].needle);
        expect_rejected(&f, CALL_UPDATE, cases[i].bad_input, cases[i].status, cases[i].needle);
    }
}

static void test_build_rejects_requests(void **state)
{
    (void)state;
    fixture f;
    fixture_init(&f);
    f.reqs[1].num_computed_tokens = -3;
    expect_rejected(&f, CALL_BUILD, "num_computed_tokens -3", MLA_ERR_INVALID_ARGUMENT,
                    "reqs[1].num_computed_tokens = -3 is negative");
    fixture_init(&f);
    f.reqs[2].num_scheduled_tokens = -1;
    expect_rejected(&f, CALL_BUILD, "num_scheduled_tokens -1", MLA_ERR_INVALID_ARGUMENT,
                    "reqs[2].num_scheduled_tokens = -1 is negative");
    fixture_init(&f);
    f.reqs[3].num_prompt_tokens = -5;
    expect_rejected(&f, CALL_BUILD, "num_prompt_tokens -5", MLA_ERR_INVALID_ARGUMENT,
                    "reqs[3].num_prompt_tokens = -5 is negative");
    fixture_init(&f);
    f.reqs[0].num_computed_tokens = INT32_MAX;
    expect_rejected(&f, CALL_BUILD, "num_computed_tokens + num_scheduled_tokens past int32",
                    MLA_ERR_OVERFLOW, "reqs[0]: num_computed_tokens + num_scheduled_tokens");
    fixture_init(&f);
    f.reqs[0].num_scheduled_tokens = INT64_MAX;
    expect_rejected(&f, CALL_BUILD, "num_scheduled_tokens INT64_MAX", MLA_ERR_OVERFLOW,
                    "does not fit seq_lens (int32)");

    /* each length fits int32, the total of scheduled tokens does not */
    fixture_init(&f);
    f.layout = (mla_block_layout){INT64_C(1) << 31, INT64_C(1) << 31, 2, 1, 0, 1};
    f.reqs[0] = (mla_request){0, INT32_MAX - 100, 0, f.ids[0], 1};
    f.reqs[1].num_scheduled_tokens = 200;
    expect_rejected(&f, CALL_BUILD, "total of num_scheduled_tokens past int32", MLA_ERR_OVERFLOW,
                    "query_start_loc's int32");

    fixture_init(&f);
    f.reqs[2].num_block_ids = -1;
    expect_rejected(&f, CALL_BUILD, "num_block_ids -1", MLA_ERR_INVALID_ARGUMENT,
                    "reqs[2].num_block_ids = -1 is negative");
    fixture_init(&f);
    f.reqs[0].block_ids = NULL;
    expect_rejected(&f, CALL_BUILD, "block_ids NULL", MLA_ERR_INVALID_ARGUMENT,
                    "reqs[0].block_ids is NULL");
    /* 5 manager blocks = 10 kernel blocks > 8 columns */
    fixture_init(&f);
    f.reqs[3].num_block_ids = 5;
    expect_rejected(&f, CALL_BUILD, "block ids expanding past max_blocks_per_req", MLA_ERR_CAPACITY,
                    "reqs[3]: 5 block ids of 2 kernel blocks each do not fit max_blocks_per_req = "
                    "8");
    fixture_init(&f);
    f.reqs[3].num_block_ids = INT64_MAX / 2 + 1;
    expect_rejected(&f, CALL_BUILD, "num_block_ids INT64_MAX / 2 + 1", MLA_ERR_CAPACITY,
                    "do not fit max_blocks_per_req");
    /* 34 tokens need 3 kernel blocks; one manager block gives 2 */
    fixture_init(&f);
    f.reqs[0].num_block_ids = 1;
    expect_rejected(&f, CALL_BUILD, "num_block_ids too few for the request's tokens",
                    MLA_ERR_INVALID_ARGUMENT,
                    "reqs[0]: 34 tokens need 3 kernel blocks of 16 positions, but its 1 block ids "
                    "give 2");
    fixture_init(&f);
    f.reqs[1].num_scheduled_tokens = 33;
    expect_rejected(&f, CALL_BUILD, "num_scheduled_tokens past the request's blocks",
                    MLA_ERR_INVALID_ARGUMENT, "reqs[1]: 33 tokens need 3 kernel blocks");

    /* block ids: negative, expanding past int32, slots past int64 */
    fixture_init(&f);
    int32_t ids3[3] = {1, 2, -1};
    f.reqs[3].block_ids = ids3;
    f.reqs[3].num_block_ids = 3;
    expect_rejected(&f, CALL_BUILD, "block id -1", MLA_ERR_OUT_OF_RANGE,
                    "reqs[3].block_ids[2] = -1 is negative");
    fixture_init(&f);
    f.ids[2][1] = 1 << 30; /* kernel ids up to 2^31 + 1 */
    expect_rejected(&f, CALL_BUILD, "block id expanding past int32 kernel ids", MLA_ERR_OVERFLOW,
                    "reqs[2].block_ids[1] = 1073741824 expands past");
    fixture_init(&f);
    f.ids[2][1] = (1 << 30) - 1; /* the largest that fits: kernel ids up to 2^31 - 1 */
    assert_int_equal(call(&f, CALL_BUILD), MLA_OK);
    assert_int_equal(f.table[2 * FX_COLS + 3], INT32_MAX);
    fixture_init(&f);
    f.layout = (mla_block_layout){INT64_C(1) << 40, INT64_C(1) << 40, 2, 1, 0, 1};
    f.ids[1][0] = 1 << 24; /* slots up to 2^64 */
    expect_rejected(&f, CALL_BUILD, "block id whose slots pass int64", MLA_ERR_OVERFLOW,
                    "reqs[1].block_ids[0] = 16777216 expands past");
    /* more than 2^31 kernel blocks per manager block: not even id 0 expands
     * within int32, and a negative id is still negative (neither may pass
     * to be truncated into the table) */
    const int64_t m = (INT64_C(1) << 31) + 1;
    for (int k = 0; k < 2; k++) {
        fixture_init(&f);
        f.layout = (mla_block_layout){m, 1, m, 1, 0, 1};
        f.reqs[0].num_block_ids = 1;
        f.ids[0][0] = k == 0 ? 0 : -1;
        for (call_kind kind = CALL_BUILD; kind <= CALL_UPDATE; kind++)
            if (k == 0)
                expect_rejected(&f, kind, "manager / kernel block ratio past 2^31 (block id 0)",
                                MLA_ERR_OVERFLOW,
                                "reqs[0].block_ids[0] = 0 expands past int32 kernel block ids");
            else
                expect_rejected(&f, kind,
                                "block id -1 with a manager / kernel block ratio past 2^31",
                                MLA_ERR_OUT_OF_RANGE, "reqs[0].block_ids[0] = -1 is negative");
    }
}

static void test_build_rejects_outputs(void **state)
{
    (void)state;
    fixture f;
    fixture_init(&f);
    f.md.query_start_loc = NULL;
    expect_rejected(&f, CALL_BUILD, "md->query_start_loc NULL", MLA_ERR_INVALID_ARGUMENT,
                    "NULL md->query_start_loc");
    fixture_init(&f);
    f.md.seq_lens = NULL;
    expect_rejected(&f, CALL_BUILD, "md->seq_lens NULL", MLA_ERR_INVALID_ARGUMENT,
                    "NULL md->seq_lens");
    fixture_init(&f);
    f.md.positions = NULL;
    expect_rejected(&f, CALL_BUILD, "md->positions NULL", MLA_ERR_INVALID_ARGUMENT,
                    "NULL md->positions");
    fixture_init(&f);
    f.md.slot_mapping = NULL;
    expect_rejected(&f, CALL_BUILD, "md->slot_mapping NULL", MLA_ERR_INVALID_ARGUMENT,
                    "NULL md->slot_mapping");
    fixture_init(&f);
    f.md.slot_mapping_len = 9;
    expect_rejected(&f, CALL_BUILD, "md->slot_mapping_len below the scheduled tokens",
                    MLA_ERR_CAPACITY,
                    "md->slot_mapping_len = 9 is less than the 10 scheduled tokens");
    fixture_init(&f);
    f.md.slot_mapping_len = -1;
    expect_rejected(&f, CALL_BUILD, "md->slot_mapping_len -1", MLA_ERR_CAPACITY,
                    "md->slot_mapping_len = -1");
    fixture_init(&f);
    f.md.block_table = NULL;
    expect_rejected(&f, CALL_BUILD, "md->block_table NULL", MLA_ERR_INVALID_ARGUMENT,
                    "NULL md->block_table");
    fixture_init(&f);
    f.layout.max_blocks_per_req = INT64_MAX;
    expect_rejected(&f, CALL_BUILD, "max_blocks_per_req INT64_MAX (block table size past int64)",
                    MLA_ERR_OVERFLOW, "block table of 4 rows x 9223372036854775807 columns");

    /* NULL is fine wherever nothing would be written */
    fixture_init(&f);
    f.layout.max_blocks_per_req = 0;
    f.md.block_table = NULL;
    f.num_reqs_arg = 0;
    f.md.seq_lens = NULL;
    f.md.positions = NULL;
    assert_int_equal(call(&f, CALL_BUILD), MLA_OK);
}

static void test_update_rejects(void **state)
{
    (void)state;
    fixture f;
    fixture_init(&f);
    assert_int_equal(call(&f, CALL_BUILD), MLA_OK);
    /* every case starts from the built state; its pointers point into f */
    fixture built;
    memcpy(&built, &f, sizeof built);
    memcpy(&f, &built, sizeof f);
    f.md_arg = NULL;
    expect_rejected(&f, CALL_UPDATE, "md NULL", MLA_ERR_INVALID_ARGUMENT, "NULL md");
    memcpy(&f, &built, sizeof f);
    f.ids[1][0] = -4;
    expect_rejected(&f, CALL_UPDATE, "block id -4", MLA_ERR_OUT_OF_RANGE,
                    "reqs[1].block_ids[0] = -4 is negative");
    memcpy(&f, &built, sizeof f);
    f.reqs[2].num_block_ids = 1;
    expect_rejected(&f, CALL_UPDATE, "num_block_ids too few for the request's tokens",
                    MLA_ERR_INVALID_ARGUMENT, "reqs[2]: 41 tokens need 3 kernel blocks");
    memcpy(&f, &built, sizeof f);
    f.md.query_start_loc = NULL;
    expect_rejected(&f, CALL_UPDATE, "md->query_start_loc NULL", MLA_ERR_INVALID_ARGUMENT,
                    "NULL md->query_start_loc");
    memcpy(&f, &built, sizeof f);
    f.qsl[0] = 1;
    expect_rejected(&f, CALL_UPDATE, "md->query_start_loc[0] 1", MLA_ERR_INVALID_ARGUMENT,
                    "md->query_start_loc[0] = 1, not 0");
    memcpy(&f, &built, sizeof f);
    f.reqs[1].num_scheduled_tokens = 4; /* md still says 5 */
    expect_rejected(&f, CALL_UPDATE, "md->query_start_loc not spanning num_scheduled_tokens",
                    MLA_ERR_INVALID_ARGUMENT,
                    "md->query_start_loc[1..2] = 4..9 does not span reqs[1].num_scheduled_tokens = "
                    "4");
    memcpy(&f, &built, sizeof f);
    f.md.positions = NULL;
    expect_rejected(&f, CALL_UPDATE, "md->positions NULL", MLA_ERR_INVALID_ARGUMENT,
                    "NULL md->positions");
    memcpy(&f, &built, sizeof f);
    f.positions[9] = 41; /* r2's sequence is [0, 41) */
    expect_rejected(&f, CALL_UPDATE, "md->positions entry past its sequence", MLA_ERR_OUT_OF_RANGE,
                    "md->positions[9] = 41 is outside [0, 41), the sequence of reqs[2]");
    memcpy(&f, &built, sizeof f);
    f.positions[0] = -1;
    expect_rejected(&f, CALL_UPDATE, "md->positions entry -1", MLA_ERR_OUT_OF_RANGE,
                    "md->positions[0] = -1");
    memcpy(&f, &built, sizeof f);
    f.md.slot_mapping_len = 3;
    expect_rejected(&f, CALL_UPDATE, "md->slot_mapping_len below the scheduled tokens",
                    MLA_ERR_CAPACITY, "md->slot_mapping_len = 3");
    memcpy(&f, &built, sizeof f);
    f.md.slot_mapping = NULL;
    expect_rejected(&f, CALL_UPDATE, "md->slot_mapping NULL", MLA_ERR_INVALID_ARGUMENT,
                    "NULL md->slot_mapping");
    memcpy(&f, &built, sizeof f);
    f.md.block_table = NULL;
    expect_rejected(&f, CALL_UPDATE, "md->block_table NULL", MLA_ERR_INVALID_ARGUMENT,
                    "NULL md->block_table");
    memcpy(&f, &built, sizeof f);
    assert_int_equal(call(&f, CALL_UPDATE), MLA_OK);
    assert_memory_equal(&f, &built, sizeof f); /* same ids and layout: same result */
}

/* The incremental forms check what the dense ones check, plus their rows;
 * of the block ids they read the new ones and those holding this step's
 * positions. Every case starts from rows that hold their requests' ids. */
static void test_append_rejects(void **state)
{
    (void)state;
    fixture f, fresh; /* each case starts from fresh; its pointers point into f */
    fixture_init(&f);
    memcpy(&fresh, &f, sizeof f);
    for (call_kind kind = CALL_BUILD_APPEND; kind <= CALL_APPEND_TABLE; kind++) {
        memcpy(&f, &fresh, sizeof f);
        f.layout_arg = NULL;
        expect_rejected(&f, kind, "layout NULL", MLA_ERR_INVALID_ARGUMENT, "NULL layout");
        memcpy(&f, &fresh, sizeof f);
        f.reqs[1].num_scheduled_tokens = -1;
        expect_rejected(&f, kind, "num_scheduled_tokens -1", MLA_ERR_INVALID_ARGUMENT,
                        "reqs[1].num_scheduled_tokens = -1 is negative");
        memcpy(&f, &fresh, sizeof f);
        f.reqs[2].num_block_ids = 1;
        expect_rejected(&f, kind, "num_block_ids too few for the request's tokens",
                        MLA_ERR_INVALID_ARGUMENT, "reqs[2]: 41 tokens need 3 kernel blocks");
        memcpy(&f, &fresh, sizeof f);
        f.row_ids_arg = NULL;
        expect_rejected(&f, kind, "row_ids NULL", MLA_ERR_INVALID_ARGUMENT,
                        "NULL row_ids with num_reqs = 4");
        memcpy(&f, &fresh, sizeof f);
        f.row_ids[2] = -1;
        expect_rejected(&f, kind, "row_ids entry -1", MLA_ERR_OUT_OF_RANGE,
                        "row_ids[2] = -1 is outside [0, 4], the block ids a row of 8 kernel "
                        "blocks holds");
        memcpy(&f, &fresh, sizeof f);
        f.row_ids[0] = 5; /* 10 kernel blocks in a row of 8 */
        expect_rejected(&f, kind, "row_ids entry past the row's columns", MLA_ERR_OUT_OF_RANGE,
                        "row_ids[0] = 5 is outside [0, 4]");
        memcpy(&f, &fresh, sizeof f);
        f.first_new[3] = -1;
        expect_rejected(&f, kind, "first_new entry -1", MLA_ERR_OUT_OF_RANGE,
                        "first_new[3] = -1 is outside [0, 1]");
        memcpy(&f, &fresh, sizeof f);
        f.row_ids[0] = 1; /* the row has id 0 of request 0, not id 1 */
        expect_rejected(&f, kind, "first_new entry past the ids row and request share",
                        MLA_ERR_OUT_OF_RANGE,
                        "first_new[0] = 2 is outside [0, 1] (row_ids[0] = 1, "
                        "reqs[0].num_block_ids = 2)");
        memcpy(&f, &fresh, sizeof f);
        f.row_ids[3] = f.first_new[3] = 0; /* id 0 of request 3 is new */
        f.ids[3][0] = -4;
        expect_rejected(&f, kind, "new block id -4", MLA_ERR_OUT_OF_RANGE,
                        "reqs[3].block_ids[0] = -4 is negative");
        memcpy(&f, &fresh, sizeof f);
        f.ids[2][1] = -4; /* kept, but it holds position 40, which request 2 schedules */
        expect_rejected(&f, kind, "block id -4 holding a scheduled position", MLA_ERR_OUT_OF_RANGE,
                        "reqs[2].block_ids[1] = -4 is negative");
        memcpy(&f, &fresh, sizeof f);
        f.first_new_arg = NULL; /* NULL reads as first_new = min(row_ids, num_block_ids) */
        f.row_ids[3] = 0;
        f.ids[3][0] = INT32_MAX;
        expect_rejected(&f, kind, "new block id past int32 kernel ids", MLA_ERR_OVERFLOW,
                        "reqs[3].block_ids[0] = 2147483647 expands past int32 kernel block ids");
    }
    memcpy(&f, &fresh, sizeof f);
    f.md_arg = NULL;
    expect_rejected(&f, CALL_BUILD_APPEND, "md NULL", MLA_ERR_INVALID_ARGUMENT, "NULL md");
    memcpy(&f, &fresh, sizeof f);
    f.md.block_table = NULL;
    expect_rejected(&f, CALL_BUILD_APPEND, "md->block_table NULL", MLA_ERR_INVALID_ARGUMENT,
                    "NULL md->block_table");
    memcpy(&f, &fresh, sizeof f);
    f.md.slot_mapping_len = 3;
    expect_rejected(&f, CALL_BUILD_APPEND, "md->slot_mapping_len below the scheduled tokens",
                    MLA_ERR_CAPACITY, "md->slot_mapping_len = 3");
    memcpy(&f, &fresh, sizeof f);
    f.table_arg = NULL;
    expect_rejected(&f, CALL_APPEND_TABLE, "block_table NULL", MLA_ERR_INVALID_ARGUMENT,
                    "NULL block_table for 4 x 8 entries");

    /* a kept id that holds no position of this step is not read: the
     * incremental forms cost O(new ids), not O(row) */
    memcpy(&f, &fresh, sizeof f);
    f.ids[3][0] = -4; /* request 3 schedules nothing */
    assert_int_equal(call(&f, CALL_APPEND_TABLE), MLA_OK);
    assert_memory_equal(f.table, fresh.table, sizeof f.table); /* nothing new: nothing written */
}

/* ---- random batches ------------------------------------------------------------ */

enum {
    RB_REQS = 12,
    RB_IDS = 400,  /* block ids per request: at most ceil(364 / m) + 2 */
    RB_COLS = 400, /* kernel blocks per row: at most 372 + 3 */
    RB_TOKENS = RB_REQS * 64,
    RB_PAD = 8, /* slot_mapping padding past T */
    RB_ID_POOL = 8192,
    GUARD = 8,
    SENTINEL = 0x5a,
};

typedef struct random_batch {
    int64_t num_reqs;
    mla_request reqs[RB_REQS];
    int32_t ids[RB_REQS][RB_IDS];
    mla_block_layout layout;
} random_batch;

/* Output buffers with GUARD spare entries past the end that must stay
 * SENTINEL. */
typedef struct md_buffers {
    int32_t qsl[RB_REQS + 1 + GUARD], seq_lens[RB_REQS + GUARD], table[RB_REQS * RB_COLS + GUARD];
    int64_t positions[RB_TOKENS + GUARD], slots[RB_TOKENS + RB_PAD + GUARD];
    mla_batch_metadata md;
} md_buffers;

static int32_t id_pool[RB_ID_POOL];
static int64_t id_pool_used;

/* Distinct block ids, so distinct tokens of one rank must get distinct slots. */
static void id_pool_reset(void)
{
    for (int i = 0; i < RB_ID_POOL; i++)
        id_pool[i] = i;
    id_pool_used = 0;
}

static int32_t id_pool_take(void)
{
    int64_t j = support_random_in(id_pool_used, RB_ID_POOL - 1);
    int32_t id = id_pool[j];
    id_pool[j] = id_pool[id_pool_used];
    id_pool[id_pool_used++] = id;
    return id;
}

static int64_t pick(const int64_t *choices, int n)
{
    return choices[support_random_in(0, n - 1)];
}

static int64_t random_scheduled(void)
{
    int64_t roll = support_random_in(0, 99);
    return roll < 35 ? 1 : roll < 50 ? 0 : roll < 75 ? support_random_in(2, 8) : support_random_in(9, 64);
}

static void random_counts(mla_request *q)
{
    q->num_computed_tokens = chance(30) ? 0 : chance(20) ? support_random_in(1, 3) : support_random_in(1, 300);
    q->num_scheduled_tokens = random_scheduled();
    q->num_prompt_tokens =
        chance(50) ? support_random_in(0, q->num_computed_tokens) : q->num_computed_tokens + support_random_in(1, 50);
}

/* Fresh distinct block ids for every request: enough for its sequence under
 * b->layout, plus up to two spare. */
static void random_block_ids(random_batch *b)
{
    const mla_block_layout *l = &b->layout;
    int64_t span = l->manager_block_size * l->cp_world_size, cols = 0;
    id_pool_reset();
    for (int64_t r = 0; r < b->num_reqs; r++) {
        mla_request *q = &b->reqs[r];
        int64_t len = q->num_computed_tokens + q->num_scheduled_tokens;
        q->num_block_ids = (len + span - 1) / span + support_random_in(0, 2);
        for (int64_t k = 0; k < q->num_block_ids; k++)
            b->ids[r][k] = id_pool_take();
        q->block_ids = b->ids[r];
        int64_t kernel_blocks = q->num_block_ids * (l->manager_block_size / l->kernel_block_size);
        cols = kernel_blocks > cols ? kernel_blocks : cols;
    }
    b->layout.max_blocks_per_req = cols + support_random_in(0, 3);
}

/* A layout for the world size and rank: the interleave divides the kernel
 * block size when there is context parallelism; without it any is allowed. */
static mla_block_layout random_layout(int64_t world, int64_t rank)
{
    static const int64_t kernel[] = {1, 2, 4, 8, 16, 32}, ms[] = {1, 2, 4};
    mla_block_layout l = {0};
    l.kernel_block_size = pick(kernel, 6);
    l.manager_block_size = l.kernel_block_size * pick(ms, 3);
    l.cp_world_size = world;
    l.cp_rank = rank;
    int64_t interleave = 1;
    while (world > 1 && interleave < l.kernel_block_size && chance(50))
        interleave *= 2;
    l.cp_interleave = world > 1 ? interleave : support_random_in(1, 5);
    return l;
}

static void random_batch_make(random_batch *b)
{
    static const int64_t worlds[] = {1, 1, 1, 2, 4};
    int64_t world = pick(worlds, 5);
    b->layout = random_layout(world, support_random_in(0, world - 1));
    b->num_reqs = support_random_in(0, RB_REQS);
    for (int64_t r = 0; r < b->num_reqs; r++)
        random_counts(&b->reqs[r]);
    random_block_ids(b);
}

static void md_buffers_init(md_buffers *m, int64_t slot_len)
{
    memset(m, SENTINEL, sizeof *m);
    m->md = (mla_batch_metadata){m->qsl,   m->seq_lens, m->positions, m->slots, slot_len,
                                 m->table, -1,          -1,           -1};
}

static bool untouched(const void *p, size_t bytes)
{
    const unsigned char *c = p;
    for (size_t i = 0; i < bytes; i++)
        if (c[i] != SENTINEL)
            return false;
    return true;
}

/* Where position p of a request lives, derived without virtual blocks:
 * positions go to the ranks round-robin in runs of `interleave`, and each
 * rank stores its own positions contiguously, in order, through the
 * request's manager blocks. */
static int64_t expected_slot(const mla_request *q, const mla_block_layout *l, int64_t p)
{
    int64_t run = p / l->cp_interleave;
    if (run % l->cp_world_size != l->cp_rank)
        return -1;
    int64_t local = run / l->cp_world_size * l->cp_interleave + p % l->cp_interleave;
    int64_t mbs = l->manager_block_size;
    return (int64_t)q->block_ids[local / mbs] * mbs + local % mbs;
}

static int compare_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* Block table and slots of b as written in m (they depend on the ids and the
 * layout; query_start_loc and positions are checked separately). */
static void check_table_and_slots(const random_batch *b, const md_buffers *m)
{
    const mla_block_layout *l = &b->layout;
    int64_t mult = l->manager_block_size / l->kernel_block_size, cols = l->max_blocks_per_req;
    int64_t span = l->kernel_block_size * l->cp_world_size, tokens = m->qsl[b->num_reqs];
    for (int64_t r = 0; r < b->num_reqs; r++) {
        const mla_request *q = &b->reqs[r];
        const int32_t *row = m->table + r * cols;
        for (int64_t i = 0; i < q->num_block_ids; i++)
            for (int64_t j = 0; j < mult; j++)
                assert_int_equal(row[i * mult + j], q->block_ids[i] * mult + j);
        for (int64_t k = q->num_block_ids * mult; k < cols; k++)
            assert_int_equal(row[k], 0);
        for (int64_t t = m->qsl[r]; t < m->qsl[r + 1]; t++) {
            int64_t p = m->positions[t], slot = m->slots[t];
            if (slot != expected_slot(q, l, p))
                fail_msg("req %lld pos %lld: slot %lld, want %lld (bs %lld m %lld W %lld rank %lld "
                         "I %lld)",
                         (long long)r, (long long)p, (long long)slot,
                         (long long)expected_slot(q, l, p), (long long)l->kernel_block_size,
                         (long long)mult, (long long)l->cp_world_size, (long long)l->cp_rank,
                         (long long)l->cp_interleave);
            if (slot >= 0) /* and it is the table's block for this position */
                assert_int_equal(slot / l->kernel_block_size, row[p / span]);
        }
    }
    for (int64_t t = tokens; t < m->md.slot_mapping_len; t++)
        assert_int_equal(m->slots[t], -1);
    assert_true(untouched(m->table + b->num_reqs * cols, GUARD * sizeof(int32_t)));
    assert_true(untouched(m->slots + m->md.slot_mapping_len, GUARD * sizeof(int64_t)));

    /* distinct ids: a rank never gives two tokens one slot */
    int64_t sorted[RB_TOKENS], n = 0;
    for (int64_t t = 0; t < tokens; t++)
        if (m->slots[t] >= 0)
            sorted[n++] = m->slots[t];
    qsort(sorted, (size_t)n, sizeof sorted[0], compare_i64);
    for (int64_t i = 1; i < n; i++)
        assert_true(sorted[i] != sorted[i - 1]);
}

static void check_common(const random_batch *b, const md_buffers *m)
{
    int64_t start = 0, max_query = 0, max_seq = 0;
    assert_int_equal(m->qsl[0], 0);
    for (int64_t r = 0; r < b->num_reqs; r++) {
        const mla_request *q = &b->reqs[r];
        int64_t len = q->num_computed_tokens + q->num_scheduled_tokens;
        assert_int_equal(m->qsl[r + 1], start + q->num_scheduled_tokens);
        assert_int_equal(m->seq_lens[r], len);
        for (int64_t j = 0; j < q->num_scheduled_tokens; j++)
            assert_int_equal(m->positions[start + j], q->num_computed_tokens + j);
        start += q->num_scheduled_tokens;
        max_query = q->num_scheduled_tokens > max_query ? q->num_scheduled_tokens : max_query;
        max_seq = len > max_seq ? len : max_seq;
    }
    assert_int_equal(m->md.num_actual_tokens, start);
    assert_int_equal(m->md.max_query_len, max_query);
    assert_int_equal(m->md.max_seq_len, max_seq);
    assert_true(untouched(m->qsl + b->num_reqs + 1, GUARD * sizeof(int32_t)));
    assert_true(untouched(m->seq_lens + b->num_reqs, GUARD * sizeof(int32_t)));
    assert_true(untouched(m->positions + start, GUARD * sizeof(int64_t)));
}

static int64_t total_scheduled(const random_batch *b)
{
    int64_t t = 0;
    for (int64_t r = 0; r < b->num_reqs; r++)
        t += b->reqs[r].num_scheduled_tokens;
    return t;
}

/* With context parallelism every token is stored by exactly one rank. */
static void check_each_token_on_one_rank(const random_batch *b, int64_t slot_len)
{
    static md_buffers m;
    static int owners[RB_TOKENS];
    random_batch other = *b;
    memset(owners, 0, sizeof owners);
    for (int64_t rank = 0; rank < b->layout.cp_world_size; rank++) {
        other.layout.cp_rank = rank;
        md_buffers_init(&m, slot_len);
        assert_int_equal(mla_build_batch_metadata(other.reqs, other.num_reqs, &other.layout, &m.md),
                         MLA_OK);
        for (int64_t t = 0; t < m.md.num_actual_tokens; t++)
            owners[t] += m.slots[t] >= 0;
    }
    for (int64_t t = 0; t < total_scheduled(b); t++)
        assert_int_equal(owners[t], 1);
}

/* A second KV-cache group: new ids under a new block size, same CP. */
static void check_update(random_batch *b, md_buffers *m)
{
    md_buffers before = *m;
    b->layout = random_layout(b->layout.cp_world_size, b->layout.cp_rank);
    random_block_ids(b);
    /* the new table may be smaller: refill so its guard means something */
    memset(m->table, SENTINEL, sizeof m->table);
    assert_int_equal(mla_update_block_table(b->reqs, b->num_reqs, &b->layout, &m->md), MLA_OK);
    check_table_and_slots(b, m);
    assert_memory_equal(m->qsl, before.qsl, sizeof m->qsl);
    assert_memory_equal(m->seq_lens, before.seq_lens, sizeof m->seq_lens);
    assert_memory_equal(m->positions, before.positions, sizeof m->positions);
    assert_memory_equal(&m->md, &before.md, sizeof m->md);
}

static void test_build_random(void **state)
{
    (void)state;
    static random_batch b;
    static md_buffers m;
    enum { BATCHES = 4000 };
    int64_t cp_batches = 0;
    for (int i = 0; i < BATCHES; i++) {
        random_batch_make(&b);
        int64_t slot_len = total_scheduled(&b) + support_random_in(0, RB_PAD);
        md_buffers_init(&m, slot_len);
        mla_status st = mla_build_batch_metadata(b.reqs, b.num_reqs, &b.layout, &m.md);
        if (st != MLA_OK)
            fail_msg("batch %d: %s: %s", i, mla_status_str(st), mla_last_error());
        check_common(&b, &m);
        check_table_and_slots(&b, &m);
        if (b.layout.cp_world_size > 1) {
            check_each_token_on_one_rank(&b, slot_len);
            cp_batches++;
        }
        check_update(&b, &m);
    }
    assert_true(cp_batches > BATCHES / 10);
}

/* ---- incremental forms over random steps ---------------------------------------- */

enum { ST_MAX_LEN = 300, ST_IDS = ST_MAX_LEN + 3, ST_STEPS = 40, ST_SEQUENCES = 150 };

/* A request as the server sees it across steps. */
typedef struct sim_req {
    int64_t uid, computed, prompt, scheduled, num_ids;
    int32_t ids[ST_IDS];
} sim_req;

/* The server: its batch (row r serves live[r]), the layout, and for each
 * persistent table whose request's ids its rows hold (owner) and how many
 * (the row_ids the library keeps). */
typedef struct sim_server {
    sim_req live[RB_REQS];
    int64_t num_live, next_uid, cols, span;
    mla_block_layout layout;
    int64_t owner[RB_REQS], row_ids[RB_REQS], table_row_ids[RB_REQS];
    int32_t *table, *table_only; /* [RB_REQS, cols] each, zeroed at the start */
    /* what the sequences did, so that the test knows every path ran */
    int64_t reused_rows, shrunk_rows, null_first_new, rewritten_kept;
} sim_server;

static void sim_arrive(sim_server *s)
{
    sim_req *q = &s->live[s->num_live++];
    q->uid = s->next_uid++;
    q->computed = chance(50) ? 0 : support_random_in(1, 100); /* a prefix-cache hit */
    q->prompt = q->computed + support_random_in(1, 120);
    q->num_ids = 0;
}

/* One step's requests: the ones that ran advance, some finish, some
 * arrive, two may trade rows; each schedules its next tokens and gets the
 * block ids they need (a few spare, now and then given back). */
static void sim_step(sim_server *s)
{
    for (int64_t r = 0; r < s->num_live; r++) {
        sim_req *q = &s->live[r];
        q->computed += q->scheduled;
        if (q->computed + 64 >= ST_MAX_LEN || (q->computed >= q->prompt && chance(8))) {
            /* finished: the last request takes its row, or they all move up */
            if (chance(50))
                *q = s->live[s->num_live - 1];
            else
                memmove(q, q + 1, (size_t)(s->num_live - r - 1) * sizeof *q);
            s->num_live--;
            r--;
        }
    }
    while (s->num_live < RB_REQS && chance(s->num_live == 0 ? 90 : 30))
        sim_arrive(s);
    if (s->num_live > 1 && chance(20)) {
        int64_t a = support_random_in(0, s->num_live - 1), b = support_random_in(0, s->num_live - 1);
        sim_req t = s->live[a];
        s->live[a] = s->live[b];
        s->live[b] = t;
    }
    for (int64_t r = 0; r < s->num_live; r++) {
        sim_req *q = &s->live[r];
        int64_t left = q->prompt - q->computed;
        q->scheduled = left > 0 ? support_random_in(1, left < 64 ? left : 64) : chance(10) ? 0 : 1;
        int64_t need = (q->computed + q->scheduled + s->span - 1) / s->span;
        int64_t n = need > q->num_ids ? need + support_random_in(0, 2) : q->num_ids;
        if (n > need && chance(10)) /* spare ids given back */
            n = need;
        for (int64_t k = q->num_ids; k < n; k++)
            q->ids[k] = (int32_t)support_random_in(0, 4000);
        q->num_ids = n;
    }
}

/* first_new for row r: the ids its owner had, when it still serves it
 * (sometimes fewer: rewriting kept ids is allowed), else 0. */
static int64_t sim_first_new(sim_server *s, int64_t r, const int64_t *row_ids)
{
    const sim_req *q = &s->live[r];
    if (s->owner[r] != q->uid) {
        s->reused_rows += row_ids[r] > q->num_ids;
        return 0;
    }
    int64_t kept = row_ids[r] < q->num_ids ? row_ids[r] : q->num_ids;
    s->shrunk_rows += row_ids[r] > q->num_ids;
    if (kept > 0 && chance(5)) {
        s->rewritten_kept++;
        return support_random_in(0, kept);
    }
    return kept;
}

/* One step through both incremental forms, checked against the dense
 * builder: the same metadata, the same rows, and the rows past the batch
 * untouched. */
static void sim_check_step(sim_server *s)
{
    static md_buffers dense, inc;
    static int32_t dense_table[RB_REQS * (ST_IDS * 4 + 3)];
    static int32_t before[RB_REQS * (ST_IDS * 4 + 3)];
    mla_request reqs[RB_REQS];
    int64_t first_new[RB_REQS], n = s->num_live, tokens = 0;
    bool all_kept = true;
    for (int64_t r = 0; r < n; r++) {
        const sim_req *q = &s->live[r];
        reqs[r] = (mla_request){q->computed, q->scheduled, q->prompt, q->ids, q->num_ids};
        tokens += q->scheduled;
        all_kept &= s->owner[r] == q->uid;
        first_new[r] = sim_first_new(s, r, s->row_ids);
    }
    int64_t slot_len = tokens + support_random_in(0, RB_PAD);
    md_buffers_init(&dense, slot_len);
    dense.md.block_table = dense_table;
    assert_int_equal(mla_build_batch_metadata(reqs, n, &s->layout, &dense.md), MLA_OK);

    size_t table_bytes = (size_t)(RB_REQS * s->cols) * sizeof(int32_t);
    size_t batch_bytes = (size_t)(n * s->cols) * sizeof(int32_t);
    memcpy(before, s->table, table_bytes);
    md_buffers_init(&inc, slot_len);
    inc.md.block_table = s->table;
    const int64_t *given = all_kept && chance(50) ? NULL : first_new;
    s->null_first_new += given == NULL;
    mla_status st = mla_build_batch_metadata_append(reqs, n, &s->layout, given, s->row_ids, &inc.md);
    if (st != MLA_OK)
        fail_msg("%s: %s", mla_status_str(st), mla_last_error());
    assert_memory_equal(inc.qsl, dense.qsl, sizeof dense.qsl);
    assert_memory_equal(inc.seq_lens, dense.seq_lens, sizeof dense.seq_lens);
    assert_memory_equal(inc.positions, dense.positions, sizeof dense.positions);
    assert_memory_equal(inc.slots, dense.slots, sizeof dense.slots);
    assert_int_equal(inc.md.num_actual_tokens, dense.md.num_actual_tokens);
    assert_int_equal(inc.md.max_query_len, dense.md.max_query_len);
    assert_int_equal(inc.md.max_seq_len, dense.md.max_seq_len);
    if (n > 0)
        assert_memory_equal(s->table, dense_table, batch_bytes);
    assert_memory_equal((char *)s->table + batch_bytes, (char *)before + batch_bytes,
                        table_bytes - batch_bytes);

    /* the table alone, with first_new worked out for its own rows */
    memcpy(before, s->table_only, table_bytes);
    for (int64_t r = 0; r < n; r++)
        first_new[r] = sim_first_new(s, r, s->table_row_ids);
    assert_int_equal(mla_append_block_table(reqs, n, &s->layout, given ? first_new : NULL,
                                            s->table_row_ids, s->table_only),
                     MLA_OK);
    if (n > 0)
        assert_memory_equal(s->table_only, dense_table, batch_bytes);
    assert_memory_equal((char *)s->table_only + batch_bytes, (char *)before + batch_bytes,
                        table_bytes - batch_bytes);
    for (int64_t r = 0; r < n; r++) {
        assert_int_equal(s->row_ids[r], s->live[r].num_ids);
        assert_int_equal(s->table_row_ids[r], s->live[r].num_ids);
        s->owner[r] = s->live[r].uid;
    }
}

static void test_append_random_steps(void **state)
{
    (void)state;
    static sim_server s;
    static int32_t table[RB_REQS * (ST_IDS * 4 + 3)], table_only[RB_REQS * (ST_IDS * 4 + 3)];
    int64_t reused = 0, shrunk = 0, null_first_new = 0, rewritten = 0;
    for (int k = 0; k < ST_SEQUENCES; k++) {
        static const int64_t worlds[] = {1, 1, 1, 2, 4};
        int64_t world = pick(worlds, 5);
        memset(&s, 0, sizeof s);
        s.layout = random_layout(world, support_random_in(0, world - 1));
        int64_t m = s.layout.manager_block_size / s.layout.kernel_block_size;
        s.span = s.layout.manager_block_size * world;
        s.cols = ((ST_MAX_LEN + s.span - 1) / s.span + 2) * m + support_random_in(0, 3);
        s.layout.max_blocks_per_req = s.cols;
        memset(table, 0, sizeof table);
        memset(table_only, 0, sizeof table_only);
        s.table = table;
        s.table_only = table_only;
        for (int64_t r = 0; r < RB_REQS; r++)
            s.owner[r] = -1;
        for (int step = 0; step < ST_STEPS; step++) {
            sim_step(&s);
            sim_check_step(&s);
        }
        reused += s.reused_rows, shrunk += s.shrunk_rows;
        null_first_new += s.null_first_new, rewritten += s.rewritten_kept;
    }
    print_message("           %d steps: %lld rows given to a shorter request, %lld shrunk, "
                  "%lld kept ids rewritten, %lld steps with first_new NULL\n",
                  ST_SEQUENCES * ST_STEPS, (long long)reused, (long long)shrunk,
                  (long long)rewritten, (long long)null_first_new);
    assert_true(reused > 0 && shrunk > 0 && rewritten > 0 && null_first_new > 0);
}

/* ---- reorder ------------------------------------------------------------------- */

/* The four regions, read off docs/semantics.md §2.4's bullets one by one. */
static int spec_region(const mla_request *q, int64_t tau)
{
    bool context = q->num_computed_tokens > 0;
    bool small = q->num_scheduled_tokens <= tau;
    bool prefilling = q->num_computed_tokens < q->num_prompt_tokens;
    if (context && small && !prefilling)
        return MLA_REGION_DECODE;
    if (context && small && prefilling)
        return MLA_REGION_SHORT_EXTEND;
    if (context && !small)
        return MLA_REGION_LONG_EXTEND;
    return MLA_REGION_PREFILL;
}

/* vLLM's reorder_batch_to_split_decodes_and_prefills run on a list of
 * request indices: the misplaced ones, stably sorted by region (insertion
 * sort), each mapped to a misplaced position in ascending order, applied by
 * its swap loop. batch[i] ends up as the old index now at position i. */
static void vllm_reorder(const int *region, int64_t n, int32_t *batch)
{
    int64_t counts[MLA_REGION_COUNT] = {0}, orig[RB_REQS * 4], src[RB_REQS * 4], nmis = 0;
    int target[RB_REQS * 4], dest[RB_REQS * 4];
    for (int64_t i = 0; i < n; i++)
        counts[region[i]]++;
    for (int g = 0, i = 0; g < MLA_REGION_COUNT; g++)
        for (int64_t k = 0; k < counts[g]; k++)
            target[i++] = g;
    for (int64_t i = 0; i < n; i++)
        if (region[i] != target[i])
            orig[nmis++] = i;
    for (int64_t k = 0; k < nmis; k++) { /* stable insertion sort by region */
        int64_t v = orig[k], j = k;
        for (; j > 0 && region[src[j - 1]] > region[v]; j--)
            src[j] = src[j - 1];
        src[j] = v;
    }
    for (int64_t i = 0; i < n; i++) {
        batch[i] = (int32_t)i;
        dest[i] = -1;
    }
    for (int64_t k = 0; k < nmis; k++)
        dest[src[k]] = (int)orig[k];
    for (int64_t k = 0; k < nmis; k++) {
        int64_t s = src[k], d = dest[s];
        while (s != d) {
            int32_t tmp = batch[s];
            batch[s] = batch[d];
            batch[d] = tmp;
            int64_t next = dest[d] >= 0 ? dest[d] : d;
            dest[d] = (int)d;
            d = next;
        }
    }
}

static void check_reorder(const mla_request *reqs, int64_t n, int64_t tau)
{
    int32_t order[RB_REQS * 4 + GUARD], want[RB_REQS * 4];
    int64_t counts[MLA_REGION_COUNT + 1];
    int region[RB_REQS * 4];
    memset(order, SENTINEL, sizeof order);
    memset(counts, SENTINEL, sizeof counts);
    assert_int_equal(mla_reorder_batch(reqs, n, tau, order, counts), MLA_OK);
    assert_true(untouched(order + n, GUARD * sizeof(int32_t)));
    assert_true(untouched(counts + MLA_REGION_COUNT, sizeof(int64_t)));

    int64_t spec_counts[MLA_REGION_COUNT] = {0};
    for (int64_t i = 0; i < n; i++) {
        region[i] = spec_region(&reqs[i], tau);
        spec_counts[region[i]]++;
    }
    assert_memory_equal(counts, spec_counts, sizeof spec_counts);

    bool seen[RB_REQS * 4] = {false};
    for (int64_t i = 0; i < n; i++) { /* a permutation, regions in order */
        assert_true(order[i] >= 0 && order[i] < n && !seen[order[i]]);
        seen[order[i]] = true;
        if (i > 0)
            assert_true(region[order[i - 1]] <= region[order[i]]);
    }
    for (int64_t i = 0, start = 0, g = 0; i < n; i++) { /* those in place stayed */
        while (i >= start + spec_counts[g])
            start += spec_counts[g++];
        if (region[i] == g)
            assert_int_equal(order[i], i);
    }
    vllm_reorder(region, n, want);
    assert_memory_equal(order, want, (size_t)n * sizeof want[0]);

    int32_t again[RB_REQS * 4];
    assert_int_equal(mla_reorder_batch(reqs, n, tau, again, NULL), MLA_OK);
    assert_memory_equal(again, order, (size_t)n * sizeof again[0]);
}

/* A batch out of order: prefill, decode, long extend, short extend, decode
 * becomes decode (old 4), decode (1, stays), short (3), long (2), prefill (0). */
static void test_reorder_example(void **state)
{
    (void)state;
    mla_request reqs[5] = {
        {0, 256, 256, NULL, 0},    /* prefill                           */
        {199, 1, 10, NULL, 0},     /* decode                            */
        {512, 256, 2000, NULL, 0}, /* long extend                       */
        {128, 4, 200, NULL, 0},    /* short extend: 4 <= 8, 128 < 200   */
        {511, 1, 511, NULL, 0},    /* decode: prompt done               */
    };
    int32_t order[5];
    int64_t counts[4];
    assert_int_equal(mla_reorder_batch(reqs, 5, 8, order, counts), MLA_OK);
    static const int32_t want[5] = {4, 1, 3, 2, 0};
    static const int64_t want_counts[4] = {2, 1, 1, 1};
    assert_memory_equal(order, want, sizeof want);
    assert_memory_equal(counts, want_counts, sizeof want_counts);
    check_reorder(reqs, 5, 8);

    /* with tau = 1 the short extend is long; an ordered batch stays put */
    assert_int_equal(mla_reorder_batch(reqs, 5, 1, order, counts), MLA_OK);
    static const int64_t want_counts1[4] = {2, 0, 2, 1};
    assert_memory_equal(counts, want_counts1, sizeof want_counts1);
    mla_request ordered[3] = {reqs[1], reqs[3], reqs[0]};
    assert_int_equal(mla_reorder_batch(ordered, 3, 8, order, NULL), MLA_OK);
    for (int i = 0; i < 3; i++)
        assert_int_equal(order[i], i);
    /* empty */
    assert_int_equal(mla_reorder_batch(NULL, 0, 1, NULL, counts), MLA_OK);
    for (int i = 0; i < 4; i++)
        assert_int_equal(counts[i], 0);
}

static void expect_reorder_rejected(const char *bad_input, const mla_request *reqs, int64_t n,
                                    int64_t tau, bool null_order, mla_status want,
                                    const char *needle)
{
    int32_t order[8];
    int64_t counts[4];
    memset(order, SENTINEL, sizeof order);
    memset(counts, SENTINEL, sizeof counts);
    support_expect_reject("mla_reorder_batch", bad_input,
                          mla_reorder_batch(reqs, n, tau, null_order ? NULL : order, counts), want,
                          needle);
    assert_true(support_contains(mla_last_error(), "mla_reorder_batch"));
    assert_true(untouched(order, sizeof order));
    assert_true(untouched(counts, sizeof counts));
}

static void test_reorder_rejects(void **state)
{
    (void)state;
    mla_request reqs[3] = {{5, 1, 5, NULL, 0}, {0, 7, 7, NULL, 0}, {9, 2, 20, NULL, 0}};
    expect_reorder_rejected("num_reqs -1", reqs, -1, 1, false, MLA_ERR_INVALID_ARGUMENT,
                            "num_reqs = -1 is negative");
    expect_reorder_rejected("num_reqs 2^31 (past new_order's int32)", reqs, INT64_C(1) << 31, 1,
                            false, MLA_ERR_OVERFLOW, "does not fit new_order (int32)");
    expect_reorder_rejected("reqs NULL", NULL, 3, 1, false, MLA_ERR_INVALID_ARGUMENT, "NULL reqs");
    expect_reorder_rejected("new_order NULL", reqs, 3, 1, true, MLA_ERR_INVALID_ARGUMENT,
                            "NULL new_order");
    expect_reorder_rejected("threshold 0", reqs, 3, 0, false, MLA_ERR_INVALID_ARGUMENT,
                            "threshold = 0 < 1");
    expect_reorder_rejected("threshold -4", reqs, 3, -4, false, MLA_ERR_INVALID_ARGUMENT,
                            "threshold = -4 < 1");
    reqs[2].num_computed_tokens = -1;
    expect_reorder_rejected("num_computed_tokens -1", reqs, 3, 1, false, MLA_ERR_INVALID_ARGUMENT,
                            "reqs[2].num_computed_tokens = -1 is negative");
    reqs[2].num_computed_tokens = 9;
    reqs[1].num_scheduled_tokens = -2;
    expect_reorder_rejected("num_scheduled_tokens -2", reqs, 3, 1, false, MLA_ERR_INVALID_ARGUMENT,
                            "reqs[1].num_scheduled_tokens = -2 is negative");
    reqs[1].num_scheduled_tokens = 7;
    reqs[0].num_prompt_tokens = -3;
    expect_reorder_rejected("num_prompt_tokens -3", reqs, 3, 1, false, MLA_ERR_INVALID_ARGUMENT,
                            "reqs[0].num_prompt_tokens = -3 is negative");
}

static void test_reorder_random(void **state)
{
    (void)state;
    static const int64_t taus[] = {1, 2, 3, 8, 64};
    mla_request reqs[RB_REQS * 4];
    for (int i = 0; i < 20000; i++) {
        int64_t n = support_random_in(0, RB_REQS * 4);
        for (int64_t r = 0; r < n; r++)
            random_counts(&reqs[r]);
        check_reorder(reqs, n, pick(taus, 5));
    }
}

/* ---- split ---------------------------------------------------------------------- */

/* docs/semantics.md §2.4's split, rule by rule, over the query lengths. */
static mla_batch_split spec_split(const int32_t *qsl, int64_t n, int64_t tau, bool uniform)
{
    int64_t len[RB_REQS + 1] = {0}, max_len = 0, tokens = n > 0 ? qsl[n] : 0;
    for (int64_t r = 0; r < n; r++) {
        len[r] = qsl[r + 1] - qsl[r];
        if (len[r] > max_len)
            max_len = len[r];
    }
    int64_t decodes;
    bool is_prefill[RB_REQS + 1] = {false};
    if (n == 0 || (max_len <= tau && (!uniform || tau <= 1))) {
        decodes = n; /* every request is a decode */
    } else if (len[0] > tau) {
        decodes = 0; /* the first is not a decode: none are */
    } else {
        bool all_match = true;
        for (int64_t r = 0; r < n; r++) {
            if (len[r] != len[0] && len[r] != 0)
                all_match = false;
            is_prefill[r] = uniform ? len[r] != len[0] : len[r] > tau;
        }
        decodes = n;
        if (!(uniform && all_match))
            for (int64_t r = n - 1; r >= 0; r--)
                if (is_prefill[r])
                    decodes = r; /* the first prefill */
    }
    return (mla_batch_split){decodes, n - decodes, n > 0 ? qsl[decodes] : 0,
                             tokens - (n > 0 ? qsl[decodes] : 0)};
}

static void check_split(const int32_t *qsl, int64_t n, int64_t tau, bool uniform)
{
    mla_batch_split got, want = spec_split(qsl, n, tau, uniform);
    memset(&got, SENTINEL, sizeof got);
    assert_int_equal(mla_split_batch(qsl, n, tau, uniform, &got), MLA_OK);
    if (memcmp(&got, &want, sizeof got) != 0)
        fail_msg("n %lld tau %lld uniform %d: got (%lld, %lld, %lld, %lld), want (%lld, %lld, "
                 "%lld, %lld)",
                 (long long)n, (long long)tau, uniform, (long long)got.num_decodes,
                 (long long)got.num_prefills, (long long)got.num_decode_tokens,
                 (long long)got.num_prefill_tokens, (long long)want.num_decodes,
                 (long long)want.num_prefills, (long long)want.num_decode_tokens,
                 (long long)want.num_prefill_tokens);
}

static void expect_split(const int32_t *qsl, int64_t n, int64_t tau, bool uniform, int64_t decodes,
                         int64_t decode_tokens)
{
    mla_batch_split s;
    assert_int_equal(mla_split_batch(qsl, n, tau, uniform, &s), MLA_OK);
    assert_int_equal(s.num_decodes, decodes);
    assert_int_equal(s.num_prefills, n - decodes);
    assert_int_equal(s.num_decode_tokens, decode_tokens);
    assert_int_equal(s.num_prefill_tokens, qsl[n] - decode_tokens);
    check_split(qsl, n, tau, uniform);
}

static void test_split_examples(void **state)
{
    (void)state;
    /* lengths 1, 1, 4, 256, 256 */
    static const int32_t mixed[6] = {0, 1, 2, 6, 262, 518};
    expect_split(mixed, 5, 1, false, 2, 2); /* tau 1: the 4 starts prefills      */
    expect_split(mixed, 5, 1, true, 2, 2);
    expect_split(mixed, 5, 128, false, 3, 6);   /* FlashMLA tau, varlen: short extend decodes */
    expect_split(mixed, 5, 128, true, 2, 2);    /* uniform: the 4 differs from the 1 */
    expect_split(mixed, 5, 300, false, 5, 518); /* all within tau                   */
    expect_split(mixed, 5, 300, true, 2, 2);    /* ... but not uniform               */
    /* uniform with padding: 2, 2, 0, 0 are all decodes; 2, 0, 3 is not uniform
     * and the padding request is the first to differ */
    static const int32_t padded[5] = {0, 2, 4, 4, 4}, broken[4] = {0, 2, 2, 5};
    expect_split(padded, 4, 4, true, 4, 4);
    expect_split(broken, 3, 4, true, 1, 2);
    expect_split(broken, 3, 4, false, 3, 5);
    /* tau 1 with uniformity: max <= 1 makes all decodes, zeros included */
    static const int32_t ones[4] = {0, 1, 1, 2};
    expect_split(ones, 3, 1, true, 3, 2);
    /* first request longer than tau: no decodes */
    static const int32_t long_first[3] = {0, 9, 10};
    expect_split(long_first, 2, 8, false, 0, 0);
    expect_split(long_first, 2, 8, true, 0, 0);
    /* empty */
    static const int32_t empty[1] = {0};
    expect_split(empty, 0, 1, false, 0, 0);
    expect_split(empty, 0, 4, true, 0, 0);
}

static void test_split_rejects(void **state)
{
    (void)state;
    static const int32_t qsl[4] = {0, 1, 2, 3}, bad_start[3] = {1, 2, 3}, falling[4] = {0, 4, 3, 5};
    static const struct {
        const int32_t *qsl;
        int64_t n, tau;
        bool null_out;
        const char *bad_input, *needle;
    } cases[] = {
        {NULL, 3, 1, false, "query_start_loc NULL", "NULL query_start_loc"},
        {qsl, 3, 1, true, "out NULL", "NULL out"},
        {qsl, -1, 1, false, "num_reqs -1", "num_reqs = -1 is negative"},
        {qsl, 3, 0, false, "threshold 0", "threshold = 0 < 1"},
        {bad_start, 2, 1, false, "query_start_loc[0] 1", "query_start_loc[0] = 1, not 0"},
        {falling, 3, 1, false, "query_start_loc decreasing",
         "query_start_loc[2] = 3 < query_start_loc[1] = 4"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mla_batch_split out;
        memset(&out, SENTINEL, sizeof out);
        support_expect_reject("mla_split_batch", cases[i].bad_input,
                              mla_split_batch(cases[i].qsl, cases[i].n, cases[i].tau, false,
                                              cases[i].null_out ? NULL : &out),
                              MLA_ERR_INVALID_ARGUMENT, cases[i].needle);
        assert_true(support_contains(mla_last_error(), "mla_split_batch"));
        assert_true(untouched(&out, sizeof out));
    }
}

/* Lengths drawn to hit every rule: uniform runs with padding zeros and the
 * odd outlier, and varied lengths around tau. */
static void test_split_random(void **state)
{
    (void)state;
    static const int64_t taus[] = {1, 2, 4, 8, 128};
    int32_t qsl[RB_REQS + 1];
    for (int i = 0; i < 50000; i++) {
        int64_t n = support_random_in(0, RB_REQS), u = support_random_in(1, 6);
        bool uniformish = chance(50);
        qsl[0] = 0;
        for (int64_t r = 0; r < n; r++) {
            int64_t len = !uniformish  ? random_scheduled()
                          : chance(70) ? u
                          : chance(50) ? 0
                                       : support_random_in(0, 200);
            qsl[r + 1] = (int32_t)(qsl[r] + len);
        }
        check_split(qsl, n, pick(taus, 5), chance(50));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spec_worked_example),
        cmocka_unit_test(test_layout_zero_fields_are_defaults),
        cmocka_unit_test(test_block_expansion_example),
        cmocka_unit_test(test_cp_examples),
        cmocka_unit_test(test_empty_batch),
        cmocka_unit_test(test_no_block_ids),
        cmocka_unit_test(test_fixture_valid),
        cmocka_unit_test(test_build_rejects_arguments),
        cmocka_unit_test(test_build_rejects_layout),
        cmocka_unit_test(test_build_rejects_requests),
        cmocka_unit_test(test_build_rejects_outputs),
        cmocka_unit_test(test_update_rejects),
        cmocka_unit_test(test_append_rejects),
        cmocka_unit_test(test_build_random),
        cmocka_unit_test(test_append_random_steps),
        cmocka_unit_test(test_reorder_example),
        cmocka_unit_test(test_reorder_rejects),
        cmocka_unit_test(test_reorder_random),
        cmocka_unit_test(test_split_examples),
        cmocka_unit_test(test_split_rejects),
        cmocka_unit_test(test_split_random),
    };
    return cmocka_run_group_tests_name("metadata_batch", tests, NULL, NULL);
}
