/* test_cuda.c - every CUDA kernel against the reference kernels, on the same
 * random inputs, over small grids of shapes, layouts, dtypes and betas; plus
 * the CUDA device's memory, copies, events and graph capture.
 *
 * Without an NVIDIA driver or GPU (CI) every test reports itself skipped with
 * the probe's reason. Outputs start from the same random contents on both
 * sides (so beta != 0 accumulates into equal values) and, for beta == 0, the
 * device copy is poisoned with NaN first, so an unwritten element fails.
 */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/backend_impl.h"
#include "backend/kernels_call.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "helpers.h"
#include "kernel_cases.h"

static md_device *cu, *rf;
static uint64_t seed_ctr = 1000;

static void open_both(int tf32)
{
    const md_backend *b = md_backend_find("cuda");
    const struct md_probe *p = md_backend_probe(b);
    if (!p->available) cr_skip_test("cuda unavailable: %s", p->reason);
    struct md_device_opts o = {.allow_tf32 = tf32};
    cr_assert_eq(md_device_open(b, 0, &o, &cu), MD_OK, "%s", md_errmsg());
    rf = kc_open_ref();
}

static void close_both(void)
{
    md_device_close(cu);
    md_device_close(rf);
    cu = rf = NULL;
}

/* A tensor on both sides: h for the reference, d on the GPU. */
typedef struct {
    void *h, *d;
    size_t n;
    md_dtype t;
} buf;

static buf mk(size_t n, md_dtype t, float lo, float hi)
{
    buf b = {NULL, NULL, n, t};
    size_t bytes = (n ? n : 1) * md_dtype_size(t);
    b.h = calloc(1, bytes);
    if (t == MD_F32 || t == MD_F16 || t == MD_BF16) kc_fill_typed(b.h, t, n, seed_ctr++, lo, hi);
    cr_assert_eq(md_dev_alloc(cu, bytes, &b.d, "test"), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_dev_upload(cu, b.d, b.h, bytes), MD_OK, "%s", md_errmsg());
    return b;
}

/* Re-sends the host contents (after filling h by hand). */
static void push(buf *b) { cr_assert_eq(md_dev_upload(cu, b->d, b->h, b->n * md_dtype_size(b->t)), MD_OK); }

/* An output: random on both sides; with beta == 0 the device copy is NaN. */
static buf out(size_t n, md_dtype t, float beta)
{
    buf b = mk(n, t, -1.0f, 1.0f);
    if (beta == 0.0f) {
        size_t bytes = n * md_dtype_size(t);
        void *nan = malloc(bytes ? bytes : 1);
        for (size_t i = 0; i < n; i++) md_store_f(nan, t, i, NAN);
        cr_assert_eq(md_dev_upload(cu, b.d, nan, bytes), MD_OK);
        free(nan);
    }
    return b;
}

static void drop(buf *b)
{
    free(b->h);
    md_dev_free(cu, b->d);
    b->h = b->d = NULL;
}

static double tol_for(md_dtype t, double f32)
{
    return t == MD_F32 ? f32 : t == MD_F16 ? 1e-2 : 3e-2;
}

/* Compares the device copy with the reference's; fails the test on mismatch. */
static void same(const char *what, buf *b, double atol, double rtol)
{
    size_t es = md_dtype_size(b->t);
    void *got = malloc(b->n * es + 1);
    cr_assert_eq(md_dev_download(cu, got, b->d, b->n * es), MD_OK, "%s: %s", what, md_errmsg());
    double *g = malloc((b->n + 1) * sizeof *g), *r = malloc((b->n + 1) * sizeof *r);
    for (size_t i = 0; i < b->n; i++) {
        if (b->t == MD_I32) {
            g[i] = ((int32_t *)got)[i];
            r[i] = ((int32_t *)b->h)[i];
        } else if (b->t == MD_U8) {
            g[i] = ((uint8_t *)got)[i];
            r[i] = ((uint8_t *)b->h)[i];
        } else {
            g[i] = md_load_f(got, b->t, i);
            r[i] = md_load_f(b->h, b->t, i);
        }
    }
    int ok = th_allclose_d(what, g, r, b->n, atol, rtol);
    free(got);
    free(g);
    free(r);
    cr_assert(ok, "%s differs from the reference", what);
}

