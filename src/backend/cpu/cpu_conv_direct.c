/* cpu_conv_direct.c - direct convolution (forward and backward-filter) with
 * AVX-512 register tiles: no im2col buffer and no GEMM library call.
 *
 * Both passes work on a zero-padded channels-last copy of the input images,
 * xpad (Hp, Wp, cs), cs >= C floats per pixel (an odd number of cache lines:
 * pixels a power of two apart would share L1 sets). Pixel (p, q) reads tap
 * (r, s) at ((p*sh + r*dh) * Wp + q*sw + s*dw) * cs + c, so the taps of any
 * stride, padding and dilation are plain offsets and the channels of one
 * pixel are contiguous. NCHW tensors are transposed in and out (16x16 in
 * registers); NHWC ones are copied.
 *
 * Forward: output channels go across the 16 lanes of a vector. A tile is
 * MR = 6 output pixels x NV <= 4 vectors (64 channels) of accumulators (24 of
 * the 32 zmm registers); for every tap and input channel it loads NV vectors
 * of packed weights (K-block, C-block, tap, c, 64) and broadcasts one input
 * value per pixel: 24 FMAs per 10 loads. The sum runs in pieces of about 192
 * products started from zero and added to a staging tile, as a blocked GEMM
 * does (one running sum per register rounds twice as badly). C is cut into
 * blocks whose packed weights fit in L2. Tasks are groups of images (several
 * where planes are small, so that a weight block serves ~192 pixels); each
 * output element is computed by one task in a fixed order, so results do not
 * depend on the thread count.
 *
 * Backward-filter: dW (tap, c, k) = sum over pixels of x(pixel + tap, c) *
 * dy(pixel, k). Output channels again go across the lanes (dy as (pixel, K)
 * rows: transposed or copied, or NHWC dy itself), and a tile is 6 input
 * channels x NV vectors of output channels, summed over blocks of 1024 pixels
 * in registers. Images are split into fixed slots (their number depends on
 * the shape only); tasks are (slot, 64-channel block) pairs writing disjoint
 * parts of per-slot partial sums, added in slot order at the end: again
 * independent of the thread count. The padded inputs and dy rows are made
 * for a wave of images at a time, within a fixed scratch budget.
 *
 * Used where it applies (x86-64 with AVX-512F at run time, one group; 1x1
 * from 128 input channels) unless MPSDIAG_CPU_DIRECT=0 or the build defines
 * MD_NO_DIRECT; everything else goes the im2col/GEMM way in cpu_conv.c,
 * which stays the path of other CPUs. */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_conv_direct.h"
#include "backend/cpu/cpu_kernels.h"
#include "core/mem.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(MD_NO_DIRECT)
#define MD_HAVE_DIRECT 1
#include <immintrin.h>
#define AVX512 __attribute__((target("avx512f,fma")))
#define INLINE static inline __attribute__((always_inline))
#else
#define MD_HAVE_DIRECT 0
#endif

enum { VL = 16, NVMAX = 4, KB = VL * NVMAX, MR = 6 };

static int g_direct = -1; /* -1: decide on first use */

void md_cpu_direct_set(int on) { g_direct = on; }

const char *md_cpu_conv_kernels(void)
{
    if (md_cpu_direct_enabled()) return "direct AVX-512 kernels (one group), im2col + OpenBLAS GEMM otherwise";
#if MD_HAVE_DIRECT
    if (!__builtin_cpu_supports("avx512f")) return "im2col + OpenBLAS GEMM (no AVX-512 for the direct kernels)";
    return "im2col + OpenBLAS GEMM (direct kernels off: MPSDIAG_CPU_DIRECT=0)";
#else
    return "im2col + OpenBLAS GEMM (direct kernels are x86-64 AVX-512 only)";
#endif
}

int md_cpu_conv_prefers_nhwc(void) { return md_cpu_direct_enabled(); }

int md_cpu_direct_enabled(void)
{
#if MD_HAVE_DIRECT
    if (g_direct < 0) {
        const char *e = getenv("MPSDIAG_CPU_DIRECT");
        __builtin_cpu_init();
        g_direct = __builtin_cpu_supports("avx512f") && !(e && e[0] == '0');
    }
    return g_direct > 0;
#else
    return 0;
#endif
}

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
INLINE AVX512 void tr16(__m512 r[16])
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

/* dst[j*ldd + i] = src[i*lds + j] (+ beta * dst) for i < m, j < n. Full
 * 16x16 blocks go through registers; edges are scalar. beta == 0 never reads
 * dst (it may hold NaN). */
