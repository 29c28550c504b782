/* MLA_VERBOSE's per-call trace (one line per top-level call, its fields
 * those of the call), MLA_MAX_ISA's level names in any case, and MLA_LOG's
 * backend for a config against mla_select_backend's (which `make run`
 * prints). */
#include "support.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define OUT_LEN 16384

/* ---- capturing stderr ------------------------------------------------------ */

typedef struct capture {
    int saved;
    FILE *tmp;
} capture;

static capture capture_begin(void)
{
    fflush(stderr);
    capture c = {.saved = dup(2), .tmp = tmpfile()};
    assert_non_null(c.tmp);
    dup2(fileno(c.tmp), 2);
    return c;
}

/* What the process wrote to stderr since capture_begin. */
static void capture_end(capture *c, char *buf, size_t size)
{
    fflush(stderr);
    dup2(c->saved, 2);
    close(c->saved);
    rewind(c->tmp);
    size_t n = fread(buf, 1, size - 1, c->tmp);
    buf[n] = '\0';
    fclose(c->tmp);
}

static int count_lines(const char *text)
{
    int n = 0;
    for (; *text; text++)
        n += *text == '\n';
    return n;
}

/* The value of `key` in a trace line ("" if absent): the text after
 * ",key=" up to the next comma or the line's end. */
static const char *field(const char *line, const char *key, char *value, size_t size)
{
    char pattern[64];
    snprintf(pattern, sizeof pattern, ",%s=", key);
    const char *at = strstr(line, pattern);
    size_t n = 0;
    if (at) {
        at += strlen(pattern);
        while (at[n] && at[n] != ',' && at[n] != '\n' && n + 1 < size)
            n++;
        memcpy(value, at, n);
    }
    value[n] = '\0';
    return value;
}

/* Fails unless out is one trace line of `fn` whose fields say the given
 * backend, route and status, hold `shape` and a time >= 0. */
static void expect_line(const char *out, const char *fn, const char *backend, const char *route,
                        const char *shape, int threads, const char *status)
{
    char prefix[128], value[64], want[16];
    assert_int_equal(count_lines(out), 1);
    snprintf(prefix, sizeof prefix, "mla_verbose,exec,%s,", fn);
    assert_true(support_contains(out, prefix));
    assert_ptr_equal(strstr(out, prefix), out);
    assert_string_equal(field(out, "backend", value, sizeof value), backend);
    assert_string_equal(field(out, "route", value, sizeof value), route);
    assert_true(support_contains(out, shape));
    snprintf(want, sizeof want, "%d", threads);
    assert_string_equal(field(out, "threads", value, sizeof value), want);
    assert_string_equal(field(out, "status", value, sizeof value), status);
    char *end;
    double us = strtod(field(out, "time_us", value, sizeof value), &end);
    assert_true(value[0] != '\0' && *end == '\0');
    assert_true(us >= 0.0);
}

/* ---- the calls traced ------------------------------------------------------- */

enum { N = 100 };

static mla_status convert_call(int64_t n)
{
    static float src[N];
    static uint16_t dst[N];
    return mla_convert(MLA_DTYPE_BF16, dst, MLA_DTYPE_F32, src, n, 3);
}

static mla_status split_call(int64_t num_reqs)
{
    static const int32_t qsl[] = {0, 1, 2, 10};
    mla_batch_split split;
    return mla_split_batch(qsl, num_reqs, 1, false, &split);
}

/* One request of 5 tokens (s_q 1) over one block of a bf16 cache, 2 heads,
 * L = 16, R = 4: the call builds its schedule with the public
 * mla_build_decode_sched, which must not make a line of its own. */
enum { H = 2, L = 16, R = 4, BLOCK = 16 };

/* The route the backend decode selects takes for decode_call's config. */
static const char *decode_route(void)
{
    mla_config cfg = {.q_dtype = MLA_DTYPE_BF16, .cache_dtype = MLA_DTYPE_BF16,
                      .kv_lora_rank = L, .rope_dim = R, .num_heads = H, .block_size = BLOCK};
    const mla_backend_desc *b;
    assert_int_equal(mla_select_backend(MLA_OP_DECODE, &cfg, &b), MLA_OK);
    return mla_backend_route(b->name, &cfg);
}

