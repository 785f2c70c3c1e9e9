/* cpu_pool.c - max/average pooling and global average pooling on the CPU.
 * fp32 NHWC: one task per image, channels innermost in vectors (cpu_vec.h);
 * fp32 NCHW: one task per (image, channel) plane, a row's outputs in vectors
 * where their windows fit; fp16/bf16: one task per (image, channel) pair.
 * Window clipping, first-maximum routing, NaN (never replaces a maximum)
 * and empty windows as the reference (ref_kernels.c). */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/cpu_vec.h"
#include "backend/ref/ref_math.h"
#include "core/mem.h"

#if defined(__GNUC__)
#define ALWAYS_INLINE __attribute__((always_inline)) inline
#else
#define ALWAYS_INLINE inline
#endif

static ALWAYS_INLINE float ldf(const void *p, md_dtype t, size_t i) { return md_load_f(p, t, i); }

static md_status pool_check(const char *op, const struct md_pool2d_args *a)
{
    if (!md_cpu_float_type(a->dtype))
        return md_errf(MD_ERR_UNSUPPORTED, "cpu %s: dtype %s is not supported", op, md_dtype_name(a->dtype));
    if (a->p != md_conv_out(a->h, a->kh, a->stride_h, a->pad_h, 1) ||
        a->q != md_conv_out(a->w, a->kw, a->stride_w, a->pad_w, 1) || a->p <= 0 || a->q <= 0)
        return md_errf(MD_ERR_INTERNAL, "cpu %s: output %dx%d does not match input %dx%d", op, a->p, a->q, a->h, a->w);
    return MD_OK;
}

struct win { int h0, h1, w0, w1; float div; };

static inline struct win window(const struct md_pool2d_args *a, int pi, int qi)
{
    int hs = pi * a->stride_h - a->pad_h, ws = qi * a->stride_w - a->pad_w;
    struct win w = {hs < 0 ? 0 : hs, hs + a->kh > a->h ? a->h : hs + a->kh, ws < 0 ? 0 : ws,
                    ws + a->kw > a->w ? a->w : ws + a->kw, 0.0f};
    int cnt = (w.h1 - w.h0) * (w.w1 - w.w0);
    w.div = a->count_include_pad ? (float)(a->kh * a->kw) : (float)(cnt > 0 ? cnt : 0);
    return w;
}

/* ---- one (image, channel) pair, both layouts: strides make the difference ---- */

/* Element (i, j) of the pair's h x w plane sits at base + i * sh + j * sw. */
struct plane { size_t base, sh, sw; };

static ALWAYS_INLINE struct plane plane_of(const struct md_pool2d_args *a, md_layout layout, int ni, int ci, int h,
                                           int w)
{
    if (layout == MD_NHWC) return (struct plane){(size_t)ni * h * w * a->c + ci, (size_t)w * a->c, (size_t)a->c};
    return (struct plane){((size_t)ni * a->c + ci) * h * w, (size_t)w, 1};
}

static ALWAYS_INLINE void pool_fwd_pair(const struct md_pool2d_args *a, int ni, int ci, md_dtype t, md_layout layout)
{
    struct plane X = plane_of(a, layout, ni, ci, a->h, a->w), Y = plane_of(a, layout, ni, ci, a->p, a->q);
    for (int pi = 0; pi < a->p; pi++)
        for (int qi = 0; qi < a->q; qi++) {
            struct win w = window(a, pi, qi);
            float v = 0.0f;
            if (a->kind == MD_POOL_MAX) {
                int first = 1;
                for (int hi = w.h0; hi < w.h1; hi++)
                    for (int wi = w.w0; wi < w.w1; wi++) {
                        float x = ldf(a->x, t, X.base + hi * X.sh + wi * X.sw);
                        if (first || x > v) v = x, first = 0;
                    }
            } else {
                float s = 0.0f;
                for (int hi = w.h0; hi < w.h1; hi++)
                    for (int wi = w.w0; wi < w.w1; wi++) s += ldf(a->x, t, X.base + hi * X.sh + wi * X.sw);
                v = w.div > 0.0f ? s / w.div : 0.0f;
            }
            size_t o = Y.base + pi * Y.sh + qi * Y.sw;
            if (a->beta != 0.0f) v += a->beta * ldf(a->y_out, t, o);
            md_store_f(a->y_out, t, o, v);
        }
}

/* dx of one (image, channel) pair: beta-scaled, then every output's share added.
 * The pair's dx elements belong to this task only. */
