/* cpu_conv.c - 2-D convolution forward, backward-data and backward-filter on
 * the CPU: im2col / col2im (threaded with the pool) around OpenBLAS sgemm
 * (threaded by OpenBLAS; never both at once).
 *
 * NCHW, per group g and a chunk of nb images:
 *   col (Cg*R*S, nb*P*Q)  <- im2col(x)
 *   fwd:    tmp (Kg, nb*P*Q) = W_g (Kg, Cg*R*S) @ col, scattered into y (n, K, P*Q)
 *   data:   col = W_g^T @ dy_g (gathered to (Kg, nb*P*Q)); dx += col2im(col)
 *   filter: dW_g += dy_g @ col^T
 * NHWC, per group and a chunk of rows (n*P*Q rows):
 *   col (rows, R*S*Cg)  <- im2col(x)
 *   fwd:    y[rows, g*Kg:] = col @ W_g^T          (W_g is (Kg, R*S*Cg): KRSC)
 *   data:   col = dy[rows, g*Kg:] @ W_g; dx += col2im(col)
 *   filter: dW_g += dy[rows, g*Kg:]^T @ col
 * A 1x1, stride-1, unpadded convolution skips im2col (x is its own col).
 * On CPUs with AVX-512 or AVX2, one-group convolutions go to the direct
 * kernels of cpu_conv_direct.c instead (run_f32 and data_via_fwd decide;
 * a channels-last strided backward-data as one direct forward per phase);
 * forward and backward-filter with C*R*S < 16 (first layers) to those of
 * cpu_conv_small.c on every CPU.
 * Chunks keep the col buffer under COL_BYTES (cache-resident), at least one
 * image or row per chunk.
 * fp16/bf16 are converted to fp32 scratch and back (storage types on the CPU).
 */
#include <stdlib.h>
#include <string.h>

#include <cblas.h>

#include "backend/cpu/cpu_conv_direct.h"
#include "backend/cpu/cpu_conv_small.h"
#include "backend/cpu/cpu_conv_wino.h"
#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/cpu_kernels.h"
#include "core/mem.h"

/* col buffer per chunk: small enough to stay in the last-level cache between
 * im2col writing it and the GEMM reading it, big enough for efficient GEMMs
 * (N >= ~1000 columns on the layers of resnet18_cifar and small_cnn). */
#define COL_BYTES ((size_t)4 << 20)

struct geom {
    int n, c, h, w, k, r, s, p, q;
    int sh, sw, ph, pw, dh, dw, g, cg, kg;
    int crs, pq;
    int is_1x1; /* 1x1, stride 1, no padding */
    int same1;  /* stride 1, dilation 1, q == w: NCHW im2col rows are shifted runs */
    void *ws; size_t ws_bytes; /* the caller's workspace, if any */
};

/* The im2col buffer: the caller's workspace when it is big enough, else the
 * backend's scratch (kept and grown between calls). */
static float *col_buffer(const struct geom *g, size_t bytes)
{
    if (g->ws && g->ws_bytes >= bytes) return g->ws;
    return md_cpu_scratch(CPU_SCR_COL, bytes);
}

static md_status geom_init(const char *op, const struct md_conv2d_args *a, struct geom *o)
{
    if (!md_cpu_float_type(a->dtype))
        return md_errf(MD_ERR_UNSUPPORTED, "cpu %s: dtype %s is not supported", op, md_dtype_name(a->dtype));
    if (a->groups < 1 || a->c % a->groups || a->k % a->groups)
        return md_errf(MD_ERR_INTERNAL, "cpu %s: groups %d must divide c %d and k %d", op, a->groups, a->c, a->k);
    if (a->p != md_conv_out(a->h, a->r, a->stride_h, a->pad_h, a->dil_h) ||
        a->q != md_conv_out(a->w, a->s, a->stride_w, a->pad_w, a->dil_w) || a->p <= 0 || a->q <= 0)
        return md_errf(MD_ERR_INTERNAL, "cpu %s: output %dx%d does not match input %dx%d", op, a->p, a->q, a->h,
                       a->w);
    *o = (struct geom){a->n, a->c, a->h, a->w, a->k, a->r, a->s, a->p, a->q, a->stride_h, a->stride_w, a->pad_h,
                       a->pad_w, a->dil_h, a->dil_w, a->groups, a->c / a->groups, a->k / a->groups, 0, 0, 0, 0,
                       a->workspace, a->workspace_bytes};
    o->crs = o->cg * o->r * o->s;
    o->pq = o->p * o->q;
    o->is_1x1 = o->r == 1 && o->s == 1 && o->sh == 1 && o->sw == 1 && o->ph == 0 && o->pw == 0;
    o->same1 = o->sh == 1 && o->sw == 1 && o->dh == 1 && o->dw == 1 && o->q == o->w;
    return MD_OK;
}

/* The direct AVX-512 kernels (cpu_conv_direct.c) take one-group convolutions
 * where the CPU has them; 0 when they do not apply. */
static int direct_geom(const struct geom *g, struct md_dconv *d)
{
    if (g->g != 1) return 0;
    *d = (struct md_dconv){g->n, g->c, g->h, g->w, g->k, g->r, g->s, g->p, g->q, g->sh, g->sw, g->ph, g->pw, g->dh, g->dw};
    return 1;
}

static void sgemm(int ta, int tb, int m, int n, int k, const float *A, int lda, const float *B, int ldb, float beta,
                  float *C, int ldc)
{
    md_cpu_sgemm(ta, tb, m, n, k, 1.0f, A, lda, B, ldb, beta, C, ldc);
}

/* Valid output range [lo, hi) along one axis for filter tap `t`:
 * in = o*stride - pad + t*dil must lie in [0, size). */
static void valid_range(int out, int size, int stride, int pad, int t, int dil, int *lo, int *hi)
{
    int off = t * dil - pad; /* in = o*stride + off */
    int l = off >= 0 ? 0 : (-off + stride - 1) / stride;
    int h = size - off <= 0 ? 0 : (size - off + stride - 1) / stride; /* first o with in >= size */
    if (h > out) h = out;
    if (l > h) l = h;
    *lo = l;
    *hi = h;
}

/* Tasks per pool chunk so that a chunk moves about 8K floats: tiny tasks
 * (a 4x4 plane) would cost more in scheduling than in copying. */
static long long task_grain(size_t floats_per_task)
{
    size_t g = 8192 / (floats_per_task ? floats_per_task : 1);
    return g > 0 ? (long long)g : 1;
}

/* ================= NCHW ================================================== */

struct nchw_ctx {
    const struct geom *g;
    float *col;      /* (crs, ld) */
    int ld, n0, grp;
    float *dx;       /* col2im target */
    float beta;
};

/* The per-thread buffers of the pipelines: per_thread floats for each of the
 * pool's threads (the backend's scratch; NULL when out of memory). */
static float *thread_buffers(size_t per_thread)
{
    return md_cpu_scratch(CPU_SCR_COL, sizeof(float) * per_thread * (size_t)md_threadpool_size());
}

/* y = t + beta * y over n floats (y = t when beta is 0). */
static void store_beta(float *y, const float *t, size_t n, float beta)
{
    if (beta == 0.0f)
        memcpy(y, t, sizeof(float) * n);
    else
        for (size_t i = 0; i < n; i++) y[i] = t[i] + beta * y[i];
}

/* y *= beta over n floats, before sums are added into it (0: zeroed). */
static void scale_beta(float *y, size_t n, float beta)
{
    if (beta == 0.0f)
        memset(y, 0, sizeof(float) * n);
    else if (beta != 1.0f)
        for (size_t i = 0; i < n; i++) y[i] *= beta;
}

/* Stride 1 and q == w (g->same1): nrows rows of q values read (or written)
 * as one run of the plane shifted by off hold, in the columns that wrapped
 * around a row edge, values of the wrong row: zero them. */
