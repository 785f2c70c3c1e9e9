/* layer.c - the registry of layer kinds and the helpers their files share
 * (config parsing, element-wise copies). The kinds themselves live one per
 * file in src/nn/layers/. */
#include "nn/layer.h"

#include <math.h>
#include <string.h>

#include "core/json.h"

/* The registry: one line per layer kind a config can name, in the order the
 * unknown-type message lists their names. X(kind) is the kind's
 * `md_<kind>_layer` ops table in src/nn/layers/<kind>.c. */
#define MD_LAYER_KINDS(X) \
    X(conv2d)             \
    X(batchnorm)          \
    X(activation)         \
    X(pool)               \
    X(gap)                \
    X(flatten)            \
    X(linear)             \
    X(dropout)            \
    X(add)                \
    X(concat)             \
    X(weighted_add)       \
    X(reshape)            \
    X(transpose)          \
    X(layernorm)          \
    X(attention)          \
    X(pos_embedding)      \
    X(instance_norm)      \
    X(instance_denorm)    \
    X(slice)              \
    X(patch_embed)        \
    X(prefix_tokens)      \
    X(layer_scale)        \
    X(token_pool)         \
    X(tiles)              \
    X(regroup)            \
    X(film)

#define MD_LAYER_DECLARE(k) extern const struct md_layer_ops md_##k##_layer;
MD_LAYER_KINDS(MD_LAYER_DECLARE)
#define MD_LAYER_ENTRY(k) &md_##k##_layer,
static const struct md_layer_ops *const registry[] = {MD_LAYER_KINDS(MD_LAYER_ENTRY)};

const struct md_layer_ops *const *md_layer_registry(int *n)
{
    *n = (int)(sizeof registry / sizeof registry[0]);
    return registry;
}

const struct md_layer_ops *md_layer_find(const char *type)
{
    for (size_t i = 0; i < sizeof registry / sizeof registry[0]; i++)
        for (const char *const *nm = registry[i]->names; nm && *nm; nm++)
            if (!strcmp(*nm, type)) return registry[i];
    return NULL;
}

/* ---- parse helpers ------------------------------------------------------------------ */

md_status md_layer_check_keys(const cJSON *o, const char *path, const char *const *keys)
{
    for (const cJSON *it = o->child; it; it = it->next) {
        int ok = !strcmp(it->string, "name") || !strcmp(it->string, "type");
        for (const char *const *a = keys; *a && !ok; a++) ok |= !strcmp(*a, it->string);
        if (!ok) return md_errf(MD_ERR_CONFIG, "%s: unknown key '%s'", path, it->string);
    }
    return MD_OK;
}

md_status md_layer_get_pair(const cJSON *o, const char *key, const char *path, int min, int *a, int *b,
                            int dflt_a, int dflt_b)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    *a = dflt_a;
    *b = dflt_b;
    if (!it) return MD_OK;
    if (cJSON_IsNumber(it) && it->valuedouble == floor(it->valuedouble) && it->valuedouble >= min &&
        it->valuedouble <= 4096) {
        *a = *b = (int)it->valuedouble;
        return MD_OK;
    }
    if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2) {
        const cJSON *x = cJSON_GetArrayItem(it, 0), *y = cJSON_GetArrayItem(it, 1);
        if (cJSON_IsNumber(x) && cJSON_IsNumber(y) && x->valuedouble == floor(x->valuedouble) &&
            y->valuedouble == floor(y->valuedouble) && x->valuedouble >= min && y->valuedouble >= min &&
            x->valuedouble <= 4096 && y->valuedouble <= 4096) {
            *a = (int)x->valuedouble;
            *b = (int)y->valuedouble;
            return MD_OK;
        }
    }
    return md_errf(MD_ERR_CONFIG, "%s.%s: must be an integer >= %d or a pair [h, w] of them", path, key, min);
}

md_status md_layer_get_act(const cJSON *o, const char *path, int *act)
{
    const char *s = NULL;
    MD_TRY(md_json_str(o, "act", path, 0, &s));
    if (!s || strcmp(s, "none") == 0) { *act = MD_ACT_NONE; return MD_OK; }
    if (strcmp(s, "relu") == 0) { *act = MD_ACT_RELU; return MD_OK; }
    return md_errf(MD_ERR_CONFIG, "%s.act: '%s' is not supported here (relu or none)", path, s);
}

md_status md_layer_get_dropout(const struct md_layer_parse *p, const cJSON *o, const char *key, const char *path,
                               double dflt, float *prob)
{
    double v = dflt;
    MD_TRY(md_json_num(o, key, path, 0, 0.0, 0.999, &v));
    if (p->opts->dropout >= 0) v = p->opts->dropout;
    *prob = (float)v;
    return MD_OK;
}

md_status md_layer_check_inputs(const struct md_model *m, const struct md_layer *L, int same_c, const char *hint)
{
    const struct md_layer *X = &m->layers[L->in[0]];
    for (int i = 0; i < L->nin; i++) {
        const struct md_layer *Y = &m->layers[L->in[i]];
        if (Y->out.h != X->out.h || Y->out.w != X->out.w || (same_c && Y->out.c != X->out.c))
            return md_errf(MD_ERR_CONFIG, "%s.inputs[%d]: shape (%d, %d, %d) of '%s' does not match (%d, %d, %d) "
                           "of '%s'%s", L->path, i, Y->out.c, Y->out.h, Y->out.w, Y->name, X->out.c, X->out.h,
                           X->out.w, X->name, hint);
    }
    return MD_OK;
}

/* ---- execution helpers ---------------------------------------------------------------- */

md_status md_layer_gemm(struct md_model *m, int ta, int tb, int mm, int nn, int kk, const void *a, int lda,
                        const void *b, int ldb, void *c, int ldc, float beta)
{
    struct md_gemm_args g;
    memset(&g, 0, sizeof g);
    g.trans_a = ta;
    g.trans_b = tb;
    g.m = mm; g.n = nn; g.k = kk;
    g.alpha = 1.0f;
    g.beta = beta;
    g.a = a; g.lda = lda;
    g.b = b; g.ldb = ldb;
    g.c = c; g.ldc = ldc;
    g.batch = 1;
    g.dtype = m->opts.compute_dtype;
    return md_k_gemm(m->dev, &g);
}

md_status md_layer_axpby(struct md_model *m, size_t n, float alpha, const float *s, const void *a, float beta,
                         const void *b, void *y)
{
    struct md_ew_args e;
    memset(&e, 0, sizeof e);
    e.n = n;
    e.dtype = m->opts.compute_dtype;
    if (beta == 0.0f && !s && alpha == 1.0f) {
        e.op = MD_EW_COPY;
        e.a = a;
        e.y = y;
        return md_k_ew(m->dev, &e);
    }
    e.op = MD_EW_AXPBY;
    e.alpha = alpha;
    e.beta = beta;
    e.scale_dev = s;
    e.a = a;
    e.b = beta == 0.0f ? a : b;
    e.y = y;
    return md_k_ew(m->dev, &e);
}

md_status md_layer_check_tokens(const struct md_model *m, const struct md_layer *L, struct md_shape x)
{
    if (x.h != 1)
        return md_errf(MD_ERR_CONFIG, "%s.inputs: %s needs a token sequence (T, 1, F), got (%d, %d, %d) (a "
                       "reshape layer makes one)", L->path, L->type, x.c, x.h, x.w);
    if (m->opts.layout != MD_NCHW)
        return md_errf(MD_ERR_CONFIG, "%s: token sequences need the default NCHW layout (drop --channels-last)",
                       L->path);
    return MD_OK;
}
