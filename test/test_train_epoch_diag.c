/* test_train_epoch_diag.c - the per-epoch diagnostics of a training run:
 * step phases, dead units and pathway balance in report.training.diagnostics
 * (valid against the report schema) and their sections in the HTML report;
 * pipelined steps report forward/backward/optimizer as one unit. Tiny
 * two-pathway model, synthetic data, 2 epochs of 2 steps. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "helpers.h"
#include "helpers_job.h"
#include "json_schema.h"

/* Two pathways (ReLU and GELU) fused by a weighted_add. */
static const char two_path[] =
    "{\"name\": \"two_path\", \"num_classes\": 4,\n"
    " \"inputs\": [{\"name\": \"a\", \"shape\": [1, 8, 8]}, {\"name\": \"b\", \"shape\": [1, 8, 8]}],\n"
    " \"layers\": [\n"
    "  {\"name\": \"a.conv\", \"type\": \"conv2d\", \"out\": 4, \"kernel\": 3, \"padding\": 1, \"inputs\": [\"a\"]},\n"
    "  {\"name\": \"a.relu\", \"type\": \"relu\"}, {\"name\": \"a.gap\", \"type\": \"global_avgpool\"},\n"
    "  {\"name\": \"b.conv\", \"type\": \"conv2d\", \"out\": 4, \"kernel\": 3, \"padding\": 1, \"inputs\": [\"b\"]},\n"
    "  {\"name\": \"b.gelu\", \"type\": \"gelu\"}, {\"name\": \"b.gap\", \"type\": \"global_avgpool\"},\n"
    "  {\"name\": \"fusion\", \"type\": \"weighted_add\", \"inputs\": [\"a.gap\", \"b.gap\"]},\n"
    "  {\"name\": \"flatten\", \"type\": \"flatten\"},\n"
    "  {\"name\": \"fc\", \"type\": \"linear\", \"out\": \"$num_classes\"}]}\n";

static void run_args(const char *dir, const char *extra, char *args, size_t n)
{
    char *m = th_write(dir, "two_path.json", two_path);
    snprintf(args, n,
             "--device cpu --threads 1 --dataset synthetic --model %s --max-samples 192 --batch-size 16 "
             "--num-workers 0 --seed 3 --epochs 2 --steps 2 --quiet --checkpoint-dir %s/ck %s",
             m, dir, extra);
    free(m);
}

static double share_of(const cJSON *ph, const char *key)
{
    const cJSON *p = cJSON_GetObjectItem(ph, key);
    if (cJSON_IsNull(p)) return 0;
    cr_assert(cJSON_IsObject(p), "phases.%s", key);
    double s = cJSON_GetObjectItem(p, "share")->valuedouble;
    cr_assert(s >= 0 && s <= 1, "phases.%s.share %g", key, s);
    return s;
}

/* The phases of one epoch: shares in [0, 1], measured ones > half the epoch, all <= 1. */
static void check_phases(const cJSON *ph, int pipelined)
{
    cr_assert(cJSON_IsObject(ph), "phases");
    cr_assert(cJSON_GetObjectItem(ph, "steps_s")->valuedouble > 0);
    static const char *const keys[] = {"data_wait", "upload", "forward", "backward", "optimizer", "sync"};
    double measured = 0;
    for (int k = 0; k < 6; k++) measured += share_of(ph, keys[k]);
    const cJSON *c = cJSON_GetObjectItem(ph, "combined");
    if (pipelined) {
        cr_assert(cJSON_IsNull(cJSON_GetObjectItem(ph, "forward")), "forward is not measured apart");
        cr_assert(cJSON_IsNull(cJSON_GetObjectItem(ph, "backward")));
        cr_assert(cJSON_IsNull(cJSON_GetObjectItem(ph, "optimizer")));
        cr_assert(cJSON_IsObject(c), "combined");
        cr_assert(strlen(cJSON_GetObjectItem(c, "reason")->valuestring) > 20);
        cr_assert_str_eq(cJSON_GetObjectItem(ph, "step_mode")->valuestring, "pipelined");
        measured += cJSON_GetObjectItem(c, "share")->valuedouble;
    } else {
        cr_assert(cJSON_IsNull(c));
        cr_assert_str_eq(cJSON_GetObjectItem(ph, "step_mode")->valuestring, "host_synced");
        cr_assert(share_of(ph, "forward") > 0 && share_of(ph, "backward") > 0);
    }
    double all = measured + share_of(ph, "other");
    cr_assert(measured > 0.5, "the measured phases cover %.3f of the epoch", measured);
    cr_assert(all <= 1.0 + 1e-9 && all > 0.999, "the phases sum to %.6f", all);
}

