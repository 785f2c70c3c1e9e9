/* cpu_norm_pool.c - batch norm + ReLU + 2x2 stride-2 max pool in the same
 * passes (cpu_norm_pool.h), fp32, channels-last and NCHW.
 *
 * Each window's four values are relu(x*sc + sh), computed as the unfused
 * batch norm computes them (the same float operations, no contraction), so
 * the forward's pooled output is the unfused one bit for bit. Backward
 * recomputes them and routes dy as the pool kernel does: to the first
 * maximal element of the window (row-major order), where that value is > 0
 * (the ReLU's mask), +0 at the other three. Channels-last with xs and arg
 * (md_bnpool), the forward keeps that routing: the backward's sums then read
 * dy, xs and arg (pooled sizes) instead of x, and its dx pass takes the
 * routing from arg instead of recomputing it, the same bit for bit (the
 * sums were half the fused backward's time in small_cnn). The work per element (four
 * multiply-adds, maxima, the routing's selects) outweighs the memory traffic
 * it replaces at SSE width, so channels-last goes in vectors of 16 channels
 * (gcc target clones: AVX-512 / AVX2 / baseline), then one at a time; NCHW
 * puts 4 windows of a pooled row in cpu_vec.h's vectors (the even and odd
 * columns of two input rows), then one at a time. */
#include "backend/cpu/cpu_norm_pool.h"

#include "backend/cpu/cpu_vec.h"
#include "core/mem.h"
#include "core/threadpool.h"

#include <stddef.h>
#include <string.h>

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(__SANITIZE_ADDRESS__)
#define BP_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define BP_CLONES
#endif

#if defined(__GNUC__) || defined(__clang__)
#define BV 16
/* the vectors live in always-inline helpers: no call passes one */
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float bvec __attribute__((vector_size(BV * sizeof(float))));
typedef int bmask __attribute__((vector_size(BV * sizeof(int))));
#define AI static inline __attribute__((always_inline))
AI bvec vld(const float *p)
{
    bvec v;
    memcpy(&v, p, sizeof v);
    return v;
}
AI void vst(float *p, bvec v) { memcpy(p, &v, sizeof v); }
AI bvec vsplat(float x)
{
    bvec v;
    for (int i = 0; i < BV; i++) v[i] = x;
    return v;
}
AI bvec vand(bmask m, bvec a) { return (bvec)(m & (bmask)a); }
AI bvec vsel(bmask m, bvec a, bvec b) { return (bvec)((m & (bmask)a) | (~m & (bmask)b)); }
AI bvec vrelu(bvec v) { return vand(v > vsplat(0.0f), v); }
AI bvec vmax(bvec a, bvec b) { return vsel(b > a, b, a); }
typedef unsigned char bbytes __attribute__((vector_size(BV)));
#if (defined(__clang__) || __GNUC__ >= 12) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
/* 16 bytes to 16 ints: each lane takes its byte's 32-bit word (two 256-bit
 * permutes), shifts and masks it. gcc 12 converts a byte vector element by
 * element (about 40 scalar instructions for 16 bytes), and widens 128 bits
 * to 512 in one shuffle through memory (a stalled load). */
typedef unsigned bu4 __attribute__((vector_size(16)));
typedef unsigned bu8 __attribute__((vector_size(32)));
typedef unsigned bumask __attribute__((vector_size(BV * sizeof(int))));
AI bmask ild(const unsigned char *p)
{
    bu4 w;
    memcpy(&w, p, sizeof w);
    bu8 lo = __builtin_shufflevector(w, w, 0, 0, 0, 0, 1, 1, 1, 1);
    bu8 hi = __builtin_shufflevector(w, w, 2, 2, 2, 2, 3, 3, 3, 3);
    bumask x = __builtin_shufflevector(lo, hi, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const bumask sh = {0, 8, 16, 24, 0, 8, 16, 24, 0, 8, 16, 24, 0, 8, 16, 24};
    return (bmask)((x >> sh) & 0xffu);
}
#else
AI bmask ild(const unsigned char *p)
{
    bbytes v;
    memcpy(&v, p, sizeof v);
    return __builtin_convertvector(v, bmask);
}
#endif
AI void ist(unsigned char *p, bmask v)
{
    bbytes b = __builtin_convertvector(v, bbytes);
    memcpy(p, &b, sizeof b);
}
AI bmask isplat(int x)
{
    bmask v;
    for (int i = 0; i < BV; i++) v[i] = x;
    return v;
}
#else
#define BV 0
#define AI static inline
#endif

/* the four inputs of window q of pooled row t */
struct win { const float *p[4]; size_t off; };

AI struct win win_at(const struct md_bnpool *p, long long t, int q)
{
    int P = p->h / 2;
    long long ni = t / P;
    int pi = (int)(t % P);
    size_t off = ((size_t)(ni * p->h + 2 * pi) * (size_t)p->w + (size_t)2 * q) * (size_t)p->c;
    const float *r0 = p->x + off, *r1 = r0 + (size_t)p->w * p->c;
    return (struct win){{r0, r0 + p->c, r1, r1 + p->c}, off};
}

/* one channel: the window's inputs x[k], its first maximum's index; returns
 * that maximum (the pooled output) */
AI float win1(const struct win *w, int j, float s, float h, float *x, int *best)
{
    float m = 0.0f;
    *best = 0;
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        x[k] = w->p[k][j];
        float v = x[k] * s + h;
        v = v > 0.0f ? v : 0.0f;
        if (v > m) m = v, *best = k;
    }
    return m;
}

