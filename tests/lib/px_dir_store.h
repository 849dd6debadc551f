/* A rendezvous store in a directory, for tests and benchmarks: several
 * processes on one machine share keys through files. In production the store
 * is the coordinator's key-value service; this one needs nothing running.
 *
 * set writes a temporary file and renames it over the key's file, so a
 * reader sees the whole old value or the whole new one, never a torn one.
 * get polls for the file (1 ms, backing off to 5 ms) until it appears or
 * the timeout passes. Keys may contain '/', which is escaped in file names. */
#ifndef PX_DIR_STORE_H
#define PX_DIR_STORE_H

#include "px_comm.h"

typedef struct {
    char dir[256];
} px_dir_store_t;

/* Creates dir (and its parents) when missing. 0 on success. */
int px_dir_store_init(px_dir_store_t *s, const char *dir);
/* The px_store_t view used by px_comm_new_*; valid while *s lives. */
px_store_t px_dir_store(px_dir_store_t *s);
/* Removes the directory and every key in it. */
void px_dir_store_remove(px_dir_store_t *s);

#endif
