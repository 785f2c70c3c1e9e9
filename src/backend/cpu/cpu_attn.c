/* cpu_attn.c - softmax over the last dimension and fused scaled-dot-product
 * attention on the CPU.
 *
 * Softmax: one row per item of the pool, max-subtracted, sums in double.
 *
 * Attention (fp32 arithmetic; fp16/bf16 are converted to contiguous fp32
 * copies first and the results rounded back once): tasks are (batch, head,
 * block of ATTN_BQ queries), run by the pool. A task computes its block's
 * scores S = scale Q_blk K^T against every key it may see (at most ATTN_BQ x tk
 * floats of per-thread scratch, never a whole tokens x tokens matrix), the
 * exact row softmax (no online rescaling needed: the whole row is there), and
 * O_blk = P V, the products by single-threaded OpenBLAS sgemm reading q, k, v
 * and writing o in place through their token strides.
 * Backward recomputes P from the saved logsumexp in two passes, so that every
 * output element has one writer and no atomics are needed:
 *   A: (batch, head, query block): D_i = dO_i . O_i (kept for pass B),
 *      dS = P * (dP - D), dQ_blk = scale dS K;
 *   B: (batch, head, block of ATTN_BK keys), over the queries that see them:
 *      dV_blk = Pd^T dO, dK_blk = scale dS^T Q.
 * Blocks depend only on the shapes and each element is computed by one task
 * in a fixed order, so results do not depend on the thread count. */
#include <cblas.h>
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "core/mem.h"
#include "core/rng.h"

/* ---- softmax ------------------------------------------------------------------------------- */

struct sm_ctx { const struct md_softmax_args *a; float scale; int bwd; };

static void softmax_range(void *vc, long long b, long long e)
{
    const struct sm_ctx *c = vc;
    const struct md_softmax_args *a = c->a;
    md_dtype t = a->dtype;
    int n = a->n;
    for (long long r = b; r < e; r++) {
        size_t o = (size_t)r * n;
        if (c->bwd) {
            double dot = 0.0;
            for (int j = 0; j < n; j++) dot += (double)md_load_f(a->dy, t, o + j) * (double)md_load_f(a->y, t, o + j);
            float fd = (float)dot;
            for (int j = 0; j < n; j++) {
                float v = c->scale * md_load_f(a->y, t, o + j) * (md_load_f(a->dy, t, o + j) - fd);
                if (a->beta != 0.0f) v += a->beta * md_load_f(a->dx, t, o + j);
                md_store_f(a->dx, t, o + j, v);
            }
            continue;
        }
        int last = a->causal ? (int)(r % a->tq) : n - 1;
        if (last > n - 1) last = n - 1;
        float mx = -INFINITY;
        for (int j = 0; j <= last; j++) mx = fmaxf(mx, c->scale * md_load_f(a->x, t, o + j));
        double se = 0.0;
        for (int j = 0; j <= last; j++) se += (double)expf(c->scale * md_load_f(a->x, t, o + j) - mx);
        float inv = (float)(1.0 / se);
        for (int j = 0; j < n; j++) {
            float v = j <= last ? expf(c->scale * md_load_f(a->x, t, o + j) - mx) * inv : 0.0f;
            if (a->beta != 0.0f) v += a->beta * md_load_f(a->y, t, o + j);
            md_store_f(a->y, t, o + j, v);
        }
    }
}

static md_status softmax_run(const char *op, const struct md_softmax_args *a, int bwd)
{
    MD_TRY(md_cpu_dtype_check(op, a->dtype));
    if (a->causal && a->tq <= 0) return md_errf(MD_ERR_INTERNAL, "cpu %s: causal mask needs tq > 0", op);
    struct sm_ctx c = {a, a->scale != 0.0f ? a->scale : 1.0f, bwd};
    long long per = a->n > 0 ? a->n : 1;
    md_parallel_for(a->rows, CPU_GRAIN / per + 1, softmax_range, &c);
    return MD_OK;
}

md_status md_cpu_softmax_fwd(md_device *dev, const struct md_softmax_args *a)
{
    (void)dev;
    return softmax_run("softmax_fwd", a, 0);
}

md_status md_cpu_softmax_bwd(md_device *dev, const struct md_softmax_args *a)
{
    (void)dev;
    return softmax_run("softmax_bwd", a, 1);
}

