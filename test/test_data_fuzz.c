/* test_data_fuzz.c - the smoke mode of the fuzz targets (test/fuzz): a few
 * thousand deterministic mutations of valid IDX, CIFAR and JPEG inputs through
 * each parser. A crash, a sanitizer report (make asan) or a hang fails it. The
 * long runs are `make fuzz` (libFuzzer). */
#include <criterion/criterion.h>

#include "fuzz/fuzz_one.h"

#define SMOKE_ITERS 4000

/* Mutations anywhere, then (from > 0) only past the header. */
static void smoke(int (*target)(const uint8_t *, size_t), const uint8_t *seed, size_t n, size_t from, uint64_t rs)
{
    static uint8_t buf[1 << 16];
    cr_assert(n > 0 && n + 1024 < sizeof buf);
    target(seed, n); /* the seed itself */
    for (int i = 0; i < SMOKE_ITERS; i++) {
        size_t m = md_fuzz_mutate(seed, n, i % 2 ? from : 0, buf, n + 1024, &rs);
        target(buf, m);
    }
    target(seed, 0);
}

Test(fuzz_smoke, idx)
{
    static uint8_t s[256];
    smoke(md_fuzz_idx, s, md_fuzz_seed_idx(s, 1), 0, 0x1234);
    smoke(md_fuzz_idx, s, md_fuzz_seed_idx(s, 0), 0, 0x5678);
}

Test(fuzz_smoke, cifar)
{
    static uint8_t s[8192];
    smoke(md_fuzz_cifar, s, md_fuzz_seed_cifar(s, 0), 0, 0x9abc);
    smoke(md_fuzz_cifar, s, md_fuzz_seed_cifar(s, 1), 0, 0xdef0);
}

Test(fuzz_smoke, jpeg)
{
    static uint8_t s[1 << 14];
    for (int prog = 0; prog < 2; prog++) {
        size_t n = md_fuzz_seed_jpeg(s, sizeof s, prog);
        size_t scan = md_fuzz_jpeg_scan(s, n);
        cr_assert(scan > 0 && scan < n);
        smoke(md_fuzz_jpeg, s, n, scan, 0x1357u + (uint64_t)prog);
    }
}
