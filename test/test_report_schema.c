/* test_report_schema.c - reports complete enough to reproduce a run: the
 * JSON Schemas in docs/schema (and the checker of json_schema.c, which must
 * be able to fail), reports of several kinds of run validated against them,
 * failure reports that keep what was gathered, every result-changing
 * setting in the text and the JSON, and the --metrics header. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "core/json.h"
#include "helpers.h"
#include "json_schema.h"
#include "test_data_files.h"

#define REPORT_SCHEMA "docs/schema/report.schema.json"
#define METRICS_SCHEMA "docs/schema/metrics.schema.json"

static cJSON *load(const char *path)
{
    cJSON *j = NULL;
    cr_assert_eq(md_json_load_file(path, &j), MD_OK, "%s", md_errmsg());
    return j;
}

static cJSON *parse(const char *text)
{
    cJSON *j = cJSON_Parse(text);
    cr_assert_not_null(j, "not JSON: %s", text);
    return j;
}

/* ---- the checker itself -------------------------------------------------------- */

static const char checker_schema[] =
    "{\"type\": \"object\", \"required\": [\"a\", \"s\"], \"additionalProperties\": false,\n"
    " \"properties\": {\n"
    "  \"a\": {\"type\": \"integer\", \"minimum\": 0, \"maximum\": 10},\n"
    "  \"s\": {\"$ref\": \"#/$defs/status\"},\n"
    "  \"list\": {\"type\": \"array\", \"items\": {\"type\": [\"string\", \"null\"]}},\n"
    "  \"open\": {\"type\": \"object\", \"additionalProperties\": {\"type\": \"number\"}},\n"
    "  \"any\": {\"type\": \"object\"},\n"
    "  \"one\": {\"oneOf\": [{\"type\": \"string\"}, {\"type\": \"integer\"}]},\n"
    "  \"some\": {\"anyOf\": [{\"type\": \"number\"}, {\"type\": \"integer\"}]},\n"
    "  \"c\": {\"const\": 1}},\n"
    " \"$defs\": {\"status\": {\"enum\": [\"ok\", \"failed\"]}}}";

struct checker_case {
    const char *doc;
    int valid;
    const char *needle; /* in the message when invalid */
};

