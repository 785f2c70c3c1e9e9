/* metal_backend.m - the Metal backend (macOS): device, command queue,
 * shared-storage buffers, the kernel library compiled from the embedded MSL
 * source at open, command buffers and GPU timestamps.
 *
 * Memory is unified: a device pointer is the contents pointer of an
 * MTLBuffer in shared storage, so the loader writes batches straight into
 * device buffers and the CPU fallback runs on the same memory. A sorted
 * (base, length) table maps any pointer inside a buffer back to the buffer and
 * offset for binding.
 *
 * Execution (what "compile" means here):
 *   - default (compile on): kernel calls are encoded into one open command
 *     buffer without waiting (kernels are asynchronous, kernels.h); it is
 *     committed by md_dev_sync (which waits), by host copies, events and
 *     every 512 dispatches (committed, not waited on), so a training step
 *     between two syncs is one command buffer;
 *   - eager (the device option `eager`, set for --no-compile; or MPSDIAG_METAL_EAGER=1):
 *     one command buffer per kernel call, committed and waited on, so errors
 *     name the kernel;
 *   - captured (md_dev_capture_begin/end, as for CUDA graphs): calls are
 *     recorded, and md_dev_graph_launch encodes the whole step into one
 *     command buffer and commits it without waiting (at most two steps are
 *     in flight); md_dev_sync waits.
 * Kernel semantics, packing and grid sizes are in metal_plan.c (plain C,
 * tested on Linux against the reference kernels through metal/sim).
 */
#import <Foundation/Foundation.h>
#import <IOKit/IOKitLib.h>
#import <Metal/Metal.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_impl.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/platform.h"
#include "core/timer.h"
#include "md_metal_args.h"
#include "md_metal_source.h" /* generated: static const char md_metal_source[] */
#include "metal_backend.h"
#include "metal_grid.h"
#include "metal_plan.h"

/* ---------------------------------------------------------------------------
 * State
 * ------------------------------------------------------------------------- */

/* One recorded operation of a captured step. */
enum { REC_DISPATCH = 0, REC_COPY, REC_FILL0 };
struct rec {
    int kind;
    struct md_metal_plan plan;   /* REC_DISPATCH */
    void *dst;                   /* REC_COPY, REC_FILL0 */
    const void *src;             /* REC_COPY */
    size_t bytes;
};

/* A captured step (md_dev_capture_end). Owned by the caller until
 * md_dev_graph_destroy. */
struct md_metal_graph {
    struct rec *recs;
    size_t n;
};

@interface MDMetalState : NSObject {
@public
    /* live buffers, sorted by base address; bufs[i] holds the MTLBuffer */
    uintptr_t *bases;
    size_t *lens;
    size_t nbufs, capbufs;
    /* the step being captured */
    struct rec *recs;
    size_t nrecs, caprecs;
    int capturing;
    int use_sg; /* gemm/conv through the "_sg" simdgroup-matrix kernels */
    int eager;  /* one waited command buffer per kernel call */
    int open_dispatches;
    double compile_s;
}
@property (nonatomic, strong) id<MTLDevice> device;
@property (nonatomic, strong) id<MTLCommandQueue> queue;
@property (nonatomic, strong) NSMutableDictionary<NSString *, id<MTLComputePipelineState>> *pipelines;
@property (nonatomic, strong) NSMutableArray<id<MTLBuffer>> *bufs;
@property (nonatomic, strong) id<MTLBuffer> scratch; /* reduction partials */
@property (nonatomic, strong) id<MTLBuffer> dummy;   /* bound where an optional buffer is absent */
@property (nonatomic, strong) id<MTLCommandBuffer> open_cb;           /* being encoded, not committed */
@property (nonatomic, strong) id<MTLComputeCommandEncoder> open_enc;
@property (nonatomic, strong) NSMutableArray<id<MTLCommandBuffer>> *pending; /* committed, not waited on */
@end

@implementation MDMetalState
- (void)dealloc
{
    md_free(bases);
    md_free(lens);
    md_free(recs);
}
@end

/* An event: an empty dispatch in its own command buffer, so that its GPU end
 * time marks the moment the queue reached it. */
@interface MDMetalEvent : NSObject
@property (nonatomic, strong) id<MTLCommandBuffer> cb;
@end
@implementation MDMetalEvent
@end

static MDMetalState *state_of(md_device *dev) { return (__bridge MDMetalState *)dev->impl; }

static const struct md_backend_ops *metal_ops_ptr(void);
static md_status metal_sync(md_device *dev);

