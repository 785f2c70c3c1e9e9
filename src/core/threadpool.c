/* threadpool.c - see threadpool.h. */
#include "core/threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "core/mem.h"

#if defined(__x86_64__) || defined(__i386__)
#define CPU_RELAX() __builtin_ia32_pause()
#elif defined(__aarch64__)
#define CPU_RELAX() __asm__ __volatile__("yield")
#else
#define CPU_RELAX() ((void)0)
#endif

/* Spins before sleeping: short, so a following GEMM gets the cores. */
#define SPIN_ITERS 4000

static struct {
    pthread_mutex_t call_lock; /* one job at a time */
    pthread_mutex_t m;
    pthread_cond_t cv_work, cv_done;
    pthread_t *threads;
    int workers;               /* threads besides the caller */
    int want;                  /* requested size (caller included) */
    atomic_ulong gen;          /* job generation */
    int stop;
    md_range_fn fn;
    void *ctx;
    long long n, grain, nchunks;
    /* the two counters written while a job runs, each on its own cache line,
     * away from the read-only job fields */
    _Alignas(64) atomic_llong next; /* next chunk to take */
    _Alignas(64) atomic_llong done; /* chunks finished */
    char pad_done[64 - sizeof(atomic_llong)];
    int open;                  /* the posted job still accepts workers */
    int active;                /* workers inside the current job (under m) */
    atomic_int ids;            /* next worker's md_parallel_thread_id */
} P = {
    .call_lock = PTHREAD_MUTEX_INITIALIZER,
    .m = PTHREAD_MUTEX_INITIALIZER,
    .cv_work = PTHREAD_COND_INITIALIZER,
    .cv_done = PTHREAD_COND_INITIALIZER,
    .want = 1,
};

static _Thread_local int thread_id; /* 0: any thread not in the pool */

int md_parallel_thread_id(void) { return thread_id; }

static void run_chunks(void)
{
    /* chunks finished here are published once at the end: a contended atomic
     * per chunk cost more than small chunks themselves */
    long long mine = 0;
    for (;;) {
        long long i = atomic_fetch_add(&P.next, 1);
        if (i >= P.nchunks) break;
        long long b = i * P.grain, e = b + P.grain;
        P.fn(P.ctx, b, e < P.n ? e : P.n);
        mine++;
    }
    if (mine && atomic_fetch_add(&P.done, mine) + mine == P.nchunks) {
        pthread_mutex_lock(&P.m);
        pthread_cond_signal(&P.cv_done);
        pthread_mutex_unlock(&P.m);
    }
}

static void *worker(void *arg)
{
    /* the generation at creation, so a job posted before this thread first
     * looks is not missed */
    unsigned long seen = (unsigned long)(uintptr_t)arg;
    thread_id = atomic_fetch_add(&P.ids, 1); /* 1..workers: unique while this pool lives */
    for (;;) {
        for (int i = 0; i < SPIN_ITERS && atomic_load(&P.gen) == seen; i++) CPU_RELAX();
        pthread_mutex_lock(&P.m);
        while (atomic_load(&P.gen) == seen && !P.stop) pthread_cond_wait(&P.cv_work, &P.m);
        int stop = P.stop;
        seen = atomic_load(&P.gen);
        /* a worker that wakes after the job was finished stays out of it: the
         * caller waits only for workers that entered */
        int enter = !stop && P.open;
        if (enter) P.active++;
        pthread_mutex_unlock(&P.m);
        if (stop) break;
        if (!enter) continue;
        run_chunks();
        pthread_mutex_lock(&P.m);
        if (--P.active == 0) pthread_cond_signal(&P.cv_done);
        pthread_mutex_unlock(&P.m);
    }
    return NULL;
}

static void stop_workers(void)
{
    if (!P.threads) return;
    pthread_mutex_lock(&P.m);
    P.stop = 1;
    pthread_cond_broadcast(&P.cv_work);
    pthread_mutex_unlock(&P.m);
    for (int i = 0; i < P.workers; i++) pthread_join(P.threads[i], NULL);
    md_free(P.threads);
    P.threads = NULL;
    P.workers = 0;
    P.stop = 0;
}

/* Called with call_lock held. On any failure the pool runs with what started. */
static void ensure_workers(void)
{
    if (P.workers == P.want - 1 && (P.threads || P.want == 1)) return;
    stop_workers();
    if (P.want <= 1) return;
    P.threads = md_calloc((size_t)P.want - 1, sizeof *P.threads);
    if (!P.threads) return;
    atomic_store(&P.ids, 1);
    for (int i = 0; i < P.want - 1; i++) {
        if (pthread_create(&P.threads[i], NULL, worker, (void *)(uintptr_t)atomic_load(&P.gen)) != 0) break;
        P.workers++;
    }
}

void md_threadpool_set_size(int threads)
{
    pthread_mutex_lock(&P.call_lock);
    P.want = threads > 0 ? threads : 1;
    pthread_mutex_unlock(&P.call_lock);
}

int md_threadpool_size(void) { return P.want; }

long long md_parallel_grain(long long n, long long min_grain)
{
    long long chunks = (long long)P.want * 4;
    long long g = (n + chunks - 1) / chunks;
    return g < min_grain ? (min_grain > 0 ? min_grain : 1) : g;
}

void md_parallel_for(long long n, long long grain, md_range_fn fn, void *ctx)
{
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    if (n <= grain || P.want <= 1) {
        fn(ctx, 0, n);
        return;
    }
    pthread_mutex_lock(&P.call_lock);
    ensure_workers();
    P.fn = fn;
    P.ctx = ctx;
    P.n = n;
    P.grain = grain;
    P.nchunks = (n + grain - 1) / grain;
    atomic_store(&P.next, 0);
    atomic_store(&P.done, 0);
    if (P.workers > 0) {
        pthread_mutex_lock(&P.m);
        P.open = 1;
        P.active = 0;
        atomic_fetch_add(&P.gen, 1);
        pthread_cond_broadcast(&P.cv_work);
        pthread_mutex_unlock(&P.m);
    }
    run_chunks();
    for (int i = 0; i < SPIN_ITERS && atomic_load(&P.done) < P.nchunks; i++) CPU_RELAX();
    pthread_mutex_lock(&P.m);
    while (atomic_load(&P.done) < P.nchunks || P.active > 0) pthread_cond_wait(&P.cv_done, &P.m);
    P.open = 0;
    pthread_mutex_unlock(&P.m);
    pthread_mutex_unlock(&P.call_lock);
}

void md_threadpool_shutdown(void)
{
    pthread_mutex_lock(&P.call_lock);
    stop_workers();
    pthread_mutex_unlock(&P.call_lock);
}
