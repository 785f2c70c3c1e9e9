/* test_seq_metal_sim.c - whole sequence models on the Metal backend against
 * the reference: a tiny itransformer (time-feature tokens, slice, instance
 * norm, attention, layernorm, kernel-1 conv feed-forward) and a tiny
 * transformer_encoder, forward and backward of L = sum(out * R), outputs and
 * every parameter gradient. Runs in build/metal-sim-tests, where "metal" is
 * the simulated kernels (metal/sim), and on a Mac against the real GPU; in
 * the main test binary the Metal stub cannot open and the tests skip. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

#include "backend/backend.h"
#include "core/rng.h"
#include "nn/model.h"

#define BATCH 2

struct param {
    const char *k;
    double v;
};

/* Output and parameter gradients of one forward/backward on `d`, as host
 * copies (caller frees); the same inputs and R on every device. */
static void run(const char *model, const struct param *p, int np, md_device *d, float **y, size_t *ny, float **g,
                size_t *ng)
{
    struct md_model_opts o;
    md_model_opts_default(&o);
    o.seed = 3;
    for (int k = 0; k < np; k++) cr_assert_eq(md_model_opts_set(&o, p[k].k, p[k].v, 0), MD_OK, "%s", md_errmsg());
    md_model *m = NULL;
    cr_assert_eq(md_model_load(model, NULL, &o, &m), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_model_bind(m, d, BATCH), MD_OK, "%s", md_errmsg());
    md_rng r;
    md_rng_init(&r, 9);
    th_upload_inputs(m, BATCH, &r, 0, 2.0f, 0.5f, 5);
    int c, h, w;
    md_model_output_shape(m, &c, &h, &w);
    *ny = (size_t)BATCH * c * h * w;
    *y = malloc(*ny * 4);
    for (size_t k = 0; k < *ny; k++) (*y)[k] = (float)sin(0.37 * (double)k + 0.1);
    void *R = NULL;
    cr_assert_eq(md_dev_alloc(d, *ny * 4, &R, "R"), MD_OK);
    cr_assert_eq(md_dev_upload(d, R, *y, *ny * 4), MD_OK);
    cr_assert_eq(md_model_forward(m, BATCH, 1), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_model_set_output_grad(m, R), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_model_backward(m), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_dev_sync(d), MD_OK);
    cr_assert_eq(md_dev_download(d, *y, md_model_logits(m), *ny * 4), MD_OK);
    *ng = md_model_nparams(m);
    *g = malloc(*ng * 4);
    cr_assert_eq(md_model_get_grads_host(m, *g), MD_OK);
    md_dev_free(d, R);
    md_model_free(m);
}

/* |x - ref| <= 1e-4 * max|ref| + 1e-3 |ref| (fp32; different summation
 * orders); returns the number of elements outside. */
static int differ(const char *what, const float *x, const float *ref, size_t n)
{
    double mx = 0;
    for (size_t k = 0; k < n; k++) mx = fmax(mx, fabs(ref[k]));
    int bad = 0;
    for (size_t k = 0; k < n; k++)
        if (!(fabs((double)x[k] - ref[k]) <= 1e-4 * mx + 1e-3 * fabs(ref[k])) && bad++ < 5)
            cr_log_error("%s[%zu]: metal %.8g, reference %.8g", what, k, x[k], ref[k]);
    return bad;
}

static void check_model(const char *model, const struct param *p, int np)
{
    md_device *dm = th_try_device("metal");
    if (!dm) cr_skip_test("no Metal device here (%s)", md_errmsg());
    md_device *dr = th_try_device("ref");
    cr_assert(dr);
    float *ym, *yr, *gm, *gr;
    size_t nym, nyr, ngm, ngr;
    run(model, p, np, dr, &yr, &nyr, &gr, &ngr);
    run(model, p, np, dm, &ym, &nym, &gm, &ngm);
    cr_assert(nym == nyr && ngm == ngr);
    int bad = differ("output", ym, yr, nyr) + differ("gradients", gm, gr, ngr);
    cr_assert_eq(bad, 0, "%s: %d elements differ", model, bad);
    free(ym);
    free(yr);
    free(gm);
    free(gr);
    md_device_close(dm);
    md_device_close(dr);
}

Test(seq_metal_sim, itransformer, .timeout = 300)
{
    static const struct param p[] = {{"seq_len", 12}, {"pred_len", 6}, {"n_vars", 3}, {"n_marks", 4},
                                     {"d_model", 16}, {"d_ff", 24},    {"n_heads", 2}, {"e_layers", 2},
                                     {"dropout", 0}};
    check_model("itransformer", p, sizeof p / sizeof p[0]);
}

Test(seq_metal_sim, itransformer_without_marks, .timeout = 300)
{
    static const struct param p[] = {{"seq_len", 12}, {"pred_len", 6}, {"n_vars", 3}, {"n_marks", 0},
                                     {"d_model", 8},  {"d_ff", 8},     {"n_heads", 2}, {"e_layers", 1},
                                     {"dropout", 0}};
    check_model("itransformer", p, sizeof p / sizeof p[0]);
}

Test(seq_metal_sim, transformer_encoder, .timeout = 300)
{
    static const struct param p[] = {{"d_model", 16}, {"d_ff", 32}, {"n_heads", 2}, {"e_layers", 1},
                                     {"dropout", 0}};
    check_model("transformer_encoder", p, sizeof p / sizeof p[0]);
}

/* The tiled two-stream FiLM model (tiles, a shared conv backbone over every
 * tile, regroup, film) and its separate-backbones variant. */
Test(seq_metal_sim, tiled_two_stream, .timeout = 300)
{
    check_model("tiled_two_stream_tiny", NULL, 0);
    check_model("tiled_two_stream_tiny_separate", NULL, 0);
}

/* The driver's figures as the Metal backend reports them (the simulation:
 * the device's own bytes of three quarters of RAM), which --profile shows
 * beside mpsdiag's accounting (docs/doctor.md). */
Test(seq_metal_sim, driver_memory_figures)
{
    md_device *d = th_try_device("metal");
    if (!d) cr_skip_test("no metal device here");
    struct md_mem_stats a, b;
    md_dev_mem_stats(d, &a);
    void *p = NULL;
    cr_assert_eq(md_dev_alloc(d, 1 << 20, &p, "test"), MD_OK);
    md_dev_mem_stats(d, &b);
    cr_assert_gt(b.driver_total, 0);
    cr_assert_leq(b.driver_free, b.driver_total);
    if (strstr(md_device_get_info(d)->name, "simulated")) /* a real GPU may hand out a cached buffer */
        cr_assert_geq((b.driver_total - b.driver_free) - (a.driver_total - a.driver_free), 1 << 20);
    md_dev_free(d, p);
    md_device_close(d);
}
