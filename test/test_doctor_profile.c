/* test_doctor_profile.c - --profile and --leak-check (docs/doctor.md): the
 * per-layer rows and the leak verdict (pure), the energy readers against a
 * fake powercap folder and their reasons when nothing can be read, the
 * per-layer FLOPs and bytes of the model, the profile's advice, and whole
 * runs: a --profile report that validates, an injected leak that must be
 * flagged (exit 7) and a clean run that must not. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/json.h"
#include "core/mem.h"
#include "core/wrap.h"
#include "diag/energy.h"
#include "diag/html.h"
#include "diag/profile.h"
#include "diag/recommend.h"
#include "helpers.h"
#include "json_schema.h"
#include "nn/model.h"

#define REPORT_SCHEMA "docs/schema/report.schema.json"

/* ---- rows ---------------------------------------------------------------------- */

Test(profile, block_names_and_rows_sorted_by_time)
{
    char b[128];
    cr_assert_str_eq(md_prof_block_of("layer1.0.conv1", b, sizeof b), "layer1.0");
    cr_assert_str_eq(md_prof_block_of("blocks.11.attn.qkv", b, sizeof b), "blocks.11");
    cr_assert_str_eq(md_prof_block_of("conv1", b, sizeof b), "conv1");
    cr_assert_str_eq(md_prof_block_of("color.stem.conv", b, sizeof b), "color.stem.conv");
    cr_assert_str_eq(md_prof_block_of("x1.2", b, sizeof b), "x1.2");
    struct md_prof_layer in[5] = {
        {"conv1", "conv2d", 1.0, 2.0, 100, 10, 1},
        {"layer1.0.conv1", "conv2d", 2.0, 2.0, 200, 20, 1},
        {"layer1.0.bn1", "batchnorm", 0.5, 0.5, 0, 30, 1},
        {"layer1.1.conv1", "conv2d", 0.1, 0.1, 10, 1, 1},
        {"fc", "linear", 0.2, 0.3, 5, 5, 1},
    }, out[5];
    int n = md_prof_rows(in, 5, 0, out);
    cr_assert_eq(n, 5);
    cr_assert_str_eq(out[0].name, "layer1.0.conv1");
    cr_assert_str_eq(out[4].name, "layer1.1.conv1");
    n = md_prof_rows(in, 5, 1, out);
    cr_assert_eq(n, 4, "conv1, layer1.0 (2 layers), layer1.1, fc: %d rows", n);
    cr_assert_str_eq(out[0].name, "layer1.0");
    cr_assert_eq(out[0].layers, 2);
    cr_assert_float_eq(out[0].fwd_ms + out[0].bwd_ms, 5.0, 1e-12);
    cr_assert_float_eq(out[0].bytes, 50, 1e-12);
    cr_assert_str_eq(out[1].name, "conv1");
    cr_assert_str_eq(out[1].type, "conv2d");
    /* rates: 100 FLOPs in 3 ms; half of a peak twice that */
    struct md_prof_rates rt;
    double rate = 100 / 3e-3 / 1e9;
    md_prof_rates_of(&out[1], 2 * rate, 0, &rt);
    cr_assert_float_eq(rt.gflops, rate, 1e-15);
    cr_assert_float_eq(rt.frac_flops, 0.5, 1e-9);
    cr_assert(isnan(rt.frac_bytes), "no copy rate: no fraction");
}

/* ---- leak verdict --------------------------------------------------------------- */

