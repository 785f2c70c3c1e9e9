/* cpu_conv_direct.c - direct convolution (forward and backward-filter) with
 * AVX-512 or AVX2 register tiles: no im2col buffer and no GEMM library call.
 *
 * Both passes work on a zero-padded channels-last copy of the input images,
 * xpad (Hp, Wp, cs), cs >= C floats per pixel (an odd number of cache lines:
 * pixels a power of two apart would share L1 sets). Pixel (p, q) reads tap
 * (r, s) at ((p*sh + r*dh) * Wp + q*sw + s*dw) * cs + c, so the taps of any
 * stride, padding and dilation are plain offsets and the channels of one
 * pixel are contiguous. NCHW tensors are transposed in and out (16x16 in
 * registers); NHWC ones are copied.
 *
 * Forward: output channels go across the lanes of a vector. A tile is
 * MR = 6 output pixels x NV <= 4 vectors (64 channels; AVX-512) of
 * accumulators (24 of the 32 zmm registers); for every tap and input channel it loads NV vectors
 * of packed weights (K-block, C-block, tap, c, 64) and broadcasts one input
 * value per pixel: 24 FMAs per 10 loads. The sum runs in pieces of about 192
 * products started from zero and added to a staging tile, as a blocked GEMM
 * does (one running sum per register rounds twice as badly). C is cut into
 * blocks whose packed weights fit in L2. Tasks are groups of images (several
 * where planes are small, so that a weight block serves ~192 pixels) times
 * groups of K-blocks where images alone give too few tasks for the threads;
 * each output element is computed by one task in a fixed order, so results
 * do not depend on the thread count.
 *
 * Backward-filter: dW (tap, c, k) = sum over pixels of x(pixel + tap, c) *
 * dy(pixel, k). Output channels again go across the lanes (dy as (pixel, K)
 * rows: transposed or copied, or NHWC dy itself), and a tile is 6 input
 * channels x NV vectors of output channels, summed over blocks of 1024 pixels
 * in registers. Images are split into fixed slots (their number depends on
 * the shape only); tasks are (slot, 64-channel block, group of (tap,
 * channel) tiles) writing disjoint parts of per-slot partial sums, added in
 * slot order at the end: the groups follow the thread count (enough tasks
 * for every thread) but no sum's order does. The padded inputs and dy rows
 * are made for a wave of images at a time, within a fixed scratch budget.
 *
 * The kernels are written once (cpu_conv_direct_impl.h) and built twice:
 * AVX-512 (16 lanes, tiles of 6 x 4 vectors) and AVX2 + FMA (8 lanes, 16
 * registers: tiles of 6 x 2 vectors); the best the CPU has runs.
 *
 * Used where it applies (x86-64 with AVX-512F or AVX2 at run time, one
 * group; 1x1 from 128 input channels) unless MPSDIAG_CPU_DIRECT=0 or the
 * build defines MD_NO_DIRECT; everything else goes the im2col/GEMM way in
 * cpu_conv.c, which stays the path of other CPUs. */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_conv_direct.h"
#include "backend/cpu/cpu_conv_wino.h"
#include "backend/cpu/cpu_kernels.h"
#include "core/mem.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(MD_NO_DIRECT)
#define MD_HAVE_DIRECT 1
#include <immintrin.h>
#define INLINE static inline __attribute__((always_inline))
#else
#define MD_HAVE_DIRECT 0
#endif

/* Output pixels (forward) or input channels (filter) per register tile. */
#define MR 6
/* Products per piece of the forward's sums (see fwd_tile). */
#define FWD_PIECE 192

/* Which kernels run: 0 none, 512 AVX-512F, 256 AVX2 + FMA; -1 undecided. */
static int g_isa = -1;

static int cpu_has(int isa)
{
#if MD_HAVE_DIRECT
    __builtin_cpu_init();
    if (isa == 512) return __builtin_cpu_supports("avx512f");
    if (isa == 256) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    (void)isa;
#endif
    return 0;
}

/* The best the CPU has, unless MPSDIAG_CPU_DIRECT says otherwise ("0": none,
 * "avx2": the AVX2 kernels even on an AVX-512 CPU). */
static int decide_isa(void)
{
    const char *e = getenv("MPSDIAG_CPU_DIRECT");
    if (e && e[0] == '0') return 0;
    if (e && strcmp(e, "avx2") == 0) return cpu_has(256) ? 256 : 0;
    return cpu_has(512) ? 512 : cpu_has(256) ? 256 : 0;
}

