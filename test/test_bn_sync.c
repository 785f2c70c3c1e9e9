/* test_bn_sync.c - synchronised batch norm (md_batchnorm_args.sync, --sync-bn)
 * in one process: two threads play two ranks, each runs the CPU, reference
 * or CUDA kernels on its part of a batch, and a fake all-reduce (a barrier and a sum)
 * exchanges their statistics. Forward (y, saved and running statistics) and
 * backward (dx, and dgamma/dbeta summed over the parts) must equal the same
 * kernels' local batch norm over the whole batch. The inputs sit far from 0
 * (x ~ 100 + U(0, 2) in fp32), where a sum / sum-of-squares exchange in fp32
 * would lose the variance to cancellation. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/kernels_call.h"
#include "core/tensor.h"
#include "helpers.h"
#include "kernel_cases.h"

struct fake_comm {
    pthread_barrier_t bar;
    float *buf[2];
    int calls[2];
};

struct fake_rank {
    struct fake_comm *c;
    int rank;
};

/* Both ranks' buffers summed in the same order, so both get the same bits. */
static md_status fake_allreduce(void *ctx, float *buf, size_t n)
{
    struct fake_rank *r = ctx;
    struct fake_comm *c = r->c;
    c->buf[r->rank] = buf;
    c->calls[r->rank]++;
    pthread_barrier_wait(&c->bar);
    float *sum = malloc((n ? n : 1) * sizeof *sum);
    for (size_t i = 0; i < n; i++) sum[i] = c->buf[0][i] + c->buf[1][i];
    pthread_barrier_wait(&c->bar);
    memcpy(buf, sum, n * sizeof *buf);
    free(sum);
    return MD_OK;
}

/* One batch norm's tensors for n samples (host memory: cpu and ref). */
struct bn_bufs {
    void *x, *y, *dy, *dx;
    float g[8], b[8], rm[8], rv[8], sm[8], si[8], dg[8], db[8];
};

struct rank_job {
    md_device *dev;
    struct md_batchnorm_args a;
    md_status fwd, bwd;
};

/* A device copy of n bytes of host memory (uploaded when `in`). */
static void *dcopy(md_device *dev, const void *h, size_t n, int in, md_status *st)
{
    void *d = NULL;
    if (*st == MD_OK) *st = md_dev_alloc(dev, n ? n : 1, &d, "bn_sync test");
    if (*st == MD_OK && in) *st = md_dev_upload(dev, d, h, n);
    return d;
}

/* Forward then backward of a (host pointers) on dev: directly where the
 * kernels read host memory (cpu, ref), else on device copies whose results
 * come back into a's host buffers. */
static void run_bn(md_device *dev, const struct md_batchnorm_args *h, md_status *fwd, md_status *bwd)
{
    if (md_device_kind(dev) != MD_BACKEND_CUDA) {
        struct md_batchnorm_args a = *h;
        *fwd = md_k_batchnorm_fwd(dev, &a);
        *bwd = *fwd == MD_OK ? md_k_batchnorm_bwd(dev, &a) : MD_ERR_INTERNAL;
        return;
    }
    size_t nx = (size_t)h->n * h->c * h->hw * md_dtype_size(h->dtype), nc = (size_t)h->c * sizeof(float);
    md_status st = MD_OK;
    struct md_batchnorm_args a = *h;
    a.x = dcopy(dev, h->x, nx, 1, &st);
    a.dy = dcopy(dev, h->dy, nx, 1, &st);
    a.y = dcopy(dev, h->y, nx, 0, &st);
    a.dx = dcopy(dev, h->dx, nx, 0, &st);
    a.gamma = dcopy(dev, h->gamma, nc, 1, &st);
    a.beta_p = dcopy(dev, h->beta_p, nc, 1, &st);
    a.running_mean = dcopy(dev, h->running_mean, nc, 1, &st);
    a.running_var = dcopy(dev, h->running_var, nc, 1, &st);
    a.save_mean = dcopy(dev, h->save_mean, nc, 0, &st);
    a.save_invstd = dcopy(dev, h->save_invstd, nc, 0, &st);
    a.dgamma = dcopy(dev, h->dgamma, nc, 0, &st);
    a.dbeta = dcopy(dev, h->dbeta, nc, 0, &st);
    *fwd = st == MD_OK ? md_k_batchnorm_fwd(dev, &a) : st;
    *bwd = *fwd == MD_OK ? md_k_batchnorm_bwd(dev, &a) : MD_ERR_INTERNAL;
    if (*bwd == MD_OK) {
        md_status d = md_dev_download(dev, h->y, a.y, nx);
        if (d == MD_OK) d = md_dev_download(dev, h->dx, a.dx, nx);
        if (d == MD_OK) d = md_dev_download(dev, h->running_mean, a.running_mean, nc);
        if (d == MD_OK) d = md_dev_download(dev, h->running_var, a.running_var, nc);
        if (d == MD_OK) d = md_dev_download(dev, h->save_mean, a.save_mean, nc);
        if (d == MD_OK) d = md_dev_download(dev, h->save_invstd, a.save_invstd, nc);
        if (d == MD_OK) d = md_dev_download(dev, h->dgamma, a.dgamma, nc);
        if (d == MD_OK) d = md_dev_download(dev, h->dbeta, a.dbeta, nc);
        *bwd = d;
    }
    void *bufs[] = {(void *)a.x, (void *)a.dy, a.y, a.dx, (void *)a.gamma, (void *)a.beta_p, a.running_mean,
                    a.running_var, a.save_mean, a.save_invstd, a.dgamma, a.dbeta};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) md_dev_free(dev, bufs[i]);
}