static ALWAYS_INLINE void pool_bwd_pair(const struct md_pool2d_args *a, int ni, int ci, md_dtype t, md_layout layout)
{
    struct plane X = plane_of(a, layout, ni, ci, a->h, a->w), Y = plane_of(a, layout, ni, ci, a->p, a->q);
    if (a->beta != 1.0f) /* times 1: unchanged */
        for (int hi = 0; hi < a->h; hi++)
            for (int wi = 0; wi < a->w; wi++) {
                size_t o = X.base + hi * X.sh + wi * X.sw;
                md_store_f(a->dx, t, o, a->beta != 0.0f ? a->beta * ldf(a->dx, t, o) : 0.0f);
            }
    for (int pi = 0; pi < a->p; pi++)
        for (int qi = 0; qi < a->q; qi++) {
            struct win w = window(a, pi, qi);
            float d = ldf(a->dy, t, Y.base + pi * Y.sh + qi * Y.sw);
            if (a->kind == MD_POOL_MAX) {
                long long best = -1;
                float bv = 0.0f;
                for (int hi = w.h0; hi < w.h1; hi++)
                    for (int wi = w.w0; wi < w.w1; wi++) {
                        size_t o = X.base + hi * X.sh + wi * X.sw;
                        float x = ldf(a->x, t, o);
                        if (best < 0 || x > bv) best = (long long)o, bv = x;
                    }
                if (best >= 0) md_store_f(a->dx, t, (size_t)best, ldf(a->dx, t, (size_t)best) + d);
            } else if (w.div > 0.0f) {
                float share = d / w.div;
                for (int hi = w.h0; hi < w.h1; hi++)
                    for (int wi = w.w0; wi < w.w1; wi++) {
                        size_t o = X.base + hi * X.sh + wi * X.sw;
                        md_store_f(a->dx, t, o, ldf(a->dx, t, o) + share);
                    }
            }
        }
}

/* ---- fp32 NHWC: one image per task, channels innermost (contiguous) ----
 * Channels go in blocks of PU vectors (16 floats with SSE2 or NEON) held in
 * registers across the window, then single vectors, then a scalar tail; each
 * channel gets the same operations in the same order in all three. */

enum { PU = 4 };

/* Output position yo's channels [c, c + U * MD_VW): the window's maximum (a
 * NaN never replaces: the first element's NaN stays, later ones are
 * skipped) or its sum over the divisor, + beta y. An empty window gives 0. */
static ALWAYS_INLINE void fwd_vecs(const struct md_pool2d_args *a, const float *xi, float *yo, struct win w, int c,
                                   int U)
{
    int C = a->c, W = a->w;
    md_vf acc[PU];
    if (a->kind == MD_POOL_MAX) {
        if (w.h0 >= w.h1 || w.w0 >= w.w1) {
            for (int u = 0; u < U; u++) acc[u] = md_vsplat(0.0f);
        } else {
            const float *x0 = xi + ((size_t)w.h0 * W + w.w0) * C + c;
            for (int u = 0; u < U; u++) acc[u] = md_vload(x0 + u * MD_VW);
            for (int hi = w.h0; hi < w.h1; hi++)
                for (int wi = hi == w.h0 ? w.w0 + 1 : w.w0; wi < w.w1; wi++) {
                    const float *xr = xi + ((size_t)hi * W + wi) * C + c;
                    for (int u = 0; u < U; u++) {
                        md_vf v = md_vload(xr + u * MD_VW);
                        acc[u] = md_vsel(v > acc[u], v, acc[u]);
                    }
                }
        }
    } else {
        for (int u = 0; u < U; u++) acc[u] = md_vsplat(0.0f);
        for (int hi = w.h0; hi < w.h1; hi++)
            for (int wi = w.w0; wi < w.w1; wi++) {
                const float *xr = xi + ((size_t)hi * W + wi) * C + c;
                for (int u = 0; u < U; u++) acc[u] += md_vload(xr + u * MD_VW);
            }
        for (int u = 0; u < U; u++) acc[u] = w.div > 0.0f ? acc[u] / md_vsplat(w.div) : md_vsplat(0.0f);
    }
    float *o = yo + c;
    for (int u = 0; u < U; u++) {
        if (a->beta != 0.0f) acc[u] = acc[u] + a->beta * md_vload(o + u * MD_VW);
        md_vstore(o + u * MD_VW, acc[u]);
    }
}

/* fwd_vecs of one channel, in scalars */
static void fwd_scalar(const struct md_pool2d_args *a, const float *xi, float *yo, struct win w, int c)
{
    int C = a->c, W = a->w;
    float acc = 0.0f;
    if (a->kind == MD_POOL_MAX) {
        if (w.h0 < w.h1 && w.w0 < w.w1) {
            acc = xi[((size_t)w.h0 * W + w.w0) * C + c];
            for (int hi = w.h0; hi < w.h1; hi++)
                for (int wi = hi == w.h0 ? w.w0 + 1 : w.w0; wi < w.w1; wi++) {
                    float v = xi[((size_t)hi * W + wi) * C + c];
                    acc = v > acc ? v : acc;
                }
        }
    } else {
        for (int hi = w.h0; hi < w.h1; hi++)
            for (int wi = w.w0; wi < w.w1; wi++) acc += xi[((size_t)hi * W + wi) * C + c];
        acc = w.div > 0.0f ? acc / w.div : 0.0f;
    }
    if (a->beta != 0.0f) acc = acc + a->beta * yo[c];
    yo[c] = acc;
}

