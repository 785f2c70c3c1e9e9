/* eltwise.metal - one thread per output element (grid-stride loops, so the
 * host may cap the grid): activations, dropout, element-wise arithmetic,
 * casts, layout permutes, channel slices, bias add; and the bias gradient
 * and whole-tensor sums (fixed-order reductions); and an empty kernel that
 * event timestamps ride on. */
#include "md_metal_common.h"
#include "backend/act_math.h"

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

/* Nothing: a command buffer for event timestamps needs one dispatch. */
[[kernel]] void md_mtl_noop(MD_KARGS, constant md_mtl_cast_params &p [[buffer(0)]]) {}

#define MD_ELT_INST(DT, sfx)                                          \
    MD_INSTANTIATE("md_act_fwd_" sfx, md_mtl_act_fwd<DT>)              \
    MD_INSTANTIATE("md_act_bwd_" sfx, md_mtl_act_bwd<DT>)              \
    MD_INSTANTIATE("md_dropout_fwd_" sfx, md_mtl_dropout_fwd<DT>)      \
    MD_INSTANTIATE("md_dropout_bwd_" sfx, md_mtl_dropout_bwd<DT>)      \
    MD_INSTANTIATE("md_ew_" sfx, md_mtl_ew<DT>)                        \
    MD_INSTANTIATE("md_chslice_" sfx, md_mtl_chslice<DT>)              \
    MD_INSTANTIATE("md_bias_add_" sfx, md_mtl_bias_add<DT>)            \
    MD_INSTANTIATE("md_bias_grad_" sfx, md_mtl_bias_grad<DT>)          \
    MD_INSTANTIATE("md_reduce_part_" sfx, md_mtl_reduce_part<DT>)

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

MD_KERNEL_NAME("md_mtl_reduce_final", md_mtl_reduce_final)
MD_KERNEL_NAME("md_mtl_noop", md_mtl_noop)
