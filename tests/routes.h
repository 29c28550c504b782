/*
 * Every attention route on any CPU, for the suites that test what gets
 * through attention (test_causal_mask.c, test_numerics.c): the routes are
 * f32, bf16-dot, amx-bf16 and f16 (src/kernels/common/attention_route.h).
 * A route no backend of this CPU has gets a backend built on its kernel's
 * ref twin (the AMX tiles', vdpbf16ps' or FMLAL's arithmetic), registered
 * before any op runs, so every test runs every route and asserts so. A
 * backend of ref kernels runs a case only where no backend before it took
 * its route (ref's plain kernels have their own suites).
 */
#ifndef MLA_TEST_ROUTES_H
#define MLA_TEST_ROUTES_H

#include "flash_attn_cases.h"

#include <stdbool.h>
#include <stdint.h>

#define ROUTES 4
extern const char *const route_names[ROUTES]; /* "f32", "bf16-dot", "amx-bf16", "f16" */

/* Routes that ran, by route_names index. */
typedef struct routes_seen {
    bool ran[ROUTES];
} routes_seen;

/* For each half-precision route no backend here has, a backend of ref
 * kernels and the route kernel's ref twin (never auto-selected). Call it
 * in main, before any op runs. */
void route_register_twins(void);

/* Whether backend b runs the case: not when its kernels are ref's and a
 * backend before it took the same route (`here`, this case's routes so
 * far). Notes the route in `here` and in `seen`, the test's. */
bool route_takes_case(const mla_backend_desc *b, const mla_config *cfg, routes_seen *here,
                      routes_seen *seen);

/* Fails, naming `what`, unless every route ran. */
void route_expect_every(const routes_seen *seen, const char *what);

/* (q, cache) dtypes whose routes are, between the backends: f32; bf16-dot
 * and amx-bf16; f16; amx-bf16 converting f32 q (the opt-in) and fp8 keys. */
typedef struct route_dtypes {
    mla_dtype q, cache;
    bool bf16_compute;
} route_dtypes;

#define ROUTE_DECODE_DTYPES 5
extern const route_dtypes route_decode_dtypes[ROUTE_DECODE_DTYPES];
extern const mla_dtype route_flash_dtypes[3]; /* f32, bf16, f16 */

/* Decode schedules: one part (no request split), and splits at multiples
 * of 16 keys, by the default schedule and the batch-invariant one (a
 * request of 16k + 1 .. 16k + 3 keys gets a split of keys only its later
 * queries see). */
extern const mla_decode_sched_params route_unsplit;
#define ROUTE_SPLITS 2
extern const mla_decode_sched_params route_splits[ROUTE_SPLITS];

/* dcase_run_on (2 threads) on every backend that takes the case, unsplit
 * and, with `split`, on each of route_splits. */
void route_decode_everywhere(dcase *c, bool split, routes_seen *seen);
/* fa_run_on (the case's threads) on every backend that takes the case. */
void route_flash_everywhere(fa_case *c, routes_seen *seen);

/* Stores an inf or NaN into element i of array as dtype holds it: fp8
 * conversions saturate infinities, so e5m2's are written as their codes
 * (e4m3 has none: NaN instead). */
void route_store_poison(mla_dtype dtype, void *array, int64_t i, float x, float scale);

#endif
