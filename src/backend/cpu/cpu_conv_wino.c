/* cpu_conv_wino.c - Winograd F(2x2, 3x3) convolution (Lavin and Gray, 2016)
 * for 3x3, stride-1, one-group convolutions in channels-last fp32.
 *
 * Each 2x2 block of outputs (a tile) is computed from the 4x4 block of
 * inputs under it as Y = A^T [ (G g G^T) . (B^T d B) ] A: the product of the
 * transformed filter U = G g G^T and the transformed input V = B^T d B,
 * element by element at 16 positions xi, summed over the input channels.
 * Over channels that sum is a GEMM per position: M[xi] (tiles x K) =
 * V[xi] (tiles x C) U[xi] (C x K). 16 GEMMs of 1/4 the pixels do the work
 * of the 9 taps x all pixels of a direct convolution: 2.25x fewer
 * multiply-adds, at the price of the transforms (additions only) and of a
 * rounding somewhat worse than a direct sum (the transforms add and
 * subtract neighbouring values; G holds halves).
 *
 *   B^T = | 1  0 -1  0 |    G = | 1    0    0  |    A^T = | 1  1  1  0 |
 *         | 0  1  1  0 |        | 1/2  1/2  1/2|          | 0  1 -1 -1 |
 *         | 0 -1  1  0 |        | 1/2 -1/2  1/2|
 *         | 0  1  0 -1 |        | 0    0    1  |
 *
 * Work: the filter is transformed once per call (U: 16 x K x C floats,
 * parallel over its rows). Tiles, numbered (image, tile row, tile column),
 * go in fixed blocks of TB (TB from the channel counts only); a task takes
 * one block: input transform into V (16 x TB x C, in the thread's scratch),
 * 16 single-threaded OpenBLAS GEMMs into M (16 x TB x K), output transform
 * into y. Every output belongs to one block and is summed in one fixed
 * order, so the result does not depend on the thread count.
 *
 * The transforms run on vectors of 16 channels (GNU vector extensions; on
 * x86-64 Linux with gcc built for AVX-512, AVX2 and baseline, chosen at load
 * time), with the channels past the last multiple of 16 copied through a
 * small buffer. */
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "backend/cpu/cpu_conv_wino.h"
#include "backend/cpu/cpu_internal.h"

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(__SANITIZE_ADDRESS__)
#define WINO_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define WINO_CLONES
#endif

#define WV 16 /* channels per vector */
#if defined(__GNUC__) || defined(__clang__)
/* The helpers below pass 64-byte vectors by value; they are static and
 * always inlined, so no call ABI is involved. */
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float wvec __attribute__((vector_size(WV * sizeof(float))));
#define WZERO ((wvec){0})
#else
#error "cpu_conv_wino.c needs GCC or Clang vector extensions"
#endif

static inline __attribute__((always_inline)) wvec wload(const float *p)
{
    wvec v;
    memcpy(&v, p, sizeof v);
    return v;
}
#define wstore(p, v)                                                                                                 \
    do {                                                                                                             \
        wvec wstore_v_ = (v);                                                                                        \
        memcpy((p), &wstore_v_, sizeof wstore_v_);                                                                   \
    } while (0)

/* ---- on/off --------------------------------------------------------------- */

static int g_on = -1;

static int wino_enabled(void)
{
    if (g_on < 0) {
        const char *e = getenv("MPSDIAG_CPU_WINOGRAD");
        g_on = !(e && e[0] == '0');
    }
    return g_on;
}

void md_cpu_wino_set(int on) { g_on = on < 0 ? -1 : on != 0; }

int md_cpu_wino_ok(const struct md_dconv *g, int nhwc)
{
    return wino_enabled() && nhwc && g->r == 3 && g->s == 3 && g->sh == 1 && g->sw == 1 && g->dh == 1 &&
           g->dw == 1 && g->ph >= 0 && g->ph <= 2 && g->pw >= 0 && g->pw <= 2 && g->c >= 16 && g->k >= 16 &&
           g->p >= 1 && g->q >= 1;
}

