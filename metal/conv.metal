/* conv.metal - the three 2-D convolutions as implicit GEMM on the tiled
 * engine of md_metal_common.h (no im2col buffer: the tile loaders compute addresses).
 * Grid: (ceil(N/BN), ceil(M/BM), groups) threadgroups of TX x TY.
 *
 *   conv fwd:        M = K/g,  N = n*p*q,     K = C/g*r*s   (A = filter, B = x)
 *   conv bwd_data:   M = C/g,  N = n*h*w,     K = K/g*r*s   (A = filter^T, B = dy)
 *   conv bwd_filter: M = K/g,  N = C/g*r*s,   K = n*p*q     (A = dy, B = x)
 *
 * SG selects the engine (md_metal_common.h): 0 the scalar tiled one,
 * 1 simdgroup matrices.
 */
#include "md_metal_common.h"

/* ---- conv fwd ------------------------------------------------------------------- */
template <int DT> struct md_mtl_conv_fwd_op {
    typedef typename md_dt<DT>::S S;
    device const S *X;
    device const S *W;
    device S *Y;
    constant md_mtl_conv_params *cp;
    int g, M, N, K;
    float a(int m, int kk) const { return md_dt<DT>::ld(W[(g * cp->kg + m) * K + kk]); }
    float b(int kk, int col) const
    {
        int c, r, s;
        if (cp->nhwc) { c = kk % cp->cg; s = (kk / cp->cg) % cp->s; r = kk / (cp->cg * cp->s); }
        else { s = kk % cp->s; r = (kk / cp->s) % cp->r; c = kk / (cp->r * cp->s); }
        int q = col % cp->q, pp = (col / cp->q) % cp->p, ni = col / (cp->p * cp->q);
        int h = pp * cp->stride_h - cp->pad_h + r * cp->dil_h;
        int w = q * cp->stride_w - cp->pad_w + s * cp->dil_w;
        if (h < 0 || h >= cp->h || w < 0 || w >= cp->w) return 0.0f;
        return md_dt<DT>::ld(X[md_mtl_act_idx(cp->nhwc, cp->c, cp->h, cp->w, ni, g * cp->cg + c, h, w)]);
    }
    void store(int m, int col, float v) const
    {
        int q = col % cp->q, pp = (col / cp->q) % cp->p, ni = col / (cp->p * cp->q);
        md_mtl_put<DT>(Y + md_mtl_act_idx(cp->nhwc, cp->k, cp->p, cp->q, ni, g * cp->kg + m, pp, q), v, cp->beta);
    }
};

template <int DT, int SG>
[[kernel]] void md_mtl_conv_fwd(MD_KARGS, constant md_mtl_conv_params &p [[buffer(0)]],
                                device const typename md_dt<DT>::S *x [[buffer(1)]],
                                device const typename md_dt<DT>::S *w [[buffer(2)]],
                                device typename md_dt<DT>::S *y [[buffer(3)]])
{
    md_mtl_conv_fwd_op<DT> op;
    op.X = x; op.W = w; op.Y = y; op.cp = &p;
    op.g = int(tgid.z);
    op.M = p.kg; op.N = p.n * p.p * p.q; op.K = p.cg * p.r * p.s;
    md_mtl_mm<SG>::run(op, tg, lid, tgid);
}

/* ---- conv bwd_data --------------------------------------------------------------- */
template <int DT> struct md_mtl_conv_bwd_data_op {
    typedef typename md_dt<DT>::S S;
    device const S *DY;
    device const S *W;
    device S *DX;
    constant md_mtl_conv_params *cp;
    int g, M, N, K;
    float a(int m, int kk) const
    {
        int s = kk % cp->s, r = (kk / cp->s) % cp->r, k = kk / (cp->r * cp->s);
        return md_dt<DT>::ld(W[md_mtl_flt_idx(cp->nhwc, cp->cg, cp->r, cp->s, g * cp->kg + k, m, r, s)]);
    }
    float b(int kk, int col) const
    {
        int s = kk % cp->s, r = (kk / cp->s) % cp->r, k = kk / (cp->r * cp->s);
        int w = col % cp->w, h = (col / cp->w) % cp->h, ni = col / (cp->h * cp->w);
        int ph = h + cp->pad_h - r * cp->dil_h, pw = w + cp->pad_w - s * cp->dil_w;
        if (ph < 0 || pw < 0 || ph % cp->stride_h || pw % cp->stride_w) return 0.0f;
        ph /= cp->stride_h;
        pw /= cp->stride_w;
        if (ph >= cp->p || pw >= cp->q) return 0.0f;
        return md_dt<DT>::ld(DY[md_mtl_act_idx(cp->nhwc, cp->k, cp->p, cp->q, ni, g * cp->kg + k, ph, pw)]);
    }
    void store(int m, int col, float v) const
    {
        int w = col % cp->w, h = (col / cp->w) % cp->h, ni = col / (cp->h * cp->w);
        md_mtl_put<DT>(DX + md_mtl_act_idx(cp->nhwc, cp->c, cp->h, cp->w, ni, g * cp->cg + m, h, w), v, cp->beta);
    }
};

