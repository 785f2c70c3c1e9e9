/* norm.metal - per-channel and whole-tensor reductions: batch norm (fp32
 * statistics for every storage type, which is what keeps fp16 training with
 * BatchNorm stable), bias gradient, global average pooling, the two-pass sum,
 * and the fused softmax cross-entropy.
 *
 * Per-channel kernels: one threadgroup of MD_MTL_RED_THREADS threads per
 * channel (grid x = c), each thread striding over the n*hw elements. All
 * sums run in a fixed order, so results do not depend on scheduling.
 */
#include "md_metal_common.h"

/* Offset of element j (of n*hw) of channel c. */
inline int md_mtl_ch_idx(int nhwc, int C, int hw, int c, int j)
{
    int ni = j / hw, i = j % hw;
    return nhwc ? (ni * hw + i) * C + c : (ni * C + c) * hw + i;
}

/* ---- batch norm -------------------------------------------------------------- */
template <int DT>
[[kernel]] void md_mtl_bn_fwd(MD_KARGS, constant md_mtl_bn_params &p [[buffer(0)]],
                              device const typename md_dt<DT>::S *x [[buffer(1)]],
                              device typename md_dt<DT>::S *y [[buffer(2)]],
                              device const float *gamma [[buffer(3)]],
                              device const float *betap [[buffer(4)]],
                              device float *rmean [[buffer(5)]],
                              device float *rvar [[buffer(6)]],
                              device float *smean [[buffer(7)]],
                              device float *sinv [[buffer(8)]])
{
    const int c = int(tgid.x), m = p.n * p.hw;
    const uint t = lid.x, nt = tgsz.x;
    float mean, invstd;
    if (p.training) {
        float s = 0.0f;
        for (int j = int(t); j < m; j += int(nt)) s += md_dt<DT>::ld(x[md_mtl_ch_idx(p.nhwc, p.c, p.hw, c, j)]);
        mean = md_mtl_tg_sum(s, tg, t, nt) / float(m);
        float v = 0.0f;
        for (int j = int(t); j < m; j += int(nt)) {
            float d = md_dt<DT>::ld(x[md_mtl_ch_idx(p.nhwc, p.c, p.hw, c, j)]) - mean;
            v += d * d;
        }
        float var = md_mtl_tg_sum(v, tg, t, nt) / float(m);
        invstd = 1.0f / sqrt(var + p.eps);
        if (t == 0) {
            if (p.has_smean) smean[c] = mean;
            if (p.has_sinv) sinv[c] = invstd;
            if (p.has_rmean) rmean[c] = (1.0f - p.momentum) * rmean[c] + p.momentum * mean;
            if (p.has_rvar) rvar[c] = (1.0f - p.momentum) * rvar[c] + p.momentum * var * p.unbias;
        }
    } else {
        mean = rmean[c];
        invstd = 1.0f / sqrt(rvar[c] + p.eps);
    }
    const float g = p.has_gamma ? gamma[c] : 1.0f, b = p.has_beta ? betap[c] : 0.0f;
    for (int j = int(t); j < m; j += int(nt)) {
        int o = md_mtl_ch_idx(p.nhwc, p.c, p.hw, c, j);
        float v = (md_dt<DT>::ld(x[o]) - mean) * invstd * g + b;
        if (p.relu && v < 0.0f) v = 0.0f;
        md_mtl_put<DT>(y + o, v, p.beta);
    }
}

