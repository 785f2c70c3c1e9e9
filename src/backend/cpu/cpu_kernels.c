/* cpu_kernels.c - the CPU kernel table (the kernels are filed by op family
 * in cpu_<family>.c), thread setting, scratch buffers. */
#include "backend/cpu/cpu_kernels.h"

#include <pthread.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "core/mem.h"

static int cpu_threads = 1;

void md_cpu_set_threads(int n)
{
    cpu_threads = n > 0 ? n : 1;
    md_threadpool_set_size(cpu_threads);
}
int md_cpu_threads(void) { return cpu_threads; }

/* ---- scratch ------------------------------------------------------------------- */

static pthread_mutex_t cpu_mutex = PTHREAD_MUTEX_INITIALIZER;
static void *scratch[CPU_SCR_COUNT];
static size_t scratch_bytes[CPU_SCR_COUNT];

void md_cpu_lock(void) { pthread_mutex_lock(&cpu_mutex); }
void md_cpu_unlock(void) { pthread_mutex_unlock(&cpu_mutex); }

void *md_cpu_scratch(int slot, size_t bytes)
{
    if (bytes < 64) bytes = 64; /* never a NULL "success" for an empty request */
    if (bytes <= scratch_bytes[slot]) return scratch[slot];
    md_free(scratch[slot]);
    /* grow by half again, so a slowly growing size does not reallocate each call */
    size_t want = bytes + bytes / 2;
    scratch[slot] = md_malloc(want);
    scratch_bytes[slot] = scratch[slot] ? want : 0;
    if (!scratch[slot]) md_errf(MD_ERR_OOM, "cpu kernels: cannot allocate %zu bytes of scratch", want);
    return scratch[slot];
}

void md_cpu_scratch_release(void)
{
    md_cpu_lock();
    for (int i = 0; i < CPU_SCR_COUNT; i++) {
        md_free(scratch[i]);
        scratch[i] = NULL;
        scratch_bytes[i] = 0;
    }
    md_cpu_unlock();
}

struct conv_ctx { const void *src; md_dtype t; float *dst; };

static void to_f32_range(void *vctx, long long b, long long e)
{
    struct conv_ctx *c = vctx;
    const uint16_t *s = c->src;
    if (c->t == MD_BF16)
        for (long long i = b; i < e; i++) c->dst[i] = md_bf16_to_f32(s[i]);
    else
        for (long long i = b; i < e; i++) c->dst[i] = md_f16_to_f32(s[i]);
}

const float *md_cpu_to_f32(const void *src, md_dtype t, size_t n, float *dst)
{
    if (t == MD_F32) return src;
    struct conv_ctx c = {src, t, dst};
    md_parallel_for((long long)n, CPU_GRAIN, to_f32_range, &c);
    return dst;
}

/* ---- GEMM ------------------------------------------------------------------------ */

const struct md_kernels md_cpu_kernels = {
    .gemm = md_cpu_gemm,
    .conv2d_fwd = md_cpu_conv2d_fwd,
    .conv2d_bwd_data = md_cpu_conv2d_bwd_data,
    .conv2d_bwd_filter = md_cpu_conv2d_bwd_filter,
    .batchnorm_fwd = md_cpu_batchnorm_fwd,
    .batchnorm_bwd = md_cpu_batchnorm_bwd,
    .act_fwd = md_cpu_act_fwd,
    .act_bwd = md_cpu_act_bwd,
    .pool2d_fwd = md_cpu_pool2d_fwd,
    .pool2d_bwd = md_cpu_pool2d_bwd,
    .gap_fwd = md_cpu_gap_fwd,
    .gap_bwd = md_cpu_gap_bwd,
    .bias_add = md_cpu_bias_add,
    .bias_grad = md_cpu_bias_grad,
    .dropout_fwd = md_cpu_dropout_fwd,
    .dropout_bwd = md_cpu_dropout_bwd,
    .ew = md_cpu_ew,
    .reduce = md_cpu_reduce,
    .chslice = md_cpu_chslice,
    .xent = md_cpu_xent,
    .cast = md_cpu_cast,
    .permute = md_cpu_permute,
    .optim = md_cpu_optim,
    .layernorm_fwd = md_cpu_layernorm_fwd,
    .layernorm_bwd = md_cpu_layernorm_bwd,
    .softmax_fwd = md_cpu_softmax_fwd,
    .softmax_bwd = md_cpu_softmax_bwd,
    .attn_fwd = md_cpu_attn_fwd,
    .attn_bwd = md_cpu_attn_bwd,
    .regress = md_cpu_regress,
    .tiles_fwd = md_cpu_tiles_fwd,
    .tiles_bwd = md_cpu_tiles_bwd,
    .film_fwd = md_cpu_film_fwd,
    .film_bwd = md_cpu_film_bwd,
    .chscale_fwd = md_cpu_chscale_fwd,
    .chscale_bwd = md_cpu_chscale_bwd,
};