/* as win1; returns g = dy where that maximum is > 0 */
AI float route1(const struct win *w, int j, float s, float h, float dy, float *x, int *best)
{
    return win1(w, j, s, h, x, best) > 0.0f ? dy : 0.0f;
}

/* the routing arg keeps: the first maximum's index, 4 where it is 0 */
AI unsigned char arg1(float m, int best) { return m > 0.0f ? (unsigned char)best : 4; }

#if BV
/* channels [j, j + BV): as win1, the index as four masks */
AI bvec winv(const struct win *w, int j, bvec s, bvec h, bvec *x, bmask *is)
{
    bvec v[4];
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        x[k] = vld(w->p[k] + j);
        v[k] = vrelu(x[k] * s + h);
    }
    bvec m = vmax(vmax(v[0], v[1]), vmax(v[2], v[3]));
    bmask taken = (bmask)vsplat(0.0f);
#pragma GCC unroll 4
    for (int k = 0; k < 3; k++) {
        is[k] = (v[k] == m) & ~taken;
        taken |= is[k];
    }
    is[3] = ~taken;
    return m;
}

/* as route1 */
AI bvec routev(const struct win *w, int j, bvec s, bvec h, bvec dy, bvec *x, bmask *is)
{
    return vand(winv(w, j, s, h, x, is) > vsplat(0.0f), dy);
}

/* as arg1 */
AI bmask argv(bvec m, const bmask *is)
{
    bmask k = (is[1] & isplat(1)) | (is[2] & isplat(2)) | (is[3] & isplat(3)), on = m > vsplat(0.0f);
    return (on & k) | (~on & isplat(4));
}

/* x at the masks' element */
AI bvec xsel(const bvec *x, const bmask *is) { return vsel(is[0], x[0], vsel(is[1], x[1], vsel(is[2], x[2], x[3]))); }
#endif

/* y of pooled rows [b, e); kept: each window's routing too (xs, arg) */
AI void apply_rows(const struct md_bnpool *p, int kept, long long b, long long e)
{
    int C = p->c, Q = p->w / 2;
    for (long long t = b; t < e; t++)
        for (int q = 0; q < Q; q++) {
            struct win w = win_at(p, t, q);
            size_t po = ((size_t)t * Q + (size_t)q) * C;
            int j = 0;
#if BV
            for (; j + BV <= C; j += BV) {
                bvec x[4];
                bmask is[4];
                bvec m = winv(&w, j, vld(p->sc + j), vld(p->sh + j), x, is);
                vst(p->y + po + j, m);
                if (kept) {
                    vst(p->xs + po + j, xsel(x, is));
                    ist(p->arg + po + j, argv(m, is));
                }
            }
#endif
            for (; j < C; j++) {
                float x[4];
                int best;
                float m = win1(&w, j, p->sc[j], p->sh[j], x, &best);
                p->y[po + j] = m;
                if (kept) {
                    p->xs[po + j] = x[best];
                    p->arg[po + j] = arg1(m, best);
                }
            }
        }
}

BP_CLONES void md_cpu_bnpool_apply(const struct md_bnpool *p, long long b, long long e)
{
    if (p->xs && p->arg) apply_rows(p, 1, b, e);
    else apply_rows(p, 0, b, e);
}

#define CH_BLOCK 64 /* float accumulators per block of channels (in L1) */