static AVX512 void transpose(const float *src, size_t lds, int m, int n, float *dst, size_t ldd, float beta)
{
    /* full blocks: 16 destination rows at a time, each filled left to right
     * (with a power-of-two ldd, 16 stores side by side across rows would
     * alias in L1 and in store forwarding) */
    int m16 = m / 16 * 16, n16 = n / 16 * 16;
    for (int j0 = 0; j0 < n16; j0 += 16)
        for (int i0 = 0; i0 < m16; i0 += 16) {
            __m512 r[16];
            for (int i = 0; i < 16; i++) r[i] = _mm512_loadu_ps(src + (size_t)(i0 + i) * lds + j0);
            tr16(r);
            for (int j = 0; j < 16; j++) {
                float *d = dst + (size_t)(j0 + j) * ldd + i0;
                __m512 v = r[j];
                if (beta != 0.0f) v = _mm512_fmadd_ps(_mm512_set1_ps(beta), _mm512_loadu_ps(d), v);
                _mm512_storeu_ps(d, v);
            }
        }
    /* edges */
    for (int j = 0; j < n; j++)
        for (int i = j < n16 ? m16 : 0; i < m; i++) {
            float *d = dst + (size_t)j * ldd + i, v = src[(size_t)i * lds + j];
            *d = beta != 0.0f ? v + beta * *d : v;
        }
}

/* xpad (hp, wp, c) <- image xi (NCHW planes or NHWC rows), zero outside. */
static void pad_image(const struct md_dconv *g, const struct pad_geom *pg, int nhwc, const float *xi, float *xp)
{
    int C = g->c, cs = pg->cs;
    int h_hi = g->h < pg->hp - g->ph ? g->h : pg->hp - g->ph;
    int w_hi = g->w < pg->wp - g->pw ? g->w : pg->wp - g->pw;
    if (w_hi <= 0 || h_hi <= 0) {
        memset(xp, 0, sizeof(float) * pg->img);
        return;
    }
    size_t row = (size_t)pg->wp * cs;
    /* zero only the border: top rows, left/right columns, bottom rows */
    memset(xp, 0, sizeof(float) * row * g->ph);
    for (int ih = 0; ih < h_hi; ih++) {
        float *d = xp + (size_t)(ih + g->ph) * row;
        memset(d, 0, sizeof(float) * (size_t)g->pw * cs);
        memset(d + (size_t)(g->pw + w_hi) * cs, 0, sizeof(float) * (size_t)(pg->wp - g->pw - w_hi) * cs);
        d += (size_t)g->pw * cs;
        if (nhwc) /* channels past C in each pixel are never read */
            for (int iw = 0; iw < w_hi; iw++)
                memcpy(d + (size_t)iw * cs, xi + ((size_t)ih * g->w + iw) * C, sizeof(float) * (size_t)C);
        else /* (C, w_hi) at plane stride -> (w_hi, cs) */
            transpose(xi + (size_t)ih * g->w, (size_t)g->h * g->w, C, w_hi, d, (size_t)cs, 0.0f);
    }
    size_t done = (size_t)(h_hi + g->ph) * row;
    memset(xp + done, 0, sizeof(float) * (pg->img - done));
}

/* ---- forward -------------------------------------------------------------- */

struct fwd_ctx {
    const struct md_dconv *g;
    struct pad_geom pg;
    int nhwc, kp, nkb, ncb, cbs, rs, grp, chunk, tasks;
    const float *x, *wpk;
    float *y, *buf;
    float beta;
    const int *toff;
    size_t per_thread, stage_off;
};

/* One tile: mr pixels (input offsets off[]) x nv vectors of output channels,
 * over the taps and the cn channels of one C-block (xb: the block's first
 * channel), into out (row stride KB). The sum runs in pieces of about
 * FWD_PIECE products (whole taps), each started from zero in the registers
 * and then added to out, as a blocked GEMM does: one long running sum in a
 * register rounds about twice as badly. add: out already holds a partial
 * sum (an earlier C-block's). */
#define FWD_PIECE 192

