/* helpers.c - shared test utilities. */
#define _GNU_SOURCE
#include "helpers.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return strdup("");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)n + 1);
    size_t r = fread(buf, 1, (size_t)n, f);
    buf[r] = '\0';
    fclose(f);
    return buf;
}

int th_run(const char *args, char **out, char **err)
{
    const char *bin = getenv("MPSDIAG_BIN");
    if (!bin) bin = "build/mpsdiag";
    char *dir = th_tmpdir();
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s %s >%s/out 2>%s/err </dev/null", bin, args, dir, dir);
    int rc = system(cmd);
    char p[4200];
    snprintf(p, sizeof p, "%s/out", dir);
    char *o = slurp(p);
    snprintf(p, sizeof p, "%s/err", dir);
    char *e = slurp(p);
    if (out) *out = o; else free(o);
    if (err) *err = e; else free(e);
    th_rmtree(dir);
    free(dir);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
}

char *th_tmpdir(void)
{
    char tmpl[] = "/tmp/mpsdiag-test-XXXXXX";
    char *d = mkdtemp(tmpl);
    cr_assert(d != NULL, "mkdtemp failed");
    return strdup(d);
}

void th_rmtree(const char *dir)
{
    char cmd[4200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    int rc = system(cmd);
    (void)rc;
}

char *th_write(const char *dir, const char *name, const char *text)
{
    char *path = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    cr_assert(f != NULL, "cannot write %s", path);
    fputs(text, f);
    fclose(f);
    return path;
}

int th_allclose_d(const char *what, const double *got, const double *ref, size_t n, double atol, double rtol)
{
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(got[i]) && isfinite(ref[i])) {
            fprintf(stderr, "  %s: non-finite value %g at index %zu (reference %g)\n", what, got[i], i, ref[i]);
            return 0;
        }
    }
    size_t worst = 0, bad = 0;
    double max_abs = 0, max_rel = 0, worst_excess = -1;
    for (size_t i = 0; i < n; i++) {
        double d = fabs(got[i] - ref[i]);
        double rel = d / (fabs(ref[i]) > 1e-30 ? fabs(ref[i]) : 1e-30);
        if (d > max_abs) max_abs = d;
        if (rel > max_rel && fabs(ref[i]) > atol) max_rel = rel;
        double excess = d - (atol + rtol * fabs(ref[i]));
        if (excess > 0) bad++;
        if (excess > worst_excess) { worst_excess = excess; worst = i; }
    }
    if (bad == 0) return 1;
    fprintf(stderr, "  %s: %zu of %zu elements out of tolerance (atol %g, rtol %g); worst index %zu: got %.9g ref %.9g; "
                 "max abs err %.3g, max rel err %.3g\n", what, bad, n, atol, rtol, worst, got[worst], ref[worst],
                 max_abs, max_rel);
    int shown = 0;
    for (size_t i = 0; i < n && shown < 5; i++)
        if (fabs(got[i] - ref[i]) > atol + rtol * fabs(ref[i])) {
            fprintf(stderr, "    [%zu] got %.9g ref %.9g\n", i, got[i], ref[i]);
            shown++;
        }
    return 0;
}

int th_allclose(const char *what, const float *got, const float *ref, size_t n, double atol, double rtol)
{
    double *g = malloc(n * sizeof *g), *r = malloc(n * sizeof *r);
    for (size_t i = 0; i < n; i++) {
        g[i] = got[i];
        r[i] = ref[i];
    }
    int ok = th_allclose_d(what, g, r, n, atol, rtol);
    free(g);
    free(r);
    return ok;
}
