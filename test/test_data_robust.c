#define _GNU_SOURCE
/* test_data_robust.c - --max-samples caps every split; CMYK JPEGs decode;
 * JPEGs that cannot be decoded are found when the dataset opens, and
 * --on-bad-sample skip says how many and which. */
#include <criterion/criterion.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "core/json.h"
#include "core/mem.h"
#include "data/data.h"
#include "data/data_impl.h"
#include "helpers.h"
#include "test_data_files.h"

/* ---- --max-samples ------------------------------------------------------------- */

Test(data_robust, max_samples_caps_validation_and_test_too)
{
    char *dir = th_tmpdir();
    tf_write_idx(dir, "train", 300, 300, 8, 8, 0);
    tf_write_idx(dir, "t10k", 100, 100, 8, 8, 0);
    struct md_data_opts o = tf_opts("mnist", dir);
    o.max_samples = 7;
    struct md_data *d = NULL;
    cr_assert_eq(md_data_open(&o, NULL, &d), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_data_count(d, MD_SPLIT_TRAIN), 7);
    cr_assert_eq(md_data_count(d, MD_SPLIT_VAL), 7, "val %lld", md_data_count(d, MD_SPLIT_VAL));
    cr_assert_eq(md_data_count(d, MD_SPLIT_TEST), 7, "test %lld", md_data_count(d, MD_SPLIT_TEST));
    for (int s = 0; s < MD_SPLIT_COUNT; s++)
        cr_assert(strstr(md_data_split_origin(d, (md_split)s), "--max-samples"), "%s",
                  md_data_split_origin(d, (md_split)s));
    /* seeded: the same samples again, every index once, in range */
    struct md_data *e = NULL;
    cr_assert_eq(md_data_open(&o, NULL, &e), MD_OK, "%s", md_errmsg());
    for (int i = 0; i < 7; i++) {
        long long t = md_data_split_index(d, MD_SPLIT_TEST, i);
        cr_assert_eq(t, md_data_split_index(e, MD_SPLIT_TEST, i));
        cr_assert(t >= 300 && t < 400, "test index %lld", t);
        if (i) cr_assert_gt(t, md_data_split_index(d, MD_SPLIT_TEST, i - 1));
    }
    long long total = 0;
    for (int k = 0; k < 10; k++) total += md_data_class_count(d, MD_SPLIT_TEST, k);
    cr_assert_eq(total, 7, "per-class counts follow the cap");
    md_data_free(d);
    md_data_free(e);
    th_tmpdir_free(dir);
}

Test(data_robust, max_samples_smoke_run_scores_few_test_images, .timeout = 60)
{
    char *dir = th_tmpdir();
    char args[4300], *out = NULL, *err = NULL;
    snprintf(args, sizeof args,
             "--device cpu --threads 1 --dataset synthetic --max-samples 4 --batch-size 4 --num-workers 0 --steps 1 "
             "--checkpoint-dir %s/ck",
             dir);
    cJSON *r = th_run_report(dir, args, 0, &out, &err);
    cr_assert(strstr(out, "4 train / 4 val / 4 test samples"), "%s", out);
    cr_assert(strstr(out, "--max-samples"), "the output says the splits were capped: %s", out);
    const cJSON *data = cJSON_GetObjectItem(r, "data");
    cr_assert_eq(cJSON_GetObjectItem(data, "max_samples")->valueint, 4);
    const cJSON *test = cJSON_GetObjectItem(cJSON_GetObjectItem(r, "training"), "test");
    cr_assert_eq(cJSON_GetObjectItem(test, "samples")->valueint, 4);
    cJSON_Delete(r);
    free(out);
    free(err);
    th_tmpdir_free(dir);
}

/* ---- CMYK and undecodable JPEGs ------------------------------------------------------ */

/* libjpeg-turbo's (Adobe's) convention: inverted CMYK, so R = C * K / 255. */
static void rgb_to_cmyk(const uint8_t *rgb, uint8_t *cmyk)
{
    double c = 1 - rgb[0] / 255.0, m = 1 - rgb[1] / 255.0, y = 1 - rgb[2] / 255.0;
    double k = fmin(fmin(c, m), y);
    if (k >= 1.0) c = m = y = 0;
    else { c = (c - k) / (1 - k); m = (m - k) / (1 - k); y = (y - k) / (1 - k); }
    cmyk[0] = (uint8_t)(255 - c * 255 + 0.5);
    cmyk[1] = (uint8_t)(255 - m * 255 + 0.5);
    cmyk[2] = (uint8_t)(255 - y * 255 + 0.5);
    cmyk[3] = (uint8_t)(255 - k * 255 + 0.5);
}

