/* format_cifar.c - CIFAR-10 and CIFAR-100 in the official binary layout
 * (data_batch_1..5.bin + test_batch.bin, or train.bin + test.bin), in the
 * given folder or the one the tarballs unpack to. The pixels are held in
 * memory; class names come from the text files beside the binaries. */
#include <stdio.h>
#include <string.h>

#include "core/log.h"
#include "core/mem.h"
#include "data/format.h"

static const char *const cifar10_names[10] = {"airplane", "automobile", "bird", "cat", "deer",
                                              "dog", "frog", "horse", "ship", "truck"};

struct cifar_state {
    uint8_t *pixels; /* (count, 3, 32, 32) */
};

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

/* The reason is the message a named --dataset gets when its files are not
 * there (the other CIFAR's files, or none). */
static md_status cifar_detect(const char *dir, const char *want, char *found, size_t n)
{
    char t[MD_PATH_MAX * 2];
    for (int c100 = 1; c100 >= 0; c100--) {
        if (want && (strcmp(want, "cifar100") == 0) != c100) continue;
        if (cifar_dir(dir, c100, t, sizeof t)) {
            snprintf(found, n, "%s", c100 ? "cifar100" : "cifar10");
            return MD_OK;
        }
    }
    int c100 = want && strcmp(want, "cifar100") == 0;
    if (want && cifar_dir(dir, !c100, t, sizeof t))
        return md_errf(MD_ERR_DATA, "%s: holds %s files (%s), not %s: use --dataset %s", dir,
                       c100 ? "CIFAR-10" : "CIFAR-100", c100 ? "data_batch_1.bin" : "train.bin",
                       c100 ? "CIFAR-100" : "CIFAR-10", c100 ? "cifar10" : "cifar100");
    if (want)
        return md_errf(MD_ERR_DATA, "%s: no %s here (nor in %s/)", dir, c100 ? "train.bin" : "data_batch_1.bin",
                       c100 ? "cifar-100-binary" : "cifar-10-batches-bin");
    return md_errf(MD_ERR_DATA, "%s: no data_batch_1.bin or train.bin here (nor in the tarballs' folders)", dir);
}

static md_status cifar_default_dirs(const char *dataset, char (*dirs)[MD_PATH_MAX], int max, int *n)
{
    const char *c10[] = {"data/cifar-10", "data/cifar10", NULL};
    const char *c100[] = {"data/cifar-100", "data/cifar100", NULL};
    const char *const *cand = strcmp(dataset, "cifar100") == 0 ? c100 : c10;
    *n = 0;
    for (int i = 0; cand[i] && *n < max; i++) snprintf(dirs[(*n)++], MD_PATH_MAX, "%s", cand[i]);
    return MD_OK;
}

static md_status cifar_peek(const struct md_format_args *a, struct md_data_peek *out)
{
    out->num_classes = strcmp(a->dataset, "cifar10") == 0 ? 10 : a->coarse_labels ? 20 : 100;
    out->c = 3;
    out->h = out->w = 32;
    return MD_OK;
}

static md_status load_file(struct cifar_state *s, struct md_format_desc *d, const char *path, int cifar100,
                           int coarse)
{
    uint8_t *b = NULL;
    size_t len = 0;
    long long count = 0;
    md_status st = md_idx_read_file(path, MD_DATA_MAX_FILE_BYTES, &b, &len);
    if (st == MD_OK) st = md_cifar_check(b, len, path, cifar100, &count);
    if (st == MD_OK) {
        long long n = d->count + count;
        uint8_t *px = md_realloc(s->pixels, (size_t)n * MD_CIFAR_PIXELS);
        if (px) s->pixels = px;
        int32_t *lv = px ? md_realloc(d->labels, (size_t)n * sizeof *lv) : NULL;
        if (lv) d->labels = lv;
        else st = MD_ERR_OOM;
    }
    if (st == MD_OK) {
        md_cifar_extract(b, count, cifar100, coarse, s->pixels + (size_t)d->count * MD_CIFAR_PIXELS,
                         d->labels + d->count);
        d->count += count;
    }
    md_free(b);
    return st;
}

