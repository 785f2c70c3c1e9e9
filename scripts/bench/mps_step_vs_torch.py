#!/usr/bin/env python3
"""Times PyTorch's training step on the Apple GPU (the "mps" device) for the
models scripts/mac_selftest.sh compares with `mpsdiag --device metal`: the
architectures and the step (cross-entropy, SGD momentum 0.9, weight decay
5e-4) of scripts/bench/cpu_step_vs_torch.py, synchronised with
torch.mps.synchronize() around each timed step.

usage: mps_step_vs_torch.py MODEL BATCH ITERS WARMUP [fp16]
Prints one JSON line (impl, model, batch, median_ms, p95_ms, samples_per_s),
or {"skipped": reason} when MPS is not available."""
import json
import os
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cpu_step_vs_torch import MODELS  # noqa: E402  (same architectures)


def main():
    name, batch, iters, warmup = sys.argv[1], *map(int, sys.argv[2:5])
    half = len(sys.argv) > 5 and sys.argv[5] == "fp16"
    if not torch.backends.mps.is_available():
        print(json.dumps({"skipped": "torch.backends.mps.is_available() is False", "model": name}))
        return 0
    dev = torch.device("mps")
    torch.manual_seed(0)
    make, shape, classes, nparams = MODELS[name]
    model = make().to(dev)
    assert sum(p.numel() for p in model.parameters()) == nparams, "architecture differs from the config"
    x = (torch.rand(batch, *shape) * 2 - 1).to(dev)
    y = (torch.arange(batch) % classes).to(dev)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    lossf = nn.CrossEntropyLoss()
    model.train()
    times, nonfinite = [], 0
    for it in range(-warmup, iters):
        torch.mps.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("mps", dtype=torch.float16, enabled=half):
            loss = lossf(model(x), y)
        loss.backward()
        opt.step()
        nonfinite += int(not torch.isfinite(loss).item())
        torch.mps.synchronize()
        if it >= 0:
            times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    med = times[len(times) // 2]
    p95 = times[min(len(times) - 1, int(round(0.95 * (len(times) - 1))))]
    print(json.dumps({"impl": "pytorch " + torch.__version__ + " mps" + (" fp16 autocast" if half else ""),
                      "model": name, "batch": batch, "median_ms": round(med, 3), "p95_ms": round(p95, 3),
                      "samples_per_s": round(batch * 1e3 / med, 1), "nonfinite_losses": nonfinite}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
