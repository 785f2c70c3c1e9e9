/* token_pool.c - a ViT's pooled output, as timm's VisionTransformer.pool:
 *   {"type": "token_pool", "mode": "cls" | "mean" | "both", "prefix": 5}
 * tokens (T, 1, D) -> (D, 1, 1): "cls" token 0 (timm's global_pool
 * 'token'), "mean" the mean of tokens [prefix, T) (timm's 'avg', which
 * skips the class and register tokens; prefix 0: all tokens); "both"
 * (2D, 1, 1) = [token 0, mean] (the DINOv2 linear probe's concat). No
 * parameters. "mode" may also be 0, 1 or 2 (cls, mean, both), so that a
 * config's numeric parameter can choose it ("mode": "$pool").
 * The class token is the channel-slice kernel; the mean one batched GEMM
 * per direction with a row of ones (kept in the layer's saved block):
 * y_s = 1/(T-prefix) * ones (1, T-prefix) @ x_s[prefix:] and
 * dx_s[prefix:] += 1/(T-prefix) * ones^T @ dy_s. */
#include "nn/layer.h"

#include <string.h>

#include "core/json.h"

enum { POOL_CLS = 1, POOL_MEAN = 2, POOL_BOTH = 3 };

struct token_pool_cfg {
    int mode; /* bit 1: class token, bit 2: mean */
    int prefix;
    int tokens; /* T of the input (shape sets it) */
};

static md_status token_pool_parse(const struct md_layer_parse *p, const cJSON *o, struct md_layer *L)
{
    struct token_pool_cfg *a = L->args;
    static const char *const k[] = {"mode", "prefix", NULL};
    (void)p;
    MD_TRY(md_layer_check_keys(o, L->path, k));
    const cJSON *jm = cJSON_GetObjectItemCaseSensitive(o, "mode");
    if (cJSON_IsNumber(jm)) {
        if (jm->valuedouble != 0 && jm->valuedouble != 1 && jm->valuedouble != 2)
            return md_errf(MD_ERR_CONFIG, "%s.mode: %g is not a pooling (0 cls, 1 mean, 2 both)", L->path,
                           jm->valuedouble);
        a->mode = (int)jm->valuedouble + 1;
        return md_json_int(o, "prefix", L->path, 0, 0, 1 << 30, &a->prefix);
    }
    const char *s = "cls";
    MD_TRY(md_json_str(o, "mode", L->path, 0, &s));
    if (!s) s = "cls";
    if (!strcmp(s, "cls")) a->mode = POOL_CLS;
    else if (!strcmp(s, "mean")) a->mode = POOL_MEAN;
    else if (!strcmp(s, "both")) a->mode = POOL_BOTH;
    else return md_errf(MD_ERR_CONFIG, "%s.mode: '%s' is not a pooling (cls, mean or both)", L->path, s);
    return md_json_int(o, "prefix", L->path, 0, 0, 1 << 30, &a->prefix);
}

static md_status token_pool_shape(const struct md_model *m, struct md_layer *L)
{
    struct token_pool_cfg *a = L->args;
    struct md_shape x = m->layers[L->in[0]].out;
    MD_TRY(md_layer_check_tokens(m, L, x));
    if ((a->mode & POOL_MEAN) && a->prefix >= x.c)
        return md_errf(MD_ERR_CONFIG, "%s.prefix: %d prefix tokens leave none of the input's %d to average",
                       L->path, a->prefix, x.c);
    a->tokens = x.c;
    L->out = (struct md_shape){a->mode == POOL_BOTH ? 2 * x.w : x.w, 1, 1};
    L->flops = (a->mode & POOL_MEAN) ? 2.0 * (double)(x.c - a->prefix) * x.w : 0.0;
    return MD_OK;
}

/* the row of ones, fp32-sized */
static size_t token_pool_mask_per_sample(const struct md_layer *L)
{
    const struct token_pool_cfg *a = L->args;
    return (a->mode & POOL_MEAN) ? md_layer_align16((size_t)a->tokens * 4) : 0;
}

