/* model_exec.c - a model on a device: binding, parameter initialisation, the
 * activation plan (one arena, buffers placed by lifetime), forward, loss,
 * backward with gradient checkpointing, diagnostics.
 *
 * Timeline used by the planner (one tick per kernel group):
 *   forward:   layer i at tick i (inputs first), the loss at tick L;
 *   backward:  layers in reverse; with --grad-ckpt, segment by segment
 *              (a segment = one top-level config entry, e.g. one residual
 *              block): first the segment's layers whose outputs were not kept
 *              are recomputed, then its backward runs.
 * A buffer lives from the tick that writes it to the last tick that reads it;
 * buffers whose lifetimes do not overlap share memory (greedy, largest first).
 * Without compile every buffer gets its own memory.
 */
#include "nn/layer.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "backend/kernels_call.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/rng.h"
#include "core/safetensors.h"
#include "core/timer.h"


#define NONE SIZE_MAX
#define ALIGN 256

/* Elements per sample: the fold's items of `out` (docs/tiles.md). */
static size_t numel(const struct md_layer *L) { return md_shape_numel(L->out) * (size_t)L->fold; }

/* Layers whose backward reads their input activations / their own output. */
static int needs_x(const struct md_layer *L) { return L->ops->needs_x && L->ops->needs_x(L); }
static int needs_y(const struct md_layer *L) { return L->ops->needs_y && L->ops->needs_y(L); }
static int needs_input(const struct md_layer *L, int k)
{
    return L->ops->needs_input ? L->ops->needs_input(L, k) : needs_x(L);
}

/* Whether layer i has an activation buffer of its own: not an alias, and
 * not an input read in place (fp32). */
static int has_act(const struct md_model *m, int i)
{
    if (m->layers[i].alias >= 0) return 0;
    return i >= m->ninputs || m->opts.compute_dtype != MD_F32;
}

/* ---- planning ---------------------------------------------------------------------- */

struct pbuf { size_t size, off; int t0, t1; size_t *dst; };

static int pbuf_cmp(const void *a, const void *b)
{
    const struct pbuf *x = *(const struct pbuf *const *)a, *y = *(const struct pbuf *const *)b;
    if (x->size != y->size) return x->size < y->size ? 1 : -1;
    return x->t0 - y->t0;
}

/* What each tensor's readers need, gathered in one pass over the layers'
 * inputs (a scan of every later layer per tensor was quadratic in the
 * number of layers). Ticks (F, R, B) are filled in later by ticks(). */
struct readers {
    int nreads;  /* inputs reading it (a layer reading it twice counts twice) */
    int reader;  /* the last layer reading it, -1 if none */
    int outside; /* read by a layer of another checkpoint segment */
};

static void gather_readers(const struct md_model *m, struct readers *rd)
{
    for (int t = 0; t < m->nlayers; t++) rd[t] = (struct readers){0, -1, 0};
    for (int j = 0; j < m->nlayers; j++) {
        const struct md_layer *C = &m->layers[j];
        if (C->alias >= 0) continue;
        for (int k = 0; k < C->nin; k++) {
            int t = md_model_tensor_of(m, C->in[k]);
            rd[t].nreads++;
            rd[t].reader = j;
            if (C->group != m->layers[t].group) rd[t].outside = 1;
        }
    }
}

/* A tensor whose consumers all sit in its own checkpoint segment is
 * "internal": with --grad-ckpt it is dropped after forward and recomputed. */
static int internal(const struct md_model *m, const struct readers *rd, int t, int ckpt)
{
    if (!ckpt || t < m->ninputs || t == md_model_tensor_of(m, m->nlayers - 1)) return 0;
    return !rd[t].outside;
}

/* Ticks: F (forward), R (recompute, -1 if none), B (backward). */
static md_status ticks(const struct md_model *m, const struct readers *rd, int ckpt, int *F, int *R, int *B,
                       int *loss_tick)
{
    int L = m->nlayers, t = 0;
    for (int i = 0; i < L; i++) { F[i] = t++; R[i] = -1; B[i] = -1; }
    *loss_tick = t++;
    int hi = L - 1;
    while (hi >= m->ninputs) {
        int lo = hi;
        if (ckpt)
            while (lo - 1 >= m->ninputs && m->layers[lo - 1].group == m->layers[hi].group) lo--;
        for (int i = lo; i <= hi; i++)
            if (has_act(m, i) && internal(m, rd, i, ckpt)) R[i] = t++;
        for (int i = hi; i >= lo; i--) B[i] = t++;
        hi = lo - 1;
    }
    for (int i = 0; i < m->ninputs; i++) B[i] = t;
    return MD_OK;
}

/* The gradient of a tensor read only by one layer that passes its gradient
 * on unchanged (ops->passes_dy: an add) equals that layer's gradient: it
 * shares the layer's gradient buffer instead of receiving a copy (as
 * autograd passes the same gradient to both operands of a sum). Fills
 * galias[t] with that layer, -1 otherwise. Not for the output of a layer
 * whose backward changes its gradient in place (ops->clobbers_dy: an add
 * with a fused activation), which would change what the other operands of
 * the outer add read. */
static void grad_aliases(const struct md_model *m, const struct readers *rd, int *galias)
{
    int L = m->nlayers, last = md_model_tensor_of(m, L - 1);
    for (int t = 0; t < L; t++) {
        galias[t] = -1;
        const struct md_layer *T = &m->layers[t];
        if (T->alias >= 0 || t < m->ninputs || t == last) continue;
        if (T->ops->clobbers_dy && T->ops->clobbers_dy(T)) continue;
        if (rd[t].nreads != 1) continue;
        const struct md_layer *R = &m->layers[rd[t].reader];
        if (R->ops->passes_dy && R->ops->passes_dy(R)) galias[t] = rd[t].reader;
    }
}

