/* strmap.h - a string -> int hash map (open addressing, FNV-1a), for name
 * look-ups that would otherwise scan a list once per item (model expansion,
 * safetensors headers). Keys are BORROWED: the caller keeps each key string
 * alive and unchanged while it is in the map. */
#ifndef MD_STRMAP_H
#define MD_STRMAP_H

#include <stddef.h>

#include "core/status.h"

typedef struct md_strmap {
    const char **keys; /* (cap) borrowed; NULL = empty slot */
    int *vals;         /* (cap) */
    size_t cap, n;
} md_strmap;

/* An empty map is all zeros (md_strmap m = {0}). */
/* Inserts key, or replaces its value when present. MD_ERR_OOM on failure
 * (the map is unchanged). */
md_status md_strmap_put(md_strmap *m, const char *key, int val);
/* 1 and *val when present, else 0 (val may be NULL). */
int md_strmap_get(const md_strmap *m, const char *key, int *val);
void md_strmap_free(md_strmap *m); /* back to empty; NULL-safe */

#endif
