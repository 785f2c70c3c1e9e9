/* mem.h - host memory through counting wrappers (as redis' zmalloc).
 *
 * Every host allocation of mpsdiag goes through md_malloc & co. so that the
 * current and peak host bytes are always known. The counters are process-wide
 * and thread-safe. A tracker (md_memtrack) is the same bookkeeping for any
 * allocator: the CPU backend uses one per device, the CUDA and Metal backends
 * use theirs for device memory.
 */
#ifndef MD_MEM_H
#define MD_MEM_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Byte counters with peak; safe to update from several threads. */
typedef struct md_memtrack {
    /* updated with __atomic builtins (valid in C and in CUDA C++) */
    long long current; /* bytes live now */
    long long peak;    /* highest `current` seen since reset */
    long long allocs;  /* number of successful allocations */
    long long frees;
    long long limit;            /* 0 = none; enforced by md_memtrack_reserve */
} md_memtrack;

/* Accounts `bytes` more; fails with MD_ERR_OOM (message names what was asked,
 * what is in use and the limit) when a limit is set and would be exceeded. */
md_status md_memtrack_reserve(md_memtrack *t, size_t bytes, const char *what);
void md_memtrack_release(md_memtrack *t, size_t bytes);
/* Peak := current (for per-phase peaks). */
void md_memtrack_reset_peak(md_memtrack *t);

/* Process-wide host tracker behind md_malloc. */
md_memtrack *md_host_mem(void);

/* Allocation wrappers. Return NULL on failure (and set an MD_ERR_OOM message);
 * md_free(NULL) is a no-op. Memory is 64-byte aligned. */
void *md_malloc(size_t bytes);
void *md_calloc(size_t count, size_t size);
void *md_realloc(void *p, size_t bytes);
void md_free(void *p);
char *md_strdup(const char *s);
/* Size the wrapper recorded for p (0 for NULL). */
size_t md_alloc_size(const void *p);

/* Peak resident set size of the process in bytes (0 if unknown). */
long long md_peak_rss_bytes(void);

/* Formats a byte count with binary units ("1.50 GiB") into buf. */
const char *md_fmt_bytes(double bytes, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif
