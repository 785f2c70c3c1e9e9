/* csv_series.h - multivariate time series from CSV files, read the way the
 * public forecasting code (Informer, Autoformer, iTransformer: its
 * data_loader.py Dataset_ETT_hour / Dataset_ETT_minute / Dataset_Custom)
 * reads its benchmark files, and cut into (lookback, horizon) windows.
 *
 * The file: a header row of column names, then one row per time step. One
 * column may hold the time stamps (named "date", or a first column whose
 * cells are dates); every other column is a numeric variate. The reader is
 * strict: a missing, non-numeric, NaN or Inf cell, a ragged row, a bad header
 * or a split too short for one window is an MD_ERR_DATA error whose one-line
 * message names the file, the line (1-based, the header is line 1) and the
 * column. docs/timeseries-data.md has the rules, the split borders, the
 * scaler, the windows and the time features in full.
 *
 * Layout: the variates kept (md_csv_info.n_vars) are stored in file order
 * with the target moved last (Dataset_Custom's order), so for MS the one
 * output is the last input column, as the public code's f_dim = -1 takes it.
 * Values are standardised with the training part's mean and (population)
 * standard deviation.
 *
 * Splits are given as md_split values (data/data.h): 0 train, 1 validation,
 * 2 test. A loaded md_csv_series is immutable: any number of threads may
 * fetch windows from it at once.
 */
#ifndef MD_CSV_SERIES_H
#define MD_CSV_SERIES_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MD_CSV_SPLITS 3                      /* train, validation, test (md_split order) */
#define MD_CSV_MAX_BYTES ((size_t)1 << 30)   /* default size cap of a CSV file */
#define MD_CSV_MAX_LINE (1 << 18)            /* bytes in one line, without its line ending */
#define MD_CSV_MAX_COLUMNS 10000
#define MD_CSV_MAX_TIME_FEATURES 4
/* ETT's conventional 12/4/4 months (30-day months): the borders need this
 * many hourly rows (4x as many 15-minute rows for ETTm). */
#define MD_CSV_ETT_HOUR_ROWS 14400

/* Which variates go in and out (the public code's --features). */
typedef enum md_csv_features {
    MD_CSV_FEATURES_M = 0, /* all variates in, all out */
    MD_CSV_FEATURES_S,     /* the target only, in and out */
    MD_CSV_FEATURES_MS,    /* all variates in, the target out */
} md_csv_features;

/* Time-feature set (the public code's timeF encoding, --freq). */
typedef enum md_csv_freq {
    MD_CSV_FREQ_H = 0, /* hour of day, day of week, day of month, day of year (the public default) */
    MD_CSV_FREQ_D,     /* day of week, day of month, day of year */
} md_csv_freq;

typedef enum md_csv_split_rule {
    MD_CSV_SPLIT_ETT_HOUR = 0, /* file name ETTh*, >= 14,400 rows: 12/4/4 months of hours */
    MD_CSV_SPLIT_ETT_MINUTE,   /* file name ETTm*, >= 57,600 rows: the same in 15-minute rows */
    MD_CSV_SPLIT_RATIO,        /* 70/10/20 (or the fractions asked for), Dataset_Custom's borders */
} md_csv_split_rule;

typedef struct md_csv_opts {
    int seq_len;               /* lookback rows per window, >= 1 */
    int pred_len;              /* horizon rows per window, >= 1 */
    md_csv_features features;
    const char *target;        /* NULL or "": the last numeric column ("OT" in ETT); borrowed */
    double train_frac;         /* both 0: the file's convention; else train_frac > 0, test_frac > 0, */
    double test_frac;          /* train_frac + test_frac < 1, validation gets the rest */
    md_csv_freq freq;
    size_t max_bytes;          /* 0: MD_CSV_MAX_BYTES */
} md_csv_opts;

/* seq_len 96, pred_len 96, M, target last column, conventional splits, freq h. */
void md_csv_opts_default(md_csv_opts *o);

typedef struct md_csv_series md_csv_series; /* opaque, immutable once loaded */

