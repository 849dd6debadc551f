/* phalanx-coordinator: flags, signals, and the run loop. See coordinator.h. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "coordinator.h"
#include "mode_policy.h"
#include "px_flags.h"
#include "px_keys.h"
#include "px_log.h"
#include "px_wire.h"

static const char *PROG = "phalanx-coordinator";
static volatile sig_atomic_t g_stop;
static atomic_int g_reload;       /* set in a signal handler, read by the ZAP thread */
static atomic_int g_reload_token; /* set in a signal handler, read by the event loop */
_Static_assert(ATOMIC_INT_LOCK_FREE == 2, "a signal handler may only touch lock-free atomics");

static void on_signal(int sig) {
    (void)sig;
    g_stop = 1;
}

static void on_sighup(int sig) {
    (void)sig;
    atomic_store(&g_reload, 1);
    atomic_store(&g_reload_token, 1);
}

/* --mode auto defaults (mode_policy.h) */
#define AUTO_FAILURES_PER_HOUR 6.0
#define AUTO_COMM_SHARE 0.5
#define AUTO_WINDOW_S 600
#define AUTO_HOLD_S 60

static void usage(FILE *f) {
    fprintf(f, "usage: %s [flags]\n\n"
           "The phalanx coordinator: tracks workers and replica groups, forms quorums,\n"
           "hosts the rendezvous store, serves /status and /metrics, logs events.\n\n"
           "flags (default in brackets):\n"
           "  --bind ENDPOINT             ZeroMQ endpoint workers connect to [tcp://127.0.0.1:7777]\n"
           "  --http HOST:PORT            status server; port 0 picks a free one [off]\n"
           "  --job NAME                  job id, [A-Za-z0-9_.-]{1,63} [phalanx]\n"
           "  --events SPEC               file:PATH, kafka:HOST:PORT[,HOST:PORT...]/TOPIC or none [none]\n"
           "  --spill-dir DIR             where undelivered Kafka events spill [.]\n"
           "  --token-file PATH           require a job token: any line of the file is admitted (workers\n"
           "                              present their file's first line); re-read when it changes and on\n"
           "                              SIGHUP, so a token is rotated without a restart [none]\n"
           "  --curve-secret-key-file PATH  encrypt the control plane with CURVE using this secret key\n"
           "                              (phalanxctl keygen; mode 0600) [off]\n"
           "  --authorized-keys PATH      with CURVE: public keys of the clients admitted, one per line [none]\n"
           "  --insecure                  allow a non-loopback --bind with neither CURVE nor a token [off]\n"
           "  --heartbeat-interval-ms N   interval workers heartbeat at, 10..10000 [100]\n"
           "  --heartbeat-timeout-ms N    silence after which a member is lost, 50..600000 [1000]\n"
           "  --heartbeat-udp on|off      offer workers sealed UDP heartbeats on the --bind address and port\n"
           "                              (UDP; each registration gets its own key); a worker whose datagrams\n"
           "                              do not arrive is told to heartbeat over ZeroMQ (docs/protocol.md) [on]\n"
           "  --min-replicas N            groups needed for a quorum, 1..100000 [1]\n"
           "  --join-timeout-ms N         wait for healthy groups not yet joined, 0..600000 [500]\n"
           "  --rebuild-settle-ms N       wait before re-forming an unchanged quorum, 0..60000 [300]\n"
           "  --stall-timeout-ms N        drop a quorum member that has not joined the quorum's\n"
           "                              rendezvous this long after others did; keep above two\n"
           "                              step times, 100..3600000 [60000]\n"
           "  --mode sync|diloco|auto     announced in quorums and shown by /status until groups train; the\n"
           "                              groups' own --mode decides how they train, and /status then shows it;\n"
           "                              auto: announce sync, and switch to diloco (workers started with\n"
           "                              --mode auto follow at a step boundary) when either figure below\n"
           "                              reaches its threshold, back to sync when both are below half of\n"
           "                              theirs; each switch is a new quorum and a mode_switched event [sync]\n"
           "  --auto-failures-per-hour F  auto: group losses per hour (over --auto-window) that switch to\n"
           "                              diloco, 0 = not a signal, 0..100000 [%g]\n"
           "  --auto-comm-share S         auto: share of step time in cross-group communication (the mean of\n"
           "                              what the groups' rank 0 report) that switches to diloco, 0 = not a\n"
           "                              signal, 0..1 [%g]\n"
           "  --auto-window SECONDS       auto: the window losses are counted over, 1..86400 [%d]\n"
           "  --auto-hold SECONDS         auto: the least time between two switches, and from the start to\n"
           "                              the first, 0..86400 [%d]\n"
           "  --max-members N             members (live and recently lost), 1..1000000 [%d]\n"
           "  --max-store-keys N          rendezvous keys per quorum, 1..10000000 [%d]\n"
           "  --max-store-bytes N         rendezvous key+value bytes per quorum, 65536..17179869184 [%lld]\n"
           "  --max-store-waiters N       store reads waiting per quorum, 1..10000000 [%d]\n"
           "  --quiet                     log warnings and errors only\n"
           "  --help                      this text\n\n"
           "Every flag can be given as an environment variable instead: PHALANX_MIN_REPLICAS=3 for\n"
           "--min-replicas 3, PHALANX_QUIET=1 for --quiet; the command line wins.\n"
           "Past a limit, requests are refused RESOURCE_LIMIT (event limit_reached).\n"
           "SIGTERM or SIGINT: stop after flushing events (up to 5 s for Kafka).\n"
           "SIGHUP: re-read --authorized-keys (with CURVE) and --token-file; a file that does not parse\n"
           "keeps the old keys or tokens.\n"
           "See docs/security.md.\n",
           PROG, AUTO_FAILURES_PER_HOUR, AUTO_COMM_SHARE, AUTO_WINDOW_S, AUTO_HOLD_S, PX_DEFAULT_MAX_MEMBERS,
           PX_DEFAULT_MAX_STORE_KEYS, (long long)PX_DEFAULT_MAX_STORE_BYTES,
           PX_DEFAULT_MAX_STORE_WAITERS);
}

