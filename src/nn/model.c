/* model.c - model configs: loading, block expansion, strict checking, shape
 * inference, parameter and FLOP counts, the parameter table, the summary.
 * Nothing here touches a device (model_exec.c does).
 *
 * Config format (README "Models and kernels"):
 *   {"name": "...", "num_classes": 10, "zero_init_residual": false,
 *    "inputs": [{"name": "image", "shape": [1, 28, 28]}],
 *    "blocks": {"basic": {"params": {"out": null, "stride": 1, "down": false},
 *                         "layers": [ ...layers, "$out" = parameter, "if": "$down" ]}},
 *    "layers": [{"name": "conv1", "type": "conv2d", "out": 32, "kernel": 3,
 *                "inputs": ["image"], "repeat": 2, "rest": {"stride": 1}}, ...]}
 * Inside a block, "in" is the block's input and "prev" (the default) the
 * previous layer; a layer whose "if" is false is skipped and references to it
 * resolve to its first input. "$num_classes" works everywhere.
 */
#define _POSIX_C_SOURCE 200809L
#include "nn/model_impl.h"

#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/json.h"
#include "core/signals.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/platform.h"
#include "core/strmap.h"

#define MAX_DEPTH 8
/* Bounds on what a config may expand to (README "Model configs"): block
 * instances and repeats multiply, so a few lines can ask for 10^12 layers.
 * Work counts layers, skipped layers and block instances. */
#define MAX_LAYERS 100000
#define MAX_WORK (4 * MAX_LAYERS)
/* A layer's output per sample: activation offsets and sizes are int-sized. */
#define MAX_OUTPUT_ELEMS 2147483647LL
/* Hard bound on parameters (4 TiB of fp32) whatever the memory says; the
 * counts stay far from 64-bit overflow below it. */
#define MAX_PARAMS (1LL << 40)

void md_model_opts_default(struct md_model_opts *o)
{
    memset(o, 0, sizeof *o);
    o->layout = MD_NCHW;
    o->compute_dtype = MD_F32;
    o->compile = 1;
    o->seed = 42;
    o->dropout = -1.0;
}

/* ---- expansion: config layers (with blocks and repeat) -> flat specs ------- */

/* One expanded layer before type-specific parsing. */
struct spec {
    char *name;
    char *path;          /* "layers[3]" or "blocks.basic.layers[1] (in layer1.0)" */
    cJSON *obj;          /* resolved copy: "$param" replaced; owned */
    char **in;           /* global input names */
    int nin;
    int group;
};

/* Name -> layer name map (aliases: block instances, skipped layers). A name
 * put again stands for its newest value; `idx` finds it without a scan (a
 * scan per layer made expansion quadratic in the number of layers). */
struct names {
    char **key, **val;
    int n, cap;
    md_strmap idx; /* key -> newest index into key/val */
};

struct build {
    const char *src;     /* file name for messages */
    const cJSON *root;
    const cJSON *blocks;
    struct spec *specs;
    int nspecs, cap;
    struct names names;  /* global names: layer name, block instance -> output */
    int num_classes;
    int group;
    long long work;      /* expand_entry calls and repeats so far (MAX_WORK) */
    md_strmap layer_idx; /* layer name -> index in m->layers (names borrowed from there) */
};

static md_status names_put(struct names *nm, const char *k, const char *v)
{
    if (nm->n == nm->cap) {
        int cap = nm->cap ? nm->cap * 2 : 64;
        char **nk = md_realloc(nm->key, (size_t)cap * sizeof *nk);
        if (!nk) return MD_ERR_OOM;
        nm->key = nk;
        char **nv = md_realloc(nm->val, (size_t)cap * sizeof *nv);
        if (!nv) return MD_ERR_OOM;
        nm->val = nv;
        nm->cap = cap;
    }
    nm->key[nm->n] = md_strdup(k);
    nm->val[nm->n] = md_strdup(v);
    if (!nm->key[nm->n] || !nm->val[nm->n] || md_strmap_put(&nm->idx, nm->key[nm->n], nm->n) != MD_OK) {
        md_free(nm->key[nm->n]);
        md_free(nm->val[nm->n]);
        return MD_ERR_OOM;
    }
    nm->n++;
    return MD_OK;
}

static const char *names_get(const struct names *nm, const char *k)
{
    int i;
    return md_strmap_get(&nm->idx, k, &i) ? nm->val[i] : NULL;
}

static void names_free(struct names *nm)
{
    for (int i = 0; i < nm->n; i++) {
        md_free(nm->key[i]);
        md_free(nm->val[i]);
    }
    md_free(nm->key);
    md_free(nm->val);
    md_strmap_free(&nm->idx);
    memset(nm, 0, sizeof *nm);
}

static void spec_free(struct spec *s)
{
    md_free(s->name);
    md_free(s->path);
    cJSON_Delete(s->obj);
    for (int i = 0; i < s->nin; i++) md_free(s->in[i]);
    md_free(s->in);
}

/* Replaces every "$p" string in `obj` (recursively) by the value of p in
 * `scope` (an object of parameter values) or "$num_classes". */
static md_status substitute(struct build *b, cJSON *obj, const cJSON *scope, const char *path)
{
    for (cJSON *it = obj->child; it; it = it->next) {
        if (cJSON_IsString(it) && it->valuestring[0] == '$') {
            const char *p = it->valuestring + 1;
            const cJSON *v = scope ? cJSON_GetObjectItemCaseSensitive(scope, p) : NULL;
            cJSON *nv = NULL;
            if (v) nv = cJSON_Duplicate(v, 1);
            else if (strcmp(p, "num_classes") == 0) nv = cJSON_CreateNumber(b->num_classes);
            else
                return md_errf(MD_ERR_CONFIG, "%s: %s%s%s: unknown parameter '%s'", b->src, path,
                               it->string ? "." : "", it->string ? it->string : "", p);
            if (!nv) return MD_ERR_OOM;
            /* this item, not the first of its key: with a key given twice
             * that replaced the other one and met this one again, forever */
            if (nv->string && !(nv->type & cJSON_StringIsConst)) cJSON_free(nv->string); /* a copy's key */
            nv->type &= ~cJSON_StringIsConst;
            nv->string = it->string; /* the key moves over */
            nv->type |= it->type & cJSON_StringIsConst;
            it->string = NULL;
            cJSON_ReplaceItemViaPointer(obj, it, nv);
            it = nv;
        } else if (cJSON_IsObject(it) || cJSON_IsArray(it)) {
            MD_TRY(substitute(b, it, scope, path));
        }
    }
    return MD_OK;
}

static md_status add_spec(struct build *b, const char *name, const char *path, cJSON *obj,
                          char **in, int nin)
{
    if (b->nspecs == b->cap) {
        int cap = b->cap ? b->cap * 2 : 64;
        struct spec *ns = md_realloc(b->specs, (size_t)cap * sizeof *ns);
        if (!ns) return MD_ERR_OOM;
        b->specs = ns;
        b->cap = cap;
    }
    struct spec *s = &b->specs[b->nspecs];
    memset(s, 0, sizeof *s);
    s->obj = obj;
    s->in = in;
    s->nin = nin;
    s->group = b->group;
    s->name = md_strdup(name);
    s->path = md_strdup(path);
    b->nspecs++;
    if (!s->name || !s->path) return MD_ERR_OOM;
    return MD_OK;
}

static int is_reserved_key(const char *k)
{
    return !strcmp(k, "name") || !strcmp(k, "type") || !strcmp(k, "inputs") || !strcmp(k, "repeat") ||
           !strcmp(k, "rest") || !strcmp(k, "if");
}

/* Scope for name lookups inside a block instance. */
struct scope {
    const char *prefix;     /* "layer1.0." */
    const char *in_name;    /* global name of the block's input */
    struct names local;     /* inner name -> global name */
};

