/* bn_sync.c - synchronised batch norm's exchanges (bn_sync.h). */
#include "backend/bn_sync.h"

#include "core/mem.h"

static md_status exchange(const struct md_batchnorm_args *a, float *buf, size_t n)
{
    if (!a->sync || !a->sync->allreduce) return MD_OK; /* one rank */
    return a->sync->allreduce(a->sync->ctx, buf, n);
}

/* Two exchanges: (m * mean, m) gives the count N and a first global mean
 * mu0 (fp32's rounding of m * mean, several ulps of the mean far from 0);
 * then (m * d, M2 + m * d^2) with d = mean - mu0 corrects the mean and
 * gives M2 around it (Chan's combination): mean = mu0 + sum m d / N,
 * M2 = sum (M2 + m d^2) - (sum m d)^2 / N. The same scheme as the CUDA
 * kernels' (cuda_norm.cu). */
md_status md_bn_sync_stats(const struct md_batchnorm_args *a, double m, double *mean, double *var, double *n)
{
    int C = a->c;
    float *b = md_malloc(sizeof(float) * (2 * (size_t)C + 1));
    if (!b) return md_errf(MD_ERR_OOM, "batchnorm: cannot allocate the synchronised statistics");
    /* an empty batch adds nothing (its mean and var may be NaN) */
    for (int ci = 0; ci < C; ci++) b[ci] = m > 0 ? (float)(m * mean[ci]) : 0.0f;
    b[C] = (float)m;
    md_status st = exchange(a, b, (size_t)C + 1);
    if (st == MD_OK) {
        double N = (double)b[C];
        double *mu0 = md_malloc(sizeof(double) * ((size_t)C + 1));
        if (!mu0) st = md_errf(MD_ERR_OOM, "batchnorm: cannot allocate the synchronised statistics");
        for (int ci = 0; mu0 && ci < C; ci++) {
            mu0[ci] = (double)b[ci] / N;
            double d = mean[ci] - mu0[ci];
            b[ci] = m > 0 ? (float)(m * d) : 0.0f;
            b[C + ci] = m > 0 ? (float)(m * var[ci] + m * d * d) : 0.0f;
        }
        if (st == MD_OK) st = exchange(a, b, 2 * (size_t)C);
        if (st == MD_OK)
            for (int ci = 0; ci < C; ci++) {
                double corr = (double)b[ci], m2 = (double)b[C + ci] - corr * corr / N;
                mean[ci] = mu0[ci] + corr / N;
                var[ci] = (m2 > 0 ? m2 : 0.0) / N;
            }
        *n = N;
        md_free(mu0);
    }
    md_free(b);
    return st;
}

md_status md_bn_sync_sums(const struct md_batchnorm_args *a, double m, double *s1, double *s2, double *n)
{
    int C = a->c;
    float *b = md_malloc(sizeof(float) * (2 * (size_t)C + 1));
    if (!b) return md_errf(MD_ERR_OOM, "batchnorm: cannot allocate the synchronised sums");
    for (int ci = 0; ci < C; ci++) {
        b[ci] = (float)s1[ci];
        b[C + ci] = (float)s2[ci];
    }
    b[2 * C] = (float)m;
    md_status st = exchange(a, b, 2 * (size_t)C + 1);
    if (st == MD_OK) {
        for (int ci = 0; ci < C; ci++) {
            s1[ci] = (double)b[ci];
            s2[ci] = (double)b[C + ci];
        }
        *n = (double)b[2 * C];
    }
    md_free(b);
    return st;
}
