/* trainer_budget.c - --time-budget and --target-accuracy (trainer_impl.h).
 *
 * --time-budget S: the run (from its start, data loading included, to the
 * test score) should end within S seconds, having trained as long as fits.
 * The first steps run on the schedule sized for --epochs; after a short
 * timed warm-up (4 untimed steps, then at least 5 steps and about a second,
 * or 2% of a short budget) the steps that fit are counted from the measured
 * step time, less the time each epoch's end takes (validation, checkpoint:
 * estimated from the step time until the first epoch's end measures it) and
 * the test scoring's. The schedule's total becomes that count, so a one-cycle
 * or cosine schedule ends at the budget's end; the last epoch may be partial.
 * After each epoch the count is sized again from the pace so far and changed
 * when it differs by more than 3% (a machine that slowed down or sped up).
 * The run's first epoch is paced by its second half: its first steps pay
 * for the device's cold start (kernels loaded on first use, plans, graph
 * captures), which a GPU's first epoch of a small model can be mostly made of
 * (an H100 fresh from boot: 1.7 ms a step over the first epoch of small_cnn,
 * 0.37 ms after), and sizing from it left a 3 s budget a third unused.
 * A step never starts after the point where the test scoring must begin.
 *
 * --target-accuracy P: after each epoch, the validation accuracy (the test
 * split's, evaluated after each epoch, when there is no validation split)
 * against P; the first epoch that reaches it ends the training. */
#define _POSIX_C_SOURCE 200809L
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/log.h"
#include "core/timer.h"
#include "train/trainer_impl.h"

/* untimed first steps (lazy allocations, plans, a graph captured per input set) */
#define WARM_SKIP 4
/* timed warm-up: at least this many steps and about WARM_S seconds (or
 * WARM_SHARE of the budget when that is less); never more than WARM_MAX steps */
#define WARM_MIN 5
#define WARM_MAX 200
#define WARM_S 1.0
#define WARM_SHARE 0.02
/* an evaluation sample costs about this share of a training sample (forward only) */
#define EVAL_SHARE 0.33
/* kept free at the end: a share of the budget, for the pace's noise and the exit */
#define MARGIN_SHARE 0.02
#define MARGIN_S 0.05
/* a later plan replaces the current one when they differ by more than this */
#define REPLAN_SHARE 0.03

void md_trainer_budget_start(md_trainer *t)
{
    const struct md_train_opts *o = t->o;
    t->n_epochs = o->epochs;
    t->bud_planned = 0;
    t->bud_total = 0;
    t->bud_cut = 0;
    t->bud_warm_s0 = -1;
    t->bud_replans = 0;
    t->bud_said = 0;
    t->tgt_epoch = 0;
    t->bud_val_s = -1;
    t->bud_test_s = 0;
    t->bud_steps_end = 0;
    t->bud_mid_step = -1;
    t->bud_mid_t = t->bud_last_t = 0;
    if (o->time_budget <= 0) return;
    t->bud_t0 = o->t_start > 0 ? o->t_start : md_now();
    t->bud_end = t->bud_t0 + o->time_budget;
}

static long long split_count(const md_trainer *t, md_split s)
{
    return md_data_count(t->data, s);
}

/* --target-accuracy without a validation split scores the test split after each epoch */
static int target_on_test(const md_trainer *t)
{
    return t->o->target_acc > 0 && !t->regress && !t->val_l && t->test_l;
}

/* Seconds of one epoch's end (validation, checkpoint, the target's test score),
 * measured or estimated. */
static double epoch_end_s(const md_trainer *t, double step_s)
{
    if (t->bud_val_s >= 0) return t->bud_val_s;
    long long n = (t->val_l ? split_count(t, MD_SPLIT_VAL) : 0) + (target_on_test(t) ? split_count(t, MD_SPLIT_TEST) : 0);
    return (double)n / t->batch * step_s * EVAL_SHARE;
}

