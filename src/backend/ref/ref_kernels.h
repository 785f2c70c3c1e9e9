/* ref_kernels.h - the plain reference kernels: simple loops, double
 * accumulation, no threads, no BLAS, never fast-math. Every backend (the
 * OpenBLAS CPU one included) is tested against this table. */
#ifndef MD_REF_KERNELS_H
#define MD_REF_KERNELS_H

#include "backend/kernels.h"

extern const struct md_kernels md_ref_kernels;

#endif
