/* Checkpoints on disk: writing one atomically, verifying and loading one,
 * listing, restoring the newest that loads, and retention (see ckpt.h). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ckpt.h"
#include "ckpt_int.h"
#include "px_err.h"
#include "px_file.h"
#include "px_time.h"

#define IO_BLOCK ((size_t)16 << 20) /* bytes per read or write call */
#define LOAD_THREADS 4               /* data files a load reads at once, at most */
#define DATA_PREFIX "data" /* a whole write's files: data00000.bin, ... */

void px_ckpt_path(const char *dir, int64_t step, char *out, size_t len) {
    snprintf(out, len, "%s/step_%08lld", dir, (long long)step);
}

/* ---- small file-system helpers ------------------------------------------ */

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)ftw;
    return (flag == FTW_DP ? rmdir(path) : unlink(path)) != 0 && errno != ENOENT ? -1 : 0;
}

static void rm_rf(const char *path) { nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS); }

static int fsync_path(const char *path) {
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}


/* ---- writing ------------------------------------------------------------- */

/* Data files are written around the page cache (O_DIRECT) where the file
 * system takes it: the kernel then neither copies the bytes into its cache
 * nor spends a writeback thread's CPU on them, the saver's cost that slows
 * training on the cores it fills (docs/benchmarks.md, "Checkpoints": 2.1 s
 * of CPU buffered against 0.45 s direct for a 1.5 GB state). O_DIRECT
 * wants aligned memory, lengths and file offsets, so the bytes pass through
 * one aligned buffer of IO_BLOCK bytes, and the file's last partial block
 * is written after O_DIRECT is turned off. Where open refuses O_DIRECT
 * (tmpfs), or PX_CKPT_DIRECT=0, writes go through the cache as before. */
#define DIRECT_ALIGN ((size_t)4096)

typedef struct {
    int fd, direct;
    char *buf; /* IO_BLOCK bytes, DIRECT_ALIGN-aligned: direct writes only */
    size_t used;
    double rate;   /* bytes a second the writes are paced to (0: none; px_ckpt_meta_t's write_mb_s) */
    int64_t t0_us; /* pacing: when the first byte came */
    uint64_t sent; /* pacing: bytes handed over since */
} writer_t;

static int writer_open(writer_t *w, const char *path, double rate) {
    const char *env = getenv("PX_CKPT_DIRECT");
    memset(w, 0, sizeof *w);
    w->fd = -1;
    w->rate = rate;
    w->t0_us = px_now_us();
    if (!env || strcmp(env, "0")) {
        w->buf = aligned_alloc(DIRECT_ALIGN, IO_BLOCK);
        if (w->buf) w->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0644);
        w->direct = w->fd >= 0;
    }
    if (w->fd < 0) w->fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    return w->fd < 0 ? -1 : 0;
}

/* From here on through the page cache. */
static int writer_buffered(writer_t *w) {
    int fl = fcntl(w->fd, F_GETFL);
    if (fl < 0 || fcntl(w->fd, F_SETFL, fl & ~O_DIRECT) != 0) return -1;
    w->direct = 0;
    return 0;
}

/* len bytes of aligned memory out. Near a file size limit the kernel cuts
 * a write to an unaligned length, which O_DIRECT refuses (EINVAL), and a
 * short write (a full disk) leaves the offset unaligned for the next: in
 * both cases the rest goes through the cache and meets the real error. */
static int write_direct(writer_t *w, const char *p, size_t len) {
    while (len) {
        ssize_t n = write(w->fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0 && errno == EINVAL) return writer_buffered(w) != 0 ? -1 : px_fd_write_all(w->fd, p, len);
        if (n < 0) return -1;
        if (n == 0) return errno = EIO, -1;
        p += n, len -= (size_t)n;
        if (len && (size_t)n % DIRECT_ALIGN) return writer_buffered(w) != 0 ? -1 : px_fd_write_all(w->fd, p, len);
    }
    return 0;
}

/* The buffer's whole blocks out, direct; with last, the rest too, buffered. */
static int writer_flush(writer_t *w, int last) {
    size_t whole = w->direct ? w->used / DIRECT_ALIGN * DIRECT_ALIGN : w->used;
    if (whole && (w->direct ? write_direct(w, w->buf, whole) : px_fd_write_all(w->fd, w->buf, whole)) != 0) return -1;
    memmove(w->buf, w->buf + whole, w->used - whole);
    w->used -= whole;
    if (!last || !w->used) return 0;
    int rc = writer_buffered(w) != 0 ? -1 : px_fd_write_all(w->fd, w->buf, w->used);
    w->used = 0;
    return rc;
}

/* Bytes go to the disk straight from p, whole blocks of them, when p lines
 * up with the file (its address and its file offset equal modulo
 * DIRECT_ALIGN: a state from px_state_alloc_like written whole does), and
 * through the aligned buffer otherwise: a copy of every byte that lines
 * up saved. Bytes are copied into the buffer up to the point where the
 * source and the file line up, if they ever do. */
static int writer_put(writer_t *w, const char *p, size_t len) {
    if (!w->direct && w->used && writer_flush(w, 0) != 0) return -1; /* turned buffered with bytes held */
    if (!w->direct) return px_fd_write_all(w->fd, p, len);
    while (len) {
        size_t mis = (size_t)((DIRECT_ALIGN - (uintptr_t)p % DIRECT_ALIGN) % DIRECT_ALIGN);
        if (w->used == 0 && mis == 0 && len >= DIRECT_ALIGN) {
            size_t whole = len / DIRECT_ALIGN * DIRECT_ALIGN;
            if (write_direct(w, p, whole) != 0) return -1;
            p += whole, len -= whole;
            if (!w->direct) return px_fd_write_all(w->fd, p, len); /* turned buffered on the way */
            continue;
        }
        size_t take = IO_BLOCK - w->used < len ? IO_BLOCK - w->used : len;
        int lines_up = mis && (w->used + mis) % DIRECT_ALIGN == 0 && mis < take;
        if (lines_up) take = mis;
        memcpy(w->buf + w->used, p, take);
        w->used += take, p += take, len -= take;
        if ((w->used == IO_BLOCK || lines_up) && writer_flush(w, 0) != 0) return -1;
    }
    return 0;
}

