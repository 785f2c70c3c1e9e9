/* helpers_fuzz.c - see helpers_fuzz.h. */
#include "helpers_fuzz.h"

#include <criterion/criterion.h>

#include "fuzz/fuzz_one.h"

void th_fuzz_smoke(int (*target)(const uint8_t *, size_t), const uint8_t *seed, size_t n, size_t from, uint64_t rs,
                   int iters)
{
    static uint8_t buf[1 << 16];
    cr_assert(n > 0 && n + 1024 < sizeof buf);
    target(seed, n);
    for (int i = 0; i < iters; i++) {
        size_t m = md_fuzz_mutate(seed, n, i % 2 ? from : 0, buf, n + 1024, &rs);
        target(buf, m);
    }
    target(seed, 0);
}
