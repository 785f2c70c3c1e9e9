/* test_seeds.c - the seeds' models (configs/models) and the diagnostics run.
 *
 * Parameter counts are pinned against sums worked out by hand from the
 * architectures (docs/diagnostics-run.md gives the
 * breakdown), so a change to a config or to the loader's counting shows up.
 */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/diagnostics.h"
#include "helpers.h"
#include "nn/model.h"

struct count_case {
    const char *name;
    size_t params, params_reduced; /* 0: not pinned */
    int inputs, classes;
};

/* Worked out from the architectures:
 *  base_multi_channel: per pathway 3 stages x (2 conv3x3 + 2 BN) at 32/64/128:
 *    colour 286,560 + 896 BN = 287,456; brightness 285,984 + 896 = 286,880;
 *    weighted_add 2; linear 128*100 + 100 = 12,900          -> 587,238
 *  base_multi_channel_large: 4 stages at 64/128/256/512: colour 4,683,456 +
 *    3,840 BN; brightness 4,682,304 + 3,840; concat 1024 -> linear 102,500 -> 9,475,940
 *  multi_channel_resnet50: ResNet-50 trunk without fc 23,508,032 (colour) +
 *    23,501,760 (1-channel stem) + linear 4096*100 + 100    -> 47,419,492
 *  continuous_integration: stems 4,768 + 1,632; stages 1,181,568 per pathway;
 *    carries 18,560 + 73,984 + 295,424; weights 2 + 3 + 3 + 3; fc 257,000 -> 3,014,515
 *  custom_cnn: convs 388,896 with BN; fc 256*2 + 2       -> 389,410
 *  resnet50: torchvision                                  -> 25,557,032 */
static const struct count_case counts[] = {
    {"base_multi_channel", 587238, 150822, 2, 100},
    {"base_multi_channel_large", 9475940, 2397156, 2, 100},
    {"multi_channel_resnet50", 47419492, 11987044, 2, 100},
    {"continuous_integration", 3014515, 821171, 2, 1000},
    {"custom_cnn", 389410, 97938, 1, 2},
    {"resnet50", 25557032, 0, 1, 1000},
};

static md_model *load(const char *name, int reduce)
{
    struct md_model_opts o;
    md_model_opts_default(&o);
    o.reduce_architecture = reduce;
    md_model *m = NULL;
    md_status st = md_model_load(name, NULL, &o, &m);
    cr_assert_eq(st, MD_OK, "%s: %s", name, md_errmsg());
    return m;
}

Test(seeds, parameter_counts_pinned)
{
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        const struct count_case *c = &counts[i];
        md_model *m = load(c->name, 0);
        cr_expect_eq(md_model_nparams(m), c->params, "%s: %zu parameters, expected %zu", c->name,
                     md_model_nparams(m), c->params);
        cr_expect_eq(md_model_num_inputs(m), c->inputs, "%s: inputs", c->name);
        cr_expect_eq(md_model_num_classes(m), c->classes, "%s: classes", c->name);
        md_model_free(m);
        if (!c->params_reduced) continue;
        m = load(c->name, 1);
        cr_expect_eq(md_model_nparams(m), c->params_reduced, "%s --reduce-architecture: %zu parameters, expected %zu",
                     c->name, md_model_nparams(m), c->params_reduced);
        cr_expect_lt(md_model_nparams(m), c->params / 3, "%s: reducing should cut parameters ~4x", c->name);
        md_model_free(m);
    }
}

/* The two-input models take colour first and brightness second, with the
 * shapes the data stage derives (RGB and its luma at the same size). */
Test(seeds, two_input_models_take_rgb_and_brightness)
{
    for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++) {
        if (counts[i].inputs != 2) continue;
        md_model *m = load(counts[i].name, 0);
        int c0, h0, w0, c1, h1, w1;
        md_model_input_shape(m, 0, &c0, &h0, &w0);
        md_model_input_shape(m, 1, &c1, &h1, &w1);
        cr_expect_str_eq(md_model_input_name(m, 0), "rgb", "%s", counts[i].name);
        cr_expect_str_eq(md_model_input_name(m, 1), "brightness", "%s", counts[i].name);
        cr_expect(c0 == 3 && c1 == 1 && h0 == h1 && w0 == w1, "%s: (%d,%d,%d) and (%d,%d,%d)", counts[i].name, c0,
                  h0, w0, c1, h1, w1);
        md_model_free(m);
    }
}