#define RUN_BOTH(fn, ra, ca)                                                                    \
    do {                                                                                        \
        cr_assert_eq(fn(rf, &(ra)), MD_OK, "ref %s: %s", #fn, md_errmsg());                    \
        cr_assert_eq(fn(cu, &(ca)), MD_OK, "cuda %s: %s", #fn, md_errmsg());                   \
    } while (0)

static const md_dtype FT[3] = {MD_F32, MD_F16, MD_BF16};

/* ---------------------------------------------------------------------------- */

Test(cuda, device_info_memory_copies_events_and_capture)
{
    open_both(1);
    const struct md_device_info *in = md_device_get_info(cu);
    cr_assert(in->name[0] && in->compute_units > 0 && in->total_memory > 0);
    cr_assert(in->cc_major >= 5 && in->has_events && !in->unified_memory);
    cr_assert(strstr(in->dnn, "cuDNN") && strstr(in->blas, "cuBLAS"), "%s / %s", in->dnn, in->blas);
    /* caching allocator: a freed block of the same class comes back, reserved >= current */
    void *a = NULL, *b = NULL;
    cr_assert_eq(md_dev_alloc(cu, 1000, &a, "t"), MD_OK);
    md_dev_free(cu, a);
    cr_assert_eq(md_dev_alloc(cu, 900, &b, "t"), MD_OK);
    cr_assert_eq(a, b);
    struct md_mem_stats ms;
    md_dev_mem_stats(cu, &ms);
    cr_assert(ms.reserved >= ms.current && ms.driver_total > 0, "reserved %lld current %lld", ms.reserved, ms.current);
    /* copies */
    float h[256], g[256];
    kc_fill(h, 256, 7, -1, 1);
    cr_assert_eq(md_dev_upload(cu, b, h, sizeof h), MD_OK);
    void *c = NULL;
    cr_assert_eq(md_dev_alloc(cu, sizeof h, &c, "t"), MD_OK);
    cr_assert_eq(md_dev_copy(cu, c, b, sizeof h), MD_OK);
    cr_assert_eq(md_dev_download(cu, g, c, sizeof g), MD_OK);
    cr_assert_eq(memcmp(g, h, sizeof h), 0);
    cr_assert_eq(md_dev_memset0(cu, c, sizeof h), MD_OK);
    cr_assert_eq(md_dev_download(cu, g, c, sizeof g), MD_OK);
    for (int i = 0; i < 256; i++) cr_assert_eq(g[i], 0.0f);
    /* graph: capture y = 2*x + y, replay three times */
    struct md_ew_args e = {.op = MD_EW_AXPBY, .n = 256, .dtype = MD_F32, .alpha = 2.0f, .beta = 1.0f,
                           .a = b, .b = c, .y = c};
    cr_assert(md_dev_can_capture(cu));
    void *graph = NULL;
    cr_assert_eq(md_dev_capture_begin(cu), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_k_ew(cu, &e), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_dev_capture_end(cu, &graph), MD_OK, "%s", md_errmsg());
    md_event *t0, *t1;
    cr_assert_eq(md_event_create(cu, &t0), MD_OK);
    cr_assert_eq(md_event_create(cu, &t1), MD_OK);
    cr_assert_eq(md_event_record(cu, t0), MD_OK);
    for (int i = 0; i < 3; i++) cr_assert_eq(md_dev_graph_launch(cu, graph), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_event_record(cu, t1), MD_OK);
    float ms_el = -1;
    cr_assert_eq(md_event_elapsed_ms(cu, t0, t1, &ms_el), MD_OK);
    cr_assert(ms_el >= 0);
    cr_assert_eq(md_dev_download(cu, g, c, sizeof g), MD_OK);
    for (int i = 0; i < 256; i++) cr_assert_float_eq(g[i], 6.0f * h[i], 1e-5f, "%d", i);
    md_dev_graph_destroy(cu, graph);
    md_event_destroy(cu, t0);
    md_event_destroy(cu, t1);
    md_dev_free(cu, b);
    md_dev_free(cu, c);
    close_both();
}

Test(cuda, out_of_memory_names_requested_in_use_and_limit)
{
    const md_backend *bk = md_backend_find("cuda");
    const struct md_probe *p = md_backend_probe(bk);
    if (!p->available) cr_skip_test("cuda unavailable: %s", p->reason);
    struct md_device_opts o = {.memory_fraction = 0.01};
    md_device *d = NULL;
    cr_assert_eq(md_device_open(bk, 0, &o, &d), MD_OK, "%s", md_errmsg());
    void *ptr = NULL;
    size_t big = (size_t)(0.02 * (double)md_device_get_info(d)->total_memory);
    cr_assert_eq(md_dev_alloc(d, big, &ptr, "activations"), MD_ERR_OOM);
    cr_assert(strstr(md_errmsg(), "requested") && strstr(md_errmsg(), "limit"), "%s", md_errmsg());
    md_device_close(d);
}

Test(cuda, gemm)
{
    open_both(0);
    static const int shp[][3] = {{7, 5, 3}, {64, 48, 32}, {33, 17, 65}};
    for (int di = 0; di < 3; di++)
        for (int si = 0; si < 3; si++)
            for (int ta = 0; ta < 2; ta++)
                for (int tb = 0; tb < 2; tb++)
                    for (int bt = 0; bt < 2; bt++) {
                        md_dtype t = FT[di];
                        int m = shp[si][0], n = shp[si][1], k = shp[si][2], batch = bt ? 3 : 1;
                        float beta = bt ? 0.5f : 0.0f;
                        buf A = mk((size_t)m * k * batch, t, -1, 1), B = mk((size_t)k * n * batch, t, -1, 1);
                        buf C = out((size_t)m * n * batch, t, beta);
                        struct md_gemm_args ra = {.trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k,
                                                  .alpha = 1.5f, .beta = beta, .a = A.h, .lda = ta ? m : k,
                                                  .stride_a = (long long)m * k, .b = B.h, .ldb = tb ? k : n,
                                                  .stride_b = (long long)k * n, .c = C.h, .ldc = n,
                                                  .stride_c = (long long)m * n, .batch = batch, .dtype = t};
                        struct md_gemm_args ca = ra;
                        ca.a = A.d;
                        ca.b = B.d;
                        ca.c = C.d;
                        RUN_BOTH(md_k_gemm, ra, ca);
                        char what[96];
                        snprintf(what, sizeof what, "gemm %s %dx%dx%d ta%d tb%d batch%d", md_dtype_name(t), m, n, k,
                                 ta, tb, batch);
                        double tl = tol_for(t, 1e-4) * (t == MD_F32 ? 1 : 2);
                        same(what, &C, tl, tl);
                        drop(&A);
                        drop(&B);
                        drop(&C);
                    }
    close_both();
}

Test(cuda, gemm_tf32_within_tf32_bounds)
{
    open_both(1);
    int m = 96, n = 80, k = 128;
    buf A = mk((size_t)m * k, MD_F32, -1, 1), B = mk((size_t)k * n, MD_F32, -1, 1), C = out((size_t)m * n, MD_F32, 0);
    struct md_gemm_args ra = {.m = m, .n = n, .k = k, .alpha = 1, .a = A.h, .lda = k, .b = B.h, .ldb = n,
                              .c = C.h, .ldc = n, .batch = 1, .dtype = MD_F32};
    struct md_gemm_args ca = ra;
    ca.a = A.d;
    ca.b = B.d;
    ca.c = C.d;
    RUN_BOTH(md_k_gemm, ra, ca);
    same("gemm tf32", &C, 2e-2, 5e-3);
    drop(&A);
    drop(&B);
    drop(&C);
    close_both();
}

struct conv_case { int n, c, h, w, k, r, s, sh, ph, dil, g; };

/* A case's arguments without the buffers (stride, padding and dilation the
 * same both ways), and its tensors' element counts. */
static struct md_conv2d_args case_args(const struct conv_case *q, int lay, md_dtype t, float beta, size_t *nx,
                                       size_t *nw, size_t *ny)
{
    int p = md_conv_out(q->h, q->r, q->sh, q->ph, q->dil), qq = md_conv_out(q->w, q->s, q->sh, q->ph, q->dil);
    *nx = (size_t)q->n * q->c * q->h * q->w;
    *nw = (size_t)q->k * (q->c / q->g) * q->r * q->s;
    *ny = (size_t)q->n * q->k * p * qq;
    return (struct md_conv2d_args){.n = q->n, .c = q->c, .h = q->h, .w = q->w, .k = q->k, .r = q->r, .s = q->s,
                                   .p = p, .q = qq, .stride_h = q->sh, .stride_w = q->sh, .pad_h = q->ph,
                                   .pad_w = q->ph, .dil_h = q->dil, .dil_w = q->dil, .groups = q->g,
                                   .layout = lay ? MD_NHWC : MD_NCHW, .dtype = t, .beta = beta};
}

Test(cuda, conv2d_fwd_bwd_data_bwd_filter)
{
    open_both(0);
    static const struct conv_case cs[] = {
        {2, 3, 8, 8, 4, 3, 3, 1, 1, 1, 1},
        {2, 8, 9, 7, 6, 3, 3, 2, 1, 1, 2},
        {1, 4, 5, 5, 8, 1, 1, 1, 0, 1, 1},
        {2, 4, 9, 9, 4, 3, 3, 1, 2, 2, 1},
        {2, 16, 6, 6, 16, 3, 3, 1, 1, 1, 16}, /* depthwise */
        {3, 1, 10, 10, 8, 3, 3, 1, 1, 1, 1},  /* one input channel: half filter gradient runs in fp32 */
        {2, 5, 12, 12, 8, 7, 7, 2, 3, 1, 1},  /* a 7x7 stride-2 stem on 5 channels: cuDNN directly */
        /* stride 2 on at most 4 channels, NHWC: the forward by space-to-depth */
        {2, 3, 17, 15, 8, 7, 7, 2, 3, 1, 1},  /* an RGB stem, odd sizes */
        {2, 1, 10, 11, 4, 5, 5, 2, 2, 1, 1},
        {3, 4, 9, 8, 6, 3, 3, 2, 1, 1, 1},
        {2, 2, 12, 13, 8, 3, 3, 2, 0, 1, 1},
    };
    for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++)
        for (int lay = 0; lay < 2; lay++)
            for (int di = 0; di < 3; di++)
                for (int bi = 0; bi < 2; bi++) {
                    const struct conv_case *q = &cs[ci];
                    md_dtype t = FT[di];
                    float beta = bi ? 1.0f : 0.0f;
                    size_t nx, nw, ny;
                    struct md_conv2d_args ra = case_args(q, lay, t, beta, &nx, &nw, &ny);
                    buf X = mk(nx, t, -1, 1), W = mk(nw, t, -1, 1), DY = mk(ny, t, -1, 1);
                    buf Y = out(ny, t, beta), DX = out(nx, t, beta), DW = out(nw, t, beta);
                    ra.x = X.h;
                    ra.wt = W.h;
                    ra.y = Y.h;
                    ra.dx = DX.h;
                    ra.dwt = DW.h;
                    ra.dy = DY.h;
                    struct md_conv2d_args ca = ra;
                    ca.x = X.d;
                    ca.wt = W.d;
                    ca.y = Y.d;
                    ca.dx = DX.d;
                    ca.dwt = DW.d;
                    ca.dy = DY.d;
                    RUN_BOTH(md_k_conv2d_fwd, ra, ca);
                    RUN_BOTH(md_k_conv2d_bwd_data, ra, ca);
                    RUN_BOTH(md_k_conv2d_bwd_filter, ra, ca);
                    char what[128];
                    double tl = tol_for(t, 1e-4) * (t == MD_F32 ? 1 : 3);
                    snprintf(what, sizeof what, "conv case %zu %s %s beta %g: fwd", ci, lay ? "NHWC" : "NCHW",
                             md_dtype_name(t), beta);
                    same(what, &Y, tl, tl);
                    snprintf(what, sizeof what, "conv case %zu %s %s beta %g: bwd_data", ci, lay ? "NHWC" : "NCHW",
                             md_dtype_name(t), beta);
                    same(what, &DX, tl, tl);
                    snprintf(what, sizeof what, "conv case %zu %s %s beta %g: bwd_filter", ci, lay ? "NHWC" : "NCHW",
                             md_dtype_name(t), beta);
                    same(what, &DW, tl * 2, tl);
                    drop(&X);
                    drop(&W);
                    drop(&DY);
                    drop(&Y);
                    drop(&DX);
                    drop(&DW);
                }
    close_both();
}

/* The space-to-depth path runs where it should: its scratch is the only
 * allocation named so, and refusing it fails exactly the forwards of
 * stride-2 channels-last convolutions on few channels, with a message naming
 * it; both gradients keep the direct form. */
Test(cuda, conv2d_stride2_few_channels_forward_by_space_to_depth)
{
    setenv("MPSDIAG_TEST_ALLOC_FAIL", "space-to-depth", 1);
    open_both(0);
    static const struct conv_case cs[] = {
        {2, 3, 17, 15, 8, 7, 7, 2, 3, 1, 1}, /* space-to-depth */
        {2, 5, 12, 12, 8, 7, 7, 2, 3, 1, 1}, /* 5 channels: not */
        {2, 3, 9, 9, 8, 3, 3, 1, 1, 1, 1},   /* stride 1: not */
    };
    for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++)
        for (int lay = 0; lay < 2; lay++) {
            const struct conv_case *q = &cs[ci];
            int p = md_conv_out(q->h, q->r, q->sh, q->ph, 1), qq = md_conv_out(q->w, q->s, q->sh, q->ph, 1);
            size_t nx = (size_t)q->n * q->c * q->h * q->w, nw = (size_t)q->k * q->c * q->r * q->s;
            size_t ny = (size_t)q->n * q->k * p * qq;
            buf X = mk(nx, MD_BF16, -1, 1), W = mk(nw, MD_BF16, -1, 1), DY = mk(ny, MD_BF16, -1, 1);
            buf Y = out(ny, MD_BF16, 0), DX = out(nx, MD_BF16, 0), DW = out(nw, MD_BF16, 0);
            struct md_conv2d_args ca = {.n = q->n, .c = q->c, .h = q->h, .w = q->w, .k = q->k, .r = q->r, .s = q->s,
                                        .p = p, .q = qq, .stride_h = q->sh, .stride_w = q->sh, .pad_h = q->ph,
                                        .pad_w = q->ph, .dil_h = 1, .dil_w = 1, .groups = 1,
                                        .layout = lay ? MD_NHWC : MD_NCHW, .dtype = MD_BF16, .x = X.d, .wt = W.d,
                                        .y = Y.d, .dx = DX.d, .dwt = DW.d, .dy = DY.d};
            int want_s2d = ci == 0 && lay == 1;
            md_status sf = md_k_conv2d_fwd(cu, &ca);
            const char *mf = sf != MD_OK ? md_errmsg() : "";
            cr_expect_eq(sf, want_s2d ? MD_ERR_OOM : MD_OK, "case %zu layout %d forward: %s", ci, lay, mf);
            if (want_s2d) cr_expect(strstr(mf, "space-to-depth") != NULL, "%s", mf);
            cr_expect_eq(md_k_conv2d_bwd_filter(cu, &ca), MD_OK, "case %zu layout %d filter gradient: %s", ci, lay,
                         md_errmsg());
            cr_expect_eq(md_k_conv2d_bwd_data(cu, &ca), MD_OK, "case %zu layout %d data gradient: %s", ci, lay,
                         md_errmsg());
            drop(&X);
            drop(&W);
            drop(&DY);
            drop(&Y);
            drop(&DX);
            drop(&DW);
        }
    close_both();
    unsetenv("MPSDIAG_TEST_ALLOC_FAIL");
}

