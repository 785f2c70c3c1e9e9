/* ref_kernels.c - the reference kernel table: plain loops over the contract
 * of kernels.h, double accumulation, one thread, no BLAS. Every backend is
 * tested against these; they are written to be obviously right, not fast.
 *
 * Conventions beyond kernels.h (other backends follow them too):
 *   - `beta` applies to every float-like output the args name a beta for
 *     (out = result + beta * out; the old value is not read when beta == 0).
 *     Forward outputs of act, pool, gap, BN and dropout honour it as well.
 *   - A max-pooling window that lies entirely in the padding yields 0 and
 *     passes no gradient (PyTorch forbids such windows); likewise an average
 *     window with no valid element and count_include_pad == 0.
 *   - BN: gamma/beta_p NULL mean 1/0 (no affine); running stats NULL are not
 *     updated; dx, dgamma or dbeta NULL are not computed. Backward with
 *     training == 0 differentiates the inference form (running statistics).
 *   - Dropout backward recomputes the mask from (seed, offset) when mask is NULL.
 */
#include "backend/ref/ref_kernels.h"

#include <math.h>
#include <string.h>

#include "backend/ref/ref_math.h"
#include "core/mem.h"
#include "core/rng.h"

/* ---- helpers ---------------------------------------------------------------- */

static int is_float_type(md_dtype t) { return t == MD_F32 || t == MD_F16 || t == MD_BF16; }

static md_status check_dtype(const char *op, md_dtype t)
{
    if (is_float_type(t)) return MD_OK;
    return md_errf(MD_ERR_UNSUPPORTED, "ref %s: dtype %s is not supported (fp32, fp16, bf16)", op,
                   md_dtype_name(t));
}

static double ld(const void *p, md_dtype t, size_t i) { return (double)md_load_f(p, t, i); }

/* out[i] = v + beta * out[i], old value unread when beta == 0. */
static void st(void *p, md_dtype t, size_t i, double v, float beta)
{
    if (beta != 0.0f) v += (double)beta * ld(p, t, i);
    md_store_f(p, t, i, (float)v);
}

static void st32(float *p, size_t i, double v, float beta)
{
    if (beta != 0.0f) v += (double)beta * (double)p[i];
    p[i] = (float)v;
}

/* ---- GEMM --------------------------------------------------------------------- */

static md_status ref_gemm(md_device *dev, const struct md_gemm_args *a)
{
    (void)dev;
    MD_TRY(check_dtype("gemm", a->dtype));
    for (int bi = 0; bi < a->batch; bi++) {
        const void *A = (const char *)a->a + (size_t)(bi * a->stride_a) * md_dtype_size(a->dtype);
        const void *B = (const char *)a->b + (size_t)(bi * a->stride_b) * md_dtype_size(a->dtype);
        void *C = (char *)a->c + (size_t)(bi * a->stride_c) * md_dtype_size(a->dtype);
        for (int i = 0; i < a->m; i++)
            for (int j = 0; j < a->n; j++) {
                double acc = 0.0;
                for (int l = 0; l < a->k; l++) {
                    size_t ia = a->trans_a ? (size_t)l * a->lda + i : (size_t)i * a->lda + l;
                    size_t ib = a->trans_b ? (size_t)j * a->ldb + l : (size_t)l * a->ldb + j;
                    acc += ld(A, a->dtype, ia) * ld(B, a->dtype, ib);
                }
                st(C, a->dtype, (size_t)i * a->ldc + j, (double)a->alpha * acc, a->beta);
            }
    }
    return MD_OK;
}

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

