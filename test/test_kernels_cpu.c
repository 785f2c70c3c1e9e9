/* test_kernels_cpu.c - what is specific to the CPU backend: the thread pool,
 * and results that do not depend on the thread count. */
#include <cblas.h>
#include <criterion/criterion.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_conv_direct.h"
#include "backend/cpu/cpu_conv_wino.h"
#include "backend/cpu/cpu_kernels.h"
#include "backend/kernels_call.h"
#include "core/threadpool.h"
#include "helpers.h"
#include "kernel_cases.h"

struct cover { atomic_int *hits; };

static void mark(void *ctx, long long b, long long e)
{
    struct cover *c = ctx;
    for (long long i = b; i < e; i++) atomic_fetch_add(&c->hits[i], 1);
}

Test(threadpool, every_index_exactly_once_for_any_size_and_grain)
{
    static const long long ns[] = {0, 1, 2, 7, 1000, 100003};
    static const long long grains[] = {1, 3, 64, 100000};
    for (int threads = 1; threads <= 4; threads++) {
        md_threadpool_set_size(threads);
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++)
            for (size_t g = 0; g < sizeof grains / sizeof grains[0]; g++) {
                long long n = ns[i];
                atomic_int *hits = calloc((size_t)(n ? n : 1), sizeof *hits);
                struct cover c = {hits};
                md_parallel_for(n, grains[g], mark, &c);
                for (long long k = 0; k < n; k++)
                    cr_assert_eq(atomic_load(&hits[k]), 1, "threads %d n %lld grain %lld index %lld", threads, n,
                                 grains[g], k);
                free(hits);
            }
    }
    md_threadpool_shutdown();
    md_threadpool_set_size(1);
}

Test(threadpool, many_small_jobs_do_not_hang)
{
    md_threadpool_set_size(3);
    atomic_int *hits = calloc(64, sizeof *hits);
    struct cover c = {hits};
    for (int j = 0; j < 5000; j++) md_parallel_for(64, 1, mark, &c);
    for (int k = 0; k < 64; k++) cr_assert_eq(atomic_load(&hits[k]), 5000);
    free(hits);
    md_threadpool_shutdown();
    md_threadpool_set_size(1);
}

static md_device *open_cpu(int threads)
{
    md_device *dev = NULL;
    struct md_device_opts o = {.threads = threads};
    cr_assert_eq(md_device_open(md_backend_find("cpu"), 0, &o, &dev), MD_OK, "%s", md_errmsg());
    return dev;
}

/* Reductions combine fixed chunks in order: bit-identical for 1 and 3 threads. */
Test(kernels_cpu, results_do_not_depend_on_thread_count)
{
    enum { N = 300007, BN_N = 16, BN_C = 24, BN_HW = 49 };
    float *x = malloc(N * 4);
    kc_fill(x, N, 7, -1, 2);
    float sums[2], y[2][BN_N * BN_C * BN_HW], dx[2][BN_N * BN_C * BN_HW], dg[2][BN_C], loss[2];
    float gamma[BN_C], betap[BN_C], rm[BN_C], rv[BN_C], sm[BN_C], si[BN_C], db[BN_C];
    float *logits = malloc(4 * 256 * 100);
    int32_t labels[256];
    kc_fill(logits, 256 * 100, 9, -3, 3);
    for (int i = 0; i < 256; i++) labels[i] = (i * 37) % 100;
    kc_fill(gamma, BN_C, 1, 0.5f, 1.5f);
    kc_fill(betap, BN_C, 2, -1, 1);
    for (int t = 0; t < 2; t++) {
        md_device *dev = open_cpu(t ? 3 : 1);
        struct md_reduce_args r = {.op = MD_RED_SUMSQ, .n = N, .dtype = MD_F32, .a = x, .out = &sums[t]};
        cr_assert_eq(md_k_reduce(dev, &r), MD_OK);
        memset(rm, 0, sizeof rm);
        for (int i = 0; i < BN_C; i++) rv[i] = 1.0f;
        struct md_batchnorm_args b = {.n = BN_N, .c = BN_C, .hw = BN_HW, .layout = MD_NHWC, .dtype = MD_F32,
                                      .training = 1, .eps = 1e-5f, .momentum = 0.1f, .act = MD_ACT_RELU, .x = x,
                                      .y = y[t], .gamma = gamma, .beta_p = betap, .running_mean = rm,
                                      .running_var = rv, .save_mean = sm, .save_invstd = si, .dy = x + 1000,
                                      .dx = dx[t], .dgamma = dg[t], .dbeta = db};
        cr_assert_eq(md_k_batchnorm_fwd(dev, &b), MD_OK);
        cr_assert_eq(md_k_batchnorm_bwd(dev, &b), MD_OK);
        loss[t] = 0.0f;
        struct md_xent_args xe = {.n = 256, .classes = 100, .smoothing = 0.1f, .dtype = MD_F32, .logits = logits,
                                  .labels = labels, .loss_sum = &loss[t], .grad_scale = 1.0f};
        cr_assert_eq(md_k_xent(dev, &xe), MD_OK);
        md_device_close(dev);
    }
    cr_assert(memcmp(&sums[0], &sums[1], 4) == 0, "reduce: %.9g vs %.9g", (double)sums[0], (double)sums[1]);
    cr_assert(memcmp(y[0], y[1], sizeof y[0]) == 0, "batchnorm_fwd NHWC differs between 1 and 3 threads");
    cr_assert(memcmp(dx[0], dx[1], sizeof dx[0]) == 0, "batchnorm_bwd NHWC differs between 1 and 3 threads");
    cr_assert(memcmp(dg[0], dg[1], sizeof dg[0]) == 0, "dgamma differs between 1 and 3 threads");
    cr_assert(memcmp(&loss[0], &loss[1], 4) == 0, "xent loss differs between 1 and 3 threads");
    free(x);
    free(logits);
}

/* Convolutions too (the direct AVX-512 kernels where the CPU has them: image
 * groups per task follow the thread count, the filter's slots do not; the
 * im2col/GEMM paths otherwise): bit-identical for 1 and 3 threads. */
Test(kernels_cpu, convolutions_do_not_depend_on_thread_count)
{
    enum { N = 6, C = 20, H = 9, W = 11, K = 70, R = 3 };
    size_t nx = (size_t)N * C * H * W, nw = (size_t)K * C * R * R, ny = (size_t)N * K * H * W;
    float *x = malloc(nx * 4), *w = malloc(nw * 4), *dy = malloc(ny * 4);
    float *out[3][2] = {{malloc(ny * 4), malloc(ny * 4)}, {malloc(nx * 4), malloc(nx * 4)},
                        {malloc(nw * 4), malloc(nw * 4)}};
    kc_fill(x, nx, 31, -1, 1);
    kc_fill(w, nw, 32, -1, 1);
    kc_fill(dy, ny, 33, -1, 1);
    for (int lay = 0; lay < 2; lay++) {
        for (int t = 0; t < 2; t++) {
            md_device *dev = open_cpu(t ? 3 : 1);
            struct md_conv2d_args a = {.n = N, .c = C, .h = H, .w = W, .k = K, .r = R, .s = R, .p = H, .q = W,
                                       .stride_h = 1, .stride_w = 1, .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 1,
                                       .groups = 1, .layout = lay ? MD_NHWC : MD_NCHW, .dtype = MD_F32,
                                       .x = x, .wt = w, .dy = dy, .y = out[0][t], .dx = out[1][t], .dwt = out[2][t]};
            cr_assert_eq(md_k_conv2d_fwd(dev, &a), MD_OK, "%s", md_errmsg());
            cr_assert_eq(md_k_conv2d_bwd_data(dev, &a), MD_OK, "%s", md_errmsg());
            cr_assert_eq(md_k_conv2d_bwd_filter(dev, &a), MD_OK, "%s", md_errmsg());
            md_device_close(dev);
        }
        cr_assert(memcmp(out[0][0], out[0][1], ny * 4) == 0, "conv fwd (layout %d) differs between 1 and 3 threads", lay);
        cr_assert(memcmp(out[1][0], out[1][1], nx * 4) == 0, "conv data (layout %d) differs between 1 and 3 threads", lay);
        cr_assert(memcmp(out[2][0], out[2][1], nw * 4) == 0, "conv filter (layout %d) differs between 1 and 3 threads", lay);
    }
    for (int i = 0; i < 3; i++) free(out[i][0]), free(out[i][1]);
    free(x), free(w), free(dy);
}

/* The task splits of the convolutions follow the thread count (image groups,
 * K-block groups, groups of filter tiles) but never the order of any sum, nor
 * the choice of path: forward, backward-data and backward-filter are
 * bit-identical for 1, 2, 3 and 7 threads (thread counts set with the pool's
 * API), on the direct kernels (where the CPU has them) and on the
 * im2col/GEMM paths. Cases: fewer images than threads; a 1x1 stride-2
 * convolution with 130 input channels (direct forward and filter, GEMM
 * backward-data); 150 output channels over many K-blocks; the filter's
 * scratch budget cut so that it runs in waves; a batch of 4 small planes
 * (the forward splits K and pads the batch once for all tasks); Winograd's
 * forward and filter in chunks of output channels, and its register-tile
 * filter in 16 parts of small blocks. */
