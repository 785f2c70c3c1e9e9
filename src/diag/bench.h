/* bench.h - the measurements behind --benchmark: one model at one batch size
 * on one device, timed with device events.
 *
 * md_bench_run loads its own instance of the model (so the trained model of
 * the job is left alone and ablations can change layout, precision and
 * compile), binds it at the batch size, keeps a few distinct batches from
 * the loader resident on the device (so the step is timed without the
 * loader, which is measured on its own), and times:
 *   - warm-up: model load + plan (the "compile" time: shape inference,
 *     fusion, the activation plan) and bind, the first training step, the
 *     other warm-up steps;
 *   - training steps (input copy, forward, loss, backward, optimizer), each
 *     phase between device events, so the split is measured, not estimated;
 *   - inference: forward only (eval mode), per batch and per sample.
 * Out of memory is not an error of md_bench_run's caller: the result says
 * status = MD_ERR_OOM with the message, so sweeps and finders can go on.
 */
#ifndef MD_BENCH_H
#define MD_BENCH_H

#include <cjson/cJSON.h>

#include "backend/backend.h"
#include "backend/kernels.h"
#include "core/timer.h"
#include "data/data.h"
#include "diag/profile.h"
#include "nn/model.h"

/* The run's options a benchmark uses besides the model's, resolved by the
 * caller (the application layer). */
struct md_bench_opts {
    struct md_data_opts data;     /* the dataset (md_bench_open_data: synthetic unless one is named) */
    int augment;                  /* the loader's random crop and flip */
    int prefetch;                 /* batches prepared ahead; <= 0: 2 */
    enum md_optim_kind optimizer;
    double lr;                    /* < 0: 1e-3 for AdamW, 0.05 for SGD */
    double momentum;
    int nesterov;
    double weight_decay;
};

struct md_bench_setup {
    const char *model;          /* name or path for md_model_load (the name in messages when inline) */
    const cJSON *inline_model;  /* the run config's "model" object, or NULL */
    struct md_model_opts mopts; /* layout, compute dtype, compile, grad_ckpt ... */
    int batch;
    int warmup_iters;           /* untimed steps before timing (>= 1: the first is timed apart) */
    int iters;                  /* timed training steps (0: none) */
    int inference_iters;        /* timed forward passes (0: none) */
    double time_budget_s;       /* stop a timing loop after this (0: none); at least 2 iterations run */
    const struct md_bench_opts *opts; /* dataset, loader, optimizer (borrowed) */
    long long mem_budget;       /* refuse batches whose planned bytes exceed this (0: none) */
    int measure_energy;         /* read the energy counters (energy.h) around the timed training steps */
    int leak_steps;             /* after the timed steps: this many more, memory read after each (0: none) */
};

#define MD_BENCH_MAX_KINDS 32
#define MD_BENCH_PROFILE_STEPS 3

