/* cuda_attn_tc.cu - scaled-dot-product attention on the tensor cores, in the
 * manner of FlashAttention-2, for fp16/bf16 storage and 32 < head_dim <= 128
 * (padded to DP = 64 or 128). The matrix products run as WMMA 16x16x16
 * fragments with fp32 accumulation; softmax statistics, logsumexp and the
 * gradients' elementwise parts are fp32. cuda_attn.cu dispatches here and
 * keeps its SIMT kernels for fp32 and the other head sizes. Calls that
 * cuda_attn_mma.cu covers (head_dim <= 64, no dropout) go there.
 *
 * A block is 4 warps; a warp owns 16 rows of a 64-row tile. Tiles are staged
 * in shared memory as T (rows padded by 8 elements against bank conflicts).
 *   Forward: a block per (batch*head, 64 queries), looping over 64-key tiles
 *     of K and V: S = Q K^T into shared fp32, online softmax (base 2) per row
 *     by two lanes, P (dropout applied, rounded to T) back to shared, the
 *     output accumulator rescaled and O += P V on the tensor cores. Writes o
 *     and the row's logsumexp.
 *   Backward, two kernels, no atomics (every output has one writer and a fixed
 *     summation order, so results repeat bit for bit):
 *     dK, dV: a block per 64 keys, looping over query tiles: S^T = K Q^T,
 *       P^T from the forward's lse, dP^T = V dO^T, dS^T = P^T (dP^T keep - D);
 *       dV += (P^T keep) dO, dK += dS^T Q.
 *     dQ: a block per 64 queries, looping over key tiles: S, P, dP as above,
 *       dQ += dS K. (This recomputes S and dP once more than an atomic dQ
 *       would: 8 matrix products instead of 5.)
 *
 * Fragment layouts: the element order inside a WMMA fragment is unspecified.
 * Products leave the tensor cores through store_matrix_sync into shared
 * memory and are read back elementwise; the one exception is the forward's
 * per-row rescale of the output accumulator, which needs each accumulator
 * element's row: found at run time by loading a matrix whose entries are
 * their own row numbers into a fragment of the same type (tc_rowmap). */
#include <math.h>
#include <mma.h>

#include "cuda_attn.cuh"
#include "cuda_attn_mma.cuh"

using namespace nvcuda;

#define TC_B 64                 /* rows of a query or key tile */
#define TC_W 4                  /* warps per block, 16 rows each */
#define TC_THREADS (TC_W * 32)
#define TC_LDP (TC_B + 8)       /* leading dimension of per-warp T tiles (16, 64): P, dS */
#define TC_LDS (TC_B + 4)       /* leading dimension of per-warp fp32 tiles (16, 64): S, dP */
#define TC_LOG2E 1.4426950408889634f
#define TC_LN2 0.6931471805599453f

typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> tc_acc;
template <class T> using tc_a = wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major>;
template <class T> using tc_brow = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::row_major>;
template <class T> using tc_bcol = wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major>;

/* Leading dimensions of a staged (64, DP) T tile and of a warp's (16, DP) fp32
 * output tile. Every 16-row or 16-column step stays 32-byte aligned, as
 * load/store_matrix_sync require. */
template <int DP> struct tc_ld { enum { T_ = DP + 8, O = DP + 4 }; };

/* Stages rows [r0, r0 + 64) of a strided tensor into dst (64, DP), zero beyond
 * t rows and d columns. vec: d, every stride and the base are multiples of 8
 * elements / 16 bytes, so rows move as 16-byte vectors. */
template <class T, int DP>
__device__ __forceinline__ void tc_stage(T *dst, const T *src, const long long s[3], int bh, int heads, int r0, int t,
                                         int d, int vec)
{
    const int LD = tc_ld<DP>::T_;
    if (vec) {
        const int CPR = DP / 8;
        for (int x = threadIdx.x; x < TC_B * CPR; x += blockDim.x) {
            int r = x / CPR, c = x % CPR * 8;
            uint4 val = make_uint4(0u, 0u, 0u, 0u);
            if (r0 + r < t && c < d) val = *(const uint4 *)(src + att_at(s, bh, heads, r0 + r) + c);
            *(uint4 *)(dst + r * LD + c) = val;
        }
    } else {
        for (int x = threadIdx.x; x < TC_B * DP; x += blockDim.x) {
            int r = x / DP, c = x % DP;
            dst[r * LD + c] = r0 + r < t && c < d ? src[att_at(s, bh, heads, r0 + r) + c] : fromf<T>(0.0f);
        }
    }
}

