/* layer_scale.c - a learned per-feature scale, as timm's LayerScale:
 *   {"type": "layer_scale", "init": 1e-5}
 * y = x * gamma over the last dimension of a token sequence (T, 1, D) or a
 * flat (D, 1, 1) input; parameter gamma (D), filled with "init", not
 * decayed.
 * One kernel each way (chscale, kernels.h): forward y = x * gamma;
 * backward dx = dy * gamma (added to the input's gradient where it
 * accumulates) and dgamma = sum over the rows of dy * x. No saved block. */
#include "nn/layer.h"

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

/* The kernel's arguments for the layer's n * rows rows of d features. */
static struct md_chscale_args ls_args(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    int d, rows;
    ls_dims(L->out, &d, &rows);
    return (struct md_chscale_args){.rows = r->n * rows, .d = d, .dtype = m->opts.compute_dtype,
                                    .x = md_layer_act(r, L->in[0]), .g = md_layer_param32(m, L->param[0])};
}

static md_status layer_scale_forward(const struct md_layer_run *r, int i)
{
    struct md_chscale_args a = ls_args(r, i);
    a.y = md_layer_act(r, i);
    return md_k_chscale_fwd(r->m->dev, &a);
}

static md_status layer_scale_backward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    struct md_chscale_args a = ls_args(r, i);
    a.dy = md_layer_grad(r, i);
    a.dg = md_layer_grad32(m, L->param[0]);
    if (L->in[0] >= m->ninputs) a.dx = md_layer_dx(r, i, 0, &a.beta);
    return md_k_chscale_bwd(m->dev, &a);
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
    .init = layer_scale_init,
    .forward = layer_scale_forward,
    .backward = layer_scale_backward,
    .needs_x = layer_scale_needs_x,
};
