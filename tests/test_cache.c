/*
 * Paged-cache ops (docs/semantics.md §3) on every backend this CPU can run, forced in
 * turn: concat_and_cache, gather_and_maybe_dequant and cp_gather for every
 * dtype pair, block sizes that straddle vector widths, dense and strided
 * layouts, 1 and 2 threads. Expected bytes come from the number-format
 * oracles (tests/oracle.c) applied row by row the plain way; whole buffers
 * are compared, so padding, skipped rows and guards must stay untouched.
 */
#include "oracle.h"
#include "support.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define FILL 0xab

static const mla_dtype all_dtypes[] = {MLA_DTYPE_F32, MLA_DTYPE_BF16, MLA_DTYPE_F16,
                                       MLA_DTYPE_FP8_E4M3, MLA_DTYPE_FP8_E5M2};
static const mla_dtype float_dtypes[] = {MLA_DTYPE_F32, MLA_DTYPE_BF16, MLA_DTYPE_F16};
#define COUNT(a) (int)(sizeof(a) / sizeof((a)[0]))

/* ---- a cache in a buffer ----------------------------------------------------- */

typedef struct test_cache {
    mla_kv_cache c;  /* as passed to the library (strides may be 0 = dense) */
    int64_t block_stride, entry_stride; /* resolved */
    size_t bytes;
} test_cache;

/* pad > 0: rows pad elements apart beyond the width and blocks 2*pad beyond
 * that (bytes there must never change); pad == 0: dense, strides left 0. */
static test_cache make_cache(mla_dtype dtype, int64_t num_blocks, int64_t block_size, int64_t width,
                             int64_t pad)
{
    test_cache t = {.c = {.dtype = dtype, .num_blocks = num_blocks, .block_size = block_size,
                          .width = width, .scale = 0.37f}};
    t.entry_stride = width + pad;
    t.block_stride = block_size * t.entry_stride + 2 * pad;
    if (pad > 0) {
        t.c.entry_stride = t.entry_stride;
        t.c.block_stride = t.block_stride;
    }
    t.bytes = (size_t)(num_blocks * t.block_stride * mla_dtype_size(dtype));
    t.c.data = malloc(t.bytes);
    unsigned char *b = t.c.data;
    for (size_t i = 0; i < t.bytes; i++) /* every code, NaNs and infinities included */
        b[i] = (unsigned char)support_random();
    return t;
}

static int64_t row_offset(const test_cache *t, int64_t blk, int64_t off)
{
    return blk * t->block_stride + off * t->entry_stride; /* in elements */
}

static void *copy_of(const void *p, size_t bytes)
{
    void *q = malloc(bytes);
    memcpy(q, p, bytes);
    return q;
}

/* A random value of every magnitude the formats care about: denormal to
 * beyond fp8 saturation, either sign, sometimes a special. */
static float random_value(void)
{
    uint64_t r = support_random();
    switch (r % 16) {
    case 0:
        return (r >> 8) % 2 ? INFINITY : -INFINITY;
    case 1:
        return NAN;
    case 2:
        return 0.0f;
    default: {
        float mag = (float)((r >> 12) % 100000) / 1000.0f;
        int exp2 = (int)((r >> 40) % 48) - 30; /* 2^-30 .. 2^17 */
        return (r >> 8) % 2 ? -ldexpf(mag, exp2) : ldexpf(mag, exp2);
    }
    }
}

/* rows x stride of random values stored in dtype (valid codes of dtype). */
static void *random_rows(mla_dtype dtype, int64_t rows, int64_t stride)
{
    int64_t n = rows * stride;
    void *p = malloc((size_t)(n * mla_dtype_size(dtype)) + 1);
    for (int64_t i = 0; i < n; i++)
        oracle_store(dtype, p, i, random_value(), 1.0f);
    return p;
}

/* n distinct slots out of `slots`, about one in ten replaced by -1. */
static int64_t *random_slots(int64_t n, int64_t slots)
{
    int64_t *perm = malloc((size_t)slots * sizeof *perm);
    for (int64_t i = 0; i < slots; i++)
        perm[i] = i;
    for (int64_t i = 0; i < n; i++) { /* partial Fisher-Yates */
        int64_t j = support_random_in(i, slots - 1), tmp = perm[i];
        perm[i] = perm[j];
        perm[j] = tmp;
        if (support_random() % 10 == 0)
            perm[i] = -1 - (int64_t)(support_random() % 5);
    }
    return perm;
}

/* ---- concat_and_cache ------------------------------------------------------ */

