/* cpu_conv_small.c - forward and backward-filter convolution where each
 * output sums few input values (C*R*S < 16), one group, fp32.
 *
 * im2col + GEMM is slow there: the GEMM's inner dimension is C*R*S (9 for a
 * 3x3 layer on grey images), so it is all packing and no reuse, while the
 * output (K values per pixel) is much larger than the input and its writing
 * should set the pace. The direct kernels (cpu_conv_direct.c) pad C to 16
 * floats per pixel and do not apply either. Here:
 *
 * Work is cut into units: (image, block of output rows), about SMALL_PIXELS
 * output pixels each, on the shape alone. A unit first gathers its inputs
 * into the thread's own buffer:
 *   NHWC: a zero-padded tile of its input rows, (rows, Wp, C), so that tap j
 *     of output pixel (p, q) is at (p*sh*Wp + q*sw)*C + toff[j];
 *   NCHW: its im2col, (C*R*S, pixels) with the pixel count rounded up to
 *     whole vector pairs (zeros past the end).
 * Then register tiles (cpu_conv_small_impl.h) compute it:
 *   NHWC forward: output channels across the lanes, a few pixels per tile
 *     (y's rows are written in place, K floats per pixel);
 *   NCHW forward: pixels across the lanes, 6 output channels per tile
 *     (y's planes are contiguous over a block of whole rows);
 *   NHWC backward-filter: output channels across the lanes, a few taps per
 *     tile, summed over the unit's pixels;
 *   NCHW backward-filter: pixels across the lanes, 3 channels x 3 taps.
 * Each output element of the forward is one unit's, computed in a fixed
 * order. The backward-filter's units are cut into SMALL_SLOTS fixed runs
 * (on the shape alone); each run adds its units' sums, in unit order, to
 * its own partial dW, and the partials are added in run order in double:
 * the results do not depend on the thread count.
 *
 * The tiles are built twice: with AVX2 + FMA (8 lanes) on x86-64, and with
 * the compiler's generic 4-float vectors (SSE, NEON), which every CPU runs.
 * Compilers without vector extensions (not GCC or Clang) keep im2col + GEMM. */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_conv_small.h"
#include "core/threadpool.h"

#if defined(__GNUC__) || defined(__clang__)
#define MD_HAVE_SMALL 1
#define INLINE static inline __attribute__((always_inline))
#else
#define MD_HAVE_SMALL 0
#endif

/* Output pixels per unit: its tile (or im2col) and its output stay in L2. */
#define SMALL_PIXELS 1024
/* Runs of units with their own partial dW (backward-filter). */
#define SMALL_SLOTS 64
/* Pixels per chunk of the NHWC forward: a multiple of every MRK. */
#define FK_CHUNK 24

/* Tile shapes (see cpu_conv_small_impl.h): at most 12 sums in registers. */
#define MRK(nv) ((nv) == 1 ? 12 : (nv) == 2 ? 6 : (nv) == 3 ? 4 : 3) /* pixels, NHWC forward */
#define JRK(nv) ((nv) == 1 ? 12 : (nv) == 2 ? 6 : (nv) == 3 ? 4 : 3) /* taps, NHWC filter */
#define FP_KR 6 /* output channels, NCHW forward */
#define FP_MQ 2 /* pixel vectors, NCHW forward */
#define GP_KR 3 /* output channels, NCHW filter */
#define GP_JR 3 /* taps, NCHW filter */
/* Vectors of output channels per block (NHWC). */
#define NVMAX 4

#if MD_HAVE_SMALL

/* ---- the tiles, once per vector type ---------------------------------------- */

typedef float md_v4f __attribute__((vector_size(16)));
INLINE md_v4f v4_load(const float *p)
{
    md_v4f v;
    memcpy(&v, p, sizeof v);
    return v;
}
INLINE void v4_store(float *p, md_v4f v) { memcpy(p, &v, sizeof v); }
INLINE md_v4f v4_set1(float x) { return (md_v4f){x, x, x, x}; }

