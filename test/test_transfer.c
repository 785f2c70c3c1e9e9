/* test_transfer.c - --init-from with the timm / Hugging Face name maps, the
 * bicubic position-embedding resize against PyTorch, the partial-load
 * report, head re-initialisation, --freeze, --backbone-lr, --unfreeze-after
 * and the one-line errors. Fixtures: scripts/gen_transfer_fixtures.py. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/safetensors.h"
#include "helpers.h"
#include "helpers_job.h"
#include "json_schema.h"
#include "nn/model.h"
#include "nn/name_map.h"
#include "nn/transfer.h"

#define FIX "test/fixtures/transfer"

static float *st_f32(const md_st_file *f, const char *name, long long *n)
{
    const struct md_st_tensor *t = md_st_find(f, name);
    cr_assert(t, "fixture tensor %s missing", name);
    float *p = malloc((size_t)t->nbytes + 4);
    memcpy(p, t->data, t->nbytes);
    if (n) *n = t->numel;
    return p;
}

/* ---- the resize function against torch.nn.functional.interpolate ---------------------- */

Test(transfer, pos_resize_matches_torch_bicubic)
{
    md_st_file *f;
    cr_assert_eq(md_st_open(FIX "/pos_resize.safetensors", &f), MD_OK, "%s", md_errmsg());
    for (int c = 0; c < 4; c++) {
        char name[64];
        long long ns, nd;
        snprintf(name, sizeof name, "case%d.grid", c);
        float *g = st_f32(f, name, NULL);
        int gh = (int)g[0], gw = (int)g[1], oh = (int)g[2], ow = (int)g[3];
        snprintf(name, sizeof name, "case%d.src", c);
        float *src = st_f32(f, name, &ns);
        snprintf(name, sizeof name, "case%d.dst", c);
        float *want = st_f32(f, name, &nd);
        int d = (int)(ns / (gh * gw));
        cr_assert_eq(nd, (long long)oh * ow * d);
        float *got = malloc((size_t)nd * 4);
        md_pos_resize_bicubic(src, gh, gw, d, got, oh, ow);
        cr_assert(th_allclose(name, got, want, (size_t)nd, 1e-5, 1e-5), "case %d: %dx%d -> %dx%d differs from torch", c,
                  gh, gw, oh, ow);
        /* the comparison can fail: the taps not clamped at the edge (a common mistake) differ */
        got[0] += 1e-3f;
        cr_assert(!th_allclose("perturbed", got, want, (size_t)nd, 1e-5, 1e-5));
        free(g);
        free(src);
        free(want);
        free(got);
    }
    md_st_close(f);
}

/* ---- loading into a bound model ----------------------------------------------------------- */

static md_model *bound(md_device *d, const char *cfg)
{
    struct md_model_opts o;
    md_model_opts_default(&o);
    md_model *m;
    cr_assert_eq(md_model_load(cfg, NULL, &o, &m), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_model_bind(m, d, 2), MD_OK, "%s", md_errmsg());
    return m;
}

static float *params_after(md_device *d, const char *cfg, const char *file, int naming, struct md_load_report *rep)
{
    md_model *m = bound(d, cfg);
    struct md_load_report local;
    struct md_load_report *r = rep ? rep : &local;
    float *p = malloc(md_model_nparams(m) * 4);
    if (file) cr_assert_eq(md_model_load_transfer(m, file, naming, r), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_model_get_params_host(m, p), MD_OK);
    if (file && !rep) md_load_report_free(&local);
    md_model_free(m);
    return p;
}

static int in_list(const struct md_name_list *l, const char *s)
{
    for (int i = 0; i < l->n; i++)
        if (!strcmp(l->items[i], s)) return 1;
    return 0;
}

