#!/usr/bin/env python3
"""PyTorch baseline for `mla_bench decode`: the same latent attention in f32 or bf16.

One decode token per request over a contiguous cache, the plain way:
  k      = cache [B, C, L + R] in --dtype (latent 512 + rope 64)
  q      = [B, H, L + R] in --dtype
  scores = q @ k^T * scale            (bmm)
  p      = softmax(scores)
  out    = p @ k[..., :L]             (bmm; V is the latent part of each row)

Timed like mla_bench: one untimed run, then the median of --reps runs, each
one call, on torch.set_num_threads(--threads). With --mla-bench PATH the
same case also runs as `mla_bench decode` (q and cache in --dtype) in
alternating rounds, so both see the same neighbours and clocks: each round
times torch and runs mla_bench once (its own median of --reps); printed are
both medians over --rounds and their ratio (shared VMs move by 2x between
minutes, so ratios from separate invocations mislead). FLOPs = 2 * B * H * C * (L + R + L),
the formula `mla_bench decode` uses for one query per request; bytes = the
cache read once (B * C * (L + R) * element size). In bf16 every tensor is
bf16, so the two bmm run on oneDNN's bf16 kernels (AMX tiles where the CPU
has them): the baseline of `mla_bench decode --q-dtype bf16 --cache-dtype bf16`.

  python3 bench/torch_decode.py --batch 4 --heads 128 --ctx 4096 --threads 16
  python3 bench/torch_decode.py --dtype bf16 --batch 4 --heads 128 --ctx 4096
  python3 bench/torch_decode.py --dtype bf16 --mla-bench build/bench/mla_bench
"""
import argparse
import json
import os
import statistics
import time

from mla_bench_json import mla_bench_rows

import torch

L, R = 512, 64
SCALE = 0.1352  # as mla_bench decode: DeepSeek V3's softmax scale
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def decode(q, k):
    """Attention of q [B, H, L+R] over k [B, C, L+R]; out [B, H, L]."""
    scores = torch.bmm(q, k.transpose(1, 2)).mul_(SCALE)
    p = torch.softmax(scores, dim=-1)
    return torch.bmm(p, k[..., :L])


def time_torch(args, q, k):
    """Median seconds of --reps calls, after one untimed call."""
    import torch
    times = []
    with torch.inference_mode():
        decode(q, k)  # untimed: allocator warm-up, thread pool start
        for _ in range(args.reps):
            start = time.perf_counter()
            decode(q, k)
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def run_mla_bench(args, threads):
    """The decode row `mla_bench decode --json` prints for this case."""
    cmd = [args.mla_bench, "decode", "--json", "--threads", str(threads), "--reps", str(args.reps),
           "--batch", str(args.batch), "--heads", str(args.heads), "--ctx", str(args.ctx),
           "--q-dtype", args.dtype, "--cache-dtype", args.dtype]
    return mla_bench_rows(cmd, "decode", threads)[0]


def mla_fields(mla_s, mla_row, torch_seconds):
    """The libmla side of an alternated run (nothing without --mla-bench)."""
    if not mla_row:
        return {}
    m_med = statistics.median(mla_s)
    return {"mla_backend": mla_row["backend"], "mla_route": mla_row.get("route", "?"),
            "mla_median_us": round(m_med * 1e6, 3), "speedup": round(torch_seconds / m_med, 3),
            "mla_last_round": mla_row}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=4, help="requests B (default 4)")
    ap.add_argument("--heads", type=int, default=128, help="query heads H (default 128)")
    ap.add_argument("--ctx", type=int, default=4096, help="cached tokens per request C (default 4096)")
    ap.add_argument("--threads", type=int, default=0,
                    help="intra-op threads (default: every CPU this process may run on, "
                         "as mla_bench's omp_get_max_threads())")
    ap.add_argument("--reps", type=int, default=7, help="timed runs; the median is reported (default 7)")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="f32",
                    help="q and cache dtype, and the arithmetic's (default f32)")
    ap.add_argument("--mla-bench", help="path of mla_bench: also run the case there, in "
                    "alternating rounds, and print the ratio")
    ap.add_argument("--rounds", type=int, default=3,
                    help="alternating rounds with --mla-bench (default 3)")
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout, nothing else")
    args = ap.parse_args()
    for name in ("batch", "heads", "ctx", "reps", "rounds"):
        if getattr(args, name) < 1:
            ap.error("--%s must be at least 1" % name)

    threads = args.threads if args.threads > 0 else len(os.sched_getaffinity(0))
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    b, h, c = args.batch, args.heads, args.ctx
    dtype = DTYPES[args.dtype]
    k = torch.empty(b, c, L + R, dtype=torch.float32).uniform_(-1, 1).to(dtype)
    q = torch.empty(b, h, L + R, dtype=torch.float32).uniform_(-1, 1).to(dtype)

    torch_s, mla_s, mla_row = [], [], None
    for _ in range(args.rounds if args.mla_bench else 1):
        torch_s.append(time_torch(args, q, k))
        if args.mla_bench:
            mla_row = run_mla_bench(args, torch.get_num_threads())
            mla_s.append(mla_row["median_us"] * 1e-6)
    seconds = statistics.median(torch_s)

    flops = 2.0 * b * h * c * (L + R + L)
    nbytes = b * c * (L + R) * k.element_size()
    gflops = flops / seconds / 1e9
    gbps = nbytes / seconds / 1e9
    if args.json:
        print(json.dumps({
            "op": "torch_decode", "backend": "torch", "threads": torch.get_num_threads(),
            "batch": b, "heads": h, "ctx": c, "sq": 1, "q_dtype": args.dtype,
            "cache_dtype": args.dtype,
            "kv_lora_rank": L, "rope_dim": R, "median_us": round(seconds * 1e6, 3),
            "gflops": round(gflops, 3), "bytes": nbytes, "gbps": round(gbps, 3),
            "torch": str(torch.__version__), **mla_fields(mla_s, mla_row, seconds),
        }, separators=(",", ":")))
    else:
        print("torch %s decode %s: batch %d heads %d ctx %d threads %d: median %.1f us, "
              "%.2f GFLOP/s, %.2f GB/s (cache %.2f MB, %d reps)"
              % (torch.__version__, args.dtype, b, h, c, torch.get_num_threads(),
                 seconds * 1e6, gflops, gbps, nbytes / 1e6, args.reps))
        if mla_row:
            m = mla_fields(mla_s, mla_row, seconds)
            print("libmla %s (%s): median %.1f us over %d rounds; torch / libmla = %.2f "
                  "(> 1: libmla faster)" % (m["mla_backend"], m["mla_route"], m["mla_median_us"],
                                             args.rounds, m["speedup"]))


if __name__ == "__main__":
    main()
