/*
 * Initialization, the backend registry, validation and selection.
 *
 * Init runs once (double-checked under a mutex, so tests can reset it): read
 * MLA_MAX_ISA, read the CPU, asking Linux for AMX tile state if a built-in
 * backend needing it could run (or, later, the first such registered one),
 * mask the caps by MLA_MAX_ISA, load the built-in backends, apply
 * MLA_<OP>_BACKEND. Selection per call: the forced backend if it is valid for
 * the config, else the first valid backend in priority order.
 *
 * Registration may run while ops run on other threads. What selection reads
 * (the backends in priority order and the caps) is a view that is never
 * changed once published: a registration builds the next view beside it,
 * from entries that are never moved, changed or reused, and publishes it
 * with one release store. A reader loads the view once (acquire) and sees
 * complete entries or the previous view, and an op keeps the kernels it
 * selected to its end, however many registrations follow.
 */
#include "dispatch.h"

#include "core/dtype.h"
#include "core/error.h"
#include "core/trace.h"
#include "kernels/common/attention_route.h"
#include "kernels/common/flash_attn.h"
#include "kernels/kernels.h"

#include <omp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_BACKENDS 32      /* listed at once */
#define MAX_REGISTRATIONS 64 /* per process, overrides included: entries are never reused */
#define NAME_LEN 32
#define MESSAGE_LEN 1024
#define AMX_CAPS (MLA_CAP_AMX_TILE | MLA_CAP_AMX_BF16 | MLA_CAP_AMX_FP16)

typedef struct registry_entry {
    mla_backend_desc desc; /* desc.name / desc.isa point into the arrays below */
    char name[NAME_LEN];
    char isa[NAME_LEN];
    /* per op and half-precision route (mla_attn_half_routes): its time
     * against the backend's f32 route on this CPU, decode's on its scores
     * GEMM, prefill's on a flash-attention call (which the up-projection's
     * packed GEMM follows too); 0 when not timed (the table lacks its
     * kernel, or this CPU cannot run the backend). Auto-selection passes
     * over a backend for a config that would take a route timed slower
     * (< 1) for that op; forcing it still works. */
    double route_speedup[MLA_OP_COUNT][MLA_ATTN_HALF_ROUTES];
} registry_entry;

/* What selection reads, published whole (see the top of the file). */
typedef struct registry_view {
    mla_caps detected, caps;
    mla_caps real;        /* the CPU's own, even under a fake reader: what may execute */
    mla_caps amx_refused; /* AMX caps the CPU has but Linux refused tile state for */
    int count;
    const registry_entry *entry[MAX_BACKENDS]; /* priority order */
} registry_view;

static const char *const op_env[MLA_OP_COUNT] = {
    [MLA_OP_CONVERT] = "MLA_CONVERT_BACKEND",
    [MLA_OP_DECODE] = "MLA_DECODE_BACKEND",
    [MLA_OP_PREFILL] = "MLA_PREFILL_BACKEND",
};

/* Everything init sets up; a reset zeroes it. */
typedef struct dispatch_state {
    bool log;
    char max_isa[NAME_LEN]; /* MLA_MAX_ISA as given, "" if unset */
    mla_caps keep;          /* what MLA_MAX_ISA keeps; every bit if unset */
    /* the reader's readings, with the AMX permission as init left it, and who
     * answers a request for it: Linux, or the test seam under a fake reader */
    mla_cpu_raw raw;
    mla_amx_request_fn *request_amx;
    bool amx_asked;
    /* a malformed environment fails every op with this */
    mla_status env_status;
    char env_error[MESSAGE_LEN];
    /* per op: the forced backend ("" = auto), or why forcing it failed */
    char forced[MLA_OP_COUNT][NAME_LEN];
    mla_status op_status[MLA_OP_COUNT];
    char op_error[MLA_OP_COUNT][MESSAGE_LEN];
    /* written under the lock, each once; the views up to the published one
     * are read without it */
    registry_entry entries[MAX_BACKENDS + MAX_REGISTRATIONS];
    int entries_used;
    registry_view views[1 + MAX_REGISTRATIONS];
    int views_used;
} dispatch_state;

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_bool ready;
static _Atomic(const registry_view *) published;
static mla_cpu_reader cpu_reader;
static mla_amx_request_fn *amx_request;
static dispatch_state g;

static _Thread_local char last_backend[NAME_LEN];
static _Thread_local const char *last_route; /* a string literal of the kernels */