template <int DT>
[[kernel]] void md_mtl_bn_bwd(MD_KARGS, constant md_mtl_bn_params &p [[buffer(0)]],
                              device const typename md_dt<DT>::S *x [[buffer(1)]],
                              device const typename md_dt<DT>::S *y [[buffer(2)]],
                              device const typename md_dt<DT>::S *dy [[buffer(3)]],
                              device typename md_dt<DT>::S *dx [[buffer(4)]],
                              device const float *gamma [[buffer(5)]],
                              device const float *betap [[buffer(6)]],
                              device const float *rmean [[buffer(7)]],
                              device const float *rvar [[buffer(8)]],
                              device const float *smean [[buffer(9)]],
                              device const float *sinv [[buffer(10)]],
                              device float *dgamma [[buffer(11)]],
                              device float *dbeta [[buffer(12)]])
{
    const int c = int(tgid.x), m = p.n * p.hw;
    const uint t = lid.x, nt = tgsz.x;
    float mean, invstd;
    if (p.training && p.has_smean && p.has_sinv) {
        mean = smean[c];
        invstd = sinv[c];
    } else if (p.training) {
        float s = 0.0f;
        for (int j = int(t); j < m; j += int(nt)) s += md_dt<DT>::ld(x[md_mtl_ch_idx(p.nhwc, p.c, p.hw, c, j)]);
        mean = md_mtl_tg_sum(s, tg, t, nt) / float(m);
        float v = 0.0f;
        for (int j = int(t); j < m; j += int(nt)) {
            float d = md_dt<DT>::ld(x[md_mtl_ch_idx(p.nhwc, p.c, p.hw, c, j)]) - mean;
            v += d * d;
        }
        invstd = 1.0f / sqrt(md_mtl_tg_sum(v, tg, t, nt) / float(m) + p.eps);
    } else {
        mean = rmean[c];
        invstd = 1.0f / sqrt(rvar[c] + p.eps);
    }
    const float g = p.has_gamma ? gamma[c] : 1.0f, b = p.has_beta ? betap[c] : 0.0f;
    float sdy = 0.0f, sdyx = 0.0f;
    for (int j = int(t); j < m; j += int(nt)) {
        int o = md_mtl_ch_idx(p.nhwc, p.c, p.hw, c, j);
        float xh = (md_dt<DT>::ld(x[o]) - mean) * invstd;
        /* the fused ReLU passes no gradient where its output was 0 */
        bool off = p.relu && (p.has_y ? md_dt<DT>::ld(y[o]) <= 0.0f : xh * g + b <= 0.0f);
        float d = off ? 0.0f : md_dt<DT>::ld(dy[o]);
        sdy += d;
        sdyx += d * xh;
    }
    sdy = md_mtl_tg_sum(sdy, tg, t, nt);
    sdyx = md_mtl_tg_sum(sdyx, tg, t, nt);
    if (t == 0) {
        if (p.has_dgamma) md_mtl_putf(dgamma + c, sdyx, p.beta);
        if (p.has_dbeta) md_mtl_putf(dbeta + c, sdy, p.beta);
    }
    if (!p.has_dx) return;
    const float fm = float(m);
    for (int j = int(t); j < m; j += int(nt)) {
        int o = md_mtl_ch_idx(p.nhwc, p.c, p.hw, c, j);
        float xh = (md_dt<DT>::ld(x[o]) - mean) * invstd;
        bool off = p.relu && (p.has_y ? md_dt<DT>::ld(y[o]) <= 0.0f : xh * g + b <= 0.0f);
        float d = off ? 0.0f : md_dt<DT>::ld(dy[o]);
        float v = p.training ? g * invstd / fm * (fm * d - sdy - xh * sdyx) : g * invstd * d;
        md_mtl_put<DT>(dx + o, v, p.beta);
    }
}

/* ---- bias gradient (per channel) ------------------------------------------------- */
template <int DT>
[[kernel]] void md_mtl_bias_grad(MD_KARGS, constant md_mtl_nchw_params &p [[buffer(0)]],
                                 device const typename md_dt<DT>::S *dy [[buffer(1)]],
                                 device float *dbias [[buffer(2)]])
{
    const int c = int(tgid.x), m = p.n * p.hw;
    float s = 0.0f;
    for (int j = int(lid.x); j < m; j += int(tgsz.x)) s += md_dt<DT>::ld(dy[md_mtl_ch_idx(p.nhwc, p.c, p.hw, c, j)]);
    s = md_mtl_tg_sum(s, tg, lid.x, tgsz.x);
    if (lid.x == 0) md_mtl_putf(dbias + c, s, p.beta);
}

