/* test_nn_tiles.c - tiles, regroup and FiLM (docs/tiles.md): the kernels on
 * the CPU against the reference and their gradients against finite
 * differences; the fold in the graph (config errors, checkpointing, no
 * compile); batched tiles against one tile at a time; the two-stream model
 * against PyTorch (test/fixtures/tiles, scripts/torch_tiled.py): forward,
 * MSE loss and every parameter gradient. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/kernels_call.h"
#include "core/json.h"
#include "core/rng.h"
#include "core/safetensors.h"
#include "helpers.h"
#include "nn/model.h"

#define FIXTURE "test/fixtures/tiles/tiled_two_stream"

static float *rnd(size_t n, uint64_t seed)
{
    float *x = malloc((n ? n : 1) * sizeof *x);
    md_rng r;
    md_rng_init(&r, seed);
    for (size_t k = 0; k < n; k++) x[k] = 2.0f * md_rng_next_uniform(&r) - 1.0f;
    return x;
}

/* Host copies through device buffers (the devices here are host memory, but
 * go through the API anyway). */
static void *dev_copy(md_device *d, const float *h, size_t n)
{
    void *p = NULL;
    cr_assert_eq(md_dev_alloc(d, (n ? n : 1) * 4, &p, "t"), MD_OK);
    cr_assert_eq(md_dev_upload(d, p, h, n * 4), MD_OK);
    return p;
}

static int worst_diff(const float *a, const float *b, size_t n, double atol, double rtol, const char *what)
{
    int bad = 0;
    for (size_t k = 0; k < n; k++) {
        double e = fabs((double)a[k] - b[k]);
        if (!(e <= atol + rtol * fabs((double)b[k]))) {
            if (!bad) cr_log_error("%s: [%zu] %.8g vs %.8g", what, k, a[k], b[k]);
            bad++;
        }
    }
    return bad;
}

/* ---- kernels ------------------------------------------------------------------------ */

struct tcase { int n, c, h, w, rows, cols, size, ld; float beta; };

static const struct tcase TCASES[] = {
    {2, 3, 12, 14, 2, 2, 5, 8, 0.0f},  /* down, two images interleaved (ld 2 x 4) */
    {1, 2, 5, 7, 2, 3, 6, 6, 0.5f},    /* up, uneven edges, accumulate */
    {3, 1, 8, 8, 2, 2, 4, 4, 0.0f},    /* exact halves at tile size: copies */
    {2, 2, 9, 4, 3, 1, 9, 3, 1.0f},    /* mixed */
};

/* Runs tiles fwd and bwd of case c on device d; outputs malloc'd. */
static void run_tiles(md_device *d, const struct tcase *c, float **y_out, float **dx_out)
{
    size_t nx = (size_t)c->n * c->c * c->h * c->w, ny = (size_t)c->n * c->ld * c->c * c->size * c->size;
    float *x = rnd(nx, 1), *y0 = rnd(ny, 2), *dy = rnd(ny, 3), *dx0 = rnd(nx, 4);
    void *xd = dev_copy(d, x, nx), *yd = dev_copy(d, y0, ny), *dyd = dev_copy(d, dy, ny), *dxd = dev_copy(d, dx0, nx);
    struct md_tiles_args a = {c->n, c->c, c->h, c->w, c->rows, c->cols, c->size, c->ld, MD_F32, xd, yd, dyd, dxd,
                              c->beta};
    cr_assert_eq(md_k_tiles_fwd(d, &a), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_k_tiles_bwd(d, &a), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_dev_sync(d), MD_OK);
    *y_out = malloc(ny * 4);
    *dx_out = malloc(nx * 4);
    cr_assert_eq(md_dev_download(d, *y_out, yd, ny * 4), MD_OK);
    cr_assert_eq(md_dev_download(d, *dx_out, dxd, nx * 4), MD_OK);
    md_dev_free(d, xd), md_dev_free(d, yd), md_dev_free(d, dyd), md_dev_free(d, dxd);
    free(x), free(y0), free(dy), free(dx0);
}

