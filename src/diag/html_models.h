/* html_models.h - the diagnostics run's part of the HTML report.
 *
 * A report with "models" (the diagnostics run, src/app/diagnostics.c) gets a
 * comparison section (the table of report.comparison, bar charts with the
 * models side by side: accuracy, or validation loss when no model has an
 * accuracy; training samples/s; inference latency; peak device memory; and
 * the validation curves of every model in one chart) and a section per model
 * (its training and validation curves, its benchmark figures, its
 * recommendations and --ci checks). Drawn from the JSON report only.
 */
#ifndef MD_HTML_MODELS_H
#define MD_HTML_MODELS_H

#include <cjson/cJSON.h>

#include "diag/strbuf.h"

/* Appends the sections; nothing when the report has no "models" array. */
void md_html_models(md_strbuf *b, const cJSON *report);

/* True for the report keys these sections show (models, comparison,
 * diagnostics), which the generic "Other" section then leaves out. */
int md_html_models_key(const cJSON *report, const char *key);

#endif
