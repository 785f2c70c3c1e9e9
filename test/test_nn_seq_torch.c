/* test_nn_seq_torch.c - the sequence layers against PyTorch: the fixtures of
 * test/fixtures/seq (scripts/gen_seq_fixtures.py) hold a module's state dict
 * with PyTorch's names, its inputs, a fixed R, and the output and parameter
 * gradients of L = sum(out * R) computed in float64. Each case loads the
 * state dict with md_model_load_weights (the iTransformer's separate
 * query/key/value projections stack into in_proj_weight), runs forward and
 * backward (md_model_set_output_grad(R)) on the reference and CPU devices and
 * compares the output and every parameter gradient.
 *
 * Tolerance per tensor: |x - ref| <= 1e-4 * max|ref| + 1e-3 * |ref| (fp32
 * against float64 through a few hundred sums; the worst seen is about 10x
 * below it). A test swaps the query and key blocks of a loaded model and
 * requires the comparison to fail. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/json.h"
#include "core/safetensors.h"
#include "nn/model.h"
#include "helpers.h"

#define FIXTURE_DIR "test/fixtures/seq"
#define BATCH 2

static const char *ATTN =
    "{\"name\":\"attn\",\"task\":\"regression\",\"inputs\":[{\"name\":\"x\",\"shape\":[5,6]}],"
    "\"layers\":[{\"name\":\"emb\",\"type\":\"linear\",\"out\":8},"
    " {\"name\":\"attn\",\"type\":\"attention\",\"heads\":2,\"causal\":%s}]}";


/* The case's model, bound on d with the fixture's weights and inputs. */
static md_model *make_case(const char *name, md_device *d, const md_st_file *ref)
{
    struct md_model_opts o;
    md_model_opts_default(&o);
    md_model *m = NULL;
    if (!strcmp(name, "itransformer")) {
        static const struct {
            const char *k;
            double v;
        } p[] = {{"seq_len", 16}, {"pred_len", 8}, {"n_vars", 3}, {"n_marks", 4}, {"d_model", 16},
                 {"d_ff", 24},    {"n_heads", 2},  {"e_layers", 2}, {"dropout", 0}};
        for (size_t k = 0; k < sizeof p / sizeof p[0]; k++)
            cr_assert_eq(md_model_opts_set(&o, p[k].k, p[k].v, 0), MD_OK, "%s", md_errmsg());
        cr_assert_eq(md_model_load("itransformer", NULL, &o, &m), MD_OK, "%s", md_errmsg());
    } else {
        char text[512];
        snprintf(text, sizeof text, ATTN, strstr(name, "causal") ? "true" : "false");
        cJSON *j = NULL;
        cr_assert_eq(md_json_parse(text, "attn.json", &j), MD_OK, "%s", md_errmsg());
        cr_assert_eq(md_model_load("attn.json", j, &o, &m), MD_OK, "%s", md_errmsg());
        cJSON_Delete(j);
    }
    cr_assert_eq(md_model_bind(m, d, BATCH), MD_OK, "%s", md_errmsg());
    char path[256];
    snprintf(path, sizeof path, FIXTURE_DIR "/%s.torch.safetensors", name);
    cr_assert_eq(md_model_load_weights(m, path), MD_OK, "%s", md_errmsg());
    for (int i = 0; i < md_model_num_inputs(m); i++) {
        char key[128];
        snprintf(key, sizeof key, "input.%s", md_model_input_name(m, i));
        const struct md_st_tensor *t = md_st_find(ref, key);
        cr_assert(t, "%s: no %s", name, key);
        int c, h, w;
        md_model_input_shape(m, i, &c, &h, &w);
        cr_assert_eq(t->numel, (long long)BATCH * c * h * w, "%s: %s", name, key);
        float *x = malloc(t->nbytes);
        memcpy(x, t->data, t->nbytes);
        cr_assert_eq(md_dev_upload(d, md_model_input_buffer(m, i), x, t->nbytes), MD_OK);
        free(x);
    }
    return m;
}

