#!/usr/bin/env python3
"""PyTorch baseline for `mla_bench attn`: prefill's new-token attention.

The same case as `mla_bench attn` (one request, or --batch equal ones, of T
tokens, H heads, Dqk/Dv = 192/128, causal, softmax scale 0.1352), through
  torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=...)
with q, k [B, H, T, 192] and v [B, H, T, 128] in f32 or bf16 (k built whole:
torch has no shared-k_pe form). Run in the same invocation as
`mla_bench attn ... --json` (its path: --mla-bench), in alternating rounds,
so both see the same neighbours and clocks: each round times torch (one
untimed call, then --reps timed calls) and runs mla_bench once (its own
median of --reps). Printed: both medians over the rounds and their ratio.

FLOPs = 2 * H * (192 + 128) * pairs, pairs = B * T(T+1)/2 causal (B * T^2
with --no-causal), the formula `mla_bench attn` uses.

  python3 bench/torch_prefill.py --tokens 2048 --heads 16 --threads 16 \\
      --dtype bf16 --mla-bench build/bench/mla_bench
"""
import argparse
import json
import statistics
import time

from mla_bench_json import mla_bench_rows, start_torch

QK_DIM, V_DIM, ROPE_DIM = 192, 128, 64
SCALE = 0.1352  # as mla_bench attn: DeepSeek V3's softmax scale
MLA_DTYPES = {"f32": "f32", "bf16": "bf16"}


def pairs(batch, tokens, causal):
    """(query, key) pairs the mask lets through."""
    return batch * (tokens * (tokens + 1) // 2 if causal else tokens * tokens)


def time_torch(torch, args, q, k, v):
    """Median seconds of --reps calls, after one untimed call."""
    f = torch.nn.functional.scaled_dot_product_attention
    times = []
    with torch.inference_mode():
        f(q, k, v, is_causal=args.causal, scale=SCALE)  # allocator, thread pool
        for _ in range(args.reps):
            start = time.perf_counter()
            f(q, k, v, is_causal=args.causal, scale=SCALE)
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def attn_rows(args, threads, tokens, reps, backend):
    """The attn rows `mla_bench attn --json` prints for this case."""
    cmd = [args.mla_bench, "attn", "--json", "--threads", str(threads), "--reps", str(reps),
           "--tokens", str(tokens), "--heads", str(args.heads), "--batch", str(args.batch),
           "--q-dtype", MLA_DTYPES[args.dtype], "--causal" if args.causal else "--no-causal"]
    if backend:
        cmd += ["--backend", backend]
    return mla_bench_rows(cmd, "attn", threads)


def fastest_backend(args, threads):
    """--backend, else the backend fastest on a short request (every backend
    at full size would include the scalar ref one: minutes)."""
    if args.backend:
        return args.backend
    rows = attn_rows(args, threads, min(args.tokens, 256), 1, None)
    return min(rows, key=lambda r: r["median_us"])["backend"]


def run_mla_bench(args, threads, backend):
    """Median seconds of one `mla_bench attn` run on backend, and its row."""
    row = attn_rows(args, threads, args.tokens, args.reps, backend)[0]
    return row["median_us"] * 1e-6, row


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=2048, help="tokens T per request (default 2048)")
    ap.add_argument("--heads", type=int, default=16, help="heads H (default 16)")
    ap.add_argument("--batch", type=int, default=1, help="equal requests B (default 1)")
    ap.add_argument("--dtype", choices=sorted(MLA_DTYPES), default="f32",
                    help="q, k, v and out dtype (default f32)")
    ap.add_argument("--no-causal", dest="causal", action="store_false",
                    help="no mask (default: causal)")
    ap.add_argument("--threads", type=int, default=0,
                    help="threads of both (default: every CPU this process may run on, "
                         "as mla_bench's omp_get_max_threads())")
    ap.add_argument("--reps", type=int, default=5,
                    help="timed calls per round on each side (default 5)")
    ap.add_argument("--rounds", type=int, default=3,
                    help="alternating rounds; medians are over all of them (default 3)")
    ap.add_argument("--mla-bench", default="build/bench/mla_bench",
                    help="path of mla_bench (default build/bench/mla_bench)")
    ap.add_argument("--backend",
                    help="libmla backend (default: the fastest on a 256-token request)")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout, nothing else")
    args = ap.parse_args()
    torch, threads = start_torch(ap, args, ("tokens", "heads", "batch", "reps", "rounds"))
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    b, h, t = args.batch, args.heads, args.tokens
    q = torch.empty(b, h, t, QK_DIM, dtype=torch.float32).uniform_(-1, 1).to(dtype)
    k = torch.empty(b, h, t, QK_DIM, dtype=torch.float32).uniform_(-1, 1).to(dtype)
    v = torch.empty(b, h, t, V_DIM, dtype=torch.float32).uniform_(-1, 1).to(dtype)

    backend = fastest_backend(args, threads)
    torch_s, mla_s, mla_row = [], [], None
    for _ in range(args.rounds):
        torch_s.append(time_torch(torch, args, q, k, v))
        seconds, mla_row = run_mla_bench(args, threads, backend)
        mla_s.append(seconds)
    t_med, m_med = statistics.median(torch_s), statistics.median(mla_s)
    flops = 2.0 * h * (QK_DIM + V_DIM) * pairs(b, t, args.causal)
    result = {
        "op": "torch_prefill", "torch": str(torch.__version__), "threads": threads,
        "batch": b, "tokens": t, "heads": h, "qk_dim": QK_DIM, "v_dim": V_DIM,
        "causal": args.causal, "dtype": args.dtype,
        "torch_median_us": round(t_med * 1e6, 3), "torch_gflops": round(flops / t_med / 1e9, 3),
        "mla_backend": mla_row["backend"], "mla_route": mla_row.get("route", "?"),
        "mla_median_us": round(m_med * 1e6, 3), "mla_gflops": round(flops / m_med / 1e9, 3),
        "speedup": round(t_med / m_med, 3), "rounds": args.rounds, "reps": args.reps,
    }
    if args.json:
        print(json.dumps(result, separators=(",", ":")))
        return
    print("prefill attention %s, batch %d, tokens %d, heads %d, %d/%d, %s, %d threads, "
          "%d rounds x %d reps:" % (args.dtype, b, t, h, QK_DIM, V_DIM,
                                    "causal" if args.causal else "full", threads, args.rounds,
                                    args.reps))
    print("  torch %s sdpa: median %.1f us, %.2f GFLOP/s"
          % (torch.__version__, t_med * 1e6, result["torch_gflops"]))
    print("  libmla %s (%s): median %.1f us, %.2f GFLOP/s"
          % (result["mla_backend"], result["mla_route"], m_med * 1e6, result["mla_gflops"]))
    print("  torch / libmla = %.2f (> 1: libmla faster)" % result["speedup"])


if __name__ == "__main__":
    main()
