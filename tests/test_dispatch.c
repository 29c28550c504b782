/* Detection on fake CPUs, backend selection, environment variables, forced
 * and custom backends, status codes and messages. */
#include "decode_cases.h"
#include "support.h"

#include "dispatch/dispatch.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define X86_AVX2_LEVEL (MLA_CAP_SSE42 | MLA_CAP_AVX2 | MLA_CAP_FMA | MLA_CAP_F16C)
#define X86_AVX512_BASE (MLA_CAP_AVX512F | MLA_CAP_AVX512BW | MLA_CAP_AVX512VL | MLA_CAP_AVX512DQ)
#define X86_AMX (MLA_CAP_AMX_TILE | MLA_CAP_AMX_BF16 | MLA_CAP_AMX_FP16)

static int reset_state(void **state)
{
    (void)state;
    support_use_cpu(NULL);
    return 0;
}

static const char *selected(mla_op op, const mla_config *cfg)
{
    const mla_backend_desc *b;
    mla_status st = mla_select_backend(op, cfg, &b);
    if (st != MLA_OK) {
        print_error("select %s: %s\n", mla_op_name(op), mla_last_error());
        return "(error)";
    }
    return b->name;
}

/* ---- detection --------------------------------------------------------- */

static void test_decode_zen3(void **state)
{
    (void)state;
    assert_int_equal(mla_cpu_caps_decode(&support_cpu_zen3), X86_AVX2_LEVEL);
}

static void test_decode_sapphire_rapids(void **state)
{
    (void)state;
    mla_caps want = X86_AVX2_LEVEL | X86_AVX512_BASE | MLA_CAP_AVX512_BF16 | MLA_CAP_AVX512_FP16 |
                    MLA_CAP_AMX_TILE | MLA_CAP_AMX_BF16;
    assert_int_equal(mla_cpu_caps_decode(&support_cpu_sapphire_rapids), want);
}

static void test_decode_os_without_zmm_state(void **state)
{
    (void)state;
    /* CPUID says AVX-512 and AMX, but XCR0 does not save ZMM or tiles */
    assert_int_equal(mla_cpu_caps_decode(&support_cpu_spr_no_zmm_os), X86_AVX2_LEVEL);
}

static void test_decode_amx_permission_denied(void **state)
{
    (void)state;
    mla_cpu_raw raw = support_cpu_sapphire_rapids;
    raw.amx_permitted = false;
    mla_caps caps = mla_cpu_caps_decode(&raw);
    assert_false(caps & (MLA_CAP_AMX_TILE | MLA_CAP_AMX_BF16));
    assert_true(caps & MLA_CAP_AVX512_BF16);
}

static void test_decode_granite_rapids(void **state)
{
    (void)state;
    mla_caps spr = mla_cpu_caps_decode(&support_cpu_sapphire_rapids);
    assert_false(spr & MLA_CAP_AMX_FP16);
    assert_int_equal(mla_cpu_caps_decode(&support_cpu_granite_rapids), spr | MLA_CAP_AMX_FP16);
    /* AMX-FP16 needs the tile state and its permission, as AMX-BF16 does */
    mla_cpu_raw raw = support_cpu_granite_rapids;
    raw.amx_permitted = false;
    assert_false(mla_cpu_caps_decode(&raw) & X86_AMX);
    raw = support_cpu_granite_rapids;
    raw.xcr0 = 0xe7; /* ZMM state saved, tile state not */
    assert_int_equal(mla_cpu_caps_decode(&raw), spr & ~X86_AMX);
    assert_string_equal(mla_cap_name(MLA_CAP_AMX_FP16), "amx_fp16");
}

static void test_decode_without_osxsave(void **state)
{
    (void)state;
    mla_cpu_raw raw = support_cpu_zen3;
    raw.leaf1_ecx &= ~(1u << 27); /* OS has not enabled XSAVE: no YMM state */
    assert_int_equal(mla_cpu_caps_decode(&raw), MLA_CAP_SSE42);
}

static void test_decode_graviton3(void **state)
{
    (void)state;
    assert_int_equal(mla_cpu_caps_decode(&support_cpu_graviton3),
                     MLA_CAP_NEON | MLA_CAP_NEON_FP16 | MLA_CAP_NEON_BF16 | MLA_CAP_SVE | MLA_CAP_NEON_FHM);
}

static void test_cap_names(void **state)
{
    (void)state;
    char buf[256];
    size_t need = mla_caps_format(mla_cpu_caps_decode(&support_cpu_graviton3), buf, sizeof buf);
    assert_string_equal(buf, "neon neon_fp16 neon_bf16 sve neon_fhm");
    assert_int_equal(need, strlen(buf));
    char tiny[6];
    assert_int_equal(mla_caps_format(MLA_CAP_AVX2 | MLA_CAP_FMA, tiny, sizeof tiny), strlen("avx2 fma"));
    assert_string_equal(tiny, "avx2 ");
    assert_string_equal(mla_cap_name(MLA_CAP_AVX512_BF16), "avx512_bf16");
    assert_string_equal(mla_cap_name((mla_cap)(1u << 30)), "?");
}

static void test_fake_reader_drives_caps(void **state)
{
    (void)state;
    support_use_cpu(&support_cpu_zen3);
    assert_int_equal(mla_cpu_caps(), X86_AVX2_LEVEL);
    support_use_cpu(&support_cpu_graviton3);
    assert_true(mla_cpu_caps() & MLA_CAP_SVE);
}

/* ---- selection ---------------------------------------------------------- */

static void test_registry_in_priority_order(void **state)
{
    (void)state;
    int n = mla_backend_count();
    assert_true(n >= 2);
    for (int i = 1; i < n; i++)
        assert_true(mla_backend_at(i - 1)->priority >= mla_backend_at(i)->priority);
    assert_string_equal(mla_backend_at(n - 1)->name, "ref");
    assert_null(mla_backend_at(n));
    assert_null(mla_backend_find("nope"));
    assert_non_null(mla_backend_find("ref"));
}

/* Checks the choice for a half-precision cfg: the first valid backend, in
 * priority order, whose table has a half-precision route for cfg, unless
 * this machine can run it and timed that route slower than its f32 route at
 * init (as real Sapphire Rapids does vdpbf16ps): then the next such one, else
 * `fallback`; forcing one passed over still works. `real`: this machine's
 * caps. */
static void expect_half_choice(mla_op op, const mla_config *cfg, const char *fallback,
                               mla_caps real)
{
    char choice[32];
    snprintf(choice, sizeof choice, "%s", selected(op, cfg));
    for (int i = 0; i < mla_backend_count(); i++) {
        const mla_backend_desc *b = mla_backend_at(i);
        mla_reasons why;
        assert_int_equal(mla_backend_validate(b->name, op, cfg, &why), MLA_OK);
        if (why.count > 0 || strcmp(mla_backend_route(b->name, cfg), "f32") == 0)
            continue;
        if (strcmp(choice, b->name) == 0)
            return;
        assert_true((b->required_caps & ~real) == 0);
        assert_int_equal(mla_force_backend(op, b->name), MLA_OK);
        assert_string_equal(selected(op, cfg), b->name);
        assert_int_equal(mla_force_backend(op, NULL), MLA_OK);
    }
    assert_string_equal(choice, fallback);
}

