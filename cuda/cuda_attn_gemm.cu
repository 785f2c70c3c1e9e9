/* cuda_attn_gemm.cu - scaled-dot-product attention for short sequences as
 * cuBLAS batched matrix products around fused elementwise kernels: the path
 * for ViT-sized token counts (a few hundred), where the T x T scores of every
 * (batch, head) fit in device memory and cuBLAS's tuned GEMMs beat the
 * hand-written tiles of cuda_attn_tc.cu.
 *
 *   Forward (per batch*head, in chunks):
 *     S = scale Q K^T       fp32 (tq, tk), cublasGemmBatchedEx (fp32 output)
 *     P = softmax(S)        k_gemm_softmax: causal mask, row logsumexp -> lse,
 *                           dropout (the same counter per weight as every
 *                           other path), P rounded to the compute type
 *     O = P V               cublasGemmBatchedEx
 *   Backward (P recomputed from lse, as the other paths do; nothing per
 *   (query, key) is kept between forward and backward):
 *     S = scale Q K^T, dP = dO V^T      fp32
 *     k_gemm_dsoftmax: P = exp(S - lse), Pd = P keep, dS = P (dP keep - D)
 *     dV = Pd^T dO, dQ = scale dS K, dK = scale dS^T Q   (each + beta * old)
 *   with D = rowsum(dO * O) computed beforehand by cuda_attn.cu.
 *
 * Q, K, V, O and their gradients are read in place through their strides (a
 * fused QKV projection's (B, T, 3, H, D) buffer needs no repacking): the
 * (batch, head) pairs do not share one stride, so the products go through
 * pointer arrays (cublasGemmBatchedEx), filled by one small kernel per call.
 * The call takes only 16-byte aligned operands (md_cuda_attn_gemm_covers).
 *
 * Scratch (attn_ws, grows, never shrinks while the device is open): the
 * pointer tables, then per chunk of batch*head pairs S (fp32), P (compute
 * type; aliases S in fp32) and in backward dP (fp32) and dS (aliases dP in
 * fp32), each (tq, ldk) with ldk = tk rounded up to 8. A chunk holds as many
 * pairs as fit in ATTN_GEMM_CHUNK_BYTES (at least one). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_attn.cuh"

#define ATTN_GEMM_CHUNK_BYTES ((size_t)256 << 20)
#define ATTN_GEMM_THREADS 128

/* ---- pointer tables ---------------------------------------------------------------------------------------------- */

#define GT_MAX 11

/* Table t, entry bh: base[t] + (bh / heads) s0[t] + (bh % heads) s1[t] +
 * (bh % nb) mat[t] bytes (tensors: mat 0; scratch: s0 = s1 = 0). */
struct gemm_tables {
    char *base[GT_MAX];
    long long s0[GT_MAX], s1[GT_MAX], mat[GT_MAX];
    int n, bh, heads, nb;
};

static __global__ void k_gemm_tables(gemm_tables g, void **out)
{
    long long n = (long long)g.n * g.bh;
    for (long long x = (long long)blockIdx.x * blockDim.x + threadIdx.x; x < n; x += (long long)gridDim.x * blockDim.x) {
        int t = (int)(x / g.bh), bh = (int)(x % g.bh);
        char *b = g.base[t];
        out[x] = b ? b + (long long)(bh / g.heads) * g.s0[t] + (long long)(bh % g.heads) * g.s1[t] +
                         (long long)(bh % g.nb) * g.mat[t]
                   : nullptr;
    }
}

/* ---- elementwise kernels ----------------------------------------------------------------------------------------- */

