/* test_cli.c - the built binary: exit codes, messages, report JSON. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

Test(cli, help_is_grouped_with_defaults)
{
    char *out, *err;
    cr_assert_eq(th_run("--help", &out, &err), 0);
    cr_assert(strstr(out, "Device:") && strstr(out, "Training:") && strstr(out, "--batch-size"), "%s", out);
    cr_assert(strstr(out, "[default: auto]"));
    cr_assert(strstr(out, "Exit codes"));
    free(out);
    free(err);
}

Test(cli, version)
{
    char *out;
    cr_assert_eq(th_run("--version", &out, NULL), 0);
    cr_assert(strncmp(out, "mpsdiag ", 8) == 0, "%s", out);
    free(out);
}

struct exit_case { const char *args; int code; const char *needle; };

/* Criterion runs tests in separate processes where pointers inside
 * parameter arrays are not valid, so each table is walked in one test. */
Test(cli, exit_codes)
{
    static struct exit_case cases[] = {
        {"--bogus", 2, "mpsdiag: unknown flag '--bogus'"},
        {"--batch-size 0", 2, "mpsdiag: --batch-size: 0 is out of range"},
        {"--config /nonexistent.json", 3, "mpsdiag: /nonexistent.json: cannot open"},
#if defined(__APPLE__)
        {"--device cuda --quiet", 4, "mpsdiag: device 'cuda' is not available"},
#else
        {"--device mps --quiet", 4, "mpsdiag: device 'mps' is not available"},
#endif
        {"--device cpu:3 --quiet", 4, "mpsdiag: device 'cpu:3' is not available"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct exit_case *c = &cases[i];
        char *out, *err;
        int rc = th_run(c->args, &out, &err);
        cr_assert_eq(rc, c->code, "%s: exit %d, stderr: %s", c->args, rc, err);
        cr_assert(strstr(err, c->needle), "%s: stderr '%s' lacks '%s'", c->args, err, c->needle);
        cr_assert_eq(th_count_messages(err), 1, "one message: '%s'", err);
        free(out);
        free(err);
    }
}

Test(cli, list_devices_table)
{
    char *out;
    cr_assert_eq(th_run("--list-devices", &out, NULL), 0);
    cr_assert(strstr(out, "DEVICE") && strstr(out, "cpu:0") && strstr(out, "available"), "%s", out);
    cr_assert(strstr(out, "metal:0") && strstr(out, "cuda:0"), "%s", out);
    free(out);
}

Test(cli, quiet_prints_only_the_summary)
{
    char *out, *err;
    cr_assert_eq(th_run("--device cpu --quiet --epochs 0", &out, &err), 0, "%s", err);
    cr_assert_eq(th_count_lines(out), 1, "%s", out);
    cr_assert(strncmp(out, "Done in ", 8) == 0, "%s", out);
    cr_assert_str_empty(err);
    free(out);
    free(err);
}

Test(cli, no_colour_or_progress_when_not_a_terminal)
{
    char *out;
    cr_assert_eq(th_run("--device cpu --epochs 0", &out, NULL), 0);
    cr_assert_null(strchr(out, '\033'), "escape codes in piped output");
    cr_assert_null(strchr(out, '\r'));
    free(out);
}

Test(cli, report_json_has_documented_keys)
{
    char *dir = th_tmpdir();
    cJSON *r = th_run_report(dir, "--device cpu --quiet --epochs 0", 0, NULL, NULL);
    static const char *const keys[] = {"schema_version", "tool", "started_at", "system", "devices",
                                       "selected_device", "settings", "memory", "status", "duration_s"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
        cr_assert(cJSON_GetObjectItem(r, keys[i]), "missing key %s", keys[i]);
    cr_assert_eq(cJSON_GetObjectItem(r, "schema_version")->valueint, 1);
    cJSON *sys = cJSON_GetObjectItem(r, "system");
    static const char *const skeys[] = {"os", "kernel", "cpu_model", "physical_cores", "logical_cores", "simd",
                                        "ram_total_bytes", "blas", "cpu_convolution", "libraries", "compiler"};
    for (size_t i = 0; i < sizeof skeys / sizeof skeys[0]; i++)
        cr_assert(cJSON_GetObjectItem(sys, skeys[i]), "missing system.%s", skeys[i]);
    cr_assert_str_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "selected_device"), "backend")->valuestring, "cpu");
    cr_assert_eq(cJSON_GetObjectItem(cJSON_GetObjectItem(r, "status"), "exit_code")->valueint, 0);
    cJSON_Delete(r);
    th_tmpdir_free(dir);
}

Test(cli, report_records_failure)
{
    char *dir = th_tmpdir();
    cJSON *r = th_run_report(dir, "--device cpu:5 --quiet", 4, NULL, NULL); /* written on failure too */
    cJSON *st = cJSON_GetObjectItem(r, "status");
    cr_assert_eq(cJSON_GetObjectItem(st, "exit_code")->valueint, 4);
    cr_assert(strstr(cJSON_GetObjectItem(st, "error")->valuestring, "cpu:5"));
    cJSON_Delete(r);
    th_tmpdir_free(dir);
}

Test(cli, unwritable_report_is_an_io_error)
{
    char *err;
    int rc = th_run("--device cpu --quiet --epochs 0 --report /nonexistent-dir/r.json", NULL, &err);
    cr_assert_eq(rc, 3, "%s", err);
    cr_assert(strstr(err, "/nonexistent-dir/r.json"), "%s", err);
    free(err);
}
