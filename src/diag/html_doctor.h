/* html_doctor.h - the HTML report's sections of the doctor: --check and
 * --precision-audit (the report's "check" and "precision_audit" objects). */
#ifndef MD_HTML_DOCTOR_H
#define MD_HTML_DOCTOR_H

#include <cjson/cJSON.h>

#include "diag/strbuf.h"

/* The sections for whichever of the two objects the report has. */
void md_html_doctor(md_strbuf *b, const cJSON *r);
/* 1 for the top-level keys these sections show. */
int md_html_doctor_key(const char *key);

#endif
