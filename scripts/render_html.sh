#!/usr/bin/env bash
# render_html.sh - render an mpsdiag HTML report to PNG for review, and check
# the page: no horizontal overflow, no empty section, nothing outside the file.
#
#   scripts/render_html.sh REPORT.html [OUT.png] [WIDTH] [MAX_HEIGHT]
#
# A development tool (not part of `make test`): it needs Debian's chromium
# (apt-get install -y chromium). The screenshot is WIDTH (default 1280) wide
# and as tall as the page (at most MAX_HEIGHT, when given: the top of the page).
# Exit 0 when every check passes, 1 otherwise.
set -euo pipefail
page=${1:?usage: render_html.sh REPORT.html [OUT.png] [WIDTH] [MAX_HEIGHT]}
[ -f "$page" ] || { echo "render_html: no such file: $page" >&2; exit 1; }
page=$(cd "$(dirname "$page")" && pwd)/$(basename "$page")
png=${2:-${page%.html}.png}
width=${3:-1280}
max_height=${4:-0}

browser=$(command -v chromium || command -v chromium-browser || command -v google-chrome || true)
if [ -z "$browser" ]; then
    echo "render_html: no chromium found; install it with: apt-get install -y chromium" >&2
    exit 1
fi
profile=$(mktemp -d)
work=$(mktemp -d)
trap 'rm -rf "$profile" "$work"' EXIT
chrome() {
    "$browser" --headless --no-sandbox --disable-gpu --disable-background-networking --disable-component-update \
        --disable-sync --no-first-run --hide-scrollbars --user-data-dir="$profile" "$@" 2>/dev/null
}

status=0
fail() { echo "render_html: $*" >&2; status=1; }

# 1. self-contained: no scripts, no external references
if grep -Eq '<script|<link|<img|src=|https?://|url\(|@import' "$page"; then
    fail "$page references something outside the file (script, link, src=, URL)"
fi

# 2. measure the laid-out page: a copy of it with a small script appended
#    writes what it measured into its own DOM, which chromium dumps
sed 's#</body>#<pre id="render-check">pending</pre><script>(function () {\
  var e = document.documentElement, lines = [];\
  lines.push("HEIGHT " + e.scrollHeight);\
  lines.push("OVERFLOW " + Math.max(0, e.scrollWidth - e.clientWidth));\
  document.querySelectorAll("section").forEach(function (s) {\
    var content = 0;\
    for (var c = s.firstElementChild; c; c = c.nextElementSibling)\
      if (c.tagName !== "H2" \&\& (c.textContent.trim() || c.querySelector("svg"))) content++;\
    if (!content) lines.push("EMPTY " + s.id);\
    if (s.scrollWidth > s.clientWidth + 1) lines.push("WIDE " + s.id + " " + (s.scrollWidth - s.clientWidth));\
  });\
  document.getElementById("render-check").textContent = lines.join("\\n");\
})();</script></body>#' "$page" >"$work/probe.html"
dom=$(chrome --window-size="$width,800" --dump-dom "file://$work/probe.html" || true)
result=$(printf '%s\n' "$dom" | sed -n '/<pre id="render-check">/,/<\/pre>/p' | sed 's#</pre>.*##; s/<[^>]*>//g')
height=$(printf '%s\n' "$result" | awk '/^HEIGHT/{print $2}')
overflow=$(printf '%s\n' "$result" | awk '/^OVERFLOW/{print $2}')
if [ -z "$height" ]; then
    fail "the page could not be measured (chromium printed no result)"
    height=4000
fi
[ "${overflow:-0}" -gt 0 ] && fail "the page is ${overflow}px wider than ${width}px (horizontal overflow)"
printf '%s\n' "$result" | awk '/^EMPTY/{print "render_html: empty section: " $2}' >&2
printf '%s\n' "$result" | grep -q '^EMPTY' && status=1
printf '%s\n' "$result" | awk '/^WIDE/{print "render_html: note: section " $2 " scrolls sideways by " $3 "px"}' >&2

# 3. the screenshot, as tall as the page
shot=$height
[ "$max_height" -gt 0 ] && [ "$max_height" -lt "$height" ] && shot=$max_height
chrome --screenshot="$png" --window-size="$width,$shot" "file://$page" >/dev/null || true
if [ -s "$png" ]; then
    echo "render_html: $png (${width}x${shot}; the page is ${height} tall)"
else
    fail "no screenshot written for $page"
fi
exit $status
