/* test_nn_probe.c - md_model_probe_stats on constructed cases: dead units of
 * ReLU and GELU layers whose inputs are known, and the pathway balance of a
 * weighted_add and a film fusion against a hand computation. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/rng.h"
#include "nn/model.h"

static const char *const devs[] = {"ref", "cpu"};

static md_model *load_bound(md_device *dev, const char *cfg, int batch)
{
    cJSON *j = cJSON_Parse(cfg);
    cr_assert_not_null(j, "%s", cfg);
    struct md_model_opts o;
    md_model_opts_default(&o);
    o.seed = 5;
    md_model *m = NULL;
    cr_assert_eq(md_model_load("probe", j, &o, &m), MD_OK, "%s", md_errmsg());
    cJSON_Delete(j);
    cr_assert_eq(md_model_bind(m, dev, batch), MD_OK, "%s", md_errmsg());
    return m;
}

/* Sets tensor `name` of the model's parameters to v[0..n). */
static void set_tensor(md_model *m, const char *name, const float *v, size_t n)
{
    int t = md_model_find_tensor(m, name);
    cr_assert_geq(t, 0, "no tensor %s", name);
    cr_assert_eq(md_model_tensor(m, t)->numel, n, "%s", name);
    size_t np = md_model_nparams(m);
    float *h = malloc(np * sizeof *h);
    cr_assert_eq(md_model_get_params_host(m, h), MD_OK);
    memcpy(h + md_model_tensor(m, t)->offset, v, n * sizeof *v);
    cr_assert_eq(md_model_set_params_host(m, h), MD_OK, "%s", md_errmsg());
    free(h);
}

/* fc (5 -> 5) then the activation: units x0, -5 x0, +1, -5, x1 with x0 in
 * {1, 2, 3} and x1 in {-1, 0.5, 2}. */
static void dead_case(const char *act, double want_dead, double want_zero)
{
    char cfg[600];
    snprintf(cfg, sizeof cfg,
             "{\"name\": \"dead\", \"num_classes\": 5, \"inputs\": [{\"name\": \"x\", \"shape\": [1, 1, 5]}],"
             " \"layers\": [{\"name\": \"flatten\", \"type\": \"flatten\"},"
             " {\"name\": \"fc\", \"type\": \"linear\", \"out\": 5}, {\"name\": \"act\", \"type\": \"%s\"}]}",
             act);
    for (int di = 0; di < 2; di++) {
        md_device *dev = NULL;
        cr_assert_eq(md_device_open(md_backend_find(devs[di]), 0, NULL, &dev), MD_OK, "%s", md_errmsg());
        md_model *m = load_bound(dev, cfg, 3);
        float w[25] = {0}, b[5] = {0, 0, 1, -5, 0};
        w[0 * 5 + 0] = 1;
        w[1 * 5 + 0] = -5;
        w[4 * 5 + 1] = 1;
        set_tensor(m, "fc.weight", w, 25);
        set_tensor(m, "fc.bias", b, 5);
        float x[15] = {1, -1, 7, 7, 7, /**/ 2, 0.5f, -7, 7, 7, /**/ 3, 2, 7, -7, 7};
        cr_assert_eq(md_dev_upload(dev, md_model_input_buffer(m, 0), x, sizeof x), MD_OK);
        struct md_act_stat as[4];
        struct md_fusion_stat fs[1];
        int na = 0, nf = 0;
        cr_assert_eq(md_model_probe_stats(m, 3, as, 4, &na, fs, 1, &nf), MD_OK, "%s", md_errmsg());
        cr_assert_eq(na, 1);
        cr_assert_eq(nf, 0);
        cr_assert_str_eq(as[0].layer, "act");
        cr_assert_str_eq(as[0].activation, act);
        cr_assert_eq(as[0].units, 5);
        cr_assert_float_eq(as[0].dead_share, want_dead, 1e-12, "%s on %s: dead %g", act, devs[di], as[0].dead_share);
        cr_assert_float_eq(as[0].zero_share, want_zero, 1e-12, "%s on %s: zero %g", act, devs[di], as[0].zero_share);
        md_model_free(m);
        md_device_close(dev);
    }
}

