#!/bin/sh
# fetch_cifar.sh - downloads and unpacks the official CIFAR-10 and/or CIFAR-100 binary
# distributions (needs internet access) into data/cifar-10 and data/cifar-100, where
# mpsdiag looks for them (--dataset cifar10|cifar100, or --data-dir DIR).
#
#   scripts/fetch_cifar.sh [10|100|both] [DEST=data]
set -eu
WHICH=${1:-both}
DEST=${2:-data}
BASE=https://www.cs.toronto.edu/~kriz
fetch() { # url out
    if command -v curl >/dev/null; then curl -fL --retry 3 -o "$2" "$1"
    elif command -v wget >/dev/null; then wget -O "$2" "$1"
    else echo "fetch_cifar.sh: needs curl or wget" >&2; exit 1; fi
}
get() { # name tarball md5 subdir
    out="$DEST/$1"
    mkdir -p "$out"
    tmp="$out/$2.part"
    echo "fetching $BASE/$2"
    fetch "$BASE/$2" "$tmp"
    sum=$( (md5sum "$tmp" 2>/dev/null || md5 -r "$tmp") | cut -d' ' -f1)
    [ "$sum" = "$3" ] || { echo "fetch_cifar.sh: $2: md5 $sum, expected $3" >&2; rm -f "$tmp"; exit 1; }
    tar -xzf "$tmp" -C "$out" --strip-components=1
    rm -f "$tmp"
    echo "unpacked into $out:"; ls "$out"
}
case "$WHICH" in
10|both) get cifar-10 cifar-10-binary.tar.gz c32a1d4ab5d03f1284b67883e8d87530 ;;
esac
case "$WHICH" in
100|both) get cifar-100 cifar-100-binary.tar.gz 03b5dce01913d631647c71ecec9e9cb8 ;;
esac
case "$WHICH" in 10|100|both) ;; *) echo "usage: fetch_cifar.sh [10|100|both] [DEST]" >&2; exit 2 ;; esac