static inline void zero_wrapped(float *d, int nrows, int q, int off)
{
    for (int p = 0; p < nrows; p++) {
        float *o = d + (size_t)p * q;
        if (off < 0)
            for (int j = 0; j < -off; j++) o[j] = 0.0f;
        else
            for (int j = q - off; j < q; j++) o[j] = 0.0f;
    }
}

/* im2col of output rows [p0, p1) of one input channel plane xp: col rows
 * r*S + s (row stride ld) hold (p1-p0)*Q values each. */
static void im2col_rows(const struct geom *g, const float *xp, float *dst, size_t ld, int p0, int p1)
{
    size_t nq = (size_t)g->q;
    for (int r = 0; r < g->r; r++) {
        int plo, phi;
        valid_range(g->p, g->h, g->sh, g->ph, r, g->dh, &plo, &phi);
        int lo = plo > p0 ? plo : p0, hi = phi < p1 ? phi : p1;
        if (hi < lo) hi = lo;
        for (int s = 0; s < g->s; s++) {
            int qlo, qhi;
            valid_range(g->q, g->w, g->sw, g->pw, s, g->dw, &qlo, &qhi);
            float *row = dst + (size_t)(r * g->s + s) * ld;
            int off = s * g->dw - g->pw; /* wi = q*sw + off, >= 0 for q >= qlo */
            memset(row, 0, sizeof(float) * (size_t)(lo - p0) * nq);
            memset(row + (size_t)(hi - p0) * nq, 0, sizeof(float) * (size_t)(p1 - hi) * nq);
            if (hi <= lo) continue;
            if (g->same1 && off > -g->w && off < g->w) {
                /* stride 1, output as wide as the input: rows lo..hi-1 are one
                 * shifted run of the plane; the columns that wrapped around a
                 * row edge are zeroed afterwards */
                size_t len = (size_t)(hi - lo) * nq, cut = (size_t)abs(off);
                float *d = row + (size_t)(lo - p0) * nq;
                const float *src = xp + (size_t)(lo - g->ph + r * g->dh) * g->w + off;
                size_t skip = off < 0 ? cut : 0; /* never read before the plane or past it */
                memcpy(d + skip, src + skip, sizeof(float) * (len - cut));
                zero_wrapped(d, hi - lo, g->q, off);
                continue;
            }
            for (int p = lo; p < hi; p++) {
                /* plain loops: on late layers rows are a few elements, where
                 * memset/memcpy calls cost more than the copy */
                float *o = row + (size_t)(p - p0) * nq;
                const float *xr = xp + (size_t)(p * g->sh - g->ph + r * g->dh) * g->w;
                for (int q = 0; q < qlo; q++) o[q] = 0.0f;
                if (g->sw == 1 && qhi - qlo >= 32)
                    memcpy(o + qlo, xr + qlo + off, sizeof(float) * (size_t)(qhi - qlo));
                else if (g->sw == 1)
                    for (int q = qlo; q < qhi; q++) o[q] = xr[q + off];
                else
                    for (int q = qlo; q < qhi; q++) o[q] = xr[q * g->sw + off];
                for (int q = qhi; q < g->q; q++) o[q] = 0.0f;
            }
        }
    }
}

/* im2col of images [n0, n0+cnt) of group grp, all output rows: col (crs,
 * ld), image i in columns [i*pq, (i+1)*pq). */
static void im2col_images(const struct geom *g, const float *x, int n0, int cnt, int grp, float *col, size_t ld)
{
    for (int img = 0; img < cnt; img++)
        for (int cg = 0; cg < g->cg; cg++)
            im2col_rows(g, x + ((size_t)(n0 + img) * g->c + (size_t)grp * g->cg + cg) * g->h * g->w,
                        col + (size_t)cg * g->r * g->s * ld + (size_t)img * g->pq, ld, 0, g->p);
}

/* dst (nk, ld) <- channels [k0, k0+nk) of dy (n, K, P*Q) for images [n0,
 * n0+cnt): image i in columns [i*pq, (i+1)*pq). */
static void gather_images(const struct geom *g, const float *dy, int n0, int cnt, int k0, int nk, float *dst,
                          size_t ld)
{
    for (int img = 0; img < cnt; img++)
        for (int k = 0; k < nk; k++)
            memcpy(dst + (size_t)k * ld + (size_t)img * g->pq, dy + ((size_t)(n0 + img) * g->k + k0 + k) * g->pq,
                   sizeof(float) * (size_t)g->pq);
}

/* ---- forward on large planes: per-thread im2col + GEMM pipelines ----------
 * A task is (image, block of output rows, group): its im2col tile (crs x
 * rows*Q, sized for the core's L2) goes straight into a single-threaded GEMM
 * that writes y in place (with beta): no col round trip through memory, no
 * scatter, no barrier between im2col and GEMM. Each output element is one
 * GEMM's, so results do not depend on the thread count. */

#define TILE_FLOATS (192 * 1024) /* 768 KiB of col per thread */

struct tile_ctx {
    const struct geom *g;
    const float *x, *w;
    float *y, *buf;
    float beta;
    int rows, nblk;
    size_t per_thread;
    /* backward-filter */
    const float *dy;
    float *part; /* (FILTER_SLOTS, k, crs) */
    long long ntasks;
};

/* A task's im2col tile; returns its columns, sets *p0 and *grp. */
static size_t tile_im2col(const struct tile_ctx *c, long long t, float *col, int *p0_out, int *img_out, int *grp_out)
{
    const struct geom *g = c->g;
    int grp = (int)(t % g->g);
    long long u = t / g->g;
    int img = (int)(u / c->nblk), p0 = (int)(u % c->nblk) * c->rows;
    int p1 = p0 + c->rows < g->p ? p0 + c->rows : g->p;
    size_t len = (size_t)(p1 - p0) * g->q;
    for (int cg = 0; cg < g->cg; cg++)
        im2col_rows(g, c->x + ((size_t)img * g->c + (size_t)grp * g->cg + cg) * g->h * g->w,
                    col + (size_t)cg * g->r * g->s * len, len, p0, p1);
    *p0_out = p0;
    *img_out = img;
    *grp_out = grp;
    return len;
}

static void tile_fwd_range(void *vc, long long b, long long e)
{
    const struct tile_ctx *c = vc;
    const struct geom *g = c->g;
    float *col = c->buf + (size_t)md_parallel_thread_id() * c->per_thread;
    for (long long t = b; t < e; t++) {
        int p0, img, grp;
        size_t len = tile_im2col(c, t, col, &p0, &img, &grp);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->kg, (int)len, g->crs, 1.0f,
                    c->w + (size_t)grp * g->kg * g->crs, g->crs, col, (int)len, c->beta,
                    c->y + ((size_t)img * g->k + (size_t)grp * g->kg) * g->pq + (size_t)p0 * g->q, g->pq);
    }
}

/* Worth it where a plane gives GEMMs of >= 128 columns per task. */
static int tiled_fwd_ok(const struct geom *g) { return !g->is_1x1 && g->pq >= 256; }

/* Rows per task and the per-thread col tiles. */
static md_status tile_init(const struct geom *g, struct tile_ctx *c)
{
    int cols = TILE_FLOATS / g->crs;
    if (cols < 128) cols = 128;
    c->g = g;
    c->rows = (cols + g->q - 1) / g->q;
    if (c->rows > g->p) c->rows = g->p;
    c->nblk = (g->p + c->rows - 1) / c->rows;
    c->ntasks = (long long)g->n * c->nblk * g->g;
    c->per_thread = (size_t)g->crs * c->rows * g->q;
    c->buf = thread_buffers(c->per_thread);
    return c->buf ? MD_OK : MD_ERR_OOM;
}

static md_status tiled_fwd_nchw(const struct geom *g, const float *x, const float *w, float *y, float beta)
{
    struct tile_ctx c = {.x = x, .w = w, .y = y, .beta = beta};
    MD_TRY(tile_init(g, &c));
    md_parallel_for(c.ntasks, 1, tile_fwd_range, &c);
    return MD_OK;
}

/* Images per chunk of the per-thread pipelines: GEMMs of >= 256 columns
 * (the weights reused enough per packing), or as many as fit the tile size. */
