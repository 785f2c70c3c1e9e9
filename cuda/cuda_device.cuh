/* cuda_device.cuh - device-side helpers shared by our own kernels: element
 * loads/stores as fp32, dtype dispatch, launch sizes, warp and block sums. */
#ifndef MD_CUDA_DEVICE_CUH
#define MD_CUDA_DEVICE_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "cuda_internal.h"

__device__ __forceinline__ float tof(float v) { return v; }
__device__ __forceinline__ float tof(__half v) { return __half2float(v); }
__device__ __forceinline__ float tof(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T> __device__ __forceinline__ T fromf(float v);
template <> __device__ __forceinline__ float fromf<float>(float v) { return v; }
/* Round to nearest even, as md_f32_to_f16 / md_f32_to_bf16 on the host. */
template <> __device__ __forceinline__ __half fromf<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 fromf<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

/* Runs the statement list with T bound to the element type of `dt`. */
#define MD_CU_DISPATCH(dt, opname, ...)                                                             \
    switch (dt) {                                                                                  \
    case MD_F32: { typedef float T; __VA_ARGS__; } break;                                          \
    case MD_F16: { typedef __half T; __VA_ARGS__; } break;                                         \
    case MD_BF16: { typedef __nv_bfloat16 T; __VA_ARGS__; } break;                                 \
    default:                                                                                       \
        return md_errf(MD_ERR_UNSUPPORTED, "cuda %s: dtype %s is not supported", opname,          \
                       md_dtype_name(dt));                                                         \
    }

#define MD_THREADS 256

/* Blocks for a grid-stride loop over n elements: enough to fill the chip. */
static inline unsigned md_cu_blocks(md_device *dev, size_t n, int threads = MD_THREADS)
{
    size_t b = (n + (size_t)threads - 1) / (size_t)threads;
    size_t cap = (size_t)md_cuda_impl(dev)->sm_count * md_cuda_impl(dev)->ew_per_sm;
    if (b > cap) b = cap;
    return b ? (unsigned)b : 1u;
}

#define GRID_STRIDE(i, n)                                                                          \
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (n);                         \
         i += (size_t)gridDim.x * blockDim.x)

__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, at most 1024); every
 * thread gets the result. Fixed order, so deterministic. */
__device__ __forceinline__ float block_sum(float v)
{
    __shared__ float sh[32];
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads(); /* sh may still be read by a previous call */
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : 0.0f;
    return warp_sum(v);
}

/* 16-byte vector accesses: V elements of T per load/store. */
template <class T> struct vw { enum { V = 16 / sizeof(T) }; };
static inline int aligned16(const void *p) { return ((uintptr_t)p & 15u) == 0; }

/* Channel of element i of an (n, c, hw) tensor. */
__device__ __forceinline__ int chan_of(size_t i, int c, int hw, int nhwc)
{
    return nhwc ? (int)(i % (size_t)c) : (int)((i / (size_t)hw) % (size_t)c);
}

#endif
