#!/usr/bin/env bash
# forecast_quality.sh - the iTransformer's published recipe on real files:
# mpsdiag's test MSE/MAE beside the published figures, PyTorch's run of the
# same recipe (optional) and the naive repeat-the-last-value baseline.
#
#   scripts/bench/forecast_quality.sh [DATADIR] [OUTDIR]
#     DATADIR holds ETTh2.csv and exchange_rate.csv (default ../shared/data/timeseries)
#     DEVICE=cpu|cuda|auto (default auto), TORCH=1 also trains the PyTorch model
#     (scripts/bench/itransformer_torch.py, the same recipe) for comparison.
#
# Recipe (the public iTransformer scripts for horizon 96): lookback 96, all
# variates (M), d_model 128, d_ff 128, 2 layers, 8 heads, dropout 0.1, time
# features as extra tokens, batch 32, Adam lr 1e-4 halved every epoch (type1),
# 10 epochs with early stopping after 3 epochs without a better validation
# loss, MSE loss; test scored with the best checkpoint.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
data=${1:-$root/../shared/data/timeseries}
out=${2:-$(mktemp -d)}
mkdir -p "$out"
bin=${MPSDIAG:-$root/build/mpsdiag}
dev=${DEVICE:-auto}
declare -A published=([ETTh2]="0.297 0.349" [exchange_rate]="0.086 0.206")
for f in ETTh2 exchange_rate; do
    csv=$data/$f.csv
    [ -f "$csv" ] || { echo "forecast_quality: $csv not found" >&2; exit 2; }
    "$bin" --device "$dev" --model itransformer --data-dir "$csv" --seq-len 96 --pred-len 96 --features M \
        --d-model 128 --d-ff 128 --e-layers 2 --n-heads 8 --dropout 0.1 --batch-size 32 --optimizer adamw \
        --weight-decay 0 --lr 1e-4 --lradj type1 --epochs 10 --patience 3 --loss-function mse --seed 2021 \
        --checkpoint-dir "$out/ckpt_$f" --overwrite --report "$out/$f.json" > "$out/$f.txt" 2>&1 ||
        echo "mpsdiag on $f failed: see $out/$f.txt" >&2
    if [ "${TORCH:-0}" = 1 ]; then
        python3 "$here/itransformer_torch.py" train --csv "$csv" --device "${TORCH_DEVICE:-cpu}" \
            > "$out/$f.torch.json" 2> "$out/$f.torch.log" || echo "pytorch on $f failed" >&2
    fi
done
python3 - "$out" "${published[ETTh2]}" "${published[exchange_rate]}" <<'PY' | tee "$out/table.md"
import json, os, sys
out = sys.argv[1]
pub = {"ETTh2": sys.argv[2].split(), "exchange_rate": sys.argv[3].split()}
print("| data | mpsdiag MSE | MAE | published MSE | MAE | MSE vs published | PyTorch MSE | naive MSE | MAE | epochs | time |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for f in ("ETTh2", "exchange_rate"):
    try:
        r = json.load(open(os.path.join(out, f + ".json")))
        tr = r["training"]
        t = tr["test"]
        mse, mae = t["mse"], t["mae"]
        nm, na = t["baseline"]["mse"], t["baseline"]["mae"]
        ep, secs = tr.get("epochs_run"), tr.get("train_time_s")
    except (OSError, KeyError, ValueError, TypeError):
        print(f"| {f} | failed | | | | | | | | | |")
        continue
    try:
        pt = "%.4f" % json.load(open(os.path.join(out, f + ".torch.json")))["test_mse"]
    except (OSError, KeyError, ValueError):
        pt = "-"
    pm, pa = float(pub[f][0]), float(pub[f][1])
    print(f"| {f} | {mse:.4f} | {mae:.4f} | {pm} | {pa} | {(mse / pm - 1) * 100:+.1f}% | {pt} | {nm:.4f} | "
          f"{na:.4f} | {ep} | {secs:.0f} s |")
PY
