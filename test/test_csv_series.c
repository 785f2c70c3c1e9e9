/* test_csv_series.c - the CSV time-series reader (src/data/csv_series.c):
 * strict parsing with one exact message per kind of bad input, the accepted
 * variants (CR LF, BOM, quotes, no final newline), the date column, the
 * features modes, the split borders and window counts of the public
 * forecasting code, the training-part scaler, windows element by element,
 * timeF features, the naive baseline, and the fuzz smoke run.
 *
 * Reference numbers come from scripts/csv_series_ref.py (the public code's
 * formulas, numpy). The real-data tests read ../shared/data/timeseries and
 * are skipped when it is absent. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/mem.h"
#include "data/csv_series.h"
#include "fuzz/fuzz_csv.h"
#include "fuzz/fuzz_one.h"
#include "helpers.h"

#define SAMPLE "data/timeseries-sample/sample_ETTh2_first1728.csv"
#define SHARED "../shared/data/timeseries"

static md_csv_opts small_opts(int seq, int pred)
{
    md_csv_opts o;
    md_csv_opts_default(&o);
    o.seq_len = seq;
    o.pred_len = pred;
    return o;
}

/* "date,a,b,OT" and `rows` hourly rows (a = r, b = 2r, OT = 3r + 0.5), with
 * file line `bad_line` (1 = the header) replaced by `bad` when given.
 * Caller frees. */
static char *tiny(int rows, int bad_line, const char *bad)
{
    size_t cap = 64 + (size_t)rows * 64 + (bad ? strlen(bad) : 0);
    char *b = malloc(cap);
    size_t k = 0;
    for (int line = 1; line <= rows + 1; line++) {
        if (line == bad_line) k += (size_t)snprintf(b + k, cap - k, "%s\n", bad);
        else if (line == 1) k += (size_t)snprintf(b + k, cap - k, "date,a,b,OT\n");
        else {
            int r = line - 2;
            k += (size_t)snprintf(b + k, cap - k, "2020-01-%02d %02d:00:00,%d,%d,%d.5\n", 1 + r / 24, r % 24, r,
                                  2 * r, 3 * r);
        }
    }
    return b;
}

static md_status parse_str(const char *text, const md_csv_opts *o, md_csv_series **s)
{
    return md_csv_series_parse(text, strlen(text), "t.csv", o, s);
}

static void expect_err(const char *text, const md_csv_opts *o, const char *msg)
{
    md_csv_series *s = NULL;
    md_status st = parse_str(text, o, &s);
    cr_assert_eq(st, MD_ERR_DATA, "status %d for %s", st, msg);
    cr_assert_null(s);
    cr_expect_str_eq(md_errmsg(), msg);
}

/* Line `line` of tiny(10) replaced by `bad` must fail with `msg`. */
static void expect_line_err(int line, const char *bad, const char *msg)
{
    char *t = tiny(10, line, bad);
    md_csv_opts o = small_opts(2, 1);
    expect_err(t, &o, msg);
    free(t);
}

/* ============================================================ errors */

Test(csv_parse, empty_cell)
{
    expect_line_err(4, "2020-01-01 02:00:00,,4,6.5", "t.csv: line 4, column 2 (a): empty cell (missing value)");
    expect_line_err(5, "2020-01-01 03:00:00,3,6,", "t.csv: line 5, column 4 (OT): empty cell (missing value)");
    expect_line_err(5, "2020-01-01 03:00:00,3,  ,1", "t.csv: line 5, column 3 (b): empty cell (missing value)");
    expect_line_err(6, ",3,6,1", "t.csv: line 6, column 1 (date): empty cell (missing time stamp)");
}

Test(csv_parse, missing_value_markers)
{
    expect_line_err(4, "2020-01-01 02:00:00,NA,4,6.5", "t.csv: line 4, column 2 (a): missing value 'NA'");
    expect_line_err(4, "2020-01-01 02:00:00,2,null,6.5", "t.csv: line 4, column 3 (b): missing value 'null'");
}

Test(csv_parse, non_numeric)
{
    expect_line_err(3, "2020-01-01 01:00:00,abc,2,3.5", "t.csv: line 3, column 2 (a): non-numeric cell 'abc'");
    expect_line_err(3, "2020-01-01 01:00:00,1,2,3.5x", "t.csv: line 3, column 4 (OT): non-numeric cell '3.5x'");
    expect_line_err(3, "2020-01-01 01:00:00,0x10,2,3", "t.csv: line 3, column 2 (a): non-numeric cell '0x10'");
    expect_line_err(3, "2020-01-01 01:00:00,1e,2,3", "t.csv: line 3, column 2 (a): non-numeric cell '1e'");
    expect_line_err(3, "2020-01-01 01:00:00,1 2,2,3", "t.csv: line 3, column 2 (a): non-numeric cell '1 2'");
    expect_line_err(3, "2020-01-01 01:00:00,1,2,1e999", "t.csv: line 3, column 4 (OT): number out of range '1e999'");
}

