/* The sample a training job prints every --sample-every steps, as llm.c
 * does: the model's continuation of the end-of-text token (a newline for
 * byte-level data), decoded with the data's tokenizer, on one line:
 *   sample step=200 tokens=64 text="...\n..."
 * (C escapes, so a sample never breaks the one-line-per-event log). The
 * seed is the job's, mixed with the step: the same job prints the same
 * samples. */
#ifndef PX_SAMPLE_LINE_H
#define PX_SAMPLE_LINE_H

#include <stdint.h>

#include "gpt.h"
#include "px_tok.h"

/* The data's tokenizer (DATA/tokenizer.json), or NULL for bytes (logged
 * when one is there but cannot be read). */
px_tok_t *px_sample_line_tokenizer(const char *data_dir);

/* Generates `tokens` tokens with model (a whole model on the host) and
 * prints the sample line on stdout. 0, or -1 (logged). */
int px_sample_line(px_gpt_t *model, const px_tok_t *tok, int tokens, uint64_t seed, int64_t step);

#endif
