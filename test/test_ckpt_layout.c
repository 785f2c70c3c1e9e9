/* test_ckpt_layout.c - files written for others hold PyTorch's layout
 * whatever the device's: convolution filters (K, C/groups, R, S), activations
 * NCHW. Checkpoints of a channels-last run, their optimizer state,
 * --dump-grads files; readers (--resume, --init-from) convert back, so a
 * checkpoint moves between --channels-last and --no-channels-last runs, and a
 * file whose metadata names another layout is refused. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/log.h"
#include "core/safetensors.h"
#include "core/signals.h"
#include "nn/model.h"
#include "train/trainer.h"
#include "helpers.h"
#include "helpers_job.h"

/* Two convolutions with several input channels (a 1-channel filter reads the
 * same in both layouts), BN, pooling, a linear classifier. */
static const char two_conv[] =
    "{\"name\": \"two_conv\", \"num_classes\": 10, \"inputs\": [{\"name\": \"image\", \"shape\": [1, 28, 28]}],\n"
    " \"layers\": [\n"
    "  {\"name\": \"conv1\", \"type\": \"conv2d\", \"out\": 4, \"kernel\": 3, \"padding\": 1, \"bias\": false},\n"
    "  {\"name\": \"bn1\", \"type\": \"batchnorm\"}, {\"name\": \"relu1\", \"type\": \"relu\"},\n"
    "  {\"name\": \"pool1\", \"type\": \"maxpool\", \"kernel\": 2},\n"
    "  {\"name\": \"conv2\", \"type\": \"conv2d\", \"out\": 6, \"kernel\": 3, \"padding\": 1},\n"
    "  {\"name\": \"bn2\", \"type\": \"batchnorm\"}, {\"name\": \"relu2\", \"type\": \"relu\"},\n"
    "  {\"name\": \"pool2\", \"type\": \"maxpool\", \"kernel\": 7},\n"
    "  {\"name\": \"flatten\", \"type\": \"flatten\"},\n"
    "  {\"name\": \"fc\", \"type\": \"linear\", \"out\": \"$num_classes\"}]}\n";

/* Runs the job of the flags printf(fmt, ...) to its end; fails the test
 * unless it succeeds. */
