/* test_nn_seq.c - token-sequence layers (docs/transformers.md): every new
 * kind's gradients against central finite differences of L = sum(out * R)
 * (reference device, driven through md_model_set_output_grad), the CPU
 * device against the reference, the bundled configs' shapes and parameters,
 * model parameters set from the options, and the config errors. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/json.h"
#include "core/rng.h"
#include "nn/model.h"
#include "helpers.h"

/* All the new kinds in one regression model: per-token linear, instance
 * norm, transpose, positional embedding, causal attention with a residual,
 * layernorm, both GELUs, a conv1x1 linear, the de-normalisation. */
static const char *SEQ =
    "{\"name\":\"seq\",\"task\":\"regression\",\"params\":{\"t\":5,\"v\":4},"
    "\"inputs\":[{\"name\":\"x\",\"shape\":[\"$t\",\"$v\"]}],"
    "\"layers\":["
    " {\"name\":\"norm\",\"type\":\"instance_norm\"},"
    " {\"name\":\"tr\",\"type\":\"transpose\"},"
    " {\"name\":\"emb\",\"type\":\"linear\",\"out\":8},"
    " {\"name\":\"pos\",\"type\":\"pos_embedding\"},"
    " {\"name\":\"att\",\"type\":\"attention\",\"heads\":2,\"causal\":true},"
    " {\"name\":\"add\",\"type\":\"add\",\"inputs\":[\"pos\",\"att\"]},"
    " {\"name\":\"ln\",\"type\":\"layernorm\"},"
    " {\"name\":\"g\",\"type\":\"gelu_tanh\"},"
    " {\"name\":\"ff\",\"type\":\"linear\",\"out\":8,\"conv1x1\":true},"
    " {\"name\":\"g2\",\"type\":\"gelu\"},"
    " {\"name\":\"att2\",\"type\":\"attention\",\"heads\":4},"
    " {\"name\":\"proj\",\"type\":\"linear\",\"out\":6},"
    " {\"name\":\"tr2\",\"type\":\"transpose\"},"
    " {\"name\":\"den\",\"type\":\"instance_denorm\",\"stats\":\"norm\"}]}";

/* instance_norm's own backward (through its statistics): a layer with
 * parameters before it (instance_denorm treats the statistics as constants,
 * so it is checked where nothing learnable feeds the statistics, above). */
static const char *NORM =
    "{\"name\":\"norm\",\"task\":\"regression\",\"inputs\":[{\"name\":\"x\",\"shape\":[6,3]}],"
    "\"layers\":["
    " {\"name\":\"lin0\",\"type\":\"linear\",\"out\":4,\"per_token\":true},"
    " {\"name\":\"norm\",\"type\":\"instance_norm\"},"
    " {\"name\":\"tr\",\"type\":\"transpose\"},"
    " {\"name\":\"proj\",\"type\":\"linear\",\"out\":5}]}";

/* Tokens from an image, a transpose feeding two layers (accumulated
 * gradients), pooled classification. */
static const char *CLS =
    "{\"name\":\"cls\",\"num_classes\":3,\"inputs\":[{\"name\":\"img\",\"shape\":[1,4,6]}],"
    "\"layers\":["
    " {\"name\":\"tok\",\"type\":\"reshape\",\"shape\":[4,6]},"
    " {\"name\":\"e\",\"type\":\"linear\",\"out\":4},"
    " {\"name\":\"t\",\"type\":\"transpose\"},"
    " {\"name\":\"a\",\"type\":\"linear\",\"out\":4},"
    " {\"name\":\"b\",\"type\":\"linear\",\"out\":4,\"inputs\":[\"t\"]},"
    " {\"name\":\"s\",\"type\":\"add\",\"inputs\":[\"a\",\"b\"]},"
    " {\"name\":\"ln\",\"type\":\"layernorm\",\"affine\":false},"
    " {\"name\":\"t2\",\"type\":\"transpose\"},"
    " {\"name\":\"pool\",\"type\":\"global_avgpool\"},"
    " {\"name\":\"fc\",\"type\":\"linear\",\"out\":3}]}";

