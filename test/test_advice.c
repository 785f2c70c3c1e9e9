/* test_advice.c - advice that does not flip on noise: on/off comparisons
 * from repeated, interleaved measurements (md_rec_compare), the texts the
 * verdicts produce, one source for batch-size statements, and gradient
 * checkpointing only under memory pressure. All measurements are made up. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "diag/recommend.h"
#include "helpers_rec.h"

static void dump(const struct md_rec *r, int n)
{
    for (int i = 0; i < n; i++)
        fprintf(stderr, "  [%s] %s | %s | cost: %s | %s\n", r[i].topic, r[i].advice, r[i].figure, r[i].cost,
                r[i].verdict);
}

static struct md_rec_ablation pairs3(double on0, double off0, double on1, double off1, double on2, double off2)
{
    struct md_rec_ablation a;
    memset(&a, 0, sizeof a);
    a.n = 3;
    a.on[0] = on0, a.off[0] = off0;
    a.on[1] = on1, a.off[1] = off1;
    a.on[2] = on2, a.off[2] = off2;
    return a;
}

/* The advice of one topic, with the whole list printed when it is missing. */
static const struct md_rec *rec_for(const struct md_rec_in *in, struct md_rec *r, const char *topic)
{
    int n = md_recommend(in, r, MD_REC_MAX);
    dump(r, n);
    const struct md_rec *x = find(r, n, topic);
    cr_assert_not_null(x, "no '%s' recommendation", topic);
    return x;
}

Test(advice, median_and_gain_text)
{
    double v[] = {3, 1, 2}, w[] = {4, 1, 3, 2};
    cr_assert_float_eq(md_rec_median(v, 3), 2, 1e-12);
    cr_assert_float_eq(md_rec_median(w, 4), 2.5, 1e-12);
    cr_assert_float_eq(v[0], 3, 0, "the input is not sorted in place");
    char b[48];
    cr_assert_str_eq(md_rec_gain_text(1.25, b, sizeof b), "25% faster than");
    cr_assert_str_eq(md_rec_gain_text(6.28, b, sizeof b), "6.3x as fast as", "not '528%% faster'");
    cr_assert_str_eq(md_rec_gain_text(2.0, b, sizeof b), "2.0x as fast as");
}

/* The report's case: three identical runs measured compile at 0.73x, 0.86x
 * and 1.08x. Interleaved in one run, that scatter is no verdict. */
Test(advice, noisy_compile_is_no_measurable_difference)
{
    struct md_rec_ablation a = pairs3(730, 1000, 860, 1000, 1080, 1000);
    struct md_rec_compare c;
    md_rec_compare(&a, &c);
    cr_assert_eq(c.verdict, MD_REC_NO_DIFFERENCE, "verdict %d", c.verdict);
    cr_assert_float_eq(c.speedup, 0.86, 1e-9);
    cr_assert_float_eq(c.ratio_min, 0.73, 1e-9);
    cr_assert_float_eq(c.ratio_max, 1.08, 1e-9);
    cr_assert_float_eq(c.noise, (1.08 - 0.73) / 0.73, 1e-9);
    cr_assert_eq(c.pairs, 3);

    struct md_rec_in in = base();
    struct md_rec r[MD_REC_MAX];
    for (int on = 0; on <= 1; on++) { /* whichever setting is current */
        in.compile = on;
        in.abl_compile = a;
        const struct md_rec *x = rec_for(&in, r, "compile");
        cr_assert_not_null(strstr(x->advice, "no measurable difference between compile on and compile off"), "%s",
                           x->advice);
        cr_assert_null(strstr(x->advice, "--no-compile"), "no flag to flip: %s", x->advice);
        cr_assert_str_eq(x->verdict, "no difference");
        cr_assert_not_null(strstr(x->figure, "pairs 0.73-1.08x over 3 interleaved pairs"), "%s", x->figure);
    }
    /* the same figures in another order (the runs of a second invocation) */
    in.abl_compile = pairs3(1080, 1000, 730, 1000, 860, 1000);
    cr_assert_str_eq(rec_for(&in, r, "compile")->verdict, "no difference");
}

