/* msl_check.c - the MSL rules the C++ simulation of the shaders cannot see
 * (mchk.h). On Linux the .metal files compile as C++ with device/constant/
 * threadgroup defined away, so nothing there notices:
 *   - a pointer or reference parameter without an address space (an error
 *     in MSL for kernel and ordinary functions alike);
 *   - [[buffer(n)]] indices that repeat, leave gaps, or disagree with the
 *     order metal/metal_plan.c binds the buffers in (buffer(0) is the
 *     params struct, then a STEP row's BUFS(args, ...) fill 1, 2, ...,
 *     with the reduction scratch where SCRATCH_AT puts it), or a params
 *     struct other than the PARAMS(...) of the row;
 *   - threadgroup memory over Apple's 32 KiB (the host's tg_mem values, the
 *     *_TGMEM sizes, static threadgroup arrays) and threadgroups over 1024
 *     threads (the *_THREADS sizes);
 *   - recursion (MSL has none);
 *   - double (Apple GPUs have none), bfloat (MSL 3.1, macOS 14; the sources
 *     store bf16 as ushort instead), simdgroup-matrix code outside
 *     #if MD_METAL_SIMDGROUP_MM (MSL 2.3 and Apple7+ only), and unsuffixed
 *     floating literals (float on the GPU, double in the simulation, so the
 *     two would compute differently).
 * The MSL language version: metal_backend.m sets no languageVersion, so the
 * compiler uses the newest the OS has; the rules above hold from MSL 2.3
 * (macOS 11) on. A languageVersion of 3.1 or later in the .m allows bfloat.
 */
#include <ctype.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "mchk.h"

#define MAX_FN 512
#define MAX_NAMES 512

struct fn {
    const struct md_mchk_toks *tk;
    const char *name;
    int lp, rp, body, end; /* token indices: params ( ), body { } */
    int kernel;
    int nbuf;              /* buffer indices 0..nbuf-1 (kernels) */
    char p0type[64];       /* the type of buffer(0) */
    int calls[64], ncalls;
    int mark;
};

struct inst {
    char name[64];
    int prefix; /* the name continues with a macro argument */
    char fn[64];
};

struct def {
    char name[64];
    char val[128];
};

struct mctx {
    FILE *out;
    int problems;
    struct fn fns[MAX_FN];
    int nfn;
    struct inst insts[MAX_NAMES];
    int ninst;
    struct def defs[512];
    int ndefs;
    int bfloat_ok;
    char kargs[1024];
    int kargs_line;
    const char *kargs_path;
    struct md_mchk_msl_stats st;
};

static void problem(struct mctx *c, const char *path, int line, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(c->out, "%s:%d: ", path, line);
    vfprintf(c->out, fmt, ap);
    fputc('\n', c->out);
    va_end(ap);
    c->problems++;
}

/* ---- #define values and integer expressions ------------------------------------ */
static void collect_defines(struct mctx *c, const struct md_mchk_toks *tk)
{
    for (int i = 0; i < tk->n; i++) {
        if (tk->t[i].kind != MCHK_PP) continue;
        char name[64], val[128] = "";
        int used = 0;
        if (sscanf(tk->t[i].s, "# define %63[A-Za-z0-9_]%n", name, &used) != 1) continue;
        const char *rest = tk->t[i].s + used;
        if (*rest == '(') continue; /* function-like */
        snprintf(val, sizeof val, "%s", rest);
        if (!strcmp(name, "MD_KARGS")) {
            snprintf(c->kargs, sizeof c->kargs, "%s", rest);
            c->kargs_line = tk->t[i].line;
            c->kargs_path = tk->path;
        }
        if (c->ndefs < 512) {
            snprintf(c->defs[c->ndefs].name, sizeof c->defs[c->ndefs].name, "%s", name);
            snprintf(c->defs[c->ndefs].val, sizeof c->defs[c->ndefs].val, "%s", val);
            c->ndefs++;
        }
    }
}

