/* cpu_norm_pool.c - batch norm + ReLU + 2x2 stride-2 max pool in the same
 * passes (cpu_norm_pool.h), fp32 channels-last.
 *
 * Each window's four values are relu(x*sc + sh), computed as the unfused
 * batch norm computes them (the same float operations, no contraction), so
 * the forward's pooled output is the unfused one bit for bit. Backward
 * recomputes them and routes dy as the pool kernel does: to the first
 * maximal element of the window (row-major order), where that value is > 0
 * (the ReLU's mask), +0 at the other three. The work per element (four
 * multiply-adds, maxima, the routing's selects) outweighs the memory traffic
 * it replaces at SSE width, so channels go in vectors of 16 (gcc target
 * clones: AVX-512 / AVX2 / baseline), then one at a time. */
#include "backend/cpu/cpu_norm_pool.h"

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

/* one channel: the window's inputs x[k], the first maximum's index, and
 * g = dy where that maximum is > 0 */
AI float route1(const struct win *w, int j, float s, float h, float dy, float *x, int *best)
{
    float m = 0.0f;
    *best = 0;
    for (int k = 0; k < 4; k++) {
        x[k] = w->p[k][j];
        float v = x[k] * s + h;
        v = v > 0.0f ? v : 0.0f;
        if (v > m) m = v, *best = k;
    }
    return m > 0.0f ? dy : 0.0f;
}

#if BV
/* channels [j, j + BV): as route1, the index as four masks */
AI bvec routev(const struct win *w, int j, bvec s, bvec h, bvec dy, bvec *x, bmask *is)
{
    bvec v[4];
    for (int k = 0; k < 4; k++) {
        x[k] = vld(w->p[k] + j);
        v[k] = vrelu(x[k] * s + h);
    }
    bvec m = vmax(vmax(v[0], v[1]), vmax(v[2], v[3]));
    bmask taken = (bmask)vsplat(0.0f);
    for (int k = 0; k < 3; k++) {
        is[k] = (v[k] == m) & ~taken;
        taken |= is[k];
    }
    is[3] = ~taken;
    return vand(m > vsplat(0.0f), dy);
}
#endif

BP_CLONES void md_cpu_bnpool_apply(const struct md_bnpool *p, long long b, long long e)
{
    int C = p->c, Q = p->w / 2;
    for (long long t = b; t < e; t++)
        for (int q = 0; q < Q; q++) {
            struct win w = win_at(p, t, q);
            float *o = p->y + ((size_t)t * Q + (size_t)q) * C;
            int j = 0;
#if BV
            for (; j + BV <= C; j += BV) {
                bvec s = vld(p->sc + j), h = vld(p->sh + j);
                bvec v0 = vrelu(vld(w.p[0] + j) * s + h), v1 = vrelu(vld(w.p[1] + j) * s + h);
                bvec v2 = vrelu(vld(w.p[2] + j) * s + h), v3 = vrelu(vld(w.p[3] + j) * s + h);
                vst(o + j, vmax(vmax(v0, v1), vmax(v2, v3)));
            }
#endif
            for (; j < C; j++) {
                float m = 0.0f;
                for (int k = 0; k < 4; k++) {
                    float v = w.p[k][j] * p->sc[j] + p->sh[j];
                    v = v > 0.0f ? v : 0.0f;
                    if (v > m) m = v;
                }
                o[j] = m;
            }
        }
}

#define CH_BLOCK 64 /* float accumulators per block of channels (in L1) */

BP_CLONES void md_cpu_bnpool_sums(const struct md_bnpool *p, long long b, long long e)
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
                const float *dy = p->dy + ((size_t)t * Q + (size_t)q) * C + j0;
                int j = 0;
#if BV
                for (; j + BV <= len; j += BV) {
                    int c = j0 + j;
                    bvec x[4];
                    bmask is[4];
                    bvec g = routev(&w, c, vld(p->sc + c), vld(p->sh + c), vld(dy + j), x, is);
                    bvec xs = vsel(is[0], x[0], vsel(is[1], x[1], vsel(is[2], x[2], x[3])));
                    vst(a1 + j, vld(a1 + j) + g);
                    vst(a2 + j, vld(a2 + j) + g * (xs - vld(p->fk + c)));
                }
#endif
                for (; j < len; j++) {
                    int c = j0 + j, best;
                    float x[4];
                    float g = route1(&w, c, p->sc[c], p->sh[c], dy[j], x, &best);
                    a1[j] += g;
                    a2[j] += g * (x[best] - p->fk[c]);
                }
            }
            for (int j = 0; j < len; j++) p1[j0 + j] = (double)a1[j], p2[j0 + j] = (double)a2[j];
        }
    }
}

AI void dx_rows(const struct md_bnpool *p, int acc, long long b, long long e)
{
    int C = p->c, Q = p->w / 2;
    size_t row = (size_t)p->w * C;
    for (long long t = b; t < e; t++)
        for (int q = 0; q < Q; q++) {
            struct win w = win_at(p, t, q);
            const float *dy = p->dy + ((size_t)t * Q + (size_t)q) * C;
            float *d[4] = {p->dx + w.off, p->dx + w.off + C, p->dx + w.off + row, p->dx + w.off + row + C};
            int j = 0;
#if BV
            for (; j + BV <= C; j += BV) {
                bvec x[4];
                bmask is[4];
                bvec g = routev(&w, j, vld(p->sc + j), vld(p->sh + j), vld(dy + j), x, is);
                bvec k1 = vld(p->k1 + j), k2 = vld(p->k2 + j), k3 = vld(p->k3 + j), fk = vld(p->fk + j);
                for (int k = 0; k < 4; k++) {
                    bvec v = k1 * (vand(is[k], g) - k2 - (x[k] - fk) * k3);
                    if (acc) v = v + p->beta * vld(d[k] + j);
                    vst(d[k] + j, v);
                }
            }
#endif
            for (; j < C; j++) {
                float x[4];
                int best;
                float g = route1(&w, j, p->sc[j], p->sh[j], dy[j], x, &best);
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
    if (p->beta != 0.0f) dx_rows(p, 1, b, e);
    else dx_rows(p, 0, b, e);
}
