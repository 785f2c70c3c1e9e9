#!/usr/bin/python3
"""gen_transfer_fixtures.py - weights in the public namings for the transfer-learning tests.

Builds a small timm-style vision transformer in PyTorch (no downloads), made only of what
mpsdiag's layers do today (a linear "patch embedding" over rows, a learned position embedding,
pre-norm blocks with fused qkv attention and a GELU MLP, a final norm, mean pooling, a head),
named like timm's VisionTransformer, and writes under test/fixtures/transfer/:

  tiny.json, tiny36.json, tiny_c4.json   mpsdiag model configs (16 tokens / 36 tokens / 4 classes)
  tiny.timm.safetensors                  the state dict in timm's naming (pos_embed (1, N, D))
  tiny.hf.safetensors                    the same weights in Hugging Face Dinov2's naming (q/k/v
                                         split, position_embeddings (1, 1 + N, D) whose row 0 is a
                                         class-token position, extra mask_token, cls_token and
                                         layer_scale tensors the tiny model has no place for)
  tiny.ours.safetensors                  mpsdiag's own names (in_proj_weight, pos_embed.weight (N, D))
  tiny.badshape.safetensors              timm naming, blocks.1.mlp.fc1.weight with a wrong shape
  tiny36.pos.safetensors                 pos_embed resized to the 6 x 6 grid by F.interpolate
  pos_resize.safetensors                 F.interpolate(mode="bicubic", align_corners=False) cases
  vit_tiny.timm.safetensors              configs/models/vit_tiny.json's model (scripts/torch_vit.py) in
  vit_tiny.hf.safetensors                timm's and Hugging Face Dinov2WithRegisters' naming
  vit_tiny.expect.safetensors            its PyTorch output on a fixed input; pos_embed resized to
                                         6 x 6 (img_size 42) and that model's output

The real ViT (configs/models/vit_tiny.json, scripts/torch_vit.py's module) is written by
vit_tiny_fixtures(): its timm state dict, the same through to_hf() (patch_embed.proj convolution,
cls_token, reg_token, ls1/ls2.gamma), and the module's outputs to compare against.

Usage: /usr/bin/python3 scripts/gen_transfer_fixtures.py [outdir]
"""
import json
import os
import struct
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.set_num_threads(1)


def write_safetensors(path, tensors, meta=None):
    """tensors: name -> torch tensor (written F32, row-major, in insertion order)."""
    header, blobs, off = {}, [], 0
    for name, t in tensors.items():
        b = t.detach().to(torch.float32).contiguous().numpy().tobytes()
        header[name] = {"dtype": "F32", "shape": list(t.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    if meta:
        header["__metadata__"] = meta
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(h)))
        f.write(h)
        for b in blobs:
            f.write(b)
    print("wrote", path, os.path.getsize(path), "bytes")


# ---- the tiny model: timm's VisionTransformer names ------------------------------------------

class Attention(nn.Module):
    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)


