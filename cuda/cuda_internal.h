/* cuda_internal.h - state shared by the files of the CUDA plug-in.
 *
 * One md_cuda_dev per open device (dev->impl): the stream every kernel and
 * copy is enqueued on, the library handles bound to it, the cuDNN
 * convolution cache, and scratch buffers that grow but never shrink while
 * the device is open (a captured CUDA graph keeps pointing at them; grown-out
 * buffers are retired, not freed, until close).
 */
#ifndef MD_CUDA_INTERNAL_H
#define MD_CUDA_INTERNAL_H

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <pthread.h>

#include "backend/backend_impl.h"

struct md_cuda_conv_entry; /* cuda_conv.cu */

/* A device buffer from md_dev_alloc that only grows. */
struct md_cuda_scratch {
    void *ptr;
    size_t bytes;
};

struct md_cuda_dev {
    int device;
    int sm_count;
    int red_per_sm, ew_per_sm;        /* blocks per SM: per-channel reductions, element-wise grids (cap) */
    cudaStream_t stream;
    cudaStream_t copy_stream;         /* side uploads (md_dev_upload_side) */
    cudaEvent_t copy_done;            /* recorded on copy_stream by side_join */
    /* A convolution's filter gradient runs on conv_side beside its data
     * gradient on stream (cuda_conv.cu, md_cuda_conv_side_join). */
    cudaStream_t conv_side;
    cudaEvent_t conv_fork, conv_join;
    int conv_overlap;                 /* most n p q that runs beside (MPSDIAG_CUDA_CONV_OVERLAP; 0, off, by default) */
    int conv_on_side;                 /* the cuDNN handle is bound to conv_side now */
    int conv_side_pending;            /* conv_join recorded; md_cuda_conv_side_join makes stream wait on it */
    cublasHandle_t blas;
    cublasLtHandle_t blas_lt;
    cudnnHandle_t dnn;
    int tf32;
    int capturing;

    /* caching allocator: free lists per size class (cuda_backend.cu) */
    pthread_mutex_t alloc_lock;
    struct md_cuda_block *free_lists[256];
    long long reserved; /* bytes obtained from cudaMalloc and not yet returned */

    struct md_cuda_scratch blas_ws;   /* cuBLAS workspace (fixed at open) */
    struct md_cuda_scratch conv_ws;   /* cuDNN workspace, grows */
    struct md_cuda_scratch conv_ws_side; /* the same for calls on conv_side */
    struct md_cuda_scratch red_ws;    /* partial sums of reductions, grows */
    struct md_cuda_scratch aux_ws;    /* fp32 copies for half convolutions cuDNN runs slowly, BN statistics */
    struct md_cuda_scratch attn_ws;   /* attention's scores on the GEMM path (cuda_attn_gemm.cu), grows */
    struct md_cuda_scratch s2d_ws;    /* space-to-depth input and filter of stride-2 forwards (cuda_conv.cu) */
    void *retired[64];                /* grown-out scratch, freed at close */
    int n_retired;

    struct md_cuda_conv_entry *convs; /* per-shape descriptors and algorithms */
    int autotune;                     /* convolution plans/algorithms chosen by timing */
    int attn_path;                    /* enum md_attn_path from MPSDIAG_ATTN (0: auto) */
};

static inline struct md_cuda_dev *md_cuda_impl(md_device *dev) { return (struct md_cuda_dev *)dev->impl; }

/* Turns a CUDA runtime error into an md_status with a one-line message. */
md_status md_cuda_err(cudaError_t e, const char *what);
md_status md_cuda_blas_err(cublasStatus_t e, const char *what);
md_status md_cuda_dnn_err(cudnnStatus_t e, const char *what);
/* The last launch's error (cudaGetLastError), as a status naming the kernel. */
md_status md_cuda_check_launch(const char *kernel);

/* Makes sure s holds at least `bytes` (counted through md_dev_alloc). */
md_status md_cuda_scratch_get(md_device *dev, struct md_cuda_scratch *s, size_t bytes, const char *what);

/* Kernel families (one file each). */
md_status md_cuda_gemm(md_device *dev, const struct md_gemm_args *a);
md_status md_cuda_conv2d_fwd(md_device *dev, const struct md_conv2d_args *a);
md_status md_cuda_conv2d_bwd_data(md_device *dev, const struct md_conv2d_args *a);
md_status md_cuda_conv2d_bwd_filter(md_device *dev, const struct md_conv2d_args *a);
void md_cuda_conv_cache_free(md_device *dev);
/* Makes the device stream wait for a filter gradient still running on
 * conv_side (a no-op when none is). */
