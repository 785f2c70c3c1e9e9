/* metal_plan.c - kernel table calls as Metal dispatches (see metal_plan.h).
 * Semantics follow src/backend/ref (the reference kernels) exactly; the
 * kernels themselves are the .metal files of this folder. */
#include "metal_plan.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "md_metal_args.h"
#include "metal_grid.h"

/* ---- helpers ------------------------------------------------------------------- */

static const char *dt_sfx(md_dtype t)
{
    switch (t) {
    case MD_F32: return "f32";
    case MD_F16: return "f16";
    case MD_BF16: return "bf16";
    default: return NULL;
    }
}

static md_status check_dtype(const char *op, md_dtype t)
{
    if (dt_sfx(t)) return MD_OK;
    return md_errf(MD_ERR_UNSUPPORTED, "metal %s: dtype %s is not supported (fp32, fp16, bf16)", op, md_dtype_name(t));
}

/* Starts dispatch i of the plan: name "<base>_<dtype>" (no suffix when t < 0). */
static struct md_metal_dispatch *begin(struct md_metal_plan *p, int i, const char *base, int t,
                                       const void *params, size_t size)
{
    struct md_metal_dispatch *d = &p->d[i];
    MD_ASSERT(i < MD_METAL_MAX_DISPATCH && size <= MD_METAL_MAX_PARAMS);
    memset(d, 0, sizeof *d);
    if (t >= 0) snprintf(d->name, sizeof d->name, "%s_%s", base, dt_sfx((md_dtype)t));
    else snprintf(d->name, sizeof d->name, "%s", base);
    memcpy(d->params, params, size);
    d->params_size = (unsigned)size;
    p->n = i + 1;
    return d;
}

static void bind(struct md_metal_dispatch *d, const void *ptr)
{
    MD_ASSERT(d->nbufs < MD_METAL_MAX_BUFS);
    d->bufs[d->nbufs++] = (void *)(uintptr_t)ptr;
}

/* BIND(d, p1, p2, ...): bind() each in order (the shader's buffer(1), (2), ...). */
#define BIND(d, ...) bind_list((d), (const void *const[]){__VA_ARGS__}, \
                               sizeof((const void *const[]){__VA_ARGS__}) / sizeof(const void *))
static void bind_list(struct md_metal_dispatch *d, const void *const *ptrs, size_t n)
{
    for (size_t i = 0; i < n; i++) bind(d, ptrs[i]);
}

static void bind_scratch(struct md_metal_dispatch *d)
{
    d->scratch_mask |= 1u << d->nbufs;
    bind(d, NULL);
}

static void ew_grid(struct md_metal_dispatch *d, unsigned long long n)
{
    md_metal_grid_1d(n, MD_METAL_EW_THREADS, MD_METAL_EW_MAX_GROUPS, d->grid, d->tg);
}

static void tiles(struct md_metal_dispatch *d, int m, int n, int batch)
{
    md_metal_grid_tiles(m, n, batch, d->grid, d->tg);
    d->tg_mem = MD_MTL_MM_TGMEM;
    d->barriers = 1;
}

static void rows(struct md_metal_dispatch *d, int nrows)
{
    md_metal_grid_rows(nrows, MD_MTL_RED_THREADS, d->grid, d->tg);
    d->tg_mem = MD_MTL_RED_THREADS * sizeof(float);
    d->barriers = 1;
}

/* ---- matrix products ------------------------------------------------------------------ */

md_status md_metal_plan_gemm(const struct md_gemm_args *a, struct md_metal_plan *p)
{
    MD_TRY(check_dtype("gemm", a->dtype));
    if (a->m < 0 || a->n < 0 || a->k < 0 || a->batch < 1)
        return md_errf(MD_ERR_INTERNAL, "metal gemm: bad shape m %d n %d k %d batch %d", a->m, a->n, a->k, a->batch);
    struct md_mtl_gemm_params g = {
        .stride_a = a->stride_a, .stride_b = a->stride_b, .stride_c = a->stride_c,
        .m = a->m, .n = a->n, .k = a->k, .lda = a->lda, .ldb = a->ldb, .ldc = a->ldc,
        .trans_a = a->trans_a, .trans_b = a->trans_b, .alpha = a->alpha, .beta = a->beta,
    };
    struct md_metal_dispatch *d = begin(p, 0, "md_gemm", a->dtype, &g, sizeof g);
    BIND(d, a->a, a->b, a->c);
    tiles(d, a->m, a->n, a->batch);
    return MD_OK;
}

