/* ft_plain: one rank of plain data-parallel training, the baseline of the
 * fault-tolerance overhead benchmark (bench/ft_overhead.py).
 *
 *   ft_plain --rank R --ranks P --store DIR [training flags as phalanx-worker]
 *
 * It does exactly the per-step work of worker/trainer.c for a quorum of P
 * groups of one rank each, and nothing else: rank R takes samples
 * [R*B/P, (R+1)*B/P) of the step's global batch (px_dataset_fill, the same
 * sampler and seed), accumulates micro-batches scaled by size/B, sums the
 * gradients with one Gloo ring allreduce, clips and applies AdamW with the
 * same schedule. What it leaves out is the fault tolerance: no coordinator
 * (the Gloo rendezvous goes through a directory store, tests/lib/), no agent
 * thread or heartbeats, no commit vote in the reduction, no copy of the
 * gradients into a reduction buffer, no quorum, no healing.
 *
 * It prints the same per-step line as a worker, timed over the same span
 * (from the start of the gradient computation to the end of the optimizer
 * step), so that the benchmark script reads both sides with one parser:
 *   progress step=S local_loss=L ms=X groups=P quorum=0 group=rR
 * and at the end, from every rank:
 *   final group=rR steps=N param_norm=X
 * The parameter norm should match the workers' (same samples, same sums up
 * to the ring's chunk boundaries), which shows both sides trained the same. */
#include <math.h>
#include <omp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dataset.h"
#include "gpt.h"
#include "px_comm.h"
#include "px_dir_store.h"
#include "px_flags.h"
#include "px_time.h"

#define PROG "ft_plain"

typedef struct {
    int rank, ranks;
    const char *store_dir, *model, *data;
    int64_t steps;
    int global_batch, micro_batch, seq_len;
    float lr, min_lr, weight_decay, grad_clip;
    int warmup, threads, comm_timeout_ms;
    uint64_t seed;
} plain_cfg_t;

static void usage(void) {
    printf("usage: " PROG " --rank R --ranks P --store DIR [flags]\n\n"
           "One rank of plain data-parallel training (Gloo allreduce, no coordinator):\n"
           "the baseline of bench/ft_overhead.py. Start P of them with the same flags.\n\n"
           "flags (default in brackets; training flags mean what they mean for phalanx-worker):\n"
           "  --rank R                 this rank, 0..P-1 (required)\n"
           "  --ranks P                ranks (groups of one rank), 1..64 (required)\n"
           "  --store DIR              directory for the Gloo rendezvous, fresh per run (required)\n"
           "  --steps N                optimizer steps, 1..100000000 [50]\n"
           "  --model NAME             tiny, small or gpt2-124m [tiny]\n"
           "  --data DIR               token shards train_*.bin [data/demo]\n"
           "  --global-batch N         samples per step over all ranks, 1..65536 [16]\n"
           "  --micro-batch N          samples per forward/backward, 1..4096 [4]\n"
           "  --seq T                  sequence length, 0 = the model's context [0]\n"
           "  --lr X                   peak learning rate, 0..1 [0.001]\n"
           "  --min-lr X               final learning rate, 0..1 [0.0001]\n"
           "  --warmup N               linear warmup steps, 0..1000000 [10]\n"
           "  --weight-decay X         AdamW weight decay, 0..1 [0.1]\n"
           "  --grad-clip X            global gradient-norm clip, 0 = off, 0..1000 [1.0]\n"
           "  --seed N                 seed of initialisation and data order [1337]\n"
           "  --threads N              OpenMP threads, 1..256 [1]\n"
           "  --comm-timeout-ms N      bound on the rendezvous and every allreduce [30000]\n");
}

