/* Healing (see heal.h): the state digest cache, the heal wire format (send,
 * receive into a staging copy, verify), the group broadcast and the
 * cross-group plan. follow.c calls it after each quorum change (the step protocol
 * at the top of trainer.c). */
#include "heal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "px_log.h"
#include "px_time.h"
#include "px_wire.h"

#define HEAL_MAGIC 0x7068616c6865616cull

typedef struct {
    uint64_t magic, step, n_floats, checksum, nbuf, local;
} heal_header_t;

int px_heal_init(px_heal_t *h, px_train_state_t *state, px_agent_t *agent, const char *group, int rank) {
    memset(h, 0, sizeof *h);
    h->state = state;
    h->agent = agent;
    h->group = group;
    h->rank = rank;
    h->digest = malloc(px_state_digest_len(state) * sizeof *h->digest);
    return h->digest ? 0 : -1;
}

void px_heal_free(px_heal_t *h) {
    free(h->digest);
    h->digest = NULL;
}

uint64_t px_heal_checksum(px_heal_t *h) {
    px_train_state_t *s = h->state;
    if (h->ck_valid && h->ck_step == s->step) return h->ck;
    px_state_digest(s, h->digest);
    h->ck = px_state_checksum(s, h->digest);
    h->ck_step = s->step;
    h->ck_valid = 1;
    return h->ck;
}

/* The live state became `stage` (verified, digest `digest`). */
static void adopt(px_heal_t *h, const px_train_state_t *stage, const uint64_t *digest, uint64_t ck) {
    px_state_copy(h->state, stage);
    memcpy(h->digest, digest, px_state_digest_len(stage) * sizeof *digest);
    h->ck = ck;
    h->ck_step = stage->step;
    h->ck_valid = 1;
}

/* Hashes `stage` into got[] and checks it against the sender's digest and
 * checksum. 0, or -1 with the first mismatch in why. */
static int verify(const px_train_state_t *stage, const uint64_t *sent, uint64_t *got, uint64_t checksum, char *why,
                  size_t wlen) {
    size_t len = px_state_digest_len(stage);
    px_state_digest(stage, got);
    for (size_t k = 0; k < len; k++) {
        if (got[k] != sent[k]) {
            int b;
            size_t off, n;
            px_state_chunk(stage->n, k, &b, &off, &n);
            snprintf(why, wlen, "chunk %zu of %s failed its checksum", off / PX_STATE_CHUNK_FLOATS,
                     px_state_buf_names[b]);
            return -1;
        }
    }
    if (px_state_checksum(stage, got) != checksum) {
        snprintf(why, wlen, "state checksum mismatch after transfer");
        return -1;
    }
    return 0;
}

/* ---- one heal, sender to receiver -------------------------------------- */

static int heal_chunk_delay_ms(void) {
    const char *v = getenv("PX_TEST_HEAL_CHUNK_DELAY_MS");
    return v ? atoi(v) : 0;
}

/* Header, every chunk of every buffer, then the digest in one message. */
static int send_state(px_heal_t *h, px_comm_t *c, int peer) {
    const px_train_state_t *s = h->state;
    heal_header_t hdr = {HEAL_MAGIC, (uint64_t)s->step, s->n, px_heal_checksum(h), (uint64_t)s->nbuf, s->local};
    size_t len = px_state_digest_len(s);
    int delay = heal_chunk_delay_ms(), tag = 1;
    px_comm_status_t st = px_comm_send(c, &hdr, sizeof hdr, peer, tag++);
    for (size_t k = 0; k < len && st == PX_COMM_OK; k++) {
        int b;
        size_t off, n;
        px_state_chunk(s->n, k, &b, &off, &n);
        if (delay > 0) px_sleep_ms(delay);
        st = px_comm_send(c, s->buf[b] + off, n * sizeof(float), peer, tag++);
    }
    if (st == PX_COMM_OK) st = px_comm_send(c, h->digest, len * sizeof *h->digest, peer, tag++);
    return st == PX_COMM_OK ? 0 : -1;
}