Test(profile, leak_verdict_flags_growth_past_the_bound_only)
{
    const double MiB = 1048576.0;
    double flat[10], grow[10], noise[10];
    for (int i = 0; i < 10; i++) {
        flat[i] = 100 * MiB;
        grow[i] = 100 * MiB + (i > 2 ? (i - 2) * 2 * MiB : 0) + (i < 2 ? 50 * MiB : 0); /* warm-up high too */
        noise[i] = 100 * MiB + (i % 2 ? 0.4 * MiB : 0);
    }
    struct md_leak_verdict v;
    md_leak_judge(flat, 10, MD_LEAK_TOOL_FLOOR, MD_LEAK_TOOL_REL, &v);
    cr_assert(v.judged && !v.flagged);
    cr_assert_eq(v.warmup, 2);
    md_leak_judge(noise, 10, MD_LEAK_TOOL_FLOOR, MD_LEAK_TOOL_REL, &v);
    cr_assert(v.judged && !v.flagged, "growth %g within the bound %g", v.growth, v.bound);
    md_leak_judge(grow, 10, MD_LEAK_TOOL_FLOOR, MD_LEAK_TOOL_REL, &v);
    cr_assert(v.judged && v.flagged);
    cr_assert_float_eq(v.per_step, 2 * MiB, 1.0, "per step %g", v.per_step);
    cr_assert_float_eq(v.growth, 14 * MiB, 1.0);
    /* the OS bound is wider: the same growth at 1 MiB a step passes there only when below 8 MiB */
    for (int i = 0; i < 10; i++) grow[i] = 100 * MiB + i * 0.5 * MiB;
    md_leak_judge(grow, 10, MD_LEAK_OS_FLOOR, MD_LEAK_OS_REL, &v);
    cr_assert(v.judged && !v.flagged, "3.5 MiB within the OS bound of %g", v.bound);
    md_leak_judge(grow, 10, MD_LEAK_TOOL_FLOOR, MD_LEAK_TOOL_REL, &v);
    cr_assert(v.flagged, "3.5 MiB past the tool's bound of %g", v.bound);
    md_leak_judge(flat, 4, MD_LEAK_TOOL_FLOOR, MD_LEAK_TOOL_REL, &v);
    cr_assert(!v.judged, "4 steps are too few");
    double unknown[8] = {0};
    md_leak_judge(unknown, 8, MD_LEAK_OS_FLOOR, MD_LEAK_OS_REL, &v);
    cr_assert(!v.judged, "a figure nobody reported is not judged");
}

/* ---- energy ---------------------------------------------------------------------- */

static void put(const char *dir, const char *zone, const char *file, const char *text)
{
    char p[600];
    snprintf(p, sizeof p, "%s/%s", dir, zone);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/%s/%s", dir, zone, file);
    FILE *f = fopen(p, "w");
    cr_assert_not_null(f, "%s", p);
    fputs(text, f);
    fclose(f);
}

Test(profile, rapl_reads_packages_and_undoes_a_wrap)
{
    char *root = th_tmpdir();
    put(root, "intel-rapl:0", "name", "package-0\n");
    put(root, "intel-rapl:0", "energy_uj", "1000000\n");
    put(root, "intel-rapl:0", "max_energy_range_uj", "2000000\n");
    put(root, "intel-rapl:0:0", "name", "core\n"); /* a part of package 0: not added */
    put(root, "intel-rapl:0:0", "energy_uj", "999\n");
    put(root, "intel-rapl:1", "name", "package-1\n");
    put(root, "intel-rapl:1", "energy_uj", "5000000\n");
    put(root, "intel-rapl:1", "max_energy_range_uj", "262143328850\n");
    put(root, "intel-rapl:2", "name", "psys\n"); /* the platform, packages included: not added */
    put(root, "intel-rapl:2", "energy_uj", "7\n");
    struct md_energy e;
    md_energy_open_rapl(&e, root);
    cr_assert_eq(e.kind, MD_ENERGY_RAPL, "%s", e.reason);
    cr_assert_eq(e.nzones, 2);
    cr_assert(strstr(e.source, "package-0") && strstr(e.source, "package-1"), "%s", e.source);
    struct md_energy_reading a, b;
    cr_assert_eq(md_energy_read(&e, &a), 0);
    put(root, "intel-rapl:0", "energy_uj", "500000\n"); /* wrapped: 1.0 J to the top, then 0.5 J */
    put(root, "intel-rapl:1", "energy_uj", "7500000\n");
    cr_assert_eq(md_energy_read(&e, &b), 0);
    cr_assert_float_eq(md_energy_joules(&e, &a, &b), 1.5 + 2.5, 1e-9, "%g J", md_energy_joules(&e, &a, &b));
    md_energy_close(&e);
    th_tmpdir_free(root);
}

