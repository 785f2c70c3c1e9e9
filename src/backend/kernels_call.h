/* kernels_call.h - how the rest of mpsdiag calls kernels.
 *
 * md_k_<op>(dev, &args) runs the device's kernel. If the device's table has
 * no entry (NULL = unsupported) and the CPU fallback is on (--fallback or
 * MPSDIAG_ENABLE_FALLBACK=1) and the device's memory is reachable from the
 * host (unified memory: Metal, CPU), the CPU kernel runs on the same buffers
 * and the fallback is counted for the report; otherwise the call fails with
 * MD_ERR_UNSUPPORTED naming the op, the device and the switch.
 */
#ifndef MD_KERNELS_CALL_H
#define MD_KERNELS_CALL_H

#include "backend/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

md_status md_k_gemm(md_device *dev, const struct md_gemm_args *a);
md_status md_k_conv2d_fwd(md_device *dev, const struct md_conv2d_args *a);
md_status md_k_conv2d_bwd_data(md_device *dev, const struct md_conv2d_args *a);
md_status md_k_conv2d_bwd_filter(md_device *dev, const struct md_conv2d_args *a);
md_status md_k_batchnorm_fwd(md_device *dev, const struct md_batchnorm_args *a);
md_status md_k_batchnorm_bwd(md_device *dev, const struct md_batchnorm_args *a);
md_status md_k_act_fwd(md_device *dev, const struct md_act_args *a);
md_status md_k_act_bwd(md_device *dev, const struct md_act_args *a);
md_status md_k_pool2d_fwd(md_device *dev, const struct md_pool2d_args *a);
md_status md_k_pool2d_bwd(md_device *dev, const struct md_pool2d_args *a);
md_status md_k_gap_fwd(md_device *dev, const struct md_gap_args *a);
md_status md_k_gap_bwd(md_device *dev, const struct md_gap_args *a);
md_status md_k_bias_add(md_device *dev, const struct md_bias_args *a);
md_status md_k_bias_grad(md_device *dev, const struct md_bias_args *a);
md_status md_k_dropout_fwd(md_device *dev, const struct md_dropout_args *a);
md_status md_k_dropout_bwd(md_device *dev, const struct md_dropout_args *a);
md_status md_k_ew(md_device *dev, const struct md_ew_args *a);
md_status md_k_reduce(md_device *dev, const struct md_reduce_args *a);
md_status md_k_chslice(md_device *dev, const struct md_chslice_args *a);
md_status md_k_xent(md_device *dev, const struct md_xent_args *a);
md_status md_k_cast(md_device *dev, const struct md_cast_args *a);
md_status md_k_permute(md_device *dev, const struct md_permute_args *a);
md_status md_k_optim(md_device *dev, const struct md_optim_args *a);
md_status md_k_layernorm_fwd(md_device *dev, const struct md_layernorm_args *a);
md_status md_k_layernorm_bwd(md_device *dev, const struct md_layernorm_args *a);
md_status md_k_softmax_fwd(md_device *dev, const struct md_softmax_args *a);
md_status md_k_softmax_bwd(md_device *dev, const struct md_softmax_args *a);
md_status md_k_attn_fwd(md_device *dev, const struct md_attn_args *a);
md_status md_k_attn_bwd(md_device *dev, const struct md_attn_args *a);
md_status md_k_regress(md_device *dev, const struct md_regress_args *a);
md_status md_k_tiles_fwd(md_device *dev, const struct md_tiles_args *a);
md_status md_k_tiles_bwd(md_device *dev, const struct md_tiles_args *a);
md_status md_k_film_fwd(md_device *dev, const struct md_film_args *a);
md_status md_k_film_bwd(md_device *dev, const struct md_film_args *a);
md_status md_k_chscale_fwd(md_device *dev, const struct md_chscale_args *a);
md_status md_k_chscale_bwd(md_device *dev, const struct md_chscale_args *a);

#ifdef __cplusplus
}
#endif
#endif
