/* test_nn_vit_tiles.c - the two-stream tiled ViT (docs/vit.md, "Two-stream
 * tiled model"): configs/models/vit_tiled_two_stream_tiny.json against
 * PyTorch (test/fixtures/vit_tiles, scripts/torch_vit_tiled.py) on the
 * reference and CPU devices: forward, MSE loss and every parameter gradient;
 * the comparison fails with a changed weight, swapped streams or a tile
 * routed to the wrong sample. The shipped full-size configs' parameter
 * counts and names; the task as a model parameter; the command line on the
 * bundled green-cover sample (train, R2 per target, --fold all); a plain
 * timm ViT file loading into the prefixed backbone (--init-from). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/json.h"
#include "core/safetensors.h"
#include "helpers.h"
#include "nn/model.h"
#include "nn/name_map.h"
#include "nn/transfer.h"

#define FIXTURE "test/fixtures/vit_tiles/vit_tiled_tiny"
#define HALF 31 /* the fixture's halves: 3 x 31 x 31 (tiles of 15 and 16 pixels) */

enum tamper { NONE, WEIGHT, SWAP_STREAMS, SWAP_SAMPLES };

static int quiet;

/* Forward, MSE loss and backward of the tiny config with the fixture's
 * weights and inputs; returns the number of tensors (output, loss,
 * gradients) that differ from PyTorch's. */
static int torch_case(const char *dev, struct md_model_opts *o, enum tamper tamper)
{
    md_st_file *ref = NULL;
    cr_assert_eq(md_st_open(FIXTURE ".ref.safetensors", &ref), MD_OK, "%s", md_errmsg());
    md_device *d = th_open_device(dev);
    md_model *m = NULL;
    cr_assert_eq(md_model_opts_set(o, "half_size", HALF, 0), MD_OK);
    cr_assert_eq(md_model_load("vit_tiled_two_stream_tiny", NULL, o, &m), MD_OK, "%s", md_errmsg());
    const int B = 2, K = 3;
    cr_assert_eq(md_model_bind(m, d, B), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_model_load_weights(m, FIXTURE ".torch.safetensors"), MD_OK, "%s", md_errmsg());
    if (tamper == WEIGHT) {
        size_t np = md_model_nparams(m);
        float *p = malloc(np * 4);
        cr_assert_eq(md_model_get_params_host(m, p), MD_OK);
        int t = md_model_find_tensor(m, "backbone.blocks.1.mlp.fc1.weight");
        cr_assert_geq(t, 0);
        p[md_model_tensor(m, t)->offset + 5] += 0.05f;
        cr_assert_eq(md_model_set_params_host(m, p), MD_OK);
        free(p);
    }
    const size_t per = 3 * HALF * HALF;
    for (int i = 0; i < 2; i++) {
        const char *name = md_model_input_name(m, i);
        char key[64];
        /* SWAP_STREAMS: left gets the right image and the other way round */
        snprintf(key, sizeof key, "input.%s", tamper == SWAP_STREAMS ? (i ? "left" : "right") : name);
        const struct md_st_tensor *t = md_st_find(ref, key);
        cr_assert(t, "no %s", key);
        cr_assert_eq((size_t)t->numel, B * per);
        float *x = malloc(t->nbytes);
        memcpy(x, t->data, t->nbytes);
        if (tamper == SWAP_SAMPLES && i == 1) { /* the right stream's tiles meet the other sample's left */
            float *tmp = malloc(per * 4);
            memcpy(tmp, x, per * 4);
            memmove(x, x + per, per * 4);
            memcpy(x + per, tmp, per * 4);
            free(tmp);
        }
        cr_assert_eq(md_dev_upload(d, md_model_input_buffer(m, i), x, t->nbytes), MD_OK);
        free(x);
    }
    char what[64];
    snprintf(what, sizeof what, "vit_tiled_two_stream_tiny on %s", dev);
    /* 5 before the blocks, 14 per block, norm 2, film 4, head 2 */
    cr_assert_eq(md_model_num_tensors(m), 5 + 2 * 14 + 2 + 4 + 2);
    int bad = th_torch_mse_case(ref, d, m, B, K, what, quiet);
    md_model_free(m);
    md_device_close(d);
    md_st_close(ref);
    return bad;
}

Test(nn_vit_tiles, torch_ref)
{
    struct md_model_opts o;
    md_model_opts_default(&o);
    cr_assert_eq(torch_case("ref", &o, NONE), 0, "tensors differ from PyTorch's");
}

Test(nn_vit_tiles, torch_cpu)
{
    struct md_model_opts o;
    md_model_opts_default(&o);
    cr_assert_eq(torch_case("cpu", &o, NONE), 0, "tensors differ from PyTorch's");
    o.grad_ckpt = 1;
    cr_assert_eq(torch_case("cpu", &o, NONE), 0, "tensors differ from PyTorch's (--grad-ckpt)");
    o.grad_ckpt = 0;
    o.compile = 0;
    cr_assert_eq(torch_case("cpu", &o, NONE), 0, "tensors differ from PyTorch's (no compile)");
}

