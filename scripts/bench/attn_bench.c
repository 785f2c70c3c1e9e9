/* attn_bench.c - mpsdiag's attention kernels (attn_fwd, attn_bwd) on the GPU,
 * for scripts/bench/attn_vs_torch.sh (which runs the same shapes through
 * torch's scaled_dot_product_attention and prints the table).
 *
 * Output: one tab-separated line per case: batch, heads, tokens, head_dim,
 * causal, dtype, pass (fwd or bwd), median ms, kernels (gemm: the cuBLAS path
 * for short sequences, tc: the tensor-core kernels, simt: the SIMT kernels;
 * each forced through md_attn_args.path). FLOPs
 * and the fraction of the peak are computed by attn_vs_torch.py, identically
 * for both sides.
 * Built against mpsdiag's objects (attn_vs_torch.sh --build); KBENCH_DEVICE=cpu
 * runs a tiny dry run on the CPU backend; ATTN_BENCH_SHAPES=N runs only the first N shapes
 * (2: the ViT-S and ViT-B ones). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/kernels_call.h"
#include "core/rng.h"
#include "core/status.h"
#include "core/tensor.h"

#define BENCH_NAME "attn_bench"
#include "bench_common.h"

static float median_ms(const struct md_attn_args *a, int bwd, int iters)
{
    md_event *e[2];
    float ms[64];
    CK(md_event_create(dev, &e[0]), "event");
    CK(md_event_create(dev, &e[1]), "event");
    for (int i = 0; i < 3; i++) CK(bwd ? md_k_attn_bwd(dev, a) : md_k_attn_fwd(dev, a), "warm-up");
    for (int i = 0; i < iters; i++) {
        CK(md_event_record(dev, e[0]), "record");
        CK(bwd ? md_k_attn_bwd(dev, a) : md_k_attn_fwd(dev, a), "run");
        CK(md_event_record(dev, e[1]), "record");
        CK(md_event_elapsed_ms(dev, e[0], e[1], &ms[i]), "elapsed");
    }
    md_event_destroy(dev, e[0]);
    md_event_destroy(dev, e[1]);
    qsort(ms, (size_t)iters, sizeof ms[0], cmpf);
    return ms[iters / 2];
}

static void bench(int B, int H, int T, int D, int causal, md_dtype t, int path)
{
    size_t n = (size_t)B * H * T * D, es = md_dtype_size(t);
    struct md_attn_args a = {.batch = B, .heads = H, .tq = T, .tk = T, .d = D, .causal = causal, .dtype = t,
                             .path = path};
    a.q = rnd(n, t, 1), a.k = rnd(n, t, 2), a.v = rnd(n, t, 3), a.d_o = rnd(n, t, 4);
    void *o, *dq, *dk, *dv, *lse;
    CK(md_dev_alloc(dev, n * es, &o, "bench"), "alloc");
    CK(md_dev_alloc(dev, n * es, &dq, "bench"), "alloc");
    CK(md_dev_alloc(dev, n * es, &dk, "bench"), "alloc");
    CK(md_dev_alloc(dev, n * es, &dv, "bench"), "alloc");
    CK(md_dev_alloc(dev, (size_t)B * H * T * 4, &lse, "bench"), "alloc");
    a.o = o, a.lse = lse, a.dq = dq, a.dk = dk, a.dv = dv;
    for (int bwd = 0; bwd < 2; bwd++)
        printf("%d\t%d\t%d\t%d\t%d\t%s\t%s\t%.4f\t%s\n", B, H, T, D, causal, md_dtype_name(t), bwd ? "bwd" : "fwd",
               (double)median_ms(&a, bwd, 10),
               path == MD_ATTN_GEMM ? "gemm" : path == MD_ATTN_SIMT || t == MD_F32 ? "simt" : "tc");
    fflush(stdout);
    md_dev_free(dev, (void *)a.q), md_dev_free(dev, (void *)a.k), md_dev_free(dev, (void *)a.v);
    md_dev_free(dev, (void *)a.d_o), md_dev_free(dev, o), md_dev_free(dev, dq), md_dev_free(dev, dk);
    md_dev_free(dev, dv), md_dev_free(dev, lse);
}

int main(void)
{
    const char *devname = getenv("KBENCH_DEVICE");
    int dry = devname && !strcmp(devname, "cpu");
    const md_backend *b = md_backend_find(dry ? "cpu" : "cuda");
    const struct md_probe *p = md_backend_probe(b);
    if (!p->available) {
        fprintf(stderr, "attn_bench: %s unavailable: %s\n", dry ? "cpu" : "cuda", p->reason);
        return 4;
    }
    struct md_device_opts o = {.threads = 2};
    CK(md_device_open(b, 0, &o, &dev), "open");
    /* (batch, heads, tokens, head_dim): ViT-S/14 and ViT-B/14 with 4 registers
     * at 224x224 (261 tokens, batch 64), then about 2^25 tokens x head_dim per
     * tensor. The GEMM path only up to MD_ATTN_GEMM_MAX_T tokens. */
    static const int shapes[][4] = {{64, 6, 261, 64},  {64, 12, 261, 64}, {8, 16, 1024, 64},
                                    {4, 16, 2048, 64}, {2, 16, 4096, 64}, {4, 16, 2048, 128}};
    static const md_dtype types[] = {MD_BF16, MD_F32};
    static const int paths[] = {MD_ATTN_GEMM, MD_ATTN_FLASH, MD_ATTN_SIMT};
    /* ATTN_BENCH_SHAPES=N: only the first N shapes (2: the ViT ones) */
    int nshapes = getenv("ATTN_BENCH_SHAPES") ? atoi(getenv("ATTN_BENCH_SHAPES")) : 6;
    if (nshapes < 1 || nshapes > 6) nshapes = 6;
    for (int si = 0; si < (dry ? 1 : nshapes); si++)
        for (int ti = 0; ti < 2; ti++)
            for (int causal = 0; causal < 2; causal++)
                for (int pi = 0; pi < (types[ti] == MD_F32 ? 2 : 3); pi++) {
                    const int *s = shapes[si];
                    if (!dry && paths[pi] == MD_ATTN_GEMM && s[2] > MD_ATTN_GEMM_MAX_T) continue;
                    if (!dry && paths[pi] == MD_ATTN_SIMT && s[2] > 1024) continue; /* minutes per shape */
                    if (dry) bench(1, 2, 100, 64, causal, types[ti], paths[pi]);
                    else bench(s[0], s[1], s[2], s[3], causal, types[ti], paths[pi]);
                }
    md_device_close(dev);
    return 0;
}
