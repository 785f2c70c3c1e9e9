/* test_config_safety.c - every JSON the tool reads refuses a key that appears
 * twice in one object (naming its JSON path), and model expansion is bounded and linear: a
 * duplicate key with a "$param" value, a config that expands to billions of
 * layers, or parameters beyond any machine's memory end in a clear error
 * rather than a hang, a crash or an out-of-memory kill. Runs of the binary go
 * under `timeout -s KILL` and a memory limit so a regression fails the test
 * instead of hanging the suite. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/log.h"
#include "core/safetensors.h"
#include "diag/preset.h"
#include "helpers.h"
#include "nn/model.h"

/* Runs the binary on the CPU with synthetic data, no training, under a kill
 * timeout and a 4 GiB address-space limit (not under AddressSanitizer,
 * whose shadow memory needs terabytes of address space; make asan sets
 * ASAN_OPTIONS). Returns the exit code (137 when killed); *err gets stderr
 * (caller frees). */
static int run_capped(const char *args, int seconds, char **err)
{
    char *dir = th_tmpdir();
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "sh -c '%s exec timeout -s KILL %d %s --device cpu --dataset synthetic --epochs 0 %s' "
             ">%s/out 2>%s/err </dev/null", getenv("ASAN_OPTIONS") ? "" : "ulimit -v 4194304;", seconds, th_bin(), args,
             dir, dir);
    int rc = system(cmd);
    char p[4200];
    snprintf(p, sizeof p, "%s/err", dir);
    *err = th_slurp(p, NULL);
    if (!*err) *err = strdup("");
    th_tmpdir_free(dir);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
}

static const char *model_head =
    "{\"name\": \"t\", \"num_classes\": 10, \"inputs\": [{\"name\": \"image\", \"shape\": [1, 28, 28]}],\n";
static const char *model_tail =
    "{\"type\": \"global_avgpool\"}, {\"type\": \"flatten\"}, {\"type\": \"linear\", \"out\": 10}]}\n";

/* run_capped on `--model` of a model.json made of `blocks` (the "blocks"
 * member and its comma, or "") and the first `layers` (each followed by ", "). */
static int run_model(const char *blocks, const char *layers, int seconds, char **err)
{
    char *dir = th_tmpdir();
    size_t n = strlen(model_head) + strlen(blocks) + strlen(layers) + strlen(model_tail) + 64;
    char *text = malloc(n);
    snprintf(text, n, "%s%s\"layers\": [%s%s", model_head, blocks, layers, model_tail);
    char *p = th_write(dir, "model.json", text), args[1200];
    snprintf(args, sizeof args, "--model %s", p);
    int rc = run_capped(args, seconds, err);
    free(text);
    free(p);
    th_tmpdir_free(dir);
    return rc;
}

/* The config a fuzzer found: the second "out" is a block parameter. */
Test(config_safety, duplicate_key_with_param_reference_fails_at_once, .timeout = 60)
{
    char *err = NULL;
    int rc = run_model("\"blocks\": {\"b\": {\"params\": {\"n\": 8}, \"layers\": [{\"type\": \"conv2d\", "
                       "\"out\": 4, \"out\": \"$n\", \"kernel\": 3}]}},\n",
                       "{\"type\": \"b\"}, ", 20, &err);
    cr_expect_eq(rc, 3, "exit %d (137: killed after hanging): %s", rc, err);
    cr_expect(strstr(err, "blocks.b.layers[0].out") && strstr(err, "appears twice"), "%s", err);
    cr_expect(strstr(err, "model.json"), "names the file: %s", err);
    free(err);
}

