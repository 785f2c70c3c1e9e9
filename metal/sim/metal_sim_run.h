/* metal_sim_run.h - runs a launch plan (metal_plan.h) on the simulated
 * kernels, on the CPU, with host pointers as device pointers. Tests only. */
#ifndef MD_METAL_SIM_RUN_H
#define MD_METAL_SIM_RUN_H

#include "../metal_plan.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Runs every dispatch of `p` in order; `scratch` holds MD_METAL_SCRATCH_FLOATS
 * floats. MD_ERR_INTERNAL when a kernel name is not registered. */
md_status md_metal_sim_run(const struct md_metal_plan *p, float *scratch);
/* Number of registered kernel instantiations. */
int md_metal_sim_kernel_count(void);
/* 1 if `name` is a registered kernel. */
int md_metal_sim_has(const char *name);

#ifdef __cplusplus
}
#endif
#endif
