/* json.c - strict JSON loading and typed access with JSON paths. */
#define _POSIX_C_SOURCE 200809L
#include "core/json.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/mem.h"
#include "core/outfile.h"
#include "core/strmap.h"

/* Objects with more keys than this are checked through a hash map. */
#define UNIQUE_SCAN_MAX 16

static md_status unique_in(const cJSON *node, char *path, size_t len, size_t cap, const char *name,
                           md_status code)
{
    md_status st = MD_OK;
    md_strmap seen = {0};
    int obj = cJSON_IsObject(node), n = 0;
    if (!obj && !cJSON_IsArray(node)) return MD_OK;
    for (const cJSON *c = node->child; c; c = c->next) n++;
    int i = 0;
    for (const cJSON *c = node->child; c && st == MD_OK; c = c->next, i++) {
        if (obj) snprintf(path + len, cap - len, "%s%s", len ? "." : "", c->string ? c->string : "");
        else snprintf(path + len, cap - len, "[%d]", i);
        if (obj && n > UNIQUE_SCAN_MAX) {
            if (md_strmap_get(&seen, c->string, NULL))
                st = md_errf(code, "%s: %s: key appears twice (each key may appear once)", name, path);
            else if (md_strmap_put(&seen, c->string, i) != MD_OK)
                st = md_errf(MD_ERR_OOM, "%s: out of memory checking the JSON keys", name);
        } else if (obj) {
            for (const cJSON *e = node->child; e != c && st == MD_OK; e = e->next)
                if (strcmp(e->string, c->string) == 0)
                    st = md_errf(code, "%s: %s: key appears twice (each key may appear once)", name, path);
        }
        if (st == MD_OK) {
            size_t l2 = strlen(path);
            st = unique_in(c, path, l2, cap, name, code);
        }
        path[len] = '\0';
    }
    md_strmap_free(&seen);
    return st;
}

md_status md_json_unique_keys(const cJSON *root, const char *name, md_status code)
{
    char path[1024] = "";
    return unique_in(root, path, 0, sizeof path, name, code);
}

md_status md_json_parse(const char *text, const char *name, cJSON **out)
{
    const char *end = NULL;
    *out = cJSON_ParseWithOpts(text, &end, 1);
    if (*out) {
        md_status st = md_json_unique_keys(*out, name, MD_ERR_CONFIG);
        if (st != MD_OK) {
            cJSON_Delete(*out);
            *out = NULL;
        }
        return st;
    }
    const char *at = end ? end : cJSON_GetErrorPtr();
    int line = 1, col = 1;
    if (at)
        for (const char *p = text; p < at && *p; p++) {
            if (*p == '\n') { line++; col = 1; }
            else col++;
        }
    return md_errf(MD_ERR_CONFIG, "%s: malformed JSON at line %d, column %d", name, line, col);
}

md_status md_json_load_file(const char *path, cJSON **out)
{
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return md_errf(MD_ERR_CONFIG, "%s: cannot open: %s", path, strerror(errno));
    char *buf = NULL;
    size_t n = 0, cap = 0;
    md_status st = MD_OK;
    for (;;) {
        if (n + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 65536;
            if (cap > (64u << 20)) { st = md_errf(MD_ERR_CONFIG, "%s: larger than 64 MiB; not a config", path); goto done; }
            char *nb = md_realloc(buf, cap);
            if (!nb) { st = MD_ERR_OOM; goto done; }
            buf = nb;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) break;
    }
    if (ferror(f)) { st = md_errf(MD_ERR_CONFIG, "%s: read error: %s", path, strerror(errno)); goto done; }
    buf[n] = '\0';
    if (strlen(buf) != n) { st = md_errf(MD_ERR_CONFIG, "%s: contains a NUL byte; not JSON", path); goto done; }
    st = md_json_parse(buf, path, out);
done:
    md_free(buf);
    fclose(f);
    return st;
}

static const cJSON *item(const cJSON *obj, const char *key) { return cJSON_GetObjectItemCaseSensitive(obj, key); }

