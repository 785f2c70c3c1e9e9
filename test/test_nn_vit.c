/* test_nn_vit.c - the ViT layers (patch_embed, prefix_tokens, layer_scale,
 * token_pool, attention with timm's names) and configs: gradients against
 * central finite differences on the reference device, the CPU and the
 * simulated Metal backend against the reference, checkpointed against plain
 * gradients, the parameter counts of timm's DINOv2-with-registers models,
 * vit_tiny against PyTorch (test/fixtures/vit from scripts/torch_vit.py:
 * output, cross-entropy loss, every parameter gradient; a wrong token order
 * or pooling fails it), and the command line (training, --grad-ckpt,
 * --find-batch-size). The vit_metal_sim suite also runs in
 * build/metal-sim-tests, where "metal" is the simulated kernels. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "core/json.h"
#include "core/rng.h"
#include "core/safetensors.h"
#include "helpers.h"
#include "nn/model.h"

#define BATCH 2

/* Every new layer, each gradient path: a conv in front of patch_embed (its
 * input gradient), a tensor that feeds layer_scale and an add (an input
 * gradient that accumulates), both poolings. */
static const char *SMALL =
    "{\"name\":\"vit_small_test\",\"num_classes\":3,\"inputs\":[{\"name\":\"x\",\"shape\":[2,8,8]}],"
    "\"layers\":["
    " {\"name\":\"stem\",\"type\":\"conv2d\",\"out\":3,\"kernel\":1},"
    " {\"name\":\"patch_embed\",\"type\":\"patch_embed\",\"patch\":4,\"out\":8},"
    " {\"name\":\"pos_embed\",\"type\":\"pos_embedding\"},"
    " {\"name\":\"tokens\",\"type\":\"prefix_tokens\",\"cls\":1,\"registers\":2},"
    " {\"name\":\"ls0\",\"type\":\"layer_scale\",\"init\":0.7},"
    " {\"name\":\"add0\",\"type\":\"add\",\"inputs\":[\"tokens\",\"ls0\"]},"
    " {\"name\":\"norm1\",\"type\":\"layernorm\",\"eps\":1e-6},"
    " {\"name\":\"attn\",\"type\":\"attention\",\"heads\":2,\"names\":\"timm\"},"
    " {\"name\":\"ls1\",\"type\":\"layer_scale\",\"init\":0.5},"
    " {\"name\":\"add1\",\"type\":\"add\",\"inputs\":[\"add0\",\"ls1\"]},"
    " {\"name\":\"pool\",\"type\":\"token_pool\",\"mode\":\"%s\",\"prefix\":%d},"
    " {\"name\":\"head\",\"type\":\"linear\",\"out\":3}]}";

struct param {
    const char *k;
    double v;
};

/* A model from a config name or JSON text, bound for BATCH on d, with
 * seeded inputs. */
static md_model *make(const char *model, const struct param *p, int np, int ckpt, md_device *d)
{
    struct md_model_opts o;
    md_model_opts_default(&o);
    o.seed = 3;
    o.grad_ckpt = ckpt;
    for (int k = 0; k < np; k++) cr_assert_eq(md_model_opts_set(&o, p[k].k, p[k].v, 0), MD_OK, "%s", md_errmsg());
    md_model *m = NULL;
    if (model[0] == '{') {
        cJSON *j = NULL;
        cr_assert_eq(md_json_parse(model, "vit_test.json", &j), MD_OK, "%s", md_errmsg());
        cr_assert_eq(md_model_load("vit_test.json", j, &o, &m), MD_OK, "%s", md_errmsg());
        cJSON_Delete(j);
    } else {
        cr_assert_eq(md_model_load(model, NULL, &o, &m), MD_OK, "%s", md_errmsg());
    }
    cr_assert_eq(md_model_bind(m, d, BATCH), MD_OK, "%s", md_errmsg());
    md_rng r;
    md_rng_init(&r, 9);
    th_upload_inputs(m, BATCH, &r, 0, 2.0f, 0.3f, 5);
    return m;
}

