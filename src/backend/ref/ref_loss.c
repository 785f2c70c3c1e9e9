/* ref_loss.c - reference softmax cross-entropy with label smoothing: plain
 * loops, double accumulation (ref_kernels.c states the conventions). */
#include "backend/ref/ref_internal.h"

#include <math.h>

/* ---- softmax cross-entropy -------------------------------------------------------------------------- */

md_status md_ref_xent(md_device *dev, const struct md_xent_args *a)
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
            if (a->dlogits) md_store_f(a->dlogits, a->dtype, row + j, (float)((double)md_xent_grad_scale(a) * (exp(z - lse) - t)));
        }
    }
    if (a->loss_sum) *a->loss_sum = (float)((double)*a->loss_sum + total);
    if (a->correct) *a->correct += correct;
    return MD_OK;
}

/* ---- regression losses (kernels.h states the formulas) ------------------------------------------------------------ */

md_status md_ref_regress(md_device *dev, const struct md_regress_args *a)
{
    (void)dev;
    MD_TRY(check_dtype("regress", a->dtype));
    MD_TRY(md_regress_args_check("ref", a));
    const int H = a->horizon, C = a->channels;
    double loss = 0.0, sae = 0.0, sse = 0.0, hits = 0.0;
    for (int ni = 0; ni < a->n; ni++)
        for (int t = 0; t < H; t++)
            for (int c = 0; c < C; c++) {
                size_t i = ((size_t)ni * H + t) * C + c;
                double p = ld(a->pred, a->dtype, i), y = (double)a->target[i], e = p - y, ae = fabs(e);
                double l = 0.0, g = 0.0;
                double dp = 0.0, dt = 0.0;
                if (a->last) {
                    double x = (double)a->last[(size_t)ni * (size_t)a->last_ld + c];
                    dp = p - x;
                    dt = y - x;
                    hits += (dp > 0) - (dp < 0) == (dt > 0) - (dt < 0);
                }
                switch (a->kind) {
                case MD_REGRESS_MSE: l = e * e; g = 2.0 * e; break;
                case MD_REGRESS_MAE: l = ae; g = (e > 0) - (e < 0); break;
                case MD_REGRESS_HUBER: {
                    double d = (double)a->delta;
                    if (ae <= d) l = 0.5 * e * e, g = e;
                    else l = d * (ae - 0.5 * d), g = e > 0 ? d : -d;
                    break;
                }
                case MD_REGRESS_FINANCIAL:
                    l = e * e;
                    g = 2.0 * e;
                    if ((dp > 0 && dt < 0) || (dp < 0 && dt > 0)) { /* signs, not the product: it may underflow */
                        l -= (double)a->lambda * dp * dt;
                        g -= (double)a->lambda * dt;
                    }
                    break;
                }
                loss += l;
                sae += ae;
                sse += e * e;
                if (a->dpred) md_store_f(a->dpred, a->dtype, i, (float)((double)a->grad_scale * g));
            }
    if (a->loss_sum) *a->loss_sum = (float)((double)*a->loss_sum + loss);
    if (a->metrics) {
        a->metrics[0] = (float)((double)a->metrics[0] + sae);
        a->metrics[1] = (float)((double)a->metrics[1] + sse);
        if (a->last) a->metrics[2] = (float)((double)a->metrics[2] + hits);
    }
    return MD_OK;
}
