/*
 * libFuzzer target: the element-wise ops and the paged-cache ops, through
 * the MLA_OP_CONVERT backend (fuzz.h says what every call is checked for).
 *
 *   convert    mla_convert, mla_convert_scaled: every bit pattern of the
 *              source against the oracle's rounding, bit for bit
 *   exp        mla_exp_f32 (in place too): within 1 ulp of e^x
 *   concat     mla_concat_and_cache: the rows the slots name, converted as
 *              tests/oracle.c converts; every other cache byte untouched
 *   gather     mla_gather_cache: the rows token_to_seq names, dequantized
 *   cp_gather  mla_cp_gather_cache: the rows of each request, byte for byte
 */
#include "fuzz.h"

#include "oracle.h"

#include <float.h>
#include <math.h>
#include <string.h>

static const mla_dtype all_dtypes[] = {MLA_DTYPE_F32, MLA_DTYPE_BF16, MLA_DTYPE_F16,
                                       MLA_DTYPE_FP8_E4M3, MLA_DTYPE_FP8_E5M2};
static const mla_dtype float_dtypes[] = {MLA_DTYPE_F32, MLA_DTYPE_BF16, MLA_DTYPE_F16};

static bool is_float(mla_dtype dt)
{
    return dt == MLA_DTYPE_F32 || dt == MLA_DTYPE_BF16 || dt == MLA_DTYPE_F16;
}

static bool is_fp8(mla_dtype dt)
{
    return dt == MLA_DTYPE_FP8_E4M3 || dt == MLA_DTYPE_FP8_E5M2;
}

static bool scale_ok(float scale)
{
    return scale > 0.0f && scale <= FLT_MAX;
}

/* Element size, 1 for a value that is no dtype (what the buffers assume). */
static int64_t size_of(mla_dtype dt)
{
    return mla_dtype_size(dt) ? mla_dtype_size(dt) : 1;
}

/* Fails unless element i of got is the reference element of want. */
static void expect_element(const char *fn, const char *what, mla_dtype dt, const void *want,
                           const void *got, int64_t i)
{
    const size_t size = (size_t)size_of(dt);
    if (memcmp((const char *)want + i * size, (const char *)got + i * size, size) != 0)
        fz_fail("%s: %s element %lld (%s) is %g, want %g", fn, what, (long long)i,
                mla_dtype_name(dt), (double)fz_load(dt, got, i, 1.0f),
                (double)fz_load(dt, want, i, 1.0f));
}

/* ---- convert ----------------------------------------------------------------- */

