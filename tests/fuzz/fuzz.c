/* The libFuzzer harness every target shares (fuzz.h). */
#include "fuzz.h"

#include "oracle.h"

#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);
const char *__lsan_default_suppressions(void);

/* LLVM's OpenMP runtime keeps its threads' bookkeeping to the end of the
 * process, which LeakSanitizer would report at exit. */
const char *__lsan_default_suppressions(void)
{
    return "leak:libomp.so\n";
}

/* ---- the input ------------------------------------------------------------ */

uint8_t fz_u8(fz *f)
{
    return f->at < f->size ? f->data[f->at++] : 0;
}

bool fz_bit(fz *f)
{
    return fz_u8(f) & 1;
}

int64_t fz_in(fz *f, int64_t lo, int64_t hi)
{
    uint64_t span = (uint64_t)(hi - lo) + 1, x = fz_u8(f);
    if (span > 256)
        x = x << 8 | fz_u8(f);
    return lo + (int64_t)(x % span);
}

static const int64_t edge_values[] = {
    -1, 0, 1, 3, INT32_MIN, INT32_MAX, (int64_t)INT32_MAX + 1, (int64_t)1 << 32,
    (int64_t)1 << 40, (int64_t)1 << 62, INT64_MAX, INT64_MIN, INT64_MAX / 2 + 1, INT64_MAX - 63,
    (int64_t)1 << 20, ((int64_t)1 << 20) + 1,
};
#define EDGES (int)(sizeof edge_values / sizeof edge_values[0])

/* In a hostile input, one byte per field: below `odds` (of 256) swaps it. */
static int hostile_pick(fz *f, int odds, int choices)
{
    if (!f->hostile)
        return -1;
    uint8_t b = fz_u8(f);
    return b < odds ? b % choices : -1;
}

int64_t fz_edge(fz *f, int64_t value)
{
    int k = hostile_pick(f, 12, EDGES);
    return k < 0 ? value : edge_values[k];
}

float fz_float(fz *f, float lo, float hi)
{
    static const float odd[] = {NAN, INFINITY, -INFINITY, 0.0f, -1.5f, 1e-40f, 1e30f, -0.0f};
    int k = hostile_pick(f, 10, 8);
    if (k >= 0)
        return odd[k];
    return lo + (hi - lo) * (float)fz_in(f, 0, 1000) / 1000.0f;
}

mla_dtype fz_dtype(fz *f, mla_dtype dtype)
{
    static const int odd[] = {-1, MLA_DTYPE_COUNT, 1000, INT_MIN};
    int k = hostile_pick(f, 6, 4);
    return k < 0 ? dtype : (mla_dtype)odd[k];
}

mla_dtype fz_pick_dtype(fz *f, const mla_dtype *list, int n)
{
    return fz_dtype(f, list[fz_u8(f) % n]);
}

int fz_threads(fz *f)
{
    static const int odd[] = {0, -1, 3, INT_MAX};
    int k = hostile_pick(f, 8, 4);
    return k >= 0 ? odd[k] : 1 + fz_bit(f);
}

bool fz_null(fz *f)
{
    return hostile_pick(f, 8, 1) == 0;
}

uint64_t fz_random(fz *f)
{
    f->rng ^= f->rng << 13;
    f->rng ^= f->rng >> 7;
    f->rng ^= f->rng << 17;
    return f->rng;
}

double fz_uniform(fz *f)
{
    return (double)(fz_random(f) >> 11) * 0x1p-52 - 1.0;
}

/* ---- buffers ------------------------------------------------------------- */

#define JUNK 0xa5

static fz_buf bufs[FZ_MAX_BUFS];
static int buf_count;
static size_t buf_bytes;

