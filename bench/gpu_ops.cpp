/* bench_gpu_ops: where the time of one GPT-2 training step on the GPU goes,
 * op by op, in each precision the CUDA model (model/gpt_cuda.cu) runs.
 *
 * What it times: every kernels/ops_cuda.h call one training step of the
 * whole model makes (zero_grad, the forward with targets, the backward,
 * the gradient norm and clipping, AdamW), with the model's shapes and
 * argument types, in three configurations (--config):
 *   fp32      `--precision fp32`: FP32 math on FP32 tensors, the unfused
 *             attention (it keeps the (B,NH,T,T) probabilities), separate
 *             GELU and cross-entropy kernels
 *   bf16math  bf16 math on FP32 activations (the FP32 overloads): the fused
 *             attention (--attention), the classifier's loss and gradient in
 *             one pass, GELU in cuBLASLt epilogues. The model stores bf16
 *             whenever its math is bf16; this one shows what that storage adds
 *   bf16      `--precision bf16`: the same on bf16 activations (the bf16
 *             overloads), and each pass's rounding of the weights to bf16
 * Each distinct call (op, shape, buffers) runs --warmup times, then --reps
 * times back to back on one stream with a cudaEvent recorded after each; the
 * median gap is its ms per call, and ms per call times the step's calls
 * (most once per layer: one layer's buffers stand for all L, every layer
 * making the same calls on the same shapes) its ms per step. One table per
 * configuration (op, ms/call, calls/step, ms/step, share of the total),
 * its total and tokens/s (B*T / total), then the totals side by side.
 *
 * The total is a lower bound on a step's wall time: host work between the
 * ops (the token upload, the embedding backward's plan, the loss download)
 * is not in it. bench/gpu_step.py times whole steps. Back-to-back launches
 * hide launch latency where the GPU is the slower side, as in a step; an op
 * shorter than its launch shows the host's launch rate instead.
 *
 * Run: build/bin/bench_gpu_ops [--preset gpt2-124m] [--B 16] [--T 1024]
 *      [--config fp32 --config bf16 ...] [--attention fused] [--reps 20]
 * (tests/gpu/device_check.sh runs it as gpu_ops_bench). Without a usable GPU
 * it exits 77 with the reason. The CPU only launches here (no BLAS), so
 * OPENBLAS_CORETYPE is irrelevant. Under the CPU emulator (tests/emu:
 * bench_emu_gpu_ops, the ctest emu_gpu_ops_bench) the times are the CPU's and
 * say nothing of a GPU; that run checks the calls and the report.
 *
 * Exit status: 0; 1 when a time comes out negative or not finite, or a CUDA
 * call fails; 2 for bad flags; 77 without a usable GPU. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <functional>
#include <type_traits>
#include <vector>

#include "ops_cuda.h"

extern "C" {
#include "gpt.h"
#include "px_flags.h"
}

static const char *PROG = "bench_gpu_ops";

static void check_cuda(cudaError_t e, const char *call, const char *file, int line) {
    if (e == cudaSuccess) return;
    fprintf(stderr, "%s: %s:%d: %s failed: %s\n", PROG, file, line, call, cudaGetErrorString(e));
    exit(1);
}
#define CK(call) check_cuda((call), #call, __FILE__, __LINE__)

/* ------------------------------------------------------------ command line */

struct opts_t {
    const char *preset;
    int B, T, C, NH, L, V, Vp; /* 0: the preset's */
    int reps, warmup;
    px_flag_list_t configs; /* none given: all */
    int unfused_attention;  /* --attention: 0 fused, 1 unfused */
};

static int check_preset(const char *val, char *why, size_t len) {
    px_gpt_config_t cfg;
    if (px_gpt_config_preset(val, &cfg) == 0) return 0;
    snprintf(why, len, "expected one of %s", px_gpt_preset_names());
    return -1;
}

/* A table entry, field by field: C++ has no C99 designated initializers
 * that leave members out quietly. */
static px_flag_t entry(const char *name, px_flag_kind_t kind, const char *arg, int64_t min, int64_t max,
                       const char *def, const char *note, const char *help, size_t offset, size_t size) {
    px_flag_t f;
    memset(&f, 0, sizeof f);
    f.name = name, f.kind = kind, f.arg = arg, f.min = min, f.max = max;
    f.def = def, f.note = note, f.help = help, f.offset = offset, f.size = size;
    return f;
}

static px_flag_t checked(px_flag_t f, int (*check)(const char *, char *, size_t)) {
    f.check = check;
    return f;
}

static px_flag_t with_words(px_flag_t f, const char *const *choices) {
    f.words = choices;
    return f;
}

static const char *const ATTENTION[] = {"fused", "unfused", NULL};

