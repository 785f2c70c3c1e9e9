/* kernels.h - the kernel table every backend fills, and its argument structs.
 *
 * Contract (all backends, all ops):
 *   - Pointers are device pointers of the device the kernel runs on (host
 *     pointers for the CPU and reference backends). Shapes are plain ints.
 *   - Float-like tensors (x, y, w, dx, dy, dw, a, b, logits) have the args'
 *     `dtype` (F32, F16 or BF16). Statistics, BN parameters, biases, the loss,
 *     optimizer state and master weights are always fp32. Arithmetic
 *     accumulates in fp32 (the reference: in double).
 *   - `beta` on an output: out = result + beta * out (beta 0: overwrite, and
 *     the old contents are never read, so NaN garbage is harmless; beta 1:
 *     accumulate, used where a tensor feeds several layers).
 *   - Row-major GEMM. Convolution filters follow the activation layout
 *     (NCHW: (K, C/g, R, S); NHWC: (K, R, S, C/g)).
 *   - Kernels are asynchronous with respect to the host on GPU backends
 *     (enqueued on the device's stream); md_dev_sync waits.
 *   - A NULL entry means "not supported by this backend" (see backend.h for
 *     the CPU fallback). A kernel that is present but cannot handle a given
 *     case (say a dtype) returns MD_ERR_UNSUPPORTED with a message.
 *   - Every kernel has a plain reference in src/backend/ref/ (loops, double
 *     accumulation, no threads, no BLAS) that tests compare backends against.
 *
 * Valid C11 and CUDA C++ (no designated initialisers, no _Atomic here).
 */
#ifndef MD_KERNELS_H
#define MD_KERNELS_H

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "core/tensor.h"
#include "backend/act_math.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct md_device md_device;

/* ---- matrix product -------------------------------------------------------
 * For b in [0, batch): C_b = alpha * op(A_b) @ op(B_b) + beta * C_b, row-major,
 * op(A) is (m, k), op(B) is (k, n), C is (m, n); lda/ldb/ldc are row strides.
 * A_b = a + b * stride_a (elements), likewise B, C. */
struct md_gemm_args {
    int trans_a, trans_b;
    int m, n, k;
    float alpha, beta;
    const void *a; int lda; long long stride_a;
    const void *b; int ldb; long long stride_b;
    void *c; int ldc; long long stride_c;
    int batch;           /* >= 1 */
    md_dtype dtype;      /* of a, b and c */
};

/* ---- 2-D convolution ------------------------------------------------------
 * x: (n, c, h, w) activations, w: filter, y: (n, k, p, q) where
 *   p = (h + 2*pad_h - dil_h*(r-1) - 1) / stride_h + 1, likewise q.
 * fwd:        y  = conv(x, w)            + beta * y
 * bwd_data:   dx = conv_transpose(dy, w) + beta * dx
 * bwd_filter: dw = corr(x, dy)           + beta * dw
 * No bias here (bias_add / bias_grad). `algo_hint` lets a backend cache an
 * algorithm choice per call site (0 = none). */
struct md_conv2d_args {
    int n, c, h, w;
    int k, r, s;
    int p, q;
    int stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups;
    md_layout layout;
    md_dtype dtype;
    const void *x; const void *wt; void *y;
    void *dx; void *dwt; const void *dy;
    float beta;
    void *workspace; size_t workspace_bytes; /* optional scratch given by caller */
    int algo_hint;
    /* conv2d_bwd_filter: the data gradient of the same dy follows as the next
     * call, so a device may run the two side by side (CUDA does) */
    int data_grad_follows;
};