/* Set where differences are expected: criterion's error log would fail the
 * run whatever the assertions say. */
static int quiet;

/* Elements of `got` outside the tolerance against the fixture tensor `key`
 * (or its parts stacked, for a tensor with stacked_from); logs the worst. */
static int compare(const md_st_file *ref, const char *key, const struct md_param_info *ti, const float *got,
                   size_t n, const char *what)
{
    float *want = malloc(n * sizeof *want);
    size_t have = 0;
    const struct md_st_tensor *t = md_st_find(ref, key);
    if (t) {
        cr_assert_eq((size_t)t->numel, n, "%s: %s has %lld elements, want %zu", what, key, t->numel, n);
        memcpy(want, t->data, t->nbytes);
        have = n;
    } else {
        cr_assert(ti && ti->stacked_from, "%s: the fixture lacks %s", what, key);
        for (int k = 0; ti->stacked_from[k]; k++) {
            char part[700];
            snprintf(part, sizeof part, "grad.%s.%s", ti->layer, ti->stacked_from[k]);
            const struct md_st_tensor *p = md_st_find(ref, part);
            cr_assert(p && have + (size_t)p->numel <= n, "%s: the fixture lacks %s", what, part);
            memcpy(want + have, p->data, p->nbytes);
            have += (size_t)p->numel;
        }
    }
    cr_assert_eq(have, n, "%s: %s", what, key);
    double mx = 0;
    for (size_t k = 0; k < n; k++) mx = fmax(mx, fabs(want[k]));
    int bad = 0;
    size_t worst = 0;
    double worst_ratio = 0;
    for (size_t k = 0; k < n; k++) {
        double tol = 1e-4 * mx + 1e-3 * fabs(want[k]), e = fabs((double)got[k] - want[k]);
        if (!(e <= tol)) bad++;
        if (e / tol > worst_ratio || isnan(got[k])) worst_ratio = e / tol, worst = k;
    }
    if (bad && !quiet)
        cr_log_error("%s: %s: %d of %zu elements differ; worst [%zu] %.8g, PyTorch %.8g", what, key, bad, n, worst,
                     got[worst], want[worst]);
    free(want);
    return bad;
}

/* Forward and backward of the bound case; the number of tensors (output
 * and gradients) that differ from the fixture. */
static int run_and_compare(md_model *m, const md_st_file *ref, const char *what)
{
    md_device *d = md_model_device(m);
    const struct md_st_tensor *R = md_st_find(ref, "R"), *out = md_st_find(ref, "output");
    cr_assert(R && out);
    int c, h, w;
    md_model_output_shape(m, &c, &h, &w);
    size_t no = (size_t)BATCH * c * h * w;
    cr_assert_eq((size_t)R->numel, no, "%s: R has %lld elements, the output %zu", what, R->numel, no);
    float *y = malloc(no * 4);
    void *R_dev = NULL;
    cr_assert_eq(md_dev_alloc(d, no * 4, &R_dev, "R"), MD_OK);
    memcpy(y, R->data, no * 4);
    cr_assert_eq(md_dev_upload(d, R_dev, y, no * 4), MD_OK);
    cr_assert_eq(md_model_forward(m, BATCH, 1), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_dev_sync(d), MD_OK);
    cr_assert_eq(md_dev_download(d, y, md_model_logits(m), no * 4), MD_OK);
    cr_assert_eq(md_model_set_output_grad(m, R_dev), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_model_backward(m), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_dev_sync(d), MD_OK);
    int bad = compare(ref, "output", NULL, y, no, what) != 0;
    size_t np = md_model_nparams(m);
    float *g = malloc(np * 4);
    cr_assert_eq(md_model_get_grads_host(m, g), MD_OK);
    for (int t = 0; t < md_model_num_tensors(m); t++) {
        const struct md_param_info *ti = md_model_tensor(m, t);
        char key[700];
        snprintf(key, sizeof key, "grad.%s", ti->name);
        bad += compare(ref, key, ti, g + ti->offset, ti->numel, what) != 0;
    }
    free(g);
    free(y);
    md_dev_free(d, R_dev);
    return bad;
}

