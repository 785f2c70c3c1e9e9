/* input.c - a model input: (c, h, w) per sample from the config's "inputs",
 * uploaded fp32 by the trainer. Its forward casts the batch to the compute
 * dtype (with fp32 compute the layer's activation is the input buffer
 * itself and nothing runs). model.c makes these layers from "inputs"; no
 * "type" names them. */
#include "nn/layer.h"

static md_status input_forward(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    md_dtype dt = m->opts.compute_dtype;
    if (dt == MD_F32) return MD_OK;
    size_t ne = (size_t)r->n * md_shape_numel(m->layers[i].out);
    struct md_cast_args c = {ne, MD_F32, dt, m->inputs[i], md_layer_act(r, i)};
    return md_k_cast(m->dev, &c);
}

const struct md_layer_ops md_input_layer = {
    .names = NULL,
    .forward = input_forward,
};