__attribute__((format(printf, 2, 3))) static void job_ok(struct th_job *r, const char *fmt, ...)
{
    char args[2600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    th_job_run(r, args, 0, 0);
    cr_assert_eq(r->st, MD_OK, "%s: %s", args, r->err);
}

static const char *common(const char *dir)
{
    static char b[2048];
    char *m = th_write(dir, "two_conv.json", two_conv);
    snprintf(b, sizeof b,
             "--device cpu --threads 1 --dataset synthetic --model %s --max-samples 96 --batch-size 16 "
             "--num-workers 0 --seed 11 --quiet --lr 0.05",
             m);
    free(m);
    return b;
}

Test(ckpt_layout, channels_last_checkpoint_holds_pytorch_layout, .timeout = 120)
{
    char *dir = th_tmpdir();
    char path[4200];
    struct th_job r;
    job_ok(&r, "%s --channels-last --epochs 1 --steps 2 --checkpoint-dir %s/ck", common(dir), dir);
    md_model *m = r.job.model;
    cr_assert_eq(md_model_get_opts(m)->layout, MD_NHWC);
    float *dev = th_download_flat(m, md_model_params(m));
    snprintf(path, sizeof path, "%s/ck/last.safetensors", dir);
    md_st_file *f;
    cr_assert_eq(md_st_open(path, &f), MD_OK, "%s", md_errmsg());
    const char *lay = md_st_meta(f, "tensor_layout");
    cr_assert(lay && strcmp(lay, "pytorch") == 0, "metadata tensor_layout is %s", lay ? lay : "missing");
    int convs = 0;
    for (int i = 0; i < md_model_num_tensors(m); i++) {
        const struct md_param_info *p = md_model_tensor(m, i);
        const struct md_st_tensor *t = md_st_find(f, p->name);
        cr_assert(t, "%s in the file", p->name);
        cr_assert_eq(t->ndim, p->ndim);
        for (int d = 0; d < p->ndim; d++) cr_assert_eq(t->shape[d], p->shape[d], "%s shape[%d]", p->name, d);
        const float *fv = t->data; /* mpsdiag's files are aligned */
        if (p->ndim != 4) {
            cr_assert_eq(memcmp(fv, dev + p->offset, p->numel * 4), 0, "%s as on the device", p->name);
            continue;
        }
        /* file[k][c][rs] == device[k][rs][c] */
        int K = p->shape[0], C = p->shape[1], RS = p->shape[2] * p->shape[3];
        size_t bad = 0;
        for (int k = 0; k < K; k++)
            for (int c = 0; c < C; c++)
                for (int j = 0; j < RS; j++)
                    bad += fv[((size_t)k * C + c) * RS + j] != dev[p->offset + ((size_t)k * RS + j) * C + c];
        cr_assert_eq(bad, 0, "%s: %zu of %zu elements are not the (K, C, R, S) permutation of the device filter",
                     p->name, bad, p->numel);
        convs++;
    }
    cr_assert_eq(convs, 2);
    md_st_close(f);
    free(dev);
    th_job_end(&r);
    th_tmpdir_free(dir);
}

/* Host parameters in PyTorch order after a run. Caller frees. */
static float *torch_params(struct th_job *r)
{
    float *h = malloc(md_model_nparams(r->job.model) * sizeof *h);
    cr_assert_eq(md_model_get_params_host(r->job.model, h), MD_OK, "%s", md_errmsg());
    return h;
}

/* Four steps of a channels-last run of 2 epochs x 3 steps with momentum,
 * then an interruption: the path of its checkpoint in ck. */
static void interrupted_run(const char *dir, const char *base, char *ck, size_t n)
{
    char args[2600];
    struct th_job a;
    snprintf(args, sizeof args, "%s --channels-last --epochs 2 --steps 3 --momentum 0.9 --checkpoint-dir %s/a", base,
             dir);
    th_job_run(&a, args, 4, 0);
    cr_assert_eq(a.st, MD_ERR_INTERRUPTED, "%s", a.err);
    th_job_end(&a);
    snprintf(ck, n, "%s/a/last.safetensors", dir);
}

Test(ckpt_layout, resume_across_layouts_equals_uninterrupted, .timeout = 180)
{
    char *dir = th_tmpdir();
    char ck[4200];
    const char *base = common(dir);
    /* the reference: two epochs in one channels-last run */
    struct th_job ref;
    job_ok(&ref, "%s --channels-last --epochs 2 --steps 3 --momentum 0.9 --checkpoint-dir %s/ref", base, dir);
    float *want = torch_params(&ref);
    size_t n = md_model_nparams(ref.job.model);
    th_job_end(&ref);
    /* four steps channels-last, interrupted; the rest in either layout */
    interrupted_run(dir, base, ck, sizeof ck);
    const char *layouts[2] = {"--no-channels-last", "--channels-last"};
    for (int l = 0; l < 2; l++) {
        struct th_job b;
        job_ok(&b, "%s %s --epochs 2 --steps 3 --momentum 0.9 --resume %s --checkpoint-dir %s/b%d", base, layouts[l], ck,
               dir, l);
        cr_assert_eq(md_model_get_opts(b.job.model)->layout, l ? MD_NHWC : MD_NCHW);
        float *got = torch_params(&b);
        /* NCHW and NHWC kernels sum in other orders: close, not bitwise */
        cr_assert(th_allclose(layouts[l], got, want, n, 1e-5, 1e-4), "resumed %s run differs from the "
                  "uninterrupted one", layouts[l]);
        free(got);
        th_job_end(&b);
    }
    free(want);
    th_tmpdir_free(dir);
}

/* two_conv (written into dir), unbound, in `layout` (caller frees). */
static md_model *load_two_conv(const char *dir, md_layout layout)
{
    char *cfg = th_write(dir, "two_conv.json", two_conv);
    struct md_model_opts mo;
    md_model_opts_default(&mo);
    mo.layout = layout;
    md_model *m;
    cr_assert_eq(md_model_load(cfg, NULL, &mo, &m), MD_OK, "%s", md_errmsg());
    free(cfg);
    return m;
}

/* Binds the two_conv model in `layout`, loads `path` as --init-from does and
 * returns the evaluation logits of `input` ((n, 1, 28, 28), NCHW). */
static float *logits_after_load(const char *dir, md_layout layout, const char *path, const float *input, int n,
                                md_status *st)
{
    md_model *m = load_two_conv(dir, layout);
    md_device *dev;
    struct md_device_opts dopts = {.threads = 1};
    cr_assert_eq(md_device_open(md_backend_find("cpu"), 0, &dopts, &dev), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_model_bind(m, dev, n), MD_OK, "%s", md_errmsg());
    float *out = NULL;
    *st = md_model_load_weights(m, path);
    if (*st == MD_OK) {
        /* one channel: NCHW and NHWC inputs are the same bytes */
        cr_assert_eq(md_dev_upload(dev, md_model_input_buffer(m, 0), input, (size_t)n * 784 * 4), MD_OK);
        cr_assert_eq(md_model_forward(m, n, 0), MD_OK, "%s", md_errmsg());
        out = malloc((size_t)n * 10 * sizeof *out);
        cr_assert_eq(md_dev_download(dev, out, md_model_logits(m), (size_t)n * 10 * 4), MD_OK);
        cr_assert_eq(md_dev_sync(dev), MD_OK);
    }
    md_model_free(m);
    md_device_close(dev);
    return out;
}

static void fixed_input(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++) x[i] = (float)sin(0.37 * (double)i) + 0.25f * (float)((i * 7919) % 13) / 13.0f;
}

