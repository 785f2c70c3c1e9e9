/* transfer.c - --init-from with name maps, resized position embeddings and a
 * partial-load report; the head and --freeze selections (transfer.h). */
#define _POSIX_C_SOURCE 200809L
#include "nn/transfer.h"

#include <fnmatch.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "core/safetensors.h"
#include "core/tensor.h"
#include "nn/model_impl.h"
#include "nn/name_map.h"

/* ---- bicubic resize (PyTorch's upsample_bicubic2d, align_corners=False) -------------- */

#define CUBIC_A (-0.75)

static double cubic1(double x) { return ((CUBIC_A + 2) * x - (CUBIC_A + 3)) * x * x + 1; }
static double cubic2(double x) { return ((CUBIC_A * x - 5 * CUBIC_A) * x + 8 * CUBIC_A) * x - 4 * CUBIC_A; }

/* Taps and weights of output index o along an axis of `in` -> `out`. */
static void cubic_taps(int o, int in, int out, int idx[4], double w[4])
{
    double real = ((double)in / out) * (o + 0.5) - 0.5;
    int i = (int)floor(real); /* -1 at the first output: not clamped (PyTorch's CPU kernel) */
    double t = real - i;
    w[0] = cubic2(t + 1);
    w[1] = cubic1(t);
    w[2] = cubic1(1 - t);
    w[3] = cubic2(2 - t);
    for (int k = 0; k < 4; k++) {
        int j = i - 1 + k;
        idx[k] = j < 0 ? 0 : j > in - 1 ? in - 1 : j;
    }
}

void md_pos_resize_bicubic(const float *src, int gh, int gw, int d, float *dst, int oh, int ow)
{
    for (int oy = 0; oy < oh; oy++) {
        int iy[4];
        double wy[4];
        cubic_taps(oy, gh, oh, iy, wy);
        for (int ox = 0; ox < ow; ox++) {
            int ix[4];
            double wx[4];
            cubic_taps(ox, gw, ow, ix, wx);
            for (int c = 0; c < d; c++) {
                double acc = 0;
                for (int a = 0; a < 4; a++) {
                    double row = 0;
                    for (int b = 0; b < 4; b++) row += wx[b] * (double)src[((size_t)iy[a] * gw + ix[b]) * d + c];
                    acc += wy[a] * row;
                }
                dst[((size_t)oy * ow + ox) * d + c] = (float)acc;
            }
        }
    }
}

/* ---- the report --------------------------------------------------------------------- */

static md_status list_add(struct md_name_list *l, const char *s)
{
    if (l->n == l->cap) {
        int cap = l->cap ? 2 * l->cap : 16;
        char **p = md_realloc(l->items, (size_t)cap * sizeof *p);
        if (!p) return md_errf(MD_ERR_OOM, "out of host memory");
        l->items = p;
        l->cap = cap;
    }
    size_t n = strlen(s) + 1;
    char *c = md_malloc(n);
    if (!c) return md_errf(MD_ERR_OOM, "out of host memory");
    memcpy(c, s, n);
    l->items[l->n++] = c;
    return MD_OK;
}

static void list_free(struct md_name_list *l)
{
    for (int i = 0; i < l->n; i++) md_free(l->items[i]);
    md_free(l->items);
    memset(l, 0, sizeof *l);
}

void md_load_report_free(struct md_load_report *rep)
{
    if (!rep) return;
    list_free(&rep->loaded);
    list_free(&rep->resized);
    list_free(&rep->resized_how);
    list_free(&rep->skipped);
    list_free(&rep->fresh);
    list_free(&rep->head_reinit);
    list_free(&rep->head_how);
}

#define SHOWN 4

static void print_list(const char *what, const struct md_name_list *l)
{
    if (l->n == 0) return;
    char buf[1024];
    size_t o = 0;
    for (int i = 0; i < l->n && i < SHOWN && o < sizeof buf; i++)
        o += (size_t)snprintf(buf + o, sizeof buf - o, "%s%s", i ? ", " : "", l->items[i]);
    md_out("    %s: %s%s\n", what, buf, l->n > SHOWN ? ", ..." : "");
}

