/* test_kernels_ref.c - the reference kernels' backward passes against central
 * finite differences of their forward passes, in double.
 *
 * For an op y = f(x) and a fixed random projection r, L(x) = sum_i r_i y_i is
 * evaluated in double at x_j +- eps; (L+ - L-) / (x+ - x-) must equal the
 * analytic backward run with dy = r. Shapes are tiny so the whole file runs in
 * well under a second. Also: accumulate (beta) semantics, BN running
 * statistics, xent's argmax and loss, and hand-computed optimizer steps. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/kernels_call.h"
#include "backend/ref/ref_math.h"
#include "core/rng.h"
#include "helpers.h"
#include "kernel_cases.h"

typedef void (*fwd_fn)(md_device *dev, void *ctx, float *out);

static double project(const float *y, const float *r, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += (double)y[i] * (double)r[i];
    return s;
}

/* Numerical dL/d in[j] for every j, by central differences (in is restored). */
static void numgrad(md_device *dev, fwd_fn f, void *ctx, float *in, size_t n_in, size_t n_out,
                    const float *r, double eps, double *g)
{
    float *y = calloc(n_out, sizeof *y);
    for (size_t j = 0; j < n_in; j++) {
        float x0 = in[j];
        float xp = (float)((double)x0 + eps), xm = (float)((double)x0 - eps);
        in[j] = xp;
        f(dev, ctx, y);
        double lp = project(y, r, n_out);
        in[j] = xm;
        f(dev, ctx, y);
        double lm = project(y, r, n_out);
        in[j] = x0;
        g[j] = (lp - lm) / ((double)xp - (double)xm);
    }
    free(y);
}

static int check_grad(const char *what, const float *analytic, const double *num, size_t n, double atol, double rtol)
{
    double *a = malloc(n * sizeof *a);
    for (size_t i = 0; i < n; i++) a[i] = analytic[i];
    int ok = th_allclose_d(what, a, num, n, atol, rtol);
    free(a);
    return ok;
}

/* ---- convolution ------------------------------------------------------------ */

struct conv_case {
    int n, c, h, w, k, r, s, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups;
};

static const struct conv_case conv_cases[] = {
    {2, 3, 5, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1},
    {1, 4, 7, 5, 6, 3, 2, 2, 1, 1, 0, 1, 2, 2},
    {2, 4, 6, 6, 4, 3, 3, 2, 2, 2, 2, 2, 1, 4},  /* depthwise, padding > kernel/2 */
    {1, 2, 5, 5, 3, 1, 1, 2, 3, 0, 1, 1, 1, 1},  /* 1x1, stride 2x3 */
    {1, 6, 9, 7, 4, 3, 3, 3, 2, 3, 1, 2, 3, 2},  /* dilation, stride 3, padding 3 */
};

struct conv_ctx { struct md_conv2d_args a; };

static void conv_fwd(md_device *dev, void *ctx, float *out)
{
    struct conv_ctx *c = ctx;
    c->a.y = out;
    c->a.beta = 0.0f;
    cr_assert_eq(md_k_conv2d_fwd(dev, &c->a), MD_OK, "%s", md_errmsg());
}

Test(kernels_ref, conv_gradients_all_cases_both_layouts)
{
    md_device *dev = kc_open_ref();
    for (size_t ci = 0; ci < sizeof conv_cases / sizeof conv_cases[0]; ci++)
        for (int lay = 0; lay < 2; lay++) {
            const struct conv_case *k = &conv_cases[ci];
            struct conv_ctx c = {{0}};
            struct md_conv2d_args *a = &c.a;
            a->n = k->n, a->c = k->c, a->h = k->h, a->w = k->w, a->k = k->k, a->r = k->r, a->s = k->s;
            a->stride_h = k->stride_h, a->stride_w = k->stride_w, a->pad_h = k->pad_h, a->pad_w = k->pad_w;
            a->dil_h = k->dil_h, a->dil_w = k->dil_w, a->groups = k->groups;
            a->p = md_conv_out(a->h, a->r, a->stride_h, a->pad_h, a->dil_h);
            a->q = md_conv_out(a->w, a->s, a->stride_w, a->pad_w, a->dil_w);
            a->layout = lay ? MD_NHWC : MD_NCHW;
            a->dtype = MD_F32;
            size_t nx = (size_t)a->n * a->c * a->h * a->w, nw = (size_t)a->k * (a->c / a->groups) * a->r * a->s;
            size_t ny = (size_t)a->n * a->k * a->p * a->q;
            float *x = malloc(nx * 4), *w = malloc(nw * 4), *r = malloc(ny * 4);
            float *dx = malloc(nx * 4), *dw = malloc(nw * 4);
            double *gx = malloc(nx * 8), *gw = malloc(nw * 8);
            kc_fill(x, nx, 10 + ci, -1, 1);
            kc_fill(w, nw, 20 + ci, -1, 1);
            kc_fill(r, ny, 30 + ci, -1, 1);
            a->x = x, a->wt = w;
            numgrad(dev, conv_fwd, &c, x, nx, ny, r, 1e-2, gx);
            numgrad(dev, conv_fwd, &c, w, nw, ny, r, 1e-2, gw);
            a->dy = r, a->dx = dx, a->dwt = dw, a->beta = 0.0f;
            for (size_t i = 0; i < nx; i++) dx[i] = NAN; /* beta 0 must not read it */
            for (size_t i = 0; i < nw; i++) dw[i] = NAN;
            cr_assert_eq(md_k_conv2d_bwd_data(dev, a), MD_OK, "%s", md_errmsg());
            cr_assert_eq(md_k_conv2d_bwd_filter(dev, a), MD_OK, "%s", md_errmsg());
            char what[96];
            snprintf(what, sizeof what, "conv case %zu %s dx", ci, md_layout_name(a->layout));
            cr_assert(check_grad(what, dx, gx, nx, 1e-4, 1e-4), "%s", what);
            snprintf(what, sizeof what, "conv case %zu %s dw", ci, md_layout_name(a->layout));
            cr_assert(check_grad(what, dw, gw, nw, 1e-4, 1e-4), "%s", what);
            /* beta = 1 accumulates onto what is there */
            for (size_t i = 0; i < nx; i++) dx[i] = 1.0f;
            a->beta = 1.0f;
            cr_assert_eq(md_k_conv2d_bwd_data(dev, a), MD_OK);
            for (size_t i = 0; i < nx; i++) gx[i] += 1.0;
            cr_assert(check_grad("conv dx beta=1", dx, gx, nx, 1e-4, 1e-4));
            free(x), free(w), free(r), free(dx), free(dw), free(gx), free(gw);
        }
    md_device_close(dev);
}

