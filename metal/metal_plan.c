/* metal_plan.c - kernel table calls as Metal dispatches (see metal_plan.h).
 * Semantics follow src/backend/ref (the reference kernels) exactly; the
 * kernels themselves are the .metal files of this folder.
 *
 * Table-driven: an op family has one pack function (checks the call, packs
 * its md_metal_args.h params struct and the extents its grids are sized by),
 * and every kernel table entry is one row (struct plan_op) naming its pack
 * function, params struct and up to two dispatch steps: the kernel, the
 * args struct's buffers in binding order, the grid, and when the step runs.
 * One function (plan()) turns a row and a call into a plan. metal/check
 * (msl_check.c) reads the STEP rows to check them against the shaders. */
#include "metal_plan.h"

#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "md_metal_args.h"
#include "metal_grid.h"

/* ---- what a pack function produces ------------------------------------------------- */

#define MAX_EXT 3

struct packed {
    _Alignas(16) unsigned char v[MD_METAL_MAX_PARAMS]; /* the params struct */
    size_t size;
    md_dtype dtype, src_dtype;       /* kernel name suffixes */
    unsigned long long ext[MAX_EXT][3]; /* grid extents the steps pick from */
};

typedef md_status (*pack_fn)(const char *op, const void *args, struct packed *k);

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

/* A value read on the device (a dropout offset, a loss scale) is for captured
 * steps (CUDA graphs); here it must come with the call. */
static md_status host_value(const char *op, int on_device, const char *what)
{
    if (!on_device) return MD_OK;
    return md_errf(MD_ERR_UNSUPPORTED, "metal %s: a device-side %s is for captured steps (CUDA graphs)", op, what);
}

/* The call's dtype: checked, and the suffix of typed kernel names. */
static md_status typed(const char *op, md_dtype t, struct packed *k)
{
    MD_TRY(check_dtype(op, t));
    k->dtype = t;
    return MD_OK;
}

/* PUT(k, struct type, .field = value, ...): the params struct into k. */
#define PUT(k, T, ...) put((k), &(struct T){__VA_ARGS__}, sizeof(struct T))
static void put(struct packed *k, const void *v, size_t size)
{
    MD_ASSERT(size <= MD_METAL_MAX_PARAMS);
    memcpy(k->v, v, size);
    k->size = size;
}

static void ext(struct packed *k, int i, unsigned long long x, unsigned long long y, unsigned long long z)
{
    k->ext[i][0] = x, k->ext[i][1] = y, k->ext[i][2] = z;
}

/* ---- pack functions, by op family ------------------------------------------------------ */

static md_status pack_gemm(const char *op, const void *args, struct packed *k)
{
    const struct md_gemm_args *a = args;
    MD_TRY(typed(op, a->dtype, k));
    if (a->m < 0 || a->n < 0 || a->k < 0 || a->batch < 1)
        return md_errf(MD_ERR_INTERNAL, "metal gemm: bad shape m %d n %d k %d batch %d", a->m, a->n, a->k, a->batch);
    PUT(k, md_mtl_gemm_params, .stride_a = a->stride_a, .stride_b = a->stride_b, .stride_c = a->stride_c,
        .m = a->m, .n = a->n, .k = a->k, .lda = a->lda, .ldb = a->ldb, .ldc = a->ldc,
        .trans_a = a->trans_a, .trans_b = a->trans_b, .alpha = a->alpha, .beta = a->beta);
    ext(k, 0, (unsigned long long)a->m, (unsigned long long)a->n, (unsigned long long)a->batch);
    return MD_OK;
}

/* Extents: 0 forward (kg x n*p*q), 1 backward data (cg x n*h*w), 2 backward
 * filter (kg x cg*r*s); each batched over the groups. */
static md_status pack_conv(const char *op, const void *args, struct packed *k)
{
    const struct md_conv2d_args *a = args;
    MD_TRY(typed(op, a->dtype, k));
    if (a->groups < 1 || a->c % a->groups || a->k % a->groups)
        return md_errf(MD_ERR_INTERNAL, "metal %s: groups %d must divide c %d and k %d", op, a->groups, a->c, a->k);
    if (a->p != md_conv_out(a->h, a->r, a->stride_h, a->pad_h, a->dil_h) ||
        a->q != md_conv_out(a->w, a->s, a->stride_w, a->pad_w, a->dil_w) || a->p <= 0 || a->q <= 0)
        return md_errf(MD_ERR_INTERNAL, "metal %s: output %dx%d does not match input %dx%d", op, a->p, a->q, a->h, a->w);
    int cg = a->c / a->groups, kg = a->k / a->groups;
    PUT(k, md_mtl_conv_params, .n = a->n, .c = a->c, .h = a->h, .w = a->w, .k = a->k, .r = a->r, .s = a->s,
        .p = a->p, .q = a->q, .stride_h = a->stride_h, .stride_w = a->stride_w, .pad_h = a->pad_h,
        .pad_w = a->pad_w, .dil_h = a->dil_h, .dil_w = a->dil_w, .groups = a->groups, .cg = cg, .kg = kg,
        .nhwc = a->layout == MD_NHWC, .beta = a->beta);
    ext(k, 0, (unsigned long long)kg, (unsigned long long)(a->n * a->p * a->q), (unsigned long long)a->groups);
    ext(k, 1, (unsigned long long)cg, (unsigned long long)(a->n * a->h * a->w), (unsigned long long)a->groups);
    ext(k, 2, (unsigned long long)kg, (unsigned long long)(cg * a->r * a->s), (unsigned long long)a->groups);
    return MD_OK;
}

