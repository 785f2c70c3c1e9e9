/* cuda_backend.cu - the CUDA plug-in: probe, device information, open/close,
 * the caching allocator, copies, events, graph capture and the kernel table.
 * Loaded by src/backend/backend.c through md_cuda_backend_entry(). */
#include <stdio.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_attn_mma.cuh"
#include "cuda_internal.h"
#include "cuda_dist.h"

/* ---------------------------------------------------------------------------
 * Errors
 * ------------------------------------------------------------------------- */

md_status md_cuda_err(cudaError_t e, const char *what)
{
    (void)cudaGetLastError(); /* clear a non-sticky error so later calls are not blamed */
    md_status st = e == cudaErrorMemoryAllocation ? MD_ERR_OOM : MD_ERR_DEVICE;
    return md_errf(st, "cuda: %s: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}

md_status md_cuda_blas_err(cublasStatus_t e, const char *what)
{
    md_status st = e == CUBLAS_STATUS_ALLOC_FAILED ? MD_ERR_OOM
                 : e == CUBLAS_STATUS_NOT_SUPPORTED || e == CUBLAS_STATUS_ARCH_MISMATCH ? MD_ERR_UNSUPPORTED
                                                                                        : MD_ERR_DEVICE;
    return md_errf(st, "cuBLAS: %s: %s (%s)", what, cublasGetStatusString(e), cublasGetStatusName(e));
}

md_status md_cuda_dnn_err(cudnnStatus_t e, const char *what)
{
    md_status st = e == CUDNN_STATUS_ALLOC_FAILED ? MD_ERR_OOM
                 : e == CUDNN_STATUS_NOT_SUPPORTED ? MD_ERR_UNSUPPORTED
                                                   : MD_ERR_DEVICE;
    return md_errf(st, "cuDNN: %s: %s", what, cudnnGetErrorString(e));
}

md_status md_cuda_check_launch(const char *kernel)
{
    cudaError_t e = cudaGetLastError();
    return e == cudaSuccess ? MD_OK : md_cuda_err(e, kernel);
}

/* ---------------------------------------------------------------------------
 * Probe and device information
 * ------------------------------------------------------------------------- */

static void ver_str(char *buf, size_t n, int v) /* 13000 -> "13.0" */
{
    snprintf(buf, n, "%d.%d", v / 1000, (v % 1000) / 10);
}

static void cu_probe(struct md_probe *out)
{
    out->built = 1;
    int drv = 0;
    (void)cudaDriverGetVersion(&drv);
    if (drv == 0) {
        snprintf(out->reason, sizeof out->reason,
                 "no NVIDIA driver (libcuda.so.1 not found; install the NVIDIA driver)");
        return;
    }
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    char d[16], r[16];
    ver_str(d, sizeof d, drv);
    ver_str(r, sizeof r, CUDART_VERSION);
    if (e == cudaErrorInsufficientDriver) {
        snprintf(out->reason, sizeof out->reason,
                 "NVIDIA driver too old: it supports CUDA %s, this build needs CUDA %s", d, r);
        (void)cudaGetLastError();
        return;
    }
    if (e == cudaErrorNoDevice || (e == cudaSuccess && n == 0)) {
        snprintf(out->reason, sizeof out->reason, "no CUDA device found (driver for CUDA %s)", d);
        (void)cudaGetLastError();
        return;
    }
    if (e != cudaSuccess) {
        snprintf(out->reason, sizeof out->reason, "CUDA initialisation failed: %s (%s)", cudaGetErrorString(e),
                 cudaGetErrorName(e));
        (void)cudaGetLastError();
        return;
    }
    size_t dnn = cudnnGetVersion();
    if (dnn < 90000) {
        snprintf(out->reason, sizeof out->reason, "cuDNN %zu.%zu found, 9.x needed", dnn / 10000,
                 (dnn % 10000) / 100);
        return;
    }
    out->available = 1;
    out->device_count = n > MD_MAX_DEVICES ? MD_MAX_DEVICES : n;
}

static md_status cu_device_info(int index, struct md_device_info *out)
{
    cudaDeviceProp p;
    MD_CU_TRY(cudaGetDeviceProperties(&p, index), "cudaGetDeviceProperties");
    snprintf(out->name, sizeof out->name, "%.*s", (int)sizeof out->name - 1, p.name);
    out->compute_units = p.multiProcessorCount;
    out->total_memory = (long long)p.totalGlobalMem;
    out->cc_major = p.major;
    out->cc_minor = p.minor;
    snprintf(out->arch, sizeof out->arch, "sm_%d%d", p.major, p.minor);
    MD_CU_TRY(cudaSetDevice(index), "cudaSetDevice");
    size_t fr = 0, tot = 0;
    if (cudaMemGetInfo(&fr, &tot) == cudaSuccess) out->free_memory = (long long)fr;
    else (void)cudaGetLastError();
    int v = 0;
    (void)cudaDriverGetVersion(&v);
    ver_str(out->driver_version, sizeof out->driver_version, v);
    v = 0;
    (void)cudaRuntimeGetVersion(&v);
    ver_str(out->runtime_version, sizeof out->runtime_version, v);
    int ma = 0, mi = 0, pa = 0;
    cublasGetProperty(MAJOR_VERSION, &ma);
    cublasGetProperty(MINOR_VERSION, &mi);
    cublasGetProperty(PATCH_LEVEL, &pa);
    snprintf(out->blas, sizeof out->blas, "cuBLAS %d.%d.%d", ma, mi, pa);
    size_t dv = cudnnGetVersion();
    snprintf(out->dnn, sizeof out->dnn, "cuDNN %zu.%zu.%zu", dv / 10000, (dv % 10000) / 100, dv % 100);
    out->unified_memory = 0;
    out->supports_fp16 = p.major > 5 || (p.major == 5 && p.minor >= 3);
    out->supports_bf16 = p.major >= 8;
    out->supports_tf32 = p.major >= 8;
    out->has_events = 1;
    out->benefits_from_pinned = 1;
    return MD_OK;
}

/* ---------------------------------------------------------------------------
 * Caching allocator. Sizes are rounded up to classes of four steps per
 * power of two (at most 25% waste, 512 B minimum); a freed block goes on its
 * class's list and is handed out again without cudaMalloc/cudaFree (which
 * synchronise the device). The core tracks current/peak by requested size;
 * `reserved` is what we hold from the driver.
 * ------------------------------------------------------------------------- */

struct md_cuda_block {
    void *ptr;
    struct md_cuda_block *next;
};

static int size_class(size_t bytes, size_t *class_bytes)
{
    if (bytes <= 512) {
        *class_bytes = 512;
        return 0;
    }
    int o = 63 - __builtin_clzll((unsigned long long)(bytes - 1)); /* 2^o < bytes <= 2^(o+1) */
    size_t quarter = (size_t)1 << (o - 2);
    size_t m = (bytes + quarter - 1) / quarter; /* 5..8 */
    *class_bytes = m * quarter;
    return 1 + (o - 9) * 4 + (int)(m - 5);
}

static size_t class_size(int idx)
{
    if (idx == 0) return 512;
    int j = idx - 1, o = 9 + j / 4;
    return (size_t)(5 + j % 4) << (o - 2);
}

/* Returns every cached block to the driver. Caller holds the lock. */
static void release_cache(struct md_cuda_dev *c)
{
    for (int i = 0; i < 256; i++) {
        while (c->free_lists[i]) {
            struct md_cuda_block *b = c->free_lists[i];
            c->free_lists[i] = b->next;
            cudaFree(b->ptr);
            md_free(b);
            c->reserved -= (long long)class_size(i);
        }
    }
}

static md_status cu_alloc(md_device *dev, size_t bytes, void **ptr)
{
    struct md_cuda_dev *c = md_cuda_impl(dev);
    size_t cls;
    int idx = size_class(bytes, &cls);
    *ptr = NULL;
    pthread_mutex_lock(&c->alloc_lock);
    struct md_cuda_block *b = c->free_lists[idx];
    if (b) {
        c->free_lists[idx] = b->next;
        *ptr = b->ptr;
        md_free(b);
        pthread_mutex_unlock(&c->alloc_lock);
        return MD_OK;
    }
    /* Under a cap, cached blocks of other classes count against it too. */
    if (dev->mem.limit && c->reserved + (long long)cls > dev->mem.limit && !c->capturing) release_cache(c);
    cudaError_t e = cudaMalloc(ptr, cls);
    if (e != cudaSuccess && !c->capturing) {
        (void)cudaGetLastError();
        release_cache(c);
        e = cudaMalloc(ptr, cls);
    }
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        *ptr = NULL;
        pthread_mutex_unlock(&c->alloc_lock);
        return MD_ERR_OOM; /* the core words the message: requested, in use, limit */
    }
    c->reserved += (long long)cls;
    pthread_mutex_unlock(&c->alloc_lock);
    return MD_OK;
}

static void cu_free(md_device *dev, void *ptr, size_t bytes)
{
    struct md_cuda_dev *c = md_cuda_impl(dev);
    size_t cls;
    int idx = size_class(bytes, &cls);
    struct md_cuda_block *b = (struct md_cuda_block *)md_malloc(sizeof *b);
    pthread_mutex_lock(&c->alloc_lock);
    if (!b) { /* no host memory for the list node: give the block back instead */
        cudaFree(ptr);
        c->reserved -= (long long)cls;
    } else {
        b->ptr = ptr;
        b->next = c->free_lists[idx];
        c->free_lists[idx] = b;
    }
    pthread_mutex_unlock(&c->alloc_lock);
}

static void cu_driver_mem(md_device *dev, long long *total, long long *free_bytes, long long *reserved)
{
    struct md_cuda_dev *c = md_cuda_impl(dev);
    size_t f = 0, t = 0;
    if (cudaMemGetInfo(&f, &t) == cudaSuccess) {
        *total = (long long)t;
        *free_bytes = (long long)f;
    } else {
        (void)cudaGetLastError();
    }
    *reserved = c->reserved;
}

md_status md_cuda_scratch_get(md_device *dev, struct md_cuda_scratch *s, size_t bytes, const char *what)
{
    struct md_cuda_dev *c = md_cuda_impl(dev);
    if (s->bytes >= bytes) return MD_OK;
    size_t want = bytes + bytes / 4; /* grow in steps, not per call */
    void *p = NULL;
    MD_TRY(md_dev_alloc(dev, want, &p, what));
    if (s->ptr) {
        /* A captured graph may still point at the old buffer. */
        if (c->n_retired < (int)(sizeof c->retired / sizeof c->retired[0])) {
            c->retired[c->n_retired++] = s->ptr;
        } else {
            MD_CU_TRY(cudaStreamSynchronize(c->stream), "synchronising before freeing scratch");
            md_dev_free(dev, s->ptr);
        }
    }
    s->ptr = p;
    s->bytes = want;
    return MD_OK;
}

/* ---------------------------------------------------------------------------
 * Open / close
 * ------------------------------------------------------------------------- */

#define BLAS_WS_BYTES ((size_t)32 << 20)

static void cu_close(md_device *dev)
{
    struct md_cuda_dev *c = md_cuda_impl(dev);
    if (!c) return;
    md_cuda_comm_close(dev);
    if (c->stream) cudaStreamSynchronize(c->stream);
    md_cuda_conv_cache_free(dev);
    md_dev_free(dev, c->blas_ws.ptr);
    md_dev_free(dev, c->conv_ws.ptr);
    md_dev_free(dev, c->conv_ws_side.ptr);
    md_dev_free(dev, c->red_ws.ptr);
    md_dev_free(dev, c->aux_ws.ptr);
    md_dev_free(dev, c->attn_ws.ptr);
    md_dev_free(dev, c->s2d_ws.ptr);
    for (int i = 0; i < c->n_retired; i++) md_dev_free(dev, c->retired[i]);
    if (c->dnn) cudnnDestroy(c->dnn);
    if (c->blas_lt) cublasLtDestroy(c->blas_lt);
    if (c->blas) cublasDestroy(c->blas);
    if (c->copy_done) cudaEventDestroy(c->copy_done);
    if (c->copy_stream) cudaStreamDestroy(c->copy_stream);
    if (c->conv_side) cudaStreamSynchronize(c->conv_side);
    if (c->conv_fork) cudaEventDestroy(c->conv_fork);
    if (c->conv_join) cudaEventDestroy(c->conv_join);
    if (c->conv_side) cudaStreamDestroy(c->conv_side);
    if (c->stream) cudaStreamDestroy(c->stream);
    pthread_mutex_lock(&c->alloc_lock);
    release_cache(c);
    pthread_mutex_unlock(&c->alloc_lock);
    pthread_mutex_destroy(&c->alloc_lock);
    (void)cudaGetLastError();
    md_free(c);
    dev->impl = NULL;
}

static md_status cu_open(md_device *dev)
{
    md_status st = MD_OK;
    cublasStatus_t bs;
    cudnnStatus_t ds;
    size_t f = 0, t = 0;
    const char *at = getenv("MPSDIAG_CUDNN_AUTOTUNE");
    int attn_path;
    MD_TRY(md_cuda_attn_path_env(&attn_path));
    struct md_cuda_dev *c = (struct md_cuda_dev *)md_calloc(1, sizeof *c);
    if (!c) return MD_ERR_OOM;
    pthread_mutex_init(&c->alloc_lock, NULL);
    dev->impl = c;
    c->device = dev->index;
    c->sm_count = dev->info.compute_units > 0 ? dev->info.compute_units : 1;
    /* grid sizes (MPSDIAG_CUDA_RED_PER_SM / _EW_PER_SM: for measuring them) */
    const char *rp = getenv("MPSDIAG_CUDA_RED_PER_SM"), *ep = getenv("MPSDIAG_CUDA_EW_PER_SM");
    c->red_per_sm = rp && atoi(rp) > 0 ? atoi(rp) : 4; /* 4 against 8 and 16: docs/cuda.md */
    c->ew_per_sm = ep && atoi(ep) > 0 ? atoi(ep) : 32;
    c->tf32 = dev->opts.allow_tf32 && dev->info.supports_tf32;
    c->autotune = dev->opts.autotune || (at && strcmp(at, "1") == 0);
    c->attn_path = attn_path;
    cudaError_t e = cudaSetDevice(c->device);
    if (e != cudaSuccess) { st = md_cuda_err(e, "cudaSetDevice"); goto fail; }
    e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) { st = md_cuda_err(e, "cudaStreamCreate"); goto fail; }
    e = cudaStreamCreateWithFlags(&c->copy_stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) { st = md_cuda_err(e, "cudaStreamCreate (copy stream)"); goto fail; }
    e = cudaEventCreateWithFlags(&c->copy_done, cudaEventDisableTiming);
    if (e != cudaSuccess) { st = md_cuda_err(e, "cudaEventCreate (copy stream)"); goto fail; }
    {
        /* MPSDIAG_CUDA_CONV_OVERLAP: `all`, or the most output pixels (n p q)
         * of a convolution whose filter gradient runs beside; off by default
         * (within 1% either way on ResNets, docs/cuda.md) */
        const char *ov = getenv("MPSDIAG_CUDA_CONV_OVERLAP");
        c->conv_overlap = 0;
        if (ov) c->conv_overlap = strcmp(ov, "all") == 0 ? INT_MAX : atoi(ov) > 0 ? atoi(ov) : 0;
    }
    e = cudaStreamCreateWithFlags(&c->conv_side, cudaStreamNonBlocking);
    if (e != cudaSuccess) { st = md_cuda_err(e, "cudaStreamCreate (filter gradient stream)"); goto fail; }
    e = cudaEventCreateWithFlags(&c->conv_fork, cudaEventDisableTiming);
    if (e == cudaSuccess) e = cudaEventCreateWithFlags(&c->conv_join, cudaEventDisableTiming);
    if (e != cudaSuccess) { st = md_cuda_err(e, "cudaEventCreate (filter gradient stream)"); goto fail; }
    if ((bs = cublasCreate(&c->blas)) != CUBLAS_STATUS_SUCCESS) { st = md_cuda_blas_err(bs, "cublasCreate"); goto fail; }
    if ((bs = cublasSetStream(c->blas, c->stream)) != CUBLAS_STATUS_SUCCESS) { st = md_cuda_blas_err(bs, "cublasSetStream"); goto fail; }
    /* The compute type of each call decides TF32; the math mode only keeps
     * cuBLAS from picking it on its own when --no-tf32 is given. Split-K
     * partial sums of fp16/bf16 GEMMs stay fp32 (by default cuBLAS may reduce
     * them in half precision: errors of 0.1 on bf16 GEMMs with k = 450). */
    cublasSetMathMode(c->blas, (cublasMath_t)((c->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH) |
                                              CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION));
    if ((bs = cublasLtCreate(&c->blas_lt)) != CUBLAS_STATUS_SUCCESS) { st = md_cuda_blas_err(bs, "cublasLtCreate"); goto fail; }
    if ((ds = cudnnCreate(&c->dnn)) != CUDNN_STATUS_SUCCESS) { st = md_cuda_dnn_err(ds, "cudnnCreate"); goto fail; }
    if ((ds = cudnnSetStream(c->dnn, c->stream)) != CUDNN_STATUS_SUCCESS) { st = md_cuda_dnn_err(ds, "cudnnSetStream"); goto fail; }
    /* Our own workspace, so cuBLAS never allocates (graph capture) and it is counted. */
    st = md_cuda_scratch_get(dev, &c->blas_ws, BLAS_WS_BYTES * 4 / 5, "cuBLAS workspace");
    if (st != MD_OK) goto fail;
    if ((bs = cublasSetWorkspace(c->blas, c->blas_ws.ptr, c->blas_ws.bytes)) != CUBLAS_STATUS_SUCCESS) {
        st = md_cuda_blas_err(bs, "cublasSetWorkspace");
        goto fail;
    }
    if (cudaMemGetInfo(&f, &t) == cudaSuccess) dev->info.free_memory = (long long)f;
    return MD_OK;
fail:
    cu_close(dev);
    return st;
}