#define SFX gen
#define VL 4
#define TARGET
#define VEC md_v4f
#define VLOAD v4_load
#define VSTORE v4_store
#define VSET1 v4_set1
#define VFMA(a, b, c) ((a) * (b) + (c))
#define VADD(a, b) ((a) + (b))
#define VZERO() v4_set1(0.0f)
#include "backend/cpu/cpu_conv_small_impl.h"

#if defined(__x86_64__) && !defined(MD_NO_DIRECT)
#define MD_SMALL_AVX2 1
#include <immintrin.h>
#define SFX avx2
#define VL 8
#define TARGET __attribute__((target("avx2,fma")))
#define VEC __m256
#define VLOAD _mm256_loadu_ps
#define VSTORE _mm256_storeu_ps
#define VSET1 _mm256_set1_ps
#define VFMA _mm256_fmadd_ps
#define VADD _mm256_add_ps
#define VZERO _mm256_setzero_ps
#include "backend/cpu/cpu_conv_small_impl.h"
#else
#define MD_SMALL_AVX2 0
#endif

struct small_kernels {
    int vl;
    const char *name;
    void (*fk)(int nv, const float *xs, const int *off, const int *toff, int crs, const float *wk, int kp, float *out,
               size_t ldo, float beta);
    void (*fp)(int kr, const float *col, size_t ldc, int crs, const float *w, float *out, size_t ldo, float beta);
    void (*gk)(int nv, int jr, const float *xs, const int *toff, int nrow, int nq, int xrow, int xstep,
               const float *dy, size_t dys, float *part, int kp);
    void (*gp)(int kr, int jr, const float *dy, size_t ldy, const float *col, size_t ldc, int nvec, float *part,
               int kp);
};

static const struct small_kernels k_gen = {4, "portable", fk_any_gen, fp_any_gen, gk_any_gen, gp_tile_gen};
#if MD_SMALL_AVX2
static const struct small_kernels k_avx2 = {8, "AVX2", fk_any_avx2, fp_any_avx2, gk_any_avx2, gp_tile_avx2};
#endif

/* AVX2 + FMA where the CPU has them and the direct kernels are on (their
 * switch, MPSDIAG_CPU_DIRECT=0, turns these to the portable build). */
static const struct small_kernels *kernels(void)
{
#if MD_SMALL_AVX2
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && md_cpu_direct_enabled()) return &k_avx2;
#endif
    return &k_gen;
}

const char *md_cpu_small_isa(void) { return kernels()->name; }

/* ---- geometry ------------------------------------------------------------------ */

struct small_ctx {
    const struct md_dconv *g;
    const struct small_kernels *kn;
    int nhwc, crs, vl, kp;   /* kp: K rounded up to whole vectors */
    int rows, nblk;          /* output rows per unit, units per image */
    long long units;
    int wp;                  /* NHWC tile: padded width (its row is wp*C floats) */
    size_t ldc;              /* NCHW im2col: floats per row (a unit's pixels, rounded up) */
    size_t per_thread;       /* scratch floats per thread */
    const float *x, *w, *dy; /* w: NHWC forward, packed (crs, kp); NCHW, the caller's (K, crs) */
    float *y, *buf, *part;   /* part: (slots, crs, kp) partial dW */
    float beta;
    const int *toff;         /* NHWC: tile offset of each tap (r, s, c) */
    int slots;
};