/* A w x h CMYK JPEG (YCCK inside) of one colour, written with tjCompress2. */
static void write_cmyk_jpeg(const char *path, int w, int h, const uint8_t *rgb)
{
    uint8_t px[4];
    rgb_to_cmyk(rgb, px);
    uint8_t *buf = malloc((size_t)w * h * 4);
    for (int i = 0; i < w * h; i++) memcpy(buf + 4 * i, px, 4);
    tjhandle tj = tjInitCompress();
    unsigned char *jpg = NULL;
    unsigned long len = 0;
    cr_assert_eq(tjCompress2(tj, buf, w, 0, h, TJPF_CMYK, &jpg, &len, TJSAMP_444, 95, 0), 0, "%s", tjGetErrorStr2(tj));
    tf_put(path, jpg, len, 0);
    tjFree(jpg);
    tjDestroy(tj);
    free(buf);
}

Test(data_robust, cmyk_jpeg_decodes_to_its_colour)
{
    char *dir = th_tmpdir();
    tf_write_jpeg_tree(dir, 2, 2, 0, 16, 16);
    const uint8_t want[3] = {200, 60, 30};
    char p[1200];
    snprintf(p, sizeof p, "%s/classa/cmyk.jpg", dir);
    write_cmyk_jpeg(p, 16, 16, want);
    struct md_data_opts o = tf_opts("jpeg", dir);
    o.val_split = 0;
    o.image_size = 16;
    struct md_data *d = NULL;
    cr_assert_eq(md_data_open(&o, NULL, &d), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_data_skipped(d), 0);
    cr_assert_eq(md_data_count(d, MD_SPLIT_TRAIN), 5);
    /* the decoded pixels, through the decoder the loader uses */
    md_jpeg *j = NULL;
    cr_assert_eq(md_jpeg_new(&j), MD_OK);
    FILE *f = fopen(p, "rb");
    uint8_t file[65536];
    size_t n = fread(file, 1, sizeof file, f);
    fclose(f);
    uint8_t rgb[3 * 16 * 16], gray[16 * 16];
    cr_assert_eq(md_jpeg_decode(j, file, n, p, 3, 16, 16, rgb), MD_OK, "%s", md_errmsg());
    for (int c = 0; c < 3; c++)
        cr_assert(abs((int)rgb[c * 256 + 8 * 16 + 8] - want[c]) <= 8, "channel %d: %d, want %d", c,
                  rgb[c * 256 + 8 * 16 + 8], want[c]);
    cr_assert_eq(md_jpeg_decode(j, file, n, p, 1, 8, 8, gray), MD_OK, "%s", md_errmsg());
    double luma = 0.299 * want[0] + 0.587 * want[1] + 0.114 * want[2];
    cr_assert(fabs(gray[4 * 8 + 4] - luma) <= 8, "gray %d, want %.0f", gray[36], luma);
    md_jpeg_free(j);
    /* and the loader delivers every sample of the split */
    struct md_loader_opts lo = {.split = MD_SPLIT_TRAIN, .batch_size = 8, .prefetch = 1, .num_workers = 0, .seed = 1};
    struct md_loader *l = NULL;
    cr_assert_eq(md_loader_create(d, &lo, &l), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_loader_start_epoch(l, 0), MD_OK);
    struct md_batch *b = NULL;
    cr_assert_eq(md_loader_next(l, &b), MD_OK, "%s", md_errmsg());
    cr_assert_eq(b->n, 5);
    md_loader_release(l, b);
    md_loader_free(l);
    md_data_free(d);
    th_tmpdir_free(dir);
}

/* A JPEG with a sound header whose image data stops half-way. */
static void write_truncated_jpeg(const char *path)
{
    uint8_t *rgb = malloc(64 * 64 * 3);
    for (int i = 0; i < 64 * 64 * 3; i++) rgb[i] = (uint8_t)(i * 37);
    tjhandle tj = tjInitCompress();
    unsigned char *jpg = NULL;
    unsigned long len = 0;
    tjCompress2(tj, rgb, 64, 0, 64, TJPF_RGB, &jpg, &len, TJSAMP_444, 95, 0);
    tf_put(path, jpg, len / 2, 0);
    tjFree(jpg);
    tjDestroy(tj);
    free(rgb);
}

