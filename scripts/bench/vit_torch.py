#!/usr/bin/env python3
"""vit_torch.py - the PyTorch side of scripts/bench/vit_vs_torch.sh: a plain
ViT with registers (timm's VisionTransformer layout as in DINOv2-with-registers:
patch embedding, cls + register tokens, position embeddings on the patches,
pre-norm blocks with LayerScale, fused qkv, F.scaled_dot_product_attention,
exact GELU, LayerNorm eps 1e-6, head on the cls token), timed as a training
step (forward, MSE loss, backward, AdamW step).

  vit_torch.py step --model s|b --device cpu|cuda --dtype fp32|bf16 --batch N
                    [--image 224] [--outputs 1] [--iters 20] [--warmup 5] [--threads N]
      one JSON line: {"model", "device", "dtype", "batch", "step_ms", "params", "attn_ms"};
      bf16 = autocast (as mpsdiag's --precision bf16: matrix products in bf16, fp32
      master weights); attn_ms: the attention part of one step (forward + backward
      of F.scaled_dot_product_attention over all blocks), timed alone on the same
      shapes (CUDA events; on the CPU wall clock).
  vit_torch.py attn --device cpu|cuda --dtype fp32|bf16 --batch N --heads H [--tokens 261] [--dim 64]
      one JSON line: attention forward and backward ms (median) for (N, H, T, D).

Token count at 224x224 with patch 14: 16 x 16 = 256 patches + 1 cls + 4 registers = 261.
"""
import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

def sdpa(q, k, v):
    """F.scaled_dot_product_attention (torch >= 2.0: fused kernels); the plain
    formula on older torch, so the script still runs (not comparable timings)"""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v)
    return torch.softmax(q @ k.transpose(-2, -1) * q.shape[-1] ** -0.5, dim=-1) @ v


CONFIGS = {"s": dict(dim=384, depth=12, heads=6), "b": dict(dim=768, depth=12, heads=12)}


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, t, c = x.shape
        qkv = self.qkv(x).reshape(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        o = sdpa(qkv[0], qkv[1], qkv[2])
        return self.proj(o.transpose(1, 2).reshape(b, t, c))


class Block(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads)
        self.ls1 = nn.Parameter(torch.full((dim,), 1e-5))
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.fc2 = nn.Linear(4 * dim, dim)
        self.ls2 = nn.Parameter(torch.full((dim,), 1e-5))

    def forward(self, x):
        x = x + self.ls1 * self.attn(self.norm1(x))
        return x + self.ls2 * self.fc2(F.gelu(self.fc1(self.norm2(x))))


class ViT(nn.Module):
    def __init__(self, dim, depth, heads, image=224, patch=14, registers=4, outputs=1):
        super().__init__()
        n = (image // patch) ** 2
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        self.pos_embed = nn.Parameter(torch.randn(1, n, dim) * 0.02)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, dim))
        self.reg_token = nn.Parameter(torch.zeros(1, registers, dim))
        self.blocks = nn.ModuleList(Block(dim, heads) for _ in range(depth))
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, outputs)

    def forward(self, img):
        x = self.patch_embed(img).flatten(2).transpose(1, 2) + self.pos_embed
        b = x.shape[0]
        x = torch.cat([self.cls_token.expand(b, -1, -1), self.reg_token.expand(b, -1, -1), x], dim=1)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.norm(x)[:, 0])


def sync(dev):
    if dev == "cuda":
        torch.cuda.synchronize()


def timed(dev, fn, iters, warmup):
    """median ms of fn() over iters runs after warmup runs"""
    for _ in range(warmup):
        fn()
    ms = []
    for _ in range(iters):
        if dev == "cuda":
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize()
            ms.append(s.elapsed_time(e))
        else:
            t0 = time.perf_counter()
            fn()
            ms.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(ms)


def attn_ms(dev, dtype, b, h, t, d, iters, warmup):
    """(forward ms, forward + backward ms) of SDPA on (b, h, t, d)"""
    dt = torch.bfloat16 if dtype == "bf16" else torch.float32
    q, k, v = (torch.randn(b, h, t, d, device=dev, dtype=dt, requires_grad=True) for _ in range(3))
    do = torch.randn(b, h, t, d, device=dev, dtype=dt)

    def fwd():
        with torch.no_grad():
            sdpa(q, k, v)

    def both():
        o = sdpa(q, k, v)
        torch.autograd.grad(o, (q, k, v), do)

    return timed(dev, fwd, iters, warmup), timed(dev, both, iters, warmup)


def cmd_step(a):
    torch.manual_seed(0)
    dev = a.device
    if dev == "cpu":
        torch.set_num_threads(a.threads)
    else:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    cfg = CONFIGS[a.model]
    m = ViT(cfg["dim"], cfg["depth"], cfg["heads"], image=a.image, outputs=a.outputs).to(dev)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.0)
    x = torch.randn(a.batch, 3, a.image, a.image, device=dev)
    y = torch.randn(a.batch, a.outputs, device=dev)
    use_amp = a.dtype == "bf16"

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=dev, dtype=torch.bfloat16, enabled=use_amp):
            loss = F.mse_loss(m(x).float(), y)
        loss.backward()
        opt.step()

    ms = timed(dev, step, a.iters, a.warmup)
    t = (a.image // 14) ** 2 + 5
    _, ab = attn_ms(dev, a.dtype, a.batch, cfg["heads"], t, cfg["dim"] // cfg["heads"], a.iters, a.warmup)
    print(json.dumps({"model": "vit_%s14_reg4" % a.model, "device": dev, "dtype": a.dtype, "batch": a.batch,
                      "step_ms": round(ms, 4), "params": sum(p.numel() for p in m.parameters()),
                      "attn_ms": round(ab * cfg["depth"], 4), "torch": torch.__version__}), flush=True)


def cmd_attn(a):
    dev = a.device
    if dev == "cpu":
        torch.set_num_threads(a.threads)
    f, fb = attn_ms(dev, a.dtype, a.batch, a.heads, a.tokens, a.dim, a.iters, a.warmup)
    flops = 4.0 * a.batch * a.heads * a.tokens ** 2 * a.dim
    print(json.dumps({"device": dev, "dtype": a.dtype, "batch": a.batch, "heads": a.heads, "tokens": a.tokens,
                      "dim": a.dim, "fwd_ms": round(f, 4), "fwd_bwd_ms": round(fb, 4),
                      "fwd_tflops": round(flops / (f * 1e-3) / 1e12, 2),
                      "fwd_bwd_tflops": round(3.5 * flops / (fb * 1e-3) / 1e12, 2)}), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("step")
    s.add_argument("--model", choices=sorted(CONFIGS), default="s")
    s.add_argument("--image", type=int, default=224)
    s.add_argument("--outputs", type=int, default=1)
    for q in (s, sub.add_parser("attn")):
        q.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
        q.add_argument("--dtype", choices=("fp32", "bf16"), default="bf16")
        q.add_argument("--batch", type=int, default=64)
        q.add_argument("--iters", type=int, default=20)
        q.add_argument("--warmup", type=int, default=5)
        q.add_argument("--threads", type=int, default=2)
    at = sub.choices["attn"]
    at.add_argument("--heads", type=int, default=6)
    at.add_argument("--tokens", type=int, default=261)
    at.add_argument("--dim", type=int, default=64)
    a = p.parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("vit_torch.py: --device cuda but torch sees no CUDA device")
    if a.cmd == "step":
        if a.image % 14:
            sys.exit("vit_torch.py: --image must be a multiple of the patch size 14")
        cmd_step(a)
    else:
        cmd_attn(a)


if __name__ == "__main__":
    main()
