/* cpu_norm_pool.h - batch norm + ReLU + 2x2 stride-2 max pool in the same
 * passes, fp32 (cpu_norm.c calls these for
 * md_batchnorm_args.pool; kernels.h says what the fused op computes). */
#ifndef MD_CPU_NORM_POOL_H
#define MD_CPU_NORM_POOL_H

#include "backend/kernels.h"

/* x (n, h, w, c) full size; y, dy (n, h/2, w/2, c) pooled; dx as x. A task
 * is one pooled row t = image * (h/2) + row. The _nchw functions: x (n, c,
 * h, w), y and dy (n, c, h/2, w/2); a task is one plane t = image * c +
 * channel, and its sums go to part[image * 2c + channel] and [.. + c]; they
 * do not use xs and arg. */
struct md_bnpool {
    const float *x, *dy;
    float *y, *dx;
    const float *sc, *sh;        /* (c) the forward's affine: relu(x*sc + sh) */
    const float *fk;             /* (c) backward: the float mean the sums are taken about */
    const float *k1, *k2, *k3;   /* (c) backward: dx = k1*(dy' - k2 - (x - fk)*k3) (+ beta*dx) */
    double *part;                /* (n*h/2, 2c) backward: sum dy', sum dy'*(x - fk) per pooled row */
    /* channels-last, or NULL: each window's routing, written by the forward
     * and read by the backward instead of recomputing it (as y and dy) */
    float *xs;                   /* x at the element that takes dy (the first maximum) */
    unsigned char *arg;          /* that element, 0-3 in row-major order; 4: none (the ReLU's mask) */
    float beta;
    int c, h, w;
};

/* y of pooled rows [b, e) (and xs, arg where given) */
void md_cpu_bnpool_apply(const struct md_bnpool *p, long long b, long long e);
/* the partial sums of pooled rows [b, e) (from xs, arg where given) */
void md_cpu_bnpool_sums(const struct md_bnpool *p, long long b, long long e);
/* dx at every element of the windows of pooled rows [b, e) (routed by arg where given) */
void md_cpu_bnpool_dx(const struct md_bnpool *p, long long b, long long e);
void md_cpu_bnpool_apply_nchw(const struct md_bnpool *p, long long b, long long e);
void md_cpu_bnpool_sums_nchw(const struct md_bnpool *p, long long b, long long e);
void md_cpu_bnpool_dx_nchw(const struct md_bnpool *p, long long b, long long e);

/* Channels-last with the routing (xs, arg): instead of dx, the filter
 * gradient of the convolution cv that computed x (kernels.h
 * md_batchnorm_args.conv; cv->x its input, cv->wt its filter (k, r, s, ci),
 * cv->dwt written), from k1, k2, k3 and fk. */
md_status md_cpu_bnpool_conv_filter(const struct md_bnpool *p, const struct md_conv2d_args *cv);

#endif
