/* test_conv_small.c - the CPU's convolution kernels for few input values per
 * output (C*R*S < 16, cpu_conv_small.c) against the reference backend, in
 * both of their builds (AVX2 where the CPU has it, and the portable one),
 * and their independence of the thread count. Backward-data of the same
 * shapes (another path) is checked alongside. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_conv_small.h"
#include "backend/kernels_call.h"
#include "core/threadpool.h"
#include "helpers.h"
#include "kernel_cases.h"

struct small_case { int n, c, h, w, k, r, s, stride, pad, dil; };

static const struct small_case cases[] = {
    /* n   c   h   w   k  r  s st pad dil */
    {3, 1, 9, 11, 5, 3, 3, 1, 1, 1},     /* the first layer's shape, small: K under one vector */
    {2, 1, 12, 10, 33, 3, 3, 2, 1, 1},   /* stride 2, K one past whole vectors */
    {2, 1, 10, 13, 20, 3, 3, 1, 0, 1},   /* no padding, K 20 */
    {2, 2, 7, 9, 20, 1, 1, 1, 0, 1},     /* 1x1, 2 channels */
    {3, 3, 8, 7, 32, 1, 1, 2, 0, 1},     /* 1x1 stride 2, 3 channels, K 32 */
    {2, 3, 6, 5, 7, 2, 2, 1, 1, 1},      /* 2x2 (C*R*S 12), padding 1 */
    {2, 1, 11, 9, 16, 3, 5, 1, 2, 1},    /* 3x5 (C*R*S 15), padding 2 */
    {2, 1, 13, 12, 9, 3, 3, 2, 2, 2},    /* dilation 2 */
    {2, 1, 45, 40, 12, 3, 3, 1, 1, 1},   /* planes over 1024 outputs: two row blocks per image */
    {70, 1, 4, 5, 8, 3, 3, 1, 1, 1},     /* more units than the filter's 64 runs */
    {4, 1, 28, 28, 32, 3, 3, 1, 1, 1},   /* small_cnn's conv1, 4 images */
};

static md_device *open_dev(const char *name, int threads)
{
    md_device *dev = NULL;
    struct md_device_opts o = {.threads = threads};
    cr_assert_eq(md_device_open(md_backend_find(name), 0, &o, &dev), MD_OK, "%s", md_errmsg());
    return dev;
}

static struct md_conv2d_args case_args(const struct small_case *k, int nhwc, float beta)
{
    struct md_conv2d_args a = {.n = k->n, .c = k->c, .h = k->h, .w = k->w, .k = k->k, .r = k->r, .s = k->s,
                               .stride_h = k->stride, .stride_w = k->stride, .pad_h = k->pad, .pad_w = k->pad,
                               .dil_h = k->dil, .dil_w = k->dil, .groups = 1, .layout = nhwc ? MD_NHWC : MD_NCHW,
                               .dtype = MD_F32, .beta = beta};
    a.p = md_conv_out(a.h, a.r, a.stride_h, a.pad_h, a.dil_h);
    a.q = md_conv_out(a.w, a.s, a.stride_w, a.pad_w, a.dil_w);
    return a;
}

enum { OP_FWD, OP_DATA, OP_FILTER };
static const char *op_names[3] = {"forward", "backward-data", "backward-filter"};

/* Runs op on dev; the output starts as `init` (beta 1) or NaN (beta 0: a
 * kernel that reads it fails). Returns the output (caller frees). */
static float *run_op(md_device *dev, struct md_conv2d_args a, int op, const float *x, const float *w, const float *dy,
                     const float *init, size_t nout)
{
    float *o = malloc(nout * 4);
    if (a.beta != 0.0f)
        memcpy(o, init, nout * 4);
    else
        memset(o, 0xff, nout * 4);
    a.x = x, a.wt = w, a.dy = dy;
    md_status st = MD_OK;
    if (op == OP_FWD) a.y = o, st = md_k_conv2d_fwd(dev, &a);
    if (op == OP_DATA) a.dx = o, st = md_k_conv2d_bwd_data(dev, &a);
    if (op == OP_FILTER) a.dwt = o, st = md_k_conv2d_bwd_filter(dev, &a);
    cr_assert_eq(st, MD_OK, "%s: %s", op_names[op], md_errmsg());
    return o;
}

/* Every case, layout, beta and op on the CPU (direct: md_cpu_direct_set's
 * mode, which picks the kernels' build) against the reference; returns the
 * failures (each printed). */