static md_status pack_bn(const char *op, const void *args, struct packed *k)
{
    const struct md_batchnorm_args *a = args;
    MD_TRY(typed(op, a->dtype, k));
    if (a->act != MD_ACT_NONE && a->act != MD_ACT_RELU)
        return md_errf(MD_ERR_UNSUPPORTED, "metal %s: fused activation %d (none or relu only)", op, a->act);
    if (!a->training && (!a->running_mean || !a->running_var))
        return md_errf(MD_ERR_INTERNAL, "metal %s: inference needs running statistics", op);
    double m = (double)a->n * a->hw;
    PUT(k, md_mtl_bn_params, .n = a->n, .c = a->c, .hw = a->hw, .nhwc = a->layout == MD_NHWC,
        .relu = a->act == MD_ACT_RELU, .training = a->training != 0,
        .has_gamma = a->gamma != NULL, .has_beta = a->beta_p != NULL,
        .has_rmean = a->running_mean != NULL, .has_rvar = a->running_var != NULL,
        .has_smean = a->save_mean != NULL, .has_sinv = a->save_invstd != NULL,
        .has_y = a->y != NULL, .has_dx = a->dx != NULL,
        .has_dgamma = a->dgamma != NULL, .has_dbeta = a->dbeta != NULL,
        .eps = a->eps, .momentum = a->momentum, .beta = a->beta,
        .unbias = m > 1.0 ? (float)(m / (m - 1.0)) : 1.0f);
    ext(k, 0, (unsigned long long)a->c, 0, 0);
    return MD_OK;
}

static md_status pack_act(const char *op, const void *args, struct packed *k)
{
    const struct md_act_args *a = args;
    MD_TRY(typed(op, a->dtype, k));
    if (a->act < 0 || a->act >= MD_ACT_COUNT)
        return md_errf(MD_ERR_INTERNAL, "metal %s: unknown activation %d", op, a->act);
    PUT(k, md_mtl_act_params, .n = a->n, .act = a->act, .alpha = a->alpha, .beta = a->beta);
    ext(k, 0, a->n, 0, 0);
    return MD_OK;
}

/* Extents: 0 the output (forward), 1 the input (backward). */
static md_status pack_pool(const char *op, const void *args, struct packed *k)
{
    const struct md_pool2d_args *a = args;
    MD_TRY(typed(op, a->dtype, k));
    if (a->p != md_conv_out(a->h, a->kh, a->stride_h, a->pad_h, 1) ||
        a->q != md_conv_out(a->w, a->kw, a->stride_w, a->pad_w, 1) || a->p <= 0 || a->q <= 0)
        return md_errf(MD_ERR_INTERNAL, "metal %s: output %dx%d does not match input %dx%d", op, a->p, a->q, a->h, a->w);
    PUT(k, md_mtl_pool_params, .kind = a->kind, .n = a->n, .c = a->c, .h = a->h, .w = a->w, .p = a->p, .q = a->q,
        .kh = a->kh, .kw = a->kw, .stride_h = a->stride_h, .stride_w = a->stride_w,
        .pad_h = a->pad_h, .pad_w = a->pad_w, .count_include_pad = a->count_include_pad,
        .nhwc = a->layout == MD_NHWC, .beta = a->beta);
    ext(k, 0, (unsigned long long)a->n * a->c * a->p * a->q, 0, 0);
    ext(k, 1, (unsigned long long)a->n * a->c * a->h * a->w, 0, 0);
    return MD_OK;
}

/* The (n, c, hw) kernels of gap and bias (both args structs name them alike).
 * Extents: 0 n*c, 1 n*c*hw, 2 c. */
#define PACK_NCHW(a, k)                                                                                        \
    do {                                                                                                       \
        MD_TRY(typed(op, (a)->dtype, (k)));                                                                    \
        PUT((k), md_mtl_nchw_params, .n = (a)->n, .c = (a)->c, .hw = (a)->hw, .nhwc = (a)->layout == MD_NHWC, \
            .beta = (a)->beta);                                                                                \
        ext((k), 0, (unsigned long long)(a)->n * (a)->c, 0, 0);                                                \
        ext((k), 1, (unsigned long long)(a)->n * (a)->c * (a)->hw, 0, 0);                                      \
        ext((k), 2, (unsigned long long)(a)->c, 0, 0);                                                         \
    } while (0)

static md_status pack_gap(const char *op, const void *args, struct packed *k)
{
    PACK_NCHW((const struct md_gap_args *)args, k);
    return MD_OK;
}

static md_status pack_bias(const char *op, const void *args, struct packed *k)
{
    PACK_NCHW((const struct md_bias_args *)args, k);
    return MD_OK;
}

static md_status pack_dropout(const char *op, const void *args, struct packed *k)
{
    const struct md_dropout_args *a = args;
    MD_TRY(typed(op, a->dtype, k));
    MD_TRY(host_value(op, a->offset_dev != NULL, "offset"));
    PUT(k, md_mtl_dropout_params, .n = a->n, .seed = a->seed, .offset = a->offset, .has_mask = a->mask != NULL,
        .p = a->p, .scale = a->p < 1.0f ? (float)(1.0 / (1.0 - (double)a->p)) : 0.0f, .beta = a->beta);
    ext(k, 0, a->n, 0, 0);
    return MD_OK;
}