static void check_write(const char *backend, mla_dtype cache_dtype, mla_dtype src_dtype,
                        int64_t block_size, int64_t pad, int64_t L, int64_t R, int threads)
{
    const int64_t rows = 150, n = rows - 7; /* the last rows are padding nobody maps */
    const int64_t kv_stride = L + 3, pe_stride = R + 1, num_blocks = (rows * 2) / block_size + 2;
    test_cache t = make_cache(cache_dtype, num_blocks, block_size, L + R, pad);
    void *kv_c = random_rows(src_dtype, rows, kv_stride), *k_pe = random_rows(src_dtype, rows, pe_stride);
    int64_t *slots = random_slots(n, num_blocks * block_size);

    unsigned char *want = copy_of(t.c.data, t.bytes);
    for (int64_t i = 0; i < n; i++) {
        if (slots[i] < 0)
            continue;
        int64_t at = row_offset(&t, slots[i] / block_size, slots[i] % block_size);
        for (int64_t j = 0; j < L + R; j++) {
            float x = j < L ? oracle_load(src_dtype, kv_c, i * kv_stride + j, 1.0f)
                            : oracle_load(src_dtype, k_pe, i * pe_stride + j - L, 1.0f);
            oracle_store(cache_dtype, want, at + j, x, t.c.scale);
        }
    }
    assert_int_equal(mla_concat_and_cache(&t.c, kv_c, kv_stride, k_pe, pe_stride, src_dtype, L, R,
                                          slots, n, threads), MLA_OK);
    assert_string_equal(mla_last_backend(), backend);
    if (memcmp(t.c.data, want, t.bytes) != 0) {
        const unsigned char *got = t.c.data;
        size_t i = 0;
        while (got[i] == want[i])
            i++;
        fail_msg("%s: write %s -> %s cache, block_size %lld, pad %lld, %d threads: byte %zu "
                 "is 0x%02x, want 0x%02x", backend, mla_dtype_name(src_dtype),
                 mla_dtype_name(cache_dtype), (long long)block_size, (long long)pad, threads, i,
                 got[i], want[i]);
    }
    free(want);
    free(slots);
    free(k_pe);
    free(kv_c);
    free(t.c.data);
}

/* ---- gathers --------------------------------------------------------------- */

/* B requests with random lengths (some 0), optional seq_starts, block tables
 * of distinct random blocks; columns past what a request needs hold ids far
 * out of range, which must never be read. */
typedef struct gather_case {
    mla_gather_spec spec;
    int32_t *block_table, *cu_seq_lens, *seq_starts, *token_to_seq;
    int64_t num_tokens; /* rows of token_to_seq: cu_seq_lens[B] plus a padded tail */
} gather_case;

static gather_case make_gather(int64_t num_reqs, int64_t block_size, int64_t num_blocks,
                               bool starts, int64_t first_row)
{
    gather_case g = {0};
    const int64_t cols = 200 / block_size + 3;
    g.block_table = malloc((size_t)(num_reqs * cols) * sizeof(int32_t));
    g.cu_seq_lens = malloc((size_t)(num_reqs + 1) * sizeof(int32_t));
    g.seq_starts = malloc((size_t)num_reqs * sizeof(int32_t));
    g.cu_seq_lens[0] = (int32_t)first_row;
    for (int64_t b = 0; b < num_reqs; b++) {
        int64_t start = starts ? support_random_in(0, 40) : 0;
        int64_t len = support_random() % 6 == 0 ? 0 : support_random_in(1, 150);
        int64_t used = (start + len + block_size - 1) / block_size;
        for (int64_t c = 0; c < cols; c++)
            g.block_table[b * cols + c] = c < used ? (int32_t)support_random_in(0, num_blocks - 1)
                                                   : 999999 + (int32_t)c;
        g.seq_starts[b] = (int32_t)start;
        g.cu_seq_lens[b + 1] = g.cu_seq_lens[b] + (int32_t)len;
    }
    g.num_tokens = g.cu_seq_lens[num_reqs] + 5;
    g.token_to_seq = malloc((size_t)g.num_tokens * sizeof(int32_t));
    int64_t b = 0;
    for (int64_t t = 0; t < g.num_tokens; t++) {
        while (b < num_reqs - 1 && t >= g.cu_seq_lens[b + 1])
            b++;
        g.token_to_seq[t] = (int32_t)b; /* the tail maps past its request: skipped */
    }
    g.spec = (mla_gather_spec){.block_table = g.block_table, .block_table_cols = cols,
                               .num_reqs = num_reqs, .cu_seq_lens = g.cu_seq_lens,
                               .seq_starts = starts ? g.seq_starts : NULL};
    return g;
}

static void free_gather(gather_case *g)
{
    free(g->block_table);
    free(g->cu_seq_lens);
    free(g->seq_starts);
    free(g->token_to_seq);
}

/* Cache element offset of row t of request r (the plain docs/semantics.md §3.2 mapping). */
static int64_t source_row(const test_cache *t, const gather_case *g, int64_t r, int64_t row)
{
    int64_t pos = row - g->cu_seq_lens[r] + (g->spec.seq_starts ? g->seq_starts[r] : 0);
    int64_t blk = g->block_table[r * g->spec.block_table_cols + pos / t->c.block_size];
    return row_offset(t, blk, pos % t->c.block_size);
}