/* The --auto-* flags go with --mode auto, and the loss ring must hold the
 * losses a window needs to reach the threshold. */
static int check_auto(const px_coordinator_config_t *cfg, const char *auto_flag) {
    if (auto_flag && strcmp(cfg->mode, "auto") != 0) {
        fprintf(stderr, "%s: %s needs --mode auto (the coordinator runs --mode %s)\n", PROG, auto_flag, cfg->mode);
        return -1;
    }
    if (!strcmp(cfg->mode, "auto") && cfg->auto_failures_per_hour <= 0 && cfg->auto_comm_share <= 0) {
        fprintf(stderr, "%s: --mode auto with --auto-failures-per-hour 0 and --auto-comm-share 0: no signal could "
                "ever switch the mode (use --mode sync)\n", PROG);
        return -1;
    }
    double needed = cfg->auto_failures_per_hour * (double)cfg->auto_window_ms / 3600000.0;
    if (needed > PX_LOSS_RING_MAX) {
        fprintf(stderr, "%s: --auto-failures-per-hour %g over --auto-window %lld s means %.0f group losses in a window; "
                "at most %d are counted: lower one of them\n", PROG, cfg->auto_failures_per_hour,
                (long long)(cfg->auto_window_ms / 1000), needed, PX_LOSS_RING_MAX);
        return -1;
    }
    return 0;
}

/* CURVE flags, and the safe default: a control endpoint reachable from the
 * network needs CURVE or a token unless --insecure says otherwise. */