Test(csv_parse, nan_inf_literals)
{
    const char *lit[] = {"nan", "NaN", "-inf", "Inf", "+Infinity"};
    for (int i = 0; i < 5; i++) {
        char line[128], msg[256];
        snprintf(line, sizeof line, "2020-01-01 03:00:00,3,%s,9.5", lit[i]);
        snprintf(msg, sizeof msg,
                 "t.csv: line 5, column 3 (b): NaN/Inf literal (missing or non-finite values are not accepted) '%s'",
                 lit[i]);
        expect_line_err(5, line, msg);
    }
}

Test(csv_parse, ragged_rows)
{
    expect_line_err(7, "2020-01-01 05:00:00,5,10",
                    "t.csv: line 7: 3 fields but the header has 4 columns (column 4 (OT) is missing)");
    expect_line_err(7, "2020-01-01 05:00:00,5,10,15.5,1",
                    "t.csv: line 7: 5 fields but the header has 4 columns (column 5 has no name)");
}

Test(csv_parse, header_names)
{
    expect_line_err(1, "date,a,a,OT", "t.csv: line 1, column 3: duplicate column name 'a' (also column 2)");
    expect_line_err(1, "OT,a,b,OT", "t.csv: line 1, column 4: duplicate column name 'OT' (also column 1)");
    expect_line_err(1, "date,a,,OT", "t.csv: line 1, column 3: empty column name");
    expect_line_err(1, "date,a,\"\",OT", "t.csv: line 1, column 3: empty column name");
    md_csv_opts o = small_opts(2, 1);
    expect_err("", &o, "t.csv: empty file (expected a header row of column names)");
    expect_err("\xEF\xBB\xBF", &o, "t.csv: empty file (expected a header row of column names)");
    expect_err("\n1,2\n", &o, "t.csv: line 1: empty header (expected the column names)");
    expect_err("date,a\n", &o, "t.csv: no data rows after the header");
    expect_err("date,a", &o, "t.csv: no data rows after the header");
    expect_err("date,a\n\n\n", &o, "t.csv: no data rows after the header");
    expect_err("date\n2020-01-01\n", &o, "t.csv: no numeric columns (only 'date')");
}

Test(csv_parse, unknown_target)
{
    char *t = tiny(10, 0, NULL);
    md_csv_opts o = small_opts(2, 1);
    o.target = "XX";
    expect_err(t, &o, "t.csv: line 1: no column named 'XX' for the target (numeric columns: a, b, OT)");
    o.target = "date";
    expect_err(t, &o, "t.csv: line 1, column 1: the target 'date' is the date column, not a variate");
    free(t);
}

Test(csv_parse, too_few_rows)
{
    char *t = tiny(10, 0, NULL);
    md_csv_opts o = small_opts(4, 2);
    /* 70/10/20 of 10 rows: train 7, test 2, val 1; the validation split has
     * rows 3..7, 5 rows, below 4 + 2 */
    expect_err(t, &o, "t.csv: too few rows for one window in the validation split: lines 5-9 hold 5 rows, seq_len + "
                      "pred_len = 6 are needed (10 data rows)");
    o = small_opts(8, 1);
    expect_err(t, &o, "t.csv: too few rows for one window in the training split: lines 2-8 hold 7 rows, seq_len + "
                      "pred_len = 9 are needed (10 data rows)");
    o = small_opts(2, 2); /* 6/3/1 rows: test rows 7..9 */
    o.train_frac = 0.6;
    o.test_frac = 0.1;
    expect_err(t, &o, "t.csv: too few rows for one window in the test split: lines 9-11 hold 3 rows, seq_len + "
                      "pred_len = 4 are needed (10 data rows)");
    o = small_opts(2, 6);
    expect_err(t, &o, "t.csv: too few rows for one window in the training split: lines 2-8 hold 7 rows, seq_len + "
                      "pred_len = 8 are needed (10 data rows)");
    free(t);
}

Test(csv_parse, quotes)
{
    expect_line_err(4, "2020-01-01 02:00:00,\"2,4,6.5",
                    "t.csv: line 4, column 2: unterminated quote (a quoted field must end on its line)");
    expect_line_err(4, "2020-01-01 02:00:00,\"2\"x,4,6.5", "t.csv: line 4, column 2: text after the closing quote");
    expect_line_err(4, "2020-01-01 02:00:00,2,4\"4,6.5", "t.csv: line 4, column 3: quote inside an unquoted field");
    expect_line_err(1, "date,\"a\nb\",b,OT",
                    "t.csv: line 1, column 2: unterminated quote (a quoted field must end on its line)");
}

Test(csv_parse, stray_bytes_and_blank_lines)
{
    expect_line_err(4, "2020-01-01 02:00:00,2,4\r,6.5",
                    "t.csv: line 4: carriage return inside the line (lines end with LF or CR LF)");
    expect_line_err(6, "", "t.csv: line 6: empty line between data rows");
    char t[] = "date,a\n2020-01-01,1\n2020-01-02,X\n";
    t[29] = '\0';
    md_csv_series *s = NULL;
    md_csv_opts o = small_opts(2, 1);
    cr_assert_eq(md_csv_series_parse(t, sizeof t - 1, "t.csv", &o, &s), MD_ERR_DATA);
    cr_expect_str_eq(md_errmsg(), "t.csv: line 3: NUL byte; not a text file");
}

