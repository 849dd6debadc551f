/* `phalanx-worker --standalone`: trains one model in one process, with no
 * coordinator and no communicators. It is the single-rank baseline the
 * distributed trainer must reproduce, and the quickest way to see the model
 * learn: by default it trains `small` on the demo corpus (Debian's fortunes),
 * preparing the shards on first use with the same code as `phalanx-data --demo`.
 *
 * One step: the deterministic sampler picks the batch (seed, step), then
 * forward, backward, gradient clipping, AdamW at the scheduled learning rate.
 * A progress line per step, eval loss on the val shards every --eval-every
 * steps, a summary at the end. SIGINT/SIGTERM finish the current step, then
 * save (with --save) and print the summary. --eval-only trains nothing: it
 * prints the loaded model's val loss, to compare models (an exported one with
 * its source). */
#include "standalone.h"
#ifdef PX_HAVE_GPT_CUDA
#include "gpt_cuda.h"
#endif

#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataprep.h"
#include "dataset.h"
#include "device.h"
#include "gpt.h"
#include "llmc.h"
#include "px_err.h"
#include "progress.h"
#include "px_flags.h"
#include "px_log.h"
#include "px_time.h"

static const char *PROG = "phalanx-worker --standalone";
#define DEFAULT_DATA "data/demo"

typedef struct {
    const char *model, *data, *save;
    int data_given;
    int steps, batch, seq, warmup, eval_every, eval_batches, threads, quiet, eval_only;
    double lr, min_lr, weight_decay, grad_clip, beta1, beta2, eps;
    uint64_t seed;
    px_progress_format_t progress_format;
    px_device_t device;
} opts_t;

static volatile sig_atomic_t g_stop;
static void on_signal(int sig) { g_stop = sig; }

static void usage(void) {
    printf("usage: phalanx-worker --standalone [flags]\n"
           "Trains a GPT-2 model in this process on token shards (DIR/train_*.bin, val_*.bin).\n"
           "  --model NAME|PATH   preset (%s) or llm.c model file (default small)\n"
           "  --data DIR          shard directory (default %s, prepared from Debian's\n"
           "                      fortunes on first use, as `phalanx-data --demo`)\n"
           "  --steps N           optimizer steps, >= 1 (default 200)\n"
           "  --batch B           sequences per step, >= 1 (default 8)\n"
           "  --seq T             tokens per sequence, 1..model context (default: the context)\n"
           "  --lr X              peak learning rate (default 1e-3)\n"
           "  --warmup N          linear warmup steps, then cosine decay (default 20)\n"
           "  --min-lr X          learning rate at the last step (default lr/10)\n"
           "  --weight-decay X    AdamW decoupled decay on 2-D weights (default 0.1)\n"
           "  --grad-clip X       clip the global gradient norm to X; 0 disables (default 1.0)\n"
           "  --beta1 X           AdamW's first-moment decay, 0..0.999999 (default 0.9)\n"
           "  --beta2 X           AdamW's second-moment decay, 0..0.999999 (default 0.95)\n"
           "  --eps X             AdamW's denominator epsilon, 1e-30..1 (default 1e-8)\n"
           "  --eval-every N      val loss every N steps; 0 disables (default 50)\n"
           "  --eval-batches N    batches per val loss (default 8)\n"
           "  --eval-only         train nothing: print the model's val loss over --eval-batches\n"
           "                      batches (eval_only ... eval_loss=X) and exit (default off)\n"
           "  --seed N            initialisation and sampling seed (default 1337)\n"
           "  --threads N         OpenMP threads; 0 = all cores (default 0)\n"
           "  --device cpu|cuda   compute device (default cpu)\n"
           "  --save PATH         write the trained model as an llm.c model file at the end\n"
           "  --quiet             no per-step lines (config, eval and summary remain)\n"
           "  --progress-format text|json  per-step and eval lines as key=value text or as JSON\n"
           "                      objects with \"kind\" and full-precision numbers (default text)\n"
           "  --help              this text\n"
           "Output: key=value lines on stdout; exit 0 when done or stopped by SIGINT/SIGTERM,\n"
           "1 on a runtime error, 2 on a bad flag.\n",
           px_gpt_preset_names(), DEFAULT_DATA);
}