struct ev {
    struct mctx *c;
    const char *p;
    int ok, depth;
};
static long long ev_add(struct ev *e);
static void ev_ws(struct ev *e)
{
    while (isspace((unsigned char)*e->p)) e->p++;
}
static long long ev_prim(struct ev *e)
{
    ev_ws(e);
    if (*e->p == '(') {
        e->p++;
        long long v = ev_add(e);
        ev_ws(e);
        if (*e->p == ')') e->p++;
        else e->ok = 0;
        return v;
    }
    if (isdigit((unsigned char)*e->p)) {
        char *end;
        long long v = (long long)strtoull(e->p, &end, 0);
        while (isalpha((unsigned char)*end)) end++; /* u, UL, ... */
        e->p = end;
        return v;
    }
    if (isalpha((unsigned char)*e->p) || *e->p == '_') {
        char name[64];
        int n = 0;
        while ((isalnum((unsigned char)*e->p) || *e->p == '_') && n < 63) name[n++] = *e->p++;
        name[n] = '\0';
        if (!strcmp(name, "sizeof")) {
            ev_ws(e);
            const char *close = strchr(e->p, ')'), *t = e->p + 1;
            if (*e->p != '(' || !close) {
                e->ok = 0;
                return 0;
            }
            while (isspace((unsigned char)*t)) t++;
            long long v = !strncmp(t, "float", 5) || !strncmp(t, "int", 3) || !strncmp(t, "uint", 4) ? 4
                          : !strncmp(t, "half", 4) || !strncmp(t, "ushort", 6) ? 2 : 0;
            if (!v) e->ok = 0;
            e->p = close + 1;
            return v;
        }
        for (int i = 0; i < e->c->ndefs && e->depth < 16; i++)
            if (!strcmp(e->c->defs[i].name, name)) {
                struct ev sub = {e->c, e->c->defs[i].val, 1, e->depth + 1};
                long long v = ev_add(&sub);
                if (!sub.ok) e->ok = 0;
                return v;
            }
    }
    e->ok = 0;
    return 0;
}
static long long ev_mul(struct ev *e)
{
    long long v = ev_prim(e);
    for (;;) {
        ev_ws(e);
        if (*e->p == '*') {
            e->p++;
            v *= ev_prim(e);
        } else if (*e->p == '/') {
            e->p++;
            long long d = ev_prim(e);
            v = d ? v / d : 0;
        } else {
            return v;
        }
    }
}
static long long ev_add(struct ev *e)
{
    long long v = ev_mul(e);
    for (;;) {
        ev_ws(e);
        if (*e->p == '+') {
            e->p++;
            v += ev_mul(e);
        } else if (*e->p == '-') {
            e->p++;
            v -= ev_mul(e);
        } else {
            return v;
        }
    }
}
static int eval(struct mctx *c, const char *s, long long *v)
{
    struct ev e = {c, s, 1, 0};
    *v = ev_add(&e);
    ev_ws(&e);
    return e.ok && (*e.p == '\0' || *e.p == ';');
}

/* ---- parameters ----------------------------------------------------------------- */
static int has_word(const char *s, const char *w)
{
    size_t n = strlen(w);
    for (const char *p = strstr(s, w); p; p = strstr(p + 1, w))
        if ((p == s || !(isalnum((unsigned char)p[-1]) || p[-1] == '_')) && !(isalnum((unsigned char)p[n]) || p[n] == '_'))
            return 1;
    return 0;
}

static const char *const spaces[] = {"device", "constant", "threadgroup", "thread", "threadgroup_imageblock",
                                     "ray_data", "object_data", NULL};

