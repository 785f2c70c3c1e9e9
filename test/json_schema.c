/* json_schema.c - the JSON Schema subset of json_schema.h. */
#include "json_schema.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

struct ctx {
    const cJSON *root; /* the root schema, for $ref */
    char *err;
    size_t errlen;
    int depth;
};

static int fail(struct ctx *c, const char *path, const char *fmt, const char *a, const char *b)
{
    char msg[512];
    snprintf(msg, sizeof msg, fmt, a, b);
    snprintf(c->err, c->errlen, "%s: %s", path, msg);
    return 0;
}

static const char *type_of(const cJSON *v)
{
    if (cJSON_IsObject(v)) return "object";
    if (cJSON_IsArray(v)) return "array";
    if (cJSON_IsString(v)) return "string";
    if (cJSON_IsBool(v)) return "boolean";
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsNumber(v)) return "number";
    return "invalid";
}

static int has_type(const cJSON *v, const char *name)
{
    if (strcmp(name, "integer") == 0)
        return cJSON_IsNumber(v) && isfinite(v->valuedouble) && v->valuedouble == floor(v->valuedouble);
    return strcmp(name, type_of(v)) == 0;
}

static const cJSON *resolve_ref(struct ctx *c, const char *ref)
{
    static const char prefix[] = "#/$defs/";
    if (strncmp(ref, prefix, sizeof prefix - 1) != 0) return NULL;
    return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(c->root, "$defs"),
                                            ref + sizeof prefix - 1);
}

static int validate(struct ctx *c, const cJSON *s, const cJSON *v, const char *path);

static int check_type(struct ctx *c, const cJSON *t, const cJSON *v, const char *path)
{
    if (cJSON_IsString(t)) {
        if (has_type(v, t->valuestring)) return 1;
        return fail(c, path, "is %s, the schema wants %s", type_of(v), t->valuestring);
    }
    if (!cJSON_IsArray(t)) return fail(c, path, "schema error: 'type' must be a string or a list%s", "", "");
    const cJSON *n;
    cJSON_ArrayForEach(n, t) if (cJSON_IsString(n) && has_type(v, n->valuestring)) return 1;
    char *want = cJSON_PrintUnformatted(t);
    fail(c, path, "is %s, the schema wants one of %s", type_of(v), want ? want : "?");
    cJSON_free(want);
    return 0;
}

static int check_object(struct ctx *c, const cJSON *s, const cJSON *v, const char *path)
{
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    const cJSON *r;
    cJSON_ArrayForEach(r, req)
    {
        if (!cJSON_IsString(r)) return fail(c, path, "schema error: 'required' holds a non-string%s", "", "");
        if (!cJSON_GetObjectItemCaseSensitive(v, r->valuestring))
            return fail(c, path, "lacks the required key '%s'%s", r->valuestring, "");
    }
    const cJSON *m;
    cJSON_ArrayForEach(m, v)
    {
        char sub[1024];
        snprintf(sub, sizeof sub, "%s.%s", path, m->string);
        const cJSON *ps = cJSON_GetObjectItemCaseSensitive(props, m->string);
        if (ps) {
            if (!validate(c, ps, m, sub)) return 0;
        } else if (cJSON_IsFalse(addl)) {
            return fail(c, path, "has the key '%s', which the schema does not allow here%s", m->string, "");
        } else if (cJSON_IsObject(addl)) {
            if (!validate(c, addl, m, sub)) return 0;
        }
    }
    return 1;
}

static int check_number(struct ctx *c, const cJSON *s, const cJSON *v, const char *path)
{
    const cJSON *lo = cJSON_GetObjectItemCaseSensitive(s, "minimum");
    const cJSON *hi = cJSON_GetObjectItemCaseSensitive(s, "maximum");
    char a[64], b[64];
    snprintf(a, sizeof a, "%.17g", v->valuedouble);
    if (cJSON_IsNumber(lo) && !(v->valuedouble >= lo->valuedouble)) {
        snprintf(b, sizeof b, "%.17g", lo->valuedouble);
        return fail(c, path, "%s is below the minimum %s", a, b);
    }
    if (cJSON_IsNumber(hi) && !(v->valuedouble <= hi->valuedouble)) {
        snprintf(b, sizeof b, "%.17g", hi->valuedouble);
        return fail(c, path, "%s is above the maximum %s", a, b);
    }
    return 1;
}

/* oneOf (exactly one branch) or anyOf (at least one); the message of the
 * last failing branch is kept when none matches. */
static int check_branches(struct ctx *c, const cJSON *list, const cJSON *v, const char *path, int exactly_one)
{
    int matched = 0;
    char first[512] = "";
    const cJSON *b;
    cJSON_ArrayForEach(b, list)
    {
        if (validate(c, b, v, path))
            matched++;
        else if (!first[0])
            snprintf(first, sizeof first, "%s", c->err);
    }
    if (exactly_one ? matched == 1 : matched >= 1) return 1;
    if (matched > 1) return fail(c, path, "matches %s branches of oneOf%s", "several", "");
    return fail(c, path, "matches no branch of %s (first branch: %s)", exactly_one ? "oneOf" : "anyOf",
                first);
}

