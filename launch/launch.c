/* phalanx-launch: the local supervisor and the embedded default.
 *
 * Starts a coordinator (unless --coordinator names one) and groups x ranks
 * workers, restarts any worker that exits abnormally (with backoff and a
 * restart limit), can kill workers at random moments for chaos drills
 * (seeded), forwards SIGINT/SIGTERM, and turns what the workers print into
 * one progress line per committed step plus a line for every drop and heal.
 * It ends with one JSON summary line. Kubernetes plays this role in a cluster
 * (deploy/).
 *
 * Workers' rank 0 print machine-readable lines on stdout ("progress ...",
 * "event ...", "final ...", or with --progress-format json JSON objects
 * {"kind":"progress",...} with the same keys), read here through pipes and
 * kept as they came in LOG_DIR/worker-GROUP-0.out (what `phalanxctl plot`
 * draws); everything else they log goes to files under --log-dir.
 *
 * Every child dies with the launcher, even one killed with SIGKILL (a
 * parent-death signal, px_child.h): a job never outlives its supervisor.
 *
 * A worker that exits with the configuration-error status 2 (or cannot be
 * run at all) is not restarted: it would fail the same way. The job stops
 * with the end of that worker's log on the terminal.
 *
 * Success means the job reached --steps: some group printed its final line
 * with steps equal to --steps. Anything else (every worker left early, a
 * configuration error, a worker past --max-restarts) ends with a message
 * saying why and a non-zero exit status. */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <math.h>
#include <stdarg.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "coordinator_flags.h"
#include "px_child.h"
#include "px_client_flags.h"
#include "px_buf.h"
#include "px_file.h"
#include "px_flags.h"
#include "px_keys.h"
#include "px_time.h"
#include "ports.h"
#include "px_wire.h"
#include "worker_flags.h"

static const char *PROG = "phalanx-launch";
static volatile sig_atomic_t g_signal;

#define MAX_WORKERS 1024
#define MAX_PASS 64
#define LINE_MAX_LEN 1024
#define FINISH_GRACE_MS 15000
#define CHAOS_STEP_JITTER_MS 250.0
#define WORKER_EXIT_CONFIG 2 /* phalanx-worker: cannot work as configured, do not restart */
#define EXEC_FAILED 127      /* the child could not run the program at all */
#define LOG_TAIL_LINES 6
#define EXIT_INCOMPLETE 1    /* the job stopped before --steps */
#define EXIT_CONFIG 2        /* a worker reported a configuration error (or a bad flag here) */

typedef struct {
    char group[64];
    int rank;
    pid_t pid;
    int fd;                 /* stdout pipe (rank 0) or -1 */
    FILE *out;              /* LOG_DIR/worker-GROUP-0.out: the pipe's lines, kept; NULL until the first */
    char buf[LINE_MAX_LEN];
    size_t used;
    int done;               /* exited 0 after "final" */
    int restarts;
    int chaos_killed;       /* the last death was ours (chaos): restart without escalating */
    int64_t restart_at_ms;  /* > 0: waiting to restart */
    int64_t started_ms;
} worker_t;

typedef struct {
    int groups, spares, max_restarts, restart_backoff_ms;
    int ranks, steps;                      /* --ranks-per-group and --steps as numbers */
    /* What is passed on, as given: to every worker (WORKER_PASS), to the
     * coordinator started here (COORDINATOR_PASS, AUTO_PASS). */
    const char *ranks_text, *steps_text, *model, *model_config, *data, *seed, *connect_timeout, *ledger;
    const char *ckpt_dir, *ckpt_every, *ckpt_every_s, *ckpt_keep, *mode;
    const char *bind, *http, *job, *events, *insecure;
    const char *auto_failures, *auto_comm_share, *auto_window, *auto_hold;
    const char *coordinator;               /* given: join that coordinator instead of starting one */
    int join;
    const char *log_dir;
    const char *group_prefix;              /* the groups started here: PREFIX0, PREFIX1, ... */
    uint64_t chaos_seed;
    double chaos_every_s;
    int chaos_every_steps;
    int chaos_max_kills;
    int64_t chaos_until_step;
    const char *pass[MAX_PASS];
    int n_pass;
    int quiet;
    int progress;                          /* PROGRESS_*: how committed steps are shown */
    int progress_every_s;                  /* PROGRESS_INTERVAL: seconds between progress lines */
    int curve;                             /* throwaway CURVE keys in LOG_DIR/curve (the default) */
    int use_token;                         /* instead, a throwaway job token in LOG_DIR/credentials/token */
    char token_file[4200];
    const char *curve_secret, *curve_server; /* workers' key and the coordinator's public key */
    char curve_dir[4200];
    char bindir[4096];
    px_flags_parsed_t given;               /* which flags were given */
} launch_cfg_t;

typedef struct {
    launch_cfg_t cfg;
    worker_t w[MAX_WORKERS];
    int n;
    pid_t coord_pid;
    int64_t last_step;
    double last_loss, eval_loss, final_loss;
    int failures, heals, finals;
    int finals_full;        /* final lines with steps == --steps: the job's result exists */
    int stop_rc;            /* > 0: the job cannot go on; stop and exit with this */
    int64_t *commit_ms;
    int n_commits, cap_commits;
    int64_t *fail_ms;
    int n_fail, cap_fail;
    FILE *events_in;
    uint64_t rng;
    int64_t next_kill_ms;
    int64_t next_kill_step; /* step mode: arm the next kill at this step */
    int kill_armed;
    int kills;
    int last_groups;        /* groups that committed the last step */
    int64_t kill_step;      /* last_step when the last kill happened */
    int64_t t_start;
    int64_t finished_ms; /* when the first group reported its final line */
    int checkpoints;     /* checkpoints saved */
    int mode_switches;   /* mode_switched events (--mode auto) */
    double loss_ema, tok_s_ema; /* smoothed over the last ~20 committed steps (NAN before the first) */
    int64_t last_progress_ms;   /* PROGRESS_INTERVAL: when the last line was printed */
} launch_t;

enum { PROGRESS_INTERVAL, PROGRESS_STEPS, PROGRESS_JSON }; /* --progress, in PROGRESS_WORDS' order */
static const char *const PROGRESS_WORDS[] = {"interval", "steps", "json", NULL};
#define SMOOTHING 0.1 /* the exponential moving averages' weight of a new step: about 20 steps' memory */

static void on_signal(int sig) { g_signal = sig; }

#define CFG(member) PX_FLAG_AT(launch_cfg_t, member)

/* The job: what phalanx-launch acts on itself (it starts the ranks,
 * prepares the data, reads the steps), passed to every worker as it is
 * here; checked with phalanx-worker's entries, as the tables below. */
static const px_flag_t JOB[] = {
    {"--ranks-per-group", PX_FLAG_LIKE, .like = &px_agent_flags, .help = "ranks per group", CFG(ranks_text)},
    {"--steps", PX_FLAG_LIKE, .like = &px_train_flags, .def = "200", .help = "optimizer steps", CFG(steps_text)},
    {"--model", PX_FLAG_LIKE, .like = &px_train_flags, .note = "small",
     .help = "tiny, small, gpt2-124m, a JSON model config or an llm.c model file", CFG(model)},
    {"--model-config", PX_FLAG_LIKE, .like = &px_train_flags, .note = "none",
     .help = "a JSON model config (Hugging Face GPT-2 config.json keys) instead of --model", CFG(model_config)},
    {"--data", PX_FLAG_LIKE, .like = &px_train_flags,
     .help = "token shards; when not given, data/demo, prepared from the demo corpus on first use", CFG(data)},
};
static const px_flag_table_t JOB_FLAGS = PX_FLAG_TABLE("the job (every worker gets these flags):", JOB);

