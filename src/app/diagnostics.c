/* diagnostics.c - the multi-model diagnostics run: each model of --models through
 * the ordinary stages, one after another on one device, then a comparison.
 *
 * The stages write into job->report; for the length of one model the job's
 * report is that model's own object, which then joins report["models"]. So
 * every stage's section (model summary, training curves, benchmark) appears
 * per model without the stages knowing about this loop.
 */
#define _POSIX_C_SOURCE 200809L
#include "app/diagnostics.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "app/settings.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/timer.h"

#define MAX_MODELS 16

/* ---- when and on what data --------------------------------------------------- */

static const char *base_name(const char *path)
{
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--; /* "data/cifar-100/" */
    size_t s = n;
    while (s > 0 && path[s - 1] != '/') s--;
    static char buf[MD_PATH_MAX];
    snprintf(buf, sizeof buf, "%.*s", (int)(n - s), path + s);
    return buf;
}

static int names_cifar100(const char *dir)
{
    const char *b = base_name(dir);
    return strcmp(b, "cifar-100") == 0 || strcmp(b, "cifar100") == 0 || strcmp(b, "cifar-100-binary") == 0;
}

int md_diagnostics_wanted(const md_options *o)
{
    if (o->models[0]) return 1;
    /* A model named on the command line or a config (which may hold an
     * inline model) means the ordinary single-model job; so does any data
     * other than the default folder. */
    if (o->model[0] || o->config[0] || o->list_devices) return 0;
    if (strcmp(o->dataset, "auto") != 0 && strcmp(o->dataset, "cifar100") != 0) return 0;
    return o->data_dir[0] && names_cifar100(o->data_dir);
}

