/* html_epochs.h - the HTML report's per-epoch diagnostics (html.c calls it
 * inside the training section): the step time of each epoch by phase as a
 * stacked bar, the dead-unit share of each activation layer per epoch and
 * the pathway balance of each fusion per epoch, from
 * report.training.diagnostics (docs/training.md "Per-epoch diagnostics"). */
#ifndef MD_HTML_EPOCHS_H
#define MD_HTML_EPOCHS_H

#include <cjson/cJSON.h>

#include "diag/strbuf.h"

/* Appends the three parts for report["training"] `training`; nothing when
 * its diagnostics have none of them (an older report). */
void md_html_epochs(md_strbuf *b, const cJSON *training);

#endif
