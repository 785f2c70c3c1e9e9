/* cuda_kbench.c - kernel-level timings of mpsdiag's CUDA backend, for
 * scripts/bench/cuda_vs_torch.sh (which runs the same shapes through
 * PyTorch and prints the ratio table).
 *
 * Built against mpsdiag's objects (not part of `make`):
 *   cc -O2 -std=c11 -Isrc scripts/bench/cuda_kbench.c <build/obj/src/... minus main.o> \
 *      metal stub, libs, -rdynamic -o kbench
 * Output: one tab-separated line per case: name, dtype, median ms, TFLOP/s (or GB/s).
 * Inputs are random (never zeros); each case is warmed up, then every
 * iteration is timed with device events and the median is printed.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/backend_impl.h"
#include "backend/kernels_call.h"
#include "core/rng.h"
#include "core/status.h"
#include "core/tensor.h"
#include "core/timer.h"
#include "nn/model.h"

#define BENCH_NAME "kbench"
#include "bench_common.h"

typedef md_status (*step_fn)(void *ctx);
static void *graph_tmp;
static md_status graph_tmp_step(void *ctx)
{
    (void)ctx;
    return md_dev_graph_launch(dev, graph_tmp);
}
static float time_it(step_fn f, void *ctx, int warm, int iters);

static float time_it(step_fn f, void *ctx, int warm, int iters)
{
    md_event *e[2];
    float ms[256];
    if (iters > 256) iters = 256;
    CK(md_event_create(dev, &e[0]), "event");
    CK(md_event_create(dev, &e[1]), "event");
    for (int i = 0; i < warm; i++) CK(f(ctx), "warm-up");
    for (int i = 0; i < iters; i++) {
        CK(md_event_record(dev, e[0]), "record");
        CK(f(ctx), "run");
        CK(md_event_record(dev, e[1]), "record");
        CK(md_event_elapsed_ms(dev, e[0], e[1], &ms[i]), "elapsed");
    }
    md_event_destroy(dev, e[0]);
    md_event_destroy(dev, e[1]);
    qsort(ms, (size_t)iters, sizeof ms[0], cmpf);
    return ms[iters / 2];
}

/* Graph-replayed ms of one call of f (10 calls captured, replayed). */
static float graph_ms(step_fn f, void *ctx)
{
    CK(md_dev_sync(dev), "sync");
    void *g = NULL;
    CK(md_dev_capture_begin(dev), "capture");
    for (int i = 0; i < 10; i++) CK(f(ctx), "capture run");
    CK(md_dev_capture_end(dev, &g), "capture end");
    void *saved = graph_tmp;
    graph_tmp = g;
    float ms = time_it(graph_tmp_step, NULL, 2, 10) / 10;
    graph_tmp = saved;
    md_dev_graph_destroy(dev, g);
    return ms;
}

/* Host time per call (enqueue only) and device time per call when 10 calls
 * are captured into a graph and replayed (no host work in between). */
static void host_and_graph(step_fn f, void *ctx, const char *name, md_dtype t, double flops)
{
    CK(md_dev_sync(dev), "sync");
    double t0 = md_now();
    for (int i = 0; i < 20; i++) CK(f(ctx), "run");
    double host_ms = (md_now() - t0) * 1e3 / 20;
    float ms = graph_ms(f, ctx);
    printf("%s_graph\t%s\t%.4f\t%.1f\n", name, md_dtype_name(t), ms, flops / (ms * 1e-3) / 1e12);
    printf("%s_host\t%s\t%.4f\t0\n", name, md_dtype_name(t), host_ms);
}

static md_status gemm_step(void *ctx) { return md_k_gemm(dev, (const struct md_gemm_args *)ctx); }
static md_status conv_fwd_step(void *ctx) { return md_k_conv2d_fwd(dev, (const struct md_conv2d_args *)ctx); }
static md_status conv_bd_step(void *ctx) { return md_k_conv2d_bwd_data(dev, (const struct md_conv2d_args *)ctx); }
static md_status conv_bf_step(void *ctx) { return md_k_conv2d_bwd_filter(dev, (const struct md_conv2d_args *)ctx); }