#define AT(member) offsetof(opts_t, member), sizeof(((opts_t *)0)->member)
#define DIM(flag, member, most, what) entry(flag, PX_FLAG_INT, "N", 1, most, NULL, "the preset's", what, AT(member))
static const px_flag_t FLAGS[] = {
    checked(entry("--preset", PX_FLAG_STR, "NAME", 0, 64, "gpt2-124m", NULL,
                  "the model's shape: tiny, small or gpt2-124m; the flags below replace its values", AT(preset)),
            check_preset),
    entry("--B", PX_FLAG_INT, "N", 1, 65536, "16", NULL, "batch size", AT(B)),
    DIM("--T", T, 65536, "sequence length (above the preset's context, wpe grows with it)"),
    DIM("--C", C, 65536, "channels"),
    DIM("--NH", NH, 1024, "attention heads (divide C)"),
    DIM("--L", L, 1024, "layers"),
    DIM("--V", V, 1 << 20, "vocabulary"),
    DIM("--Vp", Vp, 1 << 20, "padded vocabulary, >= V (rows of wte)"),
    entry("--reps", PX_FLAG_INT, "N", 1, 10000, "20", NULL, "timed calls of each op; the median counts", AT(reps)),
    entry("--warmup", PX_FLAG_INT, "N", 0, 10000, "3", NULL, "untimed calls of each op first (plans, scratch, clocks)",
          AT(warmup)),
    entry("--config", PX_FLAG_LIST, "fp32|bf16math|bf16", 0, 16, NULL, "all three",
          "a configuration to time; repeat for several, in the order given", AT(configs)),
    with_words(entry("--attention", PX_FLAG_CHOICE, NULL, 0, 0, "fused", NULL,
                     "attention under bf16 math, as the worker's flag: the fused kernels where they take the head "
                     "size, or the unfused ones always (fp32 always runs the unfused ones)",
                     AT(unfused_attention)),
               ATTENTION),
};
static const px_flag_table_t TABLE = PX_FLAG_TABLE(NULL, FLAGS);

static const char USAGE[] =
    "usage: bench_gpu_ops [--preset gpt2-124m|tiny] [--B N] [--T N] [--C N] [--NH N] [--L N] [--V N] [--Vp N]\n"
    "                     [--reps N] [--warmup N] [--config fp32|bf16math|bf16]... [--attention fused|unfused]\n"
    "Times every CUDA op of one GPT-2 training step (model/gpt_cuda.cu) on the first GPU, in FP32,\n"
    "in bf16 math on FP32 tensors and in bf16 storage: a table per configuration (median ms per\n"
    "call, calls per step, ms per step, share), then the totals and tokens/s side by side.\n";
static const char EPILOGUE[] =
    "The totals leave out the host's work between ops (a lower bound on a step; bench/gpu_step.py\n"
    "times whole steps). Exit status: 0; 1 for a negative or non-finite time or a failed CUDA call;\n"
    "2 for bad flags; 77 without a usable GPU (the reason is printed).\n";

/* ------------------------------------------------------------------ shape */

struct shape_t {
    const char *preset;
    px_gpt_config_t cfg;
    int B, T;
    size_t BT, num_params;
    size_t sizes[PX_GPT_NUM_TENSORS], offsets[PX_GPT_NUM_TENSORS];
};

/* The preset with each dimension given in its place; exits 2 when that is no GPT-2. */
static shape_t make_shape(const opts_t *o) {
    shape_t s;
    memset(&s, 0, sizeof s);
    s.preset = o->preset;
    px_gpt_config_preset(o->preset, &s.cfg); /* the flag's check took it */
    px_gpt_config_t *c = &s.cfg;
    struct {
        int given, *dst;
    } dims[] = {{o->C, &c->channels}, {o->NH, &c->num_heads}, {o->L, &c->num_layers}, {o->V, &c->vocab_size},
                {o->Vp, &c->padded_vocab_size}};
    for (auto &d : dims)
        if (d.given) *d.dst = d.given;
    s.B = o->B;
    s.T = o->T ? o->T : c->max_seq_len;
    if (s.T > c->max_seq_len) c->max_seq_len = s.T;
    char why[256];
    if (px_gpt_config_check(c, why, sizeof why) != 0) {
        fprintf(stderr, "%s: bad shape: %s (see %s --help)\n", PROG, why, PROG);
        exit(2);
    }
    s.BT = (size_t)s.B * (size_t)s.T;
    s.num_params = px_gpt_tensor_sizes(c, s.sizes);
    for (int i = 1; i < PX_GPT_NUM_TENSORS; i++) s.offsets[i] = s.offsets[i - 1] + s.sizes[i - 1];
    return s;
}

/* --------------------------------------------------------- device buffers */

/* The whole model's four state buffers (the norm and AdamW run over all of
 * them) and one layer's activations beside the outer ones. A view typed
 * void * holds the storage type X (float, or bf16 in the bf16 config): it
 * is allocated as floats, room for either. Plain pointers, so the op
 * lambdas copy it. */