/* kept: from the routing the forward kept (dy where arg < 4, x = xs), else recomputed */
AI void sums_rows(const struct md_bnpool *p, int kept, long long b, long long e)
{
    int C = p->c, Q = p->w / 2;
    for (long long t = b; t < e; t++) {
        double *p1 = p->part + (size_t)t * 2 * C, *p2 = p1 + C;
        for (int j0 = 0; j0 < C; j0 += CH_BLOCK) {
            int len = C - j0 < CH_BLOCK ? C - j0 : CH_BLOCK;
            float a1[CH_BLOCK], a2[CH_BLOCK];
            for (int j = 0; j < len; j++) a1[j] = a2[j] = 0.0f;
            for (int q = 0; q < Q; q++) {
                struct win w = win_at(p, t, q);
                size_t po = ((size_t)t * Q + (size_t)q) * C + j0;
                const float *dy = p->dy + po, *xk = kept ? p->xs + po : NULL;
                const unsigned char *arg = kept ? p->arg + po : NULL;
                int j = 0;
#if BV
                for (; j + BV <= len; j += BV) {
                    int c = j0 + j;
                    bvec g, xs;
                    if (kept) {
                        g = vand(ild(arg + j) < isplat(4), vld(dy + j));
                        xs = vld(xk + j);
                    } else {
                        bvec x[4];
                        bmask is[4];
                        g = routev(&w, c, vld(p->sc + c), vld(p->sh + c), vld(dy + j), x, is);
                        xs = xsel(x, is);
                    }
                    vst(a1 + j, vld(a1 + j) + g);
                    vst(a2 + j, vld(a2 + j) + g * (xs - vld(p->fk + c)));
                }
#endif
                for (; j < len; j++) {
                    int c = j0 + j;
                    float g, xs;
                    if (kept) {
                        g = arg[j] < 4 ? dy[j] : 0.0f;
                        xs = xk[j];
                    } else {
                        float x[4];
                        int best;
                        g = route1(&w, c, p->sc[c], p->sh[c], dy[j], x, &best);
                        xs = x[best];
                    }
                    a1[j] += g;
                    a2[j] += g * (xs - p->fk[c]);
                }
            }
            for (int j = 0; j < len; j++) p1[j0 + j] = (double)a1[j], p2[j0 + j] = (double)a2[j];
        }
    }
}

BP_CLONES void md_cpu_bnpool_sums(const struct md_bnpool *p, long long b, long long e)
{
    if (p->xs && p->arg) sums_rows(p, 1, b, e);
    else sums_rows(p, 0, b, e);
}

/* kept: the routing from arg (kept by the forward), else recomputed */
AI void dx_rows(const struct md_bnpool *p, int acc, int kept, long long b, long long e)
{
    int C = p->c, Q = p->w / 2;
    size_t row = (size_t)p->w * C;
    for (long long t = b; t < e; t++)
        for (int q = 0; q < Q; q++) {
            struct win w = win_at(p, t, q);
            size_t po = ((size_t)t * Q + (size_t)q) * C;
            const float *dy = p->dy + po;
            const unsigned char *arg = kept ? p->arg + po : NULL;
            float *d[4] = {p->dx + w.off, p->dx + w.off + C, p->dx + w.off + row, p->dx + w.off + row + C};
            int j = 0;
#if BV
            for (; j + BV <= C; j += BV) {
                bvec x[4], g;
                bmask is[4];
                if (kept) {
                    bmask a = ild(arg + j);
#pragma GCC unroll 4
                    for (int k = 0; k < 4; k++) {
                        x[k] = vld(w.p[k] + j);
                        is[k] = a == isplat(k);
                    }
                    g = vld(dy + j);
                } else {
                    g = routev(&w, j, vld(p->sc + j), vld(p->sh + j), vld(dy + j), x, is);
                }
                bvec k1 = vld(p->k1 + j), k2 = vld(p->k2 + j), k3 = vld(p->k3 + j), fk = vld(p->fk + j);
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++) {
                    bvec v = k1 * (vand(is[k], g) - k2 - (x[k] - fk) * k3);
                    if (acc) v = v + p->beta * vld(d[k] + j);
                    vst(d[k] + j, v);
                }
            }
#endif
            for (; j < C; j++) {
                float x[4], g;
                int best;
                if (kept) {
#pragma GCC unroll 4
                    for (int k = 0; k < 4; k++) x[k] = w.p[k][j];
                    best = arg[j];
                    g = dy[j];
                } else {
                    g = route1(&w, j, p->sc[j], p->sh[j], dy[j], x, &best);
                }
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++) {
                    float v = p->k1[j] * ((k == best ? g : 0.0f) - p->k2[j] - (x[k] - p->fk[j]) * p->k3[j]);
                    if (acc) v = v + p->beta * d[k][j];
                    d[k][j] = v;
                }
            }
        }
}

BP_CLONES void md_cpu_bnpool_dx(const struct md_bnpool *p, long long b, long long e)
{
    int kept = p->xs && p->arg;
    if (p->beta != 0.0f) {
        if (kept) dx_rows(p, 1, 1, b, e);
        else dx_rows(p, 1, 0, b, e);
    } else {
        if (kept) dx_rows(p, 0, 1, b, e);
        else dx_rows(p, 0, 0, b, e);
    }
}