static void bench_gemm(int m, int n, int k, md_dtype t)
{
    void *a = rnd((size_t)m * k, t, 1), *b = rnd((size_t)k * n, t, 2), *c = rnd((size_t)m * n, t, 3);
    struct md_gemm_args g = {.m = m, .n = n, .k = k, .alpha = 1, .a = a, .lda = k, .b = b, .ldb = n, .c = c,
                             .ldc = n, .batch = 1, .dtype = t};
    float ms = time_it(gemm_step, &g, 3, 20);
    printf("gemm_%dx%dx%d\t%s\t%.4f\t%.1f\n", m, n, k, md_dtype_name(t), ms, 2.0 * m * n * k / (ms * 1e-3) / 1e12);
    md_dev_free(dev, a);
    md_dev_free(dev, b);
    md_dev_free(dev, c);
}

struct cshape { const char *name; int n, c, h, w, k, r, s, stride, pad; };

static void bench_conv(const struct cshape *cs, md_dtype t)
{
    int p = md_conv_out(cs->h, cs->r, cs->stride, cs->pad, 1), q = md_conv_out(cs->w, cs->s, cs->stride, cs->pad, 1);
    size_t nx = (size_t)cs->n * cs->c * cs->h * cs->w, nw = (size_t)cs->k * cs->c * cs->r * cs->s;
    size_t ny = (size_t)cs->n * cs->k * p * q;
    void *x = rnd(nx, t, 4), *w = rnd(nw, t, 5), *y = rnd(ny, t, 6), *dy = rnd(ny, t, 7), *dx = rnd(nx, t, 8),
         *dw = rnd(nw, t, 9);
    struct md_conv2d_args a = {.n = cs->n, .c = cs->c, .h = cs->h, .w = cs->w, .k = cs->k, .r = cs->r, .s = cs->s,
                               .p = p, .q = q, .stride_h = cs->stride, .stride_w = cs->stride, .pad_h = cs->pad,
                               .pad_w = cs->pad, .dil_h = 1, .dil_w = 1, .groups = 1, .layout = MD_NHWC, .dtype = t,
                               .x = x, .wt = w, .y = y, .dx = dx, .dwt = dw, .dy = dy};
    double fl = 2.0 * ny * cs->c * cs->r * cs->s;
    if (getenv("KBENCH_BETA1")) { /* accumulate into the outputs, as a tensor feeding two layers */
        char nm[128];
        a.beta = 1.0f;
        snprintf(nm, sizeof nm, "conv_%s_bwd_data_beta1", cs->name);
        host_and_graph(conv_bd_step, &a, nm, t, fl);
        snprintf(nm, sizeof nm, "conv_%s_fwd_beta1", cs->name);
        host_and_graph(conv_fwd_step, &a, nm, t, fl);
        a.beta = 0.0f;
    }
    float f = time_it(conv_fwd_step, &a, 3, 20);
    float bd = time_it(conv_bd_step, &a, 3, 20);
    float bf = time_it(conv_bf_step, &a, 3, 20);
    printf("conv_%s_fwd\t%s\t%.4f\t%.1f\n", cs->name, md_dtype_name(t), f, fl / (f * 1e-3) / 1e12);
    printf("conv_%s_bwd_data\t%s\t%.4f\t%.1f\n", cs->name, md_dtype_name(t), bd, fl / (bd * 1e-3) / 1e12);
    printf("conv_%s_bwd_filter\t%s\t%.4f\t%.1f\n", cs->name, md_dtype_name(t), bf, fl / (bf * 1e-3) / 1e12);
    char nm[128];
    snprintf(nm, sizeof nm, "conv_%s_fwd", cs->name);
    host_and_graph(conv_fwd_step, &a, nm, t, fl);
    snprintf(nm, sizeof nm, "conv_%s_bwd_data", cs->name);
    host_and_graph(conv_bd_step, &a, nm, t, fl);
    snprintf(nm, sizeof nm, "conv_%s_bwd_filter", cs->name);
    host_and_graph(conv_bf_step, &a, nm, t, fl);
    md_dev_free(dev, x);
    md_dev_free(dev, w);
    md_dev_free(dev, y);
    md_dev_free(dev, dy);
    md_dev_free(dev, dx);
    md_dev_free(dev, dw);
}

struct bn_ctx { struct md_batchnorm_args a; };
static md_status bn_step(void *ctx)
{
    struct md_batchnorm_args *a = (struct md_batchnorm_args *)ctx;
    MD_TRY(md_k_batchnorm_fwd(dev, a));
    return md_k_batchnorm_bwd(dev, a);
}

