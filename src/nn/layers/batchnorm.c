/* batchnorm.c - batch normalisation over (N, H, W) per channel, as
 * torch.nn.BatchNorm2d, with an optional ReLU on its output (written
 * "act": "relu", or fused from a following relu layer by compile) and, fused
 * by compile from a following two-operand add, a residual summand before the
 * ReLU: y = act(bn(x) + r), r the layer's second input (the device's kernel
 * where it has one, else batch norm, sum and ReLU apart):
 *   {"type": "batchnorm", "eps": 1e-5, "momentum": 0.1, "act": "none",
 *    "zero_init": false}
 * Where the device runs it (md_dev_batchnorm_pool: the CPU in fp32), a
 * following 2x2 stride-2 max pool after the ReLU is fused
 * at bind: the layer's output is then the pooled one and the full-size
 * activation is never stored; channels-last, each window's routing (x at its
 * maximum and which element that is, 5 bytes a pooled element) is kept from
 * the training forward for the backward.
 * weight (gamma) 1 (0 when zero_init and the model's zero_init_residual),
 * bias (beta) 0; buffers running_mean 0 and running_var 1. */
#include "nn/layer.h"

#include <stdio.h>
#include <string.h>

#include "core/json.h"

struct batchnorm_cfg {
    float eps, momentum;
    int act;       /* enum md_act: MD_ACT_NONE or MD_ACT_RELU */
    int zero_init; /* gamma 0 when the model's zero_init_residual is on */
    int res;       /* a fused residual: the second input (compile) */
    int pool;      /* a fused 2x2 stride-2 max pool after the ReLU (bind); 2: its routing kept */
    int conv;      /* backward writes the filter gradient of the convolution feeding it, not dx (bind) */
};

static md_status batchnorm_parse(const struct md_layer_parse *p, const cJSON *o, struct md_layer *L)
{
    struct batchnorm_cfg *a = L->args;
    const char *path = L->path;
    (void)p;
    static const char *const k[] = {"eps", "momentum", "act", "zero_init", NULL};
    MD_TRY(md_layer_check_keys(o, path, k));
    double eps = 1e-5, mom = 0.1;
    MD_TRY(md_json_num(o, "eps", path, 0, 1e-12, 1.0, &eps));
    MD_TRY(md_json_num(o, "momentum", path, 0, 0.0, 1.0, &mom));
    MD_TRY(md_layer_get_act(o, path, &a->act));
    MD_TRY(md_json_bool(o, "zero_init", path, 0, &a->zero_init));
    a->eps = (float)eps;
    a->momentum = (float)mom;
    return MD_OK;
}

static md_status batchnorm_shape(const struct md_model *m, struct md_layer *L)
{
    L->out = m->layers[L->in[0]].out;
    L->nparams = 2LL * L->out.c;
    L->flops = 4.0 * (double)md_shape_numel(L->out);
    return MD_OK;
}

static int batchnorm_params(const struct md_model *m, const struct md_layer *L, struct md_param_decl *out)
{
    (void)m;
    out[0] = (struct md_param_decl){"weight", 1, {L->out.c}, 0, 0, 0.0f};
    out[1] = (struct md_param_decl){"bias", 1, {L->out.c}, 0, 0, 0.0f};
    return 2;
}

static int batchnorm_buffers(const struct md_model *m, const struct md_layer *L, struct md_param_decl *out)
{
    (void)m;
    out[0] = (struct md_param_decl){"running_mean", 1, {L->out.c}, 0, 0, 0.0f};
    out[1] = (struct md_param_decl){"running_var", 1, {L->out.c}, 0, 0, 1.0f};
    return 2;
}

static void batchnorm_init(const struct md_model *m, const struct md_layer *L, float *p)
{
    const struct batchnorm_cfg *a = L->args;
    float g = a->zero_init && m->zero_init_residual ? 0.0f : 1.0f;
    for (int c = 0; c < L->out.c; c++) {
        p[m->tensors[L->param[0]].offset + (size_t)c] = g;
        p[m->tensors[L->param[1]].offset + (size_t)c] = 0.0f;
    }
}

/* a fused pool's routing (md_batchnorm_args.pool_x, pool_arg): x's floats, then the indices */
static size_t routing_arg_off(const struct md_layer *L) { return md_layer_align16(md_shape_numel(L->out) * 4); }

static size_t batchnorm_mask_per_sample(const struct md_layer *L)
{
    if (((const struct batchnorm_cfg *)L->args)->pool != 2) return 0;
    return routing_arg_off(L) + md_layer_align16(md_shape_numel(L->out));
}

