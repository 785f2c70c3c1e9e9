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

#include <stddef.h>

#include <cjson/cJSON.h>

#include "backend/backend.h"
#include "core/tensor.h"
#include "diag/preset.h"

#define MD_REC_MAX 16

/* One point of the batch-size sweep. */
struct md_rec_sweep_point {
    int batch_size;
    int ok;                 /* 0: did not fit (out of memory or over the cap) */
    double samples_per_s;   /* training throughput: the median of the repetitions */
    long long peak_bytes;   /* peak device memory during the measurement */
    double min_samples_per_s, max_samples_per_s; /* spread of the repetitions (0: one measurement) */
    int reps;               /* repetitions behind the median (0 or 1: one measurement) */
};

/* Repetitions behind one verdict: at least this many on/off pairs. */
#define MD_REC_MIN_REPS 3
#define MD_REC_MAX_REPS 9
/* The smallest difference ever called measurable (3%), however tight the
 * repetitions: below it a speed-up does not pay for changing a setting. */
#define MD_REC_NOISE_FLOOR 0.03

/* A measured on/off comparison (--ablate): training samples/s with the
 * setting on and off, repeated and interleaved (on[0] off[0] on[1] off[1]
 * ...), so on[i] and off[i] ran back to back. n = 0: not measured. */
struct md_rec_ablation {
    int n;
    double on[MD_REC_MAX_REPS], off[MD_REC_MAX_REPS];
};

typedef enum {
    MD_REC_NOT_MEASURED,
    MD_REC_TOO_FEW,        /* fewer than MD_REC_MIN_REPS pairs: the noise is unknown */
    MD_REC_NO_DIFFERENCE,  /* the difference is within the measured noise */
    MD_REC_ON_FASTER,
    MD_REC_OFF_FASTER,
} md_rec_verdict;

/* What a comparison says. The rule: r[i] = on[i] / off[i] for each
 * interleaved pair (back-to-back runs, so a machine that slows down or
 * speeds up during the run moves both alike); speedup = median of r;
 * noise = max(MD_REC_NOISE_FLOOR, (max r - min r) / min r). "On faster"
 * when speedup - 1 > noise, "off faster" when 1/speedup - 1 > noise, else no
 * measurable difference. With fewer than MD_REC_MIN_REPS pairs: no verdict.
 * So a verdict needs the gain to exceed the pairs' own scatter, and implies
 * that every pair lies on the same side of 1: pairs that disagree about
 * which setting is faster always give "no measurable difference". */
struct md_rec_compare {
    md_rec_verdict verdict;
    int pairs;
    double speedup;            /* median on/off ratio of the pairs */
    double ratio_min, ratio_max;
    double noise;              /* the threshold applied (a fraction) */
    double on_median, on_min, on_max;
    double off_median, off_min, off_max;
};

void md_rec_compare(const struct md_rec_ablation *a, struct md_rec_compare *out);

/* The median of v[0..n) (n >= 1; v is not modified). */
double md_rec_median(const double *v, int n);

/* "25% faster than" below 2x, "6.3x as fast as" from 2x: a gain >= 1 as a
 * phrase that reads right. Returns buf. */
const char *md_rec_gain_text(double gain, char *buf, size_t n);

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
    const struct md_rec_sweep_point *sweep;   /* the sweep's points (medians of repetitions) */
    int n_sweep;
    /* the batch finder: the one source of "the largest batch that fits" */
    int finder_ran;
    int finder_max_batch;          /* 0: nothing fits */
    int finder_capped;             /* the search stopped before a batch failed */
    struct md_rec_ablation abl_compile, abl_channels_last, abl_precision, abl_workers;
    int abl_workers_count;         /* the workers the "on" side of abl_workers used */
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

    /* the per-layer profile (report.profile): its largest rows by time */
    int n_prof;
    struct md_rec_prof {
        char name[128];
        double share;                 /* of the profiled step */
        double frac_flops, frac_bytes; /* of the device's peaks (NaN: not known) */
        double gflops, gbs;
        double peak_gflops, peak_gbs; /* the peaks (0: not known) */
    } prof[2];
    /* the leak check: the series that grew past its bound ("" = none) */
    char leak_measure[48];
    double leak_per_step, leak_growth;
    int leak_steps;
};

struct md_rec {
    char topic[32];       /* "batch size", "precision", ... */
    char advice[400];     /* what to do, as a flag where there is one */
    char figure[320];     /* the measurement that justifies it */
    char source[16];      /* "measured" or "preset" */
    char cost[200];       /* what following the advice costs ("" = nothing worth saying) */
    char verdict[24];     /* comparisons: "on faster", "off faster", "no difference" ("" = none) */
};

/* Writes up to `max` recommendations into out and returns how many. */
int md_recommend(const struct md_rec_in *in, struct md_rec *out, int max);

/* The throughput knee of a sweep: the smallest batch that fits within
 * `budget` bytes (0 = no budget) and reaches `share` (0.9) of the best
 * median throughput among those that fit, allowing for noise (a point
 * qualifies when its fastest repetition reaches share x the best median).
 * Returns its index, or -1 if none fits. */
int md_rec_knee(const struct md_rec_sweep_point *sweep, int n, long long budget, double share, int *best_index);

/* JSON array of recommendations (topic, advice, figure, source, cost, verdict). */
cJSON *md_recs_to_json(const struct md_rec *r, int n);

#endif
