/* cuda_norm.cu - batch norm (with fused ReLU): statistics and backward sums
 * through the per-channel reductions of cuda_chred.cuh, then one
 * element-wise pass. */
#include <math.h>

#include "cuda_chred.cuh"
#include "cuda_ln.cuh"

/* ---------------------------------------------------------------------------
 * Batch norm
 * ------------------------------------------------------------------------- */

/* Per-channel statistics area "st" (4c floats): mean, invstd, and the affine
 * folded in, scale = gamma * invstd and shift = beta - mean * scale, so the
 * apply pass is one multiply-add per element. */
/* One channel's statistics from its mean and (biased) variance over m
 * values: the area st, the saved ones and the running ones. */
__device__ __forceinline__ void bn_store(int ch, int c, float mean, float var, float m, float eps, float momentum,
                                         const float *gamma, const float *beta, float *st, float *save_mean,
                                         float *save_invstd, float *run_mean, float *run_var)
{
    float invstd = 1.0f / sqrtf(var + eps);
    float sc = (gamma ? gamma[ch] : 1.0f) * invstd;
    st[ch] = mean;
    st[c + ch] = invstd;
    st[2 * c + ch] = sc;
    st[3 * c + ch] = (beta ? beta[ch] : 0.0f) - mean * sc;
    if (save_mean) save_mean[ch] = mean;
    if (save_invstd) save_invstd[ch] = invstd;
    if (run_mean) run_mean[ch] = (1.0f - momentum) * run_mean[ch] + momentum * mean;
    if (run_var) {
        float unbiased = m > 1.0f ? var * (m / (m - 1.0f)) : var;
        run_var[ch] = (1.0f - momentum) * run_var[ch] + momentum * unbiased;
    }
}

template <class T>
__global__ void k_bn_stats(const T *x, int c, int hw, int nhwc, long long m, int splits, const float *part, float eps,
                           float momentum, const float *gamma, const float *beta, float *st, float *save_mean,
                           float *save_invstd, float *run_mean, float *run_var)
{
    float s1, s2;
    int ch = fin_sums(part, c, splits, &s1, &s2);
    if (ch < 0) return;
    float shift = tof(x[nhwc ? (size_t)ch : (size_t)ch * hw]);
    float dm = s1 / (float)m;
    float var = fmaxf(s2 / (float)m - dm * dm, 0.0f);
    bn_store(ch, c, shift + dm, var, (float)m, eps, momentum, gamma, beta, st, save_mean, save_invstd, run_mean,
             run_var);
}

/* --sync-bn (kernels.h md_batchnorm_args.sync): the exchange area "ex"
 * (5c + 1 floats): [0, c) m * mean and [c] m (the first exchange: the
 * global count N and a first global mean mu0 = sum / N, the same on every
 * rank); this rank's mean [c+1, 2c+1) and M2 [2c+1, 3c+1); then the second
 * exchange [3c+1, 5c+1): m * (mean - mu0) and M2 + m * (mean - mu0)^2
 * (Chan's combination around mu0). The first mean carries fp32's rounding
 * of m * mean (far from 0 that is several ulps of the mean); the second
 * exchange's small deviations correct it: mean = mu0 + sum m d / N and
 * M2 = sum (M2 + m d^2) - (sum m d)^2 / N. Nothing cancels. */
template <class T>
__global__ void k_bn_sync_local(const T *x, int c, int hw, int nhwc, long long m, int splits, const float *part,
                                float *ex)
{
    float s1, s2;
    int ch = fin_sums(part, c, splits, &s1, &s2);
    if (ch < 0) return;
    float shift = tof(x[nhwc ? (size_t)ch : (size_t)ch * hw]);
    float dm = s1 / (float)m;
    float mean = shift + dm, m2 = fmaxf(s2 - dm * s1, 0.0f);
    ex[ch] = (float)m * mean;
    if (ch == 0) ex[c] = (float)m;
    ex[c + 1 + ch] = mean;
    ex[2 * c + 1 + ch] = m2;
}

