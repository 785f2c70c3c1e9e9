/* test_kernels_fixtures.c - the reference kernels (and the CPU backend)
 * against cases computed by PyTorch: the JSON files of test/fixtures/kernels, made by
 * scripts/gen_kernel_fixtures.py (PyTorch in float64 on fp32 inputs).
 * Convolution, pooling and batch-norm fixtures are NCHW; the NHWC variants
 * are derived here by permuting inputs and expected outputs. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/kernels_call.h"
#include "core/json.h"
#include "helpers.h"
#include "kernel_cases.h"

#define FIXTURE_DIR "test/fixtures/kernels"
#define ATOL 1e-5
#define RTOL 1e-5

static cJSON *load(const char *name)
{
    const char *dir = getenv("MPSDIAG_FIXTURES");
    char path[512];
    snprintf(path, sizeof path, "%s/%s.json", dir ? dir : FIXTURE_DIR, name);
    cJSON *doc = NULL;
    cr_assert_eq(md_json_load_file(path, &doc), MD_OK, "%s (run from the repository root)", md_errmsg());
    return doc;
}

/* Tensor `key` as a malloc'd fp32 array; *n its element count. */
static float *tensor(const cJSON *doc, const char *key, size_t *n)
{
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(doc, "tensors"), key);
    cr_assert(t, "fixture has no tensor '%s'", key);
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(t, "data");
    size_t cnt = (size_t)cJSON_GetArraySize(data);
    float *out = malloc((cnt ? cnt : 1) * sizeof *out);
    size_t i = 0;
    const cJSON *v;
    cJSON_ArrayForEach(v, data) out[i++] = (float)v->valuedouble;
    if (n) *n = cnt;
    return out;
}

static double param(const cJSON *doc, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(doc, "params"), key);
    cr_assert(v, "fixture has no param '%s'", key);
    return cJSON_IsBool(v) ? (cJSON_IsTrue(v) ? 1.0 : 0.0) : v->valuedouble;
}

static int param_i(const cJSON *doc, const char *key, int idx)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(doc, "params"), key);
    cr_assert(v, "fixture has no param '%s'", key);
    if (cJSON_IsArray(v)) v = cJSON_GetArrayItem(v, idx);
    return v->valueint;
}

/* (n, c, h, w) NCHW -> NHWC copy. */
static float *to_nhwc(const float *src, int n, int c, int h, int w)
{
    float *d = malloc(sizeof(float) * (size_t)n * c * h * w);
    for (int a = 0; a < n; a++)
        for (int b = 0; b < c; b++)
            for (int i = 0; i < h * w; i++) d[((size_t)a * h * w + i) * c + b] = src[((size_t)a * c + b) * h * w + i];
    return d;
}

static md_device *open_dev(const char *name)
{
    if (strcmp(name, "ref") == 0) return kc_open_ref();
    md_device *dev = NULL;
    struct md_device_opts o = {.threads = 2};
    cr_assert_eq(md_device_open(md_backend_find(name), 0, &o, &dev), MD_OK, "%s", md_errmsg());
    return dev;
}

static const char *const devices[] = {"ref", "cpu"};

static void check(const char *dev, const char *fx, const char *what, const float *got, const float *want, size_t n)
{
    char label[160];
    snprintf(label, sizeof label, "%s %s %s", dev, fx, what);
    cr_assert(th_allclose(label, got, want, n, ATOL, RTOL), "%s differs from PyTorch", label);
}

/* ---- convolution ------------------------------------------------------------------------------------- */