/* ---- global average pooling: one thread per (n, c) / per input element ---------------- */
template <int DT>
[[kernel]] void md_mtl_gap_fwd(MD_KARGS, constant md_mtl_nchw_params &p [[buffer(0)]],
                               device const typename md_dt<DT>::S *x [[buffer(1)]],
                               device typename md_dt<DT>::S *y [[buffer(2)]])
{
    const int total = p.n * p.c, step = int(ngrp.x * tgsz.x);
    for (int i = int(gid.x); i < total; i += step) {
        int ni = i / p.c, c = i % p.c;
        float s = 0.0f;
        for (int k = 0; k < p.hw; k++)
            s += md_dt<DT>::ld(x[p.nhwc ? (ni * p.hw + k) * p.c + c : (ni * p.c + c) * p.hw + k]);
        md_mtl_put<DT>(y + i, s / float(p.hw), p.beta);
    }
}

template <int DT>
[[kernel]] void md_mtl_gap_bwd(MD_KARGS, constant md_mtl_nchw_params &p [[buffer(0)]],
                               device const typename md_dt<DT>::S *dy [[buffer(1)]],
                               device typename md_dt<DT>::S *dx [[buffer(2)]])
{
    const int total = p.n * p.c * p.hw, step = int(ngrp.x * tgsz.x);
    for (int i = int(gid.x); i < total; i += step) {
        int ni, c;
        if (p.nhwc) { c = i % p.c; ni = i / (p.c * p.hw); }
        else { c = (i / p.hw) % p.c; ni = i / (p.c * p.hw); }
        md_mtl_put<DT>(dx + i, md_dt<DT>::ld(dy[ni * p.c + c]) / float(p.hw), p.beta);
    }
}

/* ---- bias add (in place) ------------------------------------------------------------ */
template <int DT>
[[kernel]] void md_mtl_bias_add(MD_KARGS, constant md_mtl_nchw_params &p [[buffer(0)]],
                                device typename md_dt<DT>::S *y [[buffer(1)]],
                                device const float *bias [[buffer(2)]])
{
    const int total = p.n * p.c * p.hw, step = int(ngrp.x * tgsz.x);
    for (int i = int(gid.x); i < total; i += step) {
        int c = p.nhwc ? i % p.c : (i / p.hw) % p.c;
        y[i] = md_dt<DT>::st(md_dt<DT>::ld(y[i]) + bias[c]);
    }
}

/* ---- sum / sum of squares / dot: partials, then one threadgroup ------------------------ */
template <int DT>
[[kernel]] void md_mtl_reduce_part(MD_KARGS, constant md_mtl_reduce_params &p [[buffer(0)]],
                                   device const typename md_dt<DT>::S *a [[buffer(1)]],
                                   device const typename md_dt<DT>::S *b [[buffer(2)]],
                                   device float *partials [[buffer(3)]])
{
    const ulong step = ulong(ngrp.x) * tgsz.x;
    float s = 0.0f;
    for (ulong i = gid.x; i < p.n; i += step) {
        float v = md_dt<DT>::ld(a[i]);
        s += p.op == 0 ? v : p.op == 1 ? v * v : v * md_dt<DT>::ld(b[i]);
    }
    s = md_mtl_tg_sum(s, tg, lid.x, tgsz.x);
    if (lid.x == 0) partials[tgid.x] = s;
}

