/* prepare.c - one sample for the loader: fetched (resident pixels, the
 * decoded-image cache, or the format's reader), channels converted, resized,
 * augmented (crop and flip), normalised and written in the requested layout.
 * Everything here is a pure function of the sample and the augmentation, so
 * any worker thread may prepare any sample. */
#define _POSIX_C_SOURCE 200809L
#include <string.h>

#include "core/mem.h"
#include "core/rng.h"
#include "core/status.h"
#include "data/format.h"

md_status md_data_scratch_new(const struct md_data *d, md_data_scratch **out)
{
    *out = NULL;
    md_data_scratch *s = md_calloc(1, sizeof *s);
    if (!s) return MD_ERR_OOM;
    size_t maxc = 1, maxhw = 1;
    for (int i = 0; i < d->num_inputs; i++) {
        if ((size_t)d->inputs[i].c > maxc) maxc = (size_t)d->inputs[i].c;
        size_t hw = (size_t)d->inputs[i].h * d->inputs[i].w;
        if (hw > maxhw) maxhw = hw;
    }
    size_t srchw = (size_t)d->src_h * d->src_w;
    s->u8 = md_malloc(d->src_bytes);
    s->conv = md_malloc(maxc * srchw * sizeof(float));
    s->base = md_malloc(maxc * maxhw * sizeof(float));
    s->view = d->halves ? md_malloc(d->src_bytes) : NULL;
    md_status st = (s->u8 && s->conv && s->base && (s->view || !d->halves)) ? MD_OK : MD_ERR_OOM;
    if (st == MD_OK && d->fmt->scratch_new) {
        s->fmt_free = d->fmt->scratch_free;
        st = d->fmt->scratch_new(d->fstate, &s->fmt);
    }
    if (st != MD_OK) {
        md_data_scratch_free(s);
        return st;
    }
    *out = s;
    return MD_OK;
}

void md_data_scratch_free(md_data_scratch *s)
{
    if (!s) return;
    if (s->fmt_free) s->fmt_free(s->fmt);
    md_free(s->u8);
    md_free(s->conv);
    md_free(s->base);
    md_free(s->view);
    md_free(s);
}

/* The stored pixels of sample gi: (src_c, src_h, src_w) u8. */
md_status md_prepare_fetch(struct md_data *d, md_data_scratch *s, long long gi, const uint8_t **px)
{
    uint8_t *slot = NULL;
    if (d->cache) { /* never for formats that hold their samples */
        int state = __atomic_load_n(&d->cache_state[gi], __ATOMIC_ACQUIRE);
        if (state == 2) {
            *px = d->cache + (size_t)gi * d->src_bytes;
            return MD_OK;
        }
        int expect = 0;
        if (__atomic_compare_exchange_n(&d->cache_state[gi], &expect, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE))
            slot = d->cache + (size_t)gi * d->src_bytes;
    }
    md_status st = d->fmt->read(d->fstate, s->fmt, gi, slot ? slot : s->u8, px);
    if (slot) {
        if (st == MD_OK) {
            __atomic_store_n(&d->cache_state[gi], 2, __ATOMIC_RELEASE);
            __atomic_add_fetch(&d->cache_filled, 1, __ATOMIC_RELAXED);
        } else {
            __atomic_store_n(&d->cache_state[gi], 0, __ATOMIC_RELEASE);
        }
    }
    return st;
}

/* Input i of a sample at the input's size, channels converted, in [0, 1]:
 * out (c_i, h_i, w_i). */
void md_prepare_base_image(const struct md_data *d, md_data_scratch *s, const uint8_t *px, int i, float *out)
{
    const struct md_data_input *in = &d->inputs[i];
    int vw = d->view_w[i];
    if (vw != d->src_w) { /* a half: its columns, contiguous */
        for (int c = 0; c < d->src_c; c++)
            for (int y = 0; y < d->src_h; y++)
                memcpy(s->view + ((size_t)c * d->src_h + y) * vw,
                       px + ((size_t)c * d->src_h + y) * d->src_w + d->view_x0[i], (size_t)vw);
        px = s->view;
    }
    size_t hw = (size_t)d->src_h * vw;
    int same = in->h == d->src_h && in->w == vw;
    float *conv = same ? out : s->conv;
    const float k = 1.0f / 255.0f;
    if (in->c == d->src_c) {
        for (size_t p = 0; p < (size_t)in->c * hw; p++) conv[p] = (float)px[p] * k;
    } else if (d->src_c == 1) { /* gray -> replicated channels */
        for (int c = 0; c < in->c; c++)
            for (size_t p = 0; p < hw; p++) conv[(size_t)c * hw + p] = (float)px[p] * k;
    } else { /* RGB -> luma */
        for (size_t p = 0; p < hw; p++)
            conv[p] = (0.299f * (float)px[p] + 0.587f * (float)px[hw + p] + 0.114f * (float)px[2 * hw + p]) * k;
    }
    if (!same) md_image_resize_f32(conv, in->c, d->src_h, vw, out, in->h, in->w);
}

