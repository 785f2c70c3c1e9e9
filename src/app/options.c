/* options.c - the option table, flag parsing, config merging, --help. */
#define _GNU_SOURCE
#include "app/options.h"
#include "core/dist.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/wrap.h"
#include "data/format.h"

#ifndef MD_VERSION
#define MD_VERSION "0.1.0"
#endif

typedef enum opt_type {
    T_ON,     /* flag without value, sets int field to 1 */
    T_OFF,    /* flag without value, sets int field to 0 */
    T_INT,
    T_DOUBLE,
    T_U64,
    T_STR,
    T_CHOICE, /* string from `choices` ("a|b|c") */
    T_PREC,   /* fp32|fp16|bf16 into md_precision */
    T_VERB,   /* --verbose / --quiet into verbosity */
} opt_type;

struct optdef {
    const char *name;      /* long flag without "--" */
    const char *alias;     /* extra spelling (also accepted with '_'), or NULL */
    opt_type type;
    size_t off;            /* field offset in md_options */
    size_t size;           /* field size (strings) */
    const char *json;      /* key in a run config, or NULL (flag only) */
    const char *group;
    const char *metavar;
    const char *help;
    const char *choices;   /* T_CHOICE */
    double min, max;       /* T_INT, T_DOUBLE */
    int ival;              /* T_VERB: value to set */
    /* T_CHOICE with choices and help NULL: the choices come from a registry
     * (the dataset formats), joined by `sep` */
    void (*list)(char *out, size_t n, const char *sep);
};

#define F(field) offsetof(md_options, field), sizeof(((md_options *)0)->field)

/* One row per option, grouped for --help (GROUP). The run config's key is
 * the field's name unless a row says otherwise (NULL: flag only). */
#define OPT(name, alias, type, field, key, meta, help, choices, lo, hi, ival, list)                          \
    {                                                                                                        \
        name, alias, type, F(field), key, GROUP, meta, help, choices, lo, hi, ival, list                     \
    }
