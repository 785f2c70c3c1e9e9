/* cuda_ln.cuh - layer norm with a warp per row (cuda_ln.cu): even d up to
 * 1024, rows 8-byte aligned. */
#ifndef MD_CUDA_LN_CUH
#define MD_CUDA_LN_CUH

#include "cuda_internal.h"

/* 1 when the warp-per-row kernels take the call (bwd: dy and dx too). */
int md_cuda_ln_w_covers(const struct md_layernorm_args *a, int bwd);
md_status md_cuda_ln_w_fwd(md_device *dev, const struct md_layernorm_args *a);
md_status md_cuda_ln_w_bwd(md_device *dev, const struct md_layernorm_args *a);
/* cuda_norm.cu: dgamma, dbeta (+ beta * old) from splits partials part[(s * d + j) * 2 + {0, 1}]. */
md_status md_cuda_ln_params_fin(md_device *dev, const struct md_layernorm_args *a, const float *part, int splits);

#endif
