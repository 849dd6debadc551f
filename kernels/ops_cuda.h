/* The GPT-2 training ops on the GPU: the CUDA twin of kernels/ops.h. Every op
 * has the CPU name plus a `_cuda` suffix, the same arguments in the same order
 * with the same shapes and semantics (read ops.h for those), followed by the
 * cudaStream_t it is queued on (0 is the legacy default stream). Pointers are
 * device pointers unless said otherwise. Matmuls run through cuBLAS (the
 * forward matmul with a bias through cuBLASLt's bias epilogue); element math
 * comes from ops_math.h, the same functions the CPU runs.
 *
 * Semantics kept from ops.h: every *_backward ACCUMULATES into its gradients
 * (except crossentropy_softmax_backward_cuda, which overwrites and may run in
 * place); gradient pointers documented "may be NULL" are skipped when NULL.
 *
 * Differences from the CPU ops, all deliberate:
 * - Ops are asynchronous on their stream. norm_squared_cuda returns a host
 *   double, so it synchronizes the stream.
 * - attention_*_cuda need scratch memory (q, k, v in head-major layout, and a
 *   (B,NH,T,T) buffer in the backward); they take it from a library-owned
 *   scratch buffer that grows on demand. The backward masks att itself, so it
 *   never reads entries above the diagonal (ops.h's contract).
 * - Results match the CPU ops to float tolerance, not bitwise: the summation
 *   orders differ. Run to run on one GPU model, every op is bitwise
 *   reproducible: no float atomics anywhere; reductions use fixed trees; cuBLAS
 *   is reproducible by NVIDIA's documentation (same GPU architecture, SM count
 *   and toolkit, one stream per handle at a time). In the default math mode
 *   (px_cuda_ops_set_math) matmuls are full FP32, no TF32, to stay
 *   comparable with the CPU.
 * - For C++ callers, the end of this header overloads the ops on bf16
 *   tensors (the model's bf16 activation storage).
 *
 * Usage rules: call px_cuda_ops_init() (or any op: they init lazily) with the
 * device you want current; issue ops from one host thread on one stream at a
 * time (they share handles and scratch). A failed CUDA or cuBLAS call logs
 * file:line, the call and the error string, and exits the process.
 *
 * Device presence: px_cuda_device_count() never exits; it returns 0 with a
 * reason when no usable GPU exists, so `--device cuda` can fail clearly and
 * the CPU path is unaffected. */
#ifndef PX_OPS_CUDA_H
#define PX_OPS_CUDA_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- device presence ---- */

/* Number of CUDA devices when the current one can run this build's kernels,
 * with a description ("1 CUDA device(s); device 0: NVIDIA H100 ... sm_90") in
 * why; else 0 with the reason in why, e.g. "no CUDA device: cudaGetDeviceCount
 * returned error 35 (CUDA driver version is insufficient ...)". Never exits. */
int px_cuda_device_count(char *why, size_t whylen);
/* 1 when a usable GPU is present, else 0 with the reason in why. Also
 * declared, with the same meaning, in kernels/device.h of the CPU library. */
int px_cuda_available(char *why, size_t whylen);

/* ---- library context ---- */

/* Creates the cuBLAS/cuBLASLt handles and workspace on the current device.
 * Idempotent and thread-safe; every op calls it. Exits on failure (call
 * px_cuda_device_count first for a clean message). */
void px_cuda_ops_init(void);
/* Frees handles, workspace and scratch (after synchronizing the device). */
void px_cuda_ops_shutdown(void);
/* enable 1 (default): matmul_forward_cuda with a bias uses cuBLASLt's bias
 * epilogue where cuBLASLt offers an algorithm for the pointers' alignment;
 * 0: always cublasSgemm plus a bias kernel. Both paths are tested. */
void px_cuda_ops_set_lt(int enable);

