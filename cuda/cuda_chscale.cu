/* cuda_chscale.cu - the per-feature scale (LayerScale): y = x * g over the
 * rows of a (rows, d) token block, g fp32; the contract is kernels.h's, the
 * reference src/backend/ref/ref_tiles.c.
 *
 * - fwd and dx: a thread per element, or per 16 bytes of elements when d is
 *   a multiple of the vector width and the pointers are 16-byte aligned
 *   (a vector then stays within one row).
 * - dg: no atomics, so it repeats bit for bit. Grid (ceil(d/32), S), block
 *   (32, 8): split sp adds rows sp*8+ty, +S*8, ... of column
 *   blockIdx.x*32+tx, the 8 row partials are added in order into
 *   part[sp*d + j] (the reduction scratch); then a warp per column adds its
 *   S partials (lanes take every 32nd, then a fixed shuffle tree).
 */
#include "cuda_device.cuh"

/* y = a * g + beta * y, a thread per element */
template <class T>
__global__ void k_chscale(size_t total, int d, const T *a, const float *g, T *y, float beta)
{
    GRID_STRIDE(i, total)
    {
        float v = tof(a[i]) * g[i % (size_t)d];
        if (beta != 0.0f) v += beta * tof(y[i]);
        y[i] = fromf<T>(v);
    }
}

/* the same, a thread per 16 bytes (d % V == 0) */
template <class T>
__global__ void k_chscale_v(size_t nv, int d, const T *a, const float *g, T *y, float beta)
{
    const int V = vw<T>::V;
    GRID_STRIDE(i, nv)
    {
        uint4 u = ((const uint4 *)a)[i], uy = u, o;
        if (beta != 0.0f) uy = ((const uint4 *)y)[i];
        const T *e = (const T *)&u, *ey = (const T *)&uy;
        T *oe = (T *)&o;
        const float *gj = g + (i * V) % (size_t)d;
#pragma unroll
        for (int k = 0; k < V; k++) {
            float v = tof(e[k]) * gj[k];
            if (beta != 0.0f) v += beta * tof(ey[k]);
            oe[k] = fromf<T>(v);
        }
        ((uint4 *)y)[i] = o;
    }
}

template <class T>
__global__ void k_chscale_dg_part(int rows, int d, int splits, const T *x, const T *dy, float *part)
{
    __shared__ float s_s[8][33];
    int j = blockIdx.x * 32 + threadIdx.x, sp = blockIdx.y;
    float s = 0.0f;
    if (j < d)
        for (int r = sp * 8 + threadIdx.y; r < rows; r += splits * 8) {
            size_t o = (size_t)r * d + j;
            s += tof(dy[o]) * tof(x[o]);
        }
    s_s[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    if (threadIdx.y == 0 && j < d) {
        float t = 0.0f;
        for (int y = 0; y < 8; y++) t += s_s[y][threadIdx.x];
        part[(size_t)sp * d + j] = t;
    }
}

/* 4 columns per block of 128 threads */
__global__ void k_chscale_dg_fin(int d, int splits, const float *part, float *dg, float beta)
{
    int j = blockIdx.x * 4 + (threadIdx.x >> 5), lane = threadIdx.x & 31;
    float s = 0.0f;
    if (j < d)
        for (int sp = lane; sp < splits; sp += 32) s += part[(size_t)sp * d + j];
    s = warp_sum(s);
    if (j < d && lane == 0) dg[j] = beta != 0.0f ? s + beta * dg[j] : s;
}

template <class T>
static md_status chscale_apply(md_device *dev, int rows, int d, const T *a, const float *g, T *y, float beta,
                               const char *what)
{
    size_t total = (size_t)rows * d;
    const int V = vw<T>::V;
    cudaStream_t s = md_cuda_impl(dev)->stream;
    if (d % V == 0 && aligned16(a) && aligned16(y))
        k_chscale_v<T><<<md_cu_blocks(dev, total / V), MD_THREADS, 0, s>>>(total / V, d, a, g, y, beta);
    else
        k_chscale<T><<<md_cu_blocks(dev, total), MD_THREADS, 0, s>>>(total, d, a, g, y, beta);
    return md_cuda_check_launch(what);
}

md_status md_cuda_chscale_fwd(md_device *dev, const struct md_chscale_args *a)
{
    if (a->rows <= 0 || a->d <= 0) return MD_OK;
    MD_CU_DISPATCH(a->dtype, "chscale_fwd", {
        MD_TRY(chscale_apply<T>(dev, a->rows, a->d, (const T *)a->x, a->g, (T *)a->y, a->beta, "chscale_fwd"));
    });
    return MD_OK;
}

md_status md_cuda_chscale_bwd(md_device *dev, const struct md_chscale_args *a)
{
    struct md_cuda_dev *cd = md_cuda_impl(dev);
    if (a->rows < 0 || a->d <= 0) return MD_OK;
    MD_CU_DISPATCH(a->dtype, "chscale_bwd", {
        if (a->dg) {
            int gx = (a->d + 31) / 32, sp = (cd->sm_count * 8 + gx - 1) / gx, maxs = (a->rows + 7) / 8;
            if (sp > maxs) sp = maxs;
            if (sp < 1) sp = 1;
            MD_TRY(md_cuda_scratch_get(dev, &cd->red_ws, (size_t)sp * a->d * sizeof(float),
                                       "per-feature scale partials"));
            float *part = (float *)cd->red_ws.ptr;
            k_chscale_dg_part<T><<<dim3(gx, sp), dim3(32, 8), 0, cd->stream>>>(a->rows, a->d, sp, (const T *)a->x,
                                                                              (const T *)a->dy, part);
            MD_TRY(md_cuda_check_launch("chscale_bwd (dg partials)"));
            k_chscale_dg_fin<<<(a->d + 3) / 4, 128, 0, cd->stream>>>(a->d, sp, part, a->dg, a->beta_g);
            MD_TRY(md_cuda_check_launch("chscale_bwd (dg)"));
        }
        if (a->dx && a->rows > 0) /* after dg: dx may be dy's buffer */
            MD_TRY(chscale_apply<T>(dev, a->rows, a->d, (const T *)a->dy, a->g, (T *)a->dx, a->beta,
                                    "chscale_bwd (dx)"));
    });
    return MD_OK;
}
