#!/usr/bin/env bash
# cuda_vs_torch.sh - mpsdiag's CUDA kernels vs PyTorch on the same shapes, one call.
#
#   scripts/bench/cuda_vs_torch.sh [KBENCH] [OUTDIR]
#
# KBENCH: the kernel benchmark built from scripts/bench/cuda_kbench.c (default
# build/cuda_kbench; `scripts/bench/cuda_vs_torch.sh --build` builds it here from
# the objects of `make`). Runs it with cuDNN heuristics and with cuDNN autotune
# (MPSDIAG_CUDNN_AUTOTUNE=1, what --compile-mode max-autotune selects), then the
# same shapes and the same three models' training steps (small_cnn b256,
# resnet18_cifar b256, resnet50 b128; fp32/TF32 and bf16; channels-last) through
# PyTorch eager (python3 with torch and a GPU), and prints the ratio table.
# Run from the repository root (model configs are read from configs/models).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
if [ "${1:-}" = "--build" ]; then exec "$here/build_bench.sh" cuda_kbench; fi
kb=${1:-$root/build/cuda_kbench}
out=${2:-$(mktemp -d)}
mkdir -p "$out"
"$kb" > "$out/mpsdiag_heur.tsv"
MPSDIAG_CUDNN_AUTOTUNE=1 "$kb" > "$out/mpsdiag_auto.tsv"
PYTHONUNBUFFERED=1 python3 "$here/cuda_vs_torch.py" torch > "$out/torch.tsv"
PYTHONUNBUFFERED=1 python3 "$here/cuda_vs_torch.py" torch-steps "$root" >> "$out/torch.tsv"
python3 "$here/cuda_vs_torch.py" table "$out/mpsdiag_heur.tsv" "$out/mpsdiag_auto.tsv" "$out/torch.tsv" | tee "$out/table.md"
