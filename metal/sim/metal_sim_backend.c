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
#include "core/platform.h"
#include "metal_sim_run.h"
#include "../metal_backend.h"
#include "../metal_grid.h"

static md_status sim_device_info(int index, struct md_device_info *out)
{
    (void)index;
    snprintf(out->name, sizeof out->name, "Metal kernels simulated on the CPU (metal/sim, tests only)");
    out->compute_units = 1;
    out->unified_memory = 1; /* the host's memory, as on Apple silicon */
    out->total_memory = md_mem_total_bytes();
    out->free_memory = md_mem_available_bytes();
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

/* As MTLDevice reports them: recommendedMaxWorkingSetSize, which macOS sets
 * to about three quarters of RAM on Apple silicon, and currentAllocatedSize,
 * here the bytes the device holds through md_dev_alloc. */
static void sim_driver_mem(md_device *dev, long long *total, long long *free_bytes, long long *reserved)
{
    long long used = __atomic_load_n(&dev->mem.current, __ATOMIC_RELAXED);
    *total = md_mem_total_bytes() / 4 * 3;
    *free_bytes = *total > used ? *total - used : 0;
    *reserved = used;
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

MD_METAL_PLANNED_KERNELS(SIM_KERNEL)
#define SIM_TABLE_ENTRY(op, argtype) .op = sim_##op,

static const struct md_backend_ops sim_ops = {
    .api_version = MD_BACKEND_API_VERSION,
    .name = "metal",
    .probe = md_host_probe,
    .device_info = sim_device_info,
    .open = sim_open,
    .close = sim_close,
    MD_HOST_MEMORY_OPS,
    .driver_mem = sim_driver_mem,
    .kernels = {MD_METAL_PLANNED_KERNELS(SIM_TABLE_ENTRY)},
};

const struct md_backend_ops *md_metal_backend_ops(void) { return &sim_ops; }

double md_metal_compile_seconds(const md_device *dev)
{
    (void)dev;
    return 0.0;
}