static void bench_bn(int n, int c, int hw, md_dtype t)
{
    size_t nx = (size_t)n * c * hw;
    void *x = rnd(nx, t, 10), *y = rnd(nx, t, 11), *dy = rnd(nx, t, 12), *dx = rnd(nx, t, 13);
    float *g = rnd(c, MD_F32, 14), *b = rnd(c, MD_F32, 15), *rm = rnd(c, MD_F32, 16), *rv = rnd(c, MD_F32, 17);
    float *sm = rnd(c, MD_F32, 18), *si = rnd(c, MD_F32, 19), *dg = rnd(c, MD_F32, 20), *db = rnd(c, MD_F32, 21);
    struct md_batchnorm_args a = {.n = n, .c = c, .hw = hw, .layout = MD_NHWC, .dtype = t, .training = 1,
                                  .eps = 1e-5f, .momentum = 0.1f, .act = MD_ACT_RELU, .x = x, .y = y, .gamma = g,
                                  .beta_p = b, .running_mean = rm, .running_var = rv, .save_mean = sm,
                                  .save_invstd = si, .dy = dy, .dx = dx, .dgamma = dg, .dbeta = db};
    float ms = time_it(bn_step, &a, 3, 20);
    char nm[96];
    snprintf(nm, sizeof nm, "bn_relu_fwd_bwd_%dx%dx%d", n, c, hw);
    host_and_graph(bn_step, &a, nm, t, 0);
    /* fewest bytes: fwd reads x twice, writes y; bwd reads x, y, dy twice, writes dx */
    double bytes = (double)nx * md_dtype_size(t) * 9;
    printf("bn_relu_fwd_bwd_%dx%dx%d\t%s\t%.4f\t%.0f\n", n, c, hw, md_dtype_name(t), ms, bytes / (ms * 1e-3) / 1e9);
}

static md_status bnf_step(void *ctx) { return md_k_batchnorm_fwd(dev, (const struct md_batchnorm_args *)ctx); }
static md_status bnb_step(void *ctx) { return md_k_batchnorm_bwd(dev, (const struct md_batchnorm_args *)ctx); }
static md_status copy_step(void *ctx)
{
    struct md_batchnorm_args *a = (struct md_batchnorm_args *)ctx;
    return md_dev_copy(dev, a->dx, a->dy, (size_t)a->n * a->c * a->hw * md_dtype_size(a->dtype));
}

/* Batch norm + ReLU passes apart, on the shapes of resnet18_cifar (b256)
 * and resnet50 (b128), NHWC, graph-replayed: the training forward
 * (statistics + apply), the inference forward (apply), the backward (sums +
 * dx, mask from y), and a device copy of the same tensor; GB/s over the
 * fewest bytes (3, 2, 7 and 2 tensors). */
static void bench_bn_parts(md_dtype t)
{
    static const int sh[][4] = {{256, 64, 32, 32}, {256, 128, 16, 16}, {256, 256, 8, 8}, {256, 512, 4, 4},
                                {128, 64, 56, 56}, {128, 256, 56, 56}, {128, 128, 28, 28}, {128, 512, 28, 28},
                                {128, 256, 14, 14}, {128, 1024, 14, 14}, {128, 512, 7, 7}, {128, 2048, 7, 7}};
    double tot[4] = {0};
    for (size_t k = 0; k < sizeof sh / sizeof sh[0]; k++) {
        int n = sh[k][0], c = sh[k][1], hw = sh[k][2] * sh[k][3];
        size_t nx = (size_t)n * c * hw;
        void *x = rnd(nx, t, 10), *y = rnd(nx, t, 11), *dy = rnd(nx, t, 12), *dx = rnd(nx, t, 13);
        float *g = rnd(c, MD_F32, 14), *b = rnd(c, MD_F32, 15), *rm = rnd(c, MD_F32, 16), *rv = rnd(c, MD_F32, 17);
        float *sm = rnd(c, MD_F32, 18), *si = rnd(c, MD_F32, 19), *dg = rnd(c, MD_F32, 20), *db = rnd(c, MD_F32, 21);
        float *ones = malloc((size_t)c * sizeof *ones); /* positive running variances (inference) */
        for (int i = 0; i < c; i++) ones[i] = 1.0f;
        CK(md_dev_upload(dev, rv, ones, (size_t)c * sizeof *ones), "running variances");
        free(ones);
        struct md_batchnorm_args a = {.n = n, .c = c, .hw = hw, .layout = MD_NHWC, .dtype = t, .training = 1,
                                      .eps = 1e-5f, .momentum = 0.1f, .act = MD_ACT_RELU, .x = x, .y = y,
                                      .gamma = g, .beta_p = b, .running_mean = rm, .running_var = rv,
                                      .save_mean = sm, .save_invstd = si, .dy = dy, .dx = dx, .dgamma = dg,
                                      .dbeta = db};
        CK(bnf_step(&a), "fwd"); /* the saved statistics backward reads */
        float ft = graph_ms(bnf_step, &a), fb = graph_ms(bnb_step, &a);
        a.training = 0;
        float fi = graph_ms(bnf_step, &a);
        float cp = graph_ms(copy_step, &a);
        double bytes = (double)nx * md_dtype_size(t);
        printf("bnparts_%dx%dx%d\t%s\tfwd %.4f ms %4.0f GB/s\tinfer %.4f ms %4.0f GB/s\tbwd %.4f ms %4.0f GB/s\t"
               "copy %.4f ms %4.0f GB/s\n", n, c, hw, md_dtype_name(t), ft, 3 * bytes / (ft * 1e-3) / 1e9, fi,
               2 * bytes / (fi * 1e-3) / 1e9, fb, 7 * bytes / (fb * 1e-3) / 1e9, cp, 2 * bytes / (cp * 1e-3) / 1e9);
        tot[0] += ft, tot[1] += fi, tot[2] += fb, tot[3] += cp;
        void *all[] = {x, y, dy, dx, g, b, rm, rv, sm, si, dg, db};
        for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) md_dev_free(dev, all[i]);
    }
    printf("bnparts_total\t%s\tfwd %.3f ms\tinfer %.3f ms\tbwd %.3f ms\tcopy %.3f ms\n", md_dtype_name(t), tot[0],
           tot[1], tot[2], tot[3]);
}

