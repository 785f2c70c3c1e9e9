/* ckpt_meta.c - checking a checkpoint's metadata (see ckpt_meta.h). */
#define _POSIX_C_SOURCE 200809L
#include "train/ckpt_meta.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"

/* --epochs at most (app/options.c) */
#define MAX_EPOCHS 100000LL
/* step counters: far below anything that overflows, far above any run */
#define MAX_COUNT (1LL << 53)

static md_status get_ll(const md_st_file *f, const char *key, long long lo, long long hi, long long *out)
{
    const char *s = md_st_meta(f, key);
    if (!s) return md_errf(MD_ERR_DATA, "%s: checkpoint metadata lacks '%s'", md_st_path(f), key);
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (!*s || *end || errno)
        return md_errf(MD_ERR_DATA, "%s: metadata '%s' = '%s': not an integer", md_st_path(f), key, s);
    if (v < lo || v > hi)
        return md_errf(MD_ERR_DATA, "%s: metadata '%s' = '%s': out of range (%lld to %lld)", md_st_path(f), key, s, lo,
                       hi);
    *out = v;
    return MD_OK;
}

static md_status get_num(const md_st_file *f, const char *key, double lo, double hi, double *out)
{
    const char *s = md_st_meta(f, key);
    if (!s) return md_errf(MD_ERR_DATA, "%s: checkpoint metadata lacks '%s'", md_st_path(f), key);
    char *end;
    double v = strtod(s, &end);
    if (!*s || *end) return md_errf(MD_ERR_DATA, "%s: metadata '%s' = '%s': not a number", md_st_path(f), key, s);
    if (!isfinite(v)) return md_errf(MD_ERR_DATA, "%s: metadata '%s' = '%s': not finite", md_st_path(f), key, s);
    if (v < lo || v > hi)
        return md_errf(MD_ERR_DATA, "%s: metadata '%s' = '%s': out of range (%g to %g)", md_st_path(f), key, s, lo, hi);
    *out = v;
    return MD_OK;
}

/* Parses metadata `key` as a JSON object (duplicate keys refused). */
static md_status get_json(const md_st_file *f, const char *key, cJSON **out)
{
    *out = NULL;
    const char *s = md_st_meta(f, key);
    if (!s) return MD_OK;
    char name[4200];
    snprintf(name, sizeof name, "%s: metadata '%s'", md_st_path(f), key);
    MD_TRY(md_json_parse(s, name, out));
    if (!cJSON_IsObject(*out)) return md_errf(MD_ERR_DATA, "%s: not a JSON object", name);
    return MD_OK;
}

static md_status check_curves(const md_st_file *f, const struct md_ckpt_meta *m, const char *const *keys)
{
    const char *p = md_st_path(f);
    int len = -1;
    for (const cJSON *c = m->curves->child; c; c = c->next) {
        int known = !keys;
        for (const char *const *k = keys; k && *k && !known; k++) known = strcmp(*k, c->string) == 0;
        if (!known) return md_errf(MD_ERR_DATA, "%s: metadata 'curves': unknown key '%s'", p, c->string);
        if (!cJSON_IsArray(c))
            return md_errf(MD_ERR_DATA, "%s: metadata 'curves'.%s: not an array", p, c->string);
        int n = 0;
        for (const cJSON *v = c->child; v; v = v->next, n++)
            if (!cJSON_IsNumber(v) && !cJSON_IsNull(v)) /* null: a value that was not finite */
                return md_errf(MD_ERR_DATA, "%s: metadata 'curves'.%s[%d]: not a number", p, c->string, n);
        if (len >= 0 && n != len)
            return md_errf(MD_ERR_DATA, "%s: metadata 'curves'.%s: %d entries where the others have %d", p, c->string,
                           n, len);
        len = n;
        if (n > m->epoch)
            return md_errf(MD_ERR_DATA, "%s: metadata 'curves'.%s: %d entries for %lld epochs done", p, c->string, n,
                           m->epoch);
    }
    return MD_OK;
}

