/* name_map.c - the name map of --init-names: one table, one rule per line.
 * Patterns: "{i}" matches a block number and "{p}" the rest of the name
 * (a parameter suffix such as "weight" or "bias"); the file's name is the
 * right-hand side with the same numbers and suffix. STACK rules name
 * "{qkv}", which stands for query, key and value in that order. */
#include "nn/name_map.h"

#include <ctype.h>
#include <stdio.h>
#include <string.h>

struct name_rule {
    int naming;
    const char *ours;   /* the contract's ViT name (md_name_canonical) */
    const char *theirs; /* the file's */
    int op;
};

static const struct name_rule rules[] = {
    /* timm VisionTransformer: its names are ours but for the bare parameters */
    {MD_NAMES_TIMM, "pos_embed.weight", "pos_embed", MD_MAP_POS},
    {MD_NAMES_TIMM, "tokens.cls_token", "cls_token", MD_MAP_CLS},
    {MD_NAMES_TIMM, "tokens.reg_token", "reg_token", MD_MAP_COPY},
    /* Hugging Face Dinov2Model / Dinov2WithRegistersModel (a "dinov2." or
     * "dinov2_with_registers." prefix, as the ...ForImageClassification
     * wrappers save it, is also accepted) */
    {MD_NAMES_HF, "patch_embed.proj.{p}", "embeddings.patch_embeddings.projection.{p}", MD_MAP_COPY},
    {MD_NAMES_HF, "tokens.cls_token", "embeddings.cls_token", MD_MAP_CLS},
    {MD_NAMES_HF, "tokens.reg_token", "embeddings.register_tokens", MD_MAP_COPY},
    {MD_NAMES_HF, "pos_embed.weight", "embeddings.position_embeddings", MD_MAP_POS},
    {MD_NAMES_HF, "blocks.{i}.norm1.{p}", "encoder.layer.{i}.norm1.{p}", MD_MAP_COPY},
    {MD_NAMES_HF, "blocks.{i}.attn.qkv.{p}", "encoder.layer.{i}.attention.attention.{qkv}.{p}", MD_MAP_STACK},
    {MD_NAMES_HF, "blocks.{i}.attn.proj.{p}", "encoder.layer.{i}.attention.output.dense.{p}", MD_MAP_COPY},
    {MD_NAMES_HF, "blocks.{i}.ls1.gamma", "encoder.layer.{i}.layer_scale1.lambda1", MD_MAP_COPY},
    {MD_NAMES_HF, "blocks.{i}.norm2.{p}", "encoder.layer.{i}.norm2.{p}", MD_MAP_COPY},
    {MD_NAMES_HF, "blocks.{i}.mlp.fc1.{p}", "encoder.layer.{i}.mlp.fc1.{p}", MD_MAP_COPY},
    {MD_NAMES_HF, "blocks.{i}.mlp.fc2.{p}", "encoder.layer.{i}.mlp.fc2.{p}", MD_MAP_COPY},
    {MD_NAMES_HF, "blocks.{i}.ls2.gamma", "encoder.layer.{i}.layer_scale2.lambda1", MD_MAP_COPY},
    {MD_NAMES_HF, "norm.{p}", "layernorm.{p}", MD_MAP_COPY},
    {MD_NAMES_HF, "head.{p}", "classifier.{p}", MD_MAP_COPY},
};

/* attention's PyTorch suffixes -> timm's (same layout: q | k | v stacked) */
static const char *const attn_alias[][2] = {
    {"in_proj_weight", "qkv.weight"},
    {"in_proj_bias", "qkv.bias"},
    {"out_proj.weight", "proj.weight"},
    {"out_proj.bias", "proj.bias"},
};

static const char *const naming_names[] = {"ours", "timm", "hf"};

int md_naming_parse(const char *s)
{
    if (!strcmp(s, "auto")) return MD_NAMES_AUTO;
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, naming_names[i])) return i;
    return -2;
}

const char *md_naming_name(int naming)
{
    return naming >= 0 && naming < 3 ? naming_names[naming] : "auto";
}

int md_naming_detect(const md_st_file *f)
{
    int timm = 0;
    for (int i = 0; i < md_st_count(f); i++) {
        const char *n = md_st_at(f, i)->name;
        if (!strncmp(n, "embeddings.", 11) || !strncmp(n, "encoder.layer.", 14) || !strncmp(n, "dinov2.", 7) ||
            !strncmp(n, "dinov2_with_registers.", 22))
            return MD_NAMES_HF;
        if (!strcmp(n, "pos_embed") || !strcmp(n, "cls_token") || !strcmp(n, "reg_token")) timm = 1;
    }
    return timm ? MD_NAMES_TIMM : MD_NAMES_OURS;
}

void md_name_canonical(const char *name, const char *layer_type, char *out, size_t n)
{
    snprintf(out, n, "%s", name);
    if (!layer_type || strcmp(layer_type, "attention")) return;
    size_t len = strlen(name);
    for (size_t a = 0; a < sizeof attn_alias / sizeof attn_alias[0]; a++) {
        size_t sl = strlen(attn_alias[a][0]);
        if (len > sl && name[len - sl - 1] == '.' && !strcmp(name + len - sl, attn_alias[a][0])) {
            snprintf(out, n, "%.*s%s", (int)(len - sl), name, attn_alias[a][1]);
            return;
        }
    }
}

/* Matches `name` against `pat`; fills the block number and suffix met. */
static int match(const char *pat, const char *name, char *num, char *rest)
{
    num[0] = rest[0] = '\0';
    while (*pat) {
        if (!strncmp(pat, "{i}", 3)) {
            size_t k = 0;
            while (isdigit((unsigned char)name[k]) && k < 15) k++;
            if (k == 0) return 0;
            memcpy(num, name, k);
            num[k] = '\0';
            name += k;
            pat += 3;
        } else if (!strncmp(pat, "{p}", 3)) {
            if (!*name || strlen(name) > 200) return 0;
            strcpy(rest, name);
            return pat[3] == '\0';
        } else {
            if (*pat != *name) return 0;
            pat++;
            name++;
        }
    }
    return *name == '\0';
}

/* `pat` with its placeholders filled. */
static void fill(const char *pat, const char *num, const char *rest, const char *qkv, char *out, size_t n)
{
    size_t o = 0;
    while (*pat && o + 1 < n) {
        const char *put = NULL;
        if (!strncmp(pat, "{i}", 3)) put = num;
        else if (!strncmp(pat, "{p}", 3)) put = rest;
        else if (!strncmp(pat, "{qkv}", 5)) put = qkv;
        if (put) {
            o += (size_t)snprintf(out + o, n - o, "%s", put);
            if (o >= n) o = n - 1;
            pat += pat[1] == 'q' ? 5 : 3;
        } else {
            out[o++] = *pat++;
        }
    }
    out[o] = '\0';
}

int md_name_map(int naming, const char *name, char out[][256], int *nout)
{
    char num[16], rest[256];
    for (size_t r = 0; r < sizeof rules / sizeof rules[0]; r++) {
        const struct name_rule *u = &rules[r];
        if (u->naming != naming || !match(u->ours, name, num, rest)) continue;
        if (u->op == MD_MAP_STACK) {
            static const char *const parts[3] = {"query", "key", "value"};
            for (int k = 0; k < 3; k++) fill(u->theirs, num, rest, parts[k], out[k], 256);
            *nout = 3;
        } else {
            fill(u->theirs, num, rest, "", out[0], 256);
            *nout = 1;
        }
        return u->op;
    }
    snprintf(out[0], 256, "%s", name);
    *nout = 1;
    return MD_MAP_COPY;
}
