/* backend.h - devices as the rest of mpsdiag sees them.
 *
 * A backend (cpu, cuda, metal) is found in the registry by name, probed
 * (available or not, with a reason), and opened into an md_device. All
 * device memory goes through md_dev_alloc so current/peak/limit are known.
 * Kernels are called through the md_k_* wrappers in kernels_call.h, which add
 * the CPU fallback; nobody else touches the vtable (backend_impl.h).
 */
#ifndef MD_BACKEND_H
#define MD_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "backend/kernels.h"
#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MD_BACKEND_API_VERSION 6
#define MD_MAX_DEVICES 16

typedef enum md_backend_kind { MD_BACKEND_CPU = 0, MD_BACKEND_CUDA, MD_BACKEND_METAL, MD_BACKEND_REF } md_backend_kind;

/* What a probe found for one backend. */
struct md_probe {
    int available;         /* 1 if at least one device can be opened */
    int built;             /* 1 if this binary was built with the backend */
    int device_count;
    char reason[256];      /* why not available ("built without CUDA", "no driver", ...) */
};

/* Static description of one device, filled by the backend. Unknown numbers
 * are 0 / unknown strings are "" (reports print "unknown"). */
struct md_device_info {
    char name[128];            /* "NVIDIA H100 80GB HBM3", "Apple M2 Pro", "AMD EPYC ..." */
    char backend[16];          /* "cpu", "cuda", "metal" */
    int index;
    int compute_units;         /* SMs, GPU cores, CPU threads in use */
    long long total_memory;    /* bytes */
    long long free_memory;     /* bytes, at open time */
    long long recommended_working_set; /* Metal: recommendedMaxWorkingSetSize */
    int cc_major, cc_minor;    /* CUDA compute capability */
    char arch[64];             /* "sm_90", "apple8", "haswell" */
    char driver_version[32], runtime_version[32];
    char blas[128];            /* cuBLAS / OpenBLAS version */
    char dnn[64];              /* cuDNN version */
    char family[64];           /* Metal GPU family */
    int unified_memory;        /* host and device share memory */
    int supports_fp16, supports_bf16, supports_tf32;
    int has_events;            /* device timers */
    int benefits_from_pinned;  /* page-locked host buffers speed up copies */
    int prefers_channels_last; /* convolutions run faster on NHWC activations here */
    char conv_impl[200];       /* how convolutions run here, and why ("" = not said) */
};

/* Memory statistics of a device (bytes). */
struct md_mem_stats {
    long long current, peak, limit;  /* tracked allocations */
    long long reserved;              /* held by a caching allocator (>= current) */
    long long driver_total, driver_free; /* as the driver reports now (0 = unknown) */
    long long allocs, frees;
};

/* Options for opening a device. */
struct md_device_opts {
    int threads;             /* CPU: worker threads (0 = physical cores) */
    double memory_fraction;  /* 0 = no cap; else cap = fraction * total */
    int allow_tf32;          /* CUDA */
    int fallback;            /* run unsupported ops on the CPU */
    int deterministic;
    int eager;               /* Metal: one waited command buffer per kernel call (--no-compile) */
    int autotune;            /* CUDA: measure the convolution algorithms per shape (max-autotune) */
};

typedef struct md_backend md_backend; /* opaque */
typedef struct md_event md_event;     /* opaque */

/* ---- registry ---- */
int md_backend_count(void);
const md_backend *md_backend_at(int i);           /* registration order: metal, cuda, cpu */
const md_backend *md_backend_find(const char *name); /* "cpu", "cuda", "metal", "ref" */
const char *md_backend_name(const md_backend *b);
md_backend_kind md_backend_kind_of(const md_backend *b);
/* Probes once and caches; never aborts. */
const struct md_probe *md_backend_probe(const md_backend *b);
/* Static info of device `index` without opening it for work (for --list-devices). */
md_status md_backend_device_info(const md_backend *b, int index, struct md_device_info *out);

