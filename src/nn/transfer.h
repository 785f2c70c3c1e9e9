/* transfer.h - transfer learning on a bound model: --init-from with a name
 * map (name_map.h), position embeddings resized to the model's grid,
 * partial loading by name with a report, the head re-initialised when its
 * shape differs; and which parameters --freeze selects
 * (docs/transfer-learning.md). */
#ifndef MD_TRANSFER_H
#define MD_TRANSFER_H

#include <cjson/cJSON.h>
#include <stdint.h>

#include "nn/model.h"

/* Resizes a position-embedding grid (gh x gw tokens row-major, d features
 * each) to oh x ow as torch.nn.functional.interpolate(mode="bicubic",
 * align_corners=False, antialias=False) with size=(oh, ow): source
 * coordinate (o + 0.5) * in / out - 0.5, cubic convolution with A = -0.75,
 * the 4 x 4 taps clamped to the grid's edge. src (gh*gw, d), dst (oh*ow, d). */
void md_pos_resize_bicubic(const float *src, int gh, int gw, int d, float *dst, int oh, int ow);

/* A list of names (owned). */
struct md_name_list {
    int n, cap;
    char **items;
};

struct md_load_report {
    char path[1024];
    int naming;             /* enum md_naming used */
    int detected;           /* 1: --init-names auto chose it */
    struct md_name_list loaded;  /* model names, as given by the file */
    struct md_name_list resized; /* model names */
    struct md_name_list resized_how; /* "(1, 17, 16) -> (36, 16)", beside resized */
    struct md_name_list skipped; /* file names with no place in the model */
    struct md_name_list fresh;   /* model names not in the file: keep their initial values */
    struct md_name_list head_reinit; /* model names (also in fresh): the head, whose shape differs */
    struct md_name_list head_how;    /* "file (10, 16), model (4, 16)", beside head_reinit */
};

/* Reads `path` into the bound model under `naming` (MD_NAMES_AUTO: detected)
 * and fills *rep (caller frees with md_load_report_free, also on error).
 * Tensors match by (mapped) name; leading dimensions of 1 the model lacks
 * are squeezed; a position embedding of another square grid is resized; a
 * head tensor (md_model_head_mask) of another shape keeps its initial value;
 * any other shape difference is MD_ERR_DATA naming the tensor and both
 * shapes, and nothing is changed then. F32, F16 and BF16 tensors are read.
 * A file from which no tensor loads is an error. BN running statistics load
 * by name when present. Errors carry the prefix "--init-from". */
md_status md_model_load_transfer(md_model *m, const char *path, int naming, struct md_load_report *rep);
void md_load_report_free(struct md_load_report *rep);
/* The text report (md_out): counts and the first few names of each list;
 * one line per re-initialised head tensor. */
void md_load_report_print(const struct md_load_report *rep);
/* {"file", "naming", "naming_detected", "loaded": [...], "resized": [{name, change}], "skipped": [...],
 *  "newly_initialised": [...], "head_reinitialised": [{name, change}], "counts": {...}}; caller owns. */
cJSON *md_load_report_json(const struct md_load_report *rep);

/* The head: the tensors of the layers named "head" or "head.<...>" (a
 * block called head), or, when the model has none, of its last layer with
 * parameters. out: (ntensors) 1 for a head tensor. */
void md_model_head_mask(const md_model *m, uint8_t *out);
/* The tensors --freeze `spec` selects into frozen (ntensors): comma-separated
 * items, each "backbone" (every tensor but the head), "all-but-last:N"
 * (every tensor before the N last blocks; the blocks are the first numbered
 * component of the names, "blocks.3." -> 3; what follows the last block, as
 * the final norm and the head, stays trainable) or a glob (fnmatch) that
 * matches a full name or a name's leading components ("patch_embed" matches
 * "patch_embed.proj.weight"). An item that selects nothing is MD_ERR_USAGE
 * naming --freeze and the item. */
md_status md_model_freeze_mask(const md_model *m, const char *spec, uint8_t *frozen);

#endif
