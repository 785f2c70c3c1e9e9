/* test_metal_sim.c - the Metal kernels (metal/ *.metal compiled as C++ against
 * metal/sim/metal_sim.h) run through the same launch plans as the real
 * backend (metal/metal_plan.c) and compared with the reference kernels on the
 * same inputs: every op, fp32/fp16/bf16, NCHW/NHWC, edge tiles, beta 0 and 1.
 * Also the grid sizing of metal/metal_grid.c. Small shapes: the simulation
 * runs one fibre per GPU thread. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/kernels.h"
#include "backend/ref/ref_kernels.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "helpers.h"
#include "../metal/md_metal_args.h"
#include "../metal/metal_grid.h"
#include "../metal/metal_plan.h"
#include "../metal/sim/metal_sim_run.h"

static const md_dtype dtypes[3] = {MD_F32, MD_F16, MD_BF16};

/* ---- buffers ------------------------------------------------------------------- */

static void *rnd(md_dtype t, size_t n, float lo, float hi, uint64_t seed)
{
    void *p = calloc(n ? n : 1, md_dtype_size(t) ? md_dtype_size(t) : 4);
    for (size_t i = 0; i < n; i++) md_store_f(p, t, i, lo + (hi - lo) * md_rng_uniform(seed, i));
    return p;
}

static float *rndf(size_t n, float lo, float hi, uint64_t seed) { return rnd(MD_F32, n, lo, hi, seed); }

static void *dup(const void *p, size_t bytes)
{
    void *q = malloc(bytes ? bytes : 1);
    memcpy(q, p, bytes);
    return q;
}

static double tol_a(md_dtype t) { return t == MD_F32 ? 1e-5 : t == MD_F16 ? 4e-3 : 3e-2; }
static double tol_r(md_dtype t) { return t == MD_F32 ? 1e-4 : t == MD_F16 ? 4e-3 : 2e-2; }

/* Compares n elements of type t; prints under `what` on failure. */
static int same(const char *what, const void *got, const void *ref, md_dtype t, size_t n, double scale)
{
    float *g = malloc((n ? n : 1) * sizeof *g), *r = malloc((n ? n : 1) * sizeof *r);
    for (size_t i = 0; i < n; i++) {
        g[i] = md_load_f(got, t, i);
        r[i] = md_load_f(ref, t, i);
    }
    int ok = th_allclose(what, g, r, n, tol_a(t) * scale, tol_r(t) * scale);
    free(g);
    free(r);
    return ok;
}

static float scratch[MD_METAL_SCRATCH_FLOATS];

/* Matrix-kernel variant under test: "" (scalar tiles) or "_sg" (simdgroup
 * matrices), appended to gemm/conv kernel names as the backend does. */
static const char *mm_sfx = "";

static void pick_variant(struct md_metal_plan *p)
{
    for (int i = 0; i < p->n; i++)
        if (mm_sfx[0] && (!strncmp(p->d[i].name, "md_gemm_", 8) || !strncmp(p->d[i].name, "md_conv_", 8)))
            strncat(p->d[i].name, mm_sfx, sizeof p->d[i].name - strlen(p->d[i].name) - 1);
}

