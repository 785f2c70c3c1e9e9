/* cuda_norm.cu - per-channel work: batch norm (with fused ReLU), bias
 * add/grad, global average pooling, 2-D max/average pooling.
 *
 * Per-channel sums use one two-stage scheme for both layouts: stage 1
 * writes (channel, split) partial sums into the device's reduction scratch
 * (NCHW: a block per channel and split, threads along hw; NHWC: 32 channels
 * x 8 rows per block, threads along channels, so reads are coalesced);
 * stage 2 adds the splits in a fixed order. No atomics: results are
 * bit-identical from run to run.
 */
#include <math.h>

#include "cuda_device.cuh"

enum { RED_STATS = 0, RED_BWD, RED_BIAS };

struct red_in {
    const void *x, *y, *dy;
    const float *mean, *invstd; /* RED_BWD: the statistics normalising x */
    const float *gamma, *beta;  /* RED_BWD with ReLU and no y: the mask from x */
    int relu;
};

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

template <class T> struct vw { enum { V = 16 / sizeof(T) }; };

static inline int aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

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
#pragma unroll
                for (int k = 0; k < V; k++) {
                    float g = tof(eg[k]);
                    if (in.relu && tof(ey[k]) <= 0.0f) g = 0.0f;
                    float xhat = (tof(ex[k]) - shift[k]) * inv_r[k];
                    s1[k] += g;
                    s2[k] += g * xhat;
                }
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
    int target = cd->sm_count * 8, s;
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
              (!in.dy || aligned16(in.dy)) && (MODE != RED_BWD || !in.relu || in.y);
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

/* ---------------------------------------------------------------------------
 * Batch norm
 * ------------------------------------------------------------------------- */

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

/* Per-channel statistics area "st" (4c floats): mean, invstd, and the affine
 * folded in, scale = gamma * invstd and shift = beta - mean * scale, so the
 * apply pass is one multiply-add per element. */
template <class T>
__global__ void k_bn_stats(const T *x, int c, int hw, int nhwc, long long m, int splits, const float *part, float eps,
                           float momentum, const float *gamma, const float *beta, float *st, float *save_mean,
                           float *save_invstd, float *run_mean, float *run_var)
{
    float s1, s2;
    int ch = fin_sums(part, c, splits, &s1, &s2);
    if (ch < 0) return;
    float shift = tof(x[nhwc ? (size_t)ch : (size_t)ch * hw]);
    float dm = s1 / (float)m;
    float var = fmaxf(s2 / (float)m - dm * dm, 0.0f);
    float mean = shift + dm;
    float invstd = 1.0f / sqrtf(var + eps);
    float sc = (gamma ? gamma[ch] : 1.0f) * invstd;
    st[ch] = mean;
    st[c + ch] = invstd;
    st[2 * c + ch] = sc;
    st[3 * c + ch] = (beta ? beta[ch] : 0.0f) - mean * sc;
    if (save_mean) save_mean[ch] = mean;
    if (save_invstd) save_invstd[ch] = invstd;
    if (run_mean) run_mean[ch] = (1.0f - momentum) * run_mean[ch] + momentum * mean;
    if (run_var) {
        float unbiased = m > 1 ? var * ((float)m / (float)(m - 1)) : var;
        run_var[ch] = (1.0f - momentum) * run_var[ch] + momentum * unbiased;
    }
}

/* The same area from the running statistics (inference). */
__global__ void k_bn_running(int c, const float *rm, const float *rv, float eps, const float *gamma,
                             const float *beta, float *st)
{
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    float mean = rm[ch], invstd = 1.0f / sqrtf(rv[ch] + eps);
    float sc = (gamma ? gamma[ch] : 1.0f) * invstd;
    st[ch] = mean;
    st[c + ch] = invstd;
    st[2 * c + ch] = sc;
    st[3 * c + ch] = (beta ? beta[ch] : 0.0f) - mean * sc;
}

/* y = act(x * scale + shift) + obeta * y */
template <class T>
__global__ void k_bn_apply(size_t total, int c, int hw, int nhwc, const T *x, T *y, const float *scale,
                           const float *shift, int relu, float obeta)
{
    GRID_STRIDE(i, total)
    {
        int ch = chan_of(i, c, hw, nhwc);
        float v = tof(x[i]) * scale[ch] + shift[ch];
        if (relu) v = fmaxf(v, 0.0f);
        if (obeta != 0.0f) v += obeta * tof(y[i]);
        y[i] = fromf<T>(v);
    }
}

/* V consecutive channels' coefficients of an aligned per-channel array. */
template <int V> __device__ __forceinline__ void load_ch(const float *p, int c0, float (&out)[V])
{
#pragma unroll
    for (int k = 0; k < V; k += 4) {
        float4 f = *(const float4 *)(p + c0 + k);
        out[k] = f.x;
        out[k + 1] = f.y;
        out[k + 2] = f.z;
        out[k + 3] = f.w;
    }
}

