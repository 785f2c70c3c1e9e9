/* safetensors.c - strict safetensors reader and atomic streaming writer. */
#define _POSIX_C_SOURCE 200809L
#include "core/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/json.h"
#include "core/mem.h"
#include "core/outfile.h"
#include "core/strmap.h"

/* Headers above this are refused as corrupt (the reference implementation
 * uses the same 100 MB bound). */
#define ST_MAX_HEADER (100ull * 1000 * 1000)
/* Elements of one tensor at most: numel x 8 bytes stays far from overflow. */
#define ST_MAX_NUMEL (1LL << 53)

static const char *const st_names[MD_DTYPE_COUNT] = {"F32", "F16", "BF16", "I32", "U8"};

/* The format's other dtypes, with their element sizes. */
static const struct {
    const char *name;
    size_t size;
} st_other[] = {{"F64", 8}, {"I64", 8}, {"U64", 8}, {"U32", 4}, {"I16", 2}, {"U16", 2},
                {"I8", 1},  {"BOOL", 1}, {"F8_E4M3", 1}, {"F8_E5M2", 1}};

const char *md_st_dtype_name(md_dtype t)
{
    return (int)t >= 0 && t < MD_DTYPE_COUNT ? st_names[t] : "?";
}

int md_st_dtype_parse(const char *s)
{
    for (int i = 0; i < MD_DTYPE_COUNT; i++)
        if (strcmp(s, st_names[i]) == 0) return i;
    return -1;
}

static int host_is_little_endian(void)
{
    const uint16_t one = 1;
    unsigned char b;
    memcpy(&b, &one, 1);
    return b == 1;
}

/* ---- writer ------------------------------------------------------------------- */

struct st_wtensor {
    char *name;
    md_dtype dtype;
    int ndim;
    long long shape[MD_ST_MAX_DIMS];
    size_t nbytes;
    const void *data; /* borrowed */
};

struct md_st_writer {
    struct st_wtensor *t;
    int nt, capt;
    char **keys, **vals;
    int nm, capm;
};

md_status md_st_writer_new(md_st_writer **out)
{
    *out = md_calloc(1, sizeof **out);
    return *out ? MD_OK : MD_ERR_OOM;
}

/* Frees nm metadata keys and values and the two arrays that hold them. */
static void free_meta(char **keys, char **vals, int nm)
{
    for (int i = 0; i < nm; i++) {
        md_free(keys[i]);
        md_free(vals[i]);
    }
    md_free(keys);
    md_free(vals);
}

void md_st_writer_free(md_st_writer *w)
{
    if (!w) return;
    for (int i = 0; i < w->nt; i++) md_free(w->t[i].name);
    md_free(w->t);
    free_meta(w->keys, w->vals, w->nm);
    md_free(w);
}

md_status md_st_writer_add(md_st_writer *w, const char *name, md_dtype dtype, int ndim,
                           const long long *shape, const void *data)
{
    if (!name || !*name || strcmp(name, "__metadata__") == 0)
        return md_errf(MD_ERR_INTERNAL, "safetensors: invalid tensor name '%s'", name ? name : "(null)");
    if ((int)dtype < 0 || dtype >= MD_DTYPE_COUNT || ndim < 0 || ndim > MD_ST_MAX_DIMS)
        return md_errf(MD_ERR_INTERNAL, "safetensors: tensor '%s': bad dtype or rank", name);
    for (int i = 0; i < w->nt; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return md_errf(MD_ERR_INTERNAL, "safetensors: tensor '%s' added twice", name);
    size_t numel = 1;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 0) return md_errf(MD_ERR_INTERNAL, "safetensors: tensor '%s': negative dimension", name);
        numel *= (size_t)shape[d];
    }
    if (numel > 0 && !data) return md_errf(MD_ERR_INTERNAL, "safetensors: tensor '%s': no data", name);
    if (w->nt == w->capt) {
        int cap = w->capt ? w->capt * 2 : 16;
        struct st_wtensor *nt = md_realloc(w->t, (size_t)cap * sizeof *nt);
        if (!nt) return MD_ERR_OOM;
        w->t = nt;
        w->capt = cap;
    }
    struct st_wtensor *t = &w->t[w->nt];
    memset(t, 0, sizeof *t);
    t->name = md_strdup(name);
    if (!t->name) return MD_ERR_OOM;
    t->dtype = dtype;
    t->ndim = ndim;
    for (int d = 0; d < ndim; d++) t->shape[d] = shape[d];
    t->nbytes = numel * md_dtype_size(dtype);
    t->data = data;
    w->nt++;
    return MD_OK;
}