fz_buf *fz_alloc(const char *name, size_t bytes, size_t misalign, bool output)
{
    if (buf_count == FZ_MAX_BUFS)
        fz_fail("harness: more than %d buffers", FZ_MAX_BUFS);
    if (bytes > FZ_MAX_BYTES || buf_bytes + bytes > FZ_MAX_BYTES)
        return NULL;
    buf_bytes += bytes;
    fz_buf *b = &bufs[buf_count++];
    b->name = name;
    b->bytes = bytes;
    b->output = output;
    b->offset = FZ_GUARD + misalign % 64;
    b->total = b->offset + bytes + FZ_GUARD;
    b->base = aligned_alloc(64, (b->total + 63) / 64 * 64);
    b->snap = malloc(b->total);
    b->allowed = calloc(1, b->total);
    if (!b->base || !b->snap || !b->allowed)
        fz_fail("harness: out of memory for %zu bytes", b->total);
    memset(b->base, JUNK, b->total);
    b->p = b->base + b->offset;
    return b;
}

void fz_allow(fz_buf *b, size_t offset, size_t n)
{
    if (offset > b->bytes || n > b->bytes - offset)
        fz_fail("harness: %s: allowing [%zu, %zu) of %zu bytes", b->name, offset, offset + n,
                b->bytes);
    memset(b->allowed + b->offset + offset, 1, n);
}

void fz_allow_rows(fz_buf *b, int64_t first, int64_t rows, int64_t stride, int64_t width,
                   int64_t elem)
{
    for (int64_t r = first; r < first + rows; r++)
        fz_allow(b, (size_t)(r * stride * elem), (size_t)(width * elem));
}

/* The oracle reads and writes through typed pointers, which C wants aligned:
 * one element goes through an aligned copy. */
float fz_load(mla_dtype dtype, const void *array, int64_t i, float scale)
{
    _Alignas(8) unsigned char e[8] = {0};
    const int64_t size = mla_dtype_size(dtype);
    memcpy(e, (const char *)array + i * size, (size_t)size);
    return oracle_load(dtype, e, 0, scale);
}

void fz_store(mla_dtype dtype, void *array, int64_t i, float x, float scale)
{
    _Alignas(8) unsigned char e[8];
    const int64_t size = mla_dtype_size(dtype);
    oracle_store(dtype, e, 0, x, scale);
    memcpy((char *)array + i * size, e, (size_t)size);
}

void fz_put_random(fz *f, mla_dtype dtype, void *array, int64_t i, float scale)
{
    fz_store(dtype, array, i, (float)fz_uniform(f), scale);
}

void *fz_aligned_copy(const fz_buf *b)
{
    void *p = fz_scratch(b->bytes);
    memcpy(p, b->p, b->bytes);
    return p;
}

#define MAX_SCRATCH 64
static void *scratch[MAX_SCRATCH];
static int scratch_count;

void *fz_scratch(size_t bytes)
{
    if (scratch_count == MAX_SCRATCH)
        fz_fail("harness: more than %d scratch blocks", MAX_SCRATCH);
    void *p = aligned_alloc(64, (bytes + 64) / 64 * 64);
    if (!p)
        fz_fail("harness: out of memory for %zu bytes", bytes);
    return scratch[scratch_count++] = p;
}

#define MAX_AT_END 8
static struct {
    void (*fn)(void *);
    void *arg;
} at_end[MAX_AT_END];
static int at_end_count;

void fz_at_end(void (*fn)(void *), void *arg)
{
    if (at_end_count == MAX_AT_END)
        fz_fail("harness: more than %d cleanups", MAX_AT_END);
    at_end[at_end_count].fn = fn;
    at_end[at_end_count++].arg = arg;
}

static void free_bufs(void)
{
    while (at_end_count > 0) {
        at_end_count--;
        at_end[at_end_count].fn(at_end[at_end_count].arg);
    }
    for (int i = 0; i < scratch_count; i++)
        free(scratch[i]);
    scratch_count = 0;
    for (int i = 0; i < buf_count; i++) {
        free(bufs[i].base);
        free(bufs[i].snap);
        free(bufs[i].allowed);
    }
    memset(bufs, 0, sizeof bufs);
    buf_count = 0;
    buf_bytes = 0;
}

