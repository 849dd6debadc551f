/* bench/checkpoint's driver: times a save of a model-sized state into a
 * folder as the saver makes it (the snapshot copied and its data files
 * hashed in one pass on 2 threads, px_ckpt_snapshot, then written with
 * those checksums, px_ckpt_write_files), and px_ckpt_load (verify and
 * assemble) of what it wrote, so that bench/checkpoint.py can set them
 * against dd and cat of the same bytes. Prints key=value lines: bytes,
 * files, held_s (the snapshot pass: what a save holds training for),
 * save_s and save_cpu_s (the write: wall, and this process's CPU time,
 * user and system: what a saver thread takes from training on cores it
 * fills), load_s. `copy` times the snapshot pass three ways on 1 and 2
 * threads, alternated, best of 7 each: memcpy, copy_streaming (ops.h), and
 * copy_streaming with the hashing (px_ckpt_snapshot), and prints the
 * ratios to memcpy. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "ckpt.h"
#include "px_time.h"

/* dst = src on `threads` threads as the saver's held copy does, by way
 * `how` (0 memcpy, 1 streaming stores, 2 streaming stores and the data
 * files' checksums); seconds. */
static double copy_once(px_train_state_t *dst, const px_train_state_t *src, int threads, int how) {
    uint64_t hashes[PX_CKPT_MAX_FILES];
    int64_t t0 = px_now_us();
    if (how == 2)
        px_ckpt_snapshot(dst, src, px_ckpt_part_floats(src->n), hashes, threads);
    else
        px_state_copy_chunks(dst, src, threads, how);
    return (double)(px_now_us() - t0) / 1e6;
}

static int copy_bench(const px_train_state_t *s) {
    px_train_state_t d;
    if (px_state_alloc_like(&d, s) != 0) return 1;
    copy_once(&d, s, 2, 0); /* faults the snapshot in, as a worker's first save does */
    for (int threads = 1; threads <= 2; threads++) {
        double best[3] = {1e30, 1e30, 1e30};
        for (int r = 0; r < 7; r++)
            for (int how = 0; how < 3; how++) {
                double t = copy_once(&d, s, threads, how);
                best[how] = t < best[how] ? t : best[how];
            }
        if (memcmp(d.buf[0], s->buf[0], s->n * sizeof(float))) return fprintf(stderr, "copy differs\n"), 1;
        printf("copy threads=%d memcpy_s=%.4f streaming_s=%.4f streaming_hash_s=%.4f streaming/memcpy=%.2f "
               "streaming_hash/memcpy=%.2f\n", threads, best[0], best[1], best[2], best[1] / best[0], best[2] / best[0]);
    }
    px_state_free(&d);
    return 0;
}

static double cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

int main(int argc, char **argv) {
    if (argc < 3 || !strcmp(argv[1], "--help")) {
        printf("usage: %s MODEL DIR [save|load|both|copy]\n"
               "Writes a state of preset MODEL (tiny, small, gpt2-124m) as DIR/step_00000001 and/or\n"
               "loads it back; prints bytes=, files=, held_s=, save_s=, save_cpu_s=, load_s=. copy: times\n"
               "the held snapshot pass (memcpy, streaming stores, streaming stores and hashing) on 1 and\n"
               "2 threads.\n", argv[0]);
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
    if (!strcmp(what, "copy")) {
        int rc = copy_bench(&s);
        px_state_free(&s);
        return rc;
    }
    if (strcmp(what, "load")) {
        px_ckpt_meta_t meta = {"bench", 1, 1, 1, "g0", 1, 1, 1, 0, {0}, 0};
        px_ckpt_result_t res;
        px_train_state_t snap;
        char err[600];
        size_t part_floats = px_ckpt_part_floats(s.n);
        uint64_t hashes[PX_CKPT_MAX_FILES];
        if (px_state_alloc_like(&snap, &s) != 0) {
            fprintf(stderr, "%s: out of memory\n", argv[0]);
            return 1;
        }
        px_state_copy_chunks(&snap, &s, 2, 0); /* faulted in, as after a worker's first save */
        int64_t t0 = px_now_us();
        int hashed = px_ckpt_snapshot(&snap, &s, part_floats, hashes, 2) == 0;
        snap.step = s.step, snap.seed = s.seed;
        int64_t t1 = px_now_us();
        double c0 = cpu_s();
        if (px_ckpt_write_files(argv[2], &snap, &cfg, &meta, part_floats, hashed ? hashes : NULL, &res, err,
                                sizeof err) != 0) {
            fprintf(stderr, "%s: %s\n", argv[0], err);
            return 1;
        }
        printf("files=%d\nheld_s=%.3f\nsave_s=%.3f\nsave_cpu_s=%.3f\n", s.nbuf * px_ckpt_nparts(s.n, part_floats),
               (double)(t1 - t0) / 1e6, (double)(px_now_us() - t1) / 1e6, cpu_s() - c0);
        px_state_free(&snap);
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