/* The continuous integration model mixes the pathways after each of its four
 * stages with learnable weights: 2 for the first, 3 (colour, brightness,
 * carried integration) for the others. */
Test(seeds, continuous_integration_has_integration_weights)
{
    md_model *m = load("continuous_integration", 0);
    int found = 0;
    for (int i = 0; i < md_model_num_tensors(m); i++) {
        const struct md_param_info *p = md_model_tensor(m, i);
        if (strcmp(p->layer_type, "weighted_add") != 0) continue;
        char want[32];
        snprintf(want, sizeof want, "integration%d.weight", found + 1);
        cr_expect_str_eq(p->name, want);
        cr_expect_eq(p->numel, found == 0 ? 2u : 3u, "%s", p->name);
        cr_expect_eq(p->decay, 0, "integration weights are not weight-decayed");
        found++;
    }
    cr_expect_eq(found, 4);
    md_model_free(m);
}

/* ---- the diagnostics run ---------------------------------------------------- */

/* The seeds' command (--data-dir data/cifar-100) and --models start it;
 * anything that names one model or other data keeps the single-model job. */
Test(seeds, when_the_diagnostics_run_starts)
{
    static const struct { const char *model, *models, *dataset, *data_dir, *config; int want; } cases[] = {
        {"", "a,b", "auto", "", "", 1},
        {"small_cnn", "a", "auto", "", "", 1},
        {"", "", "auto", "data/cifar-100", "", 1},
        {"", "", "cifar100", "data/cifar100/", "", 1},
        {"", "", "auto", "/x/cifar-100-binary", "", 1},
        {"", "", "cifar100", "", "", 0},
        {"", "", "cifar100", "/tmp/none", "", 0},
        {"", "", "auto", "data/fashion-mnist", "", 0},
        {"small_cnn", "", "auto", "data/cifar-100", "", 0},
        {"", "", "auto", "data/cifar-100", "run.json", 0},
        {"", "", "synthetic", "data/cifar-100", "", 0},
        {"", "", "auto", "", "", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        md_options o;
        md_options_defaults(&o);
        snprintf(o.model, sizeof o.model, "%s", cases[i].model);
        snprintf(o.models, sizeof o.models, "%s", cases[i].models);
        snprintf(o.dataset, sizeof o.dataset, "%s", cases[i].dataset);
        snprintf(o.data_dir, sizeof o.data_dir, "%s", cases[i].data_dir);
        snprintf(o.config, sizeof o.config, "%s", cases[i].config);
        cr_expect_eq(md_diagnostics_wanted(&o), cases[i].want, "case %zu: model '%s' models '%s' dataset %s dir '%s'",
                     i, cases[i].model, cases[i].models, cases[i].dataset, cases[i].data_dir);
    }
}

Test(seeds, models_list_errors)
{
    static const struct { const char *args, *needle; } cases[] = {
        {"--device cpu --quiet --models base_multi_channel,,custom_cnn", "--models 'base_multi_channel,,custom_cnn': empty name"},
        {"--device cpu --quiet --models custom_cnn,", "empty name"},
        {"--device cpu --quiet --models custom_cnn,custom_cnn", "--models: 'custom_cnn' is listed twice"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out, *err;
        int rc = th_run(cases[i].args, &out, &err);
        cr_expect_eq(rc, 2, "%s: exit %d, stderr %s", cases[i].args, rc, err);
        cr_expect(strstr(err, cases[i].needle), "%s: stderr '%s' lacks '%s'", cases[i].args, err, cases[i].needle);
        free(out);
        free(err);
    }
}

/* Without CIFAR-100 where asked, the run says where it goes, uses synthetic
 * data, and still gives every model its report section and a comparison row. */
Test(seeds, diagnostics_run_without_cifar_uses_synthetic, .timeout = 120)
{
    char *dir = th_tmpdir();
    char args[2048];
    snprintf(args, sizeof args,
             "--device cpu --data-dir %s/cifar-100 --models base_multi_channel,custom_cnn --reduce-architecture "
             "--epochs 0 --bench-iters 2 --warmup-iters 1 --batch-size 2 --checkpoint-dir %s/ckpt",
             dir, dir);
    char *out, *err;
    cJSON *r = th_run_report(dir, args, 0, &out, &err);
    cr_expect(strstr(err, "CIFAR-100 not found in") && strstr(err, "cifar-100-binary.tar.gz") &&
                  strstr(err, "using synthetic CIFAR-shaped data"),
              "stderr: %s", err);
    cr_expect(strstr(out, "Diagnostics 1/2: base_multi_channel") && strstr(out, "Diagnostics 2/2: custom_cnn"),
              "%s", out);
    cr_expect(strstr(out, "== Comparison"), "%s", out);

    const cJSON *diag = cJSON_GetObjectItem(r, "diagnostics");
    cr_expect_str_eq(cJSON_GetObjectItem(diag, "data")->valuestring, "synthetic");
    const cJSON *models = cJSON_GetObjectItem(r, "models");
    cr_assert_eq(cJSON_GetArraySize(models), 2);
    cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(models, 0), "name")->valuestring, "base_multi_channel");
    cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(models, 1), "name")->valuestring, "custom_cnn");
    const cJSON *rows = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "comparison"), "rows");
    cr_assert_eq(cJSON_GetArraySize(rows), 2);
    for (int i = 0; i < 2; i++) {
        const cJSON *row = cJSON_GetArrayItem(rows, i);
        cr_expect_str_eq(cJSON_GetObjectItem(row, "status")->valuestring, "ok");
        cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(row, "peak_memory_bytes")));
    }
    cJSON_Delete(r);
    free(out);
    free(err);
    th_tmpdir_free(dir);
}

