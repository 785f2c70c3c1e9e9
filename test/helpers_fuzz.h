/* helpers_fuzz.h - the smoke mode shared by the fuzz-target tests
 * (test_data_fuzz.c, test_fuzz_formats.c). */
#ifndef MD_TEST_HELPERS_FUZZ_H
#define MD_TEST_HELPERS_FUZZ_H

#include <stddef.h>
#include <stdint.h>

/* Runs `target` on the seed (n > 0 bytes), on `iters` deterministic mutations
 * of it (random generator state rs; every other one mutates only from byte
 * `from` on, past a header) and on an empty input. A crash, a sanitizer
 * report or a hang fails the test. */
void th_fuzz_smoke(int (*target)(const uint8_t *, size_t), const uint8_t *seed, size_t n, size_t from, uint64_t rs,
                   int iters);

#endif