/* NHWC apply, V channels per thread; a thread's channel vector advances by the
 * grid stride modulo CV, so no division per element. */
template <class T>
__global__ void k_bn_apply_v(size_t nvec, int c, const T *x, T *y, const float *scale, const float *shift, int relu,
                             float obeta)
{
    const int V = vw<T>::V;
    int CV = c / V;
    size_t v = (size_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    int cv = (int)(v % CV), inc = (int)(stride % CV), loaded = -1;
    float sc[V], sh[V];
    for (; v < nvec; v += stride) {
        uint4 u = ((const uint4 *)x)[v], o = u, yo = u;
        if (obeta != 0.0f) yo = ((const uint4 *)y)[v];
        const T *e = (const T *)&u, *ey = (const T *)&yo;
        T *oe = (T *)&o;
        if (cv != loaded) { /* usually once: the grid stride is a multiple of CV */
            load_ch<V>(scale, cv * V, sc);
            load_ch<V>(shift, cv * V, sh);
            loaded = cv;
        }
#pragma unroll
        for (int k = 0; k < V; k++) {
            float val = tof(e[k]) * sc[k] + sh[k];
            if (relu) val = fmaxf(val, 0.0f);
            if (obeta != 0.0f) val += obeta * tof(ey[k]);
            oe[k] = fromf<T>(val);
        }
        ((uint4 *)y)[v] = o;
        cv += inc;
        if (cv >= CV) cv -= CV;
    }
}

template <class T> static void bn_apply(md_device *dev, const struct md_batchnorm_args *a, const float *st)
{
    struct md_cuda_dev *cd = md_cuda_impl(dev);
    size_t total = (size_t)a->n * a->c * a->hw;
    const int V = vw<T>::V;
    int relu = a->act == MD_ACT_RELU;
    if (a->layout == MD_NHWC && a->c % V == 0 && aligned16(a->x) && aligned16(a->y) && aligned16(st))
        k_bn_apply_v<T><<<md_cu_blocks(dev, total / V), MD_THREADS, 0, cd->stream>>>(
            total / V, a->c, (const T *)a->x, (T *)a->y, st + 2 * a->c, st + 3 * a->c, relu, a->beta);
    else
        k_bn_apply<T><<<md_cu_blocks(dev, total), MD_THREADS, 0, cd->stream>>>(
            total, a->c, a->hw, a->layout == MD_NHWC, (const T *)a->x, (T *)a->y, st + 2 * a->c, st + 3 * a->c,
            relu, a->beta);
}

md_status md_cuda_batchnorm_fwd(md_device *dev, const struct md_batchnorm_args *a)
{
    struct md_cuda_dev *cd = md_cuda_impl(dev);
    if (a->act != MD_ACT_NONE && a->act != MD_ACT_RELU)
        return md_errf(MD_ERR_UNSUPPORTED, "cuda batchnorm_fwd: fused activation %d is not supported", a->act);
    size_t total = (size_t)a->n * a->c * a->hw;
    if (!total) return MD_OK;
    int nhwc = a->layout == MD_NHWC;
    MD_CU_DISPATCH(a->dtype, "batchnorm_fwd", {
        if (!a->training) {
            MD_TRY(md_cuda_scratch_get(dev, &cd->red_ws, (size_t)4 * a->c * sizeof(float), "reduction scratch"));
            float *st = (float *)cd->red_ws.ptr;
            k_bn_running<<<(a->c + 127) / 128, 128, 0, cd->stream>>>(a->c, a->running_mean, a->running_var, a->eps,
                                                                      a->gamma, a->beta_p, st);
            bn_apply<T>(dev, a, st);
            return md_cuda_check_launch("batchnorm_fwd (inference)");
        }
        red_in in = {a->x, NULL, NULL, NULL, NULL, NULL, NULL, 0};
        float *part, *st;
        int splits;
        MD_TRY((chan_reduce<T, RED_STATS>(dev, in, a->n, a->c, a->hw, a->layout, (size_t)4 * a->c, &part, &st,
                                          &splits)));
        k_bn_stats<T><<<FIN_BLOCKS(a->c), 128, 0, cd->stream>>>(
            (const T *)a->x, a->c, a->hw, nhwc, (long long)a->n * a->hw, splits, part, a->eps, a->momentum, a->gamma,
            a->beta_p, st, a->save_mean, a->save_invstd, a->running_mean, a->running_var);
        MD_TRY(md_cuda_check_launch("batchnorm_fwd (statistics)"));
        bn_apply<T>(dev, a, st);
        return md_cuda_check_launch("batchnorm_fwd");
    });
    return MD_OK;
}

/* Backward coefficients "co" (4c floats): A = gamma * invstd, s1m = sum(g)/m,
 * C = gamma * invstd^2 * sum(g * xhat)/m, mean; then
 *   training:  dx = A * (g - s1m) - C * (x - mean)
 *   inference: dx = A * g            (s1m = C = 0)
 * which is the reference's gamma*invstd/m * (m*g - sum(g) - xhat*sum(g*xhat)). */
__global__ void k_bn_bwd_sums(int c, int splits, const float *part, float m, int training, const float *mean,
                              const float *invstd, const float *gamma, float *co, float *dgamma, float *dbeta,
                              float beta)
{
    float s1, s2;
    int ch = fin_sums(part, c, splits, &s1, &s2);
    if (ch < 0) return;
    float inv = invstd[ch], A = (gamma ? gamma[ch] : 1.0f) * inv;
    co[ch] = A;
    co[c + ch] = training ? s1 / m : 0.0f;
    co[2 * c + ch] = training ? A * inv * (s2 / m) : 0.0f;
    co[3 * c + ch] = mean[ch];
    if (dbeta) dbeta[ch] = beta != 0.0f ? s1 + beta * dbeta[ch] : s1;
    if (dgamma) dgamma[ch] = beta != 0.0f ? s2 + beta * dgamma[ch] : s2;
}

template <class T>
__global__ void k_bn_bwd_dx(size_t total, int c, int hw, int nhwc, red_in in, T *dx, const float *co, float beta)
{
    GRID_STRIDE(i, total)
    {
        int ch = chan_of(i, c, hw, nhwc);
        float xv = tof(((const T *)in.x)[i]);
        float g = bn_masked_dy<T>(in, i, ch, (xv - in.mean[ch]) * in.invstd[ch]);
        float v = co[ch] * (g - co[c + ch]) - co[2 * c + ch] * (xv - co[3 * c + ch]);
        if (beta != 0.0f) v += beta * tof(dx[i]);
        dx[i] = fromf<T>(v);
    }
}

template <class T>
__global__ void k_bn_bwd_dx_v(size_t nvec, int c, red_in in, T *dx, const float *co, float beta)
{
    const int V = vw<T>::V;
    int CV = c / V;
    size_t v = (size_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    int cv = (int)(v % CV), inc = (int)(stride % CV), loaded = -1;
    float A[V], S[V], C[V], M[V];
    for (; v < nvec; v += stride) {
        uint4 ux = ((const uint4 *)in.x)[v], ug = ((const uint4 *)in.dy)[v], uy = ug, ud = ug, o;
        if (in.relu) uy = ((const uint4 *)in.y)[v];
        if (beta != 0.0f) ud = ((const uint4 *)dx)[v];
        const T *ex = (const T *)&ux, *eg = (const T *)&ug, *ey = (const T *)&uy, *ed = (const T *)&ud;
        T *oe = (T *)&o;
        if (cv != loaded) { /* usually once: the grid stride is a multiple of CV */
            int c0 = cv * V;
            load_ch<V>(co, c0, A);
            load_ch<V>(co + c, c0, S);
            load_ch<V>(co + 2 * c, c0, C);
            load_ch<V>(co + 3 * c, c0, M);
            loaded = cv;
        }
#pragma unroll
        for (int k = 0; k < V; k++) {
            float g = tof(eg[k]);
            if (in.relu && tof(ey[k]) <= 0.0f) g = 0.0f;
            float val = A[k] * (g - S[k]) - C[k] * (tof(ex[k]) - M[k]);
            if (beta != 0.0f) val += beta * tof(ed[k]);
            oe[k] = fromf<T>(val);
        }
        ((uint4 *)dx)[v] = o;
        cv += inc;
        if (cv >= CV) cv -= CV;
    }
}

md_status md_cuda_batchnorm_bwd(md_device *dev, const struct md_batchnorm_args *a)
{
    struct md_cuda_dev *cd = md_cuda_impl(dev);
    if (a->act != MD_ACT_NONE && a->act != MD_ACT_RELU)
        return md_errf(MD_ERR_UNSUPPORTED, "cuda batchnorm_bwd: fused activation %d is not supported", a->act);
    size_t total = (size_t)a->n * a->c * a->hw;
    if (!total) return MD_OK;
    int nhwc = a->layout == MD_NHWC, relu = a->act == MD_ACT_RELU;
    int have_saved = a->training && a->save_mean && a->save_invstd;
    float *tmp = NULL; /* (4, c): the statistics area when the forward saved none */
    md_status st = MD_OK;
    if (!have_saved) { /* a scratch, not an allocation: a captured graph keeps pointing at it */
        MD_TRY(md_cuda_scratch_get(dev, &cd->aux_ws, (size_t)a->c * 4 * sizeof(float), "batchnorm statistics"));
        tmp = (float *)cd->aux_ws.ptr;
    }
    MD_CU_DISPATCH(a->dtype, "batchnorm_bwd", {
        const float *mean = a->save_mean, *invstd = a->save_invstd;
        float *part, *co;
        int splits;
        if (!a->training) {
            k_bn_running<<<(a->c + 127) / 128, 128, 0, cd->stream>>>(a->c, a->running_mean, a->running_var, a->eps,
                                                                      a->gamma, a->beta_p, tmp);
            mean = tmp;
            invstd = tmp + a->c;
        } else if (!have_saved) {
            red_in sin = {a->x, NULL, NULL, NULL, NULL, NULL, NULL, 0};
            st = chan_reduce<T, RED_STATS>(dev, sin, a->n, a->c, a->hw, a->layout, (size_t)4 * a->c, &part, &co,
                                           &splits);
            if (st != MD_OK) goto done;
            k_bn_stats<T><<<FIN_BLOCKS(a->c), 128, 0, cd->stream>>>(
                (const T *)a->x, a->c, a->hw, nhwc, (long long)a->n * a->hw, splits, part, a->eps, 0.0f, a->gamma,
                a->beta_p, tmp, NULL, NULL, NULL, NULL);
            mean = tmp;
            invstd = tmp + a->c;
        }
        red_in in = {a->x, a->y, a->dy, mean, invstd, a->gamma, a->beta_p, relu};
        st = chan_reduce<T, RED_BWD>(dev, in, a->n, a->c, a->hw, a->layout, (size_t)4 * a->c, &part, &co, &splits);
        if (st != MD_OK) goto done;
        k_bn_bwd_sums<<<FIN_BLOCKS(a->c), 128, 0, cd->stream>>>(a->c, splits, part, (float)((double)a->n * a->hw),
                                                                   a->training, mean, invstd, a->gamma, co, a->dgamma,
                                                                   a->dbeta, a->beta);
        const int V = vw<T>::V;
        if (a->dx && nhwc && a->c % V == 0 && aligned16(a->x) && aligned16(a->dy) && aligned16(a->dx) &&
            aligned16(co) && (!relu || (a->y && aligned16(a->y))))
            k_bn_bwd_dx_v<T><<<md_cu_blocks(dev, total / V), MD_THREADS, 0, cd->stream>>>(total / V, a->c, in,
                                                                                        (T *)a->dx, co, a->beta);
        else if (a->dx)
            k_bn_bwd_dx<T><<<md_cu_blocks(dev, total), MD_THREADS, 0, cd->stream>>>(
                total, a->c, a->hw, nhwc, in, (T *)a->dx, co, a->beta);
        st = md_cuda_check_launch("batchnorm_bwd");
    });
done:
    return st;
}

/* ---------------------------------------------------------------------------
 * Bias
 * ------------------------------------------------------------------------- */

template <class T>
__global__ void k_bias_add(size_t total, int c, int hw, int nhwc, T *y, const float *bias)
{
    GRID_STRIDE(i, total) { y[i] = fromf<T>(tof(y[i]) + bias[chan_of(i, c, hw, nhwc)]); }
}

md_status md_cuda_bias_add(md_device *dev, const struct md_bias_args *a)
{
    size_t total = (size_t)a->n * a->c * a->hw;
    if (!total) return MD_OK;
    MD_CU_DISPATCH(a->dtype, "bias_add", {
        k_bias_add<T><<<md_cu_blocks(dev, total), MD_THREADS, 0, md_cuda_impl(dev)->stream>>>(
            total, a->c, a->hw, a->layout == MD_NHWC, (T *)a->y, a->bias);
    });
    return md_cuda_check_launch("bias_add");
}

__global__ void k_bias_fin(int c, int splits, const float *part, float *dbias, float beta)
{
    float s1, s2;
    int ch = fin_sums(part, c, splits, &s1, &s2);
    if (ch < 0) return;
    dbias[ch] = beta != 0.0f ? s1 + beta * dbias[ch] : s1;
}

md_status md_cuda_bias_grad(md_device *dev, const struct md_bias_args *a)
{
    struct md_cuda_dev *cd = md_cuda_impl(dev);
    if (a->c <= 0) return MD_OK;
    if ((size_t)a->n * a->hw == 0) {
        if (a->beta == 0.0f) MD_CU_TRY(cudaMemsetAsync(a->dbias, 0, (size_t)a->c * 4, cd->stream), "bias_grad");
        return MD_OK;
    }
    MD_CU_DISPATCH(a->dtype, "bias_grad", {
        red_in in = {NULL, NULL, a->dy, NULL, NULL, NULL, NULL, 0};
        float *part, *unused;
        int splits;
        MD_TRY((chan_reduce<T, RED_BIAS>(dev, in, a->n, a->c, a->hw, a->layout, 0, &part, &unused, &splits)));
        k_bias_fin<<<FIN_BLOCKS(a->c), 128, 0, cd->stream>>>(a->c, splits, part, a->dbias, a->beta);
    });
    return md_cuda_check_launch("bias_grad");
}

/* ---------------------------------------------------------------------------
 * Global average pooling: (n, c, hw) -> (n, c)
 * ------------------------------------------------------------------------- */

/* NCHW: one warp per (n, c) row of hw contiguous values. */
template <class T>
__global__ void k_gap_nchw(int rows, int hw, const T *x, T *y, float beta)
{
    int warp = (blockIdx.x * blockDim.x + threadIdx.x) >> 5, lane = threadIdx.x & 31;
    if (warp >= rows) return;
    const T *p = x + (size_t)warp * hw;
    float s = 0.0f;
    for (int j = lane; j < hw; j += 32) s += tof(p[j]);
    s = warp_sum(s);
    if (lane == 0) y[warp] = fromf<T>(s / (float)hw + (beta != 0.0f ? beta * tof(y[warp]) : 0.0f));
}

/* NHWC: a thread per (n, c), reading hw values c apart (coalesced across c). */
template <class T>
__global__ void k_gap_nhwc(int n, int c, int hw, const T *x, T *y, float beta)
{
    GRID_STRIDE(i, (size_t)n * c)
    {
        size_t b = i / c, ch = i % c;
        const T *p = x + b * hw * c + ch;
        float s = 0.0f;
        for (int j = 0; j < hw; j++) s += tof(p[(size_t)j * c]);
        y[i] = fromf<T>(s / (float)hw + (beta != 0.0f ? beta * tof(y[i]) : 0.0f));
    }
}

md_status md_cuda_gap_fwd(md_device *dev, const struct md_gap_args *a)
{
    cudaStream_t s = md_cuda_impl(dev)->stream;
    int rows = a->n * a->c;
    if (!rows || a->hw <= 0) return MD_OK;
    MD_CU_DISPATCH(a->dtype, "gap_fwd", {
        if (a->layout == MD_NHWC)
            k_gap_nhwc<T><<<md_cu_blocks(dev, (size_t)rows), MD_THREADS, 0, s>>>(a->n, a->c, a->hw, (const T *)a->x,
                                                                                (T *)a->y, a->beta);
        else
            k_gap_nchw<T><<<(rows + 7) / 8, 256, 0, s>>>(rows, a->hw, (const T *)a->x, (T *)a->y, a->beta);
    });
    return md_cuda_check_launch("gap_fwd");
}

template <class T>
__global__ void k_gap_bwd(size_t total, int c, int hw, int nhwc, const T *dy, T *dx, float beta)
{
    GRID_STRIDE(i, total)
    {
        size_t b = i / ((size_t)hw * c); /* the sample, in either layout */
        int ch = chan_of(i, c, hw, nhwc);
        float v = tof(dy[b * c + ch]) / (float)hw;
        if (beta != 0.0f) v += beta * tof(dx[i]);
        dx[i] = fromf<T>(v);
    }
}

md_status md_cuda_gap_bwd(md_device *dev, const struct md_gap_args *a)
{
    size_t total = (size_t)a->n * a->c * a->hw;
    if (!total) return MD_OK;
    MD_CU_DISPATCH(a->dtype, "gap_bwd", {
        k_gap_bwd<T><<<md_cu_blocks(dev, total), MD_THREADS, 0, md_cuda_impl(dev)->stream>>>(
            total, a->c, a->hw, a->layout == MD_NHWC, (const T *)a->dy, (T *)a->dx, a->beta);
    });
    return md_cuda_check_launch("gap_bwd");
}

/* ---------------------------------------------------------------------------
 * 2-D pooling
 * ------------------------------------------------------------------------- */

struct pool_geo {
    int n, c, h, w, p, q, kh, kw, sh, sw, ph, pw, include_pad, nhwc;
};

/* Index arithmetic in I (32-bit when the tensor allows: 64-bit division and
 * modulo cost tens of instructions per element). */
template <class I>
__device__ __forceinline__ I pidx(const pool_geo &g, int b, int ch, int y, int x, int hh, int ww)
{
    return g.nhwc ? (((I)b * hh + y) * ww + x) * g.c + ch : (((I)b * g.c + ch) * hh + y) * ww + x;
}

/* Splits a flat index of an (n, c, hh, ww) tensor in the layout's order. */
template <class I>
__device__ __forceinline__ void unflat(const pool_geo &g, I r, int hh, int ww, int &b, int &ch, int &y, int &x)
{
    if (g.nhwc) {
        ch = (int)(r % (I)g.c); r /= (I)g.c;
        x = (int)(r % (I)ww); r /= (I)ww;
        y = (int)(r % (I)hh); b = (int)(r / (I)hh);
    } else {
        x = (int)(r % (I)ww); r /= (I)ww;
        y = (int)(r % (I)hh); r /= (I)hh;
        ch = (int)(r % (I)g.c); b = (int)(r / (I)g.c);
    }
}

/* Offset (ky*kw + kx) of the first maximal element of window (oy, ox), -1
 * when the window lies entirely in the padding (then the output is 0). */
template <class T, class I>
__device__ __forceinline__ int window_argmax(const pool_geo &g, const T *x, int b, int ch, int oy, int ox, float *mv)
{
    int y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;
    int ys = max(y0, 0), ye = min(y0 + g.kh, g.h), xs = max(x0, 0), xe = min(x0 + g.kw, g.w);
    float m = 0.0f;
    int arg = -1;
    for (int yy = ys; yy < ye; yy++)
        for (int xx = xs; xx < xe; xx++) {
            float v = tof(x[pidx<I>(g, b, ch, yy, xx, g.h, g.w)]);
            if (arg < 0 || v > m) {
                m = v;
                arg = (yy - y0) * g.kw + (xx - x0);
            }
        }
    *mv = m;
    return arg;
}

__device__ __forceinline__ float avg_div(const pool_geo &g, int oy, int ox)
{
    if (g.include_pad) return (float)(g.kh * g.kw);
    int y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;
    int ys = max(y0, 0), ye = min(y0 + g.kh, g.h), xs = max(x0, 0), xe = min(x0 + g.kw, g.w);
    return (float)((ye - ys) * (xe - xs));
}

template <class T, class I>
__global__ void k_pool_fwd(pool_geo g, int kind, const T *x, T *y, float beta, uint8_t *argmax)
{
    I total = (I)g.n * g.c * g.p * g.q;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        int b, ch, oy, ox;
        unflat<I>(g, i, g.p, g.q, b, ch, oy, ox);
        float v;
        if (kind == MD_POOL_MAX) {
            int arg = window_argmax<T, I>(g, x, b, ch, oy, ox, &v);
            if (argmax) argmax[i] = (uint8_t)(arg < 0 ? 255 : arg);
            if (!y) continue;
        } else {
            int y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;
            int ys = max(y0, 0), ye = min(y0 + g.kh, g.h), xs = max(x0, 0), xe = min(x0 + g.kw, g.w);
            float s = 0.0f;
            for (int yy = ys; yy < ye; yy++)
                for (int xx = xs; xx < xe; xx++) s += tof(x[pidx<I>(g, b, ch, yy, xx, g.h, g.w)]);
            float dv = avg_div(g, oy, ox);
            v = dv > 0.0f ? s / dv : 0.0f;
        }
        if (beta != 0.0f) v += beta * tof(y[i]);
        y[i] = fromf<T>(v);
    }
}

/* A thread per input element gathers from every window that covers it; max
 * pooling reads each window's argmax from the first pass (no recomputation). */
template <class T, class I>
__global__ void k_pool_bwd(pool_geo g, int kind, const uint8_t *argmax, const T *dy, T *dx, float beta)
{
    I total = (I)g.n * g.c * g.h * g.w;
    for (I i = (I)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (I)gridDim.x * blockDim.x) {
        int b, ch, iy, ix;
        unflat<I>(g, i, g.h, g.w, b, ch, iy, ix);
        /* windows oy with oy*sh - ph <= iy < oy*sh - ph + kh */
        int oy0 = iy + g.ph - g.kh + 1, ox0 = ix + g.pw - g.kw + 1;
        oy0 = oy0 <= 0 ? 0 : (oy0 + g.sh - 1) / g.sh;
        ox0 = ox0 <= 0 ? 0 : (ox0 + g.sw - 1) / g.sw;
        int oy1 = min((iy + g.ph) / g.sh, g.p - 1), ox1 = min((ix + g.pw) / g.sw, g.q - 1);
        float s = 0.0f;
        for (int oy = oy0; oy <= oy1; oy++)
            for (int ox = ox0; ox <= ox1; ox++) {
                I o = pidx<I>(g, b, ch, oy, ox, g.p, g.q);
                if (kind == MD_POOL_MAX) {
                    int me = (iy - (oy * g.sh - g.ph)) * g.kw + (ix - (ox * g.sw - g.pw));
                    if (argmax[o] == me) s += tof(dy[o]);
                } else {
                    float dv = avg_div(g, oy, ox);
                    if (dv > 0.0f) s += tof(dy[o]) / dv;
                }
            }
        if (beta != 0.0f) s += beta * tof(dx[i]);
        dx[i] = fromf<T>(s);
    }
}

/* NHWC with c % V == 0: a thread per (position, V channels), 16-byte loads.
 * fwd writes y (when non-NULL) and/or the per-window argmax bytes. */
template <class T>
__global__ void k_pool_fwd_v(pool_geo g, int kind, const T *x, T *y, float beta, uint8_t *argmax)
{
    const int V = vw<T>::V;
    unsigned CV = (unsigned)g.c / V, total = (unsigned)g.n * g.p * g.q * CV;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        unsigned cv = i % CV, pos = i / CV;
        int ox = (int)(pos % (unsigned)g.q), oy = (int)((pos / (unsigned)g.q) % (unsigned)g.p);
        int b = (int)(pos / ((unsigned)g.q * g.p));
        int y0 = oy * g.sh - g.ph, x0 = ox * g.sw - g.pw;
        int ys = max(y0, 0), ye = min(y0 + g.kh, g.h), xs = max(x0, 0), xe = min(x0 + g.kw, g.w);
        float acc[V];
        int arg[V];
#pragma unroll
        for (int k = 0; k < V; k++) {
            acc[k] = 0.0f;
            arg[k] = -1;
        }
        for (int yy = ys; yy < ye; yy++)
            for (int xx = xs; xx < xe; xx++) {
                uint4 u = *(const uint4 *)(x + (((size_t)b * g.h + yy) * g.w + xx) * g.c + cv * V);
                const T *e = (const T *)&u;
                int off = (yy - y0) * g.kw + (xx - x0);
#pragma unroll
                for (int k = 0; k < V; k++) {
                    float v = tof(e[k]);
                    if (kind == MD_POOL_MAX) {
                        if (arg[k] < 0 || v > acc[k]) {
                            acc[k] = v;
                            arg[k] = off;
                        }
                    } else {
                        acc[k] += v;
                    }
                }
            }
        size_t o = (size_t)pos * g.c + cv * V;
        if (argmax) {
#pragma unroll
            for (int k = 0; k < V; k++) argmax[o + k] = (uint8_t)(arg[k] < 0 ? 255 : arg[k]);
        }
        if (!y) continue;
        float dv = kind == MD_POOL_AVG ? avg_div(g, oy, ox) : 1.0f;
        uint4 old = beta != 0.0f ? *(const uint4 *)(y + o) : make_uint4(0, 0, 0, 0), out;
        const T *eo = (const T *)&old;
        T *ew = (T *)&out;
#pragma unroll
        for (int k = 0; k < V; k++) {
            float v = kind == MD_POOL_AVG ? (dv > 0.0f ? acc[k] / dv : 0.0f) : acc[k];
            if (beta != 0.0f) v += beta * tof(eo[k]);
            ew[k] = fromf<T>(v);
        }
        *(uint4 *)(y + o) = out;
    }
}

