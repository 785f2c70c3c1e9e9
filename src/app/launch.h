/* launch.h - starting the ranks of a data-parallel run (docs/distributed.md).
 *
 * `mpirun -np N mpsdiag ...` starts the ranks itself; --gpus N and --devices
 * LIST are the one-machine shortcut: the process re-executes itself under
 * mpirun (found on PATH) with one rank per device. Under mpirun each rank
 * picks its device from its rank on the machine. */
#ifndef MD_APP_LAUNCH_H
#define MD_APP_LAUNCH_H

#include "app/options.h"

/* The ranks --gpus / --devices ask for (1: none). */
int md_launch_ranks_wanted(const md_options *o);
/* With more than one rank wanted and not already under an MPI launcher: runs
 * mpirun as a child, passes signals on to it, and exits with its status
 * (returns only with an error: no mpirun, built without MPI, fork failed).
 * MD_OK when there is nothing to start. */
md_status md_launch_reexec(const md_options *o, int argc, char **argv);
/* Under mpirun with several ranks: this rank's device into o->device
 * (--devices entry, or cuda:<local rank> for --gpus / --device cuda), and the
 * settings several ranks refuse (--auto-batch, --dump-grads). */
md_status md_launch_rank_setup(md_options *o);

#endif