void md_load_report_print(const struct md_load_report *rep)
{
    md_out("  Initial weights from %s (%s naming%s):\n"
           "    %d loaded, %d resized, %d skipped (not in the model), %d newly initialised (not in the file)\n",
           rep->path, md_naming_name(rep->naming), rep->detected ? ", detected" : "", rep->loaded.n, rep->resized.n,
           rep->skipped.n, rep->fresh.n);
    for (int i = 0; i < rep->resized.n; i++)
        md_out("    resized %s: %s (bicubic)\n", rep->resized.items[i], rep->resized_how.items[i]);
    for (int i = 0; i < rep->head_reinit.n; i++)
        md_out("    head %s re-initialised: %s\n", rep->head_reinit.items[i], rep->head_how.items[i]);
    print_list("skipped", &rep->skipped);
    print_list("newly initialised", &rep->fresh);
}

static cJSON *list_json(const struct md_name_list *l)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < l->n; i++) cJSON_AddItemToArray(a, cJSON_CreateString(l->items[i]));
    return a;
}

static cJSON *pairs_json(const struct md_name_list *names, const struct md_name_list *how)
{
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < names->n; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", names->items[i]);
        cJSON_AddStringToObject(o, "change", how->items[i]);
        cJSON_AddItemToArray(a, o);
    }
    return a;
}

cJSON *md_load_report_json(const struct md_load_report *rep)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "file", rep->path);
    cJSON_AddStringToObject(o, "naming", md_naming_name(rep->naming));
    cJSON_AddBoolToObject(o, "naming_detected", rep->detected);
    cJSON *c = cJSON_AddObjectToObject(o, "counts");
    cJSON_AddNumberToObject(c, "loaded", rep->loaded.n);
    cJSON_AddNumberToObject(c, "resized", rep->resized.n);
    cJSON_AddNumberToObject(c, "skipped", rep->skipped.n);
    cJSON_AddNumberToObject(c, "newly_initialised", rep->fresh.n);
    cJSON_AddNumberToObject(c, "head_reinitialised", rep->head_reinit.n);
    cJSON_AddItemToObject(o, "loaded", list_json(&rep->loaded));
    cJSON_AddItemToObject(o, "resized", pairs_json(&rep->resized, &rep->resized_how));
    cJSON_AddItemToObject(o, "skipped", list_json(&rep->skipped));
    cJSON_AddItemToObject(o, "newly_initialised", list_json(&rep->fresh));
    cJSON_AddItemToObject(o, "head_reinitialised", pairs_json(&rep->head_reinit, &rep->head_how));
    return o;
}

/* ---- head and freeze ------------------------------------------------------------------ */

static int is_head_name(const char *layer)
{
    return !strcmp(layer, "head") || !strncmp(layer, "head.", 5);
}

/* The graph position of tensor t's layer (tensors are ordered decayed first, not by layer). */
static int layer_pos(const md_model *m, int t)
{
    for (int i = 0; i < m->nlayers; i++)
        if (m->layers[i].name && !strcmp(m->layers[i].name, m->tensors[t].layer)) return i;
    return -1;
}

void md_model_head_mask(const md_model *m, uint8_t *out)
{
    int named = 0, last = -1;
    for (int t = 0; t < m->ntensors; t++) named |= (out[t] = (uint8_t)is_head_name(m->tensors[t].layer));
    if (named) return;
    for (int t = 0; t < m->ntensors; t++)
        if (layer_pos(m, t) > last) last = layer_pos(m, t);
    for (int t = 0; t < m->ntensors; t++) out[t] = (uint8_t)(layer_pos(m, t) == last);
}

/* The first numbered component of a name ("blocks.3.attn" -> 3), or -1. */
/* The first numbered component of a name ("blocks.3.attn" -> 3), or -1; *stream
 * is the length of the name before the component that holds the blocks
 * ("backbone_left.blocks.3.attn" -> strlen("backbone_left."), "blocks.3" -> 0). */
static int block_index_at(const char *name, size_t *stream)
{
    for (const char *p = name; *p; p++) {
        if ((p == name || p[-1] == '.') && *p >= '0' && *p <= '9') {
            char *end;
            long v = strtol(p, &end, 10);
            if (*end == '.' || *end == '\0') {
                const char *q = p > name ? p - 1 : p; /* the '.' before the number */
                while (q > name && q[-1] != '.') q--;
                *stream = (size_t)(q - name);
                return (int)v;
            }
        }
    }
    *stream = 0;
    return -1;
}

