/* phalanx-sim: projected goodput of one training job at a chosen scale under
 * one failure-handling policy (the models: sim.c). This file is the command
 * line only: flags, the figures file, the printed summary and the CSV.
 *
 * Exit status: 0 done; 1 the CSV could not be written; 2 a bad command line,
 * figures file or combination of values, named on stderr. */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "figures.h"
#include "px_flags.h"
#include "sim.h"

static const char *const PROG = "phalanx-sim";

/* Everything the command line sets: the simulation's config (its defaults
 * px_sim_config_default's), and what main() applies itself. */
typedef struct {
    px_sim_config_t c;
    const char *policy, *figures, *csv;
    /* Our measured figures given as flags: applied over the --figures file
     * whatever the order; NaN: not given. */
    double detect_s, requorum_s, promotion_s, heal_bytes_per_s, checkpoint_write_bytes_per_s,
        checkpoint_hold_bytes_per_s;
} cli_t;

#define CLI(member) PX_FLAG_AT(cli_t, member)

static const px_flag_t JOB[] = {
    {"--accelerators", PX_FLAG_INT, "N", .min = 1, .max = 100000000, .note = "required",
     .help = "accelerators, a multiple of --gpus-per-group and of 8", CLI(c.accelerators)},
    {"--policy", PX_FLAG_STR, "NAME", .max = 64, .note = "required", .help = "one of the above", CLI(policy)},
    {"--gpus-per-group", PX_FLAG_INT, "N", .min = 1, .max = 1000000, .help = "accelerators per replica group",
     CLI(c.gpus_per_group)},
    {"--wall-days", PX_FLAG_REAL, "D", .lo = 1e-3, .hi = 36500, .scale = 86400, .help = "simulated wall time",
     CLI(c.wall_s)},
    {"--step-s", PX_FLAG_REAL, "S", .lo = 1e-3, .hi = 86400,
     .help = "one optimizer step with every group present", CLI(c.step_s)},
    {"--inner-steps", PX_FLAG_INT, "H", .min = 1, .max = 1000000, .help = "DiLoCo inner steps per round",
     CLI(c.inner_steps)},
    {"--state-bytes", PX_FLAG_REAL, "B", .lo = 1, .hi = 1e18,
     .help = "training state of one replica, params + optimizer (the default: 8B parameters x 16 bytes: fp32 "
             "params, Adam m, v, grads)",
     CLI(c.state_bytes)},
    {"--min-replicas", PX_FLAG_INT, "N", .min = 1, .max = 100000000,
     .help = "fewer live groups restart the whole job", CLI(c.min_replicas)},
    {"--spares", PX_FLAG_INT, "S", .min = 0, .max = 100000000,
     .help = "phalanx-sync, phalanx-diloco: standby groups that take a lost group's place at once (healing into "
             "it; phalanx-sync stalls for --promotion-s); the repaired group becomes a spare",
     CLI(c.spares)},
    {"--checkpoint-interval-s", PX_FLAG_REAL, "S", .lo = 0, .hi = 1e9,
     .note = "Young/Daly for restart-all, 3600 for the others (only a backstop there)",
     .help = "0 = Young/Daly sqrt(2 C MTBF) with C the policy's checkpoint stall and MTBF the job's",
     CLI(c.checkpoint_interval_s)},
};
static const px_flag_table_t JOB_FLAGS = PX_FLAG_TABLE("the job:", JOB);

static const px_flag_t FAILURES[] = {
    {"--accel-mtbf-h", PX_FLAG_REAL, "H", .lo = 0, .hi = 1e9, .scale = 3600,
     .help = "mean hours between interruptions of one accelerator; 0 turns failures off (the default: Llama 3, "
             "419 unexpected interruptions in 54 days on 16,384 GPUs, so 54 x 24 x 16384 / 419; at 16,384 "
             "accelerators one every 3.1 h, at 100,000 every 30 min)",
     CLI(c.accel_mtbf_s)},
    {"--node-failure-share", PX_FLAG_REAL, "P", .lo = 0, .hi = 1,
     .help = "share of interruptions that take a whole node of 8", CLI(c.node_failure_share)},
    {"--repair-s", PX_FLAG_REAL, "S", .lo = 0, .hi = 1e9,
     .help = "a lost group's wait for a replacement and a started process", CLI(c.repair_s)},
    {"--restart-s", PX_FLAG_REAL, "S", .lo = 0, .hi = 1e9,
     .help = "a whole-job restart: reschedule, start, load checkpoint", CLI(c.restart_s)},
    {"--seed", PX_FLAG_INT, "N", .min = 0, .max = INT64_MAX, .help = "seed of the PRNG; a seed reproduces a run exactly",
     CLI(c.seed)},
};
static const px_flag_table_t FAILURE_FLAGS = PX_FLAG_TABLE("failures:", FAILURES);

