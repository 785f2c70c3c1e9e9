/* cudnn_fusion_probe.c - does cuDNN's graph API fuse a batch norm into the
 * neighbouring convolutions faster than running them apart? For ResNet-50
 * (batch 128) and ResNet-18 CIFAR (batch 256) convolution shapes, channels-
 * last, bf16 and fp32, it builds and times (best of up to N heuristic plans,
 * 20 runs each, device events):
 *   fwd        the convolution alone (what mpsdiag runs)
 *   fwd+gs     the convolution with GenStats (per-channel sum and sum of
 *              squares of y: the batch norm's statistics) in its epilogue
 *   pro+fwd    scale, bias and ReLU (a batch norm's apply) on x in its prologue
 *   pro+f+gs   both (the ConvBNfprop pattern)
 *   wgrad, pro+wgr  the filter gradient, alone and with that prologue
 *   copyY, copyX    a device-to-device copy of y and of x: a memory pass
 * -1 where no plan builds or runs. With "stem" after N: the stride-2 stems on
 * few channels instead (ResNet-50's 7x7 on 3 channels, zero-padded to 4 and
 * 8, and as the space-to-depth 4x4 stride-1 convolution on 12 and 16
 * channels that cuda_conv.cu runs; ResNet-18 CIFAR's 3x3 stride-1 stem on 3,
 * 4 and 8 channels), forward and filter gradient only, each with the time of
 * the heuristics' first plan (what mpsdiag runs by default) and the best of N.
 * Not part of `make`; build and run on a machine with a GPU:
 *   cc -O2 -std=c11 -I/usr/local/cuda/include scripts/bench/cudnn_fusion_probe.c \
 *      -L/usr/local/cuda/lib64 -lcudnn -lcudart -o build/cudnn_fusion_probe
 *   build/cudnn_fusion_probe [N [stem]]     (N: plans tried per graph, default 2)
 * Results: docs/cuda.md ("cuDNN's fused convolutions", "Space-to-depth"). */
