/* trainer_dist.c - data parallelism (trainer_impl.h): every rank runs the
 * same model on its shard of each global batch (the loader's shard_rank),
 * the gradients are summed over the ranks before the optimizer step, and
 * every rank then takes the same step, so the replicas stay identical.
 *
 * The all-reduce: a device with its own collectives (CUDA: NCCL) sums the
 * flat gradient buffer in place on its stream; other devices (CPU, ref,
 * Metal) copy it to the host and sum with MPI (core/dist.h), once after
 * backward. On a device with its own collectives the model hands the
 * gradients over in buckets (--bucket-mb) as the backward finishes them
 * (md_model_set_grad_sink): each bucket's all-reduce starts on a side queue
 * and overlaps the backward of the earlier layers; the step joins them
 * before the optimizer. Only the part after the backward's end is exposed
 * (docs/distributed.md, the scaling model).
 *
 * --sync-bn: every batchnorm layer's training statistics and backward sums
 * are exchanged between the ranks (kernels.h md_bn_sync): on the device's
 * communicator where it has one (CUDA: NCCL, on its stream), else through
 * bn_allreduce (MPI on the host copies the CPU kernels hand it). */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/dist.h"
#include "core/signals.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/timer.h"
#include "nn/model.h"
#include "train/trainer_impl.h"

static void abort_comm(void *ctx) { md_dev_comm_abort(ctx); }

/* md_model_set_grad_sink: a bucket of final gradients */
static md_status grad_sink(void *ctx, float *grads, size_t n)
{
    md_trainer *t = ctx;
    t->ep_ar_buckets++;
    return md_dev_allreduce_start(t->dev, grads, n);
}

static md_status bn_allreduce(void *ctx, float *buf, size_t n)
{
    (void)ctx;
    return md_dist_allreduce_sum_f32(buf, n, "the synchronised batch norm");
}

/* --sync-bn: with one rank a no-op (said once); with several refused where
 * the device's batch norm cannot exchange statistics (Metal), else on. */
static md_status sync_bn_setup(md_trainer *t)
{
    if (!t->o->sync_bn) return MD_OK;
    if (t->ranks < 2) {
        md_warn("--sync-bn with one rank: nothing to synchronise (batch norm as without it)");
        return MD_OK;
    }
    const struct md_device_info *di = md_device_get_info(t->dev);
    if (!md_dev_batchnorm_sync(t->dev))
        return md_errf(MD_ERR_UNSUPPORTED, "--sync-bn: %s (%s) has no synchronised batch norm; drop --sync-bn",
                       di->backend, di->name);
    struct md_bn_sync s = {.nranks = t->ranks, .allreduce = bn_allreduce, .ctx = NULL};
    md_model_set_bn_sync(t->model, &s);
    t->sync_bn = 1;
    return MD_OK;
}

/* The device whose communicator is up (it lives as long as the device:
 * later trainers of the run, --folds all, use it again). */
static md_device *comm_dev;

/* Rank 0's copy of n floats of device memory on every rank. */
static md_status bcast_dev(md_trainer *t, float *d, size_t n, const char *what)
{
    if (!n) return MD_OK;
    float *h = md_malloc(n * sizeof *h);
    if (!h) return MD_ERR_OOM;
    md_status st = md_dev_download(t->dev, h, d, n * sizeof *h);
    if (st == MD_OK) st = md_dist_bcast(h, n * sizeof *h, 0, what);
    if (st == MD_OK) st = md_dev_upload(t->dev, d, h, n * sizeof *h);
    if (st == MD_OK) st = md_dev_sync(t->dev);
    md_free(h);
    return st;
}

