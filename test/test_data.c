#define _GNU_SOURCE
/* test_data.c - datasets: every format on small generated files, splits,
 * bad input, conversions, normalisation, cache accounting. The loader's
 * determinism and augmentation are in test_data_loader.c. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "core/json.h"
#include "core/mem.h"
#include "data/data.h"
#include "data/data_impl.h"
#include "helpers.h"
#include "test_data_files.h"

/* All samples of a split, in order, no augmentation: inputs[0] and labels. */
static void load_all(struct md_data *d, md_split s, int workers, float **x, int32_t **y, long long *n)
{
    struct md_loader_opts lo = {.split = s, .batch_size = 16, .prefetch = 2, .num_workers = workers, .seed = 1};
    struct md_loader *l = NULL;
    cr_assert_eq(md_loader_create(d, &lo, &l), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_loader_start_epoch(l, 0), MD_OK);
    size_t el = md_data_input_elems(d, 0);
    long long cnt = md_data_count(d, s);
    *x = malloc((size_t)cnt * el * sizeof(float));
    *y = malloc((size_t)cnt * sizeof(int32_t));
    long long k = 0;
    for (;;) {
        struct md_batch *b = NULL;
        cr_assert_eq(md_loader_next(l, &b), MD_OK, "%s", md_errmsg());
        if (!b) break;
        memcpy(*x + (size_t)k * el, b->inputs[0], (size_t)b->n * el * sizeof(float));
        memcpy(*y + k, b->labels, (size_t)b->n * sizeof(int32_t));
        k += b->n;
        md_loader_release(l, b);
    }
    cr_assert_eq(k, cnt);
    *n = k;
    md_loader_free(l);
}

Test(data, idx_plain_and_gzip)
{
    for (int gz = 0; gz < 2; gz++) {
        char *dir = th_tmpdir();
        tf_write_idx(dir, "train", 50, 50, 6, 5, gz);
        tf_write_idx(dir, "t10k", 20, 20, 6, 5, gz);
        struct md_data_opts o = tf_opts("mnist", dir);
        o.val_split = 0.2;
        struct md_data *d = NULL;
        cr_assert_eq(md_data_open(&o, NULL, &d), MD_OK, "%s", md_errmsg());
        cr_assert_str_eq(md_data_format(d), gz ? "idx.gz" : "idx");
        cr_assert_eq(md_data_count(d, MD_SPLIT_TRAIN), 40);
        cr_assert_eq(md_data_count(d, MD_SPLIT_VAL), 10);
        cr_assert_eq(md_data_count(d, MD_SPLIT_TEST), 20);
        cr_assert_eq(md_data_num_classes(d), 10);
        int c, h, w;
        md_data_source_shape(d, &c, &h, &w);
        cr_assert(c == 1 && h == 6 && w == 5);
        cr_assert(md_data_norm_known(d));
        float m = md_data_mean(d, 0)[0], s = md_data_std(d, 0)[0];
        cr_assert_float_eq(m, 0.1307f, 1e-6);
        /* test split = the t10k file in order: image i, label i % 10 */
        float *x;
        int32_t *y;
        long long n;
        load_all(d, MD_SPLIT_TEST, 0, &x, &y, &n);
        for (int i = 0; i < 20; i++) {
            cr_assert_eq(y[i], i % 10);
            for (int yy = 0; yy < 6; yy++)
                for (int xx = 0; xx < 5; xx++) {
                    float want = ((float)tf_idx_px(i, yy, xx) / 255.0f - m) / s;
                    cr_assert_float_eq(x[(i * 6 + yy) * 5 + xx], want, 1e-5, "image %d (%d,%d)", i, yy, xx);
                }
        }
        free(x);
        free(y);
        /* train + val are the 50 training images, each once */
        int seen[50] = {0};
        for (int sp = MD_SPLIT_TRAIN; sp <= MD_SPLIT_VAL; sp++)
            for (long long i = 0; i < md_data_count(d, (md_split)sp); i++) seen[md_data_split_index(d, (md_split)sp, i)]++;
        for (int i = 0; i < 50; i++) cr_assert_eq(seen[i], 1, "training image %d in %d splits", i, seen[i]);
        md_data_free(d);
        th_tmpdir_free(dir);
    }
}