struct md_bench_result {
    md_status status;           /* MD_OK, MD_ERR_OOM (did not fit), or another error */
    char error[320];
    int batch;
    double load_s;              /* md_model_load: parse, shape inference, plan */
    double bind_s;              /* md_model_bind: allocation and initialisation */
    double first_step_ms;       /* the first training step */
    double warmup_rest_ms;      /* mean of the other warm-up steps (0 if none) */
    int timer_events;           /* 1: device events; 0: host clock after a sync */
    /* training */
    int train_iters;
    md_stats step_ms, fwd_ms, bwd_ms, opt_ms;
    /* compile on a device with graph capture (CUDA): the timed steps are
     * replays of the step captured as a graph (one per resident batch);
     * eager_step_ms are the same steps op by op, timed just before, which
     * is also where the forward/backward/optimizer split comes from */
    int graph;                  /* 1: step_ms are graph replays */
    double capture_ms;          /* recording and instantiating the graphs */
    int eager_iters;
    md_stats eager_step_ms;
    char graph_note[200];       /* why no graph, when compile is on and capture failed */
    double train_samples_per_s;
    double first_loss, final_loss; /* mean loss of the first and last timed steps (NaN if none) */
    /* inference */
    int inf_iters;
    md_stats inf_ms;            /* per batch */
    double inf_samples_per_s;
    double *inf_samples_ms;     /* (inf_iters) raw timings; md_free via md_bench_result_clear */
    /* model figures */
    double flops_fwd, flops_train; /* per sample */
    size_t nparams;
    long long params_bytes, grads_bytes, optimizer_bytes, activations_bytes, planned_bytes;
    long long peak_bytes;       /* device peak during the run */
    /* where a training step's time goes: layers grouped by config type, from
     * MD_BENCH_PROFILE_STEPS eager steps with an event around every layer
     * (mean ms per step; kinds sorted by forward + backward, largest first) */
    int nkinds;
    struct md_bench_kind {
        char kind[32];
        int layers;
        double fwd_ms, bwd_ms;
    } kinds[MD_BENCH_MAX_KINDS];
    double profiled_step_ms;    /* the same steps' whole time (the events add a little) */
    double profiled_layers_ms;  /* the sum of the kinds' times */
    /* the same steps per layer (md_malloc'd, nprof entries; layers that
     * ran nothing left out), in the model's order */
    int nprof;
    struct md_prof_layer *prof;
    /* energy over the timed training steps (setup.measure_energy) */
    int energy_ok;              /* 1: energy_j is measured */
    char energy_source[160];    /* what was read (energy.h) */
    char energy_reason[400];    /* why not, when not */
    double energy_j, energy_window_s;
    int energy_steps;           /* the steps inside the window */
    /* leak check (setup.leak_steps): bytes after each step (md_malloc'd, leak_n
     * entries each): the tool's accounting (live, reserved by a caching
     * allocator), the process's RSS, the driver's used memory (total - free;
     * 0 = not reported) */
    int leak_n;
    double *leak_current, *leak_reserved, *leak_rss, *leak_driver;
    long long leak_injected;    /* bytes the MPSDIAG_TEST_LEAK hook held back per step */
};

void md_bench_result_clear(struct md_bench_result *r);

/* Runs the measurement on `dev`. *data is the dataset for this layout: opened
 * here on first use (from the model's inputs) and kept for the next call;
 * the caller frees it (md_data_free). Returns the status also stored in r
 * (a caller decides whether MD_ERR_OOM ends the run). */
md_status md_bench_run(md_device *dev, const struct md_bench_setup *s, struct md_data **data,
                       struct md_bench_result *r);

/* Opens the benchmark's dataset for a model: synthetic unless a data_dir or a
 * dataset other than auto is named. */
md_status md_bench_open_data(const struct md_data_opts *o, const md_model *m, struct md_data **out);

/* Measured GEMM rate on the device: C = A @ B with square n x n matrices of
 * `dtype`, best of a few runs after a warm-up (GFLOP/s, 2 n^3 per product). */
md_status md_bench_gemm_peak(md_device *dev, md_dtype dtype, int n, double *gflops);

/* What an "achieved" rate is compared with. A GEMM measurement is no bound
 * (an OpenBLAS on generic kernels runs far below the convolutions), so the
 * reference is the larger of the measured GEMM rate and the CPU's measured
 * FMA rate (0 = not known, as on GPUs); an achieved rate above both gets no
 * ratio, only a note. */
struct md_peak_ref {
    double gflops;   /* the reference (0 = none) */
    const char *basis; /* "fma", "gemm", or NULL (no reference bounds the rate) */
    double fraction; /* achieved / gflops in [0, 1], or NaN */
    char text[256];  /* for the Benchmark line: "(12.3% of ...)" */
};
void md_bench_peak_ref(double achieved, double gemm_gflops, double fma_gflops, struct md_peak_ref *out);

/* Measured device copy rate (md_dev_copy of `bytes`, best of a few; read
 * plus write: 2 x bytes per copy), in GB/s: the bandwidth the per-layer
 * profile compares bytes/s with. */
md_status md_bench_copy_peak(md_device *dev, size_t bytes, double *gbs);

/* What the loader sustains alone: samples/s over up to max_batches batches of
 * `batch` with `workers` threads (0: in the caller's thread). */
md_status md_bench_loader(struct md_data *data, const struct md_bench_opts *o, int batch, int workers, int max_batches,
                          double time_budget_s, double *samples_per_s);

#endif