/* ---- batch normalisation (per channel over n*h*w) ---------------------------
 * training: batch mean/var (biased var for normalising, unbiased for the
 *   running update: running = (1-momentum)*running + momentum*batch, as
 *   PyTorch); save_mean/save_invstd (c) are written for backward.
 * inference: running statistics.
 * act: fused activation after the affine (MD_ACT_NONE or MD_ACT_RELU); with
 *   RELU, backward needs y to mask dy.
 * res (optional; only on devices whose batchnorm_residual is set, backend.h
 *   md_dev_batchnorm_residual: ref, CPU, CUDA): a residual summand of y's shape, added after
 *   the affine and before the activation, y = act(bn(x) + res) (a ResNet
 *   block's "bn2 + shortcut, relu" in one pass). Backward then needs y (not
 *   res) and writes g = act'(y) * dy, the residual's gradient, to dres
 *   (= or +=beta_res) besides dx; y is required with res and RELU.
 * pool (optional; only where md_dev_batchnorm_pool says so: CPU, fp32, with
 *   the ReLU and no residual): 2 runs a 2x2 stride-2 max
 *   pool after the ReLU in the same passes. x is (n, c, h, w) (hw = h * w,
 *   both even); y and dy are the pooled (n, c, h/2, w/2); the full-size output
 *   is never written. Backward recomputes each window from x (its first
 *   maximal element takes dy, as the pool kernel routes it, masked by the
 *   ReLU), so it needs x, not y. The forward does not accumulate (beta 0).
 *   pool_x, pool_arg (optional, pooled sizes; the CPU reads them
 *   channels-last): a training forward writes each window's routing there,
 *   x at the element that takes dy and that element's index (0-3 in
 *   row-major order, 4 where the ReLU masks it), and the backward of the same
 *   batch reads it instead of recomputing it; the results are the same.
 *   conv (backward, optional; only where md_dev_batchnorm_pool_conv says so:
 *   the CPU, channels-last fp32, with pool_x and pool_arg): the one-group
 *   convolution without bias that computed x from conv->x (its input, which
 *   needs no gradient); instead of dx (NULL), backward writes that
 *   convolution's filter gradient, conv->dwt = dL/dW (+ conv->beta * dwt).
 *   dL/dx is linear in the routed dy and in x, and x = W * patches, so the
 *   gradient comes from pooled-size sums and the Gram matrix of the input's
 *   patches (C*R*S <= MD_BN_CONV_MAX_CRS) without the full-size dx.
 * bwd (training statistics): dx (= or +=beta), dgamma, dbeta (beta_param
 *   accumulate flag applies to dgamma/dbeta too).
 * sync (training only; NULL: statistics of this rank's batch): synchronised
 *   batch norm (--sync-bn), the statistics of the batches of every rank.
 *   Forward: with this rank's count m_r, mean mu_r and M2_r = m_r * var_r,
 *   all-reduce {m_r * mu_r (c), m_r} -> count N and a first mean mu0; then
 *   {m_r * d_r (c), M2_r + m_r * d_r^2 (c)} with d_r = mu_r - mu0 -> the
 *   mean mu = mu0 + sum m_r d_r / N (correcting fp32's rounding of the first
 *   sums) and N * var = sum (M2_r + m_r d_r^2) - (sum m_r d_r)^2 / N (Chan's
 *   combination: no cancellation, unlike sum x^2 - N mu^2). Running
 *   statistics from mu and var * N / (N - 1). Backward: all-reduce
 *   {sum dy (c), sum dy*xhat (c), m_r}; dx from the global sums over N;
 *   dgamma/dbeta stay this rank's sums (the gradient all-reduce adds them). */
struct md_bn_sync {
    int nranks;
    /* sums n floats of host memory over the ranks, in place (every rank
     * calls it as often, with the same n); NULL with one rank */
    md_status (*allreduce)(void *ctx, float *buf, size_t n);
    void *ctx;
};

struct md_batchnorm_args {
    int n, c, hw;
    md_layout layout;
    md_dtype dtype;
    int training;
    float eps, momentum;
    int act;                        /* enum md_act */
    const void *x; void *y;
    const float *gamma, *beta_p;    /* (c) */
    float *running_mean, *running_var; /* (c) */
    float *save_mean, *save_invstd;    /* (c) */
    const void *dy; void *dx;
    float *dgamma, *dbeta;          /* (c) */
    float beta;                     /* accumulate factor for dx, dgamma, dbeta */
    const struct md_bn_sync *sync;  /* --sync-bn (above), or NULL */
    const void *res; void *dres;    /* the fused residual (above), or NULL */
    float beta_res;                 /* accumulate factor for dres */
    int pool, h, w;                 /* a fused max pool (above), or 0; x's height and width */
    float *pool_x;                  /* a fused pool's routing (above), or NULL: (n, h/2, w/2, c) each */
    unsigned char *pool_arg;
    const struct md_conv2d_args *conv; /* backward: the filter gradient instead of dx (above), or NULL */
};

#define MD_BN_CONV_MAX_CRS 32 /* md_batchnorm_args.conv: input channels x filter height x width */

/* ---- element-wise activations ---------------------------------------------- */
/* enum md_act and the fp32 formulas: backend/act_math.h */

/* fwd: y = act(x); bwd: dx = act'(x) * dy + beta * dx (x is the fwd input). */
struct md_act_args {
    int act;          /* enum md_act */
    float alpha;
    size_t n;
    md_dtype dtype;
    const void *x; void *y;
    const void *dy; void *dx;
    float beta;
};

