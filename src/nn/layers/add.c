/* add.c - element-wise sum of two or more inputs of one shape, with an
 * optional ReLU (written "act": "relu", or fused from a following relu by
 * compile):  {"type": "add", "inputs": ["a", "b"], "act": "none"}
 * Each input's gradient is the output's: the planner lets an input that
 * only this layer reads share its gradient buffer. */
#include "nn/layer.h"

#include <stdio.h>

struct add_cfg {
    int act; /* enum md_act: MD_ACT_NONE or MD_ACT_RELU */
};

static md_status add_parse(const struct md_layer_parse *p, const cJSON *o, struct md_layer *L)
{
    struct add_cfg *a = L->args;
    static const char *const k[] = {"act", NULL};
    (void)p;
    MD_TRY(md_layer_check_keys(o, L->path, k));
    return md_layer_get_act(o, L->path, &a->act);
}

static md_status add_shape(const struct md_model *m, struct md_layer *L)
{
    MD_TRY(md_layer_check_inputs(m, L, 1, ""));
    L->out = m->layers[L->in[0]].out;
    L->flops = (double)(L->nin - 1) * (double)md_shape_numel(L->out);
    return MD_OK;
}

static md_status add_forward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    const struct add_cfg *a = L->args;
    size_t ne = (size_t)r->n * md_shape_numel(L->out);
    void *y = md_layer_act(r, i);
    MD_TRY(md_layer_axpby(m, ne, 1.0f, NULL, md_layer_act(r, L->in[0]), 1.0f, md_layer_act(r, L->in[1]), y));
    for (int k = 2; k < L->nin; k++) MD_TRY(md_layer_axpby(m, ne, 1.0f, NULL, md_layer_act(r, L->in[k]), 1.0f, y, y));
    if (a->act == MD_ACT_NONE) return MD_OK;
    /* in place: relu'(x) == relu'(relu(x)), so backward can use y */
    struct md_act_args k = {a->act, 0.0f, ne, m->opts.compute_dtype, y, y, NULL, NULL, 0};
    return md_k_act_fwd(m->dev, &k);
}

static md_status add_backward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    const struct add_cfg *a = L->args;
    size_t ne = (size_t)r->n * md_shape_numel(L->out);
    void *dy = md_layer_grad(r, i);
    if (a->act != MD_ACT_NONE) {
        struct md_act_args k = {a->act, 0.0f, ne, m->opts.compute_dtype, md_layer_act(r, i), NULL, dy, dy, 0};
        MD_TRY(md_k_act_bwd(m->dev, &k));
    }
    for (int k = 0; k < L->nin; k++) {
        float beta;
        void *dx = md_layer_dx(r, i, k, &beta);
        if (dx == dy) continue; /* that input's gradient is this buffer (planned) */
        MD_TRY(md_layer_axpby(m, ne, 1.0f, NULL, dy, beta, dx, dx));
    }
    return MD_OK;
}

static void add_describe(const struct md_layer *L, char *buf, size_t n)
{
    snprintf(buf, n, "%s%s", L->type, ((const struct add_cfg *)L->args)->act == MD_ACT_RELU ? "+relu" : "");
}

static int add_act(const struct md_layer *L) { return ((const struct add_cfg *)L->args)->act; }
static int add_needs_y(const struct md_layer *L) { return add_act(L) == MD_ACT_RELU; }
static int add_passes_dy(const struct md_layer *L) { (void)L; return 1; }
static int add_clobbers_dy(const struct md_layer *L) { return add_act(L) != MD_ACT_NONE; }

static int add_sum_act(const struct md_layer *L) { return L->nin == 2 ? add_act(L) : -1; }

static int add_fuse_act(struct md_layer *L, int act)
{
    struct add_cfg *a = L->args;
    if (act != MD_ACT_RELU || a->act != MD_ACT_NONE) return 0;
    a->act = act;
    return 1;
}

static const char *const add_names[] = {"add", NULL};

const struct md_layer_ops md_add_layer = {
    .names = add_names,
    .args_size = sizeof(struct add_cfg),
    .min_inputs = 2, .max_inputs = 0,
    .parse = add_parse,
    .shape = add_shape,
    .forward = add_forward,
    .backward = add_backward,
    .describe = add_describe,
    .needs_y = add_needs_y,
    .passes_dy = add_passes_dy,
    .clobbers_dy = add_clobbers_dy,
    .fuse_act = add_fuse_act,
    .sum_act = add_sum_act,
    .out_act = add_act,
};