static void test_selection_per_cpu(void **state)
{
    (void)state;
    mla_config f32q = mla_config_default(); /* f32 q, bf16 cache */
    mla_config bf16q = f32q;
    bf16q.q_dtype = MLA_DTYPE_BF16;
    support_use_cpu(NULL);
    const mla_caps real = mla_cpu_caps_detected();
#if defined(__x86_64__)
    support_use_cpu(&support_cpu_sapphire_rapids);
    assert_string_equal(selected(MLA_OP_CONVERT, NULL), "avx512_amx");
    assert_string_equal(selected(MLA_OP_DECODE, &f32q), "avx512");
    /* bf16 q with a bf16 cache takes a bf16-pair backend (AMX tiles,
     * vdpbf16ps) by decode's timing; prefill weighs the same routes by its
     * own (a flash-attention call) */
    expect_half_choice(MLA_OP_DECODE, &bf16q, "avx512", real);
    mla_config bf16_prefill = {.q_dtype = MLA_DTYPE_BF16, .cache_dtype = MLA_DTYPE_BF16,
                               .kv_lora_rank = 128, .rope_dim = 64, .num_heads = 16,
                               .block_size = 1};
    expect_half_choice(MLA_OP_PREFILL, &bf16_prefill, "avx512", real);
    support_use_cpu(&support_cpu_spr_no_zmm_os);
    assert_string_equal(selected(MLA_OP_DECODE, &bf16q), "avx2");
    support_use_cpu(&support_cpu_zen3);
    assert_string_equal(selected(MLA_OP_DECODE, &f32q), "avx2");
    assert_string_equal(selected(MLA_OP_PREFILL, NULL), "avx2");
    support_use_cpu(&support_cpu_graviton3); /* an Arm CPU offers no x86 ISA */
    assert_string_equal(selected(MLA_OP_CONVERT, NULL), "ref");
#elif defined(__aarch64__)
    mla_config f16 = f32q;
    f16.q_dtype = f16.cache_dtype = MLA_DTYPE_F16;
    support_use_cpu(&support_cpu_graviton3);
    assert_string_equal(selected(MLA_OP_CONVERT, NULL), "neon_bf16");
    assert_string_equal(selected(MLA_OP_DECODE, &f32q), "neon");
    /* bf16 q with a bf16 cache takes the BFDOT backend and f16 with f16 the
     * FMLAL one, by their timing */
    expect_half_choice(MLA_OP_DECODE, &bf16q, "neon", real);
    expect_half_choice(MLA_OP_DECODE, &f16, "neon", real);
    support_use_cpu(&support_cpu_neoverse_n1);
    assert_string_equal(selected(MLA_OP_DECODE, &bf16q), "neon");
    assert_string_equal(selected(MLA_OP_DECODE, &f16), "neon");
    support_use_cpu(&support_cpu_zen3);
    assert_string_equal(selected(MLA_OP_CONVERT, NULL), "ref");
#endif
}

static void test_validate_reasons(void **state)
{
    (void)state;
    mla_reasons why;
    mla_config cfg = mla_config_default();
    cfg.cache_dtype = MLA_DTYPE_FP8_E5M2;
#if defined(__x86_64__)
    support_use_cpu(&support_cpu_zen3);
    assert_int_equal(mla_backend_validate("avx512_bf16", MLA_OP_DECODE, &cfg, &why), MLA_OK);
    assert_int_equal(why.count, 7); /* five cpu bits, q dtype, cache dtype */
    assert_string_equal(why.text[0], "cpu lacks avx512f");
    assert_string_equal(why.text[4], "cpu lacks avx512_bf16");
    assert_string_equal(why.text[5], "q dtype f32 not supported");
    assert_string_equal(why.text[6], "cache dtype fp8_e5m2 not supported");
    assert_int_equal(mla_backend_validate("avx2", MLA_OP_DECODE, &cfg, &why), MLA_OK);
    assert_int_equal(why.count, 0);
#endif
    assert_int_equal(mla_backend_validate("ref", MLA_OP_DECODE, &cfg, &why), MLA_OK);
    assert_int_equal(why.count, 0);
    support_expect_reject("mla_backend_validate", "name of no backend",
                          mla_backend_validate("nope", MLA_OP_DECODE, &cfg, &why),
                          MLA_ERR_UNKNOWN_BACKEND, "valid backends:");
    cfg.num_heads = 0;
    support_expect_reject("mla_backend_validate", "cfg num_heads 0",
                          mla_backend_validate("ref", MLA_OP_DECODE, &cfg, &why),
                          MLA_ERR_INVALID_ARGUMENT, "num_heads >= 1");
    cfg = mla_config_default();
    cfg.q_dtype = (mla_dtype)42;
    support_expect_reject("mla_backend_validate", "cfg q_dtype not an mla_dtype",
                          mla_backend_validate("ref", MLA_OP_DECODE, &cfg, &why),
                          MLA_ERR_INVALID_ARGUMENT, "dtype out of range (q 42");
}

/* The route a backend's table gives a config: its bf16 tile GEMM, else its
 * bf16 dot-product GEMM, for bf16 q with a bf16 cache, its f16 GEMM for f16
 * with f16, else f32. */
static void test_backend_route(void **state)
{
    (void)state;
    mla_config f32q = mla_config_default(); /* f32 q, bf16 cache */
    mla_config bf16 = f32q, f16 = f32q, mixed = f32q, opted = f32q;
    bf16.q_dtype = bf16.cache_dtype = MLA_DTYPE_BF16;
    opted.bf16_compute = true; /* f32 q, bf16 cache, computed in bf16 */
    f16.q_dtype = f16.cache_dtype = MLA_DTYPE_F16;
    mixed.q_dtype = MLA_DTYPE_BF16;
    mixed.cache_dtype = MLA_DTYPE_F16;
    for (int i = 0; i < mla_backend_count(); i++) {
        const mla_backend_desc *b = mla_backend_at(i);
        assert_string_equal(mla_backend_route(b->name, &bf16),
                            b->kernels.gemm_bf16tile ? "amx-bf16"
                            : b->kernels.gemm_bf16dot       ? "bf16-dot"
                                                            : "f32");
        assert_string_equal(mla_backend_route(b->name, &f16),
                            b->kernels.gemm_f16f16 ? "f16" : "f32");
        assert_string_equal(mla_backend_route(b->name, &f32q), "f32");
        assert_string_equal(mla_backend_route(b->name, &mixed), "f32");
        /* the opt-in takes the tile route (q rounded), nothing else */
        assert_string_equal(mla_backend_route(b->name, &opted),
                            b->kernels.gemm_bf16tile ? "amx-bf16" : "f32");
    }
#if defined(__x86_64__)
    assert_string_equal(mla_backend_route("avx512_bf16", &bf16), "bf16-dot");
#elif defined(__aarch64__)
    assert_string_equal(mla_backend_route("neon_bf16", &bf16), "bf16-dot");
    assert_string_equal(mla_backend_route("neon_fhm", &f16), "f16");
#endif
    assert_string_equal(mla_backend_route("ref", &bf16), "f32");
    assert_null(mla_backend_route("nope", &bf16));
    assert_null(mla_backend_route("ref", NULL));
}