/* Time-feature tokens as the iTransformer adds them: a second input's
 * tokens concatenated after the variates', dropped again by a slice (its
 * backward zeroes the dropped tokens' gradient); and a slice from the middle
 * whose input also feeds another layer (accumulated gradient). */
static const char *MARKS =
    "{\"name\":\"marks\",\"task\":\"regression\",\"params\":{\"t\":6,\"v\":3,\"k\":2},"
    "\"inputs\":[{\"name\":\"x\",\"shape\":[\"$t\",\"$v\"]},{\"name\":\"m\",\"shape\":[\"$t\",\"$k\"],\"if\":\"$k\"}],"
    "\"layers\":["
    " {\"name\":\"xt\",\"type\":\"transpose\",\"inputs\":[\"x\"]},"
    " {\"name\":\"mt\",\"type\":\"transpose\",\"inputs\":[\"m\"],\"if\":\"$k\"},"
    " {\"name\":\"cat\",\"type\":\"concat\",\"inputs\":[\"xt\",\"mt\"],\"if\":\"$k\"},"
    " {\"name\":\"emb\",\"type\":\"linear\",\"out\":4,\"per_token\":true},"
    " {\"name\":\"mid\",\"type\":\"slice\",\"start\":1,\"count\":2},"
    " {\"name\":\"a\",\"type\":\"linear\",\"out\":4,\"per_token\":true,\"inputs\":[\"emb\"]},"
    " {\"name\":\"keep\",\"type\":\"slice\",\"count\":\"$v\",\"if\":\"$k\"},"
    " {\"name\":\"b\",\"type\":\"linear\",\"out\":4,\"per_token\":true,\"inputs\":[\"mid\"]},"
    " {\"name\":\"bb\",\"type\":\"concat\",\"inputs\":[\"keep\",\"b\"]}]}";


static md_status try_load(const char *text, const struct md_model_opts *o, md_model **m)
{
    cJSON *j = NULL;
    cr_assert_eq(md_json_parse(text, "t.json", &j), MD_OK, "%s", md_errmsg());
    md_status st = md_model_load("t.json", j, o, m);
    cJSON_Delete(j);
    return st;
}

static md_model *make(const char *text, md_device *d, int batch)
{
    struct md_model_opts o;
    md_model_opts_default(&o);
    o.seed = 7;
    md_model *m = NULL;
    cr_assert_eq(try_load(text, &o, &m), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_model_bind(m, d, batch), MD_OK, "%s", md_errmsg());
    return m;
}

static size_t out_numel(const md_model *m, int batch)
{
    int c, h, w;
    md_model_output_shape(m, &c, &h, &w);
    return (size_t)batch * c * h * w;
}

static void fill_inputs(md_model *m, int batch, uint64_t seed) { th_upload_inputs(m, batch, NULL, seed, 3.0f, 0.3f, 3); }

/* L = sum(out * R) of one training forward (no dropout in these models);
 * with backward, the parameter gradients follow. */
static double loss_of(md_model *m, int batch, const float *R, const float *R_dev, int backward)
{
    size_t no = out_numel(m, batch);
    cr_assert_eq(md_model_forward(m, batch, 1), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_dev_sync(md_model_device(m)), MD_OK);
    float *y = malloc(no * sizeof *y);
    cr_assert_eq(md_dev_download(md_model_device(m), y, md_model_logits(m), no * sizeof *y), MD_OK);
    double l = 0;
    for (size_t k = 0; k < no; k++) l += (double)y[k] * R[k];
    free(y);
    if (backward) {
        cr_assert_eq(md_model_set_output_grad(m, R_dev), MD_OK, "%s", md_errmsg());
        cr_assert_eq(md_model_backward(m), MD_OK, "%s", md_errmsg());
        cr_assert_eq(md_dev_sync(md_model_device(m)), MD_OK);
    }
    return l;
}