Test(profile, energy_says_why_not)
{
    struct md_energy e;
    md_energy_open_rapl(&e, "/nonexistent/powercap");
    cr_assert_eq(e.kind, MD_ENERGY_NONE);
    cr_assert(strstr(e.reason, "/nonexistent/powercap"), "%s", e.reason);
    char *root = th_tmpdir();
    md_energy_open_rapl(&e, root);
    cr_assert_eq(e.kind, MD_ENERGY_NONE);
    cr_assert(strstr(e.reason, "no package zone"), "%s", e.reason);
    if (geteuid() != 0) { /* root reads any file */
        put(root, "intel-rapl:0", "energy_uj", "1\n");
        char p[600];
        snprintf(p, sizeof p, "%s/intel-rapl:0/energy_uj", root);
        chmod(p, 0);
        md_energy_open_rapl(&e, root);
        cr_assert_eq(e.kind, MD_ENERGY_NONE);
        cr_assert(strstr(e.reason, "readable by root only"), "%s", e.reason);
        chmod(p, 0644);
    }
    th_tmpdir_free(root);
    setenv("MPSDIAG_NVML_LIB", "/nonexistent/libnvidia-ml.so.1", 1);
    md_energy_open(&e, MD_BACKEND_CUDA, 0, "NVIDIA H100");
    unsetenv("MPSDIAG_NVML_LIB");
    cr_assert_eq(e.kind, MD_ENERGY_NONE);
    cr_assert(strstr(e.reason, "NVML") && strstr(e.reason, "cannot be loaded"), "%s", e.reason);
    md_energy_close(&e);
    md_energy_open(&e, MD_BACKEND_METAL, 0, "Apple M2");
    cr_assert_eq(e.kind, MD_ENERGY_NONE);
    cr_assert(strstr(e.reason, "root"), "%s", e.reason);
}

/* ---- per-layer FLOPs and bytes ------------------------------------------------------ */

/* The model of a config text, with the default options. */
static md_model *model_in(const char *cfg, md_layout layout)
{
    cJSON *j = NULL;
    cr_assert_eq(md_json_parse(cfg, "t.json", &j), MD_OK, "%s", md_errmsg());
    struct md_model_opts o;
    md_model_opts_default(&o);
    o.layout = layout;
    md_model *m = NULL;
    cr_assert_eq(md_model_load("t.json", j, &o, &m), MD_OK, "%s", md_errmsg());
    cJSON_Delete(j);
    return m;
}

static md_model *model_of(const char *cfg) { return model_in(cfg, MD_NCHW); }

Test(profile, layer_flops_and_bytes)
{
    static const char cfg[] =
        "{\"name\": \"t\", \"num_classes\": 3, \"inputs\": [{\"name\": \"x\", \"shape\": [4, 1, 1]}],\n"
        " \"layers\": [{\"name\": \"fc1\", \"type\": \"linear\", \"out\": 5},\n"
        "            {\"name\": \"fc2\", \"type\": \"linear\", \"out\": 3}]}";
    md_model *m = model_of(cfg);
    cr_assert_eq(md_model_num_layers(m), 2);
    double sum = 0;
    for (int i = 0; i < 2; i++) sum += md_model_layer_flops(m, i);
    cr_assert_float_eq(sum, md_model_flops_fwd(m), 1e-9, "the layers' FLOPs add up to the model's");
    cr_assert_gt(md_model_layer_flops(m, 1), 0);
    /* fc2, batch 2, fp32: reads 2 x 5, writes 2 x 3, weights 5 x 3 + 3 */
    cr_assert_float_eq(md_model_layer_bytes(m, 1, 2), ((2 * 5 + 2 * 3) + (15 + 3)) * 4.0, 1e-9, "%g",
                       md_model_layer_bytes(m, 1, 2));
    md_model_free(m);
}

/* ---- advice ---------------------------------------------------------------------------- */

/* A batch norm counts its passes: x twice each way, dx written, dy twice (and y twice
 * more for its ReLU's mask, unless a fused pool recomputes it from x); channels-last,
 * a fused pool's kept routing (1.25 of y) is written once and read in place of x
 * by the sums (with dy), its indices again by dx's pass; and there the batch norm
 * writes the first convolution's filter gradient instead of dx (no dx pass: x
 * twice, both forward), so that convolution's backward reads and writes nothing
 * (its input once more, in the batch norm's patches). */
