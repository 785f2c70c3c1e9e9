/* test_safetensors.c - safetensors layout byte by byte against the format,
 * round trips, every kind of corruption, and atomic writes that fail cleanly. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/mem.h"
#include "core/safetensors.h"
#include "helpers.h"

static unsigned char *slurp_bin(const char *path, size_t *n)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot open %s", path);
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *b = malloc((size_t)sz + 1);
    cr_assert_eq(fread(b, 1, (size_t)sz, f), (size_t)sz);
    fclose(f);
    *n = (size_t)sz;
    return b;
}

static void write_bin(const char *path, const void *b, size_t n)
{
    FILE *f = fopen(path, "wb");
    cr_assert(f);
    cr_assert_eq(fwrite(b, 1, n, f), n);
    fclose(f);
}

/* A file from a header text (padded or not, as given) and a data buffer. */
static char *make_file(const char *dir, const char *name, const char *header, const void *data, size_t ndata)
{
    char *path = malloc(strlen(dir) + strlen(name) + 2);
    sprintf(path, "%s/%s", dir, name);
    size_t hl = strlen(header);
    unsigned char *b = malloc(8 + hl + ndata + 1);
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((unsigned long long)hl >> (8 * i));
    memcpy(b + 8, header, hl);
    if (ndata) memcpy(b + 8 + hl, data, ndata);
    write_bin(path, b, 8 + hl + ndata);
    free(b);
    return path;
}

Test(safetensors, layout_byte_by_byte)
{
    char *dir = th_tmpdir();
    char path[4200];
    snprintf(path, sizeof path, "%s/a.safetensors", dir);
    md_st_writer *w;
    cr_assert_eq(md_st_writer_new(&w), MD_OK);
    const uint8_t u[3] = {7, 8, 9};
    const float f[2] = {1.0f, -2.0f};
    long long s3 = 3, s12[2] = {1, 2};
    /* added U8 first: the writer must put the F32 tensor first for alignment */
    cr_assert_eq(md_st_writer_add(w, "u", MD_U8, 1, &s3, u), MD_OK);
    cr_assert_eq(md_st_writer_add(w, "w", MD_F32, 2, s12, f), MD_OK);
    cr_assert_eq(md_st_writer_meta(w, "k", "v\"q"), MD_OK);
    cr_assert_eq(md_st_writer_write(w, path), MD_OK);
    md_st_writer_free(w);

    const char *json = "{\"__metadata__\":{\"k\":\"v\\\"q\"},"
                       "\"w\":{\"dtype\":\"F32\",\"shape\":[1,2],\"data_offsets\":[0,8]},"
                       "\"u\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[8,11]}}";
    size_t jl = strlen(json), hl = (jl + 7) / 8 * 8;
    size_t n;
    unsigned char *b = slurp_bin(path, &n);
    cr_assert_eq(n, 8 + hl + 11, "file size %zu, want %zu", n, 8 + hl + 11);
    for (int i = 0; i < 8; i++)
        cr_assert_eq(b[i], (unsigned char)(hl >> (8 * i)), "header length byte %d", i);
    cr_assert_eq(memcmp(b + 8, json, jl), 0, "header text: %.*s", (int)hl, b + 8);
    for (size_t i = jl; i < hl; i++) cr_assert_eq(b[8 + i], ' ', "padding must be spaces");
    /* 1.0f = 0x3f800000, -2.0f = 0xc0000000, little-endian */
    const unsigned char want[11] = {0, 0, 0x80, 0x3f, 0, 0, 0, 0xc0, 7, 8, 9};
    cr_assert_eq(memcmp(b + 8 + hl, want, 11), 0, "data bytes");
    cr_assert_eq((8 + hl) % 8, 0, "data starts 8-byte aligned");
    free(b);
    char tmp[4300];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    cr_assert_eq(access(tmp, F_OK), -1, "no temporary file left");
    th_tmpdir_free(dir);
}

