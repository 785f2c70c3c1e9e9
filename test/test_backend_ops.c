/* test_backend_ops.c - every kernel of every available backend against the
 * reference backend, in the manner of ggml's test-backend-ops.
 *
 * For each backend that md_backend_probe says is available (cpu always; cuda
 * and metal where present), every op runs a table of awkward cases (odd and
 * prime sizes, stride > 1, padding > kernel/2, dilation, groups and
 * depthwise, both layouts, fp32/fp16/bf16, beta 0 and 1) on identical
 * deterministic inputs (md_rng) on the backend and on "ref"; outputs are
 * compared with th_allclose (NaN/Inf first) under a per-op, per-dtype
 * tolerance. A NULL kernel, or MD_ERR_UNSUPPORTED for a case, is reported as
 * skipped, never as a pass. Outputs written with beta 0 start as NaN, so a
 * kernel that reads them fails. Only the backend API is used: the same file
 * runs on a GPU machine. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_conv_direct.h"
#include "backend/kernels_call.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "helpers.h"
#include "kernel_cases.h"

enum { K_GEMM, K_CONV_FWD, K_CONV_DATA, K_CONV_FILTER, K_BN_FWD, K_BN_BWD, K_ACT_FWD, K_ACT_BWD, K_POOL_FWD,
       K_POOL_BWD, K_GAP_FWD, K_GAP_BWD, K_BIAS_ADD, K_BIAS_GRAD, K_DROP_FWD, K_DROP_BWD, K_EW, K_REDUCE,
       K_CHSLICE, K_XENT, K_CAST, K_PERMUTE, K_OPTIM, K_LN_FWD, K_LN_BWD, K_SM_FWD, K_SM_BWD, K_ATTN_FWD, K_ATTN_BWD,
       K_REGRESS, K_TILES_FWD, K_TILES_BWD, K_FILM_FWD, K_FILM_BWD, K_CHSCALE_FWD, K_CHSCALE_BWD };
_Static_assert(K_CHSCALE_BWD + 1 == MD_KERNEL_COUNT, "one K_ entry per kernel table entry");

/* ---- tolerances: |got - ref| <= atol + rtol*|ref| ------------------------------------- */

struct tol { double atol, rtol; };

static struct tol tol_of(int op, md_dtype t)
{
    /* fp16/bf16 results differ from the reference by at most about one rounding
     * of the stored output (inputs are the same rounded values on both sides) */
    if (t == MD_F16) return (struct tol){1e-2, 1e-2};
    if (t == MD_BF16) return (struct tol){2e-2, 2e-2};
    switch (op) {
    case K_GEMM: case K_CONV_FWD: case K_CONV_DATA: case K_CONV_FILTER:
        return (struct tol){1e-4, 1e-4}; /* long fp32 sums against double */
    case K_BN_FWD: case K_BN_BWD: case K_REDUCE: case K_BIAS_GRAD: case K_XENT: case K_OPTIM: case K_REGRESS:
    case K_LN_FWD: case K_LN_BWD:
        return (struct tol){2e-5, 1e-4};
    case K_ATTN_FWD: case K_ATTN_BWD:
        return (struct tol){1e-4, 1e-4}; /* sums over keys and head_dim in fp32 */
    case K_TILES_FWD: case K_TILES_BWD: /* float source coordinates against double */
    case K_FILM_BWD:                    /* sums over the tokens */
        return (struct tol){2e-5, 1e-4};
    default: return (struct tol){1e-5, 1e-5};
    }
}

/* ---- harness ------------------------------------------------------------------------------ */

#define MAX_BUFS 24

struct harness {
    md_device *dev[2];      /* 0: backend under test, 1: ref */
    int side;
    void *bufs[MAX_BUFS];
    int nbufs;
    int run[MD_KERNEL_COUNT], failed[MD_KERNEL_COUNT], skipped[MD_KERNEL_COUNT];
    int op_skipped[MD_KERNEL_COUNT];
    int corrupt;            /* test of the comparator: perturb the backend's output */
    int cuda;               /* the backend under test is CUDA (cases for its attention paths) */
    int autotune;           /* its convolution algorithms are chosen by timing */
};

static md_device *cur(struct harness *h) { return h->dev[h->side]; }

/* Device copy of host data on the current side (freed by hx_end). */
static void *hx_in(struct harness *h, const void *host, size_t bytes)
{
    void *d = NULL;
    cr_assert_eq(md_dev_alloc(cur(h), bytes ? bytes : 1, &d, "test"), MD_OK, "%s", md_errmsg());
    if (bytes) cr_assert_eq(md_dev_upload(cur(h), d, host, bytes), MD_OK, "%s", md_errmsg());
    cr_assert(h->nbufs < MAX_BUFS);
    h->bufs[h->nbufs++] = d;
    return d;
}

/* An output buffer full of NaN (fp32 and halves alike: 0xff bytes are NaN). */
static void *hx_nan(struct harness *h, size_t bytes)
{
    void *tmp = malloc(bytes ? bytes : 1);
    memset(tmp, 0xff, bytes);
    void *d = hx_in(h, tmp, bytes);
    free(tmp);
    return d;
}

static void hx_get(struct harness *h, const void *dptr, void *host, size_t bytes)
{
    cr_assert_eq(md_dev_sync(cur(h)), MD_OK, "%s", md_errmsg());
    if (bytes) cr_assert_eq(md_dev_download(cur(h), host, dptr, bytes), MD_OK, "%s", md_errmsg());
}

static void hx_end(struct harness *h)
{
    for (int i = 0; i < h->nbufs; i++) md_dev_free(cur(h), h->bufs[i]);
    h->nbufs = 0;
}

static void *host_typed(md_dtype t, size_t n, uint64_t seed, float lo, float hi)
{
    void *p = malloc((n ? n : 1) * md_dtype_size(t));
    kc_fill_typed(p, t, n, seed, lo, hi);
    return p;
}

/* Compares typed outputs; returns 1 when they agree. */
static int cmp_typed(struct harness *h, const char *what, void *got, const void *ref, md_dtype t, size_t n, struct tol tl)
{
    float *g = malloc((n ? n : 1) * 4), *r = malloc((n ? n : 1) * 4);
    for (size_t i = 0; i < n; i++) g[i] = md_load_f(got, t, i), r[i] = md_load_f(ref, t, i);
    if (h->corrupt && n) g[n / 2] = g[n / 2] * 1.01f + 0.01f;
    int ok = th_allclose(what, g, r, n, tl.atol, tl.rtol);
    free(g);
    free(r);
    return ok;
}

/* Status handling shared by all cases; returns 1 when outputs should be compared. */
static int statuses_ok(struct harness *h, int op, const char *what, md_status st0, md_status st1)
{
    if (st1 != MD_OK) {
        fprintf(stderr, "  %s: reference failed: %s\n", what, md_errmsg());
        h->failed[op]++;
        return 0;
    }
    if (st0 == MD_ERR_UNSUPPORTED) {
        fprintf(stderr, "  %s: skipped (unsupported: %s)\n", what, md_errmsg());
        h->skipped[op]++;
        return 0;
    }
    if (st0 != MD_OK) {
        fprintf(stderr, "  %s: backend failed: %s\n", what, md_errmsg());
        h->failed[op]++;
        return 0;
    }
    return 1;
}

static void record(struct harness *h, int op, int ok)
{
    h->run[op]++;
    if (!ok) h->failed[op]++;
}

static const md_dtype dtypes[3] = {MD_F32, MD_F16, MD_BF16};

/* ---- GEMM ------------------------------------------------------------------------------------ */

static void op_gemm(struct harness *h)
{
    static const int cases[][8] = {/* m n k ta tb batch pad beta(x2) */
                                   {1, 1, 1, 0, 0, 1, 0, 0}, {7, 13, 5, 0, 0, 1, 1, 2}, {17, 3, 29, 1, 0, 1, 0, 0},
                                   {5, 11, 7, 0, 1, 2, 2, 2}, {31, 37, 41, 1, 1, 3, 1, 1}, {64, 48, 96, 0, 1, 1, 0, 0},
                                   /* large enough for the CPU's GEMM tiles: by columns, by rows */
                                   {37, 517, 450, 1, 0, 1, 1, 2}, {517, 37, 450, 0, 1, 1, 2, 0},
                                   {530, 45, 400, 1, 1, 1, 0, 2}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int di = 0; di < 3; di++) {
            const int *c = cases[ci];
            md_dtype t = dtypes[di];
            size_t es = md_dtype_size(t);
            int m = c[0], n = c[1], k = c[2], ta = c[3], tb = c[4], batch = c[5], pad = c[6];
            float beta = (float)c[7] * 0.5f;
            int lda = (ta ? m : k) + pad, ldb = (tb ? k : n) + pad, ldc = n + pad;
            long long sa = (long long)(ta ? k : m) * lda + 3, sb = (long long)(tb ? n : k) * ldb + 1,
                      sc = (long long)m * ldc + 2;
            size_t na = (size_t)(sa * batch), nb = (size_t)(sb * batch), nc = (size_t)(sc * batch);
            void *A = host_typed(t, na, 100 + ci, -1, 1), *B = host_typed(t, nb, 200 + ci, -1, 1);
            void *C0 = host_typed(t, nc, 300 + ci, -1, 1);
            void *out[2] = {malloc(nc * es), malloc(nc * es)};
            md_status st[2];
            for (h->side = 0; h->side < 2; h->side++) {
                struct md_gemm_args g = {.trans_a = ta, .trans_b = tb, .m = m, .n = n, .k = k, .alpha = 0.75f,
                                         .beta = beta, .lda = lda, .stride_a = sa, .ldb = ldb, .stride_b = sb,
                                         .ldc = ldc, .stride_c = sc, .batch = batch, .dtype = t};
                g.a = hx_in(h, A, na * es);
                g.b = hx_in(h, B, nb * es);
                g.c = beta != 0.0f ? hx_in(h, C0, nc * es) : hx_nan(h, nc * es);
                st[h->side] = md_k_gemm(cur(h), &g);
                hx_get(h, g.c, out[h->side], nc * es);
                hx_end(h);
            }
            char what[128];
            snprintf(what, sizeof what, "gemm m%d n%d k%d ta%d tb%d batch%d beta%g %s", m, n, k, ta, tb, batch,
                     (double)beta, md_dtype_name(t));
            if (statuses_ok(h, K_GEMM, what, st[0], st[1])) {
                /* compare only the (m, n) blocks: gaps between rows are not outputs */
                size_t cnt = (size_t)batch * m * n, j = 0;
                void *g = malloc(cnt * es), *r = malloc(cnt * es);
                for (int b = 0; b < batch; b++)
                    for (int i = 0; i < m; i++, j += (size_t)n) {
                        memcpy((char *)g + j * es, (char *)out[0] + ((size_t)(b * sc) + (size_t)i * ldc) * es, (size_t)n * es);
                        memcpy((char *)r + j * es, (char *)out[1] + ((size_t)(b * sc) + (size_t)i * ldc) * es, (size_t)n * es);
                    }
                record(h, K_GEMM, cmp_typed(h, what, g, r, t, cnt, tol_of(K_GEMM, t)));
                free(g), free(r);
            }
            free(A), free(B), free(C0), free(out[0]), free(out[1]);
        }
}

/* ---- convolution --------------------------------------------------------------------------------- */

struct conv_case { int n, c, h, w, k, r, s, sh, sw, ph, pw, dh, dw, g; int halves; };