/* ---- pooling --------------------------------------------------------------- */
enum md_pool { MD_POOL_MAX = 0, MD_POOL_AVG };

/* x (n, c, h, w) -> y (n, c, p, q). Average pooling divides by kh*kw when
 * count_include_pad, else by the number of valid elements (PyTorch default is
 * count_include_pad = 1). Max pooling backward routes dy to the first
 * maximal element of each window (recomputed from x), as PyTorch. */
struct md_pool2d_args {
    int kind;          /* enum md_pool */
    int n, c, h, w, p, q;
    int kh, kw, stride_h, stride_w, pad_h, pad_w;
    int count_include_pad;
    md_layout layout;
    md_dtype dtype;
    const void *x; const void *y; void *y_out;
    const void *dy; void *dx;
    float beta;
};

/* Global average pooling: x (n, c, hw) -> y (n, c); bwd spreads dy / hw. */
struct md_gap_args {
    int n, c, hw;
    md_layout layout;
    md_dtype dtype;
    const void *x; void *y;
    const void *dy; void *dx;
    float beta;
};

/* ---- bias ------------------------------------------------------------------
 * add:  y[n, c, hw] += bias[c]  (in place; y of `dtype`, bias fp32)
 * grad: dbias[c] = sum_{n,hw} dy + beta * dbias  (dbias fp32) */
struct md_bias_args {
    int n, c, hw;
    md_layout layout;
    md_dtype dtype;
    void *y; const float *bias;
    const void *dy; float *dbias;
    float beta;
};

/* ---- dropout ---------------------------------------------------------------
 * Element i is dropped when md_rng_uniform(seed, offset + i) < p; kept ones
 * are scaled by 1/(1-p). fwd writes mask (1 kept, 0 dropped) when mask != NULL;
 * bwd: dx = dy * mask / (1-p) + beta * dx. Same mask on every backend.
 * offset_dev (fwd, optional): device memory whose value is added to offset
 * when the kernel runs, so a captured step draws a new mask each replay. */
struct md_dropout_args {
    size_t n;
    float p;
    uint64_t seed, offset;
    const uint64_t *offset_dev;
    md_dtype dtype;
    const void *x; void *y; uint8_t *mask;
    const void *dy; void *dx;
    float beta;
};

/* ---- element-wise arithmetic over n contiguous elements ------------------------ */
enum md_ew_op {
    MD_EW_AXPBY = 0, /* y = alpha*s*a + beta*b ; s = *scale_dev if non-NULL else 1 */
    MD_EW_MUL,       /* y = a * b */
    MD_EW_FILL,      /* y = alpha */
    MD_EW_COPY,      /* y = a */
    MD_EW_COUNT
};
struct md_ew_args {
    int op;                 /* enum md_ew_op */
    size_t n;
    md_dtype dtype;         /* of a, b, y */
    float alpha, beta;
    const float *scale_dev; /* optional device scalar multiplying alpha (weighted_add) */
    const void *a; const void *b; void *y;
};

/* ---- reductions into one fp32 device scalar ------------------------------------
 * SUM: sum a; SUMSQ: sum a^2; DOT: sum a*b. out = result + beta * out.
 * A non-finite element makes the result non-finite (used as the inf/NaN check). */
enum md_reduce_op { MD_RED_SUM = 0, MD_RED_SUMSQ, MD_RED_DOT };
struct md_reduce_args {
    int op;
    size_t n;
    md_dtype dtype;
    const void *a; const void *b;
    float *out;
    float beta;
};

/* ---- channel slices (concat forward and backward) -------------------------------
 * dst[:, dst_off : dst_off+cc] = src[:, src_off : src_off+cc] + beta * dst[...]
 * with src having src_c channels and dst dst_c channels, both (n, ., hw). */
struct md_chslice_args {
    int n, hw, cc;
    int src_c, src_off, dst_c, dst_off;
    md_layout layout;
    md_dtype dtype;
    const void *src; void *dst;
    float beta;
};

/* ---- softmax cross-entropy, fused forward + backward -----------------------------
 * logits (n, classes), labels (n) int32 in [0, classes). Target distribution:
 * (1 - smoothing) one-hot + smoothing / classes (as PyTorch).
 * loss_sum (device fp32 scalar) += sum over the batch of per-sample loss
 *   (accumulates: zero it per epoch/step as wanted);
 * correct (device int32 scalar, optional) += number of argmax == label
 *   (ties: the lowest index, as torch.argmax);
 * dlogits (optional) = grad_scale * (softmax - target), of `dtype`
 *   (grad_scale is 1/n for a mean loss, times the loss scale; with
 *   grad_scale_dev, a device fp32 scalar, times *grad_scale_dev in fp32:
 *   the loss scale of a captured step, struct md_scale_ctl). */
