/* test_metal_check.c - the static Metal checks of metal/check (mchk.h): the
 * real sources pass, and copies with one deliberate mistake each fail with a
 * line naming it (a wrong selector, property, constant, declaration; a wrong
 * buffer index, a missing address space, double, recursion, too much
 * threadgroup memory, a binding the kernel does not have). */
#include <criterion/criterion.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"
#include "../metal/check/mchk.h"

#define FACTS "metal/api/metal_api_facts.tsv"
#define EXTRA "metal/api/foundation_extra.tsv"
#define BACKEND_M "metal/metal_backend.m"
#define DECLS "metal/sim/objc/MetalDecls.h"
#define PLAN "metal/metal_plan.c"

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    cr_assert(f, "cannot open %s (tests run from the repository root)", path);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = malloc((size_t)n + 1);
    cr_assert(b && fread(b, 1, (size_t)n, f) == (size_t)n);
    b[n] = '\0';
    fclose(f);
    return b;
}

/* A copy of `path` in dir with the first `from` replaced by `to` (which must
 * be there, so a test cannot pass by not changing anything). Caller frees. */
static char *mutate(const char *dir, const char *path, const char *from, const char *to)
{
    char *text = slurp(path);
    char *at = strstr(text, from);
    cr_assert(at, "'%s' not found in %s: update this test", from, path);
    size_t n = strlen(text) - strlen(from) + strlen(to);
    char *out = malloc(n + 1);
    size_t pre = (size_t)(at - text);
    memcpy(out, text, pre);
    strcpy(out + pre, to);
    strcat(out, at + strlen(from));
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    char *p = th_write(dir, base, out);
    free(out);
    free(text);
    return p;
}

/* Runs a check with its report captured; returns the problem count, *report
 * the text (caller frees). */
static FILE *report_file(void)
{
    FILE *f = tmpfile();
    cr_assert(f);
    return f;
}
static char *report_text(FILE *f)
{
    long n = ftell(f);
    rewind(f);
    char *b = calloc((size_t)n + 1, 1);
    cr_assert(fread(b, 1, (size_t)n, f) == (size_t)n);
    fclose(f);
    return b;
}

static int api(const char *m, const char *decls, char **report)
{
    FILE *f = report_file();
    struct md_mchk_api_stats st;
    int n = md_mchk_api(FACTS, EXTRA, m, decls, f, &st);
    *report = report_text(f);
    return n;
}

/* The MSL check with shader `replace` (a metal/ file name, or NULL) swapped for `with`. */
static int msl(const char *plan, const char *replace, const char *with, char **report, struct md_mchk_msl_stats *st)
{
    glob_t g;
    cr_assert_eq(glob("metal/*.metal", 0, NULL, &g), 0);
    const char *files[64];
    int n = 0;
    files[n++] = "metal/md_metal_args.h";
    files[n++] = replace && !strcmp(replace, "metal/md_metal_common.h") ? with : "metal/md_metal_common.h";
    files[n++] = "src/backend/act_math.h";
    for (size_t i = 0; i < g.gl_pathc && n < 64; i++)
        files[n++] = replace && !strcmp(replace, g.gl_pathv[i]) ? with : g.gl_pathv[i];
    const char *defs[] = {"metal/md_metal_args.h", "metal/metal_grid.h"};
    FILE *f = report_file();
    int r = md_mchk_msl(files, n, defs, 2, plan, BACKEND_M, f, st);
    *report = report_text(f);
    globfree(&g);
    return r;
}

/* ---- the API check -------------------------------------------------------------- */

Test(metal_check, api_real_sources_agree)
{
    char *rep;
    struct md_mchk_api_stats st;
    FILE *f = report_file();
    int n = md_mchk_api(FACTS, EXTRA, BACKEND_M, DECLS, f, &st);
    rep = report_text(f);
    cr_assert_eq(n, 0, "metal_backend.m / MetalDecls.h disagree with Apple's API:\n%s", rep);
    /* the check saw the code, not an empty file */
    cr_assert_gt(st.sends, 40);
    cr_assert_gt(st.properties, 40);
    cr_assert_gt(st.decls, 80);
    free(rep);
}

/* One deliberate mistake: the first `from` in `file` replaced by `to`; the
 * check must find problems and report every `expect` line. */
struct mistake {
    const char *file, *from, *to;
    const char *expect[2];
};

/* Runs the check `mk->file` belongs to with the mutated copy in its place:
 * the API check for metal_backend.m and MetalDecls.h, else the MSL check (a
 * shader, or the host plan PLAN). */
static void expect_mistakes(const struct mistake *ms, size_t n)
{
    char *dir = th_tmpdir();
    for (size_t i = 0; i < n; i++) {
        const struct mistake *mk = &ms[i];
        struct md_mchk_msl_stats st;
        char *rep, *copy = mutate(dir, mk->file, mk->from, mk->to);
        int problems;
        if (!strcmp(mk->file, BACKEND_M))
            problems = api(copy, DECLS, &rep);
        else if (!strcmp(mk->file, DECLS))
            problems = api(BACKEND_M, copy, &rep);
        else if (!strcmp(mk->file, PLAN))
            problems = msl(copy, NULL, NULL, &rep, &st);
        else
            problems = msl(PLAN, mk->file, copy, &rep, &st);
        cr_assert_gt(problems, 0, "%s: '%s' -> '%s' went unnoticed", mk->file, mk->from, mk->to);
        for (int e = 0; e < 2 && mk->expect[e]; e++) cr_assert(strstr(rep, mk->expect[e]), "%s", rep);
        free(rep);
        free(copy);
    }
    th_tmpdir_free(dir);
}

