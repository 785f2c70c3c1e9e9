/* helpers.h - shared test utilities: running the built binary, temp files,
 * and tensor comparison in the manner of ggml's test-backend-ops. */
#ifndef MD_TEST_HELPERS_H
#define MD_TEST_HELPERS_H

#include <stddef.h>

/* Runs `build/mpsdiag ARGS` (MPSDIAG_BIN) through the shell with stdout and
 * stderr captured into *out / *err (caller frees with free()). Returns the exit code. */
int th_run(const char *args, char **out, char **err);

/* A fresh temporary directory (removed by th_rmtree). Caller frees the string. */
char *th_tmpdir(void);
void th_rmtree(const char *dir);
/* Writes text to dir/name and returns the path (caller frees). */
char *th_write(const char *dir, const char *name, const char *text);

/* Compares got[] against ref[] with |got - ref| <= atol + rtol*|ref|, after
 * checking for NaN/Inf first. On failure prints the worst index, the max
 * abs/rel errors and the first mismatching pairs under `what`, and returns 0. */
int th_allclose(const char *what, const float *got, const float *ref, size_t n, double atol, double rtol);
int th_allclose_d(const char *what, const double *got, const double *ref, size_t n, double atol, double rtol);

#endif
