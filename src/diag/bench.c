/* bench.c - timing one model at one batch size on one device. */
#include "diag/bench.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/kernels_call.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/platform.h"
#include "core/signals.h"
#include "data/data.h"
#include "diag/energy.h"

/* Distinct batches kept on the device and cycled through, so the loss is
 * that of training rather than of memorising one batch. */
#define RING 4

void md_bench_result_clear(struct md_bench_result *r)
{
    md_free(r->inf_samples_ms);
    md_free(r->prof);
    md_free(r->leak_current);
    memset(r, 0, sizeof *r);
}

md_status md_bench_open_data(const struct md_data_opts *o, const md_model *m, struct md_data **out)
{
    struct md_data_opts d = *o;
    /* synthetic unless the user named data: runs anywhere, needs no files */
    if (!o->data_dir[0] && strcmp(o->dataset, "auto") == 0) snprintf(d.dataset, sizeof d.dataset, "synthetic");
    struct md_data_request req;
    memset(&req, 0, sizeof req);
    req.num_inputs = md_model_num_inputs(m);
    if (req.num_inputs > MD_DATA_MAX_INPUTS)
        return md_errf(MD_ERR_CONFIG, "model %s: %d inputs; the loader feeds at most %d", md_model_name(m),
                       req.num_inputs, MD_DATA_MAX_INPUTS);
    for (int i = 0; i < req.num_inputs; i++) {
        struct md_data_input *in = &req.inputs[i];
        snprintf(in->name, sizeof in->name, "%s", md_model_input_name(m, i));
        md_model_input_shape(m, i, &in->c, &in->h, &in->w);
        in->kind = (strstr(in->name, "bright") || strstr(in->name, "luma")) && in->c == 1 ? MD_INPUT_LUMA
                                                                                          : MD_INPUT_IMAGE;
    }
    req.layout = md_model_get_opts(m)->layout;
    req.num_classes = md_model_num_classes(m);
    return md_data_open(&d, &req, out);
}

/* Device-resident copies of RING batches: inputs and labels. */
struct ring {
    int n;                                   /* slots filled */
    void *in[RING][MD_DATA_MAX_INPUTS];      /* (batch, elems) fp32, model layout */
    int32_t *labels[RING];                   /* (batch) */
    float *targets[RING];                    /* regression: (batch, target elems) fp32; else NULL */
};

static void ring_free(md_device *dev, struct ring *r)
{
    for (int s = 0; s < RING; s++) {
        for (int i = 0; i < MD_DATA_MAX_INPUTS; i++) md_dev_free(dev, r->in[s][i]);
        md_dev_free(dev, r->labels[s]);
        md_dev_free(dev, r->targets[s]);
    }
    memset(r, 0, sizeof *r);
}

/* Fills the ring from the train loader; batches larger than the split are
 * made by going round the epoch again (the timing does not care which
 * samples repeat). */
static md_status ring_fill(md_device *dev, struct md_data *d, const struct md_bench_opts *o, int batch, int slots, struct ring *r)
{
    md_status st = MD_OK;
    int ni = md_data_num_inputs(d);
    struct md_loader *l = NULL;
    float *host[MD_DATA_MAX_INPUTS] = {0};
    int32_t *hl = NULL;
    float *ht = NULL;
    size_t te = md_data_task(d) == MD_TASK_REGRESS ? md_data_target_elems(d) : 0;
    struct md_loader_opts lo = {
        .split = MD_SPLIT_TRAIN,
        .batch_size = batch < 256 ? batch : 256,
        .shuffle = 1,
        .num_workers = 0,
        .prefetch = 1,
        .seed = o->data.seed,
    };
    memset(r, 0, sizeof *r);
    if ((st = md_loader_create(d, &lo, &l)) != MD_OK) goto fail;
    for (int i = 0; i < ni; i++) {
        host[i] = md_malloc((size_t)batch * md_data_input_elems(d, i) * sizeof(float));
        if (!host[i]) { st = MD_ERR_OOM; goto fail; }
    }
    hl = md_malloc((size_t)batch * sizeof *hl);
    if (!hl) { st = MD_ERR_OOM; goto fail; }
    if (te && !(ht = md_malloc((size_t)batch * te * sizeof *ht))) { st = MD_ERR_OOM; goto fail; }
    int epoch = 0;
    if ((st = md_loader_start_epoch(l, epoch)) != MD_OK) goto fail;
    for (int s = 0; s < slots; s++) {
        int filled = 0, empty_epochs = 0;
        while (filled < batch) {
            struct md_batch *b = NULL;
            if ((st = md_loader_next(l, &b)) != MD_OK) goto fail;
            if (!b) {
                if (++empty_epochs > 2) { st = md_errf(MD_ERR_DATA, "benchmark: the training split is empty"); goto fail; }
                if ((st = md_loader_start_epoch(l, ++epoch)) != MD_OK) goto fail;
                continue;
            }
            empty_epochs = 0;
            int take = b->n < batch - filled ? b->n : batch - filled;
            for (int i = 0; i < ni; i++) {
                size_t e = md_data_input_elems(d, i);
                memcpy(host[i] + (size_t)filled * e, b->inputs[i], (size_t)take * e * sizeof(float));
            }
            memcpy(hl + filled, b->labels, (size_t)take * sizeof *hl);
            if (te) memcpy(ht + (size_t)filled * te, b->targets, (size_t)take * te * sizeof *ht);
            filled += take;
            md_loader_release(l, b);
        }
        for (int i = 0; i < ni; i++) {
            size_t bytes = (size_t)batch * md_data_input_elems(d, i) * sizeof(float);
            if ((st = md_dev_alloc(dev, bytes, &r->in[s][i], "benchmark batches")) != MD_OK) goto fail;
            if ((st = md_dev_upload(dev, r->in[s][i], host[i], bytes)) != MD_OK) goto fail;
        }
        if ((st = md_dev_alloc(dev, (size_t)batch * sizeof *hl, (void **)&r->labels[s], "benchmark labels")) != MD_OK)
            goto fail;
        if ((st = md_dev_upload(dev, r->labels[s], hl, (size_t)batch * sizeof *hl)) != MD_OK) goto fail;
        if (te) {
            size_t bytes = (size_t)batch * te * sizeof *ht;
            if ((st = md_dev_alloc(dev, bytes, (void **)&r->targets[s], "benchmark targets")) != MD_OK) goto fail;
            if ((st = md_dev_upload(dev, r->targets[s], ht, bytes)) != MD_OK) goto fail;
        }
        r->n = s + 1;
    }
fail:
    for (int i = 0; i < MD_DATA_MAX_INPUTS; i++) md_free(host[i]);
    md_free(hl);
    md_free(ht);
    md_loader_free(l);
    if (st != MD_OK) ring_free(dev, r);
    return st;
}

