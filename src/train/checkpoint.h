/* checkpoint.h - device tensors to and from safetensors checkpoints.
 *
 * A checkpoint is a safetensors file (core/safetensors.h) whose tensors are
 * the model's parameters and buffers under the model's own names (so PyTorch
 * can load them as a state_dict) plus the optimizer state, and whose
 * metadata holds the run: config, epoch, step, RNG seed, loss scale, best
 * accuracy, curves. Writes are atomic (temporary file, fsync, rename): a
 * failed write leaves the previous checkpoint as it was.
 */
#ifndef MD_CHECKPOINT_H
#define MD_CHECKPOINT_H

#include <cjson/cJSON.h>

#include "backend/backend.h"
#include "core/safetensors.h"

/* A convolution filter inside a checkpoint tensor: `k` output channels of
 * `c` (per group) x `rs` (R * S) fp32 elements from element `offset`. */
struct md_ckpt_filter {
    size_t offset;
    int k, c, rs;
};

struct md_ckpt_tensor {
    const char *name;                 /* borrowed */
    md_dtype dtype;
    int ndim;
    long long shape[MD_ST_MAX_DIMS];
    void *dev;                        /* device buffer of numel x dtype size bytes */
    /* The convolution filters inside this (F32) tensor: a conv weight, or
     * the optimizer state that mirrors the flat parameter buffer. Files hold
     * them as (K, C/g, R, S); with dev_krsc the device holds (K, R, S, C/g)
     * (channels-last), and save and load permute. Borrowed; NULL when none. */
    const struct md_ckpt_filter *filters;
    int nfilters;
    int dev_krsc;
};

/* Downloads every tensor from dev and writes them with `meta` (a JSON object
 * whose values are strings; NULL = none) to `path`, in PyTorch's layout
 * (metadata MD_ST_LAYOUT_KEY = MD_ST_LAYOUT_TORCH). Errors name the file. */
md_status md_checkpoint_save(md_device *dev, const char *path, const struct md_ckpt_tensor *t, int n,
                             const cJSON *meta);

/* Opens `path`, checks its layout (md_st_filter_layout) and that every tensor
 * of t[] is there with its dtype and shape (MD_ERR_DATA naming the file and
 * tensor otherwise) and uploads them in the device's layout.
 * Nothing is uploaded unless all match. *out receives the open file for its
 * metadata (caller closes with md_st_close); pass NULL to close it here. */
md_status md_checkpoint_load(md_device *dev, const char *path, const struct md_ckpt_tensor *t, int n,
                             md_st_file **out);

#endif