void md_cpu_direct_set(int on)
{
    g_isa = on < 0 ? -1 : on == 0 ? 0 : on == 2 ? (cpu_has(256) ? 256 : 0) : decide_isa();
}

static int direct_isa(void)
{
    if (g_isa < 0) g_isa = decide_isa();
    return g_isa;
}

int md_cpu_direct_enabled(void) { return direct_isa() != 0; }

const char *md_cpu_conv_kernels(void)
{
    int isa = direct_isa();
    if (isa == 512) return "direct AVX-512 kernels (one group), im2col + OpenBLAS GEMM otherwise";
    if (isa == 256) return "direct AVX2 kernels (one group), im2col + OpenBLAS GEMM otherwise";
#if MD_HAVE_DIRECT
    if (!cpu_has(256)) return "im2col + OpenBLAS GEMM (no AVX2 or AVX-512 for the direct kernels)";
    return "im2col + OpenBLAS GEMM (direct kernels off: MPSDIAG_CPU_DIRECT=0)";
#else
    return "im2col + OpenBLAS GEMM (direct kernels are x86-64 only)";
#endif
}

/* Channels-last is the faster layout where the direct kernels run (they read
 * it as it is) and also where only Winograd does (channels-last only): with
 * the direct kernels off, resnet18_cifar b64 took 864-901 ms a step in NHWC
 * against 1,797-1,822 in NCHW on 2 Zen 4 cores; with both off, NCHW is faster
 * (docs/training.md). */
int md_cpu_conv_prefers_nhwc(void) { return md_cpu_direct_enabled() || md_cpu_wino_enabled(); }

#if MD_HAVE_DIRECT

struct pad_geom {
    int hp, wp, cs; /* cs: floats per pixel (C, padded: see row_stride) */
    size_t img;     /* floats per padded image: hp*wp*cs */
};

/* A row stride of n floats rounded up to whole cache lines and to an odd
 * number of them: pixels or rows a power of two apart would all fall in
 * the same few L1 sets (4 KiB aliasing) and evict one another. */
static int row_stride(int n)
{
    int l = (n + 15) / 16;
    if (l > 1 && l % 2 == 0) l++;
    return l * 16;
}

static struct pad_geom pad_geom(const struct md_dconv *g)
{
    struct pad_geom pg;
    pg.hp = (g->p - 1) * g->sh + (g->r - 1) * g->dh + 1;
    pg.wp = (g->q - 1) * g->sw + (g->s - 1) * g->dw + 1;
    pg.cs = row_stride(g->c);
    pg.img = (size_t)pg.hp * pg.wp * pg.cs;
    return pg;
}

/* In-register 16x16 transpose: r[i] lane j <-> r[j] lane i. Four rounds
 * swap the off-diagonal blocks of size 8, 4, 2, 1 between row pairs. */
INLINE __attribute__((target("avx512f,fma"))) void trv_512(__m512 r[16])
{
    static const int bs[4] = {8, 4, 2, 1};
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        int b = bs[k];
        int lo[16], hi[16];
        for (int j = 0; j < 16; j++) {
            lo[j] = (j & b) ? 16 + j - b : j;
            hi[j] = (j & b) ? 16 + j : j + b;
        }
        __m512i il = _mm512_loadu_si512(lo), ih = _mm512_loadu_si512(hi);
#pragma GCC unroll 16
        for (int i = 0; i < 16; i++) {
            if (i & b) continue;
            __m512 a = r[i], c = r[i + b];
            r[i] = _mm512_permutex2var_ps(a, il, c);
            r[i + b] = _mm512_permutex2var_ps(a, ih, c);
        }
    }
}

/* In-register 8x8 transpose (AVX2): the same three block swaps, with 128-bit
 * lane moves (4), in-lane 64-bit shuffles (2) and duplicating blends (1). */
INLINE __attribute__((target("avx2,fma"))) void trv_256(__m256 r[8])
{
    for (int i = 0; i < 4; i++) {
        __m256 a = r[i], c = r[i + 4];
        r[i] = _mm256_permute2f128_ps(a, c, 0x20);
        r[i + 4] = _mm256_permute2f128_ps(a, c, 0x31);
    }
    for (int i = 0; i < 8; i++) {
        if (i & 2) continue;
        __m256 a = r[i], c = r[i + 2];
        r[i] = _mm256_shuffle_ps(a, c, 0x44);
        r[i + 2] = _mm256_shuffle_ps(a, c, 0xEE);
    }
    for (int i = 0; i < 8; i += 2) {
        __m256 a = r[i], c = r[i + 1];
        r[i] = _mm256_blend_ps(a, _mm256_moveldup_ps(c), 0xAA);
        r[i + 1] = _mm256_blend_ps(_mm256_movehdup_ps(a), c, 0xAA);
    }
}

