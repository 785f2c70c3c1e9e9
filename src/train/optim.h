/* optim.h - SGD (momentum, Nesterov, weight decay) and AdamW over one flat
 * fp32 parameter buffer, through the device's fused `optim` kernel.
 *
 * The parameters are described by ranges of the flat buffer, each with or
 * without weight decay (BN and bias parameters get none unless --decay-all);
 * adjacent ranges of the same kind merge, so a model laid out decayed-first
 * takes two kernel calls per step. State (momentum buffer, or AdamW's m and v)
 * lives on the device, one block each, and is saved in checkpoints.
 */
#ifndef MD_OPTIM_H
#define MD_OPTIM_H

#include <stddef.h>

#include "backend/backend.h"

struct md_optim_cfg {
    int kind;                 /* enum md_optim_kind (kernels.h) */
    float momentum;           /* SGD */
    int nesterov;             /* SGD */
    float weight_decay;
    float beta1, beta2, eps;  /* AdamW (0.9, 0.999, 1e-8 when 0) */
};

struct md_optim_range {
    size_t offset, count;     /* elements of the flat buffer */
    int decay;                /* apply weight decay */
    float lr_mult;            /* the step's lr times this (--backbone-lr); 0 is taken as 1 */
    int frozen;               /* no step at all (--freeze) until md_optim_unfreeze */
};

typedef struct md_optim md_optim;

/* Allocates the state for `n` parameters on dev (zeroed) and keeps a merged
 * copy of the ranges. Ranges must lie within [0, n) and not overlap. Caller
 * frees with md_optim_free. */
md_status md_optim_create(md_device *dev, const struct md_optim_cfg *cfg, size_t n,
                          const struct md_optim_range *ranges, int nranges, md_optim **out);
void md_optim_free(md_optim *o); /* NULL ok */

/* One step: t = ++step; for each range, md_k_optim with lr and the gradient
 * multiplier grad_scale (x *grad_scale_dev when non-NULL: 1/loss-scale and
 * the clip factor). params/grads: (n) fp32 device buffers; params_half
 * (optional, (n) of half_dtype): compute copy refreshed by the kernel. */
md_status md_optim_step(md_optim *o, float *params, const float *grads, float lr, float grad_scale,
                        const float *grad_scale_dev, void *params_half, md_dtype half_dtype);

/* The same step with its per-step values in device memory (kernels.h,
 * md_optim_ctl: lr, t, loss scale, clip; skipped on the device when the
 * step's loss or gradients are not finite), so it can be captured once and
 * replayed. The caller writes ctl->step = md_optim_steps() + 1 before each
 * run; the host count advances here. scaler (optional, device memory,
 * kernels.h md_scale_ctl): the loss scale and step count come from it
 * instead, and the step's last kernel applies the scaler's rule to it
 * (train/scaler.c), so fp16 steps need no host decision; the host count is
 * then only right once the caller sets it from scaler->taken. */
md_status md_optim_step_ctl(md_optim *o, float *params, const float *grads, const struct md_optim_ctl *ctl,
                            struct md_scale_ctl *scaler, void *params_half, md_dtype half_dtype);

/* Frozen ranges take no step: their parameters and state stay as they are.
 * md_optim_unfreeze makes them trainable from step `t0` on: their step count
 * (AdamW's bias correction, SGD's first-step momentum) starts there, as a
 * PyTorch parameter's state starts at its first update. Ranges with
 * lr_mult != 1 or unfrozen ones need the host-synced step (md_optim_step);
 * md_optim_step_ctl refuses them (md_optim_needs_host says so). */
void md_optim_unfreeze(md_optim *o, long long t0);
size_t md_optim_frozen_count(const md_optim *o);
int md_optim_needs_host(const md_optim *o);
/* Zeroes the gradients of frozen ranges (grads: (n) device), so that a
 * global gradient norm and clipping see only the trainable parameters. */
md_status md_optim_zero_frozen(md_optim *o, float *grads);

/* Steps taken (t of the last step). */
long long md_optim_steps(const md_optim *o);
void md_optim_set_steps(md_optim *o, long long t);
/* State buffers on the device: SGD has m only (v NULL); AdamW both. (n) each. */
float *md_optim_m(md_optim *o);
float *md_optim_v(md_optim *o);
size_t md_optim_size(const md_optim *o);
const struct md_optim_cfg *md_optim_config(const md_optim *o);
/* Elements with and without weight decay (for the report). */
void md_optim_counts(const md_optim *o, size_t *decayed, size_t *plain);

#endif