/* Passed to every worker when given (pass_on). */
static const px_flag_t WORKER_PASS[] = {
    {"--seed", PX_FLAG_LIKE, .like = &px_train_flags, .help = "seed of initialisation and data order", CFG(seed)},
    {"--mode", PX_FLAG_LIKE, .like = &px_worker_train_flags,
     .help = "how the groups train, given to the coordinator and every worker (a worker --mode after -- "
             "wins); auto: the coordinator switches the job between sync and diloco on failures or "
             "communication",
     CFG(mode)},
    {"--connect-timeout", PX_FLAG_LIKE, .like = &px_agent_flags,
     .help = "workers give up when no coordinator answers within S seconds, 0 = wait forever; meanwhile they "
             "say whom they wait for",
     CFG(connect_timeout)},
    {"--sample-ledger", PX_FLAG_LIKE, .like = &px_worker_train_flags,
     .help = "workers append the samples of each committed step", CFG(ledger)},
    {"--checkpoint-dir", PX_FLAG_LIKE, .like = &px_worker_train_flags,
     .help = "workers restore from and save checkpoints in DIR (%g: the group's name, for a folder per group)",
     CFG(ckpt_dir)},
    {"--checkpoint-every", PX_FLAG_LIKE, .like = &px_worker_train_flags, .help = "save every N committed steps",
     CFG(ckpt_every)},
    {"--checkpoint-every-s", PX_FLAG_LIKE, .like = &px_worker_train_flags,
     .help = "save at the first step after S seconds since the last save", CFG(ckpt_every_s)},
    {"--checkpoint-keep", PX_FLAG_LIKE, .like = &px_worker_train_flags, .help = "checkpoints kept",
     CFG(ckpt_keep)},
};
static const px_flag_table_t WORKER_PASS_FLAGS = PX_FLAG_TABLE("", WORKER_PASS);

/* The coordinator started here: its endpoint and job (which the workers
 * are told too), and what is passed to it as it is here. */
static const px_flag_t COORDINATOR[] = {
    {"--bind", PX_FLAG_LIKE, .like = &px_coordinator_flags, .help = "endpoint of the coordinator started here",
     CFG(bind)},
    {"--job", PX_FLAG_LIKE, .like = &px_coordinator_flags, .help = "job name (workers get it too)", CFG(job)},
};
static const px_flag_table_t COORDINATOR_FLAGS = PX_FLAG_TABLE("the coordinator started here:", COORDINATOR);

static const px_flag_t COORDINATOR_PASS[] = {
    {"--http", PX_FLAG_LIKE, .like = &px_coordinator_flags, .def = "127.0.0.1:8080",
     .help = "coordinator status server", CFG(http)},
    {"--events", PX_FLAG_LIKE, .like = &px_coordinator_flags, .note = "file:LOG_DIR/events.jsonl",
     .help = "coordinator event log (file:PATH, kafka:..., none)", CFG(events)},
    {"--insecure", PX_FLAG_LIKE, .like = &px_coordinator_flags,
     .help = "run the coordinator started here without credentials (no CURVE keys): any process that reaches "
             "--bind, on loopback every local user, can register, join the quorum and end the job; also lets a "
             "non-loopback --bind start (see docs/security.md)",
     CFG(insecure)},
};
static const px_flag_table_t COORDINATOR_PASS_FLAGS = PX_FLAG_TABLE("", COORDINATOR_PASS);

/* With --mode auto: passed to the coordinator started here when given (pass_on). */
static const px_flag_t AUTO_PASS[] = {
    {"--auto-failures-per-hour", PX_FLAG_LIKE, .like = &px_coordinator_auto_flags,
     .help = "group losses per hour that switch to diloco", CFG(auto_failures)},
    {"--auto-comm-share", PX_FLAG_LIKE, .like = &px_coordinator_auto_flags,
     .help = "share of step time in cross-group communication that switches to diloco", CFG(auto_comm_share)},
    {"--auto-window", PX_FLAG_LIKE, .like = &px_coordinator_auto_flags, .help = "the window losses are counted over",
     CFG(auto_window)},
    {"--auto-hold", PX_FLAG_LIKE, .like = &px_coordinator_auto_flags, .help = "the least time between two switches",
     CFG(auto_hold)},
};
static const px_flag_table_t AUTO_PASS_FLAGS =
    PX_FLAG_TABLE("--mode auto: the coordinator's thresholds, window and hold (phalanx-coordinator --help):",
                  AUTO_PASS);

/* Joining a running coordinator: where, and the workers' CURVE keys. */
static const px_flag_t JOIN[] = {
    {"--coordinator", PX_FLAG_LIKE, .like = &px_client_flags, .note = "start one",
     .help = "join a running coordinator instead of starting one", CFG(coordinator)},
    {"--curve", PX_FLAG_SWITCH,
     .help = "encrypt and authenticate the control plane with CURVE keys made for this job in LOG_DIR/curve "
             "(0700): the default for the coordinator started here; --insecure turns it off",
     CFG(curve)},
    {"--curve-secret-key-file", PX_FLAG_LIKE, .like = &px_client_flags,
     .help = "with --coordinator: the workers' CURVE secret key", CFG(curve_secret)},
    {"--coordinator-public-key-file", PX_FLAG_LIKE, .like = &px_client_flags,
     .help = "with --coordinator: that coordinator's public key", CFG(curve_server)},
};
static const px_flag_table_t JOIN_FLAGS = PX_FLAG_TABLE("", JOIN);

static const px_flag_t LAUNCH[] = {
    {"--groups", PX_FLAG_INT, "R", .min = 1, .max = 256, .def = "3", .help = "replica groups", CFG(groups)},
    {"--spares", PX_FLAG_INT, "S", .min = 0, .max = 256, .def = "0",
     .help = "S more groups that wait as spares (the coordinator's --target-groups is --groups): a lost group's "
             "place goes to one at once, and a replaced group comes back as a spare",
     CFG(spares)},
    {"--group-prefix", PX_FLAG_STR, "NAME", .max = 60, .valid = px_wire_group_name_ok,
     .expect = "[A-Za-z0-9_.-]{1,60}", .def = "g",
     .help = "the groups started here are NAME0, NAME1, ...; launchers on several machines that join one "
             "--coordinator each need their own",
     CFG(group_prefix)},
    {"--chaos-kill-every", PX_FLAG_REAL, "S", .lo = 0, .hi = 86400, .def = "0",
     .help = "SIGKILL a random worker about every S seconds, 0 = off; never one whose loss would leave no "
             "group holding the job's state",
     CFG(chaos_every_s)},
    {"--chaos-kill-every-steps", PX_FLAG_INT, "K", .min = 0, .max = 100000000, .def = "0",
     .help = "instead: about every K committed steps, at a random moment within 250 ms (independent of "
             "machine speed), 0 = off",
     CFG(chaos_every_steps)},
    {"--chaos-seed", PX_FLAG_INT, "N", .min = 0, .max = INT64_MAX, .def = "1", .help = "seed of the chaos schedule",
     CFG(chaos_seed)},
    {"--chaos-max-kills", PX_FLAG_INT, "N", .min = 0, .max = 1000000, .def = "0",
     .help = "stop killing after N kills, 0 = no limit", CFG(chaos_max_kills)},
    {"--chaos-until-step", PX_FLAG_INT, "N", .min = 0, .max = INT64_MAX, .def = "0",
     .help = "no kills once step N is committed, 0 = no limit", CFG(chaos_until_step)},
    {"--max-restarts", PX_FLAG_INT, "N", .min = 0, .max = 100000, .def = "100",
     .help = "restarts per worker before giving up", CFG(max_restarts)},
    {"--restart-backoff-ms", PX_FLAG_INT, "N", .min = 0, .max = 60000, .def = "200",
     .help = "first restart delay, doubled per quick crash (not per chaos kill)", CFG(restart_backoff_ms)},
    {"--log-dir", PX_FLAG_STR, "DIR", .max = 4000, .def = "phalanx-run", .help = "worker and coordinator logs",
     CFG(log_dir)},
    {"--quiet", PX_FLAG_SWITCH, .help = "no progress lines, only events and the summary", CFG(quiet)},
    {"--progress", PX_FLAG_CHOICE, .words = PROGRESS_WORDS, .def = "interval",
     .help = "interval: a progress line every --progress-every-s seconds (step/total, smoothed loss and tokens/s, "
             "groups, ETA); steps: a line per committed step; json: one JSON object a line for every line "
             "(docs/operations.md has the schema)",
     CFG(progress)},
    {"--progress-every-s", PX_FLAG_INT, "S", .min = 1, .max = 3600, .def = "5",
     .help = "seconds between progress lines with --progress interval", CFG(progress_every_s)},
};
static const px_flag_table_t LAUNCH_FLAGS = PX_FLAG_TABLE("flags (default in brackets):", LAUNCH);