Test(csv_parse, bad_dates)
{
    expect_line_err(3, "2020-13-01 01:00:00,1,2,3.5",
                    "t.csv: line 3, column 1 (date): not a date or time (expected YYYY-MM-DD or YYYY/M/D, optionally "
                    "with H:MM[:SS]) '2020-13-01 01:00:00'");
    expect_line_err(9, "yesterday,1,2,3.5",
                    "t.csv: line 9, column 1 (date): not a date or time (expected YYYY-MM-DD or YYYY/M/D, optionally "
                    "with H:MM[:SS]) 'yesterday'");
}

Test(csv_parse, long_line)
{
    size_t n = MD_CSV_MAX_LINE + 100;
    char *bad = malloc(n + 1);
    memset(bad, '1', n);
    memcpy(bad, "2020-01-01 02:00:00,", 20);
    bad[n] = '\0';
    expect_line_err(4, bad, "t.csv: line 4: longer than 262144 bytes; not a time-series CSV file");
    free(bad);
}

Test(csv_parse, size_cap)
{
    char *t = tiny(10, 0, NULL);
    md_csv_opts o = small_opts(2, 1);
    o.max_bytes = 100;
    char msg[128];
    snprintf(msg, sizeof msg, "t.csv: %zu bytes, over the 100-byte limit for a CSV file", strlen(t));
    expect_err(t, &o, msg);
    /* the same from a file */
    char *dir = th_tmpdir();
    char *path = th_write(dir, "big.csv", t);
    md_csv_series *s = NULL;
    cr_assert_eq(md_csv_series_load(path, &o, &s), MD_ERR_DATA);
    snprintf(msg, sizeof msg, "%s: %zu bytes, over the 100-byte limit for a CSV file", path, strlen(t));
    cr_expect_str_eq(md_errmsg(), msg);
    cr_assert_eq(md_csv_series_load(dir, &o, &s), MD_ERR_DATA);
    snprintf(msg, sizeof msg, "%s: is a directory, not a CSV file", dir);
    cr_expect_str_eq(md_errmsg(), msg);
    free(path);
    path = th_write(dir, "nothere", "");
    remove(path);
    cr_assert_eq(md_csv_series_load(path, &o, &s), MD_ERR_DATA);
    snprintf(msg, sizeof msg, "%s: cannot open: No such file or directory", path);
    cr_expect_str_eq(md_errmsg(), msg);
    free(path);
    th_tmpdir_free(dir);
    free(t);
}

Test(csv_parse, bad_options)
{
    char *t = tiny(10, 0, NULL);
    md_csv_series *s = NULL;
    md_csv_opts o = small_opts(0, 1);
    cr_expect_eq(parse_str(t, &o, &s), MD_ERR_USAGE);
    o = small_opts(2, 1);
    o.train_frac = 0.8;
    o.test_frac = 0.2;
    cr_expect_eq(parse_str(t, &o, &s), MD_ERR_USAGE);
    cr_expect_str_eq(md_errmsg(), "split fractions train 0.8, test 0.2: each must be in (0, 1) and their sum below 1 "
                                  "(validation gets the rest)");
    cr_expect_null(s);
    free(t);
}

/* ============================================================ accepted variants */

static md_csv_series *must_parse(const char *text, size_t n, const char *name, const md_csv_opts *o)
{
    md_csv_series *s = NULL;
    md_status st = md_csv_series_parse(text, n, name, o, &s);
    cr_assert_eq(st, MD_OK, "%s", md_errmsg());
    return s;
}

static void same_series(const md_csv_series *a, const md_csv_series *b)
{
    const md_csv_info *x = md_csv_series_info(a), *y = md_csv_series_info(b);
    cr_assert_eq(x->rows, y->rows);
    cr_assert_eq(x->n_vars, y->n_vars);
    cr_assert_eq(x->date_col, y->date_col);
    for (int v = 0; v < x->n_vars; v++) cr_assert_str_eq(x->names[v], y->names[v]);
    cr_assert_eq(memcmp(x->values, y->values, (size_t)x->rows * (size_t)x->n_vars * sizeof(float)), 0);
    if (x->stamps) cr_assert_eq(memcmp(x->stamps, y->stamps, (size_t)x->rows * sizeof(int64_t)), 0);
}

