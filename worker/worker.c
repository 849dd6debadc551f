/* phalanx-worker in distributed mode: flags, the agent (control plane), and
 * either the trainer (with --steps: worker/trainer.c runs the step protocol)
 * or a control-only loop that holds a place in the quorum without training
 * (used by control-plane tests and load drills): it joins, follows every
 * membership change, rejoins after its group is dropped, and survives
 * coordinator restarts.
 *
 * Exit status: 0 finished (or stopped, or the job finished elsewhere); 1 a
 * failure worth a restart; 2 this worker cannot work as configured (a bad
 * flag, model or data shard, no coordinator answering within
 * --connect-timeout, or a coordinator refusing it for good: wrong job, token
 * or key): a supervisor should not restart it (phalanx-launch stops the job
 * and shows the error). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

#include "agent.h"
#include "compute.h"
#include "trainer.h"
#include "worker_flags.h"
#include "px_client_flags.h"
#include "px_flags.h"
#include "px_keys.h"
#include "px_log.h"
#include "px_time.h"
#include "px_wire.h"
#include "outer_codec.h"
#include "schedule.h"

static const char *PROG = "phalanx-worker";
#define EXIT_CONFIG 2 /* see the top of this file */
static volatile sig_atomic_t g_stop;

static void on_signal(int sig) {
    (void)sig;
    g_stop = 1;
}

static const char USAGE[] =
    "usage: phalanx-worker --group NAME --rank R [flags]\n"
    "       phalanx-worker --standalone [flags]   (single-process training; see --standalone --help)\n\n"
    "One rank of a phalanx job. Registers with the coordinator, heartbeats, and\n"
    "follows the job's quorum.\n";

static const char EPILOGUE[] =
    "SIGTERM or SIGINT: leave the quorum (the coordinator drops the group at once) and exit 0\n"
    "(or --stop-exit-code). A drain (phalanxctl drain GROUP, asked of the coordinator): leave at\n"
    "the step boundary where the other groups move to the quorum without this one, and exit 0.\n"
    "Exit status: 0 done (or drained), 1 failed (worth a restart), 2 cannot work as configured (do not restart).\n";

/* The distributed worker's own flags beside the tables it shares. */
typedef struct {
    const char *data_host;
    int stop_exit_code, print_schedule, quiet;
} worker_opts_t;

static const px_flag_t LOCAL[] = {
    {"--data-host", PX_FLAG_STR, "HOST", .max = 255, .note = "127.0.0.1",
     .help = "address this rank's data plane (Gloo) listens on and gives its group peers; on Kubernetes the "
             "pod IP",
     PX_FLAG_AT(worker_opts_t, data_host)},
    {"--stop-exit-code", PX_FLAG_INT, "N", .min = 0, .max = 255, .def = "0",
     .help = "exit status when SIGTERM or SIGINT stops the worker before the job's --steps are done; on "
             "Kubernetes non-zero, so that the group's Job replaces the pod instead of counting its rank "
             "complete (deploy/k8s uses 143)",
     PX_FLAG_AT(worker_opts_t, stop_exit_code)},
};
static const px_flag_table_t LOCAL_FLAGS = PX_FLAG_TABLE(NULL, LOCAL);

static const px_flag_t PRINT_SCHEDULE[] = {
    {"--print-schedule", PX_FLAG_SWITCH,
     .help = "print the schedule of --pp, --microbatches and --schedule as a timeline, one row per stage, and "
             "exit; needs no --group or coordinator",
     PX_FLAG_AT(worker_opts_t, print_schedule)},
};
static const px_flag_table_t PRINT_SCHEDULE_FLAGS = PX_FLAG_TABLE(NULL, PRINT_SCHEDULE);

/* --print-schedule: the pipeline schedule as a text timeline on stdout. 0, or 1 when it cannot be built or
 * written. */