md_status md_st_writer_meta(md_st_writer *w, const char *key, const char *value)
{
    for (int i = 0; i < w->nm; i++)
        if (strcmp(w->keys[i], key) == 0) {
            char *v = md_strdup(value);
            if (!v) return MD_ERR_OOM;
            md_free(w->vals[i]);
            w->vals[i] = v;
            return MD_OK;
        }
    if (w->nm == w->capm) {
        int cap = w->capm ? w->capm * 2 : 16;
        char **nk = md_realloc(w->keys, (size_t)cap * sizeof *nk);
        if (!nk) return MD_ERR_OOM;
        w->keys = nk;
        char **nv = md_realloc(w->vals, (size_t)cap * sizeof *nv);
        if (!nv) return MD_ERR_OOM;
        w->vals = nv;
        w->capm = cap;
    }
    w->keys[w->nm] = md_strdup(key);
    w->vals[w->nm] = md_strdup(value);
    if (!w->keys[w->nm] || !w->vals[w->nm]) {
        md_free(w->keys[w->nm]);
        md_free(w->vals[w->nm]);
        return MD_ERR_OOM;
    }
    w->nm++;
    return MD_OK;
}

static cJSON *raw_int(long long v)
{
    char b[32];
    snprintf(b, sizeof b, "%lld", v);
    return cJSON_CreateRaw(b);
}

/* Order of tensors in the buffer: larger elements first, then insertion order,
 * so each tensor starts aligned to its element size (the buffer starts at a
 * multiple of 8). */
static void write_order(const md_st_writer *w, int *order)
{
    int k = 0;
    for (size_t sz = 8; sz >= 1; sz /= 2)
        for (int i = 0; i < w->nt; i++)
            if (md_dtype_size(w->t[i].dtype) == sz) order[k++] = i;
    MD_ASSERT(k == w->nt);
}

/* Builds the padded header text (caller frees with md_free). */
static md_status build_header(const md_st_writer *w, const int *order, char **out, size_t *out_len)
{
    *out = NULL;
    md_status st = MD_ERR_OOM;
    char *text = NULL;
    cJSON *root = cJSON_CreateObject();
    if (!root) goto fail;
    if (w->nm > 0) {
        cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
        if (!meta) goto fail;
        for (int i = 0; i < w->nm; i++)
            if (!cJSON_AddStringToObject(meta, w->keys[i], w->vals[i])) goto fail;
    }
    size_t off = 0;
    for (int k = 0; k < w->nt; k++) {
        const struct st_wtensor *t = &w->t[order[k]];
        cJSON *o = cJSON_AddObjectToObject(root, t->name);
        if (!o || !cJSON_AddStringToObject(o, "dtype", md_st_dtype_name(t->dtype))) goto fail;
        cJSON *shape = cJSON_AddArrayToObject(o, "shape");
        if (!shape) goto fail;
        for (int d = 0; d < t->ndim; d++) cJSON_AddItemToArray(shape, raw_int(t->shape[d]));
        cJSON *offs = cJSON_AddArrayToObject(o, "data_offsets");
        if (!offs) goto fail;
        cJSON_AddItemToArray(offs, raw_int((long long)off));
        cJSON_AddItemToArray(offs, raw_int((long long)(off + t->nbytes)));
        off += t->nbytes;
    }
    /* metadata may carry paths with any bytes; readers want UTF-8 */
    md_json_fix_utf8(root);
    text = cJSON_PrintUnformatted(root);
    if (!text) goto fail;
    size_t n = strlen(text);
    size_t padded = (n + 7) / 8 * 8;
    char *h = md_malloc(padded + 1);
    if (!h) goto fail;
    memcpy(h, text, n);
    memset(h + n, ' ', padded - n);
    h[padded] = '\0';
    *out = h;
    *out_len = padded;
    st = MD_OK;
fail:
    if (st == MD_ERR_OOM) md_errf(MD_ERR_OOM, "safetensors: out of memory building the header");
    if (text) cJSON_free(text);
    cJSON_Delete(root);
    return st;
}

