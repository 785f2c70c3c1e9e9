/* layer.h - the layer interface: what a layer kind tells the graph (model.c)
 * and the executor (model_exec.c), and the helpers its file may use.
 *
 * One kind = one file under src/nn/layers/ that defines a
 * `const struct md_layer_ops md_<kind>_layer` and keeps its arguments in a
 * struct of its own (L->args); plus one line in the registry (layer.c).
 * docs/layers.md walks through adding one. Nobody outside src/nn includes
 * this.
 *
 * Life of a layer: parse (its JSON entry -> L->args) -> shape (inputs ->
 * L->out, nparams, flops) -> [compile: fusion hooks] -> params / buffers /
 * mask_per_sample (what the flat buffers hold for it) -> init (host initial
 * values) -> forward / backward per step. Hooks marked (optional) may be
 * NULL; the default is given.
 */
#ifndef MD_LAYER_H
#define MD_LAYER_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "backend/kernels_call.h"
#include "nn/model_impl.h"

/* Bounds every kind checks its output and parameters against. */
#define MD_MODEL_MAX_OUTPUT_ELEMS 2147483647LL /* per sample: activation offsets are int-sized */
#define MD_MODEL_MAX_PARAMS (1LL << 40)        /* 4 TiB of fp32 whatever the memory says */

/* What parse may know besides the layer's JSON entry. */
struct md_layer_parse {
    const struct md_model_opts *opts; /* --reduce-architecture, --dropout, layout */
    const char *type;                 /* the type name matched (one of ops->names) */
    int is_last;                      /* the model's last layer (the classifier) */
};

/* One tensor a layer asks for in the flat buffers: a parameter (ops->params)
 * or a buffer of running statistics (ops->buffers). */
struct md_param_decl {
    const char *suffix; /* "weight" -> "<layer>.weight"; static */
    int ndim, shape[4]; /* PyTorch's shape */
    int decay;          /* parameters: weight-decayed (goes in [0, ndecay)) */
    int khwc;           /* parameters: a conv filter stored (K, R, S, C/g) on the device */
    float fill;         /* buffers: initial value */
};

/* A forward or backward pass over the bound model (model_exec.c builds it). */
struct md_layer_run {
    struct md_model *m;
    const struct md_model_plan *plan;
    int n;         /* items: the batch times the layer's fold (md_layer.fold) */
    int training;
    int bwd_phase; /* use the backward-phase (recomputed) buffers */
    int recompute; /* forward again for checkpointing: leave running statistics alone */
};

struct md_layer_ops {
    /* The config's type names, NULL-terminated (one kind may answer to
     * several: relu, gelu, ... are one activation kind); NULL for a kind no
     * config names (the model's inputs). */
    const char *const *names;
    size_t args_size;          /* bytes of the kind's argument struct (L->args, zeroed); 0: none */
    int min_inputs, max_inputs; /* max_inputs 0: no upper bound */
    /* (default 0) A kind of token sequences (T, 1, F): a model with one runs
     * in the NCHW layout whatever layout was asked (md_model_get_opts says). */
    int tokens;

    /* L->args from the JSON entry `o` (keys "name" and "type" are the
     * graph's; every other key is the kind's, and an unknown one is an
     * error). Errors name L->path ("layers[3].kernel: ..."). Input shapes
     * are not known to parse; shape checks them. */
    md_status (*parse)(const struct md_layer_parse *p, const cJSON *o, struct md_layer *L);
    /* From the input layers (m->layers[L->in[k]].out): L->out, L->nparams,
     * L->flops (forward, per item: the graph multiplies by the fold). L->fold
     * comes in as the inputs' (all equal); a kind that changes it (tiles,
     * regroup) sets it here. The graph then checks the bounds. */
    md_status (*shape)(const struct md_model *m, struct md_layer *L);
    /* (optional, default none) Parameter tensors, at most
     * MD_LAYER_MAX_PARAMS, in slot order: slot k lands in L->param[k]. */
    int (*params)(const struct md_model *m, const struct md_layer *L, struct md_param_decl *out);
    /* (optional, default none) For parameter slot k, the suffixes of the
     * tensors that, stacked along the first dimension in this order, stand
     * in for it when a weights file lacks it (NULL-terminated, static; one
     * suffix: a plain other name). PyTorch models that keep separate
     * projections (md_model_load_weights). */
    const char *const *(*stacked_from)(const struct md_layer *L, int k);
    /* (optional, default none) Running statistics, kept in bn_stats
     * (a same-sized bn_save beside it) from L->stat_off on, one after the
     * other; saved and loaded with the weights. */
    int (*buffers)(const struct md_model *m, const struct md_layer *L, struct md_param_decl *out);
    /* (optional, default 0) Bytes per item kept from forward to backward
     * (dropout masks), at L->mask_off * max_batch in m->masks (the graph
     * reserves fold times as much per sample). */
    size_t (*mask_per_sample)(const struct md_layer *L);
    /* (optional, default none) Host initial values of its parameters, in
     * PyTorch's order (NHWC filters are permuted afterwards), into the flat
     * buffer `p`; seeded per tensor so that every device gets the same. */
    void (*init)(const struct md_model *m, const struct md_layer *L, float *p);

