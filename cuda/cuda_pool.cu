/* cuda_pool.cu - global average pooling and 2-D max/average pooling, both
 * layouts. */
#include "cuda_device.cuh"

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
