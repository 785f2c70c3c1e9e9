/* cpu_conv_direct_impl.h - the direct convolution kernels of
 * cpu_conv_direct.c for one instruction set. Included once per instruction
 * set there, with ISA (the name suffix), VL (floats per vector), NVMAX
 * (vectors of output channels per tile), TARGET (the function attribute),
 * VEC and the V* operations, and TRV (a VL x VL in-register transpose)
 * defined (and undefined again at the end); everything here is static. Not a
 * header to include elsewhere. */

#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)
#define FN(x) CAT(x, ISA)
#define KB (VL * NVMAX)
#define NV_(n) ((n) <= NVMAX ? (n) : NVMAX)

/* dst[j*ldd + i] = src[i*lds + j] (+ beta * dst) for i < m, j < n. Full
 * VL x VL blocks go through registers; edges are scalar. beta == 0 never reads
 * dst (it may hold NaN). */
static TARGET void FN(transpose)(const float *src, size_t lds, int m, int n, float *dst, size_t ldd, float beta)
{
    /* full blocks: VL destination rows at a time, each filled left to right
     * (with a power-of-two ldd, VL stores side by side across rows would
     * alias in L1 and in store forwarding) */
    int m16 = m / VL * VL, n16 = n / VL * VL;
    for (int j0 = 0; j0 < n16; j0 += VL)
        for (int i0 = 0; i0 < m16; i0 += VL) {
            VEC r[VL];
            for (int i = 0; i < VL; i++) r[i] = VLOAD(src + (size_t)(i0 + i) * lds + j0);
            TRV(r);
            for (int j = 0; j < VL; j++) {
                float *d = dst + (size_t)(j0 + j) * ldd + i0;
                VEC v = r[j];
                if (beta != 0.0f) v = VFMA(VSET1(beta), VLOAD(d), v);
                VSTORE(d, v);
            }
        }
    /* edges */
    for (int j = 0; j < n; j++)
        for (int i = j < n16 ? m16 : 0; i < m; i++) {
            float *d = dst + (size_t)j * ldd + i, v = src[(size_t)i * lds + j];
            *d = beta != 0.0f ? v + beta * *d : v;
        }
}

/* xpad (hp, wp, c) <- image xi (NCHW planes or NHWC rows), zero outside. */
static void FN(pad_image)(const struct md_dconv *g, const struct pad_geom *pg, int nhwc, const float *xi, float *xp)
{
    int C = g->c, cs = pg->cs;
    int h_hi = g->h < pg->hp - g->ph ? g->h : pg->hp - g->ph;
    int w_hi = g->w < pg->wp - g->pw ? g->w : pg->wp - g->pw;
    if (w_hi <= 0 || h_hi <= 0) {
        memset(xp, 0, sizeof(float) * pg->img);
        return;
    }
    size_t row = (size_t)pg->wp * cs;
    /* zero only the border: top rows, left/right columns, bottom rows */
    memset(xp, 0, sizeof(float) * row * g->ph);
    for (int ih = 0; ih < h_hi; ih++) {
        float *d = xp + (size_t)(ih + g->ph) * row;
        memset(d, 0, sizeof(float) * (size_t)g->pw * cs);
        memset(d + (size_t)(g->pw + w_hi) * cs, 0, sizeof(float) * (size_t)(pg->wp - g->pw - w_hi) * cs);
        d += (size_t)g->pw * cs;
        if (nhwc) /* channels past C in each pixel are never read */
            for (int iw = 0; iw < w_hi; iw++)
                memcpy(d + (size_t)iw * cs, xi + ((size_t)ih * g->w + iw) * C, sizeof(float) * (size_t)C);
        else /* (C, w_hi) at plane stride -> (w_hi, cs) */
            FN(transpose)(xi + (size_t)ih * g->w, (size_t)g->h * g->w, C, w_hi, d, (size_t)cs, 0.0f);
    }
    size_t done = (size_t)(h_hi + g->ph) * row;
    memset(xp + done, 0, sizeof(float) * (pg->img - done));
}

/* ---- forward -------------------------------------------------------------- */


/* One tile: mr pixels (input offsets off[]) x nv vectors of output channels,
 * over the taps and the cn channels of one C-block (xb: the block's first
 * channel), into out (row stride KB). The sum runs in pieces of about
 * FWD_PIECE products (whole taps), each started from zero in the registers
 * and then added to out, as a blocked GEMM does: one long running sum in a
 * register rounds about twice as badly. add: out already holds a partial
 * sum (an earlier C-block's). */