static void run_convert(fz *f)
{
    /* a supported pair: f32 on one side, or fp8 -> bf16 */
    mla_dtype other = all_dtypes[1 + fz_u8(f) % 4], src_dt, dst_dt;
    const bool narrowing = fz_bit(f);
    src_dt = fz_dtype(f, narrowing ? MLA_DTYPE_F32 : other);
    dst_dt = fz_dtype(f, narrowing ? other : MLA_DTYPE_F32);
    if (!narrowing && is_fp8(src_dt) && fz_bit(f))
        dst_dt = MLA_DTYPE_BF16;
    if (f->hostile && fz_u8(f) < 16) /* any pair, f32 -> f32 and bf16 -> f16 included */
        src_dt = all_dtypes[fz_u8(f) % 5], dst_dt = all_dtypes[fz_u8(f) % 5];
    const int64_t n = fz_edge(f, fz_in(f, 0, 700));
    const bool scaled = fz_bit(f), fp8 = is_fp8(src_dt) || is_fp8(dst_dt);
    const float scale = scaled ? fz_float(f, fp8 ? 0.01f : 1.0f, fp8 ? 8.0f : 1.0f) : 1.0f;
    const int threads = fz_threads(f);
    const uint8_t alias = f->hostile ? fz_u8(f) : 0; /* < 16: dst inside src's buffer */

    const bool pair_ok = (src_dt == MLA_DTYPE_F32 && (is_fp8(dst_dt) || dst_dt == MLA_DTYPE_BF16 ||
                                                      dst_dt == MLA_DTYPE_F16)) ||
                         (dst_dt == MLA_DTYPE_F32 && (is_fp8(src_dt) || src_dt == MLA_DTYPE_BF16 ||
                                                      src_dt == MLA_DTYPE_F16)) ||
                         (dst_dt == MLA_DTYPE_BF16 && is_fp8(src_dt));
    const int64_t src_bytes = fz_mul(n, size_of(src_dt)), dst_bytes = fz_mul(n, size_of(dst_dt));
    fz_expect e = fz_unless(n < 0 || !pair_ok || src_bytes < 0 || dst_bytes < 0 ||
                                !scale_ok(scale) || (scale != 1.0f && !fp8),
                            FZ_OK);
    if (e == FZ_OK && !fz_fits(src_bytes + dst_bytes + 64))
        return; /* valid, but too large to allocate */
    const int64_t sb = e == FZ_OK ? src_bytes : 16, db = e == FZ_OK ? dst_bytes : 16;
    fz_buf *src, *dst;
    int64_t shift = 0;
    if (alias < 16) { /* one buffer: dst `shift` bytes after src */
        shift = alias % 5 * (alias & 8 ? 1 : 3);
        src = dst = fz_alloc("src and dst", (size_t)((sb > db ? sb : db) + shift), 0, true);
        e = fz_unless(n > 0 && shift < sb && e != FZ_REJECT, e);
    } else {
        src = fz_alloc("src", (size_t)sb, fz_u8(f), false);
        dst = fz_alloc("dst", (size_t)db, fz_u8(f), true);
    }
    if (!src || !dst)
        return;
    for (int64_t i = 0; i < sb; i++)
        src->p[i] = (unsigned char)fz_random(f);
    void *src_p = fz_null(f) ? NULL : src->p, *dst_p = fz_null(f) ? NULL : dst->p + shift;
    e = fz_unless(n > 0 && (!src_p || !dst_p), e);
    unsigned char *want = NULL;
    if (e != FZ_REJECT) {
        want = fz_scratch((size_t)db);
        for (int64_t i = 0; i < n; i++)
            fz_convert_ref(dst_dt, want, i, src_dt, src->p, i, scale);
        if (dst_p)
            fz_allow(dst, (size_t)shift, (size_t)db);
    }
    const char *backend = fz_backend(f, MLA_OP_CONVERT);
    fz_before();
    mla_status st = scaled ? mla_convert_scaled(dst_dt, dst_p, src_dt, src_p, n, scale, threads)
                           : mla_convert(dst_dt, dst_p, src_dt, src_p, n, threads);
    if (fz_after(scaled ? "mla_convert_scaled" : "mla_convert", st, e, backend))
        for (int64_t i = 0; i < n; i++)
            expect_element("mla_convert", "dst", dst_dt, want, dst_p, i);
}

/* ---- exp --------------------------------------------------------------------- */

static void run_exp(fz *f)
{
    const int64_t n = fz_edge(f, fz_in(f, 0, 700));
    const uint8_t place = fz_u8(f); /* 0-63: in place; hostile 64-79: overlapping */
    const int threads = fz_threads(f);
    const bool in_place = place < 64, overlap = f->hostile && place >= 64 && place < 80;
    const int64_t bytes = fz_mul(n, 4);
    fz_expect e = fz_unless(n < 0 || bytes < 0, FZ_OK);
    if (e == FZ_OK && !fz_fits(2 * bytes))
        return;
    const int64_t b = e == FZ_OK ? bytes : 16, shift = overlap ? 4 * (1 + place % 3) : 0;
    fz_buf *src = fz_alloc("src", (size_t)(b + shift), 0, in_place || overlap);
    fz_buf *dst = in_place || overlap ? src : fz_alloc("dst", (size_t)b, 0, true);
    if (!src || !dst)
        return;
    float *x = (float *)src->p;
    for (int64_t i = 0; i < b / 4; i++) { /* random bits, or a value where exp is finite */
        uint32_t r = (uint32_t)fz_random(f);
        x[i] = r & 1 ? oracle_f32_from(r) : -104.0f + 193.0f * (float)(r >> 8) * 0x1p-24f;
    }
    float *in = fz_scratch((size_t)b);
    memcpy(in, x, (size_t)b);
    float *y = (float *)(dst->p + shift), *src_p = x, *dst_p = y;
    if (fz_null(f))
        src_p = NULL;
    if (fz_null(f))
        dst_p = NULL;
    e = fz_unless(n > 0 && (!src_p || !dst_p || (shift > 0 && shift < bytes)), e);
    if (e != FZ_REJECT)
        fz_allow(dst, (size_t)shift, (size_t)b);
    const char *backend = fz_backend(f, MLA_OP_CONVERT);
    fz_before();
    if (fz_after("mla_exp_f32", mla_exp_f32(dst_p, src_p, n, threads), e, backend)) {
        for (int64_t i = 0; i < n; i++) {
            const bool nan_ok = isnan(in[i]) && isnan(y[i]);
            if (!nan_ok && !(oracle_exp_ulp_error(in[i], y[i]) <= 1.0))
                fz_fail("mla_exp_f32: exp(%a) = %a, more than 1 ulp from %a", (double)in[i],
                        (double)y[i], exp((double)in[i]));
        }
    }
}

