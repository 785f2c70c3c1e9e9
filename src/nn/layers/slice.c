/* slice.c - a contiguous run of tokens (channels) of its input, per sample:
 *   {"type": "slice", "start": 0, "count": 7}
 * (torch's x[:, start:start+count] on (B, T, F); the iTransformer's
 * `[:, :, :N]` after its projector, which drops the time-feature tokens).
 * Forward and backward are the channel-slice kernel; backward zeroes the
 * input gradient outside the slice first unless it already holds another
 * consumer's contribution. */
#include "nn/layer.h"

#include "core/json.h"

struct slice_cfg {
    int start, count;
};

static md_status slice_parse(const struct md_layer_parse *p, const cJSON *o, struct md_layer *L)
{
    struct slice_cfg *a = L->args;
    static const char *const k[] = {"start", "count", NULL};
    (void)p;
    MD_TRY(md_layer_check_keys(o, L->path, k));
    MD_TRY(md_json_int(o, "start", L->path, 0, 0, 1 << 30, &a->start));
    return md_json_int(o, "count", L->path, 1, 1, 1 << 30, &a->count);
}

static md_status slice_shape(const struct md_model *m, struct md_layer *L)
{
    const struct slice_cfg *a = L->args;
    struct md_shape x = m->layers[L->in[0]].out;
    if ((long long)a->start + a->count > x.c)
        return md_errf(MD_ERR_CONFIG, "%s: tokens [%d, %d) are not all in the input's %d", L->path, a->start,
                       a->start + a->count, x.c);
    L->out = (struct md_shape){a->count, x.h, x.w};
    L->flops = 0;
    return MD_OK;
}

static md_status slice_forward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    const struct slice_cfg *a = L->args;
    struct md_shape x = m->layers[L->in[0]].out;
    struct md_chslice_args s = {r->n, x.h * x.w, a->count, x.c, a->start, a->count, 0, m->opts.layout,
                                m->opts.compute_dtype, md_layer_act(r, L->in[0]), md_layer_act(r, i), 0.0f};
    return md_k_chslice(m->dev, &s);
}

static md_status slice_backward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    const struct slice_cfg *a = L->args;
    if (L->in[0] < m->ninputs) return MD_OK;
    struct md_shape x = m->layers[L->in[0]].out;
    float beta;
    void *dx = md_layer_dx(r, i, 0, &beta);
    if (beta == 0.0f && a->count < x.c)
        MD_TRY(md_dev_memset0(m->dev, dx, (size_t)r->n * md_shape_numel(x) * md_dtype_size(m->opts.compute_dtype)));
    struct md_chslice_args s = {r->n, x.h * x.w, a->count, a->count, 0, x.c, a->start, m->opts.layout,
                                m->opts.compute_dtype, md_layer_grad(r, i), dx, beta};
    return md_k_chslice(m->dev, &s);
}

static const char *const slice_names[] = {"slice", NULL};

const struct md_layer_ops md_slice_layer = {
    .names = slice_names,
    .args_size = sizeof(struct slice_cfg),
    .min_inputs = 1, .max_inputs = 1,
    .parse = slice_parse,
    .shape = slice_shape,
    .forward = slice_forward,
    .backward = slice_backward,
};
