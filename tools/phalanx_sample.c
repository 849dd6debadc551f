/* phalanx-sample: prints text a trained model writes (model/sample.h).
 *   phalanx-sample --checkpoint ckpt --prompt "The " --tokens 200 --top-k 40
 * The model comes from a checkpoint (a step_N folder, or a checkpoint folder
 * whose newest good checkpoint is taken) or an llm.c model file. Tokens are
 * bytes unless there is a tokenizer: --tokenizer FILE, or the run's, which a
 * job keeps beside its checkpoints (checkpoint/ckpt.h). */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt.h"
#include "device.h"
#include "gpt.h"
#include "llmc.h"
#include "px_err.h"
#include "px_flags.h"
#include "px_log.h"
#include "px_tok.h"
#include "sample.h"

static const char *PROG = "phalanx-sample";

typedef struct {
    const char *checkpoint, *model, *prompt, *tokenizer;
    int tokens, top_k, threads, device;
    double temperature;
    uint64_t seed;
} opts_t;

#define O(member) PX_FLAG_AT(opts_t, member)
static const char *const DEVICES[] = {[PX_DEVICE_CPU] = "cpu", [PX_DEVICE_CUDA] = "cuda", NULL};
static const px_flag_t FLAGS[] = {
    {"--checkpoint", PX_FLAG_STR, "PATH", .max = 4096, .note = "none",
     .help = "a checkpoint (step_N), or a folder of them: its newest one that verifies", O(checkpoint)},
    {"--model", PX_FLAG_STR, "FILE", .max = 4096, .note = "none", .help = "an llm.c model file instead",
     O(model)},
    {"--tokenizer", PX_FLAG_STR, "FILE", .max = 4096, .note = "the checkpoint's, else bytes",
     .help = "a Hugging Face tokenizer.json for the model's ids", O(tokenizer)},
    {"--prompt", PX_FLAG_STR, "TEXT", .max = 1 << 16, .note = "end-of-text, or a newline for bytes",
     .help = "the text to continue", O(prompt)},
    {"--tokens", PX_FLAG_INT, "N", .min = 1, .max = 1000000, .def = "64", .help = "tokens to generate", O(tokens)},
    {"--temperature", PX_FLAG_REAL, "T", .lo = 0, .hi = 100, .def = "1.0",
     .help = "softmax temperature; 0 = always the most likely token", O(temperature)},
    {"--top-k", PX_FLAG_INT, "K", .min = 0, .max = 1 << 20, .def = "0",
     .help = "draw among the K most likely tokens, 0 = all", O(top_k)},
    {"--seed", PX_FLAG_INT, "S", .min = 0, .max = INT64_MAX, .def = "1337", .help = "the same seed, the same text",
     O(seed)},
    {"--threads", PX_FLAG_INT, "N", .min = 0, .max = 1024, .def = "1",
     .help = "OpenMP threads for the forward passes on the CPU, 0 = all cores", O(threads)},
    {"--device", PX_FLAG_CHOICE, .words = DEVICES, .def = "cpu",
     .help = "where the forward passes run (cuda: the first GPU)", O(device)},
};
static const px_flag_table_t SAMPLE_FLAGS = PX_FLAG_TABLE(NULL, FLAGS);

static const char USAGE[] =
    "usage: phalanx-sample (--checkpoint PATH | --model FILE) [--prompt TEXT] [--tokens N]\n"
    "                      [--temperature T] [--top-k K] [--seed S] [--threads N] [--device cpu|cuda]\n"
    "Prints the prompt and the model's continuation of it, token by token.\n"
    "Ids become text with the tokenizer a job keeps beside its checkpoints (or\n"
    "--tokenizer), else as bytes. The same model, flags and seed give the same text.\n";

static const char EPILOGUE[] =
    "Exit status: 0; 1 when the model cannot be run (out of memory); 2 for bad flags, a\n"
    "checkpoint or model file that cannot be read, a prompt outside the vocabulary, or\n"
    "--device cuda without a usable GPU.\n";

typedef struct {
    const px_tok_t *tok; /* NULL: bytes */
    char *buf;
    size_t len, cap;
} printer_t;

