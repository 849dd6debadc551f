/* Atomic whole-file writes and whole descriptor reads and writes (px_file.h). */
#include "px_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "px_err.h"

int px_file_write_atomic(const char *path, const void *header, size_t hlen, const void *data, size_t dlen,
                         const char *what, char *err, size_t errlen) {
    size_t plen = strlen(path) + 32;
    char *tmp = malloc(plen);
    if (!tmp) return px_err_set(err, errlen, "%s '%s': out of memory", what, path);
    snprintf(tmp, plen, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        px_err_set(err, errlen, "cannot create '%s': %s", tmp, strerror(errno));
        free(tmp);
        return -1;
    }
    int ok = fwrite(header, 1, hlen, f) == hlen && (dlen == 0 || fwrite(data, 1, dlen, f) == dlen) &&
             fflush(f) == 0 && fsync(fileno(f)) == 0;
    int saved_errno = errno;
    if (fclose(f) != 0) ok = 0;
    if (!ok || rename(tmp, path) != 0) {
        if (ok) saved_errno = errno;
        unlink(tmp);
        px_err_set(err, errlen, "cannot write %s '%s': %s", what, path, strerror(saved_errno));
        free(tmp);
        return -1;
    }
    free(tmp);
    return 0;
}

int px_mkdirs(const char *dir) {
    char p[4096];
    if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) return errno = ENAMETOOLONG, -1;
    for (char *s = p + 1; *s; s++) {
        if (*s != '/') continue;
        *s = 0;
        if (mkdir(p, 0755) != 0 && errno != EEXIST) return -1;
        *s = '/';
    }
    return mkdir(p, 0755) != 0 && errno != EEXIST ? -1 : 0;
}

int px_file_copy_atomic(const char *src, const char *dst, const char *what, char *err, size_t errlen) {
    FILE *f = fopen(src, "rb");
    if (!f) return px_err_set(err, errlen, "cannot read %s '%s': %s", what, src, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf && (n += fread(buf + n, 1, cap - n, f)) == cap) {
        char *b = realloc(buf, cap * 2);
        if (!b) free(buf);
        buf = b, cap *= 2;
    }
    int bad = !buf || ferror(f);
    fclose(f);
    int rc = bad ? px_err_set(err, errlen, "cannot read %s '%s'%s", what, src, buf ? "" : ": out of memory")
                 : px_file_write_atomic(dst, buf, n, NULL, 0, what, err, errlen);
    free(buf);
    return rc;
}

int px_fd_write_all(int fd, const void *buf, size_t len) {
    const char *p = buf;
    while (len) {
        ssize_t w = write(fd, p, len);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) return -1;
        if (w == 0) return errno = EIO, -1;
        p += w, len -= (size_t)w;
    }
    return 0;
}

ssize_t px_fd_read_full(int fd, void *buf, size_t len) {
    char *p = buf;
    size_t got = 0;
    while (got < len) {
        ssize_t r = read(fd, p + got, len - got);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) return -1;
        if (r == 0) break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}
