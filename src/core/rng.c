/* rng.c - the parts of rng.h that need libm. */
#include "core/rng.h"

#include <math.h>

double md_rng_normal(md_rng *r)
{
    double u1 = ((double)(md_rng_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
    double u2 = (double)(md_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
