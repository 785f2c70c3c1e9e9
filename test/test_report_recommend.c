/* test_report_recommend.c - recommendations from fabricated measurements,
 * and the chip presets in configs/presets. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "diag/preset.h"
#include "diag/recommend.h"
#include "helpers_rec.h"
#include "helpers.h"

static void dump(const struct md_rec *r, int n)
{
    for (int i = 0; i < n; i++) fprintf(stderr, "  [%s] %s | %s (%s)\n", r[i].topic, r[i].advice, r[i].figure, r[i].source);
}

Test(recommend, knee_within_memory_budget)
{
    /* throughput saturates at 128; 512 is fastest but over the 1 GiB budget */
    static const struct md_rec_sweep_point s[] = {
        {16, 1, 400, 100 * MiB, 0, 0, 1},   {32, 1, 700, 150 * MiB, 0, 0, 1},   {64, 1, 900, 250 * MiB, 0, 0, 1},
        {128, 1, 1000, 450 * MiB, 0, 0, 1}, {256, 1, 1020, 900 * MiB, 0, 0, 1}, {512, 1, 1100, 1800 * MiB, 0, 0, 1},
        {1024, 0, 0, 0, 0, 0, 0},
    };
    int best;
    cr_assert_eq(md_rec_knee(s, 7, GiB, 0.9, &best), 3, "128 reaches 1000 >= 0.9 x 1020");
    cr_assert_eq(best, 4, "best within budget is 256");
    cr_assert_eq(md_rec_knee(s, 7, 0, 0.9, &best), 3, "without a budget 512 is best and 128 still the knee");
    cr_assert_eq(best, 5);
    cr_assert_eq(md_rec_knee(s, 7, 50 * MiB, 0.9, &best), -1, "nothing fits 50 MiB");

    struct md_rec_in in = base();
    in.sweep = s;
    in.n_sweep = 7;
    in.device_memory = 2 * GiB;
    in.memory_limit = GiB;
    struct md_rec r[MD_REC_MAX];
    int n = md_recommend(&in, r, MD_REC_MAX);
    dump(r, n);
    const struct md_rec *b = find(r, n, "batch size");
    cr_assert_not_null(b);
    cr_assert_not_null(strstr(b->advice, "--batch-size 128"), "%s", b->advice);
    cr_assert_not_null(strstr(b->figure, "batch 128: 1000 samples/s"), "%s", b->figure);
    cr_assert_not_null(strstr(b->figure, "best batch 256"), "%s", b->figure);
    cr_assert_not_null(strstr(b->figure, "the sweep fitted 512 and not 1024"), "%s", b->figure);
    cr_assert_str_eq(b->source, "measured");

    in.batch_size = 128;
    n = md_recommend(&in, r, MD_REC_MAX);
    cr_assert_not_null(strstr(find(r, n, "batch size")->advice, "keep --batch-size 128"));
}

/* three interleaved on/off pairs: the machine drifts by 1%, the pairs agree on on/off within 0.2% */
static struct md_rec_ablation pairs(double on, double off)
{
    struct md_rec_ablation a;
    memset(&a, 0, sizeof a);
    a.n = 3;
    static const double wobble[3] = {1.0, 0.99, 1.01};
    for (int i = 0; i < 3; i++) {
        a.on[i] = on * wobble[i] * (1 + 0.002 * (i - 1)); /* pair ratios: 0.2% either side of on/off */
        a.off[i] = off * wobble[i];
    }
    return a;
}

