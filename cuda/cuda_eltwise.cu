/* cuda_eltwise.cu - element-wise and small kernels: activations, dropout,
 * arithmetic, reductions, channel slices, casts, NCHW<->NHWC, bias add and
 * bias gradient (through the per-channel sums of cuda_chred.cuh).
 *
 * Memory-bound loops are grid-stride with consecutive threads on consecutive
 * elements (coalesced); reductions are two-stage with a fixed grid and a
 * fixed combination order, so results repeat bit for bit.
 */
#include <math.h>

#include "core/rng.h"
#include "cuda_chred.cuh"

/* ---------------------------------------------------------------------------
 * Activations
 * ------------------------------------------------------------------------- */

/* md_act_f / md_act_grad_f: backend/act_math.h (via kernels.h) */

template <class T> __global__ void k_act_fwd(int act, float alpha, size_t n, const T *x, T *y, float beta)
{
    GRID_STRIDE(i, n)
    {
        float v = md_act_f(act, tof(x[i]), alpha);
        if (beta != 0.0f) v += beta * tof(y[i]);
        y[i] = fromf<T>(v);
    }
}

template <class T>
__global__ void k_act_bwd(int act, float alpha, size_t n, const T *x, const T *dy, T *dx, float beta)
{
    GRID_STRIDE(i, n)
    {
        float v = act == MD_ACT_RELU ? (tof(x[i]) > 0.0f ? tof(dy[i]) : 0.0f)
                                     : md_act_grad_f(act, tof(x[i]), alpha) * tof(dy[i]);
        if (beta != 0.0f) v += beta * tof(dx[i]);
        dx[i] = fromf<T>(v);
    }
}

/* 16-byte vector versions (V = 16 / sizeof(T) elements per load), used when
 * n is a multiple of V and every pointer is 16-byte aligned. */

template <class T>
__global__ void k_act_fwd_v(int act, float alpha, size_t nv, const T *x, T *y, float beta)
{
    const int V = vw<T>::V;
    GRID_STRIDE(i, nv)
    {
        uint4 u = ((const uint4 *)x)[i], o, uy = u;
        if (beta != 0.0f) uy = ((const uint4 *)y)[i];
        const T *e = (const T *)&u, *ey = (const T *)&uy;
        T *oe = (T *)&o;
#pragma unroll
        for (int k = 0; k < V; k++) {
            float v = md_act_f(act, tof(e[k]), alpha);
            if (beta != 0.0f) v += beta * tof(ey[k]);
            oe[k] = fromf<T>(v);
        }
        ((uint4 *)y)[i] = o;
    }
}

template <class T>
__global__ void k_act_bwd_v(int act, float alpha, size_t nv, const T *x, const T *dy, T *dx, float beta)
{
    const int V = vw<T>::V;
    GRID_STRIDE(i, nv)
    {
        uint4 ux = ((const uint4 *)x)[i], ug = ((const uint4 *)dy)[i], ud = ug, o;
        if (beta != 0.0f) ud = ((const uint4 *)dx)[i];
        const T *ex = (const T *)&ux, *eg = (const T *)&ug, *ed = (const T *)&ud;
        T *oe = (T *)&o;
#pragma unroll
        for (int k = 0; k < V; k++) {
            float xv = tof(ex[k]);
            float v = act == MD_ACT_RELU ? (xv > 0.0f ? tof(eg[k]) : 0.0f) : md_act_grad_f(act, xv, alpha) * tof(eg[k]);
            if (beta != 0.0f) v += beta * tof(ed[k]);
            oe[k] = fromf<T>(v);
        }
        ((uint4 *)dx)[i] = o;
    }
}

static md_status check_act(int act, const char *op)
{
    if (act < 0 || act >= MD_ACT_COUNT) return md_errf(MD_ERR_INTERNAL, "cuda %s: unknown activation %d", op, act);
    return MD_OK;
}