static int check_security(px_coordinator_config_t *cfg, const char *secret_path, px_keypair_t *curve, int insecure) {
    char err[600];
    if (!secret_path != !cfg->authorized_keys) {
        fprintf(stderr, "%s: %s\n", PROG,
                secret_path ? "--curve-secret-key-file needs --authorized-keys (the public keys of the clients to admit)"
                            : "--authorized-keys needs --curve-secret-key-file (the coordinator's own secret key)");
        return -1;
    }
    if (secret_path) {
        px_auth_keys_t keys = {0};
        if (px_keys_read_secret(secret_path, curve, err, sizeof err) != 0) {
            fprintf(stderr, "%s: --curve-secret-key-file: %s\n", PROG, err);
            return -1;
        }
        if (px_auth_keys_load(cfg->authorized_keys, &keys, err, sizeof err) != 0) {
            fprintf(stderr, "%s: --authorized-keys: %s\n", PROG, err);
            return -1;
        }
        px_auth_keys_free(&keys);
        cfg->curve_secret_key = curve->sec;
        px_log_info("curve_public_key key=%s (give it to clients as --coordinator-key or a .pub file)", curve->pub);
    }
    int exposed = !px_auth_endpoint_is_loopback(cfg->bind);
    if (!px_auth_bind_allowed(cfg->bind, secret_path != NULL, cfg->token_file != NULL, insecure)) {
        fprintf(stderr,
                "%s: refusing to bind %s without credentials: it is reachable from the network, and anyone who reaches "
                "it could join the job, evict members and end the run. Use --curve-secret-key-file with "
                "--authorized-keys (encrypted and authenticated) or --token-file, bind a loopback address, or pass "
                "--insecure to accept the risk (see docs/security.md)\n",
                PROG, cfg->bind);
        return -1;
    }
    if (cfg->token_file) {
        px_auth_tokens_t tokens;
        if (px_auth_tokens_load(cfg->token_file, &tokens, err, sizeof err) != 0) {
            fprintf(stderr, "%s: --token-file: %s\n", PROG, err);
            return -1;
        }
        memset(&tokens, 0, sizeof tokens);
    }
    if (exposed && !secret_path && cfg->token_file)
        px_log_warn("token_in_cleartext bind=%s: the job token crosses the network unencrypted; prefer CURVE", cfg->bind);
    if (exposed && !secret_path && !cfg->token_file)
        px_log_warn("insecure_bind bind=%s: --insecure: anyone who can reach it can join, evict members and end the job",
                    cfg->bind);
    if (cfg->http_host && !px_auth_host_is_loopback(cfg->http_host))
        px_log_warn("http_exposed http=%s: /status, /metrics and the dashboard have no authentication and show the "
                    "job's members, hosts and pids to anyone who can reach them (read-only)",
                    cfg->http_host);
    return 0;
}

