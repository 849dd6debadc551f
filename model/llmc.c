/* llm.c model file reader and writer (llmc.h). Readers trust nothing: every
 * header field is checked before it sizes an allocation, and the file size
 * must match the header exactly, so a torn or truncated file is refused with
 * the reason rather than half-loaded. */
#include "llmc.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "px_err.h"
#include "px_file.h"

#define HEADER_INTS 256
#define HEADER_BYTES (HEADER_INTS * (long)sizeof(int32_t))

/* Opens path and reads the header; on success *fp is open and *size is the file size. */
static int read_header(const char *path, FILE **fp, int32_t h[HEADER_INTS], long long *size,
                       px_gpt_config_t *cfg, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) return px_err_set(err, errlen, "cannot open model file '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fileno(f), &st) != 0) {
        fclose(f);
        return px_err_set(err, errlen, "cannot stat model file '%s': %s", path, strerror(errno));
    }
    *size = (long long)st.st_size;
    size_t got = fread(h, sizeof(int32_t), HEADER_INTS, f);
    if (got != HEADER_INTS) {
        fclose(f);
        return px_err_set(err, errlen,
                          "model file '%s' is truncated: %lld bytes, shorter than the %ld-byte "
                          "header",
                          path, *size, HEADER_BYTES);
    }
    if (h[0] != PX_LLMC_MAGIC) {
        fclose(f);
        return px_err_set(err, errlen,
                          "model file '%s' has bad magic %d (expected %d): not an llm.c model "
                          "file",
                          path, h[0], PX_LLMC_MAGIC);
    }
    if (h[1] != PX_LLMC_VERSION_FP32) {
        fclose(f);
        if (h[1] == 5)
            return px_err_set(err, errlen,
                              "model file '%s' has version 5 (bf16 weights), which is not "
                              "supported: export it as version 3 (fp32)",
                              path);
        return px_err_set(err, errlen,
                          "model file '%s' has unsupported version %d (expected %d: fp32 with "
                          "padded vocabulary)",
                          path, h[1], PX_LLMC_VERSION_FP32);
    }
    cfg->max_seq_len = h[2];
    cfg->vocab_size = h[3];
    cfg->num_layers = h[4];
    cfg->num_heads = h[5];
    cfg->channels = h[6];
    cfg->padded_vocab_size = h[7];
    char why[PX_ERRLEN];
    if (px_gpt_config_check(cfg, why, sizeof why) != 0) {
        fclose(f);
        return px_err_set(err, errlen, "model file '%s' has a bad config: %s", path, why);
    }
    *fp = f;
    return 0;
}

int px_gpt_load(const char *path, px_gpt_t **out, char *err, size_t errlen) {
    *out = NULL;
    FILE *f = NULL;
    int32_t h[HEADER_INTS];
    long long size = 0; /* set by read_header; -O3 cannot tell */
    px_gpt_config_t cfg;
    if (read_header(path, &f, h, &size, &cfg, err, errlen) != 0) return -1;
    size_t sizes[PX_GPT_NUM_TENSORS];
    size_t n = px_gpt_tensor_sizes(&cfg, sizes);
    long long expect = HEADER_BYTES + (long long)n * (long long)sizeof(float);
    if (size != expect) {
        fclose(f);
        return px_err_set(err, errlen,
                          "model file '%s' is %s: %lld bytes, but its header (L=%d C=%d NH=%d "
                          "maxT=%d Vp=%d) needs exactly %lld",
                          path, size < expect ? "truncated" : "larger than its header says", size,
                          cfg.num_layers, cfg.channels, cfg.num_heads, cfg.max_seq_len,
                          cfg.padded_vocab_size, expect);
    }
    px_gpt_t *m = px_gpt_new_zeroed(&cfg);
    if (!m) {
        fclose(f);
        return px_err_set(err, errlen, "model file '%s': out of memory for %zu parameters", path, n);
    }
    size_t got = fread(m->params, sizeof(float), n, f);
    fclose(f);
    if (got != n) {
        px_gpt_destroy(&m);
        return px_err_set(err, errlen, "model file '%s': short read (%zu of %zu parameters)", path,
                          got, n);
    }
    for (size_t i = 0; i < n; i++)
        if (!isfinite(m->params[i])) {
            px_gpt_destroy(&m);
            return px_err_set(err, errlen, "model file '%s': parameter %zu is not finite (corrupt?)",
                              path, i);
        }
    *out = m;
    return 0;
}

int px_gpt_save(const px_gpt_t *model, const char *path, char *err, size_t errlen) {
    int32_t h[HEADER_INTS] = {0};
    const px_gpt_config_t *c = &model->config;
    h[0] = PX_LLMC_MAGIC;
    h[1] = PX_LLMC_VERSION_FP32;
    h[2] = c->max_seq_len;
    h[3] = c->vocab_size;
    h[4] = c->num_layers;
    h[5] = c->num_heads;
    h[6] = c->channels;
    h[7] = c->padded_vocab_size;
    return px_file_write_atomic(path, h, sizeof h, model->params, model->num_params * sizeof(float),
                                "model file", err, errlen);
}
