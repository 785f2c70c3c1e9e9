#!/usr/bin/env bash
# build_bench.sh NAME - builds build/NAME from scripts/bench/NAME.c and the
# objects of `make` (all of src/ but main.o, the Metal C objects), for the
# device benchmarks (attn_bench, cuda_kbench) that are not part of `make`.
set -euo pipefail
name=$1
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
make --no-print-directory all >/dev/null
objs=$(find build/obj/src build/obj/metal -name '*.o' ! -path '*/src/main.o' ! -path '*/metal/sim/*' ! -path '*/metal/check/*' ! -name '*.sim.o' | sort)
cc -O2 -std=c11 -Isrc -o "build/$name" "scripts/bench/$name.c" $objs \
    $(pkg-config --libs openblas libcjson libturbojpeg zlib) -lm -ldl -pthread -rdynamic
echo "built build/$name"