__global__ void k_bn_sync_m2(int c, long long m, float *ex)
{
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    float d = ex[c + 1 + ch] - ex[ch] / ex[c];
    ex[3 * c + 1 + ch] = (float)m * d;
    ex[4 * c + 1 + ch] = ex[2 * c + 1 + ch] + (float)m * d * d;
}

/* k_bn_stats from the exchanged sums (count N = ex[c]). */
__global__ void k_bn_sync_final(int c, const float *ex, float eps, float momentum, const float *gamma,
                                const float *beta, float *st, float *save_mean, float *save_invstd, float *run_mean,
                                float *run_var)
{
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    float N = ex[c], corr = ex[3 * c + 1 + ch];
    float m2 = fmaxf(ex[4 * c + 1 + ch] - corr * corr / N, 0.0f);
    bn_store(ch, c, ex[ch] / N + corr / N, m2 / N, N, eps, momentum, gamma, beta, st, save_mean, save_invstd,
             run_mean, run_var);
}

/* The same area from the running statistics (inference). */
__global__ void k_bn_running(int c, const float *rm, const float *rv, float eps, const float *gamma,
                             const float *beta, float *st)
{
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    bn_store(ch, c, rm[ch], rv[ch], 0.0f, eps, 0.0f, gamma, beta, st, NULL, NULL, NULL, NULL);
}

/* y = act(x * scale + shift [+ res]) + obeta * y */
template <class T>
__global__ void k_bn_apply(size_t total, int c, int hw, int nhwc, const T *x, const T *res, T *y,
                           const float *scale, const float *shift, int relu, float obeta)
{
    GRID_STRIDE(i, total)
    {
        int ch = chan_of(i, c, hw, nhwc);
        float v = tof(x[i]) * scale[ch] + shift[ch];
        if (res) v += tof(res[i]);
        if (relu) v = fmaxf(v, 0.0f);
        if (obeta != 0.0f) v += obeta * tof(y[i]);
        y[i] = fromf<T>(v);
    }
}

/* V consecutive channels' coefficients of an aligned per-channel array. */
template <int V> __device__ __forceinline__ void load_ch(const float *p, int c0, float (&out)[V])
{
#pragma unroll
    for (int k = 0; k < V; k += 4) {
        float4 f = *(const float4 *)(p + c0 + k);
        out[k] = f.x;
        out[k + 1] = f.y;
        out[k + 2] = f.z;
        out[k + 3] = f.w;
    }
}

/* NHWC apply, V channels per thread; a thread's channel vector advances by the
 * grid stride modulo CV, so no division per element. */