static const struct conv_case conv_cases[] = {
    /* n  c   h   w   k  r  s sh sw ph pw dh dw  g halves */
    {2, 3, 7, 5, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},    /* odd sizes, same padding */
    {3, 5, 11, 13, 7, 3, 3, 2, 2, 1, 1, 1, 1, 1, 0},  /* primes, stride 2 */
    {1, 4, 9, 8, 6, 3, 2, 2, 3, 2, 2, 1, 1, 2, 0},    /* groups 2, padding > kernel/2, mixed stride */
    {2, 6, 8, 7, 6, 3, 3, 1, 1, 2, 2, 2, 2, 6, 1},    /* depthwise, dilation 2 */
    {2, 6, 10, 9, 12, 3, 3, 1, 2, 1, 3, 2, 1, 3, 0},  /* groups 3, channel multiplier 2 */
    {3, 8, 6, 6, 5, 1, 1, 1, 1, 0, 0, 1, 1, 1, 1},    /* 1x1 (GEMM fast path) */
    {2, 8, 7, 7, 4, 1, 1, 2, 2, 0, 0, 1, 1, 2, 0},    /* 1x1 stride 2, groups */
    {1, 2, 13, 11, 3, 5, 4, 3, 2, 3, 1, 1, 2, 1, 0},  /* 5x4 kernel, stride 3 */
    {5, 16, 6, 6, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0},   /* several images per GEMM chunk */
    {9, 16, 32, 32, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0}, /* im2col larger than one CPU chunk (4 MiB) */
    {2, 3, 9, 7, 4, 5, 5, 1, 1, 2, 2, 1, 1, 1, 0},    /* stride 1, q == w: the CPU's shifted-run im2col, 5x5 */
    {2, 4, 6, 5, 4, 3, 3, 1, 1, 0, 1, 1, 1, 2, 0},    /* the same with p < h, groups 2 */
    {1, 2, 4, 2, 3, 3, 5, 1, 1, 1, 2, 1, 1, 1, 0},    /* q == w with taps wholly outside the row */
    {1, 32, 60, 58, 4, 3, 3, 1, 1, 1, 1, 1, 1, 2, 0}, /* the CPU's per-thread row-block tiles, groups 2 */
    {1, 32, 90, 70, 4, 3, 3, 2, 2, 1, 1, 1, 1, 2, 0}, /* the same with stride 2 (a short last block) */
    {23, 128, 8, 8, 8, 3, 3, 1, 1, 1, 1, 1, 1, 2, 0}, /* small planes: two CPU image chunks (21 + 2), groups 2 */
    {14, 64, 20, 20, 8, 3, 3, 2, 2, 1, 1, 1, 1, 1, 0}, /* stride 2: two CPU image chunks (13 + 1) */
    /* the CPU's shifted GEMMs on a padded grid (stride 1, one group, >= 256 outputs), beta 1, 0, 1 */
    {3, 8, 17, 19, 12, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},  /* odd H and W */
    {4, 12, 15, 21, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0}, /* more channels, K > C */
    {4, 9, 18, 20, 8, 5, 3, 1, 1, 2, 0, 1, 1, 1, 0},   /* 5x3 kernel, no horizontal padding */
    /* the CPU's direct AVX-512 kernels: C in two blocks (C > ~113 for 3x3), K
     * in two 64-channel blocks with a 6-channel tail, MR pixel tails, dilation */
    {3, 130, 6, 7, 70, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0},
    {4, 20, 9, 11, 33, 3, 3, 2, 1, 2, 1, 2, 1, 1, 1},
    {9, 16, 8, 8, 32, 3, 3, 1, 1, 1, 1, 1, 1, 1, 0}, /* more images than filter slots; NHWC dy read in place */
    /* the CPU's small-channel kernels (C*R*S < 16): a first layer with K past whole vectors, a 1x1 */
    {3, 1, 12, 11, 20, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1},
    {2, 3, 9, 8, 33, 1, 1, 2, 2, 0, 0, 1, 1, 1, 1},
};

static void op_conv(struct harness *h, int op)
{
    for (size_t ci = 0; ci < sizeof conv_cases / sizeof conv_cases[0]; ci++)
        for (int lay = 0; lay < 2; lay++)
            for (int di = 0; di < 3; di++) {
                const struct conv_case *k = &conv_cases[ci];
                md_dtype t = dtypes[di];
                if (t != MD_F32 && !k->halves) continue;
                size_t es = md_dtype_size(t);
                struct md_conv2d_args a = {.n = k->n, .c = k->c, .h = k->h, .w = k->w, .k = k->k, .r = k->r, .s = k->s,
                                           .stride_h = k->sh, .stride_w = k->sw, .pad_h = k->ph, .pad_w = k->pw,
                                           .dil_h = k->dh, .dil_w = k->dw, .groups = k->g,
                                           .layout = lay ? MD_NHWC : MD_NCHW, .dtype = t};
                a.p = md_conv_out(a.h, a.r, a.stride_h, a.pad_h, a.dil_h);
                a.q = md_conv_out(a.w, a.s, a.stride_w, a.pad_w, a.dil_w);
                a.beta = (ci + (size_t)lay) % 2 ? 1.0f : 0.0f;
                size_t nx = (size_t)a.n * a.c * a.h * a.w, nw = (size_t)a.k * (a.c / a.groups) * a.r * a.s,
                       ny = (size_t)a.n * a.k * a.p * a.q;
                size_t nout = op == K_CONV_FWD ? ny : op == K_CONV_DATA ? nx : nw;
                void *X = host_typed(t, nx, 11 + ci, -1, 1), *W = host_typed(t, nw, 12 + ci, -1, 1),
                     *DY = host_typed(t, ny, 13 + ci, -1, 1), *O0 = host_typed(t, nout, 14 + ci, -1, 1);
                void *out[2] = {malloc(nout * es), malloc(nout * es)};
                md_status st[2];
                for (h->side = 0; h->side < 2; h->side++) {
                    struct md_conv2d_args b = a;
                    void *o = a.beta != 0.0f ? hx_in(h, O0, nout * es) : hx_nan(h, nout * es);
                    if (ci % 3 == 1) { /* a caller's workspace, full of NaN: usable scratch, never input */
                        b.workspace_bytes = (size_t)1 << 20;
                        b.workspace = hx_nan(h, b.workspace_bytes);
                    }
                    if (op != K_CONV_DATA) b.x = hx_in(h, X, nx * es);
                    if (op != K_CONV_FILTER) b.wt = hx_in(h, W, nw * es);
                    if (op != K_CONV_FWD) b.dy = hx_in(h, DY, ny * es);
                    if (op == K_CONV_FWD) b.y = o, st[h->side] = md_k_conv2d_fwd(cur(h), &b);
                    if (op == K_CONV_DATA) b.dx = o, st[h->side] = md_k_conv2d_bwd_data(cur(h), &b);
                    if (op == K_CONV_FILTER) b.dwt = o, st[h->side] = md_k_conv2d_bwd_filter(cur(h), &b);
                    hx_get(h, o, out[h->side], nout * es);
                    hx_end(h);
                }
                char what[160];
                snprintf(what, sizeof what, "%s case %zu (n%d c%d %dx%d k%d %dx%d s%d,%d p%d,%d d%d,%d g%d) %s %s beta %g",
                         md_kernel_names[op], ci, a.n, a.c, a.h, a.w, a.k, a.r, a.s, a.stride_h, a.stride_w, a.pad_h,
                         a.pad_w, a.dil_h, a.dil_w, a.groups, md_layout_name(a.layout), md_dtype_name(t), (double)a.beta);
                struct tol tl = tol_of(op, t);
                if (t == MD_F32) {
                    /* fp32 rounding of a sum grows with the square root of its length: the
                     * filter gradient sums over every output pixel of every image */
                    double len = op == K_CONV_FILTER ? (double)a.n * a.p * a.q
                                                     : (double)(op == K_CONV_FWD ? a.c : a.k) / a.groups * a.r * a.s;
                    if (len > 1024) tl.atol *= sqrt(len / 1024);
                    /* timed selection may pick an FFT or Winograd algorithm, whose fp32
                     * error is a few times a direct sum's (2.3e-4 on a value of 1.14 in
                     * a 3x3 forward over 130 channels, an H200) */
                    if (h->autotune) tl.atol *= 4, tl.rtol *= 4;
                }
                if (statuses_ok(h, op, what, st[0], st[1]))
                    record(h, op, cmp_typed(h, what, out[0], out[1], t, nout, tl));
                free(X), free(W), free(DY), free(O0), free(out[0]), free(out[1]);
            }
}

/* ---- batch normalisation -------------------------------------------------------------------------- */

static void op_bn(struct harness *h, int op)
{
    /* the last: NHWC rows in two of the CPU's 64-row chunks, channels in two 64-wide blocks */
    static const int shapes[][3] = {{3, 5, 7}, {2, 16, 9}, {4, 3, 1}, {1, 7, 30}, {2, 3, 1100}, {3, 70, 23}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++)
        for (int lay = 0; lay < 2; lay++)
            for (int mode = 0; mode < 8; mode++) /* bit 0: training, bit 1: fused ReLU, bit 2: residual */
                for (int di = 0; di < 3; di++) {
                    md_dtype t = dtypes[di];
                    if (t != MD_F32 && (si % 2 || (mode & 3) != 3)) continue;
                    int res = mode >> 2;
                    if (res && !md_dev_batchnorm_residual(h->dev[0])) continue;
                    int n = shapes[si][0], c = shapes[si][1], hw = shapes[si][2];
                    size_t nx = (size_t)n * c * hw, es = md_dtype_size(t);
                    int training = mode & 1, relu = (mode >> 1) & 1;
                    float beta = op == K_BN_BWD && (si + (size_t)mode) % 2 ? 1.0f : 0.0f;
                    void *X = host_typed(t, nx, 21 + si, -2, 3), *DY = host_typed(t, nx, 22 + si, -1, 1),
                         *DX0 = host_typed(t, nx, 23 + si, -1, 1), *R = host_typed(t, nx, 30 + si, -2, 1),
                         *DR0 = host_typed(t, nx, 31 + si, -1, 1), *dr[2] = {malloc(nx * es), malloc(nx * es)};
                    float gamma[80], betap[80], rm[80], rv[80], dg0[80], db0[80];
                    kc_fill(gamma, (size_t)c, 24, 0.5f, 1.5f);
                    kc_fill(betap, (size_t)c, 25, -0.5f, 0.5f);
                    kc_fill(rm, (size_t)c, 26, -0.5f, 0.5f);
                    kc_fill(rv, (size_t)c, 27, 0.5f, 2.0f);
                    kc_fill(dg0, (size_t)c, 28, -1, 1);
                    kc_fill(db0, (size_t)c, 29, -1, 1);
                    /* backward consumes the forward's y and saved statistics, computed by ref */
                    void *Y = malloc(nx * es);
                    float sm[80], si_[80];
                    {
                        md_device *ref = h->dev[1];
                        int side = h->side;
                        h->side = 1;
                        float rm2[80], rv2[80];
                        memcpy(rm2, rm, sizeof rm), memcpy(rv2, rv, sizeof rv);
                        struct md_batchnorm_args f = {.n = n, .c = c, .hw = hw, .layout = lay ? MD_NHWC : MD_NCHW,
                                                      .dtype = t, .training = training, .eps = 1e-5f, .momentum = 0.1f,
                                                      .act = relu ? MD_ACT_RELU : MD_ACT_NONE};
                        f.x = hx_in(h, X, nx * es);
                        f.y = hx_nan(h, nx * es);
                        f.gamma = hx_in(h, gamma, (size_t)c * 4);
                        f.beta_p = hx_in(h, betap, (size_t)c * 4);
                        f.running_mean = hx_in(h, rm2, (size_t)c * 4);
                        f.running_var = hx_in(h, rv2, (size_t)c * 4);
                        f.save_mean = hx_nan(h, (size_t)c * 4);
                        f.save_invstd = hx_nan(h, (size_t)c * 4);
                        if (res) f.res = hx_in(h, R, nx * es);
                        cr_assert_eq(md_k_batchnorm_fwd(ref, &f), MD_OK, "%s", md_errmsg());
                        hx_get(h, f.y, Y, nx * es);
                        hx_get(h, f.save_mean, sm, (size_t)c * 4);
                        hx_get(h, f.save_invstd, si_, (size_t)c * 4);
                        hx_end(h);
                        h->side = side;
                    }
                    void *o[2] = {malloc(nx * es), malloc(nx * es)};
                    float st4[2][4][80];
                    md_status st[2];
                    for (h->side = 0; h->side < 2; h->side++) {
                        struct md_batchnorm_args b = {.n = n, .c = c, .hw = hw, .layout = lay ? MD_NHWC : MD_NCHW,
                                                      .dtype = t, .training = training, .eps = 1e-5f, .momentum = 0.1f,
                                                      .act = relu ? MD_ACT_RELU : MD_ACT_NONE, .beta = beta};
                        b.x = hx_in(h, X, nx * es);
                        b.gamma = hx_in(h, gamma, (size_t)c * 4);
                        b.beta_p = hx_in(h, betap, (size_t)c * 4);
                        b.running_mean = hx_in(h, rm, (size_t)c * 4);
                        b.running_var = hx_in(h, rv, (size_t)c * 4);
                        if (res) b.res = hx_in(h, R, nx * es);
                        float *s0, *s1, *s2, *s3;
                        void *out;
                        if (op == K_BN_FWD) {
                            out = b.y = hx_nan(h, nx * es);
                            b.save_mean = hx_nan(h, (size_t)c * 4);
                            b.save_invstd = hx_nan(h, (size_t)c * 4);
                            s0 = b.running_mean, s1 = b.running_var, s2 = b.save_mean, s3 = b.save_invstd;
                            st[h->side] = md_k_batchnorm_fwd(cur(h), &b);
                        } else {
                            b.y = hx_in(h, Y, nx * es);
                            b.save_mean = hx_in(h, sm, (size_t)c * 4);
                            b.save_invstd = hx_in(h, si_, (size_t)c * 4);
                            b.dy = hx_in(h, DY, nx * es);
                            out = b.dx = beta != 0.0f ? hx_in(h, DX0, nx * es) : hx_nan(h, nx * es);
                            b.dgamma = beta != 0.0f ? hx_in(h, dg0, (size_t)c * 4) : hx_nan(h, (size_t)c * 4);
                            b.dbeta = beta != 0.0f ? hx_in(h, db0, (size_t)c * 4) : hx_nan(h, (size_t)c * 4);
                            s0 = b.dgamma, s1 = b.dbeta, s2 = b.save_mean, s3 = b.save_invstd;
                            if (res) {
                                b.beta_res = beta;
                                b.dres = beta != 0.0f ? hx_in(h, DR0, nx * es) : hx_nan(h, nx * es);
                            }
                            st[h->side] = md_k_batchnorm_bwd(cur(h), &b);
                            if (res) hx_get(h, b.dres, dr[h->side], nx * es);
                        }
                        hx_get(h, out, o[h->side], nx * es);
                        hx_get(h, s0, st4[h->side][0], (size_t)c * 4);
                        hx_get(h, s1, st4[h->side][1], (size_t)c * 4);
                        hx_get(h, s2, st4[h->side][2], (size_t)c * 4);
                        hx_get(h, s3, st4[h->side][3], (size_t)c * 4);
                        hx_end(h);
                    }
                    char what[128];
                    snprintf(what, sizeof what, "%s n%d c%d hw%d %s training %d relu %d residual %d %s beta %g",
                             md_kernel_names[op], n, c, hw, lay ? "NHWC" : "NCHW", training, relu, res,
                             md_dtype_name(t), (double)beta);
                    if (statuses_ok(h, op, what, st[0], st[1])) {
                        struct tol tl = tol_of(op, t), t32 = tol_of(op, MD_F32);
                        if (t != MD_F32) t32 = tl; /* statistics of rounded inputs: same bound as the outputs */
                        int ok = cmp_typed(h, what, o[0], o[1], t, nx, tl);
                        /* fwd: running mean/var and saved stats (training); bwd: dgamma, dbeta */
                        int nstat = op == K_BN_FWD ? (training ? 4 : 2) : 2;
                        for (int s = 0; s < nstat; s++) ok &= cmp_typed(h, what, st4[0][s], st4[1][s], MD_F32, (size_t)c, t32);
                        if (res && op == K_BN_BWD) ok &= cmp_typed(h, what, dr[0], dr[1], t, nx, tl);
                        record(h, op, ok);
                    }
                    free(X), free(DY), free(DX0), free(Y), free(o[0]), free(o[1]);
                    free(R), free(DR0), free(dr[0]), free(dr[1]);
                }
}