/* A warp's A fragments of rows [0, 16) of a staged (64, DP) tile. */
template <class T, int DP>
__device__ __forceinline__ void tc_load_a(tc_a<T> (&a)[DP / 16], const T *rows)
{
#pragma unroll
    for (int kk = 0; kk < DP / 16; kk++) wmma::load_matrix_sync(a[kk], rows + kk * 16, tc_ld<DP>::T_);
}

/* C (16, 64) fp32, ld TC_LDS = A (16, DP) . B^T, B a staged (64, DP) tile. */
template <class T, int DP>
__device__ __forceinline__ void tc_abT(float *C, const tc_a<T> (&a)[DP / 16], const T *B)
{
    const int LD = tc_ld<DP>::T_;
    tc_acc c[TC_B / 16];
#pragma unroll
    for (int n = 0; n < TC_B / 16; n++) wmma::fill_fragment(c[n], 0.0f);
#pragma unroll
    for (int kk = 0; kk < DP / 16; kk++) {
#pragma unroll
        for (int n = 0; n < TC_B / 16; n++) {
            /* B^T as a column-major (DP, 64) matrix: element (k, n) at B[n * LD + k] */
            tc_bcol<T> b;
            wmma::load_matrix_sync(b, B + n * 16 * LD + kk * 16, LD);
            wmma::mma_sync(c[n], a[kk], b, c[n]);
        }
    }
#pragma unroll
    for (int n = 0; n < TC_B / 16; n++) wmma::store_matrix_sync(C + n * 16, c[n], TC_LDS, wmma::mem_row_major);
}

/* acc (16, DP) += A (16, 64) T, ld TC_LDP . B, B a staged (64, DP) tile. */
template <class T, int DP>
__device__ __forceinline__ void tc_ab(tc_acc (&acc)[DP / 16], const T *A, const T *B)
{
    const int LD = tc_ld<DP>::T_;
#pragma unroll
    for (int kk = 0; kk < TC_B / 16; kk++) {
        tc_a<T> a;
        wmma::load_matrix_sync(a, A + kk * 16, TC_LDP);
#pragma unroll
        for (int n = 0; n < DP / 16; n++) {
            tc_brow<T> b;
            wmma::load_matrix_sync(b, B + kk * 16 * LD + n * 16, LD);
            wmma::mma_sync(acc[n], a, b, acc[n]);
        }
    }
}

/* rowof[e] = the row (0..15) that element e of every tc_acc holds: loads a
 * 16x16 matrix whose entries are their row numbers. scratch: this warp's
 * 16 x TC_LDS floats (overwritten). */
__device__ __forceinline__ void tc_rowmap(float *scratch, int (&rowof)[tc_acc::num_elements])
{
    int lane = threadIdx.x & 31;
    for (int x = lane; x < 256; x += 32) scratch[x / 16 * TC_LDS + x % 16] = (float)(x / 16);
    __syncwarp();
    tc_acc f;
    wmma::load_matrix_sync(f, scratch, TC_LDS, wmma::mem_row_major);
#pragma unroll
    for (int e = 0; e < tc_acc::num_elements; e++) rowof[e] = (int)f.x[e];
    __syncwarp();
}

/* Writes a warp's 16 rows [row0, row0 + 16) of a (16, DP) fp32 result to the
 * strided dst: x * mul(row) (+ beta * old), rows below t. S: 16 x LDO floats
 * holding acc (this warp's scratch). mul: per-row factors (16) or NULL. */
