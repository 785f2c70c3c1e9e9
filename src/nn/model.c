/* model.c - model configs: loading, block expansion, strict checking, shape
 * inference, parameter and FLOP counts, the parameter table. Nothing here
 * touches a device (model_exec.c does) or plans memory; the summary is in
 * model_summary.c.
 *
 * Config format (docs/models.md):
 *   {"name": "...", "num_classes": 10, "zero_init_residual": false,
 *    "inputs": [{"name": "image", "shape": [1, 28, 28]}],
 *    "blocks": {"basic": {"params": {"out": null, "stride": 1, "down": false},
 *                         "layers": [ ...layers, "$out" = parameter, "if": "$down" ]}},
 *    "layers": [{"name": "conv1", "type": "conv2d", "out": 32, "kernel": 3,
 *                "inputs": ["image"], "repeat": 2, "rest": {"stride": 1}}, ...]}
 * Inside a block, "in" is the block's input and "prev" (the default) the
 * previous layer; a layer whose "if" is false is skipped and references to it
 * resolve to its first input. An input (not the first) whose "if" is false
 * is absent: the model does not take it, and only skipped layers may name it
 * (docs/transformers.md: the iTransformer without time features).
 * "$num_classes" works everywhere.
 */
#define _POSIX_C_SOURCE 200809L
#include "nn/layer.h"

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
/* Bounds on what a config may expand to (docs/models.md): block
 * instances and repeats multiply, so a few lines can ask for 10^12 layers.
 * Work counts layers, skipped layers and block instances. */
#define MAX_LAYERS 100000
#define MAX_WORK (4 * MAX_LAYERS)
#define MAX_INPUTS 64
/* A layer's output per sample: activation offsets and sizes are int-sized. */
#define MAX_OUTPUT_ELEMS MD_MODEL_MAX_OUTPUT_ELEMS
/* Hard bound on parameters (4 TiB of fp32) whatever the memory says; the
 * counts stay far from 64-bit overflow below it. */
#define MAX_PARAMS MD_MODEL_MAX_PARAMS

void md_model_opts_default(struct md_model_opts *o)
{
    memset(o, 0, sizeof *o);
    o->layout = MD_NCHW;
    o->compute_dtype = MD_F32;
    o->compile = 1;
    o->seed = 42;
    o->dropout = -1.0;
}