Test(ckpt_layout, init_from_gives_the_trained_logits_in_both_layouts, .timeout = 120)
{
    char *dir = th_tmpdir();
    char ck[4200];
    struct th_job r;
    job_ok(&r, "%s --channels-last --epochs 1 --steps 3 --checkpoint-dir %s/ck", common(dir), dir);
    enum { N = 3 };
    float x[N * 784];
    fixed_input(x, N * 784);
    /* the trained model itself, in evaluation mode */
    md_model *m = r.job.model;
    cr_assert_eq(md_dev_upload(r.job.dev, md_model_input_buffer(m, 0), x, sizeof x), MD_OK);
    cr_assert_eq(md_model_forward(m, N, 0), MD_OK, "%s", md_errmsg());
    float want[N * 10];
    cr_assert_eq(md_dev_download(r.job.dev, want, md_model_logits(m), sizeof want), MD_OK);
    cr_assert_eq(md_dev_sync(r.job.dev), MD_OK);
    th_job_end(&r);
    snprintf(ck, sizeof ck, "%s/ck/last.safetensors", dir);
    for (int l = 0; l < 2; l++) {
        md_status st;
        float *got = logits_after_load(dir, l ? MD_NHWC : MD_NCHW, ck, x, N, &st);
        cr_assert_eq(st, MD_OK, "%s", md_errmsg());
        cr_assert(th_allclose(l ? "NHWC" : "NCHW", got, want, N * 10, 1e-5, 1e-4),
                  "--init-from the channels-last checkpoint into a %s model", l ? "channels-last" : "NCHW");
        free(got);
    }
    th_tmpdir_free(dir);
}

Test(ckpt_layout, dump_grads_holds_pytorch_layout, .timeout = 120)
{
    char *dir = th_tmpdir();
    char args[2600], path[2][4200];
    const char *base = common(dir);
    const char *layouts[2] = {"--no-channels-last", "--channels-last"};
    for (int l = 0; l < 2; l++) {
        snprintf(path[l], sizeof path[l], "%s/g%d.safetensors", dir, l);
        snprintf(args, sizeof args, "%s %s --epochs 1 --dump-grads %s --checkpoint-dir %s/ck", base, layouts[l], path[l], dir);
        char *err;
        int rc = th_run(args, NULL, &err);
        cr_assert_eq(rc, 0, "%s: %s", layouts[l], err);
        free(err);
    }
    md_st_file *f[2];
    for (int l = 0; l < 2; l++) {
        cr_assert_eq(md_st_open(path[l], &f[l]), MD_OK, "%s", md_errmsg());
        const char *lay = md_st_meta(f[l], "tensor_layout");
        cr_assert(lay && strcmp(lay, "pytorch") == 0, "%s: tensor_layout %s", layouts[l], lay ? lay : "missing");
    }
    /* the same initial weights (host-initialised), input and gradients up to rounding */
    static const char *const names[] = {"param.conv2.weight", "input.image", "logits", "grad.conv2.weight",
                                        "grad.fc.weight"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const struct md_st_tensor *a = md_st_find(f[0], names[i]), *b = md_st_find(f[1], names[i]);
        cr_assert(a && b, "%s in both files", names[i]);
        cr_assert_eq(a->numel, b->numel);
        int exact = strncmp(names[i], "param.", 6) == 0 || strncmp(names[i], "input.", 6) == 0;
        cr_assert(th_allclose(names[i], b->data, a->data, (size_t)a->numel, exact ? 0 : 1e-5, exact ? 0 : 1e-4),
                  "%s: channels-last file differs from the NCHW one", names[i]);
    }
    md_st_close(f[0]);
    md_st_close(f[1]);
    th_tmpdir_free(dir);
}

/* Writes the two_conv parameters `p` (PyTorch order) with `meta` as
 * key/value pairs; krsc: conv filters written as (K, R, S, C) instead. */