[[kernel]] void md_mtl_reduce_final(MD_KARGS, constant md_mtl_reduce_params &p [[buffer(0)]],
                                    device const float *partials [[buffer(1)]],
                                    device float *out [[buffer(2)]])
{
    float s = 0.0f;
    for (int i = int(lid.x); i < p.parts; i += int(tgsz.x)) s += partials[i];
    s = md_mtl_tg_sum(s, tg, lid.x, tgsz.x);
    if (lid.x == 0) md_mtl_putf(out, s, p.beta);
}

/* ---- softmax cross-entropy: one threadgroup, one thread per sample at a time ----------
 * loss_i = -sum_j t_j (z_j - lse), t = (1 - s) onehot + s / C; argmax ties go
 * to the lowest index. Labels outside [0, C) contribute nothing (the
 * reference reports them as a data error; the loader never produces them). */
template <int DT>
[[kernel]] void md_mtl_xent(MD_KARGS, constant md_mtl_xent_params &p [[buffer(0)]],
                            device const typename md_dt<DT>::S *logits [[buffer(1)]],
                            device const int *labels [[buffer(2)]],
                            device float *loss_sum [[buffer(3)]],
                            device int *correct [[buffer(4)]],
                            device typename md_dt<DT>::S *dlogits [[buffer(5)]])
{
    const int C = p.classes;
    const float sm = p.smoothing, su = p.smoothing / float(C);
    float loss = 0.0f, hits = 0.0f;
    for (int ni = int(lid.x); ni < p.n; ni += int(tgsz.x)) {
        const int lab = labels[ni], row = ni * C;
        if (lab < 0 || lab >= C) continue;
        float mx = md_dt<DT>::ld(logits[row]);
        int arg = 0;
        for (int j = 1; j < C; j++) {
            float v = md_dt<DT>::ld(logits[row + j]);
            if (v > mx) { mx = v; arg = j; }
        }
        hits += arg == lab ? 1.0f : 0.0f;
        float se = 0.0f;
        for (int j = 0; j < C; j++) se += exp(md_dt<DT>::ld(logits[row + j]) - mx);
        const float lse = mx + log(se);
        for (int j = 0; j < C; j++) {
            float z = md_dt<DT>::ld(logits[row + j]);
            float t = (j == lab ? 1.0f - sm : 0.0f) + su;
            loss -= t * (z - lse);
            if (p.has_dlogits) dlogits[row + j] = md_dt<DT>::st(p.grad_scale * (exp(z - lse) - t));
        }
    }
    loss = md_mtl_tg_sum(loss, tg, lid.x, tgsz.x);
    hits = md_mtl_tg_sum(hits, tg, lid.x, tgsz.x);
    if (lid.x == 0) {
        if (p.has_loss) loss_sum[0] += loss;
        if (p.has_correct) correct[0] += int(hits);
    }
}

#define MD_NORM_INST(DT, sfx)                                            \
    MD_INSTANTIATE("md_bn_fwd_" sfx, md_mtl_bn_fwd<DT>)                   \
    MD_INSTANTIATE("md_bn_bwd_" sfx, md_mtl_bn_bwd<DT>)                   \
    MD_INSTANTIATE("md_bias_grad_" sfx, md_mtl_bias_grad<DT>)             \
    MD_INSTANTIATE("md_bias_add_" sfx, md_mtl_bias_add<DT>)               \
    MD_INSTANTIATE("md_gap_fwd_" sfx, md_mtl_gap_fwd<DT>)                 \
    MD_INSTANTIATE("md_gap_bwd_" sfx, md_mtl_gap_bwd<DT>)                 \
    MD_INSTANTIATE("md_reduce_part_" sfx, md_mtl_reduce_part<DT>)         \
    MD_INSTANTIATE("md_xent_" sfx, md_mtl_xent<DT>)

MD_NORM_INST(MD_MTL_F32, "f32")
MD_NORM_INST(MD_MTL_F16, "f16")
MD_NORM_INST(MD_MTL_BF16, "bf16")
MD_KERNEL_NAME("md_mtl_reduce_final", md_mtl_reduce_final)