static int pipeline_images(const struct geom *g)
{
    size_t by_cols = (256 + (size_t)g->pq - 1) / (size_t)g->pq, by_mem = TILE_FLOATS * 4 / ((size_t)g->crs * g->pq);
    size_t nb = by_cols > by_mem ? by_cols : by_mem;
    if (nb >= (size_t)g->n) return g->n;
    /* chunks in a multiple of 4 (of similar size), so that 2 or 4 threads
     * and the 4 filter partials get equal shares */
    size_t n = (size_t)g->n, chunks = ((n + nb - 1) / nb + 3) / 4 * 4;
    return (int)((n + chunks - 1) / chunks);
}

/* Forward on small planes (pq < 256): a task is (a fixed chunk of nb images,
 * group): im2col of its images, one single-threaded GEMM over nb*pq columns
 * (>= 256, so the weights are reused enough per packing) and the scatter to
 * y, all in the thread's own buffers, with no barrier in between. */

struct chunk_ctx {
    const struct geom *g;
    const float *x, *w, *dy; /* what the pipeline reads */
    float *out, *buf;        /* out: y, dx or the dw partials (FILTER_SLOTS, k, crs) */
    float beta;
    int nb, nchunks;         /* images per chunk, chunks */
    size_t per_thread;
};

/* Fixed chunks of pipeline_images(g) images and per-thread buffers of
 * `rows` (col and a GEMM operand) x the chunk's columns. */
static md_status chunk_init(const struct geom *g, size_t rows, struct chunk_ctx *c)
{
    c->g = g;
    c->nb = pipeline_images(g);
    c->nchunks = (g->n + c->nb - 1) / c->nb;
    c->per_thread = rows * (size_t)c->nb * g->pq;
    c->buf = thread_buffers(c->per_thread);
    return c->buf ? MD_OK : MD_ERR_OOM;
}

/* The calling thread's buffer. */
static float *chunk_buf(const struct chunk_ctx *c) { return c->buf + (size_t)md_parallel_thread_id() * c->per_thread; }

/* The images of the chunk that starts at image n0. */
static int chunk_count(const struct chunk_ctx *c, int n0) { return c->g->n - n0 < c->nb ? c->g->n - n0 : c->nb; }

static void chunk_fwd_range(void *vc, long long b, long long e)
{
    const struct chunk_ctx *c = vc;
    const struct geom *g = c->g;
    float *col = chunk_buf(c);
    for (long long t = b; t < e; t++) {
        int grp = (int)(t % g->g), n0 = (int)(t / g->g) * c->nb;
        int cnt = chunk_count(c, n0);
        size_t ld = (size_t)cnt * g->pq;
        float *tmp = col + (size_t)g->crs * ld;
        im2col_images(g, c->x, n0, cnt, grp, col, ld);
        const float *wg = c->w + (size_t)grp * g->kg * g->crs;
        float *y0 = c->out + ((size_t)n0 * g->k + (size_t)grp * g->kg) * g->pq;
        if (cnt == 1) {
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->kg, g->pq, g->crs, 1.0f, wg, g->crs, col,
                        (int)ld, c->beta, y0, g->pq);
            continue;
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->kg, (int)ld, g->crs, 1.0f, wg, g->crs, col,
                    (int)ld, 0.0f, tmp, (int)ld);
        for (int img = 0; img < cnt; img++)
            for (int k = 0; k < g->kg; k++)
                store_beta(y0 + ((size_t)img * g->k + k) * g->pq, tmp + (size_t)k * ld + (size_t)img * g->pq,
                           (size_t)g->pq, c->beta);
    }
}

static md_status chunked_fwd_nchw(const struct geom *g, const float *x, const float *w, float *y, float beta)
{
    struct chunk_ctx c = {.x = x, .w = w, .out = y, .beta = beta};
    MD_TRY(chunk_init(g, (size_t)(g->crs + g->kg), &c));
    md_parallel_for((long long)c.nchunks * g->g, 1, chunk_fwd_range, &c);
    return MD_OK;
}

/* ---- forward, stride 1, dilation 1, one group: shifted GEMMs ---------------
 * Per image, x is copied once into zero-padded channel planes of Hp x Wp
 * (Hp = H + 2ph, Wp = W + 2pw; plane stride L >= Hp*Wp + S). The output is
 * computed on the padded-width grid (P rows x Wp columns; the last S-1 of
 * each row are junk): for tap (r, s) the input it needs is, in every plane,
 * the contiguous run of P*Wp values from r*Wp + s, i.e. a (C, P*Wp) matrix of
 * leading dimension L. So grid (K, P*Wp) = sum over taps W_rs (K, C) @ that
 * slice: R*S GEMMs accumulating in place, with no im2col at all. The last
 * slice ends at (R-1)*Wp + S-1 + P*Wp = Hp*Wp + S-1, inside the plane's zeroed
 * tail. The valid Q columns of each grid row then go to y (with beta). Each
 * output element is one task's, so results do not depend on the thread count. */

struct shift_ctx {
    const struct geom *g;
    const float *x, *wt; /* wt: (R*S, K, C) */
    float *y, *buf;
    float beta;
    int hp, wp;
    size_t plane, per_thread; /* plane: L */
};

/* Zero-padded copy of one image's (C, H, W) planes into (C, L). */
static void shift_pad(const struct shift_ctx *c, const float *xi, float *xp)
{
    const struct geom *g = c->g;
    size_t head = (size_t)g->ph * c->wp + g->pw, gap = 2 * (size_t)g->pw;
    for (int ch = 0; ch < g->c; ch++) {
        const float *src = xi + (size_t)ch * g->h * g->w;
        float *d = xp + (size_t)ch * c->plane;
        memset(d, 0, sizeof(float) * head);
        size_t pos = head;
        for (int i = 0; i < g->h; i++) {
            memcpy(d + pos, src + (size_t)i * g->w, sizeof(float) * (size_t)g->w);
            pos += (size_t)g->w;
            if (i + 1 < g->h) {
                memset(d + pos, 0, sizeof(float) * gap);
                pos += gap;
            }
        }
        memset(d + pos, 0, sizeof(float) * (c->plane - pos));
    }
}

static void shift_fwd_range(void *vc, long long b, long long e)
{
    const struct shift_ctx *c = vc;
    const struct geom *g = c->g;
    float *xp = c->buf + (size_t)md_parallel_thread_id() * c->per_thread;
    float *grid = xp + (size_t)g->c * c->plane;
    int ncol = g->p * c->wp;
    for (long long img = b; img < e; img++) {
        shift_pad(c, c->x + (size_t)img * g->c * g->h * g->w, xp);
        for (int r = 0; r < g->r; r++)
            for (int s = 0; s < g->s; s++) {
                int tap = r * g->s + s;
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->k, ncol, g->c, 1.0f,
                            c->wt + (size_t)tap * g->k * g->c, g->c, xp + (size_t)r * c->wp + s, (int)c->plane,
                            tap ? 1.0f : 0.0f, grid, ncol);
            }
        for (int k = 0; k < g->k; k++)
            for (int p = 0; p < g->p; p++)
                store_beta(c->y + ((size_t)img * g->k + k) * g->pq + (size_t)p * g->q,
                           grid + (size_t)k * ncol + (size_t)p * c->wp, (size_t)g->q, c->beta);
    }
}

/* Where the junk columns and the thinner (K x C) GEMMs cost less than the
 * im2col they replace: planes of >= 256 outputs, one group. (Never on the
 * thread count: the choice of path would change the results.) */
static int shift_fwd_ok(const struct geom *g)
{
    return g->g == 1 && !g->is_1x1 && g->sh == 1 && g->sw == 1 && g->dh == 1 && g->dw == 1 && g->pq >= 256;
}

