/* preset.c - chip presets from configs/presets. */
#define _POSIX_C_SOURCE 200809L
#include "diag/preset.h"

#include <ctype.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "core/json.h"
#include "core/platform.h"

static const char *const keys[] = {"chip", "match", "source", "batch_size", "batch_size_max", "image_batch_size",
                                   "d_model", "d_ff", "seq_len_max", "compile_mode", "model_memory_gb",
                                   "memory_fraction", NULL};

static int prefix_len(const char *pattern, const char *chip)
{
    size_t n = strlen(pattern);
    if (n == 0 || strncmp(pattern, chip, n) != 0) return 0;
    if (isalnum((unsigned char)chip[n])) return 0; /* "Apple M2" must not match "Apple M20" */
    return (int)n;
}

static int best_match(const cJSON *root, const char *chip)
{
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "match");
    const cJSON *e;
    int best = 0;
    cJSON_ArrayForEach(e, m)
    {
        if (!cJSON_IsString(e)) continue;
        int l = prefix_len(e->valuestring, chip);
        if (l > best) best = l;
    }
    return best;
}

md_status md_preset_load(const char *path, struct md_preset *out)
{
    cJSON *root = NULL;
    md_status st = md_json_load_file(path, &root);
    if (st != MD_OK) return st;
    memset(out, 0, sizeof *out);
    snprintf(out->file, sizeof out->file, "%s", path);
    const char *s = NULL;
    if (!cJSON_IsObject(root)) { st = md_errf(MD_ERR_CONFIG, "%s: a preset must be a JSON object", path); goto done; }
    if ((st = md_json_only_keys(root, path, keys)) != MD_OK) goto done;
    if ((st = md_json_str(root, "chip", path, 1, &s)) != MD_OK) goto done;
    snprintf(out->chip, sizeof out->chip, "%s", s);
    if ((st = md_json_str(root, "source", path, 1, &s)) != MD_OK) goto done;
    snprintf(out->source, sizeof out->source, "%s", s);
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "match");
    if (!cJSON_IsArray(m) || cJSON_GetArraySize(m) == 0) {
        st = md_errf(MD_ERR_CONFIG, "%s.match: must be a non-empty array of chip names", path);
        goto done;
    }
    const cJSON *e;
    cJSON_ArrayForEach(e, m) if (!cJSON_IsString(e))
    {
        st = md_errf(MD_ERR_CONFIG, "%s.match: every entry must be a string", path);
        goto done;
    }
    if ((st = md_json_int(root, "batch_size", path, 1, 1, 1 << 20, &out->batch_size)) != MD_OK) goto done;
    if ((st = md_json_int(root, "batch_size_max", path, 1, out->batch_size, 1 << 20, &out->batch_size_max)) != MD_OK) goto done;
    if ((st = md_json_int(root, "image_batch_size", path, 1, 1, 1 << 20, &out->image_batch_size)) != MD_OK) goto done;
    if ((st = md_json_int(root, "d_model", path, 1, 1, 1 << 20, &out->d_model)) != MD_OK) goto done;
    if ((st = md_json_int(root, "d_ff", path, 1, 1, 1 << 22, &out->d_ff)) != MD_OK) goto done;
    if ((st = md_json_int(root, "seq_len_max", path, 1, 1, 1 << 22, &out->seq_len_max)) != MD_OK) goto done;
    if ((st = md_json_str(root, "compile_mode", path, 1, &s)) != MD_OK) goto done;
    if (strcmp(s, "default") && strcmp(s, "reduce-overhead") && strcmp(s, "max-autotune")) {
        st = md_errf(MD_ERR_CONFIG, "%s.compile_mode: '%s' is not default, reduce-overhead or max-autotune", path, s);
        goto done;
    }
    snprintf(out->compile_mode, sizeof out->compile_mode, "%s", s);
    if ((st = md_json_num(root, "model_memory_gb", path, 1, 0.1, 1e6, &out->model_memory_gb)) != MD_OK) goto done;
    if ((st = md_json_num(root, "memory_fraction", path, 1, 0.05, 1.0, &out->memory_fraction)) != MD_OK) goto done;
done:
    cJSON_Delete(root);
    return st;
}

int md_preset_match_len(const char *path, const char *chip)
{
    cJSON *root = NULL;
    if (md_json_load_file(path, &root) != MD_OK) return 0;
    int l = best_match(root, chip);
    cJSON_Delete(root);
    return l;
}

static int is_dir(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

static md_status find_in(const char *dir, const char *chip, struct md_preset *out, int *found)
{
    DIR *d = opendir(dir);
    if (!d) return MD_OK;
    char best[1024] = "";
    int best_len = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        size_t n = strlen(de->d_name);
        if (n < 6 || strcmp(de->d_name + n - 5, ".json") != 0) continue;
        char path[1024];
        snprintf(path, sizeof path, "%s/%s", dir, de->d_name);
        int l = md_preset_match_len(path, chip);
        /* equal lengths: the first name in byte order, so the choice is stable */
        if (l > best_len || (l == best_len && l > 0 && strcmp(path, best) < 0)) {
            best_len = l;
            snprintf(best, sizeof best, "%s", path);
        }
    }
    closedir(d);
    if (!best_len) return MD_OK;
    MD_TRY(md_preset_load(best, out));
    out->match_len = best_len;
    *found = 1;
    return MD_OK;
}

md_status md_preset_find(const char *dir, const char *chip, struct md_preset *out, int *found)
{
    *found = 0;
    if (!chip || !*chip) return MD_OK;
    if (dir) return find_in(dir, chip, out, found);
    const char *env = getenv("MPSDIAG_PRESETS_DIR");
    if (env && *env && is_dir(env)) return find_in(env, chip, out, found);
    if (is_dir("configs/presets")) {
        MD_TRY(find_in("configs/presets", chip, out, found));
        if (*found) return MD_OK;
    }
    char p[1200];
    snprintf(p, sizeof p, "%s/../configs/presets", md_exe_dir());
    if (md_exe_dir()[0] && is_dir(p)) return find_in(p, chip, out, found);
    return MD_OK;
}