static md_status pack_ew(const char *op, const void *args, struct packed *k)
{
    const struct md_ew_args *a = args;
    MD_TRY(typed(op, a->dtype, k));
    if (a->op < 0 || a->op >= MD_EW_COUNT) return md_errf(MD_ERR_INTERNAL, "metal ew: unknown op %d", a->op);
    PUT(k, md_mtl_ew_params, .n = a->n, .op = a->op, .has_scale = a->scale_dev != NULL, .alpha = a->alpha,
        .beta = a->beta);
    ext(k, 0, a->n, 0, 0);
    return MD_OK;
}

/* Extents: 0 the partial sums (one threadgroup each), 1 the final one. */
static md_status pack_reduce(const char *op, const void *args, struct packed *k)
{
    const struct md_reduce_args *a = args;
    MD_TRY(typed(op, a->dtype, k));
    if (a->op < MD_RED_SUM || a->op > MD_RED_DOT) return md_errf(MD_ERR_INTERNAL, "metal reduce: unknown op %d", a->op);
    unsigned parts = md_metal_ceil_div(a->n ? a->n : 1, MD_MTL_RED_THREADS * 4ull);
    if (parts > MD_MTL_RED_PARTIALS) parts = MD_MTL_RED_PARTIALS;
    PUT(k, md_mtl_reduce_params, .n = a->n, .op = a->op, .parts = (md_mi32)parts, .beta = a->beta);
    ext(k, 0, parts, 0, 0);
    ext(k, 1, 1, 0, 0);
    return MD_OK;
}

static md_status pack_chslice(const char *op, const void *args, struct packed *k)
{
    const struct md_chslice_args *a = args;
    MD_TRY(typed(op, a->dtype, k));
    PUT(k, md_mtl_chslice_params, .n = a->n, .hw = a->hw, .cc = a->cc, .src_c = a->src_c, .src_off = a->src_off,
        .dst_c = a->dst_c, .dst_off = a->dst_off, .nhwc = a->layout == MD_NHWC, .beta = a->beta);
    ext(k, 0, (unsigned long long)a->n * a->cc * a->hw, 0, 0);
    return MD_OK;
}

static md_status pack_xent(const char *op, const void *args, struct packed *k)
{
    const struct md_xent_args *a = args;
    MD_TRY(typed(op, a->dtype, k));
    MD_TRY(host_value(op, a->grad_scale_dev != NULL, "loss scale"));
    PUT(k, md_mtl_xent_params, .n = a->n, .classes = a->classes, .has_loss = a->loss_sum != NULL,
        .has_correct = a->correct != NULL, .has_dlogits = a->dlogits != NULL, .smoothing = a->smoothing,
        .grad_scale = a->grad_scale);
    ext(k, 0, 1, 0, 0);
    return MD_OK;
}

static md_status pack_regress(const char *op, const void *args, struct packed *k)
{
    _Static_assert(MD_REGRESS_MSE == 0 && MD_REGRESS_MAE == 1 && MD_REGRESS_HUBER == 2 && MD_REGRESS_FINANCIAL == 3,
                   "loss.metal numbers the regression kinds so");
    const struct md_regress_args *a = args;
    MD_TRY(typed(op, a->dtype, k));
    MD_TRY(md_regress_args_check("metal", a));
    PUT(k, md_mtl_regress_params, .last_ld = a->last_ld, .n = a->n, .horizon = a->horizon,
        .channels = a->channels, .kind = (int)a->kind, .has_last = a->last != NULL,
        .has_loss = a->loss_sum != NULL, .has_metrics = a->metrics != NULL, .has_dpred = a->dpred != NULL,
        .delta = a->delta, .lambda = a->lambda, .grad_scale = a->grad_scale);
    ext(k, 0, 1, 0, 0);
    return MD_OK;
}

static md_status pack_cast(const char *op, const void *args, struct packed *k)
{
    const struct md_cast_args *a = args;
    MD_TRY(check_dtype(op, a->src_type));
    MD_TRY(typed(op, a->dst_type, k));
    k->src_dtype = a->src_type;
    PUT(k, md_mtl_cast_params, .n = a->n);
    ext(k, 0, a->n, 0, 0);
    return MD_OK;
}

static md_status pack_permute(const char *op, const void *args, struct packed *k)
{
    const struct md_permute_args *a = args;
    MD_TRY(typed(op, a->dtype, k));
    PUT(k, md_mtl_permute_params, .n = a->n, .c = a->c, .h = a->h, .w = a->w, .to_nhwc = a->to_nhwc != 0);
    ext(k, 0, (unsigned long long)a->n * a->c * a->h * a->w, 0, 0);
    return MD_OK;
}