/* Receives into `stage` and the sender's digest into sent[]. */
static int recv_into(px_comm_t *c, int peer, px_train_state_t *stage, uint64_t *sent, uint64_t *checksum, char *why,
                     size_t wlen) {
    heal_header_t hdr;
    int tag = 1;
    px_comm_status_t st = px_comm_recv(c, &hdr, sizeof hdr, peer, tag++);
    if (st == PX_COMM_OK && (hdr.magic != HEAL_MAGIC || hdr.n_floats != stage->n || hdr.nbuf != (uint64_t)stage->nbuf ||
                             hdr.local >> stage->nbuf)) {
        snprintf(why, wlen, "bad heal header: %llu buffers of %llu floats (local mask %#llx) for a state of %d of %zu "
                 "(model or mode mismatch?)", (unsigned long long)hdr.nbuf, (unsigned long long)hdr.n_floats,
                 (unsigned long long)hdr.local, stage->nbuf, stage->n);
        px_comm_abort(c); /* the sender would otherwise wait out its timeout */
        return -1;
    }
    size_t len = px_state_digest_len(stage);
    for (size_t k = 0; k < len && st == PX_COMM_OK; k++) {
        int b;
        size_t off, n;
        px_state_chunk(stage->n, k, &b, &off, &n);
        st = px_comm_recv(c, stage->buf[b] + off, n * sizeof(float), peer, tag++);
    }
    if (st == PX_COMM_OK) st = px_comm_recv(c, sent, len * sizeof *sent, peer, tag++);
    if (st != PX_COMM_OK) {
        snprintf(why, wlen, "receive failed: %s", px_comm_status_str(st));
        return -1;
    }
    stage->step = (int64_t)hdr.step;
    stage->local = (unsigned)hdr.local; /* the sender's mode (--mode auto) */
    *checksum = hdr.checksum;
    return 0;
}

static void heal_finished(px_heal_t *h, const char *source, int64_t qid, int64_t ms) {
    size_t bytes = px_state_bytes(h->state);
    double mb = (double)bytes / 1e6;
    h->heals++;
    px_agent_note_heal(h->agent, bytes, ms);
    px_log_info("heal_finished source=%s quorum_id=%lld step=%lld bytes=%.1fMB ms=%lld rate=%.0fMB/s", source,
                (long long)qid, (long long)h->state->step, mb, (long long)ms, ms > 0 ? mb * 1000.0 / (double)ms : 0.0);
    if (h->rank == 0) {
        px_agent_notify(h->agent, "heal_finished", qid, h->state->step, source, bytes,
                        (unsigned)ms, "");
        printf("event kind=healed group=%s step=%lld source=%s ms=%lld\n", h->group, (long long)h->state->step, source,
               (long long)ms);
        fflush(stdout);
    }
}

/* Where a receive goes: a staging copy (*into = stage), or, at step 0 with
 * a way to rebuild the initial state, the live state itself (*into = live).
 * 0, or -1 when out of memory for the staging copy. */
static int receive_target(px_heal_t *h, px_train_state_t *stage, px_train_state_t **into) {
    memset(stage, 0, sizeof *stage);
    if (h->state->step == 0 && h->reinit) {
        *into = h->state;
        return 0;
    }
    *into = stage;
    return px_state_alloc_like(stage, h->state);
}

/* After a receive into *into: success takes it (digest got, checksum ck);
 * failure leaves the live state as it was (staged: untouched; in place: the
 * initial state rebuilt). Frees the staging copy either way. */
static int finish_receive(px_heal_t *h, px_train_state_t *stage, px_train_state_t *into, int ok, const uint64_t *got,
                          uint64_t ck) {
    int rc = ok ? 0 : -1;
    if (into == h->state) {
        h->ck_valid = 0;
        if (ok) {
            memcpy(h->digest, got, px_state_digest_len(into) * sizeof *got);
            h->ck = ck;
            h->ck_step = into->step;
            h->ck_valid = 1;
        } else if (h->reinit(h->reinit_ctx, h->state) != 0) {
            px_log_error("cannot rebuild the initial state after a failed heal");
            rc = -2;
        } else {
            h->state->step = 0;
        }
    } else if (ok) {
        adopt(h, into, got, ck);
    }
    px_state_free(stage);
    return rc;
}

/* Receives the state from `peer` (see receive_target); the live state is
 * replaced only once what arrived is verified. */
