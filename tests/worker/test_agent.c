/* The worker's agent (worker/agent.c) against a real phalanx-coordinator
 * process on loopback (its path is argv[1]):
 *
 *   hook_wait   px_agent_set_quorum_hook(NULL) returns only after a running
 *               hook call has returned (the trainer frees the hook's context
 *               right after). The hook blocks until the
 *               test says, so the check is deterministic, not a race.
 *   flush       a departure notice followed by px_agent_flush and an
 *               immediate destroy reaches the coordinator (it records the
 *               member as lost for reason self_reported, not a silence);
 *               with no coordinator, px_agent_flush gives up on time.
 *   fatal       a coordinator of another job refuses the agent for good:
 *               px_agent_request_quorum returns -1 and px_agent_fatal_error
 *               names the refusal.
 *   mode        under a coordinator's --mode auto, a comm share the agent
 *               heartbeats (px_agent_set_comm_share) switches the job to
 *               DiLoCo: the next quorum the agent stores says mode
 *               "diloco" (the first one said "sync").
 *
 * Every wait is bounded; the coordinator is stopped on every path. */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent.h"
#include "px_time.h"

static const char *coord_bin;
static char dir[256];
static pid_t coord_pid;
static char endpoint[64];
static char events_path[300];

#define FAIL(...)                                                                                                      \
    do {                                                                                                               \
        printf("FAIL %s:%d: ", __FILE__, __LINE__);                                                                    \
        printf(__VA_ARGS__);                                                                                           \
        printf("\n");                                                                                                  \
        return 1;                                                                                                      \
    } while (0)

static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof sa;
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof sa) != 0 || getsockname(fd, (struct sockaddr *)&sa, &len)) {
        perror("free_port");
        exit(1);
    }
    close(fd);
    return ntohs(sa.sin_port);
}

/* Starts the coordinator for `job` (with extra flags, NULL-terminated, or
 * NULL) and waits for its "http=" line. */
static int start_coordinator(const char *job, const char *const *extra) {
    snprintf(endpoint, sizeof endpoint, "tcp://127.0.0.1:%d", free_port());
    snprintf(events_path, sizeof events_path, "%s/events-%s.jsonl", dir, job);
    char events[320], log[320];
    snprintf(events, sizeof events, "file:%s", events_path);
    snprintf(log, sizeof log, "%s/coordinator-%s.log", dir, job);
    int pfd[2];
    if (pipe(pfd) != 0) return -1;
    coord_pid = fork();
    if (coord_pid == 0) {
        dup2(pfd[1], 1);
        close(pfd[0]);
        close(pfd[1]);
        FILE *f = freopen(log, "a", stderr);
        (void)f;
        const char *args[32] = {coord_bin, "--bind", endpoint, "--http", "127.0.0.1:0", "--job", job, "--events", events};
        for (int i = 0, n = 9; extra && extra[i] && n < 31; i++) args[n++] = extra[i];
        execv(coord_bin, (char *const *)args);
        _exit(127);
    }
    close(pfd[1]);
    FILE *out = fdopen(pfd[0], "r");
    char line[256] = "";
    int ok = out && fgets(line, sizeof line, out) && strncmp(line, "http=", 5) == 0;
    if (out) fclose(out);
    if (!ok) printf("coordinator did not start (see %s)\n", log);
    return ok ? 0 : -1;
}

static void stop_coordinator(void) {
    if (coord_pid <= 0) return;
    kill(coord_pid, SIGTERM);
    int64_t deadline = px_now_ms() + 10000;
    while (waitpid(coord_pid, NULL, WNOHANG) == 0) {
        if (px_now_ms() > deadline) {
            kill(coord_pid, SIGKILL);
            waitpid(coord_pid, NULL, 0);
            break;
        }
        px_sleep_ms(10);
    }
    coord_pid = 0;
}

static px_agent_t *new_agent(const char *group, const char *job) {
    px_agent_config_t cfg = {.coordinator = endpoint, .group = group, .rank = 0, .group_size = 1, .job = job};
    char err[256];
    px_agent_t *a = px_agent_new(&cfg, err, sizeof err);
    if (!a) printf("px_agent_new: %s\n", err);
    if (a && px_agent_start(a, err, sizeof err) != 0) {
        printf("px_agent_start: %s\n", err);
        px_agent_destroy(&a);
    }
    return a;
}

static int wait_registered(px_agent_t *a) {
    int64_t deadline = px_now_ms() + 10000;
    while (!px_agent_registered(a))
        if (px_now_ms() > deadline) return -1;
        else px_sleep_ms(10);
    return 0;
}

/* ---- hook_wait ---------------------------------------------------------- */

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int entered, release, returned;
} hook_ctx_t;

