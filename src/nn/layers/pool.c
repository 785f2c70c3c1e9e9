/* pool.c - max and average pooling over (H, W), as torch.nn.MaxPool2d /
 * AvgPool2d:
 *   {"type": "maxpool" | "avgpool", "kernel": R | [R, S], "stride": kernel,
 *    "padding": 0, "count_include_pad": true (avgpool only)} */
#include "nn/layer.h"

#include <string.h>

#include "core/json.h"

struct pool_cfg {
    int max; /* maxpool (else avgpool) */
    int r, s, stride_h, stride_w, pad_h, pad_w;
    int count_include_pad;
};

static md_status pool_parse(const struct md_layer_parse *p, const cJSON *o, struct md_layer *L)
{
    struct pool_cfg *a = L->args;
    const char *path = L->path;
    a->max = !strcmp(p->type, "maxpool");
    static const char *const k[] = {"kernel", "stride", "padding", "count_include_pad", NULL};
    MD_TRY(md_layer_check_keys(o, path, k));
    MD_TRY(md_layer_get_pair(o, "kernel", path, 1, &a->r, &a->s, 0, 0));
    if (!a->r) return md_errf(MD_ERR_CONFIG, "%s.kernel: missing", path);
    MD_TRY(md_layer_get_pair(o, "stride", path, 1, &a->stride_h, &a->stride_w, a->r, a->s));
    MD_TRY(md_layer_get_pair(o, "padding", path, 0, &a->pad_h, &a->pad_w, 0, 0));
    a->count_include_pad = 1;
    if (!a->max) MD_TRY(md_json_bool(o, "count_include_pad", path, 0, &a->count_include_pad));
    else if (cJSON_GetObjectItemCaseSensitive(o, "count_include_pad"))
        return md_errf(MD_ERR_CONFIG, "%s: unknown key 'count_include_pad' (avgpool only)", path);
    if (2 * a->pad_h > a->r || 2 * a->pad_w > a->s)
        return md_errf(MD_ERR_CONFIG, "%s.padding: must be at most half the kernel", path);
    return MD_OK;
}

static md_status pool_shape(const struct md_model *m, struct md_layer *L)
{
    const struct pool_cfg *a = L->args;
    struct md_shape x = m->layers[L->in[0]].out;
    if (a->r > x.h + 2 * a->pad_h || a->s > x.w + 2 * a->pad_w)
        return md_errf(MD_ERR_CONFIG, "%s.kernel: %dx%d is larger than the padded input %dx%d", L->path, a->r,
                       a->s, x.h + 2 * a->pad_h, x.w + 2 * a->pad_w);
    L->out.c = x.c;
    L->out.h = md_conv_out(x.h, a->r, a->stride_h, a->pad_h, 1);
    L->out.w = md_conv_out(x.w, a->s, a->stride_w, a->pad_w, 1);
    L->flops = (double)x.c * L->out.h * L->out.w * a->r * a->s;
    return MD_OK;
}

static void pool_args(const struct md_layer_run *r, int i, struct md_pool2d_args *p)
{
    const struct md_layer *L = &r->m->layers[i];
    const struct pool_cfg *a = L->args;
    struct md_shape x = r->m->layers[L->in[0]].out;
    memset(p, 0, sizeof *p);
    p->kind = a->max ? MD_POOL_MAX : MD_POOL_AVG;
    p->n = r->n; p->c = x.c; p->h = x.h; p->w = x.w; p->p = L->out.h; p->q = L->out.w;
    p->kh = a->r; p->kw = a->s; p->stride_h = a->stride_h; p->stride_w = a->stride_w;
    p->pad_h = a->pad_h; p->pad_w = a->pad_w;
    p->count_include_pad = a->count_include_pad;
    p->layout = r->m->opts.layout;
    p->dtype = r->m->opts.compute_dtype;
    p->x = md_layer_act(r, L->in[0]);
}

static md_status pool_forward(const struct md_layer_run *r, int i)
{
    struct md_pool2d_args p;
    pool_args(r, i, &p);
    p.y_out = md_layer_act(r, i);
    return md_k_pool2d_fwd(r->m->dev, &p);
}

static md_status pool_backward(const struct md_layer_run *r, int i)
{
    struct md_pool2d_args p;
    pool_args(r, i, &p);
    p.y = md_layer_act(r, i);
    p.dy = md_layer_grad(r, i);
    p.dx = md_layer_dx(r, i, 0, &p.beta);
    return md_k_pool2d_bwd(r->m->dev, &p);
}

/* max pooling finds its arg-max again from x and y; average needs neither */
static int pool_needs_xy(const struct md_layer *L) { return ((const struct pool_cfg *)L->args)->max; }

static int pool_max_2x2(const struct md_layer *L)
{
    const struct pool_cfg *a = L->args;
    return a->max && a->r == 2 && a->s == 2 && a->stride_h == 2 && a->stride_w == 2 && !a->pad_h && !a->pad_w;
}

static const char *const pool_names[] = {"maxpool", "avgpool", NULL};

const struct md_layer_ops md_pool_layer = {
    .names = pool_names,
    .args_size = sizeof(struct pool_cfg),
    .min_inputs = 1, .max_inputs = 1,
    .parse = pool_parse,
    .shape = pool_shape,
    .forward = pool_forward,
    .backward = pool_backward,
    .needs_x = pool_needs_xy,
    .needs_y = pool_needs_xy,
    .max_pool_2x2 = pool_max_2x2,
};