static void *run_rank(void *p)
{
    struct rank_job *j = p;
    run_bn(j->dev, &j->a, &j->fwd, &j->bwd);
    return NULL;
}

static struct md_batchnorm_args args_for(struct bn_bufs *B, int n, int c, int hw, md_layout lay, md_dtype t,
                                         int relu)
{
    struct md_batchnorm_args a = {.n = n, .c = c, .hw = hw, .layout = lay, .dtype = t, .training = 1,
                                  .eps = 1e-5f, .momentum = 0.1f, .act = relu ? MD_ACT_RELU : MD_ACT_NONE,
                                  .x = B->x, .y = B->y, .gamma = B->g, .beta_p = B->b, .running_mean = B->rm,
                                  .running_var = B->rv, .save_mean = B->sm, .save_invstd = B->si, .dy = B->dy,
                                  .dx = B->dx, .dgamma = B->dg, .dbeta = B->db, .beta = 0.0f};
    return a;
}

/* values of n elements of type t as doubles */
static double *as_d(const void *p, md_dtype t, size_t n)
{
    double *d = malloc((n ? n : 1) * sizeof *d);
    for (size_t i = 0; i < n; i++) d[i] = md_load_f(p, t, i);
    return d;
}

static void close_typed(const char *what, const void *got, const void *ref, md_dtype t, size_t n, double tol)
{
    double *g = as_d(got, t, n), *r = as_d(ref, t, n);
    int ok = th_allclose_d(what, g, r, n, tol, tol);
    free(g);
    free(r);
    cr_assert(ok, "%s differs from the whole batch's", what);
}

/* Ranks 0 and 1 hold samples [0, n0) and [n0, n) of the batch; dev[0]
 * computes the whole batch, dev[r] is rank r's (one device for host
 * kernels; a CUDA device per rank: each has its own queue and scratch). */