/* How the GEMMs (matmul and attention) compute, process-wide; set it before
 * creating a model (px_gpt_cuda_new reads it).
 *   FP32 (default): FP32 in, out and inside, no tensor-core lowering;
 *     bitwise reproducible, comparable with the CPU ops.
 *   TF32: FP32 storage, products on tensor cores in TF32 (10-bit mantissa
 *     inputs, FP32 accumulation).
 *   BF16: FP32 storage, GEMM inputs rounded to bf16 on tensor cores, FP32
 *     accumulation; attention by the fused kernel (flash_attention_*_cuda)
 *     where the head size allows, so no (B,NH,T,T) tensor exists.
 * Every mode is deterministic on a given GPU (no atomics, fixed algorithms
 * for a shape). */
typedef enum { PX_CUDA_MATH_FP32 = 0, PX_CUDA_MATH_TF32 = 1, PX_CUDA_MATH_BF16 = 2 } px_cuda_math_t;
void px_cuda_ops_set_math(px_cuda_math_t math);
px_cuda_math_t px_cuda_ops_math(void);
/* enable 1 (default): under BF16 math, models made afterwards take the
 * fused attention (flash_attention_*_cuda) where the head size allows; 0:
 * the unfused attention (attention_*_cuda) always. Process-wide. */
void px_cuda_ops_set_fused_attention(int enable);
int px_cuda_ops_fused_attention(void);

/* ---- token + position embedding ---- */
/* out (B,T,C) = wte[inp] + wpe[t]; inp (B,T) device ints. */
void encoder_forward_cuda(float *out, const int *inp, const float *wte, const float *wpe, int B,
                          int T, int C, cudaStream_t stream);
/* The backward's plan, built on the host from the host copy of inp (B,T):
 * the positions grouped by token, in order, then each group's start.
 * encoder_backward_plan_ints(B, T) ints; returns the number of groups (the
 * distinct tokens), or -1 for a token outside [0, V) or no memory. */
size_t encoder_backward_plan_ints(int B, int T);
int encoder_backward_plan(int *plan, const int *inp, int B, int T, int V);
/* dwte (Vp,C) +=, dwpe (maxT,C) +=; inp and plan (of encoder_backward_plan,
 * `groups` groups) on the device. Each (token, channel) of dwte is owned by
 * one thread that adds its token's positions in order, so repeated tokens
 * never race and every sum has the CPU's order. */
void encoder_backward_cuda(float *dwte, float *dwpe, const float *dout, const int *inp, const int *plan,
                           int groups, int B, int T, int C, cudaStream_t stream);

/* ---- LayerNorm ---- */
void layernorm_forward_cuda(float *out, float *mean, float *rstd, const float *inp,
                            const float *weight, const float *bias, int B, int T, int C,
                            cudaStream_t stream);
/* res = a + b (B,T,C), then layernorm_forward_cuda of res, in one pass;
 * bitwise residual_forward_cuda followed by layernorm_forward_cuda. */
void residual_layernorm_forward_cuda(float *res, float *out, float *mean, float *rstd, const float *a,
                                     const float *b, const float *weight, const float *bias, int B, int T, int C,
                                     cudaStream_t stream);
void layernorm_backward_cuda(float *dinp, float *dweight, float *dbias, const float *dout,
                             const float *inp, const float *weight, const float *mean,
                             const float *rstd, int B, int T, int C, cudaStream_t stream);

/* ---- matmul with bias ---- */
void matmul_forward_cuda(float *out, const float *inp, const float *weight, const float *bias,
                         int B, int T, int C, int OC, cudaStream_t stream);
void matmul_backward_cuda(float *dinp, float *dweight, float *dbias, const float *dout,
                          const float *inp, const float *weight, int B, int T, int C, int OC,
                          cudaStream_t stream);
/* out (B,T,OC) = GELU(pre), pre = inp @ weight^T + bias (both written),
 * in one cuBLASLt matmul when cuBLASLt offers its GELU epilogue for the
 * shape, else matmul_forward_cuda then gelu_forward_cuda. cuBLASLt's GELU
 * (tanh form) need not round as px_gelu does. */
void matmul_forward_gelu_cuda(float *out, float *pre, const float *inp, const float *weight, const float *bias, int B,
                              int T, int C, int OC, cudaStream_t stream);
