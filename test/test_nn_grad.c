/* test_nn_grad.c - whole models end to end: gradients against central finite
 * differences (reference device, tiny shapes), checkpointed vs plain
 * gradients (bit for bit), forward on the CPU device against the reference,
 * seeded initialisation. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/json.h"
#include "core/rng.h"
#include "helpers.h"
#include "nn/model.h"

/* A residual block with a projection shortcut, BN (batch statistics),
 * dropout, max-pool and global pooling, bias in a conv. */
static const char *RESIDUAL =
    "{\"name\":\"res\",\"num_classes\":3,\"inputs\":[{\"name\":\"x\",\"shape\":[2,5,5]}],"
    "\"blocks\":{\"basic\":{\"params\":{\"out\":null,\"stride\":1},\"layers\":["
    " {\"name\":\"conv1\",\"type\":\"conv2d\",\"out\":\"$out\",\"kernel\":3,\"stride\":\"$stride\",\"padding\":1},"
    " {\"name\":\"bn1\",\"type\":\"batchnorm\"},"
    " {\"name\":\"relu1\",\"type\":\"relu\"},"
    " {\"name\":\"conv2\",\"type\":\"conv2d\",\"out\":\"$out\",\"kernel\":3,\"padding\":1,\"bias\":false},"
    " {\"name\":\"bn2\",\"type\":\"batchnorm\"},"
    " {\"name\":\"proj\",\"type\":\"conv2d\",\"inputs\":[\"in\"],\"out\":\"$out\",\"kernel\":1,\"stride\":\"$stride\",\"bias\":false},"
    " {\"name\":\"add\",\"type\":\"add\",\"inputs\":[\"bn2\",\"proj\"]},"
    " {\"name\":\"relu2\",\"type\":\"relu\"}]}},"
    "\"layers\":["
    " {\"name\":\"stem\",\"type\":\"conv2d\",\"out\":3,\"kernel\":3,\"padding\":1,\"bias\":false},"
    " {\"name\":\"block\",\"type\":\"basic\",\"out\":4,\"repeat\":2,\"rest\":{\"stride\":1}},"
    " {\"name\":\"pool\",\"type\":\"maxpool\",\"kernel\":2,\"stride\":1},"
    " {\"name\":\"gap\",\"type\":\"global_avgpool\"},"
    " {\"name\":\"drop\",\"type\":\"dropout\",\"p\":0.25},"
    ""
    " {\"name\":\"fc\",\"type\":\"linear\",\"out\":3}]}";

/* ResNet basic blocks: a projection block (its shortcut's batch norm comes
 * after bn2, so compile fuses "downsample.1 + bn2, relu") and an identity
 * block ("bn2 + in, relu"): batch norm with a fused residual. */
static const char *RESNET =
    "{\"name\":\"resnet\",\"num_classes\":3,\"inputs\":[{\"name\":\"x\",\"shape\":[2,5,5]}],"
    "\"blocks\":{\"basic\":{\"params\":{\"out\":null,\"stride\":1,\"down\":false},\"layers\":["
    " {\"name\":\"conv1\",\"type\":\"conv2d\",\"out\":\"$out\",\"kernel\":3,\"stride\":\"$stride\",\"padding\":1,\"bias\":false},"
    " {\"name\":\"bn1\",\"type\":\"batchnorm\"},"
    " {\"name\":\"relu1\",\"type\":\"relu\"},"
    " {\"name\":\"conv2\",\"type\":\"conv2d\",\"out\":\"$out\",\"kernel\":3,\"padding\":1,\"bias\":false},"
    " {\"name\":\"bn2\",\"type\":\"batchnorm\"},"
    " {\"name\":\"downsample.0\",\"type\":\"conv2d\",\"inputs\":[\"in\"],\"if\":\"$down\",\"out\":\"$out\",\"kernel\":1,"
    "  \"stride\":\"$stride\",\"bias\":false},"
    " {\"name\":\"downsample.1\",\"type\":\"batchnorm\",\"if\":\"$down\"},"
    " {\"name\":\"add\",\"type\":\"add\",\"inputs\":[\"bn2\",\"downsample.1\"]},"
    " {\"name\":\"relu2\",\"type\":\"relu\"}]}},"
    "\"layers\":["
    " {\"name\":\"stem\",\"type\":\"conv2d\",\"out\":3,\"kernel\":3,\"padding\":1,\"bias\":false},"
    " {\"name\":\"bn\",\"type\":\"batchnorm\"},"
    " {\"name\":\"relu\",\"type\":\"relu\"},"
    " {\"name\":\"block\",\"type\":\"basic\",\"out\":4,\"stride\":2,\"down\":true,\"repeat\":2,"
    "  \"rest\":{\"stride\":1,\"down\":false}},"
    " {\"name\":\"gap\",\"type\":\"global_avgpool\"},"
    " {\"name\":\"fc\",\"type\":\"linear\",\"out\":3}]}";

/* Sums of sums: the operands of an add share its gradient buffer (planned
 * aliasing), except the output of an add with a fused ReLU, whose backward
 * masks its gradient in place (add1 + relu1 is fused with compile on; c's
 * backward runs after add1's, so a shared buffer would hand it the mask). */
/* Conv, batch norm, ReLU, 2x2 max pool twice (small_cnn's shape): on the CPU
 * in fp32 channels-last each pool runs inside its batch norm. */
