/* cpu_eltwise.c - element-wise CPU kernels: activations, dropout, ew, reduce,
 * cast, bias, channel slices, permute. Threaded over element ranges; fp32 has plain loops the
 * compiler vectorises, fp16/bf16 go through md_load_f/md_store_f. The
 * conventions (beta, masks) are those of src/backend/ref/ref_kernels.c. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/cpu_vec.h"
#include "backend/ref/ref_math.h"
#include "core/mem.h"
#include "core/rng.h"

/* out[i] = v + beta * out[i] (old value unread when beta == 0). */
static inline void st_beta(void *p, md_dtype t, size_t i, float v, float beta)
{
    if (beta != 0.0f) v += beta * md_load_f(p, t, i);
    md_store_f(p, t, i, v);
}

/* ---- activations --------------------------------------------------------------------- */

static void act_fwd_range(void *vc, long long b, long long e)
{
    const struct md_act_args *a = vc;
    if (a->dtype == MD_F32 && a->beta == 0.0f) {
        const float *x = a->x;
        float *y = a->y;
        switch (a->act) {
        case MD_ACT_RELU:
            for (long long i = b; i < e; i++) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
            return;
        case MD_ACT_NONE:
            if (x != y) memmove(y + b, x + b, sizeof(float) * (size_t)(e - b));
            return;
        default:
            for (long long i = b; i < e; i++) y[i] = md_act_f(a->act, x[i], a->alpha);
            return;
        }
    }
    for (long long i = b; i < e; i++)
        st_beta(a->y, a->dtype, (size_t)i, md_act_f(a->act, md_load_f(a->x, a->dtype, (size_t)i), a->alpha), a->beta);
}

/* d where z > 0, else +0 (z NaN: +0), as a bit mask: gcc leaves the float
 * select with a conditional load scalar ("control flow in loop"). */
static inline float pass_if_positive(float z, float d)
{
    uint32_t m;
    memcpy(&m, &d, sizeof m);
    m &= 0u - (uint32_t)(z > 0.0f);
    memcpy(&d, &m, sizeof d);
    return d;
}

static void act_bwd_range(void *vc, long long b, long long e)
{
    const struct md_act_args *a = vc;
    if (a->dtype == MD_F32) {
        const float *x = a->x, *dy = a->dy;
        float *dx = a->dx;
        float beta = a->beta;
        if (a->act == MD_ACT_RELU) {
            if (beta == 0.0f)
                for (long long i = b; i < e; i++) dx[i] = pass_if_positive(x[i], dy[i]);
            else
                for (long long i = b; i < e; i++) dx[i] = pass_if_positive(x[i], dy[i]) + beta * dx[i];
            return;
        }
        if (beta == 0.0f)
            for (long long i = b; i < e; i++) dx[i] = md_act_grad_f(a->act, x[i], a->alpha) * dy[i];
        else
            for (long long i = b; i < e; i++) dx[i] = md_act_grad_f(a->act, x[i], a->alpha) * dy[i] + beta * dx[i];
        return;
    }
    for (long long i = b; i < e; i++)
        st_beta(a->dx, a->dtype, (size_t)i,
                md_act_grad_f(a->act, md_load_f(a->x, a->dtype, (size_t)i), a->alpha) * md_load_f(a->dy, a->dtype, (size_t)i),
                a->beta);
}

static md_status act_check(const char *op, const struct md_act_args *a)
{
    MD_TRY(md_cpu_dtype_check(op, a->dtype));
    if (a->act < 0 || a->act >= MD_ACT_COUNT) return md_errf(MD_ERR_INTERNAL, "cpu %s: unknown activation %d", op, a->act);
    return MD_OK;
}

md_status md_cpu_act_fwd(md_device *dev, const struct md_act_args *a)
{
    (void)dev;
    MD_TRY(act_check("act_fwd", a));
    md_parallel_for((long long)a->n, CPU_GRAIN, act_fwd_range, (void *)a);
    return MD_OK;
}

md_status md_cpu_act_bwd(md_device *dev, const struct md_act_args *a)
{
    (void)dev;
    MD_TRY(act_check("act_bwd", a));
    md_parallel_for((long long)a->n, CPU_GRAIN, act_bwd_range, (void *)a);
    return MD_OK;
}