/* dinp (B,T,C) = (dout @ weight) * GELU'(pre) (overwritten), pre (B,T,C)
 * the GELU's input: one cuBLASLt matmul with its DGELU epilogue, else
 * matmul_backward_set_cuda then gelu_backward_inplace_cuda. */
void matmul_backward_dgelu_cuda(float *dinp, const float *dout, const float *pre, const float *weight, int B, int T,
                                int C, int OC, cudaStream_t stream);
/* The same for the output gradient scale * dout, with dinp overwritten (=),
 * not accumulated: no zeroing first. dweight and dbias still accumulate. */
void matmul_backward_set_cuda(float *dinp, float *dweight, float *dbias, const float *dout, float scale,
                              const float *inp, const float *weight, int B, int T, int C, int OC,
                              cudaStream_t stream);

/* ---- causal multi-head self-attention ---- */
/* att (B,NH,T,T): entries above the diagonal are written as 0. */
void attention_forward_cuda(float *out, float *att, const float *qkv, int B, int T, int C, int NH,
                            cudaStream_t stream);
void attention_backward_cuda(float *dqkv, const float *dout, const float *qkv, const float *att,
                             int B, int T, int C, int NH, cudaStream_t stream);

/* ---- fused causal attention (FlashAttention-2's algorithm) ---- */
/* 1 when the fused kernels take head size hs (a multiple of 16 up to 128)
 * on this build's GPUs (sm_80 and newer: bf16 tensor cores). */
int flash_attention_supported(int hs);
/* out (B,T,C) = causal attention of qkv (B,T,3C), with Q, K, V and the
 * probabilities rounded to bf16 for the products, softmax and accumulation
 * in FP32. lse (B,NH,T): each row's log-sum-exp of the scaled scores, what
 * the backward needs instead of the (B,NH,T,T) probabilities. */
void flash_attention_forward_cuda(float *out, float *lse, const float *qkv, int B, int T, int C, int NH,
                                  cudaStream_t stream);
/* dqkv (B,T,3C) += the gradient, from dout (B,T,C), the forward's qkv, out
 * and lse. Deterministic: every gradient element is summed by one thread
 * block in a fixed order (dK and dV per key tile, dQ per query tile). */
void flash_attention_backward_cuda(float *dqkv, const float *dout, const float *qkv, const float *out,
                                   const float *lse, int B, int T, int C, int NH, cudaStream_t stream);
/* The same with dqkv overwritten (=), not accumulated: no zeroing first. */
void flash_attention_backward_set_cuda(float *dqkv, const float *dout, const float *qkv, const float *out,
                                       const float *lse, int B, int T, int C, int NH, cudaStream_t stream);

/* ---- GELU (tanh form) ---- */
void gelu_forward_cuda(float *out, const float *inp, size_t N, cudaStream_t stream);
void gelu_backward_cuda(float *dinp, const float *inp, const float *dout, size_t N,
                        cudaStream_t stream);
/* d = GELU'(inp) * d: the gradient through the GELU, in place. */
void gelu_backward_inplace_cuda(float *d, const float *inp, size_t N, cudaStream_t stream);

/* ---- residual add ---- */
void residual_forward_cuda(float *out, const float *inp1, const float *inp2, size_t N,
                           cudaStream_t stream);
void residual_backward_cuda(float *dinp1, float *dinp2, const float *dout, size_t N,
                            cudaStream_t stream);

/* ---- fused softmax + cross-entropy ---- */
/* targets (B,T) device ints in [0,V) (not checked on the device). */
void crossentropy_softmax_forward_cuda(float *losses, float *lse, const float *logits,
                                       const int *targets, int B, int T, int V, int Vp,
                                       cudaStream_t stream);
void crossentropy_softmax_backward_cuda(float *dlogits, const float *logits, const float *lse,
                                        const int *targets, float dloss, int B, int T, int V,
                                        int Vp, cudaStream_t stream);
