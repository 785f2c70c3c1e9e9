/* tiles.metal - tiles (crop a grid of tiles, resize each bilinearly,
 * align_corners=False) and FiLM; the contract is src/backend/kernels.h's,
 * the reference src/backend/ref/ref_tiles.c. No atomics: the tiles backward
 * gathers per input element (the tiles partition the image), FiLM's sums
 * over the tokens run a thread per (sample, feature) in token order. */
#include "md_metal_common.h"

/* Edge k of n equal parts of len (md_tile_edge). */
inline int md_mtl_tile_edge(int len, int n, int k) { return int(long(k) * long(len) / long(n)); }

/* The two taps of output index o of an axis of len resized with `scale` =
 * len / size, and the weight of the second (area_pixel_compute_source_index). */
struct md_mtl_tap {
    int i0, i1;
    float l1;
};
inline md_mtl_tap md_mtl_tile_src(int o, int len, float scale)
{
    float s = scale * (float(o) + 0.5f) - 0.5f;
    if (s < 0.0f) s = 0.0f;
    int a = min(int(s), len - 1);
    md_mtl_tap t;
    t.i0 = a;
    t.i1 = a < len - 1 ? a + 1 : a;
    t.l1 = s - float(a);
    return t;
}

/* The tile holding index p of an axis of len cut into n parts. */
inline int md_mtl_tile_of(int p, int len, int n)
{
    int t = int(long(p) * long(n) / long(len));
    while (t + 1 < n && md_mtl_tile_edge(len, n, t + 1) <= p) t++;
    while (t > 0 && md_mtl_tile_edge(len, n, t) > p) t--;
    return t;
}

/* Weight of source index l in output index o's taps (0 when it is no tap). */
inline float md_mtl_tap_w(md_mtl_tap t, int l)
{
    return (t.i0 == l ? 1.0f - t.l1 : 0.0f) + (t.i1 == l ? t.l1 : 0.0f);
}

template <int DT>
[[kernel]] void md_mtl_tiles_fwd(MD_KARGS, constant md_mtl_tiles_params &p [[buffer(0)]],
                                 device const typename md_dt<DT>::S *x [[buffer(1)]],
                                 device typename md_dt<DT>::S *y [[buffer(2)]])
{
    const int S = p.size, nt = p.rows * p.cols;
    const ulong ss = ulong(S) * ulong(S), total = ulong(p.n) * ulong(nt) * ulong(p.c) * ss;
    MD_GRID_LOOP(i, total) {
        int ox = int(i % ulong(S)), oy = int(i / ulong(S) % ulong(S));
        ulong q = i / ss;
        int ch = int(q % ulong(p.c)), t = int(q / ulong(p.c) % ulong(nt));
        ulong b = q / (ulong(p.c) * ulong(nt));
        int ti = t / p.cols, tj = t % p.cols;
        int r0 = md_mtl_tile_edge(p.h, p.rows, ti), th = md_mtl_tile_edge(p.h, p.rows, ti + 1) - r0;
        int c0 = md_mtl_tile_edge(p.w, p.cols, tj), tw = md_mtl_tile_edge(p.w, p.cols, tj + 1) - c0;
        md_mtl_tap ty = md_mtl_tile_src(oy, th, float(th) / float(S));
        md_mtl_tap tx = md_mtl_tile_src(ox, tw, float(tw) / float(S));
        ulong xp = (b * ulong(p.c) + ulong(ch)) * ulong(p.h) * ulong(p.w) + ulong(c0);
        ulong q0 = xp + ulong(r0 + ty.i0) * ulong(p.w), q1 = xp + ulong(r0 + ty.i1) * ulong(p.w);
        float v = (1.0f - ty.l1) * ((1.0f - tx.l1) * md_dt<DT>::ld(x[q0 + ulong(tx.i0)]) +
                                    tx.l1 * md_dt<DT>::ld(x[q0 + ulong(tx.i1)])) +
                  ty.l1 * ((1.0f - tx.l1) * md_dt<DT>::ld(x[q1 + ulong(tx.i0)]) +
                           tx.l1 * md_dt<DT>::ld(x[q1 + ulong(tx.i1)]));
        ulong yo = ((b * ulong(p.ld) + ulong(t)) * ulong(p.c) + ulong(ch)) * ss + ulong(oy) * ulong(S) + ulong(ox);
        md_mtl_put<DT>(y + yo, v, p.beta);
    }
}

