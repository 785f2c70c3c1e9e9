/* cuda_attn_mma.cu - scaled-dot-product attention for fp16/bf16 with
 * 32 < head_dim <= 64 (head_dim a multiple of 8, 16-byte aligned rows, no
 * dropout): the ViT and most language-model head sizes. FlashAttention-2's
 * scheme with everything between the matrix products kept in registers.
 *
 * The products are mma.sync m16n8k16 (fp32 accumulation) on operands that
 * ldmatrix reads from shared memory; the accumulator of one product is the
 * A operand of the next without leaving the registers (an m16n8 accumulator
 * pair has the layout of an m16k16 A fragment). Tiles of K and V (forward,
 * dQ) or of Q and dO (dK, dV) are double-buffered with cp.async, so the next
 * tile loads while the tensor cores work on this one. Staged rows are padded
 * to 72 elements (144 bytes): the eight rows an ldmatrix reads fall in
 * distinct banks.
 *
 * A block is 4 warps; a warp owns 16 rows of a 64-row tile.
 *   Forward: a block per (batch*head, 64 queries), over 64-key tiles:
 *     S = Q K^T, online softmax in base 2, O += P V. Writes o and the row's
 *     log-sum-exp (natural log, as every other path).
 *   Backward, two kernels and no atomics (every output has one writer and a
 *     fixed summation order, so results repeat bit for bit):
 *     dK, dV: a block per 64 keys, over query tiles: S^T = K Q^T,
 *       P^T = exp(S^T - lse), dP^T = V dO^T, dS^T = P^T (dP^T - D);
 *       dV += P^T dO, dK += dS^T Q.
 *     dQ: a block per 64 queries, over key tiles: S, P, dP = dO V^T,
 *       dS = P (dP - D), dQ += dS K.
 * cuda_attn_tc.cu hands the calls this file covers to it; its WMMA kernels
 * keep dropout and head sizes up to 128. */
#include <math.h>
#include <stdint.h>

#include "cuda_attn.cuh"
#include "cuda_attn_mma.cuh"

#define AM_B 64        /* rows of a tile */
#define AM_THREADS 128 /* 4 warps */
#define AM_LD 72       /* staged row: 64 elements + 8 of padding */
#define AM_TILE (AM_B * AM_LD)
#define AM_LOG2E 1.4426950408889634f
#define AM_LN2 0.6931471805599453f

/* ---- PTX wrappers ---------------------------------------------------------- */

__device__ __forceinline__ uint32_t am_smem(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* 16 bytes global -> shared; src_bytes 0 writes zeros (rows past the end). */
__device__ __forceinline__ void am_cp16(void *dst, const void *src, int src_bytes)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(am_smem(dst)), "l"(src), "r"(src_bytes));
}
__device__ __forceinline__ void am_commit(void) { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void am_wait(void) { asm volatile("cp.async.wait_group %0;\n" ::"n"(N)); }

__device__ __forceinline__ void am_ldsm4(uint32_t (&r)[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(am_smem(p)));
}
__device__ __forceinline__ void am_ldsm4t(uint32_t (&r)[4], const void *p)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(am_smem(p)));
}

/* 2^x by the special-function unit (ex2.approx: relative error ~2^-22,
 * far below the fp16/bf16 rounding of P; 2^-inf = 0). The accurate exp2f
 * costs several instructions per score, and at head_dim 64 the exponentials
 * are a large part of the work. */
__device__ __forceinline__ float am_exp2(float x)
{
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}