/* ---- NCHW: a task is one plane t = image * c + channel -------------------
 * The windows of a pooled row in vectors of MD_VW outputs (cpu_vec.h: the
 * even and odd columns of two input rows), then one at a time. */

/* the window of output (pi, q) in plane t's rows: element k = (k / 2, k % 2) */
AI void plane_win(const struct md_bnpool *p, long long t, int pi, const float **r0, const float **r1)
{
    *r0 = p->x + (size_t)t * p->h * p->w + (size_t)2 * pi * p->w;
    *r1 = *r0 + p->w;
}

/* the window at column 2q of rows r0, r1 of one plane, as route1 reads it (channel 0) */
AI struct win plane_win_at(const float *r0, const float *r1, int q)
{
    return (struct win){{r0 + 2 * q, r0 + 2 * q + 1, r1 + 2 * q, r1 + 2 * q + 1}, 0};
}

AI md_vf relu4(md_vf v) { return md_vand(v > md_vsplat(0.0f), v); }
AI md_vf max4(md_vf a, md_vf b) { return md_vsel(b > a, b, a); }

/* lanes q0..q0+MD_VW of a pooled row: the four inputs of each window, the
 * masks of its first maximum, and g = dy where that maximum is > 0 */
AI md_vf route4(const float *r0, const float *r1, int q0, float s, float h, md_vf dy, md_vf *x, md_vi *is)
{
    x[0] = md_vload_even(r0 + 2 * q0), x[1] = md_vload_odd(r0 + 2 * q0);
    x[2] = md_vload_even(r1 + 2 * q0), x[3] = md_vload_odd(r1 + 2 * q0);
    md_vf v[4], S = md_vsplat(s), Hs = md_vsplat(h);
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) v[k] = relu4(x[k] * S + Hs);
    md_vf m = max4(max4(v[0], v[1]), max4(v[2], v[3]));
    md_vi zero = md_vspliti(0), taken = zero;
#pragma GCC unroll 4
    for (int k = 0; k < 3; k++) {
        is[k] = md_vseli(taken, zero, v[k] == m);
        taken = md_vseli(taken, taken, is[k]);
    }
    is[3] = md_vseli(taken, zero, md_vspliti(-1));
    return md_vand(m > md_vsplat(0.0f), dy);
}

BP_CLONES void md_cpu_bnpool_apply_nchw(const struct md_bnpool *p, long long b, long long e)
{
    int P = p->h / 2, Q = p->w / 2;
    for (long long t = b; t < e; t++) {
        int ci = (int)(t % p->c);
        float s = p->sc[ci], h = p->sh[ci];
        for (int pi = 0; pi < P; pi++) {
            const float *r0, *r1;
            plane_win(p, t, pi, &r0, &r1);
            float *o = p->y + ((size_t)t * P + (size_t)pi) * Q;
            int q = 0;
#if MD_VW > 1
            md_vf S = md_vsplat(s), Hs = md_vsplat(h);
            for (; q + MD_VW <= Q; q += MD_VW) {
                md_vf v0 = relu4(md_vload_even(r0 + 2 * q) * S + Hs), v1 = relu4(md_vload_odd(r0 + 2 * q) * S + Hs);
                md_vf v2 = relu4(md_vload_even(r1 + 2 * q) * S + Hs), v3 = relu4(md_vload_odd(r1 + 2 * q) * S + Hs);
                md_vstore(o + q, max4(max4(v0, v1), max4(v2, v3)));
            }
#endif
            for (; q < Q; q++) {
                struct win w = plane_win_at(r0, r1, q);
                float m = 0.0f;
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++) {
                    float v = *w.p[k] * s + h;
                    v = v > 0.0f ? v : 0.0f;
                    if (v > m) m = v;
                }
                o[q] = m;
            }
        }
    }
}

