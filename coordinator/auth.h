/* Who may talk to the coordinator's control plane.
 *
 * With CURVE (--curve-secret-key-file, --authorized-keys) every connection
 * to the ROUTER socket is encrypted, and a ZAP handler (RFC 27) admits a
 * client only when its public key is listed in the authorized-keys file
 * (format in common/px_keys.h). The handler runs on a small thread of its
 * own, px_auth_start, because libzmq asks it during handshakes, and a
 * handshake must not wait for the event loop's next turn. The thread touches
 * nothing of the coordinator's: it owns its REP socket and its key table, and
 * hands what the event log should record (rejections, rate limited; reloads)
 * to the loop through a small locked queue (px_auth_drain). It re-reads the
 * authorized-keys file when *reload becomes non-zero (SIGHUP: a lock-free
 * atomic, so a signal handler may set it and this thread read it); a file that
 * no longer parses leaves the previous keys in force.
 *
 * Pure logic, tested as tables: the authorized-keys parser, the constant-time
 * token comparison, and the bind policy (which endpoints are loopback). */
#ifndef PX_AUTH_H
#define PX_AUTH_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "px_keys.h"

/* ---- authorized keys --------------------------------------------------- */

typedef struct {
    uint8_t key[32];                    /* the public key, binary (as ZAP carries it) */
    char z85[PX_KEY_LEN + 1];
    char label[PX_KEY_LABEL_MAX + 1];   /* "" when the line had none */
} px_auth_key_t;

typedef struct {
    px_auth_key_t *keys;
    int n, cap;
} px_auth_keys_t;

/* Parses authorized-keys text into *out (zeroed by the caller; duplicates
 * kept once). 0 ok; -1 with *bad_line (1-based, 0 when not about a line) and
 * why. A file without a single key is an error: no client could connect. */
int px_auth_keys_parse(const char *text, size_t len, px_auth_keys_t *out, int *bad_line, char *why, size_t whylen);
/* Reads and parses a file; err says "PATH line N: why". */
int px_auth_keys_load(const char *path, px_auth_keys_t *out, char *err, size_t errlen);
const px_auth_key_t *px_auth_keys_find(const px_auth_keys_t *k, const uint8_t key[32]);
void px_auth_keys_free(px_auth_keys_t *k);

/* ---- tokens and the bind policy ----------------------------------------- */

/* Compares a presented token with the job's in time that depends only on the
 * lengths: on the job token's (fixed) and the presented one's (the sender's
 * own), never on where the bytes differ. */
int px_auth_token_equal(const char *given, const char *expected);
/* The job tokens the coordinator accepts: every non-blank line of the
 * --token-file (at most PX_AUTH_TOKENS_MAX, each 1..256 bytes; a trailing
 * '\r' is dropped). Workers present the first line of theirs, so a file of
 * "new\nold" lets both the restarted and the not yet restarted workers in
 * while a token is rotated. */
#define PX_AUTH_TOKENS_MAX 8
#define PX_AUTH_TOKEN_LEN_MAX 256
typedef struct {
    char tok[PX_AUTH_TOKENS_MAX][PX_AUTH_TOKEN_LEN_MAX + 1];
    int n;
} px_auth_tokens_t;
/* 0 ok; -1 with why (naming the line). No token at all is an error. */
int px_auth_tokens_parse(const char *text, size_t len, px_auth_tokens_t *out, char *why, size_t whylen);
/* Reads and parses a file; err says "PATH: why". */
int px_auth_tokens_load(const char *path, px_auth_tokens_t *out, char *err, size_t errlen);
/* 1 when `given` equals one of the tokens; every token is compared, in time
 * that does not depend on which one matched or where bytes differ. */
int px_auth_tokens_match(const px_auth_tokens_t *t, const char *given);
/* 1 for ipc://, inproc://, and tcp:// on 127.0.0.0/8, ::1 or localhost. */
int px_auth_endpoint_is_loopback(const char *endpoint);
int px_auth_host_is_loopback(const char *host);
/* The coordinator refuses to bind a non-loopback control endpoint with
 * neither CURVE nor a token, unless insecure. 1: may start. */
int px_auth_bind_allowed(const char *endpoint, int curve, int token, int insecure);

/* ---- the ZAP handler ---------------------------------------------------- */

typedef struct px_auth px_auth_t;

/* Loads the authorized keys and starts serving ZAP in zctx. Call before the
 * CURVE socket binds: a CURVE server with no handler would admit anyone. */
px_auth_t *px_auth_start(void *zctx, const char *keys_path, atomic_int *reload, char *err, size_t errlen);
/* On the loop: hands each queued event (type, JSON members, how many
 * rejections it stands for) to fn, then forgets it. */
typedef void (*px_auth_event_fn)(void *ctx, const char *type, const char *fields, uint64_t count);
void px_auth_drain(px_auth_t *a, px_auth_event_fn fn, void *ctx);
int px_auth_key_count(px_auth_t *a);
/* Stops the thread, hands what is still queued to fn (may be NULL), frees. */
void px_auth_stop(px_auth_t **a, px_auth_event_fn fn, void *ctx);

#endif
