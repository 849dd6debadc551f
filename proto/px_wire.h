/* Framing and validation for the control-plane protocol (proto/phalanx.proto).
 *
 * Every received frame goes through px_wire_decode() before anything looks at
 * it: it enforces the size limit, decodes, checks the protocol version, the
 * message type, each body's required fields and their ranges. On failure it
 * returns the ErrorCode to answer with and a message naming what is wrong, so
 * the caller can reply with a typed Error and count a bad_message event.
 * Validation is pure (no I/O) and is tested as a table of cases. */
#ifndef PX_WIRE_H
#define PX_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "phalanx.pb-c.h"

#define PX_PROTO_VERSION 1u
#define PX_WIRE_MAX_FRAME (64 * 1024)   /* bytes, any message to the coordinator */
#define PX_WIRE_MAX_REPLY (8 * 1024 * 1024) /* bytes, coordinator to worker (a quorum of ~100k groups) */
#define PX_STORE_VALUE_MAX (16 * 1024)  /* bytes, one rendezvous value */
#define PX_STORE_KEY_MAX 256
#define PX_GROUP_NAME_MAX 63
#define PX_GROUP_SIZE_MAX 1024
#define PX_HOST_MAX 255
#define PX_ENDPOINT_MAX 255
#define PX_REASON_MAX 512
#define PX_WAIT_MAX_MS 600000u
/* Steps and quorum ids from peers are bounded so that sums and comparisons on
 * them can never overflow and a forged id cannot jump the job's far ahead. */
#define PX_STEP_MAX 1000000000000LL /* 1e12 */
#define PX_QUORUM_ID_MAX 1000000000000LL

typedef Phalanx__Envelope px_msg_t;

/* Decodes and validates one frame. Returns NULL and fills code/why on error;
 * the caller frees a returned message with px_wire_free(). */
px_msg_t *px_wire_decode(const void *buf, size_t len, Phalanx__ErrorCode *code, char *why,
                         size_t why_len);
/* The same with another size limit (workers accept PX_WIRE_MAX_REPLY from the coordinator). */
px_msg_t *px_wire_decode_max(const void *buf, size_t len, size_t max, Phalanx__ErrorCode *code, char *why,
                             size_t why_len);
void px_wire_free(px_msg_t *msg);

/* Validates an already decoded message (used by px_wire_decode). 0 when valid. */
int px_wire_validate(const px_msg_t *msg, Phalanx__ErrorCode *code, char *why, size_t why_len);

/* Packs msg (its version field is set here) into a malloc'd buffer. */
void *px_wire_encode(px_msg_t *msg, size_t *len);

/* A valid group name: 1..63 bytes of [A-Za-z0-9_.-]. */
int px_wire_group_name_ok(const char *name);

/* A liveness endpoint a leader may publish: tcp://HOST:PORT, printable, at
 * most PX_ENDPOINT_MAX bytes, port 1..65535. */
int px_wire_endpoint_ok(const char *ep);

/* "tcp://HOST:PORT" into host (an IPv6 literal's brackets removed) and port
 * (may be empty). 0, or -1 when ep is not of that form, the host is empty, or
 * a part does not fit its buffer. */
int px_wire_endpoint_split(const char *ep, char *host, size_t hlen, char *port, size_t plen);

/* A WorkerEvent kind the coordinator records. */
int px_wire_worker_event_kind_ok(const char *kind);

/* Checkpoint events: WorkerEvent kinds PX_WIRE_CKPT_PREFIX + what ("saved",
 * "rejected", ...). Their detail holds a path (started, saved, restored), a
 * reason (failed) or, for "rejected", three fields in the order of
 * px_wire_ckpt_field_t separated by PX_WIRE_CKPT_SEP: the checkpoint's path,
 * the file that failed and the fault; for "moved_aside", the same fields
 * with the folder's new name in place of the file and no fault. One
 * WorkerEvent carries them all, so the protocol needs no message of its own
 * for a rejection. */
#define PX_WIRE_CKPT_PREFIX "checkpoint_"
#define PX_WIRE_CKPT_SEP '\t'
typedef enum { PX_WIRE_CKPT_PATH, PX_WIRE_CKPT_FILE, PX_WIRE_CKPT_FAULT, PX_WIRE_CKPT_FIELDS } px_wire_ckpt_field_t;

/* What follows PX_WIRE_CKPT_PREFIX in kind ("saved"), or NULL when kind is
 * not a checkpoint event's. */
const char *px_wire_ckpt_event(const char *kind);
/* The worker's side: a rejection's detail into out[outlen] (outlen of
 * PX_REASON_MAX + 1 makes a valid detail). file and fault come whole when
 * they fit, and the tail of a long path, which is what tells checkpoints
 * apart; a separator inside a field becomes a space, so the fields after it
 * stay in place. */
void px_wire_ckpt_rejected_join(char *out, size_t outlen, const char *path, const char *file, const char *fault);
/* The coordinator's side: splits detail in place into
 * field[PX_WIRE_CKPT_FIELDS] (pointers into detail; a missing one is ""). */
void px_wire_ckpt_rejected_split(char *detail, const char *field[PX_WIRE_CKPT_FIELDS]);

const char *px_wire_body_name(const px_msg_t *msg);
const char *px_wire_error_name(Phalanx__ErrorCode code);

#endif
