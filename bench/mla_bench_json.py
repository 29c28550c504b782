"""Runs mla_bench with --json for the PyTorch comparison scripts."""
import json
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