static void parse(plain_cfg_t *c, int argc, char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--help") || !strcmp(a, "-h")) {
            usage();
            exit(0);
        }
        if (!strcmp(a, "--rank")) c->rank = (int)px_flag_int(PROG, a, v, 0, 63);
        else if (!strcmp(a, "--ranks")) c->ranks = (int)px_flag_int(PROG, a, v, 1, 64);
        else if (!strcmp(a, "--store")) c->store_dir = px_flag_str(PROG, a, v, 200);
        else if (!strcmp(a, "--steps")) c->steps = px_flag_int(PROG, a, v, 1, 100000000);
        else if (!strcmp(a, "--model")) c->model = px_flag_str(PROG, a, v, 64);
        else if (!strcmp(a, "--data")) c->data = px_flag_str(PROG, a, v, 4096);
        else if (!strcmp(a, "--global-batch")) c->global_batch = (int)px_flag_int(PROG, a, v, 1, 65536);
        else if (!strcmp(a, "--micro-batch")) c->micro_batch = (int)px_flag_int(PROG, a, v, 1, 4096);
        else if (!strcmp(a, "--seq")) c->seq_len = (int)px_flag_int(PROG, a, v, 0, 1 << 20);
        else if (!strcmp(a, "--lr")) c->lr = (float)px_flag_double(PROG, a, v, 0, 1);
        else if (!strcmp(a, "--min-lr")) c->min_lr = (float)px_flag_double(PROG, a, v, 0, 1);
        else if (!strcmp(a, "--warmup")) c->warmup = (int)px_flag_int(PROG, a, v, 0, 1000000);
        else if (!strcmp(a, "--weight-decay")) c->weight_decay = (float)px_flag_double(PROG, a, v, 0, 1);
        else if (!strcmp(a, "--grad-clip")) c->grad_clip = (float)px_flag_double(PROG, a, v, 0, 1000);
        else if (!strcmp(a, "--seed")) c->seed = (uint64_t)px_flag_int(PROG, a, v, 0, INT64_MAX);
        else if (!strcmp(a, "--threads")) c->threads = (int)px_flag_int(PROG, a, v, 1, 256);
        else if (!strcmp(a, "--comm-timeout-ms")) c->comm_timeout_ms = (int)px_flag_int(PROG, a, v, 100, 3600000);
        else px_flag_unknown(PROG, a);
        i++;
    }
    if (c->ranks <= 0 || !c->store_dir) {
        fprintf(stderr, PROG ": --rank, --ranks and --store are required (see --help)\n");
        exit(2);
    }
    if (c->rank >= c->ranks) {
        fprintf(stderr, PROG ": --rank %d must be below --ranks %d\n", c->rank, c->ranks);
        exit(2);
    }
}

/* The trainer's compute_grads for samples [lo, hi): same fill, same scaling. */
static float compute_grads(const plain_cfg_t *c, px_gpt_t *m, const px_dataset_t *train, int64_t step, int T,
                           int lo, int hi, int *inputs, int *targets) {
    px_gpt_zero_grad(m);
    double loss = 0;
    for (int i0 = lo; i0 < hi; i0 += c->micro_batch) {
        int n = hi - i0 < c->micro_batch ? hi - i0 : c->micro_batch;
        px_dataset_fill(train, c->seed, step, i0, n, c->global_batch, T, inputs, targets);
        float l = px_gpt_forward(m, inputs, targets, n, T);
        px_gpt_backward(m, (float)n / (float)c->global_batch);
        loss += (double)l * n / c->global_batch;
    }
    return (float)loss;
}