/* A 1x1 NCHW convolution is a GEMM per image: checks the layouts' indexing
 * against an independent formula. */
Test(kernels_ref, conv_matches_direct_formula)
{
    md_device *dev = kc_open_ref();
    /* x (1, 2, 3, 3) NHWC, w (3, 2, 2, 2) KRSC, stride 1, no pad -> y (1, 3, 2, 2) */
    float x[18], w[24], y[12];
    kc_fill(x, 18, 1, -1, 1);
    kc_fill(w, 24, 2, -1, 1);
    struct md_conv2d_args a = {.n = 1, .c = 2, .h = 3, .w = 3, .k = 3, .r = 2, .s = 2, .p = 2, .q = 2,
                               .stride_h = 1, .stride_w = 1, .dil_h = 1, .dil_w = 1, .groups = 1,
                               .layout = MD_NHWC, .dtype = MD_F32, .x = x, .wt = w, .y = y};
    cr_assert_eq(md_k_conv2d_fwd(dev, &a), MD_OK);
    for (int k = 0; k < 3; k++)
        for (int p = 0; p < 2; p++)
            for (int q = 0; q < 2; q++) {
                double s = 0;
                for (int r = 0; r < 2; r++)
                    for (int t = 0; t < 2; t++)
                        for (int c = 0; c < 2; c++)
                            s += (double)x[((p + r) * 3 + (q + t)) * 2 + c] * (double)w[((k * 2 + r) * 2 + t) * 2 + c];
                cr_assert_float_eq(y[(p * 2 + q) * 3 + k], s, 1e-5);
            }
    md_device_close(dev);
}

/* ---- GEMM --------------------------------------------------------------------- */

Test(kernels_ref, gemm_all_transposes_alpha_beta_batch)
{
    md_device *dev = kc_open_ref();
    int m = 3, n = 5, k = 4;
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            float A[2 * 24], B[2 * 30], C[2 * 21], C0[2 * 21];
            kc_fill(A, 48, 1, -1, 1);
            kc_fill(B, 60, 2, -1, 1);
            kc_fill(C, 42, 3, -1, 1);
            memcpy(C0, C, sizeof C);
            int lda = (ta ? m : k) + 1, ldb = (tb ? k : n) + 1, ldc = n + 2;
            struct md_gemm_args g = {.trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .alpha = 0.5f,
                                     .beta = 2.0f, .a = A, .lda = lda, .stride_a = 24, .b = B, .ldb = ldb,
                                     .stride_b = 30, .c = C, .ldc = ldc, .stride_c = 21, .batch = 2, .dtype = MD_F32};
            cr_assert_eq(md_k_gemm(dev, &g), MD_OK);
            for (int b = 0; b < 2; b++)
                for (int i = 0; i < m; i++)
                    for (int j = 0; j < n; j++) {
                        double s = 0;
                        for (int l = 0; l < k; l++)
                            s += (double)A[b * 24 + (ta ? l * lda + i : i * lda + l)] *
                                 (double)B[b * 30 + (tb ? j * ldb + l : l * ldb + j)];
                        double want = 0.5 * s + 2.0 * (double)C0[b * 21 + i * ldc + j];
                        cr_assert_float_eq(C[b * 21 + i * ldc + j], want, 1e-5, "ta %d tb %d", ta, tb);
                    }
        }
    md_device_close(dev);
}

/* ---- batch normalisation -------------------------------------------------------- */

struct bn_ctx { struct md_batchnorm_args a; float rm[8], rv[8], sm[8], si[8]; };

static void bn_fwd(md_device *dev, void *ctx, float *out)
{
    struct bn_ctx *c = ctx;
    c->a.y = out;
    c->a.beta = 0.0f;
    c->a.running_mean = c->rm;
    c->a.running_var = c->rv;
    c->a.save_mean = c->sm;
    c->a.save_invstd = c->si;
    cr_assert_eq(md_k_batchnorm_fwd(dev, &c->a), MD_OK, "%s", md_errmsg());
}

Test(kernels_ref, batchnorm_gradients)
{
    md_device *dev = kc_open_ref();
    int n = 3, c = 4, hw = 5;
    size_t nx = (size_t)n * c * hw;
    for (int lay = 0; lay < 2; lay++)
        for (int training = 0; training < 2; training++)
            for (int relu = 0; relu < 2; relu++) {
                struct bn_ctx k;
                memset(&k, 0, sizeof k);
                float x[60], y[60], r[60], dx[60], gamma[4], betap[4], dg[4], db[4];
                double gx[60], gg[4], gb[4];
                kc_fill(x, nx, 5, -2, 3);
                kc_fill(r, nx, 6, -1, 1);
                kc_fill(gamma, 4, 7, 0.5f, 1.5f);
                kc_fill(betap, 4, 8, -0.5f, 0.5f);
                for (int i = 0; i < c; i++) k.rm[i] = 0.1f * (float)i, k.rv[i] = 1.0f + 0.2f * (float)i;
                struct md_batchnorm_args *a = &k.a;
                a->n = n, a->c = c, a->hw = hw, a->layout = lay ? MD_NHWC : MD_NCHW, a->dtype = MD_F32;
                a->training = training, a->eps = 1e-5f, a->momentum = 0.0f; /* keep running stats fixed */
                a->act = relu ? MD_ACT_RELU : MD_ACT_NONE;
                a->x = x, a->gamma = gamma, a->beta_p = betap;
                numgrad(dev, bn_fwd, &k, x, nx, nx, r, 1e-3, gx);
                numgrad(dev, bn_fwd, &k, gamma, 4, nx, r, 1e-3, gg);
                numgrad(dev, bn_fwd, &k, betap, 4, nx, r, 1e-3, gb);
                bn_fwd(dev, &k, y);
                a->y = y, a->dy = r, a->dx = dx, a->dgamma = dg, a->dbeta = db, a->beta = 0.0f;
                cr_assert_eq(md_k_batchnorm_bwd(dev, a), MD_OK, "%s", md_errmsg());
                char what[96];
                snprintf(what, sizeof what, "bn %s training %d relu %d", md_layout_name(a->layout), training, relu);
                cr_assert(check_grad(what, dx, gx, nx, 2e-3, 2e-3), "%s dx", what);
                cr_assert(check_grad(what, dg, gg, 4, 2e-3, 2e-3), "%s dgamma", what);
                cr_assert(check_grad(what, db, gb, 4, 2e-3, 2e-3), "%s dbeta", what);
            }
    md_device_close(dev);
}

