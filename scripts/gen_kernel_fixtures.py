#!/usr/bin/python3
"""gen_kernel_fixtures.py - small PyTorch-computed cases for the reference kernels.

Writes test/fixtures/kernels/<name>.json, each with the op's parameters and its
tensors (shape + data). Inputs are fp32 values from a seeded generator; PyTorch
computes in float64 (so the fixture is a more precise answer than fp32), and the
results are written with 9 significant digits. test/test_kernels_fixtures.c
runs the reference kernels on the same inputs and compares (fp32, 1e-5).

Needs Debian's python3-torch (apt-get install python3-torch), only to
regenerate; the tests read the committed JSON files. Layouts are PyTorch's
(NCHW, filters KCRS); the C test derives the NHWC cases by permuting.

Usage: /usr/bin/python3 scripts/gen_kernel_fixtures.py [outdir]
"""
import json
import os
import sys

import torch
import torch.nn.functional as F

torch.set_num_threads(1)
G = torch.Generator().manual_seed(1234)


def rand(*shape, lo=-1.0, hi=1.0):
    """fp32-representable uniform values, returned as float64."""
    return (torch.rand(*shape, generator=G, dtype=torch.float32) * (hi - lo) + lo).double()


def tens(t):
    t = t.detach().double()
    return {"shape": list(t.shape), "data": [float("%.9g" % v) for v in t.reshape(-1).tolist()]}


def write(outdir, name, op, params, tensors):
    doc = {"name": name, "op": op, "params": params, "tensors": {k: tens(v) for k, v in tensors.items()}}
    path = os.path.join(outdir, name + ".json")
    with open(path, "w") as f:
        json.dump(doc, f, separators=(",", ":"))
        f.write("\n")
    print("wrote", path, os.path.getsize(path), "bytes")