/* Plans and runs on the simulated GPU. */
#define SIM(op, args)                                                                         \
    do {                                                                                      \
        struct md_metal_plan plan_;                                                           \
        cr_assert_eq(md_metal_plan_##op(&(args), &plan_), MD_OK, "%s", md_errmsg());          \
        pick_variant(&plan_);                                                                 \
        for (int d_ = 0; d_ < plan_.n; d_++)                                                   \
            cr_assert(md_metal_sim_has(plan_.d[d_].name), "kernel %s missing", plan_.d[d_].name); \
        cr_assert_eq(md_metal_sim_run(&plan_, scratch), MD_OK, "%s", md_errmsg());            \
    } while (0)
#define REF(op, args) cr_assert_eq(md_ref_kernels.op(NULL, &(args)), MD_OK, "%s", md_errmsg())

/* ---- grid sizing ------------------------------------------------------------------- */

Test(metal_grid, sizes)
{
    unsigned g[3], t[3];
    cr_assert_eq(md_metal_ceil_div(0, 4), 0);
    cr_assert_eq(md_metal_ceil_div(9, 4), 3);
    cr_assert_eq(md_metal_ceil_div(8, 4), 2);
    md_metal_grid_1d(1000, 256, 100, g, t);
    cr_assert(g[0] == 4 && g[1] == 1 && g[2] == 1 && t[0] == 256 && t[1] == 1 && t[2] == 1);
    md_metal_grid_1d(0, 256, 100, g, t);
    cr_assert_eq(g[0], 1);
    md_metal_grid_1d(1ull << 40, 256, 100, g, t);
    cr_assert_eq(g[0], 100);
    md_metal_grid_tiles(65, 128, 3, g, t);
    cr_assert(g[0] == 2 && g[1] == 2 && g[2] == 3, "%u %u %u", g[0], g[1], g[2]);
    cr_assert(t[0] * t[1] == MD_MTL_MM_TX * MD_MTL_MM_TY && t[2] == 1);
    md_metal_grid_rows(7, 256, g, t);
    cr_assert(g[0] == 7 && t[0] == 256);
    /* every thread of a tile grid owns a (BM/TY) x (BN/TX) block */
    cr_assert_eq(MD_MTL_MM_BM % MD_MTL_MM_TY, 0);
    cr_assert_eq(MD_MTL_MM_BN % MD_MTL_MM_TX, 0);
}

Test(metal_grid, plans_reject_bad_calls)
{
    struct md_metal_plan p;
    struct md_gemm_args g = {.m = 2, .n = 2, .k = 2, .batch = 1, .dtype = MD_I32};
    cr_assert_eq(md_metal_plan_gemm(&g, &p), MD_ERR_UNSUPPORTED);
    cr_assert(strstr(md_errmsg(), "int32"), "%s", md_errmsg());
    struct md_conv2d_args c = {.n = 1, .c = 3, .h = 4, .w = 4, .k = 4, .r = 3, .s = 3, .p = 2, .q = 2,
                               .stride_h = 1, .stride_w = 1, .dil_h = 1, .dil_w = 1, .groups = 2};
    cr_assert_eq(md_metal_plan_conv2d_fwd(&c, &p), MD_ERR_INTERNAL);
    struct md_optim_args o = {.n = 4, .step = 0};
    cr_assert_eq(md_metal_plan_optim(&o, &p), MD_ERR_INTERNAL);
}

Test(metal_sim, every_kernel_is_registered)
{
    /* 3 dtypes x (2 x 4 mm + 8 norm + 8 eltwise + 3 layernorm + 5 softmax/attention + 1 regress + 5 tiles/film
     * + 2 per-feature scale) + 2 permutes + 9 casts + 3 plain */
    cr_assert_eq(md_metal_sim_kernel_count(), 3 * 40 + 2 + 9 + 3);
    cr_assert(md_metal_sim_has("md_tiles_bwd_bf16"));
    cr_assert(md_metal_sim_has("md_film_bwd_cond_f16"));
    cr_assert(md_metal_sim_has("md_chscale_dg_bf16"));
    cr_assert(md_metal_sim_has("md_regress_bf16"));
    cr_assert(md_metal_sim_has("md_attn_bwd_kv_bf16"));
    cr_assert(md_metal_sim_has("md_ln_bwd_params_f16"));
    cr_assert(md_metal_sim_has("md_gemm_bf16"));
    cr_assert(md_metal_sim_has("md_conv_bwd_filter_f16_sg"));
    cr_assert(!md_metal_sim_has("md_gemm_i32"));
}

/* The comparator used below must be able to fail. */
Test(metal_sim, comparison_can_fail)
{
    float a[3] = {1, 2, 3}, b[3] = {1, 2, 3.01f};
    cr_assert(!same("deliberate", a, b, MD_F32, 3, 1.0));
}

/* ---- gemm -------------------------------------------------------------------------- */

Test(metal_sim, gemm)
{
    static const struct { int m, n, k, ta, tb, batch; float alpha, beta; } cases[] = {
        {37, 70, 19, 0, 0, 1, 1.0f, 0.0f}, {5, 3, 80, 1, 0, 2, 1.5f, 1.0f},
        {65, 9, 17, 0, 1, 1, 1.0f, 0.5f},  {16, 66, 33, 1, 1, 2, -0.5f, 0.0f},
    };
    for (int eng = 0; eng < 2; eng++)
    for (int di = 0; di < 3; di++)
        for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
            mm_sfx = eng ? "_sg" : "";
            md_dtype t = dtypes[di];
            int m = cases[ci].m, n = cases[ci].n, k = cases[ci].k, bt = cases[ci].batch;
            int lda = (cases[ci].ta ? m : k) + 3, ldb = (cases[ci].tb ? k : n) + 1, ldc = n + 2;
            long long sa = (long long)lda * (cases[ci].ta ? k : m), sb = (long long)ldb * (cases[ci].tb ? n : k),
                      sc = (long long)ldc * m;
            void *A = rnd(t, (size_t)(sa * bt), -1, 1, 1), *B = rnd(t, (size_t)(sb * bt), -1, 1, 2);
            void *C1 = rnd(t, (size_t)(sc * bt), -1, 1, 3);
            void *C2 = dup(C1, (size_t)(sc * bt) * md_dtype_size(t));
            struct md_gemm_args g = {.trans_a = cases[ci].ta, .trans_b = cases[ci].tb, .m = m, .n = n, .k = k,
                                     .alpha = cases[ci].alpha, .beta = cases[ci].beta, .a = A, .lda = lda,
                                     .stride_a = sa, .b = B, .ldb = ldb, .stride_b = sb, .c = C1, .ldc = ldc,
                                     .stride_c = sc, .batch = bt, .dtype = t};
            REF(gemm, g);
            g.c = C2;
            SIM(gemm, g);
            char what[64];
            snprintf(what, sizeof what, "gemm%s case %zu %s", mm_sfx, ci, md_dtype_name(t));
            cr_expect(same(what, C2, C1, t, (size_t)(sc * bt), 2.0));
            free(A), free(B), free(C1), free(C2);
        }
}

/* ---- convolutions ---------------------------------------------------------------------- */

