/* `phalanx-worker --standalone`: trains one model in one process, with no
 * coordinator and no communicators. It is the single-rank baseline the
 * distributed trainer must reproduce, and the quickest way to see the model
 * learn: by default on the demo corpus (Debian's fortunes), preparing the
 * shards on first use with the same code as `phalanx-data --demo`.
 *
 * One step: the deterministic sampler picks the batch (seed, step), then
 * forward, backward, gradient clipping, AdamW at the scheduled learning rate.
 * A progress line per step, eval loss on the val shards before the first
 * step, every --eval-every steps and after the last, a summary at the end. SIGINT/SIGTERM finish the current step, then
 * save (with --save) and print the summary. --eval-only trains nothing: it
 * prints the loaded model's val loss, to compare models (an exported one with
 * its source).
 *
 * Its flags are the distributed trainer's (worker_flags.h: one table, one
 * default and range per flag) plus --batch, --eval-only and --quiet, and it
 * computes through px_compute_t as the distributed trainer does: the CPU
 * calls are the model's own, and --device cuda needs no code of its own here. */
#include "standalone.h"

#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "compute.h"
#include "dataprep.h"
#include "dataset.h"
#include "gpt.h"
#include "llmc.h"
#include "model_config.h"
#include "px_err.h"
#include "progress.h"
#include "sample_line.h"
#include "px_flags.h"
#include "px_log.h"
#include "px_time.h"
#include "worker_flags.h"

static const char *PROG = "phalanx-worker --standalone";

/* --standalone's own flags beside the trainer's. */
typedef struct {
    int batch, eval_only, quiet;
} standalone_opts_t;

static const px_flag_t STANDALONE[] = {
    {"--batch", PX_FLAG_INT, "B", .min = 1, .max = 65536, .def = "8", .help = "sequences per step",
     PX_FLAG_AT(standalone_opts_t, batch)},
    {"--eval-only", PX_FLAG_SWITCH,
     .help = "train nothing: print the model's val loss over --eval-batches batches (eval_only ... eval_loss=X) "
             "and exit",
     PX_FLAG_AT(standalone_opts_t, eval_only)},
    {"--quiet", PX_FLAG_SWITCH, .help = "no per-step lines (config, eval and summary remain)",
     PX_FLAG_AT(standalone_opts_t, quiet)},
};
static const px_flag_table_t STANDALONE_FLAGS = PX_FLAG_TABLE("--standalone only:", STANDALONE);

static const char USAGE[] =
    "usage: phalanx-worker --standalone --steps N [flags]\n"
    "Trains a GPT-2 model in this process on token shards (DIR/train_*.bin, val_*.bin).\n";
static const char EPILOGUE[] =
    "Output: key=value lines on stdout; exit 0 when done or stopped by SIGINT/SIGTERM,\n"
    "1 on a runtime error, 2 on a bad flag (a --device cuda without a usable GPU included).\n";

typedef struct {
    px_trainer_config_t tc;
    standalone_opts_t so;
    int data_given;
} opts_t;

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) { g_stop = sig; }

