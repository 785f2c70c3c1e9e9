/* splits.c - the train/val/test index lists of a dataset: the format's
 * ranges, a seeded held-out share of train as val when there is no val
 * folder, --max-samples caps, and the per-class counts. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "core/rng.h"
#include "data/data_impl.h"

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

/* splits                                                                     */

/* --max-samples on a validation or test split: a seeded random `max` of its
 * samples, kept in order; the origin says so. */
static void cap_split(struct md_data *d, md_split s, long long max, uint64_t seed)
{
    long long n = d->split_n[s];
    if (max <= 0 || n <= max) return;
    int64_t *v = d->split[s];
    md_rng rng;
    md_rng_init(&rng, md_rng_hash(seed, 0x4d4158534d504cull + (uint64_t)s)); /* "MAXSMPL" */
    for (long long i = 0; i < max; i++) {
        long long j = i + (long long)(md_rng_next(&rng) % (uint64_t)(n - i));
        int64_t t = v[i]; v[i] = v[j]; v[j] = t;
    }
    qsort(v, (size_t)max, sizeof *v, cmp_i64);
    d->split_n[s] = max;
    size_t l = strlen(d->split_origin[s]);
    snprintf(d->split_origin[s] + l, sizeof d->split_origin[0] - l, ", %lld of %lld (--max-samples)", max, n);
}

/* k-fold: the pool of training samples (the train range and the format's
 * val range) in an order -- as they come for time-series windows, whose
 * neighbours overlap, else a seeded shuffle -- cut into `folds` parts of
 * floor(i n / K) .. floor((i + 1) n / K); part `fold` is val, the rest train
 * (its first max_samples in that order when capped). */
static md_status make_folds(struct md_data *d, int folds, int fold, long long max_samples, uint64_t seed,
                            const struct md_split_ranges *r)
{
    long long nt = r->end[MD_SPLIT_TRAIN] - r->start[MD_SPLIT_TRAIN];
    long long nv = r->end[MD_SPLIT_VAL] > r->start[MD_SPLIT_VAL] ? r->end[MD_SPLIT_VAL] - r->start[MD_SPLIT_VAL] : 0;
    long long n = nt + nv;
    if (fold < 0) fold = 0;
    if (fold >= folds) return md_errf(MD_ERR_USAGE, "--fold %d: the folds are numbered 0 to %d (--folds %d)", fold, folds - 1, folds);
    if (n < folds)
        return md_errf(MD_ERR_DATA, "--folds %d: %s has only %lld training samples, fewer than the folds", folds,
                       d->source[0] ? d->source : d->name, n);
    int ordered = d->task == MD_TASK_REGRESS && d->series.seq_len > 0;
    int64_t *order = md_malloc((size_t)n * sizeof *order);
    int64_t *val = NULL;
    if (!order) return MD_ERR_OOM;
    for (long long i = 0; i < nt; i++) order[i] = r->start[MD_SPLIT_TRAIN] + i;
    for (long long i = 0; i < nv; i++) order[nt + i] = r->start[MD_SPLIT_VAL] + i;
    if (!ordered) {
        md_rng rng;
        md_rng_init(&rng, md_rng_hash(seed, 0x4b464f4c44534554ull)); /* "KFOLDSET" */
        for (long long i = n - 1; i > 0; i--) {
            long long j = (long long)(md_rng_next(&rng) % (uint64_t)(i + 1));
            int64_t t = order[i]; order[i] = order[j]; order[j] = t;
        }
    }
    long long lo = (long long)fold * n / folds, hi = (long long)(fold + 1) * n / folds;
    val = md_malloc((size_t)(hi - lo) * sizeof *val);
    if (!val) {
        md_free(order);
        return MD_ERR_OOM;
    }
    memcpy(val, order + lo, (size_t)(hi - lo) * sizeof *val);
    qsort(val, (size_t)(hi - lo), sizeof *val, cmp_i64);
    memmove(order + lo, order + hi, (size_t)(n - hi) * sizeof *order); /* the training parts, in order */
    long long ntrain = n - (hi - lo);
    if (max_samples > 0 && ntrain > max_samples) ntrain = max_samples;
    qsort(order, (size_t)ntrain, sizeof *order, cmp_i64);
    md_free(d->split[MD_SPLIT_VAL]);
    d->split[MD_SPLIT_VAL] = val;
    d->split_n[MD_SPLIT_VAL] = hi - lo;
    d->split[MD_SPLIT_TRAIN] = order;
    d->split_n[MD_SPLIT_TRAIN] = ntrain;
    const char *how = ordered ? "in order" : "shuffled";
    char seedtxt[48] = "";
    if (!ordered) snprintf(seedtxt, sizeof seedtxt, ", seed %llu", (unsigned long long)seed);
    snprintf(d->split_origin[MD_SPLIT_VAL], sizeof d->split_origin[0], "fold %d of %d of the training samples (%s%s)",
             fold, folds, how, seedtxt);
    snprintf(d->split_origin[MD_SPLIT_TRAIN], sizeof d->split_origin[0], "the other %d fold%s", folds - 1,
             folds - 1 == 1 ? "" : "s");
    if (ntrain < n - (hi - lo)) {
        size_t l = strlen(d->split_origin[MD_SPLIT_TRAIN]);
        snprintf(d->split_origin[MD_SPLIT_TRAIN] + l, sizeof d->split_origin[0] - l, ", %lld of %lld (--max-samples)",
                 ntrain, n - (hi - lo));
    }
    return MD_OK;
}

