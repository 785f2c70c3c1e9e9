#!/usr/bin/env bash
# mac_selftest.sh - the whole Metal verification on a Mac with Apple Silicon,
# in one command, writing one file to send back:
#
#   scripts/mac_selftest.sh              # about 10-20 minutes
#   scripts/mac_selftest.sh --quick      # fewer steps and iterations
#   scripts/mac_selftest.sh --dry-run    # print the commands, run nothing (any OS)
#   scripts/mac_selftest.sh --out FILE   # report name (default mac-selftest-HOST-DATE.tar.gz)
#
# What it runs (every step is logged; a failing step does not stop the rest):
#   1. system facts (macOS, chip, memory, git commit)
#   2. missing Homebrew dependencies (scripts/install-deps.sh), `make`
#   3. the test suite (`make test-run`): on macOS test_backend_ops runs every
#      Metal kernel on the GPU against the reference, and the static checks
#      (metal/check) run too
#   4. backend-ops on the GPU again, verbose, with the simdgroup-matrix
#      engine (default on Apple7+) and with the scalar one
#      (MPSDIAG_METAL_SIMDGROUP=0), and one command buffer per kernel
#      (MPSDIAG_METAL_EAGER=1) so an error names its kernel
#   5. --list-devices and the device report: unified memory as the backend
#      sees it (every buffer is shared storage and the device pointer is its
#      contents pointer, so host and GPU use the same memory, no copies)
#   6. the guides' fp16 + BatchNorm case: small_cnn (two BatchNorm layers)
#      trained on Metal in fp16 and with --amp, looking for a non-finite loss
#   7. step times of small_cnn and resnet18_cifar on Metal, and of the same
#      models in PyTorch on MPS when `python3 -c 'import torch'` works
#      (scripts/bench/mps_step_vs_torch.py)
# The report is a .tar.gz of the logs, JSON reports and SUMMARY.txt.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2

dry=0
quick=0
out=""
while [ $# -gt 0 ]; do
    case "$1" in
        --dry-run) dry=1 ;;
        --quick) quick=1 ;;
        --out) out=${2:?--out needs a file name}; shift ;;
        --out=*) out=${1#--out=} ;;
        -h | --help) sed -n '2,30p' "$0"; exit 0 ;;
        *) echo "mac_selftest: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
    shift
done

if [ "$(uname -s)" != Darwin ] && [ $dry = 0 ]; then
    echo "mac_selftest: this runs on macOS with Apple Silicon; use --dry-run to see the commands" >&2
    exit 2
fi
if [ "$(uname -s)" = Darwin ] && [ "$(uname -m)" != arm64 ] && [ $dry = 0 ]; then
    echo "mac_selftest: this Mac is not Apple Silicon ($(uname -m)); the Metal backend targets Apple GPUs" >&2
    exit 2
fi

jobs=$( (sysctl -n hw.perflevel0.physicalcpu || sysctl -n hw.ncpu || echo 4) 2>/dev/null | head -n 1)
host=$(hostname -s 2>/dev/null || echo mac)
stamp=$(date +%Y%m%d-%H%M%S)
[ -n "$out" ] || out="$root/mac-selftest-$host-$stamp.tar.gz"
if [ $dry = 1 ]; then
    dir="\$REPORT_DIR" # printed, not expanded
else
    dir=$(mktemp -d "${TMPDIR:-/tmp}/mac-selftest.XXXXXX")
fi
bin="$root/build/mpsdiag"
steps=200
iters=30
if [ $quick = 1 ]; then
    steps=40
    iters=10
fi

summary="$dir/SUMMARY.txt"
failures=0

say() { echo "$*" | tee -a "$summary"; }

# run NAME CMD...: runs CMD with its output in NAME.log; records PASS/FAIL.
run() {
    local name=$1
    shift
    if [ $dry = 1 ]; then
        printf '+ %s\n' "$*"
        return 0
    fi
    echo "== $name: $*" >&2
    local t0 t1 rc
    t0=$(date +%s)
    "$@" >"$dir/$name.log" 2>&1
    rc=$?
    t1=$(date +%s)
    if [ $rc = 0 ]; then
        say "PASS  $name ($((t1 - t0)) s)"
    else
        say "FAIL  $name (exit $rc, $((t1 - t0)) s; see $name.log)"
        failures=$((failures + 1))
    fi
    return $rc
}

# json_field FILE KEY: the first "KEY": value in a JSON file (numbers, true/false).
json_field() {
    tr -d '\n\t ' <"$1" 2>/dev/null | grep -o "\"$2\":[^,}]*" | head -n 1 | cut -d: -f2
}

[ $dry = 1 ] && echo "# mac_selftest.sh --dry-run: the commands it would run (report: $out)"

# ---- 1. system ------------------------------------------------------------------
if [ $dry = 0 ]; then
    {
        echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
        echo "commit: $(git rev-parse HEAD 2>/dev/null) $(git status --porcelain 2>/dev/null | grep -q . && echo '(modified)')"
        sw_vers
        echo "machine: $(uname -m)"
        echo "chip: $(sysctl -n machdep.cpu.brand_string)"
        echo "memory: $(sysctl -n hw.memsize) bytes"
        echo "cores: $(sysctl -n hw.perflevel0.physicalcpu) performance, $(sysctl -n hw.ncpu) total"
        system_profiler SPDisplaysDataType 2>/dev/null | grep -E 'Chipset|Cores|Metal' || true
    } >"$dir/system.txt" 2>&1
    say "mpsdiag Metal self-test, $(grep chip: "$dir/system.txt" | cut -d' ' -f2-), $(sw_vers -productVersion)"