static size_t out_numel(md_model *m)
{
    int c, h, w;
    md_model_output_shape(m, &c, &h, &w);
    return (size_t)BATCH * c * h * w;
}

/* Forward into y (host, out_numel) and, with g, backward of sum(y * R)
 * into g (host, nparams). */
static void step(md_model *m, const float *R, float *y, float *g)
{
    md_device *d = md_model_device(m);
    size_t ny = out_numel(m);
    cr_assert_eq(md_model_forward(m, BATCH, 1), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_dev_sync(d), MD_OK);
    cr_assert_eq(md_dev_download(d, y, md_model_logits(m), ny * 4), MD_OK);
    if (!g) return;
    void *Rd = NULL;
    cr_assert_eq(md_dev_alloc(d, ny * 4, &Rd, "R"), MD_OK);
    cr_assert_eq(md_dev_upload(d, Rd, R, ny * 4), MD_OK);
    cr_assert_eq(md_model_set_output_grad(m, Rd), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_model_backward(m), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_dev_sync(d), MD_OK);
    cr_assert_eq(md_model_get_grads_host(m, g), MD_OK);
    md_dev_free(d, Rd);
}

static float *make_R(size_t n)
{
    float *R = malloc(n * 4);
    for (size_t k = 0; k < n; k++) R[k] = (float)sin(0.37 * (double)k + 0.1);
    return R;
}

/* |x - ref| <= 1e-4 max|ref| + 1e-3 |ref|: elements outside (logs the first). */
static int differ(const char *what, const float *x, const float *ref, size_t n)
{
    double mx = 0;
    for (size_t k = 0; k < n; k++) mx = fmax(mx, fabs(ref[k]));
    int bad = 0;
    for (size_t k = 0; k < n; k++)
        if (!(fabs((double)x[k] - ref[k]) <= 1e-4 * mx + 1e-3 * fabs(ref[k])) && bad++ < 3)
            cr_log_error("%s[%zu]: %.8g, reference %.8g", what, k, x[k], ref[k]);
    return bad;
}

/* ---- finite differences ------------------------------------------------------------------ */

static void gradcheck(const char *mode, int prefix)
{
    char text[2048];
    snprintf(text, sizeof text, SMALL, mode, prefix);
    md_device *d = th_open_device("ref");
    md_model *m = make(text, NULL, 0, 0, d);
    size_t ny = out_numel(m), np = md_model_nparams(m);
    float *R = make_R(ny), *y = malloc(ny * 4), *g = malloc(np * 4), *p = malloc(np * 4);
    /* away from the initial values: class and register tokens start near 0,
     * where the LayerNorm of their rows (variance ~ eps) is far from linear */
    cr_assert_eq(md_model_get_params_host(m, p), MD_OK);
    md_rng r;
    md_rng_init(&r, 21);
    for (size_t k = 0; k < np; k++) p[k] += 0.3f * (2.0f * md_rng_next_uniform(&r) - 1.0f);
    cr_assert_eq(md_model_set_params_host(m, p), MD_OK);
    step(m, R, y, g);
    int checked = 0, bad = 0;
    for (int t = 0; t < md_model_num_tensors(m); t++) {
        const struct md_param_info *ti = md_model_tensor(m, t);
        double gmax = 0;
        for (size_t e = 0; e < ti->numel; e++) gmax = fmax(gmax, fabs(g[ti->offset + e]));
        size_t stride = ti->numel > 12 ? ti->numel / 12 : 1;
        for (size_t e = 0; e < ti->numel; e += stride) {
            size_t i = ti->offset + e;
            const float eps = 1e-2f, keep = p[i];
            double l[2];
            for (int s = 0; s < 2; s++) {
                p[i] = keep + (s ? -eps : eps);
                cr_assert_eq(md_model_set_params_host(m, p), MD_OK);
                step(m, NULL, y, NULL);
                l[s] = 0;
                for (size_t k = 0; k < ny; k++) l[s] += (double)y[k] * R[k];
            }
            p[i] = keep;
            double fd = (l[0] - l[1]) / (2.0 * eps);
            if (!(fabs(fd - g[i]) <= 2e-3 * fmax(gmax, 1.0) + 2e-2 * fabs(fd)) && bad++ < 5)
                cr_log_error("%s %s[%zu]: backward %.6g, finite differences %.6g", mode, ti->name, e, g[i], fd);
            checked++;
        }
    }
    cr_assert_eq(md_model_set_params_host(m, p), MD_OK);
    cr_assert_gt(checked, 100);
    cr_assert_eq(bad, 0, "%s: %d of %d gradients differ from finite differences", mode, bad, checked);
    free(R), free(y), free(g), free(p);
    md_model_free(m);
    md_device_close(d);
}

