/* test_devmem.c - device memory accounting: the peak counts only memory
 * actually held, whatever the backend; the allocation fault hook
 * (MPSDIAG_TEST_ALLOC_FAIL) that the out-of-memory tests use. */
#define _POSIX_C_SOURCE 200809L
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "core/mem.h"
#include "helpers.h"

static md_device *open_dev(const char *backend)
{
    md_device *dev = NULL;
    struct md_device_opts o = {.threads = 1};
    cr_assert_eq(md_device_open(md_backend_find(backend), 0, &o, &dev), MD_OK, "%s", md_errmsg());
    return dev;
}

/* An allocation the device's own allocator refuses (a GPU driver out of
 * memory; here the fault hook) must not raise the peak: before, the
 * accounting added the request first and took it back after the failure,
 * so an uncapped --auto-batch run reported a peak of several times the
 * GPU's memory. Checked on two backends: the accounting is shared. */
Test(devmem, refused_allocation_is_not_in_the_peak)
{
    static const char *const backends[] = {"cpu", "ref"};
    setenv("MPSDIAG_TEST_ALLOC_FAIL", "huge", 1);
    for (int i = 0; i < 2; i++) {
        md_device *dev = open_dev(backends[i]);
        void *a = NULL, *b = NULL;
        cr_assert_eq(md_dev_alloc(dev, 1000, &a, "small"), MD_OK);
        cr_assert_eq(md_dev_alloc(dev, (size_t)1 << 40, &b, "huge buffer"), MD_ERR_OOM);
        cr_assert_null(b);
        cr_assert(strstr(md_errmsg(), "huge buffer") && strstr(md_errmsg(), "out of memory"), "%s", md_errmsg());
        struct md_mem_stats ms;
        md_dev_mem_stats(dev, &ms);
        cr_assert_eq(ms.current, 1000, "%s: current %lld", backends[i], ms.current);
        cr_assert_eq(ms.peak, 1000, "%s: peak %lld counts the refused allocation", backends[i], ms.peak);
        cr_assert_eq(ms.allocs, 1);
        md_dev_free(dev, a);
        md_device_close(dev);
    }
    unsetenv("MPSDIAG_TEST_ALLOC_FAIL");
}

/* The limit still sees allocations under way, and a refusal by the limit
 * leaves the counters as they were. */
Test(devmem, limit_refusal_leaves_counters_alone)
{
    md_memtrack t = {0};
    t.limit = 1000;
    cr_assert_eq(md_memtrack_claim(&t, 600, "a"), MD_OK);
    cr_assert_eq(t.current, 0, "claimed is not held");
    cr_assert_eq(t.peak, 0);
    cr_assert_eq(md_memtrack_claim(&t, 600, "b"), MD_ERR_OOM, "the claim under way counts against the limit");
    md_memtrack_commit(&t, 600);
    cr_assert_eq(t.current, 600);
    cr_assert_eq(t.peak, 600);
    cr_assert_eq(md_memtrack_claim(&t, 300, "c"), MD_OK);
    md_memtrack_unclaim(&t, 300);
    cr_assert_eq(t.peak, 600);
    md_memtrack_release(&t, 600);
    cr_assert_eq(t.current, 0);
    cr_assert_eq(md_memtrack_claim(&t, 1000, "d"), MD_OK, "everything given back");
}

Test(devmem, fault_hook_counts_and_matches)
{
    setenv("MPSDIAG_TEST_ALLOC_FAIL", "optimizer state:2", 1);
    md_device *dev = open_dev("cpu");
    void *p = NULL;
    cr_assert_eq(md_dev_alloc(dev, 64, &p, "parameters"), MD_OK);
    md_dev_free(dev, p);
    cr_assert_eq(md_dev_alloc(dev, 64, &p, "optimizer state (m)"), MD_ERR_OOM);
    cr_assert_eq(md_dev_alloc(dev, 64, &p, "optimizer state (m)"), MD_ERR_OOM);
    cr_assert_eq(md_dev_alloc(dev, 64, &p, "optimizer state (m)"), MD_OK, "only the first two are refused");
    md_dev_free(dev, p);
    md_device_close(dev);

    setenv("MPSDIAG_TEST_ALLOC_FAIL", "x:0", 1);
    md_device *bad = NULL;
    cr_assert_eq(md_device_open(md_backend_find("cpu"), 0, NULL, &bad), MD_ERR_USAGE);
    cr_assert(strstr(md_errmsg(), "MPSDIAG_TEST_ALLOC_FAIL"), "%s", md_errmsg());
    cr_assert_null(bad);
    unsetenv("MPSDIAG_TEST_ALLOC_FAIL");
}
