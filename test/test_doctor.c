/* test_doctor.c - the doctor (docs/doctor.md): --check passes on a healthy
 * CPU backend for a CNN, a two-input model, transformers and a regression
 * model; catches a CPU backend with one deliberately wrong kernel (forward
 * and backward) at the right layer and element; says which layers fell back;
 * exits 6; its report validates. --precision-audit: activations above 65504
 * overflow fp16 (the plan then says bf16), the plan file is written and read
 * back, a bad plan file is one line naming the file and the field, and a
 * training run says which plan entries it cannot honour. The
 * doctor_metal_sim suite also runs in build/metal-sim-tests, where "metal"
 * is the simulated kernels. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "app/job.h"
#include "backend/backend_impl.h"
#include "core/log.h"
#include "core/mem.h"
#include "diag/check.h"
#include "diag/html.h"
#include "helpers.h"
#include "helpers_job.h"
#include "json_schema.h"
#include "nn/model.h"

static struct md_check_opts opts_for(const char *model)
{
    struct md_check_opts o;
    memset(&o, 0, sizeof o);
    o.model = model;
    md_model_opts_default(&o.mopts);
    o.batch = 2;
    o.seed = 42;
    o.input_scale = 1.0;
    return o;
}

/* md_check_run of `model` on backend `dev_name` (fallback on) against ref; *out owned by the caller. */
static int check(const char *dev_name, const char *model, cJSON **out)
{
    struct md_device_opts d = {.threads = 1, .fallback = 1};
    md_device *dev = NULL, *ref = NULL;
    cr_assert_eq(md_device_open(md_backend_find(dev_name), 0, &d, &dev), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_device_open(md_backend_find("ref"), 0, &d, &ref), MD_OK, "%s", md_errmsg());
    struct md_check_opts o = opts_for(model);
    int failed = -1;
    md_status st = md_check_run(&o, dev, ref, out, &failed);
    cr_assert_eq(st, MD_OK, "%s: %s", model, md_errmsg());
    md_device_close(ref);
    md_device_close(dev);
    return failed;
}

static const cJSON *layer(const cJSON *ck, const char *name)
{
    const cJSON *L;
    cJSON_ArrayForEach(L, cJSON_GetObjectItem(ck, "layers"))
        if (strcmp(cJSON_GetObjectItem(L, "name")->valuestring, name) == 0) return L;
    cr_assert_fail("no layer %s in the check", name);
    return NULL;
}

static void expect_pass(const char *model, int inputs)
{
    cJSON *ck = NULL;
    int failed = check("cpu", model, &ck);
    char *txt = cJSON_PrintUnformatted(ck);
    cr_expect_eq(failed, 0, "%s: %s", model, txt);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(ck, "passed")));
    cr_expect_gt(cJSON_GetArraySize(cJSON_GetObjectItem(ck, "layers")), 3);
    cr_expect_gt(cJSON_GetArraySize(cJSON_GetObjectItem(ck, "params")), 3);
    md_model *m = NULL;
    struct md_model_opts mo;
    md_model_opts_default(&mo);
    cr_assert_eq(md_model_load(model, NULL, &mo, &m), MD_OK, "%s", md_errmsg());
    cr_expect_eq(md_model_num_inputs(m), inputs, "%s: the test means a model of %d inputs", model, inputs);
    md_model_free(m);
    free(txt);
    cJSON_Delete(ck);
}

Test(doctor, check_passes_on_a_healthy_cpu_cnn, .timeout = 60) { expect_pass("small_cnn", 1); }
Test(doctor, check_passes_on_a_two_input_model, .timeout = 60) { expect_pass("tiled_two_stream_tiny", 2); }
Test(doctor, check_passes_on_a_vision_transformer, .timeout = 60) { expect_pass("vit_tiny", 1); }
Test(doctor, check_passes_on_a_transformer_encoder, .timeout = 60) { expect_pass("transformer_encoder", 1); }
Test(doctor, check_passes_on_a_regression_model, .timeout = 60) { expect_pass("small_cnn_regress", 1); }

