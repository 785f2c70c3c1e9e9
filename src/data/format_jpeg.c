/* format_jpeg.c - folders of JPEGs, one folder per class: DIR/<class>/ *.jpg,
 * or DIR/train/<class>/ with optional val/ and test/ beside it. Every file is
 * decoded once at open (at the smallest DCT scale) so a bad file fails, or
 * is skipped, there; samples are decoded on demand at the stored size. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/mem.h"
#include "core/signals.h"
#include "data/format.h"

struct jpeg_state {
    char **paths;       /* (count) */
    long long count;
    int c, h, w;        /* stored size: decoded straight to it */
};

struct jpeg_scratch {
    md_jpeg *jpeg;
    uint8_t *file;      /* (cap) the last file read */
    size_t cap;
};

static md_status jpeg_detect(const char *dir, const char *want, char *found, size_t n)
{
    char **subs = NULL;
    long long ns = 0;
    if (md_files_list(dir, 1, &subs, &ns) != MD_OK) md_err_clear();
    int ok = 0;
    char p[MD_PATH_MAX * 2];
    for (long long i = 0; i < ns && !ok; i++) {
        if (strcmp(subs[i], "train") == 0) { ok = 1; break; }
        md_files_join(p, sizeof p, dir, subs[i]);
        char **files = NULL;
        long long nf = 0;
        if (md_files_list(p, 0, &files, &nf) == MD_OK && nf > 0) ok = 1;
        md_err_clear();
        md_files_free_names(files, nf);
    }
    md_files_free_names(subs, ns);
    if (!ok) return md_errf(MD_ERR_DATA, "%s: no class folders of JPEGs (nor a train/ folder)", dir);
    snprintf(found, n, "%s", want ? want : "jpeg");
    return MD_OK;
}

static md_status jpeg_default_dirs(const char *dataset, char (*dirs)[MD_PATH_MAX], int max, int *n)
{
    (void)dataset;
    (void)dirs;
    (void)max;
    *n = 0;
    return md_errf(MD_ERR_USAGE, "--dataset jpeg needs --data-dir (a folder of class folders)");
}

static md_status jpeg_peek(const struct md_format_args *a, struct md_data_peek *out)
{
    char p[MD_PATH_MAX * 2];
    md_files_join(p, sizeof p, a->dir, "train");
    char **cls = NULL;
    long long n = 0;
    MD_TRY(md_files_list(md_files_is_dir(p) ? p : a->dir, 1, &cls, &n));
    md_files_free_names(cls, n);
    if (n == 0) return md_errf(MD_ERR_DATA, "%s: no class folders", md_files_is_dir(p) ? p : a->dir);
    out->num_classes = (int)n;
    out->c = 3;
    out->h = out->w = a->image_size;
    return MD_OK;
}

static void jpeg_scratch_free(void *scratch)
{
    struct jpeg_scratch *s = scratch;
    if (!s) return;
    md_jpeg_free(s->jpeg);
    md_free(s->file);
    md_free(s);
}

static md_status jpeg_scratch_new(const void *state, void **out)
{
    (void)state;
    *out = NULL;
    struct jpeg_scratch *s = md_calloc(1, sizeof *s);
    if (!s) return MD_ERR_OOM;
    md_status st = md_jpeg_new(&s->jpeg);
    if (st != MD_OK) {
        jpeg_scratch_free(s);
        return st;
    }
    *out = s;
    return MD_OK;
}

/* Check of one JPEG at open: the header (size limit before any decoding),
 * then the whole file decoded at the smallest DCT scale, so that a file the
 * loader would fail on fails here, not mid-epoch. */
static md_status check_jpeg(struct jpeg_scratch *s, const char *path)
{
    size_t len = 0;
    MD_TRY(md_files_read(path, &s->file, &s->cap, &len));
    return md_jpeg_verify(s->jpeg, s->file, len, path);
}

/* Adds root/<class>/ *.jpg for the given classes; a class folder missing under
 * a val/ or test/ root is allowed, an empty one never is. */
