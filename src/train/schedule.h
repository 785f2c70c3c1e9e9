/* schedule.h - learning-rate schedules as pure functions of the step.
 *
 * All schedules count optimizer steps from 0 over `total_steps` (epochs x
 * steps per epoch). constant, step and cosine start with an optional linear
 * warm-up: lr(s) = base * (s + 1) / warmup for s < warmup.
 *   constant  base
 *   step      base x 0.1 at 50% and again at 75% of the epochs (MultiStepLR)
 *   cosine    0.5 x base x (1 + cos(pi x (s - warmup) / (total - warmup))), to 0
 *   onecycle  PyTorch OneCycleLR (cosine annealing): from base/25 up to base
 *             over the first 30% of steps (or the warm-up, when given), then
 *             down to base/25/1e4 at the last step.
 *   type1     base x 0.5^epoch: halved at every epoch's start, the public
 *             forecasting code's default (its `--lradj type1`).
 */
#ifndef MD_SCHEDULE_H
#define MD_SCHEDULE_H

#include "core/status.h"

enum md_schedule_kind { MD_SCHED_CONSTANT = 0, MD_SCHED_STEP, MD_SCHED_COSINE, MD_SCHED_ONECYCLE, MD_SCHED_TYPE1 };

struct md_schedule {
    int kind;                 /* enum md_schedule_kind */
    double base_lr;           /* peak learning rate */
    long long total_steps;    /* >= 1 */
    long long warmup_steps;   /* >= 0 */
    long long steps_per_epoch;/* >= 1 (step schedule milestones are epochs) */
};

/* "constant" | "step" | "cosine" | "onecycle" | "type1" -> kind; MD_ERR_USAGE otherwise. */
md_status md_schedule_parse(const char *name, int *kind);
const char *md_schedule_name(int kind);

/* Learning rate for optimizer step `step` (0-based). Steps past the end keep
 * the last value. Pure. */
double md_schedule_lr(const struct md_schedule *s, long long step);

#endif