/* ---- dropout ------------------------------------------------------------------------------ */

static float drop_scale(float p) { return p < 1.0f ? (float)(1.0 / (1.0 - (double)p)) : 0.0f; }

/* Elements per task: the hash costs more than a copy. */
#define DROPOUT_GRAIN 4096

static void dropout_fwd_range(void *vc, long long b, long long e)
{
    const struct md_dropout_args *a = vc;
    float scale = drop_scale(a->p);
    if (a->dtype == MD_F32 && a->beta == 0.0f) { /* the common case, without the per-element dtype switch */
        const float *x = a->x;
        float *y = a->y;
        for (long long i = b; i < e; i++) {
            int keep = !(md_rng_uniform(a->seed, a->offset + (uint64_t)i) < a->p);
            if (a->mask) a->mask[i] = (uint8_t)keep;
            y[i] = keep ? x[i] * scale : 0.0f;
        }
        return;
    }
    for (long long i = b; i < e; i++) {
        int keep = !(md_rng_uniform(a->seed, a->offset + (uint64_t)i) < a->p);
        if (a->mask) a->mask[i] = (uint8_t)keep;
        st_beta(a->y, a->dtype, (size_t)i, keep ? md_load_f(a->x, a->dtype, (size_t)i) * scale : 0.0f, a->beta);
    }
}

static void dropout_bwd_range(void *vc, long long b, long long e)
{
    const struct md_dropout_args *a = vc;
    float scale = drop_scale(a->p);
    if (a->dtype == MD_F32 && a->beta == 0.0f && a->mask) {
        const float *dy = a->dy;
        float *dx = a->dx;
        for (long long i = b; i < e; i++) dx[i] = a->mask[i] ? dy[i] * scale : 0.0f;
        return;
    }
    for (long long i = b; i < e; i++) {
        int keep = a->mask ? a->mask[i] != 0 : !(md_rng_uniform(a->seed, a->offset + (uint64_t)i) < a->p);
        st_beta(a->dx, a->dtype, (size_t)i, keep ? md_load_f(a->dy, a->dtype, (size_t)i) * scale : 0.0f, a->beta);
    }
}

/* Either pass over the n elements, with the offset resolved first (a
 * device-side one read here). */
static md_status dropout_run(const char *op, const struct md_dropout_args *a, md_range_fn fn)
{
    MD_TRY(md_cpu_dtype_check(op, a->dtype));
    struct md_dropout_args r = *a;
    r.offset = md_dropout_offset(a);
    r.offset_dev = NULL;
    md_parallel_for((long long)a->n, DROPOUT_GRAIN, fn, &r);
    return MD_OK;
}

md_status md_cpu_dropout_fwd(md_device *dev, const struct md_dropout_args *a)
{
    (void)dev;
    return dropout_run("dropout_fwd", a, dropout_fwd_range);
}

md_status md_cpu_dropout_bwd(md_device *dev, const struct md_dropout_args *a)
{
    (void)dev;
    return dropout_run("dropout_bwd", a, dropout_bwd_range);
}

/* ---- ew ------------------------------------------------------------------------------------- */

/* alpha: a->alpha times *scale_dev (AXPBY only; FILL writes a->alpha) */
struct ew_ctx { const struct md_ew_args *a; float alpha; };

static void ew_range(void *vc, long long b, long long e)
{
    const struct ew_ctx *c = vc;
    const struct md_ew_args *a = c->a;
    md_dtype t = a->dtype;
    if (t == MD_F32) {
        const float *x = a->a, *z = a->b;
        float *y = a->y, al = c->alpha, be = a->beta;
        switch (a->op) {
        case MD_EW_AXPBY:
            if (be == 0.0f)
                for (long long i = b; i < e; i++) y[i] = al * x[i];
            else
                for (long long i = b; i < e; i++) y[i] = al * x[i] + be * z[i];
            return;
        case MD_EW_MUL: for (long long i = b; i < e; i++) y[i] = x[i] * z[i]; return;
        case MD_EW_FILL: for (long long i = b; i < e; i++) y[i] = a->alpha; return;
        default:
            if (x != y) memmove(y + b, x + b, sizeof(float) * (size_t)(e - b));
            return;
        }
    }
    for (long long i = b; i < e; i++) {
        size_t k = (size_t)i;
        float v;
        switch (a->op) {
        case MD_EW_AXPBY:
            v = c->alpha * md_load_f(a->a, t, k);
            if (a->beta != 0.0f) v += a->beta * md_load_f(a->b, t, k);
            break;
        case MD_EW_MUL: v = md_load_f(a->a, t, k) * md_load_f(a->b, t, k); break;
        case MD_EW_FILL: v = a->alpha; break;
        default: v = md_load_f(a->a, t, k); break;
        }
        md_store_f(a->y, t, k, v);
    }
}