/* ---------------------------------------------------------------------------
 * Copies (asynchronous on the device's stream; download waits for the data)
 * ------------------------------------------------------------------------- */

static md_status cu_upload(md_device *dev, void *dst, const void *src, size_t bytes)
{
    MD_CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, md_cuda_impl(dev)->stream), "upload");
    return MD_OK;
}

static md_status cu_download(md_device *dev, void *dst, const void *src, size_t bytes)
{
    cudaStream_t s = md_cuda_impl(dev)->stream;
    MD_CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, s), "download");
    MD_CU_TRY(cudaStreamSynchronize(s), "download (synchronise)");
    return MD_OK;
}

static md_status cu_download_async(md_device *dev, void *dst, const void *src, size_t bytes)
{
    MD_CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, md_cuda_impl(dev)->stream), "download");
    return MD_OK;
}

/* Uploads on the copy stream overlap the kernels of the compute stream (the
 * copy engines are separate); with page-locked sources they are truly async. */
static md_status cu_upload_side(md_device *dev, void *dst, const void *src, size_t bytes)
{
    MD_CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, md_cuda_impl(dev)->copy_stream), "upload (copy stream)");
    return MD_OK;
}

static md_status cu_side_join(md_device *dev)
{
    struct md_cuda_dev *c = md_cuda_impl(dev);
    MD_CU_TRY(cudaEventRecord(c->copy_done, c->copy_stream), "cudaEventRecord (copy stream)");
    MD_CU_TRY(cudaStreamWaitEvent(c->stream, c->copy_done, 0), "cudaStreamWaitEvent (copy stream)");
    return MD_OK;
}

