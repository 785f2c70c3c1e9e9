/* sysinfo.c - what machine this is, for people and for the JSON report. */
#define _GNU_SOURCE
#include "diag/sysinfo.h"

#include <cblas.h>
#include <jconfig.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <zlib.h>

#include "backend/backend.h"
#include "core/blas_core.h"
#include "core/log.h"
#include "core/mem.h"
#include "core/platform.h"

#define STR_(x) #x
#define STR(x) STR_(x)

static void add_str(cJSON *o, const char *k, const char *v)
{
    cJSON_AddStringToObject(o, k, v && *v ? v : "unknown");
}

static void add_bytes(cJSON *o, const char *k, long long v)
{
    if (v > 0) cJSON_AddNumberToObject(o, k, (double)v);
    else cJSON_AddStringToObject(o, k, "unknown");
}

/* OpenBLAS 0.3.21 picks older kernels on CPUs it does not know (Haswell's
 * on AMD Zen 4, Prescott's on some recent Xeons): GEMM then runs at a third
 * to a half of the attainable rate. main() chooses for it
 * (core/blas_core.h); where that did not happen, say so, with the variable
 * that overrides it. */
static void blas_advice(const char *core, char *buf, size_t n)
{
    buf[0] = '\0';
    const char *better = md_blas_core_better(core);
    if (!better) return;
    const char *forced = getenv("OPENBLAS_CORETYPE");
    if (strcmp(md_blas_core_chosen_by(), "mpsdiag") == 0)
        snprintf(buf, n, "mpsdiag set OPENBLAS_CORETYPE=%s for this CPU but OpenBLAS kept its %s kernels", forced,
                 core);
    else if (forced && *forced)
        snprintf(buf, n, "OPENBLAS_CORETYPE=%s in the environment forces OpenBLAS's %s kernels; this CPU runs its "
                         "%s ones (unset the variable) for up to 2-4x faster GEMM", forced, core, better);
    else
        snprintf(buf, n, "OpenBLAS chose its %s kernels; OPENBLAS_CORETYPE=%s may double GEMM throughput", core,
                 better);
}

cJSON *md_sysinfo_collect(void)
{
    cJSON *s = cJSON_CreateObject();
    struct utsname u;
    if (uname(&u) == 0) {
        add_str(s, "os", u.sysname);
        add_str(s, "kernel", u.release);
        add_str(s, "machine", u.machine);
        add_str(s, "hostname", u.nodename);
    } else {
        add_str(s, "os", NULL);
        add_str(s, "kernel", NULL);
        add_str(s, "machine", NULL);
        add_str(s, "hostname", NULL);
    }
    FILE *f = fopen("/etc/os-release", "r");
    char pretty[256] = "";
    if (f) {
        char line[512];
        while (fgets(line, sizeof line, f))
            if (strncmp(line, "PRETTY_NAME=", 12) == 0) {
                char *v = line + 12;
                v[strcspn(v, "\n")] = '\0';
                if (*v == '"') { v++; v[strcspn(v, "\"")] = '\0'; }
                snprintf(pretty, sizeof pretty, "%s", v);
            }
        fclose(f);
    }
    add_str(s, "os_release", pretty);
    add_str(s, "cpu_model", md_cpu_model());
    cJSON_AddNumberToObject(s, "physical_cores", md_cpu_physical_cores());
    cJSON_AddNumberToObject(s, "logical_cores", md_cpu_logical_cores());
    add_str(s, "simd", md_cpu_simd());
    add_bytes(s, "ram_total_bytes", md_mem_total_bytes());
    add_bytes(s, "ram_available_bytes", md_mem_available_bytes());

    cJSON *blas = cJSON_AddObjectToObject(s, "blas");
    add_str(blas, "library", "OpenBLAS");
    add_str(blas, "config", openblas_get_config());
    add_str(blas, "core", openblas_get_corename());
    add_str(blas, "core_chosen_by", md_blas_core_chosen_by());
    const char *pick = md_blas_core_openblas_pick();
    if (pick) cJSON_AddStringToObject(blas, "core_openblas_picked", pick);
    else cJSON_AddNullToObject(blas, "core_openblas_picked");
    cJSON_AddNumberToObject(blas, "threads", openblas_get_num_threads());
    char advice[256];
    blas_advice(openblas_get_corename(), advice, sizeof advice);
    if (advice[0]) cJSON_AddStringToObject(blas, "warning", advice);
    else cJSON_AddNullToObject(blas, "warning");

    /* how the CPU backend convolves here (its device info says) */
    struct md_device_info cpu = {0};
    const md_backend *cb = md_backend_find("cpu");
    add_str(s, "cpu_convolution", cb && md_backend_device_info(cb, 0, &cpu) == MD_OK ? cpu.conv_impl : "unknown");

    cJSON *lib = cJSON_AddObjectToObject(s, "libraries");
    add_str(lib, "cjson", cJSON_Version());
    add_str(lib, "libjpeg_turbo", STR(LIBJPEG_TURBO_VERSION));
    add_str(lib, "zlib", zlibVersion());
#if defined(__clang__)
    char cc[128];
    snprintf(cc, sizeof cc, "clang %s", __clang_version__);
    add_str(s, "compiler", cc);
#elif defined(__GNUC__)
    char cc[128];
    snprintf(cc, sizeof cc, "gcc %s", __VERSION__);
    add_str(s, "compiler", cc);
#else
    add_str(s, "compiler", NULL);
#endif
    return s;
}

