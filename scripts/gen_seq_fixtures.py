#!/usr/bin/python3
"""gen_seq_fixtures.py - PyTorch references for the sequence models (test/test_nn_seq_torch.c).

Writes, under test/fixtures/seq/ (default), for each case NAME:
  NAME.torch.safetensors  the module's state dict, PyTorch's names (what md_model_load_weights reads)
  NAME.ref.safetensors    "input.<name>" per input, "R", "output" and "grad.<parameter>" of the
                          scalar loss sum(output * R), every tensor F32

Cases:
  attention, attention_causal  a per-token nn.Linear(6, 8) then nn.MultiheadAttention(8, 2 heads,
                               batch_first) on (2, 5, 6): the `attention` layer's own names
                               (in_proj_weight, out_proj.*), its input gradient through the Linear
  itransformer                 the public iTransformer code's model (AttentionLayer with separate
                               query/key/value projections, kernel-1 Conv1d feed-forward, post-norm
                               encoder layers, final LayerNorm, projector, use_norm, time-feature
                               tokens dropped after the projector), dropout 0: seq_len 16,
                               pred_len 8, 3 variates, 4 time features, d_model 16, d_ff 24,
                               2 heads, 2 layers, batch 2 (the bundled config with these params)

The parameters are PyTorch's initial values plus noise (so that LayerNorm's are not 1 and 0), rounded
to fp32; the forward and backward then run in float64 from those fp32 values, so the fixture is a
more precise answer than an fp32 run. Needs torch only to regenerate; the tests read the files.

Usage: /usr/bin/python3 scripts/gen_seq_fixtures.py [outdir]
"""
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_models import st_write  # noqa: E402

torch.set_num_threads(1)


# ---- the public iTransformer code, as it writes its modules ---------------------------
class FullAttention(nn.Module):
    def __init__(self, mask_flag=False, scale=None, attention_dropout=0.0):
        super().__init__()
        self.scale = scale
        self.dropout = nn.Dropout(attention_dropout)

    def forward(self, queries, keys, values):
        B, L, H, E = queries.shape
        scale = self.scale or 1.0 / math.sqrt(E)
        scores = torch.einsum("blhe,bshe->bhls", queries, keys)
        A = self.dropout(torch.softmax(scale * scores, dim=-1))
        V = torch.einsum("bhls,bshd->blhd", A, values)
        return V.contiguous()


class AttentionLayer(nn.Module):
    def __init__(self, attention, d_model, n_heads):
        super().__init__()
        d_keys = d_values = d_model // n_heads
        self.inner_attention = attention
        self.query_projection = nn.Linear(d_model, d_keys * n_heads)
        self.key_projection = nn.Linear(d_model, d_keys * n_heads)
        self.value_projection = nn.Linear(d_model, d_values * n_heads)
        self.out_projection = nn.Linear(d_values * n_heads, d_model)
        self.n_heads = n_heads

    def forward(self, queries, keys, values):
        B, L, _ = queries.shape
        _, S, _ = keys.shape
        H = self.n_heads
        queries = self.query_projection(queries).view(B, L, H, -1)
        keys = self.key_projection(keys).view(B, S, H, -1)
        values = self.value_projection(values).view(B, S, H, -1)
        out = self.inner_attention(queries, keys, values).view(B, L, -1)
        return self.out_projection(out)


class EncoderLayer(nn.Module):
    def __init__(self, attention, d_model, d_ff, dropout=0.0):
        super().__init__()
        self.attention = attention
        self.conv1 = nn.Conv1d(in_channels=d_model, out_channels=d_ff, kernel_size=1)
        self.conv2 = nn.Conv1d(in_channels=d_ff, out_channels=d_model, kernel_size=1)
        self.norm1 = nn.LayerNorm(d_model)
        self.norm2 = nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.activation = F.gelu

    def forward(self, x):
        new_x = self.attention(x, x, x)
        x = x + self.dropout(new_x)
        y = x = self.norm1(x)
        y = self.dropout(self.activation(self.conv1(y.transpose(-1, 1))))
        y = self.dropout(self.conv2(y).transpose(-1, 1))
        return self.norm2(x + y)


class Encoder(nn.Module):
    def __init__(self, attn_layers, norm_layer):
        super().__init__()
        self.attn_layers = nn.ModuleList(attn_layers)
        self.norm = norm_layer

    def forward(self, x):
        for layer in self.attn_layers:
            x = layer(x)
        return self.norm(x)


