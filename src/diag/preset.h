/* preset.h - Apple Silicon chip presets (the JSON files in configs/presets).
 *
 * The MPS guides' table of per-chip starting points (batch size, model width,
 * sequence length, compile mode, how much model fits) as data. They are the
 * starting point when nothing has been measured yet; measurements (the
 * batch-size sweep, ablations) win over them in the recommendations.
 *
 * A preset file:
 *   { "chip": "M2 Pro/Max", "match": ["Apple M2 Pro", "Apple M2 Max"],
 *     "source": "...", "batch_size": 768, "batch_size_max": 1024,
 *     "image_batch_size": 16, "d_model": 320, "d_ff": 1280, "seq_len_max": 384,
 *     "compile_mode": "max-autotune", "model_memory_gb": 20, "memory_fraction": 0.8 }
 * Every key is required; unknown keys are errors (strict config).
 */
#ifndef MD_PRESET_H
#define MD_PRESET_H

#include "core/status.h"

struct md_preset {
    char chip[48];            /* "M2 Pro/Max" */
    char file[1024];          /* where it was read */
    char source[256];         /* which seed row it comes from */
    int batch_size, batch_size_max;  /* sequence models (the MPS guides' iTransformer) */
    int image_batch_size;     /* image CNNs: the MPS guides' MPS starting batch */
    int d_model, d_ff, seq_len_max;
    char compile_mode[32];    /* default | reduce-overhead | max-autotune */
    double model_memory_gb;   /* model size the chip handles well */
    double memory_fraction;   /* high-watermark ratio to start from */
    int match_len;            /* length of the matching name prefix (longest wins) */
};

/* Parses one preset file. MD_ERR_CONFIG naming the file and key on error. */
md_status md_preset_load(const char *path, struct md_preset *out);

/* Does `chip` (a device name such as "Apple M2 Pro") match this file's
 * "match" list? A match is a whole-word prefix: "Apple M2" matches "Apple M2"
 * and "Apple M2 Pro" but not "Apple M20". Returns the matched length, 0 if none. */
int md_preset_match_len(const char *path, const char *chip);

/* Finds the preset for `chip` in `dir` (NULL: $MPSDIAG_PRESETS_DIR,
 * configs/presets, then <exe>/../configs/presets): the longest matching
 * prefix wins, so "Apple M2 Pro" takes m2-pro-max.json over m2.json.
 * *found = 0 (and MD_OK) when no preset matches or no directory exists. */
md_status md_preset_find(const char *dir, const char *chip, struct md_preset *out, int *found);

#endif
