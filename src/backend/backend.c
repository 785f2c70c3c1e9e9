/* backend.c - registry, probing, selection, devices and their memory. */
#define _GNU_SOURCE
#include "backend/backend_impl.h"

#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/log.h"
#include "core/platform.h"
#include "core/timer.h"

struct md_backend {
    const char *name;
    md_backend_kind kind;
    const struct md_backend_ops *ops; /* NULL until loaded (cuda) */
    int probed;
    struct md_probe probe;
    int user_visible;                 /* listed by --list-devices and auto */
    const struct md_backend_ops *test_ops; /* md_backend_set_test_ops */
};

/* ---------------------------------------------------------------------------
 * CUDA plug-in loading
 * ------------------------------------------------------------------------- */

typedef const struct md_backend_ops *(*md_cuda_entry_fn)(int api_version);

/* Why `path` cannot be a shared library, or "" when it may be one: it must
 * be a readable regular file that starts with an ELF (Mach-O on macOS)
 * header. */
static void check_library_file(const char *path, char *why, size_t n)
{
    why[0] = '\0';
    struct stat sb;
    if (stat(path, &sb) != 0) {
        snprintf(why, n, "%s", errno == ENOENT ? "no such file" : strerror(errno));
        return;
    }
    if (!S_ISREG(sb.st_mode)) {
        snprintf(why, n, "not a shared library (%s)", S_ISDIR(sb.st_mode) ? "a directory" : "not a regular file");
        return;
    }
    FILE *f = fopen(path, "rb");
    if (!f) {
        snprintf(why, n, "cannot be read: %s", strerror(errno));
        return;
    }
    unsigned char m[4] = {0};
    size_t got = fread(m, 1, sizeof m, f);
    fclose(f);
    int elf = got == 4 && m[0] == 0x7f && m[1] == 'E' && m[2] == 'L' && m[3] == 'F';
    int macho = got == 4 && ((m[0] == 0xcf && m[1] == 0xfa && m[2] == 0xed && m[3] == 0xfe) ||
                             (m[0] == 0xca && m[1] == 0xfe && m[2] == 0xba && m[3] == 0xbe));
    if (!elf && !macho) snprintf(why, n, "not a shared library (no ELF or Mach-O header)");
}

/* Loads the CUDA plug-in: the file MPSDIAG_CUDA_LIB names when it is set
 * (used or refused with the reason, never replaced by another), else
 * libmpsdiag_cuda.so beside the binary. */
static const struct md_backend_ops *load_cuda(char *reason, size_t n)
{
    const char *env = getenv("MPSDIAG_CUDA_LIB");
    int named = env && *env;
    char path[4200], who[4300], why[512];
    if (named) {
        snprintf(path, sizeof path, "%s", env);
        snprintf(who, sizeof who, "MPSDIAG_CUDA_LIB=%s", env);
        check_library_file(path, why, sizeof why);
        if (why[0]) {
            snprintf(reason, n, "%s: %s", who, why);
            return NULL;
        }
    } else {
        snprintf(path, sizeof path, "%s/libmpsdiag_cuda.so", md_exe_dir());
        snprintf(who, sizeof who, "libmpsdiag_cuda.so");
        if (access(path, F_OK) != 0) {
            snprintf(reason, n, "not built with CUDA (no libmpsdiag_cuda.so beside the binary; "
                                "nvcc was not found at build time or NO_CUDA=1)");
            return NULL;
        }
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *e = dlerror();
        if (named) snprintf(reason, n, "%s: cannot be loaded: %s", who, e ? e : "unknown error");
        else snprintf(reason, n, "CUDA libraries missing: %s", e ? e : "unknown error");
        return NULL;
    }
    md_cuda_entry_fn entry;
    void *sym = dlsym(h, "md_cuda_backend_entry");
    memcpy(&entry, &sym, sizeof entry); /* POSIX: dlsym results are callable */
    if (!entry) {
        snprintf(reason, n, "%s has no md_cuda_backend_entry (%s)", who,
                 named ? "not the mpsdiag CUDA plug-in" : "stale build?");
        dlclose(h);
        return NULL;
    }
    const struct md_backend_ops *ops = entry(MD_BACKEND_API_VERSION);
    if (!ops) {
        snprintf(reason, n, "%s was built for another backend API version; rebuild", who);
        dlclose(h);
        return NULL;
    }
    return ops; /* the handle stays open for the life of the process */
}

