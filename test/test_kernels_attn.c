/* test_kernels_attn.c - CPU attention and layer norm: bit-identical results
 * for 1 and 3 threads (fixed query/key blocks and row chunks, one writer
 * per element, partial sums added in order). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "backend/kernels_call.h"
#include "kernel_cases.h"

static md_device *open_cpu(int threads)
{
    md_device *dev = NULL;
    struct md_device_opts o = {.threads = threads};
    cr_assert_eq(md_device_open(md_backend_find("cpu"), 0, &o, &dev), MD_OK, "%s", md_errmsg());
    return dev;
}

Test(kernels_attn, cpu_results_do_not_depend_on_thread_count)
{
    enum { B = 2, H = 3, T = 150, D = 24, N = B * H * T * D, R = 70, C = 96 };
    float *q = malloc(N * 4), *k = malloc(N * 4), *v = malloc(N * 4), *g = malloc(N * 4), *x = malloc(R * C * 4);
    kc_fill(q, N, 1, -1, 1), kc_fill(k, N, 2, -1, 1), kc_fill(v, N, 3, -1, 1), kc_fill(g, N, 4, -1, 1);
    kc_fill(x, R * C, 5, -2, 2);
    float *out[2][4], lse[2][B * H * T], ln[2][2][R * C], dgam[2][C];
    for (int t = 0; t < 2; t++) {
        md_device *dev = open_cpu(t ? 3 : 1);
        for (int j = 0; j < 4; j++) out[t][j] = malloc(N * 4);
        struct md_attn_args a = {.batch = B, .heads = H, .tq = T, .tk = T, .d = D, .causal = 1, .dropout_p = 0.1f,
                                 .seed = 11, .dtype = MD_F32, .q = q, .k = k, .v = v, .o = out[t][0], .lse = lse[t],
                                 .d_o = g, .dq = out[t][1], .dk = out[t][2], .dv = out[t][3]};
        cr_assert_eq(md_k_attn_fwd(dev, &a), MD_OK, "%s", md_errmsg());
        cr_assert_eq(md_k_attn_bwd(dev, &a), MD_OK, "%s", md_errmsg());
        float mean[R], rstd[R], dbet[C];
        struct md_layernorm_args l = {.rows = R, .d = C, .dtype = MD_F32, .eps = 1e-5f, .x = x, .y = ln[t][0],
                                      .mean = mean, .rstd = rstd, .dy = x, .dx = ln[t][1], .dgamma = dgam[t],
                                      .dbeta = dbet};
        cr_assert_eq(md_k_layernorm_fwd(dev, &l), MD_OK, "%s", md_errmsg());
        cr_assert_eq(md_k_layernorm_bwd(dev, &l), MD_OK, "%s", md_errmsg());
        md_device_close(dev);
    }
    static const char *const names[4] = {"o", "dq", "dk", "dv"};
    for (int j = 0; j < 4; j++)
        cr_assert(memcmp(out[0][j], out[1][j], N * 4) == 0, "attention %s differs between 1 and 3 threads", names[j]);
    cr_assert(memcmp(lse[0], lse[1], sizeof lse[0]) == 0, "lse differs between 1 and 3 threads");
    cr_assert(memcmp(ln[0], ln[1], sizeof ln[0]) == 0, "layernorm y/dx differ between 1 and 3 threads");
    cr_assert(memcmp(dgam[0], dgam[1], sizeof dgam[0]) == 0, "layernorm dgamma differs between 1 and 3 threads");
    for (int t = 0; t < 2; t++)
        for (int j = 0; j < 4; j++) free(out[t][j]);
    free(q), free(k), free(v), free(g), free(x);
}