Test(kernels_cpu, convolutions_identical_for_1_2_3_7_threads, .timeout = 60)
{
    static const struct { int n, c, h, w, k, r, stride, pad; size_t prep; } cases[] = {
        {2, 20, 9, 11, 70, 3, 1, 1, 0},
        {9, 130, 6, 5, 40, 1, 2, 0, 0},
        {16, 24, 8, 8, 150, 3, 1, 1, 0},
        {11, 17, 7, 6, 33, 3, 2, 1, 4096},
        {4, 64, 4, 4, 128, 3, 1, 1, 0},
        {2, 32, 4, 4, 256, 3, 1, 1, 0},  /* Winograd forward in two chunks of output channels */
        {2, 80, 8, 8, 192, 3, 1, 1, 0},  /* Winograd filter GEMMs in two chunks */
        {12, 32, 14, 14, 64, 3, 1, 1, 0}, /* Winograd filter in register tiles: 16 parts of 1-2 blocks of 8 tiles */
        /* Winograd with few tiles: 2 tasks for 1 thread, 4 chunks of output
         * channels for 2, and blocks of 32 and 16 tiles for 3 and 7 */
        {16, 128, 8, 8, 256, 3, 1, 1, 0},
    };
    static const int threads[] = {1, 2, 3, 7};
    md_device *dev = open_cpu(1);
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int mode = 0; mode < 2; mode++) /* -1: the direct kernels where they run; 0: im2col/GEMM */
            for (int lay = 0; lay < 2; lay++) {
                struct md_conv2d_args a = {.n = cases[ci].n, .c = cases[ci].c, .h = cases[ci].h, .w = cases[ci].w,
                                           .k = cases[ci].k, .r = cases[ci].r, .s = cases[ci].r,
                                           .stride_h = cases[ci].stride, .stride_w = cases[ci].stride,
                                           .pad_h = cases[ci].pad, .pad_w = cases[ci].pad, .dil_h = 1, .dil_w = 1,
                                           .groups = 1, .layout = lay ? MD_NHWC : MD_NCHW, .dtype = MD_F32};
                a.p = md_conv_out(a.h, a.r, a.stride_h, a.pad_h, 1);
                a.q = md_conv_out(a.w, a.s, a.stride_w, a.pad_w, 1);
                size_t n[3] = {(size_t)a.n * a.k * a.p * a.q, (size_t)a.n * a.c * a.h * a.w,
                               (size_t)a.k * a.c * a.r * a.s}; /* y, dx, dw */
                float *x = malloc(n[1] * 4), *w = malloc(n[2] * 4), *dy = malloc(n[0] * 4), *out[4][3];
                kc_fill(x, n[1], 41 + ci, -1, 1);
                kc_fill(w, n[2], 42 + ci, -1, 1);
                kc_fill(dy, n[0], 43 + ci, -1, 1);
                md_cpu_direct_set(mode ? 0 : -1);
                md_cpu_direct_set_prep_bytes(cases[ci].prep);
                md_cpu_wino_set_block_tiles(ci == 7 ? 8 : 0);
                for (int t = 0; t < 4; t++) {
                    md_threadpool_set_size(threads[t]);
                    for (int o = 0; o < 3; o++) out[t][o] = malloc(n[o] * 4);
                    a.x = x, a.wt = w, a.dy = dy, a.y = out[t][0], a.dx = out[t][1], a.dwt = out[t][2];
                    cr_assert_eq(md_k_conv2d_fwd(dev, &a), MD_OK, "%s", md_errmsg());
                    cr_assert_eq(md_k_conv2d_bwd_data(dev, &a), MD_OK, "%s", md_errmsg());
                    cr_assert_eq(md_k_conv2d_bwd_filter(dev, &a), MD_OK, "%s", md_errmsg());
                }
                md_cpu_direct_set(-1);
                md_cpu_direct_set_prep_bytes(0);
                md_cpu_wino_set_block_tiles(0);
                static const char *what[3] = {"forward", "backward-data", "backward-filter"};
                for (int t = 1; t < 4; t++)
                    for (int o = 0; o < 3; o++)
                        cr_assert(memcmp(out[0][o], out[t][o], n[o] * 4) == 0,
                                  "case %zu %s %s (%s): %d threads differ from 1", ci, what[o],
                                  lay ? "NHWC" : "NCHW", mode ? "im2col/GEMM" : "default kernels", threads[t]);
                for (int t = 0; t < 4; t++)
                    for (int o = 0; o < 3; o++) free(out[t][o]);
                free(x), free(w), free(dy);
            }
    md_threadpool_shutdown();
    md_threadpool_set_size(1);
    md_device_close(dev);
}

/* The direct backward-filter walks output rows in blocks of pixels (128 with
 * AVX2, 1024 with AVX-512): rows longer than a block (here 300 pixels) are a
 * block each, against the reference. */
Test(kernels_cpu, direct_filter_rows_longer_than_a_block_match_ref, .timeout = 30)
{
    enum { N = 2, C = 16, H = 3, W = 300, K = 16, R = 3 };
    size_t nx = (size_t)N * C * H * W, nw = (size_t)K * C * R * R, ny = (size_t)N * K * H * W;
    float *x = malloc(nx * 4), *dy = malloc(ny * 4), *dw[2] = {malloc(nw * 4), malloc(nw * 4)};
    kc_fill(x, nx, 51, -1, 1);
    kc_fill(dy, ny, 52, -1, 1);
    for (int lay = 0; lay < 2; lay++) {
        for (int side = 0; side < 2; side++) {
            md_device *dev = NULL;
            if (side) dev = open_cpu(2);
            else cr_assert_eq(md_device_open(md_backend_find("ref"), 0, NULL, &dev), MD_OK, "%s", md_errmsg());
            struct md_conv2d_args a = {.n = N, .c = C, .h = H, .w = W, .k = K, .r = R, .s = R, .p = H, .q = W,
                                       .stride_h = 1, .stride_w = 1, .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 1,
                                       .groups = 1, .layout = lay ? MD_NHWC : MD_NCHW, .dtype = MD_F32, .x = x,
                                       .dy = dy, .dwt = dw[side]};
            cr_assert_eq(md_k_conv2d_bwd_filter(dev, &a), MD_OK, "%s", md_errmsg());
            md_device_close(dev);
        }
        for (size_t i = 0; i < nw; i++)
            cr_assert(fabsf(dw[1][i] - dw[0][i]) <= 1e-3f * (1.0f + fabsf(dw[0][i])), "layout %d dw[%zu] %g vs %g", lay,
                      i, (double)dw[1][i], (double)dw[0][i]);
    }
    free(x), free(dy), free(dw[0]), free(dw[1]);
}

/* The CPU cuts a GEMM into strips or a grid of blocks run on the pool
 * (cpu_gemm.c), fixed by the shape: bit-identical for 1 and 3 threads, and
 * what one whole OpenBLAS call gives within rounding (its kernels for edge
 * blocks may round differently): a linear layer's 128 x 128 and 64 x 128
 * outputs over a long k (k parts), a grid over a short k, tall and wide
 * strips, small outputs over a longer k (k parts), every transpose, alpha and
 * beta. */
Test(kernels_cpu, tiled_gemm_matches_one_call_for_any_thread_count)
{
    static const int shapes[][3] = {{128, 128, 3136}, {64, 128, 3136}, {200, 200, 300}, {1000, 64, 300}, {64, 2000, 100}, {300, 520, 90}, {7, 9, 5}, {128, 64, 16384}, {20, 30, 5000}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        int m = shapes[si][0], n = shapes[si][1], k = shapes[si][2];
        float *A = malloc((size_t)m * k * 4), *B = malloc((size_t)k * n * 4), *C0 = malloc((size_t)m * n * 4);
        float *C[2] = {malloc((size_t)m * n * 4), malloc((size_t)m * n * 4)};
        kc_fill(A, (size_t)m * k, 41 + si, -1, 1);
        kc_fill(B, (size_t)k * n, 42 + si, -1, 1);
        for (int tr = 0; tr < 4; tr++) {
            int ta = tr & 1, tb = tr >> 1, lda = ta ? m : k, ldb = tb ? k : n;
            kc_fill(C0, (size_t)m * n, 43, -1, 1);
            memcpy(C[0], C0, (size_t)m * n * 4);
            memcpy(C[1], C0, (size_t)m * n * 4);
            cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, 0.5f,
                        A, lda, B, ldb, 0.75f, C0, n);
            for (int t = 0; t < 2; t++) {
                md_device *dev = open_cpu(t ? 3 : 1);
                struct md_gemm_args g = {.m = m, .n = n, .k = k, .alpha = 0.5f, .beta = 0.75f, .a = A, .lda = lda,
                                         .b = B, .ldb = ldb, .c = C[t], .ldc = n, .batch = 1, .dtype = MD_F32,
                                         .trans_a = ta, .trans_b = tb};
                cr_assert_eq(md_k_gemm(dev, &g), MD_OK, "%s", md_errmsg());
                md_device_close(dev);
                for (size_t i = 0; i < (size_t)m * n; i++)
                    cr_assert(fabsf(C[t][i] - C0[i]) <= 1e-5f * (float)k, "%dx%dx%d ta %d tb %d, %d threads: [%zu] %g vs %g",
                              m, n, k, ta, tb, t ? 3 : 1, i, (double)C[t][i], (double)C0[i]);
            }
            cr_assert(memcmp(C[0], C[1], (size_t)m * n * 4) == 0, "%dx%dx%d ta %d tb %d: 1 and 3 threads differ", m, n,
                      k, ta, tb);
        }
        free(A), free(B), free(C0), free(C[0]), free(C[1]);
    }
}

