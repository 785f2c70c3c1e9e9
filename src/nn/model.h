/* model.h - a neural network built from a JSON config: the public API.
 *
 * Life of a model:
 *   md_model_load()   parse the config, check it strictly, infer shapes, count
 *                     parameters and FLOPs. No device memory. Errors name the
 *                     JSON path ("small_cnn.json: layers[3].kernel: ...").
 *   md_model_bind()   allocate on a device: ONE flat fp32 parameter buffer,
 *                     ONE flat fp32 gradient buffer, the half copy of the
 *                     weights (fp16/bf16 compute), BN statistics, dropout
 *                     masks and one activation arena planned by lifetime;
 *                     initialise the parameters (on the host, seeded, the same
 *                     on every backend) and upload them.
 *   per step:         upload a batch into md_model_input_buffer(), then
 *                     md_model_forward(), md_model_loss(), md_model_backward();
 *                     the trainer runs the optimizer over md_model_params()
 *                     and md_model_grads().
 *
 * Parameters and gradients are always fp32 ("master"). Activations, and the
 * copy of conv/linear weights used by the matrix kernels, have the compute
 * dtype (F32, F16 or BF16). The flat buffers put every weight-decayed tensor
 * (conv and linear weights) first, then the rest (biases, BN gamma/beta,
 * weighted_add weights): elements [0, ndecay) are decayed, [ndecay, nparams)
 * are not, so an optimizer needs two calls at most and no per-tensor loop.
 *
 * Tensor names follow the config's layer names ("layer1.0.conv1.weight",
 * "fc.bias"), as torchvision's state dict does for the shipped ResNets.
 */
#ifndef MD_MODEL_H
#define MD_MODEL_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/status.h"
#include "core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct md_model md_model; /* opaque; == struct md_model of app/job.h */
struct md_bn_sync;                /* backend/kernels.h */

#define MD_MODEL_MAX_SETS 16

struct md_model_opts {
    md_layout layout;          /* activation layout (NHWC: --channels-last) */
    md_dtype compute_dtype;    /* MD_F32, MD_F16 or MD_BF16 */
    int grad_ckpt;             /* keep only segment boundaries; recompute in backward */
    int compile;               /* fuse BN+ReLU and add+ReLU, share memory by lifetime */
    uint64_t seed;             /* initialisation and dropout */
    double dropout;            /* < 0: the config's probabilities */
    int reduce_architecture;   /* halve the width of every conv/linear (not the classifier) */
    int num_classes;           /* 0: the config's */
    int nsets;                 /* model parameters set over the config's "params" (md_model_opts_set) */
    struct md_model_set {
        char name[32];
        double value;
        int if_present;        /* 1: ignored when the config has no such parameter */
    } sets[MD_MODEL_MAX_SETS];
};

/* Defaults: NCHW, fp32, no checkpointing, compile on, seed 42, dropout -1. */
void md_model_opts_default(struct md_model_opts *o);
/* Sets model parameter `name` (a key of the config's "params", used as
 * "$name" in layers and input shapes: seq_len, d_model, n_vars, ...) to
 * `value`, over the config's value. Loading fails (MD_ERR_USAGE, naming the
 * parameters the model has) when the config has no such parameter, unless
 * `if_present` (for values the data supplies to whichever model, such as the
 * number of variates). Setting a name again replaces its value. Errors:
 * MD_ERR_USAGE past MD_MODEL_MAX_SETS names or for a name of 32+ bytes. */
md_status md_model_opts_set(struct md_model_opts *o, const char *name, double value, int if_present);

/* Loads a model config. `name_or_path`: a file path (contains '/' or ends in
 * ".json"), or a name resolved to configs/models/<name>.json, searched in
 * ./configs/models then <exe_dir>/../configs/models. When `inline_model` is
 * non-NULL it is used instead of reading a file and `name_or_path` only names
 * it in messages. Owns nothing of the caller's; *out is freed with
 * md_model_free. Errors: MD_ERR_CONFIG / MD_ERR_IO with the JSON path. */
md_status md_model_load(const char *name_or_path, const cJSON *inline_model,
                        const struct md_model_opts *opts, md_model **out);