/* ReLU: units 1 and 3 are never positive; unit 4 is zero for x1 = -1. */
Test(nn_probe, dead_relu_units_of_a_known_input) { dead_case("relu", 2.0 / 5, 7.0 / 15); }

/* GELU: -5 x0 and -5 give |y| < 1e-5 (dead); gelu(-1) = -0.159 is active. */
Test(nn_probe, dead_gelu_units_use_the_threshold) { dead_case("gelu", 2.0 / 5, 6.0 / 15); }

static void normal(float *x, int n, uint64_t seed)
{
    md_rng r;
    md_rng_init(&r, seed);
    for (int i = 0; i < n; i++) x[i] = (float)md_rng_normal(&r);
}

Test(nn_probe, weighted_add_balance_matches_a_hand_computation)
{
    static const char cfg[] =
        "{\"name\": \"wadd\", \"num_classes\": 2, \"inputs\": [{\"name\": \"a\", \"shape\": [4, 1, 1]},"
        " {\"name\": \"b\", \"shape\": [4, 1, 1]}],"
        " \"layers\": [{\"name\": \"fusion\", \"type\": \"weighted_add\", \"inputs\": [\"a\", \"b\"]},"
        " {\"name\": \"flatten\", \"type\": \"flatten\"}, {\"name\": \"fc\", \"type\": \"linear\", \"out\": 2}]}";
    for (int di = 0; di < 2; di++) {
        md_device *dev = NULL;
        cr_assert_eq(md_device_open(md_backend_find(devs[di]), 0, NULL, &dev), MD_OK, "%s", md_errmsg());
        md_model *m = load_bound(dev, cfg, 3);
        float w[2] = {0.5f, -2.0f};
        set_tensor(m, "fusion.weight", w, 2);
        float a[12], b[12];
        normal(a, 12, 1);
        normal(b, 12, 2);
        cr_assert_eq(md_dev_upload(dev, md_model_input_buffer(m, 0), a, sizeof a), MD_OK);
        cr_assert_eq(md_dev_upload(dev, md_model_input_buffer(m, 1), b, sizeof b), MD_OK);
        double ca = 0, cb = 0;
        for (int i = 0; i < 12; i++) {
            ca += fabs(0.5 * a[i]) / 12;
            cb += fabs(-2.0 * b[i]) / 12;
        }
        struct md_act_stat as[2];
        struct md_fusion_stat fs[2];
        int na = 0, nf = 0;
        cr_assert_eq(md_model_probe_stats(m, 3, as, 2, &na, fs, 2, &nf), MD_OK, "%s", md_errmsg());
        cr_assert_eq(nf, 1);
        cr_assert_str_eq(fs[0].layer, "fusion");
        cr_assert_str_eq(fs[0].kind, "weighted_add");
        cr_assert_eq(fs[0].nin, 2);
        cr_assert_str_eq(fs[0].input[0], "a");
        cr_assert_str_eq(fs[0].input[1], "b");
        cr_assert_float_eq(fs[0].weight[1], -2.0, 1e-7);
        cr_assert_float_eq(fs[0].mean_abs[0], ca, 1e-6);
        cr_assert_float_eq(fs[0].mean_abs[1], cb, 1e-6);
        cr_assert_float_eq(fs[0].share[0], ca / (ca + cb), 1e-6, "%s: %g", devs[di], fs[0].share[0]);
        cr_assert_float_eq(fs[0].share[0] + fs[0].share[1], 1.0, 1e-12);
        md_model_free(m);
        md_device_close(dev);
    }
}