/* ---- activations ---------------------------------------------------------------------------------- */

static void op_act(struct harness *h, int op)
{
    for (int act = 0; act < MD_ACT_COUNT; act++)
        for (int di = 0; di < 3; di++) {
            md_dtype t = dtypes[di];
            size_t n = 4099, es = md_dtype_size(t);
            float beta = op == K_ACT_BWD && act % 2 ? 1.0f : 0.0f;
            void *X = host_typed(t, n, 31 + (uint64_t)act, -6, 6), *DY = host_typed(t, n, 32, -1, 1),
                 *O0 = host_typed(t, n, 33, -1, 1);
            void *out[2] = {malloc(n * es), malloc(n * es)};
            md_status st[2];
            for (h->side = 0; h->side < 2; h->side++) {
                struct md_act_args a = {.act = act, .alpha = 0.1f, .n = n, .dtype = t, .beta = beta};
                a.x = hx_in(h, X, n * es);
                void *o = beta != 0.0f ? hx_in(h, O0, n * es) : hx_nan(h, n * es);
                if (op == K_ACT_FWD) a.y = o, st[h->side] = md_k_act_fwd(cur(h), &a);
                else a.dy = hx_in(h, DY, n * es), a.dx = o, st[h->side] = md_k_act_bwd(cur(h), &a);
                hx_get(h, o, out[h->side], n * es);
                hx_end(h);
            }
            char what[96];
            snprintf(what, sizeof what, "%s act %d %s beta %g", md_kernel_names[op], act, md_dtype_name(t), (double)beta);
            if (statuses_ok(h, op, what, st[0], st[1])) record(h, op, cmp_typed(h, what, out[0], out[1], t, n, tol_of(op, t)));
            free(X), free(DY), free(O0), free(out[0]), free(out[1]);
        }
}

/* ---- pooling ----------------------------------------------------------------------------------------- */

static void op_pool(struct harness *h, int op)
{
    static const int cases[][9] = {/* n c h w kh kw sh sw ph(=pw) */
                                   {2, 3, 8, 8, 2, 2, 2, 2, 0}, {1, 5, 7, 9, 3, 3, 2, 2, 1}, {3, 2, 11, 6, 3, 2, 1, 2, 1},
                                   {2, 4, 5, 5, 5, 5, 1, 1, 2}, {1, 3, 13, 13, 3, 3, 3, 3, 0},
                                   /* ReLU-like input (half zeros: ties, where max routes to the first
                                    * maximum), 70 channels (the CPU's NHWC channel chunks of 64) */
                                   {2, 70, 6, 7, 3, 3, 2, 2, 1},
                                   /* disjoint windows (stride = kernel: the CPU's write-once max
                                    * backward): the same ReLU-like input with a column no window
                                    * covers, and padding that clips the edge windows */
                                   {2, 70, 8, 9, 2, 2, 2, 2, 0}, {1, 3, 7, 7, 2, 2, 2, 2, 1}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int kind = 0; kind < 2; kind++)
            for (int cip = 0; cip < 2; cip++)
                for (int lay = 0; lay < 2; lay++)
                    for (int di = 0; di < 3; di++) {
                        if (kind == MD_POOL_MAX && cip) continue;
                        const int *k = cases[ci];
                        md_dtype t = dtypes[di];
                        size_t es = md_dtype_size(t);
                        struct md_pool2d_args a = {.kind = kind, .n = k[0], .c = k[1], .h = k[2], .w = k[3], .kh = k[4],
                                                   .kw = k[5], .stride_h = k[6], .stride_w = k[7], .pad_h = k[8],
                                                   .pad_w = k[8], .count_include_pad = cip,
                                                   .layout = lay ? MD_NHWC : MD_NCHW, .dtype = t};
                        a.p = md_conv_out(a.h, a.kh, a.stride_h, a.pad_h, 1);
                        a.q = md_conv_out(a.w, a.kw, a.stride_w, a.pad_w, 1);
                        a.beta = op == K_POOL_BWD && (ci + (size_t)lay) % 2 ? 1.0f : 0.0f;
                        size_t nx = (size_t)a.n * a.c * a.h * a.w, ny = (size_t)a.n * a.c * a.p * a.q;
                        size_t nout = op == K_POOL_FWD ? ny : nx;
                        void *X = host_typed(t, nx, 41 + ci, -2, 2), *DY = host_typed(t, ny, 42, -1, 1),
                             *O0 = host_typed(t, nout, 43, -1, 1);
                        if (ci == 5 || ci == 6) /* negatives to +0: in every type, the sign bit set means negative */
                            for (size_t i = 0; i < nx; i++) {
                                if (t == MD_F32 && ((float *)X)[i] < 0.0f) ((float *)X)[i] = 0.0f;
                                if (t != MD_F32 && (((uint16_t *)X)[i] & 0x8000u)) ((uint16_t *)X)[i] = 0;
                            }
                        void *out[2] = {malloc(nout * es), malloc(nout * es)};
                        md_status st[2];
                        for (h->side = 0; h->side < 2; h->side++) {
                            struct md_pool2d_args b = a;
                            void *o = a.beta != 0.0f ? hx_in(h, O0, nout * es) : hx_nan(h, nout * es);
                            b.x = hx_in(h, X, nx * es);
                            if (op == K_POOL_FWD) b.y_out = o, st[h->side] = md_k_pool2d_fwd(cur(h), &b);
                            else b.dy = hx_in(h, DY, ny * es), b.dx = o, st[h->side] = md_k_pool2d_bwd(cur(h), &b);
                            hx_get(h, o, out[h->side], nout * es);
                            hx_end(h);
                        }
                        char what[128];
                        snprintf(what, sizeof what, "%s case %zu %s cip %d %s %s beta %g", md_kernel_names[op], ci,
                                 kind ? "avg" : "max", cip, md_layout_name(a.layout), md_dtype_name(t), (double)a.beta);
                        if (statuses_ok(h, op, what, st[0], st[1]))
                            record(h, op, cmp_typed(h, what, out[0], out[1], t, nout, tol_of(op, t)));
                        free(X), free(DY), free(O0), free(out[0]), free(out[1]);
                    }
}

/* ---- global average pooling, bias ------------------------------------------------------------------------ */

static void op_gap(struct harness *h, int op)
{
    static const int shapes[][3] = {{3, 5, 7}, {2, 17, 49}, {1, 64, 1}};
    for (size_t si = 0; si < 3; si++)
        for (int lay = 0; lay < 2; lay++)
            for (int di = 0; di < 3; di++) {
                md_dtype t = dtypes[di];
                size_t es = md_dtype_size(t);
                struct md_gap_args a = {.n = shapes[si][0], .c = shapes[si][1], .hw = shapes[si][2],
                                        .layout = lay ? MD_NHWC : MD_NCHW, .dtype = t};
                a.beta = op == K_GAP_BWD && si % 2 ? 1.0f : 0.0f;
                size_t nx = (size_t)a.n * a.c * a.hw, ny = (size_t)a.n * a.c, nout = op == K_GAP_FWD ? ny : nx;
                void *X = host_typed(t, nx, 51, -1, 1), *DY = host_typed(t, ny, 52, -1, 1), *O0 = host_typed(t, nout, 53, -1, 1);
                void *out[2] = {malloc(nout * es), malloc(nout * es)};
                md_status st[2];
                for (h->side = 0; h->side < 2; h->side++) {
                    struct md_gap_args b = a;
                    void *o = a.beta != 0.0f ? hx_in(h, O0, nout * es) : hx_nan(h, nout * es);
                    if (op == K_GAP_FWD) b.x = hx_in(h, X, nx * es), b.y = o, st[h->side] = md_k_gap_fwd(cur(h), &b);
                    else b.dy = hx_in(h, DY, ny * es), b.dx = o, st[h->side] = md_k_gap_bwd(cur(h), &b);
                    hx_get(h, o, out[h->side], nout * es);
                    hx_end(h);
                }
                char what[96];
                snprintf(what, sizeof what, "%s case %zu %s %s", md_kernel_names[op], si, md_layout_name(a.layout), md_dtype_name(t));
                if (statuses_ok(h, op, what, st[0], st[1])) record(h, op, cmp_typed(h, what, out[0], out[1], t, nout, tol_of(op, t)));
                free(X), free(DY), free(O0), free(out[0]), free(out[1]);
            }
}

static void op_bias(struct harness *h, int op)
{
    static const int shapes[][3] = {{3, 5, 7}, {2, 33, 17}, {128, 10, 1}};
    for (size_t si = 0; si < 3; si++)
        for (int lay = 0; lay < 2; lay++)
            for (int di = 0; di < 3; di++) {
                md_dtype t = dtypes[di];
                size_t es = md_dtype_size(t);
                int n = shapes[si][0], c = shapes[si][1], hw = shapes[si][2];
                size_t ny = (size_t)n * c * hw;
                float beta = op == K_BIAS_GRAD && si % 2 ? 1.0f : 0.0f;
                void *Y = host_typed(t, ny, 61, -1, 1);
                float bias[64], db0[64];
                kc_fill(bias, (size_t)c, 62, -1, 1);
                kc_fill(db0, (size_t)c, 63, -1, 1);
                size_t nout = op == K_BIAS_ADD ? ny * es : (size_t)c * 4;
                void *out[2] = {malloc(nout), malloc(nout)};
                md_status st[2];
                for (h->side = 0; h->side < 2; h->side++) {
                    struct md_bias_args a = {.n = n, .c = c, .hw = hw, .layout = lay ? MD_NHWC : MD_NCHW, .dtype = t, .beta = beta};
                    void *o;
                    if (op == K_BIAS_ADD) {
                        o = a.y = hx_in(h, Y, ny * es);
                        a.bias = hx_in(h, bias, (size_t)c * 4);
                        st[h->side] = md_k_bias_add(cur(h), &a);
                    } else {
                        a.dy = hx_in(h, Y, ny * es);
                        o = a.dbias = beta != 0.0f ? hx_in(h, db0, (size_t)c * 4) : hx_nan(h, (size_t)c * 4);
                        st[h->side] = md_k_bias_grad(cur(h), &a);
                    }
                    hx_get(h, o, out[h->side], nout);
                    hx_end(h);
                }
                char what[96];
                snprintf(what, sizeof what, "%s case %zu %s %s", md_kernel_names[op], si, lay ? "NHWC" : "NCHW", md_dtype_name(t));
                if (statuses_ok(h, op, what, st[0], st[1])) {
                    if (op == K_BIAS_ADD)
                        record(h, op, cmp_typed(h, what, out[0], out[1], t, ny, tol_of(op, t)));
                    else /* dbias is fp32; its inputs were rounded alike on both sides */
                        record(h, op, cmp_typed(h, what, out[0], out[1], MD_F32, (size_t)c, tol_of(op, MD_F32)));
                }
                free(Y), free(out[0]), free(out[1]);
            }
}

/* ---- dropout -------------------------------------------------------------------------------------------------- */

