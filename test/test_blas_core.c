/* test_blas_core.c - OpenBLAS's kernel set for the CPU: the choice by CPU and
 * OpenBLAS's own pick, the new start with OPENBLAS_CORETYPE set (the run's
 * arguments intact), and a user's OPENBLAS_CORETYPE left alone. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/blas_core.h"
#include "helpers.h"

Test(blas_core, wanted_by_cpu_and_pick)
{
    static const struct {
        const char *core;
        int avx512, avx2, dynamic;
        const char *want;
    } cases[] = {
        {"Prescott", 1, 1, 1, "SkylakeX"},   /* a Xeon newer than OpenBLAS's table */
        {"Haswell", 1, 1, 1, "SkylakeX"},    /* AMD Zen 4 */
        {"Zen", 1, 1, 1, "SkylakeX"},
        {"SkylakeX", 1, 1, 1, NULL},
        {"Cooperlake", 1, 1, 1, NULL},
        {"SAPPHIRERAPIDS", 1, 1, 1, NULL}, /* a build for one target names it in capitals */
        {"Prescott", 0, 1, 1, "Haswell"},
        {"Sandybridge", 0, 1, 1, "Haswell"},
        {"Haswell", 0, 1, 1, NULL},
        {"Zen", 0, 1, 1, NULL},
        {"Prescott", 0, 0, 1, NULL},         /* nothing better to run */
        {"Prescott", 1, 1, 0, NULL},         /* one kernel set built in: the variable does nothing */
        {"neoversen1", 0, 0, 1, NULL},
        {"", 1, 1, 1, NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *got = md_blas_core_wanted(cases[i].core, cases[i].avx512, cases[i].avx2, cases[i].dynamic);
        if (!cases[i].want) cr_expect_null(got, "%s: %s", cases[i].core, got);
        else cr_expect(got && strcmp(got, cases[i].want) == 0, "%s: %s", cases[i].core, got ? got : "NULL");
    }
}

static const char *blas_str(const cJSON *r, const char *key)
{
    const cJSON *v = th_obj(th_obj(r, "system"), "blas");
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(v, key);
    return cJSON_IsString(it) ? it->valuestring : NULL;
}

/* Without OPENBLAS_CORETYPE the run uses the best kernel set this CPU runs,
 * whether OpenBLAS picked it or mpsdiag chose it and started again, and the
 * new start ran the same arguments. */
Test(blas_core, the_run_uses_the_cpus_kernels)
{
#ifndef __linux__
    cr_skip_test("the new start with OPENBLAS_CORETYPE set is Linux-only (it runs /proc/self/exe)");
#endif
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv("MPSDIAG_OPENBLAS_PICKED");
    char *dir = th_tmpdir();
    char *out;
    cJSON *r = th_run_report(dir, "--device cpu --epochs 0 --batch-size 24", 0, &out, NULL);
    const char *core = blas_str(r, "core"), *by = blas_str(r, "core_chosen_by");
    const char *picked = blas_str(r, "core_openblas_picked");
    cr_assert(core && by, "%s", out);
    cr_assert_null(md_blas_core_better(core), "kernel set %s (chosen by %s) on this CPU", core, by);
    cr_assert_null(blas_str(r, "warning"), "%s", blas_str(r, "warning"));
    if (strcmp(by, "mpsdiag") == 0) {
        cr_assert(picked && strcasecmp(picked, core) != 0, "picked %s", picked ? picked : "null");
        cr_assert(md_blas_core_better(picked), "replaced a good pick, %s", picked);
        cr_assert(strstr(out, "chosen by mpsdiag"), "%s", out);
    } else {
        cr_assert_str_eq(by, "OpenBLAS");
        cr_assert_null(picked);
    }
    /* the arguments went through the new start */
    cr_assert_str_eq(cJSON_GetObjectItem(th_setting(r, "batch_size"), "value")->valuestring, "24");
    const cJSON *argv = th_obj(th_obj(r, "run"), "command_line");
    cr_assert_eq(cJSON_GetArraySize(argv), 9); /* mpsdiag, 3 flags and their values, --report FILE */
    cr_assert_str_eq(cJSON_GetArrayItem(argv, 6)->valuestring, "24");
    cJSON_Delete(r);
    free(out);
    th_tmpdir_free(dir);
}

/* A user's OPENBLAS_CORETYPE stays, and the report says where it came from
 * (with the warning where the CPU runs faster ones). */
Test(blas_core, the_users_choice_stays)
{
    setenv("OPENBLAS_CORETYPE", "Prescott", 1);
    unsetenv("MPSDIAG_OPENBLAS_PICKED");
    char *dir = th_tmpdir();
    cJSON *r = th_run_report(dir, "--device cpu --epochs 0", 0, NULL, NULL);
    cr_assert_str_eq(blas_str(r, "core"), "Prescott");
    cr_assert_str_eq(blas_str(r, "core_chosen_by"), "environment");
    cr_assert_null(blas_str(r, "core_openblas_picked"));
    if (md_blas_core_better("Prescott"))
        cr_assert(blas_str(r, "warning") && strstr(blas_str(r, "warning"), "OPENBLAS_CORETYPE=Prescott"));
    else
        cr_assert_null(blas_str(r, "warning"));
    cJSON_Delete(r);
    th_tmpdir_free(dir);
}
