/* bench/checkpoint's driver: times px_ckpt_write of a model-sized state into
 * a folder, and px_ckpt_load (verify and assemble) of what it wrote, so that
 * bench/checkpoint.py can set them against dd and cat of the same bytes.
 * Prints key=value lines: bytes, save_s, save_cpu_s (this process's CPU time
 * for the save, user and system: what a saver thread takes from training on
 * cores it fills), load_s. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "ckpt.h"
#include "px_time.h"

static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

int main(int argc, char **argv) {
    if (argc < 3 || !strcmp(argv[1], "--help")) {
        printf("usage: %s MODEL DIR [save|load|both]\n"
               "Writes a state of preset MODEL (tiny, small, gpt2-124m) as DIR/step_00000001 and/or\n"
               "loads it back; prints bytes=, save_s=, save_cpu_s=, load_s=.\n", argv[0]);
        return argc < 3 ? 2 : 0;
    }
    const char *what = argc > 3 ? argv[3] : "both";
    px_gpt_config_t cfg;
    if (px_gpt_config_preset(argv[1], &cfg) != 0) {
        fprintf(stderr, "%s: unknown model '%s' (%s)\n", argv[0], argv[1], px_gpt_preset_names());
        return 2;
    }
    size_t sizes[PX_GPT_NUM_TENSORS];
    px_train_state_t like = {{0}, px_gpt_tensor_sizes(&cfg, sizes), 1, 1337, 0, PX_STATE_NBUF, 0}, s;
    if (px_state_alloc_like(&s, &like) != 0) {
        fprintf(stderr, "%s: out of memory\n", argv[0]);
        return 1;
    }
    /* Also faults the buffers in before a load, as a worker's are before it restores. */
    for (int b = 0; b < PX_STATE_NBUF; b++)
        for (size_t i = 0; i < s.n; i++) s.buf[b][i] = (float)((i * 2654435761u + (size_t)b) % 1000) * 1e-3f;
    s.step = 1;
    printf("bytes=%zu\n", PX_STATE_NBUF * s.n * sizeof(float));
    if (strcmp(what, "load")) {
        px_ckpt_meta_t meta = {"bench", 1, 1, 1, "g0", 1, 1, 1};
        px_ckpt_result_t res;
        char err[600];
        int64_t t0 = px_now_us();
        double c0 = cpu_s();
        if (px_ckpt_write(argv[2], &s, &cfg, &meta, &res, err, sizeof err) != 0) {
            fprintf(stderr, "%s: %s\n", argv[0], err);
            return 1;
        }
        printf("save_s=%.3f\nsave_cpu_s=%.3f\n", (double)(px_now_us() - t0) / 1e6, cpu_s() - c0);
    }
    if (strcmp(what, "save")) {
        char path[4200];
        px_ckpt_fault_t f;
        px_ckpt_path(argv[2], 1, path, sizeof path);
        int64_t t0 = px_now_us();
        if (px_ckpt_load(path, &cfg, &s, NULL, &f) != 0) {
            fprintf(stderr, "%s: %s: %s\n", argv[0], f.file, f.fault);
            return 1;
        }
        printf("load_s=%.3f\n", (double)(px_now_us() - t0) / 1e6);
    }
    px_state_free(&s);
    return 0;
}
