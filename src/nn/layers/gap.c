/* gap.c - global average pooling, (C, H, W) -> (C, 1, 1), as
 * torch.nn.AdaptiveAvgPool2d(1):  {"type": "global_avgpool"} */
#include "nn/layer.h"

static md_status gap_parse(const struct md_layer_parse *p, const cJSON *o, struct md_layer *L)
{
    static const char *const k[] = {NULL};
    (void)p;
    return md_layer_check_keys(o, L->path, k);
}

static md_status gap_shape(const struct md_model *m, struct md_layer *L)
{
    struct md_shape x = m->layers[L->in[0]].out;
    L->out = (struct md_shape){x.c, 1, 1};
    L->flops = (double)md_shape_numel(x);
    return MD_OK;
}

static md_status gap_forward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    struct md_shape x = m->layers[L->in[0]].out;
    struct md_gap_args g = {r->n, x.c, x.h * x.w, m->opts.layout, m->opts.compute_dtype, md_layer_act(r, L->in[0]),
                            md_layer_act(r, i), NULL, NULL, 0};
    return md_k_gap_fwd(m->dev, &g);
}

static md_status gap_backward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    struct md_shape x = m->layers[L->in[0]].out;
    struct md_gap_args g = {r->n, x.c, x.h * x.w, m->opts.layout, m->opts.compute_dtype, NULL, NULL,
                            md_layer_grad(r, i), NULL, 0};
    g.dx = md_layer_dx(r, i, 0, &g.beta);
    return md_k_gap_bwd(m->dev, &g);
}

static const char *const gap_names[] = {"global_avgpool", NULL};

const struct md_layer_ops md_gap_layer = {
    .names = gap_names,
    .min_inputs = 1, .max_inputs = 1,
    .parse = gap_parse,
    .shape = gap_shape,
    .forward = gap_forward,
    .backward = gap_backward,
};