/* What changes between replays of a captured step: the optimizer's lr and t
 * (kernels.h md_optim_ctl; its loss and norm fields stay 0: never skipped,
 * never clipped) and the dropout offset. */
struct bench_ctl {
    struct md_optim_ctl opt;
    uint64_t rng_offset;
};

/* Everything one measurement holds on the device besides the model. */
struct bench {
    md_device *dev;
    md_model *m;
    struct md_data *d;
    const struct md_bench_setup *s;
    struct ring ring;
    float *mom1, *mom2;     /* optimizer state (nparams) */
    float *loss_dev;        /* device scalar */
    md_event *ev[5];
    struct bench_ctl *ctl;  /* device: the step's values for a replayed graph */
    void *graph[RING];
    long long step;
    int optimizer;          /* enum md_optim_kind */
    float lr, wd;
    void **leaked;          /* MPSDIAG_TEST_LEAK: the buffers held back, freed at the end */
    int nleaked;
};

static md_status copy_inputs(struct bench *b, int slot)
{
    int ni = md_data_num_inputs(b->d);
    for (int i = 0; i < ni; i++)
        MD_TRY(md_dev_copy(b->dev, md_model_input_buffer(b->m, i), b->ring.in[slot][i],
                           (size_t)b->s->batch * md_data_input_elems(b->d, i) * sizeof(float)));
    return MD_OK;
}

/* SGD (momentum) or AdamW over the flat buffers: weight-decayed range first,
 * the rest without decay (model.h), as the trainer does. */
static md_status optimizer_step(struct bench *b, int capturing)
{
    const struct md_bench_opts *o = b->s->opts;
    size_t np = md_model_nparams(b->m), nd = md_model_ndecay(b->m);
    md_dtype hd = md_model_get_opts(b->m)->compute_dtype;
    char *half = md_model_params_half(b->m);
    struct md_optim_args a;
    memset(&a, 0, sizeof a);
    a.kind = b->optimizer;
    a.lr = b->lr;
    a.momentum = (float)o->momentum;
    a.nesterov = o->nesterov;
    a.beta1 = 0.9f;
    a.beta2 = 0.999f;
    a.eps = 1e-8f;
    a.step = b->step;
    a.grad_scale = 1.0f;
    a.ctl = capturing ? &b->ctl->opt : NULL;
    a.half_dtype = hd;
    for (int part = 0; part < 2; part++) {
        size_t off = part ? nd : 0, n = part ? np - nd : nd;
        if (n == 0) continue;
        a.n = n;
        a.weight_decay = part ? 0.0f : b->wd;
        a.params = md_model_params(b->m) + off;
        a.grads = md_model_grads(b->m) + off;
        a.m = b->mom1 + off;
        a.v = b->mom2 ? b->mom2 + off : NULL;
        a.params_half = half ? half + off * md_dtype_size(hd) : NULL;
        MD_TRY(md_k_optim(b->dev, &a));
    }
    return MD_OK;
}

/* The training loss of the step on ring slot `slot`: softmax cross-entropy,
 * or for a regression model the MSE against the slot's targets (the loss a
 * forecasting run trains with by default; the other regression losses cost
 * the same kernel). Mean over the batch (and the forecast's elements). */
static md_status bench_loss(struct bench *b, int slot, int n)
{
    if (!b->ring.targets[slot]) return md_model_loss(b->m, b->ring.labels[slot], 0.0f, 1.0f / (float)n, b->loss_dev, NULL);
    const struct md_data_series *s = md_data_series(b->d);
    float scale = 1.0f / ((float)n * (float)md_data_target_elems(b->d));
    return md_model_regress_loss(b->m, b->ring.targets[slot], s->pred_len, s->n_out, MD_REGRESS_MSE, 1.0f, 1.0f, NULL,
                                 0, scale, b->loss_dev, NULL);
}

