/* image.c - resizing and layout conversion of planar images. */
#include <math.h>

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

void md_image_resize_f32(const float *src, int c, int h, int w, float *dst, int oh, int ow)
{
    for (int y = 0; y < oh; y++) {
        int y0, y1;
        float ty;
        axis_coef(y, h, oh, &y0, &y1, &ty);
        for (int x = 0; x < ow; x++) {
            int x0, x1;
            float tx;
            axis_coef(x, w, ow, &x0, &x1, &tx);
            for (int ch = 0; ch < c; ch++) {
                const float *p = src + (size_t)ch * h * w;
                float top = p[y0 * w + x0] + (p[y0 * w + x1] - p[y0 * w + x0]) * tx;
                float bot = p[y1 * w + x0] + (p[y1 * w + x1] - p[y1 * w + x0]) * tx;
                dst[((size_t)ch * oh + y) * ow + x] = top + (bot - top) * ty;
            }
        }
    }
}

void md_image_resize_u8(const uint8_t *src, int c, int h, int w, uint8_t *dst, int oh, int ow)
{
    for (int y = 0; y < oh; y++) {
        int y0, y1;
        float ty;
        axis_coef(y, h, oh, &y0, &y1, &ty);
        for (int x = 0; x < ow; x++) {
            int x0, x1;
            float tx;
            axis_coef(x, w, ow, &x0, &x1, &tx);
            for (int ch = 0; ch < c; ch++) {
                const uint8_t *p = src + (size_t)ch * h * w;
                float top = (float)p[y0 * w + x0] + ((float)p[y0 * w + x1] - (float)p[y0 * w + x0]) * tx;
                float bot = (float)p[y1 * w + x0] + ((float)p[y1 * w + x1] - (float)p[y1 * w + x0]) * tx;
                float v = top + (bot - top) * ty + 0.5f;
                dst[((size_t)ch * oh + y) * ow + x] = (uint8_t)(v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : v);
            }
        }
    }
}

void md_image_hwc_to_chw(const uint8_t *src, int c, int h, int w, uint8_t *dst)
{
    size_t plane = (size_t)h * w;
    for (size_t p = 0; p < plane; p++)
        for (int ch = 0; ch < c; ch++) dst[(size_t)ch * plane + p] = src[p * (size_t)c + (size_t)ch];
}
