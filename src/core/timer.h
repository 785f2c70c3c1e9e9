/* timer.h - monotonic wall clock and simple statistics over samples. */
#ifndef MD_TIMER_H
#define MD_TIMER_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Seconds from a monotonic clock. */
double md_now(void);

/* Summary of a sample of timings (any unit). Percentiles by linear
 * interpolation between order statistics (numpy's default). */
typedef struct md_stats {
    size_t n;
    double mean, stddev, min, p50, p95, p99, max;
} md_stats;

/* Computes stats over v[0..n). Sorts a private copy; v is not changed. */
md_stats md_stats_of(const double *v, size_t n);
/* Percentile q in [0,100] of an already sorted array. */
double md_percentile_sorted(const double *sorted, size_t n, double q);

#ifdef __cplusplus
}
#endif
#endif