/* Units, tile and scratch sizes from the shape alone; vl: the kernels' lanes. */
static void small_geom(const struct md_dconv *g, int nhwc, int vl, struct small_ctx *c)
{
    c->g = g;
    c->nhwc = nhwc;
    c->crs = g->c * g->r * g->s;
    c->vl = vl;
    c->kp = (g->k + vl - 1) / vl * vl;
    c->rows = (SMALL_PIXELS + g->q - 1) / g->q;
    if (c->rows > g->p) c->rows = g->p;
    c->nblk = (g->p + c->rows - 1) / c->rows;
    c->units = (long long)g->n * c->nblk;
    c->wp = (g->q - 1) * g->sw + (g->s - 1) * g->dw + 1;
    size_t npix = (size_t)c->rows * g->q, pair = 2 * (size_t)vl;
    c->ldc = (npix + pair - 1) / pair * pair;
    size_t th = (size_t)(c->rows - 1) * g->sh + (size_t)(g->r - 1) * g->dh + 1;
    /* NHWC: the tile, and dy's last partial vector of channels (filter);
     * NCHW: the im2col, and dy's last partial vector of pixels (filter) */
    size_t f = nhwc ? th * c->wp * g->c + npix * vl : (size_t)c->crs * c->ldc + (size_t)g->k * vl;
    c->per_thread = (f + 15) / 16 * 16; /* whole cache lines: no false sharing */
    c->slots = c->units < SMALL_SLOTS ? (int)c->units : SMALL_SLOTS;
}

int md_cpu_small_ok(const struct md_dconv *g)
{
    if (!MD_HAVE_SMALL || (long long)g->c * g->r * g->s >= 16 || g->n < 1) return 0;
    struct small_ctx c;
    small_geom(g, 1, 8, &c);
    size_t nhwc = c.per_thread;
    small_geom(g, 0, 8, &c);
    /* tile offsets within int */
    return nhwc < ((size_t)1 << 28) && c.per_thread < ((size_t)1 << 28);
}

static void unit_rows(const struct small_ctx *c, long long u, int *img, int *p0, int *p1)
{
    *img = (int)(u / c->nblk);
    *p0 = (int)(u % c->nblk) * c->rows;
    *p1 = *p0 + c->rows < c->g->p ? *p0 + c->rows : c->g->p;
}

/* NHWC: input rows of output rows [p0, p1) of image img into the tile
 * (rows, wp, C), zero outside the image. */
static void tile_nhwc(const struct small_ctx *c, int img, int p0, int p1, float *tile)
{
    const struct md_dconv *g = c->g;
    int th = (p1 - p0 - 1) * g->sh + (g->r - 1) * g->dh + 1, C = g->c;
    size_t row = (size_t)c->wp * C;
    int a = g->pw < c->wp ? g->pw : c->wp, b = g->pw + g->w < c->wp ? g->pw + g->w : c->wp; /* columns from x */
    for (int tr = 0; tr < th; tr++) {
        int hi = p0 * g->sh - g->ph + tr;
        float *d = tile + (size_t)tr * row;
        if (hi < 0 || hi >= g->h || b <= a) {
            memset(d, 0, sizeof(float) * row);
            continue;
        }
        memset(d, 0, sizeof(float) * (size_t)a * C);
        memcpy(d + (size_t)a * C, c->x + (((size_t)img * g->h + hi) * g->w + (size_t)(a - g->pw)) * C,
               sizeof(float) * (size_t)(b - a) * C);
        memset(d + (size_t)b * C, 0, sizeof(float) * (size_t)(c->wp - b) * C);
    }
}

/* NCHW: im2col of output rows [p0, p1) of image img: col (crs, ldc), tap j =
 * (ch*R + r)*S + s, zeros outside the image and past the unit's pixels. */