/* A short real run: the trained model's figures reach the comparison, and
 * the fusion weights (weighted_add) are in the report per epoch and move. */
Test(seeds, diagnostics_run_reports_integration_weights, .timeout = 120)
{
    char *dir = th_tmpdir();
    char args[2048];
    snprintf(args, sizeof args,
             "--device cpu --quiet --dataset synthetic --models base_multi_channel --reduce-architecture --epochs 2 "
             "--steps 3 --batch-size 8 --max-samples 24 --val-split 0.01 --bench-iters 2 --warmup-iters 1 "
             "--checkpoint-dir %s/ckpt",
             dir);
    cJSON *r = th_run_report(dir, args, 0, NULL, NULL);
    const cJSON *m = cJSON_GetArrayItem(cJSON_GetObjectItem(r, "models"), 0);
    cr_assert(m != NULL);
    cr_expect_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "model"), "parameters")->valuedouble, 150822);
    const cJSON *diags = cJSON_GetObjectItem(cJSON_GetObjectItem(m, "training"), "diagnostics");
    cr_assert_eq(cJSON_GetArraySize(diags), 2, "one diagnostics entry per epoch");
    double w[2][2];
    for (int e = 0; e < 2; e++) {
        const cJSON *iw = cJSON_GetObjectItem(cJSON_GetArrayItem(diags, e), "integration_weights");
        const cJSON *fw = cJSON_GetObjectItem(iw, "fusion.weight");
        cr_assert_eq(cJSON_GetArraySize(fw), 2, "epoch %d: fusion.weight has colour and brightness weights", e + 1);
        for (int k = 0; k < 2; k++) w[e][k] = cJSON_GetArrayItem(fw, k)->valuedouble;
    }
    cr_expect(w[0][0] != w[1][0] || w[0][1] != w[1][1], "the fusion weights did not move: %g %g", w[0][0], w[0][1]);
    const cJSON *row = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "comparison"), "rows"), 0);
    cr_expect_eq(cJSON_GetObjectItem(row, "parameters")->valuedouble, 150822);
    cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(row, "val_accuracy")));
    cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(row, "samples_per_s")));
    cr_expect_gt(cJSON_GetObjectItem(row, "peak_memory_bytes")->valuedouble, 0);
    cJSON_Delete(r);
    th_tmpdir_free(dir);
}

