/*
 * mla_bench: libmla's throughput next to what this machine can do.
 *
 *   mla_bench peak    [--threads N] [--backend NAME] [--reps R] [--json]
 *   mla_bench convert [--threads N] [--backend NAME] [--reps R] [--n N] [--json]
 *   mla_bench metadata [--threads N] [--reps R] [--json]
 *   mla_bench cache-write|cache-gather [--threads N] [--backend NAME] [--reps R]
 *             [--tokens T] [--block-size B] [--cache-dtype D] [--src-dtype D] [--json]
 *   mla_bench decode  [--threads N] [--backend NAME] [--reps R] [--heads H] [--batch B]
 *             [--ctx C] [--sq S] [--q-dtype D] [--cache-dtype D] [--block-size B]
 *             [--kv-lora-rank L] [--rope-dim R] [--parts N] [--scaling] [--bf16-compute]
 *             [--json]
 *   mla_bench attn    [--threads N] [--backend NAME] [--reps R] [--tokens T] [--heads H]
 *             [--batch B] [--qk-dim D] [--v-dim D] [--rope-dim R] [--whole-k]
 *             [--causal|--no-causal] [--q-dtype D] [--json]
 *   mla_bench gemm    [--threads N] [--backend NAME] [--reps R] [--tokens T] [--heads H]
 *             [--kv-lora-rank L] [--q-dtype D] [--out-dtype D] [--json]
 *   mla_bench merge   [--threads N] [--backend NAME] [--reps R] [--tokens T] [--heads H]
 *             [--q-dtype D] [--json]
 *
 * Every command also takes [--no-probe] [--seconds S]; decode, prefill and
 * attn take [--cold [--llc-mib M]] (see usage_text).
 *
 * `peak` measures three ceilings: the FMA throughput of each backend (its
 * fma_probe on every thread at once), AMX-BF16 throughput (TDPBF16PS, where
 * the CPU has it, bare and fed its operand tiles from L1) and memcpy
 * bandwidth. `convert` times mla_convert and
 * mla_exp_f32 on each backend; these ops are memory bound, so each is
 * printed next to a memcpy that moves the same number of bytes.
 * `decode` times mla_decode against the FMA peak of the backend that runs it.
 *
 * This file holds the arguments and the command table; bench.h lists what
 * the commands (bench_*.c) share.
 */
#include "bench.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DEFAULT_REPS 7
#define MAX_THREADS 1024
#define DEFAULT_N ((int64_t)16 << 20)
#define MAX_N ((int64_t)1 << 40)
#define DEFAULT_TOKENS 16384
#define DEFAULT_BLOCK_SIZE 64
#define MAX_TOKENS ((int64_t)1 << 24)
/* decode: DeepSeek V3's 128 heads, L = 512, R = 64 */
#define DEFAULT_HEADS 128
#define DEFAULT_BATCH 4
#define DEFAULT_CTX 4096
#define DEFAULT_KV_LORA_RANK 512
#define DEFAULT_ROPE_DIM 64
#define MAX_HEADS 1024
#define MAX_BATCH 65536
#define MAX_SQ 1024
#define MAX_DIM 4096
#define MAX_LLC_MIB ((long long)1 << 20)

