/* weighted_add.c - a learned weighted sum of k inputs of one shape,
 * y = sum_j w_j x_j, weights (k) initialised to 1/k (the "integration
 * weights" of a multi-channel model):
 *   {"type": "weighted_add", "inputs": ["a", "b", "c"]} */
#include "nn/layer.h"

static md_status weighted_add_parse(const struct md_layer_parse *p, const cJSON *o, struct md_layer *L)
{
    static const char *const k[] = {NULL};
    (void)p;
    return md_layer_check_keys(o, L->path, k);
}

static md_status weighted_add_shape(const struct md_model *m, struct md_layer *L)
{
    MD_TRY(md_layer_check_inputs(m, L, 1, ""));
    L->out = m->layers[L->in[0]].out;
    L->nparams = L->nin;
    L->flops = 2.0 * (double)L->nin * (double)md_shape_numel(L->out);
    return MD_OK;
}

static int weighted_add_params(const struct md_model *m, const struct md_layer *L, struct md_param_decl *out)
{
    (void)m;
    out[0] = (struct md_param_decl){"weight", 1, {L->nin}, 0, 0, 0.0f};
    return 1;
}

static void weighted_add_init(const struct md_model *m, const struct md_layer *L, float *p)
{
    for (int k = 0; k < L->nin; k++) p[m->tensors[L->param[0]].offset + (size_t)k] = 1.0f / (float)L->nin;
}

static md_status weighted_add_forward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    size_t ne = (size_t)r->n * md_shape_numel(L->out);
    const float *w = md_layer_param32(m, L->param[0]);
    void *y = md_layer_act(r, i);
    MD_TRY(md_layer_axpby(m, ne, 1.0f, w, md_layer_act(r, L->in[0]), 0.0f, NULL, y));
    for (int k = 1; k < L->nin; k++) MD_TRY(md_layer_axpby(m, ne, 1.0f, w + k, md_layer_act(r, L->in[k]), 1.0f, y, y));
    return MD_OK;
}

static md_status weighted_add_backward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    size_t ne = (size_t)r->n * md_shape_numel(L->out);
    const float *w = md_layer_param32(m, L->param[0]);
    float *dw = md_layer_grad32(m, L->param[0]);
    void *dy = md_layer_grad(r, i);
    for (int k = 0; k < L->nin; k++) {
        struct md_reduce_args rd = {MD_RED_DOT, ne, m->opts.compute_dtype, dy, md_layer_act(r, L->in[k]), dw + k, 0.0f};
        MD_TRY(md_k_reduce(m->dev, &rd));
        float beta;
        void *dx = md_layer_dx(r, i, k, &beta);
        MD_TRY(md_layer_axpby(m, ne, 1.0f, w + k, dy, beta, dx, dx));
    }
    return MD_OK;
}

static int weighted_add_needs_x(const struct md_layer *L) { (void)L; return 1; }

static const char *const weighted_add_names[] = {"weighted_add", NULL};

const struct md_layer_ops md_weighted_add_layer = {
    .names = weighted_add_names,
    .min_inputs = 2, .max_inputs = 0,
    .parse = weighted_add_parse,
    .shape = weighted_add_shape,
    .params = weighted_add_params,
    .init = weighted_add_init,
    .forward = weighted_add_forward,
    .backward = weighted_add_backward,
    .needs_x = weighted_add_needs_x,
};