/* ---------------------------------------------------------------------------
 * Registry
 * ------------------------------------------------------------------------- */

static struct md_backend registry[] = {
    {.name = "metal", .kind = MD_BACKEND_METAL, .user_visible = 1},
    {.name = "cuda", .kind = MD_BACKEND_CUDA, .user_visible = 1},
    {.name = "cpu", .kind = MD_BACKEND_CPU, .user_visible = 1},
    {.name = "ref", .kind = MD_BACKEND_REF, .user_visible = 0},
};
#define N_BACKENDS ((int)(sizeof registry / sizeof registry[0]))

int md_backend_count(void) { return N_BACKENDS; }
const md_backend *md_backend_at(int i) { return i >= 0 && i < N_BACKENDS ? &registry[i] : NULL; }
const char *md_backend_name(const md_backend *b) { return b->name; }
md_backend_kind md_backend_kind_of(const md_backend *b) { return b->kind; }

const md_backend *md_backend_find(const char *name)
{
    if (strcmp(name, "mps") == 0) name = "metal";
    for (int i = 0; i < N_BACKENDS; i++)
        if (strcmp(registry[i].name, name) == 0) return &registry[i];
    return NULL;
}

const struct md_probe *md_backend_probe(const md_backend *cb)
{
    struct md_backend *b = (struct md_backend *)(uintptr_t)cb;
    if (b->probed) return &b->probe;
    b->probed = 1;
    memset(&b->probe, 0, sizeof b->probe);
    switch (b->kind) {
    case MD_BACKEND_CPU: b->ops = md_cpu_backend_ops(); break;
    case MD_BACKEND_REF: b->ops = md_ref_backend_ops(); break;
    case MD_BACKEND_METAL: b->ops = md_metal_backend_ops(); break;
    case MD_BACKEND_CUDA:
        b->ops = b->test_ops ? NULL : load_cuda(b->probe.reason, sizeof b->probe.reason);
        break;
    }
    if (b->test_ops) b->ops = b->test_ops;
    if (!b->ops) return &b->probe; /* reason set by the loader */
    b->ops->probe(&b->probe);
    if (!b->probe.available && !b->probe.reason[0])
        snprintf(b->probe.reason, sizeof b->probe.reason, "no device found");
    return &b->probe;
}

void md_backend_set_test_ops(const char *name, const struct md_backend_ops *ops)
{
    struct md_backend *b = (struct md_backend *)(uintptr_t)md_backend_find(name);
    MD_ASSERT(b);
    b->test_ops = ops;
    b->ops = NULL;
    b->probed = 0;
}

md_status md_backend_device_info(const md_backend *b, int index, struct md_device_info *out)
{
    const struct md_probe *p = md_backend_probe(b);
    memset(out, 0, sizeof *out);
    if (!p->available || !b->ops)
        return md_errf(MD_ERR_DEVICE, "%s is not available: %s", b->name, p->reason);
    if (index < 0 || index >= p->device_count)
        return md_errf(MD_ERR_DEVICE, "%s:%d does not exist (%d device%s)", b->name, index,
                       p->device_count, p->device_count == 1 ? "" : "s");
    md_status st = b->ops->device_info(index, out);
    snprintf(out->backend, sizeof out->backend, "%s", b->name);
    out->index = index;
    return st;
}

/* ---------------------------------------------------------------------------
 * Selection
 * ------------------------------------------------------------------------- */

static void available_list(char *buf, size_t n)
{
    size_t o = 0;
    buf[0] = '\0';
    for (int i = 0; i < N_BACKENDS; i++) {
        if (!registry[i].user_visible) continue;
        const struct md_probe *p = md_backend_probe(&registry[i]);
        if (p->available && o < n)
            o += (size_t)snprintf(buf + o, n - o, "%s%s", o ? ", " : "", registry[i].name);
    }
}

