/* ref_kernels.c - the reference kernel table (filled as kernels land). */
#include "backend/ref/ref_kernels.h"

const struct md_kernels md_ref_kernels = {
    .gemm = 0,
};
