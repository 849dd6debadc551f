/* phalanx-worker's flag tables (worker_flags.h). */
#include "worker_flags.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "agent.h"
#include "px_wire.h"
#include "outer_codec.h"
#include "schedule.h"

#define TC(member) PX_FLAG_AT(px_trainer_config_t, member)
#define AGENT(member) PX_FLAG_AT(px_agent_config_t, member)

/* Indexed by the enums the choices are stored as. */
static const char *const DEVICES[] = {[PX_DEVICE_CPU] = "cpu", [PX_DEVICE_CUDA] = "cuda", NULL};
static const char *const PRECISIONS[] = {[PX_PRECISION_FP32] = "fp32", [PX_PRECISION_BF16] = "bf16", NULL};
static const char *const FORMATS[] = {[PX_PROGRESS_TEXT] = "text", [PX_PROGRESS_JSON] = "json", NULL};
static const char *const MODES[] = {[PX_MODE_SYNC] = "sync", [PX_MODE_DILOCO] = "diloco", [PX_MODE_AUTO] = "auto",
                                    NULL};
static const char *const DTYPES[] = {[PX_OUTER_FP32] = "fp32", [PX_OUTER_BF16] = "bf16", [PX_OUTER_INT8] = "int8",
                                     NULL};
static const char *const SCHEDULES[] = {[PX_SCHED_GPIPE] = "gpipe", [PX_SCHED_1F1B] = "1f1b",
                                        [PX_SCHED_ZBH1] = "zb-h1", NULL};
static const char *const RECOMPUTE[] = {"none", "block", NULL};  /* cfg.recompute 0, 1 */
static const char *const COPIES[] = {"held", "overlap", NULL};   /* cfg.checkpoint_overlap 0, 1 */
static const char *const WHEN_BUSY[] = {"defer", "wait", NULL};  /* cfg.checkpoint_wait 0, 1 */
static const char *const ATTENTION[] = {"fused", "unfused", NULL}; /* cfg.unfused_attention 0, 1 */
static const char *const LIVENESS[] = {"rank", "group", NULL};   /* cfg.liveness_group 0, 1 */

/* --model-config: a file that can be read (its keys are checked with the
 * rest of the training configuration, px_trainer_check). */
static int model_config_ok(const char *path, char *why, size_t len) {
    if (access(path, R_OK) == 0) return 0;
    snprintf(why, len, "cannot read '%s': %s", path, strerror(errno));
    return -1;
}