/* ---- the transforms (one vector of channels) ----------------------------- */

/* d[i*4 + j] (the 4x4 input tile) <- B^T d B */
static inline __attribute__((always_inline)) void in_xform(wvec d[16])
{
    wvec t[16];
    for (int j = 0; j < 4; j++) {
        wvec d0 = d[j], d1 = d[4 + j], d2 = d[8 + j], d3 = d[12 + j];
        t[j] = d0 - d2;
        t[4 + j] = d1 + d2;
        t[8 + j] = d2 - d1;
        t[12 + j] = d1 - d3;
    }
    for (int i = 0; i < 4; i++) {
        wvec t0 = t[i * 4], t1 = t[i * 4 + 1], t2 = t[i * 4 + 2], t3 = t[i * 4 + 3];
        d[i * 4] = t0 - t2;
        d[i * 4 + 1] = t1 + t2;
        d[i * 4 + 2] = t2 - t1;
        d[i * 4 + 3] = t1 - t3;
    }
}

/* y[a*2 + b] (the 2x2 output tile) <- A^T m A */
static inline __attribute__((always_inline)) void out_xform(const wvec m[16], wvec y[4])
{
    wvec s[8];
    for (int j = 0; j < 4; j++) {
        s[j] = m[j] + m[4 + j] + m[8 + j];
        s[4 + j] = m[4 + j] - m[8 + j] - m[12 + j];
    }
    for (int a = 0; a < 2; a++) {
        y[a * 2] = s[a * 4] + s[a * 4 + 1] + s[a * 4 + 2];
        y[a * 2 + 1] = s[a * 4 + 1] - s[a * 4 + 2] - s[a * 4 + 3];
    }
}

/* u[xi] <- (G g G^T)[xi] for the 3x3 g[r*3 + s] */
static inline __attribute__((always_inline)) void filt_xform(const wvec g[9], wvec u[16])
{
    const wvec h = WZERO + 0.5f;
    wvec t[12]; /* G g: 4 x 3 */
    for (int s = 0; s < 3; s++) {
        wvec g0 = g[s], g1 = g[3 + s], g2 = g[6 + s];
        t[s] = g0;
        t[3 + s] = h * (g0 + g1 + g2);
        t[6 + s] = h * (g0 - g1 + g2);
        t[9 + s] = g2;
    }
    for (int i = 0; i < 4; i++) {
        wvec t0 = t[i * 3], t1 = t[i * 3 + 1], t2 = t[i * 3 + 2];
        u[i * 4] = t0;
        u[i * 4 + 1] = h * (t0 + t1 + t2);
        u[i * 4 + 2] = h * (t0 - t1 + t2);
        u[i * 4 + 3] = t2;
    }
}

/* ---- the call ------------------------------------------------------------ */

struct wino_ctx {
    const struct md_dconv *g;
    int flip, th, tw, tb;
    long long tiles;
    const float *x, *w;
    float *y, *u, *buf;
    size_t per_thread; /* floats of V + M per thread */
    float beta;
    /* the filter as U's rows: element (o, i, r, s) of w at o*so + i*si + r*sr + s*ss */
    int outer, inner;
    size_t so, si, sr, ss;
};

/* U[xi] (outer x inner) for outer rows [b, e). Vectors along inner where it
 * is contiguous in w (si == 1); else one element at a time in lane 0. */
WINO_CLONES static void filt_range(void *vc, long long b, long long e)
{
    const struct wino_ctx *c = vc;
    size_t plane = (size_t)c->outer * c->inner;
    for (long long o = b; o < e; o++)
        for (int i0 = 0; i0 < c->inner; i0 += WV) {
            int n = c->inner - i0 < WV ? c->inner - i0 : WV;
            wvec g[9], u[16];
            for (int r = 0; r < 3; r++)
                for (int s = 0; s < 3; s++) {
                    int rr = c->flip ? 2 - r : r, sq = c->flip ? 2 - s : s;
                    const float *p = c->w + (size_t)o * c->so + (size_t)i0 * c->si + rr * c->sr + sq * c->ss;
                    float tmp[WV] = {0};
                    for (int l = 0; l < n; l++) tmp[l] = p[(size_t)l * c->si];
                    g[r * 3 + s] = wload(tmp);
                }
            filt_xform(g, u);
            for (int xi = 0; xi < 16; xi++) {
                float *d = c->u + xi * plane + (size_t)o * c->inner + i0;
                if (n == WV)
                    wstore(d, u[xi]);
                else {
                    float tmp[WV];
                    wstore(tmp, u[xi]);
                    memcpy(d, tmp, sizeof(float) * (size_t)n);
                }
            }
        }
}