/* ---------------------------------------------------------------------------
 * Device facts
 * ------------------------------------------------------------------------- */

/* GPU cores from the IORegistry (AGXAccelerator "gpu-core-count"); 0 if unknown. */
static int gpu_core_count(void)
{
    int cores = 0;
    io_service_t svc = IOServiceGetMatchingService(MACH_PORT_NULL, IOServiceMatching("AGXAccelerator"));
    if (!svc) return 0;
    CFTypeRef v = IORegistryEntryCreateCFProperty(svc, CFSTR("gpu-core-count"), kCFAllocatorDefault, 0);
    if (v) {
        if (CFGetTypeID(v) == CFNumberGetTypeID()) CFNumberGetValue((CFNumberRef)v, kCFNumberSInt32Type, &cores);
        CFRelease(v);
    }
    IOObjectRelease(svc);
    return cores;
}

/* Highest Apple GPU family the device supports ("apple9"), or "mac2". */
static void gpu_family(id<MTLDevice> d, char *arch, size_t archn, char *family, size_t famn)
{
    for (int f = 1012; f >= 1001; f--)
        if ([d supportsFamily:(MTLGPUFamily)f]) {
            snprintf(arch, archn, "apple%d", f - 1000);
            snprintf(family, famn, "Apple%d%s", f - 1000, [d supportsFamily:MTLGPUFamilyMetal3] ? ", Metal 3" : "");
            return;
        }
    snprintf(arch, archn, "%s", [d supportsFamily:MTLGPUFamilyMac2] ? "mac2" : "unknown");
    snprintf(family, famn, "%s", [d supportsFamily:MTLGPUFamilyMac2] ? "Mac2" : "unknown");
}

static void metal_probe(struct md_probe *out)
{
    out->built = 1;
    @autoreleasepool {
        id<MTLDevice> d = MTLCreateSystemDefaultDevice();
        out->available = d != nil;
        out->device_count = d != nil ? 1 : 0;
        if (!d) snprintf(out->reason, sizeof out->reason, "no Metal device (MTLCreateSystemDefaultDevice returned nil)");
    }
}

static md_status metal_device_info(int index, struct md_device_info *out)
{
    if (index != 0) return md_errf(MD_ERR_DEVICE, "metal: only device 0 exists (got %d)", index);
    @autoreleasepool {
        id<MTLDevice> d = MTLCreateSystemDefaultDevice();
        if (!d) return md_errf(MD_ERR_DEVICE, "metal: no Metal device (MTLCreateSystemDefaultDevice returned nil)");
        snprintf(out->name, sizeof out->name, "%s", d.name.UTF8String ? d.name.UTF8String : "Apple GPU");
        out->compute_units = gpu_core_count();
        out->total_memory = (long long)[NSProcessInfo processInfo].physicalMemory;
        out->free_memory = md_mem_available_bytes();
        out->recommended_working_set = (long long)d.recommendedMaxWorkingSetSize;
        gpu_family(d, out->arch, sizeof out->arch, out->family, sizeof out->family);
        NSOperatingSystemVersion v = [NSProcessInfo processInfo].operatingSystemVersion;
        snprintf(out->driver_version, sizeof out->driver_version, "macOS %ld.%ld.%ld", (long)v.majorVersion,
                 (long)v.minorVersion, (long)v.patchVersion);
        snprintf(out->runtime_version, sizeof out->runtime_version, "Metal (MSL from source)");
        snprintf(out->blas, sizeof out->blas, "mpsdiag MSL tiled GEMM");
        snprintf(out->dnn, sizeof out->dnn, "mpsdiag MSL implicit-GEMM conv");
        out->unified_memory = d.hasUnifiedMemory ? 1 : 0;
        /* half storage with fp32 arithmetic; bf16 by bit conversion, so every GPU family */
        out->supports_fp16 = 1;
        out->supports_bf16 = 1;
        out->supports_tf32 = 0;
        out->has_events = 1;
        out->benefits_from_pinned = 0;
    }
    return MD_OK;
}

/* ---------------------------------------------------------------------------
 * Pointer -> buffer
 * ------------------------------------------------------------------------- */

/* Index of the buffer holding p, or -1. */
static long find_buf(MDMetalState *s, const void *p)
{
    uintptr_t a = (uintptr_t)p;
    size_t lo = 0, hi = s->nbufs;
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (s->bases[mid] <= a) lo = mid + 1;
        else hi = mid;
    }
    if (lo == 0) return -1;
    lo--;
    return a < s->bases[lo] + s->lens[lo] ? (long)lo : -1;
}