struct bufs_t {
    float *params, *grads, *m, *v;        /* (num_params) */
    px_gpt_tensors_t p, g;                /* views of params and grads: the outer tensors and layer 0's */
    int *inputs, *targets;                /* (B,T) */
    int *plan;                            /* encoder_backward_plan of the inputs */
    int plan_groups;
    float *encoded;                       /* (B,T,C): layer 0's input */
    void *ln1, *ln2;                      /* X (B,T,C); ln1 also stands for lnf */
    float *mean1, *rstd1, *mean2, *rstd2; /* (B,T) */
    void *qkv;                            /* X (B,T,3C) */
    void *atty;                           /* X (B,T,C) */
    void *att;                            /* the unfused attention's X probabilities (B,NH,T,T), or the fused
                                             one's FP32 log-sum-exps (B,NH,T) */
    float *residual2, *residual3, *proj;  /* (B,T,C) */
    void *fch, *fch_gelu;                 /* X (B,T,4C) */
    void *logits;                         /* X (B,T,Vp); dlogits in place */
    float *losses, *lse;                  /* (B,T) */
    float *dres, *dbtc;                   /* (B,T,C) */
    void *d4a;                            /* X (B,T,4C), also dqkv */
    void *dres_x, *datt_x;                /* bf16 (B,T,C): dres and datt as the bf16 GEMMs read them */
    __nv_bfloat16 *w_layer;               /* bf16: one layer's GEMM weights and the biases of bf16 outputs */
    __nv_bfloat16 *w_outer;               /* bf16: wte (Vp,C) */
};

static std::vector<void *> g_owned; /* every cudaMalloc, freed at the end */

static uint64_t g_rng = 0x9E3779B97F4A7C15ull; /* xorshift64*: a fixed seed, the same data every run */
static uint32_t rng_u32(void) {
    g_rng ^= g_rng >> 12;
    g_rng ^= g_rng << 25;
    g_rng ^= g_rng >> 27;
    return (uint32_t)((g_rng * 0x2545F4914F6CDD1Dull) >> 32);
}

static void *dev_alloc(size_t bytes) {
    void *d = NULL;
    cudaError_t e = cudaMalloc(&d, bytes ? bytes : 1);
    if (e != cudaSuccess) {
        fprintf(stderr, "%s: cudaMalloc of %zu bytes failed: %s (lower --B or --T)\n", PROG, bytes,
                cudaGetErrorString(e));
        exit(1);
    }
    g_owned.push_back(d);
    return d;
}

/* n floats uniform in [-scale, scale), made on the host a chunk at a time. */
static float *dev_random(size_t n, float scale) {
    float *d = (float *)dev_alloc(n * sizeof(float));
    std::vector<float> chunk(std::min(n, (size_t)1 << 22));
    for (size_t at = 0; at < n; at += chunk.size()) {
        size_t k = std::min(chunk.size(), n - at);
        for (size_t i = 0; i < k; i++) chunk[i] = scale * ((float)(rng_u32() >> 8) / 8388608.0f - 1.0f);
        CK(cudaMemcpy(d + at, chunk.data(), k * sizeof(float), cudaMemcpyHostToDevice));
    }
    return d;
}

static float *dev_zeros(size_t n) {
    float *d = (float *)dev_alloc(n * sizeof(float));
    CK(cudaMemset(d, 0, n * sizeof(float)));
    return d;
}

static int *dev_ints(const std::vector<int> &h) {
    int *d = (int *)dev_alloc(h.size() * sizeof(int));
    CK(cudaMemcpy(d, h.data(), h.size() * sizeof(int), cudaMemcpyHostToDevice));
    return d;
}

static px_gpt_tensors_t views(float *base, const size_t *off) {
    px_gpt_tensors_t v;
    float **slot[PX_GPT_NUM_TENSORS] = {&v.wte,      &v.wpe,      &v.ln1w, &v.ln1b, &v.qkvw, &v.qkvb,
                                        &v.attprojw, &v.attprojb, &v.ln2w, &v.ln2b, &v.fcw,  &v.fcb,
                                        &v.fcprojw,  &v.fcprojb,  &v.lnfw, &v.lnfb};
    for (int i = 0; i < PX_GPT_NUM_TENSORS; i++) *slot[i] = base + off[i];
    return v;
}

/* A layer's six bf16 weight copies as the model lays them out (gpt_cuda.cu:
 * qkvw, qkvb, attprojw, fcw, fcb, fcprojw, each 64-byte aligned): the
 * conversion jobs from layer 0's FP32 tensors. Returns the bf16s needed. */
