/* cuda_loss.cu - softmax cross-entropy with label smoothing; regression losses. */
#include <math.h>

#include "cuda_device.cuh"

/* ---------------------------------------------------------------------------
 * Softmax cross-entropy: a block per sample writes its loss and hit into the
 * scratch and its gradient row; one block then adds the batch in order.
 * ------------------------------------------------------------------------- */

#define XENT_THREADS 128

template <class T>
__global__ void k_xent_rows(int classes, float smoothing, const T *logits, const int32_t *labels, float *row_loss,
                            float *row_hit, T *dlogits, float grad_scale, const float *grad_scale_dev)
{
    __shared__ float smax[32];
    __shared__ int sarg[32];
    int row = blockIdx.x, lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    const T *x = logits + (size_t)row * classes;
    /* max and the lowest index reaching it */
    float m = -INFINITY;
    int arg = classes;
    for (int j = threadIdx.x; j < classes; j += blockDim.x) {
        float v = tof(x[j]);
        if (v > m || (v == m && j < arg)) {
            m = v;
            arg = j;
        }
    }
    for (int o = 16; o > 0; o >>= 1) {
        float om = __shfl_xor_sync(0xffffffffu, m, o);
        int oa = __shfl_xor_sync(0xffffffffu, arg, o);
        if (om > m || (om == m && oa < arg)) {
            m = om;
            arg = oa;
        }
    }
    if (lane == 0) {
        smax[wid] = m;
        sarg[wid] = arg;
    }
    __syncthreads();
    m = lane < nw ? smax[lane] : -INFINITY;
    arg = lane < nw ? sarg[lane] : classes;
    for (int o = 16; o > 0; o >>= 1) {
        float om = __shfl_xor_sync(0xffffffffu, m, o);
        int oa = __shfl_xor_sync(0xffffffffu, arg, o);
        if (om > m || (om == m && oa < arg)) {
            m = om;
            arg = oa;
        }
    }
    /* every thread now has the row's max and argmax; a NaN row gives m = -inf
     * or NaN below, and the loss comes out NaN, which is what the caller checks */
    float se = 0.0f, sx = 0.0f;
    for (int j = threadIdx.x; j < classes; j += blockDim.x) {
        float v = tof(x[j]);
        se += expf(v - m);
        sx += v;
    }
    se = block_sum(se);
    sx = block_sum(sx);
    int label = labels[row];
    int ok = label >= 0 && label < classes;
    if (threadIdx.x == 0) {
        float xl = ok ? tof(x[label]) : NAN;
        float lse = logf(se) + m;
        row_loss[row] = lse - ((1.0f - smoothing) * xl + smoothing / (float)classes * sx);
        row_hit[row] = ok && arg == label ? 1.0f : 0.0f;
    }
    if (dlogits) {
        T *d = dlogits + (size_t)row * classes;
        float off = smoothing / (float)classes, inv = 1.0f / se;
        if (grad_scale_dev) grad_scale *= *grad_scale_dev; /* the loss scale of a captured fp16 step */
        for (int j = threadIdx.x; j < classes; j += blockDim.x) {
            float p = expf(tof(x[j]) - m) * inv;
            float t = off + (j == label ? 1.0f - smoothing : 0.0f);
            d[j] = fromf<T>(grad_scale * (p - t));
        }
    }
}

__global__ void k_xent_sum(int n, const float *row_loss, const float *row_hit, float *loss_sum, int32_t *correct)
{
    float s = 0.0f, h = 0.0f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        s += row_loss[i];
        h += row_hit[i];
    }
    s = block_sum(s);
    h = block_sum(h);
    if (threadIdx.x == 0) {
        if (loss_sum) loss_sum[0] += s;
        if (correct) correct[0] += (int32_t)(h + 0.5f);
    }
}

md_status md_cuda_xent(md_device *dev, const struct md_xent_args *a)
{
    struct md_cuda_dev *cd = md_cuda_impl(dev);
    if (a->n <= 0 || a->classes <= 0) return MD_OK;
    MD_TRY(md_cuda_scratch_get(dev, &cd->red_ws, (size_t)a->n * 2 * sizeof(float), "reduction scratch"));
    float *row_loss = (float *)cd->red_ws.ptr, *row_hit = row_loss + a->n;
    MD_CU_DISPATCH(a->dtype, "xent", {
        k_xent_rows<T><<<a->n, XENT_THREADS, 0, cd->stream>>>(a->classes, a->smoothing, (const T *)a->logits,
                                                             a->labels, row_loss, row_hit, (T *)a->dlogits,
                                                             a->grad_scale, a->grad_scale_dev);
    });
    MD_TRY(md_cuda_check_launch("xent"));
    k_xent_sum<<<1, 1024, 0, cd->stream>>>(a->n, row_loss, row_hit, a->loss_sum, a->correct);
    return md_cuda_check_launch("xent (batch sum)");
}