static void log_line(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void log_line(const char *fmt, ...)
{
    if (!g.log)
        return;
    va_list ap;
    va_start(ap, fmt);
    fputs("[mla] ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* ---- registry ------------------------------------------------------------ */

/* The registry as of now; init has published one. */
static const registry_view *current_view(void)
{
    return atomic_load_explicit(&published, memory_order_acquire);
}

static int find_index(const registry_view *v, const char *name)
{
    for (int i = 0; i < v->count; i++)
        if (strcmp(v->entry[i]->name, name) == 0)
            return i;
    return -1;
}

/* ---- the kernel list ------------------------------------------------------ */

#define SLOT_INFO(slot, type, is_route) {#slot, offsetof(mla_kernels, slot), is_route},
#define BASE_SLOT(slot, type, unused) SLOT_INFO(slot, type, false)
#define ROUTE_SLOT(slot, type, unused) SLOT_INFO(slot, type, true)
static const mla_kernel_slot kernel_slots[] = {MLA_KERNEL_SLOTS(BASE_SLOT, ROUTE_SLOT, )};

const mla_kernel_slot *mla_kernel_slots(int *count)
{
    *count = (int)(sizeof kernel_slots / sizeof kernel_slots[0]);
    return kernel_slots;
}

/* The descriptor of API version 1 ends with its last kernel slot; a caller
 * compiled against it passes this size, and slots appended since read as
 * NULL. */
#define DESC_V1_SIZE (offsetof(mla_backend_desc, kernels) + offsetof(mla_kernels, gemm_f16f16) + \
                      sizeof(void *))

/* Copies the desc->size bytes the caller has into the entry (the rest zero),
 * points its strings at the entry's own copies and fills missing base
 * kernels from ref. */
static void fill_entry(registry_entry *e, const mla_backend_desc *desc, const registry_view *v)
{
    static const mla_kernels ref = MLA_KERNEL_TABLE(ref);
    memset(&e->desc, 0, sizeof e->desc);
    memcpy(&e->desc, desc, desc->size);
    e->desc.size = sizeof e->desc;
    snprintf(e->name, sizeof e->name, "%s", desc->name);
    snprintf(e->isa, sizeof e->isa, "%s", desc->isa ? desc->isa : "custom");
    e->desc.name = e->name;
    e->desc.isa = e->isa;
    for (size_t i = 0; i < sizeof kernel_slots / sizeof kernel_slots[0]; i++) {
        void **kernel = (void **)((char *)&e->desc.kernels + kernel_slots[i].offset);
        if (!*kernel && !kernel_slots[i].route)
            *kernel = mla_kernel_get(&ref, &kernel_slots[i]);
    }
    int routes;
    const mla_attn_route *half = mla_attn_half_routes(&routes);
    bool runs_here = (desc->required_caps & ~(v->detected & v->real)) == 0;
    memset(e->route_speedup, 0, sizeof e->route_speedup);
    for (int i = 0; i < routes; i++) {
        if (!runs_here || !mla_attn_route_available(&e->desc.kernels, &half[i]))
            continue; /* 0: untimed */
        e->route_speedup[MLA_OP_DECODE][i] = mla_attn_route_speedup(&e->desc.kernels, &half[i]);
        e->route_speedup[MLA_OP_PREFILL][i] =
            mla_flash_attn_route_speedup(&e->desc.kernels, &half[i]);
    }
}

/* The attention route a table takes for cfg (a dense cache: its row
 * stride is its width). */
static const mla_attn_route *config_route(const mla_kernels *k, const mla_config *cfg)
{
    int64_t width = cfg->kv_lora_rank + cfg->rope_dim;
    return mla_attn_route_for(k, cfg->q_dtype, cfg->cache_dtype, width, width,
                              cfg->bf16_compute);
}

/* The speedup timed for `route` in the entry; 0 for the f32 route or an
 * untimed one. */
static double route_speedup(const registry_entry *e, mla_op op, const mla_attn_route *route)
{
    int routes;
    const mla_attn_route *half = mla_attn_half_routes(&routes);
    for (int i = 0; i < routes; i++)
        if (route == &half[i])
            return e->route_speedup[op][i];
    return 0.0;
}

/* The next view, unpublished: a copy of the current one (empty before
 * init's). The caller checked that one is left. */
static registry_view *next_view(void)
{
    registry_view *v = &g.views[g.views_used++];
    const registry_view *now = current_view();
    if (now)
        *v = *now;
    return v;
}

static void publish(const registry_view *v)
{
    atomic_store_explicit(&published, v, memory_order_release);
}

/* Fills a fresh entry and lists it in the unpublished view v after every
 * entry of equal or higher priority (stable order). The caller checked that
 * v has room and an entry is left. */
static void insert_entry(registry_view *v, const mla_backend_desc *desc)
{
    registry_entry *e = &g.entries[g.entries_used++];
    fill_entry(e, desc, v);
    int at = 0;
    while (at < v->count && v->entry[at]->desc.priority >= desc->priority)
        at++;
    memmove(&v->entry[at + 1], &v->entry[at], (size_t)(v->count - at) * sizeof v->entry[0]);
    v->entry[at] = e;
    v->count++;
}

/* Unlists an entry from the unpublished view v; the entry itself stays, for
 * the ops that still use it. */
static void remove_entry(registry_view *v, int index)
{
    memmove(&v->entry[index], &v->entry[index + 1],
            (size_t)(v->count - index - 1) * sizeof v->entry[0]);
    v->count--;
}

/* "avx512_bf16, avx512, avx2, ref" */
static void format_names(const registry_view *v, char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < v->count && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s%s", i ? ", " : "", v->entry[i]->name);
}

/* ---- validation ---------------------------------------------------------- */

static void add_reason(mla_reasons *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void add_reason(mla_reasons *r, const char *fmt, ...)
{
    if (r->count >= MLA_MAX_REASONS)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->text[r->count++], MLA_REASON_LEN, fmt, ap);
    va_end(ap);
}

static mla_status check_config(const mla_config *cfg)
{
    if ((unsigned)cfg->q_dtype >= MLA_DTYPE_COUNT || (unsigned)cfg->cache_dtype >= MLA_DTYPE_COUNT)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "config dtype out of range (q %d, cache %d)",
                        (int)cfg->q_dtype, (int)cfg->cache_dtype);
    if (cfg->kv_lora_rank < 1 || cfg->rope_dim < 0 || cfg->num_heads < 1 || cfg->block_size < 1)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT,
                        "config needs kv_lora_rank >= 1, rope_dim >= 0, num_heads >= 1, block_size >= 1 "
                        "(got %lld, %lld, %lld, %lld)",
                        (long long)cfg->kv_lora_rank, (long long)cfg->rope_dim,
                        (long long)cfg->num_heads, (long long)cfg->block_size);
    if (cfg->kv_lora_rank > INT64_MAX - cfg->rope_dim)
        return mla_fail(MLA_ERR_OVERFLOW, "config kv_lora_rank + rope_dim overflows");
    return MLA_OK;
}

