/* cpu_conv_small_impl.h - the register tiles of cpu_conv_small.c for one
 * vector type. Included once per vector type there, with SFX (the name
 * suffix), VL (floats per vector), TARGET (a function attribute, or empty),
 * VEC and VLOAD, VSTORE, VSET1, VFMA (a*b + c), VADD, VZERO defined (and
 * undefined again at the end); the tile shapes (MRK, JRK, FP_*, GP_*) come
 * from cpu_conv_small.c. Everything here is static. Not a header to include
 * elsewhere.
 *
 * Every tile has a fixed shape per vector count, so that its sums live in
 * registers (at most 12 of the 16 that AVX2 and SSE have; the other
 * operand comes from memory), and takes runtime tails by repeating its last
 * row (the repeats are computed and dropped) or through a staging copy in
 * the caller. */

#define CAT_(a, b) a##_##b
#define CAT(a, b) CAT_(a, b)
#define FN(x) CAT(x, SFX)

/* ---- forward, output channels across the lanes (NHWC) ----------------------
 * MRK(nv) pixels x nv vectors of output channels: per tap a load of nv weight
 * vectors and a broadcast per pixel. */

/* out[i*ldo + k] = sum_j xs[off[i] + toff[j]] * wk[j*kp + k] (+ beta * out)
 * for i < MRK(nv), k < nv*VL. */
INLINE TARGET void FN(fk_tile)(const int nv, const float *xs, const int *off, const int *toff, int crs,
                               const float *wk, int kp, float *out, size_t ldo, float beta)
{
    enum { M = 12, N = 4 };
    const int mr = MRK(nv);
    VEC acc[M][N];
#pragma GCC unroll 12
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) acc[i][v] = VZERO();
    for (int j = 0; j < crs; j++) {
        VEC w[N];
        const float *wj = wk + (size_t)j * kp;
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) w[v] = VLOAD(wj + v * VL);
        int t = toff[j];
#pragma GCC unroll 12
        for (int i = 0; i < mr; i++) {
            VEC a = VSET1(xs[off[i] + t]);
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++) acc[i][v] = VFMA(a, w[v], acc[i][v]);
        }
    }
#pragma GCC unroll 12
    for (int i = 0; i < mr; i++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) {
            float *o = out + (size_t)i * ldo + v * VL;
            VSTORE(o, beta != 0.0f ? VFMA(VSET1(beta), VLOAD(o), acc[i][v]) : acc[i][v]);
        }
}

static TARGET void FN(fk_any)(int nv, const float *xs, const int *off, const int *toff, int crs, const float *wk,
                              int kp, float *out, size_t ldo, float beta)
{
    switch (nv) {
    case 1: FN(fk_tile)(1, xs, off, toff, crs, wk, kp, out, ldo, beta); break;
    case 2: FN(fk_tile)(2, xs, off, toff, crs, wk, kp, out, ldo, beta); break;
    case 3: FN(fk_tile)(3, xs, off, toff, crs, wk, kp, out, ldo, beta); break;
    default: FN(fk_tile)(4, xs, off, toff, crs, wk, kp, out, ldo, beta); break;
    }
}

/* ---- forward, pixels across the lanes (NCHW) --------------------------------
 * kr <= 6 output channels x 2 vectors of pixels: per tap two loads of im2col
 * values and a broadcast weight per channel.
 * out[k*ldo + i] = sum_j w[k*crs + j] * col[j*ldc + i] (+ beta * out) for
 * k < kr, i < 2*VL. */
INLINE TARGET void FN(fp_tile)(const int kr, const float *col, size_t ldc, int crs, const float *w, float *out,
                               size_t ldo, float beta)
{
    VEC acc[FP_KR][FP_MQ];
#pragma GCC unroll 6
    for (int k = 0; k < kr; k++)
#pragma GCC unroll 2
        for (int m = 0; m < FP_MQ; m++) acc[k][m] = VZERO();
    for (int j = 0; j < crs; j++) {
        VEC x[FP_MQ];
#pragma GCC unroll 2
        for (int m = 0; m < FP_MQ; m++) x[m] = VLOAD(col + (size_t)j * ldc + m * VL);
#pragma GCC unroll 6
        for (int k = 0; k < kr; k++) {
            VEC a = VSET1(w[(size_t)k * crs + j]);
#pragma GCC unroll 2
            for (int m = 0; m < FP_MQ; m++) acc[k][m] = VFMA(a, x[m], acc[k][m]);
        }
    }
#pragma GCC unroll 6
    for (int k = 0; k < kr; k++)
#pragma GCC unroll 2
        for (int m = 0; m < FP_MQ; m++) {
            float *o = out + (size_t)k * ldo + m * VL;
            VSTORE(o, beta != 0.0f ? VFMA(VSET1(beta), VLOAD(o), acc[k][m]) : acc[k][m]);
        }
}

static TARGET void FN(fp_any)(int kr, const float *col, size_t ldc, int crs, const float *w, float *out, size_t ldo,
                              float beta)
{
    switch (kr) {
    case 1: FN(fp_tile)(1, col, ldc, crs, w, out, ldo, beta); break;
    case 2: FN(fp_tile)(2, col, ldc, crs, w, out, ldo, beta); break;
    case 3: FN(fp_tile)(3, col, ldc, crs, w, out, ldo, beta); break;
    case 4: FN(fp_tile)(4, col, ldc, crs, w, out, ldo, beta); break;
    case 5: FN(fp_tile)(5, col, ldc, crs, w, out, ldo, beta); break;
    default: FN(fp_tile)(6, col, ldc, crs, w, out, ldo, beta); break;
    }
}

