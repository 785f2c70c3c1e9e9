/* scaler.h - dynamic loss scaling for fp16 training (as torch.cuda.amp.GradScaler).
 *
 * The loss gradient is multiplied by `scale` so small fp16 gradients do not
 * flush to zero; the optimizer divides it out (grad_scale = 1/scale). A step
 * whose gradients contain inf or NaN is skipped and the scale halved; after
 * `growth_interval` clean steps in a row the scale doubles.
 */
#ifndef MD_SCALER_H
#define MD_SCALER_H

struct md_scaler {
    int enabled;
    float scale;              /* 1 when disabled */
    int growth_interval;      /* clean steps before doubling (2000) */
    long long clean;          /* clean steps since the last change */
    long long skipped;        /* steps skipped for inf/NaN gradients */
};

void md_scaler_init(struct md_scaler *s, int enabled);
/* After a backward pass: `finite` says whether every gradient was finite.
 * Returns 1 when the optimizer step should be taken, 0 when it must be
 * skipped (only when enabled; a disabled scaler always returns 1 and the
 * caller treats non-finite gradients as a numerical failure). */
int md_scaler_update(struct md_scaler *s, int finite);

#endif
