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

static void usage(void) {
    px_sim_config_t d;
    px_sim_config_default(&d);
    printf("usage: phalanx-sim --accelerators N --policy POLICY [flags]\n"
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
           "  phalanx-diloco       ours, DiLoCo: a failure costs the lost group's inner steps\n"
           "\n"
           "the job:\n"
           "  --accelerators N             accelerators, a multiple of --gpus-per-group and of 8 (required)\n"
           "  --policy NAME                one of the above (required)\n"
           "  --gpus-per-group N           accelerators per replica group [%" PRId64 "]\n"
           "  --wall-days D                simulated wall time [%.0f]\n"
           "  --step-s S                   one optimizer step with every group present [%.0f]\n"
           "  --inner-steps H              DiLoCo inner steps per round [%" PRId64 "]\n"
           "  --state-bytes B              training state of one replica, params + optimizer\n"
           "                               [%.3g: 8B parameters x 16 bytes (fp32 params, Adam m, v, grads)]\n"
           "  --min-replicas N             fewer live groups restart the whole job [%" PRId64 "]\n"
           "  --checkpoint-interval-s S    0 = Young/Daly sqrt(2 C MTBF) with C the policy's checkpoint\n"
           "                               stall and MTBF the job's; default: Young/Daly for\n"
           "                               restart-all, 3600 for the others (only a backstop there)\n"
           "failures:\n"
           "  --accel-mtbf-h H             mean hours between interruptions of one accelerator; 0 turns\n"
           "                               failures off [%.0f: Llama 3, 419 unexpected interruptions in\n"
           "                               54 days on 16,384 GPUs, so 54 x 24 x 16384 / 419; at 16,384\n"
           "                               accelerators one every 3.1 h, at 100,000 every 30 min]\n"
           "  --node-failure-share P       share of interruptions that take a whole node of 8 [0]\n"
           "  --repair-s S                 a lost group's wait for a replacement and a started process [%.0f]\n"
           "  --restart-s S                a whole-job restart: reschedule, start, load checkpoint [%.0f]\n"
           "  --seed N                     seed of the PRNG; a seed reproduces a run exactly [1]\n"
           "our measured figures (required where the policy uses them):\n"
           "  --figures FILE               JSON written by bench/sim_figures.py; the flags below override it\n"
           "  --detect-s S                 SIGKILL to the survivors' failed step\n"
           "  --requorum-s S               detection to the survivors' rebuilt communicators\n"
           "  --heal-bytes-per-s B         heal rate of one rank pair (a group's ranks heal in parallel)\n"
           "  --checkpoint-write-bytes-per-s B   one rank's durable write (restart-all's checkpoint cost)\n"
           "  --checkpoint-hold-bytes-per-s B    one rank's snapshot copy that holds training\n"
           "drop-group-timeout's figures:\n"
           "  --timeout-s S                heartbeat timeout [%.0f: torchft's default]\n"
           "  --timeout-heal-bytes-per-s B heal rate per rank pair [%.0e: torchft's 12 GB in ~3 s]\n"
           "output:\n"
           "  --csv FILE                   write a header and one row\n"
           "  --help\n",
           d.gpus_per_group, d.wall_s / 86400, d.step_s, d.inner_steps, d.state_bytes,
           d.min_replicas, d.accel_mtbf_s / 3600, d.repair_s, d.restart_s, d.timeout_s, d.timeout_heal_bytes_per_s);
}

/* Every flag that takes a value: an unknown one is named as such before its
 * value is looked for. */
static const char *const VALUE_FLAGS[] = {
    "--accelerators", "--policy", "--gpus-per-group", "--wall-days", "--step-s", "--inner-steps", "--state-bytes",
    "--min-replicas", "--checkpoint-interval-s", "--accel-mtbf-h", "--node-failure-share", "--repair-s", "--restart-s",
    "--seed", "--figures", "--detect-s", "--requorum-s", "--heal-bytes-per-s", "--checkpoint-write-bytes-per-s",
    "--checkpoint-hold-bytes-per-s", "--timeout-s", "--timeout-heal-bytes-per-s", "--csv", NULL};

static int known(const char *flag) {
    for (int i = 0; VALUE_FLAGS[i]; i++) {
        if (!strcmp(flag, VALUE_FLAGS[i])) return 1;
    }
    return 0;
}

/* The figures a flag gave, applied over the figures file whatever the order. */
typedef struct {
    const char *flag;
    double *dst;
    double given;
} figure_flag_t;

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
           "\n",
           r->goodput, r->ettr, r->failures, r->groups_lost, r->whole_restarts);
    printf("  time lost (job-hours, share of wall):");
    for (int i = 0; i < PX_SIM_CAUSES; i++)
        printf(" %s %.2f h (%.2f%%)", px_sim_cause_name((px_sim_cause_t)i), r->lost_s[i] / 3600,
               100 * r->lost_s[i] / r->wall_s);
    printf("\n");
}

