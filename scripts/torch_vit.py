#!/usr/bin/python3
"""torch_vit.py - a plain-PyTorch ViT written like timm's VisionTransformer, for mpsdiag's ViT configs.

The settings of timm's DINOv2-with-registers models (vit_small_patch14_reg4_dinov2,
vit_base_patch14_reg4_dinov2): class token and register tokens, no_embed_class=True (pos_embed
(1, N, D) is added to the patch tokens only, then [cls, reg_0..reg_{R-1}] are put in front),
pre-norm blocks with LayerScale, qkv bias, LayerNorm eps 1e-6, exact GELU, MLP ratio 4; pooling
'token' (class token), 'avg' (mean of the patch tokens, prefix tokens skipped) or 'both'
(concat of the two). The final norm is applied before pooling in every mode (timm's fc_norm=False).
state_dict keys equal timm's (patch_embed.proj.*, cls_token, reg_token, pos_embed, blocks.i.norm1.*,
blocks.i.attn.qkv.*, blocks.i.attn.proj.*, blocks.i.ls1.gamma, blocks.i.norm2.*, blocks.i.mlp.fc1.*,
blocks.i.mlp.fc2.*, blocks.i.ls2.gamma, norm.*, head.*); to_mpsdiag(state_dict) gives mpsdiag's names
(pos_embed.weight (N, D), tokens.cls_token, tokens.reg_token). Other scripts import build_vit(cfg).

Usage:
  /usr/bin/python3 scripts/torch_vit.py counts            parameter counts of the shipped configs
  /usr/bin/python3 scripts/torch_vit.py fixture [outdir]  test/fixtures/vit (vit_tiny: inputs, weights,
                                                          output, loss, every parameter gradient)
"""
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

# The shipped configs (configs/models/vit_*.json), num_classes 0 = no head (timm's num_classes=0).
CONFIGS = {
    "vit_tiny": dict(img_size=28, patch_size=7, in_chans=1, embed_dim=32, depth=2, num_heads=2, reg_tokens=2,
                     num_classes=10, global_pool="token"),
    "vit_s14_reg4": dict(img_size=224, patch_size=14, in_chans=3, embed_dim=384, depth=12, num_heads=6,
                         reg_tokens=4, num_classes=0, global_pool="token"),
    "vit_b14_reg4": dict(img_size=224, patch_size=14, in_chans=3, embed_dim=768, depth=12, num_heads=12,
                         reg_tokens=4, num_classes=0, global_pool="token"),
}


class PatchEmbed(nn.Module):
    def __init__(self, patch_size, in_chans, embed_dim):
        super().__init__()
        self.proj = nn.Conv2d(in_chans, embed_dim, patch_size, stride=patch_size)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)  # (B, N, D), patches row-major


class Attention(nn.Module):
    def __init__(self, dim, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.scale = (dim // num_heads) ** -0.5
        self.qkv = nn.Linear(dim, dim * 3, bias=True)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        a = ((q * self.scale) @ k.transpose(-2, -1)).softmax(dim=-1)
        return self.proj((a @ v).transpose(1, 2).reshape(B, N, C))


class LayerScale(nn.Module):
    def __init__(self, dim, init_values=1e-5):
        super().__init__()
        self.gamma = nn.Parameter(init_values * torch.ones(dim))

    def forward(self, x):
        return x * self.gamma


class Mlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, dim, num_heads, mlp_ratio=4.0, init_values=1e-5):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, num_heads)
        self.ls1 = LayerScale(dim, init_values)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, int(dim * mlp_ratio))
        self.ls2 = LayerScale(dim, init_values)

    def forward(self, x):
        x = x + self.ls1(self.attn(self.norm1(x)))
        return x + self.ls2(self.mlp(self.norm2(x)))


