/* test_nn_regress.c - md_model_regress_loss: a small linear forecaster's
 * parameter gradients through the regression losses against central finite
 * differences (reference device), the loss and metric sums against
 * md_k_regress on the model's output, and the output-size check. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/kernels_call.h"
#include "core/json.h"
#include "core/rng.h"
#include "nn/model.h"

/* 8 inputs per sample (the last two stand for the last observed values of
 * the 2 channels), 3 x 2 outputs. */
static const char *LIN = "{\"name\":\"lin\",\"num_classes\":6,\"inputs\":[{\"name\":\"x\",\"shape\":[8,1,1]}],"
                         "\"layers\":[{\"name\":\"h\",\"type\":\"linear\",\"out\":5},{\"name\":\"t\",\"type\":\"tanh\"},"
                         "{\"name\":\"fc\",\"type\":\"linear\",\"out\":6}]}";

enum { B = 3, H = 3, C = 2, IN = 8 };

struct fx {
    md_device *d;
    md_model *m;
    float *tgt, *loss, *met;
};

static struct fx setup(void)
{
    struct fx f;
    struct md_device_opts dopt;
    memset(&dopt, 0, sizeof dopt);
    cr_assert_eq(md_device_open(md_backend_find("ref"), 0, &dopt, &f.d), MD_OK, "%s", md_errmsg());
    cJSON *j = NULL;
    cr_assert_eq(md_json_parse(LIN, "lin.json", &j), MD_OK, "%s", md_errmsg());
    struct md_model_opts o;
    md_model_opts_default(&o);
    o.seed = 5;
    cr_assert_eq(md_model_load("lin.json", j, &o, &f.m), MD_OK, "%s", md_errmsg());
    cJSON_Delete(j);
    cr_assert_eq(md_model_bind(f.m, f.d, B), MD_OK, "%s", md_errmsg());
    float x[B * IN], y[B * H * C];
    md_rng r;
    md_rng_init(&r, 11);
    for (int i = 0; i < B * IN; i++) x[i] = 2.0f * md_rng_next_uniform(&r) - 1.0f;
    for (int i = 0; i < B * H * C; i++) y[i] = 2.0f * md_rng_next_uniform(&r) - 1.0f;
    cr_assert_eq(md_dev_upload(f.d, md_model_input_buffer(f.m, 0), x, sizeof x), MD_OK);
    cr_assert_eq(md_dev_alloc(f.d, sizeof y, (void **)&f.tgt, "targets"), MD_OK);
    cr_assert_eq(md_dev_upload(f.d, f.tgt, y, sizeof y), MD_OK);
    cr_assert_eq(md_dev_alloc(f.d, 4, (void **)&f.loss, "loss"), MD_OK);
    cr_assert_eq(md_dev_alloc(f.d, 12, (void **)&f.met, "metrics"), MD_OK);
    return f;
}

static void teardown(struct fx *f)
{
    md_dev_free(f->d, f->tgt);
    md_dev_free(f->d, f->loss);
    md_dev_free(f->d, f->met);
    md_model_free(f->m);
    md_device_close(f->d);
}

static const float *last_of(struct fx *f) { return (const float *)md_model_input_buffer(f->m, 0) + (IN - C); }

/* Mean loss of one training forward (and backward when asked). */
static double loss_of(struct fx *f, md_regress_kind kind, int backward)
{
    cr_assert_eq(md_dev_memset0(f->d, f->loss, 4), MD_OK);
    cr_assert_eq(md_dev_memset0(f->d, f->met, 12), MD_OK);
    cr_assert_eq(md_model_forward(f->m, B, 1), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_model_regress_loss(f->m, f->tgt, H, C, kind, 0.3f, 1.0f, last_of(f), IN, 1.0f / (B * H * C),
                                       f->loss, f->met),
                 MD_OK, "%s", md_errmsg());
    if (backward) cr_assert_eq(md_model_backward(f->m), MD_OK, "%s", md_errmsg());
    float l;
    cr_assert_eq(md_dev_download(f->d, &l, f->loss, 4), MD_OK);
    return (double)l / (B * H * C);
}

Test(nn_regress, parameter_gradients_match_finite_differences, .timeout = 60)
{
    for (int kind = MD_REGRESS_MSE; kind <= MD_REGRESS_FINANCIAL; kind++) {
        struct fx f = setup();
        loss_of(&f, (md_regress_kind)kind, 1);
        size_t n = md_model_nparams(f.m);
        float *p = malloc(n * 4), *g = malloc(n * 4);
        cr_assert_eq(md_dev_download(f.d, g, md_model_grads(f.m), n * 4), MD_OK);
        cr_assert_eq(md_dev_download(f.d, p, md_model_params(f.m), n * 4), MD_OK);
        int bad = 0;
        for (size_t k = 0; k < n; k++) {
            const double eps = 1e-3;
            float keep = p[k];
            double l[2];
            for (int s = 0; s < 2; s++) {
                p[k] = keep + (float)(s ? -eps : eps);
                cr_assert_eq(md_dev_upload(f.d, md_model_params(f.m) + k, &p[k], 4), MD_OK);
                l[s] = loss_of(&f, (md_regress_kind)kind, 0);
            }
            p[k] = keep;
            cr_assert_eq(md_dev_upload(f.d, md_model_params(f.m) + k, &p[k], 4), MD_OK);
            double num = (l[0] - l[1]) / (2 * eps);
            /* MAE's and the penalty's kinks may fall inside a step: allow a few */
            if (fabs(num - (double)g[k]) > 2e-3 + 2e-2 * fabs(num)) bad++;
        }
        cr_assert(bad <= (kind == MD_REGRESS_MSE || kind == MD_REGRESS_HUBER ? 0 : 2),
                  "kind %d: %d of %zu gradients off", kind, bad, n);
        free(p);
        free(g);
        teardown(&f);
    }
}

Test(nn_regress, sums_match_the_kernel_and_sizes_are_checked)
{
    struct fx f = setup();
    double mean = loss_of(&f, MD_REGRESS_MSE, 0);
    float met[3];
    cr_assert_eq(md_dev_download(f.d, met, f.met, 12), MD_OK);
    /* MSE loss sum is the metric's squared-error sum */
    cr_assert_float_eq(mean * (B * H * C), (double)met[1], 1e-5);
    cr_assert(met[2] >= 0 && met[2] <= B * H * C && met[2] == floorf(met[2]));
    cr_assert_eq(md_model_regress_loss(f.m, f.tgt, 4, 2, MD_REGRESS_MSE, 1, 0, NULL, 0, 1, f.loss, NULL),
                 MD_ERR_CONFIG);
    cr_assert(strstr(md_errmsg(), "6 outputs per sample"), "%s", md_errmsg());
    md_err_clear();
    teardown(&f);
}