Test(transfer, each_naming_gives_identical_weights, .timeout = 60)
{
    md_device *d = th_open_device("cpu");
    const char *cfg = FIX "/tiny.json";
    md_model *m = bound(d, cfg);
    size_t n = md_model_nparams(m);
    struct md_load_report rep;
    float *ours = params_after(d, cfg, FIX "/tiny.ours.safetensors", MD_NAMES_OURS, &rep);
    cr_assert_eq(rep.fresh.n, 0, "ours: %d tensors not in the file", rep.fresh.n);
    cr_assert_eq(rep.loaded.n, md_model_num_tensors(m));
    md_load_report_free(&rep);
    const char *files[] = {"tiny.timm", "tiny.hf", "tiny.timm", "tiny.hf", "tiny.ours"};
    const int namings[] = {MD_NAMES_TIMM, MD_NAMES_HF, MD_NAMES_AUTO, MD_NAMES_AUTO, MD_NAMES_AUTO};
    const int detected[] = {MD_NAMES_TIMM, MD_NAMES_HF, MD_NAMES_TIMM, MD_NAMES_HF, MD_NAMES_OURS};
    for (int k = 0; k < 5; k++) {
        char path[256];
        snprintf(path, sizeof path, FIX "/%s.safetensors", files[k]);
        float *p = params_after(d, cfg, path, namings[k], &rep);
        cr_assert_eq(rep.naming, detected[k], "%s: naming %s", path, md_naming_name(rep.naming));
        cr_assert_eq(rep.fresh.n, 0, "%s: %d newly initialised (first %s)", path, rep.fresh.n,
                     rep.fresh.n ? rep.fresh.items[0] : "");
        cr_assert_eq(memcmp(p, ours, n * 4), 0, "%s (%s naming): weights differ from the same file in ours", path,
                     md_naming_name(namings[k]));
        md_load_report_free(&rep);
        free(p);
    }
    /* and they are the file's values, not the initial ones (the check can fail) */
    float *init = params_after(d, cfg, NULL, 0, NULL);
    cr_assert_neq(memcmp(init, ours, n * 4), 0);
    md_st_file *f;
    cr_assert_eq(md_st_open(FIX "/tiny.ours.safetensors", &f), MD_OK);
    const struct md_param_info *ti = md_model_tensor(m, md_model_find_tensor(m, "blocks.1.attn.in_proj_weight"));
    float *want = st_f32(f, "blocks.1.attn.in_proj_weight", NULL);
    cr_assert_eq(memcmp(ours + ti->offset, want, ti->numel * 4), 0);
    free(want);
    md_st_close(f);
    free(init);
    free(ours);
    md_model_free(m);
    md_device_close(d);
}

Test(transfer, partial_load_reports_skipped_new_resized_and_head, .timeout = 60)
{
    md_device *d = th_open_device("cpu");
    struct md_load_report rep;
    /* hf: the class token, mask token and layer scales have no place in the tiny model */
    free(params_after(d, FIX "/tiny.json", FIX "/tiny.hf.safetensors", MD_NAMES_AUTO, &rep));
    cr_assert_eq(rep.skipped.n, 6, "%d skipped", rep.skipped.n);
    cr_assert(in_list(&rep.skipped, "embeddings.mask_token") && in_list(&rep.skipped, "embeddings.cls_token") &&
              in_list(&rep.skipped, "encoder.layer.1.layer_scale2.lambda1"));
    cr_assert_eq(rep.loaded.n, 31);
    cJSON *j = md_load_report_json(&rep);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(j, "skipped")), 6);
    cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(j, "counts"), "loaded")->valueint, 31);
    cr_assert_str_eq(cJSON_GetObjectItem(j, "naming")->valuestring, "hf");
    cJSON_Delete(j);
    md_load_report_free(&rep);
    /* a 6 x 6 grid: pos_embed resized as torch's bicubic interpolate does */
    md_model *m = bound(d, FIX "/tiny36.json");
    float *p = params_after(d, FIX "/tiny36.json", FIX "/tiny.timm.safetensors", MD_NAMES_AUTO, &rep);
    cr_assert_eq(rep.resized.n, 1);
    cr_assert_str_eq(rep.resized.items[0], "pos_embed.weight");
    md_load_report_free(&rep);
    md_st_file *f;
    cr_assert_eq(md_st_open(FIX "/tiny36.pos.safetensors", &f), MD_OK);
    long long nw;
    float *want = st_f32(f, "pos_embed.weight", &nw);
    const struct md_param_info *ti = md_model_tensor(m, md_model_find_tensor(m, "pos_embed.weight"));
    cr_assert_eq((long long)ti->numel, nw);
    cr_assert(th_allclose("pos_embed", p + ti->offset, want, ti->numel, 1e-5, 1e-5));
    free(want);
    md_st_close(f);
    free(p);
    /* HF's position row 0 belongs to the class token: dropped, the rest resized alike */
    p = params_after(d, FIX "/tiny36.json", FIX "/tiny.hf.safetensors", MD_NAMES_HF, &rep);
    cr_assert_eq(rep.resized.n, 1);
    md_load_report_free(&rep);
    cr_assert_eq(md_st_open(FIX "/tiny36.pos.safetensors", &f), MD_OK);
    want = st_f32(f, "pos_embed.weight", &nw);
    cr_assert(th_allclose("pos_embed (hf)", p + ti->offset, want, ti->numel, 1e-5, 1e-5));
    free(want);
    md_st_close(f);
    free(p);
    md_model_free(m);
    /* a head of 4 classes: re-initialised (its initial values), everything else loaded */
    m = bound(d, FIX "/tiny_c4.json");
    float *init = params_after(d, FIX "/tiny_c4.json", NULL, 0, NULL);
    p = params_after(d, FIX "/tiny_c4.json", FIX "/tiny.timm.safetensors", MD_NAMES_TIMM, &rep);
    cr_assert_eq(rep.head_reinit.n, 2);
    cr_assert(in_list(&rep.head_reinit, "head.weight") && in_list(&rep.fresh, "head.bias"));
    cr_assert_eq(rep.loaded.n, md_model_num_tensors(m) - 2);
    for (int t = 0; t < md_model_num_tensors(m); t++) {
        ti = md_model_tensor(m, t);
        int head = !strncmp(ti->name, "head.", 5);
        cr_assert_eq(memcmp(p + ti->offset, init + ti->offset, ti->numel * 4) == 0, head, "%s", ti->name);
    }
    md_load_report_free(&rep);
    free(init);
    free(p);
    md_model_free(m);
    md_device_close(d);
}

