/* strbuf.c - growable text buffer. */
#include "diag/strbuf.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "core/mem.h"

void md_strbuf_init(md_strbuf *b) { memset(b, 0, sizeof *b); }

void md_strbuf_free(md_strbuf *b)
{
    md_free(b->data);
    md_strbuf_init(b);
}

static int reserve(md_strbuf *b, size_t extra)
{
    if (b->failed) return 0;
    if (b->len + extra + 1 <= b->cap) return 1;
    size_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra + 1) cap *= 2;
    char *nd = md_realloc(b->data, cap);
    if (!nd) {
        b->failed = 1;
        return 0;
    }
    b->data = nd;
    b->cap = cap;
    return 1;
}

void md_strbuf_addn(md_strbuf *b, const char *s, size_t n)
{
    if (!reserve(b, n)) return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void md_strbuf_add(md_strbuf *b, const char *s) { md_strbuf_addn(b, s, strlen(s)); }

void md_strbuf_printf(md_strbuf *b, const char *fmt, ...)
{
    char small[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof small) {
        md_strbuf_addn(b, small, (size_t)n);
        return;
    }
    if (!reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void md_strbuf_add_escaped(md_strbuf *b, const char *s)
{
    if (!s) return;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        switch (c) {
        case '&': md_strbuf_add(b, "&amp;"); break;
        case '<': md_strbuf_add(b, "&lt;"); break;
        case '>': md_strbuf_add(b, "&gt;"); break;
        case '"': md_strbuf_add(b, "&quot;"); break;
        case '\'': md_strbuf_add(b, "&#39;"); break;
        default:
            if (c < 0x20 && c != '\t' && c != '\n') c = '?';
            md_strbuf_addn(b, (const char *)&c, 1);
        }
    }
}

md_status md_strbuf_take(md_strbuf *b, char **out, size_t *len)
{
    *out = NULL;
    if (len) *len = 0;
    if (b->failed) {
        md_strbuf_free(b);
        return md_errf(MD_ERR_OOM, "out of host memory while formatting a report");
    }
    if (!reserve(b, 0)) return md_errf(MD_ERR_OOM, "out of host memory while formatting a report");
    *out = b->data;
    if (len) *len = b->len;
    md_strbuf_init(b);
    return MD_OK;
}