static md_st_file *open_ref(const char *name)
{
    char path[256];
    snprintf(path, sizeof path, FIXTURE_DIR "/%s.ref.safetensors", name);
    md_st_file *f = NULL;
    cr_assert_eq(md_st_open(path, &f), MD_OK, "%s", md_errmsg());
    return f;
}

static void check_case(const char *name, const char *dev)
{
    md_st_file *ref = open_ref(name);
    md_device *d = th_open_device(dev);
    md_model *m = make_case(name, d, ref);
    char what[64];
    snprintf(what, sizeof what, "%s on %s", name, dev);
    int bad = run_and_compare(m, ref, what);
    cr_assert_eq(bad, 0, "%s: %d tensors differ from PyTorch's", what, bad);
    cr_assert_gt(md_model_num_tensors(m), 3);
    md_model_free(m);
    md_device_close(d);
    md_st_close(ref);
}

Test(nn_seq_torch, attention_ref) { check_case("attention", "ref"); }
Test(nn_seq_torch, attention_cpu) { check_case("attention", "cpu"); }
Test(nn_seq_torch, attention_causal_ref) { check_case("attention_causal", "ref"); }
Test(nn_seq_torch, attention_causal_cpu) { check_case("attention_causal", "cpu"); }
Test(nn_seq_torch, itransformer_ref) { check_case("itransformer", "ref"); }
Test(nn_seq_torch, itransformer_cpu) { check_case("itransformer", "cpu"); }

/* The comparison catches a wrong stacking order: the query and key blocks
 * of every loaded in_proj_weight swapped. */
Test(nn_seq_torch, swapped_query_key_fails)
{
    md_st_file *ref = open_ref("itransformer");
    md_device *d = th_open_device("ref");
    md_model *m = make_case("itransformer", d, ref);
    size_t np = md_model_nparams(m);
    float *p = malloc(np * 4);
    cr_assert_eq(md_model_get_params_host(m, p), MD_OK);
    int swapped = 0;
    for (int t = 0; t < md_model_num_tensors(m); t++) {
        const struct md_param_info *ti = md_model_tensor(m, t);
        if (!strstr(ti->name, "in_proj_weight")) continue;
        size_t third = ti->numel / 3;
        for (size_t k = 0; k < third; k++) {
            float *q = p + ti->offset + k, *kk = q + third, s = *q;
            *q = *kk;
            *kk = s;
        }
        swapped++;
    }
    cr_assert_eq(swapped, 2);
    cr_assert_eq(md_model_set_params_host(m, p), MD_OK);
    quiet = 1;
    int bad = run_and_compare(m, ref, "itransformer with q and k swapped");
    quiet = 0;
    cr_assert_gt(bad, 10, "only %d tensors differ", bad);
    free(p);
    md_model_free(m);
    md_device_close(d);
    md_st_close(ref);
}

/* A state dict that lacks a projection: the error names what is missing. */
Test(nn_seq_torch, missing_projection_is_an_error)
{
    md_device *d = th_open_device("ref");
    struct md_model_opts o;
    md_model_opts_default(&o);
    cr_assert_eq(md_model_opts_set(&o, "d_model", 8, 0), MD_OK);
    md_model *m = NULL;
    cr_assert_eq(md_model_load("itransformer", NULL, &o, &m), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_model_bind(m, d, 1), MD_OK, "%s", md_errmsg());
    cr_assert_neq(md_model_load_weights(m, FIXTURE_DIR "/attention.torch.safetensors"), MD_OK);
    cr_assert(strstr(md_errmsg(), "enc_embedding.value_embedding.weight"), "%s", md_errmsg());
    md_model_free(m);
    md_device_close(d);
}
