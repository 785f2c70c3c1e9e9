/* helpers.c - shared test utilities. */
#define _GNU_SOURCE
#include "helpers.h"

#include "core/json.h"
#include "core/safetensors.h"

#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

const char *th_bin(void)
{
    const char *b = getenv("MPSDIAG_BIN");
    return b ? b : "build/mpsdiag";
}

char *th_slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)(n > 0 ? n : 0) + 1);
    size_t r = fread(buf, 1, (size_t)(n > 0 ? n : 0), f);
    buf[r] = '\0';
    fclose(f);
    if (len) *len = r;
    return buf;
}

/* Runs the shell line `cmd` (which redirects into dir/out and dir/err) and
 * hands the captured text to the caller. */
static int run_captured(const char *cmd, const char *dir, char **out, char **err)
{
    int rc = system(cmd);
    char p[4200];
    snprintf(p, sizeof p, "%s/out", dir);
    char *o = th_slurp(p, NULL);
    snprintf(p, sizeof p, "%s/err", dir);
    char *e = th_slurp(p, NULL);
    if (out) *out = o ? o : strdup("");
    else free(o);
    if (err) *err = e ? e : strdup("");
    else free(e);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
}

int th_run(const char *args, char **out, char **err)
{
    char *dir = th_tmpdir();
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "%s %s >%s/out 2>%s/err </dev/null", th_bin(), args, dir, dir);
    int rc = run_captured(cmd, dir, out, err);
    th_rmtree(dir);
    free(dir);
    return rc;
}

cJSON *th_run_report(const char *dir, const char *args, int want_rc, char **out, char **err)
{
    char *full = NULL, *path = NULL, *o = NULL, *e = NULL;
    cr_assert(asprintf(&path, "%s/r.json", dir) > 0);
    cr_assert(asprintf(&full, "%s --report %s", args, path) > 0);
    int rc = th_run(full, &o, &e);
    cr_assert_eq(rc, want_rc, "exit %d (wanted %d) for %s\nstdout:\n%s\nstderr:\n%s", rc, want_rc, full, o, e);
    cJSON *r = th_load_json(path);
    free(full);
    free(path);
    if (out) *out = o;
    else free(o);
    if (err) *err = e;
    else free(e);
    return r;
}

int th_sh(const char *cmd, char **out, char **err)
{
    char *dir = th_tmpdir();
    char *full = NULL;
    int n = asprintf(&full, "B='%s'; { %s ; } >%s/out 2>%s/err </dev/null", th_bin(), cmd, dir, dir);
    cr_assert(n > 0);
    int rc = run_captured(full, dir, out, err);
    free(full);
    th_rmtree(dir);
    free(dir);
    return rc;
}

int th_argv(char *buf, size_t bufsz, const char *args, char **argv)
{
    snprintf(buf, bufsz, "mpsdiag %s", args);
    int argc = 0;
    for (char *tok = strtok(buf, " "); tok && argc < 63; tok = strtok(NULL, " ")) argv[argc++] = tok;
    argv[argc] = NULL;
    return argc;
}

cJSON *th_load_json(const char *path)
{
    cJSON *r = NULL;
    cr_assert_eq(md_json_load_file(path, &r), MD_OK, "%s", md_errmsg());
    return r;
}

void th_st_rewrite_meta(const char *src, const char *dst, const char *key, const char *value)
{
    md_st_file *f = NULL;
    cr_assert_eq(md_st_open(src, &f), MD_OK, "%s", md_errmsg());
    md_st_writer *w = NULL;
    cr_assert_eq(md_st_writer_new(&w), MD_OK);
    for (int i = 0; i < md_st_count(f); i++) {
        const struct md_st_tensor *t = md_st_at(f, i);
        cr_assert_eq(md_st_writer_add(w, t->name, t->dtype, t->ndim, t->shape, t->data), MD_OK);
    }
    const char *k, *v;
    for (int i = 0; md_st_meta_at(f, i, &k, &v); i++)
        if (strcmp(k, key) != 0) cr_assert_eq(md_st_writer_meta(w, k, v), MD_OK);
    if (value) cr_assert_eq(md_st_writer_meta(w, key, value), MD_OK);
    cr_assert_eq(md_st_writer_write(w, dst), MD_OK, "%s", md_errmsg());
    md_st_writer_free(w);
    md_st_close(f);
}

