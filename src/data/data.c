/* data.c - opening a dataset: finding and validating its files, splits,
 * classes, normalisation, the decoded-image cache, and preparing one sample
 * for the loader (channel conversion, resize, augmentation, normalisation,
 * layout). */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <zlib.h>

#include "core/json.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/platform.h"
#include "core/rng.h"
#include "core/signals.h"
#include "data/data_impl.h"

#define MAX_FILE_BYTES ((size_t)1 << 31)  /* no dataset file of ours is larger */
#define NORM_SAMPLES 1000                 /* samples for computed mean/std (JPEG: fewer) */
#define NORM_SAMPLES_JPEG 200
#define SYNTH_TRAIN 5000
#define SYNTH_TEST 1000

enum kind { K_IDX = 0, K_CIFAR10, K_CIFAR100, K_JPEG, K_SYNTH };

struct md_data {
    enum kind kind;
    char name[32];
    char format[16];
    char source[MD_PATH_MAX];
    int src_c, src_h, src_w; /* stored sample (u8, planar) */
    size_t src_bytes;
    int num_classes;
    char **class_names;      /* (num_classes) */
    long long n_all;         /* samples of every split together */
    uint8_t *pixels;         /* IDX, CIFAR: (n_all, src_c, src_h, src_w); else NULL */
    int32_t *labels;         /* (n_all) */
    char **paths;            /* JPEG: (n_all) */
    int64_t *split[MD_SPLIT_COUNT];
    long long split_n[MD_SPLIT_COUNT];
    char split_origin[MD_SPLIT_COUNT][128];
    long long *class_counts; /* (MD_SPLIT_COUNT, num_classes) */
    /* what is delivered */
    int num_inputs;
    struct md_data_input inputs[MD_DATA_MAX_INPUTS];
    md_layout layout;
    float mean[MD_DATA_MAX_INPUTS][3], stdv[MD_DATA_MAX_INPUTS][3];
    int norm_known;
    int norm_given;          /* mean/std from the config */
    int direct[MD_DATA_MAX_INPUTS];        /* input i is the stored pixels, unconverted */
    float lut[MD_DATA_MAX_INPUTS][3][256]; /* normalised value of each byte */
    int aug_pad, aug_flip;
    /* decoded-image cache (JPEG and synthetic) */
    uint8_t *cache;          /* (n_all, src_c, src_h, src_w) */
    int *cache_state;        /* (n_all): 0 empty, 1 being filled, 2 ready */
    long long cache_filled;  /* samples ready (atomic) */
    long long cache_estimate;
    long long resident_bytes;
    /* bad samples */
    int skip_bad;
    long long skipped;       /* atomic */
    char first_bad[512];
    int nbad_listed;         /* entries of bad_path/bad_msg */
    char bad_path[MD_DATA_BAD_LISTED][MD_PATH_MAX];
    char bad_msg[MD_DATA_BAD_LISTED][512];
    pthread_mutex_t mu;      /* first_bad, the list */
    uint64_t seed;
};

struct md_data_scratch {
    md_jpeg *jpeg;
    uint8_t *file;
    size_t file_cap;
    uint8_t *u8;   /* (src_c, src_h, src_w) */
    float *conv;   /* (max c_i, src_h, src_w) */
    float *base;   /* (max c_i, max h_i, max w_i) */
};

