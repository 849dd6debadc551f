/* CURVE key files, shared by every phalanx program that talks ZeroMQ (the
 * coordinator, workers, phalanxctl) and by phalanx-launch, which makes a
 * throwaway set for a local job.
 *
 * A key pair is two files written by `phalanxctl keygen --out PREFIX`:
 *   PREFIX.key  the secret key (mode 0600), one Z85 line after a comment
 *   PREFIX.pub  the public key: "KEY LABEL", LABEL being PREFIX's basename
 * A .pub line is also a valid authorized-keys line, so
 * `cat *.pub >> authorized_keys` admits those clients.
 *
 * Line format (key files and authorized-keys files alike): blank lines and
 * lines beginning with '#' are comments; a key line is a 40-character Z85
 * key, optionally followed by whitespace and a label (printable ASCII, at
 * most 64 bytes). '#' is a Z85 digit (84), but never the first of a key:
 * every 5 characters encode 4 bytes, and 84 * 85^4 exceeds 2^32, so no
 * 32-byte key encodes to a string beginning with '#' (or '$', 83).
 *
 * Secret key files must not be accessible by other users: readers refuse a
 * file with any "other" permission bit and warn when its group has access
 * (Kubernetes secrets mounted with fsGroup are group-readable by design).
 *
 * Handshake failures never arrive as messages: libzmq reports them only to a
 * socket monitor. px_zmq_monitor_next reads its events (the coordinator's
 * closed connections too) and px_curve_handshake_why says, for a person, why
 * a client's handshake failed. px_zmq_router_recv reads one routed message
 * the way both ROUTER sockets (the coordinator's, a group leader's) need. */
#ifndef PX_KEYS_H
#define PX_KEYS_H

#include <stddef.h>
#include <stdint.h>
#include <zmq.h>

#define PX_KEY_LEN 40       /* a 32-byte CURVE key in Z85 */
#define PX_KEY_LABEL_MAX 64

typedef struct {
    char pub[PX_KEY_LEN + 1], sec[PX_KEY_LEN + 1]; /* Z85, NUL-terminated */
} px_keypair_t;

/* 1 when s[0..n) is a Z85 encoding of a 32-byte key: PX_KEY_LEN characters
 * of the alphabet, each group of 5 worth less than 2^32. */
int px_key_z85_ok(const char *s, size_t n);

/* One line (without its newline; a trailing '\r' is ignored). Returns 1 for a
 * key line (key and label filled; label "" when absent), 0 for a blank or
 * comment line, -1 for a malformed line with the reason in why. */
int px_key_line_parse(const char *line, size_t len, char key[PX_KEY_LEN + 1], char label[PX_KEY_LABEL_MAX + 1],
                      char *why, size_t whylen);

/* Makes a new key pair and writes PREFIX.key (0600) and PREFIX.pub (0644);
 * refuses to overwrite either. 0 ok (*out filled), -1 with err naming the file. */
int px_keys_generate(const char *prefix, px_keypair_t *out, char *err, size_t errlen);

/* The first key of a public key file. 0 ok, -1 with err naming file and line. */
int px_keys_read_public(const char *path, char pub[PX_KEY_LEN + 1], char *err, size_t errlen);

/* A secret key file (permissions checked as above); the public half is
 * derived from it. 0 ok, -1 with err. */
int px_keys_read_secret(const char *path, px_keypair_t *out, char *err, size_t errlen);

/* A client's CURVE setting, from its flags. */
typedef struct {
    int on;                       /* 0: plaintext */
    char server[PX_KEY_LEN + 1];  /* the coordinator's public key */
    px_keypair_t own;
} px_curve_client_t;

/* From --curve-secret-key-file, --coordinator-public-key-file and
 * --coordinator-key (each may be NULL). All NULL: plaintext. A secret key
 * needs exactly one of the other two and vice versa. err names the flag. */
int px_curve_client_load(const char *secret_path, const char *server_path, const char *server_z85,
                         px_curve_client_t *out, char *err, size_t errlen);
/* Sets the CURVE client options on a ZeroMQ socket before it connects. */
int px_curve_client_apply(void *sock, const px_curve_client_t *k);

/* The next event waiting on a socket monitor (a PAIR connected to the
 * endpoint given to zmq_socket_monitor): 1 with *event and *value filled,
 * 0 when none waits. */
int px_zmq_monitor_next(void *mon, uint16_t *event, uint32_t *value);
/* Receives one message from a ROUTER without waiting. *id and *body are
 * initialised here and the caller closes both. 1: exactly [identity][body];
 * 0: malformed (no body, or more parts, which are drained), *why says which;
 * -1: nothing waits. (The coordinator's socket and a group leader's.) */
int px_zmq_router_recv(void *sock, zmq_msg_t *id, zmq_msg_t *body, const char **why);
/* Why a client's handshake failed (a monitor event and its value), one line
 * naming the fix; why is set to "" for an event that is not a failure. */
void px_curve_handshake_why(uint16_t event, uint32_t value, const px_curve_client_t *k, char *why, size_t cap);

/* A throwaway set for one local job in dir (created 0700; old files there
 * replaced): coordinator.key/.pub, worker.key/.pub, and authorized_keys
 * admitting worker.pub. 0 ok, -1 with err. */
int px_keys_make_local_set(const char *dir, char *err, size_t errlen);
/* A throwaway job token for one local job: dir/token (dir created 0700, the
 * file 0600, an old one replaced), 64 hex digits from the kernel's random
 * source. 0 ok, -1 with err. */
int px_keys_make_local_token(const char *dir, char *err, size_t errlen);

#endif
