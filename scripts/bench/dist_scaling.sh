#!/usr/bin/env bash
# dist_scaling.sh - data-parallel scaling of mpsdiag on the GPUs of one
# machine, side by side with PyTorch DDP, and the loss-curve check.
#
#   scripts/bench/dist_scaling.sh [MPSDIAG] [OUTDIR]
#
# For resnet18_cifar (batch 256 per GPU) and resnet50 (batch 128 per GPU),
# bf16 (--amp), synthetic data kept in memory once made (--cache-images: the
# first epoch makes them, as PyTorch's script keeps its batch on the GPU): a
# short training run (EPOCHS epochs of STEPS steps; the last epoch's
# samples/s) on 1, 2 and, when present, 4 GPUs.
# Each rank caches only the images of its own shard, and every epoch deals the
# samples out anew, so a rank keeps making images it has not seen for several
# epochs (a fraction (1 - 1/N)^(e-1) of epoch e on N ranks): the synthetic set
# is exactly one global epoch, and EPOCHS defaults to 8 so that the last epoch
# measures the GPUs rather than image making (13% of it new on 4 ranks)
# (mpsdiag --gpus N, which starts the ranks under mpirun), and
# scripts/bench/ddp_torch.py under torch.distributed.run on as many GPUs. Prints a
# markdown table of global samples/s and the ratio to one GPU of each, the
# all-reduce time and bus bandwidth mpsdiag measured. Then the loss curve of
# 2 GPUs (batch B each) against 1 GPU (batch 2B) with the same seed: exact up
# to fp32 summation order for a model without batch norm (strict check), and
# for resnet18_cifar (local batch norm: close, not equal; printed).
# Needs: a CUDA build with NCCL and MPI (make), mpirun, nvidia-smi, python3
# with torch + torchvision (PY_ENV: extra `env` arguments for it, as in
# cuda_tool_vs_torch.sh). Environment: STEPS (40), EPOCHS (8), WORKERS (8),
# MODELS (resnet18_cifar resnet50: the models to run), BATCH (the per-GPU
# batch of every model instead of 256 / 128), LOSS_CHECK (1; 0 skips the
# loss-curve check).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
bin=$(readlink -f "${1:-build/mpsdiag}")
out=${2:-$(mktemp -d)}
mkdir -p "$out"
steps=${STEPS:-40}
epochs=${EPOCHS:-8}
workers=${WORKERS:-8}
ngpu=$(nvidia-smi -L 2>/dev/null | wc -l)
[ "$ngpu" -ge 2 ] || { echo "dist_scaling: needs 2 or more GPUs (nvidia-smi sees $ngpu)" >&2; exit 1; }
command -v mpirun >/dev/null || { echo "dist_scaling: mpirun not found (install openmpi-bin)" >&2; exit 1; }
"$bin" --version | grep -q "Open MPI\|MPI" || echo "dist_scaling: warning: $bin was built without MPI" >&2
counts=(1 2)
[ "$ngpu" -ge 4 ] && counts+=(4)
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
echo "dist_scaling: $ngpu GPUs ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)); results in $out"

for m in ${MODELS:-resnet18_cifar resnet50}; do
    case $m in resnet50) mb="resnet50 ${BATCH:-128}" ;; *) mb="$m ${BATCH:-256}" ;; esac
    set -- $mb
    m=$1 b=$2
    for g in "${counts[@]}"; do
        # one global epoch of synthetic samples: every epoch reuses the same images
        n=$(( b * g * steps ))
        "$bin" --gpus "$g" --device cuda --model "$m" --dataset synthetic --max-samples "$n" --val-split 0 \
            --batch-size "$b" --amp --cache-images --epochs "$epochs" --steps "$steps" --num-workers "$workers" \
            --lr-scaling none --lr 0.1 --checkpoint-dir "$out/ck_${m}_$g" --overwrite --verbose \
            --report "$out/mpsdiag_${m}_$g.json" > "$out/mpsdiag_${m}_$g.txt" 2>&1 \
            || echo "mpsdiag $m on $g GPUs failed: see $out/mpsdiag_${m}_$g.txt" >&2
        # host-synced steps (the default captures the steps with the bucketed all-reduce inside)
        [ "$g" -gt 1 ] && { MPSDIAG_DIST_GRAPH=0 "$bin" --gpus "$g" --device cuda --model "$m" --dataset synthetic \
            --max-samples "$n" --val-split 0 --batch-size "$b" --amp --cache-images --epochs "$epochs" --steps "$steps" \
            --num-workers "$workers" --lr-scaling none --lr 0.1 --checkpoint-dir "$out/ckg_${m}_$g" --overwrite \
            --verbose --report "$out/graph_${m}_$g.json" > "$out/graph_${m}_$g.txt" 2>&1 \
            || echo "mpsdiag (MPSDIAG_DIST_GRAPH=0) $m on $g GPUs failed: see $out/graph_${m}_$g.txt" >&2; }
        # shellcheck disable=SC2086
        env ${PY_ENV:-} python3 -m torch.distributed.run --standalone --nproc_per_node "$g" "$here/ddp_torch.py" --model "$m" --batch "$b" \
            --precision bf16 --steps "$steps" >> "$out/ddp.tsv" 2> "$out/ddp_${m}_$g.err" \
            || echo "PyTorch DDP $m on $g GPUs failed: see $out/ddp_${m}_$g.err" >&2
    done
done

