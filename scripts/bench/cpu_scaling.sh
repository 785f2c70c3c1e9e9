#!/usr/bin/env bash
# cpu_scaling.sh - how mpsdiag's CPU backend scales with threads, side by side
# with PyTorch on the same threads, in one run:
#   0. the direct convolution kernels alone (build/conv_direct_scaling: no
#      library needed), with a check that results match 1 thread's bit for bit;
#   1. the convolution kernels (forward, backward-data, backward-filter) on the
#      conv layers of small_cnn (batch 128) and resnet18_cifar (batch 64),
#      build/kernels_bench against kernels_bench_torch.py;
#   2. the whole training step (samples/s) of small_cnn and resnet18_cifar,
#      build/bench_step against cpu_step_vs_torch.py.
# For each it prints the time per thread count, the speed-up over 1 thread and
# the parallel efficiency (T1 / (t * Tt)), and mpsdiag against PyTorch.
#
#   scripts/bench/cpu_scaling.sh [THREAD LIST]      (default "1 2 4 8 16", up to nproc)
#
# Environment:
#   SKIP_BUILD=1       do not build: use the binaries below as they are
#   MPSDIAG_BIN=DIR    where bench_step and kernels_bench are (default build)
#   BENCH_STEP=PATH, KERNELS_BENCH=PATH, CONV_DIRECT=PATH   each binary on its own
#   PYTHON             Python with torch (default /usr/bin/python3); NO_TORCH=1 skips PyTorch
#   SECTIONS           any of "direct kernels steps" (default all three)
#   LAYOUT             nhwc (channels-last, default) or nchw, the same on both sides
#   ITERS              kernel repetitions, the best counts (default 5)
#   KERNEL_ROUNDS      kernel runs per thread count, taken in turn over the
#                      thread list; each layer's fastest pass counts (default
#                      1; 3 on a VM whose one-thread speed drifts)
#   STEP_ITERS, WARMUP steps timed and warm-up steps per run, for every model
#                      (default 30 and 10 for small_cnn, whose 16-thread steps
#                      of a few ms read 2-4x slow in 5-step windows on a VM,
#                      5 and 5 for the others: at 16 threads the first steps
#                      still pay for cold buffers)
#   ROUNDS             runs per thread count of the training step; the median
#                      run counts (default 3; mpsdiag and PyTorch alternate)
#   MODELS             "small_cnn:128 resnet18_cifar:64"
#   OPENBLAS_CORETYPE  left as given; when unset the script sets SkylakeX on
#                      CPUs with AVX-512, Haswell on AVX2 ones (Debian's
#                      OpenBLAS may otherwise pick generic or AVX2 kernels on
#                      CPUs newer than it knows) and prints what OpenBLAS uses:
#                      mpsdiag's binaries would choose the same themselves, and
#                      Debian's PyTorch, which loads the same OpenBLAS, gets it too
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"

ncpu=$(nproc)
list=${1:-"1 2 4 8 16"}
threads=()
for t in $list; do
    if [ "$t" -le "$ncpu" ]; then threads+=("$t"); fi
done
[ ${#threads[@]} -gt 0 ] || threads=(1)
if [ "${threads[0]}" != 1 ]; then threads=(1 "${threads[@]}"); fi # efficiency is against 1 thread
sections=${SECTIONS:-direct kernels steps}
layout=${LAYOUT:-nhwc}
iters=${ITERS:-5}
kernel_rounds=${KERNEL_ROUNDS:-1}
step_iters_of() { if [ -n "${STEP_ITERS:-}" ]; then echo "$STEP_ITERS"; elif [ "$1" = small_cnn ]; then echo 30; else echo 5; fi; }
warmup_of() { if [ -n "${WARMUP:-}" ]; then echo "$WARMUP"; elif [ "$1" = small_cnn ]; then echo 10; else echo 5; fi; }
rounds=${ROUNDS:-3}
models=${MODELS:-"small_cnn:128 resnet18_cifar:64"}
py=${PYTHON:-/usr/bin/python3}
bindir=${MPSDIAG_BIN:-build}
bench_step=${BENCH_STEP:-$bindir/bench_step}
kernels_bench=${KERNELS_BENCH:-$bindir/kernels_bench}
conv_direct=${CONV_DIRECT:-$bindir/conv_direct_scaling}
case $layout in
nhwc | channels_last) layout=nhwc; step_flags=channels_last ;;
nchw) step_flags= ;;
*) echo "cpu_scaling: LAYOUT must be nhwc or nchw, not '$layout'" >&2; exit 2 ;;
esac

