/* The coordinator daemon: one per job. It owns the ZeroMQ ROUTER socket the
 * workers talk to, the member table, the current quorum, the rendezvous
 * store, the HTTP status server and the event log, and runs them from one
 * event loop (px_coordinator_run) so that a reader can follow a message from
 * where it arrives (handle_frame) to where it leads. */
#ifndef PX_COORDINATOR_H
#define PX_COORDINATOR_H

#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>

typedef struct {
    const char *bind;          /* ZeroMQ endpoint, e.g. tcp://127.0.0.1:7777 */
    const char *http_host;     /* NULL: no HTTP server */
    int http_port;             /* 0: any free port */
    const char *job;
    const char *events;        /* "file:PATH", "kafka:...", or NULL */
    const char *spill_dir;
    const char *token_file;    /* job tokens admitted, one per line (auth.h); NULL: no token required.
                                * Re-read when it changes (checked every second) or reload_token is set */
    atomic_int *reload_token;  /* set non-zero (SIGHUP) to re-read token_file now; may be NULL */
    const char *curve_secret_key; /* Z85 secret key: CURVE on the ROUTER socket; NULL: plaintext */
    const char *authorized_keys;  /* with CURVE: file of client public keys admitted (auth.h) */
    atomic_int *reload_keys;   /* set non-zero (SIGHUP) to re-read authorized_keys; may be NULL */
    const char *mode;          /* "sync", "diloco" or "auto" (switched by mode_policy.h) */
    /* --mode auto: the thresholds, window and hold of mode_policy.h */
    double auto_failures_per_hour, auto_comm_share;
    int64_t auto_window_ms, auto_hold_ms;
    int64_t heartbeat_interval_ms;
    int64_t heartbeat_timeout_ms;
    int heartbeat_udp;         /* 1: offer sealed UDP heartbeats (coordinator/udp.h) beside a tcp:// bind */
    int min_replicas;
    int target_groups;  /* > 0: at most this many groups train, the rest are spares */
    int64_t join_timeout_ms;
    int64_t rebuild_settle_ms; /* wait before re-forming an unchanged quorum on request */
    int64_t stall_timeout_ms;  /* a quorum member not in its rendezvous this long is dropped (0: adaptive,
                                  px_stall_limit_ms) */
    int metrics_groups;        /* /metrics lists each group while there are at most this many (0: none) */
    /* Limits on state peers grow; 0: the default. The store ones hold per
     * quorum id; the store as a whole holds twice that (it keeps the current
     * and the previous quorum's keys). */
    int max_members;
    int64_t max_store_keys, max_store_bytes, max_store_waiters;
} px_coordinator_config_t;

#define PX_DEFAULT_MAX_MEMBERS 65536
#define PX_DEFAULT_MAX_STORE_KEYS 65536
#define PX_DEFAULT_MAX_STORE_BYTES (64LL << 20)
#define PX_DEFAULT_MAX_STORE_WAITERS 65536

typedef struct px_coordinator px_coordinator_t;

/* The coordinator, bound and listening; NULL with err when it cannot start,
 * and *bad_config 1 when the configuration is at fault (an address that is
 * no interface of this host, a token file that does not load), 0 when the
 * moment is (a port in use, out of memory): exit status 2 or 1. */
px_coordinator_t *px_coordinator_new(const px_coordinator_config_t *cfg, char *err, size_t errlen, int *bad_config);
/* Runs until *stop becomes non-zero. Returns 0 on a clean stop. */
int px_coordinator_run(px_coordinator_t *c, volatile sig_atomic_t *stop);
/* Flushes events (waiting up to flush_ms for Kafka delivery) and frees everything. */
void px_coordinator_destroy(px_coordinator_t **self, int flush_ms);
int px_coordinator_http_port(const px_coordinator_t *c);

#endif
