/* ref_norm.c - reference batch normalisation: plain loops, double accumulation
 * (ref_kernels.c states the conventions). */
#include "backend/bn_sync.h"
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

/* Synchronised statistics (a->sync, kernels.h): every channel's statistics
 * or sums first, then the exchange (bn_sync.h), then the rest. */
md_status md_ref_batchnorm_fwd(md_device *dev, const struct md_batchnorm_args *a)
{
    (void)dev;
    MD_TRY(check_dtype("batchnorm_fwd", a->dtype));
    if (a->pool) return md_errf(MD_ERR_UNSUPPORTED, "ref batchnorm_fwd: a fused max pool is not supported");
    double m = (double)a->n * a->hw;
    double *stat = md_malloc(sizeof(double) * (2 * (size_t)a->c + 1)), *mu = stat, *va = stat + a->c;
    if (!stat) return md_errf(MD_ERR_OOM, "ref batchnorm_fwd: cannot allocate the statistics");
    if (a->training) {
        for (int ci = 0; ci < a->c; ci++) bn_stats(a, ci, &mu[ci], &va[ci]);
        if (a->sync) {
            md_status st = md_bn_sync_stats(a, m, mu, va, &m);
            if (st != MD_OK) {
                md_free(stat);
                return st;
            }
        }
    }
    for (int ci = 0; ci < a->c; ci++) {
        double mean, var, invstd;
        if (a->training) {
            mean = mu[ci];
            var = va[ci];
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
                if (a->res) v += ld(a->res, a->dtype, o);
                if (a->act == MD_ACT_RELU && v < 0.0) v = 0.0;
                st(a->y, a->dtype, o, v, a->beta);
            }
    }
    md_free(stat);
    return MD_OK;
}

/* mean and invstd of channel ci as the forward used them */
static void bwd_stats(const struct md_batchnorm_args *a, int ci, double *mean, double *invstd)
{
    if (a->training) {
        if (a->save_mean && a->save_invstd) {
            *mean = (double)a->save_mean[ci];
            *invstd = (double)a->save_invstd[ci];
        } else {
            double var;
            bn_stats(a, ci, mean, &var);
            *invstd = 1.0 / sqrt(var + (double)a->eps);
        }
    } else {
        *mean = (double)a->running_mean[ci];
        *invstd = 1.0 / sqrt((double)a->running_var[ci] + (double)a->eps);
    }
}

/* dy masked by the fused ReLU: where the output was 0 no gradient passes
 * (y is given with a residual, kernels.h) */
static double bn_dy(const struct md_batchnorm_args *a, size_t o, double xh, double gam, double bet)
{
    if (a->act == MD_ACT_RELU && (a->y ? ld(a->y, a->dtype, o) <= 0.0 : xh * gam + bet <= 0.0)) return 0.0;
    return ld(a->dy, a->dtype, o);
}

md_status md_ref_batchnorm_bwd(md_device *dev, const struct md_batchnorm_args *a)
{
    (void)dev;
    MD_TRY(check_dtype("batchnorm_bwd", a->dtype));
    if (a->pool) return md_errf(MD_ERR_UNSUPPORTED, "ref batchnorm_bwd: a fused max pool is not supported");
    if (a->res && a->act == MD_ACT_RELU && !a->y)
        return md_errf(MD_ERR_USAGE, "ref batchnorm_bwd: a residual with a ReLU needs the forward's output");
    int sync = a->training && a->sync;
    if (sync && !(a->save_mean && a->save_invstd))
        return md_errf(MD_ERR_USAGE, "ref batchnorm_bwd: synchronised statistics need the forward's saved ones");
    double m = (double)a->n * a->hw;
    /* this rank's sum dy, sum dy*xhat; g: the ones dx uses (every rank's with sync) */
    double *sum = md_malloc(sizeof(double) * (4 * (size_t)a->c + 1));
    if (!sum) return md_errf(MD_ERR_OOM, "ref batchnorm_bwd: cannot allocate the sums");
    double *sdy = sum, *sdyx = sum + a->c, *gdy = sum + 2 * a->c, *gdyx = sum + 3 * a->c;
    for (int ci = 0; ci < a->c; ci++) {
        double mean, invstd;
        bwd_stats(a, ci, &mean, &invstd);
        double gam = a->gamma ? (double)a->gamma[ci] : 1.0;
        double bet = a->beta_p ? (double)a->beta_p[ci] : 0.0;
        sdy[ci] = sdyx[ci] = 0.0;
        for (int ni = 0; ni < a->n; ni++)
            for (int i = 0; i < a->hw; i++) {
                size_t o = md_nci(a->layout, a->c, a->hw, ni, ci, i);
                double xh = (ld(a->x, a->dtype, o) - mean) * invstd;
                double d = bn_dy(a, o, xh, gam, bet);
                if (a->dres) st(a->dres, a->dtype, o, d, a->beta_res);
                sdy[ci] += d;
                sdyx[ci] += d * xh;
            }
        gdy[ci] = sdy[ci];
        gdyx[ci] = sdyx[ci];
    }
    if (sync) {
        md_status s = md_bn_sync_sums(a, m, gdy, gdyx, &m);
        if (s != MD_OK) {
            md_free(sum);
            return s;
        }
    }
    for (int ci = 0; ci < a->c; ci++) {
        double mean, invstd;
        bwd_stats(a, ci, &mean, &invstd);
        double gam = a->gamma ? (double)a->gamma[ci] : 1.0;
        double bet = a->beta_p ? (double)a->beta_p[ci] : 0.0;
        if (a->dx)
            for (int ni = 0; ni < a->n; ni++)
                for (int i = 0; i < a->hw; i++) {
                    size_t o = md_nci(a->layout, a->c, a->hw, ni, ci, i);
                    double xh = (ld(a->x, a->dtype, o) - mean) * invstd;
                    double d = bn_dy(a, o, xh, gam, bet);
                    double v = a->training ? gam * invstd / m * (m * d - gdy[ci] - xh * gdyx[ci]) : gam * invstd * d;
                    st(a->dx, a->dtype, o, v, a->beta);
                }
        if (a->dgamma) st32(a->dgamma, (size_t)ci, sdyx[ci], a->beta);
        if (a->dbeta) st32(a->dbeta, (size_t)ci, sdy[ci], a->beta);
    }
    md_free(sum);
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