static void im2col_nchw(const struct small_ctx *c, int img, int p0, int p1, float *col)
{
    const struct md_dconv *g = c->g;
    int Q = g->q;
    size_t npix = (size_t)(p1 - p0) * Q;
    for (int ch = 0; ch < g->c; ch++) {
        const float *xp = c->x + ((size_t)img * g->c + ch) * g->h * g->w;
        for (int r = 0; r < g->r; r++)
            for (int s = 0; s < g->s; s++) {
                float *d = col + (size_t)((ch * g->r + r) * g->s + s) * c->ldc;
                int off = s * g->dw - g->pw; /* input column q*sw + off */
                int qlo = off >= 0 ? 0 : (-off + g->sw - 1) / g->sw;
                int qhi = g->w - off <= 0 ? 0 : (g->w - off + g->sw - 1) / g->sw;
                if (qhi > Q) qhi = Q;
                if (qlo > qhi) qlo = qhi;
                for (int p = p0; p < p1; p++) {
                    float *o = d + (size_t)(p - p0) * Q;
                    int hi = p * g->sh - g->ph + r * g->dh;
                    if (hi < 0 || hi >= g->h) {
                        memset(o, 0, sizeof(float) * (size_t)Q);
                        continue;
                    }
                    const float *xr = xp + (size_t)hi * g->w + off;
                    for (int q = 0; q < qlo; q++) o[q] = 0.0f;
                    if (g->sw == 1)
                        for (int q = qlo; q < qhi; q++) o[q] = xr[q];
                    else
                        for (int q = qlo; q < qhi; q++) o[q] = xr[q * g->sw];
                    for (int q = qhi; q < Q; q++) o[q] = 0.0f;
                }
                memset(d + npix, 0, sizeof(float) * (c->ldc - npix));
            }
    }
}

/* y = t + beta*y over n floats (y = t for beta 0: y is never read). */
static void store_beta(float *y, const float *t, int n, float beta)
{
    for (int i = 0; i < n; i++) y[i] = beta != 0.0f ? t[i] + beta * y[i] : t[i];
}

/* ---- forward ------------------------------------------------------------------- */

static void fwd_nhwc_range(void *vc, long long b, long long e)
{
    const struct small_ctx *c = vc;
    const struct md_dconv *g = c->g;
    const struct small_kernels *kn = c->kn;
    float *tile = c->buf + (size_t)md_parallel_thread_id() * c->per_thread;
    int K = g->k, Q = g->q, vl = c->vl, off[FK_CHUNK];
    float st[12 * 8]; /* a tile's rows where K or the pixels end inside it */
    for (long long u = b; u < e; u++) {
        int img, p0, p1;
        unit_rows(c, u, &img, &p0, &p1);
        tile_nhwc(c, img, p0, p1, tile);
        int npix = (p1 - p0) * Q;
        float *yu = c->y + ((size_t)img * g->p * Q + (size_t)p0 * Q) * K;
        int p = 0, q = 0; /* the next pixel's row and column in the unit */
        for (int pix0 = 0; pix0 < npix; pix0 += FK_CHUNK) {
            int cn = npix - pix0 < FK_CHUNK ? npix - pix0 : FK_CHUNK;
            for (int i = 0; i < cn; i++) {
                off[i] = (p * g->sh * c->wp + q * g->sw) * g->c;
                if (++q == Q) q = 0, p++;
            }
            for (int i = cn; i < FK_CHUNK; i++) off[i] = off[cn - 1]; /* past the last pixel: the last again */
            for (int k0 = 0; k0 < K; k0 += NVMAX * vl) {
                int nv = (c->kp - k0) / vl < NVMAX ? (c->kp - k0) / vl : NVMAX, mr = MRK(nv);
                int kn_ = K - k0 < nv * vl ? K - k0 : nv * vl;
                for (int i0 = 0; i0 < cn; i0 += mr) {
                    float *o = yu + (size_t)(pix0 + i0) * K + k0;
                    if (kn_ == nv * vl && i0 + mr <= cn) {
                        kn->fk(nv, tile, off + i0, c->toff, c->crs, c->w + k0, c->kp, o, (size_t)K, c->beta);
                        continue;
                    }
                    kn->fk(nv, tile, off + i0, c->toff, c->crs, c->w + k0, c->kp, st, (size_t)nv * vl, 0.0f);
                    for (int i = 0; i < mr && i0 + i < cn; i++)
                        store_beta(o + (size_t)i * K, st + (size_t)i * nv * vl, kn_, c->beta);
                }
            }
        }
    }
}

