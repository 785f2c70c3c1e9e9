/* layernorm.c - layer normalisation over the last dimension, as
 * torch.nn.LayerNorm(F):
 *   {"type": "layernorm", "eps": 1e-5, "affine": true}
 * On a token sequence (T, 1, F) each token is normalised over its F
 * features; on a flat (C, 1, 1) input over C. weight (F) = 1, bias (F) = 0
 * (not weight-decayed). The per-row mean and 1/std are kept for backward. */
#include "nn/layer.h"

#include <math.h>
#include <string.h>

#include "core/json.h"

struct layernorm_cfg {
    float eps;
    int affine;
};

static md_status layernorm_parse(const struct md_layer_parse *p, const cJSON *o, struct md_layer *L)
{
    struct layernorm_cfg *a = L->args;
    static const char *const k[] = {"eps", "affine", NULL};
    (void)p;
    MD_TRY(md_layer_check_keys(o, L->path, k));
    double eps = 1e-5;
    MD_TRY(md_json_num(o, "eps", L->path, 0, 1e-12, 1.0, &eps));
    a->eps = (float)eps;
    a->affine = 1;
    return md_json_bool(o, "affine", L->path, 0, &a->affine);
}

/* Normalised width and rows per sample of a (T, 1, F) or (C, 1, 1) tensor. */
static void ln_dims(struct md_shape s, int *d, int *rows)
{
    if (s.h == 1 && s.w == 1) *d = s.c, *rows = 1;
    else *d = s.w, *rows = s.c * s.h;
}

static md_status layernorm_shape(const struct md_model *m, struct md_layer *L)
{
    const struct layernorm_cfg *a = L->args;
    struct md_shape x = m->layers[L->in[0]].out;
    if (!(x.h == 1 && x.w == 1)) MD_TRY(md_layer_check_tokens(m, L, x));
    int d, rows;
    ln_dims(x, &d, &rows);
    L->out = x;
    L->nparams = a->affine ? 2LL * d : 0;
    L->flops = 8.0 * (double)md_shape_numel(x);
    return MD_OK;
}

static int layernorm_params(const struct md_model *m, const struct md_layer *L, struct md_param_decl *out)
{
    const struct layernorm_cfg *a = L->args;
    int d, rows;
    (void)m;
    ln_dims(L->out, &d, &rows);
    if (!a->affine) return 0;
    out[0] = (struct md_param_decl){"weight", 1, {d}, 0, 0, 0.0f};
    out[1] = (struct md_param_decl){"bias", 1, {d}, 0, 0, 0.0f};
    return 2;
}

static void layernorm_init(const struct md_model *m, const struct md_layer *L, float *p)
{
    if (L->param[0] < 0) return;
    const struct md_param_info *w = &m->tensors[L->param[0]], *b = &m->tensors[L->param[1]];
    for (size_t e = 0; e < w->numel; e++) p[w->offset + e] = 1.0f;
    for (size_t e = 0; e < b->numel; e++) p[b->offset + e] = 0.0f;
}

/* mean (rows), then 1/std (rows), fp32 */
static size_t layernorm_mask_per_sample(const struct md_layer *L)
{
    int d, rows;
    ln_dims(L->out, &d, &rows);
    return 2 * md_layer_align16((size_t)rows * 4);
}

static void ln_args(const struct md_layer_run *r, int i, struct md_layernorm_args *g)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    int d, rows;
    ln_dims(L->out, &d, &rows);
    memset(g, 0, sizeof *g);
    g->rows = r->n * rows;
    g->d = d;
    g->dtype = m->opts.compute_dtype;
    g->eps = ((const struct layernorm_cfg *)L->args)->eps;
    g->x = md_layer_act(r, L->in[0]);
    if (L->param[0] >= 0) {
        g->gamma = md_layer_param32(m, L->param[0]);
        g->beta_p = md_layer_param32(m, L->param[1]);
    }
    g->mean = md_layer_saved(r, i, 0);
    g->rstd = md_layer_saved(r, i, md_layer_align16((size_t)rows * 4));
}

static md_status layernorm_forward(const struct md_layer_run *r, int i)
{
    struct md_layernorm_args g;
    ln_args(r, i, &g);
    g.y = md_layer_act(r, i);
    return md_k_layernorm_fwd(r->m->dev, &g);
}

static md_status layernorm_backward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    struct md_layernorm_args g;
    ln_args(r, i, &g);
    g.dy = md_layer_grad(r, i);
    if (L->param[0] >= 0) {
        g.dgamma = md_layer_grad32(m, L->param[0]);
        g.dbeta = md_layer_grad32(m, L->param[1]);
    }
    float beta = 0.0f;
    if (L->in[0] >= m->ninputs) g.dx = md_layer_dx(r, i, 0, &beta);
    if (beta != 0.0f && g.dgamma) { /* beta applies to dgamma/dbeta too: do them apart */
        struct md_layernorm_args p = g;
        p.dx = NULL;
        MD_TRY(md_k_layernorm_bwd(m->dev, &p));
        g.dgamma = g.dbeta = NULL;
    }
    g.beta = beta;
    if (!g.dx && !g.dgamma) return MD_OK;
    return md_k_layernorm_bwd(m->dev, &g);
}

static int layernorm_needs_x(const struct md_layer *L) { (void)L; return 1; }

static const char *const layernorm_names[] = {"layernorm", NULL};

const struct md_layer_ops md_layernorm_layer = {
    .names = layernorm_names,
    .args_size = sizeof(struct layernorm_cfg),
    .min_inputs = 1, .max_inputs = 1,
    .tokens = 1,
    .parse = layernorm_parse,
    .shape = layernorm_shape,
    .params = layernorm_params,
    .mask_per_sample = layernorm_mask_per_sample,
    .init = layernorm_init,
    .forward = layernorm_forward,
    .backward = layernorm_backward,
    .needs_x = layernorm_needs_x,
};