/* Both in one pass: the forward's losses and lse, and logits overwritten
 * by the backward's gradient (dloss). */
void crossentropy_fused_cuda(float *losses, float *lse, float *logits, const int *targets, float dloss, int B, int T,
                             int V, int Vp, cudaStream_t stream);

/* ---- AdamW ---- */
void adamw_update_cuda(float *params, float *m, float *v, const float *grads, size_t n, float lr,
                       float beta1, float beta2, float eps, float weight_decay, int t,
                       cudaStream_t stream);
/* adamw_update_cuda over ntensors (<= PX_ADAMW_TENSORS) tensors laid end to
 * end from the buffers' starts, sizes[i] elements each, tensor i with
 * weight decay when decay[i] (else 0): one launch for all of them, bitwise
 * the same as one adamw_update_cuda per tensor. */
#define PX_ADAMW_TENSORS 32
void adamw_update_tensors_cuda(float *params, float *m, float *v, const float *grads, const size_t *sizes,
                               const int *decay, int ntensors, float lr, float beta1, float beta2, float eps,
                               float weight_decay, int t, cudaStream_t stream);

/* ---- global gradient norm and clipping ---- */
/* Sum of squares of x (n) in double: per 16384-element block (as the CPU), then
 * the blocks in order. Synchronizes the stream; returns a host value. */
double norm_squared_cuda(const float *x, size_t n, cudaStream_t stream);
void scale_inplace_cuda(float *x, size_t n, float scale, cudaStream_t stream);

#ifdef __cplusplus
}

/* ---- bf16 storage (C++ only): the same ops on bf16 tensors ----
 * For the model's bf16 activations (model/gpt_cuda.cu): what a GEMM reads
 * (LayerNorm outputs, qkv, the attention output, the MLP's hidden units,
 * the logits, and the output gradients fed back into GEMMs) is stored in
 * bf16; the residual stream, its gradient, LayerNorm statistics, losses,
 * parameters and their gradients stay FP32. Arithmetic is FP32 everywhere,
 * each bf16 store rounds to nearest even. Semantics, shapes and argument
 * order are those of the FP32 op of the same name. Matmuls on bf16
 * operands run cuBLAS(Lt) with FP32 accumulation, whatever the math mode;
 * a bias has the output's type (cuBLASLt's rule for its epilogue), and so
 * has the GELU epilogue's aux matrix. */
#include <cuda_bf16.h>

/* dst (n) = src rounded to bf16; and back. */
void px_cuda_to_bf16(__nv_bfloat16 *dst, const float *src, size_t n, cudaStream_t stream);
void px_cuda_to_float(float *dst, const __nv_bfloat16 *src, size_t n, cudaStream_t stream);
/* Up to PX_CUDA_CONVERT_MAX tensors rounded to bf16 in one launch. */
#define PX_CUDA_CONVERT_MAX 8
typedef struct {
    __nv_bfloat16 *dst;
    const float *src;
    size_t n;
} px_cuda_convert_t;
void px_cuda_to_bf16_many(const px_cuda_convert_t *jobs, int njobs, cudaStream_t stream);

void layernorm_forward_cuda(__nv_bfloat16 *out, float *mean, float *rstd, const float *inp, const float *weight,
                            const float *bias, int B, int T, int C, cudaStream_t stream);
void residual_layernorm_forward_cuda(float *res, __nv_bfloat16 *out, float *mean, float *rstd, const float *a,
                                     const float *b, const float *weight, const float *bias, int B, int T, int C,
                                     cudaStream_t stream);
/* layernorm_backward_cuda that also writes dinp, after its update, rounded
 * to bf16 into dinp_bf16 (the next GEMMs' output gradient). */
void layernorm_backward_cuda(float *dinp, __nv_bfloat16 *dinp_bf16, float *dweight, float *dbias, const float *dout,
                             const float *inp, const float *weight, const float *mean, const float *rstd, int B,
                             int T, int C, cudaStream_t stream);
/* Its form for FP32 storage, where the GEMMs read dinp itself: dinp_fp32
 * must be dinp (so storage-generic code calls one name). */