static int print_schedule(const px_trainer_config_t *tc) {
    int P = tc->pp ? tc->pp : 1, M = tc->microbatches ? tc->microbatches : P;
    px_schedule_t s;
    char err[256];
    if (px_sched_build((px_sched_kind_t)tc->schedule, P, M, &s, err, sizeof err) != 0) {
        fprintf(stderr, "%s: --print-schedule: %s\n", PROG, err);
        return 1;
    }
    int rc = px_sched_print(&s, stdout) == 0 && fflush(stdout) == 0 ? 0 : 1;
    if (rc) fprintf(stderr, "%s: --print-schedule: cannot write the timeline of P=%d M=%d\n", PROG, P, M);
    px_sched_free(&s);
    return rc;
}

/* What the coordinator is told when the trainer leaves. */
static const char *departure_reason(px_train_result_t rc) {
    switch (rc) {
    case PX_TRAIN_DONE: return "finished";
    case PX_TRAIN_FINISHED_ELSEWHERE: return "job finished by another group";
    case PX_TRAIN_DRAINED: return "drained";
    default: return "worker stopping";
    }
}

/* The process's exit status after training (see the top of this file):
 * `refused` when the coordinator refused this worker for good or never
 * answered. */
static int exit_status(px_train_result_t rc, int refused, int stop_exit_code) {
    switch (rc) {
    case PX_TRAIN_STOPPED: return stop_exit_code;
    case PX_TRAIN_FINISHED_ELSEWHERE:
    case PX_TRAIN_DRAINED: return 0;
    case PX_TRAIN_CONFIG_ERROR: return EXIT_CONFIG;
    case PX_TRAIN_DONE: return refused ? EXIT_CONFIG : 0;
    case PX_TRAIN_FAILED: return refused ? EXIT_CONFIG : 1;
    }
    return 1;
}

static void log_quorum(const char *what, const px_quorum_t *q) {
    char groups[512] = "";
    size_t n = 0;
    for (int i = 0; i < q->n && n < sizeof groups - 70; i++)
        n += (size_t)snprintf(groups + n, sizeof groups - n, "%s%s", i ? "," : "", q->groups[i].name);
    px_log_info("%s quorum_id=%lld step=%lld groups=%s", what, (long long)q->id, (long long)q->max_step, groups);
}

