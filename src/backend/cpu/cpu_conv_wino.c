/* cpu_conv_wino.c - Winograd convolution (Lavin and Gray, 2016), F(2x2, 3x3)
 * and F(4x4, 3x3), for 3x3, stride-1, one-group convolutions in
 * channels-last fp32: the forward, backward-data as the forward of dy
 * with the weights flipped, and backward-filter (below).
 *
 * Each m x m block of outputs (a tile; m = 2 or 4) is computed from the
 * (m+2) x (m+2) block of inputs under it as Y = A^T [ (G g G^T) . (B^T d B) ] A:
 * the transformed filter U = G g G^T times the transformed input V = B^T d B
 * element by element at (m+2)^2 positions xi, summed over the input
 * channels. Over channels that sum is a GEMM per position: M[xi] (tiles x K)
 * = V[xi] (tiles x C) U[xi] (C x K). Per output that is (m+2)^2 / m^2
 * multiply-adds per channel pair instead of 9: 2.25x fewer with m = 2, 4x
 * with m = 4, at the price of the transforms (additions and a few constant
 * products) and of a rounding worse than a direct sum's (the transforms add
 * and scale neighbouring values): within about 5e-7 (m = 2) and 6e-6 (m = 4)
 * of the output's largest magnitude in the tests.
 *
 *   F(2, 3): B^T = | 1  0 -1  0 |   G = | 1    0    0   |   A^T = | 1  1  1  0 |
 *                  | 0  1  1  0 |       | 1/2  1/2  1/2 |         | 0  1 -1 -1 |
 *                  | 0 -1  1  0 |       | 1/2 -1/2  1/2 |
 *                  | 0  1  0 -1 |       | 0    0    1   |
 *   F(4, 3): points 0, 1, -1, 2, -2 and infinity (in1_4, filt1_4, out1_4).
 *
 * Work: the filter is transformed once per call (U: (m+2)^2 x C x K
 * floats; backward-data in parallel over its rows, the forward over blocks
 * of 16 x 16 channels, transposed in registers so that U's rows are written
 * in runs). Tiles, numbered (image, tile row, tile
 * column), go in fixed blocks of TB (TB from the shape only); a task takes
 * one block: input transform into V ((m+2)^2 x TB x C, in the thread's
 * scratch), one single-threaded OpenBLAS GEMM per position into M, output
 * transform into y. Every output belongs to one block and is summed in one
 * fixed order, so the result does not depend on the thread count.
 *
 * The transforms run on vectors of 16 channels (GNU vector extensions; on
 * x86-64 Linux with gcc built for AVX-512, AVX2 and baseline, chosen at load
 * time), with the channels past the last multiple of 16 copied through a
 * small buffer. */
#include <limits.h>
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

/* The first n <= WV floats at p (zeros past them); v's first n to p. */
static inline __attribute__((always_inline)) wvec wload_n(const float *p, int n)
{
    if (n == WV) return wload(p);
    float tmp[WV] = {0};
    memcpy(tmp, p, sizeof(float) * (size_t)n);
    return wload(tmp);
}
static inline __attribute__((always_inline)) void wstore_n(float *p, const wvec *v, int n)
{
    if (n == WV)
        memcpy(p, v, sizeof *v);
    else
        memcpy(p, v, sizeof(float) * (size_t)n);
}
/* p[0, n) = v + beta * p (v alone when beta is 0: p is not read). */
static inline __attribute__((always_inline)) void wstore_beta(float *p, const wvec *v, int n, float beta)
{
    if (beta == 0.0f) {
        wstore_n(p, v, n);
        return;
    }
    wvec r = *v + (WZERO + beta) * wload_n(p, n);
    wstore_n(p, &r, n);
}

/* ---- on/off --------------------------------------------------------------- */

static int g_on = -1;

/* 0 off, 1 on, 2 or 4: on with that tile size */
static int wino_enabled(void)
{
    if (g_on < 0) {
        const char *e = getenv("MPSDIAG_CPU_WINOGRAD");
        g_on = !e || !e[0] || e[1] ? 1 : e[0] == '0' ? 0 : e[0] == '2' ? 2 : e[0] == '4' ? 4 : 1;
    }
    return g_on;
}

int md_cpu_wino_enabled(void) { return wino_enabled() != 0; }

void md_cpu_wino_set(int on) { g_on = on < 0 ? -1 : on == 2 || on == 4 ? on : on != 0; }

int md_cpu_wino_ok(const struct md_dconv *g, int nhwc)
{
    return wino_enabled() && nhwc && g->r == 3 && g->s == 3 && g->sh == 1 && g->sw == 1 && g->dh == 1 &&
           g->dw == 1 && g->ph >= 0 && g->ph <= 2 && g->pw >= 0 && g->pw <= 2 && g->c >= 16 && g->k >= 16 &&
           g->p >= 1 && g->q >= 1;
}

/* ---- the transforms (one vector of channels) ----------------------------- *
 * Each 2-D transform is a 1-D one down the columns, then along the rows; the
 * 1-D ones read n values at stride `is` and write at stride `os`. */

#define AI static inline __attribute__((always_inline))

/* F(2, 3): B^T d, G g, A^T m */
AI void in1_2(const wvec *d, int is, wvec *t, int os)
{
    wvec d0 = d[0], d1 = d[is], d2 = d[2 * is], d3 = d[3 * is];
    t[0] = d0 - d2;
    t[os] = d1 + d2;
    t[2 * os] = d2 - d1;
    t[3 * os] = d1 - d3;
}
AI void filt1_2(const wvec *g, int is, wvec *u, int os)
{
    const wvec h = WZERO + 0.5f;
    wvec g0 = g[0], g1 = g[is], g2 = g[2 * is];
    u[0] = g0;
    u[os] = h * (g0 + g1 + g2);
    u[2 * os] = h * (g0 - g1 + g2);
    u[3 * os] = g2;
}
AI void out1_2(const wvec *m, int is, wvec *y, int os)
{
    wvec m1 = m[is], m2 = m[2 * is];
    y[0] = m[0] + m1 + m2;
    y[os] = m1 - m2 - m[3 * is];
}

