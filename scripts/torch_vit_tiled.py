#!/usr/bin/python3
"""torch_vit_tiled.py - the PyTorch twin of configs/models/vit_tiled_two_stream*.json (docs/vit.md,
"Two-stream tiled model"; test/test_nn_vit_tiles.c).

TwoStreamViTTiledFiLM: two images (left, right halves), each cut into a 2 x 2 grid of tiles (edges as
_make_edges, bilinear resize with align_corners=False: the guide's batched _tiles_backbone), all tiles of
both streams through ONE ViT backbone (build_vit of torch_vit.py, num_classes=0, class-token pooling) in
one batch (or one backbone per stream: separate=True), the features viewed back per image, the mean over
each stream's tiles, FiLM (gamma | beta from the mean of both streams through linear-ReLU-linear) on each
stream's mean, concatenated, a linear regression head; loss MSE.

Tensor names: the backbone's timm names (to_mpsdiag) under "backbone." ("backbone_left." /
"backbone_right." when separate), then film_fc1.*, film_fc2.*, head.*.

  torch_vit_tiled.py counts           parameter counts of vit_tiled_two_stream (shared, separate) and the tiny one
  torch_vit_tiled.py fixture [outdir] writes test/fixtures/vit_tiles/ (default):
      vit_tiled_tiny.torch.safetensors  the weights (initial values plus noise, fp32)
      vit_tiled_tiny.ref.safetensors    "input.left", "input.right", "target", "output", "loss" and
                                        "grad.<tensor>" for every parameter, from a float64 run
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_vit import build_vit, count, to_mpsdiag  # noqa: E402
from torch_tiled import tiles  # noqa: E402
from torch_models import f32, fixture_main, perturb, write_fixture  # noqa: E402

# The shipped configs: the backbone's arguments, the tile size and the FiLM MLP's width.
CONFIGS = {
    "vit_tiled_two_stream": dict(backbone=dict(img_size=224, patch_size=14, in_chans=3, embed_dim=384, depth=12,
                                               num_heads=6, reg_tokens=4), film_hidden=192),
    "vit_tiled_two_stream_tiny": dict(backbone=dict(img_size=28, patch_size=7, in_chans=3, embed_dim=32, depth=2,
                                                    num_heads=2, reg_tokens=2), film_hidden=16),
}


class TwoStreamViTTiledFiLM(nn.Module):
    def __init__(self, backbone, film_hidden, grid=(2, 2), targets=3, separate=False):
        super().__init__()
        bb = dict(backbone, num_classes=0, global_pool="token")
        self.grid, self.input_res, self.dim = grid, bb["img_size"], bb["embed_dim"]
        self.separate = separate
        if separate:
            self.backbone_left, self.backbone_right = build_vit(bb), build_vit(bb)
        else:
            self.backbone = build_vit(bb)
        self.film_fc1 = nn.Linear(self.dim, film_hidden)
        self.film_fc2 = nn.Linear(film_hidden, 2 * self.dim)
        self.head = nn.Linear(2 * self.dim, targets)

    def _tiles(self, x):
        return tiles(x, self.grid, self.input_res)

    def _feats(self, backbone, tiles, B):
        n = len(tiles)
        f = backbone(torch.cat(tiles, dim=0))  # (n * B, D), one batch
        return f.view(n, B, -1).permute(1, 0, 2)  # (B, n, D)

    def forward(self, left, right):
        B = left.shape[0]
        if self.separate:
            fl = self._feats(self.backbone_left, self._tiles(left), B)
            fr = self._feats(self.backbone_right, self._tiles(right), B)
            feats = torch.cat([fl, fr], dim=1)
        else:
            tl, tr = self._tiles(left), self._tiles(right)
            feats = self._feats(self.backbone, tl + tr, B)  # both streams: one backbone pass
            fl, fr = feats[:, :len(tl)], feats[:, len(tl):]
        cond = self.film_fc2(F.relu(self.film_fc1(feats.mean(1))))
        gamma, beta = cond[:, :self.dim], cond[:, self.dim:]
        yl = fl.mean(1) * (1 + gamma) + beta
        yr = fr.mean(1) * (1 + gamma) + beta
        return self.head(torch.cat([yl, yr], dim=1))


def mpsdiag_state(sd):
    """state_dict keys -> the config's tensor names (the backbone's through to_mpsdiag under its prefix)."""
    out, groups = {}, {}
    for k, v in sd.items():
        pre, _, rest = k.partition(".")
        if pre.startswith("backbone"):
            groups.setdefault(pre, {})[rest] = v
        else:
            out[k] = v
    for pre, g in groups.items():
        for k, v in to_mpsdiag(g).items():
            out[pre + "." + k] = v
    return out


def counts():
    for name, cfg in CONFIGS.items():
        for sep in (False, True):
            m = TwoStreamViTTiledFiLM(cfg["backbone"], cfg["film_hidden"], separate=sep)
            bb = sum(count(b) for b in ([m.backbone_left, m.backbone_right] if sep else [m.backbone]))
            print(f"{name}{'_separate' if sep else ''} (3 targets): {count(m):,} parameters "
                  f"(backbone {bb:,}, FiLM + head {count(m) - bb:,})")


def fixture(outdir):
    torch.manual_seed(7)
    g = torch.Generator().manual_seed(23)
    cfg = CONFIGS["vit_tiled_two_stream_tiny"]
    m = TwoStreamViTTiledFiLM(cfg["backbone"], cfg["film_hidden"])
    perturb(m, g)
    m = m.double()
    B = 2
    # 3 x 31 x 31 halves: tiles of 15 and 16 pixels a side resized up to 28 x 28 (uneven: a wrong edge shows)
    left = torch.randn(B, 3, 31, 31, generator=g).float()
    right = torch.randn(B, 3, 31, 31, generator=g).float()
    target = torch.randn(B, 3, generator=g).float()
    y = m(left.double(), right.double())
    loss = F.mse_loss(y, target.double())
    loss.backward()
    ref = {"input.left": f32(left), "input.right": f32(right), "target": f32(target), "output": f32(y),
           "loss": f32(loss.reshape(1))}
    write_fixture(outdir, "vit_tiled_tiny", mpsdiag_state(m.state_dict()), ref,
                  mpsdiag_state({k: p.grad for k, p in m.named_parameters()}))
    print(f"vit_tiled_tiny: output {tuple(y.shape)}, loss {loss.item():.6f}, {count(m)} parameters")


if __name__ == "__main__":
    fixture_main(__doc__, fixture, counts, os.path.join("test", "fixtures", "vit_tiles"))
