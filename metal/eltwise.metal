/* eltwise.metal - one thread per output element (grid-stride loops, so the
 * host may cap the grid): activations, dropout, element-wise arithmetic,
 * casts, layout permutes, channel slices, pooling, the fused optimizer step,
 * and an empty kernel that event timestamps ride on. */
#include "md_metal_common.h"
#include "backend/act_math.h"

#define MD_GRID_LOOP(i, n) \
    for (ulong i = gid.x, md_step_ = ulong(ngrp.x) * tgsz.x; i < (n); i += md_step_)

/* ---- activations: md_act_f / md_act_grad_f of backend/act_math.h ---------------- */
template <int DT>
[[kernel]] void md_mtl_act_fwd(MD_KARGS, constant md_mtl_act_params &p [[buffer(0)]],
                               device const typename md_dt<DT>::S *x [[buffer(1)]],
                               device typename md_dt<DT>::S *y [[buffer(2)]])
{
    MD_GRID_LOOP(i, p.n) md_mtl_put<DT>(y + i, md_act_f(p.act, md_dt<DT>::ld(x[i]), p.alpha), p.beta);
}

template <int DT>
[[kernel]] void md_mtl_act_bwd(MD_KARGS, constant md_mtl_act_params &p [[buffer(0)]],
                               device const typename md_dt<DT>::S *x [[buffer(1)]],
                               device const typename md_dt<DT>::S *dy [[buffer(2)]],
                               device typename md_dt<DT>::S *dx [[buffer(3)]])
{
    MD_GRID_LOOP(i, p.n)
        md_mtl_put<DT>(dx + i, md_act_grad_f(p.act, md_dt<DT>::ld(x[i]), p.alpha) * md_dt<DT>::ld(dy[i]), p.beta);
}

/* ---- dropout: the mask is md_rng_uniform(seed, offset + i) >= p everywhere ---------- */
template <int DT>
[[kernel]] void md_mtl_dropout_fwd(MD_KARGS, constant md_mtl_dropout_params &p [[buffer(0)]],
                                   device const typename md_dt<DT>::S *x [[buffer(1)]],
                                   device typename md_dt<DT>::S *y [[buffer(2)]],
                                   device uchar *mask [[buffer(3)]])
{
    MD_GRID_LOOP(i, p.n) {
        bool keep = !(md_mtl_rng_uniform(p.seed, p.offset + i) < p.p);
        if (p.has_mask) mask[i] = keep ? 1 : 0;
        md_mtl_put<DT>(y + i, keep ? md_dt<DT>::ld(x[i]) * p.scale : 0.0f, p.beta);
    }
}

template <int DT>
[[kernel]] void md_mtl_dropout_bwd(MD_KARGS, constant md_mtl_dropout_params &p [[buffer(0)]],
                                   device const typename md_dt<DT>::S *dy [[buffer(1)]],
                                   device const uchar *mask [[buffer(2)]],
                                   device typename md_dt<DT>::S *dx [[buffer(3)]])
{
    MD_GRID_LOOP(i, p.n) {
        bool keep = p.has_mask ? mask[i] != 0 : !(md_mtl_rng_uniform(p.seed, p.offset + i) < p.p);
        md_mtl_put<DT>(dx + i, keep ? md_dt<DT>::ld(dy[i]) * p.scale : 0.0f, p.beta);
    }
}