struct md_xent_args {
    int n, classes;
    float smoothing;
    md_dtype dtype;
    const void *logits;
    const int32_t *labels;
    float *loss_sum;
    int32_t *correct;
    void *dlogits;
    float grad_scale;
    const float *grad_scale_dev;
};

/* ---- regression losses, fused forward + backward ---------------------------------
 * pred (compute dtype) and target (fp32), both (n, horizon, channels)
 * row-major; e = pred - target per element; with a "last observed value"
 * x = last[i * last_ld + c] of sample i, channel c (fp32, the forecast
 * origin), dp = pred - x and dt = target - x. Per-element loss:
 *   MSE        e^2                                   d/dpred 2e
 *   MAE        |e|                                   sign(e) (0 at 0)
 *   HUBER      e^2/2 if |e| <= delta, else delta(|e| - delta/2)   (PyTorch HuberLoss)
 *   FINANCIAL  e^2 + lambda * max(0, -dp * dt)       2e - lambda * dt where dp, dt have
 *                                                    opposite signs (tested by sign, not product)
 * (docs/regression.md has the reasoning; needs `last`).
 * loss_sum (device fp32 scalar) += sum of the per-element loss (accumulates;
 *   the mean loss is loss_sum / (n * horizon * channels));
 * metrics (device fp32[3], optional) += {sum |e|, sum e^2, directional hits},
 *   a hit being sign(dp) == sign(dt) (signs in -1, 0, 1); hits need `last`
 *   (metrics[2] is left alone without it);
 * dpred (optional) = grad_scale * dloss/dpred, of `dtype` (grad_scale is
 *   1 / (n * horizon * channels) for a mean loss, times the loss scale). */
typedef enum md_regress_kind {
    MD_REGRESS_MSE = 0,
    MD_REGRESS_MAE,
    MD_REGRESS_HUBER,
    MD_REGRESS_FINANCIAL,
} md_regress_kind;

struct md_regress_args {
    int n, horizon, channels;
    md_regress_kind kind;
    float delta;              /* HUBER: > 0 (1.0 as PyTorch's default) */
    float lambda;             /* FINANCIAL: >= 0 weight of the direction penalty */
    md_dtype dtype;
    const void *pred;         /* (n, horizon, channels) dtype */
    const float *target;      /* (n, horizon, channels) fp32 */
    const float *last;        /* (n, ., channels) fp32 with stride last_ld per sample, or NULL */
    long long last_ld;        /* elements between samples' last values */
    float *loss_sum;          /* (1) device fp32, accumulated; NULL = not wanted */
    float *metrics;           /* (3) device fp32, accumulated; NULL = not wanted */
    void *dpred;              /* (n, horizon, channels) dtype, or NULL */
    float grad_scale;
};

/* ---- dtype conversion ---------------------------------------------------------- */
struct md_cast_args {
    size_t n;
    md_dtype src_type, dst_type;
    const void *src; void *dst;
};

/* ---- NCHW <-> NHWC ------------------------------------------------------------- */
struct md_permute_args {
    int n, c, h, w;
    int to_nhwc;       /* 1: src NCHW -> dst NHWC; 0: src NHWC -> dst NCHW */
    md_dtype dtype;
    const void *src; void *dst;
};

/* ---- optimizer step over a flat fp32 parameter buffer ------------------------------
 * g = grads[i] * grad_scale (grad_scale folds 1/loss_scale and the clip
 *   factor; if grad_scale_dev is non-NULL it is multiplied in, so the step
 *   needs no host sync);
 * SGD:   g += wd*p; buf = momentum*buf + g (buf = g at step 1);
 *        p -= lr * (nesterov ? g + momentum*buf : buf)       (PyTorch SGD)
 * ADAMW: p *= 1 - lr*wd; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g^2;
 *        p -= lr * (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps)    (PyTorch AdamW)
 * step is t >= 1. When params_half is non-NULL the updated value is also
 * written there in half_dtype (mixed precision compute copy).
 *
 * ctl (optional, device memory): the values that change from step to step,
 * read when the kernel runs, so one captured step (a CUDA graph) can be
 * replayed for every step (PyTorch's "capturable" optimizers). With ctl the
 * kernel ignores lr, step, grad_scale and grad_scale_dev and uses
 *   lr = ctl->lr, t = ctl->step,
 *   grad_scale = g = ctl->grad_scale, times clip / (norm + 1e-6) when
 *     ctl->clip > 0 and norm = sqrt(ctl->grad_sumsq) * g exceeds it (in double),
 * and changes nothing (params, state, half copy) when ctl->loss_sum or
 * ctl->grad_sumsq is not finite. md_optim_ctl_resolve does this on the host.
 *
 * scaler (optional, with ctl; device memory): dynamic loss scaling decided on
 * the device (fp16). The kernel then uses grad_scale = 1 / scaler->scale (in
 * double, times the clip factor as above) and t = scaler->taken + 1 instead
 * of ctl->grad_scale and ctl->step. With scaler_update set (the step's last
 * call; n may be 0), once this call's update is done the kernel applies
 * md_scale_ctl_update with finite = loss_sum and grad_sumsq both finite. */