static md_status expand_entry(struct build *b, const cJSON *entry, const char *path,
                              struct scope *sc, const cJSON *params, const char **prev, int depth);

/* Resolves one input reference to a global layer name. */
static md_status resolve_ref(struct build *b, const char *ref, const char *path, struct scope *sc,
                             const char *prev, char **out)
{
    const char *v = NULL;
    if (strcmp(ref, "prev") == 0) {
        v = prev;
        if (!v) return md_errf(MD_ERR_CONFIG, "%s: %s.inputs: 'prev' has no previous layer", b->src, path);
    } else if (sc) {
        if (strcmp(ref, "in") == 0) v = sc->in_name;
        else v = names_get(&sc->local, ref);
        if (!v)
            return md_errf(MD_ERR_CONFIG, "%s: %s.inputs: unknown input '%s' (inside a block: 'in', 'prev' "
                           "or an earlier layer of the block; a later one would make a cycle)", b->src, path, ref);
    } else {
        v = names_get(&b->names, ref);
        if (!v)
            return md_errf(MD_ERR_CONFIG, "%s: %s.inputs: unknown input '%s' (not a model input or an earlier "
                           "layer; a later one would make a cycle)", b->src, path, ref);
    }
    *out = md_strdup(v);
    return *out ? MD_OK : MD_ERR_OOM;
}

/* Expands one layer object (already resolved) with its "repeat". */
static md_status expand_entry(struct build *b, const cJSON *entry, const char *path,
                              struct scope *sc, const cJSON *params, const char **prev, int depth)
{
    md_status st = MD_OK;
    cJSON *obj = NULL;
    char **in = NULL;
    int nin = 0;
    md_interrupt_hook("model");
    MD_TRY(md_interrupt_check("while loading the model (%s, at %s)", b->src, path));
    if (!cJSON_IsObject(entry)) return md_errf(MD_ERR_CONFIG, "%s: %s: must be an object", b->src, path);
    if (++b->work > MAX_WORK)
        return md_errf(MD_ERR_CONFIG, "%s: %s: the model expands to more than %d layers and block instances "
                       "(check repeat and nested blocks)", b->src, path, MAX_WORK);
    obj = cJSON_Duplicate(entry, 1);
    if (!obj) return MD_ERR_OOM;
    if ((st = substitute(b, obj, params, path)) != MD_OK) goto fail;

    const cJSON *jif = cJSON_GetObjectItemCaseSensitive(obj, "if");
    const cJSON *jname = cJSON_GetObjectItemCaseSensitive(obj, "name");
    const cJSON *jtype = cJSON_GetObjectItemCaseSensitive(obj, "type");
    if (!cJSON_IsString(jtype)) {
        st = md_errf(MD_ERR_CONFIG, "%s: %s.type: %s", b->src, path, jtype ? "must be a string" : "missing");
        goto fail;
    }
    if (jname && !cJSON_IsString(jname)) {
        st = md_errf(MD_ERR_CONFIG, "%s: %s.name: must be a string", b->src, path);
        goto fail;
    }
    char autoname[64];
    snprintf(autoname, sizeof autoname, "%s%d", jtype->valuestring, b->nspecs);
    const char *lname = jname ? jname->valuestring : autoname;
    if (!lname[0] || strchr(lname, '$')) {
        st = md_errf(MD_ERR_CONFIG, "%s: %s.name: must be a non-empty name", b->src, path);
        goto fail;
    }
    /* full names (block prefixes, ".N" of repeats) live in 512-byte buffers */
    if (strlen(sc ? sc->prefix : "") + strlen(lname) + 12 >= 512) {
        st = md_errf(MD_ERR_CONFIG, "%s: %s.name: the full name '%s%.40s...' is longer than 500 characters", b->src,
                     path, sc ? sc->prefix : "", lname);
        goto fail;
    }

    /* inputs */
    const cJSON *jin = cJSON_GetObjectItemCaseSensitive(obj, "inputs");
    if (jin && (!cJSON_IsArray(jin) || cJSON_GetArraySize(jin) < 1)) {
        st = md_errf(MD_ERR_CONFIG, "%s: %s.inputs: must be a non-empty array of layer names", b->src, path);
        goto fail;
    }
    nin = jin ? cJSON_GetArraySize(jin) : 1;
    in = md_calloc((size_t)nin, sizeof *in);
    if (!in) { st = MD_ERR_OOM; goto fail; }
    const cJSON *ref = jin ? jin->child : NULL; /* walked, not indexed: indexing a list is linear */
    for (int i = 0; i < nin; i++, ref = ref ? ref->next : NULL) {
        if (ref && !cJSON_IsString(ref)) {
            st = md_errf(MD_ERR_CONFIG, "%s: %s.inputs[%d]: must be a layer name", b->src, path, i);
            goto fail;
        }
        if ((st = resolve_ref(b, ref ? ref->valuestring : "prev", path, sc, *prev, &in[i])) != MD_OK) goto fail;
    }

    if (jif) {
        if (!cJSON_IsBool(jif) && !cJSON_IsNumber(jif)) {
            st = md_errf(MD_ERR_CONFIG, "%s: %s.if: must be a boolean (or a block parameter)", b->src, path);
            goto fail;
        }
        if (cJSON_IsFalse(jif) || (cJSON_IsNumber(jif) && jif->valuedouble == 0)) {
            /* skipped: the name stands for its first input */
            char full[512];
            snprintf(full, sizeof full, "%s%s", sc ? sc->prefix : "", lname);
            if (sc) st = names_put(&sc->local, lname, in[0]);
            if (st == MD_OK) st = names_put(&b->names, full, in[0]);
            /* and it passes its input on: a following layer's "prev" is that input */
            if (st == MD_OK) *prev = names_get(&b->names, full);
            goto fail; /* cleanup only */
        }
    }

    int repeat = 1;
    if ((st = md_json_int(obj, "repeat", path, 0, 1, 10000, &repeat)) != MD_OK) goto prefix_fail;
    const cJSON *rest = cJSON_GetObjectItemCaseSensitive(obj, "rest");
    if (rest && !cJSON_IsObject(rest)) {
        st = md_errf(MD_ERR_CONFIG, "%s: %s.rest: must be an object of overrides for repeats 2..N", b->src, path);
        goto fail;
    }
    const cJSON *block = b->blocks ? cJSON_GetObjectItemCaseSensitive(b->blocks, jtype->valuestring) : NULL;