static void expect_equal_bytes(const void *got, const void *want, size_t bytes, const char *what)
{
    if (memcmp(got, want, bytes) == 0)
        return;
    size_t i = 0;
    while (((const unsigned char *)got)[i] == ((const unsigned char *)want)[i])
        i++;
    fail_msg("%s: byte %zu is 0x%02x, want 0x%02x", what, i, ((const unsigned char *)got)[i],
             ((const unsigned char *)want)[i]);
}

static void check_gather(const char *backend, mla_dtype cache_dtype, mla_dtype dst_dtype,
                         int64_t block_size, int64_t pad, bool starts, int threads)
{
    const int64_t width = 37, num_blocks = 64;
    test_cache t = make_cache(cache_dtype, num_blocks, block_size, width, pad);
    gather_case g = make_gather(6, block_size, num_blocks, starts, 0);
    const int64_t dst_stride = width + pad;
    const size_t dst_bytes = (size_t)(g.num_tokens * dst_stride * mla_dtype_size(dst_dtype));
    unsigned char *dst = malloc(dst_bytes), *want = malloc(dst_bytes);
    memset(dst, FILL, dst_bytes);
    memset(want, FILL, dst_bytes);
    for (int64_t row = 0; row < g.num_tokens; row++) {
        int64_t r = g.token_to_seq[row];
        if (row >= g.cu_seq_lens[r + 1])
            continue;
        int64_t src = source_row(&t, &g, r, row);
        if (cache_dtype == dst_dtype) { /* the identity: bytes as they are, NaN payloads too */
            int64_t size = mla_dtype_size(dst_dtype);
            memcpy(want + row * dst_stride * size, (const char *)t.c.data + src * size,
                   (size_t)(width * size));
            continue;
        }
        for (int64_t j = 0; j < width; j++)
            oracle_store(dst_dtype, want, row * dst_stride + j,
                         oracle_load(cache_dtype, t.c.data, src + j, t.c.scale), 1.0f);
    }
    assert_int_equal(mla_gather_cache(&t.c, &g.spec, g.token_to_seq, g.num_tokens, dst, dst_dtype,
                                      dst_stride, threads), MLA_OK);
    assert_string_equal(mla_last_backend(), backend);
    char what[160];
    snprintf(what, sizeof what, "%s: gather %s cache -> %s, block_size %lld, pad %lld, starts %d, "
             "%d threads", backend, mla_dtype_name(cache_dtype), mla_dtype_name(dst_dtype),
             (long long)block_size, (long long)pad, starts, threads);
    expect_equal_bytes(dst, want, dst_bytes, what);
    free(want);
    free(dst);
    free_gather(&g);
    free(t.c.data);
}

static void check_cp_gather(const char *backend, mla_dtype dtype, int64_t block_size, int64_t pad,
                            int threads)
{
    const int64_t width = 29, num_blocks = 64, first_row = 3; /* rows before cu[0] stay */
    test_cache t = make_cache(dtype, num_blocks, block_size, width, pad);
    gather_case g = make_gather(7, block_size, num_blocks, true, first_row);
    const int64_t dst_stride = width + pad, size = mla_dtype_size(dtype);
    const int64_t rows = g.cu_seq_lens[g.spec.num_reqs] + 2;
    const size_t dst_bytes = (size_t)(rows * dst_stride * size);
    unsigned char *dst = malloc(dst_bytes), *want = malloc(dst_bytes);
    memset(dst, FILL, dst_bytes);
    memset(want, FILL, dst_bytes);
    for (int64_t r = 0; r < g.spec.num_reqs; r++)
        for (int64_t row = g.cu_seq_lens[r]; row < g.cu_seq_lens[r + 1]; row++)
            memcpy(want + row * dst_stride * size,
                   (const char *)t.c.data + source_row(&t, &g, r, row) * size, (size_t)(width * size));
    assert_int_equal(mla_cp_gather_cache(&t.c, &g.spec, dst, dst_stride, threads), MLA_OK);
    assert_string_equal(mla_last_backend(), backend);
    char what[128];
    snprintf(what, sizeof what, "%s: cp_gather %s, block_size %lld, pad %lld, %d threads", backend,
             mla_dtype_name(dtype), (long long)block_size, (long long)pad, threads);
    expect_equal_bytes(dst, want, dst_bytes, what);
    free(want);
    free(dst);
    free_gather(&g);
    free(t.c.data);
}

/* ---- every backend ------------------------------------------------------------ */

