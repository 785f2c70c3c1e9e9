/* attn.metal - softmax over the last dimension and scaled-dot-product
 * attention (fp32 arithmetic whatever the storage type).
 *
 * Softmax: one threadgroup per row (max, then the sum of exponentials, both
 * fixed-order threadgroup reductions).
 *
 * Attention, the plain SIMT form (not flash-tiled; correct first):
 *   forward, one threadgroup per query row i: pass 1, each thread scores its
 *   keys (s_j = scale q_i . k_j) keeping a running max and sum, combined into
 *   the row's logsumexp; pass 2, chunks of MD_MTL_RED_THREADS keys: each
 *   thread writes its key's weight (exp(s_j - lse), dropout applied) into
 *   threadgroup memory, then threads over head_dim add the chunk's p_j v_j.
 *   Nothing larger than one chunk of weights is ever stored.
 *   backward dq, one threadgroup per query row: D_i = dO_i . o_i, then by
 *   chunks ds_j = p_j (dp_j * keep - D_i) with dp_j = dO_i . v_j, and
 *   dq_i = scale sum_j ds_j k_j.
 *   backward dk/dv, one threadgroup per key row j: by chunks of queries
 *   i (those that see j), p_ij from the saved lse_i, D_i recomputed, and
 *   dv_j = sum_i pd_ij dO_i, dk_j = scale sum_i ds_ij q_i.
 * Threadgroup memory (MD_MTL_ATTN_TGMEM floats): [0, T) reduction scratch,
 * [T, 2T) the chunk's weights, then two rows of head_dim. */
#include "md_metal_common.h"

/* ---- softmax --------------------------------------------------------------------------- */
template <int DT>
[[kernel]] void md_mtl_softmax_fwd(MD_KARGS, constant md_mtl_softmax_params &p [[buffer(0)]],
                                   device const typename md_dt<DT>::S *x [[buffer(1)]],
                                   device typename md_dt<DT>::S *y [[buffer(2)]])
{
    const int r = int(tgid.x);
    const uint t = lid.x, nt = tgsz.x;
    if (r >= p.rows) return;
    const long o = long(r) * p.n;
    const int last = min(p.causal ? r % p.tq : p.n - 1, p.n - 1);
    float m = -INFINITY;
    for (int j = int(t); j <= last; j += int(nt)) m = max(m, p.scale * md_dt<DT>::ld(x[o + j]));
    m = md_mtl_tg_max(m, tg, t, nt);
    float s = 0.0f;
    for (int j = int(t); j <= last; j += int(nt)) s += exp(p.scale * md_dt<DT>::ld(x[o + j]) - m);
    const float inv = 1.0f / md_mtl_tg_sum(s, tg, t, nt);
    for (int j = int(t); j < p.n; j += int(nt))
        md_mtl_put<DT>(y + o + j, j <= last ? exp(p.scale * md_dt<DT>::ld(x[o + j]) - m) * inv : 0.0f, p.beta);
}

template <int DT>
[[kernel]] void md_mtl_softmax_bwd(MD_KARGS, constant md_mtl_softmax_params &p [[buffer(0)]],
                                   device const typename md_dt<DT>::S *y [[buffer(1)]],
                                   device const typename md_dt<DT>::S *dy [[buffer(2)]],
                                   device typename md_dt<DT>::S *dx [[buffer(3)]])
{
    const int r = int(tgid.x);
    const uint t = lid.x, nt = tgsz.x;
    if (r >= p.rows) return;
    const long o = long(r) * p.n;
    float s = 0.0f;
    for (int j = int(t); j < p.n; j += int(nt)) s += md_dt<DT>::ld(dy[o + j]) * md_dt<DT>::ld(y[o + j]);
    s = md_mtl_tg_sum(s, tg, t, nt);
    for (int j = int(t); j < p.n; j += int(nt))
        md_mtl_put<DT>(dx + o + j, p.scale * md_dt<DT>::ld(y[o + j]) * (md_dt<DT>::ld(dy[o + j]) - s), p.beta);
}

