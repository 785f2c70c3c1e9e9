/* model_impl.h - the model's insides, shared by model.c (config, shapes,
 * summary) and model_exec.c (binding, planning, forward and backward).
 * Nobody outside src/nn includes this. */
#ifndef MD_MODEL_IMPL_H
#define MD_MODEL_IMPL_H

#include "backend/kernels.h"
#include "nn/model.h"

struct md_layer_ops; /* nn/layer.h: what a layer kind does */

/* A layer's output per sample. Today every tensor is an image-like
 * (channels, height, width); a flat feature vector is (c, 1, 1). The layer
 * kinds and the planner see it only through this struct and
 * md_shape_numel(), so a token tensor (tokens x features) is a change here,
 * not in the ops table. */
struct md_shape {
    int c, h, w;
};

static inline size_t md_shape_numel(struct md_shape s) { return (size_t)s.c * (size_t)s.h * (size_t)s.w; }

#define MD_LAYER_MAX_PARAMS 4

/* One node of the DAG: what every kind has in common. Layers are stored in
 * topological order (the config's order, inputs first); each produces one
 * tensor per sample. What a kind needs beyond this (kernel size, epsilon,
 * a fused activation) is its own struct behind `args`, known only to its
 * file under src/nn/layers/. A ReLU fused into its producer (compile)
 * becomes an alias: it runs nothing and its tensor is the producer's. */
struct md_layer {
    const struct md_layer_ops *ops; /* the kind */
    const char *type;      /* config type name as written ("conv2d", "relu", ...); static */
    char *name;
    char *path;            /* JSON path for messages ("layers[3]") */
    int nin;
    int *in;               /* (nin) indices of input layers */
    struct md_shape out;   /* output per sample */
    int group;             /* top-level config entry it came from (checkpoint segments) */
    void *args;            /* (ops->args_size bytes) the kind's arguments; owned, NULL if none */

    /* parameters: indices into the tensor table in the order ops->params
     * declares them, -1 if none */
    int param[MD_LAYER_MAX_PARAMS];
    size_t stat_off;       /* offset of its first buffer (ops->buffers) in bn_stats / bn_save */
    size_t mask_off;       /* offset of its mask (ops->mask_per_sample) per sample */

    long long nparams;
    double flops;          /* forward, per sample */
    double pool_flops;     /* a max pool fused into its producer at bind: its own flops, now the producer's */
    int alias;             /* -1, or the layer whose tensor this one is (fused ReLU, a view) */
    int view;              /* alias set by the kind itself (regroup): the same bytes read another way */
    int fold;              /* items per sample (docs/tiles.md): the layer runs with batch n * fold and
                            * its buffers hold n * fold items of `out`; 1 but after tiles */
    int nconsumers;
    int filter_elsewhere;  /* a convolution whose consumer's backward writes its filter gradient (bind) */
};

struct md_model_plan {
    size_t bytes;              /* arena size */
    size_t *off_fwd, *off_bwd; /* per layer; SIZE_MAX = no buffer (alias / fp32 input) */
    size_t *goff;              /* gradient offsets per layer */
    unsigned char *recompute;  /* per layer: output dropped after forward, recomputed in backward (--grad-ckpt) */
};

struct md_model {
    char *name;
    char *source;              /* file name used in messages */
    struct md_model_opts opts;
    int num_classes;           /* 0 for regression */
    int regression;            /* "task": "regression" (or its parameter nonzero) */
    char *task_param;          /* "task": "$name": that model parameter (owned); NULL: a fixed task */
    int zero_init_residual;
    int nlayers, ninputs;      /* inputs are layers [0, ninputs) */
    struct md_layer *layers;
    int nfused;

    int ntensors;
    struct md_param_info *tensors;
    size_t nparams, ndecay;
    int nbuffers;
    struct md_param_info *buffers; /* running statistics (ops->buffers), offsets into bn_stats */
    size_t nstats;             /* floats in bn_stats (and in bn_save) */
    size_t mask_per_sample;    /* mask bytes per sample (ops->mask_per_sample), all layers */
    double flops_fwd;

    /* bound state */
    md_device *dev;
    int max_batch;
    float *params, *grads;     /* (nparams) */
    void *params_half;         /* (nparams) compute dtype, or NULL */
    void *grads_half;          /* (ndecay) compute dtype scratch, or NULL */
    md_grad_sink sink;         /* md_model_set_grad_sink */
    void *sink_ctx;
    size_t sink_bucket;
    float *bn_stats;           /* (nstats) running mean/var */
    float *bn_save;            /* (nstats) save mean/invstd of the last training forward */
    uint8_t *masks;            /* (max_batch * mask_per_sample) */
    float *scratch;            /* (16) device scalars */
    void **inputs;             /* (ninputs) fp32 input buffers */
    char *arena;
    struct md_model_plan plan_train, plan_eval;
    int *written;              /* (nlayers) gradient written in this backward */
    int last_batch, last_training, have_loss;
    uint64_t step;
    const uint64_t *step_dev;   /* md_model_set_step_dev: dropout offset in device memory */
    void **own_inputs;          /* the bound input buffers (inputs[] may point elsewhere) */
    struct md_model_prof *prof; /* md_model_profile_begin .. _end, else NULL */
    struct md_layer_capture *cap; /* (nlayers) md_model_capture_begin .. _end, else NULL */
    const struct md_model *feed;  /* md_model_capture_begin's feed, or NULL */
    struct md_bn_sync bn_sync;    /* md_model_set_bn_sync's, used when bn_sync_on */
    int bn_sync_on;
};

/* Tensor of layer i after aliasing. */
static inline int md_model_tensor_of(const struct md_model *m, int i)
{
    while (m->layers[i].alias >= 0) i = m->layers[i].alias;
    return i;
}

/* Fuses (on) or unfuses the max pools a producer runs itself (model.c). */
void md_model_fuse_pools(struct md_model *m, int on);
/* Hands (on) or takes back the filter gradients that a convolution's
 * consumer computes in its own backward (model.c). */
void md_model_fuse_filters(struct md_model *m, int on);

/* Lifetime planner (model_exec.c): fills `plan` for `batch` samples. */
md_status md_model_plan_make(const struct md_model *m, int batch, int training,
                             struct md_model_plan *plan);
void md_model_plan_free(struct md_model_plan *plan);

/* Frees what md_model_load made (model.c); md_model_free (model_exec.c) also
 * releases the device memory first. model_exec.c builds on model.c, never
 * the other way round. */
void md_model_free_host(struct md_model *m);

#endif