static void f32_nhwc_fwd_image(const struct md_pool2d_args *a, int ni)
{
    int C = a->c;
    const float *xi = (const float *)a->x + (size_t)ni * a->h * a->w * C;
    float *yi = (float *)a->y_out + (size_t)ni * a->p * a->q * C;
    for (int pi = 0; pi < a->p; pi++)
        for (int qi = 0; qi < a->q; qi++) {
            struct win w = window(a, pi, qi);
            float *yo = yi + ((size_t)pi * a->q + qi) * C;
            int c = 0;
            for (; c + PU * MD_VW <= C; c += PU * MD_VW) fwd_vecs(a, xi, yo, w, c, PU);
            for (; c + MD_VW <= C; c += MD_VW) fwd_vecs(a, xi, yo, w, c, 1);
            for (; c < C; c++) fwd_scalar(a, xi, yo, w, c);
        }
}

/* o[0, C) *= beta (0: zeros) */
static void scale_row(float *o, int C, float beta)
{
    if (beta == 0.0f) {
        memset(o, 0, sizeof(float) * (size_t)C);
        return;
    }
    int c = 0;
    for (; c + MD_VW <= C; c += MD_VW) md_vstore(o + c, md_vload(o + c) * beta);
    for (; c < C; c++) o[c] *= beta;
}

/* One window's channels [c, c + U * MD_VW) of a disjoint max backward: the
 * maximum over the K positions at offsets off[] (strictly greater replaces:
 * a NaN never does), then dy to the first position holding it (to the
 * first position when it is NaN), 0 to the others, + beta dx. */
static ALWAYS_INLINE void disjoint_vecs(const float *xi, float *dxi, const float *d, const size_t *off, int K, int c,
                                        int U, float beta)
{
    md_vf bv[PU], rem[PU];
    md_vi nan[PU];
    for (int u = 0; u < U; u++) bv[u] = md_vload(xi + off[0] + c + u * MD_VW);
    for (int k = 1; k < K; k++)
        for (int u = 0; u < U; u++) {
            md_vf v = md_vload(xi + off[k] + c + u * MD_VW);
            bv[u] = md_vsel(v > bv[u], v, bv[u]);
        }
    for (int u = 0; u < U; u++) rem[u] = md_vload(d + c + u * MD_VW), nan[u] = bv[u] != bv[u];
    for (int k = 0; k < K; k++)
        for (int u = 0; u < U; u++) {
            md_vi hit = md_vload(xi + off[k] + c + u * MD_VW) == bv[u];
            if (k == 0) hit = hit | nan[u];
            md_vf g = md_vand(hit, rem[u]);
            rem[u] = md_vandnot(hit, rem[u]);
            float *o = dxi + off[k] + c + u * MD_VW;
            md_vstore(o, beta == 0.0f ? g : beta * md_vload(o) + g);
        }
}

/* disjoint_vecs of one channel, in scalars */
static void disjoint_scalar(const float *xi, float *dxi, const float *d, const size_t *off, int K, int c, float beta)
{
    float bv = xi[off[0] + c], rem = d[c];
    for (int k = 1; k < K; k++) {
        float v = xi[off[k] + c];
        bv = v > bv ? v : bv;
    }
    for (int k = 0; k < K; k++) {
        int hit = xi[off[k] + c] == bv || (k == 0 && bv != bv);
        float g = hit ? rem : 0.0f, *o = dxi + off[k] + c;
        rem = hit ? 0.0f : rem;
        *o = beta == 0.0f ? g : beta * *o + g;
    }
}

/* Max pooling whose windows do not overlap (stride >= kernel, as 2x2/2):
 * each input lies in at most one window, so dx is written once, position by
 * position: the window's dy where its first maximum sits, 0 elsewhere (plus
 * beta dx) - no zeroing pass, no scatter. The inputs no window covers (rows
 * or columns past the last window) get beta dx. Same results as the general
 * loop below. Returns 0 where it does not apply (more than 4096 rows or
 * columns, windows of more than 64 elements). */