__device__ __forceinline__ float gemm_block_max(float v)
{
    __shared__ float sh[32];
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    v = lane < nw ? sh[lane] : -INFINITY;
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* The keys query i sees: all, or j <= i (causal, top-left aligned). */
__device__ __forceinline__ int gemm_kend(const attn_p &p, int i) { return p.causal ? min(p.tk, i + 1) : p.tk; }

/* A block per row r of the chunk (pair bh0 + r / tq, query r % tq): S (fp32)
 * -> lse and P (T; may alias S in fp32: every element is read and written by
 * the same thread, the last read before the write). */
template <class T>
__global__ void k_gemm_softmax(attn_p p, int bh0, int ldk, const float *S, T *P, float *lse)
{
    int r = blockIdx.x, i = r % p.tq, bh = bh0 + r / p.tq, kend = gemm_kend(p, i);
    const float *s = S + (size_t)r * ldk;
    T *pr = P + (size_t)r * ldk;
    uint64_t off = p.offset + (p.offset_dev ? *p.offset_dev : 0);
    float m = -INFINITY;
    for (int j = threadIdx.x; j < kend; j += blockDim.x) m = fmaxf(m, s[j]);
    m = gemm_block_max(m);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < kend; j += blockDim.x) sum += expf(s[j] - m);
    sum = block_sum(sum);
    float L = m + logf(sum);
    if (threadIdx.x == 0) lse[(size_t)bh * p.tq + i] = L;
    for (int j = threadIdx.x; j < p.tk; j += blockDim.x) {
        float v = j < kend ? expf(s[j] - L) * att_keep(p, off, bh, i, j) : 0.0f;
        pr[j] = fromf<T>(v);
    }
}

/* A block per row, as k_gemm_softmax: from S and dP (fp32) and the row's lse
 * and D, Pd = P keep into P and dS = P (dP keep - D) into dS (T; P may alias
 * S and dS alias dP in fp32). */
template <class T>
__global__ void k_gemm_dsoftmax(attn_p p, int bh0, int ldk, const float *S, const float *dP, const float *lse,
                                const float *D, T *P, T *dS)
{
    int r = blockIdx.x, i = r % p.tq, bh = bh0 + r / p.tq, kend = gemm_kend(p, i);
    size_t row = (size_t)r * ldk;
    uint64_t off = p.offset + (p.offset_dev ? *p.offset_dev : 0);
    float L = lse[(size_t)bh * p.tq + i], Di = D[(size_t)bh * p.tq + i];
    for (int j = threadIdx.x; j < p.tk; j += blockDim.x) {
        float pd = 0.0f, ds = 0.0f;
        if (j < kend) {
            float pij = expf(S[row + j] - L), keep = att_keep(p, off, bh, i, j);
            pd = pij * keep;
            ds = pij * (dP[row + j] * keep - Di);
        }
        P[row + j] = fromf<T>(pd);
        dS[row + j] = fromf<T>(ds);
    }
}

/* ---- host side --------------------------------------------------------------------------------------------------- */

static int gemm_tk_ld(int tk) { return (tk + 7) & ~7; }

static int gemm_ok_ptr(const void *ptr) { return ptr == NULL || ((uintptr_t)ptr & 15u) == 0; }

static int gemm_ok_strides(const long long in[3], int heads, int t, int d, size_t es)
{
    long long s[3];
    md_attn_strides(in, heads, t, d, s);
    return ((size_t)s[0] * es) % 16 == 0 && ((size_t)s[1] * es) % 16 == 0 && s[2] >= d && s[2] <= 0x7fffffffLL;
}

int md_cuda_attn_gemm_covers(const struct md_attn_args *a)
{
    if (a->dtype != MD_F32 && a->dtype != MD_F16 && a->dtype != MD_BF16) return 0;
    size_t es = md_dtype_size(a->dtype);
    if ((long long)a->tq * gemm_tk_ld(a->tk) > 0x7fffffffLL) return 0;
    return gemm_ok_ptr(a->q) && gemm_ok_ptr(a->k) && gemm_ok_ptr(a->v) && gemm_ok_ptr(a->o) && gemm_ok_ptr(a->d_o) &&
           gemm_ok_ptr(a->dq) && gemm_ok_ptr(a->dk) && gemm_ok_ptr(a->dv) &&
           gemm_ok_strides(a->sq, a->heads, a->tq, a->d, es) && gemm_ok_strides(a->sk, a->heads, a->tk, a->d, es) &&
           gemm_ok_strides(a->sv, a->heads, a->tk, a->d, es) && gemm_ok_strides(a->so, a->heads, a->tq, a->d, es);
}

/* Row-major C (m, n) = alpha op(A) op(B) + beta C per batch entry, through
 * cuBLAS's column-major view (operands swapped, as md_cuda_gemm). */