Test(csv_parse, variants_read_alike)
{
    md_csv_opts o = small_opts(2, 1);
    const char *plain = "date,HUFL,\"M,x\",OT\n2016-07-01 00:00:00,1,2,3\n2016-07-01 01:00:00,4,5,6\n"
                        "2016-07-01 02:00:00,7,8,9.5\n2016-07-01 03:00:00,1.5,-2,3e2\n"
                        "2016-07-01 04:00:00,10,11,12\n2016-07-01 05:00:00,13,14,15\n"
                        "2016-07-01 06:00:00,16,17,18\n2016-07-01 07:00:00,19,20,21\n"
                        "2016-07-01 08:00:00,22,23,24\n2016-07-01 09:00:00,25,26,27\n";
    md_csv_series *a = must_parse(plain, strlen(plain), "t.csv", &o);
    const md_csv_info *in = md_csv_series_info(a);
    cr_assert_eq(in->rows, 10);
    cr_assert_str_eq(in->names[1], "M,x");
    cr_assert_eq(in->date_col, 0);
    /* CR LF, a BOM, quoted header and cells, blanks, no final line ending */
    const char *crlf = "\xEF\xBB\xBF\"date\", HUFL ,\"M,x\",\"OT\"\r\n2016-07-01 00:00:00,1,\"2\",3\r\n"
                       "2016-07-01 01:00:00,4,5,6\r\n2016-07-01 02:00:00, 7 ,8,9.5\r\n"
                       "\"2016-07-01 03:00:00\",1.5,-2,3e2\r\n2016-07-01 04:00:00,10,11,12\r\n"
                       "2016-07-01 05:00:00,13,14,15\r\n2016-07-01 06:00:00,16,17,18\r\n"
                       "2016-07-01 07:00:00,19,20,21\r\n2016-07-01 08:00:00,22,23,24\r\n"
                       "2016-07-01 09:00:00,25,26,+27.0";
    md_csv_series *b = must_parse(crlf, strlen(crlf), "t.csv", &o);
    same_series(a, b);
    md_csv_series_free(b);
    /* trailing blank lines */
    char *more = malloc(strlen(plain) + 8);
    sprintf(more, "%s\n\r\n\n", plain);
    b = must_parse(more, strlen(more), "t.csv", &o);
    same_series(a, b);
    md_csv_series_free(b);
    free(more);
    md_csv_series_free(a);
}

Test(csv_parse, quoted_escapes_in_names)
{
    md_csv_opts o = small_opts(1, 1);
    const char *t = "\"a \"\"q\"\"\",b\n1,2\n3,4\n5,6\n7,8\n9,10\n11,12\n13,14\n15,16\n17,18\n19,20\n";
    md_csv_series *s = must_parse(t, strlen(t), "t.csv", &o);
    const md_csv_info *in = md_csv_series_info(s);
    cr_assert_eq(in->date_col, -1);
    cr_assert_eq(in->n_vars, 2);
    cr_assert_str_eq(in->names[0], "a \"q\"");
    md_csv_series_free(s);
}

Test(csv_parse, date_column_detection)
{
    md_csv_opts o = small_opts(1, 1);
    /* named date, anywhere, any case */
    const char *t1 = "x,Date\n1,2016-07-01\n2,2016-07-02\n3,2016-07-03\n4,2016-07-04\n5,2016-07-05\n"
                     "6,2016-07-06\n7,2016-07-07\n8,2016-07-08\n9,2016-07-09\n10,2016-07-10\n";
    md_csv_series *s = must_parse(t1, strlen(t1), "t.csv", &o);
    cr_expect_eq(md_csv_series_info(s)->date_col, 1);
    cr_expect_eq(md_csv_series_info(s)->n_vars, 1);
    cr_expect_eq(md_csv_series_info(s)->target_col, 0);
    md_csv_series_free(s);
    /* by content: exchange_rate's "1990/1/1 0:00" */
    const char *t2 = "time,a\n1990/1/1 0:00,1\n1990/1/2 0:00,2\n1990/1/3 0:00,3\n1990/1/4 0:00,4\n1990/1/5 0:00,5\n"
                     "1990/1/6 0:00,6\n1990/1/7 0:00,7\n1990/1/8 0:00,8\n1990/1/9 0:00,9\n1990/1/10 0:00,10\n";
    s = must_parse(t2, strlen(t2), "t.csv", &o);
    const md_csv_info *in = md_csv_series_info(s);
    cr_expect_eq(in->date_col, 0);
    cr_expect_eq(in->n_time, 4);
    char buf[32];
    md_csv_format_time(in->stamps[9], buf, sizeof buf);
    cr_expect_str_eq(buf, "1990-01-10 00:00:00");
    md_csv_series_free(s);
    /* a numeric first column is a variate */
    const char *t3 = "i,a\n1,1\n2,2\n3,3\n4,4\n5,5\n6,6\n7,7\n8,8\n9,9\n10,10\n";
    s = must_parse(t3, strlen(t3), "t.csv", &o);
    cr_expect_eq(md_csv_series_info(s)->date_col, -1);
    cr_expect_eq(md_csv_series_info(s)->n_vars, 2);
    cr_expect_eq(md_csv_series_info(s)->n_time, 0);
    cr_expect_null(md_csv_series_info(s)->marks);
    md_csv_series_free(s);
    /* a first column of words that are no dates is not taken for dates */
    expect_err("name,a\nx,1\ny,2\n", &o, "t.csv: line 2, column 1 (name): non-numeric cell 'x'");
}

/* ============================================================ features, windows */