static int f32_nhwc_max_bwd_disjoint(const struct md_pool2d_args *a, int ni)
{
    if (a->h > 4096 || a->w > 4096 || a->kh * a->kw > 64) return 0; /* checked before any write */
    int C = a->c;
    size_t hwc = (size_t)a->h * a->w * C;
    const float *xi = (const float *)a->x + (size_t)ni * hwc;
    const float *dyi = (const float *)a->dy + (size_t)ni * a->p * a->q * C;
    float *dxi = (float *)a->dx + (size_t)ni * hwc;
    const float beta = a->beta;
    unsigned char rows[4096], cols[4096];
    memset(rows, 0, (size_t)a->h);
    memset(cols, 0, (size_t)a->w);
    for (int pi = 0; pi < a->p; pi++) {
        struct win w = window(a, pi, 0);
        for (int hi = w.h0; hi < w.h1; hi++) rows[hi] = 1;
    }
    for (int qi = 0; qi < a->q; qi++) {
        struct win w = window(a, 0, qi);
        for (int wi = w.w0; wi < w.w1; wi++) cols[wi] = 1;
    }
    for (int hi = 0; hi < a->h; hi++)
        for (int wi = 0; wi < a->w; wi++)
            if (!rows[hi] || !cols[wi]) scale_row(dxi + ((size_t)hi * a->w + wi) * C, C, beta);
    size_t off[64];
    for (int pi = 0; pi < a->p; pi++)
        for (int qi = 0; qi < a->q; qi++) {
            struct win w = window(a, pi, qi);
            int K = 0;
            for (int hi = w.h0; hi < w.h1; hi++)
                for (int wi = w.w0; wi < w.w1; wi++) off[K++] = ((size_t)hi * a->w + wi) * C;
            if (K == 0) continue;
            const float *d = dyi + ((size_t)pi * a->q + qi) * C;
            int c = 0;
            for (; c + PU * MD_VW <= C; c += PU * MD_VW) disjoint_vecs(xi, dxi, d, off, K, c, PU, beta);
            for (; c + MD_VW <= C; c += MD_VW) disjoint_vecs(xi, dxi, d, off, K, c, 1, beta);
            for (; c < C; c++) disjoint_scalar(xi, dxi, d, off, K, c, beta);
        }
    return 1;
}

/* Overlapping max windows: the first maximum's position of channels
 * [c, c + U * MD_VW) (strictly greater replaces), then dy added there. */
static ALWAYS_INLINE void argmax_vecs(const struct md_pool2d_args *a, const float *xi, float *dxi, const float *d,
                                      struct win w, int c, int U)
{
    int C = a->c, W = a->w, p0 = w.h0 * W + w.w0;
    md_vf bv[PU];
    md_vi best[PU];
    for (int u = 0; u < U; u++) bv[u] = md_vload(xi + (size_t)p0 * C + c + u * MD_VW), best[u] = md_vspliti(p0);
    for (int hi = w.h0; hi < w.h1; hi++)
        for (int wi = hi == w.h0 ? w.w0 + 1 : w.w0; wi < w.w1; wi++) {
            int pos = hi * W + wi;
            for (int u = 0; u < U; u++) {
                md_vf v = md_vload(xi + (size_t)pos * C + c + u * MD_VW);
                md_vi m = v > bv[u];
                bv[u] = md_vsel(m, v, bv[u]);
                best[u] = md_vseli(m, md_vspliti(pos), best[u]);
            }
        }
    for (int u = 0; u < U; u++) {
        int32_t b[MD_VW];
        memcpy(b, &best[u], sizeof b);
        for (int l = 0; l < MD_VW; l++) {
            int cl = c + u * MD_VW + l;
            dxi[(size_t)b[l] * C + cl] += d[cl];
        }
    }
}

static void argmax_scalar(const struct md_pool2d_args *a, const float *xi, float *dxi, const float *d, struct win w,
                          int c)
{
    int C = a->c, W = a->w, best = w.h0 * W + w.w0;
    float bv = xi[(size_t)best * C + c];
    for (int hi = w.h0; hi < w.h1; hi++)
        for (int wi = hi == w.h0 ? w.w0 + 1 : w.w0; wi < w.w1; wi++) {
            int pos = hi * W + wi;
            float v = xi[(size_t)pos * C + c];
            if (v > bv) bv = v, best = pos;
        }
    dxi[(size_t)best * C + c] += d[c];
}

/* dx of one image: beta-scaled, then every output's share added in output
 * order (as the reference). Max routes to the first maximum of the window. */
static void f32_nhwc_bwd_image(const struct md_pool2d_args *a, int ni)
{
    if (a->kind == MD_POOL_MAX && a->stride_h >= a->kh && a->stride_w >= a->kw && f32_nhwc_max_bwd_disjoint(a, ni))
        return;
    int C = a->c;
    size_t hw = (size_t)a->h * a->w;
    const float *xi = (const float *)a->x + (size_t)ni * hw * C;
    const float *dyi = (const float *)a->dy + (size_t)ni * a->p * a->q * C;
    float *dxi = (float *)a->dx + (size_t)ni * hw * C;
    if (a->beta != 1.0f)
        for (size_t i = 0; i < hw; i++) scale_row(dxi + i * C, C, a->beta);
    for (int pi = 0; pi < a->p; pi++)
        for (int qi = 0; qi < a->q; qi++) {
            struct win w = window(a, pi, qi);
            const float *d = dyi + ((size_t)pi * a->q + qi) * C;
            if (a->kind != MD_POOL_MAX) {
                if (w.div <= 0.0f) continue;
                for (int hi = w.h0; hi < w.h1; hi++)
                    for (int wi = w.w0; wi < w.w1; wi++) {
                        float *o = dxi + ((size_t)hi * a->w + wi) * C;
                        int c = 0;
                        for (; c + MD_VW <= C; c += MD_VW)
                            md_vstore(o + c, md_vload(o + c) + md_vload(d + c) / md_vsplat(w.div));
                        for (; c < C; c++) o[c] += d[c] / w.div;
                    }
                continue;
            }
            if (w.h0 >= w.h1 || w.w0 >= w.w1) continue;
            int c = 0;
            for (; c + PU * MD_VW <= C; c += PU * MD_VW) argmax_vecs(a, xi, dxi, d, w, c, PU);
            for (; c + MD_VW <= C; c += MD_VW) argmax_vecs(a, xi, dxi, d, w, c, 1);
            for (; c < C; c++) argmax_scalar(a, xi, dxi, d, w, c);
        }
}

