#!/usr/bin/env bash
# time_to_accuracy.sh - time to accuracy on Fashion-MNIST, the whole process
# timed (start-up, data loading, training, test scoring, report), one row per
# case, and each run's per-epoch accuracies.
#
#   scripts/bench/time_to_accuracy.sh            # CPU cases: the `make run` default, 93% in 60 s
#   scripts/bench/time_to_accuracy.sh --gpu      # CUDA cases: 93% in 3 s, the best in 10 minutes
#   scripts/bench/time_to_accuracy.sh --case NAME [--case NAME ...]
#
# Cases:
#   default     what `make run` runs: the Fashion-MNIST recipe with its default budget (60 s)
#   cpu93       --target-accuracy 93 --time-budget 60 on the CPU, all 60,000 training images
#               (--val-split 0: the target is checked on the test split after each epoch)
#   gpu93       the same on CUDA with --time-budget 3
#   gpu93-b512  gpu93 at batch 512, lr 0.4 (fewer, larger steps)
#   gpu93-fast  fast_cnn_fmnist at batch 256, lr 0.3, bf16, --time-budget 3 (the model that
#               reaches 93% in the fewest epochs)
#   gpu-best    wide_resnet_fmnist, crop+flip, one-cycle, label smoothing 0.1, bf16, for 570 s
#               (10 minutes less start-up and test scoring), all 60,000 training images
#
# Needs build/mpsdiag (make NO_CUDA=1 for the CPU cases), python3, and the full
# Fashion-MNIST (Debian: dataset-fashion-mnist, or data/fashion-mnist).
# Environment: BIN (default build/mpsdiag), OUT (default a temporary folder; the
# reports and logs stay there), EXTRA (flags added to every case).
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${BIN:-build/mpsdiag}
OUT=${OUT:-$(mktemp -d /tmp/tta.XXXXXX)}
mkdir -p "$OUT"
EXTRA=${EXTRA:-}

cases=()
while [ $# -gt 0 ]; do
  case "$1" in
    --gpu) cases+=(gpu93 gpu93-b512 gpu93-fast gpu-best) ;;
    --cpu) cases+=(default cpu93) ;;
    --case) shift; cases+=("$1") ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "time_to_accuracy.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
  shift
done
[ ${#cases[@]} -gt 0 ] || cases=(default cpu93)
[ -x "$BIN" ] || { echo "time_to_accuracy.sh: $BIN is missing (make NO_CUDA=1)" >&2; exit 1; }

flags_of() {
  case "$1" in
    default) echo "--dataset fashion-mnist" ;;
    cpu93) echo "--device cpu --dataset fashion-mnist --val-split 0 --target-accuracy 93 --time-budget 60" ;;
    gpu93) echo "--device cuda --dataset fashion-mnist --val-split 0 --target-accuracy 93 --time-budget 3" ;;
    gpu93-b512) echo "--device cuda --dataset fashion-mnist --val-split 0 --target-accuracy 93 --time-budget 3 \
--batch-size 512 --lr 0.4" ;;
    gpu93-fast) echo "--device cuda --model fast_cnn_fmnist --dataset fashion-mnist --val-split 0 --target-accuracy 93 \
--time-budget 3 --batch-size 256 --lr 0.3 --amp" ;;
    gpu-best) echo "--device cuda --model wide_resnet_fmnist --dataset fashion-mnist --val-split 0 --augment \
--nesterov --lradj onecycle --label-smoothing 0.1 --batch-size 256 --lr 0.2 --weight-decay 5e-4 --amp \
--time-budget 570" ;;
    *) echo "time_to_accuracy.sh: unknown case '$1'" >&2; return 1 ;;
  esac
}

echo "# time to accuracy, $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) CPUs, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# $($BIN --version)   reports and logs: $OUT"
printf '%-11s %8s %8s %7s %7s %-22s %-28s\n' case wall_s test_acc epochs steps target "plan (step s, steps planned)"
for c in "${cases[@]}"; do
  f=$(flags_of "$c")
  rep="$OUT/$c.json"
  t0=$(date +%s.%N)
  # shellcheck disable=SC2086
  rc=0; "$BIN" $f $EXTRA --checkpoint-dir "$OUT/ck-$c" --overwrite --report "$rep" > "$OUT/$c.log" 2>&1 || rc=$?
  t1=$(date +%s.%N)
  python3 - "$c" "$rep" "$t0" "$t1" "$rc" <<'PY'
import json, sys
case, rep, t0, t1, rc = sys.argv[1], sys.argv[2], float(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5])
wall = t1 - t0
try:
    r = json.load(open(rep))
except Exception as e:
    print(f"{case:<11} {wall:8.1f}  failed (exit {rc}): no report ({e})")
    sys.exit(0)
t = r.get("training", {})
acc = t.get("test", {}).get("acc")
g = t.get("target")
tgt = "-"
if g:
    tgt = (f"{100*g['accuracy']:.0f}% ep {g['epoch']} at {g['wall_s']:.1f}s" if g["reached"]
           else f"{100*g['accuracy']:.0f}% not reached")
b = t.get("time_budget")
plan = f"{b['step_time_s']:.4f}, {b['planned_steps']}" + (" cut" if b["stopped_at_budget_end"] else "") if b else "-"
print(f"{case:<11} {wall:8.1f} {100*acc if acc is not None else float('nan'):7.2f}% {t.get('epochs_run', 0):7d} "
      f"{t.get('global_step', 0):7d} {tgt:<22} {plan:<28}" + ("" if rc == 0 else f" exit {rc}"))
cur = t.get("curves", {})
va = cur.get("val_acc") or []
ta = cur.get("train_acc") or []
et = cur.get("epoch_time_s") or []
accs = ", ".join(f"{100*v:.2f}" for v in va if v is not None) or "none (no validation split)"
print(f"  {case}: val acc per epoch: {accs}")
if et:
    print(f"  {case}: epoch seconds: " + ", ".join(f"{v:.1f}" for v in et) +
          f"; settings: " + ", ".join(f"{s['name']}={s['value']}" for s in r.get("settings", [])
                                     if s["name"] in ("batch_size", "lr", "lr_schedule", "label_smoothing",
                                                      "augmentation", "epochs", "time_budget", "nesterov")))
PY
done
