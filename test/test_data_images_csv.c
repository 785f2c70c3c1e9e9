/* test_data_images_csv.c - the image folder + CSV format (--dataset
 * images-csv): CSV parsing and its one-line errors, targets standardised
 * with the training split's mean/std and back, side values, left/right
 * halves, k-fold splits, classes from a column, and the binary training a
 * small regression model on the shipped green-cover sample. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <turbojpeg.h>

#include "core/status.h"
#include "data/data.h"
#include "data/data_impl.h"
#include "core/mem.h"
#include "helpers.h"
#include "helpers_html.h"
#include "test_data_files.h"

#define SAMPLE "data/green-cover-sample"

/* A w x h JPEG whose left half is (l) and right half (r), 4:4:4, quality 98. */
static void write_two_tone(const char *path, int w, int h, const uint8_t l[3], const uint8_t r[3])
{
    uint8_t *rgb = malloc((size_t)w * h * 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) memcpy(rgb + ((size_t)y * w + x) * 3, x < w / 2 ? l : r, 3);
    tjhandle tj = tjInitCompress();
    unsigned char *jpg = NULL;
    unsigned long len = 0;
    tjCompress2(tj, rgb, w, 0, h, TJPF_RGB, &jpg, &len, TJSAMP_444, 98, 0);
    tf_put(path, jpg, len, 0);
    tjFree(jpg);
    tjDestroy(tj);
    free(rgb);
}

/* dir/img/<i>.jpg for i < n (colour by i) and dir/labels.csv with columns
 * image, a = i, b = 10 - 2i, side = i % 3, note = text. */
static char *make_set(int n)
{
    char *dir = th_tmpdir();
    tf_mkdir(dir, "img");
    char csv[8192] = "image,a,b,side,note\n";
    for (int i = 0; i < n; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s/img/%d.jpg", dir, i);
        uint8_t l[3] = {(uint8_t)(20 * i), 200, 30}, r[3] = {10, 20, (uint8_t)(250 - 10 * i)};
        write_two_tone(p, 32, 16, l, r);
        size_t k = strlen(csv);
        snprintf(csv + k, sizeof csv - k, "img/%d.jpg,%d,%g,%d,x%d\n", i, i, 10.0 - 2.0 * i, i % 3, i);
    }
    free(th_write(dir, "labels.csv", csv));
    return dir;
}

static struct md_data_request image_req(int h, int w)
{
    struct md_data_request r;
    memset(&r, 0, sizeof r);
    r.num_inputs = 1;
    snprintf(r.inputs[0].name, sizeof r.inputs[0].name, "image");
    r.inputs[0].c = 3;
    r.inputs[0].h = h;
    r.inputs[0].w = w;
    r.layout = MD_NCHW;
    return r;
}

/* Every sample of split s: its global CSV row (b->index is the split's
 * position; the rows of the set are the sample numbers), targets and the
 * inputs of one batch holding the whole split. */
static struct md_batch *whole_split(struct md_data *d, md_split s, struct md_loader **l)
{
    struct md_loader_opts lo = {.split = s, .batch_size = 1000, .prefetch = 1, .seed = 1};
    cr_assert_eq(md_loader_create(d, &lo, l), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_loader_start_epoch(*l, 0), MD_OK, "%s", md_errmsg());
    struct md_batch *b = NULL;
    cr_assert_eq(md_loader_next(*l, &b), MD_OK, "%s", md_errmsg());
    cr_assert(b);
    return b;
}

static md_status open_err(struct md_data_opts *o, const struct md_data_request *r)
{
    struct md_data *d = NULL;
    md_status st = md_data_open(o, r, &d);
    md_data_free(d);
    return st;
}