#define LAYER_WEIGHTS 6
static size_t layer_jobs(const shape_t &s, const bufs_t &b, px_cuda_convert_t jobs[LAYER_WEIGHTS]) {
    size_t C = (size_t)s.cfg.channels, H = 4 * C;
    const size_t n[LAYER_WEIGHTS] = {3 * C * C, 3 * C, C * C, H * C, H, C * H};
    const float *src[LAYER_WEIGHTS] = {b.p.qkvw, b.p.qkvb, b.p.attprojw, b.p.fcw, b.p.fcb, b.p.fcprojw};
    size_t at = 0;
    for (int i = 0; i < LAYER_WEIGHTS; i++) {
        jobs[i] = px_cuda_convert_t{b.w_layer ? b.w_layer + at : NULL, src[i], n[i]};
        at += (n[i] + 31) & ~(size_t)31;
    }
    return at;
}

/* Every buffer, filled: seeded random values (tokens in [0,V)), AdamW's
 * moments zero. probs: room for the unfused attention's FP32 probabilities. */
static bufs_t make_bufs(const shape_t &s, int probs) {
    bufs_t b;
    memset(&b, 0, sizeof b);
    size_t BT = s.BT, C = (size_t)s.cfg.channels, H = 4 * C, NH = (size_t)s.cfg.num_heads;
    size_t Vp = (size_t)s.cfg.padded_vocab_size, T = (size_t)s.T, np = s.num_params;
    b.params = dev_random(np, 0.02f);
    b.grads = dev_random(np, 0.01f);
    b.m = dev_zeros(np);
    b.v = dev_zeros(np);
    b.p = views(b.params, s.offsets);
    b.g = views(b.grads, s.offsets);
    std::vector<int> tok(BT);
    for (auto &t : tok) t = (int)(rng_u32() % (uint32_t)s.cfg.vocab_size);
    b.inputs = dev_ints(tok);
    std::vector<int> plan(encoder_backward_plan_ints(s.B, s.T));
    b.plan_groups = encoder_backward_plan(plan.data(), tok.data(), s.B, s.T, s.cfg.vocab_size);
    if (b.plan_groups < 0) {
        fprintf(stderr, "%s: encoder_backward_plan failed (no memory)\n", PROG);
        exit(1);
    }
    b.plan = dev_ints(plan);
    for (auto &t : tok) t = (int)(rng_u32() % (uint32_t)s.cfg.vocab_size);
    b.targets = dev_ints(tok);
    b.encoded = dev_random(BT * C, 1.0f);
    b.ln1 = dev_random(BT * C, 1.0f);
    b.ln2 = dev_random(BT * C, 1.0f);
    b.mean1 = dev_random(BT, 1.0f);
    b.rstd1 = dev_random(BT, 1.0f);
    b.mean2 = dev_random(BT, 1.0f);
    b.rstd2 = dev_random(BT, 1.0f);
    b.qkv = dev_random(BT * 3 * C, 1.0f);
    b.atty = dev_random(BT * C, 1.0f);
    b.att = dev_random((size_t)s.B * NH * T * (probs ? T : 1), 1.0f);
    b.residual2 = dev_random(BT * C, 1.0f);
    b.residual3 = dev_random(BT * C, 1.0f);
    b.proj = dev_random(BT * C, 1.0f);
    b.fch = dev_random(BT * H, 1.0f);
    b.fch_gelu = dev_random(BT * H, 1.0f);
    b.logits = dev_random(BT * Vp, 1.0f);
    b.losses = dev_random(BT, 1.0f);
    b.lse = dev_random(BT, 1.0f);
    b.dres = dev_random(BT * C, 1.0f);
    b.dbtc = dev_random(BT * C, 1.0f);
    b.d4a = dev_random(BT * H, 1.0f);
    b.dres_x = dev_random(BT * C, 1.0f);
    b.datt_x = dev_random(BT * C, 1.0f);
    px_cuda_convert_t jobs[LAYER_WEIGHTS];
    b.w_layer = (__nv_bfloat16 *)dev_zeros((layer_jobs(s, b, jobs) + 1) / 2);
    b.w_outer = (__nv_bfloat16 *)dev_zeros((Vp * C + 1) / 2);
    return b;
}

/* ------------------------------------------------------------ a step's ops */

/* One distinct call of a step: the ops_cuda.h function, the tensors it
 * works on, how often a step makes it, and the call itself. */
struct op_t {
    const char *fn;
    const char *use;
    int calls;
    std::function<void()> run;
    double ms; /* median per call, once timed */
};

/* The X-typed views (gpt_cuda.cu's layer_acts_t); with X float the GEMMs
 * read dres and datt (dbtc) themselves, as the model does. */
template <typename X>
struct acts_t {
    X *ln1, *ln2, *qkv, *atty, *fch, *fch_gelu, *logits, *d4a, *dres_x, *datt_x;
};

template <typename X>
static acts_t<X> acts_as(const bufs_t &b) {
    acts_t<X> x = {(X *)b.ln1,      (X *)b.ln2,    (X *)b.qkv, (X *)b.atty,   (X *)b.fch,
                   (X *)b.fch_gelu, (X *)b.logits, (X *)b.d4a, (X *)b.dres_x, (X *)b.datt_x};
    if (std::is_same<X, float>::value) x.dres_x = (X *)b.dres, x.datt_x = (X *)b.dbtc;
    return x;
}

