/* data_config.c - the run config's "data" section (md_data_config). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/json.h"
#include "data/format.h"

static md_status config_floats(const cJSON *obj, const char *key, const char *path, float *v, int *n)
{
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!a) return MD_OK;
    int cnt = cJSON_IsArray(a) ? cJSON_GetArraySize(a) : 0;
    if (cnt != 1 && cnt != 3) return md_errf(MD_ERR_CONFIG, "%s.%s: must be an array of 1 or 3 numbers", path, key);
    for (int i = 0; i < cnt; i++) {
        const cJSON *x = cJSON_GetArrayItem(a, i);
        if (!cJSON_IsNumber(x) || !isfinite(x->valuedouble))
            return md_errf(MD_ERR_CONFIG, "%s.%s[%d]: must be a number", path, key, i);
        v[i] = (float)x->valuedouble;
    }
    *n = cnt;
    return MD_OK;
}

void md_data_opts_default(struct md_data_opts *o)
{
    memset(o, 0, sizeof *o);
    snprintf(o->dataset, sizeof o->dataset, "auto");
    o->val_split = 0.1;
    o->seed = 42;
    o->folds = 1;
    o->series.seq_len = o->series.pred_len = 96;
    snprintf(o->series.features, sizeof o->series.features, "M");
    o->folds = 1;
}

md_status md_data_config(const char *config_path, struct md_data_opts *o, struct md_data_request *req)
{
    if (!config_path || !config_path[0]) return MD_OK;
    cJSON *root = NULL;
    MD_TRY(md_json_load_file(config_path, &root));
    md_status st = MD_OK;
    char path[MD_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s: data", config_path);
    const cJSON *d = cJSON_IsObject(root) ? cJSON_GetObjectItemCaseSensitive(root, "data") : NULL;
    if (!d) goto done;
    if (!cJSON_IsObject(d)) { st = md_errf(MD_ERR_CONFIG, "%s: must be an object", path); goto done; }
    static const char *const keys[] = {"dataset", "dir", "val_split", "image_size", "max_samples", "coarse_labels",
                                       "augment", "normalize", NULL};
    if ((st = md_json_only_keys(d, path, keys)) != MD_OK) goto done;
    const char *str = NULL;
    if ((st = md_json_str(d, "dataset", path, 0, &str)) != MD_OK) goto done;
    if (str) {
        if (strcmp(str, "auto") != 0 && !md_format_find(str)) {
            char all[256];
            md_format_dataset_names(all, sizeof all);
            st = md_errf(MD_ERR_CONFIG, "%s.dataset: '%s' is not one of %s", path, str, all);
            goto done;
        }
        snprintf(o->dataset, sizeof o->dataset, "%s", str);
    }
    str = NULL;
    if ((st = md_json_str(d, "dir", path, 0, &str)) != MD_OK) goto done;
    if (str) snprintf(o->data_dir, sizeof o->data_dir, "%s", str);
    double vs = o->val_split;
    if ((st = md_json_num(d, "val_split", path, 0, 0.0, 0.9, &vs)) != MD_OK) goto done;
    o->val_split = vs;
    int iv = o->image_size;
    if ((st = md_json_int(d, "image_size", path, 0, 8, 4096, &iv)) != MD_OK) goto done;
    o->image_size = iv;
    iv = o->max_samples;
    if ((st = md_json_int(d, "max_samples", path, 0, 1, INT32_MAX, &iv)) != MD_OK) goto done;
    o->max_samples = iv;
    iv = o->coarse_labels;
    if ((st = md_json_bool(d, "coarse_labels", path, 0, &iv)) != MD_OK) goto done;
    o->coarse_labels = iv;

    char sub[MD_PATH_MAX + 32];
    const cJSON *aug = cJSON_GetObjectItemCaseSensitive(d, "augment");
    if (aug) {
        snprintf(sub, sizeof sub, "%s.augment", path);
        static const char *const akeys[] = {"crop_padding", "flip", NULL};
        if (!cJSON_IsObject(aug)) { st = md_errf(MD_ERR_CONFIG, "%s: must be an object", sub); goto done; }
        if ((st = md_json_only_keys(aug, sub, akeys)) != MD_OK) goto done;
        int pad = -2, flip = -2;
        if ((st = md_json_int(aug, "crop_padding", sub, 0, 0, 64, &pad)) != MD_OK) goto done;
        if ((st = md_json_bool(aug, "flip", sub, 0, &flip)) != MD_OK) goto done;
        if (pad != -2) req->crop_padding = pad > 0 ? pad : -1;
        if (flip != -2) req->flip = flip ? 1 : -1;
    }
    const cJSON *nrm = cJSON_GetObjectItemCaseSensitive(d, "normalize");
    if (nrm) {
        snprintf(sub, sizeof sub, "%s.normalize", path);
        static const char *const nkeys[] = {"mean", "std", NULL};
        if (!cJSON_IsObject(nrm)) { st = md_errf(MD_ERR_CONFIG, "%s: must be an object", sub); goto done; }
        if ((st = md_json_only_keys(nrm, sub, nkeys)) != MD_OK) goto done;
        int nm = 0, ns = 0;
        if ((st = config_floats(nrm, "mean", sub, req->mean, &nm)) != MD_OK) goto done;
        if ((st = config_floats(nrm, "std", sub, req->std, &ns)) != MD_OK) goto done;
        if (nm != ns || nm == 0) {
            st = md_errf(MD_ERR_CONFIG, "%s: needs \"mean\" and \"std\" with the same number of values", sub);
            goto done;
        }
        for (int i = 0; i < ns; i++)
            if (!(req->std[i] > 0.0f)) {
                st = md_errf(MD_ERR_CONFIG, "%s.std[%d]: must be positive", sub, i);
                goto done;
            }
        req->norm_channels = nm;
    }
done:
    cJSON_Delete(root);
    return st;
}
