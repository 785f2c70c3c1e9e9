#!/usr/bin/env bash
# tiles_batched.sh [DEVICE [BATCH [ITERS]]] - the speed-up of batched tiles
# (docs/tiles.md): one training step of the two-stream tiled model with every
# tile of both streams through ONE shared backbone pass
# (tiled_two_stream_tiny), against the same model with a backbone instance
# per stream (tiled_two_stream_tiny_separate: two passes of half the batch),
# and against one tile at a time (the backbone alone on a single 5x5 tile,
# BATCH x 8 steps of it: what the unbatched guide code runs). Any device
# mpsdiag has: cpu (default), cuda, metal.
#   scripts/bench/tiles_batched.sh cuda 64 50
# (on a machine without nvcc: NO_CUDA=1 scripts/bench/tiles_batched.sh)
# Prints one JSON line per variant (bench_step) and the speed-ups.
set -euo pipefail
dev=${1:-cpu}
batch=${2:-16}
iters=${3:-20}
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
[ -n "${SKIP_BUILD:-}" ] || scripts/bench/build_bench.sh bench_step >/dev/null  # SKIP_BUILD=1: use build/bench_step as it is
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# the backbone of the tiny configs on one tile: a model without tiles
cat >"$tmp/one_tile.json" <<'JSON'
{"name": "one_tile", "task": "regression", "inputs": [{"name": "tile", "shape": [3, 5, 5]}],
 "layers": [{"name": "conv", "type": "conv2d", "out": 8, "kernel": 3, "padding": 1},
            {"name": "relu", "type": "relu"}, {"name": "pool", "type": "global_avgpool"},
            {"name": "fc", "type": "linear", "out": 6}]}
JSON
ms() { sed -n 's/.*"median_ms":\([0-9.]*\).*/\1/p'; }
shared=$(build/bench_step tiled_two_stream_tiny "$batch" "$iters" 3 0 "$dev")
separate=$(build/bench_step tiled_two_stream_tiny_separate "$batch" "$iters" 3 0 "$dev")
single=$(build/bench_step "$tmp/one_tile.json" 1 "$iters" 3 0 "$dev")
echo "$shared"
echo "$separate"
echo "$single"
t_shared=$(echo "$shared" | ms)
t_separate=$(echo "$separate" | ms)
t_single=$(echo "$single" | ms)
awk -v a="$t_shared" -v b="$t_separate" -v c="$t_single" -v n="$batch" 'BEGIN {
    onebyone = c * n * 8;  # 2 streams x 2 x 2 tiles per sample, one backbone step each
    printf "batched (one pass): %.3f ms/step; per-stream backbones: %.3f ms (%.2fx); one tile at a time: ~%.3f ms (%.2fx)\n",
           a, b, b / a, onebyone, onebyone / a }'