static void check_case(md_device *const dev[2], const char *be, int n, int n0, int c, int hw, md_layout lay, md_dtype t,
                       int relu)
{
    size_t per = (size_t)c * hw, es = md_dtype_size(t), nx = (size_t)n * per;
    /* fp32: far from 0 (cancellation); bf16 keeps ~3 digits, so near 0 */
    float lo = t == MD_F32 ? 100.0f : -1.0f, hi = t == MD_F32 ? 102.0f : 3.0f;
    struct bn_bufs W, P[2];
    W.x = malloc(nx * es);
    W.y = malloc(nx * es);
    W.dy = malloc(nx * es);
    W.dx = malloc(nx * es);
    kc_fill_typed(W.x, t, nx, 11 + (uint64_t)c, lo, hi);
    kc_fill_typed(W.dy, t, nx, 12 + (uint64_t)c, -1.0f, 1.0f);
    kc_fill(W.g, (size_t)c, 13, 0.5f, 1.5f);
    kc_fill(W.b, (size_t)c, 14, -0.5f, 0.5f);
    kc_fill(W.rm, (size_t)c, 15, 0.0f, 1.0f);
    kc_fill(W.rv, (size_t)c, 16, 0.5f, 2.0f);
    for (int r = 0; r < 2; r++) {
        int nr = r ? n - n0 : n0;
        size_t off = r ? (size_t)n0 * per * es : 0;
        P[r] = W;
        P[r].x = (char *)W.x + off;
        P[r].dy = (char *)W.dy + off;
        P[r].y = malloc((size_t)nr * per * es + 1);
        P[r].dx = malloc((size_t)nr * per * es + 1);
    }
    struct md_batchnorm_args whole = args_for(&W, n, c, hw, lay, t, relu);
    md_status wf, wb;
    run_bn(dev[0], &whole, &wf, &wb);
    cr_assert(wf == MD_OK && wb == MD_OK, "%s", md_errmsg());

    struct fake_comm comm = {0};
    pthread_barrier_init(&comm.bar, NULL, 2);
    struct fake_rank fr[2] = {{&comm, 0}, {&comm, 1}};
    struct md_bn_sync sync[2] = {{2, fake_allreduce, &fr[0]}, {2, fake_allreduce, &fr[1]}};
    struct rank_job job[2];
    pthread_t th[2];
    for (int r = 0; r < 2; r++) {
        job[r].dev = dev[r];
        job[r].a = args_for(&P[r], r ? n - n0 : n0, c, hw, lay, t, relu);
        job[r].a.sync = &sync[r];
        job[r].fwd = job[r].bwd = MD_ERR_INTERNAL;
        cr_assert_eq(pthread_create(&th[r], NULL, run_rank, &job[r]), 0);
    }
    for (int r = 0; r < 2; r++) pthread_join(th[r], NULL);
    pthread_barrier_destroy(&comm.bar);
    char what[160];
    snprintf(what, sizeof what, "%s %s %s relu %d n %d+%d", be, lay == MD_NHWC ? "NHWC" : "NCHW", md_dtype_name(t),
             relu, n0, n - n0);
    for (int r = 0; r < 2; r++) cr_assert(job[r].fwd == MD_OK && job[r].bwd == MD_OK, "%s: %s", what, md_errmsg());
    /* forward: two exchanges (mean, then M2), backward one */
    cr_assert(comm.calls[0] == 3 && comm.calls[1] == 3, "%s: %d and %d exchanges", what, comm.calls[0],
              comm.calls[1]);
    double tol = t == MD_F32 ? 2e-5 : 2e-2;
    char w2[200];
    for (int r = 0; r < 2; r++) {
        int nr = r ? n - n0 : n0;
        size_t off = r ? (size_t)n0 * per * es : 0;
        snprintf(w2, sizeof w2, "%s rank %d y", what, r);
        close_typed(w2, P[r].y, (char *)W.y + off, t, (size_t)nr * per, tol);
        snprintf(w2, sizeof w2, "%s rank %d dx", what, r);
        close_typed(w2, P[r].dx, (char *)W.dx + off, t, (size_t)nr * per, tol * 5);
        snprintf(w2, sizeof w2, "%s rank %d save_mean", what, r);
        cr_assert(th_allclose(w2, P[r].sm, W.sm, (size_t)c, 1e-5, 1e-6), "%s", w2);
        snprintf(w2, sizeof w2, "%s rank %d save_invstd", what, r);
        cr_assert(th_allclose(w2, P[r].si, W.si, (size_t)c, 1e-5, 1e-5), "%s", w2);
        snprintf(w2, sizeof w2, "%s rank %d running_mean", what, r);
        cr_assert(th_allclose(w2, P[r].rm, W.rm, (size_t)c, 1e-5, 1e-6), "%s", w2);
        snprintf(w2, sizeof w2, "%s rank %d running_var (unbiased, global count)", what, r);
        cr_assert(th_allclose(w2, P[r].rv, W.rv, (size_t)c, 1e-5, 1e-5), "%s", w2);
    }
    /* the parameters' gradients stay each rank's: their sum is the whole batch's */
    float dg[8], db[8];
    for (int i = 0; i < c; i++) {
        dg[i] = P[0].dg[i] + P[1].dg[i];
        db[i] = P[0].db[i] + P[1].db[i];
    }
    snprintf(w2, sizeof w2, "%s dgamma", what);
    cr_assert(th_allclose(w2, dg, W.dg, (size_t)c, tol * 10, tol), "%s", w2);
    snprintf(w2, sizeof w2, "%s dbeta", what);
    cr_assert(th_allclose(w2, db, W.db, (size_t)c, tol * 10, tol), "%s", w2);
    for (int r = 0; r < 2; r++) {
        free(P[r].y);
        free(P[r].dx);
    }
    free(W.x);
    free(W.y);
    free(W.dy);
    free(W.dx);
}

static void all_cases(md_device *const dev[2], const char *be)
{
    static const md_dtype dt[2] = {MD_F32, MD_BF16};
    for (int lay = 0; lay < 2; lay++)
        for (int di = 0; di < 2; di++)
            for (int relu = 0; relu < 2; relu++) {
                /* uneven parts: the count is exchanged too */
                check_case(dev, be, 6, 4, 3, 10, lay ? MD_NHWC : MD_NCHW, dt[di], relu);
                /* NHWC spans several 64-row chunks; NCHW long planes */
                check_case(dev, be, 8, 4, 5, 37, lay ? MD_NHWC : MD_NCHW, dt[di], relu);
            }
}

Test(bn_sync, two_parts_equal_the_whole_batch_cpu, .timeout = 60)
{
    const md_backend *b = md_backend_find("cpu");
    md_device *dev = NULL;
    struct md_device_opts o = {.threads = 2};
    cr_assert_eq(md_device_open(b, 0, &o, &dev), MD_OK, "%s", md_errmsg());
    cr_assert(md_dev_batchnorm_sync(dev));
    md_device *both[2] = {dev, dev};
    all_cases(both, "cpu");
    md_device_close(dev);
}