/* What bench_loss's sum is over: samples, or forecast elements. */
static double loss_count(const struct bench *b, int slot, int n)
{
    return b->ring.targets[slot] ? (double)n * (double)md_data_target_elems(b->d) : (double)n;
}

/* One training step; phase times in ms when `t` is non-NULL (t[0] forward
 * with loss, t[1] backward, t[2] optimizer, t[3] whole step). */
static md_status train_step(struct bench *b, int slot, double *t, double *loss)
{
    int n = b->s->batch;
    b->step++;
    md_model_set_step(b->m, (uint64_t)b->step);
    MD_TRY(md_event_record(b->dev, b->ev[0]));
    MD_TRY(copy_inputs(b, slot));
    MD_TRY(md_dev_memset0(b->dev, b->loss_dev, sizeof(float)));
    MD_TRY(md_model_forward(b->m, n, 1));
    MD_TRY(bench_loss(b, slot, n));
    MD_TRY(md_event_record(b->dev, b->ev[1]));
    MD_TRY(md_model_backward(b->m));
    MD_TRY(md_event_record(b->dev, b->ev[2]));
    MD_TRY(optimizer_step(b, 0));
    MD_TRY(md_event_record(b->dev, b->ev[3]));
    float ms[4];
    MD_TRY(md_event_elapsed_ms(b->dev, b->ev[0], b->ev[1], &ms[0]));
    MD_TRY(md_event_elapsed_ms(b->dev, b->ev[1], b->ev[2], &ms[1]));
    MD_TRY(md_event_elapsed_ms(b->dev, b->ev[2], b->ev[3], &ms[2]));
    MD_TRY(md_event_elapsed_ms(b->dev, b->ev[0], b->ev[3], &ms[3]));
    if (t)
        for (int i = 0; i < 4; i++) t[i] = (double)ms[i];
    if (loss) {
        float l = 0;
        MD_TRY(md_dev_download(b->dev, &l, b->loss_dev, sizeof l));
        *loss = (double)l / loss_count(b, slot, n);
    }
    return MD_OK;
}

static int cmp_kind(const void *a, const void *b)
{
    const struct md_bench_kind *x = a, *y = b;
    double tx = x->fwd_ms + x->bwd_ms, ty = y->fwd_ms + y->bwd_ms;
    return (tx < ty) - (tx > ty);
}

/* Where the step's time goes: a few eager steps with events around every
 * layer (md_model_profile_begin), summed per config type. */
static md_status profile_kinds(struct bench *b, struct md_bench_result *r)
{
    int nl = md_model_num_layers(b->m);
    double *f = md_calloc((size_t)nl * 2, sizeof *f);
    if (!f) return MD_ERR_OOM;
    double *bw = f + nl, t[4], total = 0;
    md_status st = MD_OK;
    int pg = md_progress_begin("time by layer kind", MD_BENCH_PROFILE_STEPS, "steps");
    for (int k = 0; k < MD_BENCH_PROFILE_STEPS && st == MD_OK; k++) {
        if ((st = md_model_profile_begin(b->m)) != MD_OK) break;
        md_status s1 = train_step(b, k % b->ring.n, t, NULL);
        md_status s2 = md_model_profile_end(b->m, f, bw);
        st = s1 != MD_OK ? s1 : s2;
        total += t[3];
        md_progress_update(k + 1);
    }
    md_progress_end(pg);
    if (st != MD_OK) {
        md_free(f);
        return st;
    }
    r->nkinds = 0;
    r->profiled_layers_ms = 0;
    md_free(r->prof);
    r->nprof = 0;
    r->prof = md_calloc((size_t)nl, sizeof *r->prof);
    if (!r->prof) {
        md_free(f);
        return MD_ERR_OOM;
    }
    for (int i = 0; i < nl; i++) {
        const char *type = md_model_layer_type(b->m, i);
        if (!type || (f[i] == 0 && bw[i] == 0)) continue;
        struct md_prof_layer *P = &r->prof[r->nprof++];
        snprintf(P->name, sizeof P->name, "%s", md_model_layer_name(b->m, i));
        snprintf(P->type, sizeof P->type, "%s", type);
        P->fwd_ms = f[i] / MD_BENCH_PROFILE_STEPS;
        P->bwd_ms = bw[i] / MD_BENCH_PROFILE_STEPS;
        P->flops = 3.0 * md_model_layer_flops(b->m, i) * b->s->batch;
        P->bytes = md_model_layer_step_bytes(b->m, i, b->s->batch);
        P->layers = 1;
        int j = 0;
        while (j < r->nkinds && strcmp(r->kinds[j].kind, type)) j++;
        if (j == r->nkinds) {
            if (r->nkinds == MD_BENCH_MAX_KINDS) j = MD_BENCH_MAX_KINDS - 1; /* the rest as one row */
            else {
                r->nkinds++;
                memset(&r->kinds[j], 0, sizeof r->kinds[j]);
                snprintf(r->kinds[j].kind, sizeof r->kinds[j].kind, "%s", type);
            }
        }
        r->kinds[j].layers++;
        r->kinds[j].fwd_ms += f[i] / MD_BENCH_PROFILE_STEPS;
        r->kinds[j].bwd_ms += bw[i] / MD_BENCH_PROFILE_STEPS;
        r->profiled_layers_ms += (f[i] + bw[i]) / MD_BENCH_PROFILE_STEPS;
    }
    qsort(r->kinds, (size_t)r->nkinds, sizeof r->kinds[0], cmp_kind);
    r->profiled_step_ms = total / MD_BENCH_PROFILE_STEPS;
    md_free(f);
    return MD_OK;
}

