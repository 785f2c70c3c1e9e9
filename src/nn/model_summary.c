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
        if (L->alias >= 0 && !L->view) snprintf(type, sizeof type, "%s (fused)", L->type);
        else if (L->ops->describe) L->ops->describe(L, type, sizeof type);
        else snprintf(type, sizeof type, "%s", L->type);
        if (L->fold != 1) snprintf(shape, sizeof shape, "%dx(%dx%dx%d)", L->fold, L->out.c, L->out.h, L->out.w);
        else snprintf(shape, sizeof shape, "%dx%dx%d", L->out.c, L->out.h, L->out.w);
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
        if (L->ops->describe_json) L->ops->describe_json(L, x);
        cJSON_AddItemToArray(ls, x);
    }
    return o;
}
