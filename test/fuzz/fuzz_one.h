/* fuzz_one.h - one input through each parser of src/data (IDX, CIFAR, JPEG),
 * seed inputs, and a small deterministic mutator for the smoke mode. Used by
 * the libFuzzer targets in test/fuzz/ and by test/test_data_fuzz.c (the
 * smoke run inside `make test`). Header-only so both can include it. */
#ifndef MD_FUZZ_ONE_H
#define MD_FUZZ_ONE_H

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "core/mem.h"
#include "data/data_impl.h"

/* IDX: both headers; on success every byte the view claims is read. */
static inline int md_fuzz_idx(const uint8_t *d, size_t n)
{
    md_idx v;
    unsigned sum = 0;
    for (int nd = 1; nd <= 3; nd += 2) {
        if (md_idx_parse(d, n, "fuzz.idx", nd, &v) != MD_OK) continue;
        size_t total = v.dims[0];
        if (nd == 3) total *= (size_t)v.dims[1] * v.dims[2];
        for (size_t i = 0; i < total; i++) sum += v.data[i];
    }
    return sum == 0xffffffffu; /* uses the reads; libFuzzer wants 0 almost always */
}

/* CIFAR: both layouts; on success the records are extracted. */
static inline int md_fuzz_cifar(const uint8_t *d, size_t n)
{
    for (int c100 = 0; c100 < 2; c100++) {
        long long count = 0;
        if (md_cifar_check(d, n, "fuzz.bin", c100, &count) != MD_OK) continue;
        uint8_t *px = md_malloc((size_t)count * MD_CIFAR_PIXELS);
        int32_t *lab = md_malloc((size_t)count * sizeof *lab);
        if (px && lab) md_cifar_extract(d, count, c100, c100, px, lab);
        md_free(px);
        md_free(lab);
    }
    return 0;
}

/* JPEG: header, then (for images up to 4 Mpx) a small scaled decode and,
 * for small images, a full-size gray decode. */
static inline int md_fuzz_jpeg(const uint8_t *d, size_t n)
{
    static md_jpeg *j;
    if (!j && md_jpeg_new(&j) != MD_OK) return 0;
    int w, h;
    if (md_jpeg_header(j, d, n, "fuzz.jpg", &w, &h) != MD_OK) return 0;
    if ((long long)w * h > 4000000) return 0;
    uint8_t small[3 * 16 * 16];
    md_jpeg_decode(j, d, n, "fuzz.jpg", 3, 16, 16, small);
    if ((long long)w * h <= 65536) {
        uint8_t *full = md_malloc((size_t)w * h);
        if (full) md_jpeg_decode(j, d, n, "fuzz.jpg", 1, h, w, full);
        md_free(full);
    }
    return 0;
}

/* ---- seeds ---- */

static inline size_t md_fuzz_seed_idx(uint8_t *b, int images)
{
    const uint32_t n = 3, hh = 4, ww = 5;
    size_t k = 0;
    uint32_t hdr[4] = {images ? 0x803u : 0x801u, n, hh, ww};
    for (int i = 0; i < (images ? 4 : 2); i++)
        for (int s = 24; s >= 0; s -= 8) b[k++] = (uint8_t)(hdr[i] >> s);
    size_t body = images ? n * hh * ww : n;
    for (size_t i = 0; i < body; i++) b[k++] = (uint8_t)(i * 37 % (images ? 256 : 10));
    return k;
}

static inline size_t md_fuzz_seed_cifar(uint8_t *b, int c100)
{
    size_t rec = c100 ? 3074 : 3073, k = 0;
    for (int r = 0; r < 2; r++) {
        b[k++] = (uint8_t)(r + 3);
        if (c100) b[k++] = (uint8_t)(r + 42);
        for (int i = 0; i < MD_CIFAR_PIXELS; i++) b[k++] = (uint8_t)(i * 7 + r);
    }
    return k == 2 * rec ? k : 0;
}

/* A 24x16 JPEG (baseline or progressive); returns its size (<= cap). */
static inline size_t md_fuzz_seed_jpeg(uint8_t *b, size_t cap, int progressive)
{
    uint8_t rgb[24 * 16 * 3];
    for (int i = 0; i < 24 * 16 * 3; i++) rgb[i] = (uint8_t)(i * 13 + (i / 72) * 5);
    tjhandle tj = tjInitCompress();
    unsigned char *jpg = NULL;
    unsigned long len = 0;
    tjCompress2(tj, rgb, 24, 0, 16, TJPF_RGB, &jpg, &len, TJSAMP_420, 80, progressive ? TJFLAG_PROGRESSIVE : 0);
    size_t n = len <= cap ? len : 0;
    if (n) memcpy(b, jpg, n);
    tjFree(jpg);
    tjDestroy(tj);
    return n;
}

/* ---- smoke mode: deterministic mutations of a seed ---- */

static inline uint64_t md_fuzz_rand(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* Writes a mutation of seed[0..n) into out (capacity cap) and returns its
 * size; bytes before `from` stay as they are (to reach past a header). */
static inline size_t md_fuzz_mutate(const uint8_t *seed, size_t n, size_t from, uint8_t *out, size_t cap,
                                    uint64_t *rs)
{
    size_t m = n < cap ? n : cap;
    memcpy(out, seed, m);
    int ops = 1 + (int)(md_fuzz_rand(rs) % 4);
    static const uint8_t interesting[] = {0x00, 0xff, 0x7f, 0x80, 0x01, 0xd8, 0xc0, 0xda, 0x08, 0x03};
    for (int o = 0; o < ops && m > from; o++) {
        size_t at = from + (size_t)(md_fuzz_rand(rs) % (m - from));
        switch (md_fuzz_rand(rs) % 6) {
        case 0: out[at] ^= (uint8_t)(1u << (md_fuzz_rand(rs) % 8)); break;
        case 1: out[at] = interesting[md_fuzz_rand(rs) % sizeof interesting]; break;
        case 2: out[at] = (uint8_t)md_fuzz_rand(rs); break;
        case 3: m = at; break; /* truncate */
        case 4: /* duplicate a chunk */
            if (m + 16 <= cap) {
                memmove(out + at + 16, out + at, m - at);
                m += 16;
            }
            break;
        case 5: /* a header-sized field: big numbers in a length or count */
            if (at + 4 <= m) {
                uint32_t v = (uint32_t)md_fuzz_rand(rs) >> (md_fuzz_rand(rs) % 32);
                out[at] = (uint8_t)(v >> 24); out[at + 1] = (uint8_t)(v >> 16);
                out[at + 2] = (uint8_t)(v >> 8); out[at + 3] = (uint8_t)v;
            }
            break;
        }
    }
    return m;
}

/* Offset just past the JPEG start-of-scan header (0 if none). */
static inline size_t md_fuzz_jpeg_scan(const uint8_t *b, size_t n)
{
    for (size_t i = 0; i + 3 < n; i++)
        if (b[i] == 0xFF && b[i + 1] == 0xDA) return i + 2 + (((size_t)b[i + 2] << 8) | b[i + 3]);
    return 0;
}

#endif
