/* log.c - human output helpers. */
#define _POSIX_C_SOURCE 200809L
#include "core/log.h"
#include "core/progress.h"
#include "core/wrap.h"

#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static md_verbosity level = MD_NORMAL;
static int tty = -1;
static int plain;

void md_log_init(md_verbosity v)
{
    level = v;
    tty = !plain && isatty(STDOUT_FILENO);
}

void md_log_plain(void)
{
    plain = 1;
    tty = 0;
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

/* Text of stdout whose newline has not come: a line is wrapped (wrap.h) once
 * it is whole. */
static char *pending;
static size_t npending, cappending;

static void append(const char *s, size_t n)
{
    if (npending + n + 1 > cappending) {
        size_t cap = cappending ? cappending : 256;
        while (cap < npending + n + 1) cap *= 2;
        char *p = realloc(pending, cap);
        if (!p) { /* no memory for the line: write what there is unwrapped */
            fwrite(pending, 1, npending, stdout);
            fwrite(s, 1, n, stdout);
            npending = 0;
            return;
        }
        pending = p;
        cappending = cap;
    }
    memcpy(pending + npending, s, n);
    npending += n;
}

void md_log_flush(void)
{
    if (!npending) return;
    md_progress_clear();
    fwrite(pending, 1, npending, stdout);
    npending = 0;
}

/* Writes text to stdout, every whole line wrapped to the terminal width. */
static void emit(const char *text, size_t n)
{
    size_t start = 0;
    for (size_t i = 0; i < n; i++) {
        if (text[i] != '\n') continue;
        if (npending) {
            append(text + start, i - start);
            md_wrap_line(stdout, pending, npending, MD_TERM_WIDTH);
            npending = 0;
        } else {
            md_wrap_line(stdout, text + start, i - start, MD_TERM_WIDTH);
        }
        start = i + 1;
    }
    if (start < n) append(text + start, n - start);
}

/* Prints to stdout when the level is at least `min`, after the progress line. */
static void out_at(md_verbosity min, const char *fmt, va_list ap)
{
    if (level < min) return;
    md_progress_clear();
    char small[1024];
    va_list aq;
    va_copy(aq, ap);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    if (n < 0) {
        va_end(aq);
        return;
    }
    if ((size_t)n < sizeof small) {
        emit(small, (size_t)n);
    } else {
        char *big = malloc((size_t)n + 1);
        if (big) {
            vsnprintf(big, (size_t)n + 1, fmt, aq);
            emit(big, (size_t)n);
            free(big);
        }
    }
    va_end(aq);
}

void md_out(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    out_at(MD_NORMAL, fmt, ap);
    va_end(ap);
}

void md_summary(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    out_at(MD_QUIET, fmt, ap);
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
    md_log_flush();
    md_progress_clear();
    fflush(stdout);
    char line[2048];
    int n = snprintf(line, sizeof line, "mpsdiag: warning: ");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    /* a warning is one paragraph: its own line breaks become spaces */
    for (char *p = line; *p; p++)
        if (*p == '\n') *p = ' ';
    md_wrap_line_at(stderr, line, strlen(line), MD_TERM_WIDTH, 18); /* under the text */
}

void md_section(const char *title)
{
    if (level < MD_NORMAL) return;
    md_log_flush();
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