/* ---- a CPU backend with a wrong kernel ---- */

static struct md_backend_ops bad_ops;
static long bad_index; /* the output element made wrong */

/* conv forward, then 1e-2 added to one element of its output (every conv) */
static md_status bad_conv(md_device *dev, const struct md_conv2d_args *a)
{
    md_status st = md_cpu_backend_ops()->kernels.conv2d_fwd(dev, a);
    md_store_f(a->y, a->dtype, (size_t)bad_index, md_load_f(a->y, a->dtype, (size_t)bad_index) + 1e-2f);
    return st;
}

/* activation backward, then 1e-2 added to one element of dx */
static md_status bad_act_bwd(md_device *dev, const struct md_act_args *a)
{
    md_status st = md_cpu_backend_ops()->kernels.act_bwd(dev, a);
    md_store_f(a->dx, a->dtype, (size_t)bad_index, md_load_f(a->dx, a->dtype, (size_t)bad_index) + 1e-2f);
    return st;
}

static void use_bad_cpu(int conv)
{
    bad_ops = *md_cpu_backend_ops();
    if (conv) bad_ops.kernels.conv2d_fwd = bad_conv;
    else bad_ops.kernels.act_bwd = bad_act_bwd;
    md_backend_set_test_ops("cpu", &bad_ops);
}

Test(doctor, check_catches_a_wrong_conv_forward_at_its_layer_and_element, .timeout = 60)
{
    bad_index = 37;
    use_bad_cpu(1);
    cJSON *ck = NULL;
    int failed = check("cpu", "small_cnn", &ck);
    cr_expect_gt(failed, 0);
    cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(ck, "passed")));
    cr_expect_str_eq(cJSON_GetObjectItem(ck, "first_failure")->valuestring, "conv1");
    const cJSON *y = cJSON_GetObjectItem(layer(ck, "conv1"), "output");
    cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(y, "ok")));
    cr_expect_eq(cJSON_GetObjectItem(y, "first_index")->valuedouble, 37);
    double d = cJSON_GetObjectItem(y, "device_value")->valuedouble - cJSON_GetObjectItem(y, "reference_value")->valuedouble;
    cr_expect_float_eq(d, 1e-2, 1e-4, "the difference is the injected one: %g", d);
    /* each layer is fed the device's inputs: the layers after a wrong one are not blamed */
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(layer(ck, "bn1"), "ok")));
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(layer(ck, "relu1"), "ok")));
    cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(layer(ck, "conv2"), "ok")), "conv2 runs the wrong kernel too");
    md_backend_set_test_ops("cpu", NULL);
    cJSON_Delete(ck);
}

Test(doctor, check_catches_a_wrong_activation_gradient, .timeout = 60)
{
    bad_index = 5;
    use_bad_cpu(0);
    cJSON *ck = NULL;
    int failed = check("cpu", "small_cnn", &ck);
    cr_expect_gt(failed, 0);
    const cJSON *L = layer(ck, "relu1");
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(cJSON_GetObjectItem(L, "output"), "ok")), "its forward is right");
    const cJSON *g = cJSON_GetObjectItem(L, "input_grad");
    cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(g, "ok")));
    cr_expect_eq(cJSON_GetObjectItem(g, "first_index")->valuedouble, 5);
    md_backend_set_test_ops("cpu", NULL);
    cJSON_Delete(ck);
}

/* A "metal" made of the CPU backend without pooling: the pooling layers fall back, the others are native. */
static struct md_backend_ops no_pool_ops;

Test(doctor, check_says_which_layers_fell_back, .timeout = 60)
{
    no_pool_ops = *md_cpu_backend_ops();
    no_pool_ops.name = "metal";
    no_pool_ops.kernels.pool2d_fwd = NULL;
    no_pool_ops.kernels.pool2d_bwd = NULL;
    md_backend_set_test_ops("metal", &no_pool_ops);
    cJSON *ck = NULL;
    int failed = check("metal", "small_cnn", &ck);
    cr_expect_eq(failed, 0);
    const cJSON *p = layer(ck, "pool1"), *c = layer(ck, "conv1");
    cr_expect_str_eq(cJSON_GetObjectItem(p, "ran")->valuestring, "fallback");
    cr_expect_eq(cJSON_GetObjectItem(p, "fallback_calls")->valuedouble, 2, "forward and backward");
    cr_expect_str_eq(cJSON_GetObjectItem(c, "ran")->valuestring, "native");
    md_backend_set_test_ops("metal", NULL);
    cJSON_Delete(ck);
}

