/* The flags of a program that talks to the coordinator over its control
 * plane (phalanx-worker, phalanxctl): where it is, and the credentials to
 * present. One table, so that every client spells, checks and documents
 * them alike; phalanx-launch checks the ones it passes on with it. */
#ifndef PX_CLIENT_FLAGS_H
#define PX_CLIENT_FLAGS_H

#include "px_flags.h"

typedef struct {
    const char *coordinator;       /* --coordinator: its ZeroMQ endpoint */
    const char *curve_secret;      /* --curve-secret-key-file: this client's CURVE secret key, or NULL */
    const char *curve_server_file; /* --coordinator-public-key-file: the coordinator's public key, or NULL */
    const char *curve_server_key;  /* --coordinator-key: the same inline (Z85), or NULL */
    char *token;                   /* --token-file's first line (malloc'd), or NULL */
} px_client_flags_t;

/* Fills a px_client_flags_t. */
extern const px_flag_table_t px_client_flags;

#endif
