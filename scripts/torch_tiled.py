#!/usr/bin/python3
"""torch_tiled.py - the PyTorch reference of configs/models/tiled_two_stream_tiny.json
(test/test_nn_tiles.c; docs/tiles.md).

TwoStreamTiledFiLM: two images (left, right), each cut into a grid of tiles (edges as _make_edges,
bilinear resize with align_corners=False, the batched _tiles_backbone of the speed guide), every tile of
both streams through ONE shared small backbone (conv 3x3 + ReLU + global average pool + linear) in one
batch, the features viewed back per image, the mean over each stream's tiles, FiLM (gamma, beta from
the mean of both streams through linear-ReLU-linear) applied to each stream's mean, concatenated, and a
linear regression head with 3 targets; loss MSE.

Writes, under test/fixtures/tiles/ (default):
  tiled_two_stream.torch.safetensors  the state dict (PyTorch's names = the config's tensor names)
  tiled_two_stream.ref.safetensors    "input.left", "input.right", "target", "output", "loss" and
                                      "grad.<parameter>" for every parameter, F32
The parameters are PyTorch's initial values rounded to fp32; forward and backward run in float64.

Usage: /usr/bin/python3 scripts/torch_tiled.py [outdir]
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_models import st_write  # noqa: E402

torch.set_num_threads(1)


def _make_edges(length, n):
    """Tile i spans [floor(i*L/n), floor((i+1)*L/n)): n non-empty parts covering [0, L)."""
    return [(i * length // n, (i + 1) * length // n) for i in range(n)]


def tiles(x, grid, input_res):
    """The guide's batched _tiles_backbone, up to the backbone: the tiles of x (B, C, H, W) on a
    grid (rows, cols), row-major, each resized to input_res x input_res (bilinear, align_corners=False)."""
    H, W = x.shape[-2:]
    r, c = grid
    out = []
    for rs, re in _make_edges(H, r):
        for cs, ce in _make_edges(W, c):
            xt = x[:, :, rs:re, cs:ce]
            if xt.shape[-2:] != (input_res, input_res):
                xt = F.interpolate(xt, size=(input_res, input_res), mode="bilinear", align_corners=False)
            out.append(xt)
    return out


class Backbone(nn.Module):
    def __init__(self, cin, width, dim):
        super().__init__()
        self.conv = nn.Conv2d(cin, width, 3, padding=1)
        self.fc = nn.Linear(width, dim)

    def forward(self, x):
        return self.fc(F.relu(self.conv(x)).mean(dim=(2, 3)))


class TwoStreamTiledFiLM(nn.Module):
    def __init__(self, cin=3, width=8, dim=6, hidden=8, grid=(2, 2), input_res=5, targets=3):
        super().__init__()
        self.grid, self.input_res, self.dim = grid, input_res, dim
        self.backbone = Backbone(cin, width, dim)
        self.film_fc1 = nn.Linear(dim, hidden)
        self.film_fc2 = nn.Linear(hidden, 2 * dim)
        self.head = nn.Linear(2 * dim, targets)

    def _tiles(self, x):
        return tiles(x, self.grid, self.input_res)

    def forward(self, left, right):
        B = left.shape[0]
        tiles = self._tiles(left) + self._tiles(right)  # both streams: one backbone pass
        n = len(tiles)
        feats = self.backbone(torch.cat(tiles, dim=0))  # (n * B, D)
        feats = feats.view(n, B, -1).permute(1, 0, 2)  # (B, streams * tiles, D)
        k = n // 2
        fl, fr = feats[:, :k].mean(1), feats[:, k:].mean(1)
        cond = self.film_fc2(F.relu(self.film_fc1(feats.mean(1))))
        gamma, beta = cond[:, :self.dim], cond[:, self.dim:]
        yl = fl * (1 + gamma) + beta
        yr = fr * (1 + gamma) + beta
        return self.head(torch.cat([yl, yr], dim=1))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else "test/fixtures/tiles"
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(17)
    model = TwoStreamTiledFiLM()
    sd = {k: v.detach().float().clone() for k, v in model.state_dict().items()}
    st_write(os.path.join(out, "tiled_two_stream.torch.safetensors"), sd)
    model = model.double()
    B = 2
    # 12 x 14: tiles of 6 x 7 resized down to 5 x 5
    left = torch.randn(B, 3, 12, 14).float()
    right = torch.randn(B, 3, 12, 14).float()
    target = torch.randn(B, 3).float()
    y = model(left.double(), right.double())
    loss = F.mse_loss(y, target.double())
    loss.backward()
    ref = {"input.left": left, "input.right": right, "target": target, "output": y.detach().float(),
           "loss": loss.detach().float().reshape(1)}
    for name, p in model.named_parameters():
        ref["grad." + name] = p.grad.detach().float()
    st_write(os.path.join(out, "tiled_two_stream.ref.safetensors"), ref)
    print(f"wrote {out}: loss {loss.item():.6f}, {len(sd)} tensors")


if __name__ == "__main__":
    main()