static md_status ref_conv2d_fwd(md_device *dev, const struct md_conv2d_args *a)
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
                        for (int ri = 0; ri < a->r; ri++) {
                            int hi = pi * a->stride_h - a->pad_h + ri * a->dil_h;
                            if (hi < 0 || hi >= a->h) continue;
                            for (int si = 0; si < a->s; si++) {
                                int wi = qi * a->stride_w - a->pad_w + si * a->dil_w;
                                if (wi < 0 || wi >= a->w) continue;
                                acc += ld(a->x, a->dtype,
                                          md_nchw_at(a->layout, a->c, a->h, a->w, ni, g * cpg + cg, hi, wi)) *
                                       ld(a->wt, a->dtype, md_filter_at(a->layout, cpg, a->r, a->s, ki, cg, ri, si));
                            }
                        }
                    st(a->y, a->dtype, md_nchw_at(a->layout, a->k, a->p, a->q, ni, ki, pi, qi), acc, a->beta);
                }
        }
    return MD_OK;
}

static md_status ref_conv2d_bwd_data(md_device *dev, const struct md_conv2d_args *a)
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
                        for (int ri = 0; ri < a->r; ri++) {
                            int hi = pi * a->stride_h - a->pad_h + ri * a->dil_h;
                            if (hi < 0 || hi >= a->h) continue;
                            for (int si = 0; si < a->s; si++) {
                                int wi = qi * a->stride_w - a->pad_w + si * a->dil_w;
                                if (wi < 0 || wi >= a->w) continue;
                                acc[md_nchw_at(a->layout, a->c, a->h, a->w, ni, g * cpg + cg, hi, wi)] +=
                                    d * ld(a->wt, a->dtype, md_filter_at(a->layout, cpg, a->r, a->s, ki, cg, ri, si));
                            }
                        }
                }
        }
    for (size_t i = 0; i < nx; i++) st(a->dx, a->dtype, i, acc[i], a->beta);
    md_free(acc);
    return MD_OK;
}

static md_status ref_conv2d_bwd_filter(md_device *dev, const struct md_conv2d_args *a)
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
                        for (int pi = 0; pi < a->p; pi++) {
                            int hi = pi * a->stride_h - a->pad_h + ri * a->dil_h;
                            if (hi < 0 || hi >= a->h) continue;
                            for (int qi = 0; qi < a->q; qi++) {
                                int wi = qi * a->stride_w - a->pad_w + si * a->dil_w;
                                if (wi < 0 || wi >= a->w) continue;
                                acc += ld(a->x, a->dtype,
                                          md_nchw_at(a->layout, a->c, a->h, a->w, ni, g * cpg + cg, hi, wi)) *
                                       ld(a->dy, a->dtype, md_nchw_at(a->layout, a->k, a->p, a->q, ni, ki, pi, qi));
                            }
                        }
                    st(a->dwt, a->dtype, md_filter_at(a->layout, cpg, a->r, a->s, ki, cg, ri, si), acc, a->beta);
                }
    }
    return MD_OK;
}

/* ---- batch normalisation ------------------------------------------------------------ */

/* Batch mean and biased variance of channel ci. */
static void bn_stats(const struct md_batchnorm_args *a, int ci, double *mean, double *var)
{
    double m = (double)a->n * a->hw, s = 0.0, ss = 0.0;
    for (int ni = 0; ni < a->n; ni++)
        for (int i = 0; i < a->hw; i++) s += ld(a->x, a->dtype, md_nci(a->layout, a->c, a->hw, ni, ci, i));
    *mean = s / m;
    for (int ni = 0; ni < a->n; ni++)
        for (int i = 0; i < a->hw; i++) {
            double d = ld(a->x, a->dtype, md_nci(a->layout, a->c, a->hw, ni, ci, i)) - *mean;
            ss += d * d;
        }
    *var = ss / m;
}

