/* metal_plan.h - launch plans: a kernel table call (src/backend/kernels.h)
 * turned into Metal dispatches (kernel name, packed md_metal_args.h params,
 * buffers in binding order, grid). Plain C, compiled on every platform: the
 * Objective-C backend encodes these plans, and on Linux the same plans drive
 * the simulated kernels (metal/sim), so packing and sizing are tested there.
 */
#ifndef MD_METAL_PLAN_H
#define MD_METAL_PLAN_H

#include "backend/kernels.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MD_METAL_MAX_BUFS 13
#define MD_METAL_MAX_DISPATCH 2
#define MD_METAL_MAX_PARAMS 192

/* One compute dispatch: kernel `name`, params struct into buffer(0), bufs[i]
 * into buffer(i + 1), grid[] threadgroups of tg[] threads. */
struct md_metal_dispatch {
    char name[40];                          /* host name in the library */
    unsigned char params[MD_METAL_MAX_PARAMS];
    unsigned params_size;
    int nbufs;
    void *bufs[MD_METAL_MAX_BUFS];          /* device pointers; NULL: absent optional (bind a dummy) */
    unsigned scratch_mask;                  /* bit i: bufs[i] is the backend's reduction scratch */
    unsigned grid[3];                       /* threadgroups per grid */
    unsigned tg[3];                         /* threads per threadgroup */
    unsigned tg_mem;                        /* threadgroup memory bytes */
    int barriers;                           /* the kernel uses threadgroup_barrier */
};

/* A kernel table call as one or two dispatches, run in order in one encoder. */
struct md_metal_plan {
    int n;
    struct md_metal_dispatch d[MD_METAL_MAX_DISPATCH];
};

/* Floats of reduction scratch a backend must provide (MD_MTL_RED_PARTIALS). */
#define MD_METAL_SCRATCH_FLOATS 256

/* ---- plans (MD_ERR_UNSUPPORTED or MD_ERR_INTERNAL with a message when a
 * call cannot be run; nothing is touched) ---- */
md_status md_metal_plan_gemm(const struct md_gemm_args *a, struct md_metal_plan *p);
md_status md_metal_plan_conv2d_fwd(const struct md_conv2d_args *a, struct md_metal_plan *p);
md_status md_metal_plan_conv2d_bwd_data(const struct md_conv2d_args *a, struct md_metal_plan *p);
md_status md_metal_plan_conv2d_bwd_filter(const struct md_conv2d_args *a, struct md_metal_plan *p);
md_status md_metal_plan_batchnorm_fwd(const struct md_batchnorm_args *a, struct md_metal_plan *p);
md_status md_metal_plan_batchnorm_bwd(const struct md_batchnorm_args *a, struct md_metal_plan *p);
md_status md_metal_plan_act_fwd(const struct md_act_args *a, struct md_metal_plan *p);
md_status md_metal_plan_act_bwd(const struct md_act_args *a, struct md_metal_plan *p);
md_status md_metal_plan_pool2d_fwd(const struct md_pool2d_args *a, struct md_metal_plan *p);
md_status md_metal_plan_pool2d_bwd(const struct md_pool2d_args *a, struct md_metal_plan *p);
md_status md_metal_plan_gap_fwd(const struct md_gap_args *a, struct md_metal_plan *p);
md_status md_metal_plan_gap_bwd(const struct md_gap_args *a, struct md_metal_plan *p);
md_status md_metal_plan_bias_add(const struct md_bias_args *a, struct md_metal_plan *p);
md_status md_metal_plan_bias_grad(const struct md_bias_args *a, struct md_metal_plan *p);
md_status md_metal_plan_dropout_fwd(const struct md_dropout_args *a, struct md_metal_plan *p);
md_status md_metal_plan_dropout_bwd(const struct md_dropout_args *a, struct md_metal_plan *p);
md_status md_metal_plan_ew(const struct md_ew_args *a, struct md_metal_plan *p);
md_status md_metal_plan_reduce(const struct md_reduce_args *a, struct md_metal_plan *p);
md_status md_metal_plan_chslice(const struct md_chslice_args *a, struct md_metal_plan *p);
md_status md_metal_plan_xent(const struct md_xent_args *a, struct md_metal_plan *p);
md_status md_metal_plan_regress(const struct md_regress_args *a, struct md_metal_plan *p);
md_status md_metal_plan_cast(const struct md_cast_args *a, struct md_metal_plan *p);
md_status md_metal_plan_permute(const struct md_permute_args *a, struct md_metal_plan *p);
md_status md_metal_plan_optim(const struct md_optim_args *a, struct md_metal_plan *p);
md_status md_metal_plan_layernorm_fwd(const struct md_layernorm_args *a, struct md_metal_plan *p);
md_status md_metal_plan_layernorm_bwd(const struct md_layernorm_args *a, struct md_metal_plan *p);
md_status md_metal_plan_softmax_fwd(const struct md_softmax_args *a, struct md_metal_plan *p);
md_status md_metal_plan_softmax_bwd(const struct md_softmax_args *a, struct md_metal_plan *p);
md_status md_metal_plan_attn_fwd(const struct md_attn_args *a, struct md_metal_plan *p);
md_status md_metal_plan_attn_bwd(const struct md_attn_args *a, struct md_metal_plan *p);
md_status md_metal_plan_tiles_fwd(const struct md_tiles_args *a, struct md_metal_plan *p);
md_status md_metal_plan_tiles_bwd(const struct md_tiles_args *a, struct md_metal_plan *p);
md_status md_metal_plan_film_fwd(const struct md_film_args *a, struct md_metal_plan *p);
md_status md_metal_plan_film_bwd(const struct md_film_args *a, struct md_metal_plan *p);
md_status md_metal_plan_chscale_fwd(const struct md_chscale_args *a, struct md_metal_plan *p);
md_status md_metal_plan_chscale_bwd(const struct md_chscale_args *a, struct md_metal_plan *p);

