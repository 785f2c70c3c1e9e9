/* checkpoint.c - device tensors to and from safetensors files. */
#include "train/checkpoint.h"

#include <string.h>

#include "core/mem.h"

static size_t tensor_bytes(const struct md_ckpt_tensor *t)
{
    size_t n = 1;
    for (int d = 0; d < t->ndim; d++) n *= (size_t)t->shape[d];
    return n * md_dtype_size(t->dtype);
}

/* The filters of t inside its host copy `data`: to_krsc 1 into the device's
 * (K, R, S, C/g), 0 into the file's (K, C/g, R, S). */
static md_status permute_filters(const struct md_ckpt_tensor *t, float *data, int to_krsc)
{
    size_t most = 1;
    for (int i = 0; i < t->nfilters; i++)
        if ((size_t)t->filters[i].c * (size_t)t->filters[i].rs > most)
            most = (size_t)t->filters[i].c * (size_t)t->filters[i].rs;
    float *tmp = md_malloc(most * sizeof *tmp);
    if (!tmp) return md_errf(MD_ERR_OOM, "out of memory permuting '%s'", t->name);
    for (int i = 0; i < t->nfilters; i++) {
        const struct md_ckpt_filter *f = &t->filters[i];
        MD_ASSERT(t->dtype == MD_F32 && f->offset + (size_t)f->k * f->c * f->rs <= tensor_bytes(t) / 4);
        md_filter_permute(data + f->offset, tmp, f->k, f->c, f->rs, to_krsc);
    }
    md_free(tmp);
    return MD_OK;
}

md_status md_checkpoint_save(md_device *dev, const char *path, const struct md_ckpt_tensor *t, int n,
                             const cJSON *meta)
{
    md_status st;
    md_st_writer *w = NULL;
    unsigned char *host = NULL;
    size_t total = 0;
    for (int i = 0; i < n; i++) total += tensor_bytes(&t[i]);
    /* one staging block for every tensor: one allocation, downloads back to back */
    host = md_malloc(total ? total : 1);
    if (!host) return md_errf(MD_ERR_OOM, "%s: out of memory staging %zu bytes of checkpoint", path, total);
    if ((st = md_st_writer_new(&w)) != MD_OK) goto done;
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        size_t b = tensor_bytes(&t[i]);
        if (b && (st = md_dev_download(dev, host + off, t[i].dev, b)) != MD_OK) goto done;
        off += b;
    }
    if ((st = md_dev_sync(dev)) != MD_OK) goto done;
    off = 0;
    for (int i = 0; i < n; i++) {
        if (t[i].dev_krsc && t[i].nfilters && (st = permute_filters(&t[i], (float *)(void *)(host + off), 0)) != MD_OK)
            goto done;
        if ((st = md_st_writer_add(w, t[i].name, t[i].dtype, t[i].ndim, t[i].shape, host + off)) != MD_OK) goto done;
        off += tensor_bytes(&t[i]);
    }
    for (const cJSON *m = meta ? meta->child : NULL; m; m = m->next) {
        MD_ASSERT(cJSON_IsString(m));
        if ((st = md_st_writer_meta(w, m->string, m->valuestring)) != MD_OK) goto done;
    }
    if ((st = md_st_writer_meta(w, MD_ST_LAYOUT_KEY, MD_ST_LAYOUT_TORCH)) != MD_OK) goto done;
    st = md_st_writer_write(w, path);
done:
    md_st_writer_free(w);
    md_free(host);
    return st;
}

md_status md_checkpoint_load(md_device *dev, const char *path, const struct md_ckpt_tensor *t, int n,
                             md_st_file **out)
{
    if (out) *out = NULL;
    md_st_file *f = NULL;
    float *tmp = NULL;
    md_status st = md_st_open(path, &f);
    if (st != MD_OK) return st;
    int file_krsc = 0;
    const struct md_st_tensor **found = md_calloc((size_t)(n ? n : 1), sizeof *found);
    if (!found) { st = MD_ERR_OOM; goto done; }
    if ((st = md_st_filter_layout(f, &file_krsc)) != MD_OK) goto done;
    size_t most = 0;
    for (int i = 0; i < n; i++) {
        if ((st = md_st_expect(f, t[i].name, t[i].dtype, t[i].ndim, t[i].shape, &found[i])) != MD_OK) goto done;
        if (t[i].nfilters && file_krsc != t[i].dev_krsc && found[i]->nbytes > most) most = found[i]->nbytes;
    }
    /* the tensors whose filters change layout go through one host copy */
    if (most && !(tmp = md_malloc(most))) {
        st = md_errf(MD_ERR_OOM, "%s: out of memory staging %zu bytes", path, most);
        goto done;
    }
    for (int i = 0; i < n; i++) {
        const void *src = found[i]->data;
        if (t[i].nfilters && file_krsc != t[i].dev_krsc) {
            memcpy(tmp, found[i]->data, found[i]->nbytes);
            if ((st = permute_filters(&t[i], tmp, t[i].dev_krsc)) != MD_OK) goto done;
            src = tmp;
        }
        if (found[i]->nbytes && (st = md_dev_upload(dev, t[i].dev, src, found[i]->nbytes)) != MD_OK) goto done;
        /* the next permutation reuses tmp: the upload must have read it */
        if (src == tmp && (st = md_dev_sync(dev)) != MD_OK) goto done;
    }
    if ((st = md_dev_sync(dev)) != MD_OK) goto done;
    if (out) {
        *out = f;
        f = NULL;
    }
done:
    md_free(tmp);
    md_free(found);
    md_st_close(f);
    return st;
}