Test(data, split_sizes_seeded_and_max_samples)
{
    char *dir = th_tmpdir();
    char p[1200];
    snprintf(p, sizeof p, "%s/train.bin", dir);
    tf_write_cifar(p, 200, 1, 0);
    struct md_data_opts o = tf_opts("cifar100", dir);
    struct md_data *a = NULL, *b = NULL, *c = NULL;
    cr_assert_eq(md_data_open(&o, NULL, &a), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_data_count(a, MD_SPLIT_TRAIN), 180, "the seeds' 45,000/5,000 at 1/250 scale");
    cr_assert_eq(md_data_count(a, MD_SPLIT_VAL), 20);
    cr_assert_eq(md_data_count(a, MD_SPLIT_TEST), 0, "no test.bin");
    cr_assert_eq(md_data_open(&o, NULL, &b), MD_OK);
    int same = 1;
    for (int i = 0; i < 20; i++) same &= md_data_split_index(a, MD_SPLIT_VAL, i) == md_data_split_index(b, MD_SPLIT_VAL, i);
    cr_assert(same, "same seed, same split");
    o.seed = 7;
    o.max_samples = 50;
    cr_assert_eq(md_data_open(&o, NULL, &c), MD_OK);
    cr_assert_eq(md_data_count(c, MD_SPLIT_TRAIN), 50);
    same = 1;
    for (int i = 0; i < 20; i++) same &= md_data_split_index(a, MD_SPLIT_VAL, i) == md_data_split_index(c, MD_SPLIT_VAL, i);
    cr_assert(!same, "another seed, another split");
    long long total = 0;
    for (int k = 0; k < 100; k++) total += md_data_class_count(a, MD_SPLIT_TRAIN, k) + md_data_class_count(a, MD_SPLIT_VAL, k);
    cr_assert_eq(total, 200, "per-class counts add up");
    md_data_free(a);
    md_data_free(b);
    md_data_free(c);
    th_tmpdir_free(dir);
}