/* ---- fp32 NCHW: one (image, channel) plane per task, without the pair
 * functions' per-element type and layout switches and branches. Windows
 * wholly inside a row go MD_VW outputs at a time (lane = output; forward:
 * stride 1 or 2, backward: disjoint max windows 2 wide of stride 2, with
 * deinterleaved loads), each lane scanning its window in the same row-major
 * order as the scalar loop; the rest one by one. The
 * maximum and its position are selects (the first maximum in row-major
 * order, a NaN never replacing), and disjoint max windows' dx is written
 * once. */

/* The window's first maximum: its value and position (row-major), as the
 * pair function's scan. The window is not empty. */
static ALWAYS_INLINE float plane_argmax(const float *x, int W, struct win w, int *best)
{
    int b = w.h0 * W + w.w0;
    float bv = x[b];
    for (int hi = w.h0; hi < w.h1; hi++)
        for (int wi = hi == w.h0 ? w.w0 + 1 : w.w0; wi < w.w1; wi++) {
            int pos = hi * W + wi;
            float v = x[pos];
            b = v > bv ? pos : b;
            bv = v > bv ? v : bv;
        }
    *best = b;
    return bv;
}

/* output (pi, qi) of the plane */
static ALWAYS_INLINE void plane_fwd_one(const struct md_pool2d_args *a, const float *x, float *y, int pi, int qi)
{
    struct win w = window(a, pi, qi);
    int W = a->w;
    float v = 0.0f;
    if (a->kind == MD_POOL_MAX) {
        int best;
        if (w.h0 < w.h1 && w.w0 < w.w1) v = plane_argmax(x, W, w, &best);
    } else {
        for (int hi = w.h0; hi < w.h1; hi++)
            for (int wi = w.w0; wi < w.w1; wi++) v += x[hi * W + wi];
        v = w.div > 0.0f ? v / w.div : 0.0f;
    }
    float *o = y + (size_t)pi * a->q + qi;
    if (a->beta != 0.0f) v += a->beta * *o;
    *o = v;
}

#if MD_VW > 1
/* Element kx of row xr's windows of outputs [q, q + MD_VW), the first
 * starting at ws, stride s (1, 2); reads xr[ws + kx, ws + kx + MD_VW) (s 1)
 * or xr[ws + kx - kx % 2, + 2 * MD_VW) (s 2). */
static ALWAYS_INLINE md_vf window_lanes(const float *xr, int s, int ws, int kx)
{
    if (s == 1) return md_vload(xr + ws + kx);
    return kx % 2 ? md_vload_odd(xr + ws + kx - 1) : md_vload_even(xr + ws + kx);
}

/* Outputs [qi, qi + MD_VW) of row pi, windows inside the row (stride s). */
static ALWAYS_INLINE void plane_fwd_vec(const struct md_pool2d_args *a, const float *x, float *y, int pi, int qi, int s)
{
    struct win w = window(a, pi, qi);
    int W = a->w, kw = a->kw, ws = w.w0;
    md_vf acc;
    if (a->kind == MD_POOL_MAX) {
        acc = window_lanes(x + (size_t)w.h0 * W, s, ws, 0);
        for (int hi = w.h0; hi < w.h1; hi++)
            for (int kx = hi == w.h0 ? 1 : 0; kx < kw; kx++) {
                md_vf v = window_lanes(x + (size_t)hi * W, s, ws, kx);
                acc = md_vsel(v > acc, v, acc);
            }
    } else {
        acc = md_vsplat(0.0f);
        for (int hi = w.h0; hi < w.h1; hi++)
            for (int kx = 0; kx < kw; kx++) acc += window_lanes(x + (size_t)hi * W, s, ws, kx);
        acc = w.div > 0.0f ? acc / md_vsplat(w.div) : md_vsplat(0.0f);
    }
    float *o = y + (size_t)pi * a->q + qi;
    if (a->beta != 0.0f) acc += a->beta * md_vload(o);
    md_vstore(o, acc);
}