template <class T, int DP>
__device__ __forceinline__ void tc_write(T *dst, const long long s[3], int bh, int heads, int row0, int t, int d,
                                         float *S, const tc_acc (&acc)[DP / 16], const float *mul, float scale,
                                         float beta)
{
    const int LDO = tc_ld<DP>::O;
    int lane = threadIdx.x & 31;
    __syncwarp();
#pragma unroll
    for (int n = 0; n < DP / 16; n++) wmma::store_matrix_sync(S + n * 16, acc[n], LDO, wmma::mem_row_major);
    __syncwarp();
    for (int rr = 0; rr < 16 && row0 + rr < t; rr++) {
        long long at = att_at(s, bh, heads, row0 + rr);
        float f = scale * (mul ? mul[rr] : 1.0f);
        for (int c = lane; c < d; c += 32) {
            float x = S[rr * LDO + c] * f;
            if (beta != 0.0f) x += beta * tof(dst[at + c]);
            dst[at + c] = fromf<T>(x);
        }
    }
    __syncwarp();
}

/* ---------------------------------------------------------------------------
 * Forward
 * ------------------------------------------------------------------------- */

template <class T, int DP> static size_t tc_fwd_smem(void)
{
    return 3 * (size_t)TC_B * tc_ld<DP>::T_ * sizeof(T)         /* Q, K, V */
           + (size_t)TC_W * 16 * tc_ld<DP>::O * sizeof(float)   /* S per warp; the output at the end */
           + (size_t)TC_W * 16 * TC_LDP * sizeof(T)             /* P per warp */
           + (size_t)TC_W * 16 * sizeof(float);                 /* row factors per warp */
}

template <class T, int DP>
__global__ void __launch_bounds__(TC_THREADS)
    k_attn_tc_fwd(attn_p p, int vec, const T *q, const T *k, const T *v, T *o, float *lse)
{
    const int LD = tc_ld<DP>::T_, LDO = tc_ld<DP>::O;
    extern __shared__ __align__(128) unsigned char tc_sm[];
    T *Qs = (T *)tc_sm, *Ks = Qs + TC_B * LD, *Vs = Ks + TC_B * LD;
    float *Ss = (float *)(Vs + TC_B * LD);
    T *Ps = (T *)(Ss + TC_W * 16 * LDO);
    float *Fs = (float *)(Ps + TC_W * 16 * TC_LDP);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *Sw = Ss + warp * 16 * LDO, *Fw = Fs + warp * 16;
    T *Pw = Ps + warp * 16 * TC_LDP;
    const int ntiles = (p.tq + TC_B - 1) / TC_B, bh = blockIdx.x / ntiles, q0 = blockIdx.x % ntiles * TC_B;
    const uint64_t off = p.offset + (p.offset_dev ? *p.offset_dev : 0);
    /* elementwise work: lane owns row r of the warp's 16, columns c0, c0 + 2, ... */
    const int r = lane >> 1, c0 = lane & 1, i = q0 + warp * 16 + r;
    const float sl2 = p.scale * TC_LOG2E;

    int rowof[tc_acc::num_elements];
    tc_rowmap(Sw, rowof);
    tc_stage<T, DP>(Qs, q, p.sq, bh, p.heads, q0, p.tq, p.d, vec);
    __syncthreads();
    tc_a<T> qa[DP / 16];
    tc_load_a<T, DP>(qa, Qs + warp * 16 * LD);
    tc_acc acc[DP / 16];
#pragma unroll
    for (int n = 0; n < DP / 16; n++) wmma::fill_fragment(acc[n], 0.0f);

    float m = -INFINITY, l = 0.0f; /* running max (log2 units) and this lane's part of the row sum */
    const int kend = p.causal ? min(p.tk, q0 + TC_B) : p.tk;
    for (int k0 = 0; k0 < kend; k0 += TC_B) {
        __syncthreads();
        tc_stage<T, DP>(Ks, k, p.sk, bh, p.heads, k0, p.tk, p.d, vec);
        tc_stage<T, DP>(Vs, v, p.sv, bh, p.heads, k0, p.tk, p.d, vec);
        __syncthreads();
        tc_abT<T, DP>(Sw, qa, Ks);
        __syncwarp();
        float sv[TC_B / 2], tmax = -INFINITY;
#pragma unroll
        for (int t = 0; t < TC_B / 2; t++) {
            int c = c0 + 2 * t, j = k0 + c;
            float s = Sw[r * TC_LDS + c] * sl2;
            if (i >= p.tq || j >= p.tk || (p.causal && j > i)) s = -INFINITY;
            sv[t] = s;
            tmax = fmaxf(tmax, s);
        }
        tmax = fmaxf(tmax, __shfl_xor_sync(0xffffffffu, tmax, 1));
        const float mn = fmaxf(m, tmax), base = mn == -INFINITY ? 0.0f : mn;
        const float corr = exp2f(m - base); /* 0 on the first tile that sees a key */
        l *= corr;
#pragma unroll
        for (int t = 0; t < TC_B / 2; t++) {
            int c = c0 + 2 * t;
            float pj = exp2f(sv[t] - base);
            l += pj;
            if (p.dropout && pj != 0.0f) pj *= att_keep(p, off, bh, i, k0 + c);
            Pw[r * TC_LDP + c] = fromf<T>(pj);
        }
        if (!c0) Fw[r] = corr;
        m = mn;
        __syncwarp();
#pragma unroll
        for (int n = 0; n < DP / 16; n++)
#pragma unroll
            for (int e = 0; e < tc_acc::num_elements; e++) acc[n].x[e] *= Fw[rowof[e]];
        tc_ab<T, DP>(acc, Pw, Vs);
        __syncwarp();
    }
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    __syncwarp();
    if (!c0) {
        Fw[r] = l > 0.0f ? 1.0f / l : 0.0f;
        if (lse && i < p.tq) lse[(size_t)bh * p.tq + i] = (m + log2f(l)) * TC_LN2;
    }
    tc_write<T, DP>(o, p.so, bh, p.heads, q0 + warp * 16, p.tq, p.d, Sw, acc, Fw, 1.0f, 0.0f);
}