Test(data_robust, undecodable_jpeg_fails_at_open)
{
    char *dir = th_tmpdir();
    tf_write_jpeg_tree(dir, 2, 2, 0, 16, 16);
    char p[1200];
    snprintf(p, sizeof p, "%s/classb/cut.jpg", dir);
    write_truncated_jpeg(p);
    struct md_data_opts o = tf_opts("jpeg", dir);
    o.val_split = 0;
    struct md_data *d = NULL;
    md_status st = md_data_open(&o, NULL, &d);
    cr_assert_eq(st, MD_ERR_DATA, "opened: the truncated file was not found at open");
    cr_assert(strstr(md_errmsg(), "cut.jpg"), "%s", md_errmsg());
    th_tmpdir_free(dir);
}

Test(data_robust, skip_reports_how_many_and_which, .timeout = 60)
{
    char *dir = th_tmpdir();
    tf_write_jpeg_tree(dir, 2, 3, 0, 16, 16);
    char p[1200];
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/classa/cut%d.jpg", dir, i);
        write_truncated_jpeg(p);
    }
    snprintf(p, sizeof p, "%s/classb/text.jpg", dir);
    tf_put(p, "not a jpeg", 10, 0);
    struct md_data_opts o = tf_opts("jpeg", dir);
    o.skip_bad = 1;
    o.val_split = 0;
    struct md_data *d = NULL;
    cr_assert_eq(md_data_open(&o, NULL, &d), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_data_skipped(d), 4, "skipped %lld", md_data_skipped(d));
    cr_assert_eq(md_data_count(d, MD_SPLIT_TRAIN), 6);
    md_data_free(d);

    /* the binary: text and JSON name the files */
    char args[4400], *out = NULL, *err = NULL;
    snprintf(args, sizeof args,
             "--device cpu --threads 1 --dataset jpeg --data-dir %s --on-bad-sample skip --image-size 16 --val-split 0 "
             "--max-samples 6 --batch-size 6 --num-workers 0 --steps 1 --checkpoint-dir %s/ck",
             dir, dir);
    cJSON *r = th_run_report(dir, args, 0, &out, &err);
    cr_assert(strstr(out, "4 bad samples skipped"), "%s", out);
    cr_assert(strstr(out, "cut0.jpg") && strstr(out, "cut2.jpg") && strstr(out, "text.jpg"), "%s", out);
    const cJSON *data = cJSON_GetObjectItem(r, "data");
    cr_assert_eq(cJSON_GetObjectItem(data, "skipped")->valueint, 4);
    const cJSON *files = cJSON_GetObjectItem(data, "skipped_files");
    cr_assert(cJSON_IsArray(files) && cJSON_GetArraySize(files) == 4, "data.skipped_files");
    int named = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, files)
    {
        const cJSON *path = cJSON_GetObjectItem(it, "path"), *e = cJSON_GetObjectItem(it, "error");
        cr_assert(cJSON_IsString(path) && cJSON_IsString(e));
        named += strstr(path->valuestring, "text.jpg") != NULL;
    }
    cr_assert_eq(named, 1);
    cJSON_Delete(r);
    free(out);
    free(err);
    th_tmpdir_free(dir);
}

Test(data_robust, cmyk_jpeg_trains_from_the_binary, .timeout = 60)
{
    char *dir = th_tmpdir();
    tf_write_jpeg_tree(dir, 2, 3, 0, 16, 16);
    const uint8_t c[3] = {20, 120, 220};
    char p[1200];
    for (int i = 0; i < 6; i++) {
        snprintf(p, sizeof p, "%s/class%c/cmyk%d.jpg", dir, 'a' + i % 2, i);
        write_cmyk_jpeg(p, 16, 16, c);
    }
    char args[4400], *out = NULL, *err = NULL;
    snprintf(args, sizeof args,
             "--device cpu --threads 1 --dataset jpeg --data-dir %s --image-size 16 --val-split 0 --batch-size 4 "
             "--num-workers 1 --epochs 2 --checkpoint-dir %s/ck",
             dir, dir);
    int rc = th_run(args, &out, &err);
    cr_assert_eq(rc, 0, "exit %d: %s", rc, err);
    cr_assert_null(strstr(err, "corrupt"), "%s", err);
    free(out);
    free(err);
    th_tmpdir_free(dir);
}