/* The GEMMs' weights and the biases of GEMMs with an X output, and wte as
 * the classifier reads it: the FP32 tensors, or their bf16 copies. */
template <typename X>
struct gemm_weights_t {
    const X *qkvw, *qkvb, *attprojw, *fcw, *fcb, *fcprojw, *wte;
};

static gemm_weights_t<float> gemm_weights(const shape_t &, const bufs_t &b, const float *) {
    return gemm_weights_t<float>{b.p.qkvw, b.p.qkvb, b.p.attprojw, b.p.fcw, b.p.fcb, b.p.fcprojw, b.p.wte};
}

static gemm_weights_t<__nv_bfloat16> gemm_weights(const shape_t &s, const bufs_t &b, const __nv_bfloat16 *) {
    px_cuda_convert_t j[LAYER_WEIGHTS];
    layer_jobs(s, b, j);
    return gemm_weights_t<__nv_bfloat16>{j[0].dst, j[1].dst, j[2].dst, j[3].dst, j[4].dst, j[5].dst, b.w_outer};
}

/* A step's distinct calls in the model's order (gpt_cuda.cu: stage_forward,
 * layer_forward_with, stage_backward, layer_backward, then the clipping and
 * px_gpt_cuda_adamw_step), X the storage type. flash: the fused attention;
 * fused: the classifier's loss in one pass and GELU in the GEMM epilogues
 * (both with bf16 math). The order also makes each call's inputs the
 * outputs of the calls before it, as in a step. */