static const char usage_text[] =
    "usage: mla_bench <command> [options]\n"
    "\n"
    "commands:\n"
    "  peak      FMA throughput of each backend's probe, run on all threads at once,\n"
    "            AMX-BF16 throughput (TDPBF16PS on full tiles, op peak_amx_bf16;\n"
    "            op peak_amx_bf16_fed loads the four operand tiles from L1 every\n"
    "            round, as a 2 x 2 tile block must; \"amx: unavailable\" where\n"
    "            the CPU or Linux does not allow it) and\n"
    "            memcpy bandwidth (256 MiB buffers)\n"
    "  convert   mla_convert (bf16, f16, fp8_e4m3, fp8_e5m2 <-> f32) and\n"
    "            mla_exp_f32, with the FMA peak and a memcpy of the same bytes\n"
    "  metadata  the per-step metadata builders for 256 requests with contexts up\n"
    "            to 128K tokens (block size 64): batch metadata, reorder + split,\n"
    "            chunk plan, decode schedule (parts = --threads), and all of them;\n"
    "            then the incremental forms of a server with a persistent block\n"
    "            table: batch_append (new block ids for the 4 requests that grew),\n"
    "            chunk_plan_lean (no token_to_seq), token_to_seq (one chunk's,\n"
    "            as its gather needs it) and all_incremental\n"
    "  cache-write   mla_concat_and_cache of --tokens tokens (576 = 512 + 64 wide)\n"
    "            into random blocks of a paged cache, per cache/source dtype pair\n"
    "  cache-gather  mla_gather_cache (dequantizing) and mla_cp_gather_cache of\n"
    "            --tokens rows of 16 requests' random blocks into a workspace\n"
    "  decode    mla_decode on --batch requests of --ctx cached tokens, --sq query\n"
    "            tokens each (causal when > 1), --heads heads, over a paged cache of\n"
    "            shuffled blocks holding random data (fp8 scale 0.02), softmax scale\n"
    "            0.1352, on the backend auto-selection picks (or --backend) at\n"
    "            --threads, against that backend's FMA peak on as many threads,\n"
    "            and GB/s against a memcpy of 256 MiB on as many threads, both\n"
    "            timed in rounds with decode (--no-probe: first); on the amx-bf16\n"
    "            route also against the AMX-BF16 probe, measured after it.\n"
    "            With --scaling also at 1 thread, then speedup = t1/tT, peak ratio =\n"
    "            peakT/peak1 and speedup / peak ratio (target: >= 0.85 at --batch 1\n"
    "            --heads 128 --ctx 32768)\n"
    "  attn      mla_flash_attn_varlen (prefill's new-token attention) on --batch\n"
    "            (default 1) requests of --tokens (default 2048) queries over as many\n"
    "            keys, --heads (default 16) heads, --qk-dim/--v-dim (192/128) with k\n"
    "            as k_nope plus a shared k_pe of --rope-dim (64; --whole-k: k whole),\n"
    "            causal unless --no-causal, in --q-dtype (default f32), with lse, on\n"
    "            every backend; each timed alternately with its FMA probe\n"
    "  gemm      mla_up_proj (kv_b_proj up-projection, the packed GEMM): M = --tokens\n"
    "            (default 2048), K = --kv-lora-rank, N = --heads (default 16) x (128 +\n"
    "            128), kv_c and W in --q-dtype (f32 or bf16; default f32), out in\n"
    "            --out-dtype (default f32; the prefill op writes its q dtype);\n"
    "            GFLOP/s = 2MNK / time, against each backend's FMA peak (the AMX-BF16\n"
    "            probe's on avx512_amx with bf16 operands); op up_proj_<dt> packs W\n"
    "            in the call, up_proj_<dt>_packed takes it packed ahead\n"
    "            (mla_pack_kv_b_proj, as the prefill op does)\n"
    "  prefill   mla_prefill of --batch requests (default 1) of --tokens new tokens\n"
    "            (default 64) after --ctx cached ones, --heads (default 16), L 512,\n"
    "            R 64, P = V = 128, --q-dtype over a --cache-dtype cache (bf16), at\n"
    "            --threads: the MHA and absorbed paths timed alternately rep by rep\n"
    "            (--no-probe: MHA's loop, then absorbed's), and the path the cost\n"
    "            model picks\n"
    "  merge     mla_merge_attn_states of --tokens (default 32768) tokens, --heads\n"
    "            (default 16) heads of 128, all with context, in --q-dtype (default\n"
    "            f32), out and out_lse apart; GB/s counts prefix, suffix and out and\n"
    "            the three LSEs, against a memcpy of as many bytes timed alternately\n"
    "            with it rep by rep (target: >= 70% of the memcpy)\n"
    "\n"
    "options:\n"
    "  --threads N     only N threads (default: 1 and mla_default_threads();\n"
    "                  decode: mla_default_threads())\n"
    "  --backend NAME  only this backend (default: every one this CPU can run;\n"
    "                  decode: the one auto-selection picks for the config)\n"
    "  --reps R        timed runs per case, after one untimed run; the median,\n"
    "                  min, max and stddev are reported (default 7)\n"
    "  --no-probe      time each kernel loop alone: the ceilings it is held against\n"
    "                  (FMA and AMX probes, memcpy; prefill: the other path) run in\n"
    "                  a phase of their own before it, in the same process, instead\n"
    "                  of alternating with it rep by rep, so perf record's samples\n"
    "                  land in the kernel; JSON \"probe\":\"separate\" (default\n"
    "                  \"interleaved\"; convert and gemm always time them apart)\n"
    "  --seconds S     run each kernel loop for about S seconds (after the untimed\n"
    "                  run; interleaved, the kernel and its ceiling together)\n"
    "                  instead of --reps times: a steady loop for perf; ceilings\n"
    "                  timed apart still take --reps runs (median over at most\n"
    "                  65536 reps, a uniform sample beyond; min/max/stddev: all)\n"
    "  --cold          decode, prefill, attn: rotate rep by rep through copies of\n"
    "                  the inputs (decode: the cache; prefill: the cache, q and\n"
    "                  kv_c; attn: q, k, k_pe, v) that together exceed twice the\n"
    "                  last-level cache, so every rep reads them from DRAM, as a\n"
    "                  61-layer server does; JSON cold_copies (0: not cold; 1: the\n"
    "                  inputs alone exceed it, no copies)\n"
    "  --llc-mib M     the last-level cache --cold assumes (default: sysconf\n"
    "                  _SC_LEVEL3_CACHE_SIZE, else /sys/devices/system/cpu/cpu0/\n"
    "                  cache/index3/size, else 64 MiB)\n"
    "  --n N           elements per convert case (default 16777216)\n"
    "  --tokens T      rows per cache case (default 16384)\n"
    "  --block-size B  cache block size of the cache cases and decode (default 64)\n"
    "  --cache-dtype D only cache cases of this cache dtype (f32 bf16 f16 fp8_e4m3 fp8_e5m2);\n"
    "                  decode: the cache dtype (default bf16)\n"
    "  --src-dtype D   only cache cases whose other side (source or workspace) is D\n"
    "  --heads H       decode: query heads (default 128)\n"
    "  --batch B       decode: requests (default 4)\n"
    "  --ctx C         decode: tokens in the cache of every request (default 4096)\n"
    "  --sq S          decode: query tokens per request (default 1; MTP when > 1)\n"
    "  --q-dtype D     decode: q and output dtype (f32 bf16 f16; default f32)\n"
    "  --out-dtype D   gemm: k_nope and v dtype (f32 bf16 f16; default f32); op\n"
    "                  names gain _out_<D> when it is not f32\n"
    "  --kv-lora-rank L  decode: latent width L (default 512)\n"
    "  --rope-dim R    decode: rope width R (default 64); the cache is L + R wide\n"
    "  --parts N       decode: split-KV schedule parts per call (default: one\n"
    "                  per thread), with the op's 16-token blocks and overhead 2\n"
    "  --scaling       decode: also at 1 thread, and the scaling summary\n"
    "  --bf16-compute  decode: f32 q opts into bf16 compute (bf16_compute)\n"
    "  --qk-dim D      attn: q and k head dim (default 192)\n"
    "  --v-dim D       attn: v and out head dim (default 128)\n"
    "  --whole-k       attn: k [S, H, qk-dim] instead of k_nope + shared k_pe\n"
    "  --causal, --no-causal  attn: causal mask (default) or none\n"
    "  --json          one JSON object per line on stdout, nothing else: the run's\n"
    "                  metadata first, then one per case\n"
    "  --help          this text\n"
    "\n"
    "GB/s counts bytes read + bytes written: a memcpy of B bytes moves 2B.\n"
    "Conversions and exp report 0 GFLOP/s (they are memory bound, not FLOPs);\n"
    "compare their GB/s with copy GB/s, a memcpy moving the same bytes on the same\n"
    "threads in the same run (%copy = 100 * GB/s / copy GB/s).\n"
    "%peak = 100 * GFLOP/s / peak, where peak is the same backend's FMA probe at\n"
    "the same thread count, measured first in the same process.\n"
    "Every timed case reports median_us, min_us, max_us, stddev_us (the sample's)\n"
    "and reps (timed runs); the table shows min/max% (how far min and max lie\n"
    "below and above the median, in % of it) and sd% (stddev in % of the median).\n"
    "The first line describes the run: {\"op\":\"meta\", libmla (version), commit\n"
    "(git describe at build), cpu (/proc/cpuinfo model name, or implementer and\n"
    "part), cpu_caps, compiler, command, args, probe, seconds, reps, cold,\n"
    "llc_bytes, default_threads, env (every OMP_*, GOMP_*, KMP_*, MLA_* variable\n"
    "set)}; without --json the same as lines starting with '#'.\n"
    "JSON keys: op backend threads n median_us min_us max_us stddev_us reps gflops\n"
    "gbps peak_gflops pct_peak copy_gbps pct_copy probe; n (elements; rows for\n"
    "cache ops; bytes for copy), copy_gbps and pct_copy only where they apply,\n"
    "probe where a ceiling is held against the op; peak without AMX prints\n"
    "{\"op\":\"peak_amx_bf16\",\"backend\":\"avx512_amx\",\"available\":false}.\n"
    "\n"
    "decode FLOPs = 2 * batch * heads * keys * (2L + R), keys summed over a\n"
    "request's queries (query i of S sees C - S + 1 + i cache rows); bytes = the\n"
    "batch * ctx cache rows, each read once; GB/s = bytes / time. route names the\n"
    "arithmetic the kernels run (f32: q and cache widened to f32, FMA;\n"
    "bf16-dot: vdpbf16ps or BFDOT; f16: FMLAL on the f16 cache; amx-bf16:\n"
    "TDPBF16PS tiles); peak is the f32 FMA probe for all of them, amx_peak the\n"
    "AMX-BF16 probe (0 off that route); %copy = 100 * GB/s / copy GB/s (the\n"
    "cache read against memcpy's reads and writes). decode JSON keys: op backend\n"
    "route threads batch heads ctx sq q_dtype cache_dtype block_size kv_lora_rank\n"
    "rope_dim median_us min_us max_us stddev_us reps gflops bytes gbps peak_gflops\n"
    "pct_peak amx_peak_gflops pct_amx_peak copy_gbps pct_copy probe cold_copies;\n"
    "--scaling adds\n"
    "op decode_scaling with t1_us tT_us speedup peak1_gflops peakT_gflops\n"
    "peak_ratio speedup_vs_peak.\n"
    "\n"
    "attn FLOPs = 2 * heads * (qk-dim + v-dim) * pairs, pairs = the (query, key)\n"
    "pairs the mask lets through: batch * T(T+1)/2 causal, batch * T^2 not; its\n"
    "peak is probed in rounds with it (not first; --no-probe: just before it).\n"
    "attn JSON keys: op\n"
    "backend route threads batch tokens heads qk_dim v_dim rope_dim causal dtype\n"
    "median_us min_us max_us stddev_us reps gflops peak_gflops pct_peak\n"
    "amx_peak_gflops pct_amx_peak (the AMX probe after it on the amx-bf16 route,\n"
    "else 0) probe cold_copies.\n"
    "\n"
    "prefill JSON keys: op backend route threads batch ctx new_tokens heads\n"
    "mha_us absorbed_us (medians) mha_min_us mha_max_us mha_stddev_us mha_reps and\n"
    "the same for absorbed, mha_flops absorbed_flops mha_gflops absorbed_gflops\n"
    "faster model_picks probe cold_copies. Each path's own FLOPs, with pairs =\n"
    "batch * (new * ctx + new(new+1)/2): MHA 2 * batch * (ctx + new) * L * heads *\n"
    "(P + V) (up-projection) + 2 * heads * pairs * (P + R + V); absorbed 2 * batch\n"
    "* new * heads * L * (P + V) (q and out through W_UK, W_UV) + 2 * heads *\n"
    "pairs * (2L + R).\n";

