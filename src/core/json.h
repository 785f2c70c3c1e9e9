/* json.h - strict JSON helpers over cJSON: loading with line:column errors,
 * typed getters that carry the JSON path into their messages, unknown-key
 * checks, and atomic writing (temporary file, fsync, rename). */
#ifndef MD_JSON_H
#define MD_JSON_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "core/status.h"

/* Reads and parses a file. Errors (MD_ERR_CONFIG / MD_ERR_IO) name the file
 * and, for malformed JSON, the line and column; a key that appears twice in one
 * object is an error naming its JSON path. Caller owns *out. */
md_status md_json_load_file(const char *path, cJSON **out);
md_status md_json_parse(const char *text, const char *name, cJSON **out);

/* Fails with status `code` naming the first key (in document order) given
 * twice in one object anywhere in root, by its JSON path:
 * "<name>: layers[2].out: key appears twice". cJSON keeps both copies, and
 * look-ups would see one or the other depending on how they search. */
md_status md_json_unique_keys(const cJSON *root, const char *name, md_status code);

/* Typed getters. `path` is the object's JSON path for messages
 * ("model.layers[3]"); the key is appended. A missing key with required=0
 * leaves *out unchanged and returns MD_OK. Wrong type or range: MD_ERR_CONFIG. */
md_status md_json_int(const cJSON *obj, const char *key, const char *path, int required,
                      long long min, long long max, int *out);
md_status md_json_num(const cJSON *obj, const char *key, const char *path, int required,
                      double min, double max, double *out);
md_status md_json_bool(const cJSON *obj, const char *key, const char *path, int required, int *out);
/* Borrowed string (valid while obj lives). */
md_status md_json_str(const cJSON *obj, const char *key, const char *path, int required, const char **out);

/* Fails naming the first key of obj that is not in `allowed` (NULL-terminated). */
md_status md_json_only_keys(const cJSON *obj, const char *path, const char *const *allowed);

/* Writes the JSON (pretty) atomically: path.tmp, fsync, rename. Errors name
 * the file and the reason (disk full, read-only, ...). */
md_status md_json_write_file(const cJSON *root, const char *path);
/* Same for raw bytes. */
md_status md_write_file_atomic(const char *path, const void *data, size_t n);

/* UTF-8. Strict: no overlong forms, no surrogates, nothing above U+10FFFF.
 * md_utf8_valid: 1 when s is valid, else 0 with the first bad byte's offset
 * in *bad_offset (may be NULL). md_utf8_fix: a copy with each byte that does
 * not start a valid sequence replaced by U+FFFD (caller frees with
 * cJSON_free). */
int md_utf8_valid(const char *s, size_t *bad_offset);
char *md_utf8_fix(const char *s);
/* MD_ERR_CONFIG naming `name` and the JSON path ("layers[3].name") of the
 * first key or string that is not valid UTF-8. */
md_status md_json_check_utf8(const cJSON *root, const char *name);
/* Replaces invalid UTF-8 in every key and string of the tree (and of its
 * siblings) with U+FFFD, so the printed JSON is valid UTF-8 whatever bytes
 * went in (paths from the command line may hold any). */
void md_json_fix_utf8(cJSON *node);

#endif
