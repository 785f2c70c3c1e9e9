/* strbuf.h - a growable text buffer for the report writers (HTML, XML).
 *
 * Appends never fail visibly: on out-of-memory the buffer is marked failed,
 * later appends do nothing, and md_strbuf_take reports MD_ERR_OOM once, so
 * writers need not check every append.
 */
#ifndef MD_STRBUF_H
#define MD_STRBUF_H

#include <stddef.h>

#include "core/status.h"

typedef struct md_strbuf {
    char *data; /* NUL-terminated; owned (md_malloc) */
    size_t len, cap;
    int failed;
} md_strbuf;

void md_strbuf_init(md_strbuf *b);
void md_strbuf_free(md_strbuf *b); /* leaves an empty buffer */
void md_strbuf_add(md_strbuf *b, const char *s);
void md_strbuf_addn(md_strbuf *b, const char *s, size_t n);
#if defined(__GNUC__)
__attribute__((format(printf, 2, 3)))
#endif
void md_strbuf_printf(md_strbuf *b, const char *fmt, ...);
/* Appends s with &, <, >, " and ' escaped (valid in HTML and XML text and
 * attributes). Control characters other than tab and newline become '?'
 * (XML 1.0 cannot carry them). */
void md_strbuf_add_escaped(md_strbuf *b, const char *s);

/* Hands the text to the caller (*out, md_free) and empties the buffer.
 * MD_ERR_OOM when an append failed (nothing handed over). */
md_status md_strbuf_take(md_strbuf *b, char **out, size_t *len);

#endif
