/* trainer_pipe.c - pipelined training steps: the step's changing values live
 * on the device (struct step_ctl), its results come back asynchronously and
 * are checked while the next step runs, inputs are double-buffered; on CUDA
 * each input set's step is captured as a graph after one eager step and
 * replayed (trainer.h, trainer_impl.h). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dist.h"
#include "core/log.h"
#include "core/timer.h"
#include "nn/model.h"
#include "train/trainer_impl.h"

/* Decides whether full batches run pipelined (and captured), allocates what
 * that needs, and says why in pipe_why. */
md_status md_trainer_pipe_setup(md_trainer *t)
{
    const struct md_train_opts *o = t->o;
    /* Metal can capture too, but its optimizer has no device-side step
     * values yet (metal_plan.c refuses md_optim_ctl): CUDA only */
    int can = md_dev_can_capture(t->dev) && md_device_kind(t->dev) == MD_BACKEND_CUDA;
    int dist = t->ranks > 1 && md_trainer_dist_pipe_ok(t, can);
    const char *why = NULL;
    if (!o->compile) why = "--no-compile: each step runs op by op and waits for its loss";
    else if (t->regress)
        why = "a regression loss: each step runs op by op and syncs once for its loss (pipelined steps carry "
              "class labels only)";
    else if (o->unfreeze_after > 0 || md_optim_needs_host(t->opt))
        why = "--backbone-lr / --unfreeze-after: parameter groups with their own learning rate or step count "
              "take host-synced steps";
    else if (t->ranks > 1 && !dist)
        why = getenv("MPSDIAG_DIST_GRAPH")
                  ? "several ranks: host-synced steps with one gradient all-reduce each (MPSDIAG_DIST_GRAPH=0)"
                  : "several ranks on a device without its own collectives: host-synced steps, the gradients summed "
                    "with MPI (MPSDIAG_DIST_GRAPH=1 pipelines them)";
    else if (!can && !t->force_pipe && !dist)
        why = md_device_kind(t->dev) == MD_BACKEND_METAL
                  ? "one command buffer per step, synced once for its loss (replaying a captured step needs "
                    "device-side step values in the Metal optimizer: not built)"
                  : "each step runs as it is called and syncs once for its loss (no graph capture on this device)";
    if (why) {
        snprintf(t->pipe_why, sizeof t->pipe_why, "%s", why);
        return MD_OK;
    }
    t->pipe = 1;
    t->capture = can;
    t->depth = o->prefetch >= 2 ? 1 : 0;
    snprintf(t->pipe_why, sizeof t->pipe_why, "%s%s",
             can ? "captured as a CUDA graph after one eager step and replayed (inputs double-buffered, copied on "
                   "a separate stream)"
                 : "pipelined with device-side step values (not captured: no graph capture on this device)",
             t->depth ? "" : "; --prefetch 1: one step in flight at most, each waited for");
    if (dist) { /* a reason long enough to need its own words */
        size_t k = strlen(t->pipe_why);
        snprintf(t->pipe_why + k, sizeof t->pipe_why - k, "; the gradient all-reduce runs inside each step%s",
                 t->buckets ? ", in buckets overlapping backward" : "");
    }
    MD_TRY(md_dev_alloc(t->dev, sizeof(struct step_ctl), (void **)&t->d_ctl, "step control"));
    MD_TRY(md_dev_host_alloc(t->dev, 4 * sizeof(struct step_ctl), (void **)&t->h_ctl, &t->h_ctl_pinned));
    memset(t->h_ctl, 0, 4 * sizeof(struct step_ctl));
    for (int i = 0; i < t->ninputs; i++)
        MD_TRY(md_dev_alloc(t->dev, (size_t)t->max_batch * t->in_elems[i] * sizeof(float), &t->in2[i],
                            "input batch (second buffer)"));
    MD_TRY(md_dev_alloc(t->dev, (size_t)t->max_batch * sizeof(int32_t), (void **)&t->d_labels2,
                        "label batch (second buffer)"));
    for (int i = 0; i < 2; i++) MD_TRY(md_event_create(t->dev, &t->ev_done[i]));
    return MD_OK;
}

