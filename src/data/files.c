/* files.c - the small file-system helpers the dataset formats share:
 * stat-based tests, joining paths, sorted directory listings, reading a file
 * into a reusable buffer. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#include "core/mem.h"
#include "data/data_impl.h"

int md_files_is_dir(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISDIR(sb.st_mode);
}

int md_files_is_file(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0 && S_ISREG(sb.st_mode);
}

int md_files_exists(const char *p)
{
    struct stat sb;
    return stat(p, &sb) == 0;
}

void md_files_join(char *out, size_t n, const char *a, const char *b) { snprintf(out, n, "%s/%s", a, b); }

int md_files_cmp_name(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

int md_files_is_jpeg(const char *n)
{
    const char *dot = strrchr(n, '.');
    return dot && (strcasecmp(dot, ".jpg") == 0 || strcasecmp(dot, ".jpeg") == 0);
}

void md_files_free_names(char **v, long long n)
{
    if (!v) return;
    for (long long i = 0; i < n; i++) md_free(v[i]);
    md_free(v);
}

/* Sorted names of the entries of `dir` that are directories (want_dirs) or
 * JPEG files. *names is owned by the caller (md_files_free_names). */
md_status md_files_list(const char *dir, int want_dirs, char ***names, long long *count)
{
    *names = NULL;
    *count = 0;
    DIR *dp = opendir(dir);
    if (!dp) return md_errf(MD_ERR_DATA, "%s: cannot open directory: %s", dir, strerror(errno));
    long long n = 0, cap = 64;
    char **v = md_malloc((size_t)cap * sizeof *v);
    md_status st = MD_OK;
    if (!v) { st = MD_ERR_OOM; goto fail; }
    struct dirent *e;
    char p[MD_PATH_MAX * 2];
    while ((e = readdir(dp))) {
        if (e->d_name[0] == '.') continue;
        md_files_join(p, sizeof p, dir, e->d_name);
        if (want_dirs ? !md_files_is_dir(p) : !(md_files_is_jpeg(e->d_name) && md_files_is_file(p))) continue;
        if (n == cap) {
            char **nv = md_realloc(v, (size_t)cap * 2 * sizeof *v);
            if (!nv) { st = MD_ERR_OOM; goto fail; }
            v = nv;
            cap *= 2;
        }
        v[n] = md_strdup(e->d_name);
        if (!v[n]) { st = MD_ERR_OOM; goto fail; }
        n++;
    }
    closedir(dp);
    qsort(v, (size_t)n, sizeof *v, md_files_cmp_name);
    *names = v;
    *count = n;
    return MD_OK;
fail:
    closedir(dp);
    md_files_free_names(v, n);
    return st;
}

md_status md_files_read(const char *path, uint8_t **buf, size_t *cap, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f) return md_errf(MD_ERR_DATA, "%s: cannot open: %s", path, strerror(errno));
    md_status st = MD_OK;
    if (fseek(f, 0, SEEK_END) != 0) { st = md_errf(MD_ERR_DATA, "%s: cannot seek", path); goto fail; }
    long sz = ftell(f);
    if (sz < 0 || (size_t)sz > MD_DATA_MAX_FILE_BYTES) {
        st = md_errf(MD_ERR_DATA, "%s: unusable file size", path);
        goto fail;
    }
    rewind(f);
    size_t want = (size_t)sz;
    if (want + 1 > *cap) {
        uint8_t *nb = md_realloc(*buf, want + 1);
        if (!nb) { st = MD_ERR_OOM; goto fail; }
        *buf = nb;
        *cap = want + 1;
    }
    if (fread(*buf, 1, want, f) != want) { st = md_errf(MD_ERR_DATA, "%s: read error", path); goto fail; }
    *len = want;
fail:
    fclose(f);
    return st;
}