/* ---- environment ---------------------------------------------------------- */

static void test_env_max_isa(void **state)
{
    (void)state;
#if defined(__x86_64__)
    support_use_cpu(&support_cpu_sapphire_rapids);
    support_setenv("MLA_MAX_ISA", "avx2");
    assert_int_equal(mla_init(), MLA_OK);
    assert_int_equal(mla_cpu_caps(), X86_AVX2_LEVEL);
    assert_true(mla_cpu_caps_detected() & MLA_CAP_AVX512F);
    assert_string_equal(selected(MLA_OP_CONVERT, NULL), "avx2");
    mla_reasons why;
    mla_backend_validate("avx512", MLA_OP_CONVERT, NULL, &why);
    assert_string_equal(why.text[0], "cpu lacks avx512f (masked by MLA_MAX_ISA=avx2)");

    support_setenv("MLA_MAX_ISA", "avx512"); /* the AVX-512 base: no BF16, no AMX */
    assert_string_equal(selected(MLA_OP_CONVERT, NULL), "avx512");
    support_setenv("MLA_MAX_ISA", "avx512_amx");
    assert_string_equal(selected(MLA_OP_CONVERT, NULL), "avx512_amx");
    /* masks only down: asking for avx512 on an AVX2 CPU adds nothing */
    support_use_cpu(&support_cpu_zen3);
    support_setenv("MLA_MAX_ISA", "avx512");
    assert_int_equal(mla_cpu_caps(), X86_AVX2_LEVEL);
    support_setenv("MLA_MAX_ISA", "neon"); /* no x86 ISA is below neon */
    assert_string_equal(selected(MLA_OP_CONVERT, NULL), "ref");
#elif defined(__aarch64__)
    support_use_cpu(&support_cpu_graviton3);
    support_setenv("MLA_MAX_ISA", "neon_bf16"); /* the top level: keeps BF16 */
    assert_string_equal(selected(MLA_OP_CONVERT, NULL), "neon_bf16");
    support_setenv("MLA_MAX_ISA", "neon"); /* Advanced SIMD alone */
    assert_string_equal(selected(MLA_OP_CONVERT, NULL), "neon");
    support_setenv("MLA_MAX_ISA", "avx2");
    assert_string_equal(selected(MLA_OP_CONVERT, NULL), "ref");
#endif
    support_setenv("MLA_MAX_ISA", "ref");
    assert_int_equal(mla_cpu_caps(), 0);
    assert_string_equal(selected(MLA_OP_DECODE, NULL), "ref");

    support_setenv("MLA_MAX_ISA", "avx9000");
    support_expect_reject("mla_init", "MLA_MAX_ISA=avx9000", mla_init(), MLA_ERR_BAD_ENV,
                          "MLA_MAX_ISA=avx9000 is not one of: ref, avx2, avx512, avx512_bf16, "
                          "avx512_amx, neon, neon_fp16, neon_fhm, neon_bf16 (in any case)");
    float x = 1.0f, y;
    support_expect_reject("mla_exp_f32", "MLA_MAX_ISA=avx9000 (every op fails alike)",
                          mla_exp_f32(&y, &x, 1, 1), MLA_ERR_BAD_ENV, "MLA_MAX_ISA=avx9000");
}

static void test_env_forced_backend(void **state)
{
    (void)state;
    support_setenv("MLA_DECODE_BACKEND", "ref");
    assert_int_equal(mla_init(), MLA_OK);
    assert_string_equal(selected(MLA_OP_DECODE, NULL), "ref");
    /* other ops keep auto-selection: the same first valid backend */
    char prefill[32];
    snprintf(prefill, sizeof prefill, "%s", selected(MLA_OP_PREFILL, NULL));
    assert_string_equal(prefill, selected(MLA_OP_CONVERT, NULL));

    support_setenv("MLA_CONVERT_BACKEND", "ref");
    uint16_t h = 0x3f80;
    float f;
    assert_int_equal(mla_convert(MLA_DTYPE_F32, &f, MLA_DTYPE_BF16, &h, 1, 1), MLA_OK);
    assert_string_equal(mla_last_backend(), "ref");
    assert_true(f == 1.0f);
}

static void test_env_unknown_backend(void **state)
{
    (void)state;
    support_setenv("MLA_PREFILL_BACKEND", "cuda");
    support_expect_reject("mla_init", "MLA_PREFILL_BACKEND naming no backend", mla_init(),
                          MLA_ERR_UNKNOWN_BACKEND, "MLA_PREFILL_BACKEND=cuda");
    const char *msg = mla_last_error();
    assert_true(support_contains(msg, "MLA_PREFILL_BACKEND=cuda"));
    assert_true(support_contains(msg, "unknown backend 'cuda'; valid backends: "));
    for (int i = 0; i < mla_backend_count(); i++)
        assert_true(support_contains(msg, mla_backend_at(i)->name));
    const mla_backend_desc *b;
    support_expect_reject("mla_select_backend", "MLA_PREFILL_BACKEND naming no backend",
                          mla_select_backend(MLA_OP_PREFILL, NULL, &b), MLA_ERR_UNKNOWN_BACKEND,
                          "cuda");
    /* the failure belongs to prefill alone */
    float x = 0.0f, y = -1.0f;
    assert_int_equal(mla_exp_f32(&y, &x, 1, 1), MLA_OK);
    assert_true(y == 1.0f);
}

static void test_env_invalid_backend(void **state)
{
    (void)state;
#if defined(__x86_64__)
    support_use_cpu(&support_cpu_zen3);
    support_setenv("MLA_DECODE_BACKEND", "avx512");
    support_expect_reject("mla_init", "MLA_DECODE_BACKEND naming a backend the CPU cannot run",
                          mla_init(), MLA_ERR_BACKEND_INVALID,
                          "MLA_DECODE_BACKEND=avx512: backend 'avx512' cannot run decode: cpu "
                          "lacks avx512f; cpu lacks avx512bw");
    /* the API can still choose a valid one, which clears the error */
    assert_int_equal(mla_force_backend(MLA_OP_DECODE, "avx2"), MLA_OK);
    assert_int_equal(mla_init(), MLA_OK);
    assert_string_equal(selected(MLA_OP_DECODE, NULL), "avx2");
#else
    support_use_cpu(&support_cpu_zen3); /* no ASIMD in an x86 CPU's readings */
    support_setenv("MLA_DECODE_BACKEND", "neon");
    support_expect_reject("mla_init", "MLA_DECODE_BACKEND naming a backend the CPU cannot run",
                          mla_init(), MLA_ERR_BACKEND_INVALID, "cpu lacks neon");
#endif
}