static int compare_all(int direct)
{
    md_device *cpu = open_dev("cpu", 2), *ref = open_dev("ref", 1);
    md_cpu_direct_set(direct);
    int bad = 0;
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int lay = 0; lay < 2; lay++)
            for (int bi = 0; bi < 2; bi++) {
                struct md_conv2d_args a = case_args(&cases[ci], lay, (float)bi);
                struct md_dconv d = {a.n, a.c, a.h, a.w, a.k, a.r, a.s, a.p, a.q, a.stride_h, a.stride_w,
                                     a.pad_h, a.pad_w, a.dil_h, a.dil_w};
                cr_assert(md_cpu_small_ok(&d), "case %zu is not one for the small-channel kernels", ci);
                size_t n[3] = {(size_t)a.n * a.k * a.p * a.q, (size_t)a.n * a.c * a.h * a.w,
                               (size_t)a.k * a.c * a.r * a.s}; /* y, dx, dw */
                float *x = malloc(n[1] * 4), *w = malloc(n[2] * 4), *dy = malloc(n[0] * 4);
                kc_fill(x, n[1], 50 + ci, -1, 1);
                kc_fill(w, n[2], 60 + ci, -1, 1);
                kc_fill(dy, n[0], 70 + ci, -1, 1);
                for (int op = OP_FWD; op <= OP_FILTER; op++) {
                    size_t nout = n[op == OP_FWD ? 0 : op == OP_DATA ? 1 : 2];
                    float *init = malloc(nout * 4);
                    kc_fill(init, nout, 80 + ci, -1, 1);
                    float *got = run_op(cpu, a, op, x, w, dy, init, nout);
                    float *want = run_op(ref, a, op, x, w, dy, init, nout);
                    /* fp32 sums against double: the filter's run over every pixel */
                    double len = op == OP_FILTER ? (double)a.n * a.p * a.q : (double)a.k * a.r * a.s;
                    double atol = 1e-4 * (len > 1024 ? sqrt(len / 1024) : 1.0);
                    char what[160];
                    snprintf(what, sizeof what, "case %zu %s %s beta %d (%s kernels)", ci, op_names[op],
                             lay ? "NHWC" : "NCHW", bi, md_cpu_small_isa());
                    if (!th_allclose(what, got, want, nout, atol, 1e-4)) bad++;
                    free(init), free(got), free(want);
                }
                free(x), free(w), free(dy);
            }
    md_cpu_direct_set(-1);
    md_device_close(cpu);
    md_device_close(ref);
    return bad;
}

/* The build that runs by default: AVX2 on x86-64 CPUs that have it. */
Test(conv_small, default_kernels_match_reference)
{
    cr_assert_eq(compare_all(-1), 0, "small-channel convolutions differ from the reference (see stderr)");
}

/* The portable build (what other CPUs run; MPSDIAG_CPU_DIRECT=0 here). */
Test(conv_small, portable_kernels_match_reference)
{
    cr_assert_eq(compare_all(0), 0, "portable small-channel convolutions differ from the reference (see stderr)");
    md_cpu_direct_set(0);
    cr_assert_str_eq(md_cpu_small_isa(), "portable");
    md_cpu_direct_set(-1);
}

/* Units and runs follow the shape, never the thread count: forward and
 * backward-filter are bit-identical for 1 and 3 threads, in both builds. */
Test(conv_small, identical_for_1_and_3_threads)
{
    static const size_t pick[] = {1, 8, 9, 10};
    md_device *dev = open_dev("cpu", 1);
    for (int direct = -1; direct <= 0; direct++)
        for (size_t pi = 0; pi < sizeof pick / sizeof pick[0]; pi++)
            for (int lay = 0; lay < 2; lay++) {
                struct md_conv2d_args a = case_args(&cases[pick[pi]], lay, 0.0f);
                size_t ny = (size_t)a.n * a.k * a.p * a.q, nx = (size_t)a.n * a.c * a.h * a.w,
                       nw = (size_t)a.k * a.c * a.r * a.s;
                float *x = malloc(nx * 4), *w = malloc(nw * 4), *dy = malloc(ny * 4), *out[2][2];
                kc_fill(x, nx, 90 + pi, -1, 1);
                kc_fill(w, nw, 91 + pi, -1, 1);
                kc_fill(dy, ny, 92 + pi, -1, 1);
                md_cpu_direct_set(direct);
                for (int t = 0; t < 2; t++) {
                    md_threadpool_set_size(t ? 3 : 1);
                    out[t][0] = run_op(dev, a, OP_FWD, x, w, dy, NULL, ny);
                    out[t][1] = run_op(dev, a, OP_FILTER, x, w, dy, NULL, nw);
                }
                md_cpu_direct_set(-1);
                cr_assert(memcmp(out[0][0], out[1][0], ny * 4) == 0, "case %zu forward %s (%s): 3 threads differ",
                          pick[pi], lay ? "NHWC" : "NCHW", direct ? "default" : "portable");
                cr_assert(memcmp(out[0][1], out[1][1], nw * 4) == 0,
                          "case %zu backward-filter %s (%s): 3 threads differ", pick[pi], lay ? "NHWC" : "NCHW",
                          direct ? "default" : "portable");
                for (int t = 0; t < 2; t++) free(out[t][0]), free(out[t][1]);
                free(x), free(w), free(dy);
            }
    md_threadpool_shutdown();
    md_threadpool_set_size(1);
    md_device_close(dev);
}
