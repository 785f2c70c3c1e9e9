#!/usr/bin/env bash
# run_on_mac.sh - run mpsdiag on Apple Silicon with the environment and flags
# the seeds' Mac guides describe, then forward every argument ("$@").
#
#   scripts/run_on_mac.sh [mpsdiag flags...]
#   scripts/run_on_mac.sh --benchmark-only --batch-sweep auto --html mac.html
#
# What it applies (a flag you give yourself always wins):
#   MPSDIAG_ENABLE_FALLBACK=1          ops Metal lacks run on the CPU (unified memory)
#   MPSDIAG_HIGH_WATERMARK_RATIO=F     the chip preset's memory fraction (0.8), unless set
#   OMP/OPENBLAS/VECLIB thread counts  the performance cores (hw.perflevel0.physicalcpu)
#   --device mps                       unless --device is given
#   --threads N                        the performance cores
#   --batch-size B                     from the unified memory, as the seeds' MPS guide:
#                                      8 for 8 GB, 16 by default, 32 for 16 GB and more
#   --compile-mode M                   the chip preset's (configs/presets), unless
#                                      --compile-mode or --no-compile is given
#   --d-model N --d-ff N               forecasting runs (a time-series flag or --model
#                                      itransformer): the chip preset's, unless given
# Testing elsewhere: MPSDIAG_CHIP="Apple M2 Pro" MPSDIAG_MEMSIZE=17179869184
# RUN_ON_MAC_DRY_RUN=1 prints the environment and command instead of running.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
bin=${MPSDIAG:-$root/build/mpsdiag}

note() { echo "run_on_mac: $*" >&2; }

chip=${MPSDIAG_CHIP:-}
mem=${MPSDIAG_MEMSIZE:-}
pcores=${MPSDIAG_PCORES:-}
if [ "$(uname -s)" = Darwin ]; then
    [ -n "$chip" ] || chip=$(sysctl -n machdep.cpu.brand_string 2>/dev/null || true)
    [ -n "$mem" ] || mem=$(sysctl -n hw.memsize 2>/dev/null || true)
    [ -n "$pcores" ] || pcores=$(sysctl -n hw.perflevel0.physicalcpu 2>/dev/null || sysctl -n hw.physicalcpu 2>/dev/null || true)
elif [ -z "$chip" ]; then
    note "not macOS: applying nothing Mac-specific; running mpsdiag as asked"
fi

has_flag() { # has_flag --batch-size --batch_size ...: was any of these given?
    local a f
    for a in "${ARGS[@]}"; do
        for f in "$@"; do
            case "$a" in "$f" | "$f"=*) return 0 ;; esac
        done
    done
    return 1
}

# The preset whose "match" list has the longest whole-word prefix of the chip name.
preset=""
if [ -n "$chip" ]; then
    best=0
    for f in "$root"/configs/presets/*.json; do
        [ -f "$f" ] || continue
        list=$(tr -d '\n' <"$f" | sed -n 's/.*"match"[[:space:]]*:[[:space:]]*\[\([^]]*\)\].*/\1/p')
        IFS=',' read -r -a names <<<"$list"
        for n in "${names[@]}"; do
            n=$(echo "$n" | sed 's/^[[:space:]]*"//; s/"[[:space:]]*$//')
            [ -n "$n" ] || continue
            case "$chip" in
                "$n") ;;
                "$n"[!A-Za-z0-9]*) ;;
                *) continue ;;
            esac
            if [ ${#n} -gt $best ]; then best=${#n}; preset=$f; fi
        done
    done
fi
jval() { tr -d '\n' <"$1" | sed -n "s/.*\"$2\"[[:space:]]*:[[:space:]]*\"\{0,1\}\([^,\"}]*\)\"\{0,1\}.*/\1/p"; }

ARGS=("$@")
extra=()
if [ -n "$chip" ]; then
    export MPSDIAG_ENABLE_FALLBACK=1
    ratio=0.8
    if [ -n "$preset" ]; then
        ratio=$(jval "$preset" memory_fraction)
        note "chip '$chip': preset $(basename "$preset") ($(jval "$preset" chip))"
    else
        note "chip '$chip': no preset in configs/presets; using the general Apple Silicon settings"
    fi
    export MPSDIAG_HIGH_WATERMARK_RATIO=${MPSDIAG_HIGH_WATERMARK_RATIO:-$ratio}
    if [ -n "$pcores" ]; then
        export OMP_NUM_THREADS=${OMP_NUM_THREADS:-$pcores}
        export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-$pcores}
        export VECLIB_MAXIMUM_THREADS=${VECLIB_MAXIMUM_THREADS:-$pcores}
        has_flag --threads || extra+=(--threads "$pcores")
    fi
    has_flag --device --device-type --device_type || extra+=(--device mps)
    if ! has_flag --batch-size --batch_size && ! has_flag --find-batch-size --find_batch_size; then
        bs=16
        if [ -n "$mem" ]; then
            gib=$((mem / 1073741824))
            if [ "$gib" -le 8 ]; then bs=8; elif [ "$gib" -ge 16 ]; then bs=32; fi
        fi
        extra+=(--batch-size "$bs")
    fi
    if [ -n "$preset" ] && ! has_flag --compile-mode --compile_mode --no-compile --no_compile; then
        extra+=(--compile-mode "$(jval "$preset" compile_mode)")
    fi
    # a forecasting run (a time-series flag or the itransformer): the preset's model widths
    if [ -n "$preset" ] && { has_flag --seq-len --seq_len --pred-len --pred_len --d-model --d_model --d-ff --d_ff \
        --n-heads --n_heads --e-layers --e_layers --features --target --loss-function --loss_function ||
        printf '%s\n' "${ARGS[@]}" | grep -qx 'itransformer'; }; then
        has_flag --d-model --d_model || extra+=(--d-model "$(jval "$preset" d_model)")
        has_flag --d-ff --d_ff || extra+=(--d-ff "$(jval "$preset" d_ff)")
    fi
fi

if [ -n "${RUN_ON_MAC_DRY_RUN:-}" ]; then
    env | grep -E '^(MPSDIAG_|OMP_NUM|OPENBLAS_NUM|VECLIB)' | sort || true
    echo "$bin" "${extra[@]}" "$@"
    exit 0
fi
exec "$bin" "${extra[@]}" "$@"
