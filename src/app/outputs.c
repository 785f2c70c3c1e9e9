/* outputs.c - checks of the output paths before the run (nothing is created). */
#define _POSIX_C_SOURCE 200809L
#include "app/outputs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/outfile.h"

#define P_MAX 4200

#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
static void problem(struct md_output_problems *p, const char *fmt, ...)
{
    if (p->n >= MD_OUTPUTS_MAX_PROBLEMS) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(p->msg[p->n], sizeof p->msg[0], fmt, ap);
    va_end(ap);
    p->n++;
}

/* dir of path ("." when it has no slash, "/" for "/x"). */
static void dir_of(const char *path, char *out, size_t n)
{
    snprintf(out, n, "%s", path);
    char *slash = strrchr(out, '/');
    if (!slash) snprintf(out, n, ".");
    else if (slash == out) out[1] = '\0';
    else *slash = '\0';
}

/* Can files be created (and renamed) in dir? "" when yes, else why not. */
static const char *dir_problem(const char *dir, char *why, size_t n)
{
    struct stat sb;
    if (stat(dir, &sb) != 0) {
        if (errno == ENOENT) snprintf(why, n, "directory %s does not exist", dir);
        else if (errno == ENOTDIR) snprintf(why, n, "a part of %s is not a directory", dir);
        else snprintf(why, n, "%s: %s", dir, strerror(errno));
        return why;
    }
    if (!S_ISDIR(sb.st_mode)) {
        snprintf(why, n, "%s is not a directory", dir);
        return why;
    }
    if (access(dir, W_OK | X_OK) != 0) {
        snprintf(why, n, "cannot create files in %s: %s", dir, strerror(errno));
        return why;
    }
    why[0] = '\0';
    return why;
}

/* One output file; `target` receives where it would land ("" if unknown). */
static void check_file(struct md_output_problems *p, const char *flag, const char *path, char *target, size_t tn)
{
    char why[P_MAX + 100];
    target[0] = '\0';
    int fd = md_outfile_std_fd(path);
    if (fd >= 0) {
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0) problem(p, "%s %s: cannot write: descriptor %d is not open", flag, path, fd);
        else if ((fl & O_ACCMODE) == O_RDONLY)
            problem(p, "%s %s: cannot write: descriptor %d is open for reading only", flag, path, fd);
        return;
    }
    if (md_outfile_resolve(path, target, tn) != MD_OK) {
        problem(p, "%s %s", flag, md_errmsg());
        target[0] = '\0';
        return;
    }
    struct stat sb;
    if (stat(target, &sb) == 0) {
        if (S_ISDIR(sb.st_mode)) {
            problem(p, "%s %s: cannot write: is a directory (a file name is expected)", flag, path);
            target[0] = '\0';
            return;
        }
        if (access(target, W_OK) != 0) {
            problem(p, "%s %s: cannot write: %s", flag, path, strerror(errno));
            return;
        }
        if (!S_ISREG(sb.st_mode)) { /* written directly: no temporary file */
            target[0] = '\0';
            return;
        }
    } else if (errno != ENOENT) {
        problem(p, "%s %s: cannot write: %s", flag, path, strerror(errno));
        target[0] = '\0';
        return;
    }
    /* a regular file or a new one: a temporary file beside it, renamed */
    char dir[P_MAX];
    dir_of(target, dir, sizeof dir);
    if (dir_problem(dir, why, sizeof why)[0]) problem(p, "%s %s: cannot write: %s", flag, path, why);
}

/* The checkpoint folder: an existing writable directory, or one that
 * mkdir -p could create under a writable existing ancestor. */
static void check_dir(struct md_output_problems *p, const char *flag, const char *path)
{
    char why[P_MAX + 100];
    struct stat sb;
    if (stat(path, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode)) problem(p, "%s %s: not a directory", flag, path);
        else if (access(path, W_OK | X_OK) != 0) problem(p, "%s %s: cannot write into it: %s", flag, path, strerror(errno));
        return;
    }
    if (errno != ENOENT) {
        problem(p, "%s %s: cannot create: %s", flag, path, strerror(errno));
        return;
    }
    char anc[P_MAX];
    snprintf(anc, sizeof anc, "%s", path);
    for (;;) {
        size_t l = strlen(anc);
        while (l > 1 && anc[l - 1] == '/') anc[--l] = '\0';
        char *slash = strrchr(anc, '/');
        if (!slash) {
            snprintf(anc, sizeof anc, ".");
            break;
        }
        if (slash == anc) slash[1] = '\0';
        else *slash = '\0';
        if (stat(anc, &sb) == 0 || errno != ENOENT) break;
    }
    if (dir_problem(anc, why, sizeof why)[0]) problem(p, "%s %s: cannot create: %s", flag, path, why);
}

struct named { const char *flag; const char *path; char target[P_MAX]; };

static int same_file(const struct named *a, const struct named *b)
{
    if (!a->target[0] || !b->target[0]) return 0;
    if (strcmp(a->target, b->target) == 0) return 1;
    struct stat x, y;
    return stat(a->target, &x) == 0 && stat(b->target, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

md_status md_outputs_check(const md_options *o, struct md_output_problems *p)
{
    memset(p, 0, sizeof *p);
    struct named out[6] = {
        {"--report", o->report, ""}, {"--html", o->html, ""}, {"--junit", o->junit, ""},
        {"--metrics", o->metrics, ""}, {"--dump-grads", o->dump_grads, ""},
        /* written by the audit; read by a training run */
        {"--precision-plan", o->precision_audit ? o->precision_plan : "", ""},
    };
    int nout = (int)(sizeof out / sizeof out[0]);
    for (int i = 0; i < nout; i++)
        if (out[i].path[0]) check_file(p, out[i].flag, out[i].path, out[i].target, sizeof out[i].target);
    /* checkpoints are written when training runs */
    if (o->checkpoint_dir[0] && !o->list_devices && !o->benchmark_only && o->epochs > 0 && !o->dump_grads[0] &&
        !o->check && !o->precision_audit)
        check_dir(p, "--checkpoint-dir", o->checkpoint_dir);
    for (int i = 0; i < nout; i++)
        for (int j = 0; j < i; j++)
            if (same_file(&out[i], &out[j]))
                problem(p, "%s %s: the same file as %s %s", out[i].flag, out[i].path, out[j].flag, out[j].path);
    /* an output must not overwrite an input */
    struct named in[3] = {{"--config", o->config, ""}, {"--init-from", o->init_from, ""}, {"--resume", o->resume, ""}};
    for (int k = 0; k < 3; k++) {
        if (!in[k].path[0] || md_outfile_resolve(in[k].path, in[k].target, sizeof in[k].target) != MD_OK) continue;
        for (int i = 0; i < nout; i++)
            if (same_file(&out[i], &in[k]))
                problem(p, "%s %s: would overwrite the input %s %s", out[i].flag, out[i].path, in[k].flag, in[k].path);
    }
    md_err_clear();
    if (p->n == 0) return MD_OK;
    return md_errf(MD_ERR_IO, "%s", p->msg[p->n - 1]);
}
