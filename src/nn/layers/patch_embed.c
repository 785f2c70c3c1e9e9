/* patch_embed.c - a ViT's patch embedding, as timm's PatchEmbed:
 *   {"type": "patch_embed", "patch": 14, "out": D}
 * image (C, H, W) -> tokens (H/p * W/p, 1, D): a convolution with kernel
 * and stride p (H and W multiples of p), its (D, H/p, W/p) output
 * flattened row-major over the patch grid and transposed, so token
 * i * (W/p) + j is patch (i, j) (timm's proj(x).flatten(2).transpose(1, 2)).
 * Parameters proj.weight (D, C, p, p) (decayed) and proj.bias (D), named so
 * that a layer called "patch_embed" has timm's names; PyTorch's Conv2d
 * initialisation bound (U(+-1/sqrt(C p p)) for both).
 * Forward and backward are the convolution kernels (stride = kernel) and
 * the NCHW <-> NHWC permutation; the (D, H/p, W/p) map lives in the
 * layer's saved block (forward: the convolution's output; backward: the
 * tokens' gradient permuted back). */
#include "nn/layer.h"

#include <math.h>
#include <string.h>

#include "core/json.h"
#include "core/rng.h"

struct patch_embed_cfg {
    int patch, out;
};

static md_status patch_embed_parse(const struct md_layer_parse *p, const cJSON *o, struct md_layer *L)
{
    struct patch_embed_cfg *a = L->args;
    static const char *const k[] = {"patch", "out", NULL};
    (void)p;
    MD_TRY(md_layer_check_keys(o, L->path, k));
    MD_TRY(md_json_int(o, "patch", L->path, 1, 1, 4096, &a->patch));
    return md_json_int(o, "out", L->path, 1, 1, 1 << 20, &a->out);
}

static md_status patch_embed_shape(const struct md_model *m, struct md_layer *L)
{
    const struct patch_embed_cfg *a = L->args;
    struct md_shape x = m->layers[L->in[0]].out;
    if (x.h % a->patch || x.w % a->patch)
        return md_errf(MD_ERR_CONFIG, "%s.patch: the input's %d x %d is not a whole number of %d x %d patches",
                       L->path, x.h, x.w, a->patch, a->patch);
    if (m->opts.layout != MD_NCHW)
        return md_errf(MD_ERR_CONFIG, "%s: token sequences need the default NCHW layout (drop --channels-last)",
                       L->path);
    long long np = (long long)(x.h / a->patch) * (x.w / a->patch);
    L->out = (struct md_shape){(int)np, 1, a->out};
    L->nparams = (long long)a->out * x.c * a->patch * a->patch + a->out;
    L->flops = 2.0 * (double)np * a->out * x.c * a->patch * a->patch + (double)np * a->out;
    return MD_OK;
}

static int patch_embed_params(const struct md_model *m, const struct md_layer *L, struct md_param_decl *out)
{
    const struct patch_embed_cfg *a = L->args;
    int c = m->layers[L->in[0]].out.c;
    out[0] = (struct md_param_decl){"proj.weight", 4, {a->out, c, a->patch, a->patch}, 1, 0, 0.0f};
    out[1] = (struct md_param_decl){"proj.bias", 1, {a->out}, 0, 0, 0.0f};
    return 2;
}

static void patch_embed_init(const struct md_model *m, const struct md_layer *L, float *p)
{
    const struct patch_embed_cfg *a = L->args;
    double bound = 1.0 / sqrt((double)m->layers[L->in[0]].out.c * a->patch * a->patch);
    for (int k = 0; k < 2; k++) {
        const struct md_param_info *t = &m->tensors[L->param[k]];
        md_rng r;
        md_rng_init(&r, md_rng_hash(m->opts.seed, (uint64_t)L->param[k]));
        for (size_t e = 0; e < t->numel; e++)
            p[t->offset + e] = (float)(bound * (2.0 * (double)md_rng_next_uniform(&r) - 1.0));
    }
}

/* the (D, H/p, W/p) map, fp32-sized */
static size_t patch_embed_mask_per_sample(const struct md_layer *L)
{
    return md_layer_align16(md_shape_numel(L->out) * 4);
}

