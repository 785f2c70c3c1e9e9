#!/usr/bin/env python3
"""attn_vs_torch.py - the attention micro-benchmark's PyTorch side and table.

  attn_vs_torch.py torch            times F.scaled_dot_product_attention (forward,
                                    and backward of the three inputs) on the
                                    shapes of attn_bench.c; prints its TSV lines
  attn_vs_torch.py table MPS TORCH  the comparison table (markdown); mpsdiag's
                                    lines carry a ninth field, the kernels
                                    (gemm: cuBLAS products, up to 1024 tokens;
                                    tc: tensor cores; simt: CUDA cores)

FLOPs: forward 4 * B * H * T^2 * D (two matrix products), halved when causal;
backward 2.5x the forward (FlashAttention's convention: five products, one
of them recomputing the scores). Peak: BF16_PEAK_TFLOPS (default 989.4, the
H100 SXM's dense bf16 tensor-core peak).
"""
import os
import sys


SHAPES = [(64, 6, 261, 64), (64, 12, 261, 64), (8, 16, 1024, 64), (4, 16, 2048, 64), (2, 16, 4096, 64),
          (4, 16, 2048, 128)]


def torch_side():
    import torch
    import torch.nn.functional as F

    dev = "cuda"
    torch.backends.cuda.matmul.allow_tf32 = False
    for (b, h, t, d) in SHAPES:
        for dt_name, dt in (("bf16", torch.bfloat16), ("fp32", torch.float32)):
            for causal in (0, 1):
                q, k, v = (torch.rand(b, h, t, d, device=dev, dtype=dt).mul_(2).sub_(1).requires_grad_()
                           for _ in range(3))
                do = torch.rand(b, h, t, d, device=dev, dtype=dt)
                for pas in ("fwd", "bwd"):
                    times = []
                    for it in range(13):
                        if pas == "bwd":
                            o = F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
                        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                        s.record()
                        if pas == "fwd":
                            with torch.no_grad():
                                F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
                        else:
                            torch.autograd.grad(o, (q, k, v), do)
                        e.record()
                        torch.cuda.synchronize()
                        if it >= 3:
                            times.append(s.elapsed_time(e))
                    times.sort()
                    print("%d\t%d\t%d\t%d\t%d\t%s\t%s\t%.4f" % (b, h, t, d, causal, dt_name, pas, times[len(times) // 2]),
                          flush=True)


def load(path):
    """{(b, h, t, d, causal, dtype, pass, kernels): ms}; kernels "-" for torch"""
    out = {}
    for line in open(path):
        f = line.rstrip("\n").split("\t")
        if len(f) in (8, 9):
            out[tuple(f[:7]) + (f[8] if len(f) == 9 else "-",)] = float(f[7])
    return out


def table(mps_path, torch_path):
    peak = float(os.environ.get("BF16_PEAK_TFLOPS", "989.4"))
    mps, tor = load(mps_path), load(torch_path)
    print("| B | H | T | D | causal | dtype | pass | kernels | mpsdiag ms | TFLOP/s | of bf16 peak | torch ms | TFLOP/s | of peak | torch / mpsdiag |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for key in sorted(mps, key=lambda k: (int(k[2]), int(k[3]), k[5], k[4], k[6], k[7])):
        b, h, t, d, causal = (int(x) for x in key[:5])
        flops = 4.0 * b * h * t * t * d * (0.5 if causal else 1.0) * (2.5 if key[6] == "bwd" else 1.0)
        m = mps[key]
        tm = tor.get(key[:7] + ("-",))
        mt = flops / (m * 1e-3) / 1e12
        row = [str(b), str(h), str(t), str(d), str(causal), key[5], key[6], key[7], "%.3f" % m, "%.1f" % mt,
               "%.1f%%" % (100 * mt / peak)]
        if tm:
            tt = flops / (tm * 1e-3) / 1e12
            row += ["%.3f" % tm, "%.1f" % tt, "%.1f%%" % (100 * tt / peak), "%.2f" % (tm / m)]
        else:
            row += ["-", "-", "-", "-"]
        print("| " + " | ".join(row) + " |")


if __name__ == "__main__":
    if len(sys.argv) >= 2 and sys.argv[1] == "torch":
        torch_side()
    elif len(sys.argv) == 4 and sys.argv[1] == "table":
        table(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