static const px_flag_t TRAIN[] = {
    {"--steps", PX_FLAG_INT, "N", .min = 1, .max = 1000000000, .note = "none",
     .help = "optimizer steps of the whole job; without it the distributed worker only holds its place in the "
             "quorum, and --standalone needs it unless --eval-only",
     TC(steps)},
    {"--model", PX_FLAG_STR, "NAME|PATH", .max = 4096, .note = "tiny",
     .help = "preset (tiny, small, gpt2-124m), JSON model config (as --model-config) or llm.c model file; a "
             "preset's vocabulary follows the data's tokenizer.json",
     TC(model)},
    {"--model-config", PX_FLAG_STR, "FILE", .max = 4096, .note = "none", .check = model_config_ok,
     .help = "the model's shape from a JSON file with the keys of Hugging Face's GPT-2 config.json (n_layer, "
             "n_head, n_embd, n_positions, vocab_size: left out, it follows the data), instead of --model",
     TC(model_config)},
    {"--data", PX_FLAG_STR, "DIR", .max = 4096, .def = "data/demo",
     .help = "token shards train_*.bin, val_*.bin (--standalone prepares the default from the demo corpus on "
             "first use, as phalanx-data --demo)",
     TC(data)},
    {"--seq", PX_FLAG_INT, "T", .min = 0, .max = 1 << 20, .def = "0",
     .help = "sequence length, 0 = the model's context", TC(seq_len)},
    {"--lr", PX_FLAG_REAL, "X", .lo = 0, .hi = 10, .def = "0.001", .help = "peak learning rate", TC(lr)},
    {"--min-lr", PX_FLAG_REAL, "X", .lo = 0, .hi = 10, .def = "0.0001",
     .help = "final learning rate of the cosine decay, at most --lr", TC(min_lr)},
    {"--warmup", PX_FLAG_INT, "N", .min = 0, .max = 1000000000, .def = "10",
     .help = "linear warmup steps, then cosine decay to --min-lr at the last step", TC(warmup)},
    {"--weight-decay", PX_FLAG_REAL, "X", .lo = 0, .hi = 1, .def = "0.1",
     .help = "AdamW decoupled weight decay (2-D weights)", TC(weight_decay)},
    {"--grad-clip", PX_FLAG_REAL, "X", .lo = 0, .hi = 1e6, .def = "1.0",
     .help = "global gradient-norm clip, 0 = off", TC(grad_clip)},
    {"--beta1", PX_FLAG_REAL, "X", .lo = 0, .hi = 0.999999, .def = "0.9", .help = "AdamW's first-moment decay",
     TC(beta1)},
    {"--beta2", PX_FLAG_REAL, "X", .lo = 0, .hi = 0.999999, .def = "0.95", .help = "AdamW's second-moment decay",
     TC(beta2)},
    {"--eps", PX_FLAG_REAL, "X", .lo = 1e-30, .hi = 1, .def = "1e-8", .help = "AdamW's denominator epsilon",
     TC(eps)},
    {"--seed", PX_FLAG_INT, "N", .min = 0, .max = INT64_MAX, .def = "1337",
     .help = "seed of initialisation and data order", TC(seed)},
    {"--threads", PX_FLAG_INT, "N", .min = 0, .max = 1024, .def = "1",
     .help = "OpenMP threads, 0 = all cores", TC(threads)},
    {"--eval-every", PX_FLAG_INT, "N", .min = 0, .max = 1000000000, .def = "0",
     .help = "eval loss every N steps (on group replica 0), 0 = only at the end; --standalone also before the "
             "first step",
     TC(eval_every)},
    {"--eval-batches", PX_FLAG_INT, "N", .min = 0, .max = 1000000, .def = "4",
     .help = "batches of validation data per eval (of --micro-batch samples; --standalone: of --batch), always "
             "the same windows, 0 = no eval",
     TC(eval_batches)},
    {"--sample-every", PX_FLAG_INT, "N", .min = 0, .max = 1000000000, .def = "0",
     .help = "print a sample of the model's text every N steps (sample step=... text=\"...\"; on group replica "
             "0's rank 0; not with --fsdp, --tp or --pp), 0 = none",
     TC(sample_every)},
    {"--sample-tokens", PX_FLAG_INT, "N", .min = 1, .max = 100000, .def = "64", .help = "tokens per sample",
     TC(sample_tokens)},
    {"--device", PX_FLAG_CHOICE, .words = DEVICES, .def = "cpu",
     .help = "where the replica computes. cuda: one GPU per rank (GPU rank % the GPUs visible), gradients, "
             "--pp/--fsdp/--tp collectives and links over NCCL (DiLoCo's outer steps over Gloo, through host "
             "memory); not with --bucket-mb; no usable GPU is a configuration error (exit 2)",
     TC(device)},
    {"--precision", PX_FLAG_CHOICE, .words = PRECISIONS, .def = "fp32",
     .help = "how --device cuda computes. fp32: FP32 throughout, bitwise reproducible; bf16: activations "
             "stored in bf16 and matmuls on bf16 tensor cores with FP32 accumulation, attention by the fused "
             "kernel (see --attention), while the residual stream, weights, gradients, AdamW moments, loss, "
             "softmax and LayerNorm statistics stay FP32 (what checkpoints, heals and checksums cover); "
             "--device cpu computes in fp32 only",
     TC(precision)},
    {"--attention", PX_FLAG_CHOICE, .words = ATTENTION, .def = "fused",
     .help = "with --device cuda --precision bf16: fused (one pass on tensor cores, no (B,NH,T,T) tensor; head "
             "sizes 16, 32, 64, 128, else unfused) or unfused (batched GEMMs around a stored bf16 (B,NH,T,T) "
             "probability matrix); fp32 and TF32 always run unfused",
     TC(unfused_attention)},
    {"--tf32", PX_FLAG_SWITCH,
     .help = "with --device cuda --precision fp32: matmul products on TF32 tensor cores (FP32 storage and "
             "accumulation; faster, no longer close to the CPU path)",
     TC(tf32)},
    {"--progress-format", PX_FLAG_CHOICE, .words = FORMATS, .def = "text",
     .help = "the line per step (and eval, DiLoCo outer step) on stdout (the distributed worker: rank 0's, per "
             "committed step): text key=value lines, or one JSON object a line with \"kind\" and "
             "full-precision loss and gradient norm (%.9g); see docs/operations.md",
     TC(progress_format)},
    {"--save", PX_FLAG_STR, "PATH", .max = 4096, .note = "off",
     .help = "write the final model as an llm.c file (the distributed worker: rank 0)", TC(save)},
};
const px_flag_table_t px_train_flags = PX_FLAG_TABLE("training:", TRAIN);