/* Output indices (of size) whose taps may reach source index l of an axis of
 * len: (2o + 1) len in [(2l - 1) size, (2l + 3) size), with a margin of 2
 * (each tap is checked); from 0 for l <= 1 (a coordinate clamped to 0 taps
 * index 1 with weight 0). */
inline int md_mtl_reach_lo(int l, int len, int size)
{
    return l <= 1 ? 0 : max(((2 * l - 1) * size - len) / (2 * len) - 2, 0);
}
inline int md_mtl_reach_hi(int l, int len, int size)
{
    return min(((2 * l + 3) * size - len) / (2 * len) + 2, size - 1);
}

template <int DT>
[[kernel]] void md_mtl_tiles_bwd(MD_KARGS, constant md_mtl_tiles_params &p [[buffer(0)]],
                                 device const typename md_dt<DT>::S *dy [[buffer(1)]],
                                 device typename md_dt<DT>::S *dx [[buffer(2)]])
{
    const int S = p.size;
    const ulong hw = ulong(p.h) * ulong(p.w), total = ulong(p.n) * ulong(p.c) * hw;
    MD_GRID_LOOP(i, total) {
        int px = int(i % ulong(p.w)), py = int(i / ulong(p.w) % ulong(p.h));
        ulong q = i / hw;
        int ch = int(q % ulong(p.c));
        ulong b = q / ulong(p.c);
        int ti = md_mtl_tile_of(py, p.h, p.rows), tj = md_mtl_tile_of(px, p.w, p.cols);
        int r0 = md_mtl_tile_edge(p.h, p.rows, ti), th = md_mtl_tile_edge(p.h, p.rows, ti + 1) - r0;
        int c0 = md_mtl_tile_edge(p.w, p.cols, tj), tw = md_mtl_tile_edge(p.w, p.cols, tj + 1) - c0;
        int ly = py - r0, lx = px - c0;
        float sy = float(th) / float(S), sx = float(tw) / float(S);
        int oy0 = md_mtl_reach_lo(ly, th, S), oy1 = md_mtl_reach_hi(ly, th, S);
        int ox0 = md_mtl_reach_lo(lx, tw, S), ox1 = md_mtl_reach_hi(lx, tw, S);
        ulong g = ((b * ulong(p.ld) + ulong(ti * p.cols + tj)) * ulong(p.c) + ulong(ch)) * ulong(S) * ulong(S);
        float acc = 0.0f;
        for (int oy = oy0; oy <= oy1; oy++) {
            md_mtl_tap ty = md_mtl_tile_src(oy, th, sy);
            if (ty.i0 != ly && ty.i1 != ly) continue;
            float row = 0.0f;
            for (int ox = ox0; ox <= ox1; ox++) {
                md_mtl_tap tx = md_mtl_tile_src(ox, tw, sx);
                if (tx.i0 != lx && tx.i1 != lx) continue;
                row += md_mtl_tap_w(tx, lx) * md_dt<DT>::ld(dy[g + ulong(oy) * ulong(S) + ulong(ox)]);
            }
            acc += md_mtl_tap_w(ty, ly) * row;
        }
        md_mtl_put<DT>(dx + i, acc, p.beta);
    }
}

template <int DT>
[[kernel]] void md_mtl_film_fwd(MD_KARGS, constant md_mtl_film_params &p [[buffer(0)]],
                                device const typename md_dt<DT>::S *x [[buffer(1)]],
                                device const typename md_dt<DT>::S *cond [[buffer(2)]],
                                device typename md_dt<DT>::S *y [[buffer(3)]])
{
    const ulong total = ulong(p.n) * ulong(p.t) * ulong(p.d);
    MD_GRID_LOOP(i, total) {
        ulong j = i % ulong(p.d), c = i / (ulong(p.d) * ulong(p.t)) * 2 * ulong(p.d) + j;
        float v = md_dt<DT>::ld(x[i]) * (1.0f + md_dt<DT>::ld(cond[c])) + md_dt<DT>::ld(cond[c + ulong(p.d)]);
        y[i] = md_dt<DT>::st(v);
    }
}

