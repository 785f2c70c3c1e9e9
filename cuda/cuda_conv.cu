/* cuda_conv.cu - 2-D convolutions (forward, backward data, backward filter)
 * through cuDNN's convolution API.
 *
 * One cache entry per shape (sizes, layout, dtype, TF32) holds the
 * descriptors and, per direction, the algorithms chosen. The workspace comes
 * from our allocator, so it is counted in the memory statistics. NHWC uses
 * cuDNN's NHWC filter format, (K, R, S, C/g), which is exactly our NHWC
 * filter layout.
 *
 * Execution: cuDNN 9's legacy convolution calls cost 150-350 µs of host
 * time each (measured on an H100 host), which makes an eager ResNet-50 step
 * host-bound. So, like PyTorch's cuDNN frontend, each (shape, direction,
 * beta 0/1) gets an execution plan of the backend (graph) API, built once
 * and run with cudnnBackendExecute and a small variant pack. The plan is the
 * first of cuDNN's heuristics (mode A) that builds within the workspace cap;
 * with autotune (--compile-mode max-autotune) up to eight of the heuristics'
 * configurations are built and timed on the first call's inputs and the
 * fastest is kept, as PyTorch's cudnn.benchmark does (fastest_plan). The
 * legacy path remains for what plans do not cover: fp32 without TF32 (plans
 * cannot be restricted to FMA kernels here), deterministic mode, other
 * betas, pointers not 16-byte aligned, a plan cuDNN will not build or run,
 * and MPSDIAG_CUDNN_LEGACY=1. There the algorithms come from
 * cudnnGet*Algorithm_v7 heuristics, or from measurement (cudnnFind*) with
 * autotune.
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_internal.h"

#define MAX_ALGOS 8

struct conv_key {
    int n, c, h, w, k, r, s, p, q;
    int sh, sw, ph, pw, dh, dw, g;
    int layout, dtype, tf32, det;
};

struct dir_choice {
    int ready, n, cur;  /* candidates in order of preference; cur = the one in use */
    int algo[MAX_ALGOS];
    cudnnMathType_t math[MAX_ALGOS];
    size_t ws[MAX_ALGOS];     /* workspace bytes per candidate, asked once (-1: refused) */
};

/* An execution plan of cuDNN's backend API for one direction and beta, with
 * the descriptors it was made from (kept alive with it). */
#define PLAN_KEEP 16
struct bplan {
    int state;                 /* 0 not tried, 1 ready, -1 not usable: the legacy API runs */
    cudnnBackendDescriptor_t plan;
    int64_t ws;                /* workspace bytes */
    cudnnBackendDescriptor_t keep[PLAN_KEEP];
    int nkeep;
};

struct md_cuda_conv_entry {
    struct conv_key key;
    struct bplan bp[3][2];     /* [direction][beta == 1] */
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd[3]; /* one per direction: see math_set */
    struct dir_choice dir[3]; /* fwd, bwd data, bwd filter */
    /* The math type last set on cd[dir]. Each direction has its own
     * descriptor: toggling one descriptor's math type between directions made
     * cuDNN 9's legacy API rebuild its plan on every call (a 1x1 stride-2
     * backward-data took 3.3 ms instead of 0.03 ms inside a ResNet step). */
    int math_set[3];
    int ran[3][2];             /* [direction][beta == 1]: a call has run (plans and algorithms chosen) */
    struct md_cuda_conv_entry *next;
};

enum { DIR_FWD = 0, DIR_BWD_DATA, DIR_BWD_FILTER };
static const char *const dir_names[3] = {"conv2d_fwd", "conv2d_bwd_data", "conv2d_bwd_filter"};

static void entry_free(struct md_cuda_conv_entry *e)
{
    if (!e) return;
    if (e->xd) cudnnDestroyTensorDescriptor(e->xd);
    if (e->yd) cudnnDestroyTensorDescriptor(e->yd);
    if (e->wd) cudnnDestroyFilterDescriptor(e->wd);
    for (int i = 0; i < 3; i++)
        if (e->cd[i]) cudnnDestroyConvolutionDescriptor(e->cd[i]);
    for (int d = 0; d < 3; d++)
        for (int b = 0; b < 2; b++) {
            struct bplan *p = &e->bp[d][b];
            if (p->plan) cudnnBackendDestroyDescriptor(p->plan);
            for (int i = 0; i < p->nkeep; i++) cudnnBackendDestroyDescriptor(p->keep[i]);
        }
    md_free(e);
}

void md_cuda_conv_cache_free(md_device *dev)
{
    struct md_cuda_dev *c = md_cuda_impl(dev);
    while (c->convs) {
        struct md_cuda_conv_entry *e = c->convs;
        c->convs = e->next;
        entry_free(e);
    }
}

#define DNN_TRY(call, what)                                                    \
    do {                                                                       \
        cudnnStatus_t s_ = (call);                                             \
        if (s_ != CUDNN_STATUS_SUCCESS) {                                      \
            st = md_cuda_dnn_err(s_, what);                                    \
            goto fail;                                                         \
        }                                                                      \
    } while (0)

