/* norm_pool_bench.c - times the CPU backend's max pooling and batch norm
 * kernels alone (the memory-bound passes of small_cnn), and hashes their
 * outputs over many shapes so that two builds can be compared bit for bit.
 * Built as build/norm_pool_bench by `make build/norm_pool_bench`; not part
 * of mpsdiag.
 *
 *   norm_pool_bench time [THREADS [ITERS [ONLY]]]   ms per call, min and median
 *                                                  (ONLY: the cases whose name holds it)
 *   norm_pool_bench hash [THREADS]           one line per case: its outputs' hash
 *
 * `time` runs small_cnn's layers at batch 128 (pool 28x28x32 and 14x14x64,
 * 2x2/2; batch norm + ReLU on 128x784x32 and 128x196x64, training) in both
 * layouts, and the same batch norms with a fused 2x2 max pool (bnpool1, bnpool2),
 * channels-last also keeping the pool's routing from forward to backward as
 * training does (bnpoolkept1, bnpoolkept2).
 * `hash` covers odd channel counts, overlapping and padded windows, ties, NaN,
 * beta 0/1/0.5, ReLU masks from y and from x, and the fused pool (channels-last
 * with and without the kept routing: the same hashes). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/rng.h"
#include "core/threadpool.h"
#include "core/timer.h"

static float *fill(size_t n, uint64_t seed, int levels, float nan_every)
{
    float *p = md_malloc(n * sizeof *p);
    md_rng r;
    md_rng_init(&r, seed);
    for (size_t i = 0; i < n; i++) {
        float u = 2.0f * md_rng_next_uniform(&r) - 1.0f;
        p[i] = levels > 0 ? floorf(u * (float)levels) / (float)levels : u * 3.0f + 0.5f;
        if (nan_every > 0.0f && md_rng_next_uniform(&r) < nan_every) p[i] = NAN;
    }
    return p;
}

static uint64_t hash(uint64_t h, const void *p, size_t bytes)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < bytes; i++) h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* ---- pooling ---- */

struct pool_case { int n, c, h, w, k, s, pad; md_layout layout; float beta; int levels; float nan; };

static void pool_args(const struct pool_case *pc, struct md_pool2d_args *a)
{
    memset(a, 0, sizeof *a);
    a->kind = MD_POOL_MAX;
    a->n = pc->n, a->c = pc->c, a->h = pc->h, a->w = pc->w;
    a->kh = a->kw = pc->k, a->stride_h = a->stride_w = pc->s, a->pad_h = a->pad_w = pc->pad;
    a->p = (pc->h + 2 * pc->pad - pc->k) / pc->s + 1;
    a->q = (pc->w + 2 * pc->pad - pc->k) / pc->s + 1;
    a->layout = pc->layout;
    a->dtype = MD_F32;
    a->beta = pc->beta;
}

static uint64_t pool_hash(const struct pool_case *pc, int avg)
{
    struct md_pool2d_args a;
    pool_args(pc, &a);
    if (avg) a.kind = MD_POOL_AVG;
    size_t nx = (size_t)a.n * a.c * a.h * a.w, ny = (size_t)a.n * a.c * a.p * a.q;
    float *x = fill(nx, 1, pc->levels, pc->nan), *y = fill(ny, 2, 0, 0), *dy = fill(ny, 3, 0, 0),
          *dx = fill(nx, 4, 0, 0);
    a.x = x, a.y_out = y, a.dy = dy, a.dx = dx;
    uint64_t h = 1469598103934665603ull;
    if (md_cpu_pool2d_fwd(NULL, &a) != MD_OK || md_cpu_pool2d_bwd(NULL, &a) != MD_OK) h = 0;
    h = hash(h, y, ny * sizeof *y);
    h = hash(h, dx, nx * sizeof *dx);
    md_free(x), md_free(y), md_free(dy), md_free(dx);
    return h;
}

/* ---- batch norm ---- */

