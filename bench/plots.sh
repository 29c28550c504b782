#!/usr/bin/env bash
# make plots: decode and prefill swept over threads and context through
# mla_bench --json, beside the FMA peak and memcpy bandwidth of the same
# thread counts (mla_bench peak), written as CSV and rendered as PNG by
# gnuplot (bench/plots.gp) into bench/results/<machine>/.
#
# Every size is a variable (defaults in brackets); the defaults keep a run to
# minutes on a small machine:
#   BENCH                 mla_bench to run [build/bench/mla_bench]
#   PLOT_MACHINE          folder name under bench/results/ [hostname -s]
#   PLOT_DIR              where the files go [bench/results/$PLOT_MACHINE]
#   PLOT_THREADS          thread counts [1 2 4 ... up to nproc, and nproc]
#   PLOT_MAX_CTX          decode's context sweep: 1024, 2048, ... up to it [131072]
#   PLOT_PREFILL_MAX_CTX  prefill's context sweep, likewise [16384]
#   PLOT_CTX              decode's context in the threads sweep [16384]
#   PLOT_PREFILL_CTX      prefill's context in the threads sweep [4096]
#   PLOT_REPS             --reps of every run [3]
#   PLOT_DECODE_ARGS      more decode options [--batch 1 --heads 16]
#   PLOT_PREFILL_ARGS     more prefill options [--tokens 64 --heads 16]
#   PLOT_STEP             sweep, render, or both [both]: a machine without
#                         gnuplot sweeps, another renders its PLOT_DIR
# The context sweeps run at the largest of PLOT_THREADS.
#
# Files: meta.json (the first run's metadata line: libmla, commit, CPU,
# compiler, OMP_* environment), peak.csv (threads, backend, FMA GFLOP/s),
# amx_peak.csv (threads, AMX-BF16 GFLOP/s; no rows where the CPU or Linux has
# no AMX), copy.csv (threads, memcpy GB/s), decode_threads.csv, decode_ctx.csv,
# prefill_threads.csv, prefill_ctx.csv, and one PNG per sweep.
set -euo pipefail
cd "$(dirname "$0")/.."

PLOT_STEP=${PLOT_STEP:-both}
case "$PLOT_STEP" in sweep | render | both) ;; *) echo "plots: PLOT_STEP=$PLOT_STEP: sweep, render or both"; exit 1 ;; esac
if [ "$PLOT_STEP" != sweep ]; then
    command -v gnuplot > /dev/null || { echo "plots: gnuplot not found: apt-get install gnuplot-nox"; exit 1; }
fi
BENCH=${BENCH:-build/bench/mla_bench}
if [ "$PLOT_STEP" != render ]; then
    [ -x "$BENCH" ] || { echo "plots: $BENCH not found: make all"; exit 1; }
fi

nproc_=$(nproc)
default_threads() {
    local t=1 list=""
    while [ "$t" -lt "$nproc_" ]; do list="$list $t"; t=$((t * 2)); done
    echo "$list $nproc_"
}
contexts_up_to() {
    local c=1024 list=""
    while [ "$c" -le "$1" ]; do list="$list $c"; c=$((c * 2)); done
    echo "$list"
}
PLOT_MACHINE=${PLOT_MACHINE:-$(hostname -s)}
PLOT_DIR=${PLOT_DIR:-bench/results/$PLOT_MACHINE}
PLOT_THREADS=${PLOT_THREADS:-$(default_threads)}
PLOT_MAX_CTX=${PLOT_MAX_CTX:-131072}
PLOT_PREFILL_MAX_CTX=${PLOT_PREFILL_MAX_CTX:-16384}
PLOT_CTX=${PLOT_CTX:-16384}
PLOT_PREFILL_CTX=${PLOT_PREFILL_CTX:-4096}
PLOT_REPS=${PLOT_REPS:-3}
PLOT_DECODE_ARGS=${PLOT_DECODE_ARGS:---batch 1 --heads 16}
PLOT_PREFILL_ARGS=${PLOT_PREFILL_ARGS:---tokens 64 --heads 16}
most_threads=$(printf '%s\n' $PLOT_THREADS | sort -n | tail -n 1)