Test(schema, checker_accepts_and_rejects)
{
    cJSON *s = parse(checker_schema);
    static const struct checker_case cases[] = {
        {"{\"a\": 3, \"s\": \"ok\"}", 1, NULL},
        {"{\"a\": 3, \"s\": \"ok\", \"list\": [\"x\", null], \"open\": {\"k\": 1.5}, \"any\": {\"x\": [1]},"
         " \"one\": \"x\", \"some\": 2.5, \"c\": 1}",
         1, NULL},
        {"{\"a\": \"3\", \"s\": \"ok\"}", 0, "$.a: is string, the schema wants integer"},
        {"{\"a\": 3.5, \"s\": \"ok\"}", 0, "$.a: is number"},
        {"{\"s\": \"ok\"}", 0, "lacks the required key 'a'"},
        {"{\"a\": 3, \"s\": \"ok\", \"extra\": 1}", 0, "'extra', which the schema does not allow"},
        {"{\"a\": 11, \"s\": \"ok\"}", 0, "above the maximum"},
        {"{\"a\": -1, \"s\": \"ok\"}", 0, "below the minimum"},
        {"{\"a\": 3, \"s\": \"maybe\"}", 0, "$.s: \"maybe\" is not one of"},
        {"{\"a\": 3, \"s\": \"ok\", \"list\": [\"x\", 2]}", 0, "$.list[1]"},
        {"{\"a\": 3, \"s\": \"ok\", \"open\": {\"k\": \"v\"}}", 0, "$.open.k"},
        {"{\"a\": 3, \"s\": \"ok\", \"one\": true}", 0, "no branch of oneOf"},
        {"{\"a\": 3, \"s\": \"ok\", \"some\": \"x\"}", 0, "no branch of anyOf"},
        {"{\"a\": 3, \"s\": \"ok\", \"c\": 2}", 0, "not the constant 1"},
        {"[1]", 0, "is array, the schema wants object"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cJSON *d = parse(cases[i].doc);
        char err[600];
        int ok = th_schema_validate(s, d, err, sizeof err);
        cr_assert_eq(ok, cases[i].valid, "%s: %s", cases[i].doc, err);
        if (!ok)
            cr_assert(strstr(err, cases[i].needle), "%s: message '%s' lacks '%s'", cases[i].doc, err,
                      cases[i].needle);
        cJSON_Delete(d);
    }
    /* a 1 is an integer and also a number: exactly one of oneOf's branches must match */
    cJSON *both = parse("{\"oneOf\": [{\"type\": \"number\"}, {\"type\": \"integer\"}]}");
    cJSON *one = parse("1");
    char err[600];
    cr_assert_not(th_schema_validate(both, one, err, sizeof err));
    cr_assert(strstr(err, "several"), "%s", err);
    cJSON_Delete(both);
    cJSON_Delete(one);
    /* a keyword the checker does not implement is an error, never ignored */
    cJSON *pat = parse("{\"type\": \"string\", \"pattern\": \"^x\"}");
    cJSON *str = parse("\"y\"");
    cr_assert_not(th_schema_validate(pat, str, err, sizeof err));
    cr_assert(strstr(err, "'pattern' is not supported"), "%s", err);
    cJSON_Delete(pat);
    cJSON_Delete(str);
    cJSON *ref = parse("{\"$ref\": \"#/$defs/missing\"}");
    cr_assert_not(th_schema_validate(ref, s, err, sizeof err));
    cr_assert(strstr(err, "unresolved $ref"), "%s", err);
    cJSON_Delete(ref);
    cJSON_Delete(s);
}

Test(schema, property_lookup_follows_refs_and_items)
{
    cJSON *s = load(REPORT_SCHEMA);
    cr_assert_not_null(th_schema_property(s, "status.exit_code"));
    cr_assert_not_null(th_schema_property(s, "benchmark.warmup"));
    cr_assert_not_null(th_schema_property(s, "benchmark.sweep"));
    cr_assert_not_null(th_schema_property(s, "training.curves"));
    cr_assert_not_null(th_schema_property(s, "run.config_digest"));
    cr_assert_null(th_schema_property(s, "benchmark.no_such_key"));
    cr_assert_null(th_schema_property(s, "no_such_section"));
    cJSON_Delete(s);
}

/* The strict parts of the real schema reject what they should. */
Test(schema, report_schema_rejects_broken_reports)
{
    cJSON *s = load(REPORT_SCHEMA);
    cJSON *ok = load("test/data/report_schema_minimal.json");
    char err[600];
    cr_assert(th_schema_validate(s, ok, err, sizeof err), "the minimal report: %s", err);
    struct {
        const char *path, *key, *value, *needle;
    } cases[] = {
        {NULL, "surprise", "1", "'surprise', which the schema does not allow"},
        {"status", "exit_code", "\"0\"", "$.status.exit_code"},
        {"status", "result", "\"fine\"", "$.status.result"},
        {"status", "detail", "null", "'detail', which the schema does not allow"},
        {"memory", "device_peak_bytes", "-1", "below the minimum"},
        {"run", "config_digest", "7", "$.run.config_digest: is number"},
        {NULL, "schema_version", "2", "not the constant 1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        cJSON *d = cJSON_Duplicate(ok, 1);
        cJSON *obj = cases[i].path ? cJSON_GetObjectItem(d, cases[i].path) : d;
        cJSON_DeleteItemFromObject(obj, cases[i].key);
        cJSON_AddItemToObject(obj, cases[i].key, parse(cases[i].value));
        cr_assert_not(th_schema_validate(s, d, err, sizeof err), "%s.%s = %s accepted",
                      cases[i].path ? cases[i].path : "", cases[i].key, cases[i].value);
        cr_assert(strstr(err, cases[i].needle), "'%s' lacks '%s'", err, cases[i].needle);
        cJSON_Delete(d);
    }
    static const char *const required[] = {"status", "run", "tool", "duration_s"};
    for (size_t i = 0; i < sizeof required / sizeof required[0]; i++) {
        cJSON *d = cJSON_Duplicate(ok, 1);
        cJSON_DeleteItemFromObject(d, required[i]);
        cr_assert_not(th_schema_validate(s, d, err, sizeof err), "without %s", required[i]);
        cr_assert(strstr(err, "lacks the required key"), "%s", err);
        cJSON_Delete(d);
    }
    /* open-ended sections take new keys */
    cJSON *d = cJSON_Duplicate(ok, 1);
    cJSON_AddNumberToObject(cJSON_GetObjectItem(d, "memory"), "some_new_counter", 3);
    cJSON_AddStringToObject(cJSON_GetObjectItem(d, "system"), "some_new_fact", "x");
    cr_assert(th_schema_validate(s, d, err, sizeof err), "%s", err);
    cJSON_Delete(d);
    cJSON_Delete(ok);
    cJSON_Delete(s);
}

/* ---- the tables of docs/report-schema.md ------------------------------------ */

/* The first `key` of each row of the table under the heading that starts
 * with `heading` in `path`. */
static int table_keys(const char *path, const char *heading, char keys[][128], int max)
{
    FILE *f = fopen(path, "r");
    cr_assert_not_null(f, "%s (tests run in the repository root)", path);
    char line[8192];
    int in = 0, n = 0;
    size_t hl = strlen(heading);
    while (fgets(line, sizeof line, f)) {
        if (strncmp(line, heading, hl) == 0)
            in = 1;
        else if (in && line[0] == '#')
            break;
        if (!in || strncmp(line, "| `", 3) != 0) continue;
        char *end = strchr(line + 3, '`');
        cr_assert_not_null(end);
        cr_assert_lt(n, max);
        snprintf(keys[n++], 128, "%.*s", (int)(end - line - 3), line + 3);
    }
    fclose(f);
    return n;
}

/* Every row of the table names a key of the schema, and every top-level key
 * of the schema has a row. */
static void check_table(const cJSON *s, const char *path, const char *heading, int min_rows)
{
    static char keys[200][128];
    int n = table_keys(path, heading, keys, 200);
    cr_assert_geq(n, min_rows, "%s: the table under '%s' was not found", path, heading);
    for (int i = 0; i < n; i++)
        cr_assert_not_null(th_schema_property(s, keys[i]), "%s: row `%s` is not in %s", path, keys[i],
                           REPORT_SCHEMA);
    const cJSON *p;
    cJSON_ArrayForEach(p, cJSON_GetObjectItem(s, "properties"))
    {
        int found = 0;
        for (int i = 0; i < n && !found; i++)
            found = strcmp(keys[i], p->string) == 0;
        cr_assert(found, "top-level key `%s` of %s has no row in %s's table", p->string, REPORT_SCHEMA, path);
    }
}

Test(schema, doc_tables_match_the_schema)
{
    cJSON *s = load(REPORT_SCHEMA);
    check_table(s, "docs/report-schema.md", "## Top-level keys", 20); /* one line per top-level key */
    check_table(s, "docs/report-schema.md", "## Key reference", 30);  /* every key */
    cJSON_Delete(s);
}

/* ---- reports of real runs ------------------------------------------------------ */

static void assert_valid(const char *schema_path, const cJSON *doc, const char *what)
{
    cJSON *s = load(schema_path);
    char err[600];
    int ok = th_schema_validate(s, doc, err, sizeof err);
    cJSON_Delete(s);
    cr_assert(ok, "%s does not validate against %s: %s", what, schema_path, err);
}

/* A tiny model with a dropout layer, for 28x28 grey inputs. */
static const char tiny_model[] =
    "{\"name\": \"tiny\", \"num_classes\": 10, \"inputs\": [{\"name\": \"image\", \"shape\": [1, 28, 28]}],\n"
    " \"layers\": [\n"
    "  {\"name\": \"conv1\", \"type\": \"conv2d\", \"out\": 8, \"kernel\": 3, \"padding\": 1, \"bias\": "
    "false},\n"
    "  {\"name\": \"bn1\", \"type\": \"batchnorm\"}, {\"name\": \"relu1\", \"type\": \"relu\"},\n"
    "  {\"name\": \"pool1\", \"type\": \"maxpool\", \"kernel\": 4},\n"
    "  {\"name\": \"flatten\", \"type\": \"flatten\"},\n"
    "  {\"name\": \"dropout\", \"type\": \"dropout\", \"p\": 0.25},\n"
    "  {\"name\": \"fc\", \"type\": \"linear\", \"out\": \"$num_classes\"}]}\n";

/* Colour images of 64 x 64 (full-size decode, so a cut file reaches the decoder). */
static const char rgb_model[] =
    "{\"name\": \"rgb\", \"num_classes\": 2, \"inputs\": [{\"name\": \"image\", \"shape\": [3, 64, 64]}],\n"
    " \"layers\": [\n"
    "  {\"name\": \"conv1\", \"type\": \"conv2d\", \"out\": 4, \"kernel\": 3, \"padding\": 1},\n"
    "  {\"name\": \"relu1\", \"type\": \"relu\"},\n"
    "  {\"name\": \"pool\", \"type\": \"maxpool\", \"kernel\": 8},\n"
    "  {\"name\": \"flatten\", \"type\": \"flatten\"},\n"
    "  {\"name\": \"fc\", \"type\": \"linear\", \"out\": \"$num_classes\"}]}\n";

struct run {
    char *dir;
    int rc;
    char *out, *err;
    cJSON *report;
};

/* Runs the binary with `args` (where each %s is the run's temporary folder)
 * and --report DIR/r.json; loads the report (it must be written). */
static struct run run_bin(const char *args_fmt)
{
    struct run r = {0};
    r.dir = th_tmpdir();
    char *m = th_write(r.dir, "tiny.json", tiny_model);
    free(m);
    m = th_write(r.dir, "unstable.json", th_unstable_model);
    free(m);
    m = th_write(r.dir, "rgb.json", rgb_model);
    free(m);
    char args[8192], full[8600];
    snprintf(args, sizeof args, args_fmt, r.dir, r.dir, r.dir, r.dir);
    snprintf(full, sizeof full, "%s --report %s/r.json", args, r.dir);
    r.rc = th_run(full, &r.out, &r.err);
    char p[4200];
    snprintf(p, sizeof p, "%s/r.json", r.dir);
    cr_assert_eq(md_json_load_file(p, &r.report), MD_OK, "no report (exit %d, %s): %s", r.rc, r.err,
                 md_errmsg());
    return r;
}

static void run_free(struct run *r)
{
    cJSON_Delete(r->report);
    free(r->out);
    free(r->err);
    th_rmtree(r->dir);
    free(r->dir);
}

#define TINY                                                                                                 \
    "--device cpu --threads 1 --dataset synthetic --model %s/tiny.json --max-samples 256 --batch-size 32 "

/* Every setting that changes the result, in the JSON settings and in the
 * text Settings section. */
static const char *const result_settings[] = {"seed",
                                              "optimizer",
                                              "lr",
                                              "lr_schedule",
                                              "warmup_epochs",
                                              "momentum",
                                              "nesterov",
                                              "weight_decay",
                                              "grad_clip",
                                              "label_smoothing",
                                              "dropout",
                                              "augmentation",
                                              "precision",
                                              "compile",
                                              "compile_mode",
                                              "threads",
                                              "num_workers",
                                              "batch_size",
                                              "epochs",
                                              "steps",
                                              "max_samples",
                                              "val_split",
                                              NULL};

static void assert_failure_report(const struct run *r, int code, const char *result)
{
    cr_assert_eq(r->rc, code, "exit %d, stderr %s", r->rc, r->err);
    assert_valid(REPORT_SCHEMA, r->report, "the failure report");
    const cJSON *st = cJSON_GetObjectItem(r->report, "status");
    cr_assert_eq(cJSON_GetObjectItem(st, "exit_code")->valueint, code);
    cr_assert_str_eq(cJSON_GetObjectItem(st, "result")->valuestring, result);
    cr_assert(cJSON_IsString(cJSON_GetObjectItem(st, "error")));
    const cJSON *mem = cJSON_GetObjectItem(r->report, "memory");
    cr_assert(cJSON_IsObject(mem), "a failure report keeps the memory section (%s)", result);
    cr_assert_gt(cJSON_GetObjectItem(mem, "host_peak_rss_bytes")->valuedouble, 0);
    cr_assert(cJSON_IsObject(cJSON_GetObjectItem(r->report, "selected_device")));
    cr_assert(cJSON_IsObject(cJSON_GetObjectItem(r->report, "run")));
    for (const char *const *k = result_settings; *k; k++)
        cr_assert_not_null(th_setting(r->report, *k), "the failure report (%s) lacks the setting %s", result,
                           *k);
}

Test(report, train_report_validates_and_holds_every_setting, .timeout = 120)
{
    struct run r =
        run_bin(TINY "--epochs 2 --steps 2 --checkpoint-dir %s/ck --metrics %s/m.jsonl --momentum 0.8 "
                     "--nesterov --grad-clip 2 --label-smoothing 0.1 --warmup-epochs 1");
    cr_assert_eq(r.rc, 0, "%s", r.err);
    assert_valid(REPORT_SCHEMA, r.report, "the training report");
    for (const char *const *k = result_settings; *k; k++) {
        const cJSON *s = th_setting(r.report, *k);
        cr_assert_not_null(s, "report.settings lacks %s", *k);
        char text[256];
        snprintf(text, sizeof text, "\n  %-18s %s", *k, cJSON_GetObjectItem(s, "value")->valuestring);
        cr_assert(strstr(r.out, text), "the text Settings lack '%s'", text + 1);
    }
    cr_assert_str_eq(cJSON_GetObjectItem(th_setting(r.report, "momentum"), "value")->valuestring, "0.8");
    cr_assert_str_eq(cJSON_GetObjectItem(th_setting(r.report, "nesterov"), "value")->valuestring, "on");
    cr_assert_str_eq(cJSON_GetObjectItem(th_setting(r.report, "grad_clip"), "value")->valuestring, "2");
    cr_assert_str_eq(cJSON_GetObjectItem(th_setting(r.report, "label_smoothing"), "value")->valuestring, "0.1");
    cr_assert_str_eq(cJSON_GetObjectItem(th_setting(r.report, "dropout"), "value")->valuestring, "0.25");
    cr_assert_str_eq(cJSON_GetObjectItem(th_setting(r.report, "seed"), "value")->valuestring, "42");
    /* weight decay says what it applies to */
    const char *wd = cJSON_GetObjectItem(th_setting(r.report, "weight_decay"), "why")->valuestring;
    cr_assert(strstr(wd, " of ") && strstr(wd, "parameters") && strstr(wd, "BatchNorm"), "%s", wd);
    /* the resolved config, a run config of its own */
    const cJSON *run = cJSON_GetObjectItem(r.report, "run");
    const cJSON *cfg = cJSON_GetObjectItem(run, "config");
    cr_assert_eq(cJSON_GetObjectItem(cfg, "momentum")->valuedouble, 0.8);
    cr_assert(cJSON_IsTrue(cJSON_GetObjectItem(cfg, "nesterov")));
    cr_assert_eq(cJSON_GetObjectItem(cfg, "lr")->valuedouble, 0.1, "the optimizer's default, resolved");
    cr_assert_eq(cJSON_GetObjectItem(cfg, "batch_size")->valueint, 32);
    cr_assert_null(cJSON_GetObjectItem(cfg, "report"), "output paths are not part of the config");
    const char *digest = cJSON_GetObjectItem(run, "config_digest")->valuestring;
    cr_assert(strncmp(digest, "fnv1a64:", 8) == 0 && strlen(digest) == 24, "%s", digest);
    const cJSON *argv0 = cJSON_GetArrayItem(cJSON_GetObjectItem(run, "command_line"), 0);
    cr_assert(cJSON_IsString(argv0) && strstr(argv0->valuestring, "mpsdiag"));
    run_free(&r);
}

Test(report, settings_text_fits_in_100_columns, .timeout = 60)
{
    struct run r = run_bin(TINY "--epochs 1 --steps 1 --checkpoint-dir %s/ck");
    cr_assert_eq(r.rc, 0, "%s", r.err);
    const char *s = strstr(r.out, "== Settings");
    cr_assert_not_null(s, "%s", r.out);
    const char *end = strstr(s + 1, "\n== ");
    int lines = 0;
    for (const char *p = s; p && (!end || p < end);) {
        const char *nl = strchr(p, '\n');
        size_t cols = 0;
        for (const char *c = p; c < (nl ? nl : p + strlen(p)); c++)
            cols += ((unsigned char)*c & 0xC0) != 0x80;
        cr_assert_leq(cols, 100, "Settings line of %zu columns: %.*s", cols, (int)(nl ? nl - p : 200), p);
        lines++;
        p = nl ? nl + 1 : NULL;
    }
    cr_assert_gt(lines, 20);
    run_free(&r);
}

/* The resolved config of one run, given to --config, is the same run. */
Test(report, run_config_reproduces_the_run, .timeout = 120)
{
    struct run a = run_bin(TINY "--epochs 1 --steps 2 --checkpoint-dir %s/ck --optimizer adamw --no-augment "
                                "--label-smoothing 0.05 --dropout 0.3 --seed 9");
    cr_assert_eq(a.rc, 0, "%s", a.err);
    const cJSON *run = cJSON_GetObjectItem(a.report, "run");
    char *cfg = cJSON_Print(cJSON_GetObjectItem(run, "config"));
    char *path = th_write(a.dir, "again.json", cfg);
    char args[4400];
    snprintf(args, sizeof args, "--config %s --checkpoint-dir %%s/ck2", path);
    struct run b = run_bin(args);
    cr_assert_eq(b.rc, 0, "%s", b.err);
    const cJSON *brun = cJSON_GetObjectItem(b.report, "run");
    cr_assert_str_eq(cJSON_GetObjectItem(brun, "config_digest")->valuestring,
                     cJSON_GetObjectItem(run, "config_digest")->valuestring, "config %s", cfg);
    cr_assert_str_neq(cJSON_GetObjectItem(brun, "id")->valuestring,
                      cJSON_GetObjectItem(run, "id")->valuestring);
    double la =
        cJSON_GetArrayItem(
            cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(a.report, "training"), "curves"),
                                "train_loss"),
            0)
            ->valuedouble;
    double lb =
        cJSON_GetArrayItem(
            cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(b.report, "training"), "curves"),
                                "train_loss"),
            0)
            ->valuedouble;
    cr_assert_eq(la, lb, "same settings, same loss: %.9g vs %.9g", la, lb);
    free(cfg);
    free(path);
    run_free(&a);
    run_free(&b);
}