static void conv_fixture(const char *name)
{
    cJSON *doc = load(name);
    struct md_conv2d_args a = {.n = param_i(doc, "n", 0), .c = param_i(doc, "c", 0), .h = param_i(doc, "h", 0),
                               .w = param_i(doc, "w", 0), .k = param_i(doc, "k", 0), .r = param_i(doc, "r", 0),
                               .s = param_i(doc, "s", 0), .stride_h = param_i(doc, "stride", 0),
                               .stride_w = param_i(doc, "stride", 1), .pad_h = param_i(doc, "pad", 0),
                               .pad_w = param_i(doc, "pad", 1), .dil_h = param_i(doc, "dil", 0),
                               .dil_w = param_i(doc, "dil", 1), .groups = param_i(doc, "groups", 0), .dtype = MD_F32};
    a.p = md_conv_out(a.h, a.r, a.stride_h, a.pad_h, a.dil_h);
    a.q = md_conv_out(a.w, a.s, a.stride_w, a.pad_w, a.dil_w);
    size_t nx, nw, ny;
    float *x = tensor(doc, "x", &nx), *w = tensor(doc, "w", &nw), *y = tensor(doc, "y", &ny);
    float *dy = tensor(doc, "dy", NULL), *dx = tensor(doc, "dx", NULL), *dw = tensor(doc, "dw", NULL);
    cr_assert_eq(ny, (size_t)a.n * a.k * a.p * a.q);
    int cg = a.c / a.groups;
    float *ox = malloc(nx * 4), *ow = malloc(nw * 4), *oy = malloc(ny * 4);
    for (size_t di = 0; di < 2; di++)
        for (int lay = 0; lay < 2; lay++) {
            md_device *dev = open_dev(devices[di]);
            struct md_conv2d_args b = a;
            b.layout = lay ? MD_NHWC : MD_NCHW;
            /* NHWC: activations (n, h, w, c), filters (k, r, s, c/g) */
            float *X = lay ? to_nhwc(x, a.n, a.c, a.h, a.w) : x, *W = lay ? to_nhwc(w, a.k, cg, a.r, a.s) : w;
            float *Y = lay ? to_nhwc(y, a.n, a.k, a.p, a.q) : y, *DY = lay ? to_nhwc(dy, a.n, a.k, a.p, a.q) : dy;
            float *DX = lay ? to_nhwc(dx, a.n, a.c, a.h, a.w) : dx, *DW = lay ? to_nhwc(dw, a.k, cg, a.r, a.s) : dw;
            b.x = X, b.wt = W, b.y = oy, b.dy = DY, b.dx = ox, b.dwt = ow;
            cr_assert_eq(md_k_conv2d_fwd(dev, &b), MD_OK, "%s", md_errmsg());
            cr_assert_eq(md_k_conv2d_bwd_data(dev, &b), MD_OK, "%s", md_errmsg());
            cr_assert_eq(md_k_conv2d_bwd_filter(dev, &b), MD_OK, "%s", md_errmsg());
            char what[32];
            snprintf(what, sizeof what, "%s y", md_layout_name(b.layout));
            check(devices[di], name, what, oy, Y, ny);
            snprintf(what, sizeof what, "%s dx", md_layout_name(b.layout));
            check(devices[di], name, what, ox, DX, nx);
            snprintf(what, sizeof what, "%s dw", md_layout_name(b.layout));
            check(devices[di], name, what, ow, DW, nw);
            if (lay) free(X), free(W), free(Y), free(DY), free(DX), free(DW);
            md_device_close(dev);
        }
    free(x), free(w), free(y), free(dy), free(dx), free(dw), free(ox), free(ow), free(oy);
    cJSON_Delete(doc);
}

Test(kernels_fixtures, conv_groups_stride_dilation) { conv_fixture("conv_groups_stride_dil"); }
Test(kernels_fixtures, conv_depthwise_stride2) { conv_fixture("conv_depthwise_stride2"); }
Test(kernels_fixtures, conv_plain_5x5) { conv_fixture("conv_plain_5x5"); }

/* ---- batch normalisation ------------------------------------------------------------------------------ */