Test(data_images_csv, parses_numeric_columns_as_targets)
{
    char *dir = make_set(10);
    struct md_data_opts o = tf_opts("images-csv", dir);
    struct md_data_request r = image_req(8, 16);
    struct md_data *d = NULL;
    cr_assert_eq(md_data_open(&o, &r, &d), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_data_task(d), MD_TASK_REGRESS);
    cr_assert_str_eq(md_data_format(d), "images-csv");
    /* a, b and side are numeric; note is text and is left out */
    cr_assert_eq(md_data_series(d)->n_out, 3);
    cr_assert_eq(md_data_target_elems(d), 3);
    cr_assert_str_eq(md_data_target_name(d, 0), "a");
    cr_assert_str_eq(md_data_target_name(d, 2), "side");
    cr_assert_eq(md_data_count(d, MD_SPLIT_TRAIN) + md_data_count(d, MD_SPLIT_VAL), 10);
    int c, h, w;
    md_data_source_shape(d, &c, &h, &w);
    cr_assert(c == 3 && h == 8 && w == 16, "%d %d %d", c, h, w);
    md_data_free(d);
    /* auto-detection: a folder with labels.csv, and the .csv file itself */
    snprintf(o.dataset, sizeof o.dataset, "auto");
    cr_assert_eq(md_data_open(&o, &r, &d), MD_OK, "%s", md_errmsg());
    cr_assert_str_eq(md_data_name(d), "images-csv");
    md_data_free(d);
    snprintf(o.data_dir, sizeof o.data_dir, "%s/labels.csv", dir);
    cr_assert_eq(md_data_open(&o, &r, &d), MD_OK, "%s", md_errmsg());
    cr_assert_str_eq(md_data_name(d), "images-csv");
    md_data_free(d);
    th_tmpdir_free(dir);
}

/* Each error is one line naming the file, and the row and column where there is one. */
Test(data_images_csv, csv_errors_name_file_row_and_column)
{
    char *dir = make_set(4);
    struct md_data_request r = image_req(8, 16);
    struct md_data_opts o = tf_opts("images-csv", dir);

    snprintf(o.images.target_cols, sizeof o.images.target_cols, "a,zz");
    cr_assert_eq(open_err(&o, &r), MD_ERR_DATA);
    cr_assert(strstr(md_errmsg(), "labels.csv: no column 'zz' for --target-cols"), "%s", md_errmsg());

    /* a non-numeric target: row 4 of the file (header = row 1) */
    snprintf(o.images.target_cols, sizeof o.images.target_cols, "a,note");
    cr_assert_eq(open_err(&o, &r), MD_ERR_DATA);
    cr_assert(strstr(md_errmsg(), "labels.csv: row 2, column 'note': 'x0' is not a number"), "%s", md_errmsg());
    o.images.target_cols[0] = '\0';

    free(th_write(dir, "labels.csv", "image,a\nimg/0.jpg,1\nimg/1.jpg,\n"));
    cr_assert_eq(open_err(&o, &r), MD_ERR_DATA);
    /* an empty cell makes the column non-numeric: no target left */
    cr_assert(strstr(md_errmsg(), "no numeric column"), "%s", md_errmsg());
    snprintf(o.images.target_cols, sizeof o.images.target_cols, "a");
    cr_assert_eq(open_err(&o, &r), MD_ERR_DATA);
    cr_assert(strstr(md_errmsg(), "row 3, column 'a': '' is not a number"), "%s", md_errmsg());
    o.images.target_cols[0] = '\0';

    free(th_write(dir, "labels.csv", "image,a\nimg/0.jpg,1\nimg/9.jpg,2\n"));
    cr_assert_eq(open_err(&o, &r), MD_ERR_DATA);
    cr_assert(strstr(md_errmsg(), "row 3, column 'image'") && strstr(md_errmsg(), "img/9.jpg: no such file"), "%s",
              md_errmsg());

    free(th_write(dir, "labels.csv", "image,a\nimg/0.jpg,1,5\n"));
    cr_assert_eq(open_err(&o, &r), MD_ERR_DATA);
    cr_assert(strstr(md_errmsg(), "row 2: 3 fields, the header has 2"), "%s", md_errmsg());

    free(th_write(dir, "labels.csv", ""));
    cr_assert_eq(open_err(&o, &r), MD_ERR_DATA);
    cr_assert(strstr(md_errmsg(), "labels.csv: empty"), "%s", md_errmsg());

    free(th_write(dir, "labels.csv", "image,a\n"));
    cr_assert_eq(open_err(&o, &r), MD_ERR_DATA);
    cr_assert(strstr(md_errmsg(), "labels.csv: no rows"), "%s", md_errmsg());

    free(th_write(dir, "labels.csv", "picture,a\nimg/0.jpg,1\n"));
    cr_assert_eq(open_err(&o, &r), MD_ERR_DATA);
    cr_assert(strstr(md_errmsg(), "no column 'image'"), "%s", md_errmsg());
    snprintf(o.images.image_col, sizeof o.images.image_col, "picture");
    cr_assert_eq(open_err(&o, &r), MD_OK, "%s", md_errmsg());
    o.images.image_col[0] = '\0';

    /* duplicate rows are samples like any other; quoted fields and CRLF are read */
    free(th_write(dir, "labels.csv", "\"image\",a\r\n\"img/0.jpg\",1\r\nimg/0.jpg,1\r\n\r\nimg/1.jpg,\"2\"\r\n"));
    struct md_data *d = NULL;
    o.val_split = 0;
    cr_assert_eq(md_data_open(&o, &r, &d), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_data_count(d, MD_SPLIT_TRAIN), 3);
    md_data_free(d);

    snprintf(o.data_dir, sizeof o.data_dir, "%s/none.csv", dir);
    cr_assert_neq(open_err(&o, &r), MD_OK);
    cr_assert(strstr(md_errmsg(), "none.csv"), "%s", md_errmsg());
    th_tmpdir_free(dir);
}