/* The step of train_step without events, reading its changing values from
 * b->ctl: what capture_graphs records. */
static md_status step_body(struct bench *b, int slot)
{
    int n = b->s->batch;
    MD_TRY(copy_inputs(b, slot));
    MD_TRY(md_dev_memset0(b->dev, b->loss_dev, sizeof(float)));
    MD_TRY(md_model_forward(b->m, n, 1));
    MD_TRY(bench_loss(b, slot, n));
    MD_TRY(md_model_backward(b->m));
    return optimizer_step(b, 1);
}

/* One graph per resident batch; after warm-up (cuDNN choices, workspaces). */
static md_status capture_graphs(struct bench *b, double *ms)
{
    double t0 = md_now();
    MD_TRY(md_dev_alloc(b->dev, sizeof *b->ctl, (void **)&b->ctl, "benchmark step values"));
    md_model_set_step_dev(b->m, &b->ctl->rng_offset);
    for (int s = 0; s < b->ring.n; s++) {
        MD_TRY(md_dev_capture_begin(b->dev));
        md_status st = step_body(b, s);
        char msg[320];
        snprintf(msg, sizeof msg, "%s", st != MD_OK ? md_errmsg() : "");
        md_status st2 = md_dev_capture_end(b->dev, &b->graph[s]);
        if (st != MD_OK) return md_errf(st, "%s", msg);
        MD_TRY(st2);
    }
    *ms = (md_now() - t0) * 1e3;
    return MD_OK;
}

/* A replay: t[3] the whole step (t[0..2] are not split), the loss if asked. */
static md_status graph_step(struct bench *b, int slot, double *t, double *loss)
{
    b->step++;
    struct bench_ctl h;
    memset(&h, 0, sizeof h);
    h.opt.step = b->step;
    h.opt.lr = b->lr;
    h.opt.grad_scale = 1.0f;
    h.rng_offset = (uint64_t)b->step << 32;
    MD_TRY(md_event_record(b->dev, b->ev[0]));
    MD_TRY(md_dev_upload(b->dev, b->ctl, &h, sizeof h));
    MD_TRY(md_dev_graph_launch(b->dev, b->graph[slot]));
    MD_TRY(md_event_record(b->dev, b->ev[3]));
    float ms;
    MD_TRY(md_event_elapsed_ms(b->dev, b->ev[0], b->ev[3], &ms)); /* waits: h may go */
    t[0] = t[1] = t[2] = 0;
    t[3] = (double)ms;
    if (loss) {
        float l = 0;
        MD_TRY(md_dev_download(b->dev, &l, b->loss_dev, sizeof l));
        *loss = (double)l / loss_count(b, slot, b->s->batch);
    }
    return MD_OK;
}

static md_status infer(struct bench *b, int slot, double *ms_out)
{
    MD_TRY(copy_inputs(b, slot));
    MD_TRY(md_event_record(b->dev, b->ev[0]));
    MD_TRY(md_model_forward(b->m, b->s->batch, 0));
    MD_TRY(md_event_record(b->dev, b->ev[4]));
    float ms;
    MD_TRY(md_event_elapsed_ms(b->dev, b->ev[0], b->ev[4], &ms));
    *ms_out = (double)ms;
    return MD_OK;
}

/* MPSDIAG_TEST_LEAK=BYTES[K|M|G]: each leak-check step allocates that much
 * on the device and keeps it until the measurement ends (a test hook: the
 * leak check must flag it). 0 when unset; -1 when malformed. */
static long long test_leak_bytes(void)
{
    const char *e = getenv("MPSDIAG_TEST_LEAK");
    if (!e || !*e) return 0;
    char *end;
    double v = strtod(e, &end);
    double mul = *end == 'K' ? 1024.0 : *end == 'M' ? 1048576.0 : *end == 'G' ? 1073741824.0 : 1.0;
    if (mul > 1) end++;
    if (end == e || *end || !(v > 0)) return -1;
    return (long long)(v * mul);
}

/* The leak check: s->leak_steps more training steps (as the timed ones ran:
 * graph replays or op by op), memory read after each once the device is
 * idle. */
