/* helpers_rec.h - what the recommendation tests (test_advice.c,
 * test_report_recommend.c) share: sizes, the advice on a topic, and the
 * inputs of a plain CPU run. Header-only. */
#ifndef MD_TEST_HELPERS_REC_H
#define MD_TEST_HELPERS_REC_H

#include <string.h>

#include "diag/recommend.h"

#define MiB (1LL << 20)
#define GiB (1LL << 30)

/* The advice on `topic` among r[0..n), or NULL. */
static inline const struct md_rec *find(const struct md_rec *r, int n, const char *topic)
{
    for (int i = 0; i < n; i++)
        if (strcmp(r[i].topic, topic) == 0) return &r[i];
    return NULL;
}

/* A CPU run with 8 logical cores, batch 64, compiled. */
static inline struct md_rec_in base(void)
{
    struct md_rec_in in;
    memset(&in, 0, sizeof in);
    in.kind = MD_BACKEND_CPU;
    in.device_name = "test CPU";
    in.batch_size = 64;
    in.compile = 1;
    in.logical_cores = 8;
    return in;
}

#endif