/* Blocks the agent thread inside the hook until the test releases it. */
static void blocking_hook(void *ctx, const px_quorum_t *latest, int64_t known_qid) {
    (void)latest;
    (void)known_qid;
    hook_ctx_t *h = ctx;
    pthread_mutex_lock(&h->mu);
    h->entered++;
    pthread_cond_broadcast(&h->cv);
    while (!h->release) pthread_cond_wait(&h->cv, &h->mu);
    h->returned++;
    pthread_mutex_unlock(&h->mu);
}

typedef struct {
    px_agent_t *a;
    int done;
    pthread_mutex_t mu;
} unhook_t;

static void *unhook(void *arg) {
    unhook_t *u = arg;
    px_agent_set_quorum_hook(u->a, NULL, NULL);
    pthread_mutex_lock(&u->mu);
    u->done = 1;
    pthread_mutex_unlock(&u->mu);
    return NULL;
}

static int unhook_done(unhook_t *u) {
    pthread_mutex_lock(&u->mu);
    int d = u->done;
    pthread_mutex_unlock(&u->mu);
    return d;
}

static int test_hook_wait(px_agent_t *a) {
    hook_ctx_t h = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0, 0, 0};
    px_agent_set_quorum_hook(a, blocking_hook, &h);
    px_quorum_t q;
    px_quorum_init(&q);
    px_quorum_request_t r = PX_QUORUM_TIMED_OUT;
    for (int i = 0; i < 20 && r == PX_QUORUM_TIMED_OUT; i++) r = px_agent_request_quorum(a, 0, 0, 0, 0, 0, 1000, &q);
    px_quorum_free(&q);
    if (r != PX_QUORUM_GRANTED) FAIL("no quorum formed (request_quorum=%d)", (int)r);
    pthread_mutex_lock(&h.mu);
    int64_t deadline = px_now_ms() + 5000;
    while (!h.entered && px_now_ms() < deadline) {
        pthread_mutex_unlock(&h.mu);
        px_sleep_ms(5);
        pthread_mutex_lock(&h.mu);
    }
    int entered = h.entered;
    pthread_mutex_unlock(&h.mu);
    if (!entered) FAIL("the hook was not called for the pushed quorum");

    /* The hook is running (and blocked): removing it must wait for it. */
    unhook_t u = {a, 0, PTHREAD_MUTEX_INITIALIZER};
    pthread_t th;
    pthread_create(&th, NULL, unhook, &u);
    px_sleep_ms(300);
    int early = unhook_done(&u);
    pthread_mutex_lock(&h.mu);
    h.release = 1;
    pthread_cond_broadcast(&h.cv);
    pthread_mutex_unlock(&h.mu);
    pthread_join(th, NULL);
    if (early) FAIL("px_agent_set_quorum_hook(NULL) returned while the hook was still running");
    pthread_mutex_lock(&h.mu);
    int returned = h.returned, calls = h.entered;
    pthread_mutex_unlock(&h.mu);
    if (returned != calls) FAIL("hook calls %d, returned %d after unhooking", calls, returned);
    printf("hook_wait: ok (unhook waited for the running hook)\n");
    return 0;
}

/* ---- flush -------------------------------------------------------------- */

/* A line of the event log holding every one of the (up to 3) needles. */
static int event_seen(const char *a, const char *b, const char *c, int timeout_ms) {
    int64_t deadline = px_now_ms() + timeout_ms;
    do {
        FILE *f = fopen(events_path, "r");
        char line[4096];
        while (f && fgets(line, sizeof line, f)) {
            if (strstr(line, a) && strstr(line, b) && strstr(line, c)) {
                fclose(f);
                return 1;
            }
        }
        if (f) fclose(f);
        px_sleep_ms(20);
    } while (px_now_ms() < deadline);
    return 0;
}

static int test_flush(void) {
    px_agent_t *a = new_agent("leaver", "agenttest");
    if (!a || wait_registered(a) != 0) FAIL("agent 'leaver' did not register");
    px_agent_report_failure(a, "leaver", 0, 0, 0, "worker stopping");
    int64_t t0 = px_now_ms();
    int rc = px_agent_flush(a, 2000);
    int64_t ms = px_now_ms() - t0;
    px_agent_destroy(&a); /* at once: nothing is left to send */
    if (rc != 0) FAIL("px_agent_flush = %d after %lld ms (want 0: the notice arrived)", rc, (long long)ms);
    if (!event_seen("\"member_lost\"", "\"group\":\"leaver\"", "\"reason\":\"self_reported\"", 5000))
        FAIL("the coordinator did not record the departure notice (see %s)", events_path);
    printf("flush: ok (acknowledged in %lld ms)\n", (long long)ms);
    return 0;
}

