/* threadpool.h - a small fork-join pool of pthreads for the CPU kernels.
 *
 * md_parallel_for(n, grain, fn, ctx) splits [0, n) into chunks of at least
 * `grain` items and runs fn(ctx, begin, end) on the pool's workers and the
 * calling thread; it returns when every chunk is done. Chunk boundaries
 * depend only on n and grain (never on the thread count), so a kernel whose
 * chunks write disjoint outputs, or whose per-chunk partial results are
 * combined in chunk order, gives bit-identical results for any thread count.
 *
 * One process-wide pool, created on first use with md_threadpool_set_size()
 * threads (the CPU device sets it); calls from several threads are
 * serialised. Workers spin briefly after a job and then sleep, so they do not
 * compete with OpenBLAS's threads while a GEMM runs between two of our jobs.
 */
#ifndef MD_THREADPOOL_H
#define MD_THREADPOOL_H

#include <stddef.h>

typedef void (*md_range_fn)(void *ctx, long long begin, long long end);

/* Threads (the caller included) for later jobs; 1 runs everything inline.
 * Resizes the pool the next time a job runs. */
void md_threadpool_set_size(int threads);
int md_threadpool_size(void);

/* Runs fn over [0, n) in chunks of `grain` items (grain >= 1); n <= grain runs
 * inline on the caller. Chunk i covers [i*grain, min((i+1)*grain, n)). */
void md_parallel_for(long long n, long long grain, md_range_fn fn, void *ctx);

/* Inside a job: 0 on the calling thread, 1..size-1 on the pool's workers
 * (for per-thread scratch); 0 outside jobs. */
int md_parallel_thread_id(void);

/* A grain giving about `chunks_per_thread` chunks per thread, at least min_grain. */
long long md_parallel_grain(long long n, long long min_grain);

/* Joins and frees the workers (at exit; a later job starts them again). */
void md_threadpool_shutdown(void);

#endif
