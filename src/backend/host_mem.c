/* host_mem.c - device memory that is host memory: the memory entries of the
 * backends whose buffers live in ordinary process memory (cpu, ref, the
 * Metal simulation). */
#include <string.h>

#include "backend/backend_impl.h"
#include "core/mem.h"

md_status md_host_alloc(md_device *dev, size_t bytes, void **ptr)
{
    (void)dev;
    *ptr = md_malloc(bytes);
    return *ptr ? MD_OK : MD_ERR_OOM;
}

void md_host_free(md_device *dev, void *ptr, size_t bytes)
{
    (void)dev;
    (void)bytes;
    md_free(ptr);
}

md_status md_host_copy(md_device *dev, void *dst, const void *src, size_t bytes)
{
    (void)dev;
    memmove(dst, src, bytes);
    return MD_OK;
}

md_status md_host_memset0(md_device *dev, void *dst, size_t bytes)
{
    (void)dev;
    memset(dst, 0, bytes);
    return MD_OK;
}

md_status md_host_sync(md_device *dev)
{
    (void)dev;
    return MD_OK;
}

void md_host_probe(struct md_probe *out)
{
    out->built = 1;
    out->available = 1;
    out->device_count = 1;
}
