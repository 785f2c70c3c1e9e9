/* pos_embedding.c - a learned positional embedding added to a token
 * sequence (T, 1, D):  {"type": "pos_embedding"}
 * y = x + weight, weight (T, D) as torch.nn.Embedding(T, D).weight looked up
 * at positions 0..T-1, initialised N(0, 0.02^2) (as ViT/BERT), not decayed. */
#include "nn/layer.h"

#include "core/rng.h"

static md_status pos_embedding_parse(const struct md_layer_parse *p, const cJSON *o, struct md_layer *L)
{
    static const char *const k[] = {NULL};
    (void)p;
    return md_layer_check_keys(o, L->path, k);
}

static md_status pos_embedding_shape(const struct md_model *m, struct md_layer *L)
{
    struct md_shape x = m->layers[L->in[0]].out;
    MD_TRY(md_layer_check_tokens(m, L, x));
    L->out = x;
    L->nparams = (long long)md_shape_numel(x);
    L->flops = (double)md_shape_numel(x);
    return MD_OK;
}

static int pos_embedding_params(const struct md_model *m, const struct md_layer *L, struct md_param_decl *out)
{
    (void)m;
    out[0] = (struct md_param_decl){"weight", 2, {L->out.c, L->out.w}, 0, 0, 0.0f};
    return 1;
}

static void pos_embedding_init(const struct md_model *m, const struct md_layer *L, float *p)
{
    const struct md_param_info *ti = &m->tensors[L->param[0]];
    md_rng r;
    md_rng_init(&r, md_rng_hash(m->opts.seed, (uint64_t)L->param[0]));
    for (size_t e = 0; e < ti->numel; e++) p[ti->offset + e] = (float)(0.02 * md_rng_normal(&r));
}

static md_status pos_embedding_forward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    int ne = (int)md_shape_numel(L->out);
    void *y = md_layer_act(r, i);
    MD_TRY(md_layer_axpby(m, (size_t)r->n * (size_t)ne, 1.0f, NULL, md_layer_act(r, L->in[0]), 0.0f, NULL, y));
    struct md_bias_args b = {r->n, ne, 1, MD_NCHW, m->opts.compute_dtype, y, md_layer_param32(m, L->param[0]),
                             NULL, NULL, 0};
    return md_k_bias_add(m->dev, &b);
}

static md_status pos_embedding_backward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    int ne = (int)md_shape_numel(L->out);
    void *dy = md_layer_grad(r, i);
    struct md_bias_args b = {r->n, ne, 1, MD_NCHW, m->opts.compute_dtype, NULL, NULL, dy,
                             md_layer_grad32(m, L->param[0]), 0};
    MD_TRY(md_k_bias_grad(m->dev, &b));
    if (L->in[0] < m->ninputs) return MD_OK;
    float beta;
    void *dx = md_layer_dx(r, i, 0, &beta);
    if (dx == dy) return MD_OK;
    return md_layer_axpby(m, (size_t)r->n * (size_t)ne, 1.0f, NULL, dy, beta, dx, dx);
}

static int pos_embedding_passes_dy(const struct md_layer *L) { (void)L; return 1; }

static const char *const pos_embedding_names[] = {"pos_embedding", NULL};

const struct md_layer_ops md_pos_embedding_layer = {
    .names = pos_embedding_names,
    .min_inputs = 1, .max_inputs = 1,
    .tokens = 1,
    .parse = pos_embedding_parse,
    .shape = pos_embedding_shape,
    .params = pos_embedding_params,
    .init = pos_embedding_init,
    .forward = pos_embedding_forward,
    .backward = pos_embedding_backward,
    .passes_dy = pos_embedding_passes_dy,
};