static md_status pack_optim(const char *op, const void *args, struct packed *k)
{
    const struct md_optim_args *a = args;
    if (a->params_half) MD_TRY(check_dtype(op, a->half_dtype));
    if (a->ctl)
        return md_errf(MD_ERR_UNSUPPORTED, "metal optim: device-side step values are for captured steps (CUDA graphs)");
    if (a->params_half && a->half_dtype == MD_F32)
        return md_errf(MD_ERR_UNSUPPORTED, "metal optim: the compute copy must be fp16 or bf16");
    if (a->step < 1) return md_errf(MD_ERR_INTERNAL, "metal optim: step %lld < 1", a->step);
    if (a->kind != MD_OPT_SGD && a->kind != MD_OPT_ADAMW)
        return md_errf(MD_ERR_INTERNAL, "metal optim: unknown kind %d", a->kind);
    PUT(k, md_mtl_optim_params, .n = a->n, .kind = a->kind, .nesterov = a->nesterov != 0,
        .first_step = a->step == 1, .has_m = a->m != NULL, .has_v = a->v != NULL,
        .has_half = a->params_half != NULL, .half_dtype = a->half_dtype == MD_BF16 ? MD_MTL_BF16 : MD_MTL_F16,
        .has_scale = a->grad_scale_dev != NULL, .lr = a->lr, .momentum = a->momentum,
        .weight_decay = a->weight_decay, .beta1 = a->beta1, .beta2 = a->beta2, .eps = a->eps,
        .grad_scale = a->grad_scale,
        .bc1 = (float)(1.0 - pow((double)a->beta1, (double)a->step)),
        .bc2 = (float)(1.0 - pow((double)a->beta2, (double)a->step)));
    ext(k, 0, a->n, 0, 0);
    return MD_OK;
}

static md_status pack_noop(const char *op, const void *args, struct packed *k)
{
    (void)op, (void)args;
    PUT(k, md_mtl_cast_params, .n = 0);
    ext(k, 0, 1, 0, 0);
    return MD_OK;
}

/* Extents: 0 the rows, 1 the columns (d). */
static md_status pack_ln(const char *op, const void *args, struct packed *k)
{
    const struct md_layernorm_args *a = args;
    MD_TRY(typed(op, a->dtype, k));
    PUT(k, md_mtl_ln_params, .rows = a->rows, .d = a->d, .has_gamma = a->gamma != NULL,
        .has_beta = a->beta_p != NULL, .has_mean = a->mean != NULL, .has_rstd = a->rstd != NULL,
        .has_dx = a->dx != NULL, .has_dgamma = a->dgamma != NULL, .has_dbeta = a->dbeta != NULL, .eps = a->eps,
        .beta = a->beta);
    ext(k, 0, (unsigned long long)a->rows, 0, 0);
    ext(k, 1, (unsigned long long)a->d, 0, 0);
    return MD_OK;
}

static md_status pack_ln_bwd(const char *op, const void *args, struct packed *k)
{
    const struct md_layernorm_args *a = args;
    MD_TRY(check_dtype(op, a->dtype));
    if (!a->mean || !a->rstd)
        return md_errf(MD_ERR_UNSUPPORTED, "metal layernorm_bwd: needs the forward's saved mean and rstd");
    return pack_ln(op, args, k);
}

static md_status pack_softmax(const char *op, const void *args, struct packed *k)
{
    const struct md_softmax_args *a = args;
    MD_TRY(typed(op, a->dtype, k));
    if (a->causal && a->tq <= 0) return md_errf(MD_ERR_INTERNAL, "metal %s: causal mask needs tq > 0", op);
    PUT(k, md_mtl_softmax_params, .rows = a->rows, .n = a->n, .causal = a->causal != 0, .tq = a->tq,
        .scale = a->scale != 0.0f ? a->scale : 1.0f, .beta = a->beta);
    ext(k, 0, (unsigned long long)a->rows, 0, 0);
    return MD_OK;
}

/* Extents: 0 the query rows, 1 the key rows. */
static md_status pack_attn(const char *op, const void *args, struct packed *k)
{
    const struct md_attn_args *a = args;
    MD_TRY(typed(op, a->dtype, k));
    if (a->batch < 0 || a->heads < 0 || a->tq < 0 || a->tk < 1 || a->d < 1)
        return md_errf(MD_ERR_INTERNAL, "metal %s: bad shape batch %d heads %d tq %d tk %d d %d", op, a->batch,
                       a->heads, a->tq, a->tk, a->d);
    if (a->d > MD_MTL_ATTN_MAX_D)
        return md_errf(MD_ERR_UNSUPPORTED, "metal %s: head_dim %d (at most %d)", op, a->d, MD_MTL_ATTN_MAX_D);
    MD_TRY(host_value(op, a->offset_dev != NULL, "offset"));
    if (!(a->dropout_p >= 0.0f && a->dropout_p <= 1.0f))
        return md_errf(MD_ERR_INTERNAL, "metal %s: dropout %g outside [0, 1]", op, (double)a->dropout_p);
    struct md_mtl_attn_params v;
    memset(&v, 0, sizeof v);
    long long s[3];
    md_attn_strides(a->sq, a->heads, a->tq, a->d, s), memcpy(v.sq, s, sizeof s);
    md_attn_strides(a->sk, a->heads, a->tk, a->d, s), memcpy(v.sk, s, sizeof s);
    md_attn_strides(a->sv, a->heads, a->tk, a->d, s), memcpy(v.sv, s, sizeof s);
    md_attn_strides(a->so, a->heads, a->tq, a->d, s), memcpy(v.so, s, sizeof s);
    v.seed = a->seed, v.offset = a->offset;
    v.batch = a->batch, v.heads = a->heads, v.tq = a->tq, v.tk = a->tk, v.d = a->d;
    v.causal = a->causal != 0, v.has_lse = a->lse != NULL;
    v.has_dq = a->dq != NULL, v.has_dk = a->dk != NULL, v.has_dv = a->dv != NULL;
    v.dropout = a->dropout_p > 0.0f;
    v.scale = md_attn_scale(a), v.p = a->dropout_p, v.beta = a->beta;
    v.keep_scale = a->dropout_p < 1.0f ? (float)(1.0 / (1.0 - (double)a->dropout_p)) : 0.0f;
    put(k, &v, sizeof v);
    ext(k, 0, (unsigned long long)(a->batch * a->heads * a->tq), 0, 0);
    ext(k, 1, (unsigned long long)(a->batch * a->heads * a->tk), 0, 0);
    return MD_OK;
}