/* c (16x8 fp32) += a (16x16) . b (16x8) */
template <class T> __device__ __forceinline__ void am_mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
template <>
__device__ __forceinline__ void am_mma<__nv_bfloat16>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
template <>
__device__ __forceinline__ void am_mma<__half>(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/* Two floats rounded to T, packed low first. */
template <class T> __device__ __forceinline__ uint32_t am_pack(float lo, float hi);
template <> __device__ __forceinline__ uint32_t am_pack<__nv_bfloat16>(float lo, float hi)
{
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *(uint32_t *)&v;
}
template <> __device__ __forceinline__ uint32_t am_pack<__half>(float lo, float hi)
{
    __half2 v = __floats2half2_rn(lo, hi);
    return *(uint32_t *)&v;
}

/* ---- tiles and fragments --------------------------------------------------- */

/* Starts copying rows [r0, r0 + 64) of a strided tensor into a staged tile;
 * zeros beyond n rows and d columns. */
template <class T>
__device__ __forceinline__ void am_load(T *dst, const T *src, const long long s[3], int bh, int heads, int r0, int n,
                                        int d)
{
    for (int x = threadIdx.x; x < AM_B * 8; x += AM_THREADS) {
        int r = x >> 3, c = (x & 7) * 8;
        bool in = r0 + r < n && c < d;
        am_cp16(dst + r * AM_LD + c, in ? (const void *)(src + att_at(s, bh, heads, r0 + r) + c) : (const void *)src,
                in ? 16 : 0);
    }
}

/* Starts loading key tile k1 of K and V into the other buffer when there is
 * one (more), then waits for tile buf and for every thread to see it. */
template <class T>
__device__ __forceinline__ void am_next_kv(T *Ks, T *Vs, int buf, bool more, const T *k, const T *v, const attn_p &p,
                                           int bh, int k1)
{
    if (more) {
        am_load<T>(Ks + (buf ^ 1) * AM_TILE, k, p.sk, bh, p.heads, k1, p.tk, p.d);
        am_load<T>(Vs + (buf ^ 1) * AM_TILE, v, p.sv, bh, p.heads, k1, p.tk, p.d);
        am_commit();
        am_wait<1>();
    } else {
        am_wait<0>();
    }
    __syncthreads();
}

/* A fragments (16 rows from row0, the 4 k-steps of 16 columns) of a staged tile. */
template <class T> __device__ __forceinline__ void am_frag_a(uint32_t (&a)[4][4], const T *tile, int row0)
{
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int kk = 0; kk < 4; kk++) am_ldsm4(a[kk], tile + (row0 + (lane & 15)) * AM_LD + kk * 16 + (lane >> 4) * 8);
}

/* c (16 x 64) = a (16 x 64) . B^T, B a staged (64 rows, 64 columns) tile:
 * the B operand of n-tile j is rows [8j, 8j + 8) (ldmatrix, no transpose). */
template <class T> __device__ __forceinline__ void am_abT(float (&c)[8][4], const uint32_t (&a)[4][4], const T *B)
{
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int j = 0; j < 8; j++) c[j][0] = c[j][1] = c[j][2] = c[j][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
#pragma unroll
        for (int np = 0; np < 4; np++) {
            uint32_t b[4];
            am_ldsm4(b, B + (np * 16 + (lane & 7) + (lane >> 4) * 8) * AM_LD + kk * 16 + ((lane >> 3) & 1) * 8);
            am_mma<T>(c[2 * np], a[kk], b[0], b[1]);
            am_mma<T>(c[2 * np + 1], a[kk], b[2], b[3]);
        }
}

/* acc (16 x 64) += a (16 x 64, as the 4 k-steps) . B, B a staged (64, 64)
 * tile read k-major (ldmatrix with transpose). */
template <class T> __device__ __forceinline__ void am_ab(float (&acc)[8][4], const uint32_t (&a)[4][4], const T *B)
{
    int lane = threadIdx.x & 31;
#pragma unroll
    for (int kk = 0; kk < 4; kk++)
#pragma unroll
        for (int dp = 0; dp < 4; dp++) {
            uint32_t b[4];
            am_ldsm4t(b, B + (kk * 16 + (lane & 15)) * AM_LD + dp * 16 + (lane >> 4) * 8);
            am_mma<T>(acc[2 * dp], a[kk], b[0], b[1]);
            am_mma<T>(acc[2 * dp + 1], a[kk], b[2], b[3]);
        }
}

/* The A fragments of a (16 x 64) accumulator, rounded to T. */
template <class T> __device__ __forceinline__ void am_to_a(uint32_t (&a)[4][4], const float (&c)[8][4])
{
#pragma unroll
    for (int kk = 0; kk < 4; kk++) {
        a[kk][0] = am_pack<T>(c[2 * kk][0], c[2 * kk][1]);
        a[kk][1] = am_pack<T>(c[2 * kk][2], c[2 * kk][3]);
        a[kk][2] = am_pack<T>(c[2 * kk + 1][0], c[2 * kk + 1][1]);
        a[kk][3] = am_pack<T>(c[2 * kk + 1][2], c[2 * kk + 1][3]);
    }
}