static md_status leak_check(struct bench *b, struct md_bench_result *r)
{
    int n = b->s->leak_steps;
    long long inject = test_leak_bytes();
    if (inject < 0) return md_errf(MD_ERR_USAGE, "MPSDIAG_TEST_LEAK: '%s' is not a byte count (BYTES[K|M|G])",
                                   getenv("MPSDIAG_TEST_LEAK"));
    r->leak_current = md_calloc((size_t)n * 4, sizeof(double));
    b->leaked = inject ? md_calloc((size_t)n, sizeof *b->leaked) : NULL;
    if (!r->leak_current || (inject && !b->leaked)) return MD_ERR_OOM;
    r->leak_reserved = r->leak_current + n;
    r->leak_rss = r->leak_current + 2 * n;
    r->leak_driver = r->leak_current + 3 * n;
    r->leak_injected = inject;
    double t[4];
    int pg = md_progress_begin("leak check", n, "steps");
    md_status st = MD_OK;
    for (int i = 0; i < n && st == MD_OK; i++) {
        if ((st = md_interrupt_check("during the leak check (step %d of %d)", i + 1, n)) != MD_OK) break;
        if ((st = (r->graph ? graph_step : train_step)(b, i % b->ring.n, t, NULL)) != MD_OK) break;
        if (inject) {
            if ((st = md_dev_alloc(b->dev, (size_t)inject, &b->leaked[b->nleaked], "MPSDIAG_TEST_LEAK")) != MD_OK) break;
            if ((st = md_dev_memset0(b->dev, b->leaked[b->nleaked++], (size_t)inject)) != MD_OK) break;
        }
        if ((st = md_dev_sync(b->dev)) != MD_OK) break;
        struct md_mem_stats ms;
        md_dev_mem_stats(b->dev, &ms);
        r->leak_current[i] = (double)ms.current;
        r->leak_reserved[i] = (double)ms.reserved;
        r->leak_rss[i] = (double)md_rss_bytes();
        r->leak_driver[i] = ms.driver_total > 0 ? (double)(ms.driver_total - ms.driver_free) : 0;
        r->leak_n = i + 1;
        md_progress_update(i + 1);
    }
    md_progress_end(pg);
    return st;
}

static void stats4(double *v, int n, md_stats *out) { *out = md_stats_of(v, (size_t)n); }