static md_status load_tree(const struct md_format_args *a, struct jpeg_state *js, struct md_format_desc *d,
                           struct jpeg_scratch *s, const char *root, char **classes, int ncls, int must_exist)
{
    for (int k = 0; k < ncls; k++) {
        char cdir[MD_PATH_MAX * 2];
        md_files_join(cdir, sizeof cdir, root, classes[k]);
        if (!md_files_is_dir(cdir)) {
            if (must_exist) return md_errf(MD_ERR_DATA, "%s: missing class folder", cdir);
            continue;
        }
        char **files = NULL;
        long long nf = 0;
        MD_TRY(md_files_list(cdir, 0, &files, &nf));
        if (nf == 0) {
            md_files_free_names(files, nf);
            return md_errf(MD_ERR_DATA, "%s: empty class folder (no .jpg or .jpeg files)", cdir);
        }
        md_status st = MD_OK;
        char **pv = md_realloc(js->paths, (size_t)(js->count + nf) * sizeof *pv);
        if (pv) js->paths = pv;
        int32_t *lv = pv ? md_realloc(d->labels, (size_t)(js->count + nf) * sizeof *lv) : NULL;
        if (lv) d->labels = lv;
        else st = MD_ERR_OOM;
        for (long long i = 0; st == MD_OK && i < nf; i++) {
            char p[MD_PATH_MAX * 2];
            md_files_join(p, sizeof p, cdir, files[i]);
            md_interrupt_hook("data");
            if ((st = md_interrupt_check("while opening the dataset (checking the images of %s: %lld of %lld)", cdir,
                                         i, nf)) != MD_OK)
                break;
            md_status cs = check_jpeg(s, p);
            if (cs == MD_ERR_OOM) { st = cs; break; }
            if (cs != MD_OK) {
                if (!a->skip_bad) { st = cs; break; }
                a->bad(a->bad_ctx, p, md_errmsg());
                md_err_clear();
                continue;
            }
            js->paths[js->count] = md_strdup(p);
            if (!js->paths[js->count]) { st = MD_ERR_OOM; break; }
            d->labels[js->count] = k;
            js->count++;
            d->count = js->count;
        }
        md_files_free_names(files, nf);
        MD_TRY(st);
    }
    return MD_OK;
}

static void jpeg_free(void *state)
{
    struct jpeg_state *s = state;
    if (!s) return;
    md_files_free_names(s->paths, s->count);
    md_free(s);
}