static void fwd_nchw_range(void *vc, long long b, long long e)
{
    const struct small_ctx *c = vc;
    const struct md_dconv *g = c->g;
    const struct small_kernels *kn = c->kn;
    float *col = c->buf + (size_t)md_parallel_thread_id() * c->per_thread;
    size_t pq = (size_t)g->p * g->q;
    int K = g->k, w2 = FP_MQ * c->vl;
    float st[FP_KR * FP_MQ * 8]; /* the last pixels of a unit */
    for (long long u = b; u < e; u++) {
        int img, p0, p1;
        unit_rows(c, u, &img, &p0, &p1);
        im2col_nchw(c, img, p0, p1, col);
        int npix = (p1 - p0) * g->q;
        float *yu = c->y + (size_t)img * K * pq + (size_t)p0 * g->q;
        for (int k0 = 0; k0 < K; k0 += FP_KR) {
            int kr = K - k0 < FP_KR ? K - k0 : FP_KR;
            const float *wk = c->w + (size_t)k0 * c->crs;
            float *yk = yu + (size_t)k0 * pq;
            for (int i0 = 0; i0 < npix; i0 += w2) {
                if (i0 + w2 <= npix) {
                    kn->fp(kr, col + i0, c->ldc, c->crs, wk, yk + i0, pq, c->beta);
                    continue;
                }
                kn->fp(kr, col + i0, c->ldc, c->crs, wk, st, (size_t)w2, 0.0f);
                for (int k = 0; k < kr; k++) store_beta(yk + (size_t)k * pq + i0, st + (size_t)k * w2, npix - i0, c->beta);
            }
        }
    }
}

/* Scratch for the threads; for NHWC also the packed weights (crs, kp) (the
 * forward's) and the taps' tile offsets. */
static md_status small_prepare(struct small_ctx *c, const float *w_nhwc)
{
    const struct md_dconv *g = c->g;
    c->buf = md_cpu_scratch(CPU_SCR_COL, sizeof(float) * c->per_thread * (size_t)md_threadpool_size());
    if (!c->buf) return MD_ERR_OOM;
    if (!c->nhwc) return MD_OK;
    size_t nw = w_nhwc ? (size_t)c->crs * c->kp : 0;
    float *wpk = md_cpu_scratch(CPU_SCR_WTAP, sizeof(float) * nw + sizeof(int) * (size_t)c->crs);
    if (!wpk) return MD_ERR_OOM;
    int *toff = (int *)(wpk + nw);
    for (int r = 0; r < g->r; r++)
        for (int s = 0; s < g->s; s++)
            for (int ch = 0; ch < g->c; ch++)
                toff[(r * g->s + s) * g->c + ch] = (r * g->dh * c->wp + s * g->dw) * g->c + ch;
    c->toff = toff;
    if (w_nhwc) {
        for (int j = 0; j < c->crs; j++)
            for (int k = 0; k < c->kp; k++) wpk[(size_t)j * c->kp + k] = k < g->k ? w_nhwc[(size_t)k * c->crs + j] : 0.0f;
        c->w = wpk;
    }
    return MD_OK;
}

md_status md_cpu_small_fwd(const struct md_dconv *g, int nhwc, const float *x, const float *w, float *y, float beta)
{
    struct small_ctx c = {.kn = kernels(), .x = x, .w = w, .y = y, .beta = beta};
    small_geom(g, nhwc, c.kn->vl, &c);
    MD_TRY(small_prepare(&c, nhwc ? w : NULL));
    /* units of at least ~16K output floats per pool chunk */
    long long per = (long long)c.rows * g->q * g->k;
    md_parallel_for(c.units, per >= 16384 ? 1 : 16384 / (per ? per : 1), nhwc ? fwd_nhwc_range : fwd_nchw_range, &c);
    return MD_OK;
}