INLINE TARGET void FN(fwd_tile)(const int mr, const int nv, const float *xb, const int *off, const int *toff, int rs,
                            int cn, const float *wb, int add, float *out)
{
    int tpp = FWD_PIECE / cn; /* taps per piece */
    if (tpp < 1) tpp = 1;
    for (int t0 = 0; t0 < rs; t0 += tpp) {
        int t1 = t0 + tpp < rs ? t0 + tpp : rs;
        VEC acc[MR][NVMAX];
#pragma GCC unroll 6
        for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++) acc[i][v] = VZERO();
        for (int t = t0; t < t1; t++) {
            const float *xs[MR];
#pragma GCC unroll 6
            for (int i = 0; i < mr; i++) xs[i] = xb + toff[t] + off[i];
            const float *wt = wb + (size_t)t * cn * nv * VL;
            for (int c = 0; c < cn; c++) {
                VEC w[NVMAX];
#pragma GCC unroll 4
                for (int v = 0; v < nv; v++) w[v] = VLOAD(wt + v * VL);
                wt += nv * VL;
#pragma GCC unroll 6
                for (int i = 0; i < mr; i++) {
                    VEC a = VSET1(xs[i][c]);
#pragma GCC unroll 4
                    for (int v = 0; v < nv; v++) acc[i][v] = VFMA(a, w[v], acc[i][v]);
                }
            }
        }
#pragma GCC unroll 6
        for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++) {
                float *o = out + i * KB + v * VL;
                VSTORE(o, add ? VADD(VLOAD(o), acc[i][v]) : acc[i][v]);
            }
        add = 1;
    }
}

/* A tile for run-time mr (1..MR) and nv (1..NVMAX): T(mr, nv) for each
 * constant pair, so that the tile's loops unroll and its sums stay in
 * registers. */
#define TILE_NV(T, M)                                                                                            \
    switch (nv) {                                                                                                \
    case 1: T(M, 1); break;                                                                                      \
    case 2: T(M, 2); break;                                                                                      \
    case 3: T(M, NV_(3)); break;                                                                                 \
    default: T(M, NV_(4)); break;                                                                                \
    }
#define TILE_DISPATCH(T)                                                                                         \
    switch (mr) {                                                                                                \
    case 1: TILE_NV(T, 1) break;                                                                                 \
    case 2: TILE_NV(T, 2) break;                                                                                 \
    case 3: TILE_NV(T, 3) break;                                                                                 \
    case 4: TILE_NV(T, 4) break;                                                                                 \
    case 5: TILE_NV(T, 5) break;                                                                                 \
    default: TILE_NV(T, 6) break;                                                                                \
    }

static TARGET void FN(fwd_tile_any)(int mr, int nv, const float *xb, const int *off, const int *toff, int rs, int cn,
                                    const float *wb, int add, float *out)
{
#define T(M, N) FN(fwd_tile)(M, N, xb, off, toff, rs, cn, wb, add, out)
    TILE_DISPATCH(T)
#undef T
}

/* Pixels [a, b) of the task's images (pixel i: image i / PQ) from the
 * staging rows (row stride KB, row 0 = pixel ch0) to y, with beta. */
static void FN(fwd_flush)(const struct fwd_ctx *c, int img0, int ch0, int a, int b, int k0, int kn, const float *stage)
{
    const struct md_dconv *g = c->g;
    int pq = g->p * g->q;
    while (a < b) {
        int il = a / pq, pp = a % pq, cnt = pq - pp < b - a ? pq - pp : b - a;
        const float *st = stage + (size_t)(a - ch0) * KB;
        size_t img = (size_t)img0 + il;
        if (c->nhwc) {
            for (int i = 0; i < cnt; i++) {
                size_t row = img * pq + pp + i;
                if (c->phase) /* a phase of a larger tensor */
                    row = (img * (size_t)c->phase->h + (size_t)((pp + i) / g->q * c->phase->sh + c->phase->a)) *
                              (size_t)c->phase->w + (size_t)((pp + i) % g->q * c->phase->sw + c->phase->b);
                float *yr = c->y + row * g->k + k0;
                const float *tr = st + (size_t)i * KB;
                if (c->beta == 0.0f)
                    memcpy(yr, tr, sizeof(float) * (size_t)kn);
                else
                    for (int k = 0; k < kn; k++) yr[k] = tr[k] + c->beta * yr[k];
            }
        } else {
            FN(transpose)(st, KB, cnt, kn, c->y + (img * g->k + k0) * pq + pp, (size_t)pq, c->beta);
        }
        a += cnt;
    }
}