static md_status bgemm(struct md_cuda_dev *c, int ta, int tb, int m, int n, int k, float alpha, void **A,
                       cudaDataType_t at, int lda, void **B, cudaDataType_t bt, int ldb, float beta, void **C,
                       cudaDataType_t ct, int ldc, int batch, cublasComputeType_t comp, const char *what)
{
    cublasStatus_t s = cublasGemmBatchedEx(c->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, n,
                                           m, k, &alpha, (const void *const *)B, bt, ldb, (const void *const *)A, at,
                                           lda, &beta, C, ct, ldc, batch, comp, CUBLAS_GEMM_DEFAULT);
    if (s == CUBLAS_STATUS_SUCCESS) return MD_OK;
    md_status st = md_cuda_blas_err(s, what);
    md_err_prefix("attention (gemm path) m=%d n=%d k=%d batch=%d", m, n, k, batch);
    return st;
}

/* What both passes share: types, leading dimensions, chunking, scratch. */
struct gemm_plan {
    cudaDataType_t t;
    cublasComputeType_t comp;
    size_t es, mat;       /* element size; elements per (tq, ldk) matrix */
    int ldk, bh, nb, ntab;
    void **tab;           /* ntab tables of bh pointers */
    char *scr;            /* chunk scratch after the tables */
    long long lq, lk, lv, lo; /* token strides (the leading dimensions) */
};

static md_status gemm_plan_make(md_device *dev, const struct md_attn_args *a, int bwd, struct gemm_plan *g)
{
    struct md_cuda_dev *c = md_cuda_impl(dev);
    memset(g, 0, sizeof *g);
    g->es = md_dtype_size(a->dtype);
    g->t = a->dtype == MD_F32 ? CUDA_R_32F : a->dtype == MD_F16 ? CUDA_R_16F : CUDA_R_16BF;
    g->comp = a->dtype == MD_F32 && c->tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    g->ldk = gemm_tk_ld(a->tk);
    g->mat = (size_t)a->tq * (size_t)g->ldk;
    g->bh = a->batch * a->heads;
    g->ntab = bwd ? 11 : 6;
    /* fp32 S (and dP) plus P (and dS) unless they alias */
    size_t per = g->mat * (4 + (g->es == 4 ? 0 : g->es)) * (bwd ? 2 : 1);
    size_t nb = ATTN_GEMM_CHUNK_BYTES / per;
    g->nb = nb < 1 ? 1 : nb > (size_t)g->bh ? g->bh : (int)nb;
    size_t tab_bytes = ((size_t)g->ntab * g->bh * sizeof(void *) + 255) & ~(size_t)255;
    MD_TRY(md_cuda_scratch_get(dev, &c->attn_ws, tab_bytes + per * (size_t)g->nb, "attention scores (gemm path)"));
    g->tab = (void **)c->attn_ws.ptr;
    g->scr = (char *)c->attn_ws.ptr + tab_bytes;
    long long s[3];
    md_attn_strides(a->sq, a->heads, a->tq, a->d, s), g->lq = s[2];
    md_attn_strides(a->sk, a->heads, a->tk, a->d, s), g->lk = s[2];
    md_attn_strides(a->sv, a->heads, a->tk, a->d, s), g->lv = s[2];
    md_attn_strides(a->so, a->heads, a->tq, a->d, s), g->lo = s[2];
    return MD_OK;
}

/* Adds table slot t for a strided tensor (NULL: an empty table). */
static void gemm_tab_tensor(gemm_tables *gt, int t, const void *base, const long long in[3], int heads, int tt, int d,
                            size_t es)
{
    long long s[3];
    md_attn_strides(in, heads, tt, d, s);
    gt->base[t] = (char *)base;
    gt->s0[t] = s[0] * (long long)es, gt->s1[t] = s[1] * (long long)es, gt->mat[t] = 0;
}

static void gemm_tab_scratch(gemm_tables *gt, int t, char *base, size_t mat_bytes)
{
    gt->base[t] = base;
    gt->s0[t] = gt->s1[t] = 0, gt->mat[t] = (long long)mat_bytes;
}