static void bn_fixture(const char *name)
{
    cJSON *doc = load(name);
    int n = param_i(doc, "n", 0), c = param_i(doc, "c", 0), hw = param_i(doc, "hw", 0), relu = (int)param(doc, "relu");
    size_t nx;
    float *x = tensor(doc, "x", &nx), *gamma = tensor(doc, "gamma", NULL), *betap = tensor(doc, "beta", NULL);
    float *rm0 = tensor(doc, "running_mean_in", NULL), *rv0 = tensor(doc, "running_var_in", NULL);
    float *y = tensor(doc, "y", NULL), *rm1 = tensor(doc, "running_mean", NULL), *rv1 = tensor(doc, "running_var", NULL);
    float *dy = tensor(doc, "dy", NULL), *dx = tensor(doc, "dx", NULL), *dg = tensor(doc, "dgamma", NULL),
          *db = tensor(doc, "dbeta", NULL);
    float *oy = malloc(nx * 4), *odx = malloc(nx * 4), rm[64], rv[64], sm[64], si[64], odg[64], odb[64];
    for (size_t di = 0; di < 2; di++)
        for (int lay = 0; lay < 2; lay++) {
            md_device *dev = open_dev(devices[di]);
            memcpy(rm, rm0, sizeof(float) * (size_t)c);
            memcpy(rv, rv0, sizeof(float) * (size_t)c);
            float *X = lay ? to_nhwc(x, n, c, hw, 1) : x, *Y = lay ? to_nhwc(y, n, c, hw, 1) : y;
            float *DY = lay ? to_nhwc(dy, n, c, hw, 1) : dy, *DX = lay ? to_nhwc(dx, n, c, hw, 1) : dx;
            struct md_batchnorm_args a = {.n = n, .c = c, .hw = hw, .layout = lay ? MD_NHWC : MD_NCHW, .dtype = MD_F32,
                                          .training = 1, .eps = (float)param(doc, "eps"),
                                          .momentum = (float)param(doc, "momentum"),
                                          .act = relu ? MD_ACT_RELU : MD_ACT_NONE, .x = X, .y = oy, .gamma = gamma,
                                          .beta_p = betap, .running_mean = rm, .running_var = rv, .save_mean = sm,
                                          .save_invstd = si, .dy = DY, .dx = odx, .dgamma = odg, .dbeta = odb};
            cr_assert_eq(md_k_batchnorm_fwd(dev, &a), MD_OK, "%s", md_errmsg());
            cr_assert_eq(md_k_batchnorm_bwd(dev, &a), MD_OK, "%s", md_errmsg());
            const char *l = lay ? "NHWC" : "NCHW";
            char w1[32];
            snprintf(w1, sizeof w1, "%s y", l), check(devices[di], name, w1, oy, Y, nx);
            snprintf(w1, sizeof w1, "%s running_mean", l), check(devices[di], name, w1, rm, rm1, (size_t)c);
            snprintf(w1, sizeof w1, "%s running_var", l), check(devices[di], name, w1, rv, rv1, (size_t)c);
            snprintf(w1, sizeof w1, "%s dx", l), check(devices[di], name, w1, odx, DX, nx);
            snprintf(w1, sizeof w1, "%s dgamma", l), check(devices[di], name, w1, odg, dg, (size_t)c);
            snprintf(w1, sizeof w1, "%s dbeta", l), check(devices[di], name, w1, odb, db, (size_t)c);
            if (lay) free(X), free(Y), free(DY), free(DX);
            md_device_close(dev);
        }
    free(x), free(gamma), free(betap), free(rm0), free(rv0), free(y), free(rm1), free(rv1), free(dy), free(dx);
    free(dg), free(db), free(oy), free(odx);
    cJSON_Delete(doc);
}

Test(kernels_fixtures, batchnorm_train) { bn_fixture("batchnorm_train"); }
Test(kernels_fixtures, batchnorm_train_relu) { bn_fixture("batchnorm_train_relu"); }

/* ---- pooling ------------------------------------------------------------------------------------------------ */