Test(safetensors, round_trip_every_dtype)
{
    char *dir = th_tmpdir();
    char path[4200];
    snprintf(path, sizeof path, "%s/r.safetensors", dir);
    float f32[6] = {0.5f, -1.25f, 3e-8f, 1e30f, -0.0f, 7.0f};
    uint16_t f16[3] = {0x3c00, 0xc000, 0x7bff};
    uint16_t bf16[2] = {0x3f80, 0x4049};
    int32_t i32[4] = {-1, 0, 2147483647, -2147483647 - 1};
    uint8_t u8[5] = {0, 1, 127, 128, 255};
    float scalar = 42.0f;
    long long s23[2] = {2, 3}, s3 = 3, s2 = 2, s221[3] = {2, 2, 1}, s5 = 5, s0 = 0;
    md_st_writer *w;
    cr_assert_eq(md_st_writer_new(&w), MD_OK);
    cr_assert_eq(md_st_writer_add(w, "layer.0.weight", MD_F32, 2, s23, f32), MD_OK);
    cr_assert_eq(md_st_writer_add(w, "h", MD_F16, 1, &s3, f16), MD_OK);
    cr_assert_eq(md_st_writer_add(w, "b", MD_BF16, 1, &s2, bf16), MD_OK);
    cr_assert_eq(md_st_writer_add(w, "i", MD_I32, 3, s221, i32), MD_OK);
    cr_assert_eq(md_st_writer_add(w, "u", MD_U8, 1, &s5, u8), MD_OK);
    cr_assert_eq(md_st_writer_add(w, "scalar", MD_F32, 0, NULL, &scalar), MD_OK);
    cr_assert_eq(md_st_writer_add(w, "empty", MD_F32, 1, &s0, NULL), MD_OK);
    cr_assert_neq(md_st_writer_add(w, "h", MD_F32, 1, &s3, f32), MD_OK, "duplicate name refused");
    cr_assert_eq(md_st_writer_meta(w, "config", "{\"a\": [1, 2]}\n\tline2 é"), MD_OK);
    cr_assert_eq(md_st_writer_meta(w, "epoch", "1"), MD_OK);
    cr_assert_eq(md_st_writer_meta(w, "epoch", "3"), MD_OK); /* replaced */
    cr_assert_eq(md_st_writer_write(w, path), MD_OK);
    md_st_writer_free(w);

    md_st_file *f;
    cr_assert_eq(md_st_open(path, &f), MD_OK, "%s", md_errmsg());
    cr_assert_eq(md_st_count(f), 7);
    cr_assert_str_eq(md_st_meta(f, "config"), "{\"a\": [1, 2]}\n\tline2 é");
    cr_assert_str_eq(md_st_meta(f, "epoch"), "3");
    cr_assert_eq(md_st_meta_count(f), 2);
    cr_assert_null(md_st_meta(f, "nope"));
    float g32[6];
    cr_assert_eq(md_st_copy(f, "layer.0.weight", MD_F32, 2, s23, g32), MD_OK);
    cr_assert_eq(memcmp(g32, f32, sizeof f32), 0);
    uint16_t g16[3], gb[2];
    cr_assert_eq(md_st_copy(f, "h", MD_F16, 1, &s3, g16), MD_OK);
    cr_assert_eq(memcmp(g16, f16, sizeof f16), 0);
    cr_assert_eq(md_st_copy(f, "b", MD_BF16, 1, &s2, gb), MD_OK);
    cr_assert_eq(memcmp(gb, bf16, sizeof bf16), 0);
    int32_t gi[4];
    cr_assert_eq(md_st_copy(f, "i", MD_I32, 3, s221, gi), MD_OK);
    cr_assert_eq(memcmp(gi, i32, sizeof i32), 0);
    uint8_t gu[5];
    cr_assert_eq(md_st_copy(f, "u", MD_U8, -1, NULL, gu), MD_OK);
    cr_assert_eq(memcmp(gu, u8, sizeof u8), 0);
    const struct md_st_tensor *t = md_st_find(f, "scalar");
    cr_assert(t && t->ndim == 0 && t->numel == 1 && t->nbytes == 4);
    t = md_st_find(f, "empty");
    cr_assert(t && t->ndim == 1 && t->numel == 0 && t->nbytes == 0);
    for (int i = 0; i < md_st_count(f); i++) {
        t = md_st_at(f, i);
        cr_assert_eq(((uintptr_t)t->data) % md_dtype_size(t->dtype), 0, "%s aligned", t->name);
    }
    /* md_st_expect names the file and tensor on a mismatch */
    long long wrong[2] = {3, 2};
    cr_assert_eq(md_st_expect(f, "layer.0.weight", MD_F32, 2, wrong, NULL), MD_ERR_DATA);
    cr_assert(strstr(md_errmsg(), path) && strstr(md_errmsg(), "layer.0.weight") &&
                  strstr(md_errmsg(), "(2, 3)") && strstr(md_errmsg(), "(3, 2)"),
              "%s", md_errmsg());
    cr_assert_eq(md_st_expect(f, "h", MD_F32, -1, NULL, NULL), MD_ERR_DATA);
    cr_assert(strstr(md_errmsg(), "'h'") && strstr(md_errmsg(), "F16"), "%s", md_errmsg());
    cr_assert_eq(md_st_expect(f, "missing", MD_F32, -1, NULL, NULL), MD_ERR_DATA);
    cr_assert(strstr(md_errmsg(), "'missing' is missing"), "%s", md_errmsg());
    md_st_close(f);
    md_st_close(NULL);
    md_st_writer_free(NULL);
    th_tmpdir_free(dir);
}