/* ---- the command line: exit code, report, text ---- */

static struct th_main_run run_job(const char *dir, const char *extra)
{
    char args[8192];
    snprintf(args, sizeof args, "--threads 1 %s", extra);
    return th_job_main(dir, args);
}

static void expect_valid(const cJSON *report)
{
    cJSON *s = th_load_json("docs/schema/report.schema.json");
    char err[600];
    cr_expect(th_schema_validate(s, report, err, sizeof err), "%s", err);
    cJSON_Delete(s);
}

/* every line of the text fits 100 columns (UTF-8 characters counted once) */
static void expect_width(const char *text)
{
    int col = 0;
    for (const unsigned char *p = (const unsigned char *)text; *p; p++) {
        if (*p == '\n') col = 0;
        else if ((*p & 0xC0) != 0x80) col++;
        cr_expect_leq(col, 100, "a line longer than 100 columns in:\n%s", text);
        if (col > 100) break;
    }
}

Test(doctor, check_exit_code_report_and_text, .timeout = 60)
{
    char *dir = th_tmpdir();
    struct th_main_run r = run_job(dir, "--device cpu --check");
    cr_expect_eq(r.st, MD_OK, "%s", md_errmsg());
    const cJSON *ck = cJSON_GetObjectItem(r.report, "check");
    cr_assert(cJSON_IsObject(ck), "no check in the report");
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(ck, "passed")));
    cr_expect_null(cJSON_GetObjectItem(r.report, "training"), "--check trains nothing");
    expect_valid(r.report);
    cr_expect(strstr(r.text, "== Check") && strstr(r.text, "conv1") && strstr(r.text, "passed"), "%s", r.text);
    expect_width(r.text);
    free(r.text);
    cJSON_Delete(r.report);

    /* the wrong kernel: exit 6, the report says where */
    bad_index = 3;
    use_bad_cpu(1);
    r = run_job(dir, "--device cpu --check");
    cr_expect_eq(r.st, MD_ERR_NUMERIC, "%s", md_errmsg());
    cr_expect_eq(md_status_exit_code(r.st), 6);
    cr_expect(strstr(md_errmsg(), "--check") && strstr(md_errmsg(), "first: conv1"), "%s", md_errmsg());
    cr_expect(strstr(r.text, "FAIL conv1 output: first differs at element 3"), "%s", r.text);
    ck = cJSON_GetObjectItem(r.report, "check");
    cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(ck, "passed")));
    cr_expect_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(r.report, "status"), "exit_code")->valuedouble, 6);
    expect_valid(r.report);
    expect_width(r.text);
    /* the HTML page carries the table and the failure in words */
    char *html = NULL;
    size_t len = 0;
    cr_assert_eq(md_html_render(r.report, &html, &len), MD_OK, "%s", md_errmsg());
    cr_expect(strstr(html, "<section id=\"check\">") && strstr(html, "differs first at element 3") &&
                  strstr(html, "<th>conv1</th>") && strstr(html, ">FAIL<"),
              "no check section in the page");
    md_free(html);
    md_backend_set_test_ops("cpu", NULL);
    free(r.text);
    cJSON_Delete(r.report);
    th_tmpdir_free(dir);
}

Test(doctor, check_contradicts_training_modes)
{
    const char *bad[] = {"--check --benchmark-only", "--precision-audit --models small_cnn,small_cnn",
                         "--check --ci", "--precision-plan p.json --precision fp16"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char buf[512], *argv[64];
        char args[256];
        snprintf(args, sizeof args, "mpsdiag %s", bad[i]);
        int argc = th_argv(buf, sizeof buf, args, argv);
        md_options o;
        md_options_defaults(&o);
        md_status st = md_options_parse(&o, argc, argv);
        if (st == MD_OK) st = md_options_validate(&o);
        cr_expect_eq(st, MD_ERR_USAGE, "%s", bad[i]);
    }
}