/* fp16/bf16 arguments of a GEMM go through fp32 scratch: rows between ldc
 * gaps must stay untouched. */
Test(kernels_cpu, half_gemm_leaves_row_gaps_alone)
{
    md_device *dev = open_cpu(2);
    uint16_t a[2 * 3], b[3 * 2], c[2 * 4];
    for (int i = 0; i < 6; i++) a[i] = md_f32_to_bf16((float)i), b[i] = md_f32_to_bf16(1.0f);
    for (int i = 0; i < 8; i++) c[i] = 0x7fc1; /* NaN pattern in the gaps */
    struct md_gemm_args g = {.m = 2, .n = 2, .k = 3, .alpha = 1, .beta = 0, .a = a, .lda = 3, .b = b, .ldb = 2,
                             .c = c, .ldc = 4, .batch = 1, .dtype = MD_BF16};
    cr_assert_eq(md_k_gemm(dev, &g), MD_OK);
    cr_assert_float_eq(md_bf16_to_f32(c[0]), 3.0, 0);
    cr_assert_float_eq(md_bf16_to_f32(c[5]), 12.0, 0);
    cr_assert_eq(c[2], 0x7fc1);
    cr_assert_eq(c[3], 0x7fc1);
    md_device_close(dev);
}

/* An empty batch: outputs of size 0, and dw = beta * dw (as the reference). */
Test(kernels_cpu, empty_batch_convolution)
{
    md_device *dev = open_cpu(2);
    float w[2 * 2 * 9], dw[2 * 2 * 9], x[1], y[1];
    for (int i = 0; i < 36; i++) w[i] = (float)i, dw[i] = (float)i;
    struct md_conv2d_args a = {.n = 0, .c = 2, .h = 5, .w = 5, .k = 2, .r = 3, .s = 3, .p = 5, .q = 5, .stride_h = 1,
                               .stride_w = 1, .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 1, .groups = 1,
                               .dtype = MD_F32, .x = x, .wt = w, .y = y, .dy = y, .dx = x, .dwt = dw, .beta = 0.5f};
    cr_assert_eq(md_k_conv2d_fwd(dev, &a), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_k_conv2d_bwd_data(dev, &a), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_k_conv2d_bwd_filter(dev, &a), MD_OK, "%s", md_errmsg());
    for (int i = 0; i < 36; i++) cr_assert_float_eq(dw[i], 0.5f * (float)i, 0);
    md_device_close(dev);
}

/* Batch-norm backward with the fused ReLU and no y: the mask is recomputed
 * from x; NCHW channels longer than the CPU's 512-element blocks. */
Test(kernels_cpu, batchnorm_relu_mask_without_y_matches_ref)
{
    enum { N = 2, C = 3, HW = 1031 };
    static float x[N * C * HW], dy[N * C * HW], y[N * C * HW], dx[2][N * C * HW];
    float gamma[C] = {0.7f, 1.2f, 1.0f}, betap[C] = {0.1f, -0.2f, 0.3f}, dg[2][C], db[2][C], sm[C], si[C];
    kc_fill(x, N * C * HW, 3, -2, 2);
    kc_fill(dy, N * C * HW, 4, -1, 1);
    md_device *devs[2] = {open_cpu(2), kc_open_ref()};
    for (int layout = 0; layout < 2; layout++) {
        for (int d = 0; d < 2; d++) {
            struct md_batchnorm_args b = {.n = N, .c = C, .hw = HW, .layout = layout ? MD_NHWC : MD_NCHW,
                                          .dtype = MD_F32, .training = 1, .eps = 1e-5f, .act = MD_ACT_RELU, .x = x,
                                          .y = y, .gamma = gamma, .beta_p = betap, .save_mean = sm,
                                          .save_invstd = si, .dy = dy, .dx = dx[d], .dgamma = dg[d], .dbeta = db[d]};
            cr_assert_eq(md_k_batchnorm_fwd(devs[d], &b), MD_OK);
            b.y = NULL;
            cr_assert_eq(md_k_batchnorm_bwd(devs[d], &b), MD_OK);
        }
        cr_assert(th_allclose("bn dx without y", dx[0], dx[1], N * C * HW, 2e-5, 1e-4));
        cr_assert(th_allclose("bn dgamma without y", dg[0], dg[1], C, 2e-5, 1e-4));
        cr_assert(th_allclose("bn dbeta without y", db[0], db[1], C, 2e-5, 1e-4));
    }
    md_device_close(devs[0]);
    md_device_close(devs[1]);
}

/* The same bits (the sign of a zero, a NaN); reports the first difference. */
static int same_bits(const char *what, const float *got, const float *ref, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (memcmp(&got[i], &ref[i], 4) != 0) {
            cr_log_error("%s: element %zu: cpu %.9g, ref %.9g", what, i, (double)got[i], (double)ref[i]);
            return 0;
        }
    return 1;
}

/* Max pooling, fp32, both layouts, against the reference exactly: inputs of
 * quarter steps with ties, -0 beside +0 and NaN (a NaN never replaces a
 * maximum; a window whose first element is NaN gives NaN and routes dy
 * there), dy and dx in eighths so that every sum is exact. Channel counts
 * around the CPU's vectors of 4 and blocks of 16 (3, 17, 33, 70); rows wide
 * enough for NCHW's vectors of outputs and their tails; disjoint windows
 * (dx written once; with padding; with gaps that no window covers),
 * overlapping ones and stride 1; beta 0, 1 and 0.5. */
Test(kernels_cpu, max_pool_ties_nan_odd_channels_match_ref)
{
    static const int shapes[][5] = {/* h w k stride pad */
                                    {6, 22, 2, 2, 0}, {5, 23, 2, 2, 1}, {7, 21, 3, 2, 1}, {6, 25, 2, 3, 0},
                                    {4, 20, 3, 1, 1}};
    static const int chans[] = {3, 17, 33, 70};
    static const float betas[] = {0.0f, 1.0f, 0.5f};
    md_device *devs[2] = {open_cpu(2), kc_open_ref()};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (size_t ci = 0; ci < sizeof chans / sizeof chans[0]; ci++) {
            const int *k = shapes[si];
            struct md_pool2d_args a = {.kind = MD_POOL_MAX, .n = 2, .c = chans[ci], .h = k[0], .w = k[1], .kh = k[2],
                                       .kw = k[2], .stride_h = k[3], .stride_w = k[3], .pad_h = k[4], .pad_w = k[4],
                                       .dtype = MD_F32};
            a.p = md_conv_out(a.h, a.kh, a.stride_h, a.pad_h, 1);
            a.q = md_conv_out(a.w, a.kw, a.stride_w, a.pad_w, 1);
            size_t nx = (size_t)a.n * a.c * a.h * a.w, ny = (size_t)a.n * a.c * a.p * a.q;
            float *x = malloc(nx * 4), *dy = malloc(ny * 4), *y0 = malloc(ny * 4), *dx0 = malloc(nx * 4);
            float *u = malloc(nx * 4), *out[2][2] = {{malloc(ny * 4), malloc(nx * 4)}, {malloc(ny * 4), malloc(nx * 4)}};
            kc_fill(u, nx, 61 + si, 0, 1);
            kc_fill(x, nx, 62 + si, -1, 1);
            for (size_t i = 0; i < nx; i++) {
                x[i] = floorf(x[i] * 4.0f) / 4.0f;
                if (x[i] == 0.0f && u[i] < 0.5f) x[i] = -0.0f;
                if (u[i] > 0.96f) x[i] = NAN;
            }
            kc_fill(dy, ny, 63 + si, -2, 2);
            kc_fill(y0, ny, 64 + si, -2, 2);
            kc_fill(dx0, nx, 65 + si, -2, 2);
            for (size_t i = 0; i < ny; i++) dy[i] = floorf(dy[i] * 8.0f) / 8.0f, y0[i] = floorf(y0[i] * 8.0f) / 8.0f;
            for (size_t i = 0; i < nx; i++) dx0[i] = floorf(dx0[i] * 8.0f) / 8.0f;
            for (int lay = 0; lay < 2; lay++)
                for (int bi = 0; bi < 3; bi++) {
                    a.layout = lay ? MD_NHWC : MD_NCHW;
                    a.beta = betas[bi];
                    for (int d = 0; d < 2; d++) {
                        memcpy(out[d][0], y0, ny * 4);
                        memcpy(out[d][1], dx0, nx * 4);
                        struct md_pool2d_args b = a;
                        b.x = x, b.y_out = out[d][0], b.dy = dy, b.dx = out[d][1];
                        cr_assert_eq(md_k_pool2d_fwd(devs[d], &b), MD_OK, "%s", md_errmsg());
                        cr_assert_eq(md_k_pool2d_bwd(devs[d], &b), MD_OK, "%s", md_errmsg());
                    }
                    char what[128];
                    snprintf(what, sizeof what, "%dx%d k%d s%d p%d c%d %s beta %g", a.h, a.w, a.kh, a.stride_h,
                             a.pad_h, a.c, lay ? "NHWC" : "NCHW", (double)a.beta);
                    cr_assert(same_bits(what, out[0][0], out[1][0], ny), "max pool forward: %s", what);
                    cr_assert(same_bits(what, out[0][1], out[1][1], nx), "max pool backward: %s", what);
                }
            free(x), free(dy), free(y0), free(dx0), free(u);
            for (int d = 0; d < 2; d++) free(out[d][0]), free(out[d][1]);
        }
    md_device_close(devs[0]);
    md_device_close(devs[1]);
}

