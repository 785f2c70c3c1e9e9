/* ref_eltwise.c - reference activations, bias, dropout, element-wise
 * arithmetic, reductions, channel slices, casts, layout permutes: plain loops,
 * double accumulation (ref_kernels.c states the conventions). */
#include "backend/ref/ref_internal.h"

#include <string.h>

#include "core/rng.h"

/* ---- activations ----------------------------------------------------------------------- */

static md_status act_check(const char *op, const struct md_act_args *a)
{
    MD_TRY(check_dtype(op, a->dtype));
    if (a->act < 0 || a->act >= MD_ACT_COUNT)
        return md_errf(MD_ERR_INTERNAL, "ref %s: unknown activation %d", op, a->act);
    return MD_OK;
}

md_status md_ref_act_fwd(md_device *dev, const struct md_act_args *a)
{
    (void)dev;
    MD_TRY(act_check("act_fwd", a));
    for (size_t i = 0; i < a->n; i++)
        st(a->y, a->dtype, i, md_act_d(a->act, ld(a->x, a->dtype, i), (double)a->alpha), a->beta);
    return MD_OK;
}

md_status md_ref_act_bwd(md_device *dev, const struct md_act_args *a)
{
    (void)dev;
    MD_TRY(act_check("act_bwd", a));
    for (size_t i = 0; i < a->n; i++)
        st(a->dx, a->dtype, i,
           md_act_grad_d(a->act, ld(a->x, a->dtype, i), (double)a->alpha) * ld(a->dy, a->dtype, i), a->beta);
    return MD_OK;
}

/* ---- bias ------------------------------------------------------------------------------------ */

md_status md_ref_bias_add(md_device *dev, const struct md_bias_args *a)
{
    (void)dev;
    MD_TRY(check_dtype("bias_add", a->dtype));
    for (int ni = 0; ni < a->n; ni++)
        for (int ci = 0; ci < a->c; ci++)
            for (int i = 0; i < a->hw; i++) {
                size_t o = md_nci(a->layout, a->c, a->hw, ni, ci, i);
                md_store_f(a->y, a->dtype, o, (float)(ld(a->y, a->dtype, o) + (double)a->bias[ci]));
            }
    return MD_OK;
}

md_status md_ref_bias_grad(md_device *dev, const struct md_bias_args *a)
{
    (void)dev;
    MD_TRY(check_dtype("bias_grad", a->dtype));
    for (int ci = 0; ci < a->c; ci++) {
        double s = 0.0;
        for (int ni = 0; ni < a->n; ni++)
            for (int i = 0; i < a->hw; i++) s += ld(a->dy, a->dtype, md_nci(a->layout, a->c, a->hw, ni, ci, i));
        st32(a->dbias, (size_t)ci, s, a->beta);
    }
    return MD_OK;
}

/* ---- dropout ------------------------------------------------------------------------------------ */

static double dropout_scale(float p) { return p < 1.0f ? 1.0 / (1.0 - (double)p) : 0.0; }

md_status md_ref_dropout_fwd(md_device *dev, const struct md_dropout_args *a)
{
    (void)dev;
    MD_TRY(check_dtype("dropout_fwd", a->dtype));
    double scale = dropout_scale(a->p);
    for (size_t i = 0; i < a->n; i++) {
        int keep = !(md_rng_uniform(a->seed, md_dropout_offset(a) + i) < a->p);
        if (a->mask) a->mask[i] = (uint8_t)keep;
        st(a->y, a->dtype, i, keep ? ld(a->x, a->dtype, i) * scale : 0.0, a->beta);
    }
    return MD_OK;
}

md_status md_ref_dropout_bwd(md_device *dev, const struct md_dropout_args *a)
{
    (void)dev;
    MD_TRY(check_dtype("dropout_bwd", a->dtype));
    double scale = dropout_scale(a->p);
    for (size_t i = 0; i < a->n; i++) {
        int keep = a->mask ? a->mask[i] != 0 : !(md_rng_uniform(a->seed, md_dropout_offset(a) + i) < a->p);
        st(a->dx, a->dtype, i, keep ? ld(a->dy, a->dtype, i) * scale : 0.0, a->beta);
    }
    return MD_OK;
}