long long md_data_split_index(const struct md_data *d, md_split s, long long i) { return d->split[s][i]; }

struct md_aug md_data_aug_draw(const struct md_data *d, uint64_t seed, int epoch, long long position)
{
    struct md_aug a = {d->aug_pad, d->aug_pad, 0};
    uint64_t h = md_rng_hash(md_rng_hash(seed, 0x4155474d454e54ull + (uint64_t)epoch), (uint64_t)position);
    uint32_t span = (uint32_t)(2 * d->aug_pad + 1);
    a.dy = (int)((h & 0xffff) % span);
    a.dx = (int)(((h >> 16) & 0xffff) % span);
    a.flip = d->aug_flip ? (int)((h >> 32) & 1) : 0;
    return a;
}

/* A time-series window: input 0 the series, input 1 (when delivered) its
 * time features, and the targets; nothing to convert or augment. */
static md_status prepare_series(struct md_data *d, long long gi, float *const *inputs, int j, int32_t *label,
                                float *targets)
{
    const struct md_data_series *sr = &d->series;
    size_t xs = (size_t)sr->seq_len * sr->n_in, ms = (size_t)sr->seq_len * sr->n_time;
    size_t ys = (size_t)sr->pred_len * sr->n_out;
    *label = 0;
    return d->fmt->read_series(d->fstate, gi, inputs[0] + (size_t)j * xs,
                               d->num_inputs > 1 ? inputs[1] + (size_t)j * ms : NULL, targets + (size_t)j * ys);
}

md_status md_data_prepare(struct md_data *d, md_data_scratch *s, long long gi, const struct md_aug *aug,
                          float *const *inputs, int j, int32_t *label, float *targets, int *bad)
{
    *bad = 0;
    if (d->task == MD_TASK_REGRESS && !d->image_values) return prepare_series(d, gi, inputs, j, label, targets);
    const uint8_t *px = NULL;
    md_status st = md_prepare_fetch(d, s, gi, &px);
    if (st != MD_OK) {
        if (st == MD_ERR_DATA && d->skip_bad) {
            md_data_note_bad(d, d->fmt->sample_name ? d->fmt->sample_name(d->fstate, gi) : d->source, md_errmsg());
            md_err_clear();
            *bad = 1;
            return MD_OK;
        }
        return st;
    }
    *label = d->labels[gi];
    if (d->image_values) { /* standardised targets */
        int k = d->series.n_out;
        for (int t = 0; t < k; t++)
            targets[(size_t)j * k + t] = (float)(((double)d->values[(size_t)gi * k + t] - d->tmean[t]) / d->tstd[t]);
    }
    int pad = aug ? d->aug_pad : 0;
    int dy = aug ? aug->dy : 0, dx = aug ? aug->dx : 0, flip = aug ? aug->flip : 0;
    for (int i = 0; i < d->num_inputs; i++) {
        const struct md_data_input *in = &d->inputs[i];
        int C = in->c, H = in->h, W = in->w;
        if (in->kind == MD_INPUT_SIDE) { /* standardised side values, in any layout the same memory */
            float *o = inputs[i] + (size_t)j * d->n_side;
            for (int t = 0; t < d->n_side; t++)
                o[t] = (float)(((double)d->side[(size_t)gi * d->n_side + t] - d->smean[t]) / d->sstd[t]);
            continue;
        }
        /* Inputs that are the stored pixels as they are read them through a
         * table of normalised values; others go through a float image. */
        int direct = d->direct[i];
        if (!direct) md_prepare_base_image(d, s, px, i, s->base);
        float *o = inputs[i] + (size_t)j * C * H * W;
        size_t step = d->layout == MD_NHWC ? (size_t)C : 1;
        for (int c = 0; c < C; c++) {
            float m = d->mean[i][c], inv = 1.0f / d->stdv[i][c];
            const float *lut = d->lut[i][c];
            float padv = (0.0f - m) * inv;
            const float *b = s->base + (size_t)c * H * W;
            const uint8_t *pc = px + (size_t)c * H * W;
            for (int y = 0; y < H; y++) {
                int sy = y + dy - pad;
                float *orow = d->layout == MD_NHWC ? o + (size_t)y * W * C + c : o + ((size_t)c * H + y) * W;
                if (sy < 0 || sy >= H) {
                    for (int x = 0; x < W; x++) orow[(size_t)x * step] = padv;
                    continue;
                }
                int x0 = flip ? W - 1 + dx - pad : dx - pad; /* source column of x = 0 */
                int dir = flip ? -1 : 1;
                if (direct) {
                    const uint8_t *row = pc + (size_t)sy * W;
                    for (int x = 0, sx = x0; x < W; x++, sx += dir)
                        orow[(size_t)x * step] = (sx >= 0 && sx < W) ? lut[row[sx]] : padv;
                } else {
                    const float *row = b + (size_t)sy * W;
                    for (int x = 0, sx = x0; x < W; x++, sx += dir)
                        orow[(size_t)x * step] = (sx >= 0 && sx < W) ? (row[sx] - m) * inv : padv;
                }
            }
        }
    }
    return MD_OK;
}
