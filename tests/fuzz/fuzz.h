/*
 * What the libFuzzer targets of tests/fuzz/ share: an input decoded into
 * small shapes and, in hostile inputs, values a server should never pass;
 * caller buffers inside guard bytes with a snapshot of every byte; the
 * backend each op is forced onto; and the checks every call gets.
 *
 * An input is: byte 0 picks the entry point (fz_entry), byte 1 the mode
 * (bit 0: hostile), bytes 2..9 seed the values that fill buffers; the rest
 * is read field by field as the entry point decodes its arguments (reads
 * past the end give 0, so any prefix is a valid input). A clean input
 * decodes only valid arguments, and the call must succeed; a hostile one
 * may swap any field for a value from a table of edge cases (negative,
 * zero, INT32_MAX + 1, INT64_MAX, ...), NULL a pointer or shrink a buffer,
 * and each target's model of the documented rules says whether the call
 * must fail (FZ_REJECT), must succeed (FZ_OK) or may do either (FZ_EITHER).
 *
 * Every call, whatever its status, must leave its inputs byte-identical and
 * every guard byte as it was. A failed call must come with a message
 * (mla_last_error(), cleared to a sentinel before the call) and leave
 * every buffer, outputs and workspace included, byte-identical. A call
 * that succeeds may write only the elements its outputs name, and its
 * results must match a reference computed independently (the
 * double-precision oracles of tests/oracle.c, or plain loops here); the
 * forced backend must be the one that ran. Any breach prints what and
 * where, then abort()s, which libFuzzer reports as a crash.
 *
 * FUZZ_MAKE_SEEDS=dir writes a seed corpus for the target into dir and
 * exits (make fuzz-seeds): per entry point, inputs from a fixed stream that
 * the call accepted and ones it rejected.
 */
#ifndef MLA_FUZZ_H
#define MLA_FUZZ_H

#include <mla.h>
#include <mla_backend.h>

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What the documented rules say of a call. */
typedef enum fz_expect { FZ_OK, FZ_REJECT, FZ_EITHER } fz_expect;

/* ---- the input ------------------------------------------------------------ */

typedef struct fz {
    const uint8_t *data;
    size_t size, at;
    bool hostile;
    uint64_t rng; /* the value stream, seeded by bytes 2..9 */
} fz;

uint8_t fz_u8(fz *f);
bool fz_bit(fz *f);
/* lo .. hi (hi - lo < 2^16), from one or two bytes. */
int64_t fz_in(fz *f, int64_t lo, int64_t hi);
/* value, or in a hostile input now and then an edge case from the table:
 * the field's validity is then the model's to judge. */
int64_t fz_edge(fz *f, int64_t value);
/* A finite float in [lo, hi], or in a hostile input now and then NaN, an
 * infinity, 0, a negative, a denormal or 1e30. */
float fz_float(fz *f, float lo, float hi);
/* dtype, or in a hostile input now and then a value that is no mla_dtype. */
mla_dtype fz_dtype(fz *f, mla_dtype dtype);
/* One of the n dtypes in list. */
mla_dtype fz_pick_dtype(fz *f, const mla_dtype *list, int n);
/* 1 or 2, or in a hostile input now and then 0, -1, 3 or INT_MAX. */
int fz_threads(fz *f);
/* In a hostile input, now and then true: the caller NULLs a pointer. */
bool fz_null(fz *f);

/* Uniform in [-1, 1), from the value stream. */
double fz_uniform(fz *f);
uint64_t fz_random(fz *f);

/* ---- buffers ------------------------------------------------------------- */

/* A caller buffer: `bytes` at p, which lies `misalign` bytes past a 64-byte
 * boundary inside guard bytes. Inputs must not change; an output may
 * change, after a successful call, only where fz_allow marked it. */
typedef struct fz_buf {
    unsigned char *p;
    size_t bytes;
    bool output;
    const char *name;
    unsigned char *base, *snap, *allowed; /* the block with its guards */
    size_t total, offset;
} fz_buf;

#define FZ_GUARD 64
#define FZ_MAX_BUFS 48
/* Larger buffers are not allocated: an input that would need one is
 * skipped (fz_too_big). */
