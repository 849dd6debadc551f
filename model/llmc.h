/* llm.c model files, both ways: int32[256] header (magic 20240326, version 3 =
 * fp32 with padded vocabulary; then maxT, V, L, NH, C, Vp), then every
 * parameter as float32 in llm.c's tensor order, which is px_gpt_t's params
 * buffer byte for byte. Files written here load in llm.c and vice versa, which
 * is how models move between phalanx and the rest of the GPT-2 world. */
#ifndef PX_LLMC_H
#define PX_LLMC_H

#include <stddef.h>

#include "gpt.h"

#define PX_LLMC_MAGIC 20240326
#define PX_LLMC_VERSION_FP32 3

/* Creates a model from a file. Rejects a bad magic, an unsupported version, a
 * bad config, a file shorter or longer than the header implies, and non-finite
 * parameters. grads, m, v start at zero. 0, or -1 with a message naming the
 * file and the problem (*out stays NULL). */
int px_gpt_load(const char *path, px_gpt_t **out, char *err, size_t errlen);

/* Writes the model's params atomically: a temporary file beside path, fsync,
 * rename. 0, or -1 with a message. */
int px_gpt_save(const px_gpt_t *model, const char *path, char *err, size_t errlen);

#endif
