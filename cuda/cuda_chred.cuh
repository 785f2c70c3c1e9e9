/* cuda_chred.cuh - per-channel sums shared by batch norm (statistics and the
 * backward sums) and the bias gradient.
 *
 * One two-stage scheme for both layouts: stage 1 writes (channel, split)
 * partial sums into the device's reduction scratch (NCHW: a block per channel
 * and split, threads along hw; NHWC: 32 channels x 8 rows per block, threads
 * along channels, so reads are coalesced); stage 2 (fin_sums) adds the splits
 * in a fixed order. No atomics: results are bit-identical from run to run.
 */
#ifndef MD_CUDA_CHRED_CUH
#define MD_CUDA_CHRED_CUH

#include "cuda_device.cuh"

enum { RED_STATS = 0, RED_BWD, RED_BIAS };

struct red_in {
    const void *x, *y, *dy;
    const float *mean, *invstd; /* RED_BWD: the statistics normalising x */
    const float *gamma, *beta;  /* RED_BWD with ReLU and no y: the mask from x */
    int relu;
    void *dres;                 /* RED_BWD: also writes the masked dy here (a fused residual's gradient) */
    float dres_beta;            /* ... as g + dres_beta * dres */
};

/* A fused residual's gradient: element i's masked dy g. */
template <class T> __device__ __forceinline__ void put_dres(const red_in &in, size_t i, float g)
{
    T *d = (T *)in.dres;
    d[i] = fromf<T>(in.dres_beta != 0.0f ? g + in.dres_beta * tof(d[i]) : g);
}

/* dy masked by the fused ReLU: no gradient where the output was <= 0 (from y
 * when given, else recomputed from x-hat). */
template <class T>
__device__ __forceinline__ float bn_masked_dy(const red_in &in, size_t i, int c, float xhat)
{
    float g = tof(((const T *)in.dy)[i]);
    if (in.relu) {
        float out = in.y ? tof(((const T *)in.y)[i])
                         : xhat * (in.gamma ? in.gamma[c] : 1.0f) + (in.beta ? in.beta[c] : 0.0f);
        if (out <= 0.0f) g = 0.0f;
    }
    return g;
}

/* The two values element i contributes to channel c's sums. The shift (the
 * channel's first element) keeps sum/sum-of-squares from cancelling. */
template <class T, int MODE>
__device__ __forceinline__ void red_vals(const red_in &in, size_t i, int c, float shift, float &v1, float &v2)
{
    if (MODE == RED_STATS) {
        float d = tof(((const T *)in.x)[i]) - shift;
        v1 = d;
        v2 = d * d;
    } else if (MODE == RED_BWD) {
        float xhat = (tof(((const T *)in.x)[i]) - in.mean[c]) * in.invstd[c];
        float g = bn_masked_dy<T>(in, i, c, xhat);
        if (in.dres) put_dres<T>(in, i, g);
        v1 = g;
        v2 = g * xhat;
    } else {
        v1 = tof(((const T *)in.dy)[i]);
        v2 = 0.0f;
    }
}

/* NCHW: grid (C, S); block handles samples blockIdx.y, +S, ... of channel c. */
template <class T, int MODE>
__global__ void k_chred_nchw(red_in in, int n, int c, int hw, int splits, float *part)
{
    int ch = blockIdx.x, sp = blockIdx.y;
    float shift = MODE == RED_STATS ? tof(((const T *)in.x)[(size_t)ch * hw]) : 0.0f;
    float s1 = 0.0f, s2 = 0.0f;
    for (int b = sp; b < n; b += splits) {
        size_t base = ((size_t)b * c + ch) * hw;
        for (int j = threadIdx.x; j < hw; j += blockDim.x) {
            float v1, v2;
            red_vals<T, MODE>(in, base + j, ch, shift, v1, v2);
            s1 += v1;
            s2 += v2;
        }
    }
    s1 = block_sum(s1);
    s2 = block_sum(s2);
    if (threadIdx.x == 0) {
        part[((size_t)sp * c + ch) * 2] = s1;
        part[((size_t)sp * c + ch) * 2 + 1] = s2;
    }
}

