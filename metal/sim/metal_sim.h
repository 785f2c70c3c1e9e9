/* metal_sim.h - just enough of the Metal Shading Language, in C++17, to
 * compile the .metal files of metal/ with g++ and run their kernels on the
 * CPU (tests only). Included as <metal_stdlib> (this folder is on the
 * include path of the simulation build).
 *
 * - Types: uint/ushort/uchar/ulong, uint3, half (IEEE binary16 with the
 *   same round-to-nearest-even conversions as src/core/tensor.h).
 * - Address spaces device/threadgroup/thread are empty, constant is const.
 * - Attributes ([[kernel]], [[buffer(i)]], [[thread_position_in_grid]], ...)
 *   are ignored (-Wno-attributes).
 * - threadgroup_barrier switches fibres: metal_sim_rt.cc runs the threads of
 *   a threadgroup as ucontext fibres when the kernel has barriers.
 * - MD_INSTANTIATE registers each instantiation under its host name.
 */
#ifndef MD_METAL_SIM_H
#define MD_METAL_SIM_H

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <utility>

#include "core/tensor.h"

#define MD_METAL_SIM 1

typedef unsigned int uint;
typedef unsigned short ushort;
typedef unsigned char uchar;
typedef unsigned long ulong;

struct uint3 {
    uint x, y, z;
};

struct half {
    uint16_t bits;
    half() : bits(0) {}
    explicit half(float f) : bits(md_f32_to_f16(f)) {}
    operator float() const { return md_f16_to_f32(bits); }
};

template <typename To, typename From>
inline To as_type(From v)
{
    static_assert(sizeof(To) == sizeof(From), "as_type needs equal sizes");
    To t;
    std::memcpy(&t, &v, sizeof t);
    return t;
}
template <>
inline ushort as_type<ushort, half>(half v)
{
    return v.bits;
}

namespace metal {
enum class mem_flags { mem_none = 0, mem_device = 1, mem_threadgroup = 2 };
void threadgroup_barrier(mem_flags f);
inline float exp(float x) { return std::exp(x); }
inline float log(float x) { return std::log(x); }
inline float sqrt(float x) { return std::sqrt(x); }
inline float fabs(float x) { return std::fabs(x); }
inline float rint(float x) { return std::rint(x); }
template <typename T> inline T max(T a, T b) { return a > b ? a : b; }
template <typename T> inline T min(T a, T b) { return a < b ? a : b; }
template <typename T> inline T clamp(T x, T lo, T hi) { return min(max(x, lo), hi); }
namespace precise {
inline float tanh(float x) { return std::tanh(x); }
}

/* simdgroup matrices: every thread of the simdgroup holds the whole matrix.
 * MSL requires all threads of a simdgroup to make the same calls with the
 * same arguments, so each simulated thread computing the full 8x8 result is
 * equivalent (its redundant stores write identical values). */
template <typename T, int Cols, int Rows>
struct simdgroup_matrix {
    T e[Rows][Cols];
};
typedef simdgroup_matrix<float, 8, 8> simdgroup_float8x8;
template <typename T, int Cols, int Rows>
inline simdgroup_matrix<T, Cols, Rows> make_filled_simdgroup_matrix(T v)
{
    simdgroup_matrix<T, Cols, Rows> m;
    for (int r = 0; r < Rows; r++)
        for (int c = 0; c < Cols; c++) m.e[r][c] = v;
    return m;
}
template <typename T, int Cols, int Rows>
inline void simdgroup_load(simdgroup_matrix<T, Cols, Rows> &d, const T *src, ulong elements_per_row)
{
    for (int r = 0; r < Rows; r++)
        for (int c = 0; c < Cols; c++) d.e[r][c] = src[r * elements_per_row + c];
}
template <typename T, int Cols, int Rows>
inline void simdgroup_store(const simdgroup_matrix<T, Cols, Rows> &a, T *dst, ulong elements_per_row)
{
    for (int r = 0; r < Rows; r++)
        for (int c = 0; c < Cols; c++) dst[r * elements_per_row + c] = a.e[r][c];
}
/* d = a * b + c (d may be c) */
template <typename T, int Cols, int K, int Rows>
inline void simdgroup_multiply_accumulate(simdgroup_matrix<T, Cols, Rows> &d, const simdgroup_matrix<T, K, Rows> &a,
                                          const simdgroup_matrix<T, Cols, K> &b,
                                          const simdgroup_matrix<T, Cols, Rows> &c)
{
    simdgroup_matrix<T, Cols, Rows> t;
    for (int r = 0; r < Rows; r++)
        for (int col = 0; col < Cols; col++) {
            T s = c.e[r][col];
            for (int k = 0; k < K; k++) s += a.e[r][k] * b.e[k][col];
            t.e[r][col] = s;
        }
    d = t;
}
} // namespace metal

/* ---- kernel registry ----------------------------------------------------------- */
struct md_sim_call {
    const void *params;
    void *const *bufs;
    uint3 gid, lid, tgid, tgsz, ngrp;
    float *tg;
};
typedef void (*md_sim_raw)(void);
typedef void (*md_sim_thunk)(md_sim_raw fn, const md_sim_call *c);
void md_sim_register(const char *name, md_sim_raw fn, md_sim_thunk thunk);

template <typename P, typename... B>
struct md_sim_thunk_of {
    typedef void (*F)(uint3, uint3, uint3, uint3, uint3, float *, const P &, B...);
    template <std::size_t... I>
    static void call(F f, const md_sim_call *c, std::index_sequence<I...>)
    {
        f(c->gid, c->lid, c->tgid, c->tgsz, c->ngrp, c->tg, *static_cast<const P *>(c->params),
          static_cast<B>(c->bufs[I])...);
    }
    static void run(md_sim_raw fn, const md_sim_call *c)
    {
        call(reinterpret_cast<F>(fn), c, std::index_sequence_for<B...>{});
    }
};

struct md_sim_registrar {
    template <typename P, typename... B>
    md_sim_registrar(const char *name, void (*f)(uint3, uint3, uint3, uint3, uint3, float *, const P &, B...))
    {
        md_sim_register(name, reinterpret_cast<md_sim_raw>(f), &md_sim_thunk_of<P, B...>::run);
    }
};

#define MD_SIM_CAT2(a, b) a##b
#define MD_SIM_CAT(a, b) MD_SIM_CAT2(a, b)
#define MD_INSTANTIATE(name, ...) static md_sim_registrar MD_SIM_CAT(md_sim_reg_, __COUNTER__)(name, &__VA_ARGS__);
#define MD_KERNEL_NAME(name, fn) static md_sim_registrar MD_SIM_CAT(md_sim_reg_, __COUNTER__)(name, &fn);

/* The leading kernel arguments, without attributes (an attribute named
 * threadgroup(0) would meet the address-space macro below). */
#define MD_KARGS uint3 gid, uint3 lid, uint3 tgid, uint3 tgsz, uint3 ngrp, float *tg

/* MSL address spaces. */
#define device
#define threadgroup
#define thread
#define constant const

#endif
