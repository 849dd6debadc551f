/* Directory-backed rendezvous store (see px_dir_store.h for the design). */
#include "px_dir_store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "px_file.h"
#include "px_time.h"

static int mkdir_p(const char *dir) {
    char tmp[256];
    snprintf(tmp, sizeof(tmp), "%s", dir);
    for (char *p = tmp + 1; *p; p++) {
        if (*p != '/') continue;
        *p = '\0';
        if (mkdir(tmp, 0700) != 0 && errno != EEXIST) return -1;
        *p = '/';
    }
    return (mkdir(tmp, 0700) != 0 && errno != EEXIST) ? -1 : 0;
}

int px_dir_store_init(px_dir_store_t *s, const char *dir) {
    if (snprintf(s->dir, sizeof(s->dir), "%s", dir) >= (int)sizeof(s->dir)) return -1;
    return mkdir_p(s->dir);
}

/* dir/escaped-key: letters, digits, '-', '_' and '.' stay; the rest is %XX. */
static int key_path(const px_dir_store_t *s, const char *key, char *path, size_t cap) {
    size_t n = (size_t)snprintf(path, cap, "%s/k_", s->dir);
    for (const unsigned char *k = (const unsigned char *)key; *k; k++) {
        if (n + 4 >= cap) return -1;
        if ((*k >= 'a' && *k <= 'z') || (*k >= 'A' && *k <= 'Z') || (*k >= '0' && *k <= '9') ||
            *k == '-' || *k == '_' || *k == '.')
            path[n++] = (char)*k;
        else
            n += (size_t)snprintf(path + n, cap - n, "%%%02X", *k);
    }
    path[n] = '\0';
    return 0;
}

static int dir_set(void *ctx, const char *key, const void *value, size_t len) {
    px_dir_store_t *s = ctx;
    char path[1024], tmp[1100];
    static unsigned counter;
    unsigned id = __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED);
    if (key_path(s, key, path, sizeof(path)) != 0) return -1;
    snprintf(tmp, sizeof(tmp), "%s/t_%d_%u", s->dir, (int)getpid(), id);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return -1;
    int rc = px_fd_write_all(fd, value, len);
    if (close(fd) != 0) rc = -1;
    if (rc == 0) rc = rename(tmp, path);
    if (rc != 0) unlink(tmp);
    return rc == 0 ? 0 : -1;
}

/* One attempt: 0 found, 1 absent, -1 error. */
static int try_read(const char *path, void *buf, size_t cap, size_t *len) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return errno == ENOENT ? 1 : -1;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return -1;
    }
    *len = (size_t)st.st_size;
    size_t want = *len < cap ? *len : cap;
    ssize_t got = px_fd_read_full(fd, buf, want);
    close(fd);
    return got == (ssize_t)want ? 0 : -1;
}

static int dir_get(void *ctx, const char *key, void *buf, size_t cap, size_t *len,
                   int timeout_ms) {
    px_dir_store_t *s = ctx;
    char path[1024];
    if (key_path(s, key, path, sizeof(path)) != 0) return -1;
    const int64_t deadline = px_now_ms() + timeout_ms;
    int64_t pause = 1;
    for (;;) {
        int rc = try_read(path, buf, cap, len);
        if (rc != 1) return rc;
        if (px_now_ms() >= deadline) return 1;
        px_sleep_ms(pause);
        if (pause < 5) pause++;
    }
}

px_store_t px_dir_store(px_dir_store_t *s) {
    px_store_t st = {s, dir_set, dir_get};
    return st;
}

void px_dir_store_remove(px_dir_store_t *s) {
    DIR *d = opendir(s->dir);
    if (!d) return;
    struct dirent *e;
    char path[1400];
    while ((e = readdir(d)) != NULL) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(path, sizeof(path), "%s/%s", s->dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    rmdir(s->dir);
}
