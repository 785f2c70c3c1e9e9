/* cpu_tiles.c - tiles (crop + bilinear resize, align_corners=False), FiLM
 * and the per-feature scale (chscale) on the thread pool; the contract is
 * kernels.h's, the reference ref_tiles.c. Index arithmetic in float, as PyTorch's CPU kernel. */
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "core/mem.h"

/* Per output index of one axis: the two source indices and the weight of
 * the second (PyTorch's area_pixel_compute_source_index, align_corners=False). */
struct axis { int i0, i1; float l1; };

static void axis_fill(struct axis *ax, int len, int size)
{
    float scale = (float)len / (float)size;
    for (int o = 0; o < size; o++) {
        float s = scale * ((float)o + 0.5f) - 0.5f;
        if (s < 0) s = 0;
        int a = (int)s;
        if (a > len - 1) a = len - 1;
        ax[o] = (struct axis){a, a < len - 1 ? a + 1 : a, s - (float)a};
    }
}

static md_status tiles_check(const char *op, const struct md_tiles_args *a)
{
    MD_TRY(md_cpu_dtype_check(op, a->dtype));
    if (a->n < 0 || a->c < 1 || a->rows < 1 || a->cols < 1 || a->h < a->rows || a->w < a->cols || a->size < 1 ||
        a->ld < a->rows * a->cols)
        return md_errf(MD_ERR_INTERNAL, "cpu %s: bad shape (n %d, c %d, %dx%d, grid %dx%d, size %d, ld %d)", op,
                       a->n, a->c, a->h, a->w, a->rows, a->cols, a->size, a->ld);
    return MD_OK;
}

static inline float ldf(const void *p, md_dtype t, size_t i)
{
    return t == MD_F32 ? ((const float *)p)[i] : md_load_f(p, t, i);
}

static inline void stf(void *p, md_dtype t, size_t i, float v, float beta)
{
    if (beta != 0.0f) v += beta * ldf(p, t, i);
    if (t == MD_F32) ((float *)p)[i] = v;
    else md_store_f(p, t, i, v);
}

/* One task: one (sample, tile, channel) plane of y. */
static void tiles_fwd_range(void *vc, long long b, long long e)
{
    const struct md_tiles_args *a = vc;
    int nt = a->rows * a->cols, S = a->size;
    struct axis *ay = md_malloc(2 * (size_t)S * sizeof *ay);
    if (!ay) return; /* the caller checked the size; host allocation of a few KiB */
    struct axis *ax = ay + S;
    int last_t = -1;
    for (long long p = b; p < e; p++) {
        int ch = (int)(p % a->c), t = (int)(p / a->c % nt), bi = (int)(p / a->c / nt);
        int ti = t / a->cols, tj = t % a->cols;
        int r0 = md_tile_edge(a->h, a->rows, ti), c0 = md_tile_edge(a->w, a->cols, tj);
        if (t != last_t) {
            axis_fill(ay, md_tile_edge(a->h, a->rows, ti + 1) - r0, S);
            axis_fill(ax, md_tile_edge(a->w, a->cols, tj + 1) - c0, S);
            last_t = t;
        }
        size_t xp = ((size_t)bi * (size_t)a->c + (size_t)ch) * (size_t)a->h * (size_t)a->w + (size_t)c0;
        size_t yp = (((size_t)bi * (size_t)a->ld + (size_t)t) * (size_t)a->c + (size_t)ch) * (size_t)S * (size_t)S;
        for (int oy = 0; oy < S; oy++) {
            size_t q0 = xp + (size_t)(r0 + ay[oy].i0) * (size_t)a->w, q1 = xp + (size_t)(r0 + ay[oy].i1) * (size_t)a->w;
            float ly = ay[oy].l1;
            for (int ox = 0; ox < S; ox++) {
                float lx = ax[ox].l1;
                float v = (1 - ly) * ((1 - lx) * ldf(a->x, a->dtype, q0 + (size_t)ax[ox].i0) +
                                      lx * ldf(a->x, a->dtype, q0 + (size_t)ax[ox].i1)) +
                          ly * ((1 - lx) * ldf(a->x, a->dtype, q1 + (size_t)ax[ox].i0) +
                                lx * ldf(a->x, a->dtype, q1 + (size_t)ax[ox].i1));
                stf(a->y, a->dtype, yp + (size_t)oy * (size_t)S + (size_t)ox, v, a->beta);
            }
        }
    }
    md_free(ay);
}

