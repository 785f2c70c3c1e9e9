/* blas_core.c - OpenBLAS's kernel set, chosen for the CPU (blas_core.h). */
#define _GNU_SOURCE
#include "core/blas_core.h"

#include <cblas.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "core/platform.h"

/* set beside OPENBLAS_CORETYPE when mpsdiag chose it: what OpenBLAS had picked */
#define PICK_VAR "MPSDIAG_OPENBLAS_PICKED"

static int is_one_of(const char *core, const char *const *names)
{
    for (; *names; names++)
        if (strcasecmp(core, *names) == 0) return 1;
    return 0;
}

const char *md_blas_core_wanted(const char *core, int avx512, int avx2_fma, int dynamic)
{
    static const char *const avx512_sets[] = {"SkylakeX", "Cooperlake", "SapphireRapids", NULL};
    /* AVX2 sets of their own (Zen's and Excavator's are tuned for AMD) */
    static const char *const avx2_sets[] = {"Haswell", "Zen", "Excavator", "SkylakeX", "Cooperlake",
                                            "SapphireRapids", NULL};
    if (!dynamic || !core || !*core) return NULL;
    if (avx512) return is_one_of(core, avx512_sets) ? NULL : "SkylakeX";
    if (avx2_fma) return is_one_of(core, avx2_sets) ? NULL : "Haswell";
    return NULL;
}

const char *md_blas_core_better(const char *core)
{
    const char *config = openblas_get_config();
    int dynamic = config && strstr(config, "DYNAMIC_ARCH") != NULL;
    int avx512 = md_cpu_has("avx512f") && md_cpu_has("avx512bw") && md_cpu_has("avx512dq") &&
                 md_cpu_has("avx512vl");
    int avx2_fma = md_cpu_has("avx2") && md_cpu_has("fma");
    return md_blas_core_wanted(core, avx512, avx2_fma, dynamic);
}

void md_blas_core_choose(char **argv)
{
#ifdef __linux__
    const char *forced = getenv("OPENBLAS_CORETYPE");
    if ((forced && *forced) || getenv(PICK_VAR)) return;
    const char *core = openblas_get_corename();
    const char *want = md_blas_core_better(core);
    if (!want) return;
    if (setenv(PICK_VAR, core, 1) != 0 || setenv("OPENBLAS_CORETYPE", want, 1) != 0) return;
    execv("/proc/self/exe", argv);
    /* not started again: the run goes on as OpenBLAS chose, and says so */
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv(PICK_VAR);
#else
    (void)argv;
#endif
}

const char *md_blas_core_chosen_by(void)
{
    const char *forced = getenv("OPENBLAS_CORETYPE");
    if (!forced || !*forced) return "OpenBLAS";
    return getenv(PICK_VAR) ? "mpsdiag" : "environment";
}

const char *md_blas_core_openblas_pick(void)
{
    return strcmp(md_blas_core_chosen_by(), "mpsdiag") == 0 ? getenv(PICK_VAR) : NULL;
}
