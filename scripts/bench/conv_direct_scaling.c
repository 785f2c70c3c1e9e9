/* conv_direct_scaling.c - the CPU backend's direct convolution kernels alone
 * (cpu_conv_direct.c) on the conv layers of resnet18_cifar (batch 64) and
 * small_cnn's second layer (batch 128), NHWC, for 1, 2, 4, 8 and 16 threads
 * (up to the first argument's maximum): forward, backward-data (stride 1:
 * the flipped forward) and backward-filter, best of ITERS, and whether the
 * results differ from 1 thread's. Needs no library but pthreads, so it builds
 * where the rest of mpsdiag's dependencies are missing:
 *
 *   cc -std=c11 -O3 -D_POSIX_C_SOURCE=200809L -Isrc -pthread scripts/bench/conv_direct_scaling.c \
 *      src/backend/cpu/cpu_conv_direct.c src/core/threadpool.c src/core/mem.c -o build/conv_direct_scaling
 *   build/conv_direct_scaling [MAX_THREADS [ITERS]]
 *
 * Stride-2 backward-data and 1x1 layers under 128 channels take im2col +
 * OpenBLAS in mpsdiag (not timed here; kernels_bench times them). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/cpu_conv_direct.h"
#include "backend/cpu/cpu_kernels.h"
#include "core/threadpool.h"

/* What the kernels need from the rest of the CPU backend. */
static void *scratch[CPU_SCR_COUNT];
static size_t scratch_bytes[CPU_SCR_COUNT];

void *md_cpu_scratch(int slot, size_t bytes)
{
    if (bytes > scratch_bytes[slot]) {
        free(scratch[slot]);
        scratch[slot] = aligned_alloc(64, (bytes + 63) / 64 * 64);
        scratch_bytes[slot] = scratch[slot] ? bytes : 0;
        if (scratch[slot]) memset(scratch[slot], 0, bytes);
    }
    return scratch[slot];
}

md_status md_errf(md_status st, const char *fmt, ...)
{
    (void)fmt;
    return st;
}

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

struct layer { const char *name; int n, c, h, k, r, stride, pad, count; };

static const struct layer layers[] = {
    {"small_cnn.conv2", 128, 32, 14, 64, 3, 1, 1, 1},   {"resnet18.l1", 64, 64, 32, 64, 3, 1, 1, 4},
    {"resnet18.l2.down", 64, 64, 32, 128, 3, 2, 1, 1},  {"resnet18.l2", 64, 128, 16, 128, 3, 1, 1, 3},
    {"resnet18.l3.down", 64, 128, 16, 256, 3, 2, 1, 1}, {"resnet18.l3.1x1", 64, 128, 16, 256, 1, 2, 0, 1},
    {"resnet18.l3", 64, 256, 8, 256, 3, 1, 1, 3},       {"resnet18.l4.down", 64, 256, 8, 512, 3, 2, 1, 1},
    {"resnet18.l4.1x1", 64, 256, 8, 512, 1, 2, 0, 1},   {"resnet18.l4", 64, 512, 4, 512, 3, 1, 1, 3},
};
#define NL (sizeof layers / sizeof layers[0])

static float val(size_t i, unsigned m, unsigned mod) { return (float)((i * m) % mod) / (float)mod - 0.5f; }