static void pe_conv_args(const struct md_layer_run *r, int i, struct md_conv2d_args *c)
{
    const struct md_layer *L = &r->m->layers[i];
    const struct patch_embed_cfg *a = L->args;
    struct md_shape x = r->m->layers[L->in[0]].out;
    memset(c, 0, sizeof *c);
    c->n = r->n; c->c = x.c; c->h = x.h; c->w = x.w;
    c->k = a->out; c->r = c->s = a->patch;
    c->p = x.h / a->patch; c->q = x.w / a->patch;
    c->stride_h = c->stride_w = a->patch;
    c->dil_h = c->dil_w = 1;
    c->groups = 1;
    c->layout = MD_NCHW;
    c->dtype = r->m->opts.compute_dtype;
    c->algo_hint = i + 1;
}

static md_status patch_embed_forward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    void *map = md_layer_saved(r, i, 0);
    struct md_conv2d_args c;
    pe_conv_args(r, i, &c);
    c.x = md_layer_act(r, L->in[0]); c.wt = md_layer_weight(m, L->param[0]); c.y = map;
    MD_TRY(md_k_conv2d_fwd(m->dev, &c));
    struct md_bias_args b = {r->n, c.k, c.p * c.q, MD_NCHW, m->opts.compute_dtype, map,
                             md_layer_param32(m, L->param[1]), NULL, NULL, 0};
    MD_TRY(md_k_bias_add(m->dev, &b));
    struct md_permute_args pm = {r->n, c.k, c.p, c.q, 1, m->opts.compute_dtype, map, md_layer_act(r, i)};
    return md_k_permute(m->dev, &pm);
}

static md_status patch_embed_backward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    void *dmap = md_layer_saved(r, i, 0);
    struct md_conv2d_args c;
    pe_conv_args(r, i, &c);
    struct md_permute_args pm = {r->n, c.k, c.p, c.q, 0, m->opts.compute_dtype, md_layer_grad(r, i), dmap};
    MD_TRY(md_k_permute(m->dev, &pm));
    struct md_bias_args b = {r->n, c.k, c.p * c.q, MD_NCHW, m->opts.compute_dtype, NULL, NULL, dmap,
                             md_layer_grad32(m, L->param[1]), 0};
    MD_TRY(md_k_bias_grad(m->dev, &b));
    c.x = md_layer_act(r, L->in[0]); c.dy = dmap; c.dwt = md_layer_wgrad(m, L->param[0]); c.beta = 0;
    c.data_grad_follows = L->in[0] >= m->ninputs; /* no gradient for the data of the model's input */
    MD_TRY(md_k_conv2d_bwd_filter(m->dev, &c));
    if (!c.data_grad_follows) return MD_OK;
    float beta;
    pe_conv_args(r, i, &c);
    c.dy = dmap; c.wt = md_layer_weight(m, L->param[0]); c.dx = md_layer_dx(r, i, 0, &beta); c.beta = beta;
    return md_k_conv2d_bwd_data(m->dev, &c);
}

static int patch_embed_needs_x(const struct md_layer *L) { (void)L; return 1; }

static void patch_embed_describe(const struct md_layer *L, char *buf, size_t n)
{
    const struct patch_embed_cfg *a = L->args;
    snprintf(buf, n, "patch_embed %dx%d", a->patch, a->patch);
}

static const char *const patch_embed_names[] = {"patch_embed", NULL};

const struct md_layer_ops md_patch_embed_layer = {
    .names = patch_embed_names,
    .args_size = sizeof(struct patch_embed_cfg),
    .min_inputs = 1, .max_inputs = 1,
    .tokens = 1,
    .parse = patch_embed_parse,
    .shape = patch_embed_shape,
    .params = patch_embed_params,
    .mask_per_sample = patch_embed_mask_per_sample,
    .init = patch_embed_init,
    .forward = patch_embed_forward,
    .backward = patch_embed_backward,
    .needs_x = patch_embed_needs_x,
    .describe = patch_embed_describe,
};