static void check_backend(const mla_backend_desc *backend, void *ctx)
{
    (void)ctx;
    static const int64_t block_sizes[] = {1, 5, 16, 64};
    const char *name = backend->name;
    for (int c = 0; c < COUNT(all_dtypes); c++) {
        for (int s = 0; s < COUNT(float_dtypes); s++) {
            for (int b = 0; b < COUNT(block_sizes); b++) {
                int64_t pad = b % 2 ? 3 : 0;
                for (int threads = 1; threads <= 2; threads++) {
                    check_write(name, all_dtypes[c], float_dtypes[s], block_sizes[b], pad, 40, 9,
                                threads);
                    check_gather(name, all_dtypes[c], float_dtypes[s], block_sizes[b], pad,
                                 threads == 2, threads);
                    check_gather(name, all_dtypes[c], float_dtypes[s], block_sizes[b], 3 - pad,
                                 threads == 1, threads);
                }
            }
        }
        for (int b = 0; b < COUNT(block_sizes); b++)
            for (int threads = 1; threads <= 2; threads++)
                check_cp_gather(name, all_dtypes[c], block_sizes[b], b % 2 ? 0 : 2, threads);
        /* the DeepSeek shape: 512 latent + 64 rope, no rope-less shortcut */
        check_write(name, all_dtypes[c], MLA_DTYPE_BF16, 64, 0, 512, 64, 2);
    }
    check_write(name, MLA_DTYPE_BF16, MLA_DTYPE_F32, 16, 0, 48, 0, 1); /* R = 0 */
    print_message("[ BACKEND  ] %s: write, gather, cp_gather bit-exact for every dtype pair\n",
                  name);
}

static void test_every_backend(void **state)
{
    (void)state;
    assert_true(support_each_backend(MLA_OP_CONVERT, NULL, check_backend, NULL) >= 1);
}

/* The chunked-prefill path end to end: a chunk plan's token_to_seq and
 * cu_seq_lens drive the gather, and the chunks put together give each
 * request's whole context in order. */
static void test_gather_chunk_plan(void **state)
{
    (void)state;
    enum { P = 4, BS = 16, W = 64, NB = 64, WIDTH = 24 };
    const int32_t context_lens[P] = {70, 0, 33, 128}; /* with-context first is not required here */
    const int32_t qsl[P + 1] = {0, 5, 9, 12, 20};
    test_cache t = make_cache(MLA_DTYPE_FP8_E4M3, NB, BS, WIDTH, 0);
    mla_chunk_plan *plan;
    assert_int_equal(mla_chunk_plan_create(context_lens, qsl, P, W, BS, 0, MLA_DTYPE_F32, &plan), MLA_OK);
    mla_chunk_plan_info info;
    mla_chunk_plan_info_get(plan, &info);
    assert_true(info.num_chunks >= 2);
    const int64_t cols = 128 / BS;
    int32_t block_table[P * 8];
    for (int i = 0; i < P * 8; i++)
        block_table[i] = (int32_t)((i * 37 + 5) % NB);
    float *ws = malloc(sizeof(float) * W * WIDTH);
    int64_t seen[P] = {0};
    for (int64_t k = 0; k < info.num_chunks; k++) {
        mla_gather_spec spec = {.block_table = block_table, .block_table_cols = cols, .num_reqs = P,
                                .cu_seq_lens = info.cu_seq_lens + k * (P + 1),
                                .seq_starts = info.starts + k * P};
        assert_int_equal(mla_gather_cache(&t.c, &spec, info.token_to_seq + k * info.token_to_seq_stride,
                                          info.seq_tot[k], ws, MLA_DTYPE_F32, WIDTH, 0), MLA_OK);
        for (int64_t r = 0; r < P; r++) {
            for (int64_t row = spec.cu_seq_lens[r]; row < spec.cu_seq_lens[r + 1]; row++) {
                int64_t pos = seen[r]++; /* positions arrive in order, chunk after chunk */
                int64_t at = row_offset(&t, block_table[r * cols + pos / BS], pos % BS);
                for (int64_t j = 0; j < WIDTH; j++) {
                    float want = oracle_load(MLA_DTYPE_FP8_E4M3, t.c.data, at + j, t.c.scale);
                    assert_memory_equal(&ws[row * WIDTH + j], &want, sizeof want);
                }
            }
        }
    }
    for (int r = 0; r < P; r++)
        assert_int_equal(seen[r], context_lens[r]);
    free(ws);
    mla_chunk_plan_destroy(plan);
    free(t.c.data);
}

/* ---- bad input: a status, a message, and not one byte written ---------------- */

typedef struct bad_env {
    test_cache t;
    uint64_t cache_sum;
    float kv_c[4 * 8], k_pe[4 * 2], dst[16 * 10];
    int64_t slots[4];
    int32_t block_table[2 * 4], cu[3], starts[2], tts[16];
    mla_gather_spec spec;
    const char *entry; /* the entry point the test calls */
} bad_env;

