/* test_core.c - tracking allocator, stats, half conversions, rng, JSON. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/json.h"
#include "core/mem.h"
#include "core/outfile.h"
#include "core/rng.h"
#include "core/tensor.h"
#include "core/timer.h"
#include "helpers.h"

Test(mem, tracker_current_and_peak)
{
    md_memtrack t = {0};
    cr_assert_eq(md_memtrack_reserve(&t, 100, "a"), MD_OK);
    cr_assert_eq(md_memtrack_reserve(&t, 50, "b"), MD_OK);
    md_memtrack_release(&t, 100);
    cr_assert_eq(md_memtrack_reserve(&t, 20, "c"), MD_OK);
    cr_assert_eq(t.current, 70);
    cr_assert_eq(t.peak, 150);
    md_memtrack_reset_peak(&t);
    cr_assert_eq(t.peak, 70);
    cr_assert_eq(t.allocs, 3);
    cr_assert_eq(t.frees, 1);
}

Test(mem, tracker_limit_is_oom_with_figures)
{
    md_memtrack t = {0};
    t.limit = 1000;
    cr_assert_eq(md_memtrack_reserve(&t, 800, "params"), MD_OK);
    cr_assert_eq(md_memtrack_reserve(&t, 300, "activations"), MD_ERR_OOM);
    cr_assert(strstr(md_errmsg(), "activations") && strstr(md_errmsg(), "requested 300 B") &&
                  strstr(md_errmsg(), "in use 800 B") && strstr(md_errmsg(), "limit 1000 B"),
              "message: %s", md_errmsg());
    cr_assert_eq(t.current, 800, "a refused reservation must not count");
}

Test(mem, host_wrappers_count)
{
    long long before = md_host_mem()->current;
    void *p = md_malloc(1000);
    void *q = md_calloc(10, 10);
    cr_assert(p && q);
    cr_assert_eq(((uintptr_t)p) % 64, 0, "64-byte aligned");
    cr_assert_eq(md_host_mem()->current - before, 1100);
    p = md_realloc(p, 2000);
    cr_assert_eq(md_host_mem()->current - before, 2100);
    md_free(p);
    md_free(q);
    md_free(NULL);
    cr_assert_eq(md_host_mem()->current, before);
}

Test(mem, fmt_bytes)
{
    char b[32];
    cr_assert_str_eq(md_fmt_bytes(512, b, sizeof b), "512 B");
    cr_assert_str_eq(md_fmt_bytes(1536, b, sizeof b), "1.50 KiB");
    cr_assert_str_eq(md_fmt_bytes(3.0 * 1024 * 1024 * 1024, b, sizeof b), "3.00 GiB");
}

Test(stats, percentiles_like_numpy)
{
    double v[] = {5, 1, 4, 2, 3};
    md_stats s = md_stats_of(v, 5);
    cr_assert_float_eq(s.mean, 3.0, 1e-12);
    cr_assert_float_eq(s.p50, 3.0, 1e-12);
    cr_assert_float_eq(s.p95, 4.8, 1e-12); /* numpy.percentile([1..5], 95) */
    cr_assert_float_eq(s.min, 1.0, 1e-12);
    cr_assert_float_eq(s.max, 5.0, 1e-12);
    cr_assert_float_eq(s.stddev, sqrt(2.5), 1e-12);
    cr_assert_float_eq(v[0], 5.0, 0, "input untouched");
}

Test(half, f16_round_trip_and_rounding)
{
    float vals[] = {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 6.103515625e-05f, 5.960464477539063e-08f, 0.333333f};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; i++) {
        float r = md_f16_to_f32(md_f32_to_f16(vals[i]));
        cr_assert(fabsf(r - vals[i]) <= fabsf(vals[i]) * 1e-3f, "%g -> %g", (double)vals[i], (double)r);
    }
    cr_assert_eq(md_f32_to_f16(1.0f), 0x3c00);
    cr_assert_eq(md_f32_to_f16(65520.0f), 0x7c00, "overflow rounds to inf");
    cr_assert_eq(md_f32_to_f16(1.0f + 1.0f / 2048.0f), 0x3c00, "tie to even");
    cr_assert(isnan(md_f16_to_f32(md_f32_to_f16(NAN))));
}

Test(half, bf16_rounding)
{
    cr_assert_eq(md_f32_to_bf16(1.0f), 0x3f80);
    cr_assert_float_eq(md_bf16_to_f32(md_f32_to_bf16(3.140625f)), 3.140625f, 0);
    cr_assert(isnan(md_bf16_to_f32(md_f32_to_bf16(NAN))));
}