static void op_dropout(struct harness *h, int op)
{
    static const float ps[] = {0.0f, 0.1f, 0.5f, 0.9f};
    for (int pi = 0; pi < 4; pi++)
        for (int di = 0; di < 3; di++) {
            md_dtype t = dtypes[di];
            size_t n = 10007, es = md_dtype_size(t);
            float beta = op == K_DROP_BWD && pi % 2 ? 1.0f : 0.0f;
            void *X = host_typed(t, n, 71, -1, 1), *O0 = host_typed(t, n, 72, -1, 1);
            uint8_t *mask_in = malloc(n);
            for (size_t i = 0; i < n; i++) mask_in[i] = !(md_rng_uniform(5, 77 + i) < ps[pi]);
            void *out[2] = {malloc(n * es), malloc(n * es)};
            uint8_t *mask[2] = {malloc(n), malloc(n)};
            md_status st[2];
            for (h->side = 0; h->side < 2; h->side++) {
                struct md_dropout_args a = {.n = n, .p = ps[pi], .seed = 5, .offset = 77, .dtype = t, .beta = beta};
                void *o = beta != 0.0f ? hx_in(h, O0, n * es) : hx_nan(h, n * es);
                if (op == K_DROP_FWD) {
                    a.x = hx_in(h, X, n * es), a.y = o, a.mask = hx_nan(h, n);
                    st[h->side] = md_k_dropout_fwd(cur(h), &a);
                    hx_get(h, a.mask, mask[h->side], n);
                } else {
                    /* with the mask on even p, recomputed from (seed, offset) on odd */
                    a.dy = hx_in(h, X, n * es), a.dx = o, a.mask = pi % 2 ? NULL : hx_in(h, mask_in, n);
                    st[h->side] = md_k_dropout_bwd(cur(h), &a);
                    memcpy(mask[h->side], mask_in, n);
                }
                hx_get(h, o, out[h->side], n * es);
                hx_end(h);
            }
            char what[96];
            snprintf(what, sizeof what, "%s p %g %s", md_kernel_names[op], (double)ps[pi], md_dtype_name(t));
            if (statuses_ok(h, op, what, st[0], st[1])) {
                int ok = memcmp(mask[0], mask[1], n) == 0;
                if (!ok) fprintf(stderr, "  %s: masks differ\n", what);
                record(h, op, ok && cmp_typed(h, what, out[0], out[1], t, n, tol_of(op, t)));
            }
            free(X), free(O0), free(mask_in), free(out[0]), free(out[1]), free(mask[0]), free(mask[1]);
        }
}

/* ---- ew, reduce --------------------------------------------------------------------------------------------------- */

static void op_ew(struct harness *h)
{
    for (int ew = 0; ew < MD_EW_COUNT; ew++)
        for (int variant = 0; variant < 2; variant++)
            for (int di = 0; di < 3; di++) {
                md_dtype t = dtypes[di];
                size_t n = variant ? 70001 : 37, es = md_dtype_size(t);
                void *A = host_typed(t, n, 81, -2, 2), *B = host_typed(t, n, 82, -2, 2);
                float scale = 0.75f;
                void *out[2] = {malloc(n * es), malloc(n * es)};
                md_status st[2];
                for (h->side = 0; h->side < 2; h->side++) {
                    struct md_ew_args a = {.op = ew, .n = n, .dtype = t, .alpha = 1.5f, .beta = variant ? -0.5f : 0.0f};
                    a.a = hx_in(h, A, n * es);
                    a.b = variant || ew == MD_EW_MUL ? hx_in(h, B, n * es) : hx_nan(h, n * es);
                    a.scale_dev = variant ? hx_in(h, &scale, 4) : NULL;
                    a.y = hx_nan(h, n * es);
                    st[h->side] = md_k_ew(cur(h), &a);
                    hx_get(h, a.y, out[h->side], n * es);
                    hx_end(h);
                }
                char what[96];
                snprintf(what, sizeof what, "ew op %d variant %d %s", ew, variant, md_dtype_name(t));
                if (statuses_ok(h, K_EW, what, st[0], st[1]))
                    record(h, K_EW, cmp_typed(h, what, out[0], out[1], t, n, tol_of(K_EW, t)));
                free(A), free(B), free(out[0]), free(out[1]);
            }
}

static void op_reduce(struct harness *h)
{
    static const size_t sizes[] = {1, 1000, 200003};
    for (int rop = 0; rop < 3; rop++)
        for (int si = 0; si < 3; si++)
            for (int di = 0; di < 3; di++) {
                md_dtype t = dtypes[di];
                size_t n = sizes[si], es = md_dtype_size(t);
                void *A = host_typed(t, n, 91, -1, 1.5f), *B = host_typed(t, n, 92, -1, 1);
                float out[2], init = 3.0f;
                md_status st[2];
                for (h->side = 0; h->side < 2; h->side++) {
                    struct md_reduce_args a = {.op = rop, .n = n, .dtype = t, .beta = si % 2 ? 1.0f : 0.0f};
                    a.a = hx_in(h, A, n * es);
                    a.b = rop == MD_RED_DOT ? hx_in(h, B, n * es) : NULL;
                    a.out = si % 2 ? hx_in(h, &init, 4) : hx_nan(h, 4);
                    st[h->side] = md_k_reduce(cur(h), &a);
                    hx_get(h, a.out, &out[h->side], 4);
                    hx_end(h);
                }
                char what[96];
                snprintf(what, sizeof what, "reduce op %d n %zu %s", rop, n, md_dtype_name(t));
                /* the sum of rounded inputs is exact-ish on both sides: fp32 bounds */
                if (statuses_ok(h, K_REDUCE, what, st[0], st[1]))
                    record(h, K_REDUCE, cmp_typed(h, what, &out[0], &out[1], MD_F32, 1, tol_of(K_REDUCE, MD_F32)));
                free(A), free(B);
            }
    /* a non-finite element makes the result non-finite */
    float bad[5] = {1, 2, INFINITY, 4, 5}, r = 0;
    md_status s0;
    h->side = 0;
    struct md_reduce_args a = {.op = MD_RED_SUMSQ, .n = 5, .dtype = MD_F32};
    a.a = hx_in(h, bad, sizeof bad);
    a.out = hx_nan(h, 4);
    s0 = md_k_reduce(cur(h), &a);
    hx_get(h, a.out, &r, 4);
    hx_end(h);
    if (s0 == MD_OK) {
        record(h, K_REDUCE, !isfinite(r));
        if (isfinite(r)) fprintf(stderr, "  reduce: inf input gave finite %g\n", (double)r);
    }
}

/* ---- channel slices ----------------------------------------------------------------------------------------------- */

static void op_chslice(struct harness *h)
{
    static const int cases[][7] = {/* n hw cc src_c src_off dst_c dst_off */
                                   {2, 9, 3, 5, 1, 7, 4}, {3, 1, 4, 4, 0, 9, 5}, {1, 25, 1, 3, 2, 2, 0}};
    for (int ci = 0; ci < 3; ci++)
        for (int lay = 0; lay < 2; lay++)
            for (int di = 0; di < 3; di++) {
                const int *k = cases[ci];
                md_dtype t = dtypes[di];
                size_t es = md_dtype_size(t), ns = (size_t)k[0] * k[3] * k[1], nd = (size_t)k[0] * k[5] * k[1];
                void *S = host_typed(t, ns, 101, -1, 1), *D0 = host_typed(t, nd, 102, -1, 1);
                void *out[2] = {malloc(nd * es), malloc(nd * es)};
                md_status st[2];
                for (h->side = 0; h->side < 2; h->side++) {
                    struct md_chslice_args a = {.n = k[0], .hw = k[1], .cc = k[2], .src_c = k[3], .src_off = k[4],
                                                .dst_c = k[5], .dst_off = k[6], .layout = lay ? MD_NHWC : MD_NCHW,
                                                .dtype = t, .beta = ci % 2 ? 1.0f : 0.0f};
                    a.src = hx_in(h, S, ns * es);
                    a.dst = hx_in(h, D0, nd * es); /* channels outside the slice must stay */
                    st[h->side] = md_k_chslice(cur(h), &a);
                    hx_get(h, a.dst, out[h->side], nd * es);
                    hx_end(h);
                }
                char what[96];
                snprintf(what, sizeof what, "chslice case %d %s %s", ci, lay ? "NHWC" : "NCHW", md_dtype_name(t));
                if (statuses_ok(h, K_CHSLICE, what, st[0], st[1]))
                    record(h, K_CHSLICE, cmp_typed(h, what, out[0], out[1], t, nd, tol_of(K_CHSLICE, t)));
                free(S), free(D0), free(out[0]), free(out[1]);
            }
}

/* ---- softmax cross-entropy ------------------------------------------------------------------------------------------ */

static void op_xent(struct harness *h)
{
    static const int shapes[][2] = {{1, 2}, {7, 10}, {128, 10}, {13, 1000}};
    for (int si = 0; si < 4; si++)
        for (int sm = 0; sm < 2; sm++)
            for (int di = 0; di < 3; di++) {
                md_dtype t = dtypes[di];
                int n = shapes[si][0], C = shapes[si][1];
                size_t es = md_dtype_size(t), nl = (size_t)n * C;
                void *L = host_typed(t, nl, 111 + (uint64_t)si, -4, 4);
                int32_t *lab = malloc(sizeof(int32_t) * (size_t)n);
                md_rng r;
                md_rng_init(&r, 112);
                for (int i = 0; i < n; i++) lab[i] = (int32_t)md_rng_below(&r, (uint32_t)C);
                if (n > 1 && t == MD_F32) { /* a tie: argmax must pick the lowest index */
                    md_store_f(L, t, (size_t)C + 0, 9.0f);
                    md_store_f(L, t, (size_t)C + 1, 9.0f);
                    lab[1] = 0;
                }
                void *out[2] = {malloc(nl * es), malloc(nl * es)};
                float loss[2], loss0 = 1.5f;
                int32_t corr[2], corr0 = 4;
                md_status st[2];
                for (h->side = 0; h->side < 2; h->side++) {
                    struct md_xent_args a = {.n = n, .classes = C, .smoothing = sm ? 0.1f : 0.0f, .dtype = t,
                                             .grad_scale = 1.0f / (float)n};
                    a.logits = hx_in(h, L, nl * es);
                    a.labels = hx_in(h, lab, sizeof(int32_t) * (size_t)n);
                    a.loss_sum = hx_in(h, &loss0, 4);
                    a.correct = hx_in(h, &corr0, 4);
                    a.dlogits = hx_nan(h, nl * es);
                    st[h->side] = md_k_xent(cur(h), &a);
                    hx_get(h, a.dlogits, out[h->side], nl * es);
                    hx_get(h, a.loss_sum, &loss[h->side], 4);
                    hx_get(h, a.correct, &corr[h->side], 4);
                    hx_end(h);
                }
                char what[96];
                snprintf(what, sizeof what, "xent n%d classes %d smoothing %d %s", n, C, sm, md_dtype_name(t));
                if (statuses_ok(h, K_XENT, what, st[0], st[1])) {
                    int ok = cmp_typed(h, what, out[0], out[1], t, nl, tol_of(K_XENT, t));
                    ok &= cmp_typed(h, what, &loss[0], &loss[1], MD_F32, 1, tol_of(K_XENT, MD_F32));
                    if (corr[0] != corr[1]) fprintf(stderr, "  %s: correct %d, ref %d\n", what, corr[0], corr[1]);
                    record(h, K_XENT, ok && corr[0] == corr[1]);
                }
                free(L), free(lab), free(out[0]), free(out[1]);
            }
}

/* ---- cast, permute ---------------------------------------------------------------------------------------------------- */

static void op_cast(struct harness *h)
{
    for (int si = 0; si < 3; si++)
        for (int di = 0; di < 3; di++) {
            md_dtype ts = dtypes[si], td = dtypes[di];
            size_t n = 5003, ess = md_dtype_size(ts), esd = md_dtype_size(td);
            void *S = host_typed(ts, n, 121, -70000, 70000); /* beyond fp16's range: inf on both sides */
            for (size_t i = 0; i < 100; i++) md_store_f(S, ts, i, (float)ldexp((double)i - 50.0, -(int)(i % 30)));
            void *out[2] = {malloc(n * esd), malloc(n * esd)};
            md_status st[2];
            for (h->side = 0; h->side < 2; h->side++) {
                struct md_cast_args a = {.n = n, .src_type = ts, .dst_type = td};
                a.src = hx_in(h, S, n * ess);
                a.dst = hx_nan(h, n * esd);
                st[h->side] = md_k_cast(cur(h), &a);
                hx_get(h, a.dst, out[h->side], n * esd);
                hx_end(h);
            }
            char what[64];
            snprintf(what, sizeof what, "cast %s -> %s", md_dtype_name(ts), md_dtype_name(td));
            if (statuses_ok(h, K_CAST, what, st[0], st[1])) {
                /* conversions are exact functions (round to nearest even): bitwise equal */
                int ok = memcmp(out[0], out[1], n * esd) == 0;
                if (!ok) {
                    for (size_t i = 0; i < n; i++)
                        if (memcmp((char *)out[0] + i * esd, (char *)out[1] + i * esd, esd)) {
                            fprintf(stderr, "  %s: first difference at %zu: %g vs %g\n", what, i,
                                    (double)md_load_f(out[0], td, i), (double)md_load_f(out[1], td, i));
                            break;
                        }
                }
                record(h, K_CAST, ok);
            }
            free(S), free(out[0]), free(out[1]);
        }
}