/* The stream (longest prefix among streams[]) a tensor name belongs to, or -1. */
static int stream_of(const char *name, char streams[][128], int n)
{
    int best = -1;
    for (int s = 0; s < n; s++)
        if (!strncmp(name, streams[s], strlen(streams[s])) && (best < 0 || strlen(streams[s]) > strlen(streams[best])))
            best = s;
    return best;
}


static int glob_selects(const char *pat, const char *name)
{
    if (fnmatch(pat, name, 0) == 0) return 1;
    char pre[512];
    size_t n = strlen(name);
    for (size_t k = 0; k < n && k < sizeof pre; k++) {
        if (name[k] != '.') continue;
        memcpy(pre, name, k);
        pre[k] = '\0';
        if (fnmatch(pat, pre, 0) == 0) return 1;
    }
    return 0;
}

static md_status freeze_item(const md_model *m, const char *item, uint8_t *frozen)
{
    int hit = 0;
    if (!strcmp(item, "backbone")) {
        uint8_t *head = md_malloc((size_t)m->ntensors + 1);
        if (!head) return md_errf(MD_ERR_OOM, "out of host memory");
        md_model_head_mask(m, head);
        for (int t = 0; t < m->ntensors; t++)
            if (!head[t]) frozen[t] = 1, hit = 1;
        md_free(head);
    } else if (!strncmp(item, "all-but-last:", 13)) {
        char *end;
        long n = strtol(item + 13, &end, 10);
        if (end == item + 13 || *end || n < 0)
            return md_errf(MD_ERR_USAGE, "--freeze: '%s': expected all-but-last:N with N >= 0 blocks", item);
        /* per backbone: the blocks under "S<name>.N." belong to the stream S
         * ("" for a plain ViT, "backbone." or "backbone_left." in the two-stream
         * models); each stream freezes what precedes its own last N blocks */
        char streams[8][128];
        int nstreams = 0, nblocks[8] = {0}, boundary[8];
        for (int t = 0; t < m->ntensors; t++) {
            size_t sl;
            int b = block_index_at(m->tensors[t].name, &sl), s;
            if (b < 0 || sl >= sizeof streams[0]) continue;
            for (s = 0; s < nstreams; s++)
                if (strlen(streams[s]) == sl && !strncmp(streams[s], m->tensors[t].name, sl)) break;
            if (s == nstreams) {
                if (nstreams == 8) continue;
                memcpy(streams[s], m->tensors[t].name, sl);
                streams[s][sl] = '\0';
                nstreams++;
            }
            if (b + 1 > nblocks[s]) nblocks[s] = b + 1;
        }
        if (nstreams == 0)
            return md_errf(MD_ERR_USAGE, "--freeze: '%s': model %s has no numbered blocks (names like blocks.0.*)",
                           item, m->name);
        /* frozen: every layer of the stream before the first one left trainable
         * (the first of block nblocks - N, or, for N = 0, the first after the last block) */
        for (int s = 0; s < nstreams; s++) boundary[s] = n == 0 ? -1 : m->nlayers;
        for (int t = 0; t < m->ntensors; t++) {
            size_t sl;
            int b = block_index_at(m->tensors[t].name, &sl), pos = layer_pos(m, t);
            int s = stream_of(m->tensors[t].name, streams, nstreams);
            if (b < 0 || s < 0 || strlen(streams[s]) != sl) continue;
            if (n == 0 && pos + 1 > boundary[s]) boundary[s] = pos + 1;
            if (n > 0 && b >= nblocks[s] - n && pos < boundary[s]) boundary[s] = pos;
        }
        for (int t = 0; t < m->ntensors; t++) {
            int s = stream_of(m->tensors[t].name, streams, nstreams);
            if (s >= 0 && layer_pos(m, t) < boundary[s]) frozen[t] = 1;
        }
        hit = 1; /* N >= the blocks: only what precedes the first block */
    } else {
        for (int t = 0; t < m->ntensors; t++)
            if (glob_selects(item, m->tensors[t].name)) frozen[t] = 1, hit = 1;
    }
    if (!hit) return md_errf(MD_ERR_USAGE, "--freeze: '%s' selects no parameter of model %s", item, m->name);
    return MD_OK;
}