static int test_flush_unreachable(void) {
    char saved[64];
    snprintf(saved, sizeof saved, "%s", endpoint);
    snprintf(endpoint, sizeof endpoint, "tcp://127.0.0.1:%d", free_port()); /* nobody listens */
    px_agent_t *a = new_agent("lonely", "agenttest");
    snprintf(endpoint, sizeof endpoint, "%s", saved);
    if (!a) FAIL("agent 'lonely' not created");
    px_agent_report_failure(a, "lonely", 0, 0, 0, "worker stopping");
    int64_t t0 = px_now_ms();
    int rc = px_agent_flush(a, 300);
    int64_t ms = px_now_ms() - t0;
    px_agent_destroy(&a);
    if (rc != 1) FAIL("px_agent_flush with no coordinator = %d (want 1: timed out)", rc);
    if (ms < 250 || ms > 3000) FAIL("px_agent_flush(300 ms) with no coordinator took %lld ms", (long long)ms);
    printf("flush_unreachable: ok (gave up after %lld ms)\n", (long long)ms);
    return 0;
}

/* ---- fatal -------------------------------------------------------------- */

static int test_fatal(void) {
    px_agent_t *a = new_agent("stranger", "another-job");
    if (!a) FAIL("agent 'stranger' not created");
    px_quorum_t q;
    px_quorum_init(&q);
    px_quorum_request_t r = PX_QUORUM_TIMED_OUT;
    for (int i = 0; i < 10 && r == PX_QUORUM_TIMED_OUT; i++) r = px_agent_request_quorum(a, 0, 0, 0, 0, 0, 1000, &q);
    px_quorum_free(&q);
    char fatal[300];
    snprintf(fatal, sizeof fatal, "%s", px_agent_fatal_error(a));
    px_agent_destroy(&a);
    if (r != PX_QUORUM_GAVE_UP) FAIL("request_quorum from another job = %d (want GAVE_UP)", (int)r);
    if (!strstr(fatal, "WRONG_JOB")) FAIL("fatal error '%s' does not name WRONG_JOB", fatal);
    printf("fatal: ok (%s)\n", fatal);
    return 0;
}

/* ---- mode ------------------------------------------------------------- */

static int test_mode(void) {
    static const char *const AUTO[] = {"--mode", "auto", "--auto-comm-share", "0.5", "--auto-hold", "0", NULL};
    if (start_coordinator("autotest", AUTO) != 0) FAIL("coordinator --mode auto did not start");
    px_agent_t *a = new_agent("auto", "autotest");
    if (!a) FAIL("agent 'auto' not created");
    px_quorum_t q;
    px_quorum_init(&q);
    px_quorum_request_t r = px_agent_request_quorum(a, 0, 0, 0, 0, 0, 10000, &q);
    int64_t first = q.id;
    char mode[16];
    snprintf(mode, sizeof mode, "%s", q.mode);
    px_agent_set_comm_share(a, 0.9f);
    int64_t deadline = px_now_ms() + 10000;
    while (px_now_ms() < deadline && (px_agent_latest_quorum(a, &q) != 0 || q.id <= first)) px_sleep_ms(10);
    px_agent_destroy(&a);
    int64_t second = q.id;
    char second_mode[16];
    snprintf(second_mode, sizeof second_mode, "%s", q.mode);
    px_quorum_free(&q);
    stop_coordinator();
    if (r != PX_QUORUM_GRANTED || strcmp(mode, "sync") != 0)
        FAIL("first quorum: rc %d, mode '%s' (want GRANTED, sync)", (int)r, mode);
    if (second <= first || strcmp(second_mode, "diloco") != 0)
        FAIL("after comm share 0.9: quorum %lld mode '%s' (want > %lld, diloco)", (long long)second, second_mode,
             (long long)first);
    printf("mode: ok (quorum %lld sync, %lld diloco)\n", (long long)first, (long long)second);
    return 0;
}

static int remove_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s PATH/phalanx-coordinator\n", argv[0]);
        return 2;
    }
    coord_bin = argv[1];
    snprintf(dir, sizeof dir, "/tmp/phalanx-agent-test-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    if (start_coordinator("agenttest", NULL) != 0) {
        stop_coordinator();
        return 1;
    }
    int fails = 0;
    px_agent_t *a = new_agent("hooked", "agenttest");
    if (!a) fails++;
    else {
        fails += test_hook_wait(a);
        px_agent_destroy(&a);
    }
    fails += test_flush();
    fails += test_flush_unreachable();
    fails += test_fatal();
    stop_coordinator();
    fails += test_mode();
    if (fails) {
        printf("%d failures (logs in %s)\n", fails, dir);
        return 1;
    }
    nftw(dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS); /* kept for its logs only when a check failed */
    printf("PASS\n");
    return 0;
}