Test(nn_vit_tiles, torch_comparison_can_fail)
{
    struct md_model_opts o;
    md_model_opts_default(&o);
    quiet = 1;
    int w = torch_case("cpu", &o, WEIGHT), s = torch_case("cpu", &o, SWAP_STREAMS);
    int b = torch_case("cpu", &o, SWAP_SAMPLES);
    quiet = 0;
    cr_expect_gt(w, 5, "a changed backbone weight went unnoticed (%d tensors differ)", w);
    cr_expect_gt(s, 5, "swapped streams went unnoticed (%d tensors differ)", s);
    cr_expect_gt(b, 5, "tiles of the wrong sample went unnoticed (%d tensors differ)", b);
}

/* The shipped full-size configs: parameter counts (scripts/torch_vit_tiled.py
 * counts prints the same), timm's names under the backbone's prefix, one
 * checkpoint segment per ViT block. */
static void check_config(const char *name, size_t want, const char *const *names)
{
    struct md_model_opts o;
    md_model_opts_default(&o);
    md_model *m = NULL;
    cr_assert_eq(md_model_load(name, NULL, &o, &m), MD_OK, "%s", md_errmsg());
    cr_expect_eq(md_model_nparams(m), want, "%s: %zu parameters, want %zu", name, md_model_nparams(m), want);
    cr_expect(md_model_is_regression(m), "%s: not a regression model", name);
    for (int k = 0; names[k]; k++) cr_expect_geq(md_model_find_tensor(m, names[k]), 0, "%s: no %s", name, names[k]);
    md_model_free(m);
}

Test(nn_vit_tiles, shipped_configs)
{
    static const char *const shared[] = {"backbone.patch_embed.proj.weight", "backbone.pos_embed.weight",
                                         "backbone.tokens.cls_token", "backbone.tokens.reg_token",
                                         "backbone.blocks.11.attn.qkv.weight", "backbone.blocks.11.ls2.gamma",
                                         "backbone.norm.weight", "film_fc1.weight", "film_fc2.bias",
                                         "head.weight", NULL};
    static const char *const sep[] = {"backbone_left.blocks.0.norm1.weight", "backbone_right.blocks.11.mlp.fc2.bias",
                                      "backbone_right.tokens.reg_token", "head.bias", NULL};
    check_config("vit_tiled_two_stream", 21854403, shared);
    check_config("vit_tiled_two_stream_separate", 43484355, sep);
}

/* "task": "$regression" (vit_tiny): a classifier by default, a regression
 * model with the parameter set; an unknown task parameter is a config error. */
Test(nn_vit_tiles, task_parameter)
{
    struct md_model_opts o;
    md_model_opts_default(&o);
    md_model *m = NULL;
    cr_assert_eq(md_model_load("vit_tiny", NULL, &o, &m), MD_OK, "%s", md_errmsg());
    cr_expect(!md_model_is_regression(m));
    cr_expect_str_eq(md_model_task_param(m), "regression");
    md_model_free(m);
    cr_assert_eq(md_model_opts_set(&o, "regression", 1, 0), MD_OK);
    cr_assert_eq(md_model_opts_set(&o, "num_outputs", 3, 0), MD_OK);
    cr_assert_eq(md_model_load("vit_tiny", NULL, &o, &m), MD_OK, "%s", md_errmsg());
    cr_expect(md_model_is_regression(m));
    cr_expect_eq(md_model_num_classes(m), 0);
    md_model_free(m);
    md_model_opts_default(&o);
    cJSON *j = cJSON_Parse("{\"name\": \"t\", \"task\": \"$regress\", \"params\": {\"regression\": 1},"
                           "\"inputs\": [{\"name\": \"image\", \"shape\": [4, 1, 1]}],"
                           "\"layers\": [{\"name\": \"fc\", \"type\": \"linear\", \"out\": 2}]}");
    cr_assert_eq(md_model_load("inline", j, &o, &m), MD_ERR_CONFIG);
    cr_expect(strstr(md_errmsg(), "task: unknown parameter 'regress'"), "%s", md_errmsg());
    cJSON_Delete(j);
}

/* A timm-named file of the fixture's backbone alone (pos_embed (1, N, D),
 * bare cls_token / reg_token, no "backbone." prefix) loads into backbone.*
 * of the tiled model; the FiLM MLP and the head stay new. */
