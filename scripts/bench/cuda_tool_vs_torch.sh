#!/usr/bin/env bash
# cuda_tool_vs_torch.sh - mpsdiag's own benchmark on CUDA (compile on: graph
# replays; --no-compile: op by op without fusions) against PyTorch eager
# training steps of the same models, in one call on one machine.
#
#   scripts/bench/cuda_tool_vs_torch.sh [MPSDIAG] [OUTDIR]
#
# Cases (the CUDA issue's): small_cnn b256, resnet18_cifar b256, resnet50 b128,
# each fp32 (TF32) and bf16, channels-last, synthetic data, SGD with momentum.
# mpsdiag: `--benchmark-only --bench-iters 30`, p50 of event-timed steps;
# also with `--compile-mode max-autotune` (convolution plans chosen by timing
# the candidates, as PyTorch's cudnn.benchmark does).
# PyTorch: scripts/bench/cuda_vs_torch.py torch-steps (cudnn.benchmark,
# channels-last, median of 20). Prints a markdown table with the ratios and
# the fraction of the bf16 GEMM peak that mpsdiag's benchmark measured.
# Run from the repository root with a CUDA build (make) and python3 + torch.
# PY_ENV: extra `env` arguments for the PyTorch run (e.g. PY_ENV="-u
# LD_LIBRARY_PATH" when the path set for mpsdiag's libraries would make torch
# load another cuDNN than its own).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=${1:-build/mpsdiag}
out=${2:-$(mktemp -d)}
mkdir -p "$out"
cases=("small_cnn 256 fp32" "small_cnn 256 bf16" "resnet18_cifar 256 fp32" "resnet18_cifar 256 bf16"
       "resnet50 128 fp32" "resnet50 128 bf16")
for mode in compile autotune nocompile; do
    for c in "${cases[@]}"; do
        set -- $c
        flags=(--device cuda --benchmark-only --epochs 0 --model "$1" --batch-size "$2" --channels-last
               --bench-iters 30 --quiet --report "$out/${mode}_$1_$3.json")
        [ "$3" = bf16 ] && flags+=(--amp)
        [ "$mode" = nocompile ] && flags+=(--no-compile)
        [ "$mode" = autotune ] && flags+=(--compile-mode max-autotune)
        "$bin" "${flags[@]}" > "$out/${mode}_$1_$3.txt" 2>&1 || echo "mpsdiag $mode $c failed: see $out/${mode}_$1_$3.txt" >&2
    done
done
# shellcheck disable=SC2086
env ${PY_ENV:-} PYTHONUNBUFFERED=1 python3 "$here/cuda_vs_torch.py" torch-steps . > "$out/torch_steps.tsv"
python3 - "$out" <<'PY' | tee "$out/table.md"
import json, os, sys
out = sys.argv[1]
torch = {}
for line in open(os.path.join(out, "torch_steps.tsv")):
    f = line.split("\t")
    if len(f) >= 3 and f[0].startswith("step_"):
        torch[(f[0], f[1])] = float(f[2])
def bench(mode, m, p):
    try:
        return json.load(open(os.path.join(out, f"{mode}_{m}_{p}.json")))["benchmark"]
    except (OSError, KeyError, ValueError):
        return None
print("| step (ms) | compile (graph) | max-autotune | op by op | --no-compile | PyTorch eager | compile vs PyTorch "
      "| max-autotune vs PyTorch | --no-compile vs PyTorch | of bf16 peak |")
print("|---|---|---|---|---|---|---|---|---|---|")
peak = None
for m, b in (("small_cnn", 256), ("resnet18_cifar", 256), ("resnet50", 128)):
    B = bench("compile", m, "bf16")
    if B and B["peak"].get("gflops_compute_dtype"):
        peak = max(peak or 0, B["peak"]["gflops_compute_dtype"])
for m, b in (("small_cnn", 256), ("resnet18_cifar", 256), ("resnet50", 128)):
    for p in ("fp32", "bf16"):
        c, n, a = bench("compile", m, p), bench("nocompile", m, p), bench("autotune", m, p)
        t = torch.get((f"step_{m}_b{b}", p))
        cs = c["training"]["step_ms"]["p50"] if c else float("nan")
        es = (c["training"]["graph"].get("eager_step_ms") or {}).get("p50", float("nan")) if c else float("nan")
        ns = n["training"]["step_ms"]["p50"] if n else float("nan")
        at = a["training"]["step_ms"]["p50"] if a else float("nan")
        frac = c["training"]["achieved_gflops"] / peak if c and peak else float("nan")
        r = lambda x: f"{t / x:.2f}x" if t and x == x else "-"
        print(f"| {m} b{b} {p} | {cs:.3f} | {at:.3f} | {es:.3f} | {ns:.3f} | {t if t else float('nan'):.3f} | {r(cs)} "
              f"| {r(at)} | {r(ns)} | {100 * frac:.1f}% |")
print(f"\nbf16 GEMM peak measured by mpsdiag: {peak / 1e3 if peak else float('nan'):.0f} TFLOP/s")
PY