/* Standardised value of tiny()'s column (a: k=1, b: 2, OT: 3) at row r, with
 * the scaler fitted on rows [0, ntrain). */
static double tiny_z(int col, int r, int ntrain)
{
    double off = col == 3 ? 0.5 : 0, mean = 0, var = 0;
    for (int i = 0; i < ntrain; i++) mean += col * i + off;
    mean /= ntrain;
    for (int i = 0; i < ntrain; i++) var += (col * i + off - mean) * (col * i + off - mean);
    return (col * r + off - mean) / sqrt(var / ntrain);
}

Test(csv_window, modes_element_by_element)
{
    char *t = tiny(40, 0, NULL); /* 70/10/20: train 28, test 8, val 4 */
    const md_csv_features modes[] = {MD_CSV_FEATURES_M, MD_CSV_FEATURES_S, MD_CSV_FEATURES_MS};
    for (int m = 0; m < 3; m++) {
        md_csv_opts o = small_opts(3, 2);
        o.features = modes[m];
        o.target = "a"; /* not the last column: stored last, as Dataset_Custom orders it */
        md_csv_series *s = must_parse(t, strlen(t), "t.csv", &o);
        const md_csv_info *in = md_csv_series_info(s);
        int n_in = m == 1 ? 1 : 3, n_out = m == 0 ? 3 : 1;
        cr_assert_eq(in->n_in, n_in);
        cr_assert_eq(in->n_out, n_out);
        cr_assert_str_eq(in->names[n_in - 1], "a");
        if (m != 1) {
            cr_assert_str_eq(in->names[0], "b");
            cr_assert_str_eq(in->names[1], "OT");
        }
        int order[3] = {2, 3, 1}; /* file columns of the stored variates (M, MS) */
        if (m == 1) order[0] = 1;
        cr_assert_eq(in->border1[2], 40 - 8 - 3);
        cr_assert_eq(in->windows[2], 8 + 3 - 3 - 2 + 1);
        float x[3 * 3], y[2 * 3], xm[3 * 4], ym[2 * 4];
        for (int sp = 0; sp < 3; sp++)
            for (long long i = 0; i < in->windows[sp]; i++) {
                md_csv_series_window(s, sp, i, x, y, xm, ym);
                int r0 = (int)(in->border1[sp] + i);
                for (int tt = 0; tt < 3; tt++)
                    for (int c = 0; c < n_in; c++)
                        cr_assert_float_eq(x[tt * n_in + c], tiny_z(order[c], r0 + tt, 28), 2e-6, "x split %d i %lld",
                                           sp, i);
                for (int tt = 0; tt < 2; tt++)
                    for (int c = 0; c < n_out; c++) {
                        int fc = n_out == 1 ? 1 : order[c];
                        cr_assert_float_eq(y[tt * n_out + c], tiny_z(fc, r0 + 3 + tt, 28), 2e-6);
                    }
                for (int tt = 0; tt < 5; tt++) {
                    int r = r0 + tt;
                    float *mk = tt < 3 ? xm + tt * 4 : ym + (tt - 3) * 4;
                    cr_assert_float_eq(mk[0], (float)((r % 24) / 23.0 - 0.5), 1e-7);
                    cr_assert_float_eq(mk[2], (float)((r / 24) / 30.0 - 0.5), 1e-7);
                }
            }
        /* inverse transform back to the file's units */
        md_csv_series_window(s, 2, 1, x, y, NULL, NULL);
        md_csv_series_inverse(s, y, 2, 1);
        md_csv_series_inverse(s, x, 3, 0);
        int r0 = (int)in->border1[2] + 1;
        cr_assert_float_eq(y[0], n_out == 1 ? (float)(r0 + 3) : (float)(2 * (r0 + 3)), 1e-4);
        cr_assert_float_eq(x[(n_in - 1)], (float)r0, 1e-4);
        md_csv_series_free(s);
    }
    free(t);
}

/* ============================================================ splits */