#define ON(name, field, help) OPT(name, NULL, T_ON, field, #field, NULL, help, NULL, 0, 0, 0, NULL)
#define ON_KEY(name, field, key, help) OPT(name, NULL, T_ON, field, key, NULL, help, NULL, 0, 0, 0, NULL)
#define OFF(name, field, help) OPT(name, NULL, T_OFF, field, #field, NULL, help, NULL, 0, 0, 0, NULL)
#define OFF_KEY(name, field, key, help) OPT(name, NULL, T_OFF, field, key, NULL, help, NULL, 0, 0, 0, NULL)
#define INT(name, field, meta, lo, hi, help)                                                                 \
    OPT(name, NULL, T_INT, field, #field, meta, help, NULL, lo, hi, 0, NULL)
#define DBL(name, field, meta, lo, hi, help)                                                                 \
    OPT(name, NULL, T_DOUBLE, field, #field, meta, help, NULL, lo, hi, 0, NULL)
#define STR(name, field, meta, help) OPT(name, NULL, T_STR, field, #field, meta, help, NULL, 0, 0, 0, NULL)
#define CHOICE(name, field, meta, choices, help)                                                             \
    OPT(name, NULL, T_CHOICE, field, #field, meta, help, choices, 0, 0, 0, NULL)

static const struct optdef table[] = {
#define GROUP "Device"
    OPT("device", "device-type", T_CHOICE, device, "device", "DEV",
        "auto, cpu, cuda[:N], metal or mps (auto probes metal, then cuda, then cpu)", NULL, 0, 0, 0, NULL),
    ON_KEY("list-devices", list_devices, NULL, "list every backend and device with availability, then exit"),
    INT("threads", threads, "N", 1, 1024, "CPU threads: one pool runs every CPU kernel (default: physical cores)"),
    ON("fallback", fallback, "run ops the device lacks on the CPU (also MPSDIAG_ENABLE_FALLBACK=1)"),
    DBL("memory-fraction", memory_fraction, "F", 1e-6, 1.0,
        "cap device memory at F x total (0 < F <= 1; also MPSDIAG_HIGH_WATERMARK_RATIO)"),
    OFF("no-tf32", tf32, "CUDA: keep fp32 matrix work in full fp32 (no TF32)"),
#undef GROUP
#define GROUP "Model"
    OPT("config", NULL, T_STR, config, NULL, "FILE", "JSON run config; flags override its values", NULL, 0, 0,
        0, NULL),
    STR("model", model, "NAME|FILE", "model config: a name from configs/models or a path"),
    STR("models", models, "A,B", "models to compare in the diagnostics run"),
    ON("reduce-architecture", reduce_architecture,
       "smaller variant of the model for memory-constrained machines"),
    DBL("dropout", dropout, "P", 0.0, 0.999, "dropout probability for the model's dropout layers"),
    ON("grad-ckpt", grad_ckpt, "gradient checkpointing: recompute activations in backward"),
    ON("channels-last", channels_last, "NHWC activations (channels-last memory format; the default on CUDA)"),
    OFF_KEY("no-channels-last", channels_last, NULL,
            "NCHW activations also where channels-last is the default"),
    STR("init-from", init_from, "FILE", "initial weights from a safetensors file (partial: by name)"),
    CHOICE("init-names", init_names, "NAMING", "auto|ours|timm|hf",
           "tensor names of --init-from: auto (by its keys) | ours | timm | hf (Hugging Face Dinov2)"),
    STR("freeze", freeze, "PATTERN",
        "parameters not trained: globs on tensor names (comma-separated), backbone, all-but-last:N"),
    DBL("backbone-lr", backbone_lr, "LR", 1e-12, 100.0,
        "peak learning rate of every parameter but the head (absolute; the schedule scales it as --lr)"),
    INT("unfreeze-after", unfreeze_after, "N", 1, 100000, "train the --freeze parameters too from epoch N+1 on"),
    OPT("dump-grads", NULL, T_STR, dump_grads, NULL, "FILE",
        "one training step on the first batch; write inputs, logits, loss, gradients", NULL, 0, 0, 0, NULL),
    OPT("dump-logits", NULL, T_STR, dump_logits, NULL, "FILE",
        "after training (at once with --epochs 0): the first test batch's inputs and evaluation logits", NULL,
        0, 0, 0, NULL),
    OFF("no-compile", compile, "run op by op, eagerly (no fusion, planning or graph capture)"),
    CHOICE("compile-mode", compile_mode, "MODE", "default|reduce-overhead|max-autotune",
           "default | reduce-overhead | max-autotune"),
#undef GROUP
#define GROUP "Precision"
    OPT("precision", NULL, T_PREC, precision, "precision", "P",
        "fp32 | fp16 | bf16 for convolutions and matrix products", NULL, 0, 0, 0, NULL),
    ON("amp", amp, "automatic mixed precision with the device's best half type"),
#undef GROUP
#define GROUP "Data"
    OPT("dataset", NULL, T_CHOICE, dataset, "dataset", "NAME", NULL, NULL, 0, 0, 0, md_format_dataset_list),
    STR("data-dir", data_dir, "DIR", "dataset directory (time series: a .csv file or a directory holding one)"),
    DBL("val-split", val_split, "F", 0.0, 0.9, "fraction of the training set held out for validation"),
    INT("num-workers", num_workers, "N", 0, 256,
        "loader threads (0: load in the main thread; default: per device)"),
    INT("prefetch", prefetch, "N", 1, 64, "batches prepared ahead"),
    ON("pin-memory", pin_memory, "page-locked host batches (used where the device benefits)"),
    OFF_KEY("no-pin-memory", pin_memory, NULL, "ordinary host memory for batches"),
    ON("cache-images", cache_images, "keep decoded images in RAM (checked against available memory)"),
    OFF("no-augment", augment, "no random crop/flip for training"),
    ON_KEY("augment", augment, NULL,
           "random crop/flip for training also where the dataset's recipe turns it off (docs/defaults.md)"),
    CHOICE("on-bad-sample", on_bad_sample, "WHAT", "skip|fail",
           "skip | fail when an image cannot be decoded"),
    INT("image-size", image_size, "PX", 8, 4096,
        "JPEG folders: resize to PX x PX (default: the model's input)"),
    INT("max-samples", max_samples, "N", 1, INT_MAX,
        "use at most N samples of each split (train, validation, test; seeded)"),
    ON("coarse-labels", coarse_labels, "CIFAR-100: the 20 coarse classes instead of the 100 fine ones"),
    INT("seq-len", seq_len, "N", 1, 100000, "time series: lookback rows per window"),
    INT("pred-len", pred_len, "N", 1, 100000, "time series: rows to forecast per window"),
    CHOICE("features", features, "M|S|MS", "M|S|MS",
           "time series: all variates in and out (M), the target only (S), all in and the target out (MS)"),
    STR("target", target, "COL", "time series: the target column (default: the last numeric one)"),
    DBL("train-frac", train_frac, "F", 0.01, 0.98,
        "time series: training fraction, in time order (with --test-frac; default: the file's convention)"),
    DBL("test-frac", test_frac, "F", 0.01, 0.98, "time series: test fraction at the end (validation gets the rest)"),
    STR("image-col", image_col, "COL", "images-csv: the image path column (default: image, path or filename)"),
    STR("target-cols", target_cols, "A,B",
        "images-csv: numeric regression targets (default: every numeric column but --side-cols)"),
    STR("class-col", class_col, "COL", "images-csv: a class column (classification instead of regression)"),
    STR("side-cols", side_cols, "A,B", "images-csv: numeric columns given to the model input \"side\""),
    ON("halves", halves,
       "images-csv: left and right halves as two inputs (automatic for model inputs named left and right)"),
    OFF("no-standardize-targets", standardize_targets,
        "images-csv: train on the targets as they are (default: standardised with the training split's mean/std)"),
    INT("folds", folds, "K", 1, 1000,
        "k-fold cross-validation: the training samples in K folds, one of them validation (1: the usual split)"),
    /* ival 1: the text "all" is -1 */
    OPT("fold", NULL, T_INT, fold, "fold", "I|all",
        "with --folds: the validation fold (0..K-1), or all: each fold in turn, then mean +- std", NULL, 0, 999, 1,
        NULL),
#undef GROUP
#define GROUP "Training"
    INT("batch-size", batch_size, "N", 1, 1 << 20, "samples per step (default: per device and model)"),
    OPT("epochs", "train-epochs", T_INT, epochs, "epochs", "N", "training epochs (0: no training)", NULL, 0,
        100000, 0, NULL),
    INT("steps", steps, "N", 1, INT_MAX, "at most N steps per epoch"),
    OPT("lr", "learning-rate", T_DOUBLE, lr, "lr", "LR",
        "peak learning rate (default: 0.1 for SGD, 1e-3 for AdamW)", NULL, 1e-12, 100.0, 0, NULL),
    CHOICE("optimizer", optimizer, "NAME", "sgd|adamw", "sgd | adamw"),
    DBL("momentum", momentum, "M", 0.0, 0.9999, "SGD momentum"),
    ON("nesterov", nesterov, "Nesterov momentum"),
    DBL("weight-decay", weight_decay, "WD", 0.0, 1.0, "weight decay (not on BN and bias unless --decay-all)"),
    ON("decay-all", decay_all, "apply weight decay to BN and bias parameters too"),
    OPT("lradj", "schedule", T_CHOICE, lradj, "lradj", "NAME",
        "constant | step | cosine | onecycle | type1 (halve every epoch)", "constant|step|cosine|onecycle|type1", 0, 0,
        0, NULL),
    DBL("warmup-epochs", warmup_epochs, "E", 0.0, 1000.0, "linear learning-rate warm-up"),
    DBL("grad-clip", grad_clip, "NORM", 0.0, 1e9, "clip gradients by global norm (0: off)"),
    DBL("label-smoothing", label_smoothing, "S", 0.0, 0.999, "label smoothing for the cross-entropy"),
    INT("val-batch-multiplier", val_batch_multiplier, "K", 1, 64, "validation batch = K x batch size"),
    CHOICE("loss-function", loss_function, "NAME", "auto|cross_entropy|mse|mae|huber|financial",
           "auto (by the model's task: cross_entropy or mse) | cross_entropy | mse | mae | huber | financial"),
    INT("patience", patience, "N", 0, 100000,
        "stop after N epochs without a better validation score (loss for regression, accuracy else; 0: off)"),
    DBL("time-budget", time_budget, "SECONDS", 1.0, 1e7,
        "train as well as possible within SECONDS of wall time (start to report): epochs and schedule sized from "
        "the step time measured after a short warm-up; --epochs, when given, is the most it runs"),
    DBL("target-accuracy", target_accuracy, "P", 1.0, 100.0,
        "stop once the validation accuracy (test accuracy with --val-split 0) reaches P percent"),
    INT("d-model", d_model, "N", 1, 65536, "sequence models: token width (the model's d_model parameter)"),
    INT("d-ff", d_ff, "N", 1, 262144, "sequence models: feed-forward width (d_ff)"),
    INT("n-heads", n_heads, "N", 1, 1024, "sequence models: attention heads (n_heads)"),
    INT("e-layers", e_layers, "N", 1, 1024, "sequence models: encoder layers (e_layers)"),
    STR("checkpoint-dir", checkpoint_dir, "DIR", "where best and last checkpoints go"),
    ON("overwrite", overwrite, "replace an earlier run's checkpoints in --checkpoint-dir (else refused)"),
    OPT("resume", NULL, T_STR, resume, NULL, "FILE", "continue from a checkpoint", NULL, 0, 0, 0, NULL),
    STR("metrics", metrics, "FILE",
        "append JSON lines: a header per run, then one per epoch and one every 50 steps"),
    ON("auto-batch", auto_batch, "halve the batch and retry on out-of-memory"),
#undef GROUP
#define GROUP "Several devices (data parallel; docs/distributed.md)"
    INT("gpus", gpus, "N", 1, 64, "train on N GPUs of this machine: starts N ranks under mpirun (cuda:0..N-1)"),
    STR("devices", devices, "LIST", "one rank per listed device (cuda:0,cuda:1,...), started under mpirun"),
    CHOICE("lr-scaling", lr_scaling, "RULE", "linear|none",
           "linear (--lr x ranks: --lr is for one rank's batch) | none (--lr as given)"),
    ON("sync-bn", sync_bn, "batch norm statistics over the global batch (all ranks), as SyncBatchNorm"),
    DBL("bucket-mb", bucket_mb, "MB", 0.0, 1e5,
        "GPUs: all-reduce the gradients in buckets of MB megabytes during backward (0: once, after it)"),
    DBL("dist-timeout", dist_timeout, "S", 0.0, 1e6,
        "end the job when a rank waits S seconds on the others (a dead or hung rank; 0: never)"),
#undef GROUP
#define GROUP "Benchmark"
    ON("benchmark", benchmark, "benchmark after training"),
    ON("benchmark-only", benchmark_only, "benchmark without training"),
    INT("bench-iters", bench_iters, "N", 1, 1000000, "timed iterations per measurement"),
    INT("warmup-iters", warmup_iters, "N", 0, 1000000, "untimed warm-up iterations"),
    STR("batch-sweep", batch_sweep, "LIST",
        "throughput, latency and memory per batch size (8,16,32 or auto)"),
    ON("find-batch-size", find_batch_size, "largest batch that fits, and the fastest"),
    ON("compare-devices", compare_devices, "same benchmark on every available device"),
    STR("ablate", ablate, "LIST", "measure each of compile,channels-last,precision,workers on and off"),
    ON("profile", profile,
       "time per layer against the device's peaks, memory as tool, driver and OS see it, energy per step "
       "(no training unless --benchmark)"),
    INT("leak-check", leak_check, "N", 5, 100000,
        "memory after each of N more training steps; growth past the bound fails the run (exit 7)"),
#undef GROUP
#define GROUP "Doctor"
    ON_KEY("check", check, NULL,
           "one batch forward and backward on the device and on the CPU reference: per-layer errors, "
           "fallback, time, memory (docs/doctor.md; exit 6 when a layer is beyond the tolerance)"),
    ON_KEY("precision-audit", precision_audit, NULL,
           "the same batch in fp16 and bf16 against fp32: range, errors, loss scale, a precision plan"),
    OPT("input-scale", NULL, T_DOUBLE, input_scale, NULL, "S",
        "--check, --precision-audit: standard deviation of the seeded inputs (255: unnormalised pixels)", NULL,
        1e-6, 1e12, 0, NULL),
    STR("precision-plan", precision_plan, "FILE",
        "with --precision-audit: write the recommended plan here; otherwise: train with this plan"),
#undef GROUP
#define GROUP "Report"
    STR("report", report, "FILE", "write the JSON report (docs/report-schema.md)"),
    STR("html", html, "FILE", "write a self-contained HTML report with charts"),
    ON_KEY("ci", ci, NULL, "smoke-test mode: tiny model, few steps, thresholds"),
    OPT("expect-min-throughput", NULL, T_DOUBLE, expect_min_throughput, NULL, "S/S",
        "fail (exit 7) below this many training samples/s", NULL, 0.0, 1e12, 0, NULL),
    OPT("expect-max-loss", NULL, T_DOUBLE, expect_max_loss, NULL, "L",
        "fail (exit 7) when the final loss is above L", NULL, 0.0, 1e12, 0, NULL),
    OPT("junit", NULL, T_STR, junit, NULL, "FILE", "write a JUnit-style XML result", NULL, 0, 0, 0, NULL),
#undef GROUP
#define GROUP "General"
    OPT("seed", NULL, T_U64, seed, "seed", "N", "seed for initialisation, shuffling, augmentation, dropout",
        NULL, 0, 0, 0, NULL),
    OPT("verbose", NULL, T_VERB, verbosity, NULL, NULL, "every layer, per-epoch timings, all class names", NULL, 0, 0, MD_VERBOSE, NULL),
    OPT("quiet", NULL, T_VERB, verbosity, NULL, NULL, "errors and the final summary line only", NULL, 0, 0, MD_QUIET, NULL),
    ON_KEY("help", help, NULL, "this text (also -h)"),
    ON_KEY("version", version, NULL, "print the version"),
#undef GROUP
};
#define N_OPTS ((int)(sizeof table / sizeof table[0]))
_Static_assert(sizeof table / sizeof table[0] <= 128, "set_by_flag too small");

void md_options_defaults(md_options *o)
{
    memset(o, 0, sizeof *o);
    snprintf(o->device, sizeof o->device, "auto");
    o->tf32 = 1;
    o->seed = 42;
    o->verbosity = MD_NORMAL;
    o->dropout = -1;
    o->input_scale = 1.0;
    o->compile = 1;
    snprintf(o->compile_mode, sizeof o->compile_mode, "default");
    snprintf(o->dataset, sizeof o->dataset, "auto");
    o->val_split = 0.1;
    o->num_workers = -1;
    o->prefetch = 4;
    o->pin_memory = -1;
    o->augment = 1;
    snprintf(o->on_bad_sample, sizeof o->on_bad_sample, "fail");
    o->seq_len = o->pred_len = 96;
    o->folds = 1;
    snprintf(o->features, sizeof o->features, "M");
    o->standardize_targets = 1;
    o->epochs = 1;
    o->lr = -1;
    o->backbone_lr = -1;
    snprintf(o->init_names, sizeof o->init_names, "auto");
    snprintf(o->optimizer, sizeof o->optimizer, "sgd");
    o->momentum = 0.9;
    o->weight_decay = 5e-4;
    snprintf(o->lradj, sizeof o->lradj, "cosine");
    snprintf(o->lr_scaling, sizeof o->lr_scaling, "linear");
    o->gpus = 1;
    o->dist_timeout = 600;
    o->bucket_mb = 25;
    snprintf(o->loss_function, sizeof o->loss_function, "auto");
    o->val_batch_multiplier = 4;
    snprintf(o->checkpoint_dir, sizeof o->checkpoint_dir, "checkpoints");
    o->bench_iters = 50;
    o->warmup_iters = 5;
}


/* ---------------------------------------------------------------------------
 * Setting one value (from a flag's text or from JSON), with range checks.
 * `who` names the source for errors: "--batch-size" or "config.json: batch_size".
 * ------------------------------------------------------------------------- */

static md_status bad(md_status st, const char *who, const char *fmt, const char *val)
{
    char msg[512];
    snprintf(msg, sizeof msg, fmt, val);
    return md_errf(st, "%s: %s", who, msg);
}

static int choice_ok(const char *choices, const char *v)
{
    size_t n = strlen(v);
    for (const char *p = choices; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, v, n) == 0) return 1;
        if (!bar) break;
        p = bar + 1;
    }
    return 0;
}

static int device_ok(const char *v)
{
    static const char *const names[] = {"auto", "cpu", "cuda", "metal", "mps"};
    const char *colon = strchr(v, ':');
    size_t len = colon ? (size_t)(colon - v) : strlen(v);
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strlen(names[i]) == len && strncmp(names[i], v, len) == 0) {
            if (!colon) return 1;
            if (i == 0) return 0; /* auto takes no index */
            char *end;
            errno = 0;
            long idx = strtol(colon + 1, &end, 10);
            return colon[1] && !*end && errno == 0 && idx >= 0 && idx < 16;
        }
    return 0;
}