md_status md_cpu_tiles_fwd(md_device *dev, const struct md_tiles_args *a)
{
    (void)dev;
    MD_TRY(tiles_check("tiles_fwd", a));
    long long planes = (long long)a->n * a->rows * a->cols * a->c;
    md_parallel_for(planes, md_cpu_tasks_per_chunk((long long)a->size * a->size, CPU_GRAIN), tiles_fwd_range,
                    (void *)a);
    return MD_OK;
}

/* One task: one (sample, channel) plane of dx, gathered from every tile. */
static void tiles_bwd_range(void *vc, long long b, long long e)
{
    const struct md_tiles_args *a = vc;
    int S = a->size;
    size_t hw = (size_t)a->h * (size_t)a->w;
    float *acc = md_malloc(hw * sizeof *acc + 2 * (size_t)S * sizeof(struct axis));
    if (!acc) return;
    struct axis *ay = (struct axis *)(acc + hw), *ax = ay + S;
    for (long long p = b; p < e; p++) {
        int ch = (int)(p % a->c), bi = (int)(p / a->c);
        memset(acc, 0, hw * sizeof *acc);
        for (int ti = 0; ti < a->rows; ti++)
            for (int tj = 0; tj < a->cols; tj++) {
                int r0 = md_tile_edge(a->h, a->rows, ti), c0 = md_tile_edge(a->w, a->cols, tj);
                axis_fill(ay, md_tile_edge(a->h, a->rows, ti + 1) - r0, S);
                axis_fill(ax, md_tile_edge(a->w, a->cols, tj + 1) - c0, S);
                size_t item = (size_t)bi * (size_t)a->ld + (size_t)(ti * a->cols + tj);
                size_t yp = (item * (size_t)a->c + (size_t)ch) * (size_t)S * (size_t)S;
                for (int oy = 0; oy < S; oy++) {
                    float *q0 = acc + (size_t)(r0 + ay[oy].i0) * (size_t)a->w + c0;
                    float *q1 = acc + (size_t)(r0 + ay[oy].i1) * (size_t)a->w + c0;
                    float ly = ay[oy].l1;
                    for (int ox = 0; ox < S; ox++) {
                        float g = ldf(a->dy, a->dtype, yp + (size_t)oy * (size_t)S + (size_t)ox), lx = ax[ox].l1;
                        q0[ax[ox].i0] += g * (1 - ly) * (1 - lx);
                        q0[ax[ox].i1] += g * (1 - ly) * lx;
                        q1[ax[ox].i0] += g * ly * (1 - lx);
                        q1[ax[ox].i1] += g * ly * lx;
                    }
                }
            }
        size_t xp = ((size_t)bi * (size_t)a->c + (size_t)ch) * hw;
        for (size_t i = 0; i < hw; i++) stf(a->dx, a->dtype, xp + i, acc[i], a->beta);
    }
    md_free(acc);
}

md_status md_cpu_tiles_bwd(md_device *dev, const struct md_tiles_args *a)
{
    (void)dev;
    MD_TRY(tiles_check("tiles_bwd", a));
    long long per = (long long)a->h * a->w;
    md_parallel_for((long long)a->n * a->c, md_cpu_tasks_per_chunk(per, CPU_GRAIN), tiles_bwd_range, (void *)a);
    return MD_OK;
}

/* One task: one sample. */
static void film_fwd_range(void *vc, long long b, long long e)
{
    const struct md_film_args *a = vc;
    for (long long bi = b; bi < e; bi++) {
        size_t c = (size_t)bi * 2 * (size_t)a->d;
        for (int t = 0; t < a->t; t++) {
            size_t i = ((size_t)bi * (size_t)a->t + (size_t)t) * (size_t)a->d;
            for (int d = 0; d < a->d; d++)
                stf(a->y, a->dtype, i + (size_t)d,
                    ldf(a->x, a->dtype, i + (size_t)d) * (1 + ldf(a->cond, a->dtype, c + (size_t)d)) +
                        ldf(a->cond, a->dtype, c + (size_t)(a->d + d)),
                    0.0f);
        }
    }
}

md_status md_cpu_film_fwd(md_device *dev, const struct md_film_args *a)
{
    (void)dev;
    MD_TRY(md_cpu_dtype_check("film_fwd", a->dtype));
    md_parallel_for(a->n, md_cpu_tasks_per_chunk((long long)a->t * a->d, CPU_GRAIN), film_fwd_range, (void *)a);
    return MD_OK;
}

