/* model_summary.c - the per-layer summary of a model: the printed table
 * (md_model_print_summary) and report["model"] (md_model_summary_json).
 * It reads the graph (model.c) and the planned activation bytes
 * (model_exec.c), so it sits above both. */
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "nn/layer.h"

static const char *fmt_flops(double f, char *buf, size_t n)
{
    if (f >= 1e9) snprintf(buf, n, "%.2f GFLOPs", f / 1e9);
    else if (f >= 1e6) snprintf(buf, n, "%.2f MFLOPs", f / 1e6);
    else if (f >= 1e3) snprintf(buf, n, "%.2f KFLOPs", f / 1e3);
    else snprintf(buf, n, "%.0f FLOPs", f);
    return buf;
}

static void layer_type(const struct md_layer *L, char *type, size_t n)
{
    if (L->alias >= 0 && !L->view) snprintf(type, n, "%s (fused)", L->type);
    else if (L->ops->describe) L->ops->describe(L, type, n);
    else snprintf(type, n, "%s", L->type);
}

static void layer_shape(const struct md_layer *L, char *shape, size_t n)
{
    if (L->fold != 1) snprintf(shape, n, "%dx(%dx%dx%d)", L->fold, L->out.c, L->out.h, L->out.w);
    else snprintf(shape, n, "%dx%dx%d", L->out.c, L->out.h, L->out.w);
}

/* Length of the group key of `name` at depth d: the name up to its d-th '.',
 * or 0 when it has fewer dots (a layer of its own). */
static size_t group_key(const char *name, int d)
{
    const char *p = name;
    for (int k = 0; k < d; k++) {
        p = strchr(p, '.');
        if (!p) return 0;
        if (k + 1 < d) p++;
    }
    return (size_t)(p - name);
}

static int same_group(const char *a, const char *b, int d)
{
    size_t ka = group_key(a, d), kb = group_key(b, d);
    return ka && ka == kb && strncmp(a, b, ka) == 0;
}

#define NAME_W 30  /* the name column; longer names keep their end */
#define TYPE_W 14  /* the type column at least */
#define GROUP_MAX 40 /* a larger group made of named parts (a trunk) is split */

/* True when the layer's name goes on below depth d with a part that is not a
 * number: "color.stem.conv" at depth 1 (a trunk's parts), not "layer3.0.conv1"
 * (the repeats of one block). */
static int named_parts(const char *name, int d)
{
    size_t k = group_key(name, d);
    if (!k || name[k] != '.') return 0;
    return !(name[k + 1] >= '0' && name[k + 1] <= '9');
}

static void print_row(int wname, int wtype, const char *name, const char *type, const char *shape, long long params,
                      double flops)
{
    char a[32], b[32], cut[64];
    int len = (int)strlen(name);
    if (len > wname) { /* the name's end, after an ellipsis (3 bytes, 1 column) */
        snprintf(cut, sizeof cut, "\xe2\x80\xa6%s", name + len - (wname - 1));
        name = cut;
        wname += 2;
    }
    md_out("  %-*s  %-*.*s  %-16s  %12s  %12s\n", wname, name, wtype, wtype, type, shape,
           md_fmt_thousands(params, a, sizeof a), flops > 0 ? fmt_flops(flops, b, sizeof b) : "-");
}

/* Rows for layers [lo, hi): runs of layers sharing the name's first d parts
 * become one row (layer count, last layer's output, sums); a run of more than
 * GROUP_MAX layers whose names go on with named parts is split one level
 * deeper. Returns the rows printed. */