# csv serves both steps, bench the sweeps; the sweeps write PLOT_DIR's CSV
# files and meta.json, the rendering reads them.
# csv OP KEY...: the KEY columns of stdin's JSON rows whose op is OP, with a
# header line. mla_bench's rows are flat objects of numbers and plain strings.
csv() {
    local op=$1
    shift
    awk -v op="$op" -v keys="$*" '
        function field(line, key,   v) {
            if (!match(line, "\"" key "\":(\"[^\"]*\"|[^,}]*)"))
                return ""
            v = substr(line, RSTART + length(key) + 3, RLENGTH - length(key) - 3)
            gsub(/"/, "", v)
            return v
        }
        BEGIN { n = split(keys, k, " "); for (i = 1; i <= n; i++) printf "%s%s", k[i], i < n ? "," : "\n" }
        field($0, "op") == op { for (i = 1; i <= n; i++) printf "%s%s", field($0, k[i]), i < n ? "," : "\n" }'
}

# bench ARGS...: one mla_bench --json run, its lines also appended to
# runs.jsonl (whose first metadata line becomes meta.json).
bench() {
    echo "  mla_bench $*" >&2
    "$BENCH" "$@" --json --reps "$PLOT_REPS" | tee -a "$PLOT_DIR/runs.jsonl"
}

sweeps() {
    mkdir -p "$PLOT_DIR"
    echo "plots: $PLOT_DIR: threads $PLOT_THREADS; decode ctx to $PLOT_MAX_CTX, prefill ctx to" \
         "$PLOT_PREFILL_MAX_CTX (at $most_threads threads)"

    rm -f "$PLOT_DIR/runs.jsonl"
    decode_keys="threads ctx backend route median_us min_us max_us stddev_us gflops gbps peak_gflops copy_gbps"
    prefill_keys="threads ctx new_tokens heads backend route mha_us absorbed_us mha_stddev_us absorbed_stddev_us mha_gflops absorbed_gflops model_picks"

    for t in $PLOT_THREADS; do bench peak --threads "$t"; done > "$PLOT_DIR/peak.jsonl"
    csv peak_fma threads backend gflops < "$PLOT_DIR/peak.jsonl" > "$PLOT_DIR/peak.csv"
    csv peak_amx_bf16 threads gflops < "$PLOT_DIR/peak.jsonl" | awk -F, '$2 != ""' > "$PLOT_DIR/amx_peak.csv"
    csv copy threads gbps < "$PLOT_DIR/peak.jsonl" > "$PLOT_DIR/copy.csv"

    # sweep COMMAND CTX MAX_CTX ARGS KEYS: COMMAND over PLOT_THREADS at CTX, then
    # over the contexts up to MAX_CTX at the most threads, into COMMAND_threads.csv
    # and COMMAND_ctx.csv.
    sweep() {
        local cmd=$1 ctx=$2 max_ctx=$3 args=$4 keys=$5 t c
        for t in $PLOT_THREADS; do
            bench "$cmd" --threads "$t" --ctx "$ctx" $args
        done | csv "$cmd" $keys > "$PLOT_DIR/${cmd}_threads.csv"
        for c in $(contexts_up_to "$max_ctx"); do
            bench "$cmd" --threads "$most_threads" --ctx "$c" $args
        done | csv "$cmd" $keys > "$PLOT_DIR/${cmd}_ctx.csv"
    }
    sweep decode "$PLOT_CTX" "$PLOT_MAX_CTX" "$PLOT_DECODE_ARGS" "$decode_keys"
    sweep prefill "$PLOT_PREFILL_CTX" "$PLOT_PREFILL_MAX_CTX" "$PLOT_PREFILL_ARGS" "$prefill_keys"

    grep -m 1 '^{"op":"meta"' "$PLOT_DIR/runs.jsonl" > "$PLOT_DIR/meta.json"
    rm -f "$PLOT_DIR/runs.jsonl" "$PLOT_DIR/peak.jsonl"
}

render() {
    # What the titles say about the run: CPU, commit, compiler (from meta.json);
    # the reference lines of the context sweeps: the backend's FMA peak and
    # memcpy at the sweeps' thread count, and the AMX-BF16 peak where a sweep
    # took the amx-bf16 route (its tiles, not FMA, bound it).
    # the sweeps' own thread counts, which may be another machine's
    most_threads=$(awk -F, 'NR > 1 { print $1 }' "$PLOT_DIR/peak.csv" | sort -n | tail -n 1)
    meta() { csv meta "$1" < "$PLOT_DIR/meta.json" | tail -n 1; }
    subtitle="$(meta cpu), libmla $(meta libmla) $(meta commit), $(meta compiler)"
    backend_of() { awk -F, 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == "backend") c = i } NR == 2 { print $c }' "$1"; }
    peak_at() { awk -F, -v b="$1" -v t="$most_threads" '$2 == b && $1 == t { print $3 }' "$PLOT_DIR/peak.csv"; }
    decode_backend=$(backend_of "$PLOT_DIR/decode_ctx.csv")
    prefill_backend=$(backend_of "$PLOT_DIR/prefill_ctx.csv")
    copy_gbps=$(awk -F, -v t="$most_threads" '$1 == t { print $2 }' "$PLOT_DIR/copy.csv")
    # on_amx FILE: 1 if a row of FILE took the amx-bf16 route and AMX was probed
    on_amx() {
        [ -s "$PLOT_DIR/amx_peak.csv" ] && [ "$(wc -l < "$PLOT_DIR/amx_peak.csv")" -gt 1 ] &&
            grep -q ',amx-bf16,' "$1" && echo 1 || echo 0
    }
    amx_at=$( { [ -f "$PLOT_DIR/amx_peak.csv" ] && awk -F, -v t="$most_threads" '$1 == t { print $2 }' "$PLOT_DIR/amx_peak.csv"; } || true)
    gnuplot -e "dir='$PLOT_DIR'; subtitle='${subtitle//\'/}'; most_threads=$most_threads;
                decode_backend='$decode_backend'; prefill_backend='$prefill_backend';
                decode_peak=$(peak_at "$decode_backend"); prefill_peak=$(peak_at "$prefill_backend");
                copy_gbps=$copy_gbps; amx_peak=${amx_at:-0};
                decode_amx=$(on_amx "$PLOT_DIR/decode_ctx.csv"); prefill_amx=$(on_amx "$PLOT_DIR/prefill_ctx.csv")" bench/plots.gp
    ls "$PLOT_DIR"
}

[ "$PLOT_STEP" = render ] || sweeps
[ "$PLOT_STEP" = sweep ] || render