template <typename X>
static std::vector<op_t> step_ops(const shape_t &s, const bufs_t &b, int flash, int fused, cudaStream_t st) {
    constexpr bool bf16 = !std::is_same<X, float>::value;
    const int B = s.B, T = s.T, C = s.cfg.channels, NH = s.cfg.num_heads, L = s.cfg.num_layers;
    const int V = s.cfg.vocab_size, Vp = s.cfg.padded_vocab_size, H = 4 * C;
    const size_t BT = s.BT, np = s.num_params;
    const acts_t<X> x = acts_as<X>(b);
    const gemm_weights_t<X> w = gemm_weights(s, b, (const X *)NULL);
    const px_gpt_tensors_t p = b.p, g = b.g;
    const X *none = NULL;
    float *nodinp = NULL;
    std::vector<op_t> ops;
    auto add = [&ops](const char *fn, const char *use, int calls, std::function<void()> run) {
        ops.push_back(op_t{fn, use, calls, std::move(run), 0.0});
    };

    /* zero_grad, the embedding */
    add("cudaMemsetAsync", "zero_grad", 1, [=] { CK(cudaMemsetAsync(b.grads, 0, np * sizeof(float), st)); });
    add("encoder_forward_cuda", "wte,wpe", 1,
        [=] { encoder_forward_cuda(b.encoded, b.inputs, p.wte, p.wpe, B, T, C, st); });
    /* a layer's forward (L times) */
    if constexpr (bf16) { /* at each pass's acquire of the layer: forward and backward */
        px_cuda_convert_t jobs[LAYER_WEIGHTS]; /* the lambda keeps a copy */
        layer_jobs(s, b, jobs);
        add("px_cuda_to_bf16_many", "layer_weights", 2 * L, [=] { px_cuda_to_bf16_many(jobs, LAYER_WEIGHTS, st); });
    }
    add("layernorm_forward_cuda", "ln1,lnf", L + 1,
        [=] { layernorm_forward_cuda(x.ln1, b.mean1, b.rstd1, b.encoded, p.ln1w, p.ln1b, B, T, C, st); });
    add("matmul_forward_cuda", "qkv", L,
        [=] { matmul_forward_cuda(x.qkv, x.ln1, w.qkvw, w.qkvb, B, T, C, 3 * C, st); });
    if (flash)
        add("flash_attention_forward_cuda", "attention", L,
            [=] { flash_attention_forward_cuda(x.atty, (float *)b.att, x.qkv, B, T, C, NH, st); });
    else
        add("attention_forward_cuda", "attention", L,
            [=] { attention_forward_cuda(x.atty, (X *)b.att, x.qkv, B, T, C, NH, st); });
    add("matmul_forward_cuda", "attproj", L,
        [=] { matmul_forward_cuda(b.proj, x.atty, w.attprojw, p.attprojb, B, T, C, C, st); });
    add("residual_layernorm_forward_cuda", "ln2", L, [=] {
        residual_layernorm_forward_cuda(b.residual2, x.ln2, b.mean2, b.rstd2, b.encoded, b.proj, p.ln2w, p.ln2b, B, T,
                                        C, st);
    });
    if (fused) {
        add("matmul_forward_gelu_cuda", "fc", L,
            [=] { matmul_forward_gelu_cuda(x.fch_gelu, x.fch, x.ln2, w.fcw, w.fcb, B, T, C, H, st); });
    } else {
        add("matmul_forward_cuda", "fc", L, [=] { matmul_forward_cuda(x.fch, x.ln2, w.fcw, w.fcb, B, T, C, H, st); });
        add("gelu_forward_cuda", "fc", L, [=] { gelu_forward_cuda(x.fch_gelu, x.fch, BT * H, st); });
    }
    add("matmul_forward_cuda", "fcproj", L,
        [=] { matmul_forward_cuda(b.proj, x.fch_gelu, w.fcprojw, p.fcprojb, B, T, H, C, st); });
    add("residual_forward_cuda", "residual3", L,
        [=] { residual_forward_cuda(b.residual3, b.residual2, b.proj, BT * C, st); });
    /* the classifier and the loss */
    if constexpr (bf16) /* at the forward and at the backward */
        add("px_cuda_to_bf16", "wte", 2, [=] { px_cuda_to_bf16(b.w_outer, p.wte, (size_t)Vp * C, st); });
    add("matmul_forward_cuda", "classifier", 1,
        [=] { matmul_forward_cuda(x.logits, x.ln1, w.wte, none, B, T, C, Vp, st); });
    if (fused) {
        add("crossentropy_fused_cuda", "loss", 1, [=] {
            crossentropy_fused_cuda(b.losses, b.lse, x.logits, b.targets, 1.0f / (float)BT, B, T, V, Vp, st);
        });
    }
    if constexpr (!bf16) {
        if (!fused) {
            add("crossentropy_softmax_forward_cuda", "loss", 1,
                [=] { crossentropy_softmax_forward_cuda(b.losses, b.lse, x.logits, b.targets, B, T, V, Vp, st); });
            add("crossentropy_softmax_backward_cuda", "loss", 1, [=] {
                crossentropy_softmax_backward_cuda(x.logits, x.logits, b.lse, b.targets, 1.0f / (float)BT, B, T, V,
                                                   Vp, st);
            });
        }
    }
    add("matmul_backward_set_cuda", "classifier", 1,
        [=] { matmul_backward_set_cuda(b.dbtc, g.wte, NULL, x.logits, 1.0f, x.ln1, w.wte, B, T, C, Vp, st); });
    add("cudaMemsetAsync", "dres", 1, [=] { CK(cudaMemsetAsync(b.dres, 0, BT * C * sizeof(float), st)); });
    add("layernorm_backward_cuda", "lnf,ln2,ln1", 2 * L + 1, [=] {
        layernorm_backward_cuda(b.dres, x.dres_x, g.ln2w, g.ln2b, b.dbtc, b.residual2, p.ln2w, b.mean2, b.rstd2, B, T,
                                C, st);
    });
    /* a layer's backward (L times) */
    if (fused) {
        add("matmul_backward_dgelu_cuda", "fcproj", L,
            [=] { matmul_backward_dgelu_cuda(x.d4a, x.dres_x, x.fch, w.fcprojw, B, T, H, C, st); });
        add("matmul_backward_set_cuda", "fcproj_dw", L, [=] {
            matmul_backward_set_cuda(nodinp, g.fcprojw, g.fcprojb, x.dres_x, 1.0f, x.fch_gelu, w.fcprojw, B, T, H, C,
                                     st);
        });
    } else {
        add("matmul_backward_set_cuda", "fcproj", L, [=] {
            matmul_backward_set_cuda(x.d4a, g.fcprojw, g.fcprojb, x.dres_x, 1.0f, x.fch_gelu, w.fcprojw, B, T, H, C,
                                     st);
        });
        add("gelu_backward_inplace_cuda", "fc", L, [=] { gelu_backward_inplace_cuda(x.d4a, x.fch, BT * H, st); });
    }
    add("matmul_backward_set_cuda", "fc", L,
        [=] { matmul_backward_set_cuda(b.dbtc, g.fcw, g.fcb, x.d4a, 1.0f, x.ln2, w.fcw, B, T, C, H, st); });
    add("matmul_backward_set_cuda", "attproj", L, [=] {
        matmul_backward_set_cuda(x.datt_x, g.attprojw, g.attprojb, x.dres_x, 1.0f, x.atty, w.attprojw, B, T, C, C, st);
    });
    if (flash) {
        add("flash_attention_backward_set_cuda", "attention", L, [=] {
            flash_attention_backward_set_cuda(x.d4a, x.datt_x, x.qkv, x.atty, (float *)b.att, B, T, C, NH, st);
        });
    } else {
        add("attention_backward_set_cuda", "attention", L,
            [=] { attention_backward_set_cuda(x.d4a, x.datt_x, x.qkv, (const X *)b.att, B, T, C, NH, st); });
    }
    add("matmul_backward_set_cuda", "qkv", L,
        [=] { matmul_backward_set_cuda(b.dbtc, g.qkvw, g.qkvb, x.d4a, 1.0f, x.ln1, w.qkvw, B, T, C, 3 * C, st); });
    add("encoder_backward_cuda", "wte,wpe", 1,
        [=] { encoder_backward_cuda(g.wte, g.wpe, b.dres, b.inputs, b.plan, b.plan_groups, B, T, C, st); });
    /* clipping at a norm, then AdamW over every tensor in one launch */
    add("norm_squared_cuda", "grads", 1, [=] { (void)norm_squared_cuda(b.grads, np, st); });
    add("scale_inplace_cuda", "grads", 1, [=] { scale_inplace_cuda(b.grads, np, 0.99f, st); });
    add("adamw_update_tensors_cuda", "16_tensors", 1, [=] {
        int decay[PX_GPT_NUM_TENSORS];
        for (int i = 0; i < PX_GPT_NUM_TENSORS; i++) decay[i] = px_gpt_tensor_is_matrix(i);
        adamw_update_tensors_cuda(b.params, b.m, b.v, b.grads, s.sizes, decay, PX_GPT_NUM_TENSORS, 6e-4f, 0.9f, 0.95f,
                                  1e-8f, 0.1f, 1, st);
    });
    return ops;
}