int px_worker_main(int argc, char **argv) {
    px_agent_config_t cfg = {0};
    px_trainer_config_t tc = {.progress = 1, .checkpoint_overlap = -1};
    px_client_flags_t client = {0};
    worker_opts_t o = {0};
    const px_flag_section_t sections[] = {
        {&px_agent_flags, &cfg, NULL},
        {&LOCAL_FLAGS, &o, ""},
        {&px_log_flags, &o.quiet, ""},
        {&px_client_flags, &client, NULL},
        {&px_train_flags, &tc, NULL},
        {&px_worker_train_flags, &tc, ""},
        {&px_worker_layout_flags, &tc, NULL},
        {&PRINT_SCHEDULE_FLAGS, &o, ""},
    };
    const px_flags_spec_t spec = {.prog = PROG, .usage = USAGE, .epilogue = EPILOGUE, .sections = sections,
                                  .n_sections = (int)(sizeof sections / sizeof *sections), .env = 1};
    px_flags_parsed_t given;
    px_flags_parse(&spec, argc, argv, &given);
    px_log_set_quiet(o.quiet);
    cfg.coordinator = client.coordinator;
    char *token = client.token;
    const char *data_host = o.data_host;
    int stop_exit_code = o.stop_exit_code;
    char ferr[256];
    if (px_train_flags_check(&tc, ferr, sizeof ferr) != 0) {
        fprintf(stderr, "%s: %s (see %s --help)\n", PROG, ferr, PROG);
        return 2;
    }
    /* a time interval alone: the step interval's default does not add saves of its own */
    if (tc.checkpoint_every_s > 0 && !px_flags_given(&given, "--checkpoint-every")) tc.checkpoint_every = 0;
    if (o.print_schedule) return print_schedule(&tc);
    if (!cfg.group) {
        fprintf(stderr, "%s: --group is required (see %s --help)\n", PROG, PROG);
        return 2;
    }
    if (tc.fsdp || tc.tp || tc.pp || cfg.group_size == 1) {
        int P = tc.pp ? tc.pp : 1, F = tc.fsdp ? tc.fsdp : 1, T = tc.tp ? tc.tp : 1;
        if ((int64_t)P * F * T != cfg.group_size) {
            fprintf(stderr, "%s: --ranks-per-group %d must equal pp x fsdp x tp = %d x %d x %d = %lld\n", PROG,
                    cfg.group_size, P, F, T, (long long)P * F * T);
            return 2;
        }
    }
    /* The layout the coordinator checks against the other groups'. */
    static char layout[96];
    if (tc.pp > 1) /* the stages of a group exchange micro-batches: the same count and order on every rank */
        snprintf(layout, sizeof layout, "pp%d.fsdp%d.tp%d.m%d.%s", tc.pp, tc.fsdp ? tc.fsdp : 1, tc.tp ? tc.tp : 1,
                 tc.microbatches ? tc.microbatches : tc.pp, px_sched_name((px_sched_kind_t)tc.schedule));
    else if (tc.fsdp || tc.tp || tc.pp)
        snprintf(layout, sizeof layout, "pp%d.fsdp%d.tp%d", tc.pp ? tc.pp : 1, tc.fsdp ? tc.fsdp : 1, tc.tp ? tc.tp : 1);
    else
        snprintf(layout, sizeof layout, "replicated%d", cfg.group_size);
    if (tc.mode != PX_MODE_SYNC) /* groups meet only at outer steps: every H inner steps, in step */
        snprintf(layout + strlen(layout), sizeof layout - strlen(layout), ".%s%d%s%s",
                 tc.mode == PX_MODE_AUTO ? "auto" : "diloco", tc.inner_steps,
                 tc.outer_dtype != PX_OUTER_FP32 ? "." : "",
                 tc.outer_dtype != PX_OUTER_FP32 ? px_outer_dtype_name((px_outer_dtype_t)tc.outer_dtype) : "");
    if (tc.sync_warmup > 0) /* where the groups change mode */
        snprintf(layout + strlen(layout), sizeof layout - strlen(layout), ".w%lld", (long long)tc.sync_warmup);
    if (tc.fragments > 1) /* the rounds (H/F steps) and which fragment each syncs */
        snprintf(layout + strlen(layout), sizeof layout - strlen(layout), ".f%d", tc.fragments);
    if (tc.outer_overlap) /* when the outer steps apply */
        snprintf(layout + strlen(layout), sizeof layout - strlen(layout), ".ov");
    if (tc.steps > 0) cfg.layout = layout;
    if (cfg.rank >= cfg.group_size) {
        fprintf(stderr, "%s: --rank %d must be below --ranks-per-group %d\n", PROG, cfg.rank, cfg.group_size);
        return 2;
    }
    if (tc.checkpoint_overlap < 0) tc.checkpoint_overlap = tc.device == PX_DEVICE_CUDA; /* GPU hosts have cores spare */
    char terr[640];
    if (px_trainer_check(&tc, terr, sizeof terr) != 0) { /* before anything starts: no GPU is a config error */
        fprintf(stderr, "%s: %s\n", PROG, terr);
        return 2;
    }
    /* The Gloo transport reads its address from PX_GLOO_HOST when each
     * communicator is made; set here, before any thread starts. */
    if (data_host && setenv("PX_GLOO_HOST", data_host, 1) != 0) {
        fprintf(stderr, "%s: cannot set the data-plane address: %s\n", PROG, strerror(errno));
        return 2;
    }
    cfg.token = token;
    cfg.job_steps = tc.steps;
    cfg.print_waiting = cfg.rank == 0; /* rank 0's stdout is what phalanx-launch reads */
    static px_curve_client_t curve;
    char kerr[600];
    if (px_curve_client_load(client.curve_secret, client.curve_server_file, client.curve_server_key, &curve, kerr,
                             sizeof kerr) != 0) {
        fprintf(stderr, "%s: %s\n", PROG, kerr);
        return 2;
    }
    cfg.curve = &curve;
    if (cfg.liveness_group && curve.on) {
        fprintf(stderr, "%s: --liveness group is not available with CURVE (a leader's socket is not encrypted); "
                        "use --liveness rank\n", PROG);
        return 2;
    }
    cfg.data_host = data_host;
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGXFSZ, SIG_IGN); /* a file-size limit fails the write (EFBIG), reported, instead of killing us */

    if (tc.device == PX_DEVICE_CUDA && tc.steps > 0) px_compute_warm(cfg.rank); /* before registering: see there */
    char err[256];
    px_agent_t *agent = px_agent_new(&cfg, err, sizeof err); /* silent until started: training sets up first */
    if (!agent || (tc.steps == 0 && px_agent_start(agent, err, sizeof err) != 0)) {
        fprintf(stderr, "%s: %s\n", PROG, err);
        px_agent_destroy(&agent);
        return 2;
    }
    if (tc.steps > 0) {
        tc.group = cfg.group;
        tc.rank = cfg.rank;
        tc.ranks_per_group = cfg.group_size;
        tc.job = cfg.job;
        px_train_result_t rc = px_trainer_run(agent, &tc, &g_stop);
        /* Leaving: tell the coordinator at once so nobody waits for our heartbeats to stop (unless the
         * configuration failed before the agent started: then it never heard of us). */
        px_agent_report_failure(agent, cfg.group, cfg.rank, 0, 0, departure_reason(rc));
        px_agent_flush(agent, 500); /* bounded: wait until the coordinator has the departure notice */
        /* Refused for good (wrong job, token or key) or never answered: a
         * configuration error, which phalanx-launch does not retry. */
        int refused = px_agent_gave_up(agent) || px_agent_fatal_error(agent)[0];
        int code = exit_status(rc, refused, stop_exit_code);
        px_agent_destroy(&agent);
        free(token);
        return code;
    }
    int64_t held = 0, step = 0;
    px_quorum_t q, latest;
    px_quorum_init(&q);
    px_quorum_init(&latest);
    int rc = 0;
    while (!g_stop) {
        px_agent_latest_quorum(agent, &latest);
        if (latest.id > held && px_quorum_find(&latest, cfg.group) >= 0) {
            held = latest.id;
            px_agent_set_progress(agent, step, PHALANX__MEMBER_STATE__HEALTHY, held);
            log_quorum("quorum_followed", &latest);
            continue;
        }
        if (held == 0 || px_agent_known_quorum_id(agent) > held) {
            px_quorum_request_t r = px_agent_request_quorum(agent, step, held, 0, 0, 0, 500, &q);
            if (r == PX_QUORUM_GRANTED) {
                held = q.id;
                px_agent_set_progress(agent, step, PHALANX__MEMBER_STATE__HEALTHY, held);
                log_quorum("quorum_joined", &q);
            } else if (r == PX_QUORUM_GAVE_UP && px_agent_gave_up(agent)) {
                rc = EXIT_CONFIG; /* the agent logged why */
                break;
            } else if (r == PX_QUORUM_GAVE_UP && px_agent_fatal_error(agent)[0]) {
                px_log_error("coordinator refused this worker: %s", px_agent_fatal_error(agent));
                rc = EXIT_CONFIG;
                break;
            }
            continue;
        }
        px_sleep_ms(20);
    }
    if (g_stop) {
        px_agent_report_failure(agent, cfg.group, cfg.rank, held, step, "worker shutting down");
        px_agent_flush(agent, 500);
        px_log_info("worker_stopped group=%s rank=%d", cfg.group, cfg.rank);
        if (rc == 0) rc = stop_exit_code;
    }
    px_quorum_free(&q);
    px_quorum_free(&latest);
    px_agent_destroy(&agent);
    free(token);
    return rc;
}
