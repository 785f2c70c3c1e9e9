/* cpu_internal.h - what the CPU kernel files share: scratch buffers, the
 * per-file kernel entry points, small loaders. Not for use outside
 * src/backend/cpu. */
#ifndef MD_CPU_INTERNAL_H
#define MD_CPU_INTERNAL_H

#include <stddef.h>

#include "backend/kernels.h"
#include "core/threadpool.h"

/* Scratch slots (grow, never shrink; freed by md_cpu_scratch_release).
 * Callers hold md_cpu_lock() while they use a slot. */
enum { CPU_SCR_COL = 0, CPU_SCR_TMP, CPU_SCR_DY, CPU_SCR_X32, CPU_SCR_W32, CPU_SCR_Y32, CPU_SCR_WFLIP, CPU_SCR_WTAP, CPU_SCR_COUNT };
void *md_cpu_scratch(int slot, size_t bytes);
void md_cpu_scratch_release(void);
void md_cpu_lock(void);
void md_cpu_unlock(void);

/* Element-wise grain: chunks this small are not worth a thread. */
#define CPU_GRAIN 16384

/* Tasks per md_parallel_for chunk when each task does `per_task` elements of
 * work: enough for `elems` elements, at least one. */
static inline long long md_cpu_tasks_per_chunk(long long per_task, long long elems)
{
    return per_task >= elems ? 1 : elems / (per_task ? per_task : 1) + 1;
}

/* Converts n elements of type t to fp32 (dst may be src when t is F32: then
 * src is returned and nothing is copied). */
const float *md_cpu_to_f32(const void *src, md_dtype t, size_t n, float *dst);

/* Row-major sgemm (C = alpha op(A) op(B) + beta C) on the pool: single-threaded
 * OpenBLAS calls on fixed tiles of C. Not reentrant from inside a pool job. */
void md_cpu_sgemm(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda, const float *B, int ldb,
                  float beta, float *C, int ldc);

md_status md_cpu_gemm(md_device *dev, const struct md_gemm_args *a);
md_status md_cpu_conv2d_fwd(md_device *dev, const struct md_conv2d_args *a);
md_status md_cpu_conv2d_bwd_data(md_device *dev, const struct md_conv2d_args *a);
md_status md_cpu_conv2d_bwd_filter(md_device *dev, const struct md_conv2d_args *a);
md_status md_cpu_batchnorm_fwd(md_device *dev, const struct md_batchnorm_args *a);
md_status md_cpu_batchnorm_bwd(md_device *dev, const struct md_batchnorm_args *a);
md_status md_cpu_act_fwd(md_device *dev, const struct md_act_args *a);
md_status md_cpu_act_bwd(md_device *dev, const struct md_act_args *a);
md_status md_cpu_pool2d_fwd(md_device *dev, const struct md_pool2d_args *a);
md_status md_cpu_pool2d_bwd(md_device *dev, const struct md_pool2d_args *a);
md_status md_cpu_gap_fwd(md_device *dev, const struct md_gap_args *a);
md_status md_cpu_gap_bwd(md_device *dev, const struct md_gap_args *a);
md_status md_cpu_bias_add(md_device *dev, const struct md_bias_args *a);
md_status md_cpu_bias_grad(md_device *dev, const struct md_bias_args *a);
md_status md_cpu_dropout_fwd(md_device *dev, const struct md_dropout_args *a);
md_status md_cpu_dropout_bwd(md_device *dev, const struct md_dropout_args *a);
md_status md_cpu_ew(md_device *dev, const struct md_ew_args *a);
md_status md_cpu_reduce(md_device *dev, const struct md_reduce_args *a);
md_status md_cpu_chslice(md_device *dev, const struct md_chslice_args *a);
md_status md_cpu_xent(md_device *dev, const struct md_xent_args *a);
md_status md_cpu_cast(md_device *dev, const struct md_cast_args *a);
md_status md_cpu_permute(md_device *dev, const struct md_permute_args *a);
md_status md_cpu_optim(md_device *dev, const struct md_optim_args *a);
md_status md_cpu_layernorm_fwd(md_device *dev, const struct md_layernorm_args *a);
md_status md_cpu_layernorm_bwd(md_device *dev, const struct md_layernorm_args *a);
md_status md_cpu_softmax_fwd(md_device *dev, const struct md_softmax_args *a);
md_status md_cpu_softmax_bwd(md_device *dev, const struct md_softmax_args *a);
md_status md_cpu_attn_fwd(md_device *dev, const struct md_attn_args *a);
md_status md_cpu_attn_bwd(md_device *dev, const struct md_attn_args *a);
md_status md_cpu_regress(md_device *dev, const struct md_regress_args *a);
md_status md_cpu_tiles_fwd(md_device *dev, const struct md_tiles_args *a);
md_status md_cpu_tiles_bwd(md_device *dev, const struct md_tiles_args *a);
md_status md_cpu_film_fwd(md_device *dev, const struct md_film_args *a);
md_status md_cpu_film_bwd(md_device *dev, const struct md_film_args *a);
md_status md_cpu_chscale_fwd(md_device *dev, const struct md_chscale_args *a);
md_status md_cpu_chscale_bwd(md_device *dev, const struct md_chscale_args *a);

static inline int md_cpu_float_type(md_dtype t) { return t == MD_F32 || t == MD_F16 || t == MD_BF16; }

static inline md_status md_cpu_dtype_check(const char *op, md_dtype t)
{
    if (md_cpu_float_type(t)) return MD_OK;
    return md_errf(MD_ERR_UNSUPPORTED, "cpu %s: dtype %s is not supported (fp32, fp16, bf16)", op, md_dtype_name(t));
}

#endif
