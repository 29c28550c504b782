/*
 * CPU capability detection: read raw CPUID/XCR0 (x86-64) or hwcaps (AArch64)
 * through a replaceable reader, then decode them into mla_cap bits. A feature
 * counts only if the OS also saves its state.
 */
#include "dispatch.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>
#elif defined(__aarch64__)
#include <sys/auxv.h>
#endif

/* x86 CPUID bits */
#define L1_ECX_FMA (1u << 12)
#define L1_ECX_SSE42 (1u << 20)
#define L1_ECX_OSXSAVE (1u << 27)
#define L1_ECX_AVX (1u << 28)
#define L1_ECX_F16C (1u << 29)
#define L7_EBX_AVX2 (1u << 5)
#define L7_EBX_AVX512F (1u << 16)
#define L7_EBX_AVX512DQ (1u << 17)
#define L7_EBX_AVX512BW (1u << 30)
#define L7_EBX_AVX512VL (1u << 31)
#define L7_EDX_AMX_BF16 (1u << 22)
#define L7_EDX_AVX512_FP16 (1u << 23)
#define L7_EDX_AMX_TILE (1u << 24)
#define L71_EAX_AVX512_BF16 (1u << 5)
#define L71_EAX_AMX_FP16 (1u << 21)
/* XCR0: state components the OS saves */
#define XCR0_YMM 0x6ull       /* SSE + AVX                         */
#define XCR0_ZMM 0xe6ull      /* + opmask, ZMM_Hi256, Hi16_ZMM      */
#define XCR0_AMX 0x60000ull   /* XTILECFG + XTILEDATA               */
/* Linux arch_prctl permission for AMX tile data (asm/prctl.h, 5.16+) */
#define ARCH_GET_XCOMP_PERM 0x1022
#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18
/* AArch64 hwcaps (asm/hwcap.h) */
#define HWCAP_ASIMD_BIT (1ull << 1)
#define HWCAP_ASIMDHP_BIT (1ull << 10)
#define HWCAP_SVE_BIT (1ull << 22)
#define HWCAP_ASIMDFHM_BIT (1ull << 23)
#define HWCAP2_BF16_BIT (1ull << 14)

static mla_caps decode_x86(const mla_cpu_raw *r)
{
    mla_caps caps = 0;
    if (r->max_leaf < 1)
        return 0;
    if (r->leaf1_ecx & L1_ECX_SSE42)
        caps |= MLA_CAP_SSE42;
    uint64_t xcr0 = (r->leaf1_ecx & L1_ECX_OSXSAVE) ? r->xcr0 : 0;
    bool ymm = (r->leaf1_ecx & L1_ECX_AVX) && (xcr0 & XCR0_YMM) == XCR0_YMM;
    bool zmm = ymm && (xcr0 & XCR0_ZMM) == XCR0_ZMM;
    bool amx = (xcr0 & XCR0_AMX) == XCR0_AMX && r->amx_permitted;
    if (ymm) {
        caps |= (r->leaf1_ecx & L1_ECX_FMA) ? MLA_CAP_FMA : 0;
        caps |= (r->leaf1_ecx & L1_ECX_F16C) ? MLA_CAP_F16C : 0;
    }
    if (r->max_leaf < 7)
        return caps;
    if (ymm && (r->leaf7_ebx & L7_EBX_AVX2))
        caps |= MLA_CAP_AVX2;
    if (zmm) {
        caps |= (r->leaf7_ebx & L7_EBX_AVX512F) ? MLA_CAP_AVX512F : 0;
        caps |= (r->leaf7_ebx & L7_EBX_AVX512BW) ? MLA_CAP_AVX512BW : 0;
        caps |= (r->leaf7_ebx & L7_EBX_AVX512VL) ? MLA_CAP_AVX512VL : 0;
        caps |= (r->leaf7_ebx & L7_EBX_AVX512DQ) ? MLA_CAP_AVX512DQ : 0;
        caps |= (r->leaf7_1_eax & L71_EAX_AVX512_BF16) ? MLA_CAP_AVX512_BF16 : 0;
        caps |= (r->leaf7_edx & L7_EDX_AVX512_FP16) ? MLA_CAP_AVX512_FP16 : 0;
    }
    if (amx) {
        caps |= (r->leaf7_edx & L7_EDX_AMX_TILE) ? MLA_CAP_AMX_TILE : 0;
        caps |= (r->leaf7_edx & L7_EDX_AMX_BF16) ? MLA_CAP_AMX_BF16 : 0;
        caps |= (r->leaf7_1_eax & L71_EAX_AMX_FP16) ? MLA_CAP_AMX_FP16 : 0;
    }
    return caps;
}