md_status md_model_plan_make(const struct md_model *m, int batch, int training, struct md_model_plan *plan)
{
    md_status st = MD_OK;
    int L = m->nlayers;
    int ckpt = training && m->opts.grad_ckpt;
    size_t es = md_dtype_size(m->opts.compute_dtype);
    /* per tensor: ticks F, R, B; readers' last F, R, B (of those reading
     * x in backward) and first B; the gradient alias root and the last
     * backward tick among the tensors aliased to it */
    int *F = md_calloc((size_t)L * 9, sizeof *F);
    struct readers *rd = md_calloc((size_t)L, sizeof *rd);
    struct pbuf *bufs = md_calloc((size_t)L * 3, sizeof *bufs);
    struct pbuf **order = md_calloc((size_t)L * 3, sizeof *order);
    struct pbuf **placed = md_calloc((size_t)L * 3, sizeof *placed);
    int *galias = md_malloc((size_t)L * sizeof *galias);
    memset(plan, 0, sizeof *plan);
    plan->off_fwd = md_malloc((size_t)L * sizeof(size_t));
    plan->off_bwd = md_malloc((size_t)L * sizeof(size_t));
    plan->goff = md_malloc((size_t)L * sizeof(size_t));
    plan->recompute = md_calloc((size_t)L, 1);
    if (!F || !rd || !bufs || !order || !placed || !galias || !plan->off_fwd || !plan->off_bwd || !plan->goff ||
        !plan->recompute) {
        st = md_errf(MD_ERR_OOM, "model: out of host memory while planning");
        goto fail;
    }
    int *R = F + L, *B = F + 2 * L, loss_tick;
    int *lastF = F + 3 * L, *lastR = F + 4 * L, *lastB = F + 5 * L, *firstB = F + 6 * L;
    int *root = F + 7 * L, *rootB = F + 8 * L;
    gather_readers(m, rd);
    ticks(m, rd, ckpt, F, R, B, &loss_tick);
    for (int t = 0; t < L; t++) plan->recompute[t] = R[t] >= 0;
    grad_aliases(m, rd, galias);
    for (int t = 0; t < L; t++) {
        lastF[t] = F[t];
        lastR[t] = lastB[t] = firstB[t] = -1;
    }
    for (int j = 0; j < L; j++) {
        const struct md_layer *C = &m->layers[j];
        if (C->alias >= 0) continue;
        for (int k = 0; k < C->nin; k++) {
            int t = md_model_tensor_of(m, C->in[k]);
            if (F[j] > lastF[t]) lastF[t] = F[j];
            if (R[j] > lastR[t]) lastR[t] = R[j];
            if (needs_input(C, k) && B[j] > lastB[t]) lastB[t] = B[j];
            if (firstB[t] < 0 || B[j] < firstB[t]) firstB[t] = B[j];
        }
    }
    /* an alias points to a later layer: roots resolve from the end */
    for (int t = L - 1; t >= 0; t--) {
        root[t] = galias[t] >= 0 ? root[galias[t]] : t;
        rootB[t] = -1;
    }
    for (int u = 0; u < L; u++)
        if (galias[u] >= 0 && B[u] > rootB[root[u]]) rootB[root[u]] = B[u];
    int last = md_model_tensor_of(m, L - 1);
    int nb = 0;
    for (int t = 0; t < L; t++) {
        plan->off_fwd[t] = plan->off_bwd[t] = plan->goff[t] = NONE;
        const struct md_layer *T = &m->layers[t];
        if (T->alias >= 0) continue;
        size_t bytes = ((size_t)batch * numel(T) * es + ALIGN - 1) / ALIGN * ALIGN;
        int lf = t == last ? loss_tick : lastF[t];
        if (has_act(m, t)) {
            if (!training) {
                bufs[nb++] = (struct pbuf){bytes, 0, F[t], lf, &plan->off_fwd[t]};
            } else if (R[t] >= 0) {
                bufs[nb++] = (struct pbuf){bytes, 0, F[t], lf, &plan->off_fwd[t]};
                int e = R[t];
                if (lastR[t] > e) e = lastR[t];
                if (lastB[t] > e) e = lastB[t];
                if (needs_y(T) && B[t] > e) e = B[t];
                bufs[nb++] = (struct pbuf){bytes, 0, R[t], e, &plan->off_bwd[t]};
            } else {
                int e = lf;
                if (lastB[t] > e) e = lastB[t];
                if (needs_y(T) && B[t] > e) e = B[t];
                bufs[nb++] = (struct pbuf){bytes, 0, F[t], e, &plan->off_fwd[t]};
            }
        }
        if (training && galias[t] < 0) {
            int s = t == last ? loss_tick : (firstB[t] >= 0 ? firstB[t] : B[t]);
            /* the buffer also serves the tensors whose gradient it is (until their backward) */
            int e = B[t] > rootB[t] ? B[t] : rootB[t];
            bufs[nb++] = (struct pbuf){bytes, 0, s, e, &plan->goff[t]};
        }
    }
    for (int i = 0; i < nb; i++) order[i] = &bufs[i];
    qsort(order, (size_t)nb, sizeof *order, pbuf_cmp);
    /* First fit, largest first: each buffer goes at the lowest offset clear
     * of the placed buffers it overlaps in time. `placed` stays sorted by
     * offset, so no sort per buffer; still quadratic when every lifetime
     * overlaps every other (training keeps each activation until its
     * backward), which the layer bound of model configs caps. */
    size_t total = 0;
    int np = 0;
    for (int i = 0; i < nb; i++) {
        struct pbuf *b = order[i];
        size_t off = 0;
        if (m->opts.compile) {
            for (int j = 0; j < np; j++) {
                const struct pbuf *q = placed[j];
                if (!(q->t0 <= b->t1 && b->t0 <= q->t1)) continue;
                if (q->off >= off + b->size) break;
                if (q->off + q->size > off) off = q->off + q->size;
            }
        } else {
            off = total;
        }
        b->off = off;
        if (off + b->size > total) total = off + b->size;
        int lo = 0, hi = np; /* after every placed buffer with offset <= off */
        while (lo < hi) {
            int mid = (lo + hi) / 2;
            if (placed[mid]->off <= off) lo = mid + 1;
            else hi = mid;
        }
        memmove(placed + lo + 1, placed + lo, (size_t)(np - lo) * sizeof *placed);
        placed[lo] = b;
        np++;
    }
    for (int i = 0; i < nb; i++) *bufs[i].dst = bufs[i].off;
    if (training)
        for (int t = 0; t < L; t++)
            if (galias[t] >= 0) plan->goff[t] = plan->goff[root[t]];
    for (int t = 0; t < L; t++)
        if (plan->off_bwd[t] == NONE) plan->off_bwd[t] = plan->off_fwd[t];
    plan->bytes = total;
fail:
    md_free(F);
    md_free(rd);
    md_free(bufs);
    md_free(order);
    md_free(placed);
    md_free(galias);
    if (st != MD_OK) md_model_plan_free(plan);
    return st;
}

void md_model_plan_free(struct md_model_plan *plan)
{
    md_free(plan->off_fwd);
    md_free(plan->off_bwd);
    md_free(plan->goff);
    md_free(plan->recompute);
    memset(plan, 0, sizeof *plan);
}

size_t md_model_activation_bytes(const md_model *m, int batch, int training)
{
    struct md_model_plan p;
    if (md_model_plan_make(m, batch, training, &p) != MD_OK) return 0;
    size_t b = p.bytes;
    md_model_plan_free(&p);
    return b;
}

/* ---- binding ------------------------------------------------------------------------ */

struct md_model_prof;
static void prof_free(md_device *dev, struct md_model_prof *p);
static void cap_free(struct md_model *m);

static void unbind(struct md_model *m)
{
    if (!m->dev) return;
    md_device *d = m->dev;
    md_dev_free(d, m->params);
    md_dev_free(d, m->grads);
    md_dev_free(d, m->params_half);
    md_dev_free(d, m->grads_half);
    md_dev_free(d, m->bn_stats);
    md_dev_free(d, m->bn_save);
    md_dev_free(d, m->masks);
    md_dev_free(d, m->scratch);
    md_dev_free(d, m->arena);
    for (int i = 0; m->own_inputs && i < m->ninputs; i++) md_dev_free(d, m->own_inputs[i]);
    md_free(m->inputs);
    md_free(m->own_inputs);
    m->own_inputs = NULL;
    md_free(m->written);
    md_model_plan_free(&m->plan_train);
    md_model_plan_free(&m->plan_eval);
    m->params = m->grads = m->bn_stats = m->bn_save = m->scratch = NULL;
    m->params_half = m->grads_half = NULL;
    m->masks = NULL;
    m->arena = NULL;
    m->inputs = NULL;
    m->written = NULL;
    m->dev = NULL;
    m->max_batch = 0;
}

void md_model_free(md_model *m)
{
    if (!m) return;
    if (m->prof) prof_free(m->dev, m->prof);
    m->prof = NULL;
    cap_free(m);
    unbind(m);
    md_model_free_host(m);
}

/* Host initial values of every parameter (ops->init; as PyTorch/torchvision
 * do). Each tensor draws from its own counter-based stream, so values do not
 * depend on the device. The kinds write PyTorch's order; NHWC conv weights
 * are permuted after. */
static void init_host(const struct md_model *m, float *p)
{
    for (int i = m->ninputs; i < m->nlayers; i++) {
        const struct md_layer *L = &m->layers[i];
        if (L->ops->init) L->ops->init(m, L, p);
    }
    size_t most = 0;
    for (int t = 0; t < m->ntensors; t++)
        if (m->tensors[t].khwc && m->tensors[t].numel > most) most = m->tensors[t].numel;
    if (!most) return;
    float *tmp = md_malloc(most * sizeof *tmp);
    MD_ASSERT(tmp);
    for (int t = 0; t < m->ntensors; t++) {
        const struct md_param_info *ti = &m->tensors[t];
        if (ti->khwc)
            md_filter_permute(p + ti->offset, tmp, ti->shape[0], ti->shape[1], ti->shape[2] * ti->shape[3], 1);
    }
    md_free(tmp);
}

md_status md_model_params_changed(md_model *m)
{
    if (!m->dev) return md_errf(MD_ERR_INTERNAL, "model: not bound to a device");
    if (!m->params_half) return MD_OK;
    struct md_cast_args c = {m->nparams, MD_F32, m->opts.compute_dtype, m->params, m->params_half};
    return md_k_cast(m->dev, &c);
}

static md_status upload_initial(struct md_model *m)
{
    md_status st = MD_OK;
    float *host = md_calloc(m->nparams + 2 * m->nstats + 1, sizeof *host);
    if (!host) return md_errf(MD_ERR_OOM, "model %s: out of host memory for initial parameters", m->name);
    init_host(m, host);
    if ((st = md_dev_upload(m->dev, m->params, host, m->nparams * sizeof *host)) != MD_OK) goto fail;
    float *stats = host + m->nparams;
    memset(stats, 0, m->nstats * sizeof *stats);
    struct md_param_decl d[MD_LAYER_MAX_PARAMS];
    for (int i = m->ninputs; i < m->nlayers; i++) {
        const struct md_layer *L = &m->layers[i];
        int nb = L->ops->buffers ? L->ops->buffers(m, L, d) : 0;
        size_t off = L->stat_off;
        for (int k = 0; k < nb; k++) {
            size_t ne = 1;
            for (int j = 0; j < d[k].ndim; j++) ne *= (size_t)d[k].shape[j];
            for (size_t e = 0; e < ne; e++) stats[off + e] = d[k].fill;
            off += ne;
        }
    }
    if (m->nstats && (st = md_dev_upload(m->dev, m->bn_stats, stats, m->nstats * sizeof *stats)) != MD_OK) goto fail;
    if ((st = md_dev_memset0(m->dev, m->grads, m->nparams * sizeof(float))) != MD_OK) goto fail;
    st = md_model_params_changed(m);
fail:
    md_free(host);
    return st;
}

static md_status dalloc(struct md_model *m, size_t bytes, void **p, const char *what)
{
    char w[160];
    snprintf(w, sizeof w, "model %s: %s", m->name, what);
    return md_dev_alloc(m->dev, bytes ? bytes : 1, p, w);
}

void md_model_fuse_for(md_model *m, md_device *dev)
{
    md_model_fuse_filters(m, 0); /* before the pools they need change */
    md_model_fuse_pools(m, md_dev_batchnorm_pool(dev, m->opts.layout, m->opts.compute_dtype));
    md_model_fuse_filters(m, md_dev_batchnorm_pool_conv(dev, m->opts.layout, m->opts.compute_dtype));
}

