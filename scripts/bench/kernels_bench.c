/* kernels_bench.c - times the CPU backend's convolution kernels on the conv
 * layers of small_cnn (batch 128) and resnet18_cifar (batch 64); the same
 * table is in kernels_bench_torch.py. Built and run by kernels_bench.sh.
 * Prints one line per layer: fwd, bwd_data, bwd_filter milliseconds (minimum).
 * With "gemm" as the layout argument it times the three GEMMs of small_cnn's
 * fc1 (3136 -> 128) at batch 64 and 128 instead, in GFLOP/s. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/backend.h"
#include "backend/kernels_call.h"
#include "core/blas_core.h"
#include "core/rng.h"
#include "core/timer.h"

struct layer { const char *name; int n, c, h, w, k, r, stride, pad, count; };

static const struct layer layers[] = {
    {"small_cnn.conv1", 128, 1, 28, 28, 32, 3, 1, 1, 1},
    {"small_cnn.conv2", 128, 32, 14, 14, 64, 3, 1, 1, 1},
    {"resnet18.stem", 64, 3, 32, 32, 64, 3, 1, 1, 1},
    {"resnet18.l1", 64, 64, 32, 32, 64, 3, 1, 1, 4},
    {"resnet18.l2.down", 64, 64, 32, 32, 128, 3, 2, 1, 1},
    {"resnet18.l2.1x1", 64, 64, 32, 32, 128, 1, 2, 0, 1},
    {"resnet18.l2", 64, 128, 16, 16, 128, 3, 1, 1, 3},
    {"resnet18.l3.down", 64, 128, 16, 16, 256, 3, 2, 1, 1},
    {"resnet18.l3.1x1", 64, 128, 16, 16, 256, 1, 2, 0, 1},
    {"resnet18.l3", 64, 256, 8, 8, 256, 3, 1, 1, 3},
    {"resnet18.l4.down", 64, 256, 8, 8, 512, 3, 2, 1, 1},
    {"resnet18.l4.1x1", 64, 256, 8, 8, 512, 1, 2, 0, 1},
    {"resnet18.l4", 64, 512, 4, 4, 512, 3, 1, 1, 3},
};

static int cmpd(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* BENCH_CLOCK=cpu: process CPU time, which a busy shared machine disturbs
 * less than wall time (meaningful with 1 thread). */