static const px_flag_t WORKER_TRAIN[] = {
    {"--global-batch", PX_FLAG_INT, "N", .min = 1, .max = 65536, .def = "16",
     .help = "samples per step over all groups, fixed under failures", TC(global_batch)},
    {"--micro-batch", PX_FLAG_INT, "N", .min = 1, .max = 4096, .def = "4", .help = "samples per forward/backward",
     TC(micro_batch)},
    {"--recompute", PX_FLAG_CHOICE, .words = RECOMPUTE, .def = "none",
     .help = "block: keep only each layer's input from the forward and run the layer's forward again in its "
             "backward (less activation memory, about one more forward per step, the same results bit for "
             "bit); --device cpu only",
     TC(recompute)},
    {"--comm-timeout-ms", PX_FLAG_INT, "N", .min = 100, .max = 3600000, .def = "30000",
     .help = "bound on every collective and rendezvous", TC(comm_timeout_ms)},
    {"--cross-link-mbps", PX_FLAG_REAL, "X", .lo = 0, .hi = 1e6, .def = "0",
     .help = "emulate a slow link between groups: each rank's cross-group traffic paced to X megabits/s, heals "
             "from another group included (benchmarks; 0 = off)",
     TC(cross_link_mbps)},
    {"--bucket-mb", PX_FLAG_REAL, "X", .lo = 0, .hi = 4096, .def = "0",
     .help = "whole replicas: reduce the gradients in buckets of X MiB while the backward runs (overlap, as "
             "PyTorch DDP); 0 = once after it",
     TC(bucket_mb)},
    {"--sample-ledger", PX_FLAG_STR, "PATH", .max = 4096, .note = "off",
     .help = "append one line per committed step: which samples this group took", TC(ledger)},
    {"--checkpoint-dir", PX_FLAG_STR, "DIR", .max = 3800, .note = "off",
     .help = "restore the newest valid checkpoint from DIR at start, and save checkpoints there (the quorum's "
             "first group writes); %g in DIR stands for the group's name (per-group folders)",
     TC(checkpoint_dir)},
    {"--checkpoint-every", PX_FLAG_INT, "N", .min = 0, .max = 100000000, .def = "100",
     .help = "save every N committed steps; 0 = only at the end and on SIGTERM (with --checkpoint-every-s and "
             "without this flag: 0)", TC(checkpoint_every)},
    {"--checkpoint-every-s", PX_FLAG_REAL, "S", .lo = 0, .hi = 1e7, .def = "0", .note = "off",
     .help = "save at the first step after S seconds since the last save, the same step in every group (beside "
             "--checkpoint-every when both are given)", TC(checkpoint_every_s)},
    {"--checkpoint-keep", PX_FLAG_INT, "K", .min = 0, .max = 1000000, .def = "3",
     .help = "checkpoints to keep (the newest valid one always stays), 0 = all", TC(checkpoint_keep)},
    {"--checkpoint-write-mb-s", PX_FLAG_REAL, "X", .lo = 0, .hi = 1e6, .def = "0", .note = "unpaced",
     .help = "write checkpoint data at most X MB/s, leaving the disk's or network's rest to the job's data (and a "
             "way to rehearse a slow disk); saves still never hold training",
     TC(checkpoint_write_mb_s)},
    {"--allow-fresh-start", PX_FLAG_SWITCH,
     .help = "start from the initial state when --checkpoint-dir holds checkpoints and none of them verifies; "
             "without it the worker refuses to start (exit 2), naming each checkpoint and its fault",
     TC(allow_fresh_start)},
    {"--allow-schedule-change", PX_FLAG_SWITCH,
     .help = "resume from a checkpoint written under another --steps, --lr, --min-lr, --warmup, --global-batch or "
             "--seq (the steps left then follow these); without it such a resume is refused (exit 2), naming "
             "each flag and both values",
     TC(allow_schedule_change)},
    {"--checkpoint-copy", PX_FLAG_CHOICE, .words = COPIES, .note = "held; overlap with --device cuda",
     .help = "how a save takes its snapshot: held = the optimizer step that makes the state copies it as it goes "
             "(a save at a stop or after a heal: every core copies it while training waits); best where "
             "training fills the cores; overlap = the saver copies it during the next forward and backward "
             "(best with spare cores); with --device cuda the state is downloaded while the next step computes "
             "either way",
     TC(checkpoint_overlap)},
    {"--checkpoint-when-busy", PX_FLAG_CHOICE, .words = WHEN_BUSY, .def = "defer",
     .help = "a save due while the previous one still writes: defer = taken at the first step after that write "
             "ends, training goes on; wait = training waits for the write, so that every due step is saved",
     TC(checkpoint_wait)},
    {"--mode", PX_FLAG_CHOICE, .words = MODES, .def = "sync",
     .help = "sync: every step's gradients are averaged over the groups; diloco: each group trains alone for "
             "--inner-steps (AdamW on its share of each step's batch), then an outer step averages the groups' "
             "pseudo-gradients (global minus local parameters) and applies SGD with Nesterov momentum; auto: "
             "the mode each quorum announces (the coordinator's --mode auto switches it on failures or "
             "communication share), changed at a step boundary (to sync: after an outer step); every group of "
             "a job must use the same mode; any layout; --device cpu without --bucket-mb, for now",
     TC(mode)},
    {"--inner-steps", PX_FLAG_INT, "H", .min = 1, .max = 1000000, .def = "50",
     .help = "diloco: inner steps per outer step", TC(inner_steps)},
    {"--fragments", PX_FLAG_INT, "F", .min = 1, .max = PX_MAX_FRAGMENTS, .def = "1",
     .help = "diloco: Streaming DiLoCo: layer l in fragment l mod F (the embeddings and final norm in 0); an "
             "outer step every H/F steps syncs one fragment, in turn, so each is synced every H steps with 1/F "
             "of the bytes at a time; F divides H, F <= layers",
     TC(fragments)},
    {"--outer-overlap", PX_FLAG_SWITCH,
     .help = "diloco: a round's pseudo-gradients travel while the next round trains (on a thread of their own), "
             "and its outer step is applied at that round's end, each synced parameter set halfway between its "
             "local and new global value (Streaming DiLoCo's overlap; the last outer step, a save's, a quorum "
             "change's and auto's way back to sync stay synchronous)",
     TC(outer_overlap)},
    {"--sync-warmup", PX_FLAG_INT, "N", .min = 0, .max = 100000000, .def = "0",
     .help = "diloco: train the first N steps in sync, DiLoCo from step N on (as the DiLoCo paper starts from a "
             "model trained in sync)",
     TC(sync_warmup)},
    {"--outer-lr", PX_FLAG_REAL, "X", .lo = 0, .hi = 10, .def = "0.7", .help = "diloco: the outer SGD's learning rate",
     TC(outer_lr)},
    {"--outer-momentum", PX_FLAG_REAL, "X", .lo = 0, .hi = 0.999, .def = "0.9",
     .help = "diloco: the outer SGD's Nesterov momentum", TC(outer_momentum)},
    {"--outer-dtype", PX_FLAG_CHOICE, .words = DTYPES, .def = "fp32",
     .help = "diloco: how pseudo-gradients travel between groups: fp32 (a ring all-reduce), bf16 or int8 with a "
             "scale per 256 values (all-gathered and decoded alike everywhere; fewer bytes only for a few "
             "groups, see docs/comm.md)",
     TC(outer_dtype)},
};
const px_flag_table_t px_worker_train_flags = PX_FLAG_TABLE("", WORKER_TRAIN);