static const char *const fashion_names[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                              "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};
static const char *const cifar10_names[10] = {"airplane", "automobile", "bird", "cat", "deer",
                                              "dog", "frog", "horse", "ship", "truck"};

/* ------------------------------------------------------------------------ */
/* small helpers                                                              */

static int is_dir(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static int is_file(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

static int exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

static void join(char *out, size_t n, const char *a, const char *b) { snprintf(out, n, "%s/%s", a, b); }

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }
static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static int has_jpeg_ext(const char *n)
{
    const char *dot = strrchr(n, '.');
    return dot && (strcasecmp(dot, ".jpg") == 0 || strcasecmp(dot, ".jpeg") == 0);
}

static void free_strs(char **v, long long n)
{
    if (!v) return;
    for (long long i = 0; i < n; i++) md_free(v[i]);
    md_free(v);
}

/* Sorted names of the entries of `dir` that are directories (want_dirs) or
 * JPEG files. *names is owned by the caller (free_strs). */
static md_status list_dir(const char *dir, int want_dirs, char ***names, long long *count)
{
    *names = NULL;
    *count = 0;
    DIR *dp = opendir(dir);
    if (!dp) return md_errf(MD_ERR_DATA, "%s: cannot open directory: %s", dir, strerror(errno));
    long long n = 0, cap = 64;
    char **v = md_malloc((size_t)cap * sizeof *v);
    md_status st = MD_OK;
    if (!v) { st = MD_ERR_OOM; goto fail; }
    struct dirent *e;
    char p[MD_PATH_MAX * 2];
    while ((e = readdir(dp))) {
        if (e->d_name[0] == '.') continue;
        join(p, sizeof p, dir, e->d_name);
        if (want_dirs ? !is_dir(p) : !(has_jpeg_ext(e->d_name) && is_file(p))) continue;
        if (n == cap) {
            char **nv = md_realloc(v, (size_t)cap * 2 * sizeof *v);
            if (!nv) { st = MD_ERR_OOM; goto fail; }
            v = nv;
            cap *= 2;
        }
        v[n] = md_strdup(e->d_name);
        if (!v[n]) { st = MD_ERR_OOM; goto fail; }
        n++;
    }
    closedir(dp);
    qsort(v, (size_t)n, sizeof *v, cmp_str);
    *names = v;
    *count = n;
    return MD_OK;
fail:
    closedir(dp);
    free_strs(v, n);
    return st;
}

/* Finds "<stem>-idx3-ubyte" with the spellings in circulation (".gz" or not,
 * "images-idx3" or "images.idx3"). */
static int find_idx(const char *dir, const char *stem, const char *kind, char *out, size_t n)
{
    const char *seps[] = {"-", "."};
    const char *exts[] = {".gz", ""};
    for (int s = 0; s < 2; s++)
        for (int e = 0; e < 2; e++) {
            char name[128];
            snprintf(name, sizeof name, "%s%s%s-ubyte%s", stem, seps[s], kind, exts[e]);
            join(out, n, dir, name);
            if (is_file(out)) return 1;
        }
    return 0;
}

static int dir_has_idx(const char *dir)
{
    char p[MD_PATH_MAX * 2];
    return find_idx(dir, "train-images", "idx3", p, sizeof p);
}

/* CIFAR files may sit in the folder the official tarballs unpack to. */
static int cifar_dir(const char *dir, int cifar100, char *out, size_t n)
{
    const char *file = cifar100 ? "train.bin" : "data_batch_1.bin";
    const char *sub = cifar100 ? "cifar-100-binary" : "cifar-10-batches-bin";
    char p[MD_PATH_MAX * 2];
    join(p, sizeof p, dir, file);
    if (is_file(p)) { snprintf(out, n, "%s", dir); return 1; }
    char d2[MD_PATH_MAX * 2];
    join(d2, sizeof d2, dir, sub);
    join(p, sizeof p, d2, file);
    if (is_file(p)) { snprintf(out, n, "%s", d2); return 1; }
    return 0;
}

static int dir_has_jpeg_classes(const char *dir)
{
    char **subs = NULL;
    long long ns = 0;
    if (list_dir(dir, 1, &subs, &ns) != MD_OK) { md_err_clear(); return 0; }
    int found = 0;
    char p[MD_PATH_MAX * 2];
    for (long long i = 0; i < ns && !found; i++) {
        if (strcmp(subs[i], "train") == 0) { found = 1; break; }
        join(p, sizeof p, dir, subs[i]);
        char **files = NULL;
        long long nf = 0;
        if (list_dir(p, 0, &files, &nf) == MD_OK && nf > 0) found = 1;
        md_err_clear();
        free_strs(files, nf);
    }
    free_strs(subs, ns);
    return found;
}

/* ------------------------------------------------------------------------ */
/* choosing the dataset and its directory                                    */

static md_status detect(const char *dir, enum kind *k, char *name, size_t n)
{
    char tmp[MD_PATH_MAX * 2];
    if (dir_has_idx(dir)) {
        *k = K_IDX;
        snprintf(name, n, "%s", strstr(dir, "fashion") ? "fashion-mnist" : "mnist");
        return MD_OK;
    }
    if (cifar_dir(dir, 1, tmp, sizeof tmp)) { *k = K_CIFAR100; snprintf(name, n, "cifar100"); return MD_OK; }
    if (cifar_dir(dir, 0, tmp, sizeof tmp)) { *k = K_CIFAR10; snprintf(name, n, "cifar10"); return MD_OK; }
    if (dir_has_jpeg_classes(dir)) { *k = K_JPEG; snprintf(name, n, "jpeg"); return MD_OK; }
    return md_errf(MD_ERR_DATA,
                   "%s: cannot tell which dataset this is: expected IDX files (train-images-idx3-ubyte[.gz]), "
                   "CIFAR binaries (data_batch_1.bin or train.bin) or class folders of JPEGs; name it with --dataset",
                   dir);
}

static md_status resolve(const md_options *o, enum kind *k, char *name, size_t nn, char *dir, size_t dn)
{
    const char *ds = o->dataset;
    if (strcmp(ds, "synthetic") == 0) {
        *k = K_SYNTH;
        snprintf(name, nn, "synthetic");
        dir[0] = '\0';
        return MD_OK;
    }
    if (o->data_dir[0]) {
        if (!is_dir(o->data_dir))
            return md_errf(MD_ERR_DATA, "--data-dir %s: %s", o->data_dir,
                           exists(o->data_dir) ? "not a directory" : "no such directory");
        snprintf(dir, dn, "%s", o->data_dir);
    } else {
        /* Defaults: where each dataset is expected, then the bundled sample. */
        char bundled[MD_PATH_MAX];
        snprintf(bundled, sizeof bundled, "%s/../data/fashion-mnist-sample", md_exe_dir());
        /* With no dataset named, the default run uses the bundled sample
         * (a quick real run); naming fashion-mnist prefers the full set. */
        const char *fm_full[] = {"data/fashion-mnist", "/usr/share/datasets/fashion-mnist",
                                 "data/fashion-mnist-sample", bundled, NULL};
        const char *fm_auto[] = {"data/fashion-mnist", "data/fashion-mnist-sample", bundled,
                                 "/usr/share/datasets/fashion-mnist", NULL};
        const char *const *fm = strcmp(ds, "auto") == 0 ? fm_auto : fm_full;
        const char *mn[] = {"data/mnist", NULL};
        const char *c10[] = {"data/cifar-10", "data/cifar10", NULL};
        const char *c100[] = {"data/cifar-100", "data/cifar100", NULL};
        const char *const *cand = strcmp(ds, "mnist") == 0      ? mn
                                  : strcmp(ds, "cifar10") == 0  ? c10
                                  : strcmp(ds, "cifar100") == 0 ? c100
                                  : strcmp(ds, "jpeg") == 0     ? NULL
                                                                : fm;
        if (!cand) return md_errf(MD_ERR_USAGE, "--dataset jpeg needs --data-dir (a folder of class folders)");
        dir[0] = '\0';
        for (int i = 0; cand[i]; i++) {
            char t[MD_PATH_MAX * 2];
            if (cand == fm || cand == mn ? dir_has_idx(cand[i]) : cifar_dir(cand[i], cand == c100, t, sizeof t)) {
                snprintf(dir, dn, "%s", cand[i]);
                break;
            }
        }
        if (!dir[0]) {
            char tried[1024] = "";
            for (int i = 0; cand[i]; i++) {
                size_t l = strlen(tried);
                snprintf(tried + l, sizeof tried - l, "%s%s", i ? ", " : "", cand[i]);
            }
            return md_errf(MD_ERR_DATA, "no %s dataset found (looked in %s); give --data-dir",
                           strcmp(ds, "auto") == 0 ? "default" : ds, tried);
        }
    }
    if (strcmp(ds, "auto") == 0) return detect(dir, k, name, nn);
    snprintf(name, nn, "%s", ds);
    if (strcmp(ds, "fashion-mnist") == 0 || strcmp(ds, "mnist") == 0) *k = K_IDX;
    else if (strcmp(ds, "cifar10") == 0) *k = K_CIFAR10;
    else if (strcmp(ds, "cifar100") == 0) *k = K_CIFAR100;
    else *k = K_JPEG;
    return MD_OK;
}

/* ------------------------------------------------------------------------ */
/* loaders per format: fill d->pixels/paths, labels, n_all and the raw
 * train/val/test ranges. `ranges[s]` = [start, end) in the all-arrays; a
 * missing val range (-1) is carved out of train later. */

struct ranges { long long start[MD_SPLIT_COUNT], end[MD_SPLIT_COUNT]; };

static md_status grow_all(struct md_data *d, long long add)
{
    long long n = d->n_all + add;
    if (d->kind != K_JPEG) {
        uint8_t *p = md_realloc(d->pixels, (size_t)n * d->src_bytes);
        if (!p) return MD_ERR_OOM;
        d->pixels = p;
    } else {
        char **p = md_realloc(d->paths, (size_t)n * sizeof *p);
        if (!p) return MD_ERR_OOM;
        d->paths = p;
    }
    int32_t *l = md_realloc(d->labels, (size_t)n * sizeof *l);
    if (!l) return MD_ERR_OOM;
    d->labels = l;
    return MD_OK;
}

static md_status load_idx_pair(struct md_data *d, const char *dir, const char *stem, int required)
{
    char ip[MD_PATH_MAX * 2], lp[MD_PATH_MAX * 2], istem[64], lstem[64];
    snprintf(istem, sizeof istem, "%s-images", stem);
    snprintf(lstem, sizeof lstem, "%s-labels", stem);
    int hi = find_idx(dir, istem, "idx3", ip, sizeof ip);
    int hl = find_idx(dir, lstem, "idx1", lp, sizeof lp);
    if (!hi && !hl && !required) return MD_OK;
    if (!hi) {
        join(ip, sizeof ip, dir, istem);
        return md_errf(MD_ERR_DATA, "%s-idx3-ubyte[.gz]: missing (the labels file is there)", ip);
    }
    if (!hl) {
        join(lp, sizeof lp, dir, lstem);
        return md_errf(MD_ERR_DATA, "%s-idx1-ubyte[.gz]: missing (the images file is there)", lp);
    }
    md_status st = MD_OK;
    uint8_t *ib = NULL, *lb = NULL;
    size_t il = 0, ll = 0;
    md_idx im, lab;
    if ((st = md_idx_read_file(ip, MAX_FILE_BYTES, &ib, &il)) != MD_OK) goto fail;
    if ((st = md_idx_parse(ib, il, ip, 3, &im)) != MD_OK) goto fail;
    if ((st = md_idx_read_file(lp, MAX_FILE_BYTES, &lb, &ll)) != MD_OK) goto fail;
    if ((st = md_idx_parse(lb, ll, lp, 1, &lab)) != MD_OK) goto fail;
    if (im.dims[0] != lab.dims[0]) {
        st = md_errf(MD_ERR_DATA, "%s: %u labels, but %s has %u images", lp, lab.dims[0], ip, im.dims[0]);
        goto fail;
    }
    if (d->src_h == 0) {
        d->src_c = 1;
        d->src_h = (int)im.dims[1];
        d->src_w = (int)im.dims[2];
        d->src_bytes = (size_t)d->src_h * d->src_w;
    } else if (d->src_h != (int)im.dims[1] || d->src_w != (int)im.dims[2]) {
        st = md_errf(MD_ERR_DATA, "%s: images are %ux%u but the training images are %dx%d", ip, im.dims[1],
                     im.dims[2], d->src_h, d->src_w);
        goto fail;
    }
    for (uint32_t i = 0; i < lab.dims[0]; i++) {
        if (lab.data[i] >= 10) {
            st = md_errf(MD_ERR_DATA, "%s: label %u of item %u is outside 0..9", lp, lab.data[i], i);
            goto fail;
        }
    }
    long long base = d->n_all;
    if ((st = grow_all(d, im.dims[0])) != MD_OK) goto fail;
    memcpy(d->pixels + (size_t)base * d->src_bytes, im.data, (size_t)im.dims[0] * d->src_bytes);
    for (uint32_t i = 0; i < lab.dims[0]; i++) d->labels[base + i] = lab.data[i];
    d->n_all += im.dims[0];
fail:
    md_free(ib);
    md_free(lb);
    return st;
}

static md_status load_idx(struct md_data *d, const char *dir, struct ranges *r)
{
    snprintf(d->format, sizeof d->format, "idx");
    char p[MD_PATH_MAX * 2];
    if (find_idx(dir, "train-images", "idx3", p, sizeof p) && strlen(p) > 3 && strcmp(p + strlen(p) - 3, ".gz") == 0)
        snprintf(d->format, sizeof d->format, "idx.gz");
    if (!find_idx(dir, "train-images", "idx3", p, sizeof p))
        return md_errf(MD_ERR_DATA, "%s: no train-images-idx3-ubyte[.gz] here (expected the four IDX files)", dir);
    MD_TRY(load_idx_pair(d, dir, "train", 1));
    r->start[MD_SPLIT_TRAIN] = 0;
    r->end[MD_SPLIT_TRAIN] = d->n_all;
    MD_TRY(load_idx_pair(d, dir, "t10k", 0));
    r->start[MD_SPLIT_TEST] = r->end[MD_SPLIT_TRAIN];
    r->end[MD_SPLIT_TEST] = d->n_all;
    d->num_classes = 10;
    d->class_names = md_calloc(10, sizeof(char *));
    if (!d->class_names) return MD_ERR_OOM;
    for (int k = 0; k < 10; k++) {
        char digit[2] = {(char)('0' + k), 0};
        d->class_names[k] = md_strdup(strcmp(d->name, "fashion-mnist") == 0 ? fashion_names[k] : digit);
        if (!d->class_names[k]) return MD_ERR_OOM;
    }
    return MD_OK;
}

static md_status load_cifar_file(struct md_data *d, const char *path, int cifar100, int coarse)
{
    uint8_t *b = NULL;
    size_t len = 0;
    long long count = 0;
    md_status st = md_idx_read_file(path, MAX_FILE_BYTES, &b, &len);
    if (st == MD_OK) st = md_cifar_check(b, len, path, cifar100, &count);
    if (st == MD_OK) st = grow_all(d, count);
    if (st == MD_OK) {
        md_cifar_extract(b, count, cifar100, coarse, d->pixels + (size_t)d->n_all * d->src_bytes,
                         d->labels + d->n_all);
        d->n_all += count;
    }
    md_free(b);
    return st;
}

/* Class names from the text files that come with the binaries, one a line. */
static md_status cifar_names(struct md_data *d, const char *dir, const char *file)
{
    d->class_names = md_calloc((size_t)d->num_classes, sizeof(char *));
    if (!d->class_names) return MD_ERR_OOM;
    char p[MD_PATH_MAX * 2];
    join(p, sizeof p, dir, file);
    FILE *f = fopen(p, "r");
    char line[256];
    for (int k = 0; k < d->num_classes; k++) {
        const char *nm = NULL;
        char fallback[32];
        while (f && fgets(line, sizeof line, f)) {
            line[strcspn(line, "\r\n")] = '\0';
            if (line[0]) { nm = line; break; }
        }
        if (!nm && d->kind == K_CIFAR10) nm = cifar10_names[k];
        if (!nm) { snprintf(fallback, sizeof fallback, "class_%d", k); nm = fallback; }
        d->class_names[k] = md_strdup(nm);
        if (!d->class_names[k]) { if (f) fclose(f); return MD_ERR_OOM; }
    }
    if (f) fclose(f);
    return MD_OK;
}

static md_status load_cifar(struct md_data *d, const char *dir0, int cifar100, int coarse, struct ranges *r)
{
    char dir[MD_PATH_MAX * 2], p[MD_PATH_MAX * 2];
    snprintf(d->format, sizeof d->format, "cifar-binary");
    d->src_c = 3;
    d->src_h = d->src_w = 32;
    d->src_bytes = MD_CIFAR_PIXELS;
    if (!cifar_dir(dir0, cifar100, dir, sizeof dir)) {
        char other[MD_PATH_MAX * 2];
        if (cifar_dir(dir0, !cifar100, other, sizeof other))
            return md_errf(MD_ERR_DATA, "%s: holds %s files (%s), not %s: use --dataset %s", dir0,
                           cifar100 ? "CIFAR-10" : "CIFAR-100", cifar100 ? "data_batch_1.bin" : "train.bin",
                           cifar100 ? "CIFAR-100" : "CIFAR-10", cifar100 ? "cifar10" : "cifar100");
        return md_errf(MD_ERR_DATA, "%s: no %s here (nor in %s/)", dir0, cifar100 ? "train.bin" : "data_batch_1.bin",
                       cifar100 ? "cifar-100-binary" : "cifar-10-batches-bin");
    }
    snprintf(d->source, sizeof d->source, "%s", dir);
    if (cifar100) {
        join(p, sizeof p, dir, "train.bin");
        MD_TRY(load_cifar_file(d, p, 1, coarse));
    } else {
        for (int i = 1; i <= 5; i++) {
            char f[32];
            snprintf(f, sizeof f, "data_batch_%d.bin", i);
            join(p, sizeof p, dir, f);
            if (i > 1 && !is_file(p)) {
                md_warn("%s: missing; training on data_batch_1..%d only", p, i - 1);
                break;
            }
            MD_TRY(load_cifar_file(d, p, 0, 0));
        }
    }
    r->start[MD_SPLIT_TRAIN] = 0;
    r->end[MD_SPLIT_TRAIN] = d->n_all;
    join(p, sizeof p, dir, cifar100 ? "test.bin" : "test_batch.bin");
    if (is_file(p)) MD_TRY(load_cifar_file(d, p, cifar100, coarse));
    r->start[MD_SPLIT_TEST] = r->end[MD_SPLIT_TRAIN];
    r->end[MD_SPLIT_TEST] = d->n_all;
    d->num_classes = cifar100 ? (coarse ? 20 : 100) : 10;
    return cifar_names(d, dir, cifar100 ? (coarse ? "coarse_label_names.txt" : "fine_label_names.txt")
                                        : "batches.meta.txt");
}

/* Reads a prefix of a file (or all of it when max is 0) into s->file. */
static md_status read_prefix(md_data_scratch *s, const char *path, size_t max, size_t *len, int *whole)
{
    FILE *f = fopen(path, "rb");
    if (!f) return md_errf(MD_ERR_DATA, "%s: cannot open: %s", path, strerror(errno));
    md_status st = MD_OK;
    if (fseek(f, 0, SEEK_END) != 0) { st = md_errf(MD_ERR_DATA, "%s: cannot seek", path); goto fail; }
    long sz = ftell(f);
    if (sz < 0 || (size_t)sz > MAX_FILE_BYTES) {
        st = md_errf(MD_ERR_DATA, "%s: unusable file size", path);
        goto fail;
    }
    rewind(f);
    size_t want = max && (size_t)sz > max ? max : (size_t)sz;
    if (want + 1 > s->file_cap) {
        uint8_t *nb = md_realloc(s->file, want + 1);
        if (!nb) { st = MD_ERR_OOM; goto fail; }
        s->file = nb;
        s->file_cap = want + 1;
    }
    if (fread(s->file, 1, want, f) != want) { st = md_errf(MD_ERR_DATA, "%s: read error", path); goto fail; }
    *len = want;
    *whole = want == (size_t)sz;
fail:
    fclose(f);
    return st;
}

static void note_bad(struct md_data *d, const char *path, const char *msg)
{
    long long n = __atomic_add_fetch(&d->skipped, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&d->mu);
    if (!d->first_bad[0]) snprintf(d->first_bad, sizeof d->first_bad, "%s", msg);
    if (d->nbad_listed < MD_DATA_BAD_LISTED) {
        /* the reason without the "<path>: " the message starts with */
        size_t pl = strlen(path);
        const char *why = strncmp(msg, path, pl) == 0 && msg[pl] == ':' && msg[pl + 1] == ' ' ? msg + pl + 2 : msg;
        snprintf(d->bad_path[d->nbad_listed], sizeof d->bad_path[0], "%s", path);
        snprintf(d->bad_msg[d->nbad_listed], sizeof d->bad_msg[0], "%s", why);
        d->nbad_listed++;
    }
    pthread_mutex_unlock(&d->mu);
    if (n == 1) md_warn("skipping bad sample: %s (--on-bad-sample skip; the report counts them)", msg);
    else md_verbose("  skipping bad sample: %s\n", msg);
}

/* Check of one JPEG at open: the header (size limit before any decoding),
 * then the whole file decoded at the smallest DCT scale, so that a file the
 * loader would fail on fails here, not mid-epoch. */
static md_status check_jpeg(md_data_scratch *s, const char *path)
{
    size_t len = 0;
    int whole = 0;
    MD_TRY(read_prefix(s, path, 0, &len, &whole));
    return md_jpeg_verify(s->jpeg, s->file, len, path);
}

/* Adds root/<class>/ *.jpg for the given classes; a class folder missing under
 * a val/ or test/ root is allowed, an empty one never is. */
static md_status load_jpeg_tree(struct md_data *d, md_data_scratch *s, const char *root, char **classes,
                                int ncls, int must_exist)
{
    for (int k = 0; k < ncls; k++) {
        char cdir[MD_PATH_MAX * 2];
        join(cdir, sizeof cdir, root, classes[k]);
        if (!is_dir(cdir)) {
            if (must_exist) return md_errf(MD_ERR_DATA, "%s: missing class folder", cdir);
            continue;
        }
        char **files = NULL;
        long long nf = 0;
        MD_TRY(list_dir(cdir, 0, &files, &nf));
        if (nf == 0) {
            free_strs(files, nf);
            return md_errf(MD_ERR_DATA, "%s: empty class folder (no .jpg or .jpeg files)", cdir);
        }
        md_status st = grow_all(d, nf);
        for (long long i = 0; st == MD_OK && i < nf; i++) {
            char p[MD_PATH_MAX * 2];
            join(p, sizeof p, cdir, files[i]);
            md_interrupt_hook("data");
            if ((st = md_interrupt_check("while opening the dataset (checking the images of %s: %lld of %lld)", cdir,
                                         i, nf)) != MD_OK)
                break;
            md_status cs = check_jpeg(s, p);
            if (cs == MD_ERR_OOM) { st = cs; break; }
            if (cs != MD_OK) {
                if (!d->skip_bad) { st = cs; break; }
                note_bad(d, p, md_errmsg());
                md_err_clear();
                continue;
            }
            d->paths[d->n_all] = md_strdup(p);
            if (!d->paths[d->n_all]) { st = MD_ERR_OOM; break; }
            d->labels[d->n_all] = k;
            d->n_all++;
        }
        free_strs(files, nf);
        MD_TRY(st);
    }
    return MD_OK;
}

static md_status load_jpeg(struct md_data *d, const char *dir, struct ranges *r)
{
    snprintf(d->format, sizeof d->format, "jpeg");
    char troot[MD_PATH_MAX * 2], p[MD_PATH_MAX * 2];
    join(troot, sizeof troot, dir, "train");
    int split_dirs = is_dir(troot);
    if (!split_dirs) snprintf(troot, sizeof troot, "%s", dir);
    char **classes = NULL;
    long long ncls = 0;
    md_data_scratch s = {0};
    md_status st = list_dir(troot, 1, &classes, &ncls);
    if (st != MD_OK) goto fail;
    if (ncls == 0) {
        st = md_errf(MD_ERR_DATA, "%s: no class folders (expected %s/<class>/*.jpg)", troot, troot);
        goto fail;
    }
    if (ncls > 100000) { st = md_errf(MD_ERR_DATA, "%s: %lld class folders is too many", troot, ncls); goto fail; }
    if ((st = md_jpeg_new(&s.jpeg)) != MD_OK) goto fail;
    r->start[MD_SPLIT_TRAIN] = 0;
    if ((st = load_jpeg_tree(d, &s, troot, classes, (int)ncls, 1)) != MD_OK) goto fail;
    r->end[MD_SPLIT_TRAIN] = d->n_all;
    if (r->end[MD_SPLIT_TRAIN] == 0) {
        st = md_errf(MD_ERR_DATA, "%s: every training image was unreadable", troot);
        goto fail;
    }
    static const char *const sub[MD_SPLIT_COUNT] = {"train", "val", "test"};
    for (int sp = MD_SPLIT_VAL; split_dirs && sp <= MD_SPLIT_TEST; sp++) {
        join(p, sizeof p, dir, sub[sp]);
        if (!is_dir(p)) continue;
        /* Its class folders must be training classes. */
        char **vc = NULL;
        long long nvc = 0;
        if ((st = list_dir(p, 1, &vc, &nvc)) != MD_OK) goto fail;
        for (long long i = 0; i < nvc && st == MD_OK; i++) {
            if (!bsearch(&vc[i], classes, (size_t)ncls, sizeof *classes, cmp_str)) {
                char q[MD_PATH_MAX * 3];
                join(q, sizeof q, p, vc[i]);
                st = md_errf(MD_ERR_DATA, "%s: class '%s' is not among the %lld training classes in %s", q, vc[i],
                             ncls, troot);
            }
        }
        free_strs(vc, nvc);
        if (st != MD_OK) goto fail;
        r->start[sp] = d->n_all;
        if ((st = load_jpeg_tree(d, &s, p, classes, (int)ncls, 0)) != MD_OK) goto fail;
        r->end[sp] = d->n_all;
        snprintf(d->split_origin[sp], sizeof d->split_origin[sp], "%s/ folder", sub[sp]);
    }
    if (split_dirs) snprintf(d->split_origin[MD_SPLIT_TRAIN], sizeof d->split_origin[0], "train/ folder");
    d->num_classes = (int)ncls;
    d->class_names = classes;
    classes = NULL;
fail:
    free_strs(classes, ncls);
    md_free(s.file);
    md_jpeg_free(s.jpeg);
    return st;
}

/* ------------------------------------------------------------------------ */
/* splits                                                                     */

/* --max-samples on a validation or test split: a seeded random `max` of its
 * samples, kept in order; the origin says so. */
static void cap_split(struct md_data *d, md_split s, long long max, uint64_t seed)
{
    long long n = d->split_n[s];
    if (max <= 0 || n <= max) return;
    int64_t *v = d->split[s];
    md_rng rng;
    md_rng_init(&rng, md_rng_hash(seed, 0x4d4158534d504cull + (uint64_t)s)); /* "MAXSMPL" */
    for (long long i = 0; i < max; i++) {
        long long j = i + (long long)(md_rng_next(&rng) % (uint64_t)(n - i));
        int64_t t = v[i]; v[i] = v[j]; v[j] = t;
    }
    qsort(v, (size_t)max, sizeof *v, cmp_i64);
    d->split_n[s] = max;
    size_t l = strlen(d->split_origin[s]);
    snprintf(d->split_origin[s] + l, sizeof d->split_origin[0] - l, ", %lld of %lld (--max-samples)", max, n);
}

static md_status make_splits(struct md_data *d, const md_options *o, const struct ranges *r)
{
    md_status st = MD_OK;
    int64_t *perm = NULL;
    for (int s = 0; s < MD_SPLIT_COUNT; s++) {
        long long n = r->end[s] - r->start[s];
        if (s == MD_SPLIT_TRAIN || n <= 0) continue;
        d->split[s] = md_malloc((size_t)(n > 0 ? n : 1) * sizeof(int64_t));
        if (!d->split[s]) return MD_ERR_OOM;
        for (long long i = 0; i < n; i++) d->split[s][i] = r->start[s] + i;
        d->split_n[s] = n;
    }
    /* Train, less a seeded held-out share when there is no val folder. */
    long long nt = r->end[MD_SPLIT_TRAIN] - r->start[MD_SPLIT_TRAIN];
    perm = md_malloc((size_t)nt * sizeof *perm);
    if (!perm) return MD_ERR_OOM;
    for (long long i = 0; i < nt; i++) perm[i] = r->start[MD_SPLIT_TRAIN] + i;
    long long nval = 0;
    if (d->split_n[MD_SPLIT_VAL] == 0 && o->val_split > 0) {
        nval = llround((double)nt * o->val_split);
        if (nval >= nt) nval = nt - 1;
        md_rng rng;
        md_rng_init(&rng, md_rng_hash(o->seed, 0x56414c53504c4954ull)); /* "VALSPLIT" */
        for (long long i = nt - 1; i > 0; i--) {
            long long j = (long long)(md_rng_next(&rng) % (uint64_t)(i + 1));
            int64_t t = perm[i]; perm[i] = perm[j]; perm[j] = t;
        }
        if (nval > 0) {
            d->split[MD_SPLIT_VAL] = md_malloc((size_t)nval * sizeof(int64_t));
            if (!d->split[MD_SPLIT_VAL]) { st = MD_ERR_OOM; goto fail; }
            memcpy(d->split[MD_SPLIT_VAL], perm + nt - nval, (size_t)nval * sizeof(int64_t));
            qsort(d->split[MD_SPLIT_VAL], (size_t)nval, sizeof(int64_t), cmp_i64);
            d->split_n[MD_SPLIT_VAL] = nval;
            snprintf(d->split_origin[MD_SPLIT_VAL], sizeof d->split_origin[0], "%.3g of the training samples (seed %llu)",
                     o->val_split, (unsigned long long)o->seed);
        }
    }
    long long ntrain = nt - nval;
    if (o->max_samples > 0 && ntrain > o->max_samples) ntrain = o->max_samples; /* a random subset */
    qsort(perm, (size_t)ntrain, sizeof *perm, cmp_i64);
    d->split[MD_SPLIT_TRAIN] = perm;
    d->split_n[MD_SPLIT_TRAIN] = ntrain;
    perm = NULL;
    if (!d->split_origin[MD_SPLIT_TRAIN][0])
        snprintf(d->split_origin[MD_SPLIT_TRAIN], sizeof d->split_origin[0], "%s",
                 nval ? "training samples, less val" : "training samples");
    if (ntrain < nt - nval) {
        size_t l = strlen(d->split_origin[MD_SPLIT_TRAIN]);
        snprintf(d->split_origin[MD_SPLIT_TRAIN] + l, sizeof d->split_origin[0] - l, ", %lld of %lld (--max-samples)",
                 ntrain, nt - nval);
    }
    if (!d->split_origin[MD_SPLIT_VAL][0])
        snprintf(d->split_origin[MD_SPLIT_VAL], sizeof d->split_origin[0], "%s",
                 o->val_split > 0 ? "none" : "none (--val-split 0)");
    if (!d->split_origin[MD_SPLIT_TEST][0])
        snprintf(d->split_origin[MD_SPLIT_TEST], sizeof d->split_origin[0], "%s",
                 d->split_n[MD_SPLIT_TEST] ? "test files" : "none (the dataset has no test files)");
    /* a smoke run with --max-samples 4 scores 4 validation and test samples,
     * not the whole test set */
    cap_split(d, MD_SPLIT_VAL, o->max_samples, o->seed);
    cap_split(d, MD_SPLIT_TEST, o->max_samples, o->seed);
    d->class_counts = md_calloc((size_t)MD_SPLIT_COUNT * d->num_classes, sizeof(long long));
    if (!d->class_counts) { st = MD_ERR_OOM; goto fail; }
    for (int s = 0; s < MD_SPLIT_COUNT; s++)
        for (long long i = 0; i < d->split_n[s]; i++)
            d->class_counts[(size_t)s * d->num_classes + d->labels[d->split[s][i]]]++;
fail:
    md_free(perm);
    return st;
}

/* ------------------------------------------------------------------------ */
/* samples                                                                    */

md_status md_data_scratch_new(const struct md_data *d, md_data_scratch **out)
{
    *out = NULL;
    md_data_scratch *s = md_calloc(1, sizeof *s);
    if (!s) return MD_ERR_OOM;
    size_t maxc = 1, maxhw = 1;
    for (int i = 0; i < d->num_inputs; i++) {
        if ((size_t)d->inputs[i].c > maxc) maxc = (size_t)d->inputs[i].c;
        size_t hw = (size_t)d->inputs[i].h * d->inputs[i].w;
        if (hw > maxhw) maxhw = hw;
    }
    size_t srchw = (size_t)d->src_h * d->src_w;
    s->u8 = md_malloc(d->src_bytes);
    s->conv = md_malloc(maxc * srchw * sizeof(float));
    s->base = md_malloc(maxc * maxhw * sizeof(float));
    md_status st = (s->u8 && s->conv && s->base) ? MD_OK : MD_ERR_OOM;
    if (st == MD_OK && d->kind == K_JPEG) st = md_jpeg_new(&s->jpeg);
    if (st != MD_OK) {
        md_data_scratch_free(s);
        return st;
    }
    *out = s;
    return MD_OK;
}

void md_data_scratch_free(md_data_scratch *s)
{
    if (!s) return;
    md_jpeg_free(s->jpeg);
    md_free(s->file);
    md_free(s->u8);
    md_free(s->conv);
    md_free(s->base);
    md_free(s);
}

/* The stored pixels of sample gi: (src_c, src_h, src_w) u8. */
static md_status fetch(struct md_data *d, md_data_scratch *s, long long gi, const uint8_t **px)
{
    if (d->pixels) {
        *px = d->pixels + (size_t)gi * d->src_bytes;
        return MD_OK;
    }
    uint8_t *slot = NULL;
    if (d->cache) {
        int state = __atomic_load_n(&d->cache_state[gi], __ATOMIC_ACQUIRE);
        if (state == 2) {
            *px = d->cache + (size_t)gi * d->src_bytes;
            return MD_OK;
        }
        int expect = 0;
        if (__atomic_compare_exchange_n(&d->cache_state[gi], &expect, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            slot = d->cache + (size_t)gi * d->src_bytes;
    }
    uint8_t *dst = slot ? slot : s->u8;
    md_status st = MD_OK;
    if (d->kind == K_SYNTH) {
        int32_t lab;
        md_synth_sample(d->seed, gi, d->num_classes, d->src_c, d->src_h, d->src_w, dst, &lab);
    } else {
        size_t len = 0;
        int whole = 0;
        st = read_prefix(s, d->paths[gi], 0, &len, &whole);
        if (st == MD_OK) st = md_jpeg_decode(s->jpeg, s->file, len, d->paths[gi], d->src_c, d->src_h, d->src_w, dst);
    }
    if (slot) {
        if (st == MD_OK) {
            __atomic_store_n(&d->cache_state[gi], 2, __ATOMIC_RELEASE);
            __atomic_add_fetch(&d->cache_filled, 1, __ATOMIC_RELAXED);
        } else {
            __atomic_store_n(&d->cache_state[gi], 0, __ATOMIC_RELEASE);
        }
    }
    *px = dst;
    return st;
}

/* Input i of a sample at the input's size, channels converted, in [0, 1]:
 * out (c_i, h_i, w_i). */
static void base_image(const struct md_data *d, md_data_scratch *s, const uint8_t *px, int i, float *out)
{
    const struct md_data_input *in = &d->inputs[i];
    size_t hw = (size_t)d->src_h * d->src_w;
    int same = in->h == d->src_h && in->w == d->src_w;
    float *conv = same ? out : s->conv;
    const float k = 1.0f / 255.0f;
    if (in->c == d->src_c) {
        for (size_t p = 0; p < (size_t)in->c * hw; p++) conv[p] = (float)px[p] * k;
    } else if (d->src_c == 1) { /* gray -> replicated channels */
        for (int c = 0; c < in->c; c++)
            for (size_t p = 0; p < hw; p++) conv[(size_t)c * hw + p] = (float)px[p] * k;
    } else { /* RGB -> luma */
        for (size_t p = 0; p < hw; p++)
            conv[p] = (0.299f * (float)px[p] + 0.587f * (float)px[hw + p] + 0.114f * (float)px[2 * hw + p]) * k;
    }
    if (!same) md_image_resize_f32(conv, in->c, d->src_h, d->src_w, out, in->h, in->w);
}

long long md_data_split_index(const struct md_data *d, md_split s, long long i) { return d->split[s][i]; }

struct md_aug md_data_aug_draw(const struct md_data *d, uint64_t seed, int epoch, long long position)
{
    struct md_aug a = {d->aug_pad, d->aug_pad, 0};
    uint64_t h = md_rng_hash(md_rng_hash(seed, 0x4155474d454e54ull + (uint64_t)epoch), (uint64_t)position);
    uint32_t span = (uint32_t)(2 * d->aug_pad + 1);
    a.dy = (int)((h & 0xffff) % span);
    a.dx = (int)(((h >> 16) & 0xffff) % span);
    a.flip = d->aug_flip ? (int)((h >> 32) & 1) : 0;
    return a;
}

md_status md_data_prepare(struct md_data *d, md_data_scratch *s, long long gi, const struct md_aug *aug,
                          float *const *inputs, int j, int32_t *label, int *bad)
{
    *bad = 0;
    const uint8_t *px = NULL;
    md_status st = fetch(d, s, gi, &px);
    if (st != MD_OK) {
        if (st == MD_ERR_DATA && d->skip_bad) {
            note_bad(d, d->paths ? d->paths[gi] : d->source, md_errmsg());
            md_err_clear();
            *bad = 1;
            return MD_OK;
        }
        return st;
    }
    *label = d->labels[gi];
    int pad = aug ? d->aug_pad : 0;
    int dy = aug ? aug->dy : 0, dx = aug ? aug->dx : 0, flip = aug ? aug->flip : 0;
    for (int i = 0; i < d->num_inputs; i++) {
        const struct md_data_input *in = &d->inputs[i];
        int C = in->c, H = in->h, W = in->w;
        /* Inputs that are the stored pixels as they are read them through a
         * table of normalised values; others go through a float image. */
        int direct = d->direct[i];
        if (!direct) base_image(d, s, px, i, s->base);
        float *o = inputs[i] + (size_t)j * C * H * W;
        size_t step = d->layout == MD_NHWC ? (size_t)C : 1;
        for (int c = 0; c < C; c++) {
            float m = d->mean[i][c], inv = 1.0f / d->stdv[i][c];
            const float *lut = d->lut[i][c];
            float padv = (0.0f - m) * inv;
            const float *b = s->base + (size_t)c * H * W;
            const uint8_t *pc = px + (size_t)c * H * W;
            for (int y = 0; y < H; y++) {
                int sy = y + dy - pad;
                float *orow = d->layout == MD_NHWC ? o + (size_t)y * W * C + c : o + ((size_t)c * H + y) * W;
                if (sy < 0 || sy >= H) {
                    for (int x = 0; x < W; x++) orow[(size_t)x * step] = padv;
                    continue;
                }
                int x0 = flip ? W - 1 + dx - pad : dx - pad; /* source column of x = 0 */
                int dir = flip ? -1 : 1;
                if (direct) {
                    const uint8_t *row = pc + (size_t)sy * W;
                    for (int x = 0, sx = x0; x < W; x++, sx += dir)
                        orow[(size_t)x * step] = (sx >= 0 && sx < W) ? lut[row[sx]] : padv;
                } else {
                    const float *row = b + (size_t)sy * W;
                    for (int x = 0, sx = x0; x < W; x++, sx += dir)
                        orow[(size_t)x * step] = (sx >= 0 && sx < W) ? (row[sx] - m) * inv : padv;
                }
            }
        }
    }
    return MD_OK;
}

/* Tables of normalised values for the inputs that use the stored pixels
 * unchanged (same channels and size): the loader's fast path. */
static void make_luts(struct md_data *d)
{
    const float k = 1.0f / 255.0f;
    for (int i = 0; i < d->num_inputs; i++) {
        const struct md_data_input *in = &d->inputs[i];
        d->direct[i] = in->c == d->src_c && in->h == d->src_h && in->w == d->src_w;
        for (int c = 0; c < in->c; c++) {
            float m = d->mean[i][c], inv = 1.0f / d->stdv[i][c];
            for (int v = 0; v < 256; v++) d->lut[i][c][v] = ((float)v * k - m) * inv;
        }
    }
}

/* ------------------------------------------------------------------------ */
/* inputs and normalisation                                                   */

static md_status resolve_inputs(struct md_data *d, const md_options *o, const struct md_data_request *req)
{
    d->layout = req->layout;
    d->num_inputs = req->num_inputs > 0 ? req->num_inputs : 1;
    if (d->num_inputs > MD_DATA_MAX_INPUTS)
        return md_errf(MD_ERR_CONFIG, "the model has %d inputs; the loader delivers at most %d", d->num_inputs,
                       MD_DATA_MAX_INPUTS);
    for (int i = 0; i < d->num_inputs; i++) {
        struct md_data_input *in = &d->inputs[i];
        if (req->num_inputs > 0) *in = req->inputs[i];
        else memset(in, 0, sizeof *in);
        if (!in->name[0]) snprintf(in->name, sizeof in->name, i ? "input%d" : "image", i);
        if (in->kind == MD_INPUT_LUMA) {
            if (in->c == 0) in->c = 1;
            if (in->c != 1)
                return md_errf(MD_ERR_CONFIG, "model input '%s': a brightness input has 1 channel, not %d", in->name,
                               in->c);
        }
        if (in->c == 0) in->c = d->src_c;
        if (in->c != d->src_c && !(in->c == 3 && d->src_c == 1) && !(in->c == 1 && d->src_c == 3))
            return md_errf(MD_ERR_CONFIG, "model input '%s' wants %d channels; %s images have %d", in->name, in->c,
                           d->name, d->src_c);
        if (in->h == 0) in->h = o->image_size > 0 && d->kind != K_JPEG ? o->image_size : d->src_h;
        if (in->w == 0) in->w = o->image_size > 0 && d->kind != K_JPEG ? o->image_size : d->src_w;
        if (in->h < 1 || in->w < 1 || in->h > 4096 || in->w > 4096 || in->c < 1 || in->c > 3)
            return md_errf(MD_ERR_CONFIG, "model input '%s': unusable shape (%d, %d, %d)", in->name, in->c, in->h,
                           in->w);
    }
    return MD_OK;
}

static void norm_known(struct md_data *d)
{
    /* Published per-channel values of the full training sets. */
    float m[3] = {0}, s[3] = {0};
    int nc = 0;
    if (strcmp(d->name, "fashion-mnist") == 0) { m[0] = 0.2860f; s[0] = 0.3530f; nc = 1; }
    else if (strcmp(d->name, "mnist") == 0) { m[0] = 0.1307f; s[0] = 0.3081f; nc = 1; }
    else if (d->kind == K_CIFAR10) {
        const float mm[3] = {0.4914f, 0.4822f, 0.4465f}, ss[3] = {0.2470f, 0.2435f, 0.2616f};
        memcpy(m, mm, sizeof m); memcpy(s, ss, sizeof s); nc = 3;
    } else if (d->kind == K_CIFAR100) {
        const float mm[3] = {0.5071f, 0.4865f, 0.4409f}, ss[3] = {0.2673f, 0.2564f, 0.2762f};
        memcpy(m, mm, sizeof m); memcpy(s, ss, sizeof s); nc = 3;
    }
    d->norm_known = nc > 0;
    for (int i = 0; i < d->num_inputs && nc; i++) {
        const struct md_data_input *in = &d->inputs[i];
        /* Known values hold for the stored channels and for replicated gray;
         * a derived luma channel is computed. */
        if (in->c == nc) { memcpy(d->mean[i], m, sizeof m); memcpy(d->stdv[i], s, sizeof s); }
        else if (nc == 1) { for (int c = 0; c < in->c; c++) { d->mean[i][c] = m[0]; d->stdv[i][c] = s[0]; } }
        else d->norm_known = 0;
    }
}

static md_status norm_compute(struct md_data *d)
{
    long long n = d->split_n[MD_SPLIT_TRAIN];
    long long want = d->kind == K_JPEG ? NORM_SAMPLES_JPEG : NORM_SAMPLES;
    if (n < want) want = n;
    md_data_scratch *s = NULL;
    MD_TRY(md_data_scratch_new(d, &s));
    double sum[MD_DATA_MAX_INPUTS][3] = {{0}}, sq[MD_DATA_MAX_INPUTS][3] = {{0}};
    double cnt[MD_DATA_MAX_INPUTS] = {0};
    md_status st = MD_OK;
    for (long long t = 0; t < want; t++) {
        md_interrupt_hook("data");
        if ((st = md_interrupt_check("while opening the dataset (mean and std from sample %lld of %lld)", t, want)) !=
            MD_OK)
            goto fail;
        long long gi = d->split[MD_SPLIT_TRAIN][(long long)((double)t * (double)n / (double)want)];
        const uint8_t *px;
        st = fetch(d, s, gi, &px);
        if (st != MD_OK) {
            /* The loader meets it again and applies --on-bad-sample there. */
            if (st == MD_ERR_DATA) { md_err_clear(); st = MD_OK; continue; }
            goto fail;
        }
        for (int i = 0; i < d->num_inputs; i++) {
            const struct md_data_input *in = &d->inputs[i];
            base_image(d, s, px, i, s->base);
            size_t hw = (size_t)in->h * in->w;
            for (int c = 0; c < in->c; c++)
                for (size_t p = 0; p < hw; p++) {
                    double v = s->base[(size_t)c * hw + p];
                    sum[i][c] += v;
                    sq[i][c] += v * v;
                }
            cnt[i] += (double)hw;
        }
    }
    for (int i = 0; i < d->num_inputs; i++)
        for (int c = 0; c < d->inputs[i].c; c++) {
            double m = cnt[i] > 0 ? sum[i][c] / cnt[i] : 0.5;
            double var = cnt[i] > 0 ? sq[i][c] / cnt[i] - m * m : 0.0625;
            double sd = var > 1e-8 ? sqrt(var) : 1.0;
            d->mean[i][c] = (float)m;
            d->stdv[i][c] = (float)sd;
        }
fail:
    md_data_scratch_free(s);
    return st;
}

/* ------------------------------------------------------------------------ */
/* open / free                                                                */

md_status md_data_open(const md_options *o, const struct md_data_request *req, struct md_data **out)
{
    static const struct md_data_request none;
    if (!req) req = &none;
    *out = NULL;
    md_status st = MD_OK;
    struct md_data *d = md_calloc(1, sizeof *d);
    if (!d) return MD_ERR_OOM;
    pthread_mutex_init(&d->mu, NULL);
    d->seed = o->seed;
    d->skip_bad = strcmp(o->on_bad_sample, "skip") == 0;
    struct ranges r;
    memset(&r, 0, sizeof r);
    char dir[MD_PATH_MAX];
    if ((st = resolve(o, &d->kind, d->name, sizeof d->name, dir, sizeof dir)) != MD_OK) goto fail;
    snprintf(d->source, sizeof d->source, "%s", dir);

    switch (d->kind) {
    case K_IDX:
        st = load_idx(d, dir, &r);
        break;
    case K_CIFAR10:
    case K_CIFAR100:
        st = load_cifar(d, dir, d->kind == K_CIFAR100, o->coarse_labels, &r);
        break;
    case K_JPEG: {
        /* Stored size: --image-size, else the model's largest input, else 224;
         * gray when no input needs colour. */
        int side = 0, need_rgb = 0;
        for (int i = 0; i < (req->num_inputs > 0 ? req->num_inputs : 1); i++) {
            const struct md_data_input *in = req->num_inputs > 0 ? &req->inputs[i] : NULL;
            if (!in || (in->kind == MD_INPUT_IMAGE && in->c != 1)) need_rgb = 1;
            if (in && in->h > side) side = in->h;
            if (in && in->w > side) side = in->w;
        }
        if (o->image_size > 0) side = o->image_size;
        d->src_c = need_rgb ? 3 : 1;
        d->src_h = d->src_w = side > 0 ? side : 224;
        d->src_bytes = (size_t)d->src_c * d->src_h * d->src_w;
        st = load_jpeg(d, dir, &r);
        break;
    }
    case K_SYNTH: {
        snprintf(d->format, sizeof d->format, "synthetic");
        const struct md_data_input *in = req->num_inputs > 0 ? &req->inputs[0] : NULL;
        int side = o->image_size > 0 ? o->image_size : 32;
        d->src_c = in && in->c > 0 ? in->c : 3;
        d->src_h = in && in->h > 0 ? in->h : side;
        d->src_w = in && in->w > 0 ? in->w : side;
        d->src_bytes = (size_t)d->src_c * d->src_h * d->src_w;
        d->num_classes = req->num_classes > 0 ? req->num_classes : 10;
        long long ntr = SYNTH_TRAIN, nte = SYNTH_TEST;
        if (o->max_samples > 0 && o->max_samples > ntr * (1.0 - o->val_split))
            ntr = (long long)ceil((double)o->max_samples / (1.0 - o->val_split));
        d->n_all = ntr + nte;
        d->labels = md_malloc((size_t)d->n_all * sizeof(int32_t));
        d->class_names = md_calloc((size_t)d->num_classes, sizeof(char *));
        if (!d->labels || !d->class_names) { st = MD_ERR_OOM; break; }
        for (long long i = 0; i < d->n_all; i++) d->labels[i] = (int32_t)(i % d->num_classes);
        for (int k = 0; k < d->num_classes && st == MD_OK; k++) {
            char nm[32];
            snprintf(nm, sizeof nm, "pattern_%d", k);
            if (!(d->class_names[k] = md_strdup(nm))) st = MD_ERR_OOM;
        }
        r.end[MD_SPLIT_TRAIN] = ntr;
        r.start[MD_SPLIT_TEST] = ntr;
        r.end[MD_SPLIT_TEST] = ntr + nte;
        snprintf(d->split_origin[MD_SPLIT_TEST], sizeof d->split_origin[0], "generated");
        break;
    }
    }
    if (st != MD_OK) goto fail;
    if (d->n_all == 0 || r.end[MD_SPLIT_TRAIN] == r.start[MD_SPLIT_TRAIN]) {
        st = md_errf(MD_ERR_DATA, "%s: no training samples", d->source[0] ? d->source : d->name);
        goto fail;
    }
    if (req->num_classes > 0 && req->num_classes < d->num_classes) {
        st = md_errf(MD_ERR_CONFIG, "the model has %d outputs but %s has %d classes", req->num_classes, d->name,
                     d->num_classes);
        goto fail;
    }
    if ((st = make_splits(d, o, &r)) != MD_OK) goto fail;
    if ((st = resolve_inputs(d, o, req)) != MD_OK) goto fail;
    d->resident_bytes = d->pixels ? (long long)((size_t)d->n_all * d->src_bytes) : 0;

    /* Augmentation: pad by an eighth of the side (4 px at 28-32 px, at most
     * 4); no flip for digits, whose mirror images are other glyphs. */
    {
        int side = d->inputs[0].h < d->inputs[0].w ? d->inputs[0].h : d->inputs[0].w;
        d->aug_pad = (side + 4) / 8 > 4 ? 4 : (side + 4) / 8;
        d->aug_flip = strcmp(d->name, "mnist") != 0;
        if (req->crop_padding) d->aug_pad = req->crop_padding > 0 ? req->crop_padding : 0;
        if (req->flip) d->aug_flip = req->flip > 0;
        if (d->aug_pad > side) {
            st = md_errf(MD_ERR_CONFIG, "data.augment.crop_padding: %d is more than the image side %d", d->aug_pad, side);
            goto fail;
        }
    }

    /* The cache: estimated, checked, then allocated (filled as samples are
     * first read). Synthetic samples up to 256 MiB in all are always kept:
     * making one costs more than a copy. */
    int synth_keep = d->kind == K_SYNTH && (size_t)d->n_all * d->src_bytes <= ((size_t)256 << 20);
    if ((o->cache_images || synth_keep) && !d->pixels) {
        d->cache_estimate = (long long)((size_t)d->n_all * d->src_bytes);
        long long avail = req->mem_available > 0 ? req->mem_available : md_mem_available_bytes();
        char a[32], b[32];
        if (avail > 0 && d->cache_estimate > avail) {
            st = md_errf(MD_ERR_OOM,
                         "--cache-images: %lld decoded images of %dx%dx%d need %s, more than the %s of RAM available; "
                         "run without it, or with a smaller --image-size or --max-samples",
                         d->n_all, d->src_c, d->src_h, d->src_w, md_fmt_bytes((double)d->cache_estimate, a, sizeof a),
                         md_fmt_bytes((double)avail, b, sizeof b));
            goto fail;
        }
        d->cache = md_malloc((size_t)d->cache_estimate);
        d->cache_state = md_calloc((size_t)d->n_all, sizeof(int));
        if (!d->cache || !d->cache_state) { st = MD_ERR_OOM; goto fail; }
    }

    norm_known(d);
    if (!d->norm_known && (st = norm_compute(d)) != MD_OK) goto fail;
    if (req->norm_channels > 0) {
        if (req->norm_channels != d->inputs[0].c) {
            st = md_errf(MD_ERR_CONFIG, "data.normalize: %d mean/std values for an input of %d channels",
                         req->norm_channels, d->inputs[0].c);
            goto fail;
        }
        for (int c = 0; c < req->norm_channels; c++) {
            d->mean[0][c] = req->mean[c];
            d->stdv[0][c] = req->std[c];
        }
        d->norm_given = 1;
    }
    make_luts(d);
    *out = d;
    return MD_OK;
fail:
    md_data_free(d);
    return st;
}

/* ------------------------------------------------------------------------ */
/* the run config's "data" section                                           */

static md_status config_floats(const cJSON *obj, const char *key, const char *path, float *v, int *n)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!a) return MD_OK;
    int cnt = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : 0;
    if (cnt != 1 && cnt != 3) return md_errf(MD_ERR_CONFIG, "%s.%s: must be an array of 1 or 3 numbers", path, key);
    for (int i = 0; i < cnt; i++) {
        const cJSON *x = cJSON_GetArrayItem(a, i);
        if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble))
            return md_errf(MD_ERR_CONFIG, "%s.%s[%d]: must be a number", path, key, i);
        v[i] = (float)x->valuedouble;
    }
    *n = cnt;
    return MD_OK;
}