Test(csv_split, ett_rule_needs_the_full_length)
{
    /* ETTh* with 14,400 rows: the 12/4/4-month borders */
    int rows = 14400;
    char *b = malloc((size_t)rows * 16 + 16);
    size_t k = (size_t)sprintf(b, "HUFL,OT\n");
    for (int r = 0; r < rows; r++) k += (size_t)sprintf(b + k, "%d,%d\n", r % 97, r % 13);
    md_csv_opts o = small_opts(96, 96);
    md_csv_series *s = must_parse(b, k, "/some/dir/ETTh1.csv", &o);
    const md_csv_info *in = md_csv_series_info(s);
    cr_assert_eq(in->rule, MD_CSV_SPLIT_ETT_HOUR);
    long long b1[3] = {0, 8544, 11424}, b2[3] = {8640, 11520, 14400}, w[3] = {8449, 2785, 2785};
    for (int i = 0; i < 3; i++) {
        cr_expect_eq(in->border1[i], b1[i]);
        cr_expect_eq(in->border2[i], b2[i]);
        cr_expect_eq(in->windows[i], w[i]);
    }
    md_csv_series_free(s);
    /* explicit fractions override it */
    o.train_frac = 0.6;
    o.test_frac = 0.3;
    s = must_parse(b, k, "ETTh1.csv", &o);
    in = md_csv_series_info(s);
    cr_expect_eq(in->rule, MD_CSV_SPLIT_RATIO);
    cr_expect_eq(in->border2[0], 8640);
    cr_expect_eq(in->border1[2], 14400 - 4320 - 96);
    md_csv_series_free(s);
    /* one row short: 70/10/20 */
    o = small_opts(96, 96);
    size_t cut = k - 1;
    while (b[cut - 1] != '\n') cut--;
    s = must_parse(b, cut, "ETTh1.csv", &o);
    in = md_csv_series_info(s);
    cr_expect_eq(in->rows, 14399);
    cr_expect_eq(in->rule, MD_CSV_SPLIT_RATIO);
    cr_expect_eq(in->border2[0], 10079);
    md_csv_series_free(s);
    /* the name must start with ETTh */
    s = must_parse(b, k, "sample_ETTh1.csv", &o);
    cr_expect_eq(md_csv_series_info(s)->rule, MD_CSV_SPLIT_RATIO);
    md_csv_series_free(s);
    free(b);
}

struct split_case {
    int file; /* 0 ETTh2, 1 exchange_rate, 2 the sample */
    int seq, pred;
    long long b1[3], b2[3], w[3];
};

/* scripts/csv_series_ref.py */
static const struct split_case split_cases[] = {
    {0, 96, 96, {0, 8544, 11424}, {8640, 11520, 14400}, {8449, 2785, 2785}},
    {0, 96, 720, {0, 8544, 11424}, {8640, 11520, 14400}, {7825, 2161, 2161}},
    {0, 336, 336, {0, 8304, 11184}, {8640, 11520, 14400}, {7969, 2545, 2545}},
    {0, 720, 96, {0, 7920, 10800}, {8640, 11520, 14400}, {7825, 2785, 2785}},
    {1, 96, 96, {0, 5215, 5975}, {5311, 6071, 7588}, {5120, 665, 1422}},
    {1, 96, 720, {0, 5215, 5975}, {5311, 6071, 7588}, {4496, 41, 798}},
    {1, 336, 336, {0, 4975, 5735}, {5311, 6071, 7588}, {4640, 425, 1182}},
    {1, 720, 96, {0, 4591, 5351}, {5311, 6071, 7588}, {4496, 665, 1422}},
    {2, 96, 96, {0, 1113, 1287}, {1209, 1383, 1728}, {1018, 79, 250}},
    {2, 48, 24, {0, 1161, 1335}, {1209, 1383, 1728}, {1138, 151, 322}},
};

static void check_splits(int file, const char *path)
{
    for (size_t c = 0; c < sizeof split_cases / sizeof *split_cases; c++) {
        const struct split_case *sc = &split_cases[c];
        if (sc->file != file) continue;
        md_csv_opts o = small_opts(sc->seq, sc->pred);
        md_csv_series *s = NULL;
        cr_assert_eq(md_csv_series_load(path, &o, &s), MD_OK, "%s", md_errmsg());
        const md_csv_info *in = md_csv_series_info(s);
        for (int i = 0; i < 3; i++) {
            cr_expect_eq(in->border1[i], sc->b1[i], "%s seq %d pred %d split %d", path, sc->seq, sc->pred, i);
            cr_expect_eq(in->border2[i], sc->b2[i], "%s seq %d pred %d split %d", path, sc->seq, sc->pred, i);
            cr_expect_eq(in->windows[i], sc->w[i], "%s seq %d pred %d split %d", path, sc->seq, sc->pred, i);
        }
        md_csv_series_free(s);
    }
}

static int have_shared(void)
{
    struct stat sb;
    return stat(SHARED "/ETTh2.csv", &sb) == 0 && stat(SHARED "/exchange_rate.csv", &sb) == 0;
}

Test(csv_split, sample_borders) { check_splits(2, SAMPLE); }

Test(csv_split, etth2_borders)
{
    if (!have_shared()) cr_skip("no " SHARED " beside the checkout");
    check_splits(0, SHARED "/ETTh2.csv");
    md_csv_opts o = small_opts(96, 96);
    md_csv_series *s = NULL;
    cr_assert_eq(md_csv_series_load(SHARED "/ETTh2.csv", &o, &s), MD_OK, "%s", md_errmsg());
    const md_csv_info *in = md_csv_series_info(s);
    cr_expect_eq(in->rows, 17420);
    cr_expect_eq(in->rule, MD_CSV_SPLIT_ETT_HOUR);
    /* numpy, rows 0..8639, ddof 0 */
    static const double mean[7] = {41.536834960789591, 12.273452896210882, 46.609773299649909, 10.526153112865156,
                                   1.1869920139097505, -2.3732179137291731, 26.872023494265697};
    static const double sd[7] = {10.448841072588467, 4.5871125665319719, 16.858190332598138, 3.0186055666828908,
                                 4.6410112173190621, 8.4609107792797129, 11.584718923414668};
    cr_expect(th_allclose_d("ETTh2 mean", in->mean, mean, 7, 0, 1e-12));
    cr_expect(th_allclose_d("ETTh2 std", in->std, sd, 7, 0, 1e-12));
    md_csv_series_free(s);
}