template <class T>
__global__ void k_pool_bwd_v(pool_geo g, int kind, const uint8_t *argmax, const T *dy, T *dx, float beta)
{
    const int V = vw<T>::V;
    unsigned CV = (unsigned)g.c / V, total = (unsigned)g.n * g.h * g.w * CV;
    for (unsigned i = blockIdx.x * blockDim.x + threadIdx.x; i < total; i += gridDim.x * blockDim.x) {
        unsigned cv = i % CV, pos = i / CV;
        int ix = (int)(pos % (unsigned)g.w), iy = (int)((pos / (unsigned)g.w) % (unsigned)g.h);
        int b = (int)(pos / ((unsigned)g.w * g.h));
        int oy0 = iy + g.ph - g.kh + 1, ox0 = ix + g.pw - g.kw + 1;
        oy0 = oy0 <= 0 ? 0 : (oy0 + g.sh - 1) / g.sh;
        ox0 = ox0 <= 0 ? 0 : (ox0 + g.sw - 1) / g.sw;
        int oy1 = min((iy + g.ph) / g.sh, g.p - 1), ox1 = min((ix + g.pw) / g.sw, g.q - 1);
        float s[V];
#pragma unroll
        for (int k = 0; k < V; k++) s[k] = 0.0f;
        for (int oy = oy0; oy <= oy1; oy++)
            for (int ox = ox0; ox <= ox1; ox++) {
                size_t o = (((size_t)b * g.p + oy) * g.q + ox) * g.c + cv * V;
                uint4 u = *(const uint4 *)(dy + o);
                const T *e = (const T *)&u;
                if (kind == MD_POOL_MAX) {
                    int me = (iy - (oy * g.sh - g.ph)) * g.kw + (ix - (ox * g.sw - g.pw));
#pragma unroll
                    for (int k = 0; k < V; k++)
                        if (argmax[o + k] == me) s[k] += tof(e[k]);
                } else {
                    float dv = avg_div(g, oy, ox);
                    if (dv > 0.0f) {
#pragma unroll
                        for (int k = 0; k < V; k++) s[k] += tof(e[k]) / dv;
                    }
                }
            }
        size_t d = (size_t)pos * g.c + cv * V;
        uint4 old = beta != 0.0f ? *(const uint4 *)(dx + d) : make_uint4(0, 0, 0, 0), out;
        const T *eo = (const T *)&old;
        T *ew = (T *)&out;
#pragma unroll
        for (int k = 0; k < V; k++) ew[k] = fromf<T>(beta != 0.0f ? s[k] + beta * tof(eo[k]) : s[k]);
        *(uint4 *)(dx + d) = out;
    }
}

