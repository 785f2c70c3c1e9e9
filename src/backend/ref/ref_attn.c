/* ref_attn.c - reference softmax and scaled-dot-product attention: the plain
 * definitions, double arithmetic (ref_kernels.c states the conventions).
 * Attention backward materialises each (batch, head)'s tq x tk weights and
 * recomputes them from q and k (not from the saved logsumexp), so it is an
 * independent check of the fast backends' blockwise recomputation. */
#include "backend/ref/ref_internal.h"

#include <math.h>

#include "core/mem.h"
#include "core/rng.h"

/* ---- softmax over the last dimension ------------------------------------------------------ */

static md_status softmax_check(const char *op, const struct md_softmax_args *a)
{
    MD_TRY(check_dtype(op, a->dtype));
    if (a->causal && a->tq <= 0) return md_errf(MD_ERR_INTERNAL, "ref %s: causal mask needs tq > 0", op);
    return MD_OK;
}

md_status md_ref_softmax_fwd(md_device *dev, const struct md_softmax_args *a)
{
    (void)dev;
    MD_TRY(softmax_check("softmax_fwd", a));
    double scale = a->scale != 0.0f ? (double)a->scale : 1.0;
    for (int r = 0; r < a->rows; r++) {
        size_t o = (size_t)r * a->n;
        int last = a->causal ? r % a->tq : a->n - 1; /* the last unmasked column */
        if (last > a->n - 1) last = a->n - 1;
        double mx = -(double)INFINITY, se = 0.0;
        for (int j = 0; j <= last; j++) mx = fmax(mx, scale * ld(a->x, a->dtype, o + j));
        for (int j = 0; j <= last; j++) se += exp(scale * ld(a->x, a->dtype, o + j) - mx);
        for (int j = 0; j < a->n; j++)
            st(a->y, a->dtype, o + j, j <= last ? exp(scale * ld(a->x, a->dtype, o + j) - mx) / se : 0.0, a->beta);
    }
    return MD_OK;
}

md_status md_ref_softmax_bwd(md_device *dev, const struct md_softmax_args *a)
{
    (void)dev;
    MD_TRY(softmax_check("softmax_bwd", a));
    double scale = a->scale != 0.0f ? (double)a->scale : 1.0;
    for (int r = 0; r < a->rows; r++) {
        size_t o = (size_t)r * a->n;
        double dot = 0.0;
        for (int j = 0; j < a->n; j++) dot += ld(a->dy, a->dtype, o + j) * ld(a->y, a->dtype, o + j);
        for (int j = 0; j < a->n; j++) {
            double y = ld(a->y, a->dtype, o + j);
            st(a->dx, a->dtype, o + j, scale * y * (ld(a->dy, a->dtype, o + j) - dot), a->beta);
        }
    }
    return MD_OK;
}

/* ---- scaled-dot-product attention ----------------------------------------------------------- */

static md_status attn_check(const char *op, const struct md_attn_args *a)
{
    MD_TRY(check_dtype(op, a->dtype));
    if (a->batch < 0 || a->heads < 0 || a->tq < 0 || a->tk < 1 || a->d < 1)
        return md_errf(MD_ERR_INTERNAL, "ref %s: bad shape batch %d heads %d tq %d tk %d d %d", op, a->batch, a->heads,
                       a->tq, a->tk, a->d);
    if (!(a->dropout_p >= 0.0f && a->dropout_p <= 1.0f))
        return md_errf(MD_ERR_INTERNAL, "ref %s: dropout %g outside [0, 1]", op, (double)a->dropout_p);
    return MD_OK;
}

/* Strides and scale of a call, resolved. */
struct attn_geo {
    long long q[3], k[3], v[3], o[3];
    double scale, keep_scale;
    uint64_t off;
};

static void attn_geo(const struct md_attn_args *a, struct attn_geo *g)
{
    md_attn_strides(a->sq, a->heads, a->tq, a->d, g->q);
    md_attn_strides(a->sk, a->heads, a->tk, a->d, g->k);
    md_attn_strides(a->sv, a->heads, a->tk, a->d, g->v);
    md_attn_strides(a->so, a->heads, a->tq, a->d, g->o);
    g->scale = (double)md_attn_scale(a);
    g->keep_scale = a->dropout_p < 1.0f ? 1.0 / (1.0 - (double)a->dropout_p) : 0.0;
    g->off = md_attn_offset(a);
}

static size_t at(const long long s[3], int b, int h, int t) { return (size_t)(b * s[0] + h * s[1] + t * s[2]); }

/* Weights P (tq, tk) of (b, h) in double and the dropout factors Dm (mask / (1-p));
 * the rows' logsumexp into lse (tq) when non-NULL. */