static md_status buf_of(MDMetalState *s, const void *p, id<MTLBuffer> __strong *buf, NSUInteger *off)
{
    long i = find_buf(s, p);
    if (i < 0) return md_errf(MD_ERR_INTERNAL, "metal: pointer %p is not inside a buffer of this device", p);
    *buf = [s.bufs objectAtIndex:(NSUInteger)i];
    *off = (NSUInteger)((uintptr_t)p - s->bases[i]);
    return MD_OK;
}

/* ---------------------------------------------------------------------------
 * Lifecycle
 * ------------------------------------------------------------------------- */

static md_status compile_library(MDMetalState *s)
{
    double t0 = md_now();
    /* Simdgroup matrices exist from Apple7 (M1) on; MPSDIAG_METAL_SIMDGROUP=0
     * falls back to the scalar tiles (for comparison or a driver problem). */
    const char *env = getenv("MPSDIAG_METAL_SIMDGROUP");
    s->use_sg = [s.device supportsFamily:MTLGPUFamilyApple7] && !(env && strcmp(env, "0") == 0);
    const char *head = s->use_sg ? "#define MD_METAL_SIMDGROUP_MM 1\n" : "#define MD_METAL_SIMDGROUP_MM 0\n";
    size_t hl = strlen(head), sl = strlen(md_metal_source);
    char *text = md_malloc(hl + sl + 1);
    if (!text) return md_errf(MD_ERR_OOM, "metal: out of host memory for the kernel source");
    memcpy(text, head, hl);
    memcpy(text + hl, md_metal_source, sl + 1);
    NSString *src = [[NSString alloc] initWithBytes:text length:hl + sl encoding:NSUTF8StringEncoding];
    md_free(text);
    MTLCompileOptions *opts = [MTLCompileOptions new];
    /* NaN/Inf detection is a feature: no fast math (mathMode replaces this on macOS 15) */
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wdeprecated-declarations"
    opts.fastMathEnabled = NO;
#pragma clang diagnostic pop
    NSError *err = nil;
    id<MTLLibrary> lib = [s.device newLibraryWithSource:src options:opts error:&err];
    if (!lib)
        return md_errf(MD_ERR_DEVICE, "metal: compiling the kernels failed: %s",
                       err ? err.localizedDescription.UTF8String : "no error given");
    s.pipelines = [NSMutableDictionary dictionary];
    for (NSString *name in lib.functionNames) {
        id<MTLFunction> fn = [lib newFunctionWithName:name];
        id<MTLComputePipelineState> pso = fn ? [s.device newComputePipelineStateWithFunction:fn error:&err] : nil;
        if (!pso)
            return md_errf(MD_ERR_DEVICE, "metal: pipeline for kernel %s failed: %s", name.UTF8String,
                           err ? err.localizedDescription.UTF8String : "no function");
        [s.pipelines setObject:pso forKey:name];
    }
    s->compile_s = md_now() - t0;
    return MD_OK;
}

static md_status metal_open(md_device *dev)
{
    md_status st = MD_OK;
    @autoreleasepool {
        MDMetalState *s = [MDMetalState new];
        s.device = MTLCreateSystemDefaultDevice();
        if (!s.device) return md_errf(MD_ERR_DEVICE, "metal: no Metal device");
        s.queue = [s.device newCommandQueue];
        if (!s.queue) return md_errf(MD_ERR_DEVICE, "metal: could not create a command queue");
        s.bufs = [NSMutableArray array];
        s.pending = [NSMutableArray array];
        const char *eager = getenv("MPSDIAG_METAL_EAGER");
        s->eager = dev->opts.eager || (eager && strcmp(eager, "1") == 0);
        s.scratch = [s.device newBufferWithLength:MD_METAL_SCRATCH_FLOATS * sizeof(float)
                                          options:MTLResourceStorageModeShared];
        s.dummy = [s.device newBufferWithLength:16 options:MTLResourceStorageModeShared];
        if (!s.scratch || !s.dummy) return md_errf(MD_ERR_OOM, "metal: could not allocate 1 KiB of scratch");
        st = compile_library(s);
        if (st != MD_OK) return st;
        /* The high watermark: a share of the recommended working set (PyTorch's
         * rule), so runaway growth is an out-of-memory error, not swapping. */
        double ratio = dev->opts.memory_fraction > 0 ? dev->opts.memory_fraction : MD_METAL_DEFAULT_WATERMARK;
        if (s.device.recommendedMaxWorkingSetSize > 0)
            dev->mem.limit = (long long)(ratio * (double)s.device.recommendedMaxWorkingSetSize);
        snprintf(dev->info.dnn, sizeof dev->info.dnn, "mpsdiag MSL kernels (compiled in %.0f ms)", s->compile_s * 1e3);
        snprintf(dev->info.blas, sizeof dev->info.blas, "mpsdiag MSL GEMM (%s)",
                 s->use_sg ? "simdgroup_matrix 8x8" : "scalar threadgroup tiles");
        md_verbose("  metal: %lu kernels compiled in %.0f ms; allocations capped at %.2f x the recommended "
                   "working set\n", (unsigned long)s.pipelines.count, s->compile_s * 1e3, ratio);
        dev->impl = (__bridge_retained void *)s;
    }
    return st;
}