Test(nn_tiles, kernels_cpu_vs_ref)
{
    md_device *r = th_open_device("ref"), *c = th_open_device("cpu");
    for (size_t k = 0; k < sizeof TCASES / sizeof TCASES[0]; k++) {
        const struct tcase *t = &TCASES[k];
        float *yr, *dxr, *yc, *dxc;
        run_tiles(r, t, &yr, &dxr);
        run_tiles(c, t, &yc, &dxc);
        size_t nx = (size_t)t->n * t->c * t->h * t->w, ny = (size_t)t->n * t->ld * t->c * t->size * t->size;
        char what[64];
        snprintf(what, sizeof what, "tiles case %zu fwd", k);
        cr_expect_eq(worst_diff(yc, yr, ny, 1e-6, 1e-5, what), 0, "%s", what);
        snprintf(what, sizeof what, "tiles case %zu bwd", k);
        cr_expect_eq(worst_diff(dxc, dxr, nx, 1e-6, 1e-5, what), 0, "%s", what);
        free(yr), free(dxr), free(yc), free(dxc);
    }
    md_device_close(r);
    md_device_close(c);
}

/* PyTorch's bilinear resize (align_corners=False) on the host, written out
 * independently of the kernels: one tile of one plane. */
static float host_bilinear(const float *plane, int w, int r0, int th, int c0, int tw, int S, int oy, int ox)
{
    float sy = (float)th / S * (oy + 0.5f) - 0.5f, sx = (float)tw / S * (ox + 0.5f) - 0.5f;
    if (sy < 0) sy = 0;
    if (sx < 0) sx = 0;
    int y0 = (int)sy, x0 = (int)sx, y1 = y0 + (y0 < th - 1), x1 = x0 + (x0 < tw - 1);
    float ly = sy - y0, lx = sx - x0;
#define P(yy, xx) plane[(size_t)(r0 + (yy)) * w + c0 + (xx)]
    return (1 - ly) * ((1 - lx) * P(y0, x0) + lx * P(y0, x1)) + ly * ((1 - lx) * P(y1, x0) + lx * P(y1, x1));
#undef P
}

Test(nn_tiles, kernel_matches_host_resize)
{
    const struct tcase *t = &TCASES[1];
    md_device *d = th_open_device("ref");
    float *y, *dx;
    struct tcase z = *t;
    z.beta = 0;
    run_tiles(d, &z, &y, &dx);
    float *x = rnd((size_t)t->n * t->c * t->h * t->w, 1);
    int bad = 0;
    for (int b = 0; b < t->n; b++)
        for (int i = 0; i < t->rows; i++)
            for (int j = 0; j < t->cols; j++)
                for (int ch = 0; ch < t->c; ch++) {
                    int r0 = i * t->h / t->rows, r1 = (i + 1) * t->h / t->rows;
                    int c0 = j * t->w / t->cols, c1 = (j + 1) * t->w / t->cols;
                    const float *plane = x + ((size_t)b * t->c + ch) * t->h * t->w;
                    for (int oy = 0; oy < t->size; oy++)
                        for (int ox = 0; ox < t->size; ox++) {
                            size_t item = (size_t)b * t->ld + (size_t)(i * t->cols + j);
                            float got = y[((item * t->c + ch) * t->size + oy) * t->size + ox];
                            float want = host_bilinear(plane, t->w, r0, r1 - r0, c0, c1 - c0, t->size, oy, ox);
                            bad += !(fabsf(got - want) <= 1e-5f);
                        }
                }
    cr_assert_eq(bad, 0, "%d resized values differ from the host resize", bad);
    free(x), free(y), free(dx);
    md_device_close(d);
}

/* Backward against central differences of L = sum(dy * fwd(x)) (double
 * sums of the fp32 forward; the op is linear, so eps 1e-2 is exact but for
 * rounding). */
