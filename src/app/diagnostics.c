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
#include "app/sub_run.h"
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
static const char *const k_lat[] = {"benchmark.inference.latency_ms.p50", NULL};
static const char *const k_isps[] = {"benchmark.inference.samples_per_s", NULL};
static const char *const k_classes[] = {"model.num_classes", NULL};

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
/* The "Created" line of the model stage, from its report, when the layer
 * table is left out. */
static void created_line(const cJSON *sub)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(sub, "model");
    const cJSON *nm = cJSON_GetObjectItemCaseSensitive(m, "name");
    double params = num_at(sub, k_params), flops = num_at(sub, k_flops);
    char a[32];
    md_out("✅ Created %s - Parameters: %s - %.3f GFLOPs per sample (forward); layer table: --verbose\n",
           cJSON_IsString(nm) ? nm->valuestring : "?", md_fmt_thousands((long long)(params > 0 ? params : 0), a, sizeof a),
           flops > 0 ? flops * 1e-9 : 0.0);
}

static md_status run_one(md_job *job, const md_options *base, const char *name, int i, int n, cJSON *models,
                         const cJSON *system, char *ci_msg, size_t ci_n)
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
    /* the run's settings so far (device, policy, the recipe), so that each
     * model's entry stands on its own; its text shows only what it adds */
    int shown = md_sub_run_begin(job, sub, root_settings);
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
    /* the per-layer tables of several models bury the comparison */
    job->no_layer_table = md_log_level() < MD_VERBOSE;
    md_status st = md_stage_model(job);
    if (st == MD_OK && job->no_layer_table) created_line(sub);
    job->no_layer_table = 0;
    memcpy(o->config, config, sizeof config);
    if (st == MD_OK) st = md_stage_data(job);
    if (st == MD_OK) {
        md_settings_record_run(job);
        md_settings_print(job->settings, shown);
        st = md_stage_train(job);
        integration_weights(sub, 1);
    }
    if (st == MD_OK) st = md_stage_bench(job);
    /* this model's advice and --ci checks, from its own benchmark (printed
     * with the others at the end of the run) */
    ci_msg[0] = '\0';
    if (st == MD_OK) {
        md_recommend_report(job, system, 0);
        if (o->ci) md_ci_check(job, ci_msg, ci_n, 0);
    }
    /* a model that failed early: its settings and config as far as they went */
    if (!cJSON_GetObjectItemCaseSensitive(sub, "run")) md_settings_record_run(job);

    md_sub_run_memory(job, sub, t0);
    md_sub_run_status(sub, st, name);

    /* The next model starts from a clean job. */
    md_sub_run_cleanup(job);
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

static const char *str_at(const cJSON *root, const char *path)
{
    const cJSON *v = at(root, path);
    return cJSON_IsString(v) ? v->valuestring : "";
}

/* A model's name as the text tables show it: its file's stem, cut to `w`
 * columns ("~" marks a cut). */
static const char *short_name(const char *name, int w, char *buf, size_t n)
{
    char stem[MD_PATH_MAX];
    snprintf(stem, sizeof stem, "%s", base_name(name));
    size_t l = strlen(stem);
    if (l > 5 && strcmp(stem + l - 5, ".json") == 0) stem[l -= 5] = '\0';
    if ((int)l > w) snprintf(buf, n, "%.*s~", w - 1, stem);
    else snprintf(buf, n, "%s", stem);
    return buf;
}

/* What accuracies may be compared on: the task, the number of classes and
 * the data (dataset, source, validation samples). */
static void accuracy_key(const cJSON *s, char *key, size_t n)
{
    const char *task = str_at(s, "data.task");
    if (!*task) task = str_at(s, "training.task");
    snprintf(key, n, "%s|%.0f|%s|%s|%.0f", task, num_at(s, k_classes), str_at(s, "data.dataset"),
             str_at(s, "data.source"), (double)(cJSON_IsNumber(at(s, "data.splits.val.count")) ? at(s, "data.splits.val.count")->valuedouble : -1));
}

/* Why the accuracies of the models with one are not comparable, into why
 * (""when they are). */
