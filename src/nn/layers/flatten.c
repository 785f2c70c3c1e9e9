/* flatten.c - (C, H, W) -> (C*H*W, 1, 1) in PyTorch's (C, H, W) order, so
 * that a following linear layer's weights mean the same in both layouts:
 *   {"type": "flatten"} */
#include "nn/layer.h"

static md_status flatten_parse(const struct md_layer_parse *p, const cJSON *o, struct md_layer *L)
{
    static const char *const k[] = {NULL};
    (void)p;
    return md_layer_check_keys(o, L->path, k);
}

static md_status flatten_shape(const struct md_model *m, struct md_layer *L)
{
    L->out = (struct md_shape){(int)md_shape_numel(m->layers[L->in[0]].out), 1, 1};
    return MD_OK;
}

static md_status flatten_forward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    struct md_shape x = m->layers[L->in[0]].out;
    const void *xp = md_layer_act(r, L->in[0]);
    void *y = md_layer_act(r, i);
    if (m->opts.layout == MD_NHWC && x.h * x.w > 1) {
        struct md_permute_args p = {r->n, x.c, x.h, x.w, 0, m->opts.compute_dtype, xp, y};
        return md_k_permute(m->dev, &p);
    }
    return md_layer_axpby(m, (size_t)r->n * md_shape_numel(L->out), 1.0f, NULL, xp, 0.0f, NULL, y);
}

static md_status flatten_backward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    struct md_shape x = m->layers[L->in[0]].out;
    void *dy = md_layer_grad(r, i);
    float beta;
    void *dx = md_layer_dx(r, i, 0, &beta);
    if (m->opts.layout == MD_NHWC && x.h * x.w > 1) {
        if (beta != 0.0f)
            return md_errf(MD_ERR_UNSUPPORTED, "model %s: %s: with channels-last, the input of a flatten may "
                           "feed no other layer", m->name, L->name);
        struct md_permute_args p = {r->n, x.c, x.h, x.w, 1, m->opts.compute_dtype, dy, dx};
        return md_k_permute(m->dev, &p);
    }
    return md_layer_axpby(m, (size_t)r->n * md_shape_numel(L->out), 1.0f, NULL, dy, beta, dx, dx);
}

static const char *const flatten_names[] = {"flatten", NULL};

const struct md_layer_ops md_flatten_layer = {
    .names = flatten_names,
    .min_inputs = 1, .max_inputs = 1,
    .parse = flatten_parse,
    .shape = flatten_shape,
    .forward = flatten_forward,
    .backward = flatten_backward,
};
