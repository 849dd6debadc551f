/* Per-step output of rank 0 in text or JSON lines (see progress.h). Every
 * line is flushed at once: phalanx-launch reads it through a pipe. JSON
 * strings here are group names ([A-Za-z0-9_.-], checked at the flag) and
 * fixed words, so they need no escaping; numbers that are not finite are
 * written as null (JSON has no NaN). */
#include "progress.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

int px_progress_format_parse(const char *s, px_progress_format_t *out) {
    if (!s) return -1;
    if (!strcmp(s, "text")) *out = PX_PROGRESS_TEXT;
    else if (!strcmp(s, "json")) *out = PX_PROGRESS_JSON;
    else return -1;
    return 0;
}

void px_progress_json_num(const char *key, double v) {
    if (isfinite(v)) printf(",\"%s\":%.9g", key, v);
    else printf(",\"%s\":null", key);
}

void px_progress_step(px_progress_format_t f, const px_progress_step_t *p) {
    if (f == PX_PROGRESS_JSON) {
        printf("{\"kind\":\"progress\",\"step\":%lld", (long long)p->step);
        px_progress_json_num("loss", p->loss);
        px_progress_json_num("norm", p->norm);
        px_progress_json_num("ms", p->ms);
        px_progress_json_num("tok_s", p->tok_s);
        printf(",\"groups\":%d,\"quorum\":%lld,\"group\":\"%s\",\"mode\":\"%s\"", p->groups, (long long)p->quorum,
               p->group, p->mode);
        if (p->round > 0) printf(",\"inner\":%d,\"round\":%d", p->inner, p->round);
        if (p->has_eval) px_progress_json_num("eval_loss", p->eval_loss);
        printf("}\n");
    } else {
        printf("progress step=%lld loss=%.6f norm=%.6f ms=%.1f tok_s=%.0f groups=%d quorum=%lld group=%s",
               (long long)p->step, p->loss, p->norm, p->ms, p->tok_s, p->groups, (long long)p->quorum, p->group);
        if (p->show_mode) printf(" mode=%s", p->mode);
        if (p->round > 0) printf(" inner=%d/%d", p->inner, p->round);
        if (p->has_eval) printf(" eval_loss=%.4f", p->eval_loss);
        printf("\n");
    }
    fflush(stdout);
}

void px_progress_eval(px_progress_format_t f, int64_t step, double eval_loss, const char *group) {
    if (f == PX_PROGRESS_JSON) {
        printf("{\"kind\":\"eval\",\"step\":%lld", (long long)step);
        px_progress_json_num("eval_loss", eval_loss);
        printf(",\"group\":\"%s\"}\n", group);
    } else {
        printf("eval step=%lld eval_loss=%.4f group=%s\n", (long long)step, eval_loss, group);
    }
    fflush(stdout);
}

void px_progress_outer(px_progress_format_t f, const char *group, int64_t step, int64_t outer, double contributors,
                       const char *groups, double loss, unsigned long long wire_bytes, const char *fragment) {
    if (f == PX_PROGRESS_JSON) {
        printf("{\"kind\":\"outer_step\",\"step\":%lld,\"outer\":%lld,\"contributors\":%.0f,\"groups\":\"%s\"",
               (long long)step, (long long)outer, contributors, groups);
        px_progress_json_num("loss", loss);
        printf(",\"wire_bytes\":%llu,\"fragment\":\"%s\",\"group\":\"%s\",\"mode\":\"diloco\"}\n", wire_bytes,
               fragment, group);
    } else {
        printf("event kind=outer_step step=%lld outer=%lld contributors=%.0f groups=%s loss=%.6f wire_bytes=%llu "
               "fragment=%s\n", (long long)step, (long long)outer, contributors, groups, loss, wire_bytes, fragment);
    }
    fflush(stdout);
}