Test(recommend, ablations_compile_channels_precision)
{
    struct md_rec_in in = base();
    in.kind = MD_BACKEND_CUDA;
    in.supports_bf16 = 1;
    in.supports_fp16 = 1;
    in.compile = 1;
    in.abl_compile = pairs(800, 1000);       /* compile hurts by 25% */
    in.abl_channels_last = pairs(1150, 1000); /* +15% */
    in.abl_precision = pairs(2500, 1000);     /* half 2.5x */
    struct md_rec r[MD_REC_MAX];
    int n = md_recommend(&in, r, MD_REC_MAX);
    dump(r, n);
    const struct md_rec *c = find(r, n, "compile");
    cr_assert_not_null(strstr(c->advice, "use --no-compile: training with compile off is 25% faster"), "%s", c->advice);
    cr_assert_not_null(strstr(c->figure, "on/off 0.80x, pairs 0.80-0.80x over 3 interleaved pairs"), "%s", c->figure);
    const struct md_rec *cl = find(r, n, "channels-last");
    cr_assert_not_null(strstr(cl->advice, "use --channels-last: training with NHWC (--channels-last) is 15% faster"),
                       "%s", cl->advice);
    const struct md_rec *p = find(r, n, "precision");
    cr_assert_not_null(strstr(p->advice, "use --amp (bf16 on this GPU): training with bf16 is 2.5x as fast"), "%s",
                       p->advice);
    /* within noise: either is fine */
    in.abl_compile = pairs(1010, 1000);
    n = md_recommend(&in, r, MD_REC_MAX);
    cr_assert_not_null(strstr(find(r, n, "compile")->advice, "no measurable difference"));
    /* not measured: no folklore about compile or channels-last */
    memset(&in.abl_compile, 0, sizeof in.abl_compile);
    memset(&in.abl_channels_last, 0, sizeof in.abl_channels_last);
    memset(&in.abl_precision, 0, sizeof in.abl_precision);
    n = md_recommend(&in, r, MD_REC_MAX);
    cr_assert_null(find(r, n, "compile"));
    cr_assert_null(find(r, n, "channels-last"));
    cr_assert_not_null(strstr(find(r, n, "precision")->advice, "--ablate precision"), "CUDA fp32: suggest measuring");
}

Test(recommend, data_loading_bottleneck_pinned_and_cache)
{
    struct md_rec_in in = base();
    in.kind = MD_BACKEND_CUDA;
    in.benefits_from_pinned = 1;
    in.num_workers = 0;
    in.loader_samples_per_s = 900;
    in.step_samples_per_s = 1000;
    in.dataset_bytes = 2 * GiB;
    in.ram_available = 16 * GiB;
    struct md_rec r[MD_REC_MAX];
    int n = md_recommend(&in, r, MD_REC_MAX);
    dump(r, n);
    const struct md_rec *d = find(r, n, "data loading");
    cr_assert_not_null(d);
    cr_assert_not_null(strstr(d->advice, "--num-workers 2 and --pin-memory"), "%s", d->advice);
    cr_assert_not_null(strstr(d->figure, "loader 900 samples/s vs training step 1000 samples/s (0.90x)"), "%s", d->figure);
    const struct md_rec *c = find(r, n, "image caching");
    cr_assert_not_null(c);
    cr_assert_not_null(strstr(c->figure, "decoded images 2.00 GiB, RAM available 16.00 GiB"), "%s", c->figure);
    /* loader far ahead: no bottleneck; pinned memory still advised on CUDA */
    in.loader_samples_per_s = 50000;
    n = md_recommend(&in, r, MD_REC_MAX);
    cr_assert_null(find(r, n, "data loading"));
    cr_assert_not_null(find(r, n, "pinned memory"));
    /* cache that would not fit */
    in.cache_images = 1;
    in.dataset_bytes = 15 * GiB;
    n = md_recommend(&in, r, MD_REC_MAX);
    cr_assert_not_null(strstr(find(r, n, "image caching")->advice, "drop --cache-images"));
    /* resident formats (IDX) never get caching advice */
    in.dataset_resident = 1;
    n = md_recommend(&in, r, MD_REC_MAX);
    cr_assert_null(find(r, n, "image caching"));
}

Test(recommend, gradient_checkpointing_and_blas)
{
    struct md_rec_in in = base();
    in.params_bytes = 10 * MiB;
    in.grads_bytes = 10 * MiB;
    in.optimizer_bytes = 10 * MiB;
    in.activations_bytes = 170 * MiB; /* 85% */
    in.peak_bytes = 200 * MiB;
    in.memory_limit = 256 * MiB;      /* peak at 78% of the cap */
    in.blas_warning = "OpenBLAS chose its Haswell kernels; OPENBLAS_CORETYPE=SkylakeX may double GEMM throughput";
    in.gemm_peak_gflops = 123.4;
    struct md_rec r[MD_REC_MAX];
    int n = md_recommend(&in, r, MD_REC_MAX);
    dump(r, n);
    const struct md_rec *g = find(r, n, "gradient checkpointing");
    cr_assert_not_null(g);
    cr_assert_not_null(strstr(g->advice, "use --grad-ckpt"), "%s", g->advice);
    cr_assert_not_null(strstr(g->figure, "(85%)"), "%s", g->figure);
    const struct md_rec *b = find(r, n, "OpenBLAS kernels");
    cr_assert_not_null(b);
    cr_assert_not_null(strstr(b->figure, "123.4 GFLOP/s"), "%s", b->figure);
    /* activations a minority: nothing */
    in.activations_bytes = 5 * MiB;
    n = md_recommend(&in, r, MD_REC_MAX);
    cr_assert_null(find(r, n, "gradient checkpointing"));
    /* already on: nothing */
    in.activations_bytes = 170 * MiB;
    in.grad_ckpt = 1;
    n = md_recommend(&in, r, MD_REC_MAX);
    cr_assert_null(find(r, n, "gradient checkpointing"));
    /* the max is respected */
    cr_assert_eq(md_recommend(&in, r, 1), 1);
}