/* ---- attention ---------------------------------------------------------------------------- */

inline long md_mtl_at(constant md_mtl_attn_params &p, constant md_mi64 *s, int bh, int t)
{
    return long(bh / p.heads) * s[0] + long(bh % p.heads) * s[1] + long(t) * s[2];
}

/* The dropout factor of weight (bh, i, j): 0 or 1/(1-p). */
inline float md_mtl_keep(constant md_mtl_attn_params &p, int bh, int i, int j)
{
    if (!p.dropout) return 1.0f;
    ulong ctr = p.offset + (ulong(bh) * ulong(p.tq) + ulong(i)) * ulong(p.tk) + ulong(j);
    return md_mtl_rng_uniform(p.seed, ctr) < p.p ? 0.0f : p.keep_scale;
}

/* row . (element row of a strided tensor) over head_dim, row in threadgroup memory */
template <int DT>
inline float md_mtl_dot_row(threadgroup const float *row, device const typename md_dt<DT>::S *m, long off, int d)
{
    float s = 0.0f;
    for (int e = 0; e < d; e++) s += row[e] * md_dt<DT>::ld(m[off + e]);
    return s;
}

template <int DT>
[[kernel]] void md_mtl_attn_fwd(MD_KARGS, constant md_mtl_attn_params &p [[buffer(0)]],
                                device const typename md_dt<DT>::S *q [[buffer(1)]],
                                device const typename md_dt<DT>::S *k [[buffer(2)]],
                                device const typename md_dt<DT>::S *v [[buffer(3)]],
                                device typename md_dt<DT>::S *o [[buffer(4)]],
                                device float *lse [[buffer(5)]])
{
    const uint t = lid.x, nt = tgsz.x;
    const int row = int(tgid.x), bh = row / max(p.tq, 1), i = row % max(p.tq, 1);
    if (row >= p.batch * p.heads * p.tq) return;
    threadgroup float *w = tg + nt, *qr = tg + 2 * nt;
    const long oq = md_mtl_at(p, p.sq, bh, i);
    for (int e = int(t); e < p.d; e += int(nt)) qr[e] = md_dt<DT>::ld(q[oq + e]);
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const int kn = p.causal ? min(i + 1, p.tk) : p.tk;
    /* pass 1: running max and sum per thread, then combined */
    float m = -INFINITY, l = 0.0f;
    for (int j = int(t); j < kn; j += int(nt)) {
        float s = p.scale * md_mtl_dot_row<DT>(qr, k, md_mtl_at(p, p.sk, bh, j), p.d);
        if (s > m) {
            l = l * exp(m - s) + 1.0f;
            m = s;
        } else {
            l += exp(s - m);
        }
    }
    const float gm = md_mtl_tg_max(m, tg, t, nt);
    const float L = gm + log(md_mtl_tg_sum(m == -INFINITY ? 0.0f : l * exp(m - gm), tg, t, nt));
    if (t == 0 && p.has_lse) lse[row] = L;
    /* pass 2: o_i = sum_j p_j v_j by chunks of nt keys */
    float acc = 0.0f; /* thread t < d owns feature t (and t + nt, ... via the loop below) */
    const long oo = md_mtl_at(p, p.so, bh, i);
    for (int e0 = 0; e0 < p.d; e0 += int(nt)) {
        acc = 0.0f;
        for (int j0 = 0; j0 < kn; j0 += int(nt)) {
            int j = j0 + int(t);
            if (j < kn) w[t] = exp(p.scale * md_mtl_dot_row<DT>(qr, k, md_mtl_at(p, p.sk, bh, j), p.d) - L) * md_mtl_keep(p, bh, i, j);
            threadgroup_barrier(mem_flags::mem_threadgroup);
            int e = e0 + int(t), cn = min(int(nt), kn - j0);
            if (e < p.d)
                for (int jj = 0; jj < cn; jj++) acc += w[jj] * md_dt<DT>::ld(v[md_mtl_at(p, p.sv, bh, j0 + jj) + e]);
            threadgroup_barrier(mem_flags::mem_threadgroup);
        }
        if (e0 + int(t) < p.d) o[oo + e0 + int(t)] = md_dt<DT>::st(acc);
    }
}