void md_model_free(md_model *m); /* NULL ok; frees device memory too */

/* ---- queries (valid after load) ---- */
const char *md_model_name(const md_model *m);
int md_model_num_inputs(const md_model *m);
const char *md_model_input_name(const md_model *m, int i);
void md_model_input_shape(const md_model *m, int i, int *c, int *h, int *w);
int md_model_num_classes(const md_model *m);  /* 0 for a regression model */
/* A config with "task": "regression": the last layer's output is the
 * prediction (any shape, e.g. (pred_len, 1, n_vars)), not class logits. */
int md_model_is_regression(const md_model *m);
/* The model parameter that sets the task ("task": "$name" in the config:
 * 0 classification, nonzero regression), or NULL for a fixed task. Borrowed
 * from the model. */
const char *md_model_task_param(const md_model *m);
/* The last layer's output per sample (classification: (num_classes, 1, 1)). */
void md_model_output_shape(const md_model *m, int *c, int *h, int *w);
size_t md_model_nparams(const md_model *m);  /* elements of the flat buffers */
size_t md_model_ndecay(const md_model *m);   /* [0, ndecay) are weight-decayed */
double md_model_flops_fwd(const md_model *m);   /* per sample, forward */
double md_model_flops_train(const md_model *m); /* per sample, forward + backward (3x fwd) */
size_t md_model_param_bytes(const md_model *m); /* fp32 params (+ half copy if any) */
/* Activation arena bytes for `batch` samples (training: kept for backward,
 * with checkpointing if on; else forward-only), from the lifetime plan. */
size_t md_model_activation_bytes(const md_model *m, int batch, int training);
int md_model_num_layers(const md_model *m);
/* Layer i's config type name ("linear", "attention", ...) and name, i in
 * [0, md_model_num_layers) (the inputs not counted); borrowed. */
const char *md_model_layer_type(const md_model *m, int i);
const char *md_model_layer_name(const md_model *m, int i);
/* Layer i's forward FLOPs per sample (0 for a fused alias or a view), and
 * the least bytes its forward moves for `batch` samples: its inputs read,
 * its output written and its parameters read once, in the compute dtype (an
 * fp32 input in fp32). A layer that runs nothing (a fused ReLU, a view)
 * moves 0. */
double md_model_layer_flops(const md_model *m, int i);
double md_model_layer_bytes(const md_model *m, int i, int batch);
/* The bytes of layer i's forward and backward together for `batch`
 * samples: 3x the forward's, or as many passes over its input- and
 * output-sized tensors as the kind makes (a batch norm reads x twice each
 * way; docs/doctor.md), and its parameters 3x. */
double md_model_layer_step_bytes(const md_model *m, int i, int batch);

/* Per-layer timing ("where does the time go"): between begin and end, every
 * layer's forward (recomputed ones included) and backward is bracketed by
 * device events (host clock on backends without them). end waits for the
 * device and adds each layer's milliseconds to fwd_ms[i] and bwd_ms[i]
 * (md_model_num_layers entries each, zeroed by the caller). The events cost a
 * little time of their own; never while a graph is being captured. */
md_status md_model_profile_begin(md_model *m);
md_status md_model_profile_end(md_model *m, double *fwd_ms, double *bwd_ms);
const struct md_model_opts *md_model_get_opts(const md_model *m);

/* Per-layer table (darknet style) then "✅ Created <name> - Parameters: N"
 * with FLOPs and memory, on stdout (md_out). */
void md_model_print_summary(const md_model *m);
/* {"name", "inputs":[{name,shape}], "num_classes", "parameters",
 *  "flops_forward", "flops_train_step", "param_bytes",
 *  "activation_bytes_per_sample", "layout", "compute_dtype", "grad_ckpt",
 *  "compile", "fused", "layers":[{name,type,inputs,shape,params,flops}]}.
 * Caller owns the result. */
cJSON *md_model_summary_json(const md_model *m);