/* F(4, 3), interpolation points 0, 1, -1, 2, -2 and infinity */
AI void in1_4(const wvec *d, int is, wvec *t, int os)
{
    const wvec c2 = WZERO + 2.0f, c4 = WZERO + 4.0f, c5 = WZERO + 5.0f;
    wvec d0 = d[0], d1 = d[is], d2 = d[2 * is], d3 = d[3 * is], d4 = d[4 * is], d5 = d[5 * is];
    wvec a = d4 - c4 * d2, b = d3 - c4 * d1; /* t1 = a + b, t2 = a - b */
    wvec e = d4 - d2, f = c2 * (d3 - d1);    /* t3 = e + f, t4 = e - f */
    t[0] = c4 * d0 - c5 * d2 + d4;
    t[os] = a + b;
    t[2 * os] = a - b;
    t[3 * os] = e + f;
    t[4 * os] = e - f;
    t[5 * os] = c4 * d1 - c5 * d3 + d5;
}
AI void filt1_4(const wvec *g, int is, wvec *u, int os)
{
    const wvec q = WZERO + 0.25f, s6 = WZERO + (1.0f / 6.0f), s12 = WZERO + (1.0f / 12.0f),
               s24 = WZERO + (1.0f / 24.0f);
    wvec g0 = g[0], g1 = g[is], g2 = g[2 * is];
    wvec a = g0 + g2, b = s24 * g0 + s6 * g2;
    u[0] = q * g0;
    u[os] = -s6 * (a + g1);
    u[2 * os] = -s6 * (a - g1);
    u[3 * os] = b + s12 * g1;
    u[4 * os] = b - s12 * g1;
    u[5 * os] = g2;
}
AI void out1_4(const wvec *m, int is, wvec *y, int os)
{
    const wvec c2 = WZERO + 2.0f, c4 = WZERO + 4.0f, c8 = WZERO + 8.0f;
    wvec m1 = m[is], m2 = m[2 * is], m3 = m[3 * is], m4 = m[4 * is];
    wvec a = m1 + m2, b = m1 - m2, e = m3 + m4, f = m3 - m4;
    y[0] = m[0] + a + e;
    y[os] = b + c2 * f;
    y[2 * os] = a + c4 * e;
    y[3 * os] = b + c8 * f + m[5 * is];
}

/* The filter gradient's: dy's tile goes through A (t x m): A dy A^T; the
 * summed products come back through G^T (3 x t): dW = G^T Z G. */
AI void dy1_2(const wvec *y, int is, wvec *o, int os)
{
    wvec y0 = y[0], y1 = y[is];
    o[0] = y0;
    o[os] = y0 + y1;
    o[2 * os] = y0 - y1;
    o[3 * os] = -y1;
}
AI void dy1_4(const wvec *y, int is, wvec *o, int os)
{
    const wvec c2 = WZERO + 2.0f, c4 = WZERO + 4.0f, c8 = WZERO + 8.0f;
    wvec y0 = y[0], y1 = y[is], y2 = y[2 * is], y3 = y[3 * is];
    wvec a = y0 + y2, b = y1 + y3, e = y0 + c4 * y2, f = c2 * y1 + c8 * y3;
    o[0] = y0;
    o[os] = a + b;
    o[2 * os] = a - b;
    o[3 * os] = e + f;
    o[4 * os] = e - f;
    o[5 * os] = y3;
}
AI void bk1_2(const wvec *z, int is, wvec *w, int os)
{
    const wvec h = WZERO + 0.5f;
    wvec z1 = z[is], z2 = z[2 * is];
    w[0] = z[0] + h * (z1 + z2);
    w[os] = h * (z1 - z2);
    w[2 * os] = h * (z1 + z2) + z[3 * is];
}
AI void bk1_4(const wvec *z, int is, wvec *w, int os)
{
    const wvec q = WZERO + 0.25f, s6 = WZERO + (1.0f / 6.0f), s12 = WZERO + (1.0f / 12.0f),
               s24 = WZERO + (1.0f / 24.0f);
    wvec z1 = z[is], z2 = z[2 * is], z3 = z[3 * is], z4 = z[4 * is];
    wvec a = z1 + z2, e = z3 + z4;
    w[0] = q * z[0] - s6 * a + s24 * e;
    w[os] = s6 * (z2 - z1) + s12 * (z3 - z4);
    w[2 * os] = s6 * (e - a) + z[5 * is];
}

/* dst (nout x nout) <- the 1-D transform F (nin values in, nout out) of
 * src (nin x nin) down its columns, then along the rows; dst may be src. */
#define SEP2D(F, nin, nout, src, dst)                                                                              \
    do {                                                                                                           \
        wvec sep_t_[36];                                                                                           \
        for (int sep_j_ = 0; sep_j_ < (nin); sep_j_++) F((src) + sep_j_, (nin), sep_t_ + sep_j_, (nin));           \
        for (int sep_i_ = 0; sep_i_ < (nout); sep_i_++) F(sep_t_ + sep_i_ * (nin), 1, (dst) + sep_i_ * (nout), 1); \
    } while (0)

/* d (t x t, t = mt + 2) <- B^T d B */
AI void in_xform(int mt, wvec *d)
{
    if (mt == 2) SEP2D(in1_2, 4, 4, d, d);
    else SEP2D(in1_4, 6, 6, d, d);
}
/* y (mt x mt) <- A^T m A */
AI void out_xform(int mt, const wvec *m, wvec *y)
{
    if (mt == 2) SEP2D(out1_2, 4, 2, m, y);
    else SEP2D(out1_4, 6, 4, m, y);
}
/* u (t x t) <- G g G^T for the 3x3 g */
AI void filt_xform(int mt, const wvec *g, wvec *u)
{
    if (mt == 2) SEP2D(filt1_2, 3, 4, g, u);
    else SEP2D(filt1_4, 3, 6, g, u);
}
/* o (t x t) <- A dy A^T for the mt x mt dy */
AI void dy_xform(int mt, const wvec *y, wvec *o)
{
    if (mt == 2) SEP2D(dy1_2, 2, 4, y, o);
    else SEP2D(dy1_4, 4, 6, y, o);
}
/* w (3 x 3) <- G^T z G for the t x t z */
AI void bk_xform(int mt, const wvec *z, wvec *w)
{
    if (mt == 2) SEP2D(bk1_2, 4, 3, z, w);
    else SEP2D(bk1_4, 6, 3, z, w);
}

/* ---- the call ------------------------------------------------------------ */