Test(kernels_ref, batchnorm_running_stats_unbiased_update)
{
    md_device *dev = kc_open_ref();
    /* one channel, 4 values 1,2,3,6: mean 3, biased var 3.5, unbiased 14/3 */
    float x[4] = {1, 2, 3, 6}, y[4], rm = 1.0f, rv = 2.0f, sm, si;
    struct md_batchnorm_args a = {.n = 2, .c = 1, .hw = 2, .dtype = MD_F32, .training = 1, .eps = 1e-5f,
                                  .momentum = 0.1f, .x = x, .y = y, .running_mean = &rm, .running_var = &rv,
                                  .save_mean = &sm, .save_invstd = &si};
    cr_assert_eq(md_k_batchnorm_fwd(dev, &a), MD_OK);
    cr_assert_float_eq(rm, 0.9 * 1.0 + 0.1 * 3.0, 1e-6);
    cr_assert_float_eq(rv, 0.9 * 2.0 + 0.1 * 14.0 / 3.0, 1e-6);
    cr_assert_float_eq(sm, 3.0, 1e-6);
    cr_assert_float_eq(si, 1.0 / sqrt(3.5 + 1e-5), 1e-6);
    cr_assert_float_eq(y[3], 3.0 * si, 1e-5);
    md_device_close(dev);
}

/* ---- activations ------------------------------------------------------------------ */

struct act_ctx { struct md_act_args a; };

static void act_fwd(md_device *dev, void *ctx, float *out)
{
    struct act_ctx *c = ctx;
    c->a.y = out;
    c->a.beta = 0.0f;
    cr_assert_eq(md_k_act_fwd(dev, &c->a), MD_OK);
}

Test(kernels_ref, activation_gradients_and_values)
{
    md_device *dev = kc_open_ref();
    enum { N = 41 };
    for (int act = 0; act < MD_ACT_COUNT; act++) {
        float x[N], r[N], dx[N];
        double gx[N];
        /* -3 .. 3 avoiding the kink at 0 by more than eps */
        for (int i = 0; i < N; i++) x[i] = -3.0f + 6.0f * (float)i / (N - 1) + 0.0123f;
        kc_fill(r, N, 3, -1, 1);
        struct act_ctx c = {{.act = act, .alpha = 0.1f, .n = N, .dtype = MD_F32, .x = x}};
        numgrad(dev, act_fwd, &c, x, N, N, r, 1e-3, gx);
        c.a.dy = r, c.a.dx = dx, c.a.beta = 0.0f;
        cr_assert_eq(md_k_act_bwd(dev, &c.a), MD_OK);
        char what[64];
        snprintf(what, sizeof what, "act %d", act);
        cr_assert(check_grad(what, dx, gx, N, 1e-3, 1e-3), "%s", what);
    }
    /* values at known points: GELU(1) = 0.8413447, SiLU(1) = 0.7310586 */
    cr_assert_float_eq(md_act_d(MD_ACT_GELU, 1.0, 0), 0.841344746, 1e-8);
    cr_assert_float_eq(md_act_d(MD_ACT_SILU, 1.0, 0), 0.731058579, 1e-8);
    cr_assert_float_eq(md_act_d(MD_ACT_LEAKY_RELU, -2.0, 0.01), -0.02, 1e-12);
    md_device_close(dev);
}

/* ---- pooling -------------------------------------------------------------------------- */

struct pool_ctx { struct md_pool2d_args a; };

static void pool_fwd(md_device *dev, void *ctx, float *out)
{
    struct pool_ctx *c = ctx;
    c->a.y_out = out;
    c->a.beta = 0.0f;
    cr_assert_eq(md_k_pool2d_fwd(dev, &c->a), MD_OK, "%s", md_errmsg());
}

Test(kernels_ref, pooling_gradients)
{
    md_device *dev = kc_open_ref();
    static const int cases[][6] = {/* kh kw sh sw ph pw */
                                   {2, 2, 2, 2, 0, 0}, {3, 3, 2, 2, 1, 1}, {3, 2, 1, 2, 1, 0}, {2, 3, 3, 1, 1, 1}};
    for (size_t ci = 0; ci < 4; ci++)
        for (int kind = 0; kind < 2; kind++)
            for (int cip = 0; cip < 2; cip++)
                for (int lay = 0; lay < 2; lay++) {
                    if (kind == MD_POOL_MAX && cip) continue;
                    struct pool_ctx c = {{0}};
                    struct md_pool2d_args *a = &c.a;
                    a->kind = kind, a->n = 2, a->c = 3, a->h = 7, a->w = 6;
                    a->kh = cases[ci][0], a->kw = cases[ci][1], a->stride_h = cases[ci][2];
                    a->stride_w = cases[ci][3], a->pad_h = cases[ci][4], a->pad_w = cases[ci][5];
                    a->p = md_conv_out(a->h, a->kh, a->stride_h, a->pad_h, 1);
                    a->q = md_conv_out(a->w, a->kw, a->stride_w, a->pad_w, 1);
                    a->count_include_pad = cip, a->layout = lay ? MD_NHWC : MD_NCHW, a->dtype = MD_F32;
                    size_t nx = 2 * 3 * 7 * 6, ny = (size_t)2 * 3 * a->p * a->q;
                    float x[252], r[252], dx[252];
                    double gx[252];
                    kc_fill_distinct(x, nx, 40 + ci, -2, 2); /* grid step > 2 eps: unique maxima */
                    kc_fill(r, ny, 41, -1, 1);
                    a->x = x;
                    numgrad(dev, pool_fwd, &c, x, nx, ny, r, 1e-3, gx);
                    a->dy = r, a->dx = dx, a->beta = 0.0f;
                    cr_assert_eq(md_k_pool2d_bwd(dev, a), MD_OK);
                    char what[96];
                    snprintf(what, sizeof what, "pool case %zu kind %d cip %d %s", ci, kind, cip,
                             md_layout_name(a->layout));
                    cr_assert(check_grad(what, dx, gx, nx, 1e-3, 1e-3), "%s", what);
                }
    md_device_close(dev);
}

