/* ref_math.h - shared scalar definitions of the kernels: activations and
 * their derivatives in double, element indexing per layout. Used by the
 * reference kernels, and by the CPU kernels where they need the same
 * definition (header-only, static inline). */
#ifndef MD_REF_MATH_H
#define MD_REF_MATH_H

#include <math.h>
#include <stddef.h>

#include "backend/kernels.h"

#define MD_SQRT1_2 0.70710678118654752440
#define MD_INV_SQRT_2PI 0.39894228040143267794
#define MD_SQRT_2_OVER_PI 0.79788456080286535588
#define MD_GELU_TANH_C 0.044715

/* act(x) for enum md_act; alpha is LeakyReLU's negative slope. */
static inline double md_act_d(int act, double x, double alpha)
{
    switch (act) {
    case MD_ACT_RELU: return x > 0.0 ? x : 0.0;
    case MD_ACT_LEAKY_RELU: return x > 0.0 ? x : alpha * x;
    case MD_ACT_GELU: return 0.5 * x * (1.0 + erf(x * MD_SQRT1_2));
    case MD_ACT_SILU: return x / (1.0 + exp(-x));
    case MD_ACT_SIGMOID: return 1.0 / (1.0 + exp(-x));
    case MD_ACT_TANH: return tanh(x);
    case MD_ACT_GELU_TANH: return 0.5 * x * (1.0 + tanh(MD_SQRT_2_OVER_PI * (x + MD_GELU_TANH_C * x * x * x)));
    default: return x;
    }
}

/* d act(x) / dx at the forward input x (ReLU: 0 at x == 0, as PyTorch). */
static inline double md_act_grad_d(int act, double x, double alpha)
{
    switch (act) {
    case MD_ACT_RELU: return x > 0.0 ? 1.0 : 0.0;
    case MD_ACT_LEAKY_RELU: return x > 0.0 ? 1.0 : alpha;
    case MD_ACT_GELU:
        return 0.5 * (1.0 + erf(x * MD_SQRT1_2)) + x * MD_INV_SQRT_2PI * exp(-0.5 * x * x);
    case MD_ACT_SILU: {
        double s = 1.0 / (1.0 + exp(-x));
        return s * (1.0 + x * (1.0 - s));
    }
    case MD_ACT_SIGMOID: {
        double s = 1.0 / (1.0 + exp(-x));
        return s * (1.0 - s);
    }
    case MD_ACT_TANH: {
        double t = tanh(x);
        return 1.0 - t * t;
    }
    case MD_ACT_GELU_TANH: {
        double t = tanh(MD_SQRT_2_OVER_PI * (x + MD_GELU_TANH_C * x * x * x));
        return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * MD_SQRT_2_OVER_PI * (1.0 + 3.0 * MD_GELU_TANH_C * x * x);
    }
    default: return 1.0;
    }
}

/* Offset of element (ni, ci, i) of an (n, c, hw) activation in `layout`
 * (NCHW: (n, c, hw); NHWC: (n, hw, c)). */
static inline size_t md_nci(md_layout layout, int c, int hw, int ni, int ci, int i)
{
    return layout == MD_NHWC ? ((size_t)ni * hw + i) * c + ci : ((size_t)ni * c + ci) * hw + i;
}

/* Offset of element (ni, ci, hi, wi) of an (n, c, h, w) activation in `layout`. */
static inline size_t md_nchw_at(md_layout layout, int c, int h, int w, int ni, int ci, int hi, int wi)
{
    return layout == MD_NHWC ? (((size_t)ni * h + hi) * w + wi) * c + ci
                             : (((size_t)ni * c + ci) * h + hi) * w + wi;
}

/* Offset of filter element (ki, cg, ri, si) of a (k, cpg, r, s) filter:
 * NCHW (K, C/g, R, S), NHWC (K, R, S, C/g). */
static inline size_t md_filter_at(md_layout layout, int cpg, int r, int s, int ki, int cg, int ri, int si)
{
    return layout == MD_NHWC ? (((size_t)ki * r + ri) * s + si) * cpg + cg
                             : (((size_t)ki * cpg + cg) * r + ri) * s + si;
}

#endif
