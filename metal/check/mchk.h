/* mchk.h - static checks of the Metal backend that need no Mac (make test):
 *
 *   md_mchk_api: metal/metal_backend.m and metal/sim/objc/MetalDecls.h
 *     against the facts of Apple's API in metal/api/ (TSV files) (generated from
 *     Apple's metal-cpp by scripts/gen_metal_api_facts.py);
 *   md_mchk_msl: the MSL sources (metal/NAME.metal and their headers) against
 *     the rules the C++ simulation of the shaders cannot see, and their
 *     buffer bindings against metal/metal_plan.c.
 *
 * Both print one line per problem to `out` ("file:line: message") and return
 * the number of problems, or -1 when a file cannot be read (also printed).
 * The lexer below is shared by both; it knows C, Objective-C and MSL well
 * enough for these checks, not more.
 */
#ifndef MD_MCHK_H
#define MD_MCHK_H

#include <stddef.h>
#include <stdio.h>

/* ---- lexer ---------------------------------------------------------------- */
enum md_mchk_tok_kind { MCHK_ID, MCHK_NUM, MCHK_STR, MCHK_CHR, MCHK_PUNCT, MCHK_PP, MCHK_AT, MCHK_EOF };

struct md_mchk_tok {
    enum md_mchk_tok_kind kind;
    const char *s; /* NUL-terminated copy; MCHK_PP: the whole directive, continuations joined */
    int line;
};

/* A file as tokens; comments dropped. Owns every string. */
struct md_mchk_toks {
    struct md_mchk_tok *t;
    int n;
    char *text; /* the file, for what the checks read as lines */
    char *pool;
    const char *path;
};

/* Reads and tokenizes `path`; 0 on success, -1 (with a message on `out`) when
 * the file cannot be read. md_mchk_free releases; both accept a zeroed struct. */
int md_mchk_lex(const char *path, struct md_mchk_toks *tk, FILE *out);
void md_mchk_free(struct md_mchk_toks *tk);
/* 1 when token i is the punctuator / identifier / keyword s. */
int md_mchk_is(const struct md_mchk_toks *tk, int i, const char *s);
/* Index of the bracket closing the one at i ('(' '[' '{' '<'), or tk->n - 1. */
int md_mchk_match(const struct md_mchk_toks *tk, int i);

/* ---- the checks ------------------------------------------------------------ */
struct md_mchk_api_stats {
    int sends, properties, names, decls, extra_used, unchecked_decls;
};
/* facts: metal/api/metal_api_facts.tsv; extra: metal/api/foundation_extra.tsv;
 * m: metal/metal_backend.m; decls: metal/sim/objc/MetalDecls.h. stats may be NULL. */
int md_mchk_api(const char *facts, const char *extra, const char *m, const char *decls, FILE *out,
                struct md_mchk_api_stats *stats);

struct md_mchk_msl_stats {
    int kernels, functions, bindings, tg_sizes;
};
/* shaders: the .metal files and the headers they include (nshaders of them);
 * defs: headers whose #defines size things (md_metal_args.h, metal_grid.h);
 * plan: metal/metal_plan.c; host_m: metal/metal_backend.m (its compile
 * options give the MSL version). */
int md_mchk_msl(const char *const *shaders, int nshaders, const char *const *defs, int ndefs, const char *plan,
                const char *host_m, FILE *out, struct md_mchk_msl_stats *stats);

/* Apple's limit on threadgroup memory per threadgroup (all Apple GPUs). */
#define MD_MCHK_TGMEM_LIMIT 32768
/* Apple's limit on threads per threadgroup. */
#define MD_MCHK_THREADS_LIMIT 1024

#endif