static const char *POOLED =
    "{\"name\":\"pooled\",\"num_classes\":3,\"inputs\":[{\"name\":\"x\",\"shape\":[2,8,8]}],\"layers\":["
    " {\"name\":\"conv1\",\"type\":\"conv2d\",\"out\":4,\"kernel\":3,\"padding\":1,\"bias\":false},"
    " {\"name\":\"bn1\",\"type\":\"batchnorm\"},"
    " {\"name\":\"relu1\",\"type\":\"relu\"},"
    " {\"name\":\"pool1\",\"type\":\"maxpool\",\"kernel\":2},"
    " {\"name\":\"conv2\",\"type\":\"conv2d\",\"out\":5,\"kernel\":3,\"padding\":1,\"bias\":false},"
    " {\"name\":\"bn2\",\"type\":\"batchnorm\"},"
    " {\"name\":\"relu2\",\"type\":\"relu\"},"
    " {\"name\":\"pool2\",\"type\":\"maxpool\",\"kernel\":2},"
    " {\"name\":\"flatten\",\"type\":\"flatten\"},"
    " {\"name\":\"fc\",\"type\":\"linear\",\"out\":3}]}";

static const char *NESTED =
    "{\"name\":\"nested\",\"num_classes\":3,\"inputs\":[{\"name\":\"x\",\"shape\":[2,4,4]}],"
    "\"layers\":["
    " {\"name\":\"a\",\"type\":\"conv2d\",\"out\":3,\"kernel\":3,\"padding\":1,\"inputs\":[\"x\"]},"
    " {\"name\":\"b\",\"type\":\"conv2d\",\"out\":3,\"kernel\":1,\"inputs\":[\"x\"]},"
    " {\"name\":\"c\",\"type\":\"conv2d\",\"out\":3,\"kernel\":3,\"padding\":1,\"inputs\":[\"x\"]},"
    " {\"name\":\"add1\",\"type\":\"add\",\"inputs\":[\"a\",\"b\"]},"
    " {\"name\":\"relu1\",\"type\":\"relu\"},"
    " {\"name\":\"add2\",\"type\":\"add\",\"inputs\":[\"relu1\",\"c\"]},"
    " {\"name\":\"d\",\"type\":\"conv2d\",\"out\":3,\"kernel\":1,\"inputs\":[\"x\"]},"
    " {\"name\":\"add3\",\"type\":\"add\",\"inputs\":[\"add2\",\"d\"]},"
    " {\"name\":\"gap\",\"type\":\"global_avgpool\"},"
    " {\"name\":\"fc\",\"type\":\"linear\",\"out\":3}]}";

/* Two inputs mixed by learnable integration weights, concat, avg-pool,
 * flatten, smooth activations. */
static const char *DUAL =
    "{\"name\":\"dual\",\"num_classes\":3,"
    "\"inputs\":[{\"name\":\"rgb\",\"shape\":[3,4,4]},{\"name\":\"bright\",\"shape\":[1,4,4]}],"
    "\"layers\":["
    " {\"name\":\"a\",\"type\":\"conv2d\",\"out\":2,\"kernel\":3,\"padding\":1,\"inputs\":[\"rgb\"]},"
    " {\"name\":\"b\",\"type\":\"conv2d\",\"out\":2,\"kernel\":3,\"padding\":1,\"inputs\":[\"bright\"]},"
    " {\"name\":\"mix\",\"type\":\"weighted_add\",\"inputs\":[\"a\",\"b\"]},"
    " {\"name\":\"t\",\"type\":\"tanh\"},"
    " {\"name\":\"cat\",\"type\":\"concat\",\"inputs\":[\"t\",\"a\"]},"
    " {\"name\":\"g\",\"type\":\"gelu\"},"
    " {\"name\":\"pool\",\"type\":\"avgpool\",\"kernel\":2,\"padding\":1,\"count_include_pad\":false},"
    " {\"name\":\"flat\",\"type\":\"flatten\"},"
    " {\"name\":\"fc1\",\"type\":\"linear\",\"out\":5},"
    " {\"name\":\"s\",\"type\":\"silu\"},"
    " {\"name\":\"fc2\",\"type\":\"linear\",\"out\":3}]}";


static md_model *make(const char *text, const struct md_model_opts *o, md_device *d, int batch)
{
    cJSON *j = NULL;
    cr_assert_eq(md_json_parse(text, "t.json", &j), MD_OK, "%s", md_errmsg());
    md_model *m = NULL;
    cr_assert_eq(md_model_load("t.json", j, o, &m), MD_OK, "%s", md_errmsg());
    cJSON_Delete(j);
    cr_assert_eq(md_model_bind(m, d, batch), MD_OK, "%s", md_errmsg());
    return m;
}

/* Random inputs in the model's layout (values are i.i.d., so layout only
 * matters when two models must see the same batch: then fill NCHW and permute). */
static void fill_inputs(md_model *m, int batch, uint64_t seed)
{
    for (int i = 0; i < md_model_num_inputs(m); i++) {
        int c, h, w;
        md_model_input_shape(m, i, &c, &h, &w);
        size_t n = (size_t)batch * c * h * w;
        float *x = malloc(n * sizeof *x);
        md_rng r;
        md_rng_init(&r, seed + (uint64_t)i);
        for (size_t k = 0; k < n; k++) x[k] = 2.0f * md_rng_next_uniform(&r) - 1.0f;
        if (md_model_get_opts(m)->layout == MD_NHWC) {
            float *y = malloc(n * sizeof *y);
            for (int b = 0; b < batch; b++)
                for (int cc = 0; cc < c; cc++)
                    for (int p = 0; p < h * w; p++)
                        y[((size_t)b * h * w + p) * c + cc] = x[((size_t)b * c + cc) * h * w + p];
            free(x);
            x = y;
        }
        cr_assert_eq(md_dev_upload(md_model_device(m), md_model_input_buffer(m, i), x, n * sizeof *x), MD_OK);
        free(x);
    }
}