md_status md_data_config(md_options *o, struct md_data_request *req)
{
    if (!o->config[0]) return MD_OK;
    cJSON *root = NULL;
    MD_TRY(md_json_load_file(o->config, &root));
    md_status st = MD_OK;
    char path[MD_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s: data", o->config);
    const cJSON *d = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "data") : NULL;
    if (!d) goto done;
    if (!cJSON_IsObject(d)) { st = md_errf(MD_ERR_CONFIG, "%s: must be an object", path); goto done; }
    static const char *const keys[] = {"dataset", "dir", "val_split", "image_size", "max_samples", "coarse_labels",
                                       "augment", "normalize", NULL};
    if ((st = md_json_only_keys(d, path, keys)) != MD_OK) goto done;
    const char *str = NULL;
    if ((st = md_json_str(d, "dataset", path, 0, &str)) != MD_OK) goto done;
    if (str && !md_options_given(o, "dataset")) {
        static const char *const names[] = {"auto", "fashion-mnist", "mnist", "cifar10", "cifar100", "jpeg",
                                            "synthetic", NULL};
        int ok = 0;
        for (int i = 0; names[i]; i++) ok |= strcmp(names[i], str) == 0;
        if (!ok) {
            st = md_errf(MD_ERR_CONFIG, "%s.dataset: '%s' is not one of auto, fashion-mnist, mnist, cifar10, cifar100, "
                         "jpeg, synthetic", path, str);
            goto done;
        }
        snprintf(o->dataset, sizeof o->dataset, "%s", str);
    }
    str = NULL;
    if ((st = md_json_str(d, "dir", path, 0, &str)) != MD_OK) goto done;
    if (str && !md_options_given(o, "data-dir")) snprintf(o->data_dir, sizeof o->data_dir, "%s", str);
    double vs = o->val_split;
    if ((st = md_json_num(d, "val_split", path, 0, 0.0, 0.9, &vs)) != MD_OK) goto done;
    if (!md_options_given(o, "val-split")) o->val_split = vs;
    int iv = o->image_size;
    if ((st = md_json_int(d, "image_size", path, 0, 8, 4096, &iv)) != MD_OK) goto done;
    if (!md_options_given(o, "image-size")) o->image_size = iv;
    iv = o->max_samples;
    if ((st = md_json_int(d, "max_samples", path, 0, 1, INT32_MAX, &iv)) != MD_OK) goto done;
    if (!md_options_given(o, "max-samples")) o->max_samples = iv;
    iv = o->coarse_labels;
    if ((st = md_json_bool(d, "coarse_labels", path, 0, &iv)) != MD_OK) goto done;
    if (!md_options_given(o, "coarse-labels")) o->coarse_labels = iv;

    char sub[MD_PATH_MAX + 32];
    const cJSON *aug = cJSON_GetObjectItemCaseSensitive(d, "augment");
    if (aug) {
        snprintf(sub, sizeof sub, "%s.augment", path);
        static const char *const akeys[] = {"crop_padding", "flip", NULL};
        if (!cJSON_IsObject(aug)) { st = md_errf(MD_ERR_CONFIG, "%s: must be an object", sub); goto done; }
        if ((st = md_json_only_keys(aug, sub, akeys)) != MD_OK) goto done;
        int pad = -2, flip = -2;
        if ((st = md_json_int(aug, "crop_padding", sub, 0, 0, 64, &pad)) != MD_OK) goto done;
        if ((st = md_json_bool(aug, "flip", sub, 0, &flip)) != MD_OK) goto done;
        if (pad != -2) req->crop_padding = pad > 0 ? pad : -1;
        if (flip != -2) req->flip = flip ? 1 : -1;
    }
    const cJSON *nrm = cJSON_GetObjectItemCaseSensitive(d, "normalize");
    if (nrm) {
        snprintf(sub, sizeof sub, "%s.normalize", path);
        static const char *const nkeys[] = {"mean", "std", NULL};
        if (!cJSON_IsObject(nrm)) { st = md_errf(MD_ERR_CONFIG, "%s: must be an object", sub); goto done; }
        if ((st = md_json_only_keys(nrm, sub, nkeys)) != MD_OK) goto done;
        int nm = 0, ns = 0;
        if ((st = config_floats(nrm, "mean", sub, req->mean, &nm)) != MD_OK) goto done;
        if ((st = config_floats(nrm, "std", sub, req->std, &ns)) != MD_OK) goto done;
        if (nm != ns || nm == 0) {
            st = md_errf(MD_ERR_CONFIG, "%s: needs \"mean\" and \"std\" with the same number of values", sub);
            goto done;
        }
        for (int i = 0; i < ns; i++)
            if (!(req->std[i] > 0.0f)) {
                st = md_errf(MD_ERR_CONFIG, "%s.std[%d]: must be positive", sub, i);
                goto done;
            }
        req->norm_channels = nm;
    }
done:
    cJSON_Delete(root);
    return st;
}

