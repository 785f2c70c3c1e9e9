/* model_impl.h - the model's insides, shared by model.c (config, shapes,
 * summary) and model_exec.c (binding, planning, forward and backward).
 * Nobody outside src/nn includes this. */
#ifndef MD_MODEL_IMPL_H
#define MD_MODEL_IMPL_H

#include "nn/model.h"

enum md_layer_kind {
    MD_L_INPUT = 0,
    MD_L_CONV,
    MD_L_BN,
    MD_L_ACT,
    MD_L_MAXPOOL,
    MD_L_AVGPOOL,
    MD_L_GAP,
    MD_L_FLATTEN,
    MD_L_LINEAR,
    MD_L_DROPOUT,
    MD_L_ADD,
    MD_L_CONCAT,
    MD_L_WADD,
    MD_L_KIND_COUNT
};

/* One node of the DAG. Layers are stored in topological order (the config's
 * order, inputs first); each produces one tensor of shape (c, h, w) per
 * sample. A ReLU fused into its producer (compile) becomes an alias: it runs
 * nothing and its tensor is the producer's. */
struct md_layer {
    char *name;
    char *path;            /* JSON path for messages ("layers[3]") */
    int kind;              /* enum md_layer_kind */
    const char *type;      /* config type name ("conv2d", "relu", ...) */
    int nin;
    int *in;               /* (nin) indices of input layers */
    int c, h, w;           /* output per sample */
    int group;             /* top-level config entry it came from (checkpoint segments) */

    /* arguments */
    int k, r, s, stride_h, stride_w, pad_h, pad_w, dil_h, dil_w, groups, bias;
    float eps, momentum;
    int act;               /* enum md_act: ACT layers, or fused into BN / add */
    float alpha;           /* leaky_relu slope */
    int count_include_pad;
    float p;               /* dropout */
    int zero_init;         /* BN: gamma 0 when the model's zero_init_residual is on */

    /* parameters: indices into the tensor table, -1 if none */
    int tw, tb;            /* conv/linear weight and bias; BN gamma and beta; wadd weights (tw) */
    int stat_off;          /* BN: offset of running mean in bn_stats (var follows), save stats too */
    size_t mask_off;       /* dropout: offset of its mask (per sample elements) */

    long long nparams;
    double flops;          /* forward, per sample */
    int alias;             /* -1, or the layer whose tensor this one is (fused ReLU) */
    int nconsumers;
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
    int num_classes;
    int zero_init_residual;
    int nlayers, ninputs;      /* inputs are layers [0, ninputs) */
    struct md_layer *layers;
    int nfused;

    int ntensors;
    struct md_param_info *tensors;
    size_t nparams, ndecay;
    int nbuffers;
    struct md_param_info *buffers; /* BN running statistics */
    size_t nstats;             /* floats in bn_stats (and in bn save stats) */
    size_t mask_per_sample;    /* dropout mask bytes per sample, all layers */
    double flops_fwd;

    /* bound state */
    md_device *dev;
    int max_batch;
    float *params, *grads;     /* (nparams) */
    void *params_half;         /* (nparams) compute dtype, or NULL */
    void *grads_half;          /* (ndecay) compute dtype scratch, or NULL */
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
};

/* Tensor of layer i after aliasing. */
static inline int md_model_tensor_of(const struct md_model *m, int i)
{
    while (m->layers[i].alias >= 0) i = m->layers[i].alias;
    return i;
}

/* Lifetime planner (model_exec.c): fills `plan` for `batch` samples. */
md_status md_model_plan_make(const struct md_model *m, int batch, int training,
                             struct md_model_plan *plan);
void md_model_plan_free(struct md_model_plan *plan);

#endif