/* With a rate: sleeps until the bytes handed over so far have taken their
 * time at it, as on a disk of that speed. */
static void writer_pace(writer_t *w, size_t len) {
    if (w->rate <= 0) return;
    w->sent += len;
    int64_t due = w->t0_us + (int64_t)((double)w->sent / w->rate * 1e6), now = px_now_us();
    if (due > now) px_sleep_ms((int)((due - now + 999) / 1000));
}

/* Flushes, syncs and closes: 0, or -1 with errno. */
static int writer_close(writer_t *w) {
    int rc = w->used ? writer_flush(w, 1) : 0;
    if (rc == 0) rc = fsync(w->fd);
    int e = errno;
    if (close(w->fd) != 0 && rc == 0) rc = -1, e = errno;
    free(w->buf);
    errno = e;
    return rc;
}

/* A run of bytes of a state's buffer, to be written next. */
typedef struct {
    const char *p;
    size_t len;
} seg_t;

/* The segments, in order, into one file; hashed on the way (XXH3-64 into
 * *hash), or with `known` given, written in one call each and *hash = *known. */
static int write_segs(const char *path, const seg_t *segs, size_t nsegs, const uint64_t *known, double rate,
                      uint64_t *bytes, uint64_t *hash, char *err, size_t errlen) {
    writer_t w;
    if (writer_open(&w, path, rate) != 0) {
        free(w.buf);
        return px_err_set(err, errlen, "creating %s: %s", path, strerror(errno));
    }
    XXH3_state_t *h = known ? NULL : XXH3_createState();
    if (!known && !h) {
        writer_close(&w);
        return px_err_set(err, errlen, "out of memory");
    }
    if (h) XXH3_64bits_reset(h);
    *bytes = 0;
    for (size_t k = 0; k < nsegs; k++) {
        const char *p = segs[k].p;
        size_t left = segs[k].len;
        while (left) {
            size_t len = (known && rate <= 0) || left < IO_BLOCK ? left : IO_BLOCK;
            if (writer_put(&w, p, len) != 0) {
                int e = errno;
                if (h) XXH3_freeState(h);
                writer_close(&w);
                return px_err_set(err, errlen, "writing %s: %s", path, strerror(e));
            }
            if (h) XXH3_64bits_update(h, p, len);
            writer_pace(&w, len);
            p += len, left -= len, *bytes += len;
        }
    }
    *hash = h ? XXH3_64bits_digest(h) : *known;
    if (h) XXH3_freeState(h);
    if (writer_close(&w) != 0) return px_err_set(err, errlen, "writing %s: %s", path, strerror(errno));
    return 0;
}

/* The runs (offset, count) of each of the state's s->nbuf buffers into one
 * file, in order, hashed on the way. */
static int write_runs(const char *path, const px_train_state_t *s, const size_t (*runs)[2], size_t nruns,
                      double rate, uint64_t *bytes, uint64_t *hash, char *err, size_t errlen) {
    size_t nsegs = (size_t)s->nbuf * nruns;
    seg_t *segs = malloc((nsegs ? nsegs : 1) * sizeof *segs);
    if (!segs) return px_err_set(err, errlen, "out of memory");
    for (size_t k = 0; k < nsegs; k++) {
        segs[k].p = (const char *)(s->buf[k / nruns] + runs[k % nruns][0]);
        segs[k].len = runs[k % nruns][1] * sizeof(float);
    }
    int rc = write_segs(path, segs, nsegs, NULL, rate, bytes, hash, err, errlen);
    free(segs);
    return rc;
}

static int write_text(const char *path, const char *text, char *err, size_t errlen) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return px_err_set(err, errlen, "creating %s: %s", path, strerror(errno));
    if (px_fd_write_all(fd, text, strlen(text)) != 0 || fsync(fd) != 0) {
        int e = errno;
        close(fd);
        return px_err_set(err, errlen, "writing %s: %s", path, strerror(e));
    }
    if (close(fd) != 0) return px_err_set(err, errlen, "writing %s: %s", path, strerror(errno));
    return 0;
}

/* Whether the checkpoint at path lists the same data files as m, byte
 * counts and checksums alike: another save of the same state. */
static int same_content(const char *path, const px_ckpt_manifest_t *m) {
    px_ckpt_manifest_t old;
    px_ckpt_fault_t f;
    if (px_ckpt_read_manifest(path, &old, &f) != 0) return 0;
    int same = old.step == m->step && old.nfiles == m->nfiles;
    for (int i = 0; same && i < m->nfiles; i++)
        same = old.files[i].bytes == m->files[i].bytes && old.files[i].xxh3 == m->files[i].xxh3 &&
               !strcmp(old.files[i].name, m->files[i].name);
    px_ckpt_manifest_free(&old);
    return same;
}

/* Renames tmp (manifest m) to final. An existing final that holds the same
 * bytes (the same state saved again: a stop right after a restore, a new
 * writer catching up) is replaced; one that differs (a copy restore could
 * not read, another writer's) is kept, moved aside as
 * step_N.replaced-<time>. Nothing that differs is deleted. */