static md_status pack_attn_bwd(const char *op, const void *args, struct packed *k)
{
    MD_TRY(pack_attn(op, args, k));
    if (!((const struct md_attn_args *)args)->lse)
        return md_errf(MD_ERR_INTERNAL, "metal attn_bwd: needs the forward's logsumexp (lse)");
    return MD_OK;
}

/* Extents: 0 the tiles (forward), 1 the image (backward). */
static md_status pack_tiles(const char *op, const void *args, struct packed *k)
{
    const struct md_tiles_args *a = args;
    MD_TRY(typed(op, a->dtype, k));
    if (a->n < 0 || a->c < 1 || a->rows < 1 || a->cols < 1 || a->h < a->rows || a->w < a->cols || a->size < 1 ||
        a->ld < a->rows * a->cols)
        return md_errf(MD_ERR_INTERNAL, "metal %s: bad shape (n %d, c %d, %dx%d, grid %dx%d, size %d, ld %d)", op,
                       a->n, a->c, a->h, a->w, a->rows, a->cols, a->size, a->ld);
    PUT(k, md_mtl_tiles_params, .n = a->n, .c = a->c, .h = a->h, .w = a->w, .rows = a->rows, .cols = a->cols,
        .size = a->size, .ld = a->ld, .beta = a->beta);
    ext(k, 0, (unsigned long long)a->n * (unsigned long long)(a->rows * a->cols) * (unsigned long long)a->c *
                  (unsigned long long)a->size * (unsigned long long)a->size, 0, 0);
    ext(k, 1, (unsigned long long)a->n * (unsigned long long)a->c * (unsigned long long)a->h * (unsigned long long)a->w,
        0, 0);
    return MD_OK;
}

/* Extents: 0 n*t*d, 1 n*d. */
static md_status pack_film(const char *op, const void *args, struct packed *k)
{
    const struct md_film_args *a = args;
    MD_TRY(typed(op, a->dtype, k));
    if (a->n < 0 || a->t < 0 || a->d < 0)
        return md_errf(MD_ERR_INTERNAL, "metal %s: bad shape (n %d, t %d, d %d)", op, a->n, a->t, a->d);
    PUT(k, md_mtl_film_params, .n = a->n, .t = a->t, .d = a->d, .beta = a->beta, .beta_cond = a->beta_cond);
    ext(k, 0, (unsigned long long)a->n * (unsigned long long)a->t * (unsigned long long)a->d, 0, 0);
    ext(k, 1, (unsigned long long)a->n * (unsigned long long)a->d, 0, 0);
    return MD_OK;
}

/* Extents: 0 rows*d, 1 d. */
static md_status pack_chscale(const char *op, const void *args, struct packed *k)
{
    const struct md_chscale_args *a = args;
    MD_TRY(typed(op, a->dtype, k));
    if (a->rows < 0 || a->d < 0)
        return md_errf(MD_ERR_INTERNAL, "metal %s: bad shape (rows %d, d %d)", op, a->rows, a->d);
    PUT(k, md_mtl_chscale_params, .rows = a->rows, .d = a->d, .beta = a->beta, .beta_g = a->beta_g);
    ext(k, 0, (unsigned long long)a->rows * (unsigned long long)a->d, 0, 0);
    ext(k, 1, (unsigned long long)a->d, 0, 0);
    return MD_OK;
}

/* ---- the table's rows ------------------------------------------------------------------ */

enum naming { PLAIN, TYPED, CAST, BYTES }; /* "<k>", "<k>_<dtype>", "<k>_<src>_<dst>", "<k>_b<size>" */
enum grid { G_EW, G_ROWS, G_TILES, G_ATTN };

/* One dispatch: kernel, its name's suffix, grid (by one of the pack
 * function's extents), the pointers that make it run (any of them set; none
 * listed: always), where the backend's reduction scratch binds (-1: none),
 * and the args struct's buffers bound in order around it. */
struct step {
    const char *kernel;
    enum naming naming;
    enum grid grid;
    int ext;
    unsigned short when[2]; /* offsetof + 1; 0: unused */
    int scratch;
    int nbufs;
    unsigned short bufs[MD_METAL_MAX_BUFS]; /* offsetof the pointer fields */
};

struct plan_op {
    const char *op;
    pack_fn pack;
    size_t params_size;
    struct step steps[MD_METAL_MAX_DISPATCH];
};

