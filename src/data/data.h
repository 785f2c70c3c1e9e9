/* data.h - datasets and the loader.
 *
 * A dataset (struct md_data, opaque) is opened once for what the model needs
 * (an md_data_request: its inputs, their shapes and layout, its classes) and
 * holds three splits: train, val (held out of the training files with
 * --val-split, seeded, or a val/ folder) and test (where the dataset has one).
 * Formats: IDX (Fashion-MNIST, MNIST; gzipped or not), CIFAR-10/100 binary,
 * JPEG class folders (TurboJPEG), synthetic class-conditional patterns.
 *
 * A loader (struct md_loader, opaque) delivers batches of one split: float
 * inputs already converted (channels, size), augmented (train only, when
 * asked) and normalised with the dataset's mean/std, in NCHW or NHWC, plus
 * int32 labels. Worker threads fill a ring of ready batches ahead of the
 * consumer; with 0 workers the batch is made in the caller's thread. The
 * order and the augmentation depend only on (seed, epoch, position), so the
 * same seed gives the same batches whatever the number of workers.
 *
 * Errors a user can cause (missing or corrupt files, a dataset that cannot
 * feed the model, too little RAM for --cache-images) return MD_ERR_DATA /
 * MD_ERR_CONFIG / MD_ERR_OOM with one line naming the file.
 *
 * Threading: one md_data may back several loaders (train and val at once);
 * each loader is used by one consumer thread.
 */
#ifndef MD_DATA_H
#define MD_DATA_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/platform.h"
#include "core/status.h"
#include "core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MD_DATA_MAX_INPUTS 4
#define MD_DATA_NAME_MAX 32
/* JPEG headers claiming more pixels than this are refused before decoding. */
#define MD_JPEG_MAX_PIXELS (100LL * 1000 * 1000)

typedef enum md_split { MD_SPLIT_TRAIN = 0, MD_SPLIT_VAL, MD_SPLIT_TEST, MD_SPLIT_COUNT } md_split;

typedef enum md_input_kind {
    MD_INPUT_IMAGE = 0, /* the image, converted to the requested channel count:
                           1 -> 3 replicates gray, 3 -> 1 takes luma */
    MD_INPUT_LUMA,      /* brightness 0.299R + 0.587G + 0.114B (gray stays gray); c must be 1 */
    MD_INPUT_SERIES,    /* time series: the lookback window, (c 1, h seq_len, w n_in) */
    MD_INPUT_TIME,      /* time series: its time features, (c 1, h seq_len, w n_time) */
    MD_INPUT_LEFT,      /* images-csv --halves: the left half of the wide image */
    MD_INPUT_RIGHT,     /* images-csv --halves: the right half */
    MD_INPUT_SIDE,      /* images-csv --side-cols: k standardised numbers (c*h*w = k) */
} md_input_kind;

/* What a model learns from a dataset. */
typedef enum md_task {
    MD_TASK_CLASSIFY = 0, /* int32 labels (md_batch.labels) */
    MD_TASK_REGRESS,      /* float targets (md_batch.targets) */
} md_task;

/* The windows of a time-series dataset (all 0 for images). Per sample:
 *   input 0 (MD_INPUT_SERIES)  (seq_len, n_in)    standardised, row-major
 *   input 1 (MD_INPUT_TIME)    (seq_len, n_time)  when delivered (n_time > 0)
 *   targets                    (pred_len, n_out)  standardised
 * Output column j is input column out_col + j (M: out_col 0, n_out = n_in;
 * S and MS: the target is the last input column), so the last observed value
 * of output j is input[(seq_len - 1) * n_in + out_col + j] (the losses'
 * forecast origin: md_regress_args.last). */
struct md_data_series {
    int seq_len, n_in, n_time;
    int pred_len, n_out;
    int out_col;
};

/* The time-series options (md_data_opts.series). */
struct md_series_request {
    int seq_len, pred_len;     /* >= 1 */
    char features[4];          /* "M", "S" or "MS" */
    char target[64];           /* "" = the last numeric column */
    double train_frac, test_frac; /* both 0: the file's convention */
};

/* The image-folder + CSV options (md_data_opts.images; format_images_csv.c,
 * docs/image-regression-data.md). Lists are comma-separated column names. */
struct md_images_request {
    char image_col[64];          /* "" = "image", "path" or "filename" */
    char target_cols[256];       /* numeric regression targets; "" = every numeric column
                                    but the side columns (when no class column) */
    char class_col[64];          /* classification: this column's values are the classes */
    char side_cols[256];         /* numeric side inputs (model input "side") */
    int halves;                  /* left/right halves as two inputs (also when the model's
                                    inputs are named "left" and "right") */
    int no_standardize;          /* 1: targets as they are (else train-split mean/std) */
};