Test(report, metrics_lines_start_with_a_header_per_run, .timeout = 120)
{
    char *dir = th_tmpdir();
    char fmt[4400];
    /* two runs append to one file */
    snprintf(fmt, sizeof fmt, TINY "--epochs 2 --steps 2 --checkpoint-dir %%s/ck --metrics %s/m.jsonl", "%s",
             dir);
    struct run a = run_bin(fmt);
    struct run b = run_bin(fmt);
    cr_assert_eq(a.rc, 0, "%s", a.err);
    cr_assert_eq(b.rc, 0, "%s", b.err);
    char p[4300];
    snprintf(p, sizeof p, "%s/m.jsonl", dir);
    FILE *f = fopen(p, "r");
    cr_assert_not_null(f);
    char line[1 << 16];
    int headers = 0, lines = 0;
    char run_id[2][128] = {"", ""};
    while (fgets(line, sizeof line, f)) {
        cJSON *o = parse(line);
        char what[64];
        snprintf(what, sizeof what, "metrics line %d", lines + 1);
        assert_valid(METRICS_SCHEMA, o, what);
        const char *kind = cJSON_GetObjectItem(o, "kind")->valuestring;
        const char *id = cJSON_GetObjectItem(o, "run_id")->valuestring;
        if (lines == 0) cr_assert_str_eq(kind, "header", "the file starts with a header");
        if (strcmp(kind, "header") == 0) {
            cr_assert_lt(headers, 2);
            snprintf(run_id[headers++], sizeof run_id[0], "%s", id);
            const struct run *r = headers == 1 ? &a : &b;
            const cJSON *run = cJSON_GetObjectItem(r->report, "run");
            cr_assert_str_eq(id, cJSON_GetObjectItem(run, "id")->valuestring, "the report's run id");
            cr_assert_str_eq(cJSON_GetObjectItem(o, "config_digest")->valuestring,
                             cJSON_GetObjectItem(run, "config_digest")->valuestring);
            cr_assert(cJSON_GetArraySize(cJSON_GetObjectItem(o, "command_line")) > 3);
        } else {
            cr_assert_str_eq(id, run_id[headers - 1], "each line carries its run's id");
        }
        cJSON_Delete(o);
        lines++;
    }
    fclose(f);
    cr_assert_eq(headers, 2, "one header per run");
    cr_assert_str_neq(run_id[0], run_id[1]);
    cr_assert_eq(lines, 2 + 2 * 2, "two headers and two epoch lines per run");
    run_free(&a);
    run_free(&b);
    th_tmpdir_free(dir);
}

