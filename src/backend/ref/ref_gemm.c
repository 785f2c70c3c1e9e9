/* ref_gemm.c - reference matrix products: plain loops, double accumulation
 * (ref_kernels.c states the conventions). */
#include "backend/ref/ref_internal.h"

/* ---- GEMM --------------------------------------------------------------------- */

md_status md_ref_gemm(md_device *dev, const struct md_gemm_args *a)
{
    (void)dev;
    MD_TRY(check_dtype("gemm", a->dtype));
    for (int bi = 0; bi < a->batch; bi++) {
        const void *A = (const char *)a->a + (size_t)(bi * a->stride_a) * md_dtype_size(a->dtype);
        const void *B = (const char *)a->b + (size_t)(bi * a->stride_b) * md_dtype_size(a->dtype);
        void *C = (char *)a->c + (size_t)(bi * a->stride_c) * md_dtype_size(a->dtype);
        for (int i = 0; i < a->m; i++)
            for (int j = 0; j < a->n; j++) {
                double acc = 0.0;
                for (int l = 0; l < a->k; l++) {
                    size_t ia = a->trans_a ? (size_t)l * a->lda + i : (size_t)i * a->lda + l;
                    size_t ib = a->trans_b ? (size_t)j * a->ldb + l : (size_t)l * a->ldb + j;
                    acc += ld(A, a->dtype, ia) * ld(B, a->dtype, ib);
                }
                st(C, a->dtype, (size_t)i * a->ldc + j, (double)a->alpha * acc, a->beta);
            }
    }
    return MD_OK;
}