/* One parameter as text: address space, [[buffer(n)]]. */
static void check_param(struct mctx *c, struct fn *f, const char *path, int line, const char *p, int *seen, int nseen)
{
    /* the declaration without its attributes */
    char decl[512];
    const char *att = strstr(p, "[ [");
    if (!att) att = strstr(p, "[[");
    size_t n = att ? (size_t)(att - p) : strlen(p);
    if (n >= sizeof decl) n = sizeof decl - 1;
    memcpy(decl, p, n);
    decl[n] = '\0';
    if (strchr(decl, '*') || strchr(decl, '&')) {
        int ok = 0;
        for (int k = 0; spaces[k]; k++) ok |= has_word(decl, spaces[k]);
        if (!ok) problem(c, path, line, "%s: parameter '%s' is a pointer or reference without an address space "
                         "(device, constant, threadgroup or thread)", f->name, decl);
    }
    const char *b = att ? strstr(att, "buffer (") : NULL;
    if (b && f->kernel) {
        int idx = atoi(b + 8);
        if (idx < 0 || idx >= nseen) {
            problem(c, path, line, "%s: buffer index %d out of range", f->name, idx);
            return;
        }
        if (seen[idx]) problem(c, path, line, "%s: [[buffer(%d)]] is used twice", f->name, idx);
        seen[idx]++;
        if (idx + 1 > f->nbuf) f->nbuf = idx + 1;
        if (idx == 0) {
            /* constant md_mtl_x_params &p */
            char t[64] = "";
            const char *amp = strchr(decl, '&');
            if (!has_word(decl, "constant") || !amp) {
                problem(c, path, line, "%s: buffer(0) must be the params struct as 'constant T &'", f->name);
            } else {
                const char *e = amp;
                while (e > decl && isspace((unsigned char)e[-1])) e--;
                const char *s = e;
                while (s > decl && (isalnum((unsigned char)s[-1]) || s[-1] == '_')) s--;
                snprintf(t, sizeof t, "%.*s", (int)(e - s), s);
            }
            snprintf(f->p0type, sizeof f->p0type, "%s", t);
        }
    }
}

/* Splits text at top-level commas and checks each parameter. */
static void check_param_text(struct mctx *c, struct fn *f, const char *path, int line, const char *text, int *seen,
                             int nseen)
{
    char one[512];
    int depth = 0;
    size_t n = 0;
    for (const char *p = text;; p++) {
        if (*p == '(' || *p == '[' || *p == '<') depth++;
        if (*p == ')' || *p == ']' || *p == '>') depth--;
        if ((*p == ',' && depth == 0) || !*p) {
            one[n] = '\0';
            char *s = one;
            while (isspace((unsigned char)*s)) s++;
            if (*s && strcmp(s, "void")) {
                if (!strcmp(s, "MD_KARGS")) check_param_text(c, f, c->kargs_path, c->kargs_line, c->kargs, seen, nseen);
                else check_param(c, f, path, line, s, seen, nseen);
            }
            n = 0;
            if (!*p) break;
            continue;
        }
        if (n < sizeof one - 1) one[n++] = *p;
    }
}

static void params_of(struct mctx *c, struct fn *f)
{
    const struct md_mchk_toks *tk = f->tk;
    char text[2048] = "";
    for (int i = f->lp + 1; i < f->rp; i++) {
        strncat(text, tk->t[i].s, sizeof text - strlen(text) - 2);
        strcat(text, " ");
    }
    int seen[32] = {0};
    f->nbuf = 0;
    check_param_text(c, f, tk->path, tk->t[f->lp].line, text, seen, 32);
    if (f->kernel)
        for (int i = 0; i < f->nbuf; i++)
            if (!seen[i]) problem(c, tk->path, tk->t[f->lp].line, "%s: [[buffer(%d)]] is missing (indices must be 0, 1, 2, ...)", f->name, i);
}

/* ---- functions and the call graph --------------------------------------------------- */
static int is_kw(const char *s)
{
    static const char *const k[] = {"if", "for", "while", "switch", "return", "sizeof", "static_assert",
                                    "decltype", "defined", "alignas", NULL};
    for (int i = 0; k[i]; i++)
        if (!strcmp(s, k[i])) return 1;
    return 0;
}