/* Launch-bound: 200 small element-wise kernels eagerly vs one replayed graph. */
static void *small_a, *small_b;
static md_status small_step(void *ctx)
{
    (void)ctx;
    struct md_ew_args e = {.op = MD_EW_AXPBY, .n = 4096, .dtype = MD_F32, .alpha = 1.0f, .beta = 0.999f,
                           .a = small_a, .b = small_b, .y = small_b};
    for (int i = 0; i < 200; i++) MD_TRY(md_k_ew(dev, &e));
    return MD_OK;
}
static void *graph;
static md_status graph_step(void *ctx)
{
    (void)ctx;
    return md_dev_graph_launch(dev, graph);
}

static void bench_launch(void)
{
    small_a = rnd(4096, MD_F32, 22);
    small_b = rnd(4096, MD_F32, 23);
    float eager = time_it(small_step, NULL, 3, 20);
    CK(md_dev_capture_begin(dev), "capture");
    CK(small_step(NULL), "capture step");
    CK(md_dev_capture_end(dev, &graph), "capture end");
    float rep = time_it(graph_step, NULL, 3, 20);
    printf("launch_200_small_eager\tfp32\t%.4f\t%.2f\n", eager, eager * 1e3 / 200);
    printf("launch_200_small_graph\tfp32\t%.4f\t%.2f\n", rep, rep * 1e3 / 200);
    md_dev_graph_destroy(dev, graph);
}

/* ---- whole training step: forward, loss, backward, SGD (momentum 0.9, wd on
 * the decayed part), eagerly and as one replayed CUDA graph ---- */
struct step_ctx {
    md_model *m;
    int batch;
    int32_t *labels;
    float *loss;
    float *mom;
    long long t;
};

static md_status train_step(void *ctx)
{
    struct step_ctx *c = (struct step_ctx *)ctx;
    md_model *m = c->m;
    MD_TRY(md_model_forward(m, c->batch, 1));
    MD_TRY(md_model_loss(m, c->labels, 0.0f, 1.0f / (float)c->batch, c->loss, NULL));
    MD_TRY(md_model_backward(m));
    size_t nd = md_model_ndecay(m), np = md_model_nparams(m);
    void *half = md_model_params_half(m);
    md_dtype ht = md_model_get_opts(m)->compute_dtype;
    struct md_optim_args o = {.kind = MD_OPT_SGD, .n = nd, .lr = 0.01f, .momentum = 0.9f, .weight_decay = 5e-4f,
                              .step = c->t + 2, .grad_scale = 1.0f, .params = md_model_params(m),
                              .grads = md_model_grads(m), .m = c->mom, .params_half = half, .half_dtype = ht};
    MD_TRY(md_k_optim(dev, &o));
    o.n = np - nd;
    o.weight_decay = 0;
    o.params += nd;
    o.grads += nd;
    o.m += nd;
    if (half) o.params_half = (char *)half + nd * md_dtype_size(ht);
    return o.n ? md_k_optim(dev, &o) : MD_OK;
}

