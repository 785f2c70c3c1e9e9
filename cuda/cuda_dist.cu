/* cuda_dist.cu - NCCL collectives for data-parallel training (cuda_dist.h).
 *
 * The plug-in knows nothing of MPI: rank 0 asks for a unique id
 * (ncclGetUniqueId), the launcher (src/core/dist.c) broadcasts its 128 bytes,
 * and every rank joins with ncclCommInitRank. The all-reduce is queued on the
 * device's stream, so it runs in order with the backward kernels before it
 * and the optimizer after it, without a host sync. Errors a collective meets
 * later (a peer that died, a broken link) surface through
 * ncclCommGetAsyncError in md_cuda_comm_check, which the trainer calls after
 * each step's sync; md_cuda_comm_abort ends the communicator without waiting
 * for the others (ncclCommAbort). libnccl.so.2 is opened at the first
 * communicator (dlopen): only its header is needed to build.
 *
 * Overlap (md_cuda_allreduce_start/_join): each bucket's all-reduce goes to
 * a side stream of high priority that first waits for an event recorded on
 * the device stream (the backward kernels that wrote the bucket), so the
 * NCCL kernels run beside the backward of earlier layers; the join records
 * an event on the side stream that the device stream waits for before the
 * optimizer reads the sums. Both streams' event edges are legal inside a
 * stream capture, so the same calls record a forked and joined graph.
 * Outside a capture each collective is timed by a pair of events on the
 * side stream (md_cuda_comm_busy_ms sums them after a sync).
 */
#include <string.h>

#include "cuda_dist.h"
#include "cuda_internal.h"

#ifdef MD_HAVE_NCCL
#include <dlfcn.h>
#include <nccl.h>

/* NCCL is loaded when a communicator is first asked for (dlopen), so the
 * plug-in loads, and one GPU trains, where NCCL is not installed. */
static struct {
    int tried, ok;
    char why[256];
    ncclResult_t (*get_unique_id)(ncclUniqueId *);
    ncclResult_t (*comm_init_rank)(ncclComm_t *, int, ncclUniqueId, int);
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t, cudaStream_t);
    ncclResult_t (*get_async_error)(ncclComm_t, ncclResult_t *);
    ncclResult_t (*comm_abort)(ncclComm_t);
    ncclResult_t (*comm_destroy)(ncclComm_t);
    const char *(*error_string)(ncclResult_t);
} N;

static md_status nccl_load(void)
{
    if (N.tried) return N.ok ? MD_OK : md_errf(MD_ERR_UNSUPPORTED, "%s", N.why);
    N.tried = 1;
    void *h = dlopen("libnccl.so.2", RTLD_NOW | RTLD_LOCAL);
    if (!h) h = dlopen("libnccl.so", RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        snprintf(N.why, sizeof N.why, "NCCL (libnccl.so.2) cannot be loaded: %s", e ? e : "not found");
        return md_errf(MD_ERR_UNSUPPORTED, "%s", N.why);
    }
#define NCCL_SYM(field, name)                                                                                \
    if (!(N.field = reinterpret_cast<decltype(N.field)>(dlsym(h, name)))) {                                 \
        snprintf(N.why, sizeof N.why, "NCCL (libnccl.so.2) lacks %s", name);                                 \
        return md_errf(MD_ERR_UNSUPPORTED, "%s", N.why);                                                     \
    }
    NCCL_SYM(get_unique_id, "ncclGetUniqueId")
    NCCL_SYM(comm_init_rank, "ncclCommInitRank")
    NCCL_SYM(all_reduce, "ncclAllReduce")
    NCCL_SYM(get_async_error, "ncclCommGetAsyncError")
    NCCL_SYM(comm_abort, "ncclCommAbort")
    NCCL_SYM(comm_destroy, "ncclCommDestroy")
    NCCL_SYM(error_string, "ncclGetErrorString")
#undef NCCL_SYM
    N.ok = 1;
    return MD_OK;
}

/* One communicator per open device (a process drives one GPU). */
#define COMM_TIMED 64 /* collectives timed between two md_cuda_comm_busy_ms */
struct comm_slot {
    md_device *dev;
    ncclComm_t comm;
    cudaStream_t side;          /* overlapped all-reduces */
    cudaEvent_t fork, join;     /* device stream -> side, side -> device stream */
    int pending;                /* started and not joined */
    cudaEvent_t timed[2 * COMM_TIMED];
    int ntimed;
};
static struct comm_slot slots[MD_MAX_DEVICES];

static struct comm_slot *slot_of(md_device *dev, int make)
{
    for (int i = 0; i < MD_MAX_DEVICES; i++)
        if (slots[i].dev == dev) return &slots[i];
    if (!make) return NULL;
    for (int i = 0; i < MD_MAX_DEVICES; i++)
        if (!slots[i].dev) {
            slots[i].dev = dev;
            return &slots[i];
        }
    return NULL;
}

