/* json_schema.h - a validator for the subset of JSON Schema (draft 2020-12)
 * that the schemas in docs/schema use, for the tests.
 *
 * Keywords: type (a name or a list of names; "integer" is a number without a
 * fraction), properties, required, additionalProperties (true, false or a
 * schema), items, enum, const, minimum, maximum, minItems, $ref (only
 * "#/$defs/NAME"), oneOf, anyOf. Annotations ($schema, $id, $defs, $comment,
 * title, description) are read past. Any other keyword is an error in the
 * schema, so a schema cannot lean on a keyword this checker would ignore.
 */
#ifndef MD_TEST_JSON_SCHEMA_H
#define MD_TEST_JSON_SCHEMA_H

#include <cjson/cJSON.h>
#include <stddef.h>

/* Validates `doc` against `schema` (the root schema: $ref resolves in its
 * $defs). Returns 1 when valid; else 0 with the first problem in `err`:
 * the instance's JSON path ("$.status.exit_code") and what is wrong. */
int th_schema_validate(const cJSON *schema, const cJSON *doc, char *err, size_t errlen);

/* The sub-schema for a dotted path of property names ("benchmark.warmup"),
 * following $ref and array items; NULL when the schema does not describe it. */
const cJSON *th_schema_property(const cJSON *schema, const char *dotted);

#endif
