/* image.c - resizing and layout conversion of planar images. */
#include <math.h>

#include "core/mem.h"

#include "data/data_impl.h"

/* Source coordinate of destination pixel `o` along an axis of n -> on pixels,
 * half-pixel centres, clamped: index i0, i1 and the weight of i1. */
static void axis_coef(int o, int n, int on, int *i0, int *i1, float *t)
{
    float s = ((float)o + 0.5f) * (float)n / (float)on - 0.5f;
    if (s < 0.0f) s = 0.0f;
    int a = (int)s;
    if (a > n - 1) a = n - 1;
    *i0 = a;
    *i1 = a + 1 < n ? a + 1 : n - 1;
    *t = s - (float)a;
}

/* Per-output-column source indices and weights, computed once per call. */
struct cols { int *x0, *x1; float *tx; };

static int cols_init(struct cols *c, int w, int ow)
{
    c->x0 = md_malloc((size_t)ow * sizeof(int));
    c->x1 = md_malloc((size_t)ow * sizeof(int));
    c->tx = md_malloc((size_t)ow * sizeof(float));
    if (!c->x0 || !c->x1 || !c->tx) return 0;
    for (int x = 0; x < ow; x++) axis_coef(x, w, ow, &c->x0[x], &c->x1[x], &c->tx[x]);
    return 1;
}

/* Column x's source indices and weight: from the table, or computed when
 * the table could not be allocated (fast == 0). */
static void col_coef(const struct cols *cl, int fast, int x, int w, int ow, int *x0, int *x1, float *tx)
{
    if (fast) {
        *x0 = cl->x0[x], *x1 = cl->x1[x], *tx = cl->tx[x];
    } else {
        axis_coef(x, w, ow, x0, x1, tx);
    }
}

static void cols_free(struct cols *c)
{
    md_free(c->x0);
    md_free(c->x1);
    md_free(c->tx);
}

static uint8_t clamp_u8(float v) { return (uint8_t)(v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v); }

/* Inlined into each resizer, so that u8 and the strides are constants there
 * (as fast as three hand-written loops). */
#define ALWAYS_INLINE __attribute__((always_inline)) inline

/* Element i of src: uint8_t when u8, else float. */
static ALWAYS_INLINE float load(const void *src, int u8, size_t i) { return u8 ? (float)((const uint8_t *)src)[i] : ((const float *)src)[i]; }

/* Bilinear resize of c channels to planar (c, oh, ow) dst: source pixel
 * (ch, y, x) at ch*cs + y*rs + x*ps (planar or interleaved). u8: src and dst
 * are uint8_t (rounded, clamped), else float. */
static ALWAYS_INLINE void resize(const void *src, int u8, int c, int h, int w, size_t cs, size_t rs, size_t ps,
                                  void *dst, int oh, int ow)
{
    struct cols cl;
    int fast = cols_init(&cl, w, ow);
    for (int ch = 0; ch < c; ch++)
        for (int y = 0; y < oh; y++) {
            int y0, y1;
            float ty;
            axis_coef(y, h, oh, &y0, &y1, &ty);
            size_t r0 = (size_t)ch * cs + (size_t)y0 * rs, r1 = (size_t)ch * cs + (size_t)y1 * rs;
            size_t o = ((size_t)ch * oh + y) * ow;
            for (int x = 0; x < ow; x++) {
                int x0, x1;
                float tx;
                col_coef(&cl, fast, x, w, ow, &x0, &x1, &tx);
                float a = load(src, u8, r0 + (size_t)x0 * ps), b = load(src, u8, r0 + (size_t)x1 * ps);
                float e = load(src, u8, r1 + (size_t)x0 * ps), f = load(src, u8, r1 + (size_t)x1 * ps);
                float top = a + (b - a) * tx, bot = e + (f - e) * tx;
                if (u8)
                    ((uint8_t *)dst)[o + x] = clamp_u8(top + (bot - top) * ty + 0.5f);
                else
                    ((float *)dst)[o + x] = top + (bot - top) * ty;
            }
        }
    cols_free(&cl);
}

void md_image_resize_f32(const float *src, int c, int h, int w, float *dst, int oh, int ow)
{
    resize(src, 0, c, h, w, (size_t)h * w, (size_t)w, 1, dst, oh, ow);
}

void md_image_resize_u8(const uint8_t *src, int c, int h, int w, uint8_t *dst, int oh, int ow)
{
    resize(src, 1, c, h, w, (size_t)h * w, (size_t)w, 1, dst, oh, ow);
}

void md_image_resize_hwc_u8(const uint8_t *src, int c, int h, int w, uint8_t *dst, int oh, int ow)
{
    resize(src, 1, c, h, w, 1, (size_t)w * c, (size_t)c, dst, oh, ow);
}

void md_image_hwc_to_chw(const uint8_t *src, int c, int h, int w, uint8_t *dst)
{
    size_t plane = (size_t)h * w;
    for (size_t p = 0; p < plane; p++)
        for (int ch = 0; ch < c; ch++) dst[(size_t)ch * plane + p] = src[p * (size_t)c + (size_t)ch];
}
