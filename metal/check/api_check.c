/* api_check.c - metal/metal_backend.m and metal/sim/objc/MetalDecls.h
 * against the facts of Apple's Objective-C API (mchk.h).
 *
 * The facts (metal/api/metal_api_facts.tsv) come from Apple's metal-cpp;
 * foundation_extra.tsv adds the few Foundation facts metal-cpp lacks. Two
 * checks:
 *   - the .m: every message send [recv sel:...] resolves, for the receiver's
 *     class (inferred from the declarations in the .m and the facts' return
 *     types), to a selector of that class or an ancestor; every property
 *     access recv.prop to a property (readwrite when assigned); every
 *     MTL.../NS... name to a class, enum constant, struct, typedef or function;
 *   - MetalDecls.h (what clang type-checks the .m against on Linux): every
 *     class, method, property, enum constant, struct and function it declares
 *     under an MTL/NS name exists with the same kind, superclass chain,
 *     argument and result types and values.
 * Together with the clang check of the .m against MetalDecls.h, argument
 * types of the .m's calls are Apple's.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "mchk.h"

/* ---- facts ------------------------------------------------------------------ */
struct fact {
    char *f[8]; /* f[0] record kind, then its fields */
    int nf;
    int extra; /* from foundation_extra.tsv */
};

struct own_prop {
    char *name, *type;
    int readonly;
};
struct own_class {
    char *name, *super;
    struct own_prop props[32];
    int nprops;
};

struct var {
    const char *name;
    char *type; /* "C*" object, "meta:C", a struct name, "" unknown */
};

struct strblk {
    struct strblk *next;
    char s[];
};

struct ctx {
    FILE *out;
    int problems;
    struct fact *facts;
    int nfacts, capfacts;
    char *fact_text[2];
    struct own_class own[4];
    int nown;
    struct var *vars;
    int nvars, capvars;
    struct strblk *strs;
    const struct md_mchk_toks *tk;
    struct md_mchk_api_stats st;
};

static void problem(struct ctx *c, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(c->out, "%s:%d: ", c->tk->path, line);
    vfprintf(c->out, fmt, ap);
    fputc('\n', c->out);
    va_end(ap);
    c->problems++;
}

static char *str(struct ctx *c, const char *s, size_t n)
{
    struct strblk *b = malloc(sizeof *b + n + 1);
    if (!b) abort();
    memcpy(b->s, s, n);
    b->s[n] = '\0';
    b->next = c->strs;
    c->strs = b;
    return b->s;
}
static char *strf(struct ctx *c, const char *fmt, const char *a)
{
    char buf[512];
    snprintf(buf, sizeof buf, fmt, a);
    return str(c, buf, strlen(buf));
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    if (b) b[n] = '\0';
    fclose(f);
    return b;
}

