/* px_sim: the event loop and the four recovery policies of phalanx-sim.
 *
 * One job of N accelerators runs for a wall time W. The job is cut into
 * G = N / gpus_per_group replica groups. Interruptions arrive as one Poisson
 * process of rate N / accel_mtbf_s (each accelerator fails independently at
 * the same rate; a failed one is replaced, so the rate stays N / MTBF). An
 * interruption takes one accelerator, or with probability node_failure_share
 * a whole node of node_size (every group that node touches).
 *
 * Progress is counted in job-seconds: a second with all G groups training is
 * one second of progress. Every wall second lands in exactly one place:
 * progress, or one cause of px_sim_cause_t (shortfalls of a degraded job are
 * split by the state of the missing groups), so progress + lost = W.
 *
 * The models:
 *
 * restart-all (torchrun). Segments of tau seconds of training then a
 * blocking checkpoint write of C = state per rank / write rate (every rank
 * writes its shard in parallel). Any interruption stops the job: the work
 * since the last completed checkpoint is lost (recompute; a partial write
 * counts as checkpoint), and the job is down restart_s (detection,
 * rescheduling onto spares, start, load): an interruption during the restart
 * starts it over. tau is given, or Young/Daly sqrt(2 C M) with M the job's
 * MTBF. This is the model under Daly's closed form (px_sim_daly_goodput), so
 * the simulation must match it: the validation test.
 *
 * drop-group-timeout (torchft). A lost group stalls everyone for the
 * heartbeat timeout plus a re-quorum (detect), and the step in flight is lost
 * (recompute: a uniform fraction of a step; the batch shrinks, so that step
 * carried live/G of the job's progress). The job goes on with the live
 * groups at a progress rate of live/G (each group keeps its own batch, so the
 * global batch shrinks: fewer samples per step at the same step time). The
 * group is out for repair_s (degraded), then heals its state from a live
 * peer, state per rank / heal rate, all ranks in parallel (heal), then joins
 * with a re-quorum that stalls everyone (heal).
 *
 * phalanx-sync. The same shape with our figures: detect_s + requorum_s
 * (measured from SIGKILL to the survivors' rebuilt communicators) and our
 * heal rate. The global batch is fixed: the live groups split the same batch,
 * so a step takes G/live as long and the progress rate is again live/G; the
 * retried step in flight was a whole step of progress (recompute: a uniform
 * fraction of step_s). The whole job restarts from its checkpoint (as
 * restart-all does) only when fewer than min_replicas groups are live.
 *
 * phalanx-diloco. Groups run inner_steps (H) local steps per round and meet
 * at an outer step; rounds last H * step_s. A lost group costs its own inner
 * steps of the current round (recompute: elapsed round time / G) and nobody
 * stalls (the outer step goes on without it). It is out for repair, heals
 * from the last outer step's state and waits for the next round to start
 * (degraded). Whole-job restarts as phalanx-sync.
 *
 * Checkpoints of the group policies are async: every tau (default 3600 s,
 * only a backstop for whole-job restarts) training holds for the snapshot
 * copy (state per rank / hold rate; checkpoint), and the snapshot is durable
 * a write time later. With failures off, restart-all's goodput is
 * tau / (tau + C) and the others' tau / (tau + hold): the fixed overheads.
 *
 * Spares (phalanx-sync, phalanx-diloco): S standby groups on their own
 * accelerators. A live group lost while one is ready has its place taken at
 * once, and the lost group is repaired for repair_s and becomes a ready
 * spare again. In phalanx-sync everyone stalls for the detection and then
 * promotion_s (detect), in place of the re-quorum: the measured time from a
 * loss to the first committed step of the spare that took the place, less
 * the spare's heal (bench/spares.py), so it holds the re-quorum with the
 * spare in it. The spare then heals into the place (heal: state per rank /
 * heal rate, scaling with the state as a rejoin's heal does) and trains,
 * with no second re-quorum.
 * In phalanx-diloco nobody stalls: the spare heals and waits for the next
 * round, as a repaired group does. With none ready a loss degrades the job
 * as without spares. Spares are taken not to fail while they wait (their
 * accelerators are not among the N).
 *
 * Simplifications, stated: a job stall (detection, re-quorum, checkpoint
 * hold) stops all progress and stalls queue behind each other; an
 * interruption hitting a group already out restarts that group's repair and
 * stalls nobody; a whole-job restart brings every group back (spares). */
