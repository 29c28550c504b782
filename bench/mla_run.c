/*
 * The main job (`make run`). For now: what libmla detected on this machine,
 * which backends it has, which one each op will use, and the OpenMP threads.
 */
#include <mla.h>

#include <stdio.h>

int main(void)
{
    mla_status st = mla_init();
    if (st != MLA_OK)
        printf("init: %s: %s\n", mla_status_str(st), mla_last_error());

    char caps[256];
    mla_caps_format(mla_cpu_caps_detected(), caps, sizeof caps);
    printf("cpu capabilities: %s\n", caps[0] ? caps : "(none)");
    if (mla_cpu_caps() != mla_cpu_caps_detected()) {
        mla_caps_format(mla_cpu_caps(), caps, sizeof caps);
        printf("in use (MLA_MAX_ISA): %s\n", caps[0] ? caps : "(none)");
    }

    mla_config cfg = mla_config_default();
    printf("\nbackends (priority order), checked against the DeepSeek-V3 decode config\n"
           "(q %s, cache %s, L=%lld, R=%lld, heads=%lld, block_size=%lld):\n",
           mla_dtype_name(cfg.q_dtype), mla_dtype_name(cfg.cache_dtype), (long long)cfg.kv_lora_rank,
           (long long)cfg.rope_dim, (long long)cfg.num_heads, (long long)cfg.block_size);
    for (int i = 0; i < mla_backend_count(); i++) {
        const mla_backend_desc *b = mla_backend_at(i);
        mla_reasons why;
        mla_backend_validate(b->name, MLA_OP_DECODE, &cfg, &why);
        printf("  %-12s isa %-12s priority %2d  %s", b->name, b->isa, b->priority,
               why.count ? "not valid:" : "valid");
        for (int r = 0; r < why.count; r++)
            printf("%s %s", r ? ";" : "", why.text[r]);
        printf("\n");
    }

    printf("\nbackend per op:\n");
    for (int op = 0; op < MLA_OP_COUNT; op++) {
        const mla_backend_desc *b;
        const mla_config *c = op == MLA_OP_CONVERT ? NULL : &cfg;
        if (mla_select_backend((mla_op)op, c, &b) == MLA_OK)
            printf("  %-8s -> %s (%s micro-kernels)\n", mla_op_name((mla_op)op), b->name, b->isa);
        else
            printf("  %-8s -> error: %s\n", mla_op_name((mla_op)op), mla_last_error());
    }
    printf("\nOpenMP threads: %d\n", mla_default_threads());
    return st == MLA_OK ? 0 : 1;
}
