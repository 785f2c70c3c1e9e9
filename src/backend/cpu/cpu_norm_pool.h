/* cpu_norm_pool.h - batch norm + ReLU + 2x2 stride-2 max pool in the same
 * passes, fp32 (cpu_norm.c calls these for
 * md_batchnorm_args.pool; kernels.h says what the fused op computes). */
#ifndef MD_CPU_NORM_POOL_H
#define MD_CPU_NORM_POOL_H

/* x (n, h, w, c) full size; y, dy (n, h/2, w/2, c) pooled; dx as x. A task
 * is one pooled row t = image * (h/2) + row. The _nchw functions: x (n, c,
 * h, w), y and dy (n, c, h/2, w/2); a task is one plane t = image * c +
 * channel, and its sums go to part[image * 2c + channel] and [.. + c]. */
struct md_bnpool {
    const float *x, *dy;
    float *y, *dx;
    const float *sc, *sh;        /* (c) the forward's affine: relu(x*sc + sh) */
    const float *fk;             /* (c) backward: the float mean the sums are taken about */
    const float *k1, *k2, *k3;   /* (c) backward: dx = k1*(dy' - k2 - (x - fk)*k3) (+ beta*dx) */
    double *part;                /* (n*h/2, 2c) backward: sum dy', sum dy'*(x - fk) per pooled row */
    float beta;
    int c, h, w;
};

/* y of pooled rows [b, e) */
void md_cpu_bnpool_apply(const struct md_bnpool *p, long long b, long long e);
/* the partial sums of pooled rows [b, e) */
void md_cpu_bnpool_sums(const struct md_bnpool *p, long long b, long long e);
/* dx at every element of the windows of pooled rows [b, e) */
void md_cpu_bnpool_dx(const struct md_bnpool *p, long long b, long long e);
void md_cpu_bnpool_apply_nchw(const struct md_bnpool *p, long long b, long long e);
void md_cpu_bnpool_sums_nchw(const struct md_bnpool *p, long long b, long long e);
void md_cpu_bnpool_dx_nchw(const struct md_bnpool *p, long long b, long long e);

#endif
