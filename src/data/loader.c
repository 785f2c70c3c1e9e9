/* loader.c - batches of one split, made ahead by worker threads.
 *
 * A ring of max(prefetch, workers)+1 slots (so that every worker can fill
 * one while the consumer holds another); batch b of an epoch always lives in slot
 * b % slots. Workers claim batch numbers in order and fill their slot once
 * the consumer has released the batch that used it before; the consumer
 * takes batches strictly in order. What goes into a batch (which samples,
 * which crop and flip) depends only on (seed, epoch, position), never on
 * which thread made it, so any number of workers gives the same batches.
 */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "core/mem.h"
#include "core/rng.h"
#include "core/timer.h"
#include "data/data_impl.h"

enum { S_FREE = 0, S_FILLING, S_READY, S_HELD };

struct slot {
    struct md_batch b;
    void *mem;          /* one block: inputs, labels, index, targets */
    int pinned;
    int state;
    long long batch_no;
    md_status st;       /* a worker's failure, handed to the consumer */
    char err[512];
};

struct worker {
    struct md_loader *l;
    pthread_t th;
    md_data_scratch *scratch;
    int started;
};

struct md_loader {
    struct md_data *d;
    struct md_loader_opts o;
    long long n;          /* samples in the split */
    long long nbatches;
    long long gbatch;     /* samples per global batch: batch_size x shard_count */
    int64_t *order;       /* (n) this epoch's order: positions within the split */
    int epoch;
    int nslots;
    struct slot *slots;
    int nworkers;
    struct worker *workers;
    md_data_scratch *main_scratch; /* for 0 workers */
    pthread_mutex_t mu;
    pthread_cond_t cv_ready, cv_free;
    long long next_fill, next_deliver;
    int stop, running, epoch_open;
    double t_epoch;
    /* statistics (under mu) */
    long long st_samples, st_batches, st_skipped;
    double st_prepare, st_wait, st_wall;
};

void md_shard_bounds(long long m, int r, int R, long long *lo, long long *hi)
{
    if (R < 1) R = 1;
    *lo = m * r / R;
    *hi = m * (r + 1) / R;
}

/* Fills slot s with batch b (outside the lock). */
static md_status fill(struct md_loader *l, md_data_scratch *scr, struct slot *s, long long b, long long *skipped)
{
    struct md_data *d = l->d;
    long long first = b * l->gbatch;
    long long last = first + l->gbatch;
    if (last > l->n) last = l->n;
    if (l->o.shard_count > 1) { /* this rank's part of the global batch */
        long long lo, hi;
        md_shard_bounds(last - first, l->o.shard_rank, l->o.shard_count, &lo, &hi);
        last = first + hi;
        first += lo;
    }
    int j = 0;
    *skipped = 0;
    for (long long p = first; p < last; p++) {
        long long gi = md_data_split_index(d, l->o.split, l->order[p]);
        struct md_aug a;
        if (l->o.augment) a = md_data_aug_draw(d, l->o.seed, l->epoch, p);
        int bad = 0;
        MD_TRY(md_data_prepare(d, scr, gi, l->o.augment ? &a : NULL, s->b.inputs, j, &s->b.labels[j], s->b.targets,
                               &bad));
        if (bad) { (*skipped)++; continue; }
        s->b.index[j] = l->order[p];
        j++;
    }
    s->b.n = j;
    s->b.batch = b;
    s->b.epoch = l->epoch;
    return MD_OK;
}

