/* cpu_conv_direct.h - direct AVX-512 / AVX2 convolution kernels of the CPU backend
 * (cpu_conv_direct.c): forward and backward-filter for one group, fp32, NCHW
 * or NHWC activations with the backend's weight layouts. */
#ifndef MD_CPU_CONV_DIRECT_H
#define MD_CPU_CONV_DIRECT_H

#include "backend/cpu/cpu_internal.h"

struct md_dconv {
    int n, c, h, w, k, r, s, p, q;
    int sh, sw, ph, pw, dh, dw;
};

/* A forward that is one phase of a strided backward-data (cpu_conv.c): its
 * NHWC output pixel (p, q) goes to (p*sh + a, q*sw + b) of an (n, h, w, k)
 * tensor, and its weights are read in place from the strided convolution's
 * (C, wrs, K) ones (this forward's C input and K output channels), its tap t
 * being their tap tap_of[t]. */
struct md_dphase { int sh, sw, a, b, h, w, wrs; const int *tap_of; };

/* Whether the direct kernels run: AVX-512F at run time, else AVX2 + FMA,
 * unless MPSDIAG_CPU_DIRECT=0 (none) or =avx2 (the AVX2 ones even where
 * AVX-512 is there), read once. md_cpu_direct_set overrides: 0 none, 1 the
 * best, 2 AVX2 (tests: the GEMM paths and the AVX2 kernels on an AVX-512
 * machine), -1 decides again from the environment. */
int md_cpu_direct_enabled(void);
void md_cpu_direct_set(int on);

/* Backward-filter pads the input and transposes dy for a wave of images at
 * a time, within this many bytes (default 64 MiB; 0 restores it). Tests set
 * it tiny to run many waves. */
void md_cpu_direct_set_prep_bytes(size_t bytes);

/* fwd_ok: the direct forward is chosen for this shape; fwd_fits: it can run
 * it (also where a GEMM is chosen instead: 1x1 under 128 input channels). */
int md_cpu_direct_fwd_ok(const struct md_dconv *g);
int md_cpu_direct_fwd_fits(const struct md_dconv *g);
int md_cpu_direct_filter_ok(const struct md_dconv *g);
/* y = conv(x, w) + beta*y; w is (K, C, R, S) for NCHW, (K, R, S, C) for NHWC.
 * flip: w is instead the weight of the convolution whose stride-1
 * backward-data this forward is ((C, K, R, S) or (C, R, S, K)); it is read
 * transposed and rotated by 180 degrees (no flipped copy needed). */
md_status md_cpu_direct_fwd(const struct md_dconv *g, int nhwc, int flip, const float *x, const float *w, float *y,
                            float beta);
/* The same (NHWC) for one phase: weights and output as ph says. */
md_status md_cpu_direct_fwd_phase(const struct md_dconv *g, const struct md_dphase *ph, const float *x, const float *w,
                                  float *y, float beta);
/* dw = conv_filter_grad(x, dy) + beta*dw, dw in w's layout. */
md_status md_cpu_direct_filter(const struct md_dconv *g, int nhwc, const float *x, const float *dy, float *dw,
                               float beta);

#endif
