/* ref_backend.c - the reference "device": host memory, one thread, the plain
 * kernels of ref_kernels.c. Not user-selectable; tests open it by name. */
#include <stdio.h>

#include "backend/backend_impl.h"
#include "backend/ref/ref_kernels.h"

static md_status ref_device_info(int index, struct md_device_info *out)
{
    (void)index;
    snprintf(out->name, sizeof out->name, "reference kernels (double accumulation)");
    out->compute_units = 1;
    out->unified_memory = 1;
    out->supports_fp16 = out->supports_bf16 = 1;
    return MD_OK;
}

static md_status ref_open(md_device *dev) { (void)dev; return MD_OK; }
static void ref_close(md_device *dev) { (void)dev; }

static struct md_backend_ops ref_ops = {
    .api_version = MD_BACKEND_API_VERSION,
    .name = "ref",
    .probe = md_host_probe,
    .device_info = ref_device_info,
    .open = ref_open,
    .close = ref_close,
    MD_HOST_MEMORY_OPS,
    .batchnorm_sync = 1,
    .batchnorm_residual = 1,
};

const struct md_backend_ops *md_ref_backend_ops(void)
{
    ref_ops.kernels = md_ref_kernels;
    return &ref_ops;
}
