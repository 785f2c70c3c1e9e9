/* optim.c - fused optimizer steps over ranges of the flat parameter buffer. */
#include "train/optim.h"

#include <stdlib.h>
#include <string.h>

#include "backend/kernels_call.h"
#include "core/mem.h"

struct md_optim {
    md_device *dev;
    struct md_optim_cfg cfg;
    size_t n;
    struct md_optim_range *ranges; /* merged, sorted by offset */
    long long *t0;                 /* (nranges) steps before the range's first: unfrozen late */
    int nranges;
    float *m, *v;                  /* (n) device state */
    long long step;
};

static int range_cmp(const void *a, const void *b)
{
    const struct md_optim_range *x = a, *y = b;
    return x->offset < y->offset ? -1 : x->offset > y->offset;
}

md_status md_optim_create(md_device *dev, const struct md_optim_cfg *cfg, size_t n,
                          const struct md_optim_range *ranges, int nranges, md_optim **out)
{
    *out = NULL;
    md_status st = MD_OK;
    md_optim *o = md_calloc(1, sizeof *o);
    if (!o) return MD_ERR_OOM;
    o->dev = dev;
    o->cfg = *cfg;
    if (o->cfg.kind == MD_OPT_ADAMW) {
        if (o->cfg.beta1 == 0.0f) o->cfg.beta1 = 0.9f;
        if (o->cfg.beta2 == 0.0f) o->cfg.beta2 = 0.999f;
        if (o->cfg.eps == 0.0f) o->cfg.eps = 1e-8f;
    }
    o->n = n;
    o->ranges = md_malloc((size_t)(nranges > 0 ? nranges : 1) * sizeof *o->ranges);
    if (!o->ranges) { st = MD_ERR_OOM; goto fail; }
    memcpy(o->ranges, ranges, (size_t)nranges * sizeof *ranges);
    for (int i = 0; i < nranges; i++)
        if (!(o->ranges[i].lr_mult > 0.0f)) o->ranges[i].lr_mult = 1.0f;
    qsort(o->ranges, (size_t)nranges, sizeof *o->ranges, range_cmp);
    int k = 0;
    for (int i = 0; i < nranges; i++) {
        const struct md_optim_range *r = &o->ranges[i];
        if (r->offset + r->count > n || (k > 0 && r->offset < o->ranges[k - 1].offset + o->ranges[k - 1].count)) {
            st = md_errf(MD_ERR_INTERNAL, "optimizer: parameter range [%zu, +%zu) overlaps or exceeds %zu", r->offset,
                         r->count, n);
            goto fail;
        }
        if (r->count == 0) continue;
        if (k > 0 && o->ranges[k - 1].decay == r->decay && o->ranges[k - 1].lr_mult == r->lr_mult &&
            o->ranges[k - 1].frozen == r->frozen && o->ranges[k - 1].offset + o->ranges[k - 1].count == r->offset)
            o->ranges[k - 1].count += r->count;
        else
            o->ranges[k++] = *r;
    }
    o->nranges = k;
    o->t0 = md_calloc((size_t)(k > 0 ? k : 1), sizeof *o->t0);
    if (!o->t0) { st = MD_ERR_OOM; goto fail; }
    if (n > 0) {
        if ((st = md_dev_alloc(dev, n * sizeof(float), (void **)&o->m, "optimizer state (momentum / m)")) != MD_OK)
            goto fail;
        if ((st = md_dev_memset0(dev, o->m, n * sizeof(float))) != MD_OK) goto fail;
        if (o->cfg.kind == MD_OPT_ADAMW) {
            if ((st = md_dev_alloc(dev, n * sizeof(float), (void **)&o->v, "optimizer state (v)")) != MD_OK) goto fail;
            if ((st = md_dev_memset0(dev, o->v, n * sizeof(float))) != MD_OK) goto fail;
        }
    }
    *out = o;
    return MD_OK;
fail:
    md_optim_free(o);
    return st;
}

void md_optim_free(md_optim *o)
{
    if (!o) return;
    md_dev_free(o->dev, o->m);
    md_dev_free(o->dev, o->v);
    md_free(o->ranges);
    md_free(o->t0);
    md_free(o);
}