/* ---- element-wise, reductions, channel slices ----------------------------------------------------- */

md_status md_ref_ew(md_device *dev, const struct md_ew_args *a)
{
    (void)dev;
    MD_TRY(check_dtype("ew", a->dtype));
    double s = a->scale_dev ? (double)*a->scale_dev : 1.0;
    for (size_t i = 0; i < a->n; i++) {
        double v;
        switch (a->op) {
        case MD_EW_AXPBY:
            v = (double)a->alpha * s * ld(a->a, a->dtype, i);
            if (a->beta != 0.0f) v += (double)a->beta * ld(a->b, a->dtype, i);
            break;
        case MD_EW_MUL: v = ld(a->a, a->dtype, i) * ld(a->b, a->dtype, i); break;
        case MD_EW_FILL: v = (double)a->alpha; break;
        case MD_EW_COPY: v = ld(a->a, a->dtype, i); break;
        default: return md_errf(MD_ERR_INTERNAL, "ref ew: unknown op %d", a->op);
        }
        md_store_f(a->y, a->dtype, i, (float)v);
    }
    return MD_OK;
}

md_status md_ref_reduce(md_device *dev, const struct md_reduce_args *a)
{
    (void)dev;
    MD_TRY(check_dtype("reduce", a->dtype));
    double s = 0.0;
    for (size_t i = 0; i < a->n; i++) {
        double v = ld(a->a, a->dtype, i);
        switch (a->op) {
        case MD_RED_SUM: s += v; break;
        case MD_RED_SUMSQ: s += v * v; break;
        case MD_RED_DOT: s += v * ld(a->b, a->dtype, i); break;
        default: return md_errf(MD_ERR_INTERNAL, "ref reduce: unknown op %d", a->op);
        }
    }
    st32(a->out, 0, s, a->beta);
    return MD_OK;
}

md_status md_ref_chslice(md_device *dev, const struct md_chslice_args *a)
{
    (void)dev;
    MD_TRY(check_dtype("chslice", a->dtype));
    for (int ni = 0; ni < a->n; ni++)
        for (int cc = 0; cc < a->cc; cc++)
            for (int i = 0; i < a->hw; i++)
                st(a->dst, a->dtype, md_nci(a->layout, a->dst_c, a->hw, ni, a->dst_off + cc, i),
                   ld(a->src, a->dtype, md_nci(a->layout, a->src_c, a->hw, ni, a->src_off + cc, i)), a->beta);
    return MD_OK;
}

/* ---- cast and permute --------------------------------------------------------------------------------- */

md_status md_ref_cast(md_device *dev, const struct md_cast_args *a)
{
    (void)dev;
    MD_TRY(check_dtype("cast", a->src_type));
    MD_TRY(check_dtype("cast", a->dst_type));
    for (size_t i = 0; i < a->n; i++) md_store_f(a->dst, a->dst_type, i, md_load_f(a->src, a->src_type, i));
    return MD_OK;
}

md_status md_ref_permute(md_device *dev, const struct md_permute_args *a)
{
    (void)dev;
    MD_TRY(check_dtype("permute", a->dtype));
    size_t es = md_dtype_size(a->dtype);
    md_layout from = a->to_nhwc ? MD_NCHW : MD_NHWC, to = a->to_nhwc ? MD_NHWC : MD_NCHW;
    for (int ni = 0; ni < a->n; ni++)
        for (int ci = 0; ci < a->c; ci++)
            for (int hi = 0; hi < a->h; hi++)
                for (int wi = 0; wi < a->w; wi++)
                    memcpy((char *)a->dst + md_nchw_at(to, a->c, a->h, a->w, ni, ci, hi, wi) * es,
                           (const char *)a->src + md_nchw_at(from, a->c, a->h, a->w, ni, ci, hi, wi) * es, es);
    return MD_OK;
}