/* plane t's sums into part[(image, 2c)]: [ci] sum dy', [c + ci] sum dy'*(x - fk) */
BP_CLONES void md_cpu_bnpool_sums_nchw(const struct md_bnpool *p, long long b, long long e)
{
    int P = p->h / 2, Q = p->w / 2, C = p->c;
    for (long long t = b; t < e; t++) {
        int img = (int)(t / C), ci = (int)(t % C);
        float s = p->sc[ci], h = p->sh[ci], fk = p->fk[ci], t1 = 0.0f, t2 = 0.0f;
#if MD_VW > 1
        md_vf a1 = md_vsplat(0.0f), a2 = md_vsplat(0.0f), F = md_vsplat(fk);
#endif
        for (int pi = 0; pi < P; pi++) {
            const float *r0, *r1;
            plane_win(p, t, pi, &r0, &r1);
            const float *dy = p->dy + ((size_t)t * P + (size_t)pi) * Q;
            int q = 0;
#if MD_VW > 1
            for (; q + MD_VW <= Q; q += MD_VW) {
                md_vf x[4];
                md_vi is[4];
                md_vf g = route4(r0, r1, q, s, h, md_vload(dy + q), x, is);
                md_vf xs = md_vsel(is[0], x[0], md_vsel(is[1], x[1], md_vsel(is[2], x[2], x[3])));
                a1 = a1 + g;
                a2 = a2 + g * (xs - F);
            }
#endif
            for (; q < Q; q++) {
                float x[4];
                int best;
                struct win w = plane_win_at(r0, r1, q);
                float g = route1(&w, 0, s, h, dy[q], x, &best);
                t1 += g;
                t2 += g * (x[best] - fk);
            }
        }
        double s1 = (double)t1, s2 = (double)t2;
#if MD_VW > 1
        for (int k = 0; k < MD_VW; k++) s1 += (double)md_vlane(a1, k), s2 += (double)md_vlane(a2, k);
#endif
        p->part[(size_t)img * 2 * C + ci] = s1;
        p->part[(size_t)img * 2 * C + C + ci] = s2;
    }
}

AI void dx_planes(const struct md_bnpool *p, int acc, long long b, long long e)
{
    int P = p->h / 2, Q = p->w / 2;
    float beta = p->beta;
    for (long long t = b; t < e; t++) {
        int ci = (int)(t % p->c);
        float s = p->sc[ci], h = p->sh[ci], fk = p->fk[ci], k1 = p->k1[ci], k2 = p->k2[ci], k3 = p->k3[ci];
        for (int pi = 0; pi < P; pi++) {
            const float *r0, *r1;
            plane_win(p, t, pi, &r0, &r1);
            size_t off = (size_t)(r0 - p->x);
            float *d0 = p->dx + off, *d1 = d0 + p->w;
            const float *dy = p->dy + ((size_t)t * P + (size_t)pi) * Q;
            int q = 0;
#if MD_VW > 1
            md_vf K1 = md_vsplat(k1), K2 = md_vsplat(k2), K3 = md_vsplat(k3), F = md_vsplat(fk);
            for (; q + MD_VW <= Q; q += MD_VW) {
                md_vf x[4], v[4];
                md_vi is[4];
                md_vf g = route4(r0, r1, q, s, h, md_vload(dy + q), x, is);
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++) v[k] = K1 * (md_vand(is[k], g) - K2 - (x[k] - F) * K3);
                if (acc) {
                    v[0] = v[0] + beta * md_vload_even(d0 + 2 * q), v[1] = v[1] + beta * md_vload_odd(d0 + 2 * q);
                    v[2] = v[2] + beta * md_vload_even(d1 + 2 * q), v[3] = v[3] + beta * md_vload_odd(d1 + 2 * q);
                }
                md_vstore(d0 + 2 * q, MD_VSHUF(v[0], v[1], 0, 4, 1, 5));
                md_vstore(d0 + 2 * q + 4, MD_VSHUF(v[0], v[1], 2, 6, 3, 7));
                md_vstore(d1 + 2 * q, MD_VSHUF(v[2], v[3], 0, 4, 1, 5));
                md_vstore(d1 + 2 * q + 4, MD_VSHUF(v[2], v[3], 2, 6, 3, 7));
            }
#endif
            for (; q < Q; q++) {
                float x[4];
                int best;
                struct win w = plane_win_at(r0, r1, q);
                float g = route1(&w, 0, s, h, dy[q], x, &best);
                float *d[4] = {d0 + 2 * q, d0 + 2 * q + 1, d1 + 2 * q, d1 + 2 * q + 1};
#pragma GCC unroll 4
                for (int k = 0; k < 4; k++) {
                    float v = k1 * ((k == best ? g : 0.0f) - k2 - (x[k] - fk) * k3);
                    if (acc) v = v + beta * *d[k];
                    *d[k] = v;
                }
            }
        }
    }
}

BP_CLONES void md_cpu_bnpool_dx_nchw(const struct md_bnpool *p, long long b, long long e)
{
    if (p->beta != 0.0f) dx_planes(p, 1, b, e);
    else dx_planes(p, 0, b, e);
}

/* ---- channels-last with the routing: the filter gradient of the convolution
 * that computed x, instead of dx (kernels.h md_batchnorm_args.conv) ---------
 * Backward's dx is dz = k1*(g - k2 - (x - fk)*k3) at every element, g the dy
 * routed to its window's element, and the convolution's filter gradient is
 * dW[k][e] = sum over its outputs o of dz[o][k] * patch(o)[e], e = (r, s, ci):
 *   dW[k][e] = k1 * (T1[k][e] - (k2 - fk*k3) * S[e] - k3 * T3[k][e])
 * with T1 = sum g * patch over the routed elements (one a window, read from
 * the pooled dy and arg), S = sum patch, and T3 = sum x * patch = W G: x =
 * W * patch (no bias) and G the Gram matrix of the patches. Neither the
 * full-size dz nor x is read or written. A task is one image: its patches,
 * each row followed by a 1 so that G's last row is S, in the thread's
 * scratch; G, then T1 in float; the images' sums go to double in image order
 * (the same for any thread count); T3 and the combination in double. */

