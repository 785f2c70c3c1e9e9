/* schedule.c - learning-rate schedules (pure functions, see schedule.h). */
#include "train/schedule.h"

#include <math.h>
#include <string.h>

#define MD_PI 3.14159265358979323846

static const char *const names[] = {"constant", "step", "cosine", "onecycle", "type1"};

md_status md_schedule_parse(const char *name, int *kind)
{
    for (int i = 0; i < 5; i++)
        if (strcmp(name, names[i]) == 0) {
            *kind = i;
            return MD_OK;
        }
    return md_errf(MD_ERR_USAGE, "--lradj: '%s' is not one of constant, step, cosine, onecycle, type1", name);
}

const char *md_schedule_name(int kind) { return kind >= 0 && kind < 5 ? names[kind] : "?"; }

/* PyTorch's _annealing_cos: from `start` at pct 0 to `end` at pct 1. */
static double anneal_cos(double start, double end, double pct)
{
    return end + (start - end) / 2.0 * (cos(MD_PI * pct) + 1.0);
}

double md_schedule_lr(const struct md_schedule *s, long long step)
{
    long long total = s->total_steps > 0 ? s->total_steps : 1;
    if (step >= total) step = total - 1;
    if (step < 0) step = 0;
    double base = s->base_lr;
    if (s->kind == MD_SCHED_ONECYCLE) {
        /* OneCycleLR(max_lr=base, total_steps, pct_start=0.3 or warm-up,
         * anneal_strategy='cos', div_factor=25, final_div_factor=1e4) */
        double initial = base / 25.0, final = initial / 1e4;
        double end1 = s->warmup_steps > 0 ? (double)s->warmup_steps - 1.0 : 0.3 * (double)total - 1.0;
        double end2 = (double)total - 1.0;
        double x = (double)step;
        if (end1 > 0 && x <= end1) return anneal_cos(initial, base, x / end1);
        if (end1 < 0) end1 = 0;
        if (end2 <= end1) return base;
        return anneal_cos(base, final, (x - end1) / (end2 - end1));
    }
    long long w = s->warmup_steps;
    if (w > 0 && step < w) return base * (double)(step + 1) / (double)w;
    switch (s->kind) {
    case MD_SCHED_STEP: {
        long long spe = s->steps_per_epoch > 0 ? s->steps_per_epoch : 1;
        long long epochs = (total + spe - 1) / spe, epoch = step / spe;
        double lr = base;
        if (epochs >= 2 && epoch >= epochs / 2) lr *= 0.1;
        if (epochs >= 4 && epoch >= epochs * 3 / 4) lr *= 0.1;
        return lr;
    }
    case MD_SCHED_TYPE1: {
        long long spe = s->steps_per_epoch > 0 ? s->steps_per_epoch : 1, epoch = step / spe;
        return base * pow(0.5, (double)(epoch < 1000 ? epoch : 1000));
    }
    case MD_SCHED_COSINE: {
        long long span = total - w;
        if (span <= 1) return base;
        return 0.5 * base * (1.0 + cos(MD_PI * (double)(step - w) / (double)span));
    }
    default: return base;
    }
}