/* One input of the model, in the order the model takes them. */
struct md_data_input {
    char name[MD_DATA_NAME_MAX]; /* the model's name for it ("image", "brightness"); "" = "input<i>" */
    md_input_kind kind;
    int c, h, w;                 /* per-sample shape; 0 = the dataset's own (or --image-size) */
};

/* What the model needs. A zeroed request ({0}) means: one MD_INPUT_IMAGE of
 * the dataset's own shape, NCHW, the dataset's classes. */
struct md_data_request {
    int num_inputs;              /* 0..MD_DATA_MAX_INPUTS (0 = one image input; time series:
                                    the series and, when the file has dates, its time features) */
    struct md_data_input inputs[MD_DATA_MAX_INPUTS];
    md_layout layout;            /* of every delivered input: MD_NCHW or MD_NHWC */
    int num_classes;             /* the model's outputs; 0 = the dataset's. Fewer
                                    than the dataset has is MD_ERR_CONFIG */
    long long mem_available;     /* bytes for the --cache-images check; 0 = ask the OS
                                    (md_mem_available_bytes); tests set it */
    /* Overrides, from the run config's "data" section (md_data_config);
     * zeros keep the dataset's defaults. */
    int crop_padding;            /* > 0: zero-padding of the random crop; < 0: no crop */
    int flip;                    /* 1: horizontal flip; -1: none; 0: default (not for digits) */
    int norm_channels;           /* > 0: mean/std below (1 or 3 values) replace input 0's */
    float mean[3], std[3];
};

/* What to open and how: the run's data options, resolved by the caller
 * (the application layer) from flags and config. */
struct md_data_opts {
    char dataset[MD_DATA_NAME_MAX]; /* "auto" or a format's dataset name (format.h) */
    char data_dir[MD_PATH_MAX];     /* "" = the default search */
    double val_split;               /* fraction of train held out for validation */
    int image_size;                 /* JPEG folders: side of the square input; 0 = the model's */
    int max_samples;                /* per split, seeded; 0 = all */
    int coarse_labels;              /* CIFAR-100: the 20 coarse classes */
    int cache_images;               /* keep decoded images in RAM */
    int skip_bad;                   /* skip undecodable samples instead of failing */
    uint64_t seed;                  /* splits and subsets */
    struct md_series_request series; /* CSV time series: window, columns, splits */
    struct md_images_request images; /* image folder + CSV: columns, halves */
    int folds;                      /* k-fold: > 1 splits the training samples into K folds */
    int fold;                       /* the validation fold 0..folds-1 (-1: all, for the caller's loop) */
};

/* The defaults of the command line (dataset "auto", val_split 0.1, seed 42). */
void md_data_opts_default(struct md_data_opts *o);

/* Reads the data section of the run config `config_path` ("" = none) into
 * `o` and `req`: "dataset", "dir", "val_split", "image_size", "max_samples",
 * "coarse_labels" (each overwrites the field of `o` when the key is there),
 * "augment" {"crop_padding", "flip"} and "normalize" {"mean": [...],
 * "std": [...]}. Unknown keys and bad values are MD_ERR_CONFIG naming
 * "data.<key>". The caller decides which of o's fields a flag keeps. */
md_status md_data_config(const char *config_path, struct md_data_opts *o, struct md_data_request *req);

struct md_data; /* opaque; job.h forward-declares it */

/* Opens the dataset that `o` names for the model's request (augmentation is the
 * loader's choice: md_loader_opts.augment). With --dataset auto the format is
 * detected from data_dir's contents; without data_dir the search is
 * data/fashion-mnist, /usr/share/datasets/fashion-mnist, then the bundled
 * sample data/fashion-mnist-sample. *out is owned by the caller
 * (md_data_free). Reads and validates every file it will use (JPEG: headers
 * only), so bad input fails here rather than mid-epoch. */
md_status md_data_open(const struct md_data_opts *o, const struct md_data_request *req, struct md_data **out);
void md_data_free(struct md_data *d); /* NULL ok */

/* What md_data_open would find, cheaply (headers and folder names only), for
 * the model stage that runs first: the dataset's name, its classes and its
 * stored image shape (JPEG: 3 x image_size, or 0 x 0 when not given).
 * Same errors as md_data_open for a missing or unrecognisable directory. */