Test(nn_tiles, tiles_grad_finite_differences)
{
    md_device *d = th_open_device("ref");
    const struct tcase t = {1, 2, 5, 7, 2, 3, 4, 6, 0.0f};
    size_t nx = (size_t)t.n * t.c * t.h * t.w, ny = (size_t)t.n * t.ld * t.c * t.size * t.size;
    float *x = rnd(nx, 5), *dy = rnd(ny, 6), *y = malloc(ny * 4), *dx = malloc(nx * 4);
    struct md_tiles_args a = {t.n, t.c, t.h, t.w, t.rows, t.cols, t.size, t.ld, MD_F32, x, y, dy, dx, 0.0f};
    cr_assert_eq(md_k_tiles_bwd(d, &a), MD_OK);
    int bad = 0;
    for (size_t k = 0; k < nx; k++) {
        double l[2];
        float keep = x[k];
        for (int s = 0; s < 2; s++) {
            x[k] = keep + (s ? -1e-2f : 1e-2f);
            cr_assert_eq(md_k_tiles_fwd(d, &a), MD_OK);
            l[s] = 0;
            for (size_t e = 0; e < ny; e++) l[s] += (double)dy[e] * y[e];
        }
        x[k] = keep;
        double fd = (l[0] - l[1]) / (2 * (double)1e-2f);
        if (!(fabs(fd - dx[k]) <= 1e-4 + 1e-3 * fabs(fd))) bad++;
    }
    cr_assert_eq(bad, 0, "%d of %zu input gradients differ from finite differences", bad, nx);
    free(x), free(dy), free(y), free(dx);
    md_device_close(d);
}

static void run_film(md_device *d, int n, int t, int dd, float beta, float **y, float **dx, float **dc)
{
    size_t nx = (size_t)n * t * dd, nc = (size_t)n * 2 * dd;
    float *x = rnd(nx, 7), *c = rnd(nc, 8), *dy = rnd(nx, 9), *dx0 = rnd(nx, 10), *dc0 = rnd(nc, 11);
    void *xd = dev_copy(d, x, nx), *cd = dev_copy(d, c, nc), *yd = dev_copy(d, dy, nx), *dyd = dev_copy(d, dy, nx),
         *dxd = dev_copy(d, dx0, nx), *dcd = dev_copy(d, dc0, nc);
    struct md_film_args a = {n, t, dd, MD_F32, xd, cd, yd, dyd, dxd, dcd, beta, beta};
    cr_assert_eq(md_k_film_fwd(d, &a), MD_OK);
    cr_assert_eq(md_k_film_bwd(d, &a), MD_OK);
    cr_assert_eq(md_dev_sync(d), MD_OK);
    *y = malloc(nx * 4), *dx = malloc(nx * 4), *dc = malloc(nc * 4);
    md_dev_download(d, *y, yd, nx * 4);
    md_dev_download(d, *dx, dxd, nx * 4);
    md_dev_download(d, *dc, dcd, nc * 4);
    md_dev_free(d, xd), md_dev_free(d, cd), md_dev_free(d, yd), md_dev_free(d, dyd), md_dev_free(d, dxd),
        md_dev_free(d, dcd);
    free(x), free(c), free(dy), free(dx0), free(dc0);
}

Test(nn_tiles, film_cpu_vs_ref)
{
    md_device *r = th_open_device("ref"), *c = th_open_device("cpu");
    const int shapes[][3] = {{3, 1, 6}, {2, 5, 4}};
    for (int k = 0; k < 2; k++)
        for (int bb = 0; bb < 2; bb++) {
            float *y[2], *dx[2], *dc[2];
            run_film(r, shapes[k][0], shapes[k][1], shapes[k][2], bb ? 1.0f : 0.0f, &y[0], &dx[0], &dc[0]);
            run_film(c, shapes[k][0], shapes[k][1], shapes[k][2], bb ? 1.0f : 0.0f, &y[1], &dx[1], &dc[1]);
            size_t nx = (size_t)shapes[k][0] * shapes[k][1] * shapes[k][2], nc = (size_t)shapes[k][0] * 2 * shapes[k][2];
            cr_expect_eq(worst_diff(y[1], y[0], nx, 1e-6, 1e-5, "film fwd"), 0);
            cr_expect_eq(worst_diff(dx[1], dx[0], nx, 1e-6, 1e-5, "film dx"), 0);
            cr_expect_eq(worst_diff(dc[1], dc[0], nc, 1e-6, 1e-5, "film dcond"), 0);
            for (int s = 0; s < 2; s++) free(y[s]), free(dx[s]), free(dc[s]);
        }
    md_device_close(r);
    md_device_close(c);
}

/* ---- models ------------------------------------------------------------------------- */

static md_model *load_text(const char *text, const struct md_model_opts *o, md_status want)
{
    cJSON *j = NULL;
    cr_assert_eq(md_json_parse(text, "t.json", &j), MD_OK, "%s", md_errmsg());
    md_model *m = NULL;
    md_status st = md_model_load("t.json", j, o, &m);
    cJSON_Delete(j);
    cr_assert_eq(st, want, "load: %s", md_errmsg());
    return m;
}