    const char *cur_prev = *prev;
    for (int r = 0; r < repeat; r++) {
        char iname[512], ipath[600];
        if (r > 0 && ++b->work > MAX_WORK) {
            st = md_errf(MD_ERR_CONFIG, "%s: %s: the model expands to more than %d layers and block instances "
                         "(check repeat and nested blocks)", b->src, path, MAX_WORK);
            goto fail;
        }
        if (b->nspecs >= MAX_LAYERS) {
            st = md_errf(MD_ERR_CONFIG, "%s: %s: the model expands to more than %d layers (check repeat and nested "
                         "blocks)", b->src, path, MAX_LAYERS);
            goto fail;
        }
        if (!sc) b->group++; /* each top-level instance is a checkpoint segment */
        if (repeat > 1) snprintf(iname, sizeof iname, "%s%s.%d", sc ? sc->prefix : "", lname, r);
        else snprintf(iname, sizeof iname, "%s%s", sc ? sc->prefix : "", lname);
        if (repeat > 1) snprintf(ipath, sizeof ipath, "%s (repeat %d)", path, r);
        else snprintf(ipath, sizeof ipath, "%s", path);
        if (names_get(&b->names, iname)) {
            st = md_errf(MD_ERR_CONFIG, "%s: %s.name: duplicate layer name '%s'", b->src, path, iname);
            goto fail;
        }
        /* this repeat's object: the entry without repeat keys, with rest's overrides */
        cJSON *o = cJSON_Duplicate(obj, 1);
        if (!o) { st = MD_ERR_OOM; goto fail; }
        cJSON_DeleteItemFromObjectCaseSensitive(o, "repeat");
        cJSON_DeleteItemFromObjectCaseSensitive(o, "rest");
        cJSON_DeleteItemFromObjectCaseSensitive(o, "if");
        cJSON_DeleteItemFromObjectCaseSensitive(o, "inputs");
        if (r > 0 && rest) {
            for (const cJSON *ov = rest->child; ov; ov = ov->next) {
                cJSON *d = cJSON_Duplicate(ov, 1);
                if (!d) { cJSON_Delete(o); st = MD_ERR_OOM; goto fail; }
                if (cJSON_GetObjectItemCaseSensitive(o, ov->string))
                    cJSON_ReplaceItemInObjectCaseSensitive(o, ov->string, d);
                else
                    cJSON_AddItemToObject(o, ov->string, d);
            }
        }
        /* inputs of this repeat: the given ones first, then the previous repeat */
        char **rin = NULL;
        int rnin = r == 0 ? nin : 1;
        rin = md_calloc((size_t)rnin, sizeof *rin);
        if (!rin) { cJSON_Delete(o); st = MD_ERR_OOM; goto fail; }
        for (int i = 0; i < rnin; i++) {
            rin[i] = md_strdup(r == 0 ? in[i] : cur_prev);
            if (!rin[i]) st = MD_ERR_OOM;
        }
        if (st != MD_OK) {
            for (int i = 0; i < rnin; i++) md_free(rin[i]);
            md_free(rin);
            cJSON_Delete(o);
            goto fail;
        }

        if (block) {
            /* a block instance: check its arguments against the block's params */
            if (depth >= MAX_DEPTH) {
                st = md_errf(MD_ERR_CONFIG, "%s: %s.type: blocks nested deeper than %d (a block using itself?)",
                             b->src, path, MAX_DEPTH);
            }
            const cJSON *bparams = cJSON_GetObjectItemCaseSensitive(block, "params");
            const cJSON *blayers = cJSON_GetObjectItemCaseSensitive(block, "layers");
            cJSON *vals = st == MD_OK ? cJSON_CreateObject() : NULL;
            if (st == MD_OK && !vals) st = MD_ERR_OOM;
            for (const cJSON *a = o->child; st == MD_OK && a; a = a->next) {
                if (is_reserved_key(a->string)) continue;
                if (!bparams || !cJSON_GetObjectItemCaseSensitive(bparams, a->string))
                    st = md_errf(MD_ERR_CONFIG, "%s: %s: unknown key '%s' (block '%s' has no such parameter)",
                                 b->src, ipath, a->string, jtype->valuestring);
                else
                    cJSON_AddItemToObject(vals, a->string, cJSON_Duplicate(a, 1));
            }
            for (const cJSON *p = bparams ? bparams->child : NULL; st == MD_OK && p; p = p->next) {
                if (cJSON_GetObjectItemCaseSensitive(vals, p->string)) continue;
                if (cJSON_IsNull(p))
                    st = md_errf(MD_ERR_CONFIG, "%s: %s.%s: missing (parameter of block '%s')", b->src, ipath,
                                 p->string, jtype->valuestring);
                else
                    cJSON_AddItemToObject(vals, p->string, cJSON_Duplicate(p, 1));
            }
            struct scope inner = {0};
            char prefix[520];
            snprintf(prefix, sizeof prefix, "%s.", iname);
            inner.prefix = prefix;
            inner.in_name = rin[0];
            const char *bprev = rin[0];
            int bi = 0;
            for (const cJSON *bl = blayers ? blayers->child : NULL; st == MD_OK && bl; bl = bl->next, bi++) {
                char bpath[700];
                snprintf(bpath, sizeof bpath, "blocks.%s.layers[%d] (in %s)", jtype->valuestring, bi, iname);
                st = expand_entry(b, bl, bpath, &inner, vals, &bprev, depth + 1);
            }
            if (st == MD_OK && rnin > 1)
                st = md_errf(MD_ERR_CONFIG, "%s: %s.inputs: a block instance takes one input", b->src, ipath);
            if (st == MD_OK) st = names_put(&b->names, iname, bprev);
            if (st == MD_OK && sc) st = names_put(&sc->local, repeat > 1 ? iname + strlen(sc->prefix) : lname, bprev);
            if (st == MD_OK) cur_prev = names_get(&b->names, iname);
            names_free(&inner.local);
            cJSON_Delete(vals);
            for (int i = 0; i < rnin; i++) md_free(rin[i]);
            md_free(rin);
            cJSON_Delete(o);
            if (st != MD_OK) goto fail;
        } else {
            st = add_spec(b, iname, ipath, o, rin, rnin);
            if (st != MD_OK) goto fail;
            if ((st = names_put(&b->names, iname, iname)) != MD_OK) goto fail;
            if (sc && (st = names_put(&sc->local, iname + strlen(sc->prefix), iname)) != MD_OK) goto fail;
            cur_prev = names_get(&b->names, iname);
        }
    }
    if (repeat > 1) {
        char full[512];
        snprintf(full, sizeof full, "%s%s", sc ? sc->prefix : "", lname);
        if ((st = names_put(&b->names, full, cur_prev)) != MD_OK) goto fail;
        if (sc && (st = names_put(&sc->local, lname, cur_prev)) != MD_OK) goto fail;
    }
    *prev = cur_prev;
    goto fail;

prefix_fail:
    md_err_prefix("%s", b->src);
fail:
    cJSON_Delete(obj);
    for (int i = 0; i < nin; i++) md_free(in[i]);
    md_free(in);
    return st;
}

/* ---- per-type parsing and shape inference ------------------------------------ */

static const struct { const char *name; int kind; int act; } layer_types[] = {
    {"conv2d", MD_L_CONV, 0},        {"batchnorm", MD_L_BN, 0},
    {"relu", MD_L_ACT, MD_ACT_RELU}, {"leaky_relu", MD_L_ACT, MD_ACT_LEAKY_RELU},
    {"gelu", MD_L_ACT, MD_ACT_GELU}, {"silu", MD_L_ACT, MD_ACT_SILU},
    {"sigmoid", MD_L_ACT, MD_ACT_SIGMOID}, {"tanh", MD_L_ACT, MD_ACT_TANH},
    {"maxpool", MD_L_MAXPOOL, 0},    {"avgpool", MD_L_AVGPOOL, 0},
    {"global_avgpool", MD_L_GAP, 0}, {"flatten", MD_L_FLATTEN, 0},
    {"linear", MD_L_LINEAR, 0},      {"dropout", MD_L_DROPOUT, 0},
    {"add", MD_L_ADD, 0},            {"concat", MD_L_CONCAT, 0},
    {"weighted_add", MD_L_WADD, 0},
};

/* An int or an [a, b] pair. */
static md_status get_pair(const cJSON *o, const char *key, const char *path, int min, int *a, int *b2, int dflt_a, int dflt_b)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, key);
    *a = dflt_a;
    *b2 = dflt_b;
    if (!it) return MD_OK;
    if (cJSON_IsNumber(it) && it->valuedouble == floor(it->valuedouble) && it->valuedouble >= min &&
        it->valuedouble <= 4096) {
        *a = *b2 = (int)it->valuedouble;
        return MD_OK;
    }
    if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2) {
        const cJSON *x = cJSON_GetArrayItem(it, 0), *y = cJSON_GetArrayItem(it, 1);
        if (cJSON_IsNumber(x) && cJSON_IsNumber(y) && x->valuedouble == floor(x->valuedouble) &&
            y->valuedouble == floor(y->valuedouble) && x->valuedouble >= min && y->valuedouble >= min &&
            x->valuedouble <= 4096 && y->valuedouble <= 4096) {
            *a = (int)x->valuedouble;
            *b2 = (int)y->valuedouble;
            return MD_OK;
        }
    }
    return md_errf(MD_ERR_CONFIG, "%s.%s: must be an integer >= %d or a pair [h, w] of them", path, key, min);
}

