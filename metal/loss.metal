/* loss.metal - softmax cross-entropy with label smoothing; regression losses. */
#include "md_metal_common.h"

/* ---- softmax cross-entropy: one threadgroup, one thread per sample at a time ----------
 * loss_i = -sum_j t_j (z_j - lse), t = (1 - s) onehot + s / C; argmax ties go
 * to the lowest index. Labels outside [0, C) contribute nothing (the
 * reference reports them as a data error; the loader never produces them). */
template <int DT>
[[kernel]] void md_mtl_xent(MD_KARGS, constant md_mtl_xent_params &p [[buffer(0)]],
                            device const typename md_dt<DT>::S *logits [[buffer(1)]],
                            device const int *labels [[buffer(2)]],
                            device float *loss_sum [[buffer(3)]],
                            device int *correct [[buffer(4)]],
                            device typename md_dt<DT>::S *dlogits [[buffer(5)]])
{
    const int C = p.classes;
    const float sm = p.smoothing, su = p.smoothing / float(C);
    float loss = 0.0f, hits = 0.0f;
    for (int ni = int(lid.x); ni < p.n; ni += int(tgsz.x)) {
        const int lab = labels[ni], row = ni * C;
        if (lab < 0 || lab >= C) continue;
        float mx = md_dt<DT>::ld(logits[row]);
        int arg = 0;
        for (int j = 1; j < C; j++) {
            float v = md_dt<DT>::ld(logits[row + j]);
            if (v > mx) { mx = v; arg = j; }
        }
        hits += arg == lab ? 1.0f : 0.0f;
        float se = 0.0f;
        for (int j = 0; j < C; j++) se += exp(md_dt<DT>::ld(logits[row + j]) - mx);
        const float lse = mx + log(se);
        for (int j = 0; j < C; j++) {
            float z = md_dt<DT>::ld(logits[row + j]);
            float t = (j == lab ? 1.0f - sm : 0.0f) + su;
            loss -= t * (z - lse);
            if (p.has_dlogits) dlogits[row + j] = md_dt<DT>::st(p.grad_scale * (exp(z - lse) - t));
        }
    }
    loss = md_mtl_tg_sum(loss, tg, lid.x, tgsz.x);
    hits = md_mtl_tg_sum(hits, tg, lid.x, tgsz.x);
    if (lid.x == 0) {
        if (p.has_loss) loss_sum[0] += loss;
        if (p.has_correct) correct[0] += int(hits);
    }
}

MD_INSTANTIATE("md_xent_f32", md_mtl_xent<MD_MTL_F32>)
MD_INSTANTIATE("md_xent_f16", md_mtl_xent<MD_MTL_F16>)
MD_INSTANTIATE("md_xent_bf16", md_mtl_xent<MD_MTL_BF16>)

/* ---- regression losses: one threadgroup, threads stride over the elements ----------------
 * kernels.h (md_regress_args) has the formulas; kind 0 MSE, 1 MAE, 2 Huber,
 * 3 financial. Directions are compared by sign, never by product (it may
 * underflow). */
template <int DT>
[[kernel]] void md_mtl_regress(MD_KARGS, constant md_mtl_regress_params &p [[buffer(0)]],
                               device const typename md_dt<DT>::S *pred [[buffer(1)]],
                               device const float *target [[buffer(2)]],
                               device const float *last [[buffer(3)]],
                               device float *loss_sum [[buffer(4)]],
                               device float *metrics [[buffer(5)]],
                               device typename md_dt<DT>::S *dpred [[buffer(6)]])
{
    const int per = p.horizon * p.channels, total = p.n * per;
    float loss = 0.0f, sae = 0.0f, sse = 0.0f, hits = 0.0f;
    for (int i = int(lid.x); i < total; i += int(tgsz.x)) {
        const float pv = md_dt<DT>::ld(pred[i]), y = target[i], e = pv - y, ae = fabs(e);
        float l, g, dp = 0.0f, dt = 0.0f;
        if (p.has_last) {
            const float x = last[long(i / per) * p.last_ld + long(i % p.channels)];
            dp = pv - x;
            dt = y - x;
            const int sgn_p = (dp > 0.0f) - (dp < 0.0f), sgn_t = (dt > 0.0f) - (dt < 0.0f);
            hits += sgn_p == sgn_t ? 1.0f : 0.0f;
        }
        if (p.kind == 1) {
            l = ae;
            g = float((e > 0.0f) - (e < 0.0f));
        } else if (p.kind == 2) {
            if (ae <= p.delta) { l = 0.5f * e * e; g = e; }
            else { l = p.delta * (ae - 0.5f * p.delta); g = e > 0.0f ? p.delta : -p.delta; }
        } else {
            l = e * e;
            g = 2.0f * e;
            if (p.kind == 3 && ((dp > 0.0f && dt < 0.0f) || (dp < 0.0f && dt > 0.0f))) {
                l -= p.lambda * dp * dt;
                g -= p.lambda * dt;
            }
        }
        loss += l;
        sae += ae;
        sse += e * e;
        if (p.has_dpred) dpred[i] = md_dt<DT>::st(p.grad_scale * g);
    }
    loss = md_mtl_tg_sum(loss, tg, lid.x, tgsz.x);
    sae = md_mtl_tg_sum(sae, tg, lid.x, tgsz.x);
    sse = md_mtl_tg_sum(sse, tg, lid.x, tgsz.x);
    hits = md_mtl_tg_sum(hits, tg, lid.x, tgsz.x);
    if (lid.x == 0) {
        if (p.has_loss) loss_sum[0] += loss;
        if (p.has_metrics) {
            metrics[0] += sae;
            metrics[1] += sse;
            if (p.has_last) metrics[2] += hits;
        }
    }
}

MD_INSTANTIATE("md_regress_f32", md_mtl_regress<MD_MTL_F32>)
MD_INSTANTIATE("md_regress_f16", md_mtl_regress<MD_MTL_F16>)
MD_INSTANTIATE("md_regress_bf16", md_mtl_regress<MD_MTL_BF16>)