md_status md_json_int(const cJSON *obj, const char *key, const char *path, int required,
                      long long min, long long max, int *out)
{
    const cJSON *it = item(obj, key);
    if (!it) return required ? md_errf(MD_ERR_CONFIG, "%s.%s: missing", path, key) : MD_OK;
    if (!cJSON_IsNumber(it) || it->valuedouble != floor(it->valuedouble))
        return md_errf(MD_ERR_CONFIG, "%s.%s: must be an integer", path, key);
    if (it->valuedouble < (double)min || it->valuedouble > (double)max)
        return md_errf(MD_ERR_CONFIG, "%s.%s: %.0f is out of range (%lld to %lld)", path, key, it->valuedouble, min, max);
    *out = (int)it->valuedouble;
    return MD_OK;
}

md_status md_json_num(const cJSON *obj, const char *key, const char *path, int required,
                      double min, double max, double *out)
{
    const cJSON *it = item(obj, key);
    if (!it) return required ? md_errf(MD_ERR_CONFIG, "%s.%s: missing", path, key) : MD_OK;
    if (!cJSON_IsNumber(it)) return md_errf(MD_ERR_CONFIG, "%s.%s: must be a number", path, key);
    if (it->valuedouble < min || it->valuedouble > max)
        return md_errf(MD_ERR_CONFIG, "%s.%s: %g is out of range (%g to %g)", path, key, it->valuedouble, min, max);
    *out = it->valuedouble;
    return MD_OK;
}

md_status md_json_bool(const cJSON *obj, const char *key, const char *path, int required, int *out)
{
    const cJSON *it = item(obj, key);
    if (!it) return required ? md_errf(MD_ERR_CONFIG, "%s.%s: missing", path, key) : MD_OK;
    if (!cJSON_IsBool(it)) return md_errf(MD_ERR_CONFIG, "%s.%s: must be true or false", path, key);
    *out = cJSON_IsTrue(it);
    return MD_OK;
}

md_status md_json_str(const cJSON *obj, const char *key, const char *path, int required, const char **out)
{
    const cJSON *it = item(obj, key);
    if (!it) return required ? md_errf(MD_ERR_CONFIG, "%s.%s: missing", path, key) : MD_OK;
    if (!cJSON_IsString(it)) return md_errf(MD_ERR_CONFIG, "%s.%s: must be a string", path, key);
    *out = it->valuestring;
    return MD_OK;
}

md_status md_json_only_keys(const cJSON *obj, const char *path, const char *const *allowed)
{
    for (const cJSON *it = obj ? obj->child : NULL; it; it = it->next) {
        int ok = 0;
        for (const char *const *a = allowed; *a; a++)
            if (strcmp(*a, it->string) == 0) { ok = 1; break; }
        if (!ok) return md_errf(MD_ERR_CONFIG, "%s: unknown key '%s'", path, it->string);
    }
    return MD_OK;
}

md_status md_write_file_atomic(const char *path, const void *data, size_t n)
{
    return md_outfile_write_all(path, data, n);
}

md_status md_json_write_file(const cJSON *root, const char *path)
{
    char *text = cJSON_Print(root);
    if (!text) return md_errf(MD_ERR_OOM, "%s: out of memory formatting JSON", path);
    if (!md_utf8_valid(text, NULL)) {
        /* bytes that are not UTF-8 can only be inside strings: replaced */
        char *fixed = md_utf8_fix(text);
        cJSON_free(text);
        if (!fixed) return md_errf(MD_ERR_OOM, "%s: out of memory formatting JSON", path);
        text = fixed;
    }
    size_t n = strlen(text);
    text[n] = '\n'; /* replace the terminator: write n+1 bytes including newline */
    md_status st = md_write_file_atomic(path, text, n + 1);
    cJSON_free(text);
    return st;
}

/* ---- UTF-8 ------------------------------------------------------------------------------ */

/* Length of the valid UTF-8 sequence at s (strict: no overlongs, no
 * surrogates, at most U+10FFFF), or 0 when it is not one. */
