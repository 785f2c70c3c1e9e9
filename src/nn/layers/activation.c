/* activation.c - element-wise activations, one kind for all their names:
 *   {"type": "relu" | "leaky_relu" | "gelu" | "gelu_tanh" | "silu" | "sigmoid" | "tanh"}
 * gelu is the exact (erf) form, gelu_tanh PyTorch's approximate='tanh'.
 * leaky_relu takes "negative_slope" (0.01). A relu whose producer can take
 * it (batchnorm, add) is fused into it by compile. */
#include "nn/layer.h"

#include <string.h>

#include "core/json.h"

struct activation_cfg {
    int act;     /* enum md_act */
    float alpha; /* leaky_relu slope */
};

static const char *const activation_names[] = {"relu", "leaky_relu", "gelu", "gelu_tanh", "silu", "sigmoid",
                                                  "tanh", NULL};
static const int activation_acts[] = {MD_ACT_RELU, MD_ACT_LEAKY_RELU, MD_ACT_GELU, MD_ACT_GELU_TANH, MD_ACT_SILU,
                                      MD_ACT_SIGMOID, MD_ACT_TANH};

static md_status activation_parse(const struct md_layer_parse *p, const cJSON *o, struct md_layer *L)
{
    struct activation_cfg *a = L->args;
    for (int k = 0; activation_names[k]; k++)
        if (!strcmp(activation_names[k], p->type)) a->act = activation_acts[k];
    static const char *const k[] = {"negative_slope", NULL};
    static const char *const k0[] = {NULL};
    MD_TRY(md_layer_check_keys(o, L->path, a->act == MD_ACT_LEAKY_RELU ? k : k0));
    double alpha = 0.01;
    MD_TRY(md_json_num(o, "negative_slope", L->path, 0, -1e6, 1e6, &alpha));
    a->alpha = (float)alpha;
    return MD_OK;
}

static md_status activation_shape(const struct md_model *m, struct md_layer *L)
{
    L->out = m->layers[L->in[0]].out;
    L->flops = (double)md_shape_numel(L->out);
    return MD_OK;
}

static md_status activation_forward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    const struct activation_cfg *a = L->args;
    size_t ne = (size_t)r->n * md_shape_numel(L->out);
    struct md_act_args k = {a->act, a->alpha, ne, m->opts.compute_dtype, md_layer_act(r, L->in[0]),
                            md_layer_act(r, i), NULL, NULL, 0};
    return md_k_act_fwd(m->dev, &k);
}

static md_status activation_backward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    const struct activation_cfg *a = L->args;
    size_t ne = (size_t)r->n * md_shape_numel(L->out);
    struct md_act_args k = {a->act, a->alpha, ne, m->opts.compute_dtype, md_layer_act(r, L->in[0]), NULL,
                            md_layer_grad(r, i), NULL, 0};
    k.dx = md_layer_dx(r, i, 0, &k.beta);
    return md_k_act_bwd(m->dev, &k);
}

static int activation_needs_x(const struct md_layer *L) { (void)L; return 1; }
static int activation_act(const struct md_layer *L) { return ((const struct activation_cfg *)L->args)->act; }

const struct md_layer_ops md_activation_layer = {
    .names = activation_names,
    .args_size = sizeof(struct activation_cfg),
    .min_inputs = 1, .max_inputs = 1,
    .parse = activation_parse,
    .shape = activation_shape,
    .forward = activation_forward,
    .backward = activation_backward,
    .needs_x = activation_needs_x,
    .lone_act = activation_act,
    .out_act = activation_act,
};