/* ---- --precision-audit ---- */

static cJSON *audit(const char *model, double input_scale)
{
    md_device *dev = th_open_device("cpu");
    struct md_check_opts o = opts_for(model);
    o.input_scale = input_scale;
    cJSON *au = NULL;
    cr_assert_eq(md_precision_audit_run(&o, dev, &au), MD_OK, "%s", md_errmsg());
    md_device_close(dev);
    return au;
}

static double jn(const cJSON *o, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    const cJSON *v = o;
    for (char *k = strtok(buf, "."); k; k = strtok(NULL, ".")) v = cJSON_GetObjectItem(v, k);
    cr_assert(cJSON_IsNumber(v), "%s is not a number", path);
    return v->valuedouble;
}

Test(doctor, audit_of_a_healthy_batch_recommends_fp16, .timeout = 60)
{
    cJSON *au = audit("small_cnn", 1.0);
    const cJSON *plan = cJSON_GetObjectItem(au, "plan");
    cr_expect_str_eq(cJSON_GetObjectItem(plan, "precision")->valuestring, "fp16");
    cr_expect_eq(jn(au, "fp32_outputs_above_fp16_max"), 0);
    cr_expect_eq(jn(au, "fp16_nonfinite"), 0);
    double s = jn(plan, "loss_scale");
    cr_expect(s >= jn(au, "gradients.loss_scale_min") && s <= jn(au, "gradients.loss_scale_max"), "scale %g", s);
    /* batch norm stays fp32 by rule */
    const cJSON *kinds = cJSON_GetObjectItem(cJSON_GetObjectItem(plan, "keep_fp32"), "kinds");
    cr_expect_eq(cJSON_GetArraySize(kinds), 1);
    cr_expect_str_eq(cJSON_GetArrayItem(kinds, 0)->valuestring, "batchnorm");
    /* each layer's fp16 error is its own: small */
    const cJSON *L;
    cJSON_ArrayForEach(L, cJSON_GetObjectItem(au, "layers"))
        cr_expect_lt(jn(L, "fp16.output.rel_l2"), 5e-3, "%s", cJSON_GetObjectItem(L, "name")->valuestring);
    cJSON_Delete(au);
}

/* Inputs 10^5 times larger: conv1's outputs pass 65504, fp16 stores them as
 * Inf and batch norm turns them into NaN; the squares batch norm's variance
 * sums overflow long before. The plan says bf16. */
Test(doctor, audit_activations_above_65504_overflow_fp16, .timeout = 60)
{
    cJSON *au = audit("small_cnn", 1e5);
    const cJSON *conv1 = NULL, *bn1 = NULL, *L;
    cJSON_ArrayForEach(L, cJSON_GetObjectItem(au, "layers"))
    {
        if (strcmp(cJSON_GetObjectItem(L, "name")->valuestring, "conv1") == 0) conv1 = L;
        if (strcmp(cJSON_GetObjectItem(L, "name")->valuestring, "bn1") == 0) bn1 = L;
    }
    cr_assert(conv1 && bn1);
    cr_expect_gt(jn(conv1, "fp32.max_abs"), 65504);
    cr_expect_gt(jn(conv1, "fp32.overflow_fp16"), 0);
    cr_expect(cJSON_IsTrue(cJSON_GetObjectItem(conv1, "keep_fp32")));
    cr_expect(strstr(cJSON_GetObjectItem(conv1, "why")->valuestring, "above 65504"));
    cr_expect_gt(jn(bn1, "fp32.input_square_overflow_fp16"), 0);
    cr_expect_gt(jn(conv1, "fp16.nonfinite_whole_step"), 0, "fp16 stores the overflow as Inf");
    cr_expect_gt(jn(au, "fp16_nonfinite"), 0);
    cr_expect_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(au, "plan"), "precision")->valuestring, "bf16");
    cJSON_Delete(au);
}