/* A filter gradient whose data gradient follows runs on a second stream
 * beside it once its shape has run (the first call of each stays on the
 * device stream), directly and inside a captured graph; the results are the
 * reference's either way, and MPSDIAG_CUDA_CONV_OVERLAP=0 keeps every call on
 * the device stream. */
Test(cuda, conv2d_filter_gradient_beside_the_data_gradient)
{
    static const struct conv_case cs[] = {
        {4, 32, 12, 12, 32, 3, 3, 1, 1, 1, 1},
        {4, 64, 8, 8, 64, 1, 1, 1, 0, 1, 1},
        {3, 16, 11, 11, 24, 3, 3, 2, 1, 1, 1},
    };
    for (int overlap = 1; overlap >= 0; overlap--) {
        setenv("MPSDIAG_CUDA_CONV_OVERLAP", overlap ? "all" : "0", 1);
        open_both(0);
        long long want = 0;
        for (size_t ci = 0; ci < sizeof cs / sizeof cs[0]; ci++)
            for (int lay = 0; lay < 2; lay++)
                for (int di = 0; di < 3; di++)
                    for (int bi = 0; bi < 2; bi++) {
                        const struct conv_case *q = &cs[ci];
                        md_dtype t = FT[di];
                        float beta = bi ? 1.0f : 0.0f;
                        size_t nx, nw, ny, es = md_dtype_size(t);
                        struct md_conv2d_args ra = case_args(q, lay, t, beta, &nx, &nw, &ny);
                        buf X = mk(nx, t, -1, 1), W = mk(nw, t, -1, 1), DY = mk(ny, t, -1, 1);
                        buf DX = mk(nx, t, -1, 1), DW = mk(nw, t, -1, 1);
                        void *dx0 = malloc(nx * es), *dw0 = malloc(nw * es);
                        memcpy(dx0, DX.h, nx * es);
                        memcpy(dw0, DW.h, nw * es);
                        ra.x = X.h;
                        ra.wt = W.h;
                        ra.dx = DX.h;
                        ra.dwt = DW.h;
                        ra.dy = DY.h;
                        ra.data_grad_follows = 1;
                        cr_assert_eq(md_k_conv2d_bwd_filter(rf, &ra), MD_OK, "%s", md_errmsg());
                        cr_assert_eq(md_k_conv2d_bwd_data(rf, &ra), MD_OK, "%s", md_errmsg());
                        struct md_conv2d_args ca = ra;
                        ca.x = X.d;
                        ca.wt = W.d;
                        ca.dx = DX.d;
                        ca.dwt = DW.d;
                        ca.dy = DY.d;
                        /* 0: the shape's first calls; 1: beside; 2: beside, captured and replayed
                         * (twice with beta 0: the same result again; once with beta 1, which adds) */
                        for (int it = 0; it < 3; it++) {
                            cr_assert_eq(md_dev_upload(cu, DX.d, dx0, nx * es), MD_OK);
                            cr_assert_eq(md_dev_upload(cu, DW.d, dw0, nw * es), MD_OK);
                            void *graph = NULL;
                            if (it == 2) cr_assert_eq(md_dev_capture_begin(cu), MD_OK, "%s", md_errmsg());
                            cr_assert_eq(md_k_conv2d_bwd_filter(cu, &ca), MD_OK, "%s", md_errmsg());
                            cr_assert_eq(md_k_conv2d_bwd_data(cu, &ca), MD_OK, "%s", md_errmsg());
                            if (it == 2) {
                                cr_assert_eq(md_dev_capture_end(cu, &graph), MD_OK, "%s", md_errmsg());
                                cr_assert_eq(md_dev_graph_launch(cu, graph), MD_OK, "%s", md_errmsg());
                                if (beta == 0.0f)
                                    cr_assert_eq(md_dev_graph_launch(cu, graph), MD_OK, "%s", md_errmsg());
                                md_dev_graph_destroy(cu, graph);
                            }
                            if (it > 0) want += overlap;
                            char what[160];
                            double tl = tol_for(t, 1e-4) * (t == MD_F32 ? 1 : 3);
                            snprintf(what, sizeof what, "case %zu %s %s beta %g call %d: bwd_data", ci,
                                     lay ? "NHWC" : "NCHW", md_dtype_name(t), beta, it);
                            same(what, &DX, tl, tl);
                            snprintf(what, sizeof what, "case %zu %s %s beta %g call %d: bwd_filter", ci,
                                     lay ? "NHWC" : "NCHW", md_dtype_name(t), beta, it);
                            same(what, &DW, tl * 2, tl);
                        }
                        free(dx0);
                        free(dw0);
                        drop(&X);
                        drop(&W);
                        drop(&DY);
                        drop(&DX);
                        drop(&DW);
                    }
        cr_expect_eq(cu->conv_beside, want, "overlap %d: %lld filter gradients beside, %lld expected", overlap,
                     cu->conv_beside, want);
        close_both();
    }
    unsetenv("MPSDIAG_CUDA_CONV_OVERLAP");
}

