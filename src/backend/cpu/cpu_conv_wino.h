/* cpu_conv_wino.h - Winograd F(2x2, 3x3) and F(4x4, 3x3) convolution of the CPU backend
 * (cpu_conv_wino.c): 3x3, stride 1, one group, fp32, channels-last, for the
 * forward, backward-data (the forward of dy with the weights flipped) and
 * backward-filter. */
#ifndef MD_CPU_CONV_WINO_H
#define MD_CPU_CONV_WINO_H

#include "backend/cpu/cpu_conv_direct.h"

/* Whether a forward of this shape and layout goes the Winograd way: 3x3,
 * stride and dilation 1, padding at most 2, channels-last, at least 16 input
 * and output channels, unless MPSDIAG_CPU_WINOGRAD=0 (read once) or
 * md_cpu_wino_set(0). */
int md_cpu_wino_ok(const struct md_dconv *g, int nhwc);
int md_cpu_wino_enabled(void);
/* 0 off, 1 on (where it applies), 2 or 4 on with that tile size (outputs
 * per tile side), -1 decides again from the environment (MPSDIAG_CPU_WINOGRAD
 * takes the same 0, 1, 2 and 4). */
void md_cpu_wino_set(int on);
/* The tile size a forward of this shape gets: 2 (F(2x2, 3x3)) or 4. */
int md_cpu_wino_tile(const struct md_dconv *g);

/* y = conv(x, w) + beta*y (NHWC x and y; w as md_cpu_direct_fwd takes it:
 * (K, R, S, C), or with flip (C, R, S, K), read transposed and rotated by
 * 180 degrees). Results depend on the shape only, not on the thread count. */
md_status md_cpu_wino_fwd(const struct md_dconv *g, int flip, const float *x, const float *w, float *y, float beta);

/* Backward-filter the same way (NHWC x and dy, dw as (K, 3, 3, C)), where
 * md_cpu_wino_ok holds and both channel counts are at least 64, or (on a CPU
 * with AVX-512) the input channels are a multiple of 16 up to 64 and the
 * output channels a multiple of 16: dw = conv_filter_grad(x, dy) + beta*dw. */
int md_cpu_wino_filter_ok(const struct md_dconv *g, int nhwc);
/* The filter's transformed inputs and gradients are made for waves of tiles
 * within this many bytes (default 32 MiB; 0 restores it). Tests set it
 * tiny to run many waves. */
void md_cpu_wino_set_wave_bytes(size_t bytes);
/* Tiles per block (rounded up to a multiple of 8) instead of the shape's
 * choice; 0 restores it. Tests set it small to run many blocks. */
void md_cpu_wino_set_block_tiles(int tiles);
md_status md_cpu_wino_filter(const struct md_dconv *g, const float *x, const float *dy, float *dw, float beta);

#endif
