/* The lines rank 0 prints on stdout for each committed step, each eval and
 * each DiLoCo outer step, in one of two formats (--progress-format):
 *
 *   text  key=value, rounded for a terminal (loss %.6f, eval %.4f); what
 *         phalanx-launch and older scripts read:
 *           progress step=12 loss=5.123456 norm=0.812345 ms=41.0 ...
 *   json  one JSON object a line, "kind" first, floats at full precision
 *         (%.9g: a float survives the round trip), for comparing runs with
 *         other trainers:
 *           {"kind":"progress","step":12,"loss":5.12345648,"norm":...}
 *
 * The keys are the same in both formats (phalanx-launch reads either with
 * one lookup). Other stdout lines ("final ...", "event kind=...") stay text. */
#ifndef PX_PROGRESS_H
#define PX_PROGRESS_H

#include <stdint.h>

typedef enum { PX_PROGRESS_TEXT, PX_PROGRESS_JSON } px_progress_format_t;

/* "text" or "json" into *out: 0, or -1 for anything else. */
int px_progress_format_parse(const char *s, px_progress_format_t *out);

/* One committed (or, in DiLoCo, inner) step of the job. */
typedef struct {
    int64_t step;
    double loss, norm;  /* mean loss of the step; global gradient norm before clipping */
    double ms, tok_s;   /* the step's wall time and the job's tokens per second over it */
    int groups;         /* groups in the quorum */
    int64_t quorum;     /* quorum id */
    const char *group;  /* this group */
    const char *mode;   /* "sync" or "diloco" */
    int show_mode;      /* text: print mode= (the job is not plain sync); json always has it */
    int inner, round;   /* DiLoCo: inner step `inner` of `round`; round 0: not DiLoCo */
    int has_eval;
    double eval_loss;   /* with has_eval */
} px_progress_step_t;

void px_progress_step(px_progress_format_t f, const px_progress_step_t *p);
void px_progress_eval(px_progress_format_t f, int64_t step, double eval_loss, const char *group);
/* A DiLoCo outer step of `group`: `groups` is the quorum's group names,
 * comma-separated; `fragment` the one it synced, "K/F" (streaming DiLoCo;
 * "0/1" without). Text: an "event kind=outer_step" line. */
void px_progress_outer(px_progress_format_t f, const char *group, int64_t step, int64_t outer, double contributors,
                       const char *groups, double loss, unsigned long long wire_bytes, const char *fragment);

/* Writes ,"key":%.9g to stdout, or ,"key":null for a number that is not
 * finite (for the standalone trainer's JSON lines). */
void px_progress_json_num(const char *key, double v);

#endif