md_status md_ckpt_meta_read(const md_st_file *f, const struct md_ckpt_limits *lim, struct md_ckpt_meta *out)
{
    memset(out, 0, sizeof *out);
    out->batch_size = -1;
    const char *p = md_st_path(f);
    md_status st;
    /* the run's settings first: they bound the position */
    MD_TRY(get_json(f, "config", &out->config));
    long long max_epoch = MAX_EPOCHS;
    if (out->config) {
        const cJSON *e = cJSON_GetObjectItemCaseSensitive(out->config, "epochs");
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(out->config, "batch_size");
        if (e && (!cJSON_IsNumber(e) || e->valuedouble != floor(e->valuedouble) || e->valuedouble < 0 ||
                  e->valuedouble > (double)MAX_EPOCHS))
            return md_errf(MD_ERR_DATA, "%s: metadata 'config'.epochs: not an integer from 0 to %lld", p, MAX_EPOCHS);
        if (e) max_epoch = (long long)e->valuedouble;
        if (b && (!cJSON_IsNumber(b) || b->valuedouble != floor(b->valuedouble) || b->valuedouble < 1 ||
                  b->valuedouble > (double)(1 << 20)))
            return md_errf(MD_ERR_DATA, "%s: metadata 'config'.batch_size: not an integer from 1 to %d", p, 1 << 20);
        if (b) out->batch_size = (int)b->valuedouble;
    }
    /* the batch size fixes what "batch N of epoch E" means */
    if (out->batch_size < 0)
        return md_errf(MD_ERR_DATA, "%s: metadata 'config' lacks batch_size (not a checkpoint to resume from)", p);
    if (out->batch_size != lim->batch && lim->ranks > 1)
    {
        char fix[64] = "";
        if (out->batch_size % lim->ranks == 0)
            snprintf(fix, sizeof fix, "; pass --batch-size %d", out->batch_size / lim->ranks);
        return md_errf(MD_ERR_DATA, "%s: checkpoint was trained with a global batch of %d, this run's is %d (%d ranks "
                       "x --batch-size %d)%s", p, out->batch_size, lim->batch, lim->ranks, lim->batch / lim->ranks, fix);
    }
    if (out->batch_size != lim->batch)
        return md_errf(MD_ERR_DATA, "%s: checkpoint was trained with batch size %d, this run uses %d (pass "
                       "--batch-size %d)", p, out->batch_size, lim->batch, out->batch_size);
    if ((st = get_ll(f, "epoch", 0, max_epoch, &out->epoch)) != MD_OK) return st;
    if ((st = get_ll(f, "batch_in_epoch", 0, MAX_COUNT, &out->batch_in_epoch)) != MD_OK) return st;
    if (out->batch_in_epoch > lim->steps_per_epoch)
        return md_errf(MD_ERR_DATA, "%s: metadata 'batch_in_epoch' = '%lld': past the end of this run's epochs of %lld "
                       "batches (were --steps or --max-samples changed?)", p, out->batch_in_epoch,
                       lim->steps_per_epoch);
    long long batch = lim->batch;
    if (out->batch_in_epoch > 0 && out->epoch >= max_epoch)
        return md_errf(MD_ERR_DATA, "%s: metadata 'batch_in_epoch' = '%lld': the run had finished all %lld epochs", p,
                       out->batch_in_epoch, max_epoch);
    if ((st = get_ll(f, "global_step", 0, MAX_COUNT, &out->global_step)) != MD_OK ||
        (st = get_ll(f, "optimizer_step", 0, MAX_COUNT, &out->optimizer_step)) != MD_OK ||
        (st = get_ll(f, "loss_scale_clean_steps", 0, MAX_COUNT, &out->loss_scale_clean_steps)) != MD_OK ||
        (st = get_ll(f, "skipped_steps", 0, out->global_step, &out->skipped_steps)) != MD_OK ||
        (st = get_ll(f, "epoch_seen", 0, out->batch_in_epoch * (long long)batch, &out->epoch_seen)) != MD_OK ||
        (st = get_ll(f, "epoch_correct", 0, out->epoch_seen, &out->epoch_correct)) != MD_OK ||
        (st = get_ll(f, "best_epoch", -1, MAX_EPOCHS, &out->best_epoch)) != MD_OK ||
        (st = get_num(f, "loss_scale", FLT_MIN, FLT_MAX, &out->loss_scale)) != MD_OK ||
        (st = get_num(f, "epoch_loss_sum", 0, DBL_MAX, &out->epoch_loss_sum)) != MD_OK ||
        (st = get_num(f, "epoch_time_s", 0, DBL_MAX, &out->epoch_time_s)) != MD_OK ||
        (st = get_num(f, "run_time_s", 0, DBL_MAX, &out->run_time_s)) != MD_OK ||
        (st = get_num(f, "best_val_acc", -1, 1, &out->best_val_acc)) != MD_OK)
        return st;
    if (out->best_val_acc < 0 && out->best_val_acc != -1)
        return md_errf(MD_ERR_DATA, "%s: metadata 'best_val_acc' = '%s': out of range (-1 for none, or 0 to 1)", p,
                       md_st_meta(f, "best_val_acc"));
    if (out->best_epoch == 0)
        return md_errf(MD_ERR_DATA, "%s: metadata 'best_epoch' = '0': out of range (-1 for none, or from 1)", p);
    MD_TRY(get_json(f, "curves", &out->curves));
    if (out->curves) MD_TRY(check_curves(f, out, lim->curve_keys));
    return MD_OK;
}

void md_ckpt_meta_free(struct md_ckpt_meta *m)
{
    if (!m) return;
    cJSON_Delete(m->config);
    cJSON_Delete(m->curves);
    m->config = m->curves = NULL;
}

md_status md_ckpt_meta_best(const char *path, double *acc, long long *epoch)
{
    md_st_file *f = NULL;
    MD_TRY(md_st_open_header(path, &f));
    const char *fmt = md_st_meta(f, "format");
    md_status st = MD_OK;
    if (!fmt || strncmp(fmt, "mpsdiag-checkpoint-", 19) != 0)
        st = md_errf(MD_ERR_DATA, "%s: not an mpsdiag checkpoint (metadata format is '%s')", path,
                     fmt ? fmt : "missing");
    if (st == MD_OK) st = get_num(f, "best_val_acc", -1, 1, acc);
    if (st == MD_OK) st = get_ll(f, "best_epoch", -1, MAX_EPOCHS, epoch);
    md_st_close(f);
    return st;
}
