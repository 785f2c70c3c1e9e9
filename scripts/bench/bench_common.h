/* bench_common.h - what the device benchmarks (attn_bench.c, cuda_kbench.c)
 * share: the device they time on, dying with a message, random device
 * buffers and sorting times. Header-only: each benchmark is one translation
 * unit linked against the objects of `make` (scripts/bench/build_bench.sh).
 * Define BENCH_NAME (a string) before including it. */
#ifndef MD_BENCH_COMMON_H
#define MD_BENCH_COMMON_H

#include <stdio.h>
#include <stdlib.h>

#include "backend/backend.h"
#include "core/rng.h"
#include "core/status.h"
#include "core/tensor.h"

static md_device *dev;

static void die(const char *what)
{
    fprintf(stderr, BENCH_NAME ": %s: %s\n", what, md_errmsg());
    exit(1);
}
#define CK(x, what)                                                            \
    do {                                                                       \
        if ((x) != MD_OK) die(what);                                           \
    } while (0)

/* A device buffer of n random elements of type t in [-1, 1). */
static void *rnd(size_t n, md_dtype t, uint64_t seed)
{
    size_t es = md_dtype_size(t);
    void *h = malloc(n * es), *d = NULL;
    for (size_t i = 0; i < n; i++) md_store_f(h, t, i, 2.0f * md_rng_uniform(seed, i) - 1.0f);
    CK(md_dev_alloc(dev, n * es, &d, "bench"), "alloc");
    CK(md_dev_upload(dev, d, h, n * es), "upload");
    CK(md_dev_sync(dev), "sync");
    free(h);
    return d;
}

/* qsort comparator of floats, ascending. */
static int cmpf(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

#endif