static md_status get_act(const cJSON *o, const char *path, int *act)
{
    const char *s = NULL;
    MD_TRY(md_json_str(o, "act", path, 0, &s));
    if (!s || strcmp(s, "none") == 0) { *act = MD_ACT_NONE; return MD_OK; }
    if (strcmp(s, "relu") == 0) { *act = MD_ACT_RELU; return MD_OK; }
    return md_errf(MD_ERR_CONFIG, "%s.act: '%s' is not supported here (relu or none)", path, s);
}

static const char *const common_keys[] = {"name", "type", NULL};

static md_status check_keys(const cJSON *o, const char *path, const char *const *extra)
{
    for (const cJSON *it = o->child; it; it = it->next) {
        int ok = 0;
        for (const char *const *a = common_keys; *a; a++) ok |= !strcmp(*a, it->string);
        for (const char *const *a = extra; *a && !ok; a++) ok |= !strcmp(*a, it->string);
        if (!ok) return md_errf(MD_ERR_CONFIG, "%s: unknown key '%s'", path, it->string);
    }
    return MD_OK;
}

static md_status parse_layer(struct md_model *m, struct spec *s, struct md_layer *L, int is_last)
{
    const cJSON *o = s->obj;
    const char *path = L->path;
    const char *type = cJSON_GetObjectItemCaseSensitive(o, "type")->valuestring;
    int kind = -1;
    for (size_t i = 0; i < sizeof layer_types / sizeof layer_types[0]; i++)
        if (!strcmp(layer_types[i].name, type)) {
            kind = layer_types[i].kind;
            L->type = layer_types[i].name;
            L->act = layer_types[i].act;
        }
    if (kind < 0)
        return md_errf(MD_ERR_CONFIG, "%s.type: unknown layer type '%s' (conv2d, batchnorm, relu, leaky_relu, gelu, "
                       "silu, sigmoid, tanh, maxpool, avgpool, global_avgpool, flatten, linear, dropout, add, "
                       "concat, weighted_add, or a block)", path, type);
    L->kind = kind;
    L->alias = -1;
    L->tw = L->tb = -1;
    const struct md_layer *X = &m->layers[L->in[0]];
    int ci = X->c, hi = X->h, wi = X->w;
    long long elems_in = (long long)ci * hi * wi;
    int multi = kind == MD_L_ADD || kind == MD_L_CONCAT || kind == MD_L_WADD;
    if (!multi && L->nin != 1)
        return md_errf(MD_ERR_CONFIG, "%s.inputs: %s takes one input, got %d", path, type, L->nin);
    if (multi && L->nin < 2)
        return md_errf(MD_ERR_CONFIG, "%s.inputs: %s needs at least two inputs", path, type);
    L->c = ci; L->h = hi; L->w = wi;
    switch (kind) {
    case MD_L_CONV: {
        static const char *const k[] = {"out", "kernel", "stride", "padding", "dilation", "groups", "bias", NULL};
        MD_TRY(check_keys(o, path, k));
        MD_TRY(md_json_int(o, "out", path, 1, 1, 1 << 20, &L->k));
        MD_TRY(get_pair(o, "kernel", path, 1, &L->r, &L->s, 0, 0));
        if (!L->r) return md_errf(MD_ERR_CONFIG, "%s.kernel: missing", path);
        MD_TRY(get_pair(o, "stride", path, 1, &L->stride_h, &L->stride_w, 1, 1));
        MD_TRY(get_pair(o, "padding", path, 0, &L->pad_h, &L->pad_w, 0, 0));
        MD_TRY(get_pair(o, "dilation", path, 1, &L->dil_h, &L->dil_w, 1, 1));
        L->groups = 1;
        L->bias = 1;
        MD_TRY(md_json_int(o, "groups", path, 0, 1, 1 << 20, &L->groups));
        MD_TRY(md_json_bool(o, "bias", path, 0, &L->bias));
        if (m->opts.reduce_architecture && L->groups == 1 && L->k > 1) L->k = (L->k + 1) / 2;
        if (ci % L->groups || L->k % L->groups)
            return md_errf(MD_ERR_CONFIG, "%s.groups: %d does not divide the input channels (%d) and output "
                           "channels (%d)", path, L->groups, ci, L->k);
        int eh = L->dil_h * (L->r - 1) + 1, ew = L->dil_w * (L->s - 1) + 1;
        if (eh > hi + 2 * L->pad_h || ew > wi + 2 * L->pad_w)
            return md_errf(MD_ERR_CONFIG, "%s.kernel: %dx%d (dilated %dx%d) is larger than the padded input "
                           "%dx%d", path, L->r, L->s, eh, ew, hi + 2 * L->pad_h, wi + 2 * L->pad_w);
        L->c = L->k;
        L->h = md_conv_out(hi, L->r, L->stride_h, L->pad_h, L->dil_h);
        L->w = md_conv_out(wi, L->s, L->stride_w, L->pad_w, L->dil_w);
        long long kk = (long long)(ci / L->groups) * L->r * L->s;
        if ((double)L->k * (double)kk > (double)MAX_PARAMS)
            return md_errf(MD_ERR_CONFIG, "%s: %.3g parameters (%d x %lld weights), more than any machine holds (at "
                           "most %lld)", path, (double)L->k * (double)kk, L->k, kk, MAX_PARAMS);
        L->nparams = (long long)L->k * kk + (L->bias ? L->k : 0);
        L->flops = 2.0 * (double)L->k * L->h * L->w * (double)kk + (L->bias ? (double)L->k * L->h * L->w : 0.0);
        break;
    }
    case MD_L_BN: {
        static const char *const k[] = {"eps", "momentum", "act", "zero_init", NULL};
        MD_TRY(check_keys(o, path, k));
        double eps = 1e-5, mom = 0.1;
        MD_TRY(md_json_num(o, "eps", path, 0, 1e-12, 1.0, &eps));
        MD_TRY(md_json_num(o, "momentum", path, 0, 0.0, 1.0, &mom));
        MD_TRY(get_act(o, path, &L->act));
        MD_TRY(md_json_bool(o, "zero_init", path, 0, &L->zero_init));
        L->eps = (float)eps;
        L->momentum = (float)mom;
        L->nparams = 2LL * ci;
        L->flops = 4.0 * (double)elems_in;
        break;
    }
    case MD_L_ACT: {
        static const char *const k[] = {"negative_slope", NULL};
        static const char *const k0[] = {NULL};
        MD_TRY(check_keys(o, path, L->act == MD_ACT_LEAKY_RELU ? k : k0));
        double a = 0.01;
        MD_TRY(md_json_num(o, "negative_slope", path, 0, -1e6, 1e6, &a));
        L->alpha = (float)a;
        L->flops = (double)elems_in;
        break;
    }
    case MD_L_MAXPOOL:
    case MD_L_AVGPOOL: {
        static const char *const k[] = {"kernel", "stride", "padding", "count_include_pad", NULL};
        MD_TRY(check_keys(o, path, k));
        MD_TRY(get_pair(o, "kernel", path, 1, &L->r, &L->s, 0, 0));
        if (!L->r) return md_errf(MD_ERR_CONFIG, "%s.kernel: missing", path);
        MD_TRY(get_pair(o, "stride", path, 1, &L->stride_h, &L->stride_w, L->r, L->s));
        MD_TRY(get_pair(o, "padding", path, 0, &L->pad_h, &L->pad_w, 0, 0));
        L->count_include_pad = 1;
        if (kind == MD_L_AVGPOOL) MD_TRY(md_json_bool(o, "count_include_pad", path, 0, &L->count_include_pad));
        else if (cJSON_GetObjectItemCaseSensitive(o, "count_include_pad"))
            return md_errf(MD_ERR_CONFIG, "%s: unknown key 'count_include_pad' (avgpool only)", path);
        if (2 * L->pad_h > L->r || 2 * L->pad_w > L->s)
            return md_errf(MD_ERR_CONFIG, "%s.padding: must be at most half the kernel", path);
        if (L->r > hi + 2 * L->pad_h || L->s > wi + 2 * L->pad_w)
            return md_errf(MD_ERR_CONFIG, "%s.kernel: %dx%d is larger than the padded input %dx%d", path, L->r,
                           L->s, hi + 2 * L->pad_h, wi + 2 * L->pad_w);
        L->dil_h = L->dil_w = 1;
        L->h = md_conv_out(hi, L->r, L->stride_h, L->pad_h, 1);
        L->w = md_conv_out(wi, L->s, L->stride_w, L->pad_w, 1);
        L->flops = (double)ci * L->h * L->w * L->r * L->s;
        break;
    }
    case MD_L_GAP: {
        static const char *const k[] = {NULL};
        MD_TRY(check_keys(o, path, k));
        L->h = L->w = 1;
        L->flops = (double)elems_in;
        break;
    }
    case MD_L_FLATTEN: {
        static const char *const k[] = {NULL};
        MD_TRY(check_keys(o, path, k));
        L->c = (int)elems_in;
        L->h = L->w = 1;
        break;
    }
    case MD_L_LINEAR: {
        static const char *const k[] = {"out", "bias", NULL};
        MD_TRY(check_keys(o, path, k));
        MD_TRY(md_json_int(o, "out", path, 1, 1, 1 << 24, &L->k));
        L->bias = 1;
        MD_TRY(md_json_bool(o, "bias", path, 0, &L->bias));
        if (m->opts.reduce_architecture && !is_last && L->k > 1) L->k = (L->k + 1) / 2;
        if (hi != 1 || wi != 1)
            return md_errf(MD_ERR_CONFIG, "%s.inputs: linear needs a flat input (C, 1, 1), got (%d, %d, %d): add a "
                           "flatten or global_avgpool layer", path, ci, hi, wi);
        L->c = L->k;
        L->h = L->w = 1;
        L->nparams = (long long)ci * L->k + (L->bias ? L->k : 0);
        L->flops = 2.0 * ci * L->k + (L->bias ? L->k : 0);
        break;
    }
    case MD_L_DROPOUT: {
        static const char *const k[] = {"p", NULL};
        MD_TRY(check_keys(o, path, k));
        double p = 0.5;
        MD_TRY(md_json_num(o, "p", path, 0, 0.0, 0.999, &p));
        if (m->opts.dropout >= 0) p = m->opts.dropout;
        L->p = (float)p;
        L->flops = (double)elems_in;
        break;
    }
    case MD_L_ADD:
    case MD_L_CONCAT:
    case MD_L_WADD: {
        static const char *const ka[] = {"act", NULL};
        static const char *const k0[] = {NULL};
        MD_TRY(check_keys(o, path, kind == MD_L_ADD ? ka : k0));
        if (kind == MD_L_ADD) MD_TRY(get_act(o, path, &L->act));
        long long csum = 0;
        for (int i = 0; i < L->nin; i++) {
            const struct md_layer *Y = &m->layers[L->in[i]];
            if (Y->h != hi || Y->w != wi || (kind != MD_L_CONCAT && Y->c != ci))
                return md_errf(MD_ERR_CONFIG, "%s.inputs[%d]: shape (%d, %d, %d) of '%s' does not match (%d, %d, %d) "
                               "of '%s'%s", path, i, Y->c, Y->h, Y->w, Y->name, ci, hi, wi, X->name,
                               kind == MD_L_CONCAT ? " (concat needs equal height and width)" : "");
            csum += Y->c;
        }
        if (kind == MD_L_CONCAT) {
            if (csum * hi * wi > MAX_OUTPUT_ELEMS)
                return md_errf(MD_ERR_CONFIG, "%s: output of %lld x %d x %d elements per sample, more than %lld", path,
                               csum, hi, wi, MAX_OUTPUT_ELEMS);
            L->c = (int)csum;
        }
        if (kind == MD_L_WADD) L->nparams = L->nin;
        L->flops = (kind == MD_L_WADD ? 2.0 : 1.0) * (double)(L->nin - (kind == MD_L_ADD)) * (double)elems_in;
        if (kind == MD_L_CONCAT) L->flops = 0;
        break;
    }
    default: MD_ASSERT(0);
    }
    if (L->h < 1 || L->w < 1)
        return md_errf(MD_ERR_CONFIG, "%s: output would be empty (%dx%d input)", path, hi, wi);
    if ((long long)L->c * L->h * L->w > MAX_OUTPUT_ELEMS)
        return md_errf(MD_ERR_CONFIG, "%s: output of %d x %d x %d elements per sample, more than %lld", path, L->c,
                       L->h, L->w, MAX_OUTPUT_ELEMS);
    if (L->nparams > MAX_PARAMS)
        return md_errf(MD_ERR_CONFIG, "%s: %lld parameters, more than any machine holds (at most %lld)", path,
                       L->nparams, MAX_PARAMS);
    return MD_OK;
}