/* Batch norm, fp32 NHWC, against the reference: channel counts that leave
 * tails after the CPU's vectors and 64-channel blocks, rows over several
 * 64-row chunks, training and inference, the ReLU mask from y and from x,
 * beta 0 and 0.5 (the backward's dx, dgamma, dbeta accumulate). */
Test(kernels_cpu, batchnorm_nhwc_odd_channels_match_ref)
{
    static const int chans[] = {3, 17, 33, 70};
    enum { N = 3, HW = 47 };
    for (size_t ci = 0; ci < sizeof chans / sizeof chans[0]; ci++)
        for (int mode = 0; mode < 12; mode++) {
            /* bit 0: training; (mode >> 1) % 3: no ReLU, ReLU masked by y, ReLU masked by x; beta 0.5 from 6 */
            int C = chans[ci], training = mode & 1, relu = (mode >> 1) % 3;
            float beta = mode >= 6 ? 0.5f : 0.0f;
            size_t nx = (size_t)N * C * HW;
            float *x = malloc(nx * 4), *dy = malloc(nx * 4), *y[2] = {malloc(nx * 4), malloc(nx * 4)};
            float *dx[2] = {malloc(nx * 4), malloc(nx * 4)};
            float gamma[70], betap[70], rm[2][70], rv[2][70], sm[2][70], si[2][70], dg[2][70], db[2][70];
            kc_fill(x, nx, 71 + ci, -2, 3);
            kc_fill(dy, nx, 72 + ci, -1, 1);
            kc_fill(gamma, (size_t)C, 73, 0.5f, 1.5f);
            kc_fill(betap, (size_t)C, 74, -0.5f, 0.5f);
            md_device *devs[2] = {open_cpu(2), kc_open_ref()};
            for (int d = 0; d < 2; d++) {
                kc_fill(rm[d], (size_t)C, 75, -0.5f, 0.5f);
                kc_fill(rv[d], (size_t)C, 76, 0.5f, 2.0f);
                kc_fill(y[d], nx, 77, -1, 1);
                kc_fill(dx[d], nx, 78, -1, 1);
                kc_fill(dg[d], (size_t)C, 79, -1, 1);
                kc_fill(db[d], (size_t)C, 80, -1, 1);
                struct md_batchnorm_args b = {.n = N, .c = C, .hw = HW, .layout = MD_NHWC, .dtype = MD_F32,
                                              .training = training, .eps = 1e-5f, .momentum = 0.1f,
                                              .act = relu ? MD_ACT_RELU : MD_ACT_NONE, .x = x,
                                              .y = y[d], .gamma = gamma, .beta_p = betap, .running_mean = rm[d],
                                              .running_var = rv[d], .save_mean = sm[d], .save_invstd = si[d],
                                              .dy = dy, .dx = dx[d], .dgamma = dg[d], .dbeta = db[d], .beta = beta};
                cr_assert_eq(md_k_batchnorm_fwd(devs[d], &b), MD_OK, "%s", md_errmsg());
                if (relu == 2) b.y = NULL; /* the mask recomputed from x */
                cr_assert_eq(md_k_batchnorm_bwd(devs[d], &b), MD_OK, "%s", md_errmsg());
                md_device_close(devs[d]);
            }
            char what[96];
            snprintf(what, sizeof what, "bn NHWC c%d training %d relu %d beta %g", C, training, relu, (double)beta);
            cr_assert(th_allclose(what, y[0], y[1], nx, 2e-5, 1e-4), "y: %s", what);
            cr_assert(th_allclose(what, dx[0], dx[1], nx, 2e-5, 1e-4), "dx: %s", what);
            cr_assert(th_allclose(what, dg[0], dg[1], (size_t)C, 2e-5, 1e-4), "dgamma: %s", what);
            cr_assert(th_allclose(what, db[0], db[1], (size_t)C, 2e-5, 1e-4), "dbeta: %s", what);
            cr_assert(th_allclose(what, rm[0], rm[1], (size_t)C, 2e-5, 1e-4), "running mean: %s", what);
            cr_assert(th_allclose(what, rv[0], rv[1], (size_t)C, 2e-5, 1e-4), "running var: %s", what);
            free(x), free(dy), free(y[0]), free(y[1]), free(dx[0]), free(dx[1]);
        }
}

/* Backward-filter takes the direct kernels only where they beat im2col +
 * GEMM (measured per instruction set, docs/performance-cpu.md), by the shape
 * alone: AVX2 for small C*R*S at stride 1; AVX-512 for outputs of more than
 * 16 pixels. Skipped where the CPU lacks the instruction set. */
Test(kernels_cpu, direct_filter_goes_where_it_is_faster)
{
    /* n, c, h, w, k, r, s, p, q, sh, sw, ph, pw, dh, dw */
    const struct md_dconv l1 = {64, 64, 32, 32, 64, 3, 3, 32, 32, 1, 1, 1, 1, 1, 1},
                          conv2 = {128, 32, 14, 14, 64, 3, 3, 14, 14, 1, 1, 1, 1, 1, 1},
                          l3 = {64, 256, 8, 8, 256, 3, 3, 8, 8, 1, 1, 1, 1, 1, 1},
                          l4 = {64, 512, 4, 4, 512, 3, 3, 4, 4, 1, 1, 1, 1, 1, 1},
                          down = {64, 64, 32, 32, 128, 3, 3, 16, 16, 2, 2, 1, 1, 1, 1},
                          s1x1 = {64, 256, 8, 8, 512, 1, 1, 8, 8, 1, 1, 0, 0, 1, 1};
    md_cpu_direct_set(2);
    if (md_cpu_direct_enabled()) {
        cr_expect(md_cpu_direct_filter_ok(&l1), "AVX2: C*R*S 576, stride 1");
        cr_expect(md_cpu_direct_filter_ok(&conv2), "AVX2: C*R*S 288, stride 1");
        cr_expect(!md_cpu_direct_filter_ok(&l3), "AVX2: C*R*S 2304");
        cr_expect(!md_cpu_direct_filter_ok(&l4), "AVX2: C*R*S 4608");
        cr_expect(!md_cpu_direct_filter_ok(&down), "AVX2: stride 2");
        cr_expect(!md_cpu_direct_filter_ok(&s1x1), "AVX2: 1x1");
    } else
        cr_log_warn("no AVX2 + FMA: the AVX2 rule is not checked");
    md_cpu_direct_set(1);
    if (md_cpu_direct_enabled() && !getenv("MPSDIAG_CPU_DIRECT")) {
        /* the best the CPU has: AVX-512 where present */
        md_cpu_direct_set(2);
        int avx2_l3 = md_cpu_direct_filter_ok(&l3);
        md_cpu_direct_set(1);
        if (md_cpu_direct_filter_ok(&l3) != avx2_l3) { /* AVX-512 */
            cr_expect(md_cpu_direct_filter_ok(&l3), "AVX-512: 8 x 8 outputs");
            cr_expect(md_cpu_direct_filter_ok(&down), "AVX-512: stride 2, 16 x 16 outputs");
            cr_expect(!md_cpu_direct_filter_ok(&l4), "AVX-512: 4 x 4 outputs");
        }
    }
    md_cpu_direct_set(-1);
}

/* Winograd F(2x2, 3x3) and F(4x4, 3x3) (cpu_conv_wino.c) take channels-last
 * 3x3 stride-1 forwards and backward-datas of at least 16 channels each way,
 * against the reference: output sizes odd and even (partial tiles at the
 * edges), padding 0, 1 and 2, channel counts with tails past a multiple of
 * 16, one block of tiles and many, output channels in chunks (forward and
 * filter), the filter in waves, the filter of up to 64 input channels in
 * register tiles (16, 32, 48 and 64 channels; up to 16 parts, some of several
 * blocks), beta 0 and 0.5. The rounding differs from
 * a direct sum's (the transforms add and scale neighbours): measured within
 * 4.9e-7 (F(2, 3)) and 7.2e-6 (F(4, 3)) of the output's largest magnitude,
 * checked within 3e-6 and 2e-5 (the direct sum is within ~1e-6). */