static md_status shift_fwd_nchw(const struct geom *g, const float *x, const float *w, float *y, float beta)
{
    struct shift_ctx c = {.g = g, .x = x, .y = y, .beta = beta};
    c.hp = g->h + 2 * g->ph;
    c.wp = g->w + 2 * g->pw;
    c.plane = ((size_t)c.hp * c.wp + (size_t)g->s + 15) / 16 * 16;
    c.per_thread = (size_t)g->c * c.plane + (size_t)g->k * g->p * c.wp;
    size_t rs = (size_t)g->r * g->s;
    float *wt = md_cpu_scratch(CPU_SCR_WTAP, sizeof(float) * rs * g->k * g->c);
    c.buf = thread_buffers(c.per_thread);
    if (!wt || !c.buf) return MD_ERR_OOM;
    /* (K, C, R, S) -> (R*S, K, C) */
    for (int k = 0; k < g->k; k++)
        for (int ch = 0; ch < g->c; ch++)
            for (size_t t = 0; t < rs; t++) wt[(t * g->k + k) * g->c + ch] = w[((size_t)k * g->c + ch) * rs + t];
    c.wt = wt;
    md_parallel_for(g->n, 1, shift_fwd_range, &c);
    return MD_OK;
}

/* Backward-filter on the same tiles: the tasks are cut into FILTER_SLOTS
 * fixed runs, each summing its GEMMs (dy tile @ col tile^T, dy read in place)
 * into its own dw partial in task order; partials are then added in slot
 * order. Neither depends on the thread count. */
#define FILTER_SLOTS 4

static void tile_filter_range(void *vc, long long b, long long e)
{
    const struct tile_ctx *c = vc;
    const struct geom *g = c->g;
    size_t nw = (size_t)g->k * g->crs;
    float *col = c->buf + (size_t)md_parallel_thread_id() * c->per_thread;
    for (long long slot = b; slot < e; slot++) {
        float *acc = c->part + (size_t)slot * nw;
        memset(acc, 0, sizeof(float) * nw);
        for (long long t = slot * c->ntasks / FILTER_SLOTS; t < (slot + 1) * c->ntasks / FILTER_SLOTS; t++) {
            int p0, img, grp;
            size_t len = tile_im2col(c, t, col, &p0, &img, &grp);
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g->kg, g->crs, (int)len, 1.0f,
                        c->dy + ((size_t)img * g->k + (size_t)grp * g->kg) * g->pq + (size_t)p0 * g->q, g->pq, col,
                        (int)len, 1.0f, acc + (size_t)grp * g->kg * g->crs, g->crs);
        }
    }
}

static void tile_sum_range(void *vc, long long b, long long e)
{
    const struct tile_ctx *c = vc;
    size_t nw = (size_t)c->g->k * c->g->crs;
    for (long long i = b; i < e; i++) {
        float v = 0.0f;
        for (int sl = 0; sl < FILTER_SLOTS; sl++) v += c->part[(size_t)sl * nw + (size_t)i];
        c->y[i] = c->beta != 0.0f ? v + c->beta * c->y[i] : v;
    }
}

static md_status tiled_filter_nchw(const struct geom *g, const float *x, const float *dy, float *dw, float beta)
{
    struct tile_ctx c = {.x = x, .dy = dy, .y = dw, .beta = beta};
    MD_TRY(tile_init(g, &c));
    c.part = md_cpu_scratch(CPU_SCR_TMP, sizeof(float) * FILTER_SLOTS * (size_t)g->k * g->crs);
    if (!c.part) return MD_ERR_OOM;
    md_parallel_for(FILTER_SLOTS, 1, tile_filter_range, &c);
    md_parallel_for((long long)g->k * g->crs, CPU_GRAIN, tile_sum_range, &c);
    return MD_OK;
}

/* col2im for one (image, channel-of-group) pair: dx plane = beta*dx + sum. */
static void col2im_nchw_range(void *vc, long long b, long long e)
{
    const struct nchw_ctx *c = vc;
    const struct geom *g = c->g;
    size_t hw = (size_t)g->h * g->w;
    for (long long t = b; t < e; t++) {
        int img = (int)(t / g->cg), cg = (int)(t % g->cg);
        float *dp = c->dx + ((size_t)(c->n0 + img) * g->c + (size_t)c->grp * g->cg + cg) * hw;
        scale_beta(dp, hw, c->beta);
        for (int r = 0; r < g->r; r++) {
            int plo, phi;
            valid_range(g->p, g->h, g->sh, g->ph, r, g->dh, &plo, &phi);
            for (int s = 0; s < g->s; s++) {
                int qlo, qhi;
                valid_range(g->q, g->w, g->sw, g->pw, s, g->dw, &qlo, &qhi);
                float *row = c->col + (size_t)((cg * g->r + r) * g->s + s) * c->ld + (size_t)img * g->pq;
                int off = s * g->dw - g->pw;
                if (g->same1 && off > -g->w && off < g->w) {
                    /* stride 1, output as wide as the input: zero the col
                     * entries of the columns that fall outside the plane (this
                     * task owns them), then add rows plo..phi-1 as one run */
                    if (phi <= plo) continue;
                    float *src = row + (size_t)plo * g->q;
                    zero_wrapped(src, phi - plo, g->q, off);
                    float *dst = dp + (size_t)(plo * g->sh - g->ph + r * g->dh) * g->w + off;
                    size_t len = (size_t)(phi - plo) * g->q, cut = (size_t)abs(off), b0 = off < 0 ? cut : 0;
                    for (size_t i = b0; i < b0 + len - cut; i++) dst[i] += src[i];
                    continue;
                }
                for (int p = plo; p < phi; p++) {
                    const float *o = row + (size_t)p * g->q;
                    float *xr = dp + (size_t)(p * g->sh - g->ph + r * g->dh) * g->w;
                    if (g->sw == 1)
                        for (int q = qlo; q < qhi; q++) xr[q + off] += o[q];
                    else
                        for (int q = qlo; q < qhi; q++) xr[q * g->sw + off] += o[q];
                }
            }
        }
    }
}

static int chunk_images(const struct geom *g, size_t per_image_floats)
{
    size_t nb = COL_BYTES / 4 / (per_image_floats ? per_image_floats : 1);
    if (nb < 1) nb = 1;
    if (nb > (size_t)g->n) nb = (size_t)g->n;
    return (int)nb;
}

/* A 1x1 convolution, forward (ta 0: y = W x) or backward-data (ta 1: dx =
 * W^T dy), per image and group: out (m per group, pq) from in (kk per group,
 * pq); cin and cout are in's and out's channels per image. */
static md_status gemm_1x1_nchw(const struct geom *g, int ta, int m, int kk, const float *w, const float *in, int cin,
                               float *out, int cout, float beta)
{
    for (int i = 0; i < g->n; i++)
        for (int grp = 0; grp < g->g; grp++)
            sgemm(ta, 0, m, g->pq, kk, w + (size_t)grp * g->kg * g->cg, g->cg,
                  in + ((size_t)i * cin + (size_t)grp * kk) * g->pq, g->pq, beta,
                  out + ((size_t)i * cout + (size_t)grp * m) * g->pq, g->pq);
    return MD_OK;
}

static md_status fwd_nchw(const struct geom *g, const float *x, const float *w, float *y, float beta)
{
    if (shift_fwd_ok(g)) return shift_fwd_nchw(g, x, w, y, beta);
    if (tiled_fwd_ok(g)) return tiled_fwd_nchw(g, x, w, y, beta);
    if (!g->is_1x1) return chunked_fwd_nchw(g, x, w, y, beta);
    return gemm_1x1_nchw(g, 0, g->kg, g->cg, w, x, g->c, y, g->k, beta);
}

/* Backward-data where it is not a forward convolution (stride > 1, ...): per
 * fixed image chunk, in the thread's own buffers, gather dy, GEMM W^T dy into
 * col and col2im into the chunk's images of dx (disjoint between tasks). */