Test(nn_probe, film_balance_matches_a_hand_computation)
{
    static const char cfg[] =
        "{\"name\": \"film\", \"num_classes\": 2, \"inputs\": [{\"name\": \"x\", \"shape\": [3, 1, 1]},"
        " {\"name\": \"cond\", \"shape\": [6, 1, 1]}],"
        " \"layers\": [{\"name\": \"mod\", \"type\": \"film\", \"inputs\": [\"x\", \"cond\"]},"
        " {\"name\": \"flatten\", \"type\": \"flatten\"}, {\"name\": \"fc\", \"type\": \"linear\", \"out\": 2}]}";
    md_device *dev = NULL;
    cr_assert_eq(md_device_open(md_backend_find("cpu"), 0, NULL, &dev), MD_OK, "%s", md_errmsg());
    md_model *m = load_bound(dev, cfg, 2);
    float x[6], c[12];
    normal(x, 6, 3);
    normal(c, 12, 4);
    cr_assert_eq(md_dev_upload(dev, md_model_input_buffer(m, 0), x, sizeof x), MD_OK);
    cr_assert_eq(md_dev_upload(dev, md_model_input_buffer(m, 1), c, sizeof c), MD_OK);
    double cx = 0, cc = 0;
    for (int n = 0; n < 2; n++)
        for (int d = 0; d < 3; d++) {
            double xv = x[n * 3 + d], g = c[n * 6 + d], be = c[n * 6 + 3 + d];
            cx += fabs(xv) / 6;
            cc += fabs(xv * g + be) / 6;
        }
    struct md_act_stat as[2];
    struct md_fusion_stat fs[2];
    int na = 0, nf = 0;
    cr_assert_eq(md_model_probe_stats(m, 2, as, 2, &na, fs, 2, &nf), MD_OK, "%s", md_errmsg());
    cr_assert_eq(nf, 1);
    cr_assert_str_eq(fs[0].kind, "film");
    cr_assert_float_eq(fs[0].mean_abs[0], cx, 1e-6);
    cr_assert_float_eq(fs[0].mean_abs[1], cc, 1e-6);
    cr_assert_float_eq(fs[0].share[1], cc / (cx + cc), 1e-6);
    md_model_free(m);
    md_device_close(dev);
}

/* The probe leaves the model as it was: parameters and BN statistics. */
Test(nn_probe, leaves_parameters_and_running_statistics_alone)
{
    static const char cfg[] =
        "{\"name\": \"bn\", \"num_classes\": 4, \"inputs\": [{\"name\": \"x\", \"shape\": [2, 3, 3]}],"
        " \"layers\": [{\"name\": \"conv\", \"type\": \"conv2d\", \"out\": 4, \"kernel\": 3, \"padding\": 1},"
        " {\"name\": \"bn\", \"type\": \"batchnorm\"}, {\"name\": \"relu\", \"type\": \"relu\"},"
        " {\"name\": \"flatten\", \"type\": \"flatten\"}, {\"name\": \"fc\", \"type\": \"linear\", \"out\": 4}]}";
    md_device *dev = NULL;
    cr_assert_eq(md_device_open(md_backend_find("cpu"), 0, NULL, &dev), MD_OK, "%s", md_errmsg());
    md_model *m = load_bound(dev, cfg, 4);
    float x[4 * 18];
    normal(x, 4 * 18, 9);
    cr_assert_eq(md_dev_upload(dev, md_model_input_buffer(m, 0), x, sizeof x), MD_OK);
    size_t np = md_model_nparams(m), ns = md_model_bn_stats_count(m);
    float *p0 = malloc(np * 4), *p1 = malloc(np * 4), *s0 = malloc(ns * 4), *s1 = malloc(ns * 4);
    cr_assert_eq(md_model_get_params_host(m, p0), MD_OK);
    cr_assert_eq(md_dev_download(dev, s0, md_model_bn_stats(m), ns * 4), MD_OK);
    struct md_act_stat as[2];
    struct md_fusion_stat fs[1];
    int na = 0, nf = 0;
    cr_assert_eq(md_model_probe_stats(m, 4, as, 2, &na, fs, 1, &nf), MD_OK, "%s", md_errmsg());
    cr_assert_eq(na, 1);
    cr_assert_str_eq(as[0].layer, "relu", "a fused ReLU reports itself");
    cr_assert_eq(md_model_get_params_host(m, p1), MD_OK);
    cr_assert_eq(md_dev_download(dev, s1, md_model_bn_stats(m), ns * 4), MD_OK);
    cr_assert_eq(memcmp(p0, p1, np * 4), 0);
    cr_assert_eq(memcmp(s0, s1, ns * 4), 0);
    free(p0);
    free(p1);
    free(s0);
    free(s1);
    md_model_free(m);
    md_device_close(dev);
}