md_status md_device_select(const char *spec, const md_backend **backend, int *index,
                           char *why, size_t why_len)
{
    char name[32];
    int idx = 0;
    const char *colon = strchr(spec, ':');
    size_t len = colon ? (size_t)(colon - spec) : strlen(spec);
    if (len == 0 || len >= sizeof name)
        return md_errf(MD_ERR_USAGE, "--device: '%s' is not a device (auto, cpu, cuda[:N], metal, mps)", spec);
    memcpy(name, spec, len);
    name[len] = '\0';
    if (colon) {
        char *end;
        long v = strtol(colon + 1, &end, 10);
        if (*end || end == colon + 1 || v < 0 || v >= MD_MAX_DEVICES)
            return md_errf(MD_ERR_USAGE, "--device: bad device index in '%s'", spec);
        idx = (int)v;
    }
    if (strcmp(name, "auto") == 0) {
        if (colon) return md_errf(MD_ERR_USAGE, "--device: 'auto' takes no index");
        char skipped[256] = "";
        size_t o = 0;
        for (int i = 0; i < N_BACKENDS; i++) {
            if (!registry[i].user_visible) continue;
            const struct md_probe *p = md_backend_probe(&registry[i]);
            /* a library the user named and that was refused is worth a line */
            if (!p->available && registry[i].kind == MD_BACKEND_CUDA && strstr(p->reason, "MPSDIAG_CUDA_LIB"))
                md_warn("CUDA is unavailable: %s", p->reason);
            if (p->available) {
                *backend = &registry[i];
                *index = 0;
                snprintf(why, why_len, "auto: first available of metal, cuda, cpu%s%s%s",
                         o ? " (" : "", skipped, o ? " unavailable)" : "");
                return MD_OK;
            }
            if (o < sizeof skipped)
                o += (size_t)snprintf(skipped + o, sizeof skipped - o, "%s%s", o ? ", " : "", registry[i].name);
        }
        char reasons[512] = "";
        o = 0;
        for (int i = 0; i < N_BACKENDS; i++) {
            if (!registry[i].user_visible || o >= sizeof reasons) continue;
            o += (size_t)snprintf(reasons + o, sizeof reasons - o, "%s%s: %s", o ? "; " : "", registry[i].name,
                                  md_backend_probe(&registry[i])->reason);
        }
        return md_errf(MD_ERR_DEVICE, "no device available (%s)", reasons);
    }
    const md_backend *b = md_backend_find(name);
    if (!b || !b->user_visible)
        return md_errf(MD_ERR_USAGE, "--device: '%s' is not a device (auto, cpu, cuda[:N], metal, mps)", spec);
    const struct md_probe *p = md_backend_probe(b);
    if (!p->available) {
        char avail[128];
        available_list(avail, sizeof avail);
        return md_errf(MD_ERR_DEVICE, "device '%s' is not available: %s (available: %s)", spec,
                       p->reason, avail[0] ? avail : "none");
    }
    if (idx >= p->device_count)
        return md_errf(MD_ERR_DEVICE, "device '%s' is not available: %s has %d device%s", spec,
                       b->name, p->device_count, p->device_count == 1 ? "" : "s");
    *backend = b;
    *index = idx;
    snprintf(why, why_len, "%s:%d requested with --device", b->name, idx);
    return MD_OK;
}

/* ---------------------------------------------------------------------------
 * Devices
 * ------------------------------------------------------------------------- */

/* MPSDIAG_TEST_ALLOC_FAIL=WHAT[:N] (backend_impl.h struct md_alloc_fault). */
static md_status parse_alloc_fault(struct md_alloc_fault *f)
{
    memset(f, 0, sizeof *f);
    const char *env = getenv("MPSDIAG_TEST_ALLOC_FAIL");
    if (!env || !*env) return MD_OK;
    const char *colon = strrchr(env, ':');
    size_t len = colon ? (size_t)(colon - env) : strlen(env);
    f->left = -1;
    if (colon) {
        char *end;
        long long n = strtoll(colon + 1, &end, 10);
        if (*end || end == colon + 1 || n < 1)
            return md_errf(MD_ERR_USAGE, "MPSDIAG_TEST_ALLOC_FAIL: '%s' is not WHAT[:N] with N >= 1", env);
        f->left = n;
    }
    if (len == 0 || len >= sizeof f->what)
        return md_errf(MD_ERR_USAGE, "MPSDIAG_TEST_ALLOC_FAIL: '%s' is not WHAT[:N] (WHAT 1-%d characters)", env,
                       (int)sizeof f->what - 1);
    memcpy(f->what, env, len);
    f->what[len] = '\0';
    return MD_OK;
}