static void pool_fixture(const char *name)
{
    cJSON *doc = load(name);
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(doc, "params"), "kind");
    struct md_pool2d_args a = {.kind = strcmp(kind->valuestring, "max") == 0 ? MD_POOL_MAX : MD_POOL_AVG,
                               .n = param_i(doc, "n", 0), .c = param_i(doc, "c", 0), .h = param_i(doc, "h", 0),
                               .w = param_i(doc, "w", 0), .kh = param_i(doc, "k", 0), .kw = param_i(doc, "k", 1),
                               .stride_h = param_i(doc, "stride", 0), .stride_w = param_i(doc, "stride", 1),
                               .pad_h = param_i(doc, "pad", 0), .pad_w = param_i(doc, "pad", 1),
                               .count_include_pad = (int)param(doc, "count_include_pad"), .dtype = MD_F32};
    a.p = md_conv_out(a.h, a.kh, a.stride_h, a.pad_h, 1);
    a.q = md_conv_out(a.w, a.kw, a.stride_w, a.pad_w, 1);
    size_t nx, ny;
    float *x = tensor(doc, "x", &nx), *y = tensor(doc, "y", &ny), *dy = tensor(doc, "dy", NULL), *dx = tensor(doc, "dx", NULL);
    float *oy = malloc(ny * 4), *odx = malloc(nx * 4);
    for (size_t di = 0; di < 2; di++)
        for (int lay = 0; lay < 2; lay++) {
            md_device *dev = open_dev(devices[di]);
            struct md_pool2d_args b = a;
            b.layout = lay ? MD_NHWC : MD_NCHW;
            float *X = lay ? to_nhwc(x, a.n, a.c, a.h, a.w) : x, *Y = lay ? to_nhwc(y, a.n, a.c, a.p, a.q) : y;
            float *DY = lay ? to_nhwc(dy, a.n, a.c, a.p, a.q) : dy, *DX = lay ? to_nhwc(dx, a.n, a.c, a.h, a.w) : dx;
            b.x = X, b.y_out = oy, b.dy = DY, b.dx = odx;
            cr_assert_eq(md_k_pool2d_fwd(dev, &b), MD_OK, "%s", md_errmsg());
            cr_assert_eq(md_k_pool2d_bwd(dev, &b), MD_OK, "%s", md_errmsg());
            check(devices[di], name, lay ? "NHWC y" : "NCHW y", oy, Y, ny);
            check(devices[di], name, lay ? "NHWC dx" : "NCHW dx", odx, DX, nx);
            if (lay) free(X), free(Y), free(DY), free(DX);
            md_device_close(dev);
        }
    free(x), free(y), free(dy), free(dx), free(oy), free(odx);
    cJSON_Delete(doc);
}

Test(kernels_fixtures, maxpool) { pool_fixture("maxpool_k3s2p1"); }
Test(kernels_fixtures, avgpool_count_include_pad) { pool_fixture("avgpool_k3s2p1_cip"); }
Test(kernels_fixtures, avgpool_exclude_pad) { pool_fixture("avgpool_k3s2p1_nocip"); }

/* ---- cross-entropy, activations, optimizers ------------------------------------------------------------------ */

static void xent_fixture(const char *name)
{
    cJSON *doc = load(name);
    int n = param_i(doc, "n", 0), C = param_i(doc, "classes", 0);
    size_t nl;
    float *logits = tensor(doc, "logits", &nl), *labf = tensor(doc, "labels", NULL), *loss = tensor(doc, "loss_sum", NULL);
    float *dl = tensor(doc, "dlogits", NULL), *corr = tensor(doc, "correct", NULL);
    int32_t lab[64];
    for (int i = 0; i < n; i++) lab[i] = (int32_t)labf[i];
    float *odl = malloc(nl * 4);
    for (size_t di = 0; di < 2; di++) {
        md_device *dev = open_dev(devices[di]);
        float ls = 0.0f;
        int32_t correct = 0;
        struct md_xent_args a = {.n = n, .classes = C, .smoothing = (float)param(doc, "smoothing"), .dtype = MD_F32,
                                 .logits = logits, .labels = lab, .loss_sum = &ls, .correct = &correct,
                                 .dlogits = odl, .grad_scale = 1.0f / (float)n};
        cr_assert_eq(md_k_xent(dev, &a), MD_OK, "%s", md_errmsg());
        check(devices[di], name, "loss_sum", &ls, loss, 1);
        check(devices[di], name, "dlogits", odl, dl, nl);
        cr_assert_eq(correct, (int32_t)corr[0]);
        md_device_close(dev);
    }
    free(logits), free(labf), free(loss), free(dl), free(corr), free(odl);
    cJSON_Delete(doc);
}