struct wino_ctx {
    const struct md_dconv *g;
    int mt, nxi; /* outputs per tile side (2 or 4); positions (mt + 2)^2 */
    int flip, th, tw, tb;
    size_t vplane, mplane; /* floats between two positions' planes of V (rows of C) and of M or D (rows of K) */
    size_t uplane;         /* floats between two positions' planes of U (or Z: C x K each) */
    int kch, nkc; /* output channels per task and chunks of them (more tasks for many threads) */
    long long tiles;
    const float *x, *w, *dy;
    float *y, *u, *buf;
    size_t per_thread; /* floats of V + M (or D) per thread */
    float beta;
    int mk; /* the forward's GEMMs by mk_gemm (below), else OpenBLAS */
    int uparts; /* the filter gradient: Z in this many parts, uparts_stride floats apart, summed in order */
    size_t uparts_stride;
    /* the filter as U's rows: element (o, i, r, s) of w at o*so + i + r*sr + s*ss */
    int outer, inner;
    size_t so, sr, ss;
};

/* Backward-data (flipped): U[xi] (outer x inner) for outer rows [b, e),
 * vectors along inner, which is U's row already. */
AI void filt_rows(int mt, const struct wino_ctx *c, long long b, long long e)
{
    size_t plane = c->uplane;
    for (long long o = b; o < e; o++)
        for (int i0 = 0; i0 < c->inner; i0 += WV) {
            int n = c->inner - i0 < WV ? c->inner - i0 : WV;
            wvec g[9], u[36];
            for (int r = 0; r < 3; r++)
                for (int s = 0; s < 3; s++)
                    g[r * 3 + s] = wload_n(c->w + (size_t)o * c->so + i0 + (2 - r) * c->sr + (2 - s) * c->ss, n);
            filt_xform(mt, g, u);
            for (int xi = 0; xi < c->nxi; xi++) wstore_n(c->u + xi * plane + (size_t)o * c->inner + i0, &u[xi], n);
        }
}

/* r[i] lane j <-> r[j] lane i (WV x WV): four rounds of two-input shuffles
 * swapping the off-diagonal blocks of 8, 4, 2 and 1 between row pairs. */
typedef int wmask __attribute__((vector_size(WV * sizeof(int))));
AI void wtranspose(wvec r[WV])
{
    static const wmask lo[4] = {{0, 1, 2, 3, 4, 5, 6, 7, 16, 17, 18, 19, 20, 21, 22, 23},
                                {0, 1, 2, 3, 16, 17, 18, 19, 8, 9, 10, 11, 24, 25, 26, 27},
                                {0, 1, 16, 17, 4, 5, 20, 21, 8, 9, 24, 25, 12, 13, 28, 29},
                                {0, 16, 2, 18, 4, 20, 6, 22, 8, 24, 10, 26, 12, 28, 14, 30}};
    static const wmask hi[4] = {{8, 9, 10, 11, 12, 13, 14, 15, 24, 25, 26, 27, 28, 29, 30, 31},
                                {4, 5, 6, 7, 20, 21, 22, 23, 12, 13, 14, 15, 28, 29, 30, 31},
                                {2, 3, 18, 19, 6, 7, 22, 23, 10, 11, 26, 27, 14, 15, 30, 31},
                                {1, 17, 3, 19, 5, 21, 7, 23, 9, 25, 11, 27, 13, 29, 15, 31}};
    static const int bs[4] = {8, 4, 2, 1};
    for (int k = 0; k < 4; k++)
        for (int i = 0; i < WV; i++) {
            if (i & bs[k]) continue;
            wvec a = r[i], d = r[i + bs[k]];
            r[i] = __builtin_shuffle(a, d, lo[k]);
            r[i + bs[k]] = __builtin_shuffle(a, d, hi[k]);
        }
}

/* Forward: U[xi] is (C x K) and w (K, 3, 3, C), so the vectors go along K:
 * task t is the block of WV output channels t % nk16 and of WV input
 * channels t / nk16, read from w row by row (k) and transposed in registers,
 * then transformed WV filters at a time and written as runs of U's rows.
 * (Vectors along C, as backward-data has them, left one scattered store per
 * U element: on resnet18_cifar's 512-channel layers that pass took a fifth
 * of the forward.) Each lane transforms its own filter, so the values are
 * those of any other lane order. */
AI void filt_blocks_fwd(int mt, const struct wino_ctx *c, long long b, long long e)
{
    int K = c->outer, C = c->inner, nk16 = (K + WV - 1) / WV;
    size_t plane = c->uplane;
    for (long long t = b; t < e; t++) {
        int k0 = (int)(t % nk16) * WV, c0 = (int)(t / nk16) * WV;
        int nk = K - k0 < WV ? K - k0 : WV, ncc = C - c0 < WV ? C - c0 : WV;
        wvec tr[9][WV]; /* [tap][c]: lanes are k */
        for (int tap = 0; tap < 9; tap++) {
            wvec *r = tr[tap];
            for (int kk = 0; kk < WV; kk++)
                r[kk] = kk < nk ? wload_n(c->w + (size_t)(k0 + kk) * c->so + (size_t)(tap / 3) * c->sr +
                                              (size_t)(tap % 3) * c->ss + (size_t)c0, ncc)
                                : WZERO;
            wtranspose(r);
        }
        for (int cc = 0; cc < ncc; cc++) {
            wvec g[9], u[36];
            for (int tap = 0; tap < 9; tap++) g[tap] = tr[tap][cc];
            filt_xform(mt, g, u);
            for (int xi = 0; xi < c->nxi; xi++) wstore_n(c->u + xi * plane + (size_t)(c0 + cc) * K + k0, &u[xi], nk);
        }
    }
}

/* V[xi] rows for tiles [t0, t0 + nt) from x. */
AI void in_tiles(int mt, const struct wino_ctx *c, long long t0, int nt, float *v)
{
    const struct md_dconv *g = c->g;
    int C = g->c, t = mt + 2, nxi = t * t;
    size_t plane = c->vplane;
    for (int ti = 0; ti < nt; ti++) {
        long long tile = t0 + ti;
        int tw = (int)(tile % c->tw), th = (int)(tile / c->tw % c->th), n = (int)(tile / ((long long)c->tw * c->th));
        const float *px[36];
        for (int i = 0; i < t; i++)
            for (int j = 0; j < t; j++) {
                int h = mt * th - g->ph + i, w = mt * tw - g->pw + j;
                px[i * t + j] = h >= 0 && h < g->h && w >= 0 && w < g->w
                                    ? c->x + (((size_t)n * g->h + h) * g->w + w) * C
                                    : NULL;
            }
        float *vt = v + (size_t)ti * C;
        for (int c0 = 0; c0 < C; c0 += WV) {
            int nc = C - c0 < WV ? C - c0 : WV;
            wvec d[36];
            for (int xi = 0; xi < nxi; xi++) {
                d[xi] = px[xi] ? wload_n(px[xi] + c0, nc) : WZERO;
            }
            in_xform(mt, d);
            for (int xi = 0; xi < nxi; xi++) wstore_n(vt + xi * plane + c0, &d[xi], nc);
        }
    }
}

