/* fuzz_formats.h - one input through the safetensors reader (with the
 * checkpoint-metadata checks of --resume) and through the JSON model-config
 * loader, and seed inputs for both. Used by fuzz_safetensors.c and
 * fuzz_model.c (libFuzzer, make fuzz) and by test/test_fuzz_formats.c (the
 * smoke mode inside make test). Header-only, as fuzz_one.h. */
#ifndef MD_FUZZ_FORMATS_H
#define MD_FUZZ_FORMATS_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/json.h"
#include "core/mem.h"
#include "core/safetensors.h"
#include "nn/model.h"
#include "train/ckpt_meta.h"

/* safetensors: on success every tensor's bytes are read, looked up by
 * name, and the metadata goes through the --resume checks. */
static inline int md_fuzz_safetensors(const uint8_t *d, size_t n)
{
    md_st_file *f = NULL;
    if (md_st_parse(d, n, "fuzz.safetensors", &f) != MD_OK) return 0;
    unsigned sum = 0;
    for (int i = 0; i < md_st_count(f); i++) {
        const struct md_st_tensor *t = md_st_at(f, i);
        if (md_st_find(f, t->name) != t) abort(); /* the index must agree with the table */
        const uint8_t *b = t->data;
        for (size_t k = 0; k < t->nbytes; k += 64) sum += b[k];
        if (t->nbytes) sum += b[t->nbytes - 1];
    }
    static const char *const keys[] = {"epoch", "train_loss", "val_acc", NULL};
    struct md_ckpt_limits lim = {100, 32, keys, 1};
    struct md_ckpt_meta m;
    md_ckpt_meta_read(f, &lim, &m);
    md_ckpt_meta_free(&m);
    md_st_close(f);
    return sum == 0xffffffffu;
}

/* JSON model config: parsed (duplicate keys refused), loaded (expansion,
 * shapes, parameter table) and, for small models, planned. */
static inline int md_fuzz_model(const uint8_t *d, size_t n)
{
    char *text = malloc(n + 1);
    if (!text) return 0;
    memcpy(text, d, n);
    text[n] = '\0';
    cJSON *j = NULL;
    if (strlen(text) == n && md_json_parse(text, "fuzz.json", &j) == MD_OK && cJSON_IsObject(j)) {
        struct md_model_opts o;
        md_model_opts_default(&o);
        md_model *m = NULL;
        if (md_model_load("fuzz.json", j, &o, &m) == MD_OK) {
            if (md_model_num_layers(m) <= 2000) (void)md_model_activation_bytes(m, 2, 1);
            cJSON_Delete(md_model_summary_json(m));
        }
        md_model_free(m);
    }
    cJSON_Delete(j);
    free(text);
    return 0;
}

/* ---- seeds ---- */

/* A small checkpoint-like file: two tensors, every metadata key --resume
 * reads. Returns its size (0 when cap is too small). */
static inline size_t md_fuzz_seed_safetensors(uint8_t *b, size_t cap)
{
    static const char header[] =
        "{\"__metadata__\":{\"format\":\"mpsdiag-checkpoint-1\",\"config\":\"{\\\"batch_size\\\":32,\\\"epochs\\\":3}\","
        "\"epoch\":\"1\",\"batch_in_epoch\":\"2\",\"global_step\":\"7\",\"optimizer_step\":\"7\",\"loss_scale\":\"1\","
        "\"loss_scale_clean_steps\":\"0\",\"skipped_steps\":\"0\",\"epoch_loss_sum\":\"3.5\",\"epoch_correct\":\"10\","
        "\"epoch_seen\":\"64\",\"epoch_time_s\":\"0.5\",\"run_time_s\":\"2\",\"best_val_acc\":\"0.25\","
        "\"best_epoch\":\"1\",\"curves\":\"{\\\"epoch\\\":[1],\\\"val_acc\\\":[0.25]}\"},"
        "\"fc.weight\":{\"dtype\":\"F32\",\"shape\":[2,3],\"data_offsets\":[0,24]},"
        "\"fc.bias\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[24,28]},"
        "\"bn.n\":{\"dtype\":\"U8\",\"shape\":[],\"data_offsets\":[28,29]}}";
    size_t h = sizeof header - 1, padded = (h + 7) / 8 * 8, total = 8 + padded + 29;
    if (total > cap) return 0;
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)((unsigned long long)padded >> (8 * i));
    memcpy(b + 8, header, h);
    memset(b + 8 + h, ' ', padded - h);
    for (size_t i = 0; i < 29; i++) b[8 + padded + i] = (uint8_t)(i * 29 + 3);
    return total;
}

/* A model config using blocks with parameters, "if", "repeat" with "rest",
 * named inputs, concat, add and "$num_classes". */
static inline size_t md_fuzz_seed_model(uint8_t *b, size_t cap)
{
    static const char text[] =
        "{\"name\": \"seed\", \"num_classes\": 10,\n"
        " \"inputs\": [{\"name\": \"image\", \"shape\": [3, 16, 16]}, {\"name\": \"gray\", \"shape\": [1, 16, 16]}],\n"
        " \"blocks\": {\"basic\": {\"params\": {\"out\": null, \"stride\": 1, \"down\": false},\n"
        "   \"layers\": [{\"name\": \"conv1\", \"type\": \"conv2d\", \"out\": \"$out\", \"kernel\": 3, \"stride\": \"$stride\","
        " \"padding\": 1, \"bias\": false},\n"
        "     {\"name\": \"bn1\", \"type\": \"batchnorm\", \"act\": \"relu\"},\n"
        "     {\"name\": \"down\", \"type\": \"conv2d\", \"out\": \"$out\", \"kernel\": 1, \"stride\": \"$stride\", \"inputs\": [\"in\"],"
        " \"if\": \"$down\"},\n"
        "     {\"name\": \"sum\", \"type\": \"add\", \"inputs\": [\"bn1\", \"down\"], \"act\": \"relu\"}]}},\n"
        " \"layers\": [{\"name\": \"stem\", \"type\": \"conv2d\", \"out\": 8, \"kernel\": 3, \"padding\": 1, \"inputs\": [\"image\"]},\n"
        "   {\"name\": \"g\", \"type\": \"conv2d\", \"out\": 8, \"kernel\": 3, \"padding\": 1, \"inputs\": [\"gray\"]},\n"
        "   {\"name\": \"cat\", \"type\": \"concat\", \"inputs\": [\"stem\", \"g\"]},\n"
        "   {\"name\": \"layer1\", \"type\": \"basic\", \"out\": 16, \"down\": true, \"repeat\": 2, \"rest\": {\"down\": false}},\n"
        "   {\"name\": \"layer2\", \"type\": \"basic\", \"out\": 32, \"stride\": 2, \"down\": true},\n"
        "   {\"type\": \"maxpool\", \"kernel\": 2}, {\"type\": \"dropout\", \"p\": 0.1},\n"
        "   {\"type\": \"global_avgpool\"}, {\"type\": \"flatten\"},\n"
        "   {\"name\": \"fc\", \"type\": \"linear\", \"out\": \"$num_classes\"}]}\n";
    size_t n = sizeof text - 1;
    if (n > cap) return 0;
    memcpy(b, text, n);
    return n;
}

#endif
