/* wrap.c - breaks long terminal lines at spaces (wrap.h). */
#include "core/wrap.h"

#include <string.h>

/* Bytes of the escape sequence at s (ESC [ ... final letter), else 0. */
static size_t esc_len(const char *s, size_t n)
{
    if (n < 2 || s[0] != '\033' || s[1] != '[') return 0;
    size_t i = 2;
    while (i < n && !((s[i] >= '@' && s[i] <= '~'))) i++;
    return i < n ? i + 1 : n;
}

/* Advances over one display unit at s[i]: returns the next index and adds
 * its width to *col. */
static size_t step(const char *s, size_t n, size_t i, int *col)
{
    size_t e = esc_len(s + i, n - i);
    if (e) return i + e;
    i++;
    while (i < n && ((unsigned char)s[i] & 0xC0) == 0x80) i++;
    (*col)++;
    return i;
}

int md_text_width(const char *s, size_t n)
{
    int col = 0;
    for (size_t i = 0; i < n;) i = step(s, n, i, &col);
    return col;
}

int md_wrap_indent(const char *line, size_t n, int width)
{
    int max = width / 2 < MD_WRAP_MAX_INDENT ? width / 2 : MD_WRAP_MAX_INDENT;
    int col = 0, lead = -1, best = -1, label = -1;
    for (size_t i = 0; i < n;) {
        if (lead < 0 && line[i] != ' ') lead = col;
        if (col > max) break;
        /* a text column: after two spaces (a table's), else after ": " (a
         * label's, the first one), once text began */
        if (lead >= 0 && i >= 2 && line[i] != ' ' && line[i - 1] == ' ' && col > lead) {
            if (line[i - 2] == ' ') best = col;
            else if (line[i - 2] == ':' && label < 0) label = col;
        }
        i = step(line, n, i, &col);
    }
    if (lead < 0) lead = 0;
    if (best < 0) best = label;
    if (best < 0) best = lead + 2 <= max ? lead + 2 : lead;
    return best;
}

void md_wrap_line(FILE *f, const char *line, size_t n, int width)
{
    if (md_text_width(line, n) <= width) {
        fwrite(line, 1, n, f);
        fputc('\n', f);
        return;
    }
    md_wrap_line_at(f, line, n, width, md_wrap_indent(line, n, width));
}

void md_wrap_line_at(FILE *f, const char *line, size_t n, int width, int indent)
{
    int first = 1;
    size_t pos = 0;
    while (pos < n) {
        int room = first ? width : width - indent;
        /* the longest prefix that fits, ended at a space where there is one */
        int col = 0;
        size_t i = pos, cut = 0, fit = pos;
        while (i < n) {
            size_t next = step(line, n, i, &col);
            if (col > room) break;
            if (line[i] == ' ' && i > pos) cut = i;
            fit = next;
            i = next;
        }
        size_t end;
        if (i >= n) end = n;
        else if (cut > pos && md_text_width(line + pos, cut - pos) > room / 3) end = cut;
        else end = fit > pos ? fit : step(line, n, pos, &col); /* a word longer than the line */
        size_t stop = end;
        while (stop > pos && line[stop - 1] == ' ') stop--;
        if (!first) fprintf(f, "%*s", indent, "");
        fwrite(line + pos, 1, stop - pos, f);
        fputc('\n', f);
        pos = end;
        while (pos < n && line[pos] == ' ') pos++;
        first = 0;
    }
}