/* y for tiles [t0, t0 + nt) from M. */
AI void out_tiles(int mt, const struct wino_ctx *c, long long t0, int nt, const float *m, int kb, int ke)
{
    const struct md_dconv *g = c->g;
    int K = g->k, nxi = (mt + 2) * (mt + 2);
    size_t plane = c->mplane;
    for (int ti = 0; ti < nt; ti++) {
        long long tile = t0 + ti;
        int tw = (int)(tile % c->tw), th = (int)(tile / c->tw % c->th), n = (int)(tile / ((long long)c->tw * c->th));
        float *py[16];
        for (int a = 0; a < mt; a++)
            for (int b = 0; b < mt; b++) {
                int p = mt * th + a, q = mt * tw + b;
                py[a * mt + b] = p < g->p && q < g->q ? c->y + (((size_t)n * g->p + p) * g->q + q) * K : NULL;
            }
        const float *mtile = m + (size_t)ti * K;
        for (int k0 = kb; k0 < ke; k0 += WV) {
            int nk = ke - k0 < WV ? ke - k0 : WV;
            wvec mv[36], yv[16];
            for (int xi = 0; xi < nxi; xi++) mv[xi] = wload_n(mtile + xi * plane + k0, nk);
            out_xform(mt, mv, yv);
            for (int o = 0; o < mt * mt; o++)
                if (py[o]) wstore_beta(py[o] + k0, &yv[o], nk, c->beta);
        }
    }
}

/* Built per tile size (and per instruction set where WINO_CLONES says). */
WINO_CLONES static void filt_range(void *vc, long long b, long long e)
{
    const struct wino_ctx *c = vc;
    if (c->mt == 2) filt_rows(2, c, b, e);
    else filt_rows(4, c, b, e);
}

WINO_CLONES static void filt_fwd_range(void *vc, long long b, long long e)
{
    const struct wino_ctx *c = vc;
    if (c->mt == 2) filt_blocks_fwd(2, c, b, e);
    else filt_blocks_fwd(4, c, b, e);
}
WINO_CLONES static void in_block(const struct wino_ctx *c, long long t0, int nt, float *v)
{
    if (c->mt == 2) in_tiles(2, c, t0, nt, v);
    else in_tiles(4, c, t0, nt, v);
}
WINO_CLONES static void out_block(const struct wino_ctx *c, long long t0, int nt, const float *m, int kb, int ke)
{
    if (c->mt == 2) out_tiles(2, c, t0, nt, m, kb, ke);
    else out_tiles(4, c, t0, nt, m, kb, ke);
}

/* ---- the GEMMs of small channel counts -----------------------------------
 * M (nt x kw, ld ldm) = V (nt x C, ld C) B (C x kw, ld ldb) in AVX-512
 * register tiles of 6 rows x up to 4 vectors of 16 columns, the sum over C
 * in registers in order (one FMA per product, as OpenBLAS's kernels; 12
 * rows where there are 2 vectors or fewer, for as many FMAs per load). With
 * C <= 64 a GEMM of a block is too short for OpenBLAS's packing and per-call
 * work to pay: small_cnn's conv2 (C = 32) spent a fifth of its Winograd time
 * there. The forward and backward-data take them up to 256 input channels:
 * with blocks of 16 tiles (block_tiles) resnet18_cifar's 128- and
 * 256-channel layers were 10-30% faster each way than OpenBLAS on blocks of
 * 64; its 512-channel F(2, 3) layers were slower (their 16 MiB U is read
 * again for every block of 16), so they stay on OpenBLAS. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define MK_ON 1
#define MK_T __attribute__((target("avx512f,fma")))
#define MK_FWD_C_MAX 256 /* the forward's and backward-data's GEMMs */
#define MK_FILTER_C_MAX 64 /* the filter gradient's register tiles (fz_fits) */

/* out (R x 16*NV, ld ldo) = (add ? out : 0) + A B over n: A's (r, i) at
 * a[r*ars + i*ais], B's row i at b + i*ldb. The forward's GEMMs take A as
 * V's rows (ars = C, ais = 1), the filter's as D transposed (ars = 1, ais = K). */
AI MK_T void rt_tile(int R, int NV, int n, const float *a, size_t ars, size_t ais, const float *b, size_t ldb,
                     float *out, size_t ldo, int add)
{
    __m512 acc[16][4];
#pragma GCC unroll 16
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int q = 0; q < NV; q++) acc[r][q] = _mm512_setzero_ps();
    for (int i = 0; i < n; i++) {
        __m512 bv[4];
#pragma GCC unroll 4
        for (int q = 0; q < NV; q++) bv[q] = _mm512_loadu_ps(b + (size_t)i * ldb + 16 * q);
#pragma GCC unroll 16
        for (int r = 0; r < R; r++) {
            __m512 av = _mm512_set1_ps(a[(size_t)r * ars + (size_t)i * ais]);
#pragma GCC unroll 4
            for (int q = 0; q < NV; q++) acc[r][q] = _mm512_fmadd_ps(av, bv[q], acc[r][q]);
        }
    }
#pragma GCC unroll 16
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int q = 0; q < NV; q++) {
            float *p = out + (size_t)r * ldo + 16 * q;
            _mm512_storeu_ps(p, add ? _mm512_add_ps(_mm512_loadu_ps(p), acc[r][q]) : acc[r][q]);
        }
}

/* M's rows: R rows of V (nt x C) times B (C x 16*NV) */
AI MK_T void mk_tile(int R, int NV, int C, const float *v, const float *b, int ldb, float *m, int ldm)
{
    rt_tile(R, NV, C, v, (size_t)C, 1, b, (size_t)ldb, m, (size_t)ldm, 0);
}

