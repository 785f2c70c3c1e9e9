#!/usr/bin/env python3
"""ddp_torch.py - PyTorch DistributedDataParallel training steps, the
reference for scripts/bench/dist_scaling.sh.

    torchrun --standalone --nproc_per_node N scripts/bench/ddp_torch.py \
        --model resnet18_cifar --batch 256 --precision bf16 --steps 60

Per-GPU batch --batch, synthetic inputs on the GPU (no loader), SGD with
momentum, channels-last, cudnn.benchmark, bf16 autocast; DDP's default
25 MB gradient buckets overlap the all-reduce with backward. Rank 0 prints
one tab-separated line: ddp, model, GPUs, per-GPU batch, precision, global
samples/s over the timed steps (after --warmup untimed ones), median step ms.
"""
import argparse
import json
import os
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
import torchvision


def classes(name):
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
    with open(os.path.join(root, "configs", "models", name + ".json")) as f:
        return int(json.load(f).get("num_classes", 10))


def make(name):
    c = classes(name)
    if name == "resnet18_cifar":
        m = torchvision.models.resnet18(num_classes=c)
        m.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        m.maxpool = nn.Identity()
        return m, (3, 32, 32), c
    if name == "resnet50":
        return torchvision.models.resnet50(num_classes=c), (3, 224, 224), c
    raise SystemExit(f"ddp_torch.py: unknown model {name} (resnet18_cifar, resnet50)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="resnet18_cifar")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--warmup", type=int, default=10)
    a = ap.parse_args()

    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    torch.backends.cudnn.benchmark = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True

    model, shape, c = make(a.model)
    model = model.cuda().to(memory_format=torch.channels_last)
    model = nn.parallel.DistributedDataParallel(model, device_ids=[local])
    opt = torch.optim.SGD(model.parameters(), lr=0.1 * world, momentum=0.9, weight_decay=5e-4)
    g = torch.Generator(device="cuda").manual_seed(1234 + rank)
    x = torch.rand(a.batch, *shape, device="cuda", generator=g).mul_(2).sub_(1)
    x = x.contiguous(memory_format=torch.channels_last)
    y = torch.randint(0, c, (a.batch,), device="cuda", generator=g)

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    dist.barrier()
    ms = []
    t0 = time.perf_counter()
    for _ in range(a.steps):
        s = time.perf_counter()
        step()
        torch.cuda.synchronize()
        ms.append((time.perf_counter() - s) * 1e3)
    dist.barrier()
    el = time.perf_counter() - t0
    if rank == 0:
        sps = a.batch * world * a.steps / el
        print(f"ddp\t{a.model}\t{world}\t{a.batch}\t{a.precision}\t{sps:.1f}\t{statistics.median(ms):.3f}",
              flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