static void batchnorm_args(const struct md_layer_run *r, int i, struct md_batchnorm_args *b)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    const struct batchnorm_cfg *a = L->args;
    memset(b, 0, sizeof *b);
    struct md_shape xs = m->layers[L->in[0]].out; /* the output's shape, unless a pool is fused */
    b->n = r->n; b->c = L->out.c; b->hw = xs.h * xs.w;
    if (a->pool) {
        b->pool = 2, b->h = xs.h, b->w = xs.w;
        if (a->pool == 2) {
            b->pool_x = md_layer_saved(r, i, 0);
            b->pool_arg = md_layer_saved(r, i, routing_arg_off(L));
        }
    }
    b->layout = m->opts.layout;
    b->dtype = m->opts.compute_dtype;
    b->training = r->training;
    b->eps = a->eps;
    b->momentum = r->recompute ? 0.0f : a->momentum;
    b->act = a->act;
    b->x = md_layer_act(r, L->in[0]);
    b->y = md_layer_act(r, i);
    b->gamma = md_layer_param32(m, L->param[0]);
    b->beta_p = md_layer_param32(m, L->param[1]);
    b->running_mean = m->bn_stats + L->stat_off;
    b->running_var = m->bn_stats + L->stat_off + L->out.c;
    b->save_mean = m->bn_save + L->stat_off;
    b->save_invstd = m->bn_save + L->stat_off + L->out.c;
    b->sync = r->training && m->bn_sync_on ? &m->bn_sync : NULL;
    if (a->res) b->res = md_layer_act(r, L->in[1]);
}

/* A residual on a device without the fused kernel: its ReLU and the sum
 * apart, as the unfused add would run them. */
static int apart(const struct md_layer_run *r, const struct md_batchnorm_args *b)
{
    return b->res && !md_dev_batchnorm_residual(r->m->dev);
}

static md_status batchnorm_forward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    struct md_batchnorm_args b;
    batchnorm_args(r, i, &b);
    if (!apart(r, &b)) return md_k_batchnorm_fwd(m->dev, &b);
    int act = b.act;
    const void *res = b.res;
    b.act = MD_ACT_NONE;
    b.res = NULL;
    MD_TRY(md_k_batchnorm_fwd(m->dev, &b));
    size_t ne = (size_t)b.n * b.c * b.hw;
    MD_TRY(md_layer_axpby(m, ne, 1.0f, NULL, b.y, 1.0f, res, b.y));
    if (act == MD_ACT_NONE) return MD_OK;
    struct md_act_args k = {act, 0.0f, ne, b.dtype, b.y, b.y, NULL, NULL, 0};
    return md_k_act_fwd(m->dev, &k);
}

static md_status batchnorm_backward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    struct md_batchnorm_args b;
    batchnorm_args(r, i, &b);
    b.training = 1;
    b.sync = m->bn_sync_on ? &m->bn_sync : NULL;
    b.dy = md_layer_grad(r, i);
    b.dx = md_layer_dx(r, i, 0, &b.beta);
    b.dgamma = md_layer_grad32(m, L->param[0]);
    b.dbeta = md_layer_grad32(m, L->param[1]);
    if (b.res) b.dres = md_layer_dx(r, i, 1, &b.beta_res);
    struct md_conv2d_args cv;
    /* md_model_fuse_filters: the convolution's filter gradient instead of dx
     * (md_layer_dx above still marks that gradient written, so nothing
     * clears the buffer that no one reads) */
    if (((const struct batchnorm_cfg *)L->args)->conv) {
        const struct md_layer *P = &m->layers[L->in[0]];
        P->ops->filter_args(r, L->in[0], &cv);
        b.conv = &cv;
        b.dx = NULL;
    }
    if (!apart(r, &b)) return md_k_batchnorm_bwd(m->dev, &b);
    /* the ReLU's mask in place (clobbers_dy), the residual's share, then batch norm */
    size_t ne = (size_t)b.n * b.c * b.hw;
    if (b.act != MD_ACT_NONE) {
        struct md_act_args k = {b.act, 0.0f, ne, b.dtype, b.y, NULL, b.dy, (void *)b.dy, 0};
        MD_TRY(md_k_act_bwd(m->dev, &k));
    }
    MD_TRY(md_layer_axpby(m, ne, 1.0f, NULL, b.dy, b.beta_res, b.dres, b.dres));
    b.act = MD_ACT_NONE;
    b.res = b.dres = NULL;
    return md_k_batchnorm_bwd(m->dev, &b);
}

static void batchnorm_describe(const struct md_layer *L, char *buf, size_t n)
{
    const struct batchnorm_cfg *a = L->args;
    snprintf(buf, n, "%s%s%s%s%s", L->type, a->res ? "+add" : "", a->act == MD_ACT_RELU ? "+relu" : "",
             a->pool ? "+maxpool" : "", a->conv ? " (+conv dW)" : "");
}

