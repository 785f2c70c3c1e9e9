/* gemm.metal - (batched) matrix products on the tiled engine of
 * md_metal_common.h. Grid: (ceil(N/BN), ceil(M/BM), batch) threadgroups of
 * TX x TY. SG selects the engine: 0 the scalar tiled one, 1 simdgroup
 * matrices. */
#include "md_metal_common.h"

/* ---- gemm -------------------------------------------------------------------- */
template <int DT> struct md_mtl_gemm_op {
    typedef typename md_dt<DT>::S S;
    device const S *A;
    device const S *B;
    device S *C;
    int M, N, K, lda, ldb, ldc, ta, tb;
    float alpha, beta;
    float a(int m, int k) const { return md_dt<DT>::ld(ta ? A[k * lda + m] : A[m * lda + k]); }
    float b(int k, int n) const { return md_dt<DT>::ld(tb ? B[n * ldb + k] : B[k * ldb + n]); }
    void store(int m, int n, float v) const { md_mtl_put<DT>(C + m * ldc + n, alpha * v, beta); }
};

template <int DT, int SG>
[[kernel]] void md_mtl_gemm(MD_KARGS, constant md_mtl_gemm_params &p [[buffer(0)]],
                            device const typename md_dt<DT>::S *a [[buffer(1)]],
                            device const typename md_dt<DT>::S *b [[buffer(2)]],
                            device typename md_dt<DT>::S *c [[buffer(3)]])
{
    md_mtl_gemm_op<DT> op;
    op.A = a + p.stride_a * long(tgid.z);
    op.B = b + p.stride_b * long(tgid.z);
    op.C = c + p.stride_c * long(tgid.z);
    op.M = p.m; op.N = p.n; op.K = p.k;
    op.lda = p.lda; op.ldb = p.ldb; op.ldc = p.ldc;
    op.ta = p.trans_a; op.tb = p.trans_b;
    op.alpha = p.alpha; op.beta = p.beta;
    md_mtl_mm<SG>::run(op, tg, lid, tgid);
}

MD_INSTANTIATE("md_gemm_f32", md_mtl_gemm<MD_MTL_F32, 0>)
MD_INSTANTIATE("md_gemm_f16", md_mtl_gemm<MD_MTL_F16, 0>)
MD_INSTANTIATE("md_gemm_bf16", md_mtl_gemm<MD_MTL_BF16, 0>)
/* The simdgroup-matrix variants: same names with "_sg" (the host picks them
 * on GPUs that have simdgroup matrices). */
#if MD_METAL_SIMDGROUP_MM
MD_INSTANTIATE("md_gemm_f32_sg", md_mtl_gemm<MD_MTL_F32, 1>)
MD_INSTANTIATE("md_gemm_f16_sg", md_mtl_gemm<MD_MTL_F16, 1>)
MD_INSTANTIATE("md_gemm_bf16_sg", md_mtl_gemm<MD_MTL_BF16, 1>)
#endif