md_status md_data_peek(const md_options *o, struct md_data_peek *out)
{
    memset(out, 0, sizeof *out);
    enum kind k;
    char dir[MD_PATH_MAX], p[MD_PATH_MAX * 2];
    MD_TRY(resolve(o, &k, out->name, sizeof out->name, dir, sizeof dir));
    switch (k) {
    case K_IDX: {
        if (!find_idx(dir, "train-images", "idx3", p, sizeof p))
            return md_errf(MD_ERR_DATA, "%s: no train-images-idx3-ubyte[.gz] here", dir);
        gzFile f = gzopen(p, "rb");
        uint8_t hdr[16];
        int r = f ? gzread(f, hdr, sizeof hdr) : -1;
        if (f) gzclose(f);
        if (r != (int)sizeof hdr) return md_errf(MD_ERR_DATA, "%s: cannot read the IDX header", p);
        uint32_t f32[4];
        for (int i = 0; i < 4; i++)
            f32[i] = ((uint32_t)hdr[4 * i] << 24) | ((uint32_t)hdr[4 * i + 1] << 16) | ((uint32_t)hdr[4 * i + 2] << 8) |
                     hdr[4 * i + 3];
        if (f32[0] != 0x803) return md_errf(MD_ERR_DATA, "%s: wrong IDX magic number 0x%08x (expected 0x00000803)", p, f32[0]);
        if (f32[2] == 0 || f32[2] > 4096 || f32[3] == 0 || f32[3] > 4096)
            return md_errf(MD_ERR_DATA, "%s: implausible image size %ux%u in the IDX header", p, f32[2], f32[3]);
        out->num_classes = 10;
        out->c = 1;
        out->h = (int)f32[2];
        out->w = (int)f32[3];
        break;
    }
    case K_CIFAR10:
    case K_CIFAR100:
        out->num_classes = k == K_CIFAR10 ? 10 : o->coarse_labels ? 20 : 100;
        out->c = 3;
        out->h = out->w = 32;
        break;
    case K_JPEG: {
        join(p, sizeof p, dir, "train");
        char **cls = NULL;
        long long n = 0;
        MD_TRY(list_dir(is_dir(p) ? p : dir, 1, &cls, &n));
        free_strs(cls, n);
        if (n == 0) return md_errf(MD_ERR_DATA, "%s: no class folders", is_dir(p) ? p : dir);
        out->num_classes = (int)n;
        out->c = 3;
        out->h = out->w = o->image_size;
        break;
    }
    case K_SYNTH:
        out->num_classes = 10;
        out->c = 3;
        out->h = out->w = o->image_size > 0 ? o->image_size : 32;
        break;
    }
    return MD_OK;
}