/* Seconds of a test scoring. */
static double test_s(const md_trainer *t, double step_s)
{
    if (!t->test_l) return 0.0;
    long long nv = split_count(t, MD_SPLIT_VAL), nt = split_count(t, MD_SPLIT_TEST);
    if (t->bud_val_s > 0 && nv > 0) return t->bud_val_s * (double)nt / (double)nv;
    return (double)nt / t->batch * step_s * EVAL_SHARE;
}

/* The steps the budget allows in all, from now at `step_s` seconds a step. */
static long long plan_total(md_trainer *t, double step_s, double now)
{
    const struct md_train_opts *o = t->o;
    long long spe = t->steps_per_epoch > 0 ? t->steps_per_epoch : 1;
    long long done = t->global_step - (long long)t->epoch * spe; /* of the current epoch */
    if (done < 0) done = 0;
    double end_s = epoch_end_s(t, step_s);
    /* the final test scoring; none when the last epoch's end scored the test split (the target's) */
    t->bud_test_s = test_s(t, step_s);
    double final_s = target_on_test(t) ? 0.0 : t->bud_test_s;
    double avail = t->bud_end - now - final_s - (MARGIN_SHARE * o->time_budget + MARGIN_S);
    /* the most steps s whose time and epoch ends (each epoch that ends
     * costs its end) fit: the cost grows with s, so a bisection finds it
     * however the ends weigh against the steps (an epoch end dearer than
     * the epoch's steps made a fixed-point search overshoot to none) */
    long long s = 0, hi = step_s > 0 && avail > 0 ? (long long)floor(avail / step_s) : 0;
    while (s < hi) {
        long long mid = s + (hi - s + 1) / 2, ends = (done + mid + spe - 1) / spe;
        if ((double)mid * step_s + (double)ends * end_s <= avail) s = mid;
        else hi = mid - 1;
    }
    long long total = t->global_step + s, cap = (long long)o->epochs * spe;
    if (total > cap) total = cap;
    if (total < t->global_step) total = t->global_step;
    return total;
}

static void apply_plan(md_trainer *t, long long total)
{
    long long spe = t->steps_per_epoch > 0 ? t->steps_per_epoch : 1;
    t->bud_total = total;
    t->sched.total_steps = total > 0 ? total : 1;
    int ne = (int)((total + spe - 1) / spe);
    /* the epoch under way ends what is planned when no further step fits */
    if (ne <= t->epoch && t->global_step > (long long)t->epoch * spe) ne = t->epoch + 1;
    t->n_epochs = ne;
}

static void print_plan(const md_trainer *t, const char *what)
{
    char a[32];
    long long spe = t->steps_per_epoch > 0 ? t->steps_per_epoch : 1;
    md_out("  %-16s %s: %.3g s a step, %.2g s an epoch's end, %.2g s the test; %s steps (%.2f epochs) fit "
           "the %g s, the schedule's length\n",
           "time budget", what, t->bud_step_s, epoch_end_s(t, t->bud_step_s), t->bud_test_s,
           md_fmt_thousands(t->bud_total, a, sizeof a), (double)t->bud_total / (double)spe, t->o->time_budget);
}

long long md_trainer_budget_epoch_steps(const md_trainer *t)
{
    long long spe = t->steps_per_epoch;
    if (!t->bud_planned) return spe;
    long long left = t->bud_total - t->global_step;
    return left < spe ? (left > 0 ? left : 0) : spe;
}

/* Tests: MPSDIAG_TEST_COLD_STEPS=N:MS makes the run's first N steps MS
 * milliseconds longer, as a device's cold start does. */
static void test_cold_step(const md_trainer *t)
{
    static int n = -1;
    static long ms;
    if (n < 0) {
        const char *e = getenv("MPSDIAG_TEST_COLD_STEPS");
        n = 0;
        if (e && sscanf(e, "%d:%ld", &n, &ms) != 2) n = 0;
    }
    if (t->global_step <= n && ms > 0) {
        struct timespec d = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&d, NULL);
    }
}