/* Targets are delivered standardised with the training split's mean/std;
 * value * std + mean gives the CSV's numbers back. */
Test(data_images_csv, standardisation_round_trip)
{
    char *dir = make_set(12);
    struct md_data_opts o = tf_opts("images-csv", dir);
    snprintf(o.images.target_cols, sizeof o.images.target_cols, "a,b");
    o.val_split = 0.25;
    struct md_data_request r = image_req(8, 16);
    struct md_data *d = NULL;
    cr_assert_eq(md_data_open(&o, &r, &d), MD_OK, "%s", md_errmsg());
    const double *m = md_data_target_mean(d), *s = md_data_target_std(d);
    cr_assert(m && s);
    for (int sp = MD_SPLIT_TRAIN; sp <= MD_SPLIT_VAL; sp++) {
        struct md_loader *l = NULL;
        struct md_batch *b = whole_split(d, (md_split)sp, &l);
        double sum = 0, sq = 0;
        for (int i = 0; i < b->n; i++) {
            long long row = md_data_split_index(d, (md_split)sp, b->index[i]);
            double a = b->targets[i * 2] * s[0] + m[0], bb = b->targets[i * 2 + 1] * s[1] + m[1];
            cr_assert(fabs(a - (double)row) < 1e-5 && fabs(bb - (10.0 - 2.0 * row)) < 1e-5, "row %lld: %g %g", row, a, bb);
            sum += b->targets[i * 2];
            sq += (double)b->targets[i * 2] * b->targets[i * 2];
        }
        if (sp == MD_SPLIT_TRAIN) { /* standardised over the training split: mean 0, std 1 */
            cr_assert(fabs(sum / b->n) < 1e-6 && fabs(sq / b->n - 1.0) < 1e-5, "%g %g", sum / b->n, sq / b->n);
        }
        md_loader_release(l, b);
        md_loader_free(l);
    }
    md_data_free(d);
    /* --no-standardize-targets: the values as they are */
    o.images.no_standardize = 1;
    cr_assert_eq(md_data_open(&o, &r, &d), MD_OK, "%s", md_errmsg());
    cr_assert(md_data_target_mean(d)[0] == 0.0 && md_data_target_std(d)[1] == 1.0);
    struct md_loader *l = NULL;
    struct md_batch *b = whole_split(d, MD_SPLIT_TRAIN, &l);
    for (int i = 0; i < b->n; i++)
        cr_assert_float_eq(b->targets[i * 2], (float)md_data_split_index(d, MD_SPLIT_TRAIN, b->index[i]), 1e-6);
    md_loader_release(l, b);
    md_loader_free(l);
    md_data_free(d);
    th_tmpdir_free(dir);
}

/* Side values: the model input "side", standardised like the targets. */
Test(data_images_csv, side_input)
{
    char *dir = make_set(9);
    struct md_data_opts o = tf_opts("images-csv", dir);
    snprintf(o.images.target_cols, sizeof o.images.target_cols, "a");
    snprintf(o.images.side_cols, sizeof o.images.side_cols, "side,b");
    struct md_data_request r = image_req(8, 16);
    cr_assert_eq(open_err(&o, &r), MD_ERR_CONFIG); /* the model has no "side" input */
    cr_assert(strstr(md_errmsg(), "--side-cols"), "%s", md_errmsg());
    r.num_inputs = 2;
    snprintf(r.inputs[1].name, sizeof r.inputs[1].name, "side");
    r.inputs[1].kind = MD_INPUT_SIDE;
    r.inputs[1].c = 3;
    r.inputs[1].h = r.inputs[1].w = 1;
    cr_assert_eq(open_err(&o, &r), MD_ERR_CONFIG); /* 3 values asked, 2 columns */
    r.inputs[1].c = 2;
    struct md_data *d = NULL;
    cr_assert_eq(md_data_open(&o, &r, &d), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_data_num_side(d), 2);
    cr_assert_str_eq(md_data_side_name(d, 1), "b");
    const double *m = md_data_side_mean(d), *s = md_data_side_std(d);
    struct md_loader *l = NULL;
    struct md_batch *b = whole_split(d, MD_SPLIT_TRAIN, &l);
    for (int i = 0; i < b->n; i++) {
        long long row = md_data_split_index(d, MD_SPLIT_TRAIN, b->index[i]);
        cr_assert(fabs(b->inputs[1][i * 2] * s[0] + m[0] - (double)(row % 3)) < 1e-5);
        cr_assert(fabs(b->inputs[1][i * 2 + 1] * s[1] + m[1] - (10.0 - 2.0 * row)) < 1e-5);
    }
    md_loader_release(l, b);
    md_loader_free(l);
    md_data_free(d);
    th_tmpdir_free(dir);
}

