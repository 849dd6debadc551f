/* The GPT-2 training ops: every layer as a forward/backward pair of free
 * functions with llm.c's names. This header is the CPU API (ops_cpu.c) and the
 * contract the CUDA implementation (the kernels/ .cu files) mirrors op for op, with the
 * same shapes and semantics, so the two can be read side by side. The model
 * (model/gpt.c) only strings these together.
 *
 * Conventions, shared by every op:
 * - Shapes are row-major and written next to each pointer: `inp (B,T,C)` means
 *   inp[(b*T + t)*C + c]. B = batch, T = sequence length, C = channels,
 *   OC = output channels, NH = heads, V = real vocabulary, Vp = padded vocabulary.
 * - Weights follow PyTorch's nn.Linear: weight (OC,C), out = inp @ weight^T + bias.
 * - Every *_backward ACCUMULATES (+=) into each gradient it writes, inputs and
 *   parameters alike, so callers zero gradient buffers first and can sum
 *   micro-batches. The one exception is crossentropy_softmax_backward, which
 *   overwrites dlogits so that it can run in place on the logits buffer.
 * - Gradient outputs documented "may be NULL" are skipped when NULL.
 * - Determinism: for a fixed OpenMP thread count every op gives bitwise
 *   identical results run after run. Loops are split by fixed static
 *   partitions; no float atomics; every float reduction runs in a fixed order.
 * - Threads: ops run on the current OpenMP team (omp_set_num_threads). Matmuls
 *   call OpenBLAS single-threaded from inside the OpenMP team, each thread on
 *   its own block; px_ops_init() pins OpenBLAS to one thread so its own
 *   pthreads never compete with OpenMP's. The ops that call BLAS call it
 *   implicitly.
 *
 * Element math (GELU, exp, the AdamW element update) lives in ops_math.h as
 * host/device inline functions so CPU tests exercise the code the GPU runs. */
#ifndef PX_OPS_H
#define PX_OPS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One-time setup: OpenBLAS single-threaded (see above). Idempotent, thread-safe. */
void px_ops_init(void);

/* ---- token + position embedding ----
 * out[b,t,:] = wte[inp[b,t],:] + wpe[t,:]
 * out (B,T,C), inp (B,T) with 0 <= inp < rows of wte, wte (Vp,C), wpe (maxT,C), T <= maxT. */
void encoder_forward(float *out, const int *inp, const float *wte, const float *wpe, int B, int T,
                     int C);
/* dwte (Vp,C) +=, dwpe (maxT,C) +=; dout (B,T,C), inp (B,T).
 * Parallel over channel blocks, so repeated tokens never race. */
void encoder_backward(float *dwte, float *dwpe, const float *dout, const int *inp, int B, int T,
                      int C);

/* ---- LayerNorm over the last dimension (eps 1e-5, biased variance, as PyTorch) ----
 * out (B,T,C), mean (B,T), rstd (B,T) (saved for backward), inp (B,T,C),
 * weight (C), bias (C). */
void layernorm_forward(float *out, float *mean, float *rstd, const float *inp,
                       const float *weight, const float *bias, int B, int T, int C);
/* dinp (B,T,C) +=, dweight (C) +=, dbias (C) +=; dout (B,T,C), inp (B,T,C),
 * weight (C), mean (B,T), rstd (B,T) from the forward. */
void layernorm_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                        const float *inp, const float *weight, const float *mean,
                        const float *rstd, int B, int T, int C);

/* ---- matmul with bias (cblas_sgemm) ----
 * out (B,T,OC) = inp (B,T,C) @ weight^T + bias; weight (OC,C), bias (OC) or NULL. */
void matmul_forward(float *out, const float *inp, const float *weight, const float *bias, int B,
                    int T, int C, int OC);
/* dinp (B,T,C) += dout @ weight; dweight (OC,C) += dout^T @ inp; dbias (OC) += sum over
 * (B,T) of dout. dout (B,T,OC), inp (B,T,C), weight (OC,C). dinp, dweight, dbias may be NULL. */
void matmul_backward(float *dinp, float *dweight, float *dbias, const float *dout,
                     const float *inp, const float *weight, int B, int T, int C, int OC);

