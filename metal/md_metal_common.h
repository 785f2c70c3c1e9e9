/* md_metal_common.h - shared by every .metal file (and, through
 * metal/sim/metal_sim.h, by their Linux simulation): storage-type traits,
 * tensor indexing, the counter RNG of src/core/rng.h, erf, and the tiled
 * matrix-product engine used by gemm and the implicit-GEMM convolutions.
 *
 * Arithmetic is fp32 whatever the storage type; bf16 is stored as ushort and
 * converted with the same round-to-nearest-even as src/core/tensor.h, so bf16
 * works on every Apple GPU and macOS version (no MSL 3.1 bfloat needed).
 */
#ifndef MD_METAL_COMMON_H
#define MD_METAL_COMMON_H

#include <metal_stdlib>
#include "md_metal_args.h"

using namespace metal;

/* Explicit instantiation under a host-visible name (MLX style). The Linux
 * simulation redefines this to register the instantiation by name. */
#ifndef MD_INSTANTIATE
#define MD_INSTANTIATE(name, ...) template [[host_name(name)]] [[kernel]] decltype(__VA_ARGS__) __VA_ARGS__;
#endif
/* A plain (non-template) kernel, whose host name is its own name. */
#ifndef MD_KERNEL_NAME
#define MD_KERNEL_NAME(name, fn)
#endif

/* The thread-position and threadgroup-memory arguments every kernel takes
 * first (one signature shape for all kernels keeps the host and the
 * simulation generic). */
#ifndef MD_KARGS
#define MD_KARGS                                                                        \
    uint3 gid [[thread_position_in_grid]], uint3 lid [[thread_position_in_threadgroup]], \
    uint3 tgid [[threadgroup_position_in_grid]], uint3 tgsz [[threads_per_threadgroup]], \
    uint3 ngrp [[threadgroups_per_grid]], threadgroup float *tg [[threadgroup(0)]]
#endif

/* ---- storage types ---------------------------------------------------------- */
template <int DT> struct md_dt;
template <> struct md_dt<MD_MTL_F32> {
    typedef float S;
    static float ld(S v) { return v; }
    static S st(float v) { return v; }
};
template <> struct md_dt<MD_MTL_F16> {
    typedef half S;
    static float ld(S v) { return float(v); }
    static S st(float v) { return half(v); }
};
template <> struct md_dt<MD_MTL_BF16> {
    typedef ushort S;
    static float ld(S v) { return as_type<float>(uint(v) << 16); }
    static S st(float f)
    {
        uint u = as_type<uint>(f);
        if ((u & 0x7fffffffu) > 0x7f800000u) return ushort((u >> 16) | 0x40u);
        u += 0x7fffu + ((u >> 16) & 1u);
        return ushort(u >> 16);
    }
};
template <> struct md_dt<MD_MTL_U8> {
    typedef uchar S;
    static float ld(S v) { return float(v); }
    static S st(float v) { return uchar(clamp(rint(v), 0.0f, 255.0f)); }
};

/* ---- indexing ---------------------------------------------------------------- */
/* Activation (n, c, h, w) in NCHW or NHWC. */
inline int md_mtl_act_idx(int nhwc, int C, int H, int W, int n, int c, int h, int w)
{
    return nhwc ? ((n * H + h) * W + w) * C + c : ((n * C + c) * H + h) * W + w;
}
/* Filter (k, c, r, s): NCHW (K, C/g, R, S), NHWC (K, R, S, C/g). */
inline int md_mtl_flt_idx(int nhwc, int Cg, int R, int S, int k, int c, int r, int s)
{
    return nhwc ? ((k * R + r) * S + s) * Cg + c : ((k * Cg + c) * R + r) * S + s;
}

/* ---- counter RNG (src/core/rng.h) --------------------------------------------- */
inline ulong md_mtl_rng_hash(ulong seed, ulong counter)
{
    ulong z = seed * 0x9e3779b97f4a7c15ul + counter + 0x632be59bd9b4e019ul;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ul;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebul;
    return z ^ (z >> 31);
}
inline float md_mtl_rng_uniform(ulong seed, ulong counter)
{
    return float(md_mtl_rng_hash(seed, counter) >> 40) * (1.0f / 16777216.0f);
}