struct md_data_peek {
    char name[MD_DATA_NAME_MAX];
    int num_classes;             /* 0 for regression */
    int c, h, w;                 /* time series: 1, seq_len, n_in */
    md_task task;
    struct md_data_series series; /* time series: the window's shapes; image regression:
                                     pred_len 1, n_out targets, seq_len 0 */
    int n_side;                   /* images-csv: side values per sample (--side-cols) */
    long long train_samples;      /* the training file's samples before any split (0: not known) */
};
md_status md_data_peek(const struct md_data_opts *o, struct md_data_peek *out);

/* ---- what was opened (borrowed strings, valid while d lives) ---- */
/* Regression targets' names (n_out of md_data_series; "" when unnamed) and
 * the side inputs' count and names (images-csv). */
const char *md_data_target_name(const struct md_data *d, int j);
int md_data_num_side(const struct md_data *d);
const char *md_data_side_name(const struct md_data *d, int j);
/* The side inputs' training-split mean and std (num_side values each). */
const double *md_data_side_mean(const struct md_data *d);
const double *md_data_side_std(const struct md_data *d);
/* k-fold: (folds, fold) in effect; folds 1 = none. */
int md_data_folds(const struct md_data *d, int *fold);
const char *md_data_name(const struct md_data *d);      /* "fashion-mnist", "cifar100", "jpeg", ... */
const char *md_data_format(const struct md_data *d);    /* "idx", "idx.gz", "cifar-binary", "jpeg", "synthetic" */
const char *md_data_source(const struct md_data *d);    /* directory read ("" for synthetic) */
const char *md_data_split_name(md_split s);             /* "train", "val", "test" */
/* Where each split came from ("train files minus 10% (seed 42)", "val/ folder", "test files"). */
const char *md_data_split_origin(const struct md_data *d, md_split s);
long long md_data_count(const struct md_data *d, md_split s);
int md_data_num_classes(const struct md_data *d);      /* the dataset's classes */
const char *md_data_class_name(const struct md_data *d, int k);
long long md_data_class_count(const struct md_data *d, md_split s, int k);
/* Shape of the images as stored (after JPEG decode and resize): (c, h, w). */
void md_data_source_shape(const struct md_data *d, int *c, int *h, int *w);

/* The delivered inputs (the request with 0s resolved). */
int md_data_num_inputs(const struct md_data *d);
const struct md_data_input *md_data_input(const struct md_data *d, int i);
md_layout md_data_layout(const struct md_data *d);
/* Elements per sample of input i (c*h*w). */
size_t md_data_input_elems(const struct md_data *d, int i);

/* The task (classification or regression), the time-series window's shapes
 * (all 0 for images), and the target floats per sample (pred_len * n_out;
 * 0 for classification). */
md_task md_data_task(const struct md_data *d);
const struct md_data_series *md_data_series(const struct md_data *d);
size_t md_data_target_elems(const struct md_data *d);
/* The training part's per-variate mean and std of the targets (n_out values
 * each: a time series' output variates, or an image-regression dataset's
 * target columns), for md_metrics' original units: original = value * std +
 * mean. NULL for classification. */
const double *md_data_target_mean(const struct md_data *d);
const double *md_data_target_std(const struct md_data *d);

/* Normalisation of input i: per-channel mean and std (arrays of c floats),
 * and whether they are the dataset's published values or computed here. */
const float *md_data_mean(const struct md_data *d, int i);
const float *md_data_std(const struct md_data *d, int i);
int md_data_norm_known(const struct md_data *d);
int md_data_norm_given(const struct md_data *d); /* from the config's data.normalize */

/* Augmentation applied to the train split when a loader asks for it:
 * random crop after zero-padding by `pad` pixels, horizontal flip (off for
 * digits). */
int md_data_aug_pad(const struct md_data *d);
int md_data_aug_flip(const struct md_data *d);

/* Decoded-image cache (--cache-images): bytes held (0 when off), and the
 * estimate checked against available RAM before filling it. In-memory
 * formats (IDX, CIFAR) always hold their pixels: md_data_resident_bytes. */
long long md_data_cache_bytes(const struct md_data *d);
long long md_data_cache_estimate(const struct md_data *d);
long long md_data_resident_bytes(const struct md_data *d);
/* Samples dropped as unreadable (--on-bad-sample skip): at open, plus those a
 * loader met while decoding. md_data_first_bad: the first one's message. */