/* modes 4-7: with a fused residual (y = act(bn(x) + r), its gradient into
 * dres), which accumulates (beta_res 1) in the second shape: the NHWC pass
 * then recomputes the mask, elsewhere it reads dres back. */
Test(cuda, batchnorm_train_infer_relu_residual_both_layouts)
{
    open_both(0);
    static const int shp[][3] = {{4, 3, 25}, {8, 40, 9}, {2, 64, 1}};
    for (int si = 0; si < 3; si++)
        for (int lay = 0; lay < 2; lay++)
            for (int di = 0; di < 3; di++)
                for (int mode = 0; mode < 8; mode++) {
                    int training = (mode & 3) < 2, relu = mode & 1, res = mode >= 4;
                    md_dtype t = FT[di];
                    int n = shp[si][0], c = shp[si][1], hw = shp[si][2];
                    size_t nx = (size_t)n * c * hw;
                    float beta = si == 1 ? 1.0f : 0.0f;
                    buf X = mk(nx, t, 0.5f, 2.5f), DY = mk(nx, t, -1, 1), Y = out(nx, t, beta), DX = out(nx, t, beta);
                    buf R = mk(res ? nx : 1, t, -1.5f, 1.0f), DR = out(res ? nx : 1, t, beta);
                    buf G = mk(c, MD_F32, 0.5f, 1.5f), BB = mk(c, MD_F32, -0.5f, 0.5f);
                    buf RM = mk(c, MD_F32, 0, 1), RV = mk(c, MD_F32, 0.5f, 2);
                    buf SM = out(c, MD_F32, 0), SI = out(c, MD_F32, 0);
                    buf DG = out(c, MD_F32, beta), DB = out(c, MD_F32, beta);
                    struct md_batchnorm_args ra = {.n = n, .c = c, .hw = hw, .layout = lay ? MD_NHWC : MD_NCHW,
                                                   .dtype = t, .training = training, .eps = 1e-5f, .momentum = 0.1f,
                                                   .act = relu ? MD_ACT_RELU : MD_ACT_NONE, .x = X.h, .y = Y.h,
                                                   .gamma = G.h, .beta_p = BB.h, .running_mean = RM.h,
                                                   .running_var = RV.h, .save_mean = SM.h, .save_invstd = SI.h,
                                                   .dy = DY.h, .dx = DX.h, .dgamma = DG.h, .dbeta = DB.h,
                                                   .beta = beta, .res = res ? R.h : NULL,
                                                   .dres = res ? DR.h : NULL, .beta_res = beta};
                    struct md_batchnorm_args ca = ra;
                    ca.x = X.d; ca.y = Y.d; ca.gamma = G.d; ca.beta_p = BB.d; ca.running_mean = RM.d;
                    ca.running_var = RV.d; ca.save_mean = SM.d; ca.save_invstd = SI.d; ca.dy = DY.d; ca.dx = DX.d;
                    ca.dgamma = DG.d; ca.dbeta = DB.d;
                    if (res) {
                        ca.res = R.d;
                        ca.dres = DR.d;
                    }
                    RUN_BOTH(md_k_batchnorm_fwd, ra, ca);
                    /* backward reads y: give both sides the reference's y (half rounding of y may differ by an
                     * ulp, which could flip a ReLU mask at exactly 0) */
                    cr_assert_eq(md_dev_upload(cu, Y.d, Y.h, nx * md_dtype_size(t)), MD_OK);
                    if (beta != 0.0f) { /* dx/dgamma/dbeta accumulate into equal starting values */
                        cr_assert_eq(md_dev_upload(cu, DX.d, DX.h, nx * md_dtype_size(t)), MD_OK);
                    }
                    char what[128];
                    double tl = tol_for(t, 2e-5);
                    snprintf(what, sizeof what, "bn fwd shape %d %s %s train %d relu %d res %d", si,
                             lay ? "NHWC" : "NCHW", md_dtype_name(t), training, relu, res);
                    same(what, &Y, tl, tl);
                    if (training) {
                        same("bn save_mean", &SM, 1e-5, 1e-5);
                        same("bn save_invstd", &SI, 1e-5, 1e-4);
                        same("bn running_mean", &RM, 1e-5, 1e-5);
                        same("bn running_var", &RV, 1e-5, 1e-4);
                        /* bwd uses saved statistics: start both from the reference's */
                        cr_assert_eq(md_dev_upload(cu, SM.d, SM.h, c * 4), MD_OK);
                        cr_assert_eq(md_dev_upload(cu, SI.d, SI.h, c * 4), MD_OK);
                    }
                    RUN_BOTH(md_k_batchnorm_bwd, ra, ca);
                    snprintf(what, sizeof what, "bn bwd dx shape %d %s %s train %d relu %d res %d", si,
                             lay ? "NHWC" : "NCHW", md_dtype_name(t), training, relu, res);
                    same(what, &DX, tl * 4, tl);
                    same("bn dgamma", &DG, tl * 10, tl);
                    same("bn dbeta", &DB, tl * 10, tl);
                    if (res) same("bn dres", &DR, tl, tl);
                    drop(&R); drop(&DR);
                    drop(&X); drop(&DY); drop(&Y); drop(&DX); drop(&G); drop(&BB); drop(&RM); drop(&RV);
                    drop(&SM); drop(&SI); drop(&DG); drop(&DB);
                }
    close_both();
}

