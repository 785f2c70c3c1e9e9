#!/usr/bin/env bash
# itransformer_vs_torch.sh - the iTransformer's training step, mpsdiag against
# PyTorch, side by side in one call on one machine.
#
#   scripts/bench/itransformer_vs_torch.sh DEVICE [CSV] [OUTDIR]
#     DEVICE cpu (2 threads each, as on the 2-core development machine; set
#     THREADS to change) or cuda (fp32 and bf16).
#
# Same model on both sides: configs/models/itransformer.json's defaults
# (seq_len 96, pred_len 96, d_model 192, d_ff 192, 2 layers, 8 heads, time
# features as extra tokens), MSE loss, Adam, on windows of CSV (default: the
# full ETTh2 file when present, else the bundled sample), batch sizes 32 (the
# public recipe) and 256 (the guide's command). mpsdiag: `--benchmark-only`,
# the p50 of its timed steps (graph replays on CUDA). PyTorch:
# scripts/bench/itransformer_torch.py bench (eager; mean of timed steps).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
dev=${1:?usage: itransformer_vs_torch.sh cpu|cuda [CSV] [OUTDIR]}
csv=${2:-}
if [ -z "$csv" ]; then
    csv=$root/data/timeseries-sample/sample_ETTh2_first1728.csv
    for c in "$root/../shared/data/timeseries/ETTh2.csv" /work/shared/data/timeseries/ETTh2.csv; do
        [ -f "$c" ] && { csv=$c; break; }
    done
fi
out=${3:-$(mktemp -d)}
mkdir -p "$out"
bin=${MPSDIAG:-$root/build/mpsdiag}
threads=${THREADS:-2}
py=${PYTHON:-python3}
dtypes=(fp32)
[ "$dev" = cuda ] && dtypes=(fp32 bf16)
: > "$out/torch.jsonl"
for b in 32 256; do
    for p in "${dtypes[@]}"; do
        flags=(--device "$dev" --model itransformer --data-dir "$csv" --benchmark-only --epochs 0
               --batch-size "$b" --optimizer adamw --weight-decay 0 --bench-iters 30 --quiet
               --report "$out/mpsdiag_${b}_$p.json")
        [ "$dev" = cpu ] && flags+=(--threads "$threads")
        [ "$p" = bf16 ] && flags+=(--amp)
        "$bin" "${flags[@]}" > "$out/mpsdiag_${b}_$p.txt" 2>&1 ||
            echo "mpsdiag b$b $p failed: see $out/mpsdiag_${b}_$p.txt" >&2
        # shellcheck disable=SC2086
        env ${PY_ENV:-} "$py" "$here/itransformer_torch.py" bench --csv "$csv" --device "$dev" --dtype "$p" \
            --threads "$threads" --batch "$b" --d-model 192 --d-ff 192 --iters 30 --warmup 5 \
            >> "$out/torch.jsonl" || echo "pytorch b$b $p failed" >&2
    done
done
python3 - "$out" "$dev" <<'PY' | tee "$out/table.md"
import json, os, sys
out, dev = sys.argv[1], sys.argv[2]
torch = {}
for line in open(os.path.join(out, "torch.jsonl")):
    try:
        r = json.loads(line)
        torch[(r["batch"], r["dtype"])] = r["step_ms"]
    except ValueError:
        pass
print(f"| {dev} | batch | mpsdiag step ms (p50) | PyTorch step ms | PyTorch / mpsdiag |")
print("|---|---|---|---|---|")
for b in (32, 256):
    for p in ("fp32", "bf16"):
        try:
            B = json.load(open(os.path.join(out, f"mpsdiag_{b}_{p}.json")))["benchmark"]["training"]
            m = B["step_ms"]["p50"]
        except (OSError, KeyError, ValueError, TypeError):
            m = None
        t = torch.get((b, p))
        if m is None and t is None:
            continue
        ratio = f"{t / m:.2f}x" if m and t else "-"
        fm = f"{m:.3f}" if m else "failed"
        ft = f"{t:.3f}" if t else "failed"
        print(f"| {p} | {b} | {fm} | {ft} | {ratio} |")
PY
