/* cuda_conv.cu - 2-D convolutions (forward, backward data, backward filter)
 * through cuDNN's convolution API.
 *
 * One cache entry per shape (sizes, layout, dtype, TF32) holds the
 * descriptors and, per direction, the algorithms chosen: by cuDNN's
 * heuristics (cudnnGet*Algorithm_v7) by default, by measurement
 * (cudnnFind*) when MPSDIAG_CUDNN_AUTOTUNE=1 (what --compile-mode
 * max-autotune sets). The workspace comes from our allocator, so it is
 * counted in the memory statistics. NHWC uses cuDNN's NHWC filter format,
 * (K, R, S, C/g), which is exactly our NHWC filter layout.
 */
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

struct md_cuda_conv_entry {
    struct conv_key key;
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd[3]; /* one per direction: see math_set */
    struct dir_choice dir[3]; /* fwd, bwd data, bwd filter */
    /* The math type last set on cd[dir]. Each direction has its own
     * descriptor: toggling one descriptor's math type between directions made
     * cuDNN 9's legacy API rebuild its plan on every call (a 1x1 stride-2
     * backward-data took 3.3 ms instead of 0.03 ms inside a ResNet step). */
    int math_set[3];
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

/* Runs one direction, moving to the next candidate when cuDNN refuses one. */
static md_status run(md_device *dev, const struct md_conv2d_args *a, int dir)
{
    struct md_cuda_dev *c = md_cuda_impl(dev);
    struct md_cuda_conv_entry *e = NULL;
    MD_TRY(get_entry(dev, a, &e));
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
                MD_TRY(md_cuda_scratch_get(dev, &c->conv_ws, need, "cuDNN workspace"));
                ws = c->conv_ws.ptr;
                wsb = c->conv_ws.bytes;
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
        if (s == CUDNN_STATUS_SUCCESS) return MD_OK;
        if (s != CUDNN_STATUS_NOT_SUPPORTED && s != CUDNN_STATUS_BAD_PARAM) {
            md_status st = md_cuda_dnn_err(s, dir_names[dir]);
            return st;
        }
    }
    d->cur = 0;
    return md_errf(MD_ERR_UNSUPPORTED, "cuda %s: every cuDNN algorithm refused this shape (n=%d c=%d %dx%d k=%d %dx%d)",
                   dir_names[dir], a->n, a->c, a->h, a->w, a->k, a->r, a->s);
}

md_status md_cuda_conv2d_fwd(md_device *dev, const struct md_conv2d_args *a) { return run(dev, a, DIR_FWD); }
md_status md_cuda_conv2d_bwd_data(md_device *dev, const struct md_conv2d_args *a) { return run(dev, a, DIR_BWD_DATA); }
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
    return run(dev, a, DIR_BWD_FILTER);
}
