/* run_info.c - the run's id, command line and resolved config (run_info.h). */
#define _POSIX_C_SOURCE 200809L
#include "app/run_info.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/backend.h"
#include "app/options.h"
#include "core/json.h"
#include "core/mem.h"

#ifndef MD_VERSION
#define MD_VERSION "0.1.0"
#endif

static int g_argc;
static char **g_argv;
static char g_id[64];

void md_run_info_set_command_line(int argc, char **argv)
{
    g_argc = argc;
    g_argv = argv;
}

uint64_t md_run_info_fnv1a64(const void *data, size_t n)
{
    const unsigned char *p = data;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

const char *md_run_info_id(void)
{
    if (g_id[0]) return g_id;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint32_t rnd = 0;
    FILE *f = fopen("/dev/urandom", "rb");
    if (!f || fread(&rnd, sizeof rnd, 1, f) != 1) { /* no urandom: the clock's nanoseconds will do */
        uint64_t mix[2] = {(uint64_t)ts.tv_nsec, (uint64_t)getpid()};
        rnd = (uint32_t)md_run_info_fnv1a64(mix, sizeof mix);
    }
    if (f) fclose(f);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char when[32];
    strftime(when, sizeof when, "%Y%m%dT%H%M%SZ", &tm);
    snprintf(g_id, sizeof g_id, "%s-%ld-%08x", when, (long)getpid(), (unsigned)rnd);
    return g_id;
}

/* Length of the valid UTF-8 sequence at s, or 0. */
static size_t utf8_len(const unsigned char *s)
{
    if (s[0] < 0x80) return 1;
    size_t n = (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3 : (s[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (n == 0 || (n == 2 && s[0] < 0xC2) || (n == 4 && s[0] > 0xF4)) return 0;
    for (size_t i = 1; i < n; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    uint32_t cp = s[0] & (0x7F >> n);
    for (size_t i = 1; i < n; i++)
        cp = cp << 6 | (s[i] & 0x3F);
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ||
        (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return n;
}

/* An argument as a JSON string: bytes that are not UTF-8 become U+FFFD, so
 * the report stays valid JSON whatever the shell passed. */
static cJSON *arg_string(const char *arg)
{
    size_t n = strlen(arg);
    char *buf = md_malloc(3 * n + 1);
    if (!buf) return cJSON_CreateString("");
    size_t k = 0;
    for (const unsigned char *p = (const unsigned char *)arg; *p;) {
        size_t l = utf8_len(p);
        if (l) {
            memcpy(buf + k, p, l);
            k += l;
            p += l;
        } else {
            memcpy(buf + k, "\xEF\xBF\xBD", 3);
            k += 3;
            p++;
        }
    }
    buf[k] = '\0';
    cJSON *s = cJSON_CreateString(buf);
    md_free(buf);
    return s;
}

static int key_cmp(const void *a, const void *b)
{
    return strcmp((*(cJSON *const *)a)->string, (*(cJSON *const *)b)->string);
}

/* Sorts an object's members by key, so a value given and the same value
 * resolved (added at the end) give the same text and digest. */
static void sort_keys(cJSON *obj)
{
    int n = cJSON_GetArraySize(obj);
    cJSON **v = n > 1 ? md_malloc((size_t)n * sizeof *v) : NULL;
    if (!v) return; /* 0 or 1 members, or no memory: left as it is */
    int i = 0;
    for (cJSON *m = obj->child; m; m = m->next)
        v[i++] = m;
    qsort(v, (size_t)n, sizeof *v, key_cmp);
    for (i = 0; i < n; i++) {
        v[i]->prev = i ? v[i - 1] : v[n - 1]; /* cJSON: the first member's prev is the last */
        v[i]->next = i + 1 < n ? v[i + 1] : NULL;
    }
    obj->child = v[0];
    md_free(v);
}

cJSON *md_run_info_config(const md_job *job)
{
    const md_options *o = job->opts;
    cJSON *c = md_options_to_json(o);
    if (!c) return NULL;
    /* where results go does not change them */
    static const char *const outputs[] = {"report", "html", "metrics", "checkpoint_dir"};
    for (size_t i = 0; i < sizeof outputs / sizeof outputs[0]; i++)
        cJSON_DeleteItemFromObjectCaseSensitive(c, outputs[i]);
    if (job->dev) {
        const struct md_device_info *info = md_device_get_info(job->dev);
        char dev[48];
        snprintf(dev, sizeof dev, "%s:%d", md_backend_name(md_device_backend(job->dev)), job->device_index);
        cJSON_ReplaceItemInObjectCaseSensitive(c, "device", cJSON_CreateString(dev));
        if (md_device_kind(job->dev) == MD_BACKEND_CPU && !cJSON_GetObjectItemCaseSensitive(c, "threads"))
            cJSON_AddNumberToObject(c, "threads", info->compute_units);
    }
    /* the model: a run config's inline model object, or the default's name */
    if (!o->model[0]) {
        cJSON *root = NULL;
        const cJSON *m = NULL;
        char saved[1024]; /* a failed run's message outlives this second reading */
        snprintf(saved, sizeof saved, "%s", md_errmsg());
        if (o->config[0] && md_json_load_file(o->config, &root) == MD_OK)
            m = cJSON_GetObjectItemCaseSensitive(root, "model");
        else if (o->config[0])
            md_errf(MD_OK, "%s", saved);
        cJSON_AddItemToObject(c, "model",
                              cJSON_IsObject(m) ? cJSON_Duplicate(m, 1) : cJSON_CreateString("small_cnn"));
        cJSON_Delete(root);
    }
    /* the trainer's default learning rate (trainer.c) */
    if (o->lr <= 0) cJSON_AddNumberToObject(c, "lr", strcmp(o->optimizer, "adamw") == 0 ? 1e-3 : 0.1);
    sort_keys(c);
    return c;
}

cJSON *md_run_info_json(const md_job *job)
{
    cJSON *r = cJSON_CreateObject();
    cJSON *cfg = md_run_info_config(job);
    char *text = cfg ? cJSON_PrintUnformatted(cfg) : NULL;
    if (!r || !text) {
        cJSON_Delete(r);
        cJSON_Delete(cfg);
        cJSON_free(text);
        return NULL;
    }
    cJSON_AddStringToObject(r, "id", md_run_info_id());
    cJSON *argv = cJSON_AddArrayToObject(r, "command_line");
    for (int i = 0; i < g_argc && g_argv; i++)
        cJSON_AddItemToArray(argv, arg_string(g_argv[i]));
    char digest[32];
    snprintf(digest, sizeof digest, "fnv1a64:%016llx",
             (unsigned long long)md_run_info_fnv1a64(text, strlen(text)));
    cJSON_free(text);
    cJSON_AddStringToObject(r, "config_digest", digest);
    cJSON_AddItemToObject(r, "config", cfg);
    return r;
}

cJSON *md_run_info_metrics_header(const cJSON *run)
{
    cJSON *h = cJSON_CreateObject();
    if (!h) return NULL;
    cJSON_AddStringToObject(h, "kind", "header");
    cJSON_AddNumberToObject(h, "schema_version", MD_METRICS_SCHEMA_VERSION);
    const cJSON *id = cJSON_GetObjectItemCaseSensitive(run, "id");
    cJSON_AddStringToObject(h, "run_id", cJSON_IsString(id) ? id->valuestring : md_run_info_id());
    char ts[32];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(ts, sizeof ts, "%Y-%m-%dT%H:%M:%SZ", &tm);
    cJSON_AddStringToObject(h, "started_at", ts);
    cJSON *tool = cJSON_AddObjectToObject(h, "tool");
    cJSON_AddStringToObject(tool, "name", "mpsdiag");
    cJSON_AddStringToObject(tool, "version", MD_VERSION);
    static const char *const keys[] = {"command_line", "config_digest", "config"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(run, keys[i]);
        cJSON_AddItemToObject(h, keys[i],
                              v        ? cJSON_Duplicate(v, 1)
                              : i == 0 ? cJSON_CreateArray()
                              : i == 1 ? cJSON_CreateString("")
                                       : cJSON_CreateObject());
    }
    return h;
}
