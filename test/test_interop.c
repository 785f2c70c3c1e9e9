/* test_interop.c - mpsdiag and PyTorch read each other's files: the fixtures
 * of test/fixtures/interop, written by scripts/torch_interop.py with PyTorch
 * (a state dict with BatchNorm statistics and its num_batches_tracked
 * counters, an input batch and PyTorch's evaluation logits for it), checked
 * with channels-last on and off:
 *   - the state dict loads through --init-from (md_model_load_weights) and
 *     the model gives PyTorch's logits;
 *   - the binary does the same (--init-from, --dump-logits);
 *   - a checkpoint mpsdiag writes holds exactly the state dict's entries
 *     (names, shapes, dtypes; less num_batches_tracked), with its values. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/safetensors.h"
#include "nn/model.h"
#include "helpers.h"

#define FIXTURE_DIR "test/fixtures/interop"

struct interop_case {
    const char *name;   /* fixture prefix */
    const char *model;  /* --model */
    const char *data;   /* data flags for the binary */
};

static const struct interop_case cases[] = {
    {"small_cnn", "small_cnn", "--dataset fashion-mnist --data-dir data/fashion-mnist-sample --max-samples 64"},
    {"resnet18_cifar_w8", FIXTURE_DIR "/resnet18_cifar_w8.json", "--dataset synthetic --max-samples 32"},
};

/* PyTorch fp32 and mpsdiag sum in other orders (the script's tolerance). */
#define ATOL 1e-4
#define RTOL 1e-4

static md_st_file *open_fixture(const char *name, const char *kind)
{
    char path[512];
    snprintf(path, sizeof path, "%s/%s.%s.safetensors", FIXTURE_DIR, name, kind);
    md_st_file *f = NULL;
    cr_assert_eq(md_st_open(path, &f), MD_OK, "%s (run from the repository root)", md_errmsg());
    return f;
}

/* Copies an F32 tensor of the fixture (malloc'd). */
static float *fixture_f32(const md_st_file *f, const char *name, long long *numel)
{
    const struct md_st_tensor *t = md_st_find(f, name);
    cr_assert(t && t->dtype == MD_F32, "%s: F32 tensor '%s'", md_st_path(f), name);
    float *v = malloc((size_t)t->nbytes + 4);
    memcpy(v, t->data, t->nbytes);
    *numel = t->numel;
    return v;
}

struct interop_param {
    int c, layout; /* index into cases[], md_layout */
};

ParameterizedTestParameters(interop, pytorch_state_dict_gives_pytorch_logits)
{
    static struct interop_param p[4] = {{0, MD_NCHW}, {0, MD_NHWC}, {1, MD_NCHW}, {1, MD_NHWC}};
    return cr_make_param_array(struct interop_param, p, 4);
}