static void chunk_data_range(void *vc, long long b, long long e)
{
    const struct chunk_ctx *c = vc;
    const struct geom *g = c->g;
    float *col = chunk_buf(c);
    for (long long ch = b; ch < e; ch++) {
        int n0 = (int)ch * c->nb, cnt = chunk_count(c, n0);
        size_t ld = (size_t)cnt * g->pq;
        float *dyb = col + (size_t)g->crs * ld;
        gather_images(g, c->dy, n0, cnt, 0, g->k, dyb, ld);
        for (int grp = 0; grp < g->g; grp++) {
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, g->crs, (int)ld, g->kg, 1.0f,
                        c->w + (size_t)grp * g->kg * g->crs, g->crs, dyb + (size_t)grp * g->kg * ld, (int)ld, 0.0f,
                        col, (int)ld);
            struct nchw_ctx x = {.g = g, .col = col, .ld = (int)ld, .n0 = n0, .grp = grp, .dx = c->out,
                                 .beta = c->beta};
            col2im_nchw_range(&x, 0, (long long)cnt * g->cg);
        }
    }
}

static md_status chunked_data_nchw(const struct geom *g, const float *dy, const float *w, float *dx, float beta)
{
    struct chunk_ctx c = {.dy = dy, .w = w, .out = dx, .beta = beta};
    MD_TRY(chunk_init(g, (size_t)(g->crs + g->k), &c));
    md_parallel_for(c.nchunks, 1, chunk_data_range, &c);
    return MD_OK;
}

static md_status data_nchw(const struct geom *g, const float *dy, const float *w, float *dx, float beta)
{
    if (!g->is_1x1) return chunked_data_nchw(g, dy, w, dx, beta);
    return gemm_1x1_nchw(g, 1, g->cg, g->kg, w, dy, g->k, dx, g->c, beta);
}

/* Backward-filter on small planes: fixed image chunks (as the forward's) cut
 * into FILTER_SLOTS runs; a slot gathers each chunk's dy (kg, cnt*pq), does
 * its im2col and accumulates dy @ col^T into the slot's dw partial, all in
 * the thread's own buffers; partials are added in slot order. */
static void chunk_filter_range(void *vc, long long b, long long e)
{
    const struct chunk_ctx *c = vc;
    const struct geom *g = c->g;
    size_t nw = (size_t)g->k * g->crs;
    float *col = chunk_buf(c);
    for (long long slot = b; slot < e; slot++) {
        float *acc = c->out + (size_t)slot * nw;
        memset(acc, 0, sizeof(float) * nw);
        for (long long ch = slot * c->nchunks / FILTER_SLOTS; ch < (slot + 1) * c->nchunks / FILTER_SLOTS; ch++) {
            int n0 = (int)ch * c->nb, cnt = chunk_count(c, n0);
            size_t ld = (size_t)cnt * g->pq;
            float *dyb = col + (size_t)g->crs * ld;
            for (int grp = 0; grp < g->g; grp++) {
                im2col_images(g, c->x, n0, cnt, grp, col, ld);
                gather_images(g, c->dy, n0, cnt, grp * g->kg, g->kg, dyb, ld);
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g->kg, g->crs, (int)ld, 1.0f, dyb, (int)ld, col,
                            (int)ld, 1.0f, acc + (size_t)grp * g->kg * g->crs, g->crs);
            }
        }
    }
}

static md_status chunked_filter_nchw(const struct geom *g, const float *x, const float *dy, float *dw, float beta)
{
    struct chunk_ctx c = {.x = x, .dy = dy};
    MD_TRY(chunk_init(g, (size_t)(g->crs + g->kg), &c));
    c.out = md_cpu_scratch(CPU_SCR_TMP, sizeof(float) * FILTER_SLOTS * (size_t)g->k * g->crs);
    if (!c.out) return MD_ERR_OOM;
    md_parallel_for(FILTER_SLOTS, 1, chunk_filter_range, &c);
    struct tile_ctx t = {.g = g, .y = dw, .beta = beta, .part = c.out};
    md_parallel_for((long long)g->k * g->crs, CPU_GRAIN, tile_sum_range, &t);
    return MD_OK;
}

static md_status filter_nchw(const struct geom *g, const float *x, const float *dy, float *dw, float beta)
{
    if (tiled_fwd_ok(g)) return tiled_filter_nchw(g, x, dy, dw, beta);
    if (!g->is_1x1) return chunked_filter_nchw(g, x, dy, dw, beta);
    for (int i = 0; i < g->n; i++)
        for (int grp = 0; grp < g->g; grp++)
            sgemm(0, 1, g->kg, g->cg, g->pq, dy + ((size_t)i * g->k + (size_t)grp * g->kg) * g->pq, g->pq,
                  x + ((size_t)i * g->c + (size_t)grp * g->cg) * g->pq, g->pq, i == 0 ? beta : 1.0f,
                  dw + (size_t)grp * g->kg * g->cg, g->cg);
    return MD_OK;
}

/* ================= NHWC ================================================== */

struct nhwc_ctx {
    const struct geom *g;
    const float *x;   /* (n, h, w, c) */
    float *col;       /* (rows, rsc) */
    long long r0;     /* first row (n*P*Q index) */
    int n0, grp, rsc;
    float *dx;
    float beta;
};

/* im2col for rows [b, e) of the chunk: each row is R*S runs of Cg channels. */
static void im2col_nhwc_range(void *vc, long long b, long long e)
{
    const struct nhwc_ctx *c = vc;
    const struct geom *g = c->g;
    for (long long t = b; t < e; t++) {
        long long row = c->r0 + t;
        int img = (int)(row / g->pq), pq = (int)(row % g->pq), p = pq / g->q, q = pq % g->q;
        float *o = c->col + (size_t)t * c->rsc;
        for (int r = 0; r < g->r; r++) {
            int hi = p * g->sh - g->ph + r * g->dh;
            for (int s = 0; s < g->s; s++, o += g->cg) {
                int wi = q * g->sw - g->pw + s * g->dw;
                if (hi < 0 || hi >= g->h || wi < 0 || wi >= g->w) {
                    memset(o, 0, sizeof(float) * (size_t)g->cg);
                    continue;
                }
                memcpy(o, c->x + (((size_t)img * g->h + hi) * g->w + wi) * g->c + (size_t)c->grp * g->cg,
                       sizeof(float) * (size_t)g->cg);
            }
        }
    }
}

/* dx images [n0+b, n0+e): scale by beta (only once, grp 0) and add col rows. */
static void col2im_nhwc_range(void *vc, long long b, long long e)
{
    const struct nhwc_ctx *c = vc;
    const struct geom *g = c->g;
    size_t img_elems = (size_t)g->h * g->w * g->c;
    for (long long t = b; t < e; t++) {
        int img = c->n0 + (int)t;
        float *dp = c->dx + (size_t)img * img_elems;
        if (c->grp == 0) scale_beta(dp, img_elems, c->beta);
        for (int pq = 0; pq < g->pq; pq++) {
            int p = pq / g->q, q = pq % g->q;
            const float *o = c->col + ((size_t)(img - c->n0) * g->pq + pq) * c->rsc;
            for (int r = 0; r < g->r; r++) {
                int hi = p * g->sh - g->ph + r * g->dh;
                for (int s = 0; s < g->s; s++, o += g->cg) {
                    int wi = q * g->sw - g->pw + s * g->dw;
                    if (hi < 0 || hi >= g->h || wi < 0 || wi >= g->w) continue;
                    float *xr = dp + ((size_t)hi * g->w + wi) * g->c + (size_t)c->grp * g->cg;
                    for (int k = 0; k < g->cg; k++) xr[k] += o[k];
                }
            }
        }
    }
}

/* Rows per NHWC chunk: the col buffer under COL_BYTES, at least one row. */
static long long nhwc_chunk_rows(const struct geom *g, long long rows)
{
    long long mb = (long long)(COL_BYTES / 4 / (size_t)g->crs);
    if (mb < 1) mb = 1;
    return mb > rows ? rows : mb;
}

/* Forward (fwd 1: y[rows, grp] = col @ W_g^T, with beta) or backward-filter
 * (fwd 0: dW_g = beta*dW_g + dy[rows, grp]^T @ col) per chunk of rows and
 * group: im2col of the chunk, then its GEMM. A 1x1 convolution takes x as
 * its own col, all rows in one chunk. */