static void comparable(const cJSON *models, char *why, size_t n)
{
    char first[MD_PATH_MAX * 2] = "", key[MD_PATH_MAX * 2];
    const cJSON *s, *s0 = NULL;
    why[0] = '\0';
    cJSON_ArrayForEach(s, models)
    {
        if (strcmp(str_at(s, "status.result"), "ok") != 0 || num_at(s, k_acc) < 0) continue;
        accuracy_key(s, key, sizeof key);
        if (!s0) {
            s0 = s;
            snprintf(first, sizeof first, "%s", key);
            continue;
        }
        if (strcmp(first, key) == 0) continue;
        const char *t0 = str_at(s0, "data.task"), *t1 = str_at(s, "data.task");
        double c0 = num_at(s0, k_classes), c1 = num_at(s, k_classes);
        char a[64], b[64];
        short_name(str_at(s0, "name"), 24, a, sizeof a);
        short_name(str_at(s, "name"), 24, b, sizeof b);
        if (strcmp(t0, t1) != 0) snprintf(why, n, "different tasks (%s %s, %s %s)", a, t0, b, t1);
        else if (c0 != c1) snprintf(why, n, "different numbers of classes (%s %.0f, %s %.0f)", a, c0, b, c1);
        else snprintf(why, n, "trained and validated on different data (%s, %s)", a, b);
        return;
    }
}