static const char *js(const cJSON *o, const char *k)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, k);
    return cJSON_IsString(it) ? it->valuestring : "unknown";
}

static const char *jbytes(const cJSON *o, const char *k, char *buf, size_t n)
{
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(o, k);
    if (!cJSON_IsNumber(it)) return "unknown";
    return md_fmt_bytes(it->valuedouble, buf, n);
}

void md_sysinfo_print(const cJSON *s)
{
    char a[32], b[32];
    const cJSON *blas = cJSON_GetObjectItemCaseSensitive(s, "blas");
    const cJSON *lib = cJSON_GetObjectItemCaseSensitive(s, "libraries");
    md_section("System");
    md_out("  %-16s %s %s (%s)\n", "OS", js(s, "os"), js(s, "kernel"), js(s, "os_release"));
    md_out("  %-16s %s\n", "CPU", js(s, "cpu_model"));
    md_out("  %-16s %d physical, %d logical\n", "Cores",
           cJSON_GetObjectItemCaseSensitive(s, "physical_cores")->valueint,
           cJSON_GetObjectItemCaseSensitive(s, "logical_cores")->valueint);
    md_out("  %-16s %s\n", "SIMD", js(s, "simd"));
    md_out("  %-16s %s total, %s available\n", "RAM", jbytes(s, "ram_total_bytes", a, sizeof a),
           jbytes(s, "ram_available_bytes", b, sizeof b));
    /* the version from the build config ("OpenBLAS 0.3.21 DYNAMIC_ARCH ..."); the
     * core name is the kernel set OpenBLAS chose, not the CPU's family */
    char ver[32] = "";
    const char *cfg = js(blas, "config");
    if (strncmp(cfg, "OpenBLAS ", 9) == 0) sscanf(cfg + 9, "%31s", ver);
    md_out("  %-16s OpenBLAS%s%s (its %s kernel set; GEMM in tiles on mpsdiag's CPU threads)\n", "BLAS",
           ver[0] ? " " : "", ver, js(blas, "core"));
    md_verbose("  %-16s %s\n", "BLAS config", js(blas, "config"));
    const cJSON *w = cJSON_GetObjectItemCaseSensitive(blas, "warning");
    const cJSON *pick = cJSON_GetObjectItemCaseSensitive(blas, "core_openblas_picked");
    if (cJSON_IsString(w)) md_out("  %-16s %s\n", "BLAS note", w->valuestring);
    else if (cJSON_IsString(pick))
        md_out("  %-16s %s kernels chosen by mpsdiag; OpenBLAS picked %s for this CPU\n",
               "BLAS note", js(blas, "core"), pick->valuestring);
    md_out("  %-16s %s\n", "CPU convolution", js(s, "cpu_convolution"));
    md_out("  %-16s cJSON %s, libjpeg-turbo %s, zlib %s\n", "Libraries", js(lib, "cjson"),
           js(lib, "libjpeg_turbo"), js(lib, "zlib"));
    md_out("  %-16s %s\n", "Compiler", js(s, "compiler"));
}