md_status md_trainer_dist_setup(md_trainer *t)
{
    if (t->ranks < 2) return sync_bn_setup(t);
    if (t->o->sync_bn && !md_dev_batchnorm_sync(t->dev)) MD_TRY(sync_bn_setup(t)); /* before any set-up */
    size_t n = md_model_nparams(t->model);
    if (md_dev_has_comm(t->dev) && comm_dev == t->dev) {
        t->dev_comm = 1;
        for (int i = 0; i < 2; i++)
            if (!t->ev_ar[i]) MD_TRY(md_event_create(t->dev, &t->ev_ar[i]));
    } else if (md_dev_has_comm(t->dev) && !t->dev_comm) {
        unsigned char id[MD_COMM_ID_BYTES] = {0};
        md_status st = MD_OK;
        if (t->rank == 0) st = md_dev_comm_unique_id(t->dev, id);
        /* every rank learns whether rank 0 got an id before any waits on
         * it: 1 yes, 0 the plug-in has no NCCL (host all-reduce instead), -1 failed */
        double ok = st == MD_OK ? 1 : st == MD_ERR_UNSUPPORTED ? 0 : -1;
        char why[300];
        snprintf(why, sizeof why, "%s", st != MD_OK ? md_errmsg() : "");
        MD_TRY(md_dist_bcast(&ok, sizeof ok, 0, "the communicator set-up"));
        if (ok < 0) return st != MD_OK ? st : md_errf(MD_ERR_DEVICE, "rank 0 could not create the communicator id");
        if (ok == 0) {
            if (t->rank == 0) md_warn("%s; the gradients are summed with MPI on host copies instead (slower)", why);
            goto host;
        }
        MD_TRY(md_dist_bcast(id, sizeof id, 0, "the communicator set-up"));
        md_dist_wait_begin("the device communicator's set-up");
        st = md_dev_comm_init(t->dev, id, t->ranks, t->rank);
        md_dist_wait_end();
        MD_TRY(st);
        md_dist_on_abort(abort_comm, t->dev);
        comm_dev = t->dev;
        t->dev_comm = 1;
        for (int i = 0; i < 2; i++) MD_TRY(md_event_create(t->dev, &t->ev_ar[i]));
    } else if (!md_dev_has_comm(t->dev)) {
    host:
        if (!t->h_grads) t->h_grads = md_malloc((n ? n : 1) * sizeof(float));
        if (!t->h_grads) return MD_ERR_OOM;
    }
    /* the same start everywhere (the seed gives it already; --init-from and
     * --resume read the same file; this makes sure) */
    if (t->dev_comm && t->o->bucket_mb > 0) {
        size_t floats = (size_t)(t->o->bucket_mb * 1e6 / sizeof(float));
        md_model_set_grad_sink(t->model, floats ? floats : 1, grad_sink, t);
        t->buckets = 1;
    }
    MD_TRY(bcast_dev(t, md_model_params(t->model), n, "the initial weights' broadcast"));
    MD_TRY(md_model_params_changed(t->model));
    MD_TRY(sync_bn_setup(t));
    return md_trainer_dist_sync_buffers(t);
}

void md_trainer_dist_free(md_trainer *t)
{
    if (t->buckets && t->model) md_model_set_grad_sink(t->model, 0, NULL, NULL);
    t->buckets = 0;
    if (t->sync_bn && t->model) md_model_set_bn_sync(t->model, NULL); /* later forwards are one rank's */
    t->sync_bn = 0;
    for (int i = 0; i < 2; i++) {
        md_event_destroy(t->dev, t->ev_ar[i]);
        t->ev_ar[i] = NULL;
    }
    md_free(t->h_grads);
    t->h_grads = NULL;
}

md_status md_trainer_dist_sync_buffers(md_trainer *t)
{
    if (t->ranks < 2) return MD_OK;
    return bcast_dev(t, md_model_bn_stats(t->model), md_model_bn_stats_count(t->model),
                     "the BN statistics' broadcast");
}

int md_trainer_dist_global_n(md_trainer *t, long long b)
{
    long long g = (long long)t->batch * (t->ranks > 1 ? t->ranks : 1);
    long long left = md_data_count(t->data, MD_SPLIT_TRAIN) - b * g;
    return (int)(left < g ? (left > 0 ? left : 0) : g);
}

md_status md_trainer_dist_grads(md_trainer *t, float *grads, size_t n)
{
    if (t->ranks < 2) return MD_OK;
    t->ar_calls++;
    t->ep_ar_calls++;
    if (t->buckets) { /* started in backward: the join's wait is the exposed part */
        MD_TRY(md_event_record(t->dev, t->ev_ar[0]));
        MD_TRY(md_dev_allreduce_join(t->dev));
        t->ar_timed_pending = 1;
        return md_event_record(t->dev, t->ev_ar[1]);
    }
    if (t->dev_comm) { /* queued: timed by events, read after the step's sync */
        t->ep_ar_buckets++;
        MD_TRY(md_event_record(t->dev, t->ev_ar[0]));
        MD_TRY(md_dev_allreduce_sum(t->dev, grads, n));
        t->ar_timed_pending = 1;
        return md_event_record(t->dev, t->ev_ar[1]);
    }
    double t0 = md_now();
    MD_TRY(md_dev_download(t->dev, t->h_grads, grads, n * sizeof(float)));
    MD_TRY(md_dist_allreduce_sum_f32(t->h_grads, n, "the gradient all-reduce"));
    MD_TRY(md_dev_upload(t->dev, grads, t->h_grads, n * sizeof(float)));
    double dt = md_now() - t0;
    t->ar_s += dt;
    t->ep_ar_s += dt;
    t->ex_s += dt;
    t->ep_ex_s += dt;
    t->ep_ar_buckets++;
    return MD_OK;
}

