/* safetensors.h - reading and writing safetensors files (checkpoints, weights).
 *
 * Format (https://github.com/huggingface/safetensors, so PyTorch and MLX read
 * our checkpoints):
 *   8 bytes   N, unsigned little-endian: length of the header
 *   N bytes   JSON object, UTF-8, padded with spaces to a multiple of 8 bytes:
 *             {"<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [b, e]},
 *              ..., "__metadata__": {"<key>": "<string>", ...}}
 *   rest      the byte buffer: tensor data, raw little-endian, row-major;
 *             [b, e) is relative to the buffer's start, e - b = numel * size,
 *             and the tensors tile the buffer exactly (no holes, no overlap).
 * dtypes here: F32, F16, BF16, I32, U8 (md_dtype); the reader also accepts
 * safetensors' other dtypes (I64, F64, BOOL, ...) for tensors it only skips.
 *
 * The writer streams to "<path>.tmp", fsyncs, renames over <path> and fsyncs
 * the directory, so a crash or a full disk never leaves a torn file and the
 * previous file stays intact. It orders tensors by element size (largest
 * first, then in the order added) so every tensor starts aligned to its
 * element size.
 *
 * The reader is strict: anything that does not follow the format exactly is
 * MD_ERR_DATA with a message naming the file (and tensor).
 */
#ifndef MD_SAFETENSORS_H
#define MD_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "core/status.h"
#include "core/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MD_ST_MAX_DIMS 8

/* ---- writer ------------------------------------------------------------------ */
typedef struct md_st_writer md_st_writer;

/* Creates an empty writer (caller frees with md_st_writer_free). */
md_status md_st_writer_new(md_st_writer **out);
void md_st_writer_free(md_st_writer *w); /* NULL ok */

/* Adds a tensor. The name is copied; `data` (numel * md_dtype_size(dtype)
 * host bytes, numel = product of shape, 1 for ndim 0) is BORROWED and must
 * stay valid until md_st_writer_write returns. Duplicate or empty names and
 * the reserved "__metadata__" are MD_ERR_INTERNAL (caller bugs surface as errors). */
md_status md_st_writer_add(md_st_writer *w, const char *name, md_dtype dtype, int ndim,
                           const long long *shape, const void *data);

/* Adds or replaces a metadata entry (both strings copied). */
md_status md_st_writer_meta(md_st_writer *w, const char *key, const char *value);

/* Writes the file atomically. Errors: MD_ERR_IO naming the file and the
 * reason (missing or read-only directory, disk full); the previous file at
 * `path`, if any, is left as it was and no temporary file remains. */
md_status md_st_writer_write(md_st_writer *w, const char *path);

/* ---- reader ------------------------------------------------------------------ */
typedef struct md_st_file md_st_file;

struct md_st_tensor {
    const char *name;
    /* MD_DTYPE_COUNT for a dtype mpsdiag does not compute in (I64, F64, BOOL,
     * ...: PyTorch's BatchNorm num_batches_tracked is I64): such tensors are
     * read, and refused by md_st_expect, so a file holding them still opens. */
    md_dtype dtype;
    const char *dtype_name; /* the file's dtype string ("F32", "I64") */
    int ndim;
    long long shape[MD_ST_MAX_DIMS];
    long long numel;
    size_t nbytes;
    /* Into the file's buffer. Files written by mpsdiag have it aligned to the
     * element size; foreign files may not, so copy with md_st_copy/memcpy
     * rather than casting. */
    const void *data;
};

/* Reads and validates the whole file (caller frees with md_st_close). */
md_status md_st_open(const char *path, md_st_file **out);
/* Reads and validates the header only (tensor table and metadata, checked
 * against the file's size); every tensor's data is NULL. For reading a
 * checkpoint's metadata without reading its weights. */
md_status md_st_open_header(const char *path, md_st_file **out);
/* md_st_open of n bytes in memory (copied); `name` stands for the file in
 * messages. For the fuzz targets and tests. */
md_status md_st_parse(const void *data, size_t n, const char *name, md_st_file **out);
void md_st_close(md_st_file *f); /* NULL ok */

const char *md_st_path(const md_st_file *f);
int md_st_count(const md_st_file *f);
const struct md_st_tensor *md_st_at(const md_st_file *f, int i); /* in file order */
/* NULL when absent. */
const struct md_st_tensor *md_st_find(const md_st_file *f, const char *name);
/* Metadata value or NULL. Borrowed, valid until md_st_close. */
const char *md_st_meta(const md_st_file *f, const char *key);
int md_st_meta_count(const md_st_file *f);
/* i-th metadata entry (file order); returns 0 when out of range. */
int md_st_meta_at(const md_st_file *f, int i, const char **key, const char **value);

/* Looks up `name` and checks its dtype and shape (ndim < 0: any shape).
 * MD_ERR_DATA naming the file and tensor when missing or different. */
md_status md_st_expect(const md_st_file *f, const char *name, md_dtype dtype, int ndim,
                       const long long *shape, const struct md_st_tensor **out);
/* md_st_expect, then copies the data into host memory `dst` (t->nbytes). */
md_status md_st_copy(const md_st_file *f, const char *name, md_dtype dtype, int ndim,
                     const long long *shape, void *dst);

/* ---- tensor layout ------------------------------------------------------------
 * Files mpsdiag writes for others (checkpoints, --dump-grads) hold PyTorch's
 * layout whatever the device's: convolution filters (K, C/groups, R, S),
 * activations NCHW; their metadata says so with MD_ST_LAYOUT_KEY =
 * MD_ST_LAYOUT_TORCH. */
#define MD_ST_LAYOUT_KEY "tensor_layout"
#define MD_ST_LAYOUT_TORCH "pytorch"

/* How the file's convolution filters are laid out, from its metadata:
 * *krsc = 0 for PyTorch's (K, C/groups, R, S): MD_ST_LAYOUT_KEY says
 * "pytorch", or the file names no layout (PyTorch's own files); *krsc = 1
 * for (K, R, S, C/groups): a checkpoint of an earlier mpsdiag trained
 * channels-last (format "mpsdiag-checkpoint-1" with "layout" "NHWC", written
 * before the key existed), which readers convert. Any other layout is
 * MD_ERR_DATA naming the file, the key and the value. */
md_status md_st_filter_layout(const md_st_file *f, int *krsc);

/* safetensors dtype string ("F32") <-> md_dtype; returns -1 when unknown. */
const char *md_st_dtype_name(md_dtype t);
int md_st_dtype_parse(const char *s);

#ifdef __cplusplus
}
#endif
#endif
