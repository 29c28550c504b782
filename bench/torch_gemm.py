#!/usr/bin/env python3
"""PyTorch baseline for `mla_bench gemm`: the kv_b_proj up-projection GEMM.

The same product as `mla_bench gemm` (M = --tokens, K = --kv-lora-rank,
N = --heads x (128 + 128)), through
  torch.nn.functional.linear(kv_c [M, K], W [N, K])
in bf16 or f32 (on a CPU with AMX, PyTorch's bf16 matmul runs on its tiles
through oneDNN). Both write the output in the inputs' dtype, as PyTorch's
linear does and the prefill op asks of the up-projection (mla_bench gemm
--out-dtype). Run in the same invocation as `mla_bench gemm ... --json`
(its path: --mla-bench), in alternating rounds, so both see the same
neighbours and clocks: each round times torch (one untimed call, then --reps
timed calls) and runs mla_bench once (its own median of --reps, W packed in
the call and packed ahead). Printed: the medians over the rounds, their
ratio, and each side's share of the peak mla_bench measured (the AMX-BF16
probe on avx512_amx with bf16 operands, else the backend's FMA probe).

  python3 bench/torch_gemm.py --dtype bf16 --threads 16 --backend avx512_amx \\
      --mla-bench build/bench/mla_bench
"""
import argparse
import json
import statistics
import time

from mla_bench_json import mla_bench_rows, start_torch

HEAD_DIMS = 128 + 128  # qk_nope_head_dim + v_head_dim, as mla_bench gemm


def time_torch(torch, reps, a, w):
    """Median seconds of reps calls, after one untimed call."""
    f = torch.nn.functional.linear
    times = []
    with torch.inference_mode():
        f(a, w)  # allocator, thread pool
        for _ in range(reps):
            start = time.perf_counter()
            f(a, w)
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=2048, help="rows M (default 2048)")
    ap.add_argument("--kv-lora-rank", type=int, default=512, help="depth K (default 512)")
    ap.add_argument("--heads", type=int, default=16, help="heads: N = heads x 256 (default 16)")
    ap.add_argument("--dtype", choices=("f32", "bf16"), default="bf16",
                    help="kv_c and W dtype (default bf16)")
    ap.add_argument("--threads", type=int, default=0,
                    help="threads of both (default: every CPU this process may run on)")
    ap.add_argument("--reps", type=int, default=7, help="timed calls per round (default 7)")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds (default 3)")
    ap.add_argument("--mla-bench", default="build/bench/mla_bench",
                    help="path of mla_bench (default build/bench/mla_bench)")
    ap.add_argument("--backend", help="libmla backend (default: auto-selection's)")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout, nothing else")
    args = ap.parse_args()
    torch, threads = start_torch(ap, args, ("tokens", "kv_lora_rank", "heads", "reps", "rounds"))
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    m, k, n = args.tokens, args.kv_lora_rank, args.heads * HEAD_DIMS
    a = torch.empty(m, k).uniform_(-1, 1).to(dtype)
    w = torch.empty(n, k).uniform_(-0.05, 0.05).to(dtype)

    cmd = [args.mla_bench, "gemm", "--json", "--threads", str(threads), "--reps", str(args.reps),
           "--tokens", str(m), "--kv-lora-rank", str(k), "--heads", str(args.heads),
           "--q-dtype", args.dtype, "--out-dtype", args.dtype]
    if args.backend:
        cmd += ["--backend", args.backend]
    name = "up_proj_%s" % args.dtype + ("_out_bf16" if args.dtype == "bf16" else "")
    ops = (name, name + "_packed")
    torch_s, mla_s, peak = [], {op: [] for op in ops}, {}
    for _ in range(args.rounds):
        torch_s.append(time_torch(torch, args.reps, a, w))
        for op in ops:
            row = mla_bench_rows(cmd, op, threads)[0]
            mla_s[op].append(row["median_us"] * 1e-6)
            peak = {"gflops": row["peak_gflops"], "backend": row["backend"]}
    flops = 2.0 * m * n * k
    t_med = statistics.median(torch_s)
    result = {
        "op": "torch_gemm", "torch": str(torch.__version__), "threads": threads, "dtype": args.dtype,
        "m": m, "n": n, "k": k, "mla_backend": peak["backend"], "peak_gflops": peak["gflops"],
        "torch_median_us": round(t_med * 1e6, 3),
        "torch_pct_peak": round(100.0 * flops / t_med / 1e9 / peak["gflops"], 2),
        "rounds": args.rounds, "reps": args.reps,
    }
    for op in ops:
        med = statistics.median(mla_s[op])
        key = "mla_packed" if op.endswith("packed") else "mla"
        result[key + "_median_us"] = round(med * 1e6, 3)
        result[key + "_pct_peak"] = round(100.0 * flops / med / 1e9 / peak["gflops"], 2)
        result[key + "_speedup"] = round(t_med / med, 3)
    if args.json:
        print(json.dumps(result, separators=(",", ":")))
        return
    print("up-projection GEMM %s, M %d K %d N %d, %d threads, %d rounds x %d reps, "
          "peak %.0f GFLOP/s (%s):" % (args.dtype, m, k, n, threads, args.rounds, args.reps,
                                      peak["gflops"], peak["backend"]))
    print("  torch %s linear: median %.1f us, %.1f%% of peak"
          % (torch.__version__, t_med * 1e6, result["torch_pct_peak"]))
    for key, what in (("mla", "W packed in the call"), ("mla_packed", "W packed ahead")):
        print("  libmla, %s: median %.1f us, %.1f%% of peak, %.2fx torch"
              % (what, result[key + "_median_us"], result[key + "_pct_peak"],
                 result[key + "_speedup"]))


if __name__ == "__main__":
    main()
