/* test_policy.c - per-device decisions (pure, with fake capabilities) and the
 * policy stage on a real CPU device. */
#include <criterion/criterion.h>
#include <string.h>

#include "helpers_job.h"
#include "core/log.h"
#include "app/policy.h"

static struct md_policy_in base(md_backend_kind kind, int fp16, int bf16)
{
    struct md_policy_in in;
    memset(&in, 0, sizeof in);
    in.kind = kind;
    in.supports_fp16 = fp16;
    in.supports_bf16 = bf16;
    in.model = "small_cnn";
    in.compile = 1;
    in.compile_mode = "default";
    return in;
}

Test(policy, precision_table)
{
    static const struct {
        const char *what;
        md_backend_kind kind;
        int fp16, bf16, amp, prec_given;
        md_precision prec, want;
        int loss_scaling;
        const char *needle;
    } cases[] = {
        {"cuda amp with bf16", MD_BACKEND_CUDA, 1, 1, 1, 0, MD_PREC_FP32, MD_PREC_BF16, 0, "bf16"},
        {"cuda amp without bf16", MD_BACKEND_CUDA, 1, 0, 1, 0, MD_PREC_FP32, MD_PREC_FP16, 1, "loss scaling"},
        {"cuda no amp", MD_BACKEND_CUDA, 1, 1, 0, 0, MD_PREC_FP32, MD_PREC_FP32, 0, "default"},
        {"cuda fp16 asked", MD_BACKEND_CUDA, 1, 1, 0, 1, MD_PREC_FP16, MD_PREC_FP16, 1, "--precision fp16"},
        {"cuda bf16 unsupported", MD_BACKEND_CUDA, 1, 0, 0, 1, MD_PREC_BF16, MD_PREC_FP16, 1, "not supported"},
        {"metal amp", MD_BACKEND_METAL, 1, 1, 1, 0, MD_PREC_FP32, MD_PREC_FP16, 1, "MPS AMP crash"},
        {"metal bf16 unsupported", MD_BACKEND_METAL, 1, 0, 0, 1, MD_PREC_BF16, MD_PREC_FP16, 1, "instead"},
        {"metal no half", MD_BACKEND_METAL, 0, 0, 1, 0, MD_PREC_FP32, MD_PREC_FP32, 0, "neither"},
        {"cpu amp", MD_BACKEND_CPU, 1, 1, 1, 0, MD_PREC_FP32, MD_PREC_FP32, 0, "continuing in fp32"},
        {"cpu fp16", MD_BACKEND_CPU, 1, 1, 0, 1, MD_PREC_FP16, MD_PREC_FP32, 0, "no speed benefit"},
        {"cpu bf16", MD_BACKEND_CPU, 0, 0, 0, 1, MD_PREC_BF16, MD_PREC_FP32, 0, "continuing in fp32"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct md_policy_in in = base(cases[i].kind, cases[i].fp16, cases[i].bf16);
        in.amp = cases[i].amp;
        in.amp_given = cases[i].amp;
        in.precision = cases[i].prec;
        in.precision_given = cases[i].prec_given;
        struct md_policy_out out;
        md_policy_decide(&in, &out);
        fprintf(stderr, "  %-24s -> %s: %s\n", cases[i].what, md_precision_name(out.precision), out.why_precision);
        cr_assert_eq(out.precision, cases[i].want, "%s: got %s", cases[i].what, md_precision_name(out.precision));
        cr_assert_eq(out.loss_scaling, cases[i].loss_scaling, "%s: loss scaling", cases[i].what);
        cr_assert(strstr(out.why_precision, cases[i].needle) || strstr(out.why_loss_scaling, cases[i].needle),
                  "%s: reason '%s' lacks '%s'", cases[i].what, out.why_precision, cases[i].needle);
    }
}

Test(policy, batch_channels_compile)
{
    struct md_policy_in in = base(MD_BACKEND_METAL, 1, 0);
    struct md_policy_out out;
    md_policy_decide(&in, &out);
    cr_assert_eq(out.batch_size, 16);
    cr_assert_eq(out.channels_last, 0);
    cr_assert(out.compile && strstr(out.why_compile, "command buffer"), "%s", out.why_compile);

    in = base(MD_BACKEND_CPU, 1, 1);
    md_policy_decide(&in, &out);
    cr_assert_eq(out.channels_last, 0, "CPU without the direct kernels and Winograd: NCHW");
    in.cpu_nhwc_fast = 1;
    md_policy_decide(&in, &out);
    cr_assert(out.channels_last && strstr(out.why_channels, "direct (AVX-512 or AVX2)"), "%s", out.why_channels);
    in.channels_last_given = 1; /* --no-channels-last */
    md_policy_decide(&in, &out);
    cr_assert_eq(out.channels_last, 0, "--no-channels-last wins on the CPU");

    in = base(MD_BACKEND_CUDA, 1, 1);
    in.amp = 1;
    md_policy_decide(&in, &out);
    cr_assert_eq(out.batch_size, 128);
    cr_assert_eq(out.channels_last, 1, "CUDA + half: channels-last on");
    in.amp = 0;
    md_policy_decide(&in, &out);
    cr_assert_eq(out.channels_last, 1, "CUDA fp32: on too (NHWC measured faster)");
    in.channels_last = 0;
    in.channels_last_given = 1;
    md_policy_decide(&in, &out);
    cr_assert_eq(out.channels_last, 0, "--no-channels-last: off");
    in.channels_last = 1;
    md_policy_decide(&in, &out);
    cr_assert_eq(out.channels_last, 1, "asked: on");
    in.compile_mode = "reduce-overhead";
    md_policy_decide(&in, &out);
    cr_assert(strstr(out.why_compile, "CUDA graph"), "%s", out.why_compile);
    in.compile = 0;
    md_policy_decide(&in, &out);
    cr_assert_eq(out.compile, 0);

    in = base(MD_BACKEND_CPU, 0, 0);
    md_policy_decide(&in, &out);
    cr_assert_eq(out.batch_size, 128);
    cr_assert(strstr(out.why_compile, "CPU"), "%s", out.why_compile);
    in.model = "resnet50";
    md_policy_decide(&in, &out);
    cr_assert_eq(out.batch_size, 64);
    in.batch_size = 32;
    md_policy_decide(&in, &out);
    cr_assert_eq(out.batch_size, 32);
    cr_assert_str_eq(out.why_batch, "--batch-size");
}

Test(policy, stage_on_cpu_device_writes_options_and_settings)
{
    struct th_job j;
    th_job_open(&j, "--amp --device cpu");
    md_options *o = &j.o;
    md_job *job = &j.job;
    cr_assert_eq(md_stage_policy(job), MD_OK);
    cr_assert_eq(o->precision, MD_PREC_FP32, "CPU continues in fp32");
    cr_assert_eq(o->amp, 0);
    cr_assert_eq(o->batch_size, 128);
    int found = 0;
    const cJSON *s;
    cJSON_ArrayForEach(s, job->settings)
    {
        const char *name = cJSON_GetObjectItem(s, "name")->valuestring;
        if (strcmp(name, "precision") == 0) {
            found++;
            cr_assert_str_eq(cJSON_GetObjectItem(s, "value")->valuestring, "fp32");
            cr_assert(strstr(cJSON_GetObjectItem(s, "why")->valuestring, "--amp"));
        }
        if (strcmp(name, "batch_size") == 0 || strcmp(name, "compile") == 0 || strcmp(name, "channels_last") == 0)
            found++;
    }
    cr_assert_eq(found, 4, "precision, batch_size, channels_last and compile recorded");
    th_job_end(&j);
}