/* ---- the parameter table ---------------------------------------------------------- */

static md_status add_tensor(struct md_model *m, const struct md_layer *L, const char *suffix, int ndim,
                            const int *shape, int decay, int *idx)
{
    struct md_param_info *t = &m->tensors[m->ntensors];
    char buf[600];
    snprintf(buf, sizeof buf, "%s.%s", L->name, suffix);
    t->name = md_strdup(buf);
    if (!t->name) return MD_ERR_OOM;
    t->ndim = ndim;
    t->numel = 1;
    for (int i = 0; i < ndim; i++) {
        t->shape[i] = shape[i];
        t->numel *= (size_t)shape[i];
    }
    t->decay = decay;
    t->layer_type = L->type;
    *idx = m->ntensors++;
    return MD_OK;
}

static md_status build_tensors(struct md_model *m)
{
    int cap = 0;
    for (int i = 0; i < m->nlayers; i++) cap += 2;
    m->tensors = md_calloc((size_t)cap + 1, sizeof *m->tensors);
    m->buffers = md_calloc((size_t)cap + 1, sizeof *m->buffers);
    if (!m->tensors || !m->buffers) return MD_ERR_OOM;
    /* decayed tensors first (conv/linear weights), in layer order */
    for (int i = 0; i < m->nlayers; i++) {
        struct md_layer *L = &m->layers[i];
        int ci = m->layers[L->in ? L->in[0] : i].c;
        if (L->kind == MD_L_CONV) {
            int sh[4] = {L->k, ci / L->groups, L->r, L->s};
            MD_TRY(add_tensor(m, L, "weight", 4, sh, 1, &L->tw));
            m->tensors[L->tw].khwc = m->opts.layout == MD_NHWC;
        } else if (L->kind == MD_L_LINEAR) {
            int sh[2] = {L->k, ci};
            MD_TRY(add_tensor(m, L, "weight", 2, sh, 1, &L->tw));
        }
    }
    for (int i = 0; i < m->nlayers; i++) {
        struct md_layer *L = &m->layers[i];
        if ((L->kind == MD_L_CONV || L->kind == MD_L_LINEAR) && L->bias) {
            int sh[1] = {L->k};
            MD_TRY(add_tensor(m, L, "bias", 1, sh, 0, &L->tb));
        } else if (L->kind == MD_L_BN) {
            int sh[1] = {L->c};
            MD_TRY(add_tensor(m, L, "weight", 1, sh, 0, &L->tw));
            MD_TRY(add_tensor(m, L, "bias", 1, sh, 0, &L->tb));
        } else if (L->kind == MD_L_WADD) {
            int sh[1] = {L->nin};
            MD_TRY(add_tensor(m, L, "weight", 1, sh, 0, &L->tw));
        }
    }
    size_t off = 0;
    for (int t = 0; t < m->ntensors; t++) {
        m->tensors[t].offset = off;
        off += m->tensors[t].numel;
        if (m->tensors[t].decay) m->ndecay = off;
    }
    m->nparams = off;
    /* BN running statistics and dropout masks */
    size_t soff = 0, moff = 0;
    for (int i = 0; i < m->nlayers; i++) {
        struct md_layer *L = &m->layers[i];
        if (L->kind == MD_L_BN) {
            L->stat_off = (int)soff;
            char buf[600];
            for (int j = 0; j < 2; j++) {
                struct md_param_info *b = &m->buffers[m->nbuffers++];
                snprintf(buf, sizeof buf, "%s.%s", L->name, j ? "running_var" : "running_mean");
                b->name = md_strdup(buf);
                if (!b->name) return MD_ERR_OOM;
                b->offset = soff + (size_t)j * (size_t)L->c;
                b->numel = (size_t)L->c;
                b->ndim = 1;
                b->shape[0] = L->c;
                b->layer_type = L->type;
            }
            soff += 2 * (size_t)L->c;
        } else if (L->kind == MD_L_DROPOUT) {
            L->mask_off = moff;
            moff += (size_t)L->c * L->h * L->w;
        }
    }
    m->nstats = soff;
    m->mask_per_sample = moff;
    return MD_OK;
}