/* One parameter tensor: a view into the flat buffers. */
struct md_param_info {
    const char *name;        /* "conv1.weight" */
    size_t offset, numel;    /* in elements of the flat buffers */
    int ndim, shape[4];      /* PyTorch shape: conv (K, C/g, R, S), linear (out, in) */
    int decay;               /* 1 for conv/linear weights */
    const char *layer_type;  /* "conv2d", "batchnorm", "linear", "weighted_add" */
    int khwc;                /* conv weight of an NHWC model: stored (K, R, S, C/g) on the
                              * device; shape[] and files keep PyTorch's (K, C/g, R, S) */
    const char *layer;       /* the layer's name ("conv1"); borrowed from the model */
    const char *const *stacked_from; /* NULL, or the suffixes ("query_projection.weight", ...)
                              * whose tensors stacked along dim 0 stand in for this one
                              * in a weights file that lacks it */
};
/* Dropout layers: their count, and the smallest and largest probability in
 * *p_min, *p_max (0 when there is none), after --dropout. */
int md_model_dropout(const md_model *m, double *p_min, double *p_max);
int md_model_num_tensors(const md_model *m);
const struct md_param_info *md_model_tensor(const md_model *m, int i);
/* Index of the tensor named `name`, or -1. */
int md_model_find_tensor(const md_model *m, const char *name);

/* ---- device ---- */
/* Allocates everything for batches of up to max_batch samples on `dev` and
 * initialises the parameters. Errors: MD_ERR_OOM with the figures. Binding
 * again (other device or batch) releases the previous binding first. */
md_status md_model_bind(md_model *m, md_device *dev, int max_batch);
/* The fusions that depend on the device (with compile on: a 2x2 max pool into
 * the batch norm + ReLU before it, where `dev` runs that kernel), made now,
 * as binding to `dev` makes them: a summary printed before binding then shows
 * what will run. Binding makes (or undoes) them again for its own device. */
void md_model_fuse_for(md_model *m, md_device *dev);
md_device *md_model_device(const md_model *m);
int md_model_max_batch(const md_model *m);

/* Flat device buffers (NULL before bind). Borrowed. */
float *md_model_params(md_model *m);      /* (nparams) fp32 */
float *md_model_grads(md_model *m);       /* (nparams) fp32 */
/* Gradient buckets: with a sink set, md_model_backward hands every element
 * of the fp32 gradients to fn exactly once, as soon as it is final (the
 * layers after it done, a half gradient cast), in contiguous ranges of at
 * least `bucket` elements while the backward runs (the last ones may be
 * smaller; a model smaller than a bucket: one call for all of it). The
 * data-parallel trainer starts an all-reduce there, overlapping the
 * backward of the earlier layers. fn NULL: none (one cast at the end). */
typedef md_status (*md_grad_sink)(void *ctx, float *grads, size_t n);
void md_model_set_grad_sink(md_model *m, size_t bucket, md_grad_sink fn, void *ctx);
/* Zero gradients (a rank with no samples in a step), handed to the sink in
 * the buckets of a backward, so that every rank takes part in the same
 * all-reduce calls. */
md_status md_model_grads_zero(md_model *m);
void *md_model_params_half(md_model *m);  /* (nparams) compute dtype, NULL if fp32 */
/* Recasts params into the half copy; call after writing params directly
 * (loading weights). The optimizer kernel keeps the copy itself. */
md_status md_model_params_changed(md_model *m);
/* BN running statistics: one device block (2 * sum of BN channels, fp32),
 * named "<bn>.running_mean" / "<bn>.running_var" in md_model_buffers. */
float *md_model_bn_stats(md_model *m);
size_t md_model_bn_stats_count(const md_model *m);
int md_model_num_buffers(const md_model *m);
const struct md_param_info *md_model_buffer(const md_model *m, int i); /* offsets into bn_stats */
/* Synchronised batch norm (--sync-bn): every batchnorm layer's training
 * forward and backward exchange their statistics through `s` (kernels.h;
 * copied), so every rank must run the same training steps. NULL: local. */
void md_model_set_bn_sync(md_model *m, const struct md_bn_sync *s);

/* Device buffer of input i: (max_batch, c, h, w) fp32 in the model's layout;
 * the trainer uploads a batch there (cast to the compute dtype inside). */
void *md_model_input_buffer(md_model *m, int i);