static md_status graph_step_replay(void *ctx)
{
    (void)ctx;
    return md_dev_graph_launch(dev, graph_tmp);
}

static void bench_step(const char *model, int batch, md_dtype t)
{
    struct md_model_opts o;
    md_model_opts_default(&o);
    o.layout = MD_NHWC;
    o.compute_dtype = t;
    o.compile = getenv("KBENCH_NO_COMPILE") ? 0 : 1;
    struct step_ctx c = {.batch = batch};
    CK(md_model_load(model, NULL, &o, &c.m), "model load");
    CK(md_model_bind(c.m, dev, batch), "model bind");
    int ch, h, w;
    md_model_input_shape(c.m, 0, &ch, &h, &w);
    size_t nin = (size_t)batch * ch * h * w;
    float *in = malloc(nin * sizeof *in);
    for (size_t i = 0; i < nin; i++) in[i] = 2.0f * md_rng_uniform(99, i) - 1.0f;
    CK(md_dev_upload(dev, md_model_input_buffer(c.m, 0), in, nin * sizeof *in), "upload input");
    free(in);
    int32_t *lab = malloc((size_t)batch * sizeof *lab);
    int classes = md_model_num_classes(c.m);
    for (int i = 0; i < batch; i++) lab[i] = (int32_t)(md_rng_hash(7, (uint64_t)i) % (uint64_t)classes);
    CK(md_dev_alloc(dev, (size_t)batch * 4, (void **)&c.labels, "labels"), "labels");
    CK(md_dev_upload(dev, c.labels, lab, (size_t)batch * 4), "labels");
    free(lab);
    CK(md_dev_alloc(dev, 4, (void **)&c.loss, "loss"), "loss");
    CK(md_dev_memset0(dev, c.loss, 4), "loss");
    CK(md_dev_alloc(dev, md_model_nparams(c.m) * 4, (void **)&c.mom, "momentum"), "momentum");
    CK(md_dev_memset0(dev, c.mom, md_model_nparams(c.m) * 4), "momentum");
    double fl = md_model_flops_train(c.m) * batch;
    float eager = time_it(train_step, &c, 3, 20);
    double t0 = md_now();
    md_status st = md_dev_capture_begin(dev), st2 = MD_OK;
    void *g = NULL;
    if (st == MD_OK) {
        st = train_step(&c);
        st2 = md_dev_capture_end(dev, &g);
    }
    double cap_ms = (md_now() - t0) * 1e3;
    if (st != MD_OK || st2 != MD_OK) {
        fprintf(stderr, "kbench: %s: capture failed: %s\n", model, md_errmsg());
    } else {
        graph_tmp = g;
        float rep = time_it(graph_step_replay, NULL, 3, 20);
        printf("step_%s_b%d_graph\t%s\t%.4f\t%.1f\n", model, batch, md_dtype_name(t), rep, fl / (rep * 1e-3) / 1e12);
        fprintf(stderr, "kbench: %s %s capture+instantiate %.1f ms\n", model, md_dtype_name(t), cap_ms);
        md_dev_graph_destroy(dev, g);
    }
    printf("step_%s_b%d\t%s\t%.4f\t%.1f\n", model, batch, md_dtype_name(t), eager, fl / (eager * 1e-3) / 1e12);
    fflush(stdout);
    float loss = 0;
    CK(md_dev_download(dev, &loss, c.loss, 4), "loss");
    if (!(loss == loss)) fprintf(stderr, "kbench: %s: loss is NaN\n", model);
    md_dev_free(dev, c.labels);
    md_dev_free(dev, c.loss);
    md_dev_free(dev, c.mom);
    md_model_free(c.m);
}

/* ---- per-kernel profile of one eager step: every entry of the device's
 * kernel table is wrapped with two events (a benchmarking hack: the table is
 * patched in place) and GPU time is summed per kernel ---- */
#define PROF_MAX 4096
static struct md_kernels prof_orig;
static md_event *prof_ev[PROF_MAX][2];
static int prof_kind[PROF_MAX], prof_n;
static double prof_ms[MD_KERNEL_COUNT];
static struct md_conv2d_args prof_conv[PROF_MAX]; /* shapes of the convolution calls */
static int prof_calls[MD_KERNEL_COUNT];
static double prof_host[MD_KERNEL_COUNT]; /* host seconds inside the kernel call */

