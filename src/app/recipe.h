/* recipe.h - the training recipe a dataset and model get by default.
 *
 * The defaults are the recipe: where a dataset and model have one that was
 * measured best (docs/defaults.md), each of its settings replaces the generic
 * default unless its flag (or run config key) was given, and is recorded in
 * the Settings section with the reason. md_recipe_decide is pure (tested
 * without data); md_recipe_apply runs it in the model stage, once the
 * dataset's shape is known.
 */
#ifndef MD_RECIPE_H
#define MD_RECIPE_H

#include "app/job.h"

struct md_recipe_in {
    const char *dataset;       /* resolved name: fashion-mnist, mnist, cifar10, ... */
    int c, h, w, classes;      /* the dataset's sample shape and classes (0: regression) */
    long long params;          /* the model's parameters */
    int ci, resume, several;   /* --ci; --resume; a run of several trainings (--models, --fold all) */
    int cpu;                   /* the run trains on the CPU (its batch and learning rate) */
    long long train_samples;   /* training samples (after --max-samples; 0: not known) */
};

struct md_recipe {
    const char *name;          /* NULL: no recipe (the generic defaults) */
    const char *why;           /* the reason, printed with each setting */
    int batch;                 /* the batch the recipe was measured at */
    double lr;                 /* SGD's peak learning rate (0: the generic default) */
    double weight_decay;       /* < 0: the generic default */
    double dropout;            /* every dropout layer's probability (< 0: the model config's) */
    int nesterov;
    const char *lradj;
    double label_smoothing;
    int augment;
    int epochs;
    double time_budget;        /* seconds, when neither --epochs nor --time-budget is given */
};

/* Pure: the recipe of this dataset and model (r->name NULL: none). */
void md_recipe_decide(const struct md_recipe_in *in, struct md_recipe *r);

/* Applies the recipe of the job's dataset and model to job->opts where no
 * flag decided, recording each setting; also --time-budget's epochs when
 * --epochs is not given. Needs job->model (and job->dev: a CPU gets its own
 * batch and learning rate). Returns 1 when the model must be built again (the
 * recipe set opts->dropout), else 0. */
int md_recipe_apply(md_job *job);

#endif