static void op_permute(struct harness *h)
{
    static const int shapes[][4] = {{2, 3, 5, 7}, {1, 64, 4, 4}, {3, 1, 9, 2}, {2, 33, 35, 1}, {2, 64, 7, 7}};
    for (int si = 0; si < 5; si++)
        for (int dir = 0; dir < 2; dir++)
            for (int di = 0; di < 3; di++) {
                md_dtype t = dtypes[di];
                size_t es = md_dtype_size(t), n = (size_t)shapes[si][0] * shapes[si][1] * shapes[si][2] * shapes[si][3];
                void *S = host_typed(t, n, 131, -1, 1);
                void *out[2] = {malloc(n * es), malloc(n * es)};
                md_status st[2];
                for (h->side = 0; h->side < 2; h->side++) {
                    struct md_permute_args a = {.n = shapes[si][0], .c = shapes[si][1], .h = shapes[si][2],
                                                .w = shapes[si][3], .to_nhwc = dir, .dtype = t};
                    a.src = hx_in(h, S, n * es);
                    a.dst = hx_nan(h, n * es);
                    st[h->side] = md_k_permute(cur(h), &a);
                    hx_get(h, a.dst, out[h->side], n * es);
                    hx_end(h);
                }
                char what[64];
                snprintf(what, sizeof what, "permute case %d to_nhwc %d %s", si, dir, md_dtype_name(t));
                if (statuses_ok(h, K_PERMUTE, what, st[0], st[1]))
                    record(h, K_PERMUTE, cmp_typed(h, what, out[0], out[1], t, n, (struct tol){0, 0}));
                free(S), free(out[0]), free(out[1]);
            }
}

/* ---- optimizer --------------------------------------------------------------------------------------------------------- */

static void op_optim(struct harness *h)
{
    /* kind, momentum, nesterov, wd, step, use grad_scale_dev, half */
    static const float cases[][7] = {{0, 0, 0, 0, 1, 0, 0},     {0, 0.9f, 0, 5e-4f, 1, 0, 0}, {0, 0.9f, 1, 5e-4f, 3, 1, 1},
                                     {0, 0.5f, 0, 0, 7, 0, 2},  {1, 0, 0, 0.01f, 1, 0, 0},    {1, 0, 0, 0.05f, 10, 1, 1},
                                     {1, 0, 0, 0, 1000, 0, 2}};
    for (int ci = 0; ci < 7; ci++) {
        const float *k = cases[ci];
        size_t n = 20011;
        md_dtype ht = k[6] == 1 ? MD_F16 : MD_BF16;
        float *P = malloc(n * 4), *G = malloc(n * 4), *M = malloc(n * 4), *V = malloc(n * 4), gsd = 0.5f;
        kc_fill(P, n, 141, -1, 1);
        kc_fill(G, n, 142, -1, 1);
        kc_fill(M, n, 143, -0.1f, 0.1f);
        kc_fill(V, n, 144, 0.0f, 0.01f);
        float *out[2][3];
        void *half[2] = {malloc(n * 2), malloc(n * 2)};
        md_status st[2];
        for (h->side = 0; h->side < 2; h->side++) {
            struct md_optim_args a = {.kind = (int)k[0], .n = n, .lr = 0.05f, .momentum = k[1], .weight_decay = k[3],
                                      .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .nesterov = (int)k[2],
                                      .step = (long long)k[4], .grad_scale = 0.25f, .half_dtype = ht};
            a.params = hx_in(h, P, n * 4);
            a.grads = hx_in(h, G, n * 4);
            a.m = hx_in(h, M, n * 4);
            a.v = hx_in(h, V, n * 4);
            a.grad_scale_dev = k[5] != 0.0f ? hx_in(h, &gsd, 4) : NULL;
            a.params_half = k[6] != 0.0f ? hx_nan(h, n * 2) : NULL;
            st[h->side] = md_k_optim(cur(h), &a);
            for (int j = 0; j < 3; j++) out[h->side][j] = malloc(n * 4);
            hx_get(h, a.params, out[h->side][0], n * 4);
            hx_get(h, a.m, out[h->side][1], n * 4);
            hx_get(h, a.v, out[h->side][2], n * 4);
            if (a.params_half) hx_get(h, a.params_half, half[h->side], n * 2);
            hx_end(h);
        }
        char what[96];
        snprintf(what, sizeof what, "optim case %d (%s step %lld)", ci, k[0] != 0.0f ? "adamw" : "sgd", (long long)k[4]);
        if (statuses_ok(h, K_OPTIM, what, st[0], st[1])) {
            struct tol tl = tol_of(K_OPTIM, MD_F32);
            int ok = cmp_typed(h, what, out[0][0], out[1][0], MD_F32, n, tl);
            ok &= cmp_typed(h, what, out[0][1], out[1][1], MD_F32, n, tl);
            ok &= cmp_typed(h, what, out[0][2], out[1][2], MD_F32, n, tl);
            if (k[6] != 0.0f) ok &= cmp_typed(h, what, half[0], half[1], ht, n, tol_of(K_OPTIM, ht));
            record(h, K_OPTIM, ok);
        }
        for (int s = 0; s < 2; s++)
            for (int j = 0; j < 3; j++) free(out[s][j]);
        free(P), free(G), free(M), free(V), free(half[0]), free(half[1]);
    }
}

/* ---- layer norm, softmax, attention ------------------------------------------------------------------------------- */

static void op_layernorm(struct harness *h, int op)
{
    /* rows d affine saved(bwd) */
    /* CUDA: even d up to 1024 on the warp-per-row kernels (5000 rows: more
     * rows than the backward's warps on an H100, so warps take several), the
     * rest on the block-per-row ones */
    static const int cases[][4] = {{1, 1, 1, 1},     {3, 7, 0, 0},     {17, 64, 1, 1}, {5, 768, 1, 0},
                                   {33, 200, 1, 1},  {40, 31, 0, 1},   {300, 384, 1, 1}, {70, 1024, 0, 0},
                                   {9, 1030, 1, 1},  {5000, 16, 1, 0}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int di = 0; di < 3; di++) {
            md_dtype t = dtypes[di];
            int rows = cases[ci][0], d = cases[ci][1], affine = cases[ci][2], saved = cases[ci][3];
            size_t n = (size_t)rows * d, es = md_dtype_size(t);
            float beta = (ci + (size_t)di) % 2 ? 1.0f : 0.0f;
            void *X = host_typed(t, n, 151 + ci, -2, 3), *DY = host_typed(t, n, 152, -1, 1), *O0 = host_typed(t, n, 153, -1, 1);
            float *gamma = malloc(sizeof(float) * (size_t)d), *betap = malloc(sizeof(float) * (size_t)d),
                  *g0 = malloc(sizeof(float) * (size_t)d), *mean = malloc(sizeof(float) * (size_t)rows),
                  *rstd = malloc(sizeof(float) * (size_t)rows);
            kc_fill(gamma, (size_t)d, 154, 0.5f, 1.5f);
            kc_fill(betap, (size_t)d, 155, -0.5f, 0.5f);
            kc_fill(g0, (size_t)d, 156, -1, 1);
            if (op == K_LN_BWD) { /* backward reads the forward's statistics (from ref) */
                h->side = 1;
                struct md_layernorm_args f = {.rows = rows, .d = d, .dtype = t, .eps = 1e-5f};
                f.x = hx_in(h, X, n * es);
                f.y = hx_nan(h, n * es);
                f.mean = hx_nan(h, (size_t)rows * 4);
                f.rstd = hx_nan(h, (size_t)rows * 4);
                cr_assert_eq(md_k_layernorm_fwd(cur(h), &f), MD_OK, "%s", md_errmsg());
                hx_get(h, f.mean, mean, (size_t)rows * 4);
                hx_get(h, f.rstd, rstd, (size_t)rows * 4);
                hx_end(h);
            }
            void *out[2] = {malloc(n * es), malloc(n * es)};
            float *st4[2][2];
            md_status st[2];
            for (h->side = 0; h->side < 2; h->side++) {
                struct md_layernorm_args a = {.rows = rows, .d = d, .dtype = t, .eps = 1e-5f, .beta = beta};
                a.x = hx_in(h, X, n * es);
                if (affine) a.gamma = hx_in(h, gamma, (size_t)d * 4), a.beta_p = hx_in(h, betap, (size_t)d * 4);
                void *o = beta != 0.0f ? hx_in(h, O0, n * es) : hx_nan(h, n * es);
                float *s0, *s1;
                if (op == K_LN_FWD) {
                    a.y = o;
                    s0 = a.mean = hx_nan(h, (size_t)rows * 4);
                    s1 = a.rstd = hx_nan(h, (size_t)rows * 4);
                    st[h->side] = md_k_layernorm_fwd(cur(h), &a);
                } else {
                    if (saved) a.mean = hx_in(h, mean, (size_t)rows * 4), a.rstd = hx_in(h, rstd, (size_t)rows * 4);
                    a.dy = hx_in(h, DY, n * es);
                    a.dx = o;
                    s0 = a.dgamma = beta != 0.0f ? hx_in(h, g0, (size_t)d * 4) : hx_nan(h, (size_t)d * 4);
                    s1 = a.dbeta = beta != 0.0f ? hx_in(h, g0, (size_t)d * 4) : hx_nan(h, (size_t)d * 4);
                    st[h->side] = md_k_layernorm_bwd(cur(h), &a);
                }
                size_t ns = op == K_LN_FWD ? (size_t)rows : (size_t)d;
                st4[h->side][0] = malloc(ns * 4), st4[h->side][1] = malloc(ns * 4);
                hx_get(h, o, out[h->side], n * es);
                hx_get(h, s0, st4[h->side][0], ns * 4);
                hx_get(h, s1, st4[h->side][1], ns * 4);
                hx_end(h);
            }
            char what[128];
            snprintf(what, sizeof what, "%s rows %d d %d affine %d saved %d %s beta %g", md_kernel_names[op], rows, d,
                     affine, saved, md_dtype_name(t), (double)beta);
            if (statuses_ok(h, op, what, st[0], st[1])) {
                struct tol tl = tol_of(op, t), t32 = t == MD_F32 ? tol_of(op, MD_F32) : tl;
                if (op == K_LN_BWD && t == MD_F32 && rows > 16) t32.atol *= 4; /* sums over rows */
                size_t ns = op == K_LN_FWD ? (size_t)rows : (size_t)d;
                int ok = cmp_typed(h, what, out[0], out[1], t, n, tl);
                ok &= cmp_typed(h, what, st4[0][0], st4[1][0], MD_F32, ns, t32);
                ok &= cmp_typed(h, what, st4[0][1], st4[1][1], MD_F32, ns, t32);
                record(h, op, ok);
            }
            for (int s2 = 0; s2 < 2; s2++) free(st4[s2][0]), free(st4[s2][1]), free(out[s2]);
            free(X), free(DY), free(O0), free(gamma), free(betap), free(g0), free(mean), free(rstd);
        }
}

static void op_softmax(struct harness *h, int op)
{
    /* rows n causal tq scale*100 */
    static const int cases[][5] = {{1, 1, 0, 0, 100}, {7, 13, 0, 0, 100}, {12, 100, 1, 4, 35},
                                   {5, 1000, 0, 0, 100}, {70, 70, 1, 70, 125}, {3, 4099, 0, 0, 50}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int di = 0; di < 3; di++) {
            md_dtype t = dtypes[di];
            int rows = cases[ci][0], n = cases[ci][1];
            size_t cnt = (size_t)rows * n, es = md_dtype_size(t);
            float beta = (ci + (size_t)di) % 2 ? 1.0f : 0.0f;
            struct md_softmax_args base = {.rows = rows, .n = n, .causal = cases[ci][2], .tq = cases[ci][3],
                                           .scale = (float)cases[ci][4] / 100.0f, .dtype = t, .beta = beta};
            void *X = host_typed(t, cnt, 161 + ci, -4, 4), *DY = host_typed(t, cnt, 162, -1, 1),
                 *O0 = host_typed(t, cnt, 163, -1, 1), *Y = malloc(cnt * es);
            if (op == K_SM_BWD) { /* backward reads the forward's y (from ref) */
                h->side = 1;
                struct md_softmax_args f = base;
                f.beta = 0.0f;
                f.x = hx_in(h, X, cnt * es);
                f.y = hx_nan(h, cnt * es);
                cr_assert_eq(md_k_softmax_fwd(cur(h), &f), MD_OK, "%s", md_errmsg());
                hx_get(h, f.y, Y, cnt * es);
                hx_end(h);
            }
            void *out[2] = {malloc(cnt * es), malloc(cnt * es)};
            md_status st[2];
            for (h->side = 0; h->side < 2; h->side++) {
                struct md_softmax_args a = base;
                void *o = beta != 0.0f ? hx_in(h, O0, cnt * es) : hx_nan(h, cnt * es);
                if (op == K_SM_FWD) {
                    a.x = hx_in(h, X, cnt * es), a.y = o;
                    st[h->side] = md_k_softmax_fwd(cur(h), &a);
                } else {
                    a.y = hx_in(h, Y, cnt * es), a.dy = hx_in(h, DY, cnt * es), a.dx = o;
                    st[h->side] = md_k_softmax_bwd(cur(h), &a);
                }
                hx_get(h, o, out[h->side], cnt * es);
                hx_end(h);
            }
            char what[128];
            snprintf(what, sizeof what, "%s rows %d n %d causal %d scale %g %s beta %g", md_kernel_names[op], rows, n,
                     base.causal, (double)base.scale, md_dtype_name(t), (double)beta);
            if (statuses_ok(h, op, what, st[0], st[1])) record(h, op, cmp_typed(h, what, out[0], out[1], t, cnt, tol_of(op, t)));
            free(X), free(DY), free(O0), free(Y), free(out[0]), free(out[1]);
        }
}