static void bad_env_init(bad_env *e, const char *entry)
{
    memset(e, 0, sizeof *e);
    e->entry = entry;
    e->t = make_cache(MLA_DTYPE_BF16, 4, 4, 10, 0); /* 16 slots, width 8 + 2 */
    e->cache_sum = oracle_checksum(e->t.c.data, e->t.bytes);
    for (int i = 0; i < 32; i++)
        e->kv_c[i] = (float)i;
    const int64_t slots[4] = {0, 5, -1, 15};
    memcpy(e->slots, slots, sizeof slots);
    const int32_t bt[8] = {3, 2, 1, 0, 0, 1, 2, 3}, cu[3] = {0, 6, 10}, tts[16] = {0, 0, 0, 0, 0, 0, 1, 1, 1, 1};
    memcpy(e->block_table, bt, sizeof bt);
    memcpy(e->cu, cu, sizeof cu);
    memcpy(e->tts, tts, sizeof tts);
    e->starts[1] = 2; /* request 1: positions 2..5, block table columns 0 and 1 */
    memset(e->dst, FILL, sizeof e->dst);
    e->spec = (mla_gather_spec){.block_table = e->block_table, .block_table_cols = 4, .num_reqs = 2,
                                .cu_seq_lens = e->cu, .seq_starts = e->starts};
}

/* The call, given `bad_input`, failed with `status`, said `needle`, and
 * wrote nothing. */
static void expect_rejected(bad_env *e, const char *bad_input, mla_status got, mla_status status,
                            const char *needle)
{
    support_expect_reject(e->entry, bad_input, got, status, needle);
    assert_true(oracle_checksum(e->t.c.data, e->t.bytes) == e->cache_sum);
    for (size_t i = 0; i < sizeof e->dst; i++)
        assert_int_equal(((unsigned char *)e->dst)[i], FILL);
}

static mla_status write_with(bad_env *e, const mla_kv_cache *c, int64_t L, int64_t R)
{
    return mla_concat_and_cache(c, e->kv_c, 8, e->k_pe, 2, MLA_DTYPE_F32, L, R, e->slots, 4, 1);
}

