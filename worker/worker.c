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

static void usage(FILE *f) {
    fprintf(f, "usage: %s --group NAME --rank R [flags]\n"
           "       %s --standalone [flags]   (single-process training; see --standalone --help)\n\n"
           "One rank of a phalanx job. Registers with the coordinator, heartbeats, and\n"
           "follows the job's quorum.\n\n"
           "flags (default in brackets):\n"
           "  --coordinator ENDPOINT   coordinator's ZeroMQ endpoint [tcp://127.0.0.1:7777]\n"
           "  --group NAME             replica group, [A-Za-z0-9_.-]{1,63} (required)\n"
           "  --rank R                 rank inside the group, 0..ranks-per-group-1 [0]\n"
           "  --ranks-per-group W      ranks in each group, 1..1024 [1]\n"
           "  --job NAME               refuse a coordinator running another job [any]\n"
           "  --token-file PATH        job token to present (first line of the file) [none]\n"
           "  --connect-timeout S      give up (exit 2) if no coordinator answers the first registration\n"
           "                           within S seconds, 0 = wait forever, 0..86400 [300]; says every few\n"
           "                           seconds that it is waiting; once registered, outages are waited out\n"
           "  --curve-secret-key-file PATH  CURVE: this worker's secret key (phalanxctl keygen) [off]\n"
           "  --coordinator-public-key-file PATH  CURVE: the coordinator's public key [none]\n"
           "  --coordinator-key Z85    CURVE: the coordinator's public key, inline [none]\n"
           "  --data-host HOST         address this rank's data plane (Gloo) listens on and gives its\n"
           "                           group peers; on Kubernetes the pod IP [127.0.0.1]\n"
           "  --liveness rank|group    rank: every rank heartbeats the coordinator; group: ranks heartbeat\n"
           "                           their group's rank 0 (on --data-host), which reports for them, so\n"
           "                           the coordinator's load grows with groups; every rank of a group\n"
           "                           must say the same; not with CURVE [rank]\n"
           "  --stop-exit-code N       exit status when SIGTERM or SIGINT stops the worker before the\n"
           "                           job's --steps are done, 0..255 [0]; on Kubernetes non-zero, so\n"
           "                           that the group's Job replaces the pod instead of counting its\n"
           "                           rank complete (deploy/k8s uses 143)\n"
           "  --quiet                  log warnings and errors only\n"
           "  --help                   this text\n\n"
           "training (with --steps N; without it the worker only holds its place in the quorum):\n"
           "  --steps N                optimizer steps of the whole job, 1..100000000\n"
           "  --model NAME|PATH        preset (tiny, small, gpt2-124m) or llm.c model file [tiny]\n"
           "  --data DIR               token shards train_*.bin, val_*.bin [data/demo]\n"
           "  --global-batch N         samples per step over all groups, fixed under failures, 1..65536 [16]\n"
           "  --micro-batch N          samples per forward/backward, 1..4096 [4]\n"
           "  --seq T                  sequence length, 0 = the model's context [0]\n"
           "  --lr X                   peak learning rate, 0..1 [0.001]\n"
           "  --min-lr X               final learning rate of the cosine decay, 0..1 [0.0001]\n"
           "  --warmup N               linear warmup steps, 0..1000000 [10]\n"
           "  --weight-decay X         AdamW decoupled weight decay (2-D weights), 0..1 [0.1]\n"
           "  --grad-clip X            global gradient-norm clip, 0 = off, 0..1000 [1.0]\n"
           "  --beta1 X                AdamW's first-moment decay, 0..0.999999 [0.9]\n"
           "  --beta2 X                AdamW's second-moment decay, 0..0.999999 [0.95]\n"
           "  --eps X                  AdamW's denominator epsilon, 1e-30..1 [1e-8]\n"
           "  --seed N                 seed of initialisation and data order [1337]\n"
           "  --device cpu|cuda        where the replica computes [cpu]. cuda: one GPU per rank (GPU rank %% the\n"
           "                           GPUs visible), gradients, --pp/--fsdp/--tp collectives and links over\n"
           "                           NCCL (DiLoCo's outer steps over Gloo, through host memory); not with\n"
           "                           --recompute block or --bucket-mb; no usable GPU is a configuration\n"
           "                           error (exit 2)\n"
           "  --threads N              OpenMP threads, 1..256 [1]\n"
           "  --recompute none|block   block: keep only each layer's input from the forward and run the layer's\n"
           "                           forward again in its backward (less activation memory, about one more\n"
           "                           forward per step, the same results bit for bit); --device cpu only [none]\n"
           "  --eval-every N           eval loss every N steps on group replica 0, 0 = only at the end [0]\n"
           "  --eval-batches N         micro-batches of validation data per eval, 0..10000 [4]\n"
           "  --progress-format text|json  rank 0's line per committed step (and eval, DiLoCo outer step) on\n"
           "                           stdout: text key=value lines, or one JSON object a line with \"kind\" and\n"
           "                           full-precision loss and gradient norm (%%.9g); see docs/operations.md [text]\n"
           "  --comm-timeout-ms N      bound on every collective and rendezvous, 100..3600000 [30000]\n"
           "  --cross-link-mbps X      emulate a slow link between groups: each rank's cross-group traffic\n"
           "                           paced to X megabits/s, heals from another group included (benchmarks;\n"
           "                           0 = off), 0..1000000 [0]\n"
           "  --bucket-mb X            whole replicas: reduce the gradients in buckets of X MiB while the\n"
           "                           backward runs (overlap, as PyTorch DDP); 0 = once after it, 0..4096 [0]\n"
           "  --sample-ledger PATH     append one line per committed step: which samples this group took [off]\n"
           "  --save PATH              write the final model as an llm.c file (rank 0) [off]\n"
           "  --checkpoint-dir DIR     restore the newest valid checkpoint from DIR at start, and save\n"
           "                           checkpoints there (the quorum's first group writes); %%g in DIR\n"
           "                           stands for the group's name (per-group folders) [off]\n"
           "  --checkpoint-every N     save every N committed steps; 0 = only at the end and on SIGTERM,\n"
           "                           0..100000000 [100]\n"
           "  --checkpoint-keep K      checkpoints to keep (the newest valid one always stays), 0 = all,\n"
           "                           0..1000000 [3]\n"
           "  --checkpoint-copy held|overlap  how a save takes its snapshot: held = the optimizer step that makes\n"
           "                           the state copies it as it goes (a save at a stop or after a heal: every\n"
           "                           core copies it while training waits); best where training fills the\n"
           "                           cores; overlap = the saver copies it during the next forward and\n"
           "                           backward (best with spare cores); with --device cuda the state is\n"
           "                           downloaded while the next step computes either way [held; overlap with\n"
           "                           --device cuda]\n"
           "  --mode sync|diloco|auto  sync: every step's gradients are averaged over the groups; diloco: each\n"
           "                           group trains alone for --inner-steps (AdamW on its share of each\n"
           "                           step's batch), then an outer step averages the groups' pseudo-gradients\n"
           "                           (global minus local parameters) and applies SGD with Nesterov momentum;\n"
           "                           auto: the mode each quorum announces (the coordinator's --mode auto\n"
           "                           switches it on failures or communication share), changed at a step\n"
           "                           boundary (to sync: after an outer step); every group of a job must use\n"
           "                           the same mode; any layout; --device cpu without --bucket-mb, for now [sync]\n"
           "  --inner-steps H          diloco: inner steps per outer step, 1..1000000 [50]\n"
           "  --fragments F            diloco: Streaming DiLoCo: layer l in fragment l mod F (the embeddings\n"
           "                           and final norm in 0); an outer step every H/F steps syncs one fragment,\n"
           "                           in turn, so each is synced every H steps with 1/F of the bytes at a time;\n"
           "                           F divides H, F <= layers, 1..64 [1]\n"
           "  --outer-overlap          diloco: a round's pseudo-gradients travel while the next round trains\n"
           "                           (on a thread of their own), and its outer step is applied at that round's\n"
           "                           end, each synced parameter set halfway between its local and new global\n"
           "                           value (Streaming DiLoCo's overlap; the last outer step, a save's, a\n"
           "                           quorum change's and auto's way back to sync stay synchronous) [off]\n"
           "  --sync-warmup N          diloco: train the first N steps in sync, DiLoCo from step N on (as the\n"
           "                           DiLoCo paper starts from a model trained in sync), 0..100000000 [0]\n"
           "  --outer-lr X             diloco: the outer SGD's learning rate, 0..10 [0.7]\n"
           "  --outer-momentum X       diloco: the outer SGD's Nesterov momentum, 0..0.999 [0.9]\n"
           "  --outer-dtype fp32|bf16|int8  diloco: how pseudo-gradients travel between groups: fp32 (a ring\n"
           "                           all-reduce), bf16 or int8 with a scale per 256 values (all-gathered and\n"
           "                           decoded alike everywhere; fewer bytes only for a few groups, see\n"
           "                           docs/comm.md) [fp32]\n\n"
           "layout of a group (--ranks-per-group W = pp x fsdp x tp; none given: each rank holds a whole\n"
           "replica and the W ranks split the group's samples):\n"
           "  --fsdp F                 shard every parameter, gradient and AdamW moment over F ranks (ZeRO-3),\n"
           "                           1..1024 [1]\n"
           "  --tp T                   Megatron tensor parallelism over T ranks: attention heads and MLP\n"
           "                           columns split (T must divide the model's heads), 1..1024 [1]\n"
           "  --pp P                   pipeline stages: the layers cut into P contiguous runs balanced by\n"
           "                           compute (the embedding on the first, the head on the last), P <= layers [1]\n"
           "  --microbatches M         with --pp > 1: micro-batches per step that the pipeline schedule\n"
           "                           interleaves, 1..65536 [P]\n"
           "  --schedule KIND          with --pp > 1: the pipeline schedule, gpipe, 1f1b or zb-h1 (see\n"
           "                           docs/architecture.md, \"Pipeline schedules\") [1f1b]\n"
           "  --print-schedule         print the schedule of --pp, --microbatches and --schedule as a timeline,\n"
           "                           one row per stage, and exit; needs no --group or coordinator\n"
           "  --fsdp-keep-params       keep each layer's gathered parameters from the forward for the\n"
           "                           backward (one all-gather per layer and step instead of two; more memory)\n\n"
           "Every flag can be given as an environment variable instead: PHALANX_CHECKPOINT_DIR=DIR\n"
           "for --checkpoint-dir DIR, PHALANX_QUIET=1 for --quiet; the command line wins.\n"
           "SIGTERM or SIGINT: leave the quorum (the coordinator drops the group at once) and exit 0\n"
           "(or --stop-exit-code). A drain (phalanxctl drain GROUP, asked of the coordinator): leave at\n"
           "the step boundary where the other groups move to the quorum without this one, and exit 0.\n"
           "Exit status: 0 done (or drained), 1 failed (worth a restart), 2 cannot work as configured (do not restart).\n",
           PROG, PROG);
}

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
    px_agent_config_t cfg = {
        .coordinator = "tcp://127.0.0.1:7777", .rank = 0, .group_size = 1, .connect_timeout_s = 300,
    };
    px_trainer_config_t tc = {
        .model = "tiny", .data = "data/demo", .global_batch = 16, .micro_batch = 4, .lr = 1e-3f, .min_lr = 1e-4f,
        .warmup = 10, .weight_decay = 0.1f, .grad_clip = 1.0f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f,
        .seed = 1337, .threads = 1, .eval_batches = 4,
        .comm_timeout_ms = 30000, .progress = 1, .checkpoint_every = 100, .checkpoint_keep = 3, .checkpoint_overlap = -1,
        .schedule = PX_SCHED_1F1B, .mode = PX_MODE_SYNC, .inner_steps = 50, .fragments = 1, .outer_lr = 0.7f, .outer_momentum = 0.9f,
    };
    char *token = NULL;
    const char *curve_secret = NULL, *curve_server_file = NULL, *curve_server_key = NULL;
    static const char *const booleans[] = {"quiet", "fsdp-keep-params", "print-schedule", "outer-overlap", NULL};
    px_flags_from_env(PROG, usage, booleans, &argc, &argv);
    const char *data_host = NULL;
    int stop_exit_code = 0, print_sched = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage(stdout);
            return 0;
        } else if (!strcmp(a, "--quiet")) {
            px_log_set_quiet(1);
            continue;
        } else if (!strcmp(a, "--fsdp-keep-params")) {
            tc.fsdp_keep_params = 1;
            continue;
        } else if (!strcmp(a, "--outer-overlap")) {
            tc.outer_overlap = 1;
            continue;
        } else if (!strcmp(a, "--print-schedule")) {
            print_sched = 1;
            continue;
        }
        if (!strcmp(a, "--coordinator")) cfg.coordinator = px_flag_str(PROG, a, v, 512);
        else if (!strcmp(a, "--group")) cfg.group = px_flag_str(PROG, a, v, 63);
        else if (!strcmp(a, "--rank")) cfg.rank = (int)px_flag_int(PROG, a, v, 0, 1023);
        else if (!strcmp(a, "--ranks-per-group")) cfg.group_size = (int)px_flag_int(PROG, a, v, 1, 1024);
        else if (!strcmp(a, "--job")) cfg.job = px_flag_str(PROG, a, v, 63);
        else if (!strcmp(a, "--token-file")) token = px_flag_token_file(PROG, a, v);
        else if (!strcmp(a, "--data-host")) data_host = px_flag_str(PROG, a, v, 255);
        else if (!strcmp(a, "--liveness")) {
            const char *l = px_flag_str(PROG, a, v, 16);
            if (strcmp(l, "rank") != 0 && strcmp(l, "group") != 0) {
                fprintf(stderr, "%s: --liveness: '%s' is not rank or group\n", PROG, l);
                return 2;
            }
            cfg.liveness_group = !strcmp(l, "group");
        }
        else if (!strcmp(a, "--stop-exit-code")) stop_exit_code = (int)px_flag_int(PROG, a, v, 0, 255);
        else if (!strcmp(a, "--connect-timeout")) cfg.connect_timeout_s = (int)px_flag_int(PROG, a, v, 0, 86400);
        else if (!strcmp(a, "--curve-secret-key-file")) curve_secret = px_flag_str(PROG, a, v, 4096);
        else if (!strcmp(a, "--coordinator-public-key-file")) curve_server_file = px_flag_str(PROG, a, v, 4096);
        else if (!strcmp(a, "--coordinator-key")) curve_server_key = px_flag_str(PROG, a, v, 64);
        else if (!strcmp(a, "--steps")) tc.steps = px_flag_int(PROG, a, v, 1, 100000000);
        else if (!strcmp(a, "--model")) tc.model = px_flag_str(PROG, a, v, 4096);
        else if (!strcmp(a, "--data")) tc.data = px_flag_str(PROG, a, v, 4096);
        else if (!strcmp(a, "--global-batch")) tc.global_batch = (int)px_flag_int(PROG, a, v, 1, 65536);
        else if (!strcmp(a, "--micro-batch")) tc.micro_batch = (int)px_flag_int(PROG, a, v, 1, 4096);
        else if (!strcmp(a, "--seq")) tc.seq_len = (int)px_flag_int(PROG, a, v, 0, 1 << 20);
        else if (!strcmp(a, "--lr")) tc.lr = (float)px_flag_double(PROG, a, v, 0, 1);
        else if (!strcmp(a, "--min-lr")) tc.min_lr = (float)px_flag_double(PROG, a, v, 0, 1);
        else if (!strcmp(a, "--warmup")) tc.warmup = (int)px_flag_int(PROG, a, v, 0, 1000000);
        else if (!strcmp(a, "--weight-decay")) tc.weight_decay = (float)px_flag_double(PROG, a, v, 0, 1);
        else if (!strcmp(a, "--grad-clip")) tc.grad_clip = (float)px_flag_double(PROG, a, v, 0, 1000);
        else if (!strcmp(a, "--beta1")) tc.beta1 = (float)px_flag_double(PROG, a, v, 0, 0.999999);
        else if (!strcmp(a, "--beta2")) tc.beta2 = (float)px_flag_double(PROG, a, v, 0, 0.999999);
        else if (!strcmp(a, "--eps")) tc.eps = (float)px_flag_double(PROG, a, v, 1e-30, 1);
        else if (!strcmp(a, "--progress-format")) {
            if (px_progress_format_parse(v, &tc.progress_format) != 0) {
                fprintf(stderr, "%s: --progress-format: bad value '%s': expected text or json\n", PROG, v ? v : "");
                return 2;
            }
        }
        else if (!strcmp(a, "--seed")) tc.seed = (uint64_t)px_flag_int(PROG, a, v, 0, INT64_MAX);
        else if (!strcmp(a, "--threads")) tc.threads = (int)px_flag_int(PROG, a, v, 1, 256);
        else if (!strcmp(a, "--eval-every")) tc.eval_every = (int)px_flag_int(PROG, a, v, 0, 100000000);
        else if (!strcmp(a, "--eval-batches")) tc.eval_batches = (int)px_flag_int(PROG, a, v, 0, 10000);
        else if (!strcmp(a, "--comm-timeout-ms")) tc.comm_timeout_ms = (int)px_flag_int(PROG, a, v, 100, 3600000);
        else if (!strcmp(a, "--cross-link-mbps")) tc.cross_link_mbps = px_flag_double(PROG, a, v, 0, 1e6);
        else if (!strcmp(a, "--sample-ledger")) tc.ledger = px_flag_str(PROG, a, v, 4096);
        else if (!strcmp(a, "--save")) tc.save = px_flag_str(PROG, a, v, 4096);
        else if (!strcmp(a, "--checkpoint-dir")) tc.checkpoint_dir = px_flag_str(PROG, a, v, 3800);
        else if (!strcmp(a, "--checkpoint-every")) tc.checkpoint_every = (int)px_flag_int(PROG, a, v, 0, 100000000);
        else if (!strcmp(a, "--bucket-mb")) tc.bucket_mb = px_flag_double(PROG, a, v, 0, 4096);
        else if (!strcmp(a, "--device")) {
            if (!v || px_device_parse(v, &tc.device) != 0) {
                fprintf(stderr, "%s: --device: bad value '%s': expected cpu or cuda\n", PROG, v ? v : "");
                return 2;
            }
        }
        else if (!strcmp(a, "--fsdp")) tc.fsdp = (int)px_flag_int(PROG, a, v, 1, 1024);
        else if (!strcmp(a, "--tp")) tc.tp = (int)px_flag_int(PROG, a, v, 1, 1024);
        else if (!strcmp(a, "--pp")) tc.pp = (int)px_flag_int(PROG, a, v, 1, 1024);
        else if (!strcmp(a, "--microbatches"))
            tc.microbatches = (int)px_flag_int(PROG, a, v, 1, PX_SCHED_MAX_MICROBATCHES);
        else if (!strcmp(a, "--schedule")) {
            px_sched_kind_t kind;
            if (!v || px_sched_parse(v, &kind) != 0) {
                fprintf(stderr, "%s: --schedule: bad value '%s': expected gpipe, 1f1b or zb-h1\n", PROG, v ? v : "");
                return 2;
            }
            tc.schedule = (int)kind;
        }
        else if (!strcmp(a, "--recompute")) {
            if (!v || (strcmp(v, "none") && strcmp(v, "block"))) {
                fprintf(stderr, "%s: --recompute: bad value '%s': expected none or block\n", PROG, v ? v : "");
                return 2;
            }
            tc.recompute = !strcmp(v, "block");
        }
        else if (!strcmp(a, "--checkpoint-copy")) {
            if (!v || (strcmp(v, "held") && strcmp(v, "overlap"))) {
                fprintf(stderr, "%s: --checkpoint-copy: bad value '%s': expected held or overlap\n", PROG, v ? v : "");
                return 2;
            }
            tc.checkpoint_overlap = !strcmp(v, "overlap");
        }
        else if (!strcmp(a, "--mode")) {
            if (!v || (strcmp(v, "sync") && strcmp(v, "diloco") && strcmp(v, "auto"))) {
                fprintf(stderr, "%s: --mode: bad value '%s': expected sync, diloco or auto\n", PROG, v ? v : "");
                return 2;
            }
            tc.mode = !strcmp(v, "diloco") ? PX_MODE_DILOCO : !strcmp(v, "auto") ? PX_MODE_AUTO : PX_MODE_SYNC;
        }
        else if (!strcmp(a, "--outer-dtype")) {
            if (!v || px_outer_dtype_parse(v) < 0) {
                fprintf(stderr, "%s: --outer-dtype: bad value '%s': expected fp32, bf16 or int8\n", PROG, v ? v : "");
                return 2;
            }
            tc.outer_dtype = px_outer_dtype_parse(v);
        }
        else if (!strcmp(a, "--inner-steps")) tc.inner_steps = (int)px_flag_int(PROG, a, v, 1, 1000000);
        else if (!strcmp(a, "--fragments")) tc.fragments = (int)px_flag_int(PROG, a, v, 1, PX_MAX_FRAGMENTS);
        else if (!strcmp(a, "--sync-warmup")) tc.sync_warmup = px_flag_int(PROG, a, v, 0, 100000000);
        else if (!strcmp(a, "--outer-lr")) tc.outer_lr = (float)px_flag_double(PROG, a, v, 0, 10);
        else if (!strcmp(a, "--outer-momentum")) tc.outer_momentum = (float)px_flag_double(PROG, a, v, 0, 0.999);
        else if (!strcmp(a, "--checkpoint-keep")) tc.checkpoint_keep = (int)px_flag_int(PROG, a, v, 0, 1000000);
        else px_flag_unknown(PROG, a);
        i++;
    }
    if (print_sched) return print_schedule(&tc);
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
    if (px_curve_client_load(curve_secret, curve_server_file, curve_server_key, &curve, kerr, sizeof kerr) != 0) {
        fprintf(stderr, "%s: %s\n", PROG, kerr);
        return 2;
    }
    cfg.curve = &curve;
    if (cfg.liveness_group && curve.on) {
        fprintf(stderr, "%s: --liveness group is not available with CURVE (a leader's socket is not encrypted); "
                        "use --liveness rank\n", PROG);
        return 2;
    }
    cfg.liveness_host = data_host;
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    signal(SIGXFSZ, SIG_IGN); /* a file-size limit fails the write (EFBIG), reported, instead of killing us */

    if (tc.device == PX_DEVICE_CUDA && tc.steps > 0) px_compute_warm(cfg.rank); /* before registering: see there */
    char err[256];
    px_agent_t *agent = px_agent_new(&cfg, err, sizeof err);
    if (!agent) {
        fprintf(stderr, "%s: %s\n", PROG, err);
        return 2;
    }
    if (tc.steps > 0) {
        tc.group = cfg.group;
        tc.rank = cfg.rank;
        tc.ranks_per_group = cfg.group_size;
        tc.job = cfg.job;
        px_train_result_t rc = px_trainer_run(agent, &tc, &g_stop);
        /* Leaving: tell the coordinator at once so nobody waits for our heartbeats to stop. */
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