/* Whether outputs [qi, qi + MD_VW) go as vectors: their windows lie inside
 * the row and window_lanes' loads stay in it (stride s). */
static inline int lanes_fit(const struct md_pool2d_args *a, int qi, int s)
{
    int ws = qi * s - a->pad_w, kl = a->kw - 1;
    return qi + MD_VW <= a->q && ws >= 0 && (s == 1 ? ws + kl + MD_VW : ws + kl - kl % 2 + 2 * MD_VW) <= a->w;
}
#endif

static void f32_nchw_fwd_plane(const struct md_pool2d_args *a, const float *x, float *y)
{
    for (int pi = 0; pi < a->p; pi++) {
        int qi = 0;
#if MD_VW > 1
        struct win w = window(a, pi, 0);
        int s = a->stride_w;
        if ((s == 1 || s == 2) && w.h0 < w.h1) {
            for (; qi < a->q && qi * s < a->pad_w; qi++) plane_fwd_one(a, x, y, pi, qi);
            if (s == 1)
                for (; lanes_fit(a, qi, 1); qi += MD_VW) plane_fwd_vec(a, x, y, pi, qi, 1);
            else
                for (; lanes_fit(a, qi, 2); qi += MD_VW) plane_fwd_vec(a, x, y, pi, qi, 2);
            /* the last outputs: a vector over some done already, where that writes the same again */
            int ql = a->q - MD_VW;
            if (qi < a->q && qi > 0 && a->beta == 0.0f && ql * s >= a->pad_w && lanes_fit(a, ql, s)) {
                if (s == 1) plane_fwd_vec(a, x, y, pi, ql, 1);
                else plane_fwd_vec(a, x, y, pi, ql, 2);
                qi = a->q;
            }
        }
#endif
        for (; qi < a->q; qi++) plane_fwd_one(a, x, y, pi, qi);
    }
}

/* dx of output (pi, qi)'s window: dy added at its first maximum (avg: its
 * share everywhere); disjoint: every element written, beta dx + dy at the
 * first maximum, beta dx elsewhere. */
static ALWAYS_INLINE void plane_bwd_one(const struct md_pool2d_args *a, const float *x, const float *dy, float *dx,
                                        int pi, int qi, int disjoint)
{
    struct win w = window(a, pi, qi);
    int W = a->w;
    float d = dy[(size_t)pi * a->q + qi], beta = a->beta;
    if (a->kind != MD_POOL_MAX) {
        if (w.div <= 0.0f) return;
        float share = d / w.div;
        for (int hi = w.h0; hi < w.h1; hi++)
            for (int wi = w.w0; wi < w.w1; wi++) dx[hi * W + wi] += share;
        return;
    }
    if (w.h0 >= w.h1 || w.w0 >= w.w1) return;
    int best;
    plane_argmax(x, W, w, &best);
    if (!disjoint) {
        dx[best] += d;
        return;
    }
    for (int hi = w.h0; hi < w.h1; hi++)
        for (int wi = w.w0; wi < w.w1; wi++) {
            float *o = dx + hi * W + wi, v = beta == 1.0f ? *o : beta != 0.0f ? beta * *o : 0.0f;
            *o = hi * W + wi == best ? v + d : v;
        }
}

#if MD_VW > 1
/* Disjoint 2-wide windows of stride 2, outputs [qi, qi + MD_VW) of row pi
 * inside the row: the first maximum's place in each window (row-major),
 * then the windows' rows written in memory order, two outputs' elements
 * per vector. */
static ALWAYS_INLINE void plane_bwd_vec2(const struct md_pool2d_args *a, const float *x, const float *dy, float *dx,
                                         int pi, int qi)
{
    struct win w = window(a, pi, qi);
    int W = a->w, ws = w.w0;
    float beta = a->beta;
    md_vf bv = md_vload_even(x + (size_t)w.h0 * W + ws);
    md_vi best = md_vspliti(0); /* (hi - h0) * 2 + kx */
    for (int hi = w.h0; hi < w.h1; hi++)
        for (int kx = hi == w.h0 ? 1 : 0; kx < 2; kx++) {
            md_vf v = window_lanes(x + (size_t)hi * W, 2, ws, kx);
            md_vi m = v > bv;
            bv = md_vsel(m, v, bv);
            best = md_vseli(m, md_vspliti((hi - w.h0) * 2 + kx), best);
        }
    md_vf d = md_vload(dy + (size_t)pi * a->q + qi);
    /* per element of the row's 2 * MD_VW: its output's dy and best, and its kx */
    md_vf d0 = MD_VSHUF(d, d, 0, 0, 1, 1), d1 = MD_VSHUF(d, d, 2, 2, 3, 3);
    md_vi b0 = MD_VSHUF(best, best, 0, 0, 1, 1), b1 = MD_VSHUF(best, best, 2, 2, 3, 3);
    for (int hi = w.h0; hi < w.h1; hi++) {
        md_vi k = md_vspliti((hi - w.h0) * 2) + (md_vi){0, 1, 0, 1};
        float *o = dx + (size_t)hi * W + ws;
        md_vf v0 = md_vload(o), v1 = md_vload(o + MD_VW);
        if (beta != 1.0f) {
            v0 = beta != 0.0f ? beta * v0 : md_vsplat(0.0f);
            v1 = beta != 0.0f ? beta * v1 : md_vsplat(0.0f);
        }
        md_vstore(o, md_vsel(b0 == k, v0 + d0, v0));
        md_vstore(o + MD_VW, md_vsel(b1 == k, v1 + d1, v1));
    }
}
#endif