/* ---- causal multi-head self-attention ----
 * qkv (B,T,3C): per position the query, key and value vectors, each C = NH*hs
 * wide, head h at channels [h*hs, (h+1)*hs) of each. out (B,T,C): heads
 * concatenated. att (B,NH,T,T): softmax(q.k/sqrt(hs)) probabilities saved for
 * backward; row t holds keys 0..t, entries with key > t are unspecified and
 * never read. */
void attention_forward(float *out, float *att, const float *qkv, int B, int T, int C, int NH);
/* dqkv (B,T,3C) +=; dout (B,T,C), qkv (B,T,3C), att (B,NH,T,T) from the forward.
 * The CPU version allocates its own per-thread (64,T) scratch. */
void attention_backward(float *dqkv, const float *dout, const float *qkv, const float *att, int B,
                        int T, int C, int NH);

/* ---- GELU, tanh approximation (PyTorch approximate='tanh') ----
 * out (N) = gelu(inp (N)). */
void gelu_forward(float *out, const float *inp, size_t N);
/* dinp (N) += gelu'(inp) * dout. */
void gelu_backward(float *dinp, const float *inp, const float *dout, size_t N);

/* ---- residual add ----
 * out (N) = inp1 (N) + inp2 (N). */
void residual_forward(float *out, const float *inp1, const float *inp2, size_t N);
/* dinp1 (N) += dout, dinp2 (N) += dout. */
void residual_backward(float *dinp1, float *dinp2, const float *dout, size_t N);

/* ---- fused softmax + cross-entropy over the real vocabulary ----
 * logits (B,T,Vp): only columns < V take part (the padding is ignored).
 * losses (B,T) = logsumexp(logits[b,t,:V]) - logits[b,t,targets[b,t]];
 * lse (B,T) = that logsumexp, saved for backward. targets (B,T) in [0,V). */
void crossentropy_softmax_forward(float *losses, float *lse, const float *logits,
                                  const int *targets, int B, int T, int V, int Vp);
/* dlogits (B,T,Vp) = (softmax(logits) - onehot(targets)) * dloss for columns < V and 0 for
 * the padding: OVERWRITES, and dlogits may equal logits (in place). dloss is the gradient
 * of the objective with respect to each position's loss (1/(B*T) for a mean). */
void crossentropy_softmax_backward(float *dlogits, const float *logits, const float *lse,
                                   const int *targets, float dloss, int B, int T, int V, int Vp);

/* ---- AdamW (PyTorch's torch.optim.AdamW arithmetic) ----
 * params, m, v, grads: (n). t is the 1-based step count, used for bias correction
 * 1 - beta^t. Decoupled weight decay: param *= 1 - lr*weight_decay before the Adam
 * step; the caller passes weight_decay 0 for tensors that must not decay. */
void adamw_update(float *params, float *m, float *v, const float *grads, size_t n, float lr,
                  float beta1, float beta2, float eps, float weight_decay, int t);
/* The same update on the calling thread alone, for a caller that splits the
 * work itself (px_gpt_adamw_step_parts): bitwise what adamw_update gives. */
void adamw_update_serial(float *params, float *m, float *v, const float *grads, size_t n, float lr,
                         float beta1, float beta2, float eps, float weight_decay, int t);

/* ---- global gradient norm and clipping ----
 * Sum of squares of x (n), accumulated in double over fixed 16384-element blocks
 * summed in block order: the same on any thread count. Sum over several
 * buffers, then sqrt, gives the global norm. */
double norm_squared(const float *x, size_t n);
/* x (n) *= scale. */
void scale_inplace(float *x, size_t n, float scale);

/* ---- a copy nobody reads soon ----
 * dst (n) = src, on the calling thread, with stores that bypass the caches
 * where the CPU has them (x86-64's streaming stores; memcpy elsewhere): a
 * checkpoint's snapshot, written now and read by another thread later. On a
 * bandwidth-bound copy this skips reading each destination line before
 * writing it (about a third faster for 1.5 GB here), and leaves the caller's
 * working set in the caches. Bitwise a memcpy; any alignment. */
void copy_streaming(float *dst, const float *src, size_t n);

#ifdef __cplusplus
}
#endif

#endif