#include <cuda_runtime.h>
#include <cudnn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
typedef cudnnBackendDescriptor_t D;
static cudnnHandle_t H;
#define CK(x)                                                                                                \
    do {                                                                                                     \
        cudnnStatus_t s_ = (x);                                                                              \
        if (s_) {                                                                                            \
            fprintf(stderr, "%s:%d %s -> %s\n", __FILE__, __LINE__, #x, cudnnGetErrorString(s_));            \
            return NULL;                                                                                     \
        }                                                                                                    \
    } while (0)
static D mk(cudnnBackendDescriptorType_t t)
{
    D d = NULL;
    cudnnBackendCreateDescriptor(t, &d);
    return d;
}
#define SA(d, n, t, c, v)                                                                                    \
    do {                                                                                                     \
        cudnnStatus_t s_ = cudnnBackendSetAttribute(d, n, t, c, v);                                          \
        if (s_) {                                                                                            \
            fprintf(stderr, "set %s line %d: %s\n", #n, __LINE__, cudnnGetErrorString(s_));                  \
            return NULL;                                                                                     \
        }                                                                                                    \
    } while (0)
static D tensor(int64_t uid, cudnnDataType_t dt, int64_t n, int64_t c, int64_t h, int64_t w, int virt)
{
    int64_t dims[4] = {n, c, h, w}, st[4] = {h * w * c, 1, w * c, c}, al = 16;
    bool v = virt;
    D d = mk(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    SA(d, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    SA(d, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dims);
    SA(d, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, st);
    SA(d, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    SA(d, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &al);
    SA(d, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &v);
    CK(cudnnBackendFinalize(d));
    return d;
}
static D convdesc(int st, int pad)
{
    int64_t sp = 2, dil[2] = {1, 1}, str[2] = {st, st}, p[2] = {pad, pad};
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
    D cv = mk(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
    SA(cv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    SA(cv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode);
    SA(cv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &sp);
    SA(cv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, 2, dil);
    SA(cv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, 2, str);
    SA(cv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, 2, p);
    SA(cv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, 2, p);
    CK(cudnnBackendFinalize(cv));
    return cv;
}
static D conv_op(int dir, D x, D w, D y, D cv)
{
    float a = 1, b = 0;
    D op;
    if (dir == 0) {
        op = mk(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR);
        SA(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
        SA(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w);
        SA(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
        SA(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cv);
        SA(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &a);
        SA(op, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &b);
    } else {
        op = mk(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR);
        SA(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
        SA(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &w);
        SA(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
        SA(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cv);
        SA(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_TYPE_FLOAT, 1, &a);
        SA(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA, CUDNN_TYPE_FLOAT, 1, &b);
    }
    CK(cudnnBackendFinalize(op));
    return op;
}
static D pw(cudnnPointwiseMode_t m, D x, D b, D y)
{
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    D p = mk(CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    SA(p, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &m);
    SA(p, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    CK(cudnnBackendFinalize(p));
    D op = mk(CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    SA(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &p);
    SA(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    if (b) SA(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    SA(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    CK(cudnnBackendFinalize(op));
    return op;
}
static D genstats(D x, D sum, D sq)
{
    cudnnGenStatsMode_t m = CUDNN_GENSTATS_SUM_SQSUM;
    cudnnDataType_t prec = CUDNN_DATA_FLOAT;
    D op = mk(CUDNN_BACKEND_OPERATION_GEN_STATS_DESCRIPTOR);
    SA(op, CUDNN_ATTR_OPERATION_GENSTATS_MODE, CUDNN_TYPE_GENSTATS_MODE, 1, &m);
    SA(op, CUDNN_ATTR_OPERATION_GENSTATS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    SA(op, CUDNN_ATTR_OPERATION_GENSTATS_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    SA(op, CUDNN_ATTR_OPERATION_GENSTATS_SUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sum);
    SA(op, CUDNN_ATTR_OPERATION_GENSTATS_SQSUMDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &sq);
    CK(cudnnBackendFinalize(op));
    return op;
}
/* builds up to maxc plans from heuristics (mode), times each, returns best ms or -1;
 * first_ms: the first plan's time */
static float first_ms;
static float best_time(D *ops, int nops, int64_t *uids, void **ptrs, int nio, int maxc, int *nplans,
                       char *engname)
{
    *nplans = 0;
    for (int i = 0; i < nops; i++)
        if (!ops[i]) return -2;
    D g = mk(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    if (cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, nops, ops))
        return -3;
    cudnnBackendSetAttribute(g, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &H);
    cudnnStatus_t s = cudnnBackendFinalize(g);
    if (s) {
        fprintf(stderr, "graph finalize: %s\n", cudnnGetErrorString(s));
        return -4;
    }
    float best = -1;
    cudnnBackendHeurMode_t modes[2] = {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK};
    for (int mi = 0; mi < 2 && best < 0; mi++) {
        D heur = mk(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
        cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR,
                                 1, &g);
        cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &modes[mi]);
        if ((s = cudnnBackendFinalize(heur))) {
            fprintf(stderr, "heur %d finalize: %s\n", mi, cudnnGetErrorString(s));
            continue;
        }
        D cfg[16];
        for (int i = 0; i < 16; i++)
            cfg[i] = mk(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
        int64_t got = 0;
        s = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 16,
                                     &got, cfg);
        if (s) {
            fprintf(stderr, "heur results: %s\n", cudnnGetErrorString(s));
            continue;
        }
        int tried = 0;
        for (int i = 0; i < got && tried < maxc; i++) {
            D plan = mk(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
            cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &H);
            cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                     CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfg[i]);
            if (cudnnBackendFinalize(plan)) {
                cudnnBackendDestroyDescriptor(plan);
                continue;
            }
            int64_t ws = 0, n = 0;
            cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n,
                                     &ws);
            void *wsp = NULL;
            if (ws > 0) cudaMalloc(&wsp, ws);
            D vp = mk(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
            cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, nio, uids);
            cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, nio,
                                     ptrs);
            cudnnBackendSetAttribute(vp, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &wsp);
            cudnnBackendFinalize(vp);
            tried++;
            if ((s = cudnnBackendExecute(H, plan, vp))) {
                fprintf(stderr, "exec: %s\n", cudnnGetErrorString(s));
                goto next;
            }
            {
                cudaEvent_t e0, e1;
                cudaEventCreate(&e0);
                cudaEventCreate(&e1);
                cudnnBackendExecute(H, plan, vp);
                cudaEventRecord(e0, 0);
                for (int r = 0; r < 20; r++)
                    cudnnBackendExecute(H, plan, vp);
                cudaEventRecord(e1, 0);
                cudaEventSynchronize(e1);
                float ms;
                cudaEventElapsedTime(&ms, e0, e1);
                ms /= 20;
                if (*nplans == 0) first_ms = ms;
                (*nplans)++;
                if (best < 0 || ms < best) {
                    best = ms;
                    char nm[256] = "";
                    int64_t nn = 0;
                    D eng = mk(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
                    int64_t gi = -1;
                    if (!cudnnBackendGetAttribute(cfg[i], CUDNN_ATTR_ENGINECFG_ENGINE,
                                                  CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &nn, &eng))
                        cudnnBackendGetAttribute(eng, CUDNN_ATTR_ENGINE_GLOBAL_INDEX, CUDNN_TYPE_INT64, 1,
                                                 &nn, &gi);
                    snprintf(nm, sizeof nm, "%s%lld", mi ? "fb" : "e", (long long)gi);
                    strcpy(engname, nm);
                }
                cudaEventDestroy(e0);
                cudaEventDestroy(e1);
            }
        next:
            cudnnBackendDestroyDescriptor(vp);
            cudnnBackendDestroyDescriptor(plan);
            if (wsp) cudaFree(wsp);
        }
    }
    if (cudaGetLastError()) fprintf(stderr, "cuda error\n");
    return best;
}
static float copy_ms(void *dst, const void *src, size_t bytes)
{
    cudaEvent_t e0, e1;
    float ms = -1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0);
    cudaEventRecord(e0, 0);
    for (int r = 0; r < 20; r++)
        cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, 0);
    cudaEventRecord(e1, 0);
    cudaEventSynchronize(e1);
    cudaEventElapsedTime(&ms, e0, e1);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    return ms / 20;
}
typedef struct {
    const char *name;
    int n, c, h, w, k, r, st, pad;
} shp;
int main(int argc, char **argv)
{
    cudnnCreate(&H);
    printf("cudnn %zu\n", cudnnGetVersion());
    shp S[] = {
        {"r50 l1 1x1 64-64 56", 128, 64, 56, 56, 64, 1, 1, 0},
        {"r50 l1 3x3 64-64 56", 128, 64, 56, 56, 64, 3, 1, 1},
        {"r50 l1 1x1 64-256 56", 128, 64, 56, 56, 256, 1, 1, 0},
        {"r50 l1 1x1 256-64 56", 128, 256, 56, 56, 64, 1, 1, 0},
        {"r50 l2 3x3 128 28", 128, 128, 28, 28, 128, 3, 1, 1},
        {"r50 l2 1x1 512-128 28", 128, 512, 28, 28, 128, 1, 1, 0},
        {"r50 l3 3x3 256 14", 128, 256, 14, 14, 256, 3, 1, 1},
        {"r50 l3 1x1 256-1024 14", 128, 256, 14, 14, 1024, 1, 1, 0},
        {"r50 l4 3x3 512 7", 128, 512, 7, 7, 512, 3, 1, 1},
        {"r18c 3x3 64 32", 256, 64, 32, 32, 64, 3, 1, 1},
        {"r18c 3x3 128 16", 256, 128, 16, 16, 128, 3, 1, 1},
        {"r18c 3x3 256 8", 256, 256, 8, 8, 256, 3, 1, 1},
    };
    shp stems[] = {
        {"r50 stem c3 7x7/2 224", 128, 3, 224, 224, 64, 7, 2, 3},
        {"r50 stem c4 7x7/2 224", 128, 4, 224, 224, 64, 7, 2, 3},
        {"r50 stem c8 7x7/2 224", 128, 8, 224, 224, 64, 7, 2, 3},
        {"r50 s2d c12 4x4 115", 128, 12, 115, 115, 64, 4, 1, 0},
        {"r50 s2d c16 4x4 115", 128, 16, 115, 115, 64, 4, 1, 0},
        {"r18c stem c3 3x3 32", 256, 3, 32, 32, 64, 3, 1, 1},
        {"r18c stem c4 3x3 32", 256, 4, 32, 32, 64, 3, 1, 1},
        {"r18c stem c8 3x3 32", 256, 8, 32, 32, 64, 3, 1, 1},
    };
    int stem = argc > 2 && strcmp(argv[2], "stem") == 0;
    shp *L = stem ? stems : S;
    int ns = stem ? (int)(sizeof stems / sizeof stems[0]) : (int)(sizeof S / sizeof S[0]);
    int maxc = argc > 1 ? atoi(argv[1]) : 2;
    cudnnDataType_t dts[2] = {CUDNN_DATA_BFLOAT16, CUDNN_DATA_FLOAT};
    void *bx, *bw, *by, *bst;
    size_t big = (size_t)1 << 31;
    cudaMalloc(&bx, big);
    cudaMalloc(&by, big);
    cudaMalloc(&bw, 64 << 20);
    cudaMalloc(&bst, 1 << 20);
    cudaMemset(bx, 0, big);
    cudaMemset(by, 0, big);
    cudaMemset(bw, 0, 64 << 20);
    cudaMemset(bst, 0, 1 << 20);
    printf("%-24s %-4s %9s %9s %9s %9s | %9s %9s | %8s %8s  engines\n", "shape", "dt", "fwd", "fwd+gs",
           "pro+fwd", "pro+f+gs", "wgrad", "pro+wgr", "copyY", "copyX");
    for (int di = 0; di < 2; di++)
        for (int si = 0; si < ns; si++) {
            shp q = L[si];
            int p = (q.h + 2 * q.pad - q.r) / q.st + 1, qq = (q.w + 2 * q.pad - q.r) / q.st + 1;
            cudnnDataType_t dt = dts[di];
            int es = di ? 4 : 2;
            D cv = convdesc(q.st, q.pad);
            float t[6];
            int npl[6];
            char en[6][64] = {"", "", "", "", "", ""};
            for (int v = 0; v < 6; v++) {
                if (stem && v != 0 && v != 4) { /* the stems: forward and filter gradient */
                    t[v] = -1;
                    npl[v] = 0;
                    continue;
                }
                D x = tensor(1, dt, q.n, q.c, q.h, q.w, 0), w = tensor(2, dt, q.k, q.c, q.r, q.r, 0),
                  y = tensor(3, dt, q.n, q.k, p, qq, 0);
                D sum = tensor(4, CUDNN_DATA_FLOAT, 1, q.k, 1, 1, 0),
                  sq = tensor(5, CUDNN_DATA_FLOAT, 1, q.k, 1, 1, 0);
                D sc = tensor(6, CUDNN_DATA_FLOAT, 1, q.c, 1, 1, 0),
                  bi = tensor(7, CUDNN_DATA_FLOAT, 1, q.c, 1, 1, 0);
                D t1 = tensor(101, CUDNN_DATA_FLOAT, q.n, q.c, q.h, q.w, 1),
                  t2 = tensor(102, CUDNN_DATA_FLOAT, q.n, q.c, q.h, q.w, 1);
                D t3 = tensor(103, dt, q.n, q.c, q.h, q.w, 1);
                D ops[8];
                int no = 0;
                int pro = v == 2 || v == 3 || v == 5, gs = v == 1 || v == 3, wg = v >= 4;
                D xin = x;
                if (pro) {
                    ops[no++] = pw(CUDNN_POINTWISE_MUL, x, sc, t1);
                    ops[no++] = pw(CUDNN_POINTWISE_ADD, t1, bi, t2);
                    ops[no++] = pw(CUDNN_POINTWISE_RELU_FWD, t2, NULL, t3);
                    xin = t3;
                }
                ops[no++] = conv_op(wg, xin, w, y, cv);
                if (gs) ops[no++] = genstats(y, sum, sq);
                int64_t all_u[7] = {1, 2, 3, 4, 5, 6, 7};
                void *all_p[7] = {
                    bx, bw, by, bst, (char *)bst + 16384, (char *)bst + 32768, (char *)bst + 49152};
                int64_t uids[7];
                void *ptrs[7];
                int nio = 0;
                for (int u = 0; u < 7; u++) {
                    if ((u == 3 || u == 4) && !gs) continue;
                    if ((u == 5 || u == 6) && !pro) continue;
                    uids[nio] = all_u[u];
                    ptrs[nio++] = all_p[u];
                }
                t[v] = best_time(ops, no, uids, ptrs, nio, maxc, &npl[v], en[v]);
                if (stem)
                    printf("  %-22s %-4s %-5s first plan %.4f ms, best of %d %.4f (%s)\n", q.name, di ? "f32" : "bf16",
                           v ? "wgrad" : "fwd", first_ms, npl[v], t[v], en[v]);
            }
            size_t ny = (size_t)q.n * q.k * p * qq * es, nx = (size_t)q.n * q.c * q.h * q.w * es;
            float cy = copy_ms(by, bx, ny), cx = copy_ms(by, bx, nx);
            printf("%-24s %-4s %9.4f %9.4f %9.4f %9.4f | %9.4f %9.4f | %8.4f %8.4f  %s/%s/%s/%s/%s/%s (n %d "
                   "%d %d %d %d %d)\n",
                   q.name, di ? "f32" : "bf16", t[0], t[1], t[2], t[3], t[4], t[5], cy, cx, en[0], en[1],
                   en[2], en[3], en[4], en[5], npl[0], npl[1], npl[2], npl[3], npl[4], npl[5]);
            fflush(stdout);
        }
    return 0;
}