/* ---- erfc (MSL has no erf) ------------------------------------------------------
 * Chebyshev fit with fractional error < 1.2e-7 everywhere (Numerical Recipes'
 * erfcc), so GELU's Phi(x) = erfc(-x/sqrt2)/2 is accurate in both tails. */
inline float md_mtl_erfc(float x)
{
    float z = fabs(x);
    float t = 1.0f / (1.0f + 0.5f * z);
    float r = t * exp(-z * z - 1.26551223f +
                      t * (1.00002368f +
                      t * (0.37409196f +
                      t * (0.09678418f +
                      t * (-0.18628806f +
                      t * (0.27886807f +
                      t * (-1.13520398f +
                      t * (1.48851587f +
                      t * (-0.82215223f + t * 0.17087277f)))))))));
    return x >= 0.0f ? r : 2.0f - r;
}

/* Grid-stride loop over n elements (the host may cap the grid). */
#define MD_GRID_LOOP(i, n) \
    for (ulong i = gid.x, md_step_ = ulong(ngrp.x) * tgsz.x; i < (n); i += md_step_)

/* Offset of element j (of n*hw) of channel c. */
inline int md_mtl_ch_idx(int nhwc, int C, int hw, int c, int j)
{
    int ni = j / hw, i = j % hw;
    return nhwc ? (ni * hw + i) * C + c : (ni * C + c) * hw + i;
}

/* The MSL spellings of backend/act_math.h (the activations every backend
 * shares), which the shaders include after this header. */
#define MD_AM_FN inline
#define MD_AM_EXP(x) exp(x)
#define MD_AM_TANH(x) precise::tanh(x)
#define MD_AM_PHI(x) (0.5f * md_mtl_erfc(-(x) * 0.70710678118654752f))

/* ---- tiled matrix product ---------------------------------------------------------
 * C(m, n) = sum_k A(m, k) B(k, n) over one BM x BN tile per threadgroup of
 * TX x TY threads, each thread owning a (BM/TY) x (BN/TX) strided block.
 * Op supplies M, N, K, a(m, k), b(k, n) and store(m, n, acc); threadgroup
 * memory holds As[BK][BM] and Bs[BK][BN] as fp32 (8 KiB of the
 * MD_MTL_MM_TGMEM the host provides). */
#define MD_MTL_MM_RM (MD_MTL_MM_BM / MD_MTL_MM_TY)
#define MD_MTL_MM_RN (MD_MTL_MM_BN / MD_MTL_MM_TX)
#define MD_MTL_MM_NT (MD_MTL_MM_TX * MD_MTL_MM_TY)

/* One K step's tiles into threadgroup memory, zero outside the matrices:
 * A's BM x BK tile at As[mm * as_m + kk * as_k] (k-major for the scalar
 * kernel, m-major for the simdgroup one), B's BK x BN tile k-major in Bs.
 * Thread t of MD_MTL_MM_NT loads every NT-th element. */
template <typename Op>
inline void md_mtl_mm_load_tiles(thread const Op &op, threadgroup float *As, int as_m, int as_k,
                                 threadgroup float *Bs, int m0, int n0, int k0, int t)
{
    for (int idx = t; idx < MD_MTL_MM_BM * MD_MTL_MM_BK; idx += MD_MTL_MM_NT) {
        int mm = idx / MD_MTL_MM_BK, kk = idx % MD_MTL_MM_BK;
        int gm = m0 + mm, gk = k0 + kk;
        As[mm * as_m + kk * as_k] = (gm < op.M && gk < op.K) ? op.a(gm, gk) : 0.0f;
    }
    for (int idx = t; idx < MD_MTL_MM_BN * MD_MTL_MM_BK; idx += MD_MTL_MM_NT) {
        int kk = idx / MD_MTL_MM_BN, nn = idx % MD_MTL_MM_BN;
        int gk = k0 + kk, gn = n0 + nn;
        Bs[kk * MD_MTL_MM_BN + nn] = (gk < op.K && gn < op.N) ? op.b(gk, gn) : 0.0f;
    }
}