static md_status get_entry(md_device *dev, const struct md_conv2d_args *a, struct md_cuda_conv_entry **out)
{
    struct md_cuda_dev *c = md_cuda_impl(dev);
    md_status st = MD_OK;
    struct conv_key key;
    memset(&key, 0, sizeof key);
    key.n = a->n; key.c = a->c; key.h = a->h; key.w = a->w;
    key.k = a->k; key.r = a->r; key.s = a->s; key.p = a->p; key.q = a->q;
    key.sh = a->stride_h; key.sw = a->stride_w; key.ph = a->pad_h; key.pw = a->pad_w;
    key.dh = a->dil_h > 0 ? a->dil_h : 1; key.dw = a->dil_w > 0 ? a->dil_w : 1;
    key.g = a->groups > 0 ? a->groups : 1;
    key.layout = (int)a->layout; key.dtype = (int)a->dtype; key.tf32 = c->tf32; key.det = dev->opts.deterministic;
    struct md_cuda_conv_entry *prev = NULL;
    for (struct md_cuda_conv_entry *e = c->convs; e; prev = e, e = e->next) {
        if (memcmp(&e->key, &key, sizeof key) == 0) {
            if (prev) { /* move to front: a step visits the same shapes in order */
                prev->next = e->next;
                e->next = c->convs;
                c->convs = e;
            }
            *out = e;
            return MD_OK;
        }
    }
    cudnnDataType_t dt;
    switch (a->dtype) {
    case MD_F32: dt = CUDNN_DATA_FLOAT; break;
    case MD_F16: dt = CUDNN_DATA_HALF; break;
    case MD_BF16: dt = CUDNN_DATA_BFLOAT16; break;
    default: return md_errf(MD_ERR_UNSUPPORTED, "cuda conv2d: dtype %s is not supported", md_dtype_name(a->dtype));
    }
    if (key.c % key.g || key.k % key.g)
        return md_errf(MD_ERR_INTERNAL, "cuda conv2d: channels %d/%d not divisible by groups %d", key.c, key.k, key.g);
    cudnnTensorFormat_t fmt = a->layout == MD_NHWC ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    struct md_cuda_conv_entry *e = (struct md_cuda_conv_entry *)md_calloc(1, sizeof *e);
    if (!e) return MD_ERR_OOM;
    e->key = key;
    int on, oc, oh, ow;
    DNN_TRY(cudnnCreateTensorDescriptor(&e->xd), "create tensor descriptor");
    DNN_TRY(cudnnCreateTensorDescriptor(&e->yd), "create tensor descriptor");
    DNN_TRY(cudnnCreateFilterDescriptor(&e->wd), "create filter descriptor");
    DNN_TRY(cudnnSetTensor4dDescriptor(e->xd, fmt, dt, key.n, key.c, key.h, key.w), "input descriptor");
    DNN_TRY(cudnnSetTensor4dDescriptor(e->yd, fmt, dt, key.n, key.k, key.p, key.q), "output descriptor");
    DNN_TRY(cudnnSetFilter4dDescriptor(e->wd, dt, fmt, key.k, key.c / key.g, key.r, key.s), "filter descriptor");
    for (int i = 0; i < 3; i++) {
        DNN_TRY(cudnnCreateConvolutionDescriptor(&e->cd[i]), "create convolution descriptor");
        DNN_TRY(cudnnSetConvolution2dDescriptor(e->cd[i], key.ph, key.pw, key.sh, key.sw, key.dh, key.dw,
                                                CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                "convolution descriptor");
        DNN_TRY(cudnnSetConvolutionGroupCount(e->cd[i], key.g), "group count");
        e->math_set[i] = (int)(a->dtype != MD_F32 ? CUDNN_TENSOR_OP_MATH : c->tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH);
        DNN_TRY(cudnnSetConvolutionMathType(e->cd[i], (cudnnMathType_t)e->math_set[i]), "math type");
    }
    DNN_TRY(cudnnGetConvolution2dForwardOutputDim(e->cd[0], e->xd, e->wd, &on, &oc, &oh, &ow), "output size");
    if (on != key.n || oc != key.k || oh != key.p || ow != key.q) {
        st = md_errf(MD_ERR_INTERNAL, "cuda conv2d: output (%d, %d, %d, %d) given, cuDNN computes (%d, %d, %d, %d)",
                     key.n, key.k, key.p, key.q, on, oc, oh, ow);
        goto fail;
    }
    e->next = c->convs;
    c->convs = e;
    *out = e;
    return MD_OK;
fail:
    entry_free(e);
    return st;
}

/* May this algorithm's math be used? fp32 without TF32 takes FMA kernels only. */
static int math_ok(const struct conv_key *k, cudnnMathType_t m)
{
    if (k->dtype == MD_F32 && !k->tf32) return m == CUDNN_FMA_MATH;
    return 1;
}

static size_t ws_cap(md_device *dev)
{
    size_t cap = (size_t)1 << 30;
    if (dev->mem.limit) {
        long long room = (dev->mem.limit - dev->mem.current) / 2;
        if (room < (long long)cap) cap = room > 0 ? (size_t)room : 0;
    }
    return cap;
}

/* Fills the direction's candidate list (perf results are sorted best first). */
#define FILL_CANDIDATES(perf, cnt)                                                                 \
    do {                                                                                           \
        for (int i_ = 0; i_ < (cnt) && d->n < MAX_ALGOS; i_++) {                                   \
            if ((perf)[i_].status != CUDNN_STATUS_SUCCESS) continue;                               \
            if (e->key.det && (perf)[i_].determinism != CUDNN_DETERMINISTIC) continue;             \
            if (!math_ok(&e->key, (perf)[i_].mathType)) continue;                                  \
            if ((perf)[i_].memory > cap) continue;                                                 \
            d->algo[d->n] = (int)(perf)[i_].algo;                                                  \
            d->math[d->n] = (perf)[i_].mathType;                                                   \
            d->ws[d->n] = (perf)[i_].memory;                                                       \
            d->n++;                                                                                \
        }                                                                                          \
    } while (0)

static md_status choose(md_device *dev, struct md_cuda_conv_entry *e, int dir)
{
    struct md_cuda_dev *c = md_cuda_impl(dev);
    struct dir_choice *d = &e->dir[dir];
    md_status st = MD_OK;
    size_t cap = ws_cap(dev);
    int find = c->autotune && !c->capturing;
    int cnt = 0;
    d->n = 0;
    d->cur = 0;
    if (dir == DIR_FWD) {
        cudnnConvolutionFwdAlgoPerf_t perf[CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
        if (find)
            DNN_TRY(cudnnFindConvolutionForwardAlgorithm(c->dnn, e->xd, e->wd, e->cd[dir], e->yd,
                                                         CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &cnt, perf),
                    "find forward algorithm");
        else
            DNN_TRY(cudnnGetConvolutionForwardAlgorithm_v7(c->dnn, e->xd, e->wd, e->cd[dir], e->yd,
                                                           CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &cnt, perf),
                    "forward algorithm heuristics");
        FILL_CANDIDATES(perf, cnt);
    } else if (dir == DIR_BWD_DATA) {
        cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
        if (find)
            DNN_TRY(cudnnFindConvolutionBackwardDataAlgorithm(c->dnn, e->wd, e->yd, e->cd[dir], e->xd,
                                                              CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &cnt, perf),
                    "find backward-data algorithm");
        else
            DNN_TRY(cudnnGetConvolutionBackwardDataAlgorithm_v7(c->dnn, e->wd, e->yd, e->cd[dir], e->xd,
                                                                CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &cnt, perf),
                    "backward-data algorithm heuristics");
        FILL_CANDIDATES(perf, cnt);
    } else {
        cudnnConvolutionBwdFilterAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
        if (find)
            DNN_TRY(cudnnFindConvolutionBackwardFilterAlgorithm(c->dnn, e->xd, e->yd, e->cd[dir], e->wd,
                                                                CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &cnt, perf),
                    "find backward-filter algorithm");
        else
            DNN_TRY(cudnnGetConvolutionBackwardFilterAlgorithm_v7(c->dnn, e->xd, e->yd, e->cd[dir], e->wd,
                                                                  CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &cnt, perf),
                    "backward-filter algorithm heuristics");
        FILL_CANDIDATES(perf, cnt);
    }
    for (int i = 0; i < d->n; i++) {
        size_t need = 0;
        cudnnStatus_t s = cudnnSetConvolutionMathType(e->cd[dir], d->math[i]);
        e->math_set[dir] = (int)d->math[i];
        if (s == CUDNN_STATUS_SUCCESS) {
            if (dir == DIR_FWD)
                s = cudnnGetConvolutionForwardWorkspaceSize(c->dnn, e->xd, e->wd, e->cd[dir], e->yd,
                                                            (cudnnConvolutionFwdAlgo_t)d->algo[i], &need);
            else if (dir == DIR_BWD_DATA)
                s = cudnnGetConvolutionBackwardDataWorkspaceSize(c->dnn, e->wd, e->yd, e->cd[dir], e->xd,
                                                                 (cudnnConvolutionBwdDataAlgo_t)d->algo[i], &need);
            else
                s = cudnnGetConvolutionBackwardFilterWorkspaceSize(c->dnn, e->xd, e->yd, e->cd[dir], e->wd,
                                                                   (cudnnConvolutionBwdFilterAlgo_t)d->algo[i], &need);
        }
        d->ws[i] = s == CUDNN_STATUS_SUCCESS ? need : (size_t)-1;
    }
    if (d->n == 0) {
        const struct conv_key *k = &e->key;
        return md_errf(MD_ERR_UNSUPPORTED,
                       "cuda %s: cuDNN has no algorithm for n=%d c=%d %dx%d k=%d %dx%d stride %d pad %d groups %d %s %s%s",
                       dir_names[dir], k->n, k->c, k->h, k->w, k->k, k->r, k->s, k->sh, k->ph, k->g,
                       md_layout_name((md_layout)k->layout), md_dtype_name((md_dtype)k->dtype),
                       k->det ? " (deterministic)" : "");
    }
    d->ready = 1;
    return MD_OK;
fail:
    return st;
}

/* ---- execution plans of the backend API ------------------------------------------- */

enum { UID_X = 1, UID_W = 2, UID_Y = 3 };

static cudnnBackendDescriptor_t keep_new(struct bplan *p, cudnnBackendDescriptorType_t t, cudnnStatus_t *s)
{
    cudnnBackendDescriptor_t d = NULL;
    if (*s != CUDNN_STATUS_SUCCESS) return NULL;
    if (p->nkeep >= PLAN_KEEP) {
        *s = CUDNN_STATUS_INTERNAL_ERROR;
        return NULL;
    }
    *s = cudnnBackendCreateDescriptor(t, &d);
    if (*s == CUDNN_STATUS_SUCCESS) p->keep[p->nkeep++] = d;
    return d;
}

static void set_attr(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t n, cudnnBackendAttributeType_t t,
                     int64_t count, const void *v, cudnnStatus_t *s)
{
    if (*s == CUDNN_STATUS_SUCCESS) *s = cudnnBackendSetAttribute(d, n, t, count, v);
}

static void finalize(cudnnBackendDescriptor_t d, cudnnStatus_t *s)
{
    if (*s == CUDNN_STATUS_SUCCESS) *s = cudnnBackendFinalize(d);
}

/* (n, c, h, w) in the given layout; 16-byte aligned. */
static cudnnBackendDescriptor_t plan_tensor(struct bplan *p, int64_t uid, cudnnDataType_t dt, int64_t n, int64_t c,
                                            int64_t h, int64_t w, int nhwc, cudnnStatus_t *s)
{
    int64_t dims[4] = {n, c, h, w}, st[4], align = 16;
    if (nhwc) { st[0] = h * w * c; st[1] = 1; st[2] = w * c; st[3] = c; }
    else { st[0] = c * h * w; st[1] = h * w; st[2] = w; st[3] = 1; }
    cudnnBackendDescriptor_t d = keep_new(p, CUDNN_BACKEND_TENSOR_DESCRIPTOR, s);
    set_attr(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt, s);
    set_attr(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims, s);
    set_attr(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, st, s);
    set_attr(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid, s);
    set_attr(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align, s);
    finalize(d, s);
    return d;
}

/* Runs a plan with the tensors in the roles x, w, y (the direction's order). */
static cudnnStatus_t exec_raw(struct md_cuda_dev *c, cudnnBackendDescriptor_t plan, void *const io[3], void *ws)
{
    int64_t uids[3] = {UID_X, UID_W, UID_Y};
    void *ptrs[3] = {io[0], io[1], io[2]};
    cudnnBackendDescriptor_t vp = NULL;
    cudnnStatus_t s = cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &vp);
    set_attr(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, 3, uids, &s);
    set_attr(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, 3, ptrs, &s);
    set_attr(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws, &s);
    finalize(vp, &s);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnBackendExecute(c->dnn, plan, vp);
    if (vp) cudnnBackendDestroyDescriptor(vp);
    return s;
}

/* Timed plan selection (--compile-mode max-autotune, as PyTorch's
 * cudnn.benchmark): each candidate runs on this call's inputs into a scratch
 * output (the real one may hold a sum being accumulated), once to warm up and
 * three times timed. Returns the index of the fastest median time, 0 when the
 * timing itself could not be set up (the heuristics' first), -1 when every
 * candidate refused to run. */
static int fastest_plan(md_device *dev, const struct md_cuda_conv_entry *e, int dir, cudnnBackendDescriptor_t *plans,
                        const int64_t *wss, int np, void *const io[3])
{
    struct md_cuda_dev *c = md_cuda_impl(dev);
    const struct conv_key *k = &e->key;
    size_t out_elems = dir == DIR_FWD        ? (size_t)k->n * k->k * k->p * k->q
                       : dir == DIR_BWD_DATA ? (size_t)k->n * k->c * k->h * k->w
                                             : (size_t)k->k * (k->c / k->g) * k->r * k->s;
    size_t out_bytes = out_elems * md_dtype_size((md_dtype)k->dtype);
    int out_role = dir == DIR_FWD ? 2 : dir == DIR_BWD_DATA ? 0 : 1;
    int64_t need = 0;
    for (int i = 0; i < np; i++)
        if (wss[i] > need) need = wss[i];
    void *out = NULL, *ws = NULL;
    cudaEvent_t ev[2] = {NULL, NULL};
    int best = 0, set_up = 0;
    float best_ms = 0;
    if (need > 0 && md_cuda_scratch_get(dev, &c->conv_ws, (size_t)need, "cuDNN workspace") != MD_OK) goto done;
    ws = need > 0 ? c->conv_ws.ptr : NULL;
    if (cudaMalloc(&out, out_bytes) != cudaSuccess) goto done;
    if (cudaMemsetAsync(out, 0, out_bytes, c->stream) != cudaSuccess) goto done;
    if (cudaEventCreate(&ev[0]) != cudaSuccess || cudaEventCreate(&ev[1]) != cudaSuccess) goto done;
    set_up = 1;
    {
        void *tio[3] = {io[0], io[1], io[2]};
        tio[out_role] = out;
        best = -1;
        for (int i = 0; i < np; i++) {
            if (exec_raw(c, plans[i], tio, ws) != CUDNN_STATUS_SUCCESS) continue; /* refused: not a candidate */
            float t[3] = {0, 0, 0};
            int bad = 0;
            for (int r = 0; r < 3 && !bad; r++) {
                bad |= cudaEventRecord(ev[0], c->stream) != cudaSuccess;
                bad |= exec_raw(c, plans[i], tio, ws) != CUDNN_STATUS_SUCCESS;
                bad |= cudaEventRecord(ev[1], c->stream) != cudaSuccess;
                bad |= cudaEventSynchronize(ev[1]) != cudaSuccess;
                bad |= cudaEventElapsedTime(&t[r], ev[0], ev[1]) != cudaSuccess;
            }
            if (bad) continue;
            float lo = fminf(t[0], fminf(t[1], t[2])), hi = fmaxf(t[0], fmaxf(t[1], t[2]));
            float med = t[0] + t[1] + t[2] - lo - hi;
            if (best < 0 || med < best_ms) best = i, best_ms = med;
        }
    }
done:
    for (int i = 0; i < 2; i++)
        if (ev[i]) cudaEventDestroy(ev[i]);
    if (out) {
        cudaStreamSynchronize(c->stream);
        cudaFree(out);
    }
    (void)cudaGetLastError(); /* a failed allocation is not the next kernel's error */
    return set_up ? best : 0;
}

/* Builds p's plan; returns 1 when one is ready. Any refusal is not an error:
 * the legacy API runs instead. */
static int build_plan(md_device *dev, const struct md_cuda_conv_entry *e, int dir, float beta, struct bplan *p,
                      void *const io[3])
{
    struct md_cuda_dev *c = md_cuda_impl(dev);
    const struct conv_key *k = &e->key;
    cudnnDataType_t dt = k->dtype == MD_F32 ? CUDNN_DATA_FLOAT : k->dtype == MD_F16 ? CUDNN_DATA_HALF : CUDNN_DATA_BFLOAT16;
    int nhwc = k->layout == MD_NHWC;
    cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
    cudnnBackendDescriptor_t x = plan_tensor(p, UID_X, dt, k->n, k->c, k->h, k->w, nhwc, &s);
    cudnnBackendDescriptor_t w = plan_tensor(p, UID_W, dt, k->k, k->c / k->g, k->r, k->s, nhwc, &s);
    cudnnBackendDescriptor_t y = plan_tensor(p, UID_Y, dt, k->n, k->k, k->p, k->q, nhwc, &s);

    cudnnBackendDescriptor_t cv = keep_new(p, CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, &s);
    int64_t sp = 2, dil[2] = {k->dh, k->dw}, str[2] = {k->sh, k->sw}, pad[2] = {k->ph, k->pw};
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    set_attr(cv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, &s);
    set_attr(cv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode, &s);
    set_attr(cv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &sp, &s);
    set_attr(cv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil, &s);
    set_attr(cv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str, &s);
    set_attr(cv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, pad, &s);
    set_attr(cv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, pad, &s);
    finalize(cv, &s);

    /* the operation's attributes per direction: x (or dx), w (or dw), y (or dy) */
    static const struct {
        cudnnBackendDescriptorType_t type;
        cudnnBackendAttributeName_t x, w, y, conv, alpha, beta;
    } ops[3] = {
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA},
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA},
        {CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
         CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA},
    };
    float alpha = 1.0f;
    cudnnBackendDescriptor_t op = keep_new(p, ops[dir].type, &s);
    set_attr(op, ops[dir].x, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x, &s);
    set_attr(op, ops[dir].w, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w, &s);
    set_attr(op, ops[dir].y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y, &s);
    set_attr(op, ops[dir].conv, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cv, &s);
    set_attr(op, ops[dir].alpha, CUDNN_TYPE_FLOAT, 1, &alpha, &s);
    set_attr(op, ops[dir].beta, CUDNN_TYPE_FLOAT, 1, &beta, &s);
    finalize(op, &s);

    cudnnBackendDescriptor_t graph = keep_new(p, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, &s);
    set_attr(graph, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &op, &s);
    set_attr(graph, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &c->dnn, &s);
    finalize(graph, &s);

    cudnnBackendDescriptor_t heur = keep_new(p, CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &s);
    const char *hv = getenv("MPSDIAG_CUDNN_HEUR");
    cudnnBackendHeurMode_t hm = hv && strcmp(hv, "B") == 0 ? CUDNN_HEUR_MODE_B : CUDNN_HEUR_MODE_A;
    set_attr(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &graph, &s);
    set_attr(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &hm, &s);
    finalize(heur, &s);

    /* max-autotune times up to 8 of the heuristics' configurations (keep: 7 + NCFG <= PLAN_KEEP) */
    enum { NCFG = 8 };
    int want = c->autotune ? NCFG : 6;
    cudnnBackendDescriptor_t cfg[NCFG];
    for (int i = 0; i < want; i++) cfg[i] = keep_new(p, CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &s);
    int64_t got = 0;
    if (s == CUDNN_STATUS_SUCCESS)
        s = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, want, &got, cfg);
    if (s != CUDNN_STATUS_SUCCESS) return 0;
    int64_t cap = (int64_t)ws_cap(dev);
    cudnnBackendDescriptor_t plans[NCFG];
    int64_t wss[NCFG];
    int np = 0;
    for (int64_t i = 0; i < got && i < want; i++) {
        cudnnBackendDescriptor_t plan = NULL;
        cudnnStatus_t ps = cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan);
        set_attr(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &c->dnn, &ps);
        set_attr(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i], &ps);
        finalize(plan, &ps);
        int64_t ws = 0, n = 0;
        if (ps == CUDNN_STATUS_SUCCESS)
            ps = cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws);
        if (ps == CUDNN_STATUS_SUCCESS && ws <= cap) {
            plans[np] = plan;
            wss[np++] = ws;
            if (!c->autotune) break; /* heuristics: the first that builds */
            continue;
        }
        if (plan) cudnnBackendDestroyDescriptor(plan);
    }
    if (!np) return 0;
    int best = np > 1 ? fastest_plan(dev, e, dir, plans, wss, np, io) : 0;
    for (int i = 0; i < np; i++)
        if (i != best) cudnnBackendDestroyDescriptor(plans[i]);
    if (best < 0) return 0; /* every candidate refused to run */
    p->plan = plans[best];
    p->ws = wss[best];
    return 1;
}