#define OFF_(T, f) (unsigned short)offsetof(struct T, f)
#define FE1(T, f) OFF_(T, f)
#define FE2(T, f, ...) OFF_(T, f), FE1(T, __VA_ARGS__)
#define FE3(T, f, ...) OFF_(T, f), FE2(T, __VA_ARGS__)
#define FE4(T, f, ...) OFF_(T, f), FE3(T, __VA_ARGS__)
#define FE5(T, f, ...) OFF_(T, f), FE4(T, __VA_ARGS__)
#define FE6(T, f, ...) OFF_(T, f), FE5(T, __VA_ARGS__)
#define FE7(T, f, ...) OFF_(T, f), FE6(T, __VA_ARGS__)
#define FE8(T, f, ...) OFF_(T, f), FE7(T, __VA_ARGS__)
#define FE9(T, f, ...) OFF_(T, f), FE8(T, __VA_ARGS__)
#define FE10(T, f, ...) OFF_(T, f), FE9(T, __VA_ARGS__)
#define FE11(T, f, ...) OFF_(T, f), FE10(T, __VA_ARGS__)
#define FE12(T, f, ...) OFF_(T, f), FE11(T, __VA_ARGS__)
#define NARGS_(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, n, ...) n
#define NARGS(...) NARGS_(__VA_ARGS__, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)

/* BUFS(args struct, field, ...): the buffers bound, in the shader's order. */
#define BUFS(T, ...) .nbufs = NARGS(__VA_ARGS__), .bufs = {CAT(FE, NARGS(__VA_ARGS__))(T, __VA_ARGS__)}
#define NO_BUFS .nbufs = 0
#define ALWAYS .when = {0, 0}
#define WHEN(T, f) .when = {OFF_(T, f) + 1, 0}
#define WHEN2(T, f, g) .when = {OFF_(T, f) + 1, OFF_(T, g) + 1}
#define NO_SCRATCH .scratch = -1
#define SCRATCH_AT(i) .scratch = (i)
#define EW(i) .grid = G_EW, .ext = (i)
#define ROWS(i) .grid = G_ROWS, .ext = (i)
#define TILES(i) .grid = G_TILES, .ext = (i)
#define ATTN(i) .grid = G_ATTN, .ext = (i)
#define STEP(kname, nm, grid, when, scratch, bufs) {.kernel = kname, .naming = nm, grid, when, scratch, bufs}
#define PARAMS(T) sizeof(struct T)

#define OP(name, packf, params, ...) \
    static const struct plan_op op_##name = {#name, packf, params, {__VA_ARGS__}}

OP(gemm, pack_gemm, PARAMS(md_mtl_gemm_params),
   STEP("md_gemm", TYPED, TILES(0), ALWAYS, NO_SCRATCH, BUFS(md_gemm_args, a, b, c)));
OP(conv2d_fwd, pack_conv, PARAMS(md_mtl_conv_params),
   STEP("md_conv_fwd", TYPED, TILES(0), ALWAYS, NO_SCRATCH, BUFS(md_conv2d_args, x, wt, y)));
OP(conv2d_bwd_data, pack_conv, PARAMS(md_mtl_conv_params),
   STEP("md_conv_bwd_data", TYPED, TILES(1), ALWAYS, NO_SCRATCH, BUFS(md_conv2d_args, dy, wt, dx)));
OP(conv2d_bwd_filter, pack_conv, PARAMS(md_mtl_conv_params),
   STEP("md_conv_bwd_filter", TYPED, TILES(2), ALWAYS, NO_SCRATCH, BUFS(md_conv2d_args, dy, x, dwt)));

OP(batchnorm_fwd, pack_bn, PARAMS(md_mtl_bn_params),
   STEP("md_bn_fwd", TYPED, ROWS(0), ALWAYS, NO_SCRATCH,
        BUFS(md_batchnorm_args, x, y, gamma, beta_p, running_mean, running_var, save_mean, save_invstd)));
OP(batchnorm_bwd, pack_bn, PARAMS(md_mtl_bn_params),
   STEP("md_bn_bwd", TYPED, ROWS(0), ALWAYS, NO_SCRATCH,
        BUFS(md_batchnorm_args, x, y, dy, dx, gamma, beta_p, running_mean, running_var, save_mean, save_invstd,
             dgamma, dbeta)));

OP(act_fwd, pack_act, PARAMS(md_mtl_act_params),
   STEP("md_act_fwd", TYPED, EW(0), ALWAYS, NO_SCRATCH, BUFS(md_act_args, x, y)));
OP(act_bwd, pack_act, PARAMS(md_mtl_act_params),
   STEP("md_act_bwd", TYPED, EW(0), ALWAYS, NO_SCRATCH, BUFS(md_act_args, x, dy, dx)));
OP(pool2d_fwd, pack_pool, PARAMS(md_mtl_pool_params),
   STEP("md_pool_fwd", TYPED, EW(0), ALWAYS, NO_SCRATCH, BUFS(md_pool2d_args, x, y_out)));
OP(pool2d_bwd, pack_pool, PARAMS(md_mtl_pool_params),
   STEP("md_pool_bwd", TYPED, EW(1), ALWAYS, NO_SCRATCH, BUFS(md_pool2d_args, x, dy, dx)));
OP(gap_fwd, pack_gap, PARAMS(md_mtl_nchw_params),
   STEP("md_gap_fwd", TYPED, EW(0), ALWAYS, NO_SCRATCH, BUFS(md_gap_args, x, y)));
OP(gap_bwd, pack_gap, PARAMS(md_mtl_nchw_params),
   STEP("md_gap_bwd", TYPED, EW(1), ALWAYS, NO_SCRATCH, BUFS(md_gap_args, dy, dx)));
OP(bias_add, pack_bias, PARAMS(md_mtl_nchw_params),
   STEP("md_bias_add", TYPED, EW(1), ALWAYS, NO_SCRATCH, BUFS(md_bias_args, y, bias)));