static int is_file(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static int is_dir(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

/* The CIFAR-100 binary layout, as the data stage reads it: train.bin in the
 * folder or in the cifar-100-binary/ folder the official tarball unpacks to. */
static int has_cifar100(const char *dir)
{
    char p[MD_PATH_MAX + 64];
    snprintf(p, sizeof p, "%s/train.bin", dir);
    if (is_file(p)) return 1;
    snprintf(p, sizeof p, "%s/cifar-100-binary/train.bin", dir);
    return is_file(p);
}

/* The MPS guides train on CIFAR-100 from data/cifar-100. When it is not there the
 * run says where it goes and goes on with synthetic CIFAR-shaped data (the
 * data stage shapes it to each model's inputs: 3x32x32 plus brightness, the
 * model's classes), so the diagnostics still measure every model. A
 * --data-dir that exists is the data stage's to judge. */
static void choose_data(md_job *job, cJSON *diag)
{
    md_options *o = job->opts;
    if (strcmp(o->dataset, "synthetic") == 0) {
        cJSON_AddStringToObject(diag, "data", "synthetic");
        return;
    }
    if (strcmp(o->dataset, "auto") != 0 && strcmp(o->dataset, "cifar100") != 0) return;
    /* Another folder is the data stage's to open (or to refuse). */
    if (o->data_dir[0] && !names_cifar100(o->data_dir)) return;
    const char *dir = o->data_dir[0] ? o->data_dir : MD_DIAGNOSTICS_CIFAR_DIR;
    if (has_cifar100(dir)) {
        if (!o->data_dir[0]) snprintf(o->data_dir, sizeof o->data_dir, "%s", dir);
        cJSON_AddStringToObject(diag, "data", o->data_dir);
        return;
    }
    if (o->data_dir[0] && is_dir(dir)) return; /* it holds something else: the data stage says what */
    md_warn("CIFAR-100 not found in %s: download the binary version "
            "(https://www.cs.toronto.edu/~kriz/cifar-100-binary.tar.gz) and unpack it there "
            "(train.bin, test.bin, fine_label_names.txt; its cifar-100-binary/ folder works too); "
            "using synthetic CIFAR-shaped data instead (32x32 colour images plus brightness, the models' classes)",
            dir);
    char why[MD_PATH_MAX + 64];
    snprintf(why, sizeof why, "CIFAR-100 not found in %s", dir);
    md_job_setting(job, "dataset", "synthetic", why);
    cJSON_AddStringToObject(diag, "data", "synthetic");
    cJSON_AddStringToObject(diag, "data_why", why);
    snprintf(o->dataset, sizeof o->dataset, "synthetic");
    o->data_dir[0] = '\0';
}

/* ---- the model list ------------------------------------------------------------ */

static md_status split_models(const char *list, char names[][MD_PATH_MAX], int *count)
{
    int n = 0;
    const char *p = list;
    while (*p) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        while (len && (*p == ' ')) { p++; len--; }
        while (len && p[len - 1] == ' ') len--;
        if (len == 0) return md_errf(MD_ERR_USAGE, "--models '%s': empty name in the list", list);
        if (len >= MD_PATH_MAX) return md_errf(MD_ERR_USAGE, "--models: name too long");
        if (n == MAX_MODELS) return md_errf(MD_ERR_USAGE, "--models: at most %d models", MAX_MODELS);
        snprintf(names[n], MD_PATH_MAX, "%.*s", (int)len, p);
        for (int i = 0; i < n; i++)
            if (strcmp(names[i], names[n]) == 0)
                return md_errf(MD_ERR_USAGE, "--models: '%s' is listed twice", names[n]);
        n++;
        if (!e) break;
        p = e + 1;
        if (!*p) return md_errf(MD_ERR_USAGE, "--models '%s': empty name in the list", list);
    }
    if (n == 0) return md_errf(MD_ERR_USAGE, "--models: no model named");
    *count = n;
    return MD_OK;
}

/* ---- reading figures back from a model's report ---------------------------------- */

/* Value at a dotted path ("training.best.acc"), or NULL. An array on the
 * way stands for its last element (per-epoch curves: the final value). */
static const cJSON *at(const cJSON *root, const char *path)
{
    char key[128];
    const cJSON *cur = root;
    while (cur && *path) {
        const char *dot = strchr(path, '.');
        size_t len = dot ? (size_t)(dot - path) : strlen(path);
        snprintf(key, sizeof key, "%.*s", (int)len, path);
        cur = cJSON_IsObject(cur) ? cJSON_GetObjectItemCaseSensitive(cur, key) : NULL;
        if (cJSON_IsArray(cur)) cur = cJSON_GetArrayItem(cur, cJSON_GetArraySize(cur) - 1);
        path += len + (dot ? 1 : 0);
    }
    return cur;
}

/* First finite number found among the candidate paths (NULL-terminated);
 * -1 when none (every figure compared here is >= 0). */
static double num_at(const cJSON *root, const char *const *paths)
{
    for (; *paths; paths++) {
        const cJSON *v = at(root, *paths);
        if (cJSON_IsNumber(v) && v->valuedouble == v->valuedouble && v->valuedouble >= 0) return v->valuedouble;
    }
    return -1;
}

/* Where the stages put what the comparison needs: the model summary
 * (src/nn), the trainer's report (src/train), the benchmark (src/diag). */
static const char *const k_params[] = {"model.parameters", "model.params", NULL};
static const char *const k_flops[] = {"model.flops_forward", "model.flops_per_sample", NULL};
static const char *const k_acc[] = {"training.curves.val_acc", "training.final_val_acc", NULL};
static const char *const k_loss[] = {"training.curves.val_loss", NULL};
static const char *const k_sps[] = {"benchmark.training.samples_per_s", "training.curves.samples_per_s",
                                    "training.samples_per_s", NULL};
static const char *const k_peak[] = {"memory.device_peak_bytes", NULL};

/* ---- one model ------------------------------------------------------------------- */

/* The integration weights (weighted_add layers) as the trainer recorded them
 * per epoch: first and last epoch, so the text shows how they moved. The
 * last epoch's are returned (borrowed), or NULL. */
static const cJSON *integration_weights(const cJSON *sub, int print)
{
    const cJSON *arr = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(sub, "training"), "diagnostics");
    int n = cJSON_GetArraySize(arr);
    if (n == 0) return NULL;
    const cJSON *first = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(arr, 0), "integration_weights");
    const cJSON *last = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(arr, n - 1), "integration_weights");
    if (!cJSON_IsObject(last)) return NULL;
    if (!print) return last;
    md_out("  integration weights (epoch 1%s)\n", n > 1 ? " -> last epoch" : "");
    const cJSON *w;
    cJSON_ArrayForEach(w, last)
    {
        const cJSON *w0 = cJSON_GetObjectItemCaseSensitive(first, w->string);
        char line[512];
        size_t len = (size_t)snprintf(line, sizeof line, "    %-24s", w->string);
        for (int k = 0; k < cJSON_GetArraySize(w) && len < sizeof line - 40; k++) {
            const cJSON *a = cJSON_GetArrayItem(w0, k), *b = cJSON_GetArrayItem(w, k);
            if (n > 1 && cJSON_IsNumber(a))
                len += (size_t)snprintf(line + len, sizeof line - len, " %7.4f -> %7.4f", a->valuedouble, b->valuedouble);
            else
                len += (size_t)snprintf(line + len, sizeof line - len, " %7.4f", b->valuedouble);
        }
        md_out("%s\n", line);
    }
    return last;
}

