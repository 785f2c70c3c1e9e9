/* kernel_cases.c - see kernel_cases.h. */
#include "kernel_cases.h"

#include <criterion/criterion.h>
#include <stdlib.h>

#include "core/rng.h"
#include "core/tensor.h"

void kc_fill(float *x, size_t n, uint64_t seed, float lo, float hi)
{
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * md_rng_uniform(seed, i);
}

void kc_fill_typed(void *x, md_dtype t, size_t n, uint64_t seed, float lo, float hi)
{
    for (size_t i = 0; i < n; i++) md_store_f(x, t, i, lo + (hi - lo) * md_rng_uniform(seed, i));
}

void kc_fill_distinct(float *x, size_t n, uint64_t seed, float lo, float hi)
{
    for (size_t i = 0; i < n; i++) x[i] = lo + (hi - lo) * (float)i / (float)(n > 1 ? n - 1 : 1);
    md_rng r;
    md_rng_init(&r, seed);
    for (size_t i = n; i > 1; i--) {
        size_t j = md_rng_below(&r, (uint32_t)i);
        float t = x[i - 1];
        x[i - 1] = x[j];
        x[j] = t;
    }
}

md_device *kc_open_ref(void)
{
    md_device *dev = NULL;
    struct md_device_opts o = {.threads = 1};
    cr_assert_eq(md_device_open(md_backend_find("ref"), 0, &o, &dev), MD_OK, "%s", md_errmsg());
    return dev;
}
