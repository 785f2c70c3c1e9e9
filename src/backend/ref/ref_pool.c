/* ref_pool.c - reference max/average pooling and global average pooling: plain
 * loops, double accumulation (ref_kernels.c states the conventions). */
#include "backend/ref/ref_internal.h"

#include "core/mem.h"

/* ---- pooling ------------------------------------------------------------------------------ */

static md_status pool_check(const char *op, const struct md_pool2d_args *a)
{
    MD_TRY(check_dtype(op, a->dtype));
    if (a->p != md_conv_out(a->h, a->kh, a->stride_h, a->pad_h, 1) ||
        a->q != md_conv_out(a->w, a->kw, a->stride_w, a->pad_w, 1) || a->p <= 0 || a->q <= 0)
        return md_errf(MD_ERR_INTERNAL, "ref %s: output %dx%d does not match input %dx%d", op, a->p,
                       a->q, a->h, a->w);
    return MD_OK;
}

/* Window of output (pi, qi), clipped to the input: rows [h0, h1), cols [w0, w1). */
static void pool_window(const struct md_pool2d_args *a, int pi, int qi, int *h0, int *h1, int *w0, int *w1)
{
    int hs = pi * a->stride_h - a->pad_h, ws = qi * a->stride_w - a->pad_w;
    *h0 = hs < 0 ? 0 : hs;
    *w0 = ws < 0 ? 0 : ws;
    *h1 = hs + a->kh > a->h ? a->h : hs + a->kh;
    *w1 = ws + a->kw > a->w ? a->w : ws + a->kw;
}

/* Offset of the first maximal element of a window (-1 if the window is empty). */
static long long pool_argmax(const struct md_pool2d_args *a, int ni, int ci, int pi, int qi)
{
    int h0, h1, w0, w1;
    pool_window(a, pi, qi, &h0, &h1, &w0, &w1);
    long long best = -1;
    double bv = 0.0;
    for (int hi = h0; hi < h1; hi++)
        for (int wi = w0; wi < w1; wi++) {
            size_t o = md_nchw_at(a->layout, a->c, a->h, a->w, ni, ci, hi, wi);
            double v = ld(a->x, a->dtype, o);
            if (best < 0 || v > bv) {
                best = (long long)o;
                bv = v;
            }
        }
    return best;
}

static double pool_divisor(const struct md_pool2d_args *a, int h0, int h1, int w0, int w1)
{
    return a->count_include_pad ? (double)a->kh * a->kw : (double)(h1 - h0) * (w1 - w0);
}

md_status md_ref_pool2d_fwd(md_device *dev, const struct md_pool2d_args *a)
{
    (void)dev;
    MD_TRY(pool_check("pool2d_fwd", a));
    for (int ni = 0; ni < a->n; ni++)
        for (int ci = 0; ci < a->c; ci++)
            for (int pi = 0; pi < a->p; pi++)
                for (int qi = 0; qi < a->q; qi++) {
                    double v = 0.0;
                    if (a->kind == MD_POOL_MAX) {
                        long long o = pool_argmax(a, ni, ci, pi, qi);
                        if (o >= 0) v = ld(a->x, a->dtype, (size_t)o);
                    } else {
                        int h0, h1, w0, w1;
                        pool_window(a, pi, qi, &h0, &h1, &w0, &w1);
                        double s = 0.0, div = pool_divisor(a, h0, h1, w0, w1);
                        for (int hi = h0; hi < h1; hi++)
                            for (int wi = w0; wi < w1; wi++)
                                s += ld(a->x, a->dtype, md_nchw_at(a->layout, a->c, a->h, a->w, ni, ci, hi, wi));
                        v = div > 0.0 ? s / div : 0.0;
                    }
                    st(a->y_out, a->dtype, md_nchw_at(a->layout, a->c, a->p, a->q, ni, ci, pi, qi), v, a->beta);
                }
    return MD_OK;
}

md_status md_ref_pool2d_bwd(md_device *dev, const struct md_pool2d_args *a)
{
    (void)dev;
    MD_TRY(pool_check("pool2d_bwd", a));
    size_t nx = (size_t)a->n * a->c * a->h * a->w;
    double *acc = md_calloc(nx ? nx : 1, sizeof *acc);
    if (!acc) return MD_ERR_OOM;
    for (int ni = 0; ni < a->n; ni++)
        for (int ci = 0; ci < a->c; ci++)
            for (int pi = 0; pi < a->p; pi++)
                for (int qi = 0; qi < a->q; qi++) {
                    double d = ld(a->dy, a->dtype, md_nchw_at(a->layout, a->c, a->p, a->q, ni, ci, pi, qi));
                    if (a->kind == MD_POOL_MAX) {
                        long long o = pool_argmax(a, ni, ci, pi, qi);
                        if (o >= 0) acc[o] += d;
                    } else {
                        int h0, h1, w0, w1;
                        pool_window(a, pi, qi, &h0, &h1, &w0, &w1);
                        double div = pool_divisor(a, h0, h1, w0, w1);
                        if (div <= 0.0) continue;
                        for (int hi = h0; hi < h1; hi++)
                            for (int wi = w0; wi < w1; wi++)
                                acc[md_nchw_at(a->layout, a->c, a->h, a->w, ni, ci, hi, wi)] += d / div;
                    }
                }
    for (size_t i = 0; i < nx; i++) st(a->dx, a->dtype, i, acc[i], a->beta);
    md_free(acc);
    return MD_OK;
}

/* ---- global average pooling ------------------------------------------------------------- */

md_status md_ref_gap_fwd(md_device *dev, const struct md_gap_args *a)
{
    (void)dev;
    MD_TRY(check_dtype("gap_fwd", a->dtype));
    for (int ni = 0; ni < a->n; ni++)
        for (int ci = 0; ci < a->c; ci++) {
            double s = 0.0;
            for (int i = 0; i < a->hw; i++) s += ld(a->x, a->dtype, md_nci(a->layout, a->c, a->hw, ni, ci, i));
            st(a->y, a->dtype, (size_t)ni * a->c + ci, s / a->hw, a->beta);
        }
    return MD_OK;
}

md_status md_ref_gap_bwd(md_device *dev, const struct md_gap_args *a)
{
    (void)dev;
    MD_TRY(check_dtype("gap_bwd", a->dtype));
    for (int ni = 0; ni < a->n; ni++)
        for (int ci = 0; ci < a->c; ci++) {
            double d = ld(a->dy, a->dtype, (size_t)ni * a->c + ci) / a->hw;
            for (int i = 0; i < a->hw; i++) st(a->dx, a->dtype, md_nci(a->layout, a->c, a->hw, ni, ci, i), d, a->beta);
        }
    return MD_OK;
}