static int validate(struct ctx *c, const cJSON *s, const cJSON *v, const char *path)
{
    if (cJSON_IsTrue(s)) return 1;
    if (cJSON_IsFalse(s)) return fail(c, path, "is not allowed here%s%s", "", "");
    if (!cJSON_IsObject(s))
        return fail(c, path, "schema error: a schema must be an object or a boolean%s", "", "");
    if (++c->depth > 64) return fail(c, path, "schema error: $ref nests too deep%s", "", "");
    int ok = 1;
    const cJSON *k;
    cJSON_ArrayForEach(k, s)
    {
        const char *n = k->string;
        if (strcmp(n, "$schema") == 0 || strcmp(n, "$id") == 0 || strcmp(n, "$defs") == 0 ||
            strcmp(n, "$comment") == 0 || strcmp(n, "title") == 0 || strcmp(n, "description") == 0 ||
            strcmp(n, "properties") == 0 || strcmp(n, "required") == 0 ||
            strcmp(n, "additionalProperties") == 0 || strcmp(n, "minimum") == 0 || strcmp(n, "maximum") == 0)
            continue; /* annotations, or read with their siblings below */
        if (strcmp(n, "type") == 0)
            ok = check_type(c, k, v, path);
        else if (strcmp(n, "$ref") == 0) {
            const cJSON *t = cJSON_IsString(k) ? resolve_ref(c, k->valuestring) : NULL;
            ok = t ? validate(c, t, v, path)
                   : fail(c, path, "schema error: unresolved $ref '%s'%s",
                          cJSON_IsString(k) ? k->valuestring : "?", "");
        } else if (strcmp(n, "enum") == 0) {
            ok = 0;
            const cJSON *e;
            cJSON_ArrayForEach(e, k) if (cJSON_Compare(e, v, 1)) ok = 1;
            if (!ok) {
                char *got = cJSON_PrintUnformatted(v), *want = cJSON_PrintUnformatted(k);
                fail(c, path, "%s is not one of %s", got ? got : "?", want ? want : "?");
                cJSON_free(got);
                cJSON_free(want);
            }
        } else if (strcmp(n, "const") == 0) {
            ok = cJSON_Compare(k, v, 1);
            if (!ok) {
                char *want = cJSON_PrintUnformatted(k);
                fail(c, path, "is not the constant %s%s", want ? want : "?", "");
                cJSON_free(want);
            }
        } else if (strcmp(n, "items") == 0) {
            if (cJSON_IsArray(v)) {
                int i = 0;
                const cJSON *e;
                cJSON_ArrayForEach(e, v)
                {
                    char sub[1024];
                    snprintf(sub, sizeof sub, "%s[%d]", path, i++);
                    if (!(ok = validate(c, k, e, sub))) break;
                }
            }
        } else if (strcmp(n, "minItems") == 0) {
            if (cJSON_IsArray(v) && cJSON_GetArraySize(v) < k->valueint)
                ok = fail(c, path, "has fewer items than the schema's minItems%s%s", "", "");
        } else if (strcmp(n, "oneOf") == 0 || strcmp(n, "anyOf") == 0) {
            ok = check_branches(c, k, v, path, n[0] == 'o');
        } else {
            ok = fail(c, path, "schema error: the keyword '%s' is not supported by this checker%s", n, "");
        }
        if (!ok) break;
    }
    if (ok && cJSON_IsObject(v)) ok = check_object(c, s, v, path);
    if (ok && cJSON_IsNumber(v)) ok = check_number(c, s, v, path);
    c->depth--;
    return ok;
}

int th_schema_validate(const cJSON *schema, const cJSON *doc, char *err, size_t errlen)
{
    struct ctx c = {.root = schema, .err = err, .errlen = errlen};
    if (errlen) err[0] = '\0';
    return validate(&c, schema, doc, "$");
}

/* Follows $ref (and the first branch of oneOf/anyOf holding `properties`). */
static const cJSON *deref(const cJSON *root, const cJSON *s)
{
    for (int i = 0; i < 16 && s; i++) {
        const cJSON *r = cJSON_GetObjectItemCaseSensitive(s, "$ref");
        if (cJSON_IsString(r)) {
            struct ctx c = {.root = root};
            s = resolve_ref(&c, r->valuestring);
            continue;
        }
        const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
        if (items && !cJSON_GetObjectItemCaseSensitive(s, "properties")) {
            s = items;
            continue;
        }
        return s;
    }
    return s;
}

const cJSON *th_schema_property(const cJSON *schema, const char *dotted)
{
    const cJSON *s = deref(schema, schema);
    char key[256];
    while (s && *dotted) {
        const char *dot = strchr(dotted, '.');
        size_t len = dot ? (size_t)(dot - dotted) : strlen(dotted);
        snprintf(key, sizeof key, "%.*s", (int)len, dotted);
        s = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(s, "properties"), key);
        s = s ? deref(schema, s) : NULL;
        dotted += len + (dot ? 1 : 0);
    }
    return s;
}
