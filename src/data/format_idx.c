/* format_idx.c - Fashion-MNIST and MNIST as IDX files: train-images /
 * train-labels and (optionally) t10k-images / t10k-labels, gzipped or not,
 * with either spelling of the name ("images-idx3" or "images.idx3"). The
 * pixels are held in memory. */
#include <stdio.h>
#include <string.h>
#include <zlib.h>

#include "core/mem.h"
#include "core/platform.h"
#include "data/format.h"

static const char *const fashion_names[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                              "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"};

struct idx_state {
    uint8_t *pixels;    /* (count, 1, h, w) */
    size_t bytes;       /* h * w */
};

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

static md_status idx_detect(const char *dir, const char *want, char *found, size_t n)
{
    char p[MD_PATH_MAX * 2];
    if (!find_idx(dir, "train-images", "idx3", p, sizeof p))
        return md_errf(MD_ERR_DATA, "%s: no train-images-idx3-ubyte[.gz] here", dir);
    snprintf(found, n, "%s", want ? want : strstr(dir, "fashion") ? "fashion-mnist" : "mnist");
    return MD_OK;
}

static md_status idx_default_dirs(const char *dataset, char (*dirs)[MD_PATH_MAX], int max, int *n)
{
    char bundled[MD_PATH_MAX];
    snprintf(bundled, sizeof bundled, "%s/../data/fashion-mnist-sample", md_exe_dir());
    /* With no dataset named, the default run uses the bundled sample (a quick
     * real run); naming fashion-mnist prefers the full set. */
    const char *fm_full[] = {"data/fashion-mnist", "/usr/share/datasets/fashion-mnist", "data/fashion-mnist-sample",
                             bundled, NULL};
    const char *fm_auto[] = {"data/fashion-mnist", "data/fashion-mnist-sample", bundled,
                             "/usr/share/datasets/fashion-mnist", NULL};
    const char *mn[] = {"data/mnist", NULL};
    const char *const *cand = strcmp(dataset, "mnist") == 0 ? mn : strcmp(dataset, "auto") == 0 ? fm_auto : fm_full;
    *n = 0;
    for (int i = 0; cand[i] && *n < max; i++) snprintf(dirs[(*n)++], MD_PATH_MAX, "%s", cand[i]);
    return MD_OK;
}

static md_status idx_peek(const struct md_format_args *a, struct md_data_peek *out)
{
    char p[MD_PATH_MAX * 2];
    if (!find_idx(a->dir, "train-images", "idx3", p, sizeof p))
        return md_errf(MD_ERR_DATA, "%s: no train-images-idx3-ubyte[.gz] here", a->dir);
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
    out->train_samples = f32[1];
    return MD_OK;
}

/* Appends <stem>-images and <stem>-labels; a pair that is not there at all is
 * fine unless `required`. */
static md_status load_pair(struct idx_state *s, struct md_format_desc *d, const char *dir, const char *stem,
                           int required)
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
    if (d->h == 0) {
        d->c = 1;
        d->h = (int)im.dims[1];
        d->w = (int)im.dims[2];
        s->bytes = (size_t)d->h * d->w;
    } else if (d->h != (int)im.dims[1] || d->w != (int)im.dims[2]) {
        st = md_errf(MD_ERR_DATA, "%s: images are %ux%u but the training images are %dx%d", ip, im.dims[1],
                     im.dims[2], d->h, d->w);
        goto fail;
    }
    for (uint32_t i = 0; i < lab.dims[0]; i++) {
        if (lab.data[i] >= 10) {
            st = md_errf(MD_ERR_DATA, "%s: label %u of item %u is outside 0..9", lp, lab.data[i], i);
            goto fail;
        }
    }
    long long n = d->count + im.dims[0];
    uint8_t *px = md_realloc(s->pixels, (size_t)n * s->bytes);
    if (px) s->pixels = px;
    int32_t *lv = px ? md_realloc(d->labels, (size_t)n * sizeof *lv) : NULL;
    if (!lv) { st = MD_ERR_OOM; goto fail; }
    d->labels = lv;
    memcpy(s->pixels + (size_t)d->count * s->bytes, im.data, (size_t)im.dims[0] * s->bytes);
    for (uint32_t i = 0; i < lab.dims[0]; i++) d->labels[d->count + i] = lab.data[i];
    d->count = n;
