/* mem.c - counting allocation wrappers and byte trackers. */
#define _POSIX_C_SOURCE 200809L
#include "core/mem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define MD_ALIGN 64
/* Each block carries a header of MD_ALIGN bytes with the user size, so that
 * md_free knows how much to release and user memory stays aligned. */
struct hdr { size_t size; size_t magic; };
#define HDR_MAGIC ((size_t)0x6d70736469616721ull)

static md_memtrack host_track;

md_memtrack *md_host_mem(void) { return &host_track; }

md_status md_memtrack_claim(md_memtrack *t, size_t bytes, const char *what)
{
    long long now = __atomic_add_fetch(&t->claimed, (long long)bytes, __ATOMIC_RELAXED);
    if (t->limit > 0 && now > t->limit) {
        __atomic_sub_fetch(&t->claimed, (long long)bytes, __ATOMIC_RELAXED);
        char a[32], b[32], c[32];
        return md_errf(MD_ERR_OOM, "out of memory allocating %s: requested %s, in use %s, limit %s",
                       what ? what : "memory", md_fmt_bytes((double)bytes, a, sizeof a),
                       md_fmt_bytes((double)(now - (long long)bytes), b, sizeof b),
                       md_fmt_bytes((double)t->limit, c, sizeof c));
    }
    return MD_OK;
}

void md_memtrack_commit(md_memtrack *t, size_t bytes)
{
    long long now = __atomic_add_fetch(&t->current, (long long)bytes, __ATOMIC_RELAXED);
    long long pk = __atomic_load_n(&t->peak, __ATOMIC_RELAXED);
    while (now > pk && !__atomic_compare_exchange_n(&t->peak, &pk, now, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
    __atomic_add_fetch(&t->allocs, 1, __ATOMIC_RELAXED);
}

void md_memtrack_unclaim(md_memtrack *t, size_t bytes)
{
    __atomic_sub_fetch(&t->claimed, (long long)bytes, __ATOMIC_RELAXED);
}

md_status md_memtrack_reserve(md_memtrack *t, size_t bytes, const char *what)
{
    MD_TRY(md_memtrack_claim(t, bytes, what));
    md_memtrack_commit(t, bytes);
    return MD_OK;
}

void md_memtrack_release(md_memtrack *t, size_t bytes)
{
    __atomic_sub_fetch(&t->current, (long long)bytes, __ATOMIC_RELAXED);
    __atomic_sub_fetch(&t->claimed, (long long)bytes, __ATOMIC_RELAXED);
    __atomic_add_fetch(&t->frees, 1, __ATOMIC_RELAXED);
}

void md_memtrack_reset_peak(md_memtrack *t)
{
    __atomic_store_n(&t->peak, __atomic_load_n(&t->current, __ATOMIC_RELAXED), __ATOMIC_RELAXED);
}

void *md_malloc(size_t bytes)
{
    if (bytes > SIZE_MAX - MD_ALIGN) {
        md_errf(MD_ERR_OOM, "out of memory: %zu bytes requested", bytes);
        return NULL;
    }
    void *raw = NULL;
    if (posix_memalign(&raw, MD_ALIGN, bytes + MD_ALIGN) != 0) {
        char a[32];
        md_errf(MD_ERR_OOM, "out of host memory: requested %s", md_fmt_bytes((double)bytes, a, sizeof a));
        return NULL;
    }
    if (md_memtrack_reserve(&host_track, bytes, "host memory") != MD_OK) {
        free(raw);
        return NULL;
    }
    struct hdr *h = raw;
    h->size = bytes;
    h->magic = HDR_MAGIC;
    return (char *)raw + MD_ALIGN;
}

void *md_calloc(size_t count, size_t size)
{
    if (size && count > SIZE_MAX / size) {
        md_errf(MD_ERR_OOM, "out of memory: %zu x %zu bytes requested", count, size);
        return NULL;
    }
    void *p = md_malloc(count * size);
    if (p) memset(p, 0, count * size);
    return p;
}

static struct hdr *hdr_of(const void *p)
{
    struct hdr *h = (struct hdr *)((char *)(uintptr_t)p - MD_ALIGN);
    MD_ASSERT(h->magic == HDR_MAGIC); /* freed or foreign pointer */
    return h;
}

size_t md_alloc_size(const void *p) { return p ? hdr_of(p)->size : 0; }

void md_free(void *p)
{
    if (!p) return;
    struct hdr *h = hdr_of(p);
    md_memtrack_release(&host_track, h->size);
    h->magic = 0;
    free(h);
}

void *md_realloc(void *p, size_t bytes)
{
    if (!p) return md_malloc(bytes);
    size_t old = hdr_of(p)->size;
    void *q = md_malloc(bytes);
    if (!q) return NULL;
    memcpy(q, p, old < bytes ? old : bytes);
    md_free(p);
    return q;
}

char *md_strdup(const char *s)
{
    size_t n = strlen(s) + 1;
    char *d = md_malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

long long md_peak_rss_bytes(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
#if defined(__APPLE__)
    return (long long)ru.ru_maxrss; /* bytes on macOS */
#else
    return (long long)ru.ru_maxrss * 1024; /* KiB on Linux */
#endif
}

const char *md_fmt_bytes(double bytes, char *buf, size_t n)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    double v = bytes < 0 ? -bytes : bytes;
    while (v >= 1024.0 && u < 4) { v /= 1024.0; u++; }
    if (u == 0) snprintf(buf, n, "%s%.0f B", bytes < 0 ? "-" : "", v);
    else snprintf(buf, n, "%s%.2f %s", bytes < 0 ? "-" : "", v, units[u]);
    return buf;
}