static md_status cu_copy(md_device *dev, void *dst, const void *src, size_t bytes)
{
    MD_CU_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, md_cuda_impl(dev)->stream), "copy");
    return MD_OK;
}

static md_status cu_memset0(md_device *dev, void *dst, size_t bytes)
{
    MD_CU_TRY(cudaMemsetAsync(dst, 0, bytes, md_cuda_impl(dev)->stream), "memset");
    return MD_OK;
}

static md_status cu_sync(md_device *dev)
{
    MD_TRY(md_cuda_conv_side_join(dev));
    MD_CU_TRY(cudaStreamSynchronize(md_cuda_impl(dev)->copy_stream), "synchronise (copy stream)");
    MD_CU_TRY(cudaStreamSynchronize(md_cuda_impl(dev)->stream), "synchronise");
    return MD_OK;
}

static md_status cu_host_alloc(md_device *dev, size_t bytes, void **ptr)
{
    (void)dev;
    MD_CU_TRY(cudaHostAlloc(ptr, bytes ? bytes : 1, cudaHostAllocDefault), "cudaHostAlloc (pinned host memory)");
    return MD_OK;
}

static void cu_host_free(md_device *dev, void *ptr)
{
    (void)dev;
    cudaFreeHost(ptr);
}

/* ---------------------------------------------------------------------------
 * Events and graphs
 * ------------------------------------------------------------------------- */