static int print_token(void *arg, int token) {
    printer_t *p = arg;
    if (!p->tok) {
        putchar(token); /* byte-level: the token is the byte */
    } else {
        int32_t id = token;
        char err[PX_ERRLEN];
        p->len = 0;
        if (px_tok_decode(p->tok, &id, 1, &p->buf, &p->len, &p->cap, err, sizeof err) != 0) {
            fprintf(stderr, "%s: %s\n", PROG, err);
            return -1;
        }
        fwrite(p->buf, 1, p->len, stdout);
    }
    fflush(stdout);
    return 0;
}

/* --tokenizer, or the checkpoint's; NULL for bytes. Exits 2 when it cannot
 * be read or does not fit the model. */
static px_tok_t *open_tokenizer(const opts_t *o, const px_gpt_t *m) {
    char found[4300];
    const char *path = o->tokenizer;
    if (!path && o->checkpoint && px_ckpt_find_tokenizer(o->checkpoint, found, sizeof found)) path = found;
    if (!path) return NULL;
    char err[PX_ERRLEN];
    px_tok_t *t = px_tok_load(path, err, sizeof err);
    if (!t) {
        fprintf(stderr, "%s: tokenizer: %s\n", PROG, err);
        exit(2);
    }
    if (px_tok_vocab_size(t) > m->config.vocab_size) {
        fprintf(stderr, "%s: tokenizer %s has %d tokens, the model's vocabulary %d\n", PROG, path,
                px_tok_vocab_size(t), m->config.vocab_size);
        exit(2);
    }
    fprintf(stderr, "%s: tokenizer %s (%d tokens)\n", PROG, path, px_tok_vocab_size(t));
    return t;
}

/* The prompt's ids: the tokenizer's (its end-of-text id when no prompt is
 * given), or bytes (a newline when none is given). Exits 2 when an id is
 * outside the model's vocabulary. */
static int *prompt_ids(const opts_t *o, const px_tok_t *tok, const px_gpt_t *m, int *np) {
    int32_t *ids = NULL;
    size_t n = 0, cap = 0;
    char err[PX_ERRLEN];
    const char *text = o->prompt ? o->prompt : tok ? "" : "\n";
    if (tok && !o->prompt) {
        if (px_tok_eot_id(tok) < 0) {
            fprintf(stderr, "%s: the tokenizer has no end-of-text token to start from: give --prompt\n", PROG);
            exit(2);
        }
        ids = malloc(sizeof *ids);
        if (ids) ids[n++] = px_tok_eot_id(tok);
    } else if (tok) {
        if (px_tok_encode(tok, text, strlen(text), &ids, &n, &cap, err, sizeof err) != 0) {
            fprintf(stderr, "%s: --prompt: %s\n", PROG, err);
            exit(1);
        }
    } else if ((ids = malloc((strlen(text) + 1) * sizeof *ids))) {
        for (; text[n]; n++) ids[n] = (unsigned char)text[n];
    }
    if (!ids || n == 0) {
        fprintf(stderr, "%s: --prompt: %s\n", PROG, ids ? "empty; give at least one character" : "out of memory");
        exit(2);
    }
    int *out = malloc(n * sizeof *out);
    if (!out) exit(1);
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= m->config.vocab_size) {
            fprintf(stderr, "%s: --prompt: token %d is outside the model's vocabulary of %d\n", PROG, (int)ids[i],
                    m->config.vocab_size);
            exit(2);
        }
        out[i] = ids[i];
    }
    free(ids);
    *np = (int)n;
    return out;
}

#ifdef PX_SAMPLE_CUDA
#include "gpt_cuda.h"

/* --device cuda: the model on the GPU, its logits copied back each token. */
typedef struct {
    px_gpt_cuda_t *m;
    float *logits;
    size_t n;
} gpu_t;

static int gpu_forward(void *ctx, const int *window, int T, const float **logits) {
    gpu_t *g = ctx;
    if (isnan(px_gpt_cuda_forward(g->m, window, NULL, 1, T)) ||
        px_gpt_cuda_download_logits(g->m, g->logits, g->n) != 0)
        return -1;
    *logits = g->logits;
    return 0;
}

