/* wrap.h - terminal lines of at most MD_TERM_WIDTH columns.
 *
 * Every line mpsdiag writes to the terminal goes through md_wrap_line (log.c
 * does it for md_out, md_verbose and md_warn): a longer line is broken at
 * spaces, and its continuation lines start under the column its text began
 * in (after the last run of two spaces, else after the first ": ", within
 * the first MD_WRAP_MAX_INDENT columns), so tables keep their columns and "label: text" lines their labels.
 * Widths count UTF-8 code points; ANSI colour sequences count nothing.
 */
#ifndef MD_WRAP_H
#define MD_WRAP_H

#include <stddef.h>
#include <stdio.h>

#define MD_TERM_WIDTH 100
#define MD_WRAP_MAX_INDENT 48

/* Display columns of s[0..n) (code points, escape sequences excluded). */
int md_text_width(const char *s, size_t n);

/* Writes `line` (n bytes, no newline inside) to f as one or more lines of at
 * most `width` columns, each ended by '\n'. */
void md_wrap_line(FILE *f, const char *line, size_t n, int width);

/* The same with continuation lines indented by `indent` columns. */
void md_wrap_line_at(FILE *f, const char *line, size_t n, int width, int indent);

/* The column continuation lines of `line` start in (see above). */
int md_wrap_indent(const char *line, size_t n, int width);

#endif
