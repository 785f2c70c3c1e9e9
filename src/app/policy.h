/* policy.h - per-device defaults for a run, decided by a pure function.
 *
 * md_stage_policy (job.h) gathers the device's capabilities and the options
 * the user gave, calls md_policy_decide, writes the outcome into job->opts
 * and records each decision with its reason (md_job_setting). The decision
 * itself depends only on its inputs, so it is unit-tested for CUDA and Metal
 * with fake capabilities on a machine that has neither.
 *
 * Loader workers and pinned memory are decided by the data stage.
 */
#ifndef MD_POLICY_H
#define MD_POLICY_H

#include "backend/backend.h"
#include "app/options.h"

struct md_policy_in {
    md_backend_kind kind;
    int supports_fp16, supports_bf16;
    long long total_memory;     /* bytes, 0 = unknown */
    const char *model;          /* model name or path ("" = the default) */
    /* options and whether the user gave them (flag or config) */
    int amp, amp_given;
    md_precision precision;
    int precision_given;
    int batch_size;             /* 0 = automatic */
    int channels_last, channels_last_given;
    int compile, compile_given;
    const char *compile_mode;
    int cpu_nhwc_fast;          /* CPU: convolutions are faster channels-last (direct kernels or Winograd) */
};

struct md_policy_out {
    md_precision precision;     /* of convolutions and matrix products */
    int loss_scaling;           /* dynamic loss scaling (fp16 only) */
    int batch_size;
    int channels_last;
    int compile;
    char why_precision[256], why_loss_scaling[160], why_batch[160], why_channels[320], why_compile[200];
};

/* Pure: same inputs, same outputs. */
void md_policy_decide(const struct md_policy_in *in, struct md_policy_out *out);

/* Default batch size of a model on a device kind when --batch-size is not
 * given (the MPS guides: 16 on MPS; 128 on CUDA; CPU by model size). */
int md_policy_default_batch(md_backend_kind kind, const char *model);

#endif