static void FN(fwd_range)(void *vc, long long b, long long e)
{
    const struct fwd_ctx *c = vc;
    const struct md_dconv *g = c->g;
    float *own = c->buf + (size_t)md_parallel_thread_id() * c->per_thread;
    float *stage = own + c->stage_off; /* (chunk, KB) sums of a pixel chunk */
    int pq = g->p * g->q;
    for (long long task = b; task < e; task++) {
        /* task = (image group it, K-block group kg): images [it*n/T, (it+1)*n/T),
         * K-blocks [kg*nkb/G, (kg+1)*nkb/G) */
        long long it = task / c->kgroups, kg = task % c->kgroups;
        int img0 = (int)(it * g->n / c->tasks), gi = (int)((it + 1) * g->n / c->tasks) - img0, npix = gi * pq;
        int kb0 = (int)(kg * c->nkb / c->kgroups), kb1 = (int)((kg + 1) * c->nkb / c->kgroups);
        /* the task's padded images: made once for all tasks (xall), or here */
        float *xp = c->xall ? c->xall + (size_t)img0 * c->pg.img : own;
        if (!c->xall)
            for (int i = 0; i < gi; i++)
                FN(pad_image)(g, &c->pg, c->nhwc, c->x + (size_t)(img0 + i) * g->c * g->h * g->w, xp + (size_t)i * c->pg.img);
        int chunk = c->ncb > 1 ? npix : c->chunk;
        for (int kb = kb0; kb < kb1; kb++) {
            int k0 = kb * KB, nv = (c->kp - k0) / VL < NVMAX ? (c->kp - k0) / VL : NVMAX;
            int kn = g->k - k0 < nv * VL ? g->k - k0 : nv * VL; /* real channels in the block */
            const float *wk = c->wpk + (size_t)k0 * c->rs * g->c;
            for (int ch0 = 0; ch0 < npix; ch0 += chunk) {
                int ch1 = ch0 + chunk < npix ? ch0 + chunk : npix;
                for (int cb = 0; cb < c->ncb; cb++) {
                    int c0 = cb * c->cbs, cn = g->c - c0 < c->cbs ? g->c - c0 : c->cbs;
                    const float *wb = wk + (size_t)c0 * c->rs * nv * VL;
                    for (int pix0 = ch0; pix0 < ch1; pix0 += MR) {
                        int mr = ch1 - pix0 < MR ? ch1 - pix0 : MR, off[MR];
                        for (int i = 0; i < mr; i++) {
                            int il = (pix0 + i) / pq, pp = (pix0 + i) % pq, p = pp / g->q, q = pp % g->q;
                            off[i] = (int)(il * c->pg.img) + ((p * g->sh) * c->pg.wp + q * g->sw) * c->pg.cs;
                        }
                        float *st = stage + (size_t)(pix0 - ch0) * KB;
                        FN(fwd_tile_any)(mr, nv, xp + c0, off, c->toff, c->rs, cn, wb, cb > 0, st);
                    }
                }
                FN(fwd_flush)(c, img0, ch0, ch0, ch1, k0, kn, stage);
            }
        }
    }
}

static void FN(fwd_pad_range)(void *vc, long long b, long long e)
{
    const struct fwd_ctx *c = vc;
    const struct md_dconv *g = c->g;
    for (long long i = b; i < e; i++)
        FN(pad_image)(g, &c->pg, c->nhwc, c->x + (size_t)i * g->c * g->h * g->w, c->xall + (size_t)i * c->pg.img);
}

/* Channels per C-block: the block's packed weights (taps x cbs x 64 floats)
 * within ~256 KiB, blocks of equal size. */
static int FN(c_block)(const struct md_dconv *g, int *ncb)
{
    int rs = g->r * g->s;
    int cmax = (256 << 10) / (rs * KB * 4);
    if (cmax < 1) cmax = 1;
    int n = (g->c + cmax - 1) / cmax;
    *ncb = n;
    return (g->c + n - 1) / n;
}


static int FN(direct_fwd_fits)(const struct md_dconv *g)
{
    /* enough work per loaded weight vector; offsets within int */
    struct pad_geom pg = pad_geom(g);
    return md_cpu_direct_enabled() && g->c * g->r * g->s >= 16 && (size_t)g->r * g->s <= 1024 &&
           pg.img * 16 < (size_t)1 << 30;
}

static int FN(direct_fwd_ok)(const struct md_dconv *g)
{
    /* 1x1 with few input channels: a plain GEMM does as well, without the
     * transposes (measured on resnet18_cifar's 64 -> 128 stride-2 shortcut) */
    if (g->r * g->s == 1 && g->c < 128) return 0;
    /* (not on the thread count: the choice of path would change the results) */
    return FN(direct_fwd_fits)(g);
}