md_status md_cpu_ew(md_device *dev, const struct md_ew_args *a)
{
    (void)dev;
    MD_TRY(md_cpu_dtype_check("ew", a->dtype));
    if (a->op < 0 || a->op >= MD_EW_COUNT) return md_errf(MD_ERR_INTERNAL, "cpu ew: unknown op %d", a->op);
    struct ew_ctx c = {a, a->alpha * (a->scale_dev ? *a->scale_dev : 1.0f)};
    md_parallel_for((long long)a->n, CPU_GRAIN, ew_range, &c);
    return MD_OK;
}

/* ---- reduce: fixed chunks, partials combined in chunk order (thread-count independent) ---- */

#define RED_CHUNK 65536
#define RED_LANES 8

struct red_ctx { const struct md_reduce_args *a; double *part; };

static void reduce_range(void *vc, long long b, long long e)
{
    const struct red_ctx *c = vc;
    const struct md_reduce_args *a = c->a;
    double s = 0.0;
    if (a->dtype == MD_F32) {
        /* RED_LANES running sums (one chain of additions would wait on each
         * add's latency), added in lane order: the same for any thread count */
        const float *x = a->a, *z = a->b;
        double l[RED_LANES] = {0};
        long long i = b;
        if (a->op == MD_RED_SUMSQ) /* the gradients' norm, every step */
            for (; i + RED_LANES <= e; i += RED_LANES)
#pragma GCC unroll 8
                for (int k = 0; k < RED_LANES; k++) l[k] += (double)x[i + k] * (double)x[i + k];
        for (; i + RED_LANES <= e; i += RED_LANES)
            for (int k = 0; k < RED_LANES; k++) {
                double v = (double)x[i + k];
                l[k] += a->op == MD_RED_SUM ? v : a->op == MD_RED_SUMSQ ? v * v : v * (double)z[i + k];
            }
        for (int k = 0; i < e; i++, k++) {
            double v = (double)x[i];
            l[k] += a->op == MD_RED_SUM ? v : a->op == MD_RED_SUMSQ ? v * v : v * (double)z[i];
        }
        for (int k = 0; k < RED_LANES; k++) s += l[k];
    } else {
        for (long long i = b; i < e; i++) {
            double v = (double)md_load_f(a->a, a->dtype, (size_t)i);
            s += a->op == MD_RED_SUM ? v : a->op == MD_RED_SUMSQ ? v * v : v * (double)md_load_f(a->b, a->dtype, (size_t)i);
        }
    }
    c->part[b / RED_CHUNK] = s;
}

md_status md_cpu_reduce(md_device *dev, const struct md_reduce_args *a)
{
    (void)dev;
    MD_TRY(md_cpu_dtype_check("reduce", a->dtype));
    if (a->op < MD_RED_SUM || a->op > MD_RED_DOT) return md_errf(MD_ERR_INTERNAL, "cpu reduce: unknown op %d", a->op);
    size_t nchunks = (a->n + RED_CHUNK - 1) / RED_CHUNK;
    double one = 0.0, *part = nchunks > 1 ? md_calloc(nchunks, sizeof *part) : &one;
    if (!part) return MD_ERR_OOM;
    struct red_ctx c = {a, part};
    md_parallel_for((long long)a->n, RED_CHUNK, reduce_range, &c);
    double s = 0.0;
    for (size_t i = 0; i < nchunks; i++) s += part[i];
    if (part != &one) md_free(part);
    if (a->beta != 0.0f) s += (double)a->beta * (double)*a->out;
    *a->out = (float)s;
    return MD_OK;
}

/* ---- cast --------------------------------------------------------------------------------------- */