/* Every kernel table entry the Metal backends plan, as X(entry, argument
 * struct), in the table's order: the real and the simulated backend each
 * define their wrappers and fill their table from this one list. */
#define MD_METAL_PLANNED_KERNELS(X) \
    X(gemm, md_gemm_args) \
    X(conv2d_fwd, md_conv2d_args) \
    X(conv2d_bwd_data, md_conv2d_args) \
    X(conv2d_bwd_filter, md_conv2d_args) \
    X(batchnorm_fwd, md_batchnorm_args) \
    X(batchnorm_bwd, md_batchnorm_args) \
    X(act_fwd, md_act_args) \
    X(act_bwd, md_act_args) \
    X(pool2d_fwd, md_pool2d_args) \
    X(pool2d_bwd, md_pool2d_args) \
    X(gap_fwd, md_gap_args) \
    X(gap_bwd, md_gap_args) \
    X(bias_add, md_bias_args) \
    X(bias_grad, md_bias_args) \
    X(dropout_fwd, md_dropout_args) \
    X(dropout_bwd, md_dropout_args) \
    X(ew, md_ew_args) \
    X(reduce, md_reduce_args) \
    X(chslice, md_chslice_args) \
    X(xent, md_xent_args) \
    X(cast, md_cast_args) \
    X(permute, md_permute_args) \
    X(optim, md_optim_args) \
    X(layernorm_fwd, md_layernorm_args) \
    X(layernorm_bwd, md_layernorm_args) \
    X(softmax_fwd, md_softmax_args) \
    X(softmax_bwd, md_softmax_args) \
    X(attn_fwd, md_attn_args) \
    X(attn_bwd, md_attn_args) \
    X(regress, md_regress_args) \
    X(tiles_fwd, md_tiles_args) \
    X(tiles_bwd, md_tiles_args) \
    X(film_fwd, md_film_args) \
    X(film_bwd, md_film_args) \
    X(chscale_fwd, md_chscale_args) \
    X(chscale_bwd, md_chscale_args)

/* The empty kernel event timestamps ride on. */
void md_metal_plan_noop(struct md_metal_plan *p);

#ifdef __cplusplus
}
#endif
#endif