struct bnconv {
    const struct md_bnpool *p;
    const struct md_conv2d_args *cv;
    int crs, ld;       /* the patch's length; a row's floats (crs + 1, rounded up to vectors) */
    long long pq;      /* the convolution's outputs per image */
    int one33;         /* one input channel, 3 x 3 */
    float *scratch;    /* per thread (per_thread floats): (pq, ld) patches, then the padded image (one33) */
    size_t per_thread;
    float *part;       /* per image: G (crs + 1, ld), then T1 (crs, k) */
    size_t per_image;
};

/* one input channel, 3 x 3: each output's 9 values from the image padded
 * into xp (wp floats a row, the padding's zeros included); the rows' 1 and
 * zeros past them are in place */
static void patch_rows_1x3x3(const struct md_conv2d_args *cv, const float *x0, float *xp, int ld, float *pm)
{
    int hp = (cv->p - 1) * cv->stride_h + 2 * cv->dil_h + 1, wp = (cv->q - 1) * cv->stride_w + 2 * cv->dil_w + 1;
    for (int u = 0; u < hp; u++)
        for (int v = 0; v < wp; v++) {
            int ih = u - cv->pad_h, iw = v - cv->pad_w;
            xp[(size_t)u * wp + v] = ih >= 0 && ih < cv->h && iw >= 0 && iw < cv->w ? x0[(size_t)ih * cv->w + iw] : 0.0f;
        }
    int dh = cv->dil_h, dw = cv->dil_w;
    for (int oh = 0; oh < cv->p; oh++) {
        const float *r0 = xp + (size_t)oh * cv->stride_h * wp, *r1 = r0 + (size_t)dh * wp, *r2 = r1 + (size_t)dh * wp;
        float *row = pm + (size_t)oh * cv->q * ld;
        for (int ow = 0; ow < cv->q; ow++, row += ld) {
            size_t o = (size_t)ow * cv->stride_w;
            row[0] = r0[o], row[1] = r0[o + dw], row[2] = r0[o + 2 * dw];
            row[3] = r1[o], row[4] = r1[o + dw], row[5] = r1[o + 2 * dw];
            row[6] = r2[o], row[7] = r2[o + dw], row[8] = r2[o + 2 * dw];
        }
    }
}

/* the image's patches at x0, one row of ld floats per output: (r, s, ci), 1, zeros */
static void patch_rows(const struct md_conv2d_args *cv, const float *x0, int crs, int ld, float *pm)
{
    for (int oh = 0; oh < cv->p; oh++)
        for (int ow = 0; ow < cv->q; ow++) {
            float *row = pm + ((size_t)oh * cv->q + ow) * ld;
            int e = 0;
            for (int r = 0; r < cv->r; r++) {
                int ih = oh * cv->stride_h - cv->pad_h + r * cv->dil_h;
                for (int s = 0; s < cv->s; s++) {
                    int iw = ow * cv->stride_w - cv->pad_w + s * cv->dil_w;
                    if (ih < 0 || ih >= cv->h || iw < 0 || iw >= cv->w) {
                        for (int c = 0; c < cv->c; c++) row[e++] = 0.0f;
                        continue;
                    }
                    const float *px = x0 + ((size_t)ih * cv->w + (size_t)iw) * cv->c;
                    for (int c = 0; c < cv->c; c++) row[e++] = px[c];
                }
            }
            row[crs] = 1.0f; /* e == crs */
            for (e = crs + 1; e < ld; e++) row[e] = 0.0f;
        }
}

/* g (rows, ld) = sum over the npos rows of pm of row[e] * row */
AI void gram(const float *pm, long long npos, int rows, int ld, float *g)
{
#if BV
    int nv = ld / BV;
    bvec acc[MD_BN_CONV_MAX_CRS + 1][3];
    for (int e = 0; e < rows; e++)
        for (int v = 0; v < nv; v++) acc[e][v] = vsplat(0.0f);
    for (long long o = 0; o < npos; o++) {
        const float *row = pm + (size_t)o * ld;
        bvec rv[3];
        for (int v = 0; v < nv; v++) rv[v] = vld(row + v * BV);
        for (int e = 0; e < rows; e++) {
            bvec s = vsplat(row[e]);
            for (int v = 0; v < nv; v++) acc[e][v] = acc[e][v] + s * rv[v];
        }
    }
    for (int e = 0; e < rows; e++)
        for (int v = 0; v < nv; v++) vst(g + (size_t)e * ld + v * BV, acc[e][v]);
#else
    for (int i = 0; i < rows * ld; i++) g[i] = 0.0f;
    for (long long o = 0; o < npos; o++) {
        const float *row = pm + (size_t)o * ld;
        for (int e = 0; e < rows; e++)
            for (int f = 0; f < ld; f++) g[(size_t)e * ld + f] += row[e] * row[f];
    }
#endif
}

