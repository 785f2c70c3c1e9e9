/* concat.c - inputs of equal height and width joined along channels, as
 * torch.cat(dim=1):  {"type": "concat", "inputs": ["a", "b"]} */
#include "nn/layer.h"

static md_status concat_parse(const struct md_layer_parse *p, const cJSON *o, struct md_layer *L)
{
    static const char *const k[] = {NULL};
    (void)p;
    return md_layer_check_keys(o, L->path, k);
}

static md_status concat_shape(const struct md_model *m, struct md_layer *L)
{
    MD_TRY(md_layer_check_inputs(m, L, 0, " (concat needs equal height and width)"));
    struct md_shape x = m->layers[L->in[0]].out;
    long long csum = 0;
    for (int k = 0; k < L->nin; k++) csum += m->layers[L->in[k]].out.c;
    if (csum * x.h * x.w > MD_MODEL_MAX_OUTPUT_ELEMS)
        return md_errf(MD_ERR_CONFIG, "%s: output of %lld x %d x %d elements per sample, more than %lld", L->path,
                       csum, x.h, x.w, MD_MODEL_MAX_OUTPUT_ELEMS);
    L->out = (struct md_shape){(int)csum, x.h, x.w};
    L->flops = 0;
    return MD_OK;
}

static md_status concat_forward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    void *y = md_layer_act(r, i);
    int off = 0;
    for (int k = 0; k < L->nin; k++) {
        int c = m->layers[L->in[k]].out.c;
        struct md_chslice_args s = {r->n, L->out.h * L->out.w, c, c, 0, L->out.c, off, m->opts.layout,
                                    m->opts.compute_dtype, md_layer_act(r, L->in[k]), y, 0.0f};
        MD_TRY(md_k_chslice(m->dev, &s));
        off += c;
    }
    return MD_OK;
}

static md_status concat_backward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    void *dy = md_layer_grad(r, i);
    int off = 0;
    for (int k = 0; k < L->nin; k++) {
        int c = m->layers[L->in[k]].out.c;
        float beta;
        void *dx = md_layer_dx(r, i, k, &beta);
        struct md_chslice_args s = {r->n, L->out.h * L->out.w, c, L->out.c, off, c, 0, m->opts.layout,
                                    m->opts.compute_dtype, dy, dx, beta};
        MD_TRY(md_k_chslice(m->dev, &s));
        off += c;
    }
    return MD_OK;
}

static const char *const concat_names[] = {"concat", NULL};

const struct md_layer_ops md_concat_layer = {
    .names = concat_names,
    .min_inputs = 2, .max_inputs = 0,
    .parse = concat_parse,
    .shape = concat_shape,
    .forward = concat_forward,
    .backward = concat_backward,
};