#include "sim.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- seeded PRNG: splitmix64 to seed xoshiro256** (same bits everywhere) -- */

typedef struct {
    uint64_t s[4];
} rng_t;

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void rng_seed(rng_t *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(rng_t *r) {
    uint64_t *s = r->s, out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0], s[3] ^= s[1], s[1] ^= s[2], s[0] ^= s[3], s[2] ^= t, s[3] = rotl(s[3], 45);
    return out;
}

static double rng_unit(rng_t *r) { return (double)(rng_next(r) >> 11) * 0x1.0p-53; } /* [0, 1) */
static int64_t rng_below(rng_t *r, int64_t n) { return (int64_t)(rng_next(r) % (uint64_t)n); }
static double rng_exp(rng_t *r, double mean) { return -mean * log1p(-rng_unit(r)); }

/* ---- the event queue: a binary heap ordered by (time, insertion order) ---- */

enum { EV_FAILURE, EV_CKPT_START, EV_CKPT_DONE, EV_RESTART_DONE, EV_REPAIRED, EV_HEALED, EV_SPARE_HEALED, EV_JOIN,
       EV_SPARE_BACK, EV_END };

typedef struct {
    double t;
    uint64_t seq, epoch; /* epoch: the job's (or the group's) when scheduled; stale ones are skipped */
    int kind;
    int64_t group;
} event_t;

typedef struct {
    event_t *ev;
    size_t n, cap;
    uint64_t seq;
} heap_t;

static int ev_before(const event_t *a, const event_t *b) { return a->t < b->t || (a->t == b->t && a->seq < b->seq); }

static int heap_push(heap_t *h, event_t e) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? 2 * h->cap : 64;
        event_t *ev = realloc(h->ev, cap * sizeof *ev);
        if (!ev) return -1;
        h->ev = ev, h->cap = cap;
    }
    e.seq = h->seq++;
    size_t i = h->n++;
    while (i > 0 && ev_before(&e, &h->ev[(i - 1) / 2])) h->ev[i] = h->ev[(i - 1) / 2], i = (i - 1) / 2;
    h->ev[i] = e;
    return 0;
}

static event_t heap_pop(heap_t *h) {
    event_t top = h->ev[0], last = h->ev[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && ev_before(&h->ev[c + 1], &h->ev[c])) c++;
        if (!ev_before(&h->ev[c], &last)) break;
        h->ev[i] = h->ev[c], i = c;
    }
    if (h->n) h->ev[i] = last;
    return top;
}

/* ---- the simulation ------------------------------------------------------ */

enum { G_LIVE, G_REPAIR, G_HEAL, G_WAIT, G_STATES };
#define MAX_STALLS 16

typedef struct {
    const px_sim_config_t *c;
    px_sim_result_t *r;
    rng_t rng;
    heap_t heap;
    double now, idle_s;        /* idle: wall time stalled or down (for ETTR) */
    int64_t G, n_in[G_STATES]; /* groups in each state */
    uint8_t *gstate;
    uint64_t *gepoch, epoch;   /* per group, and the job's (bumped by whole restarts) */
    int down;
    int64_t spares_ready;      /* standby groups waiting to take a place */
    int stall_cause[MAX_STALLS], stall_head, stall_n;
    double stall_left[MAX_STALLS];
    double committed, snapshot, round_start, round_s;
    double tau, ckpt_stall_s, ckpt_write_s, heal_s, detect_s, requorum_s, promotion_s;
    int err;
} sim_t;

static void schedule(sim_t *s, double t, int kind, int64_t group, uint64_t epoch) {
    if (heap_push(&s->heap, (event_t){.t = t, .kind = kind, .group = group, .epoch = epoch})) s->err = 1;
}