Test(csv_split, exchange_rate_borders)
{
    if (!have_shared()) cr_skip("no " SHARED " beside the checkout");
    check_splits(1, SHARED "/exchange_rate.csv"); /* CR LF, no final line ending, "1990/1/1 0:00" dates */
}

/* ============================================================ scaler, sample */

static const double sample_mean[7] = {47.576134851296345, 15.560270467999555, 45.371049609629942, 13.113567398046047,
                                      1.9343217526515522, 0.097606286616045354, 42.259468987325285};
static const double sample_std[7] = {7.7912972123301643, 3.8514442075054829, 7.872656306361117, 2.7555416050618033,
                                     1.0452721124585223, 0.33883974865905969, 6.717712573470358};

Test(csv_scaler, sample_training_part)
{
    md_csv_opts o = small_opts(96, 96);
    md_csv_series *s = NULL;
    cr_assert_eq(md_csv_series_load(SAMPLE, &o, &s), MD_OK, "%s", md_errmsg());
    const md_csv_info *in = md_csv_series_info(s);
    cr_assert_eq(in->rows, 1728);
    cr_assert_eq(in->n_vars, 7);
    cr_assert_str_eq(in->names[6], "OT");
    cr_expect(th_allclose_d("sample mean", in->mean, sample_mean, 7, 0, 1e-12));
    cr_expect(th_allclose_d("sample std", in->std, sample_std, 7, 0, 1e-12));
    /* test window 5 against numpy's float32 values */
    float x[96 * 7], y[96 * 7];
    md_csv_series_window(s, 2, 5, x, y, NULL, NULL);
    static const float w5[4] = {1.37677538f, -0.61910522f, -0.717277944f, -0.887145996f};
    float got[4] = {x[0], x[95 * 7 + 6], y[6], y[95 * 7 + 3]};
    cr_expect(th_allclose("sample window", got, w5, 4, 1e-6, 1e-6));
    md_csv_series_free(s);
}

Test(csv_scaler, constant_column_scale_one)
{
    md_csv_opts o = small_opts(1, 1);
    const char *t = "a,b\n5,1\n5,2\n5,3\n5,4\n5,5\n5,6\n5,7\n5,8\n5,9\n5,10\n";
    md_csv_series *s = must_parse(t, strlen(t), "t.csv", &o);
    const md_csv_info *in = md_csv_series_info(s);
    cr_expect_eq(in->mean[0], 5.0);
    cr_expect_eq(in->std[0], 1.0); /* as sklearn's StandardScaler */
    cr_expect_eq(in->values[0], 0.0f);
    md_csv_series_free(s);
}

/* ============================================================ naive baseline */

Test(csv_naive, by_hand)
{
    /* train rows 0..6 = 1 2 4 7 11 16 22: mean 9, population variance 52 */
    const char *t = "v\n1\n2\n4\n7\n11\n16\n22\n29\n37\n46\n";
    md_csv_opts o = small_opts(2, 1);
    md_csv_series *s = must_parse(t, strlen(t), "t.csv", &o);
    const md_csv_info *in = md_csv_series_info(s);
    cr_assert_eq(in->windows[1], 1);
    cr_assert_eq(in->windows[2], 2);
    double mse, mae;
    md_csv_series_naive(s, 1, 1, &mse, &mae); /* 22 -> 29 */
    cr_expect_float_eq(mse, 49.0, 1e-4);
    cr_expect_float_eq(mae, 7.0, 1e-5);
    md_csv_series_naive(s, 2, 1, &mse, &mae); /* 29 -> 37, 37 -> 46 */
    cr_expect_float_eq(mse, 72.5, 1e-4);
    cr_expect_float_eq(mae, 8.5, 1e-5);
    md_csv_series_naive(s, 2, 0, &mse, &mae);
    cr_expect_float_eq(mse, 72.5 / 52.0, 1e-6);
    cr_expect_float_eq(mae, 8.5 / sqrt(52.0), 1e-6);
    md_csv_series_free(s);
    o = small_opts(2, 2); /* 6/2/2 rows; test: one window, 29 -> 37 and 46 */
    o.train_frac = 0.6;
    o.test_frac = 0.2;
    s = must_parse(t, strlen(t), "t.csv", &o);
    md_csv_series_naive(s, 2, 1, &mse, &mae);
    cr_expect_float_eq(mse, (64.0 + 289.0) / 2, 1e-4);
    cr_expect_float_eq(mae, (8.0 + 17.0) / 2, 1e-5);
    md_csv_series_free(s);
}