Test(transfer, freeze_selections)
{
    md_device *d = th_open_device("cpu");
    md_model *m = bound(d, FIX "/tiny.json");
    int nt = md_model_num_tensors(m);
    uint8_t fr[64], head[64];
    cr_assert(nt <= 64);
    md_model_head_mask(m, head);
    cr_assert_eq(md_model_freeze_mask(m, "backbone", fr), MD_OK);
    for (int t = 0; t < nt; t++) {
        const char *nm = md_model_tensor(m, t)->name;
        cr_assert_eq(head[t], !strncmp(nm, "head.", 5), "%s", nm);
        cr_assert_eq(fr[t], !head[t], "%s", nm);
    }
    cr_assert_eq(md_model_freeze_mask(m, "patch_embed,blocks.0.*", fr), MD_OK);
    for (int t = 0; t < nt; t++) {
        const char *nm = md_model_tensor(m, t)->name;
        cr_assert_eq(fr[t], !strncmp(nm, "patch_embed.", 12) || !strncmp(nm, "blocks.0.", 9), "%s", nm);
    }
    cr_assert_eq(md_model_freeze_mask(m, "all-but-last:1", fr), MD_OK);
    for (int t = 0; t < nt; t++) {
        const char *nm = md_model_tensor(m, t)->name;
        int want = !strncmp(nm, "patch_embed.", 12) || !strncmp(nm, "pos_embed.", 10) || !strncmp(nm, "blocks.0.", 9);
        cr_assert_eq(fr[t], want, "all-but-last:1: %s", nm);
    }
    cr_assert_eq(md_model_freeze_mask(m, "decoder.*", fr), MD_ERR_USAGE);
    cr_assert(strstr(md_errmsg(), "--freeze") && strstr(md_errmsg(), "decoder.*"), "%s", md_errmsg());
    cr_assert_eq(md_model_freeze_mask(m, "all-but-last:x", fr), MD_ERR_USAGE);
    md_model_free(m);
    md_device_close(d);
}

/* ---- configs/models/vit_tiny.json against the PyTorch module ------------------------------ */

/* vit_tiny (img_size img, num_outputs outputs; 0: the config's) bound for 2 samples */
static md_model *vit_bound(md_device *d, int img, int outputs)
{
    struct md_model_opts o;
    md_model_opts_default(&o);
    o.seed = 3;
    if (img) cr_assert_eq(md_model_opts_set(&o, "img_size", img, 0), MD_OK);
    if (outputs) cr_assert_eq(md_model_opts_set(&o, "num_outputs", outputs, 0), MD_OK);
    md_model *m;
    cr_assert_eq(md_model_load("vit_tiny", NULL, &o, &m), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_model_bind(m, d, 2), MD_OK, "%s", md_errmsg());
    return m;
}

