/* cpu_gemm.c - GEMM on OpenBLAS (fp16/bf16 converted to fp32 scratch),
 * single-threaded calls on tiles run by the pool. */
#include <cblas.h>

#include "backend/cpu/cpu_internal.h"
#include "core/threadpool.h"

/* OpenBLAS runs single-threaded (cpu_open); its own threads would spin with
 * sched_yield against our pool on every switch between a GEMM and an
 * element-wise kernel. Instead a large GEMM is cut into column (or row) tiles
 * of C that the pool runs. Tile boundaries depend only on the shape, and a
 * tile's elements are computed exactly as in one whole call (the k order is
 * OpenBLAS's), so results do not depend on the thread count. */
#define GEMM_TILE_FLOPS (8.0 * 1024 * 1024) /* below this a tile is not worth a thread */
#define GEMM_TILES 8                        /* at most; enough to balance 2-4 threads */

struct sgemm_ctx {
    int ta, tb, m, n, k, lda, ldb, ldc, by_rows, tile;
    float alpha, beta;
    const float *A, *B;
    float *C;
};

static void sgemm_tile_range(void *vc, long long b, long long e)
{
    const struct sgemm_ctx *c = vc;
    for (long long t = b; t < e; t++) {
        int lo = (int)t * c->tile, hi = lo + c->tile;
        int len = (c->by_rows ? c->m : c->n) - lo;
        if (hi - lo < len) len = hi - lo;
        if (c->by_rows) /* rows lo.. of op(A) and C */
            cblas_sgemm(CblasRowMajor, c->ta ? CblasTrans : CblasNoTrans, c->tb ? CblasTrans : CblasNoTrans, len,
                        c->n, c->k, c->alpha, c->A + (c->ta ? (size_t)lo : (size_t)lo * c->lda), c->lda, c->B, c->ldb,
                        c->beta, c->C + (size_t)lo * c->ldc, c->ldc);
        else /* columns lo.. of op(B) and C */
            cblas_sgemm(CblasRowMajor, c->ta ? CblasTrans : CblasNoTrans, c->tb ? CblasTrans : CblasNoTrans, c->m,
                        len, c->k, c->alpha, c->A, c->lda, c->B + (c->tb ? (size_t)lo * c->ldb : (size_t)lo), c->ldb,
                        c->beta, c->C + lo, c->ldc);
    }
}

void md_cpu_sgemm(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda, const float *B, int ldb,
                  float beta, float *C, int ldc)
{
    if (m <= 0 || n <= 0) return;
    double flops = 2.0 * m * n * (k > 0 ? k : 1);
    int tiles = (int)(flops / GEMM_TILE_FLOPS);
    if (tiles > GEMM_TILES) tiles = GEMM_TILES;
    struct sgemm_ctx c = {ta, tb, m, n, k, lda, ldb, ldc, n < m, 0, alpha, beta, A, B, C};
    /* tiles of at least 128 rows or columns: thinner ones run OpenBLAS's
     * kernels at a fraction of their speed and repack the shared operand */
    int dim = c.by_rows ? m : n, align = 16;
    if (tiles > dim / 128) tiles = dim / 128;
    if (tiles < 2 || k <= 0) {
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, A,
                    lda, B, ldb, beta, C, ldc);
        return;
    }
    c.tile = (dim + tiles - 1) / tiles;
    c.tile = (c.tile + align - 1) / align * align;
    md_parallel_for((dim + c.tile - 1) / c.tile, 1, sgemm_tile_range, &c);
}

static size_t gemm_extent(int batch, long long stride, int rows, int ld, int cols)
{
    if (rows <= 0 || cols <= 0) return 0;
    return (size_t)((long long)(batch - 1) * stride + (long long)(rows - 1) * ld + cols);
}

static void sgemm_batch(const struct md_gemm_args *a, const float *A, const float *B, float *C, float beta)
{
    for (int bi = 0; bi < a->batch; bi++)
        md_cpu_sgemm(a->trans_a, a->trans_b, a->m, a->n, a->k, a->alpha, A + bi * a->stride_a, a->lda,
                     B + bi * a->stride_b, a->ldb, beta, C + bi * a->stride_c, a->ldc);
}

md_status md_cpu_gemm(md_device *dev, const struct md_gemm_args *a)
{
    (void)dev;
    if (!md_cpu_float_type(a->dtype))
        return md_errf(MD_ERR_UNSUPPORTED, "cpu gemm: dtype %s is not supported", md_dtype_name(a->dtype));
    if (a->m <= 0 || a->n <= 0 || a->batch <= 0) return MD_OK;
    if (a->dtype == MD_F32) {
        sgemm_batch(a, a->a, a->b, a->c, a->beta);
        return MD_OK;
    }
    /* fp16/bf16: storage only; convert to fp32, multiply, convert back */
    size_t na = gemm_extent(a->batch, a->stride_a, a->trans_a ? a->k : a->m, a->lda, a->trans_a ? a->m : a->k);
    size_t nb = gemm_extent(a->batch, a->stride_b, a->trans_b ? a->n : a->k, a->ldb, a->trans_b ? a->k : a->n);
    size_t nc = gemm_extent(a->batch, a->stride_c, a->m, a->ldc, a->n);
    md_status st = MD_OK;
    md_cpu_lock();
    float *A = md_cpu_scratch(CPU_SCR_X32, (na ? na : 1) * 4);
    float *B = md_cpu_scratch(CPU_SCR_W32, (nb ? nb : 1) * 4);
    float *C = md_cpu_scratch(CPU_SCR_Y32, nc * 4);
    if (!A || !B || !C) {
        st = MD_ERR_OOM;
        goto done;
    }
    md_cpu_to_f32(a->a, a->dtype, na, A);
    md_cpu_to_f32(a->b, a->dtype, nb, B);
    for (int bi = 0; bi < a->batch; bi++)
        for (int i = 0; i < a->m; i++) {
            size_t o = (size_t)(bi * a->stride_c) + (size_t)i * a->ldc;
            for (int j = 0; j < a->n; j++) C[o + j] = a->beta != 0.0f ? md_load_f(a->c, a->dtype, o + j) : 0.0f;
        }
    sgemm_batch(a, A, B, C, a->beta);
    for (int bi = 0; bi < a->batch; bi++)
        for (int i = 0; i < a->m; i++) {
            size_t o = (size_t)(bi * a->stride_c) + (size_t)i * a->ldc;
            for (int j = 0; j < a->n; j++) md_store_f(a->c, a->dtype, o + j, C[o + j]);
        }
done:
    md_cpu_unlock();
    return st;
}
