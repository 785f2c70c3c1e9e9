#!/usr/bin/env bash
# kernels_bench.sh - conv layer timings of mpsdiag's CPU backend and of
# PyTorch (Debian's python3-torch) on the same machine and thread count.
#   scripts/bench/kernels_bench.sh [THREADS] [ITERS] [nchw|nhwc]
set -euo pipefail
cd "$(dirname "$0")/../.."
threads=${1:-$(nproc)}
iters=${2:-5}
layout=${3:-nchw}
make --no-print-directory all >/dev/null
objs=$(find build/obj/src -name '*.o' ! -name main.o | sort)
cc -std=c11 -O2 -D_POSIX_C_SOURCE=200809L -Isrc -pthread scripts/bench/kernels_bench.c $objs build/obj/metal/metal_stub.o \
   $(pkg-config --libs openblas libcjson libturbojpeg zlib) -lm -ldl -rdynamic -o build/kernels_bench
build/kernels_bench "$threads" "$iters" "$layout"
if /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    /usr/bin/python3 scripts/bench/kernels_bench_torch.py "$threads" "$iters" "$layout"
else
    echo "python3-torch not installed: no PyTorch comparison (apt-get install python3-torch)"
fi
