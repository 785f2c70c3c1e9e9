/* energy.c - NVML and RAPL energy counters (energy.h). */
#define _POSIX_C_SOURCE 200809L
#include "diag/energy.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/timer.h"

static void set_none(struct md_energy *e, const char *fmt, const char *a, const char *b)
{
    e->kind = MD_ENERGY_NONE;
    snprintf(e->reason, sizeof e->reason, fmt, a ? a : "", b ? b : "");
}

/* The first line of a small sysfs file as a number; -errno on failure. */
static int read_num(const char *path, double *v)
{
    FILE *f = fopen(path, "r");
    if (!f) return -errno;
    char line[64];
    int ok = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    if (!ok) return -EIO;
    char *end;
    *v = strtod(line, &end);
    return end == line ? -EINVAL : 0;
}

static int read_line(const char *path, char *out, size_t n)
{
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int ok = fgets(out, (int)n, f) != NULL;
    fclose(f);
    if (!ok) return -1;
    out[strcspn(out, "\n")] = '\0';
    return 0;
}

static int cmp_str(const void *a, const void *b) { return strcmp((const char *)a, (const char *)b); }

void md_energy_open_rapl(struct md_energy *e, const char *root)
{
    memset(e, 0, sizeof *e);
    DIR *d = opendir(root);
    if (!d) {
        set_none(e, "RAPL: %s cannot be opened (no powercap interface: not Linux, or a virtual machine)%s", root,
                 NULL);
        return;
    }
    /* the packages: "intel-rapl:N" (the kernel uses this name on AMD too);
     * "intel-rapl:N:M" are parts of package N, and "psys" covers the
     * platform, packages included, so neither is added */
    char names[MD_ENERGY_MAX_ZONES][64];
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) && n < MD_ENERGY_MAX_ZONES) {
        unsigned k;
        char rest;
        if (sscanf(de->d_name, "intel-rapl:%u%c", &k, &rest) != 1) continue;
        snprintf(names[n++], sizeof names[0], "%s", de->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], cmp_str);
    char list[160] = "";
    for (int i = 0; i < n; i++) {
        char p[600], zname[64] = "";
        snprintf(p, sizeof p, "%s/%s/name", root, names[i]);
        if (read_line(p, zname, sizeof zname) == 0 && strcmp(zname, "psys") == 0) continue;
        snprintf(p, sizeof p, "%s/%s/energy_uj", root, names[i]);
        double v;
        int rc = read_num(p, &v);
        if (rc != 0) {
            if (rc == -EACCES || rc == -EPERM)
                set_none(e, "RAPL: %s is readable by root only (Linux 5.10 and later restrict it; an administrator "
                            "can allow reading it, e.g. chmod o+r)%s", p, NULL);
            else
                set_none(e, "RAPL: %s cannot be read: %s", p, strerror(-rc));
            e->nzones = 0;
            return;
        }
        int z = e->nzones++;
        snprintf(e->zone[z], sizeof e->zone[z], "%s", p);
        snprintf(p, sizeof p, "%s/%s/max_energy_range_uj", root, names[i]);
        if (read_num(p, &e->max_uj[z]) != 0) e->max_uj[z] = 0;
        size_t l = strlen(list);
        snprintf(list + l, sizeof list - l, "%s%s", l ? ", " : "", zname[0] ? zname : names[i]);
    }
    if (e->nzones == 0) {
        set_none(e, "RAPL: no package zone (intel-rapl:N) under %s (the intel_rapl driver is not loaded, or the "
                    "CPU has none)%s", root, NULL);
        return;
    }
    e->kind = MD_ENERGY_RAPL;
    snprintf(e->source, sizeof e->source, "RAPL: %s (the CPU package%s, all processes)", list,
             e->nzones > 1 ? "s" : "");
}

/* NVML's types, declared here (nvml.h is not needed to build). */
typedef int (*nvml_fn0)(void);
typedef int (*nvml_by_index)(unsigned, void **);
typedef int (*nvml_by_uuid)(const char *, void **);
typedef int (*nvml_name)(void *, char *, unsigned);
typedef const char *(*nvml_errstr)(int);

/* POSIX: what dlsym returns for a function is callable (NULL when absent) */
#define SYM(lib, name, var)                            \
    do {                                               \
        void *p_ = dlsym(lib, name);                   \
        memcpy(&(var), &p_, sizeof(var));              \
    } while (0)

/* The NVML device of CUDA device `index`: CUDA_VISIBLE_DEVICES renumbers
 * the devices CUDA sees (by index or by UUID); NVML counts every device. */
static int nvml_handle(void *lib, int index, void **dev)
{
    nvml_by_index by_index;
    nvml_by_uuid by_uuid;
    SYM(lib, "nvmlDeviceGetHandleByIndex_v2", by_index);
    SYM(lib, "nvmlDeviceGetHandleByUUID", by_uuid);
    if (!by_index) return -1;
    const char *vis = getenv("CUDA_VISIBLE_DEVICES");
    if (vis && *vis) {
        char buf[512];
        snprintf(buf, sizeof buf, "%s", vis);
        char *save = NULL, *tok = strtok_r(buf, ",", &save);
        for (int i = 0; tok && i < index; i++) tok = strtok_r(NULL, ",", &save);
        if (tok) {
            while (*tok == ' ') tok++;
            if ((!strncmp(tok, "GPU-", 4) || !strncmp(tok, "MIG-", 4)) && by_uuid) return by_uuid(tok, dev);
            char *end;
            long k = strtol(tok, &end, 10);
            if (end != tok && k >= 0) return by_index((unsigned)k, dev);
        }
    }
    return by_index((unsigned)index, dev);
}