static md_status jpeg_open(const struct md_format_args *a, struct md_format_desc *d, void **state)
{
    *state = NULL;
    const struct md_data_request *req = a->req;
    /* Stored size: --image-size, else the model's largest input, else 224;
     * gray when no input needs colour. */
    int side = 0, need_rgb = 0;
    for (int i = 0; i < (req->num_inputs > 0 ? req->num_inputs : 1); i++) {
        const struct md_data_input *in = req->num_inputs > 0 ? &req->inputs[i] : NULL;
        if (!in || (in->kind == MD_INPUT_IMAGE && in->c != 1)) need_rgb = 1;
        if (in && in->h > side) side = in->h;
        if (in && in->w > side) side = in->w;
    }
    if (a->image_size > 0) side = a->image_size;
    d->c = need_rgb ? 3 : 1;
    d->h = d->w = side > 0 ? side : 224;
    snprintf(d->format, sizeof d->format, "jpeg");
    snprintf(d->source, sizeof d->source, "%s", a->dir);
    d->norm_samples = 200; /* decoding is the cost */

    struct jpeg_state *js = md_calloc(1, sizeof *js);
    if (!js) return MD_ERR_OOM;
    js->c = d->c;
    js->h = d->h;
    js->w = d->w;
    char troot[MD_PATH_MAX * 2], p[MD_PATH_MAX * 2];
    md_files_join(troot, sizeof troot, a->dir, "train");
    int split_dirs = md_files_is_dir(troot);
    if (!split_dirs) snprintf(troot, sizeof troot, "%s", a->dir);
    char **classes = NULL;
    long long ncls = 0;
    struct jpeg_scratch *s = NULL;
    md_status st = md_files_list(troot, 1, &classes, &ncls);
    if (st != MD_OK) goto fail;
    if (ncls == 0) {
        st = md_errf(MD_ERR_DATA, "%s: no class folders (expected %s/<class>/*.jpg)", troot, troot);
        goto fail;
    }
    if (ncls > 100000) { st = md_errf(MD_ERR_DATA, "%s: %lld class folders is too many", troot, ncls); goto fail; }
    if ((st = jpeg_scratch_new(js, (void **)&s)) != MD_OK) goto fail;
    d->ranges.start[MD_SPLIT_TRAIN] = 0;
    if ((st = load_tree(a, js, d, s, troot, classes, (int)ncls, 1)) != MD_OK) goto fail;
    d->ranges.end[MD_SPLIT_TRAIN] = js->count;
    if (d->ranges.end[MD_SPLIT_TRAIN] == 0) {
        st = md_errf(MD_ERR_DATA, "%s: every training image was unreadable", troot);
        goto fail;
    }
    static const char *const sub[MD_SPLIT_COUNT] = {"train", "val", "test"};
    for (int sp = MD_SPLIT_VAL; split_dirs && sp <= MD_SPLIT_TEST; sp++) {
        md_files_join(p, sizeof p, a->dir, sub[sp]);
        if (!md_files_is_dir(p)) continue;
        /* Its class folders must be training classes. */
        char **vc = NULL;
        long long nvc = 0;
        if ((st = md_files_list(p, 1, &vc, &nvc)) != MD_OK) goto fail;
        for (long long i = 0; i < nvc && st == MD_OK; i++) {
            if (!bsearch(&vc[i], classes, (size_t)ncls, sizeof *classes, md_files_cmp_name)) {
                char q[MD_PATH_MAX * 3];
                md_files_join(q, sizeof q, p, vc[i]);
                st = md_errf(MD_ERR_DATA, "%s: class '%s' is not among the %lld training classes in %s", q, vc[i],
                             ncls, troot);
            }
        }
        md_files_free_names(vc, nvc);
        if (st != MD_OK) goto fail;
        d->ranges.start[sp] = js->count;
        if ((st = load_tree(a, js, d, s, p, classes, (int)ncls, 0)) != MD_OK) goto fail;
        d->ranges.end[sp] = js->count;
        snprintf(d->split_origin[sp], sizeof d->split_origin[sp], "%s/ folder", sub[sp]);
    }
    if (split_dirs) snprintf(d->split_origin[MD_SPLIT_TRAIN], sizeof d->split_origin[0], "train/ folder");
    d->num_classes = (int)ncls;
    d->class_names = classes;
    classes = NULL;
    jpeg_scratch_free(s);
    *state = js;
    return MD_OK;
fail:
    md_files_free_names(classes, ncls);
    jpeg_scratch_free(s);
    jpeg_free(js);
    return st;
}

static md_status jpeg_read(const void *state, void *scratch, long long i, uint8_t *buf, const uint8_t **px)
{
    const struct jpeg_state *js = state;
    struct jpeg_scratch *s = scratch;
    size_t len = 0;
    *px = buf;
    MD_TRY(md_files_read(js->paths[i], &s->file, &s->cap, &len));
    return md_jpeg_decode(s->jpeg, s->file, len, js->paths[i], js->c, js->h, js->w, buf);
}

static const char *jpeg_sample_name(const void *state, long long i)
{
    return ((const struct jpeg_state *)state)->paths[i];
}

const struct md_data_format md_format_jpeg = {
    .name = "jpeg",
    .datasets = (const char *const[]){"jpeg", NULL},
    .expects = "class folders of JPEGs",
    .detect = jpeg_detect,
    .default_dirs = jpeg_default_dirs,
    .peek = jpeg_peek,
    .open = jpeg_open,
    .scratch_new = jpeg_scratch_new,
    .scratch_free = jpeg_scratch_free,
    .read = jpeg_read,
    .sample_name = jpeg_sample_name,
    .free = jpeg_free,
};