static void FN(pack_range)(void *vc, long long b, long long e)
{
    const struct pack_ctx *pk = vc;
    const struct fwd_ctx *c = pk->c;
    const struct md_dconv *g = c->g;
    size_t rs = (size_t)c->rs, C = (size_t)g->c, K = (size_t)g->k;
    for (long long task = b; task < e; task++) {
        int kb = (int)(task / c->ncb), cb = (int)(task % c->ncb);
        int k0 = kb * KB, nv = (c->kp - k0) / VL < NVMAX ? (c->kp - k0) / VL : NVMAX, kw = nv * VL;
        int c0 = cb * c->cbs, cn = g->c - c0 < c->cbs ? g->c - c0 : c->cbs;
        float *wb = pk->wpk + (size_t)k0 * rs * C + (size_t)c0 * rs * kw;
        int kn = (size_t)(k0 + kw) <= K ? kw : (int)(K - (size_t)k0); /* real output channels */
        if (c->nhwc) {
            /* (K, R*S, C): per tap a (kn, cn) block to transpose; flipped,
             * (C, R*S, K): per tap and channel a run of kn to copy */
            const struct md_dphase *ph = c->phase;
            size_t wrs = ph ? (size_t)ph->wrs : rs; /* taps per row of w */
            for (size_t t = 0; t < rs; t++) {
                float *dt = wb + t * (size_t)cn * kw;
                size_t wt = ph ? (size_t)ph->tap_of[t] : rs - 1 - t; /* flipped: w's tap */
                if (!pk->flip)
                    FN(transpose)(pk->w + (size_t)k0 * rs * C + t * C + (size_t)c0, rs * C, kn, cn, dt, (size_t)kw, 0.0f);
                else
                    for (int ch = 0; ch < cn; ch++)
                        memcpy(dt + (size_t)ch * kw, pk->w + ((size_t)(c0 + ch) * wrs + wt) * K + (size_t)k0,
                               sizeof(float) * (size_t)kn);
                if (kn < kw)
                    for (int ch = 0; ch < cn; ch++) memset(dt + (size_t)ch * kw + kn, 0, sizeof(float) * (size_t)(kw - kn));
            }
            continue;
        }
        /* written in order; the reads walk kw rows of w side by side (for
         * each k, consecutive (c, tap) are near), which stay in L1 */
        float *d = wb;
        for (size_t t = 0; t < rs; t++)
            for (int ch = 0; ch < cn; ch++) {
                size_t cc = (size_t)(c0 + ch);
                int kk = 0;
                for (; kk < kw && (size_t)(k0 + kk) < K; kk++) {
                    size_t k = (size_t)(k0 + kk);
                    if (!pk->flip)
                        *d++ = c->nhwc ? pk->w[(k * rs + t) * C + cc] : pk->w[(k * C + cc) * rs + t];
                    else
                        *d++ = c->nhwc ? pk->w[(cc * rs + (rs - 1 - t)) * K + k] : pk->w[(cc * K + k) * rs + (rs - 1 - t)];
                }
                for (; kk < kw; kk++) *d++ = 0.0f;
            }
    }
}

