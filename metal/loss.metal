/* loss.metal - softmax cross-entropy with label smoothing. */
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