/* NHWC: grid (ceil(C/32), S), block (32, 8); rows are the n*hw positions. */
template <class T, int MODE>
__global__ void k_chred_nhwc(red_in in, size_t rows, int c, int splits, float *part)
{
    __shared__ float sh1[8][33], sh2[8][33];
    int ch = blockIdx.x * 32 + threadIdx.x, sp = blockIdx.y;
    float s1 = 0.0f, s2 = 0.0f;
    if (ch < c) {
        float shift = MODE == RED_STATS ? tof(((const T *)in.x)[ch]) : 0.0f;
        for (size_t r = (size_t)sp * 8 + threadIdx.y; r < rows; r += (size_t)splits * 8) {
            float v1, v2;
            red_vals<T, MODE>(in, r * c + ch, ch, shift, v1, v2);
            s1 += v1;
            s2 += v2;
        }
    }
    sh1[threadIdx.y][threadIdx.x] = s1;
    sh2[threadIdx.y][threadIdx.x] = s2;
    __syncthreads();
    if (threadIdx.y == 0 && ch < c) {
        float t1 = 0.0f, t2 = 0.0f;
        for (int k = 0; k < 8; k++) {
            t1 += sh1[k][threadIdx.x];
            t2 += sh2[k][threadIdx.x];
        }
        part[((size_t)sp * c + ch) * 2] = t1;
        part[((size_t)sp * c + ch) * 2 + 1] = t2;
    }
}

/* ---- vectorised NHWC paths: 16-byte loads, V channels per thread ------------ */

/* NHWC, c % V == 0, 16-byte aligned: block (TW, RY) with TW channel vectors of
 * V channels across and RY rows down; grid (ceil(CV/TW), S). */
template <class T, int MODE>
__global__ void k_chred_nhwc_v(red_in in, size_t rows, int c, int splits, float *part)
{
    const int V = vw<T>::V;
    __shared__ float sh[256 * 8];
    int CV = c / V, TW = blockDim.x, RY = blockDim.y;
    int cv = blockIdx.x * TW + threadIdx.x, sp = blockIdx.y;
    float s1[V], s2[V], shift[V];
#pragma unroll
    for (int k = 0; k < V; k++) s1[k] = s2[k] = shift[k] = 0.0f;
    if (cv < CV) {
        int c0 = cv * V;
        float inv_r[V];
        if (MODE == RED_STATS) {
#pragma unroll
            for (int k = 0; k < V; k++) shift[k] = tof(((const T *)in.x)[c0 + k]);
        } else if (MODE == RED_BWD) { /* shift holds the mean: loop-invariant, kept in registers */
#pragma unroll
            for (int k = 0; k < V; k++) {
                shift[k] = in.mean[c0 + k];
                inv_r[k] = in.invstd[c0 + k];
            }
        }
#pragma unroll 4
        for (size_t r = (size_t)sp * RY + threadIdx.y; r < rows; r += (size_t)splits * RY) {
            size_t off = r * c + c0;
            if (MODE == RED_STATS) {
                uint4 u = *(const uint4 *)((const T *)in.x + off);
                const T *e = (const T *)&u;
#pragma unroll
                for (int k = 0; k < V; k++) {
                    float d = tof(e[k]) - shift[k];
                    s1[k] += d;
                    s2[k] += d * d;
                }
            } else if (MODE == RED_BWD) {
                uint4 ug = *(const uint4 *)((const T *)in.dy + off), ux = *(const uint4 *)((const T *)in.x + off);
                uint4 uy = ug;
                if (in.relu) uy = *(const uint4 *)((const T *)in.y + off);
                const T *eg = (const T *)&ug, *ex = (const T *)&ux, *ey = (const T *)&uy;
                uint4 ud, uo;
                if (in.dres && in.dres_beta != 0.0f) ud = *(const uint4 *)((const T *)in.dres + off);
                const T *ed = (const T *)&ud;
                T *eo = (T *)&uo;
#pragma unroll
                for (int k = 0; k < V; k++) {
                    float g = tof(eg[k]);
                    if (in.relu && tof(ey[k]) <= 0.0f) g = 0.0f;
                    float xhat = (tof(ex[k]) - shift[k]) * inv_r[k];
                    s1[k] += g;
                    s2[k] += g * xhat;
                    if (in.dres) eo[k] = fromf<T>(in.dres_beta != 0.0f ? g + in.dres_beta * tof(ed[k]) : g);
                }
                if (in.dres) *(uint4 *)((T *)in.dres + off) = uo;
            } else {
                uint4 u = *(const uint4 *)((const T *)in.dy + off);
                const T *e = (const T *)&u;
#pragma unroll
                for (int k = 0; k < V; k++) s1[k] += tof(e[k]);
            }
        }
    }
    /* columns tx*V + k, rows ty: the first TW*V threads each add one column */
    int tid = threadIdx.y * TW + threadIdx.x, cols = TW * V;
    for (int pass = 0; pass < 2; pass++) {
        __syncthreads();
#pragma unroll
        for (int k = 0; k < V; k++) sh[threadIdx.y * cols + threadIdx.x * V + k] = pass ? s2[k] : s1[k];
        __syncthreads();
        if (tid < cols) {
            float t = 0.0f;
            for (int y = 0; y < RY; y++) t += sh[y * cols + tid];
            int ch = blockIdx.x * TW * V + tid;
            if (ch < c) part[((size_t)sp * c + ch) * 2 + pass] = t;
        }
    }
}

