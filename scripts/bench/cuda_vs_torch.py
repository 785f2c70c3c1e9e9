#!/usr/bin/env python3
"""cuda_vs_torch.py - PyTorch side of scripts/bench/cuda_vs_torch.sh, and the ratio table.

  cuda_vs_torch.py torch            time the kbench shapes through PyTorch (TSV on stdout)
  cuda_vs_torch.py table H A T      print the table from mpsdiag heuristics (H), mpsdiag
                                    with cuDNN autotune (A) and PyTorch (T) TSV files

Same shapes, dtypes and layout (channels-last) as scripts/bench/cuda_kbench.c; PyTorch runs
with cudnn.benchmark and TF32 on, as the issue's baseline. Inputs are random; each case is
warmed up, then every iteration is timed with CUDA events and the median is reported.
"""
import statistics
import sys


def bench_torch():
    import torch
    import torch.nn.functional as F

    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = True
    dev = "cuda"
    dt = {"bf16": torch.bfloat16, "fp32": torch.float32}

    def timed(fn, warm=3, iters=20):
        for _ in range(warm):
            fn()
        torch.cuda.synchronize()
        ms = []
        for _ in range(iters):
            s = torch.cuda.Event(enable_timing=True)
            e = torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            e.synchronize()
            ms.append(s.elapsed_time(e))
        return statistics.median(ms)

    def rnd(*shape, dtype):
        return torch.rand(*shape, device=dev, dtype=torch.float32).mul_(2).sub_(1).to(dtype)

    print(f"# torch {torch.__version__} cudnn {torch.backends.cudnn.version()} {torch.cuda.get_device_name()}",
          file=sys.stderr)
    for m, n, k, d in [(8192, 8192, 8192, "bf16"), (4096, 4096, 4096, "bf16"), (8192, 8192, 8192, "fp32"),
                       (4096, 4096, 4096, "fp32"), (128, 1000, 2048, "bf16")]:
        a, b = rnd(m, k, dtype=dt[d]), rnd(k, n, dtype=dt[d])
        ms = timed(lambda: torch.matmul(a, b))
        print(f"gemm_{m}x{n}x{k}\t{d}\t{ms:.4f}\t{2.0 * m * n * k / (ms * 1e-3) / 1e12:.1f}", flush=True)
        del a, b
    shapes = [("r50_conv1_7x7s2", 128, 3, 224, 224, 64, 7, 2, 3), ("r50_l1_3x3", 128, 64, 56, 56, 64, 3, 1, 1),
              ("r50_l1_1x1_64to256", 128, 64, 56, 56, 256, 1, 1, 0), ("r50_l2_3x3", 128, 128, 28, 28, 128, 3, 1, 1),
              ("r50_l3_3x3", 128, 256, 14, 14, 256, 3, 1, 1),
              ("r50_l3_1x1_1024to256", 128, 1024, 14, 14, 256, 1, 1, 0), ("r50_l4_3x3", 128, 512, 7, 7, 512, 3, 1, 1),
              ("r18c_l1_3x3", 256, 64, 32, 32, 64, 3, 1, 1)]
    for name, n, c, h, w, k, r, st, pd in shapes:
        for d in ("bf16", "fp32"):
            x = rnd(n, c, h, w, dtype=dt[d]).contiguous(memory_format=torch.channels_last)
            wt = rnd(k, c, r, r, dtype=dt[d]).contiguous(memory_format=torch.channels_last)
            y = F.conv2d(x, wt, stride=st, padding=pd)
            dy = rnd(*y.shape, dtype=dt[d]).contiguous(memory_format=torch.channels_last)
            fl = 2.0 * y.numel() * c * r * r
            f = timed(lambda: F.conv2d(x, wt, stride=st, padding=pd))
            cb = torch.ops.aten.convolution_backward
            bd = timed(lambda: cb(dy, x, wt, None, [st, st], [pd, pd], [1, 1], False, [0, 0], 1, [True, False, False]))
            bf = timed(lambda: cb(dy, x, wt, None, [st, st], [pd, pd], [1, 1], False, [0, 0], 1, [False, True, False]))
            for tag, ms in (("fwd", f), ("bwd_data", bd), ("bwd_filter", bf)):
                print(f"conv_{name}_{tag}\t{d}\t{ms:.4f}\t{fl / (ms * 1e-3) / 1e12:.1f}", flush=True)
            del x, wt, y, dy
    for n, c, hw, d in [(128, 64, 56 * 56, "bf16"), (128, 256, 56 * 56, "bf16"), (128, 64, 56 * 56, "fp32")]:
        x = rnd(n, c, 56, 56, dtype=dt[d]).contiguous(memory_format=torch.channels_last).requires_grad_()
        dy = rnd(n, c, 56, 56, dtype=dt[d]).contiguous(memory_format=torch.channels_last)
        g = torch.rand(c, device=dev, requires_grad=True)
        b = torch.rand(c, device=dev, requires_grad=True)
        rm, rv = torch.zeros(c, device=dev), torch.ones(c, device=dev)

        def step():
            y = F.relu(F.batch_norm(x, rm, rv, g, b, training=True))
            y.backward(dy)

        ms = timed(step)
        nbytes = n * c * hw * (2 if d == "bf16" else 4) * 9
        print(f"bn_relu_fwd_bwd_{n}x{c}x{hw}\t{d}\t{ms:.4f}\t{nbytes / (ms * 1e-3) / 1e9:.0f}", flush=True)
        del x, dy
    a, b = rnd(4096, dtype=torch.float32), rnd(4096, dtype=torch.float32)

    def small():
        for _ in range(200):
            b.add_(a)

    eager = timed(small)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        small()
    torch.cuda.current_stream().wait_stream(s)
    gr = torch.cuda.CUDAGraph()
    with torch.cuda.graph(gr):
        small()
    rep = timed(gr.replay)
    print(f"launch_200_small_eager\tfp32\t{eager:.4f}\t{eager * 1e3 / 200:.2f}")
    print(f"launch_200_small_graph\tfp32\t{rep:.4f}\t{rep * 1e3 / 200:.2f}")