INLINE AVX512 void fwd_tile(const int mr, const int nv, const float *xb, const int *off, const int *toff, int rs,
                            int cn, const float *wb, int add, float *out)
{
    int tpp = FWD_PIECE / cn; /* taps per piece */
    if (tpp < 1) tpp = 1;
    for (int t0 = 0; t0 < rs; t0 += tpp) {
        int t1 = t0 + tpp < rs ? t0 + tpp : rs;
        __m512 acc[MR][NVMAX];
#pragma GCC unroll 6
        for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++) acc[i][v] = _mm512_setzero_ps();
        for (int t = t0; t < t1; t++) {
            const float *xs[MR];
#pragma GCC unroll 6
            for (int i = 0; i < mr; i++) xs[i] = xb + toff[t] + off[i];
            const float *wt = wb + (size_t)t * cn * nv * VL;
            for (int c = 0; c < cn; c++) {
                __m512 w[NVMAX];
#pragma GCC unroll 4
                for (int v = 0; v < nv; v++) w[v] = _mm512_loadu_ps(wt + v * VL);
                wt += nv * VL;
#pragma GCC unroll 6
                for (int i = 0; i < mr; i++) {
                    __m512 a = _mm512_set1_ps(xs[i][c]);
#pragma GCC unroll 4
                    for (int v = 0; v < nv; v++) acc[i][v] = _mm512_fmadd_ps(a, w[v], acc[i][v]);
                }
            }
        }
#pragma GCC unroll 6
        for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++) {
                float *o = out + i * KB + v * VL;
                _mm512_storeu_ps(o, add ? _mm512_add_ps(_mm512_loadu_ps(o), acc[i][v]) : acc[i][v]);
            }
        add = 1;
    }
}

#define FWD_NV(MRC)                                                                                              \
    switch (nv) {                                                                                                \
    case 1: fwd_tile(MRC, 1, xb, off, toff, rs, cn, wb, add, out); break;                                      \
    case 2: fwd_tile(MRC, 2, xb, off, toff, rs, cn, wb, add, out); break;                                      \
    case 3: fwd_tile(MRC, 3, xb, off, toff, rs, cn, wb, add, out); break;                                      \
    default: fwd_tile(MRC, 4, xb, off, toff, rs, cn, wb, add, out); break;                                     \
    }

static AVX512 void fwd_tile_any(int mr, int nv, const float *xb, const int *off, const int *toff, int rs, int cn,
                                const float *wb, int add, float *out)
{
    switch (mr) {
    case 1: FWD_NV(1) break;
    case 2: FWD_NV(2) break;
    case 3: FWD_NV(3) break;
    case 4: FWD_NV(4) break;
    case 5: FWD_NV(5) break;
    default: FWD_NV(6) break;
    }
}

/* Pixels [a, b) of the task's images (pixel i: image i / PQ) from the
 * staging rows (row stride KB, row 0 = pixel ch0) to y, with beta. */
static void fwd_flush(const struct fwd_ctx *c, int img0, int ch0, int a, int b, int k0, int kn, const float *stage)
{
    const struct md_dconv *g = c->g;
    int pq = g->p * g->q;
    while (a < b) {
        int il = a / pq, pp = a % pq, cnt = pq - pp < b - a ? pq - pp : b - a;
        const float *st = stage + (size_t)(a - ch0) * KB;
        size_t img = (size_t)img0 + il;
        if (c->nhwc) {
            for (int i = 0; i < cnt; i++) {
                float *yr = c->y + (img * pq + pp + i) * g->k + k0;
                const float *tr = st + (size_t)i * KB;
                if (c->beta == 0.0f)
                    memcpy(yr, tr, sizeof(float) * (size_t)kn);
                else
                    for (int k = 0; k < kn; k++) yr[k] = tr[k] + c->beta * yr[k];
            }
        } else {
            transpose(st, KB, cnt, kn, c->y + (img * g->k + k0) * pq + pp, (size_t)pq, c->beta);
        }
        a += cnt;
    }
}

