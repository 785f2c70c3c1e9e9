/* transpose.c - swaps the two axes of a token sequence, per sample:
 *   {"type": "transpose"}   (T, 1, F) -> (F, 1, T)
 * (torch's x.transpose(1, 2) on (B, T, F)); a flat (C, 1, 1) input counts as
 * one token of C features, unless a token layer made it (then it is C tokens
 * of one feature: a one-variate series after instance_norm). Forward and backward are the permute kernel
 * (NCHW (T, 1, F) <-> NHWC); a gradient that must be added to another goes
 * through the layer's own saved block first. */
#include "nn/layer.h"

static md_status transpose_parse(const struct md_layer_parse *p, const cJSON *o, struct md_layer *L)
{
    static const char *const k[] = {NULL};
    (void)p;
    return md_layer_check_keys(o, L->path, k);
}

/* The input as (T, 1, F). */
static struct md_shape tokens_of(const struct md_model *m, const struct md_layer *L)
{
    const struct md_layer *in = &m->layers[L->in[0]];
    struct md_shape x = in->out;
    return x.h == 1 && x.w == 1 && !in->ops->tokens ? (struct md_shape){1, 1, x.c} : x;
}

static md_status transpose_shape(const struct md_model *m, struct md_layer *L)
{
    struct md_shape x = tokens_of(m, L);
    MD_TRY(md_layer_check_tokens(m, L, x));
    L->out = (struct md_shape){x.w, 1, x.c};
    return MD_OK;
}

static size_t transpose_mask_per_sample(const struct md_layer *L) { return md_shape_numel(L->out) * 4; }

static md_status transpose_forward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    struct md_shape x = tokens_of(m, L);
    struct md_permute_args p = {r->n, x.c, 1, x.w, 1, m->opts.compute_dtype, md_layer_act(r, L->in[0]),
                                md_layer_act(r, i)};
    return md_k_permute(m->dev, &p);
}

static md_status transpose_backward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    if (L->in[0] < m->ninputs) return MD_OK;
    struct md_shape x = tokens_of(m, L);
    float beta;
    void *dx = md_layer_dx(r, i, 0, &beta);
    void *t = beta != 0.0f ? md_layer_saved(r, i, 0) : dx;
    struct md_permute_args p = {r->n, x.c, 1, x.w, 0, m->opts.compute_dtype, md_layer_grad(r, i), t};
    MD_TRY(md_k_permute(m->dev, &p));
    if (t == dx) return MD_OK;
    return md_layer_axpby(m, (size_t)r->n * md_shape_numel(L->out), 1.0f, NULL, t, 1.0f, dx, dx);
}

static const char *const transpose_names[] = {"transpose", NULL};

const struct md_layer_ops md_transpose_layer = {
    .names = transpose_names,
    .min_inputs = 1, .max_inputs = 1,
    .tokens = 1,
    .parse = transpose_parse,
    .shape = transpose_shape,
    .mask_per_sample = transpose_mask_per_sample,
    .forward = transpose_forward,
    .backward = transpose_backward,
};
