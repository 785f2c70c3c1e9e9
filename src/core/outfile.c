/* outfile.c - output files: temporary file and rename for regular files,
 * direct writes for devices and FIFOs, symbolic links followed. */
#define _POSIX_C_SOURCE 200809L
#include "core/outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/mem.h"

#define OF_PATH 4200
#define MAX_LINKS 40

enum of_mode { OF_ATOMIC, OF_DIRECT };

struct md_outfile {
    enum of_mode mode;
    int fd;
    char path[OF_PATH];   /* as the user gave it: for messages */
    char target[OF_PATH]; /* OF_ATOMIC: the file renamed over */
    char tmp[OF_PATH];    /* OF_ATOMIC: the temporary file */
};

int md_outfile_std_fd(const char *path)
{
    if (strcmp(path, "/dev/stdout") == 0) return STDOUT_FILENO;
    if (strcmp(path, "/dev/stderr") == 0) return STDERR_FILENO;
    const char *num = NULL;
    if (strncmp(path, "/dev/fd/", 8) == 0) num = path + 8;
    else if (strncmp(path, "/proc/self/fd/", 14) == 0) num = path + 14;
    if (!num || !*num) return -1;
    char *end;
    long v = strtol(num, &end, 10);
    if (*end || v < 0 || v > 1 << 20) return -1;
    return (int)v;
}

/* Follows symbolic links to the final target (which need not exist).
 * *proc is set when the chain enters /proc, whose "magic" links do not name
 * files (pipe:[123]): such a path is opened as it is. */
static md_status resolve_links(const char *path, char *out, size_t n, int *proc)
{
    char cur[OF_PATH], tgt[OF_PATH];
    *proc = 0;
    if (strlen(path) >= sizeof cur) return md_errf(MD_ERR_IO, "%s: path too long", path);
    snprintf(cur, sizeof cur, "%s", path);
    for (int hops = 0;; hops++) {
        struct stat sb;
        if (lstat(cur, &sb) != 0 || !S_ISLNK(sb.st_mode)) break;
        if (strncmp(cur, "/proc/", 6) == 0) {
            *proc = 1;
            break;
        }
        if (hops >= MAX_LINKS) return md_errf(MD_ERR_IO, "%s: cannot write: too many levels of symbolic links", path);
        ssize_t k = readlink(cur, tgt, sizeof tgt - 1);
        if (k < 0) return md_errf(MD_ERR_IO, "%s: cannot read the symbolic link %s: %s", path, cur, strerror(errno));
        tgt[k] = '\0';
        if (tgt[0] == '/') {
            snprintf(cur, sizeof cur, "%s", tgt);
        } else {
            char *slash = strrchr(cur, '/');
            if (slash) slash[1] = '\0';
            else cur[0] = '\0';
            if (strlen(cur) + strlen(tgt) >= sizeof cur) return md_errf(MD_ERR_IO, "%s: path too long", path);
            strcat(cur, tgt);
        }
    }
    if (strlen(cur) >= n) return md_errf(MD_ERR_IO, "%s: path too long", path);
    snprintf(out, n, "%s", cur);
    return MD_OK;
}

md_status md_outfile_resolve(const char *path, char *out, size_t n)
{
    int proc = 0;
    MD_TRY(resolve_links(path, out, n, &proc));
    if (proc) snprintf(out, n, "%s", path);
    return MD_OK;
}