static md_status im2col_gemm_nhwc(const struct geom *g, int fwd, const float *x, const float *b, float *out,
                                  float beta)
{
    long long rows = (long long)g->n * g->pq, mb = g->is_1x1 ? rows : nhwc_chunk_rows(g, rows);
    float *col = NULL;
    if (!g->is_1x1 && !(col = col_buffer(g, sizeof(float) * (size_t)mb * g->crs))) return MD_ERR_OOM;
    for (long long r0 = 0; r0 < rows; r0 += mb) {
        long long cnt = rows - r0 < mb ? rows - r0 : mb;
        for (int grp = 0; grp < g->g; grp++) {
            const float *a = x + (size_t)grp * g->cg;
            int lda = g->c;
            if (!g->is_1x1) {
                struct nhwc_ctx c = {.g = g, .x = x, .col = col, .r0 = r0, .grp = grp, .rsc = g->crs};
                md_parallel_for(cnt, task_grain((size_t)g->crs), im2col_nhwc_range, &c);
                a = col;
                lda = g->crs;
            }
            if (fwd)
                sgemm(0, 1, (int)cnt, g->kg, g->crs, a, lda, b + (size_t)grp * g->kg * g->crs, g->crs, beta,
                      out + (size_t)r0 * g->k + (size_t)grp * g->kg, g->k);
            else
                sgemm(1, 0, g->kg, g->crs, (int)cnt, b + (size_t)r0 * g->k + (size_t)grp * g->kg, g->k, a, lda,
                      r0 == 0 ? beta : 1.0f, out + (size_t)grp * g->kg * g->crs, g->crs);
        }
    }
    return MD_OK;
}

static md_status fwd_nhwc(const struct geom *g, const float *x, const float *w, float *y, float beta)
{
    return im2col_gemm_nhwc(g, 1, x, w, y, beta);
}

static md_status data_nhwc(const struct geom *g, const float *dy, const float *w, float *dx, float beta)
{
    long long rows = (long long)g->n * g->pq;
    if (g->is_1x1) {
        for (int grp = 0; grp < g->g; grp++)
            sgemm(0, 0, (int)rows, g->cg, g->kg, dy + (size_t)grp * g->kg, g->k, w + (size_t)grp * g->kg * g->cg,
                  g->cg, beta, dx + (size_t)grp * g->cg, g->c);
        return MD_OK;
    }
    int nb = chunk_images(g, (size_t)g->crs * g->pq);
    float *col = col_buffer(g, sizeof(float) * (size_t)nb * g->pq * g->crs);
    if (!col) return MD_ERR_OOM;
    for (int n0 = 0; n0 < g->n; n0 += nb) {
        int cnt = g->n - n0 < nb ? g->n - n0 : nb;
        for (int grp = 0; grp < g->g; grp++) {
            sgemm(0, 0, cnt * g->pq, g->crs, g->kg, dy + (size_t)n0 * g->pq * g->k + (size_t)grp * g->kg, g->k,
                  w + (size_t)grp * g->kg * g->crs, g->crs, 0.0f, col, g->crs);
            struct nhwc_ctx c = {.g = g, .col = col, .n0 = n0, .grp = grp, .rsc = g->crs, .dx = dx, .beta = beta};
            md_parallel_for(cnt, 1, col2im_nhwc_range, &c);
        }
    }
    return MD_OK;
}

static md_status filter_nhwc(const struct geom *g, const float *x, const float *dy, float *dw, float beta)
{
    return im2col_gemm_nhwc(g, 0, x, dy, dw, beta);
}

/* ================= backward-data as a forward convolution ================
 * With stride 1 and dilation 1, dx is the forward convolution of dy with the
 * filters transposed (K <-> C within each group) and flipped (r -> R-1-r,
 * s -> S-1-s), padded by R-1-pad: the GEMM writes dx directly (with beta),
 * and im2col of dy replaces the GEMM into a 9x larger col buffer and the
 * col2im that read it back. */

static int data_as_fwd(const struct geom *g)
{
    /* cg >= 8: the flipped GEMM has cg rows; a 1-3 channel input (a stem)
     * would get a GEMM too thin to pay for it */
    return !g->is_1x1 && g->sh == 1 && g->sw == 1 && g->dh == 1 && g->dw == 1 && g->ph <= g->r - 1 &&
           g->pw <= g->s - 1 && g->cg >= 8;
}

/* wf (g*cg, [kg r s] or [r s kg]) from w (g*kg, [cg r s] or [r s cg]), flipped. */
static void flip_weights(const struct geom *g, int nhwc, const float *w, float *wf)
{
    int R = g->r, S = g->s;
    for (int grp = 0; grp < g->g; grp++)
        for (int k = 0; k < g->kg; k++)
            for (int c = 0; c < g->cg; c++)
                for (int r = 0; r < R; r++)
                    for (int s = 0; s < S; s++) {
                        size_t src = nhwc ? (((size_t)(grp * g->kg + k) * R + r) * S + s) * g->cg + c
                                          : (((size_t)(grp * g->kg + k) * g->cg + c) * R + r) * S + s;
                        size_t dst = nhwc ? (((size_t)(grp * g->cg + c) * R + (R - 1 - r)) * S + (S - 1 - s)) * g->kg + k
                                          : (((size_t)(grp * g->cg + c) * g->kg + k) * R + (R - 1 - r)) * S + (S - 1 - s);
                        wf[dst] = w[src];
                    }
}

static md_status fwd_nchw(const struct geom *g, const float *x, const float *w, float *y, float beta);
static md_status fwd_nhwc(const struct geom *g, const float *x, const float *w, float *y, float beta);

static md_status data_via_fwd(const struct geom *g, int nhwc, const float *dy, const float *w, float *dx, float beta)
{
    struct geom f = *g;
    f.c = g->k, f.h = g->p, f.w = g->q;   /* input: dy */
    f.k = g->c, f.p = g->h, f.q = g->w;   /* output: dx */
    f.cg = g->kg, f.kg = g->cg;
    f.ph = g->r - 1 - g->ph, f.pw = g->s - 1 - g->pw;
    f.crs = f.cg * f.r * f.s;
    f.pq = f.p * f.q;
    f.same1 = f.q == f.w;
    struct md_dconv d; /* Winograd and the direct kernels read w flipped in place */
    if (direct_geom(&f, &d) && md_cpu_wino_ok(&d, nhwc)) return md_cpu_wino_fwd(&d, 1, dy, w, dx, beta);
    if (direct_geom(&f, &d) && md_cpu_direct_fwd_ok(&d)) return md_cpu_direct_fwd(&d, nhwc, 1, dy, w, dx, beta);
    float *wf = md_cpu_scratch(CPU_SCR_WFLIP, sizeof(float) * (size_t)g->k * g->crs);
    if (!wf) return MD_ERR_OOM;
    flip_weights(g, nhwc, w, wf);
    return nhwc ? fwd_nhwc(&f, dy, wf, dx, beta) : fwd_nchw(&f, dy, wf, dx, beta);
}

/* ================= strided backward-data by phases ===========================
 * With stride st along an axis, input pixel st*i + a receives only the taps
 * kh = a + pad (mod st), from the outputs oh = i + (a + pad - kh) / st. So
 * each phase (a, b) of dx (the pixels (sh*i + a, sw*j + b)) is a stride-1
 * forward convolution of dy with those taps (reversed, K and C swapped),
 * padded by -(a + pad - kh_max) / st before and as far as dy ends after: the
 * direct kernel computes it and writes it into dx's phase pixels with beta.
 * A phase without taps (R < st: a 1x1 stride-2 layer's odd pixels) gets no
 * gradient: beta * dx (2x2 stride 3). No col buffer and no col2im; each dx
 * element is one forward sum in a fixed order, so any thread count gives the
 * same bytes. NHWC, one group, dilation 1, not 1x1, the direct kernel taking
 * every phase, and no phase whose first tap reads dy a row late (a + pad -
 * kh_max >= st: 3x3 stride 3 pad 1); otherwise the GEMM + col2im path. */