static md_status gemm_tables_fill(md_device *dev, const struct gemm_plan *g, gemm_tables *gt, int heads)
{
    gt->n = g->ntab, gt->bh = g->bh, gt->heads = heads, gt->nb = g->nb;
    size_t n = (size_t)g->ntab * g->bh;
    k_gemm_tables<<<md_cu_blocks(dev, n), MD_THREADS, 0, md_cuda_impl(dev)->stream>>>(*gt, g->tab);
    return md_cuda_check_launch("attention pointer tables");
}

enum { TQ, TK, TV, TO, TS, TP, TDQ = 4, TDK, TDV, TS_B, TDP, TP_B, TDS };

md_status md_cuda_attn_gemm_fwd(md_device *dev, const struct md_attn_args *a, const attn_p *p)
{
    struct md_cuda_dev *c = md_cuda_impl(dev);
    struct gemm_plan g;
    MD_TRY(gemm_plan_make(dev, a, 0, &g));
    size_t sbytes = g.mat * 4 * (size_t)g.nb; /* S of a chunk */
    char *S = g.scr, *P = g.es == 4 ? S : S + sbytes;
    gemm_tables gt;
    memset(&gt, 0, sizeof gt);
    gemm_tab_tensor(&gt, TQ, a->q, a->sq, a->heads, a->tq, a->d, g.es);
    gemm_tab_tensor(&gt, TK, a->k, a->sk, a->heads, a->tk, a->d, g.es);
    gemm_tab_tensor(&gt, TV, a->v, a->sv, a->heads, a->tk, a->d, g.es);
    gemm_tab_tensor(&gt, TO, a->o, a->so, a->heads, a->tq, a->d, g.es);
    gemm_tab_scratch(&gt, TS, S, g.mat * 4);
    gemm_tab_scratch(&gt, TP, P, g.mat * g.es);
    MD_TRY(gemm_tables_fill(dev, &g, &gt, a->heads));
    for (int bh0 = 0; bh0 < g.bh; bh0 += g.nb) {
        int nb = g.bh - bh0 < g.nb ? g.bh - bh0 : g.nb;
        void **tb = g.tab + bh0;
#define TAB(t) (tb + (size_t)(t) * g.bh)
        MD_TRY(bgemm(c, 0, 1, a->tq, a->tk, a->d, p->scale, TAB(TQ), g.t, (int)g.lq, TAB(TK), g.t, (int)g.lk, 0.0f,
                     TAB(TS), CUDA_R_32F, g.ldk, nb, g.comp, "attention S = Q K^T"));
        MD_CU_DISPATCH(a->dtype, "attn_fwd (gemm path)", {
            k_gemm_softmax<T><<<(unsigned)(nb * a->tq), ATTN_GEMM_THREADS, 0, c->stream>>>(
                *p, bh0, g.ldk, (const float *)S, (T *)P, a->lse);
        });
        MD_TRY(md_cuda_check_launch("attention softmax (gemm path)"));
        MD_TRY(bgemm(c, 0, 0, a->tq, a->d, a->tk, 1.0f, TAB(TP), g.t, g.ldk, TAB(TV), g.t, (int)g.lv, 0.0f, TAB(TO),
                     g.t, (int)g.lo, nb, g.comp, "attention O = P V"));
#undef TAB
    }
    return MD_OK;
}