static double now_s(void)
{
    static int cpu = -1;
    if (cpu < 0) cpu = getenv("BENCH_CLOCK") && strcmp(getenv("BENCH_CLOCK"), "cpu") == 0;
    if (!cpu) return md_now();
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double time_ms(md_device *dev, md_status (*fn)(md_device *, const struct md_conv2d_args *),
                      const struct md_conv2d_args *a, int iters)
{
    double t[32];
    fn(dev, a); /* warm-up: scratch grows, pages fault in */
    for (int i = 0; i < iters; i++) {
        double t0 = now_s();
        fn(dev, a);
        t[i] = (now_s() - t0) * 1e3;
    }
    qsort(t, (size_t)iters, sizeof t[0], cmpd);
    return t[0]; /* the minimum: least disturbed by other load */
}

static double gemm_ms(md_device *dev, const struct md_gemm_args *g, int iters)
{
    double t[32];
    md_k_gemm(dev, g);
    for (int i = 0; i < iters; i++) {
        double t0 = now_s();
        md_k_gemm(dev, g);
        t[i] = (now_s() - t0) * 1e3;
    }
    qsort(t, (size_t)iters, sizeof t[0], cmpd);
    return t[0];
}

/* fc1's forward y = x W^T, data gradient dx = dy W, filter gradient dW = dy^T x */
static void fc_gemms(md_device *dev, int iters)
{
    enum { IN = 3136, OUT = 128 };
    printf("%-18s %14s %14s %14s   (ms, GFLOP/s)\n", "small_cnn.fc1", "fwd", "data", "filter");
    for (int batch = 64; batch <= 128; batch *= 2) {
        float *x = malloc((size_t)batch * IN * 4), *w = malloc((size_t)OUT * IN * 4), *y = malloc((size_t)batch * OUT * 4);
        float *dx = malloc((size_t)batch * IN * 4), *dw = malloc((size_t)OUT * IN * 4);
        for (size_t j = 0; j < (size_t)batch * IN; j++) x[j] = md_rng_uniform(1, j) - 0.5f;
        for (size_t j = 0; j < (size_t)OUT * IN; j++) w[j] = md_rng_uniform(2, j) - 0.5f;
        for (size_t j = 0; j < (size_t)batch * OUT; j++) y[j] = md_rng_uniform(3, j) - 0.5f;
        struct md_gemm_args g[3] = {
            {.m = batch, .n = OUT, .k = IN, .alpha = 1, .a = x, .lda = IN, .b = w, .ldb = IN, .c = y, .ldc = OUT,
             .batch = 1, .dtype = MD_F32, .trans_b = 1},
            {.m = batch, .n = IN, .k = OUT, .alpha = 1, .a = y, .lda = OUT, .b = w, .ldb = IN, .c = dx, .ldc = IN,
             .batch = 1, .dtype = MD_F32},
            {.m = OUT, .n = IN, .k = batch, .alpha = 1, .a = y, .lda = OUT, .b = x, .ldb = IN, .c = dw, .ldc = IN,
             .batch = 1, .dtype = MD_F32, .trans_a = 1}};
        double gf = 2.0 * batch * IN * OUT / 1e6;
        printf("  batch %-10d", batch);
        for (int k = 0; k < 3; k++) {
            double ms = gemm_ms(dev, &g[k], iters);
            printf(" %6.3f %7.0f", ms, gf / ms);
        }
        printf("\n");
        free(x), free(w), free(y), free(dx), free(dw);
    }
}

int main(int argc, char **argv)
{
    md_blas_core_choose(argv); /* OpenBLAS's kernels as mpsdiag runs them */
    int threads = argc > 1 ? atoi(argv[1]) : 0, iters = argc > 2 ? atoi(argv[2]) : 5;
    md_layout layout = argc > 3 && strcmp(argv[3], "nhwc") == 0 ? MD_NHWC : MD_NCHW;
    if (iters > 32) iters = 32;
    md_device *dev = NULL;
    struct md_device_opts o = {.threads = threads};
    if (md_device_open(md_backend_find("cpu"), 0, &o, &dev) != MD_OK) {
        fprintf(stderr, "%s\n", md_errmsg());
        return 1;
    }
    if (argc > 3 && strcmp(argv[3], "gemm") == 0) {
        printf("mpsdiag cpu GEMMs, %d threads, best of %d\n", md_device_get_info(dev)->compute_units, iters);
        fc_gemms(dev, iters);
        md_device_close(dev);
        return 0;
    }
    printf("mpsdiag cpu kernels, %d threads, %s, best of %d (ms)\n", md_device_get_info(dev)->compute_units,
           md_layout_name(layout), iters);
    printf("%-18s %8s %8s %8s %8s %8s\n", "layer", "fwd", "bwd", "(data", "filter)", "x count");
    double tot[3] = {0, 0, 0};
    for (size_t i = 0; i < sizeof layers / sizeof layers[0]; i++) {
        const struct layer *l = &layers[i];
        if (getenv("KB_LAYER") && !strstr(l->name, getenv("KB_LAYER"))) continue; /* KB_LAYER=l4: only those */
        struct md_conv2d_args a = {.n = l->n, .c = l->c, .h = l->h, .w = l->w, .k = l->k, .r = l->r, .s = l->r,
                                   .stride_h = l->stride, .stride_w = l->stride, .pad_h = l->pad, .pad_w = l->pad,
                                   .dil_h = 1, .dil_w = 1, .groups = 1, .layout = layout, .dtype = MD_F32};
        a.p = md_conv_out(a.h, a.r, a.stride_h, a.pad_h, 1);
        a.q = md_conv_out(a.w, a.s, a.stride_w, a.pad_w, 1);
        size_t nx = (size_t)a.n * a.c * a.h * a.w, nw = (size_t)a.k * a.c * a.r * a.s, ny = (size_t)a.n * a.k * a.p * a.q;
        float *x = malloc(nx * 4), *w = malloc(nw * 4), *y = malloc(ny * 4), *dx = malloc(nx * 4), *dw = malloc(nw * 4);
        for (size_t j = 0; j < nx; j++) x[j] = md_rng_uniform(1, j) - 0.5f;
        for (size_t j = 0; j < nw; j++) w[j] = md_rng_uniform(2, j) - 0.5f;
        for (size_t j = 0; j < ny; j++) y[j] = md_rng_uniform(3, j) - 0.5f;
        a.x = x, a.wt = w, a.y = y, a.dy = y, a.dx = dx, a.dwt = dw;
        double f = time_ms(dev, md_k_conv2d_fwd, &a, iters), d = time_ms(dev, md_k_conv2d_bwd_data, &a, iters),
               g = time_ms(dev, md_k_conv2d_bwd_filter, &a, iters);
        int first = strncmp(l->name, "small_cnn.conv1", 15) == 0 || strncmp(l->name, "resnet18.stem", 13) == 0;
        printf("%-18s %8.2f %8.2f %8.2f %8.2f %8d\n", l->name, f, (first ? 0.0 : d) + g, d, g, l->count);
        tot[0] += f * l->count;
        tot[1] += first ? 0.0 : d * l->count; /* the first layer needs no data gradient */
        tot[2] += g * l->count;
        if (i == 1 || i + 1 == sizeof layers / sizeof layers[0]) {
            printf("%-18s %8.2f %8.2f   total fwd+bwd %.1f ms\n", i == 1 ? "= small_cnn" : "= resnet18", tot[0],
                   tot[1] + tot[2], tot[0] + tot[1] + tot[2]);
            tot[0] = tot[1] = tot[2] = 0;
        }
        free(x), free(w), free(y), free(dx), free(dw);
    }
    md_device_close(dev);
    return 0;
}
