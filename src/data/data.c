/* data.c - opening a dataset: choosing the format and directory, loading
 * and validating its files, the delivered inputs, augmentation defaults, the
 * decoded-image cache, bad-sample bookkeeping, and the queries of data.h.
 * Splits are in splits.c, normalisation in normalise.c, per-sample
 * preparation in prepare.c, the config's "data" section in data_config.c. */
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

#define SYNTH_TRAIN 5000
#define SYNTH_TEST 1000

static const char *const fashion_names[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                              "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};
static const char *const cifar10_names[10] = {"airplane", "automobile", "bird", "cat", "deer",
                                              "dog", "frog", "horse", "ship", "truck"};

/* ------------------------------------------------------------------------ */
/* finding the files of each format                                           */

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
            md_files_join(out, n, dir, name);
            if (md_files_is_file(out)) return 1;
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
    md_files_join(p, sizeof p, dir, file);
    if (md_files_is_file(p)) { snprintf(out, n, "%s", dir); return 1; }
    char d2[MD_PATH_MAX * 2];
    md_files_join(d2, sizeof d2, dir, sub);
    md_files_join(p, sizeof p, d2, file);
    if (md_files_is_file(p)) { snprintf(out, n, "%s", d2); return 1; }
    return 0;
}

static int dir_has_jpeg_classes(const char *dir)
{
    char **subs = NULL;
    long long ns = 0;
    if (md_files_list(dir, 1, &subs, &ns) != MD_OK) { md_err_clear(); return 0; }
    int found = 0;
    char p[MD_PATH_MAX * 2];
    for (long long i = 0; i < ns && !found; i++) {
        if (strcmp(subs[i], "train") == 0) { found = 1; break; }
        md_files_join(p, sizeof p, dir, subs[i]);
        char **files = NULL;
        long long nf = 0;
        if (md_files_list(p, 0, &files, &nf) == MD_OK && nf > 0) found = 1;
        md_err_clear();
        md_files_free_names(files, nf);
    }
    md_files_free_names(subs, ns);
    return found;
}

/* ------------------------------------------------------------------------ */
/* choosing the dataset and its directory                                    */

static md_status detect(const char *dir, enum md_data_kind *k, char *name, size_t n)
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

static md_status resolve(const md_options *o, enum md_data_kind *k, char *name, size_t nn, char *dir, size_t dn)
{
    const char *ds = o->dataset;
    if (strcmp(ds, "synthetic") == 0) {
        *k = K_SYNTH;
        snprintf(name, nn, "synthetic");
        dir[0] = '\0';
        return MD_OK;
    }
    if (o->data_dir[0]) {
        if (!md_files_is_dir(o->data_dir))
            return md_errf(MD_ERR_DATA, "--data-dir %s: %s", o->data_dir,
                           md_files_exists(o->data_dir) ? "not a directory" : "no such directory");
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
        md_files_join(ip, sizeof ip, dir, istem);
        return md_errf(MD_ERR_DATA, "%s-idx3-ubyte[.gz]: missing (the labels file is there)", ip);
    }
    if (!hl) {
        md_files_join(lp, sizeof lp, dir, lstem);
        return md_errf(MD_ERR_DATA, "%s-idx1-ubyte[.gz]: missing (the images file is there)", lp);
    }
    md_status st = MD_OK;
    uint8_t *ib = NULL, *lb = NULL;
    size_t il = 0, ll = 0;
    md_idx im, lab;
    if ((st = md_idx_read_file(ip, MD_DATA_MAX_FILE_BYTES, &ib, &il)) != MD_OK) goto fail;
    if ((st = md_idx_parse(ib, il, ip, 3, &im)) != MD_OK) goto fail;
    if ((st = md_idx_read_file(lp, MD_DATA_MAX_FILE_BYTES, &lb, &ll)) != MD_OK) goto fail;
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

static md_status load_idx(struct md_data *d, const char *dir, struct md_split_ranges *r)
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
    md_status st = md_idx_read_file(path, MD_DATA_MAX_FILE_BYTES, &b, &len);
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
    md_files_join(p, sizeof p, dir, file);
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

static md_status load_cifar(struct md_data *d, const char *dir0, int cifar100, int coarse, struct md_split_ranges *r)
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
        md_files_join(p, sizeof p, dir, "train.bin");
        MD_TRY(load_cifar_file(d, p, 1, coarse));
    } else {
        for (int i = 1; i <= 5; i++) {
            char f[32];
            snprintf(f, sizeof f, "data_batch_%d.bin", i);
            md_files_join(p, sizeof p, dir, f);
            if (i > 1 && !md_files_is_file(p)) {
                md_warn("%s: missing; training on data_batch_1..%d only", p, i - 1);
                break;
            }
            MD_TRY(load_cifar_file(d, p, 0, 0));
        }
    }
    r->start[MD_SPLIT_TRAIN] = 0;
    r->end[MD_SPLIT_TRAIN] = d->n_all;
    md_files_join(p, sizeof p, dir, cifar100 ? "test.bin" : "test_batch.bin");
    if (md_files_is_file(p)) MD_TRY(load_cifar_file(d, p, cifar100, coarse));
    r->start[MD_SPLIT_TEST] = r->end[MD_SPLIT_TRAIN];
    r->end[MD_SPLIT_TEST] = d->n_all;
    d->num_classes = cifar100 ? (coarse ? 20 : 100) : 10;
    return cifar_names(d, dir, cifar100 ? (coarse ? "coarse_label_names.txt" : "fine_label_names.txt")
                                        : "batches.meta.txt");
}