/* ---- backward-filter ------------------------------------------------------------- */

/* Units [first, last) of run `slot`. */
static void slot_units(const struct small_ctx *c, long long slot, long long *first, long long *last)
{
    *first = slot * c->units / c->slots;
    *last = (slot + 1) * c->units / c->slots;
}

static void filt_nhwc_range(void *vc, long long b, long long e)
{
    const struct small_ctx *c = vc;
    const struct md_dconv *g = c->g;
    const struct small_kernels *kn = c->kn;
    int K = g->k, Q = g->q, vl = c->vl, crs = c->crs, kfull = K / vl * vl;
    float *tile = c->buf + (size_t)md_parallel_thread_id() * c->per_thread;
    size_t th = (size_t)(c->rows - 1) * g->sh + (size_t)(g->r - 1) * g->dh + 1;
    float *tail = tile + th * c->wp * g->c; /* (pixels, vl): dy's last, partial vector of channels */
    int xrow = g->sh * c->wp * g->c, xstep = g->sw * g->c;
    for (long long slot = b; slot < e; slot++) {
        float *part = c->part + (size_t)slot * crs * c->kp;
        memset(part, 0, sizeof(float) * (size_t)crs * c->kp);
        long long u0, u1;
        slot_units(c, slot, &u0, &u1);
        for (long long u = u0; u < u1; u++) {
            int img, p0, p1;
            unit_rows(c, u, &img, &p0, &p1);
            tile_nhwc(c, img, p0, p1, tile);
            int nrow = p1 - p0, npix = nrow * Q;
            const float *dyu = c->dy + ((size_t)img * g->p * Q + (size_t)p0 * Q) * K;
            for (int k0 = 0; k0 < kfull; k0 += NVMAX * vl) {
                int nv = (kfull - k0) / vl < NVMAX ? (kfull - k0) / vl : NVMAX, jm = JRK(nv);
                for (int j0 = 0; j0 < crs; j0 += jm)
                    kn->gk(nv, crs - j0 < jm ? crs - j0 : jm, tile, c->toff + j0, nrow, Q, xrow, xstep, dyu + k0,
                           (size_t)K, part + (size_t)j0 * c->kp + k0, c->kp);
            }
            if (kfull == K) continue;
            for (int i = 0; i < npix; i++) {
                float *t = tail + (size_t)i * vl;
                memcpy(t, dyu + (size_t)i * K + kfull, sizeof(float) * (size_t)(K - kfull));
                memset(t + (K - kfull), 0, sizeof(float) * (size_t)(vl - (K - kfull)));
            }
            for (int j0 = 0; j0 < crs; j0 += JRK(1))
                kn->gk(1, crs - j0 < JRK(1) ? crs - j0 : JRK(1), tile, c->toff + j0, nrow, Q, xrow, xstep, tail,
                       (size_t)vl, part + (size_t)j0 * c->kp + kfull, c->kp);
        }
    }
}

