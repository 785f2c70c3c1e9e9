#!/usr/bin/env bash
# Times the training step (forward, loss, backward, SGD step) of small_cnn
# (batch 128) and resnet18_cifar (batch 64) in mpsdiag (build/bench_step) and
# in PyTorch (Debian's python3-torch) on this machine, with the same number of
# threads, in one run, and prints a ratio table.
#
#   scripts/bench/cpu_step_vs_torch.sh [THREADS] [ROUNDS] [LAYOUTS]
#
# THREADS defaults to the physical cores. The two implementations run
# alternately ROUNDS times (default 3) so that load from elsewhere hits both
# alike; each round times ITERS steps after WARMUP; the table shows the best
# round's median per implementation. LAYOUTS: "nchw", "channels_last" or both
# (the default), the same memory format on both sides; mpsdiag's own CPU
# default is channels-last where its direct AVX-512 convolutions run (the
# system report says which), NCHW elsewhere, PyTorch's is NCHW.
# A thread check first times fc1's GEMM at 1 and THREADS threads (build/kernels_bench
# gemm): well under THREADS x means the machine did not run all the threads then
# (a VM's host may hold vCPUs back for minutes), whatever the table says.
# Environment: ITERS (default 5), WARMUP (default 2), PYTHON (default
# /usr/bin/python3, where apt puts torch), MODELS ("small_cnn:128 resnet18_cifar:64").
set -euo pipefail
cd "$(dirname "$0")/../.."

threads=${1:-$(lscpu -p=CORE 2>/dev/null | grep -v '^#' | sort -u | wc -l)}
rounds=${2:-3}
layouts=${3:-nchw channels_last}
iters=${ITERS:-5}
warmup=${WARMUP:-2}
py=${PYTHON:-/usr/bin/python3}
models=${MODELS:-"small_cnn:128 resnet18_cifar:64"}

if ! "$py" -c 'import torch' 2>/dev/null; then
    echo "cpu_step_vs_torch: PyTorch is missing: apt-get install python3-torch" >&2
    exit 1
fi
make --no-print-directory build/bench_step build/kernels_bench >/dev/null

median_of() { sed -n 's/.*"median_ms": *\([0-9.]*\).*/\1/p'; }
best() { sort -g | head -1; }

echo "CPU: $(lscpu | sed -n 's/^Model name: *//p'), $threads threads, $rounds rounds of $iters steps (+$warmup warm-up)"
echo "OpenBLAS core: ${OPENBLAS_CORETYPE:-auto}; load average: $(cut -d' ' -f1-3 /proc/loadavg)"
# Whether the threads run at all: a VM's vCPUs may be held back by its host
# for minutes, which no alternation between the two sides can show.
gemm_rate() { build/kernels_bench "$1" 10 gemm | awk '$1 == "batch" && $2 == 128 { print $4 }'; }
if [ "$threads" -gt 1 ]; then
    r1=$(gemm_rate 1) rn=$(gemm_rate "$threads")
    echo "thread check: fc1's GEMM at $threads threads ${rn:-?} GFLOP/s, at 1 thread ${r1:-?}" \
        "($(awk -v a="${rn:-0}" -v b="${r1:-0}" 'BEGIN { printf "%.2fx", (b > 0 ? a / b : 0) }'))"
fi
printf '%-16s %6s %-14s %12s %12s %10s\n' model batch layout "mpsdiag ms" "pytorch ms" "speed-up"
for mb in $models; do
    model=${mb%%:*}
    batch=${mb##*:}
    for layout in $layouts; do
        flags=$([ "$layout" = channels_last ] && echo channels_last || true)
        ours=() theirs=()
        for ((r = 0; r < rounds; r++)); do
            ours+=("$(build/bench_step "$model" "$batch" "$iters" "$warmup" "$threads" cpu "$flags" | median_of)")
            theirs+=("$("$py" scripts/bench/cpu_step_vs_torch.py "$model" "$batch" "$iters" "$warmup" "$threads" "$flags" | median_of)")
        done
        a=$(printf '%s\n' "${ours[@]}" | best)
        b=$(printf '%s\n' "${theirs[@]}" | best)
        printf '%-16s %6s %-14s %12.1f %12.1f %9.2fx\n' "$model" "$batch" "$layout" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN { print b / a }')"
    done
done
echo "speed-up = PyTorch step time / mpsdiag step time (above 1: mpsdiag is faster)"
