/* progress.c - the progress line (progress.h): a small stack of phases, one
 * line rendered from it, drawn in place on a terminal. */
#define _POSIX_C_SOURCE 200809L
#include "core/progress.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "core/log.h"
#include "core/timer.h"

#define MAX_COLS 100
#define BAR 20
#define REDRAW_S 0.1

struct frame {
    char label[64];
    char unit[16];
    char note[64];
    char rate_unit[16];
    double total, done;
    double t0, d0;     /* rate and ETA count from (t0, d0) */
    double t_begin;    /* for the budget and the overall ETA */
    double budget;     /* seconds, 0: none */
    double rate;       /* > 0: shown instead of the measured one */
};

static struct frame stack[MD_PROGRESS_DEPTH];
static int depth;
static int line_open;    /* a line is on the screen */
static double last_draw = -1;

int md_progress_enabled(void)
{
    if (md_log_level() < MD_NORMAL || !md_log_is_tty()) return 0;
    const char *nc = getenv("NO_COLOR");
    if (nc && *nc) return 0;
    const char *term = getenv("TERM");
    return !(term && strcmp(term, "dumb") == 0);
}

static void copy(char *dst, size_t n, const char *src)
{
    snprintf(dst, n, "%s", src ? src : "");
    size_t l = strlen(dst);
    if (!src || l == strlen(src)) return;
    /* cut: never end inside a UTF-8 sequence */
    size_t s = l;
    while (s > 0 && ((unsigned char)dst[s - 1] & 0xC0) == 0x80) s--;
    if (s == 0) return;
    unsigned char lead = (unsigned char)dst[s - 1];
    size_t need = lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    if (l - (s - 1) < need) dst[s - 1] = '\0';
}

static int columns(void)
{
    struct winsize ws;
    int c = MAX_COLS;
    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0 && ws.ws_col < c) c = ws.ws_col;
    return c;
}

static void draw(int force)
{
    if (!md_progress_enabled()) return;
    double now = md_now();
    if (!force && last_draw >= 0 && now - last_draw < REDRAW_S) return;
    last_draw = now;
    char line[MAX_COLS + 8];
    /* one column short of the width: a full line would wrap on some terminals */
    md_progress_render(line, sizeof line, columns() - 1, now);
    fprintf(stdout, "\r%s\033[K", line);
    fflush(stdout);
    line_open = 1;
}

void md_progress_clear(void)
{
    if (line_open) {
        fputs("\r\033[K", stdout);
        line_open = 0;
        last_draw = -1; /* the next update draws at once */
    }
}

void md_progress_done(void)
{
    md_progress_clear();
    fflush(stdout);
}

int md_progress_begin(const char *label, double total, const char *unit)
{
    if (depth >= MD_PROGRESS_DEPTH) return 0;
    struct frame *f = &stack[depth++];
    memset(f, 0, sizeof *f);
    copy(f->label, sizeof f->label, label);
    copy(f->unit, sizeof f->unit, unit ? unit : "steps");
    f->total = total > 0 ? total : 0;
    f->t0 = f->t_begin = md_now();
    draw(0);
    return depth;
}

void md_progress_end(int token)
{
    if (token <= 0 || token > depth) return;
    depth = token - 1;
    if (depth == 0) {
        md_progress_clear();
        fflush(stdout);
        last_draw = -1;
    } else if (line_open) {
        draw(1); /* no inner phase's text left standing */
    }
}

static struct frame *top(void) { return depth > 0 ? &stack[depth - 1] : NULL; }

void md_progress_update(double done)
{
    struct frame *f = top();
    if (!f) return;
    f->done = done;
    draw(0);
}

void md_progress_label(const char *label)
{
    struct frame *f = top();
    if (f) copy(f->label, sizeof f->label, label);
}

void md_progress_total(double total)
{
    struct frame *f = top();
    if (f) f->total = total > 0 ? total : 0;
}

void md_progress_note(const char *note)
{
    struct frame *f = top();
    if (f) copy(f->note, sizeof f->note, note);
}

void md_progress_rate(double per_s, const char *unit)
{
    struct frame *f = top();
    if (!f) return;
    f->rate = per_s > 0 ? per_s : 0;
    copy(f->rate_unit, sizeof f->rate_unit, unit);
}

void md_progress_budget(double seconds)
{
    struct frame *f = top();
    if (f) f->budget = seconds > 0 ? seconds : 0;
}

void md_progress_rebase(void)
{
    struct frame *f = top();
    if (!f) return;
    f->t0 = md_now();
    f->d0 = f->done;
}

void md_progress_reset(void)
{
    md_progress_clear();
    depth = 0;
    last_draw = -1;
}

/* ---- rendering --------------------------------------------------------------- */

/* "0:07", "12:34", "1:02:03" */
static void fmt_time(char *b, size_t n, double s)
{
    if (!isfinite(s) || s < 0) s = 0;
    long t = (long)(s + 0.5);
    if (t >= 3600) snprintf(b, n, "%ld:%02ld:%02ld", t / 3600, t / 60 % 60, t % 60);
    else snprintf(b, n, "%ld:%02ld", t / 60, t % 60);
}

static void fmt_num(char *b, size_t n, double v)
{
    if (v >= 100 || v == floor(v)) snprintf(b, n, "%.0f", v);
    else if (v >= 10) snprintf(b, n, "%.1f", v);
    else snprintf(b, n, "%.2f", v);
}