Test(config_safety, parser_names_the_path_of_a_duplicate_key)
{
    static const struct { const char *text, *path; } cases[] = {
        {"{\"a\": 1, \"a\": 2}", "t.json: a: key appears twice"},
        {"{\"a\": {\"b\": [0, {\"c\": 1, \"d\": 2, \"c\": 3}]}}", "t.json: a.b[1].c: key appears twice"},
        {"{\"x\": [[{\"y\": {\"z\": 1, \"z\": {}}}]]}", "t.json: x[0][0].y.z: key appears twice"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cJSON *j = NULL;
        cr_expect_eq(md_json_parse(cases[i].text, "t.json", &j), MD_ERR_CONFIG, "%s", cases[i].text);
        cr_expect_null(j);
        cr_expect(strstr(md_errmsg(), cases[i].path), "%s: got '%s'", cases[i].path, md_errmsg());
    }
    /* a large object goes through the hash map: the same answer */
    char big[40000];
    size_t at = (size_t)snprintf(big, sizeof big, "{");
    for (int k = 0; k < 2000; k++) at += (size_t)snprintf(big + at, sizeof big - at, "\"k%d\": %d, ", k, k);
    snprintf(big + at, sizeof big - at, "\"k1234\": 0}");
    cJSON *j = NULL;
    cr_expect_eq(md_json_parse(big, "big.json", &j), MD_ERR_CONFIG);
    cr_expect(strstr(md_errmsg(), "big.json: k1234: key appears twice"), "%s", md_errmsg());
    /* equal keys in different objects are fine */
    cr_expect_eq(md_json_parse("{\"a\": {\"k\": 1}, \"b\": {\"k\": 1}, \"c\": [{\"k\": 1}, {\"k\": 2}]}", "ok.json", &j),
                 MD_OK, "%s", md_errmsg());
    cJSON_Delete(j);
}

Test(config_safety, run_config_and_preset_refuse_duplicate_keys)
{
    char *dir = th_tmpdir();
    char *cfg = th_write(dir, "run.json", "{\"epochs\": 1, \"batch_size\": 8, \"epochs\": 3}");
    char args[1200], *err = NULL;
    snprintf(args, sizeof args, "--config %s --device cpu --dataset synthetic --epochs 0", cfg);
    int rc = th_run(args, NULL, &err);
    cr_expect_eq(rc, 3, "exit %d: %s", rc, err);
    cr_expect(strstr(err, "run.json: epochs: key appears twice"), "%s", err);
    free(err);
    char *pre = th_write(dir, "preset.json",
                         "{\"chip\": \"M9\", \"source\": \"t\", \"match\": [\"M9\"], \"batch_size\": 8, \"batch_size_max\": 16, "
                         "\"image_batch_size\": 8, \"d_model\": 64, \"d_ff\": 256, \"seq_len_max\": 128, \"compile_mode\": "
                         "\"default\", \"model_memory_gb\": 1, \"memory_fraction\": 0.5, \"batch_size\": 4096}");
    struct md_preset ps;
    cr_expect_eq(md_preset_load(pre, &ps), MD_ERR_CONFIG);
    cr_expect(strstr(md_errmsg(), "batch_size: key appears twice"), "%s", md_errmsg());
    free(cfg);
    free(pre);
    th_tmpdir_free(dir);
}

/* A safetensors header as given (padded to 8), then `data` bytes of zeros. */
static char *write_st(const char *dir, const char *name, const char *header, size_t data)
{
    size_t h = strlen(header), padded = (h + 7) / 8 * 8;
    char *path = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    for (int i = 0; i < 8; i++) fputc((int)((padded >> (8 * i)) & 0xff), f);
    fputs(header, f);
    for (size_t i = h; i < padded; i++) fputc(' ', f);
    for (size_t i = 0; i < data; i++) fputc(0, f);
    fclose(f);
    return path;
}

Test(config_safety, safetensors_header_refuses_duplicate_keys)
{
    char *dir = th_tmpdir();
    static const struct { const char *header, *want; } cases[] = {
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"dtype\": \"I32\", \"data_offsets\": [0, 8]}}", "w.dtype"},
        {"{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8], \"data_offsets\": [0, 8]}}",
         "w.data_offsets"},
        {"{\"__metadata__\": {\"epoch\": \"1\"}, \"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, "
         "\"__metadata__\": {\"best_val_acc\": \"0.9\"}}", "__metadata__"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *p = write_st(dir, "d.safetensors", cases[i].header, 8);
        md_st_file *f = NULL;
        cr_expect_eq(md_st_open(p, &f), MD_ERR_DATA, "%s", cases[i].header);
        cr_expect(strstr(md_errmsg(), cases[i].want) && strstr(md_errmsg(), "appears twice") && strstr(md_errmsg(), p),
                  "%s: '%s'", cases[i].want, md_errmsg());
        md_st_close(f);
        free(p);
    }
    th_tmpdir_free(dir);
}

static md_status load_text(const char *text, md_model **m)
{
    cJSON *j = NULL;
    md_status st = md_json_parse(text, "t.json", &j);
    if (st != MD_OK) return st;
    struct md_model_opts o;
    md_model_opts_default(&o);
    *m = NULL;
    st = md_model_load("t.json", j, &o, m);
    cJSON_Delete(j);
    return st;
}

/* Blocks that repeat blocks: 10^4 x 10^4 x 10^4 layers. */
Test(config_safety, expansion_is_capped_in_layers, .timeout = 60)
{
    char *err = NULL;
    int rc = run_model("\"blocks\": {\"a\": {\"layers\": [{\"type\": \"relu\", \"repeat\": 10000}]},\n"
                       "  \"b\": {\"layers\": [{\"type\": \"a\", \"repeat\": 10000}]}},\n",
                       "{\"type\": \"b\", \"repeat\": 10000}, ", 30, &err);
    cr_expect_eq(rc, 3, "exit %d (137: killed: took too long or too much memory): %s", rc, err);
    cr_expect(strstr(err, "model.json") && strstr(err, "layers") && strstr(err, "more than"), "%s", err);
    free(err);
}

/* Parameters no machine holds, and products that overflow 64 bits. */
Test(config_safety, parameters_and_outputs_are_capped, .timeout = 60)
{
    static const struct { const char *layers, *want; } cases[] = {
        /* 2^20 x (2^20 x 64 x 64) weights: 2^52 parameters */
        {"{\"type\": \"conv2d\", \"out\": 1048576, \"kernel\": 1}, {\"type\": \"conv2d\", \"out\": 1048576, "
         "\"kernel\": [4, 4]}, ",
         "parameters"},
        /* 2^20 x 2^20 x 4096 x 4096: the product passes 2^63 */
        {"{\"type\": \"conv2d\", \"out\": 1048576, \"kernel\": 1}, {\"type\": \"conv2d\", \"out\": 1048576, "
         "\"kernel\": 4096, \"padding\": 2048}, ",
         "parameters"},
        /* one sample's output of 2^20 x 4124 x 4124 elements */
        {"{\"type\": \"conv2d\", \"out\": 1048576, \"kernel\": 1, \"padding\": 2048}, ", "elements"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char text[2000];
        snprintf(text, sizeof text, "%s\"layers\": [%s%s", model_head, cases[i].layers, model_tail);
        md_model *m = NULL;
        md_status st = load_text(text, &m);
        cr_expect_eq(st, MD_ERR_CONFIG, "case %zu: %s", i, md_errmsg());
        cr_expect(strstr(md_errmsg(), cases[i].want) && strstr(md_errmsg(), "t.json: layers["), "case %zu: '%s'", i,
                  md_errmsg());
        md_model_free(m);
    }
}

/* 60,000 layers: a name look-up per layer that scans every earlier name takes
 * minutes; a linear expansion takes well under a second. */
Test(config_safety, expansion_is_linear_in_layers, .timeout = 30)
{
    char text[2000];
    snprintf(text, sizeof text,
             "%s\"blocks\": {\"pair\": {\"layers\": [{\"type\": \"relu\"}, {\"type\": \"relu\", \"inputs\": [\"in\"]}]}},\n"
             "\"layers\": [{\"type\": \"pair\", \"repeat\": 10000}, {\"type\": \"pair\", \"repeat\": 10000}, "
             "{\"type\": \"pair\", \"repeat\": 10000}, %s",
             model_head, model_tail);
    md_model *m = NULL;
    cr_assert_eq(load_text(text, &m), MD_OK, "%s", md_errmsg());
    cr_expect_eq(md_model_num_layers(m), 60003);
    md_model_free(m);
}

/* Found by the model-config fuzzer: a long layer name inside nested block
 * instances overran the 512-byte full-name buffer (the block prefix was
 * longer than the truncated name it was skipped over). */
Test(config_safety, long_names_in_nested_blocks_are_refused)
{
    char name[301];
    memset(name, 'n', 300);
    name[300] = '\0';
    char text[4000];
    snprintf(text, sizeof text,
             "%s\"blocks\": {\"inner\": {\"layers\": [{\"name\": \"%s\", \"type\": \"relu\"}]},\n"
             "  \"outer\": {\"layers\": [{\"name\": \"%s\", \"type\": \"inner\"}]}},\n"
             "\"layers\": [{\"name\": \"%s\", \"type\": \"outer\"}, %s",
             model_head, name, name, name, model_tail);
    md_model *m = NULL;
    cr_expect_eq(load_text(text, &m), MD_ERR_CONFIG);
    cr_expect(strstr(md_errmsg(), "longer than 500 characters") && strstr(md_errmsg(), "blocks.outer.layers[0]"), "%s",
              md_errmsg());
    md_model_free(m);
}
