#!/bin/sh
# make_sample.sh - makes the bundled Fashion-MNIST sample in data/fashion-mnist-sample
# from the full dataset (Debian package dataset-fashion-mnist, or a directory given
# as $1): the first TRAIN_PER_CLASS training images of each class and the first
# TEST_PER_CLASS test images of each class, in file order, as gzipped IDX files.
#
#   scripts/make_sample.sh [SRC_DIR] [OUT_DIR]
#
# Fashion-MNIST (c) Zalando SE, MIT licence: https://github.com/zalandoresearch/fashion-mnist
set -eu
SRC=${1:-/usr/share/datasets/fashion-mnist}
OUT=${2:-data/fashion-mnist-sample}
TRAIN_PER_CLASS=${TRAIN_PER_CLASS:-450}
TEST_PER_CLASS=${TEST_PER_CLASS:-100}
command -v python3 >/dev/null || { echo "make_sample.sh: needs python3" >&2; exit 1; }
[ -f "$SRC/train-images-idx3-ubyte.gz" ] || {
    echo "make_sample.sh: $SRC/train-images-idx3-ubyte.gz not found (apt-get install dataset-fashion-mnist)" >&2
    exit 3
}
mkdir -p "$OUT"
python3 - "$SRC" "$OUT" "$TRAIN_PER_CLASS" "$TEST_PER_CLASS" <<'PY'
import gzip, struct, sys
src, out, ntr, nte = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

def read(path):
    with gzip.open(path, "rb") as f:
        return f.read()

def subset(stem, per_class):
    im = read(f"{src}/{stem}-images-idx3-ubyte.gz")
    lb = read(f"{src}/{stem}-labels-idx1-ubyte.gz")
    magic, n, h, w = struct.unpack(">IIII", im[:16])
    assert magic == 0x803 and struct.unpack(">II", lb[:8]) == (0x801, n)
    taken, keep = [0] * 10, []
    for i in range(n):
        k = lb[8 + i]
        if taken[k] < per_class:
            taken[k] += 1
            keep.append(i)
    size = h * w
    pixels = b"".join(im[16 + i * size:16 + (i + 1) * size] for i in keep)
    labels = bytes(lb[8 + i] for i in keep)
    # mtime=0: the same input gives byte-identical files
    for name, data in ((f"{stem}-images-idx3-ubyte.gz", struct.pack(">IIII", 0x803, len(keep), h, w) + pixels),
                       (f"{stem}-labels-idx1-ubyte.gz", struct.pack(">II", 0x801, len(keep)) + labels)):
        with open(f"{out}/{name}", "wb") as f:
            with gzip.GzipFile(filename="", mode="wb", fileobj=f, compresslevel=9, mtime=0) as g:
                g.write(data)
    print(f"{stem}: {len(keep)} images ({per_class} per class)")

subset("train", ntr)
subset("t10k", nte)
PY
du -ch "$OUT"/*.gz | tail -1
