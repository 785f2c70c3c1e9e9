/* recommend.h - recommendations from measurements, each with its figure.
 *
 * md_recommend is pure: it reads only the measurements it is given (the
 * benchmark fills them in; tests fabricate them), so every rule is tested on
 * a machine without the hardware it talks about. A rule that lacks its
 * measurement says nothing rather than repeating folklore; the chip preset
 * (preset.h) stands in only where nothing was measured, and says so.
 */
#ifndef MD_RECOMMEND_H
#define MD_RECOMMEND_H

#include <cjson/cJSON.h>

#include "backend/backend.h"
#include "core/tensor.h"
#include "diag/preset.h"

#define MD_REC_MAX 16

/* One point of the batch-size sweep. */
struct md_rec_sweep_point {
    int batch_size;
    int ok;                 /* 0: did not fit (out of memory or over the cap) */
    double samples_per_s;   /* training throughput */
    long long peak_bytes;   /* peak device memory during the measurement */
};

/* A measured on/off pair (--ablate): throughput with the setting on and off.
 * 0 = not measured. */
struct md_rec_ablation {
    double on_samples_per_s, off_samples_per_s;
};

struct md_rec_in {
    md_backend_kind kind;
    const char *device_name;       /* "Apple M2 Pro", "NVIDIA H100 ...", CPU model */
    long long device_memory;       /* total device bytes (0 = unknown) */
    long long memory_limit;        /* the --memory-fraction cap (0 = none) */
    int unified_memory;

    /* the run's settings */
    int batch_size;
    md_precision precision;
    int amp;
    int supports_fp16, supports_bf16;
    int compile;
    int channels_last;
    int grad_ckpt;
    int num_workers;
    int pin_memory;
    int benefits_from_pinned;
    int cache_images;
    int logical_cores;

    /* measurements (0 / NULL = not measured) */
    const struct md_rec_sweep_point *sweep;
    int n_sweep;
    struct md_rec_ablation abl_compile, abl_channels_last, abl_precision, abl_workers;
    double loader_samples_per_s;   /* what the loader sustains */
    double step_samples_per_s;     /* what the training step consumes */
    long long dataset_bytes;       /* decoded training images (the cache estimate) */
    int dataset_resident;          /* the format is held in RAM anyway (IDX, CIFAR) */
    long long ram_available;
    long long params_bytes, grads_bytes, optimizer_bytes, activations_bytes;
    long long peak_bytes;          /* device peak of the training measurement */
    double gemm_peak_gflops;       /* measured GEMM rate */
    const char *blas_warning;      /* sysinfo's OpenBLAS kernel note ("" = none) */

    const struct md_preset *preset; /* chip preset (Metal), or NULL */
};

struct md_rec {
    char topic[32];       /* "batch size", "precision", ... */
    char advice[400];     /* what to do, as a flag where there is one */
    char figure[320];     /* the measurement that justifies it */
    char source[16];      /* "measured" or "preset" */
};

/* Writes up to `max` recommendations into out and returns how many. */
int md_recommend(const struct md_rec_in *in, struct md_rec *out, int max);

/* The throughput knee of a sweep: the smallest batch that fits within
 * `budget` bytes (0 = no budget) and reaches `share` (0.9) of the best
 * throughput among those that fit. Returns its index, or -1 if none fits. */
int md_rec_knee(const struct md_rec_sweep_point *sweep, int n, long long budget, double share, int *best_index);

/* JSON array of recommendations (topic, advice, figure, source). */
cJSON *md_recs_to_json(const struct md_rec *r, int n);

#endif