/* Runs run() with stderr captured into buf. */
static void capture_stderr(void (*run)(void), char *buf, size_t size)
{
    fflush(stderr);
    int saved = dup(2);
    FILE *tmp = tmpfile();
    assert_non_null(tmp);
    dup2(fileno(tmp), 2);
    run();
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    size_t n = fread(buf, 1, size - 1, tmp);
    buf[n] = '\0';
    fclose(tmp);
}

static void run_init(void)
{
    mla_init();
}

static void test_env_log(void **state)
{
    (void)state;
    char out[8192];
    support_setenv("MLA_PREFILL_BACKEND", "cuda"); /* even errors stay silent... */
    capture_stderr(run_init, out, sizeof out);
    assert_string_equal(out, "");
    support_setenv("MLA_LOG", "1"); /* ...unless asked */
    capture_stderr(run_init, out, sizeof out);
    assert_true(support_contains(out, "[mla] cpu: "));
    assert_true(support_contains(out, "[mla] backend ref"));
    assert_true(support_contains(out, "[mla] convert -> "));
    assert_true(support_contains(out, "[mla] prefill: error: MLA_PREFILL_BACKEND=cuda"));
    assert_true(support_contains(out, "[mla] threads: "));
}

/* ---- forcing through the API --------------------------------------------- */

static void test_force_api(void **state)
{
    (void)state;
    const char *auto_choice = selected(MLA_OP_DECODE, NULL);
    assert_int_equal(mla_force_backend(MLA_OP_DECODE, "ref"), MLA_OK);
    assert_string_equal(selected(MLA_OP_DECODE, NULL), "ref");
    support_expect_reject("mla_force_backend", "name of no backend",
                          mla_force_backend(MLA_OP_DECODE, "nope"), MLA_ERR_UNKNOWN_BACKEND,
                          "unknown backend 'nope'; valid backends: ");
    assert_string_equal(selected(MLA_OP_DECODE, NULL), "ref"); /* unchanged */
    assert_int_equal(mla_force_backend(MLA_OP_DECODE, NULL), MLA_OK);
    assert_string_equal(selected(MLA_OP_DECODE, NULL), auto_choice);
    support_expect_reject("mla_force_backend", "op not an mla_op",
                          mla_force_backend(MLA_OP_COUNT, "ref"), MLA_ERR_INVALID_ARGUMENT,
                          "out of range");
    /* a backend this CPU cannot run; then one it runs, forced, but the
     * config rules it out: the reasons say why */
#if defined(__x86_64__)
    const mla_cpu_raw *lacking = &support_cpu_zen3, *having = &support_cpu_sapphire_rapids;
    const char *name = "avx512_bf16", *lacks = "cpu lacks avx512f";
#else
    const mla_cpu_raw *lacking = &support_cpu_neoverse_n1, *having = &support_cpu_graviton3;
    const char *name = "neon_bf16", *lacks = "cpu lacks neon_bf16";
#endif
    support_use_cpu(lacking);
    support_expect_reject("mla_force_backend", "backend the CPU cannot run",
                          mla_force_backend(MLA_OP_DECODE, name), MLA_ERR_BACKEND_INVALID, lacks);
    assert_true(support_contains(mla_last_error(), "cannot run decode"));
    assert_true(support_contains(mla_last_error(), name));
    support_use_cpu(having);
    assert_int_equal(mla_force_backend(MLA_OP_DECODE, name), MLA_OK);
    mla_config cfg = mla_config_default();
    const mla_backend_desc *b;
    support_expect_reject("mla_select_backend", "forced backend that cannot run the config",
                          mla_select_backend(MLA_OP_DECODE, &cfg, &b), MLA_ERR_BACKEND_INVALID,
                          "cannot run decode: q dtype f32 not supported");
    assert_true(support_contains(mla_last_error(), name));
}

/* ---- custom backends -------------------------------------------------- */

static int custom_calls;

static void custom_bf16_f32(const uint16_t *src, float *dst, int64_t n)
{
    custom_calls++;
    for (int64_t i = 0; i < n; i++)
        dst[i] = (float)src[i]; /* deliberately not a bf16 decode: tells us who ran */
}

static void test_register_custom(void **state)
{
    (void)state;
    mla_backend_desc d = {
        .size = sizeof d,
        .name = "custom",
        .isa = "ref",
        .priority = 100,
        .ops = 1u << MLA_OP_CONVERT | 1u << MLA_OP_DECODE,
        .q_dtypes = MLA_DTYPE_BIT(MLA_DTYPE_F32),
        .cache_dtypes = MLA_DTYPE_BIT(MLA_DTYPE_BF16),
        .head_dims = {576, 320},
        .block_size_multiple = 16,
        .kernels = {.cvt_bf16_f32 = custom_bf16_f32},
    };
    assert_int_equal(mla_register_backend(&d, false), MLA_OK);
    assert_string_equal(mla_backend_at(0)->name, "custom");
    support_expect_reject("mla_register_backend", "name already registered, override false",
                          mla_register_backend(&d, false), MLA_ERR_ALREADY_EXISTS,
                          "already exists");

    uint16_t h[3] = {1, 2, 3};
    float f[3];
    custom_calls = 0;
    assert_int_equal(mla_convert(MLA_DTYPE_F32, f, MLA_DTYPE_BF16, h, 3, 1), MLA_OK);
    assert_string_equal(mla_last_backend(), "custom");
    assert_int_equal(custom_calls, 1);
    assert_true(f[2] == 3.0f);
    /* a kernel it left NULL is ref's */
    float one = 1.0f;
    assert_int_equal(mla_convert(MLA_DTYPE_BF16, h, MLA_DTYPE_F32, &one, 1, 1), MLA_OK);
    assert_int_equal(h[0], 0x3f80);
    assert_true(mla_backend_at(0)->kernels.exp_f32 != NULL);

    mla_config cfg = mla_config_default();
    cfg.kv_lora_rank = 36; /* L+R = 100 */
    cfg.block_size = 24;
    mla_reasons why;
    assert_int_equal(mla_backend_validate("custom", MLA_OP_DECODE, &cfg, &why), MLA_OK);
    assert_int_equal(why.count, 2);
    assert_string_equal(why.text[0], "head dim (L+R) 100 not supported (supported: 576, 320)");
    assert_string_equal(why.text[1], "block_size 24 not a multiple of 16");
    assert_int_equal(mla_backend_validate("custom", MLA_OP_PREFILL, NULL, &why), MLA_OK);
    assert_string_equal(why.text[0], "does not implement prefill");
    /* selection falls through to the next valid backend */
    assert_string_not_equal(selected(MLA_OP_DECODE, &cfg), "custom");
    assert_string_not_equal(selected(MLA_OP_PREFILL, NULL), "custom");

    d.priority = -1; /* override: replaced in place, re-sorted */
    assert_int_equal(mla_register_backend(&d, true), MLA_OK);
    assert_string_equal(mla_backend_at(mla_backend_count() - 1)->name, "custom");
}