/* A thread's block of the tile: v[i][j] is C(m0 + ty + TY*i, n0 + tx + TX*j). */
struct md_mtl_mm_block {
    float v[MD_MTL_MM_RM][MD_MTL_MM_RN];
};

/* The epilogue of both engines: op.store of the block's elements inside C. */
template <typename Op>
inline void md_mtl_mm_store(thread const Op &op, thread const md_mtl_mm_block &b, int m0, int n0, int tx, int ty)
{
    for (int i = 0; i < MD_MTL_MM_RM; i++) {
        int gm = m0 + ty + MD_MTL_MM_TY * i;
        if (gm >= op.M) continue;
        for (int j = 0; j < MD_MTL_MM_RN; j++) {
            int gn = n0 + tx + MD_MTL_MM_TX * j;
            if (gn < op.N) op.store(gm, gn, b.v[i][j]);
        }
    }
}

template <typename Op>
inline void md_mtl_tiled_mm(thread const Op &op, threadgroup float *tgm, uint3 lid, uint3 tgid)
{
    threadgroup float *As = tgm;
    threadgroup float *Bs = tgm + MD_MTL_MM_BK * MD_MTL_MM_BM;
    const int tx = int(lid.x), ty = int(lid.y), t = ty * MD_MTL_MM_TX + tx;
    const int m0 = int(tgid.y) * MD_MTL_MM_BM, n0 = int(tgid.x) * MD_MTL_MM_BN;
    md_mtl_mm_block acc;
    for (int i = 0; i < MD_MTL_MM_RM; i++)
        for (int j = 0; j < MD_MTL_MM_RN; j++) acc.v[i][j] = 0.0f;
    for (int k0 = 0; k0 < op.K; k0 += MD_MTL_MM_BK) {
        md_mtl_mm_load_tiles(op, As, 1, MD_MTL_MM_BM, Bs, m0, n0, k0, t);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (int kk = 0; kk < MD_MTL_MM_BK; kk++) {
            float av[MD_MTL_MM_RM], bv[MD_MTL_MM_RN];
            for (int i = 0; i < MD_MTL_MM_RM; i++) av[i] = As[kk * MD_MTL_MM_BM + ty + MD_MTL_MM_TY * i];
            for (int j = 0; j < MD_MTL_MM_RN; j++) bv[j] = Bs[kk * MD_MTL_MM_BN + tx + MD_MTL_MM_TX * j];
            for (int i = 0; i < MD_MTL_MM_RM; i++)
                for (int j = 0; j < MD_MTL_MM_RN; j++) acc.v[i][j] += av[i] * bv[j];
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    md_mtl_mm_store(op, acc, m0, n0, tx, ty);
}

/* ---- the same with simdgroup matrices (Apple7+ GPUs) ---------------------------------
 * Eight simdgroups of 32 threads as 2 x 4, each owning a 32 x 16 block of the
 * tile as 4 x 2 8x8 fp32 accumulators; As is m-major here so 8x8 fragments
 * load with a row stride. The epilogue goes through threadgroup memory
 * (Cs, 64 x 64 floats, over As/Bs) so Op::store sees plain (m, n) elements.
 * Compiled when MD_METAL_SIMDGROUP_MM is 1 (the host sets it for Apple7+). */
#ifndef MD_METAL_SIMDGROUP_MM
#define MD_METAL_SIMDGROUP_MM 0
#endif
#if MD_METAL_SIMDGROUP_MM
template <typename Op>
inline void md_mtl_tiled_mm_sg(thread const Op &op, threadgroup float *tgm, uint3 lid, uint3 tgid)
{
    threadgroup float *As = tgm;
    threadgroup float *Bs = tgm + MD_MTL_MM_BM * MD_MTL_MM_BK;
    threadgroup float *Cs = tgm;
    const int tx = int(lid.x), ty = int(lid.y), t = ty * MD_MTL_MM_TX + tx;
    const int sg = t / 32, sm = sg / 4, sn = sg % 4;
    const int m0 = int(tgid.y) * MD_MTL_MM_BM, n0 = int(tgid.x) * MD_MTL_MM_BN;
    simdgroup_float8x8 acc[4][2];
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 2; j++) acc[i][j] = make_filled_simdgroup_matrix<float, 8, 8>(0.0f);
    for (int k0 = 0; k0 < op.K; k0 += MD_MTL_MM_BK) {
        md_mtl_mm_load_tiles(op, As, MD_MTL_MM_BK, 1, Bs, m0, n0, k0, t);
        threadgroup_barrier(mem_flags::mem_threadgroup);
        for (int k8 = 0; k8 < MD_MTL_MM_BK; k8 += 8) {
            simdgroup_float8x8 a[4], b[2];
            for (int i = 0; i < 4; i++) simdgroup_load(a[i], As + (sm * 32 + i * 8) * MD_MTL_MM_BK + k8, MD_MTL_MM_BK);
            for (int j = 0; j < 2; j++) simdgroup_load(b[j], Bs + k8 * MD_MTL_MM_BN + sn * 16 + j * 8, MD_MTL_MM_BN);
            for (int i = 0; i < 4; i++)
                for (int j = 0; j < 2; j++) simdgroup_multiply_accumulate(acc[i][j], a[i], b[j], acc[i][j]);
        }
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 2; j++)
            simdgroup_store(acc[i][j], Cs + (sm * 32 + i * 8) * MD_MTL_MM_BN + sn * 16 + j * 8, MD_MTL_MM_BN);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    md_mtl_mm_block c;
    for (int i = 0; i < MD_MTL_MM_RM; i++)
        for (int j = 0; j < MD_MTL_MM_RN; j++)
            c.v[i][j] = Cs[(ty + MD_MTL_MM_TY * i) * MD_MTL_MM_BN + tx + MD_MTL_MM_TX * j];
    md_mtl_mm_store(op, c, m0, n0, tx, ty);
}
#endif

/* Engine choice as a template parameter: 0 scalar, 1 simdgroup matrices. */
template <int SG> struct md_mtl_mm;
template <> struct md_mtl_mm<0> {
    template <typename Op>
    static void run(thread const Op &op, threadgroup float *tgm, uint3 lid, uint3 tgid)
    {
        md_mtl_tiled_mm(op, tgm, lid, tgid);
    }
};
#if MD_METAL_SIMDGROUP_MM
template <> struct md_mtl_mm<1> {
    template <typename Op>
    static void run(thread const Op &op, threadgroup float *tgm, uint3 lid, uint3 tgid)
    {
        md_mtl_tiled_mm_sg(op, tgm, lid, tgid);
    }
};
#endif

/* ---- threadgroup sum ----------------------------------------------------------------
 * Every thread passes its value; all threads get the total. nthreads is a
 * power of two; tgm holds nthreads floats. Deterministic order. */
inline float md_mtl_tg_sum(float v, threadgroup float *tgm, uint t, uint nthreads)
{
    tgm[t] = v;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint s = nthreads / 2; s > 0; s >>= 1) {
        if (t < s) tgm[t] += tgm[t + s];
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    float r = tgm[0];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    return r;
}

/* The same for the maximum. */
inline float md_mtl_tg_max(float v, threadgroup float *tgm, uint t, uint nthreads)
{
    tgm[t] = v;
    threadgroup_barrier(mem_flags::mem_threadgroup);
    for (uint s = nthreads / 2; s > 0; s >>= 1) {
        if (t < s) tgm[t] = max(tgm[t], tgm[t + s]);
        threadgroup_barrier(mem_flags::mem_threadgroup);
    }
    float r = tgm[0];
    threadgroup_barrier(mem_flags::mem_threadgroup);
    return r;
}

/* out = v + beta * out, never reading out when beta is 0 (it may hold NaN garbage). */
template <int DT>
inline void md_mtl_put(device typename md_dt<DT>::S *o, float v, float beta)
{
    if (beta != 0.0f) v += beta * md_dt<DT>::ld(*o);
    *o = md_dt<DT>::st(v);
}
inline void md_mtl_putf(device float *o, float v, float beta)
{
    if (beta != 0.0f) v += beta * *o;
    *o = v;
}

#endif