/* rows [0, nt) for NV vectors of columns: tiles of 12 (NV <= 2) or 6 rows, then the rest */
AI MK_T void mk_rows(int NV, int nt, int C, const float *v, const float *b, int ldb, float *m, int ldm)
{
    int t = 0;
    if (NV <= 2)
        for (; t + 12 <= nt; t += 12) mk_tile(12, NV, C, v + (size_t)t * C, b, ldb, m + (size_t)t * ldm, ldm);
    for (; t + 6 <= nt; t += 6) mk_tile(6, NV, C, v + (size_t)t * C, b, ldb, m + (size_t)t * ldm, ldm);
    const float *vt = v + (size_t)t * C;
    float *mt = m + (size_t)t * ldm;
    switch (nt - t) {
    case 5: mk_tile(5, NV, C, vt, b, ldb, mt, ldm); break;
    case 4: mk_tile(4, NV, C, vt, b, ldb, mt, ldm); break;
    case 3: mk_tile(3, NV, C, vt, b, ldb, mt, ldm); break;
    case 2: mk_tile(2, NV, C, vt, b, ldb, mt, ldm); break;
    case 1: mk_tile(1, NV, C, vt, b, ldb, mt, ldm); break;
    default: break;
    }
}

/* kw a multiple of 16 */
static MK_T void mk_gemm(int nt, int kw, int C, const float *v, const float *b, int ldb, float *m, int ldm)
{
    for (int j = 0; j < kw; j += 64) {
        switch ((kw - j) / 16) {
        case 1: mk_rows(1, nt, C, v, b + j, ldb, m + j, ldm); break;
        case 2: mk_rows(2, nt, C, v, b + j, ldb, m + j, ldm); break;
        case 3: mk_rows(3, nt, C, v, b + j, ldb, m + j, ldm); break;
        default: mk_rows(4, nt, C, v, b + j, ldb, m + j, ldm); break;
        }
    }
}

static int mk_fits(int C, int K, int cmax) { return C <= cmax && K % 16 == 0 && __builtin_cpu_supports("avx512f"); }
#else
#define MK_ON 0
#define MK_FWD_C_MAX 0
#define MK_FILTER_C_MAX 0
static int mk_fits(int C, int K, int cmax) { (void)C, (void)K, (void)cmax; return 0; }
#endif

static void block_range(void *vc, long long b, long long e)
{
    const struct wino_ctx *c = vc;
    const struct md_dconv *g = c->g;
    int C = g->c, K = g->k, tb = c->tb;
    float *v = c->buf + (size_t)md_parallel_thread_id() * c->per_thread;
    float *m = v + (size_t)c->nxi * c->vplane;
    size_t uplane = c->uplane;
    for (long long task = b; task < e; task++) {
        long long blk = task / c->nkc, t0 = blk * tb;
        int nt = (int)(c->tiles - t0 < tb ? c->tiles - t0 : tb);
        int kb = (int)(task % c->nkc) * c->kch, ke = kb + c->kch < K ? kb + c->kch : K;
        in_block(c, t0, nt, v);
        for (int xi = 0; xi < c->nxi; xi++) {
            /* U[xi] is (C x K); this task's output channels [kb, ke) are its columns */
            const float *u = c->u + xi * uplane + (size_t)kb, *vx = v + (size_t)xi * c->vplane;
            float *mx = m + (size_t)xi * c->mplane + kb;
#if MK_ON
            if (c->mk) {
                mk_gemm(nt, ke - kb, C, vx, u, K, mx, K);
                continue;
            }
#endif
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nt, ke - kb, C, 1.0f, vx, C, u, K, 0.0f, mx, K);
        }
        out_block(c, t0, nt, m, kb, ke);
    }
}

/* Output channels per task (c->kch, in c->nkc chunks): all of them, unless
 * `tasks` (per chunk) are fewer than `want`: then chunks of at least
 * `least` channels (a multiple of 16) until there are. Chunks split no sum,
 * so a pool of many threads may ask for more (finer_for_threads). */
static void k_chunks(struct wino_ctx *c, long long tasks, int want, int least)
{
    int K = c->g->k;
    long long n = tasks >= want ? 1 : (want + tasks - 1) / tasks;
    if (n > K / least) n = K / least;
    if (n < 1) n = 1;
    c->kch = (int)((K + n - 1) / n + WV - 1) / WV * WV;
    c->nkc = (K + c->kch - 1) / c->kch;
}

/* A pool with more threads than the shape's split has tasks (a many-core CPU
 * on the deep layers' few tiles: resnet18_cifar's 8 x 8 layers at batch 64
 * gave 8 tasks to 16 threads) cuts finer: chunks of at least 64 output
 * channels, then blocks of down to 16 tiles, until there are two tasks a
 * thread. Neither splits a sum (each output is still one GEMM row over all
 * of C, in the same order), so the results stay the same for any thread
 * count (kernels_cpu/convolutions_identical_for_1_2_3_7_threads); pools with
 * enough tasks keep the shape's split as it was. */
static long long tasks_for_pool(void) { return 2LL * md_threadpool_size(); }

/* Half a block of tiles: a multiple of 8, at least 16. */
static int half_block(int tb)
{
    tb = tb / 2 / 8 * 8;
    return tb < 16 ? 16 : tb;
}

static void finer_for_threads(struct wino_ctx *c)
{
    long long want = tasks_for_pool();
    long long blocks = (c->tiles + c->tb - 1) / c->tb;
    if (blocks * c->nkc >= want) return;
    k_chunks(c, blocks, want > INT_MAX ? INT_MAX : (int)want, 64);
    while (blocks * c->nkc < want && c->tb > 16) {
        c->tb = half_block(c->tb);
        blocks = (c->tiles + c->tb - 1) / c->tb;
    }
}

/* Tiles per block, from the shape only. With OpenBLAS's GEMMs: V and M of a
 * block about 1 MiB together (nxi x TB x (C + K) floats: the L2 of a recent
 * core), at least 64 tiles (with fewer, the GEMMs of 512 channels spend
 * their time packing U) and at most 256. With the register-tile GEMMs below
 * (`own`: no packing, every block reads all of U or Z), V, M and U together
 * within 7/8 of 1 MiB, at least 16 tiles: at 72 tiles small_cnn's conv2 (V
 * and M 1 MiB, U 288 KiB) read M back from L3 in its output transform; 40
 * tiles were 10-20% faster each way on a Zen 4, and resnet18_cifar's layer1
 * 15% faster at 16 tiles than at 64 (docs/performance-cpu.md). Where U
 * alone outgrows that (128 and 256 channels), blocks of 16: no faster at 32,
 * slower from 64. */
