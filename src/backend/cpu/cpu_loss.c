/* cpu_loss.c - softmax cross-entropy with label smoothing, fused: per-row
 * partials combined in row order (independent of the thread count). */
#include <math.h>

#include "backend/cpu/cpu_internal.h"
#include "core/mem.h"

/* ---- softmax cross-entropy: per-row partials, combined in row order ---------------------------------------- */

struct xent_ctx { const struct md_xent_args *a; double *loss; int *hit; int bad_row; };

static void xent_range(void *vc, long long b, long long e)
{
    struct xent_ctx *c = vc;
    const struct md_xent_args *a = c->a;
    int C = a->classes;
    double sm = (double)a->smoothing;
    for (long long ni = b; ni < e; ni++) {
        int lab = a->labels[ni];
        c->loss[ni] = 0.0;
        c->hit[ni] = 0;
        if (lab < 0 || lab >= C) continue;
        size_t row = (size_t)ni * C;
        float mx = md_load_f(a->logits, a->dtype, row);
        int arg = 0;
        for (int j = 1; j < C; j++) {
            float v = md_load_f(a->logits, a->dtype, row + j);
            if (v > mx) mx = v, arg = j;
        }
        c->hit[ni] = arg == lab;
        double se = 0.0, sz = 0.0;
        for (int j = 0; j < C; j++) {
            double z = (double)md_load_f(a->logits, a->dtype, row + j) - (double)mx;
            se += exp(z);
            sz += z;
        }
        double lse = log(se); /* relative to mx */
        double zl = (double)md_load_f(a->logits, a->dtype, row + lab) - (double)mx;
        /* -sum_j t_j (z_j - lse) with t = (1-sm) onehot + sm/C */
        c->loss[ni] = -((1.0 - sm) * (zl - lse) + sm / C * (sz - C * lse));
        if (a->dlogits) {
            float gsc = a->grad_scale;
            for (int j = 0; j < C; j++) {
                double z = (double)md_load_f(a->logits, a->dtype, row + j) - (double)mx;
                double t = (j == lab ? 1.0 - sm : 0.0) + sm / C;
                md_store_f(a->dlogits, a->dtype, row + j, gsc * (float)(exp(z - lse) - t));
            }
        }
    }
}

md_status md_cpu_xent(md_device *dev, const struct md_xent_args *a)
{
    (void)dev;
    MD_TRY(md_cpu_dtype_check("xent", a->dtype));
    for (int i = 0; i < a->n; i++)
        if (a->labels[i] < 0 || a->labels[i] >= a->classes)
            return md_errf(MD_ERR_DATA, "xent: label %d of sample %d is outside [0, %d)", a->labels[i], i, a->classes);
    double *loss = md_malloc(sizeof(double) * (size_t)(a->n > 0 ? a->n : 1));
    int *hit = md_malloc(sizeof(int) * (size_t)(a->n > 0 ? a->n : 1));
    if (!loss || !hit) {
        md_free(loss);
        md_free(hit);
        return MD_ERR_OOM;
    }
    struct xent_ctx c = {a, loss, hit, -1};
    long long per = a->classes > 0 ? a->classes : 1;
    md_parallel_for(a->n, CPU_GRAIN / per + 1, xent_range, &c);
    double total = 0.0;
    int correct = 0;
    for (int i = 0; i < a->n; i++) total += loss[i], correct += hit[i];
    if (a->loss_sum) *a->loss_sum = (float)((double)*a->loss_sum + total);
    if (a->correct) *a->correct += correct;
    md_free(loss);
    md_free(hit);
    return MD_OK;
}