static mla_status decode_call(int64_t seq_len)
{
    static uint16_t cache_data[BLOCK * (L + R)], q[H * (L + R)], out[H * L];
    static unsigned char workspace[1 << 20];
    mla_kv_cache cache = {.data = cache_data, .dtype = MLA_DTYPE_BF16, .num_blocks = 1,
                          .block_size = BLOCK, .width = L + R};
    const int32_t block_table[1] = {0};
    const int32_t seq_lens[1] = {(int32_t)seq_len};
    mla_decode_args a = {.num_reqs = 1, .s_q = 1, .num_heads = H, .kv_lora_rank = L,
                         .rope_dim = R, .scale = 0.125f, .q_dtype = MLA_DTYPE_BF16,
                         .q_nope = q, .q_nope_token_stride = H * (L + R),
                         .q_nope_head_stride = L + R, .q_pe = q + L,
                         .q_pe_token_stride = H * (L + R), .q_pe_head_stride = L + R,
                         .cache = &cache, .block_table = block_table, .block_table_cols = 1,
                         .seq_lens = seq_lens, .out = out, .out_token_stride = H * L,
                         .out_head_stride = L};
    return mla_decode(&a, workspace, sizeof workspace, 2);
}

/* ---- MLA_VERBOSE ------------------------------------------------------------ */

static int clean_state(void **state)
{
    (void)state;
    support_use_cpu(NULL);
    return 0;
}

static void test_off_prints_nothing(void **state)
{
    (void)state;
    char out[OUT_LEN];
    const char *values[] = {NULL, "0", ""};
    for (size_t i = 0; i < sizeof values / sizeof values[0]; i++) {
        support_setenv("MLA_VERBOSE", values[i]);
        capture c = capture_begin();
        assert_int_equal(convert_call(N), MLA_OK);
        assert_int_equal(convert_call(-1), MLA_ERR_INVALID_ARGUMENT);
        assert_int_equal(split_call(3), MLA_OK);
        assert_int_equal(decode_call(5), MLA_OK);
        capture_end(&c, out, sizeof out);
        assert_string_equal(out, "");
    }
}

static void test_op_line(void **state)
{
    (void)state;
    char out[OUT_LEN];
    support_setenv("MLA_VERBOSE", "1");
    capture c = capture_begin();
    mla_status st = convert_call(N);
    capture_end(&c, out, sizeof out);
    assert_int_equal(st, MLA_OK);
    expect_line(out, "mla_convert", mla_last_backend(), "none", ",src=f32,dst=bf16,n=100,", 3,
                "ok");
}

static void test_rejected_call_line(void **state)
{
    (void)state;
    char out[OUT_LEN];
    support_setenv("MLA_VERBOSE", "1");
    capture c = capture_begin();
    mla_status st = convert_call(-1);
    capture_end(&c, out, sizeof out);
    assert_int_equal(st, MLA_ERR_INVALID_ARGUMENT);
    expect_line(out, "mla_convert", "none", "none", ",n=-1,", 3, "invalid_argument");

    mla_decode_args zero = {0};
    c = capture_begin();
    st = mla_decode(&zero, NULL, 0, 1);
    capture_end(&c, out, sizeof out);
    assert_int_equal(st, MLA_ERR_INVALID_ARGUMENT);
    expect_line(out, "mla_decode", "none", "none", ",q=f32,cache=none,B=0,s_q=0,", 1,
                "invalid_argument");

    c = capture_begin();
    st = mla_decode(NULL, NULL, 0, 1);
    capture_end(&c, out, sizeof out);
    expect_line(out, "mla_decode", "none", "none", ",args=null,", 1, "invalid_argument");
}

static void test_decode_line(void **state)
{
    (void)state;
    char out[OUT_LEN];
    support_setenv("MLA_VERBOSE", "1");
    const char *route = decode_route();
    capture c = capture_begin();
    mla_status st = decode_call(5);
    capture_end(&c, out, sizeof out);
    assert_int_equal(st, MLA_OK);
    /* one line: the schedule it builds through mla_build_decode_sched is part of it */
    expect_line(out, "mla_decode", mla_last_backend(), route,
                ",q=bf16,cache=bf16,B=1,s_q=1,H=2,L=16,R=4,", 2, "ok");

    c = capture_begin();
    st = decode_call(BLOCK + 1); /* past its one block */
    capture_end(&c, out, sizeof out);
    assert_int_equal(st, MLA_ERR_OUT_OF_RANGE);
    expect_line(out, "mla_decode", "none", "none", ",q=bf16,cache=bf16,B=1,", 2, "out_of_range");
}

/* The up-projection's route is the GEMM route the call took: f32 for f32
 * operands; for bf16 ones the route packing kv_b_proj ahead took too. */