int md_trainer_budget_after_step(md_trainer *t)
{
    if (t->o->time_budget <= 0) return 0;
    test_cold_step(t);
    double now = md_now();
    long long spe = t->steps_per_epoch > 0 ? t->steps_per_epoch : 1;
    if (!t->bud_said && t->bud_mid_step < 0 && t->global_step - (long long)t->epoch * spe >= spe / 2) {
        t->bud_mid_step = t->global_step;
        t->bud_mid_t = now;
    }
    t->bud_last_t = now;
    if (!t->bud_planned) {
        if (t->bud_warm_s0 < 0) {
            if (t->global_step >= WARM_SKIP) {
                t->bud_warm_s0 = t->global_step;
                t->bud_warm_t0 = now;
            }
        } else {
            long long n = t->global_step - t->bud_warm_s0;
            double el = now - t->bud_warm_t0, want = WARM_S < WARM_SHARE * t->o->time_budget
                                                         ? WARM_S
                                                         : WARM_SHARE * t->o->time_budget;
            if ((n >= WARM_MIN && el >= want) || n >= WARM_MAX) {
                t->bud_step_s = el / (double)n;
                t->bud_warm_steps = n;
                apply_plan(t, plan_total(t, t->bud_step_s, now));
                t->bud_first_total = (double)t->bud_total;
                t->bud_planned = 1;
            }
        }
    }
    if (now + t->bud_step_s >= t->bud_end - t->bud_test_s) { /* the next step would end past it */
        t->bud_cut = t->bud_planned ? t->global_step < t->bud_total : 1;
        t->bud_steps_end = now;
        if (!t->bud_planned || t->bud_cut) t->bud_total = t->global_step;
        return 1;
    }
    if (t->bud_planned && t->global_step >= t->bud_total) {
        t->bud_steps_end = now;
        return 1;
    }
    return 0;
}

/* Tests: MPSDIAG_TEST_SLOW_EPOCH_END=MS makes every epoch's end MS
 * milliseconds longer (a slow disk under the checkpoint, a large validation
 * split); returns the seconds slept. */
static double test_slow_end(void)
{
    const char *e = getenv("MPSDIAG_TEST_SLOW_EPOCH_END");
    long ms = e ? atol(e) : 0;
    if (ms <= 0) return 0.0;
    double t0 = md_now();
    struct timespec d = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&d, NULL);
    return md_now() - t0;
}

void md_trainer_budget_after_epoch(md_trainer *t, long long steps, double steps_s, double end_s)
{
    if (t->o->time_budget <= 0 || t->bud_cut || steps <= 0) return;
    end_s += test_slow_end();
    double now = md_now();
    t->bud_val_s = end_s;
    /* the pace of this epoch's steps (the first epoch's: of its second half) */
    double pace = steps_s / (double)steps;
    long long late = t->global_step - t->bud_mid_step;
    if (!t->bud_said && t->bud_mid_step >= 0 && late >= WARM_MIN && t->bud_last_t > t->bud_mid_t)
        pace = (t->bud_last_t - t->bud_mid_t) / (double)late;
    if (!t->bud_planned) { /* an epoch shorter than the warm-up: its pace */
        t->bud_step_s = pace;
        t->bud_warm_steps = steps;
        apply_plan(t, plan_total(t, t->bud_step_s, now));
        t->bud_first_total = (double)t->bud_total;
        t->bud_planned = 1;
        t->bud_said = 1;
        print_plan(t, "sized after the first epoch");
        return;
    }
    t->bud_step_s = pace;
    long long total = t->global_step < t->bud_total ? plan_total(t, t->bud_step_s, now) : t->bud_total;
    double diff = fabs((double)(total - t->bud_total));
    if (diff > REPLAN_SHARE * (double)t->bud_total && total > t->global_step) {
        apply_plan(t, total);
        t->bud_replans++;
        print_plan(t, t->bud_said ? "sized again at this pace" : "sized after a short warm-up and an epoch");
    } else if (!t->bud_said) {
        print_plan(t, "sized after a short warm-up");
    }
    t->bud_said = 1;
}

int md_trainer_budget_done(const md_trainer *t)
{
    if (t->o->time_budget <= 0) return 0;
    return t->bud_cut || (t->bud_planned && t->global_step >= t->bud_total);
}