md_status md_model_bind(md_model *m, md_device *dev, int max_batch)
{
    md_status st = MD_OK;
    if (max_batch < 1) return md_errf(MD_ERR_USAGE, "model %s: batch size must be at least 1", m->name);
    unbind(m);
    m->dev = dev;
    m->max_batch = max_batch;
    md_model_fuse_for(m, dev);
    size_t es = md_dtype_size(m->opts.compute_dtype);
    int half = m->opts.compute_dtype != MD_F32;
    if ((st = md_model_plan_make(m, max_batch, 1, &m->plan_train)) != MD_OK) goto fail;
    if ((st = md_model_plan_make(m, max_batch, 0, &m->plan_eval)) != MD_OK) goto fail;
    m->inputs = md_calloc((size_t)m->ninputs, sizeof *m->inputs);
    m->own_inputs = md_calloc((size_t)m->ninputs, sizeof *m->own_inputs);
    m->written = md_calloc((size_t)m->nlayers, sizeof *m->written);
    if (!m->inputs || !m->own_inputs || !m->written) { st = md_errf(MD_ERR_OOM, "model: out of host memory"); goto fail; }
    if ((st = dalloc(m, m->nparams * 4, (void **)&m->params, "parameters")) != MD_OK) goto fail;
    if ((st = dalloc(m, m->nparams * 4, (void **)&m->grads, "gradients")) != MD_OK) goto fail;
    if (half) {
        if ((st = dalloc(m, m->nparams * es, &m->params_half, "half weights")) != MD_OK) goto fail;
        if ((st = dalloc(m, m->ndecay * es, &m->grads_half, "half weight gradients")) != MD_OK) goto fail;
    }
    if ((st = dalloc(m, m->nstats * 4, (void **)&m->bn_stats, "BN running statistics")) != MD_OK) goto fail;
    if ((st = dalloc(m, m->nstats * 4, (void **)&m->bn_save, "BN batch statistics")) != MD_OK) goto fail;
    if ((st = dalloc(m, m->mask_per_sample * (size_t)max_batch, (void **)&m->masks, "dropout masks")) != MD_OK)
        goto fail;
    if ((st = dalloc(m, 16 * sizeof(float), (void **)&m->scratch, "scratch")) != MD_OK) goto fail;
    for (int i = 0; i < m->ninputs; i++) {
        if ((st = dalloc(m, (size_t)max_batch * numel(&m->layers[i]) * 4, &m->own_inputs[i], "input batch")) != MD_OK)
            goto fail;
        m->inputs[i] = m->own_inputs[i];
    }
    size_t arena = m->plan_train.bytes > m->plan_eval.bytes ? m->plan_train.bytes : m->plan_eval.bytes;
    if ((st = dalloc(m, arena, (void **)&m->arena, "activations")) != MD_OK) goto fail;
    if ((st = upload_initial(m)) != MD_OK) goto fail;
    m->last_batch = 0;
    m->have_loss = 0;
    return MD_OK;
fail:
    unbind(m);
    return st;
}

md_device *md_model_device(const md_model *m) { return m->dev; }
int md_model_max_batch(const md_model *m) { return m->max_batch; }
float *md_model_params(md_model *m) { return m->params; }
float *md_model_grads(md_model *m) { return m->grads; }
void *md_model_params_half(md_model *m) { return m->params_half; }
float *md_model_bn_stats(md_model *m) { return m->bn_stats; }
void md_model_set_bn_sync(md_model *m, const struct md_bn_sync *s)
{
    m->bn_sync_on = s != NULL;
    if (s) m->bn_sync = *s;
}
void *md_model_input_buffer(md_model *m, int i) { return m->inputs ? m->inputs[i] : NULL; }
void md_model_set_step(md_model *m, uint64_t step) { m->step = step; }
void md_model_set_step_dev(md_model *m, const uint64_t *step_dev) { m->step_dev = step_dev; }
void md_model_set_input_buffer(md_model *m, int i, void *buf)
{
    MD_ASSERT(m->inputs && i >= 0 && i < m->ninputs);
    m->inputs[i] = buf ? buf : m->own_inputs[i];
}

/* ---- execution ---------------------------------------------------------------------- */

/* ---- per-layer timing (md_model_profile_begin) ---- */

struct md_model_prof {
    int cap, n;           /* slots: (layer, phase) records of this profile */
    int *layer, *bwd;     /* per slot */
    md_event **ev;        /* 2 per slot: before, after */
};

static void prof_free(md_device *dev, struct md_model_prof *p)
{
    if (!p) return;
    for (int k = 0; k < 2 * p->cap; k++)
        if (p->ev[k]) md_event_destroy(dev, p->ev[k]);
    md_free(p->ev);
    md_free(p->layer);
    md_free(p->bwd);
    md_free(p);
}

md_status md_model_profile_begin(md_model *m)
{
    MD_ASSERT(m->dev && !m->prof);
    struct md_model_prof *p = md_calloc(1, sizeof *p);
    if (!p) return MD_ERR_OOM;
    p->cap = 3 * m->nlayers + 1; /* forward, recomputed forward, backward */
    p->ev = md_calloc((size_t)2 * p->cap, sizeof *p->ev);
    p->layer = md_calloc((size_t)p->cap, sizeof *p->layer);
    p->bwd = md_calloc((size_t)p->cap, sizeof *p->bwd);
    if (!p->ev || !p->layer || !p->bwd) {
        prof_free(m->dev, p);
        return MD_ERR_OOM;
    }
    for (int k = 0; k < 2 * p->cap; k++) {
        md_status st = md_event_create(m->dev, &p->ev[k]);
        if (st != MD_OK) {
            prof_free(m->dev, p);
            return st;
        }
    }
    m->prof = p;
    return MD_OK;
}

md_status md_model_profile_end(md_model *m, double *fwd_ms, double *bwd_ms)
{
    struct md_model_prof *p = m->prof;
    if (!p) return md_errf(MD_ERR_INTERNAL, "model %s: profile end without begin", m->name);
    m->prof = NULL;
    md_status st = MD_OK;
    for (int k = 0; k < p->n && st == MD_OK; k++) {
        float ms = 0;
        if ((st = md_event_elapsed_ms(m->dev, p->ev[2 * k], p->ev[2 * k + 1], &ms)) != MD_OK) break;
        (p->bwd[k] ? bwd_ms : fwd_ms)[p->layer[k] - m->ninputs] += (double)ms;
    }
    prof_free(m->dev, p);
    return st;
}

/* Runs one layer's pass between two profile events when profiling. */
static md_status prof_mark(struct md_model *m, int i, int bwd, int after)
{
    struct md_model_prof *p = m->prof;
    if (!p) return MD_OK;
    if (!after) {
        if (p->n >= p->cap) return MD_OK; /* more passes than slots: the rest untimed */
        p->layer[p->n] = i;
        p->bwd[p->n] = bwd;
        return md_event_record(m->dev, p->ev[2 * p->n]);
    }
    if (p->n >= p->cap) return MD_OK;
    return md_event_record(m->dev, p->ev[2 * p->n++ + 1]);
}

/* i counts the layers after the inputs, as md_model_num_layers does. */
const char *md_model_layer_type(const md_model *m, int i) { return m->layers[m->ninputs + i].type; }
const char *md_model_layer_name(const md_model *m, int i) { return m->layers[m->ninputs + i].name; }

/* ---- per-layer capture (md_model_capture_begin) ---- */

static void cap_free(struct md_model *m)
{
    if (!m->cap) return;
    for (int i = 0; i < m->nlayers; i++) {
        md_free(m->cap[i].y);
        md_free(m->cap[i].dx);
        md_free(m->cap[i].dy);
        md_free(m->cap[i].dx_before);
    }
    md_free(m->cap);
    m->cap = NULL;
    m->feed = NULL;
}

md_status md_model_capture_begin(md_model *m, const md_model *feed)
{
    MD_ASSERT(m->dev);
    cap_free(m);
    if (feed && (feed->nlayers != m->nlayers || feed->ninputs != m->ninputs || !feed->cap))
        return md_errf(MD_ERR_INTERNAL, "model %s: the fed capture comes from another model or none", m->name);
    m->cap = md_calloc((size_t)m->nlayers, sizeof *m->cap);
    if (!m->cap) return md_errf(MD_ERR_OOM, "model %s: out of host memory for the layer capture", m->name);
    m->feed = feed;
    return MD_OK;
}

const struct md_layer_capture *md_model_capture_layer(const md_model *m, int i)
{
    if (!m->cap || i < 0 || i >= m->nlayers - m->ninputs) return NULL;
    return &m->cap[m->ninputs + i];
}

void md_model_capture_end(md_model *m) { cap_free(m); }

void md_model_layer_inputs(const md_model *m, int i, int *in, int max, int *n)
{
    const struct md_layer *L = &m->layers[m->ninputs + i];
    *n = 0;
    for (int k = 0; k < L->nin && k < max; k++) in[(*n)++] = L->in[k] < m->ninputs ? -1 : L->in[k] - m->ninputs;
}