/* -------------------------------------------------------- configurations */

typedef enum { CFG_FP32, CFG_BF16MATH, CFG_BF16, CFG_COUNT } config_id_t;

static const struct {
    const char *name;
    px_cuda_math_t math;
    int bf16_storage;
} CONFIGS[CFG_COUNT] = {
    {"fp32", PX_CUDA_MATH_FP32, 0},
    {"bf16math", PX_CUDA_MATH_BF16, 0},
    {"bf16", PX_CUDA_MATH_BF16, 1},
};

/* --config's values as ids (all three when none is given); exits 2 naming a bad one. */
static std::vector<config_id_t> chosen_configs(const px_flag_list_t &l) {
    std::vector<config_id_t> ids;
    for (int i = 0; i < l.n; i++) {
        int k = 0;
        while (k < CFG_COUNT && strcmp(l.v[i], CONFIGS[k].name) != 0) k++;
        if (k == CFG_COUNT) {
            fprintf(stderr, "%s: --config: bad value '%s': expected fp32, bf16math or bf16\n", PROG, l.v[i]);
            exit(2);
        }
        ids.push_back((config_id_t)k);
    }
    if (ids.empty()) ids = {CFG_FP32, CFG_BF16MATH, CFG_BF16};
    return ids;
}

/* The fused attention where the model takes it (px_gpt_cuda_new): bf16
 * math, not turned off, and a head size the kernels take on this GPU. */
static int uses_flash(config_id_t id, const shape_t &s, int unfused_attention) {
    return CONFIGS[id].math == PX_CUDA_MATH_BF16 && !unfused_attention &&
           flash_attention_supported(s.cfg.channels / s.cfg.num_heads);
}

/* The config's calls, with its math mode set. */
static std::vector<op_t> config_ops(config_id_t id, const shape_t &s, const bufs_t &b, int flash, cudaStream_t st) {
    px_cuda_ops_set_math(CONFIGS[id].math);
    int bf16math = CONFIGS[id].math == PX_CUDA_MATH_BF16;
    if (CONFIGS[id].bf16_storage) return step_ops<__nv_bfloat16>(s, b, flash, bf16math, st);
    return step_ops<float>(s, b, flash, bf16math, st);
}

/* ---------------------------------------------------------------- timing */

/* op's median ms per call: warmup calls, then reps back to back, an event
 * recorded before the first and after each (ev: reps + 1 events). */
static double median_ms(const op_t &op, int warmup, int reps, cudaStream_t st, const std::vector<cudaEvent_t> &ev) {
    for (int i = 0; i < warmup; i++) op.run();
    CK(cudaStreamSynchronize(st));
    CK(cudaEventRecord(ev[0], st));
    for (int i = 0; i < reps; i++) {
        op.run();
        CK(cudaEventRecord(ev[(size_t)i + 1], st));
    }
    CK(cudaEventSynchronize(ev[(size_t)reps]));
    std::vector<double> ms((size_t)reps);
    for (int i = 0; i < reps; i++) {
        float t = 0.0f;
        CK(cudaEventElapsedTime(&t, ev[(size_t)i], ev[(size_t)i + 1]));
        ms[(size_t)i] = t;
    }
    std::sort(ms.begin(), ms.end());
    size_t h = ms.size() / 2;
    return ms.size() % 2 ? ms[h] : 0.5 * (ms[h - 1] + ms[h]);
}

/* ---------------------------------------------------------------- report */

struct total_t {
    config_id_t id;
    double ms; /* per step */
};

static double tokens_per_s(const shape_t &s, double ms) { return (double)s.BT / (ms / 1e3); }