class Mlp(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.fc2 = nn.Linear(hidden, d)


class Block(nn.Module):
    def __init__(self, d, heads, hidden):
        super().__init__()
        self.norm1 = nn.LayerNorm(d, eps=1e-6)
        self.attn = Attention(d, heads)
        self.norm2 = nn.LayerNorm(d, eps=1e-6)
        self.mlp = Mlp(d, hidden)


class PatchRows(nn.Module):
    def __init__(self, fin, d):
        super().__init__()
        self.proj = nn.Linear(fin, d)


class TinyViT(nn.Module):
    def __init__(self, tokens=16, fin=8, d=16, depth=2, heads=2, hidden=32, classes=10):
        super().__init__()
        self.patch_embed = PatchRows(fin, d)
        self.pos_embed = nn.Parameter(torch.randn(1, tokens, d) * 0.5)
        self.blocks = nn.ModuleList([Block(d, heads, hidden) for _ in range(depth)])
        self.norm = nn.LayerNorm(d, eps=1e-6)
        self.head = nn.Linear(d, classes)
        with torch.no_grad():  # LayerNorm's ones/zeros would hide a swapped weight and bias
            for n, p in self.named_parameters():
                if n.endswith("norm1.weight") or n.endswith("norm2.weight") or n == "norm.weight":
                    p.copy_(1 + 0.1 * torch.randn_like(p))
                elif n.endswith(".bias"):
                    p.copy_(0.1 * torch.randn_like(p))


def tiny_config(name, tokens, classes):
    """The mpsdiag config of TinyViT: tensor names as timm's (attention's as PyTorch's MHA today)."""
    return {
        "name": name,
        "description": "Transfer-learning test model: a tiny ViT over image rows as tokens, timm-style names",
        "num_classes": classes,
        "inputs": [{"name": "image", "shape": [1, tokens, 8]}],
        "blocks": {"vit_block": {"params": {}, "layers": [
            {"name": "norm1", "type": "layernorm", "eps": 1e-6, "inputs": ["in"]},
            {"name": "attn", "type": "attention", "heads": 2},
            {"name": "add1", "type": "add", "inputs": ["in", "attn"]},
            {"name": "norm2", "type": "layernorm", "eps": 1e-6},
            {"name": "mlp.fc1", "type": "linear", "out": 32},
            {"name": "act", "type": "gelu"},
            {"name": "mlp.fc2", "type": "linear", "out": 16},
            {"name": "add2", "type": "add", "inputs": ["add1", "mlp.fc2"]}]}},
        "layers": [
            {"name": "rows", "type": "reshape", "shape": [tokens, 8], "inputs": ["image"]},
            {"name": "patch_embed.proj", "type": "linear", "out": 16},
            {"name": "pos_embed", "type": "pos_embedding"},
            {"name": "blocks", "type": "vit_block", "repeat": 2},
            {"name": "norm", "type": "layernorm", "eps": 1e-6},
            {"name": "features_first", "type": "transpose"},
            {"name": "pool", "type": "global_avgpool"},
            {"name": "head", "type": "linear", "out": classes}]}


# ---- namings -----------------------------------------------------------------------------------

def to_timm(sd):
    return dict(sd)


def to_ours(sd):
    """mpsdiag's names today: attention as torch.nn.MultiheadAttention, pos_embed.weight (N, D)."""
    out = {}
    for k, v in sd.items():
        if k == "pos_embed":
            out["pos_embed.weight"] = v[0]
            continue
        k = k.replace(".attn.qkv.weight", ".attn.in_proj_weight").replace(".attn.qkv.bias", ".attn.in_proj_bias")
        k = k.replace(".attn.proj.", ".attn.out_proj.")
        if k in ("cls_token", "reg_token"):
            k = "tokens." + k
        out[k] = v
    return out


def to_hf(sd, cls_pos):
    """Hugging Face Dinov2(WithRegisters)Model's names. position_embeddings gets cls_pos as row 0
    (HF adds it to the class token; mpsdiag folds it into tokens.cls_token); a model without a
    class token still gets HF's cls_token and mask_token, which the loader must skip."""
    d = sd["norm.weight"].shape[0]
    g = torch.Generator().manual_seed(7)
    out = {}
    out["embeddings.cls_token"] = sd.get("cls_token", torch.randn(1, 1, d, generator=g))
    out["embeddings.mask_token"] = torch.randn(1, d, generator=g)
    if "reg_token" in sd:
        out["embeddings.register_tokens"] = sd["reg_token"]
    out["embeddings.position_embeddings"] = torch.cat([cls_pos.reshape(1, 1, d), sd["pos_embed"]], 1)
    out["embeddings.patch_embeddings.projection.weight"] = sd["patch_embed.proj.weight"]
    out["embeddings.patch_embeddings.projection.bias"] = sd["patch_embed.proj.bias"]
    i = 0
    while "blocks.%d.norm1.weight" % i in sd:
        b, h = "blocks.%d." % i, "encoder.layer.%d." % i
        for s in ("weight", "bias"):
            out[h + "norm1." + s] = sd[b + "norm1." + s]
            q, k, v = sd[b + "attn.qkv." + s].chunk(3, 0)
            out[h + "attention.attention.query." + s] = q
            out[h + "attention.attention.key." + s] = k
            out[h + "attention.attention.value." + s] = v
            out[h + "attention.output.dense." + s] = sd[b + "attn.proj." + s]
            out[h + "norm2." + s] = sd[b + "norm2." + s]
            out[h + "mlp.fc1." + s] = sd[b + "mlp.fc1." + s]
            out[h + "mlp.fc2." + s] = sd[b + "mlp.fc2." + s]
        out[h + "layer_scale1.lambda1"] = sd.get(b + "ls1.gamma", torch.full((d,), 1e-5))
        out[h + "layer_scale2.lambda1"] = sd.get(b + "ls2.gamma", torch.full((d,), 1e-5))
        i += 1
    out["layernorm.weight"] = sd["norm.weight"]
    out["layernorm.bias"] = sd["norm.bias"]
    if "head.weight" in sd:
        out["classifier.weight"] = sd["head.weight"]
        out["classifier.bias"] = sd["head.bias"]
    return out


def resize_pos(pos, gh, gw, oh, ow):
    """(1, gh*gw, D) -> (1, oh*ow, D) as timm's resample_abs_pos_embed (size=, not scale_factor=)."""
    d = pos.shape[-1]
    x = pos.reshape(1, gh, gw, d).permute(0, 3, 1, 2).double()
    y = F.interpolate(x, size=(oh, ow), mode="bicubic", align_corners=False)
    return y.permute(0, 2, 3, 1).reshape(1, oh * ow, d).float()


# ---- the real ViT (configs/models/vit_tiny.json) -------------------------------------------------

def vit_to_hf(sd, cls_pos, prefix=""):
    """timm's names of scripts/torch_vit.py's model -> HF Dinov2WithRegistersModel's. HF adds
    position row 0 to the class token: the file's cls_token is ours minus cls_pos, so that the
    loaded model (cls_token + row 0) computes what the timm module does."""
    out = to_hf(sd, cls_pos)
    out["embeddings.cls_token"] = sd["cls_token"] - cls_pos.reshape(1, 1, -1)
    head = {k: out.pop(k) for k in ("classifier.weight", "classifier.bias")}
    out = {prefix + k: v for k, v in out.items()}
    out.update(head)  # the classification wrappers keep the classifier at the top level
    return out


def vit_tiny_fixtures(outdir):
    """vit_tiny.timm / vit_tiny.hf .safetensors: one set of weights in both namings, and
    vit_tiny.expect.safetensors: the PyTorch module's output on a fixed input, the position
    embedding resized to a 6 x 6 grid (img_size 42) and that model's output."""
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from torch_vit import build_vit

    torch.manual_seed(11)
    g = torch.Generator().manual_seed(23)
    m = build_vit("vit_tiny")
    with torch.no_grad():  # away from the initial values (LayerScale 1e-5 would hide the blocks)
        for p in m.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g))
    m = m.double().eval()
    sd = {k: v.detach().float().clone() for k, v in m.state_dict().items()}
    m.load_state_dict({k: v.double() for k, v in sd.items()})  # the fp32 values the files hold
    d = sd["norm.weight"].shape[0]
    cls_pos = torch.randn(d, generator=g)
    write_safetensors(os.path.join(outdir, "vit_tiny.timm.safetensors"), sd)
    write_safetensors(os.path.join(outdir, "vit_tiny.hf.safetensors"), vit_to_hf(sd, cls_pos))
    x = torch.randn(2, 1, 28, 28, generator=g)
    expect = {"input.image": x, "output": m(x.double()).float()}
    # another grid: img_size 42 (6 x 6 patches of 7), pos_embed resized as timm does
    m42 = build_vit(dict(img_size=42, patch_size=7, in_chans=1, embed_dim=32, depth=2, num_heads=2,
                         reg_tokens=2, num_classes=10, global_pool="token")).double().eval()
    sd42 = {k: v.double() for k, v in sd.items()}
    sd42["pos_embed"] = resize_pos(sd["pos_embed"], 4, 4, 6, 6).double()
    m42.load_state_dict(sd42)
    x42 = torch.randn(2, 1, 42, 42, generator=g)
    expect.update({"resized.pos_embed": sd42["pos_embed"][0].float(), "input42.image": x42,
                   "output42": m42(x42.double()).float()})
    write_safetensors(os.path.join(outdir, "vit_tiny.expect.safetensors"), expect)