/* The mean of channel ch of input i of sample j, in pixel units (0..255). */
static double channel_mean(const struct md_data *d, const struct md_batch *b, int i, int j, int ch)
{
    const struct md_data_input *in = md_data_input(d, i);
    size_t hw = (size_t)in->h * in->w;
    const float *x = b->inputs[i] + (size_t)j * md_data_input_elems(d, i) + ch * hw;
    double s = 0;
    for (size_t p = 0; p < hw; p++) s += x[p] * md_data_std(d, i)[ch] + md_data_mean(d, i)[ch];
    return s / (double)hw * 255.0;
}

/* Left and right halves as two inputs: named left/right, or --halves with two image inputs. */
Test(data_images_csv, halves)
{
    char *dir = make_set(6);
    struct md_data_opts o = tf_opts("images-csv", dir);
    snprintf(o.images.target_cols, sizeof o.images.target_cols, "a");
    struct md_data_request r = image_req(8, 8);
    r.num_inputs = 2;
    r.inputs[1] = r.inputs[0];
    snprintf(r.inputs[0].name, sizeof r.inputs[0].name, "left");
    snprintf(r.inputs[1].name, sizeof r.inputs[1].name, "right");
    r.inputs[0].kind = MD_INPUT_LEFT;
    r.inputs[1].kind = MD_INPUT_RIGHT;
    for (int pass = 0; pass < 2; pass++) {
        if (pass == 1) { /* plain image inputs with --halves */
            r.inputs[0].kind = r.inputs[1].kind = MD_INPUT_IMAGE;
            o.images.halves = 1;
        }
        struct md_data *d = NULL;
        cr_assert_eq(md_data_open(&o, &r, &d), MD_OK, "%s", md_errmsg());
        int c, h, w;
        md_data_source_shape(d, &c, &h, &w);
        cr_assert(h == 8 && w == 16, "stored %d x %d", h, w);
        cr_assert(md_data_input(d, 0)->kind == MD_INPUT_LEFT && md_data_input(d, 1)->kind == MD_INPUT_RIGHT);
        struct md_loader *l = NULL;
        struct md_batch *b = whole_split(d, MD_SPLIT_TRAIN, &l);
        for (int j = 0; j < b->n; j++) {
            long long row = md_data_split_index(d, MD_SPLIT_TRAIN, b->index[j]);
            /* left (20 i, 200, 30), right (10, 20, 250 - 10 i): JPEG-exact to a few levels */
            cr_assert(fabs(channel_mean(d, b, 0, j, 0) - 20.0 * row) < 4, "row %lld", row);
            cr_assert(fabs(channel_mean(d, b, 0, j, 1) - 200) < 4);
            cr_assert(fabs(channel_mean(d, b, 1, j, 1) - 20) < 4);
            cr_assert(fabs(channel_mean(d, b, 1, j, 2) - (250.0 - 10.0 * row)) < 4, "row %lld", row);
        }
        md_loader_release(l, b);
        md_loader_free(l);
        md_data_free(d);
    }
    /* --halves with one image input cannot be fed */
    struct md_data_request one = image_req(8, 8);
    cr_assert_eq(open_err(&o, &one), MD_ERR_CONFIG);
    cr_assert(strstr(md_errmsg(), "--halves"), "%s", md_errmsg());
    th_tmpdir_free(dir);
}

