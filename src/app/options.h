/* options.h - every run setting, from flags merged over a JSON config.
 *
 * One table (options.c) describes each option: its flag, underscore alias,
 * JSON key, type, range, default and help text. The table drives getopt_long, --help, config loading and validation.
 * Flags win over the config; the config wins over defaults.
 */
#ifndef MD_OPTIONS_H
#define MD_OPTIONS_H

#include <stdint.h>
#include <stdio.h>

#include "core/platform.h"
#include "core/status.h"
#include "core/tensor.h"


typedef struct md_options {
    /* device and run */
    char device[32];            /* auto|cpu|cuda[:N]|metal|mps */
    int list_devices;
    int threads;                /* 0 = physical cores */
    int fallback;
    double memory_fraction;     /* 0 = no cap */
    int tf32;                   /* CUDA: TF32 for fp32 matrix work */
    char config[MD_PATH_MAX];
    uint64_t seed;
    int verbosity;              /* md_verbosity */

    /* model */
    char model[MD_PATH_MAX];    /* name in configs/models or a path */
    char models[MD_PATH_MAX];   /* comma-separated list for the diagnostics run */
    int reduce_architecture;
    double dropout;             /* < 0: the config's value */
    int grad_ckpt;
    int channels_last;
    char init_from[MD_PATH_MAX];
    char init_names[8];         /* auto|ours|timm|hf */
    char freeze[512];           /* comma-separated globs, backbone, all-but-last:N */
    double backbone_lr;         /* < 0: the --lr of the rest */
    int unfreeze_after;         /* epochs; 0: never */
    char dump_grads[MD_PATH_MAX];
    char dump_logits[MD_PATH_MAX];

    /* compile */
    int compile;
    char compile_mode[32];      /* default|reduce-overhead|max-autotune */

    /* precision */
    md_precision precision;
    int amp;

    /* data */
    char dataset[32];           /* auto|fashion-mnist|mnist|cifar10|cifar100|jpeg|csv|synthetic */
    char data_dir[MD_PATH_MAX];
    double val_split;
    int num_workers;            /* -1 = automatic per device */
    int prefetch;
    int pin_memory;             /* -1 = automatic per device */
    int cache_images;
    int augment;
    char on_bad_sample[8];      /* skip|fail */
    int image_size;             /* JPEG folders: side of the square input; 0 = model's */
    int max_samples;            /* 0 = all */
    int coarse_labels;          /* CIFAR-100: 20 coarse classes instead of 100 fine */
    /* time series (CSV files; src/data/format_csv_series.c reads these) */
    int seq_len;                /* lookback rows per window (96) */
    int pred_len;               /* horizon rows per window (96) */
    char features[4];           /* M|S|MS */
    char target[64];            /* target column; "" = the last numeric one */
    double train_frac, test_frac; /* both 0: the file's convention (ETT months, else 70/10/20) */
    /* image folder + CSV (src/data/format_images_csv.c) */
    char image_col[64];         /* "" = image, path or filename */
    char target_cols[256];      /* comma-separated; "" = every numeric column */
    char class_col[64];
    char side_cols[256];
    int halves;
    int standardize_targets;    /* 1 (default) */
    int folds;                  /* k-fold cross-validation: K folds (1: the usual split) */
    int fold;                   /* the validation fold, 0..folds-1; -1: all, one after another */

    /* training */
    int batch_size;             /* 0 = automatic */
    int epochs;
    int steps;                  /* > 0: at most this many steps per epoch */
    double lr;                  /* < 0: optimizer default */
    char optimizer[16];         /* sgd|adamw */
    double momentum;
    int nesterov;
    double weight_decay;
    int decay_all;              /* also decay BN and bias parameters */
    char lradj[16];             /* constant|step|cosine|onecycle */
    double warmup_epochs;
    double grad_clip;           /* 0 = off */
    double label_smoothing;
    int val_batch_multiplier;
    char loss_function[16];     /* auto|cross_entropy|mse|mae|huber|financial (auto: by the model's task) */
    int patience;               /* early stopping after this many epochs without improvement (0 = off) */
    double time_budget;         /* > 0: seconds for the whole run; epochs and schedule sized to fit */
    double target_accuracy;     /* > 0: percent; stop once the monitored accuracy reaches it */
    /* model parameters over the config's "params" (0 = the config's) */
    int d_model, d_ff, n_heads, e_layers;
    char checkpoint_dir[MD_PATH_MAX];
    int overwrite;              /* replace an earlier run's checkpoints in checkpoint_dir */
    char resume[MD_PATH_MAX];
    char metrics[MD_PATH_MAX];
    int auto_batch;
    /* several devices (data parallel, core/dist.h) */
    int gpus;                   /* > 1: start that many ranks under mpirun */
    char devices[256];          /* "cuda:0,cuda:1": one rank per entry, under mpirun */
    char lr_scaling[8];         /* linear|none */
    int sync_bn;
    double dist_timeout;        /* seconds; 0 = no watchdog */
    double bucket_mb;           /* gradient all-reduce bucket, MB; 0 = one after backward */

    /* benchmark and report */
    int benchmark;
    int benchmark_only;
    int bench_iters;
    int warmup_iters;
    char batch_sweep[256];      /* "8,16,32" or "auto" */
    int find_batch_size;
    int compare_devices;
    char ablate[128];           /* compile,channels-last,precision,workers */
    int profile;                /* --profile: per-layer time, memory side by side, energy (docs/doctor.md) */
    int leak_check;             /* --leak-check N: steps of the leak check (0: none, or 20 with --profile) */
    char report[MD_PATH_MAX];
    char html[MD_PATH_MAX];
    int ci;
    double expect_min_throughput;
    double expect_max_loss;
    char junit[MD_PATH_MAX];

    /* doctor (docs/doctor.md) */
    int check;                  /* --check: device against the reference, per layer */
    int precision_audit;        /* --precision-audit: fp16/bf16 against fp32 */
    double input_scale;         /* the doctor's seeded inputs: N(0, 1) times this */
    char precision_plan[MD_PATH_MAX]; /* written by --precision-audit, else read for training */

    /* bookkeeping */
    unsigned char set_by_flag[128]; /* per table row: given on the command line */
    unsigned char set_by_config[128];
    int help, version;
} md_options;

/* Defaults for every field. */
void md_options_defaults(md_options *o);

/* Parses argv (getopt_long) over `o`; when --config is given, the config's
 * values are applied first and flags override them. Returns MD_ERR_USAGE or
 * MD_ERR_CONFIG with a one-line message naming the flag or JSON path. */
md_status md_options_parse(md_options *o, int argc, char **argv);

/* Applies a JSON config file's "run" settings (and remembers the path). */
md_status md_options_load_config(md_options *o, const char *path);

/* Cross-field checks (after parsing): contradictions and impossible values. */
md_status md_options_validate(const md_options *o);

/* The options that have a config key, as a run config object (table order;
 * unset and automatic values left out): what --config reads back to the same
 * options. Caller owns the object; NULL when out of memory. */
struct cJSON;
struct cJSON *md_options_to_json(const md_options *o);

/* Was the option with this long name given (flag or config)? */
int md_options_given(const md_options *o, const char *long_name);

/* --help text (grouped, with defaults) and --version. */
void md_options_usage(FILE *f);
void md_options_version(FILE *f);

#endif