#define PROF_WRAP(op, argt, idx)                                                                     \
    static md_status prof_##op(md_device *d, const struct argt *a)                                   \
    {                                                                                                \
        int i = prof_n < PROF_MAX ? prof_n++ : -1;                                                   \
        if (i >= 0) {                                                                                \
            prof_kind[i] = idx;                                                                      \
            md_event_record(d, prof_ev[i][0]);                                                       \
        }                                                                                            \
        double h0_ = md_now();                                                                       \
        md_status st = prof_orig.op(d, a);                                                           \
        prof_host[idx] += md_now() - h0_;                                                            \
        if (i >= 0) md_event_record(d, prof_ev[i][1]);                                               \
        return st;                                                                                   \
    }
PROF_WRAP(gemm, md_gemm_args, 0)
#define PROF_WRAP_CONV(op, idx)                                                                      \
    static md_status prof_##op(md_device *d, const struct md_conv2d_args *a)                         \
    {                                                                                                \
        if (prof_n < PROF_MAX) prof_conv[prof_n] = *a;                                               \
        int i = prof_n < PROF_MAX ? prof_n++ : -1;                                                   \
        if (i >= 0) {                                                                                \
            prof_kind[i] = idx;                                                                      \
            md_event_record(d, prof_ev[i][0]);                                                       \
        }                                                                                            \
        double h0_ = md_now();                                                                       \
        md_status st = prof_orig.op(d, a);                                                           \
        prof_host[idx] += md_now() - h0_;                                                            \
        if (i >= 0) md_event_record(d, prof_ev[i][1]);                                               \
        return st;                                                                                   \
    }
PROF_WRAP_CONV(conv2d_fwd, 1)
PROF_WRAP_CONV(conv2d_bwd_data, 2)
PROF_WRAP_CONV(conv2d_bwd_filter, 3)
PROF_WRAP(batchnorm_fwd, md_batchnorm_args, 4)
PROF_WRAP(batchnorm_bwd, md_batchnorm_args, 5)
PROF_WRAP(act_fwd, md_act_args, 6)
PROF_WRAP(act_bwd, md_act_args, 7)
PROF_WRAP(pool2d_fwd, md_pool2d_args, 8)
PROF_WRAP(pool2d_bwd, md_pool2d_args, 9)
PROF_WRAP(gap_fwd, md_gap_args, 10)
PROF_WRAP(gap_bwd, md_gap_args, 11)
PROF_WRAP(bias_add, md_bias_args, 12)
PROF_WRAP(bias_grad, md_bias_args, 13)
PROF_WRAP(dropout_fwd, md_dropout_args, 14)
PROF_WRAP(dropout_bwd, md_dropout_args, 15)
PROF_WRAP(ew, md_ew_args, 16)
PROF_WRAP(reduce, md_reduce_args, 17)
PROF_WRAP(chslice, md_chslice_args, 18)
PROF_WRAP(xent, md_xent_args, 19)
PROF_WRAP(cast, md_cast_args, 20)
PROF_WRAP(permute, md_permute_args, 21)
PROF_WRAP(optim, md_optim_args, 22)