Test(metal_sim, conv2d)
{
    static const struct { int n, c, h, w, k, r, s, sh, sw, ph, pw, dh, dw, g; } cases[] = {
        {2, 4, 7, 6, 6, 3, 3, 1, 1, 1, 1, 1, 1, 1},
        {2, 6, 9, 8, 4, 3, 2, 2, 1, 1, 0, 2, 1, 2},
        {1, 8, 5, 5, 70, 1, 1, 2, 2, 0, 0, 1, 1, 1},
        {2, 4, 6, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 4},
    };
    for (int eng = 0; eng < 2; eng++)
    for (int di = 0; di < 3; di++)
        for (int lay = 0; lay < 2; lay++)
            for (size_t ci = 0; ci < sizeof cases / sizeof cases[0]; ci++) {
                mm_sfx = eng ? "_sg" : "";
                md_dtype t = dtypes[di];
                struct md_conv2d_args a = {
                    .n = cases[ci].n, .c = cases[ci].c, .h = cases[ci].h, .w = cases[ci].w, .k = cases[ci].k,
                    .r = cases[ci].r, .s = cases[ci].s, .stride_h = cases[ci].sh, .stride_w = cases[ci].sw,
                    .pad_h = cases[ci].ph, .pad_w = cases[ci].pw, .dil_h = cases[ci].dh, .dil_w = cases[ci].dw,
                    .groups = cases[ci].g, .layout = lay ? MD_NHWC : MD_NCHW, .dtype = t,
                    .beta = (float)(ci % 2),
                };
                a.p = md_conv_out(a.h, a.r, a.stride_h, a.pad_h, a.dil_h);
                a.q = md_conv_out(a.w, a.s, a.stride_w, a.pad_w, a.dil_w);
                size_t nx = (size_t)a.n * a.c * a.h * a.w, nw = (size_t)a.k * (a.c / a.groups) * a.r * a.s,
                       ny = (size_t)a.n * a.k * a.p * a.q, es = md_dtype_size(t);
                void *x = rnd(t, nx, -1, 1, 10), *w = rnd(t, nw, -1, 1, 11), *dy = rnd(t, ny, -1, 1, 12);
                void *y1 = rnd(t, ny, -1, 1, 13), *y2 = dup(y1, ny * es);
                void *dx1 = rnd(t, nx, -1, 1, 14), *dx2 = dup(dx1, nx * es);
                void *dw1 = rnd(t, nw, -1, 1, 15), *dw2 = dup(dw1, nw * es);
                char what[96];
                a.x = x, a.wt = w, a.dy = dy;
                a.y = y1, a.dx = dx1, a.dwt = dw1;
                REF(conv2d_fwd, a);
                REF(conv2d_bwd_data, a);
                REF(conv2d_bwd_filter, a);
                a.y = y2, a.dx = dx2, a.dwt = dw2;
                SIM(conv2d_fwd, a);
                SIM(conv2d_bwd_data, a);
                SIM(conv2d_bwd_filter, a);
                snprintf(what, sizeof what, "conv%s fwd case %zu %s %s", mm_sfx, ci, md_layout_name(a.layout), md_dtype_name(t));
                cr_expect(same(what, y2, y1, t, ny, 2.0));
                snprintf(what, sizeof what, "conv%s bwd_data case %zu %s %s", mm_sfx, ci, md_layout_name(a.layout), md_dtype_name(t));
                cr_expect(same(what, dx2, dx1, t, nx, 2.0));
                snprintf(what, sizeof what, "conv%s bwd_filter case %zu %s %s", mm_sfx, ci, md_layout_name(a.layout), md_dtype_name(t));
                cr_expect(same(what, dw2, dw1, t, nw, 4.0));
                free(x), free(w), free(dy), free(y1), free(y2), free(dx1), free(dx2), free(dw1), free(dw2);
            }
}

/* ---- batch norm ---------------------------------------------------------------------------- */