Test(nn_vit, gradients_cls_pool_match_finite_differences, .timeout = 120) { gradcheck("cls", 0); }
Test(nn_vit, gradients_mean_pool_match_finite_differences, .timeout = 120) { gradcheck("mean", 3); }
Test(nn_vit, gradients_both_pool_match_finite_differences, .timeout = 120) { gradcheck("both", 3); }

/* ---- devices against the reference ------------------------------------------------------ */

/* Output and gradients of `model` on `dev` and on the reference agree;
 * skips when the device cannot open. */
static void against_ref(const char *dev, const char *model, const struct param *p, int np, int ckpt)
{
    md_device *dd = th_try_device(dev);
    if (!dd) cr_skip_test("no %s device here (%s)", dev, md_errmsg());
    md_device *dr = th_try_device("ref");
    cr_assert(dr);
    md_model *mr = make(model, p, np, 0, dr), *md = make(model, p, np, ckpt, dd);
    size_t ny = out_numel(mr), ng = md_model_nparams(mr);
    float *R = make_R(ny), *yr = malloc(ny * 4), *yd = malloc(ny * 4), *gr = malloc(ng * 4), *gd = malloc(ng * 4);
    step(mr, R, yr, gr);
    step(md, R, yd, gd);
    int bad = differ("output", yd, yr, ny) + differ("gradients", gd, gr, ng);
    cr_assert_eq(bad, 0, "%s on %s: %d elements differ from the reference", model[0] == '{' ? "test model" : model,
                 dev, bad);
    free(R), free(yr), free(yd), free(gr), free(gd);
    md_model_free(mr);
    md_model_free(md);
    md_device_close(dd);
    md_device_close(dr);
}

static const struct param TINY_BOTH[] = {{"pool", 2}};

Test(nn_vit, cpu_matches_reference, .timeout = 120)
{
    char text[2048];
    snprintf(text, sizeof text, SMALL, "both", 3);
    against_ref("cpu", text, NULL, 0, 0);
    against_ref("cpu", "vit_tiny", TINY_BOTH, 1, 0);
}

Test(vit_metal_sim, small_model_matches_reference, .timeout = 300)
{
    char text[2048];
    snprintf(text, sizeof text, SMALL, "both", 3);
    against_ref("metal", text, NULL, 0, 0);
}

Test(vit_metal_sim, vit_tiny_matches_reference, .timeout = 300) { against_ref("metal", "vit_tiny", TINY_BOTH, 1, 0); }

/* Each block instance is its own checkpoint segment: the recomputed
 * gradients equal the plain ones bit for bit. */
Test(nn_vit, checkpointed_gradients_are_bit_identical, .timeout = 120)
{
    md_device *d = th_open_device("cpu");
    md_model *a = make("vit_tiny", TINY_BOTH, 1, 0, d), *b = make("vit_tiny", TINY_BOTH, 1, 1, d);
    size_t ny = out_numel(a), ng = md_model_nparams(a);
    float *R = make_R(ny), *y = malloc(ny * 4), *ga = malloc(ng * 4), *gb = malloc(ng * 4);
    step(a, R, y, ga);
    step(b, R, y, gb);
    cr_expect(memcmp(ga, gb, ng * 4) == 0, "checkpointed gradients differ");
    cr_expect_lt(md_model_activation_bytes(b, 64, 1), md_model_activation_bytes(a, 64, 1));
    free(R), free(y), free(ga), free(gb);
    md_model_free(a);
    md_model_free(b);
    md_device_close(d);
}

