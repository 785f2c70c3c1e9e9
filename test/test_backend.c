/* test_backend.c - registry, probing, selection and device memory. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/kernels_call.h"

Test(backend, cpu_always_available)
{
    const md_backend *b = md_backend_find("cpu");
    cr_assert(b);
    const struct md_probe *p = md_backend_probe(b);
    cr_assert(p->available && p->built && p->device_count == 1);
}

Test(backend, auto_picks_an_available_device_and_says_why)
{
    const md_backend *b = NULL;
    int idx = -1;
    char why[512];
    cr_assert_eq(md_device_select("auto", &b, &idx, why, sizeof why), MD_OK);
    cr_assert(md_backend_probe(b)->available);
    cr_assert(strstr(why, "auto"), "%s", why);
}

Test(backend, requested_missing_device_is_an_error_with_reason)
{
    /* Metal is never available in a Linux build; on macOS CUDA never is. */
#if defined(__APPLE__)
    const char *missing = "cuda";
#else
    const char *missing = "metal";
#endif
    const md_backend *b = NULL;
    int idx = -1;
    char why[512];
    md_status st = md_device_select(missing, &b, &idx, why, sizeof why);
    cr_assert_eq(st, MD_ERR_DEVICE);
    cr_assert(strstr(md_errmsg(), "is not available") && strstr(md_errmsg(), "available: "), "%s", md_errmsg());
}

Test(backend, mps_is_metal)
{
    cr_assert_eq(md_backend_find("mps"), md_backend_find("metal"));
}

Test(backend, bad_specs_are_usage_errors)
{
    const md_backend *b;
    int idx;
    char why[256];
    cr_assert_eq(md_device_select("tpu", &b, &idx, why, sizeof why), MD_ERR_USAGE);
    cr_assert_eq(md_device_select("cpu:7", &b, &idx, why, sizeof why), MD_ERR_DEVICE);
    cr_assert(strstr(md_errmsg(), "1 device"), "%s", md_errmsg());
}

Test(backend, device_memory_tracking_and_limit)
{
    md_device *dev = NULL;
    struct md_device_opts o = {.threads = 1};
    cr_assert_eq(md_device_open(md_backend_find("cpu"), 0, &o, &dev), MD_OK, "%s", md_errmsg());
    void *a, *b, *c;
    cr_assert_eq(md_dev_alloc(dev, 1000, &a, "a"), MD_OK);
    cr_assert_eq(md_dev_alloc(dev, 3000, &b, "b"), MD_OK);
    md_dev_free(dev, a);
    cr_assert_eq(md_dev_alloc(dev, 500, &c, "c"), MD_OK);
    struct md_mem_stats ms;
    md_dev_mem_stats(dev, &ms);
    cr_assert_eq(ms.current, 3500);
    cr_assert_eq(ms.peak, 4000);
    cr_assert_eq(ms.allocs, 3);
    md_dev_free(dev, b);
    md_dev_free(dev, c);
    md_dev_mem_stats(dev, &ms);
    cr_assert_eq(ms.current, 0);
    md_device_close(dev);
}

Test(backend, memory_fraction_turns_growth_into_oom)
{
    md_device *dev = NULL;
    struct md_device_opts o = {.threads = 1, .memory_fraction = 1e-6};
    cr_assert_eq(md_device_open(md_backend_find("cpu"), 0, &o, &dev), MD_OK);
    struct md_mem_stats ms;
    md_dev_mem_stats(dev, &ms);
    cr_assert(ms.limit > 0);
    void *p = NULL;
    cr_assert_eq(md_dev_alloc(dev, (size_t)ms.limit + 1, &p, "activations"), MD_ERR_OOM);
    cr_assert(strstr(md_errmsg(), "activations") && strstr(md_errmsg(), "limit"), "%s", md_errmsg());
    cr_assert_null(p);
    md_device_close(dev);
}

Test(backend, many_allocations_are_all_tracked)
{
    md_device *dev = NULL;
    cr_assert_eq(md_device_open(md_backend_find("cpu"), 0, NULL, &dev), MD_OK);
    void *ptrs[500];
    for (int i = 0; i < 500; i++) cr_assert_eq(md_dev_alloc(dev, (size_t)(i + 1), &ptrs[i], "x"), MD_OK);
    for (int i = 0; i < 500; i += 2) md_dev_free(dev, ptrs[i]);
    for (int i = 1; i < 500; i += 2) md_dev_free(dev, ptrs[i]);
    struct md_mem_stats ms;
    md_dev_mem_stats(dev, &ms);
    cr_assert_eq(ms.current, 0);
    cr_assert_eq(ms.peak, 500 * 501 / 2);
    md_device_close(dev);
}

Test(backend, events_time_forward)
{
    md_device *dev = NULL;
    cr_assert_eq(md_device_open(md_backend_find("cpu"), 0, NULL, &dev), MD_OK);
    md_event *a, *b;
    cr_assert_eq(md_event_create(dev, &a), MD_OK);
    cr_assert_eq(md_event_create(dev, &b), MD_OK);
    md_event_record(dev, a);
    md_event_record(dev, b);
    float ms = -1;
    cr_assert_eq(md_event_elapsed_ms(dev, a, b, &ms), MD_OK);
    cr_assert(ms >= 0);
    md_event_destroy(dev, a);
    md_event_destroy(dev, b);
    md_device_close(dev);
}
