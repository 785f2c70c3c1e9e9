/* synth.c - a synthetic dataset a model can learn.
 *
 * Class k is a sinusoidal grating with its own orientation (k/K of a half
 * turn), spatial frequency (one of three) and colour mixture, at a random
 * phase and contrast, plus pixel noise. A linear model separates the classes
 * only partly; a small CNN learns them well, which is what benchmarks and
 * training smoke tests need.
 */
#include <math.h>
#include <string.h>

#include "core/mem.h"

#include "core/rng.h"
#include "data/data_impl.h"

void md_synth_sample(uint64_t seed, long long index, int num_classes, int c, int h, int w, uint8_t *dst,
                     int32_t *label)
{
    int k = (int)(index % num_classes);
    *label = k;
    uint64_t s = md_rng_hash(seed ^ 0x53594e5448ull, (uint64_t)index);
    md_rng r;
    md_rng_init(&r, s);
    const double pi = 3.14159265358979323846;
    double theta = pi * (double)k / (double)num_classes;
    double freq = 1.5 + 1.25 * (double)(k % 3); /* cycles across the image */
    double phase = 2.0 * pi * (double)md_rng_next_uniform(&r);
    double contrast = 0.25 + 0.15 * (double)md_rng_next_uniform(&r);
    double ct = cos(theta), stt = sin(theta);
    /* sin(a(x) + b(y)) = sin a cos b + cos a sin b: w + h sines per sample
     * instead of one per pixel. */
    double *t = md_malloc(sizeof(double) * 2 * (size_t)(w + h));
    if (!t) { /* out of memory: a flat grey image still has its label */
        memset(dst, 128, (size_t)c * h * w);
        return;
    }
    double *sa = t, *ca = t + w, *sb = t + 2 * w, *cb = t + 2 * w + h;
    for (int x = 0; x < w; x++) {
        double a = 2.0 * pi * freq * ((double)x / w - 0.5) * ct;
        sa[x] = sin(a);
        ca[x] = cos(a);
    }
    for (int y = 0; y < h; y++) {
        double b = 2.0 * pi * freq * ((double)y / h - 0.5) * stt + phase;
        sb[y] = sin(b);
        cb[y] = cos(b);
    }
    for (int ch = 0; ch < c; ch++) {
        /* colour: each class weighs the channels differently */
        double cw = c == 1 ? 1.0 : 0.55 + 0.45 * cos(2.0 * pi * ((double)k / num_classes + (double)ch / c));
        double amp = contrast * cw;
        for (int y = 0; y < h; y++) {
            uint8_t *row = dst + ((size_t)ch * h + y) * w;
            for (int x = 0; x < w; x++) {
                double v = 0.5 + amp * (sa[x] * cb[y] + ca[x] * sb[y]) +
                           0.08 * (double)(md_rng_next_uniform(&r) - 0.5f);
                v = v < 0.0 ? 0.0 : v > 1.0 ? 1.0 : v;
                row[x] = (uint8_t)(v * 255.0 + 0.5);
            }
        }
    }
    md_free(t);
}