/* Dead units: the two activation layers, shares in [0, 1]; the balance of the fusion. */
static void check_probe(const cJSON *d)
{
    const cJSON *dead = cJSON_GetObjectItem(d, "dead_units");
    cr_assert_eq(cJSON_GetArraySize(dead), 2);
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(dead, 0), "layer")->valuestring, "a.relu");
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(dead, 1), "activation")->valuestring, "gelu");
    const cJSON *u;
    cJSON_ArrayForEach(u, dead)
    {
        double s = cJSON_GetObjectItem(u, "dead_share")->valuedouble;
        cr_assert(s >= 0 && s <= 1);
        cr_assert_eq(cJSON_GetObjectItem(u, "units")->valueint, 4);
    }
    const cJSON *bal = cJSON_GetObjectItem(d, "pathway_balance");
    cr_assert_eq(cJSON_GetArraySize(bal), 1);
    const cJSON *f = cJSON_GetArrayItem(bal, 0);
    cr_assert_str_eq(cJSON_GetObjectItem(f, "layer")->valuestring, "fusion");
    const cJSON *ins = cJSON_GetObjectItem(f, "inputs");
    cr_assert_eq(cJSON_GetArraySize(ins), 2);
    double sum = 0, ca = cJSON_GetObjectItem(cJSON_GetArrayItem(ins, 0), "mean_abs")->valuedouble,
           cb = cJSON_GetObjectItem(cJSON_GetArrayItem(ins, 1), "mean_abs")->valuedouble;
    cJSON_ArrayForEach(u, ins) sum += cJSON_GetObjectItem(u, "share")->valuedouble;
    cr_assert_float_eq(sum, 1.0, 1e-9);
    cr_assert(ca + cb > 0);
    cr_assert_float_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(ins, 0), "share")->valuedouble, ca / (ca + cb), 1e-9);
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetArrayItem(ins, 1), "input")->valuestring, "b.gap");
    const cJSON *probe = cJSON_GetObjectItem(d, "probe");
    cr_assert_eq(cJSON_GetObjectItem(probe, "samples")->valueint, 16);
    cr_assert_str_eq(cJSON_GetObjectItem(probe, "split")->valuestring, "validation");
}

Test(epoch_diag, report_and_html_carry_phases_dead_units_and_balance, .timeout = 120)
{
    char *dir = th_tmpdir();
    char extra[1200], args[4096], p[4200];
    snprintf(extra, sizeof extra, "--html %s/r.html", dir);
    run_args(dir, extra, args, sizeof args);
    char *out = NULL, *err = NULL;
    cJSON *rep = th_run_report(dir, args, 0, &out, &err);
    cJSON *s = NULL;
    cr_assert_eq(md_json_load_file("docs/schema/report.schema.json", &s), MD_OK, "%s", md_errmsg());
    char verr[600];
    cr_assert(th_schema_validate(s, rep, verr, sizeof verr), "the report: %s", verr);
    /* the schema requires the three per epoch: without them it must fail */
    cJSON *bad = cJSON_Duplicate(rep, 1);
    cJSON_DeleteItemFromObject(cJSON_GetArrayItem(cJSON_GetObjectItem(cJSON_GetObjectItem(bad, "training"),
                                                                      "diagnostics"), 0), "pathway_balance");
    cr_assert_not(th_schema_validate(s, bad, verr, sizeof verr));
    cJSON_Delete(bad);
    cJSON_Delete(s);
    const cJSON *diag = cJSON_GetObjectItem(cJSON_GetObjectItem(rep, "training"), "diagnostics");
    cr_assert_eq(cJSON_GetArraySize(diag), 2);
    const cJSON *d;
    cJSON_ArrayForEach(d, diag)
    {
        check_phases(cJSON_GetObjectItem(d, "phases"), 0);
        check_probe(d);
    }
    cJSON_Delete(rep);
    snprintf(p, sizeof p, "%s/r.html", dir);
    char *html = th_slurp(p, NULL);
    cr_assert_not_null(html);
    static const char *const want[] = {"id=\"epoch-phases\"", "Step time by phase", "id=\"epoch-dead-units\"",
                                       "a.relu", "b.gelu", "id=\"epoch-pathways\"", "b.gap", "epoch 2"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        cr_assert(strstr(strstr(html, "id=\"epoch-phases\"") ? strstr(html, "id=\"epoch-phases\"") : html, want[i]),
                  "the page lacks %s", want[i]);
    free(html);
    free(out);
    free(err);
    th_tmpdir_free(dir);
}

/* Pipelined steps (forced on the CPU, as CUDA runs them): forward, backward
 * and optimizer are one unit, reported as such, not split. */
Test(epoch_diag, pipelined_steps_report_one_combined_phase, .timeout = 120)
{
    char *dir = th_tmpdir();
    char args[4096];
    run_args(dir, "", args, sizeof args);
    /* 3 steps: the epoch's last runs host-synced, the others pipelined */
    char *st = strstr(args, "--steps 2");
    st[8] = '3';
    struct th_job j;
    th_job_run(&j, args, 0, 1);
    cr_assert_eq(j.st, MD_OK, "%s", j.err);
    const cJSON *d;
    int n = 0;
    cJSON_ArrayForEach(d, cJSON_GetObjectItem(j.training, "diagnostics"))
    {
        check_phases(cJSON_GetObjectItem(d, "phases"), 1);
        n++;
    }
    cr_assert_eq(n, 2);
    th_job_end(&j);
    th_tmpdir_free(dir);
}

/* The probe batch is the same every epoch: with the weights unchanged
 * (lr 1e-12, no BN) every epoch's probe gives the same figures. */
Test(epoch_diag, the_probe_batch_is_fixed, .timeout = 120)
{
    char *dir = th_tmpdir();
    char args[4096];
    run_args(dir, "--lr 1e-12 --lradj constant", args, sizeof args);
    struct th_job j;
    th_job_run(&j, args, 0, 0);
    cr_assert_eq(j.st, MD_OK, "%s", j.err);
    const cJSON *diag = cJSON_GetObjectItem(j.training, "diagnostics");
    const cJSON *d0 = cJSON_GetArrayItem(diag, 0), *d1 = cJSON_GetArrayItem(diag, 1);
    static const char *const keys[] = {"dead_units", "pathway_balance"};
    for (int k = 0; k < 2; k++) {
        char *a = cJSON_PrintUnformatted(cJSON_GetObjectItem(d0, keys[k]));
        char *b = cJSON_PrintUnformatted(cJSON_GetObjectItem(d1, keys[k]));
        cr_assert_str_eq(a, b, "%s differs between epochs", keys[k]);
        free(a);
        free(b);
    }
    th_job_end(&j);
    th_tmpdir_free(dir);
}
