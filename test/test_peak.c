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

/* md_bench_peak_ref(achieved, gemm, fma): the figure chosen as the
 * reference (basis NULL and fraction NAN: none bounds the rate), and words
 * the text must contain; no text ever shows a ratio above 100%. */
Test(peak, reference_is_the_figure_that_bounds_the_rate)
{
    static const struct {
        double achieved, gemm, fma;
        const char *basis;
        double fraction;
        const char *says[2];
    } cases[] = {
        /* 16 cores, OpenBLAS generic kernels at 10 GFLOP/s, convolutions at
         * 38.8: the generic GEMM is no bound, the FMA rate is */
        {38.8, 10.0, 2000.0, "fma", 38.8 / 2000.0, {"FMA", "GEMM"}},
        /* GEMM above a low FMA figure is the reference */
        {350.0, 400.0, 300.0, "gemm", 350.0 / 400.0, {NULL}},
        /* a GPU without an FMA figure keeps the GEMM reference */
        {34.97, 46.7, 0, "gemm", 34.97 / 46.7, {"of the measured 46.7 GFLOP/s GEMM peak"}},
        /* rates above every figure get no ratio (a GPU whose GEMM ran slow) */
        {388.0, 100.0, 0, NULL, NAN, {"above"}},
        {388.0, 100.0, 300.0, NULL, NAN, {NULL}},
        {5.0, 0, 0, NULL, NAN, {NULL}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct md_peak_ref r;
        md_bench_peak_ref(cases[i].achieved, cases[i].gemm, cases[i].fma, &r);
        if (cases[i].basis) {
            cr_assert(r.basis && !strcmp(r.basis, cases[i].basis), "case %zu: basis %s", i, r.basis ? r.basis : "none");
            cr_assert_float_eq(r.gflops, !strcmp(cases[i].basis, "fma") ? cases[i].fma : cases[i].gemm, 1e-9);
            cr_assert_float_eq(r.fraction, cases[i].fraction, 1e-12, "case %zu", i);
        } else {
            cr_assert_null(r.basis, "case %zu", i);
            cr_assert(isnan(r.fraction), "case %zu: fraction %g", i, r.fraction);
        }
        for (int k = 0; k < 2 && cases[i].says[k]; k++)
            cr_assert(strstr(r.text, cases[i].says[k]), "case %zu: %s", i, r.text);
        no_percent_above_100(r.text);
    }
    struct md_peak_ref none; /* nothing measured: no figure at all */
    md_bench_peak_ref(5.0, 0, 0, &none);
    cr_assert_float_eq(none.gflops, 0, 1e-12);
}

/* The whole benchmark with OpenBLAS forced onto its SSE3 kernels: the
 * direct AVX2/AVX-512 convolutions outrun its GEMM (was "204.6% of the
 * measured 41.0 GFLOP/s GEMM peak" here). */
Test(peak, slow_openblas_kernels_give_no_impossible_ratio, .timeout = 120)
{
    char *dir = th_tmpdir();
    setenv("OPENBLAS_CORETYPE", "Prescott", 1);
    char *out, *err;
    cJSON *r = th_run_report(dir,
                             "--device cpu --threads 2 --dataset synthetic --model resnet18_cifar --benchmark-only "
                             "--bench-iters 2 --warmup-iters 1 --batch-size 8 --num-workers 0",
                             0, &out, &err);
    const char *line = strstr(out, "achieved (training)");
    cr_assert(line, "%s", out);
    char first[512];
    snprintf(first, sizeof first, "%.*s", (int)strcspn(line, "\n"), line);
    no_percent_above_100(first);
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
    th_tmpdir_free(dir);
}
