#!/usr/bin/env bash
# ci-smoke.sh - the CI example: a short smoke run with thresholds.
#
#   scripts/ci-smoke.sh [extra mpsdiag flags]      (outputs in build/ci/)
#
# --ci trains the small model on synthetic data for a few steps and runs a
# short benchmark; it exits 7 with one line naming the figure and the
# threshold when one is missed, and writes a JUnit XML that CI systems show as
# test results (GitHub Actions: a JUnit reporter action; GitLab:
# artifacts:reports:junit; Jenkins: the junit step). The thresholds here are
# deliberately loose (a first-epoch loss, a throughput any machine reaches):
# tighten them for your runner.
set -euo pipefail
cd "$(dirname "$0")/.."
out=build/ci
mkdir -p "$out"
[ -x build/mpsdiag ] || make --no-print-directory all >/dev/null
set +e
build/mpsdiag --ci \
    --expect-max-loss "${CI_MAX_LOSS:-2.0}" \
    --expect-min-throughput "${CI_MIN_THROUGHPUT:-10}" \
    --junit "$out/junit.xml" --report "$out/report.json" --html "$out/report.html" \
    "$@"
rc=$?
set -e
case $rc in
    0) echo "ci-smoke: passed; JUnit in $out/junit.xml" ;;
    7) echo "ci-smoke: a threshold was missed (see above); JUnit in $out/junit.xml" >&2 ;;
    *) echo "ci-smoke: the run failed with exit $rc" >&2 ;;
esac
exit $rc