static md_status ref_batchnorm_fwd(md_device *dev, const struct md_batchnorm_args *a)
{
    (void)dev;
    MD_TRY(check_dtype("batchnorm_fwd", a->dtype));
    double m = (double)a->n * a->hw;
    for (int ci = 0; ci < a->c; ci++) {
        double mean, var, invstd;
        if (a->training) {
            bn_stats(a, ci, &mean, &var);
            invstd = 1.0 / sqrt(var + (double)a->eps);
            if (a->save_mean) a->save_mean[ci] = (float)mean;
            if (a->save_invstd) a->save_invstd[ci] = (float)invstd;
            double mom = (double)a->momentum;
            double unbiased = m > 1.0 ? var * m / (m - 1.0) : var;
            if (a->running_mean)
                a->running_mean[ci] = (float)((1.0 - mom) * (double)a->running_mean[ci] + mom * mean);
            if (a->running_var)
                a->running_var[ci] = (float)((1.0 - mom) * (double)a->running_var[ci] + mom * unbiased);
        } else {
            mean = (double)a->running_mean[ci];
            invstd = 1.0 / sqrt((double)a->running_var[ci] + (double)a->eps);
        }
        double gam = a->gamma ? (double)a->gamma[ci] : 1.0;
        double bet = a->beta_p ? (double)a->beta_p[ci] : 0.0;
        for (int ni = 0; ni < a->n; ni++)
            for (int i = 0; i < a->hw; i++) {
                size_t o = md_nci(a->layout, a->c, a->hw, ni, ci, i);
                double v = (ld(a->x, a->dtype, o) - mean) * invstd * gam + bet;
                if (a->act == MD_ACT_RELU && v < 0.0) v = 0.0;
                st(a->y, a->dtype, o, v, a->beta);
            }
    }
    return MD_OK;
}

static md_status ref_batchnorm_bwd(md_device *dev, const struct md_batchnorm_args *a)
{
    (void)dev;
    MD_TRY(check_dtype("batchnorm_bwd", a->dtype));
    double m = (double)a->n * a->hw;
    for (int ci = 0; ci < a->c; ci++) {
        double mean, invstd;
        if (a->training) {
            if (a->save_mean && a->save_invstd) {
                mean = (double)a->save_mean[ci];
                invstd = (double)a->save_invstd[ci];
            } else {
                double var;
                bn_stats(a, ci, &mean, &var);
                invstd = 1.0 / sqrt(var + (double)a->eps);
            }
        } else {
            mean = (double)a->running_mean[ci];
            invstd = 1.0 / sqrt((double)a->running_var[ci] + (double)a->eps);
        }
        double gam = a->gamma ? (double)a->gamma[ci] : 1.0;
        double bet = a->beta_p ? (double)a->beta_p[ci] : 0.0;
        double sdy = 0.0, sdyx = 0.0;
        /* dy masked by the fused ReLU: where the output was 0 no gradient passes */
#define BN_DY(o, xh)                                                                             \
    ((a->act == MD_ACT_RELU && (a->y ? ld(a->y, a->dtype, o) <= 0.0 : (xh) * gam + bet <= 0.0)) \
         ? 0.0                                                                                   \
         : ld(a->dy, a->dtype, o))
        for (int ni = 0; ni < a->n; ni++)
            for (int i = 0; i < a->hw; i++) {
                size_t o = md_nci(a->layout, a->c, a->hw, ni, ci, i);
                double xh = (ld(a->x, a->dtype, o) - mean) * invstd;
                double d = BN_DY(o, xh);
                sdy += d;
                sdyx += d * xh;
            }
        if (a->dx)
            for (int ni = 0; ni < a->n; ni++)
                for (int i = 0; i < a->hw; i++) {
                    size_t o = md_nci(a->layout, a->c, a->hw, ni, ci, i);
                    double xh = (ld(a->x, a->dtype, o) - mean) * invstd;
                    double d = BN_DY(o, xh);
                    double v = a->training ? gam * invstd / m * (m * d - sdy - xh * sdyx) : gam * invstd * d;
                    st(a->dx, a->dtype, o, v, a->beta);
                }
#undef BN_DY
        if (a->dgamma) st32(a->dgamma, (size_t)ci, sdyx, a->beta);
        if (a->dbeta) st32(a->dbeta, (size_t)ci, sdy, a->beta);
    }
    return MD_OK;
}