int th_count_lines(const char *s)
{
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

char *th_unwrap(char *s)
{
    char *o = s;
    for (const char *p = s; *p;) {
        if (*p == '\n' && p[1] == ' ') {
            while (p[1] == ' ') p++;
            *o++ = ' ';
            p++;
            continue;
        }
        *o++ = *p++;
    }
    *o = '\0';
    return s;
}

int th_count_messages(const char *s)
{
    int n = 0;
    for (const char *p = s; p && *p;) {
        if (*p != ' ' && *p != '\n') n++;
        const char *e = strchr(p, '\n');
        p = e ? e + 1 : NULL;
    }
    return n;
}

int th_count(const char *s, const char *needle)
{
    int n = 0;
    size_t l = strlen(needle);
    for (const char *p = strstr(s, needle); p; p = strstr(p + l, needle)) n++;
    return n;
}

const cJSON *th_setting(const cJSON *report, const char *name)
{
    const cJSON *s;
    cJSON_ArrayForEach(s, cJSON_GetObjectItem(report, "settings"))
    {
        if (strcmp(cJSON_GetObjectItem(s, "name")->valuestring, name) == 0) return s;
    }
    return NULL;
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

void th_tmpdir_free(char *dir)
{
    th_rmtree(dir);
    free(dir);
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

const char *th_tiny_args(const char *dir, const char *model)
{
    static char b[2048];
    char *m = th_write(dir, "tiny.json", model);
    snprintf(b, sizeof b,
             "--device cpu --threads 1 --dataset synthetic --model %s --max-samples 384 --batch-size 32 "
             "--num-workers 0 --seed 7 --quiet",
             m);
    free(m);
    return b;
}

const char th_unstable_model[] =
    "{\"name\": \"unstable\", \"num_classes\": 10, \"inputs\": [{\"name\": \"image\", \"shape\": [1, 28, 28]}],\n"
    " \"layers\": [\n"
    "  {\"name\": \"conv1\", \"type\": \"conv2d\", \"out\": 8, \"kernel\": 3, \"padding\": 1},\n"
    "  {\"name\": \"relu1\", \"type\": \"relu\"},\n"
    "  {\"name\": \"conv2\", \"type\": \"conv2d\", \"out\": 8, \"kernel\": 3, \"padding\": 1},\n"
    "  {\"name\": \"relu2\", \"type\": \"relu\"},\n"
    "  {\"name\": \"pool\", \"type\": \"maxpool\", \"kernel\": 4},\n"
    "  {\"name\": \"flatten\", \"type\": \"flatten\"},\n"
    "  {\"name\": \"fc\", \"type\": \"linear\", \"out\": \"$num_classes\"}]}\n";

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

md_device *th_open_device(const char *name)
{
    const md_backend *b = md_backend_find(name);
    cr_assert(b, "no backend %s", name);
    struct md_device_opts o;
    memset(&o, 0, sizeof o);
    o.threads = 1;
    md_device *d = NULL;
    cr_assert_eq(md_device_open(b, 0, &o, &d), MD_OK, "%s", md_errmsg());
    return d;
}

md_device *th_try_device(const char *name)
{
    const md_backend *b = md_backend_find(name);
    if (!b) return NULL;
    struct md_device_opts o;
    memset(&o, 0, sizeof o);
    o.threads = 1;
    md_device *d = NULL;
    return md_device_open(b, 0, &o, &d) == MD_OK ? d : NULL;
}

int th_compare_torch(const md_st_file *ref, const char *key, const float *got, size_t n, const char *what, int quiet)
{
    const struct md_st_tensor *t = md_st_find(ref, key);
    cr_assert(t, "%s: the fixture lacks %s", what, key);
    cr_assert_eq((size_t)t->numel, n, "%s: %s has %lld elements, want %zu", what, key, t->numel, n);
    float *want = malloc(n ? n * sizeof *want : 1);
    cr_assert(want);
    memcpy(want, t->data, n * sizeof *want);
    double mx = 0;
    for (size_t k = 0; k < n; k++) mx = fmax(mx, fabs(want[k]));
    int bad = 0;
    for (size_t k = 0; k < n; k++) {
        double tol = 1e-4 * mx + 1e-3 * fabs(want[k]);
        if (!(fabs((double)got[k] - want[k]) <= tol)) {
            if (!bad && !quiet) cr_log_error("%s: %s[%zu] %.8g, PyTorch %.8g", what, key, k, got[k], want[k]);
            bad++;
        }
    }
    free(want);
    return bad;
}

int th_compare_torch_grads(const md_st_file *ref, md_model *m, const char *what, int quiet)
{
    float *g = malloc(md_model_nparams(m) * sizeof *g + 1);
    cr_assert(g);
    cr_assert_eq(md_model_get_grads_host(m, g), MD_OK);
    int bad = 0;
    for (int t = 0; t < md_model_num_tensors(m); t++) {
        const struct md_param_info *ti = md_model_tensor(m, t);
        char key[700];
        snprintf(key, sizeof key, "grad.%s", ti->name);
        bad += th_compare_torch(ref, key, g + ti->offset, ti->numel, what, quiet) != 0;
    }
    free(g);
    return bad;
}

int th_torch_mse_case(const md_st_file *ref, md_device *d, md_model *m, int b, int k, const char *what, int quiet)
{
    const int n = b * k;
    float target[64], y[64], dy[64];
    cr_assert(n > 0 && n <= 64);
    const struct md_st_tensor *tt = md_st_find(ref, "target");
    cr_assert(tt && (size_t)tt->numel == (size_t)n, "%s: the fixture's target", what);
    memcpy(target, tt->data, (size_t)n * sizeof *target);
    cr_assert_eq(md_model_forward(m, b, 1), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_dev_download(d, y, md_model_logits(m), (size_t)n * sizeof *y), MD_OK);
    double loss = 0;
    for (int i = 0; i < n; i++) {
        loss += ((double)y[i] - target[i]) * ((double)y[i] - target[i]) / n;
        dy[i] = 2.0f * (y[i] - target[i]) / (float)n;
    }
    void *dy_dev = NULL;
    cr_assert_eq(md_dev_alloc(d, (size_t)n * sizeof *dy, &dy_dev, "dy"), MD_OK);
    cr_assert_eq(md_dev_upload(d, dy_dev, dy, (size_t)n * sizeof *dy), MD_OK);
    cr_assert_eq(md_model_set_output_grad(m, dy_dev), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_model_backward(m), MD_OK, "%s", md_errmsg());
    int bad = th_compare_torch(ref, "output", y, (size_t)n, what, quiet) != 0;
    float lf = (float)loss;
    bad += th_compare_torch(ref, "loss", &lf, 1, what, quiet) != 0;
    bad += th_compare_torch_grads(ref, m, what, quiet);
    md_dev_free(d, dy_dev);
    return bad;
}

void th_upload_inputs(md_model *m, int batch, md_rng *r, uint64_t seed, float scale, float ramp, int period)
{
    for (int i = 0; i < md_model_num_inputs(m); i++) {
        int c, h, w;
        md_model_input_shape(m, i, &c, &h, &w);
        size_t n = (size_t)batch * c * h * w;
        float *x = malloc(n * sizeof *x + 1);
        cr_assert(x);
        md_rng own;
        if (!r) md_rng_init(&own, seed + (uint64_t)i);
        md_rng *u = r ? r : &own;
        for (size_t k = 0; k < n; k++) x[k] = scale * md_rng_next_uniform(u) - 1.0f + ramp * (float)(k % (size_t)period);
        cr_assert_eq(md_dev_upload(md_model_device(m), md_model_input_buffer(m, i), x, n * sizeof *x), MD_OK);
        free(x);
    }
}

double th_num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    cr_assert(cJSON_IsNumber(v), "%s is not a number", key);
    return v->valuedouble;
}

const cJSON *th_obj(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    cr_assert_not_null(v, "no key %s", key);
    return v;
}