/* The step's kernels, with every changing value read from t->d_ctl. */
static md_status pipe_body(md_trainer *t, const int32_t *labels, int n)
{
    MD_TRY(md_model_forward(t->model, n, 1));
    /* several ranks: the mean over the global batch (full batches only here) */
    float mean_n = (float)n * (float)(t->ranks > 1 ? t->ranks : 1);
    /* fp16: the loss scale in device memory, as the optimizer's rule left it */
    if (t->scaler.enabled)
        MD_TRY(md_model_loss_scaled(t->model, labels, (float)t->o->label_smoothing, 1.0f / mean_n,
                                    &t->d_ctl->scale.scale, &t->d_ctl->opt.loss_sum, &t->d_ctl->correct));
    else
        MD_TRY(md_model_loss(t->model, labels, (float)t->o->label_smoothing, t->scaler.scale / mean_n,
                             &t->d_ctl->opt.loss_sum, &t->d_ctl->correct));
    MD_TRY(md_model_backward(t->model));
    float *grads = md_model_grads(t->model), *params = md_model_params(t->model);
    if (t->ranks > 1) MD_TRY(md_trainer_dist_grads_queued(t, grads, md_model_nparams(t->model)));
    MD_TRY(md_optim_zero_frozen(t->opt, grads)); /* after the all-reduce, which may still read them */
    struct md_reduce_args r = {.op = MD_RED_SUMSQ, .n = md_model_nparams(t->model), .dtype = MD_F32, .a = grads,
                               .out = &t->d_ctl->opt.grad_sumsq};
    MD_TRY(md_k_reduce(t->dev, &r));
    return md_optim_step_ctl(t->opt, params, grads, &t->d_ctl->opt, t->scaler.enabled ? &t->d_ctl->scale : NULL,
                             md_model_params_half(t->model), md_model_get_opts(t->model)->compute_dtype);
}

/* Records the step as a graph for input set s. Nothing runs during capture;
 * on failure the capture is abandoned (the caller runs the step eagerly). */
static md_status capture_step(md_trainer *t, int s, const int32_t *labels, int n)
{
    double c0 = md_now();
    MD_TRY(md_dev_capture_begin(t->dev));
    md_status st = pipe_body(t, labels, n);
    char msg[320];
    snprintf(msg, sizeof msg, "%s", st != MD_OK ? md_errmsg() : "");
    void *g = NULL;
    md_status st2 = md_dev_capture_end(t->dev, &g);
    if (st == MD_OK) st = st2;
    else md_errf(st, "%s", msg);
    if (st != MD_OK) {
        md_dev_graph_destroy(t->dev, g);
        return st;
    }
    t->graph[s] = g;
    t->capture_s += md_now() - c0;
    return MD_OK;
}

/* Waits for the step in flight, hands its batch back and adds its results. */
md_status md_trainer_pipe_finish(md_trainer *t)
{
    if (!t->pend_b) return MD_OK;
    int s = t->pend_slot;
    /* with a device all-reduce in the step, this waits on the other ranks */
    if (t->dev_comm) md_dist_wait_begin("the gradient all-reduce (device)");
    md_status st = md_event_wait(t->dev, t->ev_done[s]);
    if (t->dev_comm) md_dist_wait_end();
    md_loader_release(t->train_l, t->pend_b);
    t->pend_b = NULL;
    MD_TRY(st);
    struct step_ctl *r = &t->h_ctl[2 + s];
    MD_TRY(md_trainer_dist_check(t));
    /* several ranks: the step's loss and count over all of them (the
     * gradients, hence grad_sumsq, were summed on the device) */
    struct step_scalars sc = {.loss_sum = r->opt.loss_sum, .correct = r->correct};
    MD_TRY(md_trainer_dist_scalars(t, &sc));
    /* the device skipped the update of such a step (md_optim_ctl) */
    if (!isfinite(sc.loss_sum)) return md_trainer_numeric_failure(t, t->pend_step, "the loss is not finite");
    if (t->scaler.enabled) { /* the device's loss scaler (md_scale_ctl): this step's decision */
        if (r->scale.gave_up) return md_trainer_numeric_failure(t, t->pend_step, "the gradients are not finite");
        t->scaler.scale = r->scale.scale;
        t->scaler.clean = r->scale.clean;
        t->scaler.skipped = r->scale.skipped;
        md_optim_set_steps(t->opt, r->scale.taken);
    } else if (!isfinite(r->opt.grad_sumsq))
        return md_trainer_numeric_failure(t, t->pend_step, "the gradients are not finite");
    t->ep_loss += (double)sc.loss_sum;
    t->ep_correct += sc.correct;
    t->ep_seen += (long long)t->pend_n * (t->ranks > 1 ? t->ranks : 1);
    return MD_OK;
}

