/* An append-only JSONL file written in fsynced batches: the file sink of the
 * event log and the storage under the Kafka spill.
 *
 * Each line is handed to write() at once, so a coordinator that is killed
 * loses nothing already emitted; fsync runs in batches (N lines or T ms, and
 * on close), so a power loss costs at most one batch and the loop does not pay
 * one fsync per event. When the disk refuses a write (full, I/O error) the
 * bytes wait in memory, in order, and are retried on the next poll; only past
 * PX_APPENDER_MAX_BUFFERED is a line refused, and that is counted and logged,
 * never silent. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "events_int.h"
#include "px_log.h"
#include "px_time.h"

static void log_failure(px_appender_t *a, const char *what, int e) {
    a->failures++;
    int64_t now = px_now_ms();
    if (now - a->last_err_log_ms < 1000) return; /* one line a second is enough to see it */
    a->last_err_log_ms = now;
    px_log_error("events_io_failed op=%s path=%s error=\"%s\" failures=%llu buffered_bytes=%zu",
                 what, a->path, strerror(e), (unsigned long long)a->failures, a->len);
}

int px_appender_open(px_appender_t *a, const char *path, char *err, size_t errlen) {
    memset(a, 0, sizeof *a);
    a->fd = -1;
    if (snprintf(a->path, sizeof a->path, "%s", path) >= (int)sizeof a->path) {
        snprintf(err, errlen, "path too long: '%s'", path);
        return -1;
    }
    a->fd = open(path, O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (a->fd < 0) {
        snprintf(err, errlen, "cannot open '%s': %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(a->fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "'%s' is not a regular file", path);
        close(a->fd);
        a->fd = -1;
        return -1;
    }
    a->size = (int64_t)st.st_size;
    return 0;
}

/* Writes as much of p[0..len) as the file takes; returns bytes written. */
static size_t write_some(px_appender_t *a, const char *p, size_t len) {
    size_t done = 0;
    while (done < len) {
        ssize_t w = write(a->fd, p + done, len - done);
        if (w < 0) {
            if (errno == EINTR) continue;
            log_failure(a, "write", errno);
            break;
        }
        done += (size_t)w;
    }
    a->size += (int64_t)done;
    return done;
}

static int buffer_bytes(px_appender_t *a, const char *p, size_t len) {
    if (a->len + len > PX_APPENDER_MAX_BUFFERED) return -1;
    if (a->len + len > a->cap) {
        size_t cap = a->cap ? a->cap : 4096;
        while (cap < a->len + len) cap *= 2;
        char *nb = realloc(a->buf, cap);
        if (!nb) return -1;
        a->buf = nb;
        a->cap = cap;
    }
    memcpy(a->buf + a->len, p, len);
    a->len += len;
    return 0;
}

int px_appender_write_buffered(px_appender_t *a) {
    if (a->len == 0) return 0;
    size_t w = write_some(a, a->buf, a->len);
    memmove(a->buf, a->buf + w, a->len - w);
    a->len -= w;
    return a->len == 0 ? 0 : -1;
}

int px_appender_append(px_appender_t *a, const char *line, size_t len) {
    if (a->len + len > PX_APPENDER_MAX_BUFFERED) {
        a->failures++;
        px_log_error("events_line_refused path=%s reason=\"disk refuses writes and %u MiB are "
                     "already waiting in memory\" line=%.200s",
                     a->path, PX_APPENDER_MAX_BUFFERED >> 20, line);
        return -1;
    }
    /* Bytes already waiting go first, or lines would change order. */
    size_t w = (a->len == 0) ? write_some(a, line, len) : 0;
    if (w < len && buffer_bytes(a, line + w, len - w) != 0) {
        a->failures++;
        px_log_error("events_line_refused path=%s reason=\"out of memory\" line=%.200s", a->path,
                     line);
        return -1;
    }
    if (a->unsynced++ == 0) a->first_unsynced_ms = px_now_ms();
    return 0;
}

static uint64_t count_lines(const char *p, size_t len) {
    uint64_t n = 0;
    for (size_t i = 0; i < len; i++) n += (p[i] == '\n');
    return n;
}

int64_t px_appender_sync(px_appender_t *a) {
    if (a->fd < 0 || a->unsynced == 0) return 0;
    px_appender_write_buffered(a);
    uint64_t waiting = count_lines(a->buf, a->len);
    if (waiting >= a->unsynced) return 0; /* nothing new reached the file */
    if (fdatasync(a->fd) != 0) {
        log_failure(a, "fsync", errno);
        return -1;
    }
    uint64_t durable = a->unsynced - waiting;
    a->unsynced = waiting;
    if (waiting) a->first_unsynced_ms = px_now_ms();
    return (int64_t)durable;
}

int64_t px_appender_maybe_sync(px_appender_t *a, uint64_t batch_lines, int batch_ms) {
    if (a->unsynced == 0) return 0;
    if (a->unsynced < batch_lines && px_now_ms() - a->first_unsynced_ms < batch_ms) return 0;
    return px_appender_sync(a);
}

void px_appender_close(px_appender_t *a) {
    if (a->fd >= 0) {
        px_appender_sync(a);
        if (a->len) {
            px_log_error("events_lines_lost path=%s bytes=%zu reason=\"the disk kept refusing "
                         "writes until close\"",
                         a->path, a->len);
            a->failures++;
        }
        close(a->fd);
    }
    free(a->buf);
    memset(a, 0, sizeof *a);
    a->fd = -1;
}
