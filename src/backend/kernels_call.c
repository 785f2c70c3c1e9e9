/* kernels_call.c - kernel dispatch with the per-op CPU fallback. */
#include "backend/kernels_call.h"

#include <math.h>
#include <stddef.h>

#include "backend/backend_impl.h"

const char *const md_kernel_names[MD_KERNEL_COUNT] = {
    "gemm", "conv2d_fwd", "conv2d_bwd_data", "conv2d_bwd_filter", "batchnorm_fwd",
    "batchnorm_bwd", "act_fwd", "act_bwd", "pool2d_fwd", "pool2d_bwd", "gap_fwd", "gap_bwd",
    "bias_add", "bias_grad", "dropout_fwd", "dropout_bwd", "ew", "reduce", "chslice", "xent",
    "cast", "permute", "optim", "layernorm_fwd", "layernorm_bwd", "softmax_fwd", "softmax_bwd", "attn_fwd",
    "attn_bwd", "regress", "tiles_fwd", "tiles_bwd", "film_fwd", "film_bwd",
    "chscale_fwd", "chscale_bwd",
};

_Static_assert(sizeof(struct md_kernels) == MD_KERNEL_COUNT * sizeof(void (*)(void)),
               "md_kernel_names must list every entry of struct md_kernels");

static md_status unsupported(md_device *dev, int idx)
{
    if (dev->opts.fallback && !dev->info.unified_memory)
        return md_errf(MD_ERR_UNSUPPORTED,
                       "op '%s' is not supported on %s, and the CPU fallback needs unified memory",
                       md_kernel_names[idx], dev->info.backend);
    return md_errf(MD_ERR_UNSUPPORTED,
                   "op '%s' is not supported on %s; rerun with --fallback "
                   "(or MPSDIAG_ENABLE_FALLBACK=1) to run it on the CPU",
                   md_kernel_names[idx], dev->info.backend);
}

#define MD_KERNEL_WRAPPER(op, argtype, idx)                                          \
    md_status md_k_##op(md_device *dev, const struct argtype *a)                     \
    {                                                                                \
        if (dev->ops->kernels.op) return dev->ops->kernels.op(dev, a);               \
        if (dev->opts.fallback && dev->fallback && dev->info.unified_memory &&       \
            dev->fallback->ops->kernels.op) {                                        \
            dev->fallback_calls[idx]++;                                              \
            md_status st = md_dev_sync(dev);                                         \
            if (st != MD_OK) return st;                                              \
            return dev->fallback->ops->kernels.op(dev->fallback, a);                 \
        }                                                                            \
        return unsupported(dev, idx);                                                \
    }

MD_KERNEL_WRAPPER(gemm, md_gemm_args, 0)
MD_KERNEL_WRAPPER(conv2d_fwd, md_conv2d_args, 1)
MD_KERNEL_WRAPPER(conv2d_bwd_data, md_conv2d_args, 2)
MD_KERNEL_WRAPPER(conv2d_bwd_filter, md_conv2d_args, 3)
MD_KERNEL_WRAPPER(batchnorm_fwd, md_batchnorm_args, 4)
MD_KERNEL_WRAPPER(batchnorm_bwd, md_batchnorm_args, 5)
MD_KERNEL_WRAPPER(act_fwd, md_act_args, 6)
MD_KERNEL_WRAPPER(act_bwd, md_act_args, 7)
MD_KERNEL_WRAPPER(pool2d_fwd, md_pool2d_args, 8)
MD_KERNEL_WRAPPER(pool2d_bwd, md_pool2d_args, 9)
MD_KERNEL_WRAPPER(gap_fwd, md_gap_args, 10)
MD_KERNEL_WRAPPER(gap_bwd, md_gap_args, 11)
MD_KERNEL_WRAPPER(bias_add, md_bias_args, 12)
MD_KERNEL_WRAPPER(bias_grad, md_bias_args, 13)
MD_KERNEL_WRAPPER(dropout_fwd, md_dropout_args, 14)
MD_KERNEL_WRAPPER(dropout_bwd, md_dropout_args, 15)
MD_KERNEL_WRAPPER(ew, md_ew_args, 16)
MD_KERNEL_WRAPPER(reduce, md_reduce_args, 17)
MD_KERNEL_WRAPPER(chslice, md_chslice_args, 18)
MD_KERNEL_WRAPPER(xent, md_xent_args, 19)
MD_KERNEL_WRAPPER(cast, md_cast_args, 20)
MD_KERNEL_WRAPPER(permute, md_permute_args, 21)
MD_KERNEL_WRAPPER(optim, md_optim_args, 22)
MD_KERNEL_WRAPPER(layernorm_fwd, md_layernorm_args, 23)
MD_KERNEL_WRAPPER(layernorm_bwd, md_layernorm_args, 24)
MD_KERNEL_WRAPPER(softmax_fwd, md_softmax_args, 25)
MD_KERNEL_WRAPPER(softmax_bwd, md_softmax_args, 26)
MD_KERNEL_WRAPPER(attn_fwd, md_attn_args, 27)
MD_KERNEL_WRAPPER(attn_bwd, md_attn_args, 28)
MD_KERNEL_WRAPPER(regress, md_regress_args, 29)
MD_KERNEL_WRAPPER(tiles_fwd, md_tiles_args, 30)
MD_KERNEL_WRAPPER(tiles_bwd, md_tiles_args, 31)
MD_KERNEL_WRAPPER(film_fwd, md_film_args, 32)
MD_KERNEL_WRAPPER(film_bwd, md_film_args, 33)
MD_KERNEL_WRAPPER(chscale_fwd, md_chscale_args, 34)
MD_KERNEL_WRAPPER(chscale_bwd, md_chscale_args, 35)