Test(kernels_cpu, winograd_matches_ref, .timeout = 60)
{
    static const struct { int n, c, h, w, k, pad; } cases[] = {
        {2, 16, 7, 9, 16, 1}, {3, 33, 6, 5, 17, 1}, {1, 20, 8, 8, 40, 0},
        {2, 17, 5, 6, 24, 2}, {40, 32, 14, 14, 64, 1}, {2, 64, 4, 4, 130, 1},
        {3, 64, 9, 7, 64, 1}, {2, 70, 8, 8, 66, 1}, {2, 32, 4, 4, 256, 1}, {2, 64, 8, 8, 192, 1},
        {4, 16, 14, 14, 16, 1}, {3, 48, 10, 10, 32, 1}, {5, 80, 16, 16, 64, 0},
    };
    md_device *ref = NULL, *cpu = open_cpu(2);
    cr_assert_eq(md_device_open(md_backend_find("ref"), 0, NULL, &ref), MD_OK, "%s", md_errmsg());
    for (int tile = 2; tile <= 4; tile += 2)
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int bi = 0; bi < 2; bi++) {
            md_cpu_wino_set(tile);
            float beta = bi ? 0.5f : 0.0f, tol = tile == 2 ? 3e-6f : 2e-5f;
            struct md_conv2d_args a = {.n = cases[ci].n, .c = cases[ci].c, .h = cases[ci].h, .w = cases[ci].w,
                                       .k = cases[ci].k, .r = 3, .s = 3, .stride_h = 1, .stride_w = 1,
                                       .pad_h = cases[ci].pad, .pad_w = cases[ci].pad, .dil_h = 1, .dil_w = 1,
                                       .groups = 1, .layout = MD_NHWC, .dtype = MD_F32, .beta = beta};
            a.p = md_conv_out(a.h, 3, 1, a.pad_h, 1);
            a.q = md_conv_out(a.w, 3, 1, a.pad_w, 1);
            struct md_dconv d = {a.n, a.c, a.h, a.w, a.k, 3, 3, a.p, a.q, 1, 1, a.pad_h, a.pad_w, 1, 1},
                            dd = {a.n, a.k, a.p, a.q, a.c, 3, 3, a.h, a.w, 1, 1, 2 - a.pad_h, 2 - a.pad_w, 1, 1};
            cr_assert(md_cpu_wino_ok(&d, 1) && md_cpu_wino_ok(&dd, 1), "case %zu does not go the Winograd way", ci);
            size_t ny = (size_t)a.n * a.k * a.p * a.q, nx = (size_t)a.n * a.c * a.h * a.w, nw = (size_t)a.k * a.c * 9;
            float *x = malloc(nx * 4), *w = malloc(nw * 4), *dy = malloc(ny * 4);
            float *y[2] = {malloc(ny * 4), malloc(ny * 4)}, *dx[2] = {malloc(nx * 4), malloc(nx * 4)},
                  *dw[2] = {malloc(nw * 4), malloc(nw * 4)};
            int filt = md_cpu_wino_filter_ok(&d, 1);
            int fused = a.c % 16 == 0 && a.c <= 64 && a.k % 16 == 0 && __builtin_cpu_supports("avx512f");
            cr_assert_eq(filt, (a.c >= 64 && a.k >= 64) || fused,
                         "case %zu: backward-filter from 64 channels each way, or in register tiles", ci);
            /* the last case's filter in waves of 64 tiles (the least); case 4 in blocks of 8 tiles
             * (the register-tile filter: 16 parts of several blocks; with beta, the parts' bytes
             * capped to one part) */
            md_cpu_wino_set_wave_bytes(ci + 1 == sizeof cases / sizeof cases[0] || (ci == 4 && bi) ? 1 : 0);
            md_cpu_wino_set_block_tiles(ci == 4 ? 8 : 0);
            kc_fill(x, nx, 61 + ci, -1, 1);
            kc_fill(w, nw, 62 + ci, -1, 1);
            kc_fill(dy, ny, 63 + ci, -1, 1);
            for (int side = 0; side < 2; side++) {
                kc_fill(y[side], ny, 64, -1, 1); /* what beta scales */
                kc_fill(dx[side], nx, 65, -1, 1);
                kc_fill(dw[side], nw, 66, -1, 1);
                a.x = x, a.wt = w, a.dy = dy, a.y = y[side], a.dx = dx[side], a.dwt = dw[side];
                md_device *dev = side ? cpu : ref;
                cr_assert_eq(md_k_conv2d_fwd(dev, &a), MD_OK, "%s", md_errmsg());
                cr_assert_eq(md_k_conv2d_bwd_data(dev, &a), MD_OK, "%s", md_errmsg());
                cr_assert_eq(md_k_conv2d_bwd_filter(dev, &a), MD_OK, "%s", md_errmsg());
            }
            md_cpu_wino_set_wave_bytes(0);
            md_cpu_wino_set_block_tiles(0);
            for (int o = 0; o < 2 + filt; o++) {
                const float *want = o == 2 ? dw[0] : o ? dx[0] : y[0], *got = o == 2 ? dw[1] : o ? dx[1] : y[1];
                size_t n = o == 2 ? nw : o ? nx : ny;
                float scale = 0.0f, worst = 0.0f;
                for (size_t i = 0; i < n; i++) scale = fmaxf(scale, fabsf(want[i]));
                for (size_t i = 0; i < n; i++) worst = fmaxf(worst, fabsf(got[i] - want[i]));
                cr_assert(worst <= tol * scale, "F(%d, 3) case %zu beta %g %s: off by %g of %g", tile, ci,
                          (double)beta, o == 2 ? "backward-filter" : o ? "backward-data" : "forward", (double)worst,
                          (double)scale);
            }
            free(x), free(w), free(dy), free(y[0]), free(y[1]), free(dx[0]), free(dx[1]), free(dw[0]), free(dw[1]);
        }
    md_cpu_wino_set(-1);
    md_device_close(cpu);
    md_device_close(ref);
}

/* Where Winograd goes: 3x3 stride 1 channels-last with 16+ channels, not
 * NCHW, strides, dilations, 1x1 or thin layers; MPSDIAG_CPU_WINOGRAD=0 and
 * md_cpu_wino_set(0) turn it off. */
/* Channels-last is the CPU's preferred layout where the direct kernels or
 * Winograd run (Winograd is channels-last only), NCHW with neither. */
Test(kernels_cpu, channels_last_preferred_where_direct_or_winograd_run)
{
    md_cpu_direct_set(0);
    md_cpu_wino_set(1);
    cr_expect(md_cpu_conv_prefers_nhwc(), "Winograd alone");
    md_cpu_wino_set(0);
    cr_expect(!md_cpu_conv_prefers_nhwc(), "neither: NCHW");
    md_cpu_direct_set(-1);
    if (md_cpu_direct_enabled()) cr_expect(md_cpu_conv_prefers_nhwc(), "the direct kernels alone");
    md_cpu_wino_set(-1);
    md_cpu_direct_set(-1);
}

Test(kernels_cpu, winograd_goes_where_it_applies)
{
    /* n, c, h, w, k, r, s, p, q, sh, sw, ph, pw, dh, dw */
    const struct md_dconv l1 = {64, 64, 32, 32, 64, 3, 3, 32, 32, 1, 1, 1, 1, 1, 1},
                          down = {64, 64, 32, 32, 128, 3, 3, 16, 16, 2, 2, 1, 1, 1, 1},
                          dil = {4, 64, 12, 12, 64, 3, 3, 8, 8, 1, 1, 0, 0, 2, 2},
                          s1x1 = {64, 256, 8, 8, 512, 1, 1, 8, 8, 1, 1, 0, 0, 1, 1},
                          stem = {64, 3, 32, 32, 64, 3, 3, 32, 32, 1, 1, 1, 1, 1, 1},
                          thin = {64, 64, 32, 32, 8, 3, 3, 32, 32, 1, 1, 1, 1, 1, 1};
    md_cpu_wino_set(-1);
    int env_off = getenv("MPSDIAG_CPU_WINOGRAD") && getenv("MPSDIAG_CPU_WINOGRAD")[0] == '0';
    cr_expect_eq(md_cpu_wino_ok(&l1, 1), !env_off, "3x3 stride 1, 64 channels, NHWC");
    md_cpu_wino_set(1);
    cr_expect(md_cpu_wino_ok(&l1, 1));
    cr_expect(!md_cpu_wino_ok(&l1, 0), "NCHW");
    cr_expect(!md_cpu_wino_ok(&down, 1), "stride 2");
    cr_expect(!md_cpu_wino_ok(&dil, 1), "dilation 2");
    cr_expect(!md_cpu_wino_ok(&s1x1, 1), "1x1");
    cr_expect(!md_cpu_wino_ok(&stem, 1), "3 input channels");
    cr_expect(!md_cpu_wino_ok(&thin, 1), "8 output channels");
    const struct md_dconv l3 = {64, 256, 8, 8, 256, 3, 3, 8, 8, 1, 1, 1, 1, 1, 1},
                          l4 = {64, 512, 4, 4, 512, 3, 3, 4, 4, 1, 1, 1, 1, 1, 1},
                          conv2 = {128, 32, 14, 14, 64, 3, 3, 14, 14, 1, 1, 1, 1, 1, 1},
                          odd = {8, 64, 30, 30, 64, 3, 3, 30, 30, 1, 1, 1, 1, 1, 1};
    cr_expect_eq(md_cpu_wino_tile(&l1), 4, "32 x 32: F(4, 3)");
    cr_expect_eq(md_cpu_wino_tile(&l3), 4, "8 x 8: F(4, 3)");
    cr_expect_eq(md_cpu_wino_tile(&odd), 4, "30 x 30: 32 x 32 covered, F(4, 3)");
    cr_expect_eq(md_cpu_wino_tile(&l4), 2, "4 x 4: F(2, 3)");
    cr_expect_eq(md_cpu_wino_tile(&conv2), 4, "14 x 14: 16 x 16 covered, F(4, 3)");
    const struct md_dconv ten = {8, 64, 10, 10, 64, 3, 3, 10, 10, 1, 1, 1, 1, 1, 1};
    cr_expect_eq(md_cpu_wino_tile(&ten), 2, "10 x 10: 12 x 12 covered, F(2, 3)");
    md_cpu_wino_set(2);
    cr_expect_eq(md_cpu_wino_tile(&l1), 2, "forced F(2, 3)");
    md_cpu_wino_set(0);
    cr_expect(!md_cpu_wino_ok(&l1, 1), "turned off");
    md_cpu_wino_set(-1);
}

