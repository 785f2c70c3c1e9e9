/* data_impl.h - internals shared by the files of src/data (not for other areas).
 *
 * Images inside src/data are uint8, planar (C, H, W), values 0..255. The
 * parsers work on memory buffers, so the fuzz targets (test/fuzz) call the
 * same code the loader does.
 */
#ifndef MD_DATA_IMPL_H
#define MD_DATA_IMPL_H

#include <stddef.h>
#include <stdint.h>

#include <pthread.h>

#include "data/data.h"

/* ---- files (idx.c) ---- */

/* Reads a whole file, gunzipping it when it is gzip (zlib reads plain files
 * as they are). Refuses more than max_bytes after decompression. *buf is
 * md_malloc'd and owned by the caller. Errors name the file. */
md_status md_idx_read_file(const char *path, size_t max_bytes, uint8_t **buf, size_t *len);

/* ---- IDX (idx.c) ---- */

/* A parsed IDX file: borrowed view into the caller's buffer. */
typedef struct md_idx {
    int ndims;          /* 1 (labels) or 3 (images) */
    uint32_t dims[3];   /* (N) or (N, H, W) */
    const uint8_t *data; /* N x H x W bytes after the header */
} md_idx;

/* Checks magic (unsigned bytes, `want_ndims` dimensions), sane dimensions and
 * that the header's counts match the buffer length exactly. `name` is used in
 * messages. */
md_status md_idx_parse(const uint8_t *buf, size_t len, const char *name, int want_ndims, md_idx *out);

/* ---- CIFAR binary (cifar.c) ---- */

#define MD_CIFAR_PIXELS 3072 /* 3 x 32 x 32, planar R, G, B */

/* Validates a CIFAR-10 (1 label byte + 3072) or CIFAR-100 (coarse, fine +
 * 3072) file: whole records, label ranges; recognises the other layout and
 * says so. *count receives the records. */
md_status md_cifar_check(const uint8_t *buf, size_t len, const char *name, int cifar100, long long *count);
/* Copies `count` records: pixels (count, 3, 32, 32) and labels (count);
 * CIFAR-100 takes fine labels unless `coarse`. */
void md_cifar_extract(const uint8_t *buf, long long count, int cifar100, int coarse, uint8_t *pixels,
                      int32_t *labels);

/* ---- JPEG (jpeg.c), through TurboJPEG ---- */

typedef struct md_jpeg md_jpeg; /* a decoder; one per thread */
md_status md_jpeg_new(md_jpeg **out);
void md_jpeg_free(md_jpeg *j);
/* Reads the header: size and whether the image is colour. Refuses images over
 * MD_JPEG_MAX_PIXELS and anything that is not a JPEG, naming `name`. */
md_status md_jpeg_header(md_jpeg *j, const uint8_t *buf, size_t len, const char *name, int *w, int *h);
/* Decodes the whole image at the smallest DCT scale (cheap: no full-size
 * transform, but every coefficient is read), so a file the loader could not
 * decode fails here, naming `name`. */
md_status md_jpeg_verify(md_jpeg *j, const uint8_t *buf, size_t len, const char *name);
/* Decodes into dst (c, oh, ow) planar, c = 1 (gray = luma) or 3 (RGB);
 * CMYK/YCCK JPEGs are converted (inverted CMYK, R = C * K / 255). Uses
 * TurboJPEG's DCT scaling to the smallest size not below (oh, ow), then
 * bilinear resizing. Corrupt data (also what libjpeg calls a warning) fails. */
md_status md_jpeg_decode(md_jpeg *j, const uint8_t *buf, size_t len, const char *name, int c, int oh, int ow,
                         uint8_t *dst);

/* ---- images (image.c) ---- */

/* Bilinear resize of planar uint8 (c, h, w) -> (c, oh, ow), half-pixel centres
 * (as OpenCV INTER_LINEAR and PyTorch align_corners=False), rounded. */
void md_image_resize_u8(const uint8_t *src, int c, int h, int w, uint8_t *dst, int oh, int ow);
/* Same for float planes. */
void md_image_resize_f32(const float *src, int c, int h, int w, float *dst, int oh, int ow);
/* Bilinear resize of interleaved (h, w, c) into planar (c, oh, ow). */
void md_image_resize_hwc_u8(const uint8_t *src, int c, int h, int w, uint8_t *dst, int oh, int ow);
/* Interleaved (h, w, c) -> planar (c, h, w). */
void md_image_hwc_to_chw(const uint8_t *src, int c, int h, int w, uint8_t *dst);

