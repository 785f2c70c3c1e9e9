#!/usr/bin/env python3
"""Times PyTorch's training step (forward, cross-entropy, backward, SGD with
momentum 0.9 and weight decay 5e-4) for the models of configs/models that
scripts/bench/cpu_step_vs_torch.sh compares with mpsdiag. Same architectures
as the JSON configs (built by hand here; parameter counts are checked).

usage: cpu_step_vs_torch.py MODEL BATCH ITERS WARMUP THREADS [channels_last]
       cpu_step_vs_torch.py --check-dump FILE MODEL [LABEL_SMOOTHING]
The first prints one JSON line like build/bench_step. The second checks a
file written by `mpsdiag --dump-grads FILE --dropout 0` (one training step)
against PyTorch: it loads the dumped parameters, running statistics and input
batch into the same architecture, runs the step in fp64 (the reference) and
fp32, and prints each tensor's error (loss, logits, every gradient) for
mpsdiag and for PyTorch fp32 (exit 1 when mpsdiag's is more than 4x
PyTorch's and above 1e-4)."""
import json
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from torch_models import ResNet18Cifar, SmallCNN, st_read  # noqa: E402  (the configs' architectures)


MODELS = {"small_cnn": (SmallCNN, (1, 28, 28), 10, 421738),
          "resnet18_cifar": (ResNet18Cifar, (3, 32, 32), 100, 11220132)}


def run_step(name, t, smoothing, dtype):
    """One training step of MODEL in `dtype` from the dump's parameters,
    running statistics and input; returns {name: tensor} like the dump."""
    model = MODELS[name][0]()
    for mod in model.modules():
        if isinstance(mod, nn.Dropout):
            mod.p = 0.0
    state = {}
    for k in model.state_dict():
        if "param." + k in t:
            state[k] = t["param." + k]
        elif "buffer." + k in t:
            state[k] = t["buffer." + k]
    missing = [k for k in model.state_dict() if k not in state and not k.endswith("num_batches_tracked")]
    if missing:
        sys.exit("check-dump: the file lacks %s" % ", ".join(missing[:5]))
    model.load_state_dict(state, strict=False)
    model = model.to(dtype)
    model.train()
    x = torch.cat([t[k] for k in sorted(t) if k.startswith("input.")], 1).to(dtype)
    logits = model(x)
    loss = F.cross_entropy(logits, t["labels"].long(), label_smoothing=smoothing)
    loss.backward()
    out = {"loss": loss.detach().reshape(()), "logits": logits.detach()}
    for k, p in model.named_parameters():
        out["grad." + k] = p.grad
    return out


def check_dump(path, name, smoothing):
    """Compares the dump and PyTorch's fp32 step with PyTorch's fp64 step:
    both fp32 results carry rounding that deep nets (BN over few elements,
    ReLU masks near 0) amplify, so mpsdiag passes when its error is within
    a few times PyTorch's own fp32 error (or below 1e-4 of the tensor's
    largest value)."""
    t, _ = st_read(path)
    ref = run_step(name, t, smoothing, torch.float64)
    f32 = run_step(name, t, smoothing, torch.float32)
    bad = 0
    print("%-36s %12s %12s %12s" % ("tensor", "largest", "mpsdiag err", "pytorch err"))
    for k, r in ref.items():
        scale = max(r.abs().max().item(), 1e-12)
        ours = (t[k].double() - r).abs().max().item() / scale
        theirs = (f32[k].double() - r).abs().max().item() / scale
        ok = ours <= max(4 * theirs, 1e-4)
        bad += not ok
        print("%-36s %12.4g %12.3g %12.3g%s" % (k, scale, ours, theirs, "" if ok else "  <- off"))
    print("errors relative to the largest value of each tensor, against PyTorch in fp64; %d off" % bad)
    return 1 if bad else 0


def main():
    if sys.argv[1] == "--check-dump":
        sys.exit(check_dump(sys.argv[2], sys.argv[3], float(sys.argv[4]) if len(sys.argv) > 4 else 0.0))
    name, batch, iters, warmup, threads = sys.argv[1], *map(int, sys.argv[2:6])
    channels_last = len(sys.argv) > 6 and "channels_last" in sys.argv[6]
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    make, shape, classes, nparams = MODELS[name]
    model = make()
    assert sum(p.numel() for p in model.parameters()) == nparams, "architecture differs from the config"
    x = torch.rand(batch, *shape) * 2 - 1
    y = torch.arange(batch) % classes
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.to(memory_format=torch.channels_last)
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    lossf = nn.CrossEntropyLoss()
    model.train()
    times = []
    for it in range(-warmup, iters):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = lossf(model(x), y)
        loss.backward()
        opt.step()
        loss.item()
        if it >= 0:
            times.append((time.perf_counter() - t0) * 1e3)
    times.sort()
    med = times[len(times) // 2] if len(times) % 2 else 0.5 * (times[len(times) // 2 - 1] + times[len(times) // 2])
    p95 = times[min(len(times) - 1, int(round(0.95 * (len(times) - 1))))]
    print(json.dumps({"impl": "pytorch " + torch.__version__, "model": name, "batch": batch,
                      "threads": torch.get_num_threads(), "median_ms": round(med, 3), "p95_ms": round(p95, 3),
                      "samples_per_s": round(batch * 1e3 / med, 1)}))


if __name__ == "__main__":
    main()
