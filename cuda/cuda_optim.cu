/* cuda_optim.cu - the fused optimizer step (SGD with momentum/Nesterov,
 * AdamW) over the flat fp32 parameter buffer. */
#include <math.h>

#include "cuda_device.cuh"

/* ---------------------------------------------------------------------------
 * Optimizer step over the flat fp32 parameter buffer (PyTorch's formulas).
 * ------------------------------------------------------------------------- */

/* The per-step values of a captured step (kernels.h, md_optim_ctl; with sc,
 * the loss scale and step count of md_scale_ctl), read by every thread:
 * false when the step must change nothing. */
__device__ static bool ctl_values(const md_optim_ctl *c, const md_scale_ctl *sc, float &lr, float &scale,
                                  long long &t)
{
    float ls = c->loss_sum, ss = c->grad_sumsq;
    if (!isfinite(ls) || !isfinite(ss)) return false;
    double g = sc ? 1.0 / (double)sc->scale : (double)c->grad_scale;
    if (c->clip > 0) {
        double norm = sqrt((double)ss) * g;
        if (norm > c->clip) g *= c->clip / (norm + 1e-6);
    }
    lr = c->lr;
    scale = (float)g;
    t = sc ? sc->taken + 1 : c->step;
    return true;
}

/* The loss scaler's rule, once per step after its last update kernel (a
 * separate launch: every thread of those read the scale first). */
__global__ void k_scale_update(const md_optim_ctl *c, md_scale_ctl *sc)
{
    md_scale_ctl_update(sc, isfinite(c->loss_sum) && isfinite(c->grad_sumsq));
}

template <class H>
__global__ void k_sgd(size_t n, float lr, float mom, float wd, int nesterov, int first, float gs, const float *gs_dev,
                      const md_optim_ctl *ctl, const md_scale_ctl *sc, float *p, const float *g, float *buf, H *ph)
{
    float scale = gs_dev ? gs * *gs_dev : gs;
    if (ctl) {
        long long t;
        if (!ctl_values(ctl, sc, lr, scale, t)) return;
        first = t == 1;
    }
    GRID_STRIDE(i, n)
    {
        float w = p[i];
        float d = g[i] * scale + wd * w;
        if (buf && mom != 0.0f) {
            float b = first ? d : mom * buf[i] + d;
            buf[i] = b;
            d = nesterov ? d + mom * b : b;
        }
        w -= lr * d;
        p[i] = w;
        if (ph) ph[i] = fromf<H>(w);
    }
}

template <class H>
__global__ void k_adamw(size_t n, float lr, float b1, float b2, float eps, float wd, float step_size, float bc2_sqrt,
                        float gs, const float *gs_dev, const md_optim_ctl *ctl, const md_scale_ctl *sc, float *p,
                        const float *g, float *m, float *v, H *ph)
{
    float scale = gs_dev ? gs * *gs_dev : gs;
    if (ctl) {
        long long t;
        if (!ctl_values(ctl, sc, lr, scale, t)) return;
        double bc1 = 1.0 - pow((double)b1, (double)t), bc2 = 1.0 - pow((double)b2, (double)t);
        step_size = (float)((double)lr / bc1);
        bc2_sqrt = (float)sqrt(bc2);
    }
    GRID_STRIDE(i, n)
    {
        float w = p[i] * (1.0f - lr * wd);
        float gr = g[i] * scale;
        float mi = b1 * m[i] + (1.0f - b1) * gr;
        float vi = b2 * v[i] + (1.0f - b2) * gr * gr;
        m[i] = mi;
        v[i] = vi;
        w -= step_size * mi / (sqrtf(vi) / bc2_sqrt + eps);
        p[i] = w;
        if (ph) ph[i] = fromf<H>(w);
    }
}

static md_status scale_update(md_device *dev, const struct md_optim_args *a)
{
    if (!a->scaler_update) return MD_OK;
    if (!a->ctl || !a->scaler) return md_errf(MD_ERR_INTERNAL, "cuda optim: the loss scaler's rule needs ctl and scaler");
    k_scale_update<<<1, 1, 0, md_cuda_impl(dev)->stream>>>(a->ctl, a->scaler);
    return md_cuda_check_launch("optim (loss scale)");
}

md_status md_cuda_optim(md_device *dev, const struct md_optim_args *a)
{
    if (!a->n) return scale_update(dev, a);
    if (a->kind != MD_OPT_SGD && a->kind != MD_OPT_ADAMW)
        return md_errf(MD_ERR_INTERNAL, "cuda optim: unknown optimizer %d", a->kind);
    if (a->kind == MD_OPT_ADAMW && (!a->m || !a->v))
        return md_errf(MD_ERR_INTERNAL, "cuda optim: AdamW needs m and v");
    cudaStream_t s = md_cuda_impl(dev)->stream;
    unsigned blocks = md_cu_blocks(dev, a->n);
    long long t = a->step > 0 ? a->step : 1;
    double bc1 = 1.0 - pow((double)a->beta1, (double)t), bc2 = 1.0 - pow((double)a->beta2, (double)t);
    float step_size = (float)((double)a->lr / bc1), bc2_sqrt = (float)sqrt(bc2);
    md_dtype ht = a->params_half ? a->half_dtype : MD_F32;
    if (a->params_half && ht != MD_F16 && ht != MD_BF16 && ht != MD_F32)
        return md_errf(MD_ERR_UNSUPPORTED, "cuda optim: half copy of type %s", md_dtype_name(ht));
    MD_CU_DISPATCH(ht, "optim", {
        T *ph = (T *)a->params_half;
        if (a->kind == MD_OPT_SGD)
            k_sgd<T><<<blocks, MD_THREADS, 0, s>>>(a->n, a->lr, a->momentum, a->weight_decay, a->nesterov, t == 1,
                                                  a->grad_scale, a->grad_scale_dev, a->ctl, a->scaler, a->params,
                                                  a->grads, a->m, ph);
        else
            k_adamw<T><<<blocks, MD_THREADS, 0, s>>>(a->n, a->lr, a->beta1, a->beta2, a->eps, a->weight_decay,
                                                    step_size, bc2_sqrt, a->grad_scale, a->grad_scale_dev, a->ctl,
                                                    a->scaler, a->params, a->grads, a->m, a->v, ph);
    });
    MD_TRY(md_cuda_check_launch("optim"));
    return scale_update(dev, a);
}