/* Disjoint max windows (stride >= kernel) of planes of at most 4096 rows
 * and columns: the rows some window covers, and the columns none covers. */
struct cover {
    int disjoint, nucols;
    unsigned char rows[4096];
    short ucols[4096];
};

static void cover_of(const struct md_pool2d_args *a, struct cover *cv)
{
    cv->disjoint = a->kind == MD_POOL_MAX && a->stride_h >= a->kh && a->stride_w >= a->kw && a->h <= 4096 &&
                   a->w <= 4096;
    cv->nucols = 0;
    if (!cv->disjoint) return;
    for (int hi = 0; hi < a->h; hi++) {
        int ph = hi + a->pad_h;
        cv->rows[hi] = ph % a->stride_h < a->kh && ph / a->stride_h < a->p;
    }
    for (int wi = 0; wi < a->w; wi++) {
        int pw = wi + a->pad_w;
        if (!(pw % a->stride_w < a->kw && pw / a->stride_w < a->q)) cv->ucols[cv->nucols++] = (short)wi;
    }
}

/* dx of one plane: beta dx, then every output's share added (as the pair
 * function); disjoint max windows write each element once instead: beta dx,
 * plus dy where the window's first maximum sits (the elements no window
 * covers: beta dx). */
static void f32_nchw_bwd_plane(const struct md_pool2d_args *a, const struct cover *cv, const float *x,
                               const float *dy, float *dx)
{
    int H = a->h, W = a->w;
    float beta = a->beta;
    if (cv->disjoint && beta != 1.0f) {
        for (int hi = 0; hi < H; hi++) {
            float *o = dx + hi * W;
            if (!cv->rows[hi])
                for (int wi = 0; wi < W; wi++) o[wi] = beta != 0.0f ? beta * o[wi] : 0.0f;
            else
                for (int k = 0; k < cv->nucols; k++) o[cv->ucols[k]] = beta != 0.0f ? beta * o[cv->ucols[k]] : 0.0f;
        }
    } else if (beta != 1.0f) {
        for (int i = 0; i < H * W; i++) dx[i] = beta != 0.0f ? beta * dx[i] : 0.0f;
    }
    for (int pi = 0; pi < a->p; pi++) {
        int qi = 0;
#if MD_VW > 1
        struct win w = window(a, pi, 0);
        if (cv->disjoint && a->kw == 2 && a->stride_w == 2 && w.h0 < w.h1) {
            for (; qi < a->q && qi * 2 < a->pad_w; qi++) plane_bwd_one(a, x, dy, dx, pi, qi, 1);
            for (; qi + MD_VW <= a->q && qi * 2 - a->pad_w + 2 * MD_VW <= W; qi += MD_VW)
                plane_bwd_vec2(a, x, dy, dx, pi, qi);
            int ql = a->q - MD_VW; /* as the forward's last outputs */
            if (qi < a->q && qi > 0 && beta == 0.0f && ql * 2 >= a->pad_w && ql * 2 - a->pad_w + 2 * MD_VW <= W) {
                plane_bwd_vec2(a, x, dy, dx, pi, ql);
                qi = a->q;
            }
        }
#endif
        for (; qi < a->q; qi++) plane_bwd_one(a, x, dy, dx, pi, qi, cv->disjoint);
    }
}

/* The task ranges of one direction (fwd, bwd): fp32 NHWC images, fp32 NCHW
 * planes, and (image, channel) pairs in image-major order for fp16/bf16
 * (NHWC pairs of one image touch interleaved but disjoint elements). */
static void nhwc_fwd_range(void *vc, long long b, long long e)
{
    for (long long n = b; n < e; n++) f32_nhwc_fwd_image(vc, (int)n);
}

static void nhwc_bwd_range(void *vc, long long b, long long e)
{
    for (long long n = b; n < e; n++) f32_nhwc_bwd_image(vc, (int)n);
}

static void nchw_fwd_range(void *vc, long long b, long long e)
{
    const struct md_pool2d_args *a = vc;
    size_t hw = (size_t)a->h * a->w, pq = (size_t)a->p * a->q;
    for (long long t = b; t < e; t++) f32_nchw_fwd_plane(a, (const float *)a->x + t * hw, (float *)a->y_out + t * pq);
}

