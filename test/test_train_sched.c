#define _GNU_SOURCE
/* test_train_sched.c - learning-rate schedules at chosen steps (hand-computed)
 * and the dynamic loss scaler. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "train/scaler.h"
#include "train/schedule.h"

#define LR_EQ(s, step, want)                                                                            \
    do {                                                                                                \
        double got_ = md_schedule_lr(&(s), (step));                                                     \
        cr_assert(fabs(got_ - (want)) <= 1e-12 + 1e-9 * fabs(want), "%s step %lld: lr %.12g, want %.12g", \
                  md_schedule_name((s).kind), (long long)(step), got_, (double)(want));                 \
    } while (0)

Test(schedule, constant_with_warmup)
{
    struct md_schedule s = {MD_SCHED_CONSTANT, 0.1, 100, 10, 10};
    LR_EQ(s, 0, 0.01);
    LR_EQ(s, 4, 0.05);
    LR_EQ(s, 9, 0.1);
    LR_EQ(s, 10, 0.1);
    LR_EQ(s, 99, 0.1);
    LR_EQ(s, 1000, 0.1);
}

Test(schedule, cosine)
{
    struct md_schedule s = {MD_SCHED_COSINE, 0.2, 100, 0, 10};
    LR_EQ(s, 0, 0.2);
    LR_EQ(s, 25, 0.1 * (1 + cos(M_PI / 4)));
    LR_EQ(s, 50, 0.1);
    LR_EQ(s, 99, 0.1 * (1 + cos(M_PI * 99 / 100)));
    s.warmup_steps = 10;
    LR_EQ(s, 0, 0.02);
    LR_EQ(s, 10, 0.2);
    LR_EQ(s, 55, 0.1);
}

Test(schedule, step_milestones)
{
    struct md_schedule s = {MD_SCHED_STEP, 1.0, 100, 0, 10};
    LR_EQ(s, 49, 1.0);
    LR_EQ(s, 50, 0.1);
    LR_EQ(s, 69, 0.1);
    LR_EQ(s, 70, 0.01);
    LR_EQ(s, 99, 0.01);
}

Test(schedule, type1_halves_every_epoch)
{
    struct md_schedule s = {MD_SCHED_TYPE1, 1.0, 100, 0, 10};
    LR_EQ(s, 0, 1.0);
    LR_EQ(s, 9, 1.0);
    LR_EQ(s, 10, 0.5);
    LR_EQ(s, 25, 0.25);
    LR_EQ(s, 99, 1.0 / 512);
    int k;
    cr_assert_eq(md_schedule_parse("type1", &k), MD_OK);
    cr_assert_eq(k, MD_SCHED_TYPE1);
}

Test(schedule, onecycle_as_pytorch)
{
    /* OneCycleLR(max_lr=1, total_steps=100): initial 1/25, peak at step 29,
     * final 1/25/1e4 at step 99, cosine between. */
    struct md_schedule s = {MD_SCHED_ONECYCLE, 1.0, 100, 0, 10};
    LR_EQ(s, 0, 0.04);
    LR_EQ(s, 29, 1.0);
    double fin = 0.04 / 1e4;
    LR_EQ(s, 99, fin);
    LR_EQ(s, 64, fin + (1.0 - fin) / 2);
    double pct = 10.0 / 29.0;
    LR_EQ(s, 10, 1.0 + (0.04 - 1.0) / 2 * (cos(M_PI * pct) + 1));
}

Test(schedule, parse)
{
    int k;
    cr_assert_eq(md_schedule_parse("onecycle", &k), MD_OK);
    cr_assert_eq(k, MD_SCHED_ONECYCLE);
    cr_assert_eq(md_schedule_parse("linear", &k), MD_ERR_USAGE);
}

Test(scaler, skips_halves_and_grows)
{
    struct md_scaler s;
    md_scaler_init(&s, 1);
    cr_assert_eq(s.scale, 65536.0f);
    cr_assert_eq(md_scaler_update(&s, 0), 0, "inf: skip");
    cr_assert_eq(s.scale, 32768.0f);
    cr_assert_eq(s.skipped, 1);
    for (int i = 0; i < 1999; i++) cr_assert_eq(md_scaler_update(&s, 1), 1);
    cr_assert_eq(s.scale, 32768.0f, "no growth before 2000 clean steps");
    cr_assert_eq(md_scaler_update(&s, 1), 1);
    cr_assert_eq(s.scale, 65536.0f, "x2 after 2000 clean steps");
    for (int i = 0; i < 1000; i++) md_scaler_update(&s, 1);
    cr_assert_eq(md_scaler_update(&s, 0), 0);
    cr_assert_eq(s.clean, 0, "an overflow restarts the clean count");
    cr_assert_eq(s.skipped, 2);
    /* halving down to 1, then giving up */
    while (s.scale > 1.0f) cr_assert_eq(md_scaler_update(&s, 0), 0);
    cr_assert_eq(md_scaler_update(&s, 0), -1, "non-finite at scale 1 is a numerical failure");

    md_scaler_init(&s, 0);
    cr_assert_eq(s.scale, 1.0f);
    cr_assert_eq(md_scaler_update(&s, 1), 1);
    cr_assert_eq(md_scaler_update(&s, 0), -1);
    cr_assert_eq(s.skipped, 0);
}