/* The model's output on the fixture's input `in` (2 samples), matched against `want`. */
static int vit_output_matches(md_model *m, const md_st_file *ex, const char *in, const char *want, const char *what)
{
    md_device *d = md_model_device(m);
    const struct md_st_tensor *x = md_st_find(ex, in), *y = md_st_find(ex, want);
    cr_assert(x && y, "fixture lacks %s or %s", in, want);
    cr_assert_eq(md_dev_upload(d, md_model_input_buffer(m, 0), x->data, x->nbytes), MD_OK);
    cr_assert_eq(md_model_forward(m, 2, 0), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_dev_sync(d), MD_OK);
    float *got = malloc((size_t)y->nbytes);
    cr_assert_eq(md_dev_download(d, got, md_model_logits(m), (size_t)y->nbytes), MD_OK);
    int ok = th_allclose(what, got, (const float *)y->data, (size_t)y->numel, 1e-4, 1e-4);
    free(got);
    return ok;
}

/* The HF file as Dinov2WithRegistersForImageClassification saves it: the backbone under
 * "dinov2_with_registers.", the classifier at the top level. */
static void write_wrapped(const char *src, const char *dst)
{
    md_st_file *f;
    cr_assert_eq(md_st_open(src, &f), MD_OK, "%s", md_errmsg());
    md_st_writer *w;
    cr_assert_eq(md_st_writer_new(&w), MD_OK);
    char names[64][200];
    cr_assert(md_st_count(f) <= 64);
    for (int i = 0; i < md_st_count(f); i++) {
        const struct md_st_tensor *t = md_st_at(f, i);
        snprintf(names[i], sizeof names[i], "%s%s", strncmp(t->name, "classifier.", 11) ? "dinov2_with_registers." : "",
                 t->name);
        cr_assert_eq(md_st_writer_add(w, names[i], t->dtype, t->ndim, t->shape, t->data), MD_OK, "%s", md_errmsg());
    }
    cr_assert_eq(md_st_writer_write(w, dst), MD_OK, "%s", md_errmsg());
    md_st_writer_free(w);
    md_st_close(f);
}

/* One set of weights in timm's and Hugging Face's naming (and HF's classification wrapper),
 * auto-detected or named: every tensor loads and the model computes what PyTorch did. */
Test(transfer, vit_tiny_timm_and_hf_weights_match_pytorch, .timeout = 60)
{
    md_device *d = th_open_device("cpu");
    md_st_file *ex;
    cr_assert_eq(md_st_open(FIX "/vit_tiny.expect.safetensors", &ex), MD_OK, "%s", md_errmsg());
    char *dir = th_tmpdir(), wrapped[600];
    snprintf(wrapped, sizeof wrapped, "%s/wrapped.safetensors", dir);
    write_wrapped(FIX "/vit_tiny.hf.safetensors", wrapped);
    md_model *m = vit_bound(d, 0, 0);
    /* the check can fail: the model's own initial weights give other outputs */
    cr_assert_not(vit_output_matches(m, ex, "input.image", "output", "initial weights"));
    const char *files[] = {FIX "/vit_tiny.timm.safetensors", FIX "/vit_tiny.timm.safetensors",
                           FIX "/vit_tiny.hf.safetensors", FIX "/vit_tiny.hf.safetensors", wrapped};
    const int namings[] = {MD_NAMES_AUTO, MD_NAMES_TIMM, MD_NAMES_AUTO, MD_NAMES_HF, MD_NAMES_AUTO};
    const int detected[] = {MD_NAMES_TIMM, MD_NAMES_TIMM, MD_NAMES_HF, MD_NAMES_HF, MD_NAMES_HF};
    for (int k = 0; k < 5; k++) {
        struct md_load_report rep;
        cr_assert_eq(md_model_load_transfer(m, files[k], namings[k], &rep), MD_OK, "%s", md_errmsg());
        cr_assert_eq(rep.naming, detected[k], "%s: naming %s", files[k], md_naming_name(rep.naming));
        cr_assert_eq(rep.fresh.n, 0, "%s: %d newly initialised (first %s)", files[k], rep.fresh.n,
                     rep.fresh.n ? rep.fresh.items[0] : "");
        cr_assert_eq(rep.loaded.n, md_model_num_tensors(m), "%s", files[k]);
        /* HF's mask token has no place in the model; nothing else is left over */
        cr_assert_eq(rep.skipped.n, detected[k] == MD_NAMES_HF, "%s: %d skipped (first %s)", files[k],
                     rep.skipped.n, rep.skipped.n ? rep.skipped.items[0] : "");
        cr_assert_eq(rep.resized.n + rep.head_reinit.n, 0);
        char what[700];
        snprintf(what, sizeof what, "%s (%s naming)", files[k], md_naming_name(namings[k]));
        cr_assert(vit_output_matches(m, ex, "input.image", "output", what), "%s differs from PyTorch", what);
        md_load_report_free(&rep);
    }
    md_model_free(m);
    /* a 6 x 6 grid (img_size 42): pos_embed resized as torch's bicubic interpolate, output as PyTorch's */
    for (int k = 0; k < 3; k += 2) {
        m = vit_bound(d, 42, 0);
        struct md_load_report rep;
        cr_assert_eq(md_model_load_transfer(m, files[k], MD_NAMES_AUTO, &rep), MD_OK, "%s", md_errmsg());
        cr_assert_eq(rep.resized.n, 1, "%s", files[k]);
        cr_assert_str_eq(rep.resized.items[0], "pos_embed.weight");
        cr_assert_eq(rep.fresh.n, 0);
        float *p = malloc(md_model_nparams(m) * 4);
        cr_assert_eq(md_model_get_params_host(m, p), MD_OK);
        const struct md_param_info *ti = md_model_tensor(m, md_model_find_tensor(m, "pos_embed.weight"));
        long long nw;
        float *want = st_f32(ex, "resized.pos_embed", &nw);
        cr_assert_eq((long long)ti->numel, nw);
        cr_assert(th_allclose("pos_embed", p + ti->offset, want, ti->numel, 1e-5, 1e-5), "%s", files[k]);
        cr_assert(vit_output_matches(m, ex, "input42.image", "output42", files[k]), "%s: 42 x 42 differs", files[k]);
        free(want);
        free(p);
        md_load_report_free(&rep);
        md_model_free(m);
    }
    md_st_close(ex);
    th_tmpdir_free(dir);
    md_device_close(d);
}