static md_status cu_event_create(md_device *dev, void **ev)
{
    (void)dev;
    cudaEvent_t e;
    MD_CU_TRY(cudaEventCreate(&e), "cudaEventCreate");
    *ev = (void *)e;
    return MD_OK;
}

static md_status cu_event_record(md_device *dev, void *ev)
{
    MD_CU_TRY(cudaEventRecord((cudaEvent_t)ev, md_cuda_impl(dev)->stream), "cudaEventRecord");
    return MD_OK;
}

static md_status cu_event_elapsed(md_device *dev, void *start, void *end, float *ms)
{
    (void)dev;
    MD_CU_TRY(cudaEventSynchronize((cudaEvent_t)end), "cudaEventSynchronize");
    MD_CU_TRY(cudaEventElapsedTime(ms, (cudaEvent_t)start, (cudaEvent_t)end), "cudaEventElapsedTime");
    return MD_OK;
}

static md_status cu_event_sync(md_device *dev, void *ev)
{
    (void)dev;
    MD_CU_TRY(cudaEventSynchronize((cudaEvent_t)ev), "cudaEventSynchronize");
    return MD_OK;
}

static void cu_event_destroy(md_device *dev, void *ev)
{
    (void)dev;
    cudaEventDestroy((cudaEvent_t)ev);
}