md_status md_bench_run(md_device *dev, const struct md_bench_setup *s, struct md_data **data, struct md_bench_result *r)
{
    memset(r, 0, sizeof *r);
    r->batch = s->batch;
    r->first_loss = r->final_loss = (double)NAN;
    struct bench b;
    memset(&b, 0, sizeof b);
    b.dev = dev;
    b.s = s;
    double *buf = NULL;
    md_status st = MD_OK;
    const struct md_bench_opts *o = s->opts;
    struct md_energy en;
    struct md_energy_reading e0;
    memset(&en, 0, sizeof en);
    memset(&e0, 0, sizeof e0);
    /* this run's own peak; the device's overall peak is put back at the end */
    struct md_mem_stats ms0;
    md_dev_mem_stats(dev, &ms0);
    md_dev_reset_peak(dev);
    /* one phase at a time, each ended before the next begins (and at fail) */
    int pg = md_progress_begin("plan and bind", 0, NULL);

    double t0 = md_now();
    if ((st = md_model_load(s->model, s->inline_model, &s->mopts, &b.m)) != MD_OK) goto fail;
    r->load_s = md_now() - t0;
    r->nparams = md_model_nparams(b.m);
    r->flops_fwd = md_model_flops_fwd(b.m);
    r->flops_train = md_model_flops_train(b.m);
    b.optimizer = o->optimizer;
    b.lr = (float)(o->lr >= 0 ? o->lr : b.optimizer == MD_OPT_ADAMW ? 1e-3 : 0.05);
    b.wd = (float)o->weight_decay;
    r->params_bytes = (long long)md_model_param_bytes(b.m);
    r->grads_bytes = (long long)r->nparams * 4;
    r->optimizer_bytes = (long long)r->nparams * 4 * (b.optimizer == MD_OPT_ADAMW ? 2 : 1);
    r->activations_bytes = (long long)md_model_activation_bytes(b.m, s->batch, 1);
    r->planned_bytes = r->params_bytes + r->grads_bytes + r->optimizer_bytes + r->activations_bytes;
    if (s->mem_budget > 0 && r->planned_bytes > s->mem_budget) {
        char a[32], c[32];
        st = md_errf(MD_ERR_OOM, "batch %d: planned %s exceeds the memory budget %s", s->batch,
                     md_fmt_bytes((double)r->planned_bytes, a, sizeof a), md_fmt_bytes((double)s->mem_budget, c, sizeof c));
        goto fail;
    }
    if (!*data && (st = md_bench_open_data(&o->data, b.m, data)) != MD_OK) goto fail;
    b.d = *data;

    t0 = md_now();
    if ((st = md_model_bind(b.m, dev, s->batch)) != MD_OK) goto fail;
    r->bind_s = md_now() - t0;
    size_t np = r->nparams;
    if ((st = md_dev_alloc(dev, np * 4, (void **)&b.mom1, "benchmark optimizer state")) != MD_OK) goto fail;
    if ((st = md_dev_memset0(dev, b.mom1, np * 4)) != MD_OK) goto fail;
    if (b.optimizer == MD_OPT_ADAMW) {
        if ((st = md_dev_alloc(dev, np * 4, (void **)&b.mom2, "benchmark optimizer state")) != MD_OK) goto fail;
        if ((st = md_dev_memset0(dev, b.mom2, np * 4)) != MD_OK) goto fail;
    }
    if ((st = md_dev_alloc(dev, sizeof(float), (void **)&b.loss_dev, "benchmark loss")) != MD_OK) goto fail;
    for (int i = 0; i < 5; i++)
        if ((st = md_event_create(dev, &b.ev[i])) != MD_OK) goto fail;
    r->timer_events = md_device_get_info(dev)->has_events;
    int slots = s->iters > 0 || s->warmup_iters > 0 ? RING : 1;
    if ((st = ring_fill(dev, b.d, o, s->batch, slots, &b.ring)) != MD_OK) goto fail;

    /* warm-up: the first step (first touches, lazy plans) timed apart */
    int wu = s->warmup_iters < 1 ? 1 : s->warmup_iters;
    double sum = 0, t[4];
    md_progress_end(pg);
    pg = md_progress_begin("warm-up", wu, "steps");
    for (int i = 0; i < wu; i++) {
        md_interrupt_hook("benchmark");
        if ((st = md_interrupt_check("during the benchmark (warm-up step %d of %d)", i + 1, wu)) != MD_OK) goto fail;
        if ((st = train_step(&b, i % b.ring.n, t, NULL)) != MD_OK) goto fail;
        if (i == 0) r->first_step_ms = t[3];
        else sum += t[3];
        md_progress_update(i + 1);
    }
    r->warmup_rest_ms = wu > 1 ? sum / (wu - 1) : 0;

    if (s->iters > 0 && (st = profile_kinds(&b, r)) != MD_OK) goto fail;

    int cap = s->iters > s->inference_iters ? s->iters : s->inference_iters;
    buf = md_malloc(sizeof(double) * 4 * (size_t)(cap > 0 ? cap : 1));
    if (!buf) { st = MD_ERR_OOM; goto fail; }
    double *step = buf, *fw = buf + cap, *bw = buf + 2 * cap, *op = buf + 3 * cap;
    int n = 0;
    double tstart, tsum = 0;
    /* CUDA only: Metal captures, but its optimizer cannot read md_optim_ctl yet */
    if (s->mopts.compile && md_dev_can_capture(dev) && md_device_kind(dev) == MD_BACKEND_CUDA && s->iters > 0) {
        /* the same steps op by op first: what the graph is compared with, and the phase split */
        int k = s->iters < 10 ? s->iters : 10;
        md_progress_end(pg);
        pg = md_progress_begin("op-by-op steps", k, "steps");
        for (int i = 0; i < k; i++) {
            if ((st = md_interrupt_check("during the benchmark (op-by-op step %d of %d)", i + 1, k)) != MD_OK) goto fail;
            if ((st = train_step(&b, i % b.ring.n, t, NULL)) != MD_OK) goto fail;
            fw[i] = t[0];
            bw[i] = t[1];
            op[i] = t[2];
            step[i] = t[3];
            md_progress_update(i + 1);
        }
        r->eager_iters = k;
        stats4(step, k, &r->eager_step_ms);
        stats4(fw, k, &r->fwd_ms);
        stats4(bw, k, &r->bwd_ms);
        stats4(op, k, &r->opt_ms);
        md_status cs = capture_graphs(&b, &r->capture_ms);
        if (cs == MD_OK) {
            r->graph = 1;
        } else {
            snprintf(r->graph_note, sizeof r->graph_note, "graph capture failed: %s", md_errmsg());
            md_model_set_step_dev(b.m, NULL);
        }
    }
    md_progress_end(pg);
    if (s->measure_energy) {
        md_energy_open(&en, md_device_kind(dev), md_device_get_info(dev)->index, md_device_get_info(dev)->name);
        if ((st = md_dev_sync(dev)) != MD_OK) goto fail;
        if (en.kind != MD_ENERGY_NONE) md_energy_read(&en, &e0);
    }
    pg = s->iters > 0 ? md_progress_begin("training steps", s->iters, "steps") : 0;
    if (pg) md_progress_budget(s->time_budget_s);
    tstart = md_now();
    for (; n < s->iters; n++) {
        if (s->time_budget_s > 0 && n >= 2 && md_now() - tstart > s->time_budget_s) break;
        if ((st = md_interrupt_check("during the benchmark (timed training step %d of %d)", n + 1, s->iters)) != MD_OK)
            goto fail;
        double loss;
        if ((st = (r->graph ? graph_step : train_step)(&b, n % b.ring.n, t, &loss)) != MD_OK) goto fail;
        fw[n] = t[0];
        bw[n] = t[1];
        op[n] = t[2];
        step[n] = t[3];
        tsum += t[3];
        if (n == 0) r->first_loss = loss;
        r->final_loss = loss;
        md_progress_update(n + 1);
    }
    r->train_iters = n;
    if (s->measure_energy) {
        struct md_energy_reading e1;
        /* the steps have ended: each timing waited for its end event */
        if (en.kind != MD_ENERGY_NONE && md_energy_read(&en, &e1) == 0) {
            r->energy_j = md_energy_joules(&en, &e0, &e1);
            r->energy_window_s = e1.t - e0.t;
            r->energy_steps = n;
            r->energy_ok = isfinite(r->energy_j) && n > 0;
            if (!r->energy_ok) snprintf(en.reason, sizeof en.reason, "the counter went back without a known range");
        }
        snprintf(r->energy_source, sizeof r->energy_source, "%s", en.source);
        snprintf(r->energy_reason, sizeof r->energy_reason, "%s", r->energy_ok ? "" : en.reason);
        md_energy_close(&en);
    }
    if (n > 0) {
        stats4(step, n, &r->step_ms);
        if (!r->graph) {
            stats4(fw, n, &r->fwd_ms);
            stats4(bw, n, &r->bwd_ms);
            stats4(op, n, &r->opt_ms);
        }
        r->train_samples_per_s = tsum > 0 ? (double)n * s->batch / (tsum / 1e3) : 0;
    }

    md_progress_end(pg);
    pg = 0;
    if (s->leak_steps > 0 && (st = leak_check(&b, r)) != MD_OK) goto fail;
    if (s->inference_iters > 0) {
        pg = md_progress_begin("inference", s->inference_iters, "batches");
        if (pg) md_progress_budget(s->time_budget_s);
        double tmp;
        if ((st = infer(&b, 0, &tmp)) != MD_OK) goto fail; /* eval plan's first touch */
        r->inf_samples_ms = md_malloc(sizeof(double) * (size_t)s->inference_iters);
        if (!r->inf_samples_ms) { st = MD_ERR_OOM; goto fail; }
        n = 0;
        tstart = md_now();
        tsum = 0;
        for (; n < s->inference_iters; n++) {
            if (s->time_budget_s > 0 && n >= 2 && md_now() - tstart > s->time_budget_s) break;
            if ((st = md_interrupt_check("during the benchmark (inference batch %d of %d)", n + 1, s->inference_iters)) !=
                MD_OK)
                goto fail;
            if ((st = infer(&b, n % b.ring.n, &r->inf_samples_ms[n])) != MD_OK) goto fail;
            tsum += r->inf_samples_ms[n];
            md_progress_update(n + 1);
        }
        r->inf_iters = n;
        r->inf_ms = md_stats_of(r->inf_samples_ms, (size_t)n);
        r->inf_samples_per_s = tsum > 0 ? (double)n * s->batch / (tsum / 1e3) : 0;
    }
    struct md_mem_stats ms1;
    md_dev_mem_stats(dev, &ms1);
    r->peak_bytes = ms1.peak - ms0.current;

fail:
    md_progress_end(pg);
    if (st != MD_OK) {
        snprintf(r->error, sizeof r->error, "%s", md_errmsg());
        struct md_mem_stats msf;
        md_dev_mem_stats(dev, &msf);
        r->peak_bytes = msf.peak - ms0.current;
    }
    r->status = st;
    md_dev_raise_peak(dev, ms0.peak);
    md_energy_close(&en);
    md_free(buf);
    for (int i = 0; i < b.nleaked; i++) md_dev_free(dev, b.leaked[i]);
    md_free(b.leaked);
    for (int i = 0; i < 5; i++)
        if (b.ev[i]) md_event_destroy(dev, b.ev[i]);
    for (int i = 0; i < RING; i++) md_dev_graph_destroy(dev, b.graph[i]);
    md_dev_free(dev, b.ctl);
    ring_free(dev, &b.ring);
    md_dev_free(dev, b.mom1);
    md_dev_free(dev, b.mom2);
    md_dev_free(dev, b.loss_dev);
    md_model_free(b.m);
    return st;
}