Test(data, cifar10_and_cifar100_labels_and_pixels)
{
    char *dir = th_tmpdir();
    char p[1200];
    snprintf(p, sizeof p, "%s/c10", dir);
    mkdir(p, 0755);
    for (int i = 1; i <= 5; i++) {
        snprintf(p, sizeof p, "%s/c10/data_batch_%d.bin", dir, i);
        tf_write_cifar(p, 10, 0, 0);
    }
    snprintf(p, sizeof p, "%s/c10/test_batch.bin", dir);
    tf_write_cifar(p, 12, 0, 0);
    snprintf(p, sizeof p, "%s/c100", dir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/c100/cifar-100-binary", dir);
    mkdir(p, 0755);
    snprintf(p, sizeof p, "%s/c100/cifar-100-binary/train.bin", dir);
    tf_write_cifar(p, 30, 1, 0);
    snprintf(p, sizeof p, "%s/c100/cifar-100-binary/test.bin", dir);
    tf_write_cifar(p, 8, 1, 0);

    snprintf(p, sizeof p, "%s/c10", dir);
    struct md_data_opts o = tf_opts("auto", p);
    o.val_split = 0;
    struct md_data *d = NULL;
    cr_assert_eq(md_data_open(&o, NULL, &d), MD_OK, "%s", md_errmsg());
    cr_assert_str_eq(md_data_name(d), "cifar10", "auto-detected");
    cr_assert_eq(md_data_count(d, MD_SPLIT_TRAIN), 50);
    cr_assert_eq(md_data_count(d, MD_SPLIT_TEST), 12);
    cr_assert_str_eq(md_data_class_name(d, 3), "cat");
    float *x;
    int32_t *y;
    long long n;
    load_all(d, MD_SPLIT_TEST, 1, &x, &y, &n);
    const float *m = md_data_mean(d, 0), *s = md_data_std(d, 0);
    for (int i = 0; i < 12; i++) {
        cr_assert_eq(y[i], i % 10);
        for (int c = 0; c < 3; c++)
            for (int q = 0; q < 1024; q += 37) {
                float want = ((float)tf_cifar_px(i, c, q) / 255.0f - m[c]) / s[c];
                cr_assert_float_eq(x[((size_t)i * 3 + c) * 1024 + q], want, 1e-5);
            }
    }
    free(x);
    free(y);
    md_data_free(d);

    snprintf(p, sizeof p, "%s/c100", dir);
    o = tf_opts("auto", p);
    o.val_split = 0;
    cr_assert_eq(md_data_open(&o, NULL, &d), MD_OK, "%s", md_errmsg());
    cr_assert_str_eq(md_data_name(d), "cifar100");
    cr_assert_eq(md_data_num_classes(d), 100, "fine labels by default");
    load_all(d, MD_SPLIT_TRAIN, 0, &x, &y, &n);
    for (int i = 0; i < 30; i++) cr_assert_eq(y[i], i % 100);
    free(x);
    free(y);
    md_data_free(d);
    o.coarse_labels = 1;
    cr_assert_eq(md_data_open(&o, NULL, &d), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_data_num_classes(d), 20);
    load_all(d, MD_SPLIT_TRAIN, 0, &x, &y, &n);
    for (int i = 0; i < 30; i++) cr_assert_eq(y[i], i % 20);
    free(x);
    free(y);
    md_data_free(d);
    th_tmpdir_free(dir);
}

Test(data, jpeg_folders_decode_resize_and_val_folder)
{
    char *dir = th_tmpdir();
    tf_write_jpeg_tree(dir, 3, 4, 2, 40, 36);
    struct md_data_opts o = tf_opts("auto", dir);
    o.image_size = 16;
    struct md_data *d = NULL;
    cr_assert_eq(md_data_open(&o, NULL, &d), MD_OK, "%s", md_errmsg());
    cr_assert_str_eq(md_data_name(d), "jpeg");
    cr_assert_eq(md_data_num_classes(d), 3);
    cr_assert_str_eq(md_data_class_name(d, 1), "classb");
    cr_assert_eq(md_data_count(d, MD_SPLIT_TRAIN), 12, "val/ folder: no split of train");
    cr_assert_eq(md_data_count(d, MD_SPLIT_VAL), 6);
    cr_assert_str_eq(md_data_split_origin(d, MD_SPLIT_VAL), "val/ folder");
    int c, h, w;
    md_data_source_shape(d, &c, &h, &w);
    cr_assert(c == 3 && h == 16 && w == 16);
    float *x;
    int32_t *y;
    long long n;
    load_all(d, MD_SPLIT_VAL, 2, &x, &y, &n);
    const float *m = md_data_mean(d, 0), *s = md_data_std(d, 0);
    for (int i = 0; i < n; i++) {
        uint8_t rgb[3];
        tf_class_rgb(y[i], rgb);
        for (int ch = 0; ch < 3; ch++)
            for (int q = 0; q < 256; q += 17) {
                float px = (x[((size_t)i * 3 + ch) * 256 + q] * s[ch] + m[ch]) * 255.0f;
                cr_assert(fabsf(px - rgb[ch]) <= 3.0f, "sample %d channel %d: %.1f vs %d", i, ch, (double)px, rgb[ch]);
            }
    }
    free(x);
    free(y);
    md_data_free(d);

    /* A gray model input from RGB JPEGs is decoded as luma. */
    struct md_data_request req = {.num_inputs = 1, .inputs = {{.name = "gray", .kind = MD_INPUT_IMAGE, .c = 1}}};
    cr_assert_eq(md_data_open(&o, &req, &d), MD_OK, "%s", md_errmsg());
    md_data_source_shape(d, &c, &h, &w);
    cr_assert_eq(c, 1);
    load_all(d, MD_SPLIT_VAL, 0, &x, &y, &n);
    for (int i = 0; i < n; i++) {
        uint8_t rgb[3];
        tf_class_rgb(y[i], rgb);
        float luma = 0.299f * rgb[0] + 0.587f * rgb[1] + 0.114f * rgb[2];
        float px = (x[(size_t)i * 256 + 100] * md_data_std(d, 0)[0] + md_data_mean(d, 0)[0]) * 255.0f;
        cr_assert(fabsf(px - luma) <= 3.0f, "luma %.1f vs %.1f", (double)px, (double)luma);
    }
    free(x);
    free(y);
    md_data_free(d);
    th_tmpdir_free(dir);
}

Test(data, luma_input_and_channel_conversion)
{
    char *dir = th_tmpdir();
    char p[1200];
    snprintf(p, sizeof p, "%s/data_batch_1.bin", dir);
    tf_write_cifar(p, 20, 0, 0);
    struct md_data_opts o = tf_opts("cifar10", dir);
    o.val_split = 0;
    struct md_data_request req = {
        .num_inputs = 2,
        .inputs = {{.name = "rgb", .kind = MD_INPUT_IMAGE}, {.name = "brightness", .kind = MD_INPUT_LUMA}},
        .layout = MD_NHWC,
    };
    struct md_data *d = NULL;
    cr_assert_eq(md_data_open(&o, &req, &d), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_data_num_inputs(d), 2);
    cr_assert_eq(md_data_input(d, 1)->c, 1);
    cr_assert_eq(md_data_input_elems(d, 1), 1024);
    struct md_loader_opts lo = {.split = MD_SPLIT_TRAIN, .batch_size = 20, .prefetch = 1, .seed = 1};
    struct md_loader *l = NULL;
    cr_assert_eq(md_loader_create(d, &lo, &l), MD_OK);
    cr_assert_eq(md_loader_start_epoch(l, 0), MD_OK);
    struct md_batch *b = NULL;
    cr_assert_eq(md_loader_next(l, &b), MD_OK);
    cr_assert_eq(b->n, 20);
    const float *m0 = md_data_mean(d, 0), *s0 = md_data_std(d, 0), *m1 = md_data_mean(d, 1), *s1 = md_data_std(d, 1);
    for (int i = 0; i < 20; i++)
        for (int q = 0; q < 1024; q += 29) {
            float rgb[3];
            for (int c = 0; c < 3; c++) {
                /* NHWC: (i, y, x, c) */
                rgb[c] = b->inputs[0][((size_t)i * 1024 + q) * 3 + c] * s0[c] + m0[c];
                cr_assert_float_eq(rgb[c], tf_cifar_px(i, c, q) / 255.0f, 1e-5);
            }
            float luma = b->inputs[1][(size_t)i * 1024 + q] * s1[0] + m1[0];
            cr_assert_float_eq(luma, 0.299f * rgb[0] + 0.587f * rgb[1] + 0.114f * rgb[2], 1e-4);
        }
    md_loader_release(l, b);
    md_loader_free(l);
    md_data_free(d);

    /* gray IDX to a 3-channel 8x8 input: replicated and resized */
    tf_write_idx(dir, "train", 10, 10, 4, 4, 0);
    o = tf_opts("mnist", dir);
    struct md_data_request r3 = {.num_inputs = 1, .inputs = {{.kind = MD_INPUT_IMAGE, .c = 3, .h = 8, .w = 8}}};
    cr_assert_eq(md_data_open(&o, &r3, &d), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_data_input_elems(d, 0), 192);
    float *x;
    int32_t *y;
    long long n;
    load_all(d, MD_SPLIT_TRAIN, 0, &x, &y, &n);
    for (int i = 0; i < n; i++)
        for (int q = 0; q < 64; q++) {
            cr_assert_float_eq(x[(size_t)i * 192 + q], x[(size_t)i * 192 + 64 + q], 1e-6);
            cr_assert_float_eq(x[(size_t)i * 192 + q], x[(size_t)i * 192 + 128 + q], 1e-6);
        }
    free(x);
    free(y);
    md_data_free(d);
    /* a 4-channel input cannot be made */
    struct md_data_request r4 = {.num_inputs = 1, .inputs = {{.name = "rgba", .c = 4}}};
    cr_assert_eq(md_data_open(&o, &r4, &d), MD_ERR_CONFIG);
    cr_assert(strstr(md_errmsg(), "rgba"), "%s", md_errmsg());
    /* fewer model outputs than classes */
    struct md_data_request r5 = {.num_classes = 5};
    cr_assert_eq(md_data_open(&o, &r5, &d), MD_ERR_CONFIG);
    th_tmpdir_free(dir);
}

Test(data, resize_bilinear)
{
    uint8_t src[2 * 4 * 4], dst[2 * 2 * 2], same[2 * 4 * 4];
    for (int i = 0; i < 32; i++) src[i] = (uint8_t)(i * 5);
    md_image_resize_u8(src, 2, 4, 4, same, 4, 4);
    cr_assert_eq(memcmp(src, same, sizeof src), 0, "same size is the identity");
    md_image_resize_u8(src, 2, 4, 4, dst, 2, 2);
    /* half-pixel centres: output (0,0) is the mean of the 2x2 block */
    for (int c = 0; c < 2; c++)
        for (int y = 0; y < 2; y++)
            for (int x = 0; x < 2; x++) {
                const uint8_t *p = src + c * 16 + y * 8 + x * 2;
                int mean = (p[0] + p[1] + p[4] + p[5] + 2) / 4;
                cr_assert_eq(dst[c * 4 + y * 2 + x], mean);
            }
    float f[4] = {0, 1, 2, 3}, up[16];
    md_image_resize_f32(f, 1, 2, 2, up, 4, 4);
    cr_assert_float_eq(up[0], 0.0f, 1e-6);
    cr_assert_float_eq(up[15], 3.0f, 1e-6);
    cr_assert_float_eq(up[1], 0.25f, 1e-6);
}

Test(data, cache_accounting_and_refusal)
{
    char *dir = th_tmpdir();
    tf_write_jpeg_tree(dir, 2, 5, 0, 24, 24);
    struct md_data_opts o = tf_opts("jpeg", dir);
    o.image_size = 12;
    o.val_split = 0.2;
    o.cache_images = 1;
    struct md_data *d = NULL;
    cr_assert_eq(md_data_open(&o, NULL, &d), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_data_cache_estimate(d), 10 * 3 * 12 * 12);
    long long before = md_data_cache_bytes(d);
    float *x1, *x2;
    int32_t *y;
    long long n;
    load_all(d, MD_SPLIT_TRAIN, 2, &x1, &y, &n);
    free(y);
    cr_assert_eq(md_data_cache_bytes(d), 8 * 3 * 12 * 12, "the 8 training images are cached (%lld before)", before);
    load_all(d, MD_SPLIT_TRAIN, 0, &x2, &y, &n);
    free(y);
    cr_assert_eq(memcmp(x1, x2, (size_t)n * 3 * 144 * sizeof(float)), 0, "cached = decoded");
    free(x1);
    free(x2);
    md_data_free(d);

    struct md_data_request req = {.mem_available = 1000};
    cr_assert_eq(md_data_open(&o, &req, &d), MD_ERR_OOM);
    cr_assert(strstr(md_errmsg(), "--cache-images") && strstr(md_errmsg(), "available"), "%s", md_errmsg());
    /* in-memory formats need no cache */
    tf_write_idx(dir, "train", 10, 10, 4, 4, 0);
    struct md_data_opts oi = tf_opts("mnist", dir);
    oi.cache_images = 1;
    cr_assert_eq(md_data_open(&oi, &req, &d), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_data_cache_estimate(d), 0);
    cr_assert_eq(md_data_resident_bytes(d), 160);
    md_data_free(d);
    th_tmpdir_free(dir);
}

Test(data, synthetic_is_learnable)
{
    /* Nearest class mean on raw pixels must beat chance by far: the classes
     * differ in a way a model can pick up. */
    struct md_data_opts o = tf_opts("synthetic", NULL);
    struct md_data_request req = {.num_inputs = 1, .inputs = {{.c = 3, .h = 16, .w = 16}}, .num_classes = 6};
    struct md_data *d = NULL;
    cr_assert_eq(md_data_open(&o, &req, &d), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_data_num_classes(d), 6);
    float *x, *v;
    int32_t *y, *yv;
    long long n, nv;
    load_all(d, MD_SPLIT_TRAIN, 0, &x, &y, &n);
    load_all(d, MD_SPLIT_VAL, 0, &v, &yv, &nv);
    const int E = 768;
    double *mean = calloc(6 * E, sizeof(double));
    int cnt[6] = {0};
    for (long long i = 0; i < n; i++) {
        cnt[y[i]]++;
        for (int e = 0; e < E; e++) mean[y[i] * E + e] += x[i * E + e];
    }
    for (int k = 0; k < 6; k++)
        for (int e = 0; e < E; e++) mean[k * E + e] /= cnt[k];
    int right = 0;
    for (long long i = 0; i < nv; i++) {
        int best = 0;
        double bd = 1e300;
        for (int k = 0; k < 6; k++) {
            double dd = 0;
            for (int e = 0; e < E; e++) dd += (v[i * E + e] - mean[k * E + e]) * (v[i * E + e] - mean[k * E + e]);
            if (dd < bd) { bd = dd; best = k; }
        }
        right += best == yv[i];
    }
    double acc = (double)right / (double)nv;
    fprintf(stderr, "synthetic: nearest-mean accuracy %.3f over %lld val samples\n", acc, nv);
    cr_assert(acc > 0.4, "accuracy %.3f (chance 0.167)", acc);
    free(mean);
    free(x); free(y); free(v); free(yv);
    md_data_free(d);
}

/* ---- bad input: each case fails with MD_ERR_DATA, one line naming the file ---- */

static void patch_be32(const char *path, long off, uint32_t v)
{
    FILE *f = fopen(path, "r+b");
    uint8_t b[4];
    tf_be32(b, v);
    fseek(f, off, SEEK_SET);
    fwrite(b, 1, 4, f);
    fclose(f);
}

/* A JPEG whose SOF header claims w x h. */
static void write_huge_jpeg(const char *path)
{
    tf_write_jpeg(path, 16, 16, 1, 2, 3);
    FILE *f = fopen(path, "r+b");
    uint8_t buf[4096];
    size_t n = fread(buf, 1, sizeof buf, f);
    for (size_t i = 2; i + 8 < n; i++) {
        if (buf[i] == 0xFF && buf[i + 1] == 0xC0) { /* SOF0: len(2) precision(1) height(2) width(2) */
            buf[i + 5] = 0xEA; buf[i + 6] = 0x60; /* 60000 */
            buf[i + 7] = 0xEA; buf[i + 8] = 0x60;
            break;
        }
    }
    fseek(f, 0, SEEK_SET);
    fwrite(buf, 1, n, f);
    fclose(f);
}

Test(data, bad_input_names_the_file)
{
    struct { const char *what, *dataset, *file_in_msg, *reason; } cases[] = {
        {"missing dir", "auto", "nope", "no such directory"},
        {"idx wrong magic", "mnist", "train-images-idx3-ubyte", "magic"},
        {"idx count vs length", "mnist", "train-images-idx3-ubyte", "bytes"},
        {"idx image/label mismatch", "mnist", "train-labels-idx1-ubyte", "labels"},
        {"idx gz truncated", "mnist", "train-images-idx3-ubyte.gz", "gzip"},
        {"cifar truncated", "cifar10", "data_batch_1.bin", "truncated"},
        {"cifar100 as cifar10", "cifar10", "data_batch_1.bin", "CIFAR-100"},
        {"empty class folder", "jpeg", "empty", "empty class folder"},
        {"jpg that is not a jpeg", "jpeg", "fake.jpg", "not a JPEG"},
        {"jpeg 60000x60000", "jpeg", "huge.jpg", "60000x60000"},
    };
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        char *dir = th_tmpdir();
        char p[1200], arg[1200];
        snprintf(arg, sizeof arg, "%s", dir);
        switch (t) {
        case 0: snprintf(arg, sizeof arg, "%s/nope", dir); break;
        case 1:
            tf_write_idx(dir, "train", 10, 10, 4, 4, 0);
            snprintf(p, sizeof p, "%s/train-images-idx3-ubyte", dir);
            patch_be32(p, 0, 0x0d03);
            break;
        case 2:
            tf_write_idx(dir, "train", 10, 10, 4, 4, 0);
            snprintf(p, sizeof p, "%s/train-images-idx3-ubyte", dir);
            patch_be32(p, 4, 11);
            break;
        case 3: tf_write_idx(dir, "train", 10, 9, 4, 4, 0); break;
        case 4: {
            tf_write_idx(dir, "train", 100, 100, 8, 8, 1);
            snprintf(p, sizeof p, "%s/train-images-idx3-ubyte.gz", dir);
            struct stat sb;
            stat(p, &sb);
            cr_assert_eq(truncate(p, sb.st_size / 2), 0);
            break;
        }
        case 5: snprintf(p, sizeof p, "%s/data_batch_1.bin", dir); tf_write_cifar(p, 5, 0, 100); break;
        case 6: snprintf(p, sizeof p, "%s/data_batch_1.bin", dir); tf_write_cifar(p, 5, 1, 0); break;
        case 7:
            tf_write_jpeg_tree(dir, 2, 2, 0, 8, 8);
            tf_mkdir(dir, "empty");
            break;
        case 8:
            tf_write_jpeg_tree(dir, 2, 2, 0, 8, 8);
            snprintf(p, sizeof p, "%s/classa/fake.jpg", dir);
            tf_put(p, "\x89PNG\r\n\x1a\n not really", 20, 0);
            break;
        case 9:
            tf_write_jpeg_tree(dir, 2, 2, 0, 8, 8);
            snprintf(p, sizeof p, "%s/classb/huge.jpg", dir);
            write_huge_jpeg(p);
            break;
        }
        struct md_data_opts o = tf_opts(cases[t].dataset, arg);
        struct md_data *d = NULL;
        md_status st = md_data_open(&o, NULL, &d);
        const char *msg = md_errmsg();
        fprintf(stderr, "bad input [%s]: %s\n", cases[t].what, msg);
        cr_assert_eq(st, MD_ERR_DATA, "[%s] status %d: %s", cases[t].what, st, msg);
        cr_assert_null(d);
        cr_assert(strstr(msg, cases[t].file_in_msg), "[%s] message does not name %s: %s", cases[t].what,
                  cases[t].file_in_msg, msg);
        cr_assert(strstr(msg, cases[t].reason), "[%s] message lacks '%s': %s", cases[t].what, cases[t].reason, msg);
        cr_assert_null(strchr(msg, '\n'), "one line");
        th_tmpdir_free(dir);
    }
}