md_status md_cuda_act_fwd(md_device *dev, const struct md_act_args *a)
{
    MD_TRY(check_act(a->act, "act_fwd"));
    if (!a->n) return MD_OK;
    MD_CU_DISPATCH(a->dtype, "act_fwd", {
        if (a->n % vw<T>::V == 0 && aligned16(a->x) && aligned16(a->y)) {
            size_t nv = a->n / vw<T>::V;
            k_act_fwd_v<T><<<md_cu_blocks(dev, nv), MD_THREADS, 0, md_cuda_impl(dev)->stream>>>(
                a->act, a->alpha, nv, (const T *)a->x, (T *)a->y, a->beta);
            return md_cuda_check_launch("act_fwd");
        }
        k_act_fwd<T><<<md_cu_blocks(dev, a->n), MD_THREADS, 0, md_cuda_impl(dev)->stream>>>(
            a->act, a->alpha, a->n, (const T *)a->x, (T *)a->y, a->beta);
    });
    return md_cuda_check_launch("act_fwd");
}

md_status md_cuda_act_bwd(md_device *dev, const struct md_act_args *a)
{
    MD_TRY(check_act(a->act, "act_bwd"));
    if (!a->n) return MD_OK;
    MD_CU_DISPATCH(a->dtype, "act_bwd", {
        if (a->n % vw<T>::V == 0 && aligned16(a->x) && aligned16(a->dy) && aligned16(a->dx)) {
            size_t nv = a->n / vw<T>::V;
            k_act_bwd_v<T><<<md_cu_blocks(dev, nv), MD_THREADS, 0, md_cuda_impl(dev)->stream>>>(
                a->act, a->alpha, nv, (const T *)a->x, (const T *)a->dy, (T *)a->dx, a->beta);
            return md_cuda_check_launch("act_bwd");
        }
        k_act_bwd<T><<<md_cu_blocks(dev, a->n), MD_THREADS, 0, md_cuda_impl(dev)->stream>>>(
            a->act, a->alpha, a->n, (const T *)a->x, (const T *)a->dy, (T *)a->dx, a->beta);
    });
    return md_cuda_check_launch("act_bwd");
}

/* ---------------------------------------------------------------------------
 * Dropout: the mask is md_rng_uniform(seed, offset + i) >= p, the same
 * function the CPU runs, so masks agree bit for bit across backends.
 * ------------------------------------------------------------------------- */

template <class T>
__global__ void k_dropout_fwd(size_t n, float p, float scale, uint64_t seed, uint64_t off, const uint64_t *off_dev,
                              const T *x, T *y, uint8_t *mask, float beta)
{
    if (off_dev) off += *off_dev;
    GRID_STRIDE(i, n)
    {
        int keep = !(md_rng_uniform(seed, off + i) < p);
        float v = keep ? tof(x[i]) * scale : 0.0f;
        if (beta != 0.0f) v += beta * tof(y[i]);
        y[i] = fromf<T>(v);
        if (mask) mask[i] = (uint8_t)keep;
    }
}

template <class T>
__global__ void k_dropout_bwd(size_t n, float p, float scale, uint64_t seed, uint64_t off, const uint64_t *off_dev,
                              const uint8_t *mask, const T *dy, T *dx, float beta)
{
    if (off_dev) off += *off_dev;
    GRID_STRIDE(i, n)
    {
        int keep = mask ? mask[i] != 0 : !(md_rng_uniform(seed, off + i) < p);
        float v = keep ? tof(dy[i]) * scale : 0.0f;
        if (beta != 0.0f) v += beta * tof(dx[i]);
        dx[i] = fromf<T>(v);
    }
}

static float dropout_scale(float p) { return p < 1.0f ? 1.0f / (1.0f - p) : 0.0f; }

md_status md_cuda_dropout_fwd(md_device *dev, const struct md_dropout_args *a)
{
    if (!a->n) return MD_OK;
    MD_CU_DISPATCH(a->dtype, "dropout_fwd", {
        k_dropout_fwd<T><<<md_cu_blocks(dev, a->n), MD_THREADS, 0, md_cuda_impl(dev)->stream>>>(
            a->n, a->p, dropout_scale(a->p), a->seed, a->offset, a->offset_dev, (const T *)a->x, (T *)a->y, a->mask, a->beta);
    });
    return md_cuda_check_launch("dropout_fwd");
}

