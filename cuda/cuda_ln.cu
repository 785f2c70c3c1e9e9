/* cuda_ln.cu - layer norm with a warp per row, the row in registers, for
 * even d up to 1024 (the transformer widths). cuda_norm.cu's block-per-row
 * kernels keep the other shapes.
 *
 * A lane owns the column pairs 2 (lane + 32 i), i < NP, loaded once as
 * two-element vectors (128 contiguous bytes a warp for fp16/bf16); mean and
 * variance are warp sums of the registers (two passes over registers, not
 * over memory), so the forward reads x once and writes y once.
 * The backward is one kernel: each warp takes rows warp, warp + W, ... (W
 * warps in the grid), writes dx and keeps its columns' dgamma and dbeta
 * partials in registers; the block adds its warps' partials in a fixed order
 * into part (blocks, d, 2) and cuda_norm.cu's k_ln_params_fin adds the
 * blocks' in a fixed order.
 * No atomics: results repeat bit for bit on a given GPU. (The block-per-row
 * kernels took 37 us forward and 77 us backward for a 16,704 x 384 bf16
 * layer norm, ViT-S/14 at batch 64, on an H100, ~4x the memory time.) */
#include "cuda_chred.cuh"
#include "cuda_ln.cuh"

#define LNW_WARPS 8 /* warps a block */

template <class T> __device__ __forceinline__ void lnw_ld2(const T *p, float &a, float &b);
template <> __device__ __forceinline__ void lnw_ld2<float>(const float *p, float &a, float &b)
{
    float2 v = *(const float2 *)p;
    a = v.x, b = v.y;
}
template <> __device__ __forceinline__ void lnw_ld2<__half>(const __half *p, float &a, float &b)
{
    float2 v = __half22float2(*(const __half2 *)p);
    a = v.x, b = v.y;
}
template <> __device__ __forceinline__ void lnw_ld2<__nv_bfloat16>(const __nv_bfloat16 *p, float &a, float &b)
{
    float2 v = __bfloat1622float2(*(const __nv_bfloat162 *)p);
    a = v.x, b = v.y;
}
template <class T> __device__ __forceinline__ void lnw_st2(T *p, float a, float b);
template <> __device__ __forceinline__ void lnw_st2<float>(float *p, float a, float b) { *(float2 *)p = make_float2(a, b); }
template <> __device__ __forceinline__ void lnw_st2<__half>(__half *p, float a, float b)
{
    *(__half2 *)p = __floats2half2_rn(a, b);
}
template <> __device__ __forceinline__ void lnw_st2<__nv_bfloat16>(__nv_bfloat16 *p, float a, float b)
{
    *(__nv_bfloat162 *)p = __floats2bfloat162_rn(a, b);
}

/* Loads a row's pairs (zeros past d); returns the row sum. */
template <class T, int NP>
__device__ __forceinline__ float lnw_row(const T *row, int d, int lane, float (&v)[2 * NP])
{
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < NP; i++) {
        int j = 2 * (lane + 32 * i);
        v[2 * i] = v[2 * i + 1] = 0.0f;
        if (j < d) lnw_ld2<T>(row + j, v[2 * i], v[2 * i + 1]);
        s += v[2 * i] + v[2 * i + 1];
    }
    return s;
}

/* mean and 1/sqrt(var + eps) of a row in registers. */
template <int NP>
__device__ __forceinline__ void lnw_stats(const float (&v)[2 * NP], int d, int lane, float s, float eps, float &mu,
                                          float &rs)
{
    mu = warp_sum(s) / (float)d;
    float q = 0.0f;
#pragma unroll
    for (int i = 0; i < NP; i++)
        if (2 * (lane + 32 * i) < d) q += (v[2 * i] - mu) * (v[2 * i] - mu) + (v[2 * i + 1] - mu) * (v[2 * i + 1] - mu);
    rs = rsqrtf(warp_sum(q) / (float)d + eps);
}

