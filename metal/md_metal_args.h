/* md_metal_args.h - kernel parameter structs shared by the host (C and
 * Objective-C), the Metal shaders and the Linux simulation of the shaders.
 *
 * Each struct is passed by value into buffer(0) of its kernel (setBytes), so
 * the layout must be identical in C and MSL: 64-bit fields first, then 32-bit
 * ones, no pointers (buffers are bound separately at indices 1, 2, ...), no
 * bool. Optional buffers are always bound (a dummy when absent) and their
 * presence is a `has_*` flag here.
 */
#ifndef MD_METAL_ARGS_H
#define MD_METAL_ARGS_H

#if defined(__METAL_VERSION__) || defined(MD_METAL_SIM)
typedef int md_mi32;
typedef uint md_mu32;
typedef long md_mi64;
typedef ulong md_mu64;
#else
#include <stdint.h>
typedef int32_t md_mi32;
typedef uint32_t md_mu32;
typedef int64_t md_mi64;
typedef uint64_t md_mu64;
#endif

/* Storage types of float-like tensors; arithmetic is always fp32. */
#define MD_MTL_F32 0
#define MD_MTL_F16 1
#define MD_MTL_BF16 2
#define MD_MTL_U8 3

/* Tiled matrix product: threadgroup of MD_MTL_MM_THREADS threads computes a
 * MD_MTL_MM_BM x MD_MTL_MM_BN tile of C, stepping MD_MTL_MM_BK along k. */
#define MD_MTL_MM_BM 64
#define MD_MTL_MM_BN 64
#define MD_MTL_MM_BK 16
#define MD_MTL_MM_TX 16 /* threads along n */
#define MD_MTL_MM_TY 16 /* threads along m */
/* Threadgroup memory of the matrix kernels: the simdgroup epilogue's 64 x 64
 * fp32 tile (the scalar engine uses the first 8 KiB). */
#define MD_MTL_MM_TGMEM (MD_MTL_MM_BM * MD_MTL_MM_BN * 4)
/* Reductions: threads per threadgroup (a power of two). */
#define MD_MTL_RED_THREADS 256
/* Partial sums of the two-pass reduction (scratch floats). */
#define MD_MTL_RED_PARTIALS 256

/* gemm: buffers a, b, c. Batch index = threadgroup z. */
struct md_mtl_gemm_params {
    md_mi64 stride_a, stride_b, stride_c;
    md_mi32 m, n, k, lda, ldb, ldc, trans_a, trans_b;
    float alpha, beta;
};

/* conv2d fwd (x, w, y), bwd_data (dy, w, dx), bwd_filter (dy, x, dw).
 * Group = threadgroup z. cg = c / groups, kg = k / groups. */
struct md_mtl_conv_params {
    md_mi32 n, c, h, w, k, r, s, p, q;
    md_mi32 stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups, cg, kg;
    md_mi32 nhwc;
    float beta;
};

/* batchnorm: channel = threadgroup x for the per-channel kernels.
 * fwd: x, y, gamma, beta, running_mean, running_var, save_mean, save_invstd
 * bwd: x, y, dy, dx, gamma, beta, running_mean, running_var, save_mean,
 *      save_invstd, dgamma, dbeta
 * Absent optional buffers follow the reference (src/backend/ref): gamma 1,
 * beta 0, running/save statistics not written, dx/dgamma/dbeta not computed. */
struct md_mtl_bn_params {
    md_mi32 n, c, hw, nhwc, relu, training;
    md_mi32 has_gamma, has_beta, has_rmean, has_rvar, has_smean, has_sinv;
    md_mi32 has_y, has_dx, has_dgamma, has_dbeta;
    float eps, momentum, beta;
    float unbias; /* m / (m - 1) for the running variance (1 when m == 1) */
};

/* act fwd (x, y) / bwd (x, dy, dx) over n elements */
struct md_mtl_act_params {
    md_mu64 n;
    md_mi32 act;
    float alpha, beta;
};

/* pool2d fwd (x, y) / bwd (x, dy, dx) */
struct md_mtl_pool_params {
    md_mi32 kind, n, c, h, w, p, q, kh, kw, stride_h, stride_w, pad_h, pad_w;
    md_mi32 count_include_pad, nhwc;
    float beta;
};

/* gap fwd (x, y) / bwd (dy, dx); bias add (y, bias) / grad (dy, dbias) */
struct md_mtl_nchw_params {
    md_mi32 n, c, hw, nhwc;
    float beta;
};

/* dropout fwd (x, y, mask) / bwd (dy, mask, dx) */
struct md_mtl_dropout_params {
    md_mu64 n, seed, offset;
    md_mi32 has_mask;
    float p, scale, beta;
};