/* Every fallback call so far (a layer's share is the difference). */
static long long fallback_total(const md_device *dev)
{
    long long s = 0;
    for (int k = 0; k < MD_KERNEL_COUNT; k++) s += md_dev_fallback_count(dev, k);
    return s;
}

/* Appends `n` elements of the compute dtype at `src` (device) to *dst as fp32. */
static md_status cap_append(struct md_model *m, float **dst, size_t *len, const void *src, size_t n)
{
    md_dtype dt = m->opts.compute_dtype;
    size_t es = md_dtype_size(dt);
    float *grown = md_realloc(*dst, (*len + n + 1) * sizeof *grown);
    void *raw = md_malloc(n * es + 4);
    if (!grown || !raw) {
        if (grown) *dst = grown;
        md_free(raw);
        return md_errf(MD_ERR_OOM, "model %s: out of host memory for the layer capture", m->name);
    }
    *dst = grown;
    md_status st = md_dev_download(m->dev, raw, src, n * es);
    if (st == MD_OK) st = md_dev_sync(m->dev);
    for (size_t e = 0; st == MD_OK && e < n; e++) grown[*len + e] = md_load_f(raw, dt, e);
    if (st == MD_OK) *len += n;
    md_free(raw);
    return st;
}

/* Writes `n` host floats into a device buffer of the compute dtype (fed capture). */
static md_status cap_put(struct md_model *m, void *dst, const float *src, size_t n)
{
    md_dtype dt = m->opts.compute_dtype;
    void *raw = md_malloc(n * md_dtype_size(dt) + 4);
    if (!raw) return md_errf(MD_ERR_OOM, "model %s: out of host memory for the layer capture", m->name);
    for (size_t e = 0; e < n; e++) md_store_f(raw, dt, e, src[e]);
    md_status st = md_dev_upload(m->dev, dst, raw, n * md_dtype_size(dt));
    if (st == MD_OK) st = md_dev_sync(m->dev);
    md_free(raw);
    return st;
}

/* Before a fed layer's pass: its inputs (forward), or its output gradient
 * and its inputs' gradient buffers (backward), from the feeding model. */
static md_status cap_feed(const struct md_layer_run *r, int i, int bwd)
{
    struct md_model *m = r->m;
    const struct md_layer_capture *f = &m->feed->cap[i];
    const struct md_layer *L = &m->layers[i];
    if (!bwd) {
        for (int k = 0; k < L->nin; k++) {
            int t = md_model_tensor_of(m, L->in[k]);
            const struct md_layer_capture *ft = &m->feed->cap[t];
            size_t n = (size_t)r->n * numel(&m->layers[t]);
            if (!ft->ran || ft->ny != n)
                return md_errf(MD_ERR_INTERNAL, "model %s: no fed output of %s", m->name, m->layers[t].name);
            if (t < m->ninputs && !has_act(m, t)) {
                /* an fp32 model input read in place: the feeding model's (rounded) copy goes there */
                MD_TRY(md_dev_upload(m->dev, m->inputs[t], ft->y, n * sizeof(float)));
                MD_TRY(md_dev_sync(m->dev));
            } else {
                MD_TRY(cap_put(m, md_layer_act(r, t), ft->y, n));
            }
        }
        return MD_OK;
    }
    size_t n = (size_t)r->n * numel(L);
    if (f->dy) MD_TRY(cap_put(m, md_layer_grad(r, i), f->dy, n));
    size_t off = 0;
    for (int k = 0; k < L->nin && f->dx_before; k++) {
        int t = md_model_tensor_of(m, L->in[k]);
        if (t < m->ninputs) continue;
        size_t nt = (size_t)r->n * numel(&m->layers[t]);
        if (off + nt > f->ndx) return md_errf(MD_ERR_INTERNAL, "model %s: fed gradients of %s too short", m->name, L->name);
        MD_TRY(cap_put(m, md_layer_grad(r, t), f->dx_before + off, nt));
        off += nt;
    }
    return MD_OK;
}

/* Before (after 0) and after (after 1) a captured layer's pass: syncs, the
 * host clock and the fallback counter; after a forward its output, around a
 * backward the gradients of its output and inputs. */
static md_status cap_mark(const struct md_layer_run *r, int i, int bwd, int after, double *t0, long long *f0)
{
    struct md_model *m = r->m;
    if (!m->cap || r->recompute) return MD_OK;
    struct md_layer_capture *c = &m->cap[i];
    const struct md_layer *L = &m->layers[i];
    if (!after) {
        if (m->feed) MD_TRY(cap_feed(r, i, bwd));
        if (bwd) {
            size_t nb = 0;
            MD_TRY(cap_append(m, &c->dy, &nb, md_layer_grad(r, i), (size_t)r->n * numel(L)));
            nb = 0;
            for (int k = 0; k < L->nin; k++) {
                int t = md_model_tensor_of(m, L->in[k]);
                if (t < m->ninputs) continue;
                MD_TRY(cap_append(m, &c->dx_before, &nb, md_layer_grad(r, t), (size_t)r->n * numel(&m->layers[t])));
            }
        }
        MD_TRY(md_dev_sync(m->dev));
        *f0 = fallback_total(m->dev);
        *t0 = md_now();
        return MD_OK;
    }
    MD_TRY(md_dev_sync(m->dev));
    double ms = (md_now() - *t0) * 1e3;
    long long fb = fallback_total(m->dev) - *f0;
    if (!bwd) {
        c->ran = 1;
        c->fwd_ms += ms;
        c->fallback_fwd += fb;
        c->ny = 0;
        size_t n = (size_t)r->n * numel(L);
        c->act_bytes = n * md_dtype_size(m->opts.compute_dtype);
        return cap_append(m, &c->y, &c->ny, md_layer_act(r, i), n);
    }
    c->bwd_ms += ms;
    c->fallback_bwd += fb;
    c->ndx = 0;
    for (int k = 0; k < L->nin; k++) {
        int t = md_model_tensor_of(m, L->in[k]);
        if (t < m->ninputs) continue;
        MD_TRY(cap_append(m, &c->dx, &c->ndx, md_layer_grad(r, t), (size_t)r->n * numel(&m->layers[t])));
    }
    return MD_OK;
}

/* One layer through its kind's ops (nn/layer.h); the kinds' files hold the
 * kernel calls. */
static md_status fwd_layer(const struct md_layer_run *r, int i)
{
    struct md_layer_run ri = *r;
    ri.n = r->n * r->m->layers[i].fold; /* kinds see items, not samples */
    double t0 = 0;
    long long f0 = 0;
    MD_TRY(cap_mark(r, i, 0, 0, &t0, &f0));
    MD_TRY(prof_mark(r->m, i, 0, 0));
    MD_TRY(r->m->layers[i].ops->forward(&ri, i));
    MD_TRY(prof_mark(r->m, i, 0, 1));
    return cap_mark(r, i, 0, 1, &t0, &f0);
}

static md_status bwd_layer(const struct md_layer_run *r, int i)
{
    struct md_model *m = r->m;
    const struct md_layer *L = &m->layers[i];
    if (!m->written[i]) {
        /* nothing downstream used this output: its gradient is zero */
        size_t bytes = (size_t)r->n * numel(L) * md_dtype_size(m->opts.compute_dtype);
        MD_TRY(md_dev_memset0(m->dev, md_layer_grad(r, i), bytes));
        m->written[i] = 1;
    }
    struct md_layer_run ri = *r;
    ri.n = r->n * L->fold;
    double t0 = 0;
    long long f0 = 0;
    MD_TRY(cap_mark(r, i, 1, 0, &t0, &f0));
    MD_TRY(prof_mark(m, i, 1, 0));
    MD_TRY(L->ops->backward(&ri, i));
    MD_TRY(prof_mark(m, i, 1, 1));
    return cap_mark(r, i, 1, 1, &t0, &f0);
}

static md_status check_bound(const struct md_model *m, int batch)
{
    if (!m->dev) return md_errf(MD_ERR_INTERNAL, "model %s: not bound to a device", m->name);
    if (batch < 1 || batch > m->max_batch)
        return md_errf(MD_ERR_INTERNAL, "model %s: batch %d outside 1..%d (bound size)", m->name, batch, m->max_batch);
    return MD_OK;
}

/* The run of the last forward: its batch and plan. */
static struct md_layer_run last_run(md_model *m)
{
    return (struct md_layer_run){m, m->last_training ? &m->plan_train : &m->plan_eval, m->last_batch,
                                 m->last_training, 0, 0};
}

/* A loss reads the last forward's output. */
static md_status check_loss_ready(md_model *m)
{
    MD_TRY(check_bound(m, m->last_batch ? m->last_batch : 1));
    if (!m->last_batch) return md_errf(MD_ERR_INTERNAL, "model %s: loss before forward", m->name);
    return MD_OK;
}

md_status md_model_forward(md_model *m, int batch, int training)
{
    MD_TRY(check_bound(m, batch));
    struct md_layer_run r = {m, training ? &m->plan_train : &m->plan_eval, batch, training, 0, 0};
    m->last_batch = batch;
    m->last_training = training;
    m->have_loss = 0;
    for (int i = 0; i < m->nlayers; i++) {
        if (m->layers[i].alias >= 0) continue;
        md_status st = fwd_layer(&r, i);
        if (st != MD_OK) {
            md_err_prefix("model %s: forward of %s", m->name, m->layers[i].name);
            return st;
        }
    }
    return MD_OK;
}