static int recv_state(px_heal_t *h, px_comm_t *c, int peer, const char *source, int64_t qid) {
    px_train_state_t *live = h->state;
    size_t len = px_state_digest_len(live);
    int64_t t0 = px_now_ms();
    px_agent_set_progress(h->agent, live->step, PHALANX__MEMBER_STATE__HEALING, qid);
    if (h->rank == 0)
        px_agent_notify(h->agent, "heal_started", qid, live->step, source, px_state_bytes(live), 0,
                        "");
    char why[200] = "";
    px_train_state_t stage, *into;
    uint64_t *sent = malloc(len * sizeof *sent), *got = malloc(len * sizeof *got), checksum = 0;
    int ok = 0;
    if (receive_target(h, &stage, &into) != 0 || !sent || !got) {
        snprintf(why, sizeof why, "out of memory for the staging copy (%zu bytes)", px_state_bytes(live));
        px_comm_abort(c);
    } else {
        ok = recv_into(c, peer, into, sent, &checksum, why, sizeof why) == 0 &&
             verify(into, sent, got, checksum, why, sizeof why) == 0;
    }
    int rc = finish_receive(h, &stage, into, ok, got, checksum);
    free(sent);
    free(got);
    if (rc != 0) {
        px_log_warn("heal_failed source=%s quorum_id=%lld reason=\"%s\" (state kept at step %lld)", source,
                    (long long)qid, why, (long long)live->step);
        return -1;
    }
    heal_finished(h, source, qid, px_now_ms() - t0);
    return 0;
}

/* ---- bringing a quorum to one state ------------------------------------- */

/* Every rank of `c` learns every rank's (step, state checksum): out[2*r] is
 * rank r's step, out[2*r+1] its checksum (the bits travel as floats through
 * an allgather, which copies without arithmetic). Returns a malloc'd array
 * of 2 * size values, or NULL on failure. */
static uint64_t *allgather_pairs(px_comm_t *c, const uint64_t mine[2]) {
    int size = px_comm_size(c);
    uint64_t *all = calloc((size_t)size * 2, sizeof *all);
    if (!all) return NULL;
    if (px_comm_allgather_f32(c, (const float *)(const void *)mine, (float *)(void *)all, 4) != PX_COMM_OK) {
        free(all);
        return NULL;
    }
    return all;
}

static uint64_t *allgather_state(px_heal_t *h, px_comm_t *c) {
    uint64_t mine[2] = {(uint64_t)h->state->step, px_heal_checksum(h)};
    if (h->group_comm) {
        int64_t step;
        if (px_heal_group_state(h, &step, &mine[1]) != 0) return NULL;
        mine[0] = (uint64_t)step;
    }
    return allgather_pairs(c, mine);
}

int px_heal_group_state(px_heal_t *h, int64_t *step, uint64_t *checksum) {
    uint64_t mine[2] = {(uint64_t)h->state->step, px_heal_checksum(h)};
    uint64_t *all = allgather_pairs(h->group_comm, mine);
    if (!all) return -1;
    int W = px_comm_size(h->group_comm), same = 1;
    uint64_t *cks = malloc((size_t)W * sizeof *cks);
    *step = (int64_t)all[0];
    for (int r = 0; r < W; r++) {
        if ((int64_t)all[2 * r] < *step) *step = (int64_t)all[2 * r];
        if (all[2 * r] != all[0]) same = 0;
        if (cks) cks[r] = all[2 * r + 1];
    }
    *checksum = same && cks ? px_state_hash(cks, (size_t)W, *step) : 0;
    free(cks);
    free(all);
    return 0;
}

/* The checksum of every buffer of s (digest), the local ones too (DiLoCo's
 * moments: a group's ranks hold them alike), and of its mode (local mask). */
static uint64_t full_hash(const px_train_state_t *s, const uint64_t *digest) {
    return px_state_hash(digest, px_state_digest_len(s), s->step) ^ s->local;
}

/* The root broadcasts its step, mode and buffers; the others receive into a
 * staging copy and take it once its checksum of every buffer equals the
 * root's (root_ck, full_checksum). */
