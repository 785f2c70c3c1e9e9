/* cuda_attn_mma.cuh - the register-resident attention kernels
 * (cuda_attn_mma.cu): fp16/bf16, 32 < head_dim <= 64 with head_dim a
 * multiple of 8, 16-byte aligned rows and strides, no dropout. */
#ifndef MD_CUDA_ATTN_MMA_CUH
#define MD_CUDA_ATTN_MMA_CUH

#include "cuda_attn.cuh"

/* 1 when the kernels take the call (bwd: the gradients' buffers too). */
int md_cuda_attn_mma_covers(const struct md_attn_args *a, int bwd);
/* o and lse from q, k, v. */
md_status md_cuda_attn_mma_fwd(md_device *dev, const struct md_attn_args *a, const attn_p *p);
/* dq, dk, dv (those not NULL); D: (batch*heads, tq) row sums dO_i . o_i. */
md_status md_cuda_attn_mma_bwd(md_device *dev, const struct md_attn_args *a, const attn_p *p, const float *D);

#endif