/* ---------------------------------------------------------------------------
 * Backward
 * ------------------------------------------------------------------------- */

/* Two blocks fit on an SM at DP 128 (2 x 104 KiB): the (16, DP) fp32 output
 * tiles, 4 x 16 x (DP + 4) floats, reuse the Q, dO (or K, V) tiles after the loop. */
template <class T, int DP> static size_t tc_bwd_smem(void)
{
    static_assert(TC_W * 16 * tc_ld<DP>::O * sizeof(float) <= 2 * TC_B * tc_ld<DP>::T_ * sizeof(T),
                  "output tiles fit in two staged tiles");
    return 4 * (size_t)TC_B * tc_ld<DP>::T_ * sizeof(T)         /* two staged pairs: K, V and Q, dO */
           + (size_t)TC_W * 16 * TC_LDS * sizeof(float)         /* S, then dP, per warp */
           + 2 * (size_t)TC_W * 16 * TC_LDP * sizeof(T)         /* P keep and dS per warp */
           + 2 * (size_t)TC_B * sizeof(float);                  /* lse (log2 units) and D of a query tile */
}

/* dK, dV: a block per (batch*head, 64 keys); warp w owns keys [16w, 16w + 16). */
template <class T, int DP>
__global__ void __launch_bounds__(TC_THREADS)
    k_attn_tc_bwd_kv(attn_p p, int vec, const T *q, const T *k, const T *v, const T *dout, const float *lse,
                     const float *D, T *dk, T *dv)
{
    const int LD = tc_ld<DP>::T_, LDO = tc_ld<DP>::O;
    extern __shared__ __align__(128) unsigned char tc_sm[];
    T *Ks = (T *)tc_sm, *Vs = Ks + TC_B * LD, *Qs = Vs + TC_B * LD, *Gs = Qs + TC_B * LD;
    float *Ss = (float *)(Gs + TC_B * LD);
    T *Pks = (T *)(Ss + TC_W * 16 * TC_LDS), *dSs = Pks + TC_W * 16 * TC_LDP;
    float *Ls = (float *)(dSs + TC_W * 16 * TC_LDP), *Dsm = Ls + TC_B;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *Sw = Ss + warp * 16 * TC_LDS;
    T *Pw = Pks + warp * 16 * TC_LDP, *dSw = dSs + warp * 16 * TC_LDP;
    const int ntiles = (p.tk + TC_B - 1) / TC_B, bh = blockIdx.x / ntiles, k0 = blockIdx.x % ntiles * TC_B;
    const uint64_t off = p.offset + (p.offset_dev ? *p.offset_dev : 0);
    const int r = lane >> 1, c0 = lane & 1, j = k0 + warp * 16 + r; /* this lane's key */
    const float sl2 = p.scale * TC_LOG2E;

    tc_stage<T, DP>(Ks, k, p.sk, bh, p.heads, k0, p.tk, p.d, vec);
    tc_stage<T, DP>(Vs, v, p.sv, bh, p.heads, k0, p.tk, p.d, vec);
    tc_acc dka[DP / 16], dva[DP / 16];
#pragma unroll
    for (int n = 0; n < DP / 16; n++) wmma::fill_fragment(dka[n], 0.0f), wmma::fill_fragment(dva[n], 0.0f);

    /* causal: queries before k0 see none of these keys */
    for (int i0 = p.causal ? k0 : 0; i0 < p.tq; i0 += TC_B) {
        __syncthreads();
        tc_stage<T, DP>(Qs, q, p.sq, bh, p.heads, i0, p.tq, p.d, vec);
        tc_stage<T, DP>(Gs, dout, p.so, bh, p.heads, i0, p.tq, p.d, vec);
        for (int x = threadIdx.x; x < TC_B; x += blockDim.x) {
            bool in = i0 + x < p.tq;
            Ls[x] = in ? lse[(size_t)bh * p.tq + i0 + x] * TC_LOG2E : 0.0f;
            Dsm[x] = in ? D[(size_t)bh * p.tq + i0 + x] : 0.0f;
        }
        __syncthreads();
        float pv[TC_B / 2];
        {
            tc_a<T> a[DP / 16];
            tc_load_a<T, DP>(a, Ks + warp * 16 * LD);
            tc_abT<T, DP>(Sw, a, Qs); /* S^T: (16 keys, 64 queries) */
        }
        __syncwarp();
#pragma unroll
        for (int t = 0; t < TC_B / 2; t++) {
            int c = c0 + 2 * t, i = i0 + c;
            bool seen = i < p.tq && j < p.tk && !(p.causal && j > i);
            pv[t] = seen ? exp2f(Sw[r * TC_LDS + c] * sl2 - Ls[c]) : 0.0f;
        }
        __syncwarp();
        {
            tc_a<T> a[DP / 16];
            tc_load_a<T, DP>(a, Vs + warp * 16 * LD);
            tc_abT<T, DP>(Sw, a, Gs); /* dP^T */
        }
        __syncwarp();
#pragma unroll
        for (int t = 0; t < TC_B / 2; t++) {
            int c = c0 + 2 * t;
            float keep = p.dropout && pv[t] != 0.0f ? att_keep(p, off, bh, i0 + c, j) : 1.0f;
            Pw[r * TC_LDP + c] = fromf<T>(pv[t] * keep);
            dSw[r * TC_LDP + c] = fromf<T>(pv[t] * (Sw[r * TC_LDS + c] * keep - Dsm[c]));
        }
        __syncwarp();
        tc_ab<T, DP>(dva, Pw, Gs);
        tc_ab<T, DP>(dka, dSw, Qs);
    }
    __syncthreads(); /* Q and dO free: the output tiles */
    const int row0 = k0 + warp * 16;
    float *Ow = (float *)Qs + warp * 16 * LDO;
    if (dk) tc_write<T, DP>(dk, p.sk, bh, p.heads, row0, p.tk, p.d, Ow, dka, NULL, p.scale, p.beta);
    if (dv) tc_write<T, DP>(dv, p.sv, bh, p.heads, row0, p.tk, p.d, Ow, dva, NULL, 1.0f, p.beta);
}

