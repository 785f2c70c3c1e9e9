/* kernel_cases.h - deterministic inputs and small utilities shared by the
 * kernel tests (reference gradient checks, fixtures, backend-vs-reference). */
#ifndef MD_TEST_KERNEL_CASES_H
#define MD_TEST_KERNEL_CASES_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

/* x[i] = lo + (hi - lo) * md_rng_uniform(seed, i), i in [0, n). */
void kc_fill(float *x, size_t n, uint64_t seed, float lo, float hi);
/* Same values as kc_fill, stored in dtype t (fp32/fp16/bf16) into raw memory. */
void kc_fill_typed(void *x, md_dtype t, size_t n, uint64_t seed, float lo, float hi);
/* Distinct values (a random permutation of a grid) so that maxima are unique. */
void kc_fill_distinct(float *x, size_t n, uint64_t seed, float lo, float hi);

/* Opens the reference device (asserts). */
md_device *kc_open_ref(void);

#endif
