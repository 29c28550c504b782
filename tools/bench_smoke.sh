#!/usr/bin/env bash
# Every mla_bench command, and the options a profile or a plot needs
# (--no-probe, --seconds, --cold, --json), on tiny cases, with the JSON each
# prints checked: the run's metadata first, then rows with the keys README.md
# and --help promise. Not a benchmark: nothing here is timed for its figures.
#
#   tools/bench_smoke.sh build/bench/mla_bench
#
# BENCH_RUNNER prefixes each run (make test-neon's qemu). With python3 every
# line is also parsed as JSON and the statistics checked for consistency.
set -euo pipefail

bench=${1:?usage: tools/bench_smoke.sh path/to/mla_bench}
runner=${BENCH_RUNNER:-}
out=$(mktemp)
trap 'rm -f "$out"' EXIT
failures=0
cases=0

fail() {
    echo "bench-smoke: FAIL: $*"
    failures=$((failures + 1))
}

# run ARGS...: mla_bench ARGS into $out; a failure is reported with its stderr.
run() {
    cases=$((cases + 1))
    local status=0
    $runner "$bench" "$@" > "$out" 2> "$out.err" || status=$?
    if [ "$status" -ne 0 ]; then
        fail "mla_bench $* exited $status: $(tail -n 3 "$out.err")"
        rm -f "$out.err"
        return 1
    fi
    rm -f "$out.err"
}

# expect WHAT PATTERN: some line of the last run's output matches the
# extended regex PATTERN.
expect() {
    grep -Eq -- "$2" "$out" || fail "$1: no line matches $2 in: $(head -c 600 "$out")"
}

# json_checks ARGS...: after run, the JSON output's own consistency.
#   - every line is a JSON object; the first is {"op":"meta",...} with every
#     metadata key; every timed quantity (median_us, or prefill's mha_us and
#     absorbed_us, with their min_us, max_us, stddev_us and reps) has
#     min <= median <= max, stddev >= 0 and reps >= 1;
#   - reps=N: every such row timed N reps; seconds=S: its reps took >= S.
json_checks() {
    command -v python3 > /dev/null || return 0
    python3 - "$out" "$@" <<'EOF' || fail "JSON checks ($*) on: $(head -c 600 "$out")"
import json, sys
lines = open(sys.argv[1]).read().splitlines()
want = dict(a.split("=", 1) for a in sys.argv[2:])
rows = [json.loads(l) for l in lines]
meta = rows[0]
keys = ["libmla", "commit", "cpu", "cpu_caps", "compiler", "command", "args", "probe",
        "seconds", "reps", "cold", "llc_bytes", "default_threads", "env"]
assert meta["op"] == "meta" and all(k in meta for k in keys), meta
assert all(r["op"] != "meta" for r in rows[1:])
timed = [(r, "", r["median_us"]) for r in rows[1:] if "median_us" in r]
timed += [(r, p, r[p + "us"]) for r in rows[1:] for p in ("mha_", "absorbed_") if p + "us" in r]
assert timed, "no timed row"
for r, p, median in timed:
    assert r[p + "min_us"] <= median <= r[p + "max_us"] and r[p + "stddev_us"] >= 0, r
    assert r[p + "reps"] >= 1, r
    if "reps" in want:
        assert r[p + "reps"] == int(want["reps"]), r
    if "seconds" in want:
        assert r[p + "reps"] * r[p + "max_us"] >= 0.95e6 * float(want["seconds"]), r
EOF
}

quiet=(--threads 1 --json)
ref=(--threads 1 --backend ref --json)

# ---- every command, --reps 2 ----------------------------------------------
if run peak "${ref[@]}" --reps 2; then
    expect peak '^\{"op":"meta",.*"command":"peak"'
    expect peak '"op":"peak_fma","backend":"ref".*"median_us":.*"min_us":.*"max_us":.*"stddev_us":.*"reps":2'
    expect peak '"op":"copy","backend":"libc"'
    json_checks reps=2
fi
if run convert "${ref[@]}" --reps 2 --n 4096; then
    expect convert '"op":"convert_bf16_f32".*"reps":2.*"probe":"separate"'
    json_checks reps=2
fi
if run metadata "${quiet[@]}" --reps 2; then
    expect metadata '"op":"metadata_all".*"min_us"'
    json_checks reps=2
fi
for cmd in cache-write cache-gather; do
    if run "$cmd" "${ref[@]}" --reps 2 --tokens 256 --cache-dtype bf16 --src-dtype bf16; then
        expect "$cmd" '"op":"cache_.*"copy_gbps":.*"probe":"interleaved"'
        json_checks reps=2
    fi