template <class T, int NP>
__global__ void __launch_bounds__(LNW_WARPS * 32)
    k_lnw_fwd(int rows, int d, float eps, const T *x, T *y, const float *gamma, const float *betap, float *mean,
              float *rstd, float beta)
{
    const int lane = threadIdx.x & 31, r = blockIdx.x * LNW_WARPS + (threadIdx.x >> 5);
    if (r >= rows) return;
    float v[2 * NP], mu, rs;
    float s = lnw_row<T, NP>(x + (size_t)r * d, d, lane, v);
    lnw_stats<NP>(v, d, lane, s, eps, mu, rs);
    if (lane == 0) {
        if (mean) mean[r] = mu;
        if (rstd) rstd[r] = rs;
    }
    T *yr = y + (size_t)r * d;
#pragma unroll
    for (int i = 0; i < NP; i++) {
        int j = 2 * (lane + 32 * i);
        if (j >= d) continue;
        float o0 = (v[2 * i] - mu) * rs, o1 = (v[2 * i + 1] - mu) * rs;
        if (gamma) o0 *= gamma[j], o1 *= gamma[j + 1];
        if (betap) o0 += betap[j], o1 += betap[j + 1];
        if (beta != 0.0f) {
            float p0, p1;
            lnw_ld2<T>(yr + j, p0, p1);
            o0 += beta * p0, o1 += beta * p1;
        }
        lnw_st2<T>(yr + j, o0, o1);
    }
}

/* dx (when not NULL) and, when part is not NULL, the block's dgamma/dbeta
 * partials part[(block * d + j) * 2 + {0, 1}]. smem: LNW_WARPS * d floats. */
template <class T, int NP>
__global__ void __launch_bounds__(LNW_WARPS * 32)
    k_lnw_bwd(int rows, int d, float eps, const T *x, const T *dy, T *dx, const float *gamma, const float *mean,
              const float *rstd, float beta, float *part)
{
    extern __shared__ float lnw_sm[];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = gridDim.x * LNW_WARPS;
    float dg[2 * NP], db[2 * NP];
#pragma unroll
    for (int e = 0; e < 2 * NP; e++) dg[e] = db[e] = 0.0f;
    for (int r = blockIdx.x * LNW_WARPS + warp; r < rows; r += nw) {
        float xv[2 * NP], gv[2 * NP], mu, rs;
        float s = lnw_row<T, NP>(x + (size_t)r * d, d, lane, xv);
        lnw_row<T, NP>(dy + (size_t)r * d, d, lane, gv);
        if (mean && rstd) mu = mean[r], rs = rstd[r];
        else lnw_stats<NP>(xv, d, lane, s, eps, mu, rs);
        float sg = 0.0f, sgx = 0.0f;
#pragma unroll
        for (int i = 0; i < NP; i++) {
            int j = 2 * (lane + 32 * i);
            if (j >= d) continue;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                int e = 2 * i + h;
                float xh = (xv[e] - mu) * rs, g = gv[e] * (gamma ? gamma[j + h] : 1.0f);
                dg[e] += gv[e] * xh;
                db[e] += gv[e];
                xv[e] = xh;
                gv[e] = g;
                sg += g;
                sgx += g * xh;
            }
        }
        if (!dx) continue;
        sg = warp_sum(sg) / (float)d;
        sgx = warp_sum(sgx) / (float)d;
        T *dr = dx + (size_t)r * d;
#pragma unroll
        for (int i = 0; i < NP; i++) {
            int j = 2 * (lane + 32 * i);
            if (j >= d) continue;
            float o0 = rs * (gv[2 * i] - sg - xv[2 * i] * sgx), o1 = rs * (gv[2 * i + 1] - sg - xv[2 * i + 1] * sgx);
            if (beta != 0.0f) {
                float p0, p1;
                lnw_ld2<T>(dr + j, p0, p1);
                o0 += beta * p0, o1 += beta * p1;
            }
            lnw_st2<T>(dr + j, o0, o1);
        }
    }
    if (!part) return;
    /* the block's warps in order: dgamma, then dbeta */
    for (int which = 0; which < 2; which++) {
        __syncthreads();
#pragma unroll
        for (int i = 0; i < NP; i++) {
            int j = 2 * (lane + 32 * i);
            if (j >= d) continue;
            lnw_sm[warp * d + j] = which ? db[2 * i] : dg[2 * i];
            lnw_sm[warp * d + j + 1] = which ? db[2 * i + 1] : dg[2 * i + 1];
        }
        __syncthreads();
        for (int j = threadIdx.x; j < d; j += blockDim.x) {
            float t = 0.0f;
            for (int w = 0; w < LNW_WARPS; w++) t += lnw_sm[w * d + j];
            part[((size_t)blockIdx.x * d + j) * 2 + which] = t;
        }
    }
}

