/* test_peak.c - "achieved" against a peak that bounds it: the ratio logic
 * with synthetic numbers (a GEMM on generic kernels far below what the
 * convolutions reach, a GPU without an FMA figure, a rate above every
 * figure), and a benchmark on OpenBLAS's slow SSE3 (Prescott) kernels, where
 * the report said 200-300% of the GEMM "peak". */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "diag/bench.h"
#include "helpers.h"

/* Every "N%" in s is at most 100. */
static void no_percent_above_100(const char *s)
{
    for (const char *p = strchr(s, '%'); p; p = strchr(p + 1, '%')) {
        const char *b = p;
        while (b > s && (b[-1] == '.' || (b[-1] >= '0' && b[-1] <= '9'))) b--;
        if (b < p) cr_assert_leq(atof(b), 100.0, "impossible ratio in: %s", s);
    }
}

Test(peak, generic_gemm_is_no_bound_the_fma_rate_is)
{
    struct md_peak_ref r;
    /* 16 cores, OpenBLAS generic kernels at 10 GFLOP/s, convolutions at 38.8 */
    md_bench_peak_ref(38.8, 10.0, 2000.0, &r);
    cr_assert_str_eq(r.basis, "fma");
    cr_assert_float_eq(r.gflops, 2000.0, 1e-9);
    cr_assert_float_eq(r.fraction, 38.8 / 2000.0, 1e-12);
    cr_assert(strstr(r.text, "FMA") && strstr(r.text, "GEMM"), "%s", r.text);
    no_percent_above_100(r.text);
}

Test(peak, gemm_above_a_low_fma_figure_is_the_reference)
{
    struct md_peak_ref r;
    md_bench_peak_ref(350.0, 400.0, 300.0, &r);
    cr_assert_str_eq(r.basis, "gemm");
    cr_assert_float_eq(r.fraction, 350.0 / 400.0, 1e-12);
    no_percent_above_100(r.text);
}

Test(peak, gpu_without_fma_figure_keeps_the_gemm_reference)
{
    struct md_peak_ref r;
    md_bench_peak_ref(34.97, 46.7, 0, &r);
    cr_assert_str_eq(r.basis, "gemm");
    cr_assert_float_eq(r.fraction, 34.97 / 46.7, 1e-12);
    cr_assert(strstr(r.text, "of the measured 46.7 GFLOP/s GEMM peak"), "%s", r.text);
}

Test(peak, rate_above_every_figure_gets_no_ratio)
{
    struct md_peak_ref r;
    md_bench_peak_ref(388.0, 100.0, 0, &r); /* a GPU whose GEMM ran slow */
    cr_assert(isnan(r.fraction));
    cr_assert_null(r.basis);
    cr_assert(strstr(r.text, "above"), "%s", r.text);
    no_percent_above_100(r.text);
    md_bench_peak_ref(388.0, 100.0, 300.0, &r);
    cr_assert(isnan(r.fraction));
    no_percent_above_100(r.text);
    md_bench_peak_ref(5.0, 0, 0, &r);
    cr_assert(isnan(r.fraction));
    cr_assert_float_eq(r.gflops, 0, 1e-12);
}

/* The whole benchmark with OpenBLAS forced onto its SSE3 kernels: the
 * direct AVX2/AVX-512 convolutions outrun its GEMM (was "204.6% of the
 * measured 41.0 GFLOP/s GEMM peak" here). */
Test(peak, slow_openblas_kernels_give_no_impossible_ratio, .timeout = 120)
{
    char *dir = th_tmpdir();
    char args[4096], rep[4200];
    snprintf(rep, sizeof rep, "%s/r.json", dir);
    snprintf(args, sizeof args,
             "--device cpu --threads 2 --dataset synthetic --model resnet18_cifar --benchmark-only --bench-iters 2 "
             "--warmup-iters 1 --batch-size 8 --num-workers 0 --report %s",
             rep);
    setenv("OPENBLAS_CORETYPE", "Prescott", 1);
    char *out, *err;
    int rc = th_run(args, &out, &err);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    const char *line = strstr(out, "achieved (training)");
    cr_assert(line, "%s", out);
    char first[512];
    snprintf(first, sizeof first, "%.*s", (int)strcspn(line, "\n"), line);
    no_percent_above_100(first);
    cJSON *r = NULL;
    cr_assert_eq(md_json_load_file(rep, &r), MD_OK, "%s", md_errmsg());
    const cJSON *t = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "benchmark"), "training");
    const cJSON *f = cJSON_GetObjectItem(t, "fraction_of_peak");
    cr_assert(cJSON_IsNull(f) || (cJSON_IsNumber(f) && f->valuedouble <= 1.0), "fraction_of_peak %g",
              cJSON_IsNumber(f) ? f->valuedouble : -1.0);
    const cJSON *pk = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "benchmark"), "peak");
    const cJSON *fma = cJSON_GetObjectItem(pk, "fma_gflops");
    cr_assert(cJSON_IsNumber(fma) && fma->valuedouble > 0, "no FMA figure for the CPU");
    cJSON_Delete(r);
    free(out);
    free(err);
    th_rmtree(dir);
    free(dir);
}