static md_status nccl_err(ncclResult_t r, const char *what)
{
    return md_errf(MD_ERR_DEVICE, "NCCL %s failed: %s (%d)", what, N.error_string(r), (int)r);
}

md_status md_cuda_comm_unique_id(md_device *dev, unsigned char id[MD_COMM_ID_BYTES])
{
    (void)dev;
    static_assert(sizeof(ncclUniqueId) == MD_COMM_ID_BYTES, "NCCL's unique id is 128 bytes");
    MD_TRY(nccl_load());
    ncclUniqueId u;
    ncclResult_t r = N.get_unique_id(&u);
    if (r != ncclSuccess) return nccl_err(r, "ncclGetUniqueId");
    memcpy(id, &u, sizeof u);
    return MD_OK;
}

md_status md_cuda_comm_init(md_device *dev, const unsigned char id[MD_COMM_ID_BYTES], int nranks, int rank)
{
    MD_TRY(nccl_load());
    struct comm_slot *s = slot_of(dev, 1);
    if (!s) return md_errf(MD_ERR_INTERNAL, "NCCL: more than %d communicators", MD_MAX_DEVICES);
    if (s->comm) return md_errf(MD_ERR_INTERNAL, "NCCL: the device already has a communicator");
    MD_CU_TRY(cudaSetDevice(md_cuda_impl(dev)->device), "cudaSetDevice");
    ncclUniqueId u;
    memcpy(&u, id, sizeof u);
    ncclResult_t r = N.comm_init_rank(&s->comm, nranks, u, rank);
    if (r != ncclSuccess) {
        s->comm = NULL;
        s->dev = NULL;
        return nccl_err(r, "ncclCommInitRank");
    }
    int lo = 0, hi = 0;
    MD_CU_TRY(cudaDeviceGetStreamPriorityRange(&lo, &hi), "cudaDeviceGetStreamPriorityRange");
    MD_CU_TRY(cudaStreamCreateWithPriority(&s->side, cudaStreamNonBlocking, hi), "cudaStreamCreateWithPriority");
    MD_CU_TRY(cudaEventCreateWithFlags(&s->fork, cudaEventDisableTiming), "cudaEventCreate");
    MD_CU_TRY(cudaEventCreateWithFlags(&s->join, cudaEventDisableTiming), "cudaEventCreate");
    for (int i = 0; i < 2 * COMM_TIMED; i++) MD_CU_TRY(cudaEventCreate(&s->timed[i]), "cudaEventCreate");
    return MD_OK;
}

static void slot_free(struct comm_slot *s)
{
    if (s->side) cudaStreamDestroy(s->side);
    if (s->fork) cudaEventDestroy(s->fork);
    if (s->join) cudaEventDestroy(s->join);
    for (int i = 0; i < 2 * COMM_TIMED; i++)
        if (s->timed[i]) cudaEventDestroy(s->timed[i]);
    memset(s, 0, sizeof *s);
}

md_status md_cuda_allreduce_sum(md_device *dev, float *buf, size_t n)
{
    struct comm_slot *s = slot_of(dev, 0);
    if (!s || !s->comm) return md_errf(MD_ERR_INTERNAL, "NCCL all-reduce before the communicator was made");
    ncclResult_t r = N.all_reduce(buf, buf, n, ncclFloat32, ncclSum, s->comm, md_cuda_impl(dev)->stream);
    if (r != ncclSuccess) return nccl_err(r, "ncclAllReduce");
    return MD_OK;
}

md_status md_cuda_allreduce_start(md_device *dev, float *buf, size_t n)
{
    struct comm_slot *s = slot_of(dev, 0);
    if (!s || !s->comm || !s->side) return md_errf(MD_ERR_INTERNAL, "NCCL all-reduce before the communicator was made");
    cudaStream_t main = md_cuda_impl(dev)->stream;
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    MD_CU_TRY(cudaStreamIsCapturing(main, &cap), "cudaStreamIsCapturing");
    int timed = cap == cudaStreamCaptureStatusNone && s->ntimed < COMM_TIMED;
    MD_CU_TRY(cudaEventRecord(s->fork, main), "cudaEventRecord (all-reduce fork)");
    MD_CU_TRY(cudaStreamWaitEvent(s->side, s->fork, 0), "cudaStreamWaitEvent (all-reduce fork)");
    if (timed) MD_CU_TRY(cudaEventRecord(s->timed[2 * s->ntimed], s->side), "cudaEventRecord");
    ncclResult_t r = N.all_reduce(buf, buf, n, ncclFloat32, ncclSum, s->comm, s->side);
    if (r != ncclSuccess) return nccl_err(r, "ncclAllReduce");
    if (timed) MD_CU_TRY(cudaEventRecord(s->timed[2 * s->ntimed++ + 1], s->side), "cudaEventRecord");
    s->pending = 1;
    return MD_OK;
}