/* Class names from the text files that come with the binaries, one a line. */
static md_status class_names(struct md_format_desc *d, const char *dir, const char *file, int cifar100)
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
        if (!nm && !cifar100) nm = cifar10_names[k];
        if (!nm) { snprintf(fallback, sizeof fallback, "class_%d", k); nm = fallback; }
        d->class_names[k] = md_strdup(nm);
        if (!d->class_names[k]) { if (f) fclose(f); return MD_ERR_OOM; }
    }
    if (f) fclose(f);
    return MD_OK;
}

static void cifar_free(void *state)
{
    struct cifar_state *s = state;
    if (!s) return;
    md_free(s->pixels);
    md_free(s);
}

static md_status cifar_open(const struct md_format_args *a, struct md_format_desc *d, void **state)
{
    *state = NULL;
    int cifar100 = strcmp(a->dataset, "cifar100") == 0, coarse = cifar100 && a->coarse_labels;
    char dir[MD_PATH_MAX * 2], p[MD_PATH_MAX * 2], found[MD_DATA_NAME_MAX];
    snprintf(d->format, sizeof d->format, "cifar-binary");
    snprintf(d->source, sizeof d->source, "%s", a->dir);
    d->c = 3;
    d->h = d->w = 32;
    MD_TRY(cifar_detect(a->dir, a->dataset, found, sizeof found));
    cifar_dir(a->dir, cifar100, dir, sizeof dir);
    snprintf(d->source, sizeof d->source, "%s", dir);
    struct cifar_state *s = md_calloc(1, sizeof *s);
    if (!s) return MD_ERR_OOM;
    md_status st = MD_OK;
    if (cifar100) {
        md_files_join(p, sizeof p, dir, "train.bin");
        if ((st = load_file(s, d, p, 1, coarse)) != MD_OK) goto fail;
    } else {
        for (int i = 1; i <= 5; i++) {
            char f[32];
            snprintf(f, sizeof f, "data_batch_%d.bin", i);
            md_files_join(p, sizeof p, dir, f);
            if (i > 1 && !md_files_is_file(p)) {
                md_warn("%s: missing; training on data_batch_1..%d only", p, i - 1);
                break;
            }
            if ((st = load_file(s, d, p, 0, 0)) != MD_OK) goto fail;
        }
    }
    d->ranges.start[MD_SPLIT_TRAIN] = 0;
    d->ranges.end[MD_SPLIT_TRAIN] = d->count;
    md_files_join(p, sizeof p, dir, cifar100 ? "test.bin" : "test_batch.bin");
    if (md_files_is_file(p) && (st = load_file(s, d, p, cifar100, coarse)) != MD_OK) goto fail;
    d->ranges.start[MD_SPLIT_TEST] = d->ranges.end[MD_SPLIT_TRAIN];
    d->ranges.end[MD_SPLIT_TEST] = d->count;
    d->num_classes = cifar100 ? (coarse ? 20 : 100) : 10;
    st = class_names(d, dir, cifar100 ? (coarse ? "coarse_label_names.txt" : "fine_label_names.txt")
                                      : "batches.meta.txt", cifar100);
    if (st != MD_OK) goto fail;
    d->resident_bytes = (long long)((size_t)d->count * MD_CIFAR_PIXELS);
    /* Published values of the full training sets. */
    static const float m10[3] = {0.4914f, 0.4822f, 0.4465f}, s10[3] = {0.2470f, 0.2435f, 0.2616f};
    static const float m100[3] = {0.5071f, 0.4865f, 0.4409f}, s100[3] = {0.2673f, 0.2564f, 0.2762f};
    d->known_channels = 3;
    memcpy(d->known_mean, cifar100 ? m100 : m10, sizeof d->known_mean);
    memcpy(d->known_std, cifar100 ? s100 : s10, sizeof d->known_std);
    *state = s;
    return MD_OK;
fail:
    cifar_free(s);
    return st;
}

static md_status cifar_read(const void *state, void *scratch, long long i, uint8_t *buf, const uint8_t **px)
{
    (void)scratch;
    (void)buf;
    const struct cifar_state *s = state;
    *px = s->pixels + (size_t)i * MD_CIFAR_PIXELS;
    return MD_OK;
}

const struct md_data_format md_format_cifar = {
    .name = "cifar",
    .datasets = (const char *const[]){"cifar10", "cifar100", NULL},
    .expects = "CIFAR binaries (data_batch_1.bin or train.bin)",
    .detect = cifar_detect,
    .default_dirs = cifar_default_dirs,
    .peek = cifar_peek,
    .open = cifar_open,
    .read = cifar_read,
    .free = cifar_free,
};
