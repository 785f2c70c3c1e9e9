/* conv2d.c - 2-D convolution with optional bias, as torch.nn.Conv2d:
 *   {"type": "conv2d", "out": K, "kernel": R | [R, S], "stride": 1,
 *    "padding": 0, "dilation": 1, "groups": 1, "bias": true}
 * weight (K, C/g, R, S) kaiming_normal(fan_out, relu), bias (K)
 * U(+-1/sqrt(fan_in)); with channels-last the filter is stored
 * (K, R, S, C/g) on the device. */
#include "nn/layer.h"

#include <math.h>
#include <string.h>

#include "core/json.h"
#include "core/rng.h"

struct conv2d_cfg {
    int k, r, s, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups, bias;
};

static md_status conv2d_parse(const struct md_layer_parse *p, const cJSON *o, struct md_layer *L)
{
    struct conv2d_cfg *a = L->args;
    const char *path = L->path;
    static const char *const k[] = {"out", "kernel", "stride", "padding", "dilation", "groups", "bias", NULL};
    MD_TRY(md_layer_check_keys(o, path, k));
    MD_TRY(md_json_int(o, "out", path, 1, 1, 1 << 20, &a->k));
    MD_TRY(md_layer_get_pair(o, "kernel", path, 1, &a->r, &a->s, 0, 0));
    if (!a->r) return md_errf(MD_ERR_CONFIG, "%s.kernel: missing", path);
    MD_TRY(md_layer_get_pair(o, "stride", path, 1, &a->stride_h, &a->stride_w, 1, 1));
    MD_TRY(md_layer_get_pair(o, "padding", path, 0, &a->pad_h, &a->pad_w, 0, 0));
    MD_TRY(md_layer_get_pair(o, "dilation", path, 1, &a->dil_h, &a->dil_w, 1, 1));
    a->groups = 1;
    a->bias = 1;
    MD_TRY(md_json_int(o, "groups", path, 0, 1, 1 << 20, &a->groups));
    MD_TRY(md_json_bool(o, "bias", path, 0, &a->bias));
    if (p->opts->reduce_architecture && a->groups == 1 && a->k > 1) a->k = (a->k + 1) / 2;
    return MD_OK;
}

static md_status conv2d_shape(const struct md_model *m, struct md_layer *L)
{
    struct conv2d_cfg *a = L->args;
    const char *path = L->path;
    struct md_shape x = m->layers[L->in[0]].out;
    if (x.c % a->groups || a->k % a->groups)
        return md_errf(MD_ERR_CONFIG, "%s.groups: %d does not divide the input channels (%d) and output "
                       "channels (%d)", path, a->groups, x.c, a->k);
    int eh = a->dil_h * (a->r - 1) + 1, ew = a->dil_w * (a->s - 1) + 1;
    if (eh > x.h + 2 * a->pad_h || ew > x.w + 2 * a->pad_w)
        return md_errf(MD_ERR_CONFIG, "%s.kernel: %dx%d (dilated %dx%d) is larger than the padded input "
                       "%dx%d", path, a->r, a->s, eh, ew, x.h + 2 * a->pad_h, x.w + 2 * a->pad_w);
    L->out.c = a->k;
    L->out.h = md_conv_out(x.h, a->r, a->stride_h, a->pad_h, a->dil_h);
    L->out.w = md_conv_out(x.w, a->s, a->stride_w, a->pad_w, a->dil_w);
    long long kk = (long long)(x.c / a->groups) * a->r * a->s;
    if ((double)a->k * (double)kk > (double)MD_MODEL_MAX_PARAMS)
        return md_errf(MD_ERR_CONFIG, "%s: %.3g parameters (%d x %lld weights), more than any machine holds (at "
                       "most %lld)", path, (double)a->k * (double)kk, a->k, kk, MD_MODEL_MAX_PARAMS);
    L->nparams = (long long)a->k * kk + (a->bias ? a->k : 0);
    L->flops = 2.0 * (double)a->k * L->out.h * L->out.w * (double)kk +
               (a->bias ? (double)a->k * L->out.h * L->out.w : 0.0);
    return MD_OK;
}

static int conv2d_params(const struct md_model *m, const struct md_layer *L, struct md_param_decl *out)
{
    const struct conv2d_cfg *a = L->args;
    int ci = m->layers[L->in[0]].out.c;
    out[0] = (struct md_param_decl){"weight", 4, {a->k, ci / a->groups, a->r, a->s}, 1,
                                    m->opts.layout == MD_NHWC, 0.0f};
    if (!a->bias) return 1;
    out[1] = (struct md_param_decl){"bias", 1, {a->k}, 0, 0, 0.0f};
    return 2;
}