/* Attention layouts: 0 contiguous (B, H, T, D); 1 a fused QKV projection's
 * (B, T, 3, H, D) output (tq == tk; dq/dk/dv into one such buffer); 2 (B, T, H, D).
 * On CUDA the case's path (enum md_attn_path) picks the kernels: F (FLASH)
 * runs fp16/bf16 with 32 < d <= 128 on the tensor-core kernels (without
 * dropout and d <= 64 a multiple of 8: the register-resident ones; 64-row tiles:
 * lengths that are not multiples of 64, d padded to 64 or 128, d not a
 * multiple of 8 for the unvectorised loads) and the rest on the SIMT kernels;
 * S forces the SIMT kernels; G the cuBLAS path for short sequences (ViT
 * shapes: 6 heads of 64, 261 = 256 patches + cls + 4 registers; d 100 is
 * misaligned for it and falls back); A leaves the choice to the backend
 * (at these lengths: the register-resident kernels for d 64 without dropout,
 * else GEMM). Other backends ignore the path; the G and A cases
 * run on CUDA only. */
struct attn_case { int b, h, tq, tk, d, causal, dropout, layout, path; };

#define F MD_ATTN_FLASH
#define S MD_ATTN_SIMT
#define G MD_ATTN_GEMM
#define A MD_ATTN_AUTO
static const struct attn_case attn_cases[] = {
    {1, 1, 1, 1, 8, 0, 0, 0, F},       {2, 3, 17, 17, 16, 1, 0, 0, F},   {1, 2, 70, 70, 32, 0, 0, 1, F},
    {2, 2, 33, 65, 64, 0, 1, 0, F},    {1, 2, 100, 100, 64, 1, 1, 2, F}, {1, 1, 130, 130, 8, 1, 0, 0, F},
    {2, 1, 40, 23, 16, 1, 0, 2, F},    {1, 2, 9, 31, 128, 0, 0, 0, F},   {1, 1, 67, 67, 32, 1, 1, 1, F},
    {2, 2, 100, 77, 64, 0, 0, 0, F},   {1, 2, 130, 130, 128, 1, 1, 0, F}, {2, 1, 70, 150, 128, 0, 1, 2, F},
    {1, 1, 129, 129, 64, 1, 0, 1, F},  {1, 2, 150, 90, 64, 1, 1, 0, F},  {1, 1, 33, 47, 100, 1, 1, 0, F},
    {1, 1, 65, 70, 80, 0, 0, 2, F},    {2, 2, 33, 65, 64, 0, 1, 0, S},   {1, 2, 9, 31, 128, 1, 0, 0, S},
    {2, 6, 5, 5, 64, 0, 0, 1, G},      {2, 6, 5, 5, 64, 1, 0, 1, G},     {2, 6, 64, 64, 64, 0, 0, 1, G},
    {1, 6, 64, 64, 64, 1, 0, 0, G},    {2, 6, 261, 261, 64, 0, 0, 1, G}, {1, 6, 261, 261, 64, 1, 0, 1, G},
    {1, 6, 261, 261, 64, 0, 0, 1, A},  {2, 2, 33, 65, 64, 0, 1, 0, G},   {1, 2, 150, 90, 64, 1, 1, 2, G},
    {1, 1, 1, 1, 8, 0, 0, 0, G},       {2, 3, 17, 17, 16, 1, 1, 2, G},   {1, 2, 9, 31, 128, 1, 0, 0, G},
    {1, 1, 33, 47, 100, 1, 0, 0, G},   {2, 6, 261, 261, 64, 0, 0, 1, F}, {1, 3, 200, 200, 48, 1, 0, 2, F},
    {1, 2, 150, 90, 64, 1, 0, 0, F},   {1, 2, 90, 150, 40, 1, 0, 0, F},  {2, 3, 261, 261, 64, 1, 0, 2, A},
};
#undef F
#undef S
#undef G
#undef A

/* Offsets (elements) of q, k, v, o in their buffers and the strides, by layout. */
static void attn_layout(const struct attn_case *k, struct md_attn_args *a, size_t off[4], size_t n[4])
{
    int H = k->h, D = k->d;
    memset(a->sq, 0, sizeof a->sq), memset(a->sk, 0, sizeof a->sk);
    memset(a->sv, 0, sizeof a->sv), memset(a->so, 0, sizeof a->so);
    off[0] = off[1] = off[2] = off[3] = 0;
    n[0] = n[3] = (size_t)k->b * H * k->tq * D;
    n[1] = n[2] = (size_t)k->b * H * k->tk * D;
    if (k->layout == 1) {
        long long s[3] = {(long long)k->tq * 3 * H * D, D, 3LL * H * D};
        memcpy(a->sq, s, sizeof s), memcpy(a->sk, s, sizeof s), memcpy(a->sv, s, sizeof s);
        off[1] = (size_t)H * D, off[2] = 2 * (size_t)H * D;
        n[0] = n[1] = n[2] = 3 * n[0];
    } else if (k->layout == 2) {
        long long sq[3] = {(long long)k->tq * H * D, D, (long long)H * D}, sk[3] = {(long long)k->tk * H * D, D, (long long)H * D};
        memcpy(a->sq, sq, sizeof sq), memcpy(a->so, sq, sizeof sq), memcpy(a->sk, sk, sizeof sk), memcpy(a->sv, sk, sizeof sk);
    }
}

static const char *const attn_path_names[] = {" auto", " gemm", "", " simt"};

static void op_attn(struct harness *h, int op)
{
    for (size_t ci = 0; ci < sizeof attn_cases / sizeof attn_cases[0]; ci++)
        for (int di = 0; di < 3; di++) {
            const struct attn_case *kc = &attn_cases[ci];
            if ((kc->path == MD_ATTN_GEMM || kc->path == MD_ATTN_AUTO) && !h->cuda) continue;
            md_dtype t = dtypes[di];
            size_t es = md_dtype_size(t), off[4], n[4];
            struct md_attn_args base = {.batch = kc->b, .heads = kc->h, .tq = kc->tq, .tk = kc->tk, .d = kc->d,
                                        .causal = kc->causal, .dropout_p = kc->dropout ? 0.2f : 0.0f, .seed = 3,
                                        .offset = 1000 + ci, .dtype = t, .path = kc->path};
            attn_layout(kc, &base, off, n);
            float beta = op == K_ATTN_BWD && (ci + (size_t)di) % 2 ? 1.0f : 0.0f;
            size_t nl = (size_t)kc->b * kc->h * kc->tq;
            /* q, k, v (one buffer in layout 1), d_o */
            void *Q = host_typed(t, n[0], 171 + ci, -1.5f, 1.5f), *K = host_typed(t, n[1], 172 + ci, -1.5f, 1.5f),
                 *V = host_typed(t, n[2], 173 + ci, -1.5f, 1.5f), *DO = host_typed(t, n[3], 174, -1, 1);
            void *G0 = host_typed(t, n[0] > n[1] ? n[0] : n[1], 175, -1, 1);
            void *O = malloc(n[3] * es);
            float *L = malloc(nl * 4 + 4);
            if (op == K_ATTN_BWD) { /* the forward's o and lse, from ref */
                h->side = 1;
                struct md_attn_args f = base;
                void *qkv = hx_in(h, Q, n[0] * es);
                f.q = (char *)qkv + off[0] * es;
                f.k = kc->layout == 1 ? (char *)qkv + off[1] * es : hx_in(h, K, n[1] * es);
                f.v = kc->layout == 1 ? (char *)qkv + off[2] * es : hx_in(h, V, n[2] * es);
                f.o = hx_nan(h, n[3] * es);
                f.lse = hx_nan(h, nl * 4);
                cr_assert_eq(md_k_attn_fwd(cur(h), &f), MD_OK, "%s", md_errmsg());
                hx_get(h, f.o, O, n[3] * es);
                hx_get(h, f.lse, L, nl * 4);
                hx_end(h);
            }
            void *out[2][3];
            size_t nout[3] = {op == K_ATTN_FWD ? n[3] : n[0], op == K_ATTN_FWD ? nl : n[1], n[2]};
            md_status st[2];
            for (h->side = 0; h->side < 2; h->side++) {
                struct md_attn_args a = base;
                a.beta = beta;
                void *qkv = hx_in(h, Q, n[0] * es);
                a.q = (char *)qkv + off[0] * es;
                a.k = kc->layout == 1 ? (char *)qkv + off[1] * es : hx_in(h, K, n[1] * es);
                a.v = kc->layout == 1 ? (char *)qkv + off[2] * es : hx_in(h, V, n[2] * es);
                void *o[3];
                if (op == K_ATTN_FWD) {
                    o[0] = a.o = hx_nan(h, n[3] * es);
                    o[1] = a.lse = hx_nan(h, nl * 4);
                    st[h->side] = md_k_attn_fwd(cur(h), &a);
                } else {
                    a.o = hx_in(h, O, n[3] * es);
                    a.lse = hx_in(h, L, nl * 4);
                    a.d_o = hx_in(h, DO, n[3] * es);
                    if (kc->layout == 1) { /* one gradient buffer, (B, T, 3, H, D) */
                        void *g = beta != 0.0f ? hx_in(h, G0, n[0] * es) : hx_nan(h, n[0] * es);
                        a.dq = g, a.dk = (char *)g + off[1] * es, a.dv = (char *)g + off[2] * es;
                        o[0] = g;
                    } else {
                        o[0] = a.dq = beta != 0.0f ? hx_in(h, G0, n[0] * es) : hx_nan(h, n[0] * es);
                        o[1] = a.dk = beta != 0.0f ? hx_in(h, G0, n[1] * es) : hx_nan(h, n[1] * es);
                        o[2] = a.dv = beta != 0.0f ? hx_in(h, G0, n[2] * es) : hx_nan(h, n[2] * es);
                    }
                    st[h->side] = md_k_attn_bwd(cur(h), &a);
                }
                int nouts = op == K_ATTN_FWD ? 2 : kc->layout == 1 ? 1 : 3;
                for (int j = 0; j < 3; j++) {
                    size_t bytes = op == K_ATTN_FWD && j == 1 ? nl * 4 : nout[j] * es;
                    out[h->side][j] = malloc(bytes + 4);
                    if (j < nouts) hx_get(h, o[j], out[h->side][j], bytes);
                }
                hx_end(h);
            }
            char what[176];
            snprintf(what, sizeof what, "%s b%d h%d tq%d tk%d d%d causal %d dropout %d layout %d %s beta %g%s",
                     md_kernel_names[op], kc->b, kc->h, kc->tq, kc->tk, kc->d, kc->causal, kc->dropout, kc->layout,
                     md_dtype_name(t), (double)beta, attn_path_names[kc->path]);
            if (statuses_ok(h, op, what, st[0], st[1])) {
                struct tol tl = tol_of(op, t);
                int ok;
                if (op == K_ATTN_FWD) {
                    /* o, and lse (fp32 from rounded inputs: the half bound) */
                    ok = cmp_typed(h, what, out[0][0], out[1][0], t, n[3], tl);
                    ok &= cmp_typed(h, what, out[0][1], out[1][1], MD_F32, nl, t == MD_F32 ? tol_of(op, MD_F32) : tl);
                } else if (kc->layout == 1) {
                    ok = cmp_typed(h, what, out[0][0], out[1][0], t, n[0], tl);
                } else {
                    ok = cmp_typed(h, what, out[0][0], out[1][0], t, n[0], tl);
                    ok &= cmp_typed(h, what, out[0][1], out[1][1], t, n[1], tl);
                    ok &= cmp_typed(h, what, out[0][2], out[1][2], t, n[2], tl);
                }
                record(h, op, ok);
            }
            for (int s2 = 0; s2 < 2; s2++)
                for (int j = 0; j < 3; j++) free(out[s2][j]);
            free(Q), free(K), free(V), free(DO), free(G0), free(O), free(L);
        }
}

/* ---- regression losses ------------------------------------------------------------------------------------------------ */

/* Every kind and dtype on (n, horizon, channels) shapes; `last` read with a
 * stride wider than the channels; targets that equal the last value, and
 * errors on both sides of the Huber delta. */
