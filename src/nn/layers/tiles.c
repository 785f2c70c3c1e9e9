/* tiles.c - one or more images cut into a grid of tiles, each resized to
 * size x size and stacked into the batch (docs/tiles.md):
 *   {"type": "tiles", "inputs": ["left", "right"], "grid": [r, c], "size": S}
 * Inputs (C, H, W) of one shape; output (C, S, S) with fold = the inputs'
 * fold * inputs * r * c, items ordered sample-major, then input, then tile
 * row-major. Tile (i, j) spans rows [floor(i*H/r), floor((i+1)*H/r)) and
 * columns [floor(j*W/c), floor((j+1)*W/c)), resized as
 * F.interpolate(mode="bilinear", align_corners=False). No parameters. */
#include "nn/layer.h"

#include "core/json.h"

struct tiles_cfg {
    int rows, cols, size;
};

static md_status tiles_parse(const struct md_layer_parse *p, const cJSON *o, struct md_layer *L)
{
    struct tiles_cfg *a = L->args;
    static const char *const k[] = {"grid", "size", NULL};
    (void)p;
    MD_TRY(md_layer_check_keys(o, L->path, k));
    if (!cJSON_GetObjectItemCaseSensitive(o, "grid"))
        return md_errf(MD_ERR_CONFIG, "%s.grid: missing (rows and columns of tiles: [r, c] or one number)", L->path);
    MD_TRY(md_layer_get_pair(o, "grid", L->path, 1, &a->rows, &a->cols, 1, 1));
    return md_json_int(o, "size", L->path, 1, 1, 4096, &a->size);
}

static md_status tiles_shape(const struct md_model *m, struct md_layer *L)
{
    const struct tiles_cfg *a = L->args;
    MD_TRY(md_layer_check_inputs(m, L, 1, " (tiles needs images of one shape)"));
    struct md_shape x = m->layers[L->in[0]].out;
    if (x.h < a->rows || x.w < a->cols)
        return md_errf(MD_ERR_CONFIG, "%s.grid: %d x %d tiles of a %d x %d image would leave tiles empty", L->path,
                       a->rows, a->cols, x.h, x.w);
    long long fold = (long long)L->fold * L->nin * a->rows * a->cols;
    if (fold > 65536)
        return md_errf(MD_ERR_CONFIG, "%s.grid: %lld items per sample (inputs x rows x columns), more than 65536",
                       L->path, fold);
    L->fold = (int)fold;
    L->out = (struct md_shape){x.c, a->size, a->size};
    L->flops = 8.0 * (double)md_shape_numel(L->out); /* 4 taps, a multiply and an add each */
    return MD_OK;
}

static void tiles_args(const struct md_layer_run *r, int i, struct md_tiles_args *t)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    const struct tiles_cfg *a = L->args;
    struct md_shape x = m->layers[L->in[0]].out;
    int per = L->nin * a->rows * a->cols; /* items of y per input item */
    *t = (struct md_tiles_args){r->n / per, x.c, x.h, x.w, a->rows, a->cols, a->size, per,
                                m->opts.compute_dtype, NULL, NULL, NULL, NULL, 0.0f};
}

static size_t tiles_stride(const struct md_layer *L, const struct md_model *m)
{
    const struct tiles_cfg *a = L->args;
    return (size_t)a->rows * (size_t)a->cols * md_shape_numel(L->out) * md_dtype_size(m->opts.compute_dtype);
}

static md_status tiles_forward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    struct md_tiles_args t;
    tiles_args(r, i, &t);
    for (int k = 0; k < L->nin; k++) {
        t.x = md_layer_act(r, L->in[k]);
        t.y = (char *)md_layer_act(r, i) + (size_t)k * tiles_stride(L, m);
        MD_TRY(md_k_tiles_fwd(m->dev, &t));
    }
    return MD_OK;
}

static md_status tiles_backward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    struct md_tiles_args t;
    tiles_args(r, i, &t);
    for (int k = 0; k < L->nin; k++) {
        if (L->in[k] < m->ninputs) continue; /* model inputs take no gradient */
        t.dy = (const char *)md_layer_grad(r, i) + (size_t)k * tiles_stride(L, m);
        t.dx = md_layer_dx(r, i, k, &t.beta);
        MD_TRY(md_k_tiles_bwd(m->dev, &t));
    }
    return MD_OK;
}

static void tiles_describe_json(const struct md_layer *L, cJSON *x)
{
    const struct tiles_cfg *a = L->args;
    int g[2] = {a->rows, a->cols};
    cJSON_AddItemToObject(x, "grid", cJSON_CreateIntArray(g, 2));
    cJSON_AddNumberToObject(x, "size", a->size);
}

static const char *const tiles_names[] = {"tiles", NULL};

const struct md_layer_ops md_tiles_layer = {
    .names = tiles_names,
    .args_size = sizeof(struct tiles_cfg),
    .min_inputs = 1, .max_inputs = 0,
    .tokens = 1, /* NCHW whatever layout was asked: the kernel crops NCHW planes */
    .parse = tiles_parse,
    .shape = tiles_shape,
    .forward = tiles_forward,
    .backward = tiles_backward,
    .describe_json = tiles_describe_json,
};
