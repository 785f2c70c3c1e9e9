"""torch_models.py - what the PyTorch scripts share: safetensors reading and
writing (the subset mpsdiag and PyTorch state dicts use; no `safetensors`
package needed) and the models of configs/models built as torch.nn.Modules
with mpsdiag's parameter names, and the writing of the reference fixtures the
tests compare against (weights, outputs, gradients). Imported by
scripts/torch_interop.py, scripts/torch_vit*.py, scripts/torch_tiled.py and
scripts/bench/cpu_step_vs_torch.py."""
import json
import os
import struct
import sys

import torch
from torch import nn
import torch.nn.functional as F


# ---- safetensors, the subset mpsdiag and PyTorch state dicts use ---------------------
DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
          "I64": torch.int64, "I32": torch.int32, "U8": torch.uint8, "BOOL": torch.bool}
NAMES = {v: k for k, v in DTYPES.items()}


def st_read(path):
    """Returns ({name: tensor}, {metadata key: value})."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    meta = header.pop("__metadata__", {})
    data = blob[8 + n:]
    out = {}
    for name, t in header.items():
        b, e = t["data_offsets"]
        x = torch.frombuffer(bytearray(data[b:e]), dtype=DTYPES[t["dtype"]]) if e > b else \
            torch.zeros(0, dtype=DTYPES[t["dtype"]])
        out[name] = x.reshape(t["shape"]).clone()
    return out, meta


def st_write(path, tensors, meta=None):
    """Writes {name: tensor} as safetensors (contiguous little-endian), as the
    reference implementation does: larger elements first, then by name."""
    items = sorted(tensors.items(), key=lambda kv: (-kv[1].element_size(), kv[0]))
    header, chunks, off = {}, [], 0
    for name, t in items:
        raw = t.detach().contiguous().cpu().reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b""
        header[name] = {"dtype": NAMES[t.dtype], "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        chunks.append(raw)
        off += len(raw)
    if meta:
        header["__metadata__"] = meta
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


# ---- PyTorch reference fixtures (weights + outputs and gradients) ------------------------
def f32(t):
    """A tensor as the fixtures store it: fp32, contiguous, detached."""
    return t.detach().float().contiguous()


def perturb(model, g, scale=0.1):
    """Moves every parameter away from its initial value (so that every one matters), keeping
    fp32-representable values."""
    with torch.no_grad():
        for p in model.parameters():
            p.add_(scale * torch.randn(p.shape, generator=g))
            p.copy_(p.float())


def write_fixture(outdir, stem, weights, ref, grads):
    """<outdir>/<stem>.torch.safetensors: the weights; <stem>.ref.safetensors: ref plus
    "grad.<name>" of grads (all fp32 but ref's integer tensors)."""
    os.makedirs(outdir, exist_ok=True)
    st_write(os.path.join(outdir, stem + ".torch.safetensors"), {k: f32(v) for k, v in weights.items()})
    ref = dict(ref)
    for k, v in grads.items():
        ref["grad." + k] = f32(v)
    st_write(os.path.join(outdir, stem + ".ref.safetensors"), ref)


def fixture_main(doc, fixture, counts, default_dir):
    """`script fixture [outdir]` or `script counts`, single-threaded; else the usage (doc)."""
    torch.set_num_threads(1)
    if len(sys.argv) > 1 and sys.argv[1] == "fixture":
        fixture(sys.argv[2] if len(sys.argv) > 2 else default_dir)
    elif len(sys.argv) > 1 and sys.argv[1] == "counts":
        counts()
    else:
        sys.exit(doc)


# ---- the models, as configs/models/*.json build them ---------------------------------
class SmallCNN(nn.Module):
    """configs/models/small_cnn.json."""

    def __init__(self, classes=10, p=0.25):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(32)
        self.conv2 = nn.Conv2d(32, 64, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(64)
        self.fc1 = nn.Linear(64 * 7 * 7, 128)
        self.dropout = nn.Dropout(p)
        self.fc2 = nn.Linear(128, classes)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 2)
        x = F.max_pool2d(F.relu(self.bn2(self.conv2(x))), 2)
        return self.fc2(self.dropout(F.relu(self.fc1(torch.flatten(x, 1)))))


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        y = self.bn2(self.conv2(F.relu(self.bn1(self.conv1(x)))))
        return F.relu(y + (self.downsample(x) if self.downsample is not None else x))


class ResNet18Cifar(nn.Module):
    """configs/models/resnet18_cifar.json (width 64, 100 classes) and
    test/fixtures/interop/resnet18_cifar_w8.json (width 8, 10 classes)."""

    def __init__(self, width=64, classes=100):
        super().__init__()
        w = [width, 2 * width, 4 * width, 8 * width]
        self.conv1 = nn.Conv2d(3, w[0], 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(w[0])
        cin = w[0]
        for i, c in enumerate(w):
            stride = 1 if i == 0 else 2
            setattr(self, "layer%d" % (i + 1), nn.Sequential(BasicBlock(cin, c, stride), BasicBlock(c, c, 1)))
            cin = c
        self.fc = nn.Linear(w[3], classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))