/* The dtypes a backend is held to: a config opted into bf16 compute (f32
 * q) has its q and non-fp8 cache rows rounded to bf16 before any GEMM, so
 * it counts as bf16. */
static void kernel_dtypes(const mla_config *cfg, mla_dtype *q, mla_dtype *cache)
{
    const bool opted_in = mla_attn_opted_in(cfg->q_dtype, cfg->bf16_compute);
    *q = opted_in ? MLA_DTYPE_BF16 : cfg->q_dtype;
    *cache = opted_in && !mla_dtype_is_fp8(cfg->cache_dtype) ? MLA_DTYPE_BF16 : cfg->cache_dtype;
}

/* Which config rules collect_reasons applies. */
typedef enum { CHECK_ALL, IGNORE_BLOCK_SIZE } check_mode;

/* Why b (listed in v) cannot run op with cfg. */
static void collect_reasons(const registry_view *v, const mla_backend_desc *b, mla_op op,
                            const mla_config *cfg, check_mode mode, mla_reasons *out)
{
    memset(out, 0, sizeof *out);
    if (!(b->ops & (1u << op)))
        add_reason(out, "does not implement %s", mla_op_name(op));
    for (mla_caps missing = b->required_caps & ~v->caps; missing; missing &= missing - 1) {
        mla_cap bit = (mla_cap)(missing & -missing);
        if (v->detected & bit)
            add_reason(out, "cpu lacks %s (masked by MLA_MAX_ISA=%s)", mla_cap_name(bit), g.max_isa);
        else if (v->amx_refused & bit)
            add_reason(out, "cpu has %s but Linux refused its tile state "
                       "(arch_prctl ARCH_REQ_XCOMP_PERM)", mla_cap_name(bit));
        else
            add_reason(out, "cpu lacks %s", mla_cap_name(bit));
    }
    /* dtypes, dims and block sizes matter only to the attention ops */
    if (!cfg || op == MLA_OP_CONVERT)
        return;
    mla_dtype q, cache;
    kernel_dtypes(cfg, &q, &cache);
    if (!(b->q_dtypes & MLA_DTYPE_BIT(q)))
        add_reason(out, "q dtype %s not supported", mla_dtype_name(q));
    if (!(b->cache_dtypes & MLA_DTYPE_BIT(cache)))
        add_reason(out, "cache dtype %s not supported", mla_dtype_name(cache));
    int64_t dim = cfg->kv_lora_rank + cfg->rope_dim;
    bool any_dim = true, dim_ok = false;
    char dims[64] = "";
    size_t len = 0;
    for (int i = 0; i < MLA_MAX_HEAD_DIMS; i++) {
        if (b->head_dims[i] <= 0)
            continue;
        any_dim = false;
        dim_ok = dim_ok || b->head_dims[i] == dim;
        len += (size_t)snprintf(dims + len, sizeof dims - len, "%s%lld", len ? ", " : "",
                                (long long)b->head_dims[i]);
    }
    if (!any_dim && !dim_ok)
        add_reason(out, "head dim (L+R) %lld not supported (supported: %s)", (long long)dim, dims);
    if (mode == CHECK_ALL && b->block_size_multiple > 1 && cfg->block_size % b->block_size_multiple != 0)
        add_reason(out, "block_size %lld not a multiple of %lld", (long long)cfg->block_size,
                   (long long)b->block_size_multiple);
}

