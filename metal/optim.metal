/* optim.metal - the fused optimizer step over the flat fp32 parameters
 * (PyTorch's SGD with momentum/Nesterov and AdamW formulas). */
#include "md_metal_common.h"

/* ---- fused optimizer step over flat fp32 parameters (PyTorch SGD / AdamW) --------------- */
[[kernel]] void md_mtl_optim(MD_KARGS, constant md_mtl_optim_params &p [[buffer(0)]],
                             device float *params [[buffer(1)]],
                             device const float *grads [[buffer(2)]],
                             device float *mbuf [[buffer(3)]],
                             device float *vbuf [[buffer(4)]],
                             device ushort *half_out [[buffer(5)]],
                             device const float *scale [[buffer(6)]])
{
    const float gs = p.grad_scale * (p.has_scale ? scale[0] : 1.0f);
    MD_GRID_LOOP(i, p.n) {
        float w = params[i], g = grads[i] * gs;
        if (p.kind == 0) {
            g += p.weight_decay * w;
            if (p.momentum != 0.0f) {
                float buf = p.first_step ? g : p.momentum * mbuf[i] + g;
                mbuf[i] = buf;
                g = p.nesterov ? g + p.momentum * buf : buf;
            }
            w -= p.lr * g;
        } else {
            w *= 1.0f - p.lr * p.weight_decay;
            float m = p.beta1 * mbuf[i] + (1.0f - p.beta1) * g;
            float v = p.beta2 * vbuf[i] + (1.0f - p.beta2) * g * g;
            mbuf[i] = m;
            vbuf[i] = v;
            w -= p.lr * (m / p.bc1) / (sqrt(v / p.bc2) + p.eps);
        }
        params[i] = w;
        if (p.has_half)
            half_out[i] = p.half_dtype == MD_MTL_F16 ? as_type<ushort>(half(w)) : md_dt<MD_MTL_BF16>::st(w);
    }
}

MD_KERNEL_NAME("md_mtl_optim", md_mtl_optim)