/* The config's table and its total line; returns the total ms per step. */
static double print_table(config_id_t id, int flash, const std::vector<op_t> &ops, const shape_t &s) {
    double total = 0.0;
    for (const op_t &op : ops) total += op.ms * op.calls;
    printf("\nconfig=%s math=%s storage=%s attention=%s\n", CONFIGS[id].name,
           CONFIGS[id].math == PX_CUDA_MATH_BF16 ? "bf16" : "fp32", CONFIGS[id].bf16_storage ? "bf16" : "fp32",
           flash ? "fused" : "unfused");
    printf("%-35s %-14s %10s %10s %10s %7s\n", "op", "use", "ms/call", "calls/step", "ms/step", "%");
    for (const op_t &op : ops)
        printf("%-35s %-14s %10.4f %10d %10.3f %7.2f\n", op.fn, op.use, op.ms, op.calls, op.ms * op.calls,
               total > 0 ? 100.0 * op.ms * op.calls / total : 0.0);
    double flops = px_gpt_flops_per_step(&s.cfg, s.B, s.T);
    printf("config=%s total ms/step=%.3f tokens/s=%.0f model_TFLOP/s=%.2f ops=%zu\n", CONFIGS[id].name, total,
           tokens_per_s(s, total), flops / (total / 1e3) / 1e12, ops.size());
    return total;
}

static void print_summary(const std::vector<total_t> &totals, const shape_t &s) {
    printf("\nsummary preset=%s B=%d T=%d (sums of the ops' medians; host work between ops not included)\n", s.preset,
           s.B, s.T);
    printf("%-10s %10s %12s   vs_%s\n", "config", "ms/step", "tokens/s",
           totals.empty() ? "" : CONFIGS[totals[0].id].name);
    for (const total_t &t : totals)
        printf("%-10s %10.3f %12.0f %9.2fx\n", CONFIGS[t.id].name, t.ms, tokens_per_s(s, t.ms), totals[0].ms / t.ms);
}

/* 0 when every time is finite and not negative and the total is positive;
 * else 1, naming each bad time. */
static int check_times(config_id_t id, const std::vector<op_t> &ops, double total) {
    int bad = 0;
    for (const op_t &op : ops)
        if (!std::isfinite(op.ms) || op.ms < 0.0) {
            fprintf(stderr, "%s: config=%s op=%s use=%s: bad time %g ms\n", PROG, CONFIGS[id].name, op.fn, op.use,
                    op.ms);
            bad = 1;
        }
    if (!(total > 0.0) || !std::isfinite(total)) {
        fprintf(stderr, "%s: config=%s: total %g ms per step\n", PROG, CONFIGS[id].name, total);
        bad = 1;
    }
    return bad;
}

int main(int argc, char **argv) {
    opts_t o;
    memset(&o, 0, sizeof o);
    const px_flag_section_t sections[] = {{&TABLE, &o, NULL}};
    const px_flags_spec_t spec = {PROG, USAGE, EPILOGUE, sections, 1, 0, 0, 0};
    px_flags_parsed_t parsed;
    px_flags_parse(&spec, argc, argv, &parsed);
    std::vector<config_id_t> ids = chosen_configs(o.configs);
    shape_t s = make_shape(&o);

    char why[512];
    if (px_cuda_device_count(why, sizeof why) < 1) {
        printf("SKIP: %s needs a GPU: %s\n", PROG, why);
        return 77;
    }
    px_cuda_ops_init();
    printf("%s device=\"%s\"\n", PROG, why);
    printf("shape preset=%s B=%d T=%d C=%d NH=%d L=%d V=%d Vp=%d params=%zu reps=%d warmup=%d\n", s.preset, s.B, s.T,
           s.cfg.channels, s.cfg.num_heads, s.cfg.num_layers, s.cfg.vocab_size, s.cfg.padded_vocab_size,
           s.num_params, o.reps, o.warmup);
    fflush(stdout);

    int probs = 0; /* a config with the unfused attention: room for its (B,NH,T,T) */
    for (config_id_t id : ids) probs |= !uses_flash(id, s, o.unfused_attention);
    bufs_t b = make_bufs(s, probs);
    cudaStream_t st;
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));
    std::vector<cudaEvent_t> ev((size_t)o.reps + 1);
    for (auto &e : ev) CK(cudaEventCreate(&e));

    int bad = 0;
    std::vector<total_t> totals;
    for (config_id_t id : ids) {
        int flash = uses_flash(id, s, o.unfused_attention);
        std::vector<op_t> ops = config_ops(id, s, b, flash, st);
        for (op_t &op : ops) op.ms = median_ms(op, o.warmup, o.reps, st, ev);
        double total = print_table(id, flash, ops, s);
        bad |= check_times(id, ops, total);
        totals.push_back(total_t{id, total});
        fflush(stdout);
    }
    print_summary(totals, s);

    for (auto &e : ev) CK(cudaEventDestroy(e));
    CK(cudaStreamDestroy(st));
    for (void *d : g_owned) CK(cudaFree(d));
    px_cuda_ops_shutdown();
    return bad;
}