/* conv 1x1 before the tiles (so tiles' backward carries a gradient), a
 * backbone over all tiles of two images, regroup, FiLM of the tokens by a
 * conditioning from the pooled tokens, dropout 0 (a mask sized by fold). */
static const char *GRADNET =
    "{\"name\":\"g\",\"task\":\"regression\",\"inputs\":[{\"name\":\"a\",\"shape\":[2,5,7]},"
    " {\"name\":\"b\",\"shape\":[2,5,7]}],"
    "\"layers\":["
    " {\"name\":\"pa\",\"type\":\"conv2d\",\"out\":2,\"kernel\":1,\"inputs\":[\"a\"]},"
    " {\"name\":\"pb\",\"type\":\"conv2d\",\"out\":2,\"kernel\":1,\"inputs\":[\"b\"]},"
    " {\"name\":\"t\",\"type\":\"tiles\",\"inputs\":[\"pa\",\"pb\"],\"grid\":[2,2],\"size\":4},"
    " {\"name\":\"c\",\"type\":\"conv2d\",\"out\":3,\"kernel\":3,\"padding\":1},"
    " {\"name\":\"th\",\"type\":\"tanh\"},"
    " {\"name\":\"drop\",\"type\":\"dropout\",\"p\":0.0},"
    " {\"name\":\"gap\",\"type\":\"global_avgpool\"},"
    " {\"name\":\"fc\",\"type\":\"linear\",\"out\":4},"
    " {\"name\":\"r\",\"type\":\"regroup\"},"
    " {\"name\":\"tt\",\"type\":\"transpose\"},"
    " {\"name\":\"m\",\"type\":\"global_avgpool\"},"
    " {\"name\":\"cond\",\"type\":\"linear\",\"out\":8},"
    " {\"name\":\"f\",\"type\":\"film\",\"inputs\":[\"r\",\"cond\"]},"
    " {\"name\":\"flat\",\"type\":\"flatten\"},"
    " {\"name\":\"head\",\"type\":\"linear\",\"out\":2}]}";

#define GB 2

/* sum(output * R) on the bound model after inputs were uploaded; with
 * backward, the gradients are left in the model. */
static double loss_R(md_model *m, const float *R, void *R_dev, int backward)
{
    md_device *d = md_model_device(m);
    int c, h, w;
    md_model_output_shape(m, &c, &h, &w);
    size_t no = (size_t)GB * c * h * w;
    cr_assert_eq(md_model_forward(m, GB, 1), MD_OK, "%s", md_errmsg());
    float *y = malloc(no * 4);
    cr_assert_eq(md_dev_download(d, y, md_model_logits(m), no * 4), MD_OK);
    double l = 0;
    for (size_t k = 0; k < no; k++) l += (double)y[k] * R[k];
    free(y);
    if (backward) {
        cr_assert_eq(md_model_set_output_grad(m, R_dev), MD_OK, "%s", md_errmsg());
        cr_assert_eq(md_model_backward(m), MD_OK, "%s", md_errmsg());
    }
    return l;
}

static md_model *bind_inputs(const char *text, const struct md_model_opts *o, md_device *d)
{
    md_model *m = load_text(text, o, MD_OK);
    cr_assert_eq(md_model_bind(m, d, GB), MD_OK, "%s", md_errmsg());
    for (int i = 0; i < md_model_num_inputs(m); i++) {
        int c, h, w;
        md_model_input_shape(m, i, &c, &h, &w);
        size_t n = (size_t)GB * c * h * w;
        float *x = rnd(n, 40 + (uint64_t)i);
        cr_assert_eq(md_dev_upload(d, md_model_input_buffer(m, i), x, n * 4), MD_OK);
        free(x);
    }
    return m;
}

/* Gradients of the model (fold through conv, dropout, linear, regroup and
 * film) against central differences, on the reference device. */