enum md_optim_kind { MD_OPT_SGD = 0, MD_OPT_ADAMW };
struct md_optim_ctl {
    long long step;     /* t >= 1 */
    double clip;        /* > 0: the largest global gradient norm */
    float lr;
    float grad_scale;   /* 1 / loss scale */
    float loss_sum;     /* written by the step's loss */
    float grad_sumsq;   /* written by the step: sum of squares of the (scaled) gradients */
};
/* The loss scaler's state in device memory (train/scaler.c's rule, applied by
 * the optimizer kernel so a captured fp16 step needs no host decision). */
struct md_scale_ctl {
    long long taken;        /* optimizer steps taken: the next one is t = taken + 1 */
    long long clean;        /* finite steps since the scale last changed */
    long long skipped;      /* steps skipped for non-finite gradients */
    float scale;            /* the loss scale (the loss gradient's seed reads it too) */
    int32_t growth_interval;/* clean steps before the scale doubles */
    int32_t gave_up;        /* 1: non-finite gradients at scale <= 1 (the host stops the run) */
    int32_t pad;
};
#ifdef __CUDACC__
#define MD_HOST_DEVICE __host__ __device__
#else
#define MD_HOST_DEVICE
#endif
/* After a step with (finite) or without finite loss and gradients, as
 * md_scaler_update: finite counts a clean step (and takes it), doubling the
 * scale after growth_interval of them up to 2^24; non-finite halves it, skips
 * the step and restarts the count, or at scale <= 1 sets gave_up and changes
 * nothing else. Every backend's optim kernel calls this one function. */
static inline MD_HOST_DEVICE void md_scale_ctl_update(struct md_scale_ctl *s, int finite)
{
    if (!finite) {
        if (s->scale <= 1.0f) {
            s->gave_up = 1;
            return;
        }
        s->skipped++;
        s->clean = 0;
        s->scale *= 0.5f;
        return;
    }
    s->taken++;
    if (++s->clean >= s->growth_interval) {
        s->clean = 0;
        if (s->scale < 16777216.0f) s->scale *= 2.0f;
    }
}
struct md_optim_args {
    int kind;
    size_t n;
    float lr, momentum, weight_decay, beta1, beta2, eps;
    int nesterov;
    long long step;
    float grad_scale;
    const float *grad_scale_dev;
    const struct md_optim_ctl *ctl;
    struct md_scale_ctl *scaler;  /* with ctl: the loss scale decided on the device */
    int scaler_update;            /* with scaler: apply its rule after this call */
    float *params; const float *grads;
    float *m, *v;                 /* SGD uses m as the momentum buffer */
    void *params_half; md_dtype half_dtype;
};

/* ---- layer normalisation over the last dimension ----------------------------------
 * x, y, dy, dx: (rows, d) row-major of `dtype`; statistics in fp32 (the
 * reference: double) whatever the storage type.
 * fwd: y = (x - mean) * rstd * gamma + beta_p  (+ beta * y), with the biased
 *   variance and rstd = 1 / sqrt(var + eps) (PyTorch's F.layer_norm);
 *   mean/rstd (rows) are written when non-NULL (for backward).
 * bwd: dx = rstd * (g - mean_d(g) - xhat * mean_d(g * xhat)) with g = dy * gamma,
 *   dgamma = sum_rows dy * xhat, dbeta = sum_rows dy; beta accumulates onto dx,
 *   dgamma and dbeta alike. mean/rstd are read when both are given (else
 *   recomputed from x).
 * gamma/beta_p (d) fp32, NULL: 1 / 0; NULL dx, dgamma or dbeta: not computed. */