/* val is outside [d->min, d->max]: an integer option shows the bounds without decimals. */
static md_status out_of_range(md_status st, const char *who, const struct optdef *d, int integer, const char *val)
{
    char msg[128];
    if (integer)
        snprintf(msg, sizeof msg, "%%s is out of range (%.0f to %.0f)", d->min, d->max);
    else
        snprintf(msg, sizeof msg, "%%s is out of range (%g to %g)", d->min, d->max);
    return bad(st, who, msg, val);
}

static md_status set_text(md_options *o, const struct optdef *d, const char *val, const char *who, md_status st)
{
    char *base = (char *)o + d->off;
    char *end;
    switch (d->type) {
    case T_ON: *(int *)(void *)base = 1; return MD_OK;
    case T_OFF: *(int *)(void *)base = 0; return MD_OK;
    case T_VERB: *(int *)(void *)base = d->ival; return MD_OK;
    case T_INT: {
        if (d->ival == 1 && strcmp(val, "all") == 0) {
            *(int *)(void *)base = -1;
            return MD_OK;
        }
        errno = 0;
        long v = strtol(val, &end, 10);
        if (!*val || *end || errno) return bad(st, who, "'%s' is not an integer", val);
        if (v < d->min || v > d->max) return out_of_range(st, who, d, 1, val);
        *(int *)(void *)base = (int)v;
        return MD_OK;
    }
    case T_DOUBLE: {
        errno = 0;
        double v = strtod(val, &end);
        if (!*val || *end || errno || !isfinite(v)) return bad(st, who, "'%s' is not a number", val);
        if (v < d->min || v > d->max) return out_of_range(st, who, d, 0, val);
        *(double *)(void *)base = v;
        return MD_OK;
    }
    case T_U64: {
        errno = 0;
        if (!*val || *val == '-') return bad(st, who, "'%s' is not a non-negative integer", val);
        unsigned long long v = strtoull(val, &end, 10);
        if (*end || errno) return bad(st, who, "'%s' is not a non-negative integer", val);
        *(uint64_t *)(void *)base = (uint64_t)v;
        return MD_OK;
    }
    case T_STR:
        if (!*val) return bad(st, who, "empty value%s", "");
        if (strlen(val) >= d->size) return bad(st, who, "value too long (%s)", val);
        memcpy(base, val, strlen(val) + 1);
        return MD_OK;
    case T_CHOICE: {
        char listed[256];
        const char *choices = d->choices;
        if (d->list) {
            d->list(listed, sizeof listed, "|");
            choices = listed;
        }
        int ok = choices ? choice_ok(choices, val) : device_ok(val);
        if (!ok) {
            char msg[300];
            snprintf(msg, sizeof msg, "'%%s' is not one of %s", choices ? choices : "auto|cpu|cuda[:N]|metal|mps");
            return bad(st, who, msg, val);
        }
        if (strlen(val) >= d->size) return bad(st, who, "value too long (%s)", val);
        memcpy(base, val, strlen(val) + 1);
        return MD_OK;
    }
    case T_PREC:
        if (strcmp(val, "fp32") == 0) *(md_precision *)(void *)base = MD_PREC_FP32;
        else if (strcmp(val, "fp16") == 0) *(md_precision *)(void *)base = MD_PREC_FP16;
        else if (strcmp(val, "bf16") == 0) *(md_precision *)(void *)base = MD_PREC_BF16;
        else return bad(st, who, "'%s' is not one of fp32|fp16|bf16", val);
        return MD_OK;
    }
    return MD_ERR_INTERNAL;
}