class VisionTransformer(nn.Module):
    def __init__(self, img_size=224, patch_size=14, in_chans=3, embed_dim=384, depth=12, num_heads=6,
                 reg_tokens=4, num_classes=0, global_pool="token", init_values=1e-5):
        super().__init__()
        assert global_pool in ("token", "avg", "both")
        self.global_pool = global_pool
        self.num_prefix_tokens = 1 + reg_tokens
        self.patch_embed = PatchEmbed(patch_size, in_chans, embed_dim)
        n = (img_size // patch_size) ** 2
        self.cls_token = nn.Parameter(1e-6 * torch.randn(1, 1, embed_dim))
        self.reg_token = nn.Parameter(1e-6 * torch.randn(1, reg_tokens, embed_dim)) if reg_tokens else None
        self.pos_embed = nn.Parameter(0.02 * torch.randn(1, n, embed_dim))  # no_embed_class=True
        self.blocks = nn.Sequential(*[Block(embed_dim, num_heads, 4.0, init_values) for _ in range(depth)])
        self.norm = nn.LayerNorm(embed_dim, eps=1e-6)
        feat = 2 * embed_dim if global_pool == "both" else embed_dim
        self.head = nn.Linear(feat, num_classes) if num_classes > 0 else nn.Identity()

    def _pos_embed(self, x):
        x = x + self.pos_embed
        pre = [self.cls_token.expand(x.shape[0], -1, -1)]
        if self.reg_token is not None:
            pre.append(self.reg_token.expand(x.shape[0], -1, -1))
        return torch.cat(pre + [x], dim=1)

    def forward_features(self, x):
        return self.norm(self.blocks(self._pos_embed(self.patch_embed(x))))

    def pool(self, x):
        cls, avg = x[:, 0], x[:, self.num_prefix_tokens:].mean(dim=1)
        return cls if self.global_pool == "token" else avg if self.global_pool == "avg" else torch.cat([cls, avg], 1)

    def forward(self, x):
        return self.head(self.pool(self.forward_features(x)))


def build_vit(cfg):
    """cfg: a dict of VisionTransformer's arguments, or a name in CONFIGS."""
    return VisionTransformer(**(CONFIGS[cfg] if isinstance(cfg, str) else cfg))


def to_mpsdiag(sd):
    """timm's state_dict keys -> mpsdiag's (md_model_load_weights)."""
    out = {}
    for k, v in sd.items():
        if k == "pos_embed":
            out["pos_embed.weight"] = v.reshape(v.shape[1], v.shape[2])
        elif k in ("cls_token", "reg_token"):
            out["tokens." + k] = v
        else:
            out[k] = v
    return out


def count(model):
    return sum(p.numel() for p in model.parameters())


def counts():
    for name in CONFIGS:
        m = build_vit(name)
        head = sum(p.numel() for p in m.head.parameters())
        print(f"{name}: {count(m):,} parameters ({count(m) - head:,} without the head)")


def fixture(outdir):
    from torch_models import f32, perturb, write_fixture

    torch.manual_seed(5)
    g = torch.Generator().manual_seed(17)
    m = build_vit("vit_tiny")
    perturb(m, g)
    m = m.double()
    B = 2
    x = torch.randn(B, 1, 28, 28, generator=g).float()
    labels = torch.tensor([3, 7])
    out = m(x.double())
    loss = F.cross_entropy(out, labels)
    R = torch.autograd.grad(loss, out, retain_graph=True)[0]
    loss.backward()
    ref = {"input.image": f32(x), "labels": labels.int(), "output": f32(out), "loss": f32(loss.reshape(1)),
           "R": f32(R)}
    write_fixture(outdir, "vit_tiny", to_mpsdiag(m.state_dict()), ref,
                  to_mpsdiag({k: p.grad for k, p in m.named_parameters()}))
    print(f"vit_tiny: output {tuple(out.shape)}, loss {loss.item():.6f}, {count(m)} parameters")


if __name__ == "__main__":
    from torch_models import fixture_main

    fixture_main(__doc__, fixture, counts, os.path.join("test", "fixtures", "vit"))
