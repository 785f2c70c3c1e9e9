/* prefix_tokens.c - learned tokens put before a sequence, as a ViT's class
 * and register tokens (timm's _pos_embed with no_embed_class=True):
 *   {"type": "prefix_tokens", "cls": 1, "registers": 4}
 * tokens (T, 1, D) -> (cls + R + T, 1, D) in the order [cls, reg_0 ..
 * reg_{R-1}, x_0 .. x_{T-1}]. Parameters cls_token (1, 1, D) and
 * reg_token (1, R, D) (timm's shapes; absent when 0), initialised
 * N(0, 1e-6^2) as timm's init_weights does, not decayed.
 * Forward broadcasts the parameters over the batch with the bias kernel
 * into the layer's saved block ([n x cls*D | n x R*D], zeroed first) and
 * places them and the input with the channel-slice kernel; backward
 * gathers the prefix rows of the gradient there and sums them over the
 * batch with the bias-gradient kernel. */
#include "nn/layer.h"

#include <string.h>

#include "core/json.h"
#include "core/rng.h"

struct prefix_tokens_cfg {
    int cls, reg;
};

static md_status prefix_tokens_parse(const struct md_layer_parse *p, const cJSON *o, struct md_layer *L)
{
    struct prefix_tokens_cfg *a = L->args;
    static const char *const k[] = {"cls", "registers", NULL};
    (void)p;
    MD_TRY(md_layer_check_keys(o, L->path, k));
    a->cls = 1;
    MD_TRY(md_json_int(o, "cls", L->path, 0, 0, 1, &a->cls));
    MD_TRY(md_json_int(o, "registers", L->path, 0, 0, 1 << 16, &a->reg));
    if (!a->cls && !a->reg)
        return md_errf(MD_ERR_CONFIG, "%s: neither a class token nor registers: nothing to add (\"cls\": 1 or "
                       "\"registers\" > 0)", L->path);
    return MD_OK;
}

static md_status prefix_tokens_shape(const struct md_model *m, struct md_layer *L)
{
    const struct prefix_tokens_cfg *a = L->args;
    struct md_shape x = m->layers[L->in[0]].out;
    MD_TRY(md_layer_check_tokens(m, L, x));
    L->out = (struct md_shape){x.c + a->cls + a->reg, 1, x.w};
    L->nparams = (long long)(a->cls + a->reg) * x.w;
    L->flops = 0;
    return MD_OK;
}

static int prefix_tokens_params(const struct md_model *m, const struct md_layer *L, struct md_param_decl *out)
{
    const struct prefix_tokens_cfg *a = L->args;
    int d = L->out.w, n = 0;
    (void)m;
    if (a->cls) out[n++] = (struct md_param_decl){"cls_token", 3, {1, 1, d}, 0, 0, 0.0f};
    if (a->reg) out[n++] = (struct md_param_decl){"reg_token", 3, {1, a->reg, d}, 0, 0, 0.0f};
    return n;
}

static void prefix_tokens_init(const struct md_model *m, const struct md_layer *L, float *p)
{
    for (int k = 0; k < 2 && L->param[k] >= 0; k++) {
        const struct md_param_info *t = &m->tensors[L->param[k]];
        double sd = 1e-6;
        md_rng r;
        md_rng_init(&r, md_rng_hash(m->opts.seed, (uint64_t)L->param[k]));
        for (size_t e = 0; e < t->numel; e++) p[t->offset + e] = (float)(sd * md_rng_normal(&r));
    }
}

/* the broadcast prefix rows, fp32-sized: cls then registers */
static size_t prefix_tokens_mask_per_sample(const struct md_layer *L)
{
    const struct prefix_tokens_cfg *a = L->args;
    return md_layer_align16((size_t)(a->cls + a->reg) * (size_t)L->out.w * 4);
}

/* The prefix parts: k 0 the class token, 1 the registers. */
struct part {
    int rows, at, param;
    char *buf; /* its block in the saved area, (n, rows, D) */
};

/* What the forward and the backward both read: d the token width, t the
 * tokens out, pre the prefix tokens among them, and the np prefix parts. */
struct prefix_run {
    struct md_model *m;
    int d, t, pre, np;
    md_dtype dt;
    struct part p[2];
};