struct bn_case { int n, c, hw; md_layout layout; int relu, training, give_y, save; float beta; int h, keep; };
/* h > 0: a fused 2x2 stride-2 max pool over (h, hw / h) planes; y and dy are pooled;
 * keep: its routing kept (pool_x, pool_arg) */

struct bn_bufs { float *x, *y, *dy, *dx, *g, *b, *rm, *rv, *sm, *si, *dg, *db, *kx; unsigned char *karg; };

static void bn_setup(const struct bn_case *bc, struct bn_bufs *B, struct md_batchnorm_args *a)
{
    size_t n = (size_t)bc->n * bc->c * bc->hw, c = (size_t)bc->c, ny = bc->h ? n / 4 : n;
    B->x = fill(n, 5, 0, 0), B->y = fill(ny, 6, 0, 0), B->dy = fill(ny, 7, 0, 0), B->dx = fill(n, 8, 0, 0);
    B->g = fill(c, 9, 0, 0), B->b = fill(c, 10, 0, 0), B->rm = fill(c, 11, 0, 0), B->rv = fill(c, 12, 0, 0);
    B->sm = fill(c, 13, 0, 0), B->si = fill(c, 14, 0, 0), B->dg = fill(c, 15, 0, 0), B->db = fill(c, 16, 0, 0);
    for (size_t i = 0; i < c; i++) B->rv[i] = fabsf(B->rv[i]) + 0.1f;
    memset(a, 0, sizeof *a);
    a->n = bc->n, a->c = bc->c, a->hw = bc->hw, a->layout = bc->layout, a->dtype = MD_F32;
    a->training = bc->training, a->eps = 1e-5f, a->momentum = 0.1f, a->act = bc->relu ? MD_ACT_RELU : MD_ACT_NONE;
    a->x = B->x, a->y = B->y, a->gamma = B->g, a->beta_p = B->b, a->running_mean = B->rm, a->running_var = B->rv;
    a->save_mean = bc->save ? B->sm : NULL, a->save_invstd = bc->save ? B->si : NULL;
    a->dy = B->dy, a->dx = B->dx, a->dgamma = B->dg, a->dbeta = B->db, a->beta = bc->beta;
    if (bc->h) a->pool = 2, a->h = bc->h, a->w = bc->hw / bc->h;
    B->kx = NULL, B->karg = NULL;
    if (bc->h && bc->keep) {
        B->kx = fill(ny, 17, 0, 0), B->karg = md_malloc(ny);
        if (B->karg) memset(B->karg, 0xff, ny);
        a->pool_x = B->kx, a->pool_arg = B->karg;
    }
}

static void bn_free(struct bn_bufs *B)
{
    float **p = &B->x;
    for (int i = 0; i < 13; i++) md_free(p[i]);
    md_free(B->karg);
}

static uint64_t bn_hash(const struct bn_case *bc)
{
    struct bn_bufs B;
    struct md_batchnorm_args a;
    bn_setup(bc, &B, &a);
    size_t n = (size_t)bc->n * bc->c * bc->hw, c = (size_t)bc->c, ny = bc->h ? n / 4 : n;
    uint64_t h = 1469598103934665603ull;
    struct md_batchnorm_args f = a;
    f.beta = 0.0f; /* the forward's beta would feed the backward another y */
    if (md_cpu_batchnorm_fwd(NULL, &f) != MD_OK) h = 0;
    h = hash(h, B.y, ny * 4), h = hash(h, B.rm, c * 4), h = hash(h, B.rv, c * 4);
    if (bc->save) h = hash(h, B.sm, c * 4), h = hash(h, B.si, c * 4);
    if (!bc->give_y) a.y = NULL;
    if (md_cpu_batchnorm_bwd(NULL, &a) != MD_OK) h = 0;
    h = hash(h, B.dx, n * 4), h = hash(h, B.dg, c * 4), h = hash(h, B.db, c * 4);
    bn_free(&B);
    return h;
}