static void film_bwd_range(void *vc, long long b, long long e)
{
    const struct md_film_args *a = vc;
    for (long long bi = b; bi < e; bi++)
        for (int d = 0; d < a->d; d++) {
            size_t c = (size_t)bi * 2 * (size_t)a->d + (size_t)d;
            float g = ldf(a->cond, a->dtype, c);
            double sg = 0, sb = 0;
            for (int t = 0; t < a->t; t++) {
                size_t i = ((size_t)bi * (size_t)a->t + (size_t)t) * (size_t)a->d + (size_t)d;
                float dy = ldf(a->dy, a->dtype, i);
                sg += (double)(dy * ldf(a->x, a->dtype, i));
                sb += (double)dy;
                if (a->dx) stf(a->dx, a->dtype, i, dy * (1 + g), a->beta);
            }
            if (a->dcond) {
                stf(a->dcond, a->dtype, c, (float)sg, a->beta_cond);
                stf(a->dcond, a->dtype, c + (size_t)a->d, (float)sb, a->beta_cond);
            }
        }
}

md_status md_cpu_film_bwd(md_device *dev, const struct md_film_args *a)
{
    (void)dev;
    MD_TRY(md_cpu_dtype_check("film_bwd", a->dtype));
    md_parallel_for(a->n, md_cpu_tasks_per_chunk((long long)a->t * a->d, CPU_GRAIN), film_bwd_range, (void *)a);
    return MD_OK;
}

/* ---- per-feature scale: one task a run of rows for y and dx; dg by blocks
 * of columns, each column's rows added in order (the same result for any
 * thread count). */
#define CHS_COLS 64

static void chscale_fwd_range(void *vc, long long b, long long e)
{
    const struct md_chscale_args *a = vc;
    for (long long r = b; r < e; r++) {
        size_t i = (size_t)r * (size_t)a->d;
        for (int j = 0; j < a->d; j++)
            stf(a->y, a->dtype, i + (size_t)j, ldf(a->x, a->dtype, i + (size_t)j) * a->g[j], a->beta);
    }
}

static void chscale_dg_range(void *vc, long long b, long long e)
{
    const struct md_chscale_args *a = vc;
    double s[CHS_COLS];
    for (long long cb = b; cb < e; cb++) {
        int j0 = (int)cb * CHS_COLS, nj = a->d - j0 < CHS_COLS ? a->d - j0 : CHS_COLS;
        for (int j = 0; j < nj; j++) s[j] = 0;
        for (int r = 0; r < a->rows; r++) {
            size_t i = (size_t)r * (size_t)a->d + (size_t)j0;
            for (int j = 0; j < nj; j++)
                s[j] += (double)(ldf(a->dy, a->dtype, i + (size_t)j) * ldf(a->x, a->dtype, i + (size_t)j));
        }
        for (int j = 0; j < nj; j++) {
            float *o = &a->dg[j0 + j];
            *o = a->beta_g != 0.0f ? (float)s[j] + a->beta_g * *o : (float)s[j];
        }
    }
}

md_status md_cpu_chscale_fwd(md_device *dev, const struct md_chscale_args *a)
{
    (void)dev;
    MD_TRY(md_cpu_dtype_check("chscale_fwd", a->dtype));
    if (a->rows <= 0 || a->d <= 0) return MD_OK;
    md_parallel_for(a->rows, md_cpu_tasks_per_chunk(a->d, CPU_GRAIN), chscale_fwd_range, (void *)a);
    return MD_OK;
}

md_status md_cpu_chscale_bwd(md_device *dev, const struct md_chscale_args *a)
{
    (void)dev;
    MD_TRY(md_cpu_dtype_check("chscale_bwd", a->dtype));
    if (a->d <= 0) return MD_OK;
    if (a->dg) /* first: dx may be dy's buffer */
        md_parallel_for((a->d + CHS_COLS - 1) / CHS_COLS,
                        md_cpu_tasks_per_chunk((long long)a->rows * CHS_COLS, CPU_GRAIN), chscale_dg_range,
                        (void *)a);
    if (a->dx && a->rows > 0) { /* dx = dy * g: the forward's rows */
        struct md_chscale_args f = *a;
        f.x = a->dy, f.y = a->dx;
        md_parallel_for(a->rows, md_cpu_tasks_per_chunk(a->d, CPU_GRAIN), chscale_fwd_range, &f);
    }
    return MD_OK;
}