/* Every profiled kind is a layer type of the model, with at most as many
 * layers as the model has of it (fused layers run inside another). */
static void assert_kinds_match_layers(const cJSON *report)
{
    const cJSON *layers = cJSON_GetObjectItem(cJSON_GetObjectItem(report, "model"), "layers");
    const cJSON *lk = cJSON_GetObjectItem(
        cJSON_GetObjectItem(cJSON_GetObjectItem(report, "benchmark"), "training"), "layer_kinds");
    const cJSON *k, *l;
    int total = 0;
    cJSON_ArrayForEach(k, cJSON_GetObjectItem(lk, "kinds")) {
        const char *kind = cJSON_GetObjectItem(k, "kind")->valuestring;
        int have = 0, n = cJSON_GetObjectItem(k, "layers")->valueint;
        cJSON_ArrayForEach(l, layers) have += !strcmp(cJSON_GetObjectItem(l, "type")->valuestring, kind);
        cr_assert(n >= 1 && n <= have, "kind %s: %d layers profiled, the model has %d", kind, n, have);
        total += n;
    }
    cr_assert(total >= 1 && total <= cJSON_GetArraySize(layers), "%d layers profiled of %d", total,
              cJSON_GetArraySize(layers));
}

Test(report, benchmark_only_and_ci_reports_validate, .timeout = 120)
{
    struct run r =
        run_bin(TINY "--benchmark-only --bench-iters 2 --warmup-iters 1 --batch-sweep 8,16 --ablate compile");
    cr_assert_eq(r.rc, 0, "%s", r.err);
    assert_valid(REPORT_SCHEMA, r.report, "the --benchmark-only report");
    cr_assert(cJSON_IsObject(cJSON_GetObjectItem(r.report, "benchmark")));
    /* where the step's time goes: every kind timed, the kinds within the step */
    const cJSON *lk = cJSON_GetObjectItem(cJSON_GetObjectItem(cJSON_GetObjectItem(r.report, "benchmark"), "training"),
                                          "layer_kinds");
    cr_assert(cJSON_IsObject(lk), "benchmark.training.layer_kinds");
    const cJSON *kinds = cJSON_GetObjectItem(lk, "kinds");
    cr_assert_gt(cJSON_GetArraySize(kinds), 1);
    double share = 0, prev = 1e300;
    const cJSON *k;
    cJSON_ArrayForEach(k, kinds) {
        double t = cJSON_GetObjectItem(k, "forward_ms")->valuedouble + cJSON_GetObjectItem(k, "backward_ms")->valuedouble;
        cr_assert_leq(t, prev, "kinds sorted by time, largest first");
        prev = t;
        share += cJSON_GetObjectItem(k, "share")->valuedouble;
    }
    cr_assert(share > 0.2 && share <= 1.0 + 1e-6, "the kinds' shares of the step sum to %g", share);
    cr_assert_leq(cJSON_GetObjectItem(lk, "layers_ms")->valuedouble, cJSON_GetObjectItem(lk, "step_ms")->valuedouble);
    assert_kinds_match_layers(r.report);
    run_free(&r);
    /* a model of two inputs: layer i of the profile is layer i of the model
     * (the inputs not counted), so each kind's count matches the config's */
    r = run_bin("--device cpu --threads 1 --dataset synthetic --model base_multi_channel --reduce-architecture "
                "--benchmark-only --batch-size 2 --bench-iters 2 --warmup-iters 1 --max-samples 16");
    cr_assert_eq(r.rc, 0, "%s", r.err);
    assert_valid(REPORT_SCHEMA, r.report, "the two-input --benchmark-only report");
    assert_kinds_match_layers(r.report);
    run_free(&r);
    r = run_bin(
        "--device cpu --threads 1 --ci --steps 3 --bench-iters 2 --warmup-iters 1 --checkpoint-dir %s/ck");
    cr_assert_eq(r.rc, 0, "%s", r.err);
    assert_valid(REPORT_SCHEMA, r.report, "the --ci report");
    cr_assert(cJSON_IsObject(cJSON_GetObjectItem(r.report, "ci")));
    run_free(&r);
    r = run_bin("--list-devices");
    cr_assert_eq(r.rc, 0, "%s", r.err);
    assert_valid(REPORT_SCHEMA, r.report, "the --list-devices report");
    run_free(&r);
}

