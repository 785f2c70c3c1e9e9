/* attention.c - multi-head self-attention on a token sequence (T, 1, D), as
 * torch.nn.MultiheadAttention(D, heads, dropout, batch_first=True)(x, x, x):
 *   {"type": "attention", "heads": 8, "causal": false, "attn_dropout": 0.0,
 *    "bias": true, "names": "torch"}
 * qkv = x W_in^T + b_in (one GEMM, (T, 3D) per sample: q | k | v, each
 * (T, heads, D/heads)); o = softmax(q k^T / sqrt(D/heads)) v per head by the
 * fused attention kernel (causal: token t sees tokens <= t; attn_dropout on
 * the weights, --dropout overrides it); y = o W_out^T + b_out.
 * Parameters as PyTorch names them: in_proj_weight (3D, D), in_proj_bias
 * (3D), out_proj.weight (D, D), out_proj.bias (D), or with "names": "timm"
 * timm's Attention names for the same tensors: qkv.weight, qkv.bias,
 * proj.weight, proj.bias (its qkv Linear stacks q | k | v alike); the
 * weights U(+-1/sqrt(D))
 * (decayed), the biases 0. Separate q/k/v projections (the iTransformer's
 * query_projection, key_projection, value_projection) load by stacking
 * their weights and biases in that order (docs/transformers.md).
 * Kept for backward in the layer's saved block: qkv, o and the per-row
 * log-sum-exp; d(o) and d(qkv) are formed there during backward. */
#include "nn/layer.h"

#include <math.h>
#include <string.h>

#include "core/json.h"
#include "core/rng.h"

struct attention_cfg {
    int heads, causal, bias;
    int timm_names; /* qkv / proj instead of in_proj_* / out_proj */
    float p; /* attention dropout */
};

static md_status attention_parse(const struct md_layer_parse *p, const cJSON *o, struct md_layer *L)
{
    struct attention_cfg *a = L->args;
    static const char *const k[] = {"heads", "causal", "attn_dropout", "bias", "names", NULL};
    MD_TRY(md_layer_check_keys(o, L->path, k));
    MD_TRY(md_json_int(o, "heads", L->path, 1, 1, 4096, &a->heads));
    MD_TRY(md_json_bool(o, "causal", L->path, 0, &a->causal));
    a->bias = 1;
    MD_TRY(md_json_bool(o, "bias", L->path, 0, &a->bias));
    const char *names = NULL;
    MD_TRY(md_json_str(o, "names", L->path, 0, &names));
    if (names && strcmp(names, "timm") && strcmp(names, "torch"))
        return md_errf(MD_ERR_CONFIG, "%s.names: '%s' is not a naming (torch or timm)", L->path, names);
    a->timm_names = names && !strcmp(names, "timm");
    return md_layer_get_dropout(p, o, "attn_dropout", L->path, 0.0, &a->p);
}

static md_status attention_shape(const struct md_model *m, struct md_layer *L)
{
    const struct attention_cfg *a = L->args;
    struct md_shape x = m->layers[L->in[0]].out;
    MD_TRY(md_layer_check_tokens(m, L, x));
    if (x.w % a->heads)
        return md_errf(MD_ERR_CONFIG, "%s.heads: %d heads do not divide the %d features of the input", L->path,
                       a->heads, x.w);
    double t = x.c, d = x.w;
    L->out = x;
    L->nparams = 4LL * x.w * x.w + (a->bias ? 4LL * x.w : 0);
    L->flops = t * (8.0 * d * d) + 4.0 * t * t * d + 5.0 * a->heads * t * t;
    return MD_OK;
}

static int attention_params(const struct md_model *m, const struct md_layer *L, struct md_param_decl *out)
{
    const struct attention_cfg *a = L->args;
    int d = m->layers[L->in[0]].out.w, n = 0, t = a->timm_names;
    out[n++] = (struct md_param_decl){t ? "qkv.weight" : "in_proj_weight", 2, {3 * d, d}, 1, 0, 0.0f};
    if (a->bias) out[n++] = (struct md_param_decl){t ? "qkv.bias" : "in_proj_bias", 1, {3 * d}, 0, 0, 0.0f};
    out[n++] = (struct md_param_decl){t ? "proj.weight" : "out_proj.weight", 2, {d, d}, 1, 0, 0.0f};
    if (a->bias) out[n++] = (struct md_param_decl){t ? "proj.bias" : "out_proj.bias", 1, {d}, 0, 0, 0.0f};
    return n;
}

/* The iTransformer's AttentionLayer names (its inner FullAttention has no
 * parameters). */