md_status md_model_opts_set(struct md_model_opts *o, const char *name, double value, int if_present)
{
    for (int k = 0; k < o->nsets; k++)
        if (!strcmp(o->sets[k].name, name)) {
            o->sets[k].value = value;
            o->sets[k].if_present = if_present;
            return MD_OK;
        }
    if (o->nsets == MD_MODEL_MAX_SETS || strlen(name) >= sizeof o->sets[0].name || !name[0])
        return md_errf(MD_ERR_USAGE, "model parameter '%s': at most %d parameters of up to %zu characters",
                       name, MD_MODEL_MAX_SETS, sizeof o->sets[0].name - 1);
    struct md_model_set *ms = &o->sets[o->nsets++];
    strcpy(ms->name, name);
    ms->value = value;
    ms->if_present = if_present;
    return MD_OK;
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
    cJSON *params;       /* the config's "params" after the options' values (model parameters) */
    struct md_shape *in_shape; /* (ninputs) */
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
            const cJSON *mp = b->params ? cJSON_GetObjectItemCaseSensitive(b->params, p) : NULL;
            if (v) nv = cJSON_Duplicate(v, 1);
            else if (strcmp(p, "num_classes") == 0) nv = cJSON_CreateNumber(b->num_classes);
            else if (mp) nv = cJSON_Duplicate(mp, 1);
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

    int skip = 0;
    if (jif) {
        if (!cJSON_IsBool(jif) && !cJSON_IsNumber(jif)) {
            st = md_errf(MD_ERR_CONFIG, "%s: %s.if: must be a boolean (or a block parameter)", b->src, path);
            goto fail;
        }
        skip = cJSON_IsFalse(jif) || (cJSON_IsNumber(jif) && jif->valuedouble == 0);
    }
    /* an absent input ("" below) reaches only skipped layers */
    ref = jin ? jin->child : NULL;
    for (int i = 0; !skip && i < nin; i++, ref = ref ? ref->next : NULL) {
        if (in[i][0]) continue;
        st = md_errf(MD_ERR_CONFIG, "%s: %s.inputs[%d]: '%s' is absent (an input whose \"if\" is false, or a "
                     "layer skipped in its place): this layer needs the same \"if\"", b->src, path, i,
                     ref ? ref->valuestring : "prev");
        goto fail;
    }
    if (jif) {
        if (skip) {
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

/* ---- per-layer parsing and shape inference (through the kind's ops) ----------- */

/* "conv2d, batchnorm, ..." for the unknown-type message, from the registry. */
static void type_list(char *buf, size_t n)
{
    int nk;
    const struct md_layer_ops *const *reg = md_layer_registry(&nk);
    size_t len = 0;
    buf[0] = 0;
    for (int k = 0; k < nk; k++)
        for (const char *const *nm = reg[k]->names; nm && *nm && len < n; nm++)
            len += (size_t)snprintf(buf + len, n - len, "%s, ", *nm);
}

static md_status parse_layer(struct md_model *m, struct spec *s, struct md_layer *L, int is_last)
{
    const cJSON *o = s->obj;
    const char *path = L->path;
    const char *type = cJSON_GetObjectItemCaseSensitive(o, "type")->valuestring;
    const struct md_layer_ops *ops = md_layer_find(type);
    if (!ops) {
        char types[400];
        type_list(types, sizeof types);
        return md_errf(MD_ERR_CONFIG, "%s.type: unknown layer type '%s' (%sor a block)", path, type, types);
    }
    L->ops = ops;
    for (const char *const *nm = ops->names; *nm; nm++)
        if (!strcmp(*nm, type)) L->type = *nm;
    L->alias = -1;
    for (int k = 0; k < MD_LAYER_MAX_PARAMS; k++) L->param[k] = -1;
    if (ops->max_inputs == 1 && L->nin != 1)
        return md_errf(MD_ERR_CONFIG, "%s.inputs: %s takes one input, got %d", path, type, L->nin);
    if (ops->max_inputs > 1 && L->nin > ops->max_inputs)
        return md_errf(MD_ERR_CONFIG, "%s.inputs: %s takes at most %d inputs, got %d", path, type, ops->max_inputs,
                       L->nin);
    if (L->nin < ops->min_inputs) {
        char n[16];
        snprintf(n, sizeof n, "%d", ops->min_inputs);
        return md_errf(MD_ERR_CONFIG, "%s.inputs: %s needs at least %s inputs", path, type,
                       ops->min_inputs == 2 ? "two" : n);
    }
    if (ops->args_size && !(L->args = md_calloc(1, ops->args_size))) return MD_ERR_OOM;
    struct md_layer_parse p = {&m->opts, L->type, is_last};
    MD_TRY(ops->parse(&p, o, L));
    /* items per sample: the inputs' (docs/tiles.md); tiles and regroup change it in shape */
    L->fold = m->layers[L->in[0]].fold;
    for (int k = 1; k < L->nin; k++) {
        const struct md_layer *X = &m->layers[L->in[k]];
        if (X->fold != L->fold)
            return md_errf(MD_ERR_CONFIG, "%s.inputs[%d]: '%s' has %d items per sample (fold) but '%s' has %d: "
                           "inputs of '%s' must come from the same tiles (a regroup brings tiles back to one "
                           "item per sample)", path, k, X->name, X->fold, m->layers[L->in[0]].name, L->fold, L->name);
    }
    MD_TRY(ops->shape(m, L));
    MD_ASSERT(L->fold >= 1);
    L->flops *= (double)L->fold;
    const struct md_shape in = m->layers[L->in[0]].out;
    if (L->out.h < 1 || L->out.w < 1)
        return md_errf(MD_ERR_CONFIG, "%s: output would be empty (%dx%d input)", path, in.h, in.w);
    if ((double)L->out.c * L->out.h * L->out.w * L->fold > (double)MAX_OUTPUT_ELEMS)
        return md_errf(MD_ERR_CONFIG, "%s: output of %d x %d x %d elements (x %d items) per sample, more than %lld",
                       path, L->out.c, L->out.h, L->out.w, L->fold, MAX_OUTPUT_ELEMS);
    if (L->nparams > MAX_PARAMS)
        return md_errf(MD_ERR_CONFIG, "%s: %lld parameters, more than any machine holds (at most %lld)", path,
                       L->nparams, MAX_PARAMS);
    return MD_OK;
}

/* ---- the parameter table ---------------------------------------------------------- */

static md_status add_info(struct md_param_info *t, const struct md_layer *L, const struct md_param_decl *d)
{
    t->layer = L->name;
    char buf[600];
    snprintf(buf, sizeof buf, "%s.%s", L->name, d->suffix);
    t->name = md_strdup(buf);
    if (!t->name) return MD_ERR_OOM;
    t->ndim = d->ndim;
    t->numel = 1;
    for (int i = 0; i < d->ndim; i++) {
        t->shape[i] = d->shape[i];
        t->numel *= (size_t)d->shape[i];
    }
    t->decay = d->decay;
    t->khwc = d->khwc;
    t->layer_type = L->type;
    return MD_OK;
}

/* Where each layer's saved state (ops->mask_per_sample) goes; again after
 * fusions that change it (md_model_fuse_pools). */
static void layout_saved(struct md_model *m)
{
    size_t moff = 0;
    for (int i = 0; i < m->nlayers; i++) {
        struct md_layer *L = &m->layers[i];
        size_t b = L->ops->mask_per_sample ? L->ops->mask_per_sample(L) : 0;
        if (!b) continue;
        moff = (moff + 15) & ~(size_t)15; /* 16-byte aligned blocks (md_layer_saved) */
        L->mask_off = moff;
        moff += b * (size_t)L->fold;
    }
    m->mask_per_sample = moff;
}

/* Parameters (ops->params: weight-decayed ones first, each group in layer
 * order), running statistics (ops->buffers) and masks (ops->mask_per_sample). */
static md_status build_tensors(struct md_model *m)
{
    int cap = 0, bcap = 0;
    struct md_param_decl d[MD_LAYER_MAX_PARAMS];
    for (int i = 0; i < m->nlayers; i++) {
        const struct md_layer *L = &m->layers[i];
        if (L->ops->params) cap += L->ops->params(m, L, d);
        if (L->ops->buffers) bcap += L->ops->buffers(m, L, d);
    }
    m->tensors = md_calloc((size_t)cap + 1, sizeof *m->tensors);
    m->buffers = md_calloc((size_t)bcap + 1, sizeof *m->buffers);
    if (!m->tensors || !m->buffers) return MD_ERR_OOM;
    for (int decay = 1; decay >= 0; decay--)
        for (int i = 0; i < m->nlayers; i++) {
            struct md_layer *L = &m->layers[i];
            int nd = L->ops->params ? L->ops->params(m, L, d) : 0;
            MD_ASSERT(nd <= MD_LAYER_MAX_PARAMS);
            for (int k = 0; k < nd; k++) {
                if (d[k].decay != decay) continue;
                MD_TRY(add_info(&m->tensors[m->ntensors], L, &d[k]));
                if (L->ops->stacked_from) m->tensors[m->ntensors].stacked_from = L->ops->stacked_from(L, k);
                L->param[k] = m->ntensors++;
            }
        }
    size_t off = 0;
    for (int t = 0; t < m->ntensors; t++) {
        m->tensors[t].offset = off;
        off += m->tensors[t].numel;
        if (m->tensors[t].decay) m->ndecay = off;
    }
    m->nparams = off;
    size_t soff = 0;
    for (int i = 0; i < m->nlayers; i++) {
        struct md_layer *L = &m->layers[i];
        int nb = L->ops->buffers ? L->ops->buffers(m, L, d) : 0;
        MD_ASSERT(nb <= MD_LAYER_MAX_PARAMS);
        L->stat_off = soff;
        for (int k = 0; k < nb; k++) {
            struct md_param_info *b = &m->buffers[m->nbuffers++];
            MD_TRY(add_info(b, L, &d[k]));
            b->offset = soff;
            soff += b->numel;
        }
    }
    m->nstats = soff;
    layout_saved(m);
    return MD_OK;
}

/* compile: fold a lone activation into its producer when the producer takes
 * it (batchnorm and add take a ReLU) and the activation is its only consumer. */
static void fuse(struct md_model *m)
{
    for (int i = m->ninputs; i < m->nlayers; i++) {
        struct md_layer *L = &m->layers[i];
        int act = L->ops->lone_act ? L->ops->lone_act(L) : MD_ACT_NONE;
        if (act == MD_ACT_NONE) continue;
        struct md_layer *P = &m->layers[L->in[0]];
        if (!P->ops->fuse_act || P->nconsumers != 1 || P->alias >= 0 || !P->ops->fuse_act(P, act)) continue;
        L->alias = L->in[0];
        L->flops = 0;
        m->nfused++;
    }
}

/* compile: fold a two-operand sum (and its activation) into the producer of
 * one operand when that producer takes it (batchnorm: y = act(bn(x) + r)),
 * the sum is its only consumer, and the other operand is computed before it
 * (the later of two candidate producers is taken). The sum becomes an alias
 * of the producer, which gains the other operand as its second input. */
static md_status fuse_residuals(struct md_model *m)
{
    for (int i = m->ninputs; i < m->nlayers; i++) {
        struct md_layer *A = &m->layers[i];
        int act = A->ops->sum_act ? A->ops->sum_act(A) : -1;
        if (act < 0 || A->alias >= 0 || A->nin != 2) continue;
        int pick = -1;
        for (int k = 0; k < 2; k++) {
            int p = A->in[k], o = A->in[1 - k];
            const struct md_layer *P = &m->layers[p];
            if (p < m->ninputs || !P->ops->fuse_residual || P->nconsumers != 1 || P->alias >= 0 ||
                P->group != A->group || P->fold != A->fold || md_model_tensor_of(m, o) >= p)
                continue;
            if (pick < 0 || p > A->in[pick]) pick = k;
        }
        if (pick < 0) continue;
        struct md_layer *P = &m->layers[A->in[pick]];
        int *in = md_realloc(P->in, (size_t)(P->nin + 1) * sizeof *in);
        if (!in) return md_errf(MD_ERR_OOM, "model: out of host memory while fusing");
        P->in = in;
        if (!P->ops->fuse_residual(P, act)) continue;
        P->in[P->nin++] = A->in[1 - pick];
        P->flops += A->flops;
        A->flops = 0;
        A->alias = A->in[pick];
        m->nfused++;
    }
    return MD_OK;
}

/* The inputs of running layers (not aliases) that read tensor t. */
static int tensor_readers(const struct md_model *m, int t)
{
    int readers = 0;
    for (int j = m->ninputs; j < m->nlayers; j++) {
        if (m->layers[j].alias >= 0) continue;
        for (int k = 0; k < m->layers[j].nin; k++) readers += md_model_tensor_of(m, m->layers[j].in[k]) == t;
    }
    return readers;
}

/* bind (compile on): a 2x2 stride-2 max pool whose input tensor only it
 * reads goes into that tensor's producer when the producer takes it
 * (fuse_pool: a batch norm with its ReLU) and `on` (the device runs such a
 * batch norm); the pool becomes an alias of the producer, whose output is
 * then the pooled one. With `on` 0 such fusions are undone, so a model can
 * be bound again to a device without the kernel. Not with gradient
 * checkpointing (the pool and its producer may be in different segments). */
void md_model_fuse_pools(struct md_model *m, int on)
{
    if (!m->opts.compile || (on && m->opts.grad_ckpt)) return; /* checkpointing: segments stay as written */
    for (int i = m->ninputs; i < m->nlayers; i++) {
        struct md_layer *L = &m->layers[i];
        if (!L->ops->max_pool_2x2 || !L->ops->max_pool_2x2(L) || L->nin != 1) continue;
        if (!on) {
            if (L->alias < 0) continue;
            struct md_layer *P = &m->layers[L->alias];
            if (!P->ops->fuse_pool || !P->ops->fuse_pool(P, 0)) continue;
            P->out = m->layers[P->in[0]].out;
            P->flops -= L->pool_flops;
            L->flops = L->pool_flops;
            L->alias = -1;
            m->nfused--;
            continue;
        }
        if (L->alias >= 0) continue;
        int t = L->in[0], view = 0; /* the producer through fused activations, not through views */
        for (; m->layers[t].alias >= 0; t = m->layers[t].alias) view |= m->layers[t].view;
        if (view) continue;
        struct md_layer *P = &m->layers[t];
        struct md_shape x = m->layers[t].out;
        if (t < m->ninputs || t == m->nlayers - 1 || !P->ops->fuse_pool || P->nin != 1 || P->fold != L->fold ||
            x.h % 2 || x.w % 2 || x.h < 2 || x.w < 2)
            continue;
        if (tensor_readers(m, t) != 1 || !P->ops->fuse_pool(P, m->opts.layout == MD_NHWC ? 2 : 1)) continue;
        P->out = L->out;
        L->pool_flops = L->flops;
        P->flops += L->flops;
        L->flops = 0;
        L->alias = t;
        m->nfused++;
    }
    layout_saved(m); /* a fused pool keeps its routing */
}

/* bind (after the pools): a layer that takes it (fuse_filter: a batch norm
 * with a fused pool and its routing) computes in its backward the filter
 * gradient of the convolution that feeds it, when that convolution reads a
 * model input (no data gradient), has one group and no bias, its output is
 * read by that layer alone, and `on` (the device runs such a batch norm:
 * md_dev_batchnorm_pool_conv). The convolution's backward then does
 * nothing. With `on` 0, and before each decision, such hand-overs are
 * undone. */
void md_model_fuse_filters(struct md_model *m, int on)
{
    for (int i = m->ninputs; i < m->nlayers; i++) {
        struct md_layer *B = &m->layers[i];
        if (B->ops->fuse_filter && B->nin == 1 && m->layers[B->in[0]].filter_elsewhere) {
            B->ops->fuse_filter(B, 0);
            m->layers[B->in[0]].filter_elsewhere = 0;
        }
    }
    if (!on) return;
    for (int i = m->ninputs; i < m->nlayers; i++) {
        struct md_layer *B = &m->layers[i];
        if (!B->ops->fuse_filter || B->alias >= 0 || B->nin != 1) continue;
        int t = B->in[0];
        struct md_layer *P = &m->layers[t];
        if (t < m->ninputs || P->alias >= 0 || !P->ops->lone_filter || !P->ops->filter_args || P->nin != 1 ||
            P->in[0] >= m->ninputs || P->fold != B->fold)
            continue;
        int crs = P->ops->lone_filter(m, P);
        if (crs < 1 || crs > MD_BN_CONV_MAX_CRS) continue;
        if (tensor_readers(m, t) != 1 || !B->ops->fuse_filter(B, 1)) continue;
        P->filter_elsewhere = 1;
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

/* An input's "shape": [C, H, W] or [T, F] (a token sequence (T, 1, F)), each
 * an integer or a "$parameter". */
static md_status input_shape(struct build *b, const cJSON *sh0, const char *p, struct md_shape *out)
{
    cJSON *sh = cJSON_IsArray(sh0) ? cJSON_Duplicate(sh0, 1) : NULL;
    if (cJSON_IsArray(sh0) && !sh) return MD_ERR_OOM;
    md_status st = sh ? substitute(b, sh, NULL, p) : MD_OK;
    int nd = sh ? cJSON_GetArraySize(sh) : 0;
    int ok = st == MD_OK && (nd == 2 || nd == 3);
    double dims[3] = {1, 1, 1};
    for (int j = 0; ok && j < nd; j++) {
        const cJSON *v = cJSON_GetArrayItem(sh, j);
        ok = cJSON_IsNumber(v) && v->valuedouble >= 1 && v->valuedouble <= 65536 &&
             v->valuedouble == floor(v->valuedouble);
        if (ok) dims[nd == 2 && j == 1 ? 2 : j] = v->valuedouble;
    }
    cJSON_Delete(sh);
    if (st != MD_OK) return st;
    if (!ok)
        return md_errf(MD_ERR_CONFIG, "%s: %s.shape: must be [channels, height, width] or [tokens, features] "
                       "(integers 1..65536)", b->src, p);
    *out = (struct md_shape){(int)dims[0], (int)dims[1], (int)dims[2]};
    return MD_OK;
}

/* Input `in` (inputs[k], path p) is there: no "if", or one that is true
 * (after parameters); the first input always is. */
static md_status input_present(struct build *b, const cJSON *in, const char *p, int k, int *present)
{
    const cJSON *jif0 = cJSON_GetObjectItemCaseSensitive(in, "if");
    *present = 1;
    if (!jif0) return MD_OK;
    if (k == 0) return md_errf(MD_ERR_CONFIG, "%s: %s.if: the first input cannot be conditional", b->src, p);
    cJSON *w = cJSON_CreateObject();
    if (!w || !cJSON_AddItemToObject(w, "if", cJSON_Duplicate(jif0, 1))) {
        cJSON_Delete(w);
        return MD_ERR_OOM;
    }
    md_status st = substitute(b, w, NULL, p);
    const cJSON *jif = cJSON_GetObjectItemCaseSensitive(w, "if");
    if (st == MD_OK && !cJSON_IsBool(jif) && !cJSON_IsNumber(jif))
        st = md_errf(MD_ERR_CONFIG, "%s: %s.if: must be a boolean or a number (or a model parameter)", b->src, p);
    if (st == MD_OK) *present = !(cJSON_IsFalse(jif) || (cJSON_IsNumber(jif) && jif->valuedouble == 0));
    cJSON_Delete(w);
    return st;
}

/* The config's "params" (name: number) with the options' values set over
 * them: b->params. */
static md_status model_params(struct md_model *m, struct build *b, const cJSON *pp)
{
    if (pp && !cJSON_IsObject(pp))
        return md_errf(MD_ERR_CONFIG, "%s: params: must be an object of name: number", b->src);
    b->params = pp ? cJSON_Duplicate(pp, 1) : cJSON_CreateObject();
    if (!b->params) return MD_ERR_OOM;
    for (const cJSON *it = b->params->child; it; it = it->next)
        if (!cJSON_IsNumber(it) || !strcmp(it->string, "num_classes"))
            return md_errf(MD_ERR_CONFIG, "%s: params.%s: %s", b->src, it->string,
                           cJSON_IsNumber(it) ? "num_classes is set at the top level" : "must be a number");
    for (int k = 0; k < m->opts.nsets; k++) {
        const struct md_model_set *ms = &m->opts.sets[k];
        cJSON *it = cJSON_GetObjectItemCaseSensitive(b->params, ms->name);
        if (!it) {
            if (ms->if_present) continue;
            char have[256] = "";
            for (const cJSON *j = b->params->child; j; j = j->next)
                snprintf(have + strlen(have), sizeof have - strlen(have), "%s%s", have[0] ? ", " : "", j->string);
            return md_errf(MD_ERR_USAGE, "%s: the model has no parameter '%s' to set (%s%s)", b->src, ms->name,
                           have[0] ? "it has: " : "it has none", have);
        }
        cJSON_SetNumberValue(it, ms->value);
    }
    return MD_OK;
}

static md_status load_inner(struct md_model *m, struct build *b, const cJSON *root)
{
    static const char *const top[] = {"name", "description", "inputs", "blocks", "layers", "num_classes",
                                      "zero_init_residual", "params", "task", NULL};
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
    const char *task = NULL;
    if ((st = md_json_str(root, "task", "task", 0, &task)) != MD_OK) goto pfx;
    if ((st = model_params(m, b, cJSON_GetObjectItemCaseSensitive(root, "params"))) != MD_OK) return st;
    if (task && task[0] == '$') {
        /* a model parameter: 0 classification, anything else regression (the data may set it) */
        const cJSON *tp = cJSON_GetObjectItemCaseSensitive(b->params, task + 1);
        if (!tp)
            return md_errf(MD_ERR_CONFIG, "%s: task: unknown parameter '%s' (add it to \"params\": 0 "
                           "classification, 1 regression)", b->src, task + 1);
        if (!(m->task_param = md_strdup(task + 1))) return MD_ERR_OOM;
        m->regression = tp->valuedouble != 0;
    } else {
        if (task && strcmp(task, "classification") && strcmp(task, "regression"))
            return md_errf(MD_ERR_CONFIG, "%s: task: '%s' is not classification or regression (or a \"$parameter\")",
                           b->src, task);
        m->regression = task && !strcmp(task, "regression");
    }
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
            if (md_layer_find(bl->string))
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
    if (m->ninputs > MAX_LAYERS) return md_errf(MD_ERR_CONFIG, "%s: inputs: more than %d", b->src, MAX_LAYERS);
    struct md_shape *in_shape = md_calloc((size_t)m->ninputs, sizeof *in_shape);
    if (!in_shape) return MD_ERR_OOM;
    b->in_shape = in_shape;
    char absent[MAX_INPUTS] = {0};
    if (m->ninputs > MAX_INPUTS)
        return md_errf(MD_ERR_CONFIG, "%s: inputs: more than %d", b->src, MAX_INPUTS);
    int ii = 0;
    for (const cJSON *in = ins->child; in; in = in->next, ii++) {
        char p[64];
        snprintf(p, sizeof p, "inputs[%d]", ii);
        static const char *const ik[] = {"name", "shape", "if", NULL};
        const char *iname = NULL;
        if (!cJSON_IsObject(in)) return md_errf(MD_ERR_CONFIG, "%s: %s: must be an object", b->src, p);
        if ((st = md_json_only_keys(in, p, ik)) != MD_OK) goto pfx;
        if ((st = md_json_str(in, "name", p, 1, &iname)) != MD_OK) goto pfx;
        int present = 1;
        if ((st = input_present(b, in, p, ii, &present)) != MD_OK) return st;
        if (!present) {
            if (names_get(&b->names, iname))
                return md_errf(MD_ERR_CONFIG, "%s: %s.name: duplicate input name '%s'", b->src, p, iname);
            if ((st = names_put(&b->names, iname, "")) != MD_OK) return st;
            absent[ii] = 1;
            continue;
        }
        if ((st = input_shape(b, cJSON_GetObjectItemCaseSensitive(in, "shape"), p, &in_shape[ii])) != MD_OK)
            return st;
        double elems = (double)in_shape[ii].c * in_shape[ii].h * in_shape[ii].w;
        if (elems > (double)MAX_OUTPUT_ELEMS)
            return md_errf(MD_ERR_CONFIG, "%s: %s.shape: %.0f elements per sample, more than %lld", b->src, p, elems,
                           MAX_OUTPUT_ELEMS);
        if (ii >= MAX_LAYERS)
            return md_errf(MD_ERR_CONFIG, "%s: inputs: more than %d", b->src, MAX_LAYERS);
        if (names_get(&b->names, iname))
            return md_errf(MD_ERR_CONFIG, "%s: %s.name: duplicate input name '%s'", b->src, p, iname);
        if ((st = names_put(&b->names, iname, iname)) != MD_OK) return st;
    }
    for (int k = 0; k < ii; k++) m->ninputs -= absent[k];
    /* expand */
    const char *prev = b->names.val[0];
    int li = 0;
    for (const cJSON *l = layers->child; l; l = l->next, li++) {
        char p[64];
        snprintf(p, sizeof p, "layers[%d]", li);
        if ((st = expand_entry(b, l, p, NULL, NULL, &prev, 0)) != MD_OK) return st;
    }
    /* token sequences are (T, 1, F) in NCHW memory order: a model with a
     * token layer runs in NCHW whatever layout was asked (docs/transformers.md) */
    for (int i = 0; i < b->nspecs && m->opts.layout != MD_NCHW; i++) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(b->specs[i].obj, "type");
        const struct md_layer_ops *k = cJSON_IsString(t) ? md_layer_find(t->valuestring) : NULL;
        if (k && k->tokens) m->opts.layout = MD_NCHW;
    }
    /* layers: inputs, then the specs */
    m->nlayers = m->ninputs + b->nspecs;
    m->layers = md_calloc((size_t)m->nlayers, sizeof *m->layers);
    if (!m->layers) return MD_ERR_OOM;
    ii = 0;
    int ij = 0;
    for (const cJSON *in = ins->child; in; in = in->next, ij++) {
        if (absent[ij]) continue;
        struct md_layer *L = &m->layers[ii];
        L->out = in_shape[ij];
        ii++;
        L->name = md_strdup(cJSON_GetObjectItemCaseSensitive(in, "name")->valuestring);
        L->path = md_strdup("inputs");
        if (!L->name || !L->path) return MD_ERR_OOM;
        L->ops = &md_input_layer;
        L->type = "input";
        L->alias = -1;
        L->fold = 1;
        for (int k = 0; k < MD_LAYER_MAX_PARAMS; k++) L->param[k] = -1;
        L->group = -1;
        if (md_strmap_put(&b->layer_idx, L->name, ii - 1) != MD_OK) return MD_ERR_OOM;
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
    if (last->fold != 1)
        return md_errf(MD_ERR_CONFIG, "%s: %s: the last layer '%s' has %d items per sample (fold, from tiles): the "
                       "model's output needs one (add a regroup and a layer that pools the tiles)", b->src,
                       last->path, last->name, last->fold);
    long long outn = (long long)md_shape_numel(last->out);
    if (m->regression) {
        b->num_classes = 0;
    } else if (b->num_classes == 0) b->num_classes = (int)outn;
    if (!m->regression && (last->out.h != 1 || last->out.w != 1 || outn != b->num_classes))
        return md_errf(MD_ERR_CONFIG, "%s: %s: the last layer '%s' gives (%d, %d, %d) but the model has %d classes: "
                       "it must give (%d, 1, 1)", b->src, last->path, last->name, last->out.c, last->out.h, last->out.w,
                       b->num_classes, b->num_classes);
    m->num_classes = b->num_classes;
    if (m->opts.compile) {
        fuse(m);
        if ((st = fuse_residuals(m)) != MD_OK) return st;
    }
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
    cJSON_Delete(b.params);
    md_free(b.in_shape);
    md_strmap_free(&b.layer_idx);
    cJSON_Delete(root);
    md_model_free_host(m); /* never bound: no device memory */
    return st;
}

void md_model_free_host(struct md_model *m)
{
    if (!m) return;
    for (int i = 0; i < m->nlayers; i++) {
        md_free(m->layers[i].name);
        md_free(m->layers[i].path);
        md_free(m->layers[i].in);
        md_free(m->layers[i].args);
    }
    md_free(m->layers);
    for (int i = 0; i < m->ntensors; i++) md_free((char *)m->tensors[i].name);
    md_free(m->tensors);
    for (int i = 0; i < m->nbuffers; i++) md_free((char *)m->buffers[i].name);
    md_free(m->buffers);
    md_free(m->name);
    md_free(m->task_param);
    md_free(m->source);
    md_free(m);
}

/* ---- queries ----------------------------------------------------------------------- */

const char *md_model_name(const md_model *m) { return m->name; }
int md_model_num_inputs(const md_model *m) { return m->ninputs; }
const char *md_model_input_name(const md_model *m, int i) { return m->layers[i].name; }
void md_model_input_shape(const md_model *m, int i, int *c, int *h, int *w)
{
    *c = m->layers[i].out.c;
    *h = m->layers[i].out.h;
    *w = m->layers[i].out.w;
}
int md_model_num_classes(const md_model *m) { return m->num_classes; }
int md_model_is_regression(const md_model *m) { return m->regression; }
const char *md_model_task_param(const md_model *m) { return m->task_param; }
void md_model_output_shape(const md_model *m, int *c, int *h, int *w)
{
    struct md_shape s = m->layers[m->nlayers - 1].out;
    *c = s.c, *h = s.h, *w = s.w;
}
size_t md_model_nparams(const md_model *m) { return m->nparams; }
size_t md_model_ndecay(const md_model *m) { return m->ndecay; }
double md_model_flops_fwd(const md_model *m) { return m->flops_fwd; }
double md_model_flops_train(const md_model *m) { return 3.0 * m->flops_fwd; }
int md_model_num_layers(const md_model *m) { return m->nlayers - m->ninputs; }

double md_model_layer_flops(const md_model *m, int i) { return m->layers[m->ninputs + i].flops; }

/* passes: over input-sized and output-sized tensors, and over the parameters */
static double layer_bytes(const md_model *m, int i, int batch, double in_passes, double out_passes, double p_passes)
{
    const struct md_layer *L = &m->layers[m->ninputs + i];
    if (L->alias >= 0) return 0;
    double es = (double)md_dtype_size(m->opts.compute_dtype), in = 0;
    for (int k = 0; k < L->nin; k++) {
        const struct md_layer *I = &m->layers[L->in[k]];
        double e = (double)md_shape_numel(I->out) * I->fold;
        in += L->in[k] < m->ninputs ? e * 4 / es : e; /* the model's inputs are fp32 */
    }
    double out = (double)md_shape_numel(L->out) * L->fold;
    return (in * in_passes + out * out_passes) * es * batch + (double)L->nparams * es * p_passes;
}

double md_model_layer_bytes(const md_model *m, int i, int batch) { return layer_bytes(m, i, batch, 1, 1, 1); }

double md_model_layer_step_bytes(const md_model *m, int i, int batch)
{
    const struct md_layer *L = &m->layers[m->ninputs + i];
    double in = 3, out = 3;
    if (L->ops->step_passes) L->ops->step_passes(L, &in, &out);
    return layer_bytes(m, i, batch, in, out, 3);
}
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

int md_model_dropout(const md_model *m, double *p_min, double *p_max)
{
    int n = 0;
    *p_min = *p_max = 0;
    for (int i = m->ninputs; i < m->nlayers; i++) {
        const struct md_layer *L = &m->layers[i];
        double p;
        if (!L->ops->dropout || !L->ops->dropout(L, &p)) continue;
        p = round(p * 1e6) / 1e6; /* as configured, not float's 0.10000000149 */
        if (n == 0 || p < *p_min) *p_min = p;
        if (n == 0 || p > *p_max) *p_max = p;
        n++;
    }
    return n;
}