/* ---- configs ------------------------------------------------------------------------------ */

/* timm's vit_small_patch14_reg4_dinov2 / vit_base_patch14_reg4_dinov2 at
 * img_size 224 with num_classes=0 (scripts/torch_vit.py counts). */
Test(nn_vit, parameter_counts_equal_timm)
{
    static const struct {
        const char *model;
        long long n;
    } c[] = {{"vit_s14_reg4", 21629952LL}, {"vit_b14_reg4", 85727232LL}, {"vit_tiny", 27808LL}};
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
        struct md_model_opts o;
        md_model_opts_default(&o);
        cr_assert_eq(md_model_opts_set(&o, "num_outputs", 0, 0), MD_OK);
        md_model *m = NULL;
        cr_assert_eq(md_model_load(c[k].model, NULL, &o, &m), MD_OK, "%s", md_errmsg());
        cr_expect_eq((long long)md_model_nparams(m), c[k].n, "%s: %zu parameters, timm has %lld", c[k].model,
                     md_model_nparams(m), c[k].n);
        int found = 0;
        for (int t = 0; t < md_model_num_tensors(m); t++) {
            const char *nm = md_model_tensor(m, t)->name;
            found += !strcmp(nm, "blocks.1.attn.qkv.weight") || !strcmp(nm, "blocks.1.ls2.gamma") ||
                     !strcmp(nm, "tokens.reg_token") || !strcmp(nm, "patch_embed.proj.weight") ||
                     !strcmp(nm, "blocks.1.mlp.fc2.bias");
        }
        cr_expect_eq(found, 5, "%s: timm's tensor names", c[k].model);
        md_model_free(m);
    }
}

Test(nn_vit, config_errors_name_the_field)
{
    static const struct {
        const char *mode;
        int prefix;
        const char *want;
    } c[] = {{"max", 3, "mode: 'max' is not a pooling"}, {"mean", 19, "prefix: 19 prefix tokens leave none"}};
    for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
        char text[2048];
        snprintf(text, sizeof text, SMALL, c[k].mode, c[k].prefix);
        cJSON *j = NULL;
        cr_assert_eq(md_json_parse(text, "t.json", &j), MD_OK);
        struct md_model_opts o;
        md_model_opts_default(&o);
        md_model *m = NULL;
        cr_expect_neq(md_model_load("t.json", j, &o, &m), MD_OK);
        cr_expect(strstr(md_errmsg(), c[k].want), "%s", md_errmsg());
        cJSON_Delete(j);
        md_model_free(m);
    }
    struct md_model_opts o;
    md_model_opts_default(&o);
    cr_assert_eq(md_model_opts_set(&o, "img_size", 30, 0), MD_OK);
    md_model *m = NULL;
    cr_expect_neq(md_model_load("vit_tiny", NULL, &o, &m), MD_OK);
    cr_expect(strstr(md_errmsg(), "patch_embed.patch") || strstr(md_errmsg(), "patches"), "%s", md_errmsg());
}

/* ---- PyTorch ------------------------------------------------------------------------------- */

#define FIXTURE_DIR "test/fixtures/vit"

static int quiet;

/* vit_tiny with the fixture's weights on dev (pool: the config's 0..2);
 * the number of tensors (output, loss, gradients) that differ. */