struct md_layernorm_args {
    int rows, d;
    md_dtype dtype;
    float eps;
    const void *x; void *y;
    const float *gamma, *beta_p;   /* (d) */
    float *mean, *rstd;            /* (rows) */
    const void *dy; void *dx;
    float *dgamma, *dbeta;         /* (d) */
    float beta;
};

/* ---- softmax over the last dimension --------------------------------------------------
 * x, y, dy, dx: (rows, n) row-major of `dtype`.
 * fwd: y = softmax(scale * x) per row (max subtracted first), + beta * y.
 *   causal: rows are queries of (rows / tq) matrices of tq rows each; column j
 *   of row r is masked (weight 0) when j > r % tq (PyTorch's is_causal,
 *   top-left aligned; needs tq > 0).
 * bwd: dx = scale * y * (dy - sum_j dy_j y_j) + beta * dx, from the forward's y
 *   (masked entries have y = 0 and get dx = 0).
 * scale 0 means 1. */
struct md_softmax_args {
    int rows, n;
    int causal, tq;
    float scale;
    md_dtype dtype;
    const void *x; void *y;
    const void *dy; void *dx;
    float beta;
};

/* ---- fused scaled-dot-product attention ------------------------------------------------
 * q (batch, heads, tq, d), k and v (batch, heads, tk, d), o (batch, heads, tq, d), d =
 * head_dim, all of `dtype`, addressed through strides (elements) for batch,
 * head and token, the feature stride being 1: element (b, h, t, e) of q is
 *   q[b * sq[0] + h * sq[1] + t * sq[2] + e]
 * and likewise k (sk), v (sv), o (so). All-zero strides mean contiguous
 * (B, H, T, D). A fused QKV projection's (B, T, 3, H, D) output works in place:
 * q = qkv, k = qkv + H*D, v = qkv + 2*H*D, strides {T*3*H*D, D, 3*H*D}.
 * Gradients use the strides of their tensor: dq sq, dk sk, dv sv, d_o so.
 *   S = scale * q k^T (scale 0: 1/sqrt(d)), causal: S_ij = -inf for j > i
 *   (top-left aligned, as PyTorch's is_causal); P = softmax_j(S);
 *   lse_i = log sum_j exp(S_ij) (fp32, (batch, heads, tq), written by fwd
 *   for bwd); with dropout, weight (b, h, i, j) is dropped when
 *   md_rng_uniform(seed, offset + ((b*heads + h)*tq + i)*tk + j) < dropout_p and
 *   kept ones are scaled by 1/(1-p) (Pd); O = Pd V.
 * fwd: o = O (always overwritten: backward reads it), lse.
 * bwd: from q, k, v, o, lse and d_o: with D_i = d_o_i . o_i and
 *   dS = P * (dPd * mask/(1-p) - D), dPd = d_o v^T:
 *   dq = scale dS k, dk = scale dS^T q, dv = Pd^T d_o, each + beta * itself.
 *   NULL dq, dk or dv: not computed.
 * offset_dev (optional) is added to offset when the kernel runs (as dropout). */
struct md_attn_args {
    int batch, heads, tq, tk, d;
    long long sq[3], sk[3], sv[3], so[3];  /* batch, head, token strides; all 0: contiguous */
    int causal;
    float scale;
    float dropout_p;
    uint64_t seed, offset;
    const uint64_t *offset_dev;
    md_dtype dtype;
    const void *q, *k, *v; void *o;
    float *lse;                            /* (batch, heads, tq) */
    const void *d_o; void *dq, *dk, *dv;
    float beta;                            /* accumulate factor for dq, dk, dv */
    int path;                              /* CUDA: which kernels run (enum md_attn_path);
                                              MD_ATTN_AUTO (0) lets the backend choose */
};

/* CUDA attention implementations (docs/cuda.md). AUTO: the MPSDIAG_ATTN
 * environment variable when set, else GEMM for tq, tk <= MD_ATTN_GEMM_MAX_T
 * (and 16-byte aligned operands), else FLASH. GEMM: cuBLAS batched products
 * around a fused softmax kernel, the T x T scores in device scratch. FLASH:
 * the tensor-core kernels for fp16/bf16 with 32 < head_dim <= 128, the SIMT
 * kernels otherwise. SIMT: the SIMT kernels. A path that cannot take a call
 * (GEMM: misaligned operands) hands it on as AUTO would. Other backends
 * ignore the field. */
enum md_attn_path { MD_ATTN_AUTO = 0, MD_ATTN_GEMM, MD_ATTN_FLASH, MD_ATTN_SIMT };
#define MD_ATTN_GEMM_MAX_T 1024