/* ---------------------------------------------------------------------------
 * Config file
 * ------------------------------------------------------------------------- */

/* Top-level keys of a run config that are not options (read by the stages). */
static int stage_key(const char *k) { return strcmp(k, "model") == 0 || strcmp(k, "data") == 0; }

md_status md_options_load_config(md_options *o, const char *path)
{
    cJSON *root = NULL;
    MD_TRY(md_json_load_file(path, &root));
    md_status st = MD_OK;
    if (!cJSON_IsObject(root)) {
        st = md_errf(MD_ERR_CONFIG, "%s: the top level must be an object", path);
        goto done;
    }
    for (cJSON *it = root->child; it; it = it->next) {
        const struct optdef *d = NULL;
        int idx = -1;
        for (int i = 0; i < N_OPTS; i++)
            if (table[i].json && strcmp(table[i].json, it->string) == 0) {
                d = &table[i];
                idx = i;
                break;
            }
        if (!d) {
            if (stage_key(it->string)) continue;
            st = md_errf(MD_ERR_CONFIG, "%s: unknown key '%s'", path, it->string);
            goto done;
        }
        if (strcmp(it->string, "model") == 0 && cJSON_IsObject(it)) continue; /* inline model */
        char who[1200], buf[64];
        snprintf(who, sizeof who, "%s: %s", path, it->string);
        const char *val = NULL;
        if (d->type == T_ON || d->type == T_OFF) {
            if (!cJSON_IsBool(it)) {
                st = md_errf(MD_ERR_CONFIG, "%s: must be true or false", who);
                goto done;
            }
            /* JSON states the final value; T_OFF options' JSON key names the
             * positive feature ("compile": false). */
            *(int *)(void *)((char *)o + d->off) = cJSON_IsTrue(it) ? 1 : 0;
            o->set_by_config[idx] = 1;
            continue;
        }
        if (cJSON_IsString(it)) val = it->valuestring;
        else if (cJSON_IsNumber(it) && d->type != T_STR && d->type != T_CHOICE && d->type != T_PREC) {
            if (d->type == T_INT || d->type == T_U64) {
                if (it->valuedouble != floor(it->valuedouble)) {
                    st = md_errf(MD_ERR_CONFIG, "%s: must be an integer", who);
                    goto done;
                }
                snprintf(buf, sizeof buf, "%.0f", it->valuedouble);
            } else {
                snprintf(buf, sizeof buf, "%.17g", it->valuedouble);
            }
            val = buf;
        } else {
            st = md_errf(MD_ERR_CONFIG, "%s: wrong type (expected %s)", who,
                         d->type == T_INT || d->type == T_DOUBLE || d->type == T_U64 ? "a number" : "a string");
            goto done;
        }
        st = set_text(o, d, val, who, MD_ERR_CONFIG);
        if (st != MD_OK) goto done;
        o->set_by_config[idx] = 1;
    }
    snprintf(o->config, sizeof o->config, "%s", path);
done:
    cJSON_Delete(root);
    return st;
}

