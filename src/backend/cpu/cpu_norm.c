/* cpu_norm.c - batch normalisation forward and backward on the CPU.
 *
 * fp32 (the fast paths): partial sums over fixed pieces (NCHW: one image's
 * plane of a channel; NHWC: 64-row chunks, channels as the vectorised inner
 * loop) in float lanes, double across pieces, combined in piece order so
 * results do not depend on the thread count; then one element-wise pass.
 * Forward statistics in one pass shifted by a sample of each channel.
 * fp16/bf16 (storage types): NCHW one task per channel, NHWC the same chunked
 * partials in double. Conventions as the reference (ref_kernels.c).
 * Synchronised statistics (a->sync, kernels.h): every path computes this
 * rank's statistics or sums first, exchanges them between the passes
 * (bn_sync.h), then applies the global ones; without sync nothing changes. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/bn_sync.h"
#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/cpu_norm_pool.h"
#include "backend/cpu/cpu_vec.h"
#include "backend/ref/ref_math.h"
#include "core/mem.h"

#if defined(__GNUC__)
#define ALWAYS_INLINE __attribute__((always_inline)) inline
#else
#define ALWAYS_INLINE inline
#endif

#define ROW_CHUNK 64

struct bn_ctx {
    const struct md_batchnorm_args *a;
    float *scale, *shift;   /* (c): y = x*scale + shift (before ReLU) */
    float *fk;              /* (c) fp32 fast path: the shift of the sums (fwd), the float mean (bwd) */
    float *k1, *k2, *k3;    /* (c) fp32 fast path: dx coefficients */
    double *mean, *invstd;  /* (c) */
    double *part;           /* (nchunks, 2c) partial sums */
    double *s1, *s2;        /* (c) combined sums */
    const double *g1, *g2;  /* (c) backward: the sums dx uses (s1, s2, or every rank's) */
    double gm;              /* backward: their count */
    int pass;
};

static ALWAYS_INLINE float ldf(const void *p, md_dtype t, size_t i) { return md_load_f(p, t, i); }

/* ---- forward --------------------------------------------------------------------------------- */

static ALWAYS_INLINE void nchw_stats(const struct md_batchnorm_args *a, int ci, md_dtype t, double *mean, double *var)
{
    double s = 0.0, ss = 0.0, m = (double)a->n * a->hw;
    for (int ni = 0; ni < a->n; ni++) {
        size_t o = ((size_t)ni * a->c + ci) * a->hw;
        for (int i = 0; i < a->hw; i++) s += (double)ldf(a->x, t, o + i);
    }
    double mu = s / m;
    for (int ni = 0; ni < a->n; ni++) {
        size_t o = ((size_t)ni * a->c + ci) * a->hw;
        for (int i = 0; i < a->hw; i++) {
            double d = (double)ldf(a->x, t, o + i) - mu;
            ss += d * d;
        }
    }
    *mean = mu;
    *var = ss / m;
}

/* Per-channel affine from the statistics of m elements; updates running
 * stats in training. */
static void bn_finalize(const struct md_batchnorm_args *a, int ci, double mean, double var, double m, float *scale,
                        float *shift)
{
    double invstd;
    if (a->training) {
        double mom = (double)a->momentum;
        invstd = 1.0 / sqrt(var + (double)a->eps);
        if (a->save_mean) a->save_mean[ci] = (float)mean;
        if (a->save_invstd) a->save_invstd[ci] = (float)invstd;
        double unbiased = m > 1.0 ? var * m / (m - 1.0) : var;
        if (a->running_mean) a->running_mean[ci] = (float)((1.0 - mom) * (double)a->running_mean[ci] + mom * mean);
        if (a->running_var) a->running_var[ci] = (float)((1.0 - mom) * (double)a->running_var[ci] + mom * unbiased);
    } else {
        mean = (double)a->running_mean[ci];
        invstd = 1.0 / sqrt((double)a->running_var[ci] + (double)a->eps);
    }
    double gam = a->gamma ? (double)a->gamma[ci] : 1.0, bet = a->beta_p ? (double)a->beta_p[ci] : 0.0;
    *scale = (float)(gam * invstd);
    *shift = (float)(bet - mean * gam * invstd);
}

static ALWAYS_INLINE void nchw_apply_channel(const struct md_batchnorm_args *a, int ci, md_dtype t, float scale,
                                              float shift)
{
    int relu = a->act == MD_ACT_RELU;
    for (int ni = 0; ni < a->n; ni++) {
        size_t o = ((size_t)ni * a->c + ci) * a->hw;
        if (t == MD_F32 && a->beta == 0.0f) {
            const float *x = (const float *)a->x + o;
            float *y = (float *)a->y + o;
            if (relu)
                for (int i = 0; i < a->hw; i++) {
                    float v = x[i] * scale + shift;
                    y[i] = v > 0.0f ? v : 0.0f;
                }
            else
                for (int i = 0; i < a->hw; i++) y[i] = x[i] * scale + shift;
            continue;
        }
        for (int i = 0; i < a->hw; i++) {
            float v = ldf(a->x, t, o + i) * scale + shift;
            if (relu && v < 0.0f) v = 0.0f;
            if (a->beta != 0.0f) v += a->beta * ldf(a->y, t, o + i);
            md_store_f(a->y, t, o + i, v);
        }
    }
}

static ALWAYS_INLINE void nchw_fwd_channel(const struct md_batchnorm_args *a, int ci, md_dtype t)
{
    double mean = 0.0, var = 0.0;
    float scale, shift;
    if (a->training) nchw_stats(a, ci, t, &mean, &var);
    bn_finalize(a, ci, mean, var, (double)a->n * a->hw, &scale, &shift);
    nchw_apply_channel(a, ci, t, scale, shift);
}

static void nchw_fwd_range(void *vc, long long b, long long e)
{
    const struct bn_ctx *c = vc;
    for (long long ci = b; ci < e; ci++) nchw_fwd_channel(c->a, (int)ci, c->a->dtype); /* fp16/bf16 */
}

/* synchronised fp16/bf16 NCHW: this rank's statistics (mean, var in invstd), then the apply */
static void nchw_stats_range(void *vc, long long b, long long e)
{
    const struct bn_ctx *c = vc;
    for (long long ci = b; ci < e; ci++) {
        if (c->a->n * c->a->hw > 0)
            nchw_stats(c->a, (int)ci, c->a->dtype, &c->mean[ci], &c->invstd[ci]);
        else
            c->mean[ci] = c->invstd[ci] = 0.0;
    }
}

static void nchw_apply_range(void *vc, long long b, long long e)
{
    const struct bn_ctx *c = vc;
    for (long long ci = b; ci < e; ci++) nchw_apply_channel(c->a, (int)ci, c->a->dtype, c->scale[ci], c->shift[ci]);
}

/* NHWC partial sums over a chunk of rows: pass 0 sum x, pass 1 sum (x-mean)^2;
 * backward: pass 2 sum dy', sum dy'*xhat (dy' masked by ReLU). */
static ALWAYS_INLINE void nhwc_part_rows(const struct bn_ctx *c, long long chunk, md_dtype t)
{
    const struct md_batchnorm_args *a = c->a;
    long long rows = (long long)a->n * a->hw, r0 = chunk * ROW_CHUNK, r1 = r0 + ROW_CHUNK < rows ? r0 + ROW_CHUNK : rows;
    double *p1 = c->part + (size_t)chunk * 2 * a->c, *p2 = p1 + a->c;
    memset(p1, 0, sizeof(double) * 2 * (size_t)a->c);
    for (long long r = r0; r < r1; r++) {
        size_t o = (size_t)r * a->c;
        if (c->pass == 0) {
            for (int ci = 0; ci < a->c; ci++) p1[ci] += (double)ldf(a->x, t, o + ci);
        } else if (c->pass == 1) {
            for (int ci = 0; ci < a->c; ci++) {
                double d = (double)ldf(a->x, t, o + ci) - c->mean[ci];
                p1[ci] += d * d;
            }
        } else {
            for (int ci = 0; ci < a->c; ci++) {
                float dy = ldf(a->dy, t, o + ci), xv = ldf(a->x, t, o + ci);
                double xh = ((double)xv - c->mean[ci]) * c->invstd[ci];
                /* the ReLU mask: y, or the pre-activation x*scale + shift as the forward computed it */
                if (a->act == MD_ACT_RELU && (a->y ? ldf(a->y, t, o + ci) <= 0.0f : xv * c->scale[ci] + c->shift[ci] <= 0.0f))
                    dy = 0.0f;
                p1[ci] += (double)dy;
                p2[ci] += (double)dy * xh;
            }
        }
    }
}

