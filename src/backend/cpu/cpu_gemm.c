/* cpu_gemm.c - GEMM on OpenBLAS (fp16/bf16 converted to fp32 scratch),
 * single-threaded calls on tiles run by the pool. */
#include <cblas.h>
#include <stdlib.h>

#include "backend/cpu/cpu_internal.h"
#include "core/threadpool.h"

/* OpenBLAS runs single-threaded (cpu_open); its own threads would spin with
 * sched_yield against our pool on every switch between a GEMM and an
 * element-wise kernel. Instead a large GEMM is cut into tiles of C that the
 * pool runs: strips of rows or columns along its longer side, or, where that
 * side is too short for two strips, k cut into parts over a long k (a linear
 * layer's 128 x 128 output over k = 3136, a 1x1 convolution's filter
 * gradient: 128 x 64 over k = 16384), whose products are added in a fixed
 * order, and a grid of blocks over a short one; strips or a grid that leave
 * threads idle over a long k get k parts too. Tiles and parts
 * depend only on the shape, so results do not depend on the thread count
 * (they may differ from one whole call in the last bits: OpenBLAS's kernels
 * for edge blocks round their own way, and parts are summed apart). */
#define GEMM_TILE_FLOPS (8.0 * 1024 * 1024) /* below this a tile is not worth a thread */
#define GEMM_TILES 64                       /* at most */
#define GEMM_STRIP 128                      /* strips: at least this many rows or columns */
#define GEMM_BLOCK 32                       /* grid blocks: at least this many of both */
#define GEMM_KPART 256                      /* k parts: at least this long */
#define GEMM_KPARTS 16                      /* at most */

struct sgemm_ctx {
    int ta, tb, m, n, k, lda, ldb, ldc;
    int rtile, ctile, ncols; /* tile sides; tiles per row of the grid */
    int kparts, kpart;       /* k cut into kparts of kpart (the last shorter); 1, k: not cut */
    float alpha, beta;
    const float *A, *B;
    float *C;
    float *part; /* kparts > 1: kparts partial m x n products, dense */
};

static void sgemm_tile_range(void *vc, long long b, long long e)
{
    const struct sgemm_ctx *c = vc;
    for (long long t = b; t < e; t++) {
        int tile = (int)(t / c->kparts), kp = (int)(t % c->kparts);
        int r0 = tile / c->ncols * c->rtile, c0 = tile % c->ncols * c->ctile;
        int rn = c->m - r0 < c->rtile ? c->m - r0 : c->rtile, cn = c->n - c0 < c->ctile ? c->n - c0 : c->ctile;
        int k0 = kp * c->kpart, kn = c->k - k0 < c->kpart ? c->k - k0 : c->kpart;
        /* rows r0.. of op(A) and C, columns c0.. of op(B) and C, k0.. of both */
        const float *A = c->A + (c->ta ? (size_t)k0 * c->lda + r0 : (size_t)r0 * c->lda + k0);
        const float *B = c->B + (c->tb ? (size_t)c0 * c->ldb + k0 : (size_t)k0 * c->ldb + c0);
        if (c->kparts > 1) /* this part's product alone, summed by sum_parts_range */
            cblas_sgemm(CblasRowMajor, c->ta ? CblasTrans : CblasNoTrans, c->tb ? CblasTrans : CblasNoTrans, rn, cn,
                        kn, 1.0f, A, c->lda, B, c->ldb, 0.0f, c->part + (size_t)kp * c->m * c->n + (size_t)r0 * c->n + c0,
                        c->n);
        else
            cblas_sgemm(CblasRowMajor, c->ta ? CblasTrans : CblasNoTrans, c->tb ? CblasTrans : CblasNoTrans, rn, cn,
                        kn, c->alpha, A, c->lda, B, c->ldb, c->beta, c->C + (size_t)r0 * c->ldc + c0, c->ldc);
    }
}