/* 1 when the fault hook refuses this allocation (and counts it). */
static int alloc_fault_hit(md_device *dev, const char *what)
{
    struct md_alloc_fault *f = &dev->fault;
    if (!f->what[0] || f->left == 0 || !what || !strstr(what, f->what)) return 0;
    if (f->left > 0) f->left--;
    return 1;
}

md_status md_device_open(const md_backend *b, int index, const struct md_device_opts *opts,
                         md_device **out)
{
    *out = NULL;
    struct md_device_info info;
    MD_TRY(md_backend_device_info(b, index, &info));
    md_device *dev = md_calloc(1, sizeof *dev);
    if (!dev) return MD_ERR_OOM;
    dev->ops = b->ops;
    dev->backend = b;
    dev->index = index;
    dev->info = info;
    if (opts) dev->opts = *opts;
    md_status fst = parse_alloc_fault(&dev->fault);
    if (fst != MD_OK) {
        md_free(dev);
        return fst;
    }
    if (dev->opts.memory_fraction > 0 && info.total_memory > 0)
        dev->mem.limit = (long long)(dev->opts.memory_fraction * (double)info.total_memory);
    md_status st = dev->ops->open(dev);
    if (st != MD_OK) {
        md_free(dev);
        return st;
    }
    /* Refresh info the open may have completed (threads in use, free memory). */
    snprintf(dev->info.backend, sizeof dev->info.backend, "%s", b->name);
    if (dev->opts.fallback && dev->info.unified_memory && b->kind != MD_BACKEND_CPU &&
        b->kind != MD_BACKEND_REF) {
        struct md_device_opts cpu_opts = dev->opts;
        cpu_opts.memory_fraction = 0;
        st = md_device_open(md_backend_find("cpu"), 0, &cpu_opts, &dev->fallback);
        if (st != MD_OK) {
            dev->ops->close(dev);
            md_free(dev);
            return st;
        }
    }
    *out = dev;
    return MD_OK;
}

void md_device_close(md_device *dev)
{
    if (!dev) return;
    md_device_close(dev->fallback);
    dev->ops->close(dev);
    md_free(dev->blocks.keys);
    md_free(dev->blocks.vals);
    md_free(dev);
}

const struct md_device_info *md_device_get_info(const md_device *dev) { return &dev->info; }
const md_backend *md_device_backend(const md_device *dev) { return dev->backend; }
md_backend_kind md_device_kind(const md_device *dev) { return dev->backend->kind; }

/* ---------------------------------------------------------------------------
 * Memory: every device allocation is tracked (size by pointer) so current,
 * peak and the --memory-fraction limit are exact whatever the backend.
 * ------------------------------------------------------------------------- */

static size_t ptr_hash(const void *p, size_t cap)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return (size_t)(x & (cap - 1));
}

static md_status ptrmap_put(struct md_ptrmap *m, void *p, size_t bytes);

static md_status ptrmap_grow(struct md_ptrmap *m)
{
    struct md_ptrmap n = {0};
    n.cap = m->cap ? m->cap * 2 : 64;
    n.keys = md_calloc(n.cap, sizeof *n.keys);
    n.vals = md_calloc(n.cap, sizeof *n.vals);
    if (!n.keys || !n.vals) {
        md_free(n.keys);
        md_free(n.vals);
        return MD_ERR_OOM;
    }
    for (size_t i = 0; i < m->cap; i++)
        if (m->keys[i] && m->keys[i] != (void *)m) ptrmap_put(&n, m->keys[i], m->vals[i]);
    md_free(m->keys);
    md_free(m->vals);
    *m = n;
    return MD_OK;
}

