/* test_cuda_lib.c - MPSDIAG_CUDA_LIB: a path the user names is used or
 * refused with the reason, never replaced by the plug-in beside the binary.
 * Runs without a GPU: a missing file, a file that is not a shared library,
 * and a copy of the binary with a decoy libmpsdiag_cuda.so beside it. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "helpers.h"

/* A copy of mpsdiag in dir with a real shared library that is not the
 * plug-in (zlib) beside it as libmpsdiag_cuda.so; MPSDIAG_BIN points there. */
static void binary_with_decoy(const char *dir)
{
    const char *bin = getenv("MPSDIAG_BIN");
    cr_assert(bin, "MPSDIAG_BIN is not set");
    Dl_info di;
    cr_assert(dladdr((void *)zlibVersion, &di) && di.dli_fname, "where is zlib?");
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "cp '%s' '%s/mpsdiag' && cp '%s' '%s/libmpsdiag_cuda.so'", bin, dir, di.dli_fname, dir);
    cr_assert_eq(system(cmd), 0, "%s", cmd);
    snprintf(cmd, sizeof cmd, "%s/mpsdiag", dir);
    setenv("MPSDIAG_BIN", cmd, 1);
}

Test(cuda_lib, missing_file_is_refused_not_replaced)
{
    char *dir = th_tmpdir();
    binary_with_decoy(dir);
    char lib[4200];
    snprintf(lib, sizeof lib, "%s/nowhere/libmpsdiag_cuda.so", dir);
    setenv("MPSDIAG_CUDA_LIB", lib, 1);

    char *out, *err;
    int rc = th_run("--device cuda --epochs 0", &out, &err);
    cr_assert_eq(rc, 4, "exit %d, stderr: %s", rc, err);
    cr_assert_eq(th_count_messages(err), 1, "one line: %s", err);
    cr_assert(strstr(err, "MPSDIAG_CUDA_LIB") && strstr(err, lib) && strstr(err, "no such file"), "%s", err);
    cr_assert(!strstr(err, "md_cuda_backend_entry"), "the library beside the binary was loaded: %s", err);
    free(out);
    free(err);

    /* --list-devices: CUDA unavailable, with the same reason */
    rc = th_run("--list-devices", &out, &err);
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert(strstr(out, "cuda:0") && strstr(out, "MPSDIAG_CUDA_LIB"), "%s", out);
    free(out);
    free(err);

    /* auto: runs on what is available, and says the named library was refused */
    rc = th_run("--device auto --epochs 0 --dataset synthetic --max-samples 64", &out, &err);
    cr_assert_eq(rc, 0, "%s", err);
    cr_assert(strstr(err, "MPSDIAG_CUDA_LIB") && strstr(err, lib), "no word of the refused library: %s", err);
    free(out);
    free(err);
    th_tmpdir_free(dir);
}

Test(cuda_lib, file_that_is_not_a_shared_library)
{
    char *dir = th_tmpdir();
    char *lib = th_write(dir, "libmpsdiag_cuda.so", "this is text, not a shared library\n");
    setenv("MPSDIAG_CUDA_LIB", lib, 1);
    char *out, *err;
    int rc = th_run("--device cuda --epochs 0", &out, &err);
    cr_assert_eq(rc, 4, "exit %d, stderr: %s", rc, err);
    cr_assert_eq(th_count_messages(err), 1, "one line: %s", err);
    cr_assert(strstr(th_unwrap(err), "MPSDIAG_CUDA_LIB") && strstr(err, lib) && strstr(err, "not a shared library"), "%s", err);
    free(out);
    free(err);

    /* a directory is not a library either */
    setenv("MPSDIAG_CUDA_LIB", dir, 1);
    rc = th_run("--device cuda --epochs 0", &out, &err);
    cr_assert_eq(rc, 4, "exit %d, stderr: %s", rc, err);
    cr_assert(strstr(err, "MPSDIAG_CUDA_LIB") && strstr(th_unwrap(err), "not a shared library"), "%s", err);
    free(out);
    free(err);
    free(lib);
    th_tmpdir_free(dir);
}

/* A real shared library that is not the plug-in: named as such. */
Test(cuda_lib, library_without_the_entry_point)
{
    Dl_info di;
    cr_assert(dladdr((void *)zlibVersion, &di) && di.dli_fname);
    setenv("MPSDIAG_CUDA_LIB", di.dli_fname, 1);
    char *out, *err;
    int rc = th_run("--device cuda --epochs 0", &out, &err);
    cr_assert_eq(rc, 4, "exit %d, stderr: %s", rc, err);
    cr_assert(strstr(err, "MPSDIAG_CUDA_LIB") && strstr(err, di.dli_fname) && strstr(err, "md_cuda_backend_entry"),
              "%s", err);
    free(out);
    free(err);
}