/* "cpu lacks avx512f; q dtype f32 not supported" */
static void join_reasons(const mla_reasons *r, char *buf, size_t size)
{
    size_t len = 0;
    buf[0] = '\0';
    for (int i = 0; i < r->count && len < size; i++)
        len += (size_t)snprintf(buf + len, size - len, "%s%s", i ? "; " : "", r->text[i]);
}

/* ---- CPU and AMX permission ----------------------------------------------- */

/* The reader's CPU as it would decode with AMX tile state granted. */
static mla_caps caps_if_permitted(void)
{
    mla_cpu_raw granted = g.raw;
    granted.amx_permitted = true;
    return mla_cpu_caps_decode(&granted);
}

/* Whether asking for AMX tile state could let a backend needing `required`
 * run: it needs AMX, nobody has asked yet, and with the permission the CPU
 * (its CPUID and XCR0 tile state) would have all it needs, MLA_MAX_ISA
 * keeping it. */
static bool amx_request_helps(mla_caps required)
{
    return (required & AMX_CAPS) && !g.amx_asked && !g.raw.amx_permitted &&
           (required & ~(caps_if_permitted() & g.keep)) == 0;
}

/* Asks for AMX tile state when that helps a backend needing `required`, at
 * most once per init: only then, because the permission binds the process
 * (Linux then insists on signal stacks large enough for the tile state).
 * True if it asked (the caps are then to be updated). */
static bool request_amx_locked(mla_caps required)
{
    if (!amx_request_helps(required))
        return false;
    g.amx_asked = true;
    g.raw.amx_permitted = g.request_amx();
    log_line("amx: asked Linux for tile state (arch_prctl ARCH_REQ_XCOMP_PERM): %s",
             g.raw.amx_permitted ? "granted" : "refused");
    return true;
}

/* The unpublished view's caps: detected and caps from the reader's readings,
 * a refusal kept for the reasons; real from the real CPU, read after any
 * request, so that only Linux's own answer gives it AMX. */
static void update_caps(registry_view *v)
{
    v->detected = mla_cpu_caps_decode(&g.raw);
    v->caps = v->detected & g.keep;
    v->amx_refused = g.amx_asked && !g.raw.amx_permitted ? caps_if_permitted() & AMX_CAPS : 0;
    mla_cpu_raw real;
    mla_cpu_read(&real);
    v->real = mla_cpu_caps_decode(&real);
}

/* MLA_MAX_ISA into g.keep (every bit if unset; an unknown level fails
 * every op). */
