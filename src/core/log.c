/* log.c - human output helpers. */
#define _POSIX_C_SOURCE 200809L
#include "core/log.h"
#include "core/progress.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static md_verbosity level = MD_NORMAL;
static int tty = -1;

void md_log_init(md_verbosity v)
{
    level = v;
    tty = isatty(STDOUT_FILENO);
}

md_verbosity md_log_level(void) { return level; }

int md_log_is_tty(void)
{
    if (tty < 0) tty = isatty(STDOUT_FILENO);
    return tty;
}

int md_log_color(void)
{
    const char *nc = getenv("NO_COLOR");
    return md_log_is_tty() && !(nc && *nc);
}

/* Prints to stdout when the level is at least `min`, after the progress line. */
static void out_at(md_verbosity min, const char *fmt, va_list ap)
{
    if (level < min) return;
    md_progress_clear();
    vfprintf(stdout, fmt, ap);
}

void md_out(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    out_at(MD_NORMAL, fmt, ap);
    va_end(ap);
}

void md_verbose(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    out_at(MD_VERBOSE, fmt, ap);
    va_end(ap);
}

void md_warn(const char *fmt, ...)
{
    if (level < MD_NORMAL) return;
    md_progress_clear();
    fflush(stdout);
    va_list ap;
    va_start(ap, fmt);
    fputs("mpsdiag: warning: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

void md_section(const char *title)
{
    if (level < MD_NORMAL) return;
    md_progress_clear();
    char line[81];
    int n = snprintf(line, sizeof line, "== %s ", title);
    while (n < 72) line[n++] = '=';
    line[n] = '\0';
    if (md_log_color()) fprintf(stdout, "\n\033[1m%s\033[0m\n", line);
    else fprintf(stdout, "\n%s\n", line);
}

const char *md_fmt_thousands(long long v, char *buf, size_t n)
{
    char tmp[32];
    int len = snprintf(tmp, sizeof tmp, "%lld", v < 0 ? -v : v);
    size_t o = 0;
    if (v < 0 && o + 1 < n) buf[o++] = '-';
    for (int i = 0; i < len && o + 1 < n; i++) {
        buf[o++] = tmp[i];
        int rest = len - 1 - i;
        if (rest > 0 && rest % 3 == 0 && o + 1 < n) buf[o++] = ',';
    }
    buf[o] = '\0';
    return buf;
}