/* ---- element-wise arithmetic (enum md_ew_op) --------------------------------------- */
template <int DT>
[[kernel]] void md_mtl_ew(MD_KARGS, constant md_mtl_ew_params &p [[buffer(0)]],
                          device const typename md_dt<DT>::S *a [[buffer(1)]],
                          device const typename md_dt<DT>::S *b [[buffer(2)]],
                          device typename md_dt<DT>::S *y [[buffer(3)]],
                          device const float *scale [[buffer(4)]])
{
    const float s = p.has_scale ? scale[0] : 1.0f;
    MD_GRID_LOOP(i, p.n) {
        float v;
        switch (p.op) {
        case 0:
            v = p.alpha * s * md_dt<DT>::ld(a[i]);
            if (p.beta != 0.0f) v += p.beta * md_dt<DT>::ld(b[i]);
            break;
        case 1: v = md_dt<DT>::ld(a[i]) * md_dt<DT>::ld(b[i]); break;
        case 2: v = p.alpha; break;
        default: v = md_dt<DT>::ld(a[i]); break;
        }
        y[i] = md_dt<DT>::st(v);
    }
}

/* ---- casts and layout permutes ---------------------------------------------------------- */
template <int SD, int DD>
[[kernel]] void md_mtl_cast(MD_KARGS, constant md_mtl_cast_params &p [[buffer(0)]],
                            device const typename md_dt<SD>::S *src [[buffer(1)]],
                            device typename md_dt<DD>::S *dst [[buffer(2)]])
{
    MD_GRID_LOOP(i, p.n) dst[i] = md_dt<DD>::st(md_dt<SD>::ld(src[i]));
}

/* Element size is all that matters: permute moves bits. */
template <typename E>
[[kernel]] void md_mtl_permute(MD_KARGS, constant md_mtl_permute_params &p [[buffer(0)]],
                               device const E *src [[buffer(1)]],
                               device E *dst [[buffer(2)]])
{
    const ulong total = ulong(p.n) * p.c * p.h * p.w;
    MD_GRID_LOOP(i, total) {
        /* i walks dst: decompose in dst's layout, read src's */
        int ni, c, h, w, t = int(i);
        if (p.to_nhwc) { c = t % p.c; t /= p.c; w = t % p.w; t /= p.w; h = t % p.h; ni = t / p.h; }
        else { w = t % p.w; t /= p.w; h = t % p.h; t /= p.h; c = t % p.c; ni = t / p.c; }
        dst[i] = src[md_mtl_act_idx(!p.to_nhwc, p.c, p.h, p.w, ni, c, h, w)];
    }
}

/* ---- channel slices (concat) --------------------------------------------------------------- */
template <int DT>
[[kernel]] void md_mtl_chslice(MD_KARGS, constant md_mtl_chslice_params &p [[buffer(0)]],
                               device const typename md_dt<DT>::S *src [[buffer(1)]],
                               device typename md_dt<DT>::S *dst [[buffer(2)]])
{
    const ulong total = ulong(p.n) * p.cc * p.hw;
    MD_GRID_LOOP(i, total) {
        int t = int(i), j, cc, ni;
        if (p.nhwc) { cc = t % p.cc; t /= p.cc; j = t % p.hw; ni = t / p.hw; }
        else { j = t % p.hw; t /= p.hw; cc = t % p.cc; ni = t / p.cc; }
        int so = p.nhwc ? (ni * p.hw + j) * p.src_c + p.src_off + cc : (ni * p.src_c + p.src_off + cc) * p.hw + j;
        int d = p.nhwc ? (ni * p.hw + j) * p.dst_c + p.dst_off + cc : (ni * p.dst_c + p.dst_off + cc) * p.hw + j;
        md_mtl_put<DT>(dst + d, md_dt<DT>::ld(src[so]), p.beta);
    }
}

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