ParameterizedTest(struct interop_param *p, interop, pytorch_state_dict_gives_pytorch_logits, .timeout = 60)
{
    const struct interop_case *c = &cases[p->c];
    md_st_file *io = open_fixture(c->name, "logits");
    const struct md_st_tensor *in = md_st_find(io, "input.image");
    cr_assert(in && in->ndim == 4, "input.image (N, C, H, W)");
    int n = (int)in->shape[0], ch = (int)in->shape[1], hw = (int)(in->shape[2] * in->shape[3]);
    long long nx, nl;
    float *x = fixture_f32(io, "input.image", &nx), *want = fixture_f32(io, "logits", &nl);

    struct md_model_opts mo;
    md_model_opts_default(&mo);
    mo.layout = (md_layout)p->layout;
    md_model *m;
    cr_assert_eq(md_model_load(c->model, NULL, &mo, &m), MD_OK, "%s", md_errmsg());
    md_device *dev;
    struct md_device_opts dopts = {.threads = 1};
    cr_assert_eq(md_device_open(md_backend_find("cpu"), 0, &dopts, &dev), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_model_bind(m, dev, n), MD_OK, "%s", md_errmsg());
    char path[512];
    snprintf(path, sizeof path, "%s/%s.torch.safetensors", FIXTURE_DIR, c->name);
    cr_assert_eq(md_model_load_weights(m, path), MD_OK, "%s", md_errmsg());
    /* the input in the model's layout */
    float *dx = malloc((size_t)nx * sizeof *dx);
    for (int b = 0; b < n; b++)
        for (int k = 0; k < ch; k++)
            for (int i = 0; i < hw; i++) {
                size_t nchw = ((size_t)b * ch + k) * hw + i, nhwc = ((size_t)b * hw + i) * ch + k;
                dx[p->layout == MD_NHWC ? nhwc : nchw] = x[nchw];
            }
    cr_assert_eq(md_dev_upload(dev, md_model_input_buffer(m, 0), dx, (size_t)nx * 4), MD_OK);
    cr_assert_eq(md_model_forward(m, n, 0), MD_OK, "%s", md_errmsg());
    float *got = malloc((size_t)nl * sizeof *got);
    cr_assert_eq(md_dev_download(dev, got, md_model_logits(m), (size_t)nl * 4), MD_OK);
    cr_assert_eq(md_dev_sync(dev), MD_OK);
    cr_assert(th_allclose(c->name, got, want, (size_t)nl, ATOL, RTOL), "%s, %s: logits differ from PyTorch's",
              c->name, md_layout_name((md_layout)p->layout));
    free(got);
    free(dx);
    free(x);
    free(want);
    md_model_free(m);
    md_device_close(dev);
    md_st_close(io);
}

/* The binary end to end: --init-from the PyTorch file, --dump-logits of the
 * first test batch (the fixture's input came from the same batch). */
Test(interop, binary_init_from_and_dump_logits_in_both_layouts, .timeout = 120)
{
    char *dir = th_tmpdir();
    const char *layouts[2] = {"--no-channels-last", "--channels-last"};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        md_st_file *io = open_fixture(cases[c].name, "logits");
        long long nx, nl;
        float *x = fixture_f32(io, "input.image", &nx), *want = fixture_f32(io, "logits", &nl);
        for (int l = 0; l < 2; l++) {
            char args[2048], out[4200];
            snprintf(out, sizeof out, "%s/%s%d.safetensors", dir, cases[c].name, l);
            snprintf(args, sizeof args,
                     "--device cpu --threads 1 --model %s %s --batch-size 4 --num-workers 0 --seed 1 --precision fp32 "
                     "--quiet %s --epochs 0 --init-from %s/%s.torch.safetensors --checkpoint-dir %s/ck --dump-logits %s",
                     cases[c].model, cases[c].data, layouts[l], FIXTURE_DIR, cases[c].name, dir, out);
            char *err;
            int rc = th_run(args, NULL, &err);
            cr_assert_eq(rc, 0, "%s %s: exit %d: %s", cases[c].name, layouts[l], rc, err);
            free(err);
            md_st_file *f;
            cr_assert_eq(md_st_open(out, &f), MD_OK, "%s", md_errmsg());
            cr_assert_str_eq(md_st_meta(f, "tensor_layout"), "pytorch");
            long long gx, gl;
            float *gin = fixture_f32(f, "input.image", &gx), *got = fixture_f32(f, "logits", &gl);
            cr_assert_eq(gx, nx);
            cr_assert_eq(gl, nl);
            cr_assert(th_allclose("input", gin, x, (size_t)nx, 1e-6, 1e-6),
                      "%s: the first test batch is not the fixture's input (regenerate the fixtures with "
                      "scripts/torch_interop.py --write-fixtures)", cases[c].name);
            cr_assert(th_allclose(cases[c].name, got, want, (size_t)nl, ATOL, RTOL), "%s %s: logits differ from "
                      "PyTorch's", cases[c].name, layouts[l]);
            free(gin);
            free(got);
            md_st_close(f);
        }
        free(x);
        free(want);
        md_st_close(io);
    }
    th_tmpdir_free(dir);
}

