/* pool.metal - 2-D max/average pooling (one thread per output element)
 * and global average pooling. */
#include "md_metal_common.h"

/* ---- pooling -------------------------------------------------------------------------------
 * Windows are clipped to the input; average divides by kh*kw when
 * count_include_pad, else by the clipped size; max takes the first maximal
 * element; an empty window gives 0 and no gradient (as the reference). */
struct md_mtl_win { int h0, h1, w0, w1; };

inline md_mtl_win md_mtl_pool_win(constant md_mtl_pool_params &p, int pp, int q)
{
    md_mtl_win r;
    int hs = pp * p.stride_h - p.pad_h, ws = q * p.stride_w - p.pad_w;
    r.h0 = max(hs, 0);
    r.w0 = max(ws, 0);
    r.h1 = min(hs + p.kh, p.h);
    r.w1 = min(ws + p.kw, p.w);
    return r;
}

/* Offset of the first maximal element of window (pp, q), -1 if empty. */
template <int DT>
inline int md_mtl_pool_argmax(constant md_mtl_pool_params &p, device const typename md_dt<DT>::S *x,
                              int ni, int c, int pp, int q)
{
    md_mtl_win win = md_mtl_pool_win(p, pp, q);
    int best = -1;
    float bv = 0.0f;
    for (int h = win.h0; h < win.h1; h++)
        for (int w = win.w0; w < win.w1; w++) {
            int o = md_mtl_act_idx(p.nhwc, p.c, p.h, p.w, ni, c, h, w);
            float v = md_dt<DT>::ld(x[o]);
            if (best < 0 || v > bv) { best = o; bv = v; }
        }
    return best;
}

inline float md_mtl_pool_div(constant md_mtl_pool_params &p, md_mtl_win win)
{
    return p.count_include_pad ? float(p.kh * p.kw) : float((win.h1 - win.h0) * (win.w1 - win.w0));
}

/* Decomposes a linear index of an (n, c, h, w) tensor stored in its layout. */
inline void md_mtl_unravel(int nhwc, int C, int H, int W, int t, thread int &ni, thread int &c,
                           thread int &h, thread int &w)
{
    if (nhwc) { c = t % C; t /= C; w = t % W; t /= W; h = t % H; ni = t / H; }
    else { w = t % W; t /= W; h = t % H; t /= H; c = t % C; ni = t / C; }
}

template <int DT>
[[kernel]] void md_mtl_pool_fwd(MD_KARGS, constant md_mtl_pool_params &p [[buffer(0)]],
                                device const typename md_dt<DT>::S *x [[buffer(1)]],
                                device typename md_dt<DT>::S *y [[buffer(2)]])
{
    const ulong total = ulong(p.n) * p.c * p.p * p.q;
    MD_GRID_LOOP(i, total) {
        int ni, c, pp, q;
        md_mtl_unravel(p.nhwc, p.c, p.p, p.q, int(i), ni, c, pp, q);
        float v = 0.0f;
        if (p.kind == 0) {
            int o = md_mtl_pool_argmax<DT>(p, x, ni, c, pp, q);
            if (o >= 0) v = md_dt<DT>::ld(x[o]);
        } else {
            md_mtl_win win = md_mtl_pool_win(p, pp, q);
            float s = 0.0f, div = md_mtl_pool_div(p, win);
            for (int h = win.h0; h < win.h1; h++)
                for (int w = win.w0; w < win.w1; w++)
                    s += md_dt<DT>::ld(x[md_mtl_act_idx(p.nhwc, p.c, p.h, p.w, ni, c, h, w)]);
            v = div > 0.0f ? s / div : 0.0f;
        }
        md_mtl_put<DT>(y + i, v, p.beta);
    }
}

/* Gather form: each input element sums the windows that cover it (no atomics). */
template <int DT>
[[kernel]] void md_mtl_pool_bwd(MD_KARGS, constant md_mtl_pool_params &p [[buffer(0)]],
                                device const typename md_dt<DT>::S *x [[buffer(1)]],
                                device const typename md_dt<DT>::S *dy [[buffer(2)]],
                                device typename md_dt<DT>::S *dx [[buffer(3)]])
{
    const ulong total = ulong(p.n) * p.c * p.h * p.w;
    MD_GRID_LOOP(i, total) {
        int ni, c, h, w;
        md_mtl_unravel(p.nhwc, p.c, p.h, p.w, int(i), ni, c, h, w);
        /* windows pp with pp*sh - ph <= h < pp*sh - ph + kh */
        int p0 = max(0, (h + p.pad_h - p.kh + p.stride_h) / p.stride_h);
        int p1 = min(p.p - 1, (h + p.pad_h) / p.stride_h);
        int q0 = max(0, (w + p.pad_w - p.kw + p.stride_w) / p.stride_w);
        int q1 = min(p.q - 1, (w + p.pad_w) / p.stride_w);
        float s = 0.0f;
        for (int pp = p0; pp <= p1; pp++)
            for (int q = q0; q <= q1; q++) {
                md_mtl_win win = md_mtl_pool_win(p, pp, q);
                if (h < win.h0 || h >= win.h1 || w < win.w0 || w >= win.w1) continue;
                float d = md_dt<DT>::ld(dy[md_mtl_act_idx(p.nhwc, p.c, p.p, p.q, ni, c, pp, q)]);
                if (p.kind == 0) {
                    if (md_mtl_pool_argmax<DT>(p, x, ni, c, pp, q) == int(i)) s += d;
                } else {
                    float div = md_mtl_pool_div(p, win);
                    if (div > 0.0f) s += d / div;
                }
            }
        md_mtl_put<DT>(dx + i, s, p.beta);
    }
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

#define MD_POOL_INST(DT, sfx)                                         \
    MD_INSTANTIATE("md_pool_fwd_" sfx, md_mtl_pool_fwd<DT>)            \
    MD_INSTANTIATE("md_pool_bwd_" sfx, md_mtl_pool_bwd<DT>)            \
    MD_INSTANTIATE("md_gap_fwd_" sfx, md_mtl_gap_fwd<DT>)              \
    MD_INSTANTIATE("md_gap_bwd_" sfx, md_mtl_gap_bwd<DT>)

MD_POOL_INST(MD_MTL_F32, "f32")
MD_POOL_INST(MD_MTL_F16, "f16")
MD_POOL_INST(MD_MTL_BF16, "bf16")
