#!/usr/bin/python3
"""Builds data/green-cover-sample: wide crops of real photographs labelled
with quantities measured from their own pixels (an image-regression sample
for --dataset images-csv).

Source photographs: the 12 JPEGs under /usr/share/backgrounds/mate/nature/ of
Debian's mate-backgrounds package (GPL-2+). Get them without installing the
package:

    apt-get download mate-backgrounds && dpkg -x mate-backgrounds_*.deb pkg
    /usr/bin/python3 scripts/make_green_cover_sample.py pkg/usr/share/backgrounds/mate/nature data/green-cover-sample

Needs numpy and PIL (Debian: python3-numpy, python3-pil). Deterministic for
a given seed and set of photographs.

Each sample is a crop of aspect 2:1 (width 20% to 100% of the photograph's,
at a random place), resized with PIL's bilinear filter to 64 x 32 and saved
as JPEG quality 90. The targets are then measured on the saved file as
decoded (so they are exactly what the image shows), over all its pixels,
with R, G, B in 0..255:

    green_cover  fraction of pixels with excess green 2G - R - B > 20
                 (the Excess-Green vegetation index, Woebbecke et al. 1995)
    brightness   mean luma (0.299 R + 0.587 G + 0.114 B) / 255
    blue_cover   fraction of pixels with excess blue 2B - R - G > 20

and one side value that the pixels do not show:

    crop_scale   the crop's width / the photograph's width
"""
import csv
import os
import sys

import numpy as np
from PIL import Image

W, H = 64, 32
PER_PHOTO = 16
SEED = 17
THRESH = 20


def measure(path):
    a = np.asarray(Image.open(path).convert("RGB"), dtype=np.float64)
    r, g, b = a[..., 0], a[..., 1], a[..., 2]
    green = float(np.mean(2 * g - r - b > THRESH))
    bright = float(np.mean(0.299 * r + 0.587 * g + 0.114 * b) / 255.0)
    blue = float(np.mean(2 * b - r - g > THRESH))
    return green, bright, blue


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: make_green_cover_sample.py PHOTO_DIR OUT_DIR")
    src, out = sys.argv[1], sys.argv[2]
    photos = sorted(f for f in os.listdir(src) if f.lower().endswith(".jpg"))
    if not photos:
        sys.exit(f"{src}: no .jpg files")
    os.makedirs(os.path.join(out, "images"), exist_ok=True)
    rng = np.random.default_rng(SEED)
    rows = []
    k = 0
    for name in photos:
        im = Image.open(os.path.join(src, name)).convert("RGB")
        pw, ph = im.size
        for _ in range(PER_PHOTO):
            frac = float(rng.uniform(0.2, 1.0))
            cw = int(round(pw * frac))
            ch = cw // 2
            if ch > ph:
                ch = ph
                cw = 2 * ph
            x0 = int(rng.integers(0, pw - cw + 1))
            y0 = int(rng.integers(0, ph - ch + 1))
            crop = im.crop((x0, y0, x0 + cw, y0 + ch)).resize((W, H), Image.BILINEAR)
            rel = f"images/{k:03d}.jpg"
            path = os.path.join(out, rel)
            crop.save(path, "JPEG", quality=90)
            green, bright, blue = measure(path)
            rows.append([rel, f"{green:.6f}", f"{bright:.6f}", f"{blue:.6f}", f"{cw / pw:.4f}", name])
            k += 1
    with open(os.path.join(out, "labels.csv"), "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(["image", "green_cover", "brightness", "blue_cover", "crop_scale", "photo"])
        w.writerows(rows)
    print(f"{k} images from {len(photos)} photographs into {out}")


if __name__ == "__main__":
    main()