/* The cuDNN workspace of the stream the handle is bound to now. */
static struct md_cuda_scratch *conv_ws_of(struct md_cuda_dev *c)
{
    return c->conv_on_side ? &c->conv_ws_side : &c->conv_ws;
}

/* Runs a ready plan on (x, w, y) in the direction's roles. */

static md_status exec_plan(md_device *dev, const struct md_conv2d_args *a, struct bplan *p, void *x, void *w, void *y)
{
    struct md_cuda_dev *c = md_cuda_impl(dev);
    void *ws = NULL;
    if (p->ws > 0) {
        if (a->workspace && a->workspace_bytes >= (size_t)p->ws) {
            ws = a->workspace;
        } else {
            struct md_cuda_scratch *sc = conv_ws_of(c);
            MD_TRY(md_cuda_scratch_get(dev, sc, (size_t)p->ws, "cuDNN workspace"));
            ws = sc->ptr;
        }
    }
    void *io[3] = {x, w, y};
    cudnnStatus_t s = exec_raw(c, p->plan, io, ws);
    return s == CUDNN_STATUS_SUCCESS ? MD_OK : md_cuda_dnn_err(s, "cudnnBackendExecute");
}

static int aligned16(const void *p) { return ((uintptr_t)p & 15) == 0; }

/* 1: the call ran through a plan; 0: use the legacy API (*st MD_OK), or an error. */
static int try_plan(md_device *dev, struct md_cuda_conv_entry *e, const struct md_conv2d_args *a, int dir, md_status *st)
{
    static int legacy = -1;
    struct md_cuda_dev *c = md_cuda_impl(dev);
    *st = MD_OK;
    if (legacy < 0) {
        const char *v = getenv("MPSDIAG_CUDNN_LEGACY");
        legacy = v && strcmp(v, "1") == 0;
    }
    const struct conv_key *k = &e->key;
    if (legacy || k->det || (k->dtype == MD_F32 && !k->tf32)) return 0;
    if (a->beta != 0.0f && a->beta != 1.0f) return 0;
    void *x = dir == DIR_BWD_DATA ? a->dx : (void *)a->x;
    void *w = dir == DIR_BWD_FILTER ? a->dwt : (void *)a->wt;
    void *y = dir == DIR_FWD ? a->y : (void *)a->dy;
    if (!aligned16(x) || !aligned16(w) || !aligned16(y)) return 0;
    struct bplan *p = &e->bp[dir][a->beta == 1.0f];
    if (p->state == 0) {
        if (c->capturing) return 0; /* built outside a capture: heuristics may touch the device */
        void *io[3] = {x, w, y};
        p->state = build_plan(dev, e, dir, a->beta, p, io) ? 1 : -1;
    }
    if (p->state != 1) return 0;
    *st = exec_plan(dev, a, p, x, w, y);
    if (*st == MD_OK) return 1;
    p->state = -1; /* refused at run time: the legacy API from now on */
    *st = MD_OK;
    return 0;
}