struct fwd_ctx {
    const struct md_dconv *g;
    const struct md_dphase *phase; /* NULL: y is (n, p, q, k) or NCHW itself */
    struct pad_geom pg;
    int nhwc, kp, nkb, ncb, cbs, rs, grp, chunk, tasks, kgroups; /* tasks: image groups */
    const float *x, *wpk;
    float *y, *buf, *xall; /* xall: every image padded, or NULL (each task pads its own) */
    float beta;
    const int *toff;
    size_t per_thread, stage_off;
};

/* Packed weights of one (K-block, C-block): (tap, c, nv*16), zero past K.
 * flip: w holds the weights of the convolution whose backward-data this
 * forward computes ((C, K, R, S) or (C, R, S, K) here), read transposed and
 * rotated by 180 degrees; with a phase (NHWC), transposed and at the taps
 * the phase names. */
struct pack_ctx { const struct fwd_ctx *c; const float *w; float *wpk; int flip; };

struct filt_ctx {
    const struct md_dconv *g;
    struct pad_geom pg;
    int nhwc, kp, kps, nkb, slots, rs; /* kps: dyt's row stride */
    int ugroups;          /* groups of (tap, channel) tiles per (slot, K-block) */
    int waves, wave, cap; /* the batch in waves of at most cap images per slot (bounded scratch) */
    int dy_in_place;      /* dyt is dy itself (NHWC, K a multiple of 16 that does not alias; kps = K) */
    const float *x, *dy;
    float *xpad, *dyt, *part; /* the wave's images padded; their dy as (P*Q, kps); per slot (tap, C, kp) */
    float *dw;
    float beta;
    const int *toff;
};

/* Pixels per block of rows: the block's dy (pixels x 64 channels, 256 KiB)
 * stays in L2 across the taps and channel tiles, and the dW partial is
 * loaded and stored once per block (AVX-512, measured: 128 was ~5% slower).
 * The AVX2 tile (6 x 16 channels) does half the FMAs per pixel for the same
 * two cache lines, so it waits on L2 instead: blocks of 128 pixels keep them
 * in L1 (measured on the 2-core EPYC: small_cnn's conv2 filter 14-22 -> 11-13
 * ms, resnet18_cifar's first stage 58-74 -> 48-56 ms at 2 threads). */
#define FILT_PIXELS 1024
#define FILT_PIXELS_AVX2 128
#define FILT_ROWS 1024
/* Backward-filter tasks per thread, for balance (see direct_filter). */
#define FILT_TASKS_PER_THREAD 4
/* Backward-filter: (slot, K-block) pairs of partial sums, and their bytes at most. */
#define FILT_PAIRS 32
#define FILT_PART_BYTES ((size_t)32 << 20)
/* dW elements per task of the final sum over slots. */
#define FILT_SUM_RUN 576
/* Scratch for the padded inputs and dy rows of one wave of images. */
#define FILT_PREP_BYTES ((size_t)64 << 20)
static size_t g_prep_bytes = FILT_PREP_BYTES;

void md_cpu_direct_set_prep_bytes(size_t bytes) { g_prep_bytes = bytes ? bytes : FILT_PREP_BYTES; }

/* Forward tasks per thread (image groups x K-block groups), for balance. */
#define FWD_TASKS_PER_THREAD 4
/* ... each of at least this many products x 2 */
#define FWD_TASK_FLOPS (4.0 * 1024 * 1024)
/* Largest batch of padded images made once for every forward task. */
#define FWD_SHARED_BYTES ((size_t)64 << 20)

/* Pixels per staging chunk when C is one block: 16 tiles of 6 (24 KiB of
 * staging with AVX-512). */
#define FWD_CHUNK 96

/* ---- the kernels, once per instruction set ---------------------------------- */