struct phase_axis { int taps, first, pad, out; }; /* taps from kh = first down by st; pad before; pixels */

enum { PHASE_NONE = -1, PHASE_NO_TAPS = 0, PHASE_CONV = 1 };

static int phase_axis(int a, int pad, int st, int r, int size, struct phase_axis *o)
{
    int m = (a + pad) % st; /* the taps kh = m, m + st, ... below r */
    o->out = (size - a + st - 1) / st;
    if (m >= r) return PHASE_NO_TAPS;
    o->taps = (r - 1 - m) / st + 1;
    o->first = m + (o->taps - 1) * st;
    o->pad = (o->first - a - pad) / st; /* exact: first = a + pad (mod st) */
    return o->pad >= 0 ? PHASE_CONV : PHASE_NONE;
}

/* The phase's sub-convolution (input dy (n, p, q, k), output the phase of
 * dx), or PHASE_NO_TAPS / PHASE_NONE. */
static int phase_conv(const struct geom *g, int a, int b, struct md_dconv *d, struct phase_axis *ax)
{
    int u = phase_axis(a, g->ph, g->sh, g->r, g->h, &ax[0]), v = phase_axis(b, g->pw, g->sw, g->s, g->w, &ax[1]);
    if (u == PHASE_NONE || v == PHASE_NONE) return PHASE_NONE;
    if (u == PHASE_NO_TAPS || v == PHASE_NO_TAPS) return PHASE_NO_TAPS;
    *d = (struct md_dconv){g->n, g->k, g->p, g->q, g->c, ax[0].taps, ax[1].taps, ax[0].out, ax[1].out, 1, 1,
                           ax[0].pad, ax[1].pad, 1, 1};
    return md_cpu_direct_fwd_fits(d) ? PHASE_CONV : PHASE_NONE;
}

static int g_phases = -1;

void md_cpu_conv_phases_set(int on) { g_phases = on < 0 ? -1 : on != 0; }

static int phases_enabled(void)
{
    if (g_phases < 0) {
        const char *e = getenv("MPSDIAG_CPU_PHASES");
        g_phases = !(e && e[0] == '0' && !e[1]);
    }
    return g_phases;
}

static int data_by_phases_ok(const struct geom *g, int nhwc)
{
    if (!phases_enabled() || !nhwc || g->g != 1 || g->dh != 1 || g->dw != 1 || (g->sh == 1 && g->sw == 1) ||
        g->h < g->sh || g->w < g->sw)
        return 0;
    /* a strided 1x1 layer's one phase with taps is a plain GEMM: GEMM + col2im
     * measured as fast at 2 threads and faster at 16 (docs/performance-cpu.md) */
    if (g->r == 1 && g->s == 1) return 0;
    for (int a = 0; a < g->sh; a++)
        for (int b = 0; b < g->sw; b++) {
            struct md_dconv d;
            struct phase_axis ax[2];
            if (phase_conv(g, a, b, &d, ax) == PHASE_NONE) return 0;
        }
    return 1;
}

/* dx's phase (a, b) pixels of images [b0, e0) times beta: a phase without taps. */
struct phase_scale_ctx { const struct geom *g; int a, b; float *dx; float beta; };

static void phase_scale_range(void *vc, long long b0, long long e0)
{
    const struct phase_scale_ctx *c = vc;
    const struct geom *g = c->g;
    for (long long img = b0; img < e0; img++)
        for (int h = c->a; h < g->h; h += g->sh)
            for (int w = c->b; w < g->w; w += g->sw)
                scale_beta(c->dx + (((size_t)img * g->h + h) * g->w + w) * g->c, (size_t)g->c, c->beta);
}

static md_status data_by_phases(const struct geom *g, const float *dy, const float *w, float *dx, float beta)
{
    for (int a = 0; a < g->sh; a++)
        for (int b = 0; b < g->sw; b++) {
            struct md_dconv d;
            struct phase_axis ax[2];
            if (phase_conv(g, a, b, &d, ax) != PHASE_CONV) {
                struct phase_scale_ctx c = {g, a, b, dx, beta};
                if (beta != 1.0f) md_parallel_for(g->n, 1, phase_scale_range, &c);
                continue;
            }
            /* the phase's tap (j, l) is w's (first_h - j*sh, first_w - l*sw) */
            int tap_of[1024], nt = 0; /* fits: at most 1024 taps */
            for (int j = 0; j < d.r; j++)
                for (int l = 0; l < d.s; l++) tap_of[nt++] = (ax[0].first - j * g->sh) * g->s + ax[1].first - l * g->sw;
            struct md_dphase ph = {g->sh, g->sw, a, b, g->h, g->w, g->r * g->s, tap_of};
            MD_TRY(md_cpu_direct_fwd_phase(&d, &ph, dy, w, dx, beta));
        }
    return MD_OK;
}

int md_cpu_conv_data_by_phases(const struct md_conv2d_args *a)
{
    struct geom g;
    return geom_init("conv2d_bwd_data", a, &g) == MD_OK && data_by_phases_ok(&g, a->layout == MD_NHWC);
}

/* ================= NCHW depthwise (one input channel per group) ============
 * Direct loops instead of one tiny GEMM per channel: tasks are output planes
 * (fwd), input planes (data) or filters (filter), each owning what it writes. */

enum { CONV_FWD, CONV_DATA, CONV_FILTER };

struct dw_ctx { const struct geom *g; const float *x, *w, *dy; float *out; float beta; };

static void dw_fwd_range(void *vc, long long b, long long e)
{
    const struct dw_ctx *c = vc;
    const struct geom *g = c->g;
    for (long long t = b; t < e; t++) {
        int img = (int)(t / g->k), k = (int)(t % g->k), ch = k / g->kg;
        const float *xp = c->x + ((size_t)img * g->c + ch) * g->h * g->w;
        const float *wk = c->w + (size_t)k * g->r * g->s;
        float *yp = c->out + (size_t)t * g->pq;
        for (int p = 0; p < g->p; p++)
            for (int q = 0; q < g->q; q++) {
                float acc = 0.0f;
                for (int r = 0; r < g->r; r++) {
                    int hi = p * g->sh - g->ph + r * g->dh;
                    if (hi < 0 || hi >= g->h) continue;
                    for (int s2 = 0; s2 < g->s; s2++) {
                        int wi = q * g->sw - g->pw + s2 * g->dw;
                        if (wi < 0 || wi >= g->w) continue;
                        acc += xp[hi * g->w + wi] * wk[r * g->s + s2];
                    }
                }
                float *o = &yp[p * g->q + q];
                *o = c->beta != 0.0f ? acc + c->beta * *o : acc;
            }
    }
}

static void dw_data_range(void *vc, long long b, long long e)
{
    const struct dw_ctx *c = vc;
    const struct geom *g = c->g;
    size_t hw = (size_t)g->h * g->w;
    for (long long t = b; t < e; t++) {
        int img = (int)(t / g->c), ch = (int)(t % g->c);
        float *dxp = c->out + (size_t)t * hw;
        scale_beta(dxp, hw, c->beta);
        for (int k = ch * g->kg; k < (ch + 1) * g->kg; k++) {
            const float *dyp = c->dy + ((size_t)img * g->k + k) * g->pq;
            const float *wk = c->w + (size_t)k * g->r * g->s;
            for (int p = 0; p < g->p; p++)
                for (int q = 0; q < g->q; q++) {
                    float d = dyp[p * g->q + q];
                    for (int r = 0; r < g->r; r++) {
                        int hi = p * g->sh - g->ph + r * g->dh;
                        if (hi < 0 || hi >= g->h) continue;
                        for (int s2 = 0; s2 < g->s; s2++) {
                            int wi = q * g->sw - g->pw + s2 * g->dw;
                            if (wi < 0 || wi >= g->w) continue;
                            dxp[hi * g->w + wi] += d * wk[r * g->s + s2];
                        }
                    }
                }
        }
    }
}

