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
struct comm_slot {
    md_device *dev;
    ncclComm_t comm;
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
    return MD_OK;
}

md_status md_cuda_allreduce_sum(md_device *dev, float *buf, size_t n)
{
    struct comm_slot *s = slot_of(dev, 0);
    if (!s || !s->comm) return md_errf(MD_ERR_INTERNAL, "NCCL all-reduce before the communicator was made");
    ncclResult_t r = N.all_reduce(buf, buf, n, ncclFloat32, ncclSum, s->comm, md_cuda_impl(dev)->stream);
    if (r != ncclSuccess) return nccl_err(r, "ncclAllReduce");
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
    s->comm = NULL;
    s->dev = NULL;
}

void md_cuda_comm_close(md_device *dev)
{
    struct comm_slot *s = slot_of(dev, 0);
    if (!s) return;
    if (s->comm) N.comm_destroy(s->comm);
    s->comm = NULL;
    s->dev = NULL;
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
