/* cpu_kernels.c - the CPU kernel table and thread setting.
 * Entries are filled as kernels land (NULL = unsupported, see kernels.h). */
#include "backend/cpu/cpu_kernels.h"

static int cpu_threads = 1;

void md_cpu_set_threads(int n) { cpu_threads = n > 0 ? n : 1; }
int md_cpu_threads(void) { return cpu_threads; }

const struct md_kernels md_cpu_kernels = {
    .gemm = 0,
};