/* A head of 4 outputs: the file's 10-class head is re-initialised (the model's initial
 * values), with the line that says so; every other tensor loads. */
Test(transfer, vit_tiny_head_of_another_shape_is_reinitialised, .timeout = 60, .init = cr_redirect_stdout)
{
    md_device *d = th_open_device("cpu");
    const char *files[] = {FIX "/vit_tiny.timm.safetensors", FIX "/vit_tiny.hf.safetensors"};
    for (int k = 0; k < 2; k++) {
        md_model *m = vit_bound(d, 0, 4);
        size_t n = md_model_nparams(m);
        float *init = malloc(n * 4), *p = malloc(n * 4);
        cr_assert_eq(md_model_get_params_host(m, init), MD_OK);
        struct md_load_report rep;
        cr_assert_eq(md_model_load_transfer(m, files[k], MD_NAMES_AUTO, &rep), MD_OK, "%s", md_errmsg());
        cr_assert_eq(md_model_get_params_host(m, p), MD_OK);
        cr_assert_eq(rep.head_reinit.n, 2, "%s", files[k]);
        cr_assert(in_list(&rep.head_reinit, "head.weight") && in_list(&rep.head_reinit, "head.bias"));
        cr_assert_eq(rep.loaded.n, md_model_num_tensors(m) - 2);
        for (int t = 0; t < md_model_num_tensors(m); t++) {
            const struct md_param_info *ti = md_model_tensor(m, t);
            int head = !strncmp(ti->name, "head.", 5);
            cr_assert_eq(memcmp(p + ti->offset, init + ti->offset, ti->numel * 4) == 0, head, "%s: %s", files[k],
                         ti->name);
        }
        md_load_report_print(&rep);
        md_load_report_free(&rep);
        free(init);
        free(p);
        md_model_free(m);
    }
    md_device_close(d);
    fflush(stdout);
    char buf[8192] = "";
    size_t got = fread(buf, 1, sizeof buf - 1, cr_get_redirected_stdout());
    buf[got] = '\0';
    cr_assert_eq(th_count(buf, "head head.weight re-initialised: file (10, 32), model (4, 32)"), 2, "%s", buf);
    cr_assert_eq(th_count(buf, "head head.bias re-initialised: file (10,), model (4,)"), 2, "%s", buf);
}

/* The same through the binary: --init-from with the naming detected or named, and
 * --freeze all-but-last:1 leaving block 1, the final norm and the head trainable. */
