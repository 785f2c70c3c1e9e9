/* cpu_optim.c - the fused optimizer step (SGD with momentum/Nesterov, AdamW)
 * over the flat fp32 parameter buffer, threaded over element ranges with
 * PyTorch's formulas. */
#include <math.h>

#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/cpu_vec.h"

/* ---- optimizer --------------------------------------------------------------------------------------------- */

struct opt_ctx { const struct md_optim_args *a; float gs, bc1, bc2; };

static void optim_range(void *vc, long long b, long long e)
{
    const struct opt_ctx *c = vc;
    const struct md_optim_args *a = c->a;
    float lr = a->lr, wd = a->weight_decay, mom = a->momentum, gs = c->gs;
    float *p = a->params, *m = a->m, *v = a->v;
    const float *g = a->grads;
    if (a->kind == MD_OPT_SGD) {
        long long i = b;
#if MD_VW > 1
        /* the loop below in vectors: each lane the same operations in the same order */
        int first = a->step == 1, nest = a->nesterov;
        md_vf GS = md_vsplat(gs), WD = md_vsplat(wd), MOM = md_vsplat(mom), LR = md_vsplat(lr);
        for (; i + MD_VW <= e; i += MD_VW) {
            md_vf pv = md_vload(p + i), gi = md_vload(g + i) * GS + WD * pv;
            if (mom != 0.0f) {
                md_vf buf = first ? gi : MOM * md_vload(m + i) + gi;
                md_vstore(m + i, buf);
                gi = nest ? gi + MOM * buf : buf;
            }
            md_vstore(p + i, pv - LR * gi);
        }
#endif
        for (; i < e; i++) {
            float gi = g[i] * gs + wd * p[i];
            if (mom != 0.0f) {
                float buf = a->step == 1 ? gi : mom * m[i] + gi;
                m[i] = buf;
                gi = a->nesterov ? gi + mom * buf : buf;
            }
            p[i] -= lr * gi;
        }
    } else {
        float b1 = a->beta1, b2 = a->beta2, eps = a->eps, decay = 1.0f - lr * wd;
        for (long long i = b; i < e; i++) {
            float gi = g[i] * gs;
            float mi = b1 * m[i] + (1.0f - b1) * gi, vi = b2 * v[i] + (1.0f - b2) * gi * gi;
            m[i] = mi;
            v[i] = vi;
            p[i] = p[i] * decay - lr * (mi / c->bc1) / (sqrtf(vi / c->bc2) + eps);
        }
    }
    if (a->params_half)
        for (long long i = b; i < e; i++) md_store_f(a->params_half, a->half_dtype, (size_t)i, p[i]);
}

md_status md_cpu_optim(md_device *dev, const struct md_optim_args *args)
{
    (void)dev;
    struct md_optim_args resolved;
    int run;
    MD_TRY(md_optim_host_begin("cpu", args, &resolved, &run));
    if (!run) return MD_OK;
    const struct md_optim_args *a = &resolved;
    if (a->kind != MD_OPT_SGD && a->kind != MD_OPT_ADAMW) return md_errf(MD_ERR_INTERNAL, "cpu optim: unknown kind %d", a->kind);
    struct opt_ctx c = {a, a->grad_scale * (a->grad_scale_dev ? *a->grad_scale_dev : 1.0f),
                        (float)(1.0 - pow((double)a->beta1, (double)a->step)),
                        (float)(1.0 - pow((double)a->beta2, (double)a->step))};
    md_parallel_for((long long)a->n, CPU_GRAIN, optim_range, &c);
    md_optim_ctl_after(args); /* the loss scaler's rule (a captured fp16 step) */
    return MD_OK;
}