/* ---- fused optimizer step over flat fp32 parameters (PyTorch SGD / AdamW) --------------- */
[[kernel]] void md_mtl_optim(MD_KARGS, constant md_mtl_optim_params &p [[buffer(0)]],
                             device float *params [[buffer(1)]],
                             device const float *grads [[buffer(2)]],
                             device float *mbuf [[buffer(3)]],
                             device float *vbuf [[buffer(4)]],
                             device ushort *half_out [[buffer(5)]],
                             device const float *scale [[buffer(6)]])
{
    const float gs = p.grad_scale * (p.has_scale ? scale[0] : 1.0f);
    MD_GRID_LOOP(i, p.n) {
        float w = params[i], g = grads[i] * gs;
        if (p.kind == 0) {
            g += p.weight_decay * w;
            if (p.momentum != 0.0f) {
                float buf = p.first_step ? g : p.momentum * mbuf[i] + g;
                mbuf[i] = buf;
                g = p.nesterov ? g + p.momentum * buf : buf;
            }
            w -= p.lr * g;
        } else {
            w *= 1.0f - p.lr * p.weight_decay;
            float m = p.beta1 * mbuf[i] + (1.0f - p.beta1) * g;
            float v = p.beta2 * vbuf[i] + (1.0f - p.beta2) * g * g;
            mbuf[i] = m;
            vbuf[i] = v;
            w -= p.lr * (m / p.bc1) / (sqrt(v / p.bc2) + p.eps);
        }
        params[i] = w;
        if (p.has_half)
            half_out[i] = p.half_dtype == MD_MTL_F16 ? as_type<ushort>(half(w)) : md_dt<MD_MTL_BF16>::st(w);
    }
}

/* Nothing: a command buffer for event timestamps needs one dispatch. */
[[kernel]] void md_mtl_noop(MD_KARGS, constant md_mtl_cast_params &p [[buffer(0)]]) {}

#define MD_ELT_INST(DT, sfx)                                          \
    MD_INSTANTIATE("md_act_fwd_" sfx, md_mtl_act_fwd<DT>)              \
    MD_INSTANTIATE("md_act_bwd_" sfx, md_mtl_act_bwd<DT>)              \
    MD_INSTANTIATE("md_dropout_fwd_" sfx, md_mtl_dropout_fwd<DT>)      \
    MD_INSTANTIATE("md_dropout_bwd_" sfx, md_mtl_dropout_bwd<DT>)      \
    MD_INSTANTIATE("md_ew_" sfx, md_mtl_ew<DT>)                        \
    MD_INSTANTIATE("md_chslice_" sfx, md_mtl_chslice<DT>)              \
    MD_INSTANTIATE("md_pool_fwd_" sfx, md_mtl_pool_fwd<DT>)            \
    MD_INSTANTIATE("md_pool_bwd_" sfx, md_mtl_pool_bwd<DT>)

MD_ELT_INST(MD_MTL_F32, "f32")
MD_ELT_INST(MD_MTL_F16, "f16")
MD_ELT_INST(MD_MTL_BF16, "bf16")

MD_INSTANTIATE("md_permute_b4", md_mtl_permute<uint>)
MD_INSTANTIATE("md_permute_b2", md_mtl_permute<ushort>)

#define MD_CAST_INST(SD, DD, name) MD_INSTANTIATE(name, md_mtl_cast<SD, DD>)
MD_CAST_INST(MD_MTL_F32, MD_MTL_F32, "md_cast_f32_f32")
MD_CAST_INST(MD_MTL_F32, MD_MTL_F16, "md_cast_f32_f16")
MD_CAST_INST(MD_MTL_F32, MD_MTL_BF16, "md_cast_f32_bf16")
MD_CAST_INST(MD_MTL_F16, MD_MTL_F32, "md_cast_f16_f32")
MD_CAST_INST(MD_MTL_F16, MD_MTL_F16, "md_cast_f16_f16")
MD_CAST_INST(MD_MTL_F16, MD_MTL_BF16, "md_cast_f16_bf16")
MD_CAST_INST(MD_MTL_BF16, MD_MTL_F32, "md_cast_bf16_f32")
MD_CAST_INST(MD_MTL_BF16, MD_MTL_F16, "md_cast_bf16_f16")
MD_CAST_INST(MD_MTL_BF16, MD_MTL_BF16, "md_cast_bf16_bf16")

MD_KERNEL_NAME("md_mtl_optim", md_mtl_optim)
MD_KERNEL_NAME("md_mtl_noop", md_mtl_noop)