struct step_io { int32_t *labels; float *loss; };

static struct step_io step_io_new(md_device *d, int batch)
{
    struct step_io io;
    cr_assert_eq(md_dev_alloc(d, (size_t)batch * 4, (void **)&io.labels, "labels"), MD_OK);
    cr_assert_eq(md_dev_alloc(d, 8, (void **)&io.loss, "loss"), MD_OK);
    int32_t lab[64];
    for (int i = 0; i < batch; i++) lab[i] = (i * 7 + 1) % 3;
    cr_assert_eq(md_dev_upload(d, io.labels, lab, (size_t)batch * 4), MD_OK);
    return io;
}

/* Mean loss of one training forward. */
static double loss_of(md_model *m, struct step_io io, int batch, int backward)
{
    md_device *d = md_model_device(m);
    cr_assert_eq(md_dev_memset0(d, io.loss, 4), MD_OK);
    cr_assert_eq(md_model_forward(m, batch, 1), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_model_loss(m, io.labels, 0.1f, 1.0f / (float)batch, io.loss, NULL), MD_OK, "%s", md_errmsg());
    if (backward) cr_assert_eq(md_model_backward(m), MD_OK, "%s", md_errmsg());
    float l;
    cr_assert_eq(md_dev_download(d, &l, io.loss, 4), MD_OK);
    return (double)l / batch;
}

/* eps: 1e-3 where ReLU/max-pool kinks sit close to the inputs (a larger step
 * crosses them), larger for smooth models (less rounding noise). */
static void gradcheck_on(const char *dev, md_layout layout, const char *text, int batch, double eps_)
{
    md_device *d = th_open_device(dev);
    struct md_model_opts o;
    md_model_opts_default(&o);
    o.seed = 7;
    o.layout = layout;
    md_model *m = make(text, &o, d, batch);
    fill_inputs(m, batch, 99);
    struct step_io io = step_io_new(d, batch);
    md_model_set_step(m, 3);
    loss_of(m, io, batch, 1);
    size_t n = md_model_nparams(m);
    float *p = malloc(n * sizeof *p), *g = malloc(n * sizeof *g);
    cr_assert_eq(md_dev_download(d, g, md_model_grads(m), n * 4), MD_OK);
    cr_assert_eq(md_dev_download(d, p, md_model_params(m), n * 4), MD_OK);
    /* a few elements of every tensor (all of the small ones) */
    int checked = 0, bad = 0;
    for (int t = 0; t < md_model_num_tensors(m); t++) {
        const struct md_param_info *ti = md_model_tensor(m, t);
        size_t stride = ti->numel > 12 ? ti->numel / 12 : 1;
        for (size_t e = 0; e < ti->numel; e += stride) {
            size_t k = ti->offset + e;
            const double eps = eps_;
            float keep = p[k];
            double lp, lm;
            p[k] = keep + (float)eps;
            cr_assert_eq(md_dev_upload(d, md_model_params(m) + k, &p[k], 4), MD_OK);
            lp = loss_of(m, io, batch, 0);
            p[k] = keep - (float)eps;
            cr_assert_eq(md_dev_upload(d, md_model_params(m) + k, &p[k], 4), MD_OK);
            lm = loss_of(m, io, batch, 0);
            p[k] = keep;
            cr_assert_eq(md_dev_upload(d, md_model_params(m) + k, &p[k], 4), MD_OK);
            double fd = (lp - lm) / (2 * eps);
            double err = fabs(fd - (double)g[k]);
            checked++;
            if (err > 2e-3 + 3e-2 * fabs(fd)) {
                bad++;
                fprintf(stderr, "  %s[%zu]: backward %.7g, finite difference %.7g\n", ti->name, e, (double)g[k], fd);
            }
        }
    }
    fprintf(stderr, "%s: %d gradient elements checked, %d off\n", md_model_name(m), checked, bad);
    cr_expect_eq(bad, 0);
    free(p);
    free(g);
    md_dev_free(d, io.labels);
    md_dev_free(d, io.loss);
    md_model_free(m);
    md_device_close(d);
}

static void gradcheck(const char *text, int batch, double eps_) { gradcheck_on("ref", MD_NCHW, text, batch, eps_); }

Test(nn_grad, residual_block_matches_finite_differences, .timeout = 60) { gradcheck(RESIDUAL, 4, 1e-3); }
/* the CPU's batch norm + ReLU + max pool kernel, by finite differences */
Test(nn_grad, fused_max_pool_matches_finite_differences, .timeout = 60)
{
    gradcheck_on("cpu", MD_NHWC, POOLED, 4, 1e-3);
    gradcheck_on("cpu", MD_NCHW, POOLED, 4, 1e-3);
}
Test(nn_grad, two_input_weighted_add_matches_finite_differences, .timeout = 60) { gradcheck(DUAL, 3, 1e-2); }
Test(nn_grad, nested_adds_share_gradients_correctly, .timeout = 60) { gradcheck(NESTED, 3, 1e-2); }
Test(nn_grad, fused_residual_batchnorm_matches_finite_differences, .timeout = 60) { gradcheck(RESNET, 4, 1e-3); }

/* The gradient of a mixing weight is nonzero and its initial value is 1/k. */
Test(nn_grad, integration_weights_start_at_one_over_k)
{
    md_device *d = th_open_device("ref");
    md_model *m = make(DUAL, NULL, d, 2);
    int t = md_model_find_tensor(m, "mix.weight");
    cr_assert(t >= 0);
    const struct md_param_info *ti = md_model_tensor(m, t);
    cr_assert_str_eq(ti->layer_type, "weighted_add");
    float w[2];
    cr_assert_eq(md_dev_download(d, w, md_model_params(m) + ti->offset, 8), MD_OK);
    cr_expect(w[0] == 0.5f && w[1] == 0.5f);
    cr_expect(!ti->decay);
    md_model_free(m);
    md_device_close(d);
}