static void fwd_range(void *vc, long long b, long long e)
{
    const struct fwd_ctx *c = vc;
    const struct md_dconv *g = c->g;
    float *xp = c->buf + (size_t)md_parallel_thread_id() * c->per_thread;
    float *stage = xp + c->stage_off; /* (chunk, KB) sums of a pixel chunk */
    int pq = g->p * g->q;
    for (long long task = b; task < e; task++) {
        int img0 = (int)(task * g->n / c->tasks), gi = (int)((task + 1) * g->n / c->tasks) - img0, npix = gi * pq;
        for (int i = 0; i < gi; i++)
            pad_image(g, &c->pg, c->nhwc, c->x + (size_t)(img0 + i) * g->c * g->h * g->w, xp + (size_t)i * c->pg.img);
        int chunk = c->ncb > 1 ? npix : c->chunk;
        for (int kb = 0; kb < c->nkb; kb++) {
            int k0 = kb * KB, nv = (c->kp - k0) / VL < NVMAX ? (c->kp - k0) / VL : NVMAX;
            int kn = g->k - k0 < nv * VL ? g->k - k0 : nv * VL; /* real channels in the block */
            const float *wk = c->wpk + (size_t)k0 * c->rs * g->c;
            for (int ch0 = 0; ch0 < npix; ch0 += chunk) {
                int ch1 = ch0 + chunk < npix ? ch0 + chunk : npix;
                for (int cb = 0; cb < c->ncb; cb++) {
                    int c0 = cb * c->cbs, cn = g->c - c0 < c->cbs ? g->c - c0 : c->cbs;
                    const float *wb = wk + (size_t)c0 * c->rs * nv * VL;
                    for (int pix0 = ch0; pix0 < ch1; pix0 += MR) {
                        int mr = ch1 - pix0 < MR ? ch1 - pix0 : MR, off[MR];
                        for (int i = 0; i < mr; i++) {
                            int il = (pix0 + i) / pq, pp = (pix0 + i) % pq, p = pp / g->q, q = pp % g->q;
                            off[i] = (int)(il * c->pg.img) + ((p * g->sh) * c->pg.wp + q * g->sw) * c->pg.cs;
                        }
                        float *st = stage + (size_t)(pix0 - ch0) * KB;
                        fwd_tile_any(mr, nv, xp + c0, off, c->toff, c->rs, cn, wb, cb > 0, st);
                    }
                }
                fwd_flush(c, img0, ch0, ch0, ch1, k0, kn, stage);
            }
        }
    }
}

/* Channels per C-block: the block's packed weights (taps x cbs x 64 floats)
 * within ~256 KiB, blocks of equal size. */
static int c_block(const struct md_dconv *g, int *ncb)
{
    int rs = g->r * g->s;
    int cmax = (256 << 10) / (rs * KB * 4);
    if (cmax < 1) cmax = 1;
    int n = (g->c + cmax - 1) / cmax;
    *ncb = n;
    return (g->c + n - 1) / n;
}

/* Pixels per staging chunk when C is one block: 16 tiles of 6, 24 KiB. */
#define FWD_CHUNK 96

int md_cpu_direct_fwd_ok(const struct md_dconv *g)
{
    /* enough work per loaded weight vector; offsets within int */
    struct pad_geom pg = pad_geom(g);
    /* 1x1 with few input channels: a plain GEMM does as well, without the
     * transposes (measured on resnet18_cifar's 64 -> 128 stride-2 shortcut) */
    if (g->r * g->s == 1 && g->c < 128) return 0;
    return md_cpu_direct_enabled() && g->c * g->r * g->s >= 16 && (size_t)g->r * g->s <= 1024 &&
           g->n >= md_threadpool_size() && pg.img * 16 < (size_t)1 << 30;
}

/* Packed weights of one (K-block, C-block): (tap, c, nv*16), zero past K.
 * flip: w holds the weights of the convolution whose backward-data this
 * forward computes ((C, K, R, S) or (C, R, S, K) here), read transposed and
 * rotated by 180 degrees. */
struct pack_ctx { const struct fwd_ctx *c; const float *w; float *wpk; int flip; };

static void pack_range(void *vc, long long b, long long e)
{
    const struct pack_ctx *pk = vc;
    const struct fwd_ctx *c = pk->c;
    const struct md_dconv *g = c->g;
    size_t rs = (size_t)c->rs, C = (size_t)g->c, K = (size_t)g->k;
    for (long long task = b; task < e; task++) {
        int kb = (int)(task / c->ncb), cb = (int)(task % c->ncb);
        int k0 = kb * KB, nv = (c->kp - k0) / VL < NVMAX ? (c->kp - k0) / VL : NVMAX, kw = nv * VL;
        int c0 = cb * c->cbs, cn = g->c - c0 < c->cbs ? g->c - c0 : c->cbs;
        float *wb = pk->wpk + (size_t)k0 * rs * C + (size_t)c0 * rs * kw;
        int kn = (size_t)(k0 + kw) <= K ? kw : (int)(K - (size_t)k0); /* real output channels */
        if (c->nhwc) {
            /* (K, R*S, C): per tap a (kn, cn) block to transpose; flipped,
             * (C, R*S, K): per tap and channel a run of kn to copy */
            for (size_t t = 0; t < rs; t++) {
                float *dt = wb + t * (size_t)cn * kw;
                if (!pk->flip)
                    transpose(pk->w + (size_t)k0 * rs * C + t * C + (size_t)c0, rs * C, kn, cn, dt, (size_t)kw, 0.0f);
                else
                    for (int ch = 0; ch < cn; ch++)
                        memcpy(dt + (size_t)ch * kw, pk->w + ((size_t)(c0 + ch) * rs + (rs - 1 - t)) * K + (size_t)k0,
                               sizeof(float) * (size_t)kn);
                if (kn < kw)
                    for (int ch = 0; ch < cn; ch++) memset(dt + (size_t)ch * kw + kn, 0, sizeof(float) * (size_t)(kw - kn));
            }
            continue;
        }
        /* written in order; the reads walk kw rows of w side by side (for
         * each k, consecutive (c, tap) are near), which stay in L1 */
        float *d = wb;
        for (size_t t = 0; t < rs; t++)
            for (int ch = 0; ch < cn; ch++) {
                size_t cc = (size_t)(c0 + ch);
                int kk = 0;
                for (; kk < kw && (size_t)(k0 + kk) < K; kk++) {
                    size_t k = (size_t)(k0 + kk);
                    if (!pk->flip)
                        *d++ = c->nhwc ? pk->w[(k * rs + t) * C + cc] : pk->w[(k * C + cc) * rs + t];
                    else
                        *d++ = c->nhwc ? pk->w[(cc * rs + (rs - 1 - t)) * K + k] : pk->w[(cc * K + k) * rs + (rs - 1 - t)];
                }
                for (; kk < kw; kk++) *d++ = 0.0f;
            }
    }
}

