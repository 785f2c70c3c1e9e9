#!/usr/bin/env bash
# seed_sweep.sh - test accuracy of training recipes over many seeds: each arm
# (a line "name|flags" of ARMS) trains once per seed with BASE flags plus its
# own, several runs at a time, and the table gives each arm's mean, standard
# deviation, min and max. Made for the CPU recipe's short runs, whose arms
# differ by about the spread of seeds (docs/defaults.md, "Ten seeds of the CPU
# recipe"); a GPU runs them as a statistics engine, eight at a time.
#
#   scripts/bench/seed_sweep.sh [ARMS]     (default scripts/bench/seed_sweep_cpu_recipe.txt)
#
# An arm's flags may hold "@layer=units" tokens: small_cnn with that layer's
# "out" changed (for example @fc1=256 or @conv1=24), written to OUT as a model
# config and passed as --model.
# Environment: BIN (default build/mpsdiag), DEVICE (default cuda), DATA_DIR
# (--data-dir, default none), SEEDS (default "1 2 3 4 5 6 7 8 9 10"), PAR (runs
# at a time, default 4), OUT (default a temporary folder: logs, reports,
# res.txt with one line per run), BASE (default the CPU recipe at 5 epochs:
# "--dataset fashion-mnist --val-split 0 --epochs 5 --batch-size 64 --lr 0.07
# --weight-decay 1e-4 --dropout 0").
set -euo pipefail
cd "$(dirname "$0")/../.."
arms=${1:-scripts/bench/seed_sweep_cpu_recipe.txt}
BIN=${BIN:-build/mpsdiag}
DEVICE=${DEVICE:-cuda}
SEEDS=${SEEDS:-"1 2 3 4 5 6 7 8 9 10"}
PAR=${PAR:-4}
OUT=${OUT:-$(mktemp -d /tmp/sweep.XXXXXX)}
BASE=${BASE:-"--dataset fashion-mnist --val-split 0 --epochs 5 --batch-size 64 --lr 0.07 --weight-decay 1e-4 --dropout 0"}
[ -r "$arms" ] || { echo "seed_sweep: cannot read the arms file '$arms'" >&2; exit 2; }
[ -x "$BIN" ] || { echo "seed_sweep: $BIN is missing (make, or set BIN)" >&2; exit 2; }
mkdir -p "$OUT"
: > "$OUT/res.txt"
DATA_DIR=${DATA_DIR:-}

# "@layer=units" tokens of an arm -> a model config in OUT; prints the flags to use
arm_flags() {
    local name=$1 flags=$2 edits=() rest=() t
    for t in $flags; do
        case $t in @*=*) edits+=("${t#@}") ;; *) rest+=("$t") ;; esac
    done
    if [ ${#edits[@]} -gt 0 ]; then
        python3 - "$OUT/$name.json" "${edits[@]}" <<'PY' || exit 1
import json, sys
m = json.load(open("configs/models/small_cnn.json"))
m["name"] = "small_cnn_" + "_".join(e.replace("=", "") for e in sys.argv[2:])
for e in sys.argv[2:]:
    layer, units = e.split("=")
    hit = [l for l in m["layers"] if l["name"] == layer]
    if not hit or "out" not in hit[0]:
        sys.exit(f"seed_sweep: small_cnn has no layer '{layer}' with units")
    hit[0]["out"] = int(units)
json.dump(m, open(sys.argv[1], "w"), indent=1)
PY
        rest+=(--model "$OUT/$name.json")
    fi
    echo "${rest[@]}"
}

one() { # "arm seed flags..."
    set -- $1
    local a=$1 s=$2 t0 rc acc
    shift 2
    t0=$(date +%s.%N)
    rc=0
    timeout 600 "$BIN" --device "$DEVICE" $BASE ${DATA_DIR:+--data-dir "$DATA_DIR"} --seed "$s" "$@" --checkpoint-dir "$OUT/ck/$a-$s" \
        --overwrite --report "$OUT/$a-$s.json" > "$OUT/$a-$s.log" 2>&1 || rc=$?
    acc=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['training']['test']['acc'])" \
        "$OUT/$a-$s.json" 2>/dev/null || echo none)
    echo "$a $s $rc $acc $(python3 -c "import time; print(round(time.time() - $t0, 1))")" >> "$OUT/res.txt"
}
export -f one
export BIN DEVICE BASE OUT DATA_DIR

echo "# seed sweep, $(date -u +%Y-%m-%dT%H:%M:%SZ), $DEVICE, seeds: $SEEDS, $PAR at a time; runs in $OUT"
echo "# base flags: $BASE"
jobs_file="$OUT/jobs.txt"
: > "$jobs_file"
while IFS='|' read -r a f; do
    case $a in '' | \#*) continue ;; esac
    fl=$(arm_flags "$a" "$f")
    echo "# arm $a: ${fl:-(the base flags only)}"
    for s in $SEEDS; do echo "$a $s $fl" >> "$jobs_file"; done
done < "$arms"
xargs -d '\n' -n 1 -P "$PAR" bash -c 'one "$1"' _ < "$jobs_file"
python3 - "$OUT/res.txt" "$arms" <<'PY'
import collections, statistics as st, sys
runs = collections.defaultdict(list)
failed = collections.Counter()
for line in open(sys.argv[1]):
    p = line.split()
    if len(p) >= 4 and p[2] == "0" and p[3] != "none":
        runs[p[0]].append(float(p[3]) * 100)
    elif p:
        failed[p[0]] += 1
order = [l.split("|")[0] for l in open(sys.argv[2]) if l.strip() and not l.startswith("#")]
print(f"{'arm':24s} {'runs':>4s} {'mean %':>8s} {'sd':>6s} {'min':>7s} {'max':>7s} {'failed':>6s}")
for a in order:
    v = runs.get(a, [])
    if not v:
        print(f"{a:24s} {0:4d} {'-':>8s} {'-':>6s} {'-':>7s} {'-':>7s} {failed[a]:6d}")
        continue
    sd = st.stdev(v) if len(v) > 1 else 0.0
    print(f"{a:24s} {len(v):4d} {st.mean(v):8.3f} {sd:6.3f} {min(v):7.2f} {max(v):7.2f} {failed[a]:6d}")
PY