static void comparison(md_job *job, const cJSON *models)
{
    cJSON *cmp = cJSON_AddObjectToObject(job->report, "comparison");
    cJSON *rows = cJSON_AddArrayToObject(cmp, "rows");
    const char *best_acc = NULL, *fastest = NULL, *leanest = NULL;
    double v_acc = -1, v_sps = -1, v_peak = -1;
    char why[400];
    comparable(models, why, sizeof why);

    md_section("Comparison");
    md_out("  %-22s %10s %7s %8s %9s %8s %10s  %s\n", "model", "params", "val acc", "val loss", "samples/s",
           "p50 ms", "peak mem", "status");
    const cJSON *s;
    double batch = -1;
    cJSON_ArrayForEach(s, models)
    {
        const char *name = cJSON_GetObjectItem(s, "name")->valuestring;
        const char *result = at(s, "status.result")->valuestring;
        double params = num_at(s, k_params), flops = num_at(s, k_flops), acc = num_at(s, k_acc);
        double loss = num_at(s, k_loss), sps = num_at(s, k_sps), peak = num_at(s, k_peak);
        double lat = num_at(s, k_lat), isps = num_at(s, k_isps), classes = num_at(s, k_classes);
        static const char *const k_batch[] = {"benchmark.batch_size", NULL};
        if (batch < 0) batch = num_at(s, k_batch);
        const char *task = str_at(s, "data.task");
        if (!*task) task = str_at(s, "training.task");
        cJSON *r = cJSON_CreateObject();
        cJSON_AddStringToObject(r, "model", name);
#define NUM_OR_NULL(key, v)                                                                                            \
    do {                                                                                                               \
        if ((v) >= 0) cJSON_AddNumberToObject(r, key, v);                                                              \
        else cJSON_AddNullToObject(r, key);                                                                            \
    } while (0)
        if (*task) cJSON_AddStringToObject(r, "task", task);
        else cJSON_AddNullToObject(r, "task");
        NUM_OR_NULL("num_classes", classes);
        NUM_OR_NULL("parameters", params);
        NUM_OR_NULL("flops_per_sample", flops);
        NUM_OR_NULL("val_accuracy", acc);
        NUM_OR_NULL("val_loss", loss);
        NUM_OR_NULL("samples_per_s", sps);
        NUM_OR_NULL("inference_latency_ms", lat);
        NUM_OR_NULL("inference_samples_per_s", isps);
        NUM_OR_NULL("peak_memory_bytes", peak);
#undef NUM_OR_NULL
        const cJSON *iw = integration_weights(s, 0);
        if (iw) cJSON_AddItemToObject(r, "integration_weights", cJSON_Duplicate(iw, 1));
        else cJSON_AddNullToObject(r, "integration_weights");
        const cJSON *recs = cJSON_GetObjectItemCaseSensitive(s, "recommendations");
        if (cJSON_IsArray(recs)) cJSON_AddNumberToObject(r, "recommendations", cJSON_GetArraySize(recs));
        else cJSON_AddNullToObject(r, "recommendations");
        const cJSON *ci = cJSON_GetObjectItemCaseSensitive(s, "ci");
        if (ci) {
            int failed = cJSON_IsFalse(at(s, "ci.throughput.passed")) || cJSON_IsFalse(at(s, "ci.loss.passed"));
            cJSON_AddBoolToObject(r, "ci_passed", !failed);
        } else {
            cJSON_AddNullToObject(r, "ci_passed");
        }
        cJSON_AddStringToObject(r, "status", result);
        cJSON_AddItemToArray(rows, r);

        int ok = strcmp(result, "ok") == 0;
        if (ok && acc >= 0 && acc > v_acc) { v_acc = acc; best_acc = name; }
        if (ok && sps >= 0 && sps > v_sps) { v_sps = sps; fastest = name; }
        if (ok && peak >= 0 && (v_peak < 0 || peak < v_peak)) { v_peak = peak; leanest = name; }

        char a[32], c[32], d[32], e[32], f[32], g[32], nm[32];
        md_out("  %-22s %10s %7s %8s %9s %8s %10s  %s\n", short_name(name, 22, nm, sizeof nm),
               params >= 0 ? md_fmt_thousands((long long)params, a, sizeof a) : "-",
               fmt_or_dash(acc, "%.2f%%", 100.0, c, sizeof c), fmt_or_dash(loss, "%.4f", 1.0, d, sizeof d),
               fmt_or_dash(sps, "%.1f", 1.0, e, sizeof e), fmt_or_dash(lat, "%.2f", 1.0, g, sizeof g),
               peak >= 0 ? md_fmt_bytes(peak, f, sizeof f) : "-", result);
    }
    if (why[0]) best_acc = NULL;
    if (best_acc) cJSON_AddStringToObject(cmp, "most_accurate", best_acc);
    else cJSON_AddNullToObject(cmp, "most_accurate");
    if (why[0]) cJSON_AddStringToObject(cmp, "not_comparable", why);
    else cJSON_AddNullToObject(cmp, "not_comparable");
    if (fastest) cJSON_AddStringToObject(cmp, "fastest", fastest);
    else cJSON_AddNullToObject(cmp, "fastest");
    if (leanest) cJSON_AddStringToObject(cmp, "least_memory", leanest);
    else cJSON_AddNullToObject(cmp, "least_memory");
    if (batch > 0)
        md_out("  samples/s: training (benchmark); p50 ms: inference latency per batch of %.0f; "
               "val: last epoch\n", batch);
    char nm[3][32];
    if (why[0]) md_out("  most accurate: not comparable, %s\n", why);
    if (best_acc) md_out("  most accurate: %s", short_name(best_acc, 24, nm[0], sizeof nm[0]));
    if (fastest) md_out("%sfastest: %s", best_acc ? "; " : "  ", short_name(fastest, 24, nm[1], sizeof nm[1]));
    if (leanest)
        md_out("%sleast memory: %s", best_acc || fastest ? "; " : "  ", short_name(leanest, 24, nm[2], sizeof nm[2]));
    if (best_acc || fastest || leanest) md_out("\n");
}

/* Each model's recommendations, from its own benchmark. */
static void recommendations(const cJSON *models)
{
    md_section("Recommendations");
    const cJSON *s;
    cJSON_ArrayForEach(s, models)
    {
        char nm[64];
        short_name(str_at(s, "name"), 40, nm, sizeof nm);
        const cJSON *recs = cJSON_GetObjectItemCaseSensitive(s, "recommendations");
        if (!cJSON_IsArray(recs)) {
            md_out("  %s: none, the model did not get as far as its benchmark\n", nm);
        } else if (cJSON_GetArraySize(recs) == 0) {
            md_out("  %s: none, nothing measured suggests a change\n", nm);
        } else {
            md_out("  %s\n", nm);
            const cJSON *e;
            cJSON_ArrayForEach(e, recs) md_recommendation_print(e, 4);
        }
    }
}

