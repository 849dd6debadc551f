/* An append-only JSONL file written in fsynced batches: the file sink of the
 * event log and the storage under the Kafka spill.
 *
 * Each line is handed to write() at once, so a coordinator that is killed
 * loses nothing already emitted; fsync runs in batches (N lines or T ms, and
 * on close), so a power loss costs at most one batch and the loop does not pay
 * one fsync per event. The fdatasync itself runs on the event log's sync
 * thread (events_sync.c): the loop only starts a batch's sync and, on a later
 * turn, collects its result, so a slow disk never stalls it. While a sync is
 * in flight new lines keep being written; the next sync covers all of them
 * (group commit). When the disk refuses a write (full, I/O error) the bytes
 * wait in memory, in order, and are retried on the next poll; only past
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

int px_appender_open(px_appender_t *a, const char *path, px_syncer_t *syncer, char *err, size_t errlen) {
    memset(a, 0, sizeof *a);
    a->fd = -1;
    a->syncer = syncer;
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
    if (a->unsynced++ == a->sync_lines) a->first_unsynced_ms = px_now_ms(); /* first not covered */
    return 0;
}

static uint64_t count_lines(const char *p, size_t len) {
    uint64_t n = 0;
    for (size_t i = 0; i < len; i++) n += (p[i] == '\n');
    return n;
}

/* Collects the sync in flight (waiting for it when `wait`): the lines it
 * covered are durable. Same return as px_appender_maybe_sync. */
static int64_t finish_sync(px_appender_t *a, int wait) {
    if (!a->syncing || !px_syncer_collect(a->syncer, &a->req, wait)) return 0;
    a->syncing = 0;
    uint64_t covered = a->sync_lines;
    a->sync_lines = 0;
    if (a->req.err) {
        log_failure(a, "fsync", a->req.err);
        return -1; /* those lines stay pending: the next batch retries them */
    }
    if (covered > a->unsynced) covered = a->unsynced; /* the file was emptied meanwhile */
    a->unsynced -= covered;
    return (int64_t)covered;
}

/* Starts a sync of every line that reached the file. 1 when one started. */
static int start_sync(px_appender_t *a) {
    if (a->fd < 0 || a->syncing || a->unsynced == 0) return 0;
    px_appender_write_buffered(a);
    uint64_t waiting = count_lines(a->buf, a->len);
    if (waiting >= a->unsynced) return 0; /* nothing new reached the file */
    a->sync_lines = a->unsynced - waiting;
    a->syncing = 1;
    px_syncer_submit(a->syncer, &a->req, a->fd);
    return 1;
}

int64_t px_appender_sync(px_appender_t *a) {
    int64_t before = finish_sync(a, 1);
    int64_t now = start_sync(a) ? finish_sync(a, 1) : 0;
    if (a->unsynced > 0) a->first_unsynced_ms = px_now_ms();
    int64_t durable = (before > 0 ? before : 0) + (now > 0 ? now : 0);
    return durable > 0 ? durable : (before < 0 || now < 0) ? -1 : 0;
}

int64_t px_appender_maybe_sync(px_appender_t *a, uint64_t batch_lines, int batch_ms) {
    int64_t done = finish_sync(a, 0);
    if (a->syncing || a->unsynced == 0) return done;
    if (a->unsynced >= batch_lines || px_now_ms() - a->first_unsynced_ms >= batch_ms) start_sync(a);
    return done;
}

int px_appender_truncate(px_appender_t *a) {
    if (ftruncate(a->fd, 0) != 0) return -1;
    a->size = 0;
    a->unsynced = 0;
    a->sync_lines = 0; /* a sync in flight now makes nothing durable */
    return 0;
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
