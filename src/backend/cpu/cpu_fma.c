/* cpu_fma.c - the CPU's attainable fp32 arithmetic rate, measured.
 *
 * Independent fused multiply-add chains in the widest vectors the CPU has
 * (AVX-512F, AVX2 + FMA, NEON; SSE multiply + add otherwise) on every thread
 * of the pool, as many chains as keep every FMA unit busy. No kernel does
 * more fp32 arithmetic per second on these threads, so this bounds the
 * benchmark's "achieved" rates where a GEMM measurement need not (an OpenBLAS
 * that fell back to generic kernels runs far below what the direct
 * convolutions reach). Measured rather than computed from the clock: the
 * clock /proc/cpuinfo reports is often the base clock (virtual machines, turbo),
 * and the number of FMA units per core is not reported at all.
 */
#include <stdatomic.h>
#include <string.h>

#include "backend/cpu/cpu_kernels.h"
#include "core/threadpool.h"
#include "core/timer.h"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define MD_FMA_X86 1
#include <immintrin.h>
#elif defined(__aarch64__)
#define MD_FMA_NEON 1
#include <arm_neon.h>
#endif

/* Iterations of one chunk: 12-16 chains x this many FMAs, well under 1 ms. */
#define FMA_ITERS 100000

static _Atomic double fma_sink; /* keeps the results alive */

/* Twelve independent chains of vector type `vec`, each `iters` steps of
 * acc = STEP(acc) (acc * m + c: converges for m < 1, so nothing overflows or
 * goes denormal), then their sum in `s`. Distinct starts, or the compiler
 * merges equal chains. */
#define CHAINS12(vec, set1, add, STEP)                                                                  \
    vec a0 = set1(0.f), a1 = set1(1.f), a2 = set1(2.f), a3 = set1(3.f), a4 = set1(4.f), a5 = set1(5.f);   \
    vec a6 = set1(6.f), a7 = set1(7.f), a8 = set1(8.f), a9 = set1(9.f), a10 = set1(10.f), a11 = set1(11.f); \
    for (long long i = 0; i < iters; i++) {                                                             \
        a0 = STEP(a0); a1 = STEP(a1); a2 = STEP(a2); a3 = STEP(a3); a4 = STEP(a4); a5 = STEP(a5);         \
        a6 = STEP(a6); a7 = STEP(a7); a8 = STEP(a8); a9 = STEP(a9); a10 = STEP(a10); a11 = STEP(a11);     \
    }                                                                                                   \
    vec s = add(add(add(add(a0, a1), add(a2, a3)), add(add(a4, a5), add(a6, a7))),                    \
                add(add(a8, a9), add(a10, a11)))

#if MD_FMA_X86
__attribute__((target("avx512f"))) static double chains_avx512(long long iters)
{
    const __m512 m = _mm512_set1_ps(0.9999f), c = _mm512_set1_ps(1e-4f);
#define F512(x) _mm512_fmadd_ps(x, m, c)
    CHAINS12(__m512, _mm512_set1_ps, _mm512_add_ps, F512);
#undef F512
    return (double)_mm512_reduce_add_ps(s);
}

__attribute__((target("avx2,fma"))) static double chains_avx2(long long iters)
{
    const __m256 m = _mm256_set1_ps(0.9999f), c = _mm256_set1_ps(1e-4f);
#define F256(x) _mm256_fmadd_ps(x, m, c)
    CHAINS12(__m256, _mm256_set1_ps, _mm256_add_ps, F256);
#undef F256
    float v[8];
    _mm256_storeu_ps(v, s);
    return (double)(v[0] + v[1] + v[2] + v[3] + v[4] + v[5] + v[6] + v[7]);
}
#endif

#if MD_FMA_NEON
/* Apple's cores have 4 FMA pipes of latency 4: 16 chains. */
static double chains_neon(long long iters)
{
    const float32x4_t m = vdupq_n_f32(0.9999f), c = vdupq_n_f32(1e-4f);
    float32x4_t a[16];
    for (int k = 0; k < 16; k++) a[k] = vdupq_n_f32((float)k);
    for (long long i = 0; i < iters; i++) {
#pragma GCC unroll 16
        for (int k = 0; k < 16; k++) a[k] = vfmaq_f32(c, a[k], m);
    }
    float32x4_t s = a[0];
    for (int k = 1; k < 16; k++) s = vaddq_f32(s, a[k]);
    return (double)vaddvq_f32(s);
}
#endif

/* Portable fallback: separate multiply and add (2 FLOPs per lane as well). */
typedef float md_v4f __attribute__((vector_size(16)));
static inline md_v4f v4_set1(float x) { return (md_v4f){x, x, x, x}; }
static double chains_generic(long long iters)
{
    const md_v4f m = v4_set1(0.9999f), c = v4_set1(1e-4f);
#define FGEN(x) ((x) * m + c)
#define V4ADD(x, y) ((x) + (y))
    CHAINS12(md_v4f, v4_set1, V4ADD, FGEN);
#undef V4ADD
#undef FGEN
    return (double)(s[0] + s[1] + s[2] + s[3]);
}

struct fma_job {
    double (*fn)(long long iters);
};

static void fma_chunks(void *ctx, long long begin, long long end)
{
    const struct fma_job *j = ctx;
    double s = 0;
    for (long long i = begin; i < end; i++) s += j->fn(FMA_ITERS);
    atomic_store_explicit(&fma_sink, s, memory_order_relaxed);
}

double md_cpu_fma_peak_gflops(const char **isa)
{
    struct fma_job job = {chains_generic};
    double flops_per_iter = 12.0 * 4 * 2; /* chains x lanes x (multiply + add) */
    const char *name = "SSE/generic multiply + add";
#if MD_FMA_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f")) {
        job.fn = chains_avx512;
        flops_per_iter = 12.0 * 16 * 2;
        name = "AVX-512 FMA";
    } else if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
        job.fn = chains_avx2;
        flops_per_iter = 12.0 * 8 * 2;
        name = "AVX2 FMA";
    }
#elif MD_FMA_NEON
    job.fn = chains_neon;
    flops_per_iter = 16.0 * 4 * 2;
    name = "NEON FMA";
#endif
    if (isa) *isa = name;
    /* many chunks per thread: the pool hands them out as threads finish, so
     * every thread stays busy until at most one chunk before the end (an
     * underestimate of at most 1/16); best of three */
    int threads = md_threadpool_size();
    long long chunks = (long long)(threads > 0 ? threads : 1) * 16;
    double best = 0;
    for (int rep = 0; rep < 3; rep++) {
        double t0 = md_now();
        md_parallel_for(chunks, 1, fma_chunks, &job);
        double dt = md_now() - t0;
        double rate = dt > 0 ? (double)chunks * FMA_ITERS * flops_per_iter / dt / 1e9 : 0;
        if (rate > best) best = rate;
    }
    return best;
}