md_status md_cpu_direct_fwd(const struct md_dconv *g, int nhwc, int flip, const float *x, const float *w, float *y,
                            float beta)
{
    struct fwd_ctx c = {.g = g, .nhwc = nhwc, .x = x, .y = y, .beta = beta, .chunk = FWD_CHUNK};
    c.pg = pad_geom(g);
    c.rs = g->r * g->s;
    c.kp = (g->k + VL - 1) / VL * VL;
    c.nkb = (c.kp + KB - 1) / KB;
    c.cbs = c_block(g, &c.ncb);
    int pq = g->p * g->q, threads = md_threadpool_size();
    /* small planes: several images per task so that every weight block
     * loaded serves ~192 pixels, while leaving a task per thread */
    c.grp = pq >= 192 ? 1 : (192 + pq - 1) / pq;
    if (c.grp > 16) c.grp = 16;
    /* tasks: a multiple of the thread count where groups allow, then images
     * spread evenly over them (task i: images [i*n/T, (i+1)*n/T)) */
    int tasks = (g->n + c.grp - 1) / c.grp;
    tasks = (tasks + threads - 1) / threads * threads;
    if (tasks > g->n) tasks = g->n;
    c.tasks = tasks;
    c.grp = (g->n + tasks - 1) / tasks; /* the largest task */
    size_t stage_px = c.ncb > 1 ? (size_t)c.grp * pq : FWD_CHUNK;
    c.stage_off = ((size_t)c.grp * c.pg.img + 15) / 16 * 16;
    c.per_thread = c.stage_off + stage_px * KB;
    size_t rs = (size_t)c.rs;
    float *wpk = md_cpu_scratch(CPU_SCR_WTAP, sizeof(float) * (size_t)c.kp * rs * g->c + sizeof(int) * rs);
    c.buf = md_cpu_scratch(CPU_SCR_COL, sizeof(float) * c.per_thread * (size_t)threads);
    if (!wpk || !c.buf) return MD_ERR_OOM;
    struct pack_ctx pk = {&c, w, wpk, flip};
    md_parallel_for((long long)c.nkb * c.ncb, 1, pack_range, &pk);
    int *toff = (int *)(wpk + (size_t)c.kp * rs * g->c);
    for (int r = 0; r < g->r; r++)
        for (int s = 0; s < g->s; s++) toff[r * g->s + s] = (r * g->dh * c.pg.wp + s * g->dw) * c.pg.cs;
    c.wpk = wpk;
    c.toff = toff;
    md_parallel_for(c.tasks, 1, fwd_range, &c);
    return MD_OK;
}

/* ---- backward-filter -------------------------------------------------------- */

struct filt_ctx {
    const struct md_dconv *g;
    struct pad_geom pg;
    int nhwc, kp, kps, nkb, slots, rs; /* kps: dyt's row stride */
    int waves, wave, cap; /* the batch in waves of at most cap images per slot (bounded scratch) */
    int dy_in_place;      /* dyt is dy itself (NHWC, K a multiple of 16 that does not alias; kps = K) */
    const float *x, *dy;
    float *xpad, *dyt, *part; /* the wave's images padded; their dy as (P*Q, kps); per slot (tap, C, kp) */
    float *dw;
    float beta;
    const int *toff;
};

/* Images of slot s: [s*n/slots, (s+1)*n/slots); in the current wave w of W,
 * the part [w*len/W, (w+1)*len/W) of them, at buffer index s*cap onwards. */