class DataEmbeddingInverted(nn.Module):
    def __init__(self, c_in, d_model, dropout=0.0):
        super().__init__()
        self.value_embedding = nn.Linear(c_in, d_model)
        self.dropout = nn.Dropout(p=dropout)

    def forward(self, x, x_mark):
        x = x.permute(0, 2, 1)
        if x_mark is None:
            x = self.value_embedding(x)
        else:
            x = self.value_embedding(torch.cat([x, x_mark.permute(0, 2, 1)], 1))
        return self.dropout(x)


class ITransformer(nn.Module):
    def __init__(self, seq_len, pred_len, d_model, d_ff, n_heads, e_layers, dropout=0.0):
        super().__init__()
        self.pred_len = pred_len
        self.enc_embedding = DataEmbeddingInverted(seq_len, d_model, dropout)
        self.encoder = Encoder([EncoderLayer(AttentionLayer(FullAttention(False, attention_dropout=dropout),
                                                            d_model, n_heads), d_model, d_ff, dropout)
                                for _ in range(e_layers)], norm_layer=nn.LayerNorm(d_model))
        self.projector = nn.Linear(d_model, pred_len, bias=True)

    def forward(self, x_enc, x_mark_enc):
        means = x_enc.mean(1, keepdim=True).detach()
        x_enc = x_enc - means
        stdev = torch.sqrt(torch.var(x_enc, dim=1, keepdim=True, unbiased=False) + 1e-5)
        x_enc = x_enc / stdev
        _, _, N = x_enc.shape
        enc_out = self.enc_embedding(x_enc, x_mark_enc)
        enc_out = self.encoder(enc_out)
        dec_out = self.projector(enc_out).permute(0, 2, 1)[:, :, :N]
        dec_out = dec_out * (stdev[:, 0, :].unsqueeze(1).repeat(1, self.pred_len, 1))
        return dec_out + (means[:, 0, :].unsqueeze(1).repeat(1, self.pred_len, 1))


# ---- the attention layer as nn.MultiheadAttention --------------------------------------
class AttentionBlock(nn.Module):
    def __init__(self, f_in, d, heads, causal):
        super().__init__()
        self.emb = nn.Linear(f_in, d)
        self.attn = nn.MultiheadAttention(d, heads, batch_first=True)
        self.causal = causal

    def forward(self, x):
        z = self.emb(x)
        t = z.shape[1]
        mask = torch.triu(torch.ones(t, t, dtype=torch.bool), 1) if self.causal else None
        return self.attn(z, z, z, attn_mask=mask, need_weights=False)[0]


# ---- fixtures ----------------------------------------------------------------------------
def f32(t):
    return t.detach().float().contiguous()


def perturb(model, g):
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.1 * torch.randn(p.shape, generator=g))
            p.copy_(p.float())  # fp32-representable


def write_case(outdir, name, model, inputs, g):
    """inputs: [(name, fp32 tensor)]; forward and backward in float64."""
    model = model.double()
    xs = [x.double() for _, x in inputs]
    out = model(*xs)
    R = torch.randn(out.shape, generator=g).float()
    (out * R.double()).sum().backward()
    st_write(os.path.join(outdir, name + ".torch.safetensors"), {k: f32(v) for k, v in model.state_dict().items()})
    ref = {"input." + n: f32(x) for n, x in inputs}
    ref["R"] = R
    ref["output"] = f32(out)
    for k, p in model.named_parameters():
        ref["grad." + k] = f32(p.grad)
    st_write(os.path.join(outdir, name + ".ref.safetensors"), ref)
    print(f"{name}: output {tuple(out.shape)}, {sum(p.numel() for p in model.parameters())} parameters")


def main():
    outdir = sys.argv[1] if len(sys.argv) > 1 else os.path.join("test", "fixtures", "seq")
    os.makedirs(outdir, exist_ok=True)
    for name, causal in (("attention", False), ("attention_causal", True)):
        g = torch.Generator().manual_seed(11 + causal)
        torch.manual_seed(21 + causal)
        m = AttentionBlock(6, 8, 2, causal)
        perturb(m, g)
        write_case(outdir, name, m, [("x", torch.randn(2, 5, 6, generator=g))], g)

    g = torch.Generator().manual_seed(31)
    torch.manual_seed(41)
    m = ITransformer(seq_len=16, pred_len=8, d_model=16, d_ff=24, n_heads=2, e_layers=2, dropout=0.0)
    perturb(m, g)
    scale = torch.tensor([1.0, 3.0, 0.5])
    x = torch.randn(2, 16, 3, generator=g) * scale + torch.tensor([0.5, -2.0, 10.0])
    marks = torch.rand(2, 16, 4, generator=g) - 0.5
    write_case(outdir, "itransformer", m, [("x", x), ("marks", marks)], g)


if __name__ == "__main__":
    main()