static md_status cu_capture_begin(md_device *dev)
{
    struct md_cuda_dev *c = md_cuda_impl(dev);
    /* Relaxed: a first-time scratch growth (cudaMalloc) inside the step is allowed. */
    MD_CU_TRY(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeRelaxed), "cudaStreamBeginCapture");
    c->capturing = 1;
    return MD_OK;
}

static md_status cu_capture_end(md_device *dev, void **graph)
{
    struct md_cuda_dev *c = md_cuda_impl(dev);
    cudaGraph_t g = NULL;
    cudaGraphExec_t x = NULL;
    *graph = NULL;
    c->capturing = 0;
    md_status js = md_cuda_conv_side_join(dev); /* the capture ends joined, or fails */
    cudaError_t e = cudaStreamEndCapture(c->stream, &g);
    if (js != MD_OK && e == cudaSuccess) {
        cudaGraphDestroy(g);
        return js;
    }
    if (e != cudaSuccess) return md_cuda_err(e, "cudaStreamEndCapture (an operation in the step cannot be captured)");
    e = cudaGraphInstantiate(&x, g, 0);
    cudaGraphDestroy(g);
    if (e != cudaSuccess) return md_cuda_err(e, "cudaGraphInstantiate");
    *graph = (void *)x;
    return MD_OK;
}