/* --sync-bn's path (two exchanges in forward, one in backward) with one rank
 * and no communicator: the exchanges leave the sums as they are, so the
 * results are the reference's local batch norm. Two GPUs: docs/distributed.md. */
Test(cuda, batchnorm_sync_one_rank_equals_local)
{
    open_both(0);
    struct md_bn_sync one = {1, NULL, NULL};
    static const int shp[][3] = {{4, 3, 25}, {8, 40, 9}};
    for (int si = 0; si < 2; si++)
        for (int lay = 0; lay < 2; lay++)
            for (int di = 0; di < 3; di++)
                for (int relu = 0; relu < 2; relu++) {
                    md_dtype t = FT[di];
                    int n = shp[si][0], c = shp[si][1], hw = shp[si][2];
                    size_t nx = (size_t)n * c * hw;
                    /* fp32 far from 0: the exchanged form must not cancel */
                    float lo = t == MD_F32 ? 10.0f : 0.5f, hi = t == MD_F32 ? 12.0f : 2.5f;
                    buf X = mk(nx, t, lo, hi), DY = mk(nx, t, -1, 1), Y = out(nx, t, 0), DX = out(nx, t, 0);
                    buf G = mk(c, MD_F32, 0.5f, 1.5f), BB = mk(c, MD_F32, -0.5f, 0.5f);
                    buf RM = mk(c, MD_F32, 0, 1), RV = mk(c, MD_F32, 0.5f, 2);
                    buf SM = out(c, MD_F32, 0), SI = out(c, MD_F32, 0), DG = out(c, MD_F32, 0), DB = out(c, MD_F32, 0);
                    struct md_batchnorm_args ra = {.n = n, .c = c, .hw = hw, .layout = lay ? MD_NHWC : MD_NCHW,
                                                   .dtype = t, .training = 1, .eps = 1e-5f, .momentum = 0.1f,
                                                   .act = relu ? MD_ACT_RELU : MD_ACT_NONE, .x = X.h, .y = Y.h,
                                                   .gamma = G.h, .beta_p = BB.h, .running_mean = RM.h,
                                                   .running_var = RV.h, .save_mean = SM.h, .save_invstd = SI.h,
                                                   .dy = DY.h, .dx = DX.h, .dgamma = DG.h, .dbeta = DB.h};
                    struct md_batchnorm_args ca = ra;
                    ca.x = X.d; ca.y = Y.d; ca.gamma = G.d; ca.beta_p = BB.d; ca.running_mean = RM.d;
                    ca.running_var = RV.d; ca.save_mean = SM.d; ca.save_invstd = SI.d; ca.dy = DY.d; ca.dx = DX.d;
                    ca.dgamma = DG.d; ca.dbeta = DB.d;
                    ca.sync = &one;
                    RUN_BOTH(md_k_batchnorm_fwd, ra, ca);
                    cr_assert_eq(md_dev_upload(cu, Y.d, Y.h, nx * md_dtype_size(t)), MD_OK);
                    char what[128];
                    double tl = tol_for(t, 2e-5);
                    snprintf(what, sizeof what, "sync bn fwd shape %d %s %s relu %d", si, lay ? "NHWC" : "NCHW",
                             md_dtype_name(t), relu);
                    same(what, &Y, tl, tl);
                    same("sync bn save_mean", &SM, 1e-5, 1e-5);
                    same("sync bn save_invstd", &SI, 1e-5, 1e-4);
                    same("sync bn running_mean", &RM, 1e-5, 1e-5);
                    same("sync bn running_var", &RV, 1e-5, 1e-4);
                    cr_assert_eq(md_dev_upload(cu, SM.d, SM.h, c * 4), MD_OK);
                    cr_assert_eq(md_dev_upload(cu, SI.d, SI.h, c * 4), MD_OK);
                    RUN_BOTH(md_k_batchnorm_bwd, ra, ca);
                    snprintf(what, sizeof what, "sync bn bwd dx shape %d %s %s relu %d", si, lay ? "NHWC" : "NCHW",
                             md_dtype_name(t), relu);
                    same(what, &DX, tl * 4, tl);
                    same("sync bn dgamma", &DG, tl * 10, tl);
                    same("sync bn dbeta", &DB, tl * 10, tl);
                    drop(&X); drop(&DY); drop(&Y); drop(&DX); drop(&G); drop(&BB); drop(&RM); drop(&RV);
                    drop(&SM); drop(&SI); drop(&DG); drop(&DB);
                }
    close_both();
}