/* dQ: a block per (batch*head, 64 queries); warp w owns queries [16w, 16w + 16). */
template <class T, int DP>
__global__ void __launch_bounds__(TC_THREADS)
    k_attn_tc_bwd_q(attn_p p, int vec, const T *q, const T *k, const T *v, const T *dout, const float *lse,
                    const float *D, T *dq)
{
    const int LD = tc_ld<DP>::T_, LDO = tc_ld<DP>::O;
    extern __shared__ __align__(128) unsigned char tc_sm[];
    T *Qs = (T *)tc_sm, *Gs = Qs + TC_B * LD, *Ks = Gs + TC_B * LD, *Vs = Ks + TC_B * LD;
    float *Ss = (float *)(Vs + TC_B * LD);
    T *dSs = (T *)(Ss + TC_W * 16 * TC_LDS);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    float *Sw = Ss + warp * 16 * TC_LDS;
    T *dSw = dSs + warp * 16 * TC_LDP;
    const int ntiles = (p.tq + TC_B - 1) / TC_B, bh = blockIdx.x / ntiles, q0 = blockIdx.x % ntiles * TC_B;
    const uint64_t off = p.offset + (p.offset_dev ? *p.offset_dev : 0);
    const int r = lane >> 1, c0 = lane & 1, i = q0 + warp * 16 + r; /* this lane's query */
    const float sl2 = p.scale * TC_LOG2E;
    const float Li = i < p.tq ? lse[(size_t)bh * p.tq + i] * TC_LOG2E : 0.0f;
    const float Di = i < p.tq ? D[(size_t)bh * p.tq + i] : 0.0f;

    tc_stage<T, DP>(Qs, q, p.sq, bh, p.heads, q0, p.tq, p.d, vec);
    tc_stage<T, DP>(Gs, dout, p.so, bh, p.heads, q0, p.tq, p.d, vec);
    tc_acc dqa[DP / 16];
#pragma unroll
    for (int n = 0; n < DP / 16; n++) wmma::fill_fragment(dqa[n], 0.0f);

    const int kend = p.causal ? min(p.tk, q0 + TC_B) : p.tk;
    for (int k0 = 0; k0 < kend; k0 += TC_B) {
        __syncthreads();
        tc_stage<T, DP>(Ks, k, p.sk, bh, p.heads, k0, p.tk, p.d, vec);
        tc_stage<T, DP>(Vs, v, p.sv, bh, p.heads, k0, p.tk, p.d, vec);
        __syncthreads();
        float pv[TC_B / 2];
        {
            tc_a<T> a[DP / 16];
            tc_load_a<T, DP>(a, Qs + warp * 16 * LD);
            tc_abT<T, DP>(Sw, a, Ks); /* S: (16 queries, 64 keys) */
        }
        __syncwarp();
#pragma unroll
        for (int t = 0; t < TC_B / 2; t++) {
            int c = c0 + 2 * t, j = k0 + c;
            bool seen = i < p.tq && j < p.tk && !(p.causal && j > i);
            pv[t] = seen ? exp2f(Sw[r * TC_LDS + c] * sl2 - Li) : 0.0f;
        }
        __syncwarp();
        {
            tc_a<T> a[DP / 16];
            tc_load_a<T, DP>(a, Gs + warp * 16 * LD);
            tc_abT<T, DP>(Sw, a, Vs); /* dP */
        }
        __syncwarp();
#pragma unroll
        for (int t = 0; t < TC_B / 2; t++) {
            int c = c0 + 2 * t;
            float keep = p.dropout && pv[t] != 0.0f ? att_keep(p, off, bh, i, k0 + c) : 1.0f;
            dSw[r * TC_LDP + c] = fromf<T>(pv[t] * (Sw[r * TC_LDS + c] * keep - Di));
        }
        __syncwarp();
        tc_ab<T, DP>(dqa, dSw, Ks);
    }
    __syncthreads(); /* K and V free: the output tiles */
    tc_write<T, DP>(dq, p.sq, bh, p.heads, q0 + warp * 16, p.tq, p.d, (float *)Ks + warp * 16 * LDO, dqa, NULL,
                    p.scale, p.beta);
}