static const char USAGE[] =
    "usage: phalanx-launch [flags] [-- extra worker flags]\n\n"
    "Runs a phalanx job on this machine: a coordinator and groups x ranks workers,\n"
    "restarting workers that die. Prints a line per committed step, every drop and\n"
    "heal, and a final JSON summary.\n";

static const char EPILOGUE[] =
    "Flags after -- go to every worker (e.g. -- --global-batch 24 --lr 3e-4).\n"
    "SIGINT/SIGTERM: forwarded to every process; the summary is printed.\n"
    "A worker exiting with status 2 (bad flag, model or data; no coordinator) is not restarted:\n"
    "the job stops and its log's last lines are shown. Every process started here dies with\n"
    "this one, even after SIGKILL.\n"
    "Exit status: 0 the job reached --steps; 1 it did not; 2 a configuration error;\n"
    "130/143 stopped by SIGINT/SIGTERM.\n";

/* The flags of table t to pass on, as argv words from argv[n] on (a
 * switch: its name alone); returns the new n. all: every one with a value;
 * else only those given here: the others stand at the other program's
 * default, which is left to it (and to its PHALANX_* variables). */
static int pass_on(const px_flag_table_t *t, const launch_cfg_t *c, int all, const char **argv, int n) {
    for (int i = 0; i < t->n; i++) {
        const px_flag_t *f = &t->flags[i];
        const char *v = *(const char *const *)((const char *)c + f->offset);
        if (!v || !(all || px_flags_given(&c->given, f->name))) continue;
        argv[n++] = f->name;
        if (v != f->name) argv[n++] = v;
    }
    return n;
}

static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static double rng_unit(uint64_t *s) { return (double)(rng_next(s) >> 11) / 9007199254740992.0; }

static void append_ms(int64_t **arr, int *n, int *cap, int64_t v) {
    if (*n == *cap) {
        int nc = *cap ? *cap * 2 : 256;
        int64_t *na = realloc(*arr, (size_t)nc * sizeof *na);
        if (!na) return;
        *arr = na;
        *cap = nc;
    }
    (*arr)[(*n)++] = v;
}

/* A line on the terminal: "[   12.3s] text", or with --progress json
 * {"kind":"log","elapsed_s":12.3,"text":"..."}. */
static void say(launch_t *L, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void say(launch_t *L, const char *fmt, ...) {
    double t = (double)(px_now_ms() - L->t_start) / 1000.0;
    va_list ap;
    va_start(ap, fmt);
    if (L->cfg.progress == PROGRESS_JSON) {
        px_buf_t text, line;
        px_buf_init(&text);
        px_buf_vprintf(&text, fmt, ap);
        char *s = px_buf_take(&text, NULL);
        px_buf_init(&line);
        px_buf_printf(&line, "{\"kind\":\"log\",\"elapsed_s\":%.1f,\"text\":", t);
        px_buf_json_str(&line, s ? s : "");
        px_buf_append(&line, "}", 1);
        char *out = px_buf_take(&line, NULL);
        if (out) puts(out);
        free(out);
        free(s);
    } else {
        printf("[%7.1fs] ", t);
        vprintf(fmt, ap);
        printf("\n");
    }
    va_end(ap);
    fflush(stdout);
}

/* ---- processes ---------------------------------------------------------- */

static pid_t spawn(const char *path, char *const argv[], const char *log_path, int *out_fd) {
    int pfd[2] = {-1, -1};
    if (out_fd && pipe(pfd) != 0) return -1;
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        px_child_die_with_parent(parent);
        setpgid(0, 0); /* our SIGINT is forwarded deliberately, not broadcast by the terminal */
        int log = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (log >= 0) dup2(log, 2);
        if (out_fd) {
            dup2(pfd[1], 1);
            close(pfd[0]);
            close(pfd[1]);
        } else if (log >= 0) {
            dup2(log, 1);
        }
        execv(path, argv);
        fprintf(stderr, "%s: cannot run %s: %s\n", PROG, path, strerror(errno));
        _exit(127);
    }
    if (out_fd) {
        close(pfd[1]);
        fcntl(pfd[0], F_SETFL, O_NONBLOCK);
        fcntl(pfd[0], F_SETFD, FD_CLOEXEC);
        *out_fd = pfd[0];
    }
    return pid;
}

static void worker_log_path(const launch_t *L, const worker_t *w, char *out, size_t len) {
    snprintf(out, len, "%s/worker-%s-%d.log", L->cfg.log_dir, w->group, w->rank);
}

static void start_worker(launch_t *L, worker_t *w) {
    const launch_cfg_t *c = &L->cfg;
    char path[4200], log[4200], rank[16];
    snprintf(path, sizeof path, "%s/phalanx-worker", c->bindir);
    worker_log_path(L, w, log, sizeof log);
    snprintf(rank, sizeof rank, "%d", w->rank);
    const char *argv[16 + 2 * (sizeof JOB / sizeof *JOB + sizeof WORKER_PASS / sizeof *WORKER_PASS) + MAX_PASS];
    int n = 0;
    argv[n++] = path;
    argv[n++] = "--coordinator", argv[n++] = c->join ? c->coordinator : c->bind;
    argv[n++] = "--group", argv[n++] = w->group;
    argv[n++] = "--rank", argv[n++] = rank;
    argv[n++] = "--job", argv[n++] = c->job;
    n = pass_on(&JOB_FLAGS, c, 1, argv, n);
    n = pass_on(&WORKER_PASS_FLAGS, c, 0, argv, n); /* before the flags after --, which win */
    if (c->curve_secret)
        argv[n++] = "--curve-secret-key-file", argv[n++] = c->curve_secret,
        argv[n++] = "--coordinator-public-key-file", argv[n++] = c->curve_server;
    if (c->use_token) argv[n++] = "--token-file", argv[n++] = c->token_file;
    for (int i = 0; i < c->n_pass; i++) argv[n++] = c->pass[i];
    argv[n] = NULL;
    w->used = 0;
    w->pid = spawn(path, (char *const *)argv, log, w->rank == 0 ? &w->fd : NULL);
    w->started_ms = px_now_ms();
    w->restart_at_ms = 0;
    if (w->pid < 0) say(L, "cannot start worker %s/%d: %s", w->group, w->rank, strerror(errno));
}

/* Prints the last lines of a log (a worker's, the coordinator's): what it
 * said before it exited. */
static void show_log_tail(launch_t *L, const char *path) {
    char buf[8192];
    FILE *f = fopen(path, "r");
    if (!f) {
        say(L, "    (no log at %s: %s)", path, strerror(errno));
        return;
    }
    long size = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : 0;
    long from = size > (long)sizeof buf - 1 ? size - (long)sizeof buf + 1 : 0;
    fseek(f, from, SEEK_SET);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    while (n > 0 && buf[n - 1] == '\n') buf[--n] = '\0';
    char *start = buf + n;
    for (int lines = 0; start > buf && lines < LOG_TAIL_LINES; start--)
        if (start[-1] == '\n' && ++lines == LOG_TAIL_LINES) break;
    if (from > 0 && start == buf) start += strcspn(buf, "\n") + (buf[strcspn(buf, "\n")] != '\0'); /* partial line */
    say(L, "    %s ends with:", path);
    for (char *line = strtok(start, "\n"); line; line = strtok(NULL, "\n")) say(L, "    | %s", line);
}

/* A default address (--bind tcp://HOST:PORT, --http HOST:PORT) whose port
 * is taken here moves to a free one, said aloud; prefix is "tcp://" or "". */
static const char *move_taken_default(launch_t *L, const char *flag, const char *addr, const char *prefix,
                                      char *buf, size_t cap) {
    if (px_flags_given(&L->cfg.given, flag) || strncmp(addr, prefix, strlen(prefix)) != 0) return addr;
    const char *hostport = addr + strlen(prefix), *colon = strrchr(hostport, ':');
    char host[64];
    if (!colon || (size_t)(colon - hostport) >= sizeof host) return addr;
    snprintf(host, sizeof host, "%.*s", (int)(colon - hostport), hostport);
    int other = 0;
    if (px_port_taken(host, atoi(colon + 1), &other) != 1) return addr;
    snprintf(buf, cap, "%s%s:%d", prefix, host, other);
    say(L, "! %s %s is taken on this machine (another job?): using %s instead (give %s to choose)", flag, addr, buf,
        flag);
    return buf;
}