/* One write per line: several ranks may share the reader's pipe. */
static void emit(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void emit(const char *fmt, ...) {
    char line[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    if (n <= 0) return;
    if ((size_t)n >= sizeof line) n = (int)sizeof line - 1;
    ssize_t w = write(1, line, (size_t)n);
    (void)w;
}

int main(int argc, char **argv) {
    plain_cfg_t c = {.rank = -1, .model = "tiny", .data = "data/demo", .steps = 50, .global_batch = 16,
                     .micro_batch = 4, .lr = 1e-3f, .min_lr = 1e-4f, .weight_decay = 0.1f, .grad_clip = 1.0f,
                     .warmup = 10, .threads = 1, .comm_timeout_ms = 30000, .seed = 1337};
    parse(&c, argc, argv);
    omp_set_num_threads(c.threads);
    char err[512];
    px_gpt_config_t mc;
    if (px_gpt_config_preset(c.model, &mc) != 0) {
        fprintf(stderr, PROG ": --model '%s' is not a preset (%s)\n", c.model, px_gpt_preset_names());
        return 2;
    }
    px_gpt_t *m = px_gpt_new(&mc, c.seed);
    if (!m) return 1;
    int T = c.seq_len > 0 ? c.seq_len : mc.max_seq_len;
    if (T > mc.max_seq_len) {
        fprintf(stderr, PROG ": --seq %d exceeds the model's context %d\n", T, mc.max_seq_len);
        return 2;
    }
    px_dataset_t *train = px_dataset_open(c.data, "train", mc.vocab_size, (size_t)T + 1, err, sizeof err);
    if (!train) {
        fprintf(stderr, PROG ": --data: %s\n", err);
        return 1;
    }
    int *inputs = malloc((size_t)c.micro_batch * T * sizeof(int));
    int *targets = malloc((size_t)c.micro_batch * T * sizeof(int));
    px_dir_store_t ds;
    if (!inputs || !targets || px_dir_store_init(&ds, c.store_dir) != 0) {
        fprintf(stderr, PROG ": out of memory or cannot create --store %s\n", c.store_dir);
        return 1;
    }
    px_store_t store = px_dir_store(&ds);
    px_comm_t *comm = px_comm_new_gloo(&store, "plain", c.rank, c.ranks, c.comm_timeout_ms, err, sizeof err);
    if (!comm) {
        fprintf(stderr, PROG ": rank %d: rendezvous failed: %s\n", c.rank, err);
        return 1;
    }
    int lo = (int)((int64_t)c.rank * c.global_batch / c.ranks);
    int hi = (int)((int64_t)(c.rank + 1) * c.global_batch / c.ranks);
    for (int64_t step = 0; step < c.steps; step++) {
        int64_t t0 = px_now_us();
        float loss = compute_grads(&c, m, train, step, T, lo, hi, inputs, targets);
        int64_t t1 = px_now_us();
        px_comm_status_t st = px_comm_allreduce_sum_f32(comm, m->grads, m->num_params);
        int64_t t2 = px_now_us();
        if (st != PX_COMM_OK) {
            fprintf(stderr, PROG ": rank %d: allreduce failed at step %lld: %s\n", c.rank, (long long)step,
                    px_comm_last_error(comm));
            return 1;
        }
        float norm = px_gpt_clip_grads(m, c.grad_clip);
        float lr = px_lr_at((int)step, c.warmup, (int)c.steps, c.lr, c.min_lr);
        px_gpt_adamw_step(m, lr, 0.9f, 0.95f, 1e-8f, c.weight_decay, (int)step + 1);
        double ms = (double)(px_now_us() - t0) / 1000.0;
        emit("progress step=%lld local_loss=%.4f norm=%.3f ms=%.1f compute_ms=%.1f allreduce_ms=%.1f groups=%d "
             "quorum=0 group=r%d\n",
             (long long)step + 1, loss, norm, ms, (double)(t1 - t0) / 1000.0, (double)(t2 - t1) / 1000.0, c.ranks,
             c.rank);
    }
    double pn = 0;
    for (size_t i = 0; i < m->num_params; i++) pn += (double)m->params[i] * m->params[i];
    emit("final group=r%d steps=%lld param_norm=%.9g\n", c.rank, (long long)c.steps, sqrt(pn));
    px_comm_destroy(&comm);
    if (c.rank == 0) px_dir_store_remove(&ds);
    px_dataset_destroy(&train);
    px_gpt_destroy(&m);
    free(inputs);
    free(targets);
    return 0;
}