static pool_geo geo_of(const struct md_pool2d_args *a)
{
    pool_geo g = {a->n, a->c, a->h, a->w, a->p, a->q, a->kh, a->kw, a->stride_h, a->stride_w,
                  a->pad_h, a->pad_w, a->count_include_pad, a->layout == MD_NHWC};
    return g;
}

/* 32-bit indices when every flat index of input and output fits. */
static int small_index(const struct md_pool2d_args *a)
{
    size_t in = (size_t)a->n * a->c * a->h * a->w, out = (size_t)a->n * a->c * a->p * a->q;
    return in < 0x7fffffffu && out < 0x7fffffffu;
}

template <class T> static int pool_vec(const struct md_pool2d_args *a)
{
    return a->layout == MD_NHWC && a->c % vw<T>::V == 0 && small_index(a) && aligned16(a->x) &&
           aligned16(a->y_out) && aligned16(a->dy) && aligned16(a->dx);
}

md_status md_cuda_pool2d_fwd(md_device *dev, const struct md_pool2d_args *a)
{
    size_t total = (size_t)a->n * a->c * a->p * a->q;
    if (!total) return MD_OK;
    pool_geo g = geo_of(a);
    cudaStream_t s = md_cuda_impl(dev)->stream;
    unsigned blocks = md_cu_blocks(dev, total);
    MD_CU_DISPATCH(a->dtype, "pool2d_fwd", {
        if (pool_vec<T>(a)) {
            k_pool_fwd_v<T><<<md_cu_blocks(dev, total / vw<T>::V), MD_THREADS, 0, s>>>(g, a->kind, (const T *)a->x,
                                                                                    (T *)a->y_out, a->beta, NULL);
            return md_cuda_check_launch("pool2d_fwd");
        }
        if (small_index(a))
            k_pool_fwd<T, unsigned><<<blocks, MD_THREADS, 0, s>>>(g, a->kind, (const T *)a->x, (T *)a->y_out, a->beta,
                                                                NULL);
        else
            k_pool_fwd<T, size_t><<<blocks, MD_THREADS, 0, s>>>(g, a->kind, (const T *)a->x, (T *)a->y_out, a->beta,
                                                              NULL);
    });
    return md_cuda_check_launch("pool2d_fwd");
}

