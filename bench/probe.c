#include "probe.h"

#include <string.h>

bench_fma_probe_fn *bench_fma_probe_for(const char *isa)
{
    static const struct {
        const char *prefix;
        bench_fma_probe_fn *probe;
    } probes[] = {
#if defined(__x86_64__)
        {"avx512", bench_fma_probe__avx512},
        {"avx2", bench_fma_probe__avx2},
#elif defined(__aarch64__)
        {"neon", bench_fma_probe__neon},
#endif
    };
    for (size_t i = 0; i < sizeof probes / sizeof probes[0]; i++)
        if (strncmp(isa, probes[i].prefix, strlen(probes[i].prefix)) == 0)
            return probes[i].probe;
    return bench_fma_probe__ref;
}