md_status md_cuda_conv_side_join(md_device *dev);
/* The stride-1 convolution that a stride-2 one on few channels becomes by
 * space-to-depth (cuda_conv.cu): channels c2, input h2 x w2, filter r2 x s2.
 * The rearrangements (cuda_conv_s2d.cu): x into x2 (n, h2, w2, c2) and the
 * filter into w2 (k, r2, s2, c2). */
struct md_cuda_s2d {
    int c2, h2, w2, r2, s2;
};
md_status md_cuda_s2d_input(md_device *dev, const struct md_conv2d_args *a, const struct md_cuda_s2d *s, void *x2);
md_status md_cuda_s2d_filter(md_device *dev, const struct md_conv2d_args *a, const struct md_cuda_s2d *s, void *w2);

md_status md_cuda_batchnorm_fwd(md_device *dev, const struct md_batchnorm_args *a);
md_status md_cuda_batchnorm_bwd(md_device *dev, const struct md_batchnorm_args *a);
/* A kernel's exchange between the ranks (synchronised batch norm): sums n
 * floats of device memory in place. On the device's NCCL communicator,
 * queued on its stream (in order, capturable in a graph) when it has one;
 * else through sync's host hook (copies down and up around it: not
 * capturable); with neither (one rank) nothing. cuda_dist.cu. */
md_status md_cuda_sync_sum(md_device *dev, float *buf, size_t n, const struct md_bn_sync *sync);
md_status md_cuda_act_fwd(md_device *dev, const struct md_act_args *a);
md_status md_cuda_act_bwd(md_device *dev, const struct md_act_args *a);
md_status md_cuda_pool2d_fwd(md_device *dev, const struct md_pool2d_args *a);
md_status md_cuda_pool2d_bwd(md_device *dev, const struct md_pool2d_args *a);
md_status md_cuda_gap_fwd(md_device *dev, const struct md_gap_args *a);
md_status md_cuda_gap_bwd(md_device *dev, const struct md_gap_args *a);
md_status md_cuda_bias_add(md_device *dev, const struct md_bias_args *a);
md_status md_cuda_bias_grad(md_device *dev, const struct md_bias_args *a);
md_status md_cuda_dropout_fwd(md_device *dev, const struct md_dropout_args *a);
md_status md_cuda_dropout_bwd(md_device *dev, const struct md_dropout_args *a);
md_status md_cuda_ew(md_device *dev, const struct md_ew_args *a);
md_status md_cuda_reduce(md_device *dev, const struct md_reduce_args *a);
md_status md_cuda_chslice(md_device *dev, const struct md_chslice_args *a);
md_status md_cuda_xent(md_device *dev, const struct md_xent_args *a);
md_status md_cuda_regress(md_device *dev, const struct md_regress_args *a);
md_status md_cuda_cast(md_device *dev, const struct md_cast_args *a);
md_status md_cuda_permute(md_device *dev, const struct md_permute_args *a);
md_status md_cuda_optim(md_device *dev, const struct md_optim_args *a);
md_status md_cuda_layernorm_fwd(md_device *dev, const struct md_layernorm_args *a);
md_status md_cuda_layernorm_bwd(md_device *dev, const struct md_layernorm_args *a);
md_status md_cuda_softmax_fwd(md_device *dev, const struct md_softmax_args *a);
md_status md_cuda_softmax_bwd(md_device *dev, const struct md_softmax_args *a);
md_status md_cuda_tiles_fwd(md_device *dev, const struct md_tiles_args *a);
md_status md_cuda_tiles_bwd(md_device *dev, const struct md_tiles_args *a);
md_status md_cuda_film_fwd(md_device *dev, const struct md_film_args *a);
md_status md_cuda_film_bwd(md_device *dev, const struct md_film_args *a);
md_status md_cuda_chscale_fwd(md_device *dev, const struct md_chscale_args *a);
md_status md_cuda_chscale_bwd(md_device *dev, const struct md_chscale_args *a);
md_status md_cuda_attn_fwd(md_device *dev, const struct md_attn_args *a);
md_status md_cuda_attn_bwd(md_device *dev, const struct md_attn_args *a);
/* Whether the cuBLAS path (cuda_attn_gemm.cu) and the tensor-core flash
 * kernels (cuda_attn_tc.cu) can run a call (declared again in cuda_attn.cuh). */
int md_cuda_attn_gemm_covers(const struct md_attn_args *a);
int md_cuda_attn_tc_covers(const struct md_attn_args *a);
/* MPSDIAG_ATTN (unset or auto, gemm, flash, simt) as an enum md_attn_path;
 * MD_ERR_USAGE naming the variable for any other value. */
md_status md_cuda_attn_path_env(int *path);

#define MD_CU_TRY(call, what)                                                  \
    do {                                                                       \
        cudaError_t md_cu_e_ = (call);                                         \
        if (md_cu_e_ != cudaSuccess) return md_cuda_err(md_cu_e_, what);       \
    } while (0)

#endif
