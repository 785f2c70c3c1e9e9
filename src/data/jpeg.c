/* jpeg.c - JPEG decoding through libjpeg-turbo's TurboJPEG API: header first
 * (size limit before any pixel is decoded), DCT scaling towards the target
 * size, then a bilinear resize to the exact size. */
#include <string.h>
#include <turbojpeg.h>

#include "core/mem.h"
#include "data/data_impl.h"

struct md_jpeg {
    tjhandle tj;
    uint8_t *inter;   /* decoded interleaved pixels, reused: a fresh large block
                         per image costs page faults worth a third of the decode */
    size_t inter_cap;
};

md_status md_jpeg_new(md_jpeg **out)
{
    *out = NULL;
    md_jpeg *j = md_calloc(1, sizeof *j);
    if (!j) return MD_ERR_OOM;
    j->tj = tjInitDecompress();
    if (!j->tj) {
        md_free(j);
        return md_errf(MD_ERR_INTERNAL, "TurboJPEG: cannot create a decompressor: %s", tjGetErrorStr2(NULL));
    }
    *out = j;
    return MD_OK;
}

/* After an error libjpeg-turbo 2.1 leaves the handle in a state that fails
 * every later call (found by the fuzz smoke test), so a failed call gets a
 * fresh handle. */
static md_status reset(md_jpeg *j, md_status st)
{
    tjDestroy(j->tj);
    j->tj = tjInitDecompress();
    if (!j->tj) return md_errf(MD_ERR_INTERNAL, "TurboJPEG: cannot create a decompressor: %s", tjGetErrorStr2(NULL));
    return st;
}

void md_jpeg_free(md_jpeg *j)
{
    if (!j) return;
    tjDestroy(j->tj);
    md_free(j->inter);
    md_free(j);
}

/* The header: size, and whether the image is CMYK (Adobe/YCCK), which
 * TurboJPEG decodes only to CMYK pixels. */
static md_status header(md_jpeg *j, const uint8_t *buf, size_t len, const char *name, int *w, int *h, int *cmyk)
{
    *w = *h = 0;
    *cmyk = 0;
    if (len < 4 || buf[0] != 0xFF || buf[1] != 0xD8) {
        if (len >= 4 && buf[0] == 0x89 && buf[1] == 'P' && buf[2] == 'N' && buf[3] == 'G')
            return md_errf(MD_ERR_DATA, "%s: not a JPEG (it is a PNG)", name);
        if (len == 0) return md_errf(MD_ERR_DATA, "%s: not a JPEG (empty file)", name);
        return md_errf(MD_ERR_DATA, "%s: not a JPEG (no SOI marker at the start)", name);
    }
    int ww = 0, hh = 0, subsamp = 0, cs = 0;
    if (len > (size_t)0x7fffffff ||
        tjDecompressHeader3(j->tj, buf, (unsigned long)len, &ww, &hh, &subsamp, &cs) != 0)
        return reset(j, md_errf(MD_ERR_DATA, "%s: not a readable JPEG: %s", name, tjGetErrorStr2(j->tj)));
    if (ww <= 0 || hh <= 0) return md_errf(MD_ERR_DATA, "%s: JPEG header gives size %dx%d", name, ww, hh);
    if ((long long)ww * hh > MD_JPEG_MAX_PIXELS)
        return md_errf(MD_ERR_DATA, "%s: JPEG header claims %dx%d pixels, over the limit of %lld megapixels; refused "
                       "before decoding",
                       name, ww, hh, MD_JPEG_MAX_PIXELS / 1000000);
    *w = ww;
    *h = hh;
    *cmyk = cs == TJCS_CMYK || cs == TJCS_YCCK;
    return MD_OK;
}

md_status md_jpeg_header(md_jpeg *j, const uint8_t *buf, size_t len, const char *name, int *w, int *h)
{
    int cmyk;
    return header(j, buf, len, name, w, h, &cmyk);
}

static md_status reserve(md_jpeg *j, size_t need)
{
    if (need <= j->inter_cap) return MD_OK;
    md_free(j->inter);
    j->inter_cap = 0;
    if (!(j->inter = md_malloc(need))) return MD_ERR_OOM;
    j->inter_cap = need;
    return MD_OK;
}