int md_optim_ctl_resolve(const struct md_optim_args *a, struct md_optim_args *out)
{
    *out = *a;
    const struct md_optim_ctl *c = a->ctl;
    if (!c) return 1;
    const struct md_scale_ctl *sc = a->scaler;
    out->ctl = NULL;
    out->scaler = NULL;
    out->scaler_update = 0;
    out->grad_scale_dev = NULL;
    if (!isfinite(c->loss_sum) || !isfinite(c->grad_sumsq)) return 0;
    double g = sc ? 1.0 / (double)sc->scale : (double)c->grad_scale;
    if (c->clip > 0) {
        double norm = sqrt((double)c->grad_sumsq) * g;
        if (norm > c->clip) g *= c->clip / (norm + 1e-6);
    }
    out->lr = c->lr;
    out->step = sc ? sc->taken + 1 : c->step;
    out->grad_scale = (float)g;
    return 1;
}

void md_optim_ctl_after(const struct md_optim_args *a)
{
    if (!a->ctl || !a->scaler || !a->scaler_update) return;
    md_scale_ctl_update(a->scaler, isfinite(a->ctl->loss_sum) && isfinite(a->ctl->grad_sumsq));
}

md_status md_optim_host_begin(const char *backend, const struct md_optim_args *args, struct md_optim_args *a,
                              int *run)
{
    *run = 0;
    if (!md_optim_ctl_resolve(args, a)) { /* non-finite step: skipped */
        md_optim_ctl_after(args);
        return MD_OK;
    }
    if (a->params_half && a->half_dtype != MD_F32 && a->half_dtype != MD_F16 && a->half_dtype != MD_BF16)
        return md_errf(MD_ERR_UNSUPPORTED, "%s optim: dtype %s is not supported (fp32, fp16, bf16)", backend,
                       md_dtype_name(a->half_dtype));
    if (a->step < 1) return md_errf(MD_ERR_INTERNAL, "%s optim: step %lld < 1", backend, a->step);
    *run = 1;
    return MD_OK;
}

md_status md_regress_args_check(const char *backend, const struct md_regress_args *a)
{
    if (a->kind < MD_REGRESS_MSE || a->kind > MD_REGRESS_FINANCIAL)
        return md_errf(MD_ERR_INTERNAL, "%s regress: unknown loss kind %d", backend, (int)a->kind);
    if (a->n < 0 || a->horizon < 0 || a->channels < 0 || !a->pred || !a->target)
        return md_errf(MD_ERR_INTERNAL, "%s regress: bad shape (%d, %d, %d) or missing pred/target", backend, a->n,
                       a->horizon, a->channels);
    if (a->kind == MD_REGRESS_HUBER && !(a->delta > 0.0f))
        return md_errf(MD_ERR_INTERNAL, "%s regress: Huber delta %g must be > 0", backend, (double)a->delta);
    if (a->kind == MD_REGRESS_FINANCIAL && (!a->last || !(a->lambda >= 0.0f)))
        return md_errf(MD_ERR_INTERNAL, "%s regress: the financial loss needs the last observed values and lambda >= 0",
                       backend);
    if (a->last && a->last_ld < a->channels)
        return md_errf(MD_ERR_INTERNAL, "%s regress: last_ld %lld < channels %d", backend, a->last_ld, a->channels);
    return MD_OK;
}