static void open_nvml(struct md_energy *e, int index, const char *name)
{
    const char *path = getenv("MPSDIAG_NVML_LIB");
    if (!path || !*path) path = "libnvidia-ml.so.1";
    e->lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!e->lib) {
        const char *why = dlerror();
        set_none(e, "NVML: %s cannot be loaded (%s)", path, why ? why : "unknown error");
        return;
    }
    nvml_fn0 init;
    nvml_errstr errstr;
    SYM(e->lib, "nvmlInit_v2", init);
    SYM(e->lib, "nvmlErrorString", errstr);
    SYM(e->lib, "nvmlShutdown", e->nvml_shutdown);
    SYM(e->lib, "nvmlDeviceGetTotalEnergyConsumption", e->nvml_energy);
    if (!init || !e->nvml_shutdown || !e->nvml_energy) {
        set_none(e, "NVML: %s lacks nvmlInit_v2 or nvmlDeviceGetTotalEnergyConsumption (driver too old)%s", path,
                 NULL);
        dlclose(e->lib);
        e->lib = NULL;
        return;
    }
    int rc = init();
    if (rc != 0) {
        set_none(e, "NVML: nvmlInit failed: %s%s", errstr ? errstr(rc) : "error", NULL);
        dlclose(e->lib);
        e->lib = NULL;
        e->nvml_shutdown = NULL;
        return;
    }
    if ((rc = nvml_handle(e->lib, index, &e->nvdev)) != 0) {
        set_none(e, "NVML: no handle for the CUDA device: %s%s", errstr ? errstr(rc) : "error", NULL);
        md_energy_close(e);
        return;
    }
    unsigned long long mj = 0;
    if ((rc = e->nvml_energy(e->nvdev, &mj)) != 0) {
        set_none(e, "NVML: the energy counter cannot be read: %s (it needs a Volta or later GPU)%s",
                 errstr ? errstr(rc) : "error", NULL);
        md_energy_close(e);
        return;
    }
    char nm[96] = "";
    nvml_name getname;
    SYM(e->lib, "nvmlDeviceGetName", getname);
    if (getname) getname(e->nvdev, nm, sizeof nm);
    e->kind = MD_ENERGY_NVML;
    if (name && nm[0] && !strstr(name, nm) && !strstr(nm, name))
        snprintf(e->source, sizeof e->source, "NVML: %.60s (the whole board; CUDA names it %.60s)", nm, name);
    else
        snprintf(e->source, sizeof e->source, "NVML: %.100s (the whole board, all processes)", nm[0] ? nm : "GPU");
}

void md_energy_open(struct md_energy *e, md_backend_kind kind, int index, const char *name)
{
    memset(e, 0, sizeof *e);
    if (kind == MD_BACKEND_CUDA) {
        open_nvml(e, index, name);
        return;
    }
#if defined(__APPLE__)
    (void)index, (void)name;
    set_none(e, "macOS exposes energy counters only to root (powermetrics needs sudo; IOReport's energy channels "
                "are a private framework)%s%s", NULL, NULL);
#else
    (void)index, (void)name;
    if (kind == MD_BACKEND_METAL) {
        set_none(e, "the Metal backend runs only on macOS, whose energy counters need root%s%s", NULL, NULL);
        return;
    }
    const char *root = getenv("MPSDIAG_POWERCAP_ROOT");
    md_energy_open_rapl(e, root && *root ? root : "/sys/class/powercap");
#endif
}

int md_energy_read(struct md_energy *e, struct md_energy_reading *r)
{
    memset(r, 0, sizeof *r);
    r->t = md_now();
    if (e->kind == MD_ENERGY_NVML) {
        unsigned long long mj = 0;
        if (e->nvml_energy(e->nvdev, &mj) != 0) {
            set_none(e, "NVML: the energy counter stopped answering%s%s", NULL, NULL);
            return -1;
        }
        r->v[0] = (double)mj;
        return 0;
    }
    if (e->kind == MD_ENERGY_RAPL) {
        for (int z = 0; z < e->nzones; z++) {
            int rc = read_num(e->zone[z], &r->v[z]);
            if (rc != 0) {
                set_none(e, "RAPL: %s cannot be read: %s", e->zone[z], strerror(-rc));
                return -1;
            }
        }
        return 0;
    }
    return -1;
}

double md_energy_joules(const struct md_energy *e, const struct md_energy_reading *a,
                        const struct md_energy_reading *b)
{
    if (e->kind == MD_ENERGY_NVML) return b->v[0] >= a->v[0] ? (b->v[0] - a->v[0]) / 1e3 : (double)NAN;
    if (e->kind != MD_ENERGY_RAPL) return (double)NAN;
    double uj = 0;
    for (int z = 0; z < e->nzones; z++) {
        double d = b->v[z] - a->v[z];
        if (d < 0) {
            if (e->max_uj[z] <= 0) return (double)NAN;
            d += e->max_uj[z]; /* wrapped once: no window is long enough to wrap twice */
        }
        uj += d;
    }
    return uj / 1e6;
}

void md_energy_close(struct md_energy *e)
{
    if (e->lib) {
        if (e->nvml_shutdown) e->nvml_shutdown();
        dlclose(e->lib);
    }
    e->lib = NULL;
    e->nvdev = NULL;
    e->nvml_energy = NULL;
    e->nvml_shutdown = NULL;
    if (e->kind == MD_ENERGY_NVML) e->kind = MD_ENERGY_NONE;
}