#if BV
/* acc[e] += the routed g of window (pi, q) (pooled element po, channels
 * from po's on) times its element's patch (rows of ld in pm, w outputs a row) */
AI void t1_window(const struct md_bnpool *p, size_t po, const float *pm, int ld, int pi, int q, int crs, bvec *acc)
{
    bmask a = ild(p->arg + po);
    bvec g = vld(p->dy + po);
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) {
        bvec h = vand(a == isplat(k), g);
        const float *row = pm + ((size_t)(2 * pi + k / 2) * p->w + (size_t)(2 * q + k % 2)) * ld;
#pragma GCC unroll 9
        for (int e = 0; e < crs; e++) acc[e] = acc[e] + h * vsplat(row[e]);
    }
}

/* gram and t1_image for one input channel and 3 x 3 (rows 10, ld 16): the
 * accumulators in registers, the same sums in the same order */
AI void gram_10(const float *pm, long long npos, float *g)
{
    bvec acc[10];
#pragma GCC unroll 10
    for (int e = 0; e < 10; e++) acc[e] = vsplat(0.0f);
    for (long long o = 0; o < npos; o++) {
        const float *row = pm + (size_t)o * BV;
        bvec rv = vld(row);
#pragma GCC unroll 10
        for (int e = 0; e < 10; e++) acc[e] = acc[e] + vsplat(row[e]) * rv;
    }
#pragma GCC unroll 10
    for (int e = 0; e < 10; e++) vst(g + (size_t)e * BV, acc[e]);
}

AI void t1_image_9(const struct md_bnpool *p, long long n, const float *pm, float *t1)
{
    int K = p->c, P = p->h / 2, Q = p->w / 2;
    for (int j = 0; j + BV <= K; j += BV) {
        bvec acc[9];
#pragma GCC unroll 9
        for (int e = 0; e < 9; e++) acc[e] = vsplat(0.0f);
        for (int pi = 0; pi < P; pi++)
            for (int q = 0; q < Q; q++)
                t1_window(p, (((size_t)n * P + (size_t)pi) * Q + (size_t)q) * K + j, pm, BV, pi, q, 9, acc);
#pragma GCC unroll 9
        for (int e = 0; e < 9; e++) vst(t1 + (size_t)e * K + j, acc[e]);
    }
}
#endif

/* t1 (crs, c) from channel j on = sum over image n's windows of g * the patch
 * of the element that takes it (the vectors add the other three elements'
 * +0: the same sums) */
AI void t1_image(const struct md_bnpool *p, long long n, const float *pm, int crs, int ld, int j, float *t1)
{
    int K = p->c, P = p->h / 2, Q = p->w / 2, W = p->w;
#if BV
    for (; j + BV <= K; j += BV) {
        bvec acc[MD_BN_CONV_MAX_CRS];
        for (int e = 0; e < crs; e++) acc[e] = vsplat(0.0f);
        for (int pi = 0; pi < P; pi++)
            for (int q = 0; q < Q; q++)
                t1_window(p, (((size_t)n * P + (size_t)pi) * Q + (size_t)q) * K + j, pm, ld, pi, q, crs, acc);
        for (int e = 0; e < crs; e++) vst(t1 + (size_t)e * K + j, acc[e]);
    }
#endif
    for (; j < K; j++) {
        float acc[MD_BN_CONV_MAX_CRS] = {0};
        for (int pi = 0; pi < P; pi++)
            for (int q = 0; q < Q; q++) {
                size_t po = (((size_t)n * P + (size_t)pi) * Q + (size_t)q) * K + j;
                int a = p->arg[po];
                if (a >= 4) continue;
                float g = p->dy[po];
                const float *row = pm + ((size_t)(2 * pi + a / 2) * W + (size_t)(2 * q + a % 2)) * ld;
                for (int e = 0; e < crs; e++) acc[e] += g * row[e];
            }
        for (int e = 0; e < crs; e++) t1[(size_t)e * K + j] = acc[e];
    }
}

