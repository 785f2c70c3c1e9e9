/* cpu_kernels.h - the CPU backend's kernel table (OpenBLAS GEMM, own threaded
 * kernels), defined in the files of src/backend/cpu, and the thread count they use. */
#ifndef MD_CPU_KERNELS_H
#define MD_CPU_KERNELS_H

#include "backend/kernels.h"

extern const struct md_kernels md_cpu_kernels;

/* Threads the CPU kernels may use (set when a CPU device opens). */
void md_cpu_set_threads(int n);
int md_cpu_threads(void);

/* How the CPU backend convolves on this machine, for the system report:
 * its direct AVX-512 kernels or im2col + GEMM, and why (cpu_conv_direct.c). */
const char *md_cpu_conv_kernels(void);

/* Whether the CPU's convolutions run faster on channels-last activations
 * (they do with the direct kernels: no transposes). */
int md_cpu_conv_prefers_nhwc(void);

/* Whether a strided backward-data with these arguments runs by phases
 * (stride-1 direct forwards into dx's phase pixels) rather than GEMM +
 * col2im (cpu_conv.c), and the switch: 0 off, 1 on, -1 decides again from
 * MPSDIAG_CPU_PHASES (=0: off; read once). */
int md_cpu_conv_data_by_phases(const struct md_conv2d_args *a);
void md_cpu_conv_phases_set(int on);

/* The fp32 rate of independent FMA chains in the widest vectors the CPU has,
 * on every thread of the pool, in GFLOP/s (best of three, some 20 ms): what
 * no CPU kernel can exceed on these threads. *isa (may be NULL) names the
 * instructions (cpu_fma.c). */
double md_cpu_fma_peak_gflops(const char **isa);

#endif
