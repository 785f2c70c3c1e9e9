/* bn_sync.h - synchronised batch norm's two exchanges for the host-memory
 * backends (CPU, ref): md_batchnorm_args.sync (kernels.h) says the protocol. */
#ifndef MD_BN_SYNC_H
#define MD_BN_SYNC_H

#include "backend/kernels.h"

/* mean, var (c doubles): in, this rank's over its m elements (biased var);
 * out, every rank's; *n: every rank's count. */
md_status md_bn_sync_stats(const struct md_batchnorm_args *a, double m, double *mean, double *var, double *n);
/* s1, s2 (c doubles): in, this rank's sums of dy and dy*xhat; out, every
 * rank's; *n: every rank's count (this rank's m in). */
md_status md_bn_sync_sums(const struct md_batchnorm_args *a, double m, double *s1, double *s2, double *n);

#endif