/* ---- synthetic (synth.c) ---- */

/* Sample `index` of the synthetic dataset: a class-conditional pattern
 * (orientation, frequency and colour per class) with a random phase and
 * noise, so a model can learn it and cannot memorise it trivially.
 * dst (c, h, w); the label is index % num_classes. Pure function of its
 * arguments. */
void md_synth_sample(uint64_t seed, long long index, int num_classes, int c, int h, int w, uint8_t *dst,
                     int32_t *label);

/* ---- files (files.c) ---- */

#define MD_DATA_MAX_FILE_BYTES ((size_t)1 << 31) /* no dataset file of ours is larger */

int md_files_is_dir(const char *p);
int md_files_is_file(const char *p);
int md_files_exists(const char *p);
void md_files_join(char *out, size_t n, const char *a, const char *b); /* "a/b", truncated to n */
int md_files_cmp_name(const void *a, const void *b);                   /* qsort/bsearch on char * */
int md_files_is_jpeg(const char *name);                                /* ends in .jpg/.jpeg, any case */
void md_files_free_names(char **v, long long n);                       /* NULL ok */
/* Sorted names of the entries of `dir` that are directories (want_dirs) or
 * JPEG files. *names is owned by the caller (md_files_free_names). */
md_status md_files_list(const char *dir, int want_dirs, char ***names, long long *count);
/* Reads the whole file into *buf (grown with md_realloc as needed, capacity
 * *cap; owned by the caller). Files over MD_DATA_MAX_FILE_BYTES are refused.
 * Errors are MD_ERR_DATA naming the file. */
md_status md_files_read(const char *path, uint8_t **buf, size_t *cap, size_t *len);

/* ---- the dataset (data.c) ---- */

/* Where each split lies in the dataset's samples: [start, end). An empty val
 * range is carved out of train (val_split, seeded). */
struct md_split_ranges { long long start[MD_SPLIT_COUNT], end[MD_SPLIT_COUNT]; };

struct md_data_format;

struct md_data {
    const struct md_data_format *fmt; /* format.h */
    void *fstate;            /* the format's own (fmt->open, fmt->free) */
    char name[32];
    char format[16];
    char source[MD_PATH_MAX];
    int src_c, src_h, src_w; /* stored sample (u8, planar) */
    size_t src_bytes;
    int num_classes;
    char **class_names;      /* (num_classes) */
    long long n_all;         /* samples of every split together */
    int32_t *labels;         /* (n_all) */
    int64_t *split[MD_SPLIT_COUNT];
    long long split_n[MD_SPLIT_COUNT];
    struct md_split_ranges ranges; /* the format's */
    char split_origin[MD_SPLIT_COUNT][128];
    long long *class_counts; /* (MD_SPLIT_COUNT, num_classes) */
    /* what is delivered */
    int num_inputs;
    struct md_data_input inputs[MD_DATA_MAX_INPUTS];
    md_layout layout;
    float mean[MD_DATA_MAX_INPUTS][3], stdv[MD_DATA_MAX_INPUTS][3];
    int norm_known;
    int norm_given;          /* mean/std from the config */
    int known_channels;      /* the format's published mean/std (0: none) */
    float known_mean[3], known_std[3];
    int norm_samples;        /* training samples for a computed mean/std */
    int direct[MD_DATA_MAX_INPUTS];        /* input i is the stored pixels, unconverted */
    float lut[MD_DATA_MAX_INPUTS][3][256]; /* normalised value of each byte */
    int aug_pad, aug_flip;
    int no_flip;             /* the format's: mirror images are other classes */
    /* time series (task MD_TASK_REGRESS) */
    md_task task;
    struct md_data_series series;
    const double *target_mean, *target_std; /* (series.n_out), borrowed from fstate or tmean/tstd */
    /* images with float targets (images-csv regression) */
    int image_values;        /* samples are images, targets floats */
    float *values;           /* (n_all, series.n_out) raw targets */
    char **target_names;     /* (series.n_out) or NULL */
    double *tmean, *tstd;    /* (series.n_out) the training split's */
    int n_side;
    float *side;             /* (n_all, n_side) raw */
    char **side_names;       /* (n_side) */
    double *smean, *sstd;    /* (n_side) the training split's */
    int halves;              /* stored = left half | right half */
    int view_x0[MD_DATA_MAX_INPUTS], view_w[MD_DATA_MAX_INPUTS]; /* columns of the stored image input i takes */
    int no_augment;
    int folds, fold;
    /* decoded-image cache (formats that read on demand) */
    uint8_t *cache;          /* (n_all, src_c, src_h, src_w) */
    int *cache_state;        /* (n_all): 0 empty, 1 being filled, 2 ready */
    long long cache_filled;  /* samples ready (atomic) */
    long long cache_estimate;
    long long resident_bytes; /* held by the format (read returns pointers into it) */
    int keep_decoded;        /* the format's: cache without --cache-images */
    /* bad samples */
    int skip_bad;
    long long skipped;       /* atomic */
    char first_bad[512];
    int nbad_listed;         /* entries of bad_path/bad_msg */
    char bad_path[MD_DATA_BAD_LISTED][MD_PATH_MAX];
    char bad_msg[MD_DATA_BAD_LISTED][512];
    pthread_mutex_t mu;      /* first_bad, the list */
};