void md_data_free(struct md_data *d)
{
    if (!d) return;
    md_free(d->pixels);
    md_free(d->labels);
    free_strs(d->paths, d->n_all);
    free_strs(d->class_names, d->num_classes);
    for (int s = 0; s < MD_SPLIT_COUNT; s++) md_free(d->split[s]);
    md_free(d->class_counts);
    md_free(d->cache);
    md_free(d->cache_state);
    pthread_mutex_destroy(&d->mu);
    md_free(d);
}

/* ------------------------------------------------------------------------ */
/* queries                                                                    */

const char *md_data_name(const struct md_data *d) { return d->name; }
const char *md_data_format(const struct md_data *d) { return d->format; }
const char *md_data_source(const struct md_data *d) { return d->source; }
const char *md_data_split_name(md_split s)
{
    static const char *const n[MD_SPLIT_COUNT] = {"train", "val", "test"};
    return s >= 0 && s < MD_SPLIT_COUNT ? n[s] : "?";
}
const char *md_data_split_origin(const struct md_data *d, md_split s) { return d->split_origin[s]; }
long long md_data_count(const struct md_data *d, md_split s) { return d->split_n[s]; }
int md_data_num_classes(const struct md_data *d) { return d->num_classes; }
const char *md_data_class_name(const struct md_data *d, int k)
{
    return k >= 0 && k < d->num_classes ? d->class_names[k] : "?";
}
long long md_data_class_count(const struct md_data *d, md_split s, int k)
{
    return k >= 0 && k < d->num_classes ? d->class_counts[(size_t)s * d->num_classes + k] : 0;
}
void md_data_source_shape(const struct md_data *d, int *c, int *h, int *w)
{
    *c = d->src_c;
    *h = d->src_h;
    *w = d->src_w;
}
int md_data_num_inputs(const struct md_data *d) { return d->num_inputs; }
const struct md_data_input *md_data_input(const struct md_data *d, int i) { return &d->inputs[i]; }
md_layout md_data_layout(const struct md_data *d) { return d->layout; }
size_t md_data_input_elems(const struct md_data *d, int i)
{
    return (size_t)d->inputs[i].c * d->inputs[i].h * d->inputs[i].w;
}
const float *md_data_mean(const struct md_data *d, int i) { return d->mean[i]; }
const float *md_data_std(const struct md_data *d, int i) { return d->stdv[i]; }
int md_data_norm_known(const struct md_data *d) { return d->norm_known; }
int md_data_norm_given(const struct md_data *d) { return d->norm_given; }
int md_data_aug_pad(const struct md_data *d) { return d->aug_pad; }
int md_data_aug_flip(const struct md_data *d) { return d->aug_flip; }
long long md_data_cache_bytes(const struct md_data *d)
{
    return __atomic_load_n(&d->cache_filled, __ATOMIC_RELAXED) * (long long)d->src_bytes;
}
long long md_data_cache_estimate(const struct md_data *d) { return d->cache_estimate; }
long long md_data_resident_bytes(const struct md_data *d) { return d->resident_bytes; }
long long md_data_skipped(const struct md_data *d) { return __atomic_load_n(&d->skipped, __ATOMIC_RELAXED); }
const char *md_data_first_bad(const struct md_data *d) { return d->first_bad; }
int md_data_bad_listed(struct md_data *d, int i, char *path, size_t pn, char *why, size_t wn)
{
    pthread_mutex_lock(&d->mu);
    int n = d->nbad_listed;
    if (i >= 0 && i < n) {
        snprintf(path, pn, "%s", d->bad_path[i]);
        snprintf(why, wn, "%s", d->bad_msg[i]);
    }
    pthread_mutex_unlock(&d->mu);
    return n;
}