static int load_facts(struct ctx *c, const char *path, int extra)
{
    char *text = read_file(path);
    if (!text) {
        fprintf(c->out, "%s: cannot read the facts file\n", path);
        return -1;
    }
    c->fact_text[extra] = text;
    for (char *line = text; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl) *nl = '\0';
        if (*line && *line != '#') {
            if (c->nfacts == c->capfacts) {
                c->capfacts = c->capfacts ? 2 * c->capfacts : 4096;
                c->facts = realloc(c->facts, (size_t)c->capfacts * sizeof *c->facts);
                if (!c->facts) abort();
            }
            struct fact *f = &c->facts[c->nfacts++];
            memset(f, 0, sizeof *f);
            f->extra = extra;
            for (char *p = line; p && f->nf < 8;) {
                f->f[f->nf++] = p;
                p = strchr(p, '\t');
                if (p) *p++ = '\0';
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    return 0;
}

static const char *fld(const struct fact *f, int i) { return i < f->nf ? f->f[i] : ""; }

static struct fact *find_fact(struct ctx *c, const char *kind, const char *name)
{
    for (int i = 0; i < c->nfacts; i++)
        if (!strcmp(c->facts[i].f[0], kind) && !strcmp(fld(&c->facts[i], 1), name)) return &c->facts[i];
    return NULL;
}

static struct own_class *own_class(struct ctx *c, const char *name)
{
    for (int i = 0; i < c->nown; i++)
        if (!strcmp(c->own[i].name, name)) return &c->own[i];
    return NULL;
}

static int is_class(struct ctx *c, const char *name)
{
    return find_fact(c, "class", name) || own_class(c, name);
}

static const char *super_of(struct ctx *c, const char *name)
{
    struct own_class *o = own_class(c, name);
    if (o) return o->super;
    struct fact *f = find_fact(c, "class", name);
    return f && strcmp(fld(f, 2), "-") ? fld(f, 2) : NULL;
}

/* 1 when anc is cls or one of its superclasses. */
static int is_ancestor(struct ctx *c, const char *anc, const char *cls)
{
    for (int depth = 0; cls && depth < 32; depth++, cls = super_of(c, cls))
        if (!strcmp(anc, cls)) return 1;
    return 0;
}

/* The fact of type `what` ("method" or "property") named `name`, of kind
 * '+'/'-', on cls or an ancestor. */
static struct fact *find_member(struct ctx *c, const char *what, const char *cls, char kind, const char *name)
{
    char k[2] = {kind, 0};
    for (int depth = 0; cls && depth < 32; depth++, cls = super_of(c, cls))
        for (int i = 0; i < c->nfacts; i++) {
            struct fact *f = &c->facts[i];
            if (!strcmp(f->f[0], what) && !strcmp(fld(f, 1), cls) && !strcmp(fld(f, 2), k) &&
                !strcmp(fld(f, 3), name))
                return f;
        }
    return NULL;
}

static struct fact *find_method(struct ctx *c, const char *cls, char kind, const char *sel)
{
    return find_member(c, "method", cls, kind, sel);
}

static struct fact *find_property(struct ctx *c, const char *cls, char kind, const char *name)
{
    return find_member(c, "property", cls, kind, name);
}

/* A class having `sel` (for the message naming where it does exist). */
static const char *who_has(struct ctx *c, const char *sel)
{
    for (int i = 0; i < c->nfacts; i++)
        if (!strcmp(c->facts[i].f[0], "method") && !strcmp(fld(&c->facts[i], 3), sel)) return fld(&c->facts[i], 1);
    return NULL;
}

static int apple_name(const char *s)
{
    return (!strncmp(s, "MTL", 3) && isupper((unsigned char)s[3])) || (!strncmp(s, "NS", 2) && isupper((unsigned char)s[2]));
}

/* Any fact naming s: class, enum, constant, struct, typedef or function. */
static struct fact *known_name(struct ctx *c, const char *s)
{
    static const char *const kinds[] = {"class", "enum", "const", "struct", "typedef", "function"};
    for (size_t k = 0; k < sizeof kinds / sizeof *kinds; k++) {
        struct fact *f = find_fact(c, kinds[k], s);
        if (f) return f;
    }
    return NULL;
}

/* ---- types -------------------------------------------------------------------- */
static int is_qualifier(const char *s)
{
    static const char *const q[] = {"_Nullable", "_Nonnull", "nullable", "nonnull", "__nullable", "__nonnull",
                                    "_Null_unspecified", "__strong", "__weak", "__autoreleasing",
                                    "__unsafe_unretained", "__kindof", "__covariant", "__bridge",
                                    "__bridge_transfer", "__bridge_retained", "struct", "static", "inline",
                                    "extern", NULL};
    for (int i = 0; q[i]; i++)
        if (!strcmp(s, q[i])) return 1;
    return 0;
}

/* Tokens [a, b) of a type as the canonical spelling of the facts:
 * id<P> -> P*, generic arguments dropped, ObjectType/KeyType -> id, arrays ->
 * pointers, nullability and ARC qualifiers dropped, const dropped from
 * object pointers. */
static char *norm_type(struct ctx *c, int a, int b)
{
    const struct md_mchk_toks *tk = c->tk;
    char buf[256] = "";
    size_t n = 0;
    for (int i = a; i < b && n < sizeof buf - 64; i++) {
        const char *s = tk->t[i].s;
        if (is_qualifier(s)) continue;
        if (!strcmp(s, "__attribute__")) {
            if (md_mchk_is(tk, i + 1, "(")) i = md_mchk_match(tk, i + 1);
            continue;
        }
        if (!strcmp(s, "id") && md_mchk_is(tk, i + 1, "<")) {
            int e = md_mchk_match(tk, i + 1);
            n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s*", n && buf[n - 1] != '*' ? " " : "",
                                  i + 2 < e ? tk->t[i + 2].s : "id");
            i = e;
            continue;
        }
        if (!strcmp(s, "<")) {
            i = md_mchk_match(tk, i);
            continue;
        }
        if (!strcmp(s, "[")) {
            i = md_mchk_match(tk, i);
            s = "*";
        }
        if (!strcmp(s, "ObjectType") || !strcmp(s, "KeyType")) s = "id";
        if (!strcmp(s, "*")) {
            buf[n++] = '*';
            buf[n] = '\0';
        } else {
            n += (size_t)snprintf(buf + n, sizeof buf - n, "%s%s", n ? " " : "", s);
        }
    }
    char *r = buf;
    if (!strncmp(r, "const ", 6)) {
        char word[128];
        if (sscanf(r + 6, "%127[A-Za-z0-9_]", word) == 1 && (is_class(c, word) || !strcmp(word, "id"))) r += 6;
    }
    return str(c, r, strlen(r));
}

/* "C*" with C a class or protocol -> C; else NULL. */
static const char *obj_class(struct ctx *c, const char *type, char *buf, size_t n)
{
    size_t l = strlen(type);
    if (l < 2 || type[l - 1] != '*' || type[l - 2] == '*' || l - 1 >= n) return NULL;
    memcpy(buf, type, l - 1);
    buf[l - 1] = '\0';
    return is_class(c, buf) ? buf : NULL;
}

static int types_agree(struct ctx *c, const char *decl, const char *fact)
{
    char b1[128], b2[128];
    if (!strcmp(decl, fact)) return 1;
    if (!strcmp(decl, "instancetype") && obj_class(c, fact, b1, sizeof b1)) return 1;
    if (!strcmp(fact, "instancetype") && obj_class(c, decl, b2, sizeof b2)) return 1;
    return 0;
}

/* ---- integer constant expressions of MetalDecls.h (n, n << m, a | b, names) ---- */
struct eval {
    struct ctx *c;
    int i, end, ok;
    const char **names;
    long long *vals;
    int nnames;
};

static long long ev_or(struct eval *e);
static long long ev_prim(struct eval *e)
{
    const struct md_mchk_toks *tk = e->c->tk;
    if (e->i >= e->end) {
        e->ok = 0;
        return 0;
    }
    const struct md_mchk_tok *t = &tk->t[e->i++];
    if (t->kind == MCHK_NUM) return (long long)strtoull(t->s, NULL, 0);
    if (!strcmp(t->s, "(")) {
        /* a cast "(TYPE)" is skipped */
        if (e->i < e->end && tk->t[e->i].kind == MCHK_ID && md_mchk_is(tk, e->i + 1, ")") &&
            !(e->i + 2 >= e->end)) {
            e->i += 2;
            return ev_prim(e);
        }
        long long v = ev_or(e);
        if (md_mchk_is(tk, e->i, ")")) e->i++;
        else e->ok = 0;
        return v;
    }
    if (!strcmp(t->s, "-")) return -ev_prim(e);
    if (t->kind == MCHK_ID)
        for (int k = 0; k < e->nnames; k++)
            if (!strcmp(e->names[k], t->s)) return e->vals[k];
    e->ok = 0;
    return 0;
}
static long long ev_shift(struct eval *e)
{
    long long v = ev_prim(e);
    while (e->ok && e->i < e->end && md_mchk_is(e->c->tk, e->i, "<<")) {
        e->i++;
        v = (long long)((unsigned long long)v << ev_prim(e));
    }
    return v;
}
static long long ev_or(struct eval *e)
{
    long long v = ev_shift(e);
    while (e->ok && e->i < e->end && md_mchk_is(e->c->tk, e->i, "|")) {
        e->i++;
        v |= ev_shift(e);
    }
    return v;
}

/* ---- MetalDecls.h -------------------------------------------------------------- */
static int check_method_decl(struct ctx *c, const char *cls, int i)
{
    const struct md_mchk_toks *tk = c->tk;
    char kind = tk->t[i].s[0];
    int line = tk->t[i].line;
    i++;
    char *ret = "id";
    if (md_mchk_is(tk, i, "(")) {
        int e = md_mchk_match(tk, i);
        ret = norm_type(c, i + 1, e);
        i = e + 1;
    }
    char sel[256] = "";
    char *args[16];
    int nargs = 0;
    while (i < tk->n && tk->t[i].kind == MCHK_ID && strcmp(tk->t[i].s, "__attribute__")) {
        if (!md_mchk_is(tk, i + 1, ":")) {
            if (!*sel) snprintf(sel, sizeof sel, "%s", tk->t[i].s);
            i++;
            break;
        }
        strncat(sel, tk->t[i].s, sizeof sel - strlen(sel) - 2);
        strcat(sel, ":");
        i += 2;
        if (md_mchk_is(tk, i, "(")) {
            int e = md_mchk_match(tk, i);
            if (nargs < 16) args[nargs++] = norm_type(c, i + 1, e);
            i = e + 1;
        }
        if (i < tk->n && tk->t[i].kind == MCHK_ID) i++; /* the parameter's name */
    }
    while (i < tk->n && !md_mchk_is(tk, i, ";") && !md_mchk_is(tk, i, "@end")) i++;
    c->st.decls++;
    if (!apple_name(cls)) return i;
    struct fact *f = find_method(c, cls, kind, sel);
    if (!f) {
        const char *o = who_has(c, sel);
        problem(c, line, "%c[%s %s] is declared here but is not in Apple's API%s%s", kind, cls, sel,
                o ? "; it exists on " : "", o ? o : "");
        return i;
    }
    if (!types_agree(c, ret, fld(f, 4)))
        problem(c, line, "%c[%s %s] returns %s here but %s in Apple's API", kind, cls, sel, ret, fld(f, 4));
    char got[512] = "";
    for (int k = 0; k < nargs; k++) {
        strncat(got, k ? "," : "", sizeof got - strlen(got) - 1);
        strncat(got, args[k], sizeof got - strlen(got) - 1);
    }
    const char *want = strcmp(fld(f, 5), "-") ? fld(f, 5) : "";
    if (strcmp(got, want)) problem(c, line, "%c[%s %s] takes (%s) here but (%s) in Apple's API", kind, cls, sel, got, want);
    return i;
}

/* @property (attrs) TYPE NAME; at i (the @property token). Returns the index of ';'. */
static int parse_property(struct ctx *c, int i, int *readonly, int *cls_prop, char **type, char **name, char **getter)
{
    const struct md_mchk_toks *tk = c->tk;
    *readonly = *cls_prop = 0;
    *getter = NULL;
    i++;
    if (md_mchk_is(tk, i, "(")) {
        int e = md_mchk_match(tk, i);
        for (int k = i + 1; k < e; k++) {
            if (md_mchk_is(tk, k, "readonly")) *readonly = 1;
            if (md_mchk_is(tk, k, "class")) *cls_prop = 1;
            if (md_mchk_is(tk, k, "getter") && md_mchk_is(tk, k + 1, "=")) *getter = str(c, tk->t[k + 2].s, strlen(tk->t[k + 2].s));
        }
        i = e + 1;
    }
    int end = i;
    while (end < tk->n && !md_mchk_is(tk, end, ";")) end++;
    int last = end;
    for (int k = i; k < end; k++)
        if (md_mchk_is(tk, k, "__attribute__")) {
            last = k;
            break;
        }
    int nm = last - 1;
    while (nm > i && tk->t[nm].kind != MCHK_ID) nm--;
    *name = str(c, tk->t[nm].s, strlen(tk->t[nm].s));
    *type = norm_type(c, i, nm);
    return end;
}

static int check_class_decl(struct ctx *c, int i)
{
    const struct md_mchk_toks *tk = c->tk;
    int is_proto = md_mchk_is(tk, i, "@protocol");
    int line = tk->t[i].line;
    const char *name = tk->t[i + 1].s;
    const char *super = NULL;
    i += 2;
    if (!is_proto && md_mchk_is(tk, i, "<")) i = md_mchk_match(tk, i) + 1;
    if (!is_proto && md_mchk_is(tk, i, ":")) {
        super = tk->t[i + 1].s;
        i += 2;
        if (md_mchk_is(tk, i, "<")) i = md_mchk_match(tk, i) + 1;
    }
    if (md_mchk_is(tk, i, "<")) {
        if (is_proto) super = tk->t[i + 1].s;
        i = md_mchk_match(tk, i) + 1;
    }
    if (apple_name(name)) {
        struct fact *f = find_fact(c, "class", name);
        c->st.decls++;
        if (!f)
            problem(c, line, "%s %s is declared here but is not in Apple's API", is_proto ? "@protocol" : "@interface", name);
        else if (strcmp(fld(f, 3), is_proto ? "protocol" : "class") && strcmp(name, "NSObject"))
            problem(c, line, "%s is declared as a%s here but is a%s in Apple's API", name, is_proto ? " protocol" : " class",
                    is_proto ? " class" : " protocol");
        if (f && super && !is_ancestor(c, super, fld(f, 2)) && strcmp(name, "NSObject"))
            problem(c, line, "%s derives from %s here, which is not among its superclasses in Apple's API (%s)", name,
                    super, fld(f, 2));
    }
    for (; i < tk->n && !md_mchk_is(tk, i, "@end"); i++) {
        if (md_mchk_is(tk, i, "{")) {
            i = md_mchk_match(tk, i);
        } else if ((md_mchk_is(tk, i, "-") || md_mchk_is(tk, i, "+")) && md_mchk_is(tk, i + 1, "(")) {
            i = check_method_decl(c, name, i);
        } else if (md_mchk_is(tk, i, "@property")) {
            int ro, cp, pline = tk->t[i].line;
            char *type, *pname, *getter;
            i = parse_property(c, i, &ro, &cp, &type, &pname, &getter);
            c->st.decls++;
            if (!apple_name(name)) continue;
            struct fact *f = find_property(c, name, cp ? '+' : '-', pname);
            if (!f) {
                problem(c, pline, "property %s.%s is declared here but is not in Apple's API", name, pname);
                continue;
            }
            if (!types_agree(c, type, fld(f, 4)))
                problem(c, pline, "property %s.%s is %s here but %s in Apple's API", name, pname, type, fld(f, 4));
            if (!ro && strcmp(fld(f, 5), "readwrite"))
                problem(c, pline, "property %s.%s is readwrite here but readonly in Apple's API", name, pname);
            if (getter && strcmp(getter, fld(f, 6)))
                problem(c, pline, "property %s.%s has getter %s here but %s in Apple's API", name, pname, getter, fld(f, 6));
        }
    }
    return i;
}

static void check_define(struct ctx *c, const struct md_mchk_tok *t)
{
    char name[128];
    if (sscanf(t->s, "# define %127s", name) != 1 && sscanf(t->s, "#define %127s", name) != 1) return;
    if (!apple_name(name) || strchr(name, '(')) return;
    c->st.decls++;
    struct fact *f = find_fact(c, "const", name);
    if (!f) {
        problem(c, t->line, "%s is defined here but is not a constant of Apple's API", name);
        return;
    }
    const char *p = strstr(t->s, name) + strlen(name);
    long long v = 0;
    int found = 0;
    for (; *p; p++)
        if (isdigit((unsigned char)*p) && !isalnum((unsigned char)p[-1]) && p[-1] != '_') {
            v = (long long)strtoull(p, NULL, 0);
            found = 1;
            break;
        }
    if (!found || v != strtoll(fld(f, 3), NULL, 10))
        problem(c, t->line, "%s is %lld here but %s in Apple's API", name, v, fld(f, 3));
}

static int check_enum(struct ctx *c, int i, const char *typedef_name)
{
    const struct md_mchk_toks *tk = c->tk;
    int open = i + 1;
    while (open < tk->n && !md_mchk_is(tk, open, "{")) open++;
    int close = md_mchk_match(tk, open);
    const char *names[256];
    long long vals[256];
    int nn = 0;
    long long next = 0;
    for (int k = open + 1; k < close;) {
        if (tk->t[k].kind != MCHK_ID) {
            k++;
            continue;
        }
        const struct md_mchk_tok *nt = &tk->t[k];
        int e = k + 1;
        long long v = next;
        int ok = 1;
        if (md_mchk_is(tk, e, "=")) {
            int s = e + 1;
            e = s;
            while (e < close && !md_mchk_is(tk, e, ",")) {
                if (md_mchk_is(tk, e, "(")) e = md_mchk_match(tk, e);
                e++;
            }
            struct eval ev = {c, s, e, 1, names, vals, nn};
            v = ev_or(&ev);
            ok = ev.ok;
        }
        if (nn < 256) {
            names[nn] = nt->s;
            vals[nn++] = v;
        }
        next = v + 1;
        if (apple_name(nt->s)) {
            c->st.decls++;
            struct fact *f = find_fact(c, "const", nt->s);
            if (!f)
                problem(c, nt->line, "enum constant %s is declared here but is not in Apple's API", nt->s);
            else if (!ok || v != strtoll(fld(f, 3), NULL, 10))
                problem(c, nt->line, "%s is %lld here but %s in Apple's API", nt->s, v, fld(f, 3));
            else if (typedef_name && strcmp(typedef_name, fld(f, 2)))
                problem(c, nt->line, "%s belongs to %s here but to %s in Apple's API", nt->s, typedef_name, fld(f, 2));
        } else {
            c->st.unchecked_decls++;
        }
        k = e + 1;
    }
    return close;
}

static int check_struct(struct ctx *c, int open, const char *name, int line)
{
    const struct md_mchk_toks *tk = c->tk;
    int close = md_mchk_match(tk, open);
    char got[1024] = "";
    for (int k = open + 1; k < close;) {
        int e = k;
        while (e < close && !md_mchk_is(tk, e, ";")) e++;
        /* TYPE a, b, c;  -> the type is the tokens before the first declarator */
        int first = k;
        while (first < e && !(tk->t[first].kind == MCHK_ID && (md_mchk_is(tk, first + 1, ",") ||
                                                               md_mchk_is(tk, first + 1, ";") ||
                                                               md_mchk_is(tk, first + 1, "["))))
            first++;
        char *base = norm_type(c, k, first);
        for (int d = first; d < e; d++) {
            if (tk->t[d].kind != MCHK_ID) continue;
            char one[256];
            const char *arr = "";
            char dims[32] = "";
            if (md_mchk_is(tk, d + 1, "[")) {
                snprintf(dims, sizeof dims, "[%s]", tk->t[d + 2].s);
                arr = dims;
            }
            snprintf(one, sizeof one, "%s%s:%s%s", *got ? "," : "", tk->t[d].s, base, arr);
            strncat(got, one, sizeof got - strlen(got) - 1);
            while (d < e && !md_mchk_is(tk, d, ",")) d++;
        }
        k = e + 1;
    }
    if (!apple_name(name)) {
        c->st.unchecked_decls++;
        return close;
    }
    c->st.decls++;
    struct fact *f = find_fact(c, "struct", name);
    if (!f) problem(c, line, "struct %s is declared here but is not in Apple's API", name);
    else if (strcmp(got, fld(f, 2)))
        problem(c, line, "struct %s is {%s} here but {%s} in Apple's API", name, got, fld(f, 2));
    return close;
}

/* A function declaration or definition at top level: TYPE NAME(PARAMS) ; or { }. */
static int check_function(struct ctx *c, int start, int lp)
{
    const struct md_mchk_toks *tk = c->tk;
    int rp = md_mchk_match(tk, lp);
    const char *name = tk->t[lp - 1].s;
    int end = rp + 1;
    if (md_mchk_is(tk, end, "{")) end = md_mchk_match(tk, end);
    else
        while (end < tk->n && !md_mchk_is(tk, end, ";")) end++;
    if (!apple_name(name)) {
        c->st.unchecked_decls++;
        return end;
    }
    c->st.decls++;
    char *ret = norm_type(c, start, lp - 1);
    char got[512] = "";
    for (int k = lp + 1; k < rp;) {
        int e = k;
        while (e < rp && !md_mchk_is(tk, e, ",")) e++;
        int last = e - 1;
        char *t = (last > k && tk->t[last].kind == MCHK_ID) ? norm_type(c, k, last) : norm_type(c, k, e);
        if (strcmp(t, "void")) {
            strncat(got, *got ? "," : "", sizeof got - strlen(got) - 1);
            strncat(got, t, sizeof got - strlen(got) - 1);
        }
        k = e + 1;
    }
    struct fact *f = find_fact(c, "function", name);
    if (!f) {
        problem(c, tk->t[lp].line, "function %s is declared here but is not in Apple's API", name);
        return end;
    }
    const char *want = strcmp(fld(f, 3), "-") ? fld(f, 3) : "";
    if (!types_agree(c, ret, fld(f, 2)) || strcmp(got, want))
        problem(c, tk->t[lp].line, "%s is %s(%s) here but %s(%s) in Apple's API", name, ret, got, fld(f, 2), want);
    return end;
}

static void check_decls(struct ctx *c)
{
    const struct md_mchk_toks *tk = c->tk;
    const char *last_typedef = NULL;
    for (int i = 0; i < tk->n; i++) {
        const struct md_mchk_tok *t = &tk->t[i];
        if (t->kind == MCHK_PP) {
            check_define(c, t);
            continue;
        }
        if (md_mchk_is(tk, i, "@interface") || md_mchk_is(tk, i, "@protocol")) {
            if (md_mchk_is(tk, i + 2, ";")) {
                i += 2; /* a forward declaration */
                continue;
            }
            i = check_class_decl(c, i);
            continue;
        }
        if (md_mchk_is(tk, i, "__attribute__") && md_mchk_is(tk, i + 1, "(")) {
            i = md_mchk_match(tk, i + 1);
            continue;
        }
        if (md_mchk_is(tk, i, "typedef")) {
            if (md_mchk_is(tk, i + 1, "struct")) {
                int open = i + 2;
                if (tk->t[open].kind == MCHK_ID) open++;
                if (md_mchk_is(tk, open, "{")) {
                    int close = md_mchk_match(tk, open);
                    check_struct(c, open, tk->t[close + 1].s, t->line);
                    i = close + 1;
                    continue;
                }
            }
            int e = i;
            while (e < tk->n && !md_mchk_is(tk, e, ";")) e++;
            const char *name = tk->t[e - 1].s;
            last_typedef = name;
            if (apple_name(name)) {
                c->st.decls++;
                if (!known_name(c, name)) problem(c, t->line, "type %s is declared here but is not in Apple's API", name);
            } else {
                c->st.unchecked_decls++;
            }
            i = e;
            continue;
        }
        if (md_mchk_is(tk, i, "enum") && (md_mchk_is(tk, i + 1, "{") || md_mchk_is(tk, i + 2, "{"))) {
            i = check_enum(c, i, last_typedef && apple_name(last_typedef) ? last_typedef : NULL);
            last_typedef = NULL;
            continue;
        }
        if (t->kind == MCHK_ID && md_mchk_is(tk, i + 1, "(") && i > 0 && tk->t[i - 1].kind == MCHK_ID &&
            strcmp(tk->t[i - 1].s, "define")) {
            int start = i - 1;
            while (start > 0 && !md_mchk_is(tk, start - 1, ";") && !md_mchk_is(tk, start - 1, "}") &&
                   tk->t[start - 1].kind != MCHK_PP && !md_mchk_is(tk, start - 1, "@end"))
                start--;
            i = check_function(c, start, i + 1);
            continue;
        }
    }
}

/* ---- metal_backend.m ---------------------------------------------------------------- */
static const char *const c_type_words[] = {"void", "char", "short", "int", "long", "unsigned", "signed", "float",
                                           "double", "size_t", "uintptr_t", "intptr_t", "uint8_t", "uint32_t",
                                           "uint64_t", "int64_t", "int32_t", "const", "struct", "md_status",
                                           "md_device", "BOOL", "CFTypeRef", "CFNumberRef", "io_service_t",
                                           "id", NULL};

static int is_type_word(struct ctx *c, const char *s)
{
    for (int i = 0; c_type_words[i]; i++)
        if (!strcmp(s, c_type_words[i])) return 1;
    if (is_class(c, s)) return 1;
    struct fact *f = known_name(c, s);
    return f && strcmp(f->f[0], "const") && strcmp(f->f[0], "function");
}

static int is_keyword(const char *s)
{
    static const char *const k[] = {"return", "sizeof", "if", "else", "while", "for", "do", "switch", "case",
                                    "default", "break", "continue", "goto", "in", "typedef", "static", "const",
                                    "struct", "enum", "inline", "extern", NULL};
    for (int i = 0; k[i]; i++)
        if (!strcmp(s, k[i])) return 1;
    return 0;
}

static void declare(struct ctx *c, const char *name, char *type)
{
    if (c->nvars == c->capvars) {
        c->capvars = c->capvars ? 2 * c->capvars : 256;
        c->vars = realloc(c->vars, (size_t)c->capvars * sizeof *c->vars);
        if (!c->vars) abort();
    }
    c->vars[c->nvars].name = name;
    c->vars[c->nvars++].type = type;
}

static char *var_type(struct ctx *c, const char *name)
{
    for (int i = c->nvars - 1; i >= 0; i--)
        if (!strcmp(c->vars[i].name, name)) return c->vars[i].type;
    return NULL;
}

static int after_decl_ok(const struct md_mchk_toks *tk, int i)
{
    static const char *const ok[] = {"=", ";", ",", "[", ")", "in", "(", NULL};
    for (int k = 0; ok[k]; k++)
        if (md_mchk_is(tk, i, ok[k])) return 1;
    return 0;
}

/* More declarators of the same statement: ", *name" / ", name" up to ';'. */
static void more_declarators(struct ctx *c, int i, char *type)
{
    const struct md_mchk_toks *tk = c->tk;
    for (int k = i; k < tk->n; k++) {
        if (md_mchk_is(tk, k, "(") || md_mchk_is(tk, k, "[") || md_mchk_is(tk, k, "{")) {
            k = md_mchk_match(tk, k);
            continue;
        }
        if (md_mchk_is(tk, k, ";") || md_mchk_is(tk, k, ")") || md_mchk_is(tk, k, "}")) return;
        if (md_mchk_is(tk, k, ",")) {
            int n = k + 1;
            if (md_mchk_is(tk, n, "*")) n++;
            if (tk->t[n].kind == MCHK_ID && (md_mchk_is(tk, n + 1, "=") || md_mchk_is(tk, n + 1, ",") ||
                                            md_mchk_is(tk, n + 1, ";")))
                declare(c, tk->t[n].s, type);
        }
    }
}

/* A declaration starting at i: registers the variable; returns the index of
 * its name (consumed), or -1. */
static int try_decl(struct ctx *c, int i)
{
    const struct md_mchk_toks *tk = c->tk;
    static const char *const before[] = {";", "{", "}", "(", ",", "const", "static", "inline", ":", NULL};
    int ok = i == 0 || tk->t[i - 1].kind == MCHK_PP || tk->t[i - 1].kind == MCHK_AT;
    for (int k = 0; !ok && before[k]; k++) ok = md_mchk_is(tk, i - 1, before[k]);
    if (!ok || tk->t[i].kind != MCHK_ID || is_keyword(tk->t[i].s)) {
        if (!(ok && md_mchk_is(tk, i, "struct"))) return -1;
    }
    int k = i;
    char *type = NULL;
    if (md_mchk_is(tk, k, "id") && md_mchk_is(tk, k + 1, "<")) {
        k = md_mchk_match(tk, k + 1) + 1;
    } else if (md_mchk_is(tk, k, "struct")) {
        k += 2;
        type = "";
    } else if (tk->t[k].kind == MCHK_ID) {
        k++;
        if (md_mchk_is(tk, k, "<")) k = md_mchk_match(tk, k) + 1;
    } else {
        return -1;
    }
    int stars = 0;
    while (k < tk->n && (md_mchk_is(tk, k, "*") || is_qualifier(tk->t[k].s) || md_mchk_is(tk, k, "const"))) {
        if (md_mchk_is(tk, k, "*")) stars++;
        k++;
    }
    if (tk->t[k].kind != MCHK_ID || is_keyword(tk->t[k].s) || !after_decl_ok(tk, k + 1)) return -1;
    if (!type) {
        const char *first = tk->t[i].s;
        if (!strcmp(first, "id") && stars == 0) type = norm_type(c, i, k);
        else if (is_class(c, first) && stars == 1) type = strf(c, "%s*", first);
        else if (find_fact(c, "struct", first) && stars == 0) type = strf(c, "%s", first);
        else if (is_type_word(c, first) || stars == 0 || md_mchk_is(tk, k + 1, "=") || md_mchk_is(tk, k + 1, ";"))
            type = "";
        else
            return -1;
    }
    declare(c, tk->t[k].s, type);
    more_declarators(c, k + 1, type);
    return k;
}

static int postfix(struct ctx *c, int i, int end, char **type);
static int scan(struct ctx *c, int i, int end);

/* The type of property/field `name` of a value of type t (line for problems). */
static char *member(struct ctx *c, const char *t, const char *name, int assigned, int line)
{
    char buf[128];
    const char *cls = obj_class(c, t, buf, sizeof buf);
    int meta = !strncmp(t, "meta:", 5);
    if (meta) cls = t + 5;
    if (cls) {
        c->st.properties++;
        for (const char *k = cls; k; k = super_of(c, k)) {
            struct own_class *o = own_class(c, k);
            if (!o) break;
            for (int p = 0; p < o->nprops; p++)
                if (!strcmp(o->props[p].name, name)) {
                    if (assigned && o->props[p].readonly) problem(c, line, "%s.%s is readonly", cls, name);
                    return o->props[p].type;
                }
        }
        struct fact *f = find_property(c, cls, meta ? '+' : '-', name);
        if (!f) {
            problem(c, line, "property %s.%s is not in Apple's API (metal/api facts)", cls, name);
            return "";
        }
        if (f->extra) c->st.extra_used++;
        if (assigned && strcmp(fld(f, 5), "readwrite"))
            problem(c, line, "%s.%s is readonly in Apple's API but assigned here", cls, name);
        return fld(f, 4)[0] ? (char *)fld(f, 4) : "";
    }
    struct fact *s = find_fact(c, "struct", t);
    if (s) {
        /* fields "name:type,..." */
        size_t l = strlen(name);
        for (const char *p = fld(s, 2); p && *p; p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL)
            if (!strncmp(p, name, l) && p[l] == ':') {
                const char *e = strchr(p + l + 1, ',');
                return str(c, p + l + 1, e ? (size_t)(e - p - l - 1) : strlen(p + l + 1));
            }
        problem(c, line, "%s has no field %s in Apple's API", t, name);
    }
    return "";
}

static char *result_type(struct ctx *c, const char *ret, const char *recv)
{
    if (!strcmp(ret, "instancetype")) return !strncmp(recv, "meta:", 5) ? strf(c, "%s*", recv + 5) : (char *)recv;
    char buf[128];
    if (obj_class(c, ret, buf, sizeof buf) || find_fact(c, "struct", ret)) return (char *)ret;
    return "";
}

/* [recv sel:arg ...] at i; returns the index after ']'. */
static int message(struct ctx *c, int i, char **type)
{
    const struct md_mchk_toks *tk = c->tk;
    int end = md_mchk_match(tk, i), line = tk->t[i].line;
    char *rt = "";
    int k = postfix(c, i + 1, end, &rt);
    char sel[256] = "";
    while (k < end) {
        if (tk->t[k].kind == MCHK_ID && k + 1 == end && !*sel) {
            snprintf(sel, sizeof sel, "%s", tk->t[k].s);
            k = end;
            break;
        }
        if (!(tk->t[k].kind == MCHK_ID && md_mchk_is(tk, k + 1, ":"))) {
            problem(c, tk->t[k].line, "cannot read the message send here (unexpected '%s')", tk->t[k].s);
            scan(c, k, end);
            break;
        }
        strncat(sel, tk->t[k].s, sizeof sel - strlen(sel) - 2);
        strcat(sel, ":");
        int a = k + 2, e = a, q = 0;
        while (e < end) {
            if (md_mchk_is(tk, e, "(") || md_mchk_is(tk, e, "[") || md_mchk_is(tk, e, "{")) {
                e = md_mchk_match(tk, e) + 1;
                continue;
            }
            if (md_mchk_is(tk, e, "?")) q++;
            if (tk->t[e].kind == MCHK_ID && md_mchk_is(tk, e + 1, ":")) {
                if (!q) break;
                q--;
            }
            e++;
        }
        scan(c, a, e);
        k = e;
    }
    *type = "";
    char buf[128];
    const char *cls = obj_class(c, rt, buf, sizeof buf);
    int meta = !strncmp(rt, "meta:", 5);
    if (meta) cls = rt + 5;
    c->st.sends++;
    if (!cls) {
        problem(c, line, "cannot tell the class of the receiver of [... %s] (declare it with its class or id<protocol>)",
                sel);
        return end + 1;
    }
    struct fact *f = find_method(c, cls, meta ? '+' : '-', sel);
    if (!f) {
        const char *o = who_has(c, sel);
        problem(c, line, "%c[%s %s] is not in Apple's API (metal/api facts)%s%s", meta ? '+' : '-', cls, sel,
                o ? "; it exists on " : "", o ? o : "");
        return end + 1;
    }
    if (f->extra) c->st.extra_used++;
    *type = result_type(c, fld(f, 4), meta ? rt : strf(c, "%s*", cls));
    return end + 1;
}

static int is_cast(struct ctx *c, int i, int close)
{
    const struct md_mchk_toks *tk = c->tk;
    int k = i + 1;
    while (k < close && is_qualifier(tk->t[k].s) && strcmp(tk->t[k].s, "struct")) k++;
    if (k >= close || tk->t[k].kind != MCHK_ID || !is_type_word(c, tk->t[k].s)) return 0;
    for (int j = k; j < close; j++)
        if (tk->t[j].kind != MCHK_ID && !md_mchk_is(tk, j, "*") && !md_mchk_is(tk, j, "<") && !md_mchk_is(tk, j, ">"))
            return 0;
    return 1;
}

static void check_name(struct ctx *c, const struct md_mchk_tok *t)
{
    if (!apple_name(t->s)) return;
    c->st.names++;
    struct fact *f = known_name(c, t->s);
    if (!f) problem(c, t->line, "%s is not a name of Apple's API (metal/api facts)", t->s);
    else if (f->extra) c->st.extra_used++;
}

static int postfix(struct ctx *c, int i, int end, char **type)
{
    const struct md_mchk_toks *tk = c->tk;
    char *t = "";
    if (i >= end) {
        *type = t;
        return end;
    }
    if (md_mchk_is(tk, i, "[")) {
        i = message(c, i, &t);
    } else if (md_mchk_is(tk, i, "(")) {
        int close = md_mchk_match(tk, i);
        if (is_cast(c, i, close)) {
            for (int k = i + 1; k < close; k++) check_name(c, &tk->t[k]);
            char *ct = norm_type(c, i + 1, close);
            char *inner;
            int k = postfix(c, close + 1, end, &inner);
            char buf[128];
            *type = obj_class(c, ct, buf, sizeof buf) ? ct : "";
            return k;
        }
        char *inner = "";
        if (try_decl(c, i + 1) >= 0) {
            scan(c, i + 1, close);
        } else {
            int k = postfix(c, i + 1, close, &inner);
            if (k == close) t = inner;
            else scan(c, k, close);
        }
        i = close + 1;
    } else if (tk->t[i].kind == MCHK_ID && !is_keyword(tk->t[i].s)) {
        const struct md_mchk_tok *id = &tk->t[i];
        check_name(c, id);
        if (md_mchk_is(tk, i + 1, "(")) {
            int close = md_mchk_match(tk, i + 1);
            struct fact *f = find_fact(c, "function", id->s);
            char *vt = var_type(c, id->s);
            t = f ? result_type(c, fld(f, 2), "") : vt ? vt : "";
            scan(c, i + 2, close);
            i = close + 1;
        } else {
            char *vt = var_type(c, id->s);
            t = vt ? vt : is_class(c, id->s) ? strf(c, "meta:%s", id->s) : "";
            i++;
        }
    } else {
        *type = "";
        return i + 1;
    }
    for (;;) {
        if (md_mchk_is(tk, i, ".") && i + 1 < end && tk->t[i + 1].kind == MCHK_ID) {
            int assigned = md_mchk_is(tk, i + 2, "=");
            t = member(c, t, tk->t[i + 1].s, assigned, tk->t[i + 1].line);
            i += 2;
        } else if (md_mchk_is(tk, i, "->") && i + 1 < end) {
            t = "";
            i += 2;
        } else if (md_mchk_is(tk, i, "[") || md_mchk_is(tk, i, "(")) {
            int close = md_mchk_match(tk, i);
            scan(c, i + 1, close);
            t = "";
            i = close + 1;
        } else if (md_mchk_is(tk, i, "++") || md_mchk_is(tk, i, "--")) {
            i++;
        } else {
            break;
        }
    }
    *type = t;
    return i;
}

/* @interface of the .m's own classes: superclass and properties. */
static int own_interface(struct ctx *c, int i)
{
    const struct md_mchk_toks *tk = c->tk;
    if (c->nown == (int)(sizeof c->own / sizeof *c->own)) return i + 1;
    struct own_class *o = &c->own[c->nown++];
    memset(o, 0, sizeof *o);
    o->name = (char *)tk->t[i + 1].s;
    o->super = md_mchk_is(tk, i + 2, ":") ? (char *)tk->t[i + 3].s : NULL;
    for (i += 2; i < tk->n && !md_mchk_is(tk, i, "@end"); i++) {
        if (md_mchk_is(tk, i, "{")) i = md_mchk_match(tk, i);
        if (md_mchk_is(tk, i, "@property") && o->nprops < 32) {
            int ro, cp;
            char *getter;
            struct own_prop *p = &o->props[o->nprops++];
            i = parse_property(c, i, &ro, &cp, &p->type, &p->name, &getter);
            p->readonly = ro;
        }
    }
    return i;
}

static int scan(struct ctx *c, int i, int end)
{
    const struct md_mchk_toks *tk = c->tk;
    int k;
    while (i < end) {
        const struct md_mchk_tok *t = &tk->t[i];
        if (t->kind == MCHK_PP) {
            i++;
        } else if (md_mchk_is(tk, i, "@interface") && !md_mchk_is(tk, i + 2, ";")) {
            i = own_interface(c, i) + 1;
        } else if (md_mchk_is(tk, i, "@implementation")) {
            i += 2;
        } else if (t->kind == MCHK_ID && (k = try_decl(c, i)) >= 0) {
            for (int j = i; j < k; j++) check_name(c, &tk->t[j]);
            i = k + 1;
            while (md_mchk_is(tk, i, "[")) { /* an array's dimension, not a message */
                int close = md_mchk_match(tk, i);
                scan(c, i + 1, close);
                i = close + 1;
            }
        } else if ((t->kind == MCHK_ID && !is_keyword(t->s)) || md_mchk_is(tk, i, "[") || md_mchk_is(tk, i, "(")) {
            char *ty;
            i = postfix(c, i, end, &ty);
        } else {
            i++;
        }
    }
    return end;
}

/* ---- entry ------------------------------------------------------------------------ */
int md_mchk_api(const char *facts, const char *extra, const char *m, const char *decls, FILE *out,
                struct md_mchk_api_stats *stats)
{
    struct ctx c;
    memset(&c, 0, sizeof c);
    c.out = out;
    struct md_mchk_toks mt, dt;
    memset(&mt, 0, sizeof mt);
    memset(&dt, 0, sizeof dt);
    int rc = -1;
    if (load_facts(&c, facts, 0) || load_facts(&c, extra, 1)) goto done;
    if (md_mchk_lex(m, &mt, out) || md_mchk_lex(decls, &dt, out)) goto done;
    c.tk = &mt;
    scan(&c, 0, mt.n);
    c.tk = &dt;
    check_decls(&c);
    rc = c.problems;
done:
    if (stats) *stats = c.st;
    md_mchk_free(&mt);
    md_mchk_free(&dt);
    free(c.fact_text[0]);
    free(c.fact_text[1]);
    free(c.facts);
    free(c.vars);
    while (c.strs) {
        struct strblk *n = c.strs->next;
        free(c.strs);
        c.strs = n;
    }
    return rc;
}
