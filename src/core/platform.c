/* platform.c - host facts from /proc, sysconf and sysctl. */
#define _GNU_SOURCE
#include "core/platform.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if !defined(__APPLE__)
#include <sched.h>
#endif
#if defined(__APPLE__)
#include <mach-o/dyld.h>
#include <mach/mach.h>
#include <sys/sysctl.h>
#endif

static char cpu_model[256];
static char cpu_flags[4096];
static int facts_read;

static void read_cpuinfo(void)
{
    if (facts_read) return;
    facts_read = 1;
#if defined(__APPLE__)
    size_t n = sizeof cpu_model;
    if (sysctlbyname("machdep.cpu.brand_string", cpu_model, &n, NULL, 0) != 0) cpu_model[0] = '\0';
#if defined(__aarch64__)
    snprintf(cpu_flags, sizeof cpu_flags, "neon");
#endif
#else
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return;
    char line[8192];
    while (fgets(line, sizeof line, f)) {
        char *colon = strchr(line, ':');
        if (!colon) continue;
        char *val = colon + 1;
        while (*val == ' ' || *val == '\t') val++;
        val[strcspn(val, "\n")] = '\0';
        if (!cpu_model[0] && strncmp(line, "model name", 10) == 0)
            snprintf(cpu_model, sizeof cpu_model, "%s", val);
        else if (!cpu_flags[0] && (strncmp(line, "flags", 5) == 0 || strncmp(line, "Features", 8) == 0))
            snprintf(cpu_flags, sizeof cpu_flags, "%s", val);
    }
    fclose(f);
#endif
}

const char *md_cpu_model(void) { read_cpuinfo(); return cpu_model; }

int md_cpu_has(const char *feature)
{
    read_cpuinfo();
    size_t n = strlen(feature);
    for (const char *p = cpu_flags; (p = strstr(p, feature)) != NULL; p += n) {
        int start_ok = p == cpu_flags || p[-1] == ' ';
        int end_ok = p[n] == ' ' || p[n] == '\0';
        if (start_ok && end_ok) return 1;
    }
    return 0;
}

const char *md_cpu_simd(void)
{
    static char simd[256];
    if (simd[0]) return simd;
    static const char *const want[] = {"sse4_2", "avx", "avx2", "fma", "f16c", "avx512f",
                                       "avx512bw", "avx512_bf16", "avx512_fp16", "amx_bf16",
                                       "neon", "asimd", "sve"};
    size_t o = 0;
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        if (md_cpu_has(want[i]) && o + strlen(want[i]) + 2 < sizeof simd)
            o += (size_t)snprintf(simd + o, sizeof simd - o, "%s%s", o ? " " : "", want[i]);
    if (!o) snprintf(simd, sizeof simd, "unknown");
    return simd;
}

int md_cpu_logical_cores(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int md_cpu_physical_cores(void)
{
#if defined(__APPLE__)
    int v = 0;
    size_t n = sizeof v;
    if (sysctlbyname("hw.physicalcpu", &v, &n, NULL, 0) == 0 && v > 0) return v;
    return md_cpu_logical_cores();
#else
    /* Count distinct (physical id, core id) pairs among online CPUs that this
     * process may use. */
    cpu_set_t set;
    int allowed = md_cpu_logical_cores();
    if (sched_getaffinity(0, sizeof set, &set) == 0) allowed = CPU_COUNT(&set);
    FILE *f = fopen("/proc/cpuinfo", "r");
    if (!f) return allowed;
    char line[512];
    int phys = -1, pairs[1024][2], npairs = 0;
    while (fgets(line, sizeof line, f)) {
        int v;
        if (sscanf(line, "physical id : %d", &v) == 1) phys = v;
        else if (sscanf(line, "core id : %d", &v) == 1) {
            int seen = 0;
            for (int i = 0; i < npairs; i++)
                if (pairs[i][0] == phys && pairs[i][1] == v) seen = 1;
            if (!seen && npairs < 1024) {
                pairs[npairs][0] = phys;
                pairs[npairs][1] = v;
                npairs++;
            }
        }
    }
    fclose(f);
    int cores = npairs > 0 ? npairs : allowed;
    return cores < allowed ? cores : allowed;
#endif
}

static long long meminfo_field(const char *key)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    long long kb = 0;
    size_t n = strlen(key);
    while (fgets(line, sizeof line, f))
        if (strncmp(line, key, n) == 0 && line[n] == ':') {
            sscanf(line + n + 1, "%lld", &kb);
            break;
        }
    fclose(f);
    return kb * 1024;
}

long long md_mem_total_bytes(void)
{
#if defined(__APPLE__)
    long long v = 0;
    size_t n = sizeof v;
    return sysctlbyname("hw.memsize", &v, &n, NULL, 0) == 0 ? v : 0;
#else
    return meminfo_field("MemTotal");
#endif
}

long long md_mem_available_bytes(void)
{
#if defined(__APPLE__)
    return 0; /* filled from host_statistics by the Metal/diag code where known */
#else
    return meminfo_field("MemAvailable");
#endif
}

const char *md_exe_dir(void)
{
    static char dir[4096];
    if (dir[0]) return dir;
#if defined(__APPLE__)
    uint32_t n = sizeof dir;
    if (_NSGetExecutablePath(dir, &n) != 0) { dir[0] = '\0'; return dir; }
#else
    ssize_t n = readlink("/proc/self/exe", dir, sizeof dir - 1);
    if (n <= 0) { dir[0] = '\0'; return dir; }
    dir[n] = '\0';
#endif
    char *slash = strrchr(dir, '/');
    if (slash) *slash = '\0';
    return dir;
}

long long md_rss_bytes(void)
{
#if defined(__APPLE__)
    struct mach_task_basic_info info;
    mach_msg_type_number_t count = MACH_TASK_BASIC_INFO_COUNT;
    if (task_info(mach_task_self(), MACH_TASK_BASIC_INFO, (task_info_t)&info, &count) != KERN_SUCCESS) return 0;
    return (long long)info.resident_size;
#else
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return 0;
    long long size = 0, resident = 0;
    int ok = fscanf(f, "%lld %lld", &size, &resident) == 2;
    fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    return ok && page > 0 ? resident * (long long)page : 0;
#endif
}
