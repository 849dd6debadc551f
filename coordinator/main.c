/* phalanx-coordinator: flags, signals, and the run loop. See coordinator.h. */
#include <arpa/inet.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "auth.h"
#include "coordinator.h"
#include "coordinator_flags.h"
#include "heap_trim.h"
#include "mode_policy.h"
#include "px_keys.h"
#include "px_log.h"

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

static const char USAGE[] =
    "usage: phalanx-coordinator [flags]\n\n"
    "The phalanx coordinator: tracks workers and replica groups, forms quorums,\n"
    "hosts the rendezvous store, serves /status and /metrics, logs events.\n";

static const char EPILOGUE[] =
    "SIGTERM or SIGINT: stop after flushing events (up to 5 s for Kafka).\n"
    "SIGHUP: re-read --authorized-keys (with CURVE) and --token-file; a file that does not parse\n"
    "keeps the old keys or tokens.\n"
    "See docs/security.md.\n";

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
    if (!exposed && !secret_path && !cfg->token_file)
        px_log_warn("no_credentials bind=%s: any local user of this machine can register, join the quorum and end "
                    "the job; give --curve-secret-key-file with --authorized-keys, or --token-file (phalanx-launch "
                    "makes CURVE keys for its coordinator unless --insecure)", cfg->bind);
    if (cfg->http_host && !px_auth_host_is_loopback(cfg->http_host))
        px_log_warn("http_exposed http=%s: /status, /metrics and the dashboard have no authentication and show the "
                    "job's members, hosts and pids to anyone who can reach them (read-only)",
                    cfg->http_host);
    return 0;
}

int main(int argc, char **argv) {
    px_log_set_prog(PROG);
    static px_coordinator_options_t o = {
        .cfg = {.max_members = PX_DEFAULT_MAX_MEMBERS,
                .max_store_keys = PX_DEFAULT_MAX_STORE_KEYS,
                .max_store_bytes = PX_DEFAULT_MAX_STORE_BYTES,
                .max_store_waiters = PX_DEFAULT_MAX_STORE_WAITERS},
        .http = {.port = -1},
    };
    const px_flag_section_t sections[] = {
        {&px_coordinator_flags, &o, NULL},
        {&px_log_flags, &o.quiet, ""},
        {&px_coordinator_auto_flags, &o, NULL},
        {&px_coordinator_limit_flags, &o, NULL},
    };
    const px_flags_spec_t spec = {.prog = PROG, .usage = USAGE, .epilogue = EPILOGUE, .sections = sections,
                                  .n_sections = 4, .env = 1};
    px_flags_parsed_t given;
    px_flags_parse(&spec, argc, argv, &given);
    px_coordinator_config_t cfg = o.cfg;
    px_log_set_quiet(o.quiet);
    cfg.mode = px_coordinator_modes[o.mode];
    if (o.http.port >= 0) cfg.http_host = o.http.host, cfg.http_port = o.http.port;
    struct in_addr http_addr;
    if (cfg.http_host && inet_pton(AF_INET, cfg.http_host, &http_addr) != 1) {
        fprintf(stderr, "%s: --http: bad value '%s:%d': the host must be an IPv4 address (0.0.0.0 for every "
                "interface)\n", PROG, cfg.http_host, cfg.http_port);
        return 2;
    }
    const px_flag_t *auto_flag = px_flags_last_given(&given, &px_coordinator_auto_flags);
    static px_keypair_t curve;
    if (cfg.heartbeat_timeout_ms <= cfg.heartbeat_interval_ms) {
        fprintf(stderr, "%s: --heartbeat-timeout-ms (%lld) must exceed --heartbeat-interval-ms (%lld)\n", PROG,
                (long long)cfg.heartbeat_timeout_ms, (long long)cfg.heartbeat_interval_ms);
        return 2;
    }
    if (check_auto(&cfg, auto_flag ? auto_flag->name : NULL) != 0) return 2;
    if (cfg.events && strcmp(cfg.events, "none") == 0) cfg.events = NULL;
    if (check_security(&cfg, o.curve_secret, &curve, o.insecure) != 0) return 2;

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
    int bad_config;
    px_coordinator_t *c = px_coordinator_new(&cfg, err, sizeof err, &bad_config);
    if (!c) {
        fprintf(stderr, "%s: %s\n", PROG, err);
        return bad_config ? 2 : 1;
    }
    if (cfg.http_host) {
        /* Tests and tools started with port 0 read the chosen port from here. */
        printf("http=%s:%d\n", cfg.http_host, px_coordinator_http_port(c));
        fflush(stdout);
    }
    char trim_err[200] = "";
    px_heap_trimmer_t *trimmer = px_heap_trimmer_start(trim_err, sizeof trim_err);
    if (!trimmer) px_log_warn("heap_trim_off: %s", trim_err);
    int rc = px_coordinator_run(c, &g_stop);
    px_log_info("coordinator_stopping reason=%s", g_stop ? "signal" : "error");
    px_heap_trimmer_stop(&trimmer);
    px_coordinator_destroy(&c, 5000);
    return rc;
}