static md_status conv_params(const char *op, const struct md_conv2d_args *a, struct md_mtl_conv_params *c)
{
    MD_TRY(check_dtype(op, a->dtype));
    if (a->groups < 1 || a->c % a->groups || a->k % a->groups)
        return md_errf(MD_ERR_INTERNAL, "metal %s: groups %d must divide c %d and k %d", op, a->groups, a->c, a->k);
    if (a->p != md_conv_out(a->h, a->r, a->stride_h, a->pad_h, a->dil_h) ||
        a->q != md_conv_out(a->w, a->s, a->stride_w, a->pad_w, a->dil_w) || a->p <= 0 || a->q <= 0)
        return md_errf(MD_ERR_INTERNAL, "metal %s: output %dx%d does not match input %dx%d", op, a->p, a->q, a->h, a->w);
    struct md_mtl_conv_params v = {
        .n = a->n, .c = a->c, .h = a->h, .w = a->w, .k = a->k, .r = a->r, .s = a->s, .p = a->p, .q = a->q,
        .stride_h = a->stride_h, .stride_w = a->stride_w, .pad_h = a->pad_h, .pad_w = a->pad_w,
        .dil_h = a->dil_h, .dil_w = a->dil_w, .groups = a->groups, .cg = a->c / a->groups,
        .kg = a->k / a->groups, .nhwc = a->layout == MD_NHWC, .beta = a->beta,
    };
    *c = v;
    return MD_OK;
}

md_status md_metal_plan_conv2d_fwd(const struct md_conv2d_args *a, struct md_metal_plan *p)
{
    struct md_mtl_conv_params c;
    MD_TRY(conv_params("conv2d_fwd", a, &c));
    struct md_metal_dispatch *d = begin(p, 0, "md_conv_fwd", a->dtype, &c, sizeof c);
    BIND(d, a->x, a->wt, a->y);
    tiles(d, c.kg, c.n * c.p * c.q, c.groups);
    return MD_OK;
}

md_status md_metal_plan_conv2d_bwd_data(const struct md_conv2d_args *a, struct md_metal_plan *p)
{
    struct md_mtl_conv_params c;
    MD_TRY(conv_params("conv2d_bwd_data", a, &c));
    struct md_metal_dispatch *d = begin(p, 0, "md_conv_bwd_data", a->dtype, &c, sizeof c);
    BIND(d, a->dy, a->wt, a->dx);
    tiles(d, c.cg, c.n * c.h * c.w, c.groups);
    return MD_OK;
}

md_status md_metal_plan_conv2d_bwd_filter(const struct md_conv2d_args *a, struct md_metal_plan *p)
{
    struct md_mtl_conv_params c;
    MD_TRY(conv_params("conv2d_bwd_filter", a, &c));
    struct md_metal_dispatch *d = begin(p, 0, "md_conv_bwd_filter", a->dtype, &c, sizeof c);
    BIND(d, a->dy, a->x, a->dwt);
    tiles(d, c.kg, c.cg * c.r * c.s, c.groups);
    return MD_OK;
}

/* ---- batch norm ------------------------------------------------------------------------ */

static struct md_mtl_bn_params bn_params(const struct md_batchnorm_args *a)
{
    double m = (double)a->n * a->hw;
    struct md_mtl_bn_params b = {
        .n = a->n, .c = a->c, .hw = a->hw, .nhwc = a->layout == MD_NHWC, .relu = a->act == MD_ACT_RELU,
        .training = a->training != 0,
        .has_gamma = a->gamma != NULL, .has_beta = a->beta_p != NULL,
        .has_rmean = a->running_mean != NULL, .has_rvar = a->running_var != NULL,
        .has_smean = a->save_mean != NULL, .has_sinv = a->save_invstd != NULL,
        .has_y = a->y != NULL, .has_dx = a->dx != NULL,
        .has_dgamma = a->dgamma != NULL, .has_dbeta = a->dbeta != NULL,
        .eps = a->eps, .momentum = a->momentum, .beta = a->beta,
        .unbias = m > 1.0 ? (float)(m / (m - 1.0)) : 1.0f,
    };
    return b;
}

static md_status bn_check(const char *op, const struct md_batchnorm_args *a)
{
    MD_TRY(check_dtype(op, a->dtype));
    if (a->act != MD_ACT_NONE && a->act != MD_ACT_RELU)
        return md_errf(MD_ERR_UNSUPPORTED, "metal %s: fused activation %d (none or relu only)", op, a->act);
    if (!a->training && (!a->running_mean || !a->running_var))
        return md_errf(MD_ERR_INTERNAL, "metal %s: inference needs running statistics", op);
    return MD_OK;
}

md_status md_metal_plan_batchnorm_fwd(const struct md_batchnorm_args *a, struct md_metal_plan *p)
{
    MD_TRY(bn_check("batchnorm_fwd", a));
    struct md_mtl_bn_params b = bn_params(a);
    struct md_metal_dispatch *d = begin(p, 0, "md_bn_fwd", a->dtype, &b, sizeof b);
    BIND(d, a->x, a->y, a->gamma, a->beta_p, a->running_mean, a->running_var, a->save_mean, a->save_invstd);
    rows(d, a->c);
    return MD_OK;
}

md_status md_metal_plan_batchnorm_bwd(const struct md_batchnorm_args *a, struct md_metal_plan *p)
{
    MD_TRY(bn_check("batchnorm_bwd", a));
    struct md_mtl_bn_params b = bn_params(a);
    struct md_metal_dispatch *d = begin(p, 0, "md_bn_bwd", a->dtype, &b, sizeof b);
    BIND(d, a->x, a->y, a->dy, a->dx, a->gamma, a->beta_p, a->running_mean, a->running_var, a->save_mean,
         a->save_invstd, a->dgamma, a->dbeta);
    rows(d, a->c);
    return MD_OK;
}

