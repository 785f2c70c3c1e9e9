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
        if ((st = md_st_writer_add(w, t[i].name, t[i].dtype, t[i].ndim, t[i].shape, host + off)) != MD_OK) goto done;
        off += b;
    }
    if ((st = md_dev_sync(dev)) != MD_OK) goto done;
    for (const cJSON *m = meta ? meta->child : NULL; m; m = m->next) {
        MD_ASSERT(cJSON_IsString(m));
        if ((st = md_st_writer_meta(w, m->string, m->valuestring)) != MD_OK) goto done;
    }
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
    md_status st = md_st_open(path, &f);
    if (st != MD_OK) return st;
    const struct md_st_tensor **found = md_calloc((size_t)(n ? n : 1), sizeof *found);
    if (!found) { st = MD_ERR_OOM; goto done; }
    for (int i = 0; i < n; i++)
        if ((st = md_st_expect(f, t[i].name, t[i].dtype, t[i].ndim, t[i].shape, &found[i])) != MD_OK) goto done;
    for (int i = 0; i < n; i++)
        if (found[i]->nbytes && (st = md_dev_upload(dev, t[i].dev, found[i]->data, found[i]->nbytes)) != MD_OK)
            goto done;
    if ((st = md_dev_sync(dev)) != MD_OK) goto done;
    if (out) {
        *out = f;
        f = NULL;
    }
done:
    md_free(found);
    md_st_close(f);
    return st;
}
