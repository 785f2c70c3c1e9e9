/* test_data_files.h - writers of tiny dataset files for the data tests (IDX,
 * gzipped or not; CIFAR records; JPEG class folders through tjCompress2).
 * Header-only (static) so each data test file gets its own copy. */
#ifndef MD_TEST_DATA_FILES_H
#define MD_TEST_DATA_FILES_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <turbojpeg.h>
#include <zlib.h>

#include "data/data.h"

/* Data options for `dataset` in `dir` (NULL: the default folder). */
static inline struct md_data_opts tf_opts(const char *dataset, const char *dir)
{
    struct md_data_opts o;
    md_data_opts_default(&o);
    snprintf(o.dataset, sizeof o.dataset, "%s", dataset);
    if (dir) snprintf(o.data_dir, sizeof o.data_dir, "%s", dir);
    return o;
}

/* Pixel (y, x) of IDX image i: a value that tells images apart. */
static inline uint8_t tf_idx_px(int i, int y, int x) { return (uint8_t)((i * 7 + y * 3 + x * 11) & 0xff); }

static inline void tf_put(const char *path, const void *data, size_t n, int gz)
{
    if (gz) {
        gzFile f = gzopen(path, "wb");
        gzwrite(f, data, (unsigned)n);
        gzclose(f);
    } else {
        FILE *f = fopen(path, "wb");
        fwrite(data, 1, n, f);
        fclose(f);
    }
}

static inline void tf_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24); p[1] = (uint8_t)(v >> 16); p[2] = (uint8_t)(v >> 8); p[3] = (uint8_t)v;
}

/* dir/<stem>-images-idx3-ubyte[.gz] with n images of h x w and the labels
 * file with nl labels (i % 10). */
static inline void tf_write_idx(const char *dir, const char *stem, int n, int nl, int h, int w, int gz)
{
    size_t isz = 16 + (size_t)n * h * w;
    uint8_t *im = malloc(isz);
    tf_be32(im, 0x803); tf_be32(im + 4, (uint32_t)n); tf_be32(im + 8, (uint32_t)h); tf_be32(im + 12, (uint32_t)w);
    for (int i = 0; i < n; i++)
        for (int y = 0; y < h; y++)
            for (int x = 0; x < w; x++) im[16 + ((size_t)i * h + y) * w + x] = tf_idx_px(i, y, x);
    uint8_t *lb = malloc(8 + (size_t)nl);
    tf_be32(lb, 0x801); tf_be32(lb + 4, (uint32_t)nl);
    for (int i = 0; i < nl; i++) lb[8 + i] = (uint8_t)(i % 10);
    char p[1024];
    snprintf(p, sizeof p, "%s/%s-images-idx3-ubyte%s", dir, stem, gz ? ".gz" : "");
    tf_put(p, im, isz, gz);
    snprintf(p, sizeof p, "%s/%s-labels-idx1-ubyte%s", dir, stem, gz ? ".gz" : "");
    tf_put(p, lb, 8 + (size_t)nl, gz);
    free(im);
    free(lb);
}

/* Pixel of CIFAR record i, channel c, position p. */
static inline uint8_t tf_cifar_px(int i, int c, int p) { return (uint8_t)((i * 13 + c * 85 + p) & 0xff); }

/* n CIFAR records (CIFAR-100: coarse = i % 20, fine = i % 100; CIFAR-10: i % 10). */
static inline void tf_write_cifar(const char *path, int n, int cifar100, size_t cut)
{
    size_t rec = cifar100 ? 3074 : 3073;
    uint8_t *b = malloc(rec * (size_t)n);
    for (int i = 0; i < n; i++) {
        uint8_t *r = b + rec * (size_t)i;
        if (cifar100) { r[0] = (uint8_t)(i % 20); r[1] = (uint8_t)(i % 100); }
        else r[0] = (uint8_t)(i % 10);
        for (int c = 0; c < 3; c++)
            for (int p = 0; p < 1024; p++) r[(cifar100 ? 2 : 1) + c * 1024 + p] = tf_cifar_px(i, c, p);
    }
    tf_put(path, b, rec * (size_t)n - cut, 0);
    free(b);
}

/* A w x h JPEG of one colour with a little gradient, quality 95. */
static inline void tf_write_jpeg(const char *path, int w, int h, uint8_t r, uint8_t g, uint8_t bl)
{
    uint8_t *rgb = malloc((size_t)w * h * 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = rgb + ((size_t)y * w + x) * 3;
            p[0] = r; p[1] = g; p[2] = bl;
        }
    tjhandle tj = tjInitCompress();
    unsigned char *jpg = NULL;
    unsigned long len = 0;
    tjCompress2(tj, rgb, w, 0, h, TJPF_RGB, &jpg, &len, TJSAMP_444, 95, 0);
    tf_put(path, jpg, len, 0);
    tjFree(jpg);
    tjDestroy(tj);
    free(rgb);
}

/* The colour of class k in the test JPEG folders. */
static inline void tf_class_rgb(int k, uint8_t *rgb)
{
    rgb[0] = (uint8_t)(40 + 80 * (k % 3));
    rgb[1] = (uint8_t)(200 - 60 * (k % 2));
    rgb[2] = (uint8_t)(30 + 50 * k);
}

static inline void tf_mkdir(const char *a, const char *b)
{
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", a, b);
    mkdir(p, 0755);
}

/* root/[train/]<class k>/img<i>.jpg for `ncls` classes of `per` images each
 * (w x h); with `val_per`, also root/val/<class>/ (then train/ is used). */
static inline void tf_write_jpeg_tree(const char *root, int ncls, int per, int val_per, int w, int h)
{
    const char *splits[2] = {val_per ? "train" : "", "val"};
    for (int s = 0; s < (val_per ? 2 : 1); s++) {
        char sd[1024];
        snprintf(sd, sizeof sd, "%s/%s", root, splits[s]);
        mkdir(sd, 0755);
        for (int k = 0; k < ncls; k++) {
            char cn[32];
            snprintf(cn, sizeof cn, "class%c", 'a' + k);
            tf_mkdir(sd, cn);
            int cnt = s ? val_per : per;
            for (int i = 0; i < cnt; i++) {
                char p[1200];
                snprintf(p, sizeof p, "%s/%s/img%03d.jpg", sd, cn, i);
                uint8_t c[3];
                tf_class_rgb(k, c);
                tf_write_jpeg(p, w, h, c[0], c[1], c[2]);
            }
        }
    }
}

#endif