static void metal_close(md_device *dev)
{
    if (!dev->impl) return;
    @autoreleasepool {
        (void)metal_sync(dev);
        MDMetalState *s = (__bridge_transfer MDMetalState *)dev->impl;
        dev->impl = NULL;
        (void)s;
    }
}

double md_metal_compile_seconds(const md_device *dev)
{
    if (!dev || dev->ops != metal_ops_ptr() || !dev->impl) return 0.0;
    return ((__bridge MDMetalState *)dev->impl)->compile_s;
}

/* ---------------------------------------------------------------------------
 * Command buffers
 * ------------------------------------------------------------------------- */

/* Status of a completed command buffer as an md_status naming `what`. */
static md_status cb_status(id<MTLCommandBuffer> cb, const char *what)
{
    if (cb.status != MTLCommandBufferStatusError) return MD_OK;
    NSError *e = cb.error;
    const char *msg = e ? e.localizedDescription.UTF8String : "unknown error";
    if (e && e.code == (NSInteger)MTLCommandBufferErrorOutOfMemory)
        return md_errf(MD_ERR_OOM, "metal: out of GPU memory while running %s: %s", what, msg);
    return md_errf(MD_ERR_DEVICE, "metal: %s failed on the GPU: %s", what, msg);
}

/* Commits the open command buffer without waiting. */
static void flush_open(MDMetalState *s)
{
    if (!s.open_cb) return;
    [s.open_enc endEncoding];
    [s.open_cb commit];
    [s.pending addObject:s.open_cb];
    s.open_enc = nil;
    s.open_cb = nil;
    s->open_dispatches = 0;
}

/* Waits for the oldest committed command buffer. */
static md_status wait_oldest(MDMetalState *s)
{
    id<MTLCommandBuffer> cb = [s.pending objectAtIndex:0];
    [s.pending removeObjectAtIndex:0];
    [cb waitUntilCompleted];
    return cb_status(cb, "queued GPU work");
}

static md_status metal_sync(md_device *dev)
{
    MDMetalState *s = state_of(dev);
    md_status st = MD_OK;
    @autoreleasepool {
        flush_open(s);
        while (s.pending.count) {
            md_status w = wait_oldest(s);
            if (st == MD_OK) st = w;
        }
    }
    return st;
}

static md_status encode_plan(MDMetalState *s, id<MTLComputeCommandEncoder> enc, const struct md_metal_plan *p)
{
    for (int di = 0; di < p->n; di++) {
        const struct md_metal_dispatch *d = &p->d[di];
        char name[sizeof d->name + 4];
        snprintf(name, sizeof name, "%s%s", d->name,
                 s->use_sg && (!strncmp(d->name, "md_gemm_", 8) || !strncmp(d->name, "md_conv_", 8)) ? "_sg" : "");
        id<MTLComputePipelineState> pso = [s.pipelines objectForKey:[NSString stringWithUTF8String:name]];
        if (!pso) return md_errf(MD_ERR_UNSUPPORTED, "metal: kernel %s is not in the compiled library", name);
        NSUInteger threads = (NSUInteger)d->tg[0] * d->tg[1] * d->tg[2];
        if (threads > pso.maxTotalThreadsPerThreadgroup)
            return md_errf(MD_ERR_UNSUPPORTED, "metal: kernel %s needs %lu threads per threadgroup, the GPU allows %lu",
                           name, (unsigned long)threads, (unsigned long)pso.maxTotalThreadsPerThreadgroup);
        [enc setComputePipelineState:pso];
        [enc setBytes:d->params length:d->params_size atIndex:0];
        for (int i = 0; i < d->nbufs; i++) {
            id<MTLBuffer> b = s.dummy;
            NSUInteger off = 0;
            if ((d->scratch_mask >> i) & 1u) b = s.scratch;
            else if (d->bufs[i]) MD_TRY(buf_of(s, d->bufs[i], &b, &off));
            [enc setBuffer:b offset:off atIndex:(NSUInteger)i + 1];
        }
        /* every kernel declares threadgroup(0); lengths are multiples of 16 */
        NSUInteger tgm = d->tg_mem ? ((NSUInteger)d->tg_mem + 15) / 16 * 16 : 16;
        [enc setThreadgroupMemoryLength:tgm atIndex:0];
        [enc dispatchThreadgroups:MTLSizeMake(d->grid[0], d->grid[1], d->grid[2])
            threadsPerThreadgroup:MTLSizeMake(d->tg[0], d->tg[1], d->tg[2])];
    }
    return MD_OK;
}