static int torch_case(const char *dev, int pool)
{
    md_st_file *ref = NULL;
    cr_assert_eq(md_st_open(FIXTURE_DIR "/vit_tiny.ref.safetensors", &ref), MD_OK, "%s", md_errmsg());
    md_device *d = th_open_device(dev);
    struct param p[] = {{"pool", pool}};
    md_model *m = make("vit_tiny", p, 1, 0, d);
    cr_assert_eq(md_model_load_weights(m, FIXTURE_DIR "/vit_tiny.torch.safetensors"), MD_OK, "%s", md_errmsg());
    const struct md_st_tensor *x = md_st_find(ref, "input.image"), *lab = md_st_find(ref, "labels");
    cr_assert(x && lab && x->numel == BATCH * 28 * 28);
    cr_assert_eq(md_dev_upload(d, md_model_input_buffer(m, 0), x->data, x->nbytes), MD_OK);
    size_t ny = out_numel(m), ng = md_model_nparams(m);
    cr_assert_eq(ny, (size_t)BATCH * 10);
    /* the cross-entropy of our logits and its gradient (softmax - onehot) / n */
    float *y = malloc(ny * 4), *R = malloc(ny * 4), *g = malloc(ng * 4);
    step(m, NULL, y, NULL);
    double loss = 0;
    for (int b = 0; b < BATCH; b++) {
        const float *z = y + b * 10;
        double mx = z[0], s = 0;
        for (int k = 1; k < 10; k++) mx = fmax(mx, z[k]);
        for (int k = 0; k < 10; k++) s += exp(z[k] - mx);
        int label = ((const int32_t *)lab->data)[b];
        loss += (log(s) + mx - z[label]) / BATCH;
        for (int k = 0; k < 10; k++) R[b * 10 + k] = (float)((exp(z[k] - mx) / s - (k == label)) / BATCH);
    }
    step(m, R, y, g);
    char what[64];
    snprintf(what, sizeof what, "vit_tiny (pool %d) on %s", pool, dev);
    float lf = (float)loss;
    int bad = (th_compare_torch(ref, "output", y, ny, what, quiet) != 0) + (th_compare_torch(ref, "loss", &lf, 1, what, quiet) != 0);
    bad += th_compare_torch_grads(ref, m, what, quiet);
    cr_assert_eq(md_model_num_tensors(m), 37);
    free(y), free(R), free(g);
    md_model_free(m);
    md_device_close(d);
    md_st_close(ref);
    return bad;
}

Test(nn_vit, vit_tiny_matches_pytorch_ref, .timeout = 60) { cr_assert_eq(torch_case("ref", 0), 0); }
Test(nn_vit, vit_tiny_matches_pytorch_cpu, .timeout = 60) { cr_assert_eq(torch_case("cpu", 0), 0); }

/* The comparison sees the pooling: the mean of the patch tokens instead of
 * the class token gives other outputs and gradients. */
Test(nn_vit, wrong_pooling_fails_the_pytorch_comparison, .timeout = 60)
{
    quiet = 1;
    int bad = torch_case("ref", 1);
    quiet = 0;
    cr_assert_gt(bad, 20, "only %d tensors differ", bad);
}

/* ---- the command line ----------------------------------------------------------------------- */

Test(nn_vit, vit_tiny_trains_with_grad_ckpt_and_finds_a_batch_size, .timeout = 240)
{
    char *dir = th_tmpdir(), args[1024], *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "--model vit_tiny --device cpu --dataset synthetic --max-samples 256 --epochs 2 "
             "--batch-size 32 --grad-ckpt --checkpoint-dir %s --overwrite", dir);
    int rc = th_run(args, &out, &err);
    cr_assert_eq(rc, 0, "%s\n%s", out, err);
    cr_expect(strstr(out, "Parameters: 28,138"), "%s", out);
    cr_expect(strstr(out, "gradient checkpointing on"), "%s", out);
    free(out), free(err);
    snprintf(args, sizeof args, "--model vit_tiny --device cpu --dataset synthetic --max-samples 256 --epochs 0 "
             "--find-batch-size --grad-ckpt --checkpoint-dir %s --overwrite", dir);
    rc = th_run(args, &out, &err);
    cr_assert_eq(rc, 0, "%s\n%s", out, err);
    cr_expect(strstr(out, "atch"), "%s", out);
    free(out), free(err);
    th_tmpdir_free(dir);
}

