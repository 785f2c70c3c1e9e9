/* html_profile.h - the HTML report's Profile section (html.c calls it after
 * the benchmark): time per layer with its share of the step as a bar and its
 * rates against the device's peaks, energy per step, memory as mpsdiag, the
 * driver and the OS see it, and the leak check, from report.profile
 * (docs/doctor.md). */
#ifndef MD_HTML_PROFILE_H
#define MD_HTML_PROFILE_H

#include <cjson/cJSON.h>

#include "diag/strbuf.h"

/* Appends the section for report["profile"] `profile`. */
void md_html_profile(md_strbuf *b, const cJSON *profile);

#endif
