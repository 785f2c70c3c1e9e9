/* cuda_tiles.cu - tiles (crop a grid of tiles, resize each bilinearly,
 * align_corners=False) and FiLM; the contract is kernels.h's, the reference
 * src/backend/ref/ref_tiles.c, the layers docs/tiles.md.
 *
 * No atomics, so every result repeats bit for bit:
 * - tiles_fwd: a thread per output element.
 * - tiles_bwd: a thread per input element (gather): the tiles partition the
 *   image, so the element's tile is known and only the output rows and
 *   columns whose bilinear taps can reach it are visited, in order.
 * - film_bwd: dx a thread per element; dcond a block per (32 features,
 *   sample), 8 partial sums over the tokens combined in a fixed order.
 * Index arithmetic in float, as PyTorch's upsample_bilinear2d.
 */
#include "cuda_device.cuh"

/* Edge k of n equal parts of len (md_tile_edge). */
__device__ __forceinline__ int tile_edge(int len, int n, int k) { return (int)((long long)k * len / n); }

/* Source of output index o along an axis of `len` resized to `size`: the two
 * taps and the weight of the second (area_pixel_compute_source_index). */
__device__ __forceinline__ void src_index(int o, int len, float scale, int *i0, int *i1, float *l1)
{
    float s = scale * ((float)o + 0.5f) - 0.5f;
    if (s < 0.0f) s = 0.0f;
    int a = (int)s;
    if (a > len - 1) a = len - 1;
    *i0 = a;
    *i1 = a < len - 1 ? a + 1 : a;
    *l1 = s - (float)a;
}

/* The tile holding index p of an axis of len cut into n parts. */
__device__ __forceinline__ int tile_of(int p, int len, int n)
{
    int t = (int)((long long)p * n / len);
    while (t + 1 < n && tile_edge(len, n, t + 1) <= p) t++;
    while (t > 0 && tile_edge(len, n, t) > p) t--;
    return t;
}

/* Output indices (of size) whose taps may reach source index l of an axis
 * of len: (2o + 1) len in [(2l - 1) size, (2l + 3) size), with a margin of 2
 * (the caller checks each tap); from 0 for l <= 1 (a coordinate clamped to
 * 0 taps index 1 with weight 0). */
__device__ __forceinline__ void reach(int l, int len, int size, int *lo, int *hi)
{
    int a = l <= 1 ? 0 : ((2 * l - 1) * size - len) / (2 * len) - 2, b = ((2 * l + 3) * size - len) / (2 * len) + 2;
    *lo = a < 0 ? 0 : a;
    *hi = b > size - 1 ? size - 1 : b;
}

template <class T>
__global__ void k_tiles_fwd(size_t total, int c, int h, int w, int rows, int cols, int S, int ld, const T *x, T *y,
                            float beta)
{
    int nt = rows * cols;
    GRID_STRIDE(i, total)
    {
        int ox = (int)(i % (size_t)S), oy = (int)(i / (size_t)S % (size_t)S);
        size_t p = i / ((size_t)S * S);
        int ch = (int)(p % (size_t)c), t = (int)(p / (size_t)c % (size_t)nt);
        size_t b = p / ((size_t)c * nt);
        int ti = t / cols, tj = t % cols;
        int r0 = tile_edge(h, rows, ti), th = tile_edge(h, rows, ti + 1) - r0;
        int c0 = tile_edge(w, cols, tj), tw = tile_edge(w, cols, tj + 1) - c0;
        int y0, y1, x0, x1;
        float ly, lx;
        src_index(oy, th, (float)th / (float)S, &y0, &y1, &ly);
        src_index(ox, tw, (float)tw / (float)S, &x0, &x1, &lx);
        const T *xp = x + (b * c + ch) * (size_t)h * w + c0;
        const T *q0 = xp + (size_t)(r0 + y0) * w, *q1 = xp + (size_t)(r0 + y1) * w;
        float v = (1.0f - ly) * ((1.0f - lx) * tof(q0[x0]) + lx * tof(q0[x1])) +
                  ly * ((1.0f - lx) * tof(q1[x0]) + lx * tof(q1[x1]));
        size_t yo = ((b * ld + t) * c + ch) * (size_t)S * S + (size_t)oy * S + ox;
        if (beta != 0.0f) v += beta * tof(y[yo]);
        y[yo] = fromf<T>(v);
    }
}

