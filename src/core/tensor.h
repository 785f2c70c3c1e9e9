/* tensor.h - element types, memory layouts and half-precision conversions.
 *
 * Header-only and valid C11 and CUDA C++, so every backend shares the exact
 * same conversions (round-to-nearest-even) as the reference kernels.
 */
#ifndef MD_TENSOR_H
#define MD_TENSOR_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum md_dtype {
    MD_F32 = 0,
    MD_F16,
    MD_BF16,
    MD_I32,
    MD_U8,
    MD_DTYPE_COUNT
} md_dtype;

/* Activation layouts. Convolution filters follow the activation layout:
 * NCHW -> (K, C/groups, R, S); NHWC -> (K, R, S, C/groups). */
typedef enum md_layout { MD_NCHW = 0, MD_NHWC } md_layout;

/* A run's precision of convolutions and matrix products (--precision). */
typedef enum md_precision { MD_PREC_FP32 = 0, MD_PREC_FP16, MD_PREC_BF16 } md_precision;

static inline const char *md_precision_name(md_precision p)
{
    return p == MD_PREC_FP16 ? "fp16" : p == MD_PREC_BF16 ? "bf16" : "fp32";
}

/* The element type of a precision's matrix work. */
static inline md_dtype md_precision_dtype(md_precision p)
{
    return p == MD_PREC_FP16 ? MD_F16 : p == MD_PREC_BF16 ? MD_BF16 : MD_F32;
}

static inline size_t md_dtype_size(md_dtype t)
{
    switch (t) {
    case MD_F32: case MD_I32: return 4;
    case MD_F16: case MD_BF16: return 2;
    case MD_U8: return 1;
    default: return 0;
    }
}

static inline const char *md_dtype_name(md_dtype t)
{
    switch (t) {
    case MD_F32: return "fp32";
    case MD_F16: return "fp16";
    case MD_BF16: return "bf16";
    case MD_I32: return "int32";
    case MD_U8: return "uint8";
    default: return "?";
    }
}

static inline const char *md_layout_name(md_layout l) { return l == MD_NHWC ? "NHWC" : "NCHW"; }

static inline uint32_t md_f32_bits(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline float md_bits_f32(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }

/* fp32 -> bf16, round to nearest even; NaN stays NaN. */
static inline uint16_t md_f32_to_bf16(float f)
{
    uint32_t u = md_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline float md_bf16_to_f32(uint16_t h) { return md_bits_f32((uint32_t)h << 16); }

/* fp32 -> IEEE fp16, round to nearest even, overflow to inf, NaN kept. */
static inline uint16_t md_f32_to_f16(float f)
{
    uint32_t x = md_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax = x & 0x7fffffffu;
    if (ax > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);            /* NaN */
    if (ax >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);           /* overflow/inf */
    if (ax < 0x38800000u) {                                              /* subnormal or 0 */
        if (ax < 0x33000000u) return (uint16_t)sign;                     /* < 2^-25 -> 0 */
        uint32_t e = ax >> 23, m = (ax & 0x7fffffu) | 0x800000u;
        /* value = m * 2^(e-150) and the fp16 subnormal unit is 2^-24 */
        uint32_t shift = 126u - e;
        uint32_t hm = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
        if (rem > half || (rem == half && (hm & 1u))) hm++;
        return (uint16_t)(sign | hm);
    }
    uint32_t h = ((ax >> 13) - ((127u - 15u) << 10));
    uint32_t rem = ax & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) h++;
    return (uint16_t)(sign | h);
}
static inline float md_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    if (e == 0) {
        if (m == 0) return md_bits_f32(sign);
        float v = (float)m * (1.0f / 16777216.0f); /* m * 2^-24 */
        return sign ? -v : v;
    }
    if (e == 31) return md_bits_f32(sign | 0x7f800000u | (m << 13));
    return md_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

/* Loads element i of a float-like buffer of type t as fp32. */
static inline float md_load_f(const void *p, md_dtype t, size_t i)
{
    switch (t) {
    case MD_F16: return md_f16_to_f32(((const uint16_t *)p)[i]);
    case MD_BF16: return md_bf16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}
static inline void md_store_f(void *p, md_dtype t, size_t i, float v)
{
    switch (t) {
    case MD_F16: ((uint16_t *)p)[i] = md_f32_to_f16(v); break;
    case MD_BF16: ((uint16_t *)p)[i] = md_f32_to_bf16(v); break;
    default: ((float *)p)[i] = v; break;
    }
}

/* Convolution filters of `k` output channels between the two layouts, in
 * place: to_krsc 1 turns (K, C, RS) into (K, RS, C) (how an NHWC device
 * holds them), 0 turns it back into PyTorch's (K, C, RS). C counts the
 * channels per group, RS = R * S; tmp holds c * rs floats. */
static inline void md_filter_permute(float *w, float *tmp, int k, int c, int rs, int to_krsc)
{
    size_t n = (size_t)c * (size_t)rs;
    for (int o = 0; o < k; o++) {
        float *v = w + (size_t)o * n;
        memcpy(tmp, v, n * sizeof *tmp);
        for (int ci = 0; ci < c; ci++)
            for (int j = 0; j < rs; j++) {
                if (to_krsc) v[(size_t)j * (size_t)c + (size_t)ci] = tmp[(size_t)ci * (size_t)rs + (size_t)j];
                else v[(size_t)ci * (size_t)rs + (size_t)j] = tmp[(size_t)j * (size_t)c + (size_t)ci];
            }
    }
}

#ifdef __cplusplus
}
#endif
#endif