Test(kernels_ref, maxpool_backward_goes_to_first_maximum)
{
    md_device *dev = kc_open_ref();
    float x[4] = {5, 5, 1, 5}, y, dy = 2.0f, dx[4];
    struct md_pool2d_args a = {.kind = MD_POOL_MAX, .n = 1, .c = 1, .h = 2, .w = 2, .p = 1, .q = 1, .kh = 2,
                               .kw = 2, .stride_h = 2, .stride_w = 2, .dtype = MD_F32, .x = x, .y_out = &y,
                               .dy = &dy, .dx = dx};
    cr_assert_eq(md_k_pool2d_fwd(dev, &a), MD_OK);
    cr_assert_eq(md_k_pool2d_bwd(dev, &a), MD_OK);
    cr_assert_float_eq(y, 5.0, 0);
    cr_assert(dx[0] == 2.0f && dx[1] == 0.0f && dx[2] == 0.0f && dx[3] == 0.0f);
    md_device_close(dev);
}

/* ---- global average pooling, bias, dropout ------------------------------------------------ */

struct gap_ctx { struct md_gap_args a; };

static void gap_fwd(md_device *dev, void *ctx, float *out)
{
    struct gap_ctx *c = ctx;
    c->a.y = out;
    c->a.beta = 0.0f;
    cr_assert_eq(md_k_gap_fwd(dev, &c->a), MD_OK);
}

Test(kernels_ref, gap_gradients)
{
    md_device *dev = kc_open_ref();
    for (int lay = 0; lay < 2; lay++) {
        float x[3 * 5 * 7], r[15], dx[105];
        double gx[105];
        kc_fill(x, 105, 1, -1, 1);
        kc_fill(r, 15, 2, -1, 1);
        struct gap_ctx c = {{.n = 3, .c = 5, .hw = 7, .layout = lay ? MD_NHWC : MD_NCHW, .dtype = MD_F32, .x = x}};
        numgrad(dev, gap_fwd, &c, x, 105, 15, r, 1e-2, gx);
        c.a.dy = r, c.a.dx = dx;
        cr_assert_eq(md_k_gap_bwd(dev, &c.a), MD_OK);
        cr_assert(check_grad("gap", dx, gx, 105, 1e-4, 1e-4));
    }
    md_device_close(dev);
}

struct bias_ctx { struct md_bias_args a; const float *x; size_t n; };

static void bias_fwd(md_device *dev, void *ctx, float *out)
{
    struct bias_ctx *c = ctx;
    memcpy(out, c->x, c->n * sizeof *out);
    c->a.y = out;
    cr_assert_eq(md_k_bias_add(dev, &c->a), MD_OK);
}

Test(kernels_ref, bias_gradient)
{
    md_device *dev = kc_open_ref();
    for (int lay = 0; lay < 2; lay++) {
        float x[2 * 3 * 5], r[30], bias[3], db[3];
        double gb[3];
        kc_fill(x, 30, 1, -1, 1);
        kc_fill(r, 30, 2, -1, 1);
        kc_fill(bias, 3, 3, -1, 1);
        struct bias_ctx c = {{.n = 2, .c = 3, .hw = 5, .layout = lay ? MD_NHWC : MD_NCHW, .dtype = MD_F32,
                              .bias = bias}, x, 30};
        numgrad(dev, bias_fwd, &c, bias, 3, 30, r, 1e-2, gb);
        db[0] = db[1] = db[2] = 0.5f;
        c.a.dy = r, c.a.dbias = db, c.a.beta = 1.0f;
        cr_assert_eq(md_k_bias_grad(dev, &c.a), MD_OK);
        for (int i = 0; i < 3; i++) gb[i] += 0.5;
        cr_assert(check_grad("bias grad", db, gb, 3, 1e-4, 1e-4));
    }
    md_device_close(dev);
}

struct chs_ctx { struct md_chscale_args a; };

static void chs_fwd(md_device *dev, void *ctx, float *out)
{
    struct chs_ctx *c = ctx;
    c->a.y = out;
    cr_assert_eq(md_k_chscale_fwd(dev, &c->a), MD_OK);
}

/* The per-feature scale: dx and dg against central differences, each
 * accumulating onto 0.5 (beta 1). */
Test(kernels_ref, chscale_gradients)
{
    md_device *dev = kc_open_ref();
    enum { R = 7, D = 5 };
    float x[R * D], r[R * D], g[D], dx[R * D], dg[D];
    double nx[R * D], ng[D];
    kc_fill(x, R * D, 11, -1, 1);
    kc_fill(r, R * D, 12, -1, 1);
    kc_fill(g, D, 13, -1, 1);
    struct chs_ctx c = {{.rows = R, .d = D, .dtype = MD_F32, .x = x, .g = g}};
    numgrad(dev, chs_fwd, &c, x, R * D, R * D, r, 1e-2, nx);
    numgrad(dev, chs_fwd, &c, g, D, R * D, r, 1e-2, ng);
    for (int i = 0; i < R * D; i++) dx[i] = 0.5f, nx[i] += 0.5;
    for (int i = 0; i < D; i++) dg[i] = 0.5f, ng[i] += 0.5;
    c.a.dy = r, c.a.dx = dx, c.a.dg = dg, c.a.beta = 1.0f, c.a.beta_g = 1.0f;
    cr_assert_eq(md_k_chscale_bwd(dev, &c.a), MD_OK);
    cr_assert(check_grad("chscale dx", dx, nx, R * D, 1e-4, 1e-4));
    cr_assert(check_grad("chscale dg", dg, ng, D, 1e-4, 1e-4));
    md_device_close(dev);
}

struct drop_ctx { struct md_dropout_args a; };