/* Batch norm + ReLU + 2x2 stride-2 max pool in one kernel (fp32, both
 * layouts) against the reference's three kernels one after the other: pooled
 * output, running statistics, dx, dgamma, dbeta. Inputs on a grid of
 * sixteenths, so windows have exact ties (the first maximal element takes
 * dy, as the pool routes it) and otherwise values far apart (no rounding can
 * move a maximum); channel counts that leave tails after vectors of 16 and
 * blocks of 64 (NHWC), pooled rows of 4 and 11 (NCHW's vectors of 4 and a
 * tail); training and inference; beta 0 and 0.5; 1 and 3 threads give the
 * same bits, and so does a channels-last training step that keeps the
 * routing (pool_x, pool_arg), which holds x at each window's routed element
 * and its index, and which the backward reads (routing nothing changes dx). */
Test(kernels_cpu, batchnorm_relu_maxpool_fused_matches_the_three_kernels, .timeout = 60)
{
    static const int chans[] = {3, 17, 33, 70};
    static const int sizes[][2] = {{6, 8}, {4, 22}};
    enum { N = 3 };
    md_device *ref = kc_open_ref(), *cpu[2] = {open_cpu(1), open_cpu(3)};
    cr_assert(md_dev_batchnorm_pool(cpu[0], MD_NHWC, MD_F32));
    cr_assert(md_dev_batchnorm_pool(cpu[0], MD_NCHW, MD_F32));
    cr_assert(!md_dev_batchnorm_pool(cpu[0], MD_NHWC, MD_BF16));
    cr_assert(!md_dev_batchnorm_pool(ref, MD_NHWC, MD_F32));
    for (size_t ci = 0; ci < sizeof chans / sizeof chans[0]; ci++)
        for (size_t si = 0; si < 2; si++)
            for (int mode = 0; mode < 8; mode++) {
                int C = chans[ci], H = sizes[si][0], W = sizes[si][1], training = mode & 1;
                float beta = mode & 2 ? 0.5f : 0.0f;
                md_layout lay = mode & 4 ? MD_NCHW : MD_NHWC;
                size_t nx = (size_t)N * H * W * C, ny = nx / 4;
                float *x = malloc(nx * 4), *dy = malloc(ny * 4), *yf = malloc(nx * 4), *dyf = malloc(nx * 4);
                float *y[4] = {malloc(ny * 4), malloc(ny * 4), malloc(ny * 4), malloc(ny * 4)};
                float *dx[4] = {malloc(nx * 4), malloc(nx * 4), malloc(nx * 4), malloc(nx * 4)};
                float *kx = malloc(ny * 4), *dx_none = malloc(nx * 4);
                unsigned char *karg = malloc(ny);
                int keep = training && lay == MD_NHWC;
                float gamma[70], betap[70], rm[4][70], rv[4][70], sm[4][70], si_[4][70], dg[4][70], db[4][70];
                kc_fill(x, nx, 91 + ci, -2, 2);
                for (size_t i = 0; i < nx; i++) x[i] = floorf(x[i] * 16.0f) / 16.0f;
                kc_fill(dy, ny, 92 + ci, -1, 1);
                kc_fill(gamma, (size_t)C, 93, 0.5f, 1.5f);
                kc_fill(betap, (size_t)C, 94, -0.5f, 0.5f);
                memset(karg, 0xff, ny);
                /* 0: the reference's three kernels; 1, 2: fused, 1 and 3 threads; 3: 1 thread, routing kept */
                for (int d = 0; d < 4; d++) {
                    kc_fill(rm[d], (size_t)C, 95, -0.5f, 0.5f);
                    kc_fill(rv[d], (size_t)C, 96, 0.5f, 2.0f);
                    kc_fill(dx[d], nx, 97, -1, 1);
                    kc_fill(dg[d], (size_t)C, 98, -1, 1);
                    kc_fill(db[d], (size_t)C, 99, -1, 1);
                    struct md_batchnorm_args b = {.n = N, .c = C, .hw = H * W, .layout = lay, .dtype = MD_F32,
                                                  .training = training, .eps = 1e-5f, .momentum = 0.1f,
                                                  .act = MD_ACT_RELU, .x = x, .gamma = gamma, .beta_p = betap,
                                                  .running_mean = rm[d], .running_var = rv[d], .save_mean = sm[d],
                                                  .save_invstd = si_[d], .dx = dx[d], .dgamma = dg[d],
                                                  .dbeta = db[d]}; /* beta (accumulate) for backward only */
                    struct md_pool2d_args p = {.kind = MD_POOL_MAX, .n = N, .c = C, .h = H, .w = W, .p = H / 2,
                                               .q = W / 2, .kh = 2, .kw = 2, .stride_h = 2, .stride_w = 2,
                                               .layout = lay, .dtype = MD_F32, .x = yf, .y_out = y[0], .y = y[0],
                                               .dy = dy, .dx = dyf};
                    if (d == 0) {
                        b.y = yf;
                        cr_assert_eq(md_k_batchnorm_fwd(ref, &b), MD_OK, "%s", md_errmsg());
                        cr_assert_eq(md_k_pool2d_fwd(ref, &p), MD_OK, "%s", md_errmsg());
                        cr_assert_eq(md_k_pool2d_bwd(ref, &p), MD_OK, "%s", md_errmsg());
                        b.dy = dyf, b.beta = beta;
                        cr_assert_eq(md_k_batchnorm_bwd(ref, &b), MD_OK, "%s", md_errmsg());
                    } else {
                        md_device *dev = cpu[d == 2];
                        b.pool = 2, b.h = H, b.w = W, b.y = y[d];
                        if (d == 3) b.pool_x = kx, b.pool_arg = karg;
                        cr_assert_eq(md_k_batchnorm_fwd(dev, &b), MD_OK, "%s", md_errmsg());
                        b.dy = dy, b.beta = beta;
                        if (d == 3 && keep) { /* routing nothing: dx changes, so the backward reads arg */
                            float dg_none[70], db_none[70];
                            memcpy(dx_none, dx[3], nx * 4), memcpy(dg_none, dg[3], (size_t)C * 4);
                            memcpy(db_none, db[3], (size_t)C * 4);
                            unsigned char *none = malloc(ny);
                            memset(none, 4, ny);
                            struct md_batchnorm_args bn = b;
                            bn.pool_arg = none, bn.dx = dx_none, bn.dgamma = dg_none, bn.dbeta = db_none;
                            cr_assert_eq(md_k_batchnorm_bwd(dev, &bn), MD_OK, "%s", md_errmsg());
                            free(none);
                        }
                        cr_assert_eq(md_k_batchnorm_bwd(dev, &b), MD_OK, "%s", md_errmsg());
                    }
                }
                char what[96];
                snprintf(what, sizeof what, "bn+relu+pool %s c%d %dx%d training %d beta %g",
                         lay == MD_NCHW ? "NCHW" : "NHWC", C, H, W, training, (double)beta);
                cr_assert(th_allclose(what, y[1], y[0], ny, 2e-5, 1e-4), "y: %s", what);
                cr_assert(th_allclose(what, dx[1], dx[0], nx, 2e-5, 1e-4), "dx: %s", what);
                cr_assert(th_allclose(what, dg[1], dg[0], (size_t)C, 2e-5, 1e-4), "dgamma: %s", what);
                cr_assert(th_allclose(what, db[1], db[0], (size_t)C, 2e-5, 1e-4), "dbeta: %s", what);
                cr_assert(th_allclose(what, rm[1], rm[0], (size_t)C, 2e-5, 1e-4), "running mean: %s", what);
                cr_assert(th_allclose(what, rv[1], rv[0], (size_t)C, 2e-5, 1e-4), "running var: %s", what);
                cr_assert(memcmp(y[1], y[2], ny * 4) == 0 && memcmp(dx[1], dx[2], nx * 4) == 0 &&
                              memcmp(dg[1], dg[2], (size_t)C * 4) == 0 && memcmp(db[1], db[2], (size_t)C * 4) == 0,
                          "1 and 3 threads differ: %s", what);
                cr_assert(memcmp(y[1], y[3], ny * 4) == 0 && memcmp(dx[1], dx[3], nx * 4) == 0 &&
                              memcmp(dg[1], dg[3], (size_t)C * 4) == 0 && memcmp(db[1], db[3], (size_t)C * 4) == 0,
                          "the kept routing changes the results: %s", what);
                if (keep) {
                    int differs = 0;
                    for (size_t e = 0; e < ny; e++) { /* pooled element e = (image, row, column) * C + channel */
                        size_t px = e / (size_t)C, c = e % (size_t)C, pr = px / (size_t)(W / 2), pc = px % (W / 2);
                        cr_assert(karg[e] <= 4, "%s: index %u at %zu", what, karg[e], e);
                        size_t k = karg[e] < 4 ? karg[e] : 0;
                        size_t src = ((2 * pr + k / 2) * (size_t)W + 2 * pc + k % 2) * (size_t)C + c;
                        cr_assert(karg[e] == 4 || kx[e] == x[src], "%s: routed x at %zu", what, e);
                        cr_assert(karg[e] < 4 || y[3][e] == 0.0f, "%s: masked but y %g", what, (double)y[3][e]);
                    }
                    for (size_t i = 0; i < nx && !differs; i++) differs = dx_none[i] != dx[3][i];
                    cr_assert(differs, "%s: dx does not depend on pool_arg", what);
                }
                free(x), free(dy), free(yf), free(dyf), free(kx), free(dx_none), free(karg);
                for (int d = 0; d < 4; d++) free(y[d]), free(dx[d]);
            }
    /* what it does not take: an odd side, another type, no ReLU, the reference */
    float buf[4 * 3 * 3] = {0}, g1[4] = {1, 1, 1, 1}, sm[4], si[4];
    struct md_batchnorm_args b = {.n = 1, .c = 4, .hw = 9, .h = 3, .w = 3, .pool = 2, .layout = MD_NHWC,
                                  .dtype = MD_F32, .training = 1, .eps = 1e-5f, .act = MD_ACT_RELU, .x = buf,
                                  .y = buf + 16, .gamma = g1, .save_mean = sm, .save_invstd = si};
    cr_expect_eq(md_k_batchnorm_fwd(cpu[0], &b), MD_ERR_UNSUPPORTED);
    b.hw = 4, b.h = 2, b.w = 2, b.dtype = MD_BF16;
    cr_expect_eq(md_k_batchnorm_fwd(cpu[0], &b), MD_ERR_UNSUPPORTED);
    b.dtype = MD_F32, b.act = MD_ACT_NONE;
    cr_expect_eq(md_k_batchnorm_fwd(cpu[0], &b), MD_ERR_UNSUPPORTED);
    b.act = MD_ACT_RELU;
    cr_expect_eq(md_k_batchnorm_fwd(ref, &b), MD_ERR_UNSUPPORTED);
    cr_expect_eq(md_k_batchnorm_fwd(cpu[0], &b), MD_OK, "%s", md_errmsg());
    md_device_close(ref);
    md_device_close(cpu[0]);
    md_device_close(cpu[1]);
}

