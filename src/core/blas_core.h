/* blas_core.h - OpenBLAS's kernel set, chosen for the CPU (docs/performance-cpu.md, "OpenBLAS's kernel set").
 *
 * A DYNAMIC_ARCH OpenBLAS (Debian's, Homebrew's) picks its kernels from the
 * CPU's vendor, family and model once, when it loads. On a CPU newer than its
 * table (Debian 12's 0.3.21 on recent Xeons, or on AMD Zen 4) it falls back to
 * an older set: Prescott (SSE3) or Haswell (AVX2) where AVX-512 is there, and
 * GEMM runs at a third to a half of the attainable rate. OpenBLAS reads
 * OPENBLAS_CORETYPE only at that moment, so choosing for it means running the
 * program again with the variable set: md_blas_core_choose does that, before
 * anything else has started. A user's own OPENBLAS_CORETYPE is never changed. */
#ifndef MD_CORE_BLAS_CORE_H
#define MD_CORE_BLAS_CORE_H

/* The kernel set OpenBLAS should use where it picked `core` by itself on a CPU
 * with (or without) AVX-512 (F, BW, DQ and VL) and AVX2 with FMA: "SkylakeX",
 * "Haswell", or NULL where `core` is already the best of them (or the library
 * cannot switch: `dynamic` 0). Pure, for the tests. */
const char *md_blas_core_wanted(const char *core, int avx512, int avx2_fma, int dynamic);

/* md_blas_core_wanted for this CPU (its AVX-512 and AVX2 flags) and the
 * linked OpenBLAS (built with DYNAMIC_ARCH or not). */
const char *md_blas_core_better(const char *core);

/* Where OpenBLAS on a CPU it does not know picked slower kernels than the CPU
 * runs, and OPENBLAS_CORETYPE is unset: sets it (and MPSDIAG_OPENBLAS_PICKED
 * to OpenBLAS's pick, which also stops a second round) and executes this
 * program again with the same arguments (does not return). Returns when
 * nothing is to change (a user who wants OpenBLAS's own pick sets
 * OPENBLAS_CORETYPE to it), or when the new start failed: the run goes on
 * with the old kernels and the report's BLAS warning says so. */
void md_blas_core_choose(char **argv);

/* Who chose the kernel set in use: "environment" (OPENBLAS_CORETYPE given),
 * "mpsdiag" (md_blas_core_choose) or "OpenBLAS". */
const char *md_blas_core_chosen_by(void);

/* What OpenBLAS picked by itself before mpsdiag chose (NULL unless
 * md_blas_core_chosen_by() is "mpsdiag"). */
const char *md_blas_core_openblas_pick(void);

#endif