md_status md_cuda_attn_gemm_bwd(md_device *dev, const struct md_attn_args *a, const attn_p *p, const float *D)
{
    struct md_cuda_dev *c = md_cuda_impl(dev);
    struct gemm_plan g;
    MD_TRY(gemm_plan_make(dev, a, 1, &g));
    size_t fbytes = g.mat * 4 * (size_t)g.nb, tbytes = g.mat * g.es * (size_t)g.nb;
    char *S = g.scr, *dP = S + fbytes;
    char *P = g.es == 4 ? S : dP + fbytes, *dS = g.es == 4 ? dP : P + tbytes;
    gemm_tables gt;
    memset(&gt, 0, sizeof gt);
    gemm_tab_tensor(&gt, TQ, a->q, a->sq, a->heads, a->tq, a->d, g.es);
    gemm_tab_tensor(&gt, TK, a->k, a->sk, a->heads, a->tk, a->d, g.es);
    gemm_tab_tensor(&gt, TV, a->v, a->sv, a->heads, a->tk, a->d, g.es);
    gemm_tab_tensor(&gt, TO, a->d_o, a->so, a->heads, a->tq, a->d, g.es);
    gemm_tab_tensor(&gt, TDQ, a->dq, a->sq, a->heads, a->tq, a->d, g.es);
    gemm_tab_tensor(&gt, TDK, a->dk, a->sk, a->heads, a->tk, a->d, g.es);
    gemm_tab_tensor(&gt, TDV, a->dv, a->sv, a->heads, a->tk, a->d, g.es);
    gemm_tab_scratch(&gt, TS_B, S, g.mat * 4);
    gemm_tab_scratch(&gt, TDP, dP, g.mat * 4);
    gemm_tab_scratch(&gt, TP_B, P, g.mat * g.es);
    gemm_tab_scratch(&gt, TDS, dS, g.mat * g.es);
    MD_TRY(gemm_tables_fill(dev, &g, &gt, a->heads));
    float beta = a->beta;
    for (int bh0 = 0; bh0 < g.bh; bh0 += g.nb) {
        int nb = g.bh - bh0 < g.nb ? g.bh - bh0 : g.nb;
        void **tb = g.tab + bh0;
#define TAB(t) (tb + (size_t)(t) * g.bh)
        MD_TRY(bgemm(c, 0, 1, a->tq, a->tk, a->d, p->scale, TAB(TQ), g.t, (int)g.lq, TAB(TK), g.t, (int)g.lk, 0.0f,
                     TAB(TS_B), CUDA_R_32F, g.ldk, nb, g.comp, "attention S = Q K^T"));
        MD_TRY(bgemm(c, 0, 1, a->tq, a->tk, a->d, 1.0f, TAB(TO), g.t, (int)g.lo, TAB(TV), g.t, (int)g.lv, 0.0f,
                     TAB(TDP), CUDA_R_32F, g.ldk, nb, g.comp, "attention dP = dO V^T"));
        MD_CU_DISPATCH(a->dtype, "attn_bwd (gemm path)", {
            k_gemm_dsoftmax<T><<<(unsigned)(nb * a->tq), ATTN_GEMM_THREADS, 0, c->stream>>>(
                *p, bh0, g.ldk, (const float *)S, (const float *)dP, a->lse, D, (T *)P, (T *)dS);
        });
        MD_TRY(md_cuda_check_launch("attention softmax gradient (gemm path)"));
        if (a->dv)
            MD_TRY(bgemm(c, 1, 0, a->tk, a->d, a->tq, 1.0f, TAB(TP_B), g.t, g.ldk, TAB(TO), g.t, (int)g.lo, beta,
                         TAB(TDV), g.t, (int)g.lv, nb, g.comp, "attention dV = P^T dO"));
        if (a->dq)
            MD_TRY(bgemm(c, 0, 0, a->tq, a->d, a->tk, p->scale, TAB(TDS), g.t, g.ldk, TAB(TK), g.t, (int)g.lk, beta,
                         TAB(TDQ), g.t, (int)g.lq, nb, g.comp, "attention dQ = dS K"));
        if (a->dk)
            MD_TRY(bgemm(c, 1, 0, a->tk, a->d, a->tq, p->scale, TAB(TDS), g.t, g.ldk, TAB(TQ), g.t, (int)g.lq, beta,
                         TAB(TDK), g.t, (int)g.lk, nb, g.comp, "attention dK = dS^T Q"));
#undef TAB
    }
    return MD_OK;
}

md_status md_cuda_attn_path_env(int *path)
{
    static const char *const names[] = {"auto", "gemm", "flash", "simt"};
    const char *e = getenv("MPSDIAG_ATTN");
    *path = MD_ATTN_AUTO;
    if (!e || !*e) return MD_OK;
    for (int i = 0; i < 4; i++)
        if (strcmp(e, names[i]) == 0) {
            *path = i;
            return MD_OK;
        }
    return md_errf(MD_ERR_USAGE, "MPSDIAG_ATTN: unknown attention path '%s' (auto, gemm, flash or simt)", e);
}
