/* cuda_attn.cu - softmax over the last dimension, and scaled-dot-product
 * attention in the flash-attention manner, SIMT (CUDA cores, fp32
 * arithmetic and accumulation for fp32/fp16/bf16 storage), and the choice of
 * attention path (attn_path): short sequences go to cuBLAS products
 * (cuda_attn_gemm.cu), fp16/bf16 with 32 < head_dim <= 128 to the
 * tensor-core kernels of cuda_attn_tc.cu; the kernels here run the rest.
 *
 * Forward: a block of ATT_BQ threads per (batch*head, tile of ATT_BQ
 * queries), one query row per thread (q and the output accumulator in
 * registers, head_dim padded to DP = 16/32/64/128). Tiles of BK keys and
 * values are staged in shared memory as fp32; per tile each thread scores
 * its row against the tile, then rescales its running max, sum and
 * accumulator once (online softmax). Writes o and the row's logsumexp.
 * Backward (FlashAttention-2's recomputation, without atomics):
 *   1. D_i = dO_i . o_i, a thread per row, into scratch;
 *   2. dK, dV: a block per (batch*head, tile of keys), a key row per thread,
 *      the query tiles (q, dO, lse, D) staged in shared memory; P recomputed
 *      from lse;
 *   3. dQ: a block per (batch*head, tile of queries), a query row per
 *      thread, key/value tiles in shared memory.
 * Every output element has one writer and a fixed summation order, so
 * results repeat bit for bit. Nothing larger than one tile of weights is
 * ever formed. */
#include <math.h>
#include <string.h>

#include "cuda_attn.cuh"

/* ---------------------------------------------------------------------------
 * Softmax: a block per row
 * ------------------------------------------------------------------------- */

#define SM_THREADS 256

__device__ __forceinline__ float block_max(float v)
{
    __shared__ float sh[32];
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    __syncthreads();
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

template <class T>
__global__ void k_softmax_fwd(int rows, int n, int causal, int tq, float scale, const T *x, T *y, float beta)
{
    int r = blockIdx.x;
    if (r >= rows) return;
    const T *xr = x + (size_t)r * n;
    T *yr = y + (size_t)r * n;
    int last = causal ? min(r % tq, n - 1) : n - 1;
    float m = -INFINITY;
    for (int j = threadIdx.x; j <= last; j += blockDim.x) m = fmaxf(m, scale * tof(xr[j]));
    m = block_max(m);
    float s = 0.0f;
    for (int j = threadIdx.x; j <= last; j += blockDim.x) s += expf(scale * tof(xr[j]) - m);
    float inv = 1.0f / block_sum(s);
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        float v = j <= last ? expf(scale * tof(xr[j]) - m) * inv : 0.0f;
        if (beta != 0.0f) v += beta * tof(yr[j]);
        yr[j] = fromf<T>(v);
    }
}

template <class T>
__global__ void k_softmax_bwd(int rows, int n, float scale, const T *y, const T *dy, T *dx, float beta)
{
    int r = blockIdx.x;
    if (r >= rows) return;
    size_t o = (size_t)r * n;
    float s = 0.0f;
    for (int j = threadIdx.x; j < n; j += blockDim.x) s += tof(dy[o + j]) * tof(y[o + j]);
    s = block_sum(s);
    for (int j = threadIdx.x; j < n; j += blockDim.x) {
        float v = scale * tof(y[o + j]) * (tof(dy[o + j]) - s);
        if (beta != 0.0f) v += beta * tof(dx[o + j]);
        dx[o + j] = fromf<T>(v);
    }
}

static md_status softmax_run(md_device *dev, const struct md_softmax_args *a, int bwd)
{
    const char *op = bwd ? "softmax_bwd" : "softmax_fwd";
    if (a->causal && a->tq <= 0) return md_errf(MD_ERR_INTERNAL, "cuda %s: causal mask needs tq > 0", op);
    if (a->rows <= 0 || a->n <= 0) return MD_OK;
    float scale = a->scale != 0.0f ? a->scale : 1.0f;
    cudaStream_t s = md_cuda_impl(dev)->stream;
    MD_CU_DISPATCH(a->dtype, op, {
        if (bwd)
            k_softmax_bwd<T><<<a->rows, SM_THREADS, 0, s>>>(a->rows, a->n, scale, (const T *)a->y, (const T *)a->dy,
                                                            (T *)a->dx, a->beta);
        else
            k_softmax_fwd<T><<<a->rows, SM_THREADS, 0, s>>>(a->rows, a->n, a->causal, a->tq, scale, (const T *)a->x,
                                                            (T *)a->y, a->beta);
    });
    return md_cuda_check_launch(op);
}

