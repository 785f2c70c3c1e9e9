/* launch.c - --gpus / --devices re-execute under mpirun; each rank's device (launch.h). */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "app/launch.h"
#include "core/dist.h"
#include "core/mem.h"

static int count_devices(const char *list)
{
    if (!list[0]) return 0;
    int n = 1;
    for (const char *p = list; *p; p++) n += *p == ',';
    return n;
}

int md_launch_ranks_wanted(const md_options *o)
{
    int n = count_devices(o->devices);
    if (n > 0) return n;
    return o->gpus > 1 ? o->gpus : 1;
}

/* mpirun on PATH, into out. */
static int find_on_path(const char *name, char *out, size_t cap)
{
    const char *path = getenv("PATH");
    if (!path) return 0;
    char dir[4096];
    while (*path) {
        size_t len = strcspn(path, ":");
        snprintf(dir, sizeof dir, "%.*s", (int)len, path);
        snprintf(out, cap, "%s/%s", dir[0] ? dir : ".", name);
        struct stat sb;
        if (stat(out, &sb) == 0 && S_ISREG(sb.st_mode) && access(out, X_OK) == 0) return 1;
        path += len;
        if (*path == ':') path++;
    }
    return 0;
}

md_status md_launch_reexec(const md_options *o, int argc, char **argv)
{
    int n = md_launch_ranks_wanted(o);
    const char *flag = o->devices[0] ? "--devices" : "--gpus";
    if (n < 2 || md_dist_launched()) return MD_OK;
    if (!md_dist_built())
        return md_errf(MD_ERR_UNSUPPORTED, "%s: this mpsdiag was built without MPI; install Open MPI "
                       "(scripts/install-deps.sh) and rebuild", flag);
    char mpirun[4096];
    if (!find_on_path("mpirun", mpirun, sizeof mpirun))
        return md_errf(MD_ERR_UNSUPPORTED, "%s %d ranks: mpirun not found on PATH; install Open MPI (openmpi-bin) "
                       "or start the ranks yourself (mpirun -np %d mpsdiag ...)", flag, n, n);
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len > 0) self[len] = '\0';
    else snprintf(self, sizeof self, "%s", argv[0]);
    char np[16];
    snprintf(np, sizeof np, "%d", n);
    char **av = md_calloc((size_t)argc + 16, sizeof *av);
    if (!av) return MD_ERR_OOM;
    int k = 0;
    /* by its name: Open MPI takes an absolute argv[0] as its --prefix */
    av[k++] = "mpirun";
    av[k++] = "-np";
    av[k++] = np;
    /* one machine: as many ranks as asked, each free to use every core */
    av[k++] = "--oversubscribe";
    av[k++] = "--bind-to";
    av[k++] = "none";
    if (geteuid() == 0) av[k++] = "--allow-run-as-root";
    av[k++] = self;
    for (int i = 1; i < argc; i++) av[k++] = argv[i];
    av[k] = NULL;
    fflush(stdout);
    fflush(stderr);
    execv(mpirun, av);
    md_free(av);
    return md_errf(MD_ERR_UNSUPPORTED, "%s: cannot start %s", flag, mpirun);
}

md_status md_launch_rank_setup(md_options *o)
{
    md_dist_set_timeout(o->dist_timeout);
    int size = md_dist_size(), local = md_dist_local_rank();
    if (size < 2) return MD_OK;
    /* each rank would decide alone (and write the same file) */
    if (o->auto_batch)
        return md_errf(MD_ERR_USAGE, "--auto-batch with %d ranks: each would halve its batch alone; give "
                       "--batch-size", size);
    if (o->dump_grads[0] || o->dump_logits[0])
        return md_errf(MD_ERR_USAGE, "%s runs in one process; drop it or run without mpirun",
                       o->dump_grads[0] ? "--dump-grads" : "--dump-logits");
    int nd = count_devices(o->devices);
    if (nd > 0) {
        if (nd != size && md_dist_rank() == 0)
            fprintf(stderr, "mpsdiag: warning: --devices lists %d devices for %d ranks; rank r takes entry r "
                    "modulo %d on its machine\n", nd, size, nd);
        const char *p = o->devices;
        for (int i = 0; i < local % nd; i++) p = strchr(p, ',') + 1;
        size_t len = strcspn(p, ",");
        snprintf(o->device, sizeof o->device, "%.*s", (int)(len < sizeof o->device ? len : sizeof o->device - 1), p);
    } else if ((o->gpus > 1 && strcmp(o->device, "auto") == 0) || strcmp(o->device, "cuda") == 0) {
        snprintf(o->device, sizeof o->device, "cuda:%d", local);
    }
    return MD_OK;
}
