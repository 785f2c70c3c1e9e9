/* run_dir.c - a training run's checkpoint folder (see run_dir.h). */
#define _POSIX_C_SOURCE 200809L
#include "train/run_dir.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/platform.h"
#include "core/log.h"
#include "core/mem.h"
#include "train/ckpt_meta.h"

struct md_run_dir {
    int fd;              /* the lock file, locked while open */
    int has_best;
    double best_acc;
    int best_epoch;
};

static md_status mkdir_p(const char *dir)
{
    char buf[MD_PATH_MAX];
    snprintf(buf, sizeof buf, "%s", dir);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(buf, 0755) != 0 && errno != EEXIST)
            return md_errf(MD_ERR_IO, "--checkpoint-dir %s: cannot create %s: %s", dir, buf, strerror(errno));
        *p = '/';
    }
    if (mkdir(buf, 0755) != 0 && errno != EEXIST)
        return md_errf(MD_ERR_IO, "--checkpoint-dir %s: cannot create: %s", dir, strerror(errno));
    struct stat sb;
    if (stat(buf, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return md_errf(MD_ERR_IO, "--checkpoint-dir %s: not a directory", dir);
    return MD_OK;
}

/* The pid of the process holding the lock on fd (0 when unknown). */
static long holder(int fd)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    if (fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK && fl.l_pid > 0) return (long)fl.l_pid;
    char buf[64] = "";
    long pid = 0;
    if (pread(fd, buf, sizeof buf - 1, 0) > 0) sscanf(buf, "pid %ld", &pid);
    return pid;
}

static md_status take_lock(const char *dir, int *fd_out)
{
    char path[MD_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/%s", dir, MD_RUN_DIR_LOCK);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return md_errf(MD_ERR_IO, "--checkpoint-dir %s: cannot create %s: %s", dir, path, strerror(errno));
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = 0, .l_len = 0};
    while (fcntl(fd, F_SETLK, &fl) != 0) {
        if (errno == EINTR) continue;
        int e = errno;
        md_status st;
        if (e == EACCES || e == EAGAIN) {
            long pid = holder(fd);
            char who[48] = "another run";
            if (pid > 0) snprintf(who, sizeof who, "another run (pid %ld)", pid);
            st = md_errf(MD_ERR_IO, "--checkpoint-dir %s: in use by %s; two runs in one folder would overwrite each "
                         "other's checkpoints: wait for it to end or give this run another --checkpoint-dir", dir, who);
        } else {
            st = md_errf(MD_ERR_IO, "--checkpoint-dir %s: cannot lock %s: %s", dir, path, strerror(e));
        }
        close(fd);
        return st;
    }
    char line[48];
    int n = snprintf(line, sizeof line, "pid %ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, line, (size_t)n, 0) != n) {
        int e = errno;
        close(fd);
        return md_errf(MD_ERR_IO, "--checkpoint-dir %s: cannot write %s: %s", dir, path, strerror(e));
    }
    *fd_out = fd;
    return MD_OK;
}

static int exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

md_status md_run_dir_open(const char *dir, int resuming, int overwrite, md_run_dir **out)
{
    *out = NULL;
    md_status st = mkdir_p(dir);
    if (st != MD_OK) return st;
    md_run_dir *d = md_calloc(1, sizeof *d);
    if (!d) return MD_ERR_OOM;
    d->fd = -1;
    if ((st = take_lock(dir, &d->fd)) != MD_OK) goto fail;
    static const char *const names[] = {"best.safetensors", "last.safetensors"};
    char found[64] = "", path[MD_PATH_MAX + 32];
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        if (exists(path)) snprintf(found + strlen(found), sizeof found - strlen(found), "%s%s", found[0] ? " and " : "",
                                   names[i]);
    }
    if (!found[0]) goto done;
    if (overwrite) {
        for (int i = 0; i < 2; i++) {
            snprintf(path, sizeof path, "%s/%s", dir, names[i]);
            if (unlink(path) != 0 && errno != ENOENT) {
                st = md_errf(MD_ERR_IO, "--overwrite: cannot remove %s: %s", path, strerror(errno));
                goto fail;
            }
        }
        md_out("  --overwrite: removed the earlier run's %s from %s\n", found, dir);
    } else if (!resuming) {
        st = md_errf(MD_ERR_IO, "--checkpoint-dir %s: holds an earlier run's %s; pass --resume %s/last.safetensors to "
                     "continue that run, --overwrite to replace them, or another --checkpoint-dir", dir, found, dir);
        goto fail;
    } else {
        snprintf(path, sizeof path, "%s/best.safetensors", dir);
        long long ep = -1;
        if (exists(path)) {
            if ((st = md_ckpt_meta_best(path, &d->best_acc, &ep)) != MD_OK) {
                md_err_prefix("--checkpoint-dir %s: cannot tell the score of the best checkpoint there (move it away "
                              "to continue)", dir);
                goto fail;
            }
            d->has_best = d->best_acc >= 0;
            d->best_epoch = (int)ep;
        }
    }
done:
    *out = d;
    return MD_OK;
fail:
    md_run_dir_close(d);
    return st;
}

void md_run_dir_close(md_run_dir *d)
{
    if (!d) return;
    if (d->fd >= 0) {
        /* empty while nobody holds it: no stale pid for a reader to trust
         * (a failure changes nothing: the lock goes with the close) */
        int rc = ftruncate(d->fd, 0);
        (void)rc;
        close(d->fd);
    }
    md_free(d);
}

int md_run_dir_best(const md_run_dir *d, double *acc, int *epoch)
{
    if (!d || !d->has_best) return 0;
    *acc = d->best_acc;
    *epoch = d->best_epoch;
    return 1;
}