static void write_params(const char *path, const float *p, int krsc, const char *const *meta, int nmeta,
                         const char *dir)
{
    md_model *m = load_two_conv(dir, MD_NCHW);
    size_t n = md_model_nparams(m);
    float *q = malloc(n * sizeof *q), tmp[64 * 9];
    memcpy(q, p, n * sizeof *q);
    md_st_writer *w;
    cr_assert_eq(md_st_writer_new(&w), MD_OK);
    for (int i = 0; i < md_model_num_tensors(m); i++) {
        const struct md_param_info *t = md_model_tensor(m, i);
        if (krsc && t->ndim == 4)
            md_filter_permute(q + t->offset, tmp, t->shape[0], t->shape[1], t->shape[2] * t->shape[3], 1);
        long long shape[4];
        for (int d = 0; d < t->ndim; d++) shape[d] = t->shape[d];
        cr_assert_eq(md_st_writer_add(w, t->name, MD_F32, t->ndim, shape, q + t->offset), MD_OK);
    }
    for (int i = 0; i < nmeta; i++) cr_assert_eq(md_st_writer_meta(w, meta[2 * i], meta[2 * i + 1]), MD_OK);
    cr_assert_eq(md_st_writer_write(w, path), MD_OK, "%s", md_errmsg());
    md_st_writer_free(w);
    free(q);
    md_model_free(m);
}

/* Parameters of two_conv: deterministic, distinct values. */
static float *some_params(const char *dir, size_t *n)
{
    md_model *m = load_two_conv(dir, MD_NCHW);
    *n = md_model_nparams(m);
    md_model_free(m);
    float *p = malloc(*n * sizeof *p);
    for (size_t i = 0; i < *n; i++) p[i] = 0.5f * (float)sin(1.3 * (double)i + 0.2);
    return p;
}

Test(ckpt_layout, old_channels_last_checkpoint_is_converted, .timeout = 60)
{
    char *dir = th_tmpdir();
    size_t n;
    float *p = some_params(dir, &n);
    char good[4200], old[4200];
    snprintf(good, sizeof good, "%s/good.safetensors", dir);
    snprintf(old, sizeof old, "%s/old.safetensors", dir);
    write_params(good, p, 0, NULL, 0, dir);
    /* what a channels-last run of an earlier version wrote */
    static const char *const meta[] = {"format", "mpsdiag-checkpoint-1", "layout", "NHWC"};
    write_params(old, p, 1, meta, 2, dir);
    enum { N = 2 };
    float x[N * 784];
    fixed_input(x, N * 784);
    md_status st;
    float *want = logits_after_load(dir, MD_NCHW, good, x, N, &st);
    cr_assert_eq(st, MD_OK, "%s", md_errmsg());
    for (int l = 0; l < 2; l++) {
        float *got = logits_after_load(dir, l ? MD_NHWC : MD_NCHW, old, x, N, &st);
        cr_assert_eq(st, MD_OK, "%s", md_errmsg());
        cr_assert(th_allclose("old file", got, want, N * 10, 1e-5, 1e-4), "old channels-last file into %s",
                  l ? "NHWC" : "NCHW");
        free(got);
    }
    /* the test can tell: the same bytes read as PyTorch's layout give other logits */
    char plain[4200];
    snprintf(plain, sizeof plain, "%s/plain.safetensors", dir);
    write_params(plain, p, 1, NULL, 0, dir);
    float *other = logits_after_load(dir, MD_NCHW, plain, x, N, &st);
    cr_assert_eq(st, MD_OK, "%s", md_errmsg());
    double most = 0;
    for (int i = 0; i < N * 10; i++) most = fmax(most, fabs((double)other[i] - (double)want[i]));
    cr_assert(most > 1e-3, "filters in another order changed the logits by only %g", most);
    free(other);
    free(want);
    free(p);
    th_tmpdir_free(dir);
}