die() { echo "cpu_scaling: $*" >&2; exit 1; }

# ---- OpenBLAS core type ---------------------------------------------------
flags=$(grep -m1 '^flags' /proc/cpuinfo 2>/dev/null || true)
has() { case " $flags " in *" $1 "*) return 0 ;; esac; return 1; }
if [ -n "${OPENBLAS_CORETYPE:-}" ]; then
    core_note="OPENBLAS_CORETYPE=$OPENBLAS_CORETYPE (from the environment)"
elif has avx512f && has avx512bw && has avx512vl; then
    export OPENBLAS_CORETYPE=SkylakeX
    core_note="OPENBLAS_CORETYPE=SkylakeX (set here: the CPU has AVX-512)"
elif has avx2 && has fma; then
    export OPENBLAS_CORETYPE=Haswell
    core_note="OPENBLAS_CORETYPE=Haswell (set here: the CPU has AVX2, no AVX-512)"
else
    core_note="OPENBLAS_CORETYPE unset (no AVX2: OpenBLAS chooses)"
fi

# ---- binaries ----------------------------------------------------------------
want_direct=0 want_kernels=0 want_steps=0
case " $sections " in *" direct "*) want_direct=1 ;; esac
case " $sections " in *" kernels "*) want_kernels=1 ;; esac
case " $sections " in *" steps "*) want_steps=1 ;; esac
if [ "${SKIP_BUILD:-0}" != 1 ]; then
    if [ $want_direct = 1 ]; then
        mkdir -p "$(dirname "$conv_direct")"
        cc -std=c11 -O3 -fno-fast-math -D_POSIX_C_SOURCE=200809L -Isrc -pthread scripts/bench/conv_direct_scaling.c \
            src/backend/cpu/cpu_conv_direct.c src/core/threadpool.c src/core/mem.c -o "$conv_direct" ||
            die "building $conv_direct failed"
    fi
    if [ $want_steps = 1 ]; then
        make --no-print-directory NO_CUDA="${NO_CUDA:-1}" "$bindir/bench_step" >/dev/null || die "building $bindir/bench_step failed"
    fi
    if [ $want_kernels = 1 ]; then
        make --no-print-directory NO_CUDA="${NO_CUDA:-1}" "$bindir/kernels_bench" >/dev/null ||
            die "building $bindir/kernels_bench failed"
    fi
fi
[ $want_direct = 0 ] || [ -x "$conv_direct" ] || die "$conv_direct is missing (build it, or set CONV_DIRECT / MPSDIAG_BIN)"
[ $want_steps = 0 ] || [ -x "$bench_step" ] || die "$bench_step is missing (build it, or set BENCH_STEP / MPSDIAG_BIN)"
[ $want_kernels = 0 ] || [ -x "$kernels_bench" ] || die "$kernels_bench is missing (build it, or set KERNELS_BENCH / MPSDIAG_BIN)"

torch=0
if [ "${NO_TORCH:-0}" != 1 ]; then
    if "$py" -c 'import torch' 2>/dev/null; then
        torch=1
    else
        echo "cpu_scaling: no PyTorch in $py (apt-get install python3-torch, or set PYTHON): mpsdiag only" >&2
    fi
fi