static void conv2d_init(const struct md_model *m, const struct md_layer *L, float *p)
{
    const struct conv2d_cfg *a = L->args;
    int cin = m->layers[L->in[0]].out.c;
    const struct md_param_info *t = &m->tensors[L->param[0]];
    md_rng r;
    md_rng_init(&r, md_rng_hash(m->opts.seed, (uint64_t)L->param[0]));
    double sd = sqrt(2.0 / ((double)a->k * a->r * a->s));
    for (size_t e = 0; e < t->numel; e++) p[t->offset + e] = (float)(sd * md_rng_normal(&r));
    if (L->param[1] >= 0) {
        const struct md_param_info *b = &m->tensors[L->param[1]];
        md_rng_init(&r, md_rng_hash(m->opts.seed, (uint64_t)L->param[1]));
        double bound = 1.0 / sqrt((double)(cin / a->groups) * a->r * a->s);
        for (size_t e = 0; e < b->numel; e++)
            p[b->offset + e] = (float)(bound * (2.0 * (double)md_rng_next_uniform(&r) - 1.0));
    }
}

static void conv2d_args(const struct md_layer_run *r, int i, struct md_conv2d_args *c)
{
    const struct md_layer *L = &r->m->layers[i];
    const struct conv2d_cfg *a = L->args;
    struct md_shape x = r->m->layers[L->in[0]].out;
    memset(c, 0, sizeof *c);
    c->n = r->n; c->c = x.c; c->h = x.h; c->w = x.w;
    c->k = a->k; c->r = a->r; c->s = a->s; c->p = L->out.h; c->q = L->out.w;
    c->stride_h = a->stride_h; c->stride_w = a->stride_w;
    c->pad_h = a->pad_h; c->pad_w = a->pad_w;
    c->dil_h = a->dil_h; c->dil_w = a->dil_w;
    c->groups = a->groups;
    c->layout = r->m->opts.layout;
    c->dtype = r->m->opts.compute_dtype;
    c->algo_hint = i + 1;
}

static md_status conv2d_forward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    void *y = md_layer_act(r, i);
    struct md_conv2d_args c;
    conv2d_args(r, i, &c);
    c.x = md_layer_act(r, L->in[0]); c.wt = md_layer_weight(m, L->param[0]); c.y = y; c.beta = 0;
    MD_TRY(md_k_conv2d_fwd(m->dev, &c));
    if (L->param[1] < 0) return MD_OK;
    struct md_bias_args b = {r->n, L->out.c, L->out.h * L->out.w, m->opts.layout, m->opts.compute_dtype, y,
                             md_layer_param32(m, L->param[1]), NULL, NULL, 0};
    return md_k_bias_add(m->dev, &b);
}

static md_status conv2d_backward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    if (L->filter_elsewhere) return MD_OK; /* its consumer wrote the filter gradient (no bias, no data gradient) */
    void *dy = md_layer_grad(r, i);
    float beta;
    if (L->param[1] >= 0) {
        struct md_bias_args b = {r->n, L->out.c, L->out.h * L->out.w, m->opts.layout, m->opts.compute_dtype, NULL,
                                 NULL, dy, md_layer_grad32(m, L->param[1]), 0};
        MD_TRY(md_k_bias_grad(m->dev, &b));
    }
    struct md_conv2d_args c;
    conv2d_args(r, i, &c);
    c.x = md_layer_act(r, L->in[0]); c.dy = dy; c.dwt = md_layer_wgrad(m, L->param[0]); c.beta = 0;
    c.data_grad_follows = L->in[0] >= m->ninputs; /* no gradient for the data of the model's input */
    MD_TRY(md_k_conv2d_bwd_filter(m->dev, &c));
    if (!c.data_grad_follows) return MD_OK;
    conv2d_args(r, i, &c);
    c.dy = dy; c.wt = md_layer_weight(m, L->param[0]); c.dx = md_layer_dx(r, i, 0, &beta); c.beta = beta;
    return md_k_conv2d_bwd_data(m->dev, &c);
}

static int conv2d_needs_x(const struct md_layer *L) { (void)L; return 1; }

/* the default (3 and 3) unless its consumer writes the filter gradient: the
 * forward's read and write, the consumer's read of the patches */
static void conv2d_step_passes(const struct md_layer *L, double *in, double *out)
{
    *in = L->filter_elsewhere ? 2 : 3;
    *out = L->filter_elsewhere ? 1 : 3;
}

static int conv2d_lone_filter(const struct md_model *m, const struct md_layer *L)
{
    const struct conv2d_cfg *a = L->args;
    if (a->groups != 1 || L->param[1] >= 0) return 0;
    return m->layers[L->in[0]].out.c * a->r * a->s;
}

static void conv2d_filter_args(const struct md_layer_run *r, int i, struct md_conv2d_args *c)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    conv2d_args(r, i, c);
    c->x = md_layer_act(r, L->in[0]); c->wt = md_layer_weight(m, L->param[0]);
    c->dwt = md_layer_wgrad(m, L->param[0]); c->beta = 0;
}

static const char *const conv2d_names[] = {"conv2d", NULL};

const struct md_layer_ops md_conv2d_layer = {
    .names = conv2d_names,
    .args_size = sizeof(struct conv2d_cfg),
    .min_inputs = 1, .max_inputs = 1,
    .parse = conv2d_parse,
    .shape = conv2d_shape,
    .params = conv2d_params,
    .init = conv2d_init,
    .forward = conv2d_forward,
    .backward = conv2d_backward,
    .needs_x = conv2d_needs_x,
    .lone_filter = conv2d_lone_filter,
    .step_passes = conv2d_step_passes,
    .filter_args = conv2d_filter_args,
};
