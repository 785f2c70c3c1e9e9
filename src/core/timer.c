/* timer.c - monotonic clock and sample statistics. */
#define _POSIX_C_SOURCE 200809L
#include "core/timer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/mem.h"

double md_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double md_percentile_sorted(const double *s, size_t n, double q)
{
    if (n == 0) return 0.0;
    double pos = q / 100.0 * (double)(n - 1);
    size_t lo = (size_t)floor(pos);
    size_t hi = lo + 1 < n ? lo + 1 : lo;
    double frac = pos - (double)lo;
    return s[lo] + (s[hi] - s[lo]) * frac;
}

md_stats md_stats_of(const double *v, size_t n)
{
    md_stats st;
    memset(&st, 0, sizeof st);
    st.n = n;
    if (n == 0) return st;
    double *s = md_malloc(n * sizeof *s);
    if (!s) return st;
    memcpy(s, v, n * sizeof *s);
    qsort(s, n, sizeof *s, cmp_double);
    double sum = 0;
    for (size_t i = 0; i < n; i++) sum += s[i];
    st.mean = sum / (double)n;
    double var = 0;
    for (size_t i = 0; i < n; i++) var += (s[i] - st.mean) * (s[i] - st.mean);
    st.stddev = n > 1 ? sqrt(var / (double)(n - 1)) : 0.0;
    st.min = s[0];
    st.max = s[n - 1];
    st.p50 = md_percentile_sorted(s, n, 50);
    st.p95 = md_percentile_sorted(s, n, 95);
    st.p99 = md_percentile_sorted(s, n, 99);
    md_free(s);
    return st;
}
