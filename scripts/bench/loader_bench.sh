#!/bin/bash
# loader_bench.sh - JPEG decode and loader throughput with 1, 2 and 4 workers.
# Builds mpsdiag, writes a folder of synthetic JPEGs (N images of W x H in 10
# classes, under build/bench/jpeg), and runs epochs of the train loader at
# SIZE x SIZE with augmentation, batch 64, for each worker count. Every worker
# count is one consumer that does nothing else, so the figures are what the
# loader can deliver at most.
#
#   scripts/bench/loader_bench.sh [N=2000] [W=500] [H=375] [SIZE=224] [EPOCHS=2]
set -euo pipefail
N=${1:-2000}; W=${2:-500}; H=${3:-375}; SIZE=${4:-224}; EPOCHS=${5:-2}
cd "$(dirname "$0")/../.."
make -s all >/dev/null
OBJS=$(find build/obj -name '*.o' ! -path 'build/obj/test/*' ! -name main.o ! -name '*.cuda.o')
mkdir -p build/bench
cc -std=c11 -O2 -Isrc $(pkg-config --cflags libcjson libturbojpeg) scripts/bench/loader_bench.c $OBJS \
   -o build/bench/loader_bench $(pkg-config --libs openblas libcjson libturbojpeg zlib) -lm -ldl -pthread
DIR=build/bench/jpeg-$N-${W}x$H
if [ ! -d "$DIR" ]; then
    echo "writing $N JPEGs of ${W}x$H into $DIR"
    build/bench/loader_bench make "$DIR" "$N" "$W" "$H"
fi
echo "machine: $(nproc) logical CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "loader: $N JPEGs ${W}x$H -> ${SIZE}x$SIZE RGB, random crop + flip, batch 64, $EPOCHS epochs"
build/bench/loader_bench run "$DIR" "$SIZE" "$EPOCHS" 1 2 4
