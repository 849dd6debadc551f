/* Files that appear whole or not at all. A writer that dies halfway (killed,
 * out of disk) must not leave a torn model or data file where a reader would
 * take it for a good one: the bytes go to a temporary file in the same
 * folder, are fsynced, and the temporary file is renamed over the target,
 * which POSIX makes atomic. Also the loops every whole read and write of a
 * descriptor needs (short counts, EINTR). libc only. */
#ifndef PX_FILE_H
#define PX_FILE_H

#include <stddef.h>
#include <sys/types.h>

/* Writes header (hlen bytes) then data (dlen bytes) to path atomically:
 * a temporary file in the same folder, fsync, rename. `what` names the file
 * kind in messages ("model file", "shard"). 0, or -1 with a message. */
int px_file_write_atomic(const char *path, const void *header, size_t hlen, const void *data, size_t dlen,
                         const char *what, char *err, size_t errlen);

/* mkdir -p dir (mode 0755). 0, or -1 with errno set. */
int px_mkdirs(const char *dir);

/* Copies the file src to dst atomically (whole, as px_file_write_atomic
 * writes). For files that fit in memory. 0, or -1 with a message. */
int px_file_copy_atomic(const char *src, const char *dst, const char *what, char *err, size_t errlen);

/* Writes all len bytes to fd, through short writes and EINTR. 0, or -1 with
 * errno set (EIO when a write took nothing). */
int px_fd_write_all(int fd, const void *buf, size_t len);

/* Reads len bytes from fd, fewer only at the end of the file, through short
 * reads and EINTR: the count read, or -1 with errno set. */
ssize_t px_fd_read_full(int fd, void *buf, size_t len);

#endif
