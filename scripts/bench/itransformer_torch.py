#!/usr/bin/env python3
"""itransformer_torch.py - the iTransformer forecaster in PyTorch, for side-by-side comparisons.

The same model, data pipeline and recipe that mpsdiag's configs/models/itransformer.json and its CSV
time-series format implement, written the way the public iTransformer code writes them (inverted
embedding with time-feature tokens, post-norm encoder layers, final LayerNorm, per-window instance
normalisation). Two uses:

  quality:  itransformer_torch.py train --csv FILE [--epochs 10 --batch 32 --lr 1e-4 ...]
            trains with early stopping on the validation split and prints test MSE/MAE (standardised)
            and the naive last-value baseline: what mpsdiag's figures are compared with.
  speed:    itransformer_torch.py bench --csv FILE --device cpu|cuda [--dtype fp32|bf16]
            times the training step (forward, MSE loss, backward, Adam) and prints one JSON line.

Needs only torch and numpy (Debian's python3-torch is enough on the CPU).
"""
import argparse
import json
import math
import re
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


# ---- data: the public forecasting code's splits, scaling and time features --------------------

def read_csv(path):
    with open(path) as f:
        header = f.readline().strip().split(",")
        rows = [line.strip().split(",") for line in f if line.strip()]
    dates = [r[0] for r in rows]
    vals = np.array([[float(x) for x in r[1:]] for r in rows], dtype=np.float32)
    return header[1:], dates, vals


def time_features(dates):
    """'timeF' for hourly data: hour, weekday, day of month, day of year scaled to [-0.5, 0.5]."""
    import datetime
    out = np.zeros((len(dates), 4), dtype=np.float32)
    for i, d in enumerate(dates):
        f = [int(v) for v in re.split(r"[^0-9]+", d.strip()) if v] + [0, 0, 0]
        t = datetime.datetime(f[0], f[1], f[2], f[3], f[4], f[5])
        out[i] = (t.hour / 23.0 - 0.5, t.weekday() / 6.0 - 0.5, (t.day - 1) / 30.0 - 0.5,
                  (t.timetuple().tm_yday - 1) / 365.0 - 0.5)
    return out


def borders(n, seq_len, path):
    if "ETTh" in path:
        b1 = [0, 12 * 30 * 24 - seq_len, 12 * 30 * 24 + 4 * 30 * 24 - seq_len]
        b2 = [12 * 30 * 24, 12 * 30 * 24 + 4 * 30 * 24, 12 * 30 * 24 + 8 * 30 * 24]
    else:
        ntrain, ntest = int(n * 0.7), int(n * 0.2)
        nval = n - ntrain - ntest
        b1 = [0, ntrain - seq_len, n - ntest - seq_len]
        b2 = [ntrain, ntrain + nval, n]
    return b1, b2


class Windows(torch.utils.data.Dataset):
    def __init__(self, x, mark, seq_len, pred_len):
        self.x, self.mark, self.s, self.p = x, mark, seq_len, pred_len

    def __len__(self):
        return len(self.x) - self.s - self.p + 1

    def __getitem__(self, i):
        s, p = self.s, self.p
        return self.x[i:i + s], self.x[i + s:i + s + p], self.mark[i:i + s]


def load(path, seq_len, pred_len):
    _, dates, vals = read_csv(path)
    b1, b2 = borders(len(vals), seq_len, path)
    train = vals[b1[0]:b2[0]]
    mean, std = train.mean(0), train.std(0)
    x = (vals - mean) / std
    mark = time_features(dates)
    splits = []
    for k in range(3):
        splits.append(Windows(torch.from_numpy(x[b1[k]:b2[k]]), torch.from_numpy(mark[b1[k]:b2[k]]),
                              seq_len, pred_len))
    return splits, x.shape[1]


# ---- model ---------------------------------------------------------------------------------------