/* A failure that belongs to this model (the next one may well run). */
static int model_local(md_status st)
{
    return st == MD_ERR_OOM || st == MD_ERR_NUMERIC || st == MD_ERR_UNSUPPORTED;
}

/* `base`: the options as the run started; every model starts from them,
 * since stages resolve automatic values (workers, pinned memory, batch size)
 * into the options for the model they run with. */
static md_status run_one(md_job *job, const md_options *base, const char *name, int i, int n, cJSON *models)
{
    md_options *o = job->opts;
    *o = *base;
    snprintf(o->model, sizeof o->model, "%s", name);
    /* One checkpoint folder per model, so best/last of one model do not
     * overwrite another's. */
    char stem[MD_PATH_MAX];
    snprintf(stem, sizeof stem, "%s", base_name(name));
    size_t sl = strlen(stem);
    if (sl > 5 && strcmp(stem + sl - 5, ".json") == 0) stem[sl - 5] = '\0';
    if (base->checkpoint_dir[0])
        snprintf(o->checkpoint_dir, sizeof o->checkpoint_dir, "%s/%s", base->checkpoint_dir, stem);

    cJSON *root = job->report, *root_settings = job->settings;
    cJSON *sub = cJSON_CreateObject();
    cJSON_AddStringToObject(sub, "name", name);
    job->report = sub;
    /* the run's settings so far (device, policy, the recipe), so that each
     * model's entry stands on its own; its text shows only what it adds */
    job->settings = cJSON_Duplicate(root_settings, 1);
    cJSON_AddItemToObject(sub, "settings", job->settings);
    int shown = cJSON_GetArraySize(job->settings);
    md_dev_reset_peak(job->dev);
    double t0 = md_now();

    char title[MD_PATH_MAX + 32];
    snprintf(title, sizeof title, "Diagnostics %d/%d: %s", i + 1, n, name);
    md_section(title);

    /* The model stage prints the summary ending in the line
     * "✅ Created <name> - Parameters: N". */
    /* The model stage prefers a run config's inline "model" object to
     * o->model; here the name from --models decides. */
    char config[MD_PATH_MAX];
    memcpy(config, o->config, sizeof config);
    o->config[0] = '\0';
    md_status st = md_stage_model(job);
    memcpy(o->config, config, sizeof config);
    if (st == MD_OK) st = md_stage_data(job);
    if (st == MD_OK) {
        md_settings_record_run(job);
        md_settings_print(job->settings, shown);
        st = md_stage_train(job);
        integration_weights(sub, 1);
    }
    if (st == MD_OK) st = md_stage_bench(job);
    /* a model that failed early: its settings and config as far as they went */
    if (!cJSON_GetObjectItemCaseSensitive(sub, "run")) md_settings_record_run(job);

    struct md_mem_stats ms;
    md_dev_mem_stats(job->dev, &ms);
    cJSON *m = cJSON_AddObjectToObject(sub, "memory");
    cJSON_AddNumberToObject(m, "device_peak_bytes", (double)ms.peak);
    cJSON_AddNumberToObject(m, "host_peak_rss_bytes", (double)md_peak_rss_bytes());
    cJSON_AddNumberToObject(sub, "duration_s", md_now() - t0);
    cJSON *status = cJSON_AddObjectToObject(sub, "status");
    cJSON_AddStringToObject(status, "result", md_status_name(st));
    if (st != MD_OK) {
        cJSON_AddStringToObject(status, "error", md_errmsg());
        md_out("❌ %s failed: %s\n", name, md_errmsg());
    } else {
        cJSON_AddNullToObject(status, "error");
    }

    /* The next model starts from a clean job; the stages' cleanups accept a
     * job whose stage never ran. */
    md_stage_train_cleanup(job);
    md_stage_data_cleanup(job);
    md_stage_model_cleanup(job);
    job->trainer = NULL;
    job->data = NULL;
    job->model = NULL;

    job->report = root;
    job->settings = root_settings;
    *o = *base;
    cJSON_AddItemToArray(models, sub);
    return st;
}