md_status md_trainer_dist_grads_queued(md_trainer *t, float *grads, size_t n)
{
    if (t->ranks < 2) return MD_OK;
    if (t->buckets) return md_dev_allreduce_join(t->dev);
    if (t->dev_comm) return md_dev_allreduce_sum(t->dev, grads, n);
    /* a device without capture runs this in order, at once */
    MD_TRY(md_dev_download(t->dev, t->h_grads, grads, n * sizeof(float)));
    MD_TRY(md_dist_allreduce_sum_f32(t->h_grads, n, "the gradient all-reduce"));
    return md_dev_upload(t->dev, grads, t->h_grads, n * sizeof(float));
}

int md_trainer_dist_pipe_ok(md_trainer *t, int can_capture)
{
    /* default: on where the device sums the gradients itself (NCCL: the
     * all-reduce is captured with the step); MPSDIAG_DIST_GRAPH=1 also
     * pipelines a device without capture, =0 keeps host-synced steps */
    const char *e = getenv("MPSDIAG_DIST_GRAPH");
    if (e && strcmp(e, "0") == 0) return 0;
    if (!e || strcmp(e, "1") != 0) return t->dev_comm;
    return t->dev_comm || !can_capture;
}

md_status md_trainer_dist_check(md_trainer *t)
{
    if (t->ranks < 2 || !t->dev_comm) return MD_OK;
    md_status st = md_dev_comm_check(t->dev);
    if (st != MD_OK) {
        md_dev_comm_abort(t->dev);
        return st;
    }
    float ms = 0, busy = 0;
    /* bucketed: the collectives' own time (side queue), and the wait */
    int have_busy = t->buckets && md_dev_comm_busy_ms(t->dev, &busy) == MD_OK;
    if (t->ar_timed_pending && md_event_elapsed_ms(t->dev, t->ev_ar[0], t->ev_ar[1], &ms) == MD_OK) {
        double ex = (double)ms / 1e3, all = have_busy ? (double)busy / 1e3 : ex;
        t->ar_s += all;
        t->ep_ar_s += all;
        t->ex_s += ex;
        t->ep_ex_s += ex;
    }
    t->ar_timed_pending = 0;
    return MD_OK;
}

md_status md_trainer_dist_scalars(md_trainer *t, struct step_scalars *sc)
{
    if (t->ranks < 2) return MD_OK;
    double v[6] = {sc->loss_sum, sc->correct, sc->reg[0], sc->reg[1], sc->reg[2], md_interrupted() ? 1 : 0};
    MD_TRY(md_dist_allreduce_sum_f64(v, 6, "the step's loss sum"));
    if (v[5] > 0) {
        md_interrupt_set(1);
        t->dist_stop = 1;
    }
    sc->loss_sum = (float)v[0];
    sc->correct = (int32_t)v[1];
    for (int i = 0; i < 3; i++) sc->reg[i] = (float)v[2 + i];
    return MD_OK;
}

int md_trainer_dist_interrupted(md_trainer *t)
{
    if (t->ranks < 2) return md_interrupted();
    double v = md_interrupted() ? 1 : 0;
    if (md_dist_allreduce_max_f64(&v, 1, "the end of the epoch") != MD_OK) return md_interrupted();
    if (v > 0) md_interrupt_set(1);
    return v > 0;
}

md_status md_trainer_dist_agree(md_trainer *t, double *v, int n)
{
    if (t->ranks < 2) return MD_OK;
    return md_dist_bcast(v, (size_t)n * sizeof *v, 0, "rank 0's evaluation");
}

