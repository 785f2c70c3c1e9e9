/* cpu_backend.c - the CPU backend: lifecycle, tracked host memory, OpenBLAS
 * threading. The kernels are in the other files of this folder. */
#include <cblas.h>
#include <stdio.h>

#include "backend/backend_impl.h"
#include "backend/cpu/cpu_conv_wino.h"
#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/cpu_kernels.h"
#include "core/platform.h"
#include "core/timer.h"

static md_status cpu_device_info(int index, struct md_device_info *out)
{
    (void)index;
    const char *model = md_cpu_model();
    snprintf(out->name, sizeof out->name, "%s", model[0] ? model : "CPU");
    out->compute_units = md_cpu_physical_cores();
    out->total_memory = md_mem_total_bytes();
    out->free_memory = md_mem_available_bytes();
    snprintf(out->arch, sizeof out->arch, "%s", openblas_get_corename());
    snprintf(out->blas, sizeof out->blas, "OpenBLAS (%s)", openblas_get_config());
    out->unified_memory = 1;
    /* fp16/bf16 storage works everywhere; arithmetic is fp32 (see README). */
    out->supports_fp16 = 1;
    out->supports_bf16 = 1;
    out->has_events = 0;
    out->benefits_from_pinned = 0;
    out->prefers_channels_last = md_cpu_conv_prefers_nhwc();
    snprintf(out->conv_impl, sizeof out->conv_impl, "%s; %s", md_cpu_conv_kernels(),
             md_cpu_wino_enabled() ? "channels-last 3x3 stride 1 by Winograd F(4x4 or 2x2, 3x3)"
                                   : "Winograd off (MPSDIAG_CPU_WINOGRAD=0)");
    return MD_OK;
}

static double cpu_fma_peak(md_device *dev, const char **isa)
{
    (void)dev;
    return md_cpu_fma_peak_gflops(isa);
}

static md_status cpu_open(md_device *dev)
{
    int threads = dev->opts.threads > 0 ? dev->opts.threads : md_cpu_physical_cores();
    dev->opts.threads = threads;
    dev->info.compute_units = threads;
    /* One pool of `threads` workers runs everything, GEMM tiles included
     * (md_cpu_sgemm): OpenBLAS itself stays single-threaded, so its spinning
     * threads never compete with ours. */
    openblas_set_num_threads(1);
    md_cpu_set_threads(threads);
    return MD_OK;
}

/* Frees the kernels' scratch and joins the pool's workers; both come back on
 * the next kernel call if another CPU device is still open. */
static void cpu_close(md_device *dev)
{
    (void)dev;
    md_cpu_scratch_release();
    md_threadpool_shutdown();
}

static const struct md_backend_ops cpu_ops = {
    .api_version = MD_BACKEND_API_VERSION,
    .name = "cpu",
    .probe = md_host_probe,
    .device_info = cpu_device_info,
    .open = cpu_open,
    .close = cpu_close,
    MD_HOST_MEMORY_OPS,
    .fma_peak_gflops = cpu_fma_peak,
    .batchnorm_sync = 1,
    .batchnorm_residual = 1,
    .batchnorm_pool = 1,
    .batchnorm_pool_conv = 1,
};

static struct md_backend_ops cpu_ops_with_kernels;

const struct md_backend_ops *md_cpu_backend_ops(void)
{
    if (!cpu_ops_with_kernels.api_version) {
        cpu_ops_with_kernels = cpu_ops;
        cpu_ops_with_kernels.kernels = md_cpu_kernels;
    }
    return &cpu_ops_with_kernels;
}