md_status md_cuda_allreduce_join(md_device *dev)
{
    struct comm_slot *s = slot_of(dev, 0);
    if (!s || !s->pending) return MD_OK;
    MD_CU_TRY(cudaEventRecord(s->join, s->side), "cudaEventRecord (all-reduce join)");
    MD_CU_TRY(cudaStreamWaitEvent(md_cuda_impl(dev)->stream, s->join, 0), "cudaStreamWaitEvent (all-reduce join)");
    s->pending = 0;
    return MD_OK;
}

md_status md_cuda_comm_busy_ms(md_device *dev, float *ms)
{
    *ms = 0;
    struct comm_slot *s = slot_of(dev, 0);
    if (!s || !s->comm || s->ntimed == 0) return md_errf(MD_ERR_UNSUPPORTED, "no timed collectives");
    for (int i = 0; i < s->ntimed; i++) {
        float t = 0;
        MD_CU_TRY(cudaEventElapsedTime(&t, s->timed[2 * i], s->timed[2 * i + 1]), "cudaEventElapsedTime");
        *ms += t;
    }
    s->ntimed = 0;
    return MD_OK;
}

md_status md_cuda_comm_check(md_device *dev)
{
    struct comm_slot *s = slot_of(dev, 0);
    if (!s || !s->comm) return MD_OK;
    ncclResult_t async = ncclSuccess;
    ncclResult_t r = N.get_async_error(s->comm, &async);
    if (r != ncclSuccess) return nccl_err(r, "ncclCommGetAsyncError");
    if (async != ncclSuccess && async != ncclInProgress) return nccl_err(async, "collective (asynchronous error)");
    return MD_OK;
}

void md_cuda_comm_abort(md_device *dev)
{
    struct comm_slot *s = slot_of(dev, 0);
    if (!s) return;
    if (s->comm) N.comm_abort(s->comm);
    slot_free(s);
}

void md_cuda_comm_close(md_device *dev)
{
    struct comm_slot *s = slot_of(dev, 0);
    if (!s) return;
    if (s->comm) N.comm_destroy(s->comm);
    slot_free(s);
}

static int has_comm(md_device *dev)
{
    struct comm_slot *s = slot_of(dev, 0);
    return s && s->comm;
}

#else /* built without NCCL */

static int has_comm(md_device *dev)
{
    (void)dev;
    return 0;
}

static md_status no_nccl(void)
{
    return md_errf(MD_ERR_UNSUPPORTED, "this CUDA plug-in was built without NCCL (nccl.h not found); rebuild with "
                   "NCCL installed for multi-GPU training");
}
md_status md_cuda_comm_unique_id(md_device *dev, unsigned char id[MD_COMM_ID_BYTES])
{
    (void)dev;
    (void)id;
    return no_nccl();
}
md_status md_cuda_comm_init(md_device *dev, const unsigned char id[MD_COMM_ID_BYTES], int nranks, int rank)
{
    (void)dev;
    (void)id;
    (void)nranks;
    (void)rank;
    return no_nccl();
}
md_status md_cuda_allreduce_sum(md_device *dev, float *buf, size_t n)
{
    (void)dev;
    (void)buf;
    (void)n;
    return no_nccl();
}
md_status md_cuda_allreduce_start(md_device *dev, float *buf, size_t n)
{
    return md_cuda_allreduce_sum(dev, buf, n);
}
md_status md_cuda_allreduce_join(md_device *dev)
{
    (void)dev;
    return MD_OK;
}
md_status md_cuda_comm_busy_ms(md_device *dev, float *ms)
{
    (void)dev;
    *ms = 0;
    return no_nccl();
}
md_status md_cuda_comm_check(md_device *dev)
{
    (void)dev;
    return MD_OK;
}
void md_cuda_comm_abort(md_device *dev) { (void)dev; }
void md_cuda_comm_close(md_device *dev) { (void)dev; }

#endif

md_status md_cuda_sync_sum(md_device *dev, float *buf, size_t n, const struct md_bn_sync *sync)
{
    if (!n) return MD_OK;
    if (has_comm(dev)) return md_cuda_allreduce_sum(dev, buf, n);
    if (!sync || !sync->allreduce || sync->nranks < 2) return MD_OK; /* one rank */
    cudaStream_t stream = md_cuda_impl(dev)->stream;
    float *h = (float *)md_malloc(n * sizeof *h);
    if (!h) return md_errf(MD_ERR_OOM, "cuda: cannot allocate the host copy of a batch norm exchange");
    md_status st = MD_OK;
    cudaError_t e = cudaMemcpyAsync(h, buf, n * sizeof *h, cudaMemcpyDeviceToHost, stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(stream);
    if (e != cudaSuccess) st = md_cuda_err(e, "batch norm exchange (copy to the host)");
    if (st == MD_OK) st = sync->allreduce(sync->ctx, h, n);
    /* pageable source: returns once the copy has it */
    if (st == MD_OK && (e = cudaMemcpyAsync(buf, h, n * sizeof *h, cudaMemcpyHostToDevice, stream)) != cudaSuccess)
        st = md_cuda_err(e, "batch norm exchange (copy to the device)");
    md_free(h);
    return st;
}
