/* regroup.c - the items of a sample (fold k, from tiles) as one token
 * sequence (docs/tiles.md):  {"type": "regroup"}
 * Input (D, 1, 1) or tokens (T, 1, D) with fold k -> tokens (k*T, 1, D) with
 * fold 1, in item order (input, then tile). The same memory read another way:
 * the layer is a view of its input (an alias) and runs nothing, as
 * feats.view(B, k, D) in PyTorch. */
#include "nn/layer.h"

static md_status regroup_parse(const struct md_layer_parse *p, const cJSON *o, struct md_layer *L)
{
    static const char *const k[] = {NULL};
    (void)p;
    return md_layer_check_keys(o, L->path, k);
}

static md_status regroup_shape(const struct md_model *m, struct md_layer *L)
{
    struct md_shape x = m->layers[L->in[0]].out;
    if (x.h != 1)
        return md_errf(MD_ERR_CONFIG, "%s.inputs: regroup needs features (D, 1, 1) or tokens (T, 1, D), got (%d, %d, "
                       "%d) (pool or flatten first)", L->path, x.c, x.h, x.w);
    int t = x.w == 1 ? 1 : x.c, d = x.w == 1 ? x.c : x.w;
    L->out = (struct md_shape){L->fold * t, 1, d};
    L->fold = 1;
    L->flops = 0;
    L->alias = L->in[0];
    L->view = 1;
    return MD_OK;
}

/* never called: an alias runs nothing (model_exec.c) */
static md_status regroup_run(const struct md_layer_run *r, int i)
{
    (void)r, (void)i;
    return MD_OK;
}

static const char *const regroup_names[] = {"regroup", NULL};

const struct md_layer_ops md_regroup_layer = {
    .names = regroup_names,
    .min_inputs = 1, .max_inputs = 1,
    .tokens = 1,
    .parse = regroup_parse,
    .shape = regroup_shape,
    .forward = regroup_run,
    .backward = regroup_run,
};