Test(nn_tiles, model_grad_finite_differences)
{
    md_device *d = th_open_device("ref");
    struct md_model_opts o;
    md_model_opts_default(&o);
    md_model *m = bind_inputs(GRADNET, &o, d);
    float *R = rnd(GB * 2, 77);
    void *R_dev = dev_copy(d, R, GB * 2);
    loss_R(m, R, R_dev, 1);
    size_t np = md_model_nparams(m);
    float *g = malloc(np * 4), *p = malloc(np * 4);
    cr_assert_eq(md_model_get_grads_host(m, g), MD_OK);
    cr_assert_eq(md_model_get_params_host(m, p), MD_OK);
    int bad = 0, checked = 0;
    for (size_t k = 0; k < np; k++) {
        float keep = p[k];
        double l[2];
        const float eps = 1e-2f;
        for (int s = 0; s < 2; s++) {
            p[k] = keep + (s ? -eps : eps);
            cr_assert_eq(md_model_set_params_host(m, p), MD_OK);
            l[s] = loss_R(m, R, R_dev, 0);
        }
        p[k] = keep;
        double fd = (l[0] - l[1]) / (2 * (double)eps);
        checked++;
        if (!(fabs(fd - g[k]) <= 2e-3 + 2e-2 * fabs(fd))) {
            if (!bad) cr_log_error("param %zu: backward %.6g, finite differences %.6g", k, g[k], fd);
            bad++;
        }
    }
    cr_assert_eq(md_model_set_params_host(m, p), MD_OK);
    cr_assert_gt(checked, 50);
    cr_assert_eq(bad, 0, "%d of %d parameter gradients differ from finite differences", bad, checked);
    free(g), free(p), free(R);
    md_dev_free(d, R_dev);
    md_model_free(m);
    md_device_close(d);
}

/* Gradients with --grad-ckpt and without compile equal the plain ones. */
Test(nn_tiles, ckpt_and_no_compile_match)
{
    md_device *d = th_open_device("cpu");
    float *R = rnd(GB * 2, 77);
    void *R_dev = dev_copy(d, R, GB * 2);
    float *g[3];
    double l[3];
    for (int v = 0; v < 3; v++) {
        struct md_model_opts o;
        md_model_opts_default(&o);
        o.grad_ckpt = v == 1;
        o.compile = v != 2;
        md_model *m = bind_inputs(GRADNET, &o, d);
        l[v] = loss_R(m, R, R_dev, 1);
        g[v] = malloc(md_model_nparams(m) * 4);
        cr_assert_eq(md_model_get_grads_host(m, g[v]), MD_OK);
        size_t np = md_model_nparams(m);
        if (v) {
            cr_assert_eq(l[v], l[0], "variant %d: loss %g vs %g", v, l[v], l[0]);
            cr_assert_eq(memcmp(g[v], g[0], np * 4), 0, "variant %d: gradients differ", v);
        }
        md_model_free(m);
    }
    for (int v = 0; v < 3; v++) free(g[v]);
    free(R);
    md_dev_free(d, R_dev);
    md_device_close(d);
}

Test(nn_tiles, config_errors)
{
    struct md_model_opts o;
    md_model_opts_default(&o);
    /* a film whose inputs come from different folds */
    load_text("{\"task\":\"regression\",\"inputs\":[{\"name\":\"x\",\"shape\":[1,4,4]}],\"layers\":["
              "{\"name\":\"t\",\"type\":\"tiles\",\"grid\":2,\"size\":2},"
              "{\"name\":\"g\",\"type\":\"global_avgpool\"},"
              "{\"name\":\"gx\",\"type\":\"global_avgpool\",\"inputs\":[\"x\"]},"
              "{\"name\":\"c2\",\"type\":\"linear\",\"out\":2,\"inputs\":[\"gx\"]},"
              "{\"name\":\"f\",\"type\":\"film\",\"inputs\":[\"g\",\"c2\"]}]}", &o, MD_ERR_CONFIG);
    cr_assert(strstr(md_errmsg(), "'f'") && strstr(md_errmsg(), "fold"), "%s", md_errmsg());
    /* the output still holds tiles */
    load_text("{\"task\":\"regression\",\"inputs\":[{\"name\":\"x\",\"shape\":[1,4,4]}],\"layers\":["
              "{\"name\":\"t\",\"type\":\"tiles\",\"grid\":2,\"size\":2},"
              "{\"name\":\"g\",\"type\":\"global_avgpool\"}]}", &o, MD_ERR_CONFIG);
    cr_assert(strstr(md_errmsg(), "'g'") && strstr(md_errmsg(), "regroup"), "%s", md_errmsg());
    /* more tiles than pixels */
    load_text("{\"task\":\"regression\",\"inputs\":[{\"name\":\"x\",\"shape\":[1,4,4]}],\"layers\":["
              "{\"name\":\"t\",\"type\":\"tiles\",\"grid\":[5,1],\"size\":2},{\"type\":\"regroup\"}]}", &o,
              MD_ERR_CONFIG);
    cr_assert(strstr(md_errmsg(), "layers[0].grid"), "%s", md_errmsg());
    /* images of different shapes */
    load_text("{\"task\":\"regression\",\"inputs\":[{\"name\":\"x\",\"shape\":[1,4,4]},{\"name\":\"y\",\"shape\":[1,4,5]}],"
              "\"layers\":[{\"type\":\"tiles\",\"inputs\":[\"x\",\"y\"],\"grid\":2,\"size\":2},{\"type\":\"regroup\"}]}",
              &o, MD_ERR_CONFIG);
    cr_assert(strstr(md_errmsg(), "inputs[1]"), "%s", md_errmsg());
    /* film's conditioning of the wrong size */
    load_text("{\"task\":\"regression\",\"inputs\":[{\"name\":\"x\",\"shape\":[4,1,1]}],\"layers\":["
              "{\"name\":\"c\",\"type\":\"linear\",\"out\":6},"
              "{\"name\":\"f\",\"type\":\"film\",\"inputs\":[\"x\",\"c\"]}]}", &o, MD_ERR_CONFIG);
    cr_assert(strstr(md_errmsg(), "inputs[1]") && strstr(md_errmsg(), "(8, 1, 1)"), "%s", md_errmsg());
}

