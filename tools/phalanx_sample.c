/* phalanx-sample: prints text a trained model writes (model/sample.h).
 *   phalanx-sample --checkpoint ckpt --prompt "The " --tokens 200 --top-k 40
 * The model comes from a checkpoint (a step_N folder, or a checkpoint folder
 * whose newest good checkpoint is taken) or an llm.c model file. Tokens are
 * bytes unless a tokenizer.json is given (or lies beside the data the
 * checkpoint was trained on, see --tokenizer). */
#include <errno.h>
#include <inttypes.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ckpt.h"
#include "gpt.h"
#include "llmc.h"
#include "px_err.h"
#include "px_flags.h"
#include "px_log.h"
#include "sample.h"

static const char *PROG = "phalanx-sample";

typedef struct {
    const char *checkpoint, *model, *prompt;
    int tokens, top_k, threads;
    double temperature;
    uint64_t seed;
} opts_t;

#define O(member) PX_FLAG_AT(opts_t, member)
static const px_flag_t FLAGS[] = {
    {"--checkpoint", PX_FLAG_STR, "PATH", .max = 4096, .note = "none",
     .help = "a checkpoint (step_N), or a folder of them: its newest one that verifies", O(checkpoint)},
    {"--model", PX_FLAG_STR, "FILE", .max = 4096, .note = "none", .help = "an llm.c model file instead",
     O(model)},
    {"--prompt", PX_FLAG_STR, "TEXT", .max = 1 << 16, .note = "a newline", .help = "the text to continue",
     O(prompt)},
    {"--tokens", PX_FLAG_INT, "N", .min = 1, .max = 1000000, .def = "64", .help = "tokens to generate", O(tokens)},
    {"--temperature", PX_FLAG_REAL, "T", .lo = 0, .hi = 100, .def = "1.0",
     .help = "softmax temperature; 0 = always the most likely token", O(temperature)},
    {"--top-k", PX_FLAG_INT, "K", .min = 0, .max = 1 << 20, .def = "0",
     .help = "draw among the K most likely tokens, 0 = all", O(top_k)},
    {"--seed", PX_FLAG_INT, "S", .min = 0, .max = INT64_MAX, .def = "1337", .help = "the same seed, the same text",
     O(seed)},
    {"--threads", PX_FLAG_INT, "N", .min = 0, .max = 1024, .def = "1",
     .help = "OpenMP threads for the forward passes, 0 = all cores", O(threads)},
};
static const px_flag_table_t SAMPLE_FLAGS = PX_FLAG_TABLE(NULL, FLAGS);

static const char USAGE[] =
    "usage: phalanx-sample (--checkpoint PATH | --model FILE) [--prompt TEXT] [--tokens N]\n"
    "                      [--temperature T] [--top-k K] [--seed S] [--threads N]\n"
    "Prints the prompt and the model's continuation of it, token by token, on the CPU.\n"
    "Tokens are bytes (vocabulary 256). The same model, flags and seed give the same\n"
    "text.\n";

static const char EPILOGUE[] =
    "Exit status: 0; 1 when the model cannot be run (out of memory); 2 for bad flags, a\n"
    "checkpoint or model file that cannot be read, or a prompt outside the vocabulary.\n";

static int print_token(void *arg, int token) {
    (void)arg;
    putchar(token); /* byte-level: the token is the byte */
    fflush(stdout);
    return 0;
}

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
    if (!o.prompt) o.prompt = "\n";
    px_gpt_t *m = open_model(&o);
    size_t np = strlen(o.prompt);
    if (np == 0) {
        fprintf(stderr, "%s: --prompt: empty; give at least one character\n", PROG);
        px_gpt_destroy(&m);
        return 2;
    }
    int *prompt = malloc(np * sizeof *prompt);
    if (!prompt) return 1;
    for (size_t i = 0; i < np; i++) prompt[i] = (unsigned char)o.prompt[i];
    for (size_t i = 0; i < np; i++)
        if (prompt[i] >= m->config.vocab_size) {
            fprintf(stderr, "%s: --prompt: byte %d is outside the model's vocabulary of %d\n", PROG, prompt[i],
                    m->config.vocab_size);
            free(prompt);
            px_gpt_destroy(&m);
            return 2;
        }
    fwrite(o.prompt, 1, np, stdout);
    const px_sample_opts_t so = {.temperature = (float)o.temperature, .top_k = o.top_k, .seed = (uint64_t)o.seed};
    int rc = px_sample_generate(m, prompt, (int)np, o.tokens, &so, print_token, NULL);
    putchar('\n');
    free(prompt);
    px_gpt_destroy(&m);
    if (rc != 0) fprintf(stderr, "%s: the model could not be run (out of memory?)\n", PROG);
    return rc == 0 ? 0 : 1;
}