/* Forward over the first `batch` samples of the input buffers. training=1
 * uses batch statistics (and updates the running ones), dropout, and keeps
 * what backward needs. */
md_status md_model_forward(md_model *m, int batch, int training);
/* Logits of the last forward: (batch, num_classes), compute dtype. Borrowed. */
const void *md_model_logits(md_model *m);
/* Fused softmax cross-entropy over the last forward's logits: adds the summed
 * loss to *loss_sum_dev and the number of correct arg-maxes to *correct_dev
 * (optional), both device scalars. After a training forward it also writes
 * d(loss)/d(logits) = grad_scale * (softmax - target) for backward (grad_scale:
 * 1/batch for a mean loss, times the loss scale). labels_dev: (batch) int32. */
md_status md_model_loss(md_model *m, const int32_t *labels_dev, float smoothing, float grad_scale,
                        float *loss_sum_dev, int32_t *correct_dev);
/* The same with the gradient's multiplier grad_scale x *grad_scale_dev (a
 * device fp32 scalar, read when the kernel runs: the loss scale of a
 * captured fp16 step, kernels.h md_scale_ctl). */
md_status md_model_loss_scaled(md_model *m, const int32_t *labels_dev, float smoothing, float grad_scale,
                               const float *grad_scale_dev, float *loss_sum_dev, int32_t *correct_dev);
/* The regression counterpart of md_model_loss (kernels.h, md_regress_args,
 * has the formulas): the last forward's output, read as (batch, horizon,
 * channels) in the compute dtype (horizon * channels must be its elements
 * per sample), against targets_dev (batch, horizon, channels) fp32. last_dev
 * (optional, required by FINANCIAL and for direction hits): the last
 * observed value of sample i, channel c at last_dev[i * last_ld + c], fp32
 * on the device (for a time-series batch: input 0 + (seq_len - 1) * n_in +
 * out_col, last_ld seq_len * n_in; md_data_series). Adds the summed loss to
 * *loss_sum_dev and, when metrics_dev (3 floats) is given, {sum |e|, sum e^2,
 * direction hits}. After a training forward it also writes
 * d(loss)/d(output) = grad_scale * dL/dpred for md_model_backward
 * (grad_scale: 1 / (batch * horizon * channels) for a mean loss, times the
 * loss scale). delta: Huber's; lambda: the financial penalty's weight. */
md_status md_model_regress_loss(md_model *m, const float *targets_dev, int horizon, int channels,
                                md_regress_kind kind, float delta, float lambda, const float *last_dev,
                                long long last_ld, float grad_scale, float *loss_sum_dev, float *metrics_dev);
/* Drives backward from any loss (regression losses, tests): after a training
 * forward, copies d(loss)/d(output) for the last forward's batch,
 * `dy_dev` (batch, c*h*w of md_model_output_shape) fp32 on the model's
 * device, into the last layer's gradient buffer (cast to the compute dtype).
 * md_model_backward may follow as after md_model_loss. */
md_status md_model_set_output_grad(md_model *m, const float *dy_dev);
/* The last layer's gradient buffer itself, (batch, c*h*w), compute dtype,
 * after a training forward (NULL otherwise): a loss kernel may write
 * d(loss)/d(output) there directly and then call
 * md_model_output_grad_written(). Borrowed. */
void *md_model_output_grad(md_model *m);
void md_model_output_grad_written(md_model *m);
/* Backward after a training forward and md_model_loss (or an output
 * gradient, above): overwrites the fp32 gradient buffer (no accumulation
 * across calls). */
md_status md_model_backward(md_model *m);
/* Dropout masks depend on (seed, layer, step): set the step before forward. */
void md_model_set_step(md_model *m, uint64_t step);
/* For a captured step: dropout reads the step from device memory instead,
 * `*step_dev` = step << 32 (what md_model_set_step would use) written before
 * each replay. NULL goes back to md_model_set_step. */
void md_model_set_step_dev(md_model *m, const uint64_t *step_dev);
/* Points input i at another device buffer of the same size (double-buffered
 * batches: the next batch is copied in while the current step runs). NULL
 * restores the model's own buffer. After bind. */
void md_model_set_input_buffer(md_model *m, int i, void *buf);

