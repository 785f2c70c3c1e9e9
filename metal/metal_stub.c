/* metal_stub.c - the Metal backend on platforms without Metal: its probe says
 * why it is unavailable. On macOS the Makefile builds the Objective-C files of metal/ instead. */
#include <stdio.h>

#include "backend/backend_impl.h"
#include "metal_backend.h"

static void metal_stub_probe(struct md_probe *out)
{
    out->built = 0;
    out->available = 0;
    out->device_count = 0;
    snprintf(out->reason, sizeof out->reason, "Metal needs macOS on Apple Silicon (this build is not for macOS)");
}

static md_status metal_stub_info(int index, struct md_device_info *out)
{
    (void)index;
    (void)out;
    return md_errf(MD_ERR_DEVICE, "Metal is not available on this platform");
}

static md_status metal_stub_open(md_device *dev)
{
    (void)dev;
    return md_errf(MD_ERR_DEVICE, "Metal is not available on this platform");
}

static void metal_stub_close(md_device *dev) { (void)dev; }

static const struct md_backend_ops metal_stub_ops = {
    .api_version = MD_BACKEND_API_VERSION,
    .name = "metal",
    .probe = metal_stub_probe,
    .device_info = metal_stub_info,
    .open = metal_stub_open,
    .close = metal_stub_close,
};

const struct md_backend_ops *md_metal_backend_ops(void) { return &metal_stub_ops; }

double md_metal_compile_seconds(const md_device *dev)
{
    (void)dev;
    return 0.0;
}