static float *make_R(md_model *m, int batch, float **R_dev)
{
    size_t no = out_numel(m, batch);
    float *R = malloc(no * sizeof *R);
    for (size_t k = 0; k < no; k++) R[k] = (float)sin(0.7 * (double)k + 0.3);
    cr_assert_eq(md_dev_alloc(md_model_device(m), no * 4, (void **)R_dev, "R"), MD_OK);
    cr_assert_eq(md_dev_upload(md_model_device(m), *R_dev, R, no * 4), MD_OK);
    return R;
}

/* Every parameter element's gradient against (L(p+h) - L(p-h)) / 2h. */
static void check_fd(const char *text, int batch)
{
    md_device *d = th_open_device("ref");
    md_model *m = make(text, d, batch);
    fill_inputs(m, batch, 3);
    float *R_dev;
    float *R = make_R(m, batch, &R_dev);
    size_t np = md_model_nparams(m);
    float *p = malloc(np * 4), *g = malloc(np * 4);
    cr_assert_eq(md_model_get_params_host(m, p), MD_OK);
    loss_of(m, batch, R, R_dev, 1);
    cr_assert_eq(md_model_get_grads_host(m, g), MD_OK);
    int bad = 0, checked = 0;
    for (int t = 0; t < md_model_num_tensors(m); t++) {
        const struct md_param_info *ti = md_model_tensor(m, t);
        for (size_t e = 0; e < ti->numel; e += 1 + ti->numel / 40) {
            size_t k = ti->offset + e;
            float keep = p[k];
            double h = 1e-2 * fmax(1.0, fabs(keep));
            p[k] = (float)(keep + h);
            cr_assert_eq(md_model_set_params_host(m, p), MD_OK);
            double lp = loss_of(m, batch, R, R_dev, 0);
            p[k] = (float)(keep - h);
            cr_assert_eq(md_model_set_params_host(m, p), MD_OK);
            double lm = loss_of(m, batch, R, R_dev, 0);
            p[k] = keep;
            double fd = (lp - lm) / (2 * h);
            checked++;
            if (fabs(fd - g[k]) > 2e-2 * fabs(fd) + 1e-3) {
                if (bad++ < 8) cr_log_error("%s[%zu]: backward %.6g, finite differences %.6g", ti->name, e, g[k], fd);
            }
        }
    }
    cr_assert_eq(md_model_set_params_host(m, p), MD_OK);
    cr_assert_eq(bad, 0, "%d of %d gradient elements differ", bad, checked);
    cr_assert_gt(checked, 40);
    free(p);
    free(g);
    free(R);
    md_dev_free(d, R_dev);
    md_model_free(m);
    md_device_close(d);
}

Test(nn_seq, finite_differences_all_kinds) { check_fd(SEQ, 3); }

Test(nn_seq, finite_differences_classifier_tokens) { check_fd(CLS, 2); }

Test(nn_seq, finite_differences_instance_norm) { check_fd(NORM, 3); }

Test(nn_seq, finite_differences_marks_and_slice) { check_fd(MARKS, 2); }

/* The CPU device gives the reference's outputs and gradients. */
static void cpu_vs_ref(const char *text, int batch)
{
    md_device *dr = th_open_device("ref"), *dc = th_open_device("cpu");
    md_model *mr = make(text, dr, batch), *mc = make(text, dc, batch);
    fill_inputs(mr, batch, 11);
    fill_inputs(mc, batch, 11);
    float *Rr, *Rc;
    float *R = make_R(mr, batch, &Rr);
    free(make_R(mc, batch, &Rc));
    double lr = loss_of(mr, batch, R, Rr, 1), lc = loss_of(mc, batch, R, Rc, 1);
    cr_assert(fabs(lr - lc) <= 1e-4 * fmax(1.0, fabs(lr)), "loss ref %.8g cpu %.8g", lr, lc);
    size_t np = md_model_nparams(mr);
    float *gr = malloc(np * 4), *gc = malloc(np * 4);
    cr_assert_eq(md_model_get_grads_host(mr, gr), MD_OK);
    cr_assert_eq(md_model_get_grads_host(mc, gc), MD_OK);
    double mx = 0;
    for (size_t k = 0; k < np; k++) mx = fmax(mx, fabs(gr[k]));
    for (size_t k = 0; k < np; k++)
        cr_assert(fabs(gr[k] - gc[k]) <= 1e-4 * fmax(1.0, mx), "grad %zu: ref %.8g cpu %.8g", k, gr[k], gc[k]);
    free(gr);
    free(gc);
    free(R);
    md_dev_free(dr, Rr);
    md_dev_free(dc, Rc);
    md_model_free(mr);
    md_model_free(mc);
    md_device_close(dr);
    md_device_close(dc);
}