md_status md_splits_make(struct md_data *d, double val_split, long long max_samples, uint64_t seed,
                        const struct md_split_ranges *r, int folds, int fold)
{
    md_status st = MD_OK;
    int64_t *perm = NULL;
    for (int s = 0; s < MD_SPLIT_COUNT; s++) {
        long long n = r->end[s] - r->start[s];
        if (s == MD_SPLIT_TRAIN || n <= 0) continue;
        d->split[s] = md_malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
        if (!d->split[s]) return MD_ERR_OOM;
        for (long long i = 0; i < n; i++) d->split[s][i] = r->start[s] + i;
        d->split_n[s] = n;
    }
    if (folds > 1) {
        if ((st = make_folds(d, folds, fold, max_samples, seed, r)) != MD_OK) return st;
        goto tail;
    }
    /* Train, less a seeded held-out share when there is no val folder. */
    long long nt = r->end[MD_SPLIT_TRAIN] - r->start[MD_SPLIT_TRAIN];
    perm = md_malloc((size_t)nt * sizeof *perm);
    if (!perm) return MD_ERR_OOM;
    for (long long i = 0; i < nt; i++) perm[i] = r->start[MD_SPLIT_TRAIN] + i;
    long long nval = 0;
    if (d->split_n[MD_SPLIT_VAL] == 0 && val_split > 0) {
        nval = llround((double)nt * val_split);
        if (nval >= nt) nval = nt - 1;
        md_rng rng;
        md_rng_init(&rng, md_rng_hash(seed, 0x56414c53504c4954ull)); /* "VALSPLIT" */
        for (long long i = nt - 1; i > 0; i--) {
            long long j = (long long)(md_rng_next(&rng) % (uint64_t)(i + 1));
            int64_t t = perm[i]; perm[i] = perm[j]; perm[j] = t;
        }
        if (nval > 0) {
            d->split[MD_SPLIT_VAL] = md_malloc((size_t)nval * sizeof(int64_t));
            if (!d->split[MD_SPLIT_VAL]) { st = MD_ERR_OOM; goto fail; }
            memcpy(d->split[MD_SPLIT_VAL], perm + nt - nval, (size_t)nval * sizeof(int64_t));
            qsort(d->split[MD_SPLIT_VAL], (size_t)nval, sizeof(int64_t), cmp_i64);
            d->split_n[MD_SPLIT_VAL] = nval;
            snprintf(d->split_origin[MD_SPLIT_VAL], sizeof d->split_origin[0], "%.3g of the training samples (seed %llu)",
                     val_split, (unsigned long long)seed);
        }
    }
    long long ntrain = nt - nval;
    if (max_samples > 0 && ntrain > max_samples) ntrain = max_samples; /* a random subset */
    qsort(perm, (size_t)ntrain, sizeof *perm, cmp_i64);
    d->split[MD_SPLIT_TRAIN] = perm;
    d->split_n[MD_SPLIT_TRAIN] = ntrain;
    perm = NULL;
    if (!d->split_origin[MD_SPLIT_TRAIN][0])
        snprintf(d->split_origin[MD_SPLIT_TRAIN], sizeof d->split_origin[0], "%s",
                 nval ? "training samples, less val" : "training samples");
    if (ntrain < nt - nval) {
        size_t l = strlen(d->split_origin[MD_SPLIT_TRAIN]);
        snprintf(d->split_origin[MD_SPLIT_TRAIN] + l, sizeof d->split_origin[0] - l, ", %lld of %lld (--max-samples)",
                 ntrain, nt - nval);
    }
tail:
    if (!d->split_origin[MD_SPLIT_VAL][0])
        snprintf(d->split_origin[MD_SPLIT_VAL], sizeof d->split_origin[0], "%s",
                 val_split > 0 ? "none" : "none (--val-split 0)");
    if (!d->split_origin[MD_SPLIT_TEST][0])
        snprintf(d->split_origin[MD_SPLIT_TEST], sizeof d->split_origin[0], "%s",
                 d->split_n[MD_SPLIT_TEST] ? "test files" : "none (the dataset has no test files)");
    /* a smoke run with --max-samples 4 scores 4 validation and test samples,
     * not the whole test set */
    cap_split(d, MD_SPLIT_VAL, max_samples, seed);
    cap_split(d, MD_SPLIT_TEST, max_samples, seed);
    /* regression data has no classes: one slot per split stays 0 */
    d->class_counts = md_calloc((size_t)MD_SPLIT_COUNT * (d->num_classes > 0 ? d->num_classes : 1), sizeof(long long));
    if (!d->class_counts) { st = MD_ERR_OOM; goto fail; }
    for (int s = 0; d->num_classes > 0 && s < MD_SPLIT_COUNT; s++)
        for (long long i = 0; i < d->split_n[s]; i++)
            d->class_counts[(size_t)s * d->num_classes + d->labels[d->split[s][i]]]++;
fail:
    md_free(perm);
    return st;
}
