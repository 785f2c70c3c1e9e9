/* layer_scale.c - a learned per-feature scale, as timm's LayerScale:
 *   {"type": "layer_scale", "init": 1e-5}
 * y = x * gamma over the last dimension of a token sequence (T, 1, D) or a
 * flat (D, 1, 1) input; parameter gamma (D), filled with "init", not
 * decayed.
 * Built from the element-wise kernels: gamma is broadcast over the rows
 * with the bias kernel into a zeroed buffer (the output itself forward),
 * multiplied in; dgamma = sum over rows of dy * x through the
 * bias-gradient kernel. The layer's saved block holds dy * x and, when the
 * input gradient accumulates, dy * gamma. */
#include "nn/layer.h"

#include <string.h>

#include "core/json.h"

struct layer_scale_cfg {
    float init;
};

static md_status layer_scale_parse(const struct md_layer_parse *p, const cJSON *o, struct md_layer *L)
{
    struct layer_scale_cfg *a = L->args;
    static const char *const k[] = {"init", NULL};
    (void)p;
    MD_TRY(md_layer_check_keys(o, L->path, k));
    double v = 1e-5;
    MD_TRY(md_json_num(o, "init", L->path, 0, -1e6, 1e6, &v));
    a->init = (float)v;
    return MD_OK;
}

/* Feature width and rows per sample, as layernorm. */
static void ls_dims(struct md_shape s, int *d, int *rows)
{
    if (s.h == 1 && s.w == 1) *d = s.c, *rows = 1;
    else *d = s.w, *rows = s.c * s.h;
}

static md_status layer_scale_shape(const struct md_model *m, struct md_layer *L)
{
    struct md_shape x = m->layers[L->in[0]].out;
    if (!(x.h == 1 && x.w == 1)) MD_TRY(md_layer_check_tokens(m, L, x));
    int d, rows;
    ls_dims(x, &d, &rows);
    L->out = x;
    L->nparams = d;
    L->flops = (double)md_shape_numel(x);
    return MD_OK;
}

static int layer_scale_params(const struct md_model *m, const struct md_layer *L, struct md_param_decl *out)
{
    int d, rows;
    (void)m;
    ls_dims(L->out, &d, &rows);
    out[0] = (struct md_param_decl){"gamma", 1, {d}, 0, 0, 0.0f};
    return 1;
}

static void layer_scale_init(const struct md_model *m, const struct md_layer *L, float *p)
{
    const struct md_param_info *t = &m->tensors[L->param[0]];
    float v = ((const struct layer_scale_cfg *)L->args)->init;
    for (size_t e = 0; e < t->numel; e++) p[t->offset + e] = v;
}

static size_t layer_scale_mask_per_sample(const struct md_layer *L)
{
    return md_layer_align16(md_shape_numel(L->out) * 4);
}

/* buf (n*rows, d) = gamma broadcast over the rows */
static md_status broadcast_gamma(const struct md_layer_run *r, int i, void *buf)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    int d, rows;
    ls_dims(L->out, &d, &rows);
    struct md_ew_args z;
    memset(&z, 0, sizeof z);
    z.op = MD_EW_FILL;
    z.n = (size_t)r->n * md_shape_numel(L->out);
    z.dtype = m->opts.compute_dtype;
    z.y = buf;
    MD_TRY(md_k_ew(m->dev, &z));
    struct md_bias_args b = {r->n * rows, d, 1, MD_NCHW, m->opts.compute_dtype, buf, md_layer_param32(m, L->param[0]),
                             NULL, NULL, 0};
    return md_k_bias_add(m->dev, &b);
}

/* y = a * b over the layer's n * numel elements */
static md_status mul(const struct md_layer_run *r, int i, const void *a, const void *b, void *y)
{
    struct md_ew_args e;
    memset(&e, 0, sizeof e);
    e.op = MD_EW_MUL;
    e.n = (size_t)r->n * md_shape_numel(r->m->layers[i].out);
    e.dtype = r->m->opts.compute_dtype;
    e.a = a;
    e.b = b;
    e.y = y;
    return md_k_ew(r->m->dev, &e);
}

static md_status layer_scale_forward(const struct md_layer_run *r, int i)
{
    void *y = md_layer_act(r, i);
    MD_TRY(broadcast_gamma(r, i, y));
    return mul(r, i, md_layer_act(r, r->m->layers[i].in[0]), y, y);
}

static md_status layer_scale_backward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    int d, rows;
    ls_dims(L->out, &d, &rows);
    void *dy = md_layer_grad(r, i), *s = md_layer_saved(r, i, 0);
    MD_TRY(mul(r, i, dy, md_layer_act(r, L->in[0]), s));
    struct md_bias_args b = {r->n * rows, d, 1, MD_NCHW, m->opts.compute_dtype, NULL, NULL, s,
                             md_layer_grad32(m, L->param[0]), 0};
    MD_TRY(md_k_bias_grad(m->dev, &b));
    if (L->in[0] < m->ninputs) return MD_OK;
    float beta;
    void *dx = md_layer_dx(r, i, 0, &beta);
    void *t = beta != 0.0f ? s : dx;
    MD_TRY(broadcast_gamma(r, i, t));
    MD_TRY(mul(r, i, dy, t, t));
    if (t == dx) return MD_OK;
    return md_layer_axpby(m, (size_t)r->n * md_shape_numel(L->out), 1.0f, NULL, t, 1.0f, dx, dx);
}

static int layer_scale_needs_x(const struct md_layer *L) { (void)L; return 1; }

static const char *const layer_scale_names[] = {"layer_scale", NULL};

const struct md_layer_ops md_layer_scale_layer = {
    .names = layer_scale_names,
    .args_size = sizeof(struct layer_scale_cfg),
    .min_inputs = 1, .max_inputs = 1,
    .tokens = 1,
    .parse = layer_scale_parse,
    .shape = layer_scale_shape,
    .params = layer_scale_params,
    .mask_per_sample = layer_scale_mask_per_sample,
    .init = layer_scale_init,
    .forward = layer_scale_forward,
    .backward = layer_scale_backward,
    .needs_x = layer_scale_needs_x,
};