Test(data, skip_bad_samples_counts_them)
{
    char *dir = th_tmpdir();
    tf_write_jpeg_tree(dir, 2, 3, 0, 8, 8);
    char p[1200];
    snprintf(p, sizeof p, "%s/classa/fake.jpg", dir);
    tf_put(p, "GIF89a not a jpeg at all", 24, 0);
    /* passes the SOI check, fails inside TurboJPEG; the images after it
     * (same decoder) must still be read */
    snprintf(p, sizeof p, "%s/classa/bad.jpg", dir);
    tf_write_jpeg(p, 8, 8, 9, 9, 9);
    {   /* a bogus length in the quantisation-table marker */
        FILE *f = fopen(p, "r+b");
        uint8_t b[64];
        size_t n = fread(b, 1, sizeof b, f);
        for (size_t i = 2; i + 3 < n; i++)
            if (b[i] == 0xFF && b[i + 1] == 0xDB) { b[i + 2] = 0; b[i + 3] = 1; break; }
        fseek(f, 0, SEEK_SET);
        fwrite(b, 1, n, f);
        fclose(f);
    }
    snprintf(p, sizeof p, "%s/classb/huge.jpg", dir);
    write_huge_jpeg(p);
    struct md_data_opts o = tf_opts("jpeg", dir);
    o.skip_bad = 1;
    o.val_split = 0;
    struct md_data *d = NULL;
    cr_assert_eq(md_data_open(&o, NULL, &d), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_data_skipped(d), 3);
    cr_assert(strstr(md_data_first_bad(d), "bad.jpg"), "%s", md_data_first_bad(d));
    cr_assert_eq(md_data_count(d, MD_SPLIT_TRAIN), 6);
    md_data_free(d);
    th_tmpdir_free(dir);
}