template <class T>
__global__ void k_bn_apply_v(size_t nvec, int c, const T *x, const T *res, T *y, const float *scale,
                             const float *shift, int relu, float obeta)
{
    const int V = vw<T>::V;
    int CV = c / V;
    size_t v = (size_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    int cv = (int)(v % CV), inc = (int)(stride % CV), loaded = -1;
    float sc[V], sh[V];
    for (; v < nvec; v += stride) {
        uint4 u = ((const uint4 *)x)[v], o = u, yo = u, ur = u;
        if (obeta != 0.0f) yo = ((const uint4 *)y)[v];
        if (res) ur = ((const uint4 *)res)[v];
        const T *e = (const T *)&u, *ey = (const T *)&yo, *er = (const T *)&ur;
        T *oe = (T *)&o;
        if (cv != loaded) { /* usually once: the grid stride is a multiple of CV */
            load_ch<V>(scale, cv * V, sc);
            load_ch<V>(shift, cv * V, sh);
            loaded = cv;
        }
#pragma unroll
        for (int k = 0; k < V; k++) {
            float val = tof(e[k]) * sc[k] + sh[k];
            if (res) val += tof(er[k]);
            if (relu) val = fmaxf(val, 0.0f);
            if (obeta != 0.0f) val += obeta * tof(ey[k]);
            oe[k] = fromf<T>(val);
        }
        ((uint4 *)y)[v] = o;
        cv += inc;
        if (cv >= CV) cv -= CV;
    }
}

template <class T> static void bn_apply(md_device *dev, const struct md_batchnorm_args *a, const float *st)
{
    struct md_cuda_dev *cd = md_cuda_impl(dev);
    size_t total = (size_t)a->n * a->c * a->hw;
    const int V = vw<T>::V;
    int relu = a->act == MD_ACT_RELU;
    const T *res = (const T *)a->res;
    if (a->layout == MD_NHWC && a->c % V == 0 && aligned16(a->x) && aligned16(a->y) && aligned16(st) &&
        (!res || aligned16(res)))
        k_bn_apply_v<T><<<md_cu_blocks(dev, total / V), MD_THREADS, 0, cd->stream>>>(
            total / V, a->c, (const T *)a->x, res, (T *)a->y, st + 2 * a->c, st + 3 * a->c, relu, a->beta);
    else
        k_bn_apply<T><<<md_cu_blocks(dev, total), MD_THREADS, 0, cd->stream>>>(
            total, a->c, a->hw, a->layout == MD_NHWC, (const T *)a->x, res, (T *)a->y, st + 2 * a->c,
            st + 3 * a->c, relu, a->beta);
}

md_status md_cuda_batchnorm_fwd(md_device *dev, const struct md_batchnorm_args *a)
{
    struct md_cuda_dev *cd = md_cuda_impl(dev);
    if (a->act != MD_ACT_NONE && a->act != MD_ACT_RELU)
        return md_errf(MD_ERR_UNSUPPORTED, "cuda batchnorm_fwd: fused activation %d is not supported", a->act);
    if (a->pool) return md_errf(MD_ERR_UNSUPPORTED, "cuda batchnorm_fwd: a fused max pool is not supported");
    size_t total = (size_t)a->n * a->c * a->hw;
    if (!total) return MD_OK;
    int nhwc = a->layout == MD_NHWC;
    MD_CU_DISPATCH(a->dtype, "batchnorm_fwd", {
        if (!a->training) {
            MD_TRY(md_cuda_scratch_get(dev, &cd->red_ws, (size_t)4 * a->c * sizeof(float), "reduction scratch"));
            float *st = (float *)cd->red_ws.ptr;
            k_bn_running<<<(a->c + 127) / 128, 128, 0, cd->stream>>>(a->c, a->running_mean, a->running_var, a->eps,
                                                                      a->gamma, a->beta_p, st);
            bn_apply<T>(dev, a, st);
            return md_cuda_check_launch("batchnorm_fwd (inference)");
        }
        red_in in = {a->x, NULL, NULL, NULL, NULL, NULL, NULL, 0, NULL, 0.0f};
        float *part, *st;
        int splits;
        MD_TRY((chan_reduce<T, RED_STATS>(dev, in, a->n, a->c, a->hw, a->layout, (size_t)4 * a->c, &part, &st,
                                          &splits)));
        if (a->sync) { /* this rank's statistics, two exchanges, then the same apply */
            MD_TRY(md_cuda_scratch_get(dev, &cd->aux_ws, ((size_t)5 * a->c + 1) * sizeof(float),
                                       "batchnorm exchange"));
            float *ex = (float *)cd->aux_ws.ptr;
            long long m = (long long)a->n * a->hw;
            k_bn_sync_local<T><<<FIN_BLOCKS(a->c), 128, 0, cd->stream>>>((const T *)a->x, a->c, a->hw, nhwc, m,
                                                                         splits, part, ex);
            MD_TRY(md_cuda_check_launch("batchnorm_fwd (this rank's statistics)"));
            MD_TRY(md_cuda_sync_sum(dev, ex, (size_t)a->c + 1, a->sync));
            k_bn_sync_m2<<<(a->c + 127) / 128, 128, 0, cd->stream>>>(a->c, m, ex);
            MD_TRY(md_cuda_check_launch("batchnorm_fwd (deviations)"));
            MD_TRY(md_cuda_sync_sum(dev, ex + 3 * a->c + 1, (size_t)2 * a->c, a->sync));
            k_bn_sync_final<<<(a->c + 127) / 128, 128, 0, cd->stream>>>(
                a->c, ex, a->eps, a->momentum, a->gamma, a->beta_p, st, a->save_mean, a->save_invstd,
                a->running_mean, a->running_var);
            MD_TRY(md_cuda_check_launch("batchnorm_fwd (synchronised statistics)"));
            bn_apply<T>(dev, a, st);
            return md_cuda_check_launch("batchnorm_fwd");
        }
        k_bn_stats<T><<<FIN_BLOCKS(a->c), 128, 0, cd->stream>>>(
            (const T *)a->x, a->c, a->hw, nhwc, (long long)a->n * a->hw, splits, part, a->eps, a->momentum, a->gamma,
            a->beta_p, st, a->save_mean, a->save_invstd, a->running_mean, a->running_var);
        MD_TRY(md_cuda_check_launch("batchnorm_fwd (statistics)"));
        bn_apply<T>(dev, a, st);
        return md_cuda_check_launch("batchnorm_fwd");
    });
    return MD_OK;
}

/* Backward coefficients "co" (4c floats): A = gamma * invstd, s1m = sum(g)/m,
 * C = gamma * invstd^2 * sum(g * xhat)/m, mean; then
 *   training:  dx = A * (g - s1m) - C * (x - mean)
 *   inference: dx = A * g            (s1m = C = 0)
 * which is the reference's gamma*invstd/m * (m*g - sum(g) - xhat*sum(g*xhat)). */
__global__ void k_bn_bwd_sums(int c, int splits, const float *part, float m, int training, const float *mean,
                              const float *invstd, const float *gamma, float *co, float *dgamma, float *dbeta,
                              float beta)
{
    float s1, s2;
    int ch = fin_sums(part, c, splits, &s1, &s2);
    if (ch < 0) return;
    float inv = invstd[ch], A = (gamma ? gamma[ch] : 1.0f) * inv;
    co[ch] = A;
    co[c + ch] = training ? s1 / m : 0.0f;
    co[2 * c + ch] = training ? A * inv * (s2 / m) : 0.0f;
    co[3 * c + ch] = mean[ch];
    if (dbeta) dbeta[ch] = beta != 0.0f ? s1 + beta * dbeta[ch] : s1;
    if (dgamma) dgamma[ch] = beta != 0.0f ? s2 + beta * dgamma[ch] : s2;
}

/* --sync-bn backward: this rank's sums into ex (2c + 1: sum g, sum g*xhat,
 * m) and dgamma/dbeta (this rank's); after the exchange, k_bn_bwd_sync_co. */
__global__ void k_bn_bwd_sync_local(int c, int splits, const float *part, float m, float *ex, float *dgamma,
                                    float *dbeta, float beta)
{
    float s1, s2;
    int ch = fin_sums(part, c, splits, &s1, &s2);
    if (ch < 0) return;
    ex[ch] = s1;
    ex[c + ch] = s2;
    if (ch == 0) ex[2 * c] = m;
    if (dbeta) dbeta[ch] = beta != 0.0f ? s1 + beta * dbeta[ch] : s1;
    if (dgamma) dgamma[ch] = beta != 0.0f ? s2 + beta * dgamma[ch] : s2;
}

__global__ void k_bn_bwd_sync_co(int c, const float *ex, const float *mean, const float *invstd, const float *gamma,
                                 float *co)
{
    int ch = blockIdx.x * blockDim.x + threadIdx.x;
    if (ch >= c) return;
    float N = ex[2 * c], inv = invstd[ch], A = (gamma ? gamma[ch] : 1.0f) * inv;
    co[ch] = A;
    co[c + ch] = ex[ch] / N;
    co[2 * c + ch] = A * inv * (ex[c + ch] / N);
    co[3 * c + ch] = mean[ch];
}

template <class T>
__global__ void k_bn_bwd_dx(size_t total, int c, int hw, int nhwc, red_in in, T *dx, const float *co, float beta)
{
    GRID_STRIDE(i, total)
    {
        int ch = chan_of(i, c, hw, nhwc);
        float xv = tof(((const T *)in.x)[i]);
        float g = bn_masked_dy<T>(in, i, ch, (xv - in.mean[ch]) * in.invstd[ch]);
        float v = co[ch] * (g - co[c + ch]) - co[2 * c + ch] * (xv - co[3 * c + ch]);
        if (beta != 0.0f) v += beta * tof(dx[i]);
        dx[i] = fromf<T>(v);
    }
}

template <class T>
__global__ void k_bn_bwd_dx_v(size_t nvec, int c, red_in in, T *dx, const float *co, float beta)
{
    const int V = vw<T>::V;
    int CV = c / V;
    size_t v = (size_t)blockIdx.x * blockDim.x + threadIdx.x, stride = (size_t)gridDim.x * blockDim.x;
    int cv = (int)(v % CV), inc = (int)(stride % CV), loaded = -1;
    float A[V], S[V], C[V], M[V];
    for (; v < nvec; v += stride) {
        uint4 ux = ((const uint4 *)in.x)[v], ug = ((const uint4 *)in.dy)[v], uy = ug, ud = ug, o;
        if (in.relu) uy = ((const uint4 *)in.y)[v];
        if (beta != 0.0f) ud = ((const uint4 *)dx)[v];
        const T *ex = (const T *)&ux, *eg = (const T *)&ug, *ey = (const T *)&uy, *ed = (const T *)&ud;
        T *oe = (T *)&o;
        if (cv != loaded) { /* usually once: the grid stride is a multiple of CV */
            int c0 = cv * V;
            load_ch<V>(co, c0, A);
            load_ch<V>(co + c, c0, S);
            load_ch<V>(co + 2 * c, c0, C);
            load_ch<V>(co + 3 * c, c0, M);
            loaded = cv;
        }
#pragma unroll
        for (int k = 0; k < V; k++) {
            float g = tof(eg[k]);
            if (in.relu && tof(ey[k]) <= 0.0f) g = 0.0f;
            float val = A[k] * (g - S[k]) - C[k] * (tof(ex[k]) - M[k]);
            if (beta != 0.0f) val += beta * tof(ed[k]);
            oe[k] = fromf<T>(val);
        }
        ((uint4 *)dx)[v] = o;
        cv += inc;
        if (cv >= CV) cv -= CV;
    }
}

md_status md_cuda_batchnorm_bwd(md_device *dev, const struct md_batchnorm_args *a)
{
    struct md_cuda_dev *cd = md_cuda_impl(dev);
    if (a->act != MD_ACT_NONE && a->act != MD_ACT_RELU)
        return md_errf(MD_ERR_UNSUPPORTED, "cuda batchnorm_bwd: fused activation %d is not supported", a->act);
    if (a->pool) return md_errf(MD_ERR_UNSUPPORTED, "cuda batchnorm_bwd: a fused max pool is not supported");
    size_t total = (size_t)a->n * a->c * a->hw;
    if (!total) return MD_OK;
    int nhwc = a->layout == MD_NHWC, relu = a->act == MD_ACT_RELU;
    if (a->res && relu && !a->y)
        return md_errf(MD_ERR_USAGE, "cuda batchnorm_bwd: a residual with a ReLU needs the forward's output");
    int have_saved = a->training && a->save_mean && a->save_invstd;
    float *tmp = NULL; /* (4, c): the statistics area when the forward saved none; the exchange's with sync */
    md_status st = MD_OK;
    int sync = a->training && a->sync;
    if (sync && !have_saved)
        return md_errf(MD_ERR_USAGE, "cuda batchnorm_bwd: synchronised statistics need the forward's saved ones");
    if (sync) {
        MD_TRY(md_cuda_scratch_get(dev, &cd->aux_ws, ((size_t)2 * a->c + 1) * sizeof(float), "batchnorm exchange"));
        tmp = (float *)cd->aux_ws.ptr;
    } else if (!have_saved) { /* a scratch, not an allocation: a captured graph keeps pointing at it */
        MD_TRY(md_cuda_scratch_get(dev, &cd->aux_ws, (size_t)a->c * 4 * sizeof(float), "batchnorm statistics"));
        tmp = (float *)cd->aux_ws.ptr;
    }
    MD_CU_DISPATCH(a->dtype, "batchnorm_bwd", {
        const float *mean = a->save_mean, *invstd = a->save_invstd;
        float *part, *co;
        int splits;
        if (!a->training) {
            k_bn_running<<<(a->c + 127) / 128, 128, 0, cd->stream>>>(a->c, a->running_mean, a->running_var, a->eps,
                                                                      a->gamma, a->beta_p, tmp);
            mean = tmp;
            invstd = tmp + a->c;
        } else if (!have_saved) {
            red_in sin = {a->x, NULL, NULL, NULL, NULL, NULL, NULL, 0, NULL, 0.0f};
            st = chan_reduce<T, RED_STATS>(dev, sin, a->n, a->c, a->hw, a->layout, (size_t)4 * a->c, &part, &co,
                                           &splits);
            if (st != MD_OK) goto done;
            k_bn_stats<T><<<FIN_BLOCKS(a->c), 128, 0, cd->stream>>>(
                (const T *)a->x, a->c, a->hw, nhwc, (long long)a->n * a->hw, splits, part, a->eps, 0.0f, a->gamma,
                a->beta_p, tmp, NULL, NULL, NULL, NULL);
            mean = tmp;
            invstd = tmp + a->c;
        }
        red_in in = {a->x, a->y, a->dy, mean, invstd, a->gamma, a->beta_p, relu, a->dres, a->beta_res};
        st = chan_reduce<T, RED_BWD>(dev, in, a->n, a->c, a->hw, a->layout, (size_t)4 * a->c, &part, &co, &splits);
        in.dres = NULL;
        if (a->dres && a->beta_res == 0.0f) { /* the pass above left the masked dy there: one read, not two */
            in.dy = a->dres;
            in.relu = 0;
        }
        if (st != MD_OK) goto done;
        if (sync) { /* dx from every rank's sums; dgamma, dbeta this rank's */
            k_bn_bwd_sync_local<<<FIN_BLOCKS(a->c), 128, 0, cd->stream>>>(
                a->c, splits, part, (float)((double)a->n * a->hw), tmp, a->dgamma, a->dbeta, a->beta);
            st = md_cuda_check_launch("batchnorm_bwd (this rank's sums)");
            if (st == MD_OK) st = md_cuda_sync_sum(dev, tmp, (size_t)2 * a->c + 1, a->sync);
            if (st != MD_OK) goto done;
            k_bn_bwd_sync_co<<<(a->c + 127) / 128, 128, 0, cd->stream>>>(a->c, tmp, mean, invstd, a->gamma, co);
        } else
            k_bn_bwd_sums<<<FIN_BLOCKS(a->c), 128, 0, cd->stream>>>(a->c, splits, part,
                                                                       (float)((double)a->n * a->hw), a->training,
                                                                       mean, invstd, a->gamma, co, a->dgamma,
                                                                       a->dbeta, a->beta);
        const int V = vw<T>::V;
        if (a->dx && nhwc && a->c % V == 0 && aligned16(a->x) && aligned16(in.dy) && aligned16(a->dx) &&
            aligned16(co) && (!in.relu || (a->y && aligned16(a->y))))
            k_bn_bwd_dx_v<T><<<md_cu_blocks(dev, total / V), MD_THREADS, 0, cd->stream>>>(total / V, a->c, in,
                                                                                        (T *)a->dx, co, a->beta);
        else if (a->dx)
            k_bn_bwd_dx<T><<<md_cu_blocks(dev, total), MD_THREADS, 0, cd->stream>>>(
                total, a->c, a->hw, nhwc, in, (T *)a->dx, co, a->beta);
        st = md_cuda_check_launch("batchnorm_bwd");
    });
done:
    return st;
}

/* ---------------------------------------------------------------------------
 * Layer norm over the last dimension: a block per row (statistics by
 * block_sum, a fixed order), dgamma/dbeta a thread per column over the rows
 * in order (deterministic, no atomics). Even d up to 1024 goes to the
 * warp-per-row kernels of cuda_ln.cu.
 * ------------------------------------------------------------------------- */

#define LN_THREADS 256

template <class T>
__global__ void k_ln_fwd(int rows, int d, float eps, const T *x, T *y, const float *gamma, const float *betap,
                         float *mean, float *rstd, float beta)
{
    int r = blockIdx.x;
    if (r >= rows) return;
    const T *xr = x + (size_t)r * d;
    float s = 0.0f;
    for (int j = threadIdx.x; j < d; j += blockDim.x) s += tof(xr[j]);
    float mu = block_sum(s) / (float)d, v = 0.0f;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float t = tof(xr[j]) - mu;
        v += t * t;
    }
    float rs = rsqrtf(block_sum(v) / (float)d + eps);
    if (threadIdx.x == 0) {
        if (mean) mean[r] = mu;
        if (rstd) rstd[r] = rs;
    }
    T *yr = y + (size_t)r * d;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float o = (tof(xr[j]) - mu) * rs;
        if (gamma) o *= gamma[j];
        if (betap) o += betap[j];
        if (beta != 0.0f) o += beta * tof(yr[j]);
        yr[j] = fromf<T>(o);
    }
}