/* Tombstones are marked with the map's own address. */
static md_status ptrmap_put(struct md_ptrmap *m, void *p, size_t bytes)
{
    if ((m->used + 1) * 2 > m->cap) MD_TRY(ptrmap_grow(m));
    size_t i = ptr_hash(p, m->cap);
    while (m->keys[i] && m->keys[i] != (void *)m) i = (i + 1) & (m->cap - 1);
    if (!m->keys[i]) m->used++;
    m->keys[i] = p;
    m->vals[i] = bytes;
    return MD_OK;
}

static int ptrmap_take(struct md_ptrmap *m, void *p, size_t *bytes)
{
    if (!m->cap) return 0;
    size_t i = ptr_hash(p, m->cap);
    while (m->keys[i]) {
        if (m->keys[i] == p) {
            *bytes = m->vals[i];
            m->keys[i] = (void *)m;
            return 1;
        }
        i = (i + 1) & (m->cap - 1);
    }
    return 0;
}

md_status md_dev_alloc(md_device *dev, size_t bytes, void **ptr, const char *what)
{
    *ptr = NULL;
    if (bytes == 0) bytes = 1;
    /* claimed against the limit first; held (current, peak) only once the
     * backend delivered it, so a refused allocation never shows in the peak */
    MD_TRY(md_memtrack_claim(&dev->mem, bytes, what));
    md_status st = alloc_fault_hit(dev, what) ? MD_ERR_OOM : dev->ops->alloc(dev, bytes, ptr);
    if (st == MD_OK && *ptr) st = ptrmap_put(&dev->blocks, *ptr, bytes);
    if (st != MD_OK || !*ptr) {
        if (*ptr) dev->ops->free(dev, *ptr, bytes);
        *ptr = NULL;
        md_memtrack_unclaim(&dev->mem, bytes);
        if (st == MD_OK || st == MD_ERR_OOM) {
            char a[32], b[32], c[32];
            return md_errf(MD_ERR_OOM, "out of memory on %s allocating %s: requested %s, in use %s, limit %s",
                           dev->info.backend, what ? what : "memory", md_fmt_bytes((double)bytes, a, sizeof a),
                           md_fmt_bytes((double)dev->mem.current, b, sizeof b),
                           dev->mem.limit ? md_fmt_bytes((double)dev->mem.limit, c, sizeof c) : "none");
        }
        return st;
    }
    md_memtrack_commit(&dev->mem, bytes);
    return MD_OK;
}

void md_dev_free(md_device *dev, void *ptr)
{
    if (!ptr) return;
    size_t bytes = 0;
    int known = ptrmap_take(&dev->blocks, ptr, &bytes);
    MD_ASSERT(known); /* freeing memory this device did not allocate */
    dev->ops->free(dev, ptr, bytes);
    md_memtrack_release(&dev->mem, bytes);
}

md_status md_dev_upload(md_device *dev, void *dst, const void *src, size_t bytes)
{
    return bytes ? dev->ops->upload(dev, dst, src, bytes) : MD_OK;
}
md_status md_dev_download(md_device *dev, void *dst, const void *src, size_t bytes)
{
    return bytes ? dev->ops->download(dev, dst, src, bytes) : MD_OK;
}
md_status md_dev_copy(md_device *dev, void *dst, const void *src, size_t bytes)
{
    return bytes ? dev->ops->copy(dev, dst, src, bytes) : MD_OK;
}
md_status md_dev_memset0(md_device *dev, void *dst, size_t bytes)
{
    return bytes ? dev->ops->memset0(dev, dst, bytes) : MD_OK;
}
md_status md_dev_sync(md_device *dev) { return dev->ops->sync(dev); }

double md_dev_fma_peak_gflops(md_device *dev, const char **isa)
{
    if (isa) *isa = NULL;
    return dev->ops->fma_peak_gflops ? dev->ops->fma_peak_gflops(dev, isa) : 0.0;
}

md_status md_dev_download_async(md_device *dev, void *dst, const void *src, size_t bytes)
{
    if (!bytes) return MD_OK;
    return dev->ops->download_async ? dev->ops->download_async(dev, dst, src, bytes)
                                    : dev->ops->download(dev, dst, src, bytes);
}
md_status md_dev_upload_side(md_device *dev, void *dst, const void *src, size_t bytes)
{
    if (!bytes) return MD_OK;
    return dev->ops->upload_side ? dev->ops->upload_side(dev, dst, src, bytes) : dev->ops->upload(dev, dst, src, bytes);
}
md_status md_dev_side_join(md_device *dev) { return dev->ops->side_join ? dev->ops->side_join(dev) : MD_OK; }