static void test_write_rejects(void **state)
{
    (void)state;
    bad_env e;
    bad_env_init(&e, "mla_concat_and_cache");
    const mla_dtype F32 = MLA_DTYPE_F32;
    mla_kv_cache c = e.t.c;
    /* the good call works (then restore the cache and its checksum) */
    void *saved = copy_of(c.data, e.t.bytes);
    assert_int_equal(write_with(&e, &c, 8, 2), MLA_OK);
    assert_true(oracle_checksum(c.data, e.t.bytes) != e.cache_sum);
    memcpy(c.data, saved, e.t.bytes);
    free(saved);

    e.slots[3] = 16; /* the last token's slot is one past the end: nothing at all is written */
    expect_rejected(&e, "slot_mapping entry one past the cache's slots", write_with(&e, &c, 8, 2),
                    MLA_ERR_OUT_OF_RANGE,
                    "slot_mapping[3] = 16 is at or past num_blocks x block_size = 16");
    e.slots[3] = INT64_MAX;
    expect_rejected(&e, "slot_mapping entry INT64_MAX", write_with(&e, &c, 8, 2),
                    MLA_ERR_OUT_OF_RANGE, "slot_mapping[3]");
    e.slots[3] = 15;
    expect_rejected(&e, "kv_lora_rank + rope_dim not the cache width", write_with(&e, &c, 8, 3),
                    MLA_ERR_INVALID_ARGUMENT,
                    "kv_lora_rank + rope_dim = 8 + 3 is not the cache width 10");
    expect_rejected(&e, "rope_dim -1", write_with(&e, &c, 11, -1), MLA_ERR_INVALID_ARGUMENT,
                    "rope_dim -1");
    expect_rejected(&e, "kv_lora_rank 0", write_with(&e, &c, 0, 10), MLA_ERR_INVALID_ARGUMENT,
                    "kv_lora_rank 0");
    expect_rejected(&e, "cache NULL", write_with(&e, NULL, 8, 2), MLA_ERR_INVALID_ARGUMENT,
                    "cache is NULL");
    expect_rejected(&e, "kv_c NULL",
                    mla_concat_and_cache(&c, NULL, 8, e.k_pe, 2, F32, 8, 2, e.slots, 4, 1),
                    MLA_ERR_INVALID_ARGUMENT, "kv_c is NULL");
    expect_rejected(&e, "k_pe NULL",
                    mla_concat_and_cache(&c, e.kv_c, 8, NULL, 2, F32, 8, 2, e.slots, 4, 1),
                    MLA_ERR_INVALID_ARGUMENT, "k_pe is NULL");
    expect_rejected(&e, "slot_mapping NULL",
                    mla_concat_and_cache(&c, e.kv_c, 8, e.k_pe, 2, F32, 8, 2, NULL, 4, 1),
                    MLA_ERR_INVALID_ARGUMENT, "slot_mapping is NULL");
    expect_rejected(&e, "kv_c_stride below kv_lora_rank",
                    mla_concat_and_cache(&c, e.kv_c, 7, e.k_pe, 2, F32, 8, 2, e.slots, 4, 1),
                    MLA_ERR_INVALID_ARGUMENT, "kv_c row stride 7 < row width 8");
    expect_rejected(&e, "kv_c_stride whose span passes int64",
                    mla_concat_and_cache(&c, e.kv_c, INT64_MAX / 2, e.k_pe, 2, F32, 8, 2, e.slots,
                                         4, 1),
                    MLA_ERR_OVERFLOW, "kv_c of 4 rows");
    expect_rejected(&e, "src_dtype fp8_e4m3",
                    mla_concat_and_cache(&c, e.kv_c, 8, e.k_pe, 2, MLA_DTYPE_FP8_E4M3, 8, 2,
                                         e.slots, 4, 1),
                    MLA_ERR_UNSUPPORTED, "source dtype fp8_e4m3");
    expect_rejected(&e, "num_tokens -1",
                    mla_concat_and_cache(&c, e.kv_c, 8, e.k_pe, 2, F32, 8, 2, e.slots, -1, 1),
                    MLA_ERR_INVALID_ARGUMENT, "num_tokens -1");

    /* a bad cache descriptor */
    mla_kv_cache bad = c;
    bad.data = NULL;
    expect_rejected(&e, "cache data NULL", write_with(&e, &bad, 8, 2), MLA_ERR_INVALID_ARGUMENT,
                    "cache data is NULL");
    bad = c;
    bad.block_size = 0;
    expect_rejected(&e, "cache block_size 0", write_with(&e, &bad, 8, 2), MLA_ERR_INVALID_ARGUMENT,
                    "block_size 0");
    bad = c;
    bad.entry_stride = 9;
    expect_rejected(&e, "cache entry_stride below width (rows overlap)", write_with(&e, &bad, 8, 2),
                    MLA_ERR_INVALID_ARGUMENT, "cache rows overlap");
    bad = c;
    bad.block_stride = 39; /* one short of 4 rows of 10 */
    expect_rejected(&e, "cache block_stride below block_size x width (blocks overlap)",
                    write_with(&e, &bad, 8, 2), MLA_ERR_INVALID_ARGUMENT, "cache rows overlap");
    bad = c;
    bad.num_blocks = INT64_MAX / 8;
    expect_rejected(&e, "cache bytes past int64", write_with(&e, &bad, 8, 2), MLA_ERR_OVERFLOW,
                    "overflows");
    bad = c;
    bad.dtype = MLA_DTYPE_COUNT;
    expect_rejected(&e, "cache dtype not an mla_dtype", write_with(&e, &bad, 8, 2),
                    MLA_ERR_UNSUPPORTED, "not an mla_dtype");
    bad = c;
    bad.dtype = MLA_DTYPE_FP8_E4M3; /* same bytes viewed as fp8, with no scale */
    bad.scale = 0.0f;
    expect_rejected(&e, "fp8 cache scale 0", write_with(&e, &bad, 8, 2), MLA_ERR_INVALID_ARGUMENT,
                    "fp8_e4m3 cache scale 0 is not finite and > 0");
    bad.scale = INFINITY;
    expect_rejected(&e, "fp8 cache scale inf", write_with(&e, &bad, 8, 2), MLA_ERR_INVALID_ARGUMENT,
                    "is not finite");
    free(c.data);
}

static mla_status gather_with(bad_env *e, const mla_gather_spec *spec, int64_t num_tokens)
{
    return mla_gather_cache(&e->t.c, spec, e->tts, num_tokens, e->dst, MLA_DTYPE_F32, 10, 1);
}