int64_t fz_mul(int64_t a, int64_t b)
{
    int64_t r;
    return a < 0 || b < 0 || __builtin_mul_overflow(a, b, &r) ? -1 : r;
}

int64_t fz_add(int64_t a, int64_t b)
{
    int64_t r;
    return a < 0 || b < 0 || __builtin_add_overflow(a, b, &r) ? -1 : r;
}

int64_t fz_view_elems(int64_t tokens, int64_t heads, int64_t width, int64_t ts, int64_t hs)
{
    if (tokens < 0 || heads < 0 || width < 0)
        return -1;
    if (tokens == 0 || heads == 0 || width == 0)
        return 0;
    if (ts < 0 || hs < 0)
        return -1;
    return fz_add(fz_add(fz_mul(tokens - 1, ts), fz_mul(heads - 1, hs)), width);
}

int64_t fz_bytes(int64_t n, mla_dtype dtype)
{
    return fz_mul(n, mla_dtype_size(dtype));
}

bool fz_fits(int64_t bytes)
{
    return bytes >= 0 && (size_t)bytes <= FZ_MAX_BYTES;
}

bool fz_call_workspace(fz *f, bool sized, int64_t need, fz_expect *e, fz_workspace *ws)
{
    const uint8_t ws_mode = f->hostile ? fz_u8(f) : 255;
    const int64_t given = sized ? (ws_mode < 16 && need > 0 ? need - 1 - ws_mode % 4 : need) : 64;
    ws->buf = fz_alloc("workspace", (size_t)(given > 0 ? given : 0), fz_u8(f), true);
    if (!ws->buf)
        return false;
    const bool no_ws = ws_mode >= 16 && ws_mode < 24;
    *e = fz_unless(no_ws || given < need, *e);
    fz_allow(ws->buf, 0, ws->buf->bytes);
    ws->given = given;
    ws->null = no_ws;
    return true;
}

static bool valid_dtype(mla_dtype dtype)
{
    return (unsigned)dtype < MLA_DTYPE_COUNT;
}

void fz_convert_ref(mla_dtype dst_dt, void *dst, int64_t i, mla_dtype src_dt, const void *src,
                    int64_t j, float scale)
{
    const int64_t dsize = mla_dtype_size(dst_dt);
    if (dst_dt == src_dt) {
        memcpy((char *)dst + i * dsize, (const char *)src + j * dsize, (size_t)dsize);
        return;
    }
    float x = fz_load(src_dt, src, j, scale);
    if (dst_dt == MLA_DTYPE_F32) {
        memcpy((char *)dst + 4 * i, &x, 4);
    } else if (dsize == 2) {
        uint16_t h = oracle_narrow16(dst_dt == MLA_DTYPE_BF16 ? &ORACLE_BF16 : &ORACLE_F16, x);
        memcpy((char *)dst + 2 * i, &h, 2);
    } else {
        ((uint8_t *)dst)[i] = oracle_fp8_narrow(
            dst_dt == MLA_DTYPE_FP8_E4M3 ? &ORACLE_E4M3 : &ORACLE_E5M2, x, scale);
    }
}

/* ---- views ------------------------------------------------------------------ */

void fz_view_strides(fz *f, int64_t tokens, int64_t heads, int64_t width, int64_t *ts,
                         int64_t *hs)
{
    const uint8_t layout = fz_u8(f);
    const int64_t a = layout >> 2 & 3, b = layout >> 4 & 7;
    const int64_t w = width > 0 && width < (1 << 20) ? width : 1;
    const int64_t t = tokens > 0 && tokens < (1 << 20) ? tokens : 1;
    const int64_t h = heads > 0 && heads < (1 << 20) ? heads : 1;
    switch (layout & 3) {
    case 0: /* dense */
        *hs = w, *ts = h * w;
        break;
    case 1: /* padded */
        *hs = w + a, *ts = h * (w + a) + b;
        break;
    default: /* heads outer */
        *ts = w + a, *hs = t * (w + a) + b;
        break;
    }
    *ts = fz_edge(f, *ts);
    *hs = fz_edge(f, *hs);
}

