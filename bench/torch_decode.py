#!/usr/bin/env python3
"""PyTorch baseline for `mla_bench decode`: the same latent attention in f32 or bf16.

One decode token per request over a contiguous cache, the plain way:
  k      = cache [B, C, L + R] in --dtype (latent 512 + rope 64)
  q      = [B, H, L + R] in --dtype
  scores = q @ k^T * scale            (bmm)
  p      = softmax(scores)
  out    = p @ k[..., :L]             (bmm; V is the latent part of each row)

Timed like mla_bench: one untimed run, then the median of --reps runs, each
one call, on torch.set_num_threads(--threads). FLOPs = 2 * B * H * C * (L + R + L),
the formula `mla_bench decode` uses for one query per request; bytes = the
cache read once (B * C * (L + R) * element size). In bf16 every tensor is
bf16, so the two bmm run on oneDNN's bf16 kernels (AMX tiles where the CPU
has them): the baseline of `mla_bench decode --q-dtype bf16 --cache-dtype bf16`.

  python3 bench/torch_decode.py --batch 4 --heads 128 --ctx 4096 --threads 16
  python3 bench/torch_decode.py --dtype bf16 --batch 4 --heads 128 --ctx 4096
"""
import argparse
import json
import os
import statistics
import time

import torch

L, R = 512, 64
SCALE = 0.1352  # as mla_bench decode: DeepSeek V3's softmax scale
DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


def decode(q, k):
    """Attention of q [B, H, L+R] over k [B, C, L+R]; out [B, H, L]."""
    scores = torch.bmm(q, k.transpose(1, 2)).mul_(SCALE)
    p = torch.softmax(scores, dim=-1)
    return torch.bmm(p, k[..., :L])


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
    ap.add_argument("--json", action="store_true", help="one JSON object on stdout, nothing else")
    args = ap.parse_args()
    for name in ("batch", "heads", "ctx", "reps"):
        if getattr(args, name) < 1:
            ap.error("--%s must be at least 1" % name)

    threads = args.threads if args.threads > 0 else len(os.sched_getaffinity(0))
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    b, h, c = args.batch, args.heads, args.ctx
    dtype = DTYPES[args.dtype]
    k = torch.empty(b, c, L + R, dtype=torch.float32).uniform_(-1, 1).to(dtype)
    q = torch.empty(b, h, L + R, dtype=torch.float32).uniform_(-1, 1).to(dtype)

    times = []
    with torch.inference_mode():
        decode(q, k)  # untimed: allocator warm-up, thread pool start
        for _ in range(args.reps):
            start = time.perf_counter()
            decode(q, k)
            times.append(time.perf_counter() - start)
    seconds = statistics.median(times)

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
            "torch": str(torch.__version__),
        }, separators=(",", ":")))
    else:
        print("torch %s decode %s: batch %d heads %d ctx %d threads %d: median %.1f us, "
              "%.2f GFLOP/s, %.2f GB/s (cache %.2f MB, %d reps)"
              % (torch.__version__, args.dtype, b, h, c, torch.get_num_threads(),
                 seconds * 1e6, gflops, gbps, nbytes / 1e6, args.reps))


if __name__ == "__main__":
    main()
