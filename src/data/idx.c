/* idx.c - reading files (gzipped or not) and the IDX format of MNIST and
 * Fashion-MNIST: 0, 0, type 0x08 (unsigned byte), number of dimensions, then
 * each dimension as a big-endian uint32, then the bytes. */
#include <errno.h>
#include <string.h>
#include <zlib.h>

#include "core/mem.h"
#include "data/data_impl.h"

md_status md_idx_read_file(const char *path, size_t max_bytes, uint8_t **buf, size_t *len)
{
    md_status st = MD_OK;
    uint8_t *b = NULL;
    size_t cap = 1 << 20, n = 0;
    *buf = NULL;
    *len = 0;
    gzFile f = gzopen(path, "rb");
    if (!f) return md_errf(MD_ERR_DATA, "%s: cannot open: %s", path, strerror(errno ? errno : ENOENT));
    gzbuffer(f, 1 << 17);
    b = md_malloc(cap);
    if (!b) { st = MD_ERR_OOM; goto fail; }
    for (;;) {
        if (n == cap) {
            if (cap >= max_bytes) {
                st = md_errf(MD_ERR_DATA, "%s: larger than %zu bytes (uncompressed); not a dataset file", path,
                             max_bytes);
                goto fail;
            }
            size_t ncap = cap * 2 > max_bytes ? max_bytes : cap * 2;
            uint8_t *nb = md_realloc(b, ncap);
            if (!nb) { st = MD_ERR_OOM; goto fail; }
            b = nb;
            cap = ncap;
        }
        unsigned want = (unsigned)((cap - n) > (1u << 30) ? (1u << 30) : (cap - n));
        int r = gzread(f, b + n, want);
        if (r < 0) {
            int zerr = 0;
            const char *m = gzerror(f, &zerr);
            size_t pl = strlen(path);
            if (strncmp(m, path, pl) == 0 && m[pl] == ':') m += pl + (m[pl + 1] == ' ' ? 2 : 1);
            st = md_errf(MD_ERR_DATA, "%s: cannot read (%s): %s", path,
                         zerr == Z_ERRNO ? "I/O error" : "corrupt gzip data", zerr == Z_ERRNO ? strerror(errno) : m);
            goto fail;
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    /* zlib reports a gzip stream cut short only through gzerror after EOF. */
    int zerr = 0;
    const char *m = gzerror(f, &zerr);
    if (zerr != Z_OK && zerr != Z_STREAM_END) {
        /* zlib's message starts with the path again */
        size_t pl = strlen(path);
        if (strncmp(m, path, pl) == 0 && m[pl] == ':') m += pl + (m[pl + 1] == ' ' ? 2 : 1);
        st = md_errf(MD_ERR_DATA, "%s: corrupt or truncated gzip data: %s", path, m);
        goto fail;
    }
    gzclose(f);
    *buf = b;
    *len = n;
    return MD_OK;
fail:
    md_free(b);
    gzclose(f);
    return st;
}

static uint32_t be32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3];
}

md_status md_idx_parse(const uint8_t *buf, size_t len, const char *name, int want_ndims, md_idx *out)
{
    memset(out, 0, sizeof *out);
    if (len < 4)
        return md_errf(MD_ERR_DATA, "%s: not an IDX file: %zu bytes, shorter than the 4-byte magic number", name,
                       len);
    uint32_t magic = be32(buf);
    uint32_t want_magic = 0x0800u | (uint32_t)want_ndims;
    if (magic != want_magic)
        return md_errf(MD_ERR_DATA, "%s: wrong IDX magic number 0x%08x (expected 0x%08x: unsigned bytes, %d %s)",
                       name, magic, want_magic, want_ndims, want_ndims == 1 ? "dimension (labels)" : "dimensions (images)");
    size_t hdr = 4 + 4 * (size_t)want_ndims;
    if (len < hdr)
        return md_errf(MD_ERR_DATA, "%s: truncated IDX header (%zu bytes, need %zu)", name, len, hdr);
    unsigned long long total = 1;
    for (int i = 0; i < want_ndims; i++) {
        out->dims[i] = be32(buf + 4 + 4 * i);
        if (i > 0 && (out->dims[i] == 0 || out->dims[i] > 4096))
            return md_errf(MD_ERR_DATA, "%s: implausible image dimension %u in the IDX header", name, out->dims[i]);
        total *= out->dims[i]; /* < 2^32 * 2^24: no overflow */
    }
    if (out->dims[0] == 0) return md_errf(MD_ERR_DATA, "%s: the IDX header says 0 items", name);
    if (total != (unsigned long long)(len - hdr)) {
        if (want_ndims == 3)
            return md_errf(MD_ERR_DATA,
                           "%s: the header says %u images of %ux%u (%llu bytes) but the file has %zu bytes after "
                           "the header%s",
                           name, out->dims[0], out->dims[1], out->dims[2], total, len - hdr,
                           total > len - hdr ? " (truncated?)" : "");
        return md_errf(MD_ERR_DATA, "%s: the header says %u labels but the file has %zu bytes after the header%s",
                       name, out->dims[0], len - hdr, total > len - hdr ? " (truncated?)" : "");
    }
    out->ndims = want_ndims;
    out->data = buf + hdr;
    return MD_OK;
}
