/* energy.h - energy counters that the platform exposes without special
 * privileges, read around a measurement to give joules per step.
 *
 *   NVIDIA GPUs: NVML's total energy counter (millijoules since the driver
 *   loaded; Volta and later), through libnvidia-ml.so.1 opened at run time
 *   (no link-time dependency; MPSDIAG_NVML_LIB names another file, tests).
 *   Linux CPUs: RAPL through powercap, /sys/class/powercap/intel-rapl:N/
 *   energy_uj of every package (microjoules; wraps at max_energy_range_uj).
 *   Since Linux 5.10 these files are readable by root only unless an
 *   administrator allows more. MPSDIAG_POWERCAP_ROOT names another folder
 *   (tests).
 *   macOS: nothing without root (powermetrics needs sudo; IOReport's energy
 *   channels are a private framework), so the reason says so.
 *
 * md_energy_open never fails: a source that cannot be read has kind
 * MD_ENERGY_NONE and a one-line reason, which the report shows as it is.
 */
#ifndef MD_ENERGY_H
#define MD_ENERGY_H

#include "backend/backend.h"

enum md_energy_kind { MD_ENERGY_NONE, MD_ENERGY_NVML, MD_ENERGY_RAPL };

#define MD_ENERGY_MAX_ZONES 8

struct md_energy {
    enum md_energy_kind kind;
    char source[160];   /* what is measured: "NVML: NVIDIA H100 (the whole board)", "RAPL: package-0" */
    char reason[400];   /* why not available; "" when available */
    /* RAPL: one counter per package */
    int nzones;
    char zone[MD_ENERGY_MAX_ZONES][512]; /* energy_uj paths */
    double max_uj[MD_ENERGY_MAX_ZONES];  /* max_energy_range_uj (0 = unknown) */
    /* NVML */
    void *lib, *nvdev;
    int (*nvml_energy)(void *dev, unsigned long long *mj);
    int (*nvml_shutdown)(void);
};

/* One reading of every counter, in the source's units (RAPL: uJ per zone;
 * NVML: mJ in v[0]). */
struct md_energy_reading {
    double v[MD_ENERGY_MAX_ZONES];
    double t;            /* md_now() when read */
};

/* The source for a device: NVML for CUDA device `index` (`name` checks that
 * NVML's device is the same one), RAPL for the CPU backends, a reason for
 * Metal and elsewhere. Close with md_energy_close. */
void md_energy_open(struct md_energy *e, md_backend_kind kind, int index, const char *name);
/* RAPL from the powercap folder `root` (tests; md_energy_open uses
 * MPSDIAG_POWERCAP_ROOT or /sys/class/powercap). */
void md_energy_open_rapl(struct md_energy *e, const char *root);
/* Reads every counter. 0 on success, -1 when a read failed (e->reason says
 * which; the source is then no longer used). */
int md_energy_read(struct md_energy *e, struct md_energy_reading *r);
/* Joules between two readings, a counter that wrapped counted once round
 * (RAPL: max_energy_range_uj); NaN when a wrap cannot be undone. */
double md_energy_joules(const struct md_energy *e, const struct md_energy_reading *a,
                        const struct md_energy_reading *b);
void md_energy_close(struct md_energy *e);

#endif