static void *worker_main(void *arg)
{
    struct worker *w = arg;
    struct md_loader *l = w->l;
    pthread_mutex_lock(&l->mu);
    for (;;) {
        if (l->stop || l->next_fill >= l->nbatches) break;
        long long b = l->next_fill;
        struct slot *s = &l->slots[b % l->nslots];
        if (s->state != S_FREE) {
            pthread_cond_wait(&l->cv_free, &l->mu);
            continue;
        }
        l->next_fill++;
        s->state = S_FILLING;
        s->batch_no = b;
        pthread_mutex_unlock(&l->mu);
        double t0 = md_now();
        long long skipped = 0;
        md_err_clear();
        md_status st = fill(l, w->scratch, s, b, &skipped);
        double dt = md_now() - t0;
        pthread_mutex_lock(&l->mu);
        s->st = st;
        /* Later batches go on: the consumer meets this error in order. */
        if (st != MD_OK) snprintf(s->err, sizeof s->err, "%s", md_errmsg());
        s->state = S_READY;
        l->st_prepare += dt;
        l->st_samples += s->b.n;
        l->st_skipped += skipped;
        pthread_cond_broadcast(&l->cv_ready);
    }
    pthread_mutex_unlock(&l->mu);
    return NULL;
}

static void stop_workers(struct md_loader *l)
{
    if (!l->running) return;
    pthread_mutex_lock(&l->mu);
    l->stop = 1;
    pthread_cond_broadcast(&l->cv_free);
    pthread_mutex_unlock(&l->mu);
    for (int i = 0; i < l->nworkers; i++)
        if (l->workers[i].started) {
            pthread_join(l->workers[i].th, NULL);
            l->workers[i].started = 0;
        }
    l->running = 0;
}

md_status md_loader_create(struct md_data *d, const struct md_loader_opts *lo, struct md_loader **out)
{
    *out = NULL;
    if (lo->split < 0 || lo->split >= MD_SPLIT_COUNT || lo->batch_size < 1 || lo->num_workers < 0 ||
        lo->prefetch < 1 || lo->num_workers > 256 || lo->prefetch > 64 || lo->shard_count < 0 ||
        (lo->shard_count > 1 && (lo->shard_rank < 0 || lo->shard_rank >= lo->shard_count)))
        return md_errf(MD_ERR_INTERNAL, "md_loader_create: bad options (batch %d, workers %d, prefetch %d)",
                       lo->batch_size, lo->num_workers, lo->prefetch);
    md_status st = MD_OK;
    struct md_loader *l = md_calloc(1, sizeof *l);
    if (!l) return MD_ERR_OOM;
    l->d = d;
    l->o = *lo;
    l->n = md_data_count(d, lo->split);
    l->gbatch = (long long)lo->batch_size * (lo->shard_count > 1 ? lo->shard_count : 1);
    l->nbatches = lo->drop_last ? l->n / l->gbatch : (l->n + l->gbatch - 1) / l->gbatch;
    l->epoch = -1;
    pthread_mutex_init(&l->mu, NULL);
    pthread_cond_init(&l->cv_ready, NULL);
    pthread_cond_init(&l->cv_free, NULL);
    l->order = md_malloc((size_t)(l->n > 0 ? l->n : 1) * sizeof *l->order);
    l->nslots = (lo->prefetch > lo->num_workers ? lo->prefetch : lo->num_workers) + 1;
    l->slots = md_calloc((size_t)l->nslots, sizeof *l->slots);
    if (!l->order || !l->slots) { st = MD_ERR_OOM; goto fail; }

    /* One block per slot: inputs (each 64-byte aligned), labels, index,
     * targets (regression). */
    int ni = md_data_num_inputs(d);
    size_t bs = (size_t)lo->batch_size, off[MD_DATA_MAX_INPUTS + 3], total = 0;
    for (int i = 0; i < ni; i++) {
        off[i] = total;
        total += (bs * md_data_input_elems(d, i) * sizeof(float) + 63) & ~(size_t)63;
    }
    off[ni] = total;
    total += (bs * sizeof(int32_t) + 63) & ~(size_t)63;
    off[ni + 1] = total;
    total += (bs * sizeof(int64_t) + 63) & ~(size_t)63;
    off[ni + 2] = total;
    total += bs * md_data_target_elems(d) * sizeof(float);
    for (int k = 0; k < l->nslots; k++) {
        struct slot *s = &l->slots[k];
        if (lo->pin_dev) {
            if ((st = md_dev_host_alloc(lo->pin_dev, total, &s->mem, &s->pinned)) != MD_OK) goto fail;
        } else if (!(s->mem = md_malloc(total))) {
            st = MD_ERR_OOM;
            goto fail;
        }
        s->b.num_inputs = ni;
        for (int i = 0; i < ni; i++) s->b.inputs[i] = (float *)((char *)s->mem + off[i]);
        s->b.labels = (int32_t *)((char *)s->mem + off[ni]);
        s->b.index = (int64_t *)((char *)s->mem + off[ni + 1]);
        s->b.targets = md_data_target_elems(d) ? (float *)((char *)s->mem + off[ni + 2]) : NULL;
        s->b.pinned = s->pinned;
    }
    l->nworkers = lo->num_workers;
    if (l->nworkers > 0) {
        l->workers = md_calloc((size_t)l->nworkers, sizeof *l->workers);
        if (!l->workers) { st = MD_ERR_OOM; goto fail; }
        for (int i = 0; i < l->nworkers; i++) {
            l->workers[i].l = l;
            if ((st = md_data_scratch_new(d, &l->workers[i].scratch)) != MD_OK) goto fail;
        }
    } else if ((st = md_data_scratch_new(d, &l->main_scratch)) != MD_OK) {
        goto fail;
    }
    *out = l;
    return MD_OK;
fail:
    md_loader_free(l);
    return st;
}

