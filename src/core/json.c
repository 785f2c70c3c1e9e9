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
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) return md_errf(MD_ERR_IO, "%s: cannot write: %s", path, strerror(errno));
    const char *p = data;
    size_t left = n;
    while (left > 0) {
        ssize_t w = write(fd, p, left);
        if (w < 0) {
            if (errno == EINTR) continue;
            int e = errno;
            close(fd);
            unlink(tmp);
            return md_errf(MD_ERR_IO, "%s: write failed: %s", path, strerror(e));
        }
        p += w;
        left -= (size_t)w;
    }
    if (fsync(fd) != 0) {
        int e = errno;
        close(fd);
        unlink(tmp);
        return md_errf(MD_ERR_IO, "%s: fsync failed: %s", path, strerror(e));
    }
    if (close(fd) != 0) {
        int e = errno;
        unlink(tmp);
        return md_errf(MD_ERR_IO, "%s: close failed: %s", path, strerror(e));
    }
    if (rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return md_errf(MD_ERR_IO, "%s: rename failed: %s", path, strerror(e));
    }
    return MD_OK;
}

md_status md_json_write_file(const cJSON *root, const char *path)
{
    char *text = cJSON_Print(root);
    if (!text) return md_errf(MD_ERR_OOM, "%s: out of memory formatting JSON", path);
    size_t n = strlen(text);
    text[n] = '\n'; /* replace the terminator: write n+1 bytes including newline */
    md_status st = md_write_file_atomic(path, text, n + 1);
    cJSON_free(text);
    return st;
}
