/* csv_series.c - time series from CSV files (see csv_series.h and
 * docs/timeseries-data.md): a strict tokeniser, the public forecasting
 * code's split borders, a training-part scaler, windows, timeF features and
 * the naive "repeat the last value" baseline. */
#define _POSIX_C_SOURCE 200809L
#include "data/csv_series.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "core/mem.h"

struct md_csv_series {
    md_csv_info info;
    char **colnames;     /* (n_cols) every column's name, owned */
    const char **names;  /* (n_vars) pointers into colnames */
    int *file_cols;      /* (n_vars) */
    double *mean, *std;  /* (n_vars) */
    float *values;       /* (rows, n_vars) */
    int64_t *stamps;     /* (rows) or NULL */
    float *marks;        /* (rows, n_time) or NULL */
    int out_off;         /* first stored column of y */
};

void md_csv_opts_default(md_csv_opts *o)
{
    memset(o, 0, sizeof *o);
    o->seq_len = 96;
    o->pred_len = 96;
    o->features = MD_CSV_FEATURES_M;
    o->freq = MD_CSV_FREQ_H;
}

/* ============================================================ time stamps */

/* Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm). */
static int64_t days_from_civil(int64_t y, int m, int d)
{
    y -= m <= 2;
    int64_t era = (y >= 0 ? y : y - 399) / 400;
    int64_t yoe = y - era * 400;
    int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
    int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static void civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
    z += 719468;
    int64_t era = (z >= 0 ? z : z - 146096) / 146097;
    int64_t doe = z - era * 146097;
    int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    int64_t mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    *y = yoe + era * 400 + (*m <= 2);
}

static int is_leap(int64_t y) { return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0; }

