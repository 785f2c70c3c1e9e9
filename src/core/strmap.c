/* strmap.c - string -> int hash map (see strmap.h). */
#include "core/strmap.h"

#include <stdint.h>
#include <string.h>

#include "core/mem.h"

static uint64_t hash(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* Slot of key, or the empty slot where it would go (cap is a power of two
 * and the map is at most half full, so an empty slot exists). */
static size_t slot(const md_strmap *m, const char *key)
{
    size_t i = (size_t)hash(key) & (m->cap - 1);
    while (m->keys[i] && strcmp(m->keys[i], key) != 0) i = (i + 1) & (m->cap - 1);
    return i;
}

static md_status grow(md_strmap *m)
{
    size_t cap = m->cap ? m->cap * 2 : 64;
    md_strmap g = {md_calloc(cap, sizeof *g.keys), md_malloc(cap * sizeof *g.vals), cap, 0};
    if (!g.keys || !g.vals) {
        md_free(g.keys);
        md_free(g.vals);
        return MD_ERR_OOM;
    }
    for (size_t i = 0; i < m->cap; i++)
        if (m->keys[i]) {
            size_t j = slot(&g, m->keys[i]);
            g.keys[j] = m->keys[i];
            g.vals[j] = m->vals[i];
            g.n++;
        }
    md_strmap_free(m);
    *m = g;
    return MD_OK;
}

md_status md_strmap_put(md_strmap *m, const char *key, int val)
{
    if (2 * (m->n + 1) > m->cap) MD_TRY(grow(m));
    size_t i = slot(m, key);
    if (!m->keys[i]) {
        m->keys[i] = key;
        m->n++;
    } else {
        m->keys[i] = key; /* the newer copy: the caller may free the older one */
    }
    m->vals[i] = val;
    return MD_OK;
}

int md_strmap_get(const md_strmap *m, const char *key, int *val)
{
    if (!m->cap) return 0;
    size_t i = slot(m, key);
    if (!m->keys[i]) return 0;
    if (val) *val = m->vals[i];
    return 1;
}

void md_strmap_free(md_strmap *m)
{
    if (!m) return;
    md_free(m->keys);
    md_free(m->vals);
    memset(m, 0, sizeof *m);
}
