/* bench_step.c - times mpsdiag's training step (forward, loss, backward, SGD
 * step) of one model on one device, for scripts/bench/cpu_step_vs_torch.sh.
 * Built as build/bench_step by `make build/bench_step`; not part of mpsdiag.
 *
 *   bench_step MODEL BATCH [ITERS [WARMUP [THREADS [DEVICE [FLAGS]]]]]
 *   FLAGS: comma-separated channels_last, grad_ckpt, no_compile, fp16, bf16
 *
 * A regression model (no classes) runs backward from a fixed output gradient
 * instead of the cross-entropy loss.
 * Prints one JSON line: model, batch, threads, device, median and p95 step
 * time in ms, samples/s, peak device bytes. With BENCH_PHASES=1 in the
 * environment it also prints, to stderr, the mean time of each phase of the
 * timed steps (forward, loss, backward, optimizer, sync), then runs one more
 * step, not timed, with a sync around every layer (md_model_profile_begin)
 * and prints the layers that took the most in it. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/kernels_call.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/rng.h"
#include "core/blas_core.h"
#include "core/timer.h"
#include "nn/model.h"

static int fail(const char *what)
{
    fprintf(stderr, "bench_step: %s: %s\n", what, md_errmsg());
    return 1;
}

int main(int argc, char **argv)
{
    md_blas_core_choose(argv); /* OpenBLAS's kernels as mpsdiag runs them */
    if (argc < 3) {
        fprintf(stderr, "usage: bench_step MODEL BATCH [ITERS [WARMUP [THREADS [DEVICE [FLAGS]]]]]\n");
        return 2;
    }
    md_log_init(MD_QUIET);
    const char *model = argv[1];
    int batch = atoi(argv[2]);
    int iters = argc > 3 ? atoi(argv[3]) : 20;
    int warmup = argc > 4 ? atoi(argv[4]) : 3;
    int threads = argc > 5 ? atoi(argv[5]) : 0;
    const char *devname = argc > 6 ? argv[6] : "cpu";
    const char *flags = argc > 7 ? argv[7] : "";
    if (batch < 1 || iters < 1 || warmup < 0) return 2;

    struct md_model_opts mo;
    md_model_opts_default(&mo);
    if (strstr(flags, "channels_last")) mo.layout = MD_NHWC;
    if (strstr(flags, "grad_ckpt")) mo.grad_ckpt = 1;
    if (strstr(flags, "no_compile")) mo.compile = 0;
    if (strstr(flags, "fp16")) mo.compute_dtype = MD_F16;
    if (strstr(flags, "bf16")) mo.compute_dtype = MD_BF16;

    const md_backend *b = md_backend_find(devname);
    if (!b) { fprintf(stderr, "bench_step: no backend %s\n", devname); return 2; }
    struct md_device_opts dopts;
    memset(&dopts, 0, sizeof dopts);
    dopts.threads = threads;
    md_device *dev = NULL;
    md_model *m = NULL;
    if (md_device_open(b, 0, &dopts, &dev) != MD_OK) return fail("device");
    if (md_model_load(model, NULL, &mo, &m) != MD_OK) return fail("model");
    if (md_model_bind(m, dev, batch) != MD_OK) return fail("bind");

    /* random inputs in [-1, 1), labels 0..classes-1 */
    for (int i = 0; i < md_model_num_inputs(m); i++) {
        int c, h, w;
        md_model_input_shape(m, i, &c, &h, &w);
        size_t n = (size_t)batch * c * h * w;
        float *x = md_malloc(n * sizeof *x);
        md_rng r;
        md_rng_init(&r, 1 + (uint64_t)i);
        for (size_t k = 0; k < n; k++) x[k] = 2.0f * md_rng_next_uniform(&r) - 1.0f;
        md_dev_upload(dev, md_model_input_buffer(m, i), x, n * sizeof *x);
        md_free(x);
    }
    int32_t *labels = md_malloc((size_t)batch * sizeof *labels), *labels_dev = NULL;
    int classes = md_model_num_classes(m), regression = md_model_is_regression(m);
    for (int i = 0; i < batch; i++) labels[i] = classes > 0 ? i % classes : 0;
    /* a regression model (the tiled two-stream ones): backward from a fixed output gradient */
    int oc, oh, ow;
    md_model_output_shape(m, &oc, &oh, &ow);
    size_t nout = (size_t)batch * oc * oh * ow;
    float *dy = md_malloc(nout * sizeof *dy), *dy_dev = NULL;
    for (size_t k = 0; k < nout; k++) dy[k] = 1.0f / (float)nout;
    if (md_dev_alloc(dev, nout * 4, (void **)&dy_dev, "output gradient") != MD_OK) return fail("alloc");
    md_dev_upload(dev, dy_dev, dy, nout * 4);
    float *loss_dev = NULL, *mom = NULL;
    size_t np = md_model_nparams(m);
    if (md_dev_alloc(dev, (size_t)batch * 4, (void **)&labels_dev, "labels") != MD_OK ||
        md_dev_alloc(dev, 4, (void **)&loss_dev, "loss") != MD_OK ||
        md_dev_alloc(dev, np * 4, (void **)&mom, "momentum") != MD_OK)
        return fail("alloc");
    md_dev_upload(dev, labels_dev, labels, (size_t)batch * 4);
    md_dev_memset0(dev, mom, np * 4);

    double *t = md_malloc((size_t)iters * sizeof *t);
    const char *pe = getenv("BENCH_PHASES");
    int phases = pe && pe[0] == '1';
    int nl = md_model_num_layers(m);
    double ph[5] = {0, 0, 0, 0, 0}, *lf = NULL, *lb = NULL;
    if (phases) {
        lf = md_calloc((size_t)nl, sizeof *lf);
        lb = md_calloc((size_t)nl, sizeof *lb);
    }
    for (int it = -warmup; it < iters + phases; it++) {
        if (it == iters && md_model_profile_begin(m) != MD_OK) return fail("profile");
        double t0 = md_now(), tp[5];
        md_model_set_step(m, (uint64_t)(it + warmup));
        if (md_dev_memset0(dev, loss_dev, 4) != MD_OK) return fail("memset");
        if (md_model_forward(m, batch, 1) != MD_OK) return fail("forward");
        tp[0] = md_now();
        if (regression ? md_model_set_output_grad(m, dy_dev) != MD_OK
                       : md_model_loss(m, labels_dev, 0.0f, 1.0f / (float)batch, loss_dev, NULL) != MD_OK)
            return fail("loss");
        tp[1] = md_now();
        if (md_model_backward(m) != MD_OK) return fail("backward");
        tp[2] = md_now();
        /* the same SGD step as the PyTorch side: lr 0.01, momentum 0.9, weight decay 5e-4 on all */
        struct md_optim_args o;
        memset(&o, 0, sizeof o);
        o.kind = MD_OPT_SGD;
        o.n = np;
        o.lr = 0.01f;
        o.momentum = 0.9f;
        o.weight_decay = 5e-4f;
        o.step = it + warmup + 1;
        o.grad_scale = 1.0f;
        o.params = md_model_params(m);
        o.grads = md_model_grads(m);
        o.m = mom;
        o.params_half = md_model_params_half(m);
        o.half_dtype = mo.compute_dtype;
        if (md_k_optim(dev, &o) != MD_OK) return fail("optimizer");
        tp[3] = md_now();
        float loss;
        if (md_dev_download(dev, &loss, loss_dev, 4) != MD_OK) return fail("sync");
        tp[4] = md_now();
        if (it >= 0 && it < iters) t[it] = (tp[4] - t0) * 1e3;
        if (it >= 0 && it < iters && phases)
            for (int k = 0; k < 5; k++) ph[k] += (tp[k] - (k ? tp[k - 1] : t0)) * 1e3 / iters;
    }
    if (phases) {
        if (md_model_profile_end(m, lf, lb) != MD_OK) return fail("profile");
        static const char *const names[5] = {"forward", "loss", "backward", "optimizer", "sync"};
        fprintf(stderr, "phases, mean ms of %d steps:", iters);
        for (int k = 0; k < 5; k++) fprintf(stderr, " %s %.3f", names[k], ph[k]);
        fprintf(stderr, "\nlayers of one more step with a sync around each, ms (forward / backward):\n");
        for (int shown = 0; shown < 12 && shown < nl; shown++) {
            int best = -1;
            for (int i = 0; i < nl; i++)
                if (lf[i] + lb[i] >= 0 && (best < 0 || lf[i] + lb[i] > lf[best] + lb[best])) best = i;
            if (best < 0 || lf[best] + lb[best] <= 0) break;
            fprintf(stderr, "  %-24s %-12s %8.3f %8.3f\n", md_model_layer_name(m, best), md_model_layer_type(m, best),
                    lf[best], lb[best]);
            lf[best] = lb[best] = -1;
        }
        md_free(lf);
        md_free(lb);
    }
    md_stats s = md_stats_of(t, (size_t)iters);
    struct md_mem_stats ms;
    md_dev_mem_stats(dev, &ms);
    printf("{\"impl\":\"mpsdiag\",\"model\":\"%s\",\"batch\":%d,\"threads\":%d,\"device\":\"%s\",\"flags\":\"%s\","
           "\"median_ms\":%.3f,\"p95_ms\":%.3f,\"samples_per_s\":%.1f,\"peak_device_bytes\":%lld}\n",
           model, batch, md_device_get_info(dev)->compute_units, devname, flags, s.p50, s.p95,
           batch * 1e3 / s.p50, ms.peak);
    md_free(t);
    md_free(labels);
    md_free(dy);
    md_dev_free(dev, dy_dev);
    md_dev_free(dev, labels_dev);
    md_dev_free(dev, loss_dev);
    md_dev_free(dev, mom);
    md_model_free(m);
    md_device_close(dev);
    return 0;
}