/* ---------------------------------------------------------------------------
 * Command line
 * ------------------------------------------------------------------------- */

/* "--batch_size=3" -> "--batch-size=3": underscores in a flag's name are
 * accepted as dashes (the spellings existing scripts use). */
static void normalise_flag(char *arg)
{
    if (arg[0] != '-' || arg[1] != '-') return;
    for (char *p = arg + 2; *p && *p != '='; p++)
        if (*p == '_') *p = '-';
}

/* True when args[i] is a flag whose value is the next word ("--lr 0.1"). */
static int takes_next(const char *arg)
{
    if (arg[0] != '-' || arg[1] != '-' || strchr(arg, '=')) return 0;
    for (int i = 0; i < N_OPTS; i++) {
        const struct optdef *d = &table[i];
        if (strcmp(arg + 2, d->name) != 0 && !(d->alias && strcmp(arg + 2, d->alias) == 0)) continue;
        return !(d->type == T_ON || d->type == T_OFF || d->type == T_VERB);
    }
    return 0;
}

md_status md_options_parse(md_options *o, int argc, char **argv)
{
    md_status st = MD_OK;
    struct option *longopts = NULL;
    char **args = NULL;
    int n = 0;
    longopts = md_calloc((size_t)(2 * N_OPTS + 1), sizeof *longopts);
    args = md_calloc((size_t)argc + 1, sizeof *args);
    if (!longopts || !args) {
        st = MD_ERR_OOM;
        goto done;
    }
    for (int i = 0; i < N_OPTS; i++) {
        int has_arg = table[i].type == T_ON || table[i].type == T_OFF || table[i].type == T_VERB
                          ? no_argument : required_argument;
        longopts[n++] = (struct option){table[i].name, has_arg, NULL, 256 + i};
        if (table[i].alias) longopts[n++] = (struct option){table[i].alias, has_arg, NULL, 256 + i};
    }
    for (int i = 0; i < argc; i++) {
        args[i] = md_strdup(argv[i]);
        if (!args[i]) {
            st = MD_ERR_OOM;
            goto done;
        }
        if (i > 0) normalise_flag(args[i]);
        /* -h is --help (unless it is the value of the flag before it) */
        if (i > 0 && strcmp(args[i], "-h") == 0 && !(i > 1 && takes_next(args[i - 1]))) {
            md_free(args[i]);
            args[i] = md_strdup("--help");
            if (!args[i]) {
                st = MD_ERR_OOM;
                goto done;
            }
        }
    }

    /* Pass 1: find --config so the file applies before the flags. */
    for (int i = 1; i < argc; i++) {
        const char *cfg = NULL;
        if (strcmp(args[i], "--config") == 0 && i + 1 < argc) cfg = args[i + 1];
        else if (strncmp(args[i], "--config=", 9) == 0) cfg = args[i] + 9;
        else if (strcmp(args[i], "--") == 0) break;
        if (cfg) {
            st = md_options_load_config(o, cfg);
            if (st != MD_OK) goto done;
        }
    }

    /* Pass 2: flags. */
    optind = 1;
    opterr = 0;
    int verb_seen = -1;
    for (;;) {
        int prev = optind;
        int c = getopt_long(argc, args, "", longopts, NULL);
        if (c == -1) break;
        if (c == '?' || c == ':') {
            const char *arg = prev < argc ? args[prev] : "";
            if (optopt >= 256) {
                const struct optdef *d = &table[optopt - 256];
                if (d->type == T_ON || d->type == T_OFF || d->type == T_VERB)
                    st = md_errf(MD_ERR_USAGE, "--%s takes no value", d->name);
                else
                    st = md_errf(MD_ERR_USAGE, "--%s: missing value", d->name);
            } else {
                st = md_errf(MD_ERR_USAGE, "unknown flag '%s' (see --help)", arg);
            }
            goto done;
        }
        const struct optdef *d = &table[c - 256];
        char who[96];
        snprintf(who, sizeof who, "--%s", d->name);
        if (d->type == T_VERB) {
            if (verb_seen >= 0 && verb_seen != d->ival) {
                st = md_errf(MD_ERR_USAGE, "--quiet and --verbose contradict each other");
                goto done;
            }
            verb_seen = d->ival;
        }
        st = set_text(o, d, optarg ? optarg : "", who, MD_ERR_USAGE);
        if (st != MD_OK) goto done;
        o->set_by_flag[c - 256] = 1;
    }
    if (optind < argc) {
        st = md_errf(MD_ERR_USAGE, "unexpected argument '%s' (flags start with --; see --help)", args[optind]);
        goto done;
    }
done:
    if (args)
        for (int i = 0; i < argc; i++) md_free(args[i]);
    md_free(args);
    md_free(longopts);
    return st;
}