static void nhwc_part_range(void *vc, long long b, long long e)
{
    const struct bn_ctx *c = vc;
    for (long long k = b; k < e; k++) {
        if (c->a->dtype == MD_F32)
            nhwc_part_rows(c, k, MD_F32);
        else
            nhwc_part_rows(c, k, c->a->dtype);
    }
}

/* s1/s2 (c) = sums of the chunks' partials, in chunk order. */
static void nhwc_combine(const struct bn_ctx *c, long long nchunks)
{
    int C = c->a->c;
    memset(c->s1, 0, sizeof(double) * (size_t)C);
    memset(c->s2, 0, sizeof(double) * (size_t)C);
    for (long long k = 0; k < nchunks; k++)
        for (int ci = 0; ci < C; ci++) {
            c->s1[ci] += c->part[(size_t)k * 2 * C + ci];
            c->s2[ci] += c->part[(size_t)k * 2 * C + C + ci];
        }
}

static ALWAYS_INLINE void nhwc_fwd_rows(const struct bn_ctx *c, long long b, long long e, md_dtype t)
{
    const struct md_batchnorm_args *a = c->a;
    int relu = a->act == MD_ACT_RELU;
    for (long long r = b; r < e; r++) {
        size_t o = (size_t)r * a->c;
        for (int ci = 0; ci < a->c; ci++) {
            float v = ldf(a->x, t, o + ci) * c->scale[ci] + c->shift[ci];
            if (relu && v < 0.0f) v = 0.0f;
            if (a->beta != 0.0f) v += a->beta * ldf(a->y, t, o + ci);
            md_store_f(a->y, t, o + ci, v);
        }
    }
}

static void nhwc_fwd_range(void *vc, long long b, long long e)
{
    const struct bn_ctx *c = vc;
    if (c->a->dtype == MD_F32)
        nhwc_fwd_rows(c, b, e, MD_F32);
    else
        nhwc_fwd_rows(c, b, e, c->a->dtype);
}

/* Scratch for NHWC: scale, shift (float c), mean, invstd, s1, s2 (double c), partials. */
static md_status bn_alloc(struct bn_ctx *c, long long nchunks, void **block)
{
    int C = c->a->c;
    size_t bytes = sizeof(double) * ((size_t)C * 4 + (size_t)nchunks * 2 * C) + sizeof(float) * 6 * (size_t)C;
    char *p = md_malloc(bytes);
    *block = p;
    if (!p) return MD_ERR_OOM;
    c->mean = (double *)p;
    c->invstd = c->mean + C;
    c->s1 = c->invstd + C;
    c->s2 = c->s1 + C;
    c->part = c->s2 + C;
    c->scale = (float *)(c->part + (size_t)nchunks * 2 * C);
    c->shift = c->scale + C;
    c->fk = c->shift + C;
    c->k1 = c->fk + C;
    c->k2 = c->k1 + C;
    c->k3 = c->k2 + C;
    return MD_OK;
}

static void bwd_stats(const struct md_batchnorm_args *a, int ci, double *mean, double *invstd);
static md_status f32_fwd(struct bn_ctx *c, int nchw);
static md_status f32_bwd(struct bn_ctx *c, int nchw);

static md_status bn_check(const char *op, const struct md_batchnorm_args *a)
{
    if (!md_cpu_float_type(a->dtype))
        return md_errf(MD_ERR_UNSUPPORTED, "cpu %s: dtype %s is not supported", op, md_dtype_name(a->dtype));
    return MD_OK;
}

/* ---- fp32 NHWC fast path: channels are the contiguous inner loop, in
 * vectors (cpu_vec.h), then a scalar tail, each channel with the same
 * operations in the same order; per chunk of ROW_CHUNK rows float
 * accumulators, double across chunks. Rows stream in memory order (a
 * channel block's rows apart would stride through memory).
 * Forward statistics in one pass, shifted by a sample of each channel (its
 * value in row 0) so that sum (x-k)^2 - (sum (x-k))^2/m does not cancel. */

#define CH_BLOCK 64

/* How backward masks dy by the fused ReLU: not at all, by y > 0, or by the
 * pre-activation x*scale + shift > 0 recomputed as the forward did (no y
 * given). STATS: the forward's sums, no dy. */
enum { MASK_NONE, MASK_Y, MASK_X, STATS };

static int mask_mode(const struct md_batchnorm_args *a)
{
    return a->act != MD_ACT_RELU ? MASK_NONE : a->y ? MASK_Y : MASK_X;
}

/* The pass's arrays, copied out of the context so that the compiler keeps
 * them in registers (it cannot tell the vector stores from the context). */
struct nhwc_io {
    const float *x, *dy, *y;         /* rows of C */
    float *out;                      /* y (forward) or dx (backward) */
    const float *sc, *sh, *k;        /* (C) scale, shift, the sums' shift */
    const float *k1, *k2, *k3;       /* (C) dx coefficients */
    float beta;
    int C;
};

static struct nhwc_io io_of(const struct bn_ctx *c)
{
    const struct md_batchnorm_args *a = c->a;
    return (struct nhwc_io){a->x, a->dy, a->y, c->pass == 0 ? a->y : a->dx, c->scale, c->shift, c->fk,
                            c->k1, c->k2, c->k3, a->beta, a->c};
}

/* dy' at o (MD_VW elements): dy where z > 0, +0 elsewhere */
static ALWAYS_INLINE md_vf masked_vec(int mode, const struct nhwc_io *p, size_t o, int j, md_vf xv)
{
    md_vf d = md_vload(p->dy + o);
    if (mode == MASK_Y) return md_vand(md_vload(p->y + o) > md_vsplat(0.0f), d);
    if (mode == MASK_X) return md_vand(xv * md_vload(p->sc + j) + md_vload(p->sh + j) > md_vsplat(0.0f), d);
    return d;
}

static ALWAYS_INLINE float masked_one(int mode, const struct nhwc_io *p, size_t o, int j, float xv)
{
    float d = p->dy[o], z = mode == MASK_Y ? p->y[o] : mode == MASK_X ? xv * p->sc[j] + p->sh[j] : 1.0f;
    return z > 0.0f ? d : 0.0f;
}

/* One chunk's rows [r0, r1), channels [j0, j0 + len): forward (STATS)
 * sum (x-k), sum (x-k)^2; backward sum dy', sum dy'*(x-k); into p1, p2. */
static ALWAYS_INLINE void part_block(struct nhwc_io p, int mode, long long r0, long long r1, int j0, int len,
                                     double *p1, double *p2)
{
    float a1[CH_BLOCK], a2[CH_BLOCK]; /* in L1: too many for registers */
    for (int j = 0; j < len; j++) a1[j] = a2[j] = 0.0f;
    const float *k = p.k + j0;
    for (long long r = r0; r < r1; r++) {
        size_t o = (size_t)r * p.C + j0;
        int j = 0;
        for (; j + MD_VW <= len; j += MD_VW) {
            md_vf xv = md_vload(p.x + o + j), d;
            if (mode == STATS) {
                d = xv - md_vload(k + j);
                md_vstore(a2 + j, md_vload(a2 + j) + d * d);
            } else {
                d = masked_vec(mode, &p, o + j, j0 + j, xv);
                md_vstore(a2 + j, md_vload(a2 + j) + d * (xv - md_vload(k + j)));
            }
            md_vstore(a1 + j, md_vload(a1 + j) + d);
        }
        for (; j < len; j++) {
            float xv = p.x[o + j], d;
            if (mode == STATS) {
                d = xv - k[j];
                a2[j] += d * d;
            } else {
                d = masked_one(mode, &p, o + j, j0 + j, xv);
                a2[j] += d * (xv - k[j]);
            }
            a1[j] += d;
        }
    }
    for (int j = 0; j < len; j++) p1[j0 + j] = (double)a1[j], p2[j0 + j] = (double)a2[j];
}

