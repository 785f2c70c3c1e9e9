/* mchk_lex.c - the tokenizer shared by the API and MSL checks (mchk.h). */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#include "mchk.h"

static char *read_all(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    size_t cap = 65536, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (n + 1 < cap) break;
        cap *= 2;
        char *nb = realloc(buf, cap);
        if (!nb) {
            free(buf);
            buf = NULL;
        } else {
            buf = nb;
        }
    }
    fclose(f);
    if (buf) buf[n] = '\0';
    return buf;
}

static const char *const multi[] = {"->", "<<", ">>", "==", "!=", "<=", ">=", "&&", "||", "++", "--",
                                    "+=", "-=", "*=", "/=", "|=", "&=", "^=", "%=", "::", NULL};

int md_mchk_lex(const char *path, struct md_mchk_toks *tk, FILE *out)
{
    memset(tk, 0, sizeof *tk);
    tk->path = path;
    tk->text = read_all(path);
    if (!tk->text) {
        fprintf(out, "%s: cannot read the file\n", path);
        return -1;
    }
    size_t len = strlen(tk->text);
    /* every token's text fits in the pool: at most the file plus one NUL per byte */
    tk->pool = malloc(2 * len + 2);
    tk->t = malloc((len + 2) * sizeof *tk->t);
    if (!tk->pool || !tk->t) {
        fprintf(out, "%s: out of memory\n", path);
        md_mchk_free(tk);
        return -1;
    }
    char *pool = tk->pool;
    const char *p = tk->text;
    int line = 1, bol = 1;
    while (*p) {
        if (*p == '\n') {
            line++;
            bol = 1;
            p++;
            continue;
        }
        if (isspace((unsigned char)*p)) {
            p++;
            continue;
        }
        if (p[0] == '/' && p[1] == '/') {
            while (*p && *p != '\n') p++;
            continue;
        }
        if (p[0] == '/' && p[1] == '*') {
            p += 2;
            while (*p && !(p[0] == '*' && p[1] == '/')) {
                if (*p == '\n') line++;
                p++;
            }
            if (*p) p += 2;
            continue;
        }
        struct md_mchk_tok *t = &tk->t[tk->n++];
        t->line = line;
        t->s = pool;
        if (*p == '#' && bol) {
            /* a directive: joined over backslash-newlines, comments dropped */
            t->kind = MCHK_PP;
            while (*p && *p != '\n') {
                if (p[0] == '\\' && p[1] == '\n') {
                    p += 2;
                    line++;
                    *pool++ = ' ';
                } else if (p[0] == '/' && p[1] == '*') {
                    p += 2;
                    while (*p && !(p[0] == '*' && p[1] == '/')) {
                        if (*p == '\n') line++;
                        p++;
                    }
                    if (*p) p += 2;
                    *pool++ = ' ';
                } else if (p[0] == '/' && p[1] == '/') {
                    while (*p && *p != '\n') p++;
                } else {
                    *pool++ = *p++;
                }
            }
            *pool++ = '\0';
            continue;
        }
        bol = 0;
        if (isalpha((unsigned char)*p) || *p == '_' || (*p == '@' && isalpha((unsigned char)p[1]))) {
            t->kind = *p == '@' ? MCHK_AT : MCHK_ID;
            do *pool++ = *p++;
            while (isalnum((unsigned char)*p) || *p == '_');
        } else if (isdigit((unsigned char)*p) || (*p == '.' && isdigit((unsigned char)p[1]))) {
            t->kind = MCHK_NUM;
            int hex = p[0] == '0' && (p[1] == 'x' || p[1] == 'X');
            while (isalnum((unsigned char)*p) || *p == '.' || *p == '_' ||
                   (!hex && (*p == '+' || *p == '-') && (p[-1] == 'e' || p[-1] == 'E')))
                *pool++ = *p++;
        } else if (*p == '"' || *p == '\'' || (*p == '@' && p[1] == '"')) {
            if (*p == '@') p++;
            char q = *p;
            t->kind = q == '"' ? MCHK_STR : MCHK_CHR;
            *pool++ = *p++;
            while (*p && *p != q && *p != '\n') {
                if (*p == '\\' && p[1]) *pool++ = *p++;
                *pool++ = *p++;
            }
            if (*p == q) *pool++ = *p++;
        } else {
            t->kind = MCHK_PUNCT;
            int k;
            for (k = 0; multi[k]; k++)
                if (p[0] == multi[k][0] && p[1] == multi[k][1]) break;
            if (multi[k]) {
                *pool++ = *p++;
                *pool++ = *p++;
            } else {
                *pool++ = *p++;
            }
        }
        *pool++ = '\0';
    }
    tk->t[tk->n].kind = MCHK_EOF;
    tk->t[tk->n].s = "";
    tk->t[tk->n].line = line;
    return 0;
}

void md_mchk_free(struct md_mchk_toks *tk)
{
    free(tk->t);
    free(tk->pool);
    free(tk->text);
    tk->t = NULL;
    tk->pool = tk->text = NULL;
    tk->n = 0;
}

int md_mchk_is(const struct md_mchk_toks *tk, int i, const char *s)
{
    return i >= 0 && i < tk->n && tk->t[i].kind != MCHK_STR && strcmp(tk->t[i].s, s) == 0;
}

int md_mchk_match(const struct md_mchk_toks *tk, int i)
{
    const char *open = tk->t[i].s;
    const char *close = !strcmp(open, "(") ? ")" : !strcmp(open, "[") ? "]" : !strcmp(open, "{") ? "}" : ">";
    int depth = 0;
    for (int j = i; j < tk->n; j++) {
        if (tk->t[j].kind != MCHK_PUNCT) continue;
        if (!strcmp(tk->t[j].s, open)) depth++;
        else if (!strcmp(tk->t[j].s, close) && --depth == 0) return j;
        else if (!strcmp(open, "<") && !strcmp(tk->t[j].s, ">>") && (depth -= 2) <= 0) return j;
    }
    return tk->n - 1;
}