static int g_apart; /* the devices run a fused residual apart (md_dev_set_batchnorm_residual) */
static int g_nopool; /* the devices run batch norm and max pool apart (md_dev_set_batchnorm_pool) */
static int g_nofilt; /* the convolutions write their own filter gradients (md_dev_set_batchnorm_pool_conv) */

static float *grads_of(const char *name_or_text, int ckpt, int compile, md_layout layout, const char *dev, int batch,
                       size_t *n, float **logits)
{
    md_device *d = th_open_device(dev);
    if (g_apart) md_dev_set_batchnorm_residual(d, 0);
    if (g_nopool) md_dev_set_batchnorm_pool(d, 0);
    if (g_nofilt) md_dev_set_batchnorm_pool_conv(d, 0);
    struct md_model_opts o;
    md_model_opts_default(&o);
    o.grad_ckpt = ckpt;
    o.compile = compile;
    o.layout = layout;
    md_model *m = make(name_or_text, &o, d, batch);
    fill_inputs(m, batch, 5);
    struct step_io io = step_io_new(d, batch);
    loss_of(m, io, batch, 1);
    *n = md_model_nparams(m);
    float *g = malloc(*n * sizeof *g);
    cr_assert_eq(md_dev_download(d, g, md_model_grads(m), *n * 4), MD_OK);
    if (logits) {
        cr_assert_eq(md_model_forward(m, batch, 0), MD_OK, "%s", md_errmsg());
        *logits = malloc((size_t)batch * 3 * sizeof **logits);
        cr_assert_eq(md_dev_download(d, *logits, md_model_logits(m), (size_t)batch * 3 * 4), MD_OK);
    }
    md_dev_free(d, io.labels);
    md_dev_free(d, io.loss);
    md_model_free(m);
    md_device_close(d);
    return g;
}

Test(nn_grad, checkpointed_gradients_are_bit_identical, .timeout = 60)
{
    static const char *devs[] = {"ref", "cpu"};
    for (int k = 0; k < 2; k++) {
        size_t n1, n2, n3;
        float *a = grads_of(RESIDUAL, 0, 1, MD_NCHW, devs[k], 4, &n1, NULL);
        float *b = grads_of(RESIDUAL, 1, 1, MD_NCHW, devs[k], 4, &n2, NULL);
        float *c = grads_of(RESIDUAL, 0, 0, MD_NCHW, devs[k], 4, &n3, NULL);
        cr_assert_eq(n1, n2);
        cr_expect(memcmp(a, b, n1 * 4) == 0, "%s: checkpointed gradients differ", devs[k]);
        cr_expect(memcmp(a, c, n1 * 4) == 0, "%s: gradients without compile (no fusion, no sharing) differ", devs[k]);
        free(a);
        free(b);
        free(c);
    }
}

/* The batch norms compile fused a residual into (those with two inputs). */
static int fused_residuals(const char *text, int compile, int *adds)
{
    *adds = 0;
    cJSON *j = NULL;
    cr_assert_eq(md_json_parse(text, "t.json", &j), MD_OK, "%s", md_errmsg());
    struct md_model_opts o;
    md_model_opts_default(&o);
    o.compile = compile;
    md_model *m = NULL;
    cr_assert_eq(md_model_load("t.json", j, &o, &m), MD_OK, "%s", md_errmsg());
    cJSON_Delete(j);
    cJSON *s = md_model_summary_json(m);
    int n = 0;
    const cJSON *L;
    cJSON_ArrayForEach(L, cJSON_GetObjectItem(s, "layers"))
    {
        const cJSON *t = cJSON_GetObjectItem(L, "type");
        if (cJSON_IsString(t) && !strcmp(t->valuestring, "batchnorm"))
            n += cJSON_GetArraySize(cJSON_GetObjectItem(L, "inputs")) == 2;
        if (cJSON_IsString(t) && !strcmp(t->valuestring, "add")) *adds += cJSON_IsTrue(cJSON_GetObjectItem(L, "fused"));
    }
    cJSON_Delete(s);
    md_model_free(m);
    return n;
}

/* The fused kernels (ref, cpu) and the same model with the residual run
 * apart (as on Metal): the unfused model's gradients (the ref rounds once
 * instead of twice, so close there; bit for bit on the cpu, whose kernel
 * rounds as the separate passes do). */