md_status md_st_writer_write(md_st_writer *w, const char *path)
{
    MD_ASSERT(host_is_little_endian()); /* raw data is written as the host holds it */
    int *order = NULL;
    char *header = NULL;
    size_t hlen = 0;
    md_outfile *out = NULL;
    md_status st;
    order = md_malloc((size_t)(w->nt > 0 ? w->nt : 1) * sizeof *order);
    if (!order) return MD_ERR_OOM;
    write_order(w, order);
    if ((st = build_header(w, order, &header, &hlen)) != MD_OK) goto fail;
    /* a temporary file renamed over a regular file; links followed, devices
     * and FIFOs written directly (core/outfile.h) */
    if ((st = md_outfile_open(path, &out)) != MD_OK) goto fail;
    unsigned char len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (unsigned char)((unsigned long long)hlen >> (8 * i));
    if ((st = md_outfile_write(out, len8, 8)) != MD_OK) goto fail;
    if ((st = md_outfile_write(out, header, hlen)) != MD_OK) goto fail;
    for (int k = 0; k < w->nt; k++) {
        const struct st_wtensor *t = &w->t[order[k]];
        if ((st = md_outfile_write(out, t->data, t->nbytes)) != MD_OK) goto fail;
    }
    st = md_outfile_commit(out);
    out = NULL;
fail:
    md_outfile_abort(out);
    md_free(header);
    md_free(order);
    return st;
}

/* ---- reader ------------------------------------------------------------------- */

struct md_st_file {
    char *path;
    unsigned char *buf;     /* the whole file (header only: 8 + header bytes) */
    size_t size;            /* bytes in buf */
    const unsigned char *data; /* start of the byte buffer; NULL when header only */
    size_t data_size;
    struct md_st_tensor *t;
    char **names;
    int nt;
    char **keys, **vals;
    int nm;
    md_strmap tidx, midx;   /* tensor name -> index, metadata key -> index */
};

void md_st_close(md_st_file *f)
{
    if (!f) return;
    for (int i = 0; i < f->nt; i++) md_free(f->names[i]);
    md_free(f->names);
    md_free(f->t);
    free_meta(f->keys, f->vals, f->nm);
    md_free(f->buf);
    md_free(f->path);
    md_strmap_free(&f->tidx);
    md_strmap_free(&f->midx);
    md_free(f);
}

static md_status read_n(int fd, unsigned char *buf, size_t n, size_t *got, const char *path)
{
    *got = 0;
    while (*got < n) {
        ssize_t r = read(fd, buf + *got, n - *got);
        if (r < 0) {
            if (errno == EINTR) continue;
            return md_errf(MD_ERR_IO, "%s: read failed: %s", path, strerror(errno));
        }
        if (r == 0) break;
        *got += (size_t)r;
    }
    return MD_OK;
}

/* Reads the whole file, or (header_only) its 8-byte length and the header
 * that length gives when it is plausible. *file_size: the file's size. */
static md_status read_file(const char *path, int header_only, unsigned char **out, size_t *size, size_t *file_size)
{
    *out = NULL;
    int fd = open(path, O_RDONLY);
    if (fd < 0) return md_errf(MD_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    md_status st = MD_OK;
    struct stat sb;
    unsigned char *buf = NULL;
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        st = md_errf(MD_ERR_IO, "%s: not a regular file", path);
        goto done;
    }
    size_t n = (size_t)sb.st_size, got = 0;
    *file_size = n;
    if (header_only) {
        unsigned char len8[8];
        unsigned long long hlen = 0;
        if ((st = read_n(fd, len8, n < 8 ? n : 8, &got, path)) != MD_OK) goto done;
        for (int i = 7; got == 8 && i >= 0; i--) hlen = (hlen << 8) | len8[i];
        n = got == 8 && hlen <= ST_MAX_HEADER && hlen <= n - 8 ? 8 + (size_t)hlen : got;
        buf = md_malloc(n ? n : 1);
        if (!buf) {
            st = md_errf(MD_ERR_OOM, "%s: out of memory reading %zu bytes", path, n);
            goto done;
        }
        memcpy(buf, len8, got);
        size_t more = 0;
        if ((st = read_n(fd, buf + got, n - got, &more, path)) != MD_OK) goto done;
        got += more;
    } else {
        buf = md_malloc(n ? n : 1);
        if (!buf) {
            st = md_errf(MD_ERR_OOM, "%s: out of memory reading %zu bytes", path, n);
            goto done;
        }
        if ((st = read_n(fd, buf, n, &got, path)) != MD_OK) goto done;
    }
    *size = got;
    *out = buf;
    buf = NULL;
done:
    md_free(buf);
    close(fd);
    return st;
}