static void op_regress(struct harness *h)
{
    static const int shapes[][3] = {{1, 1, 1}, {7, 5, 3}, {16, 96, 7}, {3, 24, 1}};
    for (int si = 0; si < 4; si++)
        for (int kind = MD_REGRESS_MSE; kind <= MD_REGRESS_FINANCIAL; kind++)
            for (int di = 0; di < 3; di++)
                for (int with_last = 0; with_last < 2; with_last++) {
                    if (kind == MD_REGRESS_FINANCIAL && !with_last) continue;
                    md_dtype t = dtypes[di];
                    int n = shapes[si][0], H = shapes[si][1], C = shapes[si][2];
                    size_t es = md_dtype_size(t), ne = (size_t)n * H * C, ld = (size_t)C + 2;
                    void *P = host_typed(t, ne, 301 + (uint64_t)si, -2, 2);
                    float *Y = malloc(ne * 4), *X = malloc((size_t)n * ld * 4);
                    kc_fill(Y, ne, 302 + (uint64_t)si, -2, 2);
                    kc_fill(X, (size_t)n * ld, 303 + (uint64_t)si, -1, 1);
                    for (size_t i = 0; i < ne; i += 5) /* no change: a direction of 0 */
                        Y[i] = X[(i / ((size_t)H * C)) * ld + i % (size_t)C];
                    void *out[2] = {malloc(ne * es), malloc(ne * es)};
                    float loss[2], met[2][3], loss0 = 0.75f, met0[3] = {1.0f, 2.0f, 3.0f};
                    md_status st[2];
                    for (h->side = 0; h->side < 2; h->side++) {
                        struct md_regress_args a = {.n = n, .horizon = H, .channels = C, .kind = (md_regress_kind)kind,
                                                    .delta = 0.5f, .lambda = 1.5f, .dtype = t,
                                                    .grad_scale = 1.0f / (float)(ne ? ne : 1), .last_ld = (long long)ld};
                        a.pred = hx_in(h, P, ne * es);
                        a.target = hx_in(h, Y, ne * 4);
                        a.last = with_last ? hx_in(h, X, (size_t)n * ld * 4) : NULL;
                        a.loss_sum = hx_in(h, &loss0, 4);
                        a.metrics = hx_in(h, met0, 12);
                        a.dpred = hx_nan(h, ne * es);
                        st[h->side] = md_k_regress(cur(h), &a);
                        hx_get(h, a.dpred, out[h->side], ne * es);
                        hx_get(h, a.loss_sum, &loss[h->side], 4);
                        hx_get(h, a.metrics, met[h->side], 12);
                        hx_end(h);
                    }
                    char what[96];
                    snprintf(what, sizeof what, "regress (%d, %d, %d) kind %d last %d %s", n, H, C, kind, with_last,
                             md_dtype_name(t));
                    if (statuses_ok(h, K_REGRESS, what, st[0], st[1])) {
                        int ok = cmp_typed(h, what, out[0], out[1], t, ne, tol_of(K_REGRESS, t));
                        ok &= cmp_typed(h, what, &loss[0], &loss[1], MD_F32, 1, tol_of(K_REGRESS, MD_F32));
                        ok &= cmp_typed(h, what, met[0], met[1], MD_F32, 2, tol_of(K_REGRESS, MD_F32));
                        if (met[0][2] != met[1][2]) /* hits are exact counts (3 without last) */
                            fprintf(stderr, "  %s: hits %g, ref %g\n", what, (double)met[0][2], (double)met[1][2]);
                        record(h, K_REGRESS, ok && met[0][2] == met[1][2]);
                    }
                    free(P), free(Y), free(X), free(out[0]), free(out[1]);
                }
}

/* ---- tiles, FiLM ------------------------------------------------------------------------------------------------------ */

/* Shrinking and enlarging tiles, uneven edges (7 rows in 3 tiles: 2, 2, 3),
 * tiles already size x size (a copy), one-pixel tiles, and ld > rows*cols
 * (a second stream's items interleaved: they stay untouched). */
static void op_tiles(struct harness *h, int op)
{
    static const int cases[][8] = {/* n c h w rows cols size ld */
                                   {1, 1, 1, 1, 1, 1, 1, 1},     {2, 3, 12, 14, 2, 2, 5, 8},  {1, 2, 7, 9, 3, 2, 8, 6},
                                   {3, 1, 10, 10, 2, 2, 5, 4},   {1, 4, 17, 23, 4, 5, 16, 20}, {2, 2, 64, 48, 2, 3, 11, 6},
                                   {1, 1, 5, 3, 5, 3, 7, 15},    {1, 3, 30, 31, 1, 1, 97, 1}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int di = 0; di < 3; di++) {
            const int *c = cases[ci];
            md_dtype t = dtypes[di];
            int n = c[0], ch = c[1], hh = c[2], ww = c[3], rows = c[4], cols = c[5], S = c[6], ld = c[7];
            size_t es = md_dtype_size(t), nx = (size_t)n * ch * hh * ww, plane = (size_t)ch * S * S,
                   ny = (size_t)n * ld * plane, no = op == K_TILES_FWD ? ny : nx;
            float beta = (ci + (size_t)di) % 2 ? 1.0f : 0.0f;
            void *X = host_typed(t, nx, 171 + ci, -2, 2), *DY = host_typed(t, ny, 172 + ci, -1, 1),
                 *O0 = host_typed(t, no, 173 + ci, -1, 1);
            void *out[2] = {malloc(no * es), malloc(no * es)};
            md_status st[2];
            for (h->side = 0; h->side < 2; h->side++) {
                struct md_tiles_args a = {.n = n, .c = ch, .h = hh, .w = ww, .rows = rows, .cols = cols, .size = S,
                                          .ld = ld, .dtype = t, .beta = beta};
                void *o = beta != 0.0f ? hx_in(h, O0, no * es) : hx_nan(h, no * es);
                if (op == K_TILES_FWD) {
                    a.x = hx_in(h, X, nx * es);
                    a.y = o;
                    st[h->side] = md_k_tiles_fwd(cur(h), &a);
                } else {
                    a.dy = hx_in(h, DY, ny * es);
                    a.dx = o;
                    st[h->side] = md_k_tiles_bwd(cur(h), &a);
                }
                hx_get(h, o, out[h->side], no * es);
                hx_end(h);
            }
            char what[160];
            snprintf(what, sizeof what, "%s n%d c%d %dx%d grid %dx%d size %d ld %d %s beta %g", md_kernel_names[op], n,
                     ch, hh, ww, rows, cols, S, ld, md_dtype_name(t), (double)beta);
            if (statuses_ok(h, op, what, st[0], st[1])) {
                int ok;
                if (op == K_TILES_FWD) { /* the written items only (the rest is another stream's) */
                    size_t w = (size_t)rows * cols * plane, cnt = (size_t)n * w;
                    void *g = malloc(cnt * es), *r = malloc(cnt * es);
                    for (int b = 0; b < n; b++) {
                        memcpy((char *)g + (size_t)b * w * es, (char *)out[0] + (size_t)b * ld * plane * es, w * es);
                        memcpy((char *)r + (size_t)b * w * es, (char *)out[1] + (size_t)b * ld * plane * es, w * es);
                    }
                    ok = cmp_typed(h, what, g, r, t, cnt, tol_of(op, t));
                    free(g), free(r);
                } else {
                    ok = cmp_typed(h, what, out[0], out[1], t, nx, tol_of(op, t));
                }
                record(h, op, ok);
            }
            free(X), free(DY), free(O0), free(out[0]), free(out[1]);
        }
}

/* Pooled features (t 1) and token sequences; backward with dx only, dcond
 * only, and both. */
static void op_film(struct harness *h, int op)
{
    static const int cases[][5] = {/* n t d dx dcond */
                                   {1, 1, 1, 1, 1}, {3, 1, 6, 1, 1}, {2, 17, 33, 1, 0}, {4, 50, 70, 1, 1},
                                   {2, 257, 40, 0, 1}, {1, 9, 384, 1, 1}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int di = 0; di < 3; di++) {
            md_dtype t = dtypes[di];
            int n = cases[ci][0], tt = cases[ci][1], d = cases[ci][2], wdx = cases[ci][3], wdc = cases[ci][4];
            if (op == K_FILM_FWD && !(wdx && wdc)) continue;
            size_t es = md_dtype_size(t), nx = (size_t)n * tt * d, nc = (size_t)n * 2 * d;
            float beta = (ci + (size_t)di) % 2 ? 1.0f : 0.0f, beta_c = (ci + (size_t)di) % 3 ? 0.0f : 1.0f;
            void *X = host_typed(t, nx, 181 + ci, -2, 2), *C = host_typed(t, nc, 182 + ci, -1, 1),
                 *DY = host_typed(t, nx, 183 + ci, -1, 1), *O0 = host_typed(t, nx, 184 + ci, -1, 1),
                 *C0 = host_typed(t, nc, 185 + ci, -1, 1);
            void *out[2] = {malloc(nx * es), malloc(nx * es)}, *oc[2] = {malloc(nc * es), malloc(nc * es)};
            md_status st[2];
            for (h->side = 0; h->side < 2; h->side++) {
                struct md_film_args a = {.n = n, .t = tt, .d = d, .dtype = t, .beta = beta, .beta_cond = beta_c};
                a.x = hx_in(h, X, nx * es);
                a.cond = hx_in(h, C, nc * es);
                if (op == K_FILM_FWD) {
                    a.y = hx_nan(h, nx * es);
                    st[h->side] = md_k_film_fwd(cur(h), &a);
                    hx_get(h, a.y, out[h->side], nx * es);
                } else {
                    a.dy = hx_in(h, DY, nx * es);
                    if (wdx) a.dx = beta != 0.0f ? hx_in(h, O0, nx * es) : hx_nan(h, nx * es);
                    if (wdc) a.dcond = beta_c != 0.0f ? hx_in(h, C0, nc * es) : hx_nan(h, nc * es);
                    st[h->side] = md_k_film_bwd(cur(h), &a);
                    if (wdx) hx_get(h, a.dx, out[h->side], nx * es);
                    if (wdc) hx_get(h, a.dcond, oc[h->side], nc * es);
                }
                hx_end(h);
            }
            char what[160];
            snprintf(what, sizeof what, "%s n%d t%d d%d dx %d dcond %d %s beta %g/%g", md_kernel_names[op], n, tt, d,
                     wdx, wdc, md_dtype_name(t), (double)beta, (double)beta_c);
            if (statuses_ok(h, op, what, st[0], st[1])) {
                int ok = 1;
                if (op == K_FILM_FWD || wdx) ok &= cmp_typed(h, what, out[0], out[1], t, nx, tol_of(op, t));
                if (op == K_FILM_BWD && wdc) {
                    struct tol tl = tol_of(op, t);
                    if (t == MD_F32 && tt > 16) tl.atol *= 4; /* sums over the tokens */
                    ok &= cmp_typed(h, what, oc[0], oc[1], t, nc, tl);
                }
                record(h, op, ok);
            }
            free(X), free(C), free(DY), free(O0), free(C0);
            for (int s2 = 0; s2 < 2; s2++) free(out[s2]), free(oc[s2]);
        }
}

/* Per-feature scale over (rows, d): odd sizes, a width the vector path
 * takes (d a multiple of 8), ViT-S's 384; backward with dx only, dg only,
 * and both; beta 0 and 1 for the output and for dg. */
static void op_chscale(struct harness *h, int op)
{
    static const int cases[][4] = {/* rows d dx dg */
                                   {1, 1, 1, 1},   {37, 45, 1, 1}, {37, 45, 1, 0}, {37, 45, 0, 1},
                                   {6, 16, 1, 1},  {130, 384, 1, 1}, {513, 24, 0, 1}};
    for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++)
        for (int di = 0; di < 3; di++) {
            md_dtype t = dtypes[di];
            int rows = cases[ci][0], d = cases[ci][1], wdx = cases[ci][2], wdg = cases[ci][3];
            if (op == K_CHSCALE_FWD && !(wdx && wdg)) continue;
            size_t es = md_dtype_size(t), nx = (size_t)rows * d;
            float beta = (ci + (size_t)di) % 2 ? 1.0f : 0.0f, beta_g = (ci + (size_t)di) % 3 ? 0.0f : 1.0f;
            void *X = host_typed(t, nx, 191 + ci, -2, 2), *G = host_typed(MD_F32, (size_t)d, 192 + ci, -1, 1),
                 *DY = host_typed(t, nx, 193 + ci, -1, 1), *O0 = host_typed(t, nx, 194 + ci, -1, 1),
                 *G0 = host_typed(MD_F32, (size_t)d, 195 + ci, -1, 1);
            void *out[2] = {malloc(nx * es), malloc(nx * es)}, *og[2] = {malloc((size_t)d * 4), malloc((size_t)d * 4)};
            md_status st[2];
            for (h->side = 0; h->side < 2; h->side++) {
                struct md_chscale_args a = {.rows = rows, .d = d, .dtype = t, .beta = beta, .beta_g = beta_g};
                a.x = hx_in(h, X, nx * es);
                a.g = hx_in(h, G, (size_t)d * 4);
                if (op == K_CHSCALE_FWD) {
                    a.y = beta != 0.0f ? hx_in(h, O0, nx * es) : hx_nan(h, nx * es);
                    st[h->side] = md_k_chscale_fwd(cur(h), &a);
                    hx_get(h, a.y, out[h->side], nx * es);
                } else {
                    a.dy = hx_in(h, DY, nx * es);
                    if (wdx) a.dx = beta != 0.0f ? hx_in(h, O0, nx * es) : hx_nan(h, nx * es);
                    if (wdg) a.dg = beta_g != 0.0f ? hx_in(h, G0, (size_t)d * 4) : hx_nan(h, (size_t)d * 4);
                    st[h->side] = md_k_chscale_bwd(cur(h), &a);
                    if (wdx) hx_get(h, a.dx, out[h->side], nx * es);
                    if (wdg) hx_get(h, a.dg, og[h->side], (size_t)d * 4);
                }
                hx_end(h);
            }
            char what[160];
            snprintf(what, sizeof what, "%s rows%d d%d dx %d dg %d %s beta %g/%g", md_kernel_names[op], rows, d, wdx,
                     wdg, md_dtype_name(t), (double)beta, (double)beta_g);
            if (statuses_ok(h, op, what, st[0], st[1])) {
                int ok = 1;
                if (op == K_CHSCALE_FWD || wdx) ok &= cmp_typed(h, what, out[0], out[1], t, nx, tol_of(op, t));
                if (op == K_CHSCALE_BWD && wdg) /* fp32 sums over the rows (of the same rounded inputs) */
                    ok &= cmp_typed(h, what, og[0], og[1], MD_F32, (size_t)d,
                                    (struct tol){2e-5 * (rows > 16 ? rows / 16.0 : 1.0), 1e-4});
                record(h, op, ok);
            }
            free(X), free(G), free(DY), free(O0), free(G0);
            for (int s2 = 0; s2 < 2; s2++) free(out[s2]), free(og[s2]);
        }
}