def conv(outdir, name, n, c, h, w, k, r, s, stride, pad, dil, groups):
    x = rand(n, c, h, w).requires_grad_()
    wt = rand(k, c // groups, r, s).requires_grad_()
    y = F.conv2d(x, wt, None, stride, pad, dil, groups)
    dy = rand(*y.shape)
    y.backward(dy)
    params = {"n": n, "c": c, "h": h, "w": w, "k": k, "r": r, "s": s, "stride": list(stride), "pad": list(pad),
              "dil": list(dil), "groups": groups}
    write(outdir, name, "conv2d", params, {"x": x, "w": wt, "y": y, "dy": dy, "dx": x.grad, "dw": wt.grad})


def batchnorm(outdir, name, n, c, h, w, relu):
    x = rand(n, c, h, w, lo=-2, hi=3).requires_grad_()
    gamma = rand(c, lo=0.5, hi=1.5).requires_grad_()
    beta = rand(c, lo=-0.5, hi=0.5).requires_grad_()
    rm0, rv0 = rand(c, lo=-0.5, hi=0.5), rand(c, lo=0.5, hi=2.0)
    rm, rv = rm0.clone(), rv0.clone()
    y = F.batch_norm(x, rm, rv, gamma, beta, training=True, momentum=0.1, eps=1e-5)
    if relu:
        y = F.relu(y)
    dy = rand(*y.shape)
    y.backward(dy)
    write(outdir, name, "batchnorm", {"n": n, "c": c, "hw": h * w, "momentum": 0.1, "eps": 1e-5, "relu": relu},
          {"x": x, "gamma": gamma, "beta": beta, "running_mean_in": rm0, "running_var_in": rv0, "y": y,
           "running_mean": rm, "running_var": rv, "dy": dy, "dx": x.grad, "dgamma": gamma.grad, "dbeta": beta.grad})


def pool(outdir, name, kind, n, c, h, w, k, stride, pad, cip=True):
    x = rand(n, c, h, w, lo=-2, hi=2).requires_grad_()
    if kind == "max":
        y = F.max_pool2d(x, k, stride, pad)
    else:
        y = F.avg_pool2d(x, k, stride, pad, count_include_pad=cip)
    dy = rand(*y.shape)
    y.backward(dy)
    write(outdir, name, "pool2d", {"kind": kind, "n": n, "c": c, "h": h, "w": w, "k": list(k), "stride": list(stride),
                                   "pad": list(pad), "count_include_pad": cip},
          {"x": x, "y": y, "dy": dy, "dx": x.grad})


def xent(outdir, name, n, classes, smoothing):
    logits = rand(n, classes, lo=-3, hi=3).requires_grad_()
    labels = torch.randint(0, classes, (n,), generator=G)
    loss_sum = F.cross_entropy(logits, labels, reduction="sum", label_smoothing=smoothing)
    loss_mean = F.cross_entropy(logits, labels, reduction="mean", label_smoothing=smoothing)
    loss_mean.backward()  # dlogits of the mean loss: grad_scale = 1/n
    correct = (logits.argmax(dim=1) == labels).sum()
    write(outdir, name, "xent", {"n": n, "classes": classes, "smoothing": smoothing},
          {"logits": logits, "labels": labels, "loss_sum": loss_sum.reshape(1), "dlogits": logits.grad,
           "correct": correct.reshape(1)})


def act(outdir, name, kind, n):
    x = rand(n, lo=-5, hi=5).requires_grad_()
    fn = {"gelu": F.gelu, "gelu_tanh": lambda t: F.gelu(t, approximate="tanh"), "silu": F.silu, "tanh": torch.tanh, "sigmoid": torch.sigmoid,
          "leaky_relu": lambda t: F.leaky_relu(t, 0.1)}[kind]
    y = fn(x)
    dy = rand(n)
    y.backward(dy)
    write(outdir, name, "act", {"act": kind, "n": n, "alpha": 0.1}, {"x": x, "y": y, "dy": dy, "dx": x.grad})


def layernorm(outdir, name, rows, d, affine):
    x = rand(rows, d, lo=-2, hi=3).requires_grad_()
    gamma = rand(d, lo=0.5, hi=1.5).requires_grad_() if affine else None
    beta = rand(d, lo=-0.5, hi=0.5).requires_grad_() if affine else None
    y = F.layer_norm(x, (d,), gamma, beta, eps=1e-5)
    dy = rand(rows, d)
    y.backward(dy)
    mean = x.detach().mean(dim=1)
    rstd = 1.0 / torch.sqrt(x.detach().var(dim=1, unbiased=False) + 1e-5)
    t = {"x": x, "y": y, "mean": mean, "rstd": rstd, "dy": dy, "dx": x.grad}
    if affine:
        t.update({"gamma": gamma, "beta": beta, "dgamma": gamma.grad, "dbeta": beta.grad})
    write(outdir, name, "layernorm", {"rows": rows, "d": d, "eps": 1e-5, "affine": affine}, t)


M64 = (1 << 64) - 1


def rng_uniform(seed, counter):
    """src/core/rng.h md_rng_uniform, in Python's integers."""
    z = (seed * 0x9e3779b97f4a7c15 + counter + 0x632be59bd9b4e019) & M64
    z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M64
    z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M64
    z ^= z >> 31
    return (z >> 40) / 16777216.0


def attention(outdir, name, b, h, tq, tk, d, causal, dropout=0.0, seed=0, offset=0):
    """Scaled-dot-product attention by its definition (torch 1.13 has no
    F.scaled_dot_product_attention); dropout with the project's counter RNG."""
    q = rand(b, h, tq, d, lo=-1.5, hi=1.5).requires_grad_()
    k = rand(b, h, tk, d, lo=-1.5, hi=1.5).requires_grad_()
    v = rand(b, h, tk, d, lo=-1.5, hi=1.5).requires_grad_()
    s = q @ k.transpose(-1, -2) / d ** 0.5
    if causal:
        s = s.masked_fill(torch.ones(tq, tk, dtype=torch.bool).triu(1), float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    p = torch.softmax(s, dim=-1)
    if dropout > 0:
        keep = torch.tensor([[[[0.0 if rng_uniform(seed, offset + ((bi * h + hi) * tq + i) * tk + j) < dropout
                                else 1.0 / (1.0 - dropout) for j in range(tk)] for i in range(tq)]
                              for hi in range(h)] for bi in range(b)], dtype=torch.float64)
        p = p * keep
    o = p @ v
    do = rand(b, h, tq, d)
    o.backward(do)
    write(outdir, name, "attention", {"batch": b, "heads": h, "tq": tq, "tk": tk, "d": d, "causal": causal,
                                      "dropout": dropout, "seed": seed, "offset": offset},
          {"q": q, "k": k, "v": v, "o": o, "lse": lse, "do": do, "dq": q.grad, "dk": k.grad, "dv": v.grad})


def optim(outdir, name, kind, n, steps, **kw):
    p = rand(n).requires_grad_()
    p0 = p.detach().clone()
    grads = [rand(n) for _ in range(steps)]
    opt = torch.optim.AdamW([p], **kw) if kind == "adamw" else torch.optim.SGD([p], **kw)
    for g in grads:
        opt.zero_grad()
        p.grad = g.clone()
        opt.step()
    params = {"kind": kind, "n": n, "steps": steps}
    params.update({k: (list(v) if isinstance(v, tuple) else v) for k, v in kw.items()})
    write(outdir, name, "optim", params, {"params_in": p0, "grads": torch.stack(grads), "params": p})


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "test", "fixtures",
                                                                 "kernels")
    os.makedirs(outdir, exist_ok=True)
    conv(outdir, "conv_groups_stride_dil", 2, 4, 7, 6, 6, 3, 3, (2, 1), (1, 2), (1, 2), 2)
    conv(outdir, "conv_depthwise_stride2", 2, 3, 8, 7, 6, 3, 3, (2, 2), (2, 1), (1, 1), 3)
    conv(outdir, "conv_plain_5x5", 1, 3, 9, 9, 4, 5, 5, (1, 1), (2, 2), (1, 1), 1)
    batchnorm(outdir, "batchnorm_train", 3, 4, 5, 5, False)
    batchnorm(outdir, "batchnorm_train_relu", 2, 3, 4, 3, True)
    pool(outdir, "maxpool_k3s2p1", "max", 2, 3, 9, 8, (3, 3), (2, 2), (1, 1))
    pool(outdir, "avgpool_k3s2p1_cip", "avg", 2, 2, 7, 7, (3, 3), (2, 2), (1, 1), True)
    pool(outdir, "avgpool_k3s2p1_nocip", "avg", 2, 2, 7, 7, (3, 3), (2, 2), (1, 1), False)
    xent(outdir, "xent_smoothing", 6, 10, 0.1)
    xent(outdir, "xent_plain", 5, 7, 0.0)
    for a in ("gelu", "silu", "tanh", "sigmoid", "leaky_relu"):
        act(outdir, "act_" + a, a, 64)
    optim(outdir, "adamw_3steps", "adamw", 50, 3, lr=0.01, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.05)
    optim(outdir, "sgd_nesterov_3steps", "sgd", 50, 3, lr=0.1, momentum=0.9, weight_decay=5e-4, nesterov=True)
    optim(outdir, "sgd_momentum_3steps", "sgd", 50, 3, lr=0.1, momentum=0.9, weight_decay=0.0, nesterov=False)
    # transformer blocks (added last, so the generator stream of the fixtures above is unchanged)
    act(outdir, "act_gelu_tanh", "gelu_tanh", 64)
    layernorm(outdir, "layernorm_affine", 5, 24, True)
    layernorm(outdir, "layernorm_plain", 3, 7, False)
    attention(outdir, "attention_plain", 2, 3, 7, 7, 8, False)
    attention(outdir, "attention_causal", 1, 2, 9, 9, 16, True)
    attention(outdir, "attention_cross_dropout", 2, 2, 5, 11, 4, False, dropout=0.25, seed=7, offset=1000)


if __name__ == "__main__":
    main()
