/* metal_sim_backend.c - a "metal" backend for the Linux test binary
 * build/metal-sim-tests: host memory, and every kernel planned by
 * metal/metal_plan.c (as the real backend does) and run on the simulated
 * Metal kernels (metal/sim). Linked there instead of metal_stub.c, so the
 * backend-ops test of the kernels area (test/test_backend_ops.c), which runs
 * every available backend against the reference, runs the Metal kernels too.
 * Never part of mpsdiag itself. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend_impl.h"
#include "metal_sim_run.h"
#include "../metal_backend.h"
#include "../metal_grid.h"

static void sim_probe(struct md_probe *out)
{
    out->built = 1;
    out->available = 1;
    out->device_count = 1;
}

static md_status sim_device_info(int index, struct md_device_info *out)
{
    (void)index;
    snprintf(out->name, sizeof out->name, "Metal kernels simulated on the CPU (metal/sim, tests only)");
    out->compute_units = 1;
    out->unified_memory = 1;
    out->supports_fp16 = out->supports_bf16 = 1;
    return MD_OK;
}

static md_status sim_open(md_device *dev)
{
    dev->impl = md_calloc(MD_METAL_SCRATCH_FLOATS, sizeof(float));
    return dev->impl ? MD_OK : MD_ERR_OOM;
}

static void sim_close(md_device *dev)
{
    md_free(dev->impl);
    dev->impl = NULL;
}

/* As the real backend on Apple7+ GPUs: gemm/conv through the "_sg"
 * simdgroup-matrix kernels unless MPSDIAG_METAL_SIMDGROUP=0. */
static md_status sim_run(md_device *dev, struct md_metal_plan *p)
{
    const char *env = getenv("MPSDIAG_METAL_SIMDGROUP");
    int sg = !(env && strcmp(env, "0") == 0);
    for (int i = 0; sg && i < p->n; i++)
        if (!strncmp(p->d[i].name, "md_gemm_", 8) || !strncmp(p->d[i].name, "md_conv_", 8))
            strncat(p->d[i].name, "_sg", sizeof p->d[i].name - strlen(p->d[i].name) - 1);
    return md_metal_sim_run(p, dev->impl);
}

#define SIM_KERNEL(op, argtype)                                            \
    static md_status sim_##op(md_device *dev, const struct argtype *a)     \
    {                                                                      \
        struct md_metal_plan p;                                            \
        MD_TRY(md_metal_plan_##op(a, &p));                                 \
        return sim_run(dev, &p);                                           \
    }

SIM_KERNEL(gemm, md_gemm_args)
SIM_KERNEL(conv2d_fwd, md_conv2d_args)
SIM_KERNEL(conv2d_bwd_data, md_conv2d_args)
SIM_KERNEL(conv2d_bwd_filter, md_conv2d_args)
SIM_KERNEL(batchnorm_fwd, md_batchnorm_args)
SIM_KERNEL(batchnorm_bwd, md_batchnorm_args)
SIM_KERNEL(act_fwd, md_act_args)
SIM_KERNEL(act_bwd, md_act_args)
SIM_KERNEL(pool2d_fwd, md_pool2d_args)
SIM_KERNEL(pool2d_bwd, md_pool2d_args)
SIM_KERNEL(gap_fwd, md_gap_args)
SIM_KERNEL(gap_bwd, md_gap_args)
SIM_KERNEL(bias_add, md_bias_args)
SIM_KERNEL(bias_grad, md_bias_args)
SIM_KERNEL(dropout_fwd, md_dropout_args)
SIM_KERNEL(dropout_bwd, md_dropout_args)
SIM_KERNEL(ew, md_ew_args)
SIM_KERNEL(reduce, md_reduce_args)
SIM_KERNEL(chslice, md_chslice_args)
SIM_KERNEL(xent, md_xent_args)
SIM_KERNEL(cast, md_cast_args)
SIM_KERNEL(permute, md_permute_args)
SIM_KERNEL(optim, md_optim_args)
SIM_KERNEL(layernorm_fwd, md_layernorm_args)
SIM_KERNEL(layernorm_bwd, md_layernorm_args)
SIM_KERNEL(softmax_fwd, md_softmax_args)
SIM_KERNEL(softmax_bwd, md_softmax_args)
SIM_KERNEL(attn_fwd, md_attn_args)
SIM_KERNEL(attn_bwd, md_attn_args)
SIM_KERNEL(regress, md_regress_args)

static const struct md_backend_ops sim_ops = {
    .api_version = MD_BACKEND_API_VERSION,
    .name = "metal",
    .probe = sim_probe,
    .device_info = sim_device_info,
    .open = sim_open,
    .close = sim_close,
    MD_HOST_MEMORY_OPS,
    .kernels = {
        .gemm = sim_gemm,
        .conv2d_fwd = sim_conv2d_fwd,
        .conv2d_bwd_data = sim_conv2d_bwd_data,
        .conv2d_bwd_filter = sim_conv2d_bwd_filter,
        .batchnorm_fwd = sim_batchnorm_fwd,
        .batchnorm_bwd = sim_batchnorm_bwd,
        .act_fwd = sim_act_fwd,
        .act_bwd = sim_act_bwd,
        .pool2d_fwd = sim_pool2d_fwd,
        .pool2d_bwd = sim_pool2d_bwd,
        .gap_fwd = sim_gap_fwd,
        .gap_bwd = sim_gap_bwd,
        .bias_add = sim_bias_add,
        .bias_grad = sim_bias_grad,
        .dropout_fwd = sim_dropout_fwd,
        .dropout_bwd = sim_dropout_bwd,
        .ew = sim_ew,
        .reduce = sim_reduce,
        .chslice = sim_chslice,
        .xent = sim_xent,
        .cast = sim_cast,
        .permute = sim_permute,
        .optim = sim_optim,
        .layernorm_fwd = sim_layernorm_fwd,
        .layernorm_bwd = sim_layernorm_bwd,
        .softmax_fwd = sim_softmax_fwd,
        .softmax_bwd = sim_softmax_bwd,
        .attn_fwd = sim_attn_fwd,
        .attn_bwd = sim_attn_bwd,
        .regress = sim_regress,
    },
};

const struct md_backend_ops *md_metal_backend_ops(void) { return &sim_ops; }

double md_metal_compile_seconds(const md_device *dev)
{
    (void)dev;
    return 0.0;
}