/* Everyone stops for d seconds, charged to `cause` when the time passes. */
static void stall(sim_t *s, int cause, double d) {
    if (d <= 0) return;
    if (s->stall_n == MAX_STALLS) { /* never seen: stalls last seconds, failures come minutes apart */
        s->stall_left[(s->stall_head + MAX_STALLS - 1) % MAX_STALLS] += d;
        return;
    }
    int i = (s->stall_head + s->stall_n++) % MAX_STALLS;
    s->stall_cause[i] = cause, s->stall_left[i] = d;
}

/* Moves the clock to t, putting the time passed where it belongs. */
static void advance(sim_t *s, double t) {
    double dt = t - s->now;
    s->now = t;
    if (s->down) {
        s->r->lost_s[PX_SIM_RESTART] += dt, s->idle_s += dt;
        return;
    }
    while (dt > 0 && s->stall_n) {
        int i = s->stall_head;
        double d = fmin(dt, s->stall_left[i]);
        s->r->lost_s[s->stall_cause[i]] += d, s->idle_s += d;
        s->stall_left[i] -= d, dt -= d;
        if (s->stall_left[i] <= 0) s->stall_head = (i + 1) % MAX_STALLS, s->stall_n--;
    }
    if (dt <= 0) return;
    double G = (double)s->G;
    s->r->progress_s += (double)s->n_in[G_LIVE] / G * dt;
    s->r->lost_s[PX_SIM_DEGRADED] += (double)(s->n_in[G_REPAIR] + s->n_in[G_WAIT]) / G * dt;
    s->r->lost_s[PX_SIM_HEAL] += (double)s->n_in[G_HEAL] / G * dt;
}

/* Progress made, then undone: it moves to recompute. */
static void lose_work(sim_t *s, double work) {
    work = fmin(work, s->r->progress_s - s->committed);
    if (work <= 0) return;
    s->r->progress_s -= work;
    s->r->lost_s[PX_SIM_RECOMPUTE] += work;
}

static void set_group(sim_t *s, int64_t g, int state) {
    s->n_in[s->gstate[g]]--, s->n_in[state]++;
    s->gstate[g] = (uint8_t)state;
}

static void whole_restart(sim_t *s) {
    lose_work(s, s->r->progress_s - s->committed);
    s->r->whole_restarts++;
    s->down = 1, s->epoch++, s->stall_n = 0;
    s->spares_ready = s->c->spares; /* the restart brings every spare back too (pending returns are stale) */
    for (int64_t g = 0; g < s->G; g++) {
        if (s->gstate[g] != G_LIVE) set_group(s, g, G_LIVE), s->gepoch[g]++;
    }
    schedule(s, s->now + s->c->restart_s, EV_RESTART_DONE, -1, s->epoch);
}

static void group_lost(sim_t *s, int64_t g) {
    const px_sim_config_t *c = s->c;
    s->r->groups_lost++;
    int promote = s->gstate[g] == G_LIVE && s->spares_ready > 0;
    if (s->gstate[g] == G_LIVE) {
        double live = (double)s->n_in[G_LIVE], G = (double)s->G;
        if (c->policy == PX_SIM_PHALANX_DILOCO) {
            lose_work(s, fmod(s->now - s->round_start, s->round_s) / G);
        } else {
            double step_work = c->policy == PX_SIM_PHALANX_SYNC ? c->step_s : c->step_s * live / G;
            lose_work(s, rng_unit(&s->rng) * step_work);
            stall(s, PX_SIM_DETECT, s->detect_s + (promote ? s->promotion_s : s->requorum_s));
        }
    }
    if (promote) {
        /* a spare takes the place at once and heals into it; the lost
         * group, once repaired, is the new spare (nothing to heal then) */
        s->spares_ready--;
        s->r->promotions++;
        set_group(s, g, G_HEAL);
        schedule(s, s->now + s->heal_s, EV_SPARE_HEALED, g, ++s->gepoch[g]);
        schedule(s, s->now + c->repair_s, EV_SPARE_BACK, -1, s->epoch);
        return;
    }
    set_group(s, g, G_REPAIR);
    schedule(s, s->now + c->repair_s, EV_REPAIRED, g, ++s->gepoch[g]);
}