static void test_override_builtin(void **state)
{
    (void)state;
    /* replace ref by a stricter one: then nothing can run block_size 7 on a
     * CPU without SIMD (one that offers none keeps the reasons of every other
     * backend short enough for the message to end with ref's) */
    static const mla_cpu_raw no_simd = {.arch = MLA_ARCH_OTHER};
    support_use_cpu(&no_simd);
    mla_backend_desc d = *mla_backend_find("ref");
    d.block_size_multiple = 16;
    d.kernels.cvt_bf16_f32 = custom_bf16_f32;
    assert_int_equal(mla_register_backend(&d, true), MLA_OK);
    int refs = 0;
    for (int i = 0; i < mla_backend_count(); i++)
        refs += strcmp(mla_backend_at(i)->name, "ref") == 0;
    assert_int_equal(refs, 1);

    mla_config cfg = mla_config_default();
    cfg.block_size = 7;
    const mla_backend_desc *b;
    support_expect_reject("mla_select_backend", "cfg no backend can run (block_size 7)",
                          mla_select_backend(MLA_OP_DECODE, &cfg, &b), MLA_ERR_NO_BACKEND,
                          "no backend can run decode: ");
    assert_true(support_contains(mla_last_error(), "ref: block_size 7 not a multiple of 16"));

    uint16_t h = 5;
    float f;
    custom_calls = 0;
    assert_int_equal(mla_convert(MLA_DTYPE_F32, &f, MLA_DTYPE_BF16, &h, 1, 1), MLA_OK);
    assert_int_equal(custom_calls, 1);
    assert_string_equal(mla_last_backend(), "ref");
}

static void test_block_size_supported(void **state)
{
    (void)state;
    mla_config cfg = mla_config_default();
    bool ok = false;
    int64_t multiple = 0;
    cfg.block_size = 7; /* built-ins take any block size */
    assert_int_equal(mla_block_size_supported(&cfg, &ok, &multiple), MLA_OK);
    assert_true(ok);
    assert_int_equal(multiple, 1);

    /* a decode backend wanting multiples of 16, a prefill one wanting 24 */
    mla_backend_desc d = *mla_backend_find("ref");
    d.name = "dec16";
    d.priority = 100;
    d.ops = 1u << MLA_OP_DECODE;
    d.block_size_multiple = 16;
    assert_int_equal(mla_register_backend(&d, false), MLA_OK);
    d.name = "pre24";
    d.ops = 1u << MLA_OP_PREFILL;
    d.block_size_multiple = 24;
    assert_int_equal(mla_register_backend(&d, false), MLA_OK);
    assert_int_equal(mla_block_size_supported(&cfg, &ok, &multiple), MLA_OK);
    assert_false(ok);
    assert_int_equal(multiple, 48);
    cfg.block_size = 96;
    assert_int_equal(mla_block_size_supported(&cfg, &ok, &multiple), MLA_OK);
    assert_true(ok);
    cfg.block_size = 0;
    support_expect_reject("mla_block_size_supported", "cfg block_size 0",
                          mla_block_size_supported(&cfg, &ok, &multiple), MLA_ERR_INVALID_ARGUMENT,
                          "block_size");
    support_expect_reject("mla_block_size_supported", "cfg NULL",
                          mla_block_size_supported(NULL, &ok, &multiple), MLA_ERR_INVALID_ARGUMENT,
                          "NULL argument");
}

static void test_register_bad_descriptors(void **state)
{
    (void)state;
    mla_backend_desc d = {.size = sizeof d, .name = ""};
    support_expect_reject("mla_register_backend", "desc NULL", mla_register_backend(NULL, false),
                          MLA_ERR_INVALID_ARGUMENT, "a named descriptor is required");
    support_expect_reject("mla_register_backend", "name empty", mla_register_backend(&d, false),
                          MLA_ERR_INVALID_ARGUMENT, "a named descriptor is required");
    d.name = "a_name_that_is_far_too_long_for_the_table";
    support_expect_reject("mla_register_backend", "name of 41 characters",
                          mla_register_backend(&d, false), MLA_ERR_INVALID_ARGUMENT,
                          "must be shorter");
    int before = mla_backend_count();
    char names[40][16];
    mla_status st = MLA_OK;
    for (int i = 0; i < 40 && st == MLA_OK; i++) {
        snprintf(names[i], sizeof names[i], "b%d", i);
        d.name = names[i];
        st = mla_register_backend(&d, false);
    }
    support_expect_reject("mla_register_backend", "a backend past the 32 listed at once", st,
                          MLA_ERR_CAPACITY, "backend table full");
    assert_true(mla_backend_count() > before);
}

/* A descriptor the registry handed out stays where it is and as it was,
 * whatever is registered later: ops on other threads hold such pointers. */
static void test_registration_moves_no_descriptor(void **state)
{
    (void)state;
    const mla_backend_desc *ref = mla_backend_find("ref");
    const mla_backend_desc *last = mla_backend_at(mla_backend_count() - 1);
    mla_cvt_bf16_f32_fn *ref_cvt = ref->kernels.cvt_bf16_f32;
    mla_backend_desc d = *ref;
    d.name = "first";
    d.priority = 1000; /* listed before every other */
    assert_int_equal(mla_register_backend(&d, false), MLA_OK);
    assert_string_equal(ref->name, "ref");
    assert_ptr_equal(mla_backend_find("ref"), ref);
    assert_string_equal(last->name, "ref");

    /* an override lists a new descriptor; the old one stays readable */
    d = *ref;
    d.kernels.cvt_bf16_f32 = custom_bf16_f32;
    assert_int_equal(mla_register_backend(&d, true), MLA_OK);
    assert_true(mla_backend_find("ref") != ref);
    assert_ptr_equal(mla_backend_find("ref")->kernels.cvt_bf16_f32, custom_bf16_f32);
    assert_string_equal(ref->name, "ref");
    assert_ptr_equal(ref->kernels.cvt_bf16_f32, ref_cvt);
    assert_string_equal(mla_backend_find("first")->name, "first");
}