static int print_groups(const md_model *m, int lo, int hi, int d, int wname, int wtype)
{
    int rows = 0;
    for (int i = lo; i < hi;) {
        const struct md_layer *L = &m->layers[i];
        int j = i + 1;
        while (j < hi && same_group(L->name, m->layers[j].name, d)) j++;
        char type[40], shape[40], name[96];
        if (j - i > GROUP_MAX && d < 8 && named_parts(L->name, d)) {
            rows += print_groups(m, i, j, d + 1, wname, wtype);
        } else if (j - i == 1) {
            layer_type(L, type, sizeof type);
            layer_shape(L, shape, sizeof shape);
            print_row(wname, wtype, L->name, type, shape, (long long)L->nparams, L->flops);
            rows++;
        } else {
            long long params = 0;
            double flops = 0;
            for (int k = i; k < j; k++) {
                params += (long long)m->layers[k].nparams;
                flops += m->layers[k].flops > 0 ? m->layers[k].flops : 0;
            }
            snprintf(name, sizeof name, "%.*s", (int)group_key(L->name, d), L->name);
            snprintf(type, sizeof type, "%d layers", j - i);
            layer_shape(&m->layers[j - 1], shape, sizeof shape);
            print_row(wname, wtype, name, type, shape, params, flops);
            rows++;
        }
        i = j;
    }
    return rows;
}

void md_model_print_summary(const md_model *m)
{
    char a[32], b[32], c[32];
    int all = md_log_level() >= MD_VERBOSE;
    int wname = 5;
    for (int i = 0; i < m->nlayers; i++) {
        int l = (int)strlen(m->layers[i].name);
        if (l > wname) wname = l;
    }
    if (wname > NAME_W) wname = NAME_W;
    /* the type column fits the longest type ("batchnorm+relu+maxpool"), within 100 columns in all */
    int wtype = TYPE_W;
    for (int i = 0; i < m->nlayers; i++) {
        char type[40];
        layer_type(&m->layers[i], type, sizeof type);
        int l = (int)strlen(type);
        if (l > wtype) wtype = l;
    }
    int room = 100 - (2 + wname + 2 + 2 + 16 + 2 + 12 + 2 + 12);
    if (wtype > room) wtype = room > TYPE_W ? room : TYPE_W;
    md_out("  %-*s  %-*s  %-16s  %12s  %12s\n", wname, "layer", wtype, "type", "output", "params", "FLOPs");
    if (all) {
        for (int i = 0; i < m->nlayers; i++) {
            const struct md_layer *L = &m->layers[i];
            char type[40], shape[40];
            layer_type(L, type, sizeof type);
            layer_shape(L, shape, sizeof shape);
            print_row(wname, wtype, L->name, type, shape, (long long)L->nparams, L->flops);
        }
    } else {
        int rows = print_groups(m, 0, m->nlayers, 1, wname, wtype);
        if (rows < m->nlayers)
            md_out("  (%d layers in %d rows: a block's layers are summed; --verbose lists every layer)\n", m->nlayers,
                   rows);
    }
    char mem[32], act[32];
    md_out("✅ Created %s - Parameters: %s - %s per sample (forward)\n"
           "  training: %s per sample and step, params %s, activations %s per sample\n",
           m->name, md_fmt_thousands((long long)m->nparams, a, sizeof a), fmt_flops(m->flops_fwd, b, sizeof b),
           fmt_flops(3 * m->flops_fwd, c, sizeof c), md_fmt_bytes((double)md_model_param_bytes(m), mem, sizeof mem),
           md_fmt_bytes((double)md_model_activation_bytes(m, 1, 1), act, sizeof act));
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
        int sh[3] = {m->layers[i].out.c, m->layers[i].out.h, m->layers[i].out.w};
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
        int sh[3] = {L->out.c, L->out.h, L->out.w};
        cJSON_AddItemToObject(x, "shape", cJSON_CreateIntArray(sh, 3));
        cJSON_AddNumberToObject(x, "params", (double)L->nparams);
        cJSON_AddNumberToObject(x, "flops", L->flops);
        if (L->fold != 1) cJSON_AddNumberToObject(x, "fold", L->fold);
        if (L->alias >= 0 && !L->view) cJSON_AddBoolToObject(x, "fused", 1);
        if (L->view) cJSON_AddBoolToObject(x, "view", 1);
        if (L->filter_elsewhere) cJSON_AddBoolToObject(x, "filter_grad_fused", 1);
        if (L->ops->describe_json) L->ops->describe_json(L, x);
        cJSON_AddItemToArray(ls, x);
    }
    return o;
}