/* ---- element-wise ------------------------------------------------------------------------ */

static md_status act_plan(const char *op, const char *kname, const struct md_act_args *a, struct md_metal_plan *p,
                          struct md_metal_dispatch **d)
{
    MD_TRY(check_dtype(op, a->dtype));
    if (a->act < 0 || a->act >= MD_ACT_COUNT)
        return md_errf(MD_ERR_INTERNAL, "metal %s: unknown activation %d", op, a->act);
    struct md_mtl_act_params v = {.n = a->n, .act = a->act, .alpha = a->alpha, .beta = a->beta};
    *d = begin(p, 0, kname, a->dtype, &v, sizeof v);
    ew_grid(*d, a->n);
    return MD_OK;
}

md_status md_metal_plan_act_fwd(const struct md_act_args *a, struct md_metal_plan *p)
{
    struct md_metal_dispatch *d;
    MD_TRY(act_plan("act_fwd", "md_act_fwd", a, p, &d));
    BIND(d, a->x, a->y);
    return MD_OK;
}

md_status md_metal_plan_act_bwd(const struct md_act_args *a, struct md_metal_plan *p)
{
    struct md_metal_dispatch *d;
    MD_TRY(act_plan("act_bwd", "md_act_bwd", a, p, &d));
    BIND(d, a->x, a->dy, a->dx);
    return MD_OK;
}

static md_status pool_params(const char *op, const struct md_pool2d_args *a, struct md_mtl_pool_params *v)
{
    MD_TRY(check_dtype(op, a->dtype));
    if (a->p != md_conv_out(a->h, a->kh, a->stride_h, a->pad_h, 1) ||
        a->q != md_conv_out(a->w, a->kw, a->stride_w, a->pad_w, 1) || a->p <= 0 || a->q <= 0)
        return md_errf(MD_ERR_INTERNAL, "metal %s: output %dx%d does not match input %dx%d", op, a->p, a->q, a->h, a->w);
    struct md_mtl_pool_params t = {
        .kind = a->kind, .n = a->n, .c = a->c, .h = a->h, .w = a->w, .p = a->p, .q = a->q,
        .kh = a->kh, .kw = a->kw, .stride_h = a->stride_h, .stride_w = a->stride_w,
        .pad_h = a->pad_h, .pad_w = a->pad_w, .count_include_pad = a->count_include_pad,
        .nhwc = a->layout == MD_NHWC, .beta = a->beta,
    };
    *v = t;
    return MD_OK;
}

md_status md_metal_plan_pool2d_fwd(const struct md_pool2d_args *a, struct md_metal_plan *p)
{
    struct md_mtl_pool_params v;
    MD_TRY(pool_params("pool2d_fwd", a, &v));
    struct md_metal_dispatch *d = begin(p, 0, "md_pool_fwd", a->dtype, &v, sizeof v);
    BIND(d, a->x, a->y_out);
    ew_grid(d, (unsigned long long)a->n * a->c * a->p * a->q);
    return MD_OK;
}

md_status md_metal_plan_pool2d_bwd(const struct md_pool2d_args *a, struct md_metal_plan *p)
{
    struct md_mtl_pool_params v;
    MD_TRY(pool_params("pool2d_bwd", a, &v));
    struct md_metal_dispatch *d = begin(p, 0, "md_pool_bwd", a->dtype, &v, sizeof v);
    BIND(d, a->x, a->dy, a->dx);
    ew_grid(d, (unsigned long long)a->n * a->c * a->h * a->w);
    return MD_OK;
}

/* The (n, c, hw) parameters of gap and bias (both args structs name them alike). */
#define NCHW_PARAMS(a) \
    ((struct md_mtl_nchw_params){.n = (a)->n, .c = (a)->c, .hw = (a)->hw, .nhwc = (a)->layout == MD_NHWC, .beta = (a)->beta})

md_status md_metal_plan_gap_fwd(const struct md_gap_args *a, struct md_metal_plan *p)
{
    MD_TRY(check_dtype("gap_fwd", a->dtype));
    struct md_mtl_nchw_params v = NCHW_PARAMS(a);
    struct md_metal_dispatch *d = begin(p, 0, "md_gap_fwd", a->dtype, &v, sizeof v);
    BIND(d, a->x, a->y);
    ew_grid(d, (unsigned long long)a->n * a->c);
    return MD_OK;
}

md_status md_metal_plan_gap_bwd(const struct md_gap_args *a, struct md_metal_plan *p)
{
    MD_TRY(check_dtype("gap_bwd", a->dtype));
    struct md_mtl_nchw_params v = NCHW_PARAMS(a);
    struct md_metal_dispatch *d = begin(p, 0, "md_gap_bwd", a->dtype, &v, sizeof v);
    BIND(d, a->dy, a->dx);
    ew_grid(d, (unsigned long long)a->n * a->c * a->hw);
    return MD_OK;
}

