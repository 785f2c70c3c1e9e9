/* fuzz_csv.h - one input through the CSV time-series reader of src/data
 * (csv_series.c), its seeds, and a text-aware mutator for the smoke mode.
 * Used by test/fuzz/fuzz_csv.c (libFuzzer, make fuzz), test/fuzz/seeds.c and
 * the fuzz_smoke/csv test. Header-only, as fuzz_one.h. */
#ifndef MD_FUZZ_CSV_H
#define MD_FUZZ_CSV_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/mem.h"
#include "data/csv_series.h"

/* Parses with small windows in every features mode; on success reads every
 * window of every split, the naive baseline and the inverse transform. */
static inline int md_fuzz_csv(const uint8_t *d, size_t n)
{
    static const md_csv_features modes[] = {MD_CSV_FEATURES_M, MD_CSV_FEATURES_S, MD_CSV_FEATURES_MS};
    float sink = 0;
    for (int m = 0; m < 3; m++) {
        md_csv_opts o;
        md_csv_opts_default(&o);
        o.seq_len = 3;
        o.pred_len = 2;
        o.features = modes[m];
        o.freq = m == 2 ? MD_CSV_FREQ_D : MD_CSV_FREQ_H;
        o.max_bytes = 1 << 20;
        md_csv_series *s = NULL;
        if (md_csv_series_parse((const char *)d, n, m == 1 ? "ETTh1.csv" : "fuzz.csv", &o, &s) != MD_OK) continue;
        const md_csv_info *in = md_csv_series_info(s);
        float *x = md_malloc((size_t)o.seq_len * (size_t)in->n_in * sizeof *x);
        float *y = md_malloc((size_t)o.pred_len * (size_t)in->n_out * sizeof *y);
        float xm[3 * MD_CSV_MAX_TIME_FEATURES], ym[2 * MD_CSV_MAX_TIME_FEATURES];
        if (x && y)
            for (int sp = 0; sp < MD_CSV_SPLITS; sp++) {
                for (long long i = 0; i < in->windows[sp]; i++) {
                    md_csv_series_window(s, sp, i, x, y, xm, ym);
                    sink += x[0] + y[0];
                }
                double mse, mae;
                md_csv_series_naive(s, sp, sp == 2, &mse, &mae);
                md_csv_series_inverse(s, y, o.pred_len, 1);
            }
        md_free(x);
        md_free(y);
        md_csv_series_free(s);
    }
    return sink == 12345.0f; /* uses the reads; libFuzzer wants 0 almost always */
}

/* A small valid file: 12 dated rows of 3 variates (variant 0), or the same
 * with a BOM, CR LF, quoted fields and no final line ending (variant 1).
 * Returns its size (<= cap). */
static inline size_t md_fuzz_seed_csv(uint8_t *b, size_t cap, int variant)
{
    size_t k = 0;
    const char *eol = variant ? "\r\n" : "\n";
    if (variant) k += (size_t)snprintf((char *)b + k, cap - k, "\xEF\xBB\xBF\"date\",HUFL,\"M,x\",OT%s", eol);
    else k += (size_t)snprintf((char *)b + k, cap - k, "date,HUFL,MUFL,OT%s", eol);
    for (int r = 0; r < 12 && k < cap; r++)
        k += (size_t)snprintf((char *)b + k, cap - k, "2016-07-01 %02d:00:00,%d.%03d,%s%d.5%s,-%de-1%s", r,
                              40 + r % 5, r * 37 % 1000, variant ? "\"" : "", r * 3, variant ? "\"" : "", r + 1,
                              r == 11 && variant ? "" : eol);
    return k < cap ? k : 0;
}

static inline uint64_t md_fuzz_csv_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* A mutation of seed[0..n) that keeps it mostly text: CSV's special bytes
 * put in, bytes deleted, a line repeated or cut. Returns the size (<= cap). */
static inline size_t md_fuzz_csv_mutate(const uint8_t *seed, size_t n, uint8_t *out, size_t cap, uint64_t *rs)
{
    static const char alphabet[] = ",\"\r\n.-+eE0912 \tNnaIif:/T\xEF\xBB\xBF\x00";
    size_t m = n < cap ? n : cap;
    memcpy(out, seed, m);
    int ops = 1 + (int)(md_fuzz_csv_rand(rs) % 4);
    for (int o = 0; o < ops && m > 0; o++) {
        size_t at = (size_t)(md_fuzz_csv_rand(rs) % m);
        switch (md_fuzz_csv_rand(rs) % 5) {
        case 0: out[at] = (uint8_t)alphabet[md_fuzz_csv_rand(rs) % (sizeof alphabet - 1)]; break;
        case 1: /* insert */
            if (m < cap) {
                memmove(out + at + 1, out + at, m - at);
                out[at] = (uint8_t)alphabet[md_fuzz_csv_rand(rs) % (sizeof alphabet - 1)];
                m++;
            }
            break;
        case 2: /* delete */
            memmove(out + at, out + at + 1, m - at - 1);
            m--;
            break;
        case 3: m = at; break; /* truncate */
        case 4: { /* repeat the line that holds `at` */
            size_t ls = at, le = at;
            while (ls > 0 && out[ls - 1] != '\n') ls--;
            while (le < m && out[le] != '\n') le++;
            if (le < m) le++;
            if (m + (le - ls) <= cap) {
                memmove(out + le + (le - ls), out + le, m - le);
                memcpy(out + le, out + ls, le - ls);
                m += le - ls;
            }
            break;
        }
        }
    }
    return m;
}

#endif
