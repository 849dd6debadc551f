/* phalanx-coordinator: flags, signals, and the run loop. See coordinator.h. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator.h"
#include "px_flags.h"
#include "px_log.h"
#include "px_wire.h"

static const char *PROG = "phalanx-coordinator";
static volatile sig_atomic_t g_stop;

static void on_signal(int sig) {
    (void)sig;
    g_stop = 1;
}

static void usage(void) {
    printf("usage: %s [flags]\n\n"
           "The phalanx coordinator: tracks workers and replica groups, forms quorums,\n"
           "hosts the rendezvous store, serves /status and /metrics, logs events.\n\n"
           "flags (default in brackets):\n"
           "  --bind ENDPOINT             ZeroMQ endpoint workers connect to [tcp://127.0.0.1:7777]\n"
           "  --http HOST:PORT            status server; port 0 picks a free one [off]\n"
           "  --job NAME                  job id, [A-Za-z0-9_.-]{1,63} [phalanx]\n"
           "  --events SPEC               file:PATH, kafka:HOST:PORT[,HOST:PORT...]/TOPIC or none [none]\n"
           "  --spill-dir DIR             where undelivered Kafka events spill [.]\n"
           "  --token-file PATH           require this job token (first line of the file) [none]\n"
           "  --heartbeat-interval-ms N   interval workers heartbeat at, 10..10000 [100]\n"
           "  --heartbeat-timeout-ms N    silence after which a member is lost, 50..600000 [1000]\n"
           "  --min-replicas N            groups needed for a quorum, 1..100000 [1]\n"
           "  --join-timeout-ms N         wait for healthy groups not yet joined, 0..600000 [500]\n"
           "  --rebuild-settle-ms N       wait before re-forming an unchanged quorum, 0..60000 [300]\n"
           "  --mode sync|diloco          training mode announced to workers [sync]\n"
           "  --max-members N             members (live and recently lost), 1..1000000 [%d]\n"
           "  --max-store-keys N          rendezvous keys per quorum, 1..10000000 [%d]\n"
           "  --max-store-bytes N         rendezvous key+value bytes per quorum, 65536..17179869184 [%lld]\n"
           "  --max-store-waiters N       store reads waiting per quorum, 1..10000000 [%d]\n"
           "  --quiet                     log warnings and errors only\n"
           "  --help                      this text\n\n"
           "Past a limit, requests are refused RESOURCE_LIMIT (event limit_reached).\n"
           "SIGTERM or SIGINT: stop after flushing events (up to 5 s for Kafka).\n",
           PROG, PX_DEFAULT_MAX_MEMBERS, PX_DEFAULT_MAX_STORE_KEYS, (long long)PX_DEFAULT_MAX_STORE_BYTES,
           PX_DEFAULT_MAX_STORE_WAITERS);
}

int main(int argc, char **argv) {
    px_log_set_prog(PROG);
    px_coordinator_config_t cfg = {
        .bind = "tcp://127.0.0.1:7777",
        .job = "phalanx",
        .spill_dir = ".",
        .mode = "sync",
        .heartbeat_interval_ms = 100,
        .heartbeat_timeout_ms = 1000,
        .min_replicas = 1,
        .join_timeout_ms = 500,
        .rebuild_settle_ms = 300,
        .max_members = PX_DEFAULT_MAX_MEMBERS,
        .max_store_keys = PX_DEFAULT_MAX_STORE_KEYS,
        .max_store_bytes = PX_DEFAULT_MAX_STORE_BYTES,
        .max_store_waiters = PX_DEFAULT_MAX_STORE_WAITERS,
    };
    static char http_host[256];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage();
            return 0;
        } else if (!strcmp(a, "--quiet")) {
            px_log_set_quiet(1);
            continue;
        }
        if (!strcmp(a, "--bind")) cfg.bind = px_flag_str(PROG, a, v, 512);
        else if (!strcmp(a, "--http")) cfg.http_port = px_flag_hostport0(PROG, a, v, http_host, sizeof http_host), cfg.http_host = http_host;
        else if (!strcmp(a, "--job")) {
            cfg.job = px_flag_str(PROG, a, v, 63);
            if (!px_wire_group_name_ok(cfg.job)) {
                fprintf(stderr, "%s: --job: bad value '%s': expected [A-Za-z0-9_.-]{1,63}\n", PROG, cfg.job);
                return 2;
            }
        } else if (!strcmp(a, "--events")) cfg.events = px_flag_str(PROG, a, v, 4096);
        else if (!strcmp(a, "--spill-dir")) cfg.spill_dir = px_flag_str(PROG, a, v, 4096);
        else if (!strcmp(a, "--token-file")) cfg.token = px_flag_token_file(PROG, a, v);
        else if (!strcmp(a, "--heartbeat-interval-ms")) cfg.heartbeat_interval_ms = px_flag_int(PROG, a, v, 10, 10000);
        else if (!strcmp(a, "--heartbeat-timeout-ms")) cfg.heartbeat_timeout_ms = px_flag_int(PROG, a, v, 50, 600000);
        else if (!strcmp(a, "--min-replicas")) cfg.min_replicas = (int)px_flag_int(PROG, a, v, 1, 100000);
        else if (!strcmp(a, "--join-timeout-ms")) cfg.join_timeout_ms = px_flag_int(PROG, a, v, 0, 600000);
        else if (!strcmp(a, "--rebuild-settle-ms")) cfg.rebuild_settle_ms = px_flag_int(PROG, a, v, 0, 60000);
        else if (!strcmp(a, "--max-members")) cfg.max_members = (int)px_flag_int(PROG, a, v, 1, 1000000);
        else if (!strcmp(a, "--max-store-keys")) cfg.max_store_keys = px_flag_int(PROG, a, v, 1, 10000000);
        else if (!strcmp(a, "--max-store-bytes")) cfg.max_store_bytes = px_flag_int(PROG, a, v, 65536, 16LL << 30);
        else if (!strcmp(a, "--max-store-waiters")) cfg.max_store_waiters = px_flag_int(PROG, a, v, 1, 10000000);
        else if (!strcmp(a, "--mode")) {
            cfg.mode = px_flag_str(PROG, a, v, 16);
            if (strcmp(cfg.mode, "sync") && strcmp(cfg.mode, "diloco")) {
                fprintf(stderr, "%s: --mode: bad value '%s': expected sync or diloco\n", PROG, cfg.mode);
                return 2;
            }
        } else px_flag_unknown(PROG, a);
        i++;
    }
    if (cfg.heartbeat_timeout_ms <= cfg.heartbeat_interval_ms) {
        fprintf(stderr, "%s: --heartbeat-timeout-ms (%lld) must exceed --heartbeat-interval-ms (%lld)\n", PROG,
                (long long)cfg.heartbeat_timeout_ms, (long long)cfg.heartbeat_interval_ms);
        return 2;
    }
    if (cfg.events && strcmp(cfg.events, "none") == 0) cfg.events = NULL;

    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    char err[512];
    px_coordinator_t *c = px_coordinator_new(&cfg, err, sizeof err);
    if (!c) {
        fprintf(stderr, "%s: %s\n", PROG, err);
        return 1;
    }
    if (cfg.http_host) {
        /* Tests and tools started with port 0 read the chosen port from here. */
        printf("http=%s:%d\n", cfg.http_host, px_coordinator_http_port(c));
        fflush(stdout);
    }
    int rc = px_coordinator_run(c, &g_stop);
    px_log_info("coordinator_stopping reason=%s", g_stop ? "signal" : "error");
    px_coordinator_destroy(&c, 5000);
    free((char *)cfg.token);
    return rc;
}