const void *md_model_logits(md_model *m)
{
    if (!m->dev || !m->last_batch) return NULL;
    struct md_layer_run r = last_run(m);
    return md_layer_act(&r, m->nlayers - 1);
}

md_status md_model_loss(md_model *m, const int32_t *labels_dev, float smoothing, float grad_scale,
                        float *loss_sum_dev, int32_t *correct_dev)
{
    return md_model_loss_scaled(m, labels_dev, smoothing, grad_scale, NULL, loss_sum_dev, correct_dev);
}

md_status md_model_loss_scaled(md_model *m, const int32_t *labels_dev, float smoothing, float grad_scale,
                               const float *grad_scale_dev, float *loss_sum_dev, int32_t *correct_dev)
{
    MD_TRY(check_loss_ready(m));
    if (m->regression)
        return md_errf(MD_ERR_INTERNAL, "model %s: a regression model has no cross-entropy loss", m->name);
    struct md_layer_run r = last_run(m);
    struct md_xent_args x = {.n = m->last_batch, .classes = m->num_classes, .smoothing = smoothing,
                             .dtype = m->opts.compute_dtype, .logits = md_layer_act(&r, m->nlayers - 1),
                             .labels = labels_dev, .loss_sum = loss_sum_dev, .correct = correct_dev,
                             .dlogits = m->last_training ? md_layer_grad(&r, m->nlayers - 1) : NULL,
                             .grad_scale = grad_scale, .grad_scale_dev = grad_scale_dev};
    MD_TRY(md_k_xent(m->dev, &x));
    m->have_loss = m->last_training;
    return MD_OK;
}

md_status md_model_regress_loss(md_model *m, const float *targets_dev, int horizon, int channels,
                                md_regress_kind kind, float delta, float lambda, const float *last_dev,
                                long long last_ld, float grad_scale, float *loss_sum_dev, float *metrics_dev)
{
    MD_TRY(check_loss_ready(m));
    size_t per = md_shape_numel(m->layers[m->nlayers - 1].out);
    if (horizon < 1 || channels < 1 || (size_t)horizon * (size_t)channels != per)
        return md_errf(MD_ERR_CONFIG, "model %s: %zu outputs per sample; the forecast needs %d x %d = %lld", m->name,
                       per, horizon, channels, (long long)horizon * channels);
    struct md_layer_run r = last_run(m);
    struct md_regress_args a = {.n = m->last_batch, .horizon = horizon, .channels = channels, .kind = kind,
                                .delta = delta, .lambda = lambda, .dtype = m->opts.compute_dtype,
                                .pred = md_layer_act(&r, m->nlayers - 1), .target = targets_dev, .last = last_dev,
                                .last_ld = last_ld, .loss_sum = loss_sum_dev, .metrics = metrics_dev,
                                .dpred = m->last_training ? md_layer_grad(&r, m->nlayers - 1) : NULL,
                                .grad_scale = grad_scale};
    MD_TRY(md_k_regress(m->dev, &a));
    m->have_loss = m->last_training;
    return MD_OK;
}

void *md_model_output_grad(md_model *m)
{
    if (!m->dev || !m->last_batch || !m->last_training) return NULL;
    struct md_layer_run r = {m, &m->plan_train, m->last_batch, 1, 0, 0};
    return md_layer_grad(&r, m->nlayers - 1);
}

void md_model_output_grad_written(md_model *m) { m->have_loss = m->last_training && m->last_batch; }

md_status md_model_set_output_grad(md_model *m, const float *dy_dev)
{
    void *g = md_model_output_grad(m);
    if (!g) return md_errf(MD_ERR_INTERNAL, "model %s: an output gradient needs a training forward first", m->name);
    size_t ne = (size_t)m->last_batch * md_shape_numel(m->layers[m->nlayers - 1].out);
    if (m->opts.compute_dtype == MD_F32) {
        struct md_ew_args e = {MD_EW_COPY, ne, MD_F32, 1.0f, 0.0f, NULL, dy_dev, NULL, g};
        MD_TRY(md_k_ew(m->dev, &e));
    } else {
        struct md_cast_args c = {ne, MD_F32, m->opts.compute_dtype, dy_dev, g};
        MD_TRY(md_k_cast(m->dev, &c));
    }
    m->have_loss = 1;
    return MD_OK;
}

void md_model_set_grad_sink(md_model *m, size_t bucket, md_grad_sink fn, void *ctx)
{
    m->sink = fn;
    m->sink_ctx = ctx;
    m->sink_bucket = bucket ? bucket : 1;
}

/* The lowest offset of layer i's weight-decayed tensors, or ndecay. The
 * decayed tensors lie in layer order, so after the backward of layers
 * i..last, [the smallest of these, ndecay) is final. */
static size_t decay_lo(const md_model *m, int i)
{
    size_t lo = m->ndecay;
    for (int k = 0; k < MD_LAYER_MAX_PARAMS; k++) {
        int t = m->layers[i].param[k];
        if (t >= 0 && m->tensors[t].decay && m->tensors[t].offset < lo) lo = m->tensors[t].offset;
    }
    return lo;
}

/* Hands the decayed gradients [lo, hi) to the sink, cast first if they
 * were computed in half precision. */
static md_status sink_range(md_model *m, size_t lo, size_t hi)
{
    if (hi <= lo) return MD_OK;
    if (m->grads_half) {
        size_t es = md_dtype_size(m->opts.compute_dtype);
        struct md_cast_args c = {hi - lo, m->opts.compute_dtype, MD_F32, (char *)m->grads_half + lo * es,
                                 m->grads + lo};
        MD_TRY(md_k_cast(m->dev, &c));
    }
    return m->sink(m->sink_ctx, m->grads + lo, hi - lo);
}

/* After the last layer: the decayed gradients [0, sent) and the others;
 * one call where nothing was handed yet. */
static md_status sink_rest(md_model *m, size_t sent, int cast)
{
    if (sent == m->ndecay) {
        if (cast && m->grads_half && m->ndecay) {
            struct md_cast_args c = {m->ndecay, m->opts.compute_dtype, MD_F32, m->grads_half, m->grads};
            MD_TRY(md_k_cast(m->dev, &c));
        }
        return m->nparams ? m->sink(m->sink_ctx, m->grads, m->nparams) : MD_OK;
    }
    if (cast) MD_TRY(sink_range(m, 0, sent));
    else MD_TRY(m->sink(m->sink_ctx, m->grads, sent));
    return m->nparams > m->ndecay ? m->sink(m->sink_ctx, m->grads + m->ndecay, m->nparams - m->ndecay) : MD_OK;
}

md_status md_model_grads_zero(md_model *m)
{
    MD_TRY(md_dev_memset0(m->dev, m->grads, m->nparams * sizeof(float)));
    if (!m->sink) return MD_OK;
    size_t sent = m->ndecay, ready = m->ndecay; /* the buckets of md_model_backward */
    for (int i = m->nlayers - 1; i >= m->ninputs; i--) {
        if (m->layers[i].alias >= 0) continue;
        size_t d = decay_lo(m, i);
        if (d < ready) ready = d;
        if (sent - ready >= m->sink_bucket) {
            MD_TRY(m->sink(m->sink_ctx, m->grads + ready, sent - ready));
            sent = ready;
        }
    }
    return sink_rest(m, sent, 0);
}

md_status md_model_backward(md_model *m)
{
    md_status st = MD_OK;
    if (!m->have_loss)
        return md_errf(MD_ERR_INTERNAL, "model %s: backward needs a training forward and md_model_loss", m->name);
    struct md_layer_run r = {m, &m->plan_train, m->last_batch, 1, 1, 0};
    int ckpt = m->opts.grad_ckpt;
    memset(m->written, 0, (size_t)m->nlayers * sizeof *m->written);
    m->written[md_model_tensor_of(m, m->nlayers - 1)] = 1;
    if (m->nparams > m->ndecay)
        MD_TRY(md_dev_memset0(m->dev, m->grads + m->ndecay, (m->nparams - m->ndecay) * sizeof(float)));
    int hi = m->nlayers - 1, i = 0;
    size_t sent = m->ndecay, ready = m->ndecay; /* [sent, ndecay) handed to the sink */
    while (hi >= m->ninputs) {
        int lo = hi;
        if (ckpt)
            while (lo - 1 >= m->ninputs && m->layers[lo - 1].group == m->layers[hi].group) lo--;
        if (ckpt) {
            struct md_layer_run rr = r;
            rr.recompute = 1;
            for (i = lo; i <= hi; i++)
                if (m->plan_train.recompute[i] && (st = fwd_layer(&rr, i)) != MD_OK) goto fail;
        }
        for (i = hi; i >= lo; i--) {
            if (m->layers[i].alias >= 0) continue;
            if ((st = bwd_layer(&r, i)) != MD_OK) goto fail;
            if (!m->sink) continue;
            size_t d = decay_lo(m, i);
            if (d < ready) ready = d;
            if (sent - ready >= m->sink_bucket) {
                if ((st = sink_range(m, ready, sent)) != MD_OK) goto fail;
                sent = ready;
            }
        }
        hi = lo - 1;
    }
    if (m->sink) {
        m->have_loss = 0;
        return sink_rest(m, sent, 1);
    }
    if (m->grads_half) {
        struct md_cast_args c = {m->ndecay, m->opts.compute_dtype, MD_F32, m->grads_half, m->grads};
        if ((st = md_k_cast(m->dev, &c)) != MD_OK) goto fail;
    }
    m->have_loss = 0;
    return MD_OK;
fail:
    md_err_prefix("model %s: backward of %s", m->name, m->layers[i].name);
    return st;
}