Test(metal_sim, batchnorm)
{
    const int n = 3, c = 5, hw = 37;
    const size_t ne = (size_t)n * c * hw;
    for (int di = 0; di < 3; di++)
        for (int lay = 0; lay < 2; lay++)
            for (int mode = 0; mode < 4; mode++) {
                /* mode 0: train, 1: train + relu + beta 1, 2: inference + relu, 3: train, no affine/saves */
                md_dtype t = dtypes[di];
                size_t es = md_dtype_size(t);
                void *x = rnd(t, ne, -2, 3, 20), *dy = rnd(t, ne, -1, 1, 21);
                void *y1 = rnd(t, ne, -1, 1, 22), *y2 = dup(y1, ne * es);
                void *dx1 = rnd(t, ne, -1, 1, 23), *dx2 = dup(dx1, ne * es);
                float *gam = rndf(c, 0.5f, 1.5f, 24), *bet = rndf(c, -0.5f, 0.5f, 25);
                float *rm1 = rndf(c, -0.2f, 0.2f, 26), *rv1 = rndf(c, 0.5f, 1.5f, 27);
                float *rm2 = dup(rm1, c * 4), *rv2 = dup(rv1, c * 4);
                float *sm1 = rndf(c, 0, 1, 28), *si1 = rndf(c, 0, 1, 29), *sm2 = dup(sm1, c * 4), *si2 = dup(si1, c * 4);
                float *dg1 = rndf(c, -1, 1, 30), *db1 = rndf(c, -1, 1, 31), *dg2 = dup(dg1, c * 4), *db2 = dup(db1, c * 4);
                struct md_batchnorm_args a = {
                    .n = n, .c = c, .hw = hw, .layout = lay ? MD_NHWC : MD_NCHW, .dtype = t,
                    .training = mode != 2, .eps = 1e-5f, .momentum = 0.1f,
                    .act = (mode == 1 || mode == 2) ? MD_ACT_RELU : MD_ACT_NONE, .x = x, .dy = dy,
                    .gamma = mode == 3 ? NULL : gam, .beta_p = mode == 3 ? NULL : bet,
                    .beta = mode == 1 ? 1.0f : 0.0f,
                };
                a.y = y1, a.running_mean = rm1, a.running_var = rv1, a.save_mean = mode == 3 ? NULL : sm1;
                a.save_invstd = mode == 3 ? NULL : si1, a.dx = dx1, a.dgamma = dg1, a.dbeta = db1;
                REF(batchnorm_fwd, a);
                REF(batchnorm_bwd, a);
                a.y = y2, a.running_mean = rm2, a.running_var = rv2, a.save_mean = mode == 3 ? NULL : sm2;
                a.save_invstd = mode == 3 ? NULL : si2, a.dx = dx2, a.dgamma = dg2, a.dbeta = db2;
                /* the simulated backward must read the simulated forward's saves */
                SIM(batchnorm_fwd, a);
                SIM(batchnorm_bwd, a);
                char what[96];
                snprintf(what, sizeof what, "bn mode %d %s %s", mode, md_layout_name(a.layout), md_dtype_name(t));
                cr_expect(same(what, y2, y1, t, ne, 2.0));
                cr_expect(same(what, dx2, dx1, t, ne, 4.0));
                cr_expect(same(what, rm2, rm1, MD_F32, c, 10.0));
                cr_expect(same(what, rv2, rv1, MD_F32, c, 10.0));
                if (mode != 3) {
                    cr_expect(same(what, sm2, sm1, MD_F32, c, 10.0));
                    cr_expect(same(what, si2, si1, MD_F32, c, 10.0));
                }
                /* sums over 111 elements of rounded values */
                cr_expect(same(what, dg2, dg1, MD_F32, c, t == MD_F32 ? 10.0 : 1000.0));
                cr_expect(same(what, db2, db1, MD_F32, c, t == MD_F32 ? 10.0 : 1000.0));
                free(x), free(dy), free(y1), free(y2), free(dx1), free(dx2), free(gam), free(bet);
                free(rm1), free(rv1), free(rm2), free(rv2), free(sm1), free(si1), free(sm2), free(si2);
                free(dg1), free(db1), free(dg2), free(db2);
            }
}

/* ---- activations, dropout, element-wise ----------------------------------------------------------- */

Test(metal_sim, activations)
{
    const size_t n = 1000;
    for (int di = 0; di < 3; di++)
        for (int act = 0; act < MD_ACT_COUNT; act++) {
            md_dtype t = dtypes[di];
            size_t es = md_dtype_size(t);
            void *x = rnd(t, n, -6, 6, 40), *dy = rnd(t, n, -1, 1, 41);
            void *y1 = rnd(t, n, -1, 1, 42), *y2 = dup(y1, n * es), *dx1 = rnd(t, n, -1, 1, 43), *dx2 = dup(dx1, n * es);
            struct md_act_args a = {.act = act, .alpha = 0.1f, .n = n, .dtype = t, .x = x, .dy = dy,
                                    .beta = act % 2 ? 1.0f : 0.0f};
            a.y = y1, a.dx = dx1;
            REF(act_fwd, a);
            REF(act_bwd, a);
            a.y = y2, a.dx = dx2;
            SIM(act_fwd, a);
            SIM(act_bwd, a);
            char what[64];
            snprintf(what, sizeof what, "act %d fwd %s", act, md_dtype_name(t));
            cr_expect(same(what, y2, y1, t, n, 1.0));
            snprintf(what, sizeof what, "act %d bwd %s", act, md_dtype_name(t));
            cr_expect(same(what, dx2, dx1, t, n, 1.0));
            free(x), free(dy), free(y1), free(y2), free(dx1), free(dx2);
        }
}

Test(metal_sim, dropout_same_mask_as_reference)
{
    const size_t n = 3000;
    for (int di = 0; di < 3; di++)
        for (int with_mask = 0; with_mask < 2; with_mask++) {
            md_dtype t = dtypes[di];
            size_t es = md_dtype_size(t);
            void *x = rnd(t, n, -1, 1, 50), *dy = rnd(t, n, -1, 1, 51);
            void *y1 = rnd(t, n, -1, 1, 52), *y2 = dup(y1, n * es), *dx1 = rnd(t, n, -1, 1, 53), *dx2 = dup(dx1, n * es);
            uint8_t *m1 = calloc(n, 1), *m2 = calloc(n, 1);
            struct md_dropout_args a = {.n = n, .p = 0.3f, .seed = 1234, .offset = 77, .dtype = t, .x = x, .dy = dy,
                                        .beta = with_mask ? 0.0f : 1.0f};
            a.y = y1, a.dx = dx1, a.mask = with_mask ? m1 : NULL;
            REF(dropout_fwd, a);
            REF(dropout_bwd, a);
            a.y = y2, a.dx = dx2, a.mask = with_mask ? m2 : NULL;
            SIM(dropout_fwd, a);
            SIM(dropout_bwd, a);
            cr_expect(same("dropout fwd", y2, y1, t, n, 1.0));
            cr_expect(same("dropout bwd", dx2, dx1, t, n, 1.0));
            cr_expect(memcmp(m1, m2, n) == 0, "dropout masks differ");
            free(x), free(dy), free(y1), free(y2), free(dx1), free(dx2), free(m1), free(m2);
        }
}