md_status md_cuda_pool2d_bwd(md_device *dev, const struct md_pool2d_args *a)
{
    struct md_cuda_dev *cd = md_cuda_impl(dev);
    size_t total = (size_t)a->n * a->c * a->h * a->w, nout = (size_t)a->n * a->c * a->p * a->q;
    if (!total) return MD_OK;
    if (a->kind == MD_POOL_MAX && a->kh * a->kw > 254)
        return md_errf(MD_ERR_UNSUPPORTED, "cuda pool2d_bwd: max-pool window %dx%d above 254 elements", a->kh, a->kw);
    pool_geo g = geo_of(a);
    uint8_t *arg = NULL;
    if (a->kind == MD_POOL_MAX && nout) {
        MD_TRY(md_cuda_scratch_get(dev, &cd->red_ws, nout, "reduction scratch"));
        arg = (uint8_t *)cd->red_ws.ptr;
    }
    int small = small_index(a);
    MD_CU_DISPATCH(a->dtype, "pool2d_bwd", {
        if (pool_vec<T>(a)) {
            const int V = vw<T>::V;
            if (arg)
                k_pool_fwd_v<T><<<md_cu_blocks(dev, nout / V), MD_THREADS, 0, cd->stream>>>(g, a->kind, (const T *)a->x,
                                                                                          NULL, 0.0f, arg);
            k_pool_bwd_v<T><<<md_cu_blocks(dev, total / V), MD_THREADS, 0, cd->stream>>>(g, a->kind, arg,
                                                                                       (const T *)a->dy, (T *)a->dx,
                                                                                       a->beta);
            return md_cuda_check_launch("pool2d_bwd");
        }
        if (arg) {
            if (small)
                k_pool_fwd<T, unsigned><<<md_cu_blocks(dev, nout), MD_THREADS, 0, cd->stream>>>(
                    g, a->kind, (const T *)a->x, NULL, 0.0f, arg);
            else
                k_pool_fwd<T, size_t><<<md_cu_blocks(dev, nout), MD_THREADS, 0, cd->stream>>>(
                    g, a->kind, (const T *)a->x, NULL, 0.0f, arg);
        }
        if (small)
            k_pool_bwd<T, unsigned><<<md_cu_blocks(dev, total), MD_THREADS, 0, cd->stream>>>(
                g, a->kind, arg, (const T *)a->dy, (T *)a->dx, a->beta);
        else
            k_pool_bwd<T, size_t><<<md_cu_blocks(dev, total), MD_THREADS, 0, cd->stream>>>(
                g, a->kind, arg, (const T *)a->dy, (T *)a->dx, a->beta);
    });
    return md_cuda_check_launch("pool2d_bwd");
}
