/* helpers.h - shared test utilities: running the built binary, temp files,
 * reading files and reports, and tensor comparison in the manner of ggml's
 * test-backend-ops. Every helper that cannot go on asserts (Criterion), so a
 * test only checks what it is about. */
#ifndef MD_TEST_HELPERS_H
#define MD_TEST_HELPERS_H

#include "core/safetensors.h"
#include <cjson/cJSON.h>
#include <stddef.h>

#include "backend/backend.h"
#include "core/rng.h"
#include "nn/model.h"

/* ---- the built binary ---------------------------------------------------- */

/* The binary under test: $MPSDIAG_BIN, else build/mpsdiag (borrowed string). */
const char *th_bin(void);

/* Runs `build/mpsdiag ARGS` (MPSDIAG_BIN) through the shell with stdout and
 * stderr captured into *out / *err (caller frees with free(); either may be
 * NULL). Returns the exit code (128 + signal when killed). */
int th_run(const char *args, char **out, char **err);

/* Runs the shell command line CMD, in which $B names the binary, with stdin
 * from /dev/null and stdout / stderr captured as th_run does. */
int th_sh(const char *cmd, char **out, char **err);

/* Runs `build/mpsdiag ARGS --report DIR/r.json` as th_run does (out / err:
 * as th_run's, either may be NULL), fails the test unless it exits with
 * want_rc and wrote a report, and returns the report (caller deletes). */
cJSON *th_run_report(const char *dir, const char *args, int want_rc, char **out, char **err);

/* Splits "mpsdiag ARGS" at spaces into argv (NULL-terminated, at most 63
 * words), the words pointing into buf (bufsz bytes); returns argc. */
int th_argv(char *buf, size_t bufsz, const char *args, char **argv);

/* ---- files ----------------------------------------------------------------- */

/* A fresh temporary directory (caller ends it with th_tmpdir_free, or removes
 * it with th_rmtree and frees the string). */
char *th_tmpdir(void);
void th_rmtree(const char *dir);
/* th_rmtree(dir), then free(dir): the end of a th_tmpdir. */
void th_tmpdir_free(char *dir);
/* Writes text to dir/name and returns the path (caller frees). */
char *th_write(const char *dir, const char *name, const char *text);
/* The whole file, NUL-terminated (malloc, caller frees), its length in *len
 * when len is not NULL; NULL when it cannot be opened. */
char *th_slurp(const char *path, size_t *len);
/* The JSON file at path, parsed with md_json_load_file (caller deletes);
 * asserts that it loads. */
cJSON *th_load_json(const char *path);
/* Copies the safetensors file src to dst (the same path is fine) with
 * metadata `key` set to `value` (NULL: removed), tensors unchanged. */
void th_st_rewrite_meta(const char *src, const char *dst, const char *key, const char *value);

/* ---- text -------------------------------------------------------------------- */

/* The number of newlines in s. */
int th_count_lines(const char *s);
/* The number of messages in s: lines that do not start with a space (a
 * message longer than 100 columns goes on in indented lines). */
int th_count_messages(const char *s);
/* Joins wrapped lines in place: each newline followed by spaces becomes one
 * space, so a text that a 100-column line broke can be searched for whole.
 * Returns s. */
char *th_unwrap(char *s);
/* The number of non-overlapping occurrences of needle in s. */
int th_count(const char *s, const char *needle);
/* o[key]: its number, or its value (borrowed); fails the test when it is
 * not a number / missing. */
double th_num(const cJSON *o, const char *key);
const cJSON *th_obj(const cJSON *o, const char *key);
/* The entry of report.settings named `name`, or NULL (borrowed). */
const cJSON *th_setting(const cJSON *report, const char *name);

/* ---- model configs the tests share ------------------------------------------ */

/* A tiny CNN for 28x28 gray inputs (the synthetic dataset follows the
 * model): conv, BN, ReLU, pool, flatten, the layers `extra` (JSON lines:
 * "" for none), linear; ~0.2 MFLOPs per sample. */
#define TH_TINY_CNN(extra)                                                                                     \
    "{\"name\": \"tiny\", \"num_classes\": 10, \"inputs\": [{\"name\": \"image\", \"shape\": [1, 28, 28]}],\n"          \
    " \"layers\": [\n"                                                                                          \
    "  {\"name\": \"conv1\", \"type\": \"conv2d\", \"out\": 16, \"kernel\": 3, \"padding\": 1, \"bias\": false},\n"   \
    "  {\"name\": \"bn1\", \"type\": \"batchnorm\"}, {\"name\": \"relu1\", \"type\": \"relu\"},\n"                     \
    "  {\"name\": \"pool1\", \"type\": \"maxpool\", \"kernel\": 4},\n"                                             \
    "  {\"name\": \"flatten\", \"type\": \"flatten\"},\n" extra                                                 \
    "  {\"name\": \"fc\", \"type\": \"linear\", \"out\": \"$num_classes\"}]}\n"

/* Writes `model` as dir/tiny.json and returns the flags of a short
 * deterministic CPU run of it on synthetic data (--device cpu --threads 1
 * --dataset synthetic --model ... --max-samples 384 --batch-size 32
 * --num-workers 0 --seed 7 --quiet), in a static buffer. */
const char *th_tiny_args(const char *dir, const char *model);

/* A CNN for 28x28 gray inputs without BatchNorm: a huge learning rate (100)
 * makes its activations grow with every step until they overflow. */
extern const char th_unstable_model[];

/* ---- numbers ----------------------------------------------------------------- */

/* Compares got[] against ref[] with |got - ref| <= atol + rtol*|ref|, after
 * checking for NaN/Inf first. On failure prints the worst index, the max
 * abs/rel errors and the first mismatching pairs under `what`, and returns 0. */
int th_allclose(const char *what, const float *got, const float *ref, size_t n, double atol, double rtol);
int th_allclose_d(const char *what, const double *got, const double *ref, size_t n, double atol, double rtol);

/* got[] against tensor `key` of a PyTorch fixture: the number of elements
 * off by more than 1e-4 * max|want| + 1e-3 * |want| (the first one logged
 * under `what` unless `quiet`); fails the test when the fixture lacks the
 * tensor or its size differs. */
int th_compare_torch(const md_st_file *ref, const char *key, const float *got, size_t n, const char *what, int quiet);

/* Uploads the inputs of m (bound for `batch`): element k of each input is
 * scale * u - 1 + ramp * (k % period), u uniform from `r` (one stream over
 * all inputs) or, with r NULL, from a stream seeded seed + the input's index. */
void th_upload_inputs(md_model *m, int batch, md_rng *r, uint64_t seed, float scale, float ramp, int period);

/* The parameter gradients of m (read back to the host) against the
 * fixture's grad.<tensor name>: how many tensors differ. */
int th_compare_torch_grads(const md_st_file *ref, md_model *m, const char *what, int quiet);

/* With the inputs uploaded: forward, the MSE loss against the fixture's
 * "target" (b x k outputs, at most 64) and its gradient, backward; then how
 * many tensors (output, loss, gradients) differ from the fixture's. */
int th_torch_mse_case(const md_st_file *ref, md_device *d, md_model *m, int b, int k, const char *what, int quiet);

/* Device 0 of backend `name` with one thread (the tests' deterministic
 * setting); fails the test when it cannot open. */
md_device *th_open_device(const char *name);
/* The same, or NULL when the backend is missing or does not open. */
md_device *th_try_device(const char *name);

#endif
