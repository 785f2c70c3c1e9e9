/* cpu_vec.h - short fp32 vectors for the CPU backend's memory-bound passes
 * (pooling, batch norm), in GCC/Clang vector extensions: SSE2 on baseline
 * x86-64, NEON on arm64, with no run-time dispatch.
 *
 * Why: gcc vectorises a channel loop of variable length (`for c < C`) only
 * with -O3's cost model, and not at all once it holds a select, a NaN test
 * or a store through a pointer it cannot prove apart; these passes run at a
 * fraction of the memory's rate when scalar. Written with md_vf, the loops
 * are vectors whatever the compiler's cost model.
 *
 * Same roundings as the scalar code: every lane does what the scalar loop
 * did to its element, in the same order; write each formula as the scalar
 * one (one expression `x * s + t`, so that a compiler that contracts into
 * FMA does so in both). Comparisons give masks: all ones (true) or zero per
 * lane in vectors, 1 or 0 without them; only the helpers below combine a
 * mask with values.
 *
 * Other compilers get vectors of one float (MD_VW 1): the same source,
 * plain C. */
#ifndef MD_CPU_VEC_H
#define MD_CPU_VEC_H

#include <stdint.h>
#include <string.h>

#if (defined(__GNUC__) || defined(__clang__)) && !defined(MD_CPU_NO_VEC)
#define MD_VW 4
typedef float md_vf __attribute__((vector_size(16)));   /* 4 floats */
typedef int32_t md_vi __attribute__((vector_size(16))); /* a mask, or 4 ints */

static inline md_vf md_vload(const float *p)
{
    md_vf v;
    memcpy(&v, p, sizeof v);
    return v;
}
static inline void md_vstore(float *p, md_vf v) { memcpy(p, &v, sizeof v); }
static inline md_vf md_vsplat(float x) { return (md_vf){x, x, x, x}; }
static inline md_vi md_vspliti(int32_t x) { return (md_vi){x, x, x, x}; }
/* a where m, else +0 */
static inline md_vf md_vand(md_vi m, md_vf a) { return (md_vf)(m & (md_vi)a); }
/* +0 where m, else a */
static inline md_vf md_vandnot(md_vi m, md_vf a) { return (md_vf)(~m & (md_vi)a); }
/* a where m, else b */
static inline md_vf md_vsel(md_vi m, md_vf a, md_vf b) { return (md_vf)((m & (md_vi)a) | (~m & (md_vi)b)); }
static inline md_vi md_vseli(md_vi m, md_vi a, md_vi b) { return (m & a) | (~m & b); }

/* Lanes of (a, b) by index, 0-3 from a, 4-7 from b (a and b vectors of one type). */
#if defined(__clang__) || __GNUC__ >= 12
#define MD_VSHUF(a, b, i0, i1, i2, i3) __builtin_shufflevector(a, b, i0, i1, i2, i3)
#else
#define MD_VSHUF(a, b, i0, i1, i2, i3) __builtin_shuffle(a, b, (md_vi){i0, i1, i2, i3})
#endif
/* p[0], p[2], p[4], p[6] and p[1], p[3], p[5], p[7] (both read p[0, 8)) */
static inline md_vf md_vload_even(const float *p) { return MD_VSHUF(md_vload(p), md_vload(p + 4), 0, 2, 4, 6); }
static inline md_vf md_vload_odd(const float *p) { return MD_VSHUF(md_vload(p), md_vload(p + 4), 1, 3, 5, 7); }
#else
#define MD_VW 1
typedef float md_vf;
typedef int32_t md_vi;

static inline md_vf md_vload(const float *p) { return *p; }
static inline void md_vstore(float *p, md_vf v) { *p = v; }
static inline md_vf md_vsplat(float x) { return x; }
static inline md_vi md_vspliti(int32_t x) { return x; }
static inline md_vf md_vand(md_vi m, md_vf a) { return m ? a : 0.0f; }
static inline md_vf md_vandnot(md_vi m, md_vf a) { return m ? 0.0f : a; }
static inline md_vf md_vsel(md_vi m, md_vf a, md_vf b) { return m ? a : b; }
static inline md_vi md_vseli(md_vi m, md_vi a, md_vi b) { return m ? a : b; }
#endif

/* Lane i of v as a float (the tail of a pass, the conversion to double). */
static inline float md_vlane(md_vf v, int i)
{
    float f[MD_VW];
    memcpy(f, &v, sizeof f);
    return f[i];
}

#endif