Test(doctor, plan_written_and_read_back, .timeout = 60)
{
    char *dir = th_tmpdir();
    char path[4200];
    snprintf(path, sizeof path, "%s/plan.json", dir);
    cJSON *au = audit("small_cnn", 1e5);
    cr_assert_eq(md_precision_plan_write(au, path), MD_OK, "%s", md_errmsg());
    struct md_precision_plan p;
    cr_assert_eq(md_precision_plan_read(path, &p), MD_OK, "%s", md_errmsg());
    const cJSON *plan = cJSON_GetObjectItem(au, "plan");
    cr_expect_eq(p.precision, MD_PREC_BF16);
    cr_expect_eq(p.loss_scale, jn(plan, "loss_scale"));
    const cJSON *keep = cJSON_GetObjectItem(plan, "keep_fp32");
    cr_expect_eq(p.nkinds, cJSON_GetArraySize(cJSON_GetObjectItem(keep, "kinds")));
    cr_expect_eq(p.nlayers, cJSON_GetArraySize(cJSON_GetObjectItem(keep, "layers")));
    cr_expect_geq(p.nlayers, 1);
    cr_expect_str_eq(p.layers[0], cJSON_GetArrayItem(cJSON_GetObjectItem(keep, "layers"), 0)->valuestring);
    cJSON_Delete(au);
    th_tmpdir_free(dir);
}