/* After an error: the step in flight is dropped (its batch handed back). */
void md_trainer_pipe_abandon(md_trainer *t)
{
    if (!t->pend_b) return;
    (void)md_dev_sync(t->dev);
    md_loader_release(t->train_l, t->pend_b);
    t->pend_b = NULL;
}

/* Queues one full-batch step and then finishes the previous one, so the host
 * prepares step i+1 while the device runs step i. Takes b (released by
 * md_trainer_pipe_finish once the step that reads it is done). */
md_status md_trainer_pipe_step(md_trainer *t, struct md_batch *b)
{
    int s = (int)(t->pipe_steps & 1);
    int32_t *labels = s ? t->d_labels2 : t->d_labels;
    double c0 = md_now();
    md_status st = MD_OK;
    /* input set s was last read by step i-2, which md_trainer_pipe_finish waited for */
    for (int i = 0; st == MD_OK && i < t->ninputs; i++) {
        md_model_set_input_buffer(t->model, i, s ? t->in2[i] : NULL);
        st = md_dev_upload_side(t->dev, md_model_input_buffer(t->model, i), b->inputs[i],
                                (size_t)b->n * t->in_elems[i] * sizeof(float));
    }
    if (st == MD_OK) st = md_dev_upload_side(t->dev, labels, b->labels, (size_t)b->n * sizeof(int32_t));
    struct step_ctl *u = &t->h_ctl[s];
    memset(u, 0, sizeof *u);
    u->opt.step = md_optim_steps(t->opt) + 1;
    u->opt.clip = t->o->grad_clip > 0 ? t->o->grad_clip : 0.0;
    u->opt.lr = (float)md_schedule_lr(&t->sched, t->global_step);
    u->opt.grad_scale = 1.0f / t->scaler.scale;
    u->rng_offset = (uint64_t)t->global_step << 32;
    size_t up = sizeof *u;
    if (t->scaler.enabled && t->pend_b) /* the step in flight decides the scaler: leave it */
        up = offsetof(struct step_ctl, scale);
    else if (t->scaler.enabled) { /* none in flight: the host's values are the latest */
        u->scale.taken = md_optim_steps(t->opt);
        u->scale.clean = t->scaler.clean;
        u->scale.skipped = t->scaler.skipped;
        u->scale.scale = t->scaler.scale;
        u->scale.growth_interval = t->scaler.growth_interval;
    }
    if (st == MD_OK) st = md_dev_upload(t->dev, t->d_ctl, u, up);
    if (st == MD_OK) st = md_dev_side_join(t->dev);
    md_model_set_step_dev(t->model, &t->d_ctl->rng_offset);
    double c1 = md_now();
    if (st == MD_OK && !t->graph[s] && t->capture && t->pipe_steps > 0) {
        /* after the eager first step (lazy plans, workspaces, cuDNN choices) */
        st = capture_step(t, s, labels, b->n);
        if (st != MD_OK) {
            md_warn("CUDA graph capture of the training step failed (%s); the steps run without it", md_errmsg());
            snprintf(t->pipe_why, sizeof t->pipe_why, "pipelined; graph capture failed, so not captured");
            t->capture = 0;
            st = MD_OK;
        }
    }
    if (st == MD_OK) {
        if (t->graph[s]) {
            st = md_dev_graph_launch(t->dev, t->graph[s]);
            t->graph_replays++;
        } else {
            st = pipe_body(t, labels, b->n);
            t->pipe_eager++;
        }
    }
    if (st == MD_OK) st = md_dev_download_async(t->dev, &t->h_ctl[2 + s], t->d_ctl, sizeof(struct step_ctl));
    if (st == MD_OK) st = md_event_record(t->dev, t->ev_done[s]);
    if (st != MD_OK) {
        md_trainer_pipe_abandon(t);
        (void)md_dev_sync(t->dev);
        md_loader_release(t->train_l, b);
        return st;
    }
    md_optim_set_steps(t->opt, u->opt.step);
    double c2 = md_now();
    md_status prev = md_trainer_pipe_finish(t);
    t->pend_b = b;
    t->pend_slot = s;
    t->pend_n = b->n;
    t->pend_step = t->global_step;
    t->global_step++;
    t->pipe_steps++;
    if (prev == MD_OK && t->depth == 0) prev = md_trainer_pipe_finish(t);
    t->ph_upload += c1 - c0;
    t->ph_step += c2 - c1; /* queueing the step (or its replay): forward, backward, optimizer in one */
    t->ph_sync += md_now() - c2;
    return prev;
}