/* ---- tiles: crop a grid of tiles and resize each (docs/tiles.md) ------------------
 * x (n, c, h, w) NCHW. Tile (i, j) of a rows x cols grid spans rows
 * [floor(i*h/rows), floor((i+1)*h/rows)) and columns [floor(j*w/cols),
 * floor((j+1)*w/cols)) (every tile non-empty: h >= rows, w >= cols), resized
 * bilinearly to size x size as torch.nn.functional.interpolate(mode=
 * "bilinear", align_corners=False, antialias=False): source coordinate
 * (o + 0.5) * len / size - 0.5, clamped below at 0.
 * y (n * ld, c, size, size): tile t = i*cols + j of sample b is item b*ld + t
 * (ld >= rows*cols: several images interleave their tiles per sample).
 * fwd: y = tiles + beta * y.
 * bwd: dx = (sum of what each tile's dy sends back) + beta * dx (the tiles
 * partition the image, so each element of dx belongs to one tile). */
struct md_tiles_args {
    int n, c, h, w;
    int rows, cols, size;
    int ld;                /* items of y per sample */
    md_dtype dtype;
    const void *x; void *y;
    const void *dy; void *dx;
    float beta;
};

/* ---- FiLM: feature-wise scale and shift -----------------------------------------
 * x (n, t, d), cond (n, 2d) = [gamma | beta_]: y = x * (1 + gamma) + beta_
 * (broadcast over the t tokens).
 * bwd: dx = dy * (1 + gamma) + beta * dx; dcond[:, :d] = sum_t dy * x,
 * dcond[:, d:] = sum_t dy, + beta_cond * dcond. dx or dcond NULL: not computed. */
struct md_film_args {
    int n, t, d;
    md_dtype dtype;
    const void *x, *cond; void *y;
    const void *dy; void *dx, *dcond;
    float beta, beta_cond;
};

/* ---- per-feature scale (LayerScale) ----------------------------------------------
 * x, y, dy, dx (rows, d) in dtype; g (d) fp32.
 * fwd: y = x * g + beta * y.
 * bwd: dx = dy * g + beta * dx (dx NULL: skipped);
 *      dg = sum over rows of dy * x + beta_g * dg (dg NULL: skipped; fp32, the
 *      summation order fixed for a backend and size). dx may be dy's buffer
 *      (dg is then taken first). */
struct md_chscale_args {
    int rows, d;
    md_dtype dtype;
    const void *x; const float *g; void *y;
    const void *dy; void *dx; float *dg;
    float beta, beta_g;
};

/* The table. Kernels return MD_OK or an error with a message. */
struct md_kernels {
    md_status (*gemm)(md_device *, const struct md_gemm_args *);
    md_status (*conv2d_fwd)(md_device *, const struct md_conv2d_args *);
    md_status (*conv2d_bwd_data)(md_device *, const struct md_conv2d_args *);
    md_status (*conv2d_bwd_filter)(md_device *, const struct md_conv2d_args *);
    md_status (*batchnorm_fwd)(md_device *, const struct md_batchnorm_args *);
    md_status (*batchnorm_bwd)(md_device *, const struct md_batchnorm_args *);
    md_status (*act_fwd)(md_device *, const struct md_act_args *);
    md_status (*act_bwd)(md_device *, const struct md_act_args *);
    md_status (*pool2d_fwd)(md_device *, const struct md_pool2d_args *);
    md_status (*pool2d_bwd)(md_device *, const struct md_pool2d_args *);
    md_status (*gap_fwd)(md_device *, const struct md_gap_args *);
    md_status (*gap_bwd)(md_device *, const struct md_gap_args *);
    md_status (*bias_add)(md_device *, const struct md_bias_args *);
    md_status (*bias_grad)(md_device *, const struct md_bias_args *);
    md_status (*dropout_fwd)(md_device *, const struct md_dropout_args *);
    md_status (*dropout_bwd)(md_device *, const struct md_dropout_args *);
    md_status (*ew)(md_device *, const struct md_ew_args *);
    md_status (*reduce)(md_device *, const struct md_reduce_args *);
    md_status (*chslice)(md_device *, const struct md_chslice_args *);
    md_status (*xent)(md_device *, const struct md_xent_args *);
    md_status (*cast)(md_device *, const struct md_cast_args *);
    md_status (*permute)(md_device *, const struct md_permute_args *);
    md_status (*optim)(md_device *, const struct md_optim_args *);
    md_status (*layernorm_fwd)(md_device *, const struct md_layernorm_args *);
    md_status (*layernorm_bwd)(md_device *, const struct md_layernorm_args *);
    md_status (*softmax_fwd)(md_device *, const struct md_softmax_args *);
    md_status (*softmax_bwd)(md_device *, const struct md_softmax_args *);
    md_status (*attn_fwd)(md_device *, const struct md_attn_args *);
    md_status (*attn_bwd)(md_device *, const struct md_attn_args *);
    md_status (*regress)(md_device *, const struct md_regress_args *);
    md_status (*tiles_fwd)(md_device *, const struct md_tiles_args *);
    md_status (*tiles_bwd)(md_device *, const struct md_tiles_args *);
    md_status (*film_fwd)(md_device *, const struct md_film_args *);
    md_status (*film_bwd)(md_device *, const struct md_film_args *);
    md_status (*chscale_fwd)(md_device *, const struct md_chscale_args *);
    md_status (*chscale_bwd)(md_device *, const struct md_chscale_args *);
};