md_status md_metal_plan_bias_add(const struct md_bias_args *a, struct md_metal_plan *p)
{
    MD_TRY(check_dtype("bias_add", a->dtype));
    struct md_mtl_nchw_params v = NCHW_PARAMS(a);
    struct md_metal_dispatch *d = begin(p, 0, "md_bias_add", a->dtype, &v, sizeof v);
    BIND(d, a->y, a->bias);
    ew_grid(d, (unsigned long long)a->n * a->c * a->hw);
    return MD_OK;
}

md_status md_metal_plan_bias_grad(const struct md_bias_args *a, struct md_metal_plan *p)
{
    MD_TRY(check_dtype("bias_grad", a->dtype));
    struct md_mtl_nchw_params v = NCHW_PARAMS(a);
    struct md_metal_dispatch *d = begin(p, 0, "md_bias_grad", a->dtype, &v, sizeof v);
    BIND(d, a->dy, a->dbias);
    rows(d, a->c);
    return MD_OK;
}

static struct md_mtl_dropout_params dropout_params(const struct md_dropout_args *a)
{
    struct md_mtl_dropout_params v = {
        .n = a->n, .seed = a->seed, .offset = a->offset, .has_mask = a->mask != NULL, .p = a->p,
        .scale = a->p < 1.0f ? (float)(1.0 / (1.0 - (double)a->p)) : 0.0f, .beta = a->beta,
    };
    return v;
}

md_status md_metal_plan_dropout_fwd(const struct md_dropout_args *a, struct md_metal_plan *p)
{
    MD_TRY(check_dtype("dropout_fwd", a->dtype));
    if (a->offset_dev)
        return md_errf(MD_ERR_UNSUPPORTED, "metal dropout_fwd: a device-side offset is for captured steps (CUDA graphs)");
    struct md_mtl_dropout_params v = dropout_params(a);
    struct md_metal_dispatch *d = begin(p, 0, "md_dropout_fwd", a->dtype, &v, sizeof v);
    BIND(d, a->x, a->y, a->mask);
    ew_grid(d, a->n);
    return MD_OK;
}

md_status md_metal_plan_dropout_bwd(const struct md_dropout_args *a, struct md_metal_plan *p)
{
    MD_TRY(check_dtype("dropout_bwd", a->dtype));
    if (a->offset_dev)
        return md_errf(MD_ERR_UNSUPPORTED, "metal dropout_bwd: a device-side offset is for captured steps (CUDA graphs)");
    struct md_mtl_dropout_params v = dropout_params(a);
    struct md_metal_dispatch *d = begin(p, 0, "md_dropout_bwd", a->dtype, &v, sizeof v);
    BIND(d, a->dy, a->mask, a->dx);
    ew_grid(d, a->n);
    return MD_OK;
}

md_status md_metal_plan_ew(const struct md_ew_args *a, struct md_metal_plan *p)
{
    MD_TRY(check_dtype("ew", a->dtype));
    if (a->op < 0 || a->op >= MD_EW_COUNT) return md_errf(MD_ERR_INTERNAL, "metal ew: unknown op %d", a->op);
    struct md_mtl_ew_params v = {
        .n = a->n, .op = a->op, .has_scale = a->scale_dev != NULL, .alpha = a->alpha, .beta = a->beta,
    };
    struct md_metal_dispatch *d = begin(p, 0, "md_ew", a->dtype, &v, sizeof v);
    BIND(d, a->a, a->b, a->y, a->scale_dev);
    ew_grid(d, a->n);
    return MD_OK;
}

md_status md_metal_plan_reduce(const struct md_reduce_args *a, struct md_metal_plan *p)
{
    MD_TRY(check_dtype("reduce", a->dtype));
    if (a->op < MD_RED_SUM || a->op > MD_RED_DOT) return md_errf(MD_ERR_INTERNAL, "metal reduce: unknown op %d", a->op);
    unsigned parts = md_metal_ceil_div(a->n ? a->n : 1, MD_MTL_RED_THREADS * 4ull);
    if (parts > MD_MTL_RED_PARTIALS) parts = MD_MTL_RED_PARTIALS;
    struct md_mtl_reduce_params v = {.n = a->n, .op = a->op, .parts = (md_mi32)parts, .beta = a->beta};
    struct md_metal_dispatch *d = begin(p, 0, "md_reduce_part", a->dtype, &v, sizeof v);
    BIND(d, a->a, a->b);
    bind_scratch(d);
    rows(d, (int)parts);
    d = begin(p, 1, "md_mtl_reduce_final", -1, &v, sizeof v);
    bind_scratch(d);
    bind(d, a->out);
    rows(d, 1);
    return MD_OK;
}