static int publish(const char *dir, const char *tmp, const char *final, const px_ckpt_manifest_t *m, char *err,
                   size_t errlen) {
    if (rename(tmp, final) == 0) return 0;
    if (errno != ENOTEMPTY && errno != EEXIST) return px_err_set(err, errlen, "renaming %s: %s", tmp, strerror(errno));
    if (same_content(final, m)) {
        char old[4200], host[64] = "host";
        gethostname(host, sizeof host - 1);
        snprintf(old, sizeof old, "%s/.old-%s-%s-%d", dir, strrchr(final, '/') + 1, host, (int)getpid());
        if (rename(final, old) != 0 || rename(tmp, final) != 0)
            return px_err_set(err, errlen, "replacing %s: %s", final, strerror(errno));
        rm_rf(old);
        return 0;
    }
    if ((px_ckpt_move_aside(final, "replaced", 0, NULL, 0) != 0 && errno != ENOENT) || rename(tmp, final) != 0)
        return px_err_set(err, errlen, "replacing %s: %s", final, strerror(errno));
    return 0;
}

static int finish(const char *dir, const char *tmp, const char *final, px_ckpt_manifest_t *m,
                  const px_train_state_t *s, const px_ckpt_meta_t *meta, uint64_t bytes, int64_t t0,
                  px_ckpt_result_t *res, char *err, size_t errlen);

/* A state the format has tensors for: params, m, v and perhaps outer_m. */
static int nbuf_ok(const px_train_state_t *s, char *err, size_t errlen) {
    if (s->nbuf == PX_STATE_NBUF || s->nbuf == PX_STATE_MAXBUF) return 0;
    return px_err_set(err, errlen, "a state of %d buffers: a checkpoint holds %d or %d", s->nbuf, PX_STATE_NBUF,
                        PX_STATE_MAXBUF);
}

int px_ckpt_write(const char *dir, const px_train_state_t *s, const px_gpt_config_t *cfg, const px_ckpt_meta_t *meta,
                  px_ckpt_result_t *res, char *err, size_t errlen) {
    return px_ckpt_write_files(dir, s, cfg, meta, px_ckpt_part_floats(s->n), NULL, res, err, errlen);
}

int px_ckpt_write_files(const char *dir, const px_train_state_t *s, const px_gpt_config_t *cfg,
                        const px_ckpt_meta_t *meta, size_t part_floats, const uint64_t *hashes,
                        px_ckpt_result_t *res, char *err, size_t errlen) {
    int64_t t0 = px_now_us();
    memset(res, 0, sizeof *res);
    if (nbuf_ok(s, err, errlen) != 0) return -1;
    px_ckpt_manifest_t m;
    if (px_ckpt_manifest_whole(&m, cfg, s->nbuf, DATA_PREFIX, part_floats) != 0)
        return px_err_set(err, errlen, "out of memory, or parts of %zu floats are not usable", part_floats);
    uint64_t total = 0;
    for (int f = 0; f < m.nfiles; f++) total += m.files[f].bytes;
    if (total != px_state_bytes(s)) {
        px_ckpt_manifest_free(&m);
        return px_err_set(err, errlen, "state of %zu floats does not fit the model's %" PRIu64 " bytes", s->n, total);
    }
    if (px_mkdirs(dir) != 0) {
        px_ckpt_manifest_free(&m);
        return px_err_set(err, errlen, "creating the checkpoint folder %s: %s", dir, strerror(errno));
    }
    char host[64] = "host", tmp[4200], path[4300], final[4200];
    gethostname(host, sizeof host - 1);
    for (char *p = host; *p; p++)
        if (*p == '/' || *p == '.') *p = '_';
    px_ckpt_path(dir, s->step, final, sizeof final);
    snprintf(tmp, sizeof tmp, "%s/.tmp-%s-%s-%d", dir, strrchr(final, '/') + 1, host, (int)getpid());
    rm_rf(tmp); /* a leftover of an earlier attempt of this process */
    if (mkdir(tmp, 0755) != 0) {
        px_ckpt_manifest_free(&m);
        return px_err_set(err, errlen, "creating %s: %s", tmp, strerror(errno));
    }
    const int parts = m.nfiles / s->nbuf; /* file b * parts + k: part k of buffer b */
    for (int f = 0; f < m.nfiles; f++) {
        seg_t seg = {(const char *)(s->buf[f / parts] + (size_t)(f % parts) * part_floats), m.files[f].bytes};
        uint64_t bytes = 0;
        snprintf(path, sizeof path, "%s/%s", tmp, m.files[f].name);
        if (write_segs(path, &seg, 1, hashes ? &hashes[f] : NULL, meta->write_mb_s * 1e6, &bytes, &m.files[f].xxh3, err,
                       errlen) != 0) {
            rm_rf(tmp);
            px_ckpt_manifest_free(&m);
            return -1;
        }
    }
    int rc = finish(dir, tmp, final, &m, s, meta, total, t0, res, err, errlen);
    px_ckpt_manifest_free(&m);
    return rc;
}

/* The manifest m (files complete) with s's step and seed and meta, into
 * tmp; then tmp published as final. On failure before publishing, tmp is
 * removed. */
static int finish(const char *dir, const char *tmp, const char *final, px_ckpt_manifest_t *m,
                  const px_train_state_t *s, const px_ckpt_meta_t *meta, uint64_t bytes, int64_t t0,
                  px_ckpt_result_t *res, char *err, size_t errlen) {
    char path[4300], *text = NULL;
    snprintf(m->job, sizeof m->job, "%s", meta->job ? meta->job : "");
    m->step = s->step;
    m->quorum_id = meta->quorum_id;
    m->seed = s->seed;
    m->created_ms = (int64_t)time(NULL) * 1000;
    m->groups = meta->groups > 0 ? meta->groups : 1;
    m->ranks_per_group = meta->ranks_per_group > 0 ? meta->ranks_per_group : 1;
    if (meta->fsdp > 0) m->fsdp = meta->fsdp;
    if (meta->tp > 0) m->tp = meta->tp;
    if (meta->pp > 0) m->pp = meta->pp;
    snprintf(m->writer_group, sizeof m->writer_group, "%s", meta->writer_group ? meta->writer_group : "");
    m->has_schedule = meta->has_schedule;
    m->schedule = meta->schedule;
    if (!(text = px_ckpt_manifest_encode(m))) {
        px_err_set(err, errlen, "out of memory");
        goto bad;
    }
    snprintf(path, sizeof path, "%s/%s", tmp, PX_CKPT_MANIFEST);
    if (write_text(path, text, err, errlen) != 0) goto bad;
    if (fsync_path(tmp) != 0) {
        px_err_set(err, errlen, "syncing %s: %s", tmp, strerror(errno));
        goto bad;
    }
    if (publish(dir, tmp, final, m, err, errlen) != 0) goto bad;
    if (fsync_path(dir) != 0) {
        /* Published but perhaps not durable: say so, it is not an error a retry fixes. */
        px_err_set(err, errlen, "syncing %s: %s", dir, strerror(errno));
        free(text);
        return -1;
    }
    snprintf(res->path, sizeof res->path, "%s", final);
    res->bytes = bytes + strlen(text);
    res->seconds = (double)(px_now_us() - t0) / 1e6;
    free(text);
    return 0;
bad:
    rm_rf(tmp);
    free(text);
    return -1;
}