/* ---------------------------------------------------------------------------
 * Host side
 * ------------------------------------------------------------------------- */

int md_cuda_attn_tc_covers(const struct md_attn_args *a)
{
    return (a->dtype == MD_F16 || a->dtype == MD_BF16) && a->d > 32 && a->d <= 128;
}

static int tc_aligned(const void *x) { return x == NULL || ((uintptr_t)x & 15u) == 0; }

/* 1 when every tile row can move as 16-byte vectors. */
static int tc_vec(const struct md_attn_args *a, const attn_p *p, int bwd)
{
    if (a->d % 8) return 0;
    const long long *s[4] = {p->sq, p->sk, p->sv, p->so};
    for (int t = 0; t < 4; t++)
        for (int x = 0; x < 3; x++)
            if (s[t][x] % 8) return 0;
    if (!tc_aligned(a->q) || !tc_aligned(a->k) || !tc_aligned(a->v) || !tc_aligned(a->o)) return 0;
    return !bwd || tc_aligned(a->d_o);
}

#define TC_DISPATCH(dt, dp, ...)                                                                   \
    do {                                                                                           \
        if ((dt) == MD_F16) {                                                                      \
            typedef __half T;                                                                      \
            if ((dp) == 64) { const int DP = 64; __VA_ARGS__; } else { const int DP = 128; __VA_ARGS__; } \
        } else {                                                                                   \
            typedef __nv_bfloat16 T;                                                               \
            if ((dp) == 64) { const int DP = 64; __VA_ARGS__; } else { const int DP = 128; __VA_ARGS__; } \
        }                                                                                          \
    } while (0)