fz_expect fz_rows_verdict(int64_t tokens, int64_t heads, int64_t width, int64_t ts, int64_t hs)
{
    if (tokens <= 0 || heads <= 0 || width <= 0)
        return FZ_OK;
    if (fz_view_elems(tokens, heads, width, ts, hs) < 0)
        return FZ_REJECT; /* a negative stride, or past int64_t: refused anyway */
    if (tokens * heads > 4096)
        return FZ_EITHER;
    bool nested = (heads == 1 || hs >= width) &&
                  (tokens == 1 || ts >= fz_add(fz_mul(heads - 1, hs), width));
    nested = nested || ((tokens == 1 || ts >= width) &&
                        (heads == 1 || hs >= fz_add(fz_mul(tokens - 1, ts), width)));
    if (nested)
        return FZ_OK;
    for (int64_t i = 0; i < tokens * heads; i++)
        for (int64_t j = i + 1; j < tokens * heads; j++) {
            const int64_t a = i / heads * ts + i % heads * hs, b = j / heads * ts + j % heads * hs;
            if (fz_note(a < b + width && b < a + width, "output rows overlap"))
                return FZ_REJECT;
        }
    return FZ_EITHER;
}

void fz_allow_view(fz_buf *b, int64_t tokens, int64_t heads, int64_t width, int64_t ts,
                       int64_t hs, int64_t elem)
{
    for (int64_t t = 0; t < tokens; t++)
        for (int64_t h = 0; h < heads; h++)
            fz_allow(b, (size_t)((t * ts + h * hs) * elem), (size_t)(width * elem));
}

/* ---- a paged cache -------------------------------------------------------- */

int64_t fz_pad(int64_t x, int64_t pad)
{
    return x < 0 || x > INT64_MAX - pad ? x : x + pad;
}

void fz_cache_shape(fz *f, fz_cache *k, const mla_dtype *dtypes, int n, int64_t width,
                    int64_t max_blocks, int64_t max_bs)
{
    memset(k, 0, sizeof *k);
    mla_kv_cache *c = &k->c;
    c->dtype = fz_pick_dtype(f, dtypes, n);
    c->num_blocks = fz_edge(f, fz_in(f, 0, max_blocks));
    c->block_size = fz_edge(f, fz_in(f, 1, max_bs));
    c->width = fz_edge(f, width);
    const uint8_t layout = fz_u8(f);
    if (layout & 1)
        c->entry_stride = fz_edge(f, fz_pad(c->width, layout >> 1 & 3));
    const int64_t entry = c->entry_stride ? c->entry_stride : c->width;
    if (layout & 8) {
        int64_t dense = fz_mul(c->block_size, entry);
        c->block_stride = fz_edge(f, dense < 0 ? 1 : fz_pad(dense, layout >> 4 & 7));
    }
    c->scale = fz_float(f, 0.05f, 4.0f);

    /* the model: mla.h's rules for mla_kv_cache */
    k->entry = entry;
    k->ok = !fz_note(!valid_dtype(c->dtype) || c->num_blocks < 0 || c->block_size < 1 ||
                         c->width < 1 || entry < c->width,
                     "cache shape");
    k->block = c->block_stride ? c->block_stride : k->ok ? fz_mul(c->block_size, entry) : -1;
    const int64_t span = k->ok ? fz_add(fz_mul(c->block_size - 1, entry), c->width) : -1;
    k->ok = k->ok && !fz_note((c->block_stride == 0 && k->block < 0) || span < 0,
                              "cache block overflows") &&
            !fz_note(c->num_blocks > 1 && k->block < span, "cache blocks overlap") &&
            !fz_note((c->dtype == MLA_DTYPE_FP8_E4M3 || c->dtype == MLA_DTYPE_FP8_E5M2) &&
                         !(c->scale > 0.0f && c->scale <= FLT_MAX),
                     "cache fp8 scale");
    fz_debug("cache: %s, %lld blocks of %lld, width %lld, strides %lld %lld, scale %g",
             mla_dtype_name(c->dtype), (long long)c->num_blocks, (long long)c->block_size,
             (long long)c->width, (long long)c->block_stride, (long long)c->entry_stride,
             (double)c->scale);
    if (k->ok && c->num_blocks > 0) /* the whole span in bytes must fit int64_t */
        k->ok = !fz_note(fz_bytes(c->num_blocks > 1 ? fz_add(fz_mul(c->num_blocks - 1, k->block),
                                                               span)
                                                       : span,
                                  c->dtype) < 0,
                         "cache span overflows");
}