    /* Layer i's output from its inputs' (md_layer_act). */
    md_status (*forward)(const struct md_layer_run *r, int i);
    /* d(loss)/d(inputs) from md_layer_grad(r, i), added through md_layer_dx;
     * parameter gradients into md_layer_grad32 / md_layer_wgrad
     * (overwritten: a parameter belongs to one layer). NULL for inputs. */
    md_status (*backward)(const struct md_layer_run *r, int i);

    /* (optional, default the type name) The summary's type column. */
    void (*describe)(const struct md_layer *L, char *buf, size_t n);
    /* (optional) Extra keys of the layer in the JSON summary. */
    void (*describe_json)(const struct md_layer *L, cJSON *x);

    /* Planner: (optional, default 0) backward reads the inputs' / its own
     * output activations (they are kept until then). */
    int (*needs_x)(const struct md_layer *L);
    int (*needs_y)(const struct md_layer *L);
    /* (optional, default needs_x) Whether backward reads input k's activation
     * (a batch norm with a fused residual reads x, not the residual). */
    int (*needs_input)(const struct md_layer *L, int k);
    /* (optional, default 0) Each input's gradient equals the output's (a
     * sum): the planner may give an input's gradient this layer's buffer,
     * and backward then skips that copy (md_layer_dx returns dy itself). */
    int (*passes_dy)(const struct md_layer *L);
    /* (optional, default 0) Backward changes its output gradient in place
     * (so it may not share a buffer with other readers). */
    int (*clobbers_dy)(const struct md_layer *L);

    /* Fusion (compile). (optional, default MD_ACT_NONE) The activation of a
     * layer that only applies one to its single input: compile offers it to
     * the producer. */
    int (*lone_act)(const struct md_layer *L);
    /* (optional, default refuse) Takes activation `act` into this layer's
     * own output; 1 if it did. */
    int (*fuse_act)(struct md_layer *L, int act);
    /* (optional) For a two-operand sum: its activation (>= 0), offered with
     * one operand to the other operand's producer; -1 when not such a sum. */
    int (*sum_act)(const struct md_layer *L);
    /* (optional, default refuse) Takes a following "add a second input, then
     * activation `act`" into this layer (the caller appends the input to
     * L->in); 1 if it did. */
    int (*fuse_residual)(struct md_layer *L, int act);
    /* (optional, default 0) 1 for a 2x2 stride-2 unpadded max pool: at bind,
     * a device that runs it inside its producer (md_dev_batchnorm_pool) gets
     * it fused there. */
    int (*max_pool_2x2)(const struct md_layer *L);
    /* (optional, default refuse) Takes (on = 1, or 2: channels-last, where
     * the device keeps the pool's routing from forward to backward) or gives
     * back (on = 0) a following max_pool_2x2 pool; 1 if it did. The caller
     * sets L->out. */
    int (*fuse_pool)(struct md_layer *L, int on);
    /* (optional, default 0) A convolution whose filter gradient its consumer
     * may compute instead (a single group, no bias): its C*R*S. */
    int (*lone_filter)(const struct md_model *m, const struct md_layer *L);
    /* (optional) With lone_filter: the conv2d_bwd_filter call's arguments
     * without dy (geometry, input, filter, filter gradient, beta 0). */
    void (*filter_args)(const struct md_layer_run *r, int i, struct md_conv2d_args *c);
    /* (optional, default refuse) Takes (on) or gives back (0) the filter
     * gradient of the lone_filter convolution feeding it, computed in its
     * own backward instead of its input's gradient; 1 if it did. */
    int (*fuse_filter)(struct md_layer *L, int on);
    /* (optional, default MD_ACT_NONE) The activation applied last to the
     * output (ReLU statistics). */
    int (*out_act)(const struct md_layer *L);
    /* (optional, default 0) 1 and the drop probability for a dropout. */
    int (*dropout)(const struct md_layer *L, double *p);
    /* (optional, default 3 and 3: a pass each way forward, two backward)
     * Passes over tensors the size of its inputs and of its output that
     * one training step's forward and backward make together (the
     * profile's bytes, md_model_layer_step_bytes). */
    void (*step_passes)(const struct md_layer *L, double *in, double *out);
};

/* The model's inputs (layers [0, ninputs)); not in the registry. */
extern const struct md_layer_ops md_input_layer;

/* The kind whose names include `type`, or NULL. */
const struct md_layer_ops *md_layer_find(const char *type);
/* The registry in order (for messages and tests): *n entries. */
const struct md_layer_ops *const *md_layer_registry(int *n);