/* Blocks of 16-64 channels (whole vectors of 16) with the accumulators in
 * registers: part_block's operations lane for lane (each lane one channel,
 * its rows in order, no contraction under -std=c11), so the same sums; at
 * cpu_vec.h's 4 floats with the accumulators in L1 the forward's statistics
 * pass ran at half the memory's pace (small_cnn). gcc target clones:
 * AVX-512 / AVX2 / baseline. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__) && \
    !defined(__SANITIZE_ADDRESS__)
#define BN_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define BN_CLONES
#endif

#if defined(__GNUC__) || defined(__clang__)
#define BN16 1
/* the vectors live in always-inline helpers: no call passes one */
#pragma GCC diagnostic ignored "-Wpsabi"
typedef float bn16 __attribute__((vector_size(16 * sizeof(float))));
typedef int bn16i __attribute__((vector_size(16 * sizeof(float))));

static ALWAYS_INLINE bn16 ld16(const float *p)
{
    bn16 v;
    memcpy(&v, p, sizeof v);
    return v;
}

static ALWAYS_INLINE bn16 and16(bn16i m, bn16 v) { return (bn16)(m & (bn16i)v); }

static ALWAYS_INLINE void part16(struct nhwc_io p, int mode, int nv, long long r0, long long r1, int j0, double *p1,
                                 double *p2)
{
    bn16 a1[4], a2[4], k[4], sc[4], sh[4], zero = {0};
    for (int v = 0; v < nv; v++) {
        a1[v] = a2[v] = zero;
        k[v] = ld16(p.k + j0 + 16 * v);
        if (mode == MASK_X) sc[v] = ld16(p.sc + j0 + 16 * v), sh[v] = ld16(p.sh + j0 + 16 * v);
    }
    for (long long r = r0; r < r1; r++) {
        size_t o = (size_t)r * p.C + j0;
        for (int v = 0; v < nv; v++) {
            bn16 xv = ld16(p.x + o + 16 * v), d;
            if (mode == STATS) {
                d = xv - k[v];
                a2[v] = a2[v] + d * d;
            } else {
                d = ld16(p.dy + o + 16 * v);
                if (mode == MASK_Y) d = and16(ld16(p.y + o + 16 * v) > zero, d);
                if (mode == MASK_X) d = and16(xv * sc[v] + sh[v] > zero, d);
                a2[v] = a2[v] + d * (xv - k[v]);
            }
            a1[v] = a1[v] + d;
        }
    }
    for (int v = 0; v < nv; v++)
        for (int l = 0; l < 16; l++)
            p1[j0 + 16 * v + l] = (double)a1[v][l], p2[j0 + 16 * v + l] = (double)a2[v][l];
}

static ALWAYS_INLINE void part16_nv(struct nhwc_io p, int mode, int nv, long long r0, long long r1, int j0,
                                    double *p1, double *p2)
{
    switch (nv) {
    case 1: part16(p, mode, 1, r0, r1, j0, p1, p2); break;
    case 2: part16(p, mode, 2, r0, r1, j0, p1, p2); break;
    case 3: part16(p, mode, 3, r0, r1, j0, p1, p2); break;
    default: part16(p, mode, 4, r0, r1, j0, p1, p2); break;
    }
}
#else
#define BN16 0
#endif

static ALWAYS_INLINE void part_mode(const struct bn_ctx *c, int mode, long long b, long long e)
{
    struct nhwc_io p = io_of(c);
    long long rows = (long long)c->a->n * c->a->hw;
    for (long long chunk = b; chunk < e; chunk++) {
        long long r0 = chunk * ROW_CHUNK, r1 = r0 + ROW_CHUNK < rows ? r0 + ROW_CHUNK : rows;
        double *p1 = c->part + (size_t)chunk * 2 * p.C, *p2 = p1 + p.C;
        for (int j0 = 0; j0 < p.C; j0 += CH_BLOCK) {
            int len = p.C - j0 < CH_BLOCK ? p.C - j0 : CH_BLOCK;
#if BN16
            if (len % 16 == 0) {
                part16_nv(p, mode, len / 16, r0, r1, j0, p1, p2);
                continue;
            }
#endif
            part_block(p, mode, r0, r1, j0, len, p1, p2);
        }
    }
}

BN_CLONES static void f32_nhwc_part_range(void *vc, long long b, long long e)
{
    const struct bn_ctx *c = vc;
    switch (c->pass == 0 ? STATS : mask_mode(c->a)) {
    case STATS: part_mode(c, STATS, b, e); break;
    case MASK_NONE: part_mode(c, MASK_NONE, b, e); break;
    case MASK_Y: part_mode(c, MASK_Y, b, e); break;
    default: part_mode(c, MASK_X, b, e); break;
    }
}

/* Rows [b, e): the forward y = x*scale + shift (ReLU) (+ beta*y) (STATS),
 * or dx = k1*(dy' - k2 - (x - k)*k3) (+ beta*dx); acc: beta != 0. */
static ALWAYS_INLINE void apply_mode(struct nhwc_io p, int mode, int relu, int acc, long long b, long long e)
{
    for (long long r = b; r < e; r++) {
        size_t o = (size_t)r * p.C;
        int j = 0;
        for (; j + MD_VW <= p.C; j += MD_VW) {
            md_vf xv = md_vload(p.x + o + j), v;
            if (mode == STATS) {
                v = xv * md_vload(p.sc + j) + md_vload(p.sh + j);
                if (relu) v = md_vand(v > md_vsplat(0.0f), v);
            } else {
                md_vf d = masked_vec(mode, &p, o + j, j, xv);
                v = md_vload(p.k1 + j) * (d - md_vload(p.k2 + j) - (xv - md_vload(p.k + j)) * md_vload(p.k3 + j));
            }
            if (acc) v = v + p.beta * md_vload(p.out + o + j);
            md_vstore(p.out + o + j, v);
        }
        for (; j < p.C; j++) {
            float xv = p.x[o + j], v;
            if (mode == STATS) {
                v = xv * p.sc[j] + p.sh[j];
                if (relu) v = v > 0.0f ? v : 0.0f;
            } else {
                float d = masked_one(mode, &p, o + j, j, xv);
                v = p.k1[j] * (d - p.k2[j] - (xv - p.k[j]) * p.k3[j]);
            }
            if (acc) v = v + p.beta * p.out[o + j];
            p.out[o + j] = v;
        }
    }
}

static ALWAYS_INLINE void apply_acc(struct nhwc_io p, int mode, int relu, long long b, long long e)
{
    if (p.beta != 0.0f) apply_mode(p, mode, relu, 1, b, e);
    else apply_mode(p, mode, relu, 0, b, e);
}

static void f32_nhwc_apply_range(void *vc, long long b, long long e)
{
    const struct bn_ctx *c = vc;
    struct nhwc_io p = io_of(c);
    switch (c->pass == 0 ? STATS : mask_mode(c->a)) {
    case STATS:
        if (c->a->act == MD_ACT_RELU) apply_acc(p, STATS, 1, b, e);
        else apply_acc(p, STATS, 0, b, e);
        break;
    case MASK_NONE: apply_acc(p, MASK_NONE, 0, b, e); break;
    case MASK_Y: apply_acc(p, MASK_Y, 0, b, e); break;
    default: apply_acc(p, MASK_X, 0, b, e); break;
    }
}

/* ---- a fused 2x2 stride-2 max pool (kernels.h md_batchnorm_args.pool) ---------------------------
 * fp32 with the ReLU (cpu_norm_pool.c): the forward's statistics as without
 * the pool, then one pass writes the pooled y (the full-size output is never
 * written); backward's sums per pooled row (NHWC) or plane (NCHW: a fixed
 * piece, the same for any thread count) and its dx pass recompute each
 * window from x, or (NHWC with pool_x and pool_arg) read the routing the
 * forward kept. */

static struct md_bnpool bnpool_of(const struct bn_ctx *c)
{
    const struct md_batchnorm_args *a = c->a;
    int keep = a->layout == MD_NHWC && a->training && a->pool_x && a->pool_arg;
    return (struct md_bnpool){a->x, a->dy, a->y, a->dx, c->scale, c->shift, c->fk, c->k1, c->k2, c->k3,
                              c->part, keep ? a->pool_x : NULL, keep ? a->pool_arg : NULL,
                              a->beta, a->c, a->h, a->w};
}

/* the passes as md_range_fn */
#define BNPOOL_RANGE(name, fn)                               \
    static void name(void *vc, long long b, long long e)     \
    {                                                        \
        struct md_bnpool p = bnpool_of(vc);                  \
        fn(&p, b, e);                                        \
    }
