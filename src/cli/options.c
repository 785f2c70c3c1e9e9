/* options.c - the option table, flag parsing, config merging, --help. */
#define _GNU_SOURCE
#include "cli/options.h"

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
};

#define F(field) offsetof(md_options, field), sizeof(((md_options *)0)->field)

static const struct optdef table[] = {
    /* --- device --- */
    {"device", "device-type", T_CHOICE, F(device), "device", "Device", "DEV",
     "auto, cpu, cuda[:N], metal or mps (auto probes metal, then cuda, then cpu)", NULL, 0, 0, 0},
    {"list-devices", NULL, T_ON, F(list_devices), NULL, "Device", NULL,
     "list every backend and device with availability, then exit", NULL, 0, 0, 0},
    {"threads", NULL, T_INT, F(threads), "threads", "Device", "N",
     "CPU threads for kernels and OpenBLAS (default: physical cores)", NULL, 1, 1024, 0},
    {"fallback", NULL, T_ON, F(fallback), "fallback", "Device", NULL,
     "run ops the device lacks on the CPU (also MPSDIAG_ENABLE_FALLBACK=1)", NULL, 0, 0, 0},
    {"memory-fraction", NULL, T_DOUBLE, F(memory_fraction), "memory_fraction", "Device", "F",
     "cap device memory at F x total (0 < F <= 1; also MPSDIAG_HIGH_WATERMARK_RATIO)", NULL, 1e-6, 1.0, 0},
    {"no-tf32", NULL, T_OFF, F(tf32), "tf32", "Device", NULL,
     "CUDA: keep fp32 matrix work in full fp32 (no TF32)", NULL, 0, 0, 0},
    /* --- model --- */
    {"config", NULL, T_STR, F(config), NULL, "Model", "FILE",
     "JSON run config; flags override its values", NULL, 0, 0, 0},
    {"model", NULL, T_STR, F(model), "model", "Model", "NAME|FILE",
     "model config: a name from configs/models or a path", NULL, 0, 0, 0},
    {"models", NULL, T_STR, F(models), "models", "Model", "A,B",
     "models to compare in the diagnostics run", NULL, 0, 0, 0},
    {"reduce-architecture", NULL, T_ON, F(reduce_architecture), "reduce_architecture", "Model", NULL,
     "smaller variant of the model for memory-constrained machines", NULL, 0, 0, 0},
    {"dropout", NULL, T_DOUBLE, F(dropout), "dropout", "Model", "P",
     "dropout probability for the model's dropout layers", NULL, 0.0, 0.999, 0},
    {"grad-ckpt", NULL, T_ON, F(grad_ckpt), "grad_ckpt", "Model", NULL,
     "gradient checkpointing: recompute activations in backward", NULL, 0, 0, 0},
    {"channels-last", NULL, T_ON, F(channels_last), "channels_last", "Model", NULL,
     "NHWC activations (channels-last memory format; the default on CUDA)", NULL, 0, 0, 0},
    {"no-channels-last", NULL, T_OFF, F(channels_last), NULL, "Model", NULL,
     "NCHW activations also where channels-last is the default", NULL, 0, 0, 0},
    {"init-from", NULL, T_STR, F(init_from), "init_from", "Model", "FILE",
     "initial weights from a safetensors file", NULL, 0, 0, 0},
    {"dump-grads", NULL, T_STR, F(dump_grads), NULL, "Model", "FILE",
     "one training step on the first batch; write inputs, logits, loss, gradients", NULL, 0, 0, 0},
    {"dump-logits", NULL, T_STR, F(dump_logits), NULL, "Model", "FILE",
     "after training (at once with --epochs 0): the first test batch's inputs and evaluation logits", NULL, 0, 0,
     0},
    {"no-compile", NULL, T_OFF, F(compile), "compile", "Model", NULL,
     "run op by op, eagerly (no fusion, planning or graph capture)", NULL, 0, 0, 0},
    {"compile-mode", NULL, T_CHOICE, F(compile_mode), "compile_mode", "Model", "MODE",
     "default | reduce-overhead | max-autotune", "default|reduce-overhead|max-autotune", 0, 0, 0},
    /* --- precision --- */
    {"precision", NULL, T_PREC, F(precision), "precision", "Precision", "P",
     "fp32 | fp16 | bf16 for convolutions and matrix products", NULL, 0, 0, 0},
    {"amp", NULL, T_ON, F(amp), "amp", "Precision", NULL,
     "automatic mixed precision with the device's best half type", NULL, 0, 0, 0},
    /* --- data --- */
    {"dataset", NULL, T_CHOICE, F(dataset), "dataset", "Data", "NAME",
     "auto | fashion-mnist | mnist | cifar10 | cifar100 | jpeg | csv | synthetic",
     "auto|fashion-mnist|mnist|cifar10|cifar100|jpeg|csv|synthetic", 0, 0, 0},
    {"data-dir", NULL, T_STR, F(data_dir), "data_dir", "Data", "DIR",
     "dataset directory (time series: a .csv file or a directory holding one)", NULL, 0, 0, 0},
    {"val-split", NULL, T_DOUBLE, F(val_split), "val_split", "Data", "F",
     "fraction of the training set held out for validation", NULL, 0.0, 0.9, 0},
    {"num-workers", NULL, T_INT, F(num_workers), "num_workers", "Data", "N",
     "loader threads (0: load in the main thread; default: per device)", NULL, 0, 256, 0},
    {"prefetch", NULL, T_INT, F(prefetch), "prefetch", "Data", "N",
     "batches prepared ahead", NULL, 1, 64, 0},
    {"pin-memory", NULL, T_ON, F(pin_memory), "pin_memory", "Data", NULL,
     "page-locked host batches (used where the device benefits)", NULL, 0, 0, 0},
    {"no-pin-memory", NULL, T_OFF, F(pin_memory), NULL, "Data", NULL,
     "ordinary host memory for batches", NULL, 0, 0, 0},
    {"cache-images", NULL, T_ON, F(cache_images), "cache_images", "Data", NULL,
     "keep decoded images in RAM (checked against available memory)", NULL, 0, 0, 0},
    {"no-augment", NULL, T_OFF, F(augment), "augment", "Data", NULL,
     "no random crop/flip for training", NULL, 0, 0, 0},
    {"on-bad-sample", NULL, T_CHOICE, F(on_bad_sample), "on_bad_sample", "Data", "WHAT",
     "skip | fail when an image cannot be decoded", "skip|fail", 0, 0, 0},
    {"image-size", NULL, T_INT, F(image_size), "image_size", "Data", "PX",
     "JPEG folders: resize to PX x PX (default: the model's input)", NULL, 8, 4096, 0},
    {"max-samples", NULL, T_INT, F(max_samples), "max_samples", "Data", "N",
     "use at most N samples of each split (train, validation, test; seeded)", NULL, 1, INT_MAX, 0},
    {"coarse-labels", NULL, T_ON, F(coarse_labels), "coarse_labels", "Data", NULL,
     "CIFAR-100: the 20 coarse classes instead of the 100 fine ones", NULL, 0, 0, 0},
    {"seq-len", NULL, T_INT, F(seq_len), "seq_len", "Data", "N",
     "time series: lookback rows per window", NULL, 1, 100000, 0},
    {"pred-len", NULL, T_INT, F(pred_len), "pred_len", "Data", "N",
     "time series: rows to forecast per window", NULL, 1, 100000, 0},
    {"features", NULL, T_CHOICE, F(features), "features", "Data", "M|S|MS",
     "time series: all variates in and out (M), the target only (S), all in and the target out (MS)", "M|S|MS", 0,
     0, 0},
    {"target", NULL, T_STR, F(target), "target", "Data", "COL",
     "time series: the target column (default: the last numeric one)", NULL, 0, 0, 0},
    {"train-frac", NULL, T_DOUBLE, F(train_frac), "train_frac", "Data", "F",
     "time series: training fraction, in time order (with --test-frac; default: the file's convention)", NULL, 0.01,
     0.98, 0},
    {"test-frac", NULL, T_DOUBLE, F(test_frac), "test_frac", "Data", "F",
     "time series: test fraction at the end (validation gets the rest)", NULL, 0.01, 0.98, 0},
    /* --- training --- */
    {"batch-size", NULL, T_INT, F(batch_size), "batch_size", "Training", "N",
     "samples per step (default: per device and model)", NULL, 1, 1 << 20, 0},
    {"epochs", "train-epochs", T_INT, F(epochs), "epochs", "Training", "N",
     "training epochs (0: no training)", NULL, 0, 100000, 0},
    {"steps", NULL, T_INT, F(steps), "steps", "Training", "N",
     "at most N steps per epoch", NULL, 1, INT_MAX, 0},
    {"lr", "learning-rate", T_DOUBLE, F(lr), "lr", "Training", "LR",
     "peak learning rate (default: 0.1 for SGD, 1e-3 for AdamW)", NULL, 1e-12, 100.0, 0},
    {"optimizer", NULL, T_CHOICE, F(optimizer), "optimizer", "Training", "NAME",
     "sgd | adamw", "sgd|adamw", 0, 0, 0},
    {"momentum", NULL, T_DOUBLE, F(momentum), "momentum", "Training", "M",
     "SGD momentum", NULL, 0.0, 0.9999, 0},
    {"nesterov", NULL, T_ON, F(nesterov), "nesterov", "Training", NULL,
     "Nesterov momentum", NULL, 0, 0, 0},
    {"weight-decay", NULL, T_DOUBLE, F(weight_decay), "weight_decay", "Training", "WD",
     "weight decay (not on BN and bias unless --decay-all)", NULL, 0.0, 1.0, 0},
    {"decay-all", NULL, T_ON, F(decay_all), "decay_all", "Training", NULL,
     "apply weight decay to BN and bias parameters too", NULL, 0, 0, 0},
    {"lradj", "schedule", T_CHOICE, F(lradj), "lradj", "Training", "NAME",
     "constant | step | cosine | onecycle", "constant|step|cosine|onecycle", 0, 0, 0},
    {"warmup-epochs", NULL, T_DOUBLE, F(warmup_epochs), "warmup_epochs", "Training", "E",
     "linear learning-rate warm-up", NULL, 0.0, 1000.0, 0},
    {"grad-clip", NULL, T_DOUBLE, F(grad_clip), "grad_clip", "Training", "NORM",
     "clip gradients by global norm (0: off)", NULL, 0.0, 1e9, 0},
    {"label-smoothing", NULL, T_DOUBLE, F(label_smoothing), "label_smoothing", "Training", "S",
     "label smoothing for the cross-entropy", NULL, 0.0, 0.999, 0},
    {"val-batch-multiplier", NULL, T_INT, F(val_batch_multiplier), "val_batch_multiplier", "Training", "K",
     "validation batch = K x batch size", NULL, 1, 64, 0},
    {"checkpoint-dir", NULL, T_STR, F(checkpoint_dir), "checkpoint_dir", "Training", "DIR",
     "where best and last checkpoints go", NULL, 0, 0, 0},
    {"overwrite", NULL, T_ON, F(overwrite), "overwrite", "Training", NULL,
     "replace an earlier run's checkpoints in --checkpoint-dir (else refused)", NULL, 0, 0, 0},
    {"resume", NULL, T_STR, F(resume), NULL, "Training", "FILE",
     "continue from a checkpoint", NULL, 0, 0, 0},
    {"metrics", NULL, T_STR, F(metrics), "metrics", "Training", "FILE",
     "append JSON lines: a header per run, then one per epoch and one every 50 steps", NULL, 0, 0, 0},
    {"auto-batch", NULL, T_ON, F(auto_batch), "auto_batch", "Training", NULL,
     "halve the batch and retry on out-of-memory", NULL, 0, 0, 0},
    /* --- benchmark and report --- */
    {"benchmark", NULL, T_ON, F(benchmark), "benchmark", "Benchmark", NULL,
     "benchmark after training", NULL, 0, 0, 0},
    {"benchmark-only", NULL, T_ON, F(benchmark_only), "benchmark_only", "Benchmark", NULL,
     "benchmark without training", NULL, 0, 0, 0},
    {"bench-iters", NULL, T_INT, F(bench_iters), "bench_iters", "Benchmark", "N",
     "timed iterations per measurement", NULL, 1, 1000000, 0},
    {"warmup-iters", NULL, T_INT, F(warmup_iters), "warmup_iters", "Benchmark", "N",
     "untimed warm-up iterations", NULL, 0, 1000000, 0},
    {"batch-sweep", NULL, T_STR, F(batch_sweep), "batch_sweep", "Benchmark", "LIST",
     "throughput, latency and memory per batch size (8,16,32 or auto)", NULL, 0, 0, 0},
    {"find-batch-size", NULL, T_ON, F(find_batch_size), "find_batch_size", "Benchmark", NULL,
     "largest batch that fits, and the fastest", NULL, 0, 0, 0},
    {"compare-devices", NULL, T_ON, F(compare_devices), "compare_devices", "Benchmark", NULL,
     "same benchmark on every available device", NULL, 0, 0, 0},
    {"ablate", NULL, T_STR, F(ablate), "ablate", "Benchmark", "LIST",
     "measure each of compile,channels-last,precision,workers on and off", NULL, 0, 0, 0},
    {"report", NULL, T_STR, F(report), "report", "Report", "FILE",
     "write the JSON report (schema in README)", NULL, 0, 0, 0},
    {"html", NULL, T_STR, F(html), "html", "Report", "FILE",
     "write a self-contained HTML report with charts", NULL, 0, 0, 0},
    {"ci", NULL, T_ON, F(ci), NULL, "Report", NULL,
     "smoke-test mode: tiny model, few steps, thresholds", NULL, 0, 0, 0},
    {"expect-min-throughput", NULL, T_DOUBLE, F(expect_min_throughput), NULL, "Report", "S/S",
     "fail (exit 7) below this many training samples/s", NULL, 0.0, 1e12, 0},
    {"expect-max-loss", NULL, T_DOUBLE, F(expect_max_loss), NULL, "Report", "L",
     "fail (exit 7) when the final loss is above L", NULL, 0.0, 1e12, 0},
    {"junit", NULL, T_STR, F(junit), NULL, "Report", "FILE",
     "write a JUnit-style XML result", NULL, 0, 0, 0},
    {"seed", NULL, T_U64, F(seed), "seed", "General", "N",
     "seed for initialisation, shuffling, augmentation, dropout", NULL, 0, 0, 0},
    {"verbose", NULL, T_VERB, F(verbosity), NULL, "General", NULL,
     "more detail", NULL, 0, 0, MD_VERBOSE},
    {"quiet", NULL, T_VERB, F(verbosity), NULL, "General", NULL,
     "errors only", NULL, 0, 0, MD_QUIET},
    {"help", NULL, T_ON, F(help), NULL, "General", NULL, "this text", NULL, 0, 0, 0},
    {"version", NULL, T_ON, F(version), NULL, "General", NULL, "print the version", NULL, 0, 0, 0},
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
    snprintf(o->features, sizeof o->features, "M");
    o->epochs = 1;
    o->lr = -1;
    snprintf(o->optimizer, sizeof o->optimizer, "sgd");
    o->momentum = 0.9;
    o->weight_decay = 5e-4;
    snprintf(o->lradj, sizeof o->lradj, "cosine");
    o->val_batch_multiplier = 4;
    snprintf(o->checkpoint_dir, sizeof o->checkpoint_dir, "checkpoints");
    o->bench_iters = 50;
    o->warmup_iters = 5;
}

