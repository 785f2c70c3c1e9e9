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
# the MPI libraries when dist.o was built with them (as the Makefile finds them)
mpi=
if nm build/obj/src/core/dist.o 2>/dev/null | grep -q ' U MPI_'; then
    mpi=$(pkg-config --libs ompi-c 2>/dev/null || mpicc --showme:link 2>/dev/null || true)
fi
cc -O2 -std=c11 -Isrc -o "build/$name" "scripts/bench/$name.c" $objs \
    $(pkg-config --libs openblas libcjson libturbojpeg zlib) $mpi -lm -ldl -pthread -rdynamic
echo "built build/$name"