Test(nn_seq, cpu_matches_reference) { cpu_vs_ref(SEQ, 4); }

Test(nn_seq, cpu_matches_reference_classifier) { cpu_vs_ref(CLS, 3); }

Test(nn_seq, cpu_matches_reference_marks) { cpu_vs_ref(MARKS, 3); }

/* n_marks 0: the marks input is absent, the concat and slice skipped; the
 * same parameters, one input. */
Test(nn_seq, itransformer_without_marks)
{
    md_model *m = NULL, *m0 = NULL;
    cr_assert_eq(md_model_load("itransformer", NULL, NULL, &m), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_model_num_inputs(m), 2);
    cr_assert_str_eq(md_model_input_name(m, 1), "marks");
    int c, h, w;
    md_model_input_shape(m, 1, &c, &h, &w);
    cr_assert(c == 96 && h == 1 && w == 4, "marks (%d, %d, %d)", c, h, w);
    struct md_model_opts o;
    md_model_opts_default(&o);
    cr_assert_eq(md_model_opts_set(&o, "n_marks", 0, 1), MD_OK);
    cr_assert_eq(md_model_load("itransformer", NULL, &o, &m0), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_model_num_inputs(m0), 1);
    cr_assert_eq(md_model_nparams(m0), md_model_nparams(m));
    cr_assert_eq(md_model_num_layers(m0), md_model_num_layers(m) - 3);
    md_model_output_shape(m0, &c, &h, &w);
    cr_assert(c == 96 && h == 1 && w == 7, "output (%d, %d, %d)", c, h, w);
    md_model_free(m);
    md_model_free(m0);
    /* and it runs: CPU against the reference */
    md_device *d = th_open_device("ref");
    md_model_opts_default(&o);
    static const char *const k[] = {"seq_len", "pred_len", "d_model", "d_ff", "n_heads", "n_marks"};
    static const double v[] = {8, 4, 8, 8, 2, 0};
    for (int i = 0; i < 6; i++) cr_assert_eq(md_model_opts_set(&o, k[i], v[i], 0), MD_OK);
    cr_assert_eq(md_model_load("itransformer", NULL, &o, &m0), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_model_bind(m0, d, 2), MD_OK, "%s", md_errmsg());
    fill_inputs(m0, 2, 5);
    float *R_dev;
    float *R = make_R(m0, 2, &R_dev);
    double l = loss_of(m0, 2, R, R_dev, 1);
    cr_assert(isfinite(l) && l != 0.0);
    free(R);
    md_dev_free(d, R_dev);
    md_model_free(m0);
    md_device_close(d);
}