/* Runs one direction, moving to the next candidate when cuDNN refuses one. */
static md_status run(md_device *dev, const struct md_conv2d_args *a, int dir)
{
    struct md_cuda_dev *c = md_cuda_impl(dev);
    struct md_cuda_conv_entry *e = NULL;
    MD_TRY(get_entry(dev, a, &e));
    md_status pst;
    if (try_plan(dev, e, a, dir, &pst)) {
        e->ran[dir][a->beta == 1.0f] = 1;
        return MD_OK;
    }
    MD_TRY(pst);
    struct dir_choice *d = &e->dir[dir];
    if (!d->ready) MD_TRY(choose(dev, e, dir));
    float alpha = 1.0f, beta = a->beta;
    for (; d->cur < d->n; d->cur++) {
        int i = d->cur;
        cudnnStatus_t s = CUDNN_STATUS_SUCCESS;
        if (e->math_set[dir] != (int)d->math[i]) {
            s = cudnnSetConvolutionMathType(e->cd[dir], d->math[i]);
            if (s != CUDNN_STATUS_SUCCESS) return md_cuda_dnn_err(s, "math type");
            e->math_set[dir] = (int)d->math[i];
        }
        if (d->ws[i] == (size_t)-1) continue;
        size_t need = d->ws[i];
        void *ws = NULL;
        size_t wsb = 0;
        if (need) {
            if (a->workspace && a->workspace_bytes >= need) {
                ws = a->workspace;
                wsb = a->workspace_bytes;
            } else {
                struct md_cuda_scratch *sc = conv_ws_of(c);
                MD_TRY(md_cuda_scratch_get(dev, sc, need, "cuDNN workspace"));
                ws = sc->ptr;
                wsb = sc->bytes;
            }
        }
        if (dir == DIR_FWD)
            s = cudnnConvolutionForward(c->dnn, &alpha, e->xd, a->x, e->wd, a->wt, e->cd[dir],
                                        (cudnnConvolutionFwdAlgo_t)d->algo[i], ws, wsb, &beta, e->yd, a->y);
        else if (dir == DIR_BWD_DATA)
            s = cudnnConvolutionBackwardData(c->dnn, &alpha, e->wd, a->wt, e->yd, a->dy, e->cd[dir],
                                             (cudnnConvolutionBwdDataAlgo_t)d->algo[i], ws, wsb, &beta, e->xd, a->dx);
        else
            s = cudnnConvolutionBackwardFilter(c->dnn, &alpha, e->xd, a->x, e->yd, a->dy, e->cd[dir],
                                               (cudnnConvolutionBwdFilterAlgo_t)d->algo[i], ws, wsb, &beta, e->wd,
                                               a->dwt);
        if (s == CUDNN_STATUS_SUCCESS) {
            e->ran[dir][a->beta == 1.0f] = 1;
            return MD_OK;
        }
        if (s != CUDNN_STATUS_NOT_SUPPORTED && s != CUDNN_STATUS_BAD_PARAM) {
            md_status st = md_cuda_dnn_err(s, dir_names[dir]);
            return st;
        }
    }
    d->cur = 0;
    return md_errf(MD_ERR_UNSUPPORTED, "cuda %s: every cuDNN algorithm refused this shape (n=%d c=%d %dx%d k=%d %dx%d)",
                   dir_names[dir], a->n, a->c, a->h, a->w, a->k, a->r, a->s);
}

