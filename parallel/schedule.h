/* Pipeline schedules as data: for P stages and M micro-batches, each stage's
 * ordered list of ops (forward, backward, or the backward's two halves). The
 * runtime executes the lists; this module builds them, proves them valid by
 * simulation, and measures them (peak memory, bubble). Pure: no I/O except
 * px_sched_print, which writes to a FILE *.
 *
 * Communication model (what the runtime does, what px_sched_check
 * simulates): a stage's F of micro-batch mb first receives mb's activations
 * from the stage before (s > 0) and sends its output to the stage after
 * (s < P-1); a B or BI first receives mb's output gradient from the stage
 * after and sends its input gradient to the stage before. Sends are
 * asynchronous (a sender thread per link, unbounded queue); a receive blocks
 * until the message has been sent. Each direction of a link is a FIFO, so
 * every stage runs its forwards in micro-batch order 0..M-1 and its
 * backwards (B or BI) in micro-batch order 0..M-1; the k-th message a stage
 * receives is then micro-batch k's.
 *
 * The schedules, with stage s in 0..P-1 and w = min(P-1-s, M) warm-up forwards:
 *
 *   gpipe   F0 .. F(M-1), then B0 .. B(M-1). Every stage holds all M
 *           micro-batches' activations at once.
 *   1f1b    PipeDream-flush (Megatron's non-interleaved schedule): w forwards,
 *           then one F and one B in turn (F(w+i), B(i)), then the w remaining
 *           Bs. Stage s holds at most min(P-s, M) micro-batches.
 *   zb-h1   ZB-H1 of Qi et al. 2023, "Zero Bubble Pipeline Parallelism": the
 *           backward split into BI (input gradient: the critical path, passed
 *           on at once) and W (weight gradient: no communication, can wait).
 *           1F1B's order with each B(i) replaced by BI(i); in the steady state
 *           stage s keeps s weight passes pending (a W, oldest first, follows
 *           BI(i) only when more than s are pending), then each cool-down
 *           BI is followed by one W, which fills the gap 1F1B leaves there,
 *           and the last stage's pending Ws close the list. Stage s holds at
 *           most min(P-s, M) micro-batches' full activations (F until BI) as
 *           in 1F1B, plus up to s whose W still needs the layer inputs and
 *           output gradients: at most P in all, 1F1B's stage-0 peak, as the
 *           paper's (P-s) M_B + s M_W.
 *
 * Bubble (idle fraction of P x makespan, communication free). gpipe and
 * 1f1b with a B costing twice an F: (P-1) / (M+P-1); every stage idles
 * (P-1)(tf+tb). zb-h1 with F = BI = W = 1 (B = BI + W = 2): the BI chain
 * crosses a stage in one unit instead of two, so stage s waits s + (P-1-s)
 * = P-1 units before its first BI and never after it (for M >= P); the
 * makespan is 3M + P-1 and the bubble (P-1) / (3M+P-1), the paper's a third
 * of 1F1B's. For M < P stage 0 runs out of forwards and waits 2P-1-M
 * units for BI0: makespan 2(M+P)-1, bubble (2P-M-1) / (2M+2P-1). Both are what
 * px_sched_bubble_theory returns and what the construction above simulates
 * to (tests/sharded/test_schedule.c), and both are optimal under those costs
 * and that memory bound. */
#ifndef PX_SCHEDULE_H
#define PX_SCHEDULE_H

#include <stddef.h>
#include <stdio.h>

typedef enum { PX_SCHED_GPIPE = 0, PX_SCHED_1F1B, PX_SCHED_ZBH1 } px_sched_kind_t;