Test(nn_grad, fused_residual_batchnorm_agrees_with_the_unfused_model, .timeout = 60)
{
    int adds;
    cr_expect_eq(fused_residuals(RESNET, 1, &adds), 2, "both blocks' adds fused into a batch norm");
    cr_expect_eq(adds, 2);
    cr_expect_eq(fused_residuals(RESNET, 0, &adds), 0);
    cr_expect_eq(adds, 0);
    cr_expect_eq(fused_residuals(RESIDUAL, 1, &adds), 0, "bn2 comes before the projection it would add: not fused");
    cr_expect_eq(adds, 0);
    static const md_layout lay[] = {MD_NCHW, MD_NHWC};
    for (int l = 0; l < 2; l++) {
        size_t n[4];
        float *lo[4];
        float *rf = grads_of(RESNET, 0, 1, lay[l], "ref", 4, &n[0], &lo[0]);
        float *ru = grads_of(RESNET, 0, 0, lay[l], "ref", 4, &n[1], &lo[1]);
        float *cf = grads_of(RESNET, 0, 1, lay[l], "cpu", 4, &n[2], &lo[2]);
        float *cu = grads_of(RESNET, 0, 0, lay[l], "cpu", 4, &n[3], &lo[3]);
        float *rc = grads_of(RESNET, 1, 1, lay[l], "ref", 4, &n[3], NULL);
        g_apart = 1;
        float *ra = grads_of(RESNET, 0, 1, lay[l], "ref", 4, &n[3], NULL);
        float *ca = grads_of(RESNET, 0, 1, lay[l], "cpu", 4, &n[3], NULL);
        g_apart = 0;
        cr_expect(memcmp(ra, ru, n[0] * 4) == 0, "ref: the residual apart differs from the unfused add");
        cr_expect(memcmp(ca, cu, n[0] * 4) == 0, "cpu: the residual apart differs from the unfused add");
        free(ra);
        free(ca);
        cr_expect(th_allclose("ref fused vs unfused logits", lo[0], lo[1], 12, 1e-6, 1e-5));
        cr_expect(th_allclose("ref fused vs unfused grads", rf, ru, n[0], 1e-6, 1e-4));
        cr_expect(memcmp(rf, rc, n[0] * 4) == 0, "ref fused: checkpointed gradients differ");
        cr_expect(memcmp(cf, cu, n[0] * 4) == 0, "cpu: the fused residual differs from the unfused add");
        cr_expect(memcmp(lo[2], lo[3], 12 * 4) == 0);
        cr_expect(th_allclose("cpu vs ref grads", cf, rf, n[0], 1e-5, 1e-3));
        free(rf); free(ru); free(cf); free(cu); free(rc);
        for (int k = 0; k < 4; k++) free(lo[k]);
    }
}

/* The max pools a bound model runs inside their batch norms (summary: "fused"). */
static int fused_pools(md_model *m)
{
    cJSON *s = md_model_summary_json(m);
    int n = 0;
    const cJSON *L;
    cJSON_ArrayForEach(L, cJSON_GetObjectItem(s, "layers"))
    {
        const cJSON *t = cJSON_GetObjectItem(L, "type");
        if (cJSON_IsString(t) && !strcmp(t->valuestring, "maxpool")) n += cJSON_IsTrue(cJSON_GetObjectItem(L, "fused"));
    }
    cJSON_Delete(s);
    return n;
}

/* The convolutions whose filter gradient their batch norm's backward writes
 * (summary: "filter_grad_fused"). */
static int fused_filters(md_model *m)
{
    cJSON *s = md_model_summary_json(m);
    int n = 0;
    const cJSON *L;
    cJSON_ArrayForEach(L, cJSON_GetObjectItem(s, "layers"))
    {
        if (!cJSON_IsTrue(cJSON_GetObjectItem(L, "filter_grad_fused"))) continue;
        const cJSON *nm = cJSON_GetObjectItem(L, "name");
        cr_expect(cJSON_IsString(nm) && !strcmp(nm->valuestring, "conv1"), "only the first convolution");
        n++;
    }
    cJSON_Delete(s);
    return n;
}

/* Bound to the CPU in fp32 (either layout; compile on, no checkpointing) the
 * model runs each 2x2 max pool inside its batch norm; elsewhere, and bound
 * again elsewhere, it does not. The fused model's logits and gradients
 * against the same model with the pools apart (the sums' order differs: close,
 * not equal) and against the reference; its ReLU statistics still run.
 * Channels-last, the first batch norm's backward also writes conv1's filter
 * gradient (conv1 reads the model's input, has no bias, and only bn1 reads
 * it), not where the device is told not to (nofilt), and the gradients
 * compare alike. */