/* The validation rows of every fold of opts o, as a bitmap of n rows per fold. */
static void fold_rows(struct md_data_opts *o, int k, int n, int *val_of, int *train_count)
{
    struct md_data_request r = image_req(8, 16);
    for (int i = 0; i < n; i++) val_of[i] = -1;
    for (int f = 0; f < k; f++) {
        o->folds = k;
        o->fold = f;
        struct md_data *d = NULL;
        cr_assert_eq(md_data_open(o, &r, &d), MD_OK, "%s", md_errmsg());
        int fold = -1;
        cr_assert_eq(md_data_folds(d, &fold), k);
        cr_assert_eq(fold, f);
        long long nv = md_data_count(d, MD_SPLIT_VAL), nt = md_data_count(d, MD_SPLIT_TRAIN);
        cr_assert_eq(nv + nt, n);
        cr_assert(nv == n / k || nv == n / k + 1, "fold %d: %lld", f, nv);
        for (long long i = 0; i < nv; i++) {
            long long row = md_data_split_index(d, MD_SPLIT_VAL, i);
            cr_assert_eq(val_of[row], -1, "row %lld in two folds", row);
            val_of[row] = f;
        }
        for (long long i = 0; i < nt; i++) cr_assert_neq(val_of[md_data_split_index(d, MD_SPLIT_TRAIN, i)], f);
        train_count[f] = (int)nt;
        md_data_free(d);
    }
}

Test(data_images_csv, folds_disjoint_cover_reproducible_seeded)
{
    char *dir = make_set(23);
    struct md_data_opts o = tf_opts("images-csv", dir);
    int a[23], b2[23], c[23], tc[5];
    fold_rows(&o, 5, 23, a, tc);
    for (int i = 0; i < 23; i++) cr_assert_neq(a[i], -1, "row %d in no fold", i);
    fold_rows(&o, 5, 23, b2, tc);
    cr_assert_eq(memcmp(a, b2, sizeof a), 0, "the same seed gave other folds");
    o.seed = 7;
    fold_rows(&o, 5, 23, c, tc);
    cr_assert_neq(memcmp(a, c, sizeof a), 0, "another seed gave the same folds");
    /* errors: fold out of range, --fold without --folds */
    struct md_data_request r = image_req(8, 16);
    o.folds = 5;
    o.fold = 5;
    cr_assert_eq(open_err(&o, &r), MD_ERR_USAGE);
    cr_assert(strstr(md_errmsg(), "--fold 5"), "%s", md_errmsg());
    o.folds = 1;
    o.fold = 2;
    cr_assert_eq(open_err(&o, &r), MD_ERR_USAGE);
    cr_assert(strstr(md_errmsg(), "--folds"), "%s", md_errmsg());
    th_tmpdir_free(dir);
}

Test(data_images_csv, class_column)
{
    char *dir = th_tmpdir();
    tf_mkdir(dir, "img");
    char csv[2048] = "filename,kind\n";
    for (int i = 0; i < 8; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s/img/%d.jpg", dir, i);
        tf_write_jpeg(p, 16, 16, (uint8_t)(i * 30), 10, 10);
        size_t k = strlen(csv);
        snprintf(csv + k, sizeof csv - k, "img/%d.jpg,%s\n", i, i % 2 ? "moss" : "bark");
    }
    free(th_write(dir, "labels.csv", csv));
    struct md_data_opts o = tf_opts("images-csv", dir);
    snprintf(o.images.class_col, sizeof o.images.class_col, "kind");
    o.val_split = 0;
    struct md_data_request r = image_req(16, 16);
    struct md_data *d = NULL;
    cr_assert_eq(md_data_open(&o, &r, &d), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_data_task(d), MD_TASK_CLASSIFY);
    cr_assert_eq(md_data_num_classes(d), 2);
    cr_assert_str_eq(md_data_class_name(d, 0), "bark");
    cr_assert_eq(md_data_class_count(d, MD_SPLIT_TRAIN, 1), 4);
    md_data_free(d);
    th_tmpdir_free(dir);
}

/* The shipped sample: 192 wide images, three measured targets and a side column. */
Test(data_images_csv, shipped_sample)
{
    struct md_data_opts o = tf_opts("images-csv", SAMPLE);
    snprintf(o.images.target_cols, sizeof o.images.target_cols, "green_cover,brightness,blue_cover");
    struct md_data_request r = image_req(32, 64);
    struct md_data *d = NULL;
    cr_assert_eq(md_data_open(&o, &r, &d), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_data_count(d, MD_SPLIT_TRAIN) + md_data_count(d, MD_SPLIT_VAL), 192);
    cr_assert_eq(md_data_series(d)->n_out, 3);
    md_data_free(d);
}