static void parse(int argc, char **argv, opts_t *o) {
    *o = (opts_t){.model = "small", .data = DEFAULT_DATA, .steps = 200, .batch = 8, .seq = 0,
                  .warmup = 20, .eval_every = 50, .eval_batches = 8, .lr = 1e-3, .min_lr = -1,
                  .weight_decay = 0.1, .grad_clip = 1.0, .beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8, .seed = 1337,
                  .device = PX_DEVICE_CPU};
    for (int i = 1; i < argc; i++) {
        char flag[64];
        const char *a = argv[i], *val = NULL;
        const char *eq = strchr(a, '=');
        if (eq && (size_t)(eq - a) < sizeof flag) { /* --flag=value */
            memcpy(flag, a, (size_t)(eq - a));
            flag[eq - a] = '\0';
            val = eq + 1;
            a = flag;
        }
#define NEXT() (val ? val : (i + 1 < argc ? argv[++i] : NULL))
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            usage();
            exit(0);
        } else if (strcmp(a, "--model") == 0) {
            o->model = px_flag_str(PROG, a, NEXT(), 4096);
        } else if (strcmp(a, "--data") == 0) {
            o->data = px_flag_str(PROG, a, NEXT(), 4096);
            o->data_given = 1;
        } else if (strcmp(a, "--steps") == 0) {
            o->steps = (int)px_flag_int(PROG, a, NEXT(), 1, 1000000000);
        } else if (strcmp(a, "--batch") == 0) {
            o->batch = (int)px_flag_int(PROG, a, NEXT(), 1, 65536);
        } else if (strcmp(a, "--seq") == 0) {
            o->seq = (int)px_flag_int(PROG, a, NEXT(), 1, 65536);
        } else if (strcmp(a, "--lr") == 0) {
            o->lr = px_flag_double(PROG, a, NEXT(), 0.0, 10.0);
        } else if (strcmp(a, "--warmup") == 0) {
            o->warmup = (int)px_flag_int(PROG, a, NEXT(), 0, 1000000000);
        } else if (strcmp(a, "--min-lr") == 0) {
            o->min_lr = px_flag_double(PROG, a, NEXT(), 0.0, 10.0);
        } else if (strcmp(a, "--weight-decay") == 0) {
            o->weight_decay = px_flag_double(PROG, a, NEXT(), 0.0, 1.0);
        } else if (strcmp(a, "--grad-clip") == 0) {
            o->grad_clip = px_flag_double(PROG, a, NEXT(), 0.0, 1e6);
        } else if (strcmp(a, "--beta1") == 0) {
            o->beta1 = px_flag_double(PROG, a, NEXT(), 0.0, 0.999999);
        } else if (strcmp(a, "--beta2") == 0) {
            o->beta2 = px_flag_double(PROG, a, NEXT(), 0.0, 0.999999);
        } else if (strcmp(a, "--eps") == 0) {
            o->eps = px_flag_double(PROG, a, NEXT(), 1e-30, 1.0);
        } else if (strcmp(a, "--progress-format") == 0) {
            const char *f = NEXT();
            if (px_progress_format_parse(f, &o->progress_format) != 0) {
                fprintf(stderr, "%s: --progress-format: bad value '%s': expected text or json\n", PROG, f ? f : "");
                exit(2);
            }
        } else if (strcmp(a, "--eval-every") == 0) {
            o->eval_every = (int)px_flag_int(PROG, a, NEXT(), 0, 1000000000);
        } else if (strcmp(a, "--eval-batches") == 0) {
            o->eval_batches = (int)px_flag_int(PROG, a, NEXT(), 1, 1000000);
        } else if (strcmp(a, "--seed") == 0) {
            o->seed = (uint64_t)px_flag_int(PROG, a, NEXT(), 0, INT64_MAX);
        } else if (strcmp(a, "--threads") == 0) {
            o->threads = (int)px_flag_int(PROG, a, NEXT(), 0, 1024);
        } else if (strcmp(a, "--device") == 0) {
            const char *d = px_flag_str(PROG, a, NEXT(), 16);
            if (px_device_parse(d, &o->device) != 0) {
                fprintf(stderr, "%s: --device: bad value '%s': expected cpu or cuda\n", PROG, d);
                exit(2);
            }
        } else if (strcmp(a, "--save") == 0) {
            o->save = px_flag_str(PROG, a, NEXT(), 4096);
        } else if (strcmp(a, "--eval-only") == 0) {
            o->eval_only = 1;
        } else if (strcmp(a, "--quiet") == 0) {
            o->quiet = 1;
        } else {
            px_flag_unknown(PROG, argv[i]);
        }
#undef NEXT
    }
    if (o->min_lr < 0) o->min_lr = o->lr / 10.0;
    if (o->min_lr > o->lr) {
        fprintf(stderr, "%s: --min-lr: bad value %g: expected at most --lr (%g)\n", PROG,
                o->min_lr, o->lr);
        exit(2);
    }
}

