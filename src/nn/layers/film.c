/* film.c - feature-wise linear modulation (docs/tiles.md):
 *   {"type": "film", "inputs": ["x", "cond"]}
 * x (D, 1, 1) or tokens (T, 1, D); cond (2D, 1, 1) = [gamma | beta]:
 * y = x * (1 + gamma) + beta, broadcast over the tokens. No parameters: the
 * conditioning network is ordinary layers (linear, relu, linear). */
#include "nn/layer.h"

struct film_dims { int t, d; };

static struct film_dims film_dims(struct md_shape x)
{
    return x.w == 1 && x.h == 1 ? (struct film_dims){1, x.c} : (struct film_dims){x.c, x.w};
}

static md_status film_parse(const struct md_layer_parse *p, const cJSON *o, struct md_layer *L)
{
    static const char *const k[] = {NULL};
    (void)p;
    return md_layer_check_keys(o, L->path, k);
}

static md_status film_shape(const struct md_model *m, struct md_layer *L)
{
    struct md_shape x = m->layers[L->in[0]].out, c = m->layers[L->in[1]].out;
    if (x.h != 1)
        return md_errf(MD_ERR_CONFIG, "%s.inputs[0]: film needs features (D, 1, 1) or tokens (T, 1, D), got (%d, %d, "
                       "%d)", L->path, x.c, x.h, x.w);
    struct film_dims fd = film_dims(x);
    if (c.h != 1 || c.w != 1 || (long long)c.c != 2LL * fd.d)
        return md_errf(MD_ERR_CONFIG, "%s.inputs[1]: the conditioning '%s' gives (%d, %d, %d); film of %d features "
                       "needs (%d, 1, 1): gamma then beta", L->path, m->layers[L->in[1]].name, c.c, c.h, c.w, fd.d,
                       2 * fd.d);
    L->out = x;
    L->flops = 2.0 * (double)md_shape_numel(x);
    return MD_OK;
}

static md_status film_forward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    struct film_dims fd = film_dims(L->out);
    struct md_film_args a = {r->n, fd.t, fd.d, m->opts.compute_dtype, md_layer_act(r, L->in[0]),
                             md_layer_act(r, L->in[1]), md_layer_act(r, i), NULL, NULL, NULL, 0.0f, 0.0f};
    return md_k_film_fwd(m->dev, &a);
}

static md_status film_backward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    struct film_dims fd = film_dims(L->out);
    struct md_film_args a = {r->n, fd.t, fd.d, m->opts.compute_dtype, md_layer_act(r, L->in[0]),
                             md_layer_act(r, L->in[1]), NULL, md_layer_grad(r, i), NULL, NULL, 0.0f, 0.0f};
    if (L->in[0] >= m->ninputs) a.dx = md_layer_dx(r, i, 0, &a.beta);
    if (L->in[1] >= m->ninputs) a.dcond = md_layer_dx(r, i, 1, &a.beta_cond);
    if (!a.dx && !a.dcond) return MD_OK;
    return md_k_film_bwd(m->dev, &a);
}

static int film_needs_x(const struct md_layer *L) { (void)L; return 1; }

static const char *const film_names[] = {"film", NULL};

const struct md_layer_ops md_film_layer = {
    .names = film_names,
    .min_inputs = 2, .max_inputs = 2,
    .parse = film_parse,
    .shape = film_shape,
    .forward = film_forward,
    .backward = film_backward,
    .needs_x = film_needs_x,
};
