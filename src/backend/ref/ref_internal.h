/* ref_internal.h - what the reference kernel files share: the storage
 * helpers and the per-family entry points. Not for use outside
 * src/backend/ref. */
#ifndef MD_REF_INTERNAL_H
#define MD_REF_INTERNAL_H

#include "backend/ref/ref_kernels.h"
#include "backend/ref/ref_math.h"

static inline int is_float_type(md_dtype t) { return t == MD_F32 || t == MD_F16 || t == MD_BF16; }

static inline md_status check_dtype(const char *op, md_dtype t)
{
    if (is_float_type(t)) return MD_OK;
    return md_errf(MD_ERR_UNSUPPORTED, "ref %s: dtype %s is not supported (fp32, fp16, bf16)", op,
                   md_dtype_name(t));
}

static inline double ld(const void *p, md_dtype t, size_t i) { return (double)md_load_f(p, t, i); }

/* out[i] = v + beta * out[i], old value unread when beta == 0. */
static inline void st(void *p, md_dtype t, size_t i, double v, float beta)
{
    if (beta != 0.0f) v += (double)beta * ld(p, t, i);
    md_store_f(p, t, i, (float)v);
}

static inline void st32(float *p, size_t i, double v, float beta)
{
    if (beta != 0.0f) v += (double)beta * (double)p[i];
    p[i] = (float)v;
}

md_status md_ref_gemm(md_device *dev, const struct md_gemm_args *a);
md_status md_ref_conv2d_fwd(md_device *dev, const struct md_conv2d_args *a);
md_status md_ref_conv2d_bwd_data(md_device *dev, const struct md_conv2d_args *a);
md_status md_ref_conv2d_bwd_filter(md_device *dev, const struct md_conv2d_args *a);
md_status md_ref_batchnorm_fwd(md_device *dev, const struct md_batchnorm_args *a);
md_status md_ref_batchnorm_bwd(md_device *dev, const struct md_batchnorm_args *a);
md_status md_ref_act_fwd(md_device *dev, const struct md_act_args *a);
md_status md_ref_act_bwd(md_device *dev, const struct md_act_args *a);
md_status md_ref_pool2d_fwd(md_device *dev, const struct md_pool2d_args *a);
md_status md_ref_pool2d_bwd(md_device *dev, const struct md_pool2d_args *a);
md_status md_ref_gap_fwd(md_device *dev, const struct md_gap_args *a);
md_status md_ref_gap_bwd(md_device *dev, const struct md_gap_args *a);
md_status md_ref_bias_add(md_device *dev, const struct md_bias_args *a);
md_status md_ref_bias_grad(md_device *dev, const struct md_bias_args *a);
md_status md_ref_dropout_fwd(md_device *dev, const struct md_dropout_args *a);
md_status md_ref_dropout_bwd(md_device *dev, const struct md_dropout_args *a);
md_status md_ref_ew(md_device *dev, const struct md_ew_args *a);
md_status md_ref_reduce(md_device *dev, const struct md_reduce_args *a);
md_status md_ref_chslice(md_device *dev, const struct md_chslice_args *a);
md_status md_ref_xent(md_device *dev, const struct md_xent_args *a);
md_status md_ref_cast(md_device *dev, const struct md_cast_args *a);
md_status md_ref_permute(md_device *dev, const struct md_permute_args *a);
md_status md_ref_optim(md_device *dev, const struct md_optim_args *args);
md_status md_ref_layernorm_fwd(md_device *dev, const struct md_layernorm_args *a);
md_status md_ref_layernorm_bwd(md_device *dev, const struct md_layernorm_args *a);
md_status md_ref_softmax_fwd(md_device *dev, const struct md_softmax_args *a);
md_status md_ref_softmax_bwd(md_device *dev, const struct md_softmax_args *a);
md_status md_ref_attn_fwd(md_device *dev, const struct md_attn_args *a);
md_status md_ref_attn_bwd(md_device *dev, const struct md_attn_args *a);
md_status md_ref_regress(md_device *dev, const struct md_regress_args *a);
md_status md_ref_tiles_fwd(md_device *dev, const struct md_tiles_args *a);
md_status md_ref_tiles_bwd(md_device *dev, const struct md_tiles_args *a);
md_status md_ref_film_fwd(md_device *dev, const struct md_film_args *a);
md_status md_ref_film_bwd(md_device *dev, const struct md_film_args *a);
md_status md_ref_chscale_fwd(md_device *dev, const struct md_chscale_args *a);
md_status md_ref_chscale_bwd(md_device *dev, const struct md_chscale_args *a);

#endif