static const char *const *attention_stacked_from(const struct md_layer *L, int k)
{
    static const char *const w_in[] = {"query_projection.weight", "key_projection.weight", "value_projection.weight",
                                       NULL};
    static const char *const b_in[] = {"query_projection.bias", "key_projection.bias", "value_projection.bias", NULL};
    static const char *const w_out[] = {"out_projection.weight", NULL};
    static const char *const b_out[] = {"out_projection.bias", NULL};
    const struct attention_cfg *a = L->args;
    static const char *const *const with_bias[] = {w_in, b_in, w_out, b_out};
    static const char *const *const no_bias[] = {w_in, w_out};
    return a->bias ? with_bias[k] : no_bias[k];
}

static void attention_init(const struct md_model *m, const struct md_layer *L, float *p)
{
    double bound = 1.0 / sqrt((double)m->layers[L->in[0]].out.w);
    for (int k = 0; k < MD_LAYER_MAX_PARAMS && L->param[k] >= 0; k++) {
        const struct md_param_info *ti = &m->tensors[L->param[k]];
        md_rng r;
        md_rng_init(&r, md_rng_hash(m->opts.seed, (uint64_t)L->param[k]));
        for (size_t e = 0; e < ti->numel; e++)
            p[ti->offset + e] = ti->ndim == 1 ? 0.0f
                                              : (float)(bound * (2.0 * (double)md_rng_next_uniform(&r) - 1.0));
    }
}

/* Per-sample byte offsets in the saved block: qkv, o, lse, dO, dqkv. */
struct attn_off {
    size_t qkv, o, lse, d_o, dqkv, total;
};
static struct attn_off attn_offsets(const struct md_layer *L)
{
    const struct attention_cfg *a = L->args;
    size_t t = (size_t)L->out.c, d = (size_t)L->out.w;
    struct attn_off f;
    f.qkv = 0;
    f.o = f.qkv + md_layer_align16(3 * t * d * 4);
    f.lse = f.o + md_layer_align16(t * d * 4);
    f.d_o = f.lse + md_layer_align16((size_t)a->heads * t * 4);
    f.dqkv = f.d_o + md_layer_align16(t * d * 4);
    f.total = f.dqkv + md_layer_align16(3 * t * d * 4);
    return f;
}

static size_t attention_mask_per_sample(const struct md_layer *L) { return attn_offsets(L).total; }

static void attn_args(const struct md_layer_run *r, int i, struct md_attn_args *g)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    const struct attention_cfg *a = L->args;
    struct attn_off f = attn_offsets(L);
    int t = L->out.c, d = L->out.w, hd = d / a->heads;
    size_t es = md_dtype_size(m->opts.compute_dtype);
    memset(g, 0, sizeof *g);
    g->batch = r->n;
    g->heads = a->heads;
    g->tq = g->tk = t;
    g->d = hd;
    long long sq[3] = {(long long)t * 3 * d, hd, 3LL * d}, so[3] = {(long long)t * d, hd, d};
    memcpy(g->sq, sq, sizeof sq);
    memcpy(g->sk, sq, sizeof sq);
    memcpy(g->sv, sq, sizeof sq);
    memcpy(g->so, so, sizeof so);
    g->causal = a->causal;
    g->dropout_p = r->training ? a->p : 0.0f;
    g->seed = md_rng_hash(m->opts.seed ^ 0xa77eu, (uint64_t)i);
    g->offset = m->step_dev ? 0 : m->step << 32;
    g->offset_dev = m->step_dev;
    g->dtype = m->opts.compute_dtype;
    char *qkv = md_layer_saved(r, i, f.qkv);
    g->q = qkv;
    g->k = qkv + (size_t)d * es;
    g->v = qkv + 2 * (size_t)d * es;
    g->o = md_layer_saved(r, i, f.o);
    g->lse = md_layer_saved(r, i, f.lse);
}

static md_status attention_forward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    int t = L->out.c, d = L->out.w, nr = r->n * t;
    int nb = L->param[1] >= 0 && ((const struct attention_cfg *)L->args)->bias;
    int pw_in = L->param[0], pb_in = nb ? L->param[1] : -1, pw_out = L->param[nb ? 2 : 1],
        pb_out = nb ? L->param[3] : -1;
    md_dtype dt = m->opts.compute_dtype;
    struct md_attn_args g;
    attn_args(r, i, &g);
    void *qkv = (void *)g.q;
    MD_TRY(md_layer_gemm(m, 0, 1, nr, 3 * d, d, md_layer_act(r, L->in[0]), d, md_layer_weight(m, pw_in), d, qkv, 3 * d, 0.0f));
    if (pb_in >= 0) {
        struct md_bias_args b = {nr, 3 * d, 1, MD_NCHW, dt, qkv, md_layer_param32(m, pb_in), NULL, NULL, 0};
        MD_TRY(md_k_bias_add(m->dev, &b));
    }
    MD_TRY(md_k_attn_fwd(m->dev, &g));
    void *y = md_layer_act(r, i);
    MD_TRY(md_layer_gemm(m, 0, 1, nr, d, d, g.o, d, md_layer_weight(m, pw_out), d, y, d, 0.0f));
    if (pb_out < 0) return MD_OK;
    struct md_bias_args b = {nr, d, 1, MD_NCHW, dt, y, md_layer_param32(m, pb_out), NULL, NULL, 0};
    return md_k_bias_add(m->dev, &b);
}