/* dx per row; the row's statistics (saved or recomputed) into st (2, rows) for k_ln_bwd_params */
template <class T>
__global__ void k_ln_bwd_dx(int rows, int d, float eps, const T *x, const T *dy, T *dx, const float *gamma,
                            const float *mean, const float *rstd, float *st, float beta)
{
    int r = blockIdx.x;
    if (r >= rows) return;
    const T *xr = x + (size_t)r * d, *gr = dy + (size_t)r * d;
    float mu, rs;
    if (mean && rstd) {
        mu = mean[r];
        rs = rstd[r];
    } else {
        float s = 0.0f;
        for (int j = threadIdx.x; j < d; j += blockDim.x) s += tof(xr[j]);
        mu = block_sum(s) / (float)d;
        float v = 0.0f;
        for (int j = threadIdx.x; j < d; j += blockDim.x) {
            float t = tof(xr[j]) - mu;
            v += t * t;
        }
        rs = rsqrtf(block_sum(v) / (float)d + eps);
    }
    if (threadIdx.x == 0) {
        st[r] = mu;
        st[rows + r] = rs;
    }
    if (!dx) return;
    float sg = 0.0f, sgx = 0.0f;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float g = tof(gr[j]) * (gamma ? gamma[j] : 1.0f);
        sg += g;
        sgx += g * (tof(xr[j]) - mu) * rs;
    }
    sg = block_sum(sg) / (float)d;
    sgx = block_sum(sgx) / (float)d;
    T *dr = dx + (size_t)r * d;
    for (int j = threadIdx.x; j < d; j += blockDim.x) {
        float g = tof(gr[j]) * (gamma ? gamma[j] : 1.0f);
        float v = rs * (g - sg - (tof(xr[j]) - mu) * rs * sgx);
        if (beta != 0.0f) v += beta * tof(dr[j]);
        dr[j] = fromf<T>(v);
    }
}

