/* test_regress.c - the regression losses (md_k_regress): hand-computed
 * values of each kind, the gradient against central finite differences on
 * the reference, and the argument checks. Every backend against the
 * reference is in test_backend_ops.c (op "regress"). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/kernels_call.h"
#include "helpers.h"
#include "kernel_cases.h"

/* Loss of one element on the reference: pred p, target y, last x. */
static float one(md_device *dev, md_regress_kind kind, float p, float y, float x, float *grad, float *met)
{
    float loss = 0.0f, m[3] = {0, 0, 0}, g = NAN;
    struct md_regress_args a = {.n = 1, .horizon = 1, .channels = 1, .kind = kind, .delta = 1.0f, .lambda = 1.5f,
                                .dtype = MD_F32, .pred = &p, .target = &y, .last = &x, .last_ld = 1,
                                .loss_sum = &loss, .metrics = m, .dpred = &g, .grad_scale = 1.0f};
    cr_assert_eq(md_k_regress(dev, &a), MD_OK, "%s", md_errmsg());
    if (grad) *grad = g;
    if (met) memcpy(met, m, sizeof m);
    return loss;
}

Test(regress, hand_computed_values)
{
    md_device *dev = kc_open_ref();
    float g, m[3];
    /* MSE: e = 1.5 */
    cr_assert_float_eq(one(dev, MD_REGRESS_MSE, 2.0f, 0.5f, 0.0f, &g, m), 2.25f, 1e-6);
    cr_assert_float_eq(g, 3.0f, 1e-6);
    cr_assert_float_eq(m[0], 1.5f, 1e-6);
    cr_assert_float_eq(m[1], 2.25f, 1e-6);
    cr_assert_float_eq(m[2], 1.0f, 0); /* both up from 0 */
    /* MAE */
    cr_assert_float_eq(one(dev, MD_REGRESS_MAE, -1.0f, 0.5f, 0.0f, &g, m), 1.5f, 1e-6);
    cr_assert_float_eq(g, -1.0f, 0);
    cr_assert_float_eq(m[2], 0.0f, 0); /* down against up */
    cr_assert_float_eq(one(dev, MD_REGRESS_MAE, 0.5f, 0.5f, 0.0f, &g, NULL), 0.0f, 0);
    cr_assert_float_eq(g, 0.0f, 0);
    /* Huber, delta 1: quadratic inside, linear outside */
    cr_assert_float_eq(one(dev, MD_REGRESS_HUBER, 0.5f, 0.0f, 0.0f, &g, NULL), 0.125f, 1e-6);
    cr_assert_float_eq(g, 0.5f, 1e-6);
    cr_assert_float_eq(one(dev, MD_REGRESS_HUBER, -3.0f, 0.0f, 0.0f, &g, NULL), 2.5f, 1e-6);
    cr_assert_float_eq(g, -1.0f, 1e-6);
    /* financial, lambda 1.5: right direction = MSE */
    cr_assert_float_eq(one(dev, MD_REGRESS_FINANCIAL, 2.0f, 1.0f, 0.5f, &g, NULL), 1.0f, 1e-6);
    cr_assert_float_eq(g, 2.0f, 1e-6);
    /* wrong direction: pred up 1, truth down 1 from 0: 4 + 1.5 * 1 * 1; grad 4 - 1.5 * (-1) */
    cr_assert_float_eq(one(dev, MD_REGRESS_FINANCIAL, 1.0f, -1.0f, 0.0f, &g, m), 5.5f, 1e-6);
    cr_assert_float_eq(g, 5.5f, 1e-6);
    cr_assert_float_eq(m[1], 4.0f, 1e-6); /* the metric is the plain squared error */
    /* no change predicted, a change happened: no penalty, a miss */
    cr_assert_float_eq(one(dev, MD_REGRESS_FINANCIAL, 0.0f, 1.0f, 0.0f, &g, m), 1.0f, 1e-6);
    cr_assert_float_eq(m[2], 0.0f, 0);
    /* no change predicted, none happened: a hit */
    one(dev, MD_REGRESS_MSE, 0.25f, 0.25f, 0.25f, NULL, m);
    cr_assert_float_eq(m[2], 1.0f, 0);
    md_device_close(dev);
}

