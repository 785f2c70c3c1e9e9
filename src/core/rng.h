/* rng.h - seeded, counter-based random numbers.
 *
 * md_rng_hash(seed, counter) is a pure function (SplitMix64 finaliser over a
 * mixed key), so a dropout mask or an initialisation is identical on every
 * backend and independent of thread scheduling: element i of a stream uses
 * counter = offset + i. Header-only; valid C11 and CUDA/Metal-portable C.
 */
#ifndef MD_RNG_H
#define MD_RNG_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* The CUDA plug-in calls the two pure functions from device code. */
#if defined(__CUDACC__)
#define MD_RNG_HD __host__ __device__
#else
#define MD_RNG_HD
#endif

static inline MD_RNG_HD uint64_t md_rng_hash(uint64_t seed, uint64_t counter)
{
    uint64_t z = seed * 0x9e3779b97f4a7c15ull + counter + 0x632be59bd9b4e019ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1) with 24 bits of precision (exact in fp32). */
static inline MD_RNG_HD float md_rng_uniform(uint64_t seed, uint64_t counter)
{
    return (float)(md_rng_hash(seed, counter) >> 40) * (1.0f / 16777216.0f);
}

/* Sequential generator for host-side work (shuffles, augmentation). */
typedef struct md_rng { uint64_t seed, counter; } md_rng;

static inline void md_rng_init(md_rng *r, uint64_t seed) { r->seed = seed; r->counter = 0; }
static inline uint64_t md_rng_next(md_rng *r) { return md_rng_hash(r->seed, r->counter++); }
static inline float md_rng_next_uniform(md_rng *r) { return md_rng_uniform(r->seed, r->counter++); }
/* Uniform integer in [0, n), n > 0 (Lemire's multiply-shift, negligible bias). */
static inline uint32_t md_rng_below(md_rng *r, uint32_t n)
{
    return (uint32_t)(((md_rng_next(r) >> 32) * (uint64_t)n) >> 32);
}
/* Standard normal by Box-Muller (consumes two draws). */
double md_rng_normal(md_rng *r);

#ifdef __cplusplus
}
#endif
#endif