OP(bias_grad, pack_bias, PARAMS(md_mtl_nchw_params),
   STEP("md_bias_grad", TYPED, ROWS(2), ALWAYS, NO_SCRATCH, BUFS(md_bias_args, dy, dbias)));
OP(dropout_fwd, pack_dropout, PARAMS(md_mtl_dropout_params),
   STEP("md_dropout_fwd", TYPED, EW(0), ALWAYS, NO_SCRATCH, BUFS(md_dropout_args, x, y, mask)));
OP(dropout_bwd, pack_dropout, PARAMS(md_mtl_dropout_params),
   STEP("md_dropout_bwd", TYPED, EW(0), ALWAYS, NO_SCRATCH, BUFS(md_dropout_args, dy, mask, dx)));
OP(ew, pack_ew, PARAMS(md_mtl_ew_params),
   STEP("md_ew", TYPED, EW(0), ALWAYS, NO_SCRATCH, BUFS(md_ew_args, a, b, y, scale_dev)));
OP(reduce, pack_reduce, PARAMS(md_mtl_reduce_params),
   STEP("md_reduce_part", TYPED, ROWS(0), ALWAYS, SCRATCH_AT(2), BUFS(md_reduce_args, a, b)),
   STEP("md_mtl_reduce_final", PLAIN, ROWS(1), ALWAYS, SCRATCH_AT(0), BUFS(md_reduce_args, out)));
OP(chslice, pack_chslice, PARAMS(md_mtl_chslice_params),
   STEP("md_chslice", TYPED, EW(0), ALWAYS, NO_SCRATCH, BUFS(md_chslice_args, src, dst)));
OP(xent, pack_xent, PARAMS(md_mtl_xent_params),
   STEP("md_xent", TYPED, ROWS(0), ALWAYS, NO_SCRATCH,
        BUFS(md_xent_args, logits, labels, loss_sum, correct, dlogits)));
OP(regress, pack_regress, PARAMS(md_mtl_regress_params),
   STEP("md_regress", TYPED, ROWS(0), ALWAYS, NO_SCRATCH,
        BUFS(md_regress_args, pred, target, last, loss_sum, metrics, dpred)));
OP(cast, pack_cast, PARAMS(md_mtl_cast_params),
   STEP("md_cast", CAST, EW(0), ALWAYS, NO_SCRATCH, BUFS(md_cast_args, src, dst)));
OP(permute, pack_permute, PARAMS(md_mtl_permute_params),
   STEP("md_permute", BYTES, EW(0), ALWAYS, NO_SCRATCH, BUFS(md_permute_args, src, dst)));
OP(optim, pack_optim, PARAMS(md_mtl_optim_params),
   STEP("md_mtl_optim", PLAIN, EW(0), ALWAYS, NO_SCRATCH,
        BUFS(md_optim_args, params, grads, m, v, params_half, grad_scale_dev)));
OP(noop, pack_noop, PARAMS(md_mtl_cast_params), STEP("md_mtl_noop", PLAIN, EW(0), ALWAYS, NO_SCRATCH, NO_BUFS));

OP(layernorm_fwd, pack_ln, PARAMS(md_mtl_ln_params),
   STEP("md_ln_fwd", TYPED, ROWS(0), ALWAYS, NO_SCRATCH, BUFS(md_layernorm_args, x, y, gamma, beta_p, mean, rstd)));
OP(layernorm_bwd, pack_ln_bwd, PARAMS(md_mtl_ln_params),
   STEP("md_ln_bwd_dx", TYPED, ROWS(0), WHEN(md_layernorm_args, dx), NO_SCRATCH,
        BUFS(md_layernorm_args, x, dy, dx, gamma, mean, rstd)),
   STEP("md_ln_bwd_params", TYPED, EW(1), WHEN2(md_layernorm_args, dgamma, dbeta), NO_SCRATCH,
        BUFS(md_layernorm_args, x, dy, mean, rstd, dgamma, dbeta)));
OP(softmax_fwd, pack_softmax, PARAMS(md_mtl_softmax_params),
   STEP("md_softmax_fwd", TYPED, ROWS(0), ALWAYS, NO_SCRATCH, BUFS(md_softmax_args, x, y)));
OP(softmax_bwd, pack_softmax, PARAMS(md_mtl_softmax_params),
   STEP("md_softmax_bwd", TYPED, ROWS(0), ALWAYS, NO_SCRATCH, BUFS(md_softmax_args, y, dy, dx)));
OP(attn_fwd, pack_attn, PARAMS(md_mtl_attn_params),
   STEP("md_attn_fwd", TYPED, ATTN(0), ALWAYS, NO_SCRATCH, BUFS(md_attn_args, q, k, v, o, lse)));
OP(attn_bwd, pack_attn_bwd, PARAMS(md_mtl_attn_params),
   STEP("md_attn_bwd_q", TYPED, ATTN(0), WHEN(md_attn_args, dq), NO_SCRATCH,
        BUFS(md_attn_args, q, k, v, o, lse, d_o, dq)),
   STEP("md_attn_bwd_kv", TYPED, ATTN(1), WHEN2(md_attn_args, dk, dv), NO_SCRATCH,
        BUFS(md_attn_args, q, k, v, o, lse, d_o, dk, dv)));

OP(tiles_fwd, pack_tiles, PARAMS(md_mtl_tiles_params),
   STEP("md_tiles_fwd", TYPED, EW(0), ALWAYS, NO_SCRATCH, BUFS(md_tiles_args, x, y)));
