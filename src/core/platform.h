/* platform.h - facts about the host machine, read from the OS.
 * Every function answers "unknown" (0 or "") rather than inventing a value. */
#ifndef MD_PLATFORM_H
#define MD_PLATFORM_H

#include <stddef.h>

/* Room for a path in fixed-size option and state buffers. */
#define MD_PATH_MAX 1024

int md_cpu_physical_cores(void);
int md_cpu_logical_cores(void);
/* CPU model string ("AMD EPYC 9654 96-Core Processor"); "" if unknown. */
const char *md_cpu_model(void);
/* Bytes of RAM in total / available now; 0 if unknown. */
long long md_mem_total_bytes(void);
/* Resident set size of this process now, in bytes (Linux: /proc/self/statm;
 * macOS: the task's resident size), or 0 if unknown. */
long long md_rss_bytes(void);
long long md_mem_available_bytes(void);
/* SIMD features the CPU reports, space separated ("sse4.2 avx2 fma avx512f ..."). */
const char *md_cpu_simd(void);
int md_cpu_has(const char *feature); /* exact flag name, e.g. "avx512f" */
/* Directory of the running executable (for plug-ins); "" if unknown. */
const char *md_exe_dir(void);

#endif