Test(nn_vit_tiles, init_from_plain_vit_into_prefixed_backbone)
{
    md_st_file *fx = NULL;
    cr_assert_eq(md_st_open(FIXTURE ".torch.safetensors", &fx), MD_OK, "%s", md_errmsg());
    md_st_writer *w = NULL;
    cr_assert_eq(md_st_writer_new(&w), MD_OK);
    float *keep[64];
    int nkeep = 0;
    for (int i = 0; i < md_st_count(fx); i++) {
        const struct md_st_tensor *t = md_st_at(fx, i);
        if (strncmp(t->name, "backbone.", 9)) continue;
        const char *n = t->name + 9;
        long long shape[4] = {t->shape[0], t->shape[1], t->shape[2], t->shape[3]};
        int nd = t->ndim;
        if (!strcmp(n, "pos_embed.weight")) n = "pos_embed", shape[2] = shape[1], shape[1] = shape[0], shape[0] = 1, nd = 3;
        else if (!strncmp(n, "tokens.", 7)) n += 7;
        float *x = malloc(t->nbytes);
        memcpy(x, t->data, t->nbytes);
        keep[nkeep++] = x;
        cr_assert_eq(md_st_writer_add(w, n, MD_F32, nd, shape, x), MD_OK, "%s", md_errmsg());
    }
    char *dir = th_tmpdir(), path[600];
    snprintf(path, sizeof path, "%s/timm_vit.safetensors", dir);
    cr_assert_eq(md_st_writer_write(w, path), MD_OK, "%s", md_errmsg());
    md_st_writer_free(w);
    for (int k = 0; k < nkeep; k++) free(keep[k]);

    md_device *d = th_open_device("cpu");
    struct md_model_opts o;
    md_model_opts_default(&o);
    cr_assert_eq(md_model_opts_set(&o, "half_size", HALF, 0), MD_OK);
    md_model *m = NULL;
    cr_assert_eq(md_model_load("vit_tiled_two_stream_tiny", NULL, &o, &m), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_model_bind(m, d, 2), MD_OK, "%s", md_errmsg());
    struct md_load_report rep;
    cr_assert_eq(md_model_load_transfer(m, path, MD_NAMES_AUTO, &rep), MD_OK, "%s", md_errmsg());
    cr_expect_eq(rep.naming, MD_NAMES_TIMM);
    cr_expect_eq(rep.loaded.n, nkeep, "%d of %d backbone tensors loaded", rep.loaded.n, nkeep);
    cr_expect_eq(rep.skipped.n, 0);
    cr_expect_eq(rep.fresh.n, 6, "film_fc1, film_fc2 and head are new (%d)", rep.fresh.n);
    float *p = malloc(md_model_nparams(m) * 4);
    cr_assert_eq(md_model_get_params_host(m, p), MD_OK);
    for (int t = 0; t < md_model_num_tensors(m); t++) {
        const struct md_param_info *ti = md_model_tensor(m, t);
        if (strncmp(ti->name, "backbone.", 9)) continue;
        const struct md_st_tensor *want = md_st_find(fx, ti->name);
        cr_assert(want, "%s", ti->name);
        cr_expect_eq(memcmp(p + ti->offset, want->data, want->nbytes), 0, "%s differs from the file", ti->name);
    }
    free(p);
    md_load_report_free(&rep);
    md_model_free(m);
    md_device_close(d);
    md_st_close(fx);
    th_tmpdir_free(dir);
}

static double num(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    cr_assert(cJSON_IsNumber(v), "no number %s", k);
    return v->valuedouble;
}

#define GREEN "--model vit_tiled_two_stream_tiny --data-dir data/green-cover-sample " \
              "--target-cols green_cover,brightness,blue_cover --device cpu --batch-size 16 --optimizer adamw --lr 1e-3"

/* The bundled green-cover sample's halves through the tiny model: it learns
 * (R2 per target well above 0 after 5 epochs), and the metrics are reported. */
Test(nn_vit_tiles, green_cover_end_to_end, .timeout = 60)
{
    char *dir = th_tmpdir(), cmd[2048], *out = NULL, *err = NULL;
    snprintf(cmd, sizeof cmd, GREEN " --epochs 5 --checkpoint-dir %s/ck", dir);
    cJSON *r = th_run_report(dir, cmd, 0, &out, &err);
    cr_expect(strstr(out, "left: 3 x 32 x 32") && strstr(out, "right half"), "halves not delivered:\n%s", out);
    const cJSON *rm = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(r, "training"),
                                                       "regression_metrics");
    cr_assert(rm, "no training.regression_metrics");
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(rm, "per_target");
    cr_assert_eq(cJSON_GetArraySize(pt), 3);
    for (const cJSON *t = pt->child; t; t = t->next) {
        cr_expect_gt(num(t, "r2"), 0.5, "R2 %g: the model did not learn", num(t, "r2"));
        cr_expect(num(t, "mae") > 0 && num(t, "rmse") >= num(t, "mae"));
    }
    cJSON_Delete(r);
    free(out);
    free(err);
    th_tmpdir_free(dir);
}

Test(nn_vit_tiles, green_cover_fold_all, .timeout = 60)
{
    char *dir = th_tmpdir(), cmd[2048];
    snprintf(cmd, sizeof cmd, GREEN " --epochs 1 --folds 3 --fold all --checkpoint-dir %s/ck", dir);
    cJSON *r = th_run_report(dir, cmd, 0, NULL, NULL);
    const cJSON *folds = cJSON_GetObjectItemCaseSensitive(r, "folds");
    cr_assert_eq((int)num(folds, "k"), 3);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(folds, "runs")), 3);
    cJSON_Delete(r);
    th_tmpdir_free(dir);
}
