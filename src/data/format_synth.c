/* format_synth.c - the synthetic dataset (synth.c's class-conditional
 * patterns): no files, samples made from (seed, index) on demand, 5,000
 * training and 1,000 test samples (more training samples when --max-samples
 * asks for more), in the model's input shape. */
#include <math.h>
#include <stdio.h>

#include "core/mem.h"
#include "data/format.h"

#define SYNTH_TRAIN 5000
#define SYNTH_TEST 1000

struct synth_state {
    uint64_t seed;
    int num_classes;
    int c, h, w;
};

static md_status synth_peek(const struct md_format_args *a, struct md_data_peek *out)
{
    out->num_classes = 10;
    out->c = 3;
    out->h = out->w = a->image_size > 0 ? a->image_size : 32;
    return MD_OK;
}

static void synth_free(void *state) { md_free(state); }

static md_status synth_open(const struct md_format_args *a, struct md_format_desc *d, void **state)
{
    *state = NULL;
    const struct md_data_request *req = a->req;
    snprintf(d->format, sizeof d->format, "synthetic");
    const struct md_data_input *in = req->num_inputs > 0 ? &req->inputs[0] : NULL;
    int side = a->image_size > 0 ? a->image_size : 32;
    d->c = in && in->c > 0 ? in->c : 3;
    d->h = in && in->h > 0 ? in->h : side;
    d->w = in && in->w > 0 ? in->w : side;
    d->num_classes = req->num_classes > 0 ? req->num_classes : 10;
    long long ntr = SYNTH_TRAIN, nte = SYNTH_TEST;
    if (a->max_samples > 0 && a->max_samples > ntr * (1.0 - a->val_split))
        ntr = (long long)ceil((double)a->max_samples / (1.0 - a->val_split));
    d->count = ntr + nte;
    struct synth_state *s = md_calloc(1, sizeof *s);
    d->labels = md_malloc((size_t)d->count * sizeof(int32_t));
    d->class_names = md_calloc((size_t)d->num_classes, sizeof(char *));
    if (!s || !d->labels || !d->class_names) {
        md_free(s);
        return MD_ERR_OOM;
    }
    for (long long i = 0; i < d->count; i++) d->labels[i] = (int32_t)(i % d->num_classes);
    for (int k = 0; k < d->num_classes; k++) {
        char nm[32];
        snprintf(nm, sizeof nm, "pattern_%d", k);
        if (!(d->class_names[k] = md_strdup(nm))) {
            md_free(s);
            return MD_ERR_OOM;
        }
    }
    d->ranges.end[MD_SPLIT_TRAIN] = ntr;
    d->ranges.start[MD_SPLIT_TEST] = ntr;
    d->ranges.end[MD_SPLIT_TEST] = ntr + nte;
    snprintf(d->split_origin[MD_SPLIT_TEST], sizeof d->split_origin[0], "generated");
    /* Up to 256 MiB in all are kept once made: making one costs more than a copy. */
    d->keep_decoded = (size_t)d->count * (size_t)d->c * d->h * d->w <= ((size_t)256 << 20);
    s->seed = a->seed;
    s->num_classes = d->num_classes;
    s->c = d->c;
    s->h = d->h;
    s->w = d->w;
    *state = s;
    return MD_OK;
}

static md_status synth_read(const void *state, void *scratch, long long i, uint8_t *buf, const uint8_t **px)
{
    (void)scratch;
    const struct synth_state *s = state;
    int32_t label;
    md_synth_sample(s->seed, i, s->num_classes, s->c, s->h, s->w, buf, &label);
    *px = buf;
    return MD_OK;
}

const struct md_data_format md_format_synth = {
    .name = "synthetic",
    .datasets = (const char *const[]){"synthetic", NULL},
    .peek = synth_peek,
    .open = synth_open,
    .read = synth_read,
    .free = synth_free,
};