static void bench_profile(const char *model, int batch, md_dtype t)
{
    struct md_backend_ops *ops = (struct md_backend_ops *)(uintptr_t)dev->ops;
    prof_orig = ops->kernels;
    struct md_kernels *k = &ops->kernels;
    k->gemm = prof_gemm; k->conv2d_fwd = prof_conv2d_fwd; k->conv2d_bwd_data = prof_conv2d_bwd_data;
    k->conv2d_bwd_filter = prof_conv2d_bwd_filter; k->batchnorm_fwd = prof_batchnorm_fwd;
    k->batchnorm_bwd = prof_batchnorm_bwd; k->act_fwd = prof_act_fwd; k->act_bwd = prof_act_bwd;
    k->pool2d_fwd = prof_pool2d_fwd; k->pool2d_bwd = prof_pool2d_bwd; k->gap_fwd = prof_gap_fwd;
    k->gap_bwd = prof_gap_bwd; k->bias_add = prof_bias_add; k->bias_grad = prof_bias_grad;
    k->dropout_fwd = prof_dropout_fwd; k->dropout_bwd = prof_dropout_bwd; k->ew = prof_ew; k->reduce = prof_reduce;
    k->chslice = prof_chslice; k->xent = prof_xent; k->cast = prof_cast; k->permute = prof_permute;
    k->optim = prof_optim;
    for (int i = 0; i < PROF_MAX; i++) {
        CK(md_event_create(dev, &prof_ev[i][0]), "event");
        CK(md_event_create(dev, &prof_ev[i][1]), "event");
    }
    struct md_model_opts o;
    md_model_opts_default(&o);
    o.layout = MD_NHWC;
    o.compute_dtype = t;
    if (getenv("KBENCH_NO_COMPILE")) o.compile = 0; /* profile what --no-compile runs */
    struct step_ctx c = {.batch = batch};
    CK(md_model_load(model, NULL, &o, &c.m), "model load");
    CK(md_model_bind(c.m, dev, batch), "model bind");
    CK(md_dev_alloc(dev, (size_t)batch * 4, (void **)&c.labels, "labels"), "labels");
    CK(md_dev_memset0(dev, c.labels, (size_t)batch * 4), "labels");
    CK(md_dev_alloc(dev, 4, (void **)&c.loss, "loss"), "loss");
    CK(md_dev_alloc(dev, md_model_nparams(c.m) * 4, (void **)&c.mom, "momentum"), "momentum");
    CK(md_dev_memset0(dev, c.mom, md_model_nparams(c.m) * 4), "momentum");
    for (int w = 0; w < 3; w++) {
        prof_n = 0;
        CK(train_step(&c), "step");
    }

    prof_n = 0;
    memset(prof_ms, 0, sizeof prof_ms);
    memset(prof_calls, 0, sizeof prof_calls);
    memset(prof_host, 0, sizeof prof_host);
    /* ~80 ms of matrix products queued first keep the GPU busy while the host
     * enqueues the whole step, so each event pair measures device time only. */
    int bn = 8192;
    void *ba = rnd((size_t)bn * bn, MD_BF16, 31), *bb = rnd((size_t)bn * bn, MD_BF16, 32), *bc = rnd((size_t)bn * bn, MD_BF16, 33);
    struct md_gemm_args bg = {.m = bn, .n = bn, .k = bn, .alpha = 1, .a = ba, .lda = bn, .b = bb, .ldb = bn, .c = bc,
                              .ldc = bn, .batch = 1, .dtype = MD_BF16};
    for (int i = 0; i < 60; i++) CK(prof_orig.gemm(dev, &bg), "busy gemm");
    CK(train_step(&c), "step");
    CK(md_dev_sync(dev), "sync");
    md_dev_free(dev, ba);
    md_dev_free(dev, bb);
    md_dev_free(dev, bc);
    double total = 0;
    for (int i = 0; i < prof_n; i++) {
        float ms = 0;
        CK(md_event_elapsed_ms(dev, prof_ev[i][0], prof_ev[i][1], &ms), "elapsed");
        prof_ms[prof_kind[i]] += ms;
        if (prof_kind[i] >= 1 && prof_kind[i] <= 3 && ms > 0.08f) {
            const struct md_conv2d_args *q = &prof_conv[i];
            printf("# slow %s %.3f ms: n%d c%d %dx%d k%d %dx%d s%d p%d beta %g\n", md_kernel_names[prof_kind[i]], ms,
                   q->n, q->c, q->h, q->w, q->k, q->r, q->s, q->stride_h, q->pad_h, q->beta);
        }
        prof_calls[prof_kind[i]]++;
        total += ms;
    }
    printf("# profile %s b%d %s: %d kernel calls, %.3f ms summed\n", model, batch, md_dtype_name(t), prof_n, total);
    for (int i = 0; i < MD_KERNEL_COUNT; i++)
        if (prof_calls[i])
            printf("prof_%s_%s\t%s\t%.4f\t%d\thost_ms %.3f\n", model, md_kernel_names[i], md_dtype_name(t), prof_ms[i],
                   prof_calls[i], prof_host[i] * 1e3);
    md_dev_free(dev, c.labels);
    md_dev_free(dev, c.loss);
    md_dev_free(dev, c.mom);
    md_model_free(c.m);
    for (int i = 0; i < PROF_MAX; i++) {
        md_event_destroy(dev, prof_ev[i][0]);
        md_event_destroy(dev, prof_ev[i][1]);
    }
    ops->kernels = prof_orig;
}