/* ---- a checkpoint in parts ------------------------------------------------------ */

/* Rank r's marker: "<bytes> <xxh3 hex>" once its file is durable. 1 read,
 * 0 not there yet, -1 unreadable. */
static int read_marker(const char *tmp, int r, uint64_t *bytes, uint64_t *hash) {
    char path[4300], text[64] = "";
    snprintf(path, sizeof path, "%s/rank%05d.done", tmp, r);
    FILE *f = fopen(path, "r");
    if (!f) return errno == ENOENT ? 0 : -1;
    int ok = fgets(text, sizeof text, f) != NULL;
    fclose(f);
    unsigned long long b, h;
    if (!ok || sscanf(text, "%llu %llx", &b, &h) != 2) return -1;
    *bytes = b;
    *hash = h;
    return 1;
}

int px_ckpt_write_part(const char *dir, const px_train_state_t *s, const px_ckpt_meta_t *meta,
                       const px_ckpt_part_t *part, px_ckpt_result_t *res, char *err, size_t errlen) {
    int64_t t0 = px_now_us();
    memset(res, 0, sizeof *res);
    if (nbuf_ok(s, err, errlen) != 0) return -1;
    if (part->plan && part->plan->outer_momentum != (s->nbuf == PX_STATE_MAXBUF))
        return px_err_set(err, errlen, "a state of %d buffers, a plan for %d", s->nbuf,
                            part->plan->outer_momentum ? PX_STATE_MAXBUF : PX_STATE_NBUF);
    if (px_mkdirs(dir) != 0) return px_err_set(err, errlen, "creating the checkpoint folder %s: %s", dir, strerror(errno));
    char tmp[4200], path[4300], done[4300], final[4200];
    px_ckpt_path(dir, s->step, final, sizeof final);
    snprintf(tmp, sizeof tmp, "%s/.tmp-%s-%s-q%lld", dir, strrchr(final, '/') + 1,
             meta->writer_group && meta->writer_group[0] ? meta->writer_group : "group", (long long)meta->quorum_id);
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST) return px_err_set(err, errlen, "creating %s: %s", tmp, strerror(errno));
    snprintf(path, sizeof path, "%s/rank%05d.bin", tmp, part->rank);
    uint64_t bytes = 0, hash = 0;
    if (write_runs(path, s, part->runs, part->nruns, meta->write_mb_s * 1e6, &bytes, &hash, err, errlen) != 0)
        return -1;
    char marker[64];
    snprintf(marker, sizeof marker, "%llu %016llx\n", (unsigned long long)bytes, (unsigned long long)hash);
    snprintf(path, sizeof path, "%s/rank%05d.part", tmp, part->rank);
    snprintf(done, sizeof done, "%s/rank%05d.done", tmp, part->rank);
    if (write_text(path, marker, err, errlen) != 0) return -1;
    if (rename(path, done) != 0) return px_err_set(err, errlen, "renaming %s: %s", path, strerror(errno));
    if (part->rank != 0) {
        snprintf(res->path, sizeof res->path, "%s", tmp);
        res->bytes = bytes;
        res->seconds = (double)(px_now_us() - t0) / 1e6;
        return 0;
    }
    /* rank 0: every part, then the manifest */
    px_ckpt_manifest_t m = *part->plan;
    m.files = calloc((size_t)m.nfiles, sizeof *m.files);
    if (!m.files) return px_err_set(err, errlen, "out of memory");
    memcpy(m.files, part->plan->files, (size_t)m.nfiles * sizeof *m.files);
    int rc = 0;
    uint64_t total = 0;
    int64_t deadline = px_now_ms() + part->wait_ms;
    for (int r = 0; rc == 0 && r < part->ranks; r++) {
        uint64_t b = 0, h = 0;
        int got;
        int cancelled = 0;
        while ((got = read_marker(tmp, r, &b, &h)) == 0 && px_now_ms() < deadline &&
               !(cancelled = part->cancel && __atomic_load_n(part->cancel, __ATOMIC_ACQUIRE)))
            px_sleep_ms(20);
        if (got != 1 && cancelled)
            rc = px_err_set(err, errlen, "rank %d's part had not arrived when the group lost a member", r);
        else if (got != 1)
            rc = px_err_set(err, errlen, got == 0 ? "rank %d's part did not arrive within %d ms" : "rank %d's marker is unreadable",
                              r, part->wait_ms);
        else if (r >= m.nfiles || b != m.files[r].bytes)
            rc = px_err_set(err, errlen, "rank %d wrote %llu bytes, the layout gives %llu", r, (unsigned long long)b,
                              r < m.nfiles ? (unsigned long long)m.files[r].bytes : 0ull);
        else
            m.files[r].xxh3 = h, total += b;
    }
    for (int r = 0; rc == 0 && r < part->ranks; r++) {
        snprintf(done, sizeof done, "%s/rank%05d.done", tmp, r);
        unlink(done);
    }
    /* a part that never came leaves the folder to retention: other ranks may still write in it */
    if (rc == 0) rc = finish(dir, tmp, final, &m, s, meta, total, t0, res, err, errlen);
    free(m.files);
    return rc;
}