/* What follows `prefix` on the last line of a log that starts with it ("":
 * none): the coordinator's fatal error ("phalanx-coordinator: "),
 * phalanx-data's summary ("summary "). */
static void last_line_after(const char *log, const char *prefix, char *out, size_t cap) {
    out[0] = '\0';
    FILE *f = fopen(log, "r");
    if (!f) return;
    char line[1024];
    size_t n = strlen(prefix);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, prefix, n)) snprintf(out, cap, "%s", line + n);
    fclose(f);
    out[strcspn(out, "\n")] = '\0';
}

static int start_coordinator(launch_t *L) {
    const launch_cfg_t *c = &L->cfg;
    char path[4200], log[4200];
    snprintf(path, sizeof path, "%s/phalanx-coordinator", c->bindir);
    snprintf(log, sizeof log, "%s/coordinator.log", c->log_dir);
    char key[4300], authorized[4300];
    snprintf(key, sizeof key, "%s/coordinator.key", c->curve_dir);
    snprintf(authorized, sizeof authorized, "%s/authorized_keys", c->curve_dir);
    const char *argv[48] = {path, "--spill-dir", c->log_dir};
    int n = 3;
    if (px_flags_given(&c->given, "--mode")) argv[n++] = "--mode", argv[n++] = c->mode;
    n = pass_on(&COORDINATOR_FLAGS, c, 1, argv, n);
    n = pass_on(&COORDINATOR_PASS_FLAGS, c, 1, argv, n);
    char target[16];
    if (c->spares > 0) {
        snprintf(target, sizeof target, "%d", c->groups);
        argv[n++] = "--target-groups", argv[n++] = target;
    }
    n = pass_on(&AUTO_PASS_FLAGS, c, 0, argv, n); /* --auto-*: only with --mode auto there */
    if (c->curve) argv[n++] = "--curve-secret-key-file", argv[n++] = key, argv[n++] = "--authorized-keys", argv[n++] = authorized;
    if (c->use_token) argv[n++] = "--token-file", argv[n++] = c->token_file;
    argv[n] = NULL;
    L->coord_pid = spawn(path, (char *const *)argv, log, NULL);
    if (L->coord_pid < 0) return -1;
    px_sleep_ms(200);
    int st;
    if (waitpid(L->coord_pid, &st, WNOHANG) == L->coord_pid) {
        /* Nothing ran yet: whatever stopped it (an address taken or not
         * here, a bad flag, a key) is this launch's configuration. */
        char why[1024];
        last_line_after(log, "phalanx-coordinator: ", why, sizeof why);
        say(L, "  x the coordinator could not start (exit status %d): %s", WIFEXITED(st) ? WEXITSTATUS(st) : -1,
            why[0] ? why : "it said nothing; its log follows");
        show_log_tail(L, log);
        L->coord_pid = 0;
        return EXIT_CONFIG;
    }
    return 0;
}

/* ---- what the workers say ---------------------------------------------- */

/* The value of `key` in a worker's line: " key=VALUE" in a text line, or
 * "key":VALUE in a JSON one (a string's quotes dropped; the workers' strings
 * hold no escapes or commas other than a group list's). */
static const char *field(const char *line, const char *key, char *out, size_t len) {
    char pat[64];
    int json = line[0] == '{';
    snprintf(pat, sizeof pat, json ? "\"%s\":" : " %s=", key);
    const char *p = strstr(line, pat);
    if (!p) return NULL;
    p += strlen(pat);
    size_t n;
    if (json && *p == '"') n = strcspn(++p, "\"");
    else n = strcspn(p, json ? ",}" : " \n");
    if (n >= len) n = len - 1;
    memcpy(out, p, n);
    out[n] = '\0';
    return out;
}

/* Whether a worker's line is of this kind: "KIND ..." or "event kind=KIND"
 * in text, {"kind":"KIND",...} in JSON. */
static int is_kind(const char *line, const char *text_prefix, const char *kind) {
    char pat[64];
    snprintf(pat, sizeof pat, "{\"kind\":\"%s\"", kind);
    return !strncmp(line, text_prefix, strlen(text_prefix)) || !strncmp(line, pat, strlen(pat));
}

/* JSON has no NaN: an unknown number is null. */
static void json_num(char *out, size_t len, double v) {
    if (isnan(v) || isinf(v)) snprintf(out, len, "null");
    else snprintf(out, len, "%.6f", v);
}

/* An exponential moving average that starts at its first finite value. */
static void smooth(double *avg, double v) {
    if (!isfinite(v)) return;
    *avg = isnan(*avg) ? v : *avg + SMOOTHING * (v - *avg);
}

/* Seconds to --steps at the pace of the last minute of commits (-1 unknown). */
static double eta_s(const launch_t *L) {
    if (L->n_commits < 2 || L->last_step >= L->cfg.steps) return L->last_step >= L->cfg.steps ? 0 : -1;
    int64_t now = L->commit_ms[L->n_commits - 1];
    int k = L->n_commits - 1;
    while (k > 0 && now - L->commit_ms[k - 1] <= 60000) k--;
    int steps = L->n_commits - 1 - k;
    if (steps < 1) return -1;
    return (double)(L->cfg.steps - L->last_step) * (double)(now - L->commit_ms[k]) / 1000.0 / steps;
}

static void format_duration(double s, char *out, size_t len) {
    if (s < 0) snprintf(out, len, "?");
    else if (s < 60) snprintf(out, len, "%.0fs", s);
    else if (s < 3600) snprintf(out, len, "%dm%02ds", (int)s / 60, (int)s % 60);
    else snprintf(out, len, "%dh%02dm", (int)(s / 3600), (int)s % 3600 / 60);
}

/* The committed step just read, as --progress says: every step, or every
 * --progress-every-s seconds (and the first and last steps), or JSON. */
static void show_progress(launch_t *L, long long quorum, double tok_s, int has_eval) {
    const launch_cfg_t *c = &L->cfg;
    int64_t now = px_now_ms();
    if (c->quiet) return;
    double eta = eta_s(L);
    if (c->progress == PROGRESS_JSON) {
        char loss[32], ls[32], ts[32], tss[32], ev[32], et[32];
        json_num(loss, sizeof loss, L->last_loss);
        json_num(ls, sizeof ls, L->loss_ema);
        json_num(ts, sizeof ts, tok_s);
        json_num(tss, sizeof tss, L->tok_s_ema);
        json_num(ev, sizeof ev, has_eval ? L->eval_loss : NAN);
        json_num(et, sizeof et, eta);
        printf("{\"kind\":\"progress\",\"elapsed_s\":%.1f,\"step\":%lld,\"steps\":%d,\"loss\":%s,"
               "\"loss_smoothed\":%s,\"tok_s\":%s,\"tok_s_smoothed\":%s,\"groups\":%d,\"groups_started\":%d,"
               "\"quorum_id\":%lld,\"eta_s\":%s,\"eval_loss\":%s}\n",
               (double)(now - L->t_start) / 1000.0, (long long)L->last_step, c->steps, loss, ls, ts, tss,
               L->last_groups, c->groups, quorum, eta < 0 ? "null" : et, ev);
        fflush(stdout);
        return;
    }
    /* Groups in the step, of the job's; joining a coordinator, the job may
     * have groups other launchers started, so say how many are ours. */
    char groups[48];
    if (c->join) snprintf(groups, sizeof groups, "%d (%d started here)", L->last_groups, c->groups);
    else snprintf(groups, sizeof groups, "%d/%d", L->last_groups, c->groups);
    if (c->progress == PROGRESS_STEPS) {
        say(L, "step %5lld | groups %s | loss %.4f | %.0f tok/s | quorum %lld%s%.4f", (long long)L->last_step,
            groups, L->last_loss, tok_s, quorum, has_eval ? " | eval " : "", has_eval ? L->eval_loss : 0.0);
        return;
    }
    int first = L->n_commits == 1, last = L->last_step >= c->steps;
    if (!first && !last && !has_eval && now - L->last_progress_ms < (int64_t)c->progress_every_s * 1000) return;
    L->last_progress_ms = now;
    char eta_text[32], ev[48] = "";
    format_duration(eta, eta_text, sizeof eta_text);
    if (has_eval) snprintf(ev, sizeof ev, " | eval %.4f", L->eval_loss);
    say(L, "step %lld/%d (%3.0f%%) | loss %.4f (smoothed %.4f) | %.0f tok/s (smoothed) | groups %s | quorum "
           "%lld | ETA %s%s",
        (long long)L->last_step, c->steps, 100.0 * (double)L->last_step / c->steps, L->last_loss, L->loss_ema,
        L->tok_s_ema, groups, quorum, eta_text, ev);
}