/* Writes a warp's (16 x 64) accumulator to rows [row0, row0 + 16) of a
 * strided tensor: x * mul[half] (+ beta * old); rows below n, columns below d.
 * Thread (g, t) holds rows g and g + 8, columns 8j + 2t and 8j + 2t + 1. */
template <class T>
__device__ __forceinline__ void am_store(T *dst, const long long s[3], int bh, int heads, int row0, int n, int d,
                                         const float (&c)[8][4], const float mul[2], float beta)
{
    int lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
#pragma unroll
    for (int h = 0; h < 2; h++) {
        int row = row0 + g + 8 * h;
        if (row >= n) continue;
        T *at = dst + att_at(s, bh, heads, row);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            int col = 8 * j + 2 * t;
            if (col >= d) continue;
            float x0 = c[j][2 * h] * mul[h], x1 = c[j][2 * h + 1] * mul[h];
            if (beta != 0.0f) x0 += beta * tof(at[col]), x1 += beta * tof(at[col + 1]);
            *(uint32_t *)(at + col) = am_pack<T>(x0, x1);
        }
    }
}

/* ---- forward --------------------------------------------------------------- */

#define AM_FWD_SMEM (5 * AM_TILE * 2) /* Q, then K and V twice */

template <class T>
__global__ void __launch_bounds__(AM_THREADS)
    k_attn_mma_fwd(attn_p p, const T *q, const T *k, const T *v, T *o, float *lse)
{
    extern __shared__ __align__(128) unsigned char am_sm[];
    T *Qs = (T *)am_sm, *Ks = Qs + AM_TILE, *Vs = Ks + 2 * AM_TILE;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int ntiles = (p.tq + AM_B - 1) / AM_B, bh = blockIdx.x / ntiles, q0 = blockIdx.x % ntiles * AM_B;
    const int kend = p.causal ? min(p.tk, q0 + AM_B) : p.tk, nk = (kend + AM_B - 1) / AM_B;
    const int row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
    const float sl2 = p.scale * AM_LOG2E;

    am_load<T>(Qs, q, p.sq, bh, p.heads, q0, p.tq, p.d);
    am_load<T>(Ks, k, p.sk, bh, p.heads, 0, p.tk, p.d);
    am_load<T>(Vs, v, p.sv, bh, p.heads, 0, p.tk, p.d);
    am_commit();

    uint32_t qa[4][4];
    float acc[8][4];
#pragma unroll
    for (int j = 0; j < 8; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

    for (int kt = 0; kt < nk; kt++) {
        const int buf = kt & 1, k0 = kt * AM_B;
        am_next_kv<T>(Ks, Vs, buf, kt + 1 < nk, k, v, p, bh, k0 + AM_B);
        if (kt == 0) am_frag_a<T>(qa, Qs, warp * 16);

        float s[8][4];
        am_abT<T>(s, qa, Ks + buf * AM_TILE);
        float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int col = k0 + 8 * j + 2 * t + (e & 1), h = e >> 1;
                float x = s[j][e] * sl2;
                if (col >= p.tk || (p.causal && col > row[h])) x = -INFINITY;
                s[j][e] = x;
                mx[h] = fmaxf(mx[h], x);
            }
        float corr[2], base[2];
#pragma unroll
        for (int h = 0; h < 2; h++) {
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
            float mn = fmaxf(m[h], mx[h]);
            base[h] = mn == -INFINITY ? 0.0f : mn;
            corr[h] = am_exp2(m[h] - base[h]); /* 0 on the first tile that sees a key */
            m[h] = mn;
            l[h] *= corr[h];
        }
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int h = e >> 1;
                float pj = am_exp2(s[j][e] - base[h]);
                l[h] += pj;
                s[j][e] = pj;
                acc[j][e] *= corr[h];
            }
        uint32_t pa[4][4];
        am_to_a<T>(pa, s);
        am_ab<T>(acc, pa, Vs + buf * AM_TILE);
        __syncthreads(); /* the other buffer is refilled next */
    }
    float inv[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
        inv[h] = l[h] > 0.0f ? 1.0f / l[h] : 0.0f;
        if (lse && t == 0 && row[h] < p.tq) lse[(size_t)bh * p.tq + row[h]] = (m[h] + log2f(l[h])) * AM_LN2;
    }
    am_store<T>(o, p.so, bh, p.heads, q0 + warp * 16, p.tq, p.d, acc, inv, 0.0f);
}