/* --ci, per model: its figures against the thresholds. */
static void ci_section(const cJSON *models, const md_options *o)
{
    md_section("CI");
    const cJSON *s;
    cJSON_ArrayForEach(s, models)
    {
        char nm[32], t[96] = "not measured", l[96] = "not measured";
        short_name(str_at(s, "name"), 22, nm, sizeof nm);
        if (!cJSON_GetObjectItemCaseSensitive(s, "ci")) {
            md_out("  %-22s not checked: %s\n", nm, str_at(s, "status.result"));
            continue;
        }
        double sps = num_at(s, (const char *const[]){"ci.throughput.samples_per_s", NULL});
        const cJSON *lv = at(s, "ci.loss.final_loss");
        int tfail = cJSON_IsFalse(at(s, "ci.throughput.passed")), lfail = cJSON_IsFalse(at(s, "ci.loss.passed"));
        if (sps >= 0)
            snprintf(t, sizeof t, "%.1f samples/s%s", sps,
                     o->expect_min_throughput > 0 ? (tfail ? " (MISSED)" : " (ok)") : "");
        if (cJSON_IsNumber(lv))
            snprintf(l, sizeof l, "%.4f%s", lv->valuedouble, o->expect_max_loss > 0 ? (lfail ? " (MISSED)" : " (ok)") : "");
        md_out("  %-22s throughput %s, final loss %s: %s\n", nm, t, l, tfail || lfail ? "FAILED" : "passed");
    }
    char th[160] = "";
    if (o->expect_min_throughput > 0) snprintf(th, sizeof th, "--expect-min-throughput %g", o->expect_min_throughput);
    if (o->expect_max_loss > 0)
        snprintf(th + strlen(th), sizeof th - strlen(th), "%s--expect-max-loss %g", th[0] ? ", " : "", o->expect_max_loss);
    md_out("  thresholds: %s\n", th[0] ? th : "none given");
}

/* ---- the run ---------------------------------------------------------------------- */

md_status md_diagnostics_run(md_job *job)
{
    md_options *o = job->opts;
    char names[MAX_MODELS][MD_PATH_MAX];
    int n = 0;
    const char *list = o->models[0] ? o->models : MD_DIAGNOSTICS_DEFAULT_MODELS;
    if (o->time_budget > 0)
        return md_errf(MD_ERR_USAGE, "--time-budget sizes one training; the diagnostics run trains several models "
                       "(give one --model)");
    MD_TRY(split_models(list, names, &n));

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
    /* what missed the --ci thresholds, per model */
    char(*ci_msg)[600] = md_calloc((size_t)n, sizeof *ci_msg);
    if (!ci_msg) {
        md_free(base);
        return md_errf(MD_ERR_OOM, "out of host memory");
    }
    const cJSON *system = cJSON_GetObjectItemCaseSensitive(job->report, "system");
    int pg = md_progress_begin("models", n, "models");
    for (int i = 0; i < n; i++) {
        char label[64];
        snprintf(label, sizeof label, "model %s", base_name(names[i]));
        md_progress_label(label);
        md_progress_update(i);
        md_status st = run_one(job, base, names[i], i, n, models, system, ci_msg[i], sizeof ci_msg[i]);
        if (st != MD_OK && first == MD_OK) first = st;
        if (st != MD_OK && !model_local(st)) break;
    }
    md_progress_end(pg);
    md_free(base);
    recommendations(models);
    if (o->ci) ci_section(models, o);
    comparison(job, models);
    /* --ci: every model that missed a threshold, by name */
    char msg[2048] = "";
    size_t ml = 0;
    for (int i = 0; i < n && first == MD_OK; i++)
        if (ci_msg[i][0] && ml < sizeof msg)
            ml += (size_t)snprintf(msg + ml, sizeof msg - ml, "%s%s: %s", ml ? "; " : "", names[i], ci_msg[i]);
    md_free(ci_msg);
    if (first == MD_OK && msg[0]) return md_errf(MD_ERR_THRESHOLD, "--ci: %s", msg);
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