static void on_line(launch_t *L, worker_t *w, const char *line) {
    char a[64], b[64], c[64], d[64], e[64], ep[512];
    if (is_kind(line, "progress ", "progress")) {
        long long step = field(line, "step", a, sizeof a) ? atoll(a) : -1;
        if (step > L->last_step) {
            L->last_step = step;
            L->last_loss = field(line, "loss", b, sizeof b) ? atof(b) : NAN;
            L->last_groups = field(line, "groups", c, sizeof c) ? atoi(c) : 0;
            append_ms(&L->commit_ms, &L->n_commits, &L->cap_commits, px_now_ms());
            int has_eval = field(line, "eval_loss", e, sizeof e) != NULL;
            if (has_eval) L->eval_loss = atof(e);
            double tok_s = field(line, "tok_s", d, sizeof d) ? atof(d) : NAN;
            smooth(&L->loss_ema, L->last_loss);
            smooth(&L->tok_s_ema, tok_s);
            show_progress(L, field(line, "quorum", a, sizeof a) ? atoll(a) : -1, tok_s, has_eval);
        }
    } else if (is_kind(line, "event kind=outer_step", "outer_step")) {
        char f[32]; /* Streaming DiLoCo: which fragment ("0/1" without) */
        int streaming = field(line, "fragment", f, sizeof f) && strlen(f) > 2 && strcmp(f + strlen(f) - 2, "/1") != 0;
        say(L, "  * outer step %s at step %s: groups %s, %s with a round to give | loss %s | %s bytes sent%s%s",
            field(line, "outer", a, sizeof a) ? a : "?", field(line, "step", b, sizeof b) ? b : "?",
            field(line, "groups", ep, sizeof ep) ? ep : "?", field(line, "contributors", c, sizeof c) ? c : "?",
            field(line, "loss", d, sizeof d) ? d : "?", field(line, "wire_bytes", e, sizeof e) ? e : "?",
            streaming ? " | fragment " : "", streaming ? f : "");
    } else if (!strncmp(line, "sample ", 7)) { /* --sample-every: the text as the worker escaped it */
        const char *text = strstr(line, " text=");
        say(L, "  > sample at step %s: %s", field(line, "step", a, sizeof a) ? a : "?", text ? text + 6 : "?");
    } else if (!strncmp(line, "event kind=step_failed", 22)) {
        say(L, "  ! group %s: step %s failed (%s), retrying without the lost group", w->group,
            field(line, "step", a, sizeof a) ? a : "?", field(line, "status", b, sizeof b) ? b : "?");
    } else if (!strncmp(line, "event kind=healed", 17)) {
        L->heals++;
        say(L, "  + group %s healed from group %s at step %s in %s ms", w->group,
            field(line, "source", a, sizeof a) ? a : "?", field(line, "step", b, sizeof b) ? b : "?",
            field(line, "ms", c, sizeof c) ? c : "?");
    } else if (!strncmp(line, "event kind=checkpoint_saved", 27)) {
        L->checkpoints++;
        say(L, "  = group %s saved a checkpoint at step %s: %s (%s MB/s)", w->group, field(line, "step", a, sizeof a) ? a : "?",
            field(line, "path", ep, sizeof ep) ? ep : "?", field(line, "mb_s", b, sizeof b) ? b : "?");
    } else if (!strncmp(line, "event kind=checkpoint_restored", 30)) {
        say(L, "  = group %s restored step %s from %s", w->group, field(line, "step", a, sizeof a) ? a : "?",
            field(line, "path", ep, sizeof ep) ? ep : "?");
    } else if (!strncmp(line, "event kind=checkpoint_deferred", 30)) {
        say(L, "  ! group %s: the checkpoint due at step %s is deferred: the save of step %s still writes, %s s after "
               "it began; training goes on", w->group, field(line, "step", a, sizeof a) ? a : "?",
            field(line, "writing_step", b, sizeof b) ? b : "?", field(line, "interval_s", c, sizeof c) ? c : "?");
    } else if (!strncmp(line, "event kind=checkpoint_slow", 26)) {
        const char *hint = strstr(line, " hint=");
        say(L, "  ! group %s: the save of step %s took %s s, longer than the interval (%s s): %s would keep up with "
               "this disk", w->group, field(line, "step", a, sizeof a) ? a : "?",
            field(line, "write_s", b, sizeof b) ? b : "?", field(line, "interval_s", c, sizeof c) ? c : "?",
            hint ? hint + 6 : "a longer interval");
    } else if (!strncmp(line, "event kind=checkpoint_", 22)) { /* failed, rejected: the line says it all */
        say(L, "  ! group %s: %s", w->group, line + 11);
    } else if (!strncmp(line, "event kind=waiting_coordinator", 30)) {
        long long limit = field(line, "timeout_s", c, sizeof c) ? atoll(c) : -1;
        char until[64];
        if (limit > 0) snprintf(until, sizeof until, "gives up after %lld s", limit);
        else snprintf(until, sizeof until, "waits forever");
        say(L, "  ? %s/%d waiting for the coordinator at %s: no answer for %s s (%s)", w->group, w->rank,
            field(line, "coordinator", ep, sizeof ep) ? ep : "?", field(line, "waited_s", b, sizeof b) ? b : "?",
            until);
    } else if (!strncmp(line, "final ", 6)) {
        L->finals++;
        if (field(line, "steps", c, sizeof c) && atoll(c) == L->cfg.steps) L->finals_full++;
        else
            say(L, "  ! group %s finished at step %s, not at --steps %d", w->group,
                field(line, "steps", c, sizeof c) ? c : "?", L->cfg.steps);
        if (field(line, "loss", a, sizeof a)) L->final_loss = atof(a);
        if (field(line, "eval_loss", b, sizeof b)) L->eval_loss = atof(b);
        say(L, "group %s finished: %s (this group's own: failures = steps it retried, heals = heals it took)",
            w->group, line + 6);
    }
}

/* Appends a line of rank 0's stdout to LOG_DIR/worker-GROUP-0.out. */
static void keep_line(launch_t *L, worker_t *w, const char *line) {
    if (!w->out) {
        char path[4200];
        snprintf(path, sizeof path, "%s/worker-%s-%d.out", L->cfg.log_dir, w->group, w->rank);
        w->out = fopen(path, "a");
        if (!w->out) return;
    }
    fprintf(w->out, "%s\n", line);
    fflush(w->out); /* readable while the job runs */
}

static void read_worker(launch_t *L, worker_t *w) {
    for (;;) {
        ssize_t r = read(w->fd, w->buf + w->used, sizeof w->buf - 1 - w->used);
        if (r <= 0) {
            if (r == 0) {
                close(w->fd);
                w->fd = -1;
            }
            return;
        }
        w->used += (size_t)r;
        w->buf[w->used] = '\0';
        char *start = w->buf, *nl;
        while ((nl = strchr(start, '\n'))) {
            *nl = '\0';
            keep_line(L, w, start);
            on_line(L, w, start);
            start = nl + 1;
        }
        w->used = (size_t)(w->buf + w->used - start);
        memmove(w->buf, start, w->used);
        if (w->used == sizeof w->buf - 1) w->used = 0; /* an over-long line: drop it */
    }
}