static md_status record(MDMetalState *s, const struct rec *r)
{
    if (s->nrecs == s->caprecs) {
        size_t cap = s->caprecs ? s->caprecs * 2 : 64;
        struct rec *n = md_realloc(s->recs, cap * sizeof *n);
        if (!n) return md_errf(MD_ERR_OOM, "metal: out of host memory recording a step");
        s->recs = n;
        s->caprecs = cap;
    }
    s->recs[s->nrecs++] = *r;
    return MD_OK;
}

/* Runs a planned kernel call: recorded while capturing; eager: its own
 * command buffer, committed and waited on; else encoded into the open
 * command buffer. */
static md_status run_plan(md_device *dev, md_status planned, const struct md_metal_plan *p)
{
    if (planned != MD_OK) return planned;
    MDMetalState *s = state_of(dev);
    if (s->capturing) {
        struct rec r = {.kind = REC_DISPATCH, .plan = *p};
        return record(s, &r);
    }
    md_status st;
    if (!s->eager) {
        @autoreleasepool {
            if (!s.open_cb) {
                s.open_cb = [s.queue commandBuffer];
                s.open_enc = s.open_cb ? [s.open_cb computeCommandEncoder] : nil;
                if (!s.open_enc) {
                    s.open_cb = nil;
                    return md_errf(MD_ERR_DEVICE, "metal: could not create a command buffer");
                }
            }
            st = encode_plan(s, s.open_enc, p);
            /* long chains start running before the next sync */
            if (st == MD_OK && ++s->open_dispatches >= 512) flush_open(s);
        }
        return st;
    }
    MD_TRY(metal_sync(dev));
    @autoreleasepool {
        id<MTLCommandBuffer> cb = [s.queue commandBuffer];
        id<MTLComputeCommandEncoder> enc = [cb computeCommandEncoder];
        if (!cb || !enc) return md_errf(MD_ERR_DEVICE, "metal: could not create a command buffer");
        st = encode_plan(s, enc, p);
        [enc endEncoding];
        if (st != MD_OK) return st; /* never committed */
        [cb commit];
        [cb waitUntilCompleted];
        st = cb_status(cb, p->d[0].name);
    }
    return st;
}

/* ---------------------------------------------------------------------------
 * Memory
 * ------------------------------------------------------------------------- */

static md_status metal_alloc(md_device *dev, size_t bytes, void **ptr)
{
    MDMetalState *s = state_of(dev);
    *ptr = NULL;
    if (s->nbufs == s->capbufs) {
        size_t cap = s->capbufs ? s->capbufs * 2 : 64;
        uintptr_t *nb = md_realloc(s->bases, cap * sizeof *nb);
        if (!nb) return MD_ERR_OOM;
        s->bases = nb;
        size_t *nl = md_realloc(s->lens, cap * sizeof *nl);
        if (!nl) return MD_ERR_OOM;
        s->lens = nl;
        s->capbufs = cap;
    }
    @autoreleasepool {
        id<MTLBuffer> b = [s.device newBufferWithLength:bytes options:MTLResourceStorageModeShared];
        if (!b) return MD_ERR_OOM; /* md_dev_alloc words the message */
        uintptr_t base = (uintptr_t)[b contents];
        size_t at = 0;
        while (at < s->nbufs && s->bases[at] < base) at++;
        memmove(s->bases + at + 1, s->bases + at, (s->nbufs - at) * sizeof *s->bases);
        memmove(s->lens + at + 1, s->lens + at, (s->nbufs - at) * sizeof *s->lens);
        s->bases[at] = base;
        s->lens[at] = bytes;
        s->nbufs++;
        [s.bufs insertObject:b atIndex:at];
        *ptr = (void *)base;
    }
    return MD_OK;
}