/* The binary trains the small regression CNN a few steps on the sample;
 * the report holds the targets' scaler. */
Test(data_images_csv, binary_trains_on_sample, .timeout = 120)
{
    char *dir = th_tmpdir(), args[2048], *out = NULL, *err = NULL;
    snprintf(args, sizeof args,
             "--model small_cnn_regress --dataset images-csv --data-dir " SAMPLE
             " --target-cols green_cover,brightness,blue_cover --side-cols crop_scale --folds 4 --fold 1"
             " --epochs 2 --steps 4 --batch-size 16 --optimizer adamw --device cpu --num-workers 0"
             " --checkpoint-dir %s/ck --report %s/r.json",
             dir, dir);
    int rc = th_run(args, &out, &err);
    cr_assert_eq(rc, 0, "rc %d\n%s\n%s", rc, out, err);
    char p[1024];
    snprintf(p, sizeof p, "%s/r.json", dir);
    cJSON *rep = th_load_json(p);
    cr_assert(rep);
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(rep, "data");
    const cJSON *sc = cJSON_GetObjectItemCaseSensitive(data, "target_scaler");
    cr_assert_eq(cJSON_GetArraySize(sc), 3, "%s", out);
    cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(sc, 0), "name")->valuestring, "green_cover");
    cr_assert_eq(cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(data, "side_scaler")), 1);
    cr_assert(strstr(out, "fold 1 of 4"), "%s", out);
    /* the loss line and the R2/MAE/RMSE tables speak of targets per image, by their columns */
    cr_assert(strstr(out, "mse over 3 targets per image"), "%s", out);
    cr_assert_null(strstr(out, "variates per window"), "%s", out);
    cr_assert(strstr(out, "  green_cover ") && strstr(out, "  blue_cover "), "%s", out);
    cr_assert_null(strstr(out, "target_0"), "%s", out);
    const cJSON *per = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(rep, "training"), "regression_metrics"),
        "per_target");
    cr_assert_eq(cJSON_GetArraySize(per), 3, "%s", out);
    const char *cols[] = {"green_cover", "brightness", "blue_cover"};
    for (int j = 0; j < 3; j++)
        cr_assert_str_eq(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(per, j), "name")->valuestring, cols[j]);
    char *html = th_html_render(rep);
    cr_assert(th_count(html, "<tr><th>brightness</th>") >= 1, "no brightness row in the HTML");
    cr_assert_null(strstr(html, "target_1"));
    md_free(html);
    cJSON_Delete(rep);
    free(out);
    free(err);
    /* a model with another number of outputs than targets: said per image, not per window */
    cJSON *cfg = th_load_json("configs/models/small_cnn_regress.json");
    cJSON *layers = cJSON_GetObjectItemCaseSensitive(cfg, "layers");
    cJSON *last = cJSON_GetArrayItem(layers, cJSON_GetArraySize(layers) - 1);
    cJSON_ReplaceItemInObject(last, "out", cJSON_CreateNumber(2));
    cJSON_DeleteItemFromObject(cJSON_GetObjectItemCaseSensitive(cfg, "params"), "num_outputs");
    char *text = cJSON_Print(cfg), *cfg_path = th_write(dir, "fixed2.json", text);
    free(text);
    cJSON_Delete(cfg);
    snprintf(args, sizeof args,
             "--model %s --dataset images-csv --data-dir " SAMPLE " --target-cols green_cover,brightness,blue_cover"
             " --epochs 1 --steps 1 --device cpu --num-workers 0 --checkpoint-dir %s/ck2",
             cfg_path, dir);
    free(cfg_path);
    rc = th_run(args, &out, &err);
    cr_assert_neq(rc, 0);
    cr_assert_eq(th_count_messages(err), 1, "%s", err);
    cr_assert(strstr(th_unwrap(err), "outputs 2 x 1 x 1 values per image but the data has 3 targets (--target-cols)"),
              "%s", err);
    free(out);
    free(err);
    /* a user error: one line naming the file and the column */
    rc = th_run("--model small_cnn_regress --dataset images-csv --data-dir " SAMPLE " --target-cols nope --epochs 1 "
                "--device cpu",
                &out, &err);
    cr_assert_neq(rc, 0);
    cr_assert(strstr(err, "mpsdiag: ") && strstr(err, "labels.csv: no column 'nope' for --target-cols"), "%s", err);
    cr_assert_eq(th_count_messages(err), 1, "%s", err);
    free(out);
    free(err);
    th_tmpdir_free(dir);
}