Test(kernels_fixtures, xent_label_smoothing) { xent_fixture("xent_smoothing"); }
Test(kernels_fixtures, xent_plain) { xent_fixture("xent_plain"); }

Test(kernels_fixtures, activations)
{
    static const struct { const char *name; int act; } acts[] = {
        {"act_gelu", MD_ACT_GELU}, {"act_gelu_tanh", MD_ACT_GELU_TANH}, {"act_silu", MD_ACT_SILU}, {"act_tanh", MD_ACT_TANH},
        {"act_sigmoid", MD_ACT_SIGMOID}, {"act_leaky_relu", MD_ACT_LEAKY_RELU}};
    for (size_t i = 0; i < sizeof acts / sizeof acts[0]; i++) {
        cJSON *doc = load(acts[i].name);
        size_t n;
        float *x = tensor(doc, "x", &n), *y = tensor(doc, "y", NULL), *dy = tensor(doc, "dy", NULL), *dx = tensor(doc, "dx", NULL);
        float *oy = malloc(n * 4), *odx = malloc(n * 4);
        for (size_t di = 0; di < 2; di++) {
            md_device *dev = open_dev(devices[di]);
            struct md_act_args a = {.act = acts[i].act, .alpha = (float)param(doc, "alpha"), .n = n, .dtype = MD_F32,
                                    .x = x, .y = oy, .dy = dy, .dx = odx};
            cr_assert_eq(md_k_act_fwd(dev, &a), MD_OK);
            cr_assert_eq(md_k_act_bwd(dev, &a), MD_OK);
            check(devices[di], acts[i].name, "y", oy, y, n);
            check(devices[di], acts[i].name, "dx", odx, dx, n);
            md_device_close(dev);
        }
        free(x), free(y), free(dy), free(dx), free(oy), free(odx);
        cJSON_Delete(doc);
    }
}

static void optim_fixture(const char *name)
{
    cJSON *doc = load(name);
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(doc, "params"), "kind");
    int adamw = strcmp(kind->valuestring, "adamw") == 0;
    int n = param_i(doc, "n", 0), steps = param_i(doc, "steps", 0);
    float *p0 = tensor(doc, "params_in", NULL), *grads = tensor(doc, "grads", NULL), *want = tensor(doc, "params", NULL);
    float *p = malloc(sizeof(float) * (size_t)n), *m = calloc((size_t)n, 4), *v = calloc((size_t)n, 4);
    for (size_t di = 0; di < 2; di++) {
        md_device *dev = open_dev(devices[di]);
        memcpy(p, p0, sizeof(float) * (size_t)n);
        memset(m, 0, sizeof(float) * (size_t)n);
        memset(v, 0, sizeof(float) * (size_t)n);
        for (int t = 1; t <= steps; t++) {
            struct md_optim_args a = {.kind = adamw ? MD_OPT_ADAMW : MD_OPT_SGD, .n = (size_t)n,
                                      .lr = (float)param(doc, "lr"), .weight_decay = (float)param(doc, "weight_decay"),
                                      .step = t, .grad_scale = 1.0f, .params = p,
                                      .grads = grads + (size_t)(t - 1) * n, .m = m, .v = v};
            if (adamw) {
                const cJSON *betas = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(doc, "params"), "betas");
                a.beta1 = (float)cJSON_GetArrayItem(betas, 0)->valuedouble;
                a.beta2 = (float)cJSON_GetArrayItem(betas, 1)->valuedouble;
                a.eps = (float)param(doc, "eps");
            } else {
                a.momentum = (float)param(doc, "momentum");
                a.nesterov = (int)param(doc, "nesterov");
            }
            cr_assert_eq(md_k_optim(dev, &a), MD_OK, "%s", md_errmsg());
        }
        check(devices[di], name, "params", p, want, (size_t)n);
        md_device_close(dev);
    }
    free(p0), free(grads), free(want), free(p), free(m), free(v);
    cJSON_Delete(doc);
}