static md_status FN(direct_fwd)(const struct md_dconv *g, const struct md_dphase *phase, int nhwc, int flip,
                                const float *x, const float *w, float *y, float beta)
{
    if (phase && !nhwc) return md_errf(MD_ERR_INTERNAL, "cpu direct convolution: a phase output needs NHWC");
    struct fwd_ctx c = {.g = g, .phase = phase, .nhwc = nhwc, .x = x, .y = y, .beta = beta, .chunk = FWD_CHUNK};
    c.pg = pad_geom(g);
    c.rs = g->r * g->s;
    c.kp = (g->k + VL - 1) / VL * VL;
    c.nkb = (c.kp + KB - 1) / KB;
    c.cbs = FN(c_block)(g, &c.ncb);
    int pq = g->p * g->q, threads = md_threadpool_size();
    /* small planes: several images per task so that every weight block
     * loaded serves ~192 pixels, while leaving a task per thread */
    c.grp = pq >= 192 ? 1 : (192 + pq - 1) / pq;
    if (c.grp > 16) c.grp = 16;
    /* tasks: image groups x K-block groups, about FWD_TASKS_PER_THREAD per
     * thread so that many threads stay busy on small batches and planes
     * (late layers: a few image groups, many K-blocks). K is split first
     * (the batch is then padded once for all tasks, below); then images are
     * spread evenly over the groups (group i: images [i*n/T, (i+1)*n/T)).
     * Every output element is still one task's sum in a fixed order: the
     * split does not change the results. */
    int tasks = (g->n + c.grp - 1) / c.grp, want = threads > 1 ? threads * FWD_TASKS_PER_THREAD : 1;
    /* but not below FWD_TASK_FLOPS a task (1x1 layers on 4x4 planes: the
     * per-task costs would outweigh the products) */
    double flops = 2.0 * g->n * pq * g->k * g->c * c.rs;
    if (want > 1 && want > flops / FWD_TASK_FLOPS) want = flops / FWD_TASK_FLOPS > 1 ? (int)(flops / FWD_TASK_FLOPS) : 1;
    c.kgroups = 1;
    if (tasks < want) c.kgroups = (want + tasks - 1) / tasks < c.nkb ? (want + tasks - 1) / tasks : c.nkb;
    /* groups of equal size: a count that does not divide the K-blocks (3 of
     * 4) leaves some tasks twice the work of the others */
    while (c.nkb % c.kgroups) c.kgroups++;
    if ((long long)tasks * c.kgroups < want) tasks = (want + c.kgroups - 1) / c.kgroups;
    if (tasks > g->n) tasks = g->n;
    c.tasks = tasks;
    c.grp = (g->n + tasks - 1) / tasks; /* the largest task */
    /* with K groups, the batch is padded once for all tasks (within
     * FWD_SHARED_BYTES) instead of once per K group */
    int shared = c.kgroups > 1 && (size_t)g->n * c.pg.img * sizeof(float) <= FWD_SHARED_BYTES;
    size_t stage_px = c.ncb > 1 ? (size_t)c.grp * pq : FWD_CHUNK;
    c.stage_off = shared ? 0 : ((size_t)c.grp * c.pg.img + 15) / 16 * 16;
    c.per_thread = c.stage_off + stage_px * KB;
    size_t rs = (size_t)c.rs;
    float *wpk = md_cpu_scratch(CPU_SCR_WTAP, sizeof(float) * (size_t)c.kp * rs * g->c + sizeof(int) * rs);
    c.buf = md_cpu_scratch(CPU_SCR_COL, sizeof(float) * c.per_thread * (size_t)threads);
    c.xall = shared ? md_cpu_scratch(CPU_SCR_TMP, sizeof(float) * (size_t)g->n * c.pg.img) : NULL;
    if (!wpk || !c.buf || (shared && !c.xall)) return MD_ERR_OOM;
    if (shared) md_parallel_for(g->n, 1, FN(fwd_pad_range), &c);
    struct pack_ctx pk = {&c, w, wpk, flip};
    md_parallel_for((long long)c.nkb * c.ncb, 1, FN(pack_range), &pk);
    int *toff = (int *)(wpk + (size_t)c.kp * rs * g->c);
    for (int r = 0; r < g->r; r++)
        for (int s = 0; s < g->s; s++) toff[r * g->s + s] = (r * g->dh * c.pg.wp + s * g->dw) * c.pg.cs;
    c.wpk = wpk;
    c.toff = toff;
    md_parallel_for((long long)c.tasks * c.kgroups, 1, FN(fwd_range), &c);
    return MD_OK;
}

/* ---- backward-filter -------------------------------------------------------- */


/* Images of slot s: [s*n/slots, (s+1)*n/slots); in the current wave w of W,
 * the part [w*len/W, (w+1)*len/W) of them, at buffer index s*cap onwards. */
static void FN(slot_images)(const struct filt_ctx *c, int s, int *i0, int *i1)
{
    int a = (int)((long long)s * c->g->n / c->slots), b = (int)((long long)(s + 1) * c->g->n / c->slots);
    long long len = b - a;
    *i0 = a + (int)(len * c->wave / c->waves);
    *i1 = a + (int)(len * (c->wave + 1) / c->waves);
}

static void FN(filt_prep_range)(void *vc, long long b, long long e)
{
    const struct filt_ctx *c = vc;
    const struct md_dconv *g = c->g;
    int pq = g->p * g->q;
    for (long long pos = b; pos < e; pos++) {
        int i0, i1, slot = (int)(pos / c->cap);
        FN(slot_images)(c, slot, &i0, &i1);
        long long img = i0 + pos % c->cap;
        if (img >= i1) continue;
        FN(pad_image)(g, &c->pg, c->nhwc, c->x + (size_t)img * g->c * g->h * g->w, c->xpad + (size_t)pos * c->pg.img);
        if (c->dy_in_place) continue; /* NHWC dy rows of a multiple of 16 channels: read where they are */
        float *d = c->dyt + (size_t)pos * pq * c->kps;
        if (c->nhwc) {
            const float *s = c->dy + (size_t)img * pq * g->k;
            for (int i = 0; i < pq; i++) {
                memcpy(d + (size_t)i * c->kps, s + (size_t)i * g->k, sizeof(float) * (size_t)g->k);
                memset(d + (size_t)i * c->kps + g->k, 0, sizeof(float) * (size_t)(c->kp - g->k));
            }
        } else {
            /* (K, P*Q) -> (P*Q, kp) */
            FN(transpose)(c->dy + (size_t)img * g->k * pq, (size_t)pq, g->k, pq, d, (size_t)c->kps, 0.0f);
            if (c->kp > g->k)
                for (int i = 0; i < pq; i++) memset(d + (size_t)i * c->kps + g->k, 0, sizeof(float) * (size_t)(c->kp - g->k));
        }
    }
}