/* Output shape, parameter names (PyTorch's) and counts of the configs. */
Test(nn_seq, itransformer_config)
{
    struct md_model_opts o;
    md_model_opts_default(&o);
    o.layout = MD_NHWC; /* token models run NCHW whatever was asked */
    cr_assert_eq(md_model_opts_set(&o, "n_vars", 21, 1), MD_OK);
    cr_assert_eq(md_model_opts_set(&o, "not_there", 1, 1), MD_OK); /* if_present: ignored */
    md_model *m = NULL;
    cr_assert_eq(md_model_load("itransformer", NULL, &o, &m), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_model_get_opts(m)->layout, MD_NCHW);
    cr_assert(md_model_is_regression(m));
    cr_assert_eq(md_model_num_classes(m), 0);
    int c, h, w;
    md_model_input_shape(m, 0, &c, &h, &w);
    cr_assert(c == 96 && h == 1 && w == 21, "input (%d, %d, %d)", c, h, w);
    md_model_output_shape(m, &c, &h, &w);
    cr_assert(c == 96 && h == 1 && w == 21, "output (%d, %d, %d)", c, h, w);
    const char *names[] = {"enc_embedding.value_embedding.weight", "encoder.attn_layers.0.attention.in_proj_weight",
                           "encoder.attn_layers.1.attention.out_proj.bias", "encoder.attn_layers.1.conv1.weight",
                           "encoder.attn_layers.0.norm2.weight", "encoder.norm.bias", "projector.weight"};
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++)
        cr_assert_geq(md_model_find_tensor(m, names[k]), 0, "%s", names[k]);
    const struct md_param_info *c1 = md_model_tensor(m, md_model_find_tensor(m, "encoder.attn_layers.1.conv1.weight"));
    cr_assert(c1->ndim == 3 && c1->shape[0] == 192 && c1->shape[1] == 192 && c1->shape[2] == 1);
    /* d_model 192, d_ff 192, 2 layers, seq 96 -> pred 96:
     * embed 96*192+192, per layer 4*192^2+4*192 + 2*(192^2+192) + 4*192, final norm 2*192, projector 192*96+96 */
    size_t per = 4 * 192 * 192 + 4 * 192 + 2 * (192 * 192 + 192) + 4 * 192;
    cr_assert_eq(md_model_nparams(m), (size_t)(96 * 192 + 192) + 2 * per + 2 * 192 + (192 * 96 + 96));
    md_model_free(m);

    md_model_opts_default(&o);
    cr_assert_eq(md_model_opts_set(&o, "d_modle", 64, 0), MD_OK);
    cr_assert_neq(md_model_load("itransformer", NULL, &o, &m), MD_OK);
    cr_assert(strstr(md_errmsg(), "no parameter 'd_modle'") && strstr(md_errmsg(), "d_model"), "%s", md_errmsg());
}

Test(nn_seq, transformer_encoder_config)
{
    md_model *m = NULL;
    cr_assert_eq(md_model_load("transformer_encoder", NULL, NULL, &m), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_model_num_classes(m), 10);
    cr_assert_geq(md_model_find_tensor(m, "encoder.layers.1.self_attn.in_proj_weight"), 0);
    cr_assert_geq(md_model_find_tensor(m, "pos_embed.weight"), 0);
    md_model_free(m);
}

static void expect_error(const char *text, const char *needle)
{
    md_model *m = NULL;
    cr_assert_neq(try_load(text, NULL, &m), MD_OK, "loaded: %s", text);
    cr_assert(strstr(md_errmsg(), needle), "message '%s' lacks '%s'", md_errmsg(), needle);
}