Test(data, cli_bad_data_exit_code_3)
{
    char *dir = th_tmpdir();
    tf_write_jpeg_tree(dir, 2, 2, 0, 8, 8);
    char p[1200];
    snprintf(p, sizeof p, "%s/classb/huge.jpg", dir);
    write_huge_jpeg(p);
    char args[1400], *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "--device cpu --dataset jpeg --data-dir %s", dir);
    int rc = th_run(args, &out, &err);
    cr_assert_eq(rc, 3, "exit %d, stderr: %s", rc, err);
    cr_assert(strstr(err, "huge.jpg") && strstr(err, "60000x60000"), "stderr: %s", err);
    free(out);
    free(err);
    snprintf(args, sizeof args, "--device cpu --dataset cifar100 --data-dir %s/none", dir);
    rc = th_run(args, &out, &err);
    cr_assert_eq(rc, 3, "exit %d, stderr: %s", rc, err);
    cr_assert(strstr(err, "none"), "stderr: %s", err);
    free(out);
    free(err);
    th_tmpdir_free(dir);
}

Test(data, peek_matches_open)
{
    char *dir = th_tmpdir();
    char p[1200];
    snprintf(p, sizeof p, "%s/train.bin", dir);
    tf_write_cifar(p, 10, 1, 0);
    struct md_data_opts o = tf_opts("auto", dir);
    struct md_data_peek pk;
    cr_assert_eq(md_data_peek(&o, &pk), MD_OK, "%s", md_errmsg());
    cr_assert_str_eq(pk.name, "cifar100");
    cr_assert(pk.num_classes == 100 && pk.c == 3 && pk.h == 32 && pk.w == 32);
    o.coarse_labels = 1;
    cr_assert_eq(md_data_peek(&o, &pk), MD_OK);
    cr_assert_eq(pk.num_classes, 20);
    char sub[1200];
    snprintf(sub, sizeof sub, "%s/idx", dir);
    mkdir(sub, 0755);
    tf_write_idx(sub, "train", 12, 12, 9, 7, 1);
    o = tf_opts("mnist", sub);
    cr_assert_eq(md_data_peek(&o, &pk), MD_OK, "%s", md_errmsg());
    cr_assert(pk.num_classes == 10 && pk.c == 1 && pk.h == 9 && pk.w == 7);
    snprintf(sub, sizeof sub, "%s/jp", dir);
    mkdir(sub, 0755);
    tf_write_jpeg_tree(sub, 4, 1, 0, 8, 8);
    o = tf_opts("auto", sub);
    cr_assert_eq(md_data_peek(&o, &pk), MD_OK, "%s", md_errmsg());
    cr_assert(pk.num_classes == 4 && pk.c == 3 && pk.h == 0);
    o = tf_opts("auto", "/nonexistent/dir");
    cr_assert_eq(md_data_peek(&o, &pk), MD_ERR_DATA);
    th_tmpdir_free(dir);
}