static void on_failure(sim_t *s) {
    const px_sim_config_t *c = s->c;
    s->r->failures++;
    schedule(s, s->now + rng_exp(&s->rng, c->accel_mtbf_s / (double)c->accelerators), EV_FAILURE, -1, 0);
    int64_t first, count = 1;
    if (c->node_failure_share > 0 && rng_unit(&s->rng) < c->node_failure_share) {
        first = rng_below(&s->rng, c->accelerators / c->node_size) * c->node_size, count = c->node_size;
    } else {
        first = rng_below(&s->rng, c->accelerators);
    }
    if (c->policy == PX_SIM_RESTART_ALL) {
        whole_restart(s);
        return;
    }
    if (s->down) return; /* the restart brings replacements for these too */
    for (int64_t g = first / c->gpus_per_group; g <= (first + count - 1) / c->gpus_per_group; g++) group_lost(s, g);
    if (s->n_in[G_LIVE] < c->min_replicas) whole_restart(s);
}

static void on_event(sim_t *s, const event_t *e) {
    const px_sim_config_t *c = s->c;
    int restart_all = c->policy == PX_SIM_RESTART_ALL;
    if (e->kind == EV_FAILURE) {
        on_failure(s);
    } else if (e->kind == EV_SPARE_BACK) {
        if (e->epoch == s->epoch) s->spares_ready++;
    } else if (e->kind == EV_CKPT_START || e->kind == EV_CKPT_DONE || e->kind == EV_RESTART_DONE) {
        if (e->epoch != s->epoch) return;
        if (e->kind == EV_RESTART_DONE) {
            s->down = 0, s->round_start = s->now;
            schedule(s, s->now + s->tau, EV_CKPT_START, -1, s->epoch);
        } else if (e->kind == EV_CKPT_DONE) {
            s->committed = s->snapshot;
            if (restart_all) schedule(s, s->now + s->tau, EV_CKPT_START, -1, s->epoch);
        } else {
            s->snapshot = s->r->progress_s;
            stall(s, PX_SIM_CHECKPOINT, s->ckpt_stall_s);
            schedule(s, s->now + s->ckpt_stall_s + (restart_all ? 0 : s->ckpt_write_s), EV_CKPT_DONE, -1, s->epoch);
            if (!restart_all) schedule(s, s->now + s->ckpt_stall_s + s->tau, EV_CKPT_START, -1, s->epoch);
        }
    } else {
        if (e->epoch != s->gepoch[e->group]) return;
        if (e->kind == EV_REPAIRED) {
            set_group(s, e->group, G_HEAL);
            schedule(s, s->now + s->heal_s, EV_HEALED, e->group, e->epoch);
        } else if ((e->kind == EV_HEALED || e->kind == EV_SPARE_HEALED) && c->policy == PX_SIM_PHALANX_DILOCO) {
            set_group(s, e->group, G_WAIT);
            double next = s->round_start + ceil((s->now - s->round_start) / s->round_s) * s->round_s;
            schedule(s, next, EV_JOIN, e->group, e->epoch);
        } else {
            set_group(s, e->group, G_LIVE);
            /* a rejoin re-forms the quorum; a promoted spare was in it (promotion_s) */
            if (e->kind == EV_HEALED) stall(s, PX_SIM_HEAL, s->requorum_s);
        }
    }
}

/* ---- configuration -------------------------------------------------------- */

static const char *const policy_names[PX_SIM_POLICIES] = {"restart-all", "drop-group-timeout", "phalanx-sync",
                                                          "phalanx-diloco"};
static const char *const cause_names[PX_SIM_CAUSES] = {"detect", "restart", "recompute", "heal", "degraded",
                                                       "checkpoint"};

const char *px_sim_policy_name(px_sim_policy_t p) { return policy_names[p]; }
const char *px_sim_cause_name(px_sim_cause_t c) { return cause_names[c]; }

int px_sim_policy_parse(const char *name, px_sim_policy_t *p) {
    for (int i = 0; i < PX_SIM_POLICIES; i++) {
        if (!strcmp(name, policy_names[i])) {
            *p = (px_sim_policy_t)i;
            return 0;
        }
    }
    return -1;
}