/* Shows the coordinator's drops and quorums from its JSONL event log. */
static void read_events(launch_t *L) {
    if (L->finals > 0) return; /* groups leaving at the end are not news */
    if (!L->events_in) {
        if (strncmp(L->cfg.events, "file:", 5) != 0) return;
        L->events_in = fopen(L->cfg.events + 5, "r");
        if (!L->events_in) return;
    }
    char line[8192];
    while (fgets(line, sizeof line, L->events_in)) {
        if (!strchr(line, '\n')) break;
        if (strstr(line, "\"type\":\"group_dropped\"")) {
            char *g = strstr(line, "\"group\":\"");
            char *r = strstr(line, "\"reason\":\"");
            say(L, "  - coordinator dropped group %.*s (%.*s)", g ? (int)strcspn(g + 9, "\"") : 1, g ? g + 9 : "?",
                r ? (int)strcspn(r + 10, "\"") : 1, r ? r + 10 : "?");
        } else if (strstr(line, "\"type\":\"quorum_formed\"")) {
            char *q = strstr(line, "\"quorum_id\":");
            char *gs = strstr(line, "\"groups\":[");
            say(L, "  = quorum %lld: [%.*s]", q ? atoll(q + 12) : -1LL, gs ? (int)strcspn(gs + 10, "]") : 0,
                gs ? gs + 10 : "");
        } else if (strstr(line, "\"type\":\"mode_switched\"")) {
            char *to = strstr(line, "\"to\":\"");
            char *st = strstr(line, "\"step\":");
            char *r = strstr(line, "\"reason\":\"");
            L->mode_switches++;
            say(L, "  * mode switched to %.*s at step %lld: %.*s", to ? (int)strcspn(to + 6, "\"") : 1, to ? to + 6 : "?",
                st ? atoll(st + 7) : -1LL, r ? (int)strcspn(r + 10, "\"") : 1, r ? r + 10 : "?");
        }
    }
    clearerr(L->events_in);
}

/* ---- supervision --------------------------------------------------------- */

/* A worker that cannot work as configured (or cannot be run at all) would
 * fail the same way after a restart: stop the job and show why. */
static int config_error(launch_t *L, const worker_t *w, int st) {
    if (!WIFEXITED(st) || (WEXITSTATUS(st) != WORKER_EXIT_CONFIG && WEXITSTATUS(st) != EXEC_FAILED)) return 0;
    say(L, "  x worker %s/%d exited with status %d (a configuration error: restarting cannot help); stopping the job",
        w->group, w->rank, WEXITSTATUS(st));
    char path[4200];
    worker_log_path(L, w, path, sizeof path);
    show_log_tail(L, path);
    L->stop_rc = EXIT_CONFIG;
    return 1;
}

static void reap(launch_t *L) {
    int st;
    pid_t pid;
    while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
        if (pid == L->coord_pid) {
            say(L, "the coordinator exited (%s %d)", WIFSIGNALED(st) ? "signal" : "status",
                WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
            L->coord_pid = 0;
            continue;
        }
        for (int i = 0; i < L->n; i++) {
            worker_t *w = &L->w[i];
            if (w->pid != pid) continue;
            w->pid = 0;
            if (w->fd >= 0) read_worker(L, w);
            if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
                w->done = 1;
                break;
            }
            if (g_signal || L->stop_rc) break;
            L->failures++;
            if (L->finals > 0) { /* the job's last step is committed: nothing to restart for */
                w->done = 1;
                say(L, "  x worker %s/%d exited after the job finished (%s %d)", w->group, w->rank,
                    WIFSIGNALED(st) ? "signal" : "status", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
                break;
            }
            if (config_error(L, w, st)) break;
            append_ms(&L->fail_ms, &L->n_fail, &L->cap_fail, px_now_ms());
            int64_t alive_ms = px_now_ms() - w->started_ms;
            /* Doubling is for crash loops; a chaos kill is not the worker's fault. */
            int backoff = L->cfg.restart_backoff_ms;
            for (int k = 0; k < w->restarts && alive_ms < 30000 && backoff < 5000 && !w->chaos_killed; k++)
                backoff *= 2;
            w->chaos_killed = 0;
            if (w->restarts >= L->cfg.max_restarts) {
                say(L, "  x worker %s/%d died (%s %d) and reached --max-restarts %d: giving up", w->group, w->rank,
                    WIFSIGNALED(st) ? "signal" : "status", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st),
                    L->cfg.max_restarts);
                char path[4200];
                worker_log_path(L, w, path, sizeof path);
                show_log_tail(L, path);
                L->stop_rc = EXIT_INCOMPLETE;
                break;
            }
            w->restarts++;
            w->restart_at_ms = px_now_ms() + backoff;
            say(L, "  x worker %s/%d died (%s %d); restart %d in %d ms", w->group, w->rank,
                WIFSIGNALED(st) ? "signal" : "status", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st), w->restarts,
                backoff);
            break;
        }
    }
}

/* When the next kill is due. By time: about every --chaos-kill-every seconds.
 * By steps: about every --chaos-kill-every-steps committed steps, then after a
 * random delay of up to CHAOS_STEP_JITTER_MS so that it lands at a random
 * point of a step; the schedule does not depend on how fast the machine is. */
static int chaos_due(launch_t *L, int64_t now) {
    const launch_cfg_t *c = &L->cfg;
    if (c->chaos_every_steps > 0) {
        if (!L->kill_armed && L->last_step >= L->next_kill_step) {
            L->kill_armed = 1;
            L->next_kill_ms = now + (int64_t)(CHAOS_STEP_JITTER_MS * rng_unit(&L->rng));
        }
        return L->kill_armed && now >= L->next_kill_ms;
    }
    if (c->chaos_every_s <= 0 || now < L->next_kill_ms) return 0;
    L->next_kill_ms = now + (int64_t)(c->chaos_every_s * 1000.0 * (0.5 + rng_unit(&L->rng)));
    return 1;
}

static void chaos(launch_t *L, int64_t now) {
    if (L->cfg.chaos_max_kills > 0 && L->kills >= L->cfg.chaos_max_kills) return;
    if (L->cfg.chaos_until_step > 0 && L->last_step >= L->cfg.chaos_until_step) return;
    if (!chaos_due(L, now)) return;
    int live[MAX_WORKERS], n = 0;
    for (int i = 0; i < L->n; i++)
        if (L->w[i].pid > 0 && !L->w[i].done) live[n++] = i;
    /* Never kill the last group holding the job's state: without a checkpoint
     * it could not be recovered. Kill only after a step committed by at least
     * two groups since the previous kill (every committer holds the state). */
    if (n == 0 || L->last_step < 1 || L->last_groups < 2 || L->last_step <= L->kill_step) return;
    L->kill_step = L->last_step;
    L->kill_armed = 0;
    L->next_kill_step = L->last_step + (int64_t)((double)L->cfg.chaos_every_steps * (0.5 + rng_unit(&L->rng))) + 1;
    worker_t *w = &L->w[live[rng_next(&L->rng) % (uint64_t)n]];
    L->kills++;
    say(L, "chaos: SIGKILL %d: worker %s/%d (pid %d) at step %lld", L->kills, w->group, w->rank, (int)w->pid,
        (long long)L->last_step);
    w->chaos_killed = 1;
    kill(w->pid, SIGKILL);
}

static double time_lost_s(const launch_t *L) {
    if (L->n_commits < 3 || L->n_fail == 0) return 0;
    int ng = L->n_commits - 1;
    int64_t *gaps = malloc((size_t)ng * sizeof *gaps);
    if (!gaps) return 0;
    for (int i = 0; i < ng; i++) gaps[i] = L->commit_ms[i + 1] - L->commit_ms[i];
    int64_t *sorted = malloc((size_t)ng * sizeof *sorted);
    if (!sorted) {
        free(gaps);
        return 0;
    }
    memcpy(sorted, gaps, (size_t)ng * sizeof *sorted);
    for (int i = 1; i < ng; i++) /* small n: insertion sort */
        for (int j = i; j > 0 && sorted[j - 1] > sorted[j]; j--) {
            int64_t t = sorted[j];
            sorted[j] = sorted[j - 1];
            sorted[j - 1] = t;
        }
    int64_t median = sorted[ng / 2];
    double lost = 0;
    for (int i = 0; i < ng; i++) {
        int hit = 0;
        for (int k = 0; k < L->n_fail && !hit; k++)
            hit = L->fail_ms[k] >= L->commit_ms[i] && L->fail_ms[k] < L->commit_ms[i + 1];
        if (hit && gaps[i] > median) lost += (double)(gaps[i] - median) / 1000.0;
    }
    /* failures after the last commit (during shutdown) cost nothing measurable */
    free(gaps);
    free(sorted);
    return lost;
}