/* ---- diagnostics -------------------------------------------------------------------- */

md_status md_model_first_nonfinite(md_model *m, char *layer, size_t n, int *found)
{
    *found = 0;
    if (n) layer[0] = 0;
    MD_TRY(check_bound(m, m->last_batch ? m->last_batch : 1));
    if (!m->last_batch) return MD_OK;
    struct md_layer_run r = last_run(m);
    r.recompute = 1;
    for (int i = 0; i < m->nlayers; i++) {
        const struct md_layer *L = &m->layers[i];
        if (L->alias >= 0) continue;
        MD_TRY(fwd_layer(&r, i));
        const void *y = md_layer_act(&r, i); /* an fp32 input is its own buffer */
        md_dtype dt = m->opts.compute_dtype;
        struct md_reduce_args rd = {MD_RED_SUM, (size_t)r.n * numel(L), dt, y, NULL, m->scratch, 0.0f};
        MD_TRY(md_k_reduce(m->dev, &rd));
        float s = 0;
        MD_TRY(md_dev_download(m->dev, &s, m->scratch, sizeof s));
        if (!isfinite(s)) {
            /* the layer named is the one the user wrote (a fused ReLU reports its producer) */
            snprintf(layer, n, "%s", L->name);
            *found = 1;
            return MD_OK;
        }
    }
    return MD_OK;
}

md_status md_model_relu_stats(md_model *m, struct md_relu_stat *out, int max, int *count)
{
    *count = 0;
    MD_TRY(check_bound(m, m->last_batch ? m->last_batch : 1));
    if (!m->last_batch) return MD_OK;
    struct md_layer_run r = {m, &m->plan_eval, m->last_batch, 0, 0, 1};
    md_dtype dt = m->opts.compute_dtype;
    float *host = NULL;
    unsigned char *alive = NULL;
    size_t cap = 0;
    md_status st = MD_OK;
    for (int i = 0; i < m->nlayers; i++) {
        const struct md_layer *L = &m->layers[i];
        if (L->alias >= 0) continue;
        if ((st = fwd_layer(&r, i)) != MD_OK) goto done;
        if (!L->ops->out_act || L->ops->out_act(L) != MD_ACT_RELU) continue;
        /* the name the user wrote: a fused ReLU reports itself, not its producer */
        const char *name = L->name;
        for (int j = i + 1; j < m->nlayers; j++)
            if (m->layers[j].alias == i && !m->layers[j].view) { name = m->layers[j].name; break; }
        size_t per = numel(L), n = (size_t)r.n * per;
        if (n > cap) {
            md_free(host);
            if (!(host = md_malloc(n * md_dtype_size(dt)))) { st = MD_ERR_OOM; goto done; }
            cap = n;
        }
        md_free(alive);
        if (!(alive = md_malloc((size_t)L->out.c))) { st = MD_ERR_OOM; goto done; }
        if ((st = md_dev_download(m->dev, host, md_layer_act(&r, i), n * md_dtype_size(dt))) != MD_OK) goto done;
        if ((st = md_dev_sync(m->dev)) != MD_OK) goto done;
        memset(alive, 0, (size_t)L->out.c);
        size_t zeros = 0, hw = (size_t)L->out.h * L->out.w;
        for (size_t e = 0; e < n; e++) {
            size_t c = m->opts.layout == MD_NHWC ? e % (size_t)L->out.c : (e / hw) % (size_t)L->out.c;
            if (md_load_f(host, dt, e) > 0.0f) alive[c] = 1;
            else zeros++;
        }
        int dead = 0;
        for (int c = 0; c < L->out.c; c++) dead += !alive[c];
        if (*count < max) {
            out[*count].layer = name;
            out[*count].dead_share = (double)dead / (double)L->out.c;
            out[*count].zero_share = (double)zeros / (double)n;
        }
        (*count)++;
    }
done:
    md_free(host);
    md_free(alive);
    return st;
}

/* The activations whose dead units are counted, and how (md_model_probe_stats). */
static const char *probe_act_name(int act)
{
    switch (act) {
    case MD_ACT_RELU: return "relu";
    case MD_ACT_GELU: return "gelu";
    case MD_ACT_GELU_TANH: return "gelu_tanh";
    case MD_ACT_SILU: return "silu";
    default: return NULL;
    }
}

/* Layer i's output for `batch` samples, downloaded into a host float array
 * (*buf grown to fit, *cap elements); *n gets the element count. */
static md_status probe_download(struct md_layer_run *r, int i, float **buf, size_t *cap, size_t *n)
{
    md_model *m = r->m;
    md_dtype dt = m->opts.compute_dtype;
    size_t ne = (size_t)r->n * numel(&m->layers[i]);
    if (ne > *cap) {
        md_free(*buf);
        /* room for the raw download in any dtype and the fp32 copy */
        if (!(*buf = md_malloc(ne * sizeof(float) + 16))) return md_errf(MD_ERR_OOM, "model %s: out of host memory", m->name);
        *cap = ne;
    }
    MD_TRY(md_dev_download(m->dev, *buf, md_layer_act(r, i), ne * md_dtype_size(dt)));
    MD_TRY(md_dev_sync(m->dev));
    if (dt != MD_F32) /* widen in place, from the back (2-byte elements) */
        for (size_t e = ne; e-- > 0;) (*buf)[e] = md_load_f(*buf, dt, e);
    *n = ne;
    return MD_OK;
}

/* Dead units of an activation layer's output y (ne elements, NCHW/NHWC items
 * of shape L->out): the unit is the channel, or for a token tensor
 * (T, 1, F) the feature. */
static void probe_dead(const md_model *m, const struct md_layer *L, const float *y, size_t ne, int act,
                       struct md_act_stat *o, unsigned char *alive)
{
    int tokens = L->out.h == 1 && L->out.w > 1;
    int units = tokens ? L->out.w : L->out.c;
    size_t hw = (size_t)L->out.h * L->out.w;
    double thr = act == MD_ACT_RELU ? 0.0 : MD_DEAD_THRESHOLD;
    memset(alive, 0, (size_t)units);
    size_t zeros = 0;
    for (size_t e = 0; e < ne; e++) {
        size_t u = tokens ? e % (size_t)L->out.w
                 : m->opts.layout == MD_NHWC ? e % (size_t)L->out.c : (e / hw) % (size_t)L->out.c;
        int on = act == MD_ACT_RELU ? y[e] > 0.0f : fabsf(y[e]) >= (float)thr;
        if (on) alive[u] = 1;
        else zeros++;
    }
    int dead = 0;
    for (int u = 0; u < units; u++) dead += !alive[u];
    o->activation = probe_act_name(act);
    o->threshold = thr;
    o->units = units;
    o->dead_share = (double)dead / (double)units;
    o->zero_share = ne ? (double)zeros / (double)ne : 0.0;
}