/* dgamma, dbeta in two deterministic stages (as the per-channel reductions of
 * cuda_chred.cuh): grid (ceil(d/32), S), block (32, 8): split sp adds rows
 * sp*8+ty, +S*8, ... of columns blockIdx.x*32+tx into part[(sp*d + j)*2 + {0,1}];
 * then k_ln_params_fin adds the S partials of each column in a fixed order.
 * (One thread per column over every row left most of the GPU idle: at 2,816
 * rows x 192 columns it took 0.64 ms of a 5.5 ms step.) */
template <class T>
__global__ void k_ln_bwd_params(int rows, int d, int splits, const T *x, const T *dy, const float *st, float *part)
{
    __shared__ float sg_s[8][33], sb_s[8][33];
    int j = blockIdx.x * 32 + threadIdx.x, sp = blockIdx.y;
    float sg = 0.0f, sb = 0.0f;
    if (j < d)
        for (int r = sp * 8 + threadIdx.y; r < rows; r += splits * 8) {
            size_t o = (size_t)r * d + j;
            float g = tof(dy[o]);
            sg += g * (tof(x[o]) - st[r]) * st[rows + r];
            sb += g;
        }
    sg_s[threadIdx.y][threadIdx.x] = sg;
    sb_s[threadIdx.y][threadIdx.x] = sb;
    __syncthreads();
    if (threadIdx.y == 0 && j < d) {
        float tg = 0.0f, tb = 0.0f;
        for (int y = 0; y < 8; y++) {
            tg += sg_s[y][threadIdx.x];
            tb += sb_s[y][threadIdx.x];
        }
        part[((size_t)sp * d + j) * 2] = tg;
        part[((size_t)sp * d + j) * 2 + 1] = tb;
    }
}

