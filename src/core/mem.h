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

/* Byte counters with peak; safe to update from several threads.
 *
 * `current` and `peak` count only memory actually held: an allocation is
 * first claimed (checked against the limit), and counts as held only once
 * the allocator delivered it (commit); a refused one is unclaimed and never
 * shows in the peak. */
typedef struct md_memtrack {
    /* updated with __atomic builtins (valid in C and in CUDA C++) */
    long long current; /* bytes held now */
    long long peak;    /* highest `current` seen since reset */
    long long allocs;  /* number of successful allocations */
    long long frees;
    long long limit;   /* 0 = none; enforced by md_memtrack_claim */
    long long claimed; /* current + allocations under way: what the limit sees */
} md_memtrack;

/* Claims `bytes` for an allocation about to be made; fails with MD_ERR_OOM
 * (message names what was asked, what is in use and the limit) when a limit
 * is set and would be exceeded. A claim counts against the limit only, not
 * in current or peak: md_memtrack_commit follows when the allocation
 * succeeded, md_memtrack_unclaim when it failed. */
md_status md_memtrack_claim(md_memtrack *t, size_t bytes, const char *what);
void md_memtrack_commit(md_memtrack *t, size_t bytes);
void md_memtrack_unclaim(md_memtrack *t, size_t bytes);
/* Claim + commit, for memory already obtained. */
md_status md_memtrack_reserve(md_memtrack *t, size_t bytes, const char *what);
/* Held memory given back (after a commit or reserve). */
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