Test(report, diagnostics_report_validates, .timeout = 120)
{
    /* two models, the second one missing: a comparison with a failed row */
    struct run r =
        run_bin("--device cpu --threads 1 --dataset synthetic --models %s/tiny.json,%s/missing.json "
                "--epochs 1 --steps 2 --max-samples 128 --batch-size 32 --bench-iters 2 --warmup-iters 1 "
                "--checkpoint-dir %s/ck");
    cr_assert_eq(r.rc, 3, "%s", r.err);
    assert_valid(REPORT_SCHEMA, r.report, "the diagnostics report");
    const cJSON *models = cJSON_GetObjectItem(r.report, "models");
    cr_assert_eq(cJSON_GetArraySize(models), 2);
    cr_assert_not_null(th_setting(cJSON_GetArrayItem(models, 0), "label_smoothing"), "each model's settings");
    cr_assert(cJSON_IsObject(cJSON_GetObjectItem(r.report, "memory")));
    run_free(&r);
    /* --ci with a threshold the model misses: per-model recommendations and checks */
    r = run_bin("--device cpu --threads 1 --ci --models %s/tiny.json --steps 2 --max-samples 64 --batch-size 16 "
                "--bench-iters 2 --warmup-iters 1 --expect-min-throughput 1e12 --checkpoint-dir %s/ck");
    cr_assert_eq(r.rc, 7, "%s", r.err);
    assert_valid(REPORT_SCHEMA, r.report, "the diagnostics --ci report");
    const cJSON *m = cJSON_GetArrayItem(cJSON_GetObjectItem(r.report, "models"), 0);
    cr_assert(cJSON_IsArray(cJSON_GetObjectItem(m, "recommendations")));
    cr_assert(cJSON_IsObject(cJSON_GetObjectItem(m, "ci")));
    run_free(&r);
}

/* ---- failure reports --------------------------------------------------------------- */

Test(report, numeric_failure_report_is_complete, .timeout = 120)
{
    struct run r = run_bin(
        "--device cpu --threads 1 --dataset synthetic --model %s/unstable.json --max-samples 384 "
        "--batch-size 32 --num-workers 0 --epochs 3 --lr 100 --lradj constant --checkpoint-dir %s/ck");
    assert_failure_report(&r, 6, "numeric");
    cr_assert(cJSON_IsObject(cJSON_GetObjectItem(r.report, "training")), "what training gathered");
    run_free(&r);
}

Test(report, out_of_memory_failure_report_is_complete, .timeout = 60)
{
    struct run r = run_bin(TINY "--memory-fraction 0.00001 --epochs 1 --steps 1 --checkpoint-dir %s/ck");
    assert_failure_report(&r, 5, "out-of-memory");
    cr_assert(cJSON_IsObject(cJSON_GetObjectItem(r.report, "model")));
    run_free(&r);
}

Test(report, interrupted_report_is_complete, .timeout = 60)
{
    /* far more epochs than 2 s allow: the SIGINT lands mid-run */
    const char *bin = getenv("MPSDIAG_BIN");
    if (!bin) bin = "build/mpsdiag";
    char *dir = th_tmpdir();
    char *m = th_write(dir, "tiny.json", tiny_model);
    char cmd[8192];
    snprintf(cmd, sizeof cmd,
             "timeout --foreground --preserve-status -s INT 2 %s --device cpu --threads 1 --dataset synthetic --model %s "
             "--max-samples 256 --batch-size 32 --epochs 100000 --steps 2 --checkpoint-dir %s/ck --report "
             "%s/r.json "
             ">%s/out 2>%s/err </dev/null",
             bin, m, dir, dir, dir, dir);
    int rc = system(cmd);
    struct run r = {
        .dir = dir, .rc = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1, .out = strdup(""), .err = strdup("")};
    char p[4300];
    snprintf(p, sizeof p, "%s/r.json", dir);
    cr_assert_eq(md_json_load_file(p, &r.report), MD_OK, "%s", md_errmsg());
    assert_failure_report(&r, 130, "interrupted");
    cr_assert(cJSON_IsString(
        cJSON_GetObjectItem(cJSON_GetObjectItem(r.report, "training"), "interrupted_checkpoint")));
    free(m);
    run_free(&r);
}

/* A JPEG whose header is fine and whose body is cut: it fails when decoded. */
static void cut_jpeg(const char *path)
{
    enum { W = 64, H = 64 };
    static uint8_t rgb[W * H * 3];
    for (int i = 0; i < W * H * 3; i++)
        rgb[i] = (uint8_t)((i * 2654435761u) >> 24);
    tjhandle tj = tjInitCompress();
    unsigned char *jpg = NULL;
    unsigned long len = 0;
    tjCompress2(tj, rgb, W, 0, H, TJPF_RGB, &jpg, &len, TJSAMP_444, 95, 0);
    tf_put(path, jpg, len * 2 / 3, 0);
    tjFree(jpg);
    tjDestroy(tj);
}

/* The cut file is in the validation split, which the loader probe does not
 * read: the run fails in validation after the first epoch's steps (were it
 * caught when the data opens, the report must be as complete). */
Test(report, bad_sample_failure_report_is_complete, .timeout = 60)
{
    char *data = th_tmpdir();
    tf_write_jpeg_tree(data, 2, 6, 2, 64, 64);
    char p[1200];
    snprintf(p, sizeof p, "%s/val/classb/img001.jpg", data);
    cut_jpeg(p);
    char fmt[2400];
    snprintf(fmt, sizeof fmt,
             "--device cpu --threads 1 --dataset jpeg --data-dir %s --model %%s/rgb.json --batch-size 4 "
             "--epochs 1 --checkpoint-dir %%s/ck",
             data);
    struct run r = run_bin(fmt);
    assert_failure_report(&r, 3, "data");
    const char *err = cJSON_GetObjectItem(cJSON_GetObjectItem(r.report, "status"), "error")->valuestring;
    cr_assert(strstr(err, "img001.jpg"), "%s", err);
    run_free(&r);
    th_tmpdir_free(data);
}