#define OWN_L2_ROOM ((size_t)896 << 10)
static int block_tiles(int nxi, int C, int K, int own)
{
    size_t per_tile = sizeof(float) * (size_t)nxi * (size_t)(C + K);
    int tb;
    if (own) {
        size_t u = sizeof(float) * (size_t)nxi * (size_t)C * (size_t)K;
        tb = u + 16 * per_tile < OWN_L2_ROOM ? (int)((OWN_L2_ROOM - u) / per_tile) : 16;
    } else {
        tb = (int)(((size_t)1 << 20) / per_tile);
        if (tb < 64) tb = 64;
    }
    if (tb > 256) tb = 256;
    return tb / 8 * 8;
}

/* The tile size: F(4, 3) where the output is at least 8 x 8 and its sides
 * are whole tiles of 4 or large (at most a quarter of the tiles' outputs past
 * the edge: small_cnn's 14 x 14 in 16 x 16 was 5-20% faster each way than
 * F(2, 3)), F(2, 3) elsewhere: on 4 x 4 outputs of 512 channels F(4, 3)'s
 * filter (36 x C x K floats) outgrows the L3 and its one tile per image
 * leaves the GEMMs nothing to amortise it over. md_cpu_wino_set(2 or 4)
 * forces one. */
int md_cpu_wino_tile(const struct md_dconv *g)
{
    if (wino_enabled() == 2 || wino_enabled() == 4) return wino_enabled();
    long long covered = (long long)((g->p + 3) / 4 * 4) * ((g->q + 3) / 4 * 4);
    return g->p >= 8 && g->q >= 8 && covered * 3 <= (long long)g->p * g->q * 4 ? 4 : 2;
}

static int g_block_tiles = 0;

void md_cpu_wino_set_block_tiles(int tiles) { g_block_tiles = tiles > 0 ? (tiles + 7) / 8 * 8 : 0; }

/* The tile size and the tiles of c->g, and the blocks they go in (`own`:
 * the register-tile GEMMs will run them). */
static void tiling(struct wino_ctx *c, int own)
{
    const struct md_dconv *g = c->g;
    c->mt = md_cpu_wino_tile(g);
    c->nxi = (c->mt + 2) * (c->mt + 2);
    c->th = (g->p + c->mt - 1) / c->mt, c->tw = (g->q + c->mt - 1) / c->mt;
    c->tiles = (long long)g->n * c->th * c->tw;
    c->tb = g_block_tiles ? g_block_tiles : block_tiles(c->nxi, g->c, g->k, own);
}

/* Floats of one position's plane of `rows` rows of `ch` channels: whole
 * cache lines, and an odd number of them. The transforms touch the same
 * row of all nxi planes one after another (36 with F(4, 3)); with planes a
 * multiple of 2 or 4 KiB apart (small_cnn's conv2: 72 tiles of 64 channels
 * are 18 KiB) those rows fell in one or two of the L1's 64 sets of 8 lines,
 * and the output transform waited on L2 for most of its loads of M. An odd
 * number of lines apart, 64 consecutive planes start in 64 different sets.
 * Only addresses change: the sums are the same. */
static size_t plane_floats(long long rows, int ch)
{
    size_t lines = ((size_t)rows * (size_t)ch * sizeof(float) + 63) / 64;
    if (lines % 2 == 0) lines++;
    return lines * (64 / sizeof(float));
}

/* The planes of V and M (or D) for blocks of `rows` tiles, and of U (or Z). */
static void wino_planes(struct wino_ctx *c, long long rows)
{
    c->vplane = plane_floats(rows, c->g->c);
    c->mplane = plane_floats(rows, c->g->k);
    c->uplane = plane_floats(c->g->c, c->g->k);
}

md_status md_cpu_wino_fwd(const struct md_dconv *g, int flip, const float *x, const float *w, float *y, float beta)
{
    int C = g->c, K = g->k;
    struct wino_ctx c = {.g = g, .flip = flip, .x = x, .w = w, .y = y, .beta = beta, .mk = mk_fits(C, K, MK_FWD_C_MAX)};
    tiling(&c, c.mk);
    if (c.tiles < c.tb) c.tb = (int)((c.tiles + 7) / 8 * 8);
    /* at least 16 tasks where chunks of 128 output channels allow (each
     * chunk transforms its block's input again); finer for many threads */
    k_chunks(&c, (c.tiles + c.tb - 1) / c.tb, 16, 128);
    finer_for_threads(&c);
    long long blocks = (c.tiles + c.tb - 1) / c.tb;
    wino_planes(&c, c.tb);
    if (!flip) { /* w (K, 3, 3, C): U rows are output channels */
        c.outer = K, c.inner = C;
        c.so = (size_t)9 * C, c.sr = (size_t)3 * C, c.ss = (size_t)C;
    } else { /* w (C, 3, 3, K): U rows are input channels */
        c.outer = C, c.inner = K;
        c.so = (size_t)9 * K, c.sr = (size_t)3 * K, c.ss = (size_t)K;
    }
    c.u = md_cpu_scratch(CPU_SCR_WFLIP, sizeof(float) * (size_t)c.nxi * c.uplane);
    c.per_thread = (size_t)c.nxi * (c.vplane + c.mplane);
    c.buf = md_cpu_scratch(CPU_SCR_COL, sizeof(float) * c.per_thread * (size_t)md_threadpool_size());
    if (!c.u || !c.buf) return MD_ERR_OOM;
    if (flip) {
        md_parallel_for(c.outer, md_parallel_grain(c.outer, 4), filt_range, &c);
    } else {
        long long fb = (long long)((K + WV - 1) / WV) * ((C + WV - 1) / WV);
        md_parallel_for(fb, md_parallel_grain(fb, 4), filt_fwd_range, &c);
    }
    md_parallel_for(blocks * c.nkc, 1, block_range, &c);
    return MD_OK;
}

/* ---- backward-filter ------------------------------------------------------
 * dW = G^T [ sum over tiles of (A dy A^T) . (B^T d B) ] G: per position xi a
 * GEMM Z[xi] (K x C) = D[xi]^T (K x tiles) V[xi] (tiles x C) over every tile
 * of the batch, then the back-transform per (k, c). V and D are made for a
 * wave of tiles at a time (fixed by the shape, within WAVE_BYTES), in
 * parallel over blocks; the GEMMs run in parallel over xi, each summing its
 * waves in order: the result does not depend on the thread count. */

/* 32 MiB: on the 2-core Zen 4 waves of 8, 16, 32 and 128 MiB were within
 * the machine's noise of each other (kernels_bench); the smaller one needs
 * less memory and may stay in a large L3. */
#define WAVE_BYTES ((size_t)32 << 20)
static size_t g_wave_bytes = 0;