static const px_flag_t FIGURES[] = {
    {"--figures", PX_FLAG_STR, "FILE", .max = 4096, .note = "none",
     .help = "JSON written by bench/sim_figures.py; the flags below override it", CLI(figures)},
    {"--detect-s", PX_FLAG_REAL, "S", .lo = 0, .hi = 1e15, .note = "--figures'", .help = "SIGKILL to the survivors' failed step",
     CLI(detect_s)},
    {"--requorum-s", PX_FLAG_REAL, "S", .lo = 0, .hi = 1e15,
     .note = "--figures'", .help = "detection to the survivors' rebuilt communicators", CLI(requorum_s)},
    {"--promotion-s", PX_FLAG_REAL, "S", .lo = 0, .hi = 1e15, .note = "--figures'",
     .help = "phalanx-sync with --spares: a group's loss to the first committed step of the spare in its place, "
             "less the spare's heal (added from --heal-bytes-per-s)",
     CLI(promotion_s)},
    {"--heal-bytes-per-s", PX_FLAG_REAL, "B", .lo = 0, .hi = 1e15,
     .note = "--figures'", .help = "heal rate of one rank pair (a group's ranks heal in parallel)", CLI(heal_bytes_per_s)},
    {"--checkpoint-write-bytes-per-s", PX_FLAG_REAL, "B", .lo = 0, .hi = 1e15,
     .note = "--figures'", .help = "one rank's durable write (restart-all's checkpoint cost)", CLI(checkpoint_write_bytes_per_s)},
    {"--checkpoint-hold-bytes-per-s", PX_FLAG_REAL, "B", .lo = 0, .hi = 1e15,
     .note = "--figures'", .help = "one rank's snapshot copy that holds training", CLI(checkpoint_hold_bytes_per_s)},
};
static const px_flag_table_t FIGURE_FLAGS =
    PX_FLAG_TABLE("our measured figures (required where the policy uses them):", FIGURES);

static const px_flag_t TIMEOUT[] = {
    {"--timeout-s", PX_FLAG_REAL, "S", .lo = 0, .hi = 1e6, .help = "heartbeat timeout (the default: torchft's)",
     CLI(c.timeout_s)},
    {"--timeout-heal-bytes-per-s", PX_FLAG_REAL, "B", .lo = 1, .hi = 1e15,
     .help = "heal rate per rank pair (the default: torchft's 12 GB in ~3 s)", CLI(c.timeout_heal_bytes_per_s)},
};
static const px_flag_table_t TIMEOUT_FLAGS = PX_FLAG_TABLE("drop-group-timeout's figures:", TIMEOUT);

static const px_flag_t OUTPUT[] = {
    {"--csv", PX_FLAG_STR, "FILE", .max = 4096, .note = "none", .help = "write a header and one row", CLI(csv)},
};
static const px_flag_table_t OUTPUT_FLAGS = PX_FLAG_TABLE("output:", OUTPUT);

static const char USAGE[] =
    "usage: phalanx-sim --accelerators N --policy POLICY [flags]\n"
    "\n"
    "A discrete-event simulation of one training job: failures arrive per accelerator\n"
    "(Poisson), and POLICY handles each. Prints goodput (share of wall time that made\n"
    "committed, non-repeated progress), ETTR (share of wall time the job ran steps),\n"
    "failures seen and the time lost by cause; --csv writes the same as one CSV row.\n"
    "\n"
    "policies:\n"
    "  restart-all          torchrun: every failure restarts the job from its checkpoint\n"
    "  drop-group-timeout   torchft: heartbeat-timeout detection, the batch shrinks while\n"
    "                       a group is out, heal from a live peer\n"
    "  phalanx-sync         ours: measured detection + re-quorum and heal rate, fixed\n"
    "                       global batch; whole-job restart below --min-replicas groups\n"
    "  phalanx-diloco       ours, DiLoCo: a failure costs the lost group's inner steps\n";

static int write_csv(const char *path, const px_sim_config_t *c, const px_sim_result_t *r) {
    FILE *f = fopen(path, "w");
    if (!f) return -1;
    fprintf(f, "policy,accelerators,gpus_per_group,groups,wall_s,seed,accel_mtbf_s,failures,groups_lost,"
               "whole_restarts,goodput,ettr,progress_s");
    for (int i = 0; i < PX_SIM_CAUSES; i++) fprintf(f, ",lost_%s_s", px_sim_cause_name((px_sim_cause_t)i));
    fprintf(f, ",checkpoint_interval_s,checkpoint_cost_s,heal_s\n");
    fprintf(f, "%s,%" PRId64 ",%" PRId64 ",%" PRId64 ",%.0f,%" PRIu64 ",%.1f,%" PRId64 ",%" PRId64 ",%" PRId64
               ",%.6f,%.6f,%.3f",
            px_sim_policy_name(c->policy), c->accelerators, c->gpus_per_group, r->groups, r->wall_s, c->seed,
            c->accel_mtbf_s, r->failures, r->groups_lost, r->whole_restarts, r->goodput, r->ettr, r->progress_s);
    for (int i = 0; i < PX_SIM_CAUSES; i++) fprintf(f, ",%.3f", r->lost_s[i]);
    fprintf(f, ",%.3f,%.3f,%.3f\n", r->checkpoint_interval_s, r->checkpoint_cost_s, r->heal_s);
    return fclose(f) ? -1 : 0;
}

