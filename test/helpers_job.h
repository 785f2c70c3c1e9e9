/* helpers_job.h - a job run in the test process, as md_job_run does it:
 * options -> CPU device (1 thread) -> policy -> model -> data -> trainer,
 * kept alive so the test can read the device state afterwards. */
#ifndef MD_TEST_HELPERS_JOB_H
#define MD_TEST_HELPERS_JOB_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "app/job.h"
#include "nn/model.h"
#include "train/trainer.h"

struct th_job {
    md_options o;
    md_job job;
    md_trainer *t;    /* NULL until the trainer is created */
    md_status st;     /* the first failed stage's status, else the run's */
    cJSON *training;  /* report["training"] of the run, or NULL; th_job_end deletes it
                         unless the test took it (set it to NULL) */
    char err[512];    /* md_errmsg() after the run */
};

/* Parses "mpsdiag ARGS" into r->o (asserting that it parses), sets the log to
 * quiet, clears any interrupt and opens the CPU device with 1 thread: the job
 * is ready for its stages. */
void th_job_open(struct th_job *r, const char *args);

/* th_job_open, then the policy, model, data stages and the trainer, run with
 * an interruption after `interrupt_after` optimizer steps (0: none) and, when
 * force_pipeline is set, its steps pipelined as on CUDA. Never asserts on the
 * run's status: the test reads r->st and r->err. */
void th_job_run(struct th_job *r, const char *args, long long interrupt_after, int force_pipeline);
/* 1: th_job_run's job computes in fp16 with dynamic loss scaling (the CPU
 * policy would keep fp32): the GPU's fp16 path, on the CPU's fp16 storage. */
extern int th_job_force_fp16;

/* A host copy of a flat (nparams) device buffer of the model, such as its
 * parameters or gradients (malloc, caller frees). */
float *th_download_flat(md_model *m, const float *dev_buf);

/* Frees the trainer, the stages, the device, the report and r->training,
 * and clears any interrupt. */
void th_job_end(struct th_job *r);

/* What th_job_main hands back. */
struct th_main_run {
    md_status st;  /* md_job_run's */
    char *text;    /* its stdout (malloc) */
    cJSON *report; /* the --report file, parsed (caller deletes) */
};

/* Runs `mpsdiag ARGS --report DIR/report.json` in this process as main does
 * (md_job_run, normal output), with stdout captured in DIR/stdout.txt; fails
 * the test when ARGS do not parse, or when no stdout or report came. */
struct th_main_run th_job_main(const char *dir, const char *args);

#endif