/* ---- reading ------------------------------------------------------------- */

static int fault(px_ckpt_fault_t *f, const char *file, px_ckpt_fault_kind_t kind, const char *fmt, ...) {
    snprintf(f->file, sizeof f->file, "%s", file);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(f->fault, sizeof f->fault, fmt, ap);
    va_end(ap);
    f->kind = kind;
    return -1;
}

/* What an errno from opening or reading a checkpoint's file says of it:
 * gone or unreadable media is damage; permissions and exhausted resources
 * are the reader's trouble. */
static px_ckpt_fault_kind_t errno_kind(int e) {
    return e == ENOENT || e == ENOTDIR || e == EISDIR || e == EIO || e == ELOOP ? PX_CKPT_DAMAGED : PX_CKPT_UNAVAILABLE;
}

static int size_fault(px_ckpt_fault_t *f, const char *file, uint64_t size, uint64_t want) {
    return fault(f, file, PX_CKPT_DAMAGED, "%s: %" PRIu64 " bytes, the manifest says %" PRIu64,
                 size < want ? "short (torn or truncated)" : "too long", size, want);
}

static int step_of(const char *name, int64_t *step) {
    if (strncmp(name, "step_", 5) != 0 || !name[5]) return 0;
    int64_t v = 0;
    for (const char *p = name + 5; *p; p++) {
        if (*p < '0' || *p > '9' || v > ((int64_t)1 << 50)) return 0;
        v = v * 10 + (*p - '0');
    }
    *step = v;
    return 1;
}

int64_t px_ckpt_folder_step(const char *path) {
    char p[4200];
    snprintf(p, sizeof p, "%s", path);
    for (size_t n = strlen(p); n > 1 && p[n - 1] == '/'; n--) p[n - 1] = '\0';
    const char *base = strrchr(p, '/') ? strrchr(p, '/') + 1 : p;
    int64_t step;
    return step_of(base, &step) ? step : -1;
}

int px_ckpt_check_files(const char *path, const px_ckpt_manifest_t *m, px_ckpt_fault_t *f) {
    char file[4300];
    int64_t step = px_ckpt_folder_step(path);
    if (step >= 0 && step != m->step) {
        snprintf(file, sizeof file, "%s/%s", path, PX_CKPT_MANIFEST);
        return fault(f, file, PX_CKPT_DAMAGED, "says step %lld, its folder step %lld", (long long)m->step, (long long)step);
    }
    for (int i = 0; i < m->nfiles; i++) {
        snprintf(file, sizeof file, "%s/%s", path, m->files[i].name);
        struct stat st;
        if (stat(file, &st) != 0) return fault(f, file, errno_kind(errno), "missing or unreadable: %s", strerror(errno));
        if ((uint64_t)st.st_size != m->files[i].bytes) return size_fault(f, file, (uint64_t)st.st_size, m->files[i].bytes);
    }
    return 0;
}

/* Opens and reads the manifest; *fd_out keeps it open (and locked shared)
 * when not NULL. */
static int read_manifest_fd(const char *path, px_ckpt_manifest_t *m, px_ckpt_fault_t *f, int *fd_out) {
    char mpath[4200], err[512];
    snprintf(mpath, sizeof mpath, "%s/%s", path, PX_CKPT_MANIFEST);
    int fd = open(mpath, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return fault(f, mpath, errno_kind(errno), "cannot open: %s", strerror(errno));
    if (fd_out) flock(fd, LOCK_SH);
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size > PX_CKPT_MANIFEST_MAX) {
        close(fd);
        return fault(f, mpath, PX_CKPT_DAMAGED, "not a regular file of at most %zu bytes", PX_CKPT_MANIFEST_MAX);
    }
    char *text = malloc((size_t)st.st_size + 1);
    ssize_t got = text ? px_fd_read_full(fd, text, (size_t)st.st_size) : -1;
    if (got != st.st_size) {
        free(text);
        close(fd);
        return fault(f, mpath, got < 0 ? errno_kind(errno) : PX_CKPT_DAMAGED, "cannot read: %s",
                     got < 0 ? strerror(errno) : "short read");
    }
    int rc = px_ckpt_manifest_decode(text, (size_t)got, m, err, sizeof err);
    free(text);
    if (rc != 0) {
        close(fd);
        return fault(f, mpath, PX_CKPT_DAMAGED, "unparsable manifest: %s", err);
    }
    if (fd_out) *fd_out = fd;
    else close(fd);
    return 0;
}

int px_ckpt_read_manifest(const char *path, px_ckpt_manifest_t *m, px_ckpt_fault_t *f) {
    return read_manifest_fd(path, m, f, NULL);
}

/* A slice of tensor `tensor` and where it goes in the state (-1: nowhere). */
typedef struct {
    const px_ckpt_slice_t *s;
    int tensor;
    int logical;
} piece_t;

static int cmp_piece(const void *a, const void *b) {
    const piece_t *x = a, *y = b;
    return x->s->offset < y->s->offset ? -1 : x->s->offset > y->s->offset;
}

/* Copies a slice's values (row-major, count) into its place in a tensor of
 * shape `shape` that starts at dst. */