static void print_summary(const px_sim_config_t *c, const px_sim_result_t *r) {
    printf("phalanx-sim: %s, %" PRId64 " accelerators in %" PRId64 " groups of %" PRId64 ", %.1f days, seed %" PRIu64
           "\n",
           px_sim_policy_name(c->policy), c->accelerators, r->groups, c->gpus_per_group, c->wall_s / 86400, c->seed);
    printf("  job MTBF %.0f s; checkpoint every %.0f s costing %.1f s; heal %.1f s\n", r->job_mtbf_s,
           r->checkpoint_interval_s, r->checkpoint_cost_s, r->heal_s);
    printf("  goodput %.4f   ETTR %.4f   failures %" PRId64 "   groups lost %" PRId64 "   whole-job restarts %" PRId64
           "   spares %" PRId64 " (promoted %" PRId64 " times)\n",
           r->goodput, r->ettr, r->failures, r->groups_lost, r->whole_restarts, c->spares, r->promotions);
    printf("  time lost (job-hours, share of wall):");
    for (int i = 0; i < PX_SIM_CAUSES; i++)
        printf(" %s %.2f h (%.2f%%)", px_sim_cause_name((px_sim_cause_t)i), r->lost_s[i] / 3600,
               100 * r->lost_s[i] / r->wall_s);
    printf("\n");
}

int main(int argc, char **argv) {
    cli_t o = {.detect_s = NAN, .requorum_s = NAN, .promotion_s = NAN, .heal_bytes_per_s = NAN,
               .checkpoint_write_bytes_per_s = NAN, .checkpoint_hold_bytes_per_s = NAN};
    px_sim_config_default(&o.c);
    const px_flag_section_t sections[] = {
        {&JOB_FLAGS, &o, NULL},     {&FAILURE_FLAGS, &o, NULL}, {&FIGURE_FLAGS, &o, NULL},
        {&TIMEOUT_FLAGS, &o, NULL}, {&OUTPUT_FLAGS, &o, NULL},
    };
    const px_flags_spec_t spec = {.prog = PROG, .usage = USAGE, .sections = sections,
                                  .n_sections = (int)(sizeof sections / sizeof *sections)};
    px_flags_parsed_t given;
    px_flags_parse(&spec, argc, argv, &given);
    px_sim_config_t c = o.c;
    if (!px_flags_given(&given, "--accelerators") || !o.policy) {
        fprintf(stderr, "%s: %s is required (see --help)\n", PROG, o.policy ? "--accelerators" : "--policy");
        return 2;
    }
    if (px_sim_policy_parse(o.policy, &c.policy)) {
        fprintf(stderr, "%s: --policy '%s' is not one of restart-all, drop-group-timeout, phalanx-sync, "
                        "phalanx-diloco\n", PROG, o.policy);
        return 2;
    }
    char err[512];
    if (o.figures && px_sim_figures_load(o.figures, &c, err, sizeof err)) {
        fprintf(stderr, "%s: --figures: %s\n", PROG, err);
        return 2;
    }
    const double given_figures[] = {o.detect_s, o.requorum_s, o.promotion_s, o.heal_bytes_per_s,
                                    o.checkpoint_write_bytes_per_s, o.checkpoint_hold_bytes_per_s};
    double *const figures[] = {&c.detect_s, &c.requorum_s, &c.promotion_s, &c.heal_bytes_per_s,
                               &c.checkpoint_write_bytes_per_s, &c.checkpoint_hold_bytes_per_s};
    for (size_t f = 0; f < sizeof figures / sizeof *figures; f++)
        if (!isnan(given_figures[f])) *figures[f] = given_figures[f];
    px_sim_result_t r;
    if (px_sim_run(&c, &r, err, sizeof err)) {
        fprintf(stderr, "%s: %s (see --help)\n", PROG, err);
        return 2;
    }
    print_summary(&c, &r);
    if (o.csv && write_csv(o.csv, &c, &r)) {
        fprintf(stderr, "%s: cannot write --csv '%s'\n", PROG, o.csv);
        return 1;
    }
    return 0;
}