/* ---- Space-to-depth for stride-2 convolutions on few channels -----------
 * cuDNN runs a stride-2 stem on 3 channels far below the chip's rate
 * (ResNet-50's 7x7 stem at batch 128 on an H200, bf16: the forward 1.14 ms of
 * a step's device time, 22 TFLOP/s; zero-padding the channels to 8 gains
 * nothing). The same convolution over 2x2 blocks of pixels stacked into 4c
 * channels (rounded up to 8 in half types: 16 for RGB) is a 4x4 stride-1 one
 * on a 115 x 115 input: 0.60 ms there with the rearrangement (0.97 -> 0.68
 * in fp32; docs/cuda.md, "Space-to-depth"). So the forward of a
 * channels-last stride-2 convolution with at most 4 input channels and a
 * filter of at least 3 x 3 rearranges x and w (cuda_conv_s2d.cu) and runs
 * the stride-1 convolution: the same products, summed in another order. The
 * filter gradient measured slower that way (0.66 -> 0.81 ms in the step) and
 * keeps the direct form, as does the data gradient (a network's first layer
 * does not run it). MPSDIAG_CUDA_S2D=0 turns it off. */
static int s2d_shape(const struct md_conv2d_args *a, struct md_cuda_s2d *s)
{
    static int on = -1;
    if (on < 0) {
        const char *v = getenv("MPSDIAG_CUDA_S2D");
        on = !(v && strcmp(v, "0") == 0);
    }
    int g = a->groups > 0 ? a->groups : 1;
    if (!on || a->layout != MD_NHWC || g != 1 || a->stride_h != 2 || a->stride_w != 2 || a->dil_h > 1 ||
        a->dil_w > 1 || a->c > 4 || a->r < 3 || a->s < 3)
        return 0;
    s->c2 = 4 * a->c;
    if (a->dtype != MD_F32) s->c2 = (s->c2 + 7) / 8 * 8; /* tensor-core kernels want 8 half channels */
    s->r2 = (a->r + 1) / 2;
    s->s2 = (a->s + 1) / 2;
    s->h2 = a->p + s->r2 - 1;
    s->w2 = a->q + s->s2 - 1;
    return 1;
}

