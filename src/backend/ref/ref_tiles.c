/* ref_tiles.c - reference tiles (crop + bilinear resize, align_corners=False),
 * FiLM and the per-feature scale (chscale): plain loops, double accumulation
 * (kernels.h has the contract, docs/tiles.md the layers that use them). */
#include "backend/ref/ref_internal.h"

#include <math.h>

#include "core/mem.h"

/* Source of output index o along an axis of `len` resized to `size`, as
 * PyTorch's area_pixel_compute_source_index with align_corners=False: the
 * two neighbours and the weight of the second. */
static void src_index(int o, int len, int size, int *i0, int *i1, double *l1)
{
    double s = ((double)o + 0.5) * (double)len / (double)size - 0.5;
    if (s < 0) s = 0;
    int a = (int)s;
    if (a > len - 1) a = len - 1;
    *i0 = a;
    *i1 = a < len - 1 ? a + 1 : a;
    *l1 = s - (double)a;
}

static md_status tiles_check(const char *op, const struct md_tiles_args *a)
{
    MD_TRY(check_dtype(op, a->dtype));
    if (a->n < 0 || a->c < 1 || a->rows < 1 || a->cols < 1 || a->h < a->rows || a->w < a->cols || a->size < 1 ||
        a->ld < a->rows * a->cols)
        return md_errf(MD_ERR_INTERNAL, "ref %s: bad shape (n %d, c %d, %dx%d, grid %dx%d, size %d, ld %d)", op,
                       a->n, a->c, a->h, a->w, a->rows, a->cols, a->size, a->ld);
    return MD_OK;
}

/* Output pixel (oy, ox) of tile (ti, tj) of image b: where it reads within
 * a channel's plane (rows p0, p1 + columns x0, x1, weights ly, lx) and the
 * tile's item in the output. */
struct tap {
    size_t item, p0, p1;
    int x0, x1;
    double ly, lx;
};

static struct tap tap_of(const struct md_tiles_args *a, int b, int ti, int tj, int oy, int ox)
{
    int r0 = md_tile_edge(a->h, a->rows, ti), th = md_tile_edge(a->h, a->rows, ti + 1) - r0;
    int c0 = md_tile_edge(a->w, a->cols, tj), tw = md_tile_edge(a->w, a->cols, tj + 1) - c0;
    struct tap t;
    int y0, y1;
    src_index(oy, th, a->size, &y0, &y1, &t.ly);
    src_index(ox, tw, a->size, &t.x0, &t.x1, &t.lx);
    t.item = (size_t)b * (size_t)a->ld + (size_t)(ti * a->cols + tj);
    t.p0 = (size_t)(r0 + y0) * (size_t)a->w + (size_t)c0;
    t.p1 = (size_t)(r0 + y1) * (size_t)a->w + (size_t)c0;
    return t;
}

md_status md_ref_tiles_fwd(md_device *dev, const struct md_tiles_args *a)
{
    (void)dev;
    MD_TRY(tiles_check("tiles_fwd", a));
    size_t ss = (size_t)a->size * (size_t)a->size;
    for (int b = 0; b < a->n; b++)
        for (int ti = 0; ti < a->rows; ti++)
            for (int tj = 0; tj < a->cols; tj++)
                for (int ch = 0; ch < a->c; ch++) {
                    size_t xp = ((size_t)b * (size_t)a->c + (size_t)ch) * (size_t)a->h * (size_t)a->w;
                    for (int oy = 0; oy < a->size; oy++)
                        for (int ox = 0; ox < a->size; ox++) {
                            struct tap t = tap_of(a, b, ti, tj, oy, ox);
                            size_t yp = (t.item * (size_t)a->c + (size_t)ch) * ss;
                            double ly = t.ly, lx = t.lx;
                            double v = (1 - ly) * ((1 - lx) * ld(a->x, a->dtype, xp + t.p0 + (size_t)t.x0) +
                                                   lx * ld(a->x, a->dtype, xp + t.p0 + (size_t)t.x1)) +
                                       ly * ((1 - lx) * ld(a->x, a->dtype, xp + t.p1 + (size_t)t.x0) +
                                             lx * ld(a->x, a->dtype, xp + t.p1 + (size_t)t.x1));
                            st(a->y, a->dtype, yp + (size_t)oy * (size_t)a->size + (size_t)ox, v, a->beta);
                        }
                }
    return MD_OK;
}