/* Batched tiles equal one tile at a time: the backbone's features of every
 * tile from the tiled model against a model without tiles fed each crop,
 * resized on the host. */
static const char *BATCHED =
    "{\"name\":\"b\",\"task\":\"regression\",\"inputs\":[{\"name\":\"left\",\"shape\":[3,12,14]},"
    " {\"name\":\"right\",\"shape\":[3,12,14]}],\"layers\":["
    " {\"name\":\"tiles\",\"type\":\"tiles\",\"inputs\":[\"left\",\"right\"],\"grid\":[2,2],\"size\":5},"
    " {\"name\":\"conv\",\"type\":\"conv2d\",\"out\":8,\"kernel\":3,\"padding\":1},"
    " {\"name\":\"relu\",\"type\":\"relu\"},"
    " {\"name\":\"pool\",\"type\":\"global_avgpool\"},"
    " {\"name\":\"fc\",\"type\":\"linear\",\"out\":6},"
    " {\"name\":\"feats\",\"type\":\"regroup\"}]}";
static const char *SINGLE =
    "{\"name\":\"s\",\"task\":\"regression\",\"inputs\":[{\"name\":\"tile\",\"shape\":[3,5,5]}],\"layers\":["
    " {\"name\":\"conv\",\"type\":\"conv2d\",\"out\":8,\"kernel\":3,\"padding\":1},"
    " {\"name\":\"relu\",\"type\":\"relu\"},"
    " {\"name\":\"pool\",\"type\":\"global_avgpool\"},"
    " {\"name\":\"fc\",\"type\":\"linear\",\"out\":6}]}";