static void drop_fwd(md_device *dev, void *ctx, float *out)
{
    struct drop_ctx *c = ctx;
    c->a.y = out;
    cr_assert_eq(md_k_dropout_fwd(dev, &c->a), MD_OK);
}

Test(kernels_ref, dropout_gradient_mask_and_rate)
{
    md_device *dev = kc_open_ref();
    enum { N = 2000 };
    float *x = malloc(N * 4), *r = malloc(N * 4), *dx = malloc(N * 4), *dx2 = malloc(N * 4);
    double *gx = malloc(N * 8);
    uint8_t *mask = malloc(N);
    kc_fill(x, N, 1, -1, 1);
    kc_fill(r, N, 2, -1, 1);
    struct drop_ctx c = {{.n = N, .p = 0.3f, .seed = 99, .offset = 1000, .dtype = MD_F32, .x = x, .mask = mask}};
    numgrad(dev, drop_fwd, &c, x, 200, N, r, 1e-2, gx); /* the first 200 inputs suffice */
    c.a.dy = r, c.a.dx = dx;
    cr_assert_eq(md_k_dropout_bwd(dev, &c.a), MD_OK);
    cr_assert(check_grad("dropout", dx, gx, 200, 1e-4, 1e-4));
    int kept = 0;
    for (int i = 0; i < N; i++) {
        kept += mask[i];
        cr_assert_eq(mask[i], !(md_rng_uniform(99, 1000 + (uint64_t)i) < 0.3f));
    }
    cr_assert(kept > 1300 && kept < 1500, "kept %d of 2000 at p 0.3", kept);
    /* without the mask the same one is recomputed from (seed, offset) */
    c.a.mask = NULL, c.a.dx = dx2;
    cr_assert_eq(md_k_dropout_bwd(dev, &c.a), MD_OK);
    cr_assert(memcmp(dx, dx2, N * 4) == 0);
    free(x), free(r), free(dx), free(dx2), free(gx), free(mask);
    md_device_close(dev);
}

/* ---- softmax cross-entropy ------------------------------------------------------------------ */

struct xent_ctx { struct md_xent_args a; float loss; };

static void xent_fwd(md_device *dev, void *ctx, float *out)
{
    struct xent_ctx *c = ctx;
    c->loss = 0.0f;
    c->a.loss_sum = &c->loss;
    c->a.dlogits = NULL;
    c->a.correct = NULL;
    cr_assert_eq(md_k_xent(dev, &c->a), MD_OK);
    out[0] = c->loss;
}

Test(kernels_ref, xent_gradient_loss_and_accuracy)
{
    md_device *dev = kc_open_ref();
    for (int sm = 0; sm < 2; sm++) {
        enum { N = 4, C = 7 };
        float logits[N * C], dl[N * C], one = 1.0f;
        double g[N * C];
        int32_t labels[N] = {0, 6, 3, 2};
        kc_fill(logits, N * C, 3, -3, 3);
        struct xent_ctx c = {{.n = N, .classes = C, .smoothing = sm ? 0.1f : 0.0f, .dtype = MD_F32,
                              .logits = logits, .labels = labels, .grad_scale = 1.0f}, 0};
        numgrad(dev, xent_fwd, &c, logits, N * C, 1, &one, 1e-3, g);
        float loss = 2.0f;
        int32_t correct = 1;
        c.a.loss_sum = &loss, c.a.correct = &correct, c.a.dlogits = dl;
        cr_assert_eq(md_k_xent(dev, &c.a), MD_OK);
        cr_assert(check_grad("xent", dl, g, N * C, 1e-3, 1e-3));
        /* loss by hand, accumulated onto 2 */
        double want = 0;
        int right = 0;
        for (int i = 0; i < N; i++) {
            double mx = -1e30, se = 0;
            int arg = 0;
            for (int j = 0; j < C; j++)
                if (logits[i * C + j] > mx) mx = logits[i * C + j], arg = j;
            for (int j = 0; j < C; j++) se += exp(logits[i * C + j] - mx);
            for (int j = 0; j < C; j++) {
                double t = (j == labels[i] ? 1.0 - c.a.smoothing : 0.0) + (double)c.a.smoothing / C;
                want -= t * (logits[i * C + j] - mx - log(se));
            }
            right += arg == labels[i];
        }
        cr_assert_float_eq(loss, 2.0 + want, 1e-5);
        cr_assert_eq(correct, 1 + right);
    }
    /* ties: argmax is the lowest index */
    float lg[3] = {1, 2, 2};
    int32_t lab = 1, correct = 0;
    float loss = 0;
    struct md_xent_args a = {.n = 1, .classes = 3, .dtype = MD_F32, .logits = lg, .labels = &lab,
                             .loss_sum = &loss, .correct = &correct, .grad_scale = 1};
    cr_assert_eq(md_k_xent(dev, &a), MD_OK);
    cr_assert_eq(correct, 1);
    lab = 5;
    cr_assert_eq(md_k_xent(dev, &a), MD_ERR_DATA);
    cr_assert(strstr(md_errmsg(), "label 5"), "%s", md_errmsg());
    md_device_close(dev);
}

/* ---- optimizer, cast, permute, chslice, ew, reduce ---------------------------------------------- */

