/* cuda_attn.cuh - what the attention kernels of cuda_attn.cu (SIMT) and
 * cuda_attn_tc.cu (tensor cores) share: the kernels' argument block, strided
 * addressing, and the dropout keep mask (one counter per (batch*head, query,
 * key), as the reference draws it, so every path drops the same weights). */
#ifndef MD_CUDA_ATTN_CUH
#define MD_CUDA_ATTN_CUH

#include "core/rng.h"
#include "cuda_device.cuh"

/* Everything the kernels need, by value. Strides resolved (md_attn_strides);
 * scale is the softmax scale; keep_scale = 1 / (1 - p). */
struct attn_p {
    long long sq[3], sk[3], sv[3], so[3];
    int heads, tq, tk, d, causal, dropout;
    float scale, p, keep_scale, beta;
    uint64_t seed, offset;
    const uint64_t *offset_dev;
};

/* Element offset of token t of head bh (= batch * heads + head). */
__device__ __forceinline__ long long att_at(const long long s[3], int bh, int heads, int t)
{
    return (long long)(bh / heads) * s[0] + (long long)(bh % heads) * s[1] + (long long)t * s[2];
}

/* The dropout factor of weight (query i, key j): 0 or keep_scale. */
__device__ __forceinline__ float att_keep(const attn_p &p, uint64_t off, int bh, int i, int j)
{
    if (!p.dropout) return 1.0f;
    uint64_t ctr = off + ((uint64_t)bh * p.tq + i) * p.tk + j;
    return md_rng_uniform(p.seed, ctr) < p.p ? 0.0f : p.keep_scale;
}

/* GEMM path (cuda_attn_gemm.cu): fp32/fp16/bf16 with every operand, batch
 * and head stride 16-byte aligned. Returns 1 when it can run the call. */
int md_cuda_attn_gemm_covers(const struct md_attn_args *a);
/* o and lse; scratch from md_cuda_dev.attn_ws. */
md_status md_cuda_attn_gemm_fwd(md_device *dev, const struct md_attn_args *a, const attn_p *p);
/* dq, dk, dv (those not NULL); D as for md_cuda_attn_tc_bwd. */
md_status md_cuda_attn_gemm_bwd(md_device *dev, const struct md_attn_args *a, const attn_p *p, const float *D);

/* Tensor-core path (cuda_attn_tc.cu): fp16/bf16, 32 < head_dim <= 128.
 * Returns 1 when it runs the call, 0 when the SIMT kernels must. */
int md_cuda_attn_tc_covers(const struct md_attn_args *a);
/* o and lse from q, k, v. */
md_status md_cuda_attn_tc_fwd(md_device *dev, const struct md_attn_args *a, const attn_p *p);
/* dq, dk, dv; D: (batch*heads, tq) row sums dO_i . o_i, already computed. */
md_status md_cuda_attn_tc_bwd(md_device *dev, const struct md_attn_args *a, const attn_p *p, const float *D);

#endif