static void batched_vs_single(const char *dev)
{
    md_device *d = th_open_device(dev);
    struct md_model_opts o;
    md_model_opts_default(&o);
    md_model *mb = load_text(BATCHED, &o, MD_OK), *ms = load_text(SINGLE, &o, MD_OK);
    const int B = 2, C = 3, H = 12, W = 14, S = 5, NT = 8, D = 6;
    cr_assert_eq(md_model_bind(mb, d, B), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_model_bind(ms, d, B * NT), MD_OK, "%s", md_errmsg());
    size_t np = md_model_nparams(mb);
    cr_assert_eq(np, md_model_nparams(ms));
    float *p = malloc(np * 4);
    cr_assert_eq(md_model_get_params_host(mb, p), MD_OK);
    cr_assert_eq(md_model_set_params_host(ms, p), MD_OK);
    float *img[2], *crops = malloc((size_t)B * NT * C * S * S * 4);
    for (int s = 0; s < 2; s++) {
        img[s] = rnd((size_t)B * C * H * W, 90 + (uint64_t)s);
        cr_assert_eq(md_dev_upload(d, md_model_input_buffer(mb, s), img[s], (size_t)B * C * H * W * 4), MD_OK);
    }
    /* one tile at a time, in the documented order: sample, stream, tile row-major */
    for (int b = 0; b < B; b++)
        for (int s = 0; s < 2; s++)
            for (int t = 0; t < 4; t++) {
                int i = t / 2, j = t % 2, r0 = i * H / 2, r1 = (i + 1) * H / 2, c0 = j * W / 2, c1 = (j + 1) * W / 2;
                size_t item = (size_t)b * NT + (size_t)s * 4 + (size_t)t;
                for (int ch = 0; ch < C; ch++)
                    for (int oy = 0; oy < S; oy++)
                        for (int ox = 0; ox < S; ox++)
                            crops[((item * C + ch) * S + oy) * S + ox] = host_bilinear(
                                img[s] + ((size_t)b * C + ch) * H * W, W, r0, r1 - r0, c0, c1 - c0, S, oy, ox);
            }
    cr_assert_eq(md_dev_upload(d, md_model_input_buffer(ms, 0), crops, (size_t)B * NT * C * S * S * 4), MD_OK);
    cr_assert_eq(md_model_forward(mb, B, 0), MD_OK, "%s", md_errmsg());
    float *yb = malloc((size_t)B * NT * D * 4), *ys = malloc((size_t)B * NT * D * 4);
    cr_assert_eq(md_dev_download(d, yb, md_model_logits(mb), (size_t)B * NT * D * 4), MD_OK);
    cr_assert_eq(md_model_forward(ms, B * NT, 0), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_dev_download(d, ys, md_model_logits(ms), (size_t)B * NT * D * 4), MD_OK);
    int oc, oh, ow;
    md_model_output_shape(mb, &oc, &oh, &ow);
    cr_assert(oc == NT && oh == 1 && ow == D, "regroup gives (%d, %d, %d)", oc, oh, ow);
    cr_assert_eq(worst_diff(yb, ys, (size_t)B * NT * D, 1e-5, 1e-4, "batched vs one by one"), 0);
    free(p), free(img[0]), free(img[1]), free(crops), free(yb), free(ys);
    md_model_free(mb);
    md_model_free(ms);
    md_device_close(d);
}

Test(nn_tiles, batched_equals_one_by_one_ref) { batched_vs_single("ref"); }
Test(nn_tiles, batched_equals_one_by_one_cpu) { batched_vs_single("cpu"); }

/* ---- the two-stream model against PyTorch ----------------------------------------------- */

static int quiet;

/* Forward, MSE loss, backward of the shipped config with the fixture's
 * weights; the number of tensors that differ. `tamper`: change one weight
 * first (the comparison must notice). */
static int torch_case(const char *dev, const struct md_model_opts *o, int tamper)
{
    md_st_file *ref = NULL;
    cr_assert_eq(md_st_open(FIXTURE ".ref.safetensors", &ref), MD_OK, "%s", md_errmsg());
    md_device *d = th_open_device(dev);
    md_model *m = NULL;
    cr_assert_eq(md_model_load("tiled_two_stream_tiny", NULL, o, &m), MD_OK, "%s", md_errmsg());
    const int B = 2, K = 3;
    cr_assert_eq(md_model_bind(m, d, B), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_model_load_weights(m, FIXTURE ".torch.safetensors"), MD_OK, "%s", md_errmsg());
    if (tamper) {
        size_t np = md_model_nparams(m);
        float *p = malloc(np * 4);
        cr_assert_eq(md_model_get_params_host(m, p), MD_OK);
        p[md_model_tensor(m, md_model_find_tensor(m, "backbone.conv.weight"))->offset + 3] += 0.05f;
        cr_assert_eq(md_model_set_params_host(m, p), MD_OK);
        free(p);
    }
    for (int i = 0; i < md_model_num_inputs(m); i++) {
        char key[64];
        snprintf(key, sizeof key, "input.%s", md_model_input_name(m, i));
        const struct md_st_tensor *t = md_st_find(ref, key);
        cr_assert(t, "no %s", key);
        float *x = malloc(t->nbytes);
        memcpy(x, t->data, t->nbytes);
        cr_assert_eq(md_dev_upload(d, md_model_input_buffer(m, i), x, t->nbytes), MD_OK);
        free(x);
    }
    char what[64];
    snprintf(what, sizeof what, "tiled_two_stream on %s", dev);
    cr_assert_eq(md_model_num_tensors(m), 10);
    int bad = th_torch_mse_case(ref, d, m, B, K, what, quiet);
    md_model_free(m);
    md_device_close(d);
    md_st_close(ref);
    return bad;
}

