/* cpu_conv_small.h - convolution kernels of the CPU backend for few input
 * values per output (C*R*S < 16: first layers on 1-3 channel images, 1x1
 * with few channels), forward and backward-filter, fp32, one group, NCHW or
 * NHWC activations with the backend's weight layouts (cpu_conv_small.c). */
#ifndef MD_CPU_CONV_SMALL_H
#define MD_CPU_CONV_SMALL_H

#include "backend/cpu/cpu_conv_direct.h"

/* Whether the small-channel kernels take this convolution: C*R*S < 16 and a
 * build whose compiler has vector extensions (GCC, Clang); on the shape only. */
int md_cpu_small_ok(const struct md_dconv *g);

/* y = conv(x, w) + beta*y; w is (K, C, R, S) for NCHW, (K, R, S, C) for NHWC. */
md_status md_cpu_small_fwd(const struct md_dconv *g, int nhwc, const float *x, const float *w, float *y, float beta);
/* dw = conv_filter_grad(x, dy) + beta*dw, dw in w's layout. */
md_status md_cpu_small_filter(const struct md_dconv *g, int nhwc, const float *x, const float *dy, float *dw,
                              float beta);

/* Which kernels run: "AVX2" (x86-64 with AVX2 and FMA, unless the direct
 * kernels are off: MPSDIAG_CPU_DIRECT=0 or md_cpu_direct_set(0)), else
 * "portable" (the compiler's 4-float vectors); NULL when not built. */
const char *md_cpu_small_isa(void);

#endif