template <int DT, int SG>
[[kernel]] void md_mtl_conv_bwd_data(MD_KARGS, constant md_mtl_conv_params &p [[buffer(0)]],
                                     device const typename md_dt<DT>::S *dy [[buffer(1)]],
                                     device const typename md_dt<DT>::S *w [[buffer(2)]],
                                     device typename md_dt<DT>::S *dx [[buffer(3)]])
{
    md_mtl_conv_bwd_data_op<DT> op;
    op.DY = dy; op.W = w; op.DX = dx; op.cp = &p;
    op.g = int(tgid.z);
    op.M = p.cg; op.N = p.n * p.h * p.w; op.K = p.kg * p.r * p.s;
    md_mtl_mm<SG>::run(op, tg, lid, tgid);
}

/* ---- conv bwd_filter ---------------------------------------------------------------- */
template <int DT> struct md_mtl_conv_bwd_filter_op {
    typedef typename md_dt<DT>::S S;
    device const S *DY;
    device const S *X;
    device S *DW;
    constant md_mtl_conv_params *cp;
    int g, M, N, K;
    float a(int m, int kk) const
    {
        int q = kk % cp->q, pp = (kk / cp->q) % cp->p, ni = kk / (cp->p * cp->q);
        return md_dt<DT>::ld(DY[md_mtl_act_idx(cp->nhwc, cp->k, cp->p, cp->q, ni, g * cp->kg + m, pp, q)]);
    }
    float b(int kk, int col) const
    {
        int c, r, s;
        if (cp->nhwc) { c = col % cp->cg; s = (col / cp->cg) % cp->s; r = col / (cp->cg * cp->s); }
        else { s = col % cp->s; r = (col / cp->s) % cp->r; c = col / (cp->r * cp->s); }
        int q = kk % cp->q, pp = (kk / cp->q) % cp->p, ni = kk / (cp->p * cp->q);
        int h = pp * cp->stride_h - cp->pad_h + r * cp->dil_h;
        int w = q * cp->stride_w - cp->pad_w + s * cp->dil_w;
        if (h < 0 || h >= cp->h || w < 0 || w >= cp->w) return 0.0f;
        return md_dt<DT>::ld(X[md_mtl_act_idx(cp->nhwc, cp->c, cp->h, cp->w, ni, g * cp->cg + c, h, w)]);
    }
    /* col is already the filter's memory order within one output channel. */
    void store(int m, int col, float v) const { md_mtl_put<DT>(DW + (g * cp->kg + m) * N + col, v, cp->beta); }
};

template <int DT, int SG>
[[kernel]] void md_mtl_conv_bwd_filter(MD_KARGS, constant md_mtl_conv_params &p [[buffer(0)]],
                                       device const typename md_dt<DT>::S *dy [[buffer(1)]],
                                       device const typename md_dt<DT>::S *x [[buffer(2)]],
                                       device typename md_dt<DT>::S *dw [[buffer(3)]])
{
    md_mtl_conv_bwd_filter_op<DT> op;
    op.DY = dy; op.X = x; op.DW = dw; op.cp = &p;
    op.g = int(tgid.z);
    op.M = p.kg; op.N = p.cg * p.r * p.s; op.K = p.n * p.p * p.q;
    md_mtl_mm<SG>::run(op, tg, lid, tgid);
}

#define MD_CONV_INST(DT, SG, sfx)                                                   \
    MD_INSTANTIATE("md_conv_fwd_" sfx, md_mtl_conv_fwd<DT, SG>)                      \
    MD_INSTANTIATE("md_conv_bwd_data_" sfx, md_mtl_conv_bwd_data<DT, SG>)            \
    MD_INSTANTIATE("md_conv_bwd_filter_" sfx, md_mtl_conv_bwd_filter<DT, SG>)

MD_CONV_INST(MD_MTL_F32, 0, "f32")
MD_CONV_INST(MD_MTL_F16, 0, "f16")
MD_CONV_INST(MD_MTL_BF16, 0, "bf16")
/* The simdgroup-matrix variants: same names with "_sg" (the host picks them
 * on GPUs that have simdgroup matrices). */
#if MD_METAL_SIMDGROUP_MM
MD_CONV_INST(MD_MTL_F32, 1, "f32_sg")
MD_CONV_INST(MD_MTL_F16, 1, "f16_sg")
MD_CONV_INST(MD_MTL_BF16, 1, "bf16_sg")
#endif