static void read_max_isa(void)
{
    g.keep = ~(mla_caps)0;
    const char *max_isa = getenv("MLA_MAX_ISA");
    if (!max_isa || !max_isa[0])
        return;
    snprintf(g.max_isa, sizeof g.max_isa, "%s", max_isa);
    if (!mla_isa_level_mask(max_isa, &g.keep)) {
        char levels[MESSAGE_LEN / 2];
        mla_isa_levels_format(levels, sizeof levels);
        g.env_status = MLA_ERR_BAD_ENV;
        snprintf(g.env_error, sizeof g.env_error,
                 "MLA_MAX_ISA=%s is not one of: %s (in any case)", max_isa, levels);
    }
}

/* ---- initialization ------------------------------------------------------ */

static mla_status select_ready(mla_op op, const mla_config *cfg, check_mode mode,
                               const mla_backend_desc **out);

static mla_status unknown_backend(const registry_view *v, const char *name)
{
    char names[MESSAGE_LEN / 2];
    format_names(v, names, sizeof names);
    return mla_fail(MLA_ERR_UNKNOWN_BACKEND, "unknown backend '%s'; valid backends: %s", name, names);
}

/* Forces op to the named backend if it can run on this CPU. */
static mla_status force_locked(mla_op op, const char *name)
{
    const registry_view *v = current_view();
    int i = find_index(v, name);
    if (i < 0)
        return unknown_backend(v, name);
    mla_reasons r;
    collect_reasons(v, &v->entry[i]->desc, op, NULL, CHECK_ALL, &r);
    if (r.count > 0) {
        char why[MESSAGE_LEN / 2];
        join_reasons(&r, why, sizeof why);
        return mla_fail(MLA_ERR_BACKEND_INVALID, "backend '%s' cannot run %s: %s", name,
                        mla_op_name(op), why);
    }
    snprintf(g.forced[op], sizeof g.forced[op], "%s", name);
    g.op_status[op] = MLA_OK;
    return MLA_OK;
}

static void log_state(const registry_view *v)
{
    char caps[256];
    mla_caps_format(v->detected, caps, sizeof caps);
    log_line("cpu: %s", caps[0] ? caps : "(no SIMD)");
    if (!g.amx_asked && !g.raw.amx_permitted && (caps_if_permitted() & AMX_CAPS))
        log_line("amx: tile state not requested (no backend needing it can run)");
    if (g.max_isa[0]) {
        mla_caps_format(v->caps, caps, sizeof caps);
        log_line("MLA_MAX_ISA=%s: using %s", g.max_isa, caps[0] ? caps : "(no SIMD)");
    }
    for (int i = 0; i < v->count; i++) {
        const registry_entry *e = v->entry[i];
        mla_reasons r;
        collect_reasons(v, &e->desc, MLA_OP_CONVERT, NULL, CHECK_ALL, &r);
        char why[MESSAGE_LEN / 2];
        join_reasons(&r, why, sizeof why);
        log_line("backend %-12s %s%s", e->name, r.count ? "unavailable: " : "available", why);
        int routes;
        const mla_attn_route *half = mla_attn_half_routes(&routes);
        for (int op = MLA_OP_DECODE; op <= MLA_OP_PREFILL; op++)
            for (int j = 0; j < routes; j++) {
                double speedup = e->route_speedup[op][j];
                if (speedup > 0.0)
                    log_line("backend %-12s %s %s route %.2fx its f32 route%s",
                             e->name, mla_op_name((mla_op)op), half[j].name, speedup,
                             speedup < 1.0 ? ": not auto-selected for it" : "");
            }
    }
    /* the choice for one config, as mla_select_backend (and so `make run`)
     * gives it: decode and prefill choose per config, by dtypes first */
    const mla_config cfg = mla_config_default();
    for (int op = 0; op < MLA_OP_COUNT; op++) {
        const mla_backend_desc *b = NULL;
        const mla_config *c = op == MLA_OP_CONVERT ? NULL : &cfg; /* convert takes any */
        if (g.op_status[op] != MLA_OK)
            log_line("%s: error: %s", mla_op_name(op), g.op_error[op]);
        else if (select_ready((mla_op)op, c, CHECK_ALL, &b) != MLA_OK)
            log_line("%s: error: %s", mla_op_name(op), mla_last_error());
        else if (!c)
            log_line("%s -> %s%s", mla_op_name(op), b->name, g.forced[op][0] ? " (forced)" : "");
        else
            log_line("%s -> %s%s (route %s) for q %s, cache %s, L=%lld, R=%lld, heads=%lld, "
                     "block_size=%lld; other configs may differ", mla_op_name(op), b->name,
                     g.forced[op][0] ? " (forced)" : "", config_route(&b->kernels, &cfg)->name,
                     mla_dtype_name(cfg.q_dtype), mla_dtype_name(cfg.cache_dtype),
                     (long long)cfg.kv_lora_rank, (long long)cfg.rope_dim,
                     (long long)cfg.num_heads, (long long)cfg.block_size);
    }
    log_line("threads: %d (omp_get_max_threads)", omp_get_max_threads());
}