static md_status s2d_fwd(md_device *dev, const struct md_conv2d_args *a, const struct md_cuda_s2d *s)
{
    struct md_cuda_dev *c = md_cuda_impl(dev);
    size_t es = md_dtype_size(a->dtype);
    size_t nx2 = (size_t)a->n * s->h2 * s->w2 * s->c2, nw2 = (size_t)a->k * s->r2 * s->s2 * s->c2;
    size_t off = (nx2 * es + 255) / 256 * 256;
    MD_TRY(md_cuda_scratch_get(dev, &c->s2d_ws, off + nw2 * es, "space-to-depth copies for conv2d"));
    char *x2 = (char *)c->s2d_ws.ptr, *w2 = x2 + off;
    MD_TRY(md_cuda_s2d_input(dev, a, s, x2));
    MD_TRY(md_cuda_s2d_filter(dev, a, s, w2));
    struct md_conv2d_args b = *a;
    b.c = s->c2;
    b.h = s->h2;
    b.w = s->w2;
    b.r = s->r2;
    b.s = s->s2;
    b.stride_h = b.stride_w = 1;
    b.pad_h = b.pad_w = 0;
    b.dil_h = b.dil_w = 1;
    b.x = x2;
    b.wt = w2;
    return run(dev, &b, DIR_FWD);
}