/* acc (mr input channels x nv vectors of output channels) summed over nrow
 * output rows: row j's pixels start at xr[j] (+ xoff, then sw*C per pixel)
 * in xpad and at dr[j] in dyt. pd: the dW partial at (tap, c0, k0). */
INLINE TARGET void FN(filt_tile)(const int mr, const int nv, const struct filt_ctx *c, const float *const *xr,
                             const float *const *dr, int nrow, int nq, int xoff, int k0, float *pd)
{
    const struct md_dconv *g = c->g;
    VEC acc[MR][NVMAX];
#pragma GCC unroll 6
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) acc[i][v] = VLOAD(pd + (size_t)i * c->kp + v * VL);
    size_t xstep = (size_t)g->sw * c->pg.cs;
    for (int row = 0; row < nrow; row++) {
        const float *x = xr[row] + xoff, *d = dr[row] + k0;
        for (int q = 0; q < nq; q++) {
            VEC dv[NVMAX];
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++) dv[v] = VLOAD(d + v * VL);
#pragma GCC unroll 6
            for (int i = 0; i < mr; i++) {
                VEC a = VSET1(x[i]);
#pragma GCC unroll 4
                for (int v = 0; v < nv; v++) acc[i][v] = VFMA(a, dv[v], acc[i][v]);
            }
            x += xstep;
            d += c->kps;
        }
    }
#pragma GCC unroll 6
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) VSTORE(pd + (size_t)i * c->kp + v * VL, acc[i][v]);
}

static TARGET void FN(filt_tile_any)(int mr, int nv, const struct filt_ctx *c, const float *const *xr,
                                     const float *const *dr, int nrow, int nq, int xoff, int k0, float *pd)
{
#define T(M, N) FN(filt_tile)(M, N, c, xr, dr, nrow, nq, xoff, k0, pd)
    TILE_DISPATCH(T)
#undef T
}

static void FN(filt_range)(void *vc, long long b, long long e)
{
    const struct filt_ctx *c = vc;
    const struct md_dconv *g = c->g;
    int nct = (g->c + MR - 1) / MR, units = c->rs * nct; /* tiles (tap, MR input channels) */
    for (long long task = b; task < e; task++) {
        /* task = (slot, K-block, unit group): the slot's pixels for the
         * tiles [u0, u1) of one K-block, disjoint parts of the slot's partial */
        int ug = (int)(task % c->ugroups), slot = (int)(task / c->ugroups / c->nkb), kb = (int)(task / c->ugroups % c->nkb);
        int u0 = (int)((long long)ug * units / c->ugroups), u1 = (int)((long long)(ug + 1) * units / c->ugroups);
        int k0 = kb * KB, nv = (c->kp - k0) / VL < NVMAX ? (c->kp - k0) / VL : NVMAX;
        int i0, i1;
        FN(slot_images)(c, slot, &i0, &i1);
        float *part = c->part + (size_t)slot * c->rs * g->c * c->kp;
        if (c->wave == 0)
            for (int u = u0; u < u1; u++) {
                int t = u / nct, c0 = u % nct * MR, mr = g->c - c0 < MR ? g->c - c0 : MR;
                for (int i = 0; i < mr; i++)
                    memset(part + ((size_t)t * g->c + c0 + i) * c->kp + k0, 0, sizeof(float) * nv * VL);
            }
        size_t buf0 = (size_t)slot * c->cap; /* the buffer index of image i0 */
        /* rows (image, p) of the slot in blocks of ~FILT_PX pixels */
        /* runs of nq pixels: whole output rows, or single pixels where rows
         * are short (the loop over a 4-pixel row would cost more than its
         * FMAs). From 8 pixels whole rows: small_cnn's 14-pixel rows as
         * single pixels reloaded two row pointers a pixel (AVX2 filter
         * 11.3-11.8 -> 8.8-10.8 ms at 2 threads; no change on AVX-512's
         * 8-pixel rows) */
        int nq = g->q >= 8 ? g->q : 1, runs = (i1 - i0) * g->p * (g->q / nq), rb = FILT_PX / nq;
        if (rb < 1) rb = 1; /* rows longer than a block: a row a block */
        if (rb > FILT_ROWS) rb = FILT_ROWS;
        const float *xr[FILT_ROWS], *dr[FILT_ROWS];
        for (int run0 = 0; run0 < runs; run0 += rb) {
            int nrow = runs - run0 < rb ? runs - run0 : rb;
            for (int j = 0; j < nrow; j++) {
                int run = run0 + j, row = run / (g->q / nq), q = (run % (g->q / nq)) * nq;
                size_t img = buf0 + (size_t)(row / g->p);
                int p = row % g->p;
                xr[j] = c->xpad + img * c->pg.img + ((size_t)(p * g->sh) * c->pg.wp + (size_t)q * g->sw) * c->pg.cs;
                size_t dimg = c->dy_in_place ? (size_t)i0 + (size_t)(row / g->p) : img;
                dr[j] = (c->dy_in_place ? c->dy : c->dyt) + ((dimg * g->p + p) * g->q + q) * c->kps;
            }
            for (int u = u0; u < u1; u++) {
                int t = u / nct, c0 = u % nct * MR, mr = g->c - c0 < MR ? g->c - c0 : MR;
                float *pd = part + ((size_t)t * g->c + c0) * c->kp + k0;
                FN(filt_tile_any)(mr, nv, c, xr, dr, nrow, nq, c->toff[t] + c0, k0, pd);
            }
        }
    }
}