static const char *up_proj_route(mla_dtype dtype, bool packed, char *route, size_t size)
{
    enum { S = 3, H = 2, L = 8, P = 4, V = 4 };
    static float buf[4 * H * (P + V) * L];
    static unsigned char packed_w[16384], workspace[1 << 20];
    mla_up_proj_args a = {.num_tokens = S, .num_heads = H, .kv_lora_rank = L, .qk_nope_dim = P,
                          .v_head_dim = V, .kv_c = buf, .kv_c_dtype = dtype, .kv_c_stride = L,
                          .kv_b_proj = buf + S * L, .w_dtype = dtype, .k_nope = buf + 2 * H * (P + V) * L,
                          .k_nope_token_stride = H * P, .k_nope_head_stride = P,
                          .v = buf + 3 * H * (P + V) * L, .v_token_stride = H * V, .v_head_stride = V,
                          .out_dtype = dtype};
    char out[OUT_LEN];
    int64_t bytes;
    capture c = capture_begin();
    if (packed) {
        assert_int_equal(mla_pack_kv_b_proj_size(&a, &bytes), MLA_OK);
        assert_true(bytes <= (int64_t)sizeof packed_w);
        assert_int_equal(mla_pack_kv_b_proj(&a, packed_w, bytes, 1), MLA_OK);
    } else {
        assert_int_equal(mla_up_proj_workspace_size(&a, 1, &bytes), MLA_OK);
        assert_true(bytes <= (int64_t)sizeof workspace);
        assert_int_equal(mla_up_proj(&a, workspace, bytes, 1), MLA_OK);
    }
    capture_end(&c, out, sizeof out);
    assert_int_equal(count_lines(out), 1);
    assert_non_null(strstr(out, packed ? "mla_verbose,exec,mla_pack_kv_b_proj,"
                                       : "mla_verbose,exec,mla_up_proj,"));
    return field(out, "route", route, size);
}

static void test_up_proj_route(void **state)
{
    (void)state;
    char route[32], packed_route[32];
    support_setenv("MLA_VERBOSE", "1");
    assert_string_equal(up_proj_route(MLA_DTYPE_F32, false, route, sizeof route), "f32");
    assert_string_equal(up_proj_route(MLA_DTYPE_F32, true, route, sizeof route), "f32");
    up_proj_route(MLA_DTYPE_BF16, false, route, sizeof route);
    up_proj_route(MLA_DTYPE_BF16, true, packed_route, sizeof packed_route);
    assert_string_equal(route, packed_route);
    assert_true(strcmp(route, "f32") == 0 || strcmp(route, "bf16-dot") == 0 ||
                strcmp(route, "amx-bf16") == 0);
}

static void test_builder_line(void **state)
{
    (void)state;
    char out[OUT_LEN];
    /* a builder as the first call reads MLA_VERBOSE itself */
    support_setenv("MLA_VERBOSE", "1");
    capture c = capture_begin();
    mla_status st = split_call(3);
    capture_end(&c, out, sizeof out);
    assert_int_equal(st, MLA_OK);
    expect_line(out, "mla_split_batch", "none", "none", ",B=3,threshold=1,", 1, "ok");

    c = capture_begin();
    st = split_call(-1);
    capture_end(&c, out, sizeof out);
    assert_int_equal(st, MLA_ERR_INVALID_ARGUMENT);
    expect_line(out, "mla_split_batch", "none", "none", ",B=-1,", 1, "invalid_argument");
}

static void test_line_per_call(void **state)
{
    (void)state;
    char out[OUT_LEN];
    support_setenv("MLA_VERBOSE", "1");
    capture c = capture_begin();
    for (int i = 0; i < 5; i++)
        convert_call(N);
    split_call(3);
    decode_call(5);
    capture_end(&c, out, sizeof out);
    assert_int_equal(count_lines(out), 7);
    const char *line = out;
    for (int i = 0; i < 7; i++, line = strchr(line, '\n') + 1)
        assert_int_equal(strncmp(line, "mla_verbose,exec,mla_", 21), 0);
}

/* ---- MLA_MAX_ISA ------------------------------------------------------------ */

#define X86_AVX2 (MLA_CAP_SSE42 | MLA_CAP_AVX2 | MLA_CAP_FMA | MLA_CAP_F16C)
#define X86_AVX512 (X86_AVX2 | MLA_CAP_AVX512F | MLA_CAP_AVX512BW | MLA_CAP_AVX512VL | \
                    MLA_CAP_AVX512DQ)

static mla_caps caps_under(const mla_cpu_raw *cpu, const char *level)
{
    support_use_cpu(cpu);
    support_setenv("MLA_MAX_ISA", level);
    assert_int_equal(mla_init(), MLA_OK);
    return mla_cpu_caps();
}