Test(metal_sim, ew_reduce_cast)
{
    const size_t n = 2500;
    float scale = 0.75f;
    for (int di = 0; di < 3; di++) {
        md_dtype t = dtypes[di];
        size_t es = md_dtype_size(t);
        void *a = rnd(t, n, -1, 1, 60), *b = rnd(t, n, -1, 1, 61);
        for (int op = 0; op < MD_EW_COUNT; op++)
            for (int sc = 0; sc < 2; sc++) {
                void *y1 = rnd(t, n, -1, 1, 62), *y2 = dup(y1, n * es);
                struct md_ew_args e = {.op = op, .n = n, .dtype = t, .alpha = 1.25f, .beta = sc ? 0.0f : -0.5f,
                                       .scale_dev = sc ? &scale : NULL, .a = a, .b = b};
                e.y = y1;
                REF(ew, e);
                e.y = y2;
                SIM(ew, e);
                char what[64];
                snprintf(what, sizeof what, "ew op %d scale %d %s", op, sc, md_dtype_name(t));
                cr_expect(same(what, y2, y1, t, n, 1.0));
                free(y1), free(y2);
            }
        for (int op = 0; op < 3; op++) {
            /* n large enough for several partial sums */
            size_t big = 20000;
            void *ba = rnd(t, big, -1, 1, 63), *bb = rnd(t, big, -1, 1, 64);
            float o1 = 2.0f, o2 = 2.0f;
            struct md_reduce_args r = {.op = op, .n = big, .dtype = t, .a = ba, .b = bb, .beta = 1.0f};
            r.out = &o1;
            REF(reduce, r);
            r.out = &o2;
            SIM(reduce, r);
            cr_expect(fabsf(o1 - o2) <= 1e-4f * (1.0f + fabsf(o1)), "reduce op %d %s: %g vs %g", op,
                      md_dtype_name(t), (double)o2, (double)o1);
            free(ba), free(bb);
        }
        for (int dj = 0; dj < 3; dj++) {
            md_dtype u = dtypes[dj];
            void *d1 = calloc(n, md_dtype_size(u)), *d2 = calloc(n, md_dtype_size(u));
            struct md_cast_args c = {.n = n, .src_type = t, .dst_type = u, .src = a};
            c.dst = d1;
            REF(cast, c);
            c.dst = d2;
            SIM(cast, c);
            cr_expect(memcmp(d1, d2, n * md_dtype_size(u)) == 0, "cast %s -> %s differs", md_dtype_name(t),
                      md_dtype_name(u));
            free(d1), free(d2);
        }
        free(a), free(b);
    }
    /* a non-finite element makes the sum non-finite */
    float v[600];
    for (int i = 0; i < 600; i++) v[i] = 1.0f;
    v[433] = INFINITY;
    float out = 0.0f;
    struct md_reduce_args r = {.op = MD_RED_SUMSQ, .n = 600, .dtype = MD_F32, .a = v, .out = &out};
    SIM(reduce, r);
    cr_expect(isinf(out));
}

/* ---- layout, pooling, slices ------------------------------------------------------------------------ */

