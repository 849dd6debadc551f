/* Files that appear whole or not at all. A writer that dies halfway (killed,
 * out of disk) must not leave a torn model or data file where a reader would
 * take it for a good one: the bytes go to a temporary file in the same
 * folder, are fsynced, and the temporary file is renamed over the target,
 * which POSIX makes atomic. libc only. */
#ifndef PX_FILE_H
#define PX_FILE_H

#include <stddef.h>

/* Writes header (hlen bytes) then data (dlen bytes) to path atomically:
 * a temporary file in the same folder, fsync, rename. `what` names the file
 * kind in messages ("model file", "shard"). 0, or -1 with a message. */
int px_file_write_atomic(const char *path, const void *header, size_t hlen, const void *data, size_t dlen,
                         const char *what, char *err, size_t errlen);

#endif