/* ---- attention ------------------------------------------------------------------------------ */

#define ATTN_BQ 64 /* queries per task */
#define ATTN_BK 64 /* keys per backward task */

/* fp32 views of the tensors (the caller's own for fp32, converted copies for halves). */
struct attn_ctx {
    const struct md_attn_args *a;
    const float *q, *k, *v, *o, *dO;
    float *out_o, *dq, *dk, *dv;
    long long sq[3], sk[3], sv[3], so[3];
    float beta;          /* onto dq, dk, dv (0 for the half path's temporaries) */
    float scale, keep_scale;
    uint64_t off;
    float *lse, *D;      /* (batch, heads, tq) */
    float *scratch;      /* per thread: scr_floats */
    size_t scr_floats;
    int nqb, nkb;
};

static float keep_factor(const struct attn_ctx *c, int b, int h, int i, int j)
{
    const struct md_attn_args *a = c->a;
    if (a->dropout_p <= 0.0f) return 1.0f;
    uint64_t ctr = c->off + (((uint64_t)b * a->heads + h) * a->tq + i) * a->tk + j;
    return md_rng_uniform(a->seed, ctr) < a->dropout_p ? 0.0f : c->keep_scale;
}

static float *thread_scratch(const struct attn_ctx *c) { return c->scratch + (size_t)md_parallel_thread_id() * c->scr_floats; }

#define AT(base, s, b, h, t) ((base) + (b) * (s)[0] + (h) * (s)[1] + (long long)(t) * (s)[2])

static void attn_fwd_range(void *vc, long long tb, long long te)
{
    const struct attn_ctx *c = vc;
    const struct md_attn_args *a = c->a;
    float *S = thread_scratch(c);
    for (long long task = tb; task < te; task++) {
        int qb = (int)(task % c->nqb), bh = (int)(task / c->nqb), b = bh / a->heads, h = bh % a->heads;
        int i0 = qb * ATTN_BQ, rows = a->tq - i0 < ATTN_BQ ? a->tq - i0 : ATTN_BQ;
        int kn = a->causal ? (i0 + rows < a->tk ? i0 + rows : a->tk) : a->tk; /* keys any row of the block sees */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, kn, a->d, c->scale, AT(c->q, c->sq, b, h, i0),
                    (int)c->sq[2], AT(c->k, c->sk, b, h, 0), (int)c->sk[2], 0.0f, S, kn);
        for (int r = 0; r < rows; r++) {
            int i = i0 + r, last = a->causal ? (i < kn - 1 ? i : kn - 1) : kn - 1;
            float *s = S + (size_t)r * kn, mx = -INFINITY;
            for (int j = 0; j <= last; j++) mx = fmaxf(mx, s[j]);
            double se = 0.0;
            for (int j = 0; j <= last; j++) {
                s[j] = expf(s[j] - mx);
                se += (double)s[j];
            }
            float inv = (float)(1.0 / se);
            for (int j = 0; j <= last; j++) s[j] *= inv * keep_factor(c, b, h, i, j);
            for (int j = last + 1; j < kn; j++) s[j] = 0.0f;
            if (c->lse) c->lse[((size_t)b * a->heads + h) * a->tq + i] = mx + (float)log(se);
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, a->d, kn, 1.0f, S, kn, AT(c->v, c->sv, b, h, 0),
                    (int)c->sv[2], 0.0f, AT(c->out_o, c->so, b, h, i0), (int)c->so[2]);
    }
}

/* P of rows [i0, i0+rows) x keys [j0, j0+cols) from the saved lse into P
 * (rows x cols); masked entries 0. */
static void probs_block(const struct attn_ctx *c, int b, int h, int i0, int rows, int j0, int cols, float *P)
{
    const struct md_attn_args *a = c->a;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, a->d, c->scale, AT(c->q, c->sq, b, h, i0),
                (int)c->sq[2], AT(c->k, c->sk, b, h, j0), (int)c->sk[2], 0.0f, P, cols);
    const float *lse = c->lse + ((size_t)b * a->heads + h) * a->tq;
    for (int r = 0; r < rows; r++) {
        float *p = P + (size_t)r * cols, l = lse[i0 + r];
        for (int j = 0; j < cols; j++) p[j] = a->causal && j0 + j > i0 + r ? 0.0f : expf(p[j] - l);
    }
}