static void cast_range(void *vc, long long b, long long e)
{
    const struct md_cast_args *a = vc;
    if (a->src_type == a->dst_type) {
        size_t es = md_dtype_size(a->src_type);
        memmove((char *)a->dst + (size_t)b * es, (const char *)a->src + (size_t)b * es, (size_t)(e - b) * es);
        return;
    }
    for (long long i = b; i < e; i++) md_store_f(a->dst, a->dst_type, (size_t)i, md_load_f(a->src, a->src_type, (size_t)i));
}

md_status md_cpu_cast(md_device *dev, const struct md_cast_args *a)
{
    (void)dev;
    MD_TRY(md_cpu_dtype_check("cast", a->src_type));
    MD_TRY(md_cpu_dtype_check("cast", a->dst_type));
    md_parallel_for((long long)a->n, CPU_GRAIN, cast_range, (void *)a);
    return MD_OK;
}

/* ---- bias ------------------------------------------------------------------------------------------ */

static void bias_add_range(void *vc, long long b, long long e)
{
    const struct md_bias_args *a = vc;
    /* one task = one image (NHWC: its hw rows of c; NCHW: its c planes of hw) */
    for (long long ni = b; ni < e; ni++)
        for (int ci = 0; ci < a->c; ci++)
            for (int i = 0; i < a->hw; i++) {
                size_t o = md_nci(a->layout, a->c, a->hw, (int)ni, ci, i);
                if (a->dtype == MD_F32)
                    ((float *)a->y)[o] += a->bias[ci];
                else
                    md_store_f(a->y, a->dtype, o, md_load_f(a->y, a->dtype, o) + a->bias[ci]);
            }
}

/* tasks tasks of per elements each (images or channels), after the dtype check. */
static md_status bias_run(const char *op, const struct md_bias_args *a, long long tasks, long long per, md_range_fn fn)
{
    MD_TRY(md_cpu_dtype_check(op, a->dtype));
    md_parallel_for(tasks, md_cpu_tasks_per_chunk(per, CPU_GRAIN), fn, (void *)a);
    return MD_OK;
}

md_status md_cpu_bias_add(md_device *dev, const struct md_bias_args *a)
{
    (void)dev;
    return bias_run("bias_add", a, a->n, (long long)a->c * a->hw, bias_add_range);
}

static void bias_grad_range(void *vc, long long b, long long e)
{
    const struct md_bias_args *a = vc;
    for (long long ci = b; ci < e; ci++) {
        double s = 0.0;
        for (int ni = 0; ni < a->n; ni++)
            for (int i = 0; i < a->hw; i++) s += (double)md_load_f(a->dy, a->dtype, md_nci(a->layout, a->c, a->hw, ni, (int)ci, i));
        if (a->beta != 0.0f) s += (double)a->beta * (double)a->dbias[ci];
        a->dbias[ci] = (float)s;
    }
}

md_status md_cpu_bias_grad(md_device *dev, const struct md_bias_args *a)
{
    (void)dev;
    return bias_run("bias_grad", a, a->c, (long long)a->n * a->hw, bias_grad_range);
}

/* ---- channel slices ------------------------------------------------------------------------------------- */

static void chslice_range(void *vc, long long b, long long e)
{
    const struct md_chslice_args *a = vc;
    size_t es = md_dtype_size(a->dtype);
    for (long long ni = b; ni < e; ni++) {
        if (a->layout == MD_NCHW) {
            /* a contiguous block of cc*hw per image */
            size_t len = (size_t)a->cc * a->hw;
            size_t so = ((size_t)ni * a->src_c + a->src_off) * a->hw, d0 = ((size_t)ni * a->dst_c + a->dst_off) * a->hw;
            if (a->beta == 0.0f) {
                memcpy((char *)a->dst + d0 * es, (const char *)a->src + so * es, len * es);
                continue;
            }
            for (size_t i = 0; i < len; i++) st_beta(a->dst, a->dtype, d0 + i, md_load_f(a->src, a->dtype, so + i), a->beta);
        } else {
            for (int i = 0; i < a->hw; i++) {
                size_t so = ((size_t)ni * a->hw + i) * a->src_c + a->src_off;
                size_t d0 = ((size_t)ni * a->hw + i) * a->dst_c + a->dst_off;
                if (a->beta == 0.0f) {
                    memcpy((char *)a->dst + d0 * es, (const char *)a->src + so * es, (size_t)a->cc * es);
                    continue;
                }
                for (int k = 0; k < a->cc; k++)
                    st_beta(a->dst, a->dtype, d0 + k, md_load_f(a->src, a->dtype, so + k), a->beta);
            }
        }
    }
}

