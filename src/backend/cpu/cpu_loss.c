/* cpu_loss.c - softmax cross-entropy with label smoothing and the regression losses, fused: per-row
 * partials combined in row order (independent of the thread count). */
#include <math.h>

#include "backend/cpu/cpu_internal.h"
#include "core/mem.h"

/* ---- softmax cross-entropy: per-row partials, combined in row order ---------------------------------------- */

struct xent_ctx { const struct md_xent_args *a; double *loss; int *hit; int bad_row; };

static void xent_range(void *vc, long long b, long long e)
{
    struct xent_ctx *c = vc;
    const struct md_xent_args *a = c->a;
    int C = a->classes;
    double sm = (double)a->smoothing;
    for (long long ni = b; ni < e; ni++) {
        int lab = a->labels[ni];
        c->loss[ni] = 0.0;
        c->hit[ni] = 0;
        if (lab < 0 || lab >= C) continue;
        size_t row = (size_t)ni * C;
        float mx = md_load_f(a->logits, a->dtype, row);
        int arg = 0;
        for (int j = 1; j < C; j++) {
            float v = md_load_f(a->logits, a->dtype, row + j);
            if (v > mx) mx = v, arg = j;
        }
        c->hit[ni] = arg == lab;
        double se = 0.0, sz = 0.0;
        for (int j = 0; j < C; j++) {
            double z = (double)md_load_f(a->logits, a->dtype, row + j) - (double)mx;
            se += exp(z);
            sz += z;
        }
        double lse = log(se); /* relative to mx */
        double zl = (double)md_load_f(a->logits, a->dtype, row + lab) - (double)mx;
        /* -sum_j t_j (z_j - lse) with t = (1-sm) onehot + sm/C */
        c->loss[ni] = -((1.0 - sm) * (zl - lse) + sm / C * (sz - C * lse));
        if (a->dlogits) {
            float gsc = md_xent_grad_scale(a);
            for (int j = 0; j < C; j++) {
                double z = (double)md_load_f(a->logits, a->dtype, row + j) - (double)mx;
                double t = (j == lab ? 1.0 - sm : 0.0) + sm / C;
                md_store_f(a->dlogits, a->dtype, row + j, gsc * (float)(exp(z - lse) - t));
            }
        }
    }
}

md_status md_cpu_xent(md_device *dev, const struct md_xent_args *a)
{
    (void)dev;
    MD_TRY(md_cpu_dtype_check("xent", a->dtype));
    for (int i = 0; i < a->n; i++)
        if (a->labels[i] < 0 || a->labels[i] >= a->classes)
            return md_errf(MD_ERR_DATA, "xent: label %d of sample %d is outside [0, %d)", a->labels[i], i, a->classes);
    double *loss = md_malloc(sizeof(double) * (size_t)(a->n > 0 ? a->n : 1));
    int *hit = md_malloc(sizeof(int) * (size_t)(a->n > 0 ? a->n : 1));
    if (!loss || !hit) {
        md_free(loss);
        md_free(hit);
        return MD_ERR_OOM;
    }
    struct xent_ctx c = {a, loss, hit, -1};
    long long per = a->classes > 0 ? a->classes : 1;
    md_parallel_for(a->n, CPU_GRAIN / per + 1, xent_range, &c);
    double total = 0.0;
    int correct = 0;
    for (int i = 0; i < a->n; i++) total += loss[i], correct += hit[i];
    if (a->loss_sum) *a->loss_sum = (float)((double)*a->loss_sum + total);
    if (a->correct) *a->correct += correct;
    md_free(loss);
    md_free(hit);
    return MD_OK;
}

/* ---- regression losses: per-sample partials {loss, |e|, e^2, hits}, combined in sample order ------------------- */

struct regress_ctx { const struct md_regress_args *a; double *part; };

static void regress_range(void *vc, long long b, long long e)
{
    struct regress_ctx *c = vc;
    const struct md_regress_args *a = c->a;
    const int H = a->horizon, C = a->channels;
    const double lam = (double)a->lambda, d = (double)a->delta;
    for (long long ni = b; ni < e; ni++) {
        double loss = 0.0, sae = 0.0, sse = 0.0, hits = 0.0;
        const float *last = a->last ? a->last + (size_t)ni * (size_t)a->last_ld : NULL;
        for (int t = 0; t < H; t++)
            for (int ch = 0; ch < C; ch++) {
                size_t i = ((size_t)ni * H + t) * C + ch;
                double p = (double)md_load_f(a->pred, a->dtype, i), y = (double)a->target[i];
                double er = p - y, ae = fabs(er), l, g, dp = 0.0, dt = 0.0;
                if (last) {
                    dp = p - (double)last[ch];
                    dt = y - (double)last[ch];
                    hits += (dp > 0) - (dp < 0) == (dt > 0) - (dt < 0);
                }
                switch (a->kind) {
                case MD_REGRESS_MAE: l = ae, g = (er > 0) - (er < 0); break;
                case MD_REGRESS_HUBER:
                    if (ae <= d) l = 0.5 * er * er, g = er;
                    else l = d * (ae - 0.5 * d), g = er > 0 ? d : -d;
                    break;
                case MD_REGRESS_FINANCIAL:
                    l = er * er, g = 2.0 * er;
                    if ((dp > 0 && dt < 0) || (dp < 0 && dt > 0)) l -= lam * dp * dt, g -= lam * dt;
                    break;
                default: l = er * er, g = 2.0 * er; break;
                }
                loss += l, sae += ae, sse += er * er;
                if (a->dpred) md_store_f(a->dpred, a->dtype, i, (float)((double)a->grad_scale * g));
            }
        double *o = c->part + 4 * ni;
        o[0] = loss, o[1] = sae, o[2] = sse, o[3] = hits;
    }
}

md_status md_cpu_regress(md_device *dev, const struct md_regress_args *a)
{
    (void)dev;
    MD_TRY(md_cpu_dtype_check("regress", a->dtype));
    MD_TRY(md_regress_args_check("cpu", a));
    double *part = md_malloc(sizeof(double) * 4 * (size_t)(a->n > 0 ? a->n : 1));
    if (!part) return MD_ERR_OOM;
    struct regress_ctx c = {a, part};
    long long per = (long long)a->horizon * a->channels;
    md_parallel_for(a->n, CPU_GRAIN / (per > 0 ? per : 1) + 1, regress_range, &c);
    double s[4] = {0, 0, 0, 0};
    for (int i = 0; i < a->n; i++)
        for (int k = 0; k < 4; k++) s[k] += part[4 * i + k];
    if (a->loss_sum) *a->loss_sum = (float)((double)*a->loss_sum + s[0]);
    if (a->metrics) {
        a->metrics[0] = (float)((double)a->metrics[0] + s[1]);
        a->metrics[1] = (float)((double)a->metrics[1] + s[2]);
        if (a->last) a->metrics[2] = (float)((double)a->metrics[2] + s[3]);
    }
    md_free(part);
    return MD_OK;
}