BP_CLONES static void bnconv_images(void *vc, long long b, long long e)
{
    const struct bnconv *c = vc;
    const struct md_conv2d_args *cv = c->cv;
    float *pm = c->scratch + (size_t)md_parallel_thread_id() * c->per_thread, *xp = pm + (size_t)c->pq * c->ld;
    for (long long n = b; n < e; n++) {
        const float *x0 = (const float *)cv->x + (size_t)n * cv->h * cv->w * cv->c;
        float *g = c->part + (size_t)n * c->per_image, *t1 = g + (size_t)(c->crs + 1) * c->ld;
#if BV
        if (c->one33 && c->ld == BV) {
            patch_rows_1x3x3(cv, x0, xp, c->ld, pm);
            gram_10(pm, c->pq, g);
            t1_image_9(c->p, n, pm, t1);
            t1_image(c->p, n, pm, 9, c->ld, c->p->c / BV * BV, t1); /* the channels past the vectors */
        } else
#endif
        {
            patch_rows(cv, x0, c->crs, c->ld, pm);
            gram(pm, c->pq, c->crs + 1, c->ld, g);
            t1_image(c->p, n, pm, c->crs, c->ld, 0, t1);
        }
    }
}

md_status md_cpu_bnpool_conv_filter(const struct md_bnpool *p, const struct md_conv2d_args *cv)
{
    int crs = cv->c * cv->r * cv->s, K = p->c;
    if (!p->xs || !p->arg || !cv->x || !cv->wt || !cv->dwt || cv->groups != 1 || cv->layout != MD_NHWC ||
        cv->dtype != MD_F32 || cv->k != K || cv->p != p->h || cv->q != p->w || crs < 1 || crs > MD_BN_CONV_MAX_CRS)
        return md_errf(MD_ERR_UNSUPPORTED, "cpu batchnorm_bwd: the filter gradient of its input's convolution needs "
                                           "the pool's routing and a one-group fp32 channels-last convolution of "
                                           "that output, with C*R*S at most %d",
                       MD_BN_CONV_MAX_CRS);
#if BV
    int ld = (crs + 1 + BV - 1) / BV * BV;
#else
    int ld = crs + 1;
#endif
    struct bnconv c = {.p = p, .cv = cv, .crs = crs, .ld = ld, .pq = (long long)cv->p * cv->q,
                       .one33 = cv->c == 1 && cv->r == 3 && cv->s == 3,
                       .per_image = (size_t)(crs + 1) * ld + (size_t)crs * K};
    size_t hp = (size_t)(cv->p - 1) * cv->stride_h + 2 * (size_t)cv->dil_h + 1;
    size_t wp = (size_t)(cv->q - 1) * cv->stride_w + 2 * (size_t)cv->dil_w + 1;
    c.per_thread = (size_t)c.pq * ld + (c.one33 ? hp * wp : 0);
    int nth = md_threadpool_size();
    size_t nimg = (size_t)cv->n, nscr = (size_t)nth * c.per_thread;
    float *buf = md_malloc(sizeof(float) * (nimg * c.per_image + nscr));
    double *sum = md_calloc(c.per_image, sizeof(double));
    if (!buf || !sum) {
        md_free(buf);
        md_free(sum);
        return md_errf(MD_ERR_OOM, "cpu batchnorm_bwd: cannot allocate the filter gradient's sums");
    }
    c.part = buf, c.scratch = buf + nimg * c.per_image;
    if (c.one33) /* the rows' 1 and zeros, which patch_rows_1x3x3 leaves */
        for (int t = 0; t < nth; t++)
            for (long long o = 0; o < c.pq; o++) {
                float *row = c.scratch + (size_t)t * c.per_thread + (size_t)o * ld;
                row[crs] = 1.0f;
                for (int e = crs + 1; e < ld; e++) row[e] = 0.0f;
            }
    md_parallel_for(cv->n, 1, bnconv_images, &c);
    for (size_t n = 0; n < nimg; n++)
        for (size_t i = 0; i < c.per_image; i++) sum[i] += (double)c.part[n * c.per_image + i];
    const double *G = sum, *S = sum + (size_t)crs * ld, *T1 = sum + (size_t)(crs + 1) * ld;
    const float *w = cv->wt;
    float *dw = cv->dwt;
    for (int k = 0; k < K; k++) {
        double k1 = p->k1[k], k3 = p->k3[k], k2s = (double)p->k2[k] - (double)p->fk[k] * k3;
        for (int e = 0; e < crs; e++) {
            double t3 = 0.0;
            for (int f = 0; f < crs; f++) t3 += (double)w[(size_t)k * crs + f] * G[(size_t)f * ld + e];
            float v = (float)(k1 * (T1[(size_t)e * K + k] - k2s * S[e] - k3 * t3));
            size_t o = (size_t)k * crs + e;
            dw[o] = cv->beta != 0.0f ? v + cv->beta * dw[o] : v;
        }
    }
    md_free(buf);
    md_free(sum);
    return MD_OK;
}