Test(transfer, vit_tiny_init_from_on_the_command_line, .timeout = 120)
{
    char *dir = th_tmpdir(), args[2048], *out, *err;
    const char *cases[][4] = {
        {"vit_tiny.hf.safetensors", "auto", "(hf naming, detected):", "37 loaded, 0 resized, 1 skipped"},
        {"vit_tiny.timm.safetensors", "timm", "(timm naming):", "37 loaded, 0 resized, 0 skipped"},
    };
    for (int k = 0; k < 2; k++) {
        snprintf(args, sizeof args,
                 "--device cpu --threads 1 --dataset synthetic --model vit_tiny --max-samples 16 --epochs 1 "
                 "--steps 1 --init-from " FIX "/%s --init-names %s --freeze all-but-last:1 --checkpoint-dir %s/ck "
                 "--overwrite",
                 cases[k][0], cases[k][1], dir);
        int rc = th_run(args, &out, &err);
        cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
        cr_assert(strstr(out, cases[k][2]), "no '%s' in\n%s", cases[k][2], out);
        cr_assert(strstr(out, cases[k][3]), "no '%s' in\n%s", cases[k][3], out);
        /* block 1 (12,768), norm (64) and head (330) of 28,138 */
        cr_assert(strstr(out, "13,162 of 28,138 parameters trainable (--freeze all-but-last:1)"), "%s", out);
        free(out);
        free(err);
    }
    th_tmpdir_free(dir);
}

/* all-but-last:N on the ViT configs: a plain ViT (blocks.N.), the shared two-stream backbone
 * (backbone.blocks.N.) and two separate backbones (backbone_left/right.blocks.N., each its own
 * last N blocks). Frozen must be exactly: the stream's patch embedding, position embedding,
 * tokens and its blocks before the last N; never the final norms, the FiLM or the head. */
static int frozen_want(const char *nm, int nblocks, int n)
{
    const char *p = nm;
    if (!strncmp(p, "backbone.", 9)) p += 9;
    else if (!strncmp(p, "backbone_left.", 14)) p += 14;
    else if (!strncmp(p, "backbone_right.", 15)) p += 15;
    else if (strstr(nm, "backbone")) return -1;
    if (!strncmp(p, "patch_embed.", 12) || !strncmp(p, "pos_embed.", 10) || !strncmp(p, "tokens.", 7)) return 1;
    if (!strncmp(p, "blocks.", 7)) return atoi(p + 7) < nblocks - n;
    return 0;
}

Test(transfer, freeze_all_but_last_on_vit_and_two_stream_backbones)
{
    const char *cfgs[] = {"vit_tiny", "vit_tiled_two_stream_tiny", "vit_tiled_two_stream_separate"};
    const int nblocks[] = {2, 2, 12};
    for (int c = 0; c < 3; c++) {
        struct md_model_opts o;
        md_model_opts_default(&o);
        md_model *m;
        cr_assert_eq(md_model_load(cfgs[c], NULL, &o, &m), MD_OK, "%s", md_errmsg());
        int nt = md_model_num_tensors(m);
        uint8_t *fr = malloc((size_t)nt);
        const int ns[] = {0, 1, 2, 5};
        for (int k = 0; k < 4; k++) {
            char spec[32];
            snprintf(spec, sizeof spec, "all-but-last:%d", ns[k]);
            cr_assert_eq(md_model_freeze_mask(m, spec, fr), MD_OK, "%s %s: %s", cfgs[c], spec, md_errmsg());
            int nfrozen = 0, nleft = 0, nright = 0;
            for (int t = 0; t < nt; t++) {
                const char *nm = md_model_tensor(m, t)->name;
                int want = frozen_want(nm, nblocks[c], ns[k]);
                cr_assert(want >= 0, "%s: unexpected tensor %s", cfgs[c], nm);
                cr_assert_eq(fr[t], want, "%s %s: %s is %sfrozen", cfgs[c], spec, nm, fr[t] ? "" : "not ");
                nfrozen += fr[t];
                nleft += fr[t] && !strncmp(nm, "backbone_left.", 14);
                nright += fr[t] && !strncmp(nm, "backbone_right.", 15);
            }
            cr_assert(nfrozen > 0, "%s %s froze nothing", cfgs[c], spec);
            cr_assert_eq(nleft, nright, "%s %s: the two backbones froze %d and %d tensors", cfgs[c], spec, nleft,
                         nright);
        }
        free(fr);
        md_model_free(m);
    }
}

/* ---- training: frozen, backbone lr, unfreezing -------------------------------------------- */

#define RUN "--device cpu --threads 1 --dataset synthetic --model " FIX "/tiny.json --max-samples 32 --batch-size 8 " \
            "--num-workers 0 --no-augment --seed 3 --quiet --lradj constant --init-from " FIX "/tiny.ours.safetensors "

static float *trained(const char *extra, const char *dir, struct th_job *j)
{
    char args[2048];
    static int k;
    snprintf(args, sizeof args, RUN "%s --checkpoint-dir %s/ck%d", extra, dir, k++);
    th_job_run(j, args, 0, 0);
    cr_assert_eq(j->st, MD_OK, "%s: %s", extra, j->err);
    md_model *m = j->job.model;
    return th_download_flat(m, md_model_params(m));
}