static int batchnorm_needs_x(const struct md_layer *L) { (void)L; return 1; }
static int batchnorm_needs_input(const struct md_layer *L, int k) { (void)L; return k == 0; }
static int batchnorm_out_act(const struct md_layer *L) { return ((const struct batchnorm_cfg *)L->args)->act; }
/* its ReLU's derivative is read from y (with a fused pool, recomputed from x) */
static int batchnorm_needs_y(const struct md_layer *L)
{
    return batchnorm_out_act(L) == MD_ACT_RELU && !((const struct batchnorm_cfg *)L->args)->pool;
}

static int batchnorm_fuse_act(struct md_layer *L, int act)
{
    struct batchnorm_cfg *a = L->args;
    if (act != MD_ACT_RELU || a->act != MD_ACT_NONE || a->res) return 0;
    a->act = act;
    return 1;
}

static int batchnorm_fuse_residual(struct md_layer *L, int act)
{
    struct batchnorm_cfg *a = L->args;
    if ((act != MD_ACT_NONE && act != MD_ACT_RELU) || a->act != MD_ACT_NONE || a->res) return 0;
    a->res = 1;
    a->act = act;
    return 1;
}

static int batchnorm_fuse_pool(struct md_layer *L, int on)
{
    struct batchnorm_cfg *a = L->args;
    if (on && (a->act != MD_ACT_RELU || a->res || a->pool)) return 0;
    if (!on && !a->pool) return 0;
    a->pool = on;
    return 1;
}

/* with a fused pool whose routing is kept (md_batchnorm_args.conv needs it) */
static int batchnorm_fuse_filter(struct md_layer *L, int on)
{
    struct batchnorm_cfg *a = L->args;
    if (on && (a->pool != 2 || a->conv)) return 0;
    if (!on && !a->conv) return 0;
    a->conv = on;
    return 1;
}

/* Forward: x read for the statistics and again for y; backward: x and dy
 * read for the sums and again for dx, dx written; y read twice more where
 * the ReLU's mask comes from it. With a fused pool the output (y, dy) is
 * the pooled one and the routing (1.25 of it) is written, then the sums
 * read dy and the routing instead of x, and dx's pass reads the indices
 * (0.25). A fused residual adds its own passes: y written, read
 * and written again with the summand read; backward y and dy read into g
 * (written as the summand's gradient), g read twice as dy was; the two
 * inputs (x: 5 passes, the summand: 2) are the same size. */
static void batchnorm_step_passes(const struct md_layer *L, double *in, double *out)
{
    if (((const struct batchnorm_cfg *)L->args)->res) {
        *in = (5.0 + 2.0) / 2.0;
        *out = 7;
        return;
    }
    if (((const struct batchnorm_cfg *)L->args)->pool == 2) {
        *in = ((const struct batchnorm_cfg *)L->args)->conv ? 2 : 4; /* no dx pass (x read, dx written) */
        *out = 1 + 1.25 + 2.25 + 1.25;
        return;
    }
    *in = 5;
    *out = batchnorm_needs_y(L) ? 5 : 3;
}

/* with a residual, a device without the fused kernel masks dy in place */
static int batchnorm_clobbers_dy(const struct md_layer *L)
{
    const struct batchnorm_cfg *a = L->args;
    return a->res && a->act != MD_ACT_NONE;
}

static const char *const batchnorm_names[] = {"batchnorm", NULL};

const struct md_layer_ops md_batchnorm_layer = {
    .names = batchnorm_names,
    .args_size = sizeof(struct batchnorm_cfg),
    .min_inputs = 1, .max_inputs = 1,
    .parse = batchnorm_parse,
    .shape = batchnorm_shape,
    .params = batchnorm_params,
    .buffers = batchnorm_buffers,
    .mask_per_sample = batchnorm_mask_per_sample,
    .init = batchnorm_init,
    .forward = batchnorm_forward,
    .backward = batchnorm_backward,
    .describe = batchnorm_describe,
    .needs_x = batchnorm_needs_x,
    .needs_y = batchnorm_needs_y,
    .needs_input = batchnorm_needs_input,
    .clobbers_dy = batchnorm_clobbers_dy,
    .fuse_act = batchnorm_fuse_act,
    .fuse_residual = batchnorm_fuse_residual,
    .fuse_pool = batchnorm_fuse_pool,
    .fuse_filter = batchnorm_fuse_filter,
    .out_act = batchnorm_out_act,
    .step_passes = batchnorm_step_passes,
};