template <int DT>
[[kernel]] void md_mtl_film_bwd_dx(MD_KARGS, constant md_mtl_film_params &p [[buffer(0)]],
                                   device const typename md_dt<DT>::S *dy [[buffer(1)]],
                                   device const typename md_dt<DT>::S *cond [[buffer(2)]],
                                   device typename md_dt<DT>::S *dx [[buffer(3)]])
{
    const ulong total = ulong(p.n) * ulong(p.t) * ulong(p.d);
    MD_GRID_LOOP(i, total) {
        ulong j = i % ulong(p.d), c = i / (ulong(p.d) * ulong(p.t)) * 2 * ulong(p.d) + j;
        md_mtl_put<DT>(dx + i, md_dt<DT>::ld(dy[i]) * (1.0f + md_dt<DT>::ld(cond[c])), p.beta);
    }
}

/* A thread per (sample, feature): the tokens in order. */
template <int DT>
[[kernel]] void md_mtl_film_bwd_cond(MD_KARGS, constant md_mtl_film_params &p [[buffer(0)]],
                                     device const typename md_dt<DT>::S *x [[buffer(1)]],
                                     device const typename md_dt<DT>::S *dy [[buffer(2)]],
                                     device typename md_dt<DT>::S *dcond [[buffer(3)]])
{
    const ulong d = ulong(p.d);
    MD_GRID_LOOP(i, ulong(p.n) * d) {
        ulong b = i / d, j = i % d;
        float sg = 0.0f, sb = 0.0f;
        for (int t = 0; t < p.t; t++) {
            ulong o = (b * ulong(p.t) + ulong(t)) * d + j;
            float g = md_dt<DT>::ld(dy[o]);
            sg += g * md_dt<DT>::ld(x[o]);
            sb += g;
        }
        md_mtl_put<DT>(dcond + b * 2 * d + j, sg, p.beta_cond);
        md_mtl_put<DT>(dcond + b * 2 * d + d + j, sb, p.beta_cond);
    }
}

template <int DT>
[[kernel]] void md_mtl_chscale(MD_KARGS, constant md_mtl_chscale_params &p [[buffer(0)]],
                               device const typename md_dt<DT>::S *a [[buffer(1)]],
                               device const float *g [[buffer(2)]],
                               device typename md_dt<DT>::S *y [[buffer(3)]])
{
    MD_GRID_LOOP(i, ulong(p.rows) * ulong(p.d)) {
        md_mtl_put<DT>(y + i, md_dt<DT>::ld(a[i]) * g[i % ulong(p.d)], p.beta);
    }
}

/* A thread per feature: the rows in order. */
template <int DT>
[[kernel]] void md_mtl_chscale_dg(MD_KARGS, constant md_mtl_chscale_params &p [[buffer(0)]],
                                  device const typename md_dt<DT>::S *x [[buffer(1)]],
                                  device const typename md_dt<DT>::S *dy [[buffer(2)]],
                                  device float *dg [[buffer(3)]])
{
    MD_GRID_LOOP(j, ulong(p.d)) {
        float s = 0.0f;
        for (int r = 0; r < p.rows; r++) {
            ulong o = ulong(r) * ulong(p.d) + j;
            s += md_dt<DT>::ld(dy[o]) * md_dt<DT>::ld(x[o]);
        }
        md_mtl_putf(dg + j, s, p.beta_g);
    }
}

#define MD_TILES_INST(DT, sfx)                                                \
    MD_INSTANTIATE("md_tiles_fwd_" sfx, md_mtl_tiles_fwd<DT>)                  \
    MD_INSTANTIATE("md_tiles_bwd_" sfx, md_mtl_tiles_bwd<DT>)                  \
    MD_INSTANTIATE("md_film_fwd_" sfx, md_mtl_film_fwd<DT>)                    \
    MD_INSTANTIATE("md_film_bwd_dx_" sfx, md_mtl_film_bwd_dx<DT>)              \
    MD_INSTANTIATE("md_film_bwd_cond_" sfx, md_mtl_film_bwd_cond<DT>)          \
    MD_INSTANTIATE("md_chscale_" sfx, md_mtl_chscale<DT>)                      \
    MD_INSTANTIATE("md_chscale_dg_" sfx, md_mtl_chscale_dg<DT>)

MD_TILES_INST(MD_MTL_F32, "f32")
MD_TILES_INST(MD_MTL_F16, "f16")
MD_TILES_INST(MD_MTL_BF16, "bf16")