static void scatter(float *dst, int ndim, const int64_t *shape, const px_ckpt_slice_t *s, const float *src) {
    int64_t idx[PX_CKPT_MAX_DIMS] = {0}, stride[PX_CKPT_MAX_DIMS];
    stride[ndim - 1] = 1;
    for (int d = ndim - 2; d >= 0; d--) stride[d] = stride[d + 1] * shape[d + 1];
    int64_t row = s->count[ndim - 1], rows = 1;
    for (int d = 0; d < ndim - 1; d++) rows *= s->count[d];
    for (int64_t r = 0; r < rows && row > 0; r++) {
        int64_t off = 0;
        for (int d = 0; d < ndim; d++) off += (s->start[d] + idx[d]) * stride[d];
        memcpy(dst + off, src + r * row, (size_t)row * sizeof(float));
        for (int d = ndim - 2; d >= 0; d--) { /* odometer over the leading dimensions */
            if (++idx[d] < s->count[d]) break;
            idx[d] = 0;
        }
    }
}

/* Is the slice one contiguous range of its tensor (whole trailing rows)? */
static int contiguous(int ndim, const int64_t *shape, const px_ckpt_slice_t *s) {
    for (int d = 1; d < ndim; d++)
        if (s->start[d] != 0 || s->count[d] != shape[d]) return 0;
    return 1;
}