def bench_torch_steps(root):
    """Whole training steps (forward, cross-entropy, backward, SGD) of the three models."""
    import json
    import os

    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    import torchvision

    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cudnn.benchmark = True

    def classes(name):
        with open(os.path.join(root, "configs", "models", name + ".json")) as f:
            return int(json.load(f).get("num_classes", 10))

    def small_cnn(c):
        return nn.Sequential(nn.Conv2d(1, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
                             nn.MaxPool2d(2), nn.Conv2d(32, 64, 3, padding=1, bias=False), nn.BatchNorm2d(64),
                             nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(),
                             nn.Dropout(0.25), nn.Linear(128, c))

    def resnet18_cifar(c):
        m = torchvision.models.resnet18(num_classes=c)
        m.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
        m.maxpool = nn.Identity()
        return m

    cases = [("small_cnn", 256, (1, 28, 28), small_cnn), ("resnet18_cifar", 256, (3, 32, 32), resnet18_cifar),
             ("resnet50", 128, (3, 224, 224), lambda c: torchvision.models.resnet50(num_classes=c))]
    for name, batch, shape, make in cases:
        for d in ("fp32", "bf16"):
            c = classes(name)
            model = make(c).cuda().to(memory_format=torch.channels_last)
            opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
            x = torch.rand(batch, *shape, device="cuda").mul_(2).sub_(1).contiguous(memory_format=torch.channels_last)
            y = torch.randint(0, c, (batch,), device="cuda")

            def step():
                with torch.autocast("cuda", dtype=torch.bfloat16, enabled=d == "bf16"):
                    loss = F.cross_entropy(model(x), y)
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()

            for _ in range(5):
                step()
            torch.cuda.synchronize()
            ms = []
            for _ in range(20):
                s = torch.cuda.Event(enable_timing=True)
                e = torch.cuda.Event(enable_timing=True)
                s.record()
                step()
                e.record()
                e.synchronize()
                ms.append(s.elapsed_time(e))
            print(f"step_{name}_b{batch}\t{d}\t{statistics.median(ms):.4f}\t0", flush=True)
            del model, opt, x, y
            torch.cuda.empty_cache()


def load(path):
    rows = {}
    try:
        with open(path) as f:
            for line in f:
                if line.startswith("#") or not line.strip():
                    continue
                p = line.rstrip("\n").split("\t")
                if len(p) >= 4:
                    rows[(p[0], p[1])] = (float(p[2]), float(p[3]))
    except OSError:
        pass
    return rows


def table(hpath, apath, tpath):
    H, A, T = load(hpath), load(apath), load(tpath)
    peak = T.get(("gemm_8192x8192x8192", "bf16"), (0, 0))[1]
    print(f"measured bf16 peak (torch.matmul 8192^3 bf16): {peak:.0f} TFLOP/s")
    print("rows: plain = eager per call (event-timed, host overhead included when the host is slower than the GPU);")
    print("_graph = device time per call replaying 10 captured calls; _host = host ms to enqueue one call.")
    print("torch column: PyTorch eager (cudnn.benchmark, channels-last) for the same base case.")
    hdr = ("case", "dtype", "mpsdiag ms", "autotune ms", "torch ms", "torch/mpsdiag", "mpsdiag rate", "% bf16 peak")
    print("| " + " | ".join(hdr) + " |")
    print("|" + "---|" * len(hdr))
    for key in list(H.keys()):
        name, dtype = key
        base = name
        for suf in ("_graph", "_host"):
            if name.endswith(suf):
                base = name[: -len(suf)]
        h, a, t = H[key], A.get(key), T.get((base, dtype))
        best = min(h[0], a[0]) if a else h[0]
        rate = max(h[1], a[1]) if a else h[1]
        if name.endswith("_host"):
            print(f"| {name} | {dtype} | {h[0]:.3f} | {a[0] if a else float('nan'):.3f} | - | - | - | - |")
            continue
        unit = ("GB/s" if base.startswith("bn") and not name.endswith("_graph") else
                "samples/s" if False else
                "us/kernel" if base.startswith("launch") else "TFLOP/s")
        frac = f"{100.0 * rate / peak:.0f}%" if peak and unit == "TFLOP/s" and rate > 0 else "-"
        ratio = f"{t[0] / (h[0] if base.startswith('launch') else best):.2f}" if t else "-"
        ams = f"{a[0]:.3f}" if a else "-"
        tms = f"{t[0]:.3f}" if t else "-"
        print(f"| {name} | {dtype} | {h[0]:.3f} | {ams} | {tms} | {ratio} | {rate:.1f} {unit} | {frac} |")


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "torch":
        bench_torch()
    elif len(sys.argv) >= 2 and sys.argv[1] == "torch-steps":
        bench_torch_steps(sys.argv[2] if len(sys.argv) > 2 else ".")
    elif len(sys.argv) == 5 and sys.argv[1] == "table":
        table(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