/* ---- diagnostics ---- */
/* After a non-finite loss: reruns the last forward layer by layer (without
 * touching running statistics) and names the first layer whose output has a
 * NaN/Inf ("" and *found = 0 if none). */
md_status md_model_first_nonfinite(md_model *m, char *layer, size_t n, int *found);

/* ReLU health on the last batch the model saw: the forward is replayed in
 * evaluation mode (no running-statistics update, no dropout), and for every
 * ReLU (standalone or fused into its producer) `dead_share` is the share of
 * channels whose output is zero for every sample and position of the batch,
 * `zero_share` the share of all outputs that are zero. Fills at most `max`
 * entries; *count gets how many there are. Names are borrowed from the model. */
struct md_relu_stat {
    const char *layer;
    double dead_share;
    double zero_share;
};
md_status md_model_relu_stats(md_model *m, struct md_relu_stat *out, int max, int *count);
/* The "integration weights" are the tensors whose layer_type is
 * "weighted_add" (see md_model_tensor). */

/* Per-epoch probe (docs/training.md "Per-epoch diagnostics"): an evaluation forward
 * (running statistics, no dropout, nothing kept) over the first `batch`
 * samples already in the input buffers, measuring
 * - every activation layer of ReLU or GELU type (relu, gelu, gelu_tanh,
 *   silu; standalone or fused into its producer): a unit (the channel of a
 *   (C, H, W) output, the feature of a token tensor (T, 1, F)) is dead when
 *   its output is inactive for every sample and position of the batch:
 *   ReLU y <= 0, the others |y| < MD_DEAD_THRESHOLD. dead_share = dead units
 *   / units; zero_share = inactive outputs / outputs;
 * - every fusion (weighted_add, film): each input's contribution magnitude
 *   c_k and share c_k / sum_j c_j. weighted_add y = sum_k w_k x_k:
 *   c_k = mean over the batch's elements of |w_k x_k| = |w_k| mean |x_k|.
 *   film y = x (1 + gamma) + beta = x + (x gamma + beta): c_x = mean |x|,
 *   c_cond = mean |x gamma + beta|.
 * Fills at most max_* entries; *nacts / *nfus get how many there are.
 * Names are borrowed from the model. */
#define MD_DEAD_THRESHOLD 0.01
#define MD_FUSION_MAX_INPUTS 16
struct md_act_stat {
    const char *layer;
    const char *activation; /* "relu", "gelu", "gelu_tanh", "silu" */
    double threshold;       /* 0 for relu (y <= 0 is inactive), else |y| < threshold */
    int units;
    double dead_share;
    double zero_share;
};
struct md_fusion_stat {
    const char *layer;
    const char *kind;       /* "weighted_add" | "film" */
    int nin;
    const char *input[MD_FUSION_MAX_INPUTS];
    double weight[MD_FUSION_MAX_INPUTS];   /* w_k (film: 1) */
    double mean_abs[MD_FUSION_MAX_INPUTS]; /* c_k */
    double share[MD_FUSION_MAX_INPUTS];    /* c_k / sum_j c_j (1/k when all are 0) */
};
md_status md_model_probe_stats(md_model *m, int batch, struct md_act_stat *acts, int max_acts, int *nacts,
                               struct md_fusion_stat *fus, int max_fus, int *nfus);

/* ---- per-layer capture (--check, --precision-audit) ----
 * Between md_model_capture_begin and md_model_capture_end, each layer's
 * forward (not a recomputed one) and backward is bracketed by device syncs
 * and followed by host copies: its output, and the gradients it has just
 * written for its inputs. Run with compile off (md_model_opts.compile = 0),
 * so every layer has its own output. Meant for one batch: the copies and
 * syncs make a step much slower.
 *
 * Fed capture (`feed` non-NULL: a capturing model of the same config that
 * ran its step first): before each layer's forward, its inputs are
 * overwritten with feed's captured outputs of those layers, and before its
 * backward its output gradient and its inputs' gradient buffers with feed's
 * (dy, dx_before). Each layer then computes on exactly what the other model's
 * layer saw, so the two differ only by this layer's own kernels: no error
 * carried over from earlier layers, no ReLU or max-pool decision flipped by
 * an upstream rounding. */