static void attn_probs(const struct md_attn_args *a, const struct attn_geo *g, int b, int h, double *P, double *Dm,
                       float *lse)
{
    for (int i = 0; i < a->tq; i++) {
        double *p = P + (size_t)i * a->tk, mx = -(double)INFINITY, se = 0.0;
        for (int j = 0; j < a->tk; j++) {
            if (a->causal && j > i) {
                p[j] = -(double)INFINITY;
                continue;
            }
            double s = 0.0;
            for (int e = 0; e < a->d; e++)
                s += ld(a->q, a->dtype, at(g->q, b, h, i) + e) * ld(a->k, a->dtype, at(g->k, b, h, j) + e);
            p[j] = g->scale * s;
            mx = fmax(mx, p[j]);
        }
        for (int j = 0; j < a->tk; j++) se += isinf(p[j]) ? 0.0 : exp(p[j] - mx);
        for (int j = 0; j < a->tk; j++) p[j] = isinf(p[j]) ? 0.0 : exp(p[j] - mx) / se;
        if (lse) lse[i] = (float)(mx + log(se));
        for (int j = 0; j < a->tk; j++) {
            uint64_t ctr = g->off + (((uint64_t)b * a->heads + h) * a->tq + i) * a->tk + j;
            Dm[(size_t)i * a->tk + j] = a->dropout_p > 0.0f && md_rng_uniform(a->seed, ctr) < a->dropout_p ? 0.0 : g->keep_scale;
        }
    }
}

md_status md_ref_attn_fwd(md_device *dev, const struct md_attn_args *a)
{
    (void)dev;
    MD_TRY(attn_check("attn_fwd", a));
    struct attn_geo g;
    attn_geo(a, &g);
    size_t nn = (size_t)a->tq * a->tk;
    double *P = md_malloc(sizeof(double) * 2 * (nn ? nn : 1));
    if (!P) return md_errf(MD_ERR_OOM, "ref attn_fwd: out of memory");
    double *Dm = P + nn;
    for (int b = 0; b < a->batch; b++)
        for (int h = 0; h < a->heads; h++) {
            attn_probs(a, &g, b, h, P, Dm, a->lse ? a->lse + ((size_t)b * a->heads + h) * a->tq : NULL);
            for (int i = 0; i < a->tq; i++)
                for (int e = 0; e < a->d; e++) {
                    double s = 0.0;
                    for (int j = 0; j < a->tk; j++)
                        s += P[(size_t)i * a->tk + j] * Dm[(size_t)i * a->tk + j] * ld(a->v, a->dtype, at(g.v, b, h, j) + e);
                    st(a->o, a->dtype, at(g.o, b, h, i) + e, s, 0.0f);
                }
        }
    md_free(P);
    return MD_OK;
}

md_status md_ref_attn_bwd(md_device *dev, const struct md_attn_args *a)
{
    (void)dev;
    MD_TRY(attn_check("attn_bwd", a));
    struct attn_geo g;
    attn_geo(a, &g);
    size_t nn = (size_t)a->tq * a->tk;
    double *P = md_malloc(sizeof(double) * 3 * (nn ? nn : 1));
    if (!P) return md_errf(MD_ERR_OOM, "ref attn_bwd: out of memory");
    double *Dm = P + nn, *dS = Dm + nn;
    for (int b = 0; b < a->batch; b++)
        for (int h = 0; h < a->heads; h++) {
            attn_probs(a, &g, b, h, P, Dm, NULL);
            /* dP = (dO V^T) * Dm; dS = P * (dP - rowsum(P * dP)) */
            for (int i = 0; i < a->tq; i++) {
                double D = 0.0;
                for (int j = 0; j < a->tk; j++) {
                    double s = 0.0;
                    for (int e = 0; e < a->d; e++)
                        s += ld(a->d_o, a->dtype, at(g.o, b, h, i) + e) * ld(a->v, a->dtype, at(g.v, b, h, j) + e);
                    dS[(size_t)i * a->tk + j] = s * Dm[(size_t)i * a->tk + j];
                    D += P[(size_t)i * a->tk + j] * dS[(size_t)i * a->tk + j];
                }
                for (int j = 0; j < a->tk; j++) dS[(size_t)i * a->tk + j] = P[(size_t)i * a->tk + j] * (dS[(size_t)i * a->tk + j] - D);
            }
            for (int e = 0; e < a->d; e++) {
                for (int i = 0; a->dq && i < a->tq; i++) {
                    double s = 0.0;
                    for (int j = 0; j < a->tk; j++) s += dS[(size_t)i * a->tk + j] * ld(a->k, a->dtype, at(g.k, b, h, j) + e);
                    st(a->dq, a->dtype, at(g.q, b, h, i) + e, g.scale * s, a->beta);
                }
                for (int j = 0; j < a->tk; j++) {
                    double sk = 0.0, sv = 0.0;
                    for (int i = 0; i < a->tq; i++) {
                        sk += dS[(size_t)i * a->tk + j] * ld(a->q, a->dtype, at(g.q, b, h, i) + e);
                        sv += P[(size_t)i * a->tk + j] * Dm[(size_t)i * a->tk + j] * ld(a->d_o, a->dtype, at(g.o, b, h, i) + e);
                    }
                    if (a->dk) st(a->dk, a->dtype, at(g.k, b, h, j) + e, g.scale * sk, a->beta);
                    if (a->dv) st(a->dv, a->dtype, at(g.v, b, h, j) + e, sv, a->beta);
                }
            }
        }
    md_free(P);
    return MD_OK;
}