Test(cuda, activations_dropout_ew_reduce_cast)
{
    open_both(0);
    for (int di = 0; di < 3; di++) {
        md_dtype t = FT[di];
        double tl = tol_for(t, 1e-5);
        size_t n = 3001;
        for (int act = 0; act < MD_ACT_COUNT; act++)
            for (int bi = 0; bi < 4; bi++) { /* odd n: scalar kernels; n = 4096: 16-byte vector kernels */
                float beta = bi & 1 ? 1.0f : 0.0f;
                n = bi < 2 ? 3001 : 4096;
                buf X = mk(n, t, -3, 3), DY = mk(n, t, -1, 1), Y = out(n, t, beta), DX = out(n, t, beta);
                struct md_act_args ra = {.act = act, .alpha = 0.1f, .n = n, .dtype = t, .x = X.h, .y = Y.h,
                                         .dy = DY.h, .dx = DX.h, .beta = beta};
                struct md_act_args ca = ra;
                ca.x = X.d; ca.y = Y.d; ca.dy = DY.d; ca.dx = DX.d;
                RUN_BOTH(md_k_act_fwd, ra, ca);
                RUN_BOTH(md_k_act_bwd, ra, ca);
                char what[64];
                snprintf(what, sizeof what, "act %d fwd %s", act, md_dtype_name(t));
                same(what, &Y, tl, tl);
                snprintf(what, sizeof what, "act %d bwd %s", act, md_dtype_name(t));
                same(what, &DX, tl, tl);
                drop(&X); drop(&DY); drop(&Y); drop(&DX);
            }
        /* dropout: identical masks */
        {
            buf X = mk(n, t, -1, 1), DY = mk(n, t, -1, 1), Y = out(n, t, 0), DX = out(n, t, 0);
            buf M = mk(n, MD_U8, 0, 0);
            struct md_dropout_args ra = {.n = n, .p = 0.3f, .seed = 42, .offset = 1000, .dtype = t, .x = X.h,
                                         .y = Y.h, .mask = M.h, .dy = DY.h, .dx = DX.h};
            struct md_dropout_args ca = ra;
            ca.x = X.d; ca.y = Y.d; ca.mask = M.d; ca.dy = DY.d; ca.dx = DX.d;
            RUN_BOTH(md_k_dropout_fwd, ra, ca);
            RUN_BOTH(md_k_dropout_bwd, ra, ca);
            same("dropout mask", &M, 0, 0);
            same("dropout fwd", &Y, tl, tl);
            same("dropout bwd", &DX, tl, tl);
            ra.mask = NULL; ca.mask = NULL; /* recomputed from (seed, offset) */
            RUN_BOTH(md_k_dropout_bwd, ra, ca);
            same("dropout bwd (no mask)", &DX, tl, tl);
            /* the offset read from device memory, as a replayed graph does */
            uint64_t off = 5ull << 32;
            buf OFF = mk(2, MD_I32, 0, 0);
            memcpy(OFF.h, &off, sizeof off);
            push(&OFF);
            ra.offset_dev = OFF.h; ca.offset_dev = OFF.d;
            ra.mask = M.h; ca.mask = M.d;
            RUN_BOTH(md_k_dropout_fwd, ra, ca);
            same("dropout mask (device-side offset)", &M, 0, 0);
            same("dropout fwd (device-side offset)", &Y, tl, tl);
            drop(&X); drop(&DY); drop(&Y); drop(&DX); drop(&M); drop(&OFF);
        }
        /* ew */
        for (int op2 = 0; op2 < 2 * MD_EW_COUNT; op2++) {
            int op = op2 % MD_EW_COUNT;
            n = op2 < MD_EW_COUNT ? 3001 : 4096;
            buf A = mk(n, t, -1, 1), B = mk(n, t, -1, 1), Y = out(n, t, 0), S = mk(1, MD_F32, 0.5f, 2);
            struct md_ew_args ra = {.op = op, .n = n, .dtype = t, .alpha = 0.7f, .beta = 0.3f,
                                    .scale_dev = op == MD_EW_AXPBY ? S.h : NULL, .a = A.h, .b = B.h, .y = Y.h};
            struct md_ew_args ca = ra;
            ca.scale_dev = op == MD_EW_AXPBY ? S.d : NULL;
            ca.a = A.d; ca.b = B.d; ca.y = Y.d;
            RUN_BOTH(md_k_ew, ra, ca);
            char what[64];
            snprintf(what, sizeof what, "ew %d %s", op, md_dtype_name(t));
            same(what, &Y, tl, tl);
            drop(&A); drop(&B); drop(&Y); drop(&S);
        }
        /* reduce */
        for (int op = 0; op < 3; op++) {
            size_t rn = 100003;
            buf A = mk(rn, t, -1, 1), B = mk(rn, t, -1, 1), O = mk(1, MD_F32, 1, 2);
            struct md_reduce_args ra = {.op = op, .n = rn, .dtype = t, .a = A.h, .b = B.h, .out = O.h, .beta = 1.0f};
            struct md_reduce_args ca = ra;
            ca.a = A.d; ca.b = B.d; ca.out = O.d;
            RUN_BOTH(md_k_reduce, ra, ca);
            char what[64];
            snprintf(what, sizeof what, "reduce %d %s", op, md_dtype_name(t));
            same(what, &O, 1e-2, 1e-4);
            drop(&A); drop(&B); drop(&O);
        }
        /* casts to every float type */
        for (int dj = 0; dj < 3; dj++) {
            buf S = mk(n, t, -100, 100), D = out(n, FT[dj], 0);
            struct md_cast_args ra = {.n = n, .src_type = t, .dst_type = FT[dj], .src = S.h, .dst = D.h};
            struct md_cast_args ca = ra;
            ca.src = S.d; ca.dst = D.d;
            RUN_BOTH(md_k_cast, ra, ca);
            same("cast", &D, 0, 0); /* both round to nearest even: exact */
            drop(&S); drop(&D);
        }
    }
    /* a non-finite element makes the sum non-finite */
    {
        buf A = mk(5000, MD_F32, -1, 1), O = mk(1, MD_F32, 0, 0);
        ((float *)A.h)[1234] = INFINITY;
        push(&A);
        struct md_reduce_args ca = {.op = MD_RED_SUMSQ, .n = 5000, .dtype = MD_F32, .a = A.d, .out = O.d};
        cr_assert_eq(md_k_reduce(cu, &ca), MD_OK);
        float o;
        cr_assert_eq(md_dev_download(cu, &o, O.d, 4), MD_OK);
        cr_assert(!isfinite(o));
        drop(&A); drop(&O);
    }
    close_both();
}