void md_cpu_wino_set_wave_bytes(size_t bytes) { g_wave_bytes = bytes; }

/* D[xi] rows for tiles [t0, t0 + nt) from dy (NHWC, K channels). */
AI void dy_tiles(int mt, const struct wino_ctx *c, long long t0, int nt, float *dd)
{
    const struct md_dconv *g = c->g;
    int K = g->k, nxi = (mt + 2) * (mt + 2);
    size_t plane = c->mplane;
    for (int ti = 0; ti < nt; ti++) {
        long long tile = t0 + ti;
        int tw = (int)(tile % c->tw), th = (int)(tile / c->tw % c->th), n = (int)(tile / ((long long)c->tw * c->th));
        const float *py[16];
        for (int a = 0; a < mt; a++)
            for (int b = 0; b < mt; b++) {
                int p = mt * th + a, q = mt * tw + b;
                py[a * mt + b] = p < g->p && q < g->q ? c->dy + (((size_t)n * g->p + p) * g->q + q) * K : NULL;
            }
        float *dt = dd + (size_t)ti * K;
        for (int k0 = 0; k0 < K; k0 += WV) {
            int nk = K - k0 < WV ? K - k0 : WV;
            wvec yv[16], o[36];
            for (int i = 0; i < mt * mt; i++) yv[i] = py[i] ? wload_n(py[i] + k0, nk) : WZERO;
            dy_xform(mt, yv, o);
            for (int xi = 0; xi < nxi; xi++) wstore_n(dt + xi * plane + k0, &o[xi], nk);
        }
    }
}

/* dw (K, 3, 3, C) rows [b, e) from Z, with beta. */
AI void bk_rows(int mt, const struct wino_ctx *c, long long b, long long e)
{
    int C = c->g->c, nxi = (mt + 2) * (mt + 2);
    size_t plane = c->uplane;
    for (long long k = b; k < e; k++)
        for (int c0 = 0; c0 < C; c0 += WV) {
            int nc = C - c0 < WV ? C - c0 : WV;
            wvec z[36], w[9];
            const float *u = c->u + (size_t)k * C + c0;
            for (int xi = 0; xi < nxi; xi++) {
                z[xi] = wload_n(u + xi * plane, nc);
                for (int p = 1; p < c->uparts; p++)
                    z[xi] = z[xi] + wload_n(u + p * c->uparts_stride + xi * plane, nc);
            }
            bk_xform(mt, z, w);
            for (int rs = 0; rs < 9; rs++) wstore_beta(c->y + ((size_t)k * 9 + rs) * C + c0, &w[rs], nc, c->beta);
        }
}

struct wave_ctx {
    const struct wino_ctx *c;
    long long w0; /* the wave's first tile */
    int nw;       /* its tiles */
    float *v, *d; /* V and D of the wave (planes of the wave's tiles) */
    int first;    /* the first wave: the GEMMs start from zero */
};

WINO_CLONES static void wave_prep_range(void *vc, long long b, long long e)
{
    const struct wave_ctx *w = vc;
    const struct wino_ctx *c = w->c;
    for (long long blk = b; blk < e; blk++) {
        long long r0 = blk * c->tb;
        int nt = (int)(w->nw - r0 < c->tb ? w->nw - r0 : c->tb);
        if (c->mt == 2) {
            in_tiles(2, c, w->w0 + r0, nt, w->v + (size_t)r0 * c->g->c);
            dy_tiles(2, c, w->w0 + r0, nt, w->d + (size_t)r0 * c->g->k);
        } else {
            in_tiles(4, c, w->w0 + r0, nt, w->v + (size_t)r0 * c->g->c);
            dy_tiles(4, c, w->w0 + r0, nt, w->d + (size_t)r0 * c->g->k);
        }
    }
}

static void wave_gemm_range(void *vc, long long b, long long e)
{
    const struct wave_ctx *w = vc;
    const struct wino_ctx *c = w->c;
    int C = c->g->c, K = c->g->k;
    for (long long task = b; task < e; task++) {
        long long xi = task / c->nkc;
        int kb = (int)(task % c->nkc) * c->kch, ke = kb + c->kch < K ? kb + c->kch : K;
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, ke - kb, C, w->nw, 1.0f,
                    w->d + (size_t)xi * c->mplane + kb, K, w->v + (size_t)xi * c->vplane, C,
                    w->first ? 0.0f : 1.0f, c->u + (size_t)xi * c->uplane + (size_t)kb * C, C);
    }
}

WINO_CLONES static void bk_range(void *vc, long long b, long long e)
{
    const struct wino_ctx *c = vc;
    if (c->mt == 2) bk_rows(2, c, b, e);
    else bk_rows(4, c, b, e);
}

/* ---- backward-filter of small channel counts ------------------------------
 * With C <= 64 the waves' GEMMs (K x C, summing over every tile) are short
 * and wide and V and D go through memory (small_cnn's conv2: 38 MiB a
 * batch of 128): the Winograd filter gradient was slower than the direct
 * kernel. Here a task takes a fixed run of blocks (a part), makes V and D of
 * one block in the thread's scratch (about 1 MiB: the L2) and adds
 * D[xi]^T V[xi] into the part's own Z in AVX-512 register tiles of R rows
 * (output channels) x NV vectors of 16 input channels, summing over the
 * block's tiles in registers. The parts (at most FZ_PARTS and as many Z as
 * fit in 32 MiB, from the shape only) are summed in order by the inverse
 * transform as it reads them (no pass of its own over Z): the result does not
 * depend on the thread count. */
#define FZ_PARTS 16

#if MK_ON
/* Z (R rows, C columns) (+)= D^T V over nt tiles: D (nt x K) from its column 0, V (nt x C) */
AI MK_T void fz_tile(int R, int NV, int nt, int K, int C, const float *d, const float *v, float *z, int first)
{
    rt_tile(R, NV, nt, d, 1, (size_t)K, v, (size_t)C, z, (size_t)C, !first);
}

/* Z (K x C) (+)= D^T V; C a multiple of 16 up to 64, K of 16 */
static MK_T void fz_gemm(int nt, int K, int C, const float *d, const float *v, float *z, int first)
{
    switch (C / 16) {
    case 1:
        for (int k = 0; k < K; k += 16) fz_tile(16, 1, nt, K, C, d + k, v, z + (size_t)k * C, first);
        break;
    case 2:
        for (int k = 0; k < K; k += 8) fz_tile(8, 2, nt, K, C, d + k, v, z + (size_t)k * C, first);
        break;
    case 3:
        for (int k = 0; k < K; k += 8) fz_tile(8, 3, nt, K, C, d + k, v, z + (size_t)k * C, first);
        break;
    default:
        for (int k = 0; k < K; k += 4) fz_tile(4, 4, nt, K, C, d + k, v, z + (size_t)k * C, first);
        break;
    }
}
#endif

