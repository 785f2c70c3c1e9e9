/* act_math.h - the activations and their derivatives in fp32, written once
 * for every fast backend: the CPU kernels (C11), the CUDA kernels (CUDA C++)
 * and the Metal shaders (MSL, and their C++ simulation on Linux).
 *
 * The reference backend keeps its own double-precision definitions
 * (ref/ref_math.h) on purpose: the fast backends are tested against an
 * independent formula, not against themselves.
 *
 * The header uses only what the three languages share (enums, switch,
 * float arithmetic). The few spellings that differ come from the includer:
 *   MD_AM_FN        function qualifiers (default: static inline; CUDA adds
 *                   __host__ __device__)
 *   MD_AM_EXP(x)    fp32 exp (default expf)
 *   MD_AM_TANH(x)   fp32 tanh (default tanhf)
 *   MD_AM_PHI(x)    the standard normal CDF, GELU's Phi (default from erff;
 *                   MSL has no erf, so the Metal shaders define it from
 *                   their erfc, accurate in both tails)
 * The Metal build embeds this file after md_metal_common.h, which defines
 * the MSL spellings; the include lines are dropped by metal/embed_source.sh.
 */
#ifndef MD_ACT_MATH_H
#define MD_ACT_MATH_H

/* Activation kinds; the numbering is part of the kernel interface (the Metal
 * host passes it to the shaders as an int). */
enum md_act {
    MD_ACT_NONE = 0,
    MD_ACT_RELU,
    MD_ACT_LEAKY_RELU, /* alpha = negative slope */
    MD_ACT_GELU,       /* exact (erf) form, as PyTorch's default */
    MD_ACT_SILU,
    MD_ACT_SIGMOID,
    MD_ACT_TANH,
    MD_ACT_GELU_TANH,  /* tanh approximation, as PyTorch's approximate='tanh' */
    MD_ACT_COUNT
};

#ifndef MD_AM_FN
#ifdef __CUDACC__
#define MD_AM_FN static __host__ __device__ __forceinline__
#else
#define MD_AM_FN static inline
#endif
#endif
#ifndef MD_AM_EXP
#include <math.h>
#define MD_AM_EXP(x) expf(x)
#define MD_AM_TANH(x) tanhf(x)
#define MD_AM_PHI(x) (0.5f * (1.0f + erff((x) * 0.70710678118654752f)))
#endif

/* act(x); alpha is LeakyReLU's negative slope. */
MD_AM_FN float md_act_f(int act, float x, float alpha)
{
    switch (act) {
    case MD_ACT_RELU: return x > 0.0f ? x : 0.0f;
    case MD_ACT_LEAKY_RELU: return x > 0.0f ? x : alpha * x;
    case MD_ACT_GELU: return x * MD_AM_PHI(x);
    case MD_ACT_SILU: return x / (1.0f + MD_AM_EXP(-x));
    case MD_ACT_SIGMOID: return 1.0f / (1.0f + MD_AM_EXP(-x));
    case MD_ACT_TANH: return MD_AM_TANH(x);
    case MD_ACT_GELU_TANH:
        return 0.5f * x * (1.0f + MD_AM_TANH(0.79788456080286536f * (x + 0.044715f * x * x * x)));
    default: return x;
    }
}

/* d act(x) / dx at the forward input x (ReLU: 0 at x == 0, as PyTorch). */
MD_AM_FN float md_act_grad_f(int act, float x, float alpha)
{
    switch (act) {
    case MD_ACT_RELU: return x > 0.0f ? 1.0f : 0.0f;
    case MD_ACT_LEAKY_RELU: return x > 0.0f ? 1.0f : alpha;
    case MD_ACT_GELU: return MD_AM_PHI(x) + x * 0.39894228040143268f * MD_AM_EXP(-0.5f * x * x);
    case MD_ACT_SILU: {
        float s = 1.0f / (1.0f + MD_AM_EXP(-x));
        return s * (1.0f + x * (1.0f - s));
    }
    case MD_ACT_SIGMOID: {
        float s = 1.0f / (1.0f + MD_AM_EXP(-x));
        return s * (1.0f - s);
    }
    case MD_ACT_TANH: {
        float t = MD_AM_TANH(x);
        return 1.0f - t * t;
    }
    case MD_ACT_GELU_TANH: {
        /* u = k (x + c x^3): 0.5 (1 + tanh u) + 0.5 x (1 - tanh^2 u) k (1 + 3 c x^2) */
        float x2 = x * x, t = MD_AM_TANH(0.79788456080286536f * (x + 0.044715f * x2 * x));
        return 0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * 0.79788456080286536f * (1.0f + 0.134145f * x2);
    }
    default: return 1.0f;
    }
}

#endif