/* ---------------------------------------------------------------------------
 * Regression losses (kernels.h has the formulas): a block per sample writes
 * its partial {loss, sum |e|, sum e^2, hits} into the scratch and its
 * gradient; one block then adds the batch in sample order.
 * ------------------------------------------------------------------------- */

#define REGRESS_THREADS 128

template <class T>
__global__ void k_regress_rows(int horizon, int channels, int kind, float delta, float lambda, const T *pred,
                               const float *target, const float *last, long long last_ld, float *part, T *dpred,
                               float grad_scale)
{
    int row = blockIdx.x, per = horizon * channels;
    size_t base = (size_t)row * per;
    const float *x = last ? last + (size_t)row * last_ld : NULL;
    float loss = 0.0f, sae = 0.0f, sse = 0.0f, hits = 0.0f;
    for (int k = threadIdx.x; k < per; k += blockDim.x) {
        int c = k % channels;
        float p = tof(pred[base + k]), y = target[base + k], e = p - y, ae = fabsf(e), l, g;
        float dp = 0.0f, dt = 0.0f;
        if (x) {
            dp = p - x[c];
            dt = y - x[c];
            hits += ((dp > 0.0f) - (dp < 0.0f)) == ((dt > 0.0f) - (dt < 0.0f)) ? 1.0f : 0.0f;
        }
        if (kind == MD_REGRESS_MAE) {
            l = ae;
            g = (float)((e > 0.0f) - (e < 0.0f));
        } else if (kind == MD_REGRESS_HUBER) {
            if (ae <= delta) l = 0.5f * e * e, g = e;
            else l = delta * (ae - 0.5f * delta), g = e > 0.0f ? delta : -delta;
        } else {
            l = e * e;
            g = 2.0f * e;
            if (kind == MD_REGRESS_FINANCIAL && ((dp > 0.0f && dt < 0.0f) || (dp < 0.0f && dt > 0.0f))) {
                l -= lambda * dp * dt;
                g -= lambda * dt;
            }
        }
        loss += l;
        sae += ae;
        sse += e * e;
        if (dpred) dpred[base + k] = fromf<T>(grad_scale * g);
    }
    loss = block_sum(loss);
    sae = block_sum(sae);
    sse = block_sum(sse);
    hits = block_sum(hits);
    if (threadIdx.x == 0) {
        float *o = part + 4 * (size_t)row;
        o[0] = loss, o[1] = sae, o[2] = sse, o[3] = hits;
    }
}

__global__ void k_regress_sum(int n, const float *part, float *loss_sum, float *metrics, int has_last)
{
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        for (int k = 0; k < 4; k++) s[k] += part[4 * (size_t)i + k];
    for (int k = 0; k < 4; k++) s[k] = block_sum(s[k]);
    if (threadIdx.x == 0) {
        if (loss_sum) loss_sum[0] += s[0];
        if (metrics) {
            metrics[0] += s[1];
            metrics[1] += s[2];
            if (has_last) metrics[2] += s[3];
        }
    }
}

md_status md_cuda_regress(md_device *dev, const struct md_regress_args *a)
{
    struct md_cuda_dev *cd = md_cuda_impl(dev);
    MD_TRY(md_regress_args_check("cuda", a));
    if (a->n <= 0 || a->horizon <= 0 || a->channels <= 0) return MD_OK;
    MD_TRY(md_cuda_scratch_get(dev, &cd->red_ws, (size_t)a->n * 4 * sizeof(float), "reduction scratch"));
    float *part = (float *)cd->red_ws.ptr;
    MD_CU_DISPATCH(a->dtype, "regress", {
        k_regress_rows<T><<<a->n, REGRESS_THREADS, 0, cd->stream>>>(
            a->horizon, a->channels, (int)a->kind, a->delta, a->lambda, (const T *)a->pred, a->target, a->last,
            a->last_ld, part, (T *)a->dpred, a->grad_scale);
    });
    MD_TRY(md_cuda_check_launch("regress"));
    k_regress_sum<<<1, 1024, 0, cd->stream>>>(a->n, part, a->loss_sum, a->metrics, a->last != NULL);
    return md_cuda_check_launch("regress (batch sum)");
}
