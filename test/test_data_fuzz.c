/* test_data_fuzz.c - the smoke mode of the fuzz targets (test/fuzz): a few
 * thousand deterministic mutations of valid IDX, CIFAR and JPEG inputs through
 * each parser. A crash, a sanitizer report (make asan) or a hang fails it. The
 * long runs are `make fuzz` (libFuzzer). */
#include <criterion/criterion.h>

#include "fuzz/fuzz_one.h"
#include "helpers_fuzz.h"

#define SMOKE_ITERS 4000

Test(fuzz_smoke, idx)
{
    static uint8_t s[256];
    th_fuzz_smoke(md_fuzz_idx, s, md_fuzz_seed_idx(s, 1), 0, 0x1234, SMOKE_ITERS);
    th_fuzz_smoke(md_fuzz_idx, s, md_fuzz_seed_idx(s, 0), 0, 0x5678, SMOKE_ITERS);
}

Test(fuzz_smoke, cifar)
{
    static uint8_t s[8192];
    th_fuzz_smoke(md_fuzz_cifar, s, md_fuzz_seed_cifar(s, 0), 0, 0x9abc, SMOKE_ITERS);
    th_fuzz_smoke(md_fuzz_cifar, s, md_fuzz_seed_cifar(s, 1), 0, 0xdef0, SMOKE_ITERS);
}

Test(fuzz_smoke, jpeg)
{
    static uint8_t s[1 << 14];
    for (int prog = 0; prog < 2; prog++) {
        size_t n = md_fuzz_seed_jpeg(s, sizeof s, prog);
        size_t scan = md_fuzz_jpeg_scan(s, n);
        cr_assert(scan > 0 && scan < n);
        th_fuzz_smoke(md_fuzz_jpeg, s, n, scan, 0x1357u + (uint64_t)prog, SMOKE_ITERS);
    }
}