void px_sim_config_default(px_sim_config_t *c) {
    *c = (px_sim_config_t){
        .policy = PX_SIM_PHALANX_SYNC,
        .accelerators = 16384,
        .gpus_per_group = 8,
        .node_size = 8,
        .wall_s = 30 * 86400.0,
        .accel_mtbf_s = PX_SIM_LLAMA3_ACCEL_MTBF_S,
        .repair_s = 600,
        .restart_s = 600,
        .step_s = 5,
        .inner_steps = 100,
        .min_replicas = 1,
        .checkpoint_interval_s = -1,
        .state_bytes = 128e9,
        .detect_s = NAN,
        .requorum_s = NAN,
        .promotion_s = NAN,
        .heal_bytes_per_s = NAN,
        .checkpoint_write_bytes_per_s = NAN,
        .checkpoint_hold_bytes_per_s = NAN,
        .timeout_s = 5,
        .timeout_heal_bytes_per_s = 4e9,
        .seed = 1,
    };
}

#define BAD(...) return snprintf(err, errlen, __VA_ARGS__), -1

int px_sim_config_check(const px_sim_config_t *c, char *err, size_t errlen) {
    if (c->gpus_per_group < 1 || c->accelerators < c->gpus_per_group || c->accelerators % c->gpus_per_group)
        BAD("accelerators (%lld) must be a multiple of gpus_per_group (%lld)", (long long)c->accelerators,
            (long long)c->gpus_per_group);
    if (c->node_size < 1 || c->accelerators % c->node_size)
        BAD("accelerators (%lld) must be a multiple of node_size (%lld)", (long long)c->accelerators,
            (long long)c->node_size);
    if (c->min_replicas < 1 || c->min_replicas > c->accelerators / c->gpus_per_group)
        BAD("min_replicas (%lld) must be in 1..groups (%lld)", (long long)c->min_replicas,
            (long long)(c->accelerators / c->gpus_per_group));
    if (c->spares < 0 || c->spares > 100000000) BAD("spares (%lld) must be in 0..100000000", (long long)c->spares);
    if (c->spares > 0 && (c->policy == PX_SIM_RESTART_ALL || c->policy == PX_SIM_DROP_GROUP_TIMEOUT))
        BAD("spares are phalanx's: restart-all and drop-group-timeout have none");
    if (!(c->wall_s > 0) || !(c->step_s > 0) || c->inner_steps < 1 || !(c->state_bytes > 0))
        BAD("wall_s, step_s, inner_steps and state_bytes must be positive");
    if (!(c->accel_mtbf_s >= 0) || !(c->repair_s >= 0) || !(c->restart_s >= 0))
        BAD("accel_mtbf_s, repair_s and restart_s must be >= 0");
    if (!(c->node_failure_share >= 0 && c->node_failure_share <= 1)) BAD("node_failure_share must be in 0..1");
    struct {
        const char *name;
        double v;
        int needed, positive;
    } figs[] = {
        {"checkpoint_write_bytes_per_s", c->checkpoint_write_bytes_per_s, c->policy == PX_SIM_RESTART_ALL, 1},
        {"checkpoint_hold_bytes_per_s", c->checkpoint_hold_bytes_per_s, c->policy != PX_SIM_RESTART_ALL, 1},
        {"checkpoint_write_bytes_per_s", c->checkpoint_write_bytes_per_s, c->policy != PX_SIM_RESTART_ALL, 1},
        {"detect_s", c->detect_s, c->policy >= PX_SIM_PHALANX_SYNC, 0},
        {"requorum_s", c->requorum_s, c->policy != PX_SIM_RESTART_ALL, 0},
        {"promotion_s", c->promotion_s, c->policy == PX_SIM_PHALANX_SYNC && c->spares > 0, 0},
        {"heal_bytes_per_s", c->heal_bytes_per_s, c->policy >= PX_SIM_PHALANX_SYNC, 1},
        {"timeout_s", c->timeout_s, c->policy == PX_SIM_DROP_GROUP_TIMEOUT, 0},
        {"timeout_heal_bytes_per_s", c->timeout_heal_bytes_per_s, c->policy == PX_SIM_DROP_GROUP_TIMEOUT, 1},
    };
    for (size_t i = 0; i < sizeof figs / sizeof figs[0]; i++) {
        if (!figs[i].needed) continue;
        if (isnan(figs[i].v)) BAD("%s is not given (a --figures file, or its own flag)", figs[i].name);
        if (figs[i].positive ? !(figs[i].v > 0) : !(figs[i].v >= 0))
            BAD("%s must be %s (got %g)", figs[i].name, figs[i].positive ? "> 0" : ">= 0", figs[i].v);
    }
    return 0;
}

