/* launch.c - --gpus / --devices run this program again under mpirun; each rank's device (launch.h).
 *
 * mpirun runs as a child in a process group of its own, and this process
 * waits for it: a Ctrl-C (or SIGTERM, SIGHUP) reaches only this process,
 * which passes it on to mpirun as SIGUSR2. Open MPI forwards SIGUSR2 to
 * every rank at once, and the ranks take it as a stop request (the step's
 * all-reduce carries it, rank 0 saves); a SIGINT that reached mpirun itself
 * would instead start its kill sequence (SIGTERM to the ranks a second
 * later, then SIGKILL), which can cut a checkpoint short. A third signal
 * sends mpirun SIGTERM. */
#define _GNU_SOURCE
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif

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

static volatile sig_atomic_t g_signals;
static void on_signal(int sig)
{
    (void)sig;
    g_signals++;
}

/* Runs mpirun (av) in its own process group and waits; signals to this
 * process go on to it (above). Its exit code, 128 + its signal, or -1 (errno)
 * when it could not start. */
static int run_mpirun(const char *mpirun, char **av)
{
    struct sigaction sa, old[3];
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal; /* no SA_RESTART: waitpid returns EINTR */
    sigemptyset(&sa.sa_mask);
    const int sigs[3] = {SIGINT, SIGTERM, SIGHUP};
    for (int i = 0; i < 3; i++) sigaction(sigs[i], &sa, &old[i]);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        for (int i = 0; i < 3; i++) sigaction(sigs[i], &old[i], NULL);
        setpgid(0, 0);
#ifdef __linux__
        prctl(PR_SET_PDEATHSIG, SIGTERM); /* this process killed: mpirun ends its ranks */
#endif
        execv(mpirun, av);
        fprintf(stderr, "mpsdiag: cannot start %s: %s\n", mpirun, strerror(errno));
        _exit(127);
    }
    setpgid(pid, pid);
    int sent = 0, status = 0;
    for (;;) {
        pid_t r = waitpid(pid, &status, 0);
        if (r == pid) break;
        if (r < 0 && errno != EINTR) return -1;
        while (sent < g_signals) {
            sent++;
            kill(pid, sent < 3 ? SIGUSR2 : SIGTERM);
        }
    }
    if (WIFEXITED(status)) return WEXITSTATUS(status);
    return 128 + (WIFSIGNALED(status) ? WTERMSIG(status) : 0);
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
    /* not the terminal's foreground group: reading it would stop mpirun */
    av[k++] = "--stdin";
    av[k++] = "none";
    if (geteuid() == 0) av[k++] = "--allow-run-as-root";
    av[k++] = self;
    for (int i = 1; i < argc; i++) av[k++] = argv[i];
    av[k] = NULL;
    fflush(stdout);
    fflush(stderr);
    int code = run_mpirun(mpirun, av);
    md_free(av);
    if (code < 0) return md_errf(MD_ERR_UNSUPPORTED, "%s: cannot start %s: %s", flag, mpirun, strerror(errno));
    exit(code);
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