/* Any three pairs that do not agree on which side is faster give no
 * verdict, so two runs of the same program cannot advise opposite things
 * unless each one's pairs all agree. */
Test(advice, pairs_on_both_sides_of_one_never_give_a_verdict)
{
    static const double ratios[] = {0.73, 0.86, 0.95, 0.99, 1.01, 1.02, 1.08, 1.3};
    const int n = (int)(sizeof ratios / sizeof ratios[0]);
    int checked = 0;
    for (int i = 0; i < n; i++)
        for (int j = 0; j < n; j++)
            for (int k = 0; k < n; k++) {
                double lo = ratios[i], hi = ratios[i];
                double r3[3] = {ratios[i], ratios[j], ratios[k]};
                for (int q = 1; q < 3; q++) {
                    if (r3[q] < lo) lo = r3[q];
                    if (r3[q] > hi) hi = r3[q];
                }
                struct md_rec_ablation a = pairs3(500 * r3[0], 500, 700 * r3[1], 700, 600 * r3[2], 600);
                struct md_rec_compare c;
                md_rec_compare(&a, &c);
                if (lo < 1 && hi > 1) {
                    cr_assert_eq(c.verdict, MD_REC_NO_DIFFERENCE, "ratios %g %g %g gave verdict %d", r3[0], r3[1],
                                 r3[2], c.verdict);
                    checked++;
                }
                if (c.verdict == MD_REC_ON_FASTER) cr_assert_gt(lo, 1.0);
                if (c.verdict == MD_REC_OFF_FASTER) cr_assert_lt(hi, 1.0);
            }
    cr_assert_gt(checked, 100);
}

/* A clear 1.5x with a small spread is advised, with the flag, the gain and
 * its spread, and the cost. */
Test(advice, clear_gain_is_recommended_with_flag_gain_spread_and_cost)
{
    struct md_rec_ablation a = pairs3(1500, 1000, 1495, 1002, 1510, 1004);
    struct md_rec_compare c;
    md_rec_compare(&a, &c);
    cr_assert_eq(c.verdict, MD_REC_ON_FASTER);
    cr_assert_float_eq(c.speedup, 1.5, 1e-9);
    cr_assert_float_eq(c.noise, 0.03, 1e-12, "the floor: the pairs scatter by %.3f", (c.ratio_max - c.ratio_min) / c.ratio_min);

    struct md_rec_in in = base();
    struct md_rec r[MD_REC_MAX];
    in.compile = 0;
    in.abl_compile = a;
    const struct md_rec *x = rec_for(&in, r, "compile");
    cr_assert_str_eq(x->advice, "drop --no-compile (compile is the default): training with compile on is 50% faster "
                                "than with compile off here");
    cr_assert_not_null(strstr(x->figure, "compile on: median 1500 samples/s (1495-1510)"), "%s", x->figure);
    cr_assert_not_null(strstr(x->figure, "compile off: median 1002 (1000-1004)"), "%s", x->figure);
    cr_assert_not_null(strstr(x->figure, "on/off 1.50x, pairs 1.49-1.50x over 3 interleaved pairs"), "%s", x->figure);
    cr_assert_not_null(strstr(x->cost, "planning at start-up"), "%s", x->cost);
    cr_assert_str_eq(x->verdict, "on faster");
    in.compile = 1;
    cr_assert_str_eq(rec_for(&in, r, "compile")->advice,
                     "keep compile on (the default): training with compile on is 50% faster than with compile off here");
    /* the same gain, turned around: compile hurts */
    in.abl_compile = pairs3(1000, 1500, 1002, 1495, 1004, 1510);
    x = rec_for(&in, r, "compile");
    cr_assert_str_eq(x->advice, "use --no-compile: training with compile off is 50% faster than with compile on here");
    cr_assert_str_eq(x->verdict, "off faster");
    cr_assert_not_null(strstr(x->cost, "activation memory"), "%s", x->cost);
}

