/* html.h - the self-contained HTML report.
 *
 * One file with inline CSS and inline SVG charts drawn here: no scripts, no
 * network, no fonts to fetch, so it opens on an air-gapped machine and can be
 * attached to a CI run. It is written from the JSON report (README "Report
 * schema"), so the two never disagree: the sections are header, system,
 * devices, settings (with reasons), model, data, training (loss and accuracy
 * curves; per epoch the step time by phase, dead units and pathway balance:
 * html_epochs.h), benchmark (latency histogram, batch-size sweep, device
 * comparison, ablations), memory, recommendations and warnings. Sections
 * whose key is absent are left out; objects this writer does not know are
 * shown as key/value tables, so new report keys appear without changes here.
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