/* Names of the table's entries, in order (for reports and fallback counts). */
#define MD_KERNEL_COUNT 36
extern const char *const md_kernel_names[MD_KERNEL_COUNT];

/* For backends whose kernels run when called (CPU, reference): *out = a with
 * ctl's values resolved into lr, step and grad_scale (ctl, scaler and
 * grad_scale_dev cleared). Returns 0 when the step must change nothing
 * (non-finite loss or gradients), 1 otherwise. Without ctl, *out = a and 1.
 * md_optim_ctl_after then applies the scaler's rule when a asks for it. */
int md_optim_ctl_resolve(const struct md_optim_args *a, struct md_optim_args *out);
void md_optim_ctl_after(const struct md_optim_args *a);
/* The start of such a backend's step: *a resolved from args (md_optim_ctl_resolve) and
 * checked (params_half's dtype, step >= 1: errors name `backend`). *run is 0 when the step
 * must change nothing (md_optim_ctl_after already applied), 1 when it runs. */
md_status md_optim_host_begin(const char *backend, const struct md_optim_args *args, struct md_optim_args *a,
                              int *run);
/* The loss gradient's multiplier for such backends (grad_scale x *grad_scale_dev). */
static inline float md_xent_grad_scale(const struct md_xent_args *a)
{
    return a->grad_scale_dev ? a->grad_scale * *a->grad_scale_dev : a->grad_scale;
}

/* Checks what every backend's regress kernel needs (a known kind, sizes >= 0,
 * delta > 0 for HUBER, `last` for FINANCIAL); MD_ERR_INTERNAL naming the
 * backend otherwise: these are the caller's bugs, not the user's. */
md_status md_regress_args_check(const char *backend, const struct md_regress_args *a);

/* The dropout offset for backends whose kernels run when called. */
static inline uint64_t md_dropout_offset(const struct md_dropout_args *a)
{
    return a->offset + (a->offset_dev ? *a->offset_dev : 0);
}

/* The dropout offset of attention for backends whose kernels run when called. */
static inline uint64_t md_attn_offset(const struct md_attn_args *a)
{
    return a->offset + (a->offset_dev ? *a->offset_dev : 0);
}

/* The strides of a (tensor of) attention args with zeros resolved to the
 * contiguous (B, H, T, D) layout: s[0] batch, s[1] head, s[2] token. */
static inline void md_attn_strides(const long long in[3], int heads, int t, int d, long long out[3])
{
    if (in[0] || in[1] || in[2]) {
        out[0] = in[0], out[1] = in[1], out[2] = in[2];
    } else {
        out[2] = d;
        out[1] = (long long)t * d;
        out[0] = (long long)heads * t * d;
    }
}

/* The attention scale: a->scale, or 1/sqrt(d) when 0. */
static inline float md_attn_scale(const struct md_attn_args *a)
{
    return a->scale != 0.0f ? a->scale : (float)(1.0 / sqrt((double)a->d));
}

/* Output size of a convolution or pooling window along one axis (<= 0: impossible). */
/* Edge k of `n` equal parts of `len` (docs/tiles.md): floor(k * len / n). */
static inline int md_tile_edge(int len, int n, int k) { return (int)((long long)k * len / n); }

static inline int md_conv_out(int in, int k, int stride, int pad, int dil)
{
    int span = in + 2 * pad - dil * (k - 1) - 1;
    return span < 0 || stride <= 0 ? 0 : span / stride + 1;
}

#ifdef __cplusplus
}
#endif
#endif