BNPOOL_RANGE(pool_apply_range, md_cpu_bnpool_apply)
BNPOOL_RANGE(pool_sums_range, md_cpu_bnpool_sums)
BNPOOL_RANGE(pool_dx_range, md_cpu_bnpool_dx)
BNPOOL_RANGE(pool_apply_nchw_range, md_cpu_bnpool_apply_nchw)
BNPOOL_RANGE(pool_sums_nchw_range, md_cpu_bnpool_sums_nchw)
BNPOOL_RANGE(pool_dx_nchw_range, md_cpu_bnpool_dx_nchw)

/* What the fused pool needs; a reason string when the call does not qualify. */
static const char *pool_unfit(const struct md_batchnorm_args *a)
{
    if (a->pool != 2) return "only a 2x2 stride-2 max pool is fused";
    if (a->dtype != MD_F32) return "fp32 only";
    if (a->act != MD_ACT_RELU || a->res) return "a ReLU and no residual only";
    if (a->h < 2 || a->w < 2 || a->h % 2 || a->w % 2 || (long long)a->h * a->w != a->hw)
        return "h and w must be even, with hw = h * w";
    return NULL;
}

/* ---- a fused residual (kernels.h md_batchnorm_args.res) -----------------------------------------
 * Forward: batch norm without its ReLU, then one pass y = act(y + res);
 * backward: one pass g = act'(y) * dy into dres (and into a scratch when
 * dres accumulates), then batch norm's backward of g without its ReLU. Two
 * passes fewer than running batch norm, the sum and the ReLU apart, and the
 * same roundings as those (the layer's unfused model gives the same bits). */

#define RES_CHUNK 4096

struct res_ctx {
    const struct md_batchnorm_args *a;
    size_t n;
    int bwd;
    const void *t;  /* fwd: batch norm's output (y itself, or a scratch when y accumulates) */
    void *g;        /* bwd: where g goes (dres, or a scratch when dres accumulates) */
};

/* fwd: y = act(t + res) (+ beta * y) */
static void res_fwd_span(const struct res_ctx *r, size_t i0, size_t i1)
{
    const struct md_batchnorm_args *a = r->a;
    int relu = a->act == MD_ACT_RELU;
    md_dtype t = a->dtype;
    if (t == MD_F32 && a->beta == 0.0f) {
        const float *u = r->t, *s = a->res;
        float *y = a->y;
        for (size_t i = i0; i < i1; i++) {
            float v = u[i] + s[i];
            y[i] = relu && !(v > 0.0f) ? 0.0f : v;
        }
        return;
    }
    for (size_t i = i0; i < i1; i++) {
        float v = ldf(r->t, t, i) + ldf(a->res, t, i);
        if (relu && !(v > 0.0f)) v = 0.0f;
        if (a->beta != 0.0f) v += a->beta * ldf(a->y, t, i);
        md_store_f(a->y, t, i, v);
    }
}

/* bwd: g = act'(y) * dy into r->g, and dres = g + beta_res * dres when g is a scratch */
static void res_bwd_span(const struct res_ctx *r, size_t i0, size_t i1)
{
    const struct md_batchnorm_args *a = r->a;
    int relu = a->act == MD_ACT_RELU;
    md_dtype t = a->dtype;
    if (t == MD_F32 && r->g == a->dres) {
        const float *dy = a->dy, *y = a->y;
        float *g = r->g;
        for (size_t i = i0; i < i1; i++) g[i] = relu && !(y[i] > 0.0f) ? 0.0f : dy[i];
        return;
    }
    for (size_t i = i0; i < i1; i++) {
        float g = relu && !(ldf(a->y, t, i) > 0.0f) ? 0.0f : ldf(a->dy, t, i);
        if (r->g != a->dres) md_store_f(a->dres, t, i, g + a->beta_res * ldf(a->dres, t, i));
        md_store_f(r->g, t, i, g);
    }
}

/* chunks [b, e) of RES_CHUNK elements */
static void res_range(void *vc, long long b, long long e)
{
    const struct res_ctx *r = vc;
    size_t i0 = (size_t)b * RES_CHUNK, i1 = (size_t)e * RES_CHUNK < r->n ? (size_t)e * RES_CHUNK : r->n;
    if (r->bwd) res_bwd_span(r, i0, i1);
    else res_fwd_span(r, i0, i1);
}

static void res_pass(struct res_ctx *r)
{
    md_parallel_for((long long)((r->n + RES_CHUNK - 1) / RES_CHUNK), 1, res_range, r);
}

static md_status res_fwd(md_device *dev, const struct md_batchnorm_args *a)
{
    size_t n = (size_t)a->n * a->c * a->hw;
    void *tmp = NULL;
    if (a->beta != 0.0f && !(tmp = md_malloc(n * md_dtype_size(a->dtype) + 1)))
        return md_errf(MD_ERR_OOM, "cpu batchnorm_fwd: cannot allocate the residual's scratch");
    struct md_batchnorm_args b = *a;
    b.res = NULL;
    b.act = MD_ACT_NONE;
    b.beta = 0.0f;
    if (tmp) b.y = tmp;
    md_status st = md_cpu_batchnorm_fwd(dev, &b);
    struct res_ctx r = {a, n, 0, tmp ? tmp : a->y, NULL};
    if (st == MD_OK) res_pass(&r);
    md_free(tmp);
    return st;
}

static md_status res_bwd(md_device *dev, const struct md_batchnorm_args *a)
{
    if (a->act == MD_ACT_RELU && !a->y)
        return md_errf(MD_ERR_USAGE, "cpu batchnorm_bwd: a residual with a ReLU needs the forward's output");
    size_t n = (size_t)a->n * a->c * a->hw;
    void *tmp = NULL;
    if (a->beta_res != 0.0f && !(tmp = md_malloc(n * md_dtype_size(a->dtype) + 1)))
        return md_errf(MD_ERR_OOM, "cpu batchnorm_bwd: cannot allocate the residual's scratch");
    struct res_ctx r = {a, n, 1, NULL, tmp ? tmp : a->dres};
    res_pass(&r);
    struct md_batchnorm_args b = *a;
    b.res = NULL;
    b.dres = NULL;
    b.act = MD_ACT_NONE;
    b.dy = r.g;
    md_status st = md_cpu_batchnorm_bwd(dev, &b);
    md_free(tmp);
    return st;
}

md_status md_cpu_batchnorm_fwd(md_device *dev, const struct md_batchnorm_args *a)
{
    (void)dev;
    MD_TRY(bn_check("batchnorm_fwd", a));
    if (a->pool) {
        const char *why = pool_unfit(a);
        if (why || a->beta != 0.0f)
            return md_errf(MD_ERR_UNSUPPORTED, "cpu batchnorm_fwd with a fused max pool: %s",
                           why ? why : "no accumulating output");
        struct bn_ctx c = {.a = a};
        struct md_batchnorm_args f = *a;
        f.dy = NULL; /* the forward's split */
        c.a = &f;
        return f32_fwd(&c, a->layout == MD_NCHW);
    }
    if (a->res) return res_fwd(dev, a);
    struct bn_ctx c = {.a = a};
    int sync = a->training && a->sync;
    if (a->layout == MD_NCHW && a->dtype == MD_F32) return f32_fwd(&c, 1);
    if (a->layout == MD_NCHW && !sync) {
        md_parallel_for(a->c, 1, nchw_fwd_range, &c);
        return MD_OK;
    }
    if (a->dtype == MD_F32) return f32_fwd(&c, 0);
    long long rows = (long long)a->n * a->hw, nchunks = (rows + ROW_CHUNK - 1) / ROW_CHUNK;
    void *block;
    MD_TRY(bn_alloc(&c, a->layout == MD_NCHW ? 0 : nchunks, &block));
    double m = (double)rows;
    if (a->layout == MD_NCHW) { /* synchronised fp16/bf16: statistics, exchange, apply */
        md_parallel_for(a->c, 1, nchw_stats_range, &c);
        md_status st = md_bn_sync_stats(a, m, c.mean, c.invstd, &m);
        for (int ci = 0; st == MD_OK && ci < a->c; ci++)
            bn_finalize(a, ci, c.mean[ci], c.invstd[ci], m, &c.scale[ci], &c.shift[ci]);
        if (st == MD_OK) md_parallel_for(a->c, 1, nchw_apply_range, &c);
        md_free(block);
        return st;
    }
    if (a->training) {
        c.pass = 0;
        md_parallel_for(nchunks, 1, nhwc_part_range, &c);
        nhwc_combine(&c, nchunks);
        for (int ci = 0; ci < a->c; ci++) c.mean[ci] = c.s1[ci] / m;
        c.pass = 1;
        md_parallel_for(nchunks, 1, nhwc_part_range, &c);
        nhwc_combine(&c, nchunks);
    }
    double lm = m;
    if (sync) {
        for (int ci = 0; ci < a->c; ci++) c.s1[ci] /= lm; /* this rank's variance */
        md_status st = md_bn_sync_stats(a, lm, c.mean, c.s1, &m);
        if (st != MD_OK) {
            md_free(block);
            return st;
        }
        lm = 1.0;
    }
    for (int ci = 0; ci < a->c; ci++)
        bn_finalize(a, ci, a->training ? c.mean[ci] : 0.0, a->training ? c.s1[ci] / lm : 0.0, m, &c.scale[ci],
                    &c.shift[ci]);
    md_parallel_for(rows, md_parallel_grain(rows, 16), nhwc_fwd_range, &c);
    md_free(block);
    return MD_OK;
}

