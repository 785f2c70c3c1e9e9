/* metal_grid.h - grid and threadgroup sizing for the Metal kernels. Plain C,
 * compiled on every platform (metal_plan.c uses it; unit-tested on Linux). */
#ifndef MD_METAL_GRID_H
#define MD_METAL_GRID_H

#include <stddef.h>
#include <stdint.h>


#ifdef __cplusplus
extern "C" {
#endif

/* Threads per threadgroup of the element-wise kernels, and the grid cap
 * beyond which their grid-stride loops take over. */
#define MD_METAL_EW_THREADS 256u
#define MD_METAL_EW_MAX_GROUPS 16384u

/* ---- sizing ---- */
unsigned md_metal_ceil_div(unsigned long long a, unsigned long long b);
/* n elements, `tpg` threads per group, at most `max_groups` groups; n == 0
 * still gives one group (kernels loop zero times). */
void md_metal_grid_1d(unsigned long long n, unsigned tpg, unsigned max_groups, unsigned grid[3], unsigned tg[3]);
/* The tiled matrix product: (ceil(n/BN), ceil(m/BM), batch) groups of TX x TY. */
void md_metal_grid_tiles(int m, int n, int batch, unsigned grid[3], unsigned tg[3]);
/* One threadgroup of `tpg` threads per row (channel). */
void md_metal_grid_rows(int rows, unsigned tpg, unsigned grid[3], unsigned tg[3]);

#ifdef __cplusplus
}
#endif
#endif