static mla_caps decode_aarch64(const mla_cpu_raw *r)
{
    mla_caps caps = 0;
    caps |= (r->hwcap & HWCAP_ASIMD_BIT) ? MLA_CAP_NEON : 0;
    caps |= (r->hwcap & HWCAP_ASIMDHP_BIT) ? MLA_CAP_NEON_FP16 : 0;
    caps |= (r->hwcap & HWCAP_SVE_BIT) ? MLA_CAP_SVE : 0;
    caps |= (r->hwcap & HWCAP_ASIMDFHM_BIT) ? MLA_CAP_NEON_FHM : 0;
    caps |= (r->hwcap2 & HWCAP2_BF16_BIT) ? MLA_CAP_NEON_BF16 : 0;
    return caps;
}

mla_caps mla_cpu_caps_decode(const mla_cpu_raw *raw)
{
    if (!raw)
        return 0;
    switch (raw->arch) {
    case MLA_ARCH_X86_64: return decode_x86(raw);
    case MLA_ARCH_AARCH64: return decode_aarch64(raw);
    case MLA_ARCH_OTHER: break;
    }
    return 0;
}

void mla_cpu_read(mla_cpu_raw *raw)
{
    memset(raw, 0, sizeof *raw);
#if defined(__x86_64__)
    unsigned a, b, c, d;
    raw->arch = MLA_ARCH_X86_64;
    __cpuid(0, a, b, c, d);
    raw->max_leaf = a;
    if (raw->max_leaf >= 1) {
        __cpuid(1, a, b, c, d);
        raw->leaf1_ecx = c;
        raw->leaf1_edx = d;
    }
    if (raw->max_leaf >= 7) {
        __cpuid_count(7, 0, a, b, c, d);
        raw->leaf7_ebx = b;
        raw->leaf7_ecx = c;
        raw->leaf7_edx = d;
        if (a >= 1) {
            __cpuid_count(7, 1, a, b, c, d);
            raw->leaf7_1_eax = a;
        }
    }
    if (raw->leaf1_ecx & L1_ECX_OSXSAVE) {
        uint32_t lo, hi;
        __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
        raw->xcr0 = ((uint64_t)hi << 32) | lo;
    }
    /* Linux keeps AMX tile data off until the process asks for it; reading
     * only looks, so that a process that will never use AMX never asks (init
     * asks, through mla_cpu_request_amx, when an AMX backend could run). */
    uint64_t perm = 0;
    if ((raw->leaf7_edx & L7_EDX_AMX_TILE) && (raw->xcr0 & XCR0_AMX) == XCR0_AMX &&
        syscall(SYS_arch_prctl, ARCH_GET_XCOMP_PERM, &perm) == 0)
        raw->amx_permitted = (perm >> XFEATURE_XTILEDATA) & 1;
#elif defined(__aarch64__)
    raw->arch = MLA_ARCH_AARCH64;
    raw->hwcap = getauxval(AT_HWCAP);
    raw->hwcap2 = getauxval(AT_HWCAP2);
#endif
}

bool mla_cpu_request_amx(void)
{
#if defined(__x86_64__)
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
#else
    return false;
#endif
}