/* What was loaded; every pointer is borrowed from the series. */
typedef struct md_csv_info {
    long long rows;            /* data rows of the file (the header not counted) */
    int n_cols;                /* columns of the file */
    int n_vars;                /* variates stored: every numeric column (M, MS) or the target (S) */
    int n_in, n_out;           /* columns of a window's x and y */
    int n_time;                /* time features per row: 4 (freq h), 3 (freq d), 0 without dates */
    int date_col;              /* 0-based column of the time stamps, -1 when none */
    int target_col;            /* 0-based column of the target */
    const char *const *names;  /* (n_vars) variate names in stored order, the target last */
    const int *file_cols;      /* (n_vars) 0-based file column of each stored variate */
    const double *mean;        /* (n_vars) scaler: training-part mean */
    const double *std;         /* (n_vars) scaler: training-part population std (1 where constant) */
    const float *values;       /* (rows, n_vars) standardised values */
    const int64_t *stamps;     /* (rows) seconds since 1970-01-01 00:00 (time zone ignored), or NULL */
    const float *marks;        /* (rows, n_time) time features, or NULL */
    md_csv_split_rule rule;
    long long border1[MD_CSV_SPLITS]; /* split s covers rows [border1[s], border2[s]), 0-based */
    long long border2[MD_CSV_SPLITS];
    long long windows[MD_CSV_SPLITS]; /* windows per split: border2 - border1 - seq_len - pred_len + 1 */
    int seq_len, pred_len;
    md_csv_features features;
    md_csv_freq freq;
} md_csv_info;

/* Reads and checks the CSV file at `path` (at most o->max_bytes). The series
 * is owned by the caller (md_csv_series_free). The file's base name selects
 * the split convention (ETTh / ETTm prefixes, given enough rows). */
md_status md_csv_series_load(const char *path, const md_csv_opts *o, md_csv_series **out);
/* The same on a buffer (borrowed; need not be NUL-terminated). `name` stands
 * for the file in messages and in the split convention. */
md_status md_csv_series_parse(const char *buf, size_t len, const char *name, const md_csv_opts *o,
                              md_csv_series **out);
void md_csv_series_free(md_csv_series *s);

const md_csv_info *md_csv_series_info(const md_csv_series *s);

/* Window i of split `split` (0 <= i < windows[split]): input rows
 * [b + i, b + i + seq_len) and target rows [b + i + seq_len, ... + pred_len)
 * with b = border1[split], standardised. Each output may be NULL:
 *   x      (seq_len, n_in)     y      (pred_len, n_out)
 *   x_mark (seq_len, n_time)   y_mark (pred_len, n_time)   (untouched when n_time is 0)
 * Out-of-range arguments are bugs (assert). */
void md_csv_series_window(const md_csv_series *s, int split, long long i, float *x, float *y, float *x_mark,
                          float *y_mark);

/* Undoes the standardisation in place: v (rows, n_out) when `outputs`, else
 * (rows, n_in), back to the file's units. */
void md_csv_series_inverse(const md_csv_series *s, float *v, long long rows, int outputs);

/* The naive forecast "every future step repeats the last input value" over
 * all windows of a split: mean squared and absolute error over windows x
 * pred_len x n_out, on standardised values, or in the file's units when
 * `original_units`. Accumulated in double. */
void md_csv_series_naive(const md_csv_series *s, int split, int original_units, double *mse, double *mae);

/* ---- time stamps ---- */

/* Parses YYYY-MM-DD or YYYY/M/D, optionally followed by ' ' or 'T' and
 * H:MM, H:MM:SS or H:MM:SS.fraction (the fraction is dropped), into seconds
 * since 1970-01-01 00:00. Returns 1 on success, 0 when s[0..n) is not such a
 * date or names an impossible one (2023-02-29, 24:00). */
int md_csv_parse_time(const char *s, size_t n, int64_t *secs);
/* "YYYY-MM-DD HH:MM:SS" into buf (at least 20 bytes). */
void md_csv_format_time(int64_t secs, char *buf, size_t n);
/* The timeF features of one time stamp, each scaled to [-0.5, 0.5] as the
 * public code's utils/timefeatures.py does (freq h: hour/23, day of week
 * (Monday 0)/6, (day of month - 1)/30, (day of year - 1)/365, each - 0.5;
 * freq d: the last three). Returns how many it wrote. */
int md_csv_time_features(int64_t secs, md_csv_freq freq, float *out);

#ifdef __cplusplus
}
#endif
#endif
