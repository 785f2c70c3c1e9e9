/* policy.c - per-device defaults and their reasons: precision and AMP per
 * device, loss scaling, default batch size, channels-last and compile (the
 * MPS guides' rules, each with the reason it exists). */
#include "app/policy.h"

#include <stdio.h>
#include <string.h>

#include "app/job.h"

static int model_is_small(const char *model)
{
    if (!model || !*model) return 1; /* the bundled default is small */
    static const char *const small[] = {"small", "tiny", "mlp", "lenet", "mini"};
    for (size_t i = 0; i < sizeof small / sizeof small[0]; i++)
        if (strstr(model, small[i])) return 1;
    return 0;
}

int md_policy_default_batch(md_backend_kind kind, const char *model)
{
    switch (kind) {
    case MD_BACKEND_CUDA: return 128;
    case MD_BACKEND_METAL: return 16;
    default: return model_is_small(model) ? 128 : 64;
    }
}

/* The half type a device does best, or FP32 when it has none. */
static md_precision best_half(const struct md_policy_in *in)
{
    if (in->kind == MD_BACKEND_CUDA && in->supports_bf16) return MD_PREC_BF16;
    if (in->supports_fp16) return MD_PREC_FP16;
    if (in->supports_bf16) return MD_PREC_BF16;
    return MD_PREC_FP32;
}

static void decide_precision(const struct md_policy_in *in, struct md_policy_out *out)
{
    const char *dev = in->kind == MD_BACKEND_CUDA ? "CUDA" : in->kind == MD_BACKEND_METAL ? "Metal" : "CPU";
    md_precision want = in->precision;
    int asked_half = in->amp || want != MD_PREC_FP32;
    out->precision = MD_PREC_FP32;
    if (!asked_half) {
        snprintf(out->why_precision, sizeof out->why_precision,
                 "default; --amp or --precision fp16|bf16 for half-precision matrix work");
        return;
    }
    if (in->kind == MD_BACKEND_CPU || in->kind == MD_BACKEND_REF) {
        snprintf(out->why_precision, sizeof out->why_precision,
                 "%s%s asked; continuing in fp32 on the CPU: fp16/bf16 storage has no speed benefit on this "
                 "backend (it converts to fp32 for arithmetic)",
                 in->amp ? "--amp" : "--precision ", in->amp ? "" : md_precision_name(want));
        return;
    }
    if (in->amp && !in->precision_given) {
        out->precision = best_half(in);
        if (out->precision == MD_PREC_FP32) {
            snprintf(out->why_precision, sizeof out->why_precision,
                     "--amp asked but this %s device supports neither fp16 nor bf16; continuing in fp32", dev);
        } else if (in->kind == MD_BACKEND_CUDA) {
            snprintf(out->why_precision, sizeof out->why_precision,
                     out->precision == MD_PREC_BF16
                         ? "--amp: bf16 (same exponent range as fp32, no loss scaling needed); fp32 "
                           "accumulation, normalisation, loss and master weights"
                         : "--amp: fp16 (this GPU has no bf16) with dynamic loss scaling; fp32 accumulation, "
                           "normalisation, loss and master weights");
        } else {
            snprintf(out->why_precision, sizeof out->why_precision,
                     "--amp: fp16 convolutions and matrix products, BatchNorm statistics and loss in fp32; our "
                     "Metal kernels take fp16 activations with fp32 statistics, which avoids PyTorch's MPS AMP "
                     "crash ('mps.subtract' with mixed fp16/fp32 operands in BatchNorm)");
        }
        return;
    }
    /* an explicit --precision (with or without --amp) */
    int ok = (want == MD_PREC_FP16 && in->supports_fp16) || (want == MD_PREC_BF16 && in->supports_bf16);
    if (ok) {
        out->precision = want;
        snprintf(out->why_precision, sizeof out->why_precision,
                 "--precision %s: half-precision matrix work with fp32 accumulation, normalisation statistics, "
                 "loss and master weights",
                 md_precision_name(want));
        return;
    }
    out->precision = best_half(in);
    if (out->precision == MD_PREC_FP32)
        snprintf(out->why_precision, sizeof out->why_precision,
                 "--precision %s asked but this %s device supports no half type; continuing in fp32",
                 md_precision_name(want), dev);
    else
        snprintf(out->why_precision, sizeof out->why_precision,
                 "--precision %s is not supported by this %s device; using %s instead", md_precision_name(want),
                 dev, md_precision_name(out->precision));
}