void fz_debug(const char *fmt, ...)
{
    static int on = -1;
    if (on < 0)
        on = getenv("FUZZ_DEBUG") != NULL;
    if (!on)
        return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

int64_t fz_cache_row(const fz_cache *k, int64_t blk, int64_t off)
{
    return fz_add(blk ? fz_mul(blk, k->block) : 0, fz_mul(off, k->entry));
}

bool fz_cache_alloc(fz *f, fz_cache *k, int64_t touched, bool output)
{
    const mla_kv_cache *c = &k->c;
    int64_t elems = touched > 0 ? touched : 0;
    if (k->ok && c->num_blocks > 0) {
        const int64_t span = fz_add(fz_mul(c->block_size - 1, k->entry), c->width);
        const int64_t all = c->num_blocks > 1 ? fz_add(fz_mul(c->num_blocks - 1, k->block), span)
                                              : span;
        if (fz_fits(fz_bytes(all, c->dtype)))
            elems = all;
    }
    const int64_t size = valid_dtype(c->dtype) ? mla_dtype_size(c->dtype) : 1;
    if (!fz_fits(fz_mul(elems, size)))
        return false;
    k->buf = fz_alloc("cache", (size_t)(elems * size), fz_bit(f) ? fz_u8(f) : 0, output);
    if (!k->buf)
        return false;
    if (valid_dtype(c->dtype))
        for (int64_t i = 0; i < elems; i++)
            fz_put_random(f, c->dtype, k->buf->p, i, c->scale);
    if (fz_note(fz_null(f), "cache data NULL"))
        k->ok = false;
    else
        k->c.data = k->buf->p;
    return true;
}

/* ---- expectations and calls ---------------------------------------------- */

fz_expect fz_and(fz_expect a, fz_expect b)
{
    if (a == FZ_REJECT || b == FZ_REJECT)
        return FZ_REJECT;
    return a == FZ_EITHER || b == FZ_EITHER ? FZ_EITHER : FZ_OK;
}

fz_expect fz_unless_at(bool bad, fz_expect e)
{
    return bad ? FZ_REJECT : e;
}

static char notes[1024];

bool fz_note(bool bad, const char *why)
{
    size_t len = strlen(notes);
    if (bad && len < sizeof notes - 1)
        snprintf(notes + len, sizeof notes - len, "%s[%s]", len ? " " : "", why);
    return bad;
}

#define MAX_LISTED 16
static const char *runnable[MLA_OP_COUNT][MAX_LISTED];
static int runnable_count[MLA_OP_COUNT];

/* Forces op onto the backend; fails the run if that fails. */
static const char *force(mla_op op, const char *name)
{
    mla_status st = mla_force_backend(op, name);
    if (st != MLA_OK)
        fz_fail("mla_force_backend(%s, %s): %s: %s", mla_op_name(op), name, mla_status_str(st),
                mla_last_error());
    return name;
}

const char *fz_backend_for(fz *f, mla_op op, const mla_config *cfg)
{
    return fz_backend_for_all(f, op, &cfg, cfg ? 1 : 0);
}

const char *fz_backend_for_all(fz *f, mla_op op, const mla_config *const *cfgs, int count)
{
    const char *takers[MAX_LISTED];
    int n = 0;
    for (int i = 0; i < runnable_count[op]; i++) {
        bool takes = true;
        for (int k = 0; k < count && !f->hostile; k++)
            takes = takes && fz_backend_takes(runnable[op][i], op, cfgs[k]);
        if (takes)
            takers[n++] = runnable[op][i];
    }
    if (n == 0) /* a config none takes: any backend, to see it refused */
        return fz_backend(f, op);
    return force(op, takers[fz_u8(f) % n]);
}

const char *fz_backend(fz *f, mla_op op)
{
    return force(op, runnable[op][fz_u8(f) % runnable_count[op]]);
}

bool fz_backend_takes(const char *name, mla_op op, const mla_config *cfg)
{
    mla_reasons why;
    mla_status st = mla_backend_validate(name, op, cfg, &why);
    if (st != MLA_OK)
        fz_fail("mla_backend_validate(%s): %s", name, mla_status_str(st));
    return why.count == 0;
}

static const char sentinel[] = "mla_exp_f32: n = -123456789 < 0";

void fz_before(void)
{
    for (int i = 0; i < buf_count; i++)
        memcpy(bufs[i].snap, bufs[i].base, bufs[i].total);
    if (mla_exp_f32(NULL, NULL, -123456789, 1) == MLA_OK || strcmp(mla_last_error(), sentinel))
        fz_fail("harness: the sentinel message is \"%s\"", mla_last_error());
}

static int last_outcome; /* for the seed maker: 1 accepted, 2 rejected */

bool fz_after(const char *fn, mla_status st, fz_expect expect, const char *backend)
{
    const bool ok = st == MLA_OK;
    if (ok && expect == FZ_REJECT)
        fz_fail("%s accepted an input the documented rules reject", fn);
    if (!ok && expect == FZ_OK)
        fz_fail("%s rejected a valid input: %s: %s", fn, mla_status_str(st), mla_last_error());
    if (!ok && (!mla_last_error()[0] || !strcmp(mla_last_error(), sentinel)))
        fz_fail("%s failed with %s and no message of its own (\"%s\")", fn, mla_status_str(st),
                mla_last_error());
    for (int i = 0; i < buf_count; i++) {
        const fz_buf *b = &bufs[i];
        for (size_t k = 0; k < b->total; k++) {
            if (b->base[k] == b->snap[k] || (ok && b->output && b->allowed[k]))
                continue;
            long at = (long)k - (long)b->offset;
            fz_fail("%s (%s, %s) changed %s byte %ld of %zu (0x%02x -> 0x%02x)%s", fn,
                    mla_status_str(st), ok ? "succeeded" : mla_last_error(), b->name, at,
                    b->bytes, b->snap[k], b->base[k],
                    at < 0 || (size_t)at >= b->bytes ? ": a guard byte" : "");
        }
    }
    if (ok && backend && strcmp(mla_last_backend(), backend) != 0)
        fz_fail("%s: forced backend %s, but %s ran", fn, backend, mla_last_backend());
    last_outcome = ok ? 1 : 2;
    return ok;
}

void fz_fail(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("FUZZ FAIL: ", stderr);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n(the model's reasons to reject: %s)\n", notes[0] ? notes : "none");
    va_end(ap);
    abort();
}

bool fz_close(double want, double got, double tol)
{
    if (isnan(want))
        return isnan(got);
    if (isinf(want))
        return got == want;
    return fabs(got - want) <= tol;
}

double fz_unit(mla_dtype dtype)
{
    return dtype == MLA_DTYPE_BF16 ? 0x1p-8 : dtype == MLA_DTYPE_F16 ? 0x1p-11 : 0x1p-24;
}

double fz_subnormal_error(mla_dtype dtype)
{
    return dtype == MLA_DTYPE_BF16 ? 0x1p-134 : dtype == MLA_DTYPE_F16 ? 0x1p-25 : 0x1p-150;
}

/* ---- libFuzzer entry points and the seed maker ----------------------------- */

/* Per entry point: inputs that made no call, calls accepted, rejected
 * (FUZZ_STATS=1 prints them at exit). */
#define MAX_ENTRIES 16
static long outcomes[MAX_ENTRIES][3];

static void print_stats(void)
{
    for (int e = 0; e < fz_entry_count && e < MAX_ENTRIES; e++)
        fprintf(stderr, "%-16s no call %8ld  accepted %8ld  rejected %8ld\n", fz_entries[e].name,
                outcomes[e][0], outcomes[e][1], outcomes[e][2]);
}

static void run_input(const uint8_t *data, size_t size)
{
    fz f = {.data = data, .size = size};
    const int entry = fz_u8(&f) % fz_entry_count;
    f.hostile = fz_u8(&f) & 1;
    for (int i = 0; i < 8; i++)
        f.rng = f.rng << 8 | fz_u8(&f);
    f.rng = f.rng ? f.rng : 0x9e3779b97f4a7c15ull;
    for (int op = 0; op < MLA_OP_COUNT; op++)
        mla_force_backend((mla_op)op, NULL);
    last_outcome = 0;
    notes[0] = '\0';
    fz_entries[entry].run(&f);
    if (entry < MAX_ENTRIES)
        outcomes[entry][last_outcome]++;
    free_bufs();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    run_input(data, size);
    return 0;
}

/* Per entry point and mode, inputs from a fixed stream of random bytes: up
 * to two the call accepted and two it rejected, written as
 * <entry>-<accepted|rejected>-<n>. */
static void make_seeds(const char *dir)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        fz_fail("make seeds: cannot create %s", dir);
    uint64_t s = 0x243f6a8885a308d3ull;
    for (int e = 0; e < fz_entry_count; e++) {
        int kept[3] = {0, 0, 0};
        for (int attempt = 0; attempt < 400 && (kept[1] < 2 || kept[2] < 2); attempt++) {
            uint8_t in[160];
            const size_t size = 48 + attempt % 96;
            for (size_t i = 0; i < size; i++) {
                s ^= s << 13, s ^= s >> 7, s ^= s << 17;
                in[i] = (uint8_t)s;
            }
            in[0] = (uint8_t)e;
            in[1] = (uint8_t)(attempt & 1); /* clean and hostile in turn */
            run_input(in, size);
            if (last_outcome == 0 || kept[last_outcome] == 2)
                continue;
            char path[512];
            snprintf(path, sizeof path, "%s/%s-%s-%d", dir, fz_entries[e].name,
                     last_outcome == 1 ? "accepted" : "rejected", kept[last_outcome]++);
            FILE *out = fopen(path, "wb");
            if (!out || fwrite(in, 1, size, out) != size || fclose(out) != 0)
                fz_fail("make seeds: cannot write %s", path);
        }
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    /* libomp's workers would spin 200 ms after each region, on a machine
     * the fuzzer shares */
    setenv("KMP_BLOCKTIME", "0", 0);
    mla_status st = mla_init();
    if (st != MLA_OK)
        fz_fail("mla_init: %s: %s", mla_status_str(st), mla_last_error());
    for (int op = 0; op < MLA_OP_COUNT; op++) {
        for (int i = 0; i < mla_backend_count() && runnable_count[op] < MAX_LISTED; i++) {
            const char *name = mla_backend_at(i)->name;
            if (fz_backend_takes(name, (mla_op)op, NULL))
                runnable[op][runnable_count[op]++] = name;
        }
        if (runnable_count[op] == 0)
            fz_fail("no backend runs %s here", mla_op_name((mla_op)op));
    }
    if (getenv("FUZZ_STATS"))
        atexit(print_stats);
    const char *dir = getenv("FUZZ_MAKE_SEEDS");
    if (dir) {
        make_seeds(dir);
        exit(0);
    }
    return 0;
}
