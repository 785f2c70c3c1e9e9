/* scaler.c - dynamic loss scaling (see scaler.h). */
#include "train/scaler.h"

#include <string.h>

void md_scaler_init(struct md_scaler *s, int enabled)
{
    memset(s, 0, sizeof *s);
    s->enabled = enabled;
    s->scale = enabled ? 65536.0f : 1.0f;
    s->growth_interval = 2000;
}

int md_scaler_update(struct md_scaler *s, int finite)
{
    if (!s->enabled) return finite ? 1 : -1;
    if (!finite) {
        /* below 1 the scale would shrink gradients: at the floor, give up */
        if (s->scale <= 1.0f) return -1;
        s->skipped++;
        s->clean = 0;
        s->scale *= 0.5f;
        return 0;
    }
    if (++s->clean >= s->growth_interval) {
        s->clean = 0;
        if (s->scale < 16777216.0f) s->scale *= 2.0f; /* 2^24: fp32 stays exact */
    }
    return 1;
}