static void stop_all(launch_t *L, int sig) {
    for (int i = 0; i < L->n; i++)
        if (L->w[i].pid > 0) kill(L->w[i].pid, sig);
    int64_t deadline = px_now_ms() + 10000;
    for (;;) {
        int alive = 0;
        for (int i = 0; i < L->n; i++) alive += L->w[i].pid > 0;
        if (!alive || px_now_ms() > deadline) break;
        px_sleep_ms(20);
        int st;
        pid_t pid;
        while ((pid = waitpid(-1, &st, WNOHANG)) > 0)
            for (int i = 0; i < L->n; i++)
                if (L->w[i].pid == pid) L->w[i].pid = 0;
    }
    for (int i = 0; i < L->n; i++)
        if (L->w[i].pid > 0) kill(L->w[i].pid, SIGKILL), waitpid(L->w[i].pid, NULL, 0), L->w[i].pid = 0;
    if (L->coord_pid > 0) {
        kill(L->coord_pid, SIGTERM);
        int64_t d2 = px_now_ms() + 8000;
        while (waitpid(L->coord_pid, NULL, WNOHANG) == 0 && px_now_ms() < d2) px_sleep_ms(20);
        if (waitpid(L->coord_pid, NULL, WNOHANG) == 0) kill(L->coord_pid, SIGKILL), waitpid(L->coord_pid, NULL, 0);
        L->coord_pid = 0;
    }
}

static int has_shards(const char *dir) {
    char pattern[4200];
    snprintf(pattern, sizeof pattern, "%s/train_*.bin", dir);
    glob_t g;
    int found = glob(pattern, 0, NULL, &g) == 0 && g.gl_pathc > 0;
    globfree(&g);
    return found;
}

/* The default data folder is filled with the demo corpus on first use; a
 * folder named by --data never is (checked at parse time), so a typo in it
 * is an error rather than a job trained on the wrong text. phalanx-data's
 * progress goes to LOG_DIR/data.log, the terminal gets one line. */
static int ensure_data(launch_t *L) {
    if (has_shards(L->cfg.data)) return 0;
    px_mkdirs(L->cfg.data); /* a failure shows in phalanx-data's message */
    char path[4200], log[4200];
    snprintf(path, sizeof path, "%s/phalanx-data", L->cfg.bindir);
    snprintf(log, sizeof log, "%s/data.log", L->cfg.log_dir);
    unlink(log);
    char *const argv[] = {path, "--demo", "--out", (char *)L->cfg.data, NULL};
    int64_t t0 = px_now_ms();
    pid_t pid = spawn(path, argv, log, NULL);
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        say(L, "  x preparing the demo corpus in %s failed", L->cfg.data);
        show_log_tail(L, log);
        return -1;
    }
    char sum[1024];
    last_line_after(log, "summary ", sum, sizeof sum);
    say(L, "prepared the demo corpus in %s in %.1f s (phalanx-data --demo: %s; log %s)", L->cfg.data,
        (double)(px_now_ms() - t0) / 1000.0, sum[0] ? sum : "no summary", log);
    return 0;
}

/* Why a job that was not stopped by a signal ended before --steps. */
static const char *incomplete_reason(const launch_t *L) {
    if (L->stop_rc == EXIT_CONFIG) return "a worker's configuration error, above";
    if (L->stop_rc) return "a worker reached --max-restarts, above";
    if (L->finals > 0) return "groups finished at another step count, above";
    return "every worker left before the end";
}

/* Whether the workers are given --liveness group (after --). */
static int liveness_group(const launch_cfg_t *c) {
    int on = 0;
    for (int i = 0; i < c->n_pass; i++) {
        if (!strcmp(c->pass[i], "--liveness") && i + 1 < c->n_pass) on = !strcmp(c->pass[i + 1], "group");
        else if (!strncmp(c->pass[i], "--liveness=", 11)) on = !strcmp(c->pass[i] + 11, "group");
    }
    return on;
}

static void parse(launch_cfg_t *c, int argc, char **argv) {
    const px_flag_section_t sections[] = {
        {&LAUNCH_FLAGS, c, NULL},      {&JOB_FLAGS, c, NULL},  {&WORKER_PASS_FLAGS, c, NULL},
        {&COORDINATOR_FLAGS, c, NULL}, {&COORDINATOR_PASS_FLAGS, c, NULL}, {&JOIN_FLAGS, c, NULL},
        {&AUTO_PASS_FLAGS, c, NULL},
    };
    const px_flags_spec_t spec = {.prog = PROG, .usage = USAGE, .epilogue = EPILOGUE, .sections = sections,
                                  .n_sections = (int)(sizeof sections / sizeof *sections), .rest = 1};
    px_flags_parse(&spec, argc, argv, &c->given);
    if (c->given.n_rest > MAX_PASS) {
        fprintf(stderr, "%s: more than %d worker flags after --\n", PROG, MAX_PASS);
        exit(2);
    }
    for (int i = 0; i < c->given.n_rest; i++) c->pass[c->n_pass++] = c->given.rest[i];
    c->ranks = atoi(c->ranks_text), c->steps = atoi(c->steps_text); /* checked: in range */
    c->join = px_flags_given(&c->given, "--coordinator");
    const px_flag_t *auto_flag = px_flags_last_given(&c->given, &AUTO_PASS_FLAGS);
    const char *bad = c->curve && c->join ? "--curve makes keys for the coordinator started here; with "
                                                   "--coordinator give --curve-secret-key-file and "
                                                   "--coordinator-public-key-file"
                      : !c->curve_secret != !c->curve_server ? "--curve-secret-key-file and "
                                                               "--coordinator-public-key-file go together"
                      : c->curve_secret && !c->join ? "--curve-secret-key-file is for --coordinator (use --curve "
                                                             "for the coordinator started here)"
                      : c->insecure && c->join ? "--insecure applies to the coordinator started here, not to "
                                                        "--coordinator"
                      : c->insecure && c->curve ? "--curve and --insecure: choose one (CURVE is the default)"
                                                      : NULL;
    if (bad) {
        fprintf(stderr, "%s: %s\n", PROG, bad);
        exit(2);
    }
    if (c->model_config && c->model && strcmp(c->model, c->model_config) != 0) {
        fprintf(stderr, "%s: --model %s and --model-config %s name two models: give one\n", PROG, c->model,
                c->model_config);
        exit(2);
    }
    if (c->model_config) c->model = c->model_config;
    if (!c->model) c->model = "small";
    if (px_flags_given(&c->given, "--data") && !has_shards(c->data)) {
        struct stat st;
        fprintf(stderr, "%s: --data %s: %s; make shards with `phalanx-data --out %s FILES...`, or leave --data "
                "out to train on the demo corpus\n", PROG, c->data,
                stat(c->data, &st) != 0 ? "no such folder" : "no token shards (train_*.bin) in it", c->data);
        exit(2);
    }
    if (auto_flag && (c->join || strcmp(c->mode, "auto"))) {
        fprintf(stderr, "%s: %s %s\n", PROG, auto_flag->name,
                c->join ? "applies to the coordinator started here, not to --coordinator" : "needs --mode auto");
        exit(2);
    }
    /* The coordinator started here gets credentials unless told otherwise:
     * CURVE keys, or a job token for workers whose group liveness socket
     * cannot take CURVE. */
    c->use_token = !c->join && !c->insecure && liveness_group(c);
    c->curve = !c->join && !c->insecure && !c->use_token;
    if ((c->groups + c->spares) * c->ranks > MAX_WORKERS) {
        fprintf(stderr, "%s: (--groups + --spares) x --ranks-per-group must be at most %d\n", PROG, MAX_WORKERS);
        exit(2);
    }
    if (c->spares > 0 && c->join) {
        fprintf(stderr, "%s: --spares needs the coordinator started here (its --target-groups); with --coordinator "
                "give that coordinator --target-groups and start the spare groups as any others\n", PROG);
        exit(2);
    }
}