static TARGET void FN(filt_sum_range)(void *vc, long long b, long long e)
{
    const struct filt_ctx *c = vc;
    const struct md_dconv *g = c->g;
    size_t slot_floats = (size_t)c->rs * g->c * c->kp;
    float v[VL];
    int no = c->rs * g->c;
    for (long long task = b; task < e; task++) {
        /* task = (VL output channels, a run of FILT_SUM_RUN of dw's (c, tap)) */
        long long kbk = task / ((no + FILT_SUM_RUN - 1) / FILT_SUM_RUN);
        int o0 = (int)(task % ((no + FILT_SUM_RUN - 1) / FILT_SUM_RUN)) * FILT_SUM_RUN;
        int o1 = o0 + FILT_SUM_RUN < no ? o0 + FILT_SUM_RUN : no;
        int k0 = (int)kbk * VL, kn = g->k - k0 < VL ? g->k - k0 : VL;
        for (int o = o0; o < o1; o++) {
            /* o walks dw's order: (c, tap) for NCHW, (tap, c) for NHWC */
            int ch = c->nhwc ? o % g->c : o / c->rs, t = c->nhwc ? o / g->c : o % c->rs;
            const float *src = c->part + ((size_t)t * g->c + ch) * c->kp + k0;
            VEC acc = VLOAD(src);
            for (int sl = 1; sl < c->slots; sl++) acc = VADD(acc, VLOAD(src + sl * slot_floats));
            VSTORE(v, acc);
            for (int k = 0; k < kn; k++) {
                float *d = c->dw + (size_t)(k0 + k) * c->rs * g->c + o;
                *d = c->beta != 0.0f ? v[k] + c->beta * *d : v[k];
            }
        }
    }
}

static int FN(direct_filter_ok)(const struct md_dconv *g)
{
    if (g->r * g->s == 1 && g->c < 128) return 0; /* as for the forward */
    /* Where im2col + OpenBLAS's GEMM computes the filter gradient faster
     * (kernels_bench, docs/performance-cpu.md); fixed by the shape, so the
     * sums never depend on the thread count. */
#if ISA == 256
    /* AVX2 (2-core EPYC): the 6 x 16 tile wins only on small C*R*S with
     * stride 1 (small_cnn's conv2 11 vs 14 ms, resnet18_cifar's first stage
     * even); from C*R*S = 1152 on, and for strided and 1x1 convolutions,
     * the GEMM's larger blocks win (resnet18_cifar's last stage 81 -> 33 ms) */
    if (g->sh != 1 || g->sw != 1 || g->r * g->s == 1 || (long long)g->c * g->r * g->s > 576) return 0;
#else
    /* AVX-512 (16-core Xeon): outputs of at most 16 pixels (resnet18_cifar's
     * 4 x 4 stage) are single-pixel runs too short for the tile: the GEMM is
     * faster at 1 and at 16 threads (6.6 -> 4.9 ms at 16) */
    if (g->p * g->q <= 16) return 0;
#endif
    struct pad_geom pg = pad_geom(g); /* tap offsets within int */
    return md_cpu_direct_enabled() && g->n >= 1 && (size_t)g->r * g->s <= 1024 && pg.img < (size_t)1 << 30;
}