Test(nn_grad, fused_max_pool_agrees_with_the_unfused_model, .timeout = 60)
{
    struct { const char *dev; md_layout lay; int compile, ckpt, nopool, nofilt, want, filt; } c[] = {
        {"cpu", MD_NHWC, 1, 0, 0, 0, 2, 1}, {"cpu", MD_NCHW, 1, 0, 0, 0, 2, 0}, {"cpu", MD_NHWC, 0, 0, 0, 0, 0, 0},
        {"cpu", MD_NHWC, 1, 1, 0, 0, 0, 0}, {"cpu", MD_NHWC, 1, 0, 1, 0, 0, 0}, {"ref", MD_NHWC, 1, 0, 0, 0, 0, 0},
        {"cpu", MD_NHWC, 1, 0, 0, 1, 2, 0}};
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
        md_device *d = th_open_device(c[k].dev);
        if (c[k].nopool) md_dev_set_batchnorm_pool(d, 0);
        if (c[k].nofilt) md_dev_set_batchnorm_pool_conv(d, 0);
        struct md_model_opts o;
        md_model_opts_default(&o);
        o.layout = c[k].lay, o.compile = c[k].compile, o.grad_ckpt = c[k].ckpt;
        md_model *m = make(POOLED, &o, d, 4);
        cr_expect_eq(fused_pools(m), c[k].want, "case %zu: %d pools fused, not %d", k, fused_pools(m), c[k].want);
        cr_expect_eq(fused_filters(m), c[k].filt, "case %zu: %d filter gradients handed over", k, fused_filters(m));
        if (c[k].want) { /* bound again to the reference: unfused, and it runs */
            fill_inputs(m, 4, 5);
            struct step_io io = step_io_new(d, 4);
            loss_of(m, io, 4, 1);
            struct md_relu_stat rs[4];
            int nrs = 0;
            cr_assert_eq(md_model_relu_stats(m, rs, 4, &nrs), MD_OK, "%s", md_errmsg());
            cr_expect_eq(nrs, 2);
            cr_expect_str_eq(rs[0].layer, "relu1");
            md_dev_free(d, io.labels);
            md_dev_free(d, io.loss);
            md_device *r = th_open_device("ref");
            cr_assert_eq(md_model_bind(m, r, 4), MD_OK, "%s", md_errmsg());
            cr_expect_eq(fused_pools(m), 0);
            cr_expect_eq(fused_filters(m), 0);
            fill_inputs(m, 4, 5);
            io = step_io_new(r, 4);
            loss_of(m, io, 4, 1);
            md_dev_free(r, io.labels);
            md_dev_free(r, io.loss);
            md_model_free(m);
            md_device_close(r);
        } else
            md_model_free(m);
        md_device_close(d);
    }
    size_t n[3];
    float *lo[3];
    static const md_layout lays[] = {MD_NHWC, MD_NCHW};
    for (int l = 0; l < 2; l++) {
        float *fused = grads_of(POOLED, 0, 1, lays[l], "cpu", 4, &n[0], &lo[0]);
        g_nopool = 1;
        float *apart = grads_of(POOLED, 0, 1, lays[l], "cpu", 4, &n[1], &lo[1]);
        g_nopool = 0;
        float *ref = grads_of(POOLED, 0, 1, lays[l], "ref", 4, &n[2], &lo[2]);
        cr_assert_eq(n[0], n[1]);
        cr_expect(th_allclose("fused vs apart logits", lo[0], lo[1], 12, 1e-6, 1e-5));
        cr_expect(th_allclose("fused vs apart grads", fused, apart, n[0], 1e-6, 1e-4));
        cr_expect(th_allclose("fused vs ref logits", lo[0], lo[2], 12, 1e-5, 1e-4));
        cr_expect(th_allclose("fused vs ref grads", fused, ref, n[0], 1e-5, 1e-3));
        g_nofilt = 1;
        float *own = grads_of(POOLED, 0, 1, lays[l], "cpu", 4, &n[1], NULL);
        g_nofilt = 0;
        cr_expect(th_allclose("filter in bn1 vs in conv1", fused, own, n[0], 1e-6, 1e-4));
        free(own);
        free(fused), free(apart), free(ref);
        for (int k = 0; k < 3; k++) free(lo[k]);
    }
}

Test(nn_grad, channels_last_matches_nchw, .timeout = 60)
{
    size_t n1, n2;
    float *la, *lb;
    float *a = grads_of(DUAL, 0, 1, MD_NCHW, "ref", 3, &n1, &la);
    float *b = grads_of(DUAL, 0, 1, MD_NHWC, "ref", 3, &n2, &lb);
    cr_assert_eq(n1, n2);
    cr_expect(th_allclose("logits", lb, la, 9, 1e-5, 1e-4));
    /* conv weights are stored (K, R, S, C) in NHWC: compare the rest */
    cr_expect(th_allclose("fc grads", b + 2 * 27 + 2 * 9, a + 2 * 27 + 2 * 9, n1 - 2 * 27 - 2 * 9, 1e-5, 1e-3));
    free(a); free(b); free(la); free(lb);
}

Test(nn_grad, cpu_forward_and_gradients_match_reference, .timeout = 60)
{
    md_device *d = th_open_device("cpu");
    int have = md_dev_supports(d, 1) && md_dev_supports(d, 0) && md_dev_supports(d, 4);
    md_device_close(d);
    if (!have) cr_skip("the CPU device has no conv/gemm/batchnorm kernels yet");
    size_t n1, n2;
    float *la, *lb;
    float *a = grads_of(RESIDUAL, 0, 1, MD_NCHW, "ref", 4, &n1, &la);
    float *b = grads_of(RESIDUAL, 0, 1, MD_NCHW, "cpu", 4, &n2, &lb);
    cr_expect(th_allclose("logits cpu vs ref", lb, la, 12, 1e-5, 1e-4));
    cr_expect(th_allclose("grads cpu vs ref", b, a, n1, 1e-5, 1e-3));
    free(a); free(b); free(la); free(lb);
}

Test(nn_grad, init_is_seeded_and_torchvision_like)
{
    md_device *d = th_open_device("ref");
    md_model *m1 = NULL, *m2 = NULL;
    cr_assert_eq(md_model_load("small_cnn", NULL, NULL, &m1), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_model_load("small_cnn", NULL, NULL, &m2), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_model_bind(m1, d, 2), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_model_bind(m2, d, 2), MD_OK, "%s", md_errmsg());
    size_t n = md_model_nparams(m1);
    float *a = malloc(n * 4), *b = malloc(n * 4);
    md_dev_download(d, a, md_model_params(m1), n * 4);
    md_dev_download(d, b, md_model_params(m2), n * 4);
    cr_expect(memcmp(a, b, n * 4) == 0);
    /* conv2: kaiming normal, fan_out = 64*9: std 0.0589 */
    const struct md_param_info *c2 = md_model_tensor(m1, md_model_find_tensor(m1, "conv2.weight"));
    double s = 0, s2 = 0;
    for (size_t i = 0; i < c2->numel; i++) {
        s += a[c2->offset + i];
        s2 += (double)a[c2->offset + i] * a[c2->offset + i];
    }
    double sd = sqrt(s2 / c2->numel - (s / c2->numel) * (s / c2->numel));
    cr_expect(fabs(sd - sqrt(2.0 / 576)) < 0.003, "std %g", sd);
    /* fc1: uniform +-1/sqrt(3136) */
    const struct md_param_info *f = md_model_tensor(m1, md_model_find_tensor(m1, "fc1.weight"));
    float mx = 0;
    for (size_t i = 0; i < f->numel; i++) mx = fmaxf(mx, fabsf(a[f->offset + i]));
    cr_expect(mx <= 1.0f / sqrtf(3136.0f) && mx > 0.95f / sqrtf(3136.0f), "max %g", mx);
    const struct md_param_info *g = md_model_tensor(m1, md_model_find_tensor(m1, "bn1.weight"));
    cr_expect_eq(a[g->offset], 1.0f);
    free(a);
    free(b);
    md_model_free(m1);
    md_model_free(m2);
    md_device_close(d);
}