template <int DT>
[[kernel]] void md_mtl_attn_bwd_q(MD_KARGS, constant md_mtl_attn_params &p [[buffer(0)]],
                                  device const typename md_dt<DT>::S *q [[buffer(1)]],
                                  device const typename md_dt<DT>::S *k [[buffer(2)]],
                                  device const typename md_dt<DT>::S *v [[buffer(3)]],
                                  device const typename md_dt<DT>::S *o [[buffer(4)]],
                                  device const float *lse [[buffer(5)]],
                                  device const typename md_dt<DT>::S *dout [[buffer(6)]],
                                  device typename md_dt<DT>::S *dq [[buffer(7)]])
{
    const uint t = lid.x, nt = tgsz.x;
    const int row = int(tgid.x), bh = row / max(p.tq, 1), i = row % max(p.tq, 1);
    if (row >= p.batch * p.heads * p.tq) return;
    threadgroup float *w = tg + nt, *qr = tg + 2 * nt, *gr = qr + MD_MTL_ATTN_MAX_D;
    const long oq = md_mtl_at(p, p.sq, bh, i), oo = md_mtl_at(p, p.so, bh, i);
    float dsum = 0.0f;
    for (int e = int(t); e < p.d; e += int(nt)) {
        qr[e] = md_dt<DT>::ld(q[oq + e]);
        gr[e] = md_dt<DT>::ld(dout[oo + e]);
        dsum += gr[e] * md_dt<DT>::ld(o[oo + e]);
    }
    const float D = md_mtl_tg_sum(dsum, tg, t, nt); /* its barriers also publish qr and gr */
    const float L = lse[row];
    const int kn = p.causal ? min(i + 1, p.tk) : p.tk;
    for (int e0 = 0; e0 < p.d; e0 += int(nt)) {
        float acc = 0.0f;
        for (int j0 = 0; j0 < kn; j0 += int(nt)) {
            int j = j0 + int(t);
            if (j < kn) {
                float pj = exp(p.scale * md_mtl_dot_row<DT>(qr, k, md_mtl_at(p, p.sk, bh, j), p.d) - L);
                float dp = md_mtl_dot_row<DT>(gr, v, md_mtl_at(p, p.sv, bh, j), p.d) * md_mtl_keep(p, bh, i, j);
                w[t] = pj * (dp - D);
            }
            threadgroup_barrier(mem_flags::mem_threadgroup);
            int e = e0 + int(t), cn = min(int(nt), kn - j0);
            if (e < p.d)
                for (int jj = 0; jj < cn; jj++) acc += w[jj] * md_dt<DT>::ld(k[md_mtl_at(p, p.sk, bh, j0 + jj) + e]);
            threadgroup_barrier(mem_flags::mem_threadgroup);
        }
        if (e0 + int(t) < p.d) md_mtl_put<DT>(dq + oq + e0 + int(t), p.scale * acc, p.beta);
    }
}