md_status md_cuda_dropout_bwd(md_device *dev, const struct md_dropout_args *a)
{
    if (!a->n) return MD_OK;
    MD_CU_DISPATCH(a->dtype, "dropout_bwd", {
        k_dropout_bwd<T><<<md_cu_blocks(dev, a->n), MD_THREADS, 0, md_cuda_impl(dev)->stream>>>(
            a->n, a->p, dropout_scale(a->p), a->seed, a->offset, a->offset_dev, a->mask, (const T *)a->dy, (T *)a->dx, a->beta);
    });
    return md_cuda_check_launch("dropout_bwd");
}

/* ---------------------------------------------------------------------------
 * Element-wise arithmetic
 * ------------------------------------------------------------------------- */

template <class T>
__global__ void k_ew(int op, size_t n, float alpha, float beta, const float *scale, const T *a, const T *b, T *y)
{
    float al = scale ? alpha * *scale : alpha;
    GRID_STRIDE(i, n)
    {
        float v;
        switch (op) {
        case MD_EW_AXPBY: v = al * tof(a[i]) + (beta != 0.0f ? beta * tof(b[i]) : 0.0f); break;
        case MD_EW_MUL: v = tof(a[i]) * tof(b[i]); break;
        case MD_EW_FILL: v = alpha; break;
        default: v = tof(a[i]); break;
        }
        y[i] = fromf<T>(v);
    }
}

template <class T>
__global__ void k_ew_v(int op, size_t nv, float alpha, float beta, const float *scale, const T *a, const T *b, T *y)
{
    const int V = vw<T>::V;
    float al = scale ? alpha * *scale : alpha;
    GRID_STRIDE(i, nv)
    {
        uint4 ua = ((const uint4 *)a)[i], ub = ua, o;
        if (op == MD_EW_MUL || (op == MD_EW_AXPBY && beta != 0.0f)) ub = ((const uint4 *)b)[i];
        const T *ea = (const T *)&ua, *eb = (const T *)&ub;
        T *oe = (T *)&o;
#pragma unroll
        for (int k = 0; k < V; k++) {
            float v = op == MD_EW_MUL ? tof(ea[k]) * tof(eb[k])
                                      : al * tof(ea[k]) + (beta != 0.0f ? beta * tof(eb[k]) : 0.0f);
            oe[k] = fromf<T>(v);
        }
        ((uint4 *)y)[i] = o;
    }
}

md_status md_cuda_ew(md_device *dev, const struct md_ew_args *a)
{
    if (a->op < 0 || a->op >= MD_EW_COUNT) return md_errf(MD_ERR_INTERNAL, "cuda ew: unknown op %d", a->op);
    if (!a->n) return MD_OK;
    cudaStream_t s = md_cuda_impl(dev)->stream;
    if (a->op == MD_EW_COPY && a->y != a->a) {
        MD_CU_TRY(cudaMemcpyAsync(a->y, a->a, a->n * md_dtype_size(a->dtype), cudaMemcpyDeviceToDevice, s), "ew copy");
        return MD_OK;
    }
    MD_CU_DISPATCH(a->dtype, "ew", {
        if ((a->op == MD_EW_AXPBY || a->op == MD_EW_MUL) && a->n % vw<T>::V == 0 && aligned16(a->a) && aligned16(a->y) &&
            (a->op == MD_EW_AXPBY && a->beta == 0.0f ? 1 : aligned16(a->b))) {
            size_t nv = a->n / vw<T>::V;
            k_ew_v<T><<<md_cu_blocks(dev, nv), MD_THREADS, 0, s>>>(a->op, nv, a->alpha, a->beta, a->scale_dev,
                                                                  (const T *)a->a, (const T *)a->b, (T *)a->y);
            return md_cuda_check_launch("ew");
        }
        k_ew<T><<<md_cu_blocks(dev, a->n), MD_THREADS, 0, s>>>(a->op, a->n, a->alpha, a->beta, a->scale_dev,
                                                              (const T *)a->a, (const T *)a->b, (T *)a->y);
    });
    return md_cuda_check_launch("ew");
}

/* ---------------------------------------------------------------------------
 * Reductions into one fp32 scalar: a fixed grid of partial sums, then one
 * block adds them in order.
 * ------------------------------------------------------------------------- */

#define RED_BLOCKS 512