/* --models names the models even when the run config holds an inline one. */
Test(seeds, models_win_over_an_inline_config_model, .timeout = 60)
{
    char *dir = th_tmpdir();
    char *cfg = th_write(dir, "run.json",
                         "{\"model\": {\"name\": \"inline_tiny\", \"num_classes\": 10,"
                         " \"inputs\": [{\"name\": \"image\", \"shape\": [3, 32, 32]}],"
                         " \"layers\": [{\"type\": \"global_avgpool\"}, {\"type\": \"linear\", \"out\": 10}]},"
                         " \"dataset\": \"synthetic\", \"epochs\": 0}");
    char args[3000];
    snprintf(args, sizeof args,
             "--device cpu --quiet --config %s --models base_multi_channel --reduce-architecture --batch-size 2 "
             "--bench-iters 1 --warmup-iters 1",
             cfg);
    cJSON *r = th_run_report(dir, args, 0, NULL, NULL);
    const cJSON *m = cJSON_GetArrayItem(cJSON_GetObjectItem(r, "models"), 0);
    cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "model"), "name")->valuestring, "base_multi_channel");
    cJSON_Delete(r);
    free(cfg);
    th_tmpdir_free(dir);
}

/* ---- the diagnostics run as a report: per-model advice, --ci, HTML ----------------- */

/* Two tiny models on 8x8 colour images, `classes` classes each, `width`
 * filters: fast enough to train a few steps in every test. */
static char *tiny(const char *dir, const char *name, int classes, int width)
{
    char text[1024], file[64];
    snprintf(text, sizeof text,
             "{\"name\": \"%s\", \"num_classes\": %d, \"inputs\": [{\"name\": \"image\", \"shape\": [3, 8, 8]}],"
             " \"layers\": [{\"name\": \"conv1\", \"type\": \"conv2d\", \"out\": %d, \"kernel\": 3, \"padding\": 1},"
             " {\"name\": \"relu1\", \"type\": \"relu\"}, {\"name\": \"gap\", \"type\": \"global_avgpool\"},"
             " {\"name\": \"fc\", \"type\": \"linear\", \"out\": \"$num_classes\"}]}",
             name, classes, width);
    snprintf(file, sizeof file, "%s.json", name);
    return th_write(dir, file, text);
}

#define TINY_RUN                                                                                                   \
    "--device cpu --threads 1 --dataset synthetic --epochs 1 --steps 2 --max-samples 64 --batch-size 8 "          \
    "--bench-iters 2 --warmup-iters 1 "

static int count(const char *hay, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(hay, needle); p; p = strstr(p + 1, needle)) n++;
    return n;
}

/* Each model's recommendations come from its own benchmark (JSON, text); the
 * text leaves out the layer tables and ends with a comparison that fits 100
 * columns; the HTML has the comparison charts and a section per model. */