static void metal_free(md_device *dev, void *ptr, size_t bytes)
{
    (void)bytes;
    MDMetalState *s = state_of(dev);
    long i = find_buf(s, ptr);
    MD_ASSERT(i >= 0 && s->bases[i] == (uintptr_t)ptr);
    /* A committed command buffer keeps its buffers alive until it completes. */
    @autoreleasepool {
        [s.bufs removeObjectAtIndex:(NSUInteger)i];
    }
    memmove(s->bases + i, s->bases + i + 1, (s->nbufs - (size_t)i - 1) * sizeof *s->bases);
    memmove(s->lens + i, s->lens + i + 1, (s->nbufs - (size_t)i - 1) * sizeof *s->lens);
    s->nbufs--;
}

/* Host copies on unified memory, after the GPU is done with the buffers. */
static md_status metal_upload(md_device *dev, void *dst, const void *src, size_t bytes)
{
    if (state_of(dev)->capturing)
        return md_errf(MD_ERR_UNSUPPORTED, "metal: host uploads cannot be captured (write batches before the step)");
    MD_TRY(metal_sync(dev));
    memcpy(dst, src, bytes);
    return MD_OK;
}

static md_status metal_download(md_device *dev, void *dst, const void *src, size_t bytes)
{
    if (state_of(dev)->capturing)
        return md_errf(MD_ERR_UNSUPPORTED, "metal: host downloads cannot be captured (read results after the step)");
    MD_TRY(metal_sync(dev));
    memcpy(dst, src, bytes);
    return MD_OK;
}

static md_status metal_copy(md_device *dev, void *dst, const void *src, size_t bytes)
{
    MDMetalState *s = state_of(dev);
    if (s->capturing) {
        struct rec r = {.kind = REC_COPY, .dst = dst, .src = src, .bytes = bytes};
        return record(s, &r);
    }
    MD_TRY(metal_sync(dev));
    memmove(dst, src, bytes);
    return MD_OK;
}

static md_status metal_memset0(md_device *dev, void *dst, size_t bytes)
{
    MDMetalState *s = state_of(dev);
    if (s->capturing) {
        struct rec r = {.kind = REC_FILL0, .dst = dst, .bytes = bytes};
        return record(s, &r);
    }
    MD_TRY(metal_sync(dev));
    memset(dst, 0, bytes);
    return MD_OK;
}

static void metal_driver_mem(md_device *dev, long long *total, long long *free_bytes, long long *reserved)
{
    MDMetalState *s = state_of(dev);
    *total = (long long)s.device.recommendedMaxWorkingSetSize;
    long long used = (long long)s.device.currentAllocatedSize;
    *free_bytes = *total > used ? *total - used : 0;
    *reserved = used;
}

/* ---------------------------------------------------------------------------
 * Events: GPU timestamps
 * ------------------------------------------------------------------------- */

static md_status metal_event_create(md_device *dev, void **ev)
{
    (void)dev;
    *ev = (__bridge_retained void *)[MDMetalEvent new];
    return MD_OK;
}

static md_status metal_event_record(md_device *dev, void *ev)
{
    MDMetalState *s = state_of(dev);
    if (s->capturing) return md_errf(MD_ERR_UNSUPPORTED, "metal: events cannot be recorded inside a captured step");
    struct md_metal_plan p;
    md_metal_plan_noop(&p);
    md_status st;
    @autoreleasepool {
        flush_open(s); /* the event marks the work queued before it */
        id<MTLCommandBuffer> cb = [s.queue commandBuffer];
        id<MTLComputeCommandEncoder> enc = [cb computeCommandEncoder];
        if (!cb || !enc) return md_errf(MD_ERR_DEVICE, "metal: could not create a command buffer");
        st = encode_plan(s, enc, &p);
        [enc endEncoding];
        if (st != MD_OK) return st;
        [cb commit];
        ((__bridge MDMetalEvent *)ev).cb = cb;
    }
    return MD_OK;
}

static md_status metal_event_elapsed_ms(md_device *dev, void *start, void *end, float *ms)
{
    (void)dev;
    MDMetalEvent *a = (__bridge MDMetalEvent *)start, *b = (__bridge MDMetalEvent *)end;
    if (!a.cb || !b.cb) return md_errf(MD_ERR_INTERNAL, "metal: elapsed time of an event never recorded");
    [a.cb waitUntilCompleted];
    [b.cb waitUntilCompleted];
    *ms = (float)((b.cb.GPUEndTime - a.cb.GPUEndTime) * 1e3);
    return MD_OK;
}