int main(int argc, char **argv)
{
    const char *only = argc > 1 ? argv[1] : "all";
    struct md_device_opts o = {.allow_tf32 = 1};
    const char *devname = getenv("KBENCH_DEVICE"); /* "cpu" for a dry run of the step code */
    const md_backend *b = md_backend_find(devname && *devname ? devname : "cuda");
    const struct md_probe *p = md_backend_probe(b);
    if (!p->available) {
        fprintf(stderr, "kbench: cuda unavailable: %s\n", p->reason);
        return 4;
    }
    CK(md_device_open(b, 0, &o, &dev), "open");
    const struct md_device_info *in = md_device_get_info(dev);
    fprintf(stderr, "kbench: %s, %d SMs, %s, %s\n", in->name, in->compute_units, in->blas, in->dnn);
    if (!strcmp(only, "all") || !strcmp(only, "gemm")) {
        bench_gemm(8192, 8192, 8192, MD_BF16);
        bench_gemm(4096, 4096, 4096, MD_BF16);
        bench_gemm(8192, 8192, 8192, MD_F32);
        bench_gemm(4096, 4096, 4096, MD_F32);
        bench_gemm(128, 1000, 2048, MD_BF16);
    }
    if (!strcmp(only, "all") || !strcmp(only, "conv")) {
        static const struct cshape cs[] = {
            {"r50_conv1_7x7s2", 128, 3, 224, 224, 64, 7, 7, 2, 3},
            {"r50_l1_3x3", 128, 64, 56, 56, 64, 3, 3, 1, 1},
            {"r50_l1_1x1_64to256", 128, 64, 56, 56, 256, 1, 1, 1, 0},
            {"r50_l2_3x3", 128, 128, 28, 28, 128, 3, 3, 1, 1},
            {"r50_l3_3x3", 128, 256, 14, 14, 256, 3, 3, 1, 1},
            {"r50_l3_1x1_1024to256", 128, 1024, 14, 14, 256, 1, 1, 1, 0},
            {"r50_l4_3x3", 128, 512, 7, 7, 512, 3, 3, 1, 1},
            {"r18c_l1_3x3", 256, 64, 32, 32, 64, 3, 3, 1, 1},
        };
        for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
            bench_conv(&cs[i], MD_BF16);
            bench_conv(&cs[i], MD_F32);
        }
    }
    if (!strcmp(only, "conv18")) {
        static const struct cshape cs[] = {
            {"r18c_l1_3x3", 256, 64, 32, 32, 64, 3, 3, 1, 1},
            {"r18c_l2_3x3s2", 256, 64, 32, 32, 128, 3, 3, 2, 1},
            {"r18c_l2_1x1s2", 256, 64, 32, 32, 128, 1, 1, 2, 0},
            {"r18c_l3_3x3", 256, 256, 8, 8, 256, 3, 3, 1, 1},
        };
        for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) bench_conv(&cs[i], MD_BF16);
    }
    if (!strcmp(only, "all") || !strcmp(only, "bn")) {
        bench_bn(128, 64, 56 * 56, MD_BF16);
        bench_bn(128, 256, 56 * 56, MD_BF16);
        bench_bn(128, 64, 56 * 56, MD_F32);
    }
    if (!strcmp(only, "bnparts")) {
        bench_bn_parts(MD_BF16);
        bench_bn_parts(MD_F32);
    }
    if (!strcmp(only, "all") || !strcmp(only, "launch")) bench_launch();
    if (!strcmp(only, "profile50"))
        bench_profile("resnet50", 128, getenv("KBENCH_F32") ? MD_F32 : MD_BF16);
    if (!strcmp(only, "profile")) {
        bench_profile("resnet50", 128, MD_BF16);
        bench_profile("resnet18_cifar", 256, MD_BF16);
        bench_profile("small_cnn", 256, MD_BF16);
        bench_profile("small_cnn", 256, MD_F32);
    }
    if (!strcmp(only, "all") || !strcmp(only, "step")) {
        static const struct { const char *name; int batch; } ms[] = {
            {"small_cnn", 256}, {"resnet18_cifar", 256}, {"resnet50", 128}};
        int nb = argc > 2 ? atoi(argv[2]) : 0, nm = argc > 3 ? atoi(argv[3]) : 3;
        for (int i = 0; i < nm; i++) {
            bench_step(ms[i].name, nb > 0 ? nb : ms[i].batch, MD_F32);
            bench_step(ms[i].name, nb > 0 ? nb : ms[i].batch, MD_BF16);
        }
    }
    struct md_mem_stats ms;
    md_dev_mem_stats(dev, &ms);
    fprintf(stderr, "kbench: memory current %lld peak %lld reserved %lld\n", ms.current, ms.peak, ms.reserved);
    md_device_close(dev);
    return 0;
}