md_status md_outfile_open(const char *path, md_outfile **out)
{
    *out = NULL;
    if (!path || !path[0]) return md_errf(MD_ERR_IO, "empty output path");
    md_outfile *f = md_calloc(1, sizeof *f);
    if (!f) return MD_ERR_OOM;
    f->fd = -1;
    md_status st = MD_OK;
    if (strlen(path) >= sizeof f->path) {
        st = md_errf(MD_ERR_IO, "%s: path too long", path);
        goto fail;
    }
    snprintf(f->path, sizeof f->path, "%s", path);

    int std = md_outfile_std_fd(path);
    if (std >= 0) {
        if (std == STDOUT_FILENO) fflush(stdout);
        if (std == STDERR_FILENO) fflush(stderr);
        f->mode = OF_DIRECT;
        f->fd = dup(std);
        if (f->fd < 0) {
            st = md_errf(MD_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
            goto fail;
        }
        *out = f;
        return MD_OK;
    }

    int proc = 0;
    if ((st = resolve_links(path, f->target, sizeof f->target, &proc)) != MD_OK) goto fail;
    struct stat sb;
    int exists = stat(proc ? path : f->target, &sb) == 0;
    if (exists && S_ISDIR(sb.st_mode)) {
        st = md_errf(MD_ERR_IO, "%s: cannot write: is a directory", path);
        goto fail;
    }
    if (proc || (exists && !S_ISREG(sb.st_mode))) {
        /* a device, FIFO or socket: replacing it would destroy it */
        f->mode = OF_DIRECT;
        f->fd = open(proc ? path : f->target, O_WRONLY | O_NOCTTY | O_CLOEXEC);
        if (f->fd < 0) {
            st = md_errf(MD_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
            goto fail;
        }
        *out = f;
        return MD_OK;
    }
    f->mode = OF_ATOMIC;
    if (strlen(f->target) + 5 > sizeof f->tmp) {
        st = md_errf(MD_ERR_IO, "%s: path too long", path);
        goto fail;
    }
    snprintf(f->tmp, sizeof f->tmp, "%s.tmp", f->target);
    f->fd = open(f->tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (f->fd < 0) {
        st = md_errf(MD_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
        f->tmp[0] = '\0';
        goto fail;
    }
    /* the replaced file's permission bits stay */
    if (exists) (void)fchmod(f->fd, sb.st_mode & 07777);
    *out = f;
    return MD_OK;
fail:
    md_outfile_abort(f);
    return st;
}

md_status md_outfile_write(md_outfile *f, const void *data, size_t n)
{
    const char *p = data;
    while (n > 0) {
        /* chunks keep one write below 2 GiB (some kernels cap a write there) */
        size_t chunk = n > ((size_t)1 << 30) ? ((size_t)1 << 30) : n;
        ssize_t r = write(f->fd, p, chunk);
        if (r < 0) {
            if (errno == EINTR) continue;
            return md_errf(MD_ERR_IO, "%s: write failed: %s", f->path, strerror(errno));
        }
        if (r == 0) return md_errf(MD_ERR_IO, "%s: write failed: no progress (disk full?)", f->path);
        p += r;
        n -= (size_t)r;
    }
    return MD_OK;
}

/* fsync of the directory makes the rename itself durable; file systems that
 * cannot (EINVAL) are fine with it not happening. */
static void sync_dir_of(const char *path)
{
    char dir[OF_PATH];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash == dir) dir[1] = '\0';
    else if (slash) *slash = '\0';
    else snprintf(dir, sizeof dir, ".");
    int fd = open(dir, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return;
    (void)fsync(fd);
    close(fd);
}

md_status md_outfile_commit(md_outfile *f)
{
    md_status st = MD_OK;
    if (f->mode == OF_ATOMIC && fsync(f->fd) != 0) {
        st = md_errf(MD_ERR_IO, "%s: fsync failed: %s", f->path, strerror(errno));
        goto fail;
    }
    int rc = close(f->fd);
    f->fd = -1;
    if (rc != 0 && errno != EINTR) {
        st = md_errf(MD_ERR_IO, "%s: close failed: %s", f->path, strerror(errno));
        goto fail;
    }
    if (f->mode == OF_ATOMIC) {
        if (rename(f->tmp, f->target) != 0) {
            st = md_errf(MD_ERR_IO, "%s: rename failed: %s", f->path, strerror(errno));
            goto fail;
        }
        f->tmp[0] = '\0';
        sync_dir_of(f->target);
    }
    md_free(f);
    return MD_OK;
fail:
    md_outfile_abort(f);
    return st;
}

void md_outfile_abort(md_outfile *f)
{
    if (!f) return;
    if (f->fd >= 0) close(f->fd);
    if (f->mode == OF_ATOMIC && f->tmp[0]) unlink(f->tmp);
    md_free(f);
}

md_status md_outfile_link(const char *from, const char *to)
{
    char src[OF_PATH], tgt[OF_PATH], tmp[OF_PATH + 8];
    MD_TRY(md_outfile_resolve(from, src, sizeof src));
    MD_TRY(md_outfile_resolve(to, tgt, sizeof tgt));
    struct stat sb;
    if (stat(src, &sb) != 0 || !S_ISREG(sb.st_mode))
        return md_errf(MD_ERR_UNSUPPORTED, "%s: not a regular file to link", from);
    snprintf(tmp, sizeof tmp, "%s.tmp", tgt);
    unlink(tmp);
    if (link(src, tmp) != 0) return md_errf(MD_ERR_UNSUPPORTED, "%s: cannot link: %s", to, strerror(errno));
    if (rename(tmp, tgt) != 0) {
        int e = errno;
        unlink(tmp);
        return md_errf(MD_ERR_UNSUPPORTED, "%s: cannot rename the link: %s", to, strerror(e));
    }
    sync_dir_of(tgt);
    return MD_OK;
}

md_status md_outfile_write_all(const char *path, const void *data, size_t n)
{
    md_outfile *f = NULL;
    MD_TRY(md_outfile_open(path, &f));
    md_status st = md_outfile_write(f, data, n);
    if (st != MD_OK) {
        md_outfile_abort(f);
        return st;
    }
    return md_outfile_commit(f);
}
