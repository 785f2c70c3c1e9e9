/* outfile.h - writing an output file (report, HTML, JUnit, checkpoint) so
 * that a reader never sees half of it, without breaking what the path is.
 *
 *   - a regular file, or a path that does not exist yet: written to
 *     "<target>.tmp" beside it, fsynced, renamed over the target, and the
 *     directory fsynced (the existing file's permission bits are kept);
 *   - a symbolic link: followed to its final target, which is then treated
 *     as above (the link itself stays a link);
 *   - anything else that exists (a character device such as /dev/null, a
 *     FIFO, a socket): opened and written directly, no temporary file;
 *   - /dev/stdout, /dev/stderr, /dev/fd/N and /proc/self/fd/N: written to the
 *     process's own descriptor N (stdout is flushed first), so the bytes land
 *     in order with the rest of the output and a redirected file is not
 *     truncated or replaced.
 * A directory is refused. Every failure (open, write, fsync, close, rename)
 * is MD_ERR_IO with a message naming the path and the reason.
 */
#ifndef MD_OUTFILE_H
#define MD_OUTFILE_H

#include <stddef.h>

#include "core/status.h"

typedef struct md_outfile md_outfile; /* opaque */

/* Opens `path` for writing as described above. *out is owned by the caller
 * and must end in md_outfile_commit or md_outfile_abort. */
md_status md_outfile_open(const char *path, md_outfile **out);
/* Appends n bytes (retrying short writes and EINTR). */
md_status md_outfile_write(md_outfile *f, const void *data, size_t n);
/* Makes the file durable and visible under its name; frees f (also on
 * failure, after removing the temporary file). */
md_status md_outfile_commit(md_outfile *f);
/* Drops what was written (the temporary file is removed); frees f. NULL ok. */
void md_outfile_abort(md_outfile *f);

/* Makes `to` a second name of the regular file `from` (a hard link, put in
 * place by rename, so `to` is never half there): a copy without writing the
 * bytes again. MD_ERR_UNSUPPORTED where the file system has no hard links
 * (the caller writes instead); a later atomic write of either name replaces
 * only that name. */
md_status md_outfile_link(const char *from, const char *to);

/* Writes a whole buffer to path through md_outfile_*. */
md_status md_outfile_write_all(const char *path, const void *data, size_t n);

/* The file a write to `path` lands in: symbolic links followed to their
 * final target, which need not exist (paths into /proc are kept as they
 * are). Used to check outputs before a run. */
md_status md_outfile_resolve(const char *path, char *out, size_t n);

/* The descriptor that /dev/stdout, /dev/stderr, /dev/fd/N or /proc/self/fd/N
 * name, or -1 for any other path. */
int md_outfile_std_fd(const char *path);

#endif