Test(rng, counter_based_and_uniform)
{
    cr_assert_eq(md_rng_hash(1, 5), md_rng_hash(1, 5));
    cr_assert_neq(md_rng_hash(1, 5), md_rng_hash(2, 5));
    double sum = 0;
    for (int i = 0; i < 100000; i++) {
        float u = md_rng_uniform(7, (uint64_t)i);
        cr_assert(u >= 0.0f && u < 1.0f);
        sum += (double)u;
    }
    cr_assert(fabs(sum / 100000 - 0.5) < 0.01);
}

Test(json, malformed_names_line_and_column)
{
    cJSON *j = NULL;
    cr_assert_eq(md_json_parse("{\n  \"a\": 1,\n  \"b\": ]\n}", "cfg.json", &j), MD_ERR_CONFIG);
    cr_assert(strstr(md_errmsg(), "cfg.json") && strstr(md_errmsg(), "line 3"), "%s", md_errmsg());
}

Test(json, typed_getters_carry_path)
{
    cJSON *j = NULL;
    cr_assert_eq(md_json_parse("{\"k\": 2.5, \"s\": 3}", "x", &j), MD_OK);
    int v = 0;
    cr_assert_eq(md_json_int(j, "k", "model.layers[3]", 1, 0, 10, &v), MD_ERR_CONFIG);
    cr_assert(strstr(md_errmsg(), "model.layers[3].k"), "%s", md_errmsg());
    const char *s = NULL;
    cr_assert_eq(md_json_str(j, "s", "m", 1, &s), MD_ERR_CONFIG);
    static const char *const allowed[] = {"k", NULL};
    cr_assert_eq(md_json_only_keys(j, "m", allowed), MD_ERR_CONFIG);
    cr_assert(strstr(md_errmsg(), "'s'"));
    cJSON_Delete(j);
}

Test(json, atomic_write_keeps_old_file_on_failure)
{
    char *dir = th_tmpdir();
    char *path = th_write(dir, "r.json", "old");
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "x", 1);
    cr_assert_eq(md_json_write_file(o, path), MD_OK);
    char bad[4200];
    snprintf(bad, sizeof bad, "%s/missing-dir/r.json", dir);
    cr_assert_eq(md_json_write_file(o, bad), MD_ERR_IO);
    cr_assert(strstr(md_errmsg(), "missing-dir/r.json"), "%s", md_errmsg());
    cJSON *back = NULL;
    cr_assert_eq(md_json_load_file(path, &back), MD_OK);
    cr_assert_eq(cJSON_GetObjectItem(back, "x")->valueint, 1);
    cJSON_Delete(back);
    cJSON_Delete(o);
    th_rmtree(dir);
    free(path);
    free(dir);
}

/* The best checkpoint as a second name of the last one: the same bytes
 * without writing them again, and the next atomic write of "last" leaves
 * "best" as it was (a new file is renamed over the name, not rewritten). */
Test(outfile, link_is_a_copy_that_a_later_write_of_the_source_leaves_alone)
{
    char *dir = th_tmpdir();
    char a[4300], b[4300];
    snprintf(a, sizeof a, "%s/last.safetensors", dir);
    snprintf(b, sizeof b, "%s/best.safetensors", dir);
    cr_assert_eq(md_outfile_write_all(a, "epoch 1", 7), MD_OK);
    cr_assert_eq(md_outfile_write_all(b, "epoch 0", 7), MD_OK);
    cr_assert_eq(md_outfile_link(a, b), MD_OK, "%s", md_errmsg());
    struct stat sa, sb;
    cr_assert_eq(stat(a, &sa), 0);
    cr_assert_eq(stat(b, &sb), 0);
    cr_assert_eq(sa.st_ino, sb.st_ino, "best is not the file just written");
    cr_assert_eq(md_outfile_write_all(a, "epoch 2", 7), MD_OK);
    size_t n = 0;
    char *got = th_slurp(b, &n);
    cr_assert(got && n == 7 && memcmp(got, "epoch 1", 7) == 0, "best changed with last: %.*s", (int)n, got ? got : "");
    free(got);
    got = th_slurp(a, &n);
    cr_assert(got && n == 7 && memcmp(got, "epoch 2", 7) == 0);
    free(got);
    /* no temporary names left behind; a missing source is refused, not a crash */
    char t[4400];
    snprintf(t, sizeof t, "%s.tmp", b);
    cr_assert_neq(access(t, F_OK), 0, "%s left behind", t);
    snprintf(t, sizeof t, "%s/none.safetensors", dir);
    cr_assert_eq(md_outfile_link(t, b), MD_ERR_UNSUPPORTED);
    th_rmtree(dir);
    free(dir);
}