static int do_hash(void)
{
    static const int chans[] = {1, 3, 4, 8, 17, 32, 33, 64, 70, 129};
    static const int win[][3] = {{2, 2, 0}, {3, 3, 0}, {3, 2, 1}, {2, 1, 0}, {3, 3, 1}, {1, 1, 0}};
    static const float betas[] = {0.0f, 1.0f, 0.5f};
    static const int planes[][2] = {{9, 7}, {5, 21}, {4, 30}}; /* wide rows: NCHW's vectors of outputs */
    for (int li = 0; li < 2; li++)
        for (size_t ci = 0; ci < sizeof chans / sizeof *chans; ci++)
            for (size_t wi = 0; wi < sizeof win / sizeof *win; wi++)
                for (size_t bi = 0; bi < 3; bi++)
                    for (int lv = 0; lv < 2; lv++)
                        for (int pl = 0; pl < (li ? 1 : 3); pl++) {
                            struct pool_case pc = {3, chans[ci], planes[pl][0], planes[pl][1], win[wi][0], win[wi][1],
                                                   win[wi][2], li ? MD_NHWC : MD_NCHW, betas[bi], lv ? 3 : 0,
                                                   lv ? 0.05f : 0.0f};
                            printf("pool %s c%d %dx%d k%d s%d p%d b%.1f lv%d max %016llx avg %016llx\n",
                                   li ? "nhwc" : "nchw", pc.c, pc.h, pc.w, pc.k, pc.s, pc.pad, (double)pc.beta, lv,
                                   (unsigned long long)pool_hash(&pc, 0), (unsigned long long)pool_hash(&pc, 1));
                        }
    static const int hws[] = {1, 5, 49, 100};
    for (int li = 0; li < 2; li++)
        for (size_t ci = 0; ci < sizeof chans / sizeof *chans; ci++)
            for (size_t hi = 0; hi < 4; hi++)
                for (int v = 0; v < 12; v++) {
                    struct bn_case bc = {3, chans[ci], hws[hi], li ? MD_NHWC : MD_NCHW, v & 1, (v >> 1) & 1,
                                         (v >> 2) % 3 == 0, (v >> 2) % 3 != 2, betas[(v >> 2) % 3], 0, 0};
                    printf("bn %s c%d hw%d relu%d train%d y%d save%d b%.1f %016llx\n", li ? "nhwc" : "nchw",
                           bc.c, bc.hw, bc.relu, bc.training, bc.give_y, bc.save, (double)bc.beta,
                           (unsigned long long)bn_hash(&bc));
                }
    static const int pplanes[][2] = {{2, 2}, {6, 4}, {4, 30}, {14, 14}};
    for (int li = 0; li < 3; li++) /* NCHW, NHWC, NHWC keeping the routing (the same hashes as NHWC) */
        for (size_t ci = 0; ci < sizeof chans / sizeof *chans; ci++)
            for (size_t pl = 0; pl < 4; pl++)
                for (size_t bi = 0; bi < 3; bi += 2) {
                    struct bn_case bc = {3, chans[ci], pplanes[pl][0] * pplanes[pl][1], li ? MD_NHWC : MD_NCHW, 1, 1,
                                         1, 1, betas[bi], pplanes[pl][0], li == 2};
                    printf("bnpool %s c%d %dx%d b%.1f %016llx\n", li == 2 ? "nhwc-kept" : li ? "nhwc" : "nchw", bc.c,
                           pplanes[pl][0], pplanes[pl][1], (double)bc.beta, (unsigned long long)bn_hash(&bc));
                }
    return 0;
}

/* ---- timing ---- */

static int cmp(const void *p, const void *q)
{
    double a = *(const double *)p, b = *(const double *)q;
    return a < b ? -1 : a > b;
}

static const char *only; /* time: the cases whose name holds this, or all */

static int skip(const char *name) { return only && !strstr(name, only); }

static void report(const char *name, double *t, int iters)
{
    qsort(t, (size_t)iters, sizeof *t, cmp);
    printf("%-24s min %7.3f  median %7.3f ms\n", name, t[0] * 1e3, t[iters / 2] * 1e3);
}

