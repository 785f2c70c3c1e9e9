/* ref_kernels.c - the reference kernel table (the kernels are filed by op
 * family in ref_<family>.c): plain loops over the contract
 * of kernels.h, double accumulation, one thread, no BLAS. Every backend is
 * tested against these; they are written to be obviously right, not fast.
 *
 * Conventions beyond kernels.h (other backends follow them too):
 *   - `beta` applies to every float-like output the args name a beta for
 *     (out = result + beta * out; the old value is not read when beta == 0).
 *     Forward outputs of act, pool, gap, BN and dropout honour it as well.
 *   - A max-pooling window that lies entirely in the padding yields 0 and
 *     passes no gradient (PyTorch forbids such windows); likewise an average
 *     window with no valid element and count_include_pad == 0.
 *   - BN: gamma/beta_p NULL mean 1/0 (no affine); running stats NULL are not
 *     updated; dx, dgamma or dbeta NULL are not computed. Backward with
 *     training == 0 differentiates the inference form (running statistics).
 *   - Dropout backward recomputes the mask from (seed, offset) when mask is NULL.
 */
#include "backend/ref/ref_internal.h"

const struct md_kernels md_ref_kernels = {
    .gemm = md_ref_gemm,
    .conv2d_fwd = md_ref_conv2d_fwd,
    .conv2d_bwd_data = md_ref_conv2d_bwd_data,
    .conv2d_bwd_filter = md_ref_conv2d_bwd_filter,
    .batchnorm_fwd = md_ref_batchnorm_fwd,
    .batchnorm_bwd = md_ref_batchnorm_bwd,
    .act_fwd = md_ref_act_fwd,
    .act_bwd = md_ref_act_bwd,
    .pool2d_fwd = md_ref_pool2d_fwd,
    .pool2d_bwd = md_ref_pool2d_bwd,
    .gap_fwd = md_ref_gap_fwd,
    .gap_bwd = md_ref_gap_bwd,
    .bias_add = md_ref_bias_add,
    .bias_grad = md_ref_bias_grad,
    .dropout_fwd = md_ref_dropout_fwd,
    .dropout_bwd = md_ref_dropout_bwd,
    .ew = md_ref_ew,
    .reduce = md_ref_reduce,
    .chslice = md_ref_chslice,
    .xent = md_ref_xent,
    .cast = md_ref_cast,
    .permute = md_ref_permute,
    .optim = md_ref_optim,
    .layernorm_fwd = md_ref_layernorm_fwd,
    .layernorm_bwd = md_ref_layernorm_bwd,
    .softmax_fwd = md_ref_softmax_fwd,
    .softmax_bwd = md_ref_softmax_bwd,
    .attn_fwd = md_ref_attn_fwd,
    .attn_bwd = md_ref_attn_bwd,
    .regress = md_ref_regress,
    .tiles_fwd = md_ref_tiles_fwd,
    .tiles_bwd = md_ref_tiles_bwd,
    .film_fwd = md_ref_film_fwd,
    .film_bwd = md_ref_film_bwd,
    .chscale_fwd = md_ref_chscale_fwd,
    .chscale_bwd = md_ref_chscale_bwd,
};