static int lnw_aligned(const void *p) { return p == NULL || ((uintptr_t)p & 7u) == 0; }

int md_cuda_ln_w_covers(const struct md_layernorm_args *a, int bwd)
{
    if (a->d % 2 || a->d > 1024 || a->d < 2) return 0;
    if (!lnw_aligned(a->x) || !lnw_aligned(a->y)) return 0;
    return !bwd || (lnw_aligned(a->dy) && lnw_aligned(a->dx));
}

/* Runs the statement with NP (column pairs a lane) bound for d. */
#define LNW_NP_DISPATCH(d, ...)                                                                    \
    do {                                                                                           \
        if ((d) <= 128) { const int NP = 2; __VA_ARGS__; }                                         \
        else if ((d) <= 256) { const int NP = 4; __VA_ARGS__; }                                    \
        else if ((d) <= 512) { const int NP = 8; __VA_ARGS__; }                                    \
        else { const int NP = 16; __VA_ARGS__; }                                                   \
    } while (0)

md_status md_cuda_ln_w_fwd(md_device *dev, const struct md_layernorm_args *a)
{
    unsigned blocks = (unsigned)((a->rows + LNW_WARPS - 1) / LNW_WARPS);
    cudaStream_t s = md_cuda_impl(dev)->stream;
    MD_CU_DISPATCH(a->dtype, "layernorm_fwd", {
        LNW_NP_DISPATCH(a->d, k_lnw_fwd<T, NP><<<blocks, LNW_WARPS * 32, 0, s>>>(
                                  a->rows, a->d, a->eps, (const T *)a->x, (T *)a->y, a->gamma, a->beta_p, a->mean,
                                  a->rstd, a->beta));
    });
    return md_cuda_check_launch("layernorm_fwd (warp a row)");
}

md_status md_cuda_ln_w_bwd(md_device *dev, const struct md_layernorm_args *a)
{
    struct md_cuda_dev *cd = md_cuda_impl(dev);
    int need = (a->rows + LNW_WARPS - 1) / LNW_WARPS, blocks = cd->sm_count * 4;
    if (blocks > need) blocks = need;
    if (blocks < 1) blocks = 1;
    float *part = NULL;
    if (a->dgamma || a->dbeta) {
        MD_TRY(md_cuda_scratch_get(dev, &cd->red_ws, (size_t)blocks * a->d * 2 * sizeof(float),
                                   "layernorm parameter partials"));
        part = (float *)cd->red_ws.ptr;
    }
    size_t sm = (size_t)LNW_WARPS * a->d * sizeof(float); /* <= 32 KiB at d 1024 */
    MD_CU_DISPATCH(a->dtype, "layernorm_bwd", {
        LNW_NP_DISPATCH(a->d, {
            k_lnw_bwd<T, NP><<<blocks, LNW_WARPS * 32, sm, cd->stream>>>(a->rows, a->d, a->eps, (const T *)a->x,
                                                                         (const T *)a->dy, (T *)a->dx, a->gamma,
                                                                         a->mean, a->rstd, a->beta, part);
        });
    });
    MD_TRY(md_cuda_check_launch("layernorm_bwd (warp a row)"));
    return part ? md_cuda_ln_params_fin(dev, a, part, blocks) : MD_OK;
}