md_status md_metal_plan_chslice(const struct md_chslice_args *a, struct md_metal_plan *p)
{
    MD_TRY(check_dtype("chslice", a->dtype));
    struct md_mtl_chslice_params v = {
        .n = a->n, .hw = a->hw, .cc = a->cc, .src_c = a->src_c, .src_off = a->src_off, .dst_c = a->dst_c,
        .dst_off = a->dst_off, .nhwc = a->layout == MD_NHWC, .beta = a->beta,
    };
    struct md_metal_dispatch *d = begin(p, 0, "md_chslice", a->dtype, &v, sizeof v);
    BIND(d, a->src, a->dst);
    ew_grid(d, (unsigned long long)a->n * a->cc * a->hw);
    return MD_OK;
}

md_status md_metal_plan_xent(const struct md_xent_args *a, struct md_metal_plan *p)
{
    MD_TRY(check_dtype("xent", a->dtype));
    struct md_mtl_xent_params v = {
        .n = a->n, .classes = a->classes, .has_loss = a->loss_sum != NULL, .has_correct = a->correct != NULL,
        .has_dlogits = a->dlogits != NULL, .smoothing = a->smoothing, .grad_scale = a->grad_scale,
    };
    struct md_metal_dispatch *d = begin(p, 0, "md_xent", a->dtype, &v, sizeof v);
    BIND(d, a->logits, a->labels, a->loss_sum, a->correct, a->dlogits);
    rows(d, 1);
    return MD_OK;
}

md_status md_metal_plan_regress(const struct md_regress_args *a, struct md_metal_plan *p)
{
    _Static_assert(MD_REGRESS_MSE == 0 && MD_REGRESS_MAE == 1 && MD_REGRESS_HUBER == 2 && MD_REGRESS_FINANCIAL == 3,
                   "loss.metal numbers the regression kinds so");
    MD_TRY(check_dtype("regress", a->dtype));
    MD_TRY(md_regress_args_check("metal", a));
    struct md_mtl_regress_params v = {
        .last_ld = a->last_ld, .n = a->n, .horizon = a->horizon, .channels = a->channels, .kind = (int)a->kind,
        .has_last = a->last != NULL, .has_loss = a->loss_sum != NULL, .has_metrics = a->metrics != NULL,
        .has_dpred = a->dpred != NULL, .delta = a->delta, .lambda = a->lambda, .grad_scale = a->grad_scale,
    };
    struct md_metal_dispatch *d = begin(p, 0, "md_regress", a->dtype, &v, sizeof v);
    BIND(d, a->pred, a->target, a->last, a->loss_sum, a->metrics, a->dpred);
    rows(d, 1);
    return MD_OK;
}

md_status md_metal_plan_cast(const struct md_cast_args *a, struct md_metal_plan *p)
{
    MD_TRY(check_dtype("cast", a->src_type));
    MD_TRY(check_dtype("cast", a->dst_type));
    struct md_mtl_cast_params v = {.n = a->n};
    char name[32];
    snprintf(name, sizeof name, "md_cast_%s", dt_sfx(a->src_type));
    struct md_metal_dispatch *d = begin(p, 0, name, a->dst_type, &v, sizeof v);
    BIND(d, a->src, a->dst);
    ew_grid(d, a->n);
    return MD_OK;
}

md_status md_metal_plan_permute(const struct md_permute_args *a, struct md_metal_plan *p)
{
    MD_TRY(check_dtype("permute", a->dtype));
    struct md_mtl_permute_params v = {.n = a->n, .c = a->c, .h = a->h, .w = a->w, .to_nhwc = a->to_nhwc != 0};
    struct md_metal_dispatch *d =
        begin(p, 0, md_dtype_size(a->dtype) == 4 ? "md_permute_b4" : "md_permute_b2", -1, &v, sizeof v);
    BIND(d, a->src, a->dst);
    ew_grid(d, (unsigned long long)a->n * a->c * a->h * a->w);
    return MD_OK;
}

md_status md_metal_plan_optim(const struct md_optim_args *a, struct md_metal_plan *p)
{
    if (a->params_half) MD_TRY(check_dtype("optim", a->half_dtype));
    if (a->ctl)
        return md_errf(MD_ERR_UNSUPPORTED, "metal optim: device-side step values are for captured steps (CUDA graphs)");
    if (a->params_half && a->half_dtype == MD_F32)
        return md_errf(MD_ERR_UNSUPPORTED, "metal optim: the compute copy must be fp16 or bf16");
    if (a->step < 1) return md_errf(MD_ERR_INTERNAL, "metal optim: step %lld < 1", a->step);
    if (a->kind != MD_OPT_SGD && a->kind != MD_OPT_ADAMW)
        return md_errf(MD_ERR_INTERNAL, "metal optim: unknown kind %d", a->kind);
    struct md_mtl_optim_params v = {
        .n = a->n, .kind = a->kind, .nesterov = a->nesterov != 0, .first_step = a->step == 1,
        .has_m = a->m != NULL, .has_v = a->v != NULL, .has_half = a->params_half != NULL,
        .half_dtype = a->half_dtype == MD_BF16 ? MD_MTL_BF16 : MD_MTL_F16,
        .has_scale = a->grad_scale_dev != NULL, .lr = a->lr, .momentum = a->momentum,
        .weight_decay = a->weight_decay, .beta1 = a->beta1, .beta2 = a->beta2, .eps = a->eps,
        .grad_scale = a->grad_scale,
        .bc1 = (float)(1.0 - pow((double)a->beta1, (double)a->step)),
        .bc2 = (float)(1.0 - pow((double)a->beta2, (double)a->step)),
    };
    struct md_metal_dispatch *d = begin(p, 0, "md_mtl_optim", -1, &v, sizeof v);
    BIND(d, a->params, a->grads, a->m, a->v, a->params_half, a->grad_scale_dev);
    ew_grid(d, a->n);
    return MD_OK;
}