/* The channels-last fused batch norm's backward with .conv writes the filter
 * gradient of the convolution that computed x (from pooled-size sums and the
 * Gram matrix of the input's patches) instead of dx: against the fused
 * backward's dx fed to the reference's filter gradient, for one input channel
 * and 3 x 3 (its own loops; 32 output channels, 20 with a tail, 5 with no
 * vector; dilation 2), several input channels, 5 x 5, 2 x 2 without padding,
 * 1 x 1 at the 32-entry limit, stride 2; dgamma and dbeta as without it; beta
 * 0.5 adds; 1 and 3 threads give the same bits. What it refuses: dx given,
 * NCHW, two groups, C*R*S over the limit, no routing, no pool. */
Test(kernels_cpu, batchnorm_pool_writes_the_convolution_filter_gradient, .timeout = 60)
{
    static const struct { int c, r, s, stride, pad, dil, k, h, w; } cs[] = {
        {1, 3, 3, 1, 1, 1, 32, 12, 12}, {1, 3, 3, 1, 1, 1, 20, 8, 10}, {1, 3, 3, 1, 2, 2, 5, 8, 8},
        {3, 3, 3, 1, 1, 1, 17, 8, 8},   {2, 3, 3, 2, 1, 1, 16, 16, 12}, {1, 5, 5, 1, 2, 1, 16, 8, 8},
        {4, 2, 2, 1, 0, 1, 16, 9, 9},   {32, 1, 1, 1, 0, 1, 16, 4, 6}};
    enum { N = 3 };
    md_device *ref = kc_open_ref(), *cpu[2] = {open_cpu(1), open_cpu(3)};
    cr_assert(md_dev_batchnorm_pool_conv(cpu[0], MD_NHWC, MD_F32));
    cr_assert(!md_dev_batchnorm_pool_conv(cpu[0], MD_NCHW, MD_F32));
    cr_assert(!md_dev_batchnorm_pool_conv(cpu[0], MD_NHWC, MD_BF16));
    cr_assert(!md_dev_batchnorm_pool_conv(ref, MD_NHWC, MD_F32));
    for (size_t k = 0; k < sizeof cs / sizeof cs[0]; k++) {
        int C = cs[k].c, K = cs[k].k, H = cs[k].h, W = cs[k].w, crs = C * cs[k].r * cs[k].s;
        int P = (H + 2 * cs[k].pad - cs[k].dil * (cs[k].r - 1) - 1) / cs[k].stride + 1;
        int Q = (W + 2 * cs[k].pad - cs[k].dil * (cs[k].s - 1) - 1) / cs[k].stride + 1;
        cr_assert(P % 2 == 0 && Q % 2 == 0, "case %zu: %d x %d", k, P, Q);
        size_t nx0 = (size_t)N * H * W * C, nx = (size_t)N * P * Q * K, ny = nx / 4, nw = (size_t)K * crs;
        float *x0 = malloc(nx0 * 4), *wt = malloc(nw * 4), *x = malloc(nx * 4), *y = malloc(ny * 4);
        float *dy = malloc(ny * 4), *dz = malloc(nx * 4), *xs = malloc(ny * 4), *dw[4];
        unsigned char *arg = malloc(ny);
        for (int d = 0; d < 4; d++) dw[d] = malloc(nw * 4);
        float gamma[32], betap[32], rm[32], rv[32], sm[32], si[32], dg[3][32], db[3][32];
        kc_fill(x0, nx0, 300 + k, -1, 1);
        kc_fill(wt, nw, 310 + k, -0.5f, 0.5f);
        kc_fill(dy, ny, 320 + k, -1, 1);
        kc_fill(gamma, (size_t)K, 330, 0.5f, 1.5f);
        kc_fill(betap, (size_t)K, 331, -0.5f, 0.5f);
        kc_fill(rm, (size_t)K, 332, -0.5f, 0.5f);
        kc_fill(rv, (size_t)K, 333, 0.5f, 2.0f);
        struct md_conv2d_args cv = {.n = N, .c = C, .h = H, .w = W, .k = K, .r = cs[k].r, .s = cs[k].s, .p = P,
                                    .q = Q, .stride_h = cs[k].stride, .stride_w = cs[k].stride,
                                    .pad_h = cs[k].pad, .pad_w = cs[k].pad, .dil_h = cs[k].dil,
                                    .dil_w = cs[k].dil, .groups = 1, .layout = MD_NHWC, .dtype = MD_F32,
                                    .x = x0, .wt = wt, .y = x};
        cr_assert_eq(md_k_conv2d_fwd(ref, &cv), MD_OK, "%s", md_errmsg());
        struct md_batchnorm_args b = {.n = N, .c = K, .hw = P * Q, .h = P, .w = Q, .pool = 2,
                                      .layout = MD_NHWC, .dtype = MD_F32, .training = 1, .eps = 1e-5f,
                                      .momentum = 0.1f, .act = MD_ACT_RELU, .x = x, .y = y, .gamma = gamma,
                                      .beta_p = betap, .running_mean = rm, .running_var = rv, .save_mean = sm,
                                      .save_invstd = si, .pool_x = xs, .pool_arg = arg, .dy = dy};
        cr_assert_eq(md_k_batchnorm_fwd(cpu[0], &b), MD_OK, "%s", md_errmsg());
        /* 0: dx, then the reference's filter gradient of it */
        b.dx = dz, b.dgamma = dg[0], b.dbeta = db[0];
        cr_assert_eq(md_k_batchnorm_bwd(cpu[0], &b), MD_OK, "%s", md_errmsg());
        struct md_conv2d_args f = cv;
        f.dy = dz, f.dwt = dw[0];
        cr_assert_eq(md_k_conv2d_bwd_filter(ref, &f), MD_OK, "%s", md_errmsg());
        /* 1, 2: the filter gradient instead of dx, 1 and 3 threads; 3: beta 0.5 */
        for (int d = 1; d < 4; d++) {
            kc_fill(dw[d], nw, 340, -1, 1);
            f.dy = NULL, f.dwt = dw[d], f.beta = d == 3 ? 0.5f : 0.0f;
            b.dx = NULL, b.conv = &f, b.dgamma = dg[d < 3 ? d : 1], b.dbeta = db[d < 3 ? d : 1];
            cr_assert_eq(md_k_batchnorm_bwd(cpu[d == 2], &b), MD_OK, "%s", md_errmsg());
            b.conv = NULL;
        }
        float want[32 * 32], prev[32 * 32];
        kc_fill(prev, nw, 340, -1, 1);
        for (size_t i = 0; i < nw; i++) want[i] = dw[0][i] + 0.5f * prev[i];
        char what[96];
        snprintf(what, sizeof what, "bn+pool conv filter c%d %dx%d stride %d dil %d k%d", C, cs[k].r, cs[k].s,
                 cs[k].stride, cs[k].dil, K);
        cr_assert(th_allclose(what, dw[1], dw[0], nw, 2e-5, 1e-4), "dw: %s", what);
        cr_assert(th_allclose(what, dw[3], want, nw, 2e-5, 1e-4), "dw, beta 0.5: %s", what);
        cr_assert(memcmp(dg[1], dg[0], (size_t)K * 4) == 0 && memcmp(db[1], db[0], (size_t)K * 4) == 0,
                  "dgamma, dbeta change: %s", what);
        cr_assert(memcmp(dw[1], dw[2], nw * 4) == 0, "1 and 3 threads differ: %s", what);
        if (k == 0) { /* what it refuses */
            struct md_batchnorm_args e = b;
            struct md_conv2d_args g = f;
            e.conv = &g, e.dx = dz;
            cr_expect_eq(md_k_batchnorm_bwd(cpu[0], &e), MD_ERR_USAGE, "dx given");
            e.dx = NULL, e.layout = MD_NCHW;
            cr_expect_neq(md_k_batchnorm_bwd(cpu[0], &e), MD_OK, "NCHW");
            e.layout = MD_NHWC, g.groups = 2;
            cr_expect_eq(md_k_batchnorm_bwd(cpu[0], &e), MD_ERR_UNSUPPORTED, "two groups");
            g.groups = 1, g.c = 4; /* 36 > MD_BN_CONV_MAX_CRS */
            cr_expect_eq(md_k_batchnorm_bwd(cpu[0], &e), MD_ERR_UNSUPPORTED, "C*R*S 36");
            g.c = 1, e.pool_arg = NULL;
            cr_expect_eq(md_k_batchnorm_bwd(cpu[0], &e), MD_ERR_UNSUPPORTED, "no routing");
            e.pool_arg = arg, e.pool = 0, e.hw = P * Q;
            cr_expect_eq(md_k_batchnorm_bwd(cpu[0], &e), MD_ERR_UNSUPPORTED, "no pool");
        }
        free(x0), free(wt), free(x), free(y), free(dy), free(dz), free(xs), free(arg);
        for (int d = 0; d < 4; d++) free(dw[d]);
    }
    md_dev_set_batchnorm_pool_conv(cpu[0], 0);
    cr_expect(!md_dev_batchnorm_pool_conv(cpu[0], MD_NHWC, MD_F32));
    md_device_close(ref);
    md_device_close(cpu[0]);
    md_device_close(cpu[1]);
}