void layernorm_backward_cuda(float *dinp, float *dinp_fp32, float *dweight, float *dbias, const float *dout,
                             const float *inp, const float *weight, const float *mean, const float *rstd, int B,
                             int T, int C, cudaStream_t stream);

void matmul_forward_cuda(__nv_bfloat16 *out, const __nv_bfloat16 *inp, const __nv_bfloat16 *weight,
                         const __nv_bfloat16 *bias, int B, int T, int C, int OC, cudaStream_t stream);
void matmul_forward_cuda(float *out, const __nv_bfloat16 *inp, const __nv_bfloat16 *weight, const float *bias, int B,
                         int T, int C, int OC, cudaStream_t stream);
void matmul_forward_gelu_cuda(__nv_bfloat16 *out, __nv_bfloat16 *pre, const __nv_bfloat16 *inp,
                              const __nv_bfloat16 *weight, const __nv_bfloat16 *bias, int B, int T, int C, int OC,
                              cudaStream_t stream);
void matmul_backward_dgelu_cuda(__nv_bfloat16 *dinp, const __nv_bfloat16 *dout, const __nv_bfloat16 *pre,
                                const __nv_bfloat16 *weight, int B, int T, int C, int OC, cudaStream_t stream);
/* dinp FP32 or bf16; dweight and dbias (FP32) accumulate. */
void matmul_backward_cuda(float *dinp, float *dweight, float *dbias, const __nv_bfloat16 *dout,
                          const __nv_bfloat16 *inp, const __nv_bfloat16 *weight, int B, int T, int C, int OC,
                          cudaStream_t stream);
void matmul_backward_set_cuda(float *dinp, float *dweight, float *dbias, const __nv_bfloat16 *dout, float scale,
                              const __nv_bfloat16 *inp, const __nv_bfloat16 *weight, int B, int T, int C, int OC,
                              cudaStream_t stream);
void matmul_backward_set_cuda(__nv_bfloat16 *dinp, float *dweight, float *dbias, const __nv_bfloat16 *dout,
                              float scale, const __nv_bfloat16 *inp, const __nv_bfloat16 *weight, int B, int T, int C,
                              int OC, cudaStream_t stream);

/* The unfused attention on bf16: att (B,NH,T,T) bf16 too. Its backward,
 * on either storage, overwriting dqkv (=) rather than accumulating. */
void attention_forward_cuda(__nv_bfloat16 *out, __nv_bfloat16 *att, const __nv_bfloat16 *qkv, int B, int T, int C,
                            int NH, cudaStream_t stream);
void attention_backward_set_cuda(__nv_bfloat16 *dqkv, const __nv_bfloat16 *dout, const __nv_bfloat16 *qkv,
                                 const __nv_bfloat16 *att, int B, int T, int C, int NH, cudaStream_t stream);
void attention_backward_set_cuda(float *dqkv, const float *dout, const float *qkv, const float *att, int B, int T,
                                 int C, int NH, cudaStream_t stream);
void flash_attention_forward_cuda(__nv_bfloat16 *out, float *lse, const __nv_bfloat16 *qkv, int B, int T, int C,
                                  int NH, cudaStream_t stream);
void flash_attention_backward_set_cuda(__nv_bfloat16 *dqkv, const __nv_bfloat16 *dout, const __nv_bfloat16 *qkv,
                                       const __nv_bfloat16 *out, const float *lse, int B, int T, int C, int NH,
                                       cudaStream_t stream);

void gelu_forward_cuda(__nv_bfloat16 *out, const __nv_bfloat16 *inp, size_t N, cudaStream_t stream);
void gelu_backward_inplace_cuda(__nv_bfloat16 *d, const __nv_bfloat16 *inp, size_t N, cudaStream_t stream);

void crossentropy_fused_cuda(float *losses, float *lse, __nv_bfloat16 *logits, const int *targets, float dloss, int B,
                             int T, int V, int Vp, cudaStream_t stream);
#endif

#endif