Test(cuda, pooling_gap_bias_chslice_permute)
{
    open_both(0);
    static const int pc[][6] = {/* kh, kw, stride, pad, h, w */ {3, 3, 2, 1, 9, 8}, {2, 2, 2, 0, 8, 6}, {3, 3, 1, 1, 5, 5}};
    for (int lay = 0; lay < 2; lay++)
        for (int di = 0; di < 2; di++) /* max pooling ties in bf16 would make the routing ambiguous */
            for (int ci = 0; ci < 3; ci++)
                for (int kind = 0; kind < 2; kind++)
                    for (int inc = 0; inc < 4; inc++) { /* c = 5: scalar kernels; c = 16: NHWC vector kernels */
                        md_dtype t = FT[di];
                        int n = 2, c = inc < 2 ? 5 : 16, h = pc[ci][4], w = pc[ci][5];
                        int p = md_conv_out(h, pc[ci][0], pc[ci][2], pc[ci][3], 1);
                        int q = md_conv_out(w, pc[ci][1], pc[ci][2], pc[ci][3], 1);
                        size_t nx = (size_t)n * c * h * w, ny = (size_t)n * c * p * q;
                        buf X = mk(nx, t, 0, 0), DY = mk(ny, t, -1, 1), Y = out(ny, t, 0), DX = out(nx, t, 0);
                        float *d = malloc(nx * sizeof *d);
                        kc_fill_distinct(d, nx, seed_ctr++, -1, 1);
                        for (size_t i = 0; i < nx; i++) md_store_f(X.h, t, i, d[i]);
                        free(d);
                        push(&X);
                        struct md_pool2d_args ra = {.kind = kind, .n = n, .c = c, .h = h, .w = w, .p = p, .q = q,
                                                    .kh = pc[ci][0], .kw = pc[ci][1], .stride_h = pc[ci][2],
                                                    .stride_w = pc[ci][2], .pad_h = pc[ci][3], .pad_w = pc[ci][3],
                                                    .count_include_pad = inc & 1, .layout = lay ? MD_NHWC : MD_NCHW,
                                                    .dtype = t, .x = X.h, .y = Y.h, .y_out = Y.h, .dy = DY.h,
                                                    .dx = DX.h};
                        struct md_pool2d_args ca = ra;
                        ca.x = X.d; ca.y = Y.d; ca.y_out = Y.d; ca.dy = DY.d; ca.dx = DX.d;
                        RUN_BOTH(md_k_pool2d_fwd, ra, ca);
                        RUN_BOTH(md_k_pool2d_bwd, ra, ca);
                        char what[96];
                        double tl = tol_for(t, 1e-5);
                        snprintf(what, sizeof what, "pool kind %d case %d %s %s inc %d fwd", kind, ci,
                                 lay ? "NHWC" : "NCHW", md_dtype_name(t), inc);
                        same(what, &Y, tl, tl);
                        snprintf(what, sizeof what, "pool kind %d case %d %s %s inc %d bwd", kind, ci,
                                 lay ? "NHWC" : "NCHW", md_dtype_name(t), inc);
                        same(what, &DX, tl, tl);
                        drop(&X); drop(&DY); drop(&Y); drop(&DX);
                    }
    for (int lay = 0; lay < 2; lay++)
        for (int di = 0; di < 3; di++) {
            md_dtype t = FT[di];
            double tl = tol_for(t, 1e-5);
            int n = 3, c = 37, hw = 49;
            size_t nx = (size_t)n * c * hw;
            md_layout L = lay ? MD_NHWC : MD_NCHW;
            /* gap */
            buf X = mk(nx, t, -1, 1), DY = mk((size_t)n * c, t, -1, 1), Y = out((size_t)n * c, t, 1), DX = out(nx, t, 1);
            struct md_gap_args ga = {.n = n, .c = c, .hw = hw, .layout = L, .dtype = t, .x = X.h, .y = Y.h,
                                     .dy = DY.h, .dx = DX.h, .beta = 1.0f};
            struct md_gap_args gc = ga;
            gc.x = X.d; gc.y = Y.d; gc.dy = DY.d; gc.dx = DX.d;
            RUN_BOTH(md_k_gap_fwd, ga, gc);
            RUN_BOTH(md_k_gap_bwd, ga, gc);
            same("gap fwd", &Y, tl, tl);
            same("gap bwd", &DX, tl, tl);
            /* bias */
            buf BI = mk(c, MD_F32, -1, 1), DB = out(c, MD_F32, 0);
            struct md_bias_args ba = {.n = n, .c = c, .hw = hw, .layout = L, .dtype = t, .y = X.h, .bias = BI.h,
                                      .dy = X.h, .dbias = DB.h};
            struct md_bias_args bc = ba;
            bc.y = X.d; bc.bias = BI.d; bc.dy = X.d; bc.dbias = DB.d;
            RUN_BOTH(md_k_bias_add, ba, bc);
            same("bias add", &X, tl, tl);
            cr_assert_eq(md_dev_upload(cu, X.d, X.h, nx * md_dtype_size(t)), MD_OK);
            RUN_BOTH(md_k_bias_grad, ba, bc);
            same("bias grad", &DB, tl * 10, tl);
            /* chslice: channels 5..5+11 of x into 20..31 of a 40-channel tensor, accumulating */
            buf D = out((size_t)n * 40 * hw, t, 1);
            struct md_chslice_args sa = {.n = n, .hw = hw, .cc = 11, .src_c = c, .src_off = 5, .dst_c = 40,
                                         .dst_off = 20, .layout = L, .dtype = t, .src = X.h, .dst = D.h, .beta = 1};
            struct md_chslice_args sc = sa;
            sc.src = X.d; sc.dst = D.d;
            RUN_BOTH(md_k_chslice, sa, sc);
            same("chslice", &D, tl, tl);
            /* permute in the direction this layout names */
            buf P = out(nx, t, 0);
            struct md_permute_args pa = {.n = n, .c = c, .h = 7, .w = 7, .to_nhwc = lay, .dtype = t, .src = X.h, .dst = P.h};
            struct md_permute_args pcu = pa;
            pcu.src = X.d; pcu.dst = P.d;
            RUN_BOTH(md_k_permute, pa, pcu);
            same("permute", &P, 0, 0);
            drop(&X); drop(&DY); drop(&Y); drop(&DX); drop(&BI); drop(&DB); drop(&D); drop(&P);
        }
    close_both();
}