Test(data, config_data_section)
{
    char *dir = th_tmpdir();
    char *cfg = th_write(dir, "run.json",
                         "{\"device\": \"cpu\", \"model\": \"resnet18_cifar\", \"epochs\": 0,"
                         " \"data\": {\"dataset\": \"synthetic\", \"val_split\": 0.2,"
                         " \"augment\": {\"crop_padding\": 2, \"flip\": false},"
                         " \"normalize\": {\"mean\": [0.5, 0.5, 0.5], \"std\": [0.25, 0.25, 0.25]}}}");
    char args[2400], *out = NULL, *err = NULL;
    snprintf(args, sizeof args, "--config %s --quiet", cfg);
    cJSON *r = th_run_report(dir, args, 0, &out, &err);
    const cJSON *d = cJSON_GetObjectItem(r, "data");
    cr_assert_not_null(d);
    cr_assert_str_eq(cJSON_GetObjectItem(d, "dataset")->valuestring, "synthetic");
    cr_assert_str_eq(cJSON_GetObjectItem(d, "normalisation")->valuestring, "config");
    const cJSON *aug = cJSON_GetObjectItem(d, "augmentation");
    cr_assert_eq(cJSON_GetObjectItem(aug, "crop_padding")->valueint, 2);
    cr_assert(cJSON_IsFalse(cJSON_GetObjectItem(aug, "flip")));
    const cJSON *val = cJSON_GetObjectItem(cJSON_GetObjectItem(d, "splits"), "val");
    cr_assert_eq(cJSON_GetObjectItem(val, "count")->valueint, 1000, "0.2 of 5,000");
    const cJSON *in0 = cJSON_GetArrayItem(cJSON_GetObjectItem(d, "inputs"), 0);
    cr_assert_float_eq(cJSON_GetArrayItem(cJSON_GetObjectItem(in0, "std"), 1)->valuedouble, 0.25, 1e-9);
    cJSON_Delete(r);
    free(out);
    free(err);
    free(cfg);

    /* errors name the key */
    const char *bad[][2] = {
        {"{\"data\": {\"bogus\": 1}}", "data: unknown key 'bogus'"},
        {"{\"data\": {\"augment\": {\"flip\": 3}}}", "data.augment.flip"},
        {"{\"data\": {\"normalize\": {\"mean\": [0.5], \"std\": [0]}}}", "data.normalize.std[0]"},
        {"{\"data\": {\"dataset\": \"imagenet\"}}", "data.dataset"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cfg = th_write(dir, "bad.json", bad[i][0]);
        snprintf(args, sizeof args, "--device cpu --config %s", cfg);
        int rc = th_run(args, &out, &err);
        cr_assert_eq(rc, 3, "%s: exit %d: %s", bad[i][0], rc, err);
        cr_assert(strstr(err, bad[i][1]) && strstr(err, "bad.json"), "%s: %s", bad[i][0], err);
        free(out);
        free(err);
        free(cfg);
    }
    th_tmpdir_free(dir);
}
