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
            if (a->dlogits) md_store_f(a->dlogits, a->dtype, row + j, (float)((double)a->grad_scale * (exp(z - lse) - t)));
        }
    }
    if (a->loss_sum) *a->loss_sum = (float)((double)*a->loss_sum + total);
    if (a->correct) *a->correct += correct;
    return MD_OK;
}