Test(seeds, diagnostics_report_per_model, .timeout = 120)
{
    char *dir = th_tmpdir();
    char *a = tiny(dir, "tiny_a", 10, 4), *b = tiny(dir, "tiny_b", 10, 8);
    char args[4096], html[1100];
    snprintf(html, sizeof html, "%s/r.html", dir);
    snprintf(args, sizeof args, TINY_RUN "--checkpoint-dir %s/ck --models %s,%s --html %s", dir, a, b, html);
    char *out, *err;
    cJSON *r = th_run_report(dir, args, 0, &out, &err);
    const cJSON *models = cJSON_GetObjectItem(r, "models");
    cr_assert_eq(cJSON_GetArraySize(models), 2);
    for (int i = 0; i < 2; i++) {
        const cJSON *m = cJSON_GetArrayItem(models, i);
        cr_expect(cJSON_IsArray(cJSON_GetObjectItem(m, "recommendations")), "model %d has no recommendations", i);
        cr_expect(cJSON_IsObject(cJSON_GetObjectItem(m, "benchmark")));
    }
    cr_expect_null(cJSON_GetObjectItem(r, "recommendations"), "the run's advice is per model");
    double run_peak = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "memory"), "device_peak_bytes")->valuedouble;
    for (int i = 0; i < 2; i++) {
        const cJSON *mm = cJSON_GetObjectItem(cJSON_GetArrayItem(models, i), "memory");
        cr_expect_geq(run_peak, cJSON_GetObjectItem(mm, "device_peak_bytes")->valuedouble, "the run's peak is the highest");
    }
    cr_expect_null(strstr(out, "run with --benchmark"), "%s", out);
    cr_expect_null(strstr(out, "relu1"), "a layer table was printed:\n%s", out);
    cr_expect_eq(count(out, "✅ Created tiny_"), 2, "%s", out);
    /* the comparison comes last, after the per-model recommendations */
    const char *cmp = strstr(out, "== Comparison"), *rec = strstr(out, "== Recommendations");
    cr_assert(cmp && rec && rec < cmp, "%s", out);
    cr_expect(strstr(cmp, "tiny_a") && strstr(cmp, "tiny_b") && strstr(cmp, "p50 ms") && strstr(cmp, "most accurate:"),
              "%s", cmp);
    for (const char *l = cmp; *l;) {
        const char *e = strchr(l, '\n');
        size_t len = e ? (size_t)(e - l) : strlen(l);
        size_t cols = 0;
        for (size_t k = 0; k < len; k++) cols += ((unsigned char)l[k] & 0xC0) != 0x80;
        cr_expect_leq(cols, 100, "line wider than 100 columns: %.*s", (int)len, l);
        l += len + (e ? 1 : 0);
    }
    const cJSON *row = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "comparison"), "rows"), 0);
    cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(row, "inference_latency_ms")));
    cr_expect(cJSON_IsNumber(cJSON_GetObjectItem(row, "recommendations")));

    FILE *f = fopen(html, "rb");
    cr_assert(f != NULL, "no HTML report");
    static char page[1 << 21];
    size_t n = fread(page, 1, sizeof page - 1, f);
    fclose(f);
    page[n] = '\0';
    cr_expect(strstr(page, "<section id=\"comparison\">"), "no comparison section");
    const char *charts = strstr(page, "id=\"comparison-charts\"");
    cr_assert(charts, "no comparison charts");
    cr_expect(strstr(charts, "Validation accuracy") && strstr(charts, "Training throughput") &&
                  strstr(charts, "Inference latency") && strstr(charts, "Peak device memory"),
              "a comparison chart is missing");
    cr_expect_geq(count(page, "class=\"bar\""), 8, "four charts with a bar per model");
    cr_expect(strstr(page, "id=\"model-1\"") && strstr(page, "id=\"model-2\""), "no per-model sections");
    const char *m2 = strstr(page, "id=\"model-2\"");
    cr_expect(m2 && strstr(m2, "loss per epoch") && strstr(m2, "accuracy per epoch") && strstr(m2, "Recommendations"),
              "model 2's section lacks its curves or recommendations");
    cJSON_Delete(r);
    free(out);
    free(err);
    free(a);
    free(b);
    th_tmpdir_free(dir);
}

/* --ci in the diagnostics run: the thresholds apply per model; a threshold
 * no model meets fails the run (exit 7) naming each model, in the JUnit
 * file too; one every model meets passes. */
