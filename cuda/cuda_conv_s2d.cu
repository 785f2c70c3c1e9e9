/* cuda_conv_s2d.cu - the rearrangements behind cuda_conv.cu's space-to-depth
 * path for stride-2 convolutions on few channels (channels-last): the input
 * x (n, h, w, c) becomes x' (n, h2, w2, c2) with x'[u, v, (2 pi + qi) c + ch]
 * = x[2u + pi - pad_h, 2v + qi - pad_w, ch] (zero outside x and for the
 * channels past 4c), the filter w (k, r, s, c) becomes w' (k, r2, s2, c2)
 * with w'[a, b, (2 pi + qi) c + ch] = w[2a + pi, 2b + qi, ch] (zero past r
 * or s). Each element is written by one thread: the same bytes for any
 * launch. */
#include "cuda_device.cuh"

struct s2d_geom {
    int n, c, h, w, k, r, s, ph, pw; /* the stride-2 convolution */
    int c2, h2, w2, r2, s2;          /* the stride-1 one */
};

template <class T> __global__ void k_s2d_input(size_t total, s2d_geom g, const T *x, T *x2)
{
    GRID_STRIDE(i, total)
    {
        int ch2 = (int)(i % (size_t)g.c2);
        size_t rest = i / (size_t)g.c2;
        int v = (int)(rest % (size_t)g.w2), u = (int)((rest / (size_t)g.w2) % (size_t)g.h2);
        size_t nn = rest / ((size_t)g.w2 * g.h2);
        T val = fromf<T>(0.0f);
        if (ch2 < 4 * g.c) {
            int blk = ch2 / g.c, ch = ch2 - blk * g.c;
            int hi = 2 * u + (blk >> 1) - g.ph, wi = 2 * v + (blk & 1) - g.pw;
            if (hi >= 0 && hi < g.h && wi >= 0 && wi < g.w) val = x[((nn * g.h + hi) * g.w + wi) * g.c + ch];
        }
        x2[i] = val;
    }
}

template <class T> __global__ void k_s2d_filter(size_t total, s2d_geom g, const T *w, T *w2)
{
    GRID_STRIDE(i, total)
    {
        int ch2 = (int)(i % (size_t)g.c2);
        size_t rest = i / (size_t)g.c2;
        int b = (int)(rest % (size_t)g.s2), a = (int)((rest / (size_t)g.s2) % (size_t)g.r2);
        size_t kk = rest / ((size_t)g.s2 * g.r2);
        T val = fromf<T>(0.0f);
        if (ch2 < 4 * g.c) {
            int blk = ch2 / g.c, ch = ch2 - blk * g.c;
            int r = 2 * a + (blk >> 1), s = 2 * b + (blk & 1);
            if (r < g.r && s < g.s) val = w[((kk * g.r + r) * g.s + s) * g.c + ch];
        }
        w2[i] = val;
    }
}

static s2d_geom geom(const struct md_conv2d_args *a, const struct md_cuda_s2d *s)
{
    s2d_geom g = {a->n, a->c, a->h, a->w, a->k, a->r, a->s, a->pad_h, a->pad_w, s->c2, s->h2, s->w2, s->r2, s->s2};
    return g;
}

md_status md_cuda_s2d_input(md_device *dev, const struct md_conv2d_args *a, const struct md_cuda_s2d *s, void *x2)
{
    s2d_geom g = geom(a, s);
    size_t total = (size_t)g.n * g.h2 * g.w2 * g.c2;
    cudaStream_t st = md_cuda_impl(dev)->stream;
    MD_CU_DISPATCH(a->dtype, "conv2d space-to-depth",
                   k_s2d_input<T><<<md_cu_blocks(dev, total), MD_THREADS, 0, st>>>(total, g, (const T *)a->x, (T *)x2));
    return md_cuda_check_launch("k_s2d_input");
}

md_status md_cuda_s2d_filter(md_device *dev, const struct md_conv2d_args *a, const struct md_cuda_s2d *s, void *w2)
{
    s2d_geom g = geom(a, s);
    size_t total = (size_t)g.k * g.r2 * g.s2 * g.c2;
    cudaStream_t st = md_cuda_impl(dev)->stream;
    MD_CU_DISPATCH(a->dtype, "conv2d space-to-depth",
                   k_s2d_filter<T><<<md_cu_blocks(dev, total), MD_THREADS, 0, st>>>(total, g, (const T *)a->wt, (T *)w2));
    return md_cuda_check_launch("k_s2d_filter");
}