/* compile: fold a ReLU into its producer (BN or add) when the ReLU is the
 * producer's only consumer. */
static void fuse(struct md_model *m)
{
    for (int i = 0; i < m->nlayers; i++) {
        struct md_layer *L = &m->layers[i];
        if (L->kind != MD_L_ACT || L->act != MD_ACT_RELU) continue;
        struct md_layer *P = &m->layers[L->in[0]];
        if ((P->kind != MD_L_BN && P->kind != MD_L_ADD) || P->act != MD_ACT_NONE || P->nconsumers != 1 ||
            P->alias >= 0)
            continue;
        P->act = MD_ACT_RELU;
        L->alias = L->in[0];
        L->flops = 0;
        m->nfused++;
    }
}

/* ---- load -------------------------------------------------------------------------- */

static md_status resolve_path(const char *name, char *out, size_t n)
{
    if (strchr(name, '/') || (strlen(name) > 5 && !strcmp(name + strlen(name) - 5, ".json"))) {
        snprintf(out, n, "%s", name);
        return MD_OK;
    }
    snprintf(out, n, "configs/models/%s.json", name);
    if (access(out, R_OK) == 0) return MD_OK;
    const char *exe = md_exe_dir();
    if (exe[0]) {
        snprintf(out, n, "%s/../configs/models/%s.json", exe, name);
        if (access(out, R_OK) == 0) return MD_OK;
    }
    return md_errf(MD_ERR_CONFIG, "model '%s': no configs/models/%s.json here or beside the executable", name, name);
}