/* V[xi] rows for tiles [t0, t0 + nt) from x. */
WINO_CLONES static void in_block(const struct wino_ctx *c, long long t0, int nt, float *v)
{
    const struct md_dconv *g = c->g;
    int C = g->c, tb = c->tb;
    size_t plane = (size_t)tb * C;
    for (int t = 0; t < nt; t++) {
        long long tile = t0 + t;
        int tw = (int)(tile % c->tw), th = (int)(tile / c->tw % c->th), n = (int)(tile / ((long long)c->tw * c->th));
        const float *px[16];
        for (int i = 0; i < 4; i++)
            for (int j = 0; j < 4; j++) {
                int h = 2 * th - g->ph + i, w = 2 * tw - g->pw + j;
                px[i * 4 + j] = h >= 0 && h < g->h && w >= 0 && w < g->w
                                    ? c->x + (((size_t)n * g->h + h) * g->w + w) * C
                                    : NULL;
            }
        float *vt = v + (size_t)t * C;
        int c0 = 0;
        for (; c0 + WV <= C; c0 += WV) {
            wvec d[16];
            for (int xi = 0; xi < 16; xi++) d[xi] = px[xi] ? wload(px[xi] + c0) : WZERO;
            in_xform(d);
            for (int xi = 0; xi < 16; xi++) wstore(vt + xi * plane + c0, d[xi]);
        }
        if (c0 < C) {
            int n0 = C - c0;
            wvec d[16];
            for (int xi = 0; xi < 16; xi++) {
                float tmp[WV] = {0};
                if (px[xi]) memcpy(tmp, px[xi] + c0, sizeof(float) * (size_t)n0);
                d[xi] = wload(tmp);
            }
            in_xform(d);
            for (int xi = 0; xi < 16; xi++) {
                float tmp[WV];
                wstore(tmp, d[xi]);
                memcpy(vt + xi * plane + c0, tmp, sizeof(float) * (size_t)n0);
            }
        }
    }
}

/* y for tiles [t0, t0 + nt) from M. */
WINO_CLONES static void out_block(const struct wino_ctx *c, long long t0, int nt, const float *m)
{
    const struct md_dconv *g = c->g;
    int K = g->k, tb = c->tb;
    size_t plane = (size_t)tb * K;
    const wvec bv = WZERO + c->beta;
    for (int t = 0; t < nt; t++) {
        long long tile = t0 + t;
        int tw = (int)(tile % c->tw), th = (int)(tile / c->tw % c->th), n = (int)(tile / ((long long)c->tw * c->th));
        float *py[4];
        for (int a = 0; a < 2; a++)
            for (int b = 0; b < 2; b++) {
                int p = 2 * th + a, q = 2 * tw + b;
                py[a * 2 + b] = p < g->p && q < g->q ? c->y + (((size_t)n * g->p + p) * g->q + q) * K : NULL;
            }
        const float *mt = m + (size_t)t * K;
        for (int k0 = 0; k0 < K; k0 += WV) {
            int nk = K - k0 < WV ? K - k0 : WV;
            wvec mv[16], yv[4];
            for (int xi = 0; xi < 16; xi++) {
                if (nk == WV)
                    mv[xi] = wload(mt + xi * plane + k0);
                else {
                    float tmp[WV] = {0};
                    memcpy(tmp, mt + xi * plane + k0, sizeof(float) * (size_t)nk);
                    mv[xi] = wload(tmp);
                }
            }
            out_xform(mv, yv);
            for (int o = 0; o < 4; o++) {
                if (!py[o]) continue;
                float *d = py[o] + k0;
                if (nk == WV) {
                    wstore(d, c->beta != 0.0f ? yv[o] + bv * wload(d) : yv[o]);
                } else {
                    float tmp[WV];
                    wstore(tmp, yv[o]);
                    for (int l = 0; l < nk; l++) d[l] = c->beta != 0.0f ? tmp[l] + c->beta * d[l] : tmp[l];
                }
            }
        }
    }
}