/* ---- concat_and_cache ------------------------------------------------------------ */

static void run_concat(fz *f)
{
    const int64_t L = fz_edge(f, fz_in(f, 1, 40)), R = fz_edge(f, fz_in(f, 0, 16));
    fz_cache k;
    fz_cache_shape(f, &k, all_dtypes, 5, fz_add(L, R) < 0 ? 1 : L + R, 6, 12);
    const mla_kv_cache *c = &k.c;
    const mla_dtype src_dt = fz_pick_dtype(f, float_dtypes, 3);
    const int64_t T = fz_edge(f, fz_in(f, 0, 20));
    const int64_t kv_c_stride = fz_edge(f, fz_pad(L, fz_in(f, 0, 3)));
    const int64_t k_pe_stride = fz_edge(f, fz_pad(R, fz_in(f, 0, 3)));
    const int threads = fz_threads(f);
    const bool no_cache = fz_null(f);

    fz_expect e = fz_unless(!k.ok || no_cache || !is_float(src_dt) || L < 1 || R < 0 || T < 0 ||
                                L > c->width || R != c->width - L,
                            FZ_OK);
    /* kv_c and k_pe: a stride below the row, or rows past int64_t, fail */
    const int64_t kv_elems = T > 0 ? fz_add(fz_mul(T - 1, kv_c_stride), L) : 0;
    const int64_t pe_elems = T > 0 && R > 0 ? fz_add(fz_mul(T - 1, k_pe_stride), R) : 0;
    e = fz_unless(kv_c_stride < L || k_pe_stride < R || fz_bytes(kv_elems, src_dt) < 0 ||
                      fz_bytes(pe_elems, src_dt) < 0,
                  e);
    /* k_pe unused (R = 0) but its rows' bytes past int64_t: a rejection is fair too */
    if (e == FZ_OK && R == 0 && T > 1 && fz_bytes(fz_mul(T - 1, k_pe_stride), src_dt) < 0)
        e = FZ_EITHER;
    const int64_t slots = fz_mul(c->num_blocks, c->block_size), Tn = T > 0 && T <= 64 ? T : 0;
    if (e == FZ_OK && T != Tn)
        return;
    fz_buf *slot_buf = fz_alloc("slot_mapping", (size_t)Tn * 8, 0, false);
    if (!slot_buf)
        return;
    int64_t *slot = (int64_t *)slot_buf->p, touched = 0;
    for (int64_t t = 0; t < Tn; t++) {
        /* distinct slots, or -1 (skipped); hostile: any */
        int64_t s = slots > 0 ? (t * 7 + fz_in(f, 0, 255)) % slots : -1;
        for (int64_t u = 0; u < t && s >= 0; u++)
            s = slot[u] == s ? -1 : s;
        const bool skip = fz_u8(f) < 40;
        slot[t] = fz_edge(f, !skip && s >= 0 ? s : -1 - fz_in(f, 0, 2));
        if (slot[t] >= 0 && slots >= 0 && slot[t] >= slots)
            e = FZ_REJECT;
    }
    if (e == FZ_REJECT && !f->hostile)
        fz_fail("harness: a clean concat input is invalid");
    bool dup[64] = {0};
    if (e != FZ_REJECT)
        for (int64_t t = 0; t < Tn; t++) {
            for (int64_t u = 0; u < t; u++)
                dup[t] = dup[t] || (slot[t] >= 0 && slot[u] == slot[t]);
            for (int64_t u = t + 1; u < Tn; u++)
                dup[t] = dup[t] || (slot[t] >= 0 && slot[u] == slot[t]);
            if (slot[t] >= 0) {
                int64_t end = fz_add(fz_cache_row(&k, slot[t] / c->block_size,
                                                  slot[t] % c->block_size), c->width);
                touched = end > touched ? end : touched;
            }
        }
    const bool big = e != FZ_REJECT; /* the real sizes; else small stand-ins */
    fz_buf *kv = fz_alloc("kv_c", (size_t)(big ? kv_elems * size_of(src_dt) : 16), fz_u8(f), false);
    fz_buf *pe = fz_alloc("k_pe", (size_t)(big ? pe_elems * size_of(src_dt) : 16), fz_u8(f), false);
    if (!kv || !pe || !fz_cache_alloc(f, &k, touched, true))
        return;
    e = fz_unless(!k.ok, e);
    if (is_float(src_dt)) {
        for (size_t i = 0; i < kv->bytes / (size_t)size_of(src_dt); i++)
            fz_put_random(f, src_dt, kv->p, (int64_t)i, 1.0f);
        for (size_t i = 0; i < pe->bytes / (size_t)size_of(src_dt); i++)
            fz_put_random(f, src_dt, pe->p, (int64_t)i, 1.0f);
    }
    const void *kv_p = fz_null(f) ? NULL : kv->p, *pe_p = fz_null(f) || (R == 0 && fz_bit(f)) ? NULL : pe->p;
    const int64_t *slot_p = fz_null(f) ? NULL : slot;
    e = fz_unless(T > 0 && (!kv_p || (R > 0 && !pe_p) || !slot_p), e);
    const int64_t csize = size_of(c->dtype);
    if (e != FZ_REJECT)
        for (int64_t t = 0; t < Tn; t++)
            if (slot[t] >= 0)
                fz_allow(k.buf, (size_t)(fz_cache_row(&k, slot[t] / c->block_size,
                                                      slot[t] % c->block_size) * csize),
                         (size_t)(c->width * csize));
    const char *backend = fz_backend(f, MLA_OP_CONVERT);
    fz_before();
    mla_status st = mla_concat_and_cache(no_cache ? NULL : c, kv_p, kv_c_stride, pe_p, k_pe_stride,
                                         src_dt, L, R, slot_p, T, threads);
    if (!fz_after("mla_concat_and_cache", st, e, backend))
        return;
    unsigned char want[8];
    for (int64_t t = 0; t < Tn; t++) {
        if (slot[t] < 0 || dup[t])
            continue;
        const unsigned char *row = k.buf->p + fz_cache_row(&k, slot[t] / c->block_size,
                                                           slot[t] % c->block_size) * csize;
        for (int64_t d = 0; d < c->width; d++) {
            if (d < L)
                fz_convert_ref(c->dtype, want, 0, src_dt, kv->p, t * kv_c_stride + d, c->scale);
            else
                fz_convert_ref(c->dtype, want, 0, src_dt, pe->p, t * k_pe_stride + d - L, c->scale);
            if (memcmp(want, row + d * csize, (size_t)csize) != 0)
                fz_fail("mla_concat_and_cache: token %lld (slot %lld) element %lld is %g, want "
                        "%g (%s -> %s cache)", (long long)t, (long long)slot[t], (long long)d,
                        (double)fz_load(c->dtype, row, d, c->scale),
                        (double)fz_load(c->dtype, want, 0, c->scale), mla_dtype_name(src_dt),
                        mla_dtype_name(c->dtype));
        }
    }
}