Test(profile, batchnorm_step_bytes_count_its_passes)
{
    static const char cfg[] =
        "{\"name\": \"t\", \"num_classes\": 8, \"inputs\": [{\"name\": \"x\", \"shape\": [1, 4, 4]}],\n"
        " \"layers\": [{\"name\": \"conv\", \"type\": \"conv2d\", \"out\": 2, \"kernel\": 3, \"padding\": 1,\n"
        "              \"bias\": false},\n"
        "             {\"name\": \"bn\", \"type\": \"batchnorm\"}, {\"name\": \"relu\", \"type\": \"relu\"},\n"
        "             {\"name\": \"pool\", \"type\": \"maxpool\", \"kernel\": 2},\n"
        "             {\"name\": \"flat\", \"type\": \"flatten\"}, {\"name\": \"fc\", \"type\": \"linear\", \"out\": 8}]}";
    md_model *m = model_of(cfg);
    cr_assert_str_eq(md_model_layer_type(m, 1), "batchnorm");
    /* batch 2, fp32: x and y 2 x 16 elements a sample, gamma and beta 2 + 2 */
    double params = 4 * 4.0 * 3;
    cr_assert_float_eq(md_model_layer_step_bytes(m, 1, 2), (32 * 5 + 32 * 5) * 4.0 * 2 + params, 1e-9, "%g",
                       md_model_layer_step_bytes(m, 1, 2));
    /* the convolution keeps the default: 3 passes of each, 3 of its 18 weights */
    cr_assert_float_eq(md_model_layer_step_bytes(m, 0, 2), (16 * 3 + 32 * 3) * 4.0 * 2 + 18 * 4.0 * 3, 1e-9);
    /* the CPU runs the pool inside the batch norm: bound there, y and dy are
     * pooled (2 x 2 x 2 a sample) and the ReLU's mask comes from x */
    md_device *dev;
    struct md_device_opts dopts = {.threads = 1};
    cr_assert_eq(md_device_open(md_backend_find("cpu"), 0, &dopts, &dev), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_model_bind(m, dev, 2), MD_OK, "%s", md_errmsg());
    cr_assert_float_eq(md_model_layer_step_bytes(m, 1, 2), (32 * 5 + 8 * 3) * 4.0 * 2 + params, 1e-9, "%g",
                       md_model_layer_step_bytes(m, 1, 2));
    md_model_free(m);
    m = model_in(cfg, MD_NHWC);
    cr_assert_eq(md_model_bind(m, dev, 2), MD_OK, "%s", md_errmsg());
    cr_assert_float_eq(md_model_layer_step_bytes(m, 1, 2), (32 * 2 + 8 * 5.75) * 4.0 * 2 + params, 1e-9, "%g",
                       md_model_layer_step_bytes(m, 1, 2));
    cr_assert_float_eq(md_model_layer_step_bytes(m, 0, 2), (16 * 2 + 32 * 1) * 4.0 * 2 + 18 * 4.0 * 3, 1e-9, "%g",
                       md_model_layer_step_bytes(m, 0, 2));
    md_model_free(m);
    md_device_close(dev);
}

Test(profile, advice_names_the_slowest_layer_and_a_leak)
{
    struct md_rec_in in;
    memset(&in, 0, sizeof in);
    in.kind = MD_BACKEND_CPU;
    in.n_prof = 2;
    snprintf(in.prof[0].name, sizeof in.prof[0].name, "conv1");
    in.prof[0].share = 0.31;
    in.prof[0].frac_flops = 0.12;
    in.prof[0].frac_bytes = 0.70;
    snprintf(in.prof[1].name, sizeof in.prof[1].name, "fc");
    in.prof[1].share = 0.05; /* below the share that is named */
    in.prof[1].frac_flops = 0.1;
    in.prof[1].frac_bytes = 0.1;
    struct md_rec r[MD_REC_MAX];
    int n = md_recommend(&in, r, MD_REC_MAX);
    int named = 0;
    for (int i = 0; i < n; i++) {
        if (strcmp(r[i].topic, "slowest layer")) continue;
        named++;
        cr_assert(strstr(r[i].advice, "conv1 takes 31% of the step at 12% of peak"), "%s", r[i].advice);
        cr_assert(strstr(r[i].advice, "memory traffic"), "70%% of the copy rate: bound by bytes: %s", r[i].advice);
    }
    cr_assert_eq(named, 1);
    snprintf(in.leak_measure, sizeof in.leak_measure, "mpsdiag (live)");
    in.leak_per_step = 2 * 1048576.0;
    in.leak_growth = 10 * 1048576.0;
    in.leak_steps = 8;
    n = md_recommend(&in, r, MD_REC_MAX);
    cr_assert_str_eq(r[0].topic, "memory leak");
    cr_assert(strstr(r[0].advice, "2.00 MiB per training step"), "%s", r[0].advice);
}