static void filt_nchw_range(void *vc, long long b, long long e)
{
    const struct small_ctx *c = vc;
    const struct md_dconv *g = c->g;
    const struct small_kernels *kn = c->kn;
    int K = g->k, vl = c->vl, crs = c->crs;
    size_t pq = (size_t)g->p * g->q;
    float *col = c->buf + (size_t)md_parallel_thread_id() * c->per_thread;
    float *tail = col + (size_t)crs * c->ldc; /* (K, vl): dy's last, partial vector of pixels */
    for (long long slot = b; slot < e; slot++) {
        float *part = c->part + (size_t)slot * crs * c->kp;
        memset(part, 0, sizeof(float) * (size_t)crs * c->kp);
        long long u0, u1;
        slot_units(c, slot, &u0, &u1);
        for (long long u = u0; u < u1; u++) {
            int img, p0, p1;
            unit_rows(c, u, &img, &p0, &p1);
            im2col_nchw(c, img, p0, p1, col);
            int npix = (p1 - p0) * g->q, nvec = npix / vl, rest = npix - nvec * vl;
            const float *dyu = c->dy + (size_t)img * K * pq + (size_t)p0 * g->q;
            if (rest)
                for (int k = 0; k < K; k++) {
                    memcpy(tail + (size_t)k * vl, dyu + (size_t)k * pq + (size_t)nvec * vl, sizeof(float) * (size_t)rest);
                    memset(tail + (size_t)k * vl + rest, 0, sizeof(float) * (size_t)(vl - rest));
                }
            for (int k0 = 0; k0 < K; k0 += GP_KR) {
                int kr = K - k0 < GP_KR ? K - k0 : GP_KR;
                for (int j0 = 0; j0 < crs; j0 += GP_JR) {
                    int jr = crs - j0 < GP_JR ? crs - j0 : GP_JR;
                    float *pd = part + (size_t)j0 * c->kp + k0;
                    const float *cj = col + (size_t)j0 * c->ldc;
                    if (nvec) kn->gp(kr, jr, dyu + (size_t)k0 * pq, pq, cj, c->ldc, nvec, pd, c->kp);
                    if (rest)
                        kn->gp(kr, jr, tail + (size_t)k0 * vl, (size_t)vl, cj + (size_t)nvec * vl, c->ldc, 1, pd, c->kp);
                }
            }
        }
    }
}

struct sum_ctx { const struct small_ctx *c; float *dw; };

/* dw[k][j] = the runs' partials added in run order (in double) + beta*dw. */
static void filt_sum_range(void *vc, long long b, long long e)
{
    const struct sum_ctx *s = vc;
    const struct small_ctx *c = s->c;
    size_t slot_floats = (size_t)c->crs * c->kp;
    for (long long i = b; i < e; i++) {
        int k = (int)(i / c->crs), j = (int)(i % c->crs);
        double v = 0.0;
        for (int sl = 0; sl < c->slots; sl++) v += (double)c->part[(size_t)sl * slot_floats + (size_t)j * c->kp + k];
        if (c->beta != 0.0f) v += (double)c->beta * (double)s->dw[i];
        s->dw[i] = (float)v;
    }
}

md_status md_cpu_small_filter(const struct md_dconv *g, int nhwc, const float *x, const float *dy, float *dw,
                              float beta)
{
    struct small_ctx c = {.kn = kernels(), .x = x, .dy = dy, .beta = beta};
    small_geom(g, nhwc, c.kn->vl, &c);
    MD_TRY(small_prepare(&c, NULL));
    c.part = md_cpu_scratch(CPU_SCR_TMP, sizeof(float) * (size_t)c.slots * c.crs * c.kp);
    if (!c.part) return MD_ERR_OOM;
    md_parallel_for(c.slots, 1, nhwc ? filt_nhwc_range : filt_nchw_range, &c);
    struct sum_ctx s = {&c, dw};
    md_parallel_for((long long)g->k * c.crs, 4096, filt_sum_range, &s);
    return MD_OK;
}

#else /* no vector extensions: never taken */

int md_cpu_small_ok(const struct md_dconv *g) { (void)g; return 0; }
const char *md_cpu_small_isa(void) { return NULL; }
md_status md_cpu_small_fwd(const struct md_dconv *g, int nhwc, const float *x, const float *w, float *y, float beta)
{
    (void)g, (void)nhwc, (void)x, (void)w, (void)y, (void)beta;
    return md_errf(MD_ERR_INTERNAL, "cpu small-channel convolution: not built with this compiler");
}
md_status md_cpu_small_filter(const struct md_dconv *g, int nhwc, const float *x, const float *dy, float *dw,
                              float beta)
{
    (void)g, (void)nhwc, (void)x, (void)dy, (void)dw, (void)beta;
    return md_errf(MD_ERR_INTERNAL, "cpu small-channel convolution: not built with this compiler");
}

#endif
