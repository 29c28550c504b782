/* Every attention route on any CPU (routes.h says how). */
#include "routes.h"

#include "kernels/kernels.h"
#include "oracle.h"

#include <math.h>
#include <string.h>

const char *const route_names[ROUTES] = {"f32", "bf16-dot", "amx-bf16", "f16"};

const route_dtypes route_decode_dtypes[ROUTE_DECODE_DTYPES] = {
    {MLA_DTYPE_F32, MLA_DTYPE_F32, false},  {MLA_DTYPE_BF16, MLA_DTYPE_BF16, false},
    {MLA_DTYPE_F16, MLA_DTYPE_F16, false},  {MLA_DTYPE_F32, MLA_DTYPE_BF16, true},
    {MLA_DTYPE_BF16, MLA_DTYPE_FP8_E5M2, false},
};

const mla_dtype route_flash_dtypes[3] = {MLA_DTYPE_F32, MLA_DTYPE_BF16, MLA_DTYPE_F16};

const mla_decode_sched_params route_unsplit = {.num_parts = 1};
const mla_decode_sched_params route_splits[ROUTE_SPLITS] = {
    {.num_parts = 5, .block_n = 16, .overhead = MLA_SCHED_NO_OVERHEAD},
    {.num_parts = 3, .block_n = 16, .split_blocks = 1},
};

static int route_index(const char *backend, const mla_config *cfg)
{
    const char *route = mla_backend_route(backend, cfg);
    assert_non_null(route);
    for (int i = 0; i < ROUTES; i++)
        if (strcmp(route, route_names[i]) == 0)
            return i;
    fail_msg("backend %s took route %s, which this suite does not know", backend, route);
    return -1;
}

bool route_takes_case(const mla_backend_desc *b, const mla_config *cfg, routes_seen *here,
                      routes_seen *seen)
{
    const int i = route_index(b->name, cfg);
    if (strcmp(b->isa, "ref") == 0 && here->ran[i])
        return false;
    here->ran[i] = seen->ran[i] = true;
    return true;
}

void route_expect_every(const routes_seen *seen, const char *what)
{
    for (int i = 0; i < ROUTES; i++)
        if (!seen->ran[i])
            fail_msg("%s: no backend ran the %s route", what, route_names[i]);
}

/* Whether a backend this CPU runs has the route kernel `twin` holds. */
static bool route_runs_here(const mla_kernels *twin)
{
    for (int i = 0; i < mla_backend_count(); i++) {
        const mla_backend_desc *b = mla_backend_at(i);
        const mla_kernels *k = &b->kernels;
        mla_reasons why;
        if (mla_backend_validate(b->name, MLA_OP_DECODE, NULL, &why) != MLA_OK || why.count > 0)
            continue;
        if ((twin->gemm_bf16tile && k->gemm_bf16tile) || (twin->gemm_bf16dot && k->gemm_bf16dot) ||
            (twin->gemm_f16f16 && k->gemm_f16f16))
            return true;
    }
    return false;
}

void route_register_twins(void)
{
    const uint32_t bf16 = MLA_DTYPE_BIT(MLA_DTYPE_BF16), f16 = MLA_DTYPE_BIT(MLA_DTYPE_F16);
    const uint32_t fp8 = MLA_DTYPE_BIT(MLA_DTYPE_FP8_E4M3) | MLA_DTYPE_BIT(MLA_DTYPE_FP8_E5M2);
    const mla_backend_desc twins[] = {
        {.name = "twin_tile", .q_dtypes = bf16, .cache_dtypes = bf16 | fp8,
         .kernels = {.gemm_bf16tile = mla_gemm_bf16tile__ref}},
        {.name = "twin_bf16dot", .q_dtypes = bf16, .cache_dtypes = bf16,
         .kernels = {.gemm_bf16dot = mla_gemm_bf16dot__ref}},
        {.name = "twin_f16", .q_dtypes = f16, .cache_dtypes = f16,
         .kernels = {.gemm_f16f16 = mla_gemm_f16f16__ref}},
    };
    for (int i = 0; i < COUNT(twins); i++) {
        if (route_runs_here(&twins[i].kernels))
            continue;
        mla_backend_desc d = twins[i];
        d.size = sizeof d;
        d.isa = "ref";
        d.priority = -1;
        d.ops = 1u << MLA_OP_DECODE | 1u << MLA_OP_PREFILL;
        if (mla_register_backend(&d, false) != MLA_OK)
            fail_msg("registering %s: %s", d.name, mla_last_error());
        print_message("[ TWIN     ] %s: a route no backend here has, on its ref twin\n", d.name);
    }
}

typedef struct decode_run {
    dcase *c;
    bool split; /* also the split schedules */
    routes_seen here, *seen;
} decode_run;

static void run_decode_schedules(const mla_backend_desc *b, void *ctx)
{
    decode_run *r = ctx;
    dcase *c = r->c;
    const mla_config cfg = case_config_of(&c->args);
    if (!route_takes_case(b, &cfg, &r->here, r->seen))
        return;
    c->args.sched = &route_unsplit;
    dcase_run_on(c, b, 2, 0);
    for (int k = 0; r->split && k < ROUTE_SPLITS; k++) {
        c->args.sched = &route_splits[k];
        dcase_run_on(c, b, 2, 0);
    }
    c->args.sched = NULL;
}

void route_decode_everywhere(dcase *c, bool split, routes_seen *seen)
{
    const mla_config cfg = case_config_of(&c->args);
    decode_run r = {.c = c, .split = split, .seen = seen};
    if (support_each_backend(MLA_OP_DECODE, &cfg, run_decode_schedules, &r) == 0)
        fail_msg("%s: no backend can run this", c->label);
}

typedef struct flash_run {
    fa_case *c;
    routes_seen here, *seen;
} flash_run;

static void run_flash(const mla_backend_desc *b, void *ctx)
{
    flash_run *r = ctx;
    const mla_config cfg = fa_config(&r->c->s);
    if (route_takes_case(b, &cfg, &r->here, r->seen))
        fa_run_on(r->c, b, r->c->s.threads);
}

void route_flash_everywhere(fa_case *c, routes_seen *seen)
{
    const mla_config cfg = fa_config(&c->s);
    flash_run r = {.c = c, .seen = seen};
    if (support_each_backend(MLA_OP_PREFILL, &cfg, run_flash, &r) == 0)
        fail_msg("%s: no backend can run this", c->label);
}

void route_store_poison(mla_dtype dtype, void *array, int64_t i, float x, float scale)
{
    if (mla_dtype_size(dtype) == 1 && isinf(x)) {
        uint8_t sign = x < 0 ? 0x80 : 0;
        ((uint8_t *)array)[i] = sign | (dtype == MLA_DTYPE_FP8_E5M2 ? 0x7c : 0x7f);
        return;
    }
    oracle_store(dtype, array, i, x, scale);
}