static md_status load_inner(struct md_model *m, struct build *b, const cJSON *root)
{
    static const char *const top[] = {"name", "description", "inputs", "blocks", "layers", "num_classes",
                                      "zero_init_residual", NULL};
    md_status st = md_json_only_keys(root, b->src, top);
    if (st != MD_OK) return st;
    const char *name = NULL;
    MD_TRY(md_json_str(root, "name", "name", 0, &name));
    m->name = md_strdup(name ? name : b->src);
    if (!m->name) return MD_ERR_OOM;
    b->num_classes = 0;
    if ((st = md_json_int(root, "num_classes", "num_classes", 0, 1, 1 << 24, &b->num_classes)) != MD_OK) goto pfx;
    if (m->opts.num_classes > 0) b->num_classes = m->opts.num_classes;
    if ((st = md_json_bool(root, "zero_init_residual", "zero_init_residual", 0, &m->zero_init_residual)) != MD_OK)
        goto pfx;
    b->blocks = cJSON_GetObjectItemCaseSensitive(root, "blocks");
    if (b->blocks) {
        if (!cJSON_IsObject(b->blocks)) return md_errf(MD_ERR_CONFIG, "%s: blocks: must be an object", b->src);
        for (const cJSON *bl = b->blocks->child; bl; bl = bl->next) {
            char p[300];
            snprintf(p, sizeof p, "blocks.%s", bl->string);
            static const char *const bk[] = {"params", "layers", "description", NULL};
            if (!cJSON_IsObject(bl)) return md_errf(MD_ERR_CONFIG, "%s: %s: must be an object", b->src, p);
            if ((st = md_json_only_keys(bl, p, bk)) != MD_OK) goto pfx;
            const cJSON *pp = cJSON_GetObjectItemCaseSensitive(bl, "params");
            const cJSON *ll = cJSON_GetObjectItemCaseSensitive(bl, "layers");
            if (pp && !cJSON_IsObject(pp))
                return md_errf(MD_ERR_CONFIG, "%s: %s.params: must be an object of name: default (null: required)",
                               b->src, p);
            if (!cJSON_IsArray(ll) || cJSON_GetArraySize(ll) < 1)
                return md_errf(MD_ERR_CONFIG, "%s: %s.layers: must be a non-empty array", b->src, p);
            for (size_t i = 0; i < sizeof layer_types / sizeof layer_types[0]; i++)
                if (!strcmp(bl->string, layer_types[i].name))
                    return md_errf(MD_ERR_CONFIG, "%s: %s: a block may not be named like a layer type", b->src, p);
        }
    }
    /* inputs */
    const cJSON *ins = cJSON_GetObjectItemCaseSensitive(root, "inputs");
    if (!cJSON_IsArray(ins) || cJSON_GetArraySize(ins) < 1)
        return md_errf(MD_ERR_CONFIG, "%s: inputs: %s", b->src, ins ? "must be a non-empty array" : "missing");
    const cJSON *layers = cJSON_GetObjectItemCaseSensitive(root, "layers");
    if (!cJSON_IsArray(layers) || cJSON_GetArraySize(layers) < 1)
        return md_errf(MD_ERR_CONFIG, "%s: layers: %s", b->src, layers ? "must be a non-empty array" : "missing");
    m->ninputs = cJSON_GetArraySize(ins);
    int ii = 0;
    for (const cJSON *in = ins->child; in; in = in->next, ii++) {
        char p[64];
        snprintf(p, sizeof p, "inputs[%d]", ii);
        static const char *const ik[] = {"name", "shape", NULL};
        const char *iname = NULL;
        if (!cJSON_IsObject(in)) return md_errf(MD_ERR_CONFIG, "%s: %s: must be an object", b->src, p);
        if ((st = md_json_only_keys(in, p, ik)) != MD_OK) goto pfx;
        if ((st = md_json_str(in, "name", p, 1, &iname)) != MD_OK) goto pfx;
        const cJSON *sh = cJSON_GetObjectItemCaseSensitive(in, "shape");
        int ok = cJSON_IsArray(sh) && cJSON_GetArraySize(sh) == 3;
        for (int j = 0; ok && j < 3; j++) {
            const cJSON *v = cJSON_GetArrayItem(sh, j);
            ok = cJSON_IsNumber(v) && v->valuedouble >= 1 && v->valuedouble <= 65536 &&
                 v->valuedouble == floor(v->valuedouble);
        }
        if (!ok) return md_errf(MD_ERR_CONFIG, "%s: %s.shape: must be [channels, height, width]", b->src, p);
        double elems = cJSON_GetArrayItem(sh, 0)->valuedouble * cJSON_GetArrayItem(sh, 1)->valuedouble *
                       cJSON_GetArrayItem(sh, 2)->valuedouble;
        if (elems > (double)MAX_OUTPUT_ELEMS)
            return md_errf(MD_ERR_CONFIG, "%s: %s.shape: %.0f elements per sample, more than %lld", b->src, p, elems,
                           MAX_OUTPUT_ELEMS);
        if (ii >= MAX_LAYERS)
            return md_errf(MD_ERR_CONFIG, "%s: inputs: more than %d", b->src, MAX_LAYERS);
        if (names_get(&b->names, iname))
            return md_errf(MD_ERR_CONFIG, "%s: %s.name: duplicate input name '%s'", b->src, p, iname);
        if ((st = names_put(&b->names, iname, iname)) != MD_OK) return st;
    }
    /* expand */
    const char *prev = b->names.val[0];
    int li = 0;
    for (const cJSON *l = layers->child; l; l = l->next, li++) {
        char p[64];
        snprintf(p, sizeof p, "layers[%d]", li);
        if ((st = expand_entry(b, l, p, NULL, NULL, &prev, 0)) != MD_OK) return st;
    }
    /* layers: inputs, then the specs */
    m->nlayers = m->ninputs + b->nspecs;
    m->layers = md_calloc((size_t)m->nlayers, sizeof *m->layers);
    if (!m->layers) return MD_ERR_OOM;
    ii = 0;
    for (const cJSON *in = ins->child; in; in = in->next, ii++) {
        struct md_layer *L = &m->layers[ii];
        const cJSON *sh = cJSON_GetObjectItemCaseSensitive(in, "shape");
        L->name = md_strdup(cJSON_GetObjectItemCaseSensitive(in, "name")->valuestring);
        L->path = md_strdup("inputs");
        if (!L->name || !L->path) return MD_ERR_OOM;
        L->kind = MD_L_INPUT;
        L->type = "input";
        L->c = (int)cJSON_GetArrayItem(sh, 0)->valuedouble;
        L->h = (int)cJSON_GetArrayItem(sh, 1)->valuedouble;
        L->w = (int)cJSON_GetArrayItem(sh, 2)->valuedouble;
        L->alias = -1;
        L->tw = L->tb = -1;
        L->group = -1;
        if (md_strmap_put(&b->layer_idx, L->name, ii) != MD_OK) return MD_ERR_OOM;
    }
    for (int i = 0; i < b->nspecs; i++) {
        struct spec *s = &b->specs[i];
        struct md_layer *L = &m->layers[m->ninputs + i];
        L->name = s->name;
        L->path = s->path;
        s->name = s->path = NULL;
        L->group = s->group;
        L->nin = s->nin;
        L->in = md_calloc((size_t)s->nin, sizeof *L->in);
        if (!L->in) return MD_ERR_OOM;
        for (int j = 0; j < s->nin; j++) {
            int found = -1;
            md_strmap_get(&b->layer_idx, s->in[j], &found); /* the latest earlier layer of that name */
            MD_ASSERT(found >= 0);
            L->in[j] = found;
            m->layers[found].nconsumers++;
        }
        if ((st = parse_layer(m, s, L, i == b->nspecs - 1)) != MD_OK) goto pfx;
        if (md_strmap_put(&b->layer_idx, L->name, m->ninputs + i) != MD_OK) return MD_ERR_OOM;
    }
    /* the classifier */
    const struct md_layer *last = &m->layers[m->nlayers - 1];
    long long outn = (long long)last->c * last->h * last->w;
    if (b->num_classes == 0) b->num_classes = (int)outn;
    if (last->h != 1 || last->w != 1 || outn != b->num_classes)
        return md_errf(MD_ERR_CONFIG, "%s: %s: the last layer '%s' gives (%d, %d, %d) but the model has %d classes: "
                       "it must give (%d, 1, 1)", b->src, last->path, last->name, last->c, last->h, last->w,
                       b->num_classes, b->num_classes);
    m->num_classes = b->num_classes;
    if (m->opts.compile) fuse(m);
    if ((st = build_tensors(m)) != MD_OK) return st;
    for (int i = 0; i < m->nlayers; i++) m->flops_fwd += m->layers[i].flops;
    /* Training holds the parameters several times over (weights, gradients,
     * optimizer state), and a checkpoint stages them all in host memory: a
     * model whose weights alone do not fit is refused here, before any
     * allocation, rather than by the out-of-memory killer later. */
    long long avail = md_mem_available_bytes();
    double pbytes = (double)md_model_param_bytes(m);
    if ((double)m->nparams > (double)MAX_PARAMS || (avail > 0 && pbytes > (double)avail)) {
        char a[32], bb[32];
        return md_errf(MD_ERR_CONFIG, "%s: %zu parameters (%s), more than this machine's available memory (%s)",
                       b->src, m->nparams, md_fmt_bytes(pbytes, a, sizeof a),
                       avail > 0 ? md_fmt_bytes((double)avail, bb, sizeof bb) : "unknown");
    }
    return MD_OK;
pfx:
    md_err_prefix("%s", b->src);
    return st;
}

md_status md_model_load(const char *name_or_path, const cJSON *inline_model, const struct md_model_opts *opts,
                        md_model **out)
{
    md_status st = MD_OK;
    cJSON *root = NULL;
    struct build b;
    memset(&b, 0, sizeof b);
    *out = NULL;
    struct md_model *m = md_calloc(1, sizeof *m);
    if (!m) return MD_ERR_OOM;
    if (opts) m->opts = *opts;
    else md_model_opts_default(&m->opts);
    if (m->opts.compute_dtype != MD_F32 && m->opts.compute_dtype != MD_F16 && m->opts.compute_dtype != MD_BF16) {
        st = md_errf(MD_ERR_USAGE, "model: compute dtype must be fp32, fp16 or bf16");
        goto fail;
    }
    char path[4200];
    if (inline_model) {
        snprintf(path, sizeof path, "%s", name_or_path ? name_or_path : "model");
    } else {
        if ((st = resolve_path(name_or_path, path, sizeof path)) != MD_OK) goto fail;
        if ((st = md_json_load_file(path, &root)) != MD_OK) goto fail;
    }
    const char *slash = strrchr(path, '/');
    m->source = md_strdup(slash ? slash + 1 : path);
    if (!m->source) { st = MD_ERR_OOM; goto fail; }
    b.src = m->source;
    const cJSON *r = inline_model ? inline_model : root;
    if (!cJSON_IsObject(r)) {
        st = md_errf(MD_ERR_CONFIG, "%s: must be a JSON object", m->source);
        goto fail;
    }
    b.root = r;
    /* names end up in reports and checkpoint headers, which must be UTF-8 */
    if ((st = md_json_check_utf8(r, m->source)) != MD_OK) goto fail;
    if ((st = load_inner(m, &b, r)) != MD_OK) goto fail;
    *out = m;
    m = NULL;
fail:
    if (st == MD_ERR_OOM && !md_errmsg()[0]) md_errf(MD_ERR_OOM, "model: out of host memory");
    for (int i = 0; i < b.nspecs; i++) spec_free(&b.specs[i]);
    md_free(b.specs);
    names_free(&b.names);
    md_strmap_free(&b.layer_idx);
    cJSON_Delete(root);
    md_model_free(m);
    return st;
}

/* md_model_free is in model_exec.c (it releases device memory too). */
void md_model_free_host(struct md_model *m);
void md_model_free_host(struct md_model *m)
{
    if (!m) return;
    for (int i = 0; i < m->nlayers; i++) {
        md_free(m->layers[i].name);
        md_free(m->layers[i].path);
        md_free(m->layers[i].in);
    }
    md_free(m->layers);
    for (int i = 0; i < m->ntensors; i++) md_free((char *)m->tensors[i].name);
    md_free(m->tensors);
    for (int i = 0; i < m->nbuffers; i++) md_free((char *)m->buffers[i].name);
    md_free(m->buffers);
    md_free(m->name);
    md_free(m->source);
    md_free(m);
}