/* ---- activations ----------------------------------------------------------------------- */

static md_status act_check(const char *op, const struct md_act_args *a)
{
    MD_TRY(check_dtype(op, a->dtype));
    if (a->act < 0 || a->act >= MD_ACT_COUNT)
        return md_errf(MD_ERR_INTERNAL, "ref %s: unknown activation %d", op, a->act);
    return MD_OK;
}

static md_status ref_act_fwd(md_device *dev, const struct md_act_args *a)
{
    (void)dev;
    MD_TRY(act_check("act_fwd", a));
    for (size_t i = 0; i < a->n; i++)
        st(a->y, a->dtype, i, md_act_d(a->act, ld(a->x, a->dtype, i), (double)a->alpha), a->beta);
    return MD_OK;
}

static md_status ref_act_bwd(md_device *dev, const struct md_act_args *a)
{
    (void)dev;
    MD_TRY(act_check("act_bwd", a));
    for (size_t i = 0; i < a->n; i++)
        st(a->dx, a->dtype, i,
           md_act_grad_d(a->act, ld(a->x, a->dtype, i), (double)a->alpha) * ld(a->dy, a->dtype, i), a->beta);
    return MD_OK;
}

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

static md_status ref_pool2d_fwd(md_device *dev, const struct md_pool2d_args *a)
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

static md_status ref_pool2d_bwd(md_device *dev, const struct md_pool2d_args *a)
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

static md_status ref_gap_fwd(md_device *dev, const struct md_gap_args *a)
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

static md_status ref_gap_bwd(md_device *dev, const struct md_gap_args *a)
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

/* ---- bias ------------------------------------------------------------------------------------ */

static md_status ref_bias_add(md_device *dev, const struct md_bias_args *a)
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

static md_status ref_bias_grad(md_device *dev, const struct md_bias_args *a)
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

static md_status ref_dropout_fwd(md_device *dev, const struct md_dropout_args *a)
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

static md_status ref_dropout_bwd(md_device *dev, const struct md_dropout_args *a)
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

static md_status ref_ew(md_device *dev, const struct md_ew_args *a)
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

static md_status ref_reduce(md_device *dev, const struct md_reduce_args *a)
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

static md_status ref_chslice(md_device *dev, const struct md_chslice_args *a)
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

/* ---- softmax cross-entropy -------------------------------------------------------------------------- */

static md_status ref_xent(md_device *dev, const struct md_xent_args *a)
{
    (void)dev;
    MD_TRY(check_dtype("xent", a->dtype));
    int C = a->classes;
    double sm = (double)a->smoothing, total = 0.0;
    int correct = 0;
    for (int ni = 0; ni < a->n; ni++) {
        int lab = a->labels[ni];
        if (lab < 0 || lab >= C)
            return md_errf(MD_ERR_DATA, "xent: label %d of sample %d is outside [0, %d)", lab, ni, C);
        size_t row = (size_t)ni * C;
        double mx = ld(a->logits, a->dtype, row);
        int arg = 0;
        for (int j = 1; j < C; j++) {
            double v = ld(a->logits, a->dtype, row + j);
            if (v > mx) {
                mx = v;
                arg = j;
            }
        }
        correct += arg == lab;
        double se = 0.0;
        for (int j = 0; j < C; j++) se += exp(ld(a->logits, a->dtype, row + j) - mx);
        double lse = mx + log(se);
        for (int j = 0; j < C; j++) {
            double z = ld(a->logits, a->dtype, row + j);
            double t = (j == lab ? 1.0 - sm : 0.0) + sm / C;
            total -= t * (z - lse);
            if (a->dlogits) md_store_f(a->dlogits, a->dtype, row + j, (float)((double)a->grad_scale * (exp(z - lse) - t)));
        }
    }
    if (a->loss_sum) *a->loss_sum = (float)((double)*a->loss_sum + total);
    if (a->correct) *a->correct += correct;
    return MD_OK;
}