md_status md_bench_gemm_peak(md_device *dev, md_dtype dtype, int n, double *gflops)
{
    *gflops = 0;
    size_t es = md_dtype_size(dtype), bytes = (size_t)n * n * es;
    void *a = NULL, *bm = NULL, *c = NULL;
    md_status st;
    if ((st = md_dev_alloc(dev, bytes, &a, "GEMM peak A")) != MD_OK) goto fail;
    if ((st = md_dev_alloc(dev, bytes, &bm, "GEMM peak B")) != MD_OK) goto fail;
    if ((st = md_dev_alloc(dev, bytes, &c, "GEMM peak C")) != MD_OK) goto fail;
    /* values do not change the rate; zeros avoid denormal slow paths */
    if ((st = md_dev_memset0(dev, a, bytes)) != MD_OK) goto fail;
    if ((st = md_dev_memset0(dev, bm, bytes)) != MD_OK) goto fail;
    struct md_gemm_args g;
    memset(&g, 0, sizeof g);
    g.m = g.n = g.k = n;
    g.alpha = 1.0f;
    g.a = a;
    g.lda = n;
    g.b = bm;
    g.ldb = n;
    g.c = c;
    g.ldc = n;
    g.batch = 1;
    g.dtype = dtype;
    if ((st = md_k_gemm(dev, &g)) != MD_OK) goto fail;
    if ((st = md_dev_sync(dev)) != MD_OK) goto fail;
    double best = INFINITY, t_all = md_now();
    int pg = md_progress_begin("device peak (GEMM)", 10, "products");
    if (pg) md_progress_budget(0.5);
    for (int i = 0; i < 10 && (i < 3 || md_now() - t_all < 0.5); i++) {
        if ((st = md_interrupt_check("during the benchmark (GEMM peak)")) != MD_OK) goto fail;
        double t0 = md_now();
        if ((st = md_k_gemm(dev, &g)) != MD_OK) goto fail;
        if ((st = md_dev_sync(dev)) != MD_OK) goto fail;
        double dt = md_now() - t0;
        if (dt < best) best = dt;
        md_progress_update(i + 1);
    }
    md_progress_end(pg);
    *gflops = best > 0 ? 2.0 * n * (double)n * n / best / 1e9 : 0;
fail:
    md_dev_free(dev, a);
    md_dev_free(dev, bm);
    md_dev_free(dev, c);
    return st;
}

