/* cuda_blas.cu - row-major (batched, strided) GEMM through cuBLAS.
 *
 * cuBLAS is column-major: a row-major (m, n) matrix is its (n, m) transpose
 * in column-major, so C = op(A) op(B) is computed as C^T = op(B)^T op(A)^T,
 * i.e. the operands swap places and m/n swap, with the same leading
 * dimensions. fp32 runs on the TF32 tensor cores when allowed (--no-tf32
 * keeps full fp32); fp16/bf16 accumulate in fp32 (alpha/beta are fp32).
 */
#include "cuda_internal.h"

md_status md_cuda_gemm(md_device *dev, const struct md_gemm_args *a)
{
    struct md_cuda_dev *c = md_cuda_impl(dev);
    cudaDataType_t t;
    cublasComputeType_t ct = CUBLAS_COMPUTE_32F;
    switch (a->dtype) {
    case MD_F32:
        t = CUDA_R_32F;
        ct = c->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
        break;
    case MD_F16: t = CUDA_R_16F; break;
    case MD_BF16: t = CUDA_R_16BF; break;
    default:
        return md_errf(MD_ERR_UNSUPPORTED, "cuda gemm: dtype %s is not supported", md_dtype_name(a->dtype));
    }
    if (a->m <= 0 || a->n <= 0 || a->batch <= 0) return MD_OK;
    float alpha = a->alpha, beta = a->beta;
    cublasOperation_t opa = a->trans_b ? CUBLAS_OP_T : CUBLAS_OP_N; /* first cuBLAS operand: B */
    cublasOperation_t opb = a->trans_a ? CUBLAS_OP_T : CUBLAS_OP_N; /* second: A */
    int k = a->k > 0 ? a->k : 0; /* k = 0: cuBLAS computes C = beta * C */
    cublasStatus_t s;
    if (a->batch == 1) {
        s = cublasGemmEx(c->blas, opa, opb, a->n, a->m, k, &alpha, a->b, t, a->ldb, a->a, t, a->lda, &beta, a->c, t,
                         a->ldc, ct, CUBLAS_GEMM_DEFAULT);
    } else {
        s = cublasGemmStridedBatchedEx(c->blas, opa, opb, a->n, a->m, k, &alpha, a->b, t, a->ldb, a->stride_b, a->a,
                                       t, a->lda, a->stride_a, &beta, a->c, t, a->ldc, a->stride_c, a->batch, ct,
                                       CUBLAS_GEMM_DEFAULT);
    }
    if (s != CUBLAS_STATUS_SUCCESS) {
        md_status st = md_cuda_blas_err(s, "gemm");
        md_err_prefix("gemm m=%d n=%d k=%d batch=%d %s", a->m, a->n, a->k, a->batch, md_dtype_name(a->dtype));
        return st;
    }
    return MD_OK;
}