static void init_locked(void)
{
    const char *log = getenv("MLA_LOG");
    g.log = log && log[0] && strcmp(log, "0") != 0;
    mla_trace_read_env();

    /* MLA_MAX_ISA first, as it decides whether AMX is worth asking for; the
     * caps before the backends, as inserting one times its routes on what
     * can run here */
    read_max_isa();
    (cpu_reader ? cpu_reader : mla_cpu_read)(&g.raw);
    g.request_amx = cpu_reader && amx_request ? amx_request : mla_cpu_request_amx;
    int n;
    const mla_backend_desc *builtin = mla_builtin_backends(&n);
    for (int i = 0; i < n; i++)
        request_amx_locked(builtin[i].required_caps);
    registry_view *v = next_view();
    update_caps(v);
    for (int i = 0; i < n; i++)
        insert_entry(v, &builtin[i]);
    publish(v);
    for (int op = 0; op < MLA_OP_COUNT; op++) {
        const char *name = getenv(op_env[op]);
        if (!name || !name[0])
            continue;
        g.op_status[op] = force_locked((mla_op)op, name);
        if (g.op_status[op] != MLA_OK)
            snprintf(g.op_error[op], sizeof g.op_error[op], "%s=%s: %s", op_env[op], name,
                     mla_last_error());
    }
    if (g.env_status != MLA_OK)
        log_line("error: %s", g.env_error);
    log_state(v);
}

mla_status mla_init(void)
{
    if (!atomic_load_explicit(&ready, memory_order_acquire)) {
        pthread_mutex_lock(&lock);
        if (!atomic_load_explicit(&ready, memory_order_relaxed)) {
            init_locked();
            atomic_store_explicit(&ready, true, memory_order_release);
        }
        pthread_mutex_unlock(&lock);
    }
    if (g.env_status != MLA_OK)
        return mla_fail(g.env_status, "%s", g.env_error);
    for (int op = 0; op < MLA_OP_COUNT; op++)
        if (g.op_status[op] != MLA_OK)
            return mla_fail(g.op_status[op], "%s", g.op_error[op]);
    return MLA_OK;
}

/* Init for one op: a bad env var of another op does not stop this one. */
static mla_status init_for(mla_op op)
{
    mla_status st = mla_init();
    if (st == MLA_OK)
        return MLA_OK;
    if (g.env_status != MLA_OK)
        return mla_fail(g.env_status, "%s", g.env_error);
    if (g.op_status[op] != MLA_OK)
        return mla_fail(g.op_status[op], "%s", g.op_error[op]);
    return MLA_OK;
}

void mla_dispatch_reset(void)
{
    pthread_mutex_lock(&lock);
    memset(&g, 0, sizeof g);
    mla_trace_reset();
    atomic_store(&published, NULL);
    atomic_store(&ready, false);
    pthread_mutex_unlock(&lock);
}

void mla_set_cpu_reader(mla_cpu_reader reader)
{
    pthread_mutex_lock(&lock);
    cpu_reader = reader;
    pthread_mutex_unlock(&lock);
}

void mla_dispatch_set_amx_request(mla_amx_request_fn *fn)
{
    pthread_mutex_lock(&lock);
    amx_request = fn;
    pthread_mutex_unlock(&lock);
}

/* ---- public queries ------------------------------------------------------- */

mla_caps mla_cpu_caps(void)
{
    mla_init();
    return current_view()->caps;
}

mla_caps mla_cpu_caps_detected(void)
{
    mla_init();
    return current_view()->detected;
}

int mla_backend_count(void)
{
    mla_init();
    return current_view()->count;
}

const mla_backend_desc *mla_backend_at(int index)
{
    mla_init();
    const registry_view *v = current_view();
    return index >= 0 && index < v->count ? &v->entry[index]->desc : NULL;
}

const mla_backend_desc *mla_backend_find(const char *name)
{
    mla_init();
    const registry_view *v = current_view();
    int i = name ? find_index(v, name) : -1;
    return i >= 0 ? &v->entry[i]->desc : NULL;
}