Test(kernels_ref, sgd_and_adamw_by_hand)
{
    md_device *dev = kc_open_ref();
    /* SGD momentum 0.9 nesterov wd 0.1 lr 0.5: step 1 buf = g, step 2 buf = 0.9 buf + g */
    float p = 1.0f, g = 0.2f, buf = 123.0f, gs = 2.0f;
    uint16_t half;
    struct md_optim_args o = {.kind = MD_OPT_SGD, .n = 1, .lr = 0.5f, .momentum = 0.9f, .weight_decay = 0.1f,
                              .nesterov = 1, .step = 1, .grad_scale = 0.5f, .grad_scale_dev = &gs,
                              .params = &p, .grads = &g, .m = &buf, .params_half = &half, .half_dtype = MD_BF16};
    cr_assert_eq(md_k_optim(dev, &o), MD_OK);
    double gg = 0.2 * 1.0 + 0.1 * 1.0, b = gg, pp = 1.0 - 0.5 * (gg + 0.9 * b);
    cr_assert_float_eq(buf, b, 1e-7);
    cr_assert_float_eq(p, pp, 1e-6);
    cr_assert_eq(half, md_f32_to_bf16(p));
    o.step = 2;
    cr_assert_eq(md_k_optim(dev, &o), MD_OK);
    gg = 0.2 + 0.1 * pp, b = 0.9 * b + gg, pp = pp - 0.5 * (gg + 0.9 * b);
    cr_assert_float_eq(p, pp, 1e-6);
    /* AdamW, two steps */
    float q = 1.0f, m = 0, v = 0, gq = 0.3f;
    struct md_optim_args w = {.kind = MD_OPT_ADAMW, .n = 1, .lr = 0.01f, .weight_decay = 0.1f, .beta1 = 0.9f,
                              .beta2 = 0.999f, .eps = 1e-8f, .step = 1, .grad_scale = 1.0f, .params = &q,
                              .grads = &gq, .m = &m, .v = &v};
    double qq = 1, mm = 0, vv = 0;
    for (int t = 1; t <= 2; t++) {
        w.step = t;
        cr_assert_eq(md_k_optim(dev, &w), MD_OK);
        qq *= 1 - 0.01 * 0.1;
        mm = 0.9 * mm + 0.1 * (double)0.3f;
        vv = 0.999 * vv + 0.001 * (double)0.3f * (double)0.3f;
        qq -= 0.01 * (mm / (1 - pow(0.9, t))) / (sqrt(vv / (1 - pow(0.999, t))) + 1e-8);
        cr_assert_float_eq(q, qq, 1e-6);
    }
    md_device_close(dev);
}

Test(kernels_ref, cast_permute_chslice_ew_reduce)
{
    md_device *dev = kc_open_ref();
    float x[2 * 3 * 2 * 2], nhwc[24], back[24];
    kc_fill(x, 24, 1, -1, 1);
    struct md_permute_args pa = {.n = 2, .c = 3, .h = 2, .w = 2, .to_nhwc = 1, .dtype = MD_F32, .src = x, .dst = nhwc};
    cr_assert_eq(md_k_permute(dev, &pa), MD_OK);
    cr_assert_eq(nhwc[((1 * 2 + 1) * 2 + 0) * 3 + 2], x[((1 * 3 + 2) * 2 + 1) * 2 + 0]);
    pa.to_nhwc = 0, pa.src = nhwc, pa.dst = back;
    cr_assert_eq(md_k_permute(dev, &pa), MD_OK);
    cr_assert(memcmp(x, back, sizeof x) == 0);
    /* cast round trip via bf16 and fp16 */
    uint16_t h[24];
    float y[24];
    for (int t = MD_F16; t <= MD_BF16; t++) {
        struct md_cast_args ca = {.n = 24, .src_type = MD_F32, .dst_type = (md_dtype)t, .src = x, .dst = h};
        cr_assert_eq(md_k_cast(dev, &ca), MD_OK);
        ca.src_type = (md_dtype)t, ca.dst_type = MD_F32, ca.src = h, ca.dst = y;
        cr_assert_eq(md_k_cast(dev, &ca), MD_OK);
        cr_assert(th_allclose("cast", y, x, 24, 0, t == MD_F16 ? 1e-3 : 8e-3));
    }
    struct md_cast_args bad = {.n = 1, .src_type = MD_I32, .dst_type = MD_F32, .src = h, .dst = y};
    cr_assert_eq(md_k_cast(dev, &bad), MD_ERR_UNSUPPORTED);
    /* chslice: channels 1..2 of a 3-channel NHWC tensor into channels 2..3 of a 4-channel one, accumulate */
    float dst[2 * 4 * 4];
    for (int i = 0; i < 32; i++) dst[i] = 1.0f;
    struct md_chslice_args cs = {.n = 2, .hw = 4, .cc = 2, .src_c = 3, .src_off = 1, .dst_c = 4, .dst_off = 2,
                                 .layout = MD_NHWC, .dtype = MD_F32, .src = nhwc, .dst = dst, .beta = 1.0f};
    cr_assert_eq(md_k_chslice(dev, &cs), MD_OK);
    cr_assert_float_eq(dst[(1 * 4 + 3) * 4 + 3], 1.0f + nhwc[(1 * 4 + 3) * 3 + 2], 1e-7);
    cr_assert_float_eq(dst[(1 * 4 + 3) * 4 + 1], 1.0f, 0);
    /* ew and reduce */
    float a[5] = {1, 2, 3, 4, 5}, b[5] = {1, 1, 1, 1, 2}, out[5], s = 3.0f, r = 10.0f;
    struct md_ew_args e = {.op = MD_EW_AXPBY, .n = 5, .dtype = MD_F32, .alpha = 2, .beta = -1, .scale_dev = &s,
                           .a = a, .b = b, .y = out};
    cr_assert_eq(md_k_ew(dev, &e), MD_OK);
    cr_assert_float_eq(out[4], 2 * 3 * 5 - 2, 0);
    struct md_reduce_args ra = {.op = MD_RED_DOT, .n = 5, .dtype = MD_F32, .a = a, .b = b, .out = &r, .beta = 1};
    cr_assert_eq(md_k_reduce(dev, &ra), MD_OK);
    cr_assert_float_eq(r, 10 + 1 + 2 + 3 + 4 + 10, 0);
    a[2] = INFINITY;
    ra.op = MD_RED_SUMSQ, ra.beta = 0;
    cr_assert_eq(md_k_reduce(dev, &ra), MD_OK);
    cr_assert(!isfinite(r));
    md_device_close(dev);
}

/* ---- layer norm, softmax, attention ------------------------------------------------------ */

struct ln_ctx { struct md_layernorm_args a; float mean[8], rstd[8]; };

static void ln_fwd(md_device *dev, void *ctx, float *out)
{
    struct ln_ctx *c = ctx;
    c->a.y = out;
    c->a.beta = 0.0f;
    c->a.mean = c->mean, c->a.rstd = c->rstd;
    cr_assert_eq(md_k_layernorm_fwd(dev, &c->a), MD_OK, "%s", md_errmsg());
}