template <class T> __global__ void k_reduce1(int op, size_t n, const T *a, const T *b, float *part)
{
    float s = 0.0f;
    GRID_STRIDE(i, n)
    {
        float v = tof(a[i]);
        s += op == MD_RED_SUM ? v : op == MD_RED_SUMSQ ? v * v : v * tof(b[i]);
    }
    s = block_sum(s);
    if (threadIdx.x == 0) part[blockIdx.x] = s;
}

__global__ void k_reduce2(int nparts, const float *part, float *out, float beta)
{
    float s = 0.0f;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) s += part[i];
    s = block_sum(s);
    if (threadIdx.x == 0) out[0] = beta != 0.0f ? s + beta * out[0] : s;
}

md_status md_cuda_reduce(md_device *dev, const struct md_reduce_args *a)
{
    struct md_cuda_dev *cd = md_cuda_impl(dev);
    if (a->op < MD_RED_SUM || a->op > MD_RED_DOT) return md_errf(MD_ERR_INTERNAL, "cuda reduce: unknown op %d", a->op);
    size_t nb = (a->n + MD_THREADS - 1) / MD_THREADS;
    int blocks = nb > RED_BLOCKS ? RED_BLOCKS : nb ? (int)nb : 1;
    MD_TRY(md_cuda_scratch_get(dev, &cd->red_ws, RED_BLOCKS * sizeof(float), "reduction scratch"));
    float *part = (float *)cd->red_ws.ptr;
    MD_CU_DISPATCH(a->dtype, "reduce", {
        k_reduce1<T><<<blocks, MD_THREADS, 0, cd->stream>>>(a->op, a->n, (const T *)a->a, (const T *)a->b, part);
    });
    MD_TRY(md_cuda_check_launch("reduce"));
    k_reduce2<<<1, 512, 0, cd->stream>>>(blocks, part, a->out, a->beta);
    return md_cuda_check_launch("reduce (final)");
}

/* ---------------------------------------------------------------------------
 * Channel slices (concat)
 * ------------------------------------------------------------------------- */

template <class T>
__global__ void k_chslice(size_t total, int hw, int cc, int src_c, int src_off, int dst_c, int dst_off, int nhwc,
                          const T *src, T *dst, float beta)
{
    GRID_STRIDE(i, total)
    {
        size_t si, di;
        if (nhwc) {
            size_t row = i / cc, ch = i % cc;
            si = row * src_c + src_off + ch;
            di = row * dst_c + dst_off + ch;
        } else {
            size_t b = i / ((size_t)cc * hw), rem = i % ((size_t)cc * hw), ch = rem / hw, s = rem % hw;
            si = (b * src_c + src_off + ch) * hw + s;
            di = (b * dst_c + dst_off + ch) * hw + s;
        }
        float v = tof(src[si]);
        if (beta != 0.0f) v += beta * tof(dst[di]);
        dst[di] = fromf<T>(v);
    }
}

md_status md_cuda_chslice(md_device *dev, const struct md_chslice_args *a)
{
    size_t total = (size_t)a->n * a->cc * a->hw;
    if (!total) return MD_OK;
    MD_CU_DISPATCH(a->dtype, "chslice", {
        k_chslice<T><<<md_cu_blocks(dev, total), MD_THREADS, 0, md_cuda_impl(dev)->stream>>>(
            total, a->hw, a->cc, a->src_c, a->src_off, a->dst_c, a->dst_off, a->layout == MD_NHWC,
            (const T *)a->src, (T *)a->dst, a->beta);
    });
    return md_cuda_check_launch("chslice");
}

/* ---------------------------------------------------------------------------
 * Casts
 * ------------------------------------------------------------------------- */

__device__ __forceinline__ float load_any(const void *p, int t, size_t i)
{
    switch (t) {
    case MD_F16: return __half2float(((const __half *)p)[i]);
    case MD_BF16: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    case MD_I32: return (float)((const int32_t *)p)[i];
    case MD_U8: return (float)((const uint8_t *)p)[i];
    default: return ((const float *)p)[i];
    }
}