/* ---- backward ---------------------------------------------------------------------------------- */

/* mean/invstd as the forward used them (saved batch stats, or running stats). */
static void bwd_stats(const struct md_batchnorm_args *a, int ci, double *mean, double *invstd)
{
    if (!a->training) {
        *mean = (double)a->running_mean[ci];
        *invstd = 1.0 / sqrt((double)a->running_var[ci] + (double)a->eps);
    } else if (a->save_mean && a->save_invstd) {
        *mean = (double)a->save_mean[ci];
        *invstd = (double)a->save_invstd[ci];
    } else {
        double var;
        if (a->layout == MD_NCHW) {
            if (a->dtype == MD_F32)
                nchw_stats(a, ci, MD_F32, mean, &var);
            else
                nchw_stats(a, ci, a->dtype, mean, &var);
        } else {
            double s = 0.0, ss = 0.0, m = (double)a->n * a->hw;
            size_t rows = (size_t)a->n * a->hw;
            for (size_t r = 0; r < rows; r++) s += (double)md_load_f(a->x, a->dtype, r * a->c + ci);
            double mu = s / m;
            for (size_t r = 0; r < rows; r++) {
                double d = (double)md_load_f(a->x, a->dtype, r * a->c + ci) - mu;
                ss += d * d;
            }
            *mean = mu;
            var = ss / m;
        }
        *invstd = 1.0 / sqrt(var + (double)a->eps);
    }
}

/* mean, invstd (double) and the forward's scale, shift (float) of every channel. */
static void bwd_scale_shift(struct bn_ctx *c)
{
    const struct md_batchnorm_args *a = c->a;
    for (int ci = 0; ci < a->c; ci++) {
        bwd_stats(a, ci, &c->mean[ci], &c->invstd[ci]);
        double gam = a->gamma ? (double)a->gamma[ci] : 1.0, bet = a->beta_p ? (double)a->beta_p[ci] : 0.0;
        c->scale[ci] = (float)(gam * c->invstd[ci]);
        c->shift[ci] = (float)(bet - c->mean[ci] * gam * c->invstd[ci]);
    }
}

/* dgamma/dbeta of channel ci from sum dy*xhat and sum dy (+ beta * the old value). */
static void param_grad(const struct md_batchnorm_args *a, int ci, double sdyx, double sdy)
{
    if (a->dgamma) a->dgamma[ci] = (float)(sdyx + (a->beta != 0.0f ? (double)a->beta * (double)a->dgamma[ci] : 0.0));
    if (a->dbeta) a->dbeta[ci] = (float)(sdy + (a->beta != 0.0f ? (double)a->beta * (double)a->dbeta[ci] : 0.0));
}

static void param_grads(const struct md_batchnorm_args *a, const double *sdyx, const double *sdy)
{
    for (int ci = 0; ci < a->c; ci++) param_grad(a, ci, sdyx[ci], sdy[ci]);
}

/* channel ci's sum dy' and sum dy'*xhat (dy' masked by the fused ReLU) */
static ALWAYS_INLINE void nchw_bwd_sums(const struct md_batchnorm_args *a, int ci, md_dtype t, double mean,
                                        double invstd, double *psdy, double *psdyx)
{
    double gam = a->gamma ? (double)a->gamma[ci] : 1.0, bet = a->beta_p ? (double)a->beta_p[ci] : 0.0;
    int relu = a->act == MD_ACT_RELU;
    double sdy = 0.0, sdyx = 0.0;
    float fm = (float)mean, fi = (float)invstd, fg = (float)(gam * invstd), fb = (float)(bet - mean * gam * invstd);
    for (int ni = 0; ni < a->n; ni++) {
        size_t o = ((size_t)ni * a->c + ci) * a->hw;
        for (int i = 0; i < a->hw; i++) {
            float xv = ldf(a->x, t, o + i), dy = ldf(a->dy, t, o + i);
            if (relu && (a->y ? ldf(a->y, t, o + i) <= 0.0f : xv * fg + fb <= 0.0f)) dy = 0.0f;
            sdy += (double)dy;
            sdyx += (double)dy * (double)((xv - fm) * fi);
        }
    }
    *psdy = sdy;
    *psdyx = sdyx;
}

/* channel ci's dx from the sums sdy, sdyx of m elements */
static ALWAYS_INLINE void nchw_bwd_dx(const struct md_batchnorm_args *a, int ci, md_dtype t, double mean,
                                      double invstd, double sdy, double sdyx, double m)
{
    double gam = a->gamma ? (double)a->gamma[ci] : 1.0, bet = a->beta_p ? (double)a->beta_p[ci] : 0.0;
    int relu = a->act == MD_ACT_RELU;
    float fm = (float)mean, fi = (float)invstd, fg = (float)(gam * invstd), fb = (float)(bet - mean * gam * invstd);
    /* training: dx = gam*invstd/m * (m*dy - sdy - xhat*sdyx); inference: gam*invstd*dy */
    float k1 = (float)(gam * invstd), k2 = a->training ? (float)(sdy / m) : 0.0f,
          k3 = a->training ? (float)(sdyx / m) : 0.0f;
    for (int ni = 0; ni < a->n; ni++) {
        size_t o = ((size_t)ni * a->c + ci) * a->hw;
        for (int i = 0; i < a->hw; i++) {
            float xv = ldf(a->x, t, o + i), dy = ldf(a->dy, t, o + i);
            if (relu && (a->y ? ldf(a->y, t, o + i) <= 0.0f : xv * fg + fb <= 0.0f)) dy = 0.0f;
            float v = k1 * (dy - k2 - (xv - fm) * fi * k3);
            if (a->beta != 0.0f) v += a->beta * ldf(a->dx, t, o + i);
            md_store_f(a->dx, t, o + i, v);
        }
    }
}

static ALWAYS_INLINE void nchw_bwd_channel(const struct md_batchnorm_args *a, int ci, md_dtype t)
{
    double mean, invstd, sdy, sdyx;
    bwd_stats(a, ci, &mean, &invstd);
    nchw_bwd_sums(a, ci, t, mean, invstd, &sdy, &sdyx);
    if (a->dx) nchw_bwd_dx(a, ci, t, mean, invstd, sdy, sdyx, (double)a->n * a->hw);
    param_grad(a, ci, sdyx, sdy);
}

/* ---- fp32 NCHW fast path: float lanes inside blocks (vectorised), double
 * across blocks, so long channels keep double-like accuracy ---- */

#define LANES 16
#define BLOCK 512


static ALWAYS_INLINE float masked_dy(int mode, const float *dy, const float *y, const float *x, size_t k, float fg,
                                     float fb)
{
    /* d where z > 0, else +0, as a bit mask: gcc leaves the float select
     * scalar inside run_sums' lanes ("control flow in loop") */
    float z = mode == MASK_Y ? y[k] : mode == MASK_X ? x[k] * fg + fb : 1.0f, d = dy[k];
    uint32_t b;
    memcpy(&b, &d, sizeof b);
    b &= 0u - (uint32_t)(z > 0.0f);
    memcpy(&d, &b, sizeof d);
    return d;
}

