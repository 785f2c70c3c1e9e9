/* html.h - the self-contained HTML report.
 *
 * One file with inline CSS and inline SVG charts drawn here: no scripts, no
 * network, no fonts to fetch, so it opens on an air-gapped machine and can be
 * attached to a CI run. It is written from the JSON report
 * (docs/report-schema.md), so the two never disagree. The page opens with a
 * summary for a person (device, what ran, results, findings as callouts, the first
 * recommendations), then one section per part of the report: system,
 * devices, settings (with reasons), model, data, run, training (curves;
 * per epoch the step time by phase, dead units and pathway balance:
 * html_epochs.h), cross-validation, benchmark (timings, time by layer kind,
 * latency histogram, batch-size sweep and finder, device comparison,
 * ablations), memory, recommendations and warnings. Sections whose key is
 * absent are left out; objects this writer does not know are shown as
 * labelled key/value tables, so new report keys appear without changes here.
 * Sections are built from html_util.h (docs/html-report.md).
 */
#ifndef MD_HTML_H
#define MD_HTML_H

#include <cjson/cJSON.h>
#include <stddef.h>

#include "core/status.h"

/* Renders the page. *out is NUL-terminated and owned by the caller (md_free). */
md_status md_html_render(const cJSON *report, char **out, size_t *len);

/* Renders and writes atomically (temporary file, fsync, rename). */
md_status md_html_write(const cJSON *report, const char *path);

#endif