Test(doctor, bad_plan_file_is_one_line_naming_file_and_field)
{
    char *dir = th_tmpdir();
    static const char *const cases[][2] = {
        {"{\"precision\": \"fp8\"}", "plan.precision"},
        {"{\"loss_scale\": 8}", "plan.precision"},
        {"{\"precision\": \"fp16\", \"loss_scale\": \"big\"}", "plan.loss_scale"},
        {"{\"precision\": \"fp16\", \"loss_scale\": 0.5}", "plan.loss_scale"},
        {"{\"precision\": \"fp16\", \"keep_fp32\": {\"kinds\": [3]}}", "plan.keep_fp32.kinds[0]"},
        {"{\"precision\": \"fp16\", \"keep_fp32\": {\"names\": []}}", "unknown key 'names'"},
        {"{\"precision\": \"fp16\", \"speed\": 1}", "unknown key 'speed'"},
        {"{\"precision\": \"fp16\", \"format\": \"other\"}", "plan.format"},
        {"{\"precision\": ", "malformed JSON"},
        {"[1]", "expected a JSON object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *path = th_write(dir, "plan.json", cases[i][0]);
        struct md_precision_plan p;
        md_err_clear();
        cr_expect_eq(md_precision_plan_read(path, &p), MD_ERR_CONFIG, "%s", cases[i][0]);
        const char *msg = md_errmsg();
        cr_expect(strstr(msg, path) && strstr(msg, cases[i][1]), "%s: %s", cases[i][0], msg);
        cr_expect(strstr(msg, "--precision-plan"), "%s", msg);
        cr_expect_null(strchr(msg, '\n'), "%s", msg);
        free(path);
    }
    struct md_precision_plan p;
    char missing[4200];
    snprintf(missing, sizeof missing, "%s/none.json", dir);
    cr_expect_eq(md_precision_plan_read(missing, &p), MD_ERR_CONFIG);
    cr_expect(strstr(md_errmsg(), "none.json"), "%s", md_errmsg());
    th_tmpdir_free(dir);
}

/* A training run with a plan: the precision and loss scale are taken, and
 * the entries it cannot honour are said (text, report warnings), never
 * silently dropped. */
Test(doctor, training_with_a_plan_says_what_it_cannot_honour, .timeout = 60)
{
    char *dir = th_tmpdir();
    char *plan = th_write(dir, "plan.json",
                          "{\"precision\": \"fp16\", \"loss_scale\": 1024, "
                          "\"keep_fp32\": {\"kinds\": [\"batchnorm\"], \"layers\": [\"conv1\"]}}");
    char extra[8400];
    /* a device that computes in fp16 (the CPU backend registered as "metal"; the CPU itself stays fp32) */
    no_pool_ops = *md_cpu_backend_ops();
    no_pool_ops.name = "metal";
    md_backend_set_test_ops("metal", &no_pool_ops);
    snprintf(extra, sizeof extra,
             "--device metal --precision-plan %s --dataset synthetic --max-samples 32 --batch-size 8 --steps 1 "
             "--num-workers 0 --checkpoint-dir %s/ck",
             plan, dir);
    struct th_main_run r = run_job(dir, extra);
    md_backend_set_test_ops("metal", NULL);
    cr_expect_eq(r.st, MD_OK, "%s", md_errmsg());
    const cJSON *w = cJSON_GetObjectItem(r.report, "warnings"), *e;
    int conv = 0, bn = 0;
    cJSON_ArrayForEach(e, w)
    {
        conv |= strstr(e->valuestring, "conv1") && strstr(e->valuestring, "not honoured") != NULL;
        bn |= strstr(e->valuestring, "batchnorm") && strstr(e->valuestring, "partly honoured") != NULL;
    }
    cr_expect(conv && bn, "warnings: %s", cJSON_PrintUnformatted(w));
    const cJSON *s = th_setting(r.report, "precision");
    cr_assert(s);
    cr_expect_str_eq(cJSON_GetObjectItem(s, "value")->valuestring, "fp16");
    cr_expect(strstr(cJSON_GetObjectItem(s, "why")->valuestring, "--precision-plan"), "%s",
              cJSON_GetObjectItem(s, "why")->valuestring);
    s = th_setting(r.report, "loss_scale");
    cr_assert(s, "no loss_scale setting");
    cr_expect_str_eq(cJSON_GetObjectItem(s, "value")->valuestring, "1024");
    expect_valid(r.report);
    free(r.text);
    cJSON_Delete(r.report);
    free(plan);
    th_tmpdir_free(dir);
}

Test(doctor, audit_report_and_plan_file_from_the_command_line, .timeout = 60)
{
    char *dir = th_tmpdir();
    char extra[4400], path[4200];
    snprintf(path, sizeof path, "%s/plan.json", dir);
    snprintf(extra, sizeof extra, "--device cpu --precision-audit --precision-plan %s", path);
    struct th_main_run r = run_job(dir, extra);
    cr_expect_eq(r.st, MD_OK, "%s", md_errmsg());
    cr_expect(cJSON_IsObject(cJSON_GetObjectItem(r.report, "precision_audit")));
    expect_valid(r.report);
    expect_width(r.text);
    struct md_precision_plan p;
    cr_expect_eq(md_precision_plan_read(path, &p), MD_OK, "%s", md_errmsg());
    free(r.text);
    cJSON_Delete(r.report);
    th_tmpdir_free(dir);
}

/* ---- the Metal simulation (build/metal-sim-tests; skipped where "metal" is the stub) ---- */

static void check_on_metal(const char *model)
{
    const md_backend *b = md_backend_find("metal");
    if (!md_backend_probe(b)->available) cr_skip_test("metal: %s", md_backend_probe(b)->reason);
    cJSON *ck = NULL;
    int failed = check("metal", model, &ck);
    char *txt = cJSON_PrintUnformatted(ck);
    cr_expect_eq(failed, 0, "%s", txt);
    const cJSON *L;
    cJSON_ArrayForEach(L, cJSON_GetObjectItem(ck, "layers"))
        cr_expect_str_eq(cJSON_GetObjectItem(L, "ran")->valuestring, "native", "%s",
                         cJSON_GetObjectItem(L, "name")->valuestring);
    free(txt);
    cJSON_Delete(ck);
}

Test(doctor_metal_sim, check_small_cnn_on_simulated_metal, .timeout = 300) { check_on_metal("small_cnn"); }
Test(doctor_metal_sim, check_two_input_model_on_simulated_metal, .timeout = 300)
{
    check_on_metal("tiled_two_stream_tiny");
}

/* --precision-audit on simulated Metal: its fp16 and bf16 kernels against its fp32 ones. */
Test(doctor_metal_sim, precision_audit_on_simulated_metal, .timeout = 300)
{
    const md_backend *b = md_backend_find("metal");
    if (!md_backend_probe(b)->available) cr_skip_test("metal: %s", md_backend_probe(b)->reason);
    md_device *dev = th_open_device("metal");
    struct md_check_opts o = opts_for("small_cnn");
    cJSON *au = NULL;
    cr_assert_eq(md_precision_audit_run(&o, dev, &au), MD_OK, "%s", md_errmsg());
    md_device_close(dev);
    const cJSON *plan = cJSON_GetObjectItem(au, "plan");
    cr_expect_str_eq(cJSON_GetObjectItem(plan, "precision")->valuestring, "fp16");
    cr_expect_eq(jn(au, "fp16_nonfinite"), 0);
    cr_expect_gt(cJSON_GetArraySize(cJSON_GetObjectItem(au, "layers")), 0);
    const cJSON *L;
    cJSON_ArrayForEach(L, cJSON_GetObjectItem(au, "layers"))
        cr_expect_lt(jn(L, "fp16.output.rel_l2"), 5e-3, "%s", cJSON_GetObjectItem(L, "name")->valuestring);
    cJSON_Delete(au);
}

/* --profile with the leak check on simulated Metal: per-layer rows from the
 * device's own kernels, the leak verdict, and a peak small enough to measure
 * on a simulation (a 4096 GEMM there took minutes). */
Test(doctor_metal_sim, profile_and_leak_check_on_simulated_metal, .timeout = 300)
{
    const md_backend *b = md_backend_find("metal");
    if (!md_backend_probe(b)->available) cr_skip_test("metal: %s", md_backend_probe(b)->reason);
    char *dir = th_tmpdir();
    /* a small model: every simulated kernel runs its threads one by one */
    char *m = th_write(dir, "tiny.json",
                       "{\"name\": \"tiny\", \"num_classes\": 10, \"inputs\": [{\"name\": \"image\", \"shape\": [1, 28, 28]}],"
                       " \"layers\": [{\"name\": \"conv1\", \"type\": \"conv2d\", \"out\": 4, \"kernel\": 3, \"padding\": 1},"
                       " {\"name\": \"bn1\", \"type\": \"batchnorm\"}, {\"name\": \"relu1\", \"type\": \"relu\"},"
                       " {\"name\": \"pool1\", \"type\": \"maxpool\", \"kernel\": 4}, {\"name\": \"flatten\", \"type\": \"flatten\"},"
                       " {\"name\": \"fc\", \"type\": \"linear\", \"out\": \"$num_classes\"}]}\n");
    char extra[4400];
    snprintf(extra, sizeof extra, "--device metal --model %s --batch-size 8 --bench-iters 2 --profile --leak-check 6", m);
    free(m);
    struct th_main_run r = run_job(dir, extra);
    cr_assert_eq(r.st, MD_OK, "%s", md_errmsg());
    expect_valid(r.report);
    expect_width(r.text);
    const cJSON *p = cJSON_GetObjectItem(r.report, "profile");
    cr_assert(cJSON_IsObject(p), "no profile section");
    cr_expect_gt(cJSON_GetArraySize(cJSON_GetObjectItem(p, "layers")), 3);
    const cJSON *lc = cJSON_GetObjectItem(p, "leak_check");
    cr_expect(cJSON_IsFalse(cJSON_GetObjectItem(lc, "flagged")), "%s", r.text);
    cr_expect_eq(cJSON_GetObjectItem(lc, "steps")->valueint, 6);
    cr_expect(strstr(r.text, "== Profile"), "%s", r.text);
    const cJSON *pk = cJSON_GetObjectItem(cJSON_GetObjectItem(r.report, "benchmark"), "peak");
    if (pk) cr_expect_eq(cJSON_GetObjectItem(pk, "gemm_n")->valueint, 128);
    free(r.text);
    cJSON_Delete(r.report);
    th_tmpdir_free(dir);
}