md_status md_bench_copy_peak(md_device *dev, size_t bytes, double *gbs)
{
    *gbs = 0;
    void *a = NULL, *c = NULL;
    md_event *e0 = NULL, *e1 = NULL;
    md_status st;
    if ((st = md_dev_alloc(dev, bytes, &a, "copy peak source")) != MD_OK) goto fail;
    if ((st = md_dev_alloc(dev, bytes, &c, "copy peak destination")) != MD_OK) goto fail;
    if ((st = md_dev_memset0(dev, a, bytes)) != MD_OK) goto fail;
    if ((st = md_dev_memset0(dev, c, bytes)) != MD_OK) goto fail;
    if ((st = md_event_create(dev, &e0)) != MD_OK) goto fail;
    if ((st = md_event_create(dev, &e1)) != MD_OK) goto fail;
    if ((st = md_dev_copy(dev, c, a, bytes)) != MD_OK) goto fail; /* first touch */
    double best = 0;
    for (int i = 0; i < 5; i++) {
        if ((st = md_interrupt_check("during the profile (copy rate)")) != MD_OK) goto fail;
        float ms = 0;
        if ((st = md_event_record(dev, e0)) != MD_OK) goto fail;
        if ((st = md_dev_copy(dev, c, a, bytes)) != MD_OK) goto fail;
        if ((st = md_event_record(dev, e1)) != MD_OK) goto fail;
        if ((st = md_event_elapsed_ms(dev, e0, e1, &ms)) != MD_OK) goto fail;
        double r = ms > 0 ? 2.0 * (double)bytes / ((double)ms / 1e3) / 1e9 : 0;
        if (r > best) best = r;
    }
    *gbs = best;
fail:
    if (e0) md_event_destroy(dev, e0);
    if (e1) md_event_destroy(dev, e1);
    md_dev_free(dev, a);
    md_dev_free(dev, c);
    return st;
}

md_status md_bench_loader(struct md_data *data, const struct md_bench_opts *o, int batch, int workers, int max_batches,
                          double time_budget_s, double *samples_per_s)
{
    *samples_per_s = 0;
    struct md_loader *l = NULL;
    struct md_loader_opts lo = {
        .split = MD_SPLIT_TRAIN,
        .batch_size = batch,
        .shuffle = 1,
        .augment = o->augment,
        .num_workers = workers,
        .prefetch = o->prefetch > 0 ? o->prefetch : 2,
        .seed = o->data.seed,
    };
    MD_TRY(md_loader_create(data, &lo, &l));
    md_status st = md_loader_start_epoch(l, 0);
    long long samples = 0;
    double t0 = md_now();
    int pg = md_progress_begin("data loader", max_batches, "batches");
    if (pg) md_progress_budget(time_budget_s);
    for (int i = 0; st == MD_OK && i < max_batches; i++) {
        if (time_budget_s > 0 && i >= 2 && md_now() - t0 > time_budget_s) break;
        if ((st = md_interrupt_check("during the benchmark (loader measurement)")) != MD_OK) break;
        struct md_batch *b = NULL;
        if ((st = md_loader_next(l, &b)) != MD_OK) break;
        if (!b) break;
        samples += b->n;
        md_loader_release(l, b);
        md_progress_update(i + 1);
    }
    double dt = md_now() - t0;
    md_progress_end(pg);
    md_loader_free(l);
    if (st == MD_OK && dt > 0) *samples_per_s = (double)samples / dt;
    return st;
}

void md_bench_peak_ref(double achieved, double gemm_gflops, double fma_gflops, struct md_peak_ref *out)
{
    memset(out, 0, sizeof *out);
    double gemm = gemm_gflops > 0 ? gemm_gflops : 0, fma = fma_gflops > 0 ? fma_gflops : 0;
    out->gflops = gemm > fma ? gemm : fma;
    out->fraction = (double)NAN;
    if (out->gflops <= 0) {
        snprintf(out->text, sizeof out->text, "(no peak figure to compare with)");
        return;
    }
    if (!(achieved <= out->gflops)) {
        /* more than the arithmetic the figures allow: one of them is low
         * (the machine was busy while it was measured), so no ratio */
        if (fma > 0)
            snprintf(out->text, sizeof out->text,
                     "(above the %.1f GFLOP/s FMA rate and the %.1f GFLOP/s GEMM rate measured here, so no ratio: "
                     "the machine was probably busy while they were measured)", fma, gemm);
        else
            snprintf(out->text, sizeof out->text,
                     "(above the measured %.1f GFLOP/s GEMM rate, which is no bound for this device: no ratio)", gemm);
        return;
    }
    out->fraction = achieved / out->gflops;
    if (fma >= gemm) {
        out->basis = "fma";
        snprintf(out->text, sizeof out->text, "(%.1f%% of the %.1f GFLOP/s FMA peak measured on these threads; "
                 "GEMM %.1f GFLOP/s)", 100 * out->fraction, fma, gemm);
    } else {
        out->basis = "gemm";
        snprintf(out->text, sizeof out->text, "(%.1f%% of the measured %.1f GFLOP/s GEMM peak)", 100 * out->fraction,
                 gemm);
    }
}