template <class T>
__global__ void k_tiles_bwd(size_t total, int c, int h, int w, int rows, int cols, int S, int ld, const T *dy, T *dx,
                            float beta)
{
    GRID_STRIDE(i, total)
    {
        int px = (int)(i % (size_t)w), py = (int)(i / (size_t)w % (size_t)h);
        size_t p = i / ((size_t)h * w);
        int ch = (int)(p % (size_t)c);
        size_t b = p / (size_t)c;
        int ti = tile_of(py, h, rows), tj = tile_of(px, w, cols);
        int r0 = tile_edge(h, rows, ti), th = tile_edge(h, rows, ti + 1) - r0;
        int c0 = tile_edge(w, cols, tj), tw = tile_edge(w, cols, tj + 1) - c0;
        int ly = py - r0, lx = px - c0;
        float sy = (float)th / (float)S, sx = (float)tw / (float)S;
        int oy0, oy1, ox0, ox1;
        reach(ly, th, S, &oy0, &oy1);
        reach(lx, tw, S, &ox0, &ox1);
        const T *g = dy + ((b * ld + (size_t)(ti * cols + tj)) * c + ch) * (size_t)S * S;
        float acc = 0.0f;
        for (int oy = oy0; oy <= oy1; oy++) {
            int y0, y1;
            float wy1;
            src_index(oy, th, sy, &y0, &y1, &wy1);
            if (y0 != ly && y1 != ly) continue;
            float wy = (y0 == ly ? 1.0f - wy1 : 0.0f) + (y1 == ly ? wy1 : 0.0f);
            float row = 0.0f;
            for (int ox = ox0; ox <= ox1; ox++) {
                int x0, x1;
                float wx1;
                src_index(ox, tw, sx, &x0, &x1, &wx1);
                if (x0 != lx && x1 != lx) continue;
                float wx = (x0 == lx ? 1.0f - wx1 : 0.0f) + (x1 == lx ? wx1 : 0.0f);
                row += wx * tof(g[(size_t)oy * S + ox]);
            }
            acc += wy * row;
        }
        if (beta != 0.0f) acc += beta * tof(dx[i]);
        dx[i] = fromf<T>(acc);
    }
}

static md_status tiles_check(const char *op, const struct md_tiles_args *a)
{
    if (a->n < 0 || a->c < 1 || a->rows < 1 || a->cols < 1 || a->h < a->rows || a->w < a->cols || a->size < 1 ||
        a->ld < a->rows * a->cols)
        return md_errf(MD_ERR_INTERNAL, "cuda %s: bad shape (n %d, c %d, %dx%d, grid %dx%d, size %d, ld %d)", op,
                       a->n, a->c, a->h, a->w, a->rows, a->cols, a->size, a->ld);
    return MD_OK;
}

md_status md_cuda_tiles_fwd(md_device *dev, const struct md_tiles_args *a)
{
    MD_TRY(tiles_check("tiles_fwd", a));
    size_t total = (size_t)a->n * a->rows * a->cols * a->c * a->size * a->size;
    if (!total) return MD_OK;
    MD_CU_DISPATCH(a->dtype, "tiles_fwd", {
        k_tiles_fwd<T><<<md_cu_blocks(dev, total), MD_THREADS, 0, md_cuda_impl(dev)->stream>>>(
            total, a->c, a->h, a->w, a->rows, a->cols, a->size, a->ld, (const T *)a->x, (T *)a->y, a->beta);
    });
    return md_cuda_check_launch("tiles_fwd");
}

md_status md_cuda_tiles_bwd(md_device *dev, const struct md_tiles_args *a)
{
    MD_TRY(tiles_check("tiles_bwd", a));
    size_t total = (size_t)a->n * a->c * a->h * a->w;
    if (!total) return MD_OK;
    MD_CU_DISPATCH(a->dtype, "tiles_bwd", {
        k_tiles_bwd<T><<<md_cu_blocks(dev, total), MD_THREADS, 0, md_cuda_impl(dev)->stream>>>(
            total, a->c, a->h, a->w, a->rows, a->cols, a->size, a->ld, (const T *)a->dy, (T *)a->dx, a->beta);
    });
    return md_cuda_check_launch("tiles_bwd");
}

/* ---------------------------------------------------------------------------
 * FiLM
 * ------------------------------------------------------------------------- */