void md_dev_mem_stats(md_device *dev, struct md_mem_stats *out)
{
    memset(out, 0, sizeof *out);
    out->current = __atomic_load_n(&dev->mem.current, __ATOMIC_RELAXED);
    out->peak = __atomic_load_n(&dev->mem.peak, __ATOMIC_RELAXED);
    out->limit = dev->mem.limit;
    out->allocs = dev->mem.allocs;
    out->frees = dev->mem.frees;
    out->reserved = out->current;
    if (dev->ops->driver_mem) {
        long long reserved = 0;
        dev->ops->driver_mem(dev, &out->driver_total, &out->driver_free, &reserved);
        if (reserved > out->reserved) out->reserved = reserved;
    }
}

void md_dev_reset_peak(md_device *dev) { md_memtrack_reset_peak(&dev->mem); }

md_status md_dev_host_alloc(md_device *dev, size_t bytes, void **ptr, int *pinned)
{
    *pinned = 0;
    if (dev->ops->host_alloc_pinned && dev->info.benefits_from_pinned) {
        if (dev->ops->host_alloc_pinned(dev, bytes, ptr) == MD_OK) {
            *pinned = 1;
            return MD_OK;
        }
    }
    *ptr = md_malloc(bytes);
    return *ptr ? MD_OK : MD_ERR_OOM;
}

void md_dev_host_free(md_device *dev, void *ptr, int pinned)
{
    if (!ptr) return;
    if (pinned && dev->ops->host_free_pinned) dev->ops->host_free_pinned(dev, ptr);
    else md_free(ptr);
}

/* ---------------------------------------------------------------------------
 * Events: device timers where the backend has them, else host clock + sync.
 * ------------------------------------------------------------------------- */

struct md_event { void *impl; double host_time; };

md_status md_event_create(md_device *dev, md_event **ev)
{
    *ev = md_calloc(1, sizeof **ev);
    if (!*ev) return MD_ERR_OOM;
    if (dev->ops->event_create) {
        md_status st = dev->ops->event_create(dev, &(*ev)->impl);
        if (st != MD_OK) {
            md_free(*ev);
            *ev = NULL;
            return st;
        }
    }
    return MD_OK;
}

md_status md_event_record(md_device *dev, md_event *ev)
{
    if (ev->impl) return dev->ops->event_record(dev, ev->impl);
    MD_TRY(md_dev_sync(dev));
    ev->host_time = md_now();
    return MD_OK;
}

md_status md_event_elapsed_ms(md_device *dev, md_event *start, md_event *end, float *ms)
{
    if (start->impl && end->impl) return dev->ops->event_elapsed_ms(dev, start->impl, end->impl, ms);
    *ms = (float)((end->host_time - start->host_time) * 1e3);
    return MD_OK;
}

md_status md_event_wait(md_device *dev, md_event *ev)
{
    if (ev->impl && dev->ops->event_sync) return dev->ops->event_sync(dev, ev->impl);
    return md_dev_sync(dev);
}

void md_event_destroy(md_device *dev, md_event *ev)
{
    if (!ev) return;
    if (ev->impl && dev->ops->event_destroy) dev->ops->event_destroy(dev, ev->impl);
    md_free(ev);
}

/* ---------------------------------------------------------------------------
 * Graph capture
 * ------------------------------------------------------------------------- */

int md_dev_can_capture(md_device *dev) { return dev->ops->capture_begin != NULL; }

md_status md_dev_capture_begin(md_device *dev)
{
    if (!dev->ops->capture_begin)
        return md_errf(MD_ERR_UNSUPPORTED, "graph capture is not supported on %s", dev->info.backend);
    return dev->ops->capture_begin(dev);
}
md_status md_dev_capture_end(md_device *dev, void **graph) { return dev->ops->capture_end(dev, graph); }
md_status md_dev_graph_launch(md_device *dev, void *graph) { return dev->ops->graph_launch(dev, graph); }
void md_dev_graph_destroy(md_device *dev, void *graph)
{
    if (graph && dev->ops->graph_destroy) dev->ops->graph_destroy(dev, graph);
}

