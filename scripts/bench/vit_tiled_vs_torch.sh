#!/usr/bin/env bash
# vit_tiled_vs_torch.sh - the tiled two-stream ViT model's training step,
# mpsdiag against PyTorch eager, side by side in one call on one machine.
#
#   scripts/bench/vit_tiled_vs_torch.sh DEVICE [OUTDIR]
#     DEVICE cuda (bf16: mpsdiag --precision bf16, PyTorch autocast bf16) or
#     cpu (fp32; MODEL defaults to the tiny variant there).
#
# Model: configs/models/vit_tiled_two_stream.json (2 streams x 2 x 2 tiles of
# 224 x 224 cut from 448 x 448 halves, all 8 tiles of a sample through one
# ViT-S/14 with 4 registers, FiLM, 3 targets) against
# scripts/bench/vit_tiled_torch.py (scripts/torch_vit_tiled.py's module of the
# same shapes, attention through F.scaled_dot_product_attention). mpsdiag runs
# --benchmark-only on data/green-cover-sample (--halves: each image's left and
# right half, resized to the inputs) and reports the p50 of its timed steps;
# PyTorch the median of timed eager steps, batched tiles and one tile per
# backbone pass (the unbatched loop); mpsdiag's one-tile figure is estimated
# from the backbone alone at batch 1 (vit_s14_reg4) times 8 tiles x images. BATCHES (default "8 16" on cuda, "2" on
# cpu) are images per step (x 8 tiles through the backbone); REPEATS (default 3)
# interleaved runs of each side, the table shows the median run of each.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
dev=${1:?usage: vit_tiled_vs_torch.sh cuda|cpu [OUTDIR]}
out=${2:-$(mktemp -d)}
mkdir -p "$out"
bin=${MPSDIAG:-$root/build/mpsdiag}
py=${PYTHON:-python3}
threads=${THREADS:-2}
iters=${ITERS:-20}
repeats=${REPEATS:-3}
if [ "$dev" = cuda ]; then
    p=bf16; batches=${BATCHES:-8 16}; model=${MODEL:-vit_tiled_two_stream}
else
    p=fp32; batches=${BATCHES:-2}; model=${MODEL:-vit_tiled_two_stream_tiny}
fi
: > "$out/torch.jsonl"
for r in $(seq 1 "$repeats"); do
for b in $batches; do
    flags=(--device "$dev" --model "$root/configs/models/$model.json" --dataset images-csv
           --data-dir "$root/data/green-cover-sample" --halves --benchmark-only --epochs 0 --batch-size "$b"
           --precision "$p" --optimizer adamw --weight-decay 0 --bench-iters "$iters" --quiet
           --report "$out/mpsdiag_${b}_r$r.json")
    [ "$dev" = cpu ] && flags+=(--threads "$threads")
    "$bin" "${flags[@]}" > "$out/mpsdiag_${b}_r$r.txt" 2>&1 || echo "mpsdiag b$b failed: see $out/mpsdiag_${b}_r$r.txt" >&2
    # one tile per backbone pass: the backbone alone at batch 1, times 8 tiles x b images
    if [ "$dev" = cuda ] && [ "$b" = "${batches%% *}" ] && [ "$r" = 1 ]; then
        one=(--device "$dev" --model "$root/configs/models/vit_s14_reg4.json" --dataset synthetic --benchmark-only
             --epochs 0 --batch-size 1 --precision "$p" --optimizer adamw --weight-decay 0 --bench-iters "$iters"
             --quiet --report "$out/mpsdiag_one_tile.json")
        "$bin" "${one[@]}" > "$out/mpsdiag_one_tile.txt" 2>&1 || echo "mpsdiag one tile failed" >&2
    fi
    for mode in "" --one-by-one; do
        "$py" "$here/vit_tiled_torch.py" --model "$model" --device "$dev" --dtype "$p" --batch "$b" \
            --iters "$iters" --threads "$threads" $mode >> "$out/torch.jsonl" || echo "pytorch b$b $mode failed" >&2
    done
done
done
"$py" - "$out" "$dev" "$model" "$batches" "$repeats" <<'PY' | tee "$out/table.md"
import json, os, statistics, sys
out, dev, model, batches = sys.argv[1], sys.argv[2], sys.argv[3], [int(b) for b in sys.argv[4].split()]
repeats = int(sys.argv[5])
torch = {}
for line in open(os.path.join(out, "torch.jsonl")):
    try:
        r = json.loads(line)
        torch.setdefault((r["mode"], r["batch"]), {"runs": []})["runs"].append(r["step_ms"])
    except ValueError:
        pass
for v in torch.values():  # the median over the repeated runs
    v["step_ms"] = statistics.median(v["runs"])
print(f"| {dev} {model} | images (tiles) | mpsdiag step ms (p50) | PyTorch step ms | PyTorch / mpsdiag "
      f"| PyTorch one tile per pass ms | mpsdiag one tile per pass ms (est.) | attention layers' share (mpsdiag) |")
print("|---|---|---|---|---|---|---|---|")
try:
    one = json.load(open(os.path.join(out, "mpsdiag_one_tile.json")))["benchmark"]["training"]["step_ms"]["p50"]
except (OSError, KeyError, ValueError, TypeError):
    one = None
for b in batches:
    runs, share = [], "-"
    for r in range(1, repeats + 1):
        try:
            B = json.load(open(os.path.join(out, f"mpsdiag_{b}_r{r}.json")))["benchmark"]["training"]
            runs.append(B["step_ms"]["p50"])
            lk = B.get("layer_kinds") or {}
            att = sum(k["forward_ms"] + k["backward_ms"] for k in lk.get("kinds", []) if k["kind"] == "attention")
            share = f"{100 * att / lk['step_ms']:.1f}%" if lk.get("step_ms") else "-"
        except (OSError, KeyError, ValueError, TypeError):
            pass
    ms = statistics.median(runs) if runs else None
    t = torch.get(("batched", b), {}).get("step_ms")
    o = torch.get(("one_by_one", b), {}).get("step_ms")
    ratio = f"{t / ms:.2f}x" if ms and t else "-"
    f = lambda v: f"{v:.2f}" if v else "-"  # noqa: E731
    est = one * 8 * b if one else None  # the backbone step at batch 1, 8 tiles per image
    print(f"| | {b} ({8 * b}) | {f(ms)} | {f(t)} | {ratio} | {f(o)} | {f(est)} | {share} |")
    print(f"<!-- runs: mpsdiag {runs}, PyTorch {torch.get(('batched', b), {}).get('runs')} -->")
PY