Test(recommend, chip_presets)
{
    static const struct { const char *chip; const char *preset; int batch; const char *mode; } cases[] = {
        {"Apple M1", "M1", 256, "reduce-overhead"},
        {"Apple M1 Pro", "M1 Pro/Max", 512, "default"},
        {"Apple M1 Max", "M1 Pro/Max", 512, "default"},
        {"Apple M2", "M2", 512, "default"},
        {"Apple M2 Pro", "M2 Pro/Max", 768, "max-autotune"},
        {"Apple M2 Max", "M2 Pro/Max", 768, "max-autotune"},
        {"Apple M3", "M3 series", 768, "max-autotune"},
        {"Apple M3 Max", "M3 series", 768, "max-autotune"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct md_preset p;
        int found = 0;
        cr_assert_eq(md_preset_find("configs/presets", cases[i].chip, &p, &found), MD_OK, "%s", md_errmsg());
        cr_assert(found, "%s: no preset", cases[i].chip);
        cr_assert_str_eq(p.chip, cases[i].preset, "%s", cases[i].chip);
        cr_assert_eq(p.batch_size, cases[i].batch, "%s", cases[i].chip);
        cr_assert_str_eq(p.compile_mode, cases[i].mode, "%s", cases[i].chip);
    }
    struct md_preset p;
    int found = 1;
    cr_assert_eq(md_preset_find("configs/presets", "Apple M20", &p, &found), MD_OK);
    cr_assert_not(found, "whole-word prefix only");
    cr_assert_eq(md_preset_find("configs/presets", "NVIDIA H100", &p, &found), MD_OK);
    cr_assert_not(found);

    /* the preset stands in for measurements on Metal, and says so */
    cr_assert_eq(md_preset_find("configs/presets", "Apple M2 Pro", &p, &found), MD_OK);
    struct md_rec_in in = base();
    in.kind = MD_BACKEND_METAL;
    in.preset = &p;
    struct md_rec r[MD_REC_MAX];
    int n = md_recommend(&in, r, MD_REC_MAX);
    dump(r, n);
    const struct md_rec *b = find(r, n, "batch size");
    cr_assert_not_null(b);
    cr_assert_str_eq(b->source, "preset");
    cr_assert_not_null(strstr(b->advice, "768-1024"), "%s", b->advice);
    cr_assert_not_null(strstr(find(r, n, "compile")->advice, "--compile-mode max-autotune"));
    cr_assert_not_null(find(r, n, "model size"));
}

Test(recommend, preset_errors_name_file_and_key)
{
    char *dir = th_tmpdir();
    char *bad = th_write(dir, "bad.json",
                         "{\"chip\":\"X\",\"match\":[\"Apple X\"],\"source\":\"s\",\"batch_size\":8,\"batch_size_max\":8,"
                         "\"image_batch_size\":8,\"d_model\":1,\"d_ff\":1,\"seq_len_max\":1,\"compile_mode\":\"fast\","
                         "\"model_memory_gb\":1,\"memory_fraction\":0.8}");
    struct md_preset p;
    cr_assert_eq(md_preset_load(bad, &p), MD_ERR_CONFIG);
    cr_assert_not_null(strstr(md_errmsg(), "compile_mode"), "%s", md_errmsg());
    char *extra = th_write(dir, "extra.json", "{\"chip\":\"X\",\"bogus\":1}");
    cr_assert_eq(md_preset_load(extra, &p), MD_ERR_CONFIG);
    cr_assert_not_null(strstr(md_errmsg(), "unknown key 'bogus'"), "%s", md_errmsg());
    /* every shipped preset loads */
    static const char *const shipped[] = {"m1", "m1-pro-max", "m2", "m2-pro-max", "m3"};
    for (size_t i = 0; i < 5; i++) {
        char path[256];
        snprintf(path, sizeof path, "configs/presets/%s.json", shipped[i]);
        cr_assert_eq(md_preset_load(path, &p), MD_OK, "%s", md_errmsg());
    }
    free(bad);
    free(extra);
    th_tmpdir_free(dir);
}