Test(bn_sync, two_parts_equal_the_whole_batch_ref, .timeout = 60)
{
    md_device *dev = kc_open_ref();
    cr_assert(md_dev_batchnorm_sync(dev));
    md_device *both[2] = {dev, dev};
    all_cases(both, "ref");
    md_device_close(dev);
}

/* The CUDA kernels, two handles on GPU 0 playing the ranks; without a
 * communicator their exchanges go through the host and the hook (the NCCL
 * path sums the same areas on the device). Skipped without a GPU. */
Test(bn_sync, two_parts_equal_the_whole_batch_cuda, .timeout = 60)
{
    const md_backend *b = md_backend_find("cuda");
    if (!b || !md_backend_probe(b)->available) {
        fprintf(stderr, "bn_sync cuda: skipped: %s\n", b ? md_backend_probe(b)->reason : "not registered");
        return;
    }
    struct md_device_opts o = {0};
    md_device *dev[2] = {NULL, NULL};
    for (int r = 0; r < 2; r++) cr_assert_eq(md_device_open(b, 0, &o, &dev[r]), MD_OK, "%s", md_errmsg());
    cr_assert(md_dev_batchnorm_sync(dev[0]));
    all_cases(dev, "cuda");
    for (int r = 0; r < 2; r++) md_device_close(dev[r]);
}

/* One rank with the hook's exchange left out: the same as local batch norm;
 * and evaluation ignores the hook. */
Test(bn_sync, one_rank_and_inference_equal_local, .timeout = 30)
{
    const md_backend *b = md_backend_find("cpu");
    md_device *dev = NULL;
    struct md_device_opts o = {.threads = 2};
    cr_assert_eq(md_device_open(b, 0, &o, &dev), MD_OK, "%s", md_errmsg());
    struct md_bn_sync one = {1, NULL, NULL};
    for (int lay = 0; lay < 2; lay++)
        for (int training = 0; training < 2; training++) {
            int n = 4, c = 3, hw = 9;
            size_t nx = (size_t)n * c * hw;
            struct bn_bufs A, B;
            float *x = malloc(nx * 4), *dy = malloc(nx * 4);
            kc_fill(x, nx, 21, 100.0f, 102.0f);
            kc_fill(dy, nx, 22, -1.0f, 1.0f);
            A.x = B.x = x;
            A.dy = B.dy = dy;
            A.y = malloc(nx * 4), B.y = malloc(nx * 4), A.dx = malloc(nx * 4), B.dx = malloc(nx * 4);
            kc_fill(A.g, (size_t)c, 23, 0.5f, 1.5f);
            kc_fill(A.b, (size_t)c, 24, -0.5f, 0.5f);
            kc_fill(A.rm, (size_t)c, 25, 100.0f, 101.0f);
            kc_fill(A.rv, (size_t)c, 26, 0.5f, 2.0f);
            memcpy(B.g, A.g, sizeof A.g), memcpy(B.b, A.b, sizeof A.b);
            memcpy(B.rm, A.rm, sizeof A.rm), memcpy(B.rv, A.rv, sizeof A.rv);
            struct md_batchnorm_args la = args_for(&A, n, c, hw, lay ? MD_NHWC : MD_NCHW, MD_F32, 1);
            struct md_batchnorm_args sa = args_for(&B, n, c, hw, lay ? MD_NHWC : MD_NCHW, MD_F32, 1);
            la.training = sa.training = training;
            sa.sync = &one;
            cr_assert_eq(md_k_batchnorm_fwd(dev, &la), MD_OK, "%s", md_errmsg());
            cr_assert_eq(md_k_batchnorm_fwd(dev, &sa), MD_OK, "%s", md_errmsg());
            cr_assert_eq(md_k_batchnorm_bwd(dev, &la), MD_OK, "%s", md_errmsg());
            cr_assert_eq(md_k_batchnorm_bwd(dev, &sa), MD_OK, "%s", md_errmsg());
            double tol = training ? 2e-5 : 0.0; /* inference: the same code, bit for bit */
            cr_assert(th_allclose("y", B.y, A.y, nx, tol, tol));
            cr_assert(th_allclose("dx", B.dx, A.dx, nx, tol * 5, tol));
            cr_assert(th_allclose("running_var", B.rv, A.rv, (size_t)c, tol, tol));
            cr_assert(th_allclose("dgamma", B.dg, A.dg, (size_t)c, tol * 10, tol));
            free(x), free(dy), free(A.y), free(B.y), free(A.dx), free(B.dx);
        }
    md_device_close(dev);
}