/* ---- whole runs -------------------------------------------------------------------------- */

static const char tiny_model[] =
    "{\"name\": \"tiny\", \"num_classes\": 10, \"inputs\": [{\"name\": \"image\", \"shape\": [1, 28, 28]}],\n"
    " \"layers\": [\n"
    "  {\"name\": \"conv1\", \"type\": \"conv2d\", \"out\": 8, \"kernel\": 3, \"padding\": 1},\n"
    "  {\"name\": \"relu1\", \"type\": \"relu\"},\n"
    "  {\"name\": \"pool1\", \"type\": \"maxpool\", \"kernel\": 4},\n"
    "  {\"name\": \"flatten\", \"type\": \"flatten\"},\n"
    "  {\"name\": \"fc\", \"type\": \"linear\", \"out\": \"$num_classes\"}]}\n";

/* Runs `env` + the binary + `args` (each %s: the folder) with --report; *report gets the report. */
static int run_env(const char *dir, const char *env, const char *args, char **out, char **err, cJSON **report)
{
    char a[2048], cmd[4096];
    snprintf(a, sizeof a, args, dir);
    snprintf(cmd, sizeof cmd, "%s %s --device cpu --threads 1 --dataset synthetic --model %s/tiny.json "
                              "--max-samples 128 --batch-size 16 --bench-iters 2 --warmup-iters 1 %s "
                              "--report %s/r.json >%s/out 2>%s/err </dev/null",
             env, th_bin(), dir, a, dir, dir, dir);
    char *o = NULL, *e = NULL;
    int rc = th_sh(cmd, &o, &e);
    free(o);
    free(e);
    char p[600];
    snprintf(p, sizeof p, "%s/out", dir);
    *out = th_slurp(p, NULL);
    snprintf(p, sizeof p, "%s/err", dir);
    *err = th_slurp(p, NULL);
    snprintf(p, sizeof p, "%s/r.json", dir);
    cr_assert_eq(md_json_load_file(p, report), MD_OK, "no report (exit %d): %s", rc, *err);
    return rc;
}

static void assert_valid(const cJSON *doc)
{
    cJSON *s = NULL;
    cr_assert_eq(md_json_load_file(REPORT_SCHEMA, &s), MD_OK);
    char err[600];
    int ok = th_schema_validate(s, doc, err, sizeof err);
    cJSON_Delete(s);
    cr_assert(ok, "the report does not validate: %s", err);
}

/* The HTML page of the report holds every text in `want` (NULL-terminated). */
static void assert_html(const cJSON *r, const char *const *want)
{
    char *html = NULL;
    size_t len = 0;
    cr_assert_eq(md_html_render(r, &html, &len), MD_OK, "%s", md_errmsg());
    for (const char *const *w = want; *w; w++) cr_assert(strstr(html, *w), "the HTML page lacks '%s'", *w);
    md_free(html);
}

static const cJSON *path(const cJSON *o, const char *a, const char *b)
{
    o = cJSON_GetObjectItem(o, a);
    return b ? cJSON_GetObjectItem(o, b) : o;
}

