/* sysinfo.h - system and device information for the report. */
#ifndef MD_SYSINFO_H
#define MD_SYSINFO_H

#include <cjson/cJSON.h>

#include "core/status.h"

/* Gathers OS, CPU, memory, BLAS, library versions and compiler into a new
 * JSON object (caller owns). Unknown values are the string "unknown". */
cJSON *md_sysinfo_collect(void);
/* Prints the System section from that object. */
void md_sysinfo_print(const cJSON *sys);

/* Probes every user-visible backend and returns an array of device objects
 * (one per device, or one per unavailable backend with its reason). */
cJSON *md_devices_collect(void);
/* Prints the aligned device table (--list-devices and the Devices section). */
void md_devices_print(const cJSON *devices);

#endif