/* Over one contiguous run of n elements (an image's plane of one channel):
 * forward (dy == NULL): s1 += sum (x-k), s2 += sum (x-k)^2;
 * backward: s1 += sum dy', s2 += sum dy'*(x-k) (dy' masked by `mode`).
 * Float lanes within blocks of BLOCK elements (vectorised), double across. */
static ALWAYS_INLINE void run_sums(int mode, const float *x, const float *dy, const float *y, int n, float k, float fg,
                                   float fb, double *s1, double *s2)
{
    for (int i = 0; i < n; i += BLOCK) {
        int len = n - i < BLOCK ? n - i : BLOCK, j = 0;
        float a1[LANES] = {0}, a2[LANES] = {0};
        const float *xb = x + i;
        if (!dy) {
            for (; j + LANES <= len; j += LANES)
                for (int l = 0; l < LANES; l++) {
                    float d = xb[j + l] - k;
                    a1[l] += d;
                    a2[l] += d * d;
                }
            for (; j < len; j++) {
                float d = xb[j] - k;
                a1[0] += d;
                a2[0] += d * d;
            }
        } else {
            const float *db = dy + i, *yb = y ? y + i : NULL;
            for (; j + LANES <= len; j += LANES)
                for (int l = 0; l < LANES; l++) {
                    float d = masked_dy(mode, db, yb, xb, (size_t)(j + l), fg, fb);
                    a1[l] += d;
                    a2[l] += d * (xb[j + l] - k);
                }
            for (; j < len; j++) {
                float d = masked_dy(mode, db, yb, xb, (size_t)j, fg, fb);
                a1[0] += d;
                a2[0] += d * (xb[j] - k);
            }
        }
        double t1 = 0.0, t2 = 0.0;
        for (int l = 0; l < LANES; l++) t1 += (double)a1[l], t2 += (double)a2[l];
        *s1 += t1;
        *s2 += t2;
    }
}

/* dx over one run: k1*(dy' - k2 - (x - fm)*k3) (+ beta*dx) */
static ALWAYS_INLINE void run_dx(int mode, const float *x, const float *dy, const float *y, float *dx, int n, float fm,
                                 float fg, float fb, float k1, float k2, float k3, float beta)
{
    if (beta == 0.0f)
        for (int i = 0; i < n; i++) dx[i] = k1 * (masked_dy(mode, dy, y, x, (size_t)i, fg, fb) - k2 - (x[i] - fm) * k3);
    else
        for (int i = 0; i < n; i++)
            dx[i] = k1 * (masked_dy(mode, dy, y, x, (size_t)i, fg, fb) - k2 - (x[i] - fm) * k3) + beta * dx[i];
}

/* fp32 NCHW over planes: per (image, channel) plane partial sums into
 * part[img][2][c], combined per channel in image order (so results do not
 * depend on the thread count), then one element-wise pass over the planes.
 * Planes in memory order stream; a per-channel pass would touch n short runs
 * far apart (one cache line each on 4x4 planes). */

static long long plane_grain(const struct md_batchnorm_args *a)
{
    long long g = CPU_GRAIN / (a->hw > 0 ? a->hw : 1);
    return g > 0 ? g : 1;
}

static ALWAYS_INLINE void plane_sums_mode(const struct bn_ctx *c, long long b, long long e, int mode)
{
    const struct md_batchnorm_args *a = c->a;
    int C = a->c;
    const float *x = a->x, *dy = a->dy, *y = a->y;
    for (long long t = b; t < e; t++) {
        int img = (int)(t / C), ci = (int)(t % C);
        size_t o = (size_t)t * a->hw;
        double s1 = 0.0, s2 = 0.0;
        if (c->pass == 0)
            run_sums(MASK_NONE, x + o, NULL, NULL, a->hw, c->fk[ci], 0.0f, 0.0f, &s1, &s2);
        else
            run_sums(mode, x + o, dy + o, y ? y + o : NULL, a->hw, c->fk[ci], c->scale[ci], c->shift[ci], &s1, &s2);
        double *p = c->part + (size_t)img * 2 * C;
        p[ci] = s1;
        p[C + ci] = s2;
    }
}

static void plane_sums_range(void *vc, long long b, long long e)
{
    const struct bn_ctx *c = vc;
    switch (c->pass == 0 ? MASK_NONE : mask_mode(c->a)) {
    case MASK_NONE: plane_sums_mode(c, b, e, MASK_NONE); break;
    case MASK_Y: plane_sums_mode(c, b, e, MASK_Y); break;
    default: plane_sums_mode(c, b, e, MASK_X); break;
    }
}

static ALWAYS_INLINE void plane_dx_mode(const struct bn_ctx *c, long long b, long long e, int mode)
{
    const struct md_batchnorm_args *a = c->a;
    int C = a->c;
    const float *x = a->x, *dy = a->dy, *y = a->y;
    for (long long t = b; t < e; t++) {
        int ci = (int)(t % C);
        size_t o = (size_t)t * a->hw;
        run_dx(mode, x + o, dy + o, y ? y + o : NULL, (float *)a->dx + o, a->hw, c->fk[ci], c->scale[ci],
               c->shift[ci], c->k1[ci], c->k2[ci], c->k3[ci], a->beta);
    }
}

static void plane_apply_range(void *vc, long long b, long long e)
{
    const struct bn_ctx *c = vc;
    const struct md_batchnorm_args *a = c->a;
    if (c->pass == 0) {
        int C = a->c, relu = a->act == MD_ACT_RELU, hw = a->hw;
        float beta = a->beta;
        for (long long t = b; t < e; t++) {
            int ci = (int)(t % C);
            const float *x = (const float *)a->x + (size_t)t * hw;
            float *y = (float *)a->y + (size_t)t * hw, sc = c->scale[ci], sh = c->shift[ci];
            if (beta == 0.0f && relu)
                for (int i = 0; i < hw; i++) {
                    float v = x[i] * sc + sh;
                    y[i] = v > 0.0f ? v : 0.0f;
                }
            else if (beta == 0.0f)
                for (int i = 0; i < hw; i++) y[i] = x[i] * sc + sh;
            else
                for (int i = 0; i < hw; i++) {
                    float v = x[i] * sc + sh;
                    if (relu) v = v > 0.0f ? v : 0.0f;
                    y[i] = v + beta * y[i];
                }
        }
        return;
    }
    switch (mask_mode(a)) {
    case MASK_NONE: plane_dx_mode(c, b, e, MASK_NONE); break;
    case MASK_Y: plane_dx_mode(c, b, e, MASK_Y); break;
    default: plane_dx_mode(c, b, e, MASK_X); break;
    }
}

/* ---- the fp32 paths' drivers: the same passes over NHWC row chunks or NCHW planes ---- */

struct f32_split {
    long long sum_tasks, sum_grain, nparts; /* partial sums: tasks, grain, partials combined */
    md_range_fn sums;
    long long apply_tasks, apply_grain;     /* the element-wise pass */
    md_range_fn apply;
    size_t fk_stride;                       /* channel ci's first element: x[ci * fk_stride] */
};

static struct f32_split f32_split_of(const struct md_batchnorm_args *a, int nchw)
{
    long long rows = (long long)a->n * a->hw, planes = (long long)a->n * a->c;
    if (nchw) {
        struct f32_split s = {planes, plane_grain(a), a->n, plane_sums_range,
                              planes, plane_grain(a), plane_apply_range, (size_t)a->hw};
        if (a->pool) { /* the forward's statistics as above; the passes by plane */
            s.apply = pool_apply_nchw_range;
            if (a->dy) s.sums = pool_sums_nchw_range, s.apply = pool_dx_nchw_range;
        }
        return s;
    }
    long long nchunks = (rows + ROW_CHUNK - 1) / ROW_CHUNK;
    struct f32_split s = {nchunks, 1, nchunks, f32_nhwc_part_range,
                          rows, md_parallel_grain(rows, 16), f32_nhwc_apply_range, 1};
    if (a->pool) { /* the forward's statistics as above; the passes by pooled row */
        long long prow = (long long)a->n * (a->h / 2);
        s.apply_tasks = prow;
        s.apply_grain = md_parallel_grain(prow, 1);
        s.apply = pool_apply_range;
        if (a->dy) s.sum_tasks = s.nparts = prow, s.sums = pool_sums_range, s.apply = pool_dx_range;
    }
    return s;
}