/* ---- the gathers --------------------------------------------------------------- */

/* A gather spec over k: requests, block table (valid ids in a clean input),
 * cu_seq_lens (from cu0, lengths the table holds) and seq_starts. */
typedef struct gather_case {
    mla_gather_spec spec;
    int64_t B, cols;
    fz_buf *table, *cu, *starts;
} gather_case;

static bool make_spec(fz *f, const fz_cache *k, gather_case *g, int32_t cu0)
{
    const mla_kv_cache *c = &k->c;
    g->B = fz_edge(f, fz_in(f, 0, 5));
    g->cols = fz_edge(f, fz_in(f, 0, 5));
    const int64_t B = g->B >= 0 && g->B <= 8 ? g->B : 0;
    const int64_t cells = g->cols >= 0 && g->cols <= 8 ? B * g->cols : 0;
    g->table = fz_alloc("block_table", (size_t)cells * 4, 0, false);
    g->cu = fz_alloc("cu_seq_lens", (size_t)(B + 1) * 4, 0, false);
    g->starts = fz_alloc("seq_starts", (size_t)(B > 0 ? B : 1) * 4, 0, false);
    if (!g->table || !g->cu || !g->starts)
        return false;
    int32_t *table = (int32_t *)g->table->p, *cu = (int32_t *)g->cu->p;
    int32_t *starts = (int32_t *)g->starts->p;
    for (int64_t i = 0; i < cells; i++)
        table[i] = (int32_t)fz_edge(f, c->num_blocks > 0 ? fz_in(f, 0, 255) % c->num_blocks : 0);
    /* positions the table can hold, in a clean input (block ids there exist) */
    const int64_t room = c->num_blocks > 0 ? fz_mul(g->cols, c->block_size) : 0;
    cu[0] = cu0;
    for (int64_t r = 0; r < B; r++) {
        int64_t start = fz_in(f, 0, 12), len = fz_in(f, 0, 12);
        if (room >= 0 && start + len > room) {
            start = room > start ? start : room;
            len = room - start;
        }
        starts[r] = (int32_t)fz_edge(f, start);
        cu[r + 1] = (int32_t)((int64_t)cu[r] + len);
        if (fz_edge(f, 0) != 0) /* a hostile break in the order */
            cu[r + 1] = (int32_t)((int64_t)cu[r] - 1 - len);
    }
    g->spec = (mla_gather_spec){.block_table = fz_null(f) ? NULL : table,
                                .block_table_cols = g->cols, .num_reqs = g->B,
                                .cu_seq_lens = fz_null(f) ? NULL : cu,
                                .seq_starts = fz_bit(f) ? NULL : starts};
    return true;
}

