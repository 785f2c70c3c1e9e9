/* test_cuda_attn.c - the CUDA attention path switch MPSDIAG_ATTN (the paths'
 * results are compared with the reference in test_backend_ops.c). Skipped
 * without a CUDA device. */
#define _GNU_SOURCE
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/status.h"

static const md_backend *cuda_or_skip(void)
{
    const md_backend *b = md_backend_find("cuda");
    const struct md_probe *p = md_backend_probe(b);
    if (!p->available) cr_skip_test("cuda unavailable: %s", p->reason);
    return b;
}

Test(cuda_attn, path_variable_accepts_the_documented_values)
{
    const md_backend *b = cuda_or_skip();
    static const char *const ok[] = {"auto", "gemm", "flash", "simt", ""};
    for (int i = 0; i < 5; i++) {
        setenv("MPSDIAG_ATTN", ok[i], 1);
        struct md_device_opts o = {0};
        md_device *d = NULL;
        cr_assert_eq(md_device_open(b, 0, &o, &d), MD_OK, "MPSDIAG_ATTN=%s: %s", ok[i], md_errmsg());
        md_device_close(d);
    }
}

Test(cuda_attn, unknown_path_is_a_usage_error_naming_the_variable)
{
    const md_backend *b = cuda_or_skip();
    setenv("MPSDIAG_ATTN", "fast", 1);
    struct md_device_opts o = {0};
    md_device *d = NULL;
    md_status st = md_device_open(b, 0, &o, &d);
    cr_assert_eq(st, MD_ERR_USAGE, "status %d", (int)st);
    cr_assert(strstr(md_errmsg(), "MPSDIAG_ATTN") && strstr(md_errmsg(), "fast"), "message: %s", md_errmsg());
}
