/* instance_norm.c - the iTransformer's per-window normalisation (use_norm),
 * two kinds that share their statistics:
 *   {"name": "norm", "type": "instance_norm", "eps": 1e-5}
 *     on a window (T, 1, N) of T time steps of N variates: each variate minus
 *     its mean over the T steps, divided by sqrt(biased var + eps);
 *   {"type": "instance_denorm", "stats": "norm"}
 *     on an output (P, 1, N): y = x * std + mean with the statistics the named
 *     instance_norm layer computed for the same sample in this forward.
 * instance_norm's backward is the full one (through the statistics);
 * instance_denorm's treats the statistics as constants (dx = dy * std): as in
 * the public code, the statistics come from the data, which has no gradient.
 * Both run as permute -> a normalisation kernel (layernorm over the window;
 * batchnorm with the statistics as running ones) -> permute back. */
#include "nn/layer.h"

#include <string.h>

#include "core/json.h"

struct inorm_cfg {
    float eps;
};

struct idenorm_cfg {
    char stats[512];
    int src; /* the instance_norm layer's index */
};

/* Saved per sample (bytes), of a tensor of `ne` elements over `nv` variates:
 * three staging buffers of ne (4 bytes each, whatever the dtype), then
 * instance_norm: mean (nv), 1/std (nv); instance_denorm: ones, zeros, 1/std^2. */
static size_t stage(size_t ne) { return md_layer_align16(ne * 4); }
static size_t vec(size_t nv) { return md_layer_align16(nv * 4); }

static md_status inorm_parse(const struct md_layer_parse *p, const cJSON *o, struct md_layer *L)
{
    struct inorm_cfg *a = L->args;
    static const char *const k[] = {"eps", NULL};
    (void)p;
    MD_TRY(md_layer_check_keys(o, L->path, k));
    double eps = 1e-5;
    MD_TRY(md_json_num(o, "eps", L->path, 0, 1e-12, 1.0, &eps));
    a->eps = (float)eps;
    return MD_OK;
}

static md_status inorm_shape(const struct md_model *m, struct md_layer *L)
{
    struct md_shape x = m->layers[L->in[0]].out;
    MD_TRY(md_layer_check_tokens(m, L, x));
    L->out = x;
    L->flops = 8.0 * (double)md_shape_numel(x);
    return MD_OK;
}

static size_t inorm_mask_per_sample(const struct md_layer *L)
{
    return 3 * stage(md_shape_numel(L->out)) + 2 * vec((size_t)L->out.w);
}

/* The statistics of instance_norm layer i: mean and 1/std, (batch, N) fp32. */
static float *inorm_mean(const struct md_layer_run *r, int i)
{
    return md_layer_saved(r, i, 3 * stage(md_shape_numel(r->m->layers[i].out)));
}
static float *inorm_rstd(const struct md_layer_run *r, int i)
{
    const struct md_layer *L = &r->m->layers[i];
    return md_layer_saved(r, i, 3 * stage(md_shape_numel(L->out)) + vec((size_t)L->out.w));
}

/* (n, T, 1, N) <-> (n, N, T) */
static md_status flip(struct md_model *m, int n, struct md_shape s, int to_nt, const void *src, void *dst)
{
    struct md_permute_args p = {n, s.c, 1, s.w, to_nt, m->opts.compute_dtype, src, dst};
    return md_k_permute(m->dev, &p);
}

static void inorm_ln(const struct md_layer_run *r, int i, struct md_layernorm_args *g)
{
    const struct md_layer *L = &r->m->layers[i];
    memset(g, 0, sizeof *g);
    g->rows = r->n * L->out.w;
    g->d = L->out.c;
    g->dtype = r->m->opts.compute_dtype;
    g->eps = ((const struct inorm_cfg *)L->args)->eps;
    g->x = md_layer_saved(r, i, 0);
    g->mean = inorm_mean(r, i);
    g->rstd = inorm_rstd(r, i);
}

static md_status inorm_forward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    size_t st = stage(md_shape_numel(L->out));
    void *xt = md_layer_saved(r, i, 0), *yt = md_layer_saved(r, i, st);
    MD_TRY(flip(m, r->n, L->out, 1, md_layer_act(r, L->in[0]), xt));
    struct md_layernorm_args g;
    inorm_ln(r, i, &g);
    g.y = yt;
    MD_TRY(md_k_layernorm_fwd(m->dev, &g));
    return flip(m, r->n, L->out, 0, yt, md_layer_act(r, i));
}

static md_status inorm_backward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    if (L->in[0] < m->ninputs) return MD_OK;
    size_t st = stage(md_shape_numel(L->out));
    void *a = md_layer_saved(r, i, st), *b = md_layer_saved(r, i, 2 * st);
    MD_TRY(flip(m, r->n, L->out, 1, md_layer_grad(r, i), a));
    struct md_layernorm_args g;
    inorm_ln(r, i, &g);
    g.dy = a;
    g.dx = b;
    MD_TRY(md_k_layernorm_bwd(m->dev, &g));
    float beta;
    void *dx = md_layer_dx(r, i, 0, &beta);
    if (beta == 0.0f) return flip(m, r->n, L->out, 0, b, dx);
    MD_TRY(flip(m, r->n, L->out, 0, b, a));
    return md_layer_axpby(m, (size_t)r->n * md_shape_numel(L->out), 1.0f, NULL, a, 1.0f, dx, dx);
}

static const char *const inorm_names[] = {"instance_norm", NULL};

const struct md_layer_ops md_instance_norm_layer = {
    .names = inorm_names,
    .args_size = sizeof(struct inorm_cfg),
    .min_inputs = 1, .max_inputs = 1,
    .tokens = 1,
    .parse = inorm_parse,
    .shape = inorm_shape,
    .mask_per_sample = inorm_mask_per_sample,
    .forward = inorm_forward,
    .backward = inorm_backward,
};