md_status md_model_freeze_mask(const md_model *m, const char *spec, uint8_t *frozen)
{
    memset(frozen, 0, (size_t)m->ntensors);
    char buf[1024];
    snprintf(buf, sizeof buf, "%s", spec);
    char *save = NULL;
    int any = 0;
    for (char *item = strtok_r(buf, ",", &save); item; item = strtok_r(NULL, ",", &save)) {
        while (*item == ' ') item++;
        if (!*item) continue;
        MD_TRY(freeze_item(m, item, frozen));
        any = 1;
    }
    if (!any) return md_errf(MD_ERR_USAGE, "--freeze: empty pattern");
    return MD_OK;
}

/* ---- loading ---------------------------------------------------------------------------- */

static void shape_str(const long long *s, int nd, char *out, size_t n)
{
    size_t o = (size_t)snprintf(out, n, "(");
    for (int k = 0; k < nd && o < n; k++) o += (size_t)snprintf(out + o, n - o, "%s%lld", k ? ", " : "", s[k]);
    if (o < n) snprintf(out + o, n - o, nd == 1 ? ",)" : ")");
}

static int file_index(const md_st_file *f, const struct md_st_tensor *t)
{
    for (int i = 0; i < md_st_count(f); i++)
        if (md_st_at(f, i) == t) return i;
    return -1;
}

/* The file's tensor `name` (HF: also under the "dinov2." or
 * "dinov2_with_registers." prefix of the image-classification wrappers). */
static const struct md_st_tensor *find(const md_st_file *f, int naming, const char *name)
{
    const struct md_st_tensor *t = md_st_find(f, name);
    if (t || naming != MD_NAMES_HF) return t;
    static const char *const wrappers[] = {"dinov2.", "dinov2_with_registers."};
    for (size_t k = 0; !t && k < sizeof wrappers / sizeof wrappers[0]; k++) {
        char pre[300];
        snprintf(pre, sizeof pre, "%s%s", wrappers[k], name);
        t = md_st_find(f, pre);
    }
    return t;
}

/* Elements of a file tensor as fp32 into dst. */
static md_status read_f32(const md_st_file *f, const struct md_st_tensor *t, float *dst)
{
    if (t->dtype == MD_F32) {
        memcpy(dst, t->data, (size_t)t->numel * 4);
        return MD_OK;
    }
    if (t->dtype != MD_F16 && t->dtype != MD_BF16)
        return md_errf(MD_ERR_DATA, "%s: tensor '%s' is %s; weights must be F32, F16 or BF16", md_st_path(f),
                       t->name, t->dtype_name);
    for (long long i = 0; i < t->numel; i++) {
        uint16_t h;
        memcpy(&h, (const char *)t->data + 2 * i, 2);
        dst[i] = md_load_f(&h, t->dtype, 0);
    }
    return MD_OK;
}

/* The file tensor's shape with leading 1s squeezed down to `want` dims. */
static int squeezed(const struct md_st_tensor *t, int want, long long *s)
{
    int nd = t->ndim, k0 = 0;
    while (nd - k0 > want && t->shape[k0] == 1) k0++;
    for (int k = k0; k < nd; k++) s[k - k0] = t->shape[k];
    return nd - k0;
}

static int isqrt_exact(long long n)
{
    long long r = (long long)llround(sqrt((double)n));
    return r * r == n && r > 0 ? (int)r : 0;
}

/* Everything one model tensor's load needs to know. */
struct load_ctx {
    md_model *m;
    const md_st_file *f;
    int naming;
    float *host;         /* (nparams) PyTorch order */
    uint8_t *used;       /* (file tensors) */
    const uint8_t *head; /* (ntensors) */
    struct md_load_report *rep;
    float *cls_row;      /* (d) a position embedding's class-token row, or NULL */
    int cls_row_d;
    uint8_t *cls_took;   /* (ntensors) 1: took the class token from the file (one per backbone) */
};