# which kernels OpenBLAS really runs (the library the benchmark binaries load)
blas_core=unknown
bin=$bench_step
[ -x "$bin" ] || bin=$kernels_bench
lib=
[ -x "$bin" ] && lib=$(ldd "$bin" 2>/dev/null | sed -n 's/.*=> \([^ ]*\(openblas\|libblas\)[^ ]*\) .*/\1/p' | head -1)
if [ -n "$lib" ] && command -v python3 >/dev/null; then
    blas_core=$(python3 -c 'import ctypes, sys
l = ctypes.CDLL(sys.argv[1]); f = l.openblas_get_corename; f.restype = ctypes.c_char_p
print(f().decode())' "$lib" 2>/dev/null || echo unknown)
fi

model=$(sed -n 's/^model name[[:space:]]*: *//p' /proc/cpuinfo | head -1)
isa=none
if has avx512f; then isa=AVX-512; elif has avx2; then isa=AVX2; fi
echo "CPU: ${model:-unknown}, $ncpu logical CPUs, $isa; threads: ${threads[*]}; layout: $layout"
echo "OpenBLAS: $core_note; its kernels: $blas_core"
if [ $torch = 1 ]; then
    echo "PyTorch: $("$py" -c 'import torch; print(torch.__version__)') ($py)"
fi
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"

eff() { awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { if (b > 0 && t > 0) printf "%.0f%%", 100 * a / (t * b); else printf "-" }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a > 0 && b > 0) printf "%.2fx", a / b; else printf "-" }'; }
median() { sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print 0; else if (NR % 2) print v[(NR + 1) / 2]; else print (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

# ---- 0. the direct kernels alone -----------------------------------------------
if [ $want_direct = 1 ]; then
    echo
    echo "== direct convolution kernels alone =="
    tmax=${threads[${#threads[@]} - 1]}
    "$conv_direct" "$tmax" "$iters" || echo "cpu_scaling: $conv_direct failed or found results that differ" >&2
fi

# ---- 1. kernels ------------------------------------------------------------
# kernels_bench prints "layer fwd bwd data filter count" lines; the totals
# weight each layer by its count (the first layer has no data gradient)
kernel_totals() { # $1: small_cnn or resnet18; stdin: kernels_bench output -> "fwd data filter"
    awk -v m="$1." '$1 ~ "^" m && NF == 6 {
        first = ($1 == "small_cnn.conv1" || $1 == "resnet18.stem")
        f += $2 * $6; if (!first) d += $4 * $6; g += $5 * $6
    } END { printf "%.2f %.2f %.2f\n", f, d, g }'
}
fastest_passes() { # stdin: several kernels_bench outputs -> one, each layer's fastest of each pass
    awk 'NF == 6 && $1 ~ /\./ {
        if (!($1 in n)) { order[++k] = $1; f[$1] = $2; b[$1] = $3; d[$1] = $4; g[$1] = $5 }
        n[$1]++; c[$1] = $6
        if ($2 < f[$1]) f[$1] = $2
        if ($3 < b[$1]) b[$1] = $3
        if ($4 < d[$1]) d[$1] = $4
        if ($5 < g[$1]) g[$1] = $5
    } END { for (i = 1; i <= k; i++) { x = order[i]; print x, f[x], b[x], d[x], g[x], c[x] } }'
}
torch_totals() { # stdin: kernels_bench_torch.py output -> "fwd bwd"
    awk -v m="$1." '$1 ~ "^" m && NF == 4 { f += $2 * $4; b += $3 * $4 } END { printf "%.2f %.2f\n", f, b }'
}

if [ $want_kernels = 1 ]; then
    echo
    echo "== convolution kernels (best of $iters$([ "$kernel_rounds" -gt 1 ] && echo " in each of $kernel_rounds runs"); ms per step's conv layers, weighted by layer count) =="
    declare -A kout tout
    # KERNEL_ROUNDS passes over the thread counts, one process each, keeping
    # each layer's fastest pass: a VM's slow phases last longer than one
    # process and would otherwise decide the one-thread baseline
    for ((r = 0; r < kernel_rounds; r++)); do
        for t in "${threads[@]}"; do
            kout[$t]+="$("$kernels_bench" "$t" "$iters" "$layout")"$'\n'
        done
    done
    for t in "${threads[@]}"; do
        kout[$t]=$(fastest_passes <<<"${kout[$t]}")
        if [ $torch = 1 ]; then tout[$t]=$("$py" scripts/bench/kernels_bench_torch.py "$t" "$iters" "$layout"); fi
    done
    for m in small_cnn resnet18; do
        echo
        echo "$m: mpsdiag (speed-up over 1 thread, parallel efficiency)$([ $torch = 1 ] && echo '; PyTorch; mpsdiag vs PyTorch')"
        printf '%3s %9s %6s %5s %9s %6s %5s %9s %6s %5s' t fwd x eff data x eff filter x eff
        [ $torch = 1 ] && printf ' | %8s %8s %7s %7s' "pt fwd" "pt bwd" "fwd" "bwd"
        echo
        read -r f1 d1 g1 <<<"$(kernel_totals "$m" <<<"${kout[1]}")"
        for t in "${threads[@]}"; do
            read -r f d g <<<"$(kernel_totals "$m" <<<"${kout[$t]}")"
            printf '%3s %9.1f %6s %5s %9.1f %6s %5s %9.1f %6s %5s' "$t" "$f" "$(ratio "$f1" "$f")" "$(eff "$f1" "$f" "$t")" \
                "$d" "$(ratio "$d1" "$d")" "$(eff "$d1" "$d" "$t")" "$g" "$(ratio "$g1" "$g")" "$(eff "$g1" "$g" "$t")"
            if [ $torch = 1 ]; then
                read -r pf pb <<<"$(torch_totals "$m" <<<"${tout[$t]}")"
                printf ' | %8.1f %8.1f %7s %7s' "$pf" "$pb" "$(ratio "$pf" "$f")" \
                    "$(ratio "$pb" "$(awk -v a="$d" -v b="$g" 'BEGIN { print a + b }')")"
            fi
            echo
        done
    done
    tmax=${threads[${#threads[@]} - 1]}
    echo
    echo "per layer at $tmax threads: ms (parallel efficiency against 1 thread)"
    printf '%-18s %16s %16s %16s\n' layer fwd data filter
    paste <(awk 'NF == 6 && $1 ~ /\./ { print $1, $2, $4, $5 }' <<<"${kout[1]}") \
        <(awk 'NF == 6 && $1 ~ /\./ { print $2, $4, $5 }' <<<"${kout[$tmax]}") |
        while read -r n f1 d1 g1 f d g; do
            printf '%-18s %8.2f (%5s) %8.2f (%5s) %8.2f (%5s)\n' "$n" "$f" "$(eff "$f1" "$f" "$tmax")" \
                "$d" "$(eff "$d1" "$d" "$tmax")" "$g" "$(eff "$g1" "$g" "$tmax")"
        done
fi

# ---- 2. training steps -------------------------------------------------------
field() { sed -n "s/.*\"$1\": *\([0-9.]*\).*/\1/p"; }

if [ $want_steps = 1 ]; then
    echo
    echo "== training step (median of $rounds runs; samples/s) =="
    for mb in $models; do
        m=${mb%%:*} batch=${mb##*:}
        step_iters=$(step_iters_of "$m") warmup=$(warmup_of "$m")
        echo
        echo "$m, batch $batch, ${step_flags:-nchw}, $step_iters steps each after $warmup warm-up"
        printf '%3s %10s %7s %5s' t mpsdiag x eff
        [ $torch = 1 ] && printf ' %10s %7s %5s %9s' pytorch x eff "vs torch"
        echo
        s1="" p1=""
        for t in "${threads[@]}"; do
            ours=() theirs=()
            for ((r = 0; r < rounds; r++)); do
                ours+=("$("$bench_step" "$m" "$batch" "$step_iters" "$warmup" "$t" cpu "$step_flags" | field median_ms)")
                if [ $torch = 1 ]; then
                    theirs+=("$("$py" scripts/bench/cpu_step_vs_torch.py "$m" "$batch" "$step_iters" "$warmup" "$t" \
                        "$step_flags" | field median_ms)")
                fi
            done
            a=$(printf '%s\n' "${ours[@]}" | median)
            sa=$(awk -v b="$batch" -v ms="$a" 'BEGIN { printf "%.1f", (ms > 0 ? b * 1000 / ms : 0) }')
            [ -n "$s1" ] || s1=$sa
            printf '%3s %10s %7s %5s' "$t" "$sa" "$(ratio "$sa" "$s1")" "$(eff "$sa" "$s1" "$t")"
            if [ $torch = 1 ]; then
                b=$(printf '%s\n' "${theirs[@]}" | median)
                sb=$(awk -v bt="$batch" -v ms="$b" 'BEGIN { printf "%.1f", (ms > 0 ? bt * 1000 / ms : 0) }')
                [ -n "$p1" ] || p1=$sb
                printf ' %10s %7s %5s %9s' "$sb" "$(ratio "$sb" "$p1")" "$(eff "$sb" "$p1" "$t")" "$(ratio "$sa" "$sb")"
            fi
            echo
        done
    done
fi
echo
echo "x: speed-up over 1 thread; eff: parallel efficiency (speed-up / threads); vs torch: mpsdiag / PyTorch"
echo "(above 1: mpsdiag faster). Per-kernel PyTorch 'bwd' is data and filter gradients in one call."
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
