#!/usr/bin/env bash
# kernels_bench.sh - conv layer timings of mpsdiag's CPU backend and of
# PyTorch (Debian's python3-torch) on the same machine and thread count.
#   scripts/bench/kernels_bench.sh [THREADS] [ITERS] [nchw|nhwc]
# (build/kernels_bench THREADS ITERS gemm times small_cnn's fc1 GEMMs alone.)
set -euo pipefail
cd "$(dirname "$0")/../.."
threads=${1:-$(nproc)}
iters=${2:-5}
layout=${3:-nchw}
make --no-print-directory build/kernels_bench >/dev/null
build/kernels_bench "$threads" "$iters" "$layout"
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    /usr/bin/python3 scripts/bench/kernels_bench_torch.py "$threads" "$iters" "$layout"
else
    echo "python3-torch not installed: no PyTorch comparison (apt-get install python3-torch)"
fi