md_status md_ref_tiles_bwd(md_device *dev, const struct md_tiles_args *a)
{
    (void)dev;
    MD_TRY(tiles_check("tiles_bwd", a));
    size_t hw = (size_t)a->h * (size_t)a->w, ss = (size_t)a->size * (size_t)a->size;
    double *acc = md_calloc(hw ? hw : 1, sizeof *acc);
    if (!acc) return md_errf(MD_ERR_OOM, "ref tiles_bwd: out of host memory");
    for (int b = 0; b < a->n; b++)
        for (int ch = 0; ch < a->c; ch++) {
            for (size_t e = 0; e < hw; e++) acc[e] = 0;
            for (int ti = 0; ti < a->rows; ti++)
                for (int tj = 0; tj < a->cols; tj++)
                    for (int oy = 0; oy < a->size; oy++)
                        for (int ox = 0; ox < a->size; ox++) {
                            struct tap t = tap_of(a, b, ti, tj, oy, ox);
                            size_t yp = (t.item * (size_t)a->c + (size_t)ch) * ss;
                            double g = ld(a->dy, a->dtype, yp + (size_t)oy * (size_t)a->size + (size_t)ox);
                            double ly = t.ly, lx = t.lx;
                            acc[t.p0 + (size_t)t.x0] += g * (1 - ly) * (1 - lx);
                            acc[t.p0 + (size_t)t.x1] += g * (1 - ly) * lx;
                            acc[t.p1 + (size_t)t.x0] += g * ly * (1 - lx);
                            acc[t.p1 + (size_t)t.x1] += g * ly * lx;
                        }
            size_t xp = ((size_t)b * (size_t)a->c + (size_t)ch) * hw;
            for (size_t e = 0; e < hw; e++) st(a->dx, a->dtype, xp + e, acc[e], a->beta);
        }
    md_free(acc);
    return MD_OK;
}

md_status md_ref_film_fwd(md_device *dev, const struct md_film_args *a)
{
    (void)dev;
    MD_TRY(check_dtype("film_fwd", a->dtype));
    for (int b = 0; b < a->n; b++)
        for (int t = 0; t < a->t; t++)
            for (int d = 0; d < a->d; d++) {
                size_t i = ((size_t)b * (size_t)a->t + (size_t)t) * (size_t)a->d + (size_t)d;
                size_t c = (size_t)b * 2 * (size_t)a->d + (size_t)d;
                double v = ld(a->x, a->dtype, i) * (1 + ld(a->cond, a->dtype, c)) +
                           ld(a->cond, a->dtype, c + (size_t)a->d);
                st(a->y, a->dtype, i, v, 0.0f);
            }
    return MD_OK;
}

md_status md_ref_film_bwd(md_device *dev, const struct md_film_args *a)
{
    (void)dev;
    MD_TRY(check_dtype("film_bwd", a->dtype));
    for (int b = 0; b < a->n; b++)
        for (int d = 0; d < a->d; d++) {
            size_t c = (size_t)b * 2 * (size_t)a->d + (size_t)d;
            double g = ld(a->cond, a->dtype, c), sg = 0, sb = 0;
            for (int t = 0; t < a->t; t++) {
                size_t i = ((size_t)b * (size_t)a->t + (size_t)t) * (size_t)a->d + (size_t)d;
                double dy = ld(a->dy, a->dtype, i);
                sg += dy * ld(a->x, a->dtype, i);
                sb += dy;
                if (a->dx) st(a->dx, a->dtype, i, dy * (1 + g), a->beta);
            }
            if (a->dcond) {
                st(a->dcond, a->dtype, c, sg, a->beta_cond);
                st(a->dcond, a->dtype, c + (size_t)a->d, sb, a->beta_cond);
            }
        }
    return MD_OK;
}

static md_status chscale_check(const char *op, const struct md_chscale_args *a)
{
    MD_TRY(check_dtype(op, a->dtype));
    if (a->rows < 0 || a->d < 0)
        return md_errf(MD_ERR_INTERNAL, "ref %s: bad shape (rows %d, d %d)", op, a->rows, a->d);
    return MD_OK;
}

md_status md_ref_chscale_fwd(md_device *dev, const struct md_chscale_args *a)
{
    (void)dev;
    MD_TRY(chscale_check("chscale_fwd", a));
    for (int r = 0; r < a->rows; r++)
        for (int j = 0; j < a->d; j++) {
            size_t i = (size_t)r * (size_t)a->d + (size_t)j;
            st(a->y, a->dtype, i, ld(a->x, a->dtype, i) * (double)a->g[j], a->beta);
        }
    return MD_OK;
}

md_status md_ref_chscale_bwd(md_device *dev, const struct md_chscale_args *a)
{
    (void)dev;
    MD_TRY(chscale_check("chscale_bwd", a));
    for (int j = 0; j < a->d; j++) {
        double s = 0;
        for (int r = 0; r < a->rows; r++) {
            size_t i = (size_t)r * (size_t)a->d + (size_t)j;
            double dy = ld(a->dy, a->dtype, i);
            s += dy * ld(a->x, a->dtype, i);
            if (a->dx) st(a->dx, a->dtype, i, dy * (double)a->g[j], a->beta);
        }
        if (a->dg) a->dg[j] = (float)(a->beta_g != 0.0f ? s + (double)a->beta_g * (double)a->dg[j] : s);
    }
    return MD_OK;
}
