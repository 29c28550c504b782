#include "support.h"

#include "dispatch/dispatch.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* CPUID.1:ECX FMA, SSE4.2, OSXSAVE, AVX, F16C */
#define ECX1_AVX_CLASS ((1u << 12) | (1u << 20) | (1u << 27) | (1u << 28) | (1u << 29))

const mla_cpu_raw support_cpu_zen3 = {
    .arch = MLA_ARCH_X86_64,
    .max_leaf = 16,
    .leaf1_ecx = ECX1_AVX_CLASS,
    .leaf7_ebx = 1u << 5, /* AVX2 */
    .xcr0 = 0x7,          /* x87, SSE, AVX */
};

/* AVX512F/DQ/BW/VL + AVX2; AMX-BF16/AVX512_FP16/AMX-TILE; AVX512_BF16 */
#define SPR_LEAF7_EBX ((1u << 5) | (1u << 16) | (1u << 17) | (1u << 30) | (1u << 31))
#define SPR_LEAF7_EDX ((1u << 22) | (1u << 23) | (1u << 24))

const mla_cpu_raw support_cpu_sapphire_rapids = {
    .arch = MLA_ARCH_X86_64,
    .max_leaf = 32,
    .leaf1_ecx = ECX1_AVX_CLASS,
    .leaf7_ebx = SPR_LEAF7_EBX,
    .leaf7_edx = SPR_LEAF7_EDX,
    .leaf7_1_eax = 1u << 5,
    .xcr0 = 0x602e7, /* + opmask, ZMM_Hi256, Hi16_ZMM, XTILECFG, XTILEDATA */
    .amx_permitted = true,
};

const mla_cpu_raw support_cpu_granite_rapids = {
    .arch = MLA_ARCH_X86_64,
    .max_leaf = 32,
    .leaf1_ecx = ECX1_AVX_CLASS,
    .leaf7_ebx = SPR_LEAF7_EBX,
    .leaf7_edx = SPR_LEAF7_EDX,
    .leaf7_1_eax = (1u << 5) | (1u << 21), /* AVX512_BF16, AMX-FP16 */
    .xcr0 = 0x602e7,
    .amx_permitted = true,
};

const mla_cpu_raw support_cpu_spr_no_zmm_os = {
    .arch = MLA_ARCH_X86_64,
    .max_leaf = 32,
    .leaf1_ecx = ECX1_AVX_CLASS,
    .leaf7_ebx = SPR_LEAF7_EBX,
    .leaf7_edx = SPR_LEAF7_EDX,
    .leaf7_1_eax = 1u << 5,
    .xcr0 = 0x7,
    .amx_permitted = false,
};

const mla_cpu_raw support_cpu_graviton3 = {
    .arch = MLA_ARCH_AARCH64,
    /* FP, ASIMD, ..., FPHP, ASIMDHP, ..., SVE, ASIMDFHM */
    .hwcap = (1ull << 0) | (1ull << 1) | (1ull << 9) | (1ull << 10) | (1ull << 22) | (1ull << 23),
    .hwcap2 = 1ull << 14, /* BF16 */
};

const mla_cpu_raw support_cpu_neoverse_n1 = {
    .arch = MLA_ARCH_AARCH64,
    .hwcap = (1ull << 0) | (1ull << 1) | (1ull << 9) | (1ull << 10), /* FP, ASIMD, FPHP, ASIMDHP */
};

static const mla_cpu_raw *fake_cpu;

static void fake_reader(mla_cpu_raw *raw)
{
    *raw = *fake_cpu;
}

static const char *const mla_env_vars[] = {
    "MLA_MAX_ISA", "MLA_CONVERT_BACKEND", "MLA_DECODE_BACKEND", "MLA_PREFILL_BACKEND", "MLA_LOG",
    "MLA_VERBOSE",
};

void support_use_cpu(const mla_cpu_raw *raw)
{
    for (size_t i = 0; i < sizeof mla_env_vars / sizeof mla_env_vars[0]; i++)
        unsetenv(mla_env_vars[i]);
    fake_cpu = raw;
    mla_set_cpu_reader(raw ? fake_reader : NULL);
    mla_dispatch_set_amx_request(NULL);
    mla_dispatch_reset();
}

void support_setenv(const char *name, const char *value)
{
    if (value)
        setenv(name, value, 1);
    else
        unsetenv(name);
    mla_dispatch_reset();
}

bool support_contains(const char *text, const char *needle)
{
    if (strstr(text, needle))
        return true;
    print_error("expected \"%s\" in \"%s\"\n", needle, text);
    return false;
}

/* Prints the skip line, once per backend and first reason: a sweep over
 * many configs would repeat "cpu lacks avx512f" for every one. */
static void note_skip(const char *backend, const mla_reasons *why)
{
    enum { MAX_SEEN = 64 };
    static char seen[MAX_SEEN][MLA_REASON_LEN + 32];
    static int n_seen;
    char key[MLA_REASON_LEN + 32];
    snprintf(key, sizeof key, "%s: %s", backend, why->text[0]);
    for (int i = 0; i < n_seen; i++)
        if (strcmp(seen[i], key) == 0)
            return;
    if (n_seen < MAX_SEEN)
        strcpy(seen[n_seen++], key);
    char line[MLA_MAX_REASONS * (MLA_REASON_LEN + 2)];
    size_t len = 0;
    for (int i = 0; i < why->count && len < sizeof line; i++)
        len += (size_t)snprintf(line + len, sizeof line - len, "%s%s", i ? "; " : "",
                                why->text[i]);
    print_message("[ SKIPPED  ] backend %s: %s\n", backend, line);
}