static md_status mismatch(struct load_ctx *c, int t, const char *fname, const long long *fs, int fnd, int *done)
{
    const struct md_param_info *ti = &c->m->tensors[t];
    char a[96], b[96], how[256];
    long long ms[4];
    for (int k = 0; k < ti->ndim; k++) ms[k] = ti->shape[k];
    shape_str(fs, fnd, a, sizeof a);
    shape_str(ms, ti->ndim, b, sizeof b);
    if (!c->head[t])
        return md_errf(MD_ERR_DATA, "%s: tensor '%s' is %s in the file but the model's '%s' is %s", md_st_path(c->f),
                       fname, a, ti->name, b);
    snprintf(how, sizeof how, "file %s, model %s", a, b);
    MD_TRY(list_add(&c->rep->head_reinit, ti->name));
    MD_TRY(list_add(&c->rep->head_how, how));
    MD_TRY(list_add(&c->rep->fresh, ti->name));
    *done = 1;
    return MD_OK;
}

/* A position embedding: (1, [npre +] Nf, D) in the file, (Nm, D) in the model. */
static md_status load_pos(struct load_ctx *c, int t, const struct md_st_tensor *ft, int hf, int *done)
{
    const struct md_param_info *ti = &c->m->tensors[t];
    long long s[MD_ST_MAX_DIMS];
    int nd = squeezed(ft, 2, s);
    if (nd != 2 || ti->ndim != 2 || s[1] != ti->shape[1]) return mismatch(c, t, ft->name, s, nd, done);
    long long nf = s[0], nm = ti->shape[0], d = s[1];
    /* a class-token row 0: always in HF's; in others when the rows are one more than a square grid */
    int npre = hf ? 1 : nf == nm ? 0 : nf - 1 == nm || (!isqrt_exact(nf) && isqrt_exact(nf - 1)) ? 1 : 0;
    if (nf - npre <= 0) return mismatch(c, t, ft->name, s, nd, done);
    float *all = md_malloc((size_t)(nf * d) * 4 + 4);
    if (!all) return md_errf(MD_ERR_OOM, "out of host memory");
    md_status st = read_f32(c->f, ft, all);
    if (st != MD_OK) goto out;
    if (npre) {
        md_free(c->cls_row);
        c->cls_row = md_malloc((size_t)d * 4);
        if (!c->cls_row) { st = md_errf(MD_ERR_OOM, "out of host memory"); goto out; }
        memcpy(c->cls_row, all, (size_t)d * 4);
        c->cls_row_d = (int)d;
    }
    float *dst = c->host + ti->offset;
    if (nf - npre == nm) {
        memcpy(dst, all + npre * d, (size_t)(nm * d) * 4);
        st = list_add(&c->rep->loaded, ti->name);
        goto out;
    }
    int gf = isqrt_exact(nf - npre), gm = isqrt_exact(nm);
    if (!gf || !gm) { /* only square grids are resized */
        st = mismatch(c, t, ft->name, s, nd, done);
        goto out;
    }
    md_pos_resize_bicubic(all + npre * d, gf, gf, (int)d, dst, gm, gm);
    char a[96], b[96], how[256];
    long long ms[2] = {nm, d};
    shape_str(ft->shape, ft->ndim, a, sizeof a);
    shape_str(ms, 2, b, sizeof b);
    snprintf(how, sizeof how, "%s -> %s, grid %dx%d -> %dx%d", a, b, gf, gf, gm, gm);
    if ((st = list_add(&c->rep->resized, ti->name)) == MD_OK) st = list_add(&c->rep->resized_how, how);
out:
    md_free(all);
    *done = 1;
    return st;
}