/* Reads and hashes file f of the manifest, placing what dst needs. */
static int load_file(const char *path, const px_ckpt_manifest_t *m, int f, piece_t *pieces, int npieces,
                     const px_ckpt_logical_t *lt, px_train_state_t *dst, const px_ckpt_sink_t *sink, char *buf,
                     px_ckpt_fault_t *fl) {
    char fpath[4300];
    snprintf(fpath, sizeof fpath, "%s/%s", path, m->files[f].name);
    int fd = open(fpath, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return fault(fl, fpath, errno_kind(errno), "missing or unreadable: %s", strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != m->files[f].bytes) { /* changed since the check */
        close(fd);
        return size_fault(fl, fpath, (uint64_t)st.st_size, m->files[f].bytes);
    }
    XXH3_state_t *h = XXH3_createState();
    XXH3_64bits_reset(h);
    int rc = 0;
    for (int i = 0; i < npieces && rc == 0; i++) {
        const px_ckpt_slice_t *s = pieces[i].s;
        const px_ckpt_tensor_t *t = &m->tensors[pieces[i].tensor];
        const px_ckpt_logical_t *l = pieces[i].logical >= 0 ? &lt[pieces[i].logical] : NULL;
        float *base = l && dst && !sink ? dst->buf[l->buffer] + l->offset : NULL;
        int to_sink = l && sink, direct = base && contiguous(t->ndim, t->shape, s);
        char *out = direct ? (char *)(base + s->start[0] * (px_ckpt_volume(t->ndim, t->shape) / (t->shape[0] ? t->shape[0] : 1)))
                           : NULL;
        /* Other slices are read whole, then scattered into place. */
        uint64_t left = s->bytes, done = 0;
        float *whole = NULL;
        if ((to_sink || (base && !direct)) && !(whole = malloc(s->bytes ? s->bytes : 1))) {
            rc = fault(fl, fpath, PX_CKPT_UNAVAILABLE, "out of memory");
            break;
        }
        while (left && rc == 0) {
            size_t len = left < IO_BLOCK ? (size_t)left : IO_BLOCK;
            char *p = direct ? out + done : whole ? (char *)whole + done : buf;
            ssize_t got = px_fd_read_full(fd, p, len);
            if (got != (ssize_t)len) {
                rc = fault(fl, fpath, got < 0 ? errno_kind(errno) : PX_CKPT_DAMAGED, "cannot read: %s",
                           got < 0 ? strerror(errno) : "short read");
                break;
            }
            XXH3_64bits_update(h, p, len);
            left -= len, done += len;
        }
        if (rc == 0 && to_sink) {
            if (sink->place(sink->ctx, l, s, whole) != 0) rc = fault(fl, fpath, PX_CKPT_UNAVAILABLE, "out of memory");
        } else if (rc == 0 && whole) {
            scatter(base, t->ndim, t->shape, s, whole);
        }
        free(whole);
    }
    uint64_t got = XXH3_64bits_digest(h);
    XXH3_freeState(h);
    close(fd);
    if (rc == 0 && got != m->files[f].xxh3)
        rc = fault(fl, fpath, PX_CKPT_DAMAGED, "checksum mismatch: xxh3_64 %016" PRIx64 ", the manifest says %016" PRIx64, got,
                   m->files[f].xxh3);
    return rc;
}

int px_ckpt_load(const char *path, const px_gpt_config_t *cfg, px_train_state_t *dst, px_ckpt_manifest_t *mout,
                 px_ckpt_fault_t *fl) {
    return px_ckpt_load_to(path, cfg, dst, NULL, mout, fl);
}

int px_ckpt_load_to(const char *path, const px_gpt_config_t *cfg, px_train_state_t *dst, const px_ckpt_sink_t *sink,
                    px_ckpt_manifest_t *mout, px_ckpt_fault_t *fl) {
    px_ckpt_manifest_t m;
    int lock_fd = -1;
    memset(fl, 0, sizeof *fl);
    if (read_manifest_fd(path, &m, fl, &lock_fd) != 0) return -1;
    char mpath[4200], err[512];
    snprintf(mpath, sizeof mpath, "%s/%s", path, PX_CKPT_MANIFEST);
    int rc = 0, nlog = 0;
    px_ckpt_logical_t *lt = NULL;
    int *logical = NULL; /* per manifest tensor: its logical tensor in dst, or -1 */
    if (cfg && px_ckpt_manifest_matches(&m, cfg, err, sizeof err) != 0) {
        rc = fault(fl, mpath, PX_CKPT_MISMATCH, "%s", err);
        goto out;
    }
    if ((rc = px_ckpt_check_files(path, &m, fl)) != 0) goto out;
    if (dst && dst->nbuf != PX_STATE_NBUF && dst->nbuf != PX_STATE_MAXBUF) {
        rc = fault(fl, path, PX_CKPT_MISMATCH, "cannot load into a state of %d buffers (%d or %d)", dst->nbuf, PX_STATE_NBUF,
                   PX_STATE_MAXBUF);
        goto out;
    }
    if (dst) { /* what is placed: the outer momentum only where both have it; the rest is read and verified */
        int nbuf = dst->nbuf == PX_STATE_MAXBUF && m.outer_momentum ? PX_STATE_MAXBUF : PX_STATE_NBUF;
        nlog = px_ckpt_logical_tensors(cfg ? cfg : &m.model, nbuf, NULL);
        lt = calloc((size_t)nlog, sizeof *lt);
        if (lt) px_ckpt_logical_tensors(cfg ? cfg : &m.model, nbuf, lt);
    }
    int total = 0;
    for (int i = 0; i < m.ntensors; i++) total += m.tensors[i].nslices;
    logical = malloc((size_t)m.ntensors * sizeof *logical);
    if (!logical || (dst && !lt)) {
        rc = fault(fl, path, PX_CKPT_UNAVAILABLE, "out of memory");
        goto out;
    }
    if (dst) {
        size_t sizes[PX_GPT_NUM_TENSORS];
        size_t n = px_gpt_tensor_sizes(&m.model, sizes);
        if (n != dst->n) {
            rc = fault(fl, mpath, PX_CKPT_MISMATCH, "the checkpoint's model has %zu parameters, this one %zu", n, dst->n);
            goto out;
        }
    }
    for (int i = 0; i < m.ntensors; i++) {
        logical[i] = -1;
        for (int k = 0; k < nlog && logical[i] < 0; k++)
            if (!strcmp(lt[k].name, m.tensors[i].name)) logical[i] = k;
    }
    /* Files are independent: read and verify several at once (the disk gets
     * a deeper queue, the hashing overlaps the reads), each into its own
     * slices of dst; a sink may not be called from several threads. The
     * fault reported is the first file's that failed; files after it are
     * not read. Nothing is kept per file: a forged manifest may list a
     * million. */
    int threads = sink || m.nfiles < 2 ? 1 : omp_get_max_threads();
    threads = threads > LOAD_THREADS ? LOAD_THREADS : threads;
    int bad = -1; /* the lowest file that failed: files after it are not read */
#pragma omp parallel num_threads(threads)
    {
        char *tbuf = malloc(IO_BLOCK);
        piece_t *tp = malloc((size_t)(total ? total : 1) * sizeof *tp);
        px_ckpt_fault_t mine;
#pragma omp for schedule(dynamic, 1)
        for (int f = 0; f < m.nfiles; f++) {
            int first_bad = __atomic_load_n(&bad, __ATOMIC_RELAXED);
            if (first_bad >= 0 && f > first_bad) continue;
            int frc;
            if (!tbuf || !tp) {
                frc = fault(&mine, path, PX_CKPT_UNAVAILABLE, "out of memory");
            } else {
                int np = 0;
                for (int i = 0; i < m.ntensors; i++)
                    for (int j = 0; j < m.tensors[i].nslices; j++)
                        if (m.tensors[i].slices[j].file == f) tp[np++] = (piece_t){&m.tensors[i].slices[j], i, logical[i]};
                qsort(tp, (size_t)np, sizeof *tp, cmp_piece);
                frc = load_file(path, &m, f, tp, np, lt, dst, sink, tbuf, &mine);
            }
            if (frc != 0) {
#pragma omp critical(px_ckpt_load_fault)
                if (bad < 0 || f < bad) {
                    __atomic_store_n(&bad, f, __ATOMIC_RELAXED);
                    *fl = mine;
                }
            }
        }
        free(tbuf);
        free(tp);
    }
    if (bad >= 0) rc = -1;
    if (rc == 0 && dst) {
        dst->step = m.step;
        dst->seed = m.seed;
        /* a synchronous job's checkpoint into a DiLoCo state: no outer step was taken yet */
        if (dst->nbuf == PX_STATE_MAXBUF && !m.outer_momentum && !sink)
            memset(dst->buf[PX_STATE_OUTER_M], 0, dst->n * sizeof(float));
    }
out:
    free(logical);
    free(lt);
    if (lock_fd >= 0) close(lock_fd);
    if (rc == 0 && mout) *mout = m;
    else px_ckpt_manifest_free(&m);
    return rc;
}

/* ---- listing, restore, retention ----------------------------------------- */

static int cmp_desc(const void *a, const void *b) {
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

int px_ckpt_list(const char *dir, int64_t **steps) {
    *steps = NULL;
    DIR *d = opendir(dir);
    if (!d) return errno == ENOENT ? 0 : -1;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        int64_t s;
        if (!step_of(e->d_name, &s)) continue;
        if (n == cap) {
            int64_t *p = realloc(*steps, (size_t)(cap = cap ? cap * 2 : 16) * sizeof *p);
            if (!p) {
                closedir(d);
                free(*steps);
                *steps = NULL;
                return -1;
            }
            *steps = p;
        }
        (*steps)[n++] = s;
    }
    closedir(d);
    qsort(*steps, (size_t)n, sizeof **steps, cmp_desc);
    return n;
}

int64_t px_ckpt_restore_newest(const char *dir, const px_gpt_config_t *cfg, const char *job, uint64_t seed,
                               px_train_state_t *dst, px_ckpt_reject_fn on_reject, void *ctx) {
    return px_ckpt_restore_newest_to(dir, cfg, job, seed, dst, NULL, NULL, on_reject, ctx);
}

int64_t px_ckpt_restore_newest_to(const char *dir, const px_gpt_config_t *cfg, const char *job, uint64_t seed,
                                  px_train_state_t *dst, const px_ckpt_sink_t *sink, px_ckpt_manifest_t *mout,
                                  px_ckpt_reject_fn on_reject, void *ctx) {
    int64_t *steps;
    int n = px_ckpt_list(dir, &steps);
    int mismatches = 0;
    int64_t restored = -1;
    for (int i = 0; i < n && restored < 0; i++) {
        char path[4200];
        px_ckpt_path(dir, steps[i], path, sizeof path);
        px_ckpt_manifest_t m;
        px_ckpt_fault_t f;
        memset(&f, 0, sizeof f);
        int rc = px_ckpt_read_manifest(path, &m, &f);
        if (rc == 0) {
            char mpath[4300];
            snprintf(mpath, sizeof mpath, "%s/%s", path, PX_CKPT_MANIFEST);
            if (job && job[0] && m.job[0] && strcmp(job, m.job))
                rc = fault(&f, mpath, PX_CKPT_MISMATCH, "written by job \"%s\", this is job \"%s\"", m.job, job);
            else if (m.seed != seed)
                rc = fault(&f, mpath, PX_CKPT_MISMATCH, "written with seed %" PRIu64 ", this job's is %" PRIu64
                           " (the data order would differ)", m.seed, seed);
            px_ckpt_manifest_free(&m);
        }
        if (rc == 0) rc = px_ckpt_load_to(path, cfg, dst, sink, mout, &f);
        if (rc == 0) {
            restored = steps[i];
            break;
        }
        struct stat st;
        if (f.kind == PX_CKPT_DAMAGED && stat(path, &st) != 0 && errno == ENOENT)
            continue; /* moved away while being read (by another reader that found it damaged) */
        mismatches += f.kind == PX_CKPT_MISMATCH;
        if (on_reject) on_reject(ctx, path, &f);
    }
    free(steps);
    if (restored >= 0) return restored;
    return mismatches ? -2 : -1;
}

int px_ckpt_move_aside(const char *path, const char *why, int unless_read, char *moved, size_t len) {
    char stamp[32], to[4300];
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(stamp, sizeof stamp, "%Y%m%dT%H%M%SZ", &tm);
    int fd = -1;
    if (unless_read) { /* readers hold the manifest shared (px_ckpt_load_to) */
        snprintf(to, sizeof to, "%s/%s", path, PX_CKPT_MANIFEST);
        fd = open(to, O_RDONLY | O_CLOEXEC);
        if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) != 0) {
            close(fd);
            errno = EBUSY;
            return -1;
        }
    }
    int rc = -1, e = EEXIST;
    for (int n = 1; n < 100; n++) {
        if (n == 1) snprintf(to, sizeof to, "%s.%s-%s", path, why, stamp);
        else snprintf(to, sizeof to, "%s.%s-%s-%d", path, why, stamp, n);
        struct stat st;
        if (lstat(to, &st) == 0) continue; /* never onto another: rename would replace an empty one */
        rc = rename(path, to);
        e = errno;
        break;
    }
    if (fd >= 0) close(fd);
    if (rc != 0) {
        errno = e;
        return -1;
    }
    char *slash = strrchr(to, '/');
    if (slash && slash != to) { /* the rename survives a crash */
        *slash = '\0';
        fsync_path(to);
        *slash = '/';
    }
    if (moved) snprintf(moved, len, "%s", to);
    return 0;
}