void md_metal_plan_noop(struct md_metal_plan *p)
{
    struct md_mtl_cast_params v = {.n = 0};
    struct md_metal_dispatch *d = begin(p, 0, "md_mtl_noop", -1, &v, sizeof v);
    md_metal_grid_1d(1, 1, 1, d->grid, d->tg);
}

/* ---- layer norm, softmax, attention --------------------------------------------------------- */

static struct md_mtl_ln_params ln_params(const struct md_layernorm_args *a)
{
    struct md_mtl_ln_params v = {
        .rows = a->rows, .d = a->d, .has_gamma = a->gamma != NULL, .has_beta = a->beta_p != NULL,
        .has_mean = a->mean != NULL, .has_rstd = a->rstd != NULL, .has_dx = a->dx != NULL,
        .has_dgamma = a->dgamma != NULL, .has_dbeta = a->dbeta != NULL, .eps = a->eps, .beta = a->beta,
    };
    return v;
}

md_status md_metal_plan_layernorm_fwd(const struct md_layernorm_args *a, struct md_metal_plan *p)
{
    MD_TRY(check_dtype("layernorm_fwd", a->dtype));
    struct md_mtl_ln_params v = ln_params(a);
    struct md_metal_dispatch *d = begin(p, 0, "md_ln_fwd", a->dtype, &v, sizeof v);
    BIND(d, a->x, a->y, a->gamma, a->beta_p, a->mean, a->rstd);
    rows(d, a->rows);
    return MD_OK;
}

md_status md_metal_plan_layernorm_bwd(const struct md_layernorm_args *a, struct md_metal_plan *p)
{
    MD_TRY(check_dtype("layernorm_bwd", a->dtype));
    if (!a->mean || !a->rstd)
        return md_errf(MD_ERR_UNSUPPORTED, "metal layernorm_bwd: needs the forward's saved mean and rstd");
    struct md_mtl_ln_params v = ln_params(a);
    int n = 0;
    if (a->dx) {
        struct md_metal_dispatch *d = begin(p, n++, "md_ln_bwd_dx", a->dtype, &v, sizeof v);
        BIND(d, a->x, a->dy, a->dx, a->gamma, a->mean, a->rstd);
        rows(d, a->rows);
    }
    if (a->dgamma || a->dbeta) {
        struct md_metal_dispatch *d = begin(p, n++, "md_ln_bwd_params", a->dtype, &v, sizeof v);
        BIND(d, a->x, a->dy, a->mean, a->rstd, a->dgamma, a->dbeta);
        ew_grid(d, (unsigned long long)a->d);
    }
    if (!n) md_metal_plan_noop(p);
    return MD_OK;
}

static md_status softmax_plan(const char *op, const char *kname, const struct md_softmax_args *a,
                              struct md_metal_plan *p, struct md_metal_dispatch **d)
{
    MD_TRY(check_dtype(op, a->dtype));
    if (a->causal && a->tq <= 0) return md_errf(MD_ERR_INTERNAL, "metal %s: causal mask needs tq > 0", op);
    struct md_mtl_softmax_params v = {
        .rows = a->rows, .n = a->n, .causal = a->causal != 0, .tq = a->tq,
        .scale = a->scale != 0.0f ? a->scale : 1.0f, .beta = a->beta,
    };
    *d = begin(p, 0, kname, a->dtype, &v, sizeof v);
    rows(*d, a->rows);
    return MD_OK;
}

md_status md_metal_plan_softmax_fwd(const struct md_softmax_args *a, struct md_metal_plan *p)
{
    struct md_metal_dispatch *d;
    MD_TRY(softmax_plan("softmax_fwd", "md_softmax_fwd", a, p, &d));
    BIND(d, a->x, a->y);
    return MD_OK;
}

md_status md_metal_plan_softmax_bwd(const struct md_softmax_args *a, struct md_metal_plan *p)
{
    struct md_metal_dispatch *d;
    MD_TRY(softmax_plan("softmax_bwd", "md_softmax_bwd", a, p, &d));
    BIND(d, a->y, a->dy, a->dx);
    return MD_OK;
}