/* ---------------------------------------------------------------------------
 * Collectives
 * ------------------------------------------------------------------------- */

int md_dev_has_comm(const md_device *dev) { return dev->ops->allreduce_sum != NULL; }
int md_dev_batchnorm_sync(const md_device *dev) { return dev->ops->batchnorm_sync; }
int md_dev_batchnorm_residual(const md_device *dev) { return dev->ops->batchnorm_residual && !dev->no_bn_residual; }
void md_dev_set_batchnorm_residual(md_device *dev, int on) { dev->no_bn_residual = !on; }
int md_dev_batchnorm_pool(const md_device *dev, md_layout layout, md_dtype dtype)
{
    (void)layout; /* both */
    return dev->ops->batchnorm_pool && !dev->no_bn_pool && dtype == MD_F32;
}
void md_dev_set_batchnorm_pool(md_device *dev, int on) { dev->no_bn_pool = !on; }
int md_dev_batchnorm_pool_conv(const md_device *dev, md_layout layout, md_dtype dtype)
{
    return md_dev_batchnorm_pool(dev, layout, dtype) && dev->ops->batchnorm_pool_conv && !dev->no_bn_pool_conv &&
           layout == MD_NHWC;
}
void md_dev_set_batchnorm_pool_conv(md_device *dev, int on) { dev->no_bn_pool_conv = !on; }

static md_status no_comm(const md_device *dev)
{
    return md_errf(MD_ERR_UNSUPPORTED, "%s has no collectives of its own", dev->info.backend);
}
md_status md_dev_comm_unique_id(md_device *dev, unsigned char id[MD_COMM_ID_BYTES])
{
    return dev->ops->comm_unique_id ? dev->ops->comm_unique_id(dev, id) : no_comm(dev);
}
md_status md_dev_comm_init(md_device *dev, const unsigned char id[MD_COMM_ID_BYTES], int nranks, int rank)
{
    return dev->ops->comm_init ? dev->ops->comm_init(dev, id, nranks, rank) : no_comm(dev);
}
md_status md_dev_allreduce_sum(md_device *dev, float *buf, size_t n)
{
    return dev->ops->allreduce_sum ? dev->ops->allreduce_sum(dev, buf, n) : no_comm(dev);
}
md_status md_dev_allreduce_start(md_device *dev, float *buf, size_t n)
{
    return dev->ops->allreduce_start ? dev->ops->allreduce_start(dev, buf, n) : md_dev_allreduce_sum(dev, buf, n);
}
md_status md_dev_allreduce_join(md_device *dev)
{
    return dev->ops->allreduce_join ? dev->ops->allreduce_join(dev) : MD_OK;
}
md_status md_dev_comm_busy_ms(md_device *dev, float *ms)
{
    *ms = 0;
    if (!dev->ops->comm_busy_ms) return md_errf(MD_ERR_UNSUPPORTED, "%s does not time its collectives", dev->info.backend);
    return dev->ops->comm_busy_ms(dev, ms);
}
md_status md_dev_comm_check(md_device *dev) { return dev->ops->comm_check ? dev->ops->comm_check(dev) : MD_OK; }
void md_dev_comm_abort(md_device *dev)
{
    if (dev->ops->comm_abort) dev->ops->comm_abort(dev);
}

int md_dev_supports(const md_device *dev, int kernel_index)
{
    MD_ASSERT(kernel_index >= 0 && kernel_index < MD_KERNEL_COUNT);
    void (*const *table)(void) = (void (*const *)(void))(const void *)&dev->ops->kernels;
    return table[kernel_index] != NULL;
}

long long md_dev_fallback_count(const md_device *dev, int kernel_index)
{
    MD_ASSERT(kernel_index >= 0 && kernel_index < MD_KERNEL_COUNT);
    return dev->fallback_calls[kernel_index];
}

void md_dev_raise_peak(md_device *dev, long long peak)
{
    long long pk = __atomic_load_n(&dev->mem.peak, __ATOMIC_RELAXED);
    while (peak > pk && !__atomic_compare_exchange_n(&dev->mem.peak, &pk, peak, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
    }
}