/* The report's broken phrasings: "turn it off with no --channels-last" and
 * "keep it off: 528% faster than on". */
Test(advice, channels_last_phrasing)
{
    struct md_rec_in in = base();
    struct md_rec r[MD_REC_MAX];
    in.abl_channels_last = pairs3(159, 1000, 158, 1004, 161, 998); /* NHWC 6.3x slower */
    in.channels_last = 0;
    const struct md_rec *x = rec_for(&in, r, "channels-last");
    cr_assert_str_eq(x->advice, "leave --channels-last off (the default): training with NCHW is 6.3x as fast as "
                                "with NHWC (--channels-last) here");
    cr_assert_null(strstr(x->advice, "%"), "a 6x gain reads as a ratio: %s", x->advice);
    in.channels_last = 1;
    x = rec_for(&in, r, "channels-last");
    cr_assert_str_eq(x->advice, "drop --channels-last: training with NCHW is 6.3x as fast as with NHWC (--channels-last) here");
    cr_assert_null(strstr(x->advice, "no --channels-last"));
    in.abl_channels_last = pairs3(1150, 1000, 1160, 1010, 1140, 995); /* +15% */
    in.channels_last = 0;
    x = rec_for(&in, r, "channels-last");
    cr_assert_str_eq(x->advice, "use --channels-last: training with NHWC (--channels-last) is 15% faster than with NCHW here");
}

Test(advice, floor_drift_and_too_few_runs)
{
    struct md_rec_compare c;
    /* 2% with tight pairs: under the 3% floor */
    struct md_rec_ablation a = pairs3(1020, 1000, 1021, 1000, 1019, 1000);
    md_rec_compare(&a, &c);
    cr_assert_eq(c.verdict, MD_REC_NO_DIFFERENCE);
    /* the machine slows down by 20% during the run; every pair still says 6%:
     * interleaving keeps the verdict (measured AAA BBB this would be noise) */
    a = pairs3(1000, 940, 900, 846, 800, 752);
    md_rec_compare(&a, &c);
    cr_assert_eq(c.verdict, MD_REC_ON_FASTER, "verdict %d, noise %g", c.verdict, c.noise);
    cr_assert_float_eq(c.speedup, 1000.0 / 940, 1e-9);
    /* one pair: the noise is unknown, no verdict, and the text says why */
    struct md_rec_ablation one;
    memset(&one, 0, sizeof one);
    one.n = 1;
    one.on[0] = 2000;
    one.off[0] = 1000;
    md_rec_compare(&one, &c);
    cr_assert_eq(c.verdict, MD_REC_TOO_FEW);
    struct md_rec_in in = base();
    struct md_rec r[MD_REC_MAX];
    in.abl_compile = one;
    const struct md_rec *x = rec_for(&in, r, "compile");
    cr_assert_not_null(strstr(x->advice, "not enough repetitions"), "%s", x->advice);
    /* nothing measured: nothing said */
    memset(&in.abl_compile, 0, sizeof in.abl_compile);
    int n = md_recommend(&in, r, MD_REC_MAX);
    cr_assert_null(find(r, n, "compile"));
}