/* ew (a, b, y, scale) */
struct md_mtl_ew_params {
    md_mu64 n;
    md_mi32 op, has_scale;
    float alpha, beta;
};

/* reduce pass 1 (a, b, partials), pass 2 (partials, out) */
struct md_mtl_reduce_params {
    md_mu64 n;
    md_mi32 op, parts;
    float beta;
};

/* chslice (src, dst) */
struct md_mtl_chslice_params {
    md_mi32 n, hw, cc, src_c, src_off, dst_c, dst_off, nhwc;
    float beta;
};

/* xent (logits, labels, loss_sum, correct, dlogits); one threadgroup */
struct md_mtl_xent_params {
    md_mi32 n, classes, has_loss, has_correct, has_dlogits;
    float smoothing, grad_scale;
};

/* regress (pred, target, last, loss_sum, metrics, dpred); one threadgroup.
 * kind: 0 MSE, 1 MAE, 2 Huber, 3 financial (md_regress_kind's values). */
struct md_mtl_regress_params {
    md_mi64 last_ld;
    md_mi32 n, horizon, channels, kind, has_last, has_loss, has_metrics, has_dpred;
    float delta, lambda, grad_scale;
};

/* cast (src, dst), permute (src, dst) */
struct md_mtl_cast_params {
    md_mu64 n;
};
struct md_mtl_permute_params {
    md_mi32 n, c, h, w, to_nhwc;
};

/* optim (params, grads, m, v, params_half, scale) */
struct md_mtl_optim_params {
    md_mu64 n;
    md_mi32 kind, nesterov, first_step, has_m, has_v, has_half, half_dtype, has_scale;
    float lr, momentum, weight_decay, beta1, beta2, eps, grad_scale;
    float bc1, bc2; /* 1 - beta^t, computed on the host in double */
};

/* layernorm: one threadgroup per row.
 * fwd: x, y, gamma, beta, mean, rstd
 * bwd dx (per row): x, dy, dx, gamma, mean, rstd
 * bwd dgamma/dbeta (one thread per column, rows in order): x, dy, mean, rstd, dgamma, dbeta */
struct md_mtl_ln_params {
    md_mi32 rows, d, has_gamma, has_beta, has_mean, has_rstd, has_dx, has_dgamma, has_dbeta;
    float eps, beta;
};

/* softmax fwd (x, y) / bwd (y, dy, dx): one threadgroup per row */
struct md_mtl_softmax_params {
    md_mi32 rows, n, causal, tq;
    float scale, beta;
};

/* attention: element (b, h, t, e) of q at b*sq[0] + h*sq[1] + t*sq[2] + e.
 * fwd (q, k, v, o, lse): one threadgroup per query row;
 * bwd dq (q, k, v, o, lse, do, dq): one threadgroup per query row;
 * bwd dk/dv (q, k, v, o, lse, do, dk, dv): one threadgroup per key row.
 * Threadgroup memory: MD_MTL_ATTN_TGMEM floats (reduction scratch, a chunk of
 * weights, two rows of head_dim <= MD_MTL_ATTN_MAX_D). */
#define MD_MTL_ATTN_MAX_D 256
#define MD_MTL_ATTN_TGMEM (2 * MD_MTL_RED_THREADS + 2 * MD_MTL_ATTN_MAX_D)
struct md_mtl_attn_params {
    md_mi64 sq[3], sk[3], sv[3], so[3];
    md_mu64 seed, offset;
    md_mi32 batch, heads, tq, tk, d, causal, has_lse, has_dq, has_dk, has_dv, dropout;
    float scale, p, keep_scale, beta;
};

/* tiles fwd (x, y) / bwd (dy, dx): kernels.h's md_tiles_args; a thread per
 * element of y (fwd) or of dx (bwd: gathers from the element's tile). */
struct md_mtl_tiles_params {
    md_mi32 n, c, h, w, rows, cols, size, ld;
    float beta;
};

/* film fwd (x, cond, y), bwd dx (dy, cond, dx), bwd dcond (x, dy, dcond: a
 * thread per (sample, feature), the tokens in order). */
struct md_mtl_film_params {
    md_mi32 n, t, d;
    float beta, beta_cond;
};

/* per-feature scale: md_chscale (a, g, y: y = a * g + beta * y; fwd on x,
 * dx on dy), md_chscale_dg (x, dy, dg: a thread per feature, the rows in
 * order, + beta_g * dg). g and dg fp32. */
struct md_mtl_chscale_params {
    md_mi32 rows, d;
    float beta, beta_g;
};

#endif
