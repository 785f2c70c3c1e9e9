/* backend_impl.h - the backend vtable. Only backends and the registry include
 * this; the rest of mpsdiag uses backend.h.
 *
 * A backend is one `struct md_backend_ops` filled with designated
 * initialisers; an omitted optional entry is NULL and the default applies.
 * The CUDA backend lives in a shared object that exports
 *     const struct md_backend_ops *md_cuda_backend_entry(int api_version);
 * (returns NULL on an API mismatch); the Metal backend is linked in on macOS.
 * Valid C11 and CUDA C++.
 */
#ifndef MD_BACKEND_IMPL_H
#define MD_BACKEND_IMPL_H

#include "backend/backend.h"
#include "core/mem.h"

#ifdef __cplusplus
extern "C" {
#endif

struct md_backend_ops {
    int api_version;       /* MD_BACKEND_API_VERSION */
    const char *name;      /* "cpu", "cuda", "metal", "ref" */

    /* lifecycle (required) */
    void (*probe)(struct md_probe *out);
    md_status (*device_info)(int index, struct md_device_info *out);
    /* Creates dev->impl; dev->info, dev->opts and dev->mem are set before. */
    md_status (*open)(md_device *dev);
    void (*close)(md_device *dev);

    /* memory (required) */
    md_status (*alloc)(md_device *dev, size_t bytes, void **ptr);
    void (*free)(md_device *dev, void *ptr, size_t bytes);
    md_status (*upload)(md_device *dev, void *dst, const void *src, size_t bytes);
    md_status (*download)(md_device *dev, void *dst, const void *src, size_t bytes);
    md_status (*copy)(md_device *dev, void *dst, const void *src, size_t bytes);
    md_status (*memset0)(md_device *dev, void *dst, size_t bytes);
    md_status (*sync)(md_device *dev);
    /* (optional) pipelined copies (backend.h); defaults: download, upload, nothing */
    md_status (*download_async)(md_device *dev, void *dst, const void *src, size_t bytes);
    md_status (*upload_side)(md_device *dev, void *dst, const void *src, size_t bytes);
    md_status (*side_join)(md_device *dev);
    /* (optional) driver-level figures; defaults to none */
    void (*driver_mem)(md_device *dev, long long *total, long long *free_bytes, long long *reserved);
    /* (optional) the measured fp32 FMA peak (md_dev_fma_peak_gflops); default 0 */
    double (*fma_peak_gflops)(md_device *dev, const char **isa);
    /* (optional) page-locked host memory; defaults to md_malloc */
    md_status (*host_alloc_pinned)(md_device *dev, size_t bytes, void **ptr);
    void (*host_free_pinned)(md_device *dev, void *ptr);

    /* (optional) events; default: host clock after sync */
    md_status (*event_create)(md_device *dev, void **ev);
    md_status (*event_record)(md_device *dev, void *ev);
    md_status (*event_elapsed_ms)(md_device *dev, void *start, void *end, float *ms);
    void (*event_destroy)(md_device *dev, void *ev);
    md_status (*event_sync)(md_device *dev, void *ev); /* host waits; default md_dev_sync */

    /* (optional) graph capture; default: unsupported */
    md_status (*capture_begin)(md_device *dev);
    md_status (*capture_end)(md_device *dev, void **graph);
    md_status (*graph_launch)(md_device *dev, void *graph);
    void (*graph_destroy)(md_device *dev, void *graph);

    /* (optional) collectives between ranks (backend.h md_dev_comm_*); all
     * or none. The communicator belongs to the device: close ends it. */
    md_status (*comm_unique_id)(md_device *dev, unsigned char id[MD_COMM_ID_BYTES]);
    md_status (*comm_init)(md_device *dev, const unsigned char id[MD_COMM_ID_BYTES], int nranks, int rank);
    md_status (*allreduce_sum)(md_device *dev, float *buf, size_t n);
    md_status (*comm_check)(md_device *dev);
    void (*comm_abort)(md_device *dev);

    /* 1: batchnorm_fwd/bwd honour md_batchnorm_args.sync (kernels.h) */
    int batchnorm_sync;
    /* 1: batchnorm_fwd/bwd honour md_batchnorm_args.res/dres */
    int batchnorm_residual;
    /* 1: batchnorm_fwd/bwd honour md_batchnorm_args.pool (fp32) */
    int batchnorm_pool;
    /* 1: batchnorm_bwd honours md_batchnorm_args.conv (channels-last fp32) */
    int batchnorm_pool_conv;

    struct md_kernels kernels;

    /* (optional) an all-reduce that overlaps the kernels queued after it:
     * started on a side queue once the kernels before it are done,
     * joined back before the next kernel that reads its result; default:
     * allreduce_sum in order, join a no-op. comm_busy_ms: the summed time
     * of the collectives started since the last call, after a sync (or
     * MD_ERR_UNSUPPORTED where they were not timed, e.g. in a graph). */
    md_status (*allreduce_start)(md_device *dev, float *buf, size_t n);
    md_status (*allreduce_join)(md_device *dev);
    md_status (*comm_busy_ms)(md_device *dev, float *ms);
};

/* Pointer -> size map of a device's live allocations. */
struct md_ptrmap { void **keys; size_t *vals; size_t cap, used; };

/* Fault injection for tests (MPSDIAG_TEST_ALLOC_FAIL=WHAT[:N], read when the
 * device opens): the first N device allocations (every one without N) whose
 * description contains WHAT are refused as if the device's own allocator
 * were out of memory. */
struct md_alloc_fault {
    char what[96];  /* "" = off */
    long long left; /* allocations still to refuse; -1 = all */
};

/* An open device. Created by md_device_open, which fills everything but
 * `impl` before calling ops->open. */
struct md_device {
    const struct md_backend_ops *ops;
    const md_backend *backend;
    int index;
    struct md_device_info info;
    struct md_device_opts opts;
    md_memtrack mem;          /* tracked device allocations */
    void *impl;               /* backend-private state, owned by the backend */
    md_device *fallback;      /* CPU device for unsupported ops (unified memory only) */
    long long fallback_calls[MD_KERNEL_COUNT];
    struct md_ptrmap blocks;  /* live allocations (md_dev_alloc) */
    struct md_alloc_fault fault;
    int no_bn_residual;       /* md_dev_set_batchnorm_residual(dev, 0) */
    int no_bn_pool;           /* md_dev_set_batchnorm_pool(dev, 0) */
    int no_bn_pool_conv;      /* md_dev_set_batchnorm_pool_conv(dev, 0) */
    long long conv_beside;    /* filter gradients run beside their data gradient (CUDA) */
};

/* Memory entries for backends whose device memory is host memory (cpu, ref,
 * the Metal simulation): md_malloc/md_free, memmove, memset, nothing to wait
 * for. MD_HOST_MEMORY_OPS fills the table's memory entries with them. */
md_status md_host_alloc(md_device *dev, size_t bytes, void **ptr);
void md_host_free(md_device *dev, void *ptr, size_t bytes);
md_status md_host_copy(md_device *dev, void *dst, const void *src, size_t bytes);
md_status md_host_memset0(md_device *dev, void *dst, size_t bytes);
md_status md_host_sync(md_device *dev);
/* Their probe too: built in, always available, one device. */
void md_host_probe(struct md_probe *out);
#define MD_HOST_MEMORY_OPS                                                                        \
    .alloc = md_host_alloc, .free = md_host_free, .upload = md_host_copy, .download = md_host_copy, \
    .copy = md_host_copy, .memset0 = md_host_memset0, .sync = md_host_sync

/* Tests only: the backend registered as `name` runs `ops` from now on
 * (probed afresh; NULL goes back to the built-in one), e.g. a "metal" made
 * of the CPU backend with kernels left out, so that the CPU fallback fires. */
void md_backend_set_test_ops(const char *name, const struct md_backend_ops *ops);

/* Built-in backends. */
const struct md_backend_ops *md_cpu_backend_ops(void);
const struct md_backend_ops *md_ref_backend_ops(void);
/* Metal: real on macOS builds, a stub elsewhere whose probe says why. */
const struct md_backend_ops *md_metal_backend_ops(void);

#ifdef __cplusplus
}
#endif
#endif
