/* check.h - the doctor: a model's one batch on a device against the CPU
 * reference, layer by layer (--check), and the same batch in fp16 and bf16
 * against fp32 (--precision-audit) with the precision plan it recommends
 * (--precision-plan). docs/doctor.md describes the figures and tolerances. */
#ifndef MD_CHECK_H
#define MD_CHECK_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "backend/backend.h"
#include "core/status.h"
#include "core/tensor.h"
#include "nn/model.h"

/* What both commands run: the model config, loaded afresh for each run with
 * compile and checkpointing off (every layer keeps its output). */
struct md_check_opts {
    const char *model;           /* name or path (also names it in messages) */
    const cJSON *inline_model;   /* the run config's model object, or NULL */
    struct md_model_opts mopts;  /* as the run resolved them (layout, parameters, compute dtype) */
    int batch;                   /* samples of the one batch (>= 1) */
    uint64_t seed;               /* inputs, labels or targets */
    double input_scale;          /* inputs are seeded N(0, 1) values times this (1) */
    int tf32;                    /* the device computes fp32 matrix work in TF32 (wider tolerance) */
};

/* Relative tolerance of --check per compute dtype (tf32: fp32 matrix work in
 * TF32): a tensor fails when max |device - reference| > rtol * max |reference|
 * or the device has a NaN/Inf the reference has not. */
double md_check_rtol(md_dtype dt, int tf32);

/* --check: one training step (forward, loss, backward) of o->model on `dev`
 * in o->mopts.compute_dtype and on `ref` (the reference backend, fp32) with
 * the same weights and inputs. *out (caller owns) is the report's "check"
 * object; *failed the number of layers and parameter tensors beyond the
 * tolerance. Errors: those of loading, binding and running the model. */
md_status md_check_run(const struct md_check_opts *o, md_device *dev, md_device *ref, cJSON **out, int *failed);
/* The check object as an aligned table (100 columns) and its failures. */
void md_check_print(const cJSON *check);

/* --precision-audit: the same batch on `dev` in fp32, fp16 and bf16 (half
 * types as storage where the device computes in fp32). *out (caller owns) is
 * the report's "precision_audit" object, with the recommended plan under
 * "plan". */
md_status md_precision_audit_run(const struct md_check_opts *o, md_device *dev, cJSON **out);
void md_precision_audit_print(const cJSON *audit);

/* A precision plan (docs/doctor.md): the half type, the initial loss scale,
 * and the layer kinds and names that should stay fp32. */
#define MD_PLAN_MAX_KEEP 64
struct md_precision_plan {
    md_precision precision;
    double loss_scale;           /* 0: none given (the trainer's default) */
    int nkinds, nlayers;
    char kinds[MD_PLAN_MAX_KEEP][32];
    char layers[MD_PLAN_MAX_KEEP][128];
};
/* Writes audit["plan"] to `path` (atomically). Errors: MD_ERR_IO. */
md_status md_precision_plan_write(const cJSON *audit, const char *path);
/* Reads a plan file. Errors (MD_ERR_CONFIG, one line naming the file and the
 * field): malformed JSON, an unknown key, a wrong type or value. */
md_status md_precision_plan_read(const char *path, struct md_precision_plan *p);

#endif