OP(tiles_bwd, pack_tiles, PARAMS(md_mtl_tiles_params),
   STEP("md_tiles_bwd", TYPED, EW(1), ALWAYS, NO_SCRATCH, BUFS(md_tiles_args, dy, dx)));
OP(film_fwd, pack_film, PARAMS(md_mtl_film_params),
   STEP("md_film_fwd", TYPED, EW(0), ALWAYS, NO_SCRATCH, BUFS(md_film_args, x, cond, y)));
OP(film_bwd, pack_film, PARAMS(md_mtl_film_params),
   STEP("md_film_bwd_dx", TYPED, EW(0), WHEN(md_film_args, dx), NO_SCRATCH, BUFS(md_film_args, dy, cond, dx)),
   STEP("md_film_bwd_cond", TYPED, EW(1), WHEN(md_film_args, dcond), NO_SCRATCH, BUFS(md_film_args, x, dy, dcond)));
OP(chscale_fwd, pack_chscale, PARAMS(md_mtl_chscale_params),
   STEP("md_chscale", TYPED, EW(0), ALWAYS, NO_SCRATCH, BUFS(md_chscale_args, x, g, y)));
/* dg before dx: dx may be dy's buffer */
OP(chscale_bwd, pack_chscale, PARAMS(md_mtl_chscale_params),
   STEP("md_chscale_dg", TYPED, EW(1), WHEN(md_chscale_args, dg), NO_SCRATCH, BUFS(md_chscale_args, x, dy, dg)),
   STEP("md_chscale", TYPED, EW(0), WHEN(md_chscale_args, dx), NO_SCRATCH, BUFS(md_chscale_args, dy, g, dx)));

/* ---- a row and a call as a plan ---------------------------------------------------------- */

static void *field(const void *args, unsigned short off)
{
    void *ptr;
    memcpy(&ptr, (const char *)args + off, sizeof ptr);
    return ptr;
}

static void name_step(char *out, size_t n, const struct step *s, const struct packed *k)
{
    switch (s->naming) {
    case PLAIN: snprintf(out, n, "%s", s->kernel); break;
    case TYPED: snprintf(out, n, "%s_%s", s->kernel, dt_sfx(k->dtype)); break;
    case CAST: snprintf(out, n, "%s_%s_%s", s->kernel, dt_sfx(k->src_dtype), dt_sfx(k->dtype)); break;
    case BYTES: snprintf(out, n, "%s_b%d", s->kernel, md_dtype_size(k->dtype) == 4 ? 4 : 2); break;
    }
}

static void size_grid(struct md_metal_dispatch *d, const struct step *s, const unsigned long long *e)
{
    switch (s->grid) {
    case G_EW:
        md_metal_grid_1d(e[0], MD_METAL_EW_THREADS, MD_METAL_EW_MAX_GROUPS, d->grid, d->tg);
        break;
    case G_TILES:
        md_metal_grid_tiles((int)e[0], (int)e[1], (int)e[2], d->grid, d->tg);
        d->tg_mem = MD_MTL_MM_TGMEM;
        d->barriers = 1;
        break;
    case G_ROWS:
    case G_ATTN:
        md_metal_grid_rows((int)e[0], MD_MTL_RED_THREADS, d->grid, d->tg);
        d->tg_mem = MD_MTL_RED_THREADS * sizeof(float);
        d->barriers = 1;
        if (s->grid == G_ATTN) d->tg_mem = MD_MTL_ATTN_TGMEM * sizeof(float);
        break;
    }
}

static md_status plan(const struct plan_op *op, const void *args, struct md_metal_plan *p)
{
    struct packed k;
    memset(&k, 0, sizeof k);
    MD_TRY(op->pack(op->op, args, &k));
    MD_ASSERT(k.size == op->params_size);
    int n = 0;
    for (int i = 0; i < MD_METAL_MAX_DISPATCH && op->steps[i].kernel; i++) {
        const struct step *s = &op->steps[i];
        if (s->when[0] && !field(args, s->when[0] - 1) && !(s->when[1] && field(args, s->when[1] - 1))) continue;
        struct md_metal_dispatch *d = &p->d[n];
        memset(d, 0, sizeof *d);
        name_step(d->name, sizeof d->name, s, &k);
        memcpy(d->params, k.v, k.size);
        d->params_size = (unsigned)k.size;
        for (int b = 0; b <= s->nbufs; b++) {
            if (b == s->scratch) {
                d->scratch_mask |= 1u << d->nbufs;
                d->bufs[d->nbufs++] = NULL;
            }
            if (b < s->nbufs) d->bufs[d->nbufs++] = field(args, s->bufs[b]);
        }
        size_grid(d, s, k.ext[s->ext]);
        p->n = ++n;
    }
    if (!n) md_metal_plan_noop(p);
    return MD_OK;
}

void md_metal_plan_noop(struct md_metal_plan *p)
{
    md_status st = plan(&op_noop, NULL, p);
    MD_ASSERT(st == MD_OK);
    md_metal_grid_1d(1, 1, 1, p->d[0].grid, p->d[0].tg);
}

#define PLAN_FN(op, argtype) \
    md_status md_metal_plan_##op(const struct argtype *a, struct md_metal_plan *p) { return plan(&op_##op, a, p); }
MD_METAL_PLANNED_KERNELS(PLAN_FN)