static void parse(int argc, char **argv, opts_t *o) {
    *o = (opts_t){0};
    const px_flag_section_t sections[] = {{&px_train_flags, &o->tc, NULL}, {&STANDALONE_FLAGS, &o->so, NULL}};
    const px_flags_spec_t spec = {.prog = PROG, .usage = USAGE, .epilogue = EPILOGUE, .sections = sections,
                                  .n_sections = 2};
    px_flags_parsed_t given;
    px_flags_parse(&spec, argc, argv, &given);
    o->data_given = px_flags_given(&given, "--data");
    char err[256];
    if (px_train_flags_check(&o->tc, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s (see %s --help)\n", PROG, err, PROG);
        exit(2);
    }
    if (o->so.eval_only && o->tc.eval_batches == 0) {
        fprintf(stderr, "%s: --eval-only needs --eval-batches above 0 (see %s --help)\n", PROG, PROG);
        exit(2);
    }
}

/* A preset or a JSON config drawn from the seed (its vocabulary following
 * the data's tokenizer), else an llm.c model file; exits 2 when it is
 * neither, or when the config and the data disagree. */
static px_gpt_t *load_model(const px_trainer_config_t *o) {
    px_gpt_config_t cfg;
    char err[PX_ERRLEN];
    px_model_source_t src = px_model_resolve(o->model, o->data, &cfg, err, sizeof err);
    if (src == PX_MODEL_BAD) {
        fprintf(stderr, "%s: --model: %s\n", PROG, err);
        exit(2);
    }
    if (src == PX_MODEL_DRAWN) return px_gpt_new(&cfg, o->seed);
    px_gpt_t *m = NULL;
    if (px_gpt_load(o->model, &m, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", PROG, err);
        return NULL;
    }
    return m;
}

static int prepare_demo(const char *dir, int quiet) {
    char **files = NULL;
    int n = 0;
    char err[PX_ERRLEN];
    if (px_dataprep_demo_files(&files, &n, err, sizeof err) != 0) {
        fprintf(stderr, "%s: %s\n", PROG, err);
        return -1;
    }
    printf("prepare_demo out=%s files=%d source=%s\n", dir, n, PX_DEMO_CORPUS_DIR);
    px_dataprep_summary_t sum;
    const px_dataprep_opts_t opts = {.val_fraction = 0.1, .verbose = !quiet};
    int rc = px_dataprep_run(dir, files, n, &opts, &sum, err, sizeof err);
    px_dataprep_free_list(files);
    if (rc != 0) {
        fprintf(stderr, "%s: preparing the demo corpus: %s\n", PROG, err);
        return -1;
    }
    printf("prepare_demo done train_tokens=%zu val_tokens=%zu\n", sum.train_tokens,
           sum.val_tokens);
    return 0;
}

static int has_shards(const char *dir) {
    char p[4200];
    snprintf(p, sizeof p, "%s/train_000000.bin", dir);
    return access(p, R_OK) == 0;
}

/* The per-step line in JSON (--progress-format json). */
static void json_step(int step, int steps, float loss, float lr, float norm, double ms, double tok_s) {
    printf("{\"kind\":\"progress\",\"step\":%d,\"steps\":%d", step, steps);
    px_progress_json_num("loss", loss);
    px_progress_json_num("norm", norm);
    px_progress_json_num("lr", lr);
    px_progress_json_num("ms", ms);
    px_progress_json_num("tok_s", tok_s);
    printf(",\"mode\":\"standalone\"}\n");
}

static void print_eval(const px_trainer_config_t *tc, int step, float val_loss) {
    if (tc->progress_format == PX_PROGRESS_JSON) {
        printf("{\"kind\":\"eval\",\"step\":%d", step);
        px_progress_json_num("eval_loss", val_loss);
        printf(",\"batches\":%d}\n", tc->eval_batches);
    } else {
        printf("eval step=%d val_loss=%.4f batches=%d\n", step, val_loss, tc->eval_batches);
    }
}

static float eval_loss(px_compute_t *c, const px_dataset_t *val, int batches, int B, int T, int *x, int *y) {
    double sum = 0;
    for (int k = 0; k < batches; k++) {
        px_dataset_fill_eval(val, k, B, T, x, y);
        sum += px_compute_forward(c, x, y, B, T);
    }
    return (float)(sum / batches);
}

/* One step's gradients: zero, forward, backward. 0, or -1 when the loss is
 * not finite or the backward failed. */
static int train_grads(px_compute_t *c, const int *x, const int *y, int B, int T, float *loss) {
    px_compute_zero_grad(c);
    *loss = px_compute_forward(c, x, y, B, T);
    return isfinite(*loss) && px_compute_backward(c, 1.0f) == 0 ? 0 : -1;
}

/* Whether the val loss is measured after step `done`: every --eval-every
 * steps and after the last (and, in px_standalone_main, before the first). */
static int eval_due(const px_trainer_config_t *tc, int done) {
    return done == tc->steps || (tc->eval_every > 0 && done % tc->eval_every == 0);
}

int px_standalone_main(int argc, char **argv) {
    opts_t o;
    parse(argc, argv, &o);
    const px_trainer_config_t *tc = &o.tc;
    px_log_set_quiet(o.so.quiet);
    setvbuf(stdout, NULL, _IOLBF, 0);

    if (tc->device == PX_DEVICE_CUDA) {
        char why[256];
        if (!px_cuda_available(why, sizeof why)) { /* fail before any work */
            fprintf(stderr, "%s: --device cuda: %s\n", PROG, why);
            return 2;
        }
    }
    int threads = tc->threads > 0 ? tc->threads : omp_get_num_procs();
    omp_set_num_threads(threads);

    /* The host model always exists: it is initialised or loaded here, and
     * it is what --save writes (after px_compute_host_state on a GPU). */
    px_gpt_t *model = load_model(tc);
    if (!model) return 2; /* a model file that does not load: bad input */
    if (tc->steps == 0 && !o.so.eval_only) {
        fprintf(stderr, "%s: --steps N is required (see %s --help)\n", PROG, PROG);
        px_gpt_destroy(&model);
        return 2;
    }
    char err[PX_ERRLEN];
    px_compute_set_math(tc->precision, tc->tf32, tc->unfused_attention);
    px_compute_t *dev = px_compute_new(tc->device, model, NULL, 0, err, sizeof err);
    if (!dev) {
        fprintf(stderr, "%s: --device %s: %s\n", PROG, tc->device == PX_DEVICE_CUDA ? "cuda" : "cpu", err);
        px_gpt_destroy(&model);
        return 1;
    }
    const px_gpt_config_t *cfg = &model->config;
    int steps = (int)tc->steps;
    int B = o.so.batch, T = tc->seq_len ? tc->seq_len : cfg->max_seq_len;
    px_dataset_t *train = NULL, *val = NULL;
    int *x = NULL, *y = NULL;
    int rc = 0;
    if (T > cfg->max_seq_len) {
        fprintf(stderr, "%s: --seq: bad value %d: expected at most the model context %d\n", PROG,
                T, cfg->max_seq_len);
        rc = 2;
        goto out;
    }
    if (!o.data_given && !has_shards(tc->data) && prepare_demo(tc->data, o.so.quiet) != 0) {
        rc = 1;
        goto out;
    }
    train = px_dataset_open(tc->data, "train", cfg->vocab_size, (size_t)T + 1, err, sizeof err);
    if (!train) { /* no shards, or shards that are not this model's: bad input */
        fprintf(stderr, "%s: --data: %s\n", PROG, err);
        rc = 2;
        goto out;
    }
    if (tc->eval_batches > 0) {
        val = px_dataset_open(tc->data, "val", cfg->vocab_size, (size_t)T + 1, err, sizeof err);
        if (!val) px_log_warn("eval_disabled reason=\"%s\"", err);
    }

    printf("config model=%s params=%zu L=%d C=%d NH=%d V=%d B=%d T=%d steps=%d lr=%g "
           "min_lr=%g warmup=%d weight_decay=%g grad_clip=%g seed=%llu threads=%d device=%s precision=%s "
           "data=%s train_tokens=%zu val_tokens=%zu\n",
           tc->model, model->num_params, cfg->num_layers, cfg->channels, cfg->num_heads,
           cfg->vocab_size, B, T, steps, tc->lr, tc->min_lr, tc->warmup, tc->weight_decay, tc->grad_clip,
           (unsigned long long)tc->seed, threads, tc->device == PX_DEVICE_CUDA ? "cuda" : "cpu",
           tc->precision == PX_PRECISION_BF16 ? "bf16" : tc->tf32 ? "tf32" : "fp32", tc->data,
           px_dataset_num_tokens(train),
           val ? px_dataset_num_tokens(val) : (size_t)0);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    size_t bt = (size_t)B * (size_t)T;
    x = malloc(bt * sizeof(int));
    y = malloc(bt * sizeof(int));
    int done = 0;
    float loss = NAN, val_loss = NAN, first_val = NAN;
    double loss_sum = 0, train_ms = 0;
    int loss_n = 0;
    if (val) {
        first_val = val_loss = eval_loss(dev, val, tc->eval_batches, B, T, x, y);
        print_eval(tc, 0, val_loss);
    }
    if (o.so.eval_only) {
        if (val) printf("eval_only model=%s eval_loss=%.6f batches=%d B=%d T=%d\n", tc->model, val_loss,
                        tc->eval_batches, B, T);
        else fprintf(stderr, "%s: --eval-only: no validation shards (val_*.bin) in %s\n", PROG, tc->data);
        rc = val && isfinite(val_loss) ? 0 : 1;
        goto out;
    }
    px_tok_t *sample_tok = tc->sample_every > 0 ? px_sample_line_tokenizer(tc->data) : NULL;
    int64_t t_start = px_now_us();
    for (int step = 0; step < steps && !g_stop; step++) {
        int64_t t0 = px_now_us();
        px_dataset_fill(train, tc->seed, step, 0, B, B, T, x, y);
        if (train_grads(dev, x, y, B, T, &loss) != 0) {
            fprintf(stderr, "%s: step %d: loss is %g; stopping (lower --lr?)\n", PROG, step + 1,
                    loss);
            rc = 1;
            break;
        }
        float lr = px_lr_at(step, tc->warmup, steps, tc->lr, tc->min_lr);
        float norm = px_compute_clip_adamw(dev, tc->grad_clip, lr, tc->beta1, tc->beta2, tc->eps, tc->weight_decay,
                                           step + 1);
        double ms = (double)(px_now_us() - t0) / 1000.0;
        train_ms += ms;
        done = step + 1;
        /* train_loss in the summary: mean over the last 10% of steps (at least one) */
        if (step >= steps - (steps + 9) / 10) {
            loss_sum += loss;
            loss_n++;
        }
        if (!o.so.quiet && tc->progress_format == PX_PROGRESS_JSON)
            json_step(done, steps, loss, lr, norm, ms, (double)bt / (ms / 1000.0));
        else if (!o.so.quiet)
            printf("step=%d/%d loss=%.4f lr=%.3e grad_norm=%.4f ms=%.1f tok_s=%.0f\n", done,
                   steps, loss, lr, norm, ms, (double)bt / (ms / 1000.0));
        if (val && eval_due(tc, done)) {
            val_loss = eval_loss(dev, val, tc->eval_batches, B, T, x, y);
            print_eval(tc, done, val_loss);
        }
        if (tc->sample_every > 0 && done % tc->sample_every == 0) {
            px_compute_host_state_begin(dev); /* a GPU's state into the host model; nothing on the CPU */
            px_compute_host_wait(dev);
            px_sample_line(model, sample_tok, tc->sample_tokens, tc->seed, done);
        }
    }
    double wall_s = (double)(px_now_us() - t_start) / 1e6;
    if (g_stop) printf("stopping signal=%d after_step=%d\n", (int)g_stop, done);
    if (rc == 0 && tc->save) {
        px_compute_host_state_begin(dev); /* the GPU's state into the host model; nothing on the CPU */
        px_compute_host_wait(dev);
        if (px_gpt_save(model, tc->save, err, sizeof err) != 0) {
            fprintf(stderr, "%s: %s\n", PROG, err);
            rc = 1;
        } else {
            printf("saved path=%s params=%zu\n", tc->save, model->num_params);
        }
    }
    printf("summary steps=%d/%d train_loss=%.4f first_val_loss=%.4f val_loss=%.4f time_s=%.1f "
           "ms_per_step=%.1f tok_s=%.0f stopped=%s\n",
           done, steps, loss_n ? loss_sum / loss_n : (double)loss, first_val, val_loss, wall_s,
           done ? train_ms / done : 0.0, done ? (double)bt * done / (train_ms / 1000.0) : 0.0,
           rc ? "error" : g_stop ? "signal" : "completed");
    px_tok_free(&sample_tok);
out:
    free(x);
    free(y);
    px_dataset_destroy(&train);
    px_dataset_destroy(&val);
    px_compute_destroy(&dev);
    px_gpt_destroy(&model);
    return rc;
}