static void find_functions(struct mctx *c, const struct md_mchk_toks *tk, int a, int b)
{
    for (int i = a; i < b; i++) {
        if (md_mchk_is(tk, i, "struct") && tk->t[i + 1].kind == MCHK_ID) {
            int open = i + 2;
            while (open < b && !md_mchk_is(tk, open, "{") && !md_mchk_is(tk, open, ";")) open++;
            if (md_mchk_is(tk, open, "{")) {
                int close = md_mchk_match(tk, open);
                find_functions(c, tk, open + 1, close);
                i = close;
            }
            continue;
        }
        if (md_mchk_is(tk, i, "{")) { /* namespace-less braces at top level: initializers etc. */
            i = md_mchk_match(tk, i);
            continue;
        }
        if (tk->t[i].kind != MCHK_ID || !md_mchk_is(tk, i + 1, "(") || is_kw(tk->t[i].s)) continue;
        int rp = md_mchk_match(tk, i + 1), body = rp + 1;
        if (md_mchk_is(tk, body, "const")) body++;
        if (!md_mchk_is(tk, body, "{")) continue;
        if (c->nfn == MAX_FN) return;
        struct fn *f = &c->fns[c->nfn++];
        memset(f, 0, sizeof *f);
        f->tk = tk;
        f->name = tk->t[i].s;
        f->lp = i + 1;
        f->rp = rp;
        f->body = body;
        f->end = md_mchk_match(tk, body);
        for (int k = i - 1; k >= 0 && k >= i - 12; k--) {
            if (md_mchk_is(tk, k, ";") || md_mchk_is(tk, k, "}")) break;
            if (md_mchk_is(tk, k, "kernel") && md_mchk_is(tk, k - 1, "[")) f->kernel = 1;
        }
        i = f->end;
    }
}

static int fn_index(struct mctx *c, const char *name, int from)
{
    for (int i = from; i < c->nfn; i++)
        if (!strcmp(c->fns[i].name, name)) return i;
    return -1;
}

static void find_calls(struct mctx *c, struct fn *f)
{
    const struct md_mchk_toks *tk = f->tk;
    for (int i = f->body + 1; i < f->end; i++) {
        if (tk->t[i].kind != MCHK_ID || is_kw(tk->t[i].s)) continue;
        int next = i + 1;
        if (md_mchk_is(tk, next, "<")) { /* a template call f<T>(...) */
            int close = next + 1;
            while (close < f->end && close < next + 8 && !md_mchk_is(tk, close, ">") && !md_mchk_is(tk, close, ";")) close++;
            if (md_mchk_is(tk, close, ">")) next = close + 1;
        }
        if (!md_mchk_is(tk, next, "(")) continue;
        /* every function of that name (member functions are matched by name) */
        for (int k = fn_index(c, tk->t[i].s, 0); k >= 0 && f->ncalls < 64; k = fn_index(c, tk->t[i].s, k + 1)) {
            int dup = 0;
            for (int j = 0; j < f->ncalls; j++) dup |= f->calls[j] == k;
            if (!dup) f->calls[f->ncalls++] = k;
        }
    }
}

static int dfs(struct mctx *c, int i, int *stack, int depth)
{
    struct fn *f = &c->fns[i];
    if (f->mark == 2) return 0;
    if (f->mark == 1) {
        char chain[512] = "";
        int from = depth - 1;
        while (from > 0 && stack[from] != i) from--;
        for (int k = from; k < depth; k++) {
            strncat(chain, c->fns[stack[k]].name, sizeof chain - strlen(chain) - 5);
            strcat(chain, " -> ");
        }
        strncat(chain, f->name, sizeof chain - strlen(chain) - 1);
        problem(c, f->tk->path, f->tk->t[f->lp].line, "recursion (MSL has none): %s", chain);
        return 1;
    }
    f->mark = 1;
    stack[depth] = i;
    int found = 0;
    for (int k = 0; k < f->ncalls && depth < 62 && !found; k++) found = dfs(c, f->calls[k], stack, depth + 1);
    f->mark = 2;
    return found;
}

struct call_args {
    int a[24], e[24], n; /* argument token ranges */
};
static void split_args(const struct md_mchk_toks *tk, int lp, struct call_args *ca);