/* ---- queries ----------------------------------------------------------------------- */

const char *md_model_name(const md_model *m) { return m->name; }
int md_model_num_inputs(const md_model *m) { return m->ninputs; }
const char *md_model_input_name(const md_model *m, int i) { return m->layers[i].name; }
void md_model_input_shape(const md_model *m, int i, int *c, int *h, int *w)
{
    *c = m->layers[i].c;
    *h = m->layers[i].h;
    *w = m->layers[i].w;
}
int md_model_num_classes(const md_model *m) { return m->num_classes; }
size_t md_model_nparams(const md_model *m) { return m->nparams; }
size_t md_model_ndecay(const md_model *m) { return m->ndecay; }
double md_model_flops_fwd(const md_model *m) { return m->flops_fwd; }
double md_model_flops_train(const md_model *m) { return 3.0 * m->flops_fwd; }
int md_model_num_layers(const md_model *m) { return m->nlayers - m->ninputs; }
const struct md_model_opts *md_model_get_opts(const md_model *m) { return &m->opts; }
int md_model_num_tensors(const md_model *m) { return m->ntensors; }
const struct md_param_info *md_model_tensor(const md_model *m, int i) { return &m->tensors[i]; }
int md_model_num_buffers(const md_model *m) { return m->nbuffers; }
const struct md_param_info *md_model_buffer(const md_model *m, int i) { return &m->buffers[i]; }
size_t md_model_bn_stats_count(const md_model *m) { return m->nstats; }

int md_model_find_tensor(const md_model *m, const char *name)
{
    for (int i = 0; i < m->ntensors; i++)
        if (!strcmp(m->tensors[i].name, name)) return i;
    return -1;
}

size_t md_model_param_bytes(const md_model *m)
{
    size_t b = m->nparams * 4;
    if (m->opts.compute_dtype != MD_F32) b += m->nparams * md_dtype_size(m->opts.compute_dtype);
    return b;
}

size_t md_model_activation_bytes(const md_model *m, int batch, int training)
{
    struct md_model_plan p;
    if (md_model_plan_make(m, batch, training, &p) != MD_OK) return 0;
    size_t b = p.bytes;
    md_model_plan_free(&p);
    return b;
}

static const char *fmt_flops(double f, char *buf, size_t n)
{
    if (f >= 1e9) snprintf(buf, n, "%.2f GFLOPs", f / 1e9);
    else if (f >= 1e6) snprintf(buf, n, "%.2f MFLOPs", f / 1e6);
    else if (f >= 1e3) snprintf(buf, n, "%.2f KFLOPs", f / 1e3);
    else snprintf(buf, n, "%.0f FLOPs", f);
    return buf;
}

void md_model_print_summary(const md_model *m)
{
    char a[32], b[32], c[32];
    int wname = 5;
    for (int i = 0; i < m->nlayers; i++) {
        int l = (int)strlen(m->layers[i].name);
        if (l > wname) wname = l;
    }
    if (wname > 40) wname = 40;
    md_out("  %-*s  %-14s  %-16s  %12s  %12s\n", wname, "layer", "type", "output", "params", "FLOPs");
    for (int i = 0; i < m->nlayers; i++) {
        const struct md_layer *L = &m->layers[i];
        char type[40], shape[40];
        if (L->alias >= 0) snprintf(type, sizeof type, "%s (fused)", L->type);
        else if (L->act == MD_ACT_RELU && (L->kind == MD_L_BN || L->kind == MD_L_ADD))
            snprintf(type, sizeof type, "%s+relu", L->type);
        else snprintf(type, sizeof type, "%s", L->type);
        snprintf(shape, sizeof shape, "%dx%dx%d", L->c, L->h, L->w);
        md_out("  %-*s  %-14s  %-16s  %12s  %12s\n", wname, L->name, type, shape,
               md_fmt_thousands(L->nparams, a, sizeof a), L->flops > 0 ? fmt_flops(L->flops, b, sizeof b) : "-");
    }
    char mem[32], act[32];
    md_out("✅ Created %s - Parameters: %s - %s per sample (forward), %s per training step sample - "
           "params %s, activations %s per sample (training)\n",
           m->name, md_fmt_thousands((long long)m->nparams, a, sizeof a), fmt_flops(m->flops_fwd, b, sizeof b),
           fmt_flops(3 * m->flops_fwd, c, sizeof c), md_fmt_bytes((double)md_model_param_bytes(m), mem, sizeof mem),
           md_fmt_bytes((double)md_model_activation_bytes(m, 1, 1), act, sizeof act));
}

int md_model_dropout(const md_model *m, double *p_min, double *p_max)
{
    int n = 0;
    *p_min = *p_max = 0;
    for (int i = m->ninputs; i < m->nlayers; i++) {
        if (m->layers[i].kind != MD_L_DROPOUT) continue;
        double p = round((double)m->layers[i].p * 1e6) / 1e6; /* as configured, not float's 0.10000000149 */
        if (n == 0 || p < *p_min) *p_min = p;
        if (n == 0 || p > *p_max) *p_max = p;
        n++;
    }
    return n;
}

cJSON *md_model_summary_json(const md_model *m)
{
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "name", m->name);
    cJSON *ins = cJSON_AddArrayToObject(o, "inputs");
    for (int i = 0; i < m->ninputs; i++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "name", m->layers[i].name);
        int sh[3] = {m->layers[i].c, m->layers[i].h, m->layers[i].w};
        cJSON_AddItemToObject(x, "shape", cJSON_CreateIntArray(sh, 3));
        cJSON_AddItemToArray(ins, x);
    }
    cJSON_AddNumberToObject(o, "num_classes", m->num_classes);
    cJSON_AddNumberToObject(o, "parameters", (double)m->nparams);
    cJSON_AddNumberToObject(o, "flops_forward", m->flops_fwd);
    cJSON_AddNumberToObject(o, "flops_train_step", 3 * m->flops_fwd);
    cJSON_AddNumberToObject(o, "param_bytes", (double)md_model_param_bytes(m));
    cJSON_AddNumberToObject(o, "activation_bytes_per_sample", (double)md_model_activation_bytes(m, 1, 1));
    cJSON_AddStringToObject(o, "layout", md_layout_name(m->opts.layout));
    cJSON_AddStringToObject(o, "compute_dtype", md_dtype_name(m->opts.compute_dtype));
    cJSON_AddBoolToObject(o, "grad_ckpt", m->opts.grad_ckpt);
    cJSON_AddBoolToObject(o, "compile", m->opts.compile);
    cJSON_AddNumberToObject(o, "fused", m->nfused);
    cJSON *ls = cJSON_AddArrayToObject(o, "layers");
    for (int i = m->ninputs; i < m->nlayers; i++) {
        const struct md_layer *L = &m->layers[i];
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "name", L->name);
        cJSON_AddStringToObject(x, "type", L->type);
        cJSON *li = cJSON_AddArrayToObject(x, "inputs");
        for (int j = 0; j < L->nin; j++) cJSON_AddItemToArray(li, cJSON_CreateString(m->layers[L->in[j]].name));
        int sh[3] = {L->c, L->h, L->w};
        cJSON_AddItemToObject(x, "shape", cJSON_CreateIntArray(sh, 3));
        cJSON_AddNumberToObject(x, "params", (double)L->nparams);
        cJSON_AddNumberToObject(x, "flops", L->flops);
        if (L->alias >= 0) cJSON_AddBoolToObject(x, "fused", 1);
        if (L->kind == MD_L_DROPOUT) cJSON_AddNumberToObject(x, "p", round((double)L->p * 1e6) / 1e6);
        cJSON_AddItemToArray(ls, x);
    }
    return o;
}