/* "What is the largest batch that fits?" --find-batch-size with --grad-ckpt under a
 * --memory-fraction cap of a few MiB (a fraction of this machine's RAM), on vit_tiny and on the
 * two-stream tiled ViT: the binary search ends on max + 1 failing, the benchmark runs at the
 * largest fit, and with --batch-sweep the fastest of the swept batches that fit is named. */
static void find_batch(const char *model_args, double cap_mib, const char *sweep)
{
    char *dir = th_tmpdir(), args[2048], *out = NULL, *err = NULL, rep[700];
    double total = (double)sysconf(_SC_PHYS_PAGES) * (double)sysconf(_SC_PAGESIZE);
    snprintf(rep, sizeof rep, "%s/r.json", dir);
    snprintf(args, sizeof args,
             "%s --device cpu --benchmark-only --find-batch-size --grad-ckpt --memory-fraction %.8f "
             "--batch-sweep %s --bench-iters 2 --warmup-iters 1 --max-samples 32 --report %s",
             model_args, cap_mib * 1048576.0 / total, sweep, rep);
    int rc = th_run(args, &out, &err);
    cr_assert_eq(rc, 0, "%s\n%s\n%s", args, out, err);
    cr_assert(strstr(out, "gradient checkpointing on"), "%s", out);
    cJSON *r = th_load_json(rep);
    const cJSON *b = cJSON_GetObjectItem(r, "benchmark"), *f = cJSON_GetObjectItem(b, "find_batch_size");
    cr_assert(f, "no benchmark.find_batch_size: %s", out);
    int fit = cJSON_GetObjectItem(f, "max_batch")->valueint;
    cr_assert_gt(fit, 0);
    cr_assert_lt(fit, 256, "the cap must stop the search (got %d)", fit);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(f, "limited_by_search_cap")));
    cr_assert_eq(cJSON_GetObjectItem(b, "batch_size")->valueint, fit, "benchmarked at the largest fit");
    int fail_above = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, cJSON_GetObjectItem(f, "tried"))
    {
        int bs = cJSON_GetObjectItem(t, "batch_size")->valueint, fits = cJSON_IsTrue(cJSON_GetObjectItem(t, "fits"));
        cr_assert_eq(fits, bs <= fit, "batch %d: fits %d, but the largest fit is %d", bs, fits, fit);
        fail_above |= bs == fit + 1 && !fits;
    }
    cr_assert(fail_above, "the search must end on %d failing", fit + 1);
    char want[96];
    snprintf(want, sizeof want, "largest batch that fits: %d (%d does not)", fit, fit + 1);
    cr_assert(strstr(out, want), "no '%s' in\n%s", want, out);
    const cJSON *fast = cJSON_GetObjectItem(f, "fastest_batch");
    cr_assert(cJSON_IsNumber(fast), "no fastest batch with --batch-sweep %s", sweep);
    char item[16];
    snprintf(item, sizeof item, ",%d,", fast->valueint);
    char list[64];
    snprintf(list, sizeof list, ",%s,", sweep);
    cr_assert(fast->valueint <= fit && strstr(list, item), "fastest batch %d: not a swept batch that fits (%s)",
              fast->valueint, sweep);
    cr_assert_gt(cJSON_GetObjectItem(f, "fastest_samples_per_s")->valuedouble, 0);
    cJSON_Delete(r);
    free(out), free(err);
    th_tmpdir_free(dir);
}

Test(nn_vit, find_batch_size_with_grad_ckpt_vit_tiny, .timeout = 120)
{
    find_batch("--model vit_tiny --dataset synthetic", 3, "4,8");
}

Test(nn_vit, find_batch_size_with_grad_ckpt_two_stream, .timeout = 120)
{
    find_batch("--model vit_tiled_two_stream_tiny --data-dir data/green-cover-sample "
               "--target-cols green_cover,brightness,blue_cover",
               6, "2,4");
}