/* dP (rows x cols) = dO_blk V_blk^T, then dS = P * (dP * keep - D) in place of dP. */
static void dscores_block(const struct attn_ctx *c, int b, int h, int i0, int rows, int j0, int cols, const float *P,
                          float *dS)
{
    const struct md_attn_args *a = c->a;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, rows, cols, a->d, 1.0f, AT(c->dO, c->so, b, h, i0),
                (int)c->so[2], AT(c->v, c->sv, b, h, j0), (int)c->sv[2], 0.0f, dS, cols);
    const float *D = c->D + ((size_t)b * a->heads + h) * a->tq;
    for (int r = 0; r < rows; r++)
        for (int j = 0; j < cols; j++) {
            size_t x = (size_t)r * cols + j;
            dS[x] = P[x] * (dS[x] * keep_factor(c, b, h, i0 + r, j0 + j) - D[i0 + r]);
        }
}

/* Pass A: D and dQ per query block. */
static void attn_bwd_q_range(void *vc, long long tb, long long te)
{
    const struct attn_ctx *c = vc;
    const struct md_attn_args *a = c->a;
    float *P = thread_scratch(c);
    for (long long task = tb; task < te; task++) {
        int qb = (int)(task % c->nqb), bh = (int)(task / c->nqb), b = bh / a->heads, h = bh % a->heads;
        int i0 = qb * ATTN_BQ, rows = a->tq - i0 < ATTN_BQ ? a->tq - i0 : ATTN_BQ;
        int kn = a->causal ? (i0 + rows < a->tk ? i0 + rows : a->tk) : a->tk;
        float *D = c->D + ((size_t)b * a->heads + h) * a->tq;
        for (int r = 0; r < rows; r++) {
            const float *o = AT(c->o, c->so, b, h, i0 + r), *g = AT(c->dO, c->so, b, h, i0 + r);
            double s = 0.0;
            for (int e = 0; e < a->d; e++) s += (double)o[e] * (double)g[e];
            D[i0 + r] = (float)s;
        }
        if (!c->dq) continue;
        float *dS = P + (size_t)ATTN_BQ * a->tk;
        probs_block(c, b, h, i0, rows, 0, kn, P);
        dscores_block(c, b, h, i0, rows, 0, kn, P, dS);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, rows, a->d, kn, c->scale, dS, kn,
                    AT(c->k, c->sk, b, h, 0), (int)c->sk[2], c->beta, AT(c->dq, c->sq, b, h, i0), (int)c->sq[2]);
    }
}

/* Pass B: dK and dV per key block, over the queries that see it. */
static void attn_bwd_kv_range(void *vc, long long tb, long long te)
{
    const struct attn_ctx *c = vc;
    const struct md_attn_args *a = c->a;
    float *P = thread_scratch(c);
    for (long long task = tb; task < te; task++) {
        int kb = (int)(task % c->nkb), bh = (int)(task / c->nkb), b = bh / a->heads, h = bh % a->heads;
        int j0 = kb * ATTN_BK, cols = a->tk - j0 < ATTN_BK ? a->tk - j0 : ATTN_BK;
        int i0 = a->causal ? (j0 < a->tq ? j0 : a->tq) : 0, rows = a->tq - i0;
        float *dS = P + (size_t)a->tq * ATTN_BK;
        if (rows > 0) {
            probs_block(c, b, h, i0, rows, j0, cols, P);
            if (c->dk) dscores_block(c, b, h, i0, rows, j0, cols, P, dS);
            if (a->dropout_p > 0.0f) /* Pd = P * keep, after dS used P */
                for (int r = 0; r < rows; r++)
                    for (int j = 0; j < cols; j++) P[(size_t)r * cols + j] *= keep_factor(c, b, h, i0 + r, j0 + j);
        }
        if (rows == 0) { /* no query sees these keys: zero gradients (+ beta * old) */
            for (int j = 0; j < cols; j++)
                for (int e = 0; e < a->d; e++) {
                    float *pv = c->dv ? AT(c->dv, c->sv, b, h, j0 + j) + e : NULL;
                    float *pk = c->dk ? AT(c->dk, c->sk, b, h, j0 + j) + e : NULL;
                    if (pv) *pv = c->beta != 0.0f ? c->beta * *pv : 0.0f;
                    if (pk) *pk = c->beta != 0.0f ? c->beta * *pk : 0.0f;
                }
            continue;
        }
        if (c->dv)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, a->d, rows, 1.0f, P, cols,
                        AT(c->dO, c->so, b, h, i0), (int)c->so[2], c->beta, AT(c->dv, c->sv, b, h, j0), (int)c->sv[2]);
        if (c->dk)
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, cols, a->d, rows, c->scale, dS, cols,
                        AT(c->q, c->sq, b, h, i0), (int)c->sq[2], c->beta, AT(c->dk, c->sk, b, h, j0), (int)c->sk[2]);
    }
}