static md_status attention_backward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    int t = L->out.c, d = L->out.w, nr = r->n * t;
    int nb = ((const struct attention_cfg *)L->args)->bias;
    int pw_in = L->param[0], pb_in = nb ? L->param[1] : -1, pw_out = L->param[nb ? 2 : 1],
        pb_out = nb ? L->param[3] : -1;
    md_dtype dt = m->opts.compute_dtype;
    struct attn_off f = attn_offsets(L);
    size_t es = md_dtype_size(dt);
    struct md_attn_args g;
    attn_args(r, i, &g);
    void *dy = md_layer_grad(r, i);
    if (pb_out >= 0) {
        struct md_bias_args b = {nr, d, 1, MD_NCHW, dt, NULL, NULL, dy, md_layer_grad32(m, pb_out), 0};
        MD_TRY(md_k_bias_grad(m->dev, &b));
    }
    /* dW_out (D, D) = dy^T o; d(o) = dy W_out */
    MD_TRY(md_layer_gemm(m, 1, 0, d, d, nr, dy, d, g.o, d, md_layer_wgrad(m, pw_out), d, 0.0f));
    void *d_o = md_layer_saved(r, i, f.d_o);
    MD_TRY(md_layer_gemm(m, 0, 0, nr, d, d, dy, d, md_layer_weight(m, pw_out), d, d_o, d, 0.0f));
    char *dqkv = md_layer_saved(r, i, f.dqkv);
    g.d_o = d_o;
    g.dq = dqkv;
    g.dk = dqkv + (size_t)d * es;
    g.dv = dqkv + 2 * (size_t)d * es;
    g.beta = 0.0f;
    MD_TRY(md_k_attn_bwd(m->dev, &g));
    if (pb_in >= 0) {
        struct md_bias_args b = {nr, 3 * d, 1, MD_NCHW, dt, NULL, NULL, dqkv, md_layer_grad32(m, pb_in), 0};
        MD_TRY(md_k_bias_grad(m->dev, &b));
    }
    /* dW_in (3D, D) = dqkv^T x; dx = dqkv W_in */
    MD_TRY(md_layer_gemm(m, 1, 0, 3 * d, d, nr, dqkv, 3 * d, md_layer_act(r, L->in[0]), d, md_layer_wgrad(m, pw_in), d,
                0.0f));
    if (L->in[0] < m->ninputs) return MD_OK;
    float beta;
    void *dx = md_layer_dx(r, i, 0, &beta);
    return md_layer_gemm(m, 0, 0, nr, d, 3 * d, dqkv, 3 * d, md_layer_weight(m, pw_in), d, dx, d, beta);
}

static int attention_needs_x(const struct md_layer *L) { (void)L; return 1; }

static int attention_dropout(const struct md_layer *L, double *p)
{
    *p = (double)((const struct attention_cfg *)L->args)->p;
    return 1;
}

static void attention_describe_json(const struct md_layer *L, cJSON *x)
{
    const struct attention_cfg *a = L->args;
    cJSON_AddNumberToObject(x, "heads", a->heads);
    cJSON_AddBoolToObject(x, "causal", a->causal);
    cJSON_AddNumberToObject(x, "attn_dropout", round((double)a->p * 1e6) / 1e6);
}

static const char *const attention_names[] = {"attention", NULL};

const struct md_layer_ops md_attention_layer = {
    .names = attention_names,
    .args_size = sizeof(struct attention_cfg),
    .min_inputs = 1, .max_inputs = 1,
    .tokens = 1,
    .parse = attention_parse,
    .shape = attention_shape,
    .params = attention_params,
    .stacked_from = attention_stacked_from,
    .mask_per_sample = attention_mask_per_sample,
    .init = attention_init,
    .forward = attention_forward,
    .backward = attention_backward,
    .needs_x = attention_needs_x,
    .describe_json = attention_describe_json,
    .dropout = attention_dropout,
};