static void slot_images(const struct filt_ctx *c, int s, int *i0, int *i1)
{
    int a = (int)((long long)s * c->g->n / c->slots), b = (int)((long long)(s + 1) * c->g->n / c->slots);
    long long len = b - a;
    *i0 = a + (int)(len * c->wave / c->waves);
    *i1 = a + (int)(len * (c->wave + 1) / c->waves);
}

static void filt_prep_range(void *vc, long long b, long long e)
{
    const struct filt_ctx *c = vc;
    const struct md_dconv *g = c->g;
    int pq = g->p * g->q;
    for (long long pos = b; pos < e; pos++) {
        int i0, i1, slot = (int)(pos / c->cap);
        slot_images(c, slot, &i0, &i1);
        long long img = i0 + pos % c->cap;
        if (img >= i1) continue;
        pad_image(g, &c->pg, c->nhwc, c->x + (size_t)img * g->c * g->h * g->w, c->xpad + (size_t)pos * c->pg.img);
        if (c->dy_in_place) continue; /* NHWC dy rows of a multiple of 16 channels: read where they are */
        float *d = c->dyt + (size_t)pos * pq * c->kps;
        if (c->nhwc) {
            const float *s = c->dy + (size_t)img * pq * g->k;
            for (int i = 0; i < pq; i++) {
                memcpy(d + (size_t)i * c->kps, s + (size_t)i * g->k, sizeof(float) * (size_t)g->k);
                memset(d + (size_t)i * c->kps + g->k, 0, sizeof(float) * (size_t)(c->kp - g->k));
            }
        } else {
            /* (K, P*Q) -> (P*Q, kp) */
            transpose(c->dy + (size_t)img * g->k * pq, (size_t)pq, g->k, pq, d, (size_t)c->kps, 0.0f);
            if (c->kp > g->k)
                for (int i = 0; i < pq; i++) memset(d + (size_t)i * c->kps + g->k, 0, sizeof(float) * (size_t)(c->kp - g->k));
        }
    }
}

/* acc (mr input channels x nv vectors of output channels) summed over nrow
 * output rows: row j's pixels start at xr[j] (+ xoff, then sw*C per pixel)
 * in xpad and at dr[j] in dyt. pd: the dW partial at (tap, c0, k0). */
INLINE AVX512 void filt_tile(const int mr, const int nv, const struct filt_ctx *c, const float *const *xr,
                             const float *const *dr, int nrow, int nq, int xoff, int k0, float *pd)
{
    const struct md_dconv *g = c->g;
    __m512 acc[MR][NVMAX];
#pragma GCC unroll 6
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) acc[i][v] = _mm512_loadu_ps(pd + (size_t)i * c->kp + v * VL);
    size_t xstep = (size_t)g->sw * c->pg.cs;
    for (int row = 0; row < nrow; row++) {
        const float *x = xr[row] + xoff, *d = dr[row] + k0;
        for (int q = 0; q < nq; q++) {
            __m512 dv[NVMAX];
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++) dv[v] = _mm512_loadu_ps(d + v * VL);
#pragma GCC unroll 6
            for (int i = 0; i < mr; i++) {
                __m512 a = _mm512_set1_ps(x[i]);
#pragma GCC unroll 4
                for (int v = 0; v < nv; v++) acc[i][v] = _mm512_fmadd_ps(a, dv[v], acc[i][v]);
            }
            x += xstep;
            d += c->kps;
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) _mm512_storeu_ps(pd + (size_t)i * c->kp + v * VL, acc[i][v]);
}

#define FILT_NV(MRC)                                                                                             \
    switch (nv) {                                                                                                \
    case 1: filt_tile(MRC, 1, c, xr, dr, nrow, nq, xoff, k0, pd); break;                                            \
    case 2: filt_tile(MRC, 2, c, xr, dr, nrow, nq, xoff, k0, pd); break;                                            \
    case 3: filt_tile(MRC, 3, c, xr, dr, nrow, nq, xoff, k0, pd); break;                                            \
    default: filt_tile(MRC, 4, c, xr, dr, nrow, nq, xoff, k0, pd); break;                                           \
    }

static AVX512 void filt_tile_any(int mr, int nv, const struct filt_ctx *c, const float *const *xr,
                                 const float *const *dr, int nrow, int nq, int xoff, int k0, float *pd)
{
    switch (mr) {
    case 1: FILT_NV(1) break;
    case 2: FILT_NV(2) break;
    case 3: FILT_NV(3) break;
    case 4: FILT_NV(4) break;
    case 5: FILT_NV(5) break;
    default: FILT_NV(6) break;
    }
}