Test(metal_sim, pooling_gap_bias_permute_chslice)
{
    static const struct { int kind, h, w, kh, kw, sh, sw, ph, pw, cip; } pools[] = {
        {MD_POOL_MAX, 8, 7, 3, 3, 2, 2, 1, 1, 1}, {MD_POOL_MAX, 6, 6, 2, 2, 2, 2, 0, 0, 1},
        {MD_POOL_AVG, 7, 9, 3, 2, 2, 1, 1, 1, 1}, {MD_POOL_AVG, 7, 9, 3, 3, 2, 2, 1, 1, 0},
    };
    const int n = 2, c = 3;
    for (int di = 0; di < 3; di++)
        for (int lay = 0; lay < 2; lay++) {
            md_dtype t = dtypes[di];
            md_layout L = lay ? MD_NHWC : MD_NCHW;
            size_t es = md_dtype_size(t);
            char what[96];
            for (size_t pi = 0; pi < sizeof pools / sizeof pools[0]; pi++) {
                struct md_pool2d_args a = {.kind = pools[pi].kind, .n = n, .c = c, .h = pools[pi].h, .w = pools[pi].w,
                                           .kh = pools[pi].kh, .kw = pools[pi].kw, .stride_h = pools[pi].sh,
                                           .stride_w = pools[pi].sw, .pad_h = pools[pi].ph, .pad_w = pools[pi].pw,
                                           .count_include_pad = pools[pi].cip, .layout = L, .dtype = t,
                                           .beta = (float)(pi % 2)};
                a.p = md_conv_out(a.h, a.kh, a.stride_h, a.pad_h, 1);
                a.q = md_conv_out(a.w, a.kw, a.stride_w, a.pad_w, 1);
                size_t nx = (size_t)n * c * a.h * a.w, ny = (size_t)n * c * a.p * a.q;
                void *x = rnd(t, nx, -1, 1, 70 + pi), *dy = rnd(t, ny, -1, 1, 80);
                void *y1 = rnd(t, ny, -1, 1, 81), *y2 = dup(y1, ny * es), *dx1 = rnd(t, nx, -1, 1, 82), *dx2 = dup(dx1, nx * es);
                a.x = x, a.dy = dy;
                a.y_out = y1, a.dx = dx1;
                REF(pool2d_fwd, a);
                REF(pool2d_bwd, a);
                a.y_out = y2, a.dx = dx2;
                SIM(pool2d_fwd, a);
                SIM(pool2d_bwd, a);
                snprintf(what, sizeof what, "pool %zu %s %s", pi, md_layout_name(L), md_dtype_name(t));
                cr_expect(same(what, y2, y1, t, ny, 1.0));
                cr_expect(same(what, dx2, dx1, t, nx, 1.0));
                free(x), free(dy), free(y1), free(y2), free(dx1), free(dx2);
            }
            /* gap and bias over (n, c, hw) */
            const int hw = 13;
            size_t ne = (size_t)n * c * hw;
            void *x = rnd(t, ne, -1, 1, 90), *dy = rnd(t, ne, -1, 1, 91), *gdy = rnd(t, (size_t)n * c, -1, 1, 92);
            void *y1 = rnd(t, (size_t)n * c, -1, 1, 93), *y2 = dup(y1, (size_t)n * c * es);
            void *dx1 = rnd(t, ne, -1, 1, 94), *dx2 = dup(dx1, ne * es);
            struct md_gap_args g = {.n = n, .c = c, .hw = hw, .layout = L, .dtype = t, .x = x, .dy = gdy, .beta = 1.0f};
            g.y = y1, g.dx = dx1;
            REF(gap_fwd, g);
            REF(gap_bwd, g);
            g.y = y2, g.dx = dx2;
            SIM(gap_fwd, g);
            SIM(gap_bwd, g);
            snprintf(what, sizeof what, "gap %s %s", md_layout_name(L), md_dtype_name(t));
            cr_expect(same(what, y2, y1, t, (size_t)n * c, 1.0));
            cr_expect(same(what, dx2, dx1, t, ne, 1.0));
            float *bias = rndf(c, -1, 1, 95), *db1 = rndf(c, -1, 1, 96), *db2 = dup(db1, c * 4);
            void *by1 = dup(x, ne * es), *by2 = dup(x, ne * es);
            struct md_bias_args b = {.n = n, .c = c, .hw = hw, .layout = L, .dtype = t, .bias = bias, .dy = dy,
                                     .beta = 0.0f};
            b.y = by1, b.dbias = db1;
            REF(bias_add, b);
            REF(bias_grad, b);
            b.y = by2, b.dbias = db2;
            SIM(bias_add, b);
            SIM(bias_grad, b);
            snprintf(what, sizeof what, "bias %s %s", md_layout_name(L), md_dtype_name(t));
            cr_expect(same(what, by2, by1, t, ne, 1.0));
            cr_expect(same(what, db2, db1, MD_F32, c, t == MD_F32 ? 10.0 : 100.0));
            /* permute (n, c, h, w) = (2, 3, 4, 5) both ways */
            void *p1 = calloc(120, es), *p2 = calloc(120, es), *src = rnd(t, 120, -1, 1, 97);
            struct md_permute_args pm = {.n = 2, .c = 3, .h = 4, .w = 5, .to_nhwc = !lay, .dtype = t, .src = src};
            pm.dst = p1;
            REF(permute, pm);
            pm.dst = p2;
            SIM(permute, pm);
            cr_expect(memcmp(p1, p2, 120 * es) == 0, "permute to_nhwc %d %s", pm.to_nhwc, md_dtype_name(t));
            /* chslice: 2 channels of a 3-channel tensor into offset 1 of a 4-channel one */
            void *d1 = rnd(t, (size_t)n * 4 * hw, -1, 1, 98), *d2 = dup(d1, (size_t)n * 4 * hw * es);
            struct md_chslice_args cs = {.n = n, .hw = hw, .cc = 2, .src_c = 3, .src_off = 1, .dst_c = 4, .dst_off = 1,
                                         .layout = L, .dtype = t, .src = x, .beta = (float)lay};
            cs.dst = d1;
            REF(chslice, cs);
            cs.dst = d2;
            SIM(chslice, cs);
            snprintf(what, sizeof what, "chslice %s %s", md_layout_name(L), md_dtype_name(t));
            cr_expect(same(what, d2, d1, t, (size_t)n * 4 * hw, 1.0));
            free(x), free(dy), free(gdy), free(y1), free(y2), free(dx1), free(dx2), free(bias), free(db1), free(db2);
            free(by1), free(by2), free(p1), free(p2), free(src), free(d1), free(d2);
        }
}

/* ---- loss and optimizer ---------------------------------------------------------------------------------- */

