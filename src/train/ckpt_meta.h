/* ckpt_meta.h - the run state a checkpoint's metadata holds, read and checked
 * for --resume (and the best score of a best.safetensors).
 *
 * Metadata is text from a file: every field is checked before the trainer
 * uses any of it (integers in range, numbers finite, counts consistent, the
 * "config" and "curves" JSON well-formed), and a field that is not is
 * MD_ERR_DATA naming the file and the key:
 *   "ck/last.safetensors: metadata 'epoch' = '-1': out of range (0 to 8)".
 */
#ifndef MD_CKPT_META_H
#define MD_CKPT_META_H

#include <cjson/cJSON.h>

#include "core/safetensors.h"

/* What the resuming run knows, to check positions against. */
struct md_ckpt_limits {
    long long steps_per_epoch;       /* batches in one of this run's epochs */
    int batch;                       /* this run's batch size */
    const char *const *curve_keys;   /* the keys "curves" may have (NULL-terminated) */
    int ranks;                       /* > 1: batch is the global batch of that many ranks */
};

struct md_ckpt_meta {
    long long epoch;                 /* whole epochs done: 0 .. config.epochs */
    long long batch_in_epoch;        /* batches of the next epoch done: 0 .. steps_per_epoch */
    long long global_step, optimizer_step;
    long long loss_scale_clean_steps, skipped_steps;
    long long epoch_correct, epoch_seen;
    long long best_epoch;            /* -1: none yet */
    double loss_scale;               /* finite, > 0 */
    double epoch_loss_sum, epoch_time_s, run_time_s;
    double best_val_acc;             /* -1: none yet, else 0 .. 1 */
    int batch_size;                  /* config.batch_size, -1 when absent */
    cJSON *config;                   /* parsed "config" (owned; NULL when absent) */
    cJSON *curves;                   /* parsed "curves" (owned; NULL when absent) */
};

/* Reads and checks every field of f's metadata into *out (caller frees with
 * md_ckpt_meta_free, also after an error). */
md_status md_ckpt_meta_read(const md_st_file *f, const struct md_ckpt_limits *lim, struct md_ckpt_meta *out);
void md_ckpt_meta_free(struct md_ckpt_meta *m);

/* The score and epoch a checkpoint file's metadata gives for its best
 * model (best_val_acc, best_epoch), reading only its header. MD_ERR_DATA
 * naming the file when it is not a checkpoint or the fields are invalid. */
md_status md_ckpt_meta_best(const char *path, double *acc, long long *epoch);

#endif