static md_status token_pool_forward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    const struct token_pool_cfg *a = L->args;
    struct md_shape x = m->layers[L->in[0]].out;
    int d = x.w, ny = (int)(L->out.c / d), t = x.c - a->prefix;
    md_dtype dt = m->opts.compute_dtype;
    char *y = md_layer_act(r, i);
    const char *xa = md_layer_act(r, L->in[0]);
    if (a->mode & POOL_CLS) {
        struct md_chslice_args s = {r->n, d, 1, x.c, 0, ny, 0, MD_NCHW, dt, xa, y, 0.0f};
        MD_TRY(md_k_chslice(m->dev, &s));
    }
    if (!(a->mode & POOL_MEAN)) return MD_OK;
    void *ones = md_layer_saved(r, i, 0);
    struct md_ew_args f;
    memset(&f, 0, sizeof f);
    f.op = MD_EW_FILL;
    f.n = (size_t)t;
    f.alpha = 1.0f;
    f.dtype = dt;
    f.y = ones;
    MD_TRY(md_k_ew(m->dev, &f));
    size_t es = md_dtype_size(dt);
    struct md_gemm_args g;
    memset(&g, 0, sizeof g);
    g.m = 1; g.n = d; g.k = t;
    g.alpha = 1.0f / (float)t;
    g.a = ones; g.lda = t; g.stride_a = 0;
    g.b = xa + (size_t)a->prefix * d * es; g.ldb = d; g.stride_b = (long long)x.c * d;
    g.c = y + (size_t)(ny - 1) * d * es; g.ldc = d; g.stride_c = (long long)ny * d;
    g.batch = r->n;
    g.dtype = dt;
    return md_k_gemm(m->dev, &g);
}

static md_status token_pool_backward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    const struct token_pool_cfg *a = L->args;
    if (L->in[0] < m->ninputs) return MD_OK;
    struct md_shape x = m->layers[L->in[0]].out;
    int d = x.w, ny = (int)(L->out.c / d), t = x.c - a->prefix;
    md_dtype dt = m->opts.compute_dtype;
    size_t es = md_dtype_size(dt);
    const char *dy = md_layer_grad(r, i);
    float beta;
    char *dx = md_layer_dx(r, i, 0, &beta);
    if (beta == 0.0f) MD_TRY(md_dev_memset0(m->dev, dx, (size_t)r->n * md_shape_numel(x) * es));
    if (a->mode & POOL_CLS) {
        struct md_chslice_args s = {r->n, d, 1, ny, 0, x.c, 0, MD_NCHW, dt, dy, dx, 1.0f};
        MD_TRY(md_k_chslice(m->dev, &s));
    }
    if (!(a->mode & POOL_MEAN)) return MD_OK;
    struct md_gemm_args g;
    memset(&g, 0, sizeof g);
    g.m = t; g.n = d; g.k = 1;
    g.alpha = 1.0f / (float)t;
    g.beta = 1.0f;
    g.a = md_layer_saved(r, i, 0); g.lda = 1; g.stride_a = 0;
    g.b = dy + (size_t)(ny - 1) * d * es; g.ldb = d; g.stride_b = (long long)ny * d;
    g.c = dx + (size_t)a->prefix * d * es; g.ldc = d; g.stride_c = (long long)x.c * d;
    g.batch = r->n;
    g.dtype = dt;
    return md_k_gemm(m->dev, &g);
}

static void token_pool_describe(const struct md_layer *L, char *buf, size_t n)
{
    static const char *const mode[] = {"", "cls", "mean", "cls+mean"};
    const struct token_pool_cfg *a = L->args;
    snprintf(buf, n, "token_pool %s", mode[a->mode]);
}

static const char *const token_pool_names[] = {"token_pool", NULL};

const struct md_layer_ops md_token_pool_layer = {
    .names = token_pool_names,
    .args_size = sizeof(struct token_pool_cfg),
    .min_inputs = 1, .max_inputs = 1,
    .tokens = 1,
    .parse = token_pool_parse,
    .shape = token_pool_shape,
    .mask_per_sample = token_pool_mask_per_sample,
    .forward = token_pool_forward,
    .backward = token_pool_backward,
    .describe = token_pool_describe,
};