Test(nn_tiles, torch_two_stream_ref)
{
    struct md_model_opts o;
    md_model_opts_default(&o);
    cr_assert_eq(torch_case("ref", &o, 0), 0, "tensors differ from PyTorch's");
}

Test(nn_tiles, torch_two_stream_cpu)
{
    struct md_model_opts o;
    md_model_opts_default(&o);
    cr_assert_eq(torch_case("cpu", &o, 0), 0, "tensors differ from PyTorch's");
    o.grad_ckpt = 1;
    cr_assert_eq(torch_case("cpu", &o, 0), 0, "tensors differ from PyTorch's (--grad-ckpt)");
    o.grad_ckpt = 0;
    o.compile = 0;
    cr_assert_eq(torch_case("cpu", &o, 0), 0, "tensors differ from PyTorch's (no compile)");
}

/* The CUDA kernels (tiles, film, and the backbone's) in the whole model,
 * against PyTorch's fixture; skips where no CUDA device can open. */
Test(nn_tiles, torch_two_stream_cuda, .timeout = 120)
{
    const md_backend *b = md_backend_find("cuda");
    if (!b || !md_backend_probe(b)->available) cr_skip_test("no CUDA device here");
    struct md_model_opts o;
    md_model_opts_default(&o);
    cr_assert_eq(torch_case("cuda", &o, 0), 0, "tensors differ from PyTorch's on cuda");
    o.compile = 0;
    cr_assert_eq(torch_case("cuda", &o, 0), 0, "tensors differ from PyTorch's on cuda (no compile)");
}

Test(nn_tiles, torch_comparison_can_fail)
{
    struct md_model_opts o;
    md_model_opts_default(&o);
    quiet = 1;
    int bad = torch_case("ref", &o, 1);
    quiet = 0;
    cr_assert_gt(bad, 5, "a changed backbone weight went unnoticed (%d tensors differ)", bad);
}

/* Separate backbones (two instances): builds, and a training step changes
 * every parameter's gradient from zero. */
Test(nn_tiles, separate_backbones_train_step)
{
    md_device *d = th_open_device("cpu");
    struct md_model_opts o;
    md_model_opts_default(&o);
    md_model *m = NULL;
    cr_assert_eq(md_model_load("tiled_two_stream_tiny_separate", NULL, &o, &m), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_model_find_tensor(m, "backbone_left.conv.weight") >= 0, 1);
    cr_assert_eq(md_model_find_tensor(m, "backbone_right.conv.weight") >= 0, 1);
    cr_assert_eq(md_model_bind(m, d, 2), MD_OK, "%s", md_errmsg());
    for (int i = 0; i < 2; i++) {
        float *x = rnd(2 * 3 * 12 * 14, 50 + (uint64_t)i);
        cr_assert_eq(md_dev_upload(d, md_model_input_buffer(m, i), x, 2 * 3 * 12 * 14 * 4), MD_OK);
        free(x);
    }
    float dy[6] = {0.3f, -0.2f, 0.1f, 0.5f, -0.4f, 0.2f};
    void *dy_dev = dev_copy(d, dy, 6);
    cr_assert_eq(md_model_forward(m, 2, 1), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_model_set_output_grad(m, dy_dev), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_model_backward(m), MD_OK, "%s", md_errmsg());
    size_t np = md_model_nparams(m);
    float *g = malloc(np * 4);
    cr_assert_eq(md_model_get_grads_host(m, g), MD_OK);
    for (int t = 0; t < md_model_num_tensors(m); t++) {
        const struct md_param_info *ti = md_model_tensor(m, t);
        double s = 0;
        for (size_t k = 0; k < ti->numel; k++) {
            cr_assert(isfinite(g[ti->offset + k]), "%s", ti->name);
            s += fabs(g[ti->offset + k]);
        }
        cr_expect_gt(s, 0, "%s: zero gradient", ti->name);
    }
    free(g);
    md_dev_free(d, dy_dev);
    md_model_free(m);
    md_device_close(d);
}