void md_trainer_dist_report_start(md_trainer *t)
{
    cJSON *d = cJSON_AddObjectToObject(t->report, "distributed");
    t->dist = d;
    if (!d) return;
    int r = t->ranks > 1 ? t->ranks : 1;
    cJSON_AddNumberToObject(d, "ranks", r);
    cJSON_AddNumberToObject(d, "per_rank_batch", t->batch);
    cJSON_AddNumberToObject(d, "global_batch", (double)t->batch * r);
    cJSON_AddStringToObject(d, "mpi", md_dist_library());
    cJSON_AddStringToObject(d, "collectives", r < 2 ? "none" : t->dev_comm ? "nccl" : "mpi");
    cJSON *lr = cJSON_AddObjectToObject(d, "lr_scaling");
    if (lr) {
        cJSON_AddStringToObject(lr, "rule", t->o->lr_scaling ? "linear" : "none");
        cJSON_AddNumberToObject(lr, "base_lr", t->lr_base);
        cJSON_AddNumberToObject(lr, "lr", t->lr);
    }
    cJSON_AddStringToObject(d, "batch_norm", t->sync_bn ? "synchronised" : "local");
    cJSON *ev = cJSON_AddObjectToObject(d, "evaluation");
    if (ev) cJSON_AddStringToObject(ev, "mode", r < 2 ? "one process" : "sharded");
    cJSON *ar = cJSON_AddObjectToObject(d, "allreduce");
    if (ar) {
        cJSON_AddStringToObject(ar, "mode", t->buckets ? "buckets" : "flat");
        cJSON_AddBoolToObject(ar, "overlap", t->buckets);
        cJSON_AddNumberToObject(ar, "bytes_per_step", (double)md_model_nparams(t->model) * sizeof(float));
        if (t->buckets) cJSON_AddNumberToObject(ar, "bucket_bytes", t->o->bucket_mb * 1e6);
    }
    cJSON_AddItemToObject(d, "epochs", cJSON_CreateArray());
    if (r < 2) return;
    double mb = (double)md_model_nparams(t->model) * sizeof(float) / 1e6;
    if (t->buckets)
        md_out("  %-16s %d ranks x batch %d = global batch %d; NCCL all-reduce of %.3g MB per step in buckets of "
               "%g MB, overlapping backward\n",
               "data parallel", r, t->batch, t->batch * r, mb, t->o->bucket_mb);
    else
        md_out("  %-16s %d ranks x batch %d = global batch %d; one %s all-reduce of %.3g MB per step\n",
               "data parallel", r, t->batch, t->batch * r, t->dev_comm ? "NCCL" : "MPI", mb);
    if (t->o->lr_scaling)
        md_out("  %-16s %g x %d ranks = %g (linear scaling rule; --lr-scaling none keeps --lr)\n", "lr scaling",
               t->lr_base, r, t->lr);
    else
        md_out("  %-16s %g as given (--lr-scaling none)\n", "lr scaling", t->lr);
    if (t->sync_bn)
        md_out("  %-16s synchronised: statistics of the global batch on every rank (--sync-bn)\n", "batch norm");
    else
        md_out("  %-16s local to each rank (rank 0's running statistics are evaluated and saved)\n", "batch norm");
}