Test(seeds, diagnostics_ci_per_model, .timeout = 120)
{
    char *dir = th_tmpdir();
    char *a = tiny(dir, "tiny_a", 10, 4), *b = tiny(dir, "tiny_b", 10, 8);
    char args[4096], junit[1100];
    snprintf(junit, sizeof junit, "%s/j.xml", dir);
    snprintf(args, sizeof args, TINY_RUN "--checkpoint-dir %s/ck --ci --models %s,%s --expect-min-throughput 1e12 --junit %s",
             dir, a, b, junit);
    char *out, *err;
    cJSON *r = th_run_report(dir, args, 7, &out, &err);
    cr_expect(strstr(err, "--ci: ") && strstr(err, "tiny_a.json: training throughput") &&
                  strstr(err, "tiny_b.json: training throughput"),
              "stderr: %s", err);
    cr_expect(strstr(out, "== CI") && strstr(out, "FAILED"), "%s", out);
    for (int i = 0; i < 2; i++) {
        const cJSON *m = cJSON_GetArrayItem(cJSON_GetObjectItem(r, "models"), i);
        cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "ci"), "throughput"),
                                                    "passed")));
        const cJSON *row = cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "comparison"), "rows"), i);
        cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(row, "ci_passed")));
    }
    cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "status"), "result")->valuestring, "threshold");
    FILE *f = fopen(junit, "rb");
    cr_assert(f != NULL, "no JUnit file");
    static char xml[1 << 16];
    size_t n = fread(xml, 1, sizeof xml - 1, f);
    fclose(f);
    xml[n] = '\0';
    cr_expect_eq(count(xml, "<testcase "), 7, "run + 3 per model:\n%s", xml);
    cr_expect_eq(count(xml, "<failure "), 2, "%s", xml);
    cr_expect(strstr(xml, "classname=\"mpsdiag.") && strstr(xml, "tiny_b.json\" name=\"throughput\""), "%s", xml);
    cJSON_Delete(r);
    free(out);
    free(err);

    snprintf(args, sizeof args, TINY_RUN "--checkpoint-dir %s/ck2 --ci --models %s,%s --expect-min-throughput 0.001", dir, a,
             b);
    r = th_run_report(dir, args, 0, &out, &err);
    cr_expect(strstr(out, "== CI") && !strstr(out, "FAILED"), "%s", out);
    cJSON_Delete(r);
    free(out);
    free(err);
    free(a);
    free(b);
    th_tmpdir_free(dir);
}

/* "Most accurate" only among models of the same task, number of classes
 * and data; otherwise the run says they are not comparable. */
Test(seeds, most_accurate_needs_the_same_classes, .timeout = 120)
{
    char *dir = th_tmpdir();
    char *a = tiny(dir, "tiny_a", 10, 4), *b = tiny(dir, "tiny_b", 10, 8), *c = tiny(dir, "tiny_c", 3, 4);
    char args[4096];
    snprintf(args, sizeof args, TINY_RUN "--checkpoint-dir %s/ck --models %s,%s", dir, a, c);
    char *out, *err;
    cJSON *r = th_run_report(dir, args, 0, &out, &err);
    const cJSON *cmp = cJSON_GetObjectItem(r, "comparison");
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(cmp, "most_accurate")));
    const cJSON *why = cJSON_GetObjectItem(cmp, "not_comparable");
    cr_assert(cJSON_IsString(why));
    cr_expect(strstr(why->valuestring, "numbers of classes") && strstr(why->valuestring, "tiny_a 10") &&
                  strstr(why->valuestring, "tiny_c 3"),
              "%s", why->valuestring);
    cr_expect(strstr(out, "most accurate: not comparable, different numbers of classes"), "%s", out);
    cJSON_Delete(r);
    free(out);
    free(err);

    snprintf(args, sizeof args, TINY_RUN "--checkpoint-dir %s/ck2 --models %s,%s", dir, a, b);
    r = th_run_report(dir, args, 0, &out, &err);
    cmp = cJSON_GetObjectItem(r, "comparison");
    cr_expect(cJSON_IsString(cJSON_GetObjectItem(cmp, "most_accurate")), "same classes and data: comparable");
    cr_expect(cJSON_IsNull(cJSON_GetObjectItem(cmp, "not_comparable")));
    cJSON_Delete(r);
    free(out);
    free(err);
    free(a);
    free(b);
    free(c);
    th_tmpdir_free(dir);
}