/* Non-negative integer JSON number that a double holds exactly. */
static int json_uint(const cJSON *it, long long *v)
{
    if (!cJSON_IsNumber(it)) return 0;
    double d = it->valuedouble;
    if (!(d >= 0) || d != floor(d) || d > 9007199254740992.0) return 0;
    *v = (long long)d;
    return 1;
}

static md_status parse_tensor(md_st_file *f, const cJSON *it, struct md_st_tensor *t,
                              long long *begin, long long *end)
{
    const char *p = f->path, *name = it->string;
    if (!cJSON_IsObject(it)) return md_errf(MD_ERR_DATA, "%s: tensor '%s': header entry is not an object", p, name);
    for (const cJSON *k = it->child; k; k = k->next)
        if (strcmp(k->string, "dtype") && strcmp(k->string, "shape") && strcmp(k->string, "data_offsets"))
            return md_errf(MD_ERR_DATA, "%s: tensor '%s': unknown key '%s'", p, name, k->string);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(it, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(it, "shape");
    const cJSON *of = cJSON_GetObjectItemCaseSensitive(it, "data_offsets");
    if (!cJSON_IsString(dt)) return md_errf(MD_ERR_DATA, "%s: tensor '%s': dtype missing or not a string", p, name);
    int d = md_st_dtype_parse(dt->valuestring);
    size_t esize = 0;
    if (d >= 0) {
        t->dtype_name = st_names[d];
        esize = md_dtype_size((md_dtype)d);
    } else {
        /* other dtypes of the format: read so the file opens, never computed in */
        for (size_t i = 0; i < sizeof st_other / sizeof st_other[0]; i++)
            if (strcmp(dt->valuestring, st_other[i].name) == 0) {
                t->dtype_name = st_other[i].name;
                esize = st_other[i].size;
            }
        if (!esize)
            return md_errf(MD_ERR_DATA, "%s: tensor '%s': dtype '%s' is not a safetensors dtype", p, name,
                           dt->valuestring);
        d = MD_DTYPE_COUNT;
    }
    t->dtype = (md_dtype)d;
    if (!cJSON_IsArray(sh)) return md_errf(MD_ERR_DATA, "%s: tensor '%s': shape missing or not an array", p, name);
    int nd = cJSON_GetArraySize(sh);
    if (nd > MD_ST_MAX_DIMS)
        return md_errf(MD_ERR_DATA, "%s: tensor '%s': %d dimensions (at most %d)", p, name, nd, MD_ST_MAX_DIMS);
    t->ndim = nd;
    long long inumel = 1;
    int i = 0;
    for (const cJSON *dim = sh->child; dim; dim = dim->next, i++) {
        long long v;
        if (!json_uint(dim, &v))
            return md_errf(MD_ERR_DATA, "%s: tensor '%s': shape[%d] is not a non-negative integer", p, name, i);
        t->shape[i] = v;
        /* checked before the product: it overflowed 64 bits here before */
        if (v > 0 && inumel > ST_MAX_NUMEL / v)
            return md_errf(MD_ERR_DATA, "%s: tensor '%s': shape too large (more than 2^53 elements)", p, name);
        inumel *= v;
    }
    t->numel = inumel;
    t->nbytes = (size_t)inumel * esize;
    if (!cJSON_IsArray(of) || cJSON_GetArraySize(of) != 2 || !json_uint(cJSON_GetArrayItem(of, 0), begin) ||
        !json_uint(cJSON_GetArrayItem(of, 1), end))
        return md_errf(MD_ERR_DATA, "%s: tensor '%s': data_offsets must be [begin, end] of non-negative integers",
                       p, name);
    if (*end < *begin)
        return md_errf(MD_ERR_DATA, "%s: tensor '%s': data_offsets [%lld, %lld] end before begin", p, name, *begin,
                       *end);
    if ((unsigned long long)(*end - *begin) != (unsigned long long)t->nbytes)
        return md_errf(MD_ERR_DATA,
                       "%s: tensor '%s': data_offsets span %lld bytes but dtype %s and shape need %zu", p, name,
                       *end - *begin, dt->valuestring, t->nbytes);
    if ((unsigned long long)*end > (unsigned long long)f->data_size)
        return md_errf(MD_ERR_DATA,
                       "%s: tensor '%s': data_offsets [%lld, %lld] beyond the data (%zu bytes; truncated file?)", p,
                       name, *begin, *end, f->data_size);
    return MD_OK;
}

struct st_span { long long begin, end; int idx; };

static int span_cmp(const void *a, const void *b)
{
    const struct st_span *x = a, *y = b;
    if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end) return x->end < y->end ? -1 : 1;
    return 0;
}