static void test_max_isa_levels(void **state)
{
    (void)state;
    const mla_cpu_raw *spr = &support_cpu_sapphire_rapids, *g3 = &support_cpu_graviton3;
    mla_caps all_spr = caps_under(spr, NULL), all_g3 = caps_under(g3, NULL);
    assert_int_equal(caps_under(spr, "REF"), 0);
    assert_int_equal(caps_under(spr, "AVX2"), X86_AVX2);
    assert_int_equal(caps_under(spr, "Avx512"), X86_AVX512);
    assert_int_equal(caps_under(spr, "AVX512_BF16"), X86_AVX512 | MLA_CAP_AVX512_BF16);
    assert_int_equal(caps_under(spr, "avx512_AMX"), all_spr);
    assert_int_equal(caps_under(spr, "neon"), 0);
    assert_int_equal(caps_under(g3, "NEON"), MLA_CAP_NEON);
    const mla_caps fhm = MLA_CAP_NEON | MLA_CAP_NEON_FP16 | MLA_CAP_NEON_FHM;
    assert_int_equal(caps_under(g3, "Neon_FP16"), fhm);
    assert_int_equal(caps_under(g3, "neon_fhm"), fhm);
    assert_int_equal(caps_under(g3, "NEON_BF16"), all_g3);
    assert_int_equal(caps_under(g3, "avx512_amx"), 0);
#if defined(__x86_64__)
    /* each level names the backend it lets run, and the others above go */
    const char *names[] = {"ref", "avx2", "avx512", "avx512_bf16", "avx512_amx"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        caps_under(spr, names[i]);
        const mla_backend_desc *b;
        assert_int_equal(mla_select_backend(MLA_OP_CONVERT, NULL, &b), MLA_OK);
        assert_string_equal(b->name, names[i]);
    }
#endif
}

static void test_max_isa_unknown(void **state)
{
    (void)state;
    char out[OUT_LEN];
    support_use_cpu(&support_cpu_sapphire_rapids);
    support_setenv("MLA_LOG", "1");
    support_setenv("MLA_MAX_ISA", "avx9000");
    capture c = capture_begin();
    mla_status st = mla_init();
    capture_end(&c, out, sizeof out);
    support_expect_reject("mla_init", "MLA_MAX_ISA=avx9000", st, MLA_ERR_BAD_ENV,
                          "MLA_MAX_ISA=avx9000 is not one of: ref, avx2, avx512, avx512_bf16, "
                          "avx512_amx, neon, neon_fp16, neon_fhm, neon_bf16 (in any case)");
    assert_true(support_contains(out, "[mla] error: MLA_MAX_ISA=avx9000 is not one of: "));
}

/* ---- MLA_LOG against mla_select_backend ------------------------------------------ */

/* MLA_LOG's "<op> -> <backend>" for each op is the backend
 * mla_select_backend gives for the config it names (`make run` prints
 * mla_select_backend's for that config): on a CPU with AMX, an f32-q decode
 * does not run on avx512_amx, whatever a config-less choice would say. */
static void test_log_agrees_with_selection(void **state)
{
    (void)state;
    const mla_cpu_raw *cpus[] = {NULL, &support_cpu_sapphire_rapids, &support_cpu_zen3};
    for (size_t i = 0; i < sizeof cpus / sizeof cpus[0]; i++) {
        char out[OUT_LEN];
        support_use_cpu(cpus[i]);
        support_setenv("MLA_LOG", "1");
        capture c = capture_begin();
        mla_init();
        capture_end(&c, out, sizeof out);
        const mla_config cfg = mla_config_default();
        for (int op = 0; op < MLA_OP_COUNT; op++) {
            const mla_backend_desc *b;
            assert_int_equal(mla_select_backend((mla_op)op, op == MLA_OP_CONVERT ? NULL : &cfg, &b),
                             MLA_OK);
            char want[128];
            snprintf(want, sizeof want, "[mla] %s -> %s%s", mla_op_name((mla_op)op), b->name,
                     op == MLA_OP_CONVERT ? "\n" : " (route ");
            assert_true(support_contains(out, want));
        }
        assert_true(support_contains(out, "for q f32, cache bf16, L=512, R=64, heads=128, "
                                          "block_size=64"));
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_off_prints_nothing, clean_state),
        cmocka_unit_test_setup(test_op_line, clean_state),
        cmocka_unit_test_setup(test_rejected_call_line, clean_state),
        cmocka_unit_test_setup(test_decode_line, clean_state),
        cmocka_unit_test_setup(test_up_proj_route, clean_state),
        cmocka_unit_test_setup(test_builder_line, clean_state),
        cmocka_unit_test_setup(test_line_per_call, clean_state),
        cmocka_unit_test_setup(test_max_isa_levels, clean_state),
        cmocka_unit_test_setup(test_max_isa_unknown, clean_state),
        cmocka_unit_test_setup(test_log_agrees_with_selection, clean_state),
    };
    int failed = cmocka_run_group_tests(tests, NULL, NULL);
    support_use_cpu(NULL);
    return failed;
}
