/* reshape.c - a per-sample reshape that keeps the memory order (a view in
 * PyTorch): {"type": "reshape", "shape": [T, F]} gives the token sequence
 * (T, 1, F); [C, H, W] any shape of as many elements. An image (1, 28, 28)
 * becomes 28 tokens of 28 features (its rows). NCHW layout only. */
#include "nn/layer.h"

#include <math.h>

struct reshape_cfg {
    struct md_shape to;
};

static md_status reshape_parse(const struct md_layer_parse *p, const cJSON *o, struct md_layer *L)
{
    struct reshape_cfg *a = L->args;
    static const char *const k[] = {"shape", NULL};
    (void)p;
    MD_TRY(md_layer_check_keys(o, L->path, k));
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(o, "shape");
    int n = cJSON_IsArray(sh) ? cJSON_GetArraySize(sh) : 0;
    int v[3] = {1, 1, 1}, ok = n == 2 || n == 3;
    for (int j = 0; ok && j < n; j++) {
        const cJSON *e = cJSON_GetArrayItem(sh, j);
        ok = cJSON_IsNumber(e) && e->valuedouble >= 1 && e->valuedouble <= 1 << 30 &&
             e->valuedouble == floor(e->valuedouble);
        if (ok) v[j] = (int)e->valuedouble;
    }
    if (!ok)
        return md_errf(MD_ERR_CONFIG, "%s.shape: must be [tokens, features] or [channels, height, width] of "
                       "positive integers", L->path);
    a->to = n == 2 ? (struct md_shape){v[0], 1, v[1]} : (struct md_shape){v[0], v[1], v[2]};
    return MD_OK;
}

static md_status reshape_shape(const struct md_model *m, struct md_layer *L)
{
    const struct reshape_cfg *a = L->args;
    struct md_shape x = m->layers[L->in[0]].out;
    if ((double)md_shape_numel(x) != (double)a->to.c * a->to.h * a->to.w)
        return md_errf(MD_ERR_CONFIG, "%s.shape: (%d, %d, %d) has not the input's %zu elements (%d, %d, %d)", L->path,
                       a->to.c, a->to.h, a->to.w, md_shape_numel(x), x.c, x.h, x.w);
    if (m->opts.layout != MD_NCHW && x.h * x.w > 1)
        return md_errf(MD_ERR_CONFIG, "%s: reshape needs the default NCHW layout (drop --channels-last)", L->path);
    L->out = a->to;
    return MD_OK;
}

static md_status reshape_forward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    return md_layer_axpby(m, (size_t)r->n * md_shape_numel(L->out), 1.0f, NULL, md_layer_act(r, L->in[0]), 0.0f,
                          NULL, md_layer_act(r, i));
}

static md_status reshape_backward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    if (L->in[0] < m->ninputs) return MD_OK;
    void *dy = md_layer_grad(r, i);
    float beta;
    void *dx = md_layer_dx(r, i, 0, &beta);
    if (dx == dy) return MD_OK;
    return md_layer_axpby(m, (size_t)r->n * md_shape_numel(L->out), 1.0f, NULL, dy, beta, dx, dx);
}

static int reshape_passes_dy(const struct md_layer *L) { (void)L; return 1; }

static const char *const reshape_names[] = {"reshape", NULL};

const struct md_layer_ops md_reshape_layer = {
    .names = reshape_names,
    .args_size = sizeof(struct reshape_cfg),
    .min_inputs = 1, .max_inputs = 1,
    .tokens = 1,
    .parse = reshape_parse,
    .shape = reshape_shape,
    .forward = reshape_forward,
    .backward = reshape_backward,
    .passes_dy = reshape_passes_dy,
};