md_status md_cuda_conv2d_fwd(md_device *dev, const struct md_conv2d_args *a)
{
    struct md_cuda_s2d s;
    if (s2d_shape(a, &s)) return s2d_fwd(dev, a, &s);
    return run(dev, a, DIR_FWD);
}
md_status md_cuda_conv2d_bwd_data(md_device *dev, const struct md_conv2d_args *a)
{
    md_status st = run(dev, a, DIR_BWD_DATA);
    md_status j = md_cuda_conv_side_join(dev);
    return st != MD_OK ? st : j;
}

/* ---- The filter gradient beside the data gradient ------------------------
 * A convolution's two gradients read the same dy and write different
 * buffers, so nothing orders them but the stream. When the layer says the
 * data gradient follows (data_grad_follows), the filter gradient goes to a
 * second stream forked from the device stream and the data gradient's call
 * joins it back: the two cuDNN kernels share the GPU where one alone leaves
 * multiprocessors idle (a deep layer's few tiles, each kernel's last wave).
 * In a captured graph the fork and the join are two edges. Only a shape and
 * beta that have run before go there (the plans and algorithms are chosen on
 * the device stream); the cuDNN handle is bound to the side stream for that
 * call, with a workspace of its own. Off by default: measured within 1%
 * either way on ResNet steps (docs/cuda.md); MPSDIAG_CUDA_CONV_OVERLAP=all
 * (or a most n p q) turns it on. */