static void dw_filter_range(void *vc, long long b, long long e)
{
    const struct dw_ctx *c = vc;
    const struct geom *g = c->g;
    for (long long k = b; k < e; k++) {
        int ch = (int)k / g->kg;
        for (int r = 0; r < g->r; r++)
            for (int s2 = 0; s2 < g->s; s2++) {
                double acc = 0.0;
                for (int img = 0; img < g->n; img++) {
                    const float *xp = c->x + ((size_t)img * g->c + ch) * g->h * g->w;
                    const float *dyp = c->dy + ((size_t)img * g->k + k) * g->pq;
                    float part = 0.0f;
                    for (int p = 0; p < g->p; p++) {
                        int hi = p * g->sh - g->ph + r * g->dh;
                        if (hi < 0 || hi >= g->h) continue;
                        for (int q = 0; q < g->q; q++) {
                            int wi = q * g->sw - g->pw + s2 * g->dw;
                            if (wi < 0 || wi >= g->w) continue;
                            part += xp[hi * g->w + wi] * dyp[p * g->q + q];
                        }
                    }
                    acc += (double)part;
                }
                float *o = &c->out[((size_t)k * g->r + r) * g->s + s2];
                *o = (float)(c->beta != 0.0f ? acc + (double)c->beta * (double)*o : acc);
            }
    }
}

static md_status depthwise_nchw(int which, const struct geom *g, const float *x, const float *w, const float *dy,
                                float *out, float beta)
{
    struct dw_ctx c = {g, x, w, dy, out, beta};
    if (which == CONV_FWD)
        md_parallel_for((long long)g->n * g->k, 1, dw_fwd_range, &c);
    else if (which == CONV_DATA)
        md_parallel_for((long long)g->n * g->c, 1, dw_data_range, &c);
    else
        md_parallel_for(g->k, 1, dw_filter_range, &c);
    return MD_OK;
}

/* ================= entry points ============================================ */

static md_status run_f32(int which, const struct geom *g, md_layout layout, const float *x, const float *w,
                         const float *dy, float *out, float beta)
{
    int nhwc = layout == MD_NHWC;
    if (!nhwc && g->cg == 1 && g->g > 1) return depthwise_nchw(which, g, x, w, dy, out, beta);
    struct md_dconv d; /* the direct kernels first, where they apply (backward-data: data_via_fwd) */
    if (which != CONV_DATA && direct_geom(g, &d) && md_cpu_small_ok(&d))
        return which == CONV_FWD ? md_cpu_small_fwd(&d, nhwc, x, w, out, beta) : md_cpu_small_filter(&d, nhwc, x, dy, out, beta);
    if (which == CONV_FILTER && direct_geom(g, &d) && md_cpu_wino_filter_ok(&d, nhwc))
        return md_cpu_wino_filter(&d, x, dy, out, beta);
    if (which == CONV_FWD && direct_geom(g, &d) && md_cpu_wino_ok(&d, nhwc))
        return md_cpu_wino_fwd(&d, 0, x, w, out, beta);
    if (which == CONV_FWD && direct_geom(g, &d) && md_cpu_direct_fwd_ok(&d))
        return md_cpu_direct_fwd(&d, nhwc, 0, x, w, out, beta);
    if (which == CONV_FILTER && direct_geom(g, &d) && md_cpu_direct_filter_ok(&d))
        return md_cpu_direct_filter(&d, nhwc, x, dy, out, beta);
    switch (which) {
    case CONV_FWD: return nhwc ? fwd_nhwc(g, x, w, out, beta) : fwd_nchw(g, x, w, out, beta);
    case CONV_DATA:
        if (data_as_fwd(g)) return data_via_fwd(g, nhwc, dy, w, out, beta);
        if (data_by_phases_ok(g, nhwc)) return data_by_phases(g, dy, w, out, beta);
        return nhwc ? data_nhwc(g, dy, w, out, beta) : data_nchw(g, dy, w, out, beta);
    default: return nhwc ? filter_nhwc(g, x, dy, out, beta) : filter_nchw(g, x, dy, out, beta);
    }
}

struct store_ctx { float *src; void *dst; md_dtype t; float beta; };

static void store_range(void *vc, long long b, long long e)
{
    const struct store_ctx *c = vc;
    for (long long i = b; i < e; i++) {
        float v = c->src[i];
        if (c->beta != 0.0f) v += c->beta * md_load_f(c->dst, c->t, (size_t)i);
        md_store_f(c->dst, c->t, (size_t)i, v);
    }
}

static void scale_range(void *vc, long long b, long long e)
{
    const struct store_ctx *c = vc;
    for (long long i = b; i < e; i++)
        md_store_f(c->dst, c->t, (size_t)i, c->beta != 0.0f ? c->beta * md_load_f(c->dst, c->t, (size_t)i) : 0.0f);
}

static md_status conv_run(const char *op, int which, const struct md_conv2d_args *a)
{
    struct geom g;
    MD_TRY(geom_init(op, a, &g));
    size_t nx = (size_t)g.n * g.c * g.h * g.w, nw = (size_t)g.k * g.crs, ny = (size_t)g.n * g.k * g.pq;
    md_status st = MD_OK;
    if (g.n == 0) { /* an empty batch: only dw = beta * dw has anything to do */
        if (which == CONV_FILTER) {
            struct store_ctx c = {NULL, a->dwt, a->dtype, a->beta};
            md_parallel_for((long long)nw, CPU_GRAIN, scale_range, &c);
        }
        return MD_OK;
    }
    md_cpu_lock();
    if (a->dtype == MD_F32) {
        float *out = which == CONV_FWD ? a->y : which == CONV_DATA ? a->dx : a->dwt;
        st = run_f32(which, &g, a->layout, a->x, a->wt, a->dy, out, a->beta);
    } else {
        /* storage-only halves: inputs to fp32 scratch, result back with beta */
        float *x32 = NULL, *w32 = NULL, *y32 = NULL, *out32;
        size_t nout = which == CONV_FWD ? ny : which == CONV_DATA ? nx : nw;
        if (which != CONV_DATA && !(x32 = md_cpu_scratch(CPU_SCR_X32, nx * 4))) goto oom;
        if (which != CONV_FILTER && !(w32 = md_cpu_scratch(CPU_SCR_W32, nw * 4))) goto oom;
        if (which != CONV_FWD && !(y32 = md_cpu_scratch(CPU_SCR_Y32, ny * 4))) goto oom;
        if (x32) md_cpu_to_f32(a->x, a->dtype, nx, x32);
        if (w32) md_cpu_to_f32(a->wt, a->dtype, nw, w32);
        if (y32) md_cpu_to_f32(a->dy, a->dtype, ny, y32);
        /* the output goes to whichever scratch is not an input of this pass */
        out32 = md_cpu_scratch(which == CONV_FWD ? CPU_SCR_Y32 : which == CONV_DATA ? CPU_SCR_X32 : CPU_SCR_W32,
                               nout * 4);
        if (!out32) goto oom;
        st = run_f32(which, &g, a->layout, x32, w32, y32, out32, 0.0f);
        if (st == MD_OK) {
            struct store_ctx c = {out32, which == CONV_FWD ? a->y : which == CONV_DATA ? a->dx : a->dwt, a->dtype,
                                  a->beta};
            md_parallel_for((long long)nout, CPU_GRAIN, store_range, &c);
        }
    }
    md_cpu_unlock();
    return st;
oom:
    md_cpu_unlock();
    return MD_ERR_OOM;
}

md_status md_cpu_conv2d_fwd(md_device *dev, const struct md_conv2d_args *a)
{
    (void)dev;
    return conv_run("conv2d_fwd", CONV_FWD, a);
}

md_status md_cpu_conv2d_bwd_data(md_device *dev, const struct md_conv2d_args *a)
{
    (void)dev;
    return conv_run("conv2d_bwd_data", CONV_DATA, a);
}

md_status md_cpu_conv2d_bwd_filter(md_device *dev, const struct md_conv2d_args *a)
{
    (void)dev;
    return conv_run("conv2d_bwd_filter", CONV_FILTER, a);
}