cJSON *md_devices_collect(void)
{
    cJSON *arr = cJSON_CreateArray();
    for (int i = 0; i < md_backend_count(); i++) {
        const md_backend *b = md_backend_at(i);
        if (md_backend_kind_of(b) == MD_BACKEND_REF) continue;
        const struct md_probe *p = md_backend_probe(b);
        int count = p->available ? p->device_count : 1;
        for (int d = 0; d < count; d++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "backend", md_backend_name(b));
            cJSON_AddNumberToObject(o, "index", d);
            cJSON_AddBoolToObject(o, "built", p->built);
            struct md_device_info info;
            if (p->available && md_backend_device_info(b, d, &info) == MD_OK) {
                cJSON_AddBoolToObject(o, "available", 1);
                cJSON_AddNullToObject(o, "reason");
                add_str(o, "name", info.name);
                cJSON_AddNumberToObject(o, "compute_units", info.compute_units);
                add_bytes(o, "total_memory_bytes", info.total_memory);
                add_bytes(o, "free_memory_bytes", info.free_memory);
                if (info.recommended_working_set > 0)
                    cJSON_AddNumberToObject(o, "recommended_working_set_bytes", (double)info.recommended_working_set);
                add_str(o, "arch", info.arch);
                if (info.cc_major)
                    cJSON_AddNumberToObject(o, "compute_capability", info.cc_major + info.cc_minor / 10.0);
                if (info.driver_version[0]) add_str(o, "driver_version", info.driver_version);
                if (info.runtime_version[0]) add_str(o, "runtime_version", info.runtime_version);
                if (info.blas[0]) add_str(o, "blas", info.blas);
                if (info.dnn[0]) add_str(o, "dnn", info.dnn);
                if (info.family[0]) add_str(o, "gpu_family", info.family);
                cJSON_AddBoolToObject(o, "unified_memory", info.unified_memory);
                cJSON_AddBoolToObject(o, "fp16", info.supports_fp16);
                cJSON_AddBoolToObject(o, "bf16", info.supports_bf16);
                cJSON_AddBoolToObject(o, "tf32", info.supports_tf32);
            } else {
                cJSON_AddBoolToObject(o, "available", 0);
                cJSON_AddStringToObject(o, "reason", p->reason[0] ? p->reason : md_errmsg());
            }
            cJSON_AddItemToArray(arr, o);
        }
    }
    return arr;
}

void md_devices_print(const cJSON *devices)
{
    md_out("  %-8s %-9s %-40s %6s %11s  %s\n", "DEVICE", "STATUS", "NAME", "UNITS", "MEMORY", "NOTE");
    const cJSON *d;
    cJSON_ArrayForEach(d, devices)
    {
        char id[32], mem[32] = "-", units[16] = "-";
        snprintf(id, sizeof id, "%s:%d", js(d, "backend"), cJSON_GetObjectItemCaseSensitive(d, "index")->valueint);
        int avail = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(d, "available"));
        if (avail) {
            jbytes(d, "total_memory_bytes", mem, sizeof mem);
            snprintf(units, sizeof units, "%d", cJSON_GetObjectItemCaseSensitive(d, "compute_units")->valueint);
            md_out("  %-8s %-9s %-40.40s %6s %11s  %s\n", id, "available", js(d, "name"), units, mem, js(d, "arch"));
        } else {
            /* the reason spans the other columns (wrapped under them) */
            md_out("  %-8s %-9s %s\n", id, "missing", js(d, "reason"));
        }
    }
}