#define FZ_MAX_BYTES ((size_t)1 << 24)

/* A new buffer of `bytes` (0 is fine: p then points at the guards),
 * filled with a junk pattern, misaligned by `misalign` bytes (0 .. 63).
 * Freed by fz_end. NULL when the input's buffers would pass FZ_MAX_BYTES. */
fz_buf *fz_alloc(const char *name, size_t bytes, size_t misalign, bool output);
/* Output bytes [offset, offset + n) may be written by a successful call. */
void fz_allow(fz_buf *b, size_t offset, size_t n);
/* Rows first .. first + rows - 1 of `width` elements of `elem` bytes,
 * `stride` elements apart, may be written. */
void fz_allow_rows(fz_buf *b, int64_t first, int64_t rows, int64_t stride, int64_t width,
                   int64_t elem);
/* oracle_load and oracle_store (tests/oracle.h) at any byte address, and a
 * random value in [-1, 1) stored as dtype (fp8 divided by scale first). */
float fz_load(mla_dtype dtype, const void *array, int64_t i, float scale);
void fz_store(mla_dtype dtype, void *array, int64_t i, float x, float scale);
void fz_put_random(fz *f, mla_dtype dtype, void *array, int64_t i, float scale);
/* 64-byte aligned scratch memory for the input (freed by the harness after
 * it), and an aligned copy of a buffer's bytes in it: what the oracles,
 * which read through typed pointers, are given. */
void *fz_scratch(size_t bytes);
void *fz_aligned_copy(const fz_buf *b);

/* Runs fn(arg) once the input is done (what a call allocated). */
void fz_at_end(void (*fn)(void *), void *arg);

/* Strides of a [tokens, heads, width] view: dense, padded or heads outer
 * (each head's rows together), each swapped for an edge value now and then
 * in a hostile input. */
void fz_view_strides(fz *f, int64_t tokens, int64_t heads, int64_t width, int64_t *ts,
                     int64_t *hs);
/* The documented rule for an output view: no two rows overlap (FZ_REJECT
 * when two do). Rows that interleave without overlapping, neither nested
 * in tokens nor in heads, may be rejected too (FZ_EITHER). */
fz_expect fz_rows_verdict(int64_t tokens, int64_t heads, int64_t width, int64_t ts, int64_t hs);
/* Allows the rows of a [tokens, heads, width] view at byte 0 of b. */
void fz_allow_view(fz_buf *b, int64_t tokens, int64_t heads, int64_t width, int64_t ts,
                   int64_t hs, int64_t elem);

/* Elements a [tokens, heads, width] view spans with strides ts, hs: 0 when
 * empty; -1 when it does not fit int64_t (or a stride is negative). */
int64_t fz_view_elems(int64_t tokens, int64_t heads, int64_t width, int64_t ts, int64_t hs);
/* a * b, a + b for sizes; -1 when either is -1 or the result overflows. */
int64_t fz_mul(int64_t a, int64_t b);
int64_t fz_add(int64_t a, int64_t b);
/* x + pad, or x when x < 0 or the sum would overflow: padding for a value
 * that may be an edge case. */
int64_t fz_pad(int64_t x, int64_t pad);
/* Bytes of n elements of dtype, -1 on overflow; whether bytes fit a buffer. */
int64_t fz_bytes(int64_t n, mla_dtype dtype);
bool fz_fits(int64_t bytes);

/* The workspace an entry point gets once its size query ran: `need` bytes
 * when it was sized, else 64; a hostile input may give it 1 to 4 bytes
 * less, or NULL (`null`). *e becomes FZ_REJECT where the call must refuse
 * what it is given; the whole buffer may be written. False when the buffer
 * cannot be allocated (the caller skips the input). */
typedef struct fz_workspace {
    fz_buf *buf;
    int64_t given; /* the size the call is told */
    bool null;     /* the call gets NULL */
} fz_workspace;
bool fz_call_workspace(fz *f, bool sized, int64_t need, fz_expect *e, fz_workspace *ws);

/* Element j of src (src_dt) converted to dst_dt as libMLA converts, into
 * element i of dst: a bit copy between equal dtypes, else widened to f32
 * and narrowed (fp8 with scale), rounding to nearest even (tests/oracle.c). */
