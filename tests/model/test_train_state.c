/* The training state's description (model/train_state.h): buffer counts,
 * digests, and the checksum with local buffers (DiLoCo's inner moments are
 * a group's own: groups holding the same global state must agree on it). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "px_check.h"
#include "train_state.h"

static int failed;

/* A state of nbuf buffers of n floats with a pattern in each. */
static px_train_state_t make(size_t n, int nbuf, unsigned local) {
    px_train_state_t like = {{0}, n, 7, 1337, 0, nbuf, local}, s;
    CHECK(px_state_alloc_like(&s, &like) == 0, "alloc %zu x %d", n, nbuf);
    for (int b = 0; b < nbuf; b++)
        for (size_t i = 0; i < n; i++) s.buf[b][i] = (float)(b * 1000 + (int)(i % 977)) * 0.25f;
    return s;
}

static uint64_t checksum(const px_train_state_t *s) {
    uint64_t *d = malloc(px_state_digest_len(s) * sizeof *d);
    px_state_digest(s, d);
    uint64_t ck = px_state_checksum(s, d);
    free(d);
    return ck;
}

int main(void) {
    size_t n = PX_STATE_CHUNK_FLOATS + 1000; /* two chunks per buffer */
    px_train_state_t sync = make(n, PX_STATE_NBUF, 0);
    CHECK(sync.nbuf == 3 && sync.local == 0, "alloc_like keeps the buffer count and mask");
    CHECK(px_state_digest_len(&sync) == 6, "3 buffers of 2 chunks: 6 digest entries, got %zu",
          px_state_digest_len(&sync));
    CHECK(px_state_bytes(&sync) == 3 * n * sizeof(float), "bytes of 3 buffers");
    uint64_t base = checksum(&sync);
    sync.buf[PX_STATE_V][n - 1] += 1.0f;
    CHECK(checksum(&sync) != base, "without local buffers, v is in the checksum");

    unsigned local = 1u << PX_STATE_M | 1u << PX_STATE_V;
    px_train_state_t a = make(n, PX_STATE_MAXBUF, local), b = make(n, PX_STATE_MAXBUF, local);
    CHECK(px_state_digest_len(&a) == 8 && px_state_bytes(&a) == 4 * n * sizeof(float), "4 buffers");
    uint64_t ck = checksum(&a);
    CHECK(checksum(&b) == ck, "the same state, the same checksum");
    b.buf[PX_STATE_M][3] = -5.0f;
    b.buf[PX_STATE_V][n - 2] = 9.0f;
    CHECK(checksum(&b) == ck, "the local moments are left out of the checksum");
    b.buf[PX_STATE_OUTER_M][n - 1] += 0.5f;
    CHECK(checksum(&b) != ck, "the outer momentum is in the checksum");
    b.buf[PX_STATE_OUTER_M][n - 1] -= 0.5f;
    CHECK(checksum(&b) == ck, "and only it changed");
    b.buf[PX_STATE_PARAMS][0] = 123.0f;
    CHECK(checksum(&b) != ck, "the global parameters are in the checksum");
    b.buf[PX_STATE_PARAMS][0] = a.buf[PX_STATE_PARAMS][0];
    b.step = 8;
    CHECK(checksum(&b) != ck, "the step is in the checksum");
    b.step = a.step;
    b.local = 0;
    CHECK(checksum(&b) != ck, "with no buffer local (a group's own ranks), the moments count");

    px_state_copy(&b, &a);
    b.local = local;
    CHECK(!memcmp(b.buf[PX_STATE_OUTER_M], a.buf[PX_STATE_OUTER_M], n * sizeof(float)) &&
          !memcmp(b.buf[PX_STATE_M], a.buf[PX_STATE_M], n * sizeof(float)), "copy moves every buffer");
    int buffer;
    size_t off, len;
    px_state_chunk(n, 7, &buffer, &off, &len);
    CHECK(buffer == PX_STATE_OUTER_M && off == PX_STATE_CHUNK_FLOATS && len == 1000,
          "digest entry 7 is outer_m's second chunk: buffer %d off %zu len %zu", buffer, off, len);
    px_state_free(&sync);
    px_state_free(&a);
    px_state_free(&b);
    if (failed) return 1;
    printf("train state: ok\n");
    return 0;
}
