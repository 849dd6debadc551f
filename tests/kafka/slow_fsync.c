/* A slow disk for tests, loaded with LD_PRELOAD into a real process:
 * fsync() and fdatasync() sleep PX_SLOW_FSYNC_MS milliseconds (default 500)
 * before doing the real system call. With PX_SLOW_FSYNC_LOG=PATH, each
 * successful call appends "INODE SIZE" to PATH: the file's size when the sync
 * began, i.e. the bytes that call made durable. Nothing else is changed, so
 * the process under test runs its own code unmodified: the fault is outside
 * it, as a slow disk would be. */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static void slow_down(void) {
    const char *v = getenv("PX_SLOW_FSYNC_MS");
    long ms = v ? strtol(v, NULL, 10) : 500;
    if (ms <= 0) return;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0) {
    }
}

static int synced(int fd, long nr) {
    struct stat st;
    int have = fstat(fd, &st) == 0;
    slow_down();
    int r = (int)syscall(nr, fd);
    const char *log = getenv("PX_SLOW_FSYNC_LOG");
    if (r == 0 && have && log && *log) {
        int lfd = open(log, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);
        if (lfd >= 0) {
            dprintf(lfd, "%llu %lld\n", (unsigned long long)st.st_ino, (long long)st.st_size);
            close(lfd);
        }
    }
    return r;
}

int fsync(int fd) { return synced(fd, SYS_fsync); }

int fdatasync(int fd) { return synced(fd, SYS_fdatasync); }
