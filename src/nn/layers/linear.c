/* linear.c - a fully connected layer on a flat (C, 1, 1) input, as
 * torch.nn.Linear:  {"type": "linear", "out": N, "bias": true}
 * weight (N, C) and bias (N) U(+-1/sqrt(C)). */
#include "nn/layer.h"

#include <math.h>
#include <string.h>

#include "core/json.h"
#include "core/rng.h"

struct linear_cfg {
    int k; /* out features */
    int bias;
};

static md_status linear_parse(const struct md_layer_parse *p, const cJSON *o, struct md_layer *L)
{
    struct linear_cfg *a = L->args;
    static const char *const k[] = {"out", "bias", NULL};
    MD_TRY(md_layer_check_keys(o, L->path, k));
    MD_TRY(md_json_int(o, "out", L->path, 1, 1, 1 << 24, &a->k));
    a->bias = 1;
    MD_TRY(md_json_bool(o, "bias", L->path, 0, &a->bias));
    if (p->opts->reduce_architecture && !p->is_last && a->k > 1) a->k = (a->k + 1) / 2;
    return MD_OK;
}

static md_status linear_shape(const struct md_model *m, struct md_layer *L)
{
    const struct linear_cfg *a = L->args;
    struct md_shape x = m->layers[L->in[0]].out;
    if (x.h != 1 || x.w != 1)
        return md_errf(MD_ERR_CONFIG, "%s.inputs: linear needs a flat input (C, 1, 1), got (%d, %d, %d): add a "
                       "flatten or global_avgpool layer", L->path, x.c, x.h, x.w);
    L->out = (struct md_shape){a->k, 1, 1};
    L->nparams = (long long)x.c * a->k + (a->bias ? a->k : 0);
    L->flops = 2.0 * x.c * a->k + (a->bias ? a->k : 0);
    return MD_OK;
}

static int linear_params(const struct md_model *m, const struct md_layer *L, struct md_param_decl *out)
{
    const struct linear_cfg *a = L->args;
    out[0] = (struct md_param_decl){"weight", 2, {a->k, m->layers[L->in[0]].out.c}, 1, 0, 0.0f};
    if (!a->bias) return 1;
    out[1] = (struct md_param_decl){"bias", 1, {a->k}, 0, 0, 0.0f};
    return 2;
}

/* U(+-bound) from tensor t's own stream */
static void uniform(const struct md_model *m, int t, double bound, float *p)
{
    const struct md_param_info *ti = &m->tensors[t];
    md_rng r;
    md_rng_init(&r, md_rng_hash(m->opts.seed, (uint64_t)t));
    for (size_t e = 0; e < ti->numel; e++)
        p[ti->offset + e] = (float)(bound * (2.0 * (double)md_rng_next_uniform(&r) - 1.0));
}

static void linear_init(const struct md_model *m, const struct md_layer *L, float *p)
{
    double bound = 1.0 / sqrt((double)m->layers[L->in[0]].out.c);
    uniform(m, L->param[0], bound, p);
    if (L->param[1] >= 0) uniform(m, L->param[1], bound, p);
}

static md_status linear_forward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    const struct linear_cfg *a = L->args;
    int cin = m->layers[L->in[0]].out.c;
    md_dtype dt = m->opts.compute_dtype;
    void *y = md_layer_act(r, i);
    struct md_gemm_args g;                 /* y (n, out) = x (n, in) @ W^T */
    memset(&g, 0, sizeof g);
    g.trans_b = 1;
    g.m = r->n; g.n = a->k; g.k = cin;
    g.alpha = 1.0f;
    g.a = md_layer_act(r, L->in[0]); g.lda = cin;
    g.b = md_layer_weight(m, L->param[0]); g.ldb = cin;
    g.c = y; g.ldc = a->k;
    g.batch = 1;
    g.dtype = dt;
    MD_TRY(md_k_gemm(m->dev, &g));
    if (L->param[1] < 0) return MD_OK;
    struct md_bias_args b = {r->n, a->k, 1, MD_NCHW, dt, y, md_layer_param32(m, L->param[1]), NULL, NULL, 0};
    return md_k_bias_add(m->dev, &b);
}

static md_status linear_backward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    const struct linear_cfg *a = L->args;
    int cin = m->layers[L->in[0]].out.c;
    md_dtype dt = m->opts.compute_dtype;
    void *dy = md_layer_grad(r, i);
    if (L->param[1] >= 0) {
        struct md_bias_args b = {r->n, a->k, 1, MD_NCHW, dt, NULL, NULL, dy, md_layer_grad32(m, L->param[1]), 0};
        MD_TRY(md_k_bias_grad(m->dev, &b));
    }
    struct md_gemm_args g;
    memset(&g, 0, sizeof g);
    g.trans_a = 1;                      /* dW (out, in) = dy^T (out, n) @ x (n, in) */
    g.m = a->k; g.n = cin; g.k = r->n;
    g.alpha = 1.0f;
    g.a = dy; g.lda = a->k;
    g.b = md_layer_act(r, L->in[0]); g.ldb = cin;
    g.c = md_layer_wgrad(m, L->param[0]); g.ldc = cin;
    g.batch = 1;
    g.dtype = dt;
    MD_TRY(md_k_gemm(m->dev, &g));
    if (L->in[0] < m->ninputs) return MD_OK; /* no gradient for the data */
    memset(&g, 0, sizeof g);            /* dx (n, in) = dy (n, out) @ W (out, in) */
    g.m = r->n; g.n = cin; g.k = a->k;
    g.alpha = 1.0f;
    g.a = dy; g.lda = a->k;
    g.b = md_layer_weight(m, L->param[0]); g.ldb = cin;
    g.c = md_layer_dx(r, i, 0, &g.beta); g.ldc = cin;
    g.batch = 1;
    g.dtype = dt;
    return md_k_gemm(m->dev, &g);
}

static int linear_needs_x(const struct md_layer *L) { (void)L; return 1; }

static const char *const linear_names[] = {"linear", NULL};

const struct md_layer_ops md_linear_layer = {
    .names = linear_names,
    .args_size = sizeof(struct linear_cfg),
    .min_inputs = 1, .max_inputs = 1,
    .parse = linear_parse,
    .shape = linear_shape,
    .params = linear_params,
    .init = linear_init,
    .forward = linear_forward,
    .backward = linear_backward,
    .needs_x = linear_needs_x,
};