/* Pixels per block of rows: the block's dy (pixels x 64 channels, 256 KiB)
 * stays in L2 across the taps and channel tiles, and the dW partial is
 * loaded and stored once per block (measured: 128 was ~5% slower). */
#define FILT_PIXELS 1024
#define FILT_ROWS 1024
/* Scratch for the padded inputs and dy rows of one wave of images. */
#define FILT_PREP_BYTES ((size_t)64 << 20)
static size_t g_prep_bytes = FILT_PREP_BYTES;

void md_cpu_direct_set_prep_bytes(size_t bytes) { g_prep_bytes = bytes ? bytes : FILT_PREP_BYTES; }

static void filt_range(void *vc, long long b, long long e)
{
    const struct filt_ctx *c = vc;
    const struct md_dconv *g = c->g;
    for (long long task = b; task < e; task++) {
        int slot = (int)(task / c->nkb), kb = (int)(task % c->nkb);
        int k0 = kb * KB, nv = (c->kp - k0) / VL < NVMAX ? (c->kp - k0) / VL : NVMAX;
        int i0, i1;
        slot_images(c, slot, &i0, &i1);
        float *part = c->part + (size_t)slot * c->rs * g->c * c->kp;
        if (c->wave == 0)
            for (size_t j = 0; j < (size_t)c->rs * g->c; j++) memset(part + j * c->kp + k0, 0, sizeof(float) * nv * VL);
        size_t buf0 = (size_t)slot * c->cap; /* the buffer index of image i0 */
        /* rows (image, p) of the slot in blocks of ~FILT_PIXELS pixels */
        /* runs of nq pixels: whole output rows, or single pixels where rows
         * are short (the loop over a 4-pixel row would cost more than its
         * FMAs) */
        int nq = g->q >= 16 ? g->q : 1, runs = (i1 - i0) * g->p * (g->q / nq), rb = FILT_PIXELS / nq;
        if (rb > FILT_ROWS) rb = FILT_ROWS;
        const float *xr[FILT_ROWS], *dr[FILT_ROWS];
        for (int run0 = 0; run0 < runs; run0 += rb) {
            int nrow = runs - run0 < rb ? runs - run0 : rb;
            for (int j = 0; j < nrow; j++) {
                int run = run0 + j, row = run / (g->q / nq), q = (run % (g->q / nq)) * nq;
                size_t img = buf0 + (size_t)(row / g->p);
                int p = row % g->p;
                xr[j] = c->xpad + img * c->pg.img + ((size_t)(p * g->sh) * c->pg.wp + (size_t)q * g->sw) * c->pg.cs;
                size_t dimg = c->dy_in_place ? (size_t)i0 + (size_t)(row / g->p) : img;
                dr[j] = (c->dy_in_place ? c->dy : c->dyt) + ((dimg * g->p + p) * g->q + q) * c->kps;
            }
            for (int t = 0; t < c->rs; t++)
                for (int c0 = 0; c0 < g->c; c0 += MR) {
                    int mr = g->c - c0 < MR ? g->c - c0 : MR;
                    float *pd = part + ((size_t)t * g->c + c0) * c->kp + k0;
                    filt_tile_any(mr, nv, c, xr, dr, nrow, nq, c->toff[t] + c0, k0, pd);
                }
        }
    }
}

static AVX512 void filt_sum_range(void *vc, long long b, long long e)
{
    const struct filt_ctx *c = vc;
    const struct md_dconv *g = c->g;
    size_t slot_floats = (size_t)c->rs * g->c * c->kp;
    float v[VL];
    for (long long kbk = b; kbk < e; kbk++) {
        int k0 = (int)kbk * VL, kn = g->k - k0 < VL ? g->k - k0 : VL;
        for (int o = 0; o < c->rs * g->c; o++) {
            /* o walks dw's order: (c, tap) for NCHW, (tap, c) for NHWC */
            int ch = c->nhwc ? o % g->c : o / c->rs, t = c->nhwc ? o / g->c : o % c->rs;
            const float *src = c->part + ((size_t)t * g->c + ch) * c->kp + k0;
            __m512 acc = _mm512_loadu_ps(src);
            for (int sl = 1; sl < c->slots; sl++) acc = _mm512_add_ps(acc, _mm512_loadu_ps(src + sl * slot_floats));
            _mm512_storeu_ps(v, acc);
            for (int k = 0; k < kn; k++) {
                float *d = c->dw + (size_t)(k0 + k) * c->rs * g->c + o;
                *d = c->beta != 0.0f ? v[k] + c->beta * *d : v[k];
            }
        }
    }
}

