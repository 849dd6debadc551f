/* Token files in llm.c's format: int32[256] header (magic 20240520, version 1,
 * token count in header[2]), then the tokens as little-endian uint16. The
 * format llm.c's data scripts write, so their files (GPT-2 BPE, vocab 50257)
 * and ours (bytes, vocab 256) feed the same loader. llm.c calls them shards
 * of a data set, and so do the messages here; in the code "shard" is an FSDP
 * shard of a model (parallel/sharded.h). */
#ifndef PX_TOKEN_FILE_H
#define PX_TOKEN_FILE_H

#include <stddef.h>
#include <stdint.h>

#define PX_TOKEN_FILE_MAGIC 20240520
#define PX_TOKEN_FILE_VERSION 1
#define PX_TOKEN_FILE_MAX_VOCAB 65536 /* ids are uint16 */

/* Reads a whole token file into a new array (*tokens, free() it). Rejects a short
 * header, bad magic, bad version, a negative count, a count larger than the
 * file holds (truncated or oversized count), trailing bytes, and any token
 * >= vocab_size. 0, or -1 with a message naming the file and the problem. */
int px_token_file_read(const char *path, int vocab_size, uint16_t **tokens, size_t *n, char *err,
                       size_t errlen);

/* Writes tokens as a token file, atomically (temporary file, fsync, rename).
 * n must fit the header's int32 count. 0, or -1 with a message. */
int px_token_file_write(const char *path, const uint16_t *tokens, size_t n, char *err, size_t errlen);

#endif