int px_ckpt_count_aside(const char *dir, const char *why) {
    DIR *d = opendir(dir);
    if (!d) return 0;
    char mark[64];
    snprintf(mark, sizeof mark, ".%s-", why);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *dot = strchr(e->d_name, '.');
        int64_t s;
        char stem[64];
        size_t k = dot ? (size_t)(dot - e->d_name) : 0;
        if (!dot || k >= sizeof stem || strncmp(dot, mark, strlen(mark)) != 0) continue;
        memcpy(stem, e->d_name, k);
        stem[k] = '\0';
        n += step_of(stem, &s);
    }
    closedir(d);
    return n;
}

static int aside_name(const char *name) {
    return !strncmp(name, ".tmp-", 5) || !strncmp(name, ".trash-", 7) || !strncmp(name, ".old-", 5);
}

/* Newest modification time of a folder and what is directly in it. */
static time_t newest_mtime(const char *path) {
    struct stat st;
    time_t t = stat(path, &st) == 0 ? st.st_mtime : 0;
    DIR *d = opendir(path);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        char p[4700];
        snprintf(p, sizeof p, "%s/%s", path, e->d_name);
        if (stat(p, &st) == 0 && st.st_mtime > t) t = st.st_mtime;
    }
    if (d) closedir(d);
    return t;
}

int px_ckpt_retain(const char *dir, int keep, int64_t protect) {
    int deleted = 0;
    char host[64] = "host";
    gethostname(host, sizeof host - 1);
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && (e = readdir(d))) { /* leftovers of writers and deleters that died */
        if (!aside_name(e->d_name)) continue;
        char p[4400];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        time_t age = time(NULL) - newest_mtime(p);
        if (age > (e->d_name[1] == 't' && e->d_name[2] == 'm' ? 3600 : 60)) rm_rf(p);
    }
    if (d) closedir(d);
    if (keep <= 0) return 0;
    int64_t *steps;
    int n = px_ckpt_list(dir, &steps);
    for (int i = keep; i < n; i++) {
        if (steps[i] == protect) continue;
        char path[4200], mpath[4300], trash[4400];
        px_ckpt_path(dir, steps[i], path, sizeof path);
        snprintf(mpath, sizeof mpath, "%s/%s", path, PX_CKPT_MANIFEST);
        int fd = open(mpath, O_RDONLY | O_CLOEXEC);
        if (fd >= 0 && flock(fd, LOCK_EX | LOCK_NB) != 0) { /* a reader has it */
            close(fd);
            continue;
        }
        snprintf(trash, sizeof trash, "%s/.trash-step_%08lld-%s-%d", dir, (long long)steps[i], host, (int)getpid());
        int moved = rename(path, trash) == 0;
        if (fd >= 0) close(fd);
        if (moved) {
            rm_rf(trash);
            deleted++;
        }
    }
    free(steps);
    if (deleted) fsync_path(dir);
    return deleted;
}
