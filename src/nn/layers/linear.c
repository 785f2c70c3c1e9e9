/* linear.c - a fully connected layer, as torch.nn.Linear:
 *   {"type": "linear", "out": N, "bias": true, "per_token": auto, "conv1x1": false}
 * On a flat (C, 1, 1) input: (N, 1, 1), weight (N, C). On a token sequence
 * (T, 1, F) (docs/transformers.md) it applies to every token over the last
 * dimension: (T, 1, N), weight (N, F); "per_token" defaults to true exactly
 * when the input is (T, 1, F) with F > 1. "conv1x1": the weight is declared
 * (N, F, 1), as a kernel-size-1 torch.nn.Conv1d stores it (the iTransformer's
 * feed-forward), so such state dicts load as they are. Weight and bias
 * U(+-1/sqrt(fan_in)). --reduce-architecture halves N of flat linears only
 * (a token linear's width is the residual stream's). */
#include "nn/layer.h"

#include <math.h>
#include <string.h>

#include "core/json.h"
#include "core/rng.h"

struct linear_cfg {
    int k; /* out features */
    int bias;
    int per_token; /* -1 auto, 0 flat, 1 over the last dimension */
    int conv1x1;
    int reduce;    /* --reduce-architecture applies (not the last layer) */
};

/* Features in and rows per sample of layer L's input. */
static void linear_dims(const struct md_model *m, const struct md_layer *L, int *fin, int *rows)
{
    const struct linear_cfg *a = L->args;
    struct md_shape x = m->layers[L->in[0]].out;
    if (a->per_token == 1) *fin = x.w, *rows = x.c * x.h;
    else *fin = x.c, *rows = 1;
}

static md_status linear_parse(const struct md_layer_parse *p, const cJSON *o, struct md_layer *L)
{
    struct linear_cfg *a = L->args;
    static const char *const k[] = {"out", "bias", "per_token", "conv1x1", NULL};
    MD_TRY(md_layer_check_keys(o, L->path, k));
    MD_TRY(md_json_int(o, "out", L->path, 1, 1, 1 << 24, &a->k));
    a->bias = 1;
    MD_TRY(md_json_bool(o, "bias", L->path, 0, &a->bias));
    a->per_token = -1;
    if (cJSON_GetObjectItemCaseSensitive(o, "per_token")) MD_TRY(md_json_bool(o, "per_token", L->path, 1, &a->per_token));
    MD_TRY(md_json_bool(o, "conv1x1", L->path, 0, &a->conv1x1));
    a->reduce = p->opts->reduce_architecture && !p->is_last;
    return MD_OK;
}

static md_status linear_shape(const struct md_model *m, struct md_layer *L)
{
    struct linear_cfg *a = L->args;
    struct md_shape x = m->layers[L->in[0]].out;
    if (a->per_token < 0) a->per_token = x.h == 1 && x.w > 1;
    if (a->per_token) {
        if (x.h != 1)
            return md_errf(MD_ERR_CONFIG, "%s.inputs: a per-token linear needs a token sequence (T, 1, F), got "
                           "(%d, %d, %d)", L->path, x.c, x.h, x.w);
        if (m->opts.layout != MD_NCHW)
            return md_errf(MD_ERR_CONFIG, "%s: token sequences need the default NCHW layout (drop --channels-last)",
                           L->path);
    } else {
        if (x.h != 1 || x.w != 1)
            return md_errf(MD_ERR_CONFIG, "%s.inputs: linear needs a flat input (C, 1, 1), got (%d, %d, %d): add a "
                           "flatten or global_avgpool layer", L->path, x.c, x.h, x.w);
        if (a->reduce && a->k > 1) a->k = (a->k + 1) / 2;
        a->reduce = 0; /* shape may run again */
    }
    int fin, rows;
    linear_dims(m, L, &fin, &rows);
    L->out = a->per_token ? (struct md_shape){x.c, 1, a->k} : (struct md_shape){a->k, 1, 1};
    L->nparams = (long long)fin * a->k + (a->bias ? a->k : 0);
    L->flops = (double)rows * (2.0 * fin * a->k + (a->bias ? a->k : 0));
    return MD_OK;
}

static int linear_params(const struct md_model *m, const struct md_layer *L, struct md_param_decl *out)
{
    const struct linear_cfg *a = L->args;
    int fin, rows;
    linear_dims(m, L, &fin, &rows);
    out[0] = (struct md_param_decl){"weight", a->conv1x1 ? 3 : 2, {a->k, fin, 1}, 1, 0, 0.0f};
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
    int fin, rows;
    linear_dims(m, L, &fin, &rows);
    double bound = 1.0 / sqrt((double)fin);
    uniform(m, L->param[0], bound, p);
    if (L->param[1] >= 0) uniform(m, L->param[1], bound, p);
}

/* A run's shape: nr rows of cin inputs and k outputs; `bias`: the bias
 * kernels' arguments over the (nr, k) output (pointers left to the caller). */
struct lin {
    int cin, nr, k;
    struct md_bias_args bias;
};

static struct lin lin_of(const struct md_layer_run *r, int i)
{
    const struct md_layer *L = &r->m->layers[i];
    struct lin s;
    int rows;
    linear_dims(r->m, L, &s.cin, &rows);
    s.nr = r->n * rows;
    s.k = ((const struct linear_cfg *)L->args)->k;
    s.bias = (struct md_bias_args){s.nr, s.k, 1, MD_NCHW, r->m->opts.compute_dtype, NULL, NULL, NULL, NULL, 0};
    return s;
}

static md_status linear_forward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    struct lin s = lin_of(r, i);
    void *y = md_layer_act(r, i);
    /* y (n, out) = x (n, in) @ W^T */
    MD_TRY(md_layer_gemm(m, 0, 1, s.nr, s.k, s.cin, md_layer_act(r, L->in[0]), s.cin, md_layer_weight(m, L->param[0]),
                         s.cin, y, s.k, 0.0f));
    if (L->param[1] < 0) return MD_OK;
    s.bias.y = y, s.bias.bias = md_layer_param32(m, L->param[1]);
    return md_k_bias_add(m->dev, &s.bias);
}

static md_status linear_backward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    struct lin s = lin_of(r, i);
    int cin = s.cin, nr = s.nr, k = s.k;
    void *dy = md_layer_grad(r, i);
    if (L->param[1] >= 0) {
        s.bias.dy = dy, s.bias.dbias = md_layer_grad32(m, L->param[1]);
        MD_TRY(md_k_bias_grad(m->dev, &s.bias));
    }
    /* dW (out, in) = dy^T (out, n) @ x (n, in) */
    MD_TRY(md_layer_gemm(m, 1, 0, k, cin, nr, dy, k, md_layer_act(r, L->in[0]), cin,
                         md_layer_wgrad(m, L->param[0]), cin, 0.0f));
    if (L->in[0] < m->ninputs) return MD_OK; /* no gradient for the data */
    /* dx (n, in) = dy (n, out) @ W (out, in) */
    float beta;
    void *dx = md_layer_dx(r, i, 0, &beta);
    return md_layer_gemm(m, 0, 0, nr, cin, k, dy, k, md_layer_weight(m, L->param[0]), cin, dx, cin, beta);
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