/* The model of what both gathers check of a spec. */
static fz_expect spec_verdict(const gather_case *g)
{
    const mla_gather_spec *s = &g->spec;
    const int64_t cells = fz_mul(g->B, g->cols);
    return fz_unless(g->B < 0 || g->cols < 0 || !s->cu_seq_lens || cells < 0 ||
                         (cells > 0 && !s->block_table),
                     FZ_OK);
}

/* The arrays hold at most 8 requests of 8 columns; a larger (edge) count
 * is tried only where the call may read none of them. */
static bool arrays_short(const gather_case *g)
{
    return g->B > 8 || g->cols > 8;
}

/* Position pos of request r: its block, or -1 when the table has no
 * valid id for it. */
static int64_t block_of(const fz_cache *k, const gather_case *g, int64_t r, int64_t pos)
{
    const int64_t col = pos / k->c.block_size;
    if (col >= g->cols)
        return -1;
    const int32_t id = g->spec.block_table[r * g->cols + col];
    return id >= 0 && id < k->c.num_blocks ? id : -1;
}

static int64_t start_of(const gather_case *g, int64_t r)
{
    return g->spec.seq_starts ? g->spec.seq_starts[r] : 0;
}

static void run_gather(fz *f)
{
    const int64_t width = fz_in(f, 1, 40);
    fz_cache k;
    fz_cache_shape(f, &k, all_dtypes, 5, width, 6, 12);
    const mla_kv_cache *c = &k.c;
    gather_case g;
    if (!make_spec(f, &k, &g, 0))
        return;
    const mla_dtype dst_dt = fz_pick_dtype(f, float_dtypes, 3);
    const int32_t *cu = (const int32_t *)g.cu->p;
    const int64_t B = g.B >= 0 && g.B <= 8 ? g.B : 0;
    const int64_t T = arrays_short(&g) ? 0 : fz_edge(f, B > 0 ? fz_in(f, 0, cu[B] > 0 ? (int64_t)cu[B] + 3 : 3) : 0);
    const int64_t dst_stride = fz_edge(f, fz_pad(c->width, fz_in(f, 0, 3)));
    const int threads = fz_threads(f);
    const bool no_cache = fz_null(f);
    fz_expect e = fz_and(spec_verdict(&g), fz_unless(!k.ok || no_cache || !is_float(dst_dt) ||
                                                         T < 0 || dst_stride < c->width,
                                                     FZ_OK));
    const int64_t Tn = T > 0 && T <= 64 ? T : 0;
    if (e == FZ_OK && T != Tn)
        return;
    fz_buf *t2s_buf = fz_alloc("token_to_seq", (size_t)Tn * 4, 0, false);
    if (!t2s_buf)
        return;
    int32_t *t2s = (int32_t *)t2s_buf->p;
    for (int64_t t = 0; t < Tn; t++) { /* the request owning row t, or one whose rows end before */
        int64_t r = 0;
        while (r + 1 < B && cu[r + 1] <= t)
            r++;
        if (B > 0 && fz_u8(f) < 40)
            r = fz_in(f, 0, 255) % (r + 1);
        t2s[t] = (int32_t)fz_edge(f, B > 0 ? r : 0);
    }
    const int64_t dst_elems = T > 0 ? fz_add(fz_mul(T - 1, dst_stride), c->width) : 0;
    e = fz_unless(fz_bytes(dst_elems, dst_dt) < 0, e);
    /* every row: skipped, or read from a valid block */
    int64_t touched = 0;
    bool writes[64] = {0};
    for (int64_t t = 0; t < Tn && e != FZ_REJECT; t++) {
        const int64_t r = t2s[t];
        if (r < 0 || r >= g.B) {
            e = FZ_REJECT;
            break;
        }
        if (t >= cu[r + 1])
            continue;
        const int64_t pos = t - cu[r] + start_of(&g, r);
        if (t < cu[r] || start_of(&g, r) < 0 || block_of(&k, &g, r, pos) < 0) {
            e = FZ_REJECT;
            break;
        }
        writes[t] = true;
        const int64_t end = fz_add(fz_cache_row(&k, block_of(&k, &g, r, pos), pos % c->block_size),
                                   c->width);
        touched = end > touched ? end : touched;
    }
    if (e == FZ_REJECT && !f->hostile)
        fz_fail("harness: a clean gather input is invalid");
    const int64_t dsize = size_of(dst_dt);
    fz_buf *dst = fz_alloc("dst", (size_t)(e != FZ_REJECT ? dst_elems * dsize : 16), fz_u8(f), true);
    if (!dst || !fz_cache_alloc(f, &k, touched, false))
        return;
    e = fz_unless(!k.ok, e);
    void *dst_p = fz_null(f) ? NULL : dst->p;
    const int32_t *t2s_p = fz_null(f) ? NULL : t2s;
    e = fz_unless(T > 0 && (!dst_p || !t2s_p), e);
    if (e != FZ_REJECT)
        for (int64_t t = 0; t < Tn; t++)
            if (writes[t])
                fz_allow(dst, (size_t)(t * dst_stride * dsize), (size_t)(c->width * dsize));
    const char *backend = fz_backend(f, MLA_OP_CONVERT);
    const bool no_spec = f->hostile && fz_null(f);
    e = fz_unless(no_spec, e);
    fz_before();
    mla_status st = mla_gather_cache(no_cache ? NULL : c, no_spec ? NULL : &g.spec, t2s_p, T,
                                     dst_p, dst_dt, dst_stride, threads);
    if (!fz_after("mla_gather_cache", st, e, backend))
        return;
    unsigned char want[4];
    for (int64_t t = 0; t < Tn; t++) {
        if (!writes[t])
            continue;
        const int64_t r = t2s[t], pos = t - cu[r] + start_of(&g, r);
        const int64_t row = fz_cache_row(&k, block_of(&k, &g, r, pos), pos % c->block_size);
        for (int64_t d = 0; d < c->width; d++) {
            fz_convert_ref(dst_dt, want, 0, c->dtype, k.buf->p, row + d, c->scale);
            if (memcmp(want, dst->p + (t * dst_stride + d) * dsize, (size_t)dsize) != 0)
                fz_fail("mla_gather_cache: row %lld (request %lld, position %lld) element %lld "
                        "is %g, want %g (%s cache -> %s)", (long long)t, (long long)r,
                        (long long)pos, (long long)d,
                        (double)fz_load(dst_dt, dst->p, t * dst_stride + d, 1.0f),
                        (double)fz_load(dst_dt, want, 0, 1.0f), mla_dtype_name(c->dtype),
                        mla_dtype_name(dst_dt));
        }
    }
}