static void test_gather_rejects(void **state)
{
    (void)state;
    bad_env e;
    bad_env_init(&e, "mla_gather_cache");
    mla_gather_spec s = e.spec;
    assert_int_equal(gather_with(&e, &s, 16), MLA_OK); /* rows 10..15 map past request 0: skipped */
    for (int i = 10 * 10; i < 16 * 10; i++)
        assert_int_equal(((unsigned char *)e.dst)[4 * i], FILL);
    memset(e.dst, FILL, sizeof e.dst);

    e.block_table[5] = 4; /* request 1, column 1 (positions 4..7): one past num_blocks */
    expect_rejected(&e, "block_table id past num_blocks", gather_with(&e, &s, 16),
                    MLA_ERR_OUT_OF_RANGE, "block_table[1][1] = 4 is outside [0, 4)");
    e.block_table[5] = -1;
    expect_rejected(&e, "block_table id -1", gather_with(&e, &s, 16), MLA_ERR_OUT_OF_RANGE,
                    "block_table[1][1] = -1");
    e.block_table[5] = 1;
    s.block_table_cols = 1; /* request 0 has 6 rows: needs 2 columns */
    expect_rejected(&e, "block_table_cols too few for a request", gather_with(&e, &s, 16),
                    MLA_ERR_OUT_OF_RANGE,
                    "request 0 position 4 needs block_table column 1, past block_table_cols 1");
    s = e.spec;
    e.starts[1] = 13; /* positions 13..16: column 4 of a 4-column row */
    expect_rejected(&e, "seq_starts + length past the block table row", gather_with(&e, &s, 16),
                    MLA_ERR_OUT_OF_RANGE, "request 1 position 16");
    e.starts[1] = -2;
    expect_rejected(&e, "seq_starts -2", gather_with(&e, &s, 16), MLA_ERR_INVALID_ARGUMENT,
                    "seq_starts[1] = -2 < 0");
    e.starts[1] = 2;
    e.tts[3] = 2;
    expect_rejected(&e, "token_to_seq entry past num_reqs", gather_with(&e, &s, 16),
                    MLA_ERR_OUT_OF_RANGE, "token_to_seq[3] = 2 is outside [0, 2)");
    e.tts[3] = 1; /* row 3 claims request 1, which starts at row 6 */
    expect_rejected(&e, "token_to_seq row before its request's cu_seq_lens",
                    gather_with(&e, &s, 16), MLA_ERR_INVALID_ARGUMENT,
                    "row 3 maps to request 1, which starts at cu_seq_lens[1] = 6");
    e.tts[3] = 0;
    expect_rejected(&e, "token_to_seq NULL",
                    mla_gather_cache(&e.t.c, &s, NULL, 16, e.dst, MLA_DTYPE_F32, 10, 1),
                    MLA_ERR_INVALID_ARGUMENT, "token_to_seq is NULL");
    expect_rejected(&e, "dst NULL",
                    mla_gather_cache(&e.t.c, &s, e.tts, 16, NULL, MLA_DTYPE_F32, 10, 1),
                    MLA_ERR_INVALID_ARGUMENT, "dst is NULL");
    expect_rejected(&e, "dst_stride below the cache width",
                    mla_gather_cache(&e.t.c, &s, e.tts, 16, e.dst, MLA_DTYPE_F32, 9, 1),
                    MLA_ERR_INVALID_ARGUMENT, "dst row stride 9 < row width 10");
    expect_rejected(&e, "dst_dtype fp8_e5m2",
                    mla_gather_cache(&e.t.c, &s, e.tts, 16, e.dst, MLA_DTYPE_FP8_E5M2, 10, 1),
                    MLA_ERR_UNSUPPORTED, "workspace dtype fp8_e5m2");
    expect_rejected(&e, "spec NULL",
                    mla_gather_cache(&e.t.c, NULL, e.tts, 16, e.dst, MLA_DTYPE_F32, 10, 1),
                    MLA_ERR_INVALID_ARGUMENT, "spec is NULL");
    expect_rejected(&e, "num_tokens -1", gather_with(&e, &s, -1), MLA_ERR_INVALID_ARGUMENT,
                    "num_tokens -1 < 0");
    s.cu_seq_lens = NULL;
    expect_rejected(&e, "cu_seq_lens NULL", gather_with(&e, &s, 16), MLA_ERR_INVALID_ARGUMENT,
                    "cu_seq_lens is NULL");
    s = e.spec;
    s.block_table = NULL;
    expect_rejected(&e, "block_table NULL", gather_with(&e, &s, 16), MLA_ERR_INVALID_ARGUMENT,
                    "block_table is NULL");
    s = e.spec;
    s.block_table_cols = INT64_MAX / 2 + 1;
    expect_rejected(&e, "block_table size past int64", gather_with(&e, &s, 16), MLA_ERR_OVERFLOW,
                    "block_table of 2 x");
    free(e.t.c.data);
}

