#!/usr/bin/env bash
# vit_vs_torch.sh - a ViT training step, mpsdiag against PyTorch eager, side by
# side in one call on one machine.
#
#   scripts/bench/vit_vs_torch.sh DEVICE [OUTDIR]
#     DEVICE cpu (fp32, 2 threads each: set THREADS; small batches) or cuda
#     (bf16: mpsdiag --precision bf16, PyTorch autocast bf16).
#
# Models: configs/models/vit_s14_reg4.json and vit_b14_reg4.json (224x224,
# patch 14, 4 registers: 261 tokens) against scripts/bench/vit_torch.py's
# plain timm-like ViT of the same shapes (F.scaled_dot_product_attention).
# Batches: BATCHES (default "64 128" on cuda, "4" on cpu); MODELS (default
# "s b"); REPEATS (default 3) interleaved runs of each side, the table shows
# the median run of each (PyTorch eager's step varies by 20% between runs). mpsdiag: `--benchmark-only` on synthetic data, the p50 of its timed
# steps (graph replays on CUDA); PyTorch: the median of timed eager steps.
# Attention share: mpsdiag's measured per layer kind (--benchmark-only's "time by layer kind":
# the attention layers, projections included); PyTorch's core (SDPA) from its own attention timing at the same shapes
# (vit_torch.py attn_ms); mpsdiag's from build/attn_bench when it has been
# built (attn_vs_torch.sh --build): the fwd + bwd ms of the path the step
# uses at (batch, heads, 261, 64), times the 12 blocks, over the step time.
# MPSDIAG_ATTN=gemm|flash|simt forces mpsdiag's attention path for a run.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
dev=${1:?usage: vit_vs_torch.sh cpu|cuda [OUTDIR]}
out=${2:-$(mktemp -d)}
mkdir -p "$out"
bin=${MPSDIAG:-$root/build/mpsdiag}
py=${PYTHON:-python3}
threads=${THREADS:-2}
models=${MODELS:-s b}
if [ "$dev" = cuda ]; then p=bf16; batches=${BATCHES:-64 128}; else p=fp32; batches=${BATCHES:-4}; fi
iters=${ITERS:-20}
repeats=${REPEATS:-3}
: > "$out/torch.jsonl"
for r in $(seq 1 "$repeats"); do
for m in $models; do
    cfg=$root/configs/models/vit_${m}14_reg4.json
    [ -f "$cfg" ] || { echo "vit_vs_torch.sh: $cfg not found" >&2; continue; }
    for b in $batches; do
        flags=(--device "$dev" --model "$cfg" --dataset synthetic --benchmark-only --epochs 0 --batch-size "$b"
               --precision "$p" --optimizer adamw --weight-decay 0 --bench-iters "$iters" --quiet
               --report "$out/mpsdiag_${m}_${b}_r$r.json")
        [ "$dev" = cpu ] && flags+=(--threads "$threads")
        "$bin" "${flags[@]}" > "$out/mpsdiag_${m}_${b}_r$r.txt" 2>&1 ||
            echo "mpsdiag vit_$m b$b failed: see $out/mpsdiag_${m}_${b}_r$r.txt" >&2
        "$py" "$here/vit_torch.py" step --model "$m" --device "$dev" --dtype "$p" --batch "$b" --iters "$iters" \
            --threads "$threads" >> "$out/torch.jsonl" || echo "pytorch vit_$m b$b failed" >&2
    done
done
done
# mpsdiag's attention alone at the ViT shapes (CUDA, when attn_bench is built)
if [ "$dev" = cuda ] && [ -x "$root/build/attn_bench" ]; then
    "$root/build/attn_bench" > "$out/attn_bench.tsv" 2>&1 || true
fi
"$py" - "$out" "$dev" "$models" "$batches" "$repeats" <<'PY' | tee "$out/table.md"
import json, os, statistics, sys
out, dev, models, batches = sys.argv[1], sys.argv[2], sys.argv[3].split(), [int(b) for b in sys.argv[4].split()]
repeats = int(sys.argv[5])
heads = {"s": 6, "b": 12}
torch, tms = {}, {}
for line in open(os.path.join(out, "torch.jsonl")):
    try:
        r = json.loads(line)
        torch[(r["model"], r["batch"])] = r
        tms.setdefault((r["model"], r["batch"]), []).append(r["step_ms"])
    except ValueError:
        pass
for k, v in tms.items():  # the median over the repeated runs
    torch[k] = dict(torch[k], step_ms=statistics.median(v), runs=v)
# attn_bench lines: B H T D causal dtype pass ms kernels (the ViT shapes at B = 64)
attn = {}
try:
    for line in open(os.path.join(out, "attn_bench.tsv")):
        f = line.rstrip("\n").split("\t")
        if len(f) == 9 and f[2] == "261" and f[4] == "0" and f[5] == "bf16":
            attn.setdefault((int(f[0]), int(f[1]), f[8]), 0.0)
            attn[(int(f[0]), int(f[1]), f[8])] += float(f[7])
except OSError:
    pass
print(f"| {dev} | batch | mpsdiag step ms (p50) | PyTorch step ms | PyTorch / mpsdiag "
      f"| mpsdiag attention layers (core) share | PyTorch attention core share |")
print("|---|---|---|---|---|---|---|")
for m in models:
    for b in batches:
        name = f"vit_{m}14_reg4"
        runs, lk = [], {}
        for r in range(1, repeats + 1):
            try:
                B = json.load(open(os.path.join(out, f"mpsdiag_{m}_{b}_r{r}.json")))["benchmark"]["training"]
                runs.append(B["step_ms"]["p50"])
                lk = B.get("layer_kinds") or lk
            except (OSError, KeyError, ValueError, TypeError):
                pass
        ms = statistics.median(runs) if runs else None
        t = torch.get((name, b), {})
        tm = t.get("step_ms")
        if ms is None and tm is None:
            continue
        ratio = f"{tm / ms:.2f}x" if ms and tm else "-"
        # attention time is linear in the batch: scale the benchmarked batch's
        a = next((v * b / B0 for (B0, H, k), v in attn.items() if H == heads[m] and k == "gemm"), None)
        # measured: the attention layers' share of a profiled op-by-op step (projections and
        # core), with the core estimated from attn_bench when it was built
        lay = next((k["share"] for k in (lk.get("kinds") or []) if k["kind"] == "attention"), None) if ms else None
        core = f" ({100 * 12 * a / lk['step_ms']:.0f}%)" if a and lk.get("step_ms") else ""
        share = f"{100 * lay:.0f}%{core}" if lay is not None else "-"
        tshare = f"{100 * t['attn_ms'] / tm:.0f}%" if tm and t.get("attn_ms") else "-"
        fm = f"{ms:.3f}" if ms else "failed"
        ft = f"{tm:.3f}" if tm else "failed"
        print(f"| {name} {'bf16' if dev == 'cuda' else 'fp32'} | {b} | {fm} | {ft} | {ratio} | {share} | {tshare} |")
        print(f"<!-- runs: mpsdiag {runs}, PyTorch {t.get('runs')} -->")
PY