Test(profile, profile_run_reports_layers_memory_and_energy, .timeout = 60)
{
    char *dir = th_tmpdir();
    free(th_write(dir, "tiny.json", tiny_model));
    char *out, *err;
    cJSON *r;
    int rc = run_env(dir, "MPSDIAG_POWERCAP_ROOT=/nonexistent/powercap", "--profile --leak-check 6", &out, &err, &r);
    cr_assert_eq(rc, 0, "%s", err);
    assert_valid(r);
    cr_assert_null(cJSON_GetObjectItem(r, "training"), "--profile alone trains nothing");
    const cJSON *p = cJSON_GetObjectItem(r, "profile");
    cr_assert(cJSON_IsObject(p));
    const cJSON *layers = cJSON_GetObjectItem(p, "layers"), *l;
    cr_assert_geq(cJSON_GetArraySize(layers), 3);
    double prev = 1e300, share = 0;
    int conv = 0;
    cJSON_ArrayForEach(l, layers) {
        double t = cJSON_GetObjectItem(l, "forward_ms")->valuedouble + cJSON_GetObjectItem(l, "backward_ms")->valuedouble;
        cr_assert_leq(t, prev, "slowest first");
        prev = t;
        share += cJSON_GetObjectItem(l, "share")->valuedouble;
        if (!strcmp(cJSON_GetObjectItem(l, "name")->valuestring, "conv1")) {
            conv = 1;
            cr_assert_gt(cJSON_GetObjectItem(l, "flops")->valuedouble, 0);
            cr_assert_gt(cJSON_GetObjectItem(l, "bytes")->valuedouble, 0);
        }
    }
    cr_assert(conv, "conv1 is profiled");
    cr_assert(share > 0.2 && share <= 1.0 + 1e-6, "shares sum to %g", share);
    cr_assert(cJSON_IsObject(path(p, "memory", "planned")));
    cr_assert_gt(path(path(p, "memory", "planned"), "params_bytes", NULL)->valuedouble, 0);
    cr_assert_gt(path(path(p, "memory", "process"), "rss_bytes", NULL)->valuedouble, 0);
    const cJSON *en = cJSON_GetObjectItem(p, "energy");
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(en, "available")));
    cr_assert(strstr(cJSON_GetObjectItem(en, "reason")->valuestring, "/nonexistent/powercap"));
    cr_assert(cJSON_IsFalse(path(p, "leak_check", "flagged")), "a clean run is not flagged: %s", out);
    cr_assert_eq(path(p, "leak_check", "steps")->valueint, 6);
    cr_assert(strstr(out, "== Profile") && strstr(out, "leak check") && strstr(out, "energy"), "%s", out);
    cr_assert(strstr(out, "not available: RAPL"), "%s", out);
    assert_html(r, (const char *const[]){"id=\"profile\"", "Time per layer", "conv1", "Energy not measured",
                                         "/nonexistent/powercap", "Memory side by side", "Leak check", NULL});
    for (char *line = strtok(out, "\n"); line; line = strtok(NULL, "\n"))
        cr_assert_leq(md_text_width(line, strlen(line)), 100, "line wider than 100 columns: %s", line);
    cJSON_Delete(r);
    free(out);
    free(err);
    th_tmpdir_free(dir);
}

Test(profile, injected_leak_is_flagged_and_fails_the_run, .timeout = 60)
{
    char *dir = th_tmpdir();
    free(th_write(dir, "tiny.json", tiny_model));
    char *out, *err;
    cJSON *r;
    int rc = run_env(dir, "MPSDIAG_TEST_LEAK=2M", "--leak-check 8", &out, &err, &r);
    cr_assert_eq(rc, 7, "exit %d: %s", rc, err);
    assert_valid(r);
    cr_assert(strstr(err, "--leak-check: memory grows by 2.00 MiB per step"), "%s", err);
    const cJSON *lc = path(cJSON_GetObjectItem(r, "profile"), "leak_check", NULL);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(lc, "flagged")));
    const cJSON *v = cJSON_GetArrayItem(cJSON_GetObjectItem(lc, "verdicts"), 0);
    cr_assert_str_eq(cJSON_GetObjectItem(v, "measure")->valuestring, "tool_current_bytes");
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(v, "flagged")));
    cr_assert_float_eq(cJSON_GetObjectItem(v, "per_step_bytes")->valuedouble, 2 * 1048576.0, 1.0);
    cr_assert_str_eq(path(cJSON_GetArrayItem(cJSON_GetObjectItem(r, "recommendations"), 0), "topic", NULL)->valuestring,
                     "memory leak");
    cr_assert_eq(path(r, "status", "exit_code")->valueint, 7);
    assert_html(r, (const char *const[]){"Memory grows", "grows", NULL});
    cJSON_Delete(r);
    free(out);
    free(err);
    /* the same run without the hook: not flagged, exit 0 */
    rc = run_env(dir, "", "--leak-check 8", &out, &err, &r);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    cr_assert(cJSON_IsFalse(path(path(r, "profile", "leak_check"), "flagged", NULL)), "%s", out);
    cJSON_Delete(r);
    free(out);
    free(err);
    th_tmpdir_free(dir);
}