Test(nn_grad, nonfinite_check_names_the_layer)
{
    md_device *d = th_open_device("ref");
    md_model *m = make(DUAL, NULL, d, 2);
    fill_inputs(m, 2, 1);
    int t = md_model_find_tensor(m, "fc1.weight");
    float inf = INFINITY;
    cr_assert_eq(md_dev_upload(d, md_model_params(m) + md_model_tensor(m, t)->offset + 3, &inf, 4), MD_OK);
    cr_assert_eq(md_model_forward(m, 2, 1), MD_OK);
    char layer[64];
    int found = 0;
    cr_assert_eq(md_model_first_nonfinite(m, layer, sizeof layer, &found), MD_OK, "%s", md_errmsg());
    cr_expect(found);
    cr_expect_str_eq(layer, "fc1");
    md_model_free(m);
    md_device_close(d);
}

#include "core/safetensors.h"

Test(nn_grad, dump_grads_and_init_from_round_trip, .timeout = 60)
{
    md_device *d = th_open_device("ref");
    struct md_model_opts o;
    md_model_opts_default(&o);
    o.layout = MD_NHWC; /* exercises the (K, R, S, C) <-> PyTorch order */
    md_model *m = make(RESIDUAL, &o, d, 4);
    fill_inputs(m, 4, 11);
    char *dir = th_tmpdir();
    char path[512];
    snprintf(path, sizeof path, "%s/g.safetensors", dir);
    int32_t labels[4] = {0, 2, 1, 2};
    cr_assert_eq(md_model_dump_grads(m, labels, 4, 0.0f, path), MD_OK, "%s", md_errmsg());
    size_t n = md_model_nparams(m);
    float *g = malloc(n * 4), *p = malloc(n * 4);
    cr_assert_eq(md_model_get_grads_host(m, g), MD_OK);
    cr_assert_eq(md_model_get_params_host(m, p), MD_OK);
    md_st_file *f = NULL;
    cr_assert_eq(md_st_open(path, &f), MD_OK, "%s", md_errmsg());
    const struct md_param_info *ti = md_model_tensor(m, md_model_find_tensor(m, "block.0.conv1.weight"));
    const struct md_st_tensor *t = md_st_find(f, "grad.block.0.conv1.weight");
    cr_assert(t && t->ndim == 4 && t->shape[0] == 4 && t->shape[1] == 3 && t->shape[2] == 3);
    cr_expect(memcmp(t->data, g + ti->offset, ti->numel * 4) == 0);
    cr_assert(md_st_find(f, "param.fc.bias") && md_st_find(f, "loss") && md_st_find(f, "logits") &&
              md_st_find(f, "input.x") && md_st_find(f, "labels") && md_st_find(f, "buffer.block.0.bn1.running_var"));
    float loss;
    memcpy(&loss, md_st_find(f, "loss")->data, 4);
    cr_expect(loss > 0.5f && loss < 3.0f, "%g", loss);
    md_st_close(f);

    /* write the params (PyTorch order) under their names, shifted by one, and load them */
    md_st_writer *w = NULL;
    cr_assert_eq(md_st_writer_new(&w), MD_OK);
    for (size_t i = 0; i < n; i++) p[i] += 1.0f;
    for (int k = 0; k < md_model_num_tensors(m); k++) {
        const struct md_param_info *pi = md_model_tensor(m, k);
        long long sh[4];
        for (int j = 0; j < pi->ndim; j++) sh[j] = pi->shape[j];
        cr_assert_eq(md_st_writer_add(w, pi->name, MD_F32, pi->ndim, sh, p + pi->offset), MD_OK);
    }
    snprintf(path, sizeof path, "%s/w.safetensors", dir);
    cr_assert_eq(md_st_writer_write(w, path), MD_OK, "%s", md_errmsg());
    md_st_writer_free(w);
    cr_assert_eq(md_model_load_weights(m, path), MD_OK, "%s", md_errmsg());
    float *q = malloc(n * 4);
    cr_assert_eq(md_model_get_params_host(m, q), MD_OK);
    cr_expect(memcmp(p, q, n * 4) == 0);
    /* a file lacking a tensor is refused naming it */
    snprintf(path, sizeof path, "%s/g.safetensors", dir);
    cr_expect_eq(md_model_load_weights(m, path), MD_ERR_DATA);
    cr_expect(strstr(md_errmsg(), "stem.weight") != NULL, "%s", md_errmsg());
    free(g); free(p); free(q);
    th_tmpdir_free(dir);
    md_model_free(m);
    md_device_close(d);
}

