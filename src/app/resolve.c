/* resolve.c - md_options into each layer's typed options (resolve.h). */
#include "app/resolve.h"
#include "core/dist.h"

#include <stdio.h>
#include <string.h>

#include "nn/name_map.h"

#define COPY_STR(dst, src) snprintf((dst), sizeof(dst), "%s", (src))

void md_resolve_model(const md_options *o, struct md_model_opts *m)
{
    md_model_opts_default(m);
    m->layout = o->channels_last ? MD_NHWC : MD_NCHW;
    m->compute_dtype = md_precision_dtype(o->precision);
    m->grad_ckpt = o->grad_ckpt;
    m->compile = o->compile;
    m->seed = o->seed;
    m->dropout = md_options_given(o, "dropout") ? o->dropout : -1.0; /* -1: the config's */
    m->reduce_architecture = o->reduce_architecture;
    /* model parameters from flags: the model must have them (md_model_load says which it has) */
    if (o->d_model > 0) md_model_opts_set(m, "d_model", o->d_model, 0);
    if (o->d_ff > 0) md_model_opts_set(m, "d_ff", o->d_ff, 0);
    if (o->n_heads > 0) md_model_opts_set(m, "n_heads", o->n_heads, 0);
    if (o->e_layers > 0) md_model_opts_set(m, "e_layers", o->e_layers, 0);
}

void md_resolve_data(const md_options *o, struct md_data_opts *d)
{
    md_data_opts_default(d);
    COPY_STR(d->dataset, o->dataset);
    COPY_STR(d->data_dir, o->data_dir);
    d->val_split = o->val_split;
    d->image_size = o->image_size;
    d->max_samples = o->max_samples;
    d->coarse_labels = o->coarse_labels;
    d->cache_images = o->cache_images;
    d->skip_bad = strcmp(o->on_bad_sample, "skip") == 0;
    d->seed = o->seed;
    d->series.seq_len = o->seq_len;
    d->series.pred_len = o->pred_len;
    COPY_STR(d->series.features, o->features);
    COPY_STR(d->series.target, o->target);
    d->series.train_frac = o->train_frac;
    d->series.test_frac = o->test_frac;
    COPY_STR(d->images.image_col, o->image_col);
    COPY_STR(d->images.target_cols, o->target_cols);
    COPY_STR(d->images.class_col, o->class_col);
    COPY_STR(d->images.side_cols, o->side_cols);
    d->images.halves = o->halves;
    d->images.no_standardize = !o->standardize_targets;
    d->folds = o->folds > 0 ? o->folds : 1;
    d->fold = o->fold;
}

md_status md_resolve_data_config(md_options *o, struct md_data_request *req)
{
    struct md_data_opts d;
    md_resolve_data(o, &d);
    MD_TRY(md_data_config(o->config, &d, req));
    /* the data section fills what no flag or run setting gave */
    if (!md_options_given(o, "dataset")) COPY_STR(o->dataset, d.dataset);
    if (!md_options_given(o, "data-dir")) COPY_STR(o->data_dir, d.data_dir);
    if (!md_options_given(o, "val-split")) o->val_split = d.val_split;
    if (!md_options_given(o, "image-size")) o->image_size = d.image_size;
    if (!md_options_given(o, "max-samples")) o->max_samples = d.max_samples;
    if (!md_options_given(o, "coarse-labels")) o->coarse_labels = d.coarse_labels;
    return MD_OK;
}

void md_resolve_train(const md_options *o, struct md_train_opts *t)
{
    memset(t, 0, sizeof *t);
    COPY_STR(t->model, o->model);
    t->precision = o->precision;
    t->dropout = o->dropout;
    t->compile = o->compile;
    t->tf32 = o->tf32;
    t->max_samples = o->max_samples;
    t->val_split = o->val_split;
    t->seed = o->seed;
    t->augment = o->augment;
    t->num_workers = o->num_workers;
    t->prefetch = o->prefetch;
    t->pin_memory = o->pin_memory;
    t->batch_size = o->batch_size;
    t->epochs = o->epochs;
    t->steps = o->steps;
    t->lr = o->lr;
    COPY_STR(t->optimizer, o->optimizer);
    t->momentum = o->momentum;
    t->nesterov = o->nesterov;
    t->weight_decay = o->weight_decay;
    t->decay_all = o->decay_all;
    COPY_STR(t->lradj, o->lradj);
    t->warmup_epochs = o->warmup_epochs;
    t->grad_clip = o->grad_clip;
    t->label_smoothing = o->label_smoothing;
    COPY_STR(t->loss_function, o->loss_function);
    t->patience = o->patience;
    t->time_budget = o->time_budget;
    t->target_acc = o->target_accuracy / 100.0;
    t->val_batch_multiplier = o->val_batch_multiplier;
    t->auto_batch = o->auto_batch;
    COPY_STR(t->checkpoint_dir, o->checkpoint_dir);
    t->overwrite = o->overwrite;
    COPY_STR(t->resume, o->resume);
    COPY_STR(t->metrics, o->metrics);
    COPY_STR(t->init_from, o->init_from);
    t->init_names = md_naming_parse(o->init_names[0] ? o->init_names : "auto");
    if (t->init_names < MD_NAMES_AUTO) t->init_names = MD_NAMES_AUTO;
    COPY_STR(t->freeze, o->freeze);
    t->backbone_lr = o->backbone_lr;
    t->unfreeze_after = o->unfreeze_after;
    COPY_STR(t->dump_grads, o->dump_grads);
    t->ranks = md_dist_size();
    t->rank = md_dist_rank();
    t->lr_scaling = strcmp(o->lr_scaling, "none") != 0;
    t->bucket_mb = o->bucket_mb;
    t->sync_bn = o->sync_bn;
    if (t->rank > 0) { /* rank 0 writes checkpoints and metrics */
        t->checkpoint_dir[0] = '\0';
        t->metrics[0] = '\0';
    }
}

void md_resolve_bench(const md_options *o, struct md_bench_opts *b)
{
    memset(b, 0, sizeof *b);
    md_resolve_data(o, &b->data);
    b->augment = o->augment;
    b->prefetch = o->prefetch;
    b->optimizer = strcmp(o->optimizer, "adamw") == 0 ? MD_OPT_ADAMW : MD_OPT_SGD;
    b->lr = o->lr;
    b->momentum = o->momentum;
    b->nesterov = o->nesterov;
    b->weight_decay = o->weight_decay;
}