class EncoderLayer(nn.Module):
    def __init__(self, d_model, d_ff, n_heads, dropout):
        super().__init__()
        self.h = n_heads
        self.q = nn.Linear(d_model, d_model)
        self.k = nn.Linear(d_model, d_model)
        self.v = nn.Linear(d_model, d_model)
        self.o = nn.Linear(d_model, d_model)
        self.ff1 = nn.Linear(d_model, d_ff)
        self.ff2 = nn.Linear(d_ff, d_model)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.drop = nn.Dropout(dropout)
        self.p = dropout

    def forward(self, x):
        b, t, d = x.shape
        h = self.h
        q = self.q(x).view(b, t, h, d // h).transpose(1, 2)
        k = self.k(x).view(b, t, h, d // h).transpose(1, 2)
        v = self.v(x).view(b, t, h, d // h).transpose(1, 2)
        s = (q @ k.transpose(-1, -2)) / math.sqrt(d // h)
        a = F.dropout(torch.softmax(s, -1), self.p, self.training)
        y = (a @ v).transpose(1, 2).reshape(b, t, d)
        x = self.norm1(x + self.drop(self.o(y)))
        y = self.drop(self.ff2(self.drop(F.gelu(self.ff1(x)))))
        return self.norm2(x + y)


class ITransformer(nn.Module):
    def __init__(self, seq_len, pred_len, d_model, d_ff, n_heads, e_layers, dropout, marks=True, center="mean"):
        super().__init__()
        self.pred_len, self.marks, self.center = pred_len, marks, center
        self.embed = nn.Linear(seq_len, d_model)
        self.drop = nn.Dropout(dropout)
        self.layers = nn.ModuleList([EncoderLayer(d_model, d_ff, n_heads, dropout) for _ in range(e_layers)])
        self.norm = nn.LayerNorm(d_model)
        self.proj = nn.Linear(d_model, pred_len)

    def forward(self, x, mark):
        n = x.shape[2]
        mean = x.mean(1, keepdim=True).detach()
        std = torch.sqrt(torch.var(x - mean, dim=1, keepdim=True, unbiased=False) + 1e-5)
        if self.center == "last":  # centre on the last observed value: an all-zero output is the naive forecast
            mean = x[:, -1:, :].detach()
        x = (x - mean) / std
        tok = x.permute(0, 2, 1)
        if self.marks:
            tok = torch.cat([tok, mark.permute(0, 2, 1)], 1)
        z = self.drop(self.embed(tok))
        for layer in self.layers:
            z = layer(z)
        z = self.norm(z)
        y = self.proj(z).permute(0, 2, 1)[:, :, :n]
        return y * std + mean


# ---- quality -------------------------------------------------------------------------------------

def evaluate(model, ds, batch, dev):
    model.eval()
    se = ae = cnt = 0.0
    with torch.no_grad():
        for x, y, m in torch.utils.data.DataLoader(ds, batch_size=batch):
            p = model(x.to(dev), m.to(dev)).cpu()
            se += float(((p - y) ** 2).sum())
            ae += float((p - y).abs().sum())
            cnt += y.numel()
    model.train()
    return se / cnt, ae / cnt


def naive(ds):
    se = ae = cnt = 0.0
    for x, y, _ in torch.utils.data.DataLoader(ds, batch_size=256):
        p = x[:, -1:, :].expand_as(y)
        se += float(((p - y) ** 2).sum())
        ae += float((p - y).abs().sum())
        cnt += y.numel()
    return se / cnt, ae / cnt


def cmd_train(a):
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    (tr, va, te), n = load(a.csv, a.seq_len, a.pred_len)
    dev = torch.device(a.device)
    model = ITransformer(a.seq_len, a.pred_len, a.d_model, a.d_ff, a.n_heads, a.e_layers, a.dropout,
                         center=a.center).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    best, bad, best_state = float("inf"), 0, None
    t0 = time.time()
    for ep in range(a.epochs):
        for g in opt.param_groups:  # the public code's 'type1': halve every epoch
            g["lr"] = a.lr * 0.5 ** ep
        for x, y, m in torch.utils.data.DataLoader(tr, batch_size=a.batch, shuffle=True, drop_last=False):
            opt.zero_grad()
            loss = F.mse_loss(model(x.to(dev), m.to(dev)), y.to(dev))
            loss.backward()
            opt.step()
        vm, _ = evaluate(model, va, a.batch, dev)
        tm, ta = evaluate(model, te, a.batch, dev)
        print(f"epoch {ep + 1}: val mse {vm:.4f}  test mse {tm:.4f} mae {ta:.4f}  ({time.time() - t0:.1f} s)",
              file=sys.stderr)
        if vm < best:
            best, bad = vm, 0
            best_state = {k: v.clone() for k, v in model.state_dict().items()}
        else:
            bad += 1
            if bad >= a.patience:
                break
    model.load_state_dict(best_state)
    tm, ta = evaluate(model, te, a.batch, dev)
    nm, na = naive(te)
    print(json.dumps({"csv": a.csv, "test_mse": round(tm, 4), "test_mae": round(ta, 4),
                      "naive_mse": round(nm, 4), "naive_mae": round(na, 4), "variates": n,
                      "seconds": round(time.time() - t0, 1)}))


# ---- speed ---------------------------------------------------------------------------------------

def cmd_bench(a):
    torch.manual_seed(a.seed)
    torch.set_num_threads(a.threads)
    (tr, _, _), n = load(a.csv, a.seq_len, a.pred_len)
    dev = torch.device(a.device)
    model = ITransformer(a.seq_len, a.pred_len, a.d_model, a.d_ff, a.n_heads, a.e_layers, a.dropout,
                         center=a.center).to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    x, y, m = next(iter(torch.utils.data.DataLoader(tr, batch_size=a.batch, shuffle=True)))
    x, y, m = x.to(dev), y.to(dev), m.to(dev)
    amp = a.dtype == "bf16"

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16, enabled=amp):
            loss = F.mse_loss(model(x, m), y)
        loss.backward()
        opt.step()

    for _ in range(a.warmup):
        step()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(a.iters):
        step()
    if dev.type == "cuda":
        torch.cuda.synchronize()
    ms = (time.perf_counter() - t) / a.iters * 1e3
    print(json.dumps({"impl": "pytorch", "torch": torch.__version__, "device": a.device, "dtype": a.dtype,
                      "batch": a.batch, "variates": n, "step_ms": round(ms, 3),
                      "samples_per_s": round(a.batch / ms * 1e3, 1)}))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("cmd", choices=["train", "bench"])
    p.add_argument("--csv", required=True)
    p.add_argument("--device", default="cpu")
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--seq-len", dest="seq_len", type=int, default=96)
    p.add_argument("--pred-len", dest="pred_len", type=int, default=96)
    p.add_argument("--d-model", dest="d_model", type=int, default=128)
    p.add_argument("--d-ff", dest="d_ff", type=int, default=128)
    p.add_argument("--n-heads", dest="n_heads", type=int, default=8)
    p.add_argument("--e-layers", dest="e_layers", type=int, default=2)
    p.add_argument("--dropout", type=float, default=0.1)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--lr", type=float, default=1e-4)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--patience", type=int, default=3)
    p.add_argument("--seed", type=int, default=2021)
    p.add_argument("--center", choices=["mean", "last"], default="mean",
                   help="instance normalisation: subtract the window mean (public code) or the last value")
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    a = p.parse_args()
    (cmd_train if a.cmd == "train" else cmd_bench)(a)


if __name__ == "__main__":
    main()
