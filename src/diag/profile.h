/* profile.h - the pure parts of the per-layer profile and the leak check
 * (docs/doctor.md): rows per layer or per block, sorted by time, with their
 * achieved rates against the device's peaks; and the verdict on memory
 * measured after each of N training steps. The benchmark (bench.h) measures,
 * the application layer prints and reports; tests fabricate the inputs. */
#ifndef MD_PROFILE_H
#define MD_PROFILE_H

#include <stddef.h>

/* One timed layer of a training step (means over the profiled steps). */
struct md_prof_layer {
    char name[128];
    char type[32];
    double fwd_ms, bwd_ms;
    double flops;   /* forward + backward, per step (backward = 2x forward) */
    double bytes;   /* forward + backward, per step (backward = 2x forward) */
    int layers;     /* layers in the row (a block's row sums them) */
};

/* A row's rates: GFLOP/s and GB/s, and the fractions of the peaks (NaN when
 * the peak is unknown or the row took no time). */
struct md_prof_rates {
    double gflops, gbs;
    double frac_flops, frac_bytes;
};
void md_prof_rates_of(const struct md_prof_layer *l, double peak_gflops, double peak_gbs, struct md_prof_rates *out);

/* The block a layer belongs to: its name up to and including the first part
 * that is a number ("layer1.0.conv1" -> "layer1.0", "blocks.3.attn.qkv" ->
 * "blocks.3"); a name without a numbered part is its own block. */
const char *md_prof_block_of(const char *name, char *buf, size_t n);

/* Rows of `in` (n layers): every layer (blocks = 0) or one row per block,
 * summed; sorted by forward + backward time, largest first. Returns the
 * number of rows written to out (room for n). */
int md_prof_rows(const struct md_prof_layer *in, int n, int blocks, struct md_prof_layer *out);

/* ---- leak check ---- */

/* The bounds (docs/doctor.md): the first max(2, n/4) steps are warm-up
 * (caches, lazy plans, the allocator's first blocks); over the steps after
 * them, growth = last - first is flagged when it exceeds
 * max(floor, rel x first). The tool's own accounting is exact: floor 1 MiB,
 * rel 0.5%; what the OS or the driver reports moves with allocator pages:
 * floor 8 MiB, rel 2%. At least MD_LEAK_MIN_STEPS steps are needed. */
#define MD_LEAK_MIN_STEPS 5
#define MD_LEAK_TOOL_FLOOR (1024.0 * 1024.0)
#define MD_LEAK_TOOL_REL 0.005
#define MD_LEAK_OS_FLOOR (8.0 * 1024.0 * 1024.0)
#define MD_LEAK_OS_REL 0.02

struct md_leak_verdict {
    int judged;          /* 0: too few steps (or no figures) */
    int flagged;
    int warmup;          /* steps left out */
    double first, last;  /* bytes after the first judged step and the last */
    double growth;       /* last - first */
    double per_step;     /* growth per judged step */
    double bound;        /* the growth allowed */
};
/* v[0..n): bytes after each step (values <= 0 mean "not known": not judged). */
void md_leak_judge(const double *v, int n, double floor_bytes, double rel, struct md_leak_verdict *out);

#endif
