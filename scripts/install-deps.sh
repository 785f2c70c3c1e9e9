#!/usr/bin/env bash
# install-deps.sh - installs what mpsdiag needs and is missing, nothing else.
#   Debian/Ubuntu: apt (libopenblas-dev libcjson-dev libturbojpeg0-dev zlib1g-dev
#                  libcriterion-dev pkg-config openmpi-bin libopenmpi-dev dataset-fashion-mnist)
#   macOS:         Homebrew (openblas cjson jpeg-turbo criterion pkg-config open-mpi; zlib ships with macOS)
# Open MPI runs data-parallel training on several processes (docs/distributed.md).
# --check: only report; exit 0 when nothing is missing.
set -euo pipefail

check_only=0
[ "${1:-}" = "--check" ] && check_only=1

missing=()
os=$(uname -s)

if [ "$os" = "Darwin" ]; then
    for f in openblas cjson jpeg-turbo criterion pkg-config open-mpi; do
        # Homebrew's pkg-config is now the pkgconf formula under an alias
        [ "$f" = pkg-config ] && command -v pkg-config >/dev/null && continue
        brew list --versions "$f" >/dev/null 2>&1 || missing+=("$f")
    done
    if [ "$check_only" = 1 ]; then
        [ ${#missing[@]} -eq 0 ] && exit 0
        echo "missing: ${missing[*]}"; exit 1
    fi
    [ ${#missing[@]} -eq 0 ] && { echo "install-deps: nothing missing"; exit 0; }
    command -v brew >/dev/null || { echo "install-deps: Homebrew is needed (https://brew.sh)" >&2; exit 1; }
    echo "install-deps: brew install ${missing[*]}"
    brew install "${missing[@]}"
    exit 0
fi

if ! command -v dpkg-query >/dev/null; then
    echo "install-deps: unsupported system (need Debian/Ubuntu apt or macOS Homebrew); install" \
         "OpenBLAS, cJSON, libjpeg-turbo (TurboJPEG), zlib, Criterion, pkg-config and Open MPI by hand" >&2
    exit 1
fi

for p in libopenblas-dev libcjson-dev libturbojpeg0-dev zlib1g-dev libcriterion-dev pkg-config openmpi-bin \
         libopenmpi-dev; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Real data for the tests and the default run (optional if not packaged here).
if [ ! -d /usr/share/datasets/fashion-mnist ]; then
    missing+=("dataset-fashion-mnist")
fi

if [ "$check_only" = 1 ]; then
    [ ${#missing[@]} -eq 0 ] && exit 0
    echo "missing: ${missing[*]}"; exit 1
fi
[ ${#missing[@]} -eq 0 ] && { echo "install-deps: nothing missing"; exit 0; }

sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
echo "install-deps: apt-get install ${missing[*]}"
$sudo apt-get update -qq
DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
