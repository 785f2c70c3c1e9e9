/* cuda_loss.cu - softmax cross-entropy with label smoothing. */
#include <math.h>

#include "cuda_device.cuh"

/* ---------------------------------------------------------------------------
 * Softmax cross-entropy: a block per sample writes its loss and hit into the
 * scratch and its gradient row; one block then adds the batch in order.
 * ------------------------------------------------------------------------- */

#define XENT_THREADS 128

template <class T>
__global__ void k_xent_rows(int classes, float smoothing, const T *logits, const int32_t *labels, float *row_loss,
                            float *row_hit, T *dlogits, float grad_scale)
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
                                                             a->grad_scale);
    });
    MD_TRY(md_cuda_check_launch("xent"));
    k_xent_sum<<<1, 1024, 0, cd->stream>>>(a->n, row_loss, row_hit, a->loss_sum, a->correct);
    return md_cuda_check_launch("xent (batch sum)");
}