/* 0 (not given) differs from 1 for the layout flags: none given means whole
 * replicas, hence notes rather than defaults. */
static const px_flag_t LAYOUT[] = {
    {"--fsdp", PX_FLAG_INT, "F", .min = 1, .max = 1024, .note = "1",
     .help = "shard every parameter, gradient and AdamW moment over F ranks (ZeRO-3)", TC(fsdp)},
    {"--tp", PX_FLAG_INT, "T", .min = 1, .max = 1024, .note = "1",
     .help = "Megatron tensor parallelism over T ranks: attention heads and MLP columns split (T must divide "
             "the model's heads)",
     TC(tp)},
    {"--pp", PX_FLAG_INT, "P", .min = 1, .max = 1024, .note = "1",
     .help = "pipeline stages: the layers cut into P contiguous runs balanced by compute (the embedding on the "
             "first, the head on the last), P <= layers",
     TC(pp)},
    {"--microbatches", PX_FLAG_INT, "M", .min = 1, .max = PX_SCHED_MAX_MICROBATCHES, .note = "P",
     .help = "with --pp > 1: micro-batches per step that the pipeline schedule interleaves", TC(microbatches)},
    {"--schedule", PX_FLAG_CHOICE, "KIND", .words = SCHEDULES, .def = "1f1b",
     .help = "with --pp > 1: the pipeline schedule, gpipe, 1f1b or zb-h1 (see docs/architecture.md, \"Pipeline "
             "schedules\")",
     TC(schedule)},
    {"--fsdp-keep-params", PX_FLAG_SWITCH,
     .help = "keep each layer's gathered parameters from the forward for the backward (one all-gather per layer "
             "and step instead of two; more memory)",
     TC(fsdp_keep_params)},
};
const px_flag_table_t px_worker_layout_flags =
    PX_FLAG_TABLE("layout of a group (--ranks-per-group W = pp x fsdp x tp; none given: each rank holds a whole "
                  "replica and the W ranks split the group's samples):",
                  LAYOUT);