int main(int argc, char **argv)
{
    int maxt = argc > 1 ? atoi(argv[1]) : 16, iters = argc > 2 ? atoi(argv[2]) : 5;
    int T[5], nt = 0;
    for (int t = 1; t <= 16 && t <= maxt; t *= 2) T[nt++] = t;
    if (!md_cpu_direct_enabled()) {
        fprintf(stderr, "conv_direct_scaling: no AVX2 or AVX-512 (or MPSDIAG_CPU_DIRECT=0): nothing to time\n");
        return 1;
    }
    double tot[5][3] = {{0}}, ms[NL][5][3];
    int differ = 0;
    for (size_t l = 0; l < NL; l++) {
        const struct layer *L = &layers[l];
        int p = (L->h + 2 * L->pad - L->r) / L->stride + 1, data = L->stride == 1;
        struct md_dconv g = {L->n, L->c, L->h, L->h, L->k, L->r, L->r, p, p, L->stride, L->stride, L->pad, L->pad, 1, 1};
        /* backward-data of a stride-1 layer: the forward of dy with the weights flipped */
        struct md_dconv d = {L->n, L->k, p, p, L->c, L->r, L->r, L->h, L->h, 1, 1, L->r - 1 - L->pad, L->r - 1 - L->pad, 1, 1};
        size_t nx = (size_t)L->n * L->c * L->h * L->h, nw = (size_t)L->k * L->c * L->r * L->r, ny = (size_t)L->n * L->k * p * p;
        float *x = malloc(nx * 4), *w = malloc(nw * 4), *dy = malloc(ny * 4), *out[3][2];
        size_t no[3] = {ny, nx, nw};
        for (int o = 0; o < 3; o++) out[o][0] = malloc(no[o] * 4), out[o][1] = malloc(no[o] * 4);
        for (size_t i = 0; i < nx; i++) x[i] = val(i, 2654435761u, 1000);
        for (size_t i = 0; i < nw; i++) w[i] = val(i, 40503u, 997);
        for (size_t i = 0; i < ny; i++) dy[i] = val(i, 7919u, 991);
        for (int ti = 0; ti < nt; ti++) {
            md_threadpool_set_size(T[ti]);
            float **o0 = ti ? (float *[3]){out[0][1], out[1][1], out[2][1]} : (float *[3]){out[0][0], out[1][0], out[2][0]};
            double best[3] = {1e30, 1e30, 1e30};
            for (int it = 0; it <= iters; it++) { /* the first run warms up */
                double t0 = now_s();
                md_cpu_direct_fwd(&g, 1, 0, x, w, o0[0], 0.0f);
                double t1 = now_s();
                if (data) md_cpu_direct_fwd(&d, 1, 1, dy, w, o0[1], 0.0f);
                double t2 = now_s();
                md_cpu_direct_filter(&g, 1, x, dy, o0[2], 0.0f);
                double t3 = now_s(), dt[3] = {t1 - t0, t2 - t1, t3 - t2};
                for (int k = 0; k < 3 && it > 0; k++)
                    if (dt[k] < best[k]) best[k] = dt[k];
            }
            if (!data) best[1] = 0.0;
            for (int k = 0; k < 3; k++) {
                ms[l][ti][k] = best[k] * 1e3;
                tot[ti][k] += best[k] * 1e3 * L->count;
            }
            if (ti)
                for (int o = 0; o < 3; o++)
                    if ((o != 1 || data) && memcmp(out[o][0], out[o][1], no[o] * 4) != 0) differ++;
        }
        for (int o = 0; o < 3; o++) free(out[o][0]), free(out[o][1]);
        free(x), free(w), free(dy);
    }
    printf("direct conv kernels (NHWC, %s), best of %d, ms: fwd / data / filter per thread count\n",
           md_cpu_conv_kernels(), iters);
    printf("%-17s", "layer");
    for (int ti = 0; ti < nt; ti++) printf(" %20d", T[ti]);
    printf("\n");
    for (size_t l = 0; l < NL; l++) {
        printf("%-17s", layers[l].name);
        for (int ti = 0; ti < nt; ti++) printf(" %6.2f/%6.2f/%6.2f", ms[l][ti][0], ms[l][ti][1], ms[l][ti][2]);
        printf("\n");
    }
    printf("\nweighted by layer count: ms (parallel efficiency against 1 thread)\n");
    printf("%3s %16s %16s %16s\n", "t", "fwd", "data", "filter");
    for (int ti = 0; ti < nt; ti++) {
        printf("%3d", T[ti]);
        for (int k = 0; k < 3; k++) printf(" %9.1f (%3.0f%%)", tot[ti][k], 100.0 * tot[0][k] / (T[ti] * tot[ti][k]));
        printf("\n");
    }
    printf("results that differ from 1 thread's: %d\n", differ);
    md_threadpool_shutdown();
    return differ ? 1 : 0;
}