/* ---- tokens: double, bfloat, simdgroup outside its guard, literals, static threadgroup ---- */
static void check_tokens(struct mctx *c, const struct md_mchk_toks *tk)
{
    int stack[32], depth = 0, sg = 0;
    long long tg_static = 0;
    for (int i = 0; i < tk->n; i++) {
        const struct md_mchk_tok *t = &tk->t[i];
        if (t->kind == MCHK_PP) {
            char w[16] = "";
            sscanf(t->s, "# %15[a-z]", w);
            if (!strncmp(w, "if", 2) && depth < 32) {
                stack[depth++] = strstr(t->s, "MD_METAL_SIMDGROUP_MM") != NULL && strncmp(w, "ifndef", 6);
            } else if (!strcmp(w, "else") && depth) {
                stack[depth - 1] = 0;
            } else if (!strcmp(w, "endif") && depth) {
                depth--;
            }
            sg = 0;
            for (int k = 0; k < depth; k++) sg |= stack[k];
            continue;
        }
        if (t->kind == MCHK_ID) {
            if (!strcmp(t->s, "double"))
                problem(c, tk->path, t->line, "double: Apple GPUs have no double precision");
            if (!strncmp(t->s, "bfloat", 6) && !c->bfloat_ok)
                problem(c, tk->path, t->line, "%s needs MSL 3.1 (macOS 14) and metal_backend.m sets no languageVersion "
                        ">= 3.1 (store bf16 as ushort, as md_metal_common.h does)", t->s);
            if ((!strncmp(t->s, "simdgroup_", 10) || strstr(t->s, "_simdgroup_matrix")) && !sg)
                problem(c, tk->path, t->line, "%s outside #if MD_METAL_SIMDGROUP_MM (simdgroup matrices need MSL 2.3 "
                        "and an Apple7+ GPU)", t->s);
            if (!strcmp(t->s, "threadgroup") && tk->t[i + 2].kind == MCHK_ID && md_mchk_is(tk, i + 3, "[")) {
                long long size = !strcmp(tk->t[i + 1].s, "half") || !strcmp(tk->t[i + 1].s, "ushort") ? 2 : 4, n;
                int close = md_mchk_match(tk, i + 3);
                char expr[256] = "";
                for (int k = i + 4; k < close; k++) {
                    strncat(expr, tk->t[k].s, sizeof expr - strlen(expr) - 2);
                    strcat(expr, " ");
                }
                if (eval(c, expr, &n)) tg_static += n * size;
                else problem(c, tk->path, t->line, "cannot size the threadgroup array '%s'", tk->t[i + 2].s);
                c->st.tg_sizes++;
            }
        }
        if (t->kind == MCHK_NUM && !(t->s[0] == '0' && (t->s[1] == 'x' || t->s[1] == 'X'))) {
            size_t l = strlen(t->s);
            int fp = strchr(t->s, '.') || strchr(t->s, 'e') || strchr(t->s, 'E');
            char last = (char)tolower((unsigned char)t->s[l - 1]);
            if (fp && last != 'f' && last != 'h')
                problem(c, tk->path, t->line, "floating literal %s without an f suffix: float on the GPU, double in "
                        "the Linux simulation", t->s);
        }
    }
    if (tg_static > MD_MCHK_TGMEM_LIMIT)
        problem(c, tk->path, 1, "static threadgroup arrays take %lld bytes, over Apple's %d", tg_static, MD_MCHK_TGMEM_LIMIT);
}