fail:
    md_free(ib);
    md_free(lb);
    return st;
}

static void idx_free(void *state)
{
    struct idx_state *s = state;
    if (!s) return;
    md_free(s->pixels);
    md_free(s);
}

static md_status idx_open(const struct md_format_args *a, struct md_format_desc *d, void **state)
{
    *state = NULL;
    struct idx_state *s = md_calloc(1, sizeof *s);
    if (!s) return MD_ERR_OOM;
    md_status st = MD_OK;
    char p[MD_PATH_MAX * 2];
    snprintf(d->format, sizeof d->format, "idx");
    snprintf(d->source, sizeof d->source, "%s", a->dir);
    if (find_idx(a->dir, "train-images", "idx3", p, sizeof p) && strlen(p) > 3 && strcmp(p + strlen(p) - 3, ".gz") == 0)
        snprintf(d->format, sizeof d->format, "idx.gz");
    if (!find_idx(a->dir, "train-images", "idx3", p, sizeof p)) {
        st = md_errf(MD_ERR_DATA, "%s: no train-images-idx3-ubyte[.gz] here (expected the four IDX files)", a->dir);
        goto fail;
    }
    if ((st = load_pair(s, d, a->dir, "train", 1)) != MD_OK) goto fail;
    d->ranges.start[MD_SPLIT_TRAIN] = 0;
    d->ranges.end[MD_SPLIT_TRAIN] = d->count;
    if ((st = load_pair(s, d, a->dir, "t10k", 0)) != MD_OK) goto fail;
    d->ranges.start[MD_SPLIT_TEST] = d->ranges.end[MD_SPLIT_TRAIN];
    d->ranges.end[MD_SPLIT_TEST] = d->count;
    d->num_classes = 10;
    d->class_names = md_calloc(10, sizeof(char *));
    if (!d->class_names) { st = MD_ERR_OOM; goto fail; }
    int fashion = strcmp(a->dataset, "fashion-mnist") == 0;
    for (int k = 0; k < 10; k++) {
        char digit[2] = {(char)('0' + k), 0};
        d->class_names[k] = md_strdup(fashion ? fashion_names[k] : digit);
        if (!d->class_names[k]) { st = MD_ERR_OOM; goto fail; }
    }
    d->resident_bytes = (long long)((size_t)d->count * s->bytes);
    /* Published values of the full training sets. */
    d->known_channels = 1;
    d->known_mean[0] = fashion ? 0.2860f : 0.1307f;
    d->known_std[0] = fashion ? 0.3530f : 0.3081f;
    d->no_flip = strcmp(a->dataset, "mnist") == 0; /* mirrored digits are other glyphs */
    *state = s;
    return MD_OK;
fail:
    idx_free(s);
    return st;
}

static md_status idx_read(const void *state, void *scratch, long long i, uint8_t *buf, const uint8_t **px)
{
    (void)scratch;
    (void)buf;
    const struct idx_state *s = state;
    *px = s->pixels + (size_t)i * s->bytes;
    return MD_OK;
}

const struct md_data_format md_format_idx = {
    .name = "idx",
    .datasets = (const char *const[]){"fashion-mnist", "mnist", NULL},
    .expects = "IDX files (train-images-idx3-ubyte[.gz])",
    .detect = idx_detect,
    .default_dirs = idx_default_dirs,
    .peek = idx_peek,
    .open = idx_open,
    .read = idx_read,
    .free = idx_free,
};