md_status md_trainer_dist_epoch(md_trainer *t, double ep_loop_s)
{
    if (t->ranks < 2) return MD_OK;
    int r = t->ranks;
    enum { F = 5 }; /* per rank: samples, step loop s, all-reduce s, exposed s (timed steps), steps */
    double mine[F] = {(double)t->ep_samples_local, ep_loop_s, t->ep_ar_s, t->ep_ex_s, (double)t->ep_steps_local};
    double *all = md_malloc((size_t)r * F * sizeof *all);
    if (!all) return MD_ERR_OOM;
    md_status st = md_dist_allgather_f64(mine, F, all, "the epoch's per-rank figures");
    /* hosts: only rank 0 names them (gathered as 64-byte names) */
    char host[64] = {0};
    snprintf(host, sizeof host, "%s", md_dist_host());
    double hbuf[8];
    memcpy(hbuf, host, sizeof hbuf);
    double *hosts = st == MD_OK ? md_malloc((size_t)r * sizeof hbuf) : NULL;
    if (st == MD_OK && !hosts) st = MD_ERR_OOM;
    if (st == MD_OK) st = md_dist_allgather_f64(hbuf, 8, hosts, "the epoch's per-rank figures");
    if (st != MD_OK) {
        md_free(all);
        md_free(hosts);
        return st;
    }
    double bytes = (double)md_model_nparams(t->model) * sizeof(float);
    double sum_sps = 0, min_sps = 1e300, max_loop = 0, mean_ar = 0, mean_ex = 0, steps = 0;
    for (int i = 0; i < r; i++) {
        double sps = all[F * i + 1] > 0 ? all[F * i] / all[F * i + 1] : 0;
        sum_sps += sps;
        if (sps < min_sps) min_sps = sps;
        if (all[F * i + 1] > max_loop) max_loop = all[F * i + 1];
        mean_ar += all[F * i + 2] / r;
        mean_ex += all[F * i + 3] / r;
        if (all[F * i + 4] > steps) steps = all[F * i + 4];
    }
    double mean_sps = sum_sps / r;
    long long calls = t->ep_ar_calls > 0 ? t->ep_ar_calls : 1;
    double ar_step = mean_ar / (double)calls;                     /* seconds per all-reduce */
    double algbw = ar_step > 0 ? bytes / ar_step / 1e9 : 0;       /* GB/s */
    double busbw = algbw * 2.0 * (r - 1) / r;                     /* as nccl-tests */
    double samples = 0;
    for (int i = 0; i < r; i++) samples += all[F * i];
    double global_sps = max_loop > 0 ? samples / max_loop : 0;
    /* against ranks x one rank's speed without communication: the part of
     * the all-reduce the steps waited for is what scaling loses. Captured
     * steps are not timed one by one: the timed steps' mean wait stands for
     * every step of the epoch */
    double ex_epoch = t->ep_ar_calls > 0 ? mean_ex / (double)calls * steps : 0;
    double compute_s = max_loop - ex_epoch;
    double overlap = mean_ar > 0 ? 1.0 - mean_ex / mean_ar : 0;
    if (overlap < 0) overlap = 0;
    double eff = compute_s > 0 && max_loop > 0 ? compute_s / max_loop : 0;
    cJSON *e = cJSON_CreateObject();
    if (e) {
        cJSON_AddNumberToObject(e, "epoch", t->epoch + 1);
        cJSON_AddNumberToObject(e, "samples_per_s", global_sps);
        cJSON_AddNumberToObject(e, "steps", steps);
        cJSON_AddNumberToObject(e, "allreduce_calls", (double)t->ep_ar_calls);
        cJSON_AddNumberToObject(e, "allreduce_s", mean_ar);
        cJSON_AddNumberToObject(e, "allreduce_ms_per_step", ar_step * 1e3);
        cJSON_AddNumberToObject(e, "allreduce_buckets", (double)t->ep_ar_buckets);
        cJSON_AddNumberToObject(e, "exposed_ms_per_step", mean_ex / (double)calls * 1e3);
        cJSON_AddNumberToObject(e, "overlap", overlap);
        cJSON_AddNumberToObject(e, "algbw_gbps", algbw);
        cJSON_AddNumberToObject(e, "busbw_gbps", busbw);
        cJSON_AddNumberToObject(e, "scaling_efficiency", eff);
        cJSON *pr = cJSON_AddArrayToObject(e, "per_rank");
        cJSON *sg = cJSON_AddArrayToObject(e, "stragglers");
        for (int i = 0; i < r; i++) {
            char hn[65];
            memcpy(hn, &hosts[8 * i], 64);
            hn[64] = '\0';
            double sps = all[F * i + 1] > 0 ? all[F * i] / all[F * i + 1] : 0;
            cJSON *x = cJSON_CreateObject();
            if (!x) continue;
            cJSON_AddNumberToObject(x, "rank", i);
            cJSON_AddStringToObject(x, "host", hn);
            cJSON_AddNumberToObject(x, "samples_per_s", sps);
            cJSON_AddNumberToObject(x, "step_loop_s", all[F * i + 1]);
            cJSON_AddNumberToObject(x, "allreduce_s", all[F * i + 2]);
            cJSON_AddNumberToObject(x, "exposed_s", all[F * i + 3]);
            cJSON_AddItemToArray(pr, x);
            /* a straggler: 10% below the mean rank's pace */
            if (sps < 0.9 * mean_sps) {
                char name[128];
                snprintf(name, sizeof name, "rank %d (%s): %.0f samples/s, mean %.0f", i, hn, sps, mean_sps);
                cJSON_AddItemToArray(sg, cJSON_CreateString(name));
            }
        }
        cJSON_AddItemToArray(cJSON_GetObjectItemCaseSensitive(t->dist, "epochs"), e);
    }
    /* every epoch with --verbose, the last one always */
    void (*say)(const char *, ...) = t->epoch + 1 >= t->o->epochs ? md_out : md_verbose;
    say("  epoch %d, %d ranks: %.0f samples/s in all (slowest rank %.0f), efficiency %.0f%%\n"
        "    all-reduce %.2f ms/step, %.0f%% of it overlapped, algbw %.2f GB/s, busbw %.2f GB/s\n",
        t->epoch + 1, r, global_sps, min_sps, eff * 100, ar_step * 1e3, overlap * 100, algbw, busbw);
    for (int i = 0; e && i < cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(e, "stragglers")); i++)
        md_out("  straggler: %s\n",
               cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(e, "stragglers"), i)->valuestring);
    md_free(all);
    md_free(hosts);
    t->ep_ar_s = 0;
    t->ep_ex_s = 0;
    t->ep_ar_calls = 0;
    t->ep_ar_buckets = 0;
    t->ep_samples_local = 0;
    t->ep_steps_local = 0;
    return MD_OK;
}