static int do_time(int iters)
{
    double *t = md_malloc(sizeof(double) * (size_t)iters);
    for (int li = 1; li >= 0; li--) {
        md_layout L = li ? MD_NHWC : MD_NCHW;
        const char *ln = li ? "nhwc" : "nchw";
        const struct pool_case pools[] = {{128, 32, 28, 28, 2, 2, 0, L, 0, 0, 0}, {128, 64, 14, 14, 2, 2, 0, L, 0, 0, 0}};
        for (int k = 0; k < 2; k++) {
            struct md_pool2d_args a;
            pool_args(&pools[k], &a);
            size_t nx = (size_t)a.n * a.c * a.h * a.w, ny = (size_t)a.n * a.c * a.p * a.q;
            float *x = fill(nx, 1, 0, 0), *y = fill(ny, 2, 0, 0), *dy = fill(ny, 3, 0, 0), *dx = fill(nx, 4, 0, 0);
            a.x = x, a.y_out = y, a.dy = dy, a.dx = dx;
            char name[64];
            for (int dir = 0; dir < 2; dir++) {
                snprintf(name, sizeof name, "pool%d %s %s", k + 1, ln, dir ? "bwd" : "fwd");
                if (skip(name)) continue;
                for (int i = -2; i < iters; i++) {
                    double t0 = md_now();
                    if (dir ? md_cpu_pool2d_bwd(NULL, &a) : md_cpu_pool2d_fwd(NULL, &a)) return 1;
                    if (i >= 0) t[i] = md_now() - t0;
                }
                report(name, t, iters);
            }
            md_free(x), md_free(y), md_free(dy), md_free(dx);
        }
        const struct bn_case bns[] = {{128, 32, 784, L, 1, 1, 1, 1, 0, 0, 0},  {128, 64, 196, L, 1, 1, 1, 1, 0, 0, 0},
                                      {128, 32, 784, L, 1, 1, 1, 1, 0, 28, 0}, {128, 64, 196, L, 1, 1, 1, 1, 0, 14, 0},
                                      {128, 32, 784, L, 1, 1, 1, 1, 0, 28, 1}, {128, 64, 196, L, 1, 1, 1, 1, 0, 14, 1}};
        for (int k = 0; k < (L == MD_NHWC ? 6 : 4); k++) {
            struct bn_bufs B;
            struct md_batchnorm_args a;
            bn_setup(&bns[k], &B, &a);
            char name[64];
            for (int dir = 0; dir < 2; dir++) {
                snprintf(name, sizeof name, "bn%s%d %s %s", k > 3 ? "poolkept" : k > 1 ? "pool" : "", k % 2 + 1, ln,
                         dir ? "bwd" : "fwd");
                if (skip(name)) continue;
                for (int i = -2; i < iters; i++) {
                    double t0 = md_now();
                    if (dir ? md_cpu_batchnorm_bwd(NULL, &a) : md_cpu_batchnorm_fwd(NULL, &a)) return 1;
                    if (i >= 0) t[i] = md_now() - t0;
                }
                report(name, t, iters);
            }
            bn_free(&B);
        }
    }
    md_free(t);
    return 0;
}

int main(int argc, char **argv)
{
    md_log_init(MD_QUIET);
    if (argc < 2 || (strcmp(argv[1], "time") && strcmp(argv[1], "hash"))) {
        fprintf(stderr, "usage: norm_pool_bench time [THREADS [ITERS]] | hash [THREADS]\n");
        return 2;
    }
    int threads = argc > 2 ? atoi(argv[2]) : 1, iters = argc > 3 ? atoi(argv[3]) : 20;
    if (threads < 1 || iters < 1) return 2;
    only = argc > 4 ? argv[4] : NULL;
    md_threadpool_set_size(threads);
    int rc = strcmp(argv[1], "hash") ? do_time(iters) : do_hash();
    md_threadpool_shutdown();
    return rc;
}
