/* cifar.c - the CIFAR-10 and CIFAR-100 binary layouts.
 *
 * CIFAR-10 record: label (0..9), then 3072 pixel bytes (R, G, B planes of
 * 32x32). CIFAR-100 record: coarse label (0..19), fine label (0..99), then the
 * same 3072 bytes. Files are whole records with no header, so the layout is
 * told by the size and the label bytes.
 */
#include <string.h>

#include "data/data_impl.h"

#define REC10 (1 + MD_CIFAR_PIXELS)
#define REC100 (2 + MD_CIFAR_PIXELS)

/* Whether buf reads as whole records of the given layout with valid labels. */
static int fits(const uint8_t *buf, size_t len, int cifar100)
{
    size_t rec = cifar100 ? REC100 : REC10;
    if (len == 0 || len % rec) return 0;
    for (size_t off = 0; off < len; off += rec) {
        if (cifar100 ? (buf[off] >= 20 || buf[off + 1] >= 100) : buf[off] >= 10) return 0;
    }
    return 1;
}

md_status md_cifar_check(const uint8_t *buf, size_t len, const char *name, int cifar100, long long *count)
{
    size_t rec = cifar100 ? REC100 : REC10;
    const char *what = cifar100 ? "CIFAR-100" : "CIFAR-10";
    *count = 0;
    if (len == 0) return md_errf(MD_ERR_DATA, "%s: empty file (expected %s records)", name, what);
    if (len % rec == 0) {
        for (size_t off = 0, i = 0; off < len; off += rec, i++) {
            if (cifar100 ? (buf[off] >= 20 || buf[off + 1] >= 100) : buf[off] >= 10) {
                if (!cifar100 && fits(buf, len, 1))
                    return md_errf(MD_ERR_DATA,
                                   "%s: this is a CIFAR-100 file (3074-byte records with coarse and fine labels), "
                                   "not CIFAR-10: use --dataset cifar100",
                                   name);
                if (cifar100 && fits(buf, len, 0))
                    return md_errf(MD_ERR_DATA,
                                   "%s: this is a CIFAR-10 file (3073-byte records), not CIFAR-100: use --dataset "
                                   "cifar10",
                                   name);
                if (cifar100)
                    return md_errf(MD_ERR_DATA, "%s: record %zu has labels %u/%u, outside 0..19 / 0..99", name, i,
                                   buf[off], buf[off + 1]);
                return md_errf(MD_ERR_DATA, "%s: record %zu has label %u, outside 0..9", name, i, buf[off]);
            }
        }
        *count = (long long)(len / rec);
        return MD_OK;
    }
    if (fits(buf, len, !cifar100))
        return md_errf(MD_ERR_DATA, "%s: this is a %s file (%d-byte records), not %s: use --dataset %s", name,
                       cifar100 ? "CIFAR-10" : "CIFAR-100", cifar100 ? REC10 : REC100, what,
                       cifar100 ? "cifar10" : "cifar100");
    return md_errf(MD_ERR_DATA, "%s: truncated or not %s: %zu bytes is %zu whole %zu-byte records and %zu bytes more",
                   name, what, len, len / rec, rec, len % rec);
}

void md_cifar_extract(const uint8_t *buf, long long count, int cifar100, int coarse, uint8_t *pixels,
                      int32_t *labels)
{
    size_t rec = cifar100 ? REC100 : REC10;
    for (long long i = 0; i < count; i++) {
        const uint8_t *r = buf + (size_t)i * rec;
        labels[i] = cifar100 ? (coarse ? r[0] : r[1]) : r[0];
        memcpy(pixels + (size_t)i * MD_CIFAR_PIXELS, r + (cifar100 ? 2 : 1), MD_CIFAR_PIXELS);
    }
}