/* MD_INSTANTIATE("name" [sfx], fn<...>) and MD_KERNEL_NAME("name", fn), also inside macros. */
static void collect_instances(struct mctx *c, const struct md_mchk_toks *tk)
{
    static const char *const macros[] = {"MD_INSTANTIATE(", "MD_KERNEL_NAME(", NULL};
    for (int m = 0; macros[m]; m++)
        for (const char *p = strstr(tk->text, macros[m]); p; p = strstr(p + 1, macros[m])) {
            const char *q = p + strlen(macros[m]);
            while (isspace((unsigned char)*q)) q++;
            if (*q != '"' || c->ninst == MAX_NAMES) continue;
            struct inst *in = &c->insts[c->ninst];
            const char *e = strchr(q + 1, '"');
            if (!e) continue;
            snprintf(in->name, sizeof in->name, "%.*s", (int)(e - q - 1), q + 1);
            e++;
            while (isspace((unsigned char)*e)) e++;
            in->prefix = *e != ',';
            const char *comma = strchr(e, ',');
            if (!comma) continue;
            comma++;
            while (isspace((unsigned char)*comma)) comma++;
            int n = 0;
            while ((isalnum((unsigned char)comma[n]) || comma[n] == '_') && n < 63) n++;
            snprintf(in->fn, sizeof in->fn, "%.*s", n, comma);
            c->ninst++;
        }
}

/* Wrappers: #define W(a, b, name) MD_INSTANTIATE(name, fn<...>) and their
 * uses W(x, y, "literal"). */
static void collect_wrapped(struct mctx *c, const struct md_mchk_toks *tk)
{
    for (int i = 0; i < tk->n; i++) {
        char w[64], params[256], arg[64], fn[64];
        if (tk->t[i].kind != MCHK_PP ||
            sscanf(tk->t[i].s, "# define %63[A-Za-z0-9_](%255[^)]) MD_INSTANTIATE(%63[A-Za-z0-9_], %63[A-Za-z0-9_]", w,
                   params, arg, fn) != 4)
            continue;
        int pos = -1, k = 0;
        for (char *p = strtok(params, ","); p; p = strtok(NULL, ","), k++) {
            while (isspace((unsigned char)*p)) p++;
            if (!strncmp(p, arg, strlen(arg)) && !isalnum((unsigned char)p[strlen(arg)])) pos = k;
        }
        if (pos < 0) continue;
        for (int j = 0; j < tk->n; j++) {
            if (!md_mchk_is(tk, j, w) || !md_mchk_is(tk, j + 1, "(") || c->ninst == MAX_NAMES) continue;
            struct call_args ca;
            split_args(tk, j + 1, &ca);
            if (pos >= ca.n || tk->t[ca.a[pos]].kind != MCHK_STR) continue;
            struct inst *in = &c->insts[c->ninst++];
            snprintf(in->name, sizeof in->name, "%.*s", (int)strlen(tk->t[ca.a[pos]].s) - 2, tk->t[ca.a[pos]].s + 1);
            in->prefix = 0;
            snprintf(in->fn, sizeof in->fn, "%s", fn);
        }
    }
}

/* ---- the host's dispatches (metal_plan.c) ----------------------------------------------- */
static void split_args(const struct md_mchk_toks *tk, int lp, struct call_args *ca)
{
    int rp = md_mchk_match(tk, lp);
    ca->n = 0;
    int s = lp + 1;
    for (int i = lp + 1; i <= rp && ca->n < 24; i++) {
        if (md_mchk_is(tk, i, "(") || md_mchk_is(tk, i, "{") || md_mchk_is(tk, i, "[")) {
            i = md_mchk_match(tk, i);
            continue;
        }
        if (md_mchk_is(tk, i, ",") || i == rp) {
            if (i > s) {
                ca->a[ca->n] = s;
                ca->e[ca->n++] = i;
            }
            s = i + 1;
        }
    }
}