static md_status cu_graph_launch(md_device *dev, void *graph)
{
    MD_CU_TRY(cudaGraphLaunch((cudaGraphExec_t)graph, md_cuda_impl(dev)->stream), "cudaGraphLaunch");
    return MD_OK;
}

static void cu_graph_destroy(md_device *dev, void *graph)
{
    (void)dev;
    cudaGraphExecDestroy((cudaGraphExec_t)graph);
}

/* The automatic attention path for short sequences (up to
 * MD_ATTN_GEMM_MAX_T tokens, half types). Head sizes the register-resident
 * kernels cover (cuda_attn_mma.cu: 32 < head_dim <= 64, no dropout) run
 * both passes there: at ViT-S/14 shapes, batch 64, on an H100 they beat the
 * cuBLAS products in both directions (docs/kernels-attention.md). Otherwise
 * the forward goes through the flash kernels, which never write the T x T
 * scores (0.22 against 0.39 ms), and the backward through cuBLAS products
 * (0.76 against 0.87 ms). Every path keeps the same per-row log-sum-exp and
 * draws dropout from the same counters, so a forward of one and a backward
 * of the other give the gradients of either. A path forced by the call or by
 * MPSDIAG_ATTN runs both passes as it is. */
static int attn_auto_short(md_device *dev, const struct md_attn_args *a)
{
    return a->path == MD_ATTN_AUTO && md_cuda_impl(dev)->attn_path == MD_ATTN_AUTO && a->tq <= MD_ATTN_GEMM_MAX_T &&
           a->tk <= MD_ATTN_GEMM_MAX_T;
}

static md_status attn_fwd_auto(md_device *dev, const struct md_attn_args *a)
{
    if (attn_auto_short(dev, a) &&
        (md_cuda_attn_mma_covers(a, 0) || (md_cuda_attn_gemm_covers(a) && md_cuda_attn_tc_covers(a)))) {
        struct md_attn_args f = *a;
        f.path = MD_ATTN_FLASH;
        return md_cuda_attn_fwd(dev, &f);
    }
    return md_cuda_attn_fwd(dev, a);
}

static md_status attn_bwd_auto(md_device *dev, const struct md_attn_args *a)
{
    if (attn_auto_short(dev, a) && md_cuda_attn_mma_covers(a, 1)) {
        struct md_attn_args f = *a;
        f.path = MD_ATTN_FLASH;
        return md_cuda_attn_bwd(dev, &f);
    }
    return md_cuda_attn_bwd(dev, a);
}