int md_cpu_direct_filter_ok(const struct md_dconv *g)
{
    if (g->r * g->s == 1 && g->c < 128) return 0; /* as for the forward */
    struct pad_geom pg = pad_geom(g); /* tap offsets within int */
    return md_cpu_direct_enabled() && g->n >= 1 && (size_t)g->r * g->s <= 1024 && pg.img < (size_t)1 << 30;
}

md_status md_cpu_direct_filter(const struct md_dconv *g, int nhwc, const float *x, const float *dy, float *dw,
                               float beta)
{
    struct filt_ctx c = {.g = g, .nhwc = nhwc, .x = x, .dy = dy, .dw = dw, .beta = beta};
    c.pg = pad_geom(g);
    c.rs = g->r * g->s;
    c.kp = (g->k + VL - 1) / VL * VL;
    /* rows of 1 KiB and more a power of two apart alias in L1 (resnet18's
     * 256 and 512 channel filters: 14 -> 19 ms); up to 64 channels the rows
     * spread over the sets and the copy is only a cost */
    c.dy_in_place = nhwc && g->k % VL == 0 && (g->k <= 64 || row_stride(g->k) == g->k);
    c.kps = c.dy_in_place ? g->k : row_stride(c.kp);
    c.nkb = (c.kp + KB - 1) / KB;
    /* about 8 tasks whatever the thread count (from the shape alone, so the
     * summation order is fixed); fewer slots where partials are large */
    c.slots = (8 + c.nkb - 1) / c.nkb;
    if (c.slots > g->n) c.slots = g->n;
    size_t pq = (size_t)g->p * g->q, slot_floats = (size_t)c.rs * g->c * c.kp;
    /* padded inputs and dy rows of at most FILT_PREP_BYTES at a time (at
     * least one image per slot): waves of cap images per slot */
    size_t per_img = c.pg.img + (c.dy_in_place ? 0 : pq * c.kps), fit = g_prep_bytes / 4 / per_img / (size_t)c.slots;
    int longest = (g->n + c.slots - 1) / c.slots;
    c.cap = fit < 1 ? 1 : fit > (size_t)longest ? longest : (int)fit;
    c.waves = (longest + c.cap - 1) / c.cap;
    c.cap = (longest + c.waves - 1) / c.waves; /* the largest wave of a slot */
    size_t fl_x = c.pg.img * c.cap * c.slots, fl_dy = c.dy_in_place ? 0 : pq * c.kps * c.cap * c.slots, fl_part = slot_floats * c.slots;
    float *buf = md_cpu_scratch(CPU_SCR_COL, sizeof(float) * (fl_x + fl_dy + fl_part));
    int *toff = md_cpu_scratch(CPU_SCR_WTAP, sizeof(int) * (size_t)c.rs);
    if (!buf || !toff) return MD_ERR_OOM;
    c.xpad = buf;
    c.dyt = buf + fl_x;
    c.part = c.dyt + fl_dy;
    for (int r = 0; r < g->r; r++)
        for (int s = 0; s < g->s; s++) toff[r * g->s + s] = (r * g->dh * c.pg.wp + s * g->dw) * c.pg.cs;
    c.toff = toff;
    for (c.wave = 0; c.wave < c.waves; c.wave++) {
        md_parallel_for((long long)c.slots * c.cap, 1, filt_prep_range, &c);
        md_parallel_for((long long)c.slots * c.nkb, 1, filt_range, &c);
    }
    md_parallel_for((g->k + VL - 1) / VL, 1, filt_sum_range, &c);
    return MD_OK;
}

#else /* no AVX-512 build: never enabled */

void md_cpu_direct_set_prep_bytes(size_t bytes) { (void)bytes; }
int md_cpu_direct_fwd_ok(const struct md_dconv *g) { (void)g; return 0; }
int md_cpu_direct_filter_ok(const struct md_dconv *g) { (void)g; return 0; }
md_status md_cpu_direct_fwd(const struct md_dconv *g, int nhwc, int flip, const float *x, const float *w, float *y,
                            float beta)
{
    (void)g, (void)nhwc, (void)flip, (void)x, (void)w, (void)y, (void)beta;
    return md_errf(MD_ERR_INTERNAL, "cpu direct convolution: not built for this CPU");
}
md_status md_cpu_direct_filter(const struct md_dconv *g, int nhwc, const float *x, const float *dy, float *dw,
                               float beta)
{
    (void)g, (void)nhwc, (void)x, (void)dy, (void)dw, (void)beta;
    return md_errf(MD_ERR_INTERNAL, "cpu direct convolution: not built for this CPU");
}

#endif