static int is_head(const char *name) { return !strncmp(name, "head.", 5); }

Test(transfer, freeze_keeps_frozen_weights_bit_identical, .timeout = 120)
{
    char *dir = th_tmpdir();
    md_device *d = th_open_device("cpu");
    float *file = params_after(d, FIX "/tiny.json", FIX "/tiny.ours.safetensors", MD_NAMES_OURS, NULL);
    md_device_close(d);
    struct th_job j;
    float *p = trained("--epochs 2 --steps 2 --optimizer adamw --weight-decay 0.1 --freeze backbone", dir, &j);
    md_model *m = j.job.model;
    for (int t = 0; t < md_model_num_tensors(m); t++) {
        const struct md_param_info *ti = md_model_tensor(m, t);
        int same = memcmp(p + ti->offset, file + ti->offset, ti->numel * 4) == 0;
        cr_assert_eq(same, !is_head(ti->name), "%s: %s", ti->name, same ? "unchanged" : "changed");
    }
    const cJSON *x = cJSON_GetObjectItem(j.training, "transfer");
    size_t head = 0;
    for (int t = 0; t < md_model_num_tensors(m); t++)
        if (is_head(md_model_tensor(m, t)->name)) head += md_model_tensor(m, t)->numel;
    cr_assert_eq((size_t)cJSON_GetObjectItem(x, "trainable_params")->valuedouble, head);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetObjectItem(x, "init_from"), "loaded")),
                 md_model_num_tensors(m));
    free(p);
    th_job_end(&j);
    free(file);
    th_tmpdir_free(dir);
}

Test(transfer, backbone_lr_scales_the_backbone_step, .timeout = 120)
{
    char *dir = th_tmpdir();
    md_device *d = th_open_device("cpu");
    float *file = params_after(d, FIX "/tiny.json", FIX "/tiny.ours.safetensors", MD_NAMES_OURS, NULL);
    md_device_close(d);
    const char *sgd = "--epochs 1 --steps 1 --optimizer sgd --momentum 0 --weight-decay 0 --lr 0.1";
    char extra[512];
    struct th_job a, b;
    float *pa = trained(sgd, dir, &a);
    snprintf(extra, sizeof extra, "%s --backbone-lr 0.01", sgd);
    float *pb = trained(extra, dir, &b);
    md_model *m = a.job.model;
    int checked = 0;
    for (int t = 0; t < md_model_num_tensors(m); t++) {
        const struct md_param_info *ti = md_model_tensor(m, t);
        double want_ratio = is_head(ti->name) ? 1.0 : 0.1;
        for (size_t e = 0; e < ti->numel; e++) {
            size_t i = ti->offset + e;
            double da = (double)pa[i] - file[i], db = (double)pb[i] - file[i];
            if (fabs(da) < 1e-4) continue; /* too small a step to measure a ratio in fp32 */
            cr_assert(fabs(db - want_ratio * da) <= 1e-3 * fabs(da) + 1e-7, "%s[%zu]: step %g with --backbone-lr, %g "
                      "without (want x%g)", ti->name, e, db, da, want_ratio);
            checked++;
        }
    }
    cr_assert_gt(checked, 100);
    free(pa);
    free(pb);
    th_job_end(&a);
    th_job_end(&b);
    free(file);
    th_tmpdir_free(dir);
}

Test(transfer, unfreeze_after_trains_the_backbone_from_then_on, .timeout = 120)
{
    char *dir = th_tmpdir();
    md_device *d = th_open_device("cpu");
    float *file = params_after(d, FIX "/tiny.json", FIX "/tiny.ours.safetensors", MD_NAMES_OURS, NULL);
    md_device_close(d);
    for (int epochs = 1; epochs <= 2; epochs++) {
        char extra[256];
        struct th_job j;
        snprintf(extra, sizeof extra, "--epochs %d --steps 2 --optimizer adamw --freeze backbone --unfreeze-after 1",
                 epochs);
        float *p = trained(extra, dir, &j);
        md_model *m = j.job.model;
        const struct md_param_info *ti = md_model_tensor(m, md_model_find_tensor(m, "blocks.0.mlp.fc1.weight"));
        int same = memcmp(p + ti->offset, file + ti->offset, ti->numel * 4) == 0;
        cr_assert_eq(same, epochs == 1, "after %d epoch(s) the backbone %s", epochs, same ? "is unchanged" : "moved");
        const cJSON *u = cJSON_GetObjectItem(cJSON_GetObjectItem(j.training, "transfer"), "unfrozen_at_epoch");
        cr_assert(epochs == 1 ? cJSON_IsNull(u) : cJSON_IsNumber(u) && u->valueint == 2);
        free(p);
        th_job_end(&j);
    }
    free(file);
    th_tmpdir_free(dir);
}