static int days_in_month(int64_t y, int m)
{
    static const int dm[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    return m == 2 && is_leap(y) ? 29 : dm[m - 1];
}

static int is_digit(char c) { return c >= '0' && c <= '9'; }

/* Reads between min and max digits at s[*pos]. */
static int read_int(const char *s, size_t n, size_t *pos, int min, int max, int *v)
{
    int k = 0, x = 0;
    while (*pos < n && k < max && is_digit(s[*pos])) {
        x = x * 10 + (s[*pos] - '0');
        (*pos)++;
        k++;
    }
    *v = x;
    return k >= min;
}

int md_csv_parse_time(const char *s, size_t n, int64_t *secs)
{
    size_t pos = 0;
    int y, mo, d, h = 0, mi = 0, se = 0;
    if (!read_int(s, n, &pos, 4, 4, &y) || pos >= n || (s[pos] != '-' && s[pos] != '/')) return 0;
    char sep = s[pos++];
    if (!read_int(s, n, &pos, 1, 2, &mo) || pos >= n || s[pos++] != sep) return 0;
    if (!read_int(s, n, &pos, 1, 2, &d)) return 0;
    if (pos < n) {
        if (s[pos] != ' ' && s[pos] != 'T') return 0;
        pos++;
        if (!read_int(s, n, &pos, 1, 2, &h) || pos >= n || s[pos++] != ':') return 0;
        if (!read_int(s, n, &pos, 2, 2, &mi)) return 0;
        if (pos < n && s[pos] == ':') {
            pos++;
            if (!read_int(s, n, &pos, 2, 2, &se)) return 0;
            if (pos < n && s[pos] == '.') {
                size_t f0 = ++pos;
                while (pos < n && is_digit(s[pos])) pos++;
                if (pos == f0) return 0;
            }
        }
        if (pos != n) return 0;
    }
    if (y < 1 || mo < 1 || mo > 12 || d < 1 || d > days_in_month(y, mo) || h > 23 || mi > 59 || se > 59) return 0;
    *secs = days_from_civil(y, mo, d) * 86400 + h * 3600 + mi * 60 + se;
    return 1;
}

static int64_t floor_div(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

void md_csv_format_time(int64_t secs, char *buf, size_t n)
{
    int64_t days = floor_div(secs, 86400), sod = secs - days * 86400, y;
    int m, d;
    civil_from_days(days, &y, &m, &d);
    snprintf(buf, n, "%04lld-%02d-%02d %02d:%02d:%02d", (long long)y, m, d, (int)(sod / 3600),
             (int)(sod / 60 % 60), (int)(sod % 60));
}

int md_csv_time_features(int64_t secs, md_csv_freq freq, float *out)
{
    int64_t days = floor_div(secs, 86400), sod = secs - days * 86400, y;
    int m, d;
    civil_from_days(days, &y, &m, &d);
    int64_t dow = ((days + 3) % 7 + 7) % 7; /* 1970-01-01 was a Thursday; Monday = 0 as pandas */
    int64_t doy = days - days_from_civil(y, 1, 1) + 1;
    int k = 0;
    if (freq == MD_CSV_FREQ_H) out[k++] = (float)((double)(sod / 3600) / 23.0 - 0.5);
    out[k++] = (float)((double)dow / 6.0 - 0.5);
    out[k++] = (float)((double)(d - 1) / 30.0 - 0.5);
    out[k++] = (float)((double)(doy - 1) / 365.0 - 0.5);
    return k;
}

/* ============================================================ tokeniser */

struct field {
    const char *p; /* content: inside the quotes for a quoted field, trimmed otherwise */
    size_t n;
    int esc;       /* quoted and holds "" escapes */
};

struct parser {
    const char *name;     /* the file, for messages */
    struct field *f;      /* (cap) fields of the current line */
    int nf, cap;
    char **colnames;      /* (n_cols) once the header is read */
    int n_cols;
};

static int is_blank(char c) { return c == ' ' || c == '\t'; }

static const char *col_name(const struct parser *ps, int c)
{
    return ps->colnames && c < ps->n_cols ? ps->colnames[c] : "?";
}

/* Splits line [ls, le) (no line ending) into ps->f. Fields: RFC 4180 quoted
 * fields on one line ("" for a quote), or unquoted text without quotes;
 * blanks around either are dropped. */
static md_status split_line(struct parser *ps, const char *ls, const char *le, long long line)
{
    ps->nf = 0;
    const char *p = ls;
    for (;;) {
        if (ps->nf == ps->cap) {
            if (ps->cap >= MD_CSV_MAX_COLUMNS)
                return md_errf(MD_ERR_DATA, "%s: line %lld: more than %d columns", ps->name, line,
                               MD_CSV_MAX_COLUMNS);
            int ncap = ps->cap ? ps->cap * 2 : 64;
            if (ncap > MD_CSV_MAX_COLUMNS) ncap = MD_CSV_MAX_COLUMNS;
            struct field *nf = md_realloc(ps->f, (size_t)ncap * sizeof *nf);
            if (!nf) return MD_ERR_OOM;
            ps->f = nf;
            ps->cap = ncap;
        }
        struct field *f = &ps->f[ps->nf];
        int col = ps->nf + 1;
        const char *q = p;
        while (q < le && is_blank(*q)) q++;
        if (q < le && *q == '"') {
            const char *s = q + 1;
            f->esc = 0;
            for (;;) {
                const char *r = memchr(s, '"', (size_t)(le - s));
                if (!r)
                    return md_errf(MD_ERR_DATA, "%s: line %lld, column %d: unterminated quote (a quoted field must "
                                   "end on its line)", ps->name, line, col);
                if (r + 1 < le && r[1] == '"') {
                    f->esc = 1;
                    s = r + 2;
                    continue;
                }
                f->p = q + 1;
                f->n = (size_t)(r - (q + 1));
                p = r + 1;
                break;
            }
            while (p < le && is_blank(*p)) p++;
            if (p < le && *p != ',')
                return md_errf(MD_ERR_DATA, "%s: line %lld, column %d: text after the closing quote", ps->name, line,
                               col);
        } else {
            const char *c = memchr(p, ',', (size_t)(le - p));
            const char *e = c ? c : le;
            if (memchr(q, '"', (size_t)(e - q)))
                return md_errf(MD_ERR_DATA, "%s: line %lld, column %d: quote inside an unquoted field", ps->name,
                               line, col);
            while (e > q && is_blank(e[-1])) e--;
            f->p = q;
            f->n = (size_t)(e - q);
            f->esc = 0;
            p = c ? c : le;
        }
        ps->nf++;
        if (p == le) return MD_OK;
        p++; /* the comma */
    }
}

/* The next line of [*pos, end): its content [*ls, *le) without "\n" or
 * "\r\n"; checks its length and stray bytes. */
static md_status next_line(const struct parser *ps, const char **pos, const char *end, long long line,
                           const char **ls, const char **le)
{
    const char *s = *pos;
    const char *nl = memchr(s, '\n', (size_t)(end - s));
    const char *e = nl ? nl : end;
    *pos = nl ? nl + 1 : end;
    if (e > s && e[-1] == '\r') e--;
    if ((size_t)(e - s) > MD_CSV_MAX_LINE)
        return md_errf(MD_ERR_DATA, "%s: line %lld: longer than %d bytes; not a time-series CSV file", ps->name, line,
                       MD_CSV_MAX_LINE);
    if (memchr(s, '\r', (size_t)(e - s)))
        return md_errf(MD_ERR_DATA, "%s: line %lld: carriage return inside the line (lines end with LF or CR LF)",
                       ps->name, line);
    if (memchr(s, '\0', (size_t)(e - s)))
        return md_errf(MD_ERR_DATA, "%s: line %lld: NUL byte; not a text file", ps->name, line);
    *ls = s;
    *le = e;
    return MD_OK;
}

/* A field's text with "" unescaped, md_malloc'd. */
static char *field_dup(const struct field *f)
{
    char *s = md_malloc(f->n + 1);
    if (!s) return NULL;
    size_t k = 0;
    for (size_t i = 0; i < f->n; i++) {
        s[k++] = f->p[i];
        if (f->esc && f->p[i] == '"') i++;
    }
    s[k] = '\0';
    return s;
}

static int ieq(const char *a, size_t n, const char *b)
{
    if (strlen(b) != n) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = a[i];
        if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
        if (c != b[i]) return 0;
    }
    return 1;
}

/* Strict number: optional sign, digits with an optional point, optional
 * exponent; what strtod accepts beyond that (hex, nan, inf, blanks) is not. */
static const char *parse_num(const char *p, size_t n, double *v)
{
    static const char *const missing[] = {"na", "n/a", "#n/a", "null", "none", "nat", "-", "?", "--"};
    static const char *const nonfinite[] = {"nan", "+nan", "-nan", "inf", "+inf", "-inf",
                                            "infinity", "+infinity", "-infinity"};
    if (n == 0) return "empty cell (missing value)";
    for (size_t i = 0; i < sizeof nonfinite / sizeof *nonfinite; i++)
        if (ieq(p, n, nonfinite[i])) return "NaN/Inf literal (missing or non-finite values are not accepted)";
    for (size_t i = 0; i < sizeof missing / sizeof *missing; i++)
        if (ieq(p, n, missing[i])) return "missing value";
    size_t i = 0, digits = 0;
    if (p[i] == '+' || p[i] == '-') i++;
    while (i < n && is_digit(p[i])) i++, digits++;
    if (i < n && p[i] == '.') {
        i++;
        while (i < n && is_digit(p[i])) i++, digits++;
    }
    if (digits && i < n && (p[i] == 'e' || p[i] == 'E')) {
        size_t e0 = ++i;
        if (i < n && (p[i] == '+' || p[i] == '-')) i++, e0++;
        while (i < n && is_digit(p[i])) i++;
        if (i == e0) digits = 0;
    }
    if (!digits || i != n) return "non-numeric cell";
    /* The cell is followed by a byte that ends a number (',', '"', blank,
     * line end or the buffer's NUL), so strtod stops at its end. */
    char *e;
    errno = 0;
    double x = strtod(p, &e);
    if (e != p + n) return "non-numeric cell";
    if (errno == ERANGE && (x > 1.0 || x < -1.0)) return "number out of range";
    *v = x;
    return NULL;
}

static md_status cell_err(const struct parser *ps, long long line, int c, const char *what, const struct field *f)
{
    int n = f->n > 40 ? 40 : (int)f->n;
    return md_errf(MD_ERR_DATA, "%s: line %lld, column %d (%.64s): %s%s%.*s%s%s", ps->name, line, c + 1,
                   col_name(ps, c), what, f->n ? " '" : "", n, f->p, f->n > 40 ? "..." : "", f->n ? "'" : "");
}

/* ============================================================ splits */

static const char *split_name(int s) { return s == 0 ? "training" : s == 1 ? "validation" : "test"; }

static const char *base_name(const char *path)
{
    const char *b = strrchr(path, '/');
    return b ? b + 1 : path;
}

static md_status make_splits(md_csv_info *in, const char *name, const md_csv_opts *o)
{
    long long n = in->rows, seq = o->seq_len;
    const char *base = base_name(name);
    if (o->train_frac == 0 && o->test_frac == 0 && strncmp(base, "ETTh", 4) == 0 && n >= MD_CSV_ETT_HOUR_ROWS)
        in->rule = MD_CSV_SPLIT_ETT_HOUR;
    else if (o->train_frac == 0 && o->test_frac == 0 && strncmp(base, "ETTm", 4) == 0 &&
             n >= 4LL * MD_CSV_ETT_HOUR_ROWS)
        in->rule = MD_CSV_SPLIT_ETT_MINUTE;
    else
        in->rule = MD_CSV_SPLIT_RATIO;
    if (in->rule != MD_CSV_SPLIT_RATIO) {
        /* Dataset_ETT_hour / _minute: 12, 4 and 4 months of 30 days. */
        long long mo = 30LL * 24 * (in->rule == MD_CSV_SPLIT_ETT_MINUTE ? 4 : 1);
        long long b1[3] = {0, 12 * mo - seq, 12 * mo + 4 * mo - seq}, b2[3] = {12 * mo, 16 * mo, 20 * mo};
        memcpy(in->border1, b1, sizeof b1);
        memcpy(in->border2, b2, sizeof b2);
    } else {
        /* Dataset_Custom: Python's int() truncates the same double products. */
        double tf = o->train_frac == 0 && o->test_frac == 0 ? 0.7 : o->train_frac;
        double sf = o->train_frac == 0 && o->test_frac == 0 ? 0.2 : o->test_frac;
        long long num_train = (long long)((double)n * tf), num_test = (long long)((double)n * sf);
        long long num_vali = n - num_train - num_test;
        long long b1[3] = {0, num_train - seq, n - num_test - seq}, b2[3] = {num_train, num_train + num_vali, n};
        memcpy(in->border1, b1, sizeof b1);
        memcpy(in->border2, b2, sizeof b2);
    }
    for (int s = 0; s < MD_CSV_SPLITS; s++) {
        long long w = in->border2[s] - in->border1[s] - seq - o->pred_len + 1;
        /* A negative border1 (a lookback before the first row) implies a
         * training split too short for one window, reported first. */
        if (w < 1)
            return md_errf(MD_ERR_DATA, "%s: too few rows for one window in the %s split%s: lines %lld-%lld hold "
                           "%lld rows, seq_len + pred_len = %d are needed (%lld data rows)", name, split_name(s),
                           in->rule == MD_CSV_SPLIT_RATIO ? "" : " (ETT's 12/4/4-month borders)",
                           in->border1[s] + 2, in->border2[s] + 1, in->border2[s] - in->border1[s],
                           o->seq_len + o->pred_len, n);
        MD_ASSERT(in->border1[s] >= 0);
        in->windows[s] = w;
    }
    return MD_OK;
}

/* ============================================================ loading */

static md_status check_opts(const md_csv_opts *o)
{
    if (o->seq_len < 1 || o->pred_len < 1 || o->seq_len > (1 << 24) || o->pred_len > (1 << 24))
        return md_errf(MD_ERR_USAGE, "seq_len %d and pred_len %d must each be between 1 and %d", o->seq_len,
                       o->pred_len, 1 << 24);
    if (o->features != MD_CSV_FEATURES_M && o->features != MD_CSV_FEATURES_S && o->features != MD_CSV_FEATURES_MS)
        return md_errf(MD_ERR_USAGE, "features must be M, S or MS");
    if (o->freq != MD_CSV_FREQ_H && o->freq != MD_CSV_FREQ_D) return md_errf(MD_ERR_USAGE, "freq must be h or d");
    if (o->train_frac != 0 || o->test_frac != 0) {
        if (!(o->train_frac > 0 && o->train_frac < 1) || !(o->test_frac > 0 && o->test_frac < 1) ||
            !(o->train_frac + o->test_frac < 1))
            return md_errf(MD_ERR_USAGE, "split fractions train %g, test %g: each must be in (0, 1) and their sum "
                           "below 1 (validation gets the rest)", o->train_frac, o->test_frac);
    }
    return MD_OK;
}

struct name_ref {
    const char *name;
    int col;
};

static int cmp_names(const void *a, const void *b)
{
    const struct name_ref *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : (x->col > y->col) - (x->col < y->col);
}

static md_status read_header(struct parser *ps, const char *ls, const char *le)
{
    if (ls == le) return md_errf(MD_ERR_DATA, "%s: line 1: empty header (expected the column names)", ps->name);
    MD_TRY(split_line(ps, ls, le, 1));
    ps->colnames = md_calloc((size_t)ps->nf, sizeof *ps->colnames);
    if (!ps->colnames) return MD_ERR_OOM;
    ps->n_cols = ps->nf;
    for (int c = 0; c < ps->nf; c++) {
        if (ps->f[c].n == 0)
            return md_errf(MD_ERR_DATA, "%s: line 1, column %d: empty column name", ps->name, c + 1);
        if (!(ps->colnames[c] = field_dup(&ps->f[c]))) return MD_ERR_OOM;
    }
    struct name_ref *idx = md_malloc((size_t)ps->n_cols * sizeof *idx);
    if (!idx) return MD_ERR_OOM;
    for (int c = 0; c < ps->n_cols; c++) idx[c] = (struct name_ref){ps->colnames[c], c};
    qsort(idx, (size_t)ps->n_cols, sizeof *idx, cmp_names);
    /* the leftmost column whose name came before, and that name's first column */
    int dup = -1, first = -1, run = 0;
    for (int k = 1; k < ps->n_cols; k++) {
        if (strcmp(idx[k].name, idx[k - 1].name) != 0) {
            run = k;
            continue;
        }
        if (dup < 0 || idx[k].col < dup) {
            dup = idx[k].col;
            first = idx[run].col;
        }
    }
    md_free(idx);
    if (dup >= 0)
        return md_errf(MD_ERR_DATA, "%s: line 1, column %d: duplicate column name '%.64s' (also column %d)", ps->name,
                       dup + 1, ps->colnames[dup], first + 1);
    return MD_OK;
}

static md_status fit_scaler(md_csv_series *s, const double *raw, const struct parser *ps)
{
    md_csv_info *in = &s->info;
    long long n = in->border2[0]; /* the training part: rows [0, border2[train]) */
    int nv = in->n_vars;
    for (int v = 0; v < nv; v++) {
        double sum = 0, sq = 0, corr = 0;
        for (long long r = 0; r < n; r++) sum += raw[r * nv + v];
        double mean = sum / (double)n;
        for (long long r = 0; r < n; r++) {
            double t = raw[r * nv + v] - mean;
            corr += t;
            sq += t * t;
        }
        double var = (sq - corr * corr / (double)n) / (double)n;
        if (var < 0) var = 0;
        /* sklearn's StandardScaler: a constant feature (within rounding) gets scale 1 */
        double eps = DBL_EPSILON, bound = (double)n * eps * var + ((double)n * mean * eps) * ((double)n * mean * eps);
        double sd = var <= bound ? 1.0 : sqrt(var);
        if (!isfinite(mean) || !isfinite(sd))
            return md_errf(MD_ERR_DATA, "%s: column %d (%.64s): the training part's values are too large to "
                           "standardise", ps->name, s->file_cols[v] + 1, ps->colnames[s->file_cols[v]]);
        s->mean[v] = mean;
        s->std[v] = sd;
    }
    for (long long r = 0; r < in->rows; r++)
        for (int v = 0; v < nv; v++) {
            double z = (raw[r * nv + v] - s->mean[v]) / s->std[v];
            if (!(fabs(z) <= (double)FLT_MAX)) {
                int c = s->file_cols[v];
                return md_errf(MD_ERR_DATA, "%s: line %lld, column %d (%.64s): value %g is out of float range once "
                               "standardised (training mean %g, std %g)", ps->name, r + 2, c + 1, ps->colnames[c],
                               raw[r * nv + v], s->mean[v], s->std[v]);
            }
            s->values[r * nv + v] = (float)z;
        }
    return MD_OK;
}

/* buf[len] must be readable and hold a byte that ends a number (NUL). */
static md_status parse_terminated(const char *buf, size_t len, const char *name, const md_csv_opts *o,
                                  md_csv_series **out)
{
    md_status st = MD_OK;
    struct parser ps = {.name = name};
    md_csv_series *s = NULL;
    double *raw = NULL;
    int *var_of = NULL; /* (n_cols) stored variate of each file column, -1 (checked only), -2 (date) */
    const char *pos = buf, *end = buf + len, *ls, *le;
    if (len >= 3 && memcmp(buf, "\xEF\xBB\xBF", 3) == 0) pos += 3;
    if (pos == end) {
        st = md_errf(MD_ERR_DATA, "%s: empty file (expected a header row of column names)", name);
        goto fail;
    }
    if ((st = next_line(&ps, &pos, end, 1, &ls, &le)) != MD_OK) goto fail;
    if ((st = read_header(&ps, ls, le)) != MD_OK) goto fail;
    int nc = ps.n_cols;

    s = md_calloc(1, sizeof *s);
    if (!s) { st = MD_ERR_OOM; goto fail; }
    md_csv_info *in = &s->info;
    in->n_cols = nc;
    in->seq_len = o->seq_len;
    in->pred_len = o->pred_len;
    in->features = o->features;
    in->freq = o->freq;
    in->date_col = -1;

    /* The date column: named "date", else a first column of dates. */
    for (int c = 0; c < nc && in->date_col < 0; c++)
        if (ieq(ps.colnames[c], strlen(ps.colnames[c]), "date")) in->date_col = c;
    const char *data0 = pos;
    long long rows_cap = 0;
    for (const char *q = data0; q < end; q++) {
        q = memchr(q, '\n', (size_t)(end - q));
        rows_cap++;
        if (!q) break;
    }
    if (rows_cap == 0 || (rows_cap == 1 && data0 == end)) {
        st = md_errf(MD_ERR_DATA, "%s: no data rows after the header", name);
        goto fail;
    }
    if (in->date_col < 0) {
        const char *p2 = data0, *l2, *e2;
        if ((st = next_line(&ps, &p2, end, 2, &l2, &e2)) != MD_OK) goto fail;
        if (e2 > l2 && (st = split_line(&ps, l2, e2, 2)) != MD_OK) goto fail;
        double v;
        int64_t t;
        if (e2 > l2 && ps.nf >= 1 && ps.f[0].n > 0 && parse_num(ps.f[0].p, ps.f[0].n, &v) != NULL &&
            md_csv_parse_time(ps.f[0].p, ps.f[0].n, &t))
            in->date_col = 0;
    }
    int n_num = nc - (in->date_col >= 0);
    if (n_num == 0) {
        st = md_errf(MD_ERR_DATA, "%s: no numeric columns (only '%.64s')", name, ps.colnames[0]);
        goto fail;
    }
    /* The target: named, or the last numeric column. */
    if (o->target && o->target[0]) {
        in->target_col = -1;
        for (int c = 0; c < nc; c++)
            if (strcmp(ps.colnames[c], o->target) == 0) in->target_col = c;
        if (in->target_col < 0) {
            char list[256];
            size_t k = 0;
            list[0] = '\0';
            for (int c = 0; c < nc && k + 4 < sizeof list; c++) {
                if (c == in->date_col) continue;
                int w = snprintf(list + k, sizeof list - k, "%s%s", k ? ", " : "", ps.colnames[c]);
                if (w < 0 || (size_t)w >= sizeof list - k) {
                    snprintf(list + (k < sizeof list - 4 ? k : sizeof list - 4), 4, "...");
                    break;
                }
                k += (size_t)w;
            }
            st = md_errf(MD_ERR_DATA, "%s: line 1: no column named '%.64s' for the target (numeric columns: %s)", name,
                         o->target, list);
            goto fail;
        }
        if (in->target_col == in->date_col) {
            st = md_errf(MD_ERR_DATA, "%s: line 1, column %d: the target '%.64s' is the date column, not a variate",
                         name, in->target_col + 1, o->target);
            goto fail;
        }
    } else {
        in->target_col = nc - 1 == in->date_col ? nc - 2 : nc - 1;
    }
    in->n_vars = o->features == MD_CSV_FEATURES_S ? 1 : n_num;
    in->n_in = in->n_vars;
    in->n_out = o->features == MD_CSV_FEATURES_M ? in->n_vars : 1;
    s->out_off = o->features == MD_CSV_FEATURES_MS ? in->n_vars - 1 : 0;
    in->n_time = in->date_col < 0 ? 0 : o->freq == MD_CSV_FREQ_H ? 4 : 3;

    var_of = md_malloc((size_t)nc * sizeof *var_of);
    s->file_cols = md_malloc((size_t)in->n_vars * sizeof *s->file_cols);
    s->names = md_malloc((size_t)in->n_vars * sizeof *s->names);
    s->mean = md_malloc((size_t)in->n_vars * sizeof *s->mean);
    s->std = md_malloc((size_t)in->n_vars * sizeof *s->std);
    if (!var_of || !s->file_cols || !s->names || !s->mean || !s->std) { st = MD_ERR_OOM; goto fail; }
    {
        int k = 0;
        for (int c = 0; c < nc; c++) {
            var_of[c] = c == in->date_col ? -2 : -1;
            if (c == in->date_col || c == in->target_col || o->features == MD_CSV_FEATURES_S) continue;
            var_of[c] = k;
            s->file_cols[k++] = c;
        }
        var_of[in->target_col] = k;
        s->file_cols[k++] = in->target_col;
        MD_ASSERT(k == in->n_vars);
        for (int v = 0; v < in->n_vars; v++) s->names[v] = ps.colnames[s->file_cols[v]];
    }
    raw = md_malloc((size_t)rows_cap * (size_t)in->n_vars * sizeof *raw);
    if (!raw) { st = MD_ERR_OOM; goto fail; }
    if (in->date_col >= 0) {
        s->stamps = md_malloc((size_t)rows_cap * sizeof *s->stamps);
        if (!s->stamps) { st = MD_ERR_OOM; goto fail; }
    }

    long long row = 0, line = 2;
    while (pos < end) {
        if ((st = next_line(&ps, &pos, end, line, &ls, &le)) != MD_OK) goto fail;
        if (ls == le) {
            /* trailing blank lines end the file; one in the middle is an error */
            const char *q = pos;
            while (q < end && (*q == '\n' || *q == '\r')) q++;
            if (q == end) break;
            st = md_errf(MD_ERR_DATA, "%s: line %lld: empty line between data rows", name, line);
            goto fail;
        }
        if ((st = split_line(&ps, ls, le, line)) != MD_OK) goto fail;
        if (ps.nf != nc) {
            if (ps.nf < nc)
                st = md_errf(MD_ERR_DATA, "%s: line %lld: %d fields but the header has %d columns (column %d (%.64s) "
                             "is missing)", name, line, ps.nf, nc, ps.nf + 1, ps.colnames[ps.nf]);
            else
                st = md_errf(MD_ERR_DATA, "%s: line %lld: %d fields but the header has %d columns (column %d has no "
                             "name)", name, line, ps.nf, nc, nc + 1);
            goto fail;
        }
        MD_ASSERT(row < rows_cap);
        for (int c = 0; c < nc; c++) {
            const struct field *f = &ps.f[c];
            if (var_of[c] == -2) {
                if (!md_csv_parse_time(f->p, f->n, &s->stamps[row])) {
                    st = cell_err(&ps, line, c, f->n ? "not a date or time (expected YYYY-MM-DD or YYYY/M/D, "
                                  "optionally with H:MM[:SS])" : "empty cell (missing time stamp)", f);
                    goto fail;
                }
                continue;
            }
            double v;
            const char *why = parse_num(f->p, f->n, &v);
            if (why) {
                st = cell_err(&ps, line, c, why, f);
                goto fail;
            }
            if (var_of[c] >= 0) raw[row * in->n_vars + var_of[c]] = v;
        }
        row++;
        line++;
    }
    in->rows = row;
    if (row == 0) {
        st = md_errf(MD_ERR_DATA, "%s: no data rows after the header", name);
        goto fail;
    }
    if ((st = make_splits(in, name, o)) != MD_OK) goto fail;

    s->values = md_malloc((size_t)row * (size_t)in->n_vars * sizeof *s->values);
    if (!s->values) { st = MD_ERR_OOM; goto fail; }
    if ((st = fit_scaler(s, raw, &ps)) != MD_OK) goto fail;
    if (s->stamps) {
        s->marks = md_malloc((size_t)row * (size_t)in->n_time * sizeof *s->marks);
        if (!s->marks) { st = MD_ERR_OOM; goto fail; }
        for (long long r = 0; r < row; r++) md_csv_time_features(s->stamps[r], o->freq, s->marks + r * in->n_time);
    }

    s->colnames = ps.colnames;
    ps.colnames = NULL;
    in->names = s->names;
    in->file_cols = s->file_cols;
    in->mean = s->mean;
    in->std = s->std;
    in->values = s->values;
    in->stamps = s->stamps;
    in->marks = s->marks;
    md_free(raw);
    md_free(var_of);
    md_free(ps.f);
    *out = s;
    return MD_OK;
fail:
    md_free(raw);
    md_free(var_of);
    md_free(ps.f);
    if (ps.colnames)
        for (int c = 0; c < ps.n_cols; c++) md_free(ps.colnames[c]);
    md_free(ps.colnames);
    md_csv_series_free(s);
    return st;
}

md_status md_csv_series_parse(const char *buf, size_t len, const char *name, const md_csv_opts *o,
                              md_csv_series **out)
{
    *out = NULL;
    MD_TRY(check_opts(o));
    size_t cap = o->max_bytes ? o->max_bytes : MD_CSV_MAX_BYTES;
    if (len > cap)
        return md_errf(MD_ERR_DATA, "%s: %zu bytes, over the %zu-byte limit for a CSV file", name, len, cap);
    char *copy = md_malloc(len + 1);
    if (!copy) return md_errf(MD_ERR_OOM, "%s: out of memory for a copy of %zu bytes", name, len);
    if (len) memcpy(copy, buf, len);
    copy[len] = '\0';
    md_status st = parse_terminated(copy, len, name, o, out);
    md_free(copy);
    return st;
}

md_status md_csv_series_load(const char *path, const md_csv_opts *o, md_csv_series **out)
{
    *out = NULL;
    MD_TRY(check_opts(o));
    size_t cap = o->max_bytes ? o->max_bytes : MD_CSV_MAX_BYTES;
    md_status st = MD_OK;
    char *b = NULL;
    size_t n = 0, bcap = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return md_errf(MD_ERR_DATA, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0) {
        if (S_ISDIR(sb.st_mode)) {
            st = md_errf(MD_ERR_DATA, "%s: is a directory, not a CSV file", path);
            goto done;
        }
        if (S_ISREG(sb.st_mode) && (unsigned long long)sb.st_size > (unsigned long long)cap) {
            st = md_errf(MD_ERR_DATA, "%s: %lld bytes, over the %zu-byte limit for a CSV file", path,
                         (long long)sb.st_size, cap);
            goto done;
        }
        if (S_ISREG(sb.st_mode)) bcap = (size_t)sb.st_size + 1;
    }
    if (bcap < 4096) bcap = 4096;
    if (!(b = md_malloc(bcap))) { st = MD_ERR_OOM; goto done; }
    for (;;) {
        if (n == bcap - 1) {
            /* full: at the end of a regular file, else grow */
            int ch = fgetc(f);
            if (ch == EOF) break;
            if (n >= cap) {
                st = md_errf(MD_ERR_DATA, "%s: over the %zu-byte limit for a CSV file", path, cap);
                goto done;
            }
            char *p = md_realloc(b, bcap * 2);
            if (!p) { st = MD_ERR_OOM; goto done; }
            b = p;
            bcap *= 2;
            b[n++] = (char)ch;
            continue;
        }
        size_t want = bcap - 1 - n, r = fread(b + n, 1, want, f);
        n += r;
        if (r < want) {
            if (ferror(f)) { st = md_errf(MD_ERR_DATA, "%s: read error: %s", path, strerror(errno)); goto done; }
            break;
        }
    }
    if (n > cap) {
        st = md_errf(MD_ERR_DATA, "%s: over the %zu-byte limit for a CSV file", path, cap);
        goto done;
    }
    b[n] = '\0';
    st = parse_terminated(b, n, path, o, out);
done:
    md_free(b);
    fclose(f);
    return st;
}

void md_csv_series_free(md_csv_series *s)
{
    if (!s) return;
    if (s->colnames)
        for (int c = 0; c < s->info.n_cols; c++) md_free(s->colnames[c]);
    md_free(s->colnames);
    md_free(s->names);
    md_free(s->file_cols);
    md_free(s->mean);
    md_free(s->std);
    md_free(s->values);
    md_free(s->stamps);
    md_free(s->marks);
    md_free(s);
}

const md_csv_info *md_csv_series_info(const md_csv_series *s) { return &s->info; }

/* ============================================================ windows */

void md_csv_series_window(const md_csv_series *s, int split, long long i, float *x, float *y, float *x_mark,
                          float *y_mark)
{
    const md_csv_info *in = &s->info;
    MD_ASSERT(split >= 0 && split < MD_CSV_SPLITS && i >= 0 && i < in->windows[split]);
    long long r0 = in->border1[split] + i, r1 = r0 + in->seq_len;
    int nv = in->n_vars, nt = in->n_time;
    if (x) memcpy(x, s->values + r0 * nv, (size_t)in->seq_len * (size_t)nv * sizeof *x);
    if (y) {
        if (in->n_out == nv) {
            memcpy(y, s->values + r1 * nv, (size_t)in->pred_len * (size_t)nv * sizeof *y);
        } else {
            for (int t = 0; t < in->pred_len; t++)
                for (int c = 0; c < in->n_out; c++) y[t * in->n_out + c] = s->values[(r1 + t) * nv + s->out_off + c];
        }
    }
    if (nt && x_mark) memcpy(x_mark, s->marks + r0 * nt, (size_t)in->seq_len * (size_t)nt * sizeof *x_mark);
    if (nt && y_mark) memcpy(y_mark, s->marks + r1 * nt, (size_t)in->pred_len * (size_t)nt * sizeof *y_mark);
}

void md_csv_series_inverse(const md_csv_series *s, float *v, long long rows, int outputs)
{
    const md_csv_info *in = &s->info;
    int n = outputs ? in->n_out : in->n_in, off = outputs ? s->out_off : 0;
    for (long long r = 0; r < rows; r++)
        for (int c = 0; c < n; c++)
            v[r * n + c] = (float)((double)v[r * n + c] * s->std[off + c] + s->mean[off + c]);
}

void md_csv_series_naive(const md_csv_series *s, int split, int original_units, double *mse, double *mae)
{
    const md_csv_info *in = &s->info;
    MD_ASSERT(split >= 0 && split < MD_CSV_SPLITS);
    int nv = in->n_vars;
    double se = 0, ae = 0;
    for (long long i = 0; i < in->windows[split]; i++) {
        long long last = in->border1[split] + i + in->seq_len - 1;
        for (int t = 1; t <= in->pred_len; t++)
            for (int c = s->out_off; c < s->out_off + in->n_out; c++) {
                double e = (double)s->values[(last + t) * nv + c] - (double)s->values[last * nv + c];
                if (original_units) e *= s->std[c];
                se += e * e;
                ae += fabs(e);
            }
    }
    double cnt = (double)in->windows[split] * in->pred_len * in->n_out;
    *mse = se / cnt;
    *mae = ae / cnt;
}
