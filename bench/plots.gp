# The PNGs of make plots (bench/plots.sh writes the CSVs and sets):
#   dir              the folder of the CSVs, where the PNGs go too
#   subtitle         CPU, libmla version and commit, compiler
#   most_threads     the thread count of the context sweeps
#   decode_backend, prefill_backend   the backends the runs took
#   decode_peak, prefill_peak         their FMA GFLOP/s at most_threads
#   copy_gbps        memcpy GB/s at most_threads
#   decode_amx, prefill_amx           1 where the sweep took the amx-bf16 route
#   amx_peak         the AMX-BF16 probe's GFLOP/s at most_threads (0 without AMX)
# Left axis GFLOP/s against the FMA peak (dashed); right axis decode's GB/s
# of its cache read against memcpy's (dashed), prefill's time per call.

set terminal pngcairo size 1000,620 font ",10"
set datafile separator ","
set grid
set key outside right top
set logscale x 2
set ylabel "GFLOP/s"
set yrange [0:*]

# peak.csv's header and the rows of one backend (a filter in the plot would
# leave gaps that break the line)
peaks_of(backend) = "< grep -e '^threads' -e '^[0-9]*,".backend.",' ".dir."/peak.csv"

# The AMX-BF16 peak, drawn beside the FMA peak on a sweep of the amx-bf16
# route: against threads (amx_threads) and as a level (amx_level).
amx_threads(on) = on ? ", '".dir."/amx_peak.csv' using 'threads':'gflops' with linespoints dt 4 title 'AMX-BF16 peak'" : ""
amx_level(on) = on ? sprintf(", %g with lines dt 4 title 'AMX-BF16 peak'", amx_peak) : ""

decode_amx_threads = amx_threads(decode_amx)
decode_amx_level = amx_level(decode_amx)
prefill_amx_threads = amx_threads(prefill_amx)
prefill_amx_level = amx_level(prefill_amx)

# ---- decode -----------------------------------------------------------------
set y2label "GB/s"
set y2range [0:*]
set ytics nomirror
set y2tics

set output dir."/decode_threads.png"
set title "mla_decode vs threads (".decode_backend.")\n".subtitle noenhanced
set xlabel "threads"
plot dir."/decode_threads.csv" using "threads":"gflops" with linespoints lw 2 title "decode GFLOP/s", \
     peaks_of(decode_backend) using "threads":"gflops" with linespoints dt 2 title "FMA peak", \
     dir."/decode_threads.csv" using "threads":"gbps" axes x1y2 with linespoints lw 2 title "decode GB/s (cache read)", \
     dir."/copy.csv" using "threads":"gbps" axes x1y2 with linespoints dt 2 title "memcpy GB/s" \
     @decode_amx_threads

set output dir."/decode_ctx.png"
set title sprintf("mla_decode vs context, %d threads (%s)\n%s", most_threads, decode_backend, subtitle) noenhanced
set xlabel "context (tokens)"
plot dir."/decode_ctx.csv" using "ctx":"gflops" with linespoints lw 2 title "decode GFLOP/s", \
     decode_peak with lines dt 2 title "FMA peak", \
     dir."/decode_ctx.csv" using "ctx":"gbps" axes x1y2 with linespoints lw 2 title "decode GB/s (cache read)", \
     copy_gbps axes x1y2 with lines dt 2 title "memcpy GB/s" \
     @decode_amx_level

# ---- prefill ----------------------------------------------------------------
# Each path's GFLOP/s on its own arithmetic (mla_bench --help) against the
# peak, and its time on the right axis: the lower time is the faster path.
set y2label "ms per call"

set output dir."/prefill_threads.png"
set title "mla_prefill vs threads (".prefill_backend.")\n".subtitle noenhanced
set xlabel "threads"
plot dir."/prefill_threads.csv" using "threads":"mha_gflops" with linespoints lw 2 title "MHA GFLOP/s", \
     dir."/prefill_threads.csv" using "threads":"absorbed_gflops" with linespoints lw 2 title "absorbed GFLOP/s", \
     peaks_of(prefill_backend) using "threads":"gflops" with linespoints dt 2 title "FMA peak", \
     dir."/prefill_threads.csv" using "threads":(column("mha_us") / 1e3) axes x1y2 with linespoints dt 3 title "MHA ms", \
     dir."/prefill_threads.csv" using "threads":(column("absorbed_us") / 1e3) axes x1y2 with linespoints dt 3 title "absorbed ms" \
     @prefill_amx_threads

set output dir."/prefill_ctx.png"
set title sprintf("mla_prefill vs context, %d threads (%s)\n%s", most_threads, prefill_backend, subtitle) noenhanced
set xlabel "context (tokens)"
plot dir."/prefill_ctx.csv" using "ctx":"mha_gflops" with linespoints lw 2 title "MHA GFLOP/s", \
     dir."/prefill_ctx.csv" using "ctx":"absorbed_gflops" with linespoints lw 2 title "absorbed GFLOP/s", \
     prefill_peak with lines dt 2 title "FMA peak", \
     dir."/prefill_ctx.csv" using "ctx":(column("mha_us") / 1e3) axes x1y2 with linespoints dt 3 title "MHA ms", \
     dir."/prefill_ctx.csv" using "ctx":(column("absorbed_us") / 1e3) axes x1y2 with linespoints dt 3 title "absorbed ms" \
     @prefill_amx_level