else
    echo "+ (system facts: sw_vers, sysctl machdep.cpu.brand_string hw.memsize, git rev-parse HEAD)"
fi

# ---- 2-3. build and the test suite -----------------------------------------------------
run deps scripts/install-deps.sh
run build make -j"$jobs"
run tests make test-run TEST_JOBS="$jobs"

# ---- 4. backend-ops on the GPU ------------------------------------------------------------
run backend_ops_gpu env MPSDIAG_BIN="$bin" build/mpsdiag-tests --filter 'backend_ops/metal' --verbose
run backend_ops_gpu_scalar env MPSDIAG_METAL_SIMDGROUP=0 MPSDIAG_BIN="$bin" build/mpsdiag-tests \
    --filter 'backend_ops/metal' --verbose
run backend_ops_gpu_eager env MPSDIAG_METAL_EAGER=1 MPSDIAG_BIN="$bin" build/mpsdiag-tests \
    --filter 'backend_ops/metal' --verbose

# ---- 5. devices and unified memory ----------------------------------------------------------
run list_devices "$bin" --list-devices
run device_report "$bin" --device metal --benchmark-only --model small_cnn --dataset synthetic \
    --batch-size 32 --steps 10 --report "$dir/device_report.json"
if [ $dry = 0 ]; then
    um=$(json_field "$dir/device_report.json" unified_memory)
    say "INFO  unified memory (the Metal device's info): ${um:-not reported}"
    case "$um" in
        true) say "PASS  zero-copy: shared-storage buffers, host and GPU address the same memory" ;;
        *) say "FAIL  zero-copy: the backend assumes unified memory but the device reports '${um:-nothing}'"
           failures=$((failures + 1)) ;;
    esac
else
    echo "+ (reads \"unified_memory\" of the metal device from device_report.json)"
fi

# ---- 6. fp16 + BatchNorm ---------------------------------------------------------------------
for mode in fp16 amp; do
    if [ $mode = fp16 ]; then flag=(--precision fp16); else flag=(--amp); fi
    run "bn_$mode" "$bin" --device metal --model small_cnn --dataset synthetic "${flag[@]}" --epochs 2 \
        --steps "$steps" --batch-size 64 --metrics "$dir/bn_$mode.jsonl" --report "$dir/bn_$mode.json"
    if [ $dry = 0 ]; then
        if grep -Eiq '"(train_loss|val_loss|loss)":(nan|-?inf|null)' "$dir/bn_$mode.jsonl" 2>/dev/null; then
            say "FAIL  bn_$mode: a non-finite loss (see bn_$mode.jsonl)"
            failures=$((failures + 1))
        elif [ -s "$dir/bn_$mode.jsonl" ]; then
            say "PASS  bn_$mode: every logged loss finite (last: $(tail -n 1 "$dir/bn_$mode.jsonl" | grep -o '"train_loss":[^,]*'))"
        fi
    else
        echo "+ (fails if bn_$mode.jsonl holds a NaN/Inf/null loss)"
    fi
done

# ---- 7. step times: mpsdiag on Metal, PyTorch on MPS ------------------------------------------------
have_torch=0
if [ $dry = 1 ] || python3 -c 'import torch' >/dev/null 2>&1; then have_torch=1; fi
for spec in small_cnn:128 resnet18_cifar:64; do
    model=${spec%%:*}
    batch=${spec##*:}
    run "bench_${model}_metal" "$bin" --device metal --benchmark-only --model "$model" --dataset synthetic \
        --batch-size "$batch" --report "$dir/bench_${model}_metal.json"
    if [ $dry = 0 ] && [ -s "$dir/bench_${model}_metal.json" ]; then
        say "INFO  $model batch $batch on Metal: step p50 $(tr -d '\n\t ' <"$dir/bench_${model}_metal.json" |
            grep -o '"step_ms":{[^}]*' | grep -o '"p50":[^,]*' | cut -d: -f2) ms"
    fi
    if [ $have_torch = 1 ]; then
        [ $dry = 1 ] && echo "# only when python3 -c 'import torch' works:"
        run "bench_${model}_torch_mps" python3 scripts/bench/mps_step_vs_torch.py "$model" "$batch" "$iters" 5
        [ $dry = 0 ] && say "INFO  $(tail -n 1 "$dir/bench_${model}_torch_mps.log")"
    fi
done
[ $have_torch = 0 ] && say "SKIP  PyTorch MPS comparison: python3 -c 'import torch' failed"

# ---- report ------------------------------------------------------------------------------------
if [ $dry = 1 ]; then
    echo "+ tar -czf $out -C \$REPORT_DIR .    # REPORT_DIR: a fresh mktemp -d"
    exit 0
fi
say "$failures step(s) failed"
tar -czf "$out" -C "$dir" . && rm -rf "$dir"
echo "mac_selftest: report written to $out (please send this file back)"
[ "$failures" = 0 ]
