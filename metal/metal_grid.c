/* metal_grid.c - grid and threadgroup sizing (see metal_grid.h). */
#include "metal_grid.h"

#include "md_metal_args.h"

unsigned md_metal_ceil_div(unsigned long long a, unsigned long long b)
{
    return (unsigned)((a + b - 1) / b);
}

void md_metal_grid_1d(unsigned long long n, unsigned tpg, unsigned max_groups, unsigned grid[3], unsigned tg[3])
{
    unsigned long long groups = n ? (n + tpg - 1) / tpg : 1;
    if (groups > max_groups) groups = max_groups;
    grid[0] = (unsigned)groups;
    grid[1] = grid[2] = 1;
    tg[0] = tpg;
    tg[1] = tg[2] = 1;
}

void md_metal_grid_tiles(int m, int n, int batch, unsigned grid[3], unsigned tg[3])
{
    grid[0] = n > 0 ? md_metal_ceil_div((unsigned long long)n, MD_MTL_MM_BN) : 1;
    grid[1] = m > 0 ? md_metal_ceil_div((unsigned long long)m, MD_MTL_MM_BM) : 1;
    grid[2] = batch > 0 ? (unsigned)batch : 1;
    tg[0] = MD_MTL_MM_TX;
    tg[1] = MD_MTL_MM_TY;
    tg[2] = 1;
}

void md_metal_grid_rows(int rows, unsigned tpg, unsigned grid[3], unsigned tg[3])
{
    grid[0] = rows > 0 ? (unsigned)rows : 1;
    grid[1] = grid[2] = 1;
    tg[0] = tpg;
    tg[1] = tg[2] = 1;
}