static md_status parse_header(md_st_file *f, const cJSON *root)
{
    const char *p = f->path;
    md_status st = MD_OK;
    struct st_span *spans = NULL;
    if (!cJSON_IsObject(root)) return md_errf(MD_ERR_DATA, "%s: header is not a JSON object", p);
    int n = 0, nmeta = 0;
    for (const cJSON *it = root->child; it; it = it->next) {
        if (strcmp(it->string, "__metadata__") == 0) {
            if (!cJSON_IsObject(it)) return md_errf(MD_ERR_DATA, "%s: __metadata__ is not an object", p);
            for (const cJSON *m = it->child; m; m = m->next) {
                if (!cJSON_IsString(m))
                    return md_errf(MD_ERR_DATA, "%s: __metadata__.%s is not a string", p, m->string);
                nmeta++;
            }
        } else {
            n++;
        }
    }
    f->t = md_calloc((size_t)(n ? n : 1), sizeof *f->t);
    f->names = md_calloc((size_t)(n ? n : 1), sizeof *f->names);
    f->keys = md_calloc((size_t)(nmeta ? nmeta : 1), sizeof *f->keys);
    f->vals = md_calloc((size_t)(nmeta ? nmeta : 1), sizeof *f->vals);
    spans = md_calloc((size_t)(n ? n : 1), sizeof *spans);
    if (!f->t || !f->names || !f->keys || !f->vals || !spans) {
        st = md_errf(MD_ERR_OOM, "%s: out of memory parsing the header", p);
        goto done;
    }
    for (const cJSON *it = root->child; it; it = it->next) {
        if (strcmp(it->string, "__metadata__") == 0) {
            for (const cJSON *m = it->child; m; m = m->next) {
                if (md_strmap_get(&f->midx, m->string, NULL)) {
                    st = md_errf(MD_ERR_DATA, "%s: __metadata__ key '%s' appears twice", p, m->string);
                    goto done;
                }
                f->keys[f->nm] = md_strdup(m->string);
                f->vals[f->nm] = md_strdup(m->valuestring);
                f->nm++;
                if (!f->keys[f->nm - 1] || !f->vals[f->nm - 1] ||
                    md_strmap_put(&f->midx, f->keys[f->nm - 1], f->nm - 1) != MD_OK) {
                    st = MD_ERR_OOM;
                    goto done;
                }
            }
            continue;
        }
        if (md_strmap_get(&f->tidx, it->string, NULL)) {
            st = md_errf(MD_ERR_DATA, "%s: tensor '%s' appears twice in the header", p, it->string);
            goto done;
        }
        struct md_st_tensor *t = &f->t[f->nt];
        long long b = 0, e = 0;
        if ((st = parse_tensor(f, it, t, &b, &e)) != MD_OK) goto done;
        f->names[f->nt] = md_strdup(it->string);
        if (!f->names[f->nt] || md_strmap_put(&f->tidx, f->names[f->nt], f->nt) != MD_OK) {
            st = MD_ERR_OOM;
            goto done;
        }
        t->name = f->names[f->nt];
        t->data = f->data ? f->data + b : NULL;
        spans[f->nt] = (struct st_span){b, e, f->nt};
        f->nt++;
    }
    /* The tensors must tile [0, data_size) exactly. */
    qsort(spans, (size_t)f->nt, sizeof *spans, span_cmp);
    long long at = 0;
    for (int i = 0; i < f->nt; i++) {
        const char *name = f->names[spans[i].idx];
        if (spans[i].begin < at) {
            st = md_errf(MD_ERR_DATA, "%s: tensor '%s': data_offsets [%lld, %lld] overlap another tensor", p, name,
                         spans[i].begin, spans[i].end);
            goto done;
        }
        if (spans[i].begin > at) {
            st = md_errf(MD_ERR_DATA, "%s: tensor '%s': data_offsets [%lld, %lld] leave a hole at byte %lld", p,
                         name, spans[i].begin, spans[i].end, at);
            goto done;
        }
        at = spans[i].end;
    }
    if ((size_t)at != f->data_size) {
        st = md_errf(MD_ERR_DATA, "%s: the tensors cover %lld of %zu data bytes (trailing bytes)", p, at,
                     f->data_size);
        goto done;
    }
done:
    md_free(spans);
    return st;
}