static size_t utf8_seq(const unsigned char *s)
{
    unsigned c = s[0];
    if (c < 0x80) return 1;
    size_t k;
    unsigned min, v;
    if ((c & 0xE0) == 0xC0) { k = 1; min = 0x80; v = c & 0x1F; }
    else if ((c & 0xF0) == 0xE0) { k = 2; min = 0x800; v = c & 0x0F; }
    else if ((c & 0xF8) == 0xF0) { k = 3; min = 0x10000; v = c & 0x07; }
    else return 0;
    for (size_t j = 1; j <= k; j++) {
        if ((s[j] & 0xC0) != 0x80) return 0; /* also stops at the terminator */
        v = (v << 6) | (s[j] & 0x3F);
    }
    if (v < min || v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) return 0;
    return k + 1;
}

int md_utf8_valid(const char *s, size_t *bad_offset)
{
    const unsigned char *p = (const unsigned char *)s;
    for (size_t i = 0; p[i];) {
        size_t k = utf8_seq(p + i);
        if (!k) {
            if (bad_offset) *bad_offset = i;
            return 0;
        }
        i += k;
    }
    return 1;
}

char *md_utf8_fix(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    char *out = cJSON_malloc(n * 3 + 1); /* each bad byte becomes EF BF BD */
    if (!out) return NULL;
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_seq(p + i);
        if (k) {
            memcpy(out + o, p + i, k);
            o += k;
            i += k;
        } else {
            memcpy(out + o, "\xEF\xBF\xBD", 3);
            o += 3;
            i++;
        }
    }
    out[o] = '\0';
    return out;
}

static md_status check_utf8(const cJSON *node, const char *name, char *path, size_t len, size_t cap)
{
    size_t bad = 0;
    if (cJSON_IsString(node) && node->valuestring && !md_utf8_valid(node->valuestring, &bad))
        return md_errf(MD_ERR_CONFIG, "%s: %s: not valid UTF-8 (byte 0x%02x at offset %zu)", name,
                       len ? path : "(top level)", (unsigned char)node->valuestring[bad], bad);
    int i = 0;
    for (const cJSON *c = node->child; c; c = c->next, i++) {
        int w;
        if (cJSON_IsArray(node)) {
            w = snprintf(path + len, cap - len, "[%d]", i);
        } else {
            if (c->string && !md_utf8_valid(c->string, &bad)) {
                path[len] = '\0';
                return md_errf(MD_ERR_CONFIG, "%s: %s%sa key is not valid UTF-8 (byte 0x%02x at offset %zu)", name,
                               path, len ? ": " : "", (unsigned char)c->string[bad], bad);
            }
            w = snprintf(path + len, cap - len, "%s%s", len ? "." : "", c->string ? c->string : "?");
        }
        size_t nl = w < 0 ? len : len + (size_t)w;
        if (nl >= cap) nl = cap - 1;
        MD_TRY(check_utf8(c, name, path, nl, cap));
        path[len] = '\0';
    }
    return MD_OK;
}

md_status md_json_check_utf8(const cJSON *root, const char *name)
{
    char path[1024];
    path[0] = '\0';
    return check_utf8(root, name, path, 0, sizeof path);
}

void md_json_fix_utf8(cJSON *node)
{
    for (; node; node = node->next) {
        if (node->string && !md_utf8_valid(node->string, NULL)) {
            char *f = md_utf8_fix(node->string);
            if (f) {
                if (!(node->type & cJSON_StringIsConst)) cJSON_free(node->string);
                node->string = f;
                node->type &= ~cJSON_StringIsConst;
            }
        }
        if (cJSON_IsString(node) && node->valuestring && !md_utf8_valid(node->valuestring, NULL)) {
            char *f = md_utf8_fix(node->valuestring);
            if (f) {
                cJSON_free(node->valuestring);
                node->valuestring = f;
            }
        }
        if (node->child) md_json_fix_utf8(node->child);
    }
}