/* ---- backward-filter, output channels across the lanes (NHWC) ---------------
 * JRK(nv) taps x nv vectors of output channels, over the pixels of a row
 * block: per pixel nv loads of dy and a broadcast input value per tap. */

/* part[i*kp + k] += sum over pixels (p, q) of xs[p*xrow + q*xstep + toff[i]]
 * * dy[(p*nq + q)*dys + k], for the jr <= JRK(nv) taps of toff and k <
 * nv*VL; the sum over the pixels starts from zero (then one addition to part). */
INLINE TARGET void FN(gk_tile)(const int nv, int jr, const float *xs, const int *toff, int nrow, int nq, int xrow,
                               int xstep, const float *dy, size_t dys, float *part, int kp)
{
    enum { J = 12, N = 4 };
    const int jm = JRK(nv);
    int t[J];
#pragma GCC unroll 12
    for (int i = 0; i < jm; i++) t[i] = toff[i < jr ? i : jr - 1];
    VEC acc[J][N];
#pragma GCC unroll 12
    for (int i = 0; i < jm; i++)
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) acc[i][v] = VZERO();
    for (int p = 0; p < nrow; p++) {
        const float *x = xs + (size_t)p * xrow;
        for (int q = 0; q < nq; q++, x += xstep, dy += dys) {
            VEC d[N];
#pragma GCC unroll 4
            for (int v = 0; v < nv; v++) d[v] = VLOAD(dy + v * VL);
#pragma GCC unroll 12
            for (int i = 0; i < jm; i++) {
                VEC a = VSET1(x[t[i]]);
#pragma GCC unroll 4
                for (int v = 0; v < nv; v++) acc[i][v] = VFMA(a, d[v], acc[i][v]);
            }
        }
    }
#pragma GCC unroll 12
    for (int i = 0; i < jm; i++) {
        if (i >= jr) break;
#pragma GCC unroll 4
        for (int v = 0; v < nv; v++) {
            float *o = part + (size_t)i * kp + v * VL;
            VSTORE(o, VADD(VLOAD(o), acc[i][v]));
        }
    }
}

static TARGET void FN(gk_any)(int nv, int jr, const float *xs, const int *toff, int nrow, int nq, int xrow, int xstep,
                              const float *dy, size_t dys, float *part, int kp)
{
    switch (nv) {
    case 1: FN(gk_tile)(1, jr, xs, toff, nrow, nq, xrow, xstep, dy, dys, part, kp); break;
    case 2: FN(gk_tile)(2, jr, xs, toff, nrow, nq, xrow, xstep, dy, dys, part, kp); break;
    case 3: FN(gk_tile)(3, jr, xs, toff, nrow, nq, xrow, xstep, dy, dys, part, kp); break;
    default: FN(gk_tile)(4, jr, xs, toff, nrow, nq, xrow, xstep, dy, dys, part, kp); break;
    }
}

/* ---- backward-filter, pixels across the lanes (NCHW) ------------------------
 * 3 output channels x 3 taps, over nvec vectors of pixels: per vector three
 * loads of dy, three of im2col values and nine products.
 * part[j*kp + k] += sum_i dy[k*ldy + i] * col[j*ldc + i] for the kr <= 3
 * channels and jr <= 3 taps, i < nvec*VL; each lane sums its own pixels,
 * then the lanes are added in order. */
static TARGET void FN(gp_tile)(int kr, int jr, const float *dy, size_t ldy, const float *col, size_t ldc, int nvec,
                               float *part, int kp)
{
    const float *d[GP_KR], *c[GP_JR];
    for (int k = 0; k < GP_KR; k++) d[k] = dy + (size_t)(k < kr ? k : kr - 1) * ldy;
    for (int j = 0; j < GP_JR; j++) c[j] = col + (size_t)(j < jr ? j : jr - 1) * ldc;
    VEC acc[GP_KR][GP_JR];
#pragma GCC unroll 3
    for (int k = 0; k < GP_KR; k++)
#pragma GCC unroll 3
        for (int j = 0; j < GP_JR; j++) acc[k][j] = VZERO();
    for (int i = 0; i < nvec * VL; i += VL) {
        VEC dv[GP_KR], cv[GP_JR];
#pragma GCC unroll 3
        for (int k = 0; k < GP_KR; k++) dv[k] = VLOAD(d[k] + i);
#pragma GCC unroll 3
        for (int j = 0; j < GP_JR; j++) cv[j] = VLOAD(c[j] + i);
#pragma GCC unroll 3
        for (int k = 0; k < GP_KR; k++)
#pragma GCC unroll 3
            for (int j = 0; j < GP_JR; j++) acc[k][j] = VFMA(dv[k], cv[j], acc[k][j]);
    }
    for (int k = 0; k < kr; k++)
        for (int j = 0; j < jr; j++) {
            float lanes[VL], s = 0.0f;
            VSTORE(lanes, acc[k][j]);
            for (int l = 0; l < VL; l++) s += lanes[l];
            part[(size_t)j * kp + k] += s;
        }
}

#undef CAT_
#undef CAT
#undef FN
#undef SFX
#undef VL
#undef TARGET
#undef VEC
#undef VLOAD
#undef VSTORE
#undef VSET1
#undef VFMA
#undef VADD
#undef VZERO