static md_status attn_check(const char *op, const struct md_attn_args *a)
{
    MD_TRY(md_cpu_dtype_check(op, a->dtype));
    if (a->batch < 0 || a->heads < 0 || a->tq < 0 || a->tk < 1 || a->d < 1)
        return md_errf(MD_ERR_INTERNAL, "cpu %s: bad shape batch %d heads %d tq %d tk %d d %d", op, a->batch, a->heads,
                       a->tq, a->tk, a->d);
    if (!(a->dropout_p >= 0.0f && a->dropout_p <= 1.0f))
        return md_errf(MD_ERR_INTERNAL, "cpu %s: dropout %g outside [0, 1]", op, (double)a->dropout_p);
    return MD_OK;
}

/* Contiguous fp32 (B, H, T, D) copy of a half tensor with strides s. */
static float *half_to_f32(const void *src, md_dtype t, const long long s[3], int B, int H, int T, int D)
{
    float *o = md_malloc(sizeof(float) * ((size_t)B * H * T * D + 1));
    if (!o) return NULL;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++)
                for (int e = 0; e < D; e++)
                    o[(((size_t)b * H + h) * T + i) * D + e] =
                        md_load_f(src, t, (size_t)(b * s[0] + h * s[1] + (long long)i * s[2] + e));
    return o;
}

/* dst (strides s, half) = src (contiguous fp32) + beta * dst. */
static void f32_to_half(const float *src, void *dst, md_dtype t, const long long s[3], int B, int H, int T, int D,
                        float beta)
{
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++)
                for (int e = 0; e < D; e++) {
                    size_t o = (size_t)(b * s[0] + h * s[1] + (long long)i * s[2] + e);
                    float v = src[(((size_t)b * H + h) * T + i) * D + e];
                    if (beta != 0.0f) v += beta * md_load_f(dst, t, o);
                    md_store_f(dst, t, o, v);
                }
}

