/* A GPT-2 model's parameters (and a DiLoCo state's outer momentum) as a
 * Hugging Face safetensors file, without I/O:
 * which tensors, in which orientation, where each lands in the data section,
 * the header, and the data. phalanx-ckpt export writes the two with
 * px_file_write_atomic (common/px_file.h).
 *
 * The file: an 8-byte little-endian header length N, N bytes of JSON
 * {NAME: {"dtype":"F32","shape":[...],"data_offsets":[begin,end]}, ...,
 * "__metadata__": {...}} padded with spaces to a multiple of 8, then the data
 * (offsets count from its first byte). Names are the checkpoint's GPT-2 names
 * (wte.weight, h.0.attn.c_attn.weight, ...), which are GPT2Model's. Two
 * things differ from the checkpoint's tensors, both to match what Hugging
 * Face's GPT-2 loads:
 *   - the four Conv1D weights (attn.c_attn, attn.c_proj, mlp.c_fc, mlp.c_proj)
 *     are stored transposed, (in, out), as Conv1D keeps them; the checkpoint
 *     holds nn.Linear's (out, in);
 *   - wte.weight has the real vocabulary's V rows, not the padded Vp.
 * A state of four buffers adds its outer momentum after the parameters, as
 * outer.momentum.NAME, each in its parameter's orientation and rows (a
 * GPT-2 loader reports them as unexpected keys and leaves them alone). */
#ifndef PX_SAFETENSORS_H
#define PX_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "gpt.h"
#include "train_state.h"

typedef struct {
    char name[96];
    int ndim;
    int64_t shape[2];  /* as stored in the file */
    int buffer;        /* PX_STATE_PARAMS or PX_STATE_OUTER_M */
    size_t src;        /* first float in that buffer (px_gpt_t's layout) */
    int transpose;     /* 1: params hold (shape[1], shape[0]); the file the transpose */
    uint64_t begin;    /* data_offsets: bytes into the data section */
    uint64_t end;
} px_safetensors_tensor_t;

/* The tensors of the file for a state of nbuf buffers (3, or 4 with the
 * outer momentum) of a model of config cfg, in llm.c's order: 4 + 12 L
 * parameters, then as many outer momentum tensors with nbuf 4. out may be
 * NULL to count; -1 when out of memory or nbuf is not 3 or 4. */
int px_safetensors_tensors(const px_gpt_config_t *cfg, int nbuf, px_safetensors_tensor_t *out);

/* The header (length prefix, JSON, padding) with "__metadata__" {"format":
 * "pt", "step": step, "source": "phalanx"}. malloc'd, its size in *len;
 * NULL when out of memory. */
char *px_safetensors_header(const px_safetensors_tensor_t *t, int n, int64_t step, size_t *len);

/* Bytes of the data section: the last tensor's end. */
uint64_t px_safetensors_data_bytes(const px_safetensors_tensor_t *t, int n);

/* Fills data (px_safetensors_data_bytes) from the state s's buffers,
 * transposing the Conv1D weights. */
void px_safetensors_fill(const px_safetensors_tensor_t *t, int n, const px_train_state_t *s, float *data);

/* ---- reading: what a file holds, and a tensor placed back ----------------
 * The import side (checkpoint/hf.h reads a Hugging Face folder with these).
 * A header is checked whole before any data is read: every entry's dtype,
 * shape and offsets, inside the data section, the byte count its shape and
 * dtype make. */

typedef struct {
    char name[128];
    char dtype[8];     /* as the header says: "F32", "BF16", ... */
    int ndim;          /* 0..4 */
    int64_t shape[4];
    uint64_t begin;    /* data_offsets, bytes into the data section */
    uint64_t end;
} px_safetensors_entry_t;

/* Bytes per element of a dtype safetensors defines, 0 for an unknown one. */
int px_safetensors_dtype_bytes(const char *dtype);
/* 1 for the dtypes a reader here turns into float32 exactly: F32, and the
 * two it widens, F16 and BF16. */
int px_safetensors_dtype_readable(const char *dtype);
/* Parses the header's JSON (the len bytes after its length prefix) of a
 * file whose data section is data_bytes long: every tensor ("__metadata__"
 * skipped) into *out (malloc'd, in the header's order). The count, or -1
 * with err naming the tensor at fault. */
int px_safetensors_parse(const char *json, size_t len, uint64_t data_bytes, px_safetensors_entry_t **out, char *err,
                         size_t errlen);
/* n elements of dtype (readable) at src, little-endian, as float32. */
void px_safetensors_to_f32(const char *dtype, const void *src, size_t n, float *dst);
/* The inverse of px_safetensors_fill for one tensor: values, in the file's
 * orientation and rows, into buffer (px_gpt_t's layout), Conv1D weights
 * transposed back. */
void px_safetensors_place(const px_safetensors_tensor_t *t, const float *values, float *buffer);

#endif