static void run_cp_gather(fz *f)
{
    const int64_t width = fz_in(f, 1, 40);
    fz_cache k;
    fz_cache_shape(f, &k, all_dtypes, 5, width, 6, 12);
    const mla_kv_cache *c = &k.c;
    gather_case g;
    if (!make_spec(f, &k, &g, (int32_t)fz_edge(f, fz_in(f, 0, 3))))
        return;
    const int32_t *cu = (const int32_t *)g.cu->p;
    const int64_t B = g.B >= 0 && g.B <= 8 ? g.B : 0;
    const int64_t dst_stride = fz_edge(f, fz_pad(c->width, fz_in(f, 0, 3)));
    const int threads = fz_threads(f);
    const bool no_cache = fz_null(f);
    fz_expect e = fz_and(spec_verdict(&g), fz_unless(!k.ok || no_cache, FZ_OK));
    if (e != FZ_REJECT && arrays_short(&g))
        return;
    int64_t touched = 0;
    if (e != FZ_REJECT) {
        e = fz_unless(cu[0] < 0, e);
        for (int64_t r = 0; r < B && e != FZ_REJECT; r++) {
            e = fz_unless(cu[r + 1] < cu[r] || start_of(&g, r) < 0, e);
            for (int64_t i = 0; e != FZ_REJECT && i < (int64_t)cu[r + 1] - cu[r]; i++) {
                const int64_t pos = start_of(&g, r) + i, blk = block_of(&k, &g, r, pos);
                e = fz_unless(blk < 0, e);
                const int64_t end = fz_add(fz_cache_row(&k, blk, pos % c->block_size), c->width);
                touched = end > touched ? end : touched;
            }
        }
    }
    if (e == FZ_REJECT && !f->hostile)
        fz_fail("harness: a clean cp_gather input is invalid");
    const int64_t rows = e != FZ_REJECT ? cu[B] : 0;
    const int64_t dst_elems = rows > 0 ? fz_add(fz_mul(rows - 1, dst_stride), c->width) : 0;
    const int64_t dsize = size_of(c->dtype);
    e = fz_unless(dst_stride < c->width || fz_bytes(dst_elems, c->dtype) < 0, e);
    if (e == FZ_OK && !fz_fits(fz_mul(dst_elems, dsize)))
        return;
    fz_buf *dst = fz_alloc("dst", (size_t)(e != FZ_REJECT ? dst_elems * dsize : 16), fz_u8(f), true);
    if (!dst || !fz_cache_alloc(f, &k, touched, false))
        return;
    e = fz_unless(!k.ok, e);
    void *dst_p = fz_null(f) ? NULL : dst->p;
    e = fz_unless(rows > 0 && !dst_p, e);
    if (e != FZ_REJECT)
        fz_allow_rows(dst, cu[0], rows - cu[0], dst_stride, c->width, dsize);
    const char *backend = fz_backend(f, MLA_OP_CONVERT);
    const bool no_spec = f->hostile && fz_null(f);
    e = fz_unless(no_spec, e);
    fz_before();
    mla_status st = mla_cp_gather_cache(no_cache ? NULL : c, no_spec ? NULL : &g.spec, dst_p,
                                        dst_stride, threads);
    if (!fz_after("mla_cp_gather_cache", st, e, backend))
        return;
    for (int64_t r = 0; r < B; r++)
        for (int64_t t = cu[r]; t < cu[r + 1]; t++) {
            const int64_t pos = start_of(&g, r) + t - cu[r];
            const int64_t row = fz_cache_row(&k, block_of(&k, &g, r, pos), pos % c->block_size);
            if (memcmp(dst->p + t * dst_stride * dsize, k.buf->p + row * dsize,
                       (size_t)(c->width * dsize)) != 0)
                fz_fail("mla_cp_gather_cache: row %lld (request %lld, position %lld) is not the "
                        "cache row", (long long)t, (long long)r, (long long)pos);
        }
}

const fz_entry fz_entries[] = {
    {"convert", run_convert}, {"exp", run_exp},         {"concat", run_concat},
    {"gather", run_gather},   {"cp_gather", run_cp_gather},
};
const int fz_entry_count = sizeof fz_entries / sizeof fz_entries[0];
