#!/usr/bin/env bash
# attn_vs_torch.sh - the attention micro-benchmark: mpsdiag's attn_fwd/attn_bwd
# against torch's scaled_dot_product_attention on the same shapes (1-4k tokens,
# bf16 and fp32, causal on/off), as TFLOP/s and the fraction of the bf16 peak.
#
#   scripts/bench/attn_vs_torch.sh --build      build build/attn_bench from the objects of `make`
#   scripts/bench/attn_vs_torch.sh [OUTDIR]     run both sides, print the table (needs a GPU and torch)
#
# BF16_PEAK_TFLOPS overrides the peak (default 989.4: H100 SXM, dense).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
if [ "${1:-}" = "--build" ]; then exec "$here/build_bench.sh" attn_bench; fi
out=${1:-$(mktemp -d)}
mkdir -p "$out"
"$root/build/attn_bench" > "$out/mpsdiag.tsv"
PYTHONUNBUFFERED=1 python3 "$here/attn_vs_torch.py" torch > "$out/torch.tsv"
python3 "$here/attn_vs_torch.py" table "$out/mpsdiag.tsv" "$out/torch.tsv" | tee "$out/table.md"