static void test_registrations_are_bounded(void **state)
{
    (void)state;
    mla_backend_desc d = *mla_backend_find("ref");
    d.name = "again";
    mla_status st = mla_register_backend(&d, false);
    int made = 1;
    while (st == MLA_OK && made < 1000) {
        st = mla_register_backend(&d, true);
        made++;
    }
    support_expect_reject("mla_register_backend", "the 65th registration of a process", st,
                          MLA_ERR_CAPACITY, "registrations");
    assert_int_equal(made, 65); /* the 65th is refused */
    assert_string_equal(mla_backend_find("again")->name, "again");
}

/* ---- registration while ops run ------------------------------------------------- */

/* Worker threads run decode, a conversion and a cache write over and over
 * while the main thread registers backends: copies of the decode backend
 * with ever higher priority (so ops move to them mid-run), and overrides of
 * those copies (so the one an op is running on is replaced). Every result
 * must be the serial one, bit for bit: a copy has the same kernels. */

/* worker threads, OpenMP threads of each op, values converted (and cached
 * as RACE_N / RACE_WIDTH rows) */
enum { RACE_THREADS = 3, RACE_OMP = 2, RACE_N = 200, RACE_CACHE_ROWS = 8, RACE_WIDTH = 40 };

typedef struct race_outputs {
    unsigned char *out, *lse; /* decode's, in buffers shaped as the case's */
    uint8_t fp8[RACE_N];
    uint8_t cache[RACE_CACHE_ROWS * RACE_WIDTH];
} race_outputs;

typedef struct race_ctx {
    dcase dc;
    float src[RACE_N];
    int64_t slots[RACE_N / RACE_WIDTH];
    race_outputs want;
    char base[16]; /* the decode backend before any registration */
    atomic_bool registered;
} race_ctx;

typedef struct race_thread {
    race_ctx *ctx;
    int runs, failed, wrong, on_copies;
    char error[200];
} race_thread;

static bool race_outputs_alloc(const race_ctx *r, race_outputs *o)
{
    o->out = malloc(r->dc.out_bytes);
    o->lse = malloc(r->dc.lse_bytes);
    return o->out && o->lse;
}

static void race_outputs_free(race_outputs *o)
{
    free(o->out);
    free(o->lse);
}

/* The three ops into o (every byte of it set first); the first failure's
 * status. No cmocka calls: workers run it. */
static mla_status race_run(const race_ctx *r, race_outputs *o, char *backend, size_t size)
{
    memset(o->out, GUARD, r->dc.out_bytes);
    memset(o->lse, GUARD, r->dc.lse_bytes);
    memset(o->fp8, GUARD, sizeof o->fp8);
    memset(o->cache, GUARD, sizeof o->cache);
    mla_decode_args a = r->dc.args;
    a.out = o->out + ((const unsigned char *)a.out - r->dc.out_buf);
    a.lse = (float *)(o->lse + ((const unsigned char *)a.lse - r->dc.lse_buf));
    int64_t bytes;
    mla_status st = mla_decode_workspace_size(&a, RACE_OMP, &bytes);
    void *ws = st == MLA_OK ? malloc((size_t)bytes) : NULL;
    if (st == MLA_OK)
        st = ws ? mla_decode(&a, ws, bytes, RACE_OMP) : MLA_ERR_INVALID_ARGUMENT;
    free(ws);
    snprintf(backend, size, "%s", mla_last_backend());
    if (st == MLA_OK)
        st = mla_convert(MLA_DTYPE_FP8_E4M3, o->fp8, MLA_DTYPE_F32, r->src, RACE_N, RACE_OMP);
    mla_kv_cache cache = {.data = o->cache, .dtype = MLA_DTYPE_FP8_E4M3, .num_blocks = 2,
                          .block_size = RACE_CACHE_ROWS / 2, .width = RACE_WIDTH, .scale = 0.5f};
    if (st == MLA_OK)
        st = mla_concat_and_cache(&cache, r->src, RACE_WIDTH, r->src + RACE_WIDTH - 8, RACE_WIDTH,
                                  MLA_DTYPE_F32, RACE_WIDTH - 8, 8, r->slots,
                                  RACE_N / RACE_WIDTH, RACE_OMP);
    return st;
}

static bool race_same(const race_ctx *r, const race_outputs *o)
{
    return memcmp(o->out, r->want.out, r->dc.out_bytes) == 0 &&
           memcmp(o->lse, r->want.lse, r->dc.lse_bytes) == 0 &&
           memcmp(o->fp8, r->want.fp8, sizeof o->fp8) == 0 &&
           memcmp(o->cache, r->want.cache, sizeof o->cache) == 0;
}

/* Runs until the registrations are done and it has run twice since. */
static void *race_worker(void *arg)
{
    race_thread *t = arg;
    race_ctx *r = t->ctx;
    race_outputs o;
    bool allocated = race_outputs_alloc(r, &o);
    for (int after = 0; after < 2 && allocated;) {
        bool registered = atomic_load(&r->registered);
        char backend[32];
        mla_status st = race_run(r, &o, backend, sizeof backend);
        t->runs++;
        if (st != MLA_OK) {
            if (!t->failed++)
                snprintf(t->error, sizeof t->error, "%s: %s", mla_status_str(st), mla_last_error());
        } else if (!race_same(r, &o)) {
            t->wrong++;
        }
        if (strncmp(backend, "copy", 4) == 0)
            t->on_copies++;
        else if (strcmp(backend, r->base) != 0 && !t->failed++)
            snprintf(t->error, sizeof t->error, "decode ran on %s", backend);
        after += registered;
    }
    if (!allocated && !t->failed++)
        snprintf(t->error, sizeof t->error, "out of memory");
    race_outputs_free(&o);
    return NULL;
}