/* Inverted (Adobe, as libjpeg-turbo writes and reads them) CMYK pixels to
 * RGB or gray, in place: R = C * K / 255 (libjpeg-turbo's own conversion;
 * a colour-managed one would need the image's ICC profile). */
static void cmyk_to(uint8_t *px, size_t n, int c)
{
    for (size_t i = 0; i < n; i++) {
        const uint8_t *q = px + 4 * i;
        unsigned k = q[3];
        unsigned r = (q[0] * k + 127) / 255, g = (q[1] * k + 127) / 255, b = (q[2] * k + 127) / 255;
        if (c == 3) {
            px[3 * i] = (uint8_t)r;
            px[3 * i + 1] = (uint8_t)g;
            px[3 * i + 2] = (uint8_t)b;
        } else { /* the luma TurboJPEG's TJPF_GRAY gives for RGB images */
            px[i] = (uint8_t)((299 * r + 587 * g + 114 * b + 500) / 1000);
        }
    }
}

md_status md_jpeg_verify(md_jpeg *j, const uint8_t *buf, size_t len, const char *name)
{
    int w, h, cmyk;
    MD_TRY(header(j, buf, len, name, &w, &h, &cmyk));
    /* the smallest DCT scale: every coefficient is still entropy-decoded (so
     * truncation and corruption show), but little is transformed */
    int nsf = 0, sw = w, sh = h;
    tjscalingfactor *sf = tjGetScalingFactors(&nsf);
    for (int i = 0; sf && i < nsf; i++) {
        int cw = TJSCALED(w, sf[i]), chh = TJSCALED(h, sf[i]);
        if ((long long)cw * chh < (long long)sw * sh) {
            sw = cw;
            sh = chh;
        }
    }
    MD_TRY(reserve(j, (size_t)sw * sh * (cmyk ? 4 : 1)));
    if (tjDecompress2(j->tj, buf, (unsigned long)len, j->inter, sw, 0, sh, cmyk ? TJPF_CMYK : TJPF_GRAY,
                      TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS) != 0)
        return reset(j, md_errf(MD_ERR_DATA, "%s: cannot be decoded: %s", name, tjGetErrorStr2(j->tj)));
    return MD_OK;
}

md_status md_jpeg_decode(md_jpeg *j, const uint8_t *buf, size_t len, const char *name, int c, int oh, int ow,
                         uint8_t *dst)
{
    md_status st = MD_OK;
    int w, h, cmyk;
    MD_TRY(header(j, buf, len, name, &w, &h, &cmyk));
    /* The smallest DCT scale (<= 1) that keeps both sides at least the target. */
    int nsf = 0;
    tjscalingfactor *sf = tjGetScalingFactors(&nsf);
    int sw = w, sh = h;
    for (int i = 0; sf && i < nsf; i++) {
        if (sf[i].num > sf[i].denom) continue;
        int cw = TJSCALED(w, sf[i]), chh = TJSCALED(h, sf[i]);
        if (cw >= ow && chh >= oh && (long long)cw * chh < (long long)sw * sh) {
            sw = cw;
            sh = chh;
        }
    }
    MD_TRY(reserve(j, (size_t)sw * sh * (size_t)(cmyk ? 4 : c)));
    int pf = cmyk ? TJPF_CMYK : c == 1 ? TJPF_GRAY : TJPF_RGB;
    if (tjDecompress2(j->tj, buf, (unsigned long)len, j->inter, sw, 0, sh, pf,
                      TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS) != 0)
        return reset(j, md_errf(MD_ERR_DATA, "%s: corrupt JPEG: %s", name, tjGetErrorStr2(j->tj)));
    if (cmyk) cmyk_to(j->inter, (size_t)sw * sh, c);
    if (sw == ow && sh == oh) md_image_hwc_to_chw(j->inter, c, sh, sw, dst);
    else md_image_resize_hwc_u8(j->inter, c, sh, sw, dst, oh, ow);
    return st;
}