/* ---- the comparison ------------------------------------------------------------- */

static const char *fmt_or_dash(double v, const char *fmt, double scale, char *buf, size_t n)
{
    if (v < 0) return "-";
    snprintf(buf, n, fmt, v * scale);
    return buf;
}

static void comparison(md_job *job, const cJSON *models)
{
    cJSON *cmp = cJSON_AddObjectToObject(job->report, "comparison");
    cJSON *rows = cJSON_AddArrayToObject(cmp, "rows");
    const char *best_acc = NULL, *fastest = NULL, *leanest = NULL;
    double v_acc = -1, v_sps = -1, v_peak = -1;

    md_section("Comparison");
    md_out("  %-22s %11s %10s %9s %9s %11s %10s  %s\n", "model", "parameters", "GFLOPs", "val acc", "val loss",
           "samples/s", "peak mem", "status");
    const cJSON *s;
    cJSON_ArrayForEach(s, models)
    {
        const char *name = cJSON_GetObjectItem(s, "name")->valuestring;
        const char *result = at(s, "status.result")->valuestring;
        double params = num_at(s, k_params), flops = num_at(s, k_flops), acc = num_at(s, k_acc);
        double loss = num_at(s, k_loss), sps = num_at(s, k_sps), peak = num_at(s, k_peak);
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "model", name);
#define NUM_OR_NULL(key, v)                                                                                            \
    do {                                                                                                               \
        if ((v) >= 0) cJSON_AddNumberToObject(r, key, v);                                                              \
        else cJSON_AddNullToObject(r, key);                                                                            \
    } while (0)
        NUM_OR_NULL("parameters", params);
        NUM_OR_NULL("flops_per_sample", flops);
        NUM_OR_NULL("val_accuracy", acc);
        NUM_OR_NULL("val_loss", loss);
        NUM_OR_NULL("samples_per_s", sps);
        NUM_OR_NULL("peak_memory_bytes", peak);
#undef NUM_OR_NULL
        const cJSON *iw = integration_weights(s, 0);
        if (iw) cJSON_AddItemToObject(r, "integration_weights", cJSON_Duplicate(iw, 1));
        else cJSON_AddNullToObject(r, "integration_weights");
        cJSON_AddStringToObject(r, "status", result);
        cJSON_AddItemToArray(rows, r);

        int ok = strcmp(result, "ok") == 0;
        if (ok && acc >= 0 && acc > v_acc) { v_acc = acc; best_acc = name; }
        if (ok && sps >= 0 && sps > v_sps) { v_sps = sps; fastest = name; }
        if (ok && peak >= 0 && (v_peak < 0 || peak < v_peak)) { v_peak = peak; leanest = name; }

        char a[32], b[32], c[32], d[32], e[32], f[32];
        md_out("  %-22s %11s %10s %9s %9s %11s %10s  %s\n", name,
               params >= 0 ? md_fmt_thousands((long long)params, a, sizeof a) : "-",
               fmt_or_dash(flops, "%.3f", 1e-9, b, sizeof b), fmt_or_dash(acc, "%.2f%%", 100.0, c, sizeof c),
               fmt_or_dash(loss, "%.4f", 1.0, d, sizeof d), fmt_or_dash(sps, "%.1f", 1.0, e, sizeof e),
               peak >= 0 ? md_fmt_bytes(peak, f, sizeof f) : "-", result);
    }
    if (best_acc) cJSON_AddStringToObject(cmp, "most_accurate", best_acc);
    else cJSON_AddNullToObject(cmp, "most_accurate");
    if (fastest) cJSON_AddStringToObject(cmp, "fastest", fastest);
    else cJSON_AddNullToObject(cmp, "fastest");
    if (leanest) cJSON_AddStringToObject(cmp, "least_memory", leanest);
    else cJSON_AddNullToObject(cmp, "least_memory");
    if (best_acc) md_out("  most accurate: %s", best_acc);
    if (fastest) md_out("%sfastest: %s", best_acc ? "; " : "  ", fastest);
    if (leanest) md_out("%sleast memory: %s", best_acc || fastest ? "; " : "  ", leanest);
    if (best_acc || fastest || leanest) md_out("\n");
}