static void test_register_while_ops_run(void **state)
{
    (void)state;
    race_ctx *r = calloc(1, sizeof *r);
    assert_non_null(r);
    dspec s = {.q_dtype = MLA_DTYPE_F32, .cache_dtype = MLA_DTYPE_BF16, .s_q = 1, .H = 4, .L = 32,
               .R = 8, .block_size = 16, .num_reqs = 2, .lens = {41, 17}, .lse = true,
               .threads = 1};
    dcase_make(&r->dc, &s, true);
    for (int i = 0; i < RACE_N; i++)
        r->src[i] = (float)case_uniform() * 4.0f;
    for (int i = 0; i < RACE_N / RACE_WIDTH; i++)
        r->slots[i] = (i * 3) % RACE_CACHE_ROWS;
    /* f32 q: the f32 route, which registration's route timing never
     * passes over, so a copy is chosen as surely as the original */
    const mla_backend_desc *base;
    mla_config cfg = case_config_of(&r->dc.args);
    assert_int_equal(mla_select_backend(MLA_OP_DECODE, &cfg, &base), MLA_OK);
    snprintf(r->base, sizeof r->base, "%s", base->name);

    assert_true(race_outputs_alloc(r, &r->want));
    char backend[32];
    assert_int_equal(race_run(r, &r->want, backend, sizeof backend), MLA_OK);
    assert_string_equal(backend, r->base);
    memcpy(r->dc.out_buf, r->want.out, r->dc.out_bytes);
    memcpy(r->dc.lse_buf, r->want.lse, r->dc.lse_bytes);
    dcase_check(&r->dc, r->base); /* the serial result is right */

    race_thread t[RACE_THREADS] = {0};
    pthread_t id[RACE_THREADS];
    for (int i = 0; i < RACE_THREADS; i++) {
        t[i].ctx = r;
        assert_int_equal(pthread_create(&id[i], NULL, race_worker, &t[i]), 0);
    }
    mla_backend_desc d = *base;
    char names[12][16];
    for (int i = 0; i < 12; i++) {
        snprintf(names[i], sizeof names[i], "copy%d", i);
        d.name = names[i];
        d.priority = 100 + i;
        assert_int_equal(mla_register_backend(&d, false), MLA_OK);
        assert_int_equal(mla_register_backend(&d, true), MLA_OK);
        usleep(1000);
    }
    atomic_store(&r->registered, true);
    int on_copies = 0;
    for (int i = 0; i < RACE_THREADS; i++) {
        assert_int_equal(pthread_join(id[i], NULL), 0);
        if (t[i].failed)
            fail_msg("worker %d: %d of %d runs failed: %s", i, t[i].failed, t[i].runs, t[i].error);
        if (t[i].wrong)
            fail_msg("worker %d: %d of %d runs gave other bits than the serial run", i,
                     t[i].wrong, t[i].runs);
        on_copies += t[i].on_copies;
    }
    assert_true(on_copies >= 2 * RACE_THREADS); /* the ops did move to the copies */
    assert_string_equal(selected(MLA_OP_DECODE, &cfg), "copy11");
    race_outputs_free(&r->want);
    dcase_free(&r->dc);
    free(r);
}

/* ---- AMX permission --------------------------------------------------------- */

/* Sapphire Rapids before anyone has asked Linux for its tile state. */
static const mla_cpu_raw *spr_unpermitted(void)
{
    static mla_cpu_raw raw;
    raw = support_cpu_sapphire_rapids;
    raw.amx_permitted = false;
    return &raw;
}

/* The request seam: counts the requests and gives the answer set. */
static int amx_requests;
static bool amx_answer;

static bool counting_amx_request(void)
{
    amx_requests++;
    return amx_answer;
}

/* Presents `raw` with AMX requests counted from zero and answered `answer`. */
static void use_cpu_answering_amx(const mla_cpu_raw *raw, bool answer)
{
    support_use_cpu(raw);
    mla_dispatch_set_amx_request(counting_amx_request);
    amx_requests = 0;
    amx_answer = answer;
}

/* The name of a backend needing AMX: the built-in one where this build has
 * it (initializing first, which asks for the tile state if it can run),
 * else one registered here with ref's kernels (which then asks). */
static const char *amx_backend(void)
{
    for (int i = 0; i < mla_backend_count(); i++)
        if (mla_backend_at(i)->required_caps & X86_AMX)
            return mla_backend_at(i)->name;
    mla_backend_desc d = {
        .size = sizeof d,
        .name = "test_amx",
        .isa = "ref",
        .priority = -1, /* never auto-selected */
        .required_caps = X86_AVX512_BASE | MLA_CAP_AMX_TILE | MLA_CAP_AMX_BF16,
        .ops = 1u << MLA_OP_DECODE,
        .q_dtypes = MLA_DTYPE_BIT(MLA_DTYPE_BF16),
        .cache_dtypes = MLA_DTYPE_BIT(MLA_DTYPE_BF16),
    };
    assert_int_equal(mla_register_backend(&d, false), MLA_OK);
    return "test_amx";
}

static void test_amx_requested_once(void **state)
{
    (void)state;
    use_cpu_answering_amx(spr_unpermitted(), true);
    const char *name = amx_backend();
    assert_int_equal(amx_requests, 1);
    assert_int_equal(mla_cpu_caps() & X86_AMX, MLA_CAP_AMX_TILE | MLA_CAP_AMX_BF16);
    mla_reasons why;
    assert_int_equal(mla_backend_validate(name, MLA_OP_DECODE, NULL, &why), MLA_OK);
    assert_int_equal(why.count, 0);
    /* once per init: neither another call nor another AMX backend asks again */
    mla_init();
    mla_backend_desc d = *mla_backend_find(name);
    d.name = "test_amx_2";
    assert_int_equal(mla_register_backend(&d, false), MLA_OK);
    assert_int_equal(amx_requests, 1);
}

static void test_amx_not_requested_when_permitted(void **state)
{
    (void)state;
    use_cpu_answering_amx(&support_cpu_sapphire_rapids, false);
    amx_backend();
    assert_int_equal(amx_requests, 0);
    assert_int_equal(mla_cpu_caps() & X86_AMX, MLA_CAP_AMX_TILE | MLA_CAP_AMX_BF16);
}

static void test_amx_not_requested_under_max_isa(void **state)
{
    (void)state;
    use_cpu_answering_amx(spr_unpermitted(), true);
    support_setenv("MLA_MAX_ISA", "avx2");
    amx_backend();
    assert_int_equal(amx_requests, 0);
    assert_false(mla_cpu_caps_detected() & X86_AMX);
    /* the avx512_amx level keeps AMX, so there it is asked for */
    support_setenv("MLA_MAX_ISA", "avx512_amx");
    amx_backend();
    assert_int_equal(amx_requests, 1);
    support_setenv("MLA_MAX_ISA", NULL);
}

static void test_amx_not_requested_without_amx(void **state)
{
    (void)state;
    const mla_cpu_raw *no_amx[] = {&support_cpu_zen3, &support_cpu_spr_no_zmm_os,
                                   &support_cpu_graviton3};
    for (size_t i = 0; i < sizeof no_amx / sizeof no_amx[0]; i++) {
        use_cpu_answering_amx(no_amx[i], true);
        amx_backend();
        assert_int_equal(amx_requests, 0);
        assert_false(mla_cpu_caps() & X86_AMX);
    }
}

static void test_amx_hook_only_for_fake_cpu(void **state)
{
    (void)state;
    use_cpu_answering_amx(NULL, true); /* the real CPU: Linux answers */
    amx_backend();
    assert_int_equal(amx_requests, 0);
}