const char *md_precision_name(md_precision p)
{
    return p == MD_PREC_FP16 ? "fp16" : p == MD_PREC_BF16 ? "bf16" : "fp32";
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

static md_status set_text(md_options *o, const struct optdef *d, const char *val, const char *who, md_status st)
{
    char *base = (char *)o + d->off;
    char *end;
    switch (d->type) {
    case T_ON: *(int *)(void *)base = 1; return MD_OK;
    case T_OFF: *(int *)(void *)base = 0; return MD_OK;
    case T_VERB: *(int *)(void *)base = d->ival; return MD_OK;
    case T_INT: {
        errno = 0;
        long v = strtol(val, &end, 10);
        if (!*val || *end || errno) return bad(st, who, "'%s' is not an integer", val);
        if (v < d->min || v > d->max) {
            char msg[128];
            snprintf(msg, sizeof msg, "%%s is out of range (%.0f to %.0f)", d->min, d->max);
            return bad(st, who, msg, val);
        }
        *(int *)(void *)base = (int)v;
        return MD_OK;
    }
    case T_DOUBLE: {
        errno = 0;
        double v = strtod(val, &end);
        if (!*val || *end || errno || !isfinite(v)) return bad(st, who, "'%s' is not a number", val);
        if (v < d->min || v > d->max) {
            char msg[128];
            snprintf(msg, sizeof msg, "%%s is out of range (%g to %g)", d->min, d->max);
            return bad(st, who, msg, val);
        }
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
        int ok = d->choices ? choice_ok(d->choices, val) : device_ok(val);
        if (!ok) {
            char msg[300];
            snprintf(msg, sizeof msg, "'%%s' is not one of %s",
                     d->choices ? d->choices : "auto|cpu|cuda[:N]|metal|mps");
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
            if (v >= d->min && v <= d->max) cJSON_AddNumberToObject(c, d->json, v);
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

void md_options_usage(FILE *f)
{
    md_options def;
    md_options_defaults(&def);
    fprintf(f, "Usage: mpsdiag [FLAGS]\n"
               "Finds the best device (Metal, CUDA, CPU), builds a model from a JSON config,\n"
               "trains and validates it or benchmarks it, and writes a diagnostic report.\n"
               "With no flags: the bundled default run (small CNN on Fashion-MNIST).\n"
               "Flags also accept underscores (--batch_size). Flags override --config.\n");
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
        fprintf(f, "  %-30s %s", left, d->help);
        if (dflt[0]) fprintf(f, " [default: %s]", dflt);
        fputc('\n', f);
    }
    fprintf(f, "\nExit codes: 0 ok, 1 failure, 2 usage, 3 config/data/file error, 4 device\n"
               "unavailable, 5 out of memory, 6 numerical failure (NaN/Inf), 7 --ci threshold\n"
               "missed, 70 internal error, 130 interrupted.\n");
}

void md_options_version(FILE *f)
{
    fprintf(f, "mpsdiag %s\n", MD_VERSION);
}