/* ---------------------------------------------------------------------------
 * The table
 * ------------------------------------------------------------------------- */

static struct md_backend_ops cuda_ops;

extern "C" __attribute__((visibility("default"))) const struct md_backend_ops *
md_cuda_backend_entry(int api_version)
{
    if (api_version != MD_BACKEND_API_VERSION) return NULL;
    struct md_backend_ops *o = &cuda_ops;
    if (o->api_version) return o;
    o->name = "cuda";
    o->probe = cu_probe;
    o->device_info = cu_device_info;
    o->open = cu_open;
    o->close = cu_close;
    o->alloc = cu_alloc;
    o->free = cu_free;
    o->upload = cu_upload;
    o->download = cu_download;
    o->copy = cu_copy;
    o->memset0 = cu_memset0;
    o->sync = cu_sync;
    o->download_async = cu_download_async;
    o->upload_side = cu_upload_side;
    o->side_join = cu_side_join;
    o->driver_mem = cu_driver_mem;
    o->host_alloc_pinned = cu_host_alloc;
    o->host_free_pinned = cu_host_free;
    o->event_create = cu_event_create;
    o->event_record = cu_event_record;
    o->event_elapsed_ms = cu_event_elapsed;
    o->event_destroy = cu_event_destroy;
    o->event_sync = cu_event_sync;
    o->capture_begin = cu_capture_begin;
    o->capture_end = cu_capture_end;
    o->graph_launch = cu_graph_launch;
    o->graph_destroy = cu_graph_destroy;
    o->comm_unique_id = md_cuda_comm_unique_id;
    o->comm_init = md_cuda_comm_init;
    o->allreduce_sum = md_cuda_allreduce_sum;
    o->allreduce_start = md_cuda_allreduce_start;
    o->allreduce_join = md_cuda_allreduce_join;
    o->comm_busy_ms = md_cuda_comm_busy_ms;
    o->comm_check = md_cuda_comm_check;
    o->comm_abort = md_cuda_comm_abort;
    o->batchnorm_sync = 1;
    o->batchnorm_residual = 1;
    struct md_kernels *k = &o->kernels;
    k->gemm = md_cuda_gemm;
    k->conv2d_fwd = md_cuda_conv2d_fwd;
    k->conv2d_bwd_data = md_cuda_conv2d_bwd_data;
    k->conv2d_bwd_filter = md_cuda_conv2d_bwd_filter;
    k->batchnorm_fwd = md_cuda_batchnorm_fwd;
    k->batchnorm_bwd = md_cuda_batchnorm_bwd;
    k->act_fwd = md_cuda_act_fwd;
    k->act_bwd = md_cuda_act_bwd;
    k->pool2d_fwd = md_cuda_pool2d_fwd;
    k->pool2d_bwd = md_cuda_pool2d_bwd;
    k->gap_fwd = md_cuda_gap_fwd;
    k->gap_bwd = md_cuda_gap_bwd;
    k->bias_add = md_cuda_bias_add;
    k->bias_grad = md_cuda_bias_grad;
    k->dropout_fwd = md_cuda_dropout_fwd;
    k->dropout_bwd = md_cuda_dropout_bwd;
    k->ew = md_cuda_ew;
    k->reduce = md_cuda_reduce;
    k->chslice = md_cuda_chslice;
    k->xent = md_cuda_xent;
    k->regress = md_cuda_regress;
    k->cast = md_cuda_cast;
    k->permute = md_cuda_permute;
    k->optim = md_cuda_optim;
    k->layernorm_fwd = md_cuda_layernorm_fwd;
    k->layernorm_bwd = md_cuda_layernorm_bwd;
    k->softmax_fwd = md_cuda_softmax_fwd;
    k->softmax_bwd = md_cuda_softmax_bwd;
    k->attn_fwd = attn_fwd_auto;
    k->attn_bwd = attn_bwd_auto;
    k->tiles_fwd = md_cuda_tiles_fwd;
    k->tiles_bwd = md_cuda_tiles_bwd;
    k->film_fwd = md_cuda_film_fwd;
    k->film_bwd = md_cuda_film_bwd;
    k->chscale_fwd = md_cuda_chscale_fwd;
    k->chscale_bwd = md_cuda_chscale_bwd;
    o->api_version = MD_BACKEND_API_VERSION;
    return o;
}