mla_status mla_backend_validate(const char *name, mla_op op, const mla_config *cfg, mla_reasons *out)
{
    if (!name || !out)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "mla_backend_validate: name and out are required");
    if ((unsigned)op >= MLA_OP_COUNT)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "op %d out of range", (int)op);
    mla_init();
    if (cfg) {
        mla_status st = check_config(cfg);
        if (st != MLA_OK)
            return st;
    }
    const registry_view *v = current_view();
    int i = find_index(v, name);
    if (i < 0)
        return unknown_backend(v, name);
    collect_reasons(v, &v->entry[i]->desc, op, cfg, CHECK_ALL, out);
    return MLA_OK;
}

mla_status mla_force_backend(mla_op op, const char *name)
{
    if ((unsigned)op >= MLA_OP_COUNT)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "op %d out of range", (int)op);
    mla_init();
    pthread_mutex_lock(&lock);
    mla_status st = MLA_OK;
    if (name) {
        st = force_locked(op, name);
    } else {
        g.forced[op][0] = '\0';
        g.op_status[op] = MLA_OK;
    }
    pthread_mutex_unlock(&lock);
    if (st == MLA_OK)
        log_line("%s forced to %s", mla_op_name(op), name ? name : "(auto)");
    return st;
}

/* Selection proper; needs init done and cfg checked. */
static mla_status select_ready(mla_op op, const mla_config *cfg, check_mode mode,
                               const mla_backend_desc **out)
{
    char why[MESSAGE_LEN - 128];
    mla_reasons r;
    const registry_view *v = current_view();
    if (g.forced[op][0]) {
        int i = find_index(v, g.forced[op]);
        if (i < 0)
            return unknown_backend(v, g.forced[op]);
        collect_reasons(v, &v->entry[i]->desc, op, cfg, mode, &r);
        if (r.count > 0) {
            join_reasons(&r, why, sizeof why);
            return mla_fail(MLA_ERR_BACKEND_INVALID, "forced backend '%s' cannot run %s: %s",
                            g.forced[op], mla_op_name(op), why);
        }
        *out = &v->entry[i]->desc;
        return MLA_OK;
    }
    size_t len = 0;
    why[0] = '\0';
    for (int i = 0; i < v->count; i++) {
        const registry_entry *e = v->entry[i];
        collect_reasons(v, &e->desc, op, cfg, mode, &r);
        if (cfg && op != MLA_OP_CONVERT) {
            const mla_attn_route *route = config_route(&e->desc.kernels, cfg);
            double speedup = route_speedup(e, op, route);
            if (speedup > 0.0 && speedup < 1.0)
                add_reason(&r, "its %s route measured %.2fx its f32 route on this cpu",
                           route->name, speedup);
        }
        if (r.count == 0) {
            *out = &e->desc;
            return MLA_OK;
        }
        char one[MESSAGE_LEN / 2];
        join_reasons(&r, one, sizeof one);
        if (len < sizeof why)
            len += (size_t)snprintf(why + len, sizeof why - len, "%s%s: %s", i ? "; " : "",
                                    e->name, one);
    }
    return mla_fail(MLA_ERR_NO_BACKEND, "no backend can run %s: %s", mla_op_name(op), why);
}

mla_status mla_select_backend(mla_op op, const mla_config *cfg, const mla_backend_desc **out)
{
    if (!out || (unsigned)op >= MLA_OP_COUNT)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "mla_select_backend: bad op or NULL out");
    mla_status st = init_for(op);
    if (st != MLA_OK)
        return st;
    if (cfg && (st = check_config(cfg)) != MLA_OK)
        return st;
    return select_ready(op, cfg, CHECK_ALL, out);
}

static int64_t gcd64(int64_t a, int64_t b)
{
    while (b) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

mla_status mla_block_size_supported(const mla_config *cfg, bool *supported, int64_t *required_multiple)
{
    if (!cfg || !supported || !required_multiple)
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "mla_block_size_supported: NULL argument");
    mla_status st = check_config(cfg);
    if (st != MLA_OK)
        return st;
    /* the backends decode and prefill would take if block size were no rule */
    int64_t need = 1;
    static const mla_op ops[] = {MLA_OP_DECODE, MLA_OP_PREFILL};
    for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
        const mla_backend_desc *b;
        if ((st = init_for(ops[i])) != MLA_OK || (st = select_ready(ops[i], cfg, IGNORE_BLOCK_SIZE, &b)) != MLA_OK)
            return st;
        int64_t m = b->block_size_multiple > 1 ? b->block_size_multiple : 1;
        need = need / gcd64(need, m) * m;
    }
    *required_multiple = need;
    *supported = cfg->block_size % need == 0;
    return MLA_OK;
}