/* Distance of element i from the loss's kinks (where the gradient jumps). */
static double kink_dist(md_regress_kind kind, double p, double y, double x, double delta)
{
    double e = p - y, d = fabs(e);
    if (kind == MD_REGRESS_MAE) return d;
    if (kind == MD_REGRESS_HUBER) return fabs(d - delta);
    if (kind == MD_REGRESS_FINANCIAL) return fabs(p - x); /* the penalty's slope jumps where dp = 0 */
    return 1.0;
}

Test(regress, gradient_matches_finite_differences)
{
    md_device *dev = kc_open_ref();
    enum { N = 3, H = 4, C = 2, NE = N * H * C, LD = 5 };
    float p[NE], y[NE], x[N * LD], g[NE];
    kc_fill(p, NE, 41, -2, 2);
    kc_fill(y, NE, 42, -2, 2);
    kc_fill(x, N * LD, 43, -1, 1);
    for (int kind = MD_REGRESS_MSE; kind <= MD_REGRESS_FINANCIAL; kind++) {
        struct md_regress_args a = {.n = N, .horizon = H, .channels = C, .kind = (md_regress_kind)kind, .delta = 0.7f,
                                    .lambda = 2.0f, .dtype = MD_F32, .pred = p, .target = y, .last = x, .last_ld = LD,
                                    .dpred = g, .grad_scale = 1.0f};
        cr_assert_eq(md_k_regress(dev, &a), MD_OK, "%s", md_errmsg());
        int checked = 0;
        for (int i = 0; i < NE; i++) {
            double xi = x[(i / (H * C)) * LD + i % C];
            if (kink_dist((md_regress_kind)kind, p[i], y[i], xi, 0.7) < 2e-2) continue;
            const double eps = 1e-3;
            double lv[2];
            for (int s = 0; s < 2; s++) {
                float keep = p[i], loss = 0.0f;
                p[i] = (float)((double)keep + (s ? -eps : eps));
                struct md_regress_args b = a;
                b.dpred = NULL;
                b.loss_sum = &loss;
                cr_assert_eq(md_k_regress(dev, &b), MD_OK);
                lv[s] = (double)loss;
                p[i] = keep;
            }
            double num = (lv[0] - lv[1]) / (2 * eps);
            cr_assert(fabs(num - (double)g[i]) <= 2e-3 + 2e-3 * fabs(num), "kind %d element %d: dpred %g, numeric %g",
                      kind, i, (double)g[i], num);
            checked++;
        }
        cr_assert(checked > NE / 2, "kind %d: only %d elements away from kinks", kind, checked);
    }
    md_device_close(dev);
}

Test(regress, a_wrong_gradient_is_caught)
{
    /* the comparison above fails on a gradient off by 10% */
    double num = 1.0, got = 1.1;
    cr_assert(!(fabs(num - got) <= 2e-3 + 2e-3 * fabs(num)));
}

Test(regress, bad_arguments_are_internal_errors)
{
    md_device *dev = kc_open_ref();
    float p = 1, y = 0, loss = 0;
    struct md_regress_args a = {.n = 1, .horizon = 1, .channels = 1, .kind = MD_REGRESS_HUBER, .delta = 0.0f,
                                .dtype = MD_F32, .pred = &p, .target = &y, .loss_sum = &loss};
    cr_assert_eq(md_k_regress(dev, &a), MD_ERR_INTERNAL);
    cr_assert(strstr(md_errmsg(), "delta"));
    a.kind = MD_REGRESS_FINANCIAL;
    cr_assert_eq(md_k_regress(dev, &a), MD_ERR_INTERNAL); /* no last values */
    cr_assert(strstr(md_errmsg(), "last"));
    a.kind = (md_regress_kind)9;
    cr_assert_eq(md_k_regress(dev, &a), MD_ERR_INTERNAL);
    md_err_clear();
    md_device_close(dev);
}