/* ---- backward -------------------------------------------------------------- */

/* Two fixed tiles, two double-buffered ones, and lse and D of a query tile twice. */
#define AM_BWD_SMEM (6 * AM_TILE * 2 + 4 * AM_B * 4)
#ifndef AM_BWD_BLOCKS
#define AM_BWD_BLOCKS 3 /* blocks per SM the dK, dV kernel is compiled for (registers <= 168) */
#endif

/* dK, dV: a block per (batch*head, 64 keys); warp w owns keys [16w, 16w + 16). */
template <class T>
__global__ void __launch_bounds__(AM_THREADS, AM_BWD_BLOCKS)
    k_attn_mma_bwd_kv(attn_p p, const T *q, const T *k, const T *v, const T *dout, const float *lse, const float *D,
                      T *dk, T *dv)
{
    extern __shared__ __align__(128) unsigned char am_sm[];
    T *Ks = (T *)am_sm, *Vs = Ks + AM_TILE, *Qs = Vs + AM_TILE, *Gs = Qs + 2 * AM_TILE;
    float *Ls = (float *)(Gs + 2 * AM_TILE), *Dsm = Ls + 2 * AM_B;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int ntiles = (p.tk + AM_B - 1) / AM_B, bh = blockIdx.x / ntiles, k0 = blockIdx.x % ntiles * AM_B;
    const int key[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};
    const float sl2 = p.scale * AM_LOG2E;
    const int i_first = p.causal ? k0 / AM_B * AM_B : 0, nq = (p.tq - i_first + AM_B - 1) / AM_B;

    am_load<T>(Ks, k, p.sk, bh, p.heads, k0, p.tk, p.d);
    am_load<T>(Vs, v, p.sv, bh, p.heads, k0, p.tk, p.d);
    auto stage = [&](int it, int buf) {
        int i0 = i_first + it * AM_B;
        am_load<T>(Qs + buf * AM_TILE, q, p.sq, bh, p.heads, i0, p.tq, p.d);
        am_load<T>(Gs + buf * AM_TILE, dout, p.so, bh, p.heads, i0, p.tq, p.d);
        for (int x = threadIdx.x; x < AM_B; x += AM_THREADS) {
            bool in = i0 + x < p.tq;
            Ls[buf * AM_B + x] = in ? lse[(size_t)bh * p.tq + i0 + x] * AM_LOG2E : 0.0f;
            Dsm[buf * AM_B + x] = in ? D[(size_t)bh * p.tq + i0 + x] : 0.0f;
        }
    };
    if (nq > 0) stage(0, 0);
    am_commit();

    float dka[8][4], dva[8][4];
#pragma unroll
    for (int j = 0; j < 8; j++)
#pragma unroll
        for (int e = 0; e < 4; e++) dka[j][e] = dva[j][e] = 0.0f;

    for (int it = 0; it < nq; it++) {
        const int buf = it & 1, i0 = i_first + it * AM_B;
        if (it + 1 < nq) {
            stage(it + 1, buf ^ 1);
            am_commit();
            am_wait<1>();
        } else {
            am_wait<0>();
        }
        __syncthreads();
        const T *Qb = Qs + buf * AM_TILE, *Gb = Gs + buf * AM_TILE;
        const float *Lb = Ls + buf * AM_B, *Db = Dsm + buf * AM_B;

        /* this warp's K and V rows are read from shared memory each time:
         * holding them in registers would leave room for two blocks an SM, not three */
        float pt[8][4], dpt[8][4];
        uint32_t a[4][4];
        am_frag_a<T>(a, Ks, warp * 16);
        am_abT<T>(pt, a, Qb); /* S^T: (16 keys, 64 queries) */
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int c = 8 * j + 2 * t + (e & 1), i = i0 + c;
                bool seen = i < p.tq && !(p.causal && key[e >> 1] > i);
                pt[j][e] = seen ? am_exp2(fmaf(pt[j][e], sl2, -Lb[c])) : 0.0f;
            }
        am_frag_a<T>(a, Vs, warp * 16);
        am_abT<T>(dpt, a, Gb); /* dP^T */
        am_to_a<T>(a, pt);
        am_ab<T>(dva, a, Gb); /* dV += P^T dO */
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) dpt[j][e] = pt[j][e] * (dpt[j][e] - Db[8 * j + 2 * t + (e & 1)]);
        am_to_a<T>(a, dpt);
        am_ab<T>(dka, a, Qb); /* dK += dS^T Q */
        __syncthreads();
    }
    am_wait<0>(); /* nq 0 (causal, keys after every query): K and V were never waited for */
    const float one[2] = {1.0f, 1.0f}, sc[2] = {p.scale, p.scale};
    if (dk) am_store<T>(dk, p.sk, bh, p.heads, k0 + warp * 16, p.tk, p.d, dka, sc, p.beta);
    if (dv) am_store<T>(dv, p.sv, bh, p.heads, k0 + warp * 16, p.tk, p.d, dva, one, p.beta);
}

