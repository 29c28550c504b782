"""Runs mla_bench with --json for the PyTorch comparison scripts."""
import json
import os
import subprocess
import sys


def mla_bench_rows(cmd, op, threads):
    """The rows of `op` at `threads` threads that `cmd` (an mla_bench command
    line with --json) prints; exits with mla_bench's error if it fails or
    prints none."""
    done = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True)
    if done.returncode != 0:
        sys.exit("mla_bench failed (%d): %s\n%s" % (done.returncode, " ".join(cmd), done.stderr))
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    rows = [r for r in rows if r.get("op") == op and r.get("threads") == threads]
    if not rows:
        sys.exit("mla_bench printed no %s row: %s" % (op, " ".join(cmd)))
    return rows


def start_torch(ap, args, positive):
    """After the argument checks (each of `positive` at least 1, --mla-bench
    executable), so that --help works without torch: torch imported, on
    --threads threads (0: every CPU this process may run on, as mla_bench's
    omp_get_max_threads()) and seeded. Returns torch and the thread count."""
    for name in positive:
        if getattr(args, name) < 1:
            ap.error("--%s must be at least 1" % name.replace("_", "-"))
    if not os.access(args.mla_bench, os.X_OK):
        ap.error("--mla-bench %s is not an executable (make it first)" % args.mla_bench)
    import torch

    threads = args.threads if args.threads > 0 else len(os.sched_getaffinity(0))
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    return torch, threads
