/* format.h - the dataset-format interface (internal to src/data).
 *
 * A format is one file (format_idx.c, format_cifar.c, format_jpeg.c,
 * format_synth.c) that fills one `const struct md_data_format` with
 * designated initializers; format.c lists them in md_data_formats[], in the
 * order --dataset auto tries them. The core (data.c) does everything that is
 * the same for every format: choosing the directory, splits, the delivered
 * inputs, normalisation, the decoded-image cache, bad-sample bookkeeping,
 * preparing samples for the loader. A format only says whether a directory
 * holds it, opens it (counts, sample shape, classes, labels, split ranges),
 * and reads sample i. docs/data-formats.md says how to add one.
 *
 * Samples are images (u8, planar (c, h, w), with class labels: read) or
 * windows of a time series ((seq_len, n_in) floats with (pred_len, n_out)
 * float targets: read_series); the descriptor names the sample and target
 * kinds.
 */
#ifndef MD_DATA_FORMAT_H
#define MD_DATA_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "data/data_impl.h"

struct cJSON;

#define MD_DATA_FORMAT_API 1 /* bumped when an entry changes meaning */

typedef enum md_sample_kind {
    MD_SAMPLE_IMAGE_U8 = 0, /* (c, h, w) bytes, planar, 0..255 */
    MD_SAMPLE_SERIES_F32,   /* (seq_len, n_in) floats, already standardised (read_series) */
} md_sample_kind;

typedef enum md_target_kind {
    MD_TARGET_CLASS = 0, /* one int32 label in [0, num_classes) */
    MD_TARGET_VALUES,    /* (pred_len, n_out) floats (regression, forecasting) */
} md_target_kind;

/* What open is given: the resolved choice and the options a format may use.
 * Borrowed for the call only. */
struct md_format_args {
    const char *dataset;                 /* the --dataset name it serves ("fashion-mnist", "cifar100", ...) */
    const char *dir;                     /* its directory ("" for generated data) */
    const struct md_data_request *req;   /* the model's request (never NULL) */
    int image_size;                      /* --image-size; 0 = the format's own */
    int coarse_labels;                   /* CIFAR-100: the 20 superclasses */
    long long max_samples;               /* --max-samples (0 = all) */
    double val_split;                    /* --val-split */
    const struct md_series_request *series; /* time series: window, columns, splits (never NULL) */
    const struct md_images_request *images; /* image folder + CSV: columns, halves (never NULL) */
    uint64_t seed;                       /* --seed */
    int skip_bad;                        /* --on-bad-sample skip: call bad() and go on */
    /* Reports a sample dropped at open (skip_bad); msg starts with the path. */
    void (*bad)(void *ctx, const char *path, const char *msg);
    void *bad_ctx;
};

/* What open found. Arrays are md_malloc'd by the format and owned by the
 * core from then on (it frees them with md_data_free). */
struct md_format_desc {
    char format[16];                     /* md_data_format: "idx", "idx.gz", "cifar-binary", ... */
    char source[MD_PATH_MAX];            /* the directory actually read; "" = generated */
    md_sample_kind sample;
    md_target_kind target;
    int c, h, w;                         /* stored sample shape */
    int num_classes;
    char **class_names;                  /* (num_classes) */
    long long count;                     /* samples of every split together */
    int32_t *labels;                     /* (count) */
    struct md_split_ranges ranges;       /* where each split lies; an empty val is carved from train */
    char split_origin[MD_SPLIT_COUNT][128]; /* "" = the core's wording */
    long long resident_bytes;            /* > 0: read() returns pointers into memory the format holds
                                            (never cached); 0: samples are read on demand */
    int keep_decoded;                    /* cache decoded samples even without --cache-images */
    /* Normalisation: published per-channel values (known_channels 1 or 3;
     * 0 = compute from norm_samples training samples, 0 = the default). */
    int known_channels;
    float known_mean[3], known_std[3];
    int norm_samples;
    int no_flip;                         /* horizontal flip makes other classes (digits) */
    struct md_data_series series;        /* MD_SAMPLE_SERIES_F32: the window's shapes */
    const double *target_mean, *target_std; /* (series.n_out) borrowed from the state: the scaler */
    /* Images with float targets (MD_SAMPLE_IMAGE_U8 + MD_TARGET_VALUES;
     * series.pred_len 1, series.n_out targets, seq_len 0): the raw values,
     * which the core standardises with the training split's mean/std once
     * the splits are made (target_mean/std are then left NULL). */
    float *values;                       /* (count, series.n_out) */
    char **target_names;                 /* (series.n_out) */
    int n_side;                          /* side inputs per sample (model input "side") */
    float *side;                         /* (count, n_side) raw */
    char **side_names;                   /* (n_side) */
    int halves;                          /* stored image = left half | right half, each (c, h, w/2) */
    int no_standardize;                  /* values as they are (mean 0, std 1) */
    int no_augment;                      /* no crop or flip unless the config asks (targets measured
                                            from the whole image) */
};