Test(advice, precision_and_workers_name_their_flags)
{
    struct md_rec_in in = base();
    struct md_rec r[MD_REC_MAX];
    in.supports_fp16 = 1;
    in.abl_precision = pairs3(290, 1000, 285, 1010, 280, 990); /* fp16 3.5x slower on this CPU */
    const struct md_rec *x = rec_for(&in, r, "precision");
    cr_assert_str_eq(x->advice, "keep fp32 (no --amp): training with fp32 is 3.5x as fast as with fp16 here");
    in.amp = 1;
    x = rec_for(&in, r, "precision");
    cr_assert_str_eq(x->advice, "use --precision fp32 without --amp: training with fp32 is 3.5x as fast as with fp16 here");
    in.amp = 0;
    in.kind = MD_BACKEND_CUDA;
    in.supports_bf16 = 1;
    in.abl_precision = pairs3(2500, 1000, 2480, 1000, 2510, 1005);
    x = rec_for(&in, r, "precision");
    cr_assert_str_eq(x->advice, "use --amp (bf16 on this GPU): training with bf16 is 2.5x as fast as with fp32 here");
    cr_assert_not_null(strstr(x->cost, "loss curve"), "%s", x->cost);

    in = base();
    in.num_workers = 0;
    in.abl_workers = pairs3(900, 300, 880, 310, 905, 295);
    in.abl_workers_count = 2;
    x = rec_for(&in, r, "loader workers");
    cr_assert_str_eq(x->advice, "use --num-workers 2: training with 2 loader workers is 3.0x as fast as with 0 workers here");
    cr_assert_not_null(strstr(x->cost, "2 CPU threads"), "%s", x->cost);
}

/* The report's case: the sweep stopped at 128 (time), the finder found 420.
 * The batch advice says 420 fits and never "largest that fitted: 128". */
Test(advice, batch_statements_come_from_the_finder)
{
    static const struct md_rec_sweep_point s[] = {
        {8, 1, 200, 20 * MiB, 190, 210, 3},    {16, 1, 300, 30 * MiB, 290, 310, 3},
        {32, 1, 400, 50 * MiB, 390, 410, 3},   {64, 1, 420, 90 * MiB, 410, 430, 3},
        {128, 1, 430, 170 * MiB, 420, 440, 3}, {512, 1, 900, 600 * MiB, 890, 910, 3}, /* above what fits */
    };
    struct md_rec_in in = base();
    struct md_rec r[MD_REC_MAX];
    in.sweep = s;
    in.n_sweep = 5;
    in.batch_size = 16;
    in.finder_ran = 1;
    in.finder_max_batch = 420;
    const struct md_rec *x = rec_for(&in, r, "batch size");
    cr_assert_str_eq(x->advice, "use --batch-size 32: the smallest batch within 10% of the best throughput, leaving "
                                "memory for the rest (33% faster than batch 16)");
    cr_assert_not_null(strstr(x->figure, "largest batch that fits: 420 (batch finder)"), "%s", x->figure);
    cr_assert_not_null(strstr(x->figure, "best batch 128: 430 samples/s (420-440 over 3 runs)"), "%s", x->figure);
    cr_assert_null(strstr(x->figure, "128 and not"), "%s", x->figure);
    cr_assert_null(strstr(x->figure, "fitted: 128"), "%s", x->figure);
    cr_assert_not_null(strstr(x->cost, "peak memory 50.00 MiB instead of 30.00 MiB"), "%s", x->cost);
    /* a sweep point above what the finder found to fit is never the answer */
    in.n_sweep = 6;
    x = rec_for(&in, r, "batch size");
    cr_assert_null(strstr(x->figure, "best batch 512"), "%s", x->figure);
    cr_assert_null(strstr(x->advice, "512"), "%s", x->advice);
    /* without the finder, what fits is said from the sweep, as the sweep's */
    in.finder_ran = 0;
    in.n_sweep = 5;
    x = rec_for(&in, r, "batch size");
    cr_assert_not_null(strstr(x->figure, "did not reach the memory limit"), "%s", x->figure);
    /* the finder alone: what fits, and no claim about the fastest */
    in.finder_ran = 1;
    in.n_sweep = 0;
    in.sweep = NULL;
    x = rec_for(&in, r, "batch size");
    cr_assert_str_eq(x->advice, "--batch-size up to 420 fits; measure which is fastest with --batch-sweep");
    in.batch_size = 512;
    x = rec_for(&in, r, "batch size");
    cr_assert_str_eq(x->advice, "use --batch-size 420 or less: 512 does not fit");
}