/* dQ: a block per (batch*head, 64 queries); warp w owns queries [16w, 16w + 16). */
template <class T>
__global__ void __launch_bounds__(AM_THREADS)
    k_attn_mma_bwd_q(attn_p p, const T *q, const T *k, const T *v, const T *dout, const float *lse, const float *D,
                     T *dq)
{
    extern __shared__ __align__(128) unsigned char am_sm[];
    T *Qs = (T *)am_sm, *Gs = Qs + AM_TILE, *Ks = Gs + AM_TILE, *Vs = Ks + 2 * AM_TILE;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const int ntiles = (p.tq + AM_B - 1) / AM_B, bh = blockIdx.x / ntiles, q0 = blockIdx.x % ntiles * AM_B;
    const int kend = p.causal ? min(p.tk, q0 + AM_B) : p.tk, nk = (kend + AM_B - 1) / AM_B;
    const int row[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
    const float sl2 = p.scale * AM_LOG2E;
    float L[2], Dr[2];
#pragma unroll
    for (int h = 0; h < 2; h++) {
        L[h] = row[h] < p.tq ? lse[(size_t)bh * p.tq + row[h]] * AM_LOG2E : 0.0f;
        Dr[h] = row[h] < p.tq ? D[(size_t)bh * p.tq + row[h]] : 0.0f;
    }

    am_load<T>(Qs, q, p.sq, bh, p.heads, q0, p.tq, p.d);
    am_load<T>(Gs, dout, p.so, bh, p.heads, q0, p.tq, p.d);
    am_load<T>(Ks, k, p.sk, bh, p.heads, 0, p.tk, p.d);
    am_load<T>(Vs, v, p.sv, bh, p.heads, 0, p.tk, p.d);
    am_commit();

    uint32_t qa[4][4], ga[4][4];
    float dqa[8][4];
#pragma unroll
    for (int j = 0; j < 8; j++) dqa[j][0] = dqa[j][1] = dqa[j][2] = dqa[j][3] = 0.0f;

    for (int kt = 0; kt < nk; kt++) {
        const int buf = kt & 1, k0 = kt * AM_B;
        am_next_kv<T>(Ks, Vs, buf, kt + 1 < nk, k, v, p, bh, k0 + AM_B);
        if (kt == 0) am_frag_a<T>(qa, Qs, warp * 16), am_frag_a<T>(ga, Gs, warp * 16);
        const T *Kb = Ks + buf * AM_TILE, *Vb = Vs + buf * AM_TILE;

        float s[8][4], dp[8][4];
        am_abT<T>(s, qa, Kb);
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int col = k0 + 8 * j + 2 * t + (e & 1), h = e >> 1;
                bool seen = col < p.tk && !(p.causal && col > row[h]);
                s[j][e] = seen ? am_exp2(fmaf(s[j][e], sl2, -L[h])) : 0.0f;
            }
        am_abT<T>(dp, ga, Vb); /* dP = dO V^T */
#pragma unroll
        for (int j = 0; j < 8; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) dp[j][e] = s[j][e] * (dp[j][e] - Dr[e >> 1]);
        uint32_t a[4][4];
        am_to_a<T>(a, dp);
        am_ab<T>(dqa, a, Kb); /* dQ += dS K */
        __syncthreads();
    }
    const float sc[2] = {p.scale, p.scale};
    am_store<T>(dq, p.sq, bh, p.heads, q0 + warp * 16, p.tq, p.d, dqa, sc, p.beta);
}