static md_status f32_fwd(struct bn_ctx *c, int nchw)
{
    const struct md_batchnorm_args *a = c->a;
    struct f32_split s = f32_split_of(a, nchw);
    void *block;
    MD_TRY(bn_alloc(c, s.nparts, &block));
    double m = (double)a->n * a->hw;
    const float *x = a->x;
    /* the shift of the sums: each channel's first element */
    for (int ci = 0; ci < a->c; ci++) c->fk[ci] = m > 0 ? x[(size_t)ci * s.fk_stride] : 0.0f;
    if (a->training) {
        c->pass = 0;
        md_parallel_for(s.sum_tasks, s.sum_grain, s.sums, c);
        nhwc_combine(c, s.nparts);
    }
    for (int ci = 0; ci < a->c; ci++) {
        double mean = 0.0, var = 0.0;
        /* NCHW: no statistics of an empty batch (NHWC computes them, as NaN) */
        if (a->training && (!nchw || m > 0)) {
            double d = c->s1[ci] / m;
            mean = (double)c->fk[ci] + d;
            var = c->s2[ci] / m - d * d;
            if (var < 0.0) var = 0.0;
        }
        c->mean[ci] = mean;
        c->invstd[ci] = var; /* the variance, until bn_finalize */
    }
    if (a->training && a->sync) {
        md_status st = md_bn_sync_stats(a, m, c->mean, c->invstd, &m);
        if (st != MD_OK) {
            md_free(block);
            return st;
        }
    }
    for (int ci = 0; ci < a->c; ci++) bn_finalize(a, ci, c->mean[ci], c->invstd[ci], m, &c->scale[ci], &c->shift[ci]);
    c->pass = 0;
    md_parallel_for(s.apply_tasks, s.apply_grain, s.apply, c);
    md_free(block);
    return MD_OK;
}

/* Synchronised backward: *gs (2c, freed by the caller) = every rank's sums
 * s1, s2 (this rank's stay for dgamma, dbeta), *m their count. Without
 * sync nothing (*gs NULL). */
static md_status sync_sums(const struct bn_ctx *c, double *m, double **gs)
{
    const struct md_batchnorm_args *a = c->a;
    *gs = NULL;
    if (!a->training || !a->sync) return MD_OK;
    double *g = md_malloc(sizeof(double) * (2 * (size_t)a->c + 1));
    if (!g) return md_errf(MD_ERR_OOM, "cpu batchnorm_bwd: cannot allocate the synchronised sums");
    memcpy(g, c->s1, sizeof(double) * (size_t)a->c);
    memcpy(g + a->c, c->s2, sizeof(double) * (size_t)a->c);
    *gs = g;
    return md_bn_sync_sums(a, *m, g, g + a->c, m);
}

static md_status f32_bwd(struct bn_ctx *c, int nchw)
{
    const struct md_batchnorm_args *a = c->a;
    struct f32_split s = f32_split_of(a, nchw);
    void *block;
    MD_TRY(bn_alloc(c, s.nparts, &block));
    double m = (double)a->n * a->hw;
    bwd_scale_shift(c);
    for (int ci = 0; ci < a->c; ci++) c->fk[ci] = (float)c->mean[ci];
    c->pass = 1;
    md_parallel_for(s.sum_tasks, s.sum_grain, s.sums, c);
    nhwc_combine(c, s.nparts);
    for (int ci = 0; ci < a->c; ci++) {
        double invstd = c->invstd[ci], sdy = c->s1[ci];
        /* sum dy*(x - mean) from deviations to the float mean */
        c->s2[ci] = (c->s2[ci] - sdy * (c->mean[ci] - (double)c->fk[ci])) * invstd;
    }
    const double *g1 = c->s1, *g2 = c->s2;
    double *gs = NULL;
    md_status st = sync_sums(c, &m, &gs);
    if (gs) g1 = gs, g2 = gs + a->c;
    for (int ci = 0; st == MD_OK && ci < a->c; ci++) {
        double invstd = c->invstd[ci], gam = a->gamma ? (double)a->gamma[ci] : 1.0;
        c->k1[ci] = (float)(gam * invstd);
        c->k2[ci] = a->training ? (float)(g1[ci] / m) : 0.0f;
        c->k3[ci] = a->training ? (float)(g2[ci] / m * invstd) : 0.0f;
    }
    if (st == MD_OK && a->dx) md_parallel_for(s.apply_tasks, s.apply_grain, s.apply, c);
    if (st == MD_OK && a->conv) {
        struct md_bnpool p = bnpool_of(c);
        st = md_cpu_bnpool_conv_filter(&p, a->conv);
    }
    if (st == MD_OK) param_grads(a, c->s2, c->s1);
    md_free(gs);
    md_free(block);
    return st;
}

static void nchw_bwd_range(void *vc, long long b, long long e)
{
    const struct bn_ctx *c = vc;
    for (long long ci = b; ci < e; ci++) nchw_bwd_channel(c->a, (int)ci, c->a->dtype); /* fp16/bf16 */
}

/* synchronised fp16/bf16 NCHW: this rank's sums into s1, s2; then dx from g1, g2 */
static void nchw_sums_range(void *vc, long long b, long long e)
{
    const struct bn_ctx *c = vc;
    for (long long ci = b; ci < e; ci++)
        nchw_bwd_sums(c->a, (int)ci, c->a->dtype, c->mean[ci], c->invstd[ci], &c->s1[ci], &c->s2[ci]);
}

static void nchw_dx_range(void *vc, long long b, long long e)
{
    const struct bn_ctx *c = vc;
    for (long long ci = b; ci < e; ci++)
        nchw_bwd_dx(c->a, (int)ci, c->a->dtype, c->mean[ci], c->invstd[ci], c->g1[ci], c->g2[ci], c->gm);
}

static ALWAYS_INLINE void nhwc_bwd_rows(const struct bn_ctx *c, long long b, long long e, md_dtype t)
{
    const struct md_batchnorm_args *a = c->a;
    int relu = a->act == MD_ACT_RELU;
    double m = c->gm;
    for (long long r = b; r < e; r++) {
        size_t o = (size_t)r * a->c;
        for (int ci = 0; ci < a->c; ci++) {
            float xv = ldf(a->x, t, o + ci), dy = ldf(a->dy, t, o + ci);
            if (relu && (a->y ? ldf(a->y, t, o + ci) <= 0.0f : xv * c->scale[ci] + c->shift[ci] <= 0.0f)) dy = 0.0f;
            float xh = (float)(((double)xv - c->mean[ci]) * c->invstd[ci]);
            float k1 = (float)((double)c->scale[ci]);
            float v = a->training ? k1 * (dy - (float)(c->g1[ci] / m) - xh * (float)(c->g2[ci] / m)) : k1 * dy;
            if (a->beta != 0.0f) v += a->beta * ldf(a->dx, t, o + ci);
            md_store_f(a->dx, t, o + ci, v);
        }
    }
}

static void nhwc_bwd_range(void *vc, long long b, long long e)
{
    const struct bn_ctx *c = vc;
    if (c->a->dtype == MD_F32)
        nhwc_bwd_rows(c, b, e, MD_F32);
    else
        nhwc_bwd_rows(c, b, e, c->a->dtype);
}