md_status md_cuda_softmax_fwd(md_device *dev, const struct md_softmax_args *a) { return softmax_run(dev, a, 0); }
md_status md_cuda_softmax_bwd(md_device *dev, const struct md_softmax_args *a) { return softmax_run(dev, a, 1); }

/* ---------------------------------------------------------------------------
 * Attention
 * ------------------------------------------------------------------------- */

#define ATT_BQ 64 /* query rows per block (threads per block) */

/* Rows of fp32 staged per tile so that a K and a V tile (or a Q and a dO tile)
 * take 32 KiB of shared memory. */
template <int DP> struct att_tile { enum { N = DP <= 64 ? 64 : 32 }; };

/* Stages rows [r0, r0 + N) of a strided tensor as fp32 (N, DP), zero beyond t and d. */
template <class T, int DP, int N>
__device__ __forceinline__ void att_stage(float (*dst)[DP], const T *src, const long long s[3], int bh, int heads,
                                          int r0, int t, int d)
{
    for (int x = threadIdx.x; x < N * DP; x += blockDim.x) {
        int r = x / DP, e = x % DP;
        dst[r][e] = r0 + r < t && e < d ? tof(src[att_at(s, bh, heads, r0 + r) + e]) : 0.0f;
    }
}

template <class T, int DP>
__global__ void __launch_bounds__(ATT_BQ) k_attn_fwd(attn_p p, const T *q, const T *k, const T *v, T *o, float *lse)
{
    const int BK = att_tile<DP>::N;
    __shared__ float Ks[BK][DP], Vs[BK][DP];
    int ntiles = (p.tq + ATT_BQ - 1) / ATT_BQ, bh = blockIdx.x / ntiles, q0 = (blockIdx.x % ntiles) * ATT_BQ;
    int i = q0 + threadIdx.x;
    bool live = i < p.tq;
    uint64_t off = p.offset + (p.offset_dev ? *p.offset_dev : 0);
    float qr[DP], acc[DP];
    long long oq = live ? att_at(p.sq, bh, p.heads, i) : 0;
#pragma unroll
    for (int e = 0; e < DP; e++) {
        qr[e] = live && e < p.d ? tof(q[oq + e]) * p.scale : 0.0f;
        acc[e] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    int kend = p.causal ? min(p.tk, q0 + ATT_BQ) : p.tk;
    for (int k0 = 0; k0 < kend; k0 += BK) {
        __syncthreads();
        att_stage<T, DP, BK>(Ks, k, p.sk, bh, p.heads, k0, p.tk, p.d);
        att_stage<T, DP, BK>(Vs, v, p.sv, bh, p.heads, k0, p.tk, p.d);
        __syncthreads();
        if (!live) continue;
        int jn = min(BK, kend - k0);
        if (p.causal) jn = min(jn, i - k0 + 1);
        if (jn <= 0) continue;
        float sc[BK], tmax = -INFINITY;
#pragma unroll
        for (int jj = 0; jj < BK; jj++) {
            float s = -INFINITY;
            if (jj < jn) {
                s = 0.0f;
#pragma unroll
                for (int e = 0; e < DP; e++) s += qr[e] * Ks[jj][e];
            }
            sc[jj] = s;
            tmax = fmaxf(tmax, s);
        }
        float mn = fmaxf(m, tmax), corr = expf(m - mn); /* m = -inf at first: corr 0 */
        l *= corr;
#pragma unroll
        for (int e = 0; e < DP; e++) acc[e] *= corr;
#pragma unroll
        for (int jj = 0; jj < BK; jj++) {
            if (jj < jn) {
                float pj = expf(sc[jj] - mn);
                l += pj;
                pj *= att_keep(p, off, bh, i, k0 + jj);
#pragma unroll
                for (int e = 0; e < DP; e++) acc[e] += pj * Vs[jj][e];
            }
        }
        m = mn;
    }
    if (!live) return;
    float inv = 1.0f / l;
    long long oo = att_at(p.so, bh, p.heads, i);
#pragma unroll
    for (int e = 0; e < DP; e++)
        if (e < p.d) o[oo + e] = fromf<T>(acc[e] * inv);
    if (lse) lse[(size_t)bh * p.tq + i] = m + logf(l);
}

/* D_i = dO_i . o_i, a thread per row */
template <class T>
__global__ void k_attn_bwd_dot(attn_p p, int nrows, const T *o, const T *dout, float *D)
{
    GRID_STRIDE(r, (size_t)nrows)
    {
        int bh = (int)(r / p.tq), i = (int)(r % p.tq);
        long long oo = att_at(p.so, bh, p.heads, i);
        float s = 0.0f;
        for (int e = 0; e < p.d; e++) s += tof(dout[oo + e]) * tof(o[oo + e]);
        D[r] = s;
    }
}

/* dK, dV: a key row per thread, the queries that see it in tiles */
template <class T, int DP>
__global__ void __launch_bounds__(ATT_BQ) k_attn_bwd_kv(attn_p p, const T *q, const T *k, const T *v,
                                                        const T *dout, const float *lse, const float *D, T *dk, T *dv)
{
    const int BQ = att_tile<DP>::N;
    __shared__ float Qs[BQ][DP], Gs[BQ][DP], Ls[BQ], Ds[BQ];
    int ntiles = (p.tk + ATT_BQ - 1) / ATT_BQ, bh = blockIdx.x / ntiles, k0 = (blockIdx.x % ntiles) * ATT_BQ;
    int j = k0 + threadIdx.x;
    bool live = j < p.tk;
    uint64_t off = p.offset + (p.offset_dev ? *p.offset_dev : 0);
    float kr[DP], vr[DP], dkr[DP], dvr[DP];
    long long ok = live ? att_at(p.sk, bh, p.heads, j) : 0, ov = live ? att_at(p.sv, bh, p.heads, j) : 0;
#pragma unroll
    for (int e = 0; e < DP; e++) {
        kr[e] = live && e < p.d ? tof(k[ok + e]) * p.scale : 0.0f;
        vr[e] = live && e < p.d ? tof(v[ov + e]) : 0.0f;
        dkr[e] = dvr[e] = 0.0f;
    }
    int qbeg = p.causal ? min(k0, p.tq) : 0; /* queries before k0 see none of this block's keys */
    qbeg = qbeg / BQ * BQ;
    for (int i0 = qbeg; i0 < p.tq; i0 += BQ) {
        __syncthreads();
        att_stage<T, DP, BQ>(Qs, q, p.sq, bh, p.heads, i0, p.tq, p.d);
        att_stage<T, DP, BQ>(Gs, dout, p.so, bh, p.heads, i0, p.tq, p.d);
        for (int x = threadIdx.x; x < BQ; x += blockDim.x) {
            Ls[x] = i0 + x < p.tq ? lse[(size_t)bh * p.tq + i0 + x] : 0.0f;
            Ds[x] = i0 + x < p.tq ? D[(size_t)bh * p.tq + i0 + x] : 0.0f;
        }
        __syncthreads();
        if (!live) continue;
        int in = min(BQ, p.tq - i0);
        for (int ii = 0; ii < in; ii++) {
            int i = i0 + ii;
            if (p.causal && j > i) continue;
            float s = 0.0f, dp = 0.0f;
#pragma unroll
            for (int e = 0; e < DP; e++) {
                s += kr[e] * Qs[ii][e];
                dp += vr[e] * Gs[ii][e];
            }
            float pij = expf(s - Ls[ii]), keep = att_keep(p, off, bh, i, j);
            float pd = pij * keep, ds = pij * (dp * keep - Ds[ii]);
#pragma unroll
            for (int e = 0; e < DP; e++) {
                dvr[e] += pd * Gs[ii][e];
                dkr[e] += ds * Qs[ii][e];
            }
        }
    }
    if (!live) return;
#pragma unroll
    for (int e = 0; e < DP; e++) {
        if (e >= p.d) continue;
        if (dk) {
            float x = dkr[e] * p.scale;
            if (p.beta != 0.0f) x += p.beta * tof(dk[ok + e]);
            dk[ok + e] = fromf<T>(x);
        }
        if (dv) {
            float x = dvr[e];
            if (p.beta != 0.0f) x += p.beta * tof(dv[ov + e]);
            dv[ov + e] = fromf<T>(x);
        }
    }
}

/* dQ: a query row per thread, key/value tiles in shared memory */
template <class T, int DP>
__global__ void __launch_bounds__(ATT_BQ) k_attn_bwd_q(attn_p p, const T *q, const T *k, const T *v,
                                                       const T *dout, const float *lse, const float *D, T *dq)
{
    const int BK = att_tile<DP>::N;
    __shared__ float Ks[BK][DP], Vs[BK][DP];
    int ntiles = (p.tq + ATT_BQ - 1) / ATT_BQ, bh = blockIdx.x / ntiles, q0 = (blockIdx.x % ntiles) * ATT_BQ;
    int i = q0 + threadIdx.x;
    bool live = i < p.tq;
    uint64_t off = p.offset + (p.offset_dev ? *p.offset_dev : 0);
    float qr[DP], gr[DP], dqr[DP];
    long long oq = live ? att_at(p.sq, bh, p.heads, i) : 0, oo = live ? att_at(p.so, bh, p.heads, i) : 0;
#pragma unroll
    for (int e = 0; e < DP; e++) {
        qr[e] = live && e < p.d ? tof(q[oq + e]) * p.scale : 0.0f;
        gr[e] = live && e < p.d ? tof(dout[oo + e]) : 0.0f;
        dqr[e] = 0.0f;
    }
    float L = live ? lse[(size_t)bh * p.tq + i] : 0.0f, Di = live ? D[(size_t)bh * p.tq + i] : 0.0f;
    int kend = p.causal ? min(p.tk, q0 + ATT_BQ) : p.tk;
    for (int k0 = 0; k0 < kend; k0 += BK) {
        __syncthreads();
        att_stage<T, DP, BK>(Ks, k, p.sk, bh, p.heads, k0, p.tk, p.d);
        att_stage<T, DP, BK>(Vs, v, p.sv, bh, p.heads, k0, p.tk, p.d);
        __syncthreads();
        if (!live) continue;
        int jn = min(BK, kend - k0);
        if (p.causal) jn = min(jn, i - k0 + 1);
        for (int jj = 0; jj < jn; jj++) {
            float s = 0.0f, dp = 0.0f;
#pragma unroll
            for (int e = 0; e < DP; e++) {
                s += qr[e] * Ks[jj][e];
                dp += gr[e] * Vs[jj][e];
            }
            float pij = expf(s - L), ds = pij * (dp * att_keep(p, off, bh, i, k0 + jj) - Di);
#pragma unroll
            for (int e = 0; e < DP; e++) dqr[e] += ds * Ks[jj][e];
        }
    }
    if (!live) return;
#pragma unroll
    for (int e = 0; e < DP; e++) {
        if (e >= p.d) continue;
        float x = dqr[e] * p.scale;
        if (p.beta != 0.0f) x += p.beta * tof(dq[oq + e]);
        dq[oq + e] = fromf<T>(x);
    }
}

static md_status attn_prep(const char *op, const struct md_attn_args *a, attn_p *p, int *dp)
{
    if (a->batch < 0 || a->heads < 0 || a->tq < 0 || a->tk < 1 || a->d < 1)
        return md_errf(MD_ERR_INTERNAL, "cuda %s: bad shape batch %d heads %d tq %d tk %d d %d", op, a->batch,
                       a->heads, a->tq, a->tk, a->d);
    if (!(a->dropout_p >= 0.0f && a->dropout_p <= 1.0f))
        return md_errf(MD_ERR_INTERNAL, "cuda %s: dropout %g outside [0, 1]", op, (double)a->dropout_p);
    if (a->d > 128) return md_errf(MD_ERR_UNSUPPORTED, "cuda %s: head_dim %d (at most 128)", op, a->d);
    *dp = a->d <= 16 ? 16 : a->d <= 32 ? 32 : a->d <= 64 ? 64 : 128;
    memset(p, 0, sizeof *p);
    md_attn_strides(a->sq, a->heads, a->tq, a->d, p->sq);
    md_attn_strides(a->sk, a->heads, a->tk, a->d, p->sk);
    md_attn_strides(a->sv, a->heads, a->tk, a->d, p->sv);
    md_attn_strides(a->so, a->heads, a->tq, a->d, p->so);
    p->heads = a->heads, p->tq = a->tq, p->tk = a->tk, p->d = a->d, p->causal = a->causal != 0;
    p->dropout = a->dropout_p > 0.0f;
    p->scale = md_attn_scale(a), p->p = a->dropout_p, p->beta = a->beta;
    p->keep_scale = a->dropout_p < 1.0f ? (float)(1.0 / (1.0 - (double)a->dropout_p)) : 0.0f;
    p->seed = a->seed, p->offset = a->offset, p->offset_dev = a->offset_dev;
    return MD_OK;
}

/* The path that runs a call: the call's own (md_attn_args.path), else
 * MPSDIAG_ATTN, else GEMM up to MD_ATTN_GEMM_MAX_T tokens; GEMM only where
 * its alignment holds, FLASH meaning the tensor cores where they apply. */
static int attn_path(md_device *dev, const struct md_attn_args *a)
{
    int want = a->path ? a->path : md_cuda_impl(dev)->attn_path;
    if (want == MD_ATTN_SIMT) return MD_ATTN_SIMT;
    if ((want == MD_ATTN_GEMM || (want == MD_ATTN_AUTO && a->tq <= MD_ATTN_GEMM_MAX_T && a->tk <= MD_ATTN_GEMM_MAX_T)) &&
        md_cuda_attn_gemm_covers(a))
        return MD_ATTN_GEMM;
    return md_cuda_attn_tc_covers(a) ? MD_ATTN_FLASH : MD_ATTN_SIMT;
}

#define ATT_DP_DISPATCH(dp, ...)                                                                   \
    switch (dp) {                                                                                  \
    case 16: { const int DP = 16; __VA_ARGS__; } break;                                            \
    case 32: { const int DP = 32; __VA_ARGS__; } break;                                            \
    case 64: { const int DP = 64; __VA_ARGS__; } break;                                            \
    default: { const int DP = 128; __VA_ARGS__; } break;                                           \
    }

md_status md_cuda_attn_fwd(md_device *dev, const struct md_attn_args *a)
{
    attn_p p;
    int dp;
    MD_TRY(attn_prep("attn_fwd", a, &p, &dp));
    int bh = a->batch * a->heads;
    if (!bh || !a->tq) return MD_OK;
    unsigned blocks = (unsigned)(bh * ((a->tq + ATT_BQ - 1) / ATT_BQ));
    int path = attn_path(dev, a);
    if (path == MD_ATTN_GEMM) return md_cuda_attn_gemm_fwd(dev, a, &p);
    if (path == MD_ATTN_FLASH) return md_cuda_attn_tc_fwd(dev, a, &p);
    cudaStream_t s = md_cuda_impl(dev)->stream;
    MD_CU_DISPATCH(a->dtype, "attn_fwd", {
        ATT_DP_DISPATCH(dp, k_attn_fwd<T, DP><<<blocks, ATT_BQ, 0, s>>>(p, (const T *)a->q, (const T *)a->k,
                                                                       (const T *)a->v, (T *)a->o, a->lse));
    });
    return md_cuda_check_launch("attn_fwd");
}

md_status md_cuda_attn_bwd(md_device *dev, const struct md_attn_args *a)
{
    struct md_cuda_dev *cd = md_cuda_impl(dev);
    attn_p p;
    int dp;
    MD_TRY(attn_prep("attn_bwd", a, &p, &dp));
    if (!a->lse) return md_errf(MD_ERR_INTERNAL, "cuda attn_bwd: needs the forward's logsumexp (lse)");
    int bh = a->batch * a->heads;
    if (!bh || !a->tq) {
        /* no query: dk = dv = 0 (+ beta * old) would need a kernel; callers never ask */
        return bh && (a->dk || a->dv) ? md_errf(MD_ERR_UNSUPPORTED, "cuda attn_bwd: tq 0") : MD_OK;
    }
    int nrows = bh * a->tq;
    MD_TRY(md_cuda_scratch_get(dev, &cd->aux_ws, (size_t)nrows * sizeof(float), "attention row sums"));
    float *D = (float *)cd->aux_ws.ptr;
    unsigned qblocks = (unsigned)(bh * ((a->tq + ATT_BQ - 1) / ATT_BQ)),
             kblocks = (unsigned)(bh * ((a->tk + ATT_BQ - 1) / ATT_BQ));
    MD_CU_DISPATCH(a->dtype, "attn_bwd", {
        k_attn_bwd_dot<T><<<md_cu_blocks(dev, (size_t)nrows), MD_THREADS, 0, cd->stream>>>(
            p, nrows, (const T *)a->o, (const T *)a->d_o, D);
        MD_TRY(md_cuda_check_launch("attn_bwd (row sums)"));
        int path = attn_path(dev, a);
        if (path == MD_ATTN_GEMM) return md_cuda_attn_gemm_bwd(dev, a, &p, D);
        if (path == MD_ATTN_FLASH) return md_cuda_attn_tc_bwd(dev, a, &p, D);
        if (a->dk || a->dv)
            ATT_DP_DISPATCH(dp, k_attn_bwd_kv<T, DP><<<kblocks, ATT_BQ, 0, cd->stream>>>(
                                    p, (const T *)a->q, (const T *)a->k, (const T *)a->v, (const T *)a->d_o, a->lse,
                                    D, (T *)a->dk, (T *)a->dv));
        MD_TRY(md_cuda_check_launch("attn_bwd (dk, dv)"));
        if (a->dq)
            ATT_DP_DISPATCH(dp, k_attn_bwd_q<T, DP><<<qblocks, ATT_BQ, 0, cd->stream>>>(
                                    p, (const T *)a->q, (const T *)a->k, (const T *)a->v, (const T *)a->d_o, a->lse,
                                    D, (T *)a->dq));
    });
    return md_cuda_check_launch("attn_bwd (dq)");
}