md_status md_cpu_chslice(md_device *dev, const struct md_chslice_args *a)
{
    (void)dev;
    MD_TRY(md_cpu_dtype_check("chslice", a->dtype));
    md_parallel_for(a->n, 1, chslice_range, (void *)a);
    return MD_OK;
}

/* ---- permute: blocked transpose of each image's (c, hw) <-> (hw, c) ----------------------------------------- */

struct perm_ctx { const struct md_permute_args *a; int rows, cols; };

/* d (cols x rows) <- the block [r0, r1) x [c0, c1) of s (rows x cols)
 * transposed: 4 x 4 pieces in vectors, the edges one at a time */
static void transpose_f32(const float *s, float *d, int rows, int cols, int r0, int r1, int c0, int c1)
{
    int r = r0;
#if MD_VW == 4
    for (; r + 4 <= r1; r += 4) {
        int k = c0;
        for (; k + 4 <= c1; k += 4) {
            const float *p = s + (size_t)r * cols + k;
            md_vf a = md_vload(p), b = md_vload(p + cols), e = md_vload(p + 2 * cols), f = md_vload(p + 3 * cols);
            md_vf t0 = MD_VSHUF(a, b, 0, 4, 1, 5), t1 = MD_VSHUF(a, b, 2, 6, 3, 7);
            md_vf t2 = MD_VSHUF(e, f, 0, 4, 1, 5), t3 = MD_VSHUF(e, f, 2, 6, 3, 7);
            float *q = d + (size_t)k * rows + r;
            md_vstore(q, MD_VSHUF(t0, t2, 0, 1, 4, 5));
            md_vstore(q + rows, MD_VSHUF(t0, t2, 2, 3, 6, 7));
            md_vstore(q + 2 * rows, MD_VSHUF(t1, t3, 0, 1, 4, 5));
            md_vstore(q + 3 * rows, MD_VSHUF(t1, t3, 2, 3, 6, 7));
        }
        for (; k < c1; k++)
            for (int i = 0; i < 4; i++) d[(size_t)k * rows + r + i] = s[(size_t)(r + i) * cols + k];
    }
#endif
    for (; r < r1; r++)
        for (int k = c0; k < c1; k++) d[(size_t)k * rows + r] = s[(size_t)r * cols + k];
}

static void permute_range(void *vc, long long b, long long e)
{
    const struct perm_ctx *c = vc;
    const struct md_permute_args *a = c->a;
    size_t es = md_dtype_size(a->dtype), img = (size_t)c->rows * c->cols;
    enum { T = 32 };
    for (long long ni = b; ni < e; ni++) {
        const char *s = (const char *)a->src + (size_t)ni * img * es;
        char *d = (char *)a->dst + (size_t)ni * img * es;
        /* src (rows, cols) -> dst (cols, rows) */
        for (int r0 = 0; r0 < c->rows; r0 += T)
            for (int c0 = 0; c0 < c->cols; c0 += T) {
                int r1 = r0 + T < c->rows ? r0 + T : c->rows, c1 = c0 + T < c->cols ? c0 + T : c->cols;
                if (es == 4) {
                    transpose_f32((const float *)s, (float *)d, c->rows, c->cols, r0, r1, c0, c1);
                } else {
                    const uint16_t *sh = (const uint16_t *)s;
                    uint16_t *dh = (uint16_t *)d;
                    for (int r = r0; r < r1; r++)
                        for (int k = c0; k < c1; k++) dh[(size_t)k * c->rows + r] = sh[(size_t)r * c->cols + k];
                }
            }
    }
}

md_status md_cpu_permute(md_device *dev, const struct md_permute_args *a)
{
    (void)dev;
    MD_TRY(md_cpu_dtype_check("permute", a->dtype));
    int hw = a->h * a->w;
    struct perm_ctx c = {a, a->to_nhwc ? a->c : hw, a->to_nhwc ? hw : a->c};
    md_parallel_for(a->n, 1, permute_range, &c);
    return MD_OK;
}