int main(int argc, char **argv) {
    px_sim_config_t c;
    px_sim_config_default(&c);
    const char *figures = NULL, *csv = NULL;
    int have_n = 0, have_policy = 0;
    figure_flag_t figs[] = {
        {"--detect-s", &c.detect_s, NAN},
        {"--requorum-s", &c.requorum_s, NAN},
        {"--heal-bytes-per-s", &c.heal_bytes_per_s, NAN},
        {"--checkpoint-write-bytes-per-s", &c.checkpoint_write_bytes_per_s, NAN},
        {"--checkpoint-hold-bytes-per-s", &c.checkpoint_hold_bytes_per_s, NAN},
    };
    const size_t nfigs = sizeof figs / sizeof figs[0];
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage();
            return 0;
        }
        if (!known(a)) px_flag_unknown(PROG, a);
        const char *v = px_flag_need(PROG, a, i + 1 < argc ? argv[i + 1] : NULL);
        size_t f = 0;
        while (f < nfigs && strcmp(a, figs[f].flag)) f++;
        i++;
        if (f < nfigs) figs[f].given = px_flag_double(PROG, a, v, 0, 1e15);
        else if (!strcmp(a, "--accelerators")) c.accelerators = px_flag_int(PROG, a, v, 1, INT64_C(100000000)), have_n = 1;
        else if (!strcmp(a, "--policy")) {
            if (px_sim_policy_parse(v, &c.policy)) {
                fprintf(stderr, "%s: --policy '%s' is not one of restart-all, drop-group-timeout, phalanx-sync, "
                                "phalanx-diloco\n", PROG, v);
                return 2;
            }
            have_policy = 1;
        } else if (!strcmp(a, "--gpus-per-group")) c.gpus_per_group = px_flag_int(PROG, a, v, 1, INT64_C(1000000));
        else if (!strcmp(a, "--wall-days")) c.wall_s = 86400 * px_flag_double(PROG, a, v, 1e-3, 36500);
        else if (!strcmp(a, "--step-s")) c.step_s = px_flag_double(PROG, a, v, 1e-3, 86400);
        else if (!strcmp(a, "--inner-steps")) c.inner_steps = px_flag_int(PROG, a, v, 1, 1000000);
        else if (!strcmp(a, "--state-bytes")) c.state_bytes = px_flag_double(PROG, a, v, 1, 1e18);
        else if (!strcmp(a, "--min-replicas")) c.min_replicas = px_flag_int(PROG, a, v, 1, INT64_C(100000000));
        else if (!strcmp(a, "--checkpoint-interval-s")) c.checkpoint_interval_s = px_flag_double(PROG, a, v, 0, 1e9);
        else if (!strcmp(a, "--accel-mtbf-h")) c.accel_mtbf_s = 3600 * px_flag_double(PROG, a, v, 0, 1e9);
        else if (!strcmp(a, "--node-failure-share")) c.node_failure_share = px_flag_double(PROG, a, v, 0, 1);
        else if (!strcmp(a, "--repair-s")) c.repair_s = px_flag_double(PROG, a, v, 0, 1e9);
        else if (!strcmp(a, "--restart-s")) c.restart_s = px_flag_double(PROG, a, v, 0, 1e9);
        else if (!strcmp(a, "--seed")) c.seed = (uint64_t)px_flag_int(PROG, a, v, 0, INT64_MAX);
        else if (!strcmp(a, "--figures")) figures = px_flag_str(PROG, a, v, 4096);
        else if (!strcmp(a, "--timeout-s")) c.timeout_s = px_flag_double(PROG, a, v, 0, 1e6);
        else if (!strcmp(a, "--timeout-heal-bytes-per-s")) c.timeout_heal_bytes_per_s = px_flag_double(PROG, a, v, 1, 1e15);
        else if (!strcmp(a, "--csv")) csv = px_flag_str(PROG, a, v, 4096);
        else px_flag_unknown(PROG, a);
    }
    if (!have_n || !have_policy) {
        fprintf(stderr, "%s: %s is required (see --help)\n", PROG, have_n ? "--policy" : "--accelerators");
        return 2;
    }
    char err[512];
    if (figures && px_sim_figures_load(figures, &c, err, sizeof err)) {
        fprintf(stderr, "%s: --figures: %s\n", PROG, err);
        return 2;
    }
    for (size_t f = 0; f < nfigs; f++) {
        if (!isnan(figs[f].given)) *figs[f].dst = figs[f].given;
    }
    px_sim_result_t r;
    if (px_sim_run(&c, &r, err, sizeof err)) {
        fprintf(stderr, "%s: %s (see --help)\n", PROG, err);
        return 2;
    }
    print_summary(&c, &r);
    if (csv && write_csv(csv, &c, &r)) {
        fprintf(stderr, "%s: cannot write --csv '%s'\n", PROG, csv);
        return 1;
    }
    return 0;
}
