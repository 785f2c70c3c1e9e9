/* ref_optim.c - reference the fused optimizer step (SGD with
 * momentum/Nesterov, AdamW): plain loops, double accumulation (ref_kernels.c
 * states the conventions). */
#include "backend/ref/ref_internal.h"

#include <math.h>

/* ---- optimizer ------------------------------------------------------------------------------------------ */

md_status md_ref_optim(md_device *dev, const struct md_optim_args *args)
{
    (void)dev;
    struct md_optim_args resolved;
    int run;
    MD_TRY(md_optim_host_begin("ref", args, &resolved, &run));
    if (!run) return MD_OK;
    const struct md_optim_args *a = &resolved;
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
    md_optim_ctl_after(args); /* the loss scaler's rule (a captured fp16 step) */
    return MD_OK;
}