template <class T>
__global__ void k_film_fwd(size_t total, int t, int d, const T *x, const T *cond, T *y)
{
    GRID_STRIDE(i, total)
    {
        int j = (int)(i % (size_t)d);
        size_t b = i / ((size_t)d * t);
        const T *cb = cond + b * 2 * d;
        y[i] = fromf<T>(tof(x[i]) * (1.0f + tof(cb[j])) + tof(cb[d + j]));
    }
}

template <class T>
__global__ void k_film_bwd_dx(size_t total, int t, int d, const T *dy, const T *cond, T *dx, float beta)
{
    GRID_STRIDE(i, total)
    {
        int j = (int)(i % (size_t)d);
        size_t b = i / ((size_t)d * t);
        float v = tof(dy[i]) * (1.0f + tof(cond[b * 2 * d + j]));
        if (beta != 0.0f) v += beta * tof(dx[i]);
        dx[i] = fromf<T>(v);
    }
}

/* grid (ceil(d/32), n), block (32, 8): row ty adds tokens ty, ty+8, ...;
 * row 0 then adds the 8 partials in order. */
template <class T>
__global__ void k_film_bwd_cond(int n, int t, int d, const T *x, const T *dy, T *dcond, float beta)
{
    __shared__ float sg_s[8][33], sb_s[8][33];
    int j = blockIdx.x * 32 + threadIdx.x;
    for (int bi = blockIdx.y; bi < n; bi += gridDim.y) {
        size_t b = (size_t)bi;
        float sg = 0.0f, sb = 0.0f;
        if (j < d)
            for (int k = threadIdx.y; k < t; k += 8) {
                size_t o = (b * t + k) * (size_t)d + j;
                float g = tof(dy[o]);
                sg += g * tof(x[o]);
                sb += g;
            }
        __syncthreads(); /* the previous sample's partials are read */
        sg_s[threadIdx.y][threadIdx.x] = sg;
        sb_s[threadIdx.y][threadIdx.x] = sb;
        __syncthreads();
        if (threadIdx.y == 0 && j < d) {
            float tg = 0.0f, tb = 0.0f;
            for (int y = 0; y < 8; y++) {
                tg += sg_s[y][threadIdx.x];
                tb += sb_s[y][threadIdx.x];
            }
            T *cb = dcond + b * 2 * d;
            if (beta != 0.0f) {
                tg += beta * tof(cb[j]);
                tb += beta * tof(cb[d + j]);
            }
            cb[j] = fromf<T>(tg);
            cb[d + j] = fromf<T>(tb);
        }
    }
}

md_status md_cuda_film_fwd(md_device *dev, const struct md_film_args *a)
{
    size_t total = (size_t)a->n * a->t * a->d;
    if (a->n <= 0 || a->t <= 0 || a->d <= 0) return MD_OK;
    MD_CU_DISPATCH(a->dtype, "film_fwd", {
        k_film_fwd<T><<<md_cu_blocks(dev, total), MD_THREADS, 0, md_cuda_impl(dev)->stream>>>(
            total, a->t, a->d, (const T *)a->x, (const T *)a->cond, (T *)a->y);
    });
    return md_cuda_check_launch("film_fwd");
}

md_status md_cuda_film_bwd(md_device *dev, const struct md_film_args *a)
{
    struct md_cuda_dev *cd = md_cuda_impl(dev);
    size_t total = (size_t)a->n * a->t * a->d;
    if (a->n <= 0 || a->d <= 0) return MD_OK;
    MD_CU_DISPATCH(a->dtype, "film_bwd", {
        if (a->dx && total) {
            k_film_bwd_dx<T><<<md_cu_blocks(dev, total), MD_THREADS, 0, cd->stream>>>(
                total, a->t, a->d, (const T *)a->dy, (const T *)a->cond, (T *)a->dx, a->beta);
            MD_TRY(md_cuda_check_launch("film_bwd (dx)"));
        }
        if (a->dcond) {
            dim3 grid((unsigned)((a->d + 31) / 32), (unsigned)(a->n < 65535 ? a->n : 65535)), block(32, 8);
            k_film_bwd_cond<T><<<grid, block, 0, cd->stream>>>(a->n, a->t, a->d, (const T *)a->x, (const T *)a->dy,
                                                               (T *)a->dcond, a->beta_cond);
        }
    });
    return md_cuda_check_launch("film_bwd");
}
