/* test_seeds_train.c - every shipped seeds' model trains on the CPU: a few
 * SGD steps on one fixed synthetic batch make the loss fall, and the
 * integration weights of weighted_add layers move.
 *
 * Kept small for CI: --reduce-architecture widths, batches of 2-4, no
 * dropout (so the loss curve is the optimizer's alone), 6 steps.
 */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/kernels_call.h"
#include "core/rng.h"
#include "core/timer.h"
#include "nn/model.h"

#define STEPS 6

struct train_case {
    const char *name;
    int batch;
    float lr;
};

static const struct train_case cases[] = {
    {"base_multi_channel", 4, 0.05f},
    {"base_multi_channel_large", 4, 0.05f},
    {"multi_channel_resnet50", 4, 0.005f},
    {"continuous_integration", 2, 0.05f},
    {"custom_cnn", 2, 0.05f},
};

static md_device *open_cpu(void)
{
    const md_backend *b = md_backend_find("cpu");
    cr_assert(b != NULL);
    struct md_device_opts o = {.threads = 0};
    md_device *dev = NULL;
    cr_assert_eq(md_device_open(b, 0, &o, &dev), MD_OK, "%s", md_errmsg());
    return dev;
}

/* Values of every weighted_add tensor, concatenated into out (at most cap). */
static int integration_weights(md_model *m, md_device *dev, float *out, int cap)
{
    int n = 0;
    for (int i = 0; i < md_model_num_tensors(m); i++) {
        const struct md_param_info *p = md_model_tensor(m, i);
        if (strcmp(p->layer_type, "weighted_add") != 0) continue;
        cr_assert(n + (int)p->numel <= cap);
        cr_assert_eq(md_dev_download(dev, out + n, md_model_params(m) + p->offset, p->numel * sizeof(float)), MD_OK);
        n += (int)p->numel;
    }
    cr_assert_eq(md_dev_sync(dev), MD_OK);
    return n;
}

static void train_one(md_device *dev, const struct train_case *c)
{
    struct md_model_opts mo;
    md_model_opts_default(&mo);
    mo.reduce_architecture = 1;
    mo.dropout = 0.0;
    md_model *m = NULL;
    cr_assert_eq(md_model_load(c->name, NULL, &mo, &m), MD_OK, "%s: %s", c->name, md_errmsg());
    cr_assert_eq(md_model_bind(m, dev, c->batch), MD_OK, "%s: %s", c->name, md_errmsg());

    /* one fixed batch: uniform noise inputs, labels 0, 1, ... */
    for (int i = 0; i < md_model_num_inputs(m); i++) {
        int ch, h, w;
        md_model_input_shape(m, i, &ch, &h, &w);
        size_t n = (size_t)c->batch * ch * h * w;
        float *x = malloc(n * sizeof *x);
        for (size_t k = 0; k < n; k++) x[k] = 2.0f * md_rng_uniform(7 + (uint64_t)i, k) - 1.0f;
        cr_assert_eq(md_dev_upload(dev, md_model_input_buffer(m, i), x, n * sizeof *x), MD_OK);
        free(x);
    }
    int32_t labels[8];
    for (int k = 0; k < c->batch; k++) labels[k] = k % md_model_num_classes(m);
    size_t np = md_model_nparams(m);
    int32_t *d_labels = NULL;
    float *d_loss = NULL, *d_mom = NULL;
    cr_assert_eq(md_dev_alloc(dev, sizeof labels, (void **)&d_labels, "labels"), MD_OK);
    cr_assert_eq(md_dev_alloc(dev, sizeof(float), (void **)&d_loss, "loss"), MD_OK);
    cr_assert_eq(md_dev_alloc(dev, np * sizeof(float), (void **)&d_mom, "momentum"), MD_OK);
    cr_assert_eq(md_dev_upload(dev, d_labels, labels, sizeof labels), MD_OK);

    double t0 = md_now();
    float w0[64], w1[64];
    int nw = integration_weights(m, dev, w0, 64);

    float loss[STEPS];
    for (int s = 0; s < STEPS; s++) {
        md_model_set_step(m, (uint64_t)s);
        cr_assert_eq(md_dev_memset0(dev, d_loss, sizeof(float)), MD_OK);
        cr_assert_eq(md_model_forward(m, c->batch, 1), MD_OK, "%s: %s", c->name, md_errmsg());
        cr_assert_eq(md_model_loss(m, d_labels, 0.0f, 1.0f / (float)c->batch, d_loss, NULL), MD_OK, "%s: %s",
                     c->name, md_errmsg());
        cr_assert_eq(md_model_backward(m), MD_OK, "%s: %s", c->name, md_errmsg());
        struct md_optim_args oa = {.kind = MD_OPT_SGD, .n = np, .lr = c->lr, .momentum = 0.9f, .step = s + 1,
                                   .grad_scale = 1.0f, .params = md_model_params(m), .grads = md_model_grads(m),
                                   .m = d_mom};
        cr_assert_eq(md_k_optim(dev, &oa), MD_OK, "%s: %s", c->name, md_errmsg());
        float l;
        cr_assert_eq(md_dev_download(dev, &l, d_loss, sizeof l), MD_OK);
        cr_assert_eq(md_dev_sync(dev), MD_OK);
        loss[s] = l / (float)c->batch;
        cr_assert(isfinite(loss[s]), "%s: step %d loss %g", c->name, s, loss[s]);
    }
    fprintf(stderr, "  %-26s %.2f s, loss", c->name, md_now() - t0);
    for (int s = 0; s < STEPS; s++) fprintf(stderr, " %.4f", loss[s]);
    fprintf(stderr, "\n");
    cr_expect_lt(loss[STEPS - 1], 0.8f * loss[0], "%s: the loss should fall on a memorised batch: %g -> %g",
                 c->name, loss[0], loss[STEPS - 1]);

    if (nw > 0) {
        cr_assert_eq(integration_weights(m, dev, w1, 64), nw);
        double moved = 0;
        for (int k = 0; k < nw; k++) moved += fabs((double)w1[k] - (double)w0[k]);
        cr_expect_gt(moved, 1e-6, "%s: the integration weights should move in training", c->name);
    }
    md_dev_free(dev, d_labels);
    md_dev_free(dev, d_loss);
    md_dev_free(dev, d_mom);
    md_model_free(m);
}

Test(seeds, every_model_trains_on_cpu, .timeout = 120)
{
    md_device *dev = open_cpu();
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) train_one(dev, &cases[i]);
    md_device_close(dev);
}