double px_sim_young_daly_interval(double C, double M) { return sqrt(2 * C * M); }

double px_sim_daly_goodput(double tau, double C, double R, double M) {
    return tau / (M * exp(R / M) * expm1((tau + C) / M));
}

/* The costs of this policy, from the config. */
static void derive(sim_t *s) {
    const px_sim_config_t *c = s->c;
    int restart_all = c->policy == PX_SIM_RESTART_ALL;
    double per_rank = c->state_bytes / (double)c->gpus_per_group;
    s->ckpt_write_s = per_rank / c->checkpoint_write_bytes_per_s;
    s->ckpt_stall_s = restart_all ? s->ckpt_write_s : per_rank / c->checkpoint_hold_bytes_per_s;
    double job_mtbf = c->accel_mtbf_s > 0 ? c->accel_mtbf_s / (double)c->accelerators : INFINITY;
    if (c->checkpoint_interval_s > 0) s->tau = c->checkpoint_interval_s;
    else if (c->checkpoint_interval_s < 0 && !restart_all) s->tau = 3600;
    else s->tau = px_sim_young_daly_interval(s->ckpt_stall_s, job_mtbf);
    if (!isfinite(s->tau)) s->tau = c->wall_s; /* no failures: no checkpoint needed */
    if (c->policy == PX_SIM_DROP_GROUP_TIMEOUT) {
        s->detect_s = c->timeout_s, s->heal_s = per_rank / c->timeout_heal_bytes_per_s;
    } else if (!restart_all) {
        s->detect_s = c->detect_s, s->heal_s = per_rank / c->heal_bytes_per_s;
    }
    s->requorum_s = restart_all ? 0 : c->requorum_s;
    s->promotion_s = c->policy == PX_SIM_PHALANX_SYNC && c->spares > 0 ? c->promotion_s : 0;
    s->round_s = (double)c->inner_steps * c->step_s;
    s->r->checkpoint_interval_s = s->tau, s->r->checkpoint_cost_s = s->ckpt_stall_s;
    s->r->heal_s = s->heal_s, s->r->job_mtbf_s = job_mtbf;
}

int px_sim_run(const px_sim_config_t *c, px_sim_result_t *r, char *err, size_t errlen) {
    if (px_sim_config_check(c, err, errlen)) return -1;
    memset(r, 0, sizeof *r);
    sim_t s = {.c = c, .r = r, .G = c->accelerators / c->gpus_per_group};
    s.gstate = calloc((size_t)s.G, 1);
    s.gepoch = calloc((size_t)s.G, sizeof *s.gepoch);
    if (!s.gstate || !s.gepoch) {
        free(s.gstate), free(s.gepoch);
        BAD("out of memory for %lld groups", (long long)s.G);
    }
    s.n_in[G_LIVE] = s.G;
    s.spares_ready = c->spares;
    rng_seed(&s.rng, c->seed);
    derive(&s);
    schedule(&s, c->wall_s, EV_END, -1, 0);
    schedule(&s, s.tau, EV_CKPT_START, -1, 0);
    if (c->accel_mtbf_s > 0) schedule(&s, rng_exp(&s.rng, c->accel_mtbf_s / (double)c->accelerators), EV_FAILURE, -1, 0);
    while (!s.err) {
        event_t e = heap_pop(&s.heap);
        advance(&s, e.t);
        if (e.kind == EV_END) break;
        on_event(&s, &e);
    }
    free(s.gstate), free(s.gepoch), free(s.heap.ev);
    if (s.err) BAD("out of memory for the event queue");
    r->wall_s = c->wall_s, r->groups = s.G;
    r->goodput = r->progress_s / c->wall_s;
    r->ettr = 1 - s.idle_s / c->wall_s;
    return 0;
}