/* Seconds left of frame f, or < 0 when not known. */
static double eta_of(const struct frame *f, double now, double *rate_out)
{
    double el = now - f->t0, moved = f->done - f->d0;
    double rate = el > 0 && moved > 0 ? moved / el : 0;
    *rate_out = rate;
    double left = -1;
    if (f->total > 0 && rate > 0) left = (f->total - f->done) / rate;
    if (f->budget > 0) {
        double b = f->budget - (now - f->t_begin);
        if (b < 0) b = 0;
        if (left < 0 || b < left) left = b;
    }
    return left;
}

size_t md_progress_render(char *buf, size_t n, int width, double now)
{
    if (n == 0) return 0;
    buf[0] = '\0';
    if (depth == 0 || width < 8) return 0;
    if ((size_t)width >= n) width = (int)n - 1;
    const struct frame *f = &stack[depth - 1];

    /* the right part, kept whole: counts, note, rate, ETA */
    char right[256], a[32], b[32], r[32], e[32];
    double rate;
    double left = eta_of(f, now, &rate);
    fmt_num(a, sizeof a, f->done);
    if (f->total <= 0 && f->done <= 0) { /* nothing counted (yet): the label says it */
        right[0] = '\0';
    } else if (f->total > 0) {
        fmt_num(b, sizeof b, f->total);
        snprintf(right, sizeof right, "%s/%s %s", a, b, f->unit);
    } else {
        snprintf(right, sizeof right, "%s %s", a, f->unit);
    }
    size_t rl = strlen(right);
    if (f->note[0]) rl += (size_t)snprintf(right + rl, sizeof right - rl, "%s%s", rl ? "  " : "", f->note);
    if (f->rate > 0) {
        fmt_num(r, sizeof r, f->rate);
        rl += (size_t)snprintf(right + rl, sizeof right - rl, "  %s %s/s", r, f->rate_unit);
    } else if (rate > 0) {
        fmt_num(r, sizeof r, rate);
        rl += (size_t)snprintf(right + rl, sizeof right - rl, "  %s %s/s", r, f->unit);
    }
    if (rl > 0 && (f->total > 0 || f->budget > 0)) {
        if (left >= 0) fmt_time(e, sizeof e, left);
        else snprintf(e, sizeof e, "-:--");
        rl += (size_t)snprintf(right + rl, sizeof right - rl, "  ETA %s%s", f->total > 0 ? "" : "<=", e);
    }
    /* the outermost phase's time left, once one of its items is done */
    if (depth > 1 && stack[0].total > 0 && stack[0].done > 0 && stack[0].done < stack[0].total) {
        double el = now - stack[0].t_begin;
        fmt_time(e, sizeof e, el * (stack[0].total - stack[0].done) / stack[0].done);
        rl += (size_t)snprintf(right + rl, sizeof right - rl, "  (all ~%s)", e);
    }
    if (rl >= sizeof right) rl = sizeof right - 1;

    /* the left part: outer phases "label i/n", then the innermost label */
    char left_s[512];
    size_t ll = 0;
    left_s[0] = '\0';
    for (int i = 0; i < depth && ll < sizeof left_s; i++) {
        const struct frame *g = &stack[i];
        const char *sep = i ? " > " : "";
        if (i < depth - 1 && g->total > 0) {
            double cur = g->done + 1 < g->total ? g->done + 1 : g->total;
            fmt_num(a, sizeof a, cur);
            fmt_num(b, sizeof b, g->total);
            ll += (size_t)snprintf(left_s + ll, sizeof left_s - ll, "%s%s %s/%s", sep, g->label, a, b);
        } else {
            ll += (size_t)snprintf(left_s + ll, sizeof left_s - ll, "%s%s", sep, g->label);
        }
    }
    if (ll >= sizeof left_s) ll = sizeof left_s - 1;

    size_t w = (size_t)width;
    /* the bar takes what the labels and counts leave, up to BAR, or goes */
    int bar = 0;
    if (f->total > 0 && ll + rl + 4 + 6 <= w) bar = (int)(w - ll - rl - 4) < BAR ? (int)(w - ll - rl - 4) : BAR;
    size_t used;
    if (rl + 1 >= w) { /* not even the counts fit: they alone, cut */
        used = (size_t)snprintf(buf, n, "%.*s", (int)w, right);
        return used < n ? used : n - 1;
    }
    size_t room = w - rl - 1 - (bar ? (size_t)bar + 3 : 0);
    if (ll > room && room < 4) {
        used = 0;
        buf[0] = '\0';
    } else if (ll > room) { /* keep the innermost end of the labels */
        const char *s = left_s + ll - (room - 3);
        while (((unsigned char)*s & 0xC0) == 0x80) s++;
        used = (size_t)snprintf(buf, n, "...%s", s);
    } else {
        used = (size_t)snprintf(buf, n, "%s", left_s);
    }
    if (bar) {
        double fr = f->done / f->total;
        if (fr < 0) fr = 0;
        if (fr > 1) fr = 1;
        int fill = (int)(fr * bar + 0.5);
        used += (size_t)snprintf(buf + used, n - used, " [");
        for (int i = 0; i < bar && used + 1 < n; i++) buf[used++] = i < fill ? '#' : '.';
        buf[used] = '\0';
        used += (size_t)snprintf(buf + used, n - used, "]");
    }
    if (rl) used += (size_t)snprintf(buf + used, n - used, " %s", right);
    return used < n ? used : n - 1;
}