Test(metal_check, api_wrong_selector_fails)
{
    static const struct mistake ms[] = {
        {BACKEND_M, "newBufferWithLength:bytes options:", "newBufferWithSize:bytes options:",
         {"-[MTLDevice newBufferWithSize:options:] is not in Apple's API"}},
        /* a selector that exists, sent to the wrong class */
        {BACKEND_M, "[cb commit];", "[cb endEncoding];", {"-[MTLCommandBuffer endEncoding]"}},
    };
    expect_mistakes(ms, sizeof ms / sizeof *ms);
}

Test(metal_check, api_wrong_property_and_constant_fail)
{
    static const struct mistake ms[] = {
        {BACKEND_M, "d.hasUnifiedMemory", "d.unifiedMemory", {"property MTLDevice.unifiedMemory"}},
        {BACKEND_M, "MTLGPUFamilyMetal3", "MTLGPUFamilyMetal4", {"MTLGPUFamilyMetal4 is not a name of Apple's API"}},
        /* a readonly property assigned */
        {BACKEND_M, "opts.fastMathEnabled = NO;", "opts.fastMathEnabled = NO; s.device.name = nil;",
         {"MTLDevice.name is readonly"}},
    };
    expect_mistakes(ms, sizeof ms / sizeof *ms);
}

Test(metal_check, api_wrong_declarations_fail)
{
    static const struct mistake ms[] = {
        {DECLS, "offset:(NSUInteger)offset atIndex", "offset:(NSInteger)offset atIndex",
         {"setBuffer:offset:atIndex:] takes (MTLBuffer*,NSInteger,NSUInteger) here"}},
        {DECLS, "MTLGPUFamilyApple9 = 1009", "MTLGPUFamilyApple9 = 1010", {"MTLGPUFamilyApple9 is 1010 here but 1009"}},
        {DECLS, "- (void)commit;", "- (void)commitAndWait;",
         {"-[MTLCommandBuffer commitAndWait] is declared here but is not in Apple's API"}},
    };
    expect_mistakes(ms, sizeof ms / sizeof *ms);
}

/* ---- the MSL check ---------------------------------------------------------------- */

Test(metal_check, msl_real_sources_pass)
{
    char *rep;
    struct md_mchk_msl_stats st;
    int n = msl(PLAN, NULL, NULL, &rep, &st);
    cr_assert_eq(n, 0, "MSL check:\n%s", rep);
    cr_assert_gt(st.kernels, 20);
    cr_assert_gt(st.bindings, 20);
    cr_assert_gt(st.tg_sizes, 2);
    free(rep);
}

Test(metal_check, msl_wrong_buffer_index_fails)
{
    static const struct mistake ms[] = {
        {"metal/eltwise.metal", "device const float *scale [[buffer(4)]]", "device const float *scale [[buffer(5)]]",
         {"md_mtl_ew: [[buffer(4)]] is missing", "md_ew_<type> binds buffers 1..4 but kernel md_mtl_ew"}},
        {"metal/gemm.metal", "*c [[buffer(3)]]", "*c [[buffer(2)]]", {"md_mtl_gemm: [[buffer(2)]] is used twice"}},
    };
    expect_mistakes(ms, sizeof ms / sizeof *ms);
}

Test(metal_check, msl_host_binding_mismatch_fails)
{
    static const struct mistake ms[] = {
        {PLAN, "BUFS(md_dropout_args, x, y, mask)", "BUFS(md_dropout_args, x, y)",
         {"md_dropout_fwd_<type> binds buffers 1..2 but kernel md_mtl_dropout_fwd"}},
        /* the reduction scratch counts as a buffer */
        {PLAN, "SCRATCH_AT(2)", "NO_SCRATCH", {"md_reduce_part_<type> binds buffers 1..2 but kernel"}},
        {PLAN, "PARAMS(md_mtl_softmax_params)", "PARAMS(md_mtl_ln_params)",
         {"md_softmax_fwd packs struct md_mtl_ln_params into buffer(0) but kernel"}},
        {PLAN, "d->tg_mem = MD_MTL_MM_TGMEM;", "d->tg_mem = MD_MTL_MM_TGMEM * 4;", {"is 65536 bytes, over Apple's 32768"}},
    };
    expect_mistakes(ms, sizeof ms / sizeof *ms);
}

Test(metal_check, msl_language_rules_fail)
{
    static const struct mistake ms[] = {
        {"metal/loss.metal", "device const int *labels", "const int *labels",
         {"is a pointer or reference without an address space"}},
        {"metal/loss.metal", "float loss = 0.0f", "double loss = 0.0",
         {"double: Apple GPUs have no double precision", "floating literal 0.0 without an f suffix"}},
        {"metal/md_metal_common.h", "    float z = fabs(x);",
         "    float z = fabs(x);\n    if (z > 1e30f) return md_mtl_erfc(x - 1.0f);",
         {"recursion (MSL has none): md_mtl_erfc -> md_mtl_erfc"}},
        {"metal/loss.metal", "float loss = 0.0f", "bfloat loss = 0.0f", {"bfloat needs MSL 3.1"}},
    };
    expect_mistakes(ms, sizeof ms / sizeof *ms);
}