static void metal_event_destroy(md_device *dev, void *ev)
{
    (void)dev;
    MDMetalEvent *e = (__bridge_transfer MDMetalEvent *)ev;
    e.cb = nil;
}

/* ---------------------------------------------------------------------------
 * Capture: a training step as one command buffer
 * ------------------------------------------------------------------------- */

static md_status metal_capture_begin(md_device *dev)
{
    MDMetalState *s = state_of(dev);
    if (s->capturing) return md_errf(MD_ERR_INTERNAL, "metal: capture already in progress");
    s->nrecs = 0;
    s->capturing = 1;
    return MD_OK;
}

static md_status metal_capture_end(md_device *dev, void **graph)
{
    MDMetalState *s = state_of(dev);
    *graph = NULL;
    if (!s->capturing) return md_errf(MD_ERR_INTERNAL, "metal: capture_end without capture_begin");
    s->capturing = 0;
    struct md_metal_graph *g = md_calloc(1, sizeof *g);
    if (!g) return md_errf(MD_ERR_OOM, "metal: out of host memory for a captured step");
    if (s->nrecs) {
        g->recs = md_malloc(s->nrecs * sizeof *g->recs);
        if (!g->recs) {
            md_free(g);
            return md_errf(MD_ERR_OOM, "metal: out of host memory for a captured step");
        }
        memcpy(g->recs, s->recs, s->nrecs * sizeof *g->recs);
    }
    g->n = s->nrecs;
    s->nrecs = 0;
    *graph = g;
    return MD_OK;
}

static md_status metal_graph_launch(md_device *dev, void *graph)
{
    MDMetalState *s = state_of(dev);
    const struct md_metal_graph *g = graph;
    md_status st = MD_OK;
    @autoreleasepool {
        flush_open(s);
        id<MTLCommandBuffer> cb = [s.queue commandBuffer];
        if (!cb) return md_errf(MD_ERR_DEVICE, "metal: could not create a command buffer");
        id<MTLComputeCommandEncoder> enc = nil;
        for (size_t i = 0; i < g->n && st == MD_OK; i++) {
            const struct rec *r = &g->recs[i];
            if (r->kind == REC_DISPATCH) {
                if (!enc) enc = [cb computeCommandEncoder];
                st = encode_plan(s, enc, &r->plan);
                continue;
            }
            if (enc) {
                [enc endEncoding];
                enc = nil;
            }
            id<MTLBlitCommandEncoder> blit = [cb blitCommandEncoder];
            id<MTLBuffer> db = nil, sb = nil;
            NSUInteger doff = 0, soff = 0;
            st = buf_of(s, r->dst, &db, &doff);
            if (st == MD_OK && r->kind == REC_COPY) st = buf_of(s, r->src, &sb, &soff);
            if (st == MD_OK && r->kind == REC_COPY)
                [blit copyFromBuffer:sb sourceOffset:soff toBuffer:db destinationOffset:doff size:r->bytes];
            else if (st == MD_OK)
                [blit fillBuffer:db range:NSMakeRange(doff, r->bytes) value:0];
            [blit endEncoding];
        }
        if (enc) [enc endEncoding];
        if (st != MD_OK) return st; /* never committed */
        [cb commit];
        [s.pending addObject:cb];
        /* At most two steps in flight: step N+1 is encoded while the GPU runs
         * step N; the queue runs command buffers in commit order. */
        while (st == MD_OK && s.pending.count > 2) st = wait_oldest(s);
    }
    return st;
}

static void metal_graph_destroy(md_device *dev, void *graph)
{
    (void)dev;
    struct md_metal_graph *g = graph;
    if (!g) return;
    md_free(g->recs);
    md_free(g);
}

/* ---------------------------------------------------------------------------
 * Kernels: plan (metal_plan.c), then run
 * ------------------------------------------------------------------------- */

