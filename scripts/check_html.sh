#!/usr/bin/env bash
# check_html.sh - render mpsdiag's HTML reports in headless Chromium and save
# screenshots to look at (not part of `make test`: it needs a browser).
#
#   scripts/check_html.sh [OUTDIR]      (default: build/html-check)
#
# Renders three pages with scripts/render_html.sh (screenshot, overflow and
# empty-section checks): the canned report of the test suite (every chart), the
# canned forecasting report (baseline table, forecast charts) and a real
# --benchmark-only run of the built binary on the CPU. Needs Debian's
# chromium (apt-get install -y chromium). Everything runs offline: the pages
# are self-contained and Chromium's background networking is switched off.
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:-build/html-check}
mkdir -p "$out"
out=$(cd "$out" && pwd)

browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$browser" ]; then
    echo "check_html: no chromium found; install it with: apt-get install -y chromium" >&2
    exit 1
fi

make --no-print-directory all build/mpsdiag-tests >/dev/null

# 1. the canned report (test/data/report_canned.json) through the test suite
MPSDIAG_HTML_KEEP="$out" MPSDIAG_BIN="$PWD/build/mpsdiag" build/mpsdiag-tests --filter 'html/canned_report_structure' >/dev/null 2>&1
MPSDIAG_HTML_KEEP="$out" MPSDIAG_BIN="$PWD/build/mpsdiag" build/mpsdiag-tests --filter 'html_regress/forecasting_report' >/dev/null 2>&1

# 2. a real run: benchmark a small model on the CPU with a short sweep
if ! build/mpsdiag --device cpu --benchmark-only --bench-iters 20 --warmup-iters 2 --batch-sweep 8,16,32 \
        --report "$out/run.json" --html "$out/run.html" --quiet; then
    echo "check_html: the benchmark run failed; only the canned page is checked" >&2
fi

status=0
for page in "$out"/canned.html "$out"/regress.html "$out"/run.html; do
    [ -f "$page" ] || continue
    # self-contained: no reference to any network address
    if grep -Eq 'https?://|src=|<script|<link' "$page"; then
        echo "check_html: $page references something outside the file" >&2
        status=1
    fi
    # overflow, empty sections and the screenshot
    scripts/render_html.sh "$page" "${page%.html}.png" 1200 || status=1
done
exit $status