/* C = alpha (part 0 + part 1 + ...) + beta C, the parts added in order; rows. */
static void sum_parts_range(void *vc, long long b, long long e)
{
    const struct sgemm_ctx *c = vc;
    size_t mn = (size_t)c->m * c->n;
    for (long long i = b; i < e; i++) {
        float *row = c->C + (size_t)i * c->ldc;
        const float *p = c->part + (size_t)i * c->n;
        for (int j = 0; j < c->n; j++) {
            float sum = p[j];
            for (int kp = 1; kp < c->kparts; kp++) sum += p[(size_t)kp * mn + j];
            row[j] = c->beta != 0.0f ? c->alpha * sum + c->beta * row[j] : c->alpha * sum;
        }
    }
}

/* A side of `len` cut into at most `parts` pieces: the piece length, rounded
 * up to 16. */
static int piece(int len, int parts)
{
    int p = (len + parts - 1) / parts;
    return (p + 15) / 16 * 16;
}

void md_cpu_sgemm(int ta, int tb, int m, int n, int k, float alpha, const float *A, int lda, const float *B, int ldb,
                  float beta, float *C, int ldc)
{
    if (m <= 0 || n <= 0) return;
    double flops = 2.0 * m * n * (k > 0 ? k : 1);
    double wantf = flops / GEMM_TILE_FLOPS;
    int want = wantf > GEMM_TILES ? GEMM_TILES : (int)wantf;
    struct sgemm_ctx c = {ta, tb, m, n, k, lda, ldb, ldc, m, n, 1, 1, k, alpha, beta, A, B, C, NULL};
    /* strips along the longer side, at least GEMM_STRIP wide: thinner ones
     * run OpenBLAS's kernels at a fraction of their speed and repack the
     * shared operand */
    int by_rows = n < m, side = by_rows ? m : n;
    int strips = want < side / GEMM_STRIP ? want : side / GEMM_STRIP;
    int rows = m / GEMM_BLOCK < want ? m / GEMM_BLOCK : want, cols = n / GEMM_BLOCK < want ? n / GEMM_BLOCK : want;
    if (rows < 1) rows = 1;
    if (cols < 1) cols = 1;
    while (rows * cols > want && rows * cols > 1) { /* the grid: fewer pieces where they are thinner */
        if (rows > 1 && (cols == 1 || m / rows < n / cols)) rows--;
        else cols--;
    }
    int tiles = strips > rows * cols ? strips : rows * cols;
    /* both sides too short for strips over a long k (a linear layer's batch
     * x 128 over k = 3136): k parts alone, each operand packed once, instead
     * of a grid that packs each row block of A once per column block and the
     * other way round (128 x 128 x 3136 at 2 threads: 135 -> 157 GFLOP/s) */
    if (strips < 2 && k >= 2 * GEMM_KPART) rows = cols = tiles = 1;
    /* a small output over a long k (a 1x1 convolution's filter gradient):
     * k cut into parts too, their products added in a fixed order */
    int kparts = tiles > 0 ? want / tiles : want;
    if (kparts > k / GEMM_KPART) kparts = k / GEMM_KPART;
    if (kparts > GEMM_KPARTS) kparts = GEMM_KPARTS;
    if (kparts > 1) {
        c.part = malloc((size_t)kparts * m * n * sizeof(float));
        if (!c.part) kparts = 1; /* then as many tiles as there are */
    }
    if (kparts < 2) kparts = 1;
    if (k <= 0 || (tiles < 2 && kparts < 2)) {
        cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, A,
                    lda, B, ldb, beta, C, ldc);
        return;
    }
    if (strips >= rows * cols) {
        if (strips >= 2 && by_rows) c.rtile = piece(m, strips);
        else if (strips >= 2) c.ctile = piece(n, strips);
    } else {
        c.rtile = piece(m, rows);
        c.ctile = piece(n, cols);
    }
    c.ncols = (n + c.ctile - 1) / c.ctile;
    c.kparts = kparts;
    c.kpart = (k + kparts - 1) / kparts;
    long long ntiles = (long long)((m + c.rtile - 1) / c.rtile) * c.ncols;
    md_parallel_for(ntiles * kparts, 1, sgemm_tile_range, &c);
    if (kparts > 1) {
        md_parallel_for(m, 16, sum_parts_range, &c);
        free(c.part);
    }
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