Test(kernels_fixtures, adamw_three_steps) { optim_fixture("adamw_3steps"); }
Test(kernels_fixtures, sgd_nesterov_three_steps) { optim_fixture("sgd_nesterov_3steps"); }
Test(kernels_fixtures, sgd_momentum_three_steps) { optim_fixture("sgd_momentum_3steps"); }

/* ---- layer norm and attention (transformer blocks) ------------------------------------------------------------ */

static const char *const tf_devices[] = {"ref", "cpu"};
#define N_TF_DEVICES (sizeof tf_devices / sizeof tf_devices[0])

static void ln_fixture(const char *name)
{
    cJSON *doc = load(name);
    int rows = param_i(doc, "rows", 0), d = param_i(doc, "d", 0), affine = (int)param(doc, "affine");
    size_t nx;
    float *x = tensor(doc, "x", &nx), *y = tensor(doc, "y", NULL), *mean = tensor(doc, "mean", NULL),
          *rstd = tensor(doc, "rstd", NULL), *dy = tensor(doc, "dy", NULL), *dx = tensor(doc, "dx", NULL);
    float *gamma = affine ? tensor(doc, "gamma", NULL) : NULL, *betap = affine ? tensor(doc, "beta", NULL) : NULL;
    float *dg = affine ? tensor(doc, "dgamma", NULL) : NULL, *db = affine ? tensor(doc, "dbeta", NULL) : NULL;
    float *oy = malloc(nx * 4), *odx = malloc(nx * 4), om[64], orr[64], odg[64], odb[64];
    for (size_t di = 0; di < N_TF_DEVICES; di++) {
        md_device *dev = open_dev(tf_devices[di]);
        struct md_layernorm_args a = {.rows = rows, .d = d, .dtype = MD_F32, .eps = (float)param(doc, "eps"), .x = x,
                                      .y = oy, .gamma = gamma, .beta_p = betap, .mean = om, .rstd = orr, .dy = dy,
                                      .dx = odx, .dgamma = affine ? odg : NULL, .dbeta = affine ? odb : NULL};
        cr_assert_eq(md_k_layernorm_fwd(dev, &a), MD_OK, "%s", md_errmsg());
        cr_assert_eq(md_k_layernorm_bwd(dev, &a), MD_OK, "%s", md_errmsg());
        check(tf_devices[di], name, "y", oy, y, nx);
        check(tf_devices[di], name, "mean", om, mean, (size_t)rows);
        check(tf_devices[di], name, "rstd", orr, rstd, (size_t)rows);
        check(tf_devices[di], name, "dx", odx, dx, nx);
        if (affine) {
            check(tf_devices[di], name, "dgamma", odg, dg, (size_t)d);
            check(tf_devices[di], name, "dbeta", odb, db, (size_t)d);
        }
        md_device_close(dev);
    }
    free(x), free(y), free(mean), free(rstd), free(dy), free(dx), free(gamma), free(betap), free(dg), free(db);
    free(oy), free(odx);
    cJSON_Delete(doc);
}

Test(kernels_fixtures, layernorm_affine) { ln_fixture("layernorm_affine"); }
Test(kernels_fixtures, layernorm_plain) { ln_fixture("layernorm_plain"); }

/* (B, H, T, D) -> (B, T, H, D), the layout of a projection's output split into heads. */
static float *bhtd_to_bthd(const float *src, int b, int h, int t, int d)
{
    float *o = malloc(sizeof(float) * (size_t)b * h * t * d);
    for (int i = 0; i < b; i++)
        for (int j = 0; j < h; j++)
            for (int k = 0; k < t; k++)
                memcpy(o + (((size_t)i * t + k) * h + j) * d, src + (((size_t)i * h + j) * t + k) * d, sizeof(float) * (size_t)d);
    return o;
}