int md_options_given(const md_options *o, const char *long_name)
{
    for (int i = 0; i < N_OPTS; i++)
        if (strcmp(table[i].name, long_name) == 0) return o->set_by_flag[i] || o->set_by_config[i];
    MD_ASSERT(!"md_options_given: no such option");
    return 0;
}

/* Options with a config key, as a run config: the values md_options_load_config
 * reads back to the same options. A value outside the option's range is the
 * "automatic" or "unset" sentinel (batch size 0, lr -1, workers -1, pinned
 * memory -1) and an empty string is unset: both are left out. */
cJSON *md_options_to_json(const md_options *o)
{
    cJSON *c = cJSON_CreateObject();
    if (!c) return NULL;
    for (int i = 0; i < N_OPTS; i++) {
        const struct optdef *d = &table[i];
        if (!d->json || cJSON_GetObjectItemCaseSensitive(c, d->json)) continue;
        const char *base = (const char *)o + d->off;
        switch (d->type) {
        case T_ON:
        case T_OFF: {
            int v = *(const int *)(const void *)base;
            if (v == 0 || v == 1) cJSON_AddBoolToObject(c, d->json, v);
            break;
        }
        case T_INT: {
            int v = *(const int *)(const void *)base;
            if (d->ival == 1 && o->folds < 2) break; /* --fold means nothing without --folds (and is refused) */
            if (v >= d->min && v <= d->max) cJSON_AddNumberToObject(c, d->json, v);
            else if (d->ival == 1 && v == -1) cJSON_AddStringToObject(c, d->json, "all");
            break;
        }
        case T_DOUBLE: {
            double v = *(const double *)(const void *)base;
            if (v >= d->min && v <= d->max) cJSON_AddNumberToObject(c, d->json, v);
            break;
        }
        case T_U64: {
            uint64_t v = *(const uint64_t *)(const void *)base;
            if (v <= (1ull << 53)) {
                cJSON_AddNumberToObject(c, d->json, (double)v);
            } else { /* beyond a double's integers: as text, which the loader also takes */
                char b[32];
                snprintf(b, sizeof b, "%llu", (unsigned long long)v);
                cJSON_AddStringToObject(c, d->json, b);
            }
            break;
        }
        case T_STR:
        case T_CHOICE:
            if (*base) cJSON_AddStringToObject(c, d->json, base);
            break;
        case T_PREC: cJSON_AddStringToObject(c, d->json, md_precision_name(*(const md_precision *)(const void *)base)); break;
        case T_VERB: break;
        }
    }
    return c;
}