/* ---- the binary's errors: one line, documented exit code ------------------------------------ */

Test(transfer, errors_are_one_line_with_exit_code, .timeout = 120)
{
    char *dir = th_tmpdir();
    char *bad = th_write(dir, "corrupt.safetensors", "this is not a safetensors file at all");
    struct {
        const char *extra, *want1, *want2;
        int rc;
    } cases[] = {
        {"--init-from " FIX "/tiny.timm.safetensors --init-names caffe", "--init-names", "caffe", 2},
        {"--init-from " FIX "/tiny.badshape.safetensors", "blocks.1.mlp.fc1.weight", "(24, 16)", 3},
        {"--init-from CORRUPT", "--init-from", "corrupt.safetensors", 3},
        {"--freeze nothing.here", "--freeze", "nothing.here", 2},
        {"--freeze backbone --unfreeze-after 0", "--unfreeze-after", "", 2},
        {"--unfreeze-after 2", "--unfreeze-after needs --freeze", "", 2},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        char extra[512], args[2048], *err;
        const char *p = strstr(cases[c].extra, "CORRUPT");
        if (p) snprintf(extra, sizeof extra, "--init-from %s", bad);
        else snprintf(extra, sizeof extra, "%s", cases[c].extra);
        snprintf(args, sizeof args,
                 "--device cpu --threads 1 --dataset synthetic --model " FIX "/tiny.json --max-samples 16 --epochs 1 "
                 "--steps 1 --quiet %s --checkpoint-dir %s/ck%zu",
                 extra, dir, c);
        int rc = th_run(args, NULL, &err);
        cr_assert_eq(rc, cases[c].rc, "%s: exit %d: %s", extra, rc, err);
        cr_assert(!strncmp(err, "mpsdiag: ", 9) && strstr(err, cases[c].want1) && strstr(err, cases[c].want2) &&
                  th_count_messages(err) == 1, "%s: %s", extra, err);
        if (c == 1) cr_assert(strstr(err, "(32, 16)"), "both shapes: %s", err);
        free(err);
    }
    free(bad);
    th_tmpdir_free(dir);
}

/* The binary's report: the transfer section validates against the schema,
 * lists every name, and the text gives counts and a few names. */
Test(transfer, report_json_validates_and_text_counts, .timeout = 120)
{
    char *dir = th_tmpdir();
    char args[2048], *out, *err;
    snprintf(args, sizeof args,
             "--device cpu --threads 1 --dataset synthetic --model " FIX "/tiny_c4.json --max-samples 16 --epochs 1 "
             "--steps 1 --init-from " FIX "/tiny.hf.safetensors --freeze backbone --backbone-lr 1e-3 "
             "--checkpoint-dir %s/ck --report %s/r.json",
             dir, dir);
    int rc = th_run(args, &out, &err);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    th_unwrap(out); /* lines of at most 100 columns: search the text whole */
    cr_assert(strstr(out, "29 loaded, 0 resized, 6 skipped") && strstr(out, "2 newly initialised") &&
              strstr(out, "head head.weight re-initialised: file (10, 16), model (4, 16)") &&
              strstr(out, "skipped: embeddings.cls_token") && strstr(out, "parameters trainable (--freeze backbone)"),
              "%s", out);
    char path[4200];
    snprintf(path, sizeof path, "%s/r.json", dir);
    cJSON *r = th_load_json(path), *s = th_load_json("docs/schema/report.schema.json");
    char e[600];
    cr_assert(th_schema_validate(s, r, e, sizeof e), "%s", e);
    const cJSON *x = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "training"), "transfer");
    const cJSON *l = cJSON_GetObjectItem(x, "init_from");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(l, "skipped")), 6);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(l, "loaded")), 29);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(l, "head_reinitialised")), 2);
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItem(x, "head")), 2);
    cr_assert_eq(cJSON_GetObjectItem(x, "trainable_params")->valueint, 4 * 16 + 4);
    cJSON_Delete(r);
    cJSON_Delete(s);
    free(out);
    free(err);
    th_tmpdir_free(dir);
}
