/* status.c - thread-local error messages and exit-code mapping. */
#include "core/status.h"

#include <stdarg.h>
#include <string.h>

static _Thread_local char err_buf[1024];

md_status md_errf(md_status st, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_buf, sizeof err_buf, fmt, ap);
    va_end(ap);
    /* one line: error messages never contain newlines */
    for (char *p = err_buf; *p; p++)
        if (*p == '\n') *p = ' ';
    return st;
}

void md_err_prefix(const char *fmt, ...)
{
    char pre[512], old[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(pre, sizeof pre, fmt, ap);
    va_end(ap);
    memcpy(old, err_buf, sizeof old);
    snprintf(err_buf, sizeof err_buf, "%s: %s", pre, old);
}

const char *md_errmsg(void) { return err_buf; }
void md_err_clear(void) { err_buf[0] = '\0'; }

int md_status_exit_code(md_status st)
{
    switch (st) {
    case MD_OK: return MD_EXIT_OK;
    case MD_ERR_USAGE: return MD_EXIT_USAGE;
    case MD_ERR_CONFIG:
    case MD_ERR_DATA:
    case MD_ERR_IO: return MD_EXIT_INPUT;
    case MD_ERR_DEVICE:
    case MD_ERR_UNSUPPORTED: return MD_EXIT_DEVICE;
    case MD_ERR_OOM: return MD_EXIT_OOM;
    case MD_ERR_NUMERIC: return MD_EXIT_NUMERIC;
    case MD_ERR_THRESHOLD: return MD_EXIT_THRESHOLD;
    case MD_ERR_INTERRUPTED: return MD_EXIT_INTERRUPTED;
    case MD_ERR_INTERNAL: return MD_EXIT_INTERNAL;
    }
    return MD_EXIT_FAILURE;
}

const char *md_status_name(md_status st)
{
    static const char *const names[] = {
        [MD_OK] = "ok", [MD_ERR_USAGE] = "usage", [MD_ERR_CONFIG] = "config",
        [MD_ERR_DATA] = "data", [MD_ERR_IO] = "io", [MD_ERR_DEVICE] = "device",
        [MD_ERR_UNSUPPORTED] = "unsupported", [MD_ERR_OOM] = "out-of-memory",
        [MD_ERR_NUMERIC] = "numeric", [MD_ERR_INTERRUPTED] = "interrupted",
        [MD_ERR_THRESHOLD] = "threshold", [MD_ERR_INTERNAL] = "internal",
    };
    if ((unsigned)st < sizeof names / sizeof names[0] && names[st]) return names[st];
    return "unknown";
}