static void test_cp_gather_rejects(void **state)
{
    (void)state;
    bad_env e;
    bad_env_init(&e, "mla_cp_gather_cache");
    mla_gather_spec s = e.spec;
    assert_int_equal(mla_cp_gather_cache(&e.t.c, &s, e.dst, 20, 1), MLA_OK); /* bf16: 20 halves a row */
    memset(e.dst, FILL, sizeof e.dst);
    e.block_table[1] = 7; /* request 0, rows 4..5 */
    expect_rejected(&e, "block_table id past num_blocks",
                    mla_cp_gather_cache(&e.t.c, &s, e.dst, 20, 1), MLA_ERR_OUT_OF_RANGE,
                    "block_table[0][1] = 7 is outside [0, 4)");
    e.block_table[1] = 2;
    e.cu[1] = 11; /* decreasing */
    expect_rejected(&e, "cu_seq_lens decreasing", mla_cp_gather_cache(&e.t.c, &s, e.dst, 20, 1),
                    MLA_ERR_INVALID_ARGUMENT, "cu_seq_lens[2] = 10 < cu_seq_lens[1] = 11");
    e.cu[1] = 6;
    e.cu[0] = -1;
    expect_rejected(&e, "cu_seq_lens[0] -1", mla_cp_gather_cache(&e.t.c, &s, e.dst, 20, 1),
                    MLA_ERR_INVALID_ARGUMENT, "cu_seq_lens[0] = -1 < 0");
    e.cu[0] = 0;
    e.starts[0] = 11; /* positions 11..16 */
    expect_rejected(&e, "seq_starts + length past the block table row",
                    mla_cp_gather_cache(&e.t.c, &s, e.dst, 20, 1), MLA_ERR_OUT_OF_RANGE,
                    "request 0 position 16 needs block_table column 4");
    e.starts[0] = 0;
    expect_rejected(&e, "dst_stride below the cache width",
                    mla_cp_gather_cache(&e.t.c, &s, e.dst, 9, 1), MLA_ERR_INVALID_ARGUMENT,
                    "dst row stride 9 < row width 10");
    expect_rejected(&e, "dst NULL", mla_cp_gather_cache(&e.t.c, &s, NULL, 10, 1),
                    MLA_ERR_INVALID_ARGUMENT, "dst is NULL");
    free(e.t.c.data);
}

/* A block of one row, or a dst of one row, has any row stride: only a
 * second row would lie a stride away. Gathers over such a cache and into
 * such a dst copy the right rows and never scale a stride to bytes (past
 * int64_t here: the suites under -fsanitize=undefined see it). */
static void one_row_strides_on(const mla_backend_desc *b, void *ctx)
{
    (void)ctx;
    enum { W = 6 };
    const int64_t huge = INT64_MAX / 2;
    float rows[2 * W];
    for (int i = 0; i < 2 * W; i++)
        rows[i] = (float)(i + 1) / 8.0f;
    /* 2 blocks of 1 row, W elements apart; the entry stride is never used */
    const mla_kv_cache c = {.data = rows, .dtype = MLA_DTYPE_F32, .num_blocks = 2, .block_size = 1,
                            .width = W, .block_stride = W, .entry_stride = huge, .scale = 1.0f};
    const int32_t table[2] = {1, 0}, cu[2] = {0, 2}, one[2] = {0, 1}, t2s[2] = {0, 0};
    const mla_gather_spec two_rows = {.block_table = table, .block_table_cols = 2, .num_reqs = 1,
                                      .cu_seq_lens = cu};
    const mla_gather_spec one_row = {.block_table = table, .block_table_cols = 2, .num_reqs = 1,
                                     .cu_seq_lens = one};
    float dst[2 * W];
    uint16_t half[W];
    assert_int_equal(mla_gather_cache(&c, &two_rows, t2s, 2, dst, MLA_DTYPE_F32, W, 1), MLA_OK);
    support_expect_ran(b);
    assert_memory_equal(dst, rows + W, W * sizeof(float));
    assert_memory_equal(dst + W, rows, W * sizeof(float));
    memset(dst, 0, sizeof dst);
    assert_int_equal(mla_cp_gather_cache(&c, &two_rows, dst, W, 1), MLA_OK);
    assert_memory_equal(dst, rows + W, W * sizeof(float));
    assert_memory_equal(dst + W, rows, W * sizeof(float));
    /* one dst row: its stride is never used either */
    memset(dst, 0, sizeof dst);
    assert_int_equal(mla_gather_cache(&c, &one_row, t2s, 1, dst, MLA_DTYPE_F32, huge, 2), MLA_OK);
    assert_memory_equal(dst, rows + W, W * sizeof(float));
    assert_int_equal(mla_gather_cache(&c, &one_row, t2s, 1, half, MLA_DTYPE_BF16, huge, 1), MLA_OK);
    for (int i = 0; i < W; i++)
        assert_int_equal(half[i], oracle_narrow16(&ORACLE_BF16, rows[W + i]));
    memset(dst, 0, sizeof dst);
    assert_int_equal(mla_cp_gather_cache(&c, &one_row, dst, huge, 1), MLA_OK);
    assert_memory_equal(dst, rows + W, W * sizeof(float));
}

static void test_one_row_strides(void **state)
{
    (void)state;
    assert_true(support_each_backend(MLA_OP_CONVERT, NULL, one_row_strides_on, NULL) >= 1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_backend),
        cmocka_unit_test(test_one_row_strides),
        cmocka_unit_test(test_gather_chunk_plan),
        cmocka_unit_test(test_write_rejects),
        cmocka_unit_test(test_gather_rejects),
        cmocka_unit_test(test_cp_gather_rejects),
    };
    return cmocka_run_group_tests_name("cache", tests, NULL, NULL);
}