MODELS = {
    # name: (builder, configs {file: (tokens, classes)})
    "tiny": (lambda: TinyViT(), {"tiny": (16, 10), "tiny36": (36, 10), "tiny_c4": (16, 4)}),
}


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join("test", "fixtures", "transfer")
    os.makedirs(outdir, exist_ok=True)
    for name, (build, configs) in MODELS.items():
        torch.manual_seed(1234)
        model = build()
        sd = {k: v.detach().clone() for k, v in model.state_dict().items()}
        for cfg, (tokens, classes) in configs.items():
            with open(os.path.join(outdir, cfg + ".json"), "w") as f:
                json.dump(tiny_config(cfg, tokens, classes), f, indent=1)
                f.write("\n")
        d = sd["norm.weight"].shape[0]
        cls_pos = torch.randn(d, generator=torch.Generator().manual_seed(3))
        write_safetensors(os.path.join(outdir, name + ".timm.safetensors"), to_timm(sd))
        write_safetensors(os.path.join(outdir, name + ".hf.safetensors"), to_hf(sd, cls_pos))
        write_safetensors(os.path.join(outdir, name + ".ours.safetensors"), to_ours(sd))
        bad = to_timm(sd)
        bad["blocks.1.mlp.fc1.weight"] = torch.zeros(24, d)
        write_safetensors(os.path.join(outdir, name + ".badshape.safetensors"), bad)
        n = sd["pos_embed"].shape[1]
        g = int(round(n ** 0.5))
        write_safetensors(os.path.join(outdir, name + "36.pos.safetensors"),
                          {"pos_embed.weight": resize_pos(sd["pos_embed"], g, g, 6, 6)[0]})
    # the resize function alone: up, down, non-square, with D > 1
    gen = torch.Generator().manual_seed(5)
    cases = {}
    for i, (gh, gw, oh, ow, d) in enumerate([(4, 4, 6, 6, 3), (6, 6, 3, 3, 2), (3, 5, 7, 4, 2), (2, 2, 5, 5, 1)]):
        src = torch.randn(1, gh * gw, d, generator=gen)
        cases["case%d.src" % i] = src[0]
        cases["case%d.dst" % i] = resize_pos(src, gh, gw, oh, ow)[0]
        cases["case%d.grid" % i] = torch.tensor([gh, gw, oh, ow], dtype=torch.float32)
    write_safetensors(os.path.join(outdir, "pos_resize.safetensors"), cases)
    with torch.no_grad():
        vit_tiny_fixtures(outdir)


if __name__ == "__main__":
    main()