void md_loader_free(struct md_loader *l)
{
    if (!l) return;
    stop_workers(l);
    for (int i = 0; l->workers && i < l->nworkers; i++) md_data_scratch_free(l->workers[i].scratch);
    md_free(l->workers);
    md_data_scratch_free(l->main_scratch);
    for (int k = 0; l->slots && k < l->nslots; k++) {
        if (!l->slots[k].mem) continue;
        if (l->o.pin_dev) md_dev_host_free(l->o.pin_dev, l->slots[k].mem, l->slots[k].pinned);
        else md_free(l->slots[k].mem);
    }
    md_free(l->slots);
    md_free(l->order);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv_ready);
    pthread_cond_destroy(&l->cv_free);
    md_free(l);
}

long long md_loader_num_batches(const struct md_loader *l) { return l->nbatches; }

static void end_epoch_timing(struct md_loader *l)
{
    pthread_mutex_lock(&l->mu);
    if (l->epoch_open) {
        l->st_wall += md_now() - l->t_epoch;
        l->epoch_open = 0;
    }
    pthread_mutex_unlock(&l->mu);
}

md_status md_loader_start_epoch(struct md_loader *l, int epoch)
{
    stop_workers(l);
    end_epoch_timing(l);
    l->epoch = epoch;
    for (long long i = 0; i < l->n; i++) l->order[i] = i;
    if (l->o.shuffle) {
        md_rng r;
        md_rng_init(&r, md_rng_hash(l->o.seed, 0x5348554646ull + (uint64_t)epoch)); /* "SHUFF" */
        for (long long i = l->n - 1; i > 0; i--) {
            long long j = (long long)(md_rng_next(&r) % (uint64_t)(i + 1));
            int64_t t = l->order[i];
            l->order[i] = l->order[j];
            l->order[j] = t;
        }
    }
    for (int k = 0; k < l->nslots; k++) {
        l->slots[k].state = S_FREE;
        l->slots[k].st = MD_OK;
    }
    l->next_fill = l->next_deliver = 0;
    l->stop = 0;
    l->t_epoch = md_now();
    l->epoch_open = 1;
    for (int i = 0; i < l->nworkers; i++) {
        if (pthread_create(&l->workers[i].th, NULL, worker_main, &l->workers[i]) != 0) {
            l->running = 1;
            stop_workers(l);
            return md_errf(MD_ERR_INTERNAL, "cannot start loader thread %d of %d", i + 1, l->nworkers);
        }
        l->workers[i].started = 1;
        l->running = 1;
    }
    return MD_OK;
}