md_status md_model_probe_stats(md_model *m, int batch, struct md_act_stat *acts, int max_acts, int *nacts,
                               struct md_fusion_stat *fus, int max_fus, int *nfus)
{
    *nacts = 0;
    *nfus = 0;
    MD_TRY(check_bound(m, batch));
    struct md_layer_run r = {m, &m->plan_eval, batch, 0, 0, 1};
    float *buf = NULL, *xb = NULL;
    size_t cap = 0, xcap = 0, ne = 0, nx = 0;
    unsigned char *alive = NULL;
    md_status st = MD_OK;
    int i = 0;
    for (i = 0; i < m->nlayers; i++) {
        const struct md_layer *L = &m->layers[i];
        if (L->alias >= 0) continue;
        const char *type = md_model_layer_type(m, i - m->ninputs);
        int is_wadd = i >= m->ninputs && type && strcmp(type, "weighted_add") == 0;
        int is_film = i >= m->ninputs && type && strcmp(type, "film") == 0;
        /* a fusion's inputs are read before its output may take their memory */
        if ((is_wadd || is_film) && *nfus < max_fus && L->nin <= MD_FUSION_MAX_INPUTS) {
            struct md_fusion_stat *f = &fus[*nfus];
            memset(f, 0, sizeof *f);
            f->layer = L->name;
            f->kind = is_wadd ? "weighted_add" : "film";
            f->nin = L->nin;
            for (int k = 0; k < L->nin; k++) f->input[k] = m->layers[L->in[k]].name;
            if (is_wadd) {
                float w[MD_FUSION_MAX_INPUTS];
                if ((st = md_dev_download(m->dev, w, md_layer_param32(m, L->param[0]), (size_t)L->nin * sizeof(float))) != MD_OK) goto done;
                for (int k = 0; k < L->nin; k++) {
                    if ((st = probe_download(&r, L->in[k], &buf, &cap, &ne)) != MD_OK) goto done;
                    double s = 0;
                    for (size_t e = 0; e < ne; e++) s += fabs((double)buf[e]);
                    f->weight[k] = w[k];
                    f->mean_abs[k] = fabs((double)w[k]) * (ne ? s / (double)ne : 0.0);
                }
            } else {
                /* y = x * (1 + gamma) + beta = x + (x * gamma + beta): the first input's
                 * part is x, the conditioning input's is x * gamma + beta */
                if ((st = probe_download(&r, L->in[0], &xb, &xcap, &nx)) != MD_OK) goto done;
                if ((st = probe_download(&r, L->in[1], &buf, &cap, &ne)) != MD_OK) goto done;
                struct md_shape xs = m->layers[L->in[0]].out;
                int flat = xs.w == 1 && xs.h == 1;
                size_t d = flat ? (size_t)xs.c : (size_t)xs.w, per = md_shape_numel(xs);
                size_t items = per ? nx / per : 0, citems = d ? ne / (2 * d) : 0;
                double sx = 0, sc = 0;
                for (size_t it = 0; it < items && citems; it++)
                    for (size_t e = 0; e < per; e++) {
                        double x = xb[it * per + e];
                        /* the conditioning items spread over x's (a fold may give x more) */
                        const float *c = buf + (it * citems / items) * 2 * d;
                        sx += fabs(x);
                        sc += fabs(x * (double)c[e % d] + (double)c[d + e % d]);
                    }
                f->weight[0] = f->weight[1] = 1.0;
                f->mean_abs[0] = nx ? sx / (double)nx : 0.0;
                f->mean_abs[1] = nx ? sc / (double)nx : 0.0;
            }
            double sum = 0;
            for (int k = 0; k < L->nin; k++) sum += f->mean_abs[k];
            for (int k = 0; k < L->nin; k++) f->share[k] = sum > 0 ? f->mean_abs[k] / sum : 1.0 / L->nin;
            (*nfus)++;
        }
        if ((st = fwd_layer(&r, i)) != MD_OK) goto done;
        int act = L->ops->out_act ? L->ops->out_act(L) : MD_ACT_NONE;
        if (!probe_act_name(act)) continue;
        if (*nacts < max_acts) {
            const char *name = L->name; /* a fused activation reports itself, not its producer */
            for (int j = i + 1; j < m->nlayers; j++)
                if (m->layers[j].alias == i && !m->layers[j].view) { name = m->layers[j].name; break; }
            if ((st = probe_download(&r, i, &buf, &cap, &ne)) != MD_OK) goto done;
            md_free(alive);
            int units = L->out.h == 1 && L->out.w > 1 ? L->out.w : L->out.c;
            if (!(alive = md_malloc((size_t)units))) { st = md_errf(MD_ERR_OOM, "model %s: out of host memory", m->name); goto done; }
            acts[*nacts].layer = name;
            probe_dead(m, L, buf, ne, act, &acts[*nacts], alive);
        }
        (*nacts)++;
    }
done:
    if (st != MD_OK && i < m->nlayers) md_err_prefix("model %s: probe at %s", m->name, m->layers[i].name);
    md_free(buf);
    md_free(xb);
    md_free(alive);
    return st;
}

/* ---- weights in and out --------------------------------------------------------------- */

/* Every conv filter (the 4-D tensors) of a host flat buffer between
 * PyTorch's (K, C/g, R, S) and (K, R, S, C/g): to_krsc 1 or 0. */
static md_status permute_filters(md_model *m, float *buf, int to_krsc)
{
    size_t most = 1;
    for (int t = 0; t < m->ntensors; t++)
        if (m->tensors[t].ndim == 4 && m->tensors[t].numel > most) most = m->tensors[t].numel;
    float *tmp = md_malloc(most * sizeof *tmp);
    if (!tmp) return md_errf(MD_ERR_OOM, "model %s: out of host memory", m->name);
    for (int t = 0; t < m->ntensors; t++) {
        const struct md_param_info *ti = &m->tensors[t];
        if (ti->ndim == 4)
            md_filter_permute(buf + ti->offset, tmp, ti->shape[0], ti->shape[1], ti->shape[2] * ti->shape[3], to_krsc);
    }
    md_free(tmp);
    return MD_OK;
}

/* A host flat buffer from PyTorch's order to the device's (to_khwc 1) or back. */
static md_status host_order(md_model *m, float *buf, int to_khwc)
{
    return m->opts.layout == MD_NHWC ? permute_filters(m, buf, to_khwc) : MD_OK;
}

md_status md_model_get_params_host(md_model *m, float *dst)
{
    MD_TRY(check_bound(m, 1));
    MD_TRY(md_dev_download(m->dev, dst, m->params, m->nparams * sizeof *dst));
    return host_order(m, dst, 0);
}

md_status md_model_get_grads_host(md_model *m, float *dst)
{
    MD_TRY(check_bound(m, 1));
    MD_TRY(md_dev_download(m->dev, dst, m->grads, m->nparams * sizeof *dst));
    return host_order(m, dst, 0);
}

md_status md_model_set_params_host(md_model *m, const float *src)
{
    md_status st = MD_OK;
    MD_TRY(check_bound(m, 1));
    float *tmp = md_malloc(m->nparams * sizeof *tmp + 4);
    if (!tmp) return md_errf(MD_ERR_OOM, "model %s: out of host memory", m->name);
    memcpy(tmp, src, m->nparams * sizeof *tmp);
    if ((st = host_order(m, tmp, 1)) == MD_OK && (st = md_dev_upload(m->dev, m->params, tmp, m->nparams * 4)) == MD_OK)
        st = md_model_params_changed(m);
    md_free(tmp);
    return st;
}

/* Tensor ti from the file into dst: by its name, or when the file lacks
 * that, stacked from the parts ti->stacked_from names (each 1/n of the
 * first dimension, in order). */
static md_status load_tensor(const md_st_file *f, const struct md_param_info *ti, float *dst)
{
    long long shape[4];
    for (int k = 0; k < ti->ndim; k++) shape[k] = ti->shape[k];
    if (!ti->stacked_from || md_st_find(f, ti->name)) return md_st_copy(f, ti->name, MD_F32, ti->ndim, shape, dst);
    int n = 0;
    while (ti->stacked_from[n]) n++;
    MD_ASSERT(n > 0 && shape[0] % n == 0);
    char name[700];
    snprintf(name, sizeof name, "%s.%s", ti->layer, ti->stacked_from[0]);
    if (!md_st_find(f, name)) return md_st_copy(f, ti->name, MD_F32, ti->ndim, shape, dst); /* names ti's */
    shape[0] /= n;
    for (int k = 0; k < n; k++) {
        snprintf(name, sizeof name, "%s.%s", ti->layer, ti->stacked_from[k]);
        MD_TRY(md_st_copy(f, name, MD_F32, ti->ndim, shape, dst + (size_t)k * (ti->numel / (size_t)n)));
    }
    return MD_OK;
}

md_status md_model_load_weights(md_model *m, const char *path)
{
    md_status st = MD_OK;
    md_st_file *f = NULL;
    float *host = NULL, *stats = NULL;
    MD_TRY(check_bound(m, 1));
    int krsc = 0;
    if ((st = md_st_open(path, &f)) != MD_OK) goto fail;
    if ((st = md_st_filter_layout(f, &krsc)) != MD_OK) goto fail;
    host = md_malloc(m->nparams * sizeof *host + 4);
    stats = md_malloc(m->nstats * sizeof *stats + 4);
    if (!host || !stats) { st = md_errf(MD_ERR_OOM, "%s: out of host memory", path); goto fail; }
    for (int t = 0; t < m->ntensors; t++) {
        if ((st = load_tensor(f, &m->tensors[t], host + m->tensors[t].offset)) != MD_OK) goto fail;
    }
    /* a checkpoint of an earlier channels-last run: its filters are (K, R, S, C/g) */
    if (krsc && (st = permute_filters(m, host, 0)) != MD_OK) goto fail;
    if ((st = md_dev_download(m->dev, stats, m->bn_stats, m->nstats * 4)) != MD_OK) goto fail;
    for (int b = 0; b < m->nbuffers; b++) {
        const struct md_param_info *bi = &m->buffers[b];
        if (!md_st_find(f, bi->name)) continue;
        long long shape[1] = {bi->shape[0]};
        if ((st = md_st_copy(f, bi->name, MD_F32, 1, shape, stats + bi->offset)) != MD_OK) goto fail;
    }
    if ((st = md_model_set_params_host(m, host)) != MD_OK) goto fail;
    st = md_dev_upload(m->dev, m->bn_stats, stats, m->nstats * 4);
fail:
    if (st != MD_OK) md_err_prefix("--init-from");
    md_free(host);
    md_free(stats);
    md_st_close(f);
    return st;
}

/* Adds "input.<name>" (batch, c, h, w) F32 NCHW for every input, read from
 * the device into `buf` (2 x the inputs' floats; borrowed by w until written). */