static void block_range(void *vc, long long b, long long e)
{
    const struct wino_ctx *c = vc;
    const struct md_dconv *g = c->g;
    int C = g->c, K = g->k, tb = c->tb;
    float *v = c->buf + (size_t)md_parallel_thread_id() * c->per_thread;
    float *m = v + (size_t)16 * tb * C;
    size_t uplane = (size_t)C * K;
    for (long long blk = b; blk < e; blk++) {
        long long t0 = blk * tb;
        int nt = (int)(c->tiles - t0 < tb ? c->tiles - t0 : tb);
        in_block(c, t0, nt, v);
        for (int xi = 0; xi < 16; xi++) {
            /* U[xi] is (K x C) for a plain forward (B = U^T), (C x K) flipped */
            const float *u = c->u + xi * uplane;
            cblas_sgemm(CblasRowMajor, CblasNoTrans, c->flip ? CblasNoTrans : CblasTrans, nt, K, C, 1.0f,
                        v + (size_t)xi * tb * C, C, u, c->flip ? K : C, 0.0f, m + (size_t)xi * tb * K, K);
        }
        out_block(c, t0, nt, m);
    }
}

/* Tiles per block: V and M of a block about 1 MiB together (16 x TB x (C +
 * K) floats: the L2 of a recent core), at least 64 tiles (with fewer, the
 * GEMMs of 512 channels spend their time packing U) and at most 256; from
 * the channels only. Measured on a 2-core Zen 4 (docs/performance-cpu.md). */
static int block_tiles(int C, int K)
{
    int tb = (int)(((size_t)1 << 20) / (sizeof(float) * 16 * (size_t)(C + K)));
    if (tb < 64) tb = 64;
    if (tb > 256) tb = 256;
    return tb / 8 * 8;
}

md_status md_cpu_wino_fwd(const struct md_dconv *g, int flip, const float *x, const float *w, float *y, float beta)
{
    int C = g->c, K = g->k;
    struct wino_ctx c = {.g = g, .flip = flip, .th = (g->p + 1) / 2, .tw = (g->q + 1) / 2, .x = x, .w = w, .y = y,
                         .beta = beta};
    c.tiles = (long long)g->n * c.th * c.tw;
    c.tb = block_tiles(C, K);
    if (c.tiles < c.tb) c.tb = (int)((c.tiles + 7) / 8 * 8);
    if (!flip) { /* w (K, 3, 3, C): U rows are output channels */
        c.outer = K, c.inner = C;
        c.so = (size_t)9 * C, c.si = 1, c.sr = (size_t)3 * C, c.ss = (size_t)C;
    } else { /* w (C, 3, 3, K): U rows are input channels */
        c.outer = C, c.inner = K;
        c.so = (size_t)9 * K, c.si = 1, c.sr = (size_t)3 * K, c.ss = (size_t)K;
    }
    c.u = md_cpu_scratch(CPU_SCR_WFLIP, sizeof(float) * 16 * (size_t)C * K);
    c.per_thread = (size_t)16 * c.tb * ((size_t)C + K);
    c.buf = md_cpu_scratch(CPU_SCR_COL, sizeof(float) * c.per_thread * (size_t)md_threadpool_size());
    if (!c.u || !c.buf) return MD_ERR_OOM;
    md_parallel_for(c.outer, md_parallel_grain(c.outer, 4), filt_range, &c);
    long long blocks = (c.tiles + c.tb - 1) / c.tb;
    md_parallel_for(blocks, 1, block_range, &c);
    return MD_OK;
}