md_status md_options_validate(const md_options *o)
{
    if (md_options_given(o, "amp") && o->amp && md_options_given(o, "precision") && o->precision == MD_PREC_FP32)
        return md_errf(MD_ERR_USAGE, "--amp contradicts --precision fp32 (use one of them)");
    if (o->resume[0] && o->init_from[0])
        return md_errf(MD_ERR_USAGE, "--resume and --init-from contradict each other (a checkpoint has its own weights)");
    if (o->unfreeze_after > 0 && !o->freeze[0])
        return md_errf(MD_ERR_USAGE, "--unfreeze-after needs --freeze (there is nothing frozen to unfreeze)");
    if (o->overwrite && o->resume[0])
        return md_errf(MD_ERR_USAGE, "--overwrite starts afresh and removes the folder's checkpoints; it contradicts "
                       "--resume (which continues a run)");
    if (o->benchmark_only && o->resume[0])
        return md_errf(MD_ERR_USAGE, "--resume needs training; it contradicts --benchmark-only");
    if (o->benchmark_only && md_options_given(o, "epochs") && o->epochs > 0)
        return md_errf(MD_ERR_USAGE, "--benchmark-only runs no training; --epochs %d contradicts it (use --benchmark to train, then benchmark)", o->epochs);
    if (o->find_batch_size && md_options_given(o, "batch-size"))
        return md_errf(MD_ERR_USAGE, "--find-batch-size searches the batch size; do not also give --batch-size");
    if (o->list_devices && (o->benchmark || o->benchmark_only))
        return md_errf(MD_ERR_USAGE, "--list-devices only lists; it contradicts --benchmark/--benchmark-only");
    if (md_options_given(o, "fold") && o->folds < 2)
    {
        char f[16];
        snprintf(f, sizeof f, o->fold < 0 ? "all" : "%d", o->fold);
        return md_errf(MD_ERR_USAGE, "--fold %s needs --folds K with K >= 2", f);
    }
    if (o->folds > 1 && o->fold >= o->folds)
        return md_errf(MD_ERR_USAGE, "--fold %d: --folds %d has the folds 0 to %d (or all)", o->fold, o->folds,
                       o->folds - 1);
    if (o->folds > 1 && o->fold < 0 && (o->benchmark_only || o->epochs == 0))
        return md_errf(MD_ERR_USAGE, "--fold all trains each fold; it needs training (--epochs >= 1, no --benchmark-only)");
    if (o->folds > 1 && o->fold < 0 && o->resume[0])
        return md_errf(MD_ERR_USAGE, "--fold all trains every fold afresh; --resume continues one run (give --fold I)");
    if (o->folds > 1 && o->fold < 0 && o->models[0])
        return md_errf(MD_ERR_USAGE, "--fold all and --models both run several trainings; give one --model with --fold all");
    if ((o->time_budget > 0 || o->target_accuracy > 0) && o->benchmark_only)
        return md_errf(MD_ERR_USAGE, "--%s needs training; it contradicts --benchmark-only",
                       o->time_budget > 0 ? "time-budget" : "target-accuracy");
    if (o->time_budget > 0 && md_options_given(o, "time-budget") && o->resume[0])
        return md_errf(MD_ERR_USAGE, "--time-budget sizes a fresh run from its measured step time; it contradicts --resume");
    if (o->time_budget > 0 && md_options_given(o, "time-budget") && (o->models[0] || (o->folds > 1 && o->fold < 0)))
        return md_errf(MD_ERR_USAGE, "--time-budget sizes one training; it contradicts %s",
                       o->models[0] ? "--models" : "--fold all");
    if (o->target_accuracy > 0 && md_options_given(o, "epochs") && o->epochs == 0)
        return md_errf(MD_ERR_USAGE, "--target-accuracy needs training; it contradicts --epochs 0");
    if ((o->check || o->precision_audit) && (o->benchmark || o->benchmark_only || o->profile || o->leak_check ||
                                            o->models[0] || o->folds > 1 || o->resume[0] || o->list_devices || o->ci))
        return md_errf(MD_ERR_USAGE, "--%s runs one batch and nothing else; it contradicts --benchmark, "
                       "--benchmark-only, --profile, --leak-check, --models, --folds, --resume, --list-devices and --ci",
                       o->check ? "check" : "precision-audit");
    if (o->precision_plan[0] && !o->precision_audit && md_options_given(o, "precision"))
        return md_errf(MD_ERR_USAGE, "--precision-plan %s sets the precision; do not also give --precision",
                       o->precision_plan);
    if ((o->expect_min_throughput > 0 || o->expect_max_loss > 0 || o->junit[0]) && !o->ci)
        return md_errf(MD_ERR_USAGE, "--expect-min-throughput, --expect-max-loss and --junit need --ci");
    return MD_OK;
}