mla_status mla_register_backend(const mla_backend_desc *desc, bool override)
{
    if (!desc || !desc->name || !desc->name[0])
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "mla_register_backend: a named descriptor is required");
    if (desc->size < DESC_V1_SIZE || desc->size > sizeof(mla_backend_desc))
        return mla_fail(MLA_ERR_INVALID_ARGUMENT, "mla_register_backend: desc->size %zu is not a "
                        "descriptor's size (%zu .. %zu; set it to sizeof(mla_backend_desc))",
                        desc->size, (size_t)DESC_V1_SIZE, sizeof(mla_backend_desc));
    if (strlen(desc->name) >= NAME_LEN || (desc->isa && strlen(desc->isa) >= NAME_LEN))
        return mla_fail(MLA_ERR_INVALID_ARGUMENT,
                        "mla_register_backend: backend name and isa must be shorter than %d",
                        NAME_LEN);
    mla_init();
    pthread_mutex_lock(&lock);
    mla_status st = MLA_OK;
    const registry_view *now = current_view();
    int i = find_index(now, desc->name);
    if (i >= 0 && !override) {
        st = mla_fail(MLA_ERR_ALREADY_EXISTS,
                      "mla_register_backend: backend '%s' already exists; pass override=true to "
                      "replace it", desc->name);
    } else if (i < 0 && now->count == MAX_BACKENDS) {
        st = mla_fail(MLA_ERR_CAPACITY, "mla_register_backend: backend table full (%d entries)",
                      MAX_BACKENDS);
    } else if (g.views_used == (int)(sizeof g.views / sizeof g.views[0])) {
        st = mla_fail(MLA_ERR_CAPACITY, "mla_register_backend: %d registrations made, the most a "
                      "process may (entries are never reused, so that running ops keep theirs)",
                      MAX_REGISTRATIONS);
    } else {
        /* desc may be a listed entry itself: entries never change, so it
         * can be read while the new one is filled */
        registry_view *v = next_view();
        if (i >= 0)
            remove_entry(v, i);
        /* a backend needing AMX may be the first that could use it; ask
         * before inserting, which times its routes on what can run here */
        if (request_amx_locked(desc->required_caps))
            update_caps(v);
        insert_entry(v, desc);
        publish(v);
    }
    pthread_mutex_unlock(&lock);
    if (st == MLA_OK)
        log_line("backend %s %s (priority %d)", desc->name, i >= 0 ? "overridden" : "registered",
                 desc->priority);
    return st;
}

const char *mla_backend_route(const char *name, const mla_config *cfg)
{
    const mla_backend_desc *b = mla_backend_find(name);
    return b && cfg ? config_route(&b->kernels, cfg)->name : NULL;
}

/* ---- per-call dispatch ---------------------------------------------------- */

mla_status mla_dispatch(mla_op op, const mla_config *cfg, const mla_kernels **kernels,
                        const char **backend_name)
{
    const mla_backend_desc *b;
    mla_status st = mla_select_backend(op, cfg, &b);
    if (st != MLA_OK)
        return st;
    *kernels = &b->kernels;
    *backend_name = b->name;
    return MLA_OK;
}

void mla_note_backend(const char *name)
{
    snprintf(last_backend, sizeof last_backend, "%s", name);
    last_route = NULL;
}

void mla_note_route(const char *name)
{
    last_route = name;
}

const char *mla_last_route(void)
{
    return last_route;
}

const char *mla_last_backend(void)
{
    return last_backend;
}

int mla_default_threads(void)
{
    return omp_get_max_threads();
}

/* ---- names ---------------------------------------------------------------- */

const char *mla_op_name(mla_op op)
{
    switch (op) {
    case MLA_OP_CONVERT: return "convert";
    case MLA_OP_DECODE: return "decode";
    case MLA_OP_PREFILL: return "prefill";
    case MLA_OP_COUNT: break;
    }
    return "?";
}

mla_config mla_config_default(void)
{
    return (mla_config){
        .q_dtype = MLA_DTYPE_F32,
        .cache_dtype = MLA_DTYPE_BF16,
        .kv_lora_rank = 512,
        .rope_dim = 64,
        .num_heads = 128,
        .block_size = 64,
    };
}