python3 - "$out" "${counts[@]}" <<'PY' | tee "$out/table.md"
import json, os, sys
out, counts = sys.argv[1], [int(c) for c in sys.argv[2:]]
ddp = {}
if os.path.exists(os.path.join(out, "ddp.tsv")):
    for line in open(os.path.join(out, "ddp.tsv")):
        f = line.rstrip("\n").split("\t")
        if len(f) >= 6 and f[0] == "ddp":
            ddp[(f[1], int(f[2]))] = float(f[5])
def mp(m, g, kind="mpsdiag"):
    if kind == "graph" and g == 1:
        kind = "mpsdiag"
    try:
        t = json.load(open(os.path.join(out, f"{kind}_{m}_{g}.json")))["training"]
    except (OSError, KeyError, ValueError):
        return None, None
    d = t.get("distributed", {})
    eps = d.get("epochs") or []
    if g > 1 and eps:
        return eps[-1]["samples_per_s"], eps[-1]
    sps = t.get("curves", {}).get("samples_per_s") or [None]
    return sps[-1], None
print("| model (bf16) | GPUs | mpsdiag samples/s | x 1 GPU | all-reduce ms/step | overlapped | host-synced samples/s | x 1 GPU | PyTorch DDP samples/s | x 1 GPU | mpsdiag / DDP |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for m in ("resnet18_cifar", "resnet50"):
    base, dbase = mp(m, 1)[0], ddp.get((m, 1))
    for g in counts:
        s, e = mp(m, g)
        sg = mp(m, g, "graph")[0]
        d = ddp.get((m, g))
        f = lambda v, p="%.0f": (p % v) if v is not None else "-"
        r = s / base if s and base else None
        rg = sg / base if sg and base else None
        rd = d / dbase if d and dbase else None
        print(f"| {m} | {g} | {f(s)} | {f(r, '%.2fx')} | {f(e and e['allreduce_ms_per_step'], '%.2f')} | "
              f"{f(e and e.get('overlap', 0) * 100, '%.0f%%')} | {f(sg)} | {f(rg, '%.2fx')} | {f(d)} | {f(rd, '%.2fx')} | "
              f"{f(s / d if s and d else None, '%.2f')} |")
PY

# ---- loss curves: 2 GPUs x batch B against 1 GPU x 2B, same seed ----------
[ "${LOSS_CHECK:-1}" = 0 ] && exit 0
cat > "$out/nobn.json" <<'JSON'
{"name": "nobn", "num_classes": 10, "inputs": [{"name": "image", "shape": [3, 32, 32]}],
 "layers": [
  {"name": "conv1", "type": "conv2d", "out": 32, "kernel": 3, "padding": 1},
  {"name": "relu1", "type": "relu"},
  {"name": "pool1", "type": "maxpool", "kernel": 2},
  {"name": "conv2", "type": "conv2d", "out": 64, "kernel": 3, "padding": 1},
  {"name": "relu2", "type": "relu"},
  {"name": "pool2", "type": "maxpool", "kernel": 4},
  {"name": "flatten", "type": "flatten"},
  {"name": "fc", "type": "linear", "out": "$num_classes"}]}
JSON
for m in "$out/nobn.json" resnet18_cifar; do
    tag=$(basename "$m" .json)
    common=(--device cuda --model "$m" --dataset synthetic --max-samples 8192 --epochs 3 --seed 11 --no-augment
            --num-workers 4 --lr-scaling none --lr 0.05 --overwrite --quiet)
    [ "$tag" = nobn ] && common+=(--no-tf32) || common+=(--amp)
    "$bin" "${common[@]}" --batch-size 128 --checkpoint-dir "$out/ckl1_$tag" --report "$out/loss1_$tag.json" \
        > "$out/loss1_$tag.txt" 2>&1 || echo "1-GPU loss run ($tag) failed" >&2
    "$bin" "${common[@]}" --gpus 2 --batch-size 64 --checkpoint-dir "$out/ckl2_$tag" --report "$out/loss2_$tag.json" \
        > "$out/loss2_$tag.txt" 2>&1 || echo "2-GPU loss run ($tag) failed" >&2
done
python3 - "$out" <<'PY' | tee "$out/loss.md"
import json, os, sys
out = sys.argv[1]
bad = 0
for tag, strict in (("nobn", True), ("resnet18_cifar", False)):
    try:
        a = json.load(open(os.path.join(out, f"loss1_{tag}.json")))["training"]["curves"]
        b = json.load(open(os.path.join(out, f"loss2_{tag}.json")))["training"]["curves"]
    except (OSError, KeyError, ValueError) as e:
        print(f"{tag}: no curves ({e})"); bad = 1; continue
    for k in ("train_loss", "val_loss"):
        x, y = a.get(k) or [], b.get(k) or []
        # relative, with a floor: the synthetic task's loss falls to ~1e-6
        # after an epoch, where fp32's summation order moves the 3rd digit
        worst = max((abs(u - v) / max(abs(u), 1e-3) for u, v in zip(x, y)), default=float("nan"))
        ok = len(x) == len(y) and worst <= 2e-3
        verdict = ("equal" if ok else "DIFFERENT") if strict else "local batch norm: close, not equal"
        print(f"{tag} {k}: 1 GPU {['%.6g' % v for v in x]}  2 GPUs {['%.6g' % v for v in y]}  "
              f"max rel diff {worst:.2e} ({verdict})")
        if strict and not ok:
            bad = 1
sys.exit(bad)
PY