struct md_layer_capture {
    int ran;               /* 1 once its forward ran in the capture */
    float *y;              /* (ny) its output as fp32, device layout (batch, fold items, c, h, w) */
    size_t ny;
    float *dx;             /* (ndx) the gradients of its inputs right after its backward, input
                            * after input (model inputs, which get none, left out); NULL if none */
    size_t ndx;
    float *dy;             /* (ny) its output gradient just before its backward */
    float *dx_before;      /* (ndx) its inputs' gradient buffers just before its backward (what
                            * other consumers added already; unwritten buffers hold anything) */
    double fwd_ms, bwd_ms; /* host clock between device syncs */
    long long fallback_fwd, fallback_bwd; /* kernel calls that went to the CPU fallback */
    size_t act_bytes;      /* its output buffer: batch x elements x compute dtype size */
};
/* Starts capturing (after bind); `feed`: NULL, or the model to take each
 * layer's inputs and gradients from (borrowed until md_model_capture_end;
 * its capture must stay alive). Errors: MD_ERR_OOM; MD_ERR_INTERNAL when feed
 * is not a model of the same layers. */
md_status md_model_capture_begin(md_model *m, const md_model *feed);
/* Layer i's capture (i as md_model_layer_name), or NULL when not capturing.
 * A layer that is another's alias (a view) has ran 0. Borrowed; valid until
 * md_model_capture_end. */
const struct md_layer_capture *md_model_capture_layer(const md_model *m, int i);
/* Stops capturing and frees the copies. NULL-safe on a model without a capture. */
void md_model_capture_end(md_model *m);
/* Layer i's input layers: *n of them, their indices in md_model_layer_name's
 * numbering (-1 for a model input) into in[] (at most max). */
void md_model_layer_inputs(const md_model *m, int i, int *in, int max, int *n);

/* ---- weights (safetensors, tensor names as md_model_tensor) ---- */
/* Host copies of all parameters in PyTorch order (NHWC conv weights are
 * permuted back to (K, C/g, R, S)); dst/src hold nparams floats. After bind. */
md_status md_model_get_params_host(md_model *m, float *dst);
md_status md_model_set_params_host(md_model *m, const float *src); /* also refreshes the half copy */
/* The same for the gradients (after backward). */
md_status md_model_get_grads_host(md_model *m, float *dst);
/* Reads every parameter (F32, PyTorch shapes; extra tensors such as
 * "num_batches_tracked" are ignored) and the BN running statistics when
 * present from a safetensors file. Names and shapes must match (a tensor
 * with stacked_from may come as those parts instead: attention's
 * in_proj_weight as query_, key_ and value_projection.weight); nothing is
 * changed on a mismatch. After bind. */
md_status md_model_load_weights(md_model *m, const char *path);
/* One training step (forward, loss with `smoothing`, backward; no optimizer)
 * on the first `batch` samples already in the input buffers with labels_host,
 * then writes as F32 (NCHW, PyTorch shapes) to `path`:
 *   "input.<input name>" (batch, c, h, w), "labels" I32 (batch),
 *   "logits" (batch, classes), "loss" (scalar, batch mean),
 *   "param.<tensor>" and "grad.<tensor>" for every parameter,
 *   "buffer.<bn>.running_mean|running_var" as they were before the step. */
md_status md_model_dump_grads(md_model *m, const int32_t *labels_host, int batch, float smoothing,
                              const char *path);
/* An evaluation forward (running statistics, no dropout) on the first
 * `batch` samples already in the input buffers, written as for
 * md_model_dump_grads: "input.<input name>" (batch, c, h, w) F32 NCHW,
 * "labels" I32 (batch), "logits" F32 (batch, classes). */
md_status md_model_dump_logits(md_model *m, const int32_t *labels_host, int batch, const char *path);

/* ---- graph capture ----
 * The step (forward, loss, backward) is a fixed sequence of kernel calls with
 * fixed pointers once bound, so a backend that can capture (md_dev_can_capture)
 * may record it once between md_dev_capture_begin/end and replay it. */

#ifdef __cplusplus
}
#endif
#endif