static md_status attn_params(const char *op, const struct md_attn_args *a, struct md_mtl_attn_params *v)
{
    MD_TRY(check_dtype(op, a->dtype));
    if (a->batch < 0 || a->heads < 0 || a->tq < 0 || a->tk < 1 || a->d < 1)
        return md_errf(MD_ERR_INTERNAL, "metal %s: bad shape batch %d heads %d tq %d tk %d d %d", op, a->batch,
                       a->heads, a->tq, a->tk, a->d);
    if (a->d > MD_MTL_ATTN_MAX_D)
        return md_errf(MD_ERR_UNSUPPORTED, "metal %s: head_dim %d (at most %d)", op, a->d, MD_MTL_ATTN_MAX_D);
    if (a->offset_dev)
        return md_errf(MD_ERR_UNSUPPORTED, "metal %s: a device-side offset is for captured steps (CUDA graphs)", op);
    if (!(a->dropout_p >= 0.0f && a->dropout_p <= 1.0f))
        return md_errf(MD_ERR_INTERNAL, "metal %s: dropout %g outside [0, 1]", op, (double)a->dropout_p);
    memset(v, 0, sizeof *v);
    long long s[3];
    md_attn_strides(a->sq, a->heads, a->tq, a->d, s), memcpy(v->sq, s, sizeof s);
    md_attn_strides(a->sk, a->heads, a->tk, a->d, s), memcpy(v->sk, s, sizeof s);
    md_attn_strides(a->sv, a->heads, a->tk, a->d, s), memcpy(v->sv, s, sizeof s);
    md_attn_strides(a->so, a->heads, a->tq, a->d, s), memcpy(v->so, s, sizeof s);
    v->seed = a->seed, v->offset = a->offset;
    v->batch = a->batch, v->heads = a->heads, v->tq = a->tq, v->tk = a->tk, v->d = a->d;
    v->causal = a->causal != 0, v->has_lse = a->lse != NULL;
    v->has_dq = a->dq != NULL, v->has_dk = a->dk != NULL, v->has_dv = a->dv != NULL;
    v->dropout = a->dropout_p > 0.0f;
    v->scale = md_attn_scale(a), v->p = a->dropout_p, v->beta = a->beta;
    v->keep_scale = a->dropout_p < 1.0f ? (float)(1.0 / (1.0 - (double)a->dropout_p)) : 0.0f;
    return MD_OK;
}

static void attn_rows(struct md_metal_dispatch *d, int nrows)
{
    rows(d, nrows);
    d->tg_mem = MD_MTL_ATTN_TGMEM * sizeof(float);
}

md_status md_metal_plan_attn_fwd(const struct md_attn_args *a, struct md_metal_plan *p)
{
    struct md_mtl_attn_params v;
    MD_TRY(attn_params("attn_fwd", a, &v));
    struct md_metal_dispatch *d = begin(p, 0, "md_attn_fwd", a->dtype, &v, sizeof v);
    BIND(d, a->q, a->k, a->v, a->o, a->lse);
    attn_rows(d, a->batch * a->heads * a->tq);
    return MD_OK;
}

md_status md_metal_plan_attn_bwd(const struct md_attn_args *a, struct md_metal_plan *p)
{
    struct md_mtl_attn_params v;
    MD_TRY(attn_params("attn_bwd", a, &v));
    if (!a->lse) return md_errf(MD_ERR_INTERNAL, "metal attn_bwd: needs the forward's logsumexp (lse)");
    int n = 0;
    if (a->dq) {
        struct md_metal_dispatch *d = begin(p, n++, "md_attn_bwd_q", a->dtype, &v, sizeof v);
        BIND(d, a->q, a->k, a->v, a->o, a->lse, a->d_o, a->dq);
        attn_rows(d, a->batch * a->heads * a->tq);
    }
    if (a->dk || a->dv) {
        struct md_metal_dispatch *d = begin(p, n++, "md_attn_bwd_kv", a->dtype, &v, sizeof v);
        BIND(d, a->q, a->k, a->v, a->o, a->lse, a->d_o, a->dk, a->dv);
        attn_rows(d, a->batch * a->heads * a->tk);
    }
    if (!n) md_metal_plan_noop(p);
    return MD_OK;
}

/* ---- tiles, FiLM -------------------------------------------------------------------------- */

static md_status tiles_plan(const char *op, const char *kname, const struct md_tiles_args *a, struct md_metal_plan *p,
                            struct md_metal_dispatch **d)
{
    MD_TRY(check_dtype(op, a->dtype));
    if (a->n < 0 || a->c < 1 || a->rows < 1 || a->cols < 1 || a->h < a->rows || a->w < a->cols || a->size < 1 ||
        a->ld < a->rows * a->cols)
        return md_errf(MD_ERR_INTERNAL, "metal %s: bad shape (n %d, c %d, %dx%d, grid %dx%d, size %d, ld %d)", op,
                       a->n, a->c, a->h, a->w, a->rows, a->cols, a->size, a->ld);
    struct md_mtl_tiles_params v = {
        .n = a->n, .c = a->c, .h = a->h, .w = a->w, .rows = a->rows, .cols = a->cols, .size = a->size,
        .ld = a->ld, .beta = a->beta,
    };
    *d = begin(p, 0, kname, a->dtype, &v, sizeof v);
    return MD_OK;
}