void md_policy_decide(const struct md_policy_in *in, struct md_policy_out *out)
{
    memset(out, 0, sizeof *out);
    decide_precision(in, out);

    out->loss_scaling = out->precision == MD_PREC_FP16;
    snprintf(out->why_loss_scaling, sizeof out->why_loss_scaling, "%s",
             out->loss_scaling ? "fp16 gradients underflow without it: start at 65536, halve and skip the step on "
                                 "inf/NaN, double after 2000 clean steps"
                               : "not needed: no fp16 gradients");

    if (in->batch_size > 0) {
        out->batch_size = in->batch_size;
        snprintf(out->why_batch, sizeof out->why_batch, "--batch-size");
    } else {
        out->batch_size = md_policy_default_batch(in->kind, in->model);
        snprintf(out->why_batch, sizeof out->why_batch, "%s",
                 in->kind == MD_BACKEND_METAL ? "Metal default: start at 16 and increase (common MPS guidance)"
                 : in->kind == MD_BACKEND_CUDA ? "CUDA default: large batches keep the GPU busy"
                 : model_is_small(in->model) ? "CPU default for a small model"
                                             : "CPU default for a larger model (memory and step time)");
    }

    if (in->channels_last_given) {
        out->channels_last = in->channels_last;
        snprintf(out->why_channels, sizeof out->why_channels, "%s", in->channels_last ? "asked" : "turned off");
    } else if (in->kind == MD_BACKEND_CUDA) {
        /* measured on an H100, resnet50 b128 fp32 step: 48.5 ms NHWC, 66.5 ms NCHW */
        out->channels_last = 1;
        snprintf(out->why_channels, sizeof out->why_channels,
                 "CUDA: tensor-core convolutions (TF32, fp16, bf16) run natively in NHWC and the NHWC batch-norm "
                 "and pooling kernels are vectorised (--no-channels-last to change)");
    } else if (in->kind == MD_BACKEND_CPU && in->cpu_nhwc_fast) {
        /* measured, 2 threads: resnet18_cifar b64 686 against 713-727 ms, small_cnn b128 30.0 against 36.5
         * (AVX-512); the AVX2 kernels: 1248 against 1278 ms, 40.6 against 43.0 */
        out->channels_last = 1;
        snprintf(out->why_channels, sizeof out->why_channels,
                 "CPU: the direct (AVX-512 or AVX2) and Winograd convolutions read and write channels-last data as it "
                 "is (NCHW costs a transpose in and out of each); steps 2-18%% faster with the direct kernels, 1.2-2x "
                 "with Winograd alone (--no-channels-last to change)");
    } else {
        out->channels_last = 0;
        snprintf(out->why_channels, sizeof out->why_channels, "NCHW by default on %s (--channels-last to change)",
                 in->kind == MD_BACKEND_METAL ? "Metal" : "the CPU");
    }

    out->compile = in->compile;
    const char *mode = in->compile_mode && *in->compile_mode ? in->compile_mode : "default";
    if (!in->compile) {
        snprintf(out->why_compile, sizeof out->why_compile, "--no-compile: op by op, eagerly");
    } else if (in->kind == MD_BACKEND_CUDA) {
        snprintf(out->why_compile, sizeof out->why_compile,
                 "mode %s: fused layers, one planned activation arena, the training step captured as a CUDA graph%s",
                 mode, strcmp(mode, "max-autotune") == 0 ? ", cuDNN plans timed" : "");
    } else if (in->kind == MD_BACKEND_METAL) {
        snprintf(out->why_compile, sizeof out->why_compile,
                 "mode %s: fused layers, planned memory, one command buffer per step with cached pipelines "
                 "(not torch.compile, which MPS users often have to disable)",
                 mode);
    } else {
        snprintf(out->why_compile, sizeof out->why_compile,
                 "mode %s: on the CPU compile means fused layers and one planned activation arena (no graph "
                 "capture)",
                 mode);
    }
}

md_status md_stage_policy(md_job *job)
{
    md_options *o = job->opts;
    const struct md_device_info *info = md_device_get_info(job->dev);
    struct md_policy_in in = {
        .kind = md_device_kind(job->dev),
        .supports_fp16 = info->supports_fp16,
        .supports_bf16 = info->supports_bf16,
        .total_memory = info->total_memory,
        .model = o->model,
        .amp = o->amp,
        .amp_given = md_options_given(o, "amp"),
        .precision = o->precision,
        .precision_given = md_options_given(o, "precision"),
        .batch_size = o->batch_size,
        .channels_last = o->channels_last,
        .channels_last_given = md_options_given(o, "channels-last") || md_options_given(o, "no-channels-last"),
        .compile = o->compile,
        .compile_given = md_options_given(o, "no-compile"),
        .compile_mode = o->compile_mode,
        .cpu_nhwc_fast = info->prefers_channels_last,
    };
    struct md_policy_out out;
    md_policy_decide(&in, &out);

    o->precision = out.precision;
    o->amp = out.precision != MD_PREC_FP32 && o->amp;
    o->batch_size = out.batch_size;
    o->channels_last = out.channels_last;
    o->compile = out.compile;

    char v[32];
    md_job_setting(job, "precision", md_precision_name(out.precision), out.why_precision);
    if (out.precision != MD_PREC_FP32)
        md_job_setting(job, "loss_scaling", out.loss_scaling ? "dynamic" : "off", out.why_loss_scaling);
    snprintf(v, sizeof v, "%d", out.batch_size);
    md_job_setting(job, "batch_size", v, out.why_batch);
    md_job_setting(job, "channels_last", out.channels_last ? "on" : "off", out.why_channels);
    md_job_setting(job, "compile", out.compile ? "on" : "off", out.why_compile);
    return MD_OK;
}