md_status md_loader_next(struct md_loader *l, struct md_batch **out)
{
    *out = NULL;
    MD_ASSERT(l->epoch >= 0); /* md_loader_start_epoch first */
    long long b = l->next_deliver;
    if (b >= l->nbatches) {
        end_epoch_timing(l);
        stop_workers(l);
        return MD_OK;
    }
    struct slot *s = &l->slots[b % l->nslots];
    if (l->nworkers == 0) {
        if (s->state != S_FREE)
            return md_errf(MD_ERR_INTERNAL, "loader: the consumer holds %d batches; release one before the next",
                           l->nslots);
        double t0 = md_now();
        long long skipped = 0;
        md_status st = fill(l, l->main_scratch, s, b, &skipped);
        double dt = md_now() - t0;
        l->st_prepare += dt;
        l->st_wait += dt; /* the consumer made it: all of it was waiting */
        if (st != MD_OK) return st;
        l->st_samples += s->b.n;
        l->st_skipped += skipped;
        s->state = S_HELD;
    } else {
        pthread_mutex_lock(&l->mu);
        int held = 0;
        for (int k = 0; k < l->nslots; k++) held += l->slots[k].state == S_HELD;
        if (held == l->nslots) {
            pthread_mutex_unlock(&l->mu);
            return md_errf(MD_ERR_INTERNAL, "loader: the consumer holds %d batches; release one before the next",
                           held);
        }
        double t0 = md_now();
        while (!(s->state == S_READY && s->batch_no == b)) pthread_cond_wait(&l->cv_ready, &l->mu);
        l->st_wait += md_now() - t0;
        md_status st = s->st;
        if (st != MD_OK) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", s->err);
            s->state = S_FREE;
            pthread_mutex_unlock(&l->mu);
            stop_workers(l);
            end_epoch_timing(l);
            l->next_deliver = l->nbatches;
            return md_errf(st, "%s", msg);
        }
        s->state = S_HELD;
        pthread_mutex_unlock(&l->mu);
    }
    l->next_deliver++;
    l->st_batches++;
    if (l->next_deliver == l->nbatches) end_epoch_timing(l);
    *out = &s->b;
    return MD_OK;
}

void md_loader_release(struct md_loader *l, struct md_batch *b)
{
    if (!b) return;
    struct slot *s = &l->slots[b->batch % l->nslots];
    MD_ASSERT(&s->b == b);
    pthread_mutex_lock(&l->mu);
    /* A batch of an abandoned epoch may come back after its slot was reused. */
    if (s->state == S_HELD) {
        s->state = S_FREE;
        pthread_cond_broadcast(&l->cv_free);
    }
    pthread_mutex_unlock(&l->mu);
}

void md_loader_stats(const struct md_loader *l, struct md_loader_stats *out)
{
    struct md_loader *m = (struct md_loader *)l; /* the lock only */
    memset(out, 0, sizeof *out);
    pthread_mutex_lock(&m->mu);
    out->samples = l->st_samples;
    out->batches = l->st_batches;
    out->skipped = l->st_skipped;
    out->prepare_s = l->st_prepare;
    out->wait_s = l->st_wait;
    out->wall_s = l->st_wall + (l->epoch_open ? md_now() - l->t_epoch : 0.0);
    pthread_mutex_unlock(&m->mu);
    if (out->wall_s > 0) {
        out->samples_per_s = (double)out->samples / out->wall_s;
        out->batches_per_s = (double)out->batches / out->wall_s;
    }
    int w = l->nworkers > 0 ? l->nworkers : 1;
    if (out->prepare_s > 0) out->decode_per_s = (double)out->samples / out->prepare_s * w;
}

void md_loader_stats_reset(struct md_loader *l)
{
    pthread_mutex_lock(&l->mu);
    l->st_samples = l->st_batches = l->st_skipped = 0;
    l->st_prepare = l->st_wait = l->st_wall = 0;
    if (l->epoch_open) l->t_epoch = md_now();
    pthread_mutex_unlock(&l->mu);
}