struct md_data_format {
    const char *name;                    /* "idx", "cifar", ... (messages, docs) */
    const char *const *datasets;         /* --dataset names it serves, NULL-terminated */
    /* (optional) how --dataset auto's "cannot tell" message describes what it
     * looks for; NULL = never auto-detected (synthetic). */
    const char *expects;

    /* (optional) Does `dir` hold this format? `want` is the dataset asked for,
     * or NULL for any of this format's. MD_OK with the dataset's name in
     * found[n]; else MD_ERR_DATA with the reason as the message (a probe: the
     * caller clears it). Cheap: names and headers only. NULL = never detected. */
    md_status (*detect)(const char *dir, const char *want, char *found, size_t n);
    /* (optional) Where `dataset` is looked for without --data-dir ("auto":
     * the default run's dataset), best first: up to max paths into dirs.
     * An error (MD_ERR_USAGE) says the format needs --data-dir. NULL = the
     * format needs no directory (generated data). */
    md_status (*default_dirs)(const char *dataset, char (*dirs)[MD_PATH_MAX], int max, int *n);
    /* The dataset's name, classes and stored shape, cheaply (md_data_peek). */
    md_status (*peek)(const struct md_format_args *a, struct md_data_peek *out);
    /* Opens the dataset: fills *desc (zeroed by the caller) and *state (the
     * format's private data, freed with free). Reads and checks every file it
     * will use, so bad input fails here. On error *state is freed already. */
    md_status (*open)(const struct md_format_args *a, struct md_format_desc *desc, void **state);
    /* (optional) per-thread scratch for read (a decoder, a file buffer);
     * NULL = read needs none. */
    md_status (*scratch_new)(const void *state, void **out);
    void (*scratch_free)(void *scratch);
    /* Sample i (0 <= i < desc.count) as stored: writes (c, h, w) into buf and
     * sets *px = buf, or (resident_bytes > 0) points *px into its own memory.
     * Thread-safe for distinct scratches. MD_ERR_DATA names the file. */
    md_status (*read)(const void *state, void *scratch, long long i, uint8_t *buf, const uint8_t **px);
    /* (MD_SAMPLE_SERIES_F32 formats) Window i (0 <= i < desc.count) into
     * x (seq_len, n_in), x_mark (seq_len, n_time; NULL or n_time 0: not
     * wanted) and y (pred_len, n_out), row-major floats. Thread-safe. */
    md_status (*read_series)(const void *state, long long i, float *x, float *x_mark, float *y);
    /* (optional) The file sample i came from, for bad-sample messages;
     * NULL = desc.source. */
    const char *(*sample_name)(const void *state, long long i);
    /* (optional) Adds the format's own fields to the report's data object
     * (a CSV series: columns, target, window); NULL = none. */
    void (*describe)(const void *state, struct cJSON *data);
    void (*free)(void *state); /* NULL ok */
};

/* The registry (format.c): every format, in auto-detection order. */
extern const struct md_data_format *const md_data_formats[];

/* The format serving --dataset `name`, or NULL. */
const struct md_data_format *md_format_find(const char *name);

/* Chooses the format and directory for --dataset `dataset` and --data-dir
 * `data_dir` ("" = the default places): *fmt, the dataset's name (auto:
 * detected) and the directory ("" for generated data). Errors name the
 * directory and what was expected. */
md_status md_format_resolve(const char *dataset, const char *data_dir, const struct md_data_format **fmt,
                            char *name, size_t nn, char *dir, size_t dn);

/* "a, b, c" of every --dataset name ("auto" first), for messages. */
void md_format_dataset_names(char *out, size_t n);
/* The same names joined by `sep` ("|" for the option table). */
void md_format_dataset_list(char *out, size_t n, const char *sep);

#endif
