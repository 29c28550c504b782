#!/bin/sh
# The AMX targets of bench/RESULTS.md ("AMX tiles") on an AMX machine, in one
# run: each decode case against PyTorch bf16 in alternating rounds
# (torch_decode.py --mla-bench), the fp8 cache against the bf16 cache in
# alternating runs, then prefill attention against SDPA bf16 (alternating
# too) and the up-projection GEMM against the AMX probe and PyTorch's bf16
# linear (torch_gemm.py, alternating too). Needs mla_bench
# built here (or MLA_BENCH=path) and python3 with torch.
#
#   sh bench/amx_targets.sh [threads]        (default: every CPU)
set -eu
T=${1:-$(nproc)}
B=${MLA_BENCH:-build/bench/mla_bench}
HERE=$(dirname "$0")

decode() { # batch heads ctx
    python3 "$HERE/torch_decode.py" --dtype bf16 --batch "$1" --heads "$2" --ctx "$3" \
        --threads "$T" --reps 9 --rounds 3 --mla-bench "$B" --json
}

"$B" peak --threads "$T" --json
decode 4 128 4096
decode 1 128 4096
decode 1 128 32768
decode 32 16 2048
for round in 1 2 3; do
    for cache in bf16 fp8_e4m3; do
        "$B" decode --batch 4 --heads 128 --ctx 4096 --q-dtype bf16 --cache-dtype "$cache" \
            --threads "$T" --reps 9 --json
    done
done
python3 "$HERE/torch_prefill.py" --tokens 2048 --heads 128 --threads "$T" --dtype bf16 \
    --backend avx512_amx --mla-bench "$B"
python3 "$HERE/torch_gemm.py" --dtype bf16 --backend avx512_amx --threads "$T" --reps 7 \
    --mla-bench "$B" --json
