/* norm.metal - batch norm (fp32 statistics for every storage type, which is
 * what keeps fp16 training with BatchNorm stable).
 *
 * Per-channel kernels: one threadgroup of MD_MTL_RED_THREADS threads per
 * channel (grid x = c), each thread striding over the n*hw elements. All
 * sums run in a fixed order, so results do not depend on scheduling.
 */
#include "md_metal_common.h"

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

#define MD_NORM_INST(DT, sfx)                                            \
    MD_INSTANTIATE("md_bn_fwd_" sfx, md_mtl_bn_fwd<DT>)                   \
    MD_INSTANTIATE("md_bn_bwd_" sfx, md_mtl_bn_bwd<DT>)

MD_NORM_INST(MD_MTL_F32, "f32")
MD_NORM_INST(MD_MTL_F16, "f16")
MD_NORM_INST(MD_MTL_BF16, "bf16")

/* ---- layer norm over the last dimension: one threadgroup per row ----------------------- */
template <int DT>
[[kernel]] void md_mtl_ln_fwd(MD_KARGS, constant md_mtl_ln_params &p [[buffer(0)]],
                              device const typename md_dt<DT>::S *x [[buffer(1)]],
                              device typename md_dt<DT>::S *y [[buffer(2)]],
                              device const float *gamma [[buffer(3)]],
                              device const float *betap [[buffer(4)]],
                              device float *mean [[buffer(5)]],
                              device float *rstd [[buffer(6)]])
{
    const int r = int(tgid.x);
    const uint t = lid.x, nt = tgsz.x;
    if (r >= p.rows) return;
    device const typename md_dt<DT>::S *xr = x + long(r) * p.d;
    float s = 0.0f;
    for (int j = int(t); j < p.d; j += int(nt)) s += md_dt<DT>::ld(xr[j]);
    const float mu = md_mtl_tg_sum(s, tg, t, nt) / float(p.d);
    float v = 0.0f;
    for (int j = int(t); j < p.d; j += int(nt)) {
        float dd = md_dt<DT>::ld(xr[j]) - mu;
        v += dd * dd;
    }
    const float rs = 1.0f / sqrt(md_mtl_tg_sum(v, tg, t, nt) / float(p.d) + p.eps);
    if (t == 0) {
        if (p.has_mean) mean[r] = mu;
        if (p.has_rstd) rstd[r] = rs;
    }
    for (int j = int(t); j < p.d; j += int(nt)) {
        float o = (md_dt<DT>::ld(xr[j]) - mu) * rs;
        if (p.has_gamma) o *= gamma[j];
        if (p.has_beta) o += betap[j];
        md_mtl_put<DT>(y + long(r) * p.d + j, o, p.beta);
    }
}

/* dx of one row from the saved statistics */
template <int DT>
[[kernel]] void md_mtl_ln_bwd_dx(MD_KARGS, constant md_mtl_ln_params &p [[buffer(0)]],
                                 device const typename md_dt<DT>::S *x [[buffer(1)]],
                                 device const typename md_dt<DT>::S *dy [[buffer(2)]],
                                 device typename md_dt<DT>::S *dx [[buffer(3)]],
                                 device const float *gamma [[buffer(4)]],
                                 device const float *mean [[buffer(5)]],
                                 device const float *rstd [[buffer(6)]])
{
    const int r = int(tgid.x);
    const uint t = lid.x, nt = tgsz.x;
    if (r >= p.rows) return;
    const long o = long(r) * p.d;
    const float mu = mean[r], rs = rstd[r];
    float sg = 0.0f, sgx = 0.0f;
    for (int j = int(t); j < p.d; j += int(nt)) {
        float g = md_dt<DT>::ld(dy[o + j]) * (p.has_gamma ? gamma[j] : 1.0f);
        sg += g;
        sgx += g * (md_dt<DT>::ld(x[o + j]) - mu) * rs;
    }
    sg = md_mtl_tg_sum(sg, tg, t, nt) / float(p.d);
    sgx = md_mtl_tg_sum(sgx, tg, t, nt) / float(p.d);
    for (int j = int(t); j < p.d; j += int(nt)) {
        float g = md_dt<DT>::ld(dy[o + j]) * (p.has_gamma ? gamma[j] : 1.0f);
        float xh = (md_dt<DT>::ld(x[o + j]) - mu) * rs;
        md_mtl_put<DT>(dx + o + j, rs * (g - sg - xh * sgx), p.beta);
    }
}

/* dgamma, dbeta: one thread per column, the rows in order */
template <int DT>
[[kernel]] void md_mtl_ln_bwd_params(MD_KARGS, constant md_mtl_ln_params &p [[buffer(0)]],
                                     device const typename md_dt<DT>::S *x [[buffer(1)]],
                                     device const typename md_dt<DT>::S *dy [[buffer(2)]],
                                     device const float *mean [[buffer(3)]],
                                     device const float *rstd [[buffer(4)]],
                                     device float *dgamma [[buffer(5)]],
                                     device float *dbeta [[buffer(6)]])
{
    MD_GRID_LOOP(j, ulong(p.d)) {
        float sg = 0.0f, sb = 0.0f;
        for (int r = 0; r < p.rows; r++) {
            long o = long(r) * p.d + long(j);
            float g = md_dt<DT>::ld(dy[o]);
            sg += g * (md_dt<DT>::ld(x[o]) - mean[r]) * rstd[r];
            sb += g;
        }
        if (p.has_dgamma) md_mtl_putf(dgamma + j, sg, p.beta);
        if (p.has_dbeta) md_mtl_putf(dbeta + j, sb, p.beta);
    }
}

#define MD_LN_INST(DT, sfx)                                                  \
    MD_INSTANTIATE("md_ln_fwd_" sfx, md_mtl_ln_fwd<DT>)                       \
    MD_INSTANTIATE("md_ln_bwd_dx_" sfx, md_mtl_ln_bwd_dx<DT>)                 \
    MD_INSTANTIATE("md_ln_bwd_params_" sfx, md_mtl_ln_bwd_params<DT>)

MD_LN_INST(MD_MTL_F32, "f32")
MD_LN_INST(MD_MTL_F16, "f16")
MD_LN_INST(MD_MTL_BF16, "bf16")