static const struct {
    mla_cap cap;
    const char *name;
} cap_names[] = {
    {MLA_CAP_SSE42, "sse4_2"},
    {MLA_CAP_AVX2, "avx2"},
    {MLA_CAP_FMA, "fma"},
    {MLA_CAP_F16C, "f16c"},
    {MLA_CAP_AVX512F, "avx512f"},
    {MLA_CAP_AVX512BW, "avx512bw"},
    {MLA_CAP_AVX512VL, "avx512vl"},
    {MLA_CAP_AVX512DQ, "avx512dq"},
    {MLA_CAP_AVX512_BF16, "avx512_bf16"},
    {MLA_CAP_AVX512_FP16, "avx512_fp16"},
    {MLA_CAP_AMX_TILE, "amx_tile"},
    {MLA_CAP_AMX_BF16, "amx_bf16"},
    {MLA_CAP_AMX_FP16, "amx_fp16"},
    {MLA_CAP_NEON, "neon"},
    {MLA_CAP_NEON_FP16, "neon_fp16"},
    {MLA_CAP_NEON_BF16, "neon_bf16"},
    {MLA_CAP_SVE, "sve"},
    {MLA_CAP_NEON_FHM, "neon_fhm"},
};

const char *mla_cap_name(mla_cap cap)
{
    for (size_t i = 0; i < sizeof cap_names / sizeof cap_names[0]; i++)
        if (cap_names[i].cap == cap)
            return cap_names[i].name;
    return "?";
}

size_t mla_caps_format(mla_caps caps, char *buf, size_t size)
{
    size_t len = 0;
    if (size > 0)
        buf[0] = '\0';
    for (size_t i = 0; i < sizeof cap_names / sizeof cap_names[0]; i++) {
        if (!(caps & cap_names[i].cap))
            continue;
        int w = snprintf(len < size ? buf + len : NULL, len < size ? size - len : 0, "%s%s",
                         len ? " " : "", cap_names[i].name);
        len += (size_t)w;
    }
    return len;
}

/* Capabilities each MLA_MAX_ISA level keeps: one level per built-in
 * backend, named as it is, each keeping the levels below it on its
 * architecture (the AVX-512 FP16 instructions came with AMX, in Sapphire
 * Rapids; neon_fp16 names the capability neon_fhm's backend adds). A level
 * of the other architecture keeps nothing here, leaving ref. */
#define LEVEL_AVX2 (MLA_CAP_SSE42 | MLA_CAP_AVX2 | MLA_CAP_FMA | MLA_CAP_F16C)
#define LEVEL_AVX512 (LEVEL_AVX2 | MLA_CAP_AVX512F | MLA_CAP_AVX512BW | MLA_CAP_AVX512VL | MLA_CAP_AVX512DQ)
#define LEVEL_AVX512_BF16 (LEVEL_AVX512 | MLA_CAP_AVX512_BF16)
#define LEVEL_AVX512_AMX (LEVEL_AVX512_BF16 | MLA_CAP_AVX512_FP16 | MLA_CAP_AMX_TILE | \
                          MLA_CAP_AMX_BF16 | MLA_CAP_AMX_FP16)
#define LEVEL_NEON_FHM (MLA_CAP_NEON | MLA_CAP_NEON_FP16 | MLA_CAP_NEON_FHM)
static const struct {
    const char *name;
    mla_caps keep;
} isa_levels[] = {
    {"ref", 0},
    {"avx2", LEVEL_AVX2},
    {"avx512", LEVEL_AVX512},
    {"avx512_bf16", LEVEL_AVX512_BF16},
    {"avx512_amx", LEVEL_AVX512_AMX},
    {"neon", MLA_CAP_NEON},
    {"neon_fp16", LEVEL_NEON_FHM},
    {"neon_fhm", LEVEL_NEON_FHM},
    {"neon_bf16", LEVEL_NEON_FHM | MLA_CAP_NEON_BF16 | MLA_CAP_SVE},
};

size_t mla_isa_levels_format(char *buf, size_t size)
{
    size_t len = 0;
    if (size > 0)
        buf[0] = '\0';
    for (size_t i = 0; i < sizeof isa_levels / sizeof isa_levels[0]; i++)
        len += (size_t)snprintf(len < size ? buf + len : NULL, len < size ? size - len : 0, "%s%s",
                                i ? ", " : "", isa_levels[i].name);
    return len;
}

bool mla_isa_level_mask(const char *name, mla_caps *keep)
{
    for (size_t i = 0; i < sizeof isa_levels / sizeof isa_levels[0]; i++) {
        if (strcasecmp(isa_levels[i].name, name) == 0) {
            *keep = isa_levels[i].keep;
            return true;
        }
    }
    return false;
}