/* Model tensor t from the file(s) `names` (n of them: stacked along dim 0). 0 in *done when absent. */
static md_status load_from(struct load_ctx *c, int t, char names[][256], int n, int op, int *done)
{
    const struct md_param_info *ti = &c->m->tensors[t];
    const struct md_st_tensor *ft[3];
    *done = 0;
    for (int k = 0; k < n; k++)
        if (!(ft[k] = find(c->f, c->naming, names[k]))) return MD_OK;
    for (int k = 0; k < n; k++) c->used[file_index(c->f, ft[k])] = 1;
    if (op == MD_MAP_POS || !strcmp(ti->layer_type, "pos_embedding"))
        return load_pos(c, t, ft[0], op == MD_MAP_POS && c->naming == MD_NAMES_HF, done);
    long long rows = 0, s[MD_ST_MAX_DIMS];
    int nd = 0;
    for (int k = 0; k < n; k++) {
        nd = squeezed(ft[k], ti->ndim, s);
        int same = nd == ti->ndim;
        for (int j = 1; same && j < nd; j++) same = s[j] == ti->shape[j];
        if (!same || (n > 1 && s[0] * n != ti->shape[0])) return mismatch(c, t, ft[k]->name, s, nd, done);
        rows += s[0];
    }
    if (rows != ti->shape[0]) return mismatch(c, t, ft[0]->name, s, nd, done);
    float *dst = c->host + ti->offset;
    for (int k = 0; k < n; k++) {
        MD_TRY(read_f32(c->f, ft[k], dst));
        dst += ft[k]->numel;
    }
    if (op == MD_MAP_CLS) c->cls_took[t] = 1;
    *done = 1;
    return list_add(&c->rep->loaded, ti->name);
}

/* `name` (the model's) and `canon` (md_name_canonical of it) looked up in the
 * file's naming; *done when one loaded. */
static md_status load_names(struct load_ctx *c, int t, const char *name, const char *canon, int *done)
{
    const struct md_param_info *ti = &c->m->tensors[t];
    char names[3][256];
    int n, op;
    if (c->naming == MD_NAMES_OURS) {
        snprintf(names[0], 256, "%s", name);
        MD_TRY(load_from(c, t, names, 1, MD_MAP_COPY, done));
        if (!*done && ti->stacked_from) { /* separate projections (the iTransformer's) */
            int k = 0;
            for (; ti->stacked_from[k] && k < 3; k++) snprintf(names[k], 256, "%s.%s", ti->layer, ti->stacked_from[k]);
            MD_TRY(load_from(c, t, names, k, MD_MAP_COPY, done));
        }
        if (!*done && strcmp(canon, name)) {
            snprintf(names[0], 256, "%s", canon);
            MD_TRY(load_from(c, t, names, 1, MD_MAP_COPY, done));
        }
    } else {
        op = md_name_map(c->naming, canon, names, &n);
        MD_TRY(load_from(c, t, names, n, op, done));
        if (!*done && strcmp(canon, name)) { /* a file of mixed names: ours as a fallback */
            snprintf(names[0], 256, "%s", name);
            MD_TRY(load_from(c, t, names, 1, MD_MAP_COPY, done));
        }
    }
    return MD_OK;
}

/* The length of a leading "backbone.", "backbone_left.", ... (a backbone
 * under a prefix, as the two-stream tiled configs have), else 0. */
static size_t backbone_prefix(const char *name)
{
    if (strncmp(name, "backbone", 8)) return 0;
    const char *dot = strchr(name, '.');
    return dot && dot[1] ? (size_t)(dot - name) + 1 : 0;
}

static md_status load_one(struct load_ctx *c, int t)
{
    const struct md_param_info *ti = &c->m->tensors[t];
    char canon[512];
    int done = 0;
    md_name_canonical(ti->name, ti->layer_type, canon, sizeof canon);
    MD_TRY(load_names(c, t, ti->name, canon, &done));
    /* not in the file under its own name: a plain ViT's weights for a backbone under a prefix */
    size_t pl = backbone_prefix(ti->name);
    if (!done && pl && !strncmp(canon, ti->name, pl)) MD_TRY(load_names(c, t, ti->name + pl, canon + pl, &done));
    if (!done) MD_TRY(list_add(&c->rep->fresh, ti->name));
    return MD_OK;
}

/* Checkpoint state that is not the model's and is never reported as skipped. */
static int ignorable(const char *name)
{
    size_t n = strlen(name);
    return !strncmp(name, "__optim__.", 10) || (n >= 19 && !strcmp(name + n - 19, "num_batches_tracked"));
}