/* ---- selection ----
 * spec: "auto", "cpu", "cuda", "cuda:N", "metal", "mps". With "auto" the
 * order is metal, cuda, cpu; `why` receives a one-line explanation of the
 * choice (what each probe said). A missing requested device is MD_ERR_DEVICE
 * naming the reason and what is available. */
md_status md_device_select(const char *spec, const md_backend **backend, int *index,
                           char *why, size_t why_len);

/* ---- devices ---- */
md_status md_device_open(const md_backend *b, int index, const struct md_device_opts *opts,
                         md_device **out);
void md_device_close(md_device *dev); /* NULL ok */
const struct md_device_info *md_device_get_info(const md_device *dev);
const md_backend *md_device_backend(const md_device *dev);
md_backend_kind md_device_kind(const md_device *dev);

/* Memory. md_dev_alloc fails with MD_ERR_OOM (requested / in use / limit). */
md_status md_dev_alloc(md_device *dev, size_t bytes, void **ptr, const char *what);
void md_dev_free(md_device *dev, void *ptr); /* NULL ok */
/* Copies are asynchronous on GPU backends: the host source of an upload must
 * stay unchanged until the next md_dev_sync (or download, which syncs). */
md_status md_dev_upload(md_device *dev, void *dst, const void *src, size_t bytes);
md_status md_dev_download(md_device *dev, void *dst, const void *src, size_t bytes);
md_status md_dev_copy(md_device *dev, void *dst, const void *src, size_t bytes);
md_status md_dev_memset0(md_device *dev, void *dst, size_t bytes);
md_status md_dev_sync(md_device *dev);
/* The device's measured fp32 FMA peak in GFLOP/s (what bounds any kernel's
 * rate), 0 where the backend cannot measure it; *isa names the instruction
 * set measured (NULL ok). */
double md_dev_fma_peak_gflops(md_device *dev, const char **isa);
/* Pipelined steps (the trainer keeps one step in flight):
 * - md_dev_download_async queues a download behind the work queued so far
 *   and returns at once; dst (host memory from md_dev_host_alloc) holds the
 *   data after md_event_wait on an event recorded later, or md_dev_sync.
 * - md_dev_upload_side queues an upload on a separate copy queue (CUDA: its
 *   own stream), so it overlaps the kernels already queued; md_dev_side_join
 *   makes the work queued after it wait for every side upload queued before.
 *   The source must stay unchanged until that work is done.
 * Backends without queues run them at once (download, upload, nothing). */
md_status md_dev_download_async(md_device *dev, void *dst, const void *src, size_t bytes);
md_status md_dev_upload_side(md_device *dev, void *dst, const void *src, size_t bytes);
md_status md_dev_side_join(md_device *dev);
void md_dev_mem_stats(md_device *dev, struct md_mem_stats *out);
void md_dev_reset_peak(md_device *dev);
/* Raises the recorded peak to at least `peak` bytes: a measurement that reset
 * the peak to time its own restores the run's overall figure afterwards. */
void md_dev_raise_peak(md_device *dev, long long peak);
/* Host buffers for uploads: page-locked where the device benefits, plain
 * md_malloc otherwise. *pinned tells which. */
md_status md_dev_host_alloc(md_device *dev, size_t bytes, void **ptr, int *pinned);
void md_dev_host_free(md_device *dev, void *ptr, int pinned);

/* Timing with device events where the backend has them (host clock otherwise,
 * after a sync). */
md_status md_event_create(md_device *dev, md_event **ev);
md_status md_event_record(md_device *dev, md_event *ev);
/* Milliseconds between two recorded events (synchronises on `end`). */
md_status md_event_elapsed_ms(md_device *dev, md_event *start, md_event *end, float *ms);
void md_event_destroy(md_device *dev, md_event *ev);
/* Blocks the host until the work queued before `ev` was recorded is done. */
md_status md_event_wait(md_device *dev, md_event *ev);

/* Whole-step capture (CUDA graphs); md_dev_can_capture says if supported. */
int md_dev_can_capture(md_device *dev);
md_status md_dev_capture_begin(md_device *dev);
md_status md_dev_capture_end(md_device *dev, void **graph);
md_status md_dev_graph_launch(md_device *dev, void *graph);
void md_dev_graph_destroy(md_device *dev, void *graph);