static const px_flag_t AGENT[] = {
    {"--group", PX_FLAG_STR, "NAME", .max = 63, .valid = px_wire_group_name_ok, .expect = "[A-Za-z0-9_.-]{1,63}",
     .note = "required", .help = "replica group, [A-Za-z0-9_.-]{1,63}", AGENT(group)},
    {"--rank", PX_FLAG_INT, "R", .min = 0, .max = 1023, .def = "0",
     .help = "rank inside the group, below --ranks-per-group", AGENT(rank)},
    {"--ranks-per-group", PX_FLAG_INT, "W", .min = 1, .max = 1024, .def = "1", .help = "ranks in each group",
     AGENT(group_size)},
    {"--job", PX_FLAG_STR, "NAME", .max = 63, .note = "any", .help = "refuse a coordinator running another job",
     AGENT(job)},
    {"--connect-timeout", PX_FLAG_INT, "S", .min = 0, .max = 86400, .def = "60",
     .help = "give up (exit 2) if no coordinator answers the first registration within S seconds, 0 = wait "
             "forever; says every few seconds that it is waiting; once registered, outages are waited out",
     AGENT(connect_timeout_s)},
    {"--liveness", PX_FLAG_CHOICE, .words = LIVENESS, .def = "rank",
     .help = "rank: every rank heartbeats the coordinator; group: ranks heartbeat their group's rank 0 (on "
             "--data-host), which reports for them, so the coordinator's load grows with groups; every rank of "
             "a group must say the same; not with CURVE",
     AGENT(liveness_group)},
};
const px_flag_table_t px_agent_flags = PX_FLAG_TABLE("flags (default in brackets):", AGENT);

int px_train_flags_check(px_trainer_config_t *c, char *err, size_t len) {
    if (c->model_config && c->model && strcmp(c->model, c->model_config) != 0) {
        snprintf(err, len, "--model %s and --model-config %s name two models: give one", c->model, c->model_config);
        return -1;
    }
    if (c->model_config) c->model = c->model_config;
    if (!c->model) c->model = "tiny";
    if (c->device != PX_DEVICE_CUDA && c->precision == PX_PRECISION_BF16) {
        snprintf(err, len, "--precision bf16 needs --device cuda: the CPU path computes in fp32");
        return -1;
    }
    if (c->device != PX_DEVICE_CUDA && c->tf32) {
        snprintf(err, len, "--tf32 needs --device cuda: TF32 is a GPU tensor-core format");
        return -1;
    }
    if (c->tf32 && c->precision == PX_PRECISION_BF16) {
        snprintf(err, len, "--tf32 with --precision bf16: give one (bf16 already computes on tensor cores)");
        return -1;
    }
    if (c->unfused_attention && (c->device != PX_DEVICE_CUDA || c->precision != PX_PRECISION_BF16)) {
        snprintf(err, len, "--attention unfused needs --device cuda --precision bf16: the other precisions "
                           "always run the unfused attention");
        return -1;
    }
    if (c->min_lr > c->lr) {
        snprintf(err, len, "--min-lr: bad value %g: expected at most --lr (%g)", c->min_lr, c->lr);
        return -1;
    }
    return 0;
}