static md_status step_ranges(md_optim *o, float *params, const float *grads, float lr, float grad_scale,
                             const float *grad_scale_dev, const struct md_optim_ctl *ctl,
                             struct md_scale_ctl *scaler, void *params_half, md_dtype half_dtype)
{
    long long t = o->step + 1;
    size_t hsz = params_half ? md_dtype_size(half_dtype) : 0;
    int last = -1; /* the last range stepped: its call applies the loss scaler's rule */
    for (int i = 0; i < o->nranges; i++)
        if (!o->ranges[i].frozen) last = i;
    if (scaler && last < 0) { /* nothing to step: the rule still runs */
        struct md_optim_args a;
        memset(&a, 0, sizeof a);
        a.kind = o->cfg.kind;
        a.step = 1;
        a.ctl = ctl;
        a.scaler = scaler;
        a.scaler_update = 1;
        MD_TRY(md_k_optim(o->dev, &a));
    }
    for (int i = 0; i < o->nranges; i++) {
        const struct md_optim_range *r = &o->ranges[i];
        if (r->frozen) continue;
        if (ctl && (r->lr_mult != 1.0f || o->t0[i] != 0))
            return md_errf(MD_ERR_INTERNAL, "optimizer: a range with its own lr or step count in a device-controlled step");
        struct md_optim_args a;
        memset(&a, 0, sizeof a);
        a.kind = o->cfg.kind;
        a.n = r->count;
        a.lr = lr * r->lr_mult;
        a.momentum = o->cfg.momentum;
        a.weight_decay = r->decay ? o->cfg.weight_decay : 0.0f;
        a.beta1 = o->cfg.beta1;
        a.beta2 = o->cfg.beta2;
        a.eps = o->cfg.eps;
        a.nesterov = o->cfg.nesterov;
        a.step = t - o->t0[i];
        a.grad_scale = grad_scale;
        a.grad_scale_dev = grad_scale_dev;
        a.ctl = ctl;
        a.scaler = ctl ? scaler : NULL;
        a.scaler_update = a.scaler && i == last;
        a.params = params + r->offset;
        a.grads = grads + r->offset;
        a.m = o->m + r->offset;
        a.v = o->v ? o->v + r->offset : NULL;
        a.params_half = params_half ? (char *)params_half + r->offset * hsz : NULL;
        a.half_dtype = half_dtype;
        MD_TRY(md_k_optim(o->dev, &a));
    }
    o->step = t;
    return MD_OK;
}

md_status md_optim_step(md_optim *o, float *params, const float *grads, float lr, float grad_scale,
                        const float *grad_scale_dev, void *params_half, md_dtype half_dtype)
{
    return step_ranges(o, params, grads, lr, grad_scale, grad_scale_dev, NULL, NULL, params_half, half_dtype);
}

md_status md_optim_step_ctl(md_optim *o, float *params, const float *grads, const struct md_optim_ctl *ctl,
                            struct md_scale_ctl *scaler, void *params_half, md_dtype half_dtype)
{
    if (!ctl && scaler) return md_errf(MD_ERR_INTERNAL, "optimizer: a device-side loss scaler without step values");
    return step_ranges(o, params, grads, 0.0f, 1.0f, NULL, ctl, scaler, params_half, half_dtype);
}

void md_optim_unfreeze(md_optim *o, long long t0)
{
    for (int i = 0; i < o->nranges; i++)
        if (o->ranges[i].frozen) {
            o->ranges[i].frozen = 0;
            o->t0[i] = t0;
        }
}

size_t md_optim_frozen_count(const md_optim *o)
{
    size_t n = 0;
    for (int i = 0; i < o->nranges; i++) n += o->ranges[i].frozen ? o->ranges[i].count : 0;
    return n;
}

int md_optim_needs_host(const md_optim *o)
{
    for (int i = 0; i < o->nranges; i++)
        if (o->ranges[i].lr_mult != 1.0f || o->t0[i] != 0) return 1;
    return 0;
}

md_status md_optim_zero_frozen(md_optim *o, float *grads)
{
    for (int i = 0; i < o->nranges; i++)
        if (o->ranges[i].frozen) MD_TRY(md_dev_memset0(o->dev, grads + o->ranges[i].offset, o->ranges[i].count * 4));
    return MD_OK;
}

long long md_optim_steps(const md_optim *o) { return o->step; }
void md_optim_set_steps(md_optim *o, long long t) { o->step = t; }
float *md_optim_m(md_optim *o) { return o->m; }
float *md_optim_v(md_optim *o) { return o->v; }
size_t md_optim_size(const md_optim *o) { return o->n; }
const struct md_optim_cfg *md_optim_config(const md_optim *o) { return &o->cfg; }

void md_optim_counts(const md_optim *o, size_t *decayed, size_t *plain)
{
    *decayed = *plain = 0;
    for (int i = 0; i < o->nranges; i++) *(o->ranges[i].decay ? decayed : plain) += o->ranges[i].count;
}