md_status md_cuda_conv_side_join(md_device *dev)
{
    struct md_cuda_dev *c = md_cuda_impl(dev);
    if (!c->conv_side_pending) return MD_OK;
    c->conv_side_pending = 0;
    MD_CU_TRY(cudaStreamWaitEvent(c->stream, c->conv_join, 0), "cudaStreamWaitEvent (filter gradient join)");
    return MD_OK;
}

static md_status bwd_filter_beside(md_device *dev, const struct md_conv2d_args *a)
{
    struct md_cuda_dev *c = md_cuda_impl(dev);
    MD_CU_TRY(cudaEventRecord(c->conv_fork, c->stream), "cudaEventRecord (filter gradient fork)");
    MD_CU_TRY(cudaStreamWaitEvent(c->conv_side, c->conv_fork, 0), "cudaStreamWaitEvent (filter gradient fork)");
    cudnnStatus_t ds = cudnnSetStream(c->dnn, c->conv_side);
    if (ds != CUDNN_STATUS_SUCCESS) return md_cuda_dnn_err(ds, "cudnnSetStream (filter gradient stream)");
    c->conv_on_side = 1;
    dev->conv_beside++;
    md_status st = run(dev, a, DIR_BWD_FILTER);
    c->conv_on_side = 0;
    ds = cudnnSetStream(c->dnn, c->stream);
    /* joined even after an error: a capture must not end with the side stream forked */
    cudaError_t e = cudaEventRecord(c->conv_join, c->conv_side);
    if (e == cudaSuccess) c->conv_side_pending = 1;
    if (st != MD_OK) return st;
    if (ds != CUDNN_STATUS_SUCCESS) return md_cuda_dnn_err(ds, "cudnnSetStream (device stream)");
    return e == cudaSuccess ? MD_OK : md_cuda_err(e, "cudaEventRecord (filter gradient join)");
}
/* cuDNN's half-precision filter gradient is slow for 1-2 input channels (the
 * first layer on grey images: 6x the fp32 time on an H100 with cuDNN 9.14;
 * with 3 channels the half path is still faster), so such a case runs in fp32
 * on converted copies; the result is rounded to the half type once. */
static md_status bwd_filter_via_f32(md_device *dev, const struct md_conv2d_args *a)
{
    struct md_cuda_dev *c = md_cuda_impl(dev);
    int g = a->groups > 0 ? a->groups : 1;
    size_t nx = (size_t)a->n * a->c * a->h * a->w, ny = (size_t)a->n * a->k * a->p * a->q;
    size_t nw = (size_t)a->k * (a->c / g) * a->r * a->s;
    MD_TRY(md_cuda_scratch_get(dev, &c->aux_ws, (nx + ny + 2 * nw) * sizeof(float), "fp32 copies for conv2d_bwd_filter"));
    float *x = (float *)c->aux_ws.ptr, *dy = x + nx, *dw = dy + ny, *dw_old = dw + nw;
    struct md_cast_args cx = {nx, a->dtype, MD_F32, a->x, x}, cy = {ny, a->dtype, MD_F32, a->dy, dy};
    MD_TRY(md_cuda_cast(dev, &cx));
    MD_TRY(md_cuda_cast(dev, &cy));
    struct md_conv2d_args f = *a;
    f.dtype = MD_F32;
    f.x = x;
    f.dy = dy;
    f.dwt = dw;
    f.beta = 0.0f;
    MD_TRY(run(dev, &f, DIR_BWD_FILTER));
    struct md_ew_args e;
    memset(&e, 0, sizeof e);
    if (a->beta != 0.0f) { /* dw = result + beta * dw, in fp32, rounded once */
        struct md_cast_args cw = {nw, a->dtype, MD_F32, a->dwt, dw_old};
        MD_TRY(md_cuda_cast(dev, &cw));
        e.op = MD_EW_AXPBY;
        e.n = nw;
        e.dtype = MD_F32;
        e.alpha = 1.0f;
        e.beta = a->beta;
        e.a = dw;
        e.b = dw_old;
        e.y = dw;
        MD_TRY(md_cuda_ew(dev, &e));
    }
    struct md_cast_args cb = {nw, MD_F32, a->dtype, dw, a->dwt};
    return md_cuda_cast(dev, &cb);
}

md_status md_cuda_conv2d_bwd_filter(md_device *dev, const struct md_conv2d_args *a)
{
    int g = a->groups > 0 ? a->groups : 1;
    if (a->dtype != MD_F32 && a->c / g <= 2 && g == 1) return bwd_filter_via_f32(dev, a);
    struct md_cuda_dev *c = md_cuda_impl(dev);
    if (a->data_grad_follows && (long long)a->n * a->p * a->q <= c->conv_overlap && !c->conv_side_pending) {
        struct md_cuda_conv_entry *e = NULL;
        MD_TRY(get_entry(dev, a, &e));
        if (e->ran[DIR_BWD_FILTER][a->beta == 1.0f]) return bwd_filter_beside(dev, a);
    }
    return run(dev, a, DIR_BWD_FILTER);
}
