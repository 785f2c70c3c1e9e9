/* run_dir.h - a training run's checkpoint folder (--checkpoint-dir).
 *
 * For the run's lifetime the folder is the run's alone: md_run_dir_open
 * creates it, takes an advisory lock (fcntl, on DIR/.mpsdiag-lock, which
 * holds "pid N" while locked) so a second run on the same folder is refused
 * at start naming the first run's pid, and looks for an earlier run's
 * checkpoints (best.safetensors, last.safetensors):
 *   - with --resume they stay; the best one's score (its metadata) is the
 *     bar a new best must beat, so best.safetensors never gets worse;
 *   - with --overwrite they are removed: the user asked to start afresh, and
 *     a folder never mixes two runs' files;
 *   - otherwise the run is refused, naming the folder and both flags.
 * The lock goes with the process (also when it is killed): no stale locks.
 * Errors are MD_ERR_IO (exit 3) naming the folder.
 */
#ifndef MD_RUN_DIR_H
#define MD_RUN_DIR_H

#include "core/status.h"

typedef struct md_run_dir md_run_dir;

#define MD_RUN_DIR_LOCK ".mpsdiag-lock"

/* Creates (with parents), locks and checks `dir` as above. `resuming`: the
 * run continues from a checkpoint; `overwrite`: --overwrite. Caller closes
 * with md_run_dir_close (which releases the lock). */
md_status md_run_dir_open(const char *dir, int resuming, int overwrite, md_run_dir **out);
void md_run_dir_close(md_run_dir *d); /* NULL ok */

/* 1 and the score and epoch of the best.safetensors found at open (kept
 * with --resume), else 0. */
int md_run_dir_best(const md_run_dir *d, double *acc, int *epoch);

#endif