/* Collectives between the ranks of a data-parallel job (core/dist.h starts
 * the ranks). A backend that has its own (CUDA: NCCL) joins a communicator
 * made from a 128-byte id that rank 0 creates (md_dev_comm_unique_id) and
 * the launcher broadcasts; its all-reduce then runs on the device's queue,
 * in order with the kernels. Backends without one return
 * MD_ERR_UNSUPPORTED from each, and the caller reduces host copies instead.
 * md_dev_comm_check: a failure a collective reported since (NCCL's
 * asynchronous errors), MD_OK when none. md_dev_comm_abort: drops the
 * communicator without waiting for the other ranks. */
#define MD_COMM_ID_BYTES 128
int md_dev_has_comm(const md_device *dev);
md_status md_dev_comm_unique_id(md_device *dev, unsigned char id[MD_COMM_ID_BYTES]);
md_status md_dev_comm_init(md_device *dev, const unsigned char id[MD_COMM_ID_BYTES], int nranks, int rank);
/* Sums n floats of device memory over the ranks, in place (queued). */
md_status md_dev_allreduce_sum(md_device *dev, float *buf, size_t n);
/* The same, overlapping what is queued after it (CUDA: NCCL on a side
 * stream that waits for the kernels queued so far): buf must not be
 * touched until md_dev_allreduce_join, which makes later work wait for
 * every all-reduce started. Without a side queue: in order, join a no-op. */
md_status md_dev_allreduce_start(md_device *dev, float *buf, size_t n);
md_status md_dev_allreduce_join(md_device *dev);
/* Milliseconds the started collectives took (each from its start on the
 * side queue to its end), summed since the last call; after a sync.
 * MD_ERR_UNSUPPORTED where they were not timed (captured in a graph). */
md_status md_dev_comm_busy_ms(md_device *dev, float *ms);
md_status md_dev_comm_check(md_device *dev);
void md_dev_comm_abort(md_device *dev);
/* 1 when the device's batch norm kernels honour md_batchnorm_args.sync
 * (synchronised batch norm over the ranks, --sync-bn): CPU, ref, CUDA. */
int md_dev_batchnorm_sync(const md_device *dev);
/* 1 when they take a fused residual summand (md_batchnorm_args.res): ref,
 * CPU, CUDA; elsewhere (Metal) the model runs batch norm, the sum and the
 * ReLU apart. md_dev_set_batchnorm_residual(dev, 0) makes a device say 0
 * (tests of that path; a model bound to it decides per call). */
int md_dev_batchnorm_residual(const md_device *dev);
void md_dev_set_batchnorm_residual(md_device *dev, int on);
/* 1 when they run a 2x2 stride-2 max pool after the ReLU in the same passes
 * (md_batchnorm_args.pool) for this layout and compute type: the CPU, fp32
 * in either layout. md_dev_set_batchnorm_pool(dev, 0) makes a device say 0
 * (before a model binds: the model fuses the pool at bind). */
int md_dev_batchnorm_pool(const md_device *dev, md_layout layout, md_dtype dtype);
void md_dev_set_batchnorm_pool(md_device *dev, int on);
/* 1 when their backward writes the filter gradient of the convolution that
 * computed x instead of dx (md_batchnorm_args.conv): the CPU, channels-last
 * fp32, where md_dev_batchnorm_pool says 1. md_dev_set_batchnorm_pool_conv(dev,
 * 0) makes a device say 0 (before a model binds, which decides it). */
int md_dev_batchnorm_pool_conv(const md_device *dev, md_layout layout, md_dtype dtype);
void md_dev_set_batchnorm_pool_conv(md_device *dev, int on);

/* Which kernels are supported (non-NULL) and how often the fallback ran. */
int md_dev_supports(const md_device *dev, int kernel_index);
long long md_dev_fallback_count(const md_device *dev, int kernel_index);

#ifdef __cplusplus
}
#endif
#endif