/* A strided channels-last backward-data runs as one stride-1 direct forward
 * per phase of dx (the pixels sharing their position modulo the stride),
 * written in place with beta: against the reference for strides 2 and 3, one
 * axis strided, even and odd filters and sizes, paddings that give phases
 * different numbers of taps and outputs, 3 input channels (a stem) and K from
 * 16 to 130, phases without taps (2x2 stride 3: beta * dx); MPSDIAG_CPU_PHASES's
 * switch sends the same arguments to GEMM + col2im, which the reference also
 * checks. Not for NCHW, 1x1 layers (a plain GEMM), or a phase whose first tap
 * reads dy a row late (3x3 stride 3 pad 1). */
Test(kernels_cpu, strided_backward_data_by_phases_matches_ref, .timeout = 60)
{
    static const struct { int n, c, h, w, k, r, s, sh, sw, ph, pw; } cases[] = {
        {3, 64, 16, 16, 128, 3, 3, 2, 2, 1, 1}, {2, 20, 9, 11, 33, 3, 3, 2, 2, 1, 1},
        {2, 16, 8, 9, 16, 3, 3, 2, 2, 0, 0},    {2, 3, 15, 13, 64, 7, 7, 2, 2, 3, 3},
        {2, 17, 10, 7, 24, 4, 4, 2, 2, 1, 1},   {2, 16, 11, 10, 20, 5, 5, 2, 2, 2, 2},
        {1, 24, 12, 14, 32, 5, 5, 3, 3, 2, 2},  {2, 16, 9, 12, 130, 3, 3, 2, 1, 1, 1},
        {2, 40, 6, 6, 48, 3, 5, 2, 2, 1, 2},
        {2, 16, 11, 11, 24, 2, 2, 3, 3, 0, 0}, {1, 20, 10, 13, 40, 2, 3, 3, 2, 0, 1}, /* phases without taps */
    };
    md_device *ref = NULL, *cpu = open_cpu(3);
    cr_assert_eq(md_device_open(md_backend_find("ref"), 0, NULL, &ref), MD_OK, "%s", md_errmsg());
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int bi = 0; bi < 2; bi++) {
            struct md_conv2d_args a = {.n = cases[ci].n, .c = cases[ci].c, .h = cases[ci].h, .w = cases[ci].w,
                                       .k = cases[ci].k, .r = cases[ci].r, .s = cases[ci].s,
                                       .stride_h = cases[ci].sh, .stride_w = cases[ci].sw, .pad_h = cases[ci].ph,
                                       .pad_w = cases[ci].pw, .dil_h = 1, .dil_w = 1, .groups = 1,
                                       .layout = MD_NHWC, .dtype = MD_F32, .beta = bi ? 0.5f : 0.0f};
            a.p = md_conv_out(a.h, a.r, a.stride_h, a.pad_h, 1);
            a.q = md_conv_out(a.w, a.s, a.stride_w, a.pad_w, 1);
            int direct = md_cpu_direct_enabled();
            cr_assert_eq(md_cpu_conv_data_by_phases(&a), direct, "case %zu: by phases %s", ci,
                         direct ? "expected" : "without the direct kernels");
            size_t ny = (size_t)a.n * a.k * a.p * a.q, nx = (size_t)a.n * a.c * a.h * a.w;
            size_t nw = (size_t)a.k * a.c * a.r * a.s;
            float *w = malloc(nw * 4), *dy = malloc(ny * 4), *dx[3] = {malloc(nx * 4), malloc(nx * 4), malloc(nx * 4)};
            kc_fill(w, nw, 71 + ci, -1, 1);
            kc_fill(dy, ny, 72 + ci, -1, 1);
            for (int side = 0; side < 3; side++) { /* ref, phases, GEMM + col2im */
                kc_fill(dx[side], nx, 73, -1, 1);  /* what beta scales */
                a.wt = w, a.dy = dy, a.dx = dx[side];
                md_cpu_conv_phases_set(side != 2);
                cr_assert_eq(md_k_conv2d_bwd_data(side ? cpu : ref, &a), MD_OK, "%s", md_errmsg());
            }
            md_cpu_conv_phases_set(-1);
            for (int side = 1; side < 3; side++) {
                float scale = 0.0f, worst = 0.0f;
                for (size_t i = 0; i < nx; i++) scale = fmaxf(scale, fabsf(dx[0][i]));
                for (size_t i = 0; i < nx; i++) worst = fmaxf(worst, fabsf(dx[side][i] - dx[0][i]));
                cr_assert(worst <= 2e-6f * scale, "case %zu beta %d %s: off by %g of %g", ci, bi,
                          side == 1 ? "by phases" : "GEMM + col2im", (double)worst, (double)scale);
            }
            free(w), free(dy), free(dx[0]), free(dx[1]), free(dx[2]);
        }
    struct md_conv2d_args one = {.n = 2, .c = 16, .h = 8, .w = 8, .k = 32, .r = 3, .s = 3, .p = 4, .q = 4,
                                 .stride_h = 2, .stride_w = 2, .pad_h = 1, .pad_w = 1, .dil_h = 1, .dil_w = 1,
                                 .groups = 1, .layout = MD_NCHW, .dtype = MD_F32};
    cr_assert(!md_cpu_conv_data_by_phases(&one), "NCHW stays on GEMM + col2im");
    one.layout = MD_NHWC, one.stride_h = one.stride_w = 3, one.p = one.q = 3;
    cr_assert(!md_cpu_conv_data_by_phases(&one), "3x3 stride 3 pad 1: phase 2 starts a row late (not taken)");
    one.stride_h = one.stride_w = 2, one.r = one.s = 1, one.pad_h = one.pad_w = 0, one.p = one.q = 4;
    cr_assert(!md_cpu_conv_data_by_phases(&one), "a 1x1 stride-2 layer stays on GEMM + col2im");
    md_device_close(cpu);
    md_device_close(ref);
}