/* ---- the run ---------------------------------------------------------------------- */

md_status md_diagnostics_run(md_job *job)
{
    md_options *o = job->opts;
    char names[MAX_MODELS][MD_PATH_MAX];
    int n = 0;
    const char *list = o->models[0] ? o->models : MD_DIAGNOSTICS_DEFAULT_MODELS;
    MD_TRY(split_models(list, names, &n));
    /* The --ci thresholds and smoke mode judge the one model of a run. */
    if (o->ci)
        return md_errf(MD_ERR_USAGE, "--ci checks one model, and the diagnostics run (%s) compares several: "
                       "drop --ci, or give one --model",
                       o->models[0] ? "--models" : "--data-dir .../cifar-100");

    cJSON *diag = cJSON_AddObjectToObject(job->report, "diagnostics");
    cJSON *arr = cJSON_AddArrayToObject(diag, "model_names");
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(arr, cJSON_CreateString(names[i]));
    md_job_setting(job, "models", list, o->models[0] ? "--models" : "the default pair (choose with --models A,B)");
    choose_data(job, diag);
    /* The MPS guides' training recipe for these models (AdamW, lr 1e-3, weight
     * decay 1e-4, gradient clipping at norm 1, cosine schedule), where the
     * flags leave it open: SGD at 0.1 without clipping sends the two-pathway
     * ResNet-50 off in a few steps. */
    const char *recipe = "the default diagnostics recipe (set the flag to change)";
    if (!md_options_given(o, "optimizer")) {
        snprintf(o->optimizer, sizeof o->optimizer, "adamw");
        md_job_setting(job, "optimizer", "adamw", recipe);
    }
    if (!md_options_given(o, "weight-decay")) {
        o->weight_decay = 1e-4;
        md_job_setting(job, "weight_decay", "0.0001", recipe);
    }
    if (!md_options_given(o, "grad-clip")) {
        o->grad_clip = 1.0;
        md_job_setting(job, "grad_clip", "1.0", recipe);
    }
    /* Each model gets a benchmark after its training, as in the MPS guides. */
    if (!o->benchmark && !o->benchmark_only) {
        o->benchmark = 1;
        md_job_setting(job, "benchmark", "on", "the diagnostics run benchmarks every model");
    }

    md_settings_print(job->settings, 0);

    cJSON *models = cJSON_AddArrayToObject(job->report, "models");
    md_status first = MD_OK;
    md_options *base = md_malloc(sizeof *base);
    if (!base) return md_errf(MD_ERR_OOM, "out of host memory");
    *base = *o;
    int pg = md_progress_begin("models", n, "models");
    for (int i = 0; i < n; i++) {
        char label[64];
        snprintf(label, sizeof label, "model %s", base_name(names[i]));
        md_progress_label(label);
        md_progress_update(i);
        md_status st = run_one(job, base, names[i], i, n, models);
        if (st != MD_OK && first == MD_OK) first = st;
        if (st != MD_OK && !model_local(st)) break;
    }
    md_progress_end(pg);
    md_free(base);
    comparison(job, models);
    if (first != MD_OK) {
        /* The first failure decides the exit code; its message is the one
         * recorded for that model. */
        const cJSON *s;
        cJSON_ArrayForEach(s, models)
        {
            const cJSON *e = at(s, "status.error");
            if (cJSON_IsString(e)) {
                md_errf(first, "%s: %s", cJSON_GetObjectItem(s, "name")->valuestring, e->valuestring);
                break;
            }
        }
    }
    return first;
}