Test(nn_seq, config_errors)
{
    expect_error("{\"task\":\"regression\",\"inputs\":[{\"name\":\"x\",\"shape\":[4,6]}],\"layers\":["
                 "{\"type\":\"attention\",\"heads\":4}]}",
                 "4 heads do not divide the 6 features");
    expect_error("{\"task\":\"regression\",\"inputs\":[{\"name\":\"x\",\"shape\":[4,6]}],\"layers\":["
                 "{\"type\":\"instance_denorm\",\"stats\":\"nope\"}]}",
                 "'nope' is not an earlier instance_norm layer");
    expect_error("{\"task\":\"regression\",\"inputs\":[{\"name\":\"x\",\"shape\":[3,4,6]}],\"layers\":["
                 "{\"type\":\"transpose\"}]}",
                 "needs a token sequence (T, 1, F), got (3, 4, 6)");
    expect_error("{\"task\":\"regression\",\"inputs\":[{\"name\":\"x\",\"shape\":[4,6]}],\"layers\":["
                 "{\"type\":\"reshape\",\"shape\":[5,5]}]}",
                 "has not the input's 24 elements");
    expect_error("{\"task\":\"forecast\",\"inputs\":[{\"name\":\"x\",\"shape\":[4,6]}],\"layers\":["
                 "{\"type\":\"transpose\"}]}",
                 "not classification or regression");
    expect_error("{\"inputs\":[{\"name\":\"x\",\"shape\":[\"$nope\",6]}],\"layers\":[{\"type\":\"transpose\"}]}",
                 "unknown parameter 'nope'");
    expect_error("{\"task\":\"regression\",\"inputs\":[{\"name\":\"x\",\"shape\":[4,6]},"
                 "{\"name\":\"m\",\"shape\":[4,0],\"if\":0}],\"layers\":["
                 "{\"type\":\"transpose\",\"inputs\":[\"m\"]}]}",
                 "inputs[0]: 'm' is absent");
    expect_error("{\"task\":\"regression\",\"inputs\":[{\"name\":\"x\",\"shape\":[4,6],\"if\":1}],"
                 "\"layers\":[{\"type\":\"transpose\"}]}",
                 "the first input cannot be conditional");
    expect_error("{\"task\":\"regression\",\"inputs\":[{\"name\":\"x\",\"shape\":[4,6]}],\"layers\":["
                 "{\"type\":\"slice\",\"start\":2,\"count\":3}]}",
                 "tokens [2, 5) are not all in the input's 4");
    expect_error("{\"num_classes\":6,\"inputs\":[{\"name\":\"x\",\"shape\":[4,6]}],\"layers\":["
                 "{\"type\":\"layernorm\"}]}",
                 "must give (6, 1, 1)");
}

/* --features MS: target_only keeps variate target_col of the all-variate
 * forecast, after de-normalisation: the same weights give the same column. */
Test(nn_seq, itransformer_target_only_is_that_variates_forecast)
{
    md_device *d = th_open_device("ref");
    static const char *const k[] = {"seq_len", "pred_len", "d_model", "d_ff", "n_heads", "n_marks", "n_vars"};
    static const double v[] = {8, 4, 8, 8, 2, 0, 3};
    md_model *m[2];
    for (int t = 0; t < 2; t++) {
        struct md_model_opts o;
        md_model_opts_default(&o);
        for (int i = 0; i < 7; i++) cr_assert_eq(md_model_opts_set(&o, k[i], v[i], 0), MD_OK);
        cr_assert_eq(md_model_opts_set(&o, "target_only", t, 0), MD_OK);
        cr_assert_eq(md_model_opts_set(&o, "target_col", 2, 0), MD_OK);
        cr_assert_eq(md_model_load("itransformer", NULL, &o, &m[t]), MD_OK, "%s", md_errmsg());
        cr_assert_eq(md_model_bind(m[t], d, 2), MD_OK, "%s", md_errmsg());
        fill_inputs(m[t], 2, 9);
        cr_assert_eq(md_model_forward(m[t], 2, 0), MD_OK, "%s", md_errmsg());
    }
    int c, h, w;
    md_model_output_shape(m[1], &c, &h, &w);
    cr_assert(c == 4 && h == 1 && w == 1, "target-only output (%d, %d, %d)", c, h, w);
    float all[2 * 4 * 3], one[2 * 4];
    cr_assert_eq(md_dev_download(d, all, md_model_logits(m[0]), sizeof all), MD_OK);
    cr_assert_eq(md_dev_download(d, one, md_model_logits(m[1]), sizeof one), MD_OK);
    for (int i = 0; i < 8; i++)
        cr_assert_float_eq(one[i], all[i * 3 + 2], 1e-6f, "sample %d step %d: %g vs %g", i / 4, i % 4, one[i],
                           all[i * 3 + 2]);
    md_model_free(m[0]);
    md_model_free(m[1]);
    md_device_close(d);
}