static const struct command {
    const char *name;
    int (*run)(const options *o, const plan *p);
    bool per_backend; /* measures every backend, so needs their FMA peaks first */
    bool cold;        /* takes --cold */
} commands[] = {
    {"peak", cmd_peak, true, false},
    {"convert", cmd_convert, true, false},
    {"metadata", cmd_metadata, false, false},
    {"cache-write", cmd_cache_write, true, false},
    {"cache-gather", cmd_cache_gather, true, false},
    {"decode", cmd_decode, false, true},
    {"attn", cmd_attn, true, true},
    {"gemm", cmd_gemm, true, false},
    {"merge", cmd_merge, true, false},
    {"prefill", cmd_prefill, false, true},
};

/* ---- arguments ------------------------------------------------------------------ */

/* The value after flag argv[*i] (moving *i to it), or NULL after saying it
 * is missing. */
static const char *value_arg(int argc, char **argv, int *i)
{
    if (*i + 1 >= argc) {
        fprintf(stderr, "mla_bench: %s needs a value\n", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

/* Reads the value after flag argv[*i] as an integer in [min, max]. */
static bool int_arg(int argc, char **argv, int *i, long long min, long long max, long long *out)
{
    const char *flag = argv[*i], *text = value_arg(argc, argv, i);
    if (!text)
        return false;
    char *end;
    errno = 0;
    long long v = strtoll(text, &end, 10);
    if (errno || end == text || *end || v < min || v > max) {
        fprintf(stderr, "mla_bench: %s %s: expected an integer in [%lld, %lld]\n", flag, text, min,
                max);
        return false;
    }
    *out = v;
    return true;
}

/* Reads the value after flag argv[*i] as a number in (0, max]. */
static bool seconds_arg(int argc, char **argv, int *i, double max, double *out)
{
    const char *flag = argv[*i], *text = value_arg(argc, argv, i);
    if (!text)
        return false;
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (errno || end == text || *end || !(v > 0 && v <= max)) {
        fprintf(stderr, "mla_bench: %s %s: expected a number in (0, %g]\n", flag, text, max);
        return false;
    }
    *out = v;
    return true;
}

/* Reads the value after flag argv[*i] as a dtype name. */
static bool dtype_arg(int argc, char **argv, int *i, int *out)
{
    const char *flag = argv[*i], *text = value_arg(argc, argv, i);
    if (!text)
        return false;
    for (int d = 0; d < MLA_DTYPE_COUNT; d++) {
        if (strcmp(text, mla_dtype_name((mla_dtype)d)) == 0) {
            *out = d;
            return true;
        }
    }
    fprintf(stderr, "mla_bench: %s %s: expected f32, bf16, f16, fp8_e4m3 or fp8_e5m2\n", flag, text);
    return false;
}

/* Fills o from argv (flags may come before or after the command). Returns -1
 * to go on, else the exit status: 0 after --help, 2 after a usage error. */
static int parse_args(int argc, char **argv, options *o, const struct command **cmd)
{
    *o = (options){.reps = DEFAULT_REPS, .n = DEFAULT_N, .tokens = DEFAULT_TOKENS,
                   .block_size = DEFAULT_BLOCK_SIZE, .cache_dtype = -1, .other_dtype = -1,
                   .heads = DEFAULT_HEADS, .batch = DEFAULT_BATCH, .ctx = DEFAULT_CTX, .sq = 1,
                   .kv_lora_rank = DEFAULT_KV_LORA_RANK, .rope_dim = DEFAULT_ROPE_DIM,
                   .q_dtype = -1, .out_dtype = -1, .qk_dim = 192, .v_dim = 128, .causal = true};
    *cmd = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        long long v;
        bool ok = true;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage_text, stdout);
            return 0;
        } else if (strcmp(a, "--json") == 0) {
            o->json = true;
        } else if (strcmp(a, "--no-probe") == 0) {
            o->no_probe = true;
        } else if (strcmp(a, "--seconds") == 0) {
            ok = seconds_arg(argc, argv, &i, MAX_SECONDS, &o->seconds);
        } else if (strcmp(a, "--cold") == 0) {
            o->cold = true;
        } else if (strcmp(a, "--llc-mib") == 0) {
            if ((ok = int_arg(argc, argv, &i, 1, MAX_LLC_MIB, &v)))
                o->llc_bytes = (int64_t)v << 20;
        } else if (strcmp(a, "--threads") == 0) {
            if ((ok = int_arg(argc, argv, &i, 1, MAX_THREADS, &v)))
                o->threads = (int)v;
        } else if (strcmp(a, "--reps") == 0) {
            if ((ok = int_arg(argc, argv, &i, 1, MAX_REPS, &v)))
                o->reps = (int)v;
        } else if (strcmp(a, "--n") == 0) {
            if ((ok = int_arg(argc, argv, &i, 1, MAX_N, &v)))
                o->n = v;
        } else if (strcmp(a, "--tokens") == 0) {
            if ((ok = int_arg(argc, argv, &i, 1, MAX_TOKENS, &v))) {
                o->tokens = v;
                o->tokens_set = true;
            }
        } else if (strcmp(a, "--block-size") == 0) {
            if ((ok = int_arg(argc, argv, &i, 1, MAX_TOKENS, &v)))
                o->block_size = v;
        } else if (strcmp(a, "--cache-dtype") == 0) {
            ok = dtype_arg(argc, argv, &i, &o->cache_dtype);
        } else if (strcmp(a, "--src-dtype") == 0) {
            ok = dtype_arg(argc, argv, &i, &o->other_dtype);
        } else if (strcmp(a, "--heads") == 0) {
            if ((ok = int_arg(argc, argv, &i, 1, MAX_HEADS, &v))) {
                o->heads = v;
                o->heads_set = true;
            }
        } else if (strcmp(a, "--batch") == 0) {
            if ((ok = int_arg(argc, argv, &i, 1, MAX_BATCH, &v))) {
                o->batch = v;
                o->batch_set = true;
            }
        } else if (strcmp(a, "--ctx") == 0) {
            if ((ok = int_arg(argc, argv, &i, 1, MAX_TOKENS, &v)))
                o->ctx = v;
        } else if (strcmp(a, "--sq") == 0) {
            if ((ok = int_arg(argc, argv, &i, 1, MAX_SQ, &v)))
                o->sq = v;
        } else if (strcmp(a, "--kv-lora-rank") == 0) {
            if ((ok = int_arg(argc, argv, &i, 1, MAX_DIM, &v)))
                o->kv_lora_rank = v;
        } else if (strcmp(a, "--rope-dim") == 0) {
            if ((ok = int_arg(argc, argv, &i, 0, MAX_DIM, &v)))
                o->rope_dim = v;
        } else if (strcmp(a, "--q-dtype") == 0) {
            ok = dtype_arg(argc, argv, &i, &o->q_dtype);
        } else if (strcmp(a, "--out-dtype") == 0) {
            ok = dtype_arg(argc, argv, &i, &o->out_dtype);
        } else if (strcmp(a, "--parts") == 0) {
            if ((ok = int_arg(argc, argv, &i, 1, MAX_TOKENS, &v)))
                o->parts = v;
        } else if (strcmp(a, "--scaling") == 0) {
            o->scaling = true;
        } else if (strcmp(a, "--bf16-compute") == 0) {
            o->bf16_compute = true;
        } else if (strcmp(a, "--qk-dim") == 0) {
            if ((ok = int_arg(argc, argv, &i, 1, MLA_FLASH_ATTN_MAX_DIM, &v)))
                o->qk_dim = v;
        } else if (strcmp(a, "--v-dim") == 0) {
            if ((ok = int_arg(argc, argv, &i, 1, MLA_FLASH_ATTN_MAX_DIM, &v)))
                o->v_dim = v;
        } else if (strcmp(a, "--whole-k") == 0) {
            o->whole_k = true;
        } else if (strcmp(a, "--causal") == 0) {
            o->causal = true;
        } else if (strcmp(a, "--no-causal") == 0) {
            o->causal = false;
        } else if (strcmp(a, "--backend") == 0) {
            ok = (o->backend = value_arg(argc, argv, &i)) != NULL;
        } else if (a[0] != '-' && !*cmd) {
            for (size_t c = 0; c < sizeof commands / sizeof commands[0]; c++)
                if (strcmp(a, commands[c].name) == 0)
                    *cmd = &commands[c];
            if (!*cmd) {
                fprintf(stderr, "mla_bench: unknown command '%s'\n", a);
                ok = false;
            }
        } else {
            fprintf(stderr, "mla_bench: unexpected argument '%s'\n", a);
            ok = false;
        }
        if (!ok) {
            fputs(usage_text, stderr);
            return 2;
        }
    }
    if (!*cmd) {
        fprintf(stderr, "mla_bench: no command given\n");
        fputs(usage_text, stderr);
        return 2;
    }
    if (o->cold && !(*cmd)->cold) {
        fprintf(stderr, "mla_bench: --cold: only decode, prefill and attn rotate their inputs\n");
        return 2;
    }
    o->command = (*cmd)->name;
    return -1;
}

int main(int argc, char **argv)
{
    options o;
    const struct command *cmd;
    int status = parse_args(argc, argv, &o, &cmd);
    if (status >= 0)
        return status;
    if (!check(mla_init(), "mla_init"))
        return 1;
    print_run_meta(&o, argc, argv);
    fflush(stdout); /* before the plan's messages on stderr */
    plan p = {0};
    status = !cmd->per_backend || make_plan(&o, &p) ? cmd->run(&o, &p) : 1;
    free_plan(&p);
    return status;
}
