#!/usr/bin/python3
"""kernels_bench_torch.py - PyTorch CPU timings of the conv layers that
kernels_bench.c times (same table): forward, and backward (input and weight
gradients in one autograd call; the first layer needs no input gradient).
Usage: /usr/bin/python3 scripts/bench/kernels_bench_torch.py THREADS ITERS [nhwc]"""
import os
import sys
import time

import torch

LAYERS = [
    ("small_cnn.conv1", 128, 1, 28, 28, 32, 3, 1, 1, 1),
    ("small_cnn.conv2", 128, 32, 14, 14, 64, 3, 1, 1, 1),
    ("resnet18.stem", 64, 3, 32, 32, 64, 3, 1, 1, 1),
    ("resnet18.l1", 64, 64, 32, 32, 64, 3, 1, 1, 4),
    ("resnet18.l2.down", 64, 64, 32, 32, 128, 3, 2, 1, 1),
    ("resnet18.l2.1x1", 64, 64, 32, 32, 128, 1, 2, 0, 1),
    ("resnet18.l2", 64, 128, 16, 16, 128, 3, 1, 1, 3),
    ("resnet18.l3.down", 64, 128, 16, 16, 256, 3, 2, 1, 1),
    ("resnet18.l3.1x1", 64, 128, 16, 16, 256, 1, 2, 0, 1),
    ("resnet18.l3", 64, 256, 8, 8, 256, 3, 1, 1, 3),
    ("resnet18.l4.down", 64, 256, 8, 8, 512, 3, 2, 1, 1),
    ("resnet18.l4.1x1", 64, 256, 8, 8, 512, 1, 2, 0, 1),
    ("resnet18.l4", 64, 512, 4, 4, 512, 3, 1, 1, 3),
]


# BENCH_CLOCK=cpu: process CPU time (see kernels_bench.c)
CLOCK = time.process_time if os.environ.get("BENCH_CLOCK") == "cpu" else time.perf_counter


def median_ms(fn, iters):
    fn()
    ts = []
    for _ in range(iters):
        t0 = CLOCK()
        fn()
        ts.append((CLOCK() - t0) * 1e3)
    ts.sort()
    return ts[0]  # the minimum: least disturbed by other load


def main():
    threads = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    iters = int(sys.argv[2]) if len(sys.argv) > 2 else 5
    nhwc = len(sys.argv) > 3 and sys.argv[3] == "nhwc"
    torch.set_num_threads(threads)
    fmt = torch.channels_last if nhwc else torch.contiguous_format
    print("pytorch %s cpu, %d threads, %s, best of %d (ms)" % (torch.__version__, torch.get_num_threads(),
                                                                 "NHWC" if nhwc else "NCHW", iters))
    print("%-18s %8s %8s %8s" % ("layer", "fwd", "bwd", "x count"))
    tot = [0.0, 0.0]
    for i, (name, n, c, h, w, k, r, stride, pad, count) in enumerate(LAYERS):
        first = name in ("small_cnn.conv1", "resnet18.stem")  # the input needs no gradient
        conv = torch.nn.Conv2d(c, k, r, stride, pad, bias=False).to(memory_format=fmt)
        x = torch.rand(n, c, h, w).to(memory_format=fmt).requires_grad_(not first)
        with torch.no_grad():
            dy = torch.rand_like(conv(x))

        def fwd_bwd():
            conv.weight.grad = None
            conv(x).backward(dy)
        f = median_ms(lambda: conv(x), iters)
        b = max(median_ms(fwd_bwd, iters) - f, 0.0)
        print("%-18s %8.2f %8.2f %8d" % (name, f, b, count))
        tot[0] += f * count
        tot[1] += b * count
        if i == 1 or i + 1 == len(LAYERS):
            print("%-18s %8.2f %8.2f   total fwd+bwd %.1f ms" % ("= small_cnn" if i == 1 else "= resnet18",
                                                               tot[0], tot[1], sum(tot)))
            tot = [0.0, 0.0]


if __name__ == "__main__":
    main()