__global__ void k_ln_params_fin(int d, int splits, const float *part, float *dgamma, float *dbeta, float beta)
{
    float sg, sb;
    int j = fin_sums(part, d, splits, &sg, &sb);
    if (j < 0) return;
    if (dgamma) dgamma[j] = beta != 0.0f ? sg + beta * dgamma[j] : sg;
    if (dbeta) dbeta[j] = beta != 0.0f ? sb + beta * dbeta[j] : sb;
}

md_status md_cuda_layernorm_fwd(md_device *dev, const struct md_layernorm_args *a)
{
    if (a->rows <= 0 || a->d <= 0) return MD_OK;
    if (md_cuda_ln_w_covers(a, 0)) return md_cuda_ln_w_fwd(dev, a);
    MD_CU_DISPATCH(a->dtype, "layernorm_fwd", {
        k_ln_fwd<T><<<a->rows, LN_THREADS, 0, md_cuda_impl(dev)->stream>>>(
            a->rows, a->d, a->eps, (const T *)a->x, (T *)a->y, a->gamma, a->beta_p, a->mean, a->rstd, a->beta);
    });
    return md_cuda_check_launch("layernorm_fwd");
}

md_status md_cuda_layernorm_bwd(md_device *dev, const struct md_layernorm_args *a)
{
    struct md_cuda_dev *cd = md_cuda_impl(dev);
    if (a->rows <= 0 || a->d <= 0) return MD_OK;
    if (md_cuda_ln_w_covers(a, 1)) return md_cuda_ln_w_bwd(dev, a);
    MD_TRY(md_cuda_scratch_get(dev, &cd->aux_ws, (size_t)a->rows * 2 * sizeof(float), "layernorm statistics"));
    float *st = (float *)cd->aux_ws.ptr;
    MD_CU_DISPATCH(a->dtype, "layernorm_bwd", {
        k_ln_bwd_dx<T><<<a->rows, LN_THREADS, 0, cd->stream>>>(a->rows, a->d, a->eps, (const T *)a->x,
                                                               (const T *)a->dy, (T *)a->dx, a->gamma, a->mean,
                                                               a->rstd, st, a->beta);
        MD_TRY(md_cuda_check_launch("layernorm_bwd (dx)"));
        if (a->dgamma || a->dbeta) {
            int gx = (a->d + 31) / 32, sp = (cd->sm_count * 8 + gx - 1) / gx, maxs = (a->rows + 7) / 8;
            if (sp > maxs) sp = maxs;
            if (sp < 1) sp = 1;
            MD_TRY(md_cuda_scratch_get(dev, &cd->red_ws, (size_t)sp * a->d * 2 * sizeof(float),
                                       "layernorm parameter partials"));
            float *part = (float *)cd->red_ws.ptr;
            k_ln_bwd_params<T><<<dim3(gx, sp), dim3(32, 8), 0, cd->stream>>>(a->rows, a->d, sp, (const T *)a->x,
                                                                            (const T *)a->dy, st, part);
            MD_TRY(md_cuda_check_launch("layernorm_bwd (dgamma, dbeta partials)"));
            MD_TRY(md_cuda_ln_params_fin(dev, a, part, sp));
        }
    });
    return MD_OK;
}

md_status md_cuda_ln_params_fin(md_device *dev, const struct md_layernorm_args *a, const float *part, int splits)
{
    k_ln_params_fin<<<FIN_BLOCKS(a->d), 128, 0, md_cuda_impl(dev)->stream>>>(a->d, splits, part, a->dgamma, a->dbeta,
                                                                            a->beta);
    return md_cuda_check_launch("layernorm_bwd (dgamma, dbeta)");
}