__global__ void k_cast(size_t n, int st, int dt, const void *src, void *dst)
{
    GRID_STRIDE(i, n)
    {
        float v = load_any(src, st, i);
        switch (dt) {
        case MD_F16: ((__half *)dst)[i] = __float2half_rn(v); break;
        case MD_BF16: ((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(v); break;
        default: ((float *)dst)[i] = v; break;
        }
    }
}

md_status md_cuda_cast(md_device *dev, const struct md_cast_args *a)
{
    if (a->dst_type != MD_F32 && a->dst_type != MD_F16 && a->dst_type != MD_BF16)
        return md_errf(MD_ERR_UNSUPPORTED, "cuda cast: to %s is not supported", md_dtype_name(a->dst_type));
    if (a->src_type < 0 || a->src_type >= MD_DTYPE_COUNT)
        return md_errf(MD_ERR_INTERNAL, "cuda cast: unknown source type %d", (int)a->src_type);
    if (!a->n) return MD_OK;
    cudaStream_t s = md_cuda_impl(dev)->stream;
    if (a->src_type == a->dst_type) {
        if (a->src != a->dst)
            MD_CU_TRY(cudaMemcpyAsync(a->dst, a->src, a->n * md_dtype_size(a->src_type), cudaMemcpyDeviceToDevice, s),
                      "cast copy");
        return MD_OK;
    }
    k_cast<<<md_cu_blocks(dev, a->n), MD_THREADS, 0, s>>>(a->n, (int)a->src_type, (int)a->dst_type, a->src, a->dst);
    return md_cuda_check_launch("cast");
}

/* ---------------------------------------------------------------------------
 * NCHW <-> NHWC: per sample a (rows, cols) -> (cols, rows) transpose through
 * a padded 32x32 shared tile (coalesced reads and writes).
 * ------------------------------------------------------------------------- */

template <class E>
__global__ void k_transpose(int rows, int cols, const E *src, E *dst)
{
    __shared__ E tile[32][33];
    size_t plane = (size_t)rows * cols;
    const E *s = src + blockIdx.z * plane;
    E *d = dst + blockIdx.z * plane;
    int c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
    for (int k = threadIdx.y; k < 32; k += 8) {
        int r = r0 + k, c = c0 + threadIdx.x;
        if (r < rows && c < cols) tile[k][threadIdx.x] = s[(size_t)r * cols + c];
    }
    __syncthreads();
    for (int k = threadIdx.y; k < 32; k += 8) {
        int c = c0 + k, r = r0 + threadIdx.x;
        if (r < rows && c < cols) d[(size_t)c * rows + r] = tile[threadIdx.x][k];
    }
}

md_status md_cuda_permute(md_device *dev, const struct md_permute_args *a)
{
    int hw = a->h * a->w;
    if (!a->n || !a->c || !hw) return MD_OK;
    if (a->n > 65535) return md_errf(MD_ERR_UNSUPPORTED, "cuda permute: batch %d above 65535", a->n);
    int rows = a->to_nhwc ? a->c : hw, cols = a->to_nhwc ? hw : a->c;
    dim3 grid((cols + 31) / 32, (rows + 31) / 32, a->n), block(32, 8);
    cudaStream_t s = md_cuda_impl(dev)->stream;
    size_t es = md_dtype_size(a->dtype);
    if (es == 4)
        k_transpose<uint32_t><<<grid, block, 0, s>>>(rows, cols, (const uint32_t *)a->src, (uint32_t *)a->dst);
    else if (es == 2)
        k_transpose<uint16_t><<<grid, block, 0, s>>>(rows, cols, (const uint16_t *)a->src, (uint16_t *)a->dst);
    else if (es == 1)
        k_transpose<uint8_t><<<grid, block, 0, s>>>(rows, cols, (const uint8_t *)a->src, (uint8_t *)a->dst);
    else
        return md_errf(MD_ERR_UNSUPPORTED, "cuda permute: dtype %s", md_dtype_name(a->dtype));
    return md_cuda_check_launch("permute");
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
        red_in in = {NULL, NULL, a->dy, NULL, NULL, NULL, NULL, 0, NULL, 0.0f};
        float *part, *unused;
        int splits;
        MD_TRY((chan_reduce<T, RED_BIAS>(dev, in, a->n, a->c, a->hw, a->layout, 0, &part, &unused, &splits)));
        k_bias_fin<<<FIN_BLOCKS(a->c), 128, 0, cd->stream>>>(a->c, splits, part, a->dbias, a->beta);
    });
    return md_cuda_check_launch("bias_grad");
}