typedef enum {
    PX_OP_F = 0, /* forward of micro-batch mb: stage s > 0 first receives mb's activations from s-1; s < P-1 sends
                    its output to s+1 after */
    PX_OP_B,     /* full backward (input and weight gradients) of mb: s < P-1 first receives mb's output gradient
                    from s+1; s > 0 sends its input gradient to s-1 after */
    PX_OP_BI,    /* zb-h1 only: input-gradient half of the backward; same communication as PX_OP_B */
    PX_OP_W      /* zb-h1 only: weight-gradient half of mb's backward; no communication; after BI(mb) on the same
                    stage */
} px_op_kind_t;

typedef struct {
    px_op_kind_t kind;
    int mb;
} px_sched_op_t;

typedef struct {
    px_sched_kind_t kind;
    int P, M;
    int *nops;           /* [P] ops per stage */
    px_sched_op_t **ops; /* [P][nops[s]] in execution order */
} px_schedule_t;

#define PX_SCHED_MAX_STAGES 1024
#define PX_SCHED_MAX_MICROBATCHES 65536

/* "gpipe", "1f1b", "zb-h1" <-> kind. parse returns 0 or -1; name returns "?" for a value outside the enum. */
int px_sched_parse(const char *name, px_sched_kind_t *kind);
const char *px_sched_name(px_sched_kind_t kind);

/* Builds the schedule: 0, or -1 with the problem in err (P or M < 1, P > 1024, M > 65536, out of memory).
 * Free it with px_sched_free. */
int px_sched_build(px_sched_kind_t kind, int P, int M, px_schedule_t *out, char *err, size_t errlen);
/* Frees the lists and zeroes *s; safe on a zeroed or already freed schedule. */
void px_sched_free(px_schedule_t *s);

/* Validity, by simulation: every mb has exactly one F and one B (or, for zb-h1, one BI and one W, BI before
 * W) on every stage, F before its backward, forwards and backwards in mb order; executing all stages
 * concurrently with the communication model above finishes (no deadlock). 0, or -1 with the first problem
 * (stage, op index, mb) in err. */
int px_sched_check(const px_schedule_t *s, char *err, size_t errlen);

/* Peak number of micro-batches whose activations stage s holds at once: counted from its F until its B
 * (or, for zb-h1, until its W, which still needs the layer inputs). -1 for a stage out of range. */
int px_sched_peak_inflight(const px_schedule_t *s, int stage);
/* The same counted from F until the input-gradient backward (B or BI): the micro-batches holding all their
 * activations. Equal to px_sched_peak_inflight except for zb-h1. */
int px_sched_peak_full_activations(const px_schedule_t *s, int stage);

/* Timeline simulation with per-op costs tf, tb (a full B; BI and W cost tbi and tw; tb is used for PX_OP_B),
 * communication free: an op starts when its stage is free and its input has been sent. Fills per-stage busy
 * time (busy[P], may be NULL) and the makespan (may be NULL); bubble = 1 - sum(busy)/(P*makespan). Returns
 * the bubble fraction, or -1 on a deadlock (or an op naming a micro-batch outside 0..M-1, or out of
 * memory). */
double px_sched_simulate(const px_schedule_t *s, double tf, double tb, double tbi, double tw, double *busy,
                         double *makespan);

/* The theory of the construction above: (P-1)/(M+P-1) for gpipe and 1f1b (B = 2F); for zb-h1 (F = BI = W)
 * (P-1)/(3M+P-1) when M >= P, which is the paper's (P-1)(F+B-W) of idle per stage, and (2P-M-1)/(2M+2P-1)
 * when M < P. -1 for P or M < 1 or an unknown kind. */
double px_sched_bubble_theory(px_sched_kind_t kind, int P, int M);

/* The text timeline: a header line naming kind, P, M, the simulated bubble and px_sched_bubble_theory, then
 * one row per stage ("stage 0: ...") with one column per time slot under unit costs F=1, B=2 (BI=1, W=1):
 * "F0", "B3" (in both of its slots), "b3"/"w3" for BI/W, "." idle. 0, or -1 on a write error or a schedule
 * that deadlocks. */
int px_sched_print(const px_schedule_t *s, FILE *out);

#endif