static void nchw_bwd_range(void *vc, long long b, long long e)
{
    const struct md_pool2d_args *a = vc;
    size_t hw = (size_t)a->h * a->w, pq = (size_t)a->p * a->q;
    struct cover cv;
    cover_of(a, &cv);
    for (long long t = b; t < e; t++)
        f32_nchw_bwd_plane(a, &cv, (const float *)a->x + t * hw, (const float *)a->dy + t * pq,
                           (float *)a->dx + t * hw);
}

static void pool_fwd_range(void *vc, long long b, long long e)
{
    const struct md_pool2d_args *a = vc;
    for (long long t = b; t < e; t++) pool_fwd_pair(a, (int)(t / a->c), (int)(t % a->c), a->dtype, a->layout);
}

static void pool_bwd_range(void *vc, long long b, long long e)
{
    const struct md_pool2d_args *a = vc;
    for (long long t = b; t < e; t++) pool_bwd_pair(a, (int)(t / a->c), (int)(t % a->c), a->dtype, a->layout);
}

/* Both passes: one image per task for fp32 NHWC, else (image, channel) pairs. */
static md_status pool_run(const char *op, const struct md_pool2d_args *a, md_range_fn nhwc, md_range_fn nchw,
                          md_range_fn pairs)
{
    MD_TRY(pool_check(op, a));
    if (a->dtype == MD_F32 && a->layout == MD_NHWC)
        md_parallel_for(a->n, 1, nhwc, (void *)a);
    else
        md_parallel_for((long long)a->n * a->c, md_cpu_tasks_per_chunk((long long)a->h * a->w, 4096),
                        a->dtype == MD_F32 ? nchw : pairs, (void *)a);
    return MD_OK;
}

md_status md_cpu_pool2d_fwd(md_device *dev, const struct md_pool2d_args *a)
{
    (void)dev;
    return pool_run("pool2d_fwd", a, nhwc_fwd_range, nchw_fwd_range, pool_fwd_range);
}

md_status md_cpu_pool2d_bwd(md_device *dev, const struct md_pool2d_args *a)
{
    (void)dev;
    return pool_run("pool2d_bwd", a, nhwc_bwd_range, nchw_bwd_range, pool_bwd_range);
}

/* ---- global average pooling: tasks are images ---------------------------------- */

static void gap_fwd_range(void *vc, long long b, long long e)
{
    const struct md_gap_args *a = vc;
    for (long long ni = b; ni < e; ni++)
        for (int ci = 0; ci < a->c; ci++) {
            double s = 0.0;
            if (a->dtype == MD_F32 && a->layout == MD_NCHW) {
                const float *x = (const float *)a->x + ((size_t)ni * a->c + ci) * a->hw;
                for (int i = 0; i < a->hw; i++) s += (double)x[i];
            } else {
                for (int i = 0; i < a->hw; i++)
                    s += (double)md_load_f(a->x, a->dtype, md_nci(a->layout, a->c, a->hw, (int)ni, ci, i));
            }
            size_t o = (size_t)ni * a->c + ci;
            float v = (float)(s / a->hw);
            if (a->beta != 0.0f) v += a->beta * md_load_f(a->y, a->dtype, o);
            md_store_f(a->y, a->dtype, o, v);
        }
}

static void gap_bwd_range(void *vc, long long b, long long e)
{
    const struct md_gap_args *a = vc;
    for (long long ni = b; ni < e; ni++)
        for (int ci = 0; ci < a->c; ci++) {
            float d = md_load_f(a->dy, a->dtype, (size_t)ni * a->c + ci) / (float)a->hw;
            for (int i = 0; i < a->hw; i++) {
                size_t o = md_nci(a->layout, a->c, a->hw, (int)ni, ci, i);
                float v = d;
                if (a->beta != 0.0f) v += a->beta * md_load_f(a->dx, a->dtype, o);
                md_store_f(a->dx, a->dtype, o, v);
            }
        }
}

static md_status gap_check(const char *op, const struct md_gap_args *a)
{
    if (!md_cpu_float_type(a->dtype))
        return md_errf(MD_ERR_UNSUPPORTED, "cpu %s: dtype %s is not supported", op, md_dtype_name(a->dtype));
    return MD_OK;
}

md_status md_cpu_gap_fwd(md_device *dev, const struct md_gap_args *a)
{
    (void)dev;
    MD_TRY(gap_check("gap_fwd", a));
    md_parallel_for(a->n, 1, gap_fwd_range, (void *)a);
    return MD_OK;
}

md_status md_cpu_gap_bwd(md_device *dev, const struct md_gap_args *a)
{
    (void)dev;
    MD_TRY(gap_check("gap_bwd", a));
    md_parallel_for(a->n, 1, gap_bwd_range, (void *)a);
    return MD_OK;
}