Test(metal_sim, xent)
{
    const int n = 300, classes = 10;
    for (int di = 0; di < 3; di++)
        for (int sm = 0; sm < 2; sm++) {
            md_dtype t = dtypes[di];
            size_t ne = (size_t)n * classes, es = md_dtype_size(t);
            void *z = rnd(t, ne, -4, 4, 100);
            int32_t *lab = malloc(n * sizeof *lab);
            for (int i = 0; i < n; i++) lab[i] = (int32_t)(md_rng_hash(101, (uint64_t)i) % classes);
            void *g1 = calloc(ne, es), *g2 = calloc(ne, es);
            float l1 = 1.0f, l2 = 1.0f;
            int32_t c1 = 5, c2 = 5;
            struct md_xent_args a = {.n = n, .classes = classes, .smoothing = sm ? 0.1f : 0.0f, .dtype = t,
                                     .logits = z, .labels = lab, .grad_scale = 1.0f / n};
            a.loss_sum = &l1, a.correct = &c1, a.dlogits = g1;
            REF(xent, a);
            a.loss_sum = &l2, a.correct = &c2, a.dlogits = g2;
            SIM(xent, a);
            cr_expect(fabsf(l1 - l2) <= 1e-5f * fabsf(l1) + 1e-4f, "xent loss %s: %g vs %g", md_dtype_name(t),
                      (double)l2, (double)l1);
            cr_expect_eq(c1, c2, "xent correct %s: %d vs %d", md_dtype_name(t), c2, c1);
            cr_expect(same("xent dlogits", g2, g1, t, ne, 1.0));
            free(z), free(lab), free(g1), free(g2);
        }
}

Test(metal_sim, optimizers)
{
    const size_t n = 777;
    float gsd = 0.5f;
    for (int kind = 0; kind < 2; kind++)
        for (int variant = 0; variant < 3; variant++) {
            /* variant 0: step 1, fp16 copy; 1: step 3, nesterov, bf16 copy, device scale; 2: no momentum */
            float *p1 = rndf(n, -1, 1, 110), *g = rndf(n, -1, 1, 111), *m1 = rndf(n, -0.1f, 0.1f, 112);
            float *v1 = rndf(n, 0, 0.1f, 113), *p2 = dup(p1, n * 4), *m2 = dup(m1, n * 4), *v2 = dup(v1, n * 4);
            md_dtype ht = variant == 1 ? MD_BF16 : MD_F16;
            uint16_t *h1 = calloc(n, 2), *h2 = calloc(n, 2);
            struct md_optim_args a = {.kind = kind, .n = n, .lr = 0.05f, .momentum = variant == 2 ? 0.0f : 0.9f,
                                      .weight_decay = 5e-4f, .beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f,
                                      .nesterov = variant == 1, .step = variant == 0 ? 1 : 3, .grad_scale = 0.25f,
                                      .grad_scale_dev = variant == 1 ? &gsd : NULL, .grads = g, .half_dtype = ht};
            a.params = p1, a.m = m1, a.v = v1, a.params_half = variant == 2 ? NULL : h1;
            REF(optim, a);
            a.params = p2, a.m = m2, a.v = v2, a.params_half = variant == 2 ? NULL : h2;
            SIM(optim, a);
            char what[64];
            snprintf(what, sizeof what, "optim kind %d variant %d", kind, variant);
            cr_expect(same(what, p2, p1, MD_F32, n, 1.0));
            cr_expect(same(what, m2, m1, MD_F32, n, 1.0));
            if (kind == MD_OPT_ADAMW) cr_expect(same(what, v2, v1, MD_F32, n, 1.0));
            if (variant != 2) cr_expect(same(what, h2, h1, ht, n, 1.0));
            free(p1), free(g), free(m1), free(v1), free(p2), free(m2), free(v2), free(h1), free(h2);
        }
}

/* ---- tiles, FiLM -------------------------------------------------------------------------------------- */

/* Shrinking, enlarging (uneven tile edges) and copied tiles, with ld > rows *
 * cols (items of another stream between samples must stay as they were);
 * FiLM on tokens with every combination of dx / dcond. */