static void check_dispatch(struct mctx *c, const struct md_mchk_toks *tk, int line, const char *name, int suffixed,
                           int nbinds, const char *ptype)
{
    char want[80];
    snprintf(want, sizeof want, "%s%s", name, suffixed ? "_" : "");
    int matched = 0, done[MAX_FN] = {0};
    c->st.bindings++;
    for (int i = 0; i < c->ninst; i++) {
        const struct inst *in = &c->insts[i];
        int ok = suffixed ? !strncmp(in->name, want, strlen(want)) : !in->prefix && !strcmp(in->name, want);
        if (!ok) continue;
        for (int k = fn_index(c, in->fn, 0); k >= 0; k = fn_index(c, in->fn, k + 1)) {
            struct fn *f = &c->fns[k];
            if (!f->kernel || done[k]) continue;
            matched = done[k] = 1;
            if (f->nbuf != nbinds + 1)
                problem(c, tk->path, line, "%s%s binds buffers 1..%d but kernel %s (%s:%d) declares buffers 1..%d",
                        name, suffixed ? "_<type>" : "", nbinds, f->name, f->tk->path, f->tk->t[f->lp].line, f->nbuf - 1);
            if (*ptype && strcmp(ptype, f->p0type))
                problem(c, tk->path, line, "%s packs struct %s into buffer(0) but kernel %s (%s:%d) reads %s", name, ptype,
                        f->name, f->tk->path, f->tk->t[f->lp].line, f->p0type);
        }
    }
    if (!matched) problem(c, tk->path, line, "no kernel of the .metal sources is named %s%s", name, suffixed ? "_<type>" : "");
}

static void check_plan(struct mctx *c, const struct md_mchk_toks *tk)
{
    for (int i = 0; i < tk->n; i++) {
        /* tg_mem sizes */
        if (md_mchk_is(tk, i, "tg_mem") && md_mchk_is(tk, i + 1, "=")) {
            char expr[256] = "";
            for (int k = i + 2; k < tk->n && !md_mchk_is(tk, k, ";"); k++) {
                strncat(expr, tk->t[k].s, sizeof expr - strlen(expr) - 2);
                strcat(expr, " ");
            }
            long long v;
            c->st.tg_sizes++;
            if (!eval(c, expr, &v)) problem(c, tk->path, tk->t[i].line, "cannot evaluate tg_mem = %s", expr);
            else if (v > MD_MCHK_TGMEM_LIMIT)
                problem(c, tk->path, tk->t[i].line, "tg_mem = %s is %lld bytes, over Apple's %d", expr, v, MD_MCHK_TGMEM_LIMIT);
        }
        /* STEP(kernel, naming, grid, when, scratch, BUFS(args, field, ...) or NO_BUFS) */
        if (!md_mchk_is(tk, i, "STEP") || !md_mchk_is(tk, i + 1, "(") || md_mchk_is(tk, i - 1, "define")) continue;
        struct call_args ca;
        split_args(tk, i + 1, &ca);
        int line = tk->t[i].line;
        if (ca.n != 6 || tk->t[ca.a[0]].kind != MCHK_STR || ca.e[0] != ca.a[0] + 1) {
            problem(c, tk->path, line, "cannot tell which kernel this STEP dispatches");
            continue;
        }
        int nb = 0;
        if (md_mchk_is(tk, ca.a[5], "BUFS") && md_mchk_is(tk, ca.a[5] + 1, "(")) {
            struct call_args ba;
            split_args(tk, ca.a[5] + 1, &ba);
            nb = ba.n - 1; /* less the args struct */
        } else if (!md_mchk_is(tk, ca.a[5], "NO_BUFS"))
            problem(c, tk->path, line, "cannot tell the buffers this STEP binds");
        if (md_mchk_is(tk, ca.a[4], "SCRATCH_AT")) nb++;
        /* the params struct: PARAMS(md_mtl_x_params) of the enclosing OP row */
        char ptype[64] = "";
        for (int k = i - 1; k > 0 && !*ptype; k--)
            if (md_mchk_is(tk, k, "PARAMS") && md_mchk_is(tk, k + 1, "(") && !md_mchk_is(tk, k - 1, "define"))
                snprintf(ptype, sizeof ptype, "%s", tk->t[k + 2].s);
        char name[64];
        snprintf(name, sizeof name, "%.*s", (int)strlen(tk->t[ca.a[0]].s) - 2, tk->t[ca.a[0]].s + 1);
        check_dispatch(c, tk, line, name, !md_mchk_is(tk, ca.a[1], "PLAIN"), nb, ptype);
    }
}