Test(csv_naive, sample_against_numpy)
{
    md_csv_opts o = small_opts(96, 96);
    md_csv_series *s = NULL;
    cr_assert_eq(md_csv_series_load(SAMPLE, &o, &s), MD_OK, "%s", md_errmsg());
    double mse, mae;
    md_csv_series_naive(s, 1, 0, &mse, &mae);
    cr_expect_float_eq(mse, 0.86961231098, 1e-6);
    cr_expect_float_eq(mae, 0.689612576353, 1e-6);
    md_csv_series_naive(s, 2, 0, &mse, &mae);
    cr_expect_float_eq(mse, 0.849638533774, 1e-6);
    cr_expect_float_eq(mae, 0.615942087654, 1e-6);
    md_csv_series_free(s);
    o.features = MD_CSV_FEATURES_MS;
    cr_assert_eq(md_csv_series_load(SAMPLE, &o, &s), MD_OK, "%s", md_errmsg());
    md_csv_series_naive(s, 1, 1, &mse, &mae);
    cr_expect_float_eq(mse, 43.5008481242, 1e-4);
    cr_expect_float_eq(mae, 5.29460985262, 1e-5);
    md_csv_series_naive(s, 2, 1, &mse, &mae);
    cr_expect_float_eq(mse, 59.6785797928, 1e-4);
    cr_expect_float_eq(mae, 6.24309481508, 1e-5);
    md_csv_series_free(s);
}

/* ============================================================ time */

Test(csv_time, features_of_known_stamps)
{
    /* scripts/csv_series_ref.py (datetime, the formulas of utils/timefeatures.py) */
    static const struct {
        const char *t;
        float f[4];
    } cases[] = {
        {"2016-07-01 00:00:00", {-0.5f, 0.166666667f, -0.5f, -0.00136986301f}},
        {"2016-12-31 23:00:00", {0.5f, 0.333333333f, 0.5f, 0.5f}},
        {"2017-03-05 13:00:00", {0.0652173913f, 0.5f, -0.366666667f, -0.32739726f}},
        {"2020-02-29 06:00:00", {-0.239130435f, 0.333333333f, 0.433333333f, -0.338356164f}},
    };
    for (int i = 0; i < 4; i++) {
        int64_t secs;
        cr_assert(md_csv_parse_time(cases[i].t, strlen(cases[i].t), &secs), "%s", cases[i].t);
        float f[4];
        cr_assert_eq(md_csv_time_features(secs, MD_CSV_FREQ_H, f), 4);
        cr_expect(th_allclose(cases[i].t, f, cases[i].f, 4, 1e-7, 0));
        cr_assert_eq(md_csv_time_features(secs, MD_CSV_FREQ_D, f), 3);
        cr_expect(th_allclose(cases[i].t, f, cases[i].f + 1, 3, 1e-7, 0));
        char buf[32];
        md_csv_format_time(secs, buf, sizeof buf);
        cr_expect_str_eq(buf, cases[i].t);
    }
}

Test(csv_time, parse_forms)
{
    int64_t s;
    cr_expect(md_csv_parse_time("1970-01-01", 10, &s) && s == 0);
    cr_expect(md_csv_parse_time("1970-01-02 00:00", 16, &s) && s == 86400);
    cr_expect(md_csv_parse_time("1969-12-31 23:59:59", 19, &s) && s == -1);
    cr_expect(md_csv_parse_time("2016-07-01T01:02:03.25", 22, &s) && s == 1467334923);
    cr_expect(md_csv_parse_time("1990/1/1 0:00", 13, &s) && s == 631152000);
    cr_expect(md_csv_parse_time("2000-02-29", 10, &s));
    const char *bad[] = {"2019-02-29", "1900-02-29", "16-07-01", "2016-07-01 24:00", "2016-07-01 1:2",
                         "2016-07/01", "2016-07-01 ", "2016-07-01 10:00:60", "2016-07-01 10:00:00.", "0000-01-01",
                         "2016-00-10", "2016-07-32", "", "2016"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        cr_expect(!md_csv_parse_time(bad[i], strlen(bad[i]), &s), "%s", bad[i]);
    char buf[32];
    md_csv_format_time(-1, buf, sizeof buf);
    cr_expect_str_eq(buf, "1969-12-31 23:59:59");
}

/* ============================================================ fuzz smoke */

#define CSV_SMOKE_ITERS 3000

Test(fuzz_smoke, csv)
{
    static uint8_t seed[4096], buf[8192];
    uint64_t rs = 0x2468ace0u;
    for (int v = 0; v < 2; v++) {
        size_t n = md_fuzz_seed_csv(seed, sizeof seed, v);
        cr_assert(n > 0);
        /* the seeds themselves parse */
        md_csv_opts o = small_opts(3, 2);
        md_csv_series *s = must_parse((const char *)seed, n, "seed.csv", &o);
        md_csv_series_free(s);
        md_fuzz_csv(seed, n);
        for (int i = 0; i < CSV_SMOKE_ITERS; i++) {
            size_t m = i % 4 ? md_fuzz_csv_mutate(seed, n, buf, sizeof buf, &rs)
                             : md_fuzz_mutate(seed, n, 0, buf, sizeof buf, &rs);
            md_fuzz_csv(buf, m);
        }
    }
    md_fuzz_csv(seed, 0);
}