static md_status attn_run(const struct md_attn_args *a, int bwd)
{
    const char *op = bwd ? "attn_bwd" : "attn_fwd";
    MD_TRY(attn_check(op, a));
    if (bwd && !a->lse) return md_errf(MD_ERR_INTERNAL, "cpu attn_bwd: needs the forward's logsumexp (lse)");
    if (!a->batch || !a->heads || !a->tq) return MD_OK;
    int B = a->batch, H = a->heads, tq = a->tq, tk = a->tk, D = a->d;
    struct attn_ctx c = {.a = a, .beta = a->beta, .scale = md_attn_scale(a), .lse = a->lse};
    c.keep_scale = a->dropout_p < 1.0f ? (float)(1.0 / (1.0 - (double)a->dropout_p)) : 0.0f;
    c.off = md_attn_offset(a);
    md_attn_strides(a->sq, H, tq, D, c.sq);
    md_attn_strides(a->sk, H, tk, D, c.sk);
    md_attn_strides(a->sv, H, tk, D, c.sv);
    md_attn_strides(a->so, H, tq, D, c.so);
    c.nqb = (tq + ATTN_BQ - 1) / ATTN_BQ;
    c.nkb = (tk + ATTN_BK - 1) / ATTN_BK;
    /* per thread: fwd S (BQ x tk); bwd pass A P + dS (2 BQ x tk), pass B P + dS (2 tq x BK) */
    size_t fa = (size_t)ATTN_BQ * tk * 2, fb = (size_t)tq * ATTN_BK * 2;
    c.scr_floats = bwd ? (fa > fb ? fa : fb) : (size_t)ATTN_BQ * tk;
    int threads = md_threadpool_size();
    size_t nrows = (size_t)B * H * tq;
    void *tmp[9] = {0};
    md_status st = MD_OK;
    c.scratch = md_malloc(sizeof(float) * (c.scr_floats * (size_t)(threads > 0 ? threads : 1) + (bwd ? nrows : 0) + 1));
    if (!c.scratch) return md_errf(MD_ERR_OOM, "cpu %s: cannot allocate the attention scratch", op);
    if (bwd) c.D = c.scratch + c.scr_floats * (size_t)(threads > 0 ? threads : 1);
    if (a->dtype == MD_F32) {
        c.q = a->q, c.k = a->k, c.v = a->v, c.o = a->o, c.dO = a->d_o;
        c.out_o = a->o, c.dq = a->dq, c.dk = a->dk, c.dv = a->dv;
    } else {
        /* storage types: contiguous fp32 copies in, results rounded back once */
        long long cq[3], ck[3], z[3] = {0, 0, 0};
        md_attn_strides(z, H, tq, D, cq);
        md_attn_strides(z, H, tk, D, ck);
        size_t nq = (size_t)B * H * tq * D + 1, nk = (size_t)B * H * tk * D + 1;
        c.q = tmp[0] = half_to_f32(a->q, a->dtype, c.sq, B, H, tq, D);
        c.k = tmp[1] = half_to_f32(a->k, a->dtype, c.sk, B, H, tk, D);
        c.v = tmp[2] = half_to_f32(a->v, a->dtype, c.sv, B, H, tk, D);
        if (bwd) {
            c.o = tmp[3] = half_to_f32(a->o, a->dtype, c.so, B, H, tq, D);
            c.dO = tmp[4] = half_to_f32(a->d_o, a->dtype, c.so, B, H, tq, D);
            if (a->dq) c.dq = tmp[5] = md_malloc(sizeof(float) * nq);
            if (a->dk) c.dk = tmp[6] = md_malloc(sizeof(float) * nk);
            if (a->dv) c.dv = tmp[7] = md_malloc(sizeof(float) * nk);
        } else {
            c.out_o = tmp[8] = md_malloc(sizeof(float) * nq);
        }
        int need[9] = {1, 1, 1, bwd, bwd, bwd && a->dq, bwd && a->dk, bwd && a->dv, !bwd};
        for (int i = 0; i < 9; i++)
            if (need[i] && !tmp[i]) {
                st = md_errf(MD_ERR_OOM, "cpu %s: cannot allocate fp32 copies", op);
                goto done;
            }
        memcpy(c.sq, cq, sizeof cq), memcpy(c.so, cq, sizeof cq);
        memcpy(c.sk, ck, sizeof ck), memcpy(c.sv, ck, sizeof ck);
        c.beta = 0.0f;
    }
    if (!bwd) {
        md_parallel_for((long long)B * H * c.nqb, 1, attn_fwd_range, &c);
    } else {
        md_parallel_for((long long)B * H * c.nqb, 1, attn_bwd_q_range, &c);
        if (c.dk || c.dv) md_parallel_for((long long)B * H * c.nkb, 1, attn_bwd_kv_range, &c);
    }
    if (a->dtype != MD_F32) {
        long long s[3];
        if (!bwd) {
            md_attn_strides(a->so, H, tq, D, s);
            f32_to_half(c.out_o, a->o, a->dtype, s, B, H, tq, D, 0.0f);
        }
        if (bwd && a->dq) md_attn_strides(a->sq, H, tq, D, s), f32_to_half(c.dq, a->dq, a->dtype, s, B, H, tq, D, a->beta);
        if (bwd && a->dk) md_attn_strides(a->sk, H, tk, D, s), f32_to_half(c.dk, a->dk, a->dtype, s, B, H, tk, D, a->beta);
        if (bwd && a->dv) md_attn_strides(a->sv, H, tk, D, s), f32_to_half(c.dv, a->dv, a->dtype, s, B, H, tk, D, a->beta);
    }
done:
    for (int i = 0; i < 9; i++) md_free(tmp[i]);
    md_free(c.scratch);
    return st;
}

md_status md_cpu_attn_fwd(md_device *dev, const struct md_attn_args *a)
{
    (void)dev;
    return attn_run(a, 0);
}

md_status md_cpu_attn_bwd(md_device *dev, const struct md_attn_args *a)
{
    (void)dev;
    return attn_run(a, 1);
}