Test(metal_sim, tiles_film)
{
    static const int tc[][8] = {/* n c h w rows cols size ld */
                                {2, 3, 12, 14, 2, 2, 5, 8}, {1, 2, 7, 9, 3, 2, 8, 6}, {2, 1, 10, 10, 2, 2, 5, 4}};
    for (size_t ci = 0; ci < sizeof tc / sizeof tc[0]; ci++)
        for (int di = 0; di < 3; di++) {
            const int *c = tc[ci];
            md_dtype t = dtypes[di];
            size_t es = md_dtype_size(t), nx = (size_t)c[0] * c[1] * c[2] * c[3],
                   ny = (size_t)c[0] * c[7] * c[1] * c[6] * c[6];
            float beta = (float)((ci + (size_t)di) % 2);
            void *x = rnd(t, nx, -2, 2, 70 + ci), *dy = rnd(t, ny, -1, 1, 71 + ci);
            void *y1 = rnd(t, ny, -1, 1, 72), *y2 = dup(y1, ny * es), *dx1 = rnd(t, nx, -1, 1, 73),
                 *dx2 = dup(dx1, nx * es);
            struct md_tiles_args a = {.n = c[0], .c = c[1], .h = c[2], .w = c[3], .rows = c[4], .cols = c[5],
                                      .size = c[6], .ld = c[7], .dtype = t, .beta = beta, .x = x, .dy = dy};
            a.y = y1, a.dx = dx1;
            REF(tiles_fwd, a);
            REF(tiles_bwd, a);
            a.y = y2, a.dx = dx2;
            SIM(tiles_fwd, a);
            SIM(tiles_bwd, a);
            char what[96];
            snprintf(what, sizeof what, "tiles case %zu %s beta %g", ci, md_dtype_name(t), (double)beta);
            cr_expect(same(what, y2, y1, t, ny, 1.0));
            cr_expect(same(what, dx2, dx1, t, nx, 2.0));
            free(x), free(dy), free(y1), free(y2), free(dx1), free(dx2);
        }
    static const int fc[][3] = {{3, 1, 6}, {2, 17, 33}, {1, 40, 5}};
    for (size_t ci = 0; ci < sizeof fc / sizeof fc[0]; ci++)
        for (int di = 0; di < 3; di++)
            for (int which = 1; which < 4; which++) {
                md_dtype t = dtypes[di];
                int n = fc[ci][0], tt = fc[ci][1], d = fc[ci][2];
                size_t es = md_dtype_size(t), nx = (size_t)n * tt * d, nc = (size_t)n * 2 * d;
                void *x = rnd(t, nx, -2, 2, 80 + ci), *cond = rnd(t, nc, -1, 1, 81 + ci), *dy = rnd(t, nx, -1, 1, 82);
                void *y1 = rnd(t, nx, -1, 1, 83), *y2 = dup(y1, nx * es), *dx1 = rnd(t, nx, -1, 1, 84),
                     *dx2 = dup(dx1, nx * es), *dc1 = rnd(t, nc, -1, 1, 85), *dc2 = dup(dc1, nc * es);
                struct md_film_args a = {.n = n, .t = tt, .d = d, .dtype = t, .x = x, .cond = cond, .dy = dy,
                                         .beta = (float)(which & 1), .beta_cond = (float)(di & 1)};
                a.y = y1, a.dx = which & 1 ? dx1 : NULL, a.dcond = which & 2 ? dc1 : NULL;
                REF(film_fwd, a);
                REF(film_bwd, a);
                a.y = y2, a.dx = which & 1 ? dx2 : NULL, a.dcond = which & 2 ? dc2 : NULL;
                SIM(film_fwd, a);
                SIM(film_bwd, a);
                char what[96];
                snprintf(what, sizeof what, "film (%d, %d, %d) outputs %d %s", n, tt, d, which, md_dtype_name(t));
                cr_expect(same(what, y2, y1, t, nx, 1.0));
                cr_expect(same(what, dx2, dx1, t, nx, 1.0));
                cr_expect(same(what, dc2, dc1, t, nc, 4.0));
                free(x), free(cond), free(dy), free(y1), free(y2), free(dx1), free(dx2), free(dc1), free(dc2);
            }
}

/* The per-feature scale on odd sizes, every combination of dx / dg, beta 0
 * and 1; and with dx in dy's buffer (dg must see dy). */
Test(metal_sim, chscale)
{
    static const int cc[][2] = {{1, 1}, {37, 45}, {6, 16}};
    for (size_t ci = 0; ci < sizeof cc / sizeof cc[0]; ci++)
        for (int di = 0; di < 3; di++)
            for (int which = 0; which < 5; which++) {
                md_dtype t = dtypes[di];
                int rows = cc[ci][0], d = cc[ci][1];
                size_t es = md_dtype_size(t), nx = (size_t)rows * d;
                void *x = rnd(t, nx, -2, 2, 90 + ci), *dy1 = rnd(t, nx, -1, 1, 91), *dy2 = dup(dy1, nx * es);
                float *g = rndf((size_t)d, -1, 1, 92 + ci), *dg1 = rndf((size_t)d, -1, 1, 93),
                      *dg2 = dup(dg1, (size_t)d * 4);
                void *y1 = rnd(t, nx, -1, 1, 94), *y2 = dup(y1, nx * es), *dx1 = rnd(t, nx, -1, 1, 95),
                     *dx2 = dup(dx1, nx * es);
                int wdx = which == 4 || (which & 1), wdg = which == 4 || (which & 2);
                struct md_chscale_args a = {.rows = rows, .d = d, .dtype = t, .x = x, .g = g,
                                            .beta = (float)(which & 1), .beta_g = (float)(di & 1)};
                a.y = y1, a.dy = dy1, a.dx = !wdx ? NULL : which == 4 ? dy1 : dx1, a.dg = wdg ? dg1 : NULL;
                REF(chscale_fwd, a);
                REF(chscale_bwd, a);
                a.y = y2, a.dy = dy2, a.dx = !wdx ? NULL : which == 4 ? dy2 : dx2, a.dg = wdg ? dg2 : NULL;
                SIM(chscale_fwd, a);
                SIM(chscale_bwd, a);
                char what[96];
                snprintf(what, sizeof what, "chscale (%d, %d) outputs %d %s", rows, d, which, md_dtype_name(t));
                cr_expect(same(what, y2, y1, t, nx, 1.0));
                cr_expect(same(what, dx2, dx1, t, nx, 1.0));
                cr_expect(same(what, dy2, dy1, t, nx, 1.0));
                cr_expect(same(what, dg2, dg1, MD_F32, (size_t)d, 4.0));
                free(x), free(dy1), free(dy2), free(g), free(dg1), free(dg2), free(y1), free(y2), free(dx1), free(dx2);
            }
}
