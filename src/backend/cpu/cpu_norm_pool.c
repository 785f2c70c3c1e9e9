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