md_status md_cuda_attn_tc_fwd(md_device *dev, const struct md_attn_args *a, const attn_p *p)
{
    if (md_cuda_attn_mma_covers(a, 0)) return md_cuda_attn_mma_fwd(dev, a, p);
    unsigned blocks = (unsigned)(a->batch * a->heads * ((a->tq + TC_B - 1) / TC_B));
    int dp = a->d <= 64 ? 64 : 128, vec = tc_vec(a, p, 0);
    cudaStream_t s = md_cuda_impl(dev)->stream;
    TC_DISPATCH(a->dtype, dp, {
        size_t sm = tc_fwd_smem<T, DP>();
        MD_CU_TRY(cudaFuncSetAttribute(k_attn_tc_fwd<T, DP>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)sm),
                  "attn_fwd (tensor cores): shared memory");
        k_attn_tc_fwd<T, DP><<<blocks, TC_THREADS, sm, s>>>(*p, vec, (const T *)a->q, (const T *)a->k,
                                                            (const T *)a->v, (T *)a->o, a->lse);
    });
    return md_cuda_check_launch("attn_fwd (tensor cores)");
}

md_status md_cuda_attn_tc_bwd(md_device *dev, const struct md_attn_args *a, const attn_p *p, const float *D)
{
    if (md_cuda_attn_mma_covers(a, 1)) return md_cuda_attn_mma_bwd(dev, a, p, D);
    int bh = a->batch * a->heads;
    unsigned qblocks = (unsigned)(bh * ((a->tq + TC_B - 1) / TC_B)),
             kblocks = (unsigned)(bh * ((a->tk + TC_B - 1) / TC_B));
    int dp = a->d <= 64 ? 64 : 128, vec = tc_vec(a, p, 1);
    cudaStream_t s = md_cuda_impl(dev)->stream;
    TC_DISPATCH(a->dtype, dp, {
        size_t sm = tc_bwd_smem<T, DP>();
        const T *q = (const T *)a->q, *k = (const T *)a->k, *v = (const T *)a->v, *g = (const T *)a->d_o;
        if (a->dk || a->dv) {
            MD_CU_TRY(cudaFuncSetAttribute(k_attn_tc_bwd_kv<T, DP>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)sm),
                      "attn_bwd (tensor cores): shared memory");
            k_attn_tc_bwd_kv<T, DP><<<kblocks, TC_THREADS, sm, s>>>(*p, vec, q, k, v, g, a->lse, D, (T *)a->dk,
                                                                    (T *)a->dv);
            MD_TRY(md_cuda_check_launch("attn_bwd (tensor cores, dk, dv)"));
        }
        if (a->dq) {
            MD_CU_TRY(cudaFuncSetAttribute(k_attn_tc_bwd_q<T, DP>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           (int)sm),
                      "attn_bwd (tensor cores): shared memory");
            k_attn_tc_bwd_q<T, DP><<<qblocks, TC_THREADS, sm, s>>>(*p, vec, q, k, v, g, a->lse, D, (T *)a->dq);
        }
    });
    return md_cuda_check_launch("attn_bwd (tensor cores, dq)");
}