/* ---- instance_denorm ---- */

static md_status idenorm_parse(const struct md_layer_parse *p, const cJSON *o, struct md_layer *L)
{
    struct idenorm_cfg *a = L->args;
    static const char *const k[] = {"stats", NULL};
    (void)p;
    MD_TRY(md_layer_check_keys(o, L->path, k));
    const char *s = NULL;
    MD_TRY(md_json_str(o, "stats", L->path, 1, &s));
    if (strlen(s) >= sizeof a->stats)
        return md_errf(MD_ERR_CONFIG, "%s.stats: a layer name of at most %zu bytes", L->path, sizeof a->stats - 1);
    strcpy(a->stats, s);
    return MD_OK;
}

static md_status idenorm_shape(const struct md_model *m, struct md_layer *L)
{
    struct idenorm_cfg *a = L->args;
    struct md_shape x = m->layers[L->in[0]].out;
    MD_TRY(md_layer_check_tokens(m, L, x));
    a->src = -1;
    for (int j = 0; j < m->nlayers && &m->layers[j] != L; j++)
        if (m->layers[j].name && !strcmp(m->layers[j].name, a->stats)) a->src = j;
    if (a->src < 0 || m->layers[a->src].ops != &md_instance_norm_layer)
        return md_errf(MD_ERR_CONFIG, "%s.stats: '%s' is not an earlier instance_norm layer", L->path, a->stats);
    if (m->layers[a->src].out.w != x.w)
        return md_errf(MD_ERR_CONFIG, "%s.inputs: %d variates, but '%s' normalises %d", L->path, x.w, a->stats,
                       m->layers[a->src].out.w);
    L->out = x;
    L->flops = 2.0 * (double)md_shape_numel(x);
    return MD_OK;
}

static size_t idenorm_mask_per_sample(const struct md_layer *L)
{
    return 2 * stage(md_shape_numel(L->out)) + 3 * vec((size_t)L->out.w);
}

/* y_t = x_t * std (+ mean when with_mean) on (n, N, P) staging buffers. */
static md_status idenorm_scale(const struct md_layer_run *r, int i, int with_mean, const void *xt, void *yt)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    const struct idenorm_cfg *a = L->args;
    size_t nv = (size_t)r->n * (size_t)L->out.w, v0 = 2 * stage(md_shape_numel(L->out)), vb = vec((size_t)L->out.w);
    float *ones = md_layer_saved(r, i, v0), *zeros = md_layer_saved(r, i, v0 + vb),
          *rv = md_layer_saved(r, i, v0 + 2 * vb);
    float *rstd = inorm_rstd(r, a->src);
    struct md_ew_args e = {MD_EW_FILL, nv, MD_F32, 1.0f, 0.0f, NULL, NULL, NULL, ones};
    MD_TRY(md_k_ew(m->dev, &e));
    e.alpha = 0.0f;
    e.y = zeros;
    MD_TRY(md_k_ew(m->dev, &e));
    struct md_ew_args q = {MD_EW_MUL, nv, MD_F32, 1.0f, 0.0f, NULL, rstd, rstd, rv};
    MD_TRY(md_k_ew(m->dev, &q));
    struct md_batchnorm_args b;
    memset(&b, 0, sizeof b);
    b.n = 1;
    b.c = (int)nv;
    b.hw = L->out.c;
    b.layout = MD_NCHW;
    b.dtype = m->opts.compute_dtype;
    b.training = 0;
    b.eps = 0.0f;
    b.act = MD_ACT_NONE;
    b.x = xt;
    b.y = yt;
    b.gamma = ones;
    b.beta_p = with_mean ? inorm_mean(r, a->src) : zeros;
    b.running_mean = zeros;
    b.running_var = rv;
    return md_k_batchnorm_fwd(m->dev, &b);
}

static md_status idenorm_forward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    size_t st = stage(md_shape_numel(L->out));
    void *xt = md_layer_saved(r, i, 0), *yt = md_layer_saved(r, i, st);
    MD_TRY(flip(m, r->n, L->out, 1, md_layer_act(r, L->in[0]), xt));
    MD_TRY(idenorm_scale(r, i, 1, xt, yt));
    return flip(m, r->n, L->out, 0, yt, md_layer_act(r, i));
}

static md_status idenorm_backward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    if (L->in[0] < m->ninputs) return MD_OK;
    size_t st = stage(md_shape_numel(L->out));
    void *a = md_layer_saved(r, i, 0), *b = md_layer_saved(r, i, st);
    MD_TRY(flip(m, r->n, L->out, 1, md_layer_grad(r, i), a));
    MD_TRY(idenorm_scale(r, i, 0, a, b));
    float beta;
    void *dx = md_layer_dx(r, i, 0, &beta);
    if (beta == 0.0f) return flip(m, r->n, L->out, 0, b, dx);
    MD_TRY(flip(m, r->n, L->out, 0, b, a));
    return md_layer_axpby(m, (size_t)r->n * md_shape_numel(L->out), 1.0f, NULL, a, 1.0f, dx, dx);
}

static const char *const idenorm_names[] = {"instance_denorm", NULL};

const struct md_layer_ops md_instance_denorm_layer = {
    .names = idenorm_names,
    .args_size = sizeof(struct idenorm_cfg),
    .min_inputs = 1, .max_inputs = 1,
    .tokens = 1,
    .parse = idenorm_parse,
    .shape = idenorm_shape,
    .mask_per_sample = idenorm_mask_per_sample,
    .forward = idenorm_forward,
    .backward = idenorm_backward,
};
