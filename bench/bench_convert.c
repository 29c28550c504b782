/*
 * mla_bench peak and convert: the machine's ceilings (FMA peak per backend,
 * AMX-BF16 peak, memcpy bandwidth) and the element-wise ops measured against
 * them.
 */
#include "bench.h"

#include <stdio.h>
#include <stdlib.h>

/* Far beyond any last-level cache, so copy measures DRAM bandwidth. */
#define COPY_BYTES ((size_t)256 << 20)

/* The AMX probes measure the CPU, not a backend, so they run whatever
 * --backend says; where they cannot run, one line says so instead of rows
 * per thread count. */
static void print_amx_peaks(const options *o, const plan *p)
{
    for (int t = 0; t < p->nthreads; t++) {
        row r = measure_amx_peak(p->threads[t], o->reps);
        if (r.gflops == 0) {
            if (o->json)
                printf("{\"op\":\"%s\",\"backend\":\"%s\",\"available\":false}\n", r.op,
                       r.backend);
            else
                printf("amx: unavailable\n");
            return;
        }
        print_row(&r, o->json);
        row fed = measure_amx_fed_peak(p->threads[t], o->reps);
        print_row(&fed, o->json);
    }
}

int cmd_peak(const options *o, const plan *p)
{
    print_header(o->json);
    for (int i = 0; i < p->nbackends * p->nthreads; i++)
        print_row(&p->peaks[i], o->json);
    print_amx_peaks(o, p);

    int status = 1;
    char *src = alloc(COPY_BYTES), *dst = alloc(COPY_BYTES);
    if (src && dst) {
        first_touch(src, COPY_BYTES, most_threads(p));
        first_touch(dst, COPY_BYTES, most_threads(p));
        for (int t = 0; t < p->nthreads; t++) {
            row r = measure_copy(dst, src, COPY_BYTES, p->threads[t], o->reps);
            print_row(&r, o->json);
        }
        status = 0;
    }
    free(src);
    free(dst);
    return status;
}

/* An element-wise op: a conversion src -> dst, or exp (f32 -> f32). */
typedef struct ew_case {
    const char *op;
    mla_dtype src, dst;
    bool exp;
} ew_case;

static const ew_case ew_cases[] = {
    {"convert_bf16_f32", MLA_DTYPE_BF16, MLA_DTYPE_F32, false},
    {"convert_f32_bf16", MLA_DTYPE_F32, MLA_DTYPE_BF16, false},
    {"convert_f16_f32", MLA_DTYPE_F16, MLA_DTYPE_F32, false},
    {"convert_f32_f16", MLA_DTYPE_F32, MLA_DTYPE_F16, false},
    {"convert_e4m3_f32", MLA_DTYPE_FP8_E4M3, MLA_DTYPE_F32, false},
    {"convert_f32_e4m3", MLA_DTYPE_F32, MLA_DTYPE_FP8_E4M3, false},
    {"convert_e5m2_f32", MLA_DTYPE_FP8_E5M2, MLA_DTYPE_F32, false},
    {"convert_f32_e5m2", MLA_DTYPE_F32, MLA_DTYPE_FP8_E5M2, false},
    {"exp_f32", MLA_DTYPE_F32, MLA_DTYPE_F32, true},
};

typedef struct ew_run {
    const ew_case *c;
    void *dst;
    const void *src;
    int64_t n;
    int threads;
} ew_run;

static bool run_ew(void *ctx)
{
    const ew_run *r = ctx;
    mla_status st = r->c->exp ? mla_exp_f32(r->dst, r->src, r->n, r->threads)
                              : mla_convert(r->c->dst, r->dst, r->c->src, r->src, r->n, r->threads);
    return check(st, r->c->op);
}

/* Inputs of every source dtype, from one f32 ramp over [-8, 8): finite under
 * exp and in f16 range, so no case runs a special-value path. */
static bool make_inputs(float *f32, uint16_t *bf16, uint16_t *f16, uint8_t *e4m3, uint8_t *e5m2,
                        int64_t n, int threads)
{
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int64_t i = 0; i < n; i++)
        f32[i] = (float)(i % 2048 - 1024) / 128.0f;
    return check(mla_convert(MLA_DTYPE_BF16, bf16, MLA_DTYPE_F32, f32, n, threads), "mla_convert") &&
           check(mla_convert(MLA_DTYPE_F16, f16, MLA_DTYPE_F32, f32, n, threads), "mla_convert") &&
           check(mla_convert(MLA_DTYPE_FP8_E4M3, e4m3, MLA_DTYPE_F32, f32, n, threads), "mla_convert") &&
           check(mla_convert(MLA_DTYPE_FP8_E5M2, e5m2, MLA_DTYPE_F32, f32, n, threads), "mla_convert");
}

int cmd_convert(const options *o, const plan *p)
{
    int64_t n = o->n;
    size_t max_bytes = (size_t)n * sizeof(float);
    float *f32 = alloc(max_bytes), *out = alloc(max_bytes);
    uint16_t *bf16 = alloc(max_bytes / 2), *f16 = alloc(max_bytes / 2);
    uint8_t *e4m3 = alloc(max_bytes / 4), *e5m2 = alloc(max_bytes / 4);
    const void *inputs[MLA_DTYPE_COUNT] = { /* source of each case, by its dtype */
        [MLA_DTYPE_F32] = f32, [MLA_DTYPE_BF16] = bf16, [MLA_DTYPE_F16] = f16,
        [MLA_DTYPE_FP8_E4M3] = e4m3, [MLA_DTYPE_FP8_E5M2] = e5m2};
    bool ok = f32 && out && bf16 && f16 && e4m3 && e5m2 &&
              make_inputs(f32, bf16, f16, e4m3, e5m2, n, most_threads(p));
    if (ok) {
        first_touch((char *)out, max_bytes, most_threads(p));
        print_header(o->json);
    }

    /* Backends innermost: a case's backends print side by side, and its
     * memcpy reference is measured once per thread count. */
    for (int t = 0; ok && t < p->nthreads; t++) {
        for (size_t c = 0; ok && c < sizeof ew_cases / sizeof ew_cases[0]; c++) {
            const ew_case *ec = &ew_cases[c];
            /* The memcpy reference moves as many bytes (read + written) as
             * the op does; it does not depend on the backend. */
            size_t traffic = (size_t)n * (size_t)(mla_dtype_size(ec->src) + mla_dtype_size(ec->dst));
            row copy = measure_copy((char *)out, (const char *)f32, traffic / 2, p->threads[t],
                                    o->reps);
            ew_run run = {ec, out, inputs[ec->src], n, p->threads[t]};
            for (int b = 0; ok && b < p->nbackends; b++) {
                stats s;
                ok = force_backend(MLA_OP_CONVERT, p->backends[b]->name) &&
                     time_region(run_ew, &run, o->reps, o->seconds, &s) &&
                     ran_on(p->backends[b], ec->op);
                if (!ok)
                    break;
                /* the memcpy reference and the peak were timed apart from it */
                row r = {.op = ec->op, .backend = p->backends[b]->name, .probe = "separate",
                         .threads = run.threads, .n = n, .time = s,
                         .gbps = giga_per_s((double)traffic, s.median),
                         .peak_gflops = p->peaks[b * p->nthreads + t].gflops,
                         .copy_gbps = copy.gbps};
                print_row(&r, o->json);
            }
        }
    }
    ok = force_backend(MLA_OP_CONVERT, NULL) && ok;
    free(f32);
    free(out);
    free(bf16);
    free(f16);
    free(e4m3);
    free(e5m2);
    return ok ? 0 : 1;
}