Test(safetensors, reads_unpadded_foreign_layout)
{
    /* Offsets in any header order and an unpadded header are valid. */
    char *dir = th_tmpdir();
    const unsigned char data[6] = {1, 2, 3, 4, 5, 6};
    char *p = make_file(dir, "x.st",
                        "{\"b\":{\"dtype\":\"U8\",\"shape\":[2],\"data_offsets\":[4,6]},"
                        "\"a\":{\"dtype\":\"U8\",\"shape\":[2,2],\"data_offsets\":[0,4]}}",
                        data, 6);
    md_st_file *f;
    cr_assert_eq(md_st_open(p, &f), MD_OK, "%s", md_errmsg());
    uint8_t b[2];
    cr_assert_eq(md_st_copy(f, "b", MD_U8, -1, NULL, b), MD_OK);
    cr_assert(b[0] == 5 && b[1] == 6);
    md_st_close(f);
    free(p);
    th_tmpdir_free(dir);
}

Test(safetensors, every_corruption_is_a_data_error)
{
    static const struct {
        const char *what, *header;
        size_t ndata;
        const char *needle;
    } cases[] = {
        {"malformed JSON", "{\"a\":{\"dtype\":\"F32\",", 4, "malformed JSON"},
        {"not an object", "[1, 2]  ", 0, "does not start"},
        {"text after object", "{} x", 0, "text after"},
        {"unknown dtype", "{\"a\":{\"dtype\":\"X64\",\"shape\":[1],\"data_offsets\":[0,8]}}", 8, "'a': dtype 'X64'"},
        {"dtype/shape mismatch", "{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
         "'a': data_offsets span 8 bytes"},
        {"offsets out of range", "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 8,
         "'a': data_offsets [4, 12] beyond"},
        {"overlap",
         "{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
         "\"b\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
         8, "overlap"},
        {"hole", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "hole"},
        {"trailing bytes", "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}", 8, "cover 4 of 8"},
        {"end before begin", "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[4,0]}}", 8, "end before"},
        {"negative shape", "{\"a\":{\"dtype\":\"U8\",\"shape\":[-1],\"data_offsets\":[0,0]}}", 0, "shape[0]"},
        {"missing offsets", "{\"a\":{\"dtype\":\"U8\",\"shape\":[0]}}", 0, "data_offsets must be"},
        {"unknown key", "{\"a\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[0,0],\"x\":1}}", 0,
         "unknown key 'x'"},
        {"duplicate tensor",
         "{\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
         "\"a\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
         2, "appears twice"},
        {"metadata not strings", "{\"__metadata__\":{\"epoch\":3}}", 0, "__metadata__.epoch"},
        {"entry not object", "{\"a\":5}", 0, "not an object"},
    };
    char *dir = th_tmpdir();
    unsigned char zeros[16] = {0};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *p = make_file(dir, "c.st", cases[i].header, zeros, cases[i].ndata);
        md_st_file *f = (md_st_file *)1;
        md_status st = md_st_open(p, &f);
        fprintf(stderr, "  %-22s -> %s\n", cases[i].what, md_errmsg());
        cr_assert_eq(st, MD_ERR_DATA, "%s: status %d", cases[i].what, st);
        cr_assert_null(f, "%s", cases[i].what);
        cr_assert(strstr(md_errmsg(), p), "%s: message names the file: %s", cases[i].what, md_errmsg());
        cr_assert(strstr(md_errmsg(), cases[i].needle), "%s: message '%s' lacks '%s'", cases[i].what,
                  md_errmsg(), cases[i].needle);
        free(p);
    }
    th_tmpdir_free(dir);
}