void fz_convert_ref(mla_dtype dst_dt, void *dst, int64_t i, mla_dtype src_dt, const void *src,
                    int64_t j, float scale);

/* ---- a paged cache -------------------------------------------------------- */

/* A cache as the input describes it, the model's verdict on it (the rules
 * of mla_kv_cache in mla.h) and, once allocated, its buffer. */
typedef struct fz_cache {
    mla_kv_cache c;
    int64_t entry, block; /* strides resolved (valid only when ok) */
    bool ok;
    fz_buf *buf;
} fz_cache;

/* Decodes a cache of `width` (swapped for an edge value now and then in a
 * hostile input) and a dtype from the list: num_blocks 0 .. max_blocks,
 * block_size 1 .. max_bs, dense or padded strides, an fp8 scale. */
void fz_cache_shape(fz *f, fz_cache *k, const mla_dtype *dtypes, int n, int64_t width,
                    int64_t max_blocks, int64_t max_bs);
/* Element offset of row (blk, off) of a cache the model accepted; -1 when
 * it does not fit int64_t. */
int64_t fz_cache_row(const fz_cache *k, int64_t blk, int64_t off);
/* Allocates the cache's data: its whole span when that fits, else
 * `touched` elements (what the call may legitimately touch); fills it with
 * random values (fp8: scaled); a hostile input may NULL it. False when the
 * buffer would be too large. */
bool fz_cache_alloc(fz *f, fz_cache *k, int64_t touched, bool output);

/* ---- expectations and calls ---------------------------------------------- */

/* Combines two verdicts: a rejection wins, then an either. */
fz_expect fz_and(fz_expect a, fz_expect b);
/* FZ_REJECT if bad, else e; a rejection names its condition in the report
 * of a call that succeeded all the same. */
#define fz_unless(bad, e) fz_unless_at(fz_note((bad), #bad), (e))
fz_expect fz_unless_at(bool bad, fz_expect e);
/* Returns bad; when true, remembers `why` for the report. */
bool fz_note(bool bad, const char *why);

/* Forces `op` onto a backend the input picks among those this CPU runs;
 * returns its name. */
const char *fz_backend(fz *f, mla_op op);
/* The same among those that accept cfg, in a clean input (any in a hostile
 * one, or when none does). */
const char *fz_backend_for(fz *f, mla_op op, const mla_config *cfg);
/* The same for every one of count configs. */
const char *fz_backend_for_all(fz *f, mla_op op, const mla_config *const *cfgs, int count);
/* Whether that backend accepts cfg for op (mla_backend_validate). */
bool fz_backend_takes(const char *name, mla_op op, const mla_config *cfg);

/* Before a call: snapshots every buffer, sets the sentinel message. */
void fz_before(void);
/* After a call: the status against the expectation, the message, the
 * inputs, the guards and, when it failed, every buffer; when it succeeded
 * with `backend` (NULL: none to check) forced, that backend ran. Returns
 * whether the call succeeded. */
bool fz_after(const char *fn, mla_status st, fz_expect expect, const char *backend);

/* Prints to stderr when FUZZ_DEBUG is set (reproducing one input). */
void fz_debug(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* Prints FUZZ FAIL and the message, then aborts. */
void fz_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

/* Whether got is want within tol: NaN for NaN, the same infinity for an
 * infinity, else |got - want| <= tol (a NaN got fails). */
bool fz_close(double want, double got, double tol);

/* Unit roundoff of an activation dtype's storage: 2^-8 bf16, 2^-11 f16,
 * 2^-24 f32. */
double fz_unit(mla_dtype dtype);
/* The largest error of rounding a value to the dtype's subnormal range (half
 * its smallest step), which the relative fz_unit does not cover. */
double fz_subnormal_error(mla_dtype dtype);

/* ---- the target ---------------------------------------------------------- */

typedef struct fz_entry {
    const char *name;
    void (*run)(fz *f);
} fz_entry;

/* Defined by each target. */
extern const fz_entry fz_entries[];
extern const int fz_entry_count;

#endif