/* A checkpoint holds exactly the state dict's entries, and (a learning rate
 * too small to move an fp32 weight) the values it was started from. */
Test(interop, checkpoint_holds_the_state_dict_entries_and_values, .timeout = 120)
{
    char *dir = th_tmpdir();
    const char *layouts[2] = {"--no-channels-last", "--channels-last"};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        md_st_file *sd = open_fixture(cases[c].name, "torch");
        for (int l = 0; l < 2; l++) {
            char args[2048], ck[4200];
            snprintf(args, sizeof args,
                     "--device cpu --threads 1 --model %s %s --batch-size 4 --num-workers 0 --seed 1 --precision fp32 "
                     "--quiet %s --epochs 1 --steps 1 --lr 1e-12 --momentum 0 --weight-decay 0 --init-from "
                     "%s/%s.torch.safetensors --checkpoint-dir %s/ck%zu%d",
                     cases[c].model, cases[c].data, layouts[l], FIXTURE_DIR, cases[c].name, dir, c, l);
            char *err;
            int rc = th_run(args, NULL, &err);
            cr_assert_eq(rc, 0, "%s %s: exit %d: %s", cases[c].name, layouts[l], rc, err);
            free(err);
            snprintf(ck, sizeof ck, "%s/ck%zu%d/last.safetensors", dir, c, l);
            md_st_file *f;
            cr_assert_eq(md_st_open(ck, &f), MD_OK, "%s", md_errmsg());
            int model_entries = 0, sd_entries = 0;
            for (int i = 0; i < md_st_count(f); i++) {
                const struct md_st_tensor *t = md_st_at(f, i);
                if (strncmp(t->name, "__optim__.", 10) == 0) continue;
                model_entries++;
                const struct md_st_tensor *r = md_st_find(sd, t->name);
                cr_assert(r, "%s: checkpoint entry '%s' is not in PyTorch's state dict", cases[c].name, t->name);
                cr_assert_str_eq(t->dtype_name, r->dtype_name, "%s: dtype", t->name);
                cr_assert_eq(t->ndim, r->ndim, "%s: rank", t->name);
                for (int d = 0; d < t->ndim; d++) cr_assert_eq(t->shape[d], r->shape[d], "%s: shape[%d]", t->name, d);
                /* BatchNorm's running statistics moved with the training forward, as in PyTorch */
                if (strstr(t->name, ".running_")) continue;
                cr_assert(th_allclose(t->name, t->data, r->data, (size_t)t->numel, 1e-9, 1e-6),
                          "%s %s: '%s' is not the value it was started from", cases[c].name, layouts[l], t->name);
            }
            for (int i = 0; i < md_st_count(sd); i++)
                sd_entries += !strstr(md_st_at(sd, i)->name, "num_batches_tracked");
            cr_assert_eq(model_entries, sd_entries, "%s: %d entries besides the optimizer state, the state dict has %d",
                         cases[c].name, model_entries, sd_entries);
            md_st_close(f);
        }
        md_st_close(sd);
    }
    th_tmpdir_free(dir);
}

/* PyTorch's own dtypes (BatchNorm's num_batches_tracked is I64) do not stop
 * a file from opening; asking for such a tensor as F32 names its dtype. */
Test(interop, other_safetensors_dtypes_open)
{
    md_st_file *sd = open_fixture("small_cnn", "torch");
    const struct md_st_tensor *t = md_st_find(sd, "bn1.num_batches_tracked");
    cr_assert(t, "the fixture holds num_batches_tracked");
    cr_assert_str_eq(t->dtype_name, "I64");
    cr_assert_eq(t->nbytes, 8);
    long long one = 1;
    float v;
    cr_assert_eq(md_st_copy(sd, "bn1.num_batches_tracked", MD_F32, 0, &one, &v), MD_ERR_DATA);
    cr_assert(strstr(md_errmsg(), "I64"), "%s", md_errmsg());
    md_st_close(sd);
}
