/* The coordinator's flag tables (coordinator_flags.h). */
#include "coordinator_flags.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "px_endpoint.h"
#include "px_events_spec.h"
#include "px_wire.h"

#define OPT(member) PX_FLAG_AT(px_coordinator_options_t, member)

const char *const px_coordinator_modes[] = {"sync", "diloco", "auto", NULL};
static const char *const ON_OFF[] = {"off", "on", NULL}; /* index = cfg.heartbeat_udp */

/* --events: the spec's syntax, and a file's folder (which the file is
 * created in): both wrong before the coordinator starts. */
static int events_spec_ok(const char *val, char *why, size_t len) {
    px_events_spec_t spec;
    if (px_events_spec_parse(val, &spec, why, len) != 0) return -1;
    if (spec.sink != PX_EVENTS_SINK_FILE) return 0;
    char dir[4200];
    snprintf(dir, sizeof dir, "%s", spec.path);
    char *slash = strrchr(dir, '/');
    if (!slash) snprintf(dir, sizeof dir, ".");
    else if (slash == dir) dir[1] = '\0';
    else *slash = '\0';
    struct stat st;
    if (stat(dir, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(why, len, "the folder '%s' of the event log does not exist", dir);
        return -1;
    }
    if (access(dir, W_OK | X_OK) != 0) {
        snprintf(why, len, "the folder '%s' of the event log is not writable: %s", dir, strerror(errno));
        return -1;
    }
    return 0;
}

static const px_flag_t FLAGS[] = {
    {"--bind", PX_FLAG_STR, "ENDPOINT", .max = 512, .def = "tcp://127.0.0.1:7777", .check = px_endpoint_check_bind,
     .help = "ZeroMQ endpoint workers connect to (tcp://HOST:PORT, HOST * for every interface, PORT 0 or * for a "
             "free one; or ipc://PATH)",
     OPT(cfg.bind)},
    {"--http", PX_FLAG_HOSTPORT, "HOST:PORT", .min = 0, .note = "off",
     .help = "status server; port 0 picks a free one", OPT(http)},
    {"--job", PX_FLAG_STR, "NAME", .max = 63, .def = "phalanx", .valid = px_wire_group_name_ok,
     .expect = "[A-Za-z0-9_.-]{1,63}", .help = "job id, [A-Za-z0-9_.-]{1,63}", OPT(cfg.job)},
    {"--events", PX_FLAG_STR, "SPEC", .max = 4096, .note = "none", .check = events_spec_ok,
     .help = "file:PATH, kafka:HOST:PORT[,HOST:PORT...]/TOPIC or none", OPT(cfg.events)},
    {"--spill-dir", PX_FLAG_STR, "DIR", .max = 4096, .def = ".", .help = "where undelivered Kafka events spill",
     OPT(cfg.spill_dir)},
    {"--token-file", PX_FLAG_STR, "PATH", .max = 4096, .note = "none",
     .help = "require a job token: any line of the file is admitted (workers present their file's first line); "
             "re-read when it changes and on SIGHUP, so a token is rotated without a restart",
     OPT(cfg.token_file)},
    {"--curve-secret-key-file", PX_FLAG_STR, "PATH", .max = 4096, .note = "off",
     .help = "encrypt the control plane with CURVE using this secret key (phalanxctl keygen; mode 0600)",
     OPT(curve_secret)},
    {"--authorized-keys", PX_FLAG_STR, "PATH", .max = 4096, .note = "none",
     .help = "with CURVE: public keys of the clients admitted, one per line", OPT(cfg.authorized_keys)},
    {"--insecure", PX_FLAG_SWITCH, .help = "allow a non-loopback --bind with neither CURVE nor a token",
     OPT(insecure)},
    {"--heartbeat-interval-ms", PX_FLAG_INT, "N", .min = 10, .max = 10000, .def = "100",
     .help = "interval workers heartbeat at", OPT(cfg.heartbeat_interval_ms)},
    {"--heartbeat-timeout-ms", PX_FLAG_INT, "N", .min = 50, .max = 600000, .def = "1000",
     .help = "silence after which a member is lost", OPT(cfg.heartbeat_timeout_ms)},
    {"--heartbeat-udp", PX_FLAG_CHOICE, .words = ON_OFF, .def = "on",
     .help = "offer workers sealed UDP heartbeats on the --bind address and port (UDP; each registration gets "
             "its own key); a worker whose datagrams do not arrive is told to heartbeat over ZeroMQ "
             "(docs/protocol.md)",
     OPT(cfg.heartbeat_udp)},
    {"--min-replicas", PX_FLAG_INT, "N", .min = 1, .max = 100000, .def = "1", .help = "groups needed for a quorum",
     OPT(cfg.min_replicas)},
    {"--target-groups", PX_FLAG_INT, "N", .min = 0, .max = 100000, .def = "0",
     .help = "at most N groups train; healthy groups beyond N wait as spares, out of the quorum, and take a lost "
             "or drained group's place at once (healing from a live one); 0 = every healthy group trains",
     OPT(cfg.target_groups)},
    {"--join-timeout-ms", PX_FLAG_INT, "N", .min = 0, .max = 600000, .def = "500",
     .help = "wait for healthy groups not yet joined (the first quorum always waits this long)",
     OPT(cfg.join_timeout_ms)},
    {"--rebuild-settle-ms", PX_FLAG_INT, "N", .min = 0, .max = 60000, .def = "300",
     .help = "wait before re-forming an unchanged quorum", OPT(cfg.rebuild_settle_ms)},
    {"--stall-timeout-ms", PX_FLAG_INT, "N", .min = 0, .max = 3600000, .def = "0",
     .help = "drop a quorum member that has not joined the quorum's rendezvous this long after others did; 0: "
             "adaptive, the larger of 10 s and 10 times the job's recent median step time (60 s until a step time "
             "is known)",
     OPT(cfg.stall_timeout_ms)},
    {"--metrics-groups", PX_FLAG_INT, "N", .min = 0, .max = 1000000, .def = "1000",
     .help = "/metrics gives each group series of its own (phalanx_group_*) while the job has at most N groups; "
             "past N none has, and phalanx_groups{state} still counts them",
     OPT(cfg.metrics_groups)},
    {"--mode", PX_FLAG_CHOICE, .words = px_coordinator_modes, .def = "sync",
     .help = "announced in quorums and shown by /status until groups train; the groups' own --mode decides how "
             "they train, and /status then shows it; auto: announce sync, and switch to diloco (workers started "
             "with --mode auto follow at a step boundary) when either --auto-* figure reaches its threshold, "
             "back to sync when both are below half of theirs; each switch is a new quorum and a mode_switched "
             "event",
     OPT(mode)},
};
const px_flag_table_t px_coordinator_flags = PX_FLAG_TABLE("flags (default in brackets):", FLAGS);

static const px_flag_t AUTO[] = {
    {"--auto-failures-per-hour", PX_FLAG_REAL, "F", .lo = 0, .hi = 100000, .def = "6",
     .help = "group losses per hour (over --auto-window) that switch to diloco, 0 = not a signal",
     OPT(cfg.auto_failures_per_hour)},
    {"--auto-comm-share", PX_FLAG_REAL, "S", .lo = 0, .hi = 1, .def = "0.5",
     .help = "share of step time in cross-group communication (the mean of what the groups' rank 0 report) "
             "that switches to diloco, 0 = not a signal",
     OPT(cfg.auto_comm_share)},
    {"--auto-window", PX_FLAG_INT, "SECONDS", .min = 1, .max = 86400, .scale = 1000, .def = "600",
     .help = "the window losses are counted over", OPT(cfg.auto_window_ms)},
    {"--auto-hold", PX_FLAG_INT, "SECONDS", .min = 0, .max = 86400, .scale = 1000, .def = "60",
     .help = "the least time between two switches, and from the start to the first", OPT(cfg.auto_hold_ms)},
};
const px_flag_table_t px_coordinator_auto_flags = PX_FLAG_TABLE("--mode auto:", AUTO);

/* Their defaults are the library's (PX_DEFAULT_MAX_*), set by main.c. */
static const px_flag_t LIMITS[] = {
    {"--max-members", PX_FLAG_INT, "N", .min = 1, .max = 1000000, .help = "members (live and recently lost)",
     OPT(cfg.max_members)},
    {"--max-store-keys", PX_FLAG_INT, "N", .min = 1, .max = 10000000, .help = "rendezvous keys per quorum",
     OPT(cfg.max_store_keys)},
    {"--max-store-bytes", PX_FLAG_INT, "N", .min = 65536, .max = 16LL << 30,
     .help = "rendezvous key+value bytes per quorum", OPT(cfg.max_store_bytes)},
    {"--max-store-waiters", PX_FLAG_INT, "N", .min = 1, .max = 10000000, .help = "store reads waiting per quorum",
     OPT(cfg.max_store_waiters)},
};
const px_flag_table_t px_coordinator_limit_flags =
    PX_FLAG_TABLE("limits (past one, requests are refused RESOURCE_LIMIT, event limit_reached):", LIMITS);