static void prefix_run_init(const struct md_layer_run *r, int i, struct prefix_run *x)
{
    const struct md_layer *L = &r->m->layers[i];
    const struct prefix_tokens_cfg *a = L->args;
    char *s = md_layer_saved(r, i, 0);
    *x = (struct prefix_run){.m = r->m, .d = L->out.w, .t = L->out.c, .pre = a->cls + a->reg,
                             .dt = r->m->opts.compute_dtype};
    size_t es = md_dtype_size(x->dt);
    int slot = 0;
    if (a->cls) x->p[x->np++] = (struct part){1, 0, L->param[slot++], s};
    if (a->reg)
        x->p[x->np++] =
            (struct part){a->reg, a->cls, L->param[slot++], s + (size_t)r->n * (size_t)a->cls * L->out.w * es};
}

static md_status prefix_tokens_forward(const struct md_layer_run *r, int i)
{
    struct prefix_run x;
    prefix_run_init(r, i, &x);
    struct md_model *m = x.m;
    void *y = md_layer_act(r, i);
    struct md_ew_args z;
    memset(&z, 0, sizeof z);
    z.op = MD_EW_FILL;
    z.n = (size_t)r->n * (size_t)x.pre * (size_t)x.d;
    z.dtype = x.dt;
    z.y = x.p[0].buf;
    MD_TRY(md_k_ew(m->dev, &z));
    for (int k = 0; k < x.np; k++) {
        const struct part *p = &x.p[k];
        struct md_bias_args b = {r->n, p->rows * x.d, 1, MD_NCHW, x.dt, p->buf, md_layer_param32(m, p->param),
                                 NULL, NULL, 0};
        MD_TRY(md_k_bias_add(m->dev, &b));
        struct md_chslice_args s = {r->n, x.d, p->rows, p->rows, 0, x.t, p->at, MD_NCHW, x.dt, p->buf, y, 0.0f};
        MD_TRY(md_k_chslice(m->dev, &s));
    }
    struct md_chslice_args s = {r->n, x.d, x.t - x.pre, x.t - x.pre, 0, x.t, x.pre, MD_NCHW, x.dt,
                                md_layer_act(r, m->layers[i].in[0]), y, 0.0f};
    return md_k_chslice(m->dev, &s);
}

static md_status prefix_tokens_backward(const struct md_layer_run *r, int i)
{
    struct prefix_run x;
    prefix_run_init(r, i, &x);
    struct md_model *m = x.m;
    void *dy = md_layer_grad(r, i);
    for (int k = 0; k < x.np; k++) {
        const struct part *p = &x.p[k];
        struct md_chslice_args s = {r->n, x.d, p->rows, x.t, p->at, p->rows, 0, MD_NCHW, x.dt, dy, p->buf, 0.0f};
        MD_TRY(md_k_chslice(m->dev, &s));
        struct md_bias_args b = {r->n, p->rows * x.d, 1, MD_NCHW, x.dt, NULL, NULL, p->buf,
                                 md_layer_grad32(m, p->param), 0};
        MD_TRY(md_k_bias_grad(m->dev, &b));
    }
    if (m->layers[i].in[0] < m->ninputs) return MD_OK;
    float beta;
    void *dx = md_layer_dx(r, i, 0, &beta);
    struct md_chslice_args s = {r->n, x.d, x.t - x.pre, x.t, x.pre, x.t - x.pre, 0, MD_NCHW, x.dt, dy, dx, beta};
    return md_k_chslice(m->dev, &s);
}

static void prefix_tokens_describe(const struct md_layer *L, char *buf, size_t n)
{
    const struct prefix_tokens_cfg *a = L->args;
    snprintf(buf, n, "prefix_tokens %d+%d", a->cls, a->reg);
}

static const char *const prefix_tokens_names[] = {"prefix_tokens", NULL};

const struct md_layer_ops md_prefix_tokens_layer = {
    .names = prefix_tokens_names,
    .args_size = sizeof(struct prefix_tokens_cfg),
    .min_inputs = 1, .max_inputs = 1,
    .tokens = 1,
    .parse = prefix_tokens_parse,
    .shape = prefix_tokens_shape,
    .params = prefix_tokens_params,
    .mask_per_sample = prefix_tokens_mask_per_sample,
    .init = prefix_tokens_init,
    .forward = prefix_tokens_forward,
    .backward = prefix_tokens_backward,
    .describe = prefix_tokens_describe,
};
