/* normalise.c - per-channel mean and std of each delivered input (published
 * values where the dataset has them, else computed from training samples),
 * and the tables of normalised byte values behind the loader's fast path. */
#include <math.h>
#include <string.h>

#include "core/signals.h"
#include "data/data_impl.h"

#define NORM_SAMPLES 1000 /* samples for a computed mean/std, unless the format says fewer */

void md_normalise_known(struct md_data *d)
{
    int nc = d->known_channels;
    const float *m = d->known_mean, *s = d->known_std; /* (3), zero past nc */
    d->norm_known = nc > 0;
    for (int i = 0; i < d->num_inputs && nc; i++) {
        const struct md_data_input *in = &d->inputs[i];
        if (in->kind == MD_INPUT_SIDE) continue;
        /* Known values hold for the stored channels and for replicated gray;
         * a derived luma channel is computed. */
        if (in->c == nc) { memcpy(d->mean[i], m, sizeof d->mean[i]); memcpy(d->stdv[i], s, sizeof d->stdv[i]); }
        else if (nc == 1) { for (int c = 0; c < in->c; c++) { d->mean[i][c] = m[0]; d->stdv[i][c] = s[0]; } }
        else d->norm_known = 0;
    }
}

md_status md_normalise_compute(struct md_data *d)
{
    long long n = d->split_n[MD_SPLIT_TRAIN];
    long long want = d->norm_samples > 0 ? d->norm_samples : NORM_SAMPLES;
    if (n < want) want = n;
    md_data_scratch *s = NULL;
    MD_TRY(md_data_scratch_new(d, &s));
    double sum[MD_DATA_MAX_INPUTS][3] = {{0}}, sq[MD_DATA_MAX_INPUTS][3] = {{0}};
    double cnt[MD_DATA_MAX_INPUTS] = {0};
    md_status st = MD_OK;
    for (long long t = 0; t < want; t++) {
        md_interrupt_hook("data");
        if ((st = md_interrupt_check("while opening the dataset (mean and std from sample %lld of %lld)", t, want)) !=
            MD_OK)
            goto fail;
        long long gi = d->split[MD_SPLIT_TRAIN][(long long)((double)t * (double)n / (double)want)];
        const uint8_t *px;
        st = md_prepare_fetch(d, s, gi, &px);
        if (st != MD_OK) {
            /* The loader meets it again and applies --on-bad-sample there. */
            if (st == MD_ERR_DATA) { md_err_clear(); st = MD_OK; continue; }
            goto fail;
        }
        for (int i = 0; i < d->num_inputs; i++) {
            const struct md_data_input *in = &d->inputs[i];
            if (in->kind == MD_INPUT_SIDE) continue;
            md_prepare_base_image(d, s, px, i, s->base);
            size_t hw = (size_t)in->h * in->w;
            for (int c = 0; c < in->c; c++)
                for (size_t p = 0; p < hw; p++) {
                    double v = s->base[(size_t)c * hw + p];
                    sum[i][c] += v;
                    sq[i][c] += v * v;
                }
            cnt[i] += (double)hw;
        }
    }
    for (int i = 0; i < d->num_inputs; i++)
        for (int c = 0; d->inputs[i].kind != MD_INPUT_SIDE && c < d->inputs[i].c; c++) {
            double m = cnt[i] > 0 ? sum[i][c] / cnt[i] : 0.5;
            double var = cnt[i] > 0 ? sq[i][c] / cnt[i] - m * m : 0.0625;
            double sd = var > 1e-8 ? sqrt(var) : 1.0;
            d->mean[i][c] = (float)m;
            d->stdv[i][c] = (float)sd;
        }
fail:
    md_data_scratch_free(s);
    return st;
}

/* Tables of normalised values for the inputs that use the stored pixels
 * unchanged (same channels and size): the loader's fast path. */
void md_normalise_luts(struct md_data *d)
{
    const float k = 1.0f / 255.0f;
    for (int i = 0; i < d->num_inputs; i++) {
        const struct md_data_input *in = &d->inputs[i];
        if (in->kind == MD_INPUT_SIDE) { d->direct[i] = 0; continue; }
        d->direct[i] = in->c == d->src_c && in->h == d->src_h && in->w == d->src_w && d->view_w[i] == d->src_w;
        for (int c = 0; c < in->c; c++) {
            float m = d->mean[i][c], inv = 1.0f / d->stdv[i][c];
            for (int v = 0; v < 256; v++) d->lut[i][c][v] = ((float)v * k - m) * inv;
        }
    }
}