/* Checks f->buf (f->size bytes of a file of file_size bytes) and parses its
 * header into f. */
static md_status st_parse(md_st_file *f, size_t file_size, int header_only)
{
    const char *path = f->path;
    cJSON *root = NULL;
    md_status st = MD_OK;
    if (f->size < 8) {
        st = md_errf(MD_ERR_DATA, "%s: %zu bytes: too short for a safetensors file (truncated?)", path, f->size);
        goto fail;
    }
    unsigned long long hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | f->buf[i];
    if (hlen < 2 || hlen > ST_MAX_HEADER || hlen > f->size - 8) {
        st = md_errf(MD_ERR_DATA, "%s: bad header length %llu (file has %zu bytes; truncated or not safetensors)",
                     path, hlen, file_size);
        goto fail;
    }
    const char *htext = (const char *)f->buf + 8;
    if (htext[0] != '{') {
        st = md_errf(MD_ERR_DATA, "%s: header does not start with '{': not a safetensors file", path);
        goto fail;
    }
    if (memchr(htext, '\0', (size_t)hlen)) {
        st = md_errf(MD_ERR_DATA, "%s: header contains a NUL byte", path);
        goto fail;
    }
    f->data = header_only ? NULL : f->buf + 8 + hlen;
    f->data_size = file_size - 8 - (size_t)hlen;
    const char *end = NULL;
    root = cJSON_ParseWithLengthOpts(htext, (size_t)hlen, &end, 0);
    if (!root) {
        size_t at = end ? (size_t)(end - htext) : 0;
        st = md_errf(MD_ERR_DATA, "%s: malformed JSON header near byte %zu", path, at);
        goto fail;
    }
    char what[4200];
    snprintf(what, sizeof what, "%s: header", path);
    if ((st = md_json_unique_keys(root, what, MD_ERR_DATA)) != MD_OK) goto fail;
    for (const char *q = end; q < htext + hlen; q++)
        if (*q != ' ' && *q != '\n' && *q != '\t' && *q != '\r') {
            st = md_errf(MD_ERR_DATA, "%s: malformed JSON header: text after the object at byte %zu", path,
                         (size_t)(q - htext));
            goto fail;
        }
    st = parse_header(f, root);
fail:
    cJSON_Delete(root);
    return st;
}

static md_status st_open(const char *path, int header_only, md_st_file **out)
{
    *out = NULL;
    size_t file_size = 0;
    md_st_file *f = md_calloc(1, sizeof *f);
    if (!f || !(f->path = md_strdup(path))) {
        md_free(f);
        return md_errf(MD_ERR_OOM, "%s: out of memory", path);
    }
    md_status st = read_file(path, header_only, &f->buf, &f->size, &file_size);
    if (st == MD_OK) st = st_parse(f, file_size, header_only);
    if (st != MD_OK) {
        md_st_close(f);
        return st;
    }
    *out = f;
    return MD_OK;
}

md_status md_st_parse(const void *data, size_t n, const char *name, md_st_file **out)
{
    *out = NULL;
    md_st_file *f = md_calloc(1, sizeof *f);
    if (f) f->path = md_strdup(name);
    if (f && f->path) f->buf = md_malloc(n ? n : 1);
    if (!f || !f->path || !f->buf) {
        md_st_close(f);
        return md_errf(MD_ERR_OOM, "%s: out of memory", name);
    }
    if (n) memcpy(f->buf, data, n);
    f->size = n;
    md_status st = st_parse(f, n, 0);
    if (st != MD_OK) {
        md_st_close(f);
        return st;
    }
    *out = f;
    return MD_OK;
}