int support_each_backend(mla_op op, const mla_config *cfg,
                         void (*run)(const mla_backend_desc *b, void *ctx), void *ctx)
{
    int ran = 0;
    for (int i = 0; i < mla_backend_count(); i++) {
        const mla_backend_desc *b = mla_backend_at(i);
        mla_reasons why;
        assert_int_equal(mla_backend_validate(b->name, op, cfg, &why), MLA_OK);
        if (why.count > 0) {
            note_skip(b->name, &why);
            continue;
        }
        mla_status st = mla_force_backend(op, b->name);
        if (st != MLA_OK)
            fail_msg("mla_force_backend(%s, %s): %s: %s", mla_op_name(op), b->name,
                     mla_status_str(st), mla_last_error());
        run(b, ctx);
        ran++;
    }
    assert_int_equal(mla_force_backend(op, NULL), MLA_OK);
    return ran;
}

void support_expect_ran(const mla_backend_desc *b)
{
    if (strcmp(mla_last_backend(), b->name) != 0)
        fail_msg("forced backend %s, but %s ran", b->name, mla_last_backend());
}

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

uint64_t support_random(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

int64_t support_random_in(int64_t lo, int64_t hi)
{
    return lo + (int64_t)(support_random() % (uint64_t)(hi - lo + 1));
}

void support_expect_c(const char *who, const char *what, int64_t m, int64_t n, int64_t ldc,
                      int64_t c_len, const float *want, const float *got)
{
    for (int64_t x = 0; x < c_len; x++) {
        int64_t e = x - SUPPORT_C_GUARD, i = -1, j = -1;
        if (e >= 0 && ldc > 0) {
            i = e / ldc;
            j = e % ldc;
        }
        bool inside = i >= 0 && i < m && j < n;
        uint32_t w = SUPPORT_C_GUARD_BITS, g;
        if (inside)
            memcpy(&w, &want[x], sizeof w);
        memcpy(&g, &got[x], sizeof g);
        if (g == w)
            continue;
        if (inside)
            fail_msg("%s %s: C[%lld][%lld] = %a (0x%08x), ref %a (0x%08x)", who, what, (long long)i,
                     (long long)j, (double)got[x], g, (double)want[x], w);
        fail_msg("%s %s: wrote element %lld of C's buffer outside the submatrix", who, what,
                 (long long)e);
    }
}

void support_expect_reject(const char *entry, const char *bad_input, mla_status got,
                           mla_status want, const char *needle)
{
    if (got != want)
        fail_msg("%s, %s: %s, want %s (\"%s\")", entry, bad_input, mla_status_str(got),
                 mla_status_str(want), mla_last_error());
    if (mla_last_error()[0] == '\0')
        fail_msg("%s, %s: %s with an empty mla_last_error()", entry, bad_input,
                 mla_status_str(got));
    if (needle && !strstr(mla_last_error(), needle))
        fail_msg("%s, %s: the message \"%s\" does not say \"%s\"", entry, bad_input,
                 mla_last_error(), needle);
    support_note_reject(entry, bad_input, want);
}

void support_note_reject(const char *entry, const char *bad_input, mla_status status)
{
    const char *path = getenv("TEST_REJECT_TABLE");
    if (!path || !path[0])
        return;
    if (!bad_input[0] || strpbrk(entry, "\t\n") || strpbrk(bad_input, "\t\n"))
        fail_msg("a rejected input's row needs words without tabs or newlines: \"%s\", \"%s\"",
                 entry, bad_input);
    char line[512];
    int len = snprintf(line, sizeof line, "%s\t%s\t%s\n", entry, bad_input, mla_status_str(status));
    if (len < 0 || (size_t)len >= sizeof line)
        fail_msg("%s, %s: the row is too long for the table", entry, bad_input);
    /* one write to a file opened for appending: rows of concurrent tests
     * and suites never interleave */
    int fd = open(path, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (fd < 0)
        fail_msg("TEST_REJECT_TABLE=%s: %s", path, strerror(errno));
    ssize_t wrote = write(fd, line, (size_t)len);
    close(fd);
    if (wrote != len)
        fail_msg("TEST_REJECT_TABLE=%s: short write", path);
}

const char *support_unfit_backend(void)
{
    static const char name[] = "unfit";
    if (mla_backend_find(name))
        return name;
    const mla_backend_desc d = {
        .size = sizeof d,
        .name = name,
        .isa = "ref",
        .priority = -1,
        .ops = 1u << MLA_OP_DECODE | 1u << MLA_OP_PREFILL,
        .cache_dtypes = (1u << MLA_DTYPE_COUNT) - 1,
    };
    mla_status st = mla_register_backend(&d, false);
    if (st != MLA_OK)
        fail_msg("registering %s: %s: %s", name, mla_status_str(st), mla_last_error());
    return name;
}