/* Per-thread working memory for fetching and preparing samples. */
typedef struct md_data_scratch md_data_scratch;
struct md_data_scratch {
    void *fmt;      /* the format's (fmt->scratch_new), or NULL */
    void (*fmt_free)(void *);
    uint8_t *u8;    /* (src_c, src_h, src_w) */
    float *conv;    /* (max c_i, src_h, src_w) */
    float *base;    /* (max c_i, max h_i, max w_i) */
    uint8_t *view;  /* (src_c, src_h, src_w): a half of the stored image */
};

/* ---- dataset internals used by the loader (data.c) ---- */

md_status md_data_scratch_new(const struct md_data *d, md_data_scratch **out);
void md_data_scratch_free(md_data_scratch *s);

/* Augmentation of one sample: crop offset in the padded image and flip. */
struct md_aug {
    int dy, dx;  /* in [0, 2*pad]; pad = no shift */
    int flip;
};
/* The sample's augmentation: a pure function of (seed, epoch, position). */
struct md_aug md_data_aug_draw(const struct md_data *d, uint64_t seed, int epoch, long long position);

/* Index within the whole dataset of sample `i` of split `s`. */
long long md_data_split_index(const struct md_data *d, md_split s, long long i);

/* Prepares global sample `gi` into slot `j` of a batch: input i's sample
 * lands at inputs[i] + j * md_data_input_elems(d, i), in the dataset's
 * layout; a regression sample's targets land at targets + j *
 * md_data_target_elems(d) (label 0). aug may be NULL. Returns MD_ERR_DATA naming the file when the sample cannot be read;
 * *bad is set when that happened and --on-bad-sample skip says to go on
 * (the status is then MD_OK and nothing was written). */
md_status md_data_prepare(struct md_data *d, md_data_scratch *s, long long gi, const struct md_aug *aug,
                          float *const *inputs, int j, int32_t *label, float *targets, int *bad);

/* Counts a bad sample that --on-bad-sample skip drops, keeps the first
 * MD_DATA_BAD_LISTED for the report and warns once. Thread-safe. */
void md_data_note_bad(struct md_data *d, const char *path, const char *msg);

/* ---- splits (splits.c) ---- */

/* Fills d->split, split_n, split_origin and class_counts from the ranges
 * (d->labels and d->num_classes set). folds > 1: k-fold instead of
 * val_split: the training samples (and the format's own validation range)
 * in `folds` parts, part `fold` (-1: 0) validation, the others training;
 * parts are contiguous runs of time-series windows, else a seeded shuffle
 * (docs/folds.md). */
md_status md_splits_make(struct md_data *d, double val_split, long long max_samples, uint64_t seed,
                         const struct md_split_ranges *r, int folds, int fold);

/* ---- normalisation (normalise.c) ---- */

void md_normalise_known(struct md_data *d);        /* published values, where they apply: d->norm_known */
md_status md_normalise_compute(struct md_data *d); /* from up to d->norm_samples training samples */
void md_normalise_luts(struct md_data *d);         /* d->direct, d->lut from the final mean/std */

/* ---- one sample (prepare.c) ---- */

/* The stored pixels of sample gi, (src_c, src_h, src_w) u8: resident, cached
 * or read by the format into s->u8 (or the cache slot it fills). */
md_status md_prepare_fetch(struct md_data *d, md_data_scratch *s, long long gi, const uint8_t **px);
/* Input i of a sample at the input's size, channels converted, in [0, 1]:
 * out (c_i, h_i, w_i). */
void md_prepare_base_image(const struct md_data *d, md_data_scratch *s, const uint8_t *px, int i, float *out);

#endif