static int broadcast_state(px_heal_t *h, px_comm_t *intra, int root, uint64_t root_ck) {
    px_train_state_t *live = h->state;
    size_t bytes = live->n * sizeof(float), len = px_state_digest_len(live);
    int me = px_comm_rank(intra);
    px_train_state_t stage, *into = live;
    uint64_t *got = NULL;
    if (me != root) {
        got = malloc(len * sizeof *got);
        if (receive_target(h, &stage, &into) != 0 || !got) {
            px_log_warn("group_sync_failed: out of memory for the staging copy");
            px_comm_abort(intra);
            px_state_free(&stage); /* alloc_like initialised it, even when it failed */
            free(got);
            return -1;
        }
    }
    int64_t head[2] = {live->step, live->local}; /* the step and the mode (local mask) */
    px_comm_status_t st = px_comm_broadcast(intra, head, sizeof head, root);
    int64_t step = head[0];
    for (int b = 0; b < live->nbuf && st == PX_COMM_OK; b++) st = px_comm_broadcast(intra, into->buf[b], bytes, root);
    int rc = st == PX_COMM_OK ? 0 : -1;
    if (me != root) {
        int ok = 0;
        uint64_t ck = 0; /* the state checksum (shared buffers), cached on success */
        if (rc == 0) {
            into->step = step;
            into->local = (unsigned)head[1] & ((1u << live->nbuf) - 1);
            px_state_digest(into, got);
            ok = full_hash(into, got) == root_ck;
            ck = px_state_checksum(into, got);
            if (!ok) px_log_warn("group_sync_failed: state checksum differs from rank %d's after the broadcast", root);
        }
        rc = finish_receive(h, &stage, into, ok, got, ck) == 0 ? 0 : -1;
        if (rc == 0) px_log_info("group_synced from_rank=%d step=%lld", root, (long long)step);
        else px_log_warn("group_sync_failed: state kept at step %lld", (long long)live->step);
        free(got);
    }
    return rc;
}

/* full_hash of the live state. Equals px_heal_checksum when no buffer is
 * local. */
static uint64_t full_checksum(px_heal_t *h) {
    px_heal_checksum(h); /* the digest up to date */
    return full_hash(h->state, h->digest);
}

int px_heal_sync_group(px_heal_t *h, px_comm_t *intra) {
    int W = px_comm_size(intra);
    uint64_t mine[2] = {(uint64_t)h->state->step, full_checksum(h)};
    uint64_t *all = allgather_pairs(intra, mine);
    if (!all) return -1;
    int root = 0, same = 1;
    for (int r = 1; r < W; r++)
        if (all[2 * r] > all[2 * root]) root = r;
    for (int r = 0; r < W; r++)
        if (all[2 * r] != all[2 * root] || all[2 * r + 1] != all[2 * root + 1]) same = 0;
    uint64_t root_ck = all[2 * root + 1];
    free(all);
    return same ? 0 : broadcast_state(h, intra, root, root_ck);
}

/* The heal plan: the quorum rule run on every group's (step, checksum), the
 * same on every rank. 0 with *plan filled (sorted by name, as q is). */
static int plan_heals(const px_quorum_t *q, const uint64_t *all, px_quorum_t *plan) {
    int P = q->n;
    px_quorum_candidate_t *c = calloc((size_t)P, sizeof *c);
    if (!c) return -1;
    for (int i = 0; i < P; i++) {
        snprintf(c[i].name, sizeof c[i].name, "%s", q->groups[i].name);
        c[i].healthy = c[i].requested = c[i].has_checksum = 1;
        c[i].step = (int64_t)all[2 * i];
        c[i].checksum = all[2 * i + 1];
    }
    px_quorum_t none;
    px_quorum_init(&none);
    px_quorum_config_t pc = {1, 0, 0};
    char reason[256];
    int rc = px_quorum_compute(c, P, &none, &pc, 0, plan, reason, sizeof reason) == 1 ? 0 : -1;
    free(c);
    return rc;
}

int px_heal_sync_quorum(px_heal_t *h, px_comm_t *cross, const px_quorum_t *q, int my_index) {
    uint64_t *all = allgather_state(h, cross);
    if (!all) return -1;
    px_quorum_t plan;
    px_quorum_init(&plan);
    int rc = plan_heals(q, all, &plan);
    free(all);
    for (int g = 0; rc == 0 && g < plan.n; g++) { /* index g is replica g */
        const px_quorum_member_t *m = &plan.groups[g];
        if (!m->heal) continue;
        int src = px_quorum_find(&plan, m->heal_source);
        if (m->divergent && g == my_index) {
            px_log_warn("divergence_detected group=%s step=%lld healing_from=%s", h->group,
                        (long long)h->state->step, m->heal_source);
            if (h->rank == 0)
                px_agent_notify(h->agent, "divergence_detected", q->id, h->state->step, m->heal_source, 0, 0,
                                "state checksum differs from the majority");
        }
        if (src == my_index) rc = send_state(h, cross, g);
        else if (g == my_index) rc = recv_state(h, cross, src, m->heal_source, q->id);
    }
    px_quorum_free(&plan);
    if (rc == 0 && px_comm_barrier(cross) != PX_COMM_OK) rc = -1;
    return rc;
}
