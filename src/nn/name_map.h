/* name_map.h - the tensor names of public ViT checkpoints (timm, Hugging Face
 * Dinov2 / Dinov2WithRegisters) mapped onto mpsdiag's, for --init-from
 * --init-names (docs/transfer-learning.md has the table). */
#ifndef MD_NAME_MAP_H
#define MD_NAME_MAP_H

#include <stddef.h>

#include "core/safetensors.h"

enum md_naming { MD_NAMES_AUTO = -1, MD_NAMES_OURS = 0, MD_NAMES_TIMM, MD_NAMES_HF };

/* "auto", "ours", "timm", "hf" -> enum md_naming; -2 when unknown. */
int md_naming_parse(const char *s);
const char *md_naming_name(int naming);
/* The naming of a weights file by its keys: hf when a key starts with
 * "embeddings.", "encoder.layer." or "dinov2."; timm when it has
 * "pos_embed", "cls_token" or "reg_token" (timm's bare parameters); else ours. */
int md_naming_detect(const md_st_file *f);

/* What a rule does with the file's tensor(s). */
enum md_map_op {
    MD_MAP_COPY = 0, /* one tensor, leading 1s squeezed */
    MD_MAP_STACK,    /* query | key | value stacked along dim 0 */
    MD_MAP_POS,      /* a position embedding (1, [1 +] N, D): a class-token row 0 goes to the class token */
    MD_MAP_CLS,      /* the class token; the position embedding's row 0 is added to it */
};

/* A model tensor's name as the contract's ViT names it: attention's
 * PyTorch names (in_proj_weight, in_proj_bias, out_proj.*) become timm's
 * (qkv.weight, qkv.bias, proj.*); everything else unchanged. */
void md_name_canonical(const char *name, const char *layer_type, char *out, size_t n);

/* The file tensor(s) holding canonical tensor `name` in `naming`: up to 3
 * names into out[k] (*nout), and the op. Names no rule maps come back
 * unchanged (MD_MAP_COPY, one name), so a ours / timm file of a model that
 * is not a ViT still loads by name. */
int md_name_map(int naming, const char *name, char out[][256], int *nout);

#endif
