/* A checkpoint as a model (ckpt.h, px_ckpt_open_model) and the run's
 * tokenizer kept beside it: what a tool that reads a checkpoint outside
 * training needs (phalanx-ckpt export, phalanx-sample). The sizes come from the manifest and the files are
 * checked before the model is allocated, so a manifest describing a huge
 * model with no data behind it never makes a reader allocate that model. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ckpt.h"
#include "px_err.h"
#include "px_file.h"

static int open_one(const char *path, int outer, px_gpt_t **model, px_train_state_t *s, px_ckpt_fault_t *f) {
    px_ckpt_manifest_t m;
    if (px_ckpt_read_manifest(path, &m, f) != 0) return -1;
    if (px_ckpt_check_files(path, &m, f) != 0) {
        px_ckpt_manifest_free(&m);
        return -1;
    }
    px_gpt_t *g = px_gpt_new_zeroed(&m.model);
    /* The state is loaded straight into the model's buffers (params, m, v),
     * and a DiLoCo state's outer momentum into one of its own. */
    px_train_state_t st = g ? px_state_of_model(g, 0, 0) : (px_train_state_t){0};
    if (g && outer && m.outer_momentum && (st.buf[PX_STATE_OUTER_M] = malloc(st.n * sizeof(float))))
        st.nbuf = PX_STATE_MAXBUF;
    int complete = g && st.nbuf == (outer && m.outer_momentum ? PX_STATE_MAXBUF : PX_STATE_NBUF);
    px_ckpt_manifest_free(&m);
    if (!complete || px_ckpt_load(path, &g->config, &st, NULL, f) != 0) {
        if (!complete) {
            snprintf(f->file, sizeof f->file, "%s", path);
            snprintf(f->fault, sizeof f->fault, "out of memory for its model");
            f->kind = PX_CKPT_UNAVAILABLE;
        }
        free(st.nbuf == PX_STATE_MAXBUF ? st.buf[PX_STATE_OUTER_M] : NULL);
        px_gpt_destroy(&g);
        return -1;
    }
    *model = g;
    *s = st;
    return 0;
}

int px_ckpt_open_model(const char *path, int outer, px_gpt_t **model, px_train_state_t *s, char *used,
                       size_t usedlen, px_ckpt_fault_t *f) {
    char manifest[4300];
    struct stat st;
    snprintf(manifest, sizeof manifest, "%s/" PX_CKPT_MANIFEST, path);
    if (stat(manifest, &st) == 0 || px_ckpt_folder_step(path) >= 0) { /* one checkpoint */
        if (used) snprintf(used, usedlen, "%s", path);
        return open_one(path, outer, model, s, f);
    }
    int64_t *steps = NULL;
    int n = px_ckpt_list(path, &steps);
    if (n <= 0) {
        snprintf(f->file, sizeof f->file, "%s", path);
        snprintf(f->fault, sizeof f->fault, "%s", n < 0 ? "cannot read the folder" : "no checkpoint (step_N) in it");
        f->kind = n < 0 ? PX_CKPT_UNAVAILABLE : PX_CKPT_DAMAGED;
        free(steps);
        return -1;
    }
    int rc = -1;
    for (int i = 0; i < n && rc != 0; i++) { /* the newest that verifies */
        char one[4300];
        px_ckpt_path(path, steps[i], one, sizeof one);
        rc = open_one(one, outer, model, s, f);
        if (rc == 0 && used) snprintf(used, usedlen, "%s", one);
    }
    free(steps);
    return rc;
}

int px_ckpt_keep_tokenizer(const char *dir, const char *data_dir, char *err, size_t errlen) {
    char src[4200], dst[4200];
    snprintf(src, sizeof src, "%s/" PX_CKPT_TOKENIZER, data_dir);
    struct stat st;
    if (stat(src, &st) != 0) return 0;
    if (px_mkdirs(dir) != 0)
        return px_err_set(err, errlen, "creating the checkpoint folder %s: %s", dir, strerror(errno));
    snprintf(dst, sizeof dst, "%s/" PX_CKPT_TOKENIZER, dir);
    return px_file_copy_atomic(src, dst, "tokenizer file", err, errlen) == 0 ? 1 : -1;
}

int px_ckpt_find_tokenizer(const char *path, char *out, size_t len) {
    struct stat st;
    snprintf(out, len, "%s/" PX_CKPT_TOKENIZER, path);
    if (stat(out, &st) == 0) return 1;
    snprintf(out, len, "%s/../" PX_CKPT_TOKENIZER, path);
    return stat(out, &st) == 0;
}