done
tiny_decode=(--heads 4 --batch 1 --ctx 256)
if run decode "${quiet[@]}" --reps 2 "${tiny_decode[@]}" --scaling; then
    expect decode '"op":"decode","backend":"[a-z0-9_]+","route":"[a-z0-9-]+".*"median_us":.*"stddev_us":.*"probe":"interleaved","cold_copies":0'
    expect decode '"op":"decode_scaling"'
    json_checks reps=2
fi
if run attn "${ref[@]}" --reps 2 --tokens 32 --heads 2; then
    expect attn '"op":"attn","backend":"ref","route":.*"min_us":.*"probe":"interleaved","cold_copies":0'
    json_checks reps=2
fi
if run gemm "${ref[@]}" --reps 2 --tokens 16 --heads 1; then
    expect gemm '"op":"up_proj_f32_packed".*"reps":2'
    json_checks reps=2
fi
if run merge "${ref[@]}" --reps 2 --tokens 64 --heads 2; then
    expect merge '"op":"merge_f32".*"pct_copy":.*"probe":"interleaved"'
    json_checks reps=2
fi
tiny_prefill=(--tokens 8 --ctx 64 --heads 2)
if run prefill "${quiet[@]}" --reps 2 "${tiny_prefill[@]}"; then
    expect prefill '"op":"prefill","backend":"[a-z0-9_]+","route":.*"mha_us":.*"mha_min_us":.*"absorbed_stddev_us":.*"mha_gflops":.*"probe":"interleaved","cold_copies":0'
    json_checks
fi

# ---- --no-probe, --seconds, --cold ----------------------------------------
if run decode "${quiet[@]}" --reps 2 "${tiny_decode[@]}" --no-probe --seconds 0.2; then
    expect "decode --no-probe" '^\{"op":"meta",.*"probe":"separate","seconds":0.2'
    expect "decode --no-probe" '"op":"decode",.*"peak_gflops":(0\.[0-9]*[1-9]|[1-9]).*"probe":"separate"'
    json_checks seconds=0.2
fi
if run decode "${quiet[@]}" --reps 2 "${tiny_decode[@]}" --cold --llc-mib 1; then
    expect "decode --cold" '^\{"op":"meta",.*"cold":true,"llc_bytes":1048576'
    expect "decode --cold" '"op":"decode",.*"cold_copies":([2-9]|[1-9][0-9]+)\}'
    json_checks reps=2
fi
if run attn "${ref[@]}" --reps 2 --tokens 32 --heads 2 --no-probe --cold --llc-mib 1; then
    expect "attn --cold" '"op":"attn",.*"peak_gflops":(0\.[0-9]*[1-9]|[1-9]).*"probe":"separate","cold_copies":([2-9]|[1-9][0-9]+)\}'
    json_checks reps=2
fi
# interleaved, --seconds bounds the two paths' loop together: no per-path check
for mode in --no-probe ""; do
    if run prefill "${quiet[@]}" --reps 2 "${tiny_prefill[@]}" $mode --seconds 0.2 --cold --llc-mib 1; then
        expect "prefill $mode --cold" '"op":"prefill",.*"probe":"(separate|interleaved)","cold_copies":([2-9]|[1-9][0-9]+)\}'
        json_checks ${mode:+seconds=0.2}
    fi
done
for cmd in cache-write merge; do
    if run "$cmd" "${ref[@]}" --reps 2 --tokens 64 --heads 2 --cache-dtype bf16 --src-dtype bf16 \
           --no-probe --seconds 0.1; then
        expect "$cmd --no-probe" '"probe":"separate"'
        json_checks seconds=0.1
    fi
done

# ---- the table, and usage errors ------------------------------------------
if run decode --threads 1 --reps 2 "${tiny_decode[@]}"; then
    expect "decode table" '^# libmla [0-9]+\.[0-9]+\.[0-9]+ \(.*\), .*; cpu: '
    expect "decode table" '^op +backend +route .* median_us +min/max% +sd%'
    expect "decode table" '^decode +[a-z0-9_]+ '
fi
for bad in "decode --seconds 0" "decode --seconds x" "merge --cold" "decode --llc-mib 0"; do
    cases=$((cases + 1))
    status=0
    $runner "$bench" $bad > /dev/null 2>&1 || status=$?
    [ "$status" -eq 2 ] || fail "mla_bench $bad: exit $status, not 2 (usage error)"
done

echo "bench-smoke: $((cases - failures)) of $cases cases passed"
[ "$failures" -eq 0 ]