int md_trainer_target_check(md_trainer *t, double acc, const char *metric)
{
    if (t->o->target_acc <= 0 || t->tgt_epoch > 0 || !(acc >= t->o->target_acc - 1e-12)) return 0;
    t->tgt_epoch = t->epoch + 1;
    t->tgt_value = acc;
    t->tgt_train_s = t->run_time;
    double now = md_now();
    t->tgt_wall_s = now - (t->o->t_start > 0 ? t->o->t_start : t->bud_t0 > 0 ? t->bud_t0 : now - t->run_time);
    md_out("  Target reached: %s %.2f%% >= %.2f%% after epoch %d (%.1f s training, %.1f s since the start)\n",
           strcmp(metric, "val_acc") == 0 ? "validation accuracy" : strcmp(metric, "test_acc") == 0 ? "test accuracy"
                                                                                                : "training accuracy",
           100 * acc, 100 * t->o->target_acc, t->tgt_epoch, t->tgt_train_s, t->tgt_wall_s);
    return 1;
}

void md_trainer_budget_report(md_trainer *t)
{
    const struct md_train_opts *o = t->o;
    if (o->time_budget > 0) {
        long long spe = t->steps_per_epoch > 0 ? t->steps_per_epoch : 1;
        cJSON *b = cJSON_AddObjectToObject(t->report, "time_budget");
        cJSON_AddNumberToObject(b, "budget_s", o->time_budget);
        cJSON_AddNumberToObject(b, "warmup_steps", (double)t->bud_warm_steps);
        cJSON_AddNumberToObject(b, "step_time_s", t->bud_step_s);
        cJSON_AddNumberToObject(b, "epoch_end_s", t->bud_val_s >= 0 ? t->bud_val_s : epoch_end_s(t, t->bud_step_s));
        cJSON_AddNumberToObject(b, "test_estimate_s", t->bud_test_s);
        cJSON_AddNumberToObject(b, "first_planned_steps", t->bud_first_total);
        cJSON_AddNumberToObject(b, "planned_steps", (double)t->bud_total);
        cJSON_AddNumberToObject(b, "planned_epochs", (double)t->bud_total / (double)spe);
        cJSON_AddNumberToObject(b, "replans", t->bud_replans);
        cJSON_AddNumberToObject(b, "steps_run", (double)t->global_step);
        cJSON_AddBoolToObject(b, "stopped_at_budget_end", t->bud_cut);
        cJSON_AddBoolToObject(b, "schedule_completed", t->global_step >= t->sched.total_steps);
        cJSON_AddNumberToObject(b, "final_lr", md_schedule_lr(&t->sched, t->global_step > 0 ? t->global_step - 1 : 0));
        double t0 = t->bud_t0;
        if (t->bud_steps_end > 0) cJSON_AddNumberToObject(b, "steps_end_s", t->bud_steps_end - t0);
        else cJSON_AddNullToObject(b, "steps_end_s");
    }
    if (o->target_acc > 0) {
        cJSON *g = cJSON_AddObjectToObject(t->report, "target");
        cJSON_AddNumberToObject(g, "accuracy", o->target_acc);
        cJSON_AddStringToObject(g, "metric", t->val_l ? "val_acc" : t->test_l ? "test_acc" : "train_acc");
        cJSON_AddBoolToObject(g, "reached", t->tgt_epoch > 0);
        if (t->tgt_epoch > 0) {
            cJSON_AddNumberToObject(g, "epoch", t->tgt_epoch);
            cJSON_AddNumberToObject(g, "value", t->tgt_value);
            cJSON_AddNumberToObject(g, "train_time_s", t->tgt_train_s);
            cJSON_AddNumberToObject(g, "wall_s", t->tgt_wall_s);
        } else {
            cJSON_AddNullToObject(g, "epoch");
            cJSON_AddNullToObject(g, "value");
            cJSON_AddNullToObject(g, "train_time_s");
            cJSON_AddNullToObject(g, "wall_s");
        }
    }
}