/* Stage 1 into the scratch; returns the split count. `extra` floats after the
 * partials are reserved for the caller (statistics). */
template <class T, int MODE>
static md_status chan_reduce(md_device *dev, const red_in &in, int n, int c, int hw, md_layout layout,
                             size_t extra, float **part, float **extra_p, int *splits)
{
    struct md_cuda_dev *cd = md_cuda_impl(dev);
    /* one position per channel: NCHW and NHWC are the same memory (rows x c), and the NHWC kernels read it
     * coalesced (the NCHW kernel would give each channel a block with one busy thread: linear layers' biases) */
    if (hw == 1) layout = MD_NHWC;
    int target = cd->sm_count * cd->red_per_sm, s;
    size_t rows = (size_t)n * hw;
    if (layout == MD_NHWC) {
        int tiles = (c + 31) / 32;
        s = (target + tiles - 1) / tiles;
        size_t maxs = (rows + 7) / 8;
        if ((size_t)s > maxs) s = (int)maxs;
    } else {
        s = (target + c - 1) / c;
        if (s > n) s = n;
    }
    if (s < 1) s = 1;
    MD_TRY(md_cuda_scratch_get(dev, &cd->red_ws, ((size_t)s * c * 2 + extra) * sizeof(float), "reduction scratch"));
    float *p = (float *)cd->red_ws.ptr;
    const int V = vw<T>::V;
    int vec = layout == MD_NHWC && c % V == 0 && (!in.x || aligned16(in.x)) && (!in.y || aligned16(in.y)) &&
              (!in.dy || aligned16(in.dy)) && (!in.dres || aligned16(in.dres)) && (MODE != RED_BWD || !in.relu || in.y);
    if (vec) {
        int CV = c / V, TW = CV < 32 ? CV : 32, RY = 256 / TW, gx = (CV + TW - 1) / TW;
        int sv = (target + gx - 1) / gx;
        size_t maxs = (rows + RY - 1) / RY;
        if ((size_t)sv > maxs) sv = (int)maxs;
        if (sv < 1) sv = 1;
        s = sv;
        MD_TRY(md_cuda_scratch_get(dev, &cd->red_ws, ((size_t)s * c * 2 + extra) * sizeof(float), "reduction scratch"));
        p = (float *)cd->red_ws.ptr;
        k_chred_nhwc_v<T, MODE><<<dim3(gx, s), dim3(TW, RY), 0, cd->stream>>>(in, rows, c, s, p);
    } else if (layout == MD_NHWC)
        k_chred_nhwc<T, MODE><<<dim3((c + 31) / 32, s), dim3(32, 8), 0, cd->stream>>>(in, rows, c, s, p);
    else
        k_chred_nchw<T, MODE><<<dim3(c, s), MD_THREADS, 0, cd->stream>>>(in, n, c, hw, s, p);
    *part = p;
    *extra_p = p + (size_t)s * c * 2;
    *splits = s;
    return md_cuda_check_launch("per-channel reduction");
}

/* Stage 2: a warp per channel adds the channel's split partials (lanes take
 * every 32nd split, then a fixed shuffle tree: deterministic). Launch with
 * FIN_BLOCKS(c) blocks of 128 threads; returns -1 except in lane 0 of a channel. */
#define FIN_BLOCKS(c) (((c) + 3) / 4)
__device__ __forceinline__ int fin_sums(const float *part, int c, int splits, float *s1, float *s2)
{
    int ch = blockIdx.x * 4 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    float a = 0.0f, b = 0.0f;
    if (ch < c)
        for (int sp = lane; sp < splits; sp += 32) {
            a += part[((size_t)sp * c + ch) * 2];
            b += part[((size_t)sp * c + ch) * 2 + 1];
        }
    *s1 = warp_sum(a);
    *s2 = warp_sum(b);
    return ch < c && lane == 0 ? ch : -1;
}

#endif