long long md_data_skipped(const struct md_data *d);
const char *md_data_first_bad(const struct md_data *d);
/* The first MD_DATA_BAD_LISTED skipped files: copies entry i's path and
 * reason (when i is in range) and returns how many are listed. */
#define MD_DATA_BAD_LISTED 10
int md_data_bad_listed(struct md_data *d, int i, char *path, size_t pn, char *why, size_t wn);
/* Adds the format's own fields (none for the image formats) to the report's
 * "data" object. */
struct cJSON;
void md_data_describe(const struct md_data *d, struct cJSON *data);

/* ---- loader ---- */

struct md_loader; /* opaque */

struct md_loader_opts {
    md_split split;
    int batch_size;     /* > 0 */
    int shuffle;        /* seeded per epoch */
    int augment;        /* random crop + flip (use for train only) */
    int drop_last;      /* 0: the last, partial batch is delivered */
    int num_workers;    /* 0 = make batches in the consumer's thread */
    int prefetch;       /* batches prepared ahead (>= 1) */
    uint64_t seed;
    md_device *pin_dev; /* non-NULL: batches in md_dev_host_alloc memory
                           (page-locked where that device benefits) */
    /* data parallelism: > 1 ranks each take their part of every global batch
     * of shard_count x batch_size samples (one order for all: the same
     * global batches one process with that batch size gets). Rank r takes
     * positions [m r / R, m (r + 1) / R) of a global batch of m samples, so
     * a short last batch is split evenly (a piece may be empty). */
    int shard_count;    /* 0 or 1: the whole split */
    int shard_rank;
};

/* Rank r of R's piece [lo, hi) of m samples: [m r / R, m (r + 1) / R).
 * The pieces are disjoint, cover [0, m) and differ by at most one sample
 * (a piece is empty where R > m). */
void md_shard_bounds(long long m, int r, int R, long long *lo, long long *hi);

/* One batch: host memory owned by the loader, valid until md_loader_release. */
struct md_batch {
    int n;                                  /* samples (the last batch may be short,
                                               and skipped bad samples shorten it) */
    int num_inputs;
    float *inputs[MD_DATA_MAX_INPUTS];      /* input i: (n, C, H, W) or (n, H, W, C); time series:
                                               0 (n, seq_len, n_in), 1 (n, seq_len, n_time) */
    int32_t *labels;                        /* (n) in [0, num_classes); 0 for regression */
    float *targets;                         /* regression: (n, pred_len, n_out); else NULL */
    int64_t *index;                         /* (n) sample index within the split */
    long long batch;                        /* position in the epoch, from 0 */
    int epoch;
    int pinned;                             /* memory is page-locked */
};

/* Loader statistics since md_loader_create (reset by md_loader_stats_reset). */
struct md_loader_stats {
    long long samples;        /* samples prepared (decoded, converted, augmented) */
    long long batches;        /* batches delivered to the consumer */
    long long skipped;        /* bad samples dropped by this loader */
    double prepare_s;         /* seconds of worker (or caller) time spent preparing */
    double wait_s;            /* seconds the consumer waited inside md_loader_next */
    double wall_s;            /* seconds from each epoch start to its last batch, summed */
    double samples_per_s;     /* samples / wall_s: what the loader sustained */
    double decode_per_s;      /* samples / prepare_s x workers: decode capacity */
    double batches_per_s;     /* batches / wall_s */
};

md_status md_loader_create(struct md_data *d, const struct md_loader_opts *lo, struct md_loader **out);
void md_loader_free(struct md_loader *l); /* NULL ok; stops the workers */

/* Batches per epoch for this loader (with drop_last applied). */
long long md_loader_num_batches(const struct md_loader *l);
/* Starts epoch `epoch` (order and augmentation from seed + epoch); an epoch
 * in progress is abandoned, and batches still held from it must not be read
 * any more (releasing them is harmless). Workers start here. */
md_status md_loader_start_epoch(struct md_loader *l, int epoch);
/* Next batch of the epoch in order, or *b = NULL at its end. Blocks while the
 * workers are behind (that time counts as wait_s). A worker's error (a bad
 * file with --on-bad-sample fail) is returned here, naming the file. The
 * consumer may hold up to `prefetch` batches before releasing. */
md_status md_loader_next(struct md_loader *l, struct md_batch **b);
void md_loader_release(struct md_loader *l, struct md_batch *b);
void md_loader_stats(const struct md_loader *l, struct md_loader_stats *out);
void md_loader_stats_reset(struct md_loader *l);

#ifdef __cplusplus
}
#endif
#endif