int main(int argc, char **argv) {
    static launch_t L;
    launch_cfg_t *c = &L.cfg;
    parse(c, argc, argv);
    /* Sibling binaries live next to this one. */
    ssize_t n = readlink("/proc/self/exe", c->bindir, sizeof c->bindir - 1);
    if (n <= 0) snprintf(c->bindir, sizeof c->bindir, ".");
    else {
        c->bindir[n] = '\0';
        char *slash = strrchr(c->bindir, '/');
        if (slash) *slash = '\0';
    }
    px_mkdirs(c->log_dir); /* a failure shows when the first file is made there */
    if (c->curve) {
        char err[600];
        snprintf(c->curve_dir, sizeof c->curve_dir, "%s/curve", c->log_dir);
        if (px_keys_make_local_set(c->curve_dir, err, sizeof err) != 0) {
            fprintf(stderr, "%s: --curve: %s\n", PROG, err);
            return 1;
        }
        static char wkey[4300], cpub[4300];
        snprintf(wkey, sizeof wkey, "%s/worker.key", c->curve_dir);
        snprintf(cpub, sizeof cpub, "%s/coordinator.pub", c->curve_dir);
        c->curve_secret = wkey, c->curve_server = cpub;
    }
    if (c->use_token) {
        char err[600], dir[4100];
        snprintf(dir, sizeof dir, "%s/credentials", c->log_dir);
        if (px_keys_make_local_token(dir, err, sizeof err) != 0) {
            fprintf(stderr, "%s: job token: %s\n", PROG, err);
            return 1;
        }
        snprintf(c->token_file, sizeof c->token_file, "%s/token", dir);
    }
    static char events_default[4200];
    if (!c->events) {
        snprintf(events_default, sizeof events_default, "file:%s/events.jsonl", c->log_dir);
        c->events = events_default;
        unlink(events_default + 5);
    }
    L.t_start = px_now_ms();
    L.last_step = 0;
    L.eval_loss = L.final_loss = L.last_loss = NAN;
    L.loss_ema = L.tok_s_ema = NAN;
    L.rng = c->chaos_seed ^ 0x6368616f73ull;
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    if (ensure_data(&L) != 0) return 1;
    if (!c->join) {
        static char bind_buf[600], http_buf[600];
        c->bind = move_taken_default(&L, "--bind", c->bind, "tcp://", bind_buf, sizeof bind_buf);
        c->http = move_taken_default(&L, "--http", c->http, "", http_buf, sizeof http_buf);
        int rc = start_coordinator(&L);
        if (rc != 0) return rc < 0 ? 1 : rc;
        say(&L, "coordinator on %s, status http://%s/ (events %s, logs in %s/)", c->bind, c->http, c->events, c->log_dir);
        if (c->curve)
            say(&L, "control plane: CURVE, keys made for this job in %s/ (phalanxctl drain/status --coordinator %s "
                "--curve-secret-key-file %s --coordinator-public-key-file %s)", c->curve_dir, c->bind,
                c->curve_secret, c->curve_server);
        else if (c->use_token)
            say(&L, "control plane: a job token made for this job in %s (--liveness group cannot use CURVE; "
                "phalanxctl drain/status --coordinator %s --token-file %s)", c->token_file, c->bind, c->token_file);
        else
            say(&L, "! --insecure: the control plane has no credentials: any process that can reach %s (on "
                "loopback, every local user) can register, join the quorum, stall it and end the job", c->bind);
    }
    for (int g = 0; g < c->groups + c->spares; g++)
        for (int r = 0; r < c->ranks; r++) {
            worker_t *w = &L.w[L.n++];
            snprintf(w->group, sizeof w->group, "%s%d", c->group_prefix, g);
            w->rank = r;
            w->fd = -1;
            start_worker(&L, w);
        }
    char spares[48] = "";
    if (c->spares > 0) snprintf(spares, sizeof spares, " (%d training, %d spare)", c->groups, c->spares);
    say(&L, "started %d groups%s x %d ranks: model %s, %d steps%s%s%s", c->groups + c->spares, spares, c->ranks,
        c->model, c->steps,
        px_flags_given(&c->given, "--mode") ? ", mode " : "", px_flags_given(&c->given, "--mode") ? c->mode : "",
        c->chaos_every_s > 0 || c->chaos_every_steps > 0 ? ", chaos on" : "");
    if (c->chaos_every_steps > 0) {
        L.next_kill_step = 1 + (int64_t)((double)c->chaos_every_steps * (0.5 + rng_unit(&L.rng)));
        say(&L, "chaos: killing a random worker about every %d steps (seed %llu)", c->chaos_every_steps,
            (unsigned long long)c->chaos_seed);
    } else if (c->chaos_every_s > 0) {
        L.next_kill_ms = px_now_ms() + (int64_t)(c->chaos_every_s * 1000.0 * (0.5 + rng_unit(&L.rng)));
        say(&L, "chaos: killing a random worker about every %.1f s (seed %llu)", c->chaos_every_s,
            (unsigned long long)c->chaos_seed);
    }
    int rc = 0;
    for (;;) {
        struct pollfd pfd[MAX_WORKERS];
        int idx[MAX_WORKERS], np = 0;
        for (int i = 0; i < L.n; i++)
            if (L.w[i].fd >= 0) pfd[np] = (struct pollfd){L.w[i].fd, POLLIN, 0}, idx[np++] = i;
        poll(pfd, (nfds_t)np, 50);
        for (int k = 0; k < np; k++)
            if (pfd[k].revents) read_worker(&L, &L.w[idx[k]]);
        read_events(&L);
        reap(&L);
        if (g_signal || L.stop_rc) break;
        int64_t now = px_now_ms();
        int all_done = 1;
        for (int i = 0; i < L.n; i++) {
            worker_t *w = &L.w[i];
            if (!w->done) all_done = 0;
            if (!w->done && w->pid == 0 && w->restart_at_ms > 0 && now >= w->restart_at_ms) start_worker(&L, w);
        }
        if (all_done) break;
        if (L.finals == 0) chaos(&L, now);
        /* Once a group has committed the last step the job's result exists.
         * Groups still behind (restarted while the finisher ran alone) could
         * only redo old steps: give the rest a grace period, then stop them. */
        if (L.finals > 0) {
            if (!L.finished_ms) L.finished_ms = now;
            for (int i = 0; i < L.n; i++) /* waiting for a restart: cancel it */
                if (!L.w[i].done && L.w[i].pid == 0) L.w[i].done = 1;
            if (now - L.finished_ms > FINISH_GRACE_MS) {
                say(&L, "the job finished; stopping workers still behind");
                break;
            }
        }
    }
    if (g_signal) {
        say(&L, "stopping (%s): signalling every process", g_signal == SIGINT ? "SIGINT" : "SIGTERM");
        rc = g_signal == SIGINT ? 130 : 143;
    } else if (L.stop_rc) {
        rc = L.stop_rc;
    }
    stop_all(&L, SIGTERM);
    int completed = L.finals_full > 0 && !g_signal && !L.stop_rc;
    if (!completed && !g_signal) {
        say(&L, "the job did not reach step %d: the last committed step is %lld (%s); logs in %s/", c->steps,
            (long long)L.last_step, incomplete_reason(&L), c->log_dir);
        if (rc == 0) rc = EXIT_INCOMPLETE;
    }
    read_events(&L);
    double elapsed = (double)(px_now_ms() - L.t_start) / 1000.0;
    char fl[32], el[32];
    json_num(fl, sizeof fl, isnan(L.final_loss) ? L.last_loss : L.final_loss);
    json_num(el, sizeof el, L.eval_loss);
    say(&L, "job %s: step %lld of %d in %.1f s; %d worker failure%s (processes that died), %d heal%s, %d chaos "
        "kill%s, %d checkpoint%s saved, %.1f s lost to failures", completed ? "completed" : "stopped",
        (long long)L.last_step, c->steps, elapsed, L.failures, L.failures == 1 ? "" : "s", L.heals,
        L.heals == 1 ? "" : "s", L.kills, L.kills == 1 ? "" : "s", L.checkpoints, L.checkpoints == 1 ? "" : "s",
        time_lost_s(&L));
    printf("{\"steps\":%lld,\"failures\":%d,\"heals\":%d,\"final_loss\":%s,\"eval_loss\":%s,"
           "\"time_lost_s\":%.3f,\"elapsed_s\":%.1f,\"completed\":%s,\"chaos_kills\":%d,\"chaos_seed\":%llu,"
           "\"checkpoints\":%d,\"mode_switches\":%d}\n",
           (long long)L.last_step, L.failures, L.heals, fl, el, time_lost_s(&L), elapsed,
           completed ? "true" : "false", L.kills, (unsigned long long)c->chaos_seed, L.checkpoints,
           L.mode_switches);
    fflush(stdout);
    if (L.events_in) fclose(L.events_in);
    for (int i = 0; i < L.n; i++)
        if (L.w[i].out) fclose(L.w[i].out);
    free(L.commit_ms);
    free(L.fail_ms);
    return rc;
}