/* A preset by name, else an llm.c model file; exits 2 when it is neither. */
static px_gpt_t *load_model(const opts_t *o) {
    px_gpt_config_t cfg;
    if (px_gpt_config_preset(o->model, &cfg) == 0) return px_gpt_new(&cfg, o->seed);
    if (access(o->model, F_OK) != 0) {
        fprintf(stderr, "%s: --model: bad value '%s': expected a preset (%s) or an llm.c model "
                        "file\n", PROG, o->model, px_gpt_preset_names());
        exit(2);
    }
    px_gpt_t *m = NULL;
    char err[PX_ERRLEN];
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
    /* data/demo may need its parent */
    char parent[4096];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    if (slash) {
        *slash = '\0';
        mkdir(parent, 0777);
    }
    printf("prepare_demo out=%s files=%d source=%s\n", dir, n, PX_DEMO_CORPUS_DIR);
    px_dataprep_summary_t sum;
    int rc = px_dataprep_run(dir, files, n, 0.1, !quiet, &sum, err, sizeof err);
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

/* The model on its device: the CPU model always exists (it is initialised
 * or loaded on the host and is what --save writes); with --device cuda a GPU
 * copy does the training and the host copy is refreshed before saving. */
typedef struct {
    px_gpt_t *cpu;
#ifdef PX_HAVE_GPT_CUDA
    px_gpt_cuda_t *gpu;
#endif
} dev_model_t;

static float dev_forward(dev_model_t *d, const int *x, const int *y, int B, int T) {
#ifdef PX_HAVE_GPT_CUDA
    if (d->gpu) return px_gpt_cuda_forward(d->gpu, x, y, B, T);
#endif
    return px_gpt_forward(d->cpu, x, y, B, T);
}

static int dev_train_grads(dev_model_t *d, const int *x, const int *y, int B, int T, float *loss) {
#ifdef PX_HAVE_GPT_CUDA
    if (d->gpu) {
        px_gpt_cuda_zero_grad(d->gpu);
        *loss = px_gpt_cuda_forward(d->gpu, x, y, B, T);
        return isfinite(*loss) && px_gpt_cuda_backward(d->gpu, 1.0f) == 0 ? 0 : -1;
    }
#endif
    px_gpt_zero_grad(d->cpu);
    *loss = px_gpt_forward(d->cpu, x, y, B, T);
    return isfinite(*loss) && px_gpt_backward(d->cpu, 1.0f) == 0 ? 0 : -1;
}

static float dev_update(dev_model_t *d, const opts_t *o, float lr, int t) {
    float clip = (float)o->grad_clip, b1 = (float)o->beta1, b2 = (float)o->beta2, eps = (float)o->eps;
    float wd = (float)o->weight_decay;
#ifdef PX_HAVE_GPT_CUDA
    if (d->gpu) {
        float norm = px_gpt_cuda_clip_grads(d->gpu, clip);
        px_gpt_cuda_adamw_step(d->gpu, lr, b1, b2, eps, wd, t);
        return norm;
    }
#endif
    float norm = px_gpt_clip_grads(d->cpu, clip);
    px_gpt_adamw_step(d->cpu, lr, b1, b2, eps, wd, t);
    return norm;
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

static void print_eval(const opts_t *o, int step, float val_loss) {
    if (o->progress_format == PX_PROGRESS_JSON) {
        printf("{\"kind\":\"eval\",\"step\":%d", step);
        px_progress_json_num("eval_loss", val_loss);
        printf(",\"batches\":%d}\n", o->eval_batches);
    } else {
        printf("eval step=%d val_loss=%.4f batches=%d\n", step, val_loss, o->eval_batches);
    }
}

/* Brings the host copy up to date (before --save). 0 on success. */
static int dev_to_host(dev_model_t *d) {
#ifdef PX_HAVE_GPT_CUDA
    if (d->gpu) return px_gpt_cuda_download(d->gpu, PX_GPT_CUDA_PARAMS, d->cpu->params, d->cpu->num_params);
#endif
    (void)d;
    return 0;
}

/* Moves the model to the GPU for --device cuda. 0 on success, else a message in why. */
static int dev_to_gpu(dev_model_t *d, char *why, size_t len) {
#ifdef PX_HAVE_GPT_CUDA
    if (!px_cuda_available(why, len)) return -1;
    d->gpu = px_gpt_cuda_new(&d->cpu->config);
    if (!d->gpu || px_gpt_cuda_upload(d->gpu, PX_GPT_CUDA_PARAMS, d->cpu->params, d->cpu->num_params) != 0) {
        snprintf(why, len, "cannot create the model on the GPU");
        return -1;
    }
    return 0;
#else
    (void)d;
    if (!px_cuda_available(why, len)) return -1;
    snprintf(why, len, "this binary was built without the CUDA model (configure with nvcc present)");
    return -1;
#endif
}

static void dev_free(dev_model_t *d) {
#ifdef PX_HAVE_GPT_CUDA
    px_gpt_cuda_destroy(&d->gpu);
#endif
    px_gpt_destroy(&d->cpu);
}

static float eval_loss(dev_model_t *m, const px_dataset_t *val, int batches, int B, int T, int *x,
                       int *y) {
    double sum = 0;
    for (int k = 0; k < batches; k++) {
        px_dataset_fill_eval(val, k, B, T, x, y);
        sum += dev_forward(m, x, y, B, T);
    }
    return (float)(sum / batches);
}

int px_standalone_main(int argc, char **argv) {
    opts_t o;
    parse(argc, argv, &o);
    px_log_set_quiet(o.quiet);
    setvbuf(stdout, NULL, _IOLBF, 0);

    if (o.device == PX_DEVICE_CUDA) {
        char why[256];
        if (!px_cuda_available(why, sizeof why)) { /* fail before any work */
            fprintf(stderr, "%s: --device cuda: %s\n", PROG, why);
            return 1;
        }
    }
    int threads = o.threads > 0 ? o.threads : omp_get_num_procs();
    omp_set_num_threads(threads);

    px_gpt_t *model = load_model(&o);
    if (!model) return 1;
    dev_model_t dev = {.cpu = model};
    if (o.device == PX_DEVICE_CUDA) {
        char why[256];
        if (dev_to_gpu(&dev, why, sizeof why) != 0) {
            fprintf(stderr, "%s: --device cuda: %s\n", PROG, why);
            dev_free(&dev);
            return 1;
        }
    }
    const px_gpt_config_t *cfg = &model->config;
    int B = o.batch, T = o.seq ? o.seq : cfg->max_seq_len;
    if (T > cfg->max_seq_len) {
        fprintf(stderr, "%s: --seq: bad value %d: expected at most the model context %d\n", PROG,
                T, cfg->max_seq_len);
        dev_free(&dev);
        return 2;
    }

    if (!o.data_given && !has_shards(o.data) && prepare_demo(o.data, o.quiet) != 0) {
        dev_free(&dev);
        return 1;
    }
    char err[PX_ERRLEN];
    px_dataset_t *train = px_dataset_open(o.data, "train", cfg->vocab_size, (size_t)T + 1, err,
                                          sizeof err);
    if (!train) {
        fprintf(stderr, "%s: %s\n", PROG, err);
        dev_free(&dev);
        return 1;
    }
    px_dataset_t *val = NULL;
    if (o.eval_every > 0 || o.eval_only) {
        val = px_dataset_open(o.data, "val", cfg->vocab_size, (size_t)T + 1, err, sizeof err);
        if (!val) px_log_warn("eval_disabled reason=\"%s\"", err);
    }

    printf("config model=%s params=%zu L=%d C=%d NH=%d V=%d B=%d T=%d steps=%d lr=%g "
           "min_lr=%g warmup=%d weight_decay=%g grad_clip=%g seed=%llu threads=%d device=%s "
           "data=%s train_tokens=%zu val_tokens=%zu\n",
           o.model, model->num_params, cfg->num_layers, cfg->channels, cfg->num_heads,
           cfg->vocab_size, B, T, o.steps, o.lr, o.min_lr, o.warmup, o.weight_decay, o.grad_clip,
           (unsigned long long)o.seed, threads, o.device == PX_DEVICE_CUDA ? "cuda" : "cpu", o.data,
           px_dataset_num_tokens(train),
           val ? px_dataset_num_tokens(val) : (size_t)0);

    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);

    size_t bt = (size_t)B * (size_t)T;
    int *x = malloc(bt * sizeof(int)), *y = malloc(bt * sizeof(int));
    int rc = 0, done = 0;
    float loss = NAN, val_loss = NAN, first_val = NAN;
    double loss_sum = 0, train_ms = 0;
    int loss_n = 0;
    if (val) {
        first_val = val_loss = eval_loss(&dev, val, o.eval_batches, B, T, x, y);
        print_eval(&o, 0, val_loss);
    }
    if (o.eval_only) {
        if (val) printf("eval_only model=%s eval_loss=%.6f batches=%d B=%d T=%d\n", o.model, val_loss,
                        o.eval_batches, B, T);
        else fprintf(stderr, "%s: --eval-only: no validation shards (val_*.bin) in %s\n", PROG, o.data);
        rc = val && isfinite(val_loss) ? 0 : 1;
        goto out;
    }
    int64_t t_start = px_now_us();
    for (int step = 0; step < o.steps && !g_stop; step++) {
        int64_t t0 = px_now_us();
        px_dataset_fill(train, o.seed, step, 0, B, B, T, x, y);
        if (dev_train_grads(&dev, x, y, B, T, &loss) != 0) {
            fprintf(stderr, "%s: step %d: loss is %g; stopping (lower --lr?)\n", PROG, step + 1,
                    loss);
            rc = 1;
            break;
        }
        float lr = px_lr_at(step, o.warmup, o.steps, (float)o.lr, (float)o.min_lr);
        float norm = dev_update(&dev, &o, lr, step + 1);
        double ms = (double)(px_now_us() - t0) / 1000.0;
        train_ms += ms;
        done = step + 1;
        /* train_loss in the summary: mean over the last 10% of steps (at least one) */
        if (step >= o.steps - (o.steps + 9) / 10) {
            loss_sum += loss;
            loss_n++;
        }
        if (!o.quiet && o.progress_format == PX_PROGRESS_JSON)
            json_step(done, o.steps, loss, lr, norm, ms, (double)bt / (ms / 1000.0));
        else if (!o.quiet)
            printf("step=%d/%d loss=%.4f lr=%.3e grad_norm=%.4f ms=%.1f tok_s=%.0f\n", done,
                   o.steps, loss, lr, norm, ms, (double)bt / (ms / 1000.0));
        if (val && (done % o.eval_every == 0 || done == o.steps)) {
            val_loss = eval_loss(&dev, val, o.eval_batches, B, T, x, y);
            print_eval(&o, done, val_loss);
        }
    }
    double wall_s = (double)(px_now_us() - t_start) / 1e6;
    if (g_stop) printf("stopping signal=%d after_step=%d\n", (int)g_stop, done);
    if (rc == 0 && o.save) {
        if (dev_to_host(&dev) != 0) {
            fprintf(stderr, "%s: --save: cannot copy the model back from the GPU\n", PROG);
            rc = 1;
        } else if (px_gpt_save(model, o.save, err, sizeof err) != 0) {
            fprintf(stderr, "%s: %s\n", PROG, err);
            rc = 1;
        } else {
            printf("saved path=%s params=%zu\n", o.save, model->num_params);
        }
    }
    printf("summary steps=%d/%d train_loss=%.4f first_val_loss=%.4f val_loss=%.4f time_s=%.1f "
           "ms_per_step=%.1f tok_s=%.0f stopped=%s\n",
           done, o.steps, loss_n ? loss_sum / loss_n : (double)loss, first_val, val_loss, wall_s,
           done ? train_ms / done : 0.0, done ? (double)bt * done / (train_ms / 1000.0) : 0.0,
           rc ? "error" : g_stop ? "signal" : "completed");
out:
    free(x);
    free(y);
    px_dataset_destroy(&train);
    px_dataset_destroy(&val);
    dev_free(&dev);
    return rc;
}