Test(cuda, xent_and_optimizers)
{
    open_both(0);
    static const int xs[][2] = {{8, 10}, {37, 1000}, {256, 3}};
    for (int di = 0; di < 3; di++)
        for (int si = 0; si < 3; si++) {
            md_dtype t = FT[di];
            int n = xs[si][0], C = xs[si][1];
            buf L = mk((size_t)n * C, t, -4, 4), LAB = mk(n, MD_I32, 0, 0), LS = mk(1, MD_F32, 1, 2);
            buf COR = mk(1, MD_I32, 0, 0), DL = out((size_t)n * C, t, 0);
            for (int i = 0; i < n; i++) ((int32_t *)LAB.h)[i] = (int32_t)(md_rng_hash(5, (uint64_t)i) % (uint64_t)C);
            ((int32_t *)COR.h)[0] = 3;
            push(&LAB);
            push(&COR);
            struct md_xent_args ra = {.n = n, .classes = C, .smoothing = si == 1 ? 0.1f : 0.0f, .dtype = t,
                                      .logits = L.h, .labels = LAB.h, .loss_sum = LS.h, .correct = COR.h,
                                      .dlogits = DL.h, .grad_scale = 1.0f / (float)n};
            struct md_xent_args ca = ra;
            ca.logits = L.d; ca.labels = LAB.d; ca.loss_sum = LS.d; ca.correct = COR.d; ca.dlogits = DL.d;
            RUN_BOTH(md_k_xent, ra, ca);
            char what[64];
            snprintf(what, sizeof what, "xent loss %s %dx%d", md_dtype_name(t), n, C);
            same(what, &LS, 1e-3, 1e-5);
            same("xent correct", &COR, 0, 0);
            same("xent dlogits", &DL, tol_for(t, 1e-6), tol_for(t, 1e-4));
            drop(&L); drop(&LAB); drop(&LS); drop(&COR); drop(&DL);
        }
    for (int kind = 0; kind < 2; kind++)
        for (int variant = 0; variant < 3; variant++)
            for (int hi = 0; hi < 3; hi++) {
                size_t n = 10007;
                buf P = mk(n, MD_F32, -1, 1), G = mk(n, MD_F32, -1, 1), M = mk(n, MD_F32, -0.1f, 0.1f);
                buf V = mk(n, MD_F32, 0, 0.01f), GS = mk(1, MD_F32, 0.5f, 0.5f);
                md_dtype ht = FT[hi];
                buf H = out(n, ht, 0);
                struct md_optim_args ra = {.kind = kind, .n = n, .lr = 0.05f, .momentum = variant == 2 ? 0 : 0.9f,
                                           .weight_decay = 5e-4f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                                           .nesterov = variant == 1, .step = variant == 0 ? 1 : 7,
                                           .grad_scale = 0.25f, .grad_scale_dev = variant ? GS.h : NULL,
                                           .params = P.h, .grads = G.h, .m = M.h, .v = V.h,
                                           .params_half = hi ? H.h : NULL, .half_dtype = ht};
                struct md_optim_args ca = ra;
                ca.grad_scale_dev = variant ? GS.d : NULL;
                ca.params = P.d; ca.grads = G.d; ca.m = M.d; ca.v = V.d; ca.params_half = hi ? H.d : NULL;
                RUN_BOTH(md_k_optim, ra, ca);
                char what[64];
                snprintf(what, sizeof what, "optim %d variant %d params", kind, variant);
                same(what, &P, 1e-6, 1e-5);
                same("optim m", &M, 1e-6, 1e-5);
                if (kind == MD_OPT_ADAMW) same("optim v", &V, 1e-9, 1e-5);
                if (hi) same("optim params_half", &H, tol_for(ht, 0), tol_for(ht, 0) / 4);
                drop(&P); drop(&G); drop(&M); drop(&V); drop(&GS); drop(&H);
            }
    /* device-side step values (md_optim_ctl, what a captured step replays):
     * clipping, t from the block, a skipped non-finite step; the plain lr,
     * step and grad_scale must be ignored */
    for (int kind = 0; kind < 2; kind++)
        for (int cv = 0; cv < 3; cv++) {
            size_t n = 10007;
            buf P = mk(n, MD_F32, -1, 1), G = mk(n, MD_F32, -1, 1), M = mk(n, MD_F32, -0.1f, 0.1f);
            buf V = mk(n, MD_F32, 0, 0.01f), H = mk(n, MD_BF16, -1, 1);
            buf C = mk(sizeof(struct md_optim_ctl) / 4, MD_I32, 0, 0);
            struct md_optim_ctl c = {.step = cv == 1 ? 1 : 9, .clip = cv == 0 ? 0.5 : 0.0, .lr = 0.03f,
                                     .grad_scale = 0.5f, .loss_sum = cv == 2 ? NAN : 3.0f, .grad_sumsq = 50.0f};
            memcpy(C.h, &c, sizeof c);
            push(&C);
            struct md_optim_args ra = {.kind = kind, .n = n, .lr = 99.0f, .momentum = 0.9f, .weight_decay = 5e-4f,
                                       .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .step = 1000, .grad_scale = 7.0f,
                                       .ctl = C.h, .params = P.h, .grads = G.h, .m = M.h, .v = V.h,
                                       .params_half = H.h, .half_dtype = MD_BF16};
            struct md_optim_args ca = ra;
            ca.ctl = C.d; ca.params = P.d; ca.grads = G.d; ca.m = M.d; ca.v = V.d; ca.params_half = H.d;
            RUN_BOTH(md_k_optim, ra, ca);
            char what[64];
            snprintf(what, sizeof what, "optim ctl %d case %d params", kind, cv);
            same(what, &P, 1e-6, 1e-5);
            same("optim ctl m", &M, 1e-6, 1e-5);
            if (kind == MD_OPT_ADAMW) same("optim ctl v", &V, 1e-9, 1e-5);
            same("optim ctl params_half", &H, tol_for(MD_BF16, 0), tol_for(MD_BF16, 0) / 4);
            drop(&P); drop(&G); drop(&M); drop(&V); drop(&H); drop(&C);
        }
    /* the loss scaler decided on the device (md_scale_ctl): 1/scale and t
     * from it, then its rule once (growth at the interval, halving and a skip,
     * giving up at scale 1, and the rule alone when n is 0), the same state
     * bit for bit as the reference's */
    for (int kind = 0; kind < 2; kind++)
        for (int sv = 0; sv < 4; sv++) {
            size_t n = sv == 3 ? 0 : 10007;
            buf P = mk(n, MD_F32, -1, 1), G = mk(n, MD_F32, -1000, 1000), M = mk(n, MD_F32, -0.1f, 0.1f);
            buf V = mk(n, MD_F32, 0, 0.01f);
            buf C = mk(sizeof(struct md_optim_ctl) / 4, MD_I32, 0, 0);
            buf S = mk(sizeof(struct md_scale_ctl) / 4, MD_I32, 0, 0);
            struct md_optim_ctl c = {.step = 1000, .clip = 0.0, .lr = 0.03f, .grad_scale = 7.0f, .loss_sum = 3.0f,
                                     .grad_sumsq = sv == 1 || sv == 2 ? INFINITY : 50.0f};
            struct md_scale_ctl sc;
            memset(&sc, 0, sizeof sc);
            sc.taken = 4;
            sc.clean = 2;
            sc.skipped = 1;
            sc.scale = sv == 2 ? 1.0f : 1024.0f;
            sc.growth_interval = 3;
            memcpy(C.h, &c, sizeof c);
            memcpy(S.h, &sc, sizeof sc);
            push(&C);
            push(&S);
            struct md_optim_args ra = {.kind = kind, .n = n, .lr = 99.0f, .momentum = 0.9f, .weight_decay = 5e-4f,
                                       .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .step = 1000, .grad_scale = 7.0f,
                                       .ctl = C.h, .scaler = S.h, .scaler_update = 1, .params = P.h, .grads = G.h,
                                       .m = M.h, .v = V.h};
            struct md_optim_args ca = ra;
            ca.ctl = C.d; ca.scaler = S.d; ca.params = P.d; ca.grads = G.d; ca.m = M.d; ca.v = V.d;
            RUN_BOTH(md_k_optim, ra, ca);
            char what[64];
            snprintf(what, sizeof what, "optim scaler %d case %d params", kind, sv);
            same(what, &P, 1e-6, 1e-5);
            same("optim scaler m", &M, 1e-6, 1e-5);
            snprintf(what, sizeof what, "optim scaler %d case %d state", kind, sv);
            same(what, &S, 0, 0);
            const struct md_scale_ctl *r = S.h;
            cr_assert(sv == 2 ? r->gave_up && r->scale == 1.0f
                      : sv == 1 ? r->scale == 512.0f && r->skipped == 2 && r->taken == 4
                                : r->scale == 2048.0f && r->taken == 5 && r->clean == 0, "%s", what);
            drop(&P); drop(&G); drop(&M); drop(&V); drop(&C); drop(&S);
        }
    {   /* the loss gradient seeded with a device-side scale */
        int nn = 37, C = 10;
        buf L = mk((size_t)nn * C, MD_F16, -3, 3), LAB = mk(nn, MD_I32, 0, 0), LS = mk(1, MD_F32, 0, 0);
        buf DL = out((size_t)nn * C, MD_F16, 0), SC = mk(1, MD_F32, 2048.0f, 2048.0f);
        for (int i = 0; i < nn; i++) ((int32_t *)LAB.h)[i] = (i * 7) % C;
        push(&LAB);
        struct md_xent_args ra = {.n = nn, .classes = C, .dtype = MD_F16, .logits = L.h, .labels = LAB.h,
                                  .loss_sum = LS.h, .dlogits = DL.h, .grad_scale = 1.0f / nn, .grad_scale_dev = SC.h};
        struct md_xent_args ca = ra;
        ca.logits = L.d; ca.labels = LAB.d; ca.loss_sum = LS.d; ca.dlogits = DL.d; ca.grad_scale_dev = SC.d;
        RUN_BOTH(md_k_xent, ra, ca);
        same("xent dlogits, device-side scale", &DL, tol_for(MD_F16, 1e-3), tol_for(MD_F16, 1e-4));
        drop(&L); drop(&LAB); drop(&LS); drop(&DL); drop(&SC);
    }
    close_both();
}