/* ---- entry --------------------------------------------------------------------------------- */
int md_mchk_msl(const char *const *shaders, int nshaders, const char *const *defs, int ndefs, const char *plan,
                const char *host_m, FILE *out, struct md_mchk_msl_stats *stats)
{
    struct mctx *c = calloc(1, sizeof *c);
    struct md_mchk_toks *tks = calloc((size_t)nshaders + (size_t)ndefs + 2, sizeof *tks);
    int rc = -1, ntk = 0;
    if (!c || !tks) goto done;
    c->out = out;
    struct md_mchk_toks *ptk = &tks[ntk++], *mtk = &tks[ntk++];
    if (md_mchk_lex(plan, ptk, out) || md_mchk_lex(host_m, mtk, out)) goto done;
    for (int i = 0; i < ndefs; i++) {
        if (md_mchk_lex(defs[i], &tks[ntk], out)) goto done;
        collect_defines(c, &tks[ntk++]);
    }
    int first_shader = ntk;
    for (int i = 0; i < nshaders; i++) {
        if (md_mchk_lex(shaders[i], &tks[ntk], out)) goto done;
        collect_defines(c, &tks[ntk++]);
    }
    /* MSL version: languageVersion = MTLLanguageVersionX_Y in the host */
    const char *lv = strstr(mtk->text, "MTLLanguageVersion");
    c->bfloat_ok = lv && (atoi(lv + 18) > 3 || (atoi(lv + 18) == 3 && strchr(lv, '_') && atoi(strchr(lv, '_') + 1) >= 1));
    if (!c->kargs[0]) fprintf(out, "%s: no #define MD_KARGS found in the shader sources\n", shaders[0]), c->problems++;
    for (int i = first_shader; i < ntk; i++) {
        find_functions(c, &tks[i], 0, tks[i].n);
        check_tokens(c, &tks[i]);
        collect_instances(c, &tks[i]);
        collect_wrapped(c, &tks[i]);
    }
    for (int i = 0; i < c->nfn; i++) {
        params_of(c, &c->fns[i]);
        find_calls(c, &c->fns[i]);
        c->st.functions++;
        c->st.kernels += c->fns[i].kernel;
    }
    int stack[64];
    for (int i = 0; i < c->nfn; i++) dfs(c, i, stack, 0);
    /* the MD_KARGS threadgroup(0) the host always sets */
    if (c->kargs[0] && !strstr(c->kargs, "threadgroup (0)") && !strstr(c->kargs, "threadgroup(0)"))
        problem(c, c->kargs_path, c->kargs_line, "MD_KARGS must declare [[threadgroup(0)]] (the host sets its length)");
    for (int i = 0; i < c->ndefs; i++) {
        size_t l = strlen(c->defs[i].name);
        long long v;
        int tg = l > 6 && !strcmp(c->defs[i].name + l - 6, "_TGMEM"), th = l > 8 && !strcmp(c->defs[i].name + l - 8, "_THREADS");
        if (!(tg || th)) continue;
        c->st.tg_sizes++;
        if (!eval(c, c->defs[i].val, &v)) continue;
        if (tg && v > MD_MCHK_TGMEM_LIMIT)
            problem(c, "(defines)", 0, "%s is %lld bytes of threadgroup memory, over Apple's %d", c->defs[i].name, v,
                    MD_MCHK_TGMEM_LIMIT);
        if (th && v > MD_MCHK_THREADS_LIMIT)
            problem(c, "(defines)", 0, "%s is %lld threads per threadgroup, over Apple's %d", c->defs[i].name, v,
                    MD_MCHK_THREADS_LIMIT);
    }
    long long tx, ty;
    if (eval(c, "MD_MTL_MM_TX * MD_MTL_MM_TY", &tx) && tx > MD_MCHK_THREADS_LIMIT)
        problem(c, "(defines)", 0, "MD_MTL_MM_TX * MD_MTL_MM_TY is %lld threads, over Apple's %d", tx, MD_MCHK_THREADS_LIMIT);
    (void)ty;
    check_plan(c, ptk);
    rc = c->problems;
done:
    if (c && stats) *stats = c->st;
    for (int i = 0; tks && i < ntk; i++) md_mchk_free(&tks[i]);
    free(tks);
    free(c);
    return rc;
}