Test(safetensors, bad_length_and_truncation)
{
    char *dir = th_tmpdir();
    char path[4200];
    snprintf(path, sizeof path, "%s/t.safetensors", dir);
    md_st_writer *w;
    cr_assert_eq(md_st_writer_new(&w), MD_OK);
    float v[16] = {0};
    long long s = 16;
    cr_assert_eq(md_st_writer_add(w, "weights", MD_F32, 1, &s, v), MD_OK);
    cr_assert_eq(md_st_writer_write(w, path), MD_OK);
    md_st_writer_free(w);
    size_t n;
    unsigned char *b = slurp_bin(path, &n);
    md_st_file *f;

    write_bin(path, b, n - 1); /* truncated data */
    cr_assert_eq(md_st_open(path, &f), MD_ERR_DATA);
    cr_assert(strstr(md_errmsg(), "'weights'") && strstr(md_errmsg(), "truncated"), "%s", md_errmsg());

    write_bin(path, b, 20); /* truncated inside the header */
    cr_assert_eq(md_st_open(path, &f), MD_ERR_DATA);
    cr_assert(strstr(md_errmsg(), "bad header length"), "%s", md_errmsg());

    write_bin(path, b, 5); /* shorter than the length field */
    cr_assert_eq(md_st_open(path, &f), MD_ERR_DATA);
    cr_assert(strstr(md_errmsg(), "too short"), "%s", md_errmsg());

    unsigned char *c = malloc(n);
    memcpy(c, b, n);
    c[7] = 0x40; /* absurd header length */
    write_bin(path, c, n);
    cr_assert_eq(md_st_open(path, &f), MD_ERR_DATA);
    cr_assert(strstr(md_errmsg(), "bad header length") && strstr(md_errmsg(), path), "%s", md_errmsg());
    free(c);

    cr_assert_eq(md_st_open("/nonexistent/x.safetensors", &f), MD_ERR_IO);
    cr_assert(strstr(md_errmsg(), "/nonexistent/x.safetensors"), "%s", md_errmsg());
    free(b);
    th_tmpdir_free(dir);
}

static md_status write_one(const char *path, float value)
{
    md_st_writer *w;
    md_status st = md_st_writer_new(&w);
    if (st != MD_OK) return st;
    static float v[4096];
    for (int i = 0; i < 4096; i++) v[i] = value;
    long long s = 4096;
    st = md_st_writer_add(w, "p", MD_F32, 1, &s, v);
    if (st == MD_OK) st = md_st_writer_meta(w, "value", value > 1 ? "new" : "old");
    if (st == MD_OK) st = md_st_writer_write(w, path);
    md_st_writer_free(w);
    return st;
}

Test(safetensors, missing_directory_is_io_error)
{
    md_status st = write_one("/nonexistent-dir/ck.safetensors", 1);
    cr_assert_eq(st, MD_ERR_IO);
    cr_assert(strstr(md_errmsg(), "/nonexistent-dir/ck.safetensors") && strstr(md_errmsg(), "No such file"), "%s",
              md_errmsg());
}

Test(safetensors, full_disk_keeps_previous_file)
{
    /* A file-size limit makes write() fail with EFBIG exactly as a full disk
     * fails with ENOSPC: mid-file, after the temporary file exists. */
    char *dir = th_tmpdir();
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/ck.safetensors", dir);
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    cr_assert_eq(write_one(path, 1.0f), MD_OK);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {8192, 8192};
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &rl), 0);
    md_status st = write_one(path, 2.0f);
    cr_assert_eq(st, MD_ERR_IO, "status %d", st);
    cr_assert(strstr(md_errmsg(), path) && strstr(md_errmsg(), "write failed"), "%s", md_errmsg());
    cr_assert_eq(access(tmp, F_OK), -1, "temporary file removed");
    md_st_file *f;
    cr_assert_eq(md_st_open(path, &f), MD_OK, "previous file intact: %s", md_errmsg());
    cr_assert_str_eq(md_st_meta(f, "value"), "old");
    float v;
    memcpy(&v, md_st_find(f, "p")->data, 4);
    cr_assert_eq(v, 1.0f);
    md_st_close(f);
    th_tmpdir_free(dir);
}

Test(safetensors, read_only_directory_is_io_error)
{
    char *dir = th_tmpdir();
    char path[4200];
    snprintf(path, sizeof path, "%s/ck.safetensors", dir);
    cr_assert_eq(write_one(path, 1.0f), MD_OK);
    chmod(dir, 0555);
    if (geteuid() == 0) {
        /* root writes through mode bits: /proc is read-only for everyone */
        md_status st = write_one("/proc/mpsdiag-ck.safetensors", 2.0f);
        cr_assert_eq(st, MD_ERR_IO);
        cr_assert(strstr(md_errmsg(), "/proc/mpsdiag-ck.safetensors: cannot write"), "%s", md_errmsg());
    } else {
        md_status st = write_one(path, 2.0f);
        cr_assert_eq(st, MD_ERR_IO);
        cr_assert(strstr(md_errmsg(), path) && strstr(md_errmsg(), "Permission denied"), "%s", md_errmsg());
    }
    md_st_file *f;
    cr_assert_eq(md_st_open(path, &f), MD_OK);
    cr_assert_str_eq(md_st_meta(f, "value"), "old");
    md_st_close(f);
    chmod(dir, 0755);
    th_tmpdir_free(dir);
}
