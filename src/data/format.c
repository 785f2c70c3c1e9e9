/* format.c - the registry of dataset formats and choosing one: a named
 * --dataset goes to the format that serves it; --dataset auto tries each
 * format's detect on the directory, in the registry's order. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "data/format.h"

extern const struct md_data_format md_format_idx, md_format_cifar, md_format_csv_series, md_format_jpeg,
    md_format_images_csv, md_format_synth;

/* Auto-detection order: the most specific file names first. */
const struct md_data_format *const md_data_formats[] = {
    &md_format_idx,
    &md_format_cifar,
    &md_format_images_csv, /* before jpeg (its images/ folder) and csv (its .csv file) */
    &md_format_jpeg,
    &md_format_csv_series,
    &md_format_synth,
    NULL,
};

const struct md_data_format *md_format_find(const char *name)
{
    for (int f = 0; md_data_formats[f]; f++)
        for (int k = 0; md_data_formats[f]->datasets[k]; k++)
            if (strcmp(md_data_formats[f]->datasets[k], name) == 0) return md_data_formats[f];
    return NULL;
}

void md_format_dataset_list(char *out, size_t n, const char *sep)
{
    snprintf(out, n, "auto");
    for (int f = 0; md_data_formats[f]; f++)
        for (int k = 0; md_data_formats[f]->datasets[k]; k++) {
            size_t l = strlen(out);
            snprintf(out + l, n - l, "%s%s", sep, md_data_formats[f]->datasets[k]);
        }
}

void md_format_dataset_names(char *out, size_t n) { md_format_dataset_list(out, n, ", "); }

/* --dataset auto on `dir`: the first format whose detect accepts it. */
static md_status detect(const char *dir, const struct md_data_format **fmt, char *name, size_t nn)
{
    char expected[512] = "";
    int nexp = 0, total = 0;
    for (int f = 0; md_data_formats[f]; f++) total += md_data_formats[f]->detect != NULL;
    for (int f = 0; md_data_formats[f]; f++) {
        const struct md_data_format *df = md_data_formats[f];
        if (!df->detect) continue;
        if (df->detect(dir, NULL, name, nn) == MD_OK) {
            *fmt = df;
            return MD_OK;
        }
        md_err_clear();
        size_t l = strlen(expected);
        snprintf(expected + l, sizeof expected - l, "%s%s", nexp == 0 ? "" : nexp + 1 == total ? " or " : ", ",
                 df->expects);
        nexp++;
    }
    return md_errf(MD_ERR_DATA, "%s: cannot tell which dataset this is: expected %s; name it with --dataset", dir,
                   expected);
}

md_status md_format_resolve(const char *dataset, const char *data_dir, const struct md_data_format **fmt,
                            char *name, size_t nn, char *dir, size_t dn)
{
    int is_auto = strcmp(dataset, "auto") == 0;
    /* Without a directory, auto looks where the first format's default
     * dataset is expected (the default run is Fashion-MNIST). */
    const struct md_data_format *named = is_auto ? md_data_formats[0] : md_format_find(dataset);
    if (!named) {
        char all[256];
        md_format_dataset_names(all, sizeof all);
        return md_errf(MD_ERR_USAGE, "--dataset %s: not one of %s", dataset, all);
    }
    if (!named->default_dirs) { /* generated: no directory */
        *fmt = named;
        snprintf(name, nn, "%s", dataset);
        dir[0] = '\0';
        return MD_OK;
    }
    if (data_dir[0]) {
        /* a time series may be named as its file */
        size_t dl = strlen(data_dir);
        int csv_file = dl > 4 && md_files_is_file(data_dir) && strcasecmp(data_dir + dl - 4, ".csv") == 0;
        if (!md_files_is_dir(data_dir) && !csv_file)
            return md_errf(MD_ERR_DATA, "--data-dir %s: %s", data_dir,
                           md_files_exists(data_dir) ? "not a directory" : "no such directory");
        snprintf(dir, dn, "%s", data_dir);
    } else {
        char cand[8][MD_PATH_MAX];
        int nc = 0;
        MD_TRY(named->default_dirs(dataset, cand, 8, &nc));
        dir[0] = '\0';
        for (int i = 0; i < nc; i++) {
            char found[MD_DATA_NAME_MAX];
            if (named->detect(cand[i], is_auto ? NULL : dataset, found, sizeof found) != MD_OK) {
                md_err_clear();
            } else {
                snprintf(dir, dn, "%s", cand[i]);
                break;
            }
        }
        if (!dir[0]) {
            char tried[1024] = "";
            for (int i = 0; i < nc; i++) {
                size_t l = strlen(tried);
                snprintf(tried + l, sizeof tried - l, "%s%s", i ? ", " : "", cand[i]);
            }
            return md_errf(MD_ERR_DATA, "no %s dataset found (looked in %s); give --data-dir",
                           is_auto ? "default" : dataset, tried);
        }
    }
    if (is_auto) return detect(dir, fmt, name, nn);
    *fmt = named;
    snprintf(name, nn, "%s", dataset);
    return MD_OK;
}