static int generate_on_gpu(px_gpt_t *host, const int *prompt, int np, int n, const px_sample_opts_t *so,
                           int (*on_token)(void *, int), void *arg) {
    const px_gpt_config_t *c = &host->config;
    gpu_t g = {px_gpt_cuda_new(c), NULL, (size_t)c->max_seq_len * (size_t)c->padded_vocab_size};
    int rc = -1;
    if (g.m && (g.logits = malloc(g.n * sizeof *g.logits)) &&
        px_gpt_cuda_upload(g.m, PX_GPT_CUDA_PARAMS, host->params, host->num_params) == 0)
        rc = px_sample_generate_with(c, gpu_forward, &g, prompt, np, n, so, on_token, arg);
    free(g.logits);
    px_gpt_cuda_destroy(&g.m);
    return rc;
}
#else
static int generate_on_gpu(px_gpt_t *host, const int *prompt, int np, int n, const px_sample_opts_t *so,
                           int (*on_token)(void *, int), void *arg) {
    (void)host, (void)prompt, (void)np, (void)n, (void)so, (void)on_token, (void)arg;
    return -1; /* unreachable: px_cuda_available says no in a build without CUDA */
}
#endif

static px_gpt_t *open_model(const opts_t *o) {
    px_gpt_t *m = NULL;
    if (o->model) {
        char err[PX_ERRLEN];
        if (px_gpt_load(o->model, &m, err, sizeof err) != 0) {
            fprintf(stderr, "%s: --model: %s\n", PROG, err);
            exit(2);
        }
        return m;
    }
    px_train_state_t s;
    px_ckpt_fault_t f;
    char used[4300];
    if (px_ckpt_open_model(o->checkpoint, 0, &m, &s, used, sizeof used, &f) != 0) {
        fprintf(stderr, "%s: --checkpoint %s: %s: %s\n", PROG, o->checkpoint, f.file, f.fault);
        exit(f.kind == PX_CKPT_UNAVAILABLE && strstr(f.fault, "out of memory") ? 1 : 2);
    }
    fprintf(stderr, "%s: %s, step %" PRId64 "\n", PROG, used, s.step);
    return m;
}

int main(int argc, char **argv) {
    px_log_set_prog(PROG);
    opts_t o = {0};
    const px_flag_section_t sections[] = {{&SAMPLE_FLAGS, &o, NULL}};
    const px_flags_spec_t spec = {.prog = PROG, .usage = USAGE, .epilogue = EPILOGUE, .sections = sections,
                                  .n_sections = 1};
    px_flags_parsed_t given;
    px_flags_parse(&spec, argc, argv, &given);
    if (!o.checkpoint == !o.model) {
        fprintf(stderr, "%s: give one of --checkpoint PATH and --model FILE (see %s --help)\n", PROG, PROG);
        return 2;
    }
    if (o.threads > 0) omp_set_num_threads(o.threads);
    char why[256];
    if (o.device == PX_DEVICE_CUDA && !px_cuda_available(why, sizeof why)) { /* before any work */
        fprintf(stderr, "%s: --device cuda: %s\n", PROG, why);
        return 2;
    }
    px_gpt_t *m = open_model(&o);
    px_tok_t *tok = open_tokenizer(&o, m);
    int np = 0;
    int *prompt = prompt_ids(&o, tok, m, &np);
    if (o.prompt) fputs(o.prompt, stdout);
    else if (!tok) putchar('\n');
    printer_t pr = {.tok = tok};
    const px_sample_opts_t so = {.temperature = (float)o.temperature, .top_k = o.top_k, .seed = (uint64_t)o.seed};
    int rc = o.device == PX_DEVICE_CUDA ? generate_on_gpu(m, prompt, np, o.tokens, &so, print_token, &pr)
                                        : px_sample_generate(m, prompt, np, o.tokens, &so, print_token, &pr);
    putchar('\n');
    free(pr.buf);
    free(prompt);
    px_tok_free(&tok);
    px_gpt_destroy(&m);
    if (rc != 0) fprintf(stderr, "%s: the model could not be run (out of memory?)\n", PROG);
    return rc == 0 ? 0 : 1;
}