Test(kernels_ref, layernorm_gradients_and_statistics)
{
    md_device *dev = kc_open_ref();
    enum { R = 3, D = 7, N = R * D };
    for (int affine = 0; affine < 2; affine++)
        for (int saved = 0; saved < 2; saved++) {
            struct ln_ctx k;
            memset(&k, 0, sizeof k);
            float x[N], y[N], r[N], dx[N], gamma[D], betap[D], dg[D], db[D];
            double gx[N], gg[D], gb[D];
            kc_fill(x, N, 41, -2, 3);
            kc_fill(r, N, 42, -1, 1);
            kc_fill(gamma, D, 43, 0.5f, 1.5f);
            kc_fill(betap, D, 44, -0.5f, 0.5f);
            struct md_layernorm_args *a = &k.a;
            a->rows = R, a->d = D, a->dtype = MD_F32, a->eps = 1e-5f, a->x = x;
            if (affine) a->gamma = gamma, a->beta_p = betap;
            numgrad(dev, ln_fwd, &k, x, N, N, r, 1e-3, gx);
            numgrad(dev, ln_fwd, &k, gamma, D, N, r, 1e-3, gg);
            numgrad(dev, ln_fwd, &k, betap, D, N, r, 1e-3, gb);
            ln_fwd(dev, &k, y);
            /* row 0's statistics by hand */
            double s = 0, ss = 0;
            for (int j = 0; j < D; j++) s += x[j];
            for (int j = 0; j < D; j++) ss += ((double)x[j] - s / D) * ((double)x[j] - s / D);
            cr_assert_float_eq(k.mean[0], s / D, 1e-6);
            cr_assert_float_eq(k.rstd[0], 1.0 / sqrt(ss / D + 1e-5), 1e-5);
            if (!saved) a->mean = a->rstd = NULL; /* recomputed from x */
            a->dy = r, a->dx = dx, a->dgamma = dg, a->dbeta = db, a->beta = 0.0f;
            for (int j = 0; j < N; j++) dx[j] = NAN;
            for (int j = 0; j < D; j++) dg[j] = db[j] = NAN;
            cr_assert_eq(md_k_layernorm_bwd(dev, a), MD_OK, "%s", md_errmsg());
            char what[64];
            snprintf(what, sizeof what, "layernorm affine %d saved %d", affine, saved);
            cr_assert(check_grad(what, dx, gx, N, 2e-3, 2e-3), "%s dx", what);
            if (affine) {
                cr_assert(check_grad(what, dg, gg, D, 2e-3, 2e-3), "%s dgamma", what);
                cr_assert(check_grad(what, db, gb, D, 2e-3, 2e-3), "%s dbeta", what);
            }
            /* beta = 1 accumulates onto dx, dgamma and dbeta */
            float dx1[N], dg1[D], db1[D];
            for (int j = 0; j < N; j++) dx1[j] = 1.0f;
            for (int j = 0; j < D; j++) dg1[j] = db1[j] = 2.0f;
            a->dx = dx1, a->dgamma = dg1, a->dbeta = db1, a->beta = 1.0f;
            cr_assert_eq(md_k_layernorm_bwd(dev, a), MD_OK, "%s", md_errmsg());
            for (int j = 0; j < N; j++) cr_assert_float_eq(dx1[j], dx[j] + 1.0f, 1e-5);
            for (int j = 0; j < D; j++) cr_assert_float_eq(dg1[j], dg[j] + 2.0f, 1e-5);
            for (int j = 0; j < D; j++) cr_assert_float_eq(db1[j], db[j] + 2.0f, 1e-5);
        }
    md_device_close(dev);
}

struct sm_ctx { struct md_softmax_args a; };

static void sm_fwd(md_device *dev, void *ctx, float *out)
{
    struct sm_ctx *c = ctx;
    c->a.y = out;
    c->a.beta = 0.0f;
    cr_assert_eq(md_k_softmax_fwd(dev, &c->a), MD_OK, "%s", md_errmsg());
}

Test(kernels_ref, softmax_gradients_mask_and_scale)
{
    md_device *dev = kc_open_ref();
    enum { R = 6, C = 5, N = R * C };
    for (int causal = 0; causal < 2; causal++) {
        float x[N], y[N], r[N], dx[N];
        double gx[N];
        kc_fill(x, N, 51, -3, 3);
        kc_fill(r, N, 52, -1, 1);
        struct sm_ctx k = {{.rows = R, .n = C, .causal = causal, .tq = 3, .scale = 0.7f, .dtype = MD_F32, .x = x}};
        numgrad(dev, sm_fwd, &k, x, N, N, r, 1e-3, gx);
        sm_fwd(dev, &k, y);
        for (int row = 0; row < R; row++) {
            double s = 0;
            for (int j = 0; j < C; j++) {
                s += y[row * C + j];
                if (causal && j > row % 3) cr_assert_eq(y[row * C + j], 0.0f, "masked weight %d,%d", row, j);
            }
            cr_assert_float_eq(s, 1.0, 1e-6, "row %d sums to %g", row, s);
        }
        /* row 1 by hand: softmax(0.7 x) */
        if (!causal) {
            double se = 0;
            for (int j = 0; j < C; j++) se += exp(0.7 * x[C + j]);
            cr_assert_float_eq(y[C + 2], exp(0.7 * x[C + 2]) / se, 1e-6);
        }
        k.a.y = y, k.a.dy = r, k.a.dx = dx, k.a.beta = 0.0f;
        cr_assert_eq(md_k_softmax_bwd(dev, &k.a), MD_OK, "%s", md_errmsg());
        char what[32];
        snprintf(what, sizeof what, "softmax causal %d", causal);
        cr_assert(check_grad(what, dx, gx, N, 1e-3, 1e-3), "%s", what);
    }
    md_device_close(dev);
}

/* Attention with q, k, v in one buffer laid out as a fused QKV projection's
 * output (B, T, 3, H, D) when `fused`, else three contiguous (B, H, T, D). */
struct at_ctx { struct md_attn_args a; float lse[64]; };

static void at_fwd(md_device *dev, void *ctx, float *out)
{
    struct at_ctx *c = ctx;
    c->a.o = out;
    c->a.lse = c->lse;
    cr_assert_eq(md_k_attn_fwd(dev, &c->a), MD_OK, "%s", md_errmsg());
}