static void attn_fixture(const char *name)
{
    cJSON *doc = load(name);
    int B = param_i(doc, "batch", 0), H = param_i(doc, "heads", 0), tq = param_i(doc, "tq", 0), tk = param_i(doc, "tk", 0),
        D = param_i(doc, "d", 0);
    size_t nq, nk;
    float *q = tensor(doc, "q", &nq), *k = tensor(doc, "k", &nk), *v = tensor(doc, "v", NULL), *o = tensor(doc, "o", NULL),
          *lse = tensor(doc, "lse", NULL), *dO = tensor(doc, "do", NULL), *dq = tensor(doc, "dq", NULL),
          *dk = tensor(doc, "dk", NULL), *dv = tensor(doc, "dv", NULL);
    float *oo = malloc(nq * 4), *olse = malloc(sizeof(float) * (size_t)B * H * tq), *odq = malloc(nq * 4),
          *odk = malloc(nk * 4), *odv = malloc(nk * 4);
    for (size_t di = 0; di < N_TF_DEVICES; di++)
        for (int lay = 0; lay < 2; lay++) { /* contiguous (B, H, T, D), then strided (B, T, H, D) */
            md_device *dev = open_dev(tf_devices[di]);
            struct md_attn_args a = {.batch = B, .heads = H, .tq = tq, .tk = tk, .d = D,
                                     .causal = (int)param(doc, "causal"), .dropout_p = (float)param(doc, "dropout"),
                                     .seed = (uint64_t)param(doc, "seed"), .offset = (uint64_t)param(doc, "offset"),
                                     .dtype = MD_F32};
            float *Q = q, *K = k, *V = v, *O = o, *DO = dO, *DQ = dq, *DK = dk, *DV = dv;
            if (lay) {
                Q = bhtd_to_bthd(q, B, H, tq, D), K = bhtd_to_bthd(k, B, H, tk, D), V = bhtd_to_bthd(v, B, H, tk, D);
                O = bhtd_to_bthd(o, B, H, tq, D), DO = bhtd_to_bthd(dO, B, H, tq, D), DQ = bhtd_to_bthd(dq, B, H, tq, D);
                DK = bhtd_to_bthd(dk, B, H, tk, D), DV = bhtd_to_bthd(dv, B, H, tk, D);
                long long sq[3] = {(long long)tq * H * D, D, (long long)H * D}, sk[3] = {(long long)tk * H * D, D, (long long)H * D};
                memcpy(a.sq, sq, sizeof sq), memcpy(a.so, sq, sizeof sq), memcpy(a.sk, sk, sizeof sk), memcpy(a.sv, sk, sizeof sk);
            }
            a.q = Q, a.k = K, a.v = V, a.o = oo, a.lse = olse, a.d_o = DO, a.dq = odq, a.dk = odk, a.dv = odv;
            cr_assert_eq(md_k_attn_fwd(dev, &a), MD_OK, "%s", md_errmsg());
            cr_assert_eq(md_k_attn_bwd(dev, &a), MD_OK, "%s", md_errmsg());
            const char *l = lay ? "BTHD" : "BHTD";
            char w1[32];
            snprintf(w1, sizeof w1, "%s o", l), check(tf_devices[di], name, w1, oo, O, nq);
            snprintf(w1, sizeof w1, "%s lse", l), check(tf_devices[di], name, w1, olse, lse, (size_t)B * H * tq);
            snprintf(w1, sizeof w1, "%s dq", l), check(tf_devices[di], name, w1, odq, DQ, nq);
            snprintf(w1, sizeof w1, "%s dk", l), check(tf_devices[di], name, w1, odk, DK, nk);
            snprintf(w1, sizeof w1, "%s dv", l), check(tf_devices[di], name, w1, odv, DV, nk);
            if (lay) free(Q), free(K), free(V), free(O), free(DO), free(DQ), free(DK), free(DV);
            md_device_close(dev);
        }
    free(q), free(k), free(v), free(o), free(lse), free(dO), free(dq), free(dk), free(dv);
    free(oo), free(olse), free(odq), free(odk), free(odv);
    cJSON_Delete(doc);
}

Test(kernels_fixtures, attention_plain) { attn_fixture("attention_plain"); }
Test(kernels_fixtures, attention_causal) { attn_fixture("attention_causal"); }
Test(kernels_fixtures, attention_cross_dropout) { attn_fixture("attention_cross_dropout"); }