md_status md_model_load_transfer(md_model *m, const char *path, int naming, struct md_load_report *rep)
{
    md_status st = MD_OK;
    md_st_file *f = NULL;
    float *host = NULL, *stats = NULL, *tmp = NULL;
    uint8_t *used = NULL, *head = NULL;
    memset(rep, 0, sizeof *rep);
    snprintf(rep->path, sizeof rep->path, "%s", path);
    struct load_ctx c = {.m = m, .rep = rep};
    int krsc = 0;
    if ((st = md_st_open(path, &f)) != MD_OK) goto fail;
    if ((st = md_st_filter_layout(f, &krsc)) != MD_OK) goto fail;
    rep->naming = naming == MD_NAMES_AUTO ? md_naming_detect(f) : naming;
    rep->detected = naming == MD_NAMES_AUTO;
    host = md_malloc(m->nparams * sizeof *host + 4);
    stats = md_malloc(m->nstats * sizeof *stats + 4);
    used = md_calloc((size_t)md_st_count(f) + 1, 1);
    head = md_malloc((size_t)m->ntensors + 1);
    c.cls_took = md_calloc((size_t)m->ntensors + 1, 1);
    if (!host || !stats || !used || !head || !c.cls_took) { st = md_errf(MD_ERR_OOM, "%s: out of host memory", path); goto fail; }
    md_model_head_mask(m, head);
    if ((st = md_model_get_params_host(m, host)) != MD_OK) goto fail; /* the initial values stay where nothing loads */
    c.f = f;
    c.naming = rep->naming;
    c.host = host;
    c.used = used;
    c.head = head;
    for (int t = 0; t < m->ntensors; t++)
        if ((st = load_one(&c, t)) != MD_OK) goto fail;
    for (int t = 0; c.cls_row && t < m->ntensors; t++)
        if (c.cls_took[t] && (int)m->tensors[t].numel == c.cls_row_d)
            for (int k = 0; k < c.cls_row_d; k++) host[m->tensors[t].offset + k] += c.cls_row[k];
    if (rep->loaded.n + rep->resized.n == 0) {
        st = md_errf(MD_ERR_DATA, "%s: none of the %d parameter tensors of model %s is in the file (read with %s "
                     "names; see --init-names)", path, m->ntensors, m->name, md_naming_name(rep->naming));
        goto fail;
    }
    /* a checkpoint of an earlier channels-last run: its filters are (K, R, S, C/g) */
    if (krsc) {
        size_t most = 1;
        for (int t = 0; t < m->ntensors; t++)
            if (m->tensors[t].ndim == 4 && m->tensors[t].numel > most) most = m->tensors[t].numel;
        if (!(tmp = md_malloc(most * 4))) { st = md_errf(MD_ERR_OOM, "%s: out of host memory", path); goto fail; }
        for (int t = 0; t < m->ntensors; t++) {
            const struct md_param_info *ti = &m->tensors[t];
            if (ti->ndim == 4)
                md_filter_permute(host + ti->offset, tmp, ti->shape[0], ti->shape[1], ti->shape[2] * ti->shape[3], 0);
        }
    }
    if ((st = md_dev_download(m->dev, stats, m->bn_stats, m->nstats * 4)) != MD_OK) goto fail;
    if ((st = md_dev_sync(m->dev)) != MD_OK) goto fail;
    for (int b = 0; b < m->nbuffers; b++) {
        const struct md_param_info *bi = &m->buffers[b];
        const struct md_st_tensor *ft = md_st_find(f, bi->name);
        if (!ft) continue;
        used[file_index(f, ft)] = 1;
        long long shape[1] = {bi->shape[0]};
        if ((st = md_st_copy(f, bi->name, MD_F32, 1, shape, stats + bi->offset)) != MD_OK) goto fail;
    }
    for (int i = 0; i < md_st_count(f); i++)
        if (!used[i] && !ignorable(md_st_at(f, i)->name) && (st = list_add(&rep->skipped, md_st_at(f, i)->name)) != MD_OK)
            goto fail;
    if ((st = md_model_set_params_host(m, host)) != MD_OK) goto fail;
    st = md_dev_upload(m->dev, m->bn_stats, stats, m->nstats * 4);
fail:
    if (st != MD_OK) md_err_prefix("--init-from");
    md_free(c.cls_row);
    md_free(host);
    md_free(stats);
    md_free(tmp);
    md_free(used);
    md_free(head);
    md_free(c.cls_took);
    md_st_close(f);
    return st;
}