/* ---- cast and permute --------------------------------------------------------------------------------- */

static md_status ref_cast(md_device *dev, const struct md_cast_args *a)
{
    (void)dev;
    MD_TRY(check_dtype("cast", a->src_type));
    MD_TRY(check_dtype("cast", a->dst_type));
    for (size_t i = 0; i < a->n; i++) md_store_f(a->dst, a->dst_type, i, md_load_f(a->src, a->src_type, i));
    return MD_OK;
}

static md_status ref_permute(md_device *dev, const struct md_permute_args *a)
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

/* ---- optimizer ------------------------------------------------------------------------------------------ */

static md_status ref_optim(md_device *dev, const struct md_optim_args *args)
{
    (void)dev;
    struct md_optim_args resolved;
    if (!md_optim_ctl_resolve(args, &resolved)) return MD_OK; /* non-finite step: skipped */
    const struct md_optim_args *a = &resolved;
    if (a->params_half) MD_TRY(check_dtype("optim", a->half_dtype));
    if (a->step < 1) return md_errf(MD_ERR_INTERNAL, "ref optim: step %lld < 1", a->step);
    double gs = (double)a->grad_scale * (a->grad_scale_dev ? (double)*a->grad_scale_dev : 1.0);
    double lr = (double)a->lr, wd = (double)a->weight_decay, mom = (double)a->momentum;
    double b1 = (double)a->beta1, b2 = (double)a->beta2, eps = (double)a->eps;
    double bc1 = 1.0 - pow(b1, (double)a->step), bc2 = 1.0 - pow(b2, (double)a->step);
    for (size_t i = 0; i < a->n; i++) {
        double p = (double)a->params[i], g = (double)a->grads[i] * gs;
        if (a->kind == MD_OPT_SGD) {
            g += wd * p;
            if (mom != 0.0) {
                double buf = a->step == 1 ? g : mom * (double)a->m[i] + g;
                a->m[i] = (float)buf;
                buf = (double)a->m[i]; /* what the next step will read */
                g = a->nesterov ? g + mom * buf : buf;
            }
            p -= lr * g;
        } else if (a->kind == MD_OPT_ADAMW) {
            p *= 1.0 - lr * wd;
            double m = b1 * (double)a->m[i] + (1.0 - b1) * g;
            double v = b2 * (double)a->v[i] + (1.0 - b2) * g * g;
            a->m[i] = (float)m;
            a->v[i] = (float)v;
            p -= lr * (m / bc1) / (sqrt(v / bc2) + eps);
        } else {
            return md_errf(MD_ERR_INTERNAL, "ref optim: unknown kind %d", a->kind);
        }
        a->params[i] = (float)p;
        if (a->params_half) md_store_f(a->params_half, a->half_dtype, i, a->params[i]);
    }
    return MD_OK;
}

const struct md_kernels md_ref_kernels = {
    .gemm = ref_gemm,
    .conv2d_fwd = ref_conv2d_fwd,
    .conv2d_bwd_data = ref_conv2d_bwd_data,
    .conv2d_bwd_filter = ref_conv2d_bwd_filter,
    .batchnorm_fwd = ref_batchnorm_fwd,
    .batchnorm_bwd = ref_batchnorm_bwd,
    .act_fwd = ref_act_fwd,
    .act_bwd = ref_act_bwd,
    .pool2d_fwd = ref_pool2d_fwd,
    .pool2d_bwd = ref_pool2d_bwd,
    .gap_fwd = ref_gap_fwd,
    .gap_bwd = ref_gap_bwd,
    .bias_add = ref_bias_add,
    .bias_grad = ref_bias_grad,
    .dropout_fwd = ref_dropout_fwd,
    .dropout_bwd = ref_dropout_bwd,
    .ew = ref_ew,
    .reduce = ref_reduce,
    .chslice = ref_chslice,
    .xent = ref_xent,
    .cast = ref_cast,
    .permute = ref_permute,
    .optim = ref_optim,
};