static void test_amx_refused_is_a_reason(void **state)
{
    (void)state;
    use_cpu_answering_amx(spr_unpermitted(), false);
    const char *name = amx_backend();
    assert_int_equal(amx_requests, 1);
    mla_caps caps = mla_cpu_caps();
    assert_false(caps & X86_AMX);
    assert_int_equal(caps & (X86_AVX512_BASE | MLA_CAP_AVX512_BF16),
                     X86_AVX512_BASE | MLA_CAP_AVX512_BF16);
    mla_reasons why;
    assert_int_equal(mla_backend_validate(name, MLA_OP_DECODE, NULL, &why), MLA_OK);
    assert_int_equal(why.count, 2);
    assert_string_equal(why.text[0], "cpu has amx_tile but Linux refused its tile state "
                                     "(arch_prctl ARCH_REQ_XCOMP_PERM)");
    assert_true(support_contains(why.text[1], "cpu has amx_bf16 but Linux refused"));
#if defined(__x86_64__)
    /* the other backends run as before */
    assert_string_equal(selected(MLA_OP_CONVERT, NULL), "avx512_bf16");
#endif
    support_expect_reject("mla_force_backend", "an AMX backend where Linux refused the tile state",
                          mla_force_backend(MLA_OP_DECODE, name), MLA_ERR_BACKEND_INVALID,
                          "refused its tile state");
}

static void run_amx_backend(void)
{
    amx_backend();
}

static void test_amx_log(void **state)
{
    (void)state;
    char out[8192];
    use_cpu_answering_amx(spr_unpermitted(), false);
    support_setenv("MLA_LOG", "1");
    capture_stderr(run_amx_backend, out, sizeof out);
    assert_true(support_contains(out, "[mla] amx: asked Linux for tile state "
                                      "(arch_prctl ARCH_REQ_XCOMP_PERM): refused"));
    support_setenv("MLA_MAX_ISA", "avx2");
    capture_stderr(run_init, out, sizeof out);
    assert_true(support_contains(out, "[mla] amx: tile state not requested"));
    support_setenv("MLA_MAX_ISA", NULL);
}

/* ---- status, messages, init ---------------------------------------------- */

static void test_status_strings(void **state)
{
    (void)state;
    for (int a = MLA_OK; a <= MLA_ERR_BAD_ENV; a++) {
        assert_true(strncmp(mla_status_str((mla_status)a), "MLA_", 4) == 0);
        for (int b = MLA_OK; b < a; b++)
            assert_string_not_equal(mla_status_str((mla_status)a), mla_status_str((mla_status)b));
    }
    assert_string_equal(mla_status_str((mla_status)99), "MLA_ERR_UNKNOWN_STATUS");
    assert_string_equal(mla_dtype_name(MLA_DTYPE_FP8_E4M3), "fp8_e4m3");
    assert_string_equal(mla_op_name(MLA_OP_PREFILL), "prefill");
}

static void *fail_in_thread(void *arg)
{
    (void)arg;
    mla_force_backend(MLA_OP_DECODE, "elsewhere");
    return (void *)(strstr(mla_last_error(), "elsewhere") != NULL ? (void *)1 : NULL);
}

static void test_last_error_is_thread_local(void **state)
{
    (void)state;
    support_expect_reject("mla_force_backend", "name of no backend",
                          mla_force_backend(MLA_OP_DECODE, "here"), MLA_ERR_UNKNOWN_BACKEND,
                          "'here'");
    pthread_t t;
    void *ok;
    pthread_create(&t, NULL, fail_in_thread, NULL);
    pthread_join(t, &ok);
    assert_non_null(ok);
    assert_true(support_contains(mla_last_error(), "'here'"));
}

static int reads;
static void counting_reader(mla_cpu_raw *raw)
{
    __atomic_fetch_add(&reads, 1, __ATOMIC_SEQ_CST);
    usleep(20000); /* widen the window for a racing second init */
    *raw = support_cpu_zen3;
}

static void *init_from_thread(void *arg)
{
    *(mla_caps *)arg = mla_cpu_caps();
    return NULL;
}

static void test_init_once_across_threads(void **state)
{
    (void)state;
    support_use_cpu(NULL);
    mla_set_cpu_reader(counting_reader);
    reads = 0;
    pthread_t t[8];
    mla_caps caps[8];
    for (int i = 0; i < 8; i++)
        pthread_create(&t[i], NULL, init_from_thread, &caps[i]);
    for (int i = 0; i < 8; i++) {
        pthread_join(t[i], NULL);
        assert_int_equal(caps[i], X86_AVX2_LEVEL);
    }
    assert_int_equal(reads, 1);
    mla_set_cpu_reader(NULL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_decode_zen3, reset_state),
        cmocka_unit_test_setup(test_decode_sapphire_rapids, reset_state),
        cmocka_unit_test_setup(test_decode_os_without_zmm_state, reset_state),
        cmocka_unit_test_setup(test_decode_amx_permission_denied, reset_state),
        cmocka_unit_test_setup(test_decode_granite_rapids, reset_state),
        cmocka_unit_test_setup(test_decode_without_osxsave, reset_state),
        cmocka_unit_test_setup(test_decode_graviton3, reset_state),
        cmocka_unit_test_setup(test_cap_names, reset_state),
        cmocka_unit_test_setup(test_fake_reader_drives_caps, reset_state),
        cmocka_unit_test_setup(test_registry_in_priority_order, reset_state),
        cmocka_unit_test_setup(test_selection_per_cpu, reset_state),
        cmocka_unit_test_setup(test_validate_reasons, reset_state),
        cmocka_unit_test_setup(test_backend_route, reset_state),
        cmocka_unit_test_setup(test_env_max_isa, reset_state),
        cmocka_unit_test_setup(test_env_forced_backend, reset_state),
        cmocka_unit_test_setup(test_env_unknown_backend, reset_state),
        cmocka_unit_test_setup(test_env_invalid_backend, reset_state),
        cmocka_unit_test_setup(test_env_log, reset_state),
        cmocka_unit_test_setup(test_force_api, reset_state),
        cmocka_unit_test_setup(test_register_custom, reset_state),
        cmocka_unit_test_setup(test_override_builtin, reset_state),
        cmocka_unit_test_setup(test_block_size_supported, reset_state),
        cmocka_unit_test_setup(test_register_bad_descriptors, reset_state),
        cmocka_unit_test_setup(test_registration_moves_no_descriptor, reset_state),
        cmocka_unit_test_setup(test_registrations_are_bounded, reset_state),
        cmocka_unit_test_setup(test_register_while_ops_run, reset_state),
        cmocka_unit_test_setup(test_amx_requested_once, reset_state),
        cmocka_unit_test_setup(test_amx_not_requested_when_permitted, reset_state),
        cmocka_unit_test_setup(test_amx_not_requested_under_max_isa, reset_state),
        cmocka_unit_test_setup(test_amx_not_requested_without_amx, reset_state),
        cmocka_unit_test_setup(test_amx_hook_only_for_fake_cpu, reset_state),
        cmocka_unit_test_setup(test_amx_refused_is_a_reason, reset_state),
        cmocka_unit_test_setup(test_amx_log, reset_state),
        cmocka_unit_test_setup(test_status_strings, reset_state),
        cmocka_unit_test_setup(test_last_error_is_thread_local, reset_state),
        cmocka_unit_test_setup(test_init_once_across_threads, reset_state),
    };
    return cmocka_run_group_tests_name("dispatch", tests, NULL, reset_state);
}