static md_status FN(direct_filter)(const struct md_dconv *g, int nhwc, const float *x, const float *dy, float *dw,
                               float beta)
{
    struct filt_ctx c = {.g = g, .nhwc = nhwc, .x = x, .dy = dy, .dw = dw, .beta = beta};
    c.pg = pad_geom(g);
    c.rs = g->r * g->s;
    c.kp = (g->k + VL - 1) / VL * VL;
    /* rows of 1 KiB and more a power of two apart alias in L1 (resnet18's
     * 256 and 512 channel filters: 14 -> 19 ms); up to 64 channels the rows
     * spread over the sets and the copy is only a cost */
    c.dy_in_place = nhwc && g->k % VL == 0 && (g->k <= 64 || row_stride(g->k) == g->k);
    c.kps = c.dy_in_place ? g->k : row_stride(c.kp);
    c.nkb = (c.kp + KB - 1) / KB;
    /* slots (runs of images with their own partial sums, added in slot
     * order): about FILT_PAIRS (slot, K-block) pairs from the shape alone, so
     * the summation order never depends on the thread count; fewer slots
     * where partials are large (at most FILT_PART_BYTES of them, at least
     * one slot). Each pair is then cut into groups of (tap, channel) tiles,
     * which own disjoint dW elements: as many as it takes to give every
     * thread FILT_TASKS_PER_THREAD tasks. That split follows the thread count
     * but cannot change any sum; groups re-read their slot's images, so
     * more slots and fewer groups keep each thread's data its own (8 pairs
     * -> 32: resnet18_cifar's filter gradients 86 -> 74 ms at 16 threads on
     * a Xeon). */
    c.slots = (FILT_PAIRS + c.nkb - 1) / c.nkb;
    {
        size_t part_bytes = sizeof(float) * (size_t)c.rs * g->c * c.kp, cap = FILT_PART_BYTES / part_bytes;
        if ((size_t)c.slots > cap) c.slots = cap > 0 ? (int)cap : 1;
    }
    if (c.slots > g->n) c.slots = g->n;
    {
        int units = c.rs * ((g->c + MR - 1) / MR), base = c.slots * c.nkb, threads = md_threadpool_size();
        int want = threads > 1 ? threads * FILT_TASKS_PER_THREAD : 1;
        c.ugroups = base >= want ? 1 : (want + base - 1) / base;
        if (c.ugroups > units) c.ugroups = units;
    }
    size_t pq = (size_t)g->p * g->q, slot_floats = (size_t)c.rs * g->c * c.kp;
    /* padded inputs and dy rows of at most FILT_PREP_BYTES at a time (at
     * least one image per slot): waves of cap images per slot */
    size_t per_img = c.pg.img + (c.dy_in_place ? 0 : pq * c.kps), fit = g_prep_bytes / 4 / per_img / (size_t)c.slots;
    int longest = (g->n + c.slots - 1) / c.slots;
    c.cap = fit < 1 ? 1 : fit > (size_t)longest ? longest : (int)fit;
    c.waves = (longest + c.cap - 1) / c.cap;
    c.cap = (longest + c.waves - 1) / c.waves; /* the largest wave of a slot */
    size_t fl_x = c.pg.img * c.cap * c.slots, fl_dy = c.dy_in_place ? 0 : pq * c.kps * c.cap * c.slots, fl_part = slot_floats * c.slots;
    float *buf = md_cpu_scratch(CPU_SCR_COL, sizeof(float) * (fl_x + fl_dy + fl_part));
    int *toff = md_cpu_scratch(CPU_SCR_WTAP, sizeof(int) * (size_t)c.rs);
    if (!buf || !toff) return MD_ERR_OOM;
    c.xpad = buf;
    c.dyt = buf + fl_x;
    c.part = c.dyt + fl_dy;
    for (int r = 0; r < g->r; r++)
        for (int s = 0; s < g->s; s++) toff[r * g->s + s] = (r * g->dh * c.pg.wp + s * g->dw) * c.pg.cs;
    c.toff = toff;
    for (c.wave = 0; c.wave < c.waves; c.wave++) {
        md_parallel_for((long long)c.slots * c.cap, 1, FN(filt_prep_range), &c);
        md_parallel_for((long long)c.slots * c.nkb * c.ugroups, 1, FN(filt_range), &c);
    }
    md_parallel_for((long long)(g->k + VL - 1) / VL * ((c.rs * g->c + FILT_SUM_RUN - 1) / FILT_SUM_RUN), 1,
                    FN(filt_sum_range), &c);
    return MD_OK;
}

#undef CAT_
#undef CAT
#undef FN
#undef KB
#undef NV_
#undef TILE_NV
#undef TILE_DISPATCH
#undef ISA
#undef VL
#undef NVMAX
#undef FILT_PX
#undef TARGET
#undef VEC
#undef VLOAD
#undef VSTORE
#undef VSET1
#undef VFMA
#undef VADD
#undef VZERO
#undef TRV