/* fp16 and bf16 compute: same model, loss and gradients near fp32's. */
Test(nn_grad, half_compute_tracks_fp32, .timeout = 60)
{
    static const md_dtype types[] = {MD_F16, MD_BF16};
    md_device *d = th_open_device("ref");
    struct md_model_opts o;
    md_model_opts_default(&o);
    md_model *ref = make(DUAL, &o, d, 3);
    fill_inputs(ref, 3, 4);
    struct step_io io = step_io_new(d, 3);
    double l32 = loss_of(ref, io, 3, 1);
    size_t n = md_model_nparams(ref);
    float *g32 = malloc(n * 4), *gh = malloc(n * 4);
    md_dev_download(d, g32, md_model_grads(ref), n * 4);
    for (int k = 0; k < 2; k++) {
        o.compute_dtype = types[k];
        md_model *m = make(DUAL, &o, d, 3);
        cr_assert_not_null(md_model_params_half(m));
        fill_inputs(m, 3, 4);
        double lh = loss_of(m, io, 3, 1);
        md_dev_download(d, gh, md_model_grads(m), n * 4);
        cr_expect(fabs(lh - l32) < 0.02 * fabs(l32), "%s loss %g vs %g", md_dtype_name(types[k]), lh, l32);
        cr_expect(th_allclose(md_dtype_name(types[k]), gh, g32, n, 2e-2, 5e-2));
        md_model_free(m);
    }
    free(g32); free(gh);
    md_dev_free(d, io.labels);
    md_dev_free(d, io.loss);
    md_model_free(ref);
    md_device_close(d);
}

/* ---- gradient buckets (md_model_set_grad_sink) ---------------------------- */

struct sink_rec {
    md_model *m;
    const float *want;     /* the gradients of a run without a sink, or NULL */
    int calls;
    size_t lo[64], n[64];
    int final_ok;          /* each range held its final values when handed */
};

static md_status rec_sink(void *ctx, float *grads, size_t n)
{
    struct sink_rec *r = ctx;
    cr_assert_lt(r->calls, 64);
    size_t lo = (size_t)(grads - md_model_grads(r->m));
    r->lo[r->calls] = lo;
    r->n[r->calls++] = n;
    if (r->want) {
        float *h = malloc(n * sizeof *h);
        cr_assert_eq(md_dev_download(md_model_device(r->m), h, grads, n * sizeof *h), MD_OK);
        if (memcmp(h, r->want + lo, n * sizeof *h) != 0) r->final_ok = 0;
        free(h);
    }
    return MD_OK;
}

/* every element handed exactly once, buckets of at least `bucket` but the
 * last two (the rest of the weights, then the undecayed tensors) */
static void expect_cover(const struct sink_rec *r, size_t nparams, size_t bucket)
{
    unsigned char *seen = calloc(nparams, 1);
    for (int c = 0; c < r->calls; c++) {
        if (c < r->calls - 2) cr_expect_geq(r->n[c], bucket, "bucket %d: %zu elements", c, r->n[c]);
        for (size_t k = 0; k < r->n[c]; k++) seen[r->lo[c] + k]++;
    }
    for (size_t k = 0; k < nparams; k++) cr_assert_eq(seen[k], 1, "element %zu handed %d times", k, seen[k]);
    free(seen);
}

static void buckets_case(md_dtype dt)
{
    md_device *d = th_open_device("cpu");
    struct md_model_opts o;
    md_model_opts_default(&o);
    o.compute_dtype = dt;
    md_model *m = NULL;
    cr_assert_eq(md_model_load("small_cnn", NULL, &o, &m), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_model_bind(m, d, 4), MD_OK, "%s", md_errmsg());
    struct step_io io = step_io_new(d, 4);
    size_t n = md_model_nparams(m);
    float *want = malloc(n * 4), *got = malloc(n * 4);
    fill_inputs(m, 4, 3);
    loss_of(m, io, 4, 1);
    cr_assert_eq(md_dev_download(d, want, md_model_grads(m), n * 4), MD_OK);

    /* small_cnn: conv 288, conv 18,432, fc1 401,408, fc2 1,280 weights */
    struct sink_rec r = {.m = m, .want = want, .final_ok = 1};
    md_model_set_grad_sink(m, 1000, rec_sink, &r);
    loss_of(m, io, 4, 1);
    cr_assert_eq(md_dev_download(d, got, md_model_grads(m), n * 4), MD_OK);
    cr_expect(memcmp(got, want, n * 4) == 0, "the same gradients with buckets");
    cr_expect(r.final_ok, "a bucket was handed before its values were final");
    cr_expect_geq(r.calls, 4, "%d calls", r.calls);
    cr_expect_eq(r.lo[0] + r.n[0], md_model_ndecay(m), "the last layers' weights go first");
    expect_cover(&r, n, 1000);

    /* a rank without samples: zeros in the same buckets */
    struct sink_rec z = {.m = m};
    md_model_set_grad_sink(m, 1000, rec_sink, &z);
    cr_assert_eq(md_model_grads_zero(m), MD_OK, "%s", md_errmsg());
    cr_expect_eq(z.calls, r.calls);
    for (int c = 0; c < r.calls && c < z.calls; c++) {
        cr_expect_eq(z.lo[c], r.lo[c]);
        cr_expect_eq(z.n[c], r.n[c]);
    }
    cr_assert_eq(md_dev_download(d, got, md_model_grads(m), n * 4), MD_OK);
    for (size_t k = 0; k < n; k++) cr_assert_eq(got[k], 0.0f);

    /* a bucket larger than the model: one call for all of it */
    struct sink_rec one = {.m = m};
    md_model_set_grad_sink(m, n + 1, rec_sink, &one);
    loss_of(m, io, 4, 1);
    cr_expect_eq(one.calls, 1);
    cr_expect_eq(one.lo[0], 0);
    cr_expect_eq(one.n[0], n);
    md_model_set_grad_sink(m, 0, NULL, NULL);
    free(want);
    free(got);
    md_dev_free(d, io.labels);
    md_dev_free(d, io.loss);
    md_model_free(m);
    md_device_close(d);
}

Test(nn_grad, gradient_buckets_hand_final_values_once_fp32) { buckets_case(MD_F32); }
/* half precision: each bucket cast from the half gradients before it is handed */
Test(nn_grad, gradient_buckets_hand_final_values_once_bf16) { buckets_case(MD_BF16); }