#define ISA 512
#define VL 16
#define NVMAX 4
#define FILT_PX FILT_PIXELS
#define TARGET __attribute__((target("avx512f,fma")))
#define VEC __m512
#define VLOAD _mm512_loadu_ps
#define VSTORE _mm512_storeu_ps
#define VSET1 _mm512_set1_ps
#define VFMA _mm512_fmadd_ps
#define VADD _mm512_add_ps
#define VZERO _mm512_setzero_ps
#define TRV trv_512
#include "backend/cpu/cpu_conv_direct_impl.h"

/* AVX2: 16 ymm registers, so a tile is 6 x 2 vectors (16 channels): 12
 * accumulators, 2 weight vectors and a broadcast. */
#define ISA 256
#define VL 8
#define NVMAX 2
#define FILT_PX FILT_PIXELS_AVX2
#define TARGET __attribute__((target("avx2,fma")))
#define VEC __m256
#define VLOAD _mm256_loadu_ps
#define VSTORE _mm256_storeu_ps
#define VSET1 _mm256_set1_ps
#define VFMA _mm256_fmadd_ps
#define VADD _mm256_add_ps
#define VZERO _mm256_setzero_ps
#define TRV trv_256
#include "backend/cpu/cpu_conv_direct_impl.h"

int md_cpu_direct_fwd_ok(const struct md_dconv *g)
{
    int isa = direct_isa();
    return isa == 512 ? direct_fwd_ok_512(g) : isa == 256 ? direct_fwd_ok_256(g) : 0;
}

int md_cpu_direct_fwd_fits(const struct md_dconv *g)
{
    int isa = direct_isa();
    return isa == 512 ? direct_fwd_fits_512(g) : isa == 256 ? direct_fwd_fits_256(g) : 0;
}

int md_cpu_direct_filter_ok(const struct md_dconv *g)
{
    int isa = direct_isa();
    return isa == 512 ? direct_filter_ok_512(g) : isa == 256 ? direct_filter_ok_256(g) : 0;
}

md_status md_cpu_direct_fwd(const struct md_dconv *g, int nhwc, int flip, const float *x, const float *w, float *y,
                            float beta)
{
    return direct_isa() == 512 ? direct_fwd_512(g, NULL, nhwc, flip, x, w, y, beta)
                               : direct_fwd_256(g, NULL, nhwc, flip, x, w, y, beta);
}

md_status md_cpu_direct_fwd_phase(const struct md_dconv *g, const struct md_dphase *ph, const float *x, const float *w,
                                  float *y, float beta)
{
    return direct_isa() == 512 ? direct_fwd_512(g, ph, 1, 1, x, w, y, beta) : direct_fwd_256(g, ph, 1, 1, x, w, y, beta);
}

md_status md_cpu_direct_filter(const struct md_dconv *g, int nhwc, const float *x, const float *dy, float *dw,
                               float beta)
{
    return direct_isa() == 512 ? direct_filter_512(g, nhwc, x, dy, dw, beta) : direct_filter_256(g, nhwc, x, dy, dw, beta);
}

#else /* no x86-64 build: never enabled */

void md_cpu_direct_set_prep_bytes(size_t bytes) { (void)bytes; }
int md_cpu_direct_fwd_ok(const struct md_dconv *g) { (void)g; return 0; }
int md_cpu_direct_fwd_fits(const struct md_dconv *g) { (void)g; return 0; }
int md_cpu_direct_filter_ok(const struct md_dconv *g) { (void)g; return 0; }
md_status md_cpu_direct_fwd(const struct md_dconv *g, int nhwc, int flip, const float *x, const float *w, float *y,
                            float beta)
{
    (void)g, (void)nhwc, (void)flip, (void)x, (void)w, (void)y, (void)beta;
    return md_errf(MD_ERR_INTERNAL, "cpu direct convolution: not built for this CPU");
}
md_status md_cpu_direct_fwd_phase(const struct md_dconv *g, const struct md_dphase *ph, const float *x, const float *w,
                                  float *y, float beta)
{
    (void)g, (void)ph, (void)x, (void)w, (void)y, (void)beta;
    return md_errf(MD_ERR_INTERNAL, "cpu direct convolution: not built for this CPU");
}
md_status md_cpu_direct_filter(const struct md_dconv *g, int nhwc, const float *x, const float *dy, float *dw,
                               float beta)
{
    (void)g, (void)nhwc, (void)x, (void)dy, (void)dw, (void)beta;
    return md_errf(MD_ERR_INTERNAL, "cpu direct convolution: not built for this CPU");
}

#endif