#define MD_METAL_KERNEL(op, argtype)                                             \
    static md_status metal_##op(md_device *dev, const struct argtype *a)         \
    {                                                                            \
        struct md_metal_plan p;                                                  \
        return run_plan(dev, md_metal_plan_##op(a, &p), &p);                     \
    }

MD_METAL_KERNEL(gemm, md_gemm_args)
MD_METAL_KERNEL(conv2d_fwd, md_conv2d_args)
MD_METAL_KERNEL(conv2d_bwd_data, md_conv2d_args)
MD_METAL_KERNEL(conv2d_bwd_filter, md_conv2d_args)
MD_METAL_KERNEL(batchnorm_fwd, md_batchnorm_args)
MD_METAL_KERNEL(batchnorm_bwd, md_batchnorm_args)
MD_METAL_KERNEL(act_fwd, md_act_args)
MD_METAL_KERNEL(act_bwd, md_act_args)
MD_METAL_KERNEL(pool2d_fwd, md_pool2d_args)
MD_METAL_KERNEL(pool2d_bwd, md_pool2d_args)
MD_METAL_KERNEL(gap_fwd, md_gap_args)
MD_METAL_KERNEL(gap_bwd, md_gap_args)
MD_METAL_KERNEL(bias_add, md_bias_args)
MD_METAL_KERNEL(bias_grad, md_bias_args)
MD_METAL_KERNEL(dropout_fwd, md_dropout_args)
MD_METAL_KERNEL(dropout_bwd, md_dropout_args)
MD_METAL_KERNEL(ew, md_ew_args)
MD_METAL_KERNEL(reduce, md_reduce_args)
MD_METAL_KERNEL(chslice, md_chslice_args)
MD_METAL_KERNEL(xent, md_xent_args)
MD_METAL_KERNEL(cast, md_cast_args)
MD_METAL_KERNEL(permute, md_permute_args)
MD_METAL_KERNEL(optim, md_optim_args)
MD_METAL_KERNEL(layernorm_fwd, md_layernorm_args)
MD_METAL_KERNEL(layernorm_bwd, md_layernorm_args)
MD_METAL_KERNEL(softmax_fwd, md_softmax_args)
MD_METAL_KERNEL(softmax_bwd, md_softmax_args)
MD_METAL_KERNEL(attn_fwd, md_attn_args)
MD_METAL_KERNEL(attn_bwd, md_attn_args)
MD_METAL_KERNEL(regress, md_regress_args)

static const struct md_backend_ops metal_ops = {
    .api_version = MD_BACKEND_API_VERSION,
    .name = "metal",
    .probe = metal_probe,
    .device_info = metal_device_info,
    .open = metal_open,
    .close = metal_close,
    .alloc = metal_alloc,
    .free = metal_free,
    .upload = metal_upload,
    .download = metal_download,
    .copy = metal_copy,
    .memset0 = metal_memset0,
    .sync = metal_sync,
    .driver_mem = metal_driver_mem,
    .event_create = metal_event_create,
    .event_record = metal_event_record,
    .event_elapsed_ms = metal_event_elapsed_ms,
    .event_destroy = metal_event_destroy,
    .capture_begin = metal_capture_begin,
    .capture_end = metal_capture_end,
    .graph_launch = metal_graph_launch,
    .graph_destroy = metal_graph_destroy,
    .kernels = {
        .gemm = metal_gemm,
        .conv2d_fwd = metal_conv2d_fwd,
        .conv2d_bwd_data = metal_conv2d_bwd_data,
        .conv2d_bwd_filter = metal_conv2d_bwd_filter,
        .batchnorm_fwd = metal_batchnorm_fwd,
        .batchnorm_bwd = metal_batchnorm_bwd,
        .act_fwd = metal_act_fwd,
        .act_bwd = metal_act_bwd,
        .pool2d_fwd = metal_pool2d_fwd,
        .pool2d_bwd = metal_pool2d_bwd,
        .gap_fwd = metal_gap_fwd,
        .gap_bwd = metal_gap_bwd,
        .bias_add = metal_bias_add,
        .bias_grad = metal_bias_grad,
        .dropout_fwd = metal_dropout_fwd,
        .dropout_bwd = metal_dropout_bwd,
        .ew = metal_ew,
        .reduce = metal_reduce,
        .chslice = metal_chslice,
        .xent = metal_xent,
        .cast = metal_cast,
        .permute = metal_permute,
        .optim = metal_optim,
        .layernorm_fwd = metal_layernorm_fwd,
        .layernorm_bwd = metal_layernorm_bwd,
        .softmax_fwd = metal_softmax_fwd,
        .softmax_bwd = metal_softmax_bwd,
        .attn_fwd = metal_attn_fwd,
        .attn_bwd = metal_attn_bwd,
        .regress = metal_regress,
    },
};

static const struct md_backend_ops *metal_ops_ptr(void) { return &metal_ops; }

const struct md_backend_ops *md_metal_backend_ops(void) { return &metal_ops; }