/* ---- parse helpers (errors name path.key) ---- */
/* Only "name", "type" and `keys` (NULL-terminated). */
md_status md_layer_check_keys(const cJSON *o, const char *path, const char *const *keys);
/* An int >= min (and <= 4096) or an [h, w] pair of them; defaults when absent. */
md_status md_layer_get_pair(const cJSON *o, const char *key, const char *path, int min, int *a, int *b,
                            int dflt_a, int dflt_b);
/* "act": "relu" or "none" (default). */
md_status md_layer_get_act(const cJSON *o, const char *path, int *act);
/* A drop probability in [0, 0.999] at `key` (dflt when absent); --dropout, when given,
 * replaces it. */
md_status md_layer_get_dropout(const struct md_layer_parse *p, const cJSON *o, const char *key, const char *path,
                               double dflt, float *prob);

/* Every input of a multi-input layer has the first input's height and width
 * (and channels when same_c); errors name L->path.inputs[k] and end with
 * `hint`. */
md_status md_layer_check_inputs(const struct md_model *m, const struct md_layer *L, int same_c, const char *hint);

/* ---- execution helpers ---- */

/* Activation of layer i (after aliasing): its arena buffer, or the fp32
 * input buffer itself. Borrowed. */
static inline void *md_layer_act(const struct md_layer_run *r, int i)
{
    int t = md_model_tensor_of(r->m, i);
    if (t < r->m->ninputs && r->m->opts.compute_dtype == MD_F32) return r->m->inputs[t];
    size_t off = r->bwd_phase ? r->plan->off_bwd[t] : r->plan->off_fwd[t];
    MD_ASSERT(off != SIZE_MAX);
    return r->m->arena + off;
}

/* Gradient buffer of layer i's output (after aliasing). */
static inline void *md_layer_grad(const struct md_layer_run *r, int i)
{
    int t = md_model_tensor_of(r->m, i);
    MD_ASSERT(r->plan->goff[t] != SIZE_MAX);
    return r->m->arena + r->plan->goff[t];
}

/* Where layer i writes the gradient of its k-th input; *beta 1 when that
 * buffer already holds a contribution (a tensor feeding several layers). */
static inline void *md_layer_dx(const struct md_layer_run *r, int i, int k, float *beta)
{
    int t = md_model_tensor_of(r->m, r->m->layers[i].in[k]);
    *beta = r->m->written[t] ? 1.0f : 0.0f;
    r->m->written[t] = 1;
    return md_layer_grad(r, t);
}

/* Parameter tensor t: the compute-dtype copy the matrix kernels read, its
 * gradient in that dtype, and the fp32 master values and gradients. */
static inline void *md_layer_weight(struct md_model *m, int t)
{
    size_t off = m->tensors[t].offset;
    if (m->params_half) return (char *)m->params_half + off * md_dtype_size(m->opts.compute_dtype);
    return m->params + off;
}
static inline void *md_layer_wgrad(struct md_model *m, int t)
{
    size_t off = m->tensors[t].offset;
    if (m->grads_half) return (char *)m->grads_half + off * md_dtype_size(m->opts.compute_dtype);
    return m->grads + off;
}
static inline float *md_layer_param32(struct md_model *m, int t) { return m->params + m->tensors[t].offset; }
static inline float *md_layer_grad32(struct md_model *m, int t) { return m->grads + m->tensors[t].offset; }

/* Saved state of layer i: what ops->mask_per_sample reserved (kept from
 * forward to backward: dropout masks, a layer's intermediate tensors), from
 * byte `off` of an item's share on; the block for the whole batch is
 * max_batch * fold times the per-item bytes. Offsets that are multiples of
 * 16 give 16-byte aligned blocks. */
static inline void *md_layer_saved(const struct md_layer_run *r, int i, size_t off)
{
    size_t items = (size_t)r->m->max_batch * (size_t)r->m->layers[i].fold;
    return r->m->masks + r->m->layers[i].mask_off * (size_t)r->m->max_batch + off * items;
}
/* Rounds a per-sample byte count up to a multiple of 16. */
static inline size_t md_layer_align16(size_t b) { return (b + 15) & ~(size_t)15; }

/* Token sequence layers (docs/transformers.md): a per-sample tensor (T, 1, F)
 * in the default NCHW layout; errors name L->path and what was given. */
md_status md_layer_check_tokens(const struct md_model *m, const struct md_layer *L, struct md_shape x);

/* C (mm x nn, ldc) = A @ B (+ beta * C) in the compute dtype, one matrix:
 * A (mm x kk) or, with ta, A^T of (kk x mm); B (kk x nn) or, with tb, B^T. */
md_status md_layer_gemm(struct md_model *m, int ta, int tb, int mm, int nn, int kk, const void *a, int lda,
                        const void *b, int ldb, void *c, int ldc, float beta);

/* y = alpha * s * a + beta * b in the compute dtype (a copy when only a),
 * reading b only when beta != 0; s: a device scalar or NULL. */
md_status md_layer_axpby(struct md_model *m, size_t n, float alpha, const float *s, const void *a, float beta,
                         const void *b, void *y);

#endif
