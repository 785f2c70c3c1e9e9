/* dropout.c - inverted dropout, as torch.nn.Dropout:
 *   {"type": "dropout", "p": 0.5}   (--dropout overrides every p)
 * The mask depends on (seed, layer, step) and is kept for backward. */
#include "nn/layer.h"

#include <math.h>
#include <string.h>

#include "core/json.h"
#include "core/rng.h"

struct dropout_cfg {
    float p;
};

static md_status dropout_parse(const struct md_layer_parse *p, const cJSON *o, struct md_layer *L)
{
    struct dropout_cfg *a = L->args;
    static const char *const k[] = {"p", NULL};
    MD_TRY(md_layer_check_keys(o, L->path, k));
    return md_layer_get_dropout(p, o, "p", L->path, 0.5, &a->p);
}

static md_status dropout_shape(const struct md_model *m, struct md_layer *L)
{
    L->out = m->layers[L->in[0]].out;
    L->flops = (double)md_shape_numel(L->out);
    return MD_OK;
}

static size_t dropout_mask_per_sample(const struct md_layer *L) { return md_shape_numel(L->out); }

static void dropout_args(const struct md_layer_run *r, int i, struct md_dropout_args *a)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    memset(a, 0, sizeof *a);
    a->n = (size_t)r->n * md_shape_numel(L->out);
    a->p = ((const struct dropout_cfg *)L->args)->p;
    a->seed = md_rng_hash(m->opts.seed ^ 0xd409u, (uint64_t)i);
    a->offset = m->step_dev ? 0 : m->step << 32;
    a->offset_dev = m->step_dev;
    a->dtype = m->opts.compute_dtype;
    a->mask = m->masks + L->mask_off * (size_t)m->max_batch;
}

static md_status dropout_forward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    const void *x = md_layer_act(r, L->in[0]);
    void *y = md_layer_act(r, i);
    if (!r->training || ((const struct dropout_cfg *)L->args)->p == 0.0f)
        return md_layer_axpby(m, (size_t)r->n * md_shape_numel(L->out), 1.0f, NULL, x, 0.0f, NULL, y);
    struct md_dropout_args a;
    dropout_args(r, i, &a);
    a.x = x;
    a.y = y;
    return md_k_dropout_fwd(m->dev, &a);
}

static md_status dropout_backward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    void *dy = md_layer_grad(r, i);
    float beta;
    void *dx = md_layer_dx(r, i, 0, &beta);
    if (((const struct dropout_cfg *)L->args)->p == 0.0f)
        return md_layer_axpby(m, (size_t)r->n * md_shape_numel(L->out), 1.0f, NULL, dy, beta, dx, dx);
    struct md_dropout_args a;
    dropout_args(r, i, &a);
    a.dy = dy;
    a.dx = dx;
    a.beta = beta;
    return md_k_dropout_bwd(m->dev, &a);
}

static int dropout_p(const struct md_layer *L, double *p)
{
    *p = (double)((const struct dropout_cfg *)L->args)->p;
    return 1;
}

static void dropout_describe_json(const struct md_layer *L, cJSON *x)
{
    double p;
    dropout_p(L, &p);
    cJSON_AddNumberToObject(x, "p", round(p * 1e6) / 1e6); /* as configured, not float's 0.10000000149 */
}

static const char *const dropout_names[] = {"dropout", NULL};

const struct md_layer_ops md_dropout_layer = {
    .names = dropout_names,
    .args_size = sizeof(struct dropout_cfg),
    .min_inputs = 1, .max_inputs = 1,
    .parse = dropout_parse,
    .shape = dropout_shape,
    .mask_per_sample = dropout_mask_per_sample,
    .forward = dropout_forward,
    .backward = dropout_backward,
    .describe_json = dropout_describe_json,
    .dropout = dropout_p,
};
