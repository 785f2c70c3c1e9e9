#!/usr/bin/env python3
"""Times PyTorch's training step (forward, cross-entropy, backward, SGD with
momentum 0.9 and weight decay 5e-4) for the models of configs/models that
scripts/bench/cpu_step_vs_torch.sh compares with mpsdiag. Same architectures
as the JSON configs (built by hand here; parameter counts are checked).

usage: cpu_step_vs_torch.py MODEL BATCH ITERS WARMUP THREADS [channels_last]
Prints one JSON line like build/bench_step."""
import json
import sys
import time

import torch
import torch.nn as nn


def small_cnn():
    return nn.Sequential(
        nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(3136, 128), nn.ReLU(), nn.Dropout(0.25), nn.Linear(128, 10))


class Basic(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        return self.relu(y + (self.downsample(x) if self.downsample is not None else x))


def resnet18_cifar(classes=100):
    layers = [nn.Conv2d(3, 64, 3, 1, 1, bias=False), nn.BatchNorm2d(64), nn.ReLU(inplace=True)]
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        layers += [Basic(cin, cout, stride), Basic(cout, cout, 1)]
        cin = cout
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, classes)]
    return nn.Sequential(*layers)


MODELS = {"small_cnn": (small_cnn, (1, 28, 28), 10, 421738),
          "resnet18_cifar": (resnet18_cifar, (3, 32, 32), 100, 11220132)}


def main():
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
