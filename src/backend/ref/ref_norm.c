/* ref_norm.c - reference batch normalisation: plain loops, double accumulation
 * (ref_kernels.c states the conventions). */
#include "backend/ref/ref_internal.h"

#include <math.h>
#include "core/mem.h"

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

md_status md_ref_batchnorm_fwd(md_device *dev, const struct md_batchnorm_args *a)
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

md_status md_ref_batchnorm_bwd(md_device *dev, const struct md_batchnorm_args *a)
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

/* ---- layer normalisation over the last dimension ------------------------------------------ */

/* Mean and 1/sqrt(biased var + eps) of row r. */
static void ln_stats(const struct md_layernorm_args *a, int r, double *mean, double *rstd)
{
    size_t o = (size_t)r * a->d;
    double s = 0.0, ss = 0.0;
    for (int j = 0; j < a->d; j++) s += ld(a->x, a->dtype, o + j);
    double mu = s / a->d;
    for (int j = 0; j < a->d; j++) {
        double v = ld(a->x, a->dtype, o + j) - mu;
        ss += v * v;
    }
    *mean = mu;
    *rstd = 1.0 / sqrt(ss / a->d + (double)a->eps);
}

md_status md_ref_layernorm_fwd(md_device *dev, const struct md_layernorm_args *a)
{
    (void)dev;
    MD_TRY(check_dtype("layernorm_fwd", a->dtype));
    for (int r = 0; r < a->rows; r++) {
        double mean, rstd;
        ln_stats(a, r, &mean, &rstd);
        if (a->mean) a->mean[r] = (float)mean;
        if (a->rstd) a->rstd[r] = (float)rstd;
        size_t o = (size_t)r * a->d;
        for (int j = 0; j < a->d; j++) {
            double g = a->gamma ? (double)a->gamma[j] : 1.0, b = a->beta_p ? (double)a->beta_p[j] : 0.0;
            st(a->y, a->dtype, o + j, (ld(a->x, a->dtype, o + j) - mean) * rstd * g + b, a->beta);
        }
    }
    return MD_OK;
}

md_status md_ref_layernorm_bwd(md_device *dev, const struct md_layernorm_args *a)
{
    (void)dev;
    MD_TRY(check_dtype("layernorm_bwd", a->dtype));
    int D = a->d;
    /* dgamma/dbeta sum over every row: accumulated in double, stored at the end */
    double *dg = md_calloc((size_t)(D > 0 ? D : 1) * 2, sizeof(double));
    if (!dg) return md_errf(MD_ERR_OOM, "ref layernorm_bwd: out of memory");
    double *db = dg + D;
    for (int r = 0; r < a->rows; r++) {
        double mean, rstd;
        if (a->mean && a->rstd) mean = (double)a->mean[r], rstd = (double)a->rstd[r];
        else ln_stats(a, r, &mean, &rstd);
        size_t o = (size_t)r * D;
        double sg = 0.0, sgx = 0.0;
        for (int j = 0; j < D; j++) {
            double xh = (ld(a->x, a->dtype, o + j) - mean) * rstd, dy = ld(a->dy, a->dtype, o + j);
            double g = dy * (a->gamma ? (double)a->gamma[j] : 1.0);
            sg += g;
            sgx += g * xh;
            dg[j] += dy * xh;
            db[j] += dy;
        }
        if (!a->dx) continue;
        for (int j = 0; j < D; j++) {
            double xh = (ld(a->x, a->dtype, o + j) - mean) * rstd;
            double g = ld(a->dy, a->dtype, o + j) * (a->gamma ? (double)a->gamma[j] : 1.0);
            st(a->dx, a->dtype, o + j, rstd * (g - sg / D - xh * sgx / D), a->beta);
        }
    }
    for (int j = 0; j < D; j++) {
        if (a->dgamma) st32(a->dgamma, (size_t)j, dg[j], a->beta);
        if (a->dbeta) st32(a->dbeta, (size_t)j, db[j], a->beta);
    }
    md_free(dg);
    return MD_OK;
}