static md_status add_inputs(md_model *m, md_st_writer *w, int batch, float *buf)
{
    size_t total = 0;
    char name[700];
    for (int i = 0; i < m->ninputs; i++) total += (size_t)batch * numel(&m->layers[i]);
    float *in = buf, *tmp = buf + total;
    for (int i = 0; i < m->ninputs; i++) {
        const struct md_layer *L = &m->layers[i];
        size_t n = (size_t)batch * numel(L);
        MD_TRY(md_dev_download(m->dev, tmp, m->inputs[i], n * 4));
        MD_TRY(md_dev_sync(m->dev));
        if (m->opts.layout == MD_NHWC) {
            size_t hw = (size_t)L->out.h * L->out.w;
            for (int b = 0; b < batch; b++)
                for (int c = 0; c < L->out.c; c++)
                    for (size_t p = 0; p < hw; p++)
                        in[((size_t)b * L->out.c + c) * hw + p] = tmp[((size_t)b * hw + p) * L->out.c + c];
        } else {
            memcpy(in, tmp, n * 4);
        }
        long long shape[4] = {batch, L->out.c, L->out.h, L->out.w};
        snprintf(name, sizeof name, "input.%s", L->name);
        MD_TRY(md_st_writer_add(w, name, MD_F32, 4, shape, in));
        in += n;
    }
    return MD_OK;
}

/* Metadata of the dump files: the tensors are in PyTorch's layout; the
 * device's is only a fact of the run. */
static md_status add_meta(md_model *m, md_st_writer *w)
{
    MD_TRY(md_st_writer_meta(w, "model", m->name));
    MD_TRY(md_st_writer_meta(w, "compute_dtype", md_dtype_name(m->opts.compute_dtype)));
    MD_TRY(md_st_writer_meta(w, MD_ST_LAYOUT_KEY, MD_ST_LAYOUT_TORCH));
    return md_st_writer_meta(w, "device_layout", md_layout_name(m->opts.layout));
}

md_status md_model_dump_logits(md_model *m, const int32_t *labels_host, int batch, const char *path)
{
    md_status st = MD_OK;
    md_st_writer *w = NULL;
    float *logits = NULL, *inputs = NULL;
    void *raw = NULL;
    MD_TRY(check_bound(m, batch));
    size_t in_total = 0, nl = (size_t)batch * (size_t)m->num_classes;
    for (int i = 0; i < m->ninputs; i++) in_total += (size_t)batch * numel(&m->layers[i]);
    size_t es = md_dtype_size(m->opts.compute_dtype);
    logits = md_malloc(nl * 4 + 4);
    raw = md_malloc(nl * es + 4);
    inputs = md_malloc(in_total * 4 * 2 + 4);
    if (!logits || !raw || !inputs) {
        st = md_errf(MD_ERR_OOM, "out of host memory");
        goto fail;
    }
    if ((st = md_model_forward(m, batch, 0)) != MD_OK) goto fail;
    if ((st = md_dev_download(m->dev, raw, md_model_logits(m), nl * es)) != MD_OK) goto fail;
    if ((st = md_dev_sync(m->dev)) != MD_OK) goto fail;
    for (size_t i = 0; i < nl; i++) logits[i] = md_load_f(raw, m->opts.compute_dtype, i);
    long long ls[1] = {batch}, lg[2] = {batch, m->num_classes};
    if ((st = md_st_writer_new(&w)) != MD_OK) goto fail;
    if ((st = add_inputs(m, w, batch, inputs)) != MD_OK) goto fail;
    if ((st = md_st_writer_add(w, "labels", MD_I32, 1, ls, labels_host)) != MD_OK) goto fail;
    if ((st = md_st_writer_add(w, "logits", MD_F32, 2, lg, logits)) != MD_OK) goto fail;
    if ((st = add_meta(m, w)) != MD_OK) goto fail;
    if ((st = md_st_writer_meta(w, "mode", "eval")) != MD_OK) goto fail;
    st = md_st_writer_write(w, path);
fail:
    if (st != MD_OK) md_err_prefix("--dump-logits %s", path);
    md_st_writer_free(w);
    md_free(logits);
    md_free(raw);
    md_free(inputs);
    return st;
}

md_status md_model_dump_grads(md_model *m, const int32_t *labels_host, int batch, float smoothing, const char *path)
{
    md_status st = MD_OK;
    md_st_writer *w = NULL;
    float *params = NULL, *grads = NULL, *stats = NULL, *logits = NULL, *inputs = NULL, loss = 0;
    void *raw = NULL;
    int32_t *labels_dev = NULL;
    float *loss_dev = NULL;
    char name[700];
    MD_TRY(check_bound(m, batch));
    md_device *d = m->dev;
    size_t in_total = 0;
    for (int i = 0; i < m->ninputs; i++) in_total += (size_t)batch * numel(&m->layers[i]);
    size_t es = md_dtype_size(m->opts.compute_dtype);
    params = md_malloc(m->nparams * 4 + 4);
    grads = md_malloc(m->nparams * 4 + 4);
    stats = md_malloc(m->nstats * 4 + 4);
    logits = md_malloc((size_t)batch * m->num_classes * 4);
    raw = md_malloc((size_t)batch * m->num_classes * es);
    inputs = md_malloc(in_total * 4 * 2);
    if (!params || !grads || !stats || !logits || !raw || !inputs) {
        st = md_errf(MD_ERR_OOM, "--dump-grads: out of host memory");
        goto fail;
    }
    if ((st = md_dev_alloc(d, (size_t)batch * 4, (void **)&labels_dev, "dump labels")) != MD_OK) goto fail;
    if ((st = md_dev_alloc(d, 4, (void **)&loss_dev, "dump loss")) != MD_OK) goto fail;
    if ((st = md_dev_upload(d, labels_dev, labels_host, (size_t)batch * 4)) != MD_OK) goto fail;
    if ((st = md_dev_memset0(d, loss_dev, 4)) != MD_OK) goto fail;
    if ((st = md_model_get_params_host(m, params)) != MD_OK) goto fail;
    if ((st = md_dev_download(d, stats, m->bn_stats, m->nstats * 4)) != MD_OK) goto fail;
    if ((st = md_model_forward(m, batch, 1)) != MD_OK) goto fail;
    if ((st = md_model_loss(m, labels_dev, smoothing, 1.0f / (float)batch, loss_dev, NULL)) != MD_OK) goto fail;
    if ((st = md_dev_download(d, raw, md_model_logits(m), (size_t)batch * m->num_classes * es)) != MD_OK) goto fail;
    if ((st = md_model_backward(m)) != MD_OK) goto fail;
    if ((st = md_model_get_grads_host(m, grads)) != MD_OK) goto fail;
    if ((st = md_dev_download(d, &loss, loss_dev, 4)) != MD_OK) goto fail;
    loss /= (float)batch;
    for (size_t i = 0; i < (size_t)batch * m->num_classes; i++) logits[i] = md_load_f(raw, m->opts.compute_dtype, i);

    if ((st = md_st_writer_new(&w)) != MD_OK) goto fail;
    if ((st = add_inputs(m, w, batch, inputs)) != MD_OK) goto fail;
    long long ls[1] = {batch}, lg[2] = {batch, m->num_classes};
    if ((st = md_st_writer_add(w, "labels", MD_I32, 1, ls, labels_host)) != MD_OK) goto fail;
    if ((st = md_st_writer_add(w, "logits", MD_F32, 2, lg, logits)) != MD_OK) goto fail;
    if ((st = md_st_writer_add(w, "loss", MD_F32, 0, NULL, &loss)) != MD_OK) goto fail;
    for (int t = 0; t < m->ntensors; t++) {
        const struct md_param_info *ti = &m->tensors[t];
        long long shape[4];
        for (int k = 0; k < ti->ndim; k++) shape[k] = ti->shape[k];
        snprintf(name, sizeof name, "param.%s", ti->name);
        if ((st = md_st_writer_add(w, name, MD_F32, ti->ndim, shape, params + ti->offset)) != MD_OK) goto fail;
        snprintf(name, sizeof name, "grad.%s", ti->name);
        if ((st = md_st_writer_add(w, name, MD_F32, ti->ndim, shape, grads + ti->offset)) != MD_OK) goto fail;
    }
    for (int b = 0; b < m->nbuffers; b++) {
        const struct md_param_info *bi = &m->buffers[b];
        long long shape[1] = {bi->shape[0]};
        snprintf(name, sizeof name, "buffer.%s", bi->name);
        if ((st = md_st_writer_add(w, name, MD_F32, 1, shape, stats + bi->offset)) != MD_OK) goto fail;
    }
    if ((st = add_meta(m, w)) != MD_OK) goto fail;
    st = md_st_writer_write(w, path);
fail:
    if (st != MD_OK) md_err_prefix("--dump-grads %s", path);
    md_st_writer_free(w);
    md_dev_free(m->dev, labels_dev);
    md_dev_free(m->dev, loss_dev);
    md_free(params);
    md_free(grads);
    md_free(stats);
    md_free(logits);
    md_free(raw);
    md_free(inputs);
    return st;
}