/* ---- driver ------------------------------------------------------------------------------------------------------------ */

static void run_op(struct harness *h, int op)
{
    if (!md_dev_supports(h->dev[0], op)) {
        h->op_skipped[op] = 1;
        return;
    }
    switch (op) {
    case K_GEMM: op_gemm(h); break;
    case K_CONV_FWD: case K_CONV_DATA: case K_CONV_FILTER: op_conv(h, op); break;
    case K_BN_FWD: case K_BN_BWD: op_bn(h, op); break;
    case K_ACT_FWD: case K_ACT_BWD: op_act(h, op); break;
    case K_POOL_FWD: case K_POOL_BWD: op_pool(h, op); break;
    case K_GAP_FWD: case K_GAP_BWD: op_gap(h, op); break;
    case K_BIAS_ADD: case K_BIAS_GRAD: op_bias(h, op); break;
    case K_DROP_FWD: case K_DROP_BWD: op_dropout(h, op); break;
    case K_EW: op_ew(h); break;
    case K_REDUCE: op_reduce(h); break;
    case K_CHSLICE: op_chslice(h); break;
    case K_XENT: op_xent(h); break;
    case K_CAST: op_cast(h); break;
    case K_PERMUTE: op_permute(h); break;
    case K_OPTIM: op_optim(h); break;
    case K_LN_FWD: case K_LN_BWD: op_layernorm(h, op); break;
    case K_SM_FWD: case K_SM_BWD: op_softmax(h, op); break;
    case K_ATTN_FWD: case K_ATTN_BWD: op_attn(h, op); break;
    case K_REGRESS: op_regress(h); break;
    case K_TILES_FWD: case K_TILES_BWD: op_tiles(h, op); break;
    case K_FILM_FWD: case K_FILM_BWD: op_film(h, op); break;
    case K_CHSCALE_FWD: case K_CHSCALE_BWD: op_chscale(h, op); break;
    default: break;
    }
}

static int open_pair_with(struct harness *h, const char *name, const struct md_device_opts *opts);

static int open_pair(struct harness *h, const char *name)
{
    /* 3 CPU threads exercise uneven chunking; other backends ignore it */
    struct md_device_opts o = {.threads = 3};
    return open_pair_with(h, name, &o);
}

static int open_pair_with(struct harness *h, const char *name, const struct md_device_opts *opts)
{
    memset(h, 0, sizeof *h);
    const md_backend *b = md_backend_find(name);
    if (!b) {
        fprintf(stderr, "backend-ops %s: skipped: not registered\n", name);
        return 0;
    }
    const struct md_probe *p = md_backend_probe(b);
    if (!p->available) {
        fprintf(stderr, "backend-ops %s: skipped: %s\n", name, p->reason);
        return 0;
    }
    cr_assert_eq(md_device_open(b, 0, opts, &h->dev[0]), MD_OK, "%s: %s", name, md_errmsg());
    h->dev[1] = kc_open_ref();
    h->cuda = strcmp(name, "cuda") == 0;
    return 1;
}

static void close_pair(struct harness *h)
{
    md_device_close(h->dev[0]);
    md_device_close(h->dev[1]);
}

/* Runs every op; prints a line per op and a summary; returns failing ops. */
static int run_backend(const char *name)
{
    struct harness h;
    if (!open_pair(&h, name)) return 0;
    int passed = 0, skipped = 0, failed = 0;
    for (int op = 0; op < MD_KERNEL_COUNT; op++) {
        run_op(&h, op);
        const char *verdict;
        if (h.op_skipped[op]) verdict = "skipped (not supported)", skipped++;
        else if (h.failed[op]) verdict = "FAILED", failed++;
        else if (h.run[op] == 0) verdict = "skipped (no case supported)", skipped++;
        else verdict = "passed", passed++;
        fprintf(stderr, "  %-6s %-18s %3d cases, %d failed, %d skipped: %s\n", name, md_kernel_names[op], h.run[op],
                h.failed[op], h.skipped[op], verdict);
    }
    fprintf(stderr, "backend-ops %s: %d ops passed, %d skipped, %d failed (of %d)\n", name, passed, skipped, failed,
            MD_KERNEL_COUNT);
    close_pair(&h);
    return failed;
}

Test(backend_ops, cpu, .timeout = 120)
{
    cr_assert_eq(run_backend("cpu"), 0, "some cpu ops failed (see stderr)");
}

/* The CPU's convolution ops `first`..`last` with a direct-kernel mode
 * (md_cpu_direct_set; -1: the default) and a filter scratch budget (0: the
 * default), both restored after; returns the failures. */
static int cpu_conv_failures(int direct, size_t prep_bytes, int first, int last)
{
    struct harness h;
    cr_assert(open_pair(&h, "cpu"));
    md_cpu_direct_set(direct);
    md_cpu_direct_set_prep_bytes(prep_bytes);
    for (int op = first; op <= last; op++) run_op(&h, op);
    md_cpu_direct_set(-1);
    md_cpu_direct_set_prep_bytes(0);
    int failed = 0;
    for (int op = first; op <= last; op++) failed += h.failed[op];
    close_pair(&h);
    return failed;
}

/* The CPU's im2col/GEMM convolution paths, which the direct kernels replace
 * where the CPU has AVX-512 or AVX2 (and which other CPUs always take). */
Test(backend_ops, cpu_gemm_convolutions, .timeout = 120)
{
    cr_assert_eq(cpu_conv_failures(0, 0, K_CONV_FWD, K_CONV_FILTER), 0, "im2col/GEMM convolutions failed (see stderr)");
}

/* Random one-group convolutions (sizes 1-20, 1-150 channels, kernels 1-5,
 * stride and dilation 1-3, padding 0-4, both layouts, beta 0 and 1): the CPU
 * (its direct kernels where they apply) against the reference, on a fixed
 * seed. Host memory on both sides, so CPU only. */
static unsigned long long rs_state = 0x2545F4914F6CDD1Dull;
static int rs_int(int a, int b)
{
    rs_state ^= rs_state << 13, rs_state ^= rs_state >> 7, rs_state ^= rs_state << 17;
    return a + (int)(rs_state % (unsigned long long)(b - a + 1));
}

Test(backend_ops, cpu_random_convolutions, .timeout = 120)
{
    struct harness h;
    cr_assert(open_pair(&h, "cpu"));
    int bad = 0;
    for (int it = 0; it < 60; it++) {
        struct md_conv2d_args a = {.n = rs_int(1, 9), .c = rs_int(1, 150), .k = rs_int(1, 150), .r = rs_int(1, 5),
                                   .s = rs_int(1, 5), .h = rs_int(1, 20), .w = rs_int(1, 20),
                                   .stride_h = rs_int(1, 3), .stride_w = rs_int(1, 3), .pad_h = rs_int(0, 4),
                                   .pad_w = rs_int(0, 4), .dil_h = rs_int(1, 3), .dil_w = rs_int(1, 3), .groups = 1,
                                   .layout = rs_int(0, 1) ? MD_NHWC : MD_NCHW, .dtype = MD_F32,
                                   .beta = (float)rs_int(0, 1)};
        a.p = md_conv_out(a.h, a.r, a.stride_h, a.pad_h, a.dil_h);
        a.q = md_conv_out(a.w, a.s, a.stride_w, a.pad_w, a.dil_w);
        if (a.p <= 0 || a.q <= 0) { it--; continue; }
        size_t nx = (size_t)a.n * a.c * a.h * a.w, nw = (size_t)a.k * a.c * a.r * a.s,
               ny = (size_t)a.n * a.k * a.p * a.q;
        float *X = host_typed(MD_F32, nx, 100 + (uint64_t)it, -1, 1), *W = host_typed(MD_F32, nw, 200 + (uint64_t)it, -1, 1),
              *DY = host_typed(MD_F32, ny, 300 + (uint64_t)it, -1, 1);
        for (int op = K_CONV_FWD; op <= K_CONV_FILTER; op++) {
            size_t nout = op == K_CONV_FWD ? ny : op == K_CONV_DATA ? nx : nw;
            float *O0 = host_typed(MD_F32, nout, 400 + (uint64_t)it, -1, 1), *out[2];
            md_status st[2];
            for (int side = 0; side < 2; side++) {
                struct md_conv2d_args b = a;
                out[side] = malloc(nout * 4);
                memcpy(out[side], O0, nout * 4);
                b.x = X, b.wt = W, b.dy = DY;
                if (op == K_CONV_FWD) b.y = out[side], st[side] = md_k_conv2d_fwd(h.dev[side], &b);
                if (op == K_CONV_DATA) b.dx = out[side], st[side] = md_k_conv2d_bwd_data(h.dev[side], &b);
                if (op == K_CONV_FILTER) b.dwt = out[side], st[side] = md_k_conv2d_bwd_filter(h.dev[side], &b);
            }
            struct tol tl = tol_of(op, MD_F32);
            double len = op == K_CONV_FILTER ? (double)a.n * a.p * a.q : (double)(op == K_CONV_FWD ? a.c : a.k) * a.r * a.s;
            if (len > 1024) tl.atol *= sqrt(len / 1024);
            char what[200];
            snprintf(what, sizeof what, "random %s %d (n%d c%d %dx%d k%d %dx%d s%d,%d p%d,%d d%d,%d) %s beta %g",
                     md_kernel_names[op], it, a.n, a.c, a.h, a.w, a.k, a.r, a.s, a.stride_h, a.stride_w, a.pad_h,
                     a.pad_w, a.dil_h, a.dil_w, md_layout_name(a.layout), (double)a.beta);
            if (statuses_ok(&h, op, what, st[0], st[1]) && !cmp_typed(&h, what, out[0], out[1], MD_F32, nout, tl))
                bad++;
            free(O0), free(out[0]), free(out[1]);
        }
        free(X), free(W), free(DY);
    }
    bad += h.failed[K_CONV_FWD] + h.failed[K_CONV_DATA] + h.failed[K_CONV_FILTER];
    close_pair(&h);
    cr_assert_eq(bad, 0, "%d random convolutions differ from the reference or failed (see stderr)", bad);
}

/* The direct kernels' AVX2 build (what CPUs without AVX-512 run), forced on
 * this machine: the convolution table again (GEMM paths where the CPU has
 * no AVX2 either). */
Test(backend_ops, cpu_avx2_convolutions, .timeout = 120)
{
    cr_assert_eq(cpu_conv_failures(2, 0, K_CONV_FWD, K_CONV_FILTER), 0, "AVX2 direct convolutions failed (see stderr)");
}

/* The direct backward-filter with its scratch budget so small that every
 * slot takes one image per wave (the sums carry across waves). */
Test(backend_ops, cpu_filter_in_waves, .timeout = 120)
{
    cr_assert_eq(cpu_conv_failures(-1, 1, K_CONV_FILTER, K_CONV_FILTER), 0, "backward-filter in waves failed (see stderr)");
}

Test(backend_ops, cuda, .timeout = 300)
{
    cr_assert_eq(run_backend("cuda"), 0, "some cuda ops failed (see stderr)");
}

/* Autotune (--compile-mode max-autotune): CUDA's half-precision
 * convolutions through execution plans chosen by timing the candidates, fp32
 * through cudnnFind's measured algorithms; the same results as the reference. */
Test(backend_ops, cuda_autotuned_convolutions, .timeout = 300)
{
    struct harness h;
    struct md_device_opts o = {.autotune = 1};
    if (!open_pair_with(&h, "cuda", &o)) return;
    h.autotune = 1;
    int failed = 0;
    for (int op = K_CONV_FWD; op <= K_CONV_FILTER; op++) {
        run_op(&h, op);
        failed += h.failed[op];
        cr_expect_gt(h.run[op], 0, "no %s case ran", md_kernel_names[op]);
    }
    close_pair(&h);
    cr_assert_eq(failed, 0, "autotuned convolutions differ from the reference (see stderr)");
}

Test(backend_ops, metal, .timeout = 300)
{
    cr_assert_eq(run_backend("metal"), 0, "some metal ops failed (see stderr)");
}

/* The comparison must be able to fail: a 1% error on one element of the
 * backend's output, and a NaN, are both caught. */
Test(backend_ops, comparator_catches_a_perturbed_output)
{
    struct harness h;
    cr_assert(open_pair(&h, "cpu"));
    h.corrupt = 1;
    op_gemm(&h);
    cr_assert(h.failed[K_GEMM] > 0, "a perturbed GEMM output passed the comparison");
    h.corrupt = 0;
    float got[3] = {1, NAN, 3}, ref[3] = {1, 2, 3};
    cr_assert(!th_allclose("nan (expected failure)", got, ref, 3, 1e-3, 1e-3));
    close_pair(&h);
}
