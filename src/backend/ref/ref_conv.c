/* ref_conv.c - reference 2-D convolutions (forward, data and filter
 * gradients): plain loops, double accumulation (ref_kernels.c states the
 * conventions). */
#include "backend/ref/ref_internal.h"

#include "core/mem.h"

/* ---- convolution ------------------------------------------------------------------ */

static md_status conv_check(const char *op, const struct md_conv2d_args *a)
{
    MD_TRY(check_dtype(op, a->dtype));
    if (a->groups < 1 || a->c % a->groups || a->k % a->groups)
        return md_errf(MD_ERR_INTERNAL, "ref %s: groups %d must divide c %d and k %d", op, a->groups,
                       a->c, a->k);
    if (a->p != md_conv_out(a->h, a->r, a->stride_h, a->pad_h, a->dil_h) ||
        a->q != md_conv_out(a->w, a->s, a->stride_w, a->pad_w, a->dil_w) || a->p <= 0 || a->q <= 0)
        return md_errf(MD_ERR_INTERNAL, "ref %s: output %dx%d does not match input %dx%d", op, a->p,
                       a->q, a->h, a->w);
    return MD_OK;
}

/* The input element tap (ri, si) of output (pi, qi) reads in image ni,
 * channel ci; 0 for padding (else its index + 1). */
static size_t tap_at(const struct md_conv2d_args *a, int ni, int ci, int pi, int qi, int ri, int si)
{
    int hi = pi * a->stride_h - a->pad_h + ri * a->dil_h, wi = qi * a->stride_w - a->pad_w + si * a->dil_w;
    if (hi < 0 || hi >= a->h || wi < 0 || wi >= a->w) return 0;
    return md_nchw_at(a->layout, a->c, a->h, a->w, ni, ci, hi, wi) + 1;
}

md_status md_ref_conv2d_fwd(md_device *dev, const struct md_conv2d_args *a)
{
    (void)dev;
    MD_TRY(conv_check("conv2d_fwd", a));
    int cpg = a->c / a->groups, kpg = a->k / a->groups;
    for (int ni = 0; ni < a->n; ni++)
        for (int ki = 0; ki < a->k; ki++) {
            int g = ki / kpg;
            for (int pi = 0; pi < a->p; pi++)
                for (int qi = 0; qi < a->q; qi++) {
                    double acc = 0.0;
                    for (int cg = 0; cg < cpg; cg++)
                        for (int ri = 0; ri < a->r; ri++)
                            for (int si = 0; si < a->s; si++) {
                                size_t xi = tap_at(a, ni, g * cpg + cg, pi, qi, ri, si);
                                if (!xi) continue;
                                acc += ld(a->x, a->dtype, xi - 1) *
                                       ld(a->wt, a->dtype, md_filter_at(a->layout, cpg, a->r, a->s, ki, cg, ri, si));
                            }
                    st(a->y, a->dtype, md_nchw_at(a->layout, a->k, a->p, a->q, ni, ki, pi, qi), acc, a->beta);
                }
        }
    return MD_OK;
}

md_status md_ref_conv2d_bwd_data(md_device *dev, const struct md_conv2d_args *a)
{
    (void)dev;
    MD_TRY(conv_check("conv2d_bwd_data", a));
    int cpg = a->c / a->groups, kpg = a->k / a->groups;
    size_t nx = (size_t)a->n * a->c * a->h * a->w;
    double *acc = md_calloc(nx ? nx : 1, sizeof *acc);
    if (!acc) return MD_ERR_OOM;
    /* scatter every output gradient back along the forward's gather */
    for (int ni = 0; ni < a->n; ni++)
        for (int ki = 0; ki < a->k; ki++) {
            int g = ki / kpg;
            for (int pi = 0; pi < a->p; pi++)
                for (int qi = 0; qi < a->q; qi++) {
                    double d = ld(a->dy, a->dtype, md_nchw_at(a->layout, a->k, a->p, a->q, ni, ki, pi, qi));
                    for (int cg = 0; cg < cpg; cg++)
                        for (int ri = 0; ri < a->r; ri++)
                            for (int si = 0; si < a->s; si++) {
                                size_t xi = tap_at(a, ni, g * cpg + cg, pi, qi, ri, si);
                                if (!xi) continue;
                                acc[xi - 1] +=
                                    d * ld(a->wt, a->dtype, md_filter_at(a->layout, cpg, a->r, a->s, ki, cg, ri, si));
                            }
                }
        }
    for (size_t i = 0; i < nx; i++) st(a->dx, a->dtype, i, acc[i], a->beta);
    md_free(acc);
    return MD_OK;
}

md_status md_ref_conv2d_bwd_filter(md_device *dev, const struct md_conv2d_args *a)
{
    (void)dev;
    MD_TRY(conv_check("conv2d_bwd_filter", a));
    int cpg = a->c / a->groups, kpg = a->k / a->groups;
    for (int ki = 0; ki < a->k; ki++) {
        int g = ki / kpg;
        for (int cg = 0; cg < cpg; cg++)
            for (int ri = 0; ri < a->r; ri++)
                for (int si = 0; si < a->s; si++) {
                    double acc = 0.0;
                    for (int ni = 0; ni < a->n; ni++)
                        for (int pi = 0; pi < a->p; pi++)
                            for (int qi = 0; qi < a->q; qi++) {
                                size_t xi = tap_at(a, ni, g * cpg + cg, pi, qi, ri, si);
                                if (!xi) continue;
                                acc += ld(a->x, a->dtype, xi - 1) *
                                       ld(a->dy, a->dtype, md_nchw_at(a->layout, a->k, a->p, a->q, ni, ki, pi, qi));
                            }
                    st(a->dwt, a->dtype, md_filter_at(a->layout, cpg, a->r, a->s, ki, cg, ri, si), acc, a->beta);
                }
    }
    return MD_OK;
}
