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

void md_image_resize_f32(const float *src, int c, int h, int w, float *dst, int oh, int ow)
{
    struct cols cl;
    int fast = cols_init(&cl, w, ow);
    for (int ch = 0; ch < c; ch++) {
        const float *p = src + (size_t)ch * h * w;
        for (int y = 0; y < oh; y++) {
            int y0, y1;
            float ty;
            axis_coef(y, h, oh, &y0, &y1, &ty);
            const float *r0 = p + (size_t)y0 * w, *r1 = p + (size_t)y1 * w;
            float *o = dst + ((size_t)ch * oh + y) * ow;
            for (int x = 0; x < ow; x++) {
                int x0, x1;
                float tx;
                col_coef(&cl, fast, x, w, ow, &x0, &x1, &tx);
                float top = r0[x0] + (r0[x1] - r0[x0]) * tx;
                float bot = r1[x0] + (r1[x1] - r1[x0]) * tx;
                o[x] = top + (bot - top) * ty;
            }
        }
    }
    cols_free(&cl);
}

static uint8_t clamp_u8(float v) { return (uint8_t)(v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v); }

void md_image_resize_u8(const uint8_t *src, int c, int h, int w, uint8_t *dst, int oh, int ow)
{
    struct cols cl;
    int fast = cols_init(&cl, w, ow);
    for (int ch = 0; ch < c; ch++) {
        const uint8_t *p = src + (size_t)ch * h * w;
        for (int y = 0; y < oh; y++) {
            int y0, y1;
            float ty;
            axis_coef(y, h, oh, &y0, &y1, &ty);
            const uint8_t *r0 = p + (size_t)y0 * w, *r1 = p + (size_t)y1 * w;
            uint8_t *o = dst + ((size_t)ch * oh + y) * ow;
            for (int x = 0; x < ow; x++) {
                int x0, x1;
                float tx;
                col_coef(&cl, fast, x, w, ow, &x0, &x1, &tx);
                float top = (float)r0[x0] + ((float)r0[x1] - (float)r0[x0]) * tx;
                float bot = (float)r1[x0] + ((float)r1[x1] - (float)r1[x0]) * tx;
                o[x] = clamp_u8(top + (bot - top) * ty + 0.5f);
            }
        }
    }
    cols_free(&cl);
}

void md_image_resize_hwc_u8(const uint8_t *src, int c, int h, int w, uint8_t *dst, int oh, int ow)
{
    struct cols cl;
    int fast = cols_init(&cl, w, ow);
    size_t plane = (size_t)oh * ow;
    for (int y = 0; y < oh; y++) {
        int y0, y1;
        float ty;
        axis_coef(y, h, oh, &y0, &y1, &ty);
        const uint8_t *r0 = src + (size_t)y0 * w * c, *r1 = src + (size_t)y1 * w * c;
        for (int x = 0; x < ow; x++) {
            int x0, x1;
            float tx;
            col_coef(&cl, fast, x, w, ow, &x0, &x1, &tx);
            for (int ch = 0; ch < c; ch++) {
                float a = (float)r0[x0 * c + ch], b = (float)r0[x1 * c + ch];
                float e = (float)r1[x0 * c + ch], f = (float)r1[x1 * c + ch];
                float top = a + (b - a) * tx, bot = e + (f - e) * tx;
                dst[(size_t)ch * plane + (size_t)y * ow + x] = clamp_u8(top + (bot - top) * ty + 0.5f);
            }
        }
    }
    cols_free(&cl);
}

void md_image_hwc_to_chw(const uint8_t *src, int c, int h, int w, uint8_t *dst)
{
    size_t plane = (size_t)h * w;
    for (size_t p = 0; p < plane; p++)
        for (int ch = 0; ch < c; ch++) dst[(size_t)ch * plane + p] = src[p * (size_t)c + (size_t)ch];
}
