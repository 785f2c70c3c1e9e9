#!/usr/bin/env python3
"""vit_tiled_torch.py - the PyTorch side of scripts/bench/vit_tiled_vs_torch.sh: the tiled two-stream
model (scripts/torch_vit_tiled.py's TwoStreamViTTiledFiLM with the shipped vit_tiled_two_stream shapes:
2 streams x 2 x 2 tiles of 224 x 224 from 448 x 448 halves, one ViT-S/14 with 4 registers, FiLM, 3
targets), its attention through F.scaled_dot_product_attention (PyTorch's fused kernels), timed as a
training step (forward, MSE loss, backward, AdamW), bf16 autocast on CUDA.

  vit_tiled_torch.py --device cpu|cuda --dtype fp32|bf16 --batch N [--iters 20] [--warmup 5]
                     [--one-by-one] [--threads N]
      one JSON line {"model", "device", "dtype", "batch", "mode", "step_ms", "params", "torch"};
      --one-by-one: every tile through the backbone in its own pass (the unbatched loop the batched
      tiles replace), the rest unchanged.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn.functional as F

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, ".."))
sys.path.insert(0, here)
import torch_vit  # noqa: E402
from torch_vit_tiled import CONFIGS, TwoStreamViTTiledFiLM  # noqa: E402
from vit_torch import timed  # noqa: E402


def sdpa_forward(self, x):
    B, N, C = x.shape
    qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
    q, k, v = qkv.unbind(0)
    o = F.scaled_dot_product_attention(q, k, v)
    return self.proj(o.transpose(1, 2).reshape(B, N, C))


def feats_one_by_one(self, backbone, tiles, B):
    return torch.stack([backbone(t) for t in tiles], dim=1)  # (B, n, D): one pass per tile


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    p.add_argument("--dtype", choices=("fp32", "bf16"), default="bf16")
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--one-by-one", action="store_true")
    p.add_argument("--model", default="vit_tiled_two_stream", choices=sorted(CONFIGS))
    a = p.parse_args()
    dev = a.device
    if dev == "cuda" and not torch.cuda.is_available():
        sys.exit("vit_tiled_torch.py: --device cuda but torch sees no CUDA device")
    if dev == "cpu":
        torch.set_num_threads(a.threads)
    else:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    if hasattr(F, "scaled_dot_product_attention"):
        torch_vit.Attention.forward = sdpa_forward
    if a.one_by_one:
        TwoStreamViTTiledFiLM._feats = feats_one_by_one
    torch.manual_seed(0)
    cfg = CONFIGS[a.model]
    m = TwoStreamViTTiledFiLM(cfg["backbone"], cfg["film_hidden"]).to(dev)
    half = 2 * cfg["backbone"]["img_size"]
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4, weight_decay=0.0)
    left = torch.randn(a.batch, 3, half, half, device=dev)
    right = torch.randn(a.batch, 3, half, half, device=dev)
    y = torch.randn(a.batch, 3, device=dev)
    amp = a.dtype == "bf16"

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=dev, dtype=torch.bfloat16, enabled=amp):
            loss = F.mse_loss(m(left, right).float(), y)
        loss.backward()
        opt.step()

    ms = timed(dev, step, a.iters, a.warmup)
    print(json.dumps({"model": a.model, "device": dev, "dtype": a.dtype, "batch": a.batch,
                      "mode": "one_by_one" if a.one_by_one else "batched", "step_ms": round(ms, 4),
                      "params": sum(q.numel() for q in m.parameters()), "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
