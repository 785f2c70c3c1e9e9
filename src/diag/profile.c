/* profile.c - per-layer rows and the leak verdict (profile.h). */
#include "diag/profile.h"

#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void md_prof_rates_of(const struct md_prof_layer *l, double peak_gflops, double peak_gbs, struct md_prof_rates *out)
{
    double s = (l->fwd_ms + l->bwd_ms) / 1e3;
    out->gflops = s > 0 ? l->flops / s / 1e9 : 0;
    out->gbs = s > 0 ? l->bytes / s / 1e9 : 0;
    out->frac_flops = s > 0 && peak_gflops > 0 && l->flops > 0 ? out->gflops / peak_gflops : (double)NAN;
    out->frac_bytes = s > 0 && peak_gbs > 0 && l->bytes > 0 ? out->gbs / peak_gbs : (double)NAN;
}

const char *md_prof_block_of(const char *name, char *buf, size_t n)
{
    const char *p = name;
    while (*p) {
        const char *e = strchr(p, '.');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        int digits = len > 0;
        for (size_t i = 0; i < len; i++) digits &= isdigit((unsigned char)p[i]) != 0;
        if (digits && p != name) {
            snprintf(buf, n, "%.*s", (int)(p + len - name), name);
            return buf;
        }
        if (!e) break;
        p = e + 1;
    }
    snprintf(buf, n, "%s", name);
    return buf;
}

static int cmp_time(const void *a, const void *b)
{
    const struct md_prof_layer *x = a, *y = b;
    double tx = x->fwd_ms + x->bwd_ms, ty = y->fwd_ms + y->bwd_ms;
    if (tx != ty) return (tx < ty) - (tx > ty);
    return strcmp(x->name, y->name);
}

int md_prof_rows(const struct md_prof_layer *in, int n, int blocks, struct md_prof_layer *out)
{
    int rows = 0;
    for (int i = 0; i < n; i++) {
        char key[128];
        if (!blocks) {
            out[rows] = in[i];
            if (out[rows].layers < 1) out[rows].layers = 1;
            rows++;
            continue;
        }
        md_prof_block_of(in[i].name, key, sizeof key);
        int j = 0;
        while (j < rows && strcmp(out[j].name, key)) j++;
        if (j == rows) {
            memset(&out[j], 0, sizeof out[j]);
            snprintf(out[j].name, sizeof out[j].name, "%s", key);
            snprintf(out[j].type, sizeof out[j].type, "%s", strcmp(key, in[i].name) ? "block" : in[i].type);
            rows++;
        }
        out[j].fwd_ms += in[i].fwd_ms;
        out[j].bwd_ms += in[i].bwd_ms;
        out[j].flops += in[i].flops;
        out[j].bytes += in[i].bytes;
        out[j].layers += in[i].layers > 0 ? in[i].layers : 1;
    }
    qsort(out, (size_t)rows, sizeof *out, cmp_time);
    return rows;
}

void md_leak_judge(const double *v, int n, double floor_bytes, double rel, struct md_leak_verdict *out)
{
    memset(out, 0, sizeof *out);
    out->warmup = n / 4 > 2 ? n / 4 : 2;
    if (n < MD_LEAK_MIN_STEPS || n - out->warmup < 3) return;
    for (int i = 0; i < n; i++)
        if (!(v[i] > 0)) return;
    out->judged = 1;
    out->first = v[out->warmup];
    out->last = v[n - 1];
    out->growth = out->last - out->first;
    out->per_step = out->growth / (double)(n - 1 - out->warmup);
    out->bound = fmax(floor_bytes, rel * out->first);
    out->flagged = out->growth > out->bound;
}