/* A batch within 10% of the best, allowing for its spread, is kept. */
Test(advice, noisy_batch_is_kept)
{
    struct md_rec_sweep_point s[] = {
        {32, 1, 700, 50 * MiB, 650, 760, 3}, {64, 1, 900, 90 * MiB, 850, 960, 3}, {128, 1, 1000, 170 * MiB, 940, 1040, 3},
        {256, 0, 0, 0, 0, 0, 0},
    };
    struct md_rec_in in = base();
    struct md_rec r[MD_REC_MAX];
    in.sweep = s;
    in.n_sweep = 4;
    in.batch_size = 64;
    const struct md_rec *x = rec_for(&in, r, "batch size");
    cr_assert_str_eq(x->advice, "keep --batch-size 64: within 10% of the best throughput measured (batch 128)");
    cr_assert_not_null(strstr(x->figure, "the sweep fitted 128 and not 256"), "%s", x->figure);
    /* slower and without the spread, 880 < 0.9 x 1000: move to 128 */
    s[1].samples_per_s = s[1].max_samples_per_s = 880;
    x = rec_for(&in, r, "batch size");
    cr_assert_not_null(strstr(x->advice, "use --batch-size 128"), "%s", x->advice);
}

Test(advice, gradient_checkpointing_only_under_memory_pressure)
{
    struct md_rec_in in = base();
    struct md_rec r[MD_REC_MAX];
    /* the report's case: 58 MiB peak on a 23 GiB machine, activations 80% */
    in.params_bytes = 4 * MiB;
    in.grads_bytes = 4 * MiB;
    in.optimizer_bytes = 4 * MiB;
    in.activations_bytes = 46 * MiB;
    in.peak_bytes = 58 * MiB;
    in.device_memory = 23 * GiB;
    int n = md_recommend(&in, r, MD_REC_MAX);
    dump(r, n);
    cr_assert_null(find(r, n, "gradient checkpointing"), "advised at 58 MiB of 23 GiB");
    /* an automatic sweep always ends at a batch that does not fit: above the
     * run's batch, that is no pressure on the run */
    static const struct md_rec_sweep_point s[] = {{64, 1, 900, 58 * MiB, 0, 0, 3}, {128, 0, 0, 0, 0, 0, 0}};
    in.sweep = s;
    in.n_sweep = 2;
    n = md_recommend(&in, r, MD_REC_MAX);
    cr_assert_null(find(r, n, "gradient checkpointing"));
    /* peak near the usable memory: advised, with why and the cost */
    in.peak_bytes = 20 * GiB;
    const struct md_rec *x = rec_for(&in, r, "gradient checkpointing");
    cr_assert_not_null(strstr(x->advice, "use --grad-ckpt"), "%s", x->advice);
    cr_assert_not_null(strstr(x->figure, "peak 20.00 GiB is 87% of the 23.00 GiB the run may use"), "%s", x->figure);
    cr_assert_not_null(strstr(x->cost, "extra forward pass"), "%s", x->cost);
    /* the finder says the run's batch is the largest that fits */
    in.peak_bytes = 58 * MiB;
    in.finder_ran = 1;
    in.finder_max_batch = 64;
    x = rec_for(&in, r, "gradient checkpointing");
    cr_assert_not_null(strstr(x->figure, "batch 64 is the largest that fits"), "%s", x->figure);
}

Test(advice, json_carries_cost_and_verdict)
{
    struct md_rec_in in = base();
    struct md_rec r[MD_REC_MAX];
    in.abl_compile = pairs3(1000, 1500, 1005, 1490, 995, 1520);
    int n = md_recommend(&in, r, MD_REC_MAX);
    cJSON *j = md_recs_to_json(r, n);
    const cJSON *e, *hit = NULL;
    cJSON_ArrayForEach(e, j) if (strcmp(cJSON_GetObjectItem(e, "topic")->valuestring, "compile") == 0) hit = e;
    cr_assert_not_null(hit);
    cr_assert_str_eq(cJSON_GetObjectItem(hit, "verdict")->valuestring, "off faster");
    cr_assert(cJSON_IsString(cJSON_GetObjectItem(hit, "cost")));
    cJSON_Delete(j);
}