md_status md_cpu_batchnorm_bwd(md_device *dev, const struct md_batchnorm_args *a)
{
    (void)dev;
    MD_TRY(bn_check("batchnorm_bwd", a));
    if (a->pool) {
        const char *why = pool_unfit(a);
        if (why || !a->dy)
            return md_errf(MD_ERR_UNSUPPORTED, "cpu batchnorm_bwd with a fused max pool: %s", why ? why : "no dy");
        if (a->training && a->sync && !(a->save_mean && a->save_invstd))
            return md_errf(MD_ERR_USAGE, "cpu batchnorm_bwd: synchronised statistics need the forward's saved ones");
        if (a->conv && (a->dx || a->layout != MD_NHWC))
            return md_errf(MD_ERR_USAGE, "cpu batchnorm_bwd: the filter gradient of its input's convolution goes "
                                         "instead of dx, channels-last");
        struct bn_ctx c = {.a = a};
        return f32_bwd(&c, a->layout == MD_NCHW);
    }
    if (a->conv) return md_errf(MD_ERR_UNSUPPORTED, "cpu batchnorm_bwd: the filter gradient of its input's "
                                                    "convolution needs a fused max pool");
    if (a->dres) return res_bwd(dev, a);
    struct bn_ctx c = {.a = a};
    int sync = a->training && a->sync;
    if (sync && !(a->save_mean && a->save_invstd))
        return md_errf(MD_ERR_USAGE, "cpu batchnorm_bwd: synchronised statistics need the forward's saved ones");
    if (a->layout == MD_NCHW && a->dtype == MD_F32) return f32_bwd(&c, 1);
    if (a->layout == MD_NCHW && !sync) {
        md_parallel_for(a->c, 1, nchw_bwd_range, &c);
        return MD_OK;
    }
    if (a->dtype == MD_F32) return f32_bwd(&c, 0);
    long long rows = (long long)a->n * a->hw, nchunks = (rows + ROW_CHUNK - 1) / ROW_CHUNK;
    void *block;
    MD_TRY(bn_alloc(&c, a->layout == MD_NCHW ? 0 : nchunks, &block));
    bwd_scale_shift(&c);
    if (a->layout == MD_NCHW) { /* synchronised fp16/bf16 */
        md_parallel_for(a->c, 1, nchw_sums_range, &c);
    } else {
        c.pass = 2;
        md_parallel_for(nchunks, 1, nhwc_part_range, &c);
        nhwc_combine(&c, nchunks);
    }
    double *gs = NULL;
    c.gm = (double)rows;
    md_status st = sync_sums(&c, &c.gm, &gs);
    c.g1 = gs ? gs : c.s1;
    c.g2 = gs ? gs + a->c : c.s2;
    if (st == MD_OK && a->dx)
        md_parallel_for(a->layout == MD_NCHW ? a->c : rows, a->layout == MD_NCHW ? 1 : md_parallel_grain(rows, 16),
                        a->layout == MD_NCHW ? nchw_dx_range : nhwc_bwd_range, &c);
    if (st == MD_OK) param_grads(a, c.s2, c.s1);
    md_free(gs);
    md_free(block);
    return st;
}

/* ---- layer normalisation over the last dimension -------------------------------------------------
 * Rows are independent: a task is a fixed chunk of rows (statistics in double
 * per row). dgamma/dbeta sum over rows: per chunk partials in double, added
 * in chunk order, so results do not depend on the thread count. */

#define LN_ROWS 16 /* rows per backward chunk */

struct ln_ctx {
    const struct md_layernorm_args *a;
    double *part; /* (nchunks, 2, d) backward partials of dgamma, dbeta */
};

static ALWAYS_INLINE void ln_row_stats(const struct md_layernorm_args *a, md_dtype t, size_t o, double *mean,
                                       double *rstd)
{
    double s = 0.0, ss = 0.0;
    for (int j = 0; j < a->d; j++) s += (double)ldf(a->x, t, o + j);
    double mu = s / a->d;
    for (int j = 0; j < a->d; j++) {
        double v = (double)ldf(a->x, t, o + j) - mu;
        ss += v * v;
    }
    *mean = mu;
    *rstd = 1.0 / sqrt(ss / a->d + (double)a->eps);
}

static ALWAYS_INLINE void ln_fwd_rows(const struct md_layernorm_args *a, md_dtype t, long long b, long long e)
{
    for (long long r = b; r < e; r++) {
        size_t o = (size_t)r * a->d;
        double mean, rstd;
        ln_row_stats(a, t, o, &mean, &rstd);
        if (a->mean) a->mean[r] = (float)mean;
        if (a->rstd) a->rstd[r] = (float)rstd;
        float fm = (float)mean, fr = (float)rstd;
        for (int j = 0; j < a->d; j++) {
            float v = (ldf(a->x, t, o + j) - fm) * fr;
            if (a->gamma) v *= a->gamma[j];
            if (a->beta_p) v += a->beta_p[j];
            if (a->beta != 0.0f) v += a->beta * ldf(a->y, t, o + j);
            md_store_f(a->y, t, o + j, v);
        }
    }
}

static void ln_fwd_range(void *vc, long long b, long long e)
{
    const struct ln_ctx *c = vc;
    if (c->a->dtype == MD_F32)
        ln_fwd_rows(c->a, MD_F32, b, e);
    else
        ln_fwd_rows(c->a, c->a->dtype, b, e);
}

static ALWAYS_INLINE void ln_bwd_chunk(const struct ln_ctx *c, md_dtype t, long long chunk)
{
    const struct md_layernorm_args *a = c->a;
    int D = a->d;
    long long r0 = chunk * LN_ROWS, r1 = r0 + LN_ROWS < a->rows ? r0 + LN_ROWS : a->rows;
    double *pg = c->part + (size_t)chunk * 2 * D, *pb = pg + D;
    memset(pg, 0, sizeof(double) * 2 * (size_t)D);
    for (long long r = r0; r < r1; r++) {
        size_t o = (size_t)r * D;
        double mean, rstd;
        if (a->mean && a->rstd) mean = (double)a->mean[r], rstd = (double)a->rstd[r];
        else ln_row_stats(a, t, o, &mean, &rstd);
        float fm = (float)mean, fr = (float)rstd;
        double sg = 0.0, sgx = 0.0;
        for (int j = 0; j < D; j++) {
            float xh = (ldf(a->x, t, o + j) - fm) * fr, dy = ldf(a->dy, t, o + j);
            float g = a->gamma ? dy * a->gamma[j] : dy;
            sg += (double)g;
            sgx += (double)g * (double)xh;
            pg[j] += (double)dy * (double)xh;
            pb[j] += (double)dy;
        }
        if (!a->dx) continue;
        float k1 = (float)(sg / D), k2 = (float)(sgx / D);
        for (int j = 0; j < D; j++) {
            float xh = (ldf(a->x, t, o + j) - fm) * fr, dy = ldf(a->dy, t, o + j);
            float g = a->gamma ? dy * a->gamma[j] : dy;
            float v = fr * (g - k1 - xh * k2);
            if (a->beta != 0.0f) v += a->beta * ldf(a->dx, t, o + j);
            md_store_f(a->dx, t, o + j, v);
        }
    }
}

static void ln_bwd_range(void *vc, long long b, long long e)
{
    const struct ln_ctx *c = vc;
    for (long long k = b; k < e; k++) {
        if (c->a->dtype == MD_F32)
            ln_bwd_chunk(c, MD_F32, k);
        else
            ln_bwd_chunk(c, c->a->dtype, k);
    }
}

md_status md_cpu_layernorm_fwd(md_device *dev, const struct md_layernorm_args *a)
{
    (void)dev;
    MD_TRY(md_cpu_dtype_check("layernorm_fwd", a->dtype));
    struct ln_ctx c = {a, NULL};
    long long per = a->d > 0 ? a->d : 1;
    md_parallel_for(a->rows, CPU_GRAIN / per + 1, ln_fwd_range, &c);
    return MD_OK;
}

md_status md_cpu_layernorm_bwd(md_device *dev, const struct md_layernorm_args *a)
{
    (void)dev;
    MD_TRY(md_cpu_dtype_check("layernorm_bwd", a->dtype));
    int D = a->d;
    long long nchunks = (a->rows + LN_ROWS - 1) / LN_ROWS;
    struct ln_ctx c = {a, md_malloc(sizeof(double) * ((size_t)nchunks * 2 * (size_t)D + 1))};
    if (!c.part) return md_errf(MD_ERR_OOM, "cpu layernorm_bwd: cannot allocate the partial sums");
    md_parallel_for(nchunks, 1, ln_bwd_range, &c);
    for (int j = 0; j < D; j++) {
        double sg = 0.0, sb = 0.0;
        for (long long k = 0; k < nchunks; k++) {
            sg += c.part[(size_t)k * 2 * D + j];
            sb += c.part[(size_t)k * 2 * D + D + j];
        }
        if (a->dgamma) a->dgamma[j] = (float)(sg + (a->beta != 0.0f ? (double)a->beta * (double)a->dgamma[j] : 0.0));
        if (a->dbeta) a->dbeta[j] = (float)(sb + (a->beta != 0.0f ? (double)a->beta * (double)a->dbeta[j] : 0.0));
    }
    md_free(c.part);
    return MD_OK;
}