/* the forward's register-tile rule, and whole vectors of input channels */
static int fz_fits(const struct md_dconv *g) { return g->c % 16 == 0 && mk_fits(g->c, g->k, MK_FILTER_C_MAX); }

WINO_CLONES static void fz_prep(const struct wino_ctx *c, long long t0, int nt, float *v, float *d)
{
    if (c->mt == 2) {
        in_tiles(2, c, t0, nt, v);
        dy_tiles(2, c, t0, nt, d);
    } else {
        in_tiles(4, c, t0, nt, v);
        dy_tiles(4, c, t0, nt, d);
    }
}

struct fz_ctx {
    const struct wino_ctx *c;
    float *z; /* the parts' Z, nxi x K x C floats each */
    int parts;
    long long blocks;
};

static void fz_part_range(void *vc, long long b, long long e)
{
#if MK_ON
    const struct fz_ctx *f = vc;
    const struct wino_ctx *c = f->c;
    int C = c->g->c, K = c->g->k, tb = c->tb;
    size_t zsize = c->uparts_stride;
    float *v = c->buf + (size_t)md_parallel_thread_id() * c->per_thread, *d = v + (size_t)c->nxi * c->vplane;
    for (long long part = b; part < e; part++) {
        float *z = f->z + (size_t)part * zsize;
        long long b0 = part * f->blocks / f->parts, b1 = (part + 1) * f->blocks / f->parts;
        for (long long blk = b0; blk < b1; blk++) {
            long long t0 = blk * tb;
            int nt = (int)(c->tiles - t0 < tb ? c->tiles - t0 : tb);
            fz_prep(c, t0, nt, v, d);
            for (int xi = 0; xi < c->nxi; xi++)
                fz_gemm(nt, K, C, d + (size_t)xi * c->mplane, v + (size_t)xi * c->vplane, z + (size_t)xi * c->uplane,
                        blk == b0);
        }
    }
#else
    (void)vc, (void)b, (void)e;
#endif
}

static md_status wino_filter_fused(struct wino_ctx *c)
{
    int K = c->g->k;
    if (c->tiles < c->tb) c->tb = (int)((c->tiles + 7) / 8 * 8);
    wino_planes(c, c->tb);
    c->uparts_stride = (size_t)c->nxi * c->uplane; /* one part's Z */
    struct fz_ctx f = {.c = c, .blocks = (c->tiles + c->tb - 1) / c->tb};
    /* at most FZ_PARTS, and the parts' Z within the filter waves' bytes (32 MiB) */
    size_t zbytes = sizeof(float) * c->uparts_stride;
    long long fit = (long long)((g_wave_bytes ? g_wave_bytes : WAVE_BYTES) / zbytes);
    f.parts = f.blocks < FZ_PARTS ? (int)f.blocks : FZ_PARTS;
    if (fit < f.parts) f.parts = fit > 1 ? (int)fit : 1;
    c->per_thread = (size_t)c->nxi * (c->vplane + c->mplane);
    c->buf = md_cpu_scratch(CPU_SCR_COL, sizeof(float) * c->per_thread * (size_t)md_threadpool_size());
    f.z = md_cpu_scratch(CPU_SCR_WFLIP, zbytes * (size_t)f.parts);
    if (!c->buf || !f.z) return MD_ERR_OOM;
    md_parallel_for(f.parts, 1, fz_part_range, &f);
    /* the parts are summed in order as the inverse transform reads them */
    c->u = f.z;
    c->uparts = f.parts;
    md_parallel_for(K, md_parallel_grain(K, 4), bk_range, c);
    return MD_OK;
}

int md_cpu_wino_filter_ok(const struct md_dconv *g, int nhwc)
{
    return md_cpu_wino_ok(g, nhwc) && ((g->c >= 64 && g->k >= 64) || fz_fits(g));
}

md_status md_cpu_wino_filter(const struct md_dconv *g, const float *x, const float *dy, float *dw, float beta)
{
    int C = g->c, K = g->k;
    struct wino_ctx c = {.g = g, .x = x, .dy = dy, .y = dw, .beta = beta};
    int fused = fz_fits(g);
    tiling(&c, fused);
    if (fused) return wino_filter_fused(&c);
    size_t per_tile = sizeof(float) * (size_t)c.nxi * ((size_t)C + K);
    long long wave = (long long)((g_wave_bytes ? g_wave_bytes : WAVE_BYTES) / per_tile) / c.tb * c.tb;
    if (wave < c.tb) wave = c.tb;
    if (wave > c.tiles) wave = c.tiles;
    wino_planes(&c, wave);
    float *buf = md_cpu_scratch(CPU_SCR_COL, sizeof(float) * (size_t)c.nxi * (c.vplane + c.mplane));
    c.u = md_cpu_scratch(CPU_SCR_WFLIP, sizeof(float) * (size_t)c.nxi * c.uplane);
    if (!buf || !c.u) return MD_ERR_OOM;
    /* GEMM tasks: the positions, times chunks of at least 64 output
     * channels up to 48 tasks */
    k_chunks(&c, c.nxi, 48, 64);
    /* the transforms' tasks are blocks of tiles: finer where a many-core pool
     * would idle on a few of them (each tile is transformed alone, so the
     * blocks split no sum) */
    while ((wave + c.tb - 1) / c.tb < tasks_for_pool() && c.tb > 16) c.tb = half_block(c.tb);
    struct wave_ctx w = {.c = &c, .v = buf, .d = buf + (size_t)c.nxi * c.vplane, .first = 1};
    for (w.w0 = 0; w.w0 < c.tiles; w.w0 += wave, w.first = 0) {
        w.nw = (int)(c.tiles - w.w0 < wave ? c.tiles - w.w0 : wave);
        md_parallel_for((w.nw + c.tb - 1) / c.tb, 1, wave_prep_range, &w);
        md_parallel_for((long long)c.nxi * c.nkc, 1, wave_gemm_range, &w);
    }
    md_parallel_for(K, md_parallel_grain(K, 4), bk_range, &c);
    return MD_OK;
}