/* ---------------------------------------------------------------------------
 * --help
 * ------------------------------------------------------------------------- */

static void default_text(const md_options *def, const struct optdef *d, char *buf, size_t n)
{
    const char *base = (const char *)def + d->off;
    buf[0] = '\0';
    switch (d->type) {
    case T_INT: {
        int v = *(const int *)(const void *)base;
        if (v > 0) snprintf(buf, n, "%d", v);
        break;
    }
    case T_DOUBLE: {
        double v = *(const double *)(const void *)base;
        if (v > 0) snprintf(buf, n, "%g", v);
        break;
    }
    case T_U64: snprintf(buf, n, "%llu", (unsigned long long)*(const uint64_t *)(const void *)base); break;
    case T_STR:
    case T_CHOICE:
        if (*base) snprintf(buf, n, "%s", base);
        break;
    case T_PREC: snprintf(buf, n, "%s", md_precision_name(*(const md_precision *)(const void *)base)); break;
    default: break;
    }
}

#define HELP_COL 28   /* where a flag's text starts */
#define HELP_WIDTH 80 /* --help fits 80 columns */

void md_options_usage(FILE *f)
{
    md_options def;
    md_options_defaults(&def);
    fprintf(f, "Usage: mpsdiag [FLAGS]\n"
               "Finds the best device (Metal, CUDA, CPU), builds a model from a JSON config,\n"
               "trains and validates it or benchmarks it, and writes a diagnostic report.\n"
               "With no flags: the bundled default run (small CNN on Fashion-MNIST).\n"
               "Flags also accept underscores (--batch_size). Flags override --config.\n");
    fprintf(f, "Several processes (mpirun, --gpus): %s.\n", md_dist_library());
    const char *group = "";
    for (int i = 0; i < N_OPTS; i++) {
        const struct optdef *d = &table[i];
        if (strcmp(group, d->group) != 0) {
            group = d->group;
            fprintf(f, "\n%s:\n", group);
        }
        char left[80], dflt[64];
        snprintf(left, sizeof left, "--%s%s%s", d->name, d->metavar ? " " : "", d->metavar ? d->metavar : "");
        default_text(&def, d, dflt, sizeof dflt);
        char listed[256];
        if (d->list) d->list(listed, sizeof listed, " | ");
        /* the flag in columns 2..29, its text from HELP_COL on, wrapped at
         * HELP_WIDTH; a longer flag gets its text on the next line */
        char line[1024];
        int n = (int)strlen(left) <= HELP_COL - 4 ? snprintf(line, sizeof line, "  %-*s  ", HELP_COL - 4, left)
                                                   : snprintf(line, sizeof line, "%*s", HELP_COL, "");
        if ((int)strlen(left) > HELP_COL - 4) fprintf(f, "  %s\n", left);
        n += snprintf(line + n, sizeof line - (size_t)n, "%s", d->list ? listed : d->help);
        if (dflt[0] && n < (int)sizeof line) snprintf(line + n, sizeof line - (size_t)n, " [default: %s]", dflt);
        md_wrap_line_at(f, line, strlen(line), HELP_WIDTH, HELP_COL);
    }
    fprintf(f, "\nExit codes: 0 ok, 1 failure, 2 usage, 3 config/data/file error, 4 device\n"
               "unavailable, 5 out of memory, 6 numerical failure (NaN/Inf), 7 --ci threshold\n"
               "missed, 70 internal error, 130 interrupted.\n");
}

void md_options_version(FILE *f)
{
    fprintf(f, "mpsdiag %s\n", MD_VERSION);
    fprintf(f, "multi-process training (MPI): %s\n", md_dist_library());
}