Test(ckpt_layout, file_in_another_layout_is_refused, .timeout = 60)
{
    char *dir = th_tmpdir();
    size_t n;
    float *p = some_params(dir, &n);
    char path[4200], args[8000];
    snprintf(path, sizeof path, "%s/nhwc.safetensors", dir);
    static const char *const meta[] = {"tensor_layout", "channels_last"};
    write_params(path, p, 1, meta, 1, dir);
    enum { N = 1 };
    float x[784];
    fixed_input(x, 784);
    md_status st;
    float *got = logits_after_load(dir, MD_NCHW, path, x, N, &st);
    cr_assert_null(got);
    cr_assert_eq(st, MD_ERR_DATA);
    cr_assert(strstr(md_errmsg(), path) && strstr(md_errmsg(), "channels_last"), "%s", md_errmsg());
    /* the binary: one line, exit code 3, for --init-from and for --resume
     * of a real checkpoint whose metadata says another layout */
    char ck[4200];
    snprintf(args, sizeof args, "%s --epochs 1 --steps 1 --checkpoint-dir %s/ck", common(dir), dir);
    char *err;
    cr_assert_eq(th_run(args, NULL, &err), 0, "%s", err);
    free(err);
    snprintf(ck, sizeof ck, "%s/ck/last.safetensors", dir);
    th_st_rewrite_meta(ck, ck, "tensor_layout", "channels_last");
    const char *flags[2] = {"--init-from", "--resume"};
    const char *files[2] = {path, ck};
    for (int i = 0; i < 2; i++) {
        snprintf(args, sizeof args, "%s --epochs 2 --steps 1 %s %s --checkpoint-dir %s/c%d", common(dir), flags[i], files[i],
                 dir, i);
        int rc = th_run(args, NULL, &err);
        cr_assert_eq(rc, 3, "%s: exit %d: %s", flags[i], rc, err);
        cr_assert(strstr(err, "mpsdiag: ") && strstr(err, flags[i]) && strstr(err, "tensor_layout") &&
                  strstr(err, files[i]) && th_count_messages(err) == 1, "%s", err);
        free(err);
    }
    free(p);
    th_tmpdir_free(dir);
}

/* Rewrites a checkpoint as an earlier version's channels-last run wrote it:
 * filters (K, R, S, C) in the weights and in the optimizer state, metadata
 * "layout" "NHWC" and no tensor_layout. */
static void make_old_style(const char *path, const char *dir)
{
    md_model *m = load_two_conv(dir, MD_NCHW);
    md_st_file *f;
    cr_assert_eq(md_st_open(path, &f), MD_OK, "%s", md_errmsg());
    md_st_writer *w;
    cr_assert_eq(md_st_writer_new(&w), MD_OK);
    float *copies[64], tmp[64 * 9];
    int nc = 0;
    for (int i = 0; i < md_st_count(f); i++) {
        const struct md_st_tensor *t = md_st_at(f, i);
        float *c = malloc(t->nbytes + 4);
        memcpy(c, t->data, t->nbytes);
        copies[nc++] = c;
        for (int j = 0; j < md_model_num_tensors(m); j++) {
            const struct md_param_info *p = md_model_tensor(m, j);
            if (p->ndim != 4) continue;
            float *at = NULL;
            if (strcmp(t->name, p->name) == 0) at = c;
            else if (strncmp(t->name, "__optim__.", 10) == 0) at = c + p->offset;
            if (at) md_filter_permute(at, tmp, p->shape[0], p->shape[1], p->shape[2] * p->shape[3], 1);
        }
        cr_assert_eq(md_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, c), MD_OK);
    }
    const char *k, *v;
    for (int i = 0; md_st_meta_at(f, i, &k, &v); i++)
        if (strcmp(k, "tensor_layout") != 0) cr_assert_eq(md_st_writer_meta(w, k, v), MD_OK);
    cr_assert_eq(md_st_writer_meta(w, "layout", "NHWC"), MD_OK);
    cr_assert_eq(md_st_writer_write(w, path), MD_OK, "%s", md_errmsg());
    md_st_writer_free(w);
    md_st_close(f);
    for (int i = 0; i < nc; i++) free(copies[i]);
    md_model_free(m);
}

Test(ckpt_layout, old_channels_last_checkpoint_resumes_in_either_layout, .timeout = 180)
{
    char *dir = th_tmpdir();
    char ck[4200], old[4200];
    const char *base = common(dir);
    interrupted_run(dir, base, ck, sizeof ck);
    snprintf(old, sizeof old, "%s/old.safetensors", dir);
    char cmd[9000];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s'", ck, old);
    cr_assert_eq(system(cmd), 0);
    make_old_style(old, dir);
    const char *layouts[2] = {"--no-channels-last", "--channels-last"};
    for (int l = 0; l < 2; l++) {
        float *got[2];
        size_t n = 0;
        for (int i = 0; i < 2; i++) {
            struct th_job b;
            job_ok(&b, "%s %s --epochs 2 --steps 3 --momentum 0.9 --resume %s --checkpoint-dir %s/b%d%d", base,
                   layouts[l], i ? old : ck, dir, l, i);
            got[i] = torch_params(&b);
            n = md_model_nparams(b.job.model);
            th_job_end(&b);
        }
        cr_assert_eq(memcmp(got[0], got[1], n * sizeof(float)), 0,
                     "%s: resuming the old-style file differs from resuming the new one", layouts[l]);
        free(got[0]);
        free(got[1]);
    }
    th_tmpdir_free(dir);
}