Test(kernels_ref, attention_gradients_causal_dropout_strides)
{
    md_device *dev = kc_open_ref();
    enum { B = 2, H = 2, D = 3 };
    /* tq tk causal dropout fused */
    static const int cases[][5] = {{5, 5, 0, 0, 0}, {5, 5, 1, 0, 0}, {3, 6, 0, 1, 0}, {4, 4, 1, 1, 1}, {6, 3, 1, 0, 0}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
        int tq = cases[ci][0], tk = cases[ci][1], fused = cases[ci][4];
        size_t nq = (size_t)B * H * tq * D, nk = (size_t)B * H * tk * D, nqkv = 3 * nq;
        struct at_ctx c;
        memset(&c, 0, sizeof c);
        struct md_attn_args *a = &c.a;
        a->batch = B, a->heads = H, a->tq = tq, a->tk = tk, a->d = D, a->causal = cases[ci][2];
        a->dropout_p = cases[ci][3] ? 0.3f : 0.0f, a->seed = 9, a->offset = 100, a->dtype = MD_F32;
        float qkv[3 * 4 * 6 * 3 * 2], q[128], k[128], v[128], o[128], r[128], dq[128], dk[128], dv[128], o2[128];
        float dqkv[3 * 4 * 6 * 3 * 2];
        double gq[3 * 4 * 6 * 3 * 2], gk[128], gv[128]; /* gq holds the fused case's whole (B, T, 3, H, D) gradient */
        kc_fill(r, nq, 62, -1, 1);
        float *pq = q, *pk = k, *pv = v;
        if (fused) { /* tq == tk: one (B, T, 3, H, D) buffer */
            kc_fill(qkv, nqkv, 61, -1.5f, 1.5f);
            pq = qkv, pk = qkv + H * D, pv = qkv + 2 * H * D;
            long long s[3] = {(long long)tq * 3 * H * D, D, 3 * H * D};
            memcpy(a->sq, s, sizeof s), memcpy(a->sk, s, sizeof s), memcpy(a->sv, s, sizeof s);
        } else {
            kc_fill(q, nq, 63, -1.5f, 1.5f);
            kc_fill(k, nk, 64, -1.5f, 1.5f);
            kc_fill(v, nk, 65, -1.5f, 1.5f);
        }
        a->q = pq, a->k = pk, a->v = pv;
        if (fused) {
            numgrad(dev, at_fwd, &c, qkv, nqkv, nq, r, 1e-3, gq);
        } else {
            numgrad(dev, at_fwd, &c, q, nq, nq, r, 1e-3, gq);
            numgrad(dev, at_fwd, &c, k, nk, nq, r, 1e-3, gk);
            numgrad(dev, at_fwd, &c, v, nk, nq, r, 1e-3, gv);
        }
        at_fwd(dev, &c, o);
        /* the saved logsumexp of (b 1, h 0, row 1) by hand */
        {
            double mx = -1e300, se = 0, sc[8];
            int last = a->causal ? (1 < tk - 1 ? 1 : tk - 1) : tk - 1;
            for (int j = 0; j <= last; j++) {
                double s = 0;
                for (int e = 0; e < D; e++) {
                    size_t iq = fused ? ((size_t)(1 * tq + 1) * 3 * H + 0) * D + e : ((size_t)(1 * H + 0) * tq + 1) * D + e;
                    size_t ik = fused ? ((size_t)(1 * tk + j) * 3 * H + H) * D + e : ((size_t)(1 * H + 0) * tk + j) * D + e;
                    s += (double)(fused ? qkv[iq] : q[iq]) * (double)(fused ? qkv[ik] : k[ik]);
                }
                sc[j] = s / sqrt((double)D);
                mx = fmax(mx, sc[j]);
            }
            for (int j = 0; j <= last; j++) se += exp(sc[j] - mx);
            cr_assert_float_eq(c.lse[(1 * H + 0) * tq + 1], mx + log(se), 1e-5, "lse case %zu", ci);
        }
        a->o = o, a->d_o = r, a->beta = 0.0f;
        if (fused) {
            for (size_t i = 0; i < nqkv; i++) dqkv[i] = NAN;
            a->dq = dqkv, a->dk = dqkv + H * D, a->dv = dqkv + 2 * H * D;
        } else {
            for (size_t i = 0; i < nq; i++) dq[i] = NAN;
            for (size_t i = 0; i < nk; i++) dk[i] = dv[i] = NAN;
            a->dq = dq, a->dk = dk, a->dv = dv;
        }
        cr_assert_eq(md_k_attn_bwd(dev, a), MD_OK, "%s", md_errmsg());
        char what[64];
        snprintf(what, sizeof what, "attention case %zu", ci);
        if (fused) {
            cr_assert(check_grad(what, dqkv, gq, nqkv, 2e-3, 2e-3), "%s dqkv", what);
        } else {
            cr_assert(check_grad(what, dq, gq, nq, 2e-3, 2e-3), "%s dq", what);
            cr_assert(check_grad(what, dk, gk, nk, 2e-3, 2e-3), "%s dk", what);
            cr_assert(check_grad(what, dv, gv, nk, 2e-3, 2e-3), "%s dv", what);
        }
        /* the forward overwrites o (no beta) and gives the same result twice */
        for (size_t i = 0; i < nq; i++) o2[i] = NAN;
        at_fwd(dev, &c, o2);
        cr_assert_eq(memcmp(o, o2, nq * 4), 0);
    }
    md_device_close(dev);
}

Test(kernels_ref, gelu_tanh_matches_pytorch_values)
{
    /* torch.nn.functional.gelu(x, approximate='tanh') at 1 and -2 */
    cr_assert_float_eq(md_act_d(MD_ACT_GELU_TANH, 1.0, 0), 0.8411919906082768, 1e-12);
    cr_assert_float_eq(md_act_d(MD_ACT_GELU_TANH, -2.0, 0), -0.04540230591222, 1e-12);
    cr_assert_float_eq(md_act_f(MD_ACT_GELU_TANH, 1.0f, 0), 0.84119199f, 1e-6);
    cr_assert_float_eq(md_act_grad_f(MD_ACT_GELU_TANH, 0.5f, 0), (float)md_act_grad_d(MD_ACT_GELU_TANH, 0.5, 0), 1e-6);
}