md_status md_metal_plan_tiles_fwd(const struct md_tiles_args *a, struct md_metal_plan *p)
{
    struct md_metal_dispatch *d;
    MD_TRY(tiles_plan("tiles_fwd", "md_tiles_fwd", a, p, &d));
    BIND(d, a->x, a->y);
    ew_grid(d, (unsigned long long)a->n * (unsigned long long)(a->rows * a->cols) * (unsigned long long)a->c *
                   (unsigned long long)a->size * (unsigned long long)a->size);
    return MD_OK;
}

md_status md_metal_plan_tiles_bwd(const struct md_tiles_args *a, struct md_metal_plan *p)
{
    struct md_metal_dispatch *d;
    MD_TRY(tiles_plan("tiles_bwd", "md_tiles_bwd", a, p, &d));
    BIND(d, a->dy, a->dx);
    ew_grid(d, (unsigned long long)a->n * (unsigned long long)a->c * (unsigned long long)a->h * (unsigned long long)a->w);
    return MD_OK;
}

static md_status film_params(const char *op, const struct md_film_args *a, struct md_mtl_film_params *v)
{
    MD_TRY(check_dtype(op, a->dtype));
    if (a->n < 0 || a->t < 0 || a->d < 0)
        return md_errf(MD_ERR_INTERNAL, "metal %s: bad shape (n %d, t %d, d %d)", op, a->n, a->t, a->d);
    *v = (struct md_mtl_film_params){
        .n = a->n, .t = a->t, .d = a->d, .beta = a->beta, .beta_cond = a->beta_cond,
    };
    return MD_OK;
}

md_status md_metal_plan_film_fwd(const struct md_film_args *a, struct md_metal_plan *p)
{
    struct md_mtl_film_params v;
    MD_TRY(film_params("film_fwd", a, &v));
    struct md_metal_dispatch *d = begin(p, 0, "md_film_fwd", a->dtype, &v, sizeof v);
    BIND(d, a->x, a->cond, a->y);
    ew_grid(d, (unsigned long long)a->n * (unsigned long long)a->t * (unsigned long long)a->d);
    return MD_OK;
}

md_status md_metal_plan_film_bwd(const struct md_film_args *a, struct md_metal_plan *p)
{
    struct md_mtl_film_params v;
    MD_TRY(film_params("film_bwd", a, &v));
    int n = 0;
    if (a->dx) {
        struct md_metal_dispatch *d = begin(p, n++, "md_film_bwd_dx", a->dtype, &v, sizeof v);
        BIND(d, a->dy, a->cond, a->dx);
        ew_grid(d, (unsigned long long)a->n * (unsigned long long)a->t * (unsigned long long)a->d);
    }
    if (a->dcond) {
        struct md_metal_dispatch *d = begin(p, n++, "md_film_bwd_cond", a->dtype, &v, sizeof v);
        BIND(d, a->x, a->dy, a->dcond);
        ew_grid(d, (unsigned long long)a->n * (unsigned long long)a->d);
    }
    if (!n) md_metal_plan_noop(p);
    return MD_OK;
}

static md_status chscale_params(const char *op, const struct md_chscale_args *a, struct md_mtl_chscale_params *v)
{
    MD_TRY(check_dtype(op, a->dtype));
    if (a->rows < 0 || a->d < 0)
        return md_errf(MD_ERR_INTERNAL, "metal %s: bad shape (rows %d, d %d)", op, a->rows, a->d);
    *v = (struct md_mtl_chscale_params){.rows = a->rows, .d = a->d, .beta = a->beta, .beta_g = a->beta_g};
    return MD_OK;
}

md_status md_metal_plan_chscale_fwd(const struct md_chscale_args *a, struct md_metal_plan *p)
{
    struct md_mtl_chscale_params v;
    MD_TRY(chscale_params("chscale_fwd", a, &v));
    struct md_metal_dispatch *d = begin(p, 0, "md_chscale", a->dtype, &v, sizeof v);
    BIND(d, a->x, a->g, a->y);
    ew_grid(d, (unsigned long long)a->rows * (unsigned long long)a->d);
    return MD_OK;
}

md_status md_metal_plan_chscale_bwd(const struct md_chscale_args *a, struct md_metal_plan *p)
{
    struct md_mtl_chscale_params v;
    MD_TRY(chscale_params("chscale_bwd", a, &v));
    int n = 0;
    if (a->dg) {
        struct md_metal_dispatch *d = begin(p, n++, "md_chscale_dg", a->dtype, &v, sizeof v);
        BIND(d, a->x, a->dy, a->dg);
        ew_grid(d, (unsigned long long)a->d);
    }
    if (a->dx) { /* after dg: dx may be dy's buffer */
        struct md_metal_dispatch *d = begin(p, n++, "md_chscale", a->dtype, &v, sizeof v);
        BIND(d, a->dy, a->g, a->dx);
        ew_grid(d, (unsigned long long)a->rows * (unsigned long long)a->d);
    }
    if (!n) md_metal_plan_noop(p);
    return MD_OK;
}