int main(int argc, char **argv) {
    px_log_set_prog(PROG);
    px_coordinator_config_t cfg = {
        .bind = "tcp://127.0.0.1:7777",
        .job = "phalanx",
        .spill_dir = ".",
        .mode = "sync",
        .auto_failures_per_hour = AUTO_FAILURES_PER_HOUR,
        .auto_comm_share = AUTO_COMM_SHARE,
        .auto_window_ms = AUTO_WINDOW_S * 1000LL,
        .auto_hold_ms = AUTO_HOLD_S * 1000LL,
        .heartbeat_interval_ms = 100,
        .heartbeat_timeout_ms = 1000,
        .heartbeat_udp = 1,
        .min_replicas = 1,
        .join_timeout_ms = 500,
        .rebuild_settle_ms = 300,
        .stall_timeout_ms = 60000,
        .max_members = PX_DEFAULT_MAX_MEMBERS,
        .max_store_keys = PX_DEFAULT_MAX_STORE_KEYS,
        .max_store_bytes = PX_DEFAULT_MAX_STORE_BYTES,
        .max_store_waiters = PX_DEFAULT_MAX_STORE_WAITERS,
    };
    static char http_host[256];
    static px_keypair_t curve;
    const char *secret_path = NULL;
    int insecure = 0;
    const char *auto_flag = NULL; /* the last --auto-* flag given */
    static const char *const booleans[] = {"quiet", "insecure", NULL};
    px_flags_from_env(PROG, usage, booleans, &argc, &argv);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--quiet")) {
            px_log_set_quiet(1);
            continue;
        } else if (!strcmp(a, "--insecure")) {
            insecure = 1;
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
        else if (!strcmp(a, "--token-file")) cfg.token_file = px_flag_str(PROG, a, v, 4096);
        else if (!strcmp(a, "--curve-secret-key-file")) secret_path = px_flag_str(PROG, a, v, 4096);
        else if (!strcmp(a, "--authorized-keys")) cfg.authorized_keys = px_flag_str(PROG, a, v, 4096);
        else if (!strcmp(a, "--heartbeat-interval-ms")) cfg.heartbeat_interval_ms = px_flag_int(PROG, a, v, 10, 10000);
        else if (!strcmp(a, "--heartbeat-timeout-ms")) cfg.heartbeat_timeout_ms = px_flag_int(PROG, a, v, 50, 600000);
        else if (!strcmp(a, "--heartbeat-udp")) {
            const char *u = px_flag_str(PROG, a, v, 8);
            if (strcmp(u, "on") && strcmp(u, "off")) {
                fprintf(stderr, "%s: --heartbeat-udp: bad value '%s': expected on or off\n", PROG, u);
                return 2;
            }
            cfg.heartbeat_udp = !strcmp(u, "on");
        } else if (!strcmp(a, "--min-replicas")) cfg.min_replicas = (int)px_flag_int(PROG, a, v, 1, 100000);
        else if (!strcmp(a, "--join-timeout-ms")) cfg.join_timeout_ms = px_flag_int(PROG, a, v, 0, 600000);
        else if (!strcmp(a, "--rebuild-settle-ms")) cfg.rebuild_settle_ms = px_flag_int(PROG, a, v, 0, 60000);
        else if (!strcmp(a, "--stall-timeout-ms")) cfg.stall_timeout_ms = px_flag_int(PROG, a, v, 100, 3600000);
        else if (!strcmp(a, "--max-members")) cfg.max_members = (int)px_flag_int(PROG, a, v, 1, 1000000);
        else if (!strcmp(a, "--max-store-keys")) cfg.max_store_keys = px_flag_int(PROG, a, v, 1, 10000000);
        else if (!strcmp(a, "--max-store-bytes")) cfg.max_store_bytes = px_flag_int(PROG, a, v, 65536, 16LL << 30);
        else if (!strcmp(a, "--max-store-waiters")) cfg.max_store_waiters = px_flag_int(PROG, a, v, 1, 10000000);
        else if (!strcmp(a, "--mode")) {
            cfg.mode = px_flag_str(PROG, a, v, 16);
            if (strcmp(cfg.mode, "sync") && strcmp(cfg.mode, "diloco") && strcmp(cfg.mode, "auto")) {
                fprintf(stderr, "%s: --mode: bad value '%s': expected sync, diloco or auto\n", PROG, cfg.mode);
                return 2;
            }
        } else if (!strcmp(a, "--auto-failures-per-hour"))
            cfg.auto_failures_per_hour = px_flag_double(PROG, a, v, 0, 100000), auto_flag = a;
        else if (!strcmp(a, "--auto-comm-share")) cfg.auto_comm_share = px_flag_double(PROG, a, v, 0, 1), auto_flag = a;
        else if (!strcmp(a, "--auto-window")) cfg.auto_window_ms = px_flag_int(PROG, a, v, 1, 86400) * 1000, auto_flag = a;
        else if (!strcmp(a, "--auto-hold")) cfg.auto_hold_ms = px_flag_int(PROG, a, v, 0, 86400) * 1000, auto_flag = a;
        else px_flag_unknown(PROG, a);
        i++;
    }
    if (cfg.heartbeat_timeout_ms <= cfg.heartbeat_interval_ms) {
        fprintf(stderr, "%s: --heartbeat-timeout-ms (%lld) must exceed --heartbeat-interval-ms (%lld)\n", PROG,
                (long long)cfg.heartbeat_timeout_ms, (long long)cfg.heartbeat_interval_ms);
        return 2;
    }
    if (check_auto(&cfg, auto_flag) != 0) return 2;
    if (cfg.events && strcmp(cfg.events, "none") == 0) cfg.events = NULL;
    if (check_security(&cfg, secret_path, &curve, insecure) != 0) return 2;

    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (cfg.curve_secret_key || cfg.token_file) {
        struct sigaction hup = {0};
        hup.sa_handler = on_sighup;
        sigaction(SIGHUP, &hup, NULL);
        if (cfg.curve_secret_key) cfg.reload_keys = &g_reload;
        if (cfg.token_file) cfg.reload_token = &g_reload_token;
    }

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
    return rc;
}