/* ---- host side ------------------------------------------------------------- */

static int am_aligned(const void *x) { return x == NULL || ((uintptr_t)x & 15u) == 0; }

int md_cuda_attn_mma_covers(const struct md_attn_args *a, int bwd)
{
    if ((a->dtype != MD_F16 && a->dtype != MD_BF16) || a->d <= 32 || a->d > 64 || a->d % 8 || a->dropout_p > 0.0f)
        return 0;
    long long s[4][3];
    md_attn_strides(a->sq, a->heads, a->tq, a->d, s[0]);
    md_attn_strides(a->sk, a->heads, a->tk, a->d, s[1]);
    md_attn_strides(a->sv, a->heads, a->tk, a->d, s[2]);
    md_attn_strides(a->so, a->heads, a->tq, a->d, s[3]);
    for (int x = 0; x < 4; x++)
        for (int y = 0; y < 3; y++)
            if (s[x][y] % 8) return 0;
    if (!am_aligned(a->q) || !am_aligned(a->k) || !am_aligned(a->v) || !am_aligned(a->o)) return 0;
    return !bwd || (am_aligned(a->d_o) && am_aligned(a->dq) && am_aligned(a->dk) && am_aligned(a->dv));
}

#define AM_DISPATCH(dt, ...)                                                                       \
    do {                                                                                           \
        if ((dt) == MD_F16) { typedef __half T; __VA_ARGS__; }                                     \
        else { typedef __nv_bfloat16 T; __VA_ARGS__; }                                             \
    } while (0)

md_status md_cuda_attn_mma_fwd(md_device *dev, const struct md_attn_args *a, const attn_p *p)
{
    unsigned blocks = (unsigned)(a->batch * a->heads * ((a->tq + AM_B - 1) / AM_B));
    cudaStream_t s = md_cuda_impl(dev)->stream;
    AM_DISPATCH(a->dtype, {
        MD_CU_TRY(cudaFuncSetAttribute(k_attn_mma_fwd<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, AM_FWD_SMEM),
                  "attn_fwd (mma): shared memory");
        k_attn_mma_fwd<T><<<blocks, AM_THREADS, AM_FWD_SMEM, s>>>(*p, (const T *)a->q, (const T *)a->k,
                                                                  (const T *)a->v, (T *)a->o, a->lse);
    });
    return md_cuda_check_launch("attn_fwd (mma)");
}

md_status md_cuda_attn_mma_bwd(md_device *dev, const struct md_attn_args *a, const attn_p *p, const float *D)
{
    int bh = a->batch * a->heads;
    unsigned qblocks = (unsigned)(bh * ((a->tq + AM_B - 1) / AM_B)),
             kblocks = (unsigned)(bh * ((a->tk + AM_B - 1) / AM_B));
    cudaStream_t s = md_cuda_impl(dev)->stream;
    AM_DISPATCH(a->dtype, {
        const T *q = (const T *)a->q, *k = (const T *)a->k, *v = (const T *)a->v, *g = (const T *)a->d_o;
        if (a->dk || a->dv) {
            MD_CU_TRY(cudaFuncSetAttribute(k_attn_mma_bwd_kv<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           AM_BWD_SMEM),
                      "attn_bwd (mma): shared memory");
            k_attn_mma_bwd_kv<T><<<kblocks, AM_THREADS, AM_BWD_SMEM, s>>>(*p, q, k, v, g, a->lse, D, (T *)a->dk,
                                                                          (T *)a->dv);
            MD_TRY(md_cuda_check_launch("attn_bwd (mma, dk, dv)"));
        }
        if (a->dq) {
            MD_CU_TRY(cudaFuncSetAttribute(k_attn_mma_bwd_q<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           AM_BWD_SMEM),
                      "attn_bwd (mma): shared memory");
            k_attn_mma_bwd_q<T><<<qblocks, AM_THREADS, AM_BWD_SMEM, s>>>(*p, q, k, v, g, a->lse, D, (T *)a->dq);
        }
    });
    return md_cuda_check_launch("attn_bwd (mma, dq)");
}