/* ------------------------------------------------------------------------ */
/* bad samples                                                                */

void md_data_note_bad(struct md_data *d, const char *path, const char *msg)
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
    MD_TRY(md_files_read(path, &s->file, &s->file_cap, &len));
    return md_jpeg_verify(s->jpeg, s->file, len, path);
}

/* Adds root/<class>/ *.jpg for the given classes; a class folder missing under
 * a val/ or test/ root is allowed, an empty one never is. */
static md_status load_jpeg_tree(struct md_data *d, md_data_scratch *s, const char *root, char **classes,
                                int ncls, int must_exist)
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
        md_status st = grow_all(d, nf);
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
                if (!d->skip_bad) { st = cs; break; }
                md_data_note_bad(d, p, md_errmsg());
                md_err_clear();
                continue;
            }
            d->paths[d->n_all] = md_strdup(p);
            if (!d->paths[d->n_all]) { st = MD_ERR_OOM; break; }
            d->labels[d->n_all] = k;
            d->n_all++;
        }
        md_files_free_names(files, nf);
        MD_TRY(st);
    }
    return MD_OK;
}

static md_status load_jpeg(struct md_data *d, const char *dir, struct md_split_ranges *r)
{
    snprintf(d->format, sizeof d->format, "jpeg");
    char troot[MD_PATH_MAX * 2], p[MD_PATH_MAX * 2];
    md_files_join(troot, sizeof troot, dir, "train");
    int split_dirs = md_files_is_dir(troot);
    if (!split_dirs) snprintf(troot, sizeof troot, "%s", dir);
    char **classes = NULL;
    long long ncls = 0;
    md_data_scratch s = {0};
    md_status st = md_files_list(troot, 1, &classes, &ncls);
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
        md_files_join(p, sizeof p, dir, sub[sp]);
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
    md_files_free_names(classes, ncls);
    md_free(s.file);
    md_jpeg_free(s.jpeg);
    return st;
}

/* ------------------------------------------------------------------------ */
/* the delivered inputs                                                       */

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
    struct md_split_ranges r;
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
    if ((st = md_splits_make(d, o->val_split, o->max_samples, o->seed, &r)) != MD_OK) goto fail;
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

    md_normalise_known(d);
    if (!d->norm_known && (st = md_normalise_compute(d)) != MD_OK) goto fail;
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
    md_normalise_luts(d);
    *out = d;
    return MD_OK;
fail:
    md_data_free(d);
    return st;
}

md_status md_data_peek(const md_options *o, struct md_data_peek *out)
{
    memset(out, 0, sizeof *out);
    enum md_data_kind k;
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
        md_files_join(p, sizeof p, dir, "train");
        char **cls = NULL;
        long long n = 0;
        MD_TRY(md_files_list(md_files_is_dir(p) ? p : dir, 1, &cls, &n));
        md_files_free_names(cls, n);
        if (n == 0) return md_errf(MD_ERR_DATA, "%s: no class folders", md_files_is_dir(p) ? p : dir);
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
    md_files_free_names(d->paths, d->n_all);
    md_files_free_names(d->class_names, d->num_classes);
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