md_status md_st_open(const char *path, md_st_file **out) { return st_open(path, 0, out); }
md_status md_st_open_header(const char *path, md_st_file **out) { return st_open(path, 1, out); }

const char *md_st_path(const md_st_file *f) { return f->path; }
int md_st_count(const md_st_file *f) { return f->nt; }

const struct md_st_tensor *md_st_at(const md_st_file *f, int i)
{
    return i >= 0 && i < f->nt ? &f->t[i] : NULL;
}

const struct md_st_tensor *md_st_find(const md_st_file *f, const char *name)
{
    int i;
    return md_strmap_get(&f->tidx, name, &i) ? &f->t[i] : NULL;
}

const char *md_st_meta(const md_st_file *f, const char *key)
{
    int i;
    return md_strmap_get(&f->midx, key, &i) ? f->vals[i] : NULL;
}

int md_st_meta_count(const md_st_file *f) { return f->nm; }

int md_st_meta_at(const md_st_file *f, int i, const char **key, const char **value)
{
    if (i < 0 || i >= f->nm) return 0;
    *key = f->keys[i];
    *value = f->vals[i];
    return 1;
}

static void fmt_shape(char *b, size_t n, int ndim, const long long *shape)
{
    size_t at = (size_t)snprintf(b, n, "(");
    for (int d = 0; d < ndim && at < n; d++)
        at += (size_t)snprintf(b + at, n - at, d ? ", %lld" : "%lld", shape[d]);
    if (at < n) snprintf(b + at, n - at, ")");
}

md_status md_st_expect(const md_st_file *f, const char *name, md_dtype dtype, int ndim,
                       const long long *shape, const struct md_st_tensor **out)
{
    const struct md_st_tensor *t = md_st_find(f, name);
    if (!t) return md_errf(MD_ERR_DATA, "%s: tensor '%s' is missing", f->path, name);
    if (t->dtype != dtype)
        return md_errf(MD_ERR_DATA, "%s: tensor '%s' has dtype %s, expected %s", f->path, name, t->dtype_name,
                       md_st_dtype_name(dtype));
    if (ndim >= 0) {
        int same = t->ndim == ndim;
        for (int d = 0; same && d < ndim; d++) same = t->shape[d] == shape[d];
        if (!same) {
            char a[128], b[128];
            fmt_shape(a, sizeof a, t->ndim, t->shape);
            fmt_shape(b, sizeof b, ndim, shape);
            return md_errf(MD_ERR_DATA, "%s: tensor '%s' has shape %s, expected %s", f->path, name, a, b);
        }
    }
    if (out) *out = t;
    return MD_OK;
}

md_status md_st_copy(const md_st_file *f, const char *name, md_dtype dtype, int ndim,
                     const long long *shape, void *dst)
{
    const struct md_st_tensor *t;
    MD_TRY(md_st_expect(f, name, dtype, ndim, shape, &t));
    if (t->nbytes) memcpy(dst, t->data, t->nbytes);
    return MD_OK;
}

md_status md_st_filter_layout(const md_st_file *f, int *krsc)
{
    *krsc = 0;
    const char *lay = md_st_meta(f, MD_ST_LAYOUT_KEY);
    if (lay) {
        if (strcmp(lay, MD_ST_LAYOUT_TORCH) == 0) return MD_OK;
        return md_errf(MD_ERR_DATA,
                       "%s: metadata %s is '%s'; only '%s' files can be read (convolution weights (K, C/groups, R, S))",
                       f->path, MD_ST_LAYOUT_KEY, lay, MD_ST_LAYOUT_TORCH);
    }
    /* before the key: "layout" was the device's, and checkpoints held its bytes */
    const char *old = md_st_meta(f, "layout"), *fmt = md_st_meta(f, "format");
    if (!old || strcasecmp(old, "NCHW") == 0) return MD_OK;
    if (strcasecmp(old, "NHWC") == 0 && fmt && strcmp(fmt, "mpsdiag-checkpoint-1") == 0) {
        *krsc = 1;
        return MD_OK;
    }
    return md_errf(MD_ERR_DATA, "%s: metadata layout is '%s' and %s is missing; cannot tell how its tensors are laid out",
                   f->path, old, MD_ST_LAYOUT_KEY);
}