template <int DT>
[[kernel]] void md_mtl_attn_bwd_kv(MD_KARGS, constant md_mtl_attn_params &p [[buffer(0)]],
                                   device const typename md_dt<DT>::S *q [[buffer(1)]],
                                   device const typename md_dt<DT>::S *k [[buffer(2)]],
                                   device const typename md_dt<DT>::S *v [[buffer(3)]],
                                   device const typename md_dt<DT>::S *o [[buffer(4)]],
                                   device const float *lse [[buffer(5)]],
                                   device const typename md_dt<DT>::S *dout [[buffer(6)]],
                                   device typename md_dt<DT>::S *dk [[buffer(7)]],
                                   device typename md_dt<DT>::S *dv [[buffer(8)]])
{
    const uint t = lid.x, nt = tgsz.x;
    const int row = int(tgid.x), bh = row / p.tk, j = row % p.tk;
    if (row >= p.batch * p.heads * p.tk) return;
    threadgroup float *w = tg + nt, *kr = tg + 2 * nt, *vr = kr + MD_MTL_ATTN_MAX_D;
    const long ok = md_mtl_at(p, p.sk, bh, j), ov = md_mtl_at(p, p.sv, bh, j);
    for (int e = int(t); e < p.d; e += int(nt)) {
        kr[e] = md_dt<DT>::ld(k[ok + e]);
        vr[e] = md_dt<DT>::ld(v[ov + e]);
    }
    threadgroup_barrier(mem_flags::mem_threadgroup);
    const int i0 = p.causal ? min(j, p.tq) : 0; /* the queries that see key j */
    /* two passes over the queries: dv (weights pd), then dk (weights ds) */
    for (int pass = 0; pass < 2; pass++) {
        bool want = pass == 0 ? p.has_dv != 0 : p.has_dk != 0;
        if (!want) continue;
        for (int e0 = 0; e0 < p.d; e0 += int(nt)) {
            float acc = 0.0f;
            for (int c0 = i0; c0 < p.tq; c0 += int(nt)) {
                int i = c0 + int(t);
                if (i < p.tq) {
                    long oq = md_mtl_at(p, p.sq, bh, i), oo = md_mtl_at(p, p.so, bh, i);
                    float s = 0.0f, dp = 0.0f, D = 0.0f;
                    for (int e = 0; e < p.d; e++) {
                        float g = md_dt<DT>::ld(dout[oo + e]);
                        s += md_dt<DT>::ld(q[oq + e]) * kr[e];
                        dp += g * vr[e];
                        D += g * md_dt<DT>::ld(o[oo + e]);
                    }
                    float pij = exp(p.scale * s - lse[long(bh) * p.tq + i]), keep = md_mtl_keep(p, bh, i, j);
                    w[t] = pass == 0 ? pij * keep : pij * (dp * keep - D);
                }
                threadgroup_barrier(mem_flags::mem_threadgroup);
                int e = e0 + int(t), cn = min(int(nt), p.tq - c0);
                if (e < p.d)
                    for (int ii = 0; ii < cn; ii++) {
                        long oi = pass == 0 ? md_mtl_at(p, p.so, bh, c0 + ii) : md_mtl_at(p, p.sq, bh, c0 + ii);
                        acc += w[ii] * md_dt<DT>::ld(pass == 0 ? dout[oi + e] : q[oi + e]);
                    }
                threadgroup_barrier(mem_flags::mem_threadgroup);
            }
            int e = e0 + int(t);
            if (e < p.d) {
                if (pass == 0) md_mtl_put<DT>(dv + ov + e, acc, p.beta);
                else md_mtl_put<DT>(dk + ok + e, p.scale * acc, p.beta);
            }
        }
    }
}

#define MD_ATTN_INST(DT, sfx)                                                 \
    MD_INSTANTIATE("md_softmax_fwd_" sfx, md_mtl_softmax_fwd<DT>)              \
    MD_INSTANTIATE("md_softmax_bwd_" sfx, md_mtl_softmax_bwd<DT>)              \
    MD_INSTANTIATE("md_attn_fwd_" sfx, md_mtl_attn_fwd<DT>)                    \
    MD_INSTANTIATE("md_attn_bwd_q_" sfx, md_mtl_attn_bwd_q<DT>)                \
    MD_INSTANTIATE("md_attn_bwd_kv_" sfx, md_mtl_attn_bwd_kv<DT>)

MD_ATTN_INST(MD_MTL_F32, "f32")
MD_ATTN_INST(MD_MTL_F16, "f16")
MD_ATTN_INST(MD_MTL_BF16, "bf16")
